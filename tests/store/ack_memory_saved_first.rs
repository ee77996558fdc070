//! A full shared ack budget makes room from partitions whose journal copy is current before it
//! writes any changed one out: an ack that needs room costs no storage write while such a
//! partition is left anywhere in the budget, and writes the least recently used changed one
//! only when none is.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ackstore::internals::ackset::MAX_PARTITION_BYTES;
use ackstore::{AckSetStats, Cursor, ManagedLedger, MemStorage, Position, Store};
use support::hooked::Hooked;
use support::topic::{append_n, earliest};

/// Entries per data ledger: each ledger is its own ack partition.
const PER_LEDGER: u64 = 4;
/// Partitions each of the two first cursors holds.
const LEDGERS: usize = 8;

struct Fleet {
    store: Store,
    hooked: Hooked,
    _topic: Arc<ManagedLedger>,
    /// Acked the first entry of ledgers `0..LEDGERS`, then (unless told not to) was flushed.
    saved: Cursor,
    /// Acked the first entry of ledgers `LEDGERS..2 * LEDGERS` after that flush.
    changed: Cursor,
    /// Has acked nothing yet.
    grower: Cursor,
    /// The first entry of every ledger.
    firsts: Vec<Position>,
}

impl Fleet {
    /// The steps above on a store whose shared budget is `limit`, then a read of `saved`'s
    /// partitions, so `changed` is the least recently used member.
    fn fill(limit: usize, flush: bool) -> Self {
        let hooked = Hooked::new(MemStorage::new());
        let store = Store::open_with_storage(
            Arc::new(hooked.clone()),
            support::config::store_shared_budget(PER_LEDGER, limit),
        )
        .unwrap();
        let topic = store.topic("persistent://t/ns/saved-first").unwrap();
        let ledgers = 2 * LEDGERS as u64 + 2;
        let firsts: Vec<Position> = append_n(&topic, PER_LEDGER * ledgers)
            .into_iter()
            .step_by(PER_LEDGER as usize)
            .collect();
        let open = |name: &str| topic.open_cursor(name, earliest()).unwrap();
        let (saved, changed, grower) = (open("saved"), open("changed"), open("grower"));
        // Never the first entry of the first ledger: mark-delete stays where it is.
        for &p in &firsts[1..=LEDGERS] {
            assert!(saved.ack(p).unwrap());
        }
        if flush {
            store.flush_all().unwrap();
        }
        for &p in &firsts[LEDGERS + 1..=2 * LEDGERS] {
            assert!(changed.ack(p).unwrap());
        }
        for &p in &firsts[1..=LEDGERS] {
            assert!(saved.is_acked(p).unwrap());
        }
        Self {
            store,
            hooked,
            _topic: topic,
            saved,
            changed,
            grower,
            firsts,
        }
    }

    /// Runs the same steps on a budget far larger to learn what they leave resident, then on a
    /// budget of exactly that: full, so the grower's first ack needs room.
    fn full(flush: bool) -> (Self, usize) {
        let probe = Self::fill(1 << 20, flush);
        let full = probe.store.ack_memory_stats().unwrap().resident_bytes;
        let fleet = Self::fill(full, flush);
        let s = fleet.store.ack_memory_stats().unwrap();
        assert_eq!((s.resident_bytes, s.released_bytes), (full, 0), "{s:?}");
        (fleet, full)
    }

    fn writes(&self) -> u64 {
        self.hooked.hooks.writes.load(Ordering::SeqCst)
    }

    /// The grower acks the first entry of the last ledger (a partition of its own).
    fn grow(&self) {
        assert!(self.grower.ack(*self.firsts.last().unwrap()).unwrap());
    }

    /// Every cursor still holds every ack it made, whatever it released.
    fn check_acks(&self) {
        for (i, &p) in self.firsts.iter().enumerate() {
            let saved = (1..=LEDGERS).contains(&i);
            let changed = (LEDGERS + 1..=2 * LEDGERS).contains(&i);
            assert_eq!(self.saved.is_acked(p).unwrap(), saved, "{p}");
            assert_eq!(self.changed.is_acked(p).unwrap(), changed, "{p}");
            assert_eq!(
                self.grower.is_acked(p).unwrap(),
                i == 2 * LEDGERS + 1,
                "{p}"
            );
        }
    }
}

fn ackset(cursor: &Cursor) -> AckSetStats {
    cursor.stats().unwrap().ackset
}

#[test]
fn an_ack_that_needs_room_drops_a_saved_partition_and_writes_nothing() {
    let (fleet, full) = Fleet::full(true);
    let (saved, changed) = (ackset(&fleet.saved), ackset(&fleet.changed));
    let writes = fleet.writes();
    fleet.grow();
    assert_eq!(
        fleet.writes(),
        writes,
        "the ack wrote a partition out while saved ones were resident"
    );
    let s = fleet.store.ack_memory_stats().unwrap();
    assert!(s.released_bytes > 0, "{s:?}");
    assert!(s.resident_bytes <= full + MAX_PARTITION_BYTES, "{s:?}");
    assert!(
        ackset(&fleet.saved).resident_bytes < saved.resident_bytes,
        "{saved:?} -> {:?}",
        ackset(&fleet.saved)
    );
    let after = ackset(&fleet.changed);
    assert_eq!(
        (after.resident_bytes, after.stores),
        (changed.resident_bytes, changed.stores),
        "the least recently used cursor's changed partitions were asked for: {after:?}"
    );
    fleet.check_acks();
}

#[test]
fn with_no_saved_partition_left_an_ack_writes_a_changed_one_out() {
    let (fleet, full) = Fleet::full(false);
    let writes = fleet.writes();
    let stores: u64 = [&fleet.saved, &fleet.changed]
        .iter()
        .map(|c| ackset(c).stores)
        .sum();
    fleet.grow();
    let s = fleet.store.ack_memory_stats().unwrap();
    assert!(s.released_bytes > 0, "{s:?}");
    assert!(s.resident_bytes <= full + MAX_PARTITION_BYTES, "{s:?}");
    let stored: u64 = [&fleet.saved, &fleet.changed]
        .iter()
        .map(|c| ackset(c).stores)
        .sum();
    assert!(stored > stores, "nothing was stored");
    assert!(fleet.writes() > writes);
    fleet.check_acks();
}

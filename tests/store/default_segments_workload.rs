//! A store whose journal has the default segments (16 MiB) and about 4 MiB of live ack state, so
//! that a few flush ticks roll a segment over: one topic of two data ledgers of 65,536 entries
//! (an ack partition each) and 256 cursors holding about half of every partition acknowledged at
//! random (about 8 KiB a partition in the journal). Every tick touches half the partitions, so
//! it rewrites about half the live bytes, and a rollover copies the rest forward. The model keeps what the application acked and what the last
//! `Ok` `flush_all` covered, per cursor.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ackstore::{
    Cursor, CursorOptions, JournalConfig, ManagedLedger, PersistMode, Position, Store, StoreConfig,
    StoreFlush,
};
use roaring::RoaringBitmap;
use support::workload::{Rng, first_missing, held_by_ledger};

/// Entries of a data ledger: one ack partition each.
pub(super) const PER_LEDGER: u64 = 65_536;
const LEDGERS: u64 = 2;
pub(super) const CURSORS: usize = 256;
/// Random acks of each partition before the ticks: about half its entries.
const PREPARED_ACKS: u64 = 45_000;

/// A cursor's acknowledged entries, by ledger.
pub(super) type Acks = BTreeMap<u64, RoaringBitmap>;

/// The store: default journal, no flusher pool, the default ack memory.
pub(super) fn config() -> StoreConfig {
    StoreConfig {
        ledger: support::config::topic(PER_LEDGER, PersistMode::MultiEntry, 64 << 20),
        journal: JournalConfig::default(),
        flusher_threads: 0,
        ..StoreConfig::default()
    }
}

fn cursor_name(k: usize) -> String {
    format!("sub-{k}")
}

/// Opens every cursor of `topic`.
fn open_cursors(topic: &ManagedLedger) -> Vec<Cursor> {
    (0..CURSORS)
        .map(|k| {
            topic
                .open_cursor(&cursor_name(k), CursorOptions::default())
                .expect("open a cursor")
        })
        .collect()
}

fn id32(entry_id: u64) -> u32 {
    u32::try_from(entry_id).expect("entries of these ledgers fit 32 bits")
}

/// The store, its topic and cursors, and the model.
pub(super) struct Workload {
    pub(super) store: Store,
    pub(super) topic: Arc<ManagedLedger>,
    cursors: Vec<Cursor>,
    dir: PathBuf,
    pub(super) ledgers: Vec<u64>,
    /// Per cursor: every entry the application acked.
    pub(super) truth: Vec<Acks>,
    /// Per cursor: what the last `Ok` `flush_all` covered.
    pub(super) flushed: Vec<Acks>,
    rng: Rng,
}

impl Workload {
    /// A new store in `dir`: the two ledgers appended and synced, every partition of every
    /// cursor acked about half, flushed.
    pub(super) fn prepare(dir: &Path, seed: u64) -> Self {
        let store = Store::open(dir, config()).expect("open the store");
        let topic = store.topic("t").expect("the topic");
        for i in 0..LEDGERS * PER_LEDGER {
            topic.append(&i.to_le_bytes()[..4]).expect("append");
        }
        topic.sync().expect("sync");
        let ledgers: Vec<u64> = topic
            .ledgers()
            .iter()
            .filter(|s| s.entries == PER_LEDGER)
            .map(|s| s.id)
            .collect();
        assert_eq!(ledgers.len() as u64, LEDGERS, "the ledgers");
        let cursors = open_cursors(&topic);
        let mut w = Self {
            store,
            topic,
            cursors,
            dir: dir.to_path_buf(),
            ledgers,
            truth: vec![Acks::new(); CURSORS],
            flushed: vec![Acks::new(); CURSORS],
            rng: Rng::new(seed),
        };
        w.ack_partitions(PREPARED_ACKS, false);
        w.flush().expect("the first flush_all");
        w
    }

    /// `up_to` random acks (at least one) of each partition of every cursor, by `ack_many`;
    /// of a partition in two at random when `half`.
    fn ack_partitions(&mut self, up_to: u64, half: bool) {
        for (k, cursor) in self.cursors.iter().enumerate() {
            for &l in &self.ledgers {
                if half && self.rng.chance(50) {
                    continue;
                }
                let n = 1 + self.rng.below(up_to);
                let group: Vec<Position> = (0..n)
                    .map(|_| Position::new(l, self.rng.below(PER_LEDGER)))
                    .collect();
                cursor.ack_many(&group).expect("ack_many");
                let acks = self.truth[k].entry(l).or_default();
                acks.extend(group.iter().map(|p| id32(p.entry_id)));
            }
        }
    }

    /// A few acks of half the partitions at random: the next tick rewrites those, and the
    /// others stay live where they are (a rollover copies them forward).
    pub(super) fn touch(&mut self) {
        self.ack_partitions(24, true);
    }

    /// `flush_all`; on `Ok`, everything acked is flushed.
    pub(super) fn flush(&mut self) -> ackstore::Result<StoreFlush> {
        let done = self.store.flush_all()?;
        self.flushed.clone_from(&self.truth);
        Ok(done)
    }

    /// Touches and flushes until the journal has rolled over at least `rollovers` segments.
    pub(super) fn tick_until_rollovers(&mut self, rollovers: u64) {
        while self.store.journal_stats().rollovers < rollovers {
            self.touch();
            self.flush().expect("a tick with room");
        }
    }

    /// Closes the store and opens it again (a new owner, which never appends to the segments
    /// it finds), its cursors too.
    pub(super) fn restart(self) -> Self {
        let dir = self.dir.clone();
        let (truth, flushed, ledgers, rng) = (
            self.truth.clone(),
            self.flushed.clone(),
            self.ledgers.clone(),
            self.rng.clone(),
        );
        self.close().expect("close the store");
        let store = Store::open(&dir, config()).expect("reopen the store");
        let topic = store.topic("t").expect("the topic");
        let cursors = open_cursors(&topic);
        Self {
            store,
            topic,
            cursors,
            dir,
            ledgers,
            truth,
            flushed,
            rng,
        }
    }

    /// Closes the cursors and the store.
    pub(super) fn close(self) -> ackstore::Result<()> {
        for c in &self.cursors {
            c.close()?;
        }
        drop(self.cursors);
        drop(self.topic);
        self.store.close()
    }
}

/// Opens `store`'s topic's cursors and checks each against the model: nothing acked beyond
/// `truth`, everything of `flushed` kept. `Err` with the first disagreement.
pub(super) fn check_cursors(
    store: &Store,
    ledgers: &[u64],
    truth: &[Acks],
    flushed: &[Acks],
) -> Result<(), String> {
    let topic = store.topic("t").map_err(|e| format!("the topic: {e}"))?;
    for k in 0..CURSORS {
        let cursor = topic
            .open_cursor(&cursor_name(k), CursorOptions::default())
            .map_err(|e| format!("open cursor {k}: {e}"))?;
        let got =
            held_by_ledger(&cursor, ledgers, PER_LEDGER).map_err(|e| format!("cursor {k}: {e}"))?;
        if let Some(p) = first_missing(&got, &truth[k]) {
            return Err(format!(
                "cursor {k}: {p} is acked and never was (invariant 1)"
            ));
        }
        if let Some(p) = first_missing(&flushed[k], &got) {
            return Err(format!(
                "cursor {k}: {p} was acked before an Ok flush_all and is lost (invariant 2)"
            ));
        }
        cursor
            .close()
            .map_err(|e| format!("close cursor {k}: {e}"))?;
    }
    Ok(())
}

//! Power cuts during a cursor workload driven through `ManagedLedger` and `Cursor`: appends,
//! individual acks out of order, cumulative acks, flushes, seeks, rewinds, LRU evictions (a
//! tiny budget), journal rollovers (tiny segments) and topic reopens, in both persist modes. The disk fails after every mutating operation in turn; the durable image and torn
//! images (part of every unsynced tail kept) are reopened, and the recovered acked set
//! (mark-delete plus individual acks) must be a subset of what the application had acked
//! (invariant 1) and a superset of what it had acked at the last flush, close or seek that
//! returned `Ok` (invariant 2).

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::MemStorage;
use ackstore::{Cursor, Position, Result};
use ackstore::{InitialPosition, ManagedLedger, PersistMode};
use support::crash::{Cut, Points, cut_everywhere_after, torn_image};
use support::topic::{append_n, at};

/// Entries per data ledger: every ledger is its own ack partition.
const PER_LEDGER: u64 = 8;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        usize::try_from(x % n.max(1) as u64).unwrap()
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    /// Append and sync this many entries.
    Append(u64),
    /// Individual acks of these many unacked entries, in random order.
    Acks(usize),
    /// Cumulative ack of the entry this many places after mark-delete.
    Cumulative(usize),
    Flush,
    /// Seek to the entry with this number (modulo the entries appended).
    Seek(usize),
    Rewind,
    /// Close the topic and open it again.
    Reopen,
}

fn workload(seed: u64, len: usize) -> Vec<Op> {
    let mut rng = Rng(seed);
    let mut ops = vec![Op::Append(40)];
    for _ in 0..len {
        ops.push(match rng.below(20) {
            0..=2 => Op::Append(1 + rng.below(24) as u64),
            3..=8 => Op::Acks(1 + rng.below(12)),
            9 => Op::Cumulative(rng.below(6)),
            10..=13 => Op::Flush,
            14 | 15 => Op::Seek(rng.below(1000)),
            16 => Op::Rewind,
            _ => Op::Reopen,
        });
    }
    ops.push(Op::Flush);
    ops
}

/// What the application was told: every entry appended and the acked ones.
#[derive(Debug, Clone, Default)]
struct Truth {
    appended: Vec<Position>,
    acked: BTreeSet<Position>,
}

impl Truth {
    fn unacked(&self) -> Vec<Position> {
        self.appended
            .iter()
            .copied()
            .filter(|p| !self.acked.contains(p))
            .collect()
    }
}

/// The bounds a recovery is checked against.
#[derive(Debug, Default)]
struct Bounds {
    /// The acked set before the operation in flight, and after it had it completed.
    truth: Truth,
    in_flight: Option<BTreeSet<Position>>,
    /// The acked set as of the last flush, close or seek that returned `Ok`; a seek in
    /// flight may have committed its own state instead.
    durable: BTreeSet<Position>,
    durable_in_flight: Option<BTreeSet<Position>>,
}

struct Session {
    disk: MemStorage,
    mode: PersistMode,
    topic: ManagedLedger,
    cursor: Cursor,
    rng: Rng,
    /// Rollovers and evictions seen, to prove the workload exercises them.
    rollovers: u64,
    evictions_stored: u64,
}

/// The topic on `disk`, its journal segments tiny.
fn open_rolling(disk: &MemStorage, mode: PersistMode) -> Result<ManagedLedger> {
    ManagedLedger::open_with_journal(
        Arc::new(disk.clone()),
        support::config::topic(PER_LEDGER, mode, 0),
        ackstore::JournalConfig {
            segment_bytes: 4096,
        },
    )
}

impl Session {
    fn open(disk: &MemStorage, mode: PersistMode) -> Result<(ManagedLedger, Cursor)> {
        let topic = open_rolling(disk, mode)?;
        let cursor = topic.open_cursor("sub", at(InitialPosition::Earliest, false))?;
        Ok((topic, cursor))
    }

    fn count(&mut self) -> Result<()> {
        let stats = self.cursor.stats()?;
        let journal = self.topic.journal_stats().map_or(0, |j| j.rollovers);
        self.rollovers += journal;
        self.evictions_stored += stats.ackset.stores;
        Ok(())
    }

    fn apply(&mut self, op: Op, b: &mut Bounds) -> Result<()> {
        let t = &mut b.truth;
        match op {
            Op::Append(n) => {
                let mut appended = Vec::new();
                for _ in 0..n {
                    appended.push(self.topic.append(b"entry")?);
                }
                self.topic.sync()?;
                t.appended.extend(appended);
            }
            Op::Acks(n) => {
                let mut unacked = t.unacked();
                for _ in 0..n.min(unacked.len()) {
                    let p = unacked.swap_remove(self.rng.below(unacked.len()));
                    let mut after = t.acked.clone();
                    after.insert(p);
                    b.in_flight = Some(after);
                    self.cursor.ack(p)?;
                    t.acked.insert(p);
                }
            }
            Op::Cumulative(k) => {
                let Some(&p) = t.unacked().get(k) else {
                    return Ok(());
                };
                let after: BTreeSet<_> = t.appended.iter().copied().filter(|q| *q <= p).collect();
                let after = &t.acked | &after;
                b.in_flight = Some(after.clone());
                self.cursor.ack_cumulative(p)?;
                t.acked = after;
            }
            Op::Flush => {
                self.cursor.flush()?;
                b.durable = t.acked.clone();
            }
            Op::Seek(i) => {
                if t.appended.is_empty() {
                    return Ok(());
                }
                let p = t.appended[i % t.appended.len()];
                let after: BTreeSet<_> = t.appended.iter().copied().filter(|q| *q < p).collect();
                b.in_flight = Some(after.clone());
                b.durable_in_flight = Some(after.clone());
                self.cursor.seek(p)?;
                t.acked = after;
                b.durable = t.acked.clone();
            }
            Op::Rewind => self.cursor.rewind()?,
            Op::Reopen => {
                self.count()?;
                self.topic.close()?;
                b.durable = t.acked.clone();
                let (topic, cursor) = Self::open(&self.disk, self.mode)?;
                (self.topic, self.cursor) = (topic, cursor);
                // Close flushed everything: the reopened cursor holds exactly the truth.
                assert_eq!(
                    acked_set(&self.cursor, &t.appended)?,
                    t.acked,
                    "after a reopen"
                );
            }
        }
        b.in_flight = None;
        b.durable_in_flight = None;
        Ok(())
    }
}

/// Every appended entry the cursor reports as acknowledged.
fn acked_set(cursor: &Cursor, appended: &[Position]) -> Result<BTreeSet<Position>> {
    let mut set = BTreeSet::new();
    for &p in appended {
        if cursor.is_acked(p)? {
            set.insert(p);
        }
    }
    Ok(set)
}

/// Runs `ops` until the first error; returns the bounds and the session's counters.
fn run(
    disk: &MemStorage,
    mode: PersistMode,
    ops: &[Op],
    seed: u64,
) -> (Bounds, Option<(u64, u64)>) {
    let mut bounds = Bounds::default();
    let Ok((topic, cursor)) = Session::open(disk, mode) else {
        return (bounds, None);
    };
    let mut s = Session {
        disk: disk.clone(),
        mode,
        topic,
        cursor,
        rng: Rng(seed ^ 0x9e37_79b9),
        rollovers: 0,
        evictions_stored: 0,
    };
    for &op in ops {
        if s.apply(op, &mut bounds).is_err() {
            return (bounds, None);
        }
    }
    let counted = s.count().ok().map(|()| (s.rollovers, s.evictions_stored));
    (bounds, counted)
}

fn check(image: &MemStorage, mode: PersistMode, b: &Bounds, what: &str) {
    let topic =
        open_rolling(image, mode).unwrap_or_else(|e| panic!("{what}: topic does not open: {e}"));
    let recovered = if topic.cursor_names().is_empty() {
        BTreeSet::new()
    } else {
        let cursor = topic
            .open_cursor("sub", at(InitialPosition::Latest, false))
            .unwrap_or_else(|e| panic!("{what}: cursor does not open: {e}"));
        acked_set(&cursor, &b.truth.appended)
            .unwrap_or_else(|e| panic!("{what}: acks do not load: {e}"))
    };
    let within_truth = recovered.is_subset(&b.truth.acked)
        || b.in_flight.as_ref().is_some_and(|a| recovered.is_subset(a));
    assert!(
        within_truth,
        "{what}: recovered acks beyond the truth: {:?}",
        recovered.difference(&b.truth.acked).collect::<Vec<_>>()
    );
    let keeps_flushed = recovered.is_superset(&b.durable)
        || b.durable_in_flight
            .as_ref()
            .is_some_and(|d| recovered.is_superset(d));
    assert!(
        keeps_flushed,
        "{what}: flushed acks lost: {:?}",
        b.durable.difference(&recovered).collect::<Vec<_>>()
    );
    topic
        .close()
        .unwrap_or_else(|e| panic!("{what}: close after recovery: {e}"));
}

fn power_cut_after_every_operation(mode: PersistMode, seed: u64) {
    let ops = workload(seed, 150);
    // Debug builds check every 7th cut to stay fast; release builds (CI) check every one.
    let clean = cut_everywhere_after(
        Points::every_in_release(7),
        |_| (),
        |disk, ()| run(disk, mode, &ops, seed),
        |disk, Cut { n, .. }, (bounds, _)| {
            check(
                &disk.durable_image(),
                mode,
                &bounds,
                &format!("{mode:?} cut at {n}"),
            );
            check(
                &torn_image(disk, |unsynced| unsynced / 2),
                mode,
                &bounds,
                &format!("{mode:?} cut at {n}, half the unsynced tail kept"),
            );
            check(
                &torn_image(disk, |unsynced| unsynced),
                mode,
                &bounds,
                &format!("{mode:?} cut at {n}, the whole unsynced tail kept"),
            );
        },
    );
    let (rollovers, evictions) = clean.result.1.expect("the workload runs without faults");
    assert!(
        rollovers > 0 && evictions > 0,
        "{rollovers} rollovers, {evictions} evictions"
    );
    let total = clean.total;
    assert!(total > 300, "{total} writes");
}

#[test]
fn multi_entry_acks_survive_a_power_cut_after_any_operation_within_the_bounds() {
    for seed in [11, 12] {
        power_cut_after_every_operation(PersistMode::MultiEntry, seed);
    }
}

#[test]
fn single_entry_acks_survive_a_power_cut_after_any_operation_within_the_bounds() {
    for seed in [23, 24] {
        power_cut_after_every_operation(PersistMode::SingleEntry, seed);
    }
}

/// Acks individual entries, flushes, seeks back over them, and loses power right after the
/// seek returned (or at any write of the seek): the cleared acks never come back.
#[test]
fn a_crash_right_after_a_seek_never_brings_back_a_cleared_ack() {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        let prepare = |disk: &MemStorage| -> (ManagedLedger, Cursor, Vec<Position>) {
            let topic = ManagedLedger::open_with_storage(
                Arc::new(disk.clone()),
                support::config::topic(PER_LEDGER, mode, 0),
            )
            .unwrap();
            let p = append_n(&topic, 40);
            topic.sync().unwrap();
            let c = topic
                .open_cursor("sub", at(InitialPosition::Earliest, false))
                .unwrap();
            for i in (5..40).step_by(2) {
                c.ack(p[i]).unwrap();
            }
            c.flush().unwrap();
            (topic, c, p)
        };
        let clean = cut_everywhere_after(
            Points::EVERY,
            prepare,
            |_, (topic, c, p)| {
                let sought = c.seek(Position::new(0, 0));
                (topic, c, p, sought)
            },
            |disk, Cut { n, .. }, (_topic, _c, p, sought)| {
                for image in [disk.durable_image(), torn_image(disk, |u| u)] {
                    let topic = ManagedLedger::open_with_storage(
                        Arc::new(image),
                        support::config::topic(PER_LEDGER, mode, 0),
                    )
                    .unwrap();
                    let c = topic
                        .open_cursor("sub", at(InitialPosition::Latest, false))
                        .unwrap();
                    let acked = acked_set(&c, &p).unwrap();
                    if sought.is_ok() {
                        assert!(acked.is_empty(), "{mode:?} cut {n}: {acked:?} came back");
                        assert_eq!(c.epoch().unwrap(), 1);
                    }
                    // Either the seek committed (nothing acked) or not (all flushed acks kept).
                    let flushed: BTreeSet<_> = (5..40).step_by(2).map(|i| p[i]).collect();
                    assert!(
                        acked.is_empty() || acked == flushed,
                        "{mode:?} cut {n}: a mix of states: {acked:?}"
                    );
                    topic.close().unwrap();
                }
            },
        );
        assert!(clean.result.3.is_ok());
        assert!(clean.total > 0);
    }
}

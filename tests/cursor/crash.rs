//! Power cuts during a cursor workload driven through `ManagedLedger` and `Cursor`: appends,
//! individual acks out of order, cumulative acks, flushes, seeks, rewinds, LRU evictions (a
//! tiny budget), journal rollovers (tiny segments) and topic reopens, in both persist modes. The
//! disk fails after every mutating operation in turn (every cut point's disk recorded from one
//! run, `support::crash::cut_everywhere_recorded`); the durable image and torn images (part of
//! every unsynced tail kept) are reopened, and the recovered acked set (mark-delete plus
//! individual acks) must be a subset of what the application had acked (invariant 1) and a
//! superset of what it had acked at the last flush, close or seek that returned `Ok`
//! (invariant 2).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::MemStorage;
use ackstore::Storage;
use ackstore::{Cursor, Position, Result};
use ackstore::{InitialPosition, ManagedLedger, PersistMode};
use support::crash::{
    Cut, Points, Shown, cut_everywhere_after, cut_everywhere_recorded,
    cut_everywhere_recorded_after, torn_image,
};
use support::topic::{append_n, at};
use support::workload::seed_from_env;

/// Entries per data ledger: every ledger is its own ack partition.
const PER_LEDGER: u64 = 8;

/// The sweeps run the workload again with the power cut at one cut point in this many.
const RERUN_EVERY: usize = 8;

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
#[derive(Debug, Clone, Default)]
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
    storage: Arc<dyn Storage>,
    mode: PersistMode,
    topic: ManagedLedger,
    cursor: Cursor,
    rng: Rng,
    /// Rollovers and evictions seen, to prove the workload exercises them.
    rollovers: u64,
    evictions_stored: u64,
}

/// The topic on `storage`, its journal segments tiny.
fn open_rolling(storage: Arc<dyn Storage>, mode: PersistMode) -> Result<ManagedLedger> {
    ManagedLedger::open_with_journal(
        storage,
        support::config::topic(PER_LEDGER, mode, 0),
        ackstore::JournalConfig {
            segment_bytes: 4096,
        },
    )
}

impl Session {
    fn open(storage: &Arc<dyn Storage>, mode: PersistMode) -> Result<(ManagedLedger, Cursor)> {
        let topic = open_rolling(storage.clone(), mode)?;
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

    /// Applies `op`, keeping `b` current around every call that may reach the storage (the
    /// recording harness reads it there).
    fn apply(&mut self, op: Op, b: &Shown<Bounds>) -> Result<()> {
        match op {
            Op::Append(n) => {
                let mut appended = Vec::new();
                for _ in 0..n {
                    appended.push(self.topic.append(b"entry")?);
                }
                self.topic.sync()?;
                b.update(|b| b.truth.appended.extend(appended));
            }
            Op::Acks(n) => {
                let mut unacked = b.read(|b| b.truth.unacked());
                for _ in 0..n.min(unacked.len()) {
                    let p = unacked.swap_remove(self.rng.below(unacked.len()));
                    b.update(|b| {
                        let mut after = b.truth.acked.clone();
                        after.insert(p);
                        b.in_flight = Some(after);
                    });
                    self.cursor.ack(p)?;
                    b.update(|b| b.truth.acked.insert(p));
                }
            }
            Op::Cumulative(k) => {
                let Some(p) = b.read(|b| b.truth.unacked().get(k).copied()) else {
                    return Ok(());
                };
                let after = b.read(|b| {
                    let upto: BTreeSet<_> = b
                        .truth
                        .appended
                        .iter()
                        .copied()
                        .filter(|q| *q <= p)
                        .collect();
                    &b.truth.acked | &upto
                });
                b.update(|b| b.in_flight = Some(after.clone()));
                self.cursor.ack_cumulative(p)?;
                b.update(|b| b.truth.acked = after);
            }
            Op::Flush => {
                self.cursor.flush()?;
                b.update(|b| b.durable = b.truth.acked.clone());
            }
            Op::Seek(i) => {
                let Some(p) = b.read(|b| {
                    let appended = &b.truth.appended;
                    (!appended.is_empty()).then(|| appended[i % appended.len()])
                }) else {
                    return Ok(());
                };
                let after: BTreeSet<_> = b.read(|b| {
                    b.truth
                        .appended
                        .iter()
                        .copied()
                        .filter(|q| *q < p)
                        .collect()
                });
                b.update(|b| {
                    b.in_flight = Some(after.clone());
                    b.durable_in_flight = Some(after.clone());
                });
                self.cursor.seek(p)?;
                b.update(|b| {
                    b.truth.acked = after.clone();
                    b.durable = after;
                });
            }
            Op::Rewind => self.cursor.rewind()?,
            Op::Reopen => {
                self.count()?;
                self.topic.close()?;
                b.update(|b| b.durable = b.truth.acked.clone());
                let (topic, cursor) = Self::open(&self.storage, self.mode)?;
                (self.topic, self.cursor) = (topic, cursor);
                // Close flushed everything: the reopened cursor holds exactly the truth.
                let truth = b.read(|b| b.truth.clone());
                assert_eq!(
                    acked_set(&self.cursor, &truth.appended)?,
                    truth.acked,
                    "after a reopen"
                );
            }
        }
        b.update(|b| {
            b.in_flight = None;
            b.durable_in_flight = None;
        });
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

/// Runs `ops` until the first error, showing its bounds in `bounds`; returns the session's
/// counters.
fn run(
    storage: Arc<dyn Storage>,
    mode: PersistMode,
    ops: &[Op],
    seed: u64,
    bounds: &Shown<Bounds>,
) -> Option<(u64, u64)> {
    let (topic, cursor) = Session::open(&storage, mode).ok()?;
    let mut s = Session {
        storage,
        mode,
        topic,
        cursor,
        rng: Rng(seed ^ 0x9e37_79b9),
        rollovers: 0,
        evictions_stored: 0,
    };
    for &op in ops {
        s.apply(op, bounds).ok()?;
    }
    s.count().ok().map(|()| (s.rollovers, s.evictions_stored))
}

fn check(image: &MemStorage, mode: PersistMode, b: &Bounds, what: &str) {
    let topic = open_rolling(Arc::new(image.clone()), mode)
        .unwrap_or_else(|e| panic!("{what}: topic does not open: {e}"));
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
    // Every cut point's disk is checked against the bounds shown when the power went off, from
    // one recorded run; at every 8th cut point (from an offset the crash seed picks) the
    // workload also runs again with the power cut there, so what it does once the disk fails
    // is checked too.
    let crash_seed = seed_from_env("ACKSTORE_CRASH_SEED");
    // Shown with any failure, a panic inside the workload included.
    println!("ACKSTORE_CRASH_SEED={crash_seed}");
    let rerun = Points::one_in(RERUN_EVERY, crash_seed);
    let clean = cut_everywhere_recorded(
        rerun,
        |storage, bounds| run(storage, mode, &ops, seed, bounds),
        |disk, Cut { n, .. }, bounds| {
            let cut = format!("{mode:?} cut at {n} (ACKSTORE_CRASH_SEED={crash_seed})");
            check(&disk.durable_image(), mode, bounds, &cut);
            check(
                &torn_image(disk, |unsynced| unsynced / 2),
                mode,
                bounds,
                &format!("{cut}, half the unsynced tail kept"),
            );
            check(
                &torn_image(disk, |unsynced| unsynced),
                mode,
                bounds,
                &format!("{cut}, the whole unsynced tail kept"),
            );
        },
    );
    let (rollovers, evictions) = clean.result.expect("the workload runs without faults");
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

/// The recording sweep hands its check, at every cut point, what a run cut there hands it: the
/// same durable and live bytes of every file a power cut can keep, and the same state shown,
/// for a workload of every kind of storage operation (rewrites, an unsynced tail, a shortened
/// file, a rename, reads), started after a prepared file whose writes are not cut points.
#[test]
fn the_recorded_sweep_checks_the_disks_and_states_of_runs_cut_at_every_point() {
    fn workload(storage: &Arc<dyn Storage>, done: &Shown<Vec<&'static str>>) -> Result<()> {
        let step = |what| done.update(|d| d.push(what));
        let a = storage.create("a")?;
        a.write_all_at(b"hello", 0)?;
        a.sync_data()?;
        storage.sync_dir()?;
        step("a durable");
        a.write_all_at(b" world", 5)?;
        let b = storage.create("b")?;
        b.write_all_at(b"xyz", 0)?;
        b.sync_data()?;
        storage.sync_dir()?;
        step("b durable");
        a.set_len(3)?;
        a.write_all_at(b"J", 0)?;
        step("a rewritten");
        assert_eq!(a.size()?, 3);
        storage.rename("b", "c")?;
        step("b renamed");
        let mut read = [0; 3];
        storage.open("c")?.read_exact_at(&mut read, 0)?;
        storage.sync_dir()?;
        step("rename durable");
        Ok(())
    }
    // (files with their durable and live bytes, state), per cut point, per pass.
    type Seen = Vec<(String, Vec<u8>, Vec<u8>)>;
    let mut passes: BTreeMap<u64, Vec<(Seen, Vec<&'static str>)>> = BTreeMap::new();
    let clean = cut_everywhere_recorded_after(
        Points::EVERY,
        |_, storage| {
            let prepared = storage.create("prepared").expect("create");
            prepared.write_all_at(b"set up", 0).expect("write");
            prepared.sync_data().expect("sync");
            storage.sync_dir().expect("sync dir");
            storage
        },
        |storage, done| workload(&storage, done),
        |disk, Cut { n, .. }, done| {
            let mut files = Vec::new();
            let _ = disk.crash_image(|name, durable, live| {
                files.push((name.to_owned(), durable.to_vec(), live.to_vec()));
                Vec::new()
            });
            passes.entry(n).or_default().push((files, done.clone()));
        },
    );
    clean.result.expect("the workload runs without a cut");
    assert_eq!(clean.total, 13);
    assert_eq!(passes.len(), 14);
    for (n, seen) in &passes {
        // The recorded pass, then the run cut at `n`.
        assert_eq!(seen.len(), 2, "cut {n}");
        assert_eq!(seen[0], seen[1], "cut {n}");
    }
    // The cuts reach every state: nothing shown before the first sync, everything at the end;
    // the prepared file is on every cut disk.
    assert!(
        passes
            .values()
            .all(|seen| seen[0].0.iter().any(|f| f.0 == "prepared"))
    );
    assert!(passes[&0][0].1.is_empty());
    assert_eq!(passes[&clean.total][0].1.len(), 5);
}

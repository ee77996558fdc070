//! Process kill in the middle of journal rollovers with the default segments (16 MiB): a store of
//! one topic of four data ledgers of 65,536 entries (one ack partition each) and 128 cursors,
//! each holding thousands of random holes in every partition (about 8 KiB a partition, so about
//! 4 MiB live). The child touches half the partitions at random with a small `ack_many` group
//! each, then `Store::flush_all`: each tick rewrites about half the live bytes, so the segments
//! pass twice the live bytes plus one segment every few ticks and the oldest one rolls over
//! (the live records of the untouched partitions copied forward, the catalog's list changed,
//! its file deleted). The parent (the
//! kill loop of `sigkill_child`, with a window of a few ticks) kills the child with SIGKILL at a
//! random moment, reopens the store, checks every cursor against the log and runs `verify`
//! (a kill is never damage).
//!
//! A child whose seed is odd (about half of them) opens the store with the cursors sharing an ack budget of a
//! quarter of the live bytes, so that most touches evict a dirty partition to the journal (a
//! pending record, which a rollover copies forward too) and load another; the others, and the
//! parent's checks, with the default ack memory (nothing evicted).
//!
//! The log, one whole line a `write`: `M k L s n` *before* an `ack_many` of cursor `k` of the `n`
//! positions of ledger `L` that `Rng::new(s)` draws ([`group`]); `f` before a `flush_all` and
//! `F r` after it returned `Ok` (`r`: the rollovers the child's journal made since it opened);
//! `O` once the child opened the store. The preparation logs its acks the same way. Checked
//! after every kill, over every entry of every cursor:
//! - invariant 1: nothing is acked that the log does not show acked;
//! - invariant 2: every ack logged before the last `F` is present.
//!
//! A fifth of `KILL_ROUNDS` sets the number of kills (10 by default, as `KILL_ROUNDS` is 50;
//! each round reopens 4 MiB of live state); `ACKSTORE_KILL_SEED` repeats a run's choices.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ackstore::{
    CursorOptions, JournalConfig, ManagedLedger, PersistMode, Position, Store, StoreConfig,
};
use roaring::RoaringBitmap;

use super::sigkill_child::{
    Log, Workload, kill_rounds_from_env, kill_rounds_within, new_log_lines, run_kill_test,
};
use crate::support;
use support::workload::{Rng, first_missing, held_by_ledger};

/// Entries of a data ledger: one ack partition each.
const PER_LEDGER: u64 = 65_536;
const LEDGERS: u64 = 4;
const CURSORS: usize = 128;
/// Random acks of each partition before the first child: about half its entries, which the
/// journal keeps in about 8 KiB.
const PREPARED_ACKS: u64 = 45_000;
/// The kill comes within this long after the child opened the store: a few ticks.
const KILL_WINDOW: Duration = Duration::from_millis(1500);

/// Whether the cursors share a small ack budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Memory {
    /// Each cursor has the default ack memory: nothing is evicted.
    Default,
    /// The cursors share a budget of a quarter of the live bytes.
    SharedQuarter,
}

impl Memory {
    /// The memory of the child started with `seed`: a child of an odd seed shares a budget.
    fn of_child(seed: u64) -> Self {
        if seed.is_multiple_of(2) {
            Self::Default
        } else {
            Self::SharedQuarter
        }
    }
}

const TEST_NAME: &str =
    "sigkill_during_rollovers_of_default_segments_keeps_flushed_acks_and_invents_none";

#[test]
fn sigkill_during_rollovers_of_default_segments_keeps_flushed_acks_and_invents_none() {
    run_kill_test(
        &TEST_NAME,
        |dir, log, seed| child(Memory::of_child(seed), dir, log, seed),
        |seed| {
            let rounds = kill_rounds_from_env(50) / 5;
            let mut parent = Parent::new();
            kill_rounds_within(&mut parent, rounds, seed, KILL_WINDOW)
                .and_then(|()| parent.enough(rounds))
        },
    );
}

/// Opens the store (default journal segments, no flusher pool) and its topic.
fn open(dir: &Path, memory: Memory) -> ackstore::Result<(Store, Arc<ManagedLedger>)> {
    let store = Store::open(
        dir,
        StoreConfig {
            ledger: support::config::topic(PER_LEDGER, PersistMode::MultiEntry, 64 << 20),
            journal: JournalConfig::default(),
            ack_memory_bytes: match memory {
                Memory::Default => None,
                Memory::SharedQuarter => Some(1 << 20),
            },
            flusher_threads: 0,
            open_files: None,
        },
    )?;
    let topic = store.topic("t")?;
    Ok((store, topic))
}

fn cursor_name(k: usize) -> String {
    format!("sub-{k}")
}

/// The full data ledgers of the topic, in order (each open of the topic starts an empty one).
fn full_ledgers(topic: &ManagedLedger) -> Vec<u64> {
    topic
        .ledgers()
        .iter()
        .filter(|span| span.entries == PER_LEDGER)
        .map(|span| span.id)
        .collect()
}

/// The `n` positions of ledger `ledger` that seed `s` draws.
fn group(ledger: u64, s: u64, n: u64) -> Vec<Position> {
    let mut rng = Rng::new(s);
    (0..n)
        .map(|_| Position::new(ledger, rng.below(PER_LEDGER)))
        .collect()
}

/// Logs and makes an `ack_many` of cursor `k` of `n` random positions of `ledger`.
fn ack_group(
    log: &mut Log,
    rng: &mut Rng,
    cursor: &ackstore::Cursor,
    (k, ledger, n): (usize, u64, u64),
) {
    let s = rng.next_u64();
    log.line(&format!("M {k} {ledger} {s} {n}"));
    cursor
        .ack_many(&group(ledger, s, n))
        .unwrap_or_else(|e| log.fail("ack_many", &e));
}

fn child(memory: Memory, dir: &Path, log_path: &Path, seed: u64) -> ! {
    let mut rng = Rng::new(seed);
    let mut log = Log::open(log_path);
    let (store, topic) = open(dir, memory).unwrap_or_else(|e| log.fail("open", &e));
    let ledgers = full_ledgers(&topic);
    let cursors: Vec<_> = (0..CURSORS)
        .map(|k| {
            topic
                .open_cursor(&cursor_name(k), CursorOptions::default())
                .unwrap_or_else(|e| log.fail("open_cursor", &e))
        })
        .collect();
    log.line("O");
    loop {
        for (k, cursor) in cursors.iter().enumerate() {
            for &ledger in &ledgers {
                if rng.chance(50) {
                    continue;
                }
                let n = 1 + rng.below(24);
                ack_group(&mut log, &mut rng, cursor, (k, ledger, n));
            }
        }
        log.line("f");
        store
            .flush_all()
            .unwrap_or_else(|e| log.fail("flush_all", &e));
        log.line(&format!("F {}", store.journal_stats().rollovers));
    }
}

/// A cursor's acknowledged entries, by ledger.
type Acks = BTreeMap<u64, RoaringBitmap>;

#[derive(Debug)]
struct Parent {
    ledgers: Vec<u64>,
    /// Per cursor: everything the log shows acknowledged.
    truth: Vec<Acks>,
    /// Per cursor: what the last `F` committed.
    committed: Vec<Acks>,
    offset: u64,
    counts: Counts,
}

#[derive(Debug, Default)]
struct Counts {
    /// `flush_all` calls that returned `Ok` in the children.
    ticks: u64,
    /// Rollovers the children's journals made (as of their last `F`).
    rollovers: u64,
    /// Kills that came between an `f` and its `F`: inside a tick, where rollovers run.
    kills_in_a_tick: u64,
    /// The rollovers of this child so far, and whether its last line was `f`.
    child_rollovers: u64,
    in_tick: bool,
    /// The most segment files and bytes a reopen found.
    most_segments: u64,
    most_segment_bytes: u64,
    /// The least live bytes a reopen found.
    least_live_bytes: u64,
}

impl Parent {
    fn new() -> Self {
        Self {
            ledgers: Vec::new(),
            truth: vec![Acks::new(); CURSORS],
            committed: vec![Acks::new(); CURSORS],
            offset: 0,
            counts: Counts {
                least_live_bytes: u64::MAX,
                ..Counts::default()
            },
        }
    }

    fn apply(&mut self, line: &str) -> Result<(), String> {
        let bad = || format!("bad log line {line:?}");
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["E", ..] => return Err(format!("the child failed: {line}")),
            ["O"] => {}
            ["M", k, l, s, n] => {
                let parse = |w: &str| w.parse::<u64>().map_err(|_| bad());
                let k: usize = k.parse().map_err(|_| bad())?;
                let (l, s, n) = (parse(l)?, parse(s)?, parse(n)?);
                let acks = self.truth.get_mut(k).ok_or_else(bad)?.entry(l).or_default();
                for p in group(l, s, n) {
                    acks.insert(u32::try_from(p.entry_id).expect("small"));
                }
            }
            ["f"] => self.counts.in_tick = true,
            ["F", r] => {
                self.counts.in_tick = false;
                self.counts.ticks += 1;
                self.counts.child_rollovers = r.parse().map_err(|_| bad())?;
                self.committed.clone_from(&self.truth);
            }
            _ => return Err(bad()),
        }
        Ok(())
    }

    fn enough(&self, rounds: usize) -> Result<(), String> {
        let c = &self.counts;
        eprintln!("{rounds} kills: {c:?}");
        if rounds >= 10 && (c.rollovers == 0 || c.kills_in_a_tick == 0) {
            return Err(format!(
                "the children made no rollover, or no kill came inside a tick: {c:?}"
            ));
        }
        Ok(())
    }

    /// Checks every cursor of the reopened store against the log; takes what each recovered
    /// as the next child's start.
    fn check_cursors(&mut self, topic: &ManagedLedger) -> Result<(), String> {
        for k in 0..CURSORS {
            let cursor = topic
                .open_cursor(&cursor_name(k), CursorOptions::default())
                .map_err(|e| format!("open cursor {k}: {e}"))?;
            let got = held_by_ledger(&cursor, &self.ledgers, PER_LEDGER)
                .map_err(|e| format!("cursor {k}: {e}"))?;
            if let Some(p) = first_missing(&got, &self.truth[k]) {
                return Err(format!(
                    "cursor {k}: {p} is acked but the log never acked it (invariant 1)"
                ));
            }
            if let Some(p) = first_missing(&self.committed[k], &got) {
                return Err(format!(
                    "cursor {k}: {p} was acked before an Ok flush_all and is lost (invariant 2)"
                ));
            }
            self.truth[k].clone_from(&got);
            self.committed[k] = got;
            cursor
                .close()
                .map_err(|e| format!("close cursor {k}: {e}"))?;
        }
        Ok(())
    }
}

impl Workload for Parent {
    /// The topic's four full ledgers, synced; `PREPARED_ACKS` random acks of every partition
    /// of every cursor, flushed and logged.
    fn prepare(&mut self, dir: &Path, log_path: &Path) -> Result<(), String> {
        let (store, topic) = open(dir, Memory::Default).map_err(|e| format!("prepare: {e}"))?;
        for i in 0..LEDGERS * PER_LEDGER {
            topic
                .append(&i.to_le_bytes())
                .map_err(|e| format!("prepare: append: {e}"))?;
        }
        topic.sync().map_err(|e| format!("prepare: sync: {e}"))?;
        self.ledgers = full_ledgers(&topic);
        if self.ledgers.len() != LEDGERS as usize {
            return Err(format!("prepare: ledgers {:?}", self.ledgers));
        }
        let mut log = Log::open(log_path);
        let mut rng = Rng::new(0x5eed);
        for k in 0..CURSORS {
            let cursor = topic
                .open_cursor(&cursor_name(k), CursorOptions::default())
                .map_err(|e| format!("prepare: open_cursor: {e}"))?;
            for &ledger in &self.ledgers {
                ack_group(&mut log, &mut rng, &cursor, (k, ledger, PREPARED_ACKS));
            }
        }
        log.line("f");
        store
            .flush_all()
            .map_err(|e| format!("prepare: flush_all: {e}"))?;
        log.line("F 0");
        store.close().map_err(|e| format!("prepare: close: {e}"))
    }

    fn test_name(&self) -> String {
        support::harness::test_path(module_path!(), TEST_NAME)
    }

    fn apply_log(&mut self, path: &Path) -> Result<(), String> {
        self.counts.child_rollovers = 0;
        new_log_lines(path, &mut self.offset)?
            .lines()
            .try_for_each(|line| self.apply(line))?;
        let c = &mut self.counts;
        c.rollovers += c.child_rollovers;
        if c.in_tick {
            c.kills_in_a_tick += 1;
            c.in_tick = false;
        }
        Ok(())
    }

    fn check(&mut self, dir: &Path, _log: &Path, round: usize) -> Result<(), String> {
        let (store, topic) =
            open(dir, Memory::Default).map_err(|e| format!("round {round}: reopen: {e}"))?;
        let stats = store.journal_stats();
        let c = &mut self.counts;
        c.most_segments = c.most_segments.max(stats.segments);
        c.most_segment_bytes = c.most_segment_bytes.max(stats.segment_bytes);
        c.least_live_bytes = c.least_live_bytes.min(stats.live_bytes);
        self.check_cursors(&topic)
            .map_err(|e| format!("round {round}: {e}"))?;
        drop(topic);
        store
            .close()
            .map_err(|e| format!("round {round}: close: {e}"))
    }
}

//! Process kill on a store of many cursors, aimed at its flush ticks: a child process (this test
//! binary, run again with the test's exact name) opens a store of `topics x cursors` cursors
//! (2,000 by default; `KILL_SCALE_TOPICS` and `KILL_SCALE_CURSORS` take it to 100,000) that all
//! share one ack budget of `KILL_SCALE_BUDGET_PER_CURSOR` bytes a cursor (150 by default, so the
//! budget is full and partitions are written out and loaded back all the time), in a journal of
//! small segments (`KILL_SCALE_SEGMENT_BYTES`, 1 MiB by default: ticks roll segments over).
//! Its topics roll a data ledger every 16 entries, so a cursor's acks spread over several
//! partitions. The child then loops: a random ack on every cursor (`ack`, an `ack_many` group,
//! sometimes the entry right after mark-delete, sometimes a cumulative ack a little past it),
//! so that every cursor is dirty; a few appends and syncs; a few cursor flushes and closes;
//! then `Store::flush_all` (a tick of every cursor). A second thread acks meanwhile on cursors
//! of its own (every eighth), while ticks run; the store's flusher pool ticks too.
//!
//! The child's log (one per child), each line one `write`: `K k L:E`, `M k L:E ...`, `C k L:E`
//! *before* an ack, `ack_many` or cumulative ack of cursor `k` by the main thread (lines of a
//! chunk of cursors are written together before their calls); `Q n K|M|C k ...` before the
//! second thread's `n`th call; `A t L:E` after an append to topic `t` returned, `Y t` after
//! its sync returned `Ok`; `F k` after a flush or close of cursor `k` returned `Ok`; `S n`
//! before tick `n` (`flush_all`) and `T n d us ...` after it returned `Ok`, fsynced, where
//! the second thread had finished its calls before number `d` when the tick began. So at a
//! `T` line every main-thread ack logged before it is committed, and the second thread's calls
//! numbered below `d`.
//!
//! The parent kills the child with SIGKILL, mostly at a random moment of a tick (it waits for
//! the child's `S n` of a random `n` and sleeps for a random part of the ticks' measured
//! duration), sometimes anywhere. Then it reopens the store, opens every cursor and checks, for
//! every entry of every topic:
//! - every entry synced before the kill is there;
//! - invariant 1: nothing is acked (by mark-delete or an acked range) that the log never
//!   acked, and neither mark-delete nor a range reaches past the topic's entries;
//! - invariant 2: everything acked as of the cursor's last `T` (or `F`) is still acked;
//!
//! closes the store, reopens it a second time and checks that every cursor recovers exactly
//! what the first reopen did (the first recovery left nothing to repair), closes it and runs
//! `verify` (a kill is never damage).
//!
//! `KILL_ROUNDS` sets the number of kills (8 by default); `ACKSTORE_KILL_SEED` repeats a run's
//! choices (the seed is printed on failure).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ackstore::{
    Cursor, CursorOptions, JournalConfig, ManagedLedger, PersistMode, Position, Store, StoreConfig,
};

use super::sigkill_child::{Log, parse_position, verify};
use crate::support;
use support::workload::{Rng, seed_from_env};

const CHILD_DIR: &str = "ACKSTORE_SCALE_CHILD_DIR";
const CHILD_LOG: &str = "ACKSTORE_SCALE_CHILD_LOG";
const CHILD_TICKS: &str = "ACKSTORE_SCALE_CHILD_TICKS";
const CHILD_ENTRIES: &str = "ACKSTORE_SCALE_CHILD_ENTRIES";
const CHILD_SEED: &str = "ACKSTORE_SCALE_CHILD_SEED";

/// Entries of a data ledger, so of a partition at most.
const PER_LEDGER: u64 = 16;
/// Entries of each topic before the first child.
const PREPARED: u64 = 48;
/// The second thread's cursors: every `SIDE`th.
const SIDE: usize = 8;

/// The size of the run, from the environment.
#[derive(Debug, Clone, Copy)]
struct Scale {
    topics: usize,
    cursors: usize,
    budget_per_cursor: usize,
    segment_bytes: u64,
    /// The flusher pool's interval (0: no pool).
    flusher_ms: u64,
}

fn env_or<T: std::str::FromStr>(var: &str, default: T) -> T {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

impl Scale {
    fn from_env() -> Self {
        Self {
            topics: env_or("KILL_SCALE_TOPICS", 200),
            cursors: env_or("KILL_SCALE_CURSORS", 10),
            budget_per_cursor: env_or("KILL_SCALE_BUDGET_PER_CURSOR", 150),
            segment_bytes: env_or("KILL_SCALE_SEGMENT_BYTES", 1 << 20),
            flusher_ms: env_or("KILL_SCALE_FLUSHER_MS", 200),
        }
    }

    fn total(self) -> usize {
        self.topics * self.cursors
    }

    fn config(self) -> StoreConfig {
        let flush = (self.flusher_ms > 0).then(|| Duration::from_millis(self.flusher_ms));
        let mut ledger = support::config::topic_flushed(
            PER_LEDGER,
            PersistMode::MultiEntry,
            64 << 10,
            flush.unwrap_or(Duration::from_secs(3600)),
        );
        ledger.cursor.flush_interval = flush;
        StoreConfig {
            ledger,
            journal: JournalConfig {
                segment_bytes: self.segment_bytes,
            },
            ack_memory_bytes: Some(self.budget_per_cursor * self.total()),
            flusher_threads: if flush.is_some() { 2 } else { 0 },
            ..StoreConfig::default()
        }
    }

    fn open(self, dir: &Path) -> ackstore::Result<(Store, Vec<Arc<ManagedLedger>>)> {
        let store = Store::open(dir, self.config())?;
        let topics = (0..self.topics)
            .map(|t| store.topic(&topic_name(t)))
            .collect::<ackstore::Result<_>>()?;
        Ok((store, topics))
    }

    fn open_cursors(self, topics: &[Arc<ManagedLedger>]) -> ackstore::Result<Vec<Cursor>> {
        (0..self.total())
            .map(|k| {
                topics[k / self.cursors]
                    .open_cursor(&cursor_name(self, k), CursorOptions::default())
            })
            .collect()
    }
}

fn topic_name(t: usize) -> String {
    format!("persistent://tenant/ns/many-{t}")
}

fn cursor_name(scale: Scale, k: usize) -> String {
    format!("sub-{}", k % scale.cursors)
}

fn side(k: usize) -> bool {
    k % SIDE == SIDE - 1
}

const TEST: &str = "sigkill_during_ticks_of_many_cursors_keeps_flushed_acks_and_invents_none";

#[test]
fn sigkill_during_ticks_of_many_cursors_keeps_flushed_acks_and_invents_none() {
    let scale = Scale::from_env();
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        child(scale, Path::new(&dir));
    }
    let seed = seed_from_env("ACKSTORE_KILL_SEED");
    let rounds = env_or("KILL_ROUNDS", 8);
    if let Err(failure) = parent(scale, rounds, seed) {
        panic!("{scale:?}: seed {seed} (ACKSTORE_KILL_SEED={seed} repeats its choices): {failure}");
    }
}

// ---------------------------------------------------------------------------------------------
// The child.

/// One acknowledgement call of the workload.
enum Op {
    Ack(Position),
    Many(Vec<Position>),
    Cumulative(Position),
}

impl Op {
    /// A random call on a cursor at mark-delete `mark` over the synced entries `readable`.
    fn pick(rng: &mut Rng, readable: &[Position], mark: Option<Position>) -> Option<Self> {
        if readable.is_empty() {
            return None;
        }
        let after = readable.partition_point(|&p| mark.is_some_and(|m| p <= m));
        let random = |rng: &mut Rng| {
            if rng.chance(40) {
                readable[readable.len() - 1 - rng.index(readable.len().min(20))]
            } else {
                readable[rng.index(readable.len())]
            }
        };
        Some(match rng.below(100) {
            0..40 => Op::Ack(random(rng)),
            40..50 if after < readable.len() => Op::Ack(readable[after]),
            50..58 if after < readable.len() => {
                Op::Cumulative(readable[after + rng.index((readable.len() - after).min(6))])
            }
            _ => {
                let mut group: Vec<Position> = (0..=rng.below(12)).map(|_| random(rng)).collect();
                if after < readable.len() && rng.chance(20) {
                    group.push(readable[after]);
                }
                if after > 0 && rng.chance(20) {
                    group.push(readable[rng.index(after)]);
                }
                Op::Many(group)
            }
        })
    }

    fn line(&self, k: usize) -> String {
        let mut s = String::new();
        match self {
            Op::Ack(p) => write!(s, "K {k} {p}"),
            Op::Cumulative(p) => write!(s, "C {k} {p}"),
            Op::Many(ps) => {
                let _ = write!(s, "M {k}");
                ps.iter().try_for_each(|p| write!(s, " {p}"))
            }
        }
        .expect("a string");
        s
    }

    fn apply(&self, cursor: &Cursor) -> ackstore::Result<()> {
        match self {
            Op::Ack(p) => cursor.ack(*p).map(drop),
            Op::Cumulative(p) => cursor.ack_cumulative(*p).map(drop),
            Op::Many(ps) => cursor.ack_many(ps).map(drop),
        }
    }
}

/// The synced entries of every topic the parent found after the last kill: a line each,
/// `t L:E L:E ...`.
fn read_entries(path: &Path, topics: usize) -> Vec<Vec<Position>> {
    let mut entries = vec![Vec::new(); topics];
    for line in std::fs::read_to_string(path).expect("the entries").lines() {
        let mut words = line.split(' ');
        let t: usize = words.next().and_then(|w| w.parse().ok()).expect("a topic");
        entries[t] = words.filter_map(parse_position).collect();
    }
    entries
}

fn child(scale: Scale, dir: &Path) -> ! {
    let var = |name: &str| std::env::var(name).expect(name);
    let seed: u64 = var(CHILD_SEED).parse().expect("the seed");
    let log = Mutex::new(Log::open(Path::new(&var(CHILD_LOG))));
    let mut ticks = Log::open(Path::new(&var(CHILD_TICKS)));
    let mut entries = read_entries(Path::new(&var(CHILD_ENTRIES)), scale.topics);
    let fail = |what: &str, e: &ackstore::Error| -> ! { log.lock().expect("log").fail(what, e) };
    let (store, topics) = scale.open(dir).unwrap_or_else(|e| fail("open", &e));
    // A lock each: the main thread closes and reopens its cursors while the second thread acks
    // on its own.
    let cursors: Vec<Mutex<Cursor>> = scale
        .open_cursors(&topics)
        .unwrap_or_else(|e| fail("open cursors", &e))
        .into_iter()
        .map(Mutex::new)
        .collect();
    let cursor = |k: usize| cursors[k].lock().expect("a cursor");
    log.lock().expect("log").line("O");
    ticks.line("O");
    let done = AtomicU64::new(0);
    let side_entries = entries.clone();
    let (side_cursors, main): (Vec<usize>, Vec<usize>) = (0..scale.total()).partition(|&k| side(k));
    std::thread::scope(|scope| {
        let (log, done, cursors_ref, fail) = (&log, &done, &cursors, &fail);
        let side_cursors = &side_cursors;
        let side_entries = &side_entries;
        // The second thread: acks on its own cursors while the main thread ticks.
        scope.spawn(move || {
            let mut rng = Rng::new(seed ^ 0x5eed);
            let mut n = 0u64;
            loop {
                if side_cursors.is_empty() {
                    std::thread::sleep(Duration::from_secs(1));
                    continue;
                }
                let k = side_cursors[rng.index(side_cursors.len())];
                let cursor = cursors_ref[k].lock().expect("a cursor");
                let mark = cursor
                    .mark_delete_position()
                    .unwrap_or_else(|e| fail("mark_delete_position", &e));
                if let Some(op) = Op::pick(&mut rng, &side_entries[k / scale.cursors], mark) {
                    log.lock()
                        .expect("log")
                        .line(&format!("Q {n} {}", op.line(k)));
                    op.apply(&cursor).unwrap_or_else(|e| fail("side ack", &e));
                    n += 1;
                    done.store(n, Ordering::Release);
                }
                if n.is_multiple_of(16) {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        });
        let mut rng = Rng::new(seed);
        for tick in 1u64.. {
            // An ack on every cursor of the main thread, in chunks logged before their calls.
            for chunk in main.chunks(256) {
                let mut ops = Vec::with_capacity(chunk.len());
                let mut text = String::new();
                for &k in chunk {
                    let mark = cursor(k)
                        .mark_delete_position()
                        .unwrap_or_else(|e| fail("mark_delete_position", &e));
                    if let Some(op) = Op::pick(&mut rng, &entries[k / scale.cursors], mark) {
                        text.push_str(&op.line(k));
                        text.push('\n');
                        ops.push((k, op));
                    }
                }
                log.lock().expect("log").write(&text);
                for (k, op) in ops {
                    op.apply(&cursor(k))
                        .unwrap_or_else(|e| fail(&format!("ack {}", op.line(k)), &e));
                }
            }
            // Appends to a few topics, synced.
            for _ in 0..=scale.topics / 100 {
                let t = rng.index(scale.topics);
                let mut new = Vec::new();
                for _ in 0..=rng.below(3) {
                    let p = topics[t]
                        .append(b"entry")
                        .unwrap_or_else(|e| fail("append", &e));
                    log.lock().expect("log").line(&format!("A {t} {p}"));
                    new.push(p);
                }
                topics[t].sync().unwrap_or_else(|e| fail("sync", &e));
                log.lock().expect("log").line(&format!("Y {t}"));
                entries[t].extend(new);
            }
            // A few cursors flushed or closed on their own.
            for _ in 0..rng.below(4) {
                let k = main[rng.index(main.len())];
                let mut held = cursor(k);
                if rng.chance(30) {
                    held.close().unwrap_or_else(|e| fail("close", &e));
                    log.lock().expect("log").line(&format!("F {k}"));
                    *held = topics[k / scale.cursors]
                        .open_cursor(&cursor_name(scale, k), CursorOptions::default())
                        .unwrap_or_else(|e| fail("reopen a cursor", &e));
                } else {
                    held.flush().unwrap_or_else(|e| fail("flush", &e));
                    log.lock().expect("log").line(&format!("F {k}"));
                }
            }
            // The tick of every cursor.
            let d = done.load(Ordering::Acquire);
            log.lock().expect("log").line(&format!("S {tick}"));
            ticks.line(&format!("S {tick}"));
            let journal = store.journal_stats();
            let started = Instant::now();
            let flushed = store.flush_all().unwrap_or_else(|e| fail("flush_all", &e));
            let us = started.elapsed().as_micros();
            let after = store.journal_stats();
            let released = store.ack_memory_stats().map_or(0, |b| b.released_bytes);
            let line = format!(
                "T {tick} {d} {us} {} {} {} {} {released}",
                flushed.cursors,
                flushed.bytes,
                flushed.syncs,
                after.rollovers - journal.rollovers
            );
            let mut log = log.lock().expect("log");
            log.line(&line);
            log.sync();
            drop(log);
            ticks.line(&line);
        }
    });
    unreachable!("the workload runs until the process is killed")
}

// ---------------------------------------------------------------------------------------------
// The parent.

/// A set of entry numbers of one topic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Bits(Vec<u64>);

impl Bits {
    fn set(&mut self, i: usize) {
        if self.0.len() <= i / 64 {
            self.0.resize(i / 64 + 1, 0);
        }
        self.0[i / 64] |= 1 << (i % 64);
    }

    fn get(&self, i: usize) -> bool {
        self.0.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    fn union(&mut self, other: &Bits) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a |= b;
        }
    }
}

/// A topic's entries: every one appended (numbered in order), which still exist, how many a
/// sync covered.
#[derive(Debug, Default)]
struct Topic {
    positions: Vec<Position>,
    live: Vec<bool>,
    synced: usize,
    index: HashMap<Position, usize>,
}

impl Topic {
    fn push(&mut self, p: Position) {
        self.index.insert(p, self.positions.len());
        self.positions.push(p);
        self.live.push(true);
    }

    fn number(&self, p: Position) -> Option<usize> {
        self.index.get(&p).copied()
    }

    fn live_entries(&self) -> impl Iterator<Item = (usize, Position)> + '_ {
        self.positions
            .iter()
            .enumerate()
            .filter(|(i, _)| self.live[*i])
            .map(|(i, p)| (i, *p))
    }
}

/// What the log says about one cursor.
#[derive(Debug, Default, Clone)]
struct Model {
    /// Everything acked as far as the log shows (a call logged before the kill may not have
    /// happened): nothing else may be recovered.
    truth: Bits,
    /// What the last `Ok` tick, flush or close committed: kept after the kill.
    committed: Bits,
}

/// A cursor's state as read back: mark-delete and its acked ranges.
type Recovered = (Option<Position>, Vec<(Position, Position)>);

#[derive(Debug, Default)]
struct Figures {
    tick_us: Vec<u64>,
    tick_cursors: u64,
    rollovers: u64,
    released: u64,
    kills_in_tick: usize,
    kills_aimed: usize,
    acks: u64,
    side_acks: u64,
    most_entries: usize,
}

struct Parent {
    scale: Scale,
    topics: Vec<Topic>,
    models: Vec<Model>,
    /// The second thread's calls of the current child not yet covered by a tick: (number,
    /// cursor, entries).
    pending: Vec<(u64, usize, Bits)>,
    figures: Figures,
}

impl Parent {
    /// The entry numbers an op line (`K|M|C k positions`) acks, and its cursor.
    fn op(&self, words: &[&str]) -> Result<(usize, Bits), String> {
        let bad = || format!("bad op {words:?}");
        let k: usize = words.get(1).and_then(|w| w.parse().ok()).ok_or_else(bad)?;
        let topic = self.topics.get(k / self.scale.cursors).ok_or_else(bad)?;
        let mut bits = Bits::default();
        for w in &words[2..] {
            let p = parse_position(w).ok_or_else(bad)?;
            let i = topic
                .number(p)
                .ok_or_else(|| format!("{p} acked by cursor {k} is no entry of its topic"))?;
            if words[0] == "C" {
                for (j, q) in topic.live_entries() {
                    if q <= p {
                        bits.set(j);
                    }
                }
            } else {
                bits.set(i);
            }
        }
        Ok((k, bits))
    }

    /// Applies a child's log; returns whether its last tick began and did not end.
    fn apply_log(&mut self, text: &str) -> Result<bool, String> {
        let mut in_tick = false;
        self.pending.clear();
        for line in text.lines() {
            let words: Vec<&str> = line.split(' ').collect();
            let bad = || format!("bad log line {line:?}");
            match words[0] {
                "E" => return Err(format!("the child failed: {line}")),
                "O" => {}
                "K" | "M" | "C" => {
                    let (k, bits) = self.op(&words)?;
                    self.models[k].truth.union(&bits);
                    self.figures.acks += 1;
                }
                "Q" => {
                    let n: u64 = words.get(1).and_then(|w| w.parse().ok()).ok_or_else(bad)?;
                    let (k, bits) = self.op(&words[2..])?;
                    self.models[k].truth.union(&bits);
                    self.pending.push((n, k, bits));
                    self.figures.side_acks += 1;
                }
                "A" => {
                    let t: usize = words.get(1).and_then(|w| w.parse().ok()).ok_or_else(bad)?;
                    let p = words
                        .get(2)
                        .and_then(|w| parse_position(w))
                        .ok_or_else(bad)?;
                    self.topics[t].push(p);
                }
                "Y" => {
                    let t: usize = words.get(1).and_then(|w| w.parse().ok()).ok_or_else(bad)?;
                    self.topics[t].synced = self.topics[t].positions.len();
                }
                "F" => {
                    let k: usize = words.get(1).and_then(|w| w.parse().ok()).ok_or_else(bad)?;
                    let m = &mut self.models[k];
                    m.committed = m.truth.clone();
                }
                "S" => in_tick = true,
                "T" => {
                    in_tick = false;
                    let num = |i: usize| -> Result<u64, String> {
                        words.get(i).and_then(|w| w.parse().ok()).ok_or_else(bad)
                    };
                    let d = num(2)?;
                    self.figures.tick_us.push(num(3)?);
                    self.figures.tick_cursors += num(4)?;
                    self.figures.rollovers += num(7)?;
                    self.figures.released = self.figures.released.max(num(8)?);
                    for (k, m) in self.models.iter_mut().enumerate() {
                        if !side(k) {
                            m.committed = m.truth.clone();
                        }
                    }
                    let pending = std::mem::take(&mut self.pending);
                    for (n, k, bits) in pending {
                        if n < d {
                            self.models[k].committed.union(&bits);
                        } else {
                            self.pending.push((n, k, bits));
                        }
                    }
                }
                _ => return Err(bad()),
            }
        }
        Ok(in_tick)
    }

    /// Reads every cursor back.
    fn recover(&self, cursors: &[Cursor]) -> Result<Vec<Recovered>, String> {
        cursors
            .iter()
            .enumerate()
            .map(|(k, c)| {
                Ok((
                    c.mark_delete_position()
                        .map_err(|e| format!("cursor {k}: mark_delete_position: {e}"))?,
                    c.acked_ranges()
                        .map_err(|e| format!("cursor {k}: acked_ranges: {e}"))?,
                ))
            })
            .collect()
    }

    /// Checks the recovered state of every cursor against the model; takes it as the next
    /// child's start.
    fn check_cursors(&mut self, recovered: &[Recovered], round: usize) -> Result<(), String> {
        for (k, (mark, ranges)) in recovered.iter().enumerate() {
            let t = k / self.scale.cursors;
            let topic = &self.topics[t];
            let m = &self.models[k];
            let name = format!(
                "round {round}: topic {t} cursor {k} ({})",
                cursor_name(self.scale, k)
            );
            let mut acked = Bits::default();
            let last = topic.live_entries().map(|(_, p)| p).max();
            if let Some(mark) = mark {
                if last.is_none_or(|l| *mark > l) {
                    return Err(format!(
                        "{name}: mark-delete {mark} is past the topic's last entry {last:?} \
                         (invariant 1)"
                    ));
                }
                for (i, p) in topic.live_entries() {
                    if p <= *mark {
                        acked.set(i);
                    }
                }
            }
            for (from, to) in ranges {
                for e in from.entry_id..=to.entry_id {
                    let p = Position::new(from.ledger_id, e);
                    let i = topic.number(p).filter(|&i| topic.live[i]).ok_or_else(|| {
                        format!("{name}: range {from}..={to} holds {p}, no entry (invariant 1)")
                    })?;
                    acked.set(i);
                }
            }
            for (i, p) in topic.live_entries() {
                let a = acked.get(i);
                if a && !m.truth.get(i) {
                    return Err(format!(
                        "{name}: {p} is acked (mark-delete {mark:?}) but the log never acked \
                         it (invariant 1)"
                    ));
                }
                if !a && m.committed.get(i) {
                    return Err(format!(
                        "{name}: {p} was acked before an Ok tick or flush and is lost \
                         (mark-delete {mark:?}; invariant 2)"
                    ));
                }
            }
            let m = &mut self.models[k];
            m.truth = acked.clone();
            m.committed = acked;
        }
        Ok(())
    }

    /// Reopens the store after kill `round`: checks the entries and every cursor, then reopens
    /// it once more and checks that it recovers the same.
    fn check(&mut self, dir: &Path, round: usize) -> Result<(), String> {
        let (store, topics) = self
            .scale
            .open(dir)
            .map_err(|e| format!("round {round}: reopen after the kill: {e}"))?;
        for (t, (model, topic)) in self.topics.iter_mut().zip(&topics).enumerate() {
            for i in 0..model.positions.len() {
                if !model.live[i] {
                    continue;
                }
                let p = model.positions[i];
                let there = topic.read(p).is_ok();
                if !there && i < model.synced {
                    return Err(format!(
                        "round {round}: topic {t}: entry {p} was synced before the kill and \
                         is gone"
                    ));
                }
                if !there {
                    model.live[i] = false;
                    if model.index.get(&p) == Some(&i) {
                        model.index.remove(&p);
                    }
                }
            }
            model.synced = model.positions.len();
            self.figures.most_entries = self.figures.most_entries.max(model.positions.len());
        }
        let cursors = self
            .scale
            .open_cursors(&topics)
            .map_err(|e| format!("round {round}: open the cursors after the kill: {e}"))?;
        let first = self
            .recover(&cursors)
            .map_err(|e| format!("round {round}: {e}"))?;
        self.check_cursors(&first, round)?;
        drop(cursors);
        drop(topics);
        store
            .close()
            .map_err(|e| format!("round {round}: close after the check: {e}"))?;
        // Once more: the first recovery left nothing to repair.
        let (store, topics) = self
            .scale
            .open(dir)
            .map_err(|e| format!("round {round}: second reopen: {e}"))?;
        let cursors = self
            .scale
            .open_cursors(&topics)
            .map_err(|e| format!("round {round}: open the cursors on the second reopen: {e}"))?;
        let second = self
            .recover(&cursors)
            .map_err(|e| format!("round {round}: second reopen: {e}"))?;
        if let Some(k) = (0..first.len()).find(|&k| first[k] != second[k]) {
            return Err(format!(
                "round {round}: cursor {k} recovered {:?} after the kill and {:?} on the next \
                 reopen",
                first[k], second[k]
            ));
        }
        drop(cursors);
        drop(topics);
        store
            .close()
            .map_err(|e| format!("round {round}: close after the second reopen: {e}"))
    }

    fn write_entries(&self, path: &Path) -> Result<(), String> {
        let mut text = String::new();
        for (t, topic) in self.topics.iter().enumerate() {
            let _ = write!(text, "{t}");
            for (_, p) in topic.live_entries() {
                let _ = write!(text, " {p}");
            }
            text.push('\n');
        }
        std::fs::write(path, text).map_err(|e| format!("write the entries: {e}"))
    }

    /// Fills every topic before the first child.
    fn prepare(&mut self, dir: &Path) -> Result<(), String> {
        let (store, topics) = self
            .scale
            .open(dir)
            .map_err(|e| format!("open to prepare: {e}"))?;
        for (t, topic) in topics.iter().enumerate() {
            for _ in 0..PREPARED {
                let p = topic
                    .append(b"entry")
                    .map_err(|e| format!("prepare: append: {e}"))?;
                self.topics[t].push(p);
            }
            topic.sync().map_err(|e| format!("prepare: sync: {e}"))?;
            self.topics[t].synced = self.topics[t].positions.len();
        }
        drop(topics);
        store.close().map_err(|e| format!("prepare: close: {e}"))
    }
}

/// Reads lines of the ticks file past `offset`.
fn new_lines(path: &Path, offset: &mut u64) -> Vec<String> {
    let Ok(mut file) = File::open(path) else {
        return Vec::new();
    };
    if file.seek(SeekFrom::Start(*offset)).is_err() {
        return Vec::new();
    }
    let mut text = String::new();
    let _ = file.read_to_string(&mut text);
    let complete = text.rfind('\n').map_or(0, |i| i + 1);
    *offset += complete as u64;
    text[..complete].lines().map(str::to_owned).collect()
}

/// Waits until the ticks file shows `want` (a line starting with it), the child exits or
/// `limit` passes; whether it came.
fn wait_for(
    path: &Path,
    offset: &mut u64,
    want: &str,
    child: &mut std::process::Child,
    limit: Duration,
) -> Result<bool, String> {
    let start = Instant::now();
    loop {
        if new_lines(path, offset)
            .iter()
            .any(|l| l == want || l.starts_with(&format!("{want} ")))
        {
            return Ok(true);
        }
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!("the child exited by itself: {status}"));
        }
        if start.elapsed() > limit {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

fn parent(scale: Scale, rounds: usize, seed: u64) -> Result<(), String> {
    let work = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dir = work.path().join("store");
    std::fs::create_dir(&dir).map_err(|e| e.to_string())?;
    let entries_path = work.path().join("entries");
    let stderr_path = work.path().join("child.stderr");
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let test_name = support::harness::test_path(module_path!(), TEST);
    let mut p = Parent {
        scale,
        topics: (0..scale.topics).map(|_| Topic::default()).collect(),
        models: vec![Model::default(); scale.total()],
        pending: Vec::new(),
        figures: Figures::default(),
    };
    let started = Instant::now();
    p.prepare(&dir)?;
    eprintln!(
        "prepared {} cursors in {:?}",
        scale.total(),
        started.elapsed()
    );
    let mut rng = Rng::new(seed);
    for round in 0..rounds {
        let round_started = Instant::now();
        p.write_entries(&entries_path)?;
        let log_path: PathBuf = work.path().join(format!("log-{round}"));
        let ticks_path: PathBuf = work.path().join(format!("ticks-{round}"));
        let mut child = support::harness::child_running(&exe, &test_name)
            .env(CHILD_DIR, &dir)
            .env(CHILD_LOG, &log_path)
            .env(CHILD_TICKS, &ticks_path)
            .env(CHILD_ENTRIES, &entries_path)
            .env(CHILD_SEED, seed.wrapping_add(round as u64 + 1).to_string())
            .stderr(File::create(&stderr_path).map_err(|e| e.to_string())?)
            .spawn()
            .map_err(|e| format!("spawn the child: {e}"))?;
        let child_err = || std::fs::read_to_string(&stderr_path).unwrap_or_default();
        let mut offset = 0;
        let opened = wait_for(
            &ticks_path,
            &mut offset,
            "O",
            &mut child,
            Duration::from_secs(600),
        )
        .map_err(|e| format!("round {round}: {e}\nchild stderr: {}", child_err()))?;
        if !opened {
            let _ = child.kill();
            return Err(format!(
                "round {round}: the child did not open the store in 600 s"
            ));
        }
        let tick_us = {
            let mut t = p.figures.tick_us.clone();
            t.sort_unstable();
            t.get(t.len() / 2).copied().unwrap_or(100_000)
        };
        let aimed = rng.chance(80);
        if aimed {
            // Into tick n, at a random point of its measured length.
            let n = 1 + rng.below(3);
            let came = wait_for(
                &ticks_path,
                &mut offset,
                &format!("S {n}"),
                &mut child,
                Duration::from_secs(600),
            )
            .map_err(|e| format!("round {round}: {e}\nchild stderr: {}", child_err()))?;
            if !came {
                let _ = child.kill();
                return Err(format!("round {round}: the child never began tick {n}"));
            }
            std::thread::sleep(Duration::from_micros(rng.below(tick_us * 5 / 4 + 1)));
        } else {
            // Anywhere in its first cycles.
            std::thread::sleep(Duration::from_micros(rng.below(tick_us * 6 + 1)));
        }
        let _ = child.kill();
        let status = child.wait().map_err(|e| e.to_string())?;
        if status.code().is_some() {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            let last = log.lines().rev().find(|l| l.starts_with('E')).unwrap_or("");
            return Err(format!(
                "round {round}: the child exited by itself ({status}): {last}\nchild stderr: {}",
                child_err()
            ));
        }
        let mut text = std::fs::read_to_string(&log_path).map_err(|e| e.to_string())?;
        text.truncate(text.rfind('\n').map_or(0, |i| i + 1));
        let in_tick = p
            .apply_log(&text)
            .map_err(|e| format!("round {round}: {e}"))?;
        p.figures.kills_in_tick += usize::from(in_tick);
        p.figures.kills_aimed += usize::from(aimed);
        let killed = round_started.elapsed();
        p.check(&dir, round)?;
        let checked = round_started.elapsed();
        verify(&dir, round)?;
        eprintln!(
            "round {round}: killed {} a tick ({}), {} ticks logged so far; killed after {:?}, \
             checked (two reopens) after {:?}, verified after {:?}",
            if in_tick { "inside" } else { "outside" },
            if aimed { "aimed" } else { "anywhere" },
            p.figures.tick_us.len(),
            killed,
            checked,
            round_started.elapsed()
        );
    }
    let f = &p.figures;
    let mut t = f.tick_us.clone();
    t.sort_unstable();
    eprintln!(
        "{rounds} kills of a store of {} cursors ({} topics x {}), seed {seed}: {} inside a tick \
         ({} aimed at one); {} ticks, median {} us, max {} us, {} cursors committed by them; {} \
         rollovers; {} bytes of budget released; {} main acks and {} side acks logged; up to {} \
         entries a topic",
        scale.total(),
        scale.topics,
        scale.cursors,
        f.kills_in_tick,
        f.kills_aimed,
        t.len(),
        t.get(t.len() / 2).copied().unwrap_or(0),
        t.last().copied().unwrap_or(0),
        f.tick_cursors,
        f.rollovers,
        f.released,
        f.acks,
        f.side_acks,
        f.most_entries
    );
    if rounds >= 5 && (f.kills_in_tick == 0 || t.is_empty()) {
        return Err(format!(
            "the kills never landed inside a tick ({} ticks logged)",
            t.len()
        ));
    }
    Ok(())
}

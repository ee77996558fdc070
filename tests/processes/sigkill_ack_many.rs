//! Process kill on a store whose cursors share a tiny ack budget: a child process (this test
//! binary, run again with the test's exact name) opens a store of several topics with several
//! cursors each, all sharing `StoreConfig::ack_memory_bytes` of a few KiB, so that partitions
//! (one per data ledger in the first test: topics roll a ledger every few entries) are written
//! out and loaded back all the time; in the second test, ledgers of thousands of entries make
//! partitions that alone are charged about the whole budget. It acks mostly with `ack_many`
//! groups (random positions over many ledgers, duplicates, positions at or before mark-delete,
//! the entry right after it), mixed with `ack`, `ack_cumulative`, cursor flushes and closes,
//! `Store::flush_all` and the flusher pool, from two threads that each work on topics of their
//! own (so one cursor's lines are in the order of its calls, while the budget makes the cursors
//! of one thread release memory to the other's, or find them busy), and logs what it does. The
//! parent (the kill loop of `sigkill_child`, which first fills every topic with a few ledgers of
//! entries) kills it with SIGKILL at a random moment, reopens the store, checks every cursor
//! against the log with all of them open under the budget, checks that reading them back made
//! room and kept the budget, and runs `verify`.
//!
//! The log, one whole line a `write`: `A t L:E` after an append to topic `t` returned, `Y t`
//! after its sync returned `Ok`; *before* a call of cursor `k` (cursor `k % CURSORS` of topic
//! `k / CURSORS`): `M k L:E L:E ...` (its `ack_many`), `K k L:E` (`ack`), `C k L:E`
//! (`ack_cumulative`); `F k` after a flush or close of cursor `k` returned `Ok` (after
//! `flush_all`, one for every cursor of the thread that called it). The parent adds `G t L:E`
//! after a kill for an unsynced entry the kill took. Acks name synced entries only (the only
//! ones a consumer can have received). Checked after every kill, over every entry of every
//! topic still there:
//! - every entry synced before the kill is there;
//! - invariant 1: nothing is acked that the log does not show acked;
//! - invariant 2: every ack logged before the cursor's last `F` is present.
//!
//! `KILL_ROUNDS` sets the number of kills (30 by default); `ACKSTORE_KILL_SEED` repeats a run's
//! choices.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ackstore::internals::ackset::MAX_PARTITION_BYTES;
use ackstore::{Cursor, CursorOptions, ManagedLedger, PersistMode, Position, Store, StoreConfig};

use super::sigkill_child::{
    Log, Workload, kill_rounds, kill_rounds_from_env, new_log_lines, parse_position, run_kill_test,
};
use crate::support;
use support::workload::{Acked, Rng, actual};

pub(super) const TOPICS: usize = 3;
pub(super) const CURSORS: usize = 3;
/// Threads of the child, each acking on topics of its own.
pub(super) const THREADS: usize = 2;
/// The ack budget every cursor of the store shares: about a dozen small partitions.
pub(super) const ACK_BUDGET: usize = 4096;

/// How the topics' entries fall into partitions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Shape {
    /// A ledger of 16 entries, so a partition, every 16 entries: many small partitions, a few
    /// hundred in all, a dozen of them fill the budget.
    #[default]
    SmallPartitions,
    /// Ledgers of 6,000 entries, so partitions of thousands of acks, one of which is charged
    /// about the whole budget or more (an array container by its capacity, up to twice its
    /// 2 bytes a value): `add_many` grows a partition past the budget in the middle of a visit.
    PartitionsPastTheBudget,
}

impl Shape {
    /// Entries of a data ledger, so of a partition at most.
    fn per_ledger(self) -> u64 {
        match self {
            Self::SmallPartitions => 16,
            Self::PartitionsPastTheBudget => 6000,
        }
    }

    /// Entries of each topic before the first child: 16 ledgers, or 2.
    fn prepared_entries(self) -> u64 {
        match self {
            Self::SmallPartitions => 16 * self.per_ledger(),
            Self::PartitionsPastTheBudget => 2 * self.per_ledger(),
        }
    }

    /// The test that runs the harness on this shape (the child is that test, run again).
    fn test_name(self) -> String {
        let name = match self {
            Self::SmallPartitions => {
                "sigkill_while_acking_many_under_a_tiny_shared_budget_keeps_flushed_acks_and_invents_none"
            }
            Self::PartitionsPastTheBudget => {
                "sigkill_while_acking_many_into_partitions_past_the_budget_keeps_flushed_acks"
            }
        };
        support::harness::test_path(module_path!(), name)
    }
}

pub(super) fn topic_name(t: usize) -> String {
    format!("persistent://tenant/ns/budget-{t}")
}

pub(super) fn cursor_name(k: usize) -> String {
    format!("sub-{}", k % CURSORS)
}

/// Opens the store of the kill tests' topics, whose data ledgers roll every `per_ledger` entries,
/// and its topics: the cursors share the ack budget, the flusher pool flushes them every 3 ms.
pub(super) fn open(
    dir: &Path,
    per_ledger: u64,
) -> ackstore::Result<(Store, Vec<Arc<ManagedLedger>>)> {
    let store = Store::open(
        dir,
        StoreConfig {
            ledger: support::config::topic_flushed(
                per_ledger,
                PersistMode::MultiEntry,
                ACK_BUDGET,
                Duration::from_millis(3),
            ),
            ack_memory_bytes: Some(ACK_BUDGET),
            flusher_threads: 2,
            ..StoreConfig::default()
        },
    )?;
    let topics = (0..TOPICS)
        .map(|t| store.topic(&topic_name(t)))
        .collect::<ackstore::Result<_>>()?;
    Ok((store, topics))
}

/// Opens every cursor of every topic again after a kill, cursor `k` on topic `k / CURSORS`.
pub(super) fn open_cursors(
    topics: &[Arc<ManagedLedger>],
    round: usize,
) -> Result<Vec<Cursor>, String> {
    (0..TOPICS * CURSORS)
        .map(|k| {
            topics[k / CURSORS]
                .open_cursor(&cursor_name(k), CursorOptions::default())
                .map_err(|e| format!("round {round}: open cursor {k}: {e}"))
        })
        .collect()
}

/// Closes every cursor the check opened, then the store.
pub(super) fn close_cursors_and_store(
    store: &Store,
    cursors: Vec<Cursor>,
    round: usize,
) -> Result<(), String> {
    for cursor in cursors {
        cursor
            .close()
            .map_err(|e| format!("round {round}: close a cursor: {e}"))?;
    }
    store
        .close()
        .map_err(|e| format!("round {round}: close after the check: {e}"))
}

#[test]
fn sigkill_while_acking_many_under_a_tiny_shared_budget_keeps_flushed_acks_and_invents_none() {
    run(Shape::SmallPartitions, 30);
}

#[test]
fn sigkill_while_acking_many_into_partitions_past_the_budget_keeps_flushed_acks() {
    run(Shape::PartitionsPastTheBudget, 15);
}

/// The parent, or (in a child) the workload.
fn run(shape: Shape, default_rounds: usize) {
    run_kill_test(
        &shape,
        |dir, log, seed| child(shape, dir, log, seed),
        |seed| {
            let rounds = kill_rounds_from_env(default_rounds);
            let mut parent = Parent {
                shape,
                ..Parent::default()
            };
            kill_rounds(&mut parent, rounds, seed).and_then(|()| parent.enough(rounds))
        },
    );
}

// ---------------------------------------------------------------------------------------------
// The child.

/// Every entry of each topic (appended by the preparation or earlier children and not gone),
/// and how many of them a sync covered, from the log.
fn logged_appends(log: &Path) -> Vec<(Vec<Position>, usize)> {
    let mut appended = vec![(Vec::new(), 0); TOPICS];
    for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
        let Some((tag @ ("A" | "G" | "Y"), rest)) = line.split_once(' ') else {
            continue;
        };
        let (t, p) = rest.split_once(' ').unwrap_or((rest, ""));
        let Ok(t) = t.parse::<usize>() else { continue };
        let (entries, synced) = &mut appended[t];
        match (tag, parse_position(p)) {
            ("A", Some(p)) => entries.push(p),
            ("G", Some(p)) => entries.retain(|&e| e != p),
            ("Y", None) => *synced = entries.len(),
            _ => {}
        }
    }
    appended
}

fn child(shape: Shape, dir: &Path, log_path: &Path, seed: u64) -> ! {
    // Entries the kill took are gone from the log (the parent's `G` lines); those it left
    // unsynced are not picked until a sync covers them.
    let logged = logged_appends(log_path);
    let log = Mutex::new(Log::open(log_path));
    let fail =
        |what: &str, e: &ackstore::Error| -> ! { log.lock().expect("the log").fail(what, e) };
    let (store, topics) = open(dir, shape.per_ledger()).unwrap_or_else(|e| fail("open", &e));
    // Each thread works on topics of its own and their cursors, so that a cursor's lines are
    // in the order of its calls; they share the store, its budget and the log.
    let mut parts: Vec<Part> = (0..THREADS)
        .map(|i| Part {
            rng: Rng::new(seed.wrapping_add(i as u64)),
            topics: Vec::new(),
        })
        .collect();
    for (t, (appended, synced)) in logged.into_iter().enumerate() {
        let cursors = (t * CURSORS..(t + 1) * CURSORS)
            .map(|k| {
                let cursor = topics[t]
                    .open_cursor(&cursor_name(k), CursorOptions::default())
                    .unwrap_or_else(|e| fail("open_cursor", &e));
                (k, cursor)
            })
            .collect();
        parts[t % THREADS].topics.push(Owned {
            t,
            appended,
            synced,
            cursors,
        });
    }
    log.lock().expect("the log").line("O");
    std::thread::scope(|scope| {
        for mut part in parts {
            let (store, topics, log) = (&store, &topics, &log);
            scope.spawn(move || part.run(store, topics, log));
        }
    });
    unreachable!("the workload runs until the process is killed")
}

/// A topic a thread of the child works on: its entries, how many a sync covered, its cursors.
struct Owned {
    t: usize,
    appended: Vec<Position>,
    synced: usize,
    cursors: Vec<(usize, Cursor)>,
}

/// The topics of one thread of the child.
struct Part {
    rng: Rng,
    topics: Vec<Owned>,
}

impl Part {
    fn run(&mut self, store: &Store, topics: &[Arc<ManagedLedger>], log: &Mutex<Log>) -> ! {
        let line = |text: &str| log.lock().expect("the log").line(text);
        let fail =
            |what: &str, e: &ackstore::Error| -> ! { log.lock().expect("the log").fail(what, e) };
        let rng = &mut self.rng;
        let mine: Vec<usize> = self
            .topics
            .iter()
            .flat_map(|owned| owned.cursors.iter().map(|(k, _)| *k))
            .collect();
        loop {
            let o = rng.index(self.topics.len());
            let owned = &mut self.topics[o];
            let t = owned.t;
            let c = rng.index(owned.cursors.len());
            let (k, cursor) = &owned.cursors[c];
            let k = *k;
            let readable = &owned.appended[..owned.synced];
            match rng.below(100) {
                0..20 => {
                    for _ in 0..=rng.below(6) {
                        let p = topics[t]
                            .append(b"entry")
                            .unwrap_or_else(|e| fail("append", &e));
                        owned.appended.push(p);
                        line(&format!("A {t} {p}"));
                    }
                    if rng.chance(40) {
                        topics[t].sync().unwrap_or_else(|e| fail("sync", &e));
                        owned.synced = owned.appended.len();
                        line(&format!("Y {t}"));
                    }
                }
                20..60 if !readable.is_empty() => {
                    let mark = cursor
                        .mark_delete_position()
                        .unwrap_or_else(|e| fail("mark_delete_position", &e));
                    let group = ack_many_group(rng, readable, mark);
                    let text: Vec<String> = group.iter().map(ToString::to_string).collect();
                    line(&format!("M {k} {}", text.join(" ")));
                    cursor
                        .ack_many(&group)
                        .unwrap_or_else(|e| fail("ack_many", &e));
                }
                60..70 if !readable.is_empty() => {
                    let p = readable[rng.index(readable.len())];
                    line(&format!("K {k} {p}"));
                    cursor
                        .ack(p)
                        .unwrap_or_else(|e| fail(&format!("ack {p}"), &e));
                }
                70..72 if !readable.is_empty() => {
                    let mark = cursor
                        .mark_delete_position()
                        .unwrap_or_else(|e| fail("mark_delete_position", &e));
                    // A little past mark-delete: mark-delete creeps on, the holes stay many.
                    let from = readable.partition_point(|&p| mark.is_some_and(|m| p <= m));
                    if from < readable.len() {
                        let p = readable[from + rng.index((readable.len() - from).min(4))];
                        line(&format!("C {k} {p}"));
                        cursor
                            .ack_cumulative(p)
                            .unwrap_or_else(|e| fail(&format!("ack_cumulative {p}"), &e));
                    }
                }
                74..84 => {
                    cursor.flush().unwrap_or_else(|e| fail("flush", &e));
                    line(&format!("F {k}"));
                }
                84..90 => {
                    // Every cursor's changes, but only this thread's cursors have all theirs
                    // made before the call.
                    store.flush_all().unwrap_or_else(|e| fail("flush_all", &e));
                    for k in &mine {
                        line(&format!("F {k}"));
                    }
                }
                90..94 => {
                    cursor.close().unwrap_or_else(|e| fail("close", &e));
                    line(&format!("F {k}"));
                    owned.cursors[c].1 = topics[t]
                        .open_cursor(&cursor_name(k), CursorOptions::default())
                        .unwrap_or_else(|e| fail("reopen cursor", &e));
                }
                _ => {}
            }
        }
    }
}

/// An `ack_many` group over the synced entries `readable` of a cursor at mark-delete `mark`:
/// up to 200 positions (over three of `add_many`'s groups of 64), random over every ledger, some recent, duplicates,
/// some at or before mark-delete, and in some groups the entry right after it (which moves
/// mark-delete over the acked entries that follow, so not in most: the holes stay many).
fn ack_many_group(rng: &mut Rng, readable: &[Position], mark: Option<Position>) -> Vec<Position> {
    let len = 1 + rng.index(200);
    let after_mark = readable.partition_point(|&p| mark.is_some_and(|m| p <= m));
    let mut group: Vec<Position> = Vec::with_capacity(len);
    while group.len() < len {
        let p = match rng.below(10) {
            0 if !group.is_empty() => group[rng.index(group.len())],
            1 if after_mark > 0 => readable[rng.index(after_mark)],
            2..5 => readable[readable.len() - 1 - rng.index(readable.len().min(24))],
            _ => readable[rng.index(readable.len())],
        };
        group.push(p);
    }
    if after_mark < readable.len() && rng.chance(30) {
        let at = rng.index(group.len() + 1);
        group.insert(at, readable[after_mark]);
    }
    group
}

// ---------------------------------------------------------------------------------------------
// The parent.

/// What the log says about one cursor.
#[derive(Debug, Default)]
struct Model {
    /// Everything acknowledged, as far as the log shows (an ack logged just before the kill
    /// may not have happened): nothing outside it may be recovered.
    truth: Acked,
    /// What the last `Ok` flush or close committed: present after the kill.
    committed: Acked,
}

#[derive(Debug, Default)]
struct Parent {
    shape: Shape,
    /// Every entry appended to each topic, and how many of them the last `Ok` sync covered.
    appended: BTreeMap<usize, (Vec<Position>, usize)>,
    /// How many entries of each topic an earlier check found synced and present: synced
    /// entries are checked once, after the first kill that follows their sync.
    seen_synced: BTreeMap<usize, usize>,
    cursors: BTreeMap<usize, Model>,
    /// How much of the log has been applied.
    offset: u64,
    groups: u64,
    grouped_positions: u64,
    acks: u64,
    flushes: u64,
    /// The most positions a checked cursor held acknowledged beyond mark-delete.
    most_holes: usize,
    /// Bytes the cursors released to one another while the checks read them back.
    released_bytes: u64,
}

impl Parent {
    fn apply(&mut self, line: &str) -> Result<(), String> {
        let bad = || format!("bad log line {line:?}");
        let mut words = line.split(' ');
        let tag = words.next().unwrap_or("");
        if tag == "E" {
            return Err(format!("the child failed: {line}"));
        }
        if tag == "O" {
            return Ok(());
        }
        let n: usize = words.next().and_then(|w| w.parse().ok()).ok_or_else(bad)?;
        match tag {
            "A" => {
                let p = words.next().and_then(parse_position).ok_or_else(bad)?;
                self.appended.entry(n).or_default().0.push(p);
            }
            "G" => {
                let p = words.next().and_then(parse_position).ok_or_else(bad)?;
                self.appended.entry(n).or_default().0.retain(|&e| e != p);
            }
            "Y" => {
                let (appended, synced) = self.appended.entry(n).or_default();
                *synced = appended.len();
            }
            "M" | "K" | "C" => {
                let m = self.cursors.entry(n).or_default();
                let mut count = 0;
                for p in words {
                    let p = parse_position(p).ok_or_else(bad)?;
                    count += 1;
                    if tag == "C" {
                        m.truth.ack_through(p);
                    } else {
                        m.truth.ack(p);
                    }
                }
                if tag == "M" {
                    self.groups += 1;
                    self.grouped_positions += count;
                } else {
                    self.acks += 1;
                }
            }
            "F" => {
                self.flushes += 1;
                let m = self.cursors.entry(n).or_default();
                m.committed = m.truth.clone();
            }
            _ => return Err(bad()),
        }
        Ok(())
    }

    /// The kills must have landed mid-workload, not only during start-up.
    fn enough(&self, rounds: usize) -> Result<(), String> {
        if rounds >= 10
            && (self.groups == 0 || self.acks == 0 || self.flushes == 0 || self.released_bytes == 0)
        {
            return Err(format!(
                "the children did too little before being killed: {} ack_many groups, {} \
                 acks, {} flushes; the checks released {} bytes of the budget",
                self.groups, self.acks, self.flushes, self.released_bytes
            ));
        }
        eprintln!(
            "{rounds} kills: {} ack_many groups of {} positions, {} single or cumulative acks, \
             {} flushes or closes logged; {} entries; at most {} holes in a cursor; the checks \
             released {} bytes of the budget",
            self.groups,
            self.grouped_positions,
            self.acks,
            self.flushes,
            self.appended.values().map(|(a, _)| a.len()).sum::<usize>(),
            self.most_holes,
            self.released_bytes,
        );
        Ok(())
    }
}

impl Workload for Parent {
    /// Many synced entries in every topic, so that acks spread over many ledgers (partitions).
    fn prepare(&mut self, dir: &Path, log_path: &Path) -> Result<(), String> {
        let (store, topics) =
            open(dir, self.shape.per_ledger()).map_err(|e| format!("open to prepare: {e}"))?;
        let mut log = Log::open(log_path);
        for (t, topic) in topics.iter().enumerate() {
            for _ in 0..self.shape.prepared_entries() {
                let p = topic
                    .append(b"entry")
                    .map_err(|e| format!("prepare: append: {e}"))?;
                log.line(&format!("A {t} {p}"));
            }
            topic.sync().map_err(|e| format!("prepare: sync: {e}"))?;
            log.line(&format!("Y {t}"));
        }
        store.close().map_err(|e| format!("prepare: close: {e}"))
    }

    fn test_name(&self) -> String {
        self.shape.test_name()
    }

    fn apply_log(&mut self, path: &Path) -> Result<(), String> {
        new_log_lines(path, &mut self.offset)?
            .lines()
            .try_for_each(|line| self.apply(line))
    }

    /// Reopens the store; checks every cursor of every topic against the model over every
    /// entry still there, all of them open under the one budget, and takes what the reopen
    /// recovered as the next child's start.
    fn check(&mut self, dir: &Path, log_path: &Path, round: usize) -> Result<(), String> {
        let (store, topics) = open(dir, self.shape.per_ledger())
            .map_err(|e| format!("round {round}: reopen after the kill: {e}"))?;
        let mut log = Log::open(log_path);
        for (t, topic) in topics.iter().enumerate() {
            let (appended, synced) = self.appended.entry(t).or_default();
            let seen = self.seen_synced.entry(t).or_default();
            for &p in &appended[*seen..*synced] {
                if let Err(e) = topic.read(p) {
                    return Err(format!(
                        "round {round}: topic {t}: entry {p} was synced before the kill and is \
                         gone: {e}"
                    ));
                }
            }
            *seen = *synced;
            // Unsynced appends the kill took are no entries any more: the log says so to the
            // next child.
            for &p in &appended[*synced..] {
                if topic.read(p).is_err() {
                    log.line(&format!("G {t} {p}"));
                }
            }
            let mut index = 0;
            let synced = *synced;
            appended.retain(|&p| {
                index += 1;
                index <= synced || topic.read(p).is_ok()
            });
        }
        let cursors = open_cursors(&topics, round)?;
        for (k, cursor) in cursors.iter().enumerate() {
            let t = k / CURSORS;
            let name = format!("topic {t}: {}", cursor_name(k));
            let m = self.cursors.entry(k).or_default();
            let recovered =
                actual(cursor).map_err(|e| format!("round {round}: {name}: read back: {e}"))?;
            if let Some(p) = recovered.set.iter().find(|&&p| !m.truth.contains(p)) {
                return Err(format!(
                    "round {round}: {name}: {p} is acked but the log never acked it \
                     (invariant 1)"
                ));
            }
            for &p in &self.appended.entry(t).or_default().0 {
                let acked = recovered.contains(p);
                if acked && !m.truth.contains(p) {
                    return Err(format!(
                        "round {round}: {name}: {p} is acked but the log never acked it \
                         (invariant 1)"
                    ));
                }
                if !acked && m.committed.contains(p) {
                    return Err(format!(
                        "round {round}: {name}: {p} was acked before an Ok flush or close and \
                         is lost (invariant 2)"
                    ));
                }
            }
            self.most_holes = self.most_holes.max(recovered.set.len());
            m.truth = recovered.clone();
            m.committed = recovered;
        }
        // Reading every cursor back went through the one small budget: it made room, and
        // stayed within the budget plus the partition last used.
        let budget = store
            .ack_memory_stats()
            .ok_or("the store has no ack budget")?;
        self.released_bytes += budget.released_bytes;
        if budget.peak_resident_bytes > ACK_BUDGET + MAX_PARTITION_BYTES {
            return Err(format!(
                "round {round}: the cursors held {} bytes resident under a budget of {ACK_BUDGET}",
                budget.peak_resident_bytes
            ));
        }
        close_cursors_and_store(&store, cursors, round)
    }
}

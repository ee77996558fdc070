//! Process kill on real files: a child process (this test binary, run again with the test's
//! exact name and `ACKSTORE_KILL_CHILD_DIR` set) runs a random workload on a topic directory
//! (appends of single messages and of batches rolling a ledger every few entries, acks of whole
//! entries and of single messages of a batch, cumulative acks, flushes, seeks, rewinds, trims,
//! cursor close and reopen, the background flusher on) and logs what it does to a file.
//! The parent kills it with SIGKILL at a random moment, reopens the directory, checks every
//! cursor against the log, runs `ackstore verify` on the directory (a kill is never damage:
//! exit 0), and lets the next child continue on the same directory.
//!
//! The log is plain appends of whole lines, which a SIGKILL cannot undo (the kernel keeps what
//! was written): `K c L:E` and `C c L:E` *before* an ack or cumulative ack of cursor `c`,
//! `B c L:E i` *before* the ack of message `i` of the entry at `L:E` (a batch-index ack),
//! `S c L:E` before a seek and `s c` after it returned `Ok`, `F c` *after* a flush that returned
//! `Ok`, `X c` after a close that returned `Ok`, `A L:E n` after the append of an entry of `n`
//! messages returned, `Y` after a
//! sync returned `Ok`, `D L:E` for every entry a read delivered. An append not yet synced may
//! die with the process (its write buffer), and acks of an entry that is gone are dropped
//! (docs/cursors.md). The child acks, cumulatively acks and seeks to synced entries only (the
//! only ones a consumer can have received). Checked after every kill:
//! - every entry appended before the last `Y` is still there (unless trimmed);
//! - every entry a read delivered is still there (unless trimmed): reads stop at what is durable;
//!
//! and over every message of every logged entry still there (an entry is acked when all its
//! messages are):
//! - invariant 1: nothing is acked that the log does not show acked (by an ack, a batch-index
//!   ack, a cumulative ack, or a seek, which acknowledges everything before its target);
//! - invariant 2: every ack logged before the cursor's last `F` or `X` is present, unless a
//!   later seek that returned `Ok` cleared it (a seek commits its reset: docs/cursors.md); a
//!   seek cut by the kill keeps only what both sides of it hold.
//!
//! The same harness runs three times: on a topic directory of `ManagedLedger::open` (cursors in
//! the journal the topic hosts in its directory), through a store (`Store::open` and one of its
//! topics: cursors in the store's journal, the flusher pool on, and `Store::flush_all` ticks,
//! logged as an `F` line for every cursor once they returned `Ok`), and through a store that
//! keeps 2 descriptors open (its files closed and reopened on use all the time).
//!
//! The kill loop ([`kill_rounds`], over a [`Workload`]: its log, its check) and the child's log
//! are shared with the other process-kill tests of this crate.
//!
//! `KILL_ROUNDS` sets the number of kills (50 by default); `ACKSTORE_KILL_SEED` repeats a run's
//! choices (the seed is printed on failure).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ackstore::{AppendMeta, Cursor, CursorOptions, Error, Position};
use std::sync::Arc;

use ackstore::{ManagedLedger, Store, StoreConfig};
use support::workload::{Acked, Messages, Rng, actual, actual_messages, before, seed_from_env};

const TOPIC: &str = "persistent://tenant/ns/killed";
const CHILD_DIR: &str = "ACKSTORE_KILL_CHILD_DIR";
const CHILD_LOG: &str = "ACKSTORE_KILL_CHILD_LOG";
const CHILD_SEED: &str = "ACKSTORE_KILL_CHILD_SEED";
const CURSORS: usize = 3;

/// What the workload runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Through {
    /// A topic directory of `ManagedLedger::open`.
    Topic,
    /// A store directory and one of its topics.
    Store,
    /// A store keeping 2 descriptors open (`StoreConfig::open_files`): every file closes and
    /// reopens by path all the time, a written one synced as it closes.
    StoreTwoFiles,
}

impl Through {
    /// The test that runs the harness this way (the child is that test, run again).
    fn test_name(self) -> String {
        let name = match self {
            Self::Topic => "sigkill_at_random_moments_never_loses_a_flushed_ack_nor_invents_one",
            Self::Store => {
                "sigkill_while_flushing_through_a_store_never_loses_a_flushed_ack_nor_invents_one"
            }
            Self::StoreTwoFiles => {
                "sigkill_through_a_store_keeping_two_files_open_never_loses_a_flushed_ack"
            }
        };
        support::harness::test_path(module_path!(), name)
    }

    /// Opens the directory: the store (if any) and the topic.
    fn open(self, dir: &Path) -> ackstore::Result<Opened> {
        Ok(match self {
            Self::Topic => Opened {
                store: None,
                topic: Arc::new(ManagedLedger::open(
                    dir,
                    support::config::topic_flushed(
                        4,
                        ackstore::PersistMode::MultiEntry,
                        4096,
                        Duration::from_millis(5),
                    ),
                )?),
            },
            Self::Store | Self::StoreTwoFiles => {
                let store = Store::open(
                    dir,
                    StoreConfig {
                        ledger: support::config::topic_flushed(
                            4,
                            ackstore::PersistMode::MultiEntry,
                            4096,
                            Duration::from_millis(5),
                        ),
                        flusher_threads: 2,
                        open_files: (self == Self::StoreTwoFiles).then_some(2),
                        ..StoreConfig::default()
                    },
                )?;
                let topic = store.topic(TOPIC)?;
                Opened {
                    store: Some(store),
                    topic,
                }
            }
        })
    }
}

/// An open directory.
struct Opened {
    store: Option<Store>,
    topic: Arc<ManagedLedger>,
}

impl Opened {
    fn close(self) -> ackstore::Result<()> {
        match self.store {
            Some(store) => store.close(),
            None => self.topic.close(),
        }
    }
}

fn cursor_name(c: usize) -> String {
    format!("sub-{c}")
}

pub(super) fn parse_position(s: &str) -> Option<Position> {
    let (l, e) = s.split_once(':')?;
    Some(Position {
        ledger_id: l.parse().ok()?,
        entry_id: e.parse().ok()?,
    })
}

/// `L:E n` of an `A` line: the entry and its number of messages.
fn parse_append(s: &str) -> Option<(Position, u32)> {
    let (p, n) = s.split_once(' ')?;
    Some((parse_position(p)?, n.parse().ok()?))
}

#[test]
fn sigkill_at_random_moments_never_loses_a_flushed_ack_nor_invents_one() {
    run(Through::Topic);
}

#[test]
fn sigkill_while_flushing_through_a_store_never_loses_a_flushed_ack_nor_invents_one() {
    run(Through::Store);
}

#[test]
fn sigkill_through_a_store_keeping_two_files_open_never_loses_a_flushed_ack() {
    run(Through::StoreTwoFiles);
}

/// The parent, or (in a child, `ACKSTORE_KILL_CHILD_DIR` set) the workload.
fn run(through: Through) {
    run_kill_test(
        &through,
        |dir, log, seed| child(through, dir, log, seed),
        |seed| {
            let mut harness = Harness {
                through,
                state: Parent::default(),
            };
            harness.parent(kill_rounds_from_env(50), seed)
        },
    );
}

/// A kill test: in a child (`ACKSTORE_KILL_CHILD_DIR` set) runs `child` on the directory, the
/// log and the seed its parent gave it, and never returns; in the parent runs `parent` with the
/// seed (`ACKSTORE_KILL_SEED`, or one from the clock) and panics with its failure, naming `what`
/// and the seed that repeats its choices.
pub(super) fn run_kill_test(
    what: &impl std::fmt::Debug,
    child: impl FnOnce(&Path, &Path, u64),
    parent: impl FnOnce(u64) -> Result<(), String>,
) {
    if let Some((dir, log, seed)) = child_env() {
        child(&dir, &log, seed);
    }
    let seed = seed_from_env("ACKSTORE_KILL_SEED");
    if let Err(failure) = parent(seed) {
        panic!("{what:?}: seed {seed} (ACKSTORE_KILL_SEED={seed} repeats its choices): {failure}");
    }
}

/// In a child: the directory, the log and the seed its parent gave it.
pub(super) fn child_env() -> Option<(PathBuf, PathBuf, u64)> {
    let dir = std::env::var(CHILD_DIR).ok()?;
    let log = std::env::var(CHILD_LOG).expect("the child's log");
    let seed = std::env::var(CHILD_SEED)
        .ok()
        .and_then(|s| s.parse().ok())
        .expect("the child's seed");
    Some((dir.into(), log.into(), seed))
}

/// The number of kills: `KILL_ROUNDS`, or `default`.
pub(super) fn kill_rounds_from_env(default: usize) -> usize {
    std::env::var("KILL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

// ---------------------------------------------------------------------------------------------
// The child: a random workload, logged, until it is killed.

/// Appends whole lines to the log; each line is one `write`, which a SIGKILL cannot tear.
pub(super) struct Log(File);

impl Log {
    /// Opens the log at `path` for appending.
    pub(super) fn open(path: &Path) -> Self {
        Self(
            OpenOptions::new()
                .append(true)
                .create(true)
                .open(path)
                .expect("open the log"),
        )
    }

    /// Writes `text` (whole lines, each ending in a newline) in one call.
    pub(super) fn write(&mut self, text: &str) {
        self.0.write_all(text.as_bytes()).expect("write the log");
    }

    pub(super) fn line(&mut self, text: &str) {
        self.write(&format!("{text}\n"));
    }

    /// Makes what was written durable (for a log the parent reads after a power cut's
    /// equivalent, or whose lines must outlive the child's page cache).
    pub(super) fn sync(&mut self) {
        self.0.sync_data().expect("sync the log");
    }

    /// Logs an unexpected error and ends the child with exit code 3 (the parent expects death
    /// by SIGKILL, so it reports this line).
    pub(super) fn fail(&mut self, what: &str, err: &Error) -> ! {
        self.line(&format!("E {what}: {err}"));
        std::process::exit(3);
    }
}

fn child(through: Through, dir: &Path, log_path: &Path, seed: u64) -> ! {
    let mut rng = Rng::new(seed);
    // Every entry appended by earlier children and its number of messages, from their log.
    let mut sizes: BTreeMap<Position, u32> = BTreeMap::new();
    let mut appended: Vec<Position> = std::fs::read_to_string(log_path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("A ").and_then(parse_append))
        .map(|(p, n)| {
            sizes.insert(p, n);
            p
        })
        .collect();
    let mut log = Log::open(log_path);
    let opened = through.open(dir).unwrap_or_else(|e| log.fail("open", &e));
    let topic = &opened.topic;
    // An earlier child's unsynced appends may be gone (the write buffer dies with the process).
    appended.retain(|&p| topic.read(p).is_ok());
    // Entries up to here are readable: what open finds is durable, then each sync's appends.
    let mut synced = appended.len();
    let mut cursors: Vec<Cursor> = (0..CURSORS)
        .map(|c| {
            topic
                .open_cursor(&cursor_name(c), CursorOptions::default())
                .unwrap_or_else(|e| log.fail("open_cursor", &e))
        })
        .collect();
    log.line("O");
    let mut n = 0u64;
    loop {
        n += 1;
        let c = rng.index(CURSORS);
        let cursor = &cursors[c];
        let first = topic.first_position();
        // A retained synced entry, mostly a recent one.
        let pick = |rng: &mut Rng| -> Option<Position> {
            let readable = &appended[..synced];
            let retained: &[Position] = match first {
                Some(f) => &readable[readable.partition_point(|&p| p < f)..],
                None => &[],
            };
            if retained.is_empty() {
                return None;
            }
            let window = if rng.chance(75) {
                retained.len().min(40)
            } else {
                retained.len()
            };
            Some(retained[retained.len() - 1 - rng.index(window)])
        };
        match rng.below(100) {
            0..30 => {
                for _ in 0..=rng.below(4) {
                    // Half the entries are batches of 2 to 5 messages.
                    let num_messages = if rng.chance(50) {
                        1
                    } else {
                        2 + u32::try_from(rng.below(4)).expect("small")
                    };
                    let meta = AppendMeta {
                        num_messages,
                        timestamp: n,
                    };
                    let p = topic
                        .append_with(format!("entry {n}").as_bytes(), meta)
                        .unwrap_or_else(|e| log.fail("append", &e));
                    appended.push(p);
                    sizes.insert(p, num_messages);
                    log.line(&format!("A {p} {num_messages}"));
                }
                if rng.chance(20) {
                    topic.sync().unwrap_or_else(|e| log.fail("sync", &e));
                    synced = appended.len();
                    log.line("Y");
                }
            }
            30..40 => {
                if let Some(p) = pick(&mut rng) {
                    let size = sizes.get(&p).copied().unwrap_or(1);
                    let i = u32::try_from(rng.below(u64::from(size))).expect("small");
                    log.line(&format!("B {c} {p} {i}"));
                    cursor
                        .ack_batch_index(p, i, size)
                        .unwrap_or_else(|e| log.fail(&format!("ack_batch_index {p} {i}"), &e));
                }
            }
            40..52 => {
                if let Some(p) = pick(&mut rng) {
                    log.line(&format!("K {c} {p}"));
                    cursor
                        .ack(p)
                        .unwrap_or_else(|e| log.fail(&format!("ack {p}"), &e));
                }
            }
            52..60 => {
                let entries = cursor
                    .read_entries(5)
                    .unwrap_or_else(|e| log.fail("read_entries", &e));
                for e in &entries {
                    log.line(&format!("D {}", e.position));
                }
                for e in &entries {
                    if !rng.chance(70) {
                        continue;
                    }
                    let p = e.position;
                    // A consumer acks one message of a batch it has not acked yet, or all.
                    let unacked: Vec<u32> = (0..e.num_messages)
                        .filter(|i| {
                            e.acked_batch_indexes
                                .as_ref()
                                .is_none_or(|acked| !acked.contains(*i))
                        })
                        .collect();
                    if unacked.len() > 1 && rng.chance(60) {
                        let i = unacked[rng.index(unacked.len())];
                        log.line(&format!("B {c} {p} {i}"));
                        cursor
                            .ack_batch_index(p, i, e.num_messages)
                            .unwrap_or_else(|e| log.fail(&format!("ack_batch_index {p} {i}"), &e));
                    } else {
                        log.line(&format!("K {c} {p}"));
                        cursor
                            .ack(p)
                            .unwrap_or_else(|e| log.fail(&format!("ack {p}"), &e));
                    }
                }
            }
            60..63 => {
                let mark = cursor
                    .mark_delete_position()
                    .unwrap_or_else(|e| log.fail("mark_delete_position", &e));
                if let Some(p) = pick(&mut rng)
                    && mark.is_none_or(|m| p > m)
                {
                    log.line(&format!("C {c} {p}"));
                    cursor
                        .ack_cumulative(p)
                        .unwrap_or_else(|e| log.fail(&format!("ack_cumulative {p}"), &e));
                }
            }
            71..77 if through != Through::Topic => {
                opened
                    .store
                    .as_ref()
                    .expect("a store")
                    .flush_all()
                    .unwrap_or_else(|e| log.fail("flush_all", &e));
                for c in 0..CURSORS {
                    log.line(&format!("F {c}"));
                }
            }
            63..77 => {
                cursor.flush().unwrap_or_else(|e| log.fail("flush", &e));
                log.line(&format!("F {c}"));
            }
            77..81 => {
                if let Some(p) = pick(&mut rng) {
                    log.line(&format!("S {c} {p}"));
                    cursor
                        .seek(p)
                        .unwrap_or_else(|e| log.fail(&format!("seek {p}"), &e));
                    log.line(&format!("s {c}"));
                }
            }
            81..84 => {
                cursor.close().unwrap_or_else(|e| log.fail("close", &e));
                log.line(&format!("X {c}"));
                cursors[c] = topic
                    .open_cursor(&cursor_name(c), CursorOptions::default())
                    .unwrap_or_else(|e| log.fail("reopen cursor", &e));
            }
            84..87 => cursor.rewind().unwrap_or_else(|e| log.fail("rewind", &e)),
            87..89 => {
                topic
                    .trim_consumed()
                    .unwrap_or_else(|e| log.fail("trim_consumed", &e));
            }
            _ => {
                let entries = cursor
                    .read_entries(3)
                    .unwrap_or_else(|e| log.fail("read_entries", &e));
                for e in &entries {
                    log.line(&format!("D {}", e.position));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The parent: kill, reopen, check, verify, repeat.

/// What the log says about one cursor.
#[derive(Debug, Default)]
struct Model {
    /// What the child's cursor held, as far as the log shows (an ack logged just before the
    /// kill may not have happened).
    truth: Acked,
    /// What the last `Ok` flush, close or seek committed: present after the kill.
    committed: Acked,
    /// Everything ever acknowledged: nothing outside it may be recovered.
    ever: Acked,
    /// The messages `truth`, `committed` and `ever` hold beyond their whole entries.
    truth_messages: Messages,
    committed_messages: Messages,
    ever_messages: Messages,
    /// A seek logged and not yet seen returning: its target.
    seeking: Option<Position>,
}

#[derive(Debug, Default)]
struct Parent {
    appended: Vec<Position>,
    /// Messages of each appended entry.
    sizes: BTreeMap<Position, u32>,
    /// How many of `appended` the last `Ok` sync covered.
    synced: usize,
    /// Every entry a read delivered to a consumer.
    delivered: BTreeSet<Position>,
    cursors: BTreeMap<usize, Model>,
    /// How much of the log has been applied.
    offset: u64,
    acks: u64,
    batch_index_acks: u64,
    flushes: u64,
    seeks: u64,
}

/// The complete lines a child's log at `path` holds past `offset`, which moves past them; an
/// incomplete last line (the child was killed writing it) is cut off the file, so the next
/// child appends after the last complete one.
pub(crate) fn new_log_lines(path: &Path, offset: &mut u64) -> Result<String, String> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| format!("open the log: {e}"))?;
    file.seek(SeekFrom::Start(*offset))
        .map_err(|e| e.to_string())?;
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(|e| e.to_string())?;
    let complete = text.rfind('\n').map_or(0, |i| i + 1);
    file.set_len(*offset + complete as u64)
        .map_err(|e| e.to_string())?;
    *offset += complete as u64;
    text.truncate(complete);
    Ok(text)
}

impl Parent {
    /// Applies the log's new complete lines; cuts an incomplete last line off the file.
    fn apply_log(&mut self, path: &Path) -> Result<(), String> {
        for line in new_log_lines(path, &mut self.offset)?.lines() {
            self.apply(line)?;
        }
        Ok(())
    }

    fn apply(&mut self, line: &str) -> Result<(), String> {
        let mut words = line.split(' ');
        let tag = words.next().unwrap_or("");
        if tag == "E" {
            return Err(format!("the child failed: {line}"));
        }
        if tag == "O" {
            return Ok(());
        }
        if tag == "Y" {
            self.synced = self.appended.len();
            return Ok(());
        }
        if tag == "D" {
            let p = words.next().and_then(parse_position);
            self.delivered
                .insert(p.ok_or_else(|| format!("bad log line {line:?}"))?);
            return Ok(());
        }
        if tag == "A" {
            let (p, n) = line
                .strip_prefix("A ")
                .and_then(parse_append)
                .ok_or_else(|| format!("bad log line {line:?}"))?;
            self.appended.push(p);
            self.sizes.insert(p, n);
            return Ok(());
        }
        let c: usize = words
            .next()
            .and_then(|w| w.parse().ok())
            .ok_or_else(|| format!("bad log line {line:?}"))?;
        let p = words.next().and_then(parse_position);
        let index: Option<u32> = words.next().and_then(|w| w.parse().ok());
        let m = self.cursors.entry(c).or_default();
        match (tag, p) {
            ("B", Some(p)) => {
                let i = index.ok_or_else(|| format!("bad log line {line:?}"))?;
                self.acks += 1;
                self.batch_index_acks += 1;
                m.truth_messages.ack(p, i);
                m.ever_messages.ack(p, i);
            }
            ("K", Some(p)) => {
                self.acks += 1;
                m.truth.ack(p);
                m.ever.ack(p);
            }
            ("C", Some(p)) => {
                self.acks += 1;
                m.truth.ack_through(p);
                m.ever.ack_through(p);
            }
            ("S", Some(p)) => {
                if let Some(b) = before(p) {
                    m.ever.ack_through(b);
                }
                m.seeking = Some(p);
            }
            ("s", None) => {
                let p = m.seeking.take().ok_or("`s` without `S`")?;
                self.seeks += 1;
                m.truth = Acked::reset(before(p));
                m.committed = m.truth.clone();
                m.truth_messages = Messages::default();
                m.committed_messages = Messages::default();
            }
            ("F" | "X", None) => {
                self.flushes += 1;
                m.committed = m.truth.clone();
                m.committed_messages = m.truth_messages.clone();
            }
            _ => return Err(format!("bad log line {line:?}")),
        }
        Ok(())
    }

    /// After a kill: reopens the directory, checks every cursor against the model, and takes
    /// what the reopen recovered as the next child's starting state (the reopen commits it).
    fn check(&mut self, through: Through, dir: &Path, round: usize) -> Result<(), String> {
        let opened = through
            .open(dir)
            .map_err(|e| format!("round {round}: reopen after the kill: {e}"))?;
        let topic = &opened.topic;
        let first = topic.first_position();
        let retained = |p: &Position| first.is_some_and(|f| *p >= f);
        for &p in self.appended[..self.synced].iter().filter(|p| retained(p)) {
            if let Err(e) = topic.read(p) {
                return Err(format!(
                    "round {round}: entry {p} was synced before the kill and is gone: {e}"
                ));
            }
        }
        for &p in self.delivered.iter().filter(|p| retained(p)) {
            if let Err(e) = topic.read(p) {
                return Err(format!(
                    "round {round}: entry {p} was delivered to a consumer before the kill and \
                     is gone: {e}"
                ));
            }
        }
        // Unsynced appends the kill took are no entries any more.
        let synced = self.synced;
        let mut index = 0;
        self.appended.retain(|p| {
            index += 1;
            index <= synced || !retained(p) || topic.read(*p).is_ok()
        });
        let existing: Vec<Position> = self.appended.iter().copied().filter(retained).collect();
        for (c, m) in &mut self.cursors {
            // A seek the kill cut: either side of it may be what was committed.
            if let Some(p) = m.seeking.take() {
                m.committed = m.committed.meet_reset(before(p));
                m.committed_messages = m.committed_messages.meet_reset(p);
            }
            let name = cursor_name(*c);
            let cursor = topic
                .open_cursor(&name, CursorOptions::default())
                .map_err(|e| format!("round {round}: open {name}: {e}"))?;
            for &p in &existing {
                for i in 0..self.sizes.get(&p).copied().unwrap_or(1) {
                    let acked = cursor.is_batch_index_acked(p, i).map_err(|e| {
                        format!("round {round}: {name}: is_batch_index_acked {p} {i}: {e}")
                    })?;
                    if acked && !m.ever_messages.holds(&m.ever, p, i) {
                        return Err(format!(
                            "round {round}: {name}: message {i} of {p} is acked but the log \
                             never acked it (invariant 1)"
                        ));
                    }
                    if !acked && m.committed_messages.holds(&m.committed, p, i) {
                        return Err(format!(
                            "round {round}: {name}: message {i} of {p} was acked before an Ok \
                             flush, close or seek and is lost (invariant 2)"
                        ));
                    }
                }
            }
            let recovered =
                actual(&cursor).map_err(|e| format!("round {round}: {name}: read back: {e}"))?;
            let sizes = existing
                .iter()
                .map(|p| (*p, self.sizes.get(p).copied().unwrap_or(1)));
            let recovered_messages = actual_messages(&cursor, sizes)
                .map_err(|e| format!("round {round}: {name}: read back: {e}"))?;
            cursor
                .close()
                .map_err(|e| format!("round {round}: close {name}: {e}"))?;
            m.truth = recovered.clone();
            m.committed = recovered;
            m.truth_messages = recovered_messages.clone();
            m.committed_messages = recovered_messages;
        }
        opened
            .close()
            .map_err(|e| format!("round {round}: close after the check: {e}"))
    }
}

/// Runs the check `ackstore verify` prints (`ackstore::check::verify`) on the directory: a kill
/// is never damage.
pub(super) fn verify(dir: &Path, round: usize) -> Result<(), String> {
    let storage: Arc<dyn ackstore::Storage> = Arc::new(
        ackstore::FileStorage::open(dir, false)
            .map_err(|e| format!("round {round}: open the directory for verify: {e}"))?,
    );
    let report = ackstore::check::verify(&storage)
        .map_err(|e| format!("round {round}: verify could not run: {e}"))?;
    if report.is_sound() {
        Ok(())
    } else {
        Err(format!(
            "round {round}: verify found damage after a kill:\n{report}"
        ))
    }
}

/// Waits until the log grows past `len` (the child opened the topic), the child exits, or
/// ten seconds pass.
fn wait_for_start(path: &Path, len: u64, child: &mut std::process::Child) -> Result<(), String> {
    let start = Instant::now();
    loop {
        if std::fs::metadata(path).map_or(0, |m| m.len()) > len {
            return Ok(());
        }
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!(
                "the child exited before opening the topic: {status}"
            ));
        }
        if start.elapsed() > Duration::from_secs(10) {
            return Err("the child did not open the topic within 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// What a process-kill test checks: its own workload's log and state after each kill.
pub(super) trait Workload {
    /// The test the child runs (this binary, run again with it as the exact filter).
    fn test_name(&self) -> String;

    /// Fills the directory before the first child runs, logging what it did; nothing by
    /// default.
    fn prepare(&mut self, dir: &Path, log: &Path) -> Result<(), String> {
        let _ = (dir, log);
        Ok(())
    }

    /// Applies the log's new complete lines (the child's, up to its kill).
    fn apply_log(&mut self, log: &Path) -> Result<(), String>;

    /// Reopens the directory after kill number `round` and checks it against the log (to which
    /// it may add what the next child needs to know).
    fn check(&mut self, dir: &Path, log: &Path, round: usize) -> Result<(), String>;
}

/// Runs `rounds` children of `workload` one after the other on one directory (first filled by
/// [`Workload::prepare`]), each killed with SIGKILL at a random moment within 120 ms of
/// logging its first line (having opened the directory); after
/// each kill applies the log, checks the reopened directory and runs `verify` on it. Returns
/// the first failure, with the child's stderr where it matters.
pub(super) fn kill_rounds(
    workload: &mut impl Workload,
    rounds: usize,
    seed: u64,
) -> Result<(), String> {
    kill_rounds_within(workload, rounds, seed, Duration::from_micros(120_000))
}

/// [`kill_rounds`] with each kill at a random moment within `window` after the child logged
/// its first line.
pub(super) fn kill_rounds_within(
    workload: &mut impl Workload,
    rounds: usize,
    seed: u64,
    window: Duration,
) -> Result<(), String> {
    let window_micros = u64::try_from(window.as_micros()).unwrap_or(u64::MAX).max(1);
    let work = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dir = work.path().join("topic");
    std::fs::create_dir(&dir).map_err(|e| e.to_string())?;
    let log_path: PathBuf = work.path().join("workload.log");
    File::create(&log_path).map_err(|e| e.to_string())?;
    let stderr_path = work.path().join("child.stderr");
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let test_name = workload.test_name();
    workload.prepare(&dir, &log_path)?;
    let mut rng = Rng::new(seed);
    for round in 0..rounds {
        let len = std::fs::metadata(&log_path).map_or(0, |m| m.len());
        let mut child = support::harness::child_running(&exe, &test_name)
            .env(CHILD_DIR, &dir)
            .env(CHILD_LOG, &log_path)
            .env(CHILD_SEED, seed.wrapping_add(round as u64 + 1).to_string())
            .stderr(File::create(&stderr_path).map_err(|e| e.to_string())?)
            .spawn()
            .map_err(|e| format!("spawn the child: {e}"))?;
        let started = wait_for_start(&log_path, len, &mut child);
        if started.is_ok() {
            std::thread::sleep(Duration::from_micros(rng.below(window_micros)));
        }
        // SIGKILL: no destructor, no flush, no close runs in the child.
        let _ = child.kill();
        let status = child.wait().map_err(|e| e.to_string())?;
        let child_err = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        workload
            .apply_log(&log_path)
            .map_err(|e| format!("round {round}: {e}\nchild stderr: {child_err}"))?;
        started.map_err(|e| format!("round {round}: {e}\nchild stderr: {child_err}"))?;
        if status.code().is_some() {
            return Err(format!(
                "round {round}: the child exited by itself ({status}) instead of being \
                 killed\nchild stderr: {child_err}"
            ));
        }
        workload.check(&dir, &log_path, round)?;
        verify(&dir, round)?;
    }
    Ok(())
}

/// The workload of this file's tests: one topic, opened `through` a way.
struct Harness {
    through: Through,
    state: Parent,
}

impl Workload for Harness {
    fn test_name(&self) -> String {
        self.through.test_name()
    }

    fn apply_log(&mut self, log: &Path) -> Result<(), String> {
        self.state.apply_log(log)
    }

    fn check(&mut self, dir: &Path, _log: &Path, round: usize) -> Result<(), String> {
        self.state.check(self.through, dir, round)
    }
}

impl Harness {
    fn parent(&mut self, rounds: usize, seed: u64) -> Result<(), String> {
        kill_rounds(self, rounds, seed)?;
        let state = &self.state;
        // The kills must have landed mid-workload, not only during start-up.
        if rounds >= 10
            && (state.acks == 0
                || state.batch_index_acks == 0
                || state.flushes == 0
                || state.seeks == 0)
        {
            return Err(format!(
                "the children did too little before being killed: {} acks ({} of single \
                 messages of a batch), {} flushes, {} seeks",
                state.acks, state.batch_index_acks, state.flushes, state.seeks
            ));
        }
        eprintln!(
            "{rounds} kills: {} acks ({} of single messages of a batch), {} flushes or closes, \
             {} seeks logged; {} entries",
            state.acks,
            state.batch_index_acks,
            state.flushes,
            state.seeks,
            state.appended.len()
        );
        Ok(())
    }
}

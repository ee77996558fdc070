//! Two processes sharing one topic directory (or one store directory, its topics in directories
//! of their own) on real files with the directory lock out of the way (what shared storage, or a
//! lock broken by an operator, looks like): both open, append, ack, flush, close and reopen,
//! taking the topic (or the store) from each other at random moments. Whatever the
//! interleaving, no ack a flush confirmed is lost, nothing is acked that was not, every recorded
//! ledger stays readable, and once both are gone a fresh open succeeds and works.
//!
//! The test re-runs its own binary as the two processes (an environment variable tells a run
//! it is one of them).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ackstore::storage::{LockGuard, StorageFile};
use ackstore::{CursorOptions, ManagedLedger, Position, Store, StoreConfig};
use ackstore::{FileStorage, Storage};

use crate::support;

const ROLE: &str = "ACKSTORE_TWO_PROCESSES_ROLE";
const DIR: &str = "ACKSTORE_TWO_PROCESSES_DIR";
const LOG: &str = "ACKSTORE_TWO_PROCESSES_LOG";
/// The test each process re-runs, by what the directory holds.
const TOPIC_TEST: &str = "two_processes_sharing_a_directory_without_the_lock_lose_no_flushed_ack";
const STORE_TEST: &str = "two_processes_sharing_a_store_without_the_lock_lose_no_flushed_ack";
/// The store's topic.
const TOPIC: &str = "persistent://t/ns/topic";
const SUB: &str = "sub";
const RUN_FOR: Duration = Duration::from_millis(1_500);
/// A process that has not flushed once by `RUN_FOR` (a loaded machine) goes on until it has,
/// or until this much time has passed.
const RUN_AT_MOST: Duration = Duration::from_secs(60);

/// The shared directory, with `lock` taken in a directory of this process's own, so it never
/// keeps the other process out.
/// It keeps no local directory of its own ([`Storage::local_dir`] is `None`), as a storage
/// wrapper of a broker's may not.
#[derive(Debug)]
pub(crate) struct Unlocked {
    pub(crate) shared: FileStorage,
    pub(crate) own: FileStorage,
}

impl Storage for Unlocked {
    fn location(&self) -> String {
        self.shared.location()
    }
    fn list(&self) -> ackstore::Result<Vec<String>> {
        self.shared.list()
    }
    fn list_prefix(&self, prefix: &str) -> ackstore::Result<Vec<String>> {
        self.shared.list_prefix(prefix)
    }
    fn subdirectory(&self, name: &str, create: bool) -> ackstore::Result<Option<Arc<dyn Storage>>> {
        self.shared.subdirectory(name, create)
    }
    fn exists(&self, name: &str) -> ackstore::Result<bool> {
        self.shared.exists(name)
    }
    fn create(&self, name: &str) -> ackstore::Result<Arc<dyn StorageFile>> {
        self.shared.create(name)
    }
    fn open(&self, name: &str) -> ackstore::Result<Arc<dyn StorageFile>> {
        self.shared.open(name)
    }
    fn remove(&self, name: &str) -> ackstore::Result<()> {
        self.shared.remove(name)
    }
    fn rename(&self, from: &str, to: &str) -> ackstore::Result<()> {
        self.shared.rename(from, to)
    }
    fn link(&self, from: &str, to: &str) -> ackstore::Result<()> {
        self.shared.link(from, to)
    }
    fn sync_dir(&self) -> ackstore::Result<()> {
        self.shared.sync_dir()
    }
    fn lock(&self) -> ackstore::Result<LockGuard> {
        self.own.lock()
    }
}

fn parse(line: &str) -> Option<Position> {
    let (l, e) = line.split_once(':')?;
    Some(Position::new(l.parse().ok()?, e.parse().ok()?))
}

/// The topic of `storage`: a topic directory's own, or (`store`) the topic of the store kept
/// there, with the store that holds it.
fn open_topic(
    storage: &Arc<dyn Storage>,
    store: bool,
) -> ackstore::Result<(Option<Store>, Arc<ManagedLedger>)> {
    if store {
        let config = StoreConfig {
            ledger: support::topic::config(7),
            flusher_threads: 0,
            ..StoreConfig::default()
        };
        let store = Store::open_with_storage(storage.clone(), config)?;
        let topic = store.topic(TOPIC)?;
        Ok((Some(store), topic))
    } else {
        let topic = ManagedLedger::open_with_storage(storage.clone(), support::topic::config(7))?;
        Ok((None, Arc::new(topic)))
    }
}

/// One of the two processes: rounds of open, append, ack, flush, close, until time is up and it
/// has flushed at least once.
/// Logs `try L:E` before each ack and `flushed L:E` for each ack a flush returned `Ok` after.
fn child(dir: &Path, log: &Path, store: bool) {
    let own = tempfile::tempdir().unwrap();
    let mut out = std::fs::File::create(log).unwrap();
    let storage: Arc<dyn Storage> = Arc::new(Unlocked {
        shared: FileStorage::open(dir, false).unwrap(),
        own: FileStorage::open(own.path(), false).unwrap(),
    });
    let start = Instant::now();
    let mut round = 0u64;
    let mut flushes = 0u64;
    let mut failures = 0u64;
    while start.elapsed() < RUN_FOR || (flushes == 0 && start.elapsed() < RUN_AT_MOST) {
        round += 1;
        // Any error ends the round: a fenced or out-raced handle starts again from an open.
        let outcome = (|| -> ackstore::Result<()> {
            let (store, topic) = open_topic(&storage, store)?;
            let cursor = topic.open_cursor(SUB, CursorOptions::default())?;
            for step in 0..(round % 5 + 1) {
                for i in 0..3 {
                    topic.append(format!("r{round} s{step} {i}").as_bytes())?;
                }
                topic.sync()?;
                let entries = cursor.read_entries(4)?;
                let mut acked = Vec::new();
                for (k, e) in entries.iter().enumerate() {
                    if (k + step as usize).is_multiple_of(2) {
                        let p = e.position;
                        writeln!(out, "try {}:{}", p.ledger_id, p.entry_id).unwrap();
                        cursor.ack(p)?;
                        acked.push(p);
                    }
                }
                cursor.flush()?;
                flushes += 1;
                for p in acked {
                    writeln!(out, "flushed {}:{}", p.ledger_id, p.entry_id).unwrap();
                }
            }
            cursor.close()?;
            topic.close()?;
            store.map_or(Ok(()), |s| s.close())
        })();
        if outcome.is_err() {
            // Back off a random while, as a broker would after losing the topic: two processes
            // that take the topic from each other at the same pace could otherwise keep fencing
            // each other before either flushes.
            failures += 1;
            let spread = 1 + 4 * failures.min(8);
            let pause = (u64::from(std::process::id()) ^ round.wrapping_mul(0x9e37_79b9)) % spread;
            std::thread::sleep(Duration::from_millis(pause));
        } else {
            failures = 0;
        }
    }
    out.flush().unwrap();
}

#[test]
fn two_processes_sharing_a_directory_without_the_lock_lose_no_flushed_ack() {
    two_processes(false);
}

#[test]
fn two_processes_sharing_a_store_without_the_lock_lose_no_flushed_ack() {
    two_processes(true);
}

/// Runs the two processes on a topic directory, or (`store`) on a store directory, and checks
/// what they left against their logs.
fn two_processes(store: bool) {
    if std::env::var_os(ROLE).is_some() {
        let dir = PathBuf::from(std::env::var_os(DIR).unwrap());
        let log = PathBuf::from(std::env::var_os(LOG).unwrap());
        child(&dir, &log, store);
        return;
    }
    let test =
        support::harness::test_path(module_path!(), if store { STORE_TEST } else { TOPIC_TEST });
    let dir = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let children: Vec<_> = (0..2)
        .map(|i| {
            support::harness::child_quiet(&std::env::current_exe().unwrap(), &test)
                .env(ROLE, "child")
                .env(DIR, dir.path())
                .env(LOG, logs.path().join(format!("{i}.log")))
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a process failed (a panic)");
    }
    let (mut tried, mut flushed) = (BTreeSet::new(), BTreeSet::new());
    for i in 0..2 {
        let text = std::fs::read_to_string(logs.path().join(format!("{i}.log"))).unwrap();
        for line in text.lines() {
            match line.split_once(' ') {
                Some(("try", p)) => drop(tried.insert(parse(p).unwrap())),
                Some(("flushed", p)) => drop(flushed.insert(parse(p).unwrap())),
                _ => panic!("bad log line {line:?}"),
            }
        }
    }
    assert!(!flushed.is_empty(), "the processes made progress");

    // Nobody stays fenced: a fresh owner (with the real lock) opens, reads, flushes, closes.
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(dir.path(), false).unwrap());
    let (owner, topic) = open_topic(&storage, store).expect("a fresh open succeeds");
    let cursor = topic.open_cursor(SUB, CursorOptions::default()).unwrap();
    let mut in_layout = BTreeSet::new();
    for span in topic.ledgers() {
        for e in 0..span.entries {
            let p = Position::new(span.id, e);
            topic.read(p).expect("every recorded entry is readable");
            in_layout.insert(p);
            if cursor.is_acked(p).unwrap() {
                assert!(tried.contains(&p), "{p} is acked but nobody acked it");
            }
        }
    }
    for p in &flushed {
        assert!(
            in_layout.contains(p),
            "{p} was acked and flushed but is gone"
        );
        assert!(cursor.is_acked(*p).unwrap(), "flushed ack {p} was lost");
    }
    topic.append(b"after").unwrap();
    cursor.flush().unwrap();
    cursor.close().unwrap();
    topic.close().unwrap();
    if let Some(owner) = owner {
        owner.close().unwrap();
        assert!(
            dir.path().join("t1").is_dir(),
            "the store's topic has its directory"
        );
    }
}

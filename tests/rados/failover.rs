//! Fail-over between broker processes sharing one topic in a RADOS pool (`CEPH_CONF`).
//!
//! - An owner process appends, syncs, acks and flushes; it is SIGKILLed at a random moment and
//!   the next process takes the topic over once the lease has expired, again and again. At the
//!   end every entry a sync confirmed is readable, every ack a flush confirmed is there (for every
//!   entry the topic holds: a killed process's unsent writes are lost as in a power cut, and a
//!   reader may have seen and acked an entry before its sync), and nothing is acked that no
//!   process acked (invariants 1, 2 and 6).
//! - An owner paused with SIGSTOP past its lease, replaced, then resumed has every write
//!   refused by the cluster and sees `Fenced`.
//!
//! The test re-runs its own binary as the owner processes (an environment variable names the
//! role). Each process writes what it did to a local journal, line by line, *after* the call
//! returned (`S` synced entry, `F` flush) or *before* it (`A` ack attempted), so the journal
//! survives the SIGKILL and bounds what the topic may hold.

#![cfg(feature = "rados")]

use crate::support;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ackstore::Storage;
use ackstore::{CursorOptions, Error, InitialPosition, ManagedLedger, Position};
use support::rados::{cluster, fresh_namespace, pool};
use support::workload::{Rng, seed_from_env};

const ROLE: &str = "ACKSTORE_RADOS_FAILOVER_ROLE";
const NAMESPACE: &str = "ACKSTORE_RADOS_FAILOVER_NAMESPACE";
const JOURNAL: &str = "ACKSTORE_RADOS_FAILOVER_JOURNAL";
const SEED: &str = "ACKSTORE_RADOS_FAILOVER_SEED";
const LEASE: Duration = Duration::from_secs(1);
/// How long a process waits for the previous owner's lease (1.6-3.9 s measured for a 2 s
/// lease on the test cluster) before it gives up.
const TAKEOVER_AT_MOST: Duration = Duration::from_secs(60);
const CURSOR: &str = "sub";

/// Opens the topic in `namespace`, waiting (a watch on its lock) while the previous owner's
/// lease lasts.
fn take_over(namespace: &str) -> ManagedLedger {
    let storage = cluster()
        .storage(&pool(), namespace)
        .expect("open the namespace")
        .with_lease(LEASE)
        .with_lock_wait(TAKEOVER_AT_MOST);
    ManagedLedger::open_with_storage(Arc::new(storage), support::topic::config(40))
        .unwrap_or_else(|e| panic!("take over {namespace}: {e}"))
}

fn earliest() -> CursorOptions {
    CursorOptions {
        initial_position: InitialPosition::Earliest,
        inclusive: true,
    }
}

struct Journal(std::fs::File);

impl Journal {
    fn open(path: &str) -> Self {
        Self(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .expect("open the journal"),
        )
    }

    fn line(&mut self, line: &str) {
        // One write per line, so a SIGKILL never leaves half a line.
        self.0
            .write_all(format!("{line}\n").as_bytes())
            .expect("journal");
    }
}

fn pos_text(p: Position) -> String {
    format!("{} {}", p.ledger_id, p.entry_id)
}

fn parse_pos(words: &[&str]) -> Position {
    Position::new(words[0].parse().unwrap(), words[1].parse().unwrap())
}

fn child(test: &str, role: &str, namespace: &str, journal: &Path, seed: u64) -> Child {
    let test = support::harness::test_path(module_path!(), test);
    support::harness::child_showing(&std::env::current_exe().unwrap(), &test)
        .env(ROLE, role)
        .env(NAMESPACE, namespace)
        .env(JOURNAL, journal)
        .env(SEED, seed.to_string())
        .spawn()
        .expect("start a broker process")
}

fn wait_for_line(journal: &Path, line: &str, child: &mut Child) {
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(journal).unwrap_or_default();
        if text.lines().any(|l| l == line) {
            return;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the broker process exited ({status}) before `{line}`:\n{text}");
        }
        assert!(
            started.elapsed() < TAKEOVER_AT_MOST * 2,
            "no `{line}` in time:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} failed");
}

/// The owner role: takes the topic over, then appends, syncs, acks and flushes until killed.
fn run_owner(round: &str) {
    let namespace = std::env::var(NAMESPACE).unwrap();
    let mut journal = Journal::open(&std::env::var(JOURNAL).unwrap());
    let mut rng = Rng::new(std::env::var(SEED).unwrap().parse().unwrap());
    let topic = take_over(&namespace);
    let cursor = topic.open_cursor(CURSOR, earliest()).unwrap();
    journal.line(&format!("open {round}"));
    let mut unsynced = Vec::new();
    for i in 0u64.. {
        for _ in 0..=rng.below(8) {
            unsynced.push(topic.append(format!("entry {i}").as_bytes()).unwrap());
        }
        if rng.chance(50) {
            topic.sync().unwrap();
            for p in unsynced.drain(..) {
                journal.line(&format!("S {}", pos_text(p)));
            }
        }
        for entry in cursor.read_entries(16).unwrap() {
            if rng.chance(60) {
                journal.line(&format!("A {}", pos_text(entry.position)));
                cursor.ack(entry.position).unwrap();
            }
        }
        if rng.chance(30) {
            cursor.flush().unwrap();
            journal.line("F");
        }
    }
}

#[test]
fn an_owner_killed_at_random_moments_loses_no_flushed_ack_and_no_synced_entry() {
    const TEST: &str = "an_owner_killed_at_random_moments_loses_no_flushed_ack_and_no_synced_entry";
    if let Ok(role) = std::env::var(ROLE) {
        return run_owner(role.strip_prefix("owner-").expect("an owner role"));
    }
    let seed = seed_from_env(SEED);
    eprintln!("{SEED}={seed}");
    let rounds: u64 = std::env::var("RADOS_KILL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let mut rng = Rng::new(seed);
    let namespace = fresh_namespace("failover");
    let dir = tempfile::tempdir().unwrap();
    let mut synced = BTreeSet::new();
    let mut acked = BTreeSet::new();
    let mut flushed = BTreeSet::new();
    for round in 0..rounds {
        let journal = dir.path().join(format!("journal-{round}"));
        let mut owner = child(
            TEST,
            &format!("owner-{round}"),
            &namespace,
            &journal,
            rng.next_u64(),
        );
        wait_for_line(&journal, &format!("open {round}"), &mut owner);
        std::thread::sleep(Duration::from_millis(100 + rng.below(900)));
        owner.kill().unwrap();
        owner.wait().unwrap();
        let mut attempted = Vec::new();
        for line in std::fs::read_to_string(&journal).unwrap().lines() {
            let words: Vec<&str> = line.split(' ').collect();
            match words[0] {
                "S" => {
                    synced.insert(parse_pos(&words[1..]));
                }
                "A" => {
                    let p = parse_pos(&words[1..]);
                    acked.insert(p);
                    attempted.push(p);
                }
                "F" => flushed.extend(attempted.drain(..)),
                _ => {}
            }
        }
        eprintln!(
            "round {round}: {} synced, {} acked, {} flushed so far",
            synced.len(),
            acked.len(),
            flushed.len()
        );
    }
    let topic = take_over(&namespace);
    for p in &synced {
        topic
            .read(*p)
            .unwrap_or_else(|e| panic!("synced entry {p} lost (seed {seed}): {e}"));
    }
    let cursor = topic.open_cursor(CURSOR, earliest()).unwrap();
    // An ack of an entry that was never synced (a reader may see an entry before its sync)
    // refers to nothing once a killed owner's unsent writes are gone: only entries the topic
    // holds are checked.
    let mut checked = 0;
    for p in &flushed {
        if topic.read(*p).is_err() {
            assert!(
                !synced.contains(p),
                "synced entry {p} unreadable (seed {seed})"
            );
            continue;
        }
        checked += 1;
        assert!(
            cursor.is_acked(*p).unwrap(),
            "flushed ack {p} lost (seed {seed}; synced: {})",
            synced.contains(p)
        );
    }
    assert!(
        checked > 0,
        "no flushed ack of an entry the topic holds (seed {seed})"
    );
    let audit = topic.open_cursor("audit", earliest()).unwrap();
    let mut seen = 0;
    loop {
        let entries = audit.read_entries(256).unwrap();
        if entries.is_empty() {
            break;
        }
        for e in entries {
            seen += 1;
            if cursor.is_acked(e.position).unwrap() {
                assert!(
                    acked.contains(&e.position),
                    "{} is acked but no process acked it (seed {seed})",
                    e.position
                );
            }
        }
    }
    assert!(
        seen >= synced.len(),
        "the topic lists fewer entries than were synced"
    );
    assert!(
        !flushed.is_empty(),
        "no round flushed anything (seed {seed})"
    );
    topic.close().unwrap();
}

/// The stale role: owns the topic, says `ready`, waits for `go` (while it is paused and
/// replaced), then tries to write; every attempt must be refused, the first with `Fenced`.
fn run_stale() {
    let namespace = std::env::var(NAMESPACE).unwrap();
    let journal_path = std::env::var(JOURNAL).unwrap();
    let mut journal = Journal::open(&journal_path);
    let topic = take_over(&namespace);
    let cursor = topic.open_cursor(CURSOR, earliest()).unwrap();
    let first = topic.append(b"by the first owner").unwrap();
    topic.sync().unwrap();
    cursor.ack(first).unwrap();
    cursor.flush().unwrap();
    let second = topic.append(b"second").unwrap();
    topic.sync().unwrap();
    journal.line("ready");
    let go = PathBuf::from(format!("{journal_path}.go"));
    while !go.exists() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let append = topic.append(b"late").and_then(|_| topic.sync());
    let again = topic.append(b"later").and_then(|_| topic.sync());
    let ack = cursor.ack(second).and_then(|_| cursor.flush());
    let ack_again = cursor.flush();
    for (what, result) in [
        ("append", &append),
        ("append again", &again),
        ("ack", &ack),
        ("flush again", &ack_again),
    ] {
        journal.line(&format!("{what}: {result:?}"));
    }
    let fenced = |r: &ackstore::Result<()>| matches!(r, Err(Error::Fenced { .. }));
    let refused = |r: &ackstore::Result<()>| r.is_err();
    let ok = fenced(&append) && refused(&again) && fenced(&ack) && refused(&ack_again);
    journal.line(if ok { "all refused" } else { "NOT REFUSED" });
}

#[test]
fn a_stale_owner_paused_past_its_lease_has_every_write_refused() {
    const TEST: &str = "a_stale_owner_paused_past_its_lease_has_every_write_refused";
    if std::env::var(ROLE).is_ok() {
        return run_stale();
    }
    let namespace = fresh_namespace("stale");
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let mut stale = child(TEST, "stale", &namespace, &journal, 0);
    wait_for_line(&journal, "ready", &mut stale);
    signal(&stale, "-STOP");
    // Paused, its renewals stop; the next owner gets the topic once the lease has run out.
    let topic = take_over(&namespace);
    let cursor = topic.open_cursor(CURSOR, earliest()).unwrap();
    let entries = cursor.read_entries(10).unwrap();
    assert_eq!(
        entries.len(),
        1,
        "the flushed ack of the first entry is kept"
    );
    assert_eq!(&entries[0].payload[..], b"second");
    std::fs::write(format!("{}.go", journal.display()), b"").unwrap();
    signal(&stale, "-CONT");
    wait_for_line(&journal, "all refused", &mut stale);
    stale.kill().unwrap();
    stale.wait().unwrap();
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(!text.contains("NOT REFUSED"), "{text}");
    // Nothing of the stale owner landed: the new owner still sees one unacked entry, and
    // writes as usual.
    assert_eq!(
        cursor.read_entries(10).unwrap().len(),
        0,
        "the cursor already read the entry"
    );
    cursor.rewind().unwrap();
    let unacked = cursor.read_entries(10).unwrap();
    assert_eq!(unacked.len(), 1, "{unacked:?}\n{text}");
    assert_eq!(&unacked[0].payload[..], b"second");
    let mine = topic.append(b"by the new owner").unwrap();
    topic.sync().unwrap();
    cursor.ack(mine).unwrap();
    cursor.flush().unwrap();
    topic.close().unwrap();
    let storage = cluster().storage(&pool(), &namespace).unwrap();
    assert!(storage.list().unwrap().len() > 1);
}

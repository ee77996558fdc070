//! A broker paused past its lease on RADOS (`CEPH_CONF`) never takes its lease back from the
//! fleet: whether it resumes while the new owner holds the topic, after the new owner closed it,
//! or after the new owner died and its lease ran out, its writes are refused with `Fenced`, it
//! is told its lease is lost (the hook of `RadosStorage::on_lease_lost`, and
//! `Storage::lease_state`), and a third broker opens the topic within the lease plus one second.
//!
//! The paused broker is this binary re-run as a child process, stopped with SIGSTOP and resumed
//! with SIGCONT; a new owner that dies is another child, killed with SIGKILL.

#![cfg(feature = "rados")]

use crate::support;

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ackstore::{Error, LeaseState, LedgerConfig, ManagedLedger, RadosStorage, Storage};
use support::rados::{Broker, broker_role, cluster, fresh_namespace, heard, pool, tell};

const LEASE: Duration = Duration::from_secs(2);
/// How long a test waits for a broker's line before it gives up (a guard against a hang).
const GUARD: Duration = Duration::from_secs(60);
const NAMESPACE: &str = "ACKSTORE_LEASE_NAMESPACE";

fn storage(namespace: &str) -> RadosStorage {
    cluster()
        .storage(&pool(), namespace)
        .expect("open the namespace")
        .with_lease(LEASE)
}

/// Opens the topic, waiting (a watch on its lock) while another owner holds it, until `deadline`.
fn open_by(namespace: &str, deadline: Instant, what: &str) -> ManagedLedger {
    let waiting =
        storage(namespace).with_lock_wait(deadline.saturating_duration_since(Instant::now()));
    ManagedLedger::open_with_storage(Arc::new(waiting), LedgerConfig::default())
        .unwrap_or_else(|e| panic!("{what} could not open the topic by its deadline: {e}"))
}

/// Waits until nobody holds the topic's lock (a dead owner's lease ran out), until `deadline`.
fn wait_unlocked(namespace: &str, deadline: Instant) {
    let probe = storage(namespace);
    while probe.lock_held().expect("list the lock's holders") {
        assert!(
            Instant::now() < deadline,
            "a dead owner's lock is still held past its lease"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn payloads(topic: &ManagedLedger) -> Vec<Vec<u8>> {
    let cursor = topic
        .open_cursor(
            "audit",
            ackstore::CursorOptions {
                initial_position: ackstore::InitialPosition::Earliest,
                inclusive: true,
            },
        )
        .expect("open a cursor");
    cursor
        .read_entries(100)
        .expect("read")
        .into_iter()
        .map(|e| e.payload.to_vec())
        .collect()
}

/// The paused broker: owns the topic, says `ready`, and once told `go` (after its pause) writes,
/// says whether the write was fenced and what it was told about its lease, then keeps its handle
/// open until the test ends.
fn run_paused() {
    let namespace = std::env::var(NAMESPACE).expect("namespace");
    let storage = storage(&namespace);
    let (lost, told) = mpsc::channel();
    storage.on_lease_lost(move |state| {
        let _ = lost.send(state.clone());
    });
    let topic =
        ManagedLedger::open_with_storage(Arc::new(storage.clone()), LedgerConfig::default())
            .expect("the first owner opens");
    topic.append(b"before the pause").expect("append");
    topic.sync().expect("sync");
    assert!(matches!(storage.lease_state(), LeaseState::Held { .. }));
    tell("ready");
    heard();
    let write = topic.append(b"after the pause").and_then(|_| topic.sync());
    tell(&match write {
        Err(Error::Fenced { .. }) => "write fenced".to_owned(),
        other => format!("write {other:?}"),
    });
    tell(&match told.recv_timeout(GUARD) {
        Ok(LeaseState::Lost { reason, .. }) => format!("lost {reason}"),
        other => format!("not told: {other:?}"),
    });
    tell(&format!("state {:?}", storage.lease_state()));
    heard();
}

/// The owner that dies: takes the topic over once the paused owner's lease ran out, says
/// `ready`, and waits to be killed.
fn run_holder() {
    let namespace = std::env::var(NAMESPACE).expect("namespace");
    let _topic = open_by(&namespace, Instant::now() + GUARD, "the second owner");
    tell("ready");
    heard();
}

/// Checks what the resumed paused broker says: its write refused, and told its lease is lost.
fn resume_and_expect_lost(paused: &mut Broker) {
    paused.signal("CONT");
    paused.say("go");
    let write = paused.expect("write", GUARD);
    assert_eq!(write, "write fenced", "the resumed former owner's write");
    let told = paused.expect("", GUARD);
    assert!(
        told.starts_with("lost ") && told.contains("lease"),
        "the resumed former owner was not told its lease is lost: {told}"
    );
    let state = paused.expect("state", GUARD);
    assert!(state.starts_with("state Lost"), "{state}");
}

/// The third broker's open, within the lease plus one second of `from`; it finds what the first
/// owner synced and nothing it tried after its pause.
fn third_opens(namespace: &str, from: Instant) {
    let topic = open_by(
        namespace,
        from + LEASE + Duration::from_secs(1),
        "the third owner",
    );
    eprintln!("the third owner opened {:?} after", from.elapsed());
    assert_eq!(payloads(&topic), vec![b"before the pause".to_vec()]);
    topic.close().expect("close");
}

fn dispatch(test: &str) -> bool {
    match broker_role().as_deref() {
        None => false,
        Some("paused") => {
            run_paused();
            true
        }
        Some("holder") => {
            run_holder();
            true
        }
        Some(other) => panic!("{test}: unknown role {other}"),
    }
}

/// Starts the first owner in a child and pauses it once it owns the topic.
fn paused_owner(test: &str, namespace: &str) -> Broker {
    let mut paused = Broker::spawn(
        &support::harness::test_path(module_path!(), test),
        "paused",
        &[(NAMESPACE, namespace)],
    );
    paused.expect("ready", GUARD);
    paused.signal("STOP");
    paused
}

#[test]
fn a_paused_owner_resumed_while_the_new_owner_holds_the_topic_is_told_its_lease_is_lost() {
    const TEST: &str =
        "a_paused_owner_resumed_while_the_new_owner_holds_the_topic_is_told_its_lease_is_lost";
    if dispatch(TEST) {
        return;
    }
    let namespace = fresh_namespace("lease-held");
    let mut paused = paused_owner(TEST, &namespace);
    let second = open_by(&namespace, Instant::now() + GUARD, "the second owner");
    resume_and_expect_lost(&mut paused);
    second.close().expect("close");
    drop(second);
    third_opens(&namespace, Instant::now());
}

#[test]
fn a_paused_owner_resumed_after_the_new_owner_closed_never_takes_the_lock_back() {
    const TEST: &str =
        "a_paused_owner_resumed_after_the_new_owner_closed_never_takes_the_lock_back";
    if dispatch(TEST) {
        return;
    }
    let namespace = fresh_namespace("lease-closed");
    let mut paused = paused_owner(TEST, &namespace);
    let second = open_by(&namespace, Instant::now() + GUARD, "the second owner");
    second.close().expect("close");
    drop(second);
    let resumed = Instant::now();
    resume_and_expect_lost(&mut paused);
    third_opens(&namespace, resumed);
}

#[test]
fn a_paused_owner_resumed_after_the_new_owner_died_never_takes_the_lock_back() {
    const TEST: &str = "a_paused_owner_resumed_after_the_new_owner_died_never_takes_the_lock_back";
    if dispatch(TEST) {
        return;
    }
    let namespace = fresh_namespace("lease-died");
    let mut paused = paused_owner(TEST, &namespace);
    let mut holder = Broker::spawn(
        &support::harness::test_path(module_path!(), TEST),
        "holder",
        &[(NAMESPACE, &namespace)],
    );
    holder.expect("ready", GUARD);
    holder.kill();
    let died = Instant::now();
    wait_unlocked(&namespace, died + LEASE + Duration::from_secs(1));
    resume_and_expect_lost(&mut paused);
    third_opens(&namespace, died);
}

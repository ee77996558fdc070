//! A waiting open on RADOS (`CEPH_CONF`, `RadosStorage::with_lock_wait`): it watches the lock
//! object and returns soon after the holder closes the topic or after a dead holder's lease runs
//! out, instead of polling; and it gives up at the bound its caller chose.

#![cfg(feature = "rados")]

use crate::support;

use std::process::Command;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ackstore::{Error, LedgerConfig, ManagedLedger, RadosStorage};
use support::rados::{Broker, broker_role, cluster, conf, fresh_namespace, heard, pool, tell};

const NAMESPACE: &str = "ACKSTORE_LOCK_WAIT_NAMESPACE";
const GUARD: Duration = Duration::from_secs(60);

fn storage(namespace: &str, lease: Duration) -> RadosStorage {
    cluster()
        .storage(&pool(), namespace)
        .expect("open the namespace")
        .with_lease(lease)
}

fn open(storage: RadosStorage) -> ackstore::Result<ManagedLedger> {
    ManagedLedger::open_with_storage(Arc::new(storage), LedgerConfig::default())
}

/// Starts an open that waits up to `bound` for the topic in `namespace`; its result and when it
/// returned come on the channel.
fn waiting_open(
    namespace: &str,
    bound: Duration,
) -> mpsc::Receiver<(ackstore::Result<ManagedLedger>, Instant)> {
    let (done, result) = mpsc::channel();
    let waiter = storage(namespace, Duration::from_secs(10)).with_lock_wait(bound);
    std::thread::spawn(move || {
        let opened = open(waiter);
        let _ = done.send((opened, Instant::now()));
    });
    result
}

/// Waits (polling the cluster's list of watchers, up to a guard) until a client watches the
/// namespace's lock object: the waiting open is then in its wait.
fn wait_for_a_watcher(namespace: &str) {
    let started = Instant::now();
    loop {
        let out = Command::new("rados")
            .args(["-c", &conf(), "-p", &pool(), "-N", namespace])
            .args(["listwatchers", "LOCK"])
            .output()
            .expect("run rados");
        if out.status.success() && out.stdout.starts_with(b"watcher=") {
            return;
        }
        assert!(started.elapsed() < GUARD, "the waiting open never watched");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run_holder() {
    let namespace = std::env::var(NAMESPACE).expect("namespace");
    let _topic = open(storage(&namespace, Duration::from_secs(2))).expect("the holder opens");
    tell("ready");
    heard();
}

#[test]
fn a_waiting_open_returns_soon_after_the_holder_closes() {
    let namespace = fresh_namespace("wait-close");
    let holder = open(storage(&namespace, Duration::from_secs(10))).expect("the holder opens");
    let result = waiting_open(&namespace, GUARD);
    wait_for_a_watcher(&namespace);
    let closing = Instant::now();
    holder.close().expect("close");
    drop(holder);
    let (opened, at) = result.recv_timeout(GUARD).expect("the waiting open hung");
    opened.expect("the waiting open");
    let latency = at.saturating_duration_since(closing);
    eprintln!("the waiting open returned {latency:?} after the close started");
    // The holder's lease (10 s) is far from over: only the release can have woken it.
    assert!(latency < Duration::from_secs(1), "{latency:?}");
}

#[test]
fn a_waiting_open_returns_soon_after_a_dead_holders_lease_runs_out() {
    const TEST: &str = "a_waiting_open_returns_soon_after_a_dead_holders_lease_runs_out";
    if broker_role().is_some() {
        return run_holder();
    }
    let lease = Duration::from_secs(2);
    let namespace = fresh_namespace("wait-expiry");
    let mut holder = Broker::spawn(
        &support::harness::test_path(module_path!(), TEST),
        "holder",
        &[(NAMESPACE, &namespace)],
    );
    holder.expect("ready", GUARD);
    let result = waiting_open(&namespace, GUARD);
    wait_for_a_watcher(&namespace);
    holder.kill();
    let died = Instant::now();
    let (opened, at) = result.recv_timeout(GUARD).expect("the waiting open hung");
    opened.expect("the waiting open");
    let after = at.saturating_duration_since(died);
    eprintln!("the waiting open returned {after:?} after the holder died (lease {lease:?})");
    assert!(after < lease + Duration::from_secs(1), "{after:?}");
}

#[test]
fn a_waiting_open_gives_up_at_its_bound() {
    let namespace = fresh_namespace("wait-bound");
    let holder = open(storage(&namespace, Duration::from_secs(10))).expect("the holder opens");
    let bound = Duration::from_millis(300);
    let started = Instant::now();
    let (opened, at) = waiting_open(&namespace, bound)
        .recv_timeout(GUARD)
        .expect("the waiting open hung");
    assert!(matches!(opened, Err(Error::Locked { .. })), "{opened:?}");
    assert!(at.saturating_duration_since(started) >= bound);
    holder.close().expect("close");
}

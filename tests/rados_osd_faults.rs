//! A store on a replicated pool (size 3, min_size 2) while its OSDs crash: with one OSD of three
//! killed (SIGKILL) and restarted, flushes keep succeeding and a new owner reads back every ack
//! a flush confirmed; with two killed, a flush fails with the operation timeout instead of
//! hanging, and once they are back the next owner recovers everything confirmed and nothing the
//! application did not acknowledge.
//!
//! Needs `CEPH_CONF` naming a cluster of three bluestore OSDs
//! (`CEPH_OSDS=3 CEPH_OBJECTSTORE=bluestore scripts/ceph/start-cluster.sh DIR`): it kills and
//! restarts them with `scripts/ceph/osd.sh`, so it is a binary of its own, and its tests take
//! turns. On any other cluster (CI's has one memstore OSD) each test prints why and passes
//! without running.

#![cfg(feature = "rados")]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ackstore::{
    Cursor, CursorOptions, Error, InitialPosition, ManagedLedger, Position, RadosCluster,
    RadosOptions, RadosStorage, Store,
};
use support::config::store_without_flusher;
use support::rados::{cluster, conf, fresh_namespace, pool};
use support::workload::{Acked, actual};

/// OSDs the tests need.
const OSDS: usize = 3;
/// The topic of every store here.
const TOPIC: &str = "orders";
/// Entries appended (and synced) per step of the workload; all but the last are acked.
const STEP: usize = 4;
/// The guard against a hang while waiting for the writer, far above any expected wait (the
/// default operation timeout is 30 s): no claim on how fast.
const HANG: Duration = Duration::from_secs(180);

/// Tests that kill OSDs take turns.
static TURN: Mutex<()> = Mutex::new(());

/// The directory of the test cluster (`scripts/ceph/start-cluster.sh DIR` writes
/// `DIR/ceph.conf`) when it has [`OSDS`] bluestore OSDs; otherwise prints why `test` does not
/// run and returns `None`.
fn fault_cluster(test: &str) -> Option<PathBuf> {
    let conf = conf();
    let dir = Path::new(&conf)
        .parent()
        .expect("the configuration's directory")
        .to_path_buf();
    let osds = std::fs::read_dir(dir.join("osd")).map_or(0, |d| {
        d.filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("ceph-"))
            .count()
    });
    let bluestore = std::fs::read_to_string(&conf).is_ok_and(|text| {
        text.lines()
            .any(|l| l.trim() == "osd objectstore = bluestore")
    });
    if osds < OSDS || !bluestore {
        println!(
            "skipping {test}: it needs {OSDS} bluestore OSDs to kill and restart, and {conf} \
             has {osds} OSD(s){}; start one with `CEPH_OSDS=3 CEPH_OBJECTSTORE=bluestore \
             scripts/ceph/start-cluster.sh DIR` and set CEPH_CONF=DIR/ceph.conf",
            if bluestore { "" } else { ", not bluestore" }
        );
        return None;
    }
    Some(dir)
}

/// Runs `scripts/ceph/osd.sh DIR action id` (it waits until the OSD is gone, or up again).
fn osd(dir: &Path, action: &str, id: usize) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/ceph/osd.sh");
    let ok = Command::new(script)
        .arg(dir)
        .arg(action)
        .arg(id.to_string())
        .status()
        .expect("run scripts/ceph/osd.sh")
        .success();
    assert!(ok, "osd.sh {} {action} {id}", dir.display());
}

/// Whether osd.`id` of the cluster in `dir` runs.
fn osd_running(dir: &Path, id: usize) -> bool {
    std::fs::read_to_string(dir.join(format!("run/osd.{id}.pid"))).is_ok_and(|pid| {
        std::fs::read_to_string(format!("/proc/{}/comm", pid.trim()))
            .is_ok_and(|comm| comm.trim() == "ceph-osd")
    })
}

/// OSDs killed by a test, started again when it revives them or, should it fail first, when
/// this is dropped, so the next test finds the whole cluster.
struct Killed {
    dir: PathBuf,
    ids: Vec<usize>,
}

impl Killed {
    /// Starts every OSD of the cluster that does not run (a test that failed before reviving
    /// its OSDs), then kills none.
    fn none(dir: &Path) -> Self {
        for id in 0..OSDS {
            if !osd_running(dir, id) {
                osd(dir, "start", id);
            }
        }
        Self {
            dir: dir.to_path_buf(),
            ids: Vec::new(),
        }
    }

    fn kill(&mut self, id: usize) {
        osd(&self.dir, "kill", id);
        self.ids.push(id);
    }

    fn revive(&mut self) {
        for id in std::mem::take(&mut self.ids) {
            osd(&self.dir, "start", id);
        }
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        self.revive();
    }
}

fn earliest() -> CursorOptions {
    CursorOptions {
        initial_position: InitialPosition::Earliest,
        inclusive: true,
    }
}

/// A store's owner and the truth about its one cursor: every ack it made, and every ack made
/// before a flush that returned `Ok`.
struct Owner {
    /// Held open: its topic and cursor are served while it lives.
    _store: Store,
    topic: Arc<ManagedLedger>,
    cursor: Cursor,
    appended: Vec<Position>,
    acked: Acked,
    confirmed: Acked,
}

impl Owner {
    fn open(storage: RadosStorage) -> Self {
        let store =
            Store::open_with_storage(Arc::new(storage), store_without_flusher()).expect("open");
        let topic = store.topic(TOPIC).expect("topic");
        let cursor = topic.open_cursor("sub", earliest()).expect("cursor");
        Self {
            _store: store,
            topic,
            cursor,
            appended: Vec::new(),
            acked: Acked::default(),
            confirmed: Acked::default(),
        }
    }

    /// Appends [`STEP`] entries and syncs them, then acks all but the last (a hole per step).
    fn step(&mut self) -> ackstore::Result<()> {
        let from = self.appended.len();
        for i in 0..STEP {
            let p = self
                .topic
                .append(format!("entry {}", from + i).as_bytes())?;
            self.appended.push(p);
        }
        self.topic.sync()?;
        for &p in &self.appended[from..from + STEP - 1] {
            self.cursor.ack(p)?;
            self.acked.ack(p);
        }
        Ok(())
    }

    /// Flushes; on `Ok`, everything acked so far is confirmed.
    fn flush(&mut self) -> ackstore::Result<()> {
        self.cursor.flush()?;
        self.confirmed = self.acked.clone();
        Ok(())
    }
}

/// Opens the store in `namespace` as its next owner (breaking the lock of the previous one,
/// which is known to be gone or about to be dropped) and checks its cursor against the
/// previous owner's truth: every confirmed ack kept, nothing acked that was not.
fn check_next_owner(namespace: &str, before: &Owner) {
    let storage = cluster().storage(&pool(), namespace).expect("namespace");
    storage
        .break_lock()
        .expect("break the previous owner's lock");
    let next = Owner::open(storage);
    let recovered = actual(&next.cursor).expect("the recovered acks");
    for &p in &before.appended {
        if recovered.contains(p) {
            assert!(
                before.acked.contains(p),
                "{p} recovered as acked, never acked"
            );
        } else {
            assert!(
                !before.confirmed.contains(p),
                "{p} acked before a flush that returned Ok, lost"
            );
        }
    }
    let confirmed = before.confirmed.set.len();
    println!("the next owner recovered all {confirmed} confirmed acks");
}

/// What the writer thread reports: a flush that returned `Ok`, or the error that stopped it.
type Report = ackstore::Result<Duration>;

/// Waits until the writer has reported `n` more successful flushes; the longest of them.
fn flushes(reports: &Receiver<Report>, n: usize) -> Duration {
    let mut longest = Duration::ZERO;
    for _ in 0..n {
        let took = reports
            .recv_timeout(HANG)
            .expect("the writer neither flushed nor failed")
            .unwrap_or_else(|e| panic!("a flush failed: {e}"));
        longest = longest.max(took);
    }
    longest
}

#[test]
fn flushes_go_on_while_one_osd_of_three_crashes_and_comes_back() {
    let Some(dir) = fault_cluster("flushes_go_on_while_one_osd_of_three_crashes_and_comes_back")
    else {
        return;
    };
    let _turn = TURN.lock().unwrap_or_else(PoisonError::into_inner);
    let mut killed = Killed::none(&dir);
    let namespace = fresh_namespace("osd-crash");
    // The default operation timeout (30 s) is above the time the cluster takes to mark a dead
    // OSD down: losing one OSD delays flushes, it does not fail them.
    let owner = Owner::open(cluster().storage(&pool(), &namespace).expect("namespace"));
    let stop = Arc::new(AtomicBool::new(false));
    let (report, reports) = mpsc::channel::<Report>();
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut owner = owner;
            while !stop.load(Ordering::SeqCst) {
                let started = Instant::now();
                let done = owner.step().and_then(|()| owner.flush());
                let failed = done.is_err();
                if report.send(done.map(|()| started.elapsed())).is_err() || failed {
                    break;
                }
            }
            owner
        })
    };
    flushes(&reports, 20);
    killed.kill(0);
    let while_down = flushes(&reports, 20);
    killed.revive();
    let after = flushes(&reports, 20);
    stop.store(true, Ordering::SeqCst);
    let owner = writer.join().expect("the writer");
    while let Ok(report) = reports.try_recv() {
        report.unwrap_or_else(|e| panic!("a flush failed: {e}"));
    }
    println!(
        "{} flushes, every one Ok; the longest step while osd.0 was down {while_down:?}, \
         after it came back {after:?}",
        owner.cursor.stats().expect("stats").flushes
    );
    check_next_owner(&namespace, &owner);
    drop(owner);
}

/// The operation timeout of the connection whose flushes meet two dead OSDs.
const TIMEOUT: Duration = Duration::from_secs(5);

fn timed_out(result: &ackstore::Result<()>) -> bool {
    matches!(result, Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::TimedOut)
}

#[test]
fn two_osds_of_three_down_a_flush_times_out_and_the_next_owner_keeps_what_was_confirmed() {
    let Some(dir) = fault_cluster(
        "two_osds_of_three_down_a_flush_times_out_and_the_next_owner_keeps_what_was_confirmed",
    ) else {
        return;
    };
    let _turn = TURN.lock().unwrap_or_else(PoisonError::into_inner);
    let mut killed = Killed::none(&dir);
    let namespace = fresh_namespace("osds-lost");
    let connection = RadosCluster::connect_with(
        conf(),
        &RadosOptions {
            osd_op_timeout: Some(TIMEOUT),
            ..RadosOptions::default()
        },
    )
    .expect("connect");
    let mut owner = Owner::open(connection.storage(&pool(), &namespace).expect("namespace"));
    for _ in 0..20 {
        owner.step().expect("a step before the outage");
        owner.flush().expect("a flush before the outage");
    }
    // Entries synced before the outage, acked during it.
    owner.step().expect("a step before the outage");
    let late: Vec<Position> = owner.appended[owner.appended.len() - STEP..].to_vec();

    killed.kill(0);
    killed.kill(1);
    let (done, result) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        for &p in &late {
            owner.cursor.ack(p).expect("an ack is in memory");
            owner.acked.ack(p);
        }
        let started = Instant::now();
        let flush = owner.flush();
        let took = started.elapsed();
        let _ = done.send(());
        (owner, flush, took)
    });
    result
        .recv_timeout(HANG)
        .expect("a flush with two OSDs of three down hung instead of failing");
    let (owner, flush, took) = worker.join().expect("the worker");
    println!(
        "with two OSDs of three down the flush failed after {took:?} (operation timeout \
         {TIMEOUT:?}): {flush:?}"
    );
    assert!(timed_out(&flush), "the flush: {flush:?}");
    killed.revive();
    check_next_owner(&namespace, &owner);
    drop(owner);
}

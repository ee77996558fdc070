//! Finite RADOS operation timeouts (`CEPH_CONF`): a flush while the cluster's OSDs do not answer
//! fails with a timeout instead of blocking for the whole outage, and a connection never waits
//! for ever unless its caller asks. Stops the test cluster's OSD processes (SIGSTOP) for a moment,
//! so it is a test binary of its own.

#![cfg(feature = "rados")]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use ackstore::{
    CursorOptions, Error, InitialPosition, LedgerConfig, ManagedLedger, RadosCluster, RadosOptions,
};
use support::rados::{conf, fresh_namespace, pool};

/// The OSD timeout the test asks for.
const TIMEOUT: Duration = Duration::from_secs(2);

/// The pids of the test cluster's OSDs (`scripts/ceph/start-cluster.sh` records them in
/// `DIR/run/osd.N.pid`, next to `DIR/ceph.conf`).
fn osd_pids() -> Vec<String> {
    let run = Path::new(&conf())
        .parent()
        .expect("the configuration's directory")
        .join("run");
    let mut pids: Vec<String> = std::fs::read_dir(&run)
        .expect("the cluster's run directory")
        .filter_map(|e| {
            let path = e.ok()?.path();
            let name = path.file_name()?.to_str()?.to_owned();
            (name.starts_with("osd.") && name.ends_with(".pid"))
                .then(|| std::fs::read_to_string(&path).ok())
                .flatten()
                .map(|pid| pid.trim().to_owned())
        })
        .collect();
    pids.sort();
    assert!(!pids.is_empty(), "no OSD pid under {}", run.display());
    pids
}

fn signal(pids: &[String], signal: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{signal}"))
        .args(pids)
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill -{signal} {pids:?}");
}

/// Every OSD of the test cluster stopped (SIGSTOP) until dropped.
struct StoppedOsds(Vec<String>);

impl StoppedOsds {
    fn new() -> Self {
        let pids = osd_pids();
        signal(&pids, "STOP");
        Self(pids)
    }
}

impl Drop for StoppedOsds {
    fn drop(&mut self) {
        signal(&self.0, "CONT");
    }
}

fn timed_out(result: &ackstore::Result<()>) -> bool {
    matches!(result, Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::TimedOut)
}

#[test]
fn a_flush_while_the_osds_do_not_answer_fails_with_a_timeout_instead_of_hanging() {
    let cluster = RadosCluster::connect_with(
        conf(),
        &RadosOptions {
            osd_op_timeout: Some(TIMEOUT),
            ..RadosOptions::default()
        },
    )
    .expect("connect");
    assert_eq!(cluster.op_timeouts().osd_op, TIMEOUT);
    let storage = cluster
        .storage(&pool(), &fresh_namespace("timeouts"))
        .expect("namespace");
    let topic = Arc::new(
        ManagedLedger::open_with_storage(Arc::new(storage), LedgerConfig::default()).expect("open"),
    );
    let cursor = topic
        .open_cursor(
            "sub",
            CursorOptions {
                initial_position: InitialPosition::Earliest,
                inclusive: true,
            },
        )
        .expect("cursor");
    let first = topic.append(b"before the outage").expect("append");
    topic.sync().expect("sync");

    let stopped = StoppedOsds::new();
    let (done, results) = mpsc::channel();
    let worker = {
        let topic = topic.clone();
        std::thread::spawn(move || {
            let flush = cursor.ack(first).and_then(|_| cursor.flush());
            let sync = topic
                .append(b"during the outage")
                .and_then(|_| topic.sync());
            let _ = done.send((flush, sync));
        })
    };
    // The test's own guard against a hang, far above the timeout: no claim on how fast.
    let (flush, sync) = results
        .recv_timeout(TIMEOUT * 10)
        .expect("a flush during the outage hung instead of failing");
    drop(stopped);
    worker.join().expect("the worker");
    assert!(timed_out(&flush), "the flush: {flush:?}");
    assert!(timed_out(&sync), "the sync: {sync:?}");
    let message = format!(
        "{}",
        std::error::Error::source(&flush.unwrap_err()).unwrap()
    );
    assert!(message.contains("operation timeout"), "{message}");
}

/// A copy of the test cluster's configuration whose `[client]` section sets the OSD and monitor
/// timeouts to `value` (or leaves them unset with `None`).
fn conf_with(dir: &Path, value: Option<&str>) -> PathBuf {
    let mut text: String = std::fs::read_to_string(conf())
        .unwrap()
        .lines()
        .filter(|l| !l.trim_start().starts_with("rados osd op timeout"))
        .filter(|l| !l.trim_start().starts_with("rados mon op timeout"))
        .map(|l| format!("{l}\n"))
        .collect();
    if let Some(value) = value {
        text.push_str(&format!(
            "\n[client]\nrados osd op timeout = {value}\nrados mon op timeout = {value}\n"
        ));
    }
    let path = dir.join(format!("ceph-{}.conf", value.unwrap_or("unset")));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_connection_never_waits_for_ever_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let default = RadosOptions::DEFAULT_OP_TIMEOUT;
    let timeouts = |conf: &Path, options: RadosOptions| {
        let t = RadosCluster::connect_with(conf, &options)
            .expect("connect")
            .op_timeouts();
        (t.osd_op, t.mon_op)
    };
    let secs = Duration::from_secs;
    // Ceph's own default (0, for ever) is replaced; an explicit zero in the file too.
    for unset in [
        conf_with(dir.path(), None),
        conf_with(dir.path(), Some("0")),
    ] {
        assert_eq!(
            timeouts(&unset, RadosOptions::default()),
            (default, default)
        );
        assert_eq!(
            RadosCluster::connect(&unset).unwrap().op_timeouts().osd_op,
            default
        );
    }
    // The file's value is kept; the caller's wins over it, rounded up to whole seconds.
    let seven = conf_with(dir.path(), Some("7"));
    assert_eq!(
        timeouts(&seven, RadosOptions::default()),
        (secs(7), secs(7))
    );
    assert_eq!(
        timeouts(
            &seven,
            RadosOptions {
                osd_op_timeout: Some(Duration::from_millis(1_500)),
                mon_op_timeout: Some(secs(4)),
            }
        ),
        (secs(2), secs(4))
    );
    // Waiting for ever only when asked.
    assert_eq!(
        timeouts(
            &seven,
            RadosOptions {
                osd_op_timeout: Some(Duration::ZERO),
                ..RadosOptions::default()
            }
        ),
        (Duration::ZERO, secs(7))
    );
}

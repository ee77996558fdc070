//! The ownership lease on RADOS (`CEPH_CONF`) across a pause of the cluster's I/O: an owner
//! whose renewal timed out once keeps renewing, so no second owner takes a namespace whose
//! owner is alive (invariant 6). Pauses every OSD for a moment (`ceph osd pause`), so it is a
//! test binary of its own.

#![cfg(feature = "rados")]

mod support;

use std::process::Command;
use std::time::Duration;

use ackstore::{Error, RadosCluster, Storage};
use support::rados::{cluster, conf, fresh_namespace, pool};

fn ceph(args: &[&str]) {
    let out = Command::new("ceph")
        .args(["-c", &conf()])
        .args(args)
        .output()
        .expect("run the ceph command");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Unpauses the cluster when dropped, whatever the test did.
struct Paused;

impl Paused {
    fn new() -> Self {
        ceph(&["osd", "pause"]);
        Self
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        ceph(&["osd", "unpause"]);
    }
}

#[test]
fn an_owner_whose_renewal_timed_out_once_keeps_its_lease() {
    // The owner's client gives up on an operation after one second, as a broker's client does
    // after its own timeout when the network drops for a moment.
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("ceph.conf");
    let mut text = std::fs::read_to_string(conf()).unwrap();
    text.push_str("\n[client]\nrados osd op timeout = 1\n");
    std::fs::write(&short, text).unwrap();
    let namespace = fresh_namespace("lease-blip");
    let owner = RadosCluster::connect(&short)
        .unwrap()
        .storage(&pool(), &namespace)
        .unwrap()
        .with_lease(Duration::from_secs(2));
    let _guard = owner.lock().unwrap();

    // The cluster's I/O stops for three seconds: at least one renewal times out.
    {
        let _paused = Paused::new();
        std::thread::sleep(Duration::from_secs(3));
    }
    // Three leases later the owner, alive all along, still holds the namespace.
    std::thread::sleep(Duration::from_secs(6));
    let other = cluster().storage(&pool(), &namespace).unwrap();
    match other.lock() {
        Err(Error::Locked { .. }) => {}
        Err(e) => panic!("{e}"),
        Ok(_second) => panic!(
            "a second owner took the namespace while its owner was alive: the owner stopped \
             renewing its lease after one timed-out renewal"
        ),
    }
}

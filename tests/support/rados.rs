//! Storage in the Ceph cluster named by `CEPH_CONF` (pool `ACKSTORE_RADOS_POOL`, default
//! `ackstore`), for the tests built with the `rados` feature. Each call gets a namespace no
//! other test (or earlier run) uses, so tests share one cluster without seeing each other.

#![cfg(feature = "rados")]

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use ackstore::{RadosCluster, RadosStorage};

/// The pool the tests use.
pub fn pool() -> String {
    std::env::var("ACKSTORE_RADOS_POOL").unwrap_or_else(|_| "ackstore".into())
}

/// The configuration file of the test cluster; a test built with the feature and run without a
/// cluster fails here, saying what to start.
pub fn conf() -> String {
    std::env::var("CEPH_CONF").expect(
        "CEPH_CONF must name a running cluster's ceph.conf for the rados tests \
         (scripts/ceph/start-cluster.sh DIR prints it)",
    )
}

/// One connection per test process.
pub fn cluster() -> &'static RadosCluster {
    static CLUSTER: OnceLock<RadosCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| RadosCluster::connect(conf()).expect("connect to the test cluster"))
}

/// A namespace name no other call, in this process or another, returns.
pub fn fresh_namespace(what: &str) -> String {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos();
    format!(
        "{what}-{}-{nanos}-{}",
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Storage in a fresh namespace of the test pool.
pub fn fresh_storage(what: &str) -> RadosStorage {
    cluster()
        .storage(&pool(), &fresh_namespace(what))
        .expect("open a namespace of the test pool")
}

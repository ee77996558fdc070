//! One store and its topic opened alone, in two processes: while the store runs, and once its
//! `Store::close` returned (its handle still alive), another process's open of the store's
//! topic directory alone, by its path or through a storage that does not say where it lives, is
//! refused with `Error::OwnedByStore` and writes nothing; a second `Store::open` is refused
//! while the store runs and succeeds once it is closed, with every flushed ack, and its acks are
//! read back by the first process's next open. The test re-runs its own binary as the other
//! process (an environment variable tells a run which part it plays).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ackstore::{
    CursorOptions, Error, FileStorage, LedgerConfig, ManagedLedger, Position, Storage, Store,
    StoreConfig,
};

use crate::support;
use crate::two_processes_one_directory::Unlocked;

const ROLE: &str = "ACKSTORE_STORE_CLOSE_ROLE";
const DIR: &str = "ACKSTORE_STORE_CLOSE_DIR";
const TEST: &str = "a_closed_store_opens_in_another_process_and_its_topic_never_opens_alone";
const TOPIC: &str = "persistent://t/ns/orders";

fn config() -> StoreConfig {
    StoreConfig {
        ledger: support::topic::config(5),
        flusher_threads: 0,
        ..StoreConfig::default()
    }
}

/// The payloads cursor `name` reads (every entry it has not acknowledged), from the start.
fn unacked(topic: &ManagedLedger, name: &str) -> Vec<String> {
    let cursor = topic
        .open_cursor(name, CursorOptions::default())
        .expect("cursor");
    cursor.rewind().expect("rewind");
    cursor
        .read_entries(100)
        .expect("read")
        .iter()
        .map(|e| String::from_utf8_lossy(&e.payload).into_owned())
        .collect()
}

/// The payloads `m{i}` for `i` in `0..n` but `acked`.
fn payloads_but(n: u64, acked: &[u64]) -> Vec<String> {
    (0..n)
        .filter(|i| !acked.contains(i))
        .map(|i| format!("m{i}"))
        .collect()
}

/// Every file of `dir` and its bytes.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = std::fs::read(&p).expect("read");
            (p, bytes)
        })
        .collect()
}

/// The other process's part; panics (a failed run) on anything unexpected.
fn other_process(role: &str, dir: &Path) {
    let topic_dir = dir.join("t1");
    match role {
        "alone" => {
            let own = tempfile::tempdir().expect("temporary directory");
            let before = files(&topic_dir);
            let hidden: Arc<dyn Storage> = Arc::new(Unlocked {
                shared: FileStorage::open(&topic_dir, false).expect("storage"),
                own: FileStorage::open(own.path(), false).expect("storage"),
            });
            for (what, opened) in [
                (
                    "by its path",
                    ManagedLedger::open(&topic_dir, LedgerConfig::default()),
                ),
                (
                    "through a storage that hides its place",
                    ManagedLedger::open_with_storage(hidden.clone(), LedgerConfig::default()),
                ),
            ] {
                match opened {
                    Err(Error::OwnedByStore { .. }) => {}
                    Err(e) => panic!("{what}: refused with the wrong error: {e}"),
                    Ok(_) => panic!("{what}: a store's topic opened alone"),
                }
            }
            assert!(
                matches!(
                    ackstore::check::inspect(&hidden),
                    Err(Error::OwnedByStore { .. })
                ),
                "inspect refuses it as the open does"
            );
            assert_eq!(files(&topic_dir), before, "a refused open writes nothing");
        }
        "store while the other runs" => {
            assert!(
                matches!(Store::open(dir, config()), Err(Error::Locked { .. })),
                "a second store while the first runs"
            );
        }
        "store after the close" => {
            let store = Store::open(dir, config()).expect("open after the other's close");
            let topic = store.topic(TOPIC).expect("topic");
            // `a`'s ack of m0 was made after the last flush: the first process's close
            // flushed it.
            assert_eq!(unacked(&topic, "a"), payloads_but(12, &[0, 1, 3, 5, 8]));
            assert_eq!(unacked(&topic, "b"), payloads_but(12, &[0, 1, 2, 3, 4, 9]));
            // One more ack (m5), flushed by the close.
            let b = topic
                .open_cursor("b", CursorOptions::default())
                .expect("cursor");
            b.rewind().expect("rewind");
            let next = b.read_entries(1).expect("read")[0].position;
            b.ack(next).expect("ack");
            drop((b, topic));
            store.close().expect("close");
        }
        other => panic!("unknown role {other}"),
    }
}

/// Runs this test's other process as `role` on the store in `dir`; asserts it succeeded.
fn run_other(role: &str, dir: &Path) {
    let test = support::harness::test_path(module_path!(), TEST);
    let out = support::harness::child_quiet(&std::env::current_exe().expect("this binary"), &test)
        .env(ROLE, role)
        .env(DIR, dir)
        .output()
        .expect("run the other process");
    assert!(
        out.status.success(),
        "the other process ({role}) failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "the other process ({role}) ran its part"
    );
}

#[test]
fn a_closed_store_opens_in_another_process_and_its_topic_never_opens_alone() {
    if let Ok(role) = std::env::var(ROLE) {
        let dir = PathBuf::from(std::env::var(DIR).expect("the directory"));
        other_process(&role, &dir);
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = Store::open(dir.path(), config()).expect("open");
    let topic = store.topic(TOPIC).expect("topic");
    let ps: Vec<Position> = support::topic::append_n(&topic, 12);
    let a = topic
        .open_cursor("a", support::topic::earliest())
        .expect("cursor");
    for i in [1, 3, 5, 8] {
        a.ack(ps[i]).expect("ack");
    }
    let b = topic
        .open_cursor("b", support::topic::earliest())
        .expect("cursor");
    b.ack_cumulative(ps[4]).expect("ack");
    b.ack(ps[9]).expect("ack");
    store.flush_all().expect("flush");
    run_other("alone", dir.path());
    run_other("store while the other runs", dir.path());
    // Acked, not flushed: the close flushes it.
    a.ack(ps[0]).expect("ack");
    store.close().expect("close");
    assert!(matches!(a.ack(ps[2]), Err(Error::Closed)));
    assert!(matches!(store.topic(TOPIC), Err(Error::Closed)));
    run_other("alone", dir.path());
    run_other("store after the close", dir.path());
    run_other("alone", dir.path());
    // This process's next open, its closed store's handles still alive, reads the other's ack.
    let again = Store::open(dir.path(), config()).expect("open again");
    let topic_again = again.topic(TOPIC).expect("topic");
    assert_eq!(
        unacked(&topic_again, "a"),
        payloads_but(12, &[0, 1, 3, 5, 8])
    );
    assert_eq!(
        unacked(&topic_again, "b"),
        payloads_but(12, &[0, 1, 2, 3, 4, 5, 9])
    );
    drop(topic_again);
    again.close().expect("close");
    drop((a, b, topic, store));
}

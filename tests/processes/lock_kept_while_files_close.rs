//! A store's directory lock is a POSIX record lock, which the process loses when it closes *any*
//! descriptor of the lock file: the descriptor cache must never close it. A store keeping one
//! descriptor open (every file closed and reopened on use) works on 40 topics (appends, syncs,
//! ledgers rolled every 2 entries and deleted once acknowledged, cursors flushed, the directory
//! listed and synced); between rounds another process (this binary run again) tries to lock the
//! directory and must be refused. Once the store is closed, the same attempt takes the lock:
//! the check can fail.

use std::path::{Path, PathBuf};

use ackstore::storage::Storage;
use ackstore::{Error, FileStorage, Store, StoreConfig};

use crate::support;

const DIR: &str = "ACKSTORE_LOCK_KEPT_DIR";
const TEST: &str = "a_store_keeping_one_file_open_keeps_its_directory_locked";
/// The child's exit codes.
const REFUSED: i32 = 10;
const TAKEN: i32 = 11;

/// The child's part: try the directory's lock once.
fn try_lock(dir: &Path) -> ! {
    let storage = FileStorage::open(dir, false).expect("open the directory");
    match storage.lock() {
        Err(Error::Locked { .. }) => std::process::exit(REFUSED),
        Ok(_) => std::process::exit(TAKEN),
        Err(e) => panic!("lock: {e}"),
    }
}

/// Runs the child on `dir`: its exit code.
fn other_process_locks(dir: &Path) -> i32 {
    let test = support::harness::test_path(module_path!(), TEST);
    let status =
        support::harness::child_quiet(&std::env::current_exe().expect("this binary"), &test)
            .env(DIR, dir)
            .status()
            .expect("run the child");
    status.code().expect("the child exited")
}

#[test]
fn a_store_keeping_one_file_open_keeps_its_directory_locked() {
    if let Ok(dir) = std::env::var(DIR) {
        try_lock(&PathBuf::from(dir));
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = StoreConfig {
        open_files: Some(1),
        ..support::config::store(2, 512)
    };
    let store = Store::open(dir.path(), config).expect("open");
    for round in 0..4 {
        for t in 0..40 {
            let topic = store
                .topic(&format!("persistent://t/ns/lock-{t}"))
                .expect("topic");
            let cursor = topic
                .open_cursor("sub", support::topic::earliest())
                .expect("cursor");
            for _ in 0..3 {
                let p = topic.append(b"entry").expect("append");
                topic.sync().expect("sync");
                cursor.ack(p).expect("ack");
            }
            cursor.flush().expect("flush");
        }
        store.flush_all().expect("flush all");
        assert_eq!(
            other_process_locks(dir.path()),
            REFUSED,
            "another process took the lock of an open store after round {round}"
        );
    }
    store.close().expect("close");
    drop(store);
    assert_eq!(
        other_process_locks(dir.path()),
        TAKEN,
        "the lock of a closed store"
    );
}

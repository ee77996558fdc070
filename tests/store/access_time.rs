//! A store's reads leave access times alone: its restart (the catalog, the journal's scan, every
//! topic's record and listing, every cursor's first answer), reads of every entry (sealed
//! ledgers through their maps) and the check API's `verify` open files and directories with
//! `O_NOATIME`, so under the default `relatime` mount option no file or directory the store
//! wrote has its inode written again by a read (`src/storage/file.rs`, `without_access_time`).

use crate::support;

use std::collections::BTreeMap;
use std::fs::FileTimes;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ackstore::{CursorOptions, FileStorage, Position, Storage, Store};

/// An access time long before any file of the test was written, in seconds since the epoch:
/// `relatime` updates it at the first read (it is older than the file's modification time).
const OLD: i64 = 1_000_000_000;

fn old_time() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(OLD.unsigned_abs())
}

/// Every file and directory under `dir` (`dir` included), by path.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        if out[i].is_dir() {
            let mut children: Vec<PathBuf> = std::fs::read_dir(&out[i])
                .expect("list")
                .map(|e| e.expect("entry").path())
                .collect();
            children.sort();
            out.extend(children);
        }
        i += 1;
    }
    out
}

/// Sets the access time of `path` (a file or a directory) to [`old_time`], its modification
/// time unchanged.
fn age(path: &Path) {
    std::fs::File::open(path)
        .expect("open")
        .set_times(FileTimes::new().set_accessed(old_time()))
        .expect("set the access time");
}

/// The access time of `path`, in whole seconds since the epoch.
fn atime(path: &Path) -> i64 {
    std::fs::metadata(path).expect("stat").atime()
}

/// Whether a plain read (a descriptor without `O_NOATIME`) updates an aged access time on
/// this file system: `false` on a `noatime` mount, where no read can show anything.
fn reads_update_access_times(dir: &Path) -> bool {
    let probe = dir.join("probe");
    std::fs::write(&probe, b"probe").expect("write the probe");
    age(&probe);
    std::fs::read(&probe).expect("read the probe");
    atime(&probe) != OLD
}

/// A temporary directory on a file system where reads update aged access times, or `None`
/// (said on stderr) where none can show (a `noatime` mount).
fn aging_root() -> Option<tempfile::TempDir> {
    let root = tempfile::tempdir().expect("dir");
    if reads_update_access_times(root.path()) {
        Some(root)
    } else {
        eprintln!("this file system does not update access times on reads: nothing to see");
        None
    }
}

#[test]
fn a_restart_reads_and_verify_leave_every_access_time_alone() {
    let Some(root) = aging_root() else {
        return;
    };
    let dir = root.path().join("store");
    // Three topics whose ledgers roll every 4 entries (sealed ledgers read through maps), a
    // flushed cursor each with acks in several ledgers.
    let names = ["persistent://t/ns/a", "persistent://t/ns/b", "c"];
    let mut acked = BTreeMap::new();
    {
        let store = Store::open(&dir, support::config::store(4, 1 << 20)).expect("store");
        for name in names {
            let topic = store.topic(name).expect("topic");
            let positions: Vec<Position> = (0..10u32)
                .map(|i| topic.append(&i.to_le_bytes()).expect("append"))
                .collect();
            topic.sync().expect("sync");
            let cursor = topic
                .open_cursor("sub", CursorOptions::default())
                .expect("cursor");
            for p in positions.iter().step_by(3) {
                cursor.ack(*p).expect("ack");
            }
            cursor.flush().expect("flush");
            acked.insert(name, positions);
        }
        store.close().expect("close");
    }
    let before = tree(&dir);
    for path in &before {
        age(path);
    }

    // A restart to every cursor's answers and every entry read, then a verify.
    {
        let store = Store::open(&dir, support::config::store(4, 1 << 20)).expect("reopen");
        for (name, positions) in &acked {
            let topic = store.topic(name).expect("topic");
            let cursor = topic
                .open_cursor("sub", CursorOptions::default())
                .expect("cursor");
            for (i, p) in positions.iter().enumerate() {
                assert_eq!(
                    cursor.is_acked(*p).expect("is_acked"),
                    i % 3 == 0,
                    "{name} {p}"
                );
            }
            let read = cursor.read_entries(100).expect("read");
            assert_eq!(read.len(), positions.len() - positions.len().div_ceil(3));
        }
        store.close().expect("close");
    }
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(&dir, false).expect("storage"));
    let report = ackstore::check::verify(&storage).expect("verify");
    assert!(report.is_sound(), "{report}");

    let touched: Vec<&PathBuf> = before
        .iter()
        .filter(|p| p.exists() && atime(p) != OLD)
        .collect();
    assert!(
        touched.is_empty(),
        "reads updated the access time of {touched:?}"
    );
}

#[test]
fn reads_of_a_file_the_storage_created_leave_its_access_time_alone() {
    let Some(root) = aging_root() else {
        return;
    };
    // A cache of one descriptor: `b`'s read is through the descriptor its create opened, `a`'s
    // through a reopen (`b`'s create closed its descriptor), and so on by turns.
    let storage = FileStorage::open_limited(root.path(), false, 1).expect("storage");
    let files: Vec<_> = ["a", "b"]
        .iter()
        .map(|name| {
            let file = storage.create(name).expect("create");
            file.write_all_at(name.as_bytes(), 0).expect("write");
            file.sync_data().expect("sync");
            file
        })
        .collect();
    for round in 0..2 {
        for (name, file) in ["a", "b"].iter().zip(&files).rev() {
            let path = root.path().join(name);
            age(&path);
            let mut byte = [0; 1];
            file.read_exact_at(&mut byte, 0).expect("read");
            assert_eq!(&byte, name.as_bytes());
            assert_eq!(atime(&path), OLD, "{name}, round {round}");
        }
    }
}

//! `StorageFile::read_tail` (a file's length and its last bytes, what an owned metadata
//! store's ownership check compares with the file it remembers under a version's name)
//! answers what reading the file whole answers, on the in-memory disk and on real files: for
//! empty files, files shorter than the bytes asked for, files at and over the limit, a file
//! removed or replaced under its name after it was opened, and a disk whose power went off.
//! And the ownership check it serves tells a record's file from any other under its name: one
//! of the same length whose last bytes differ, one cut short, emptied, or grown past the
//! record limit.

use std::sync::Arc;

use ackstore::internals::format::meta::MAX_RECORD_BYTES;
use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::storage::StorageFile;
use ackstore::{FileStorage, MemStorage, Storage};

/// What `read_tail(n, max)` must answer, from `read_all(max)`: the length and the last `n`
/// bytes (all when fewer), `None` over `max`; an error where it fails.
fn from_whole(
    file: &dyn StorageFile,
    n: usize,
    max: u64,
) -> Result<Option<(u64, Vec<u8>)>, String> {
    file.read_all(max)
        .map(|whole| {
            whole.map(|bytes| {
                let at = bytes.len().saturating_sub(n);
                (bytes.len() as u64, bytes[at..].to_vec())
            })
        })
        .map_err(|e| e.to_string())
}

fn tail(file: &dyn StorageFile, n: usize, max: u64) -> Result<Option<(u64, Vec<u8>)>, String> {
    file.read_tail(n, max).map_err(|e| e.to_string())
}

/// Writes `bytes` as file `name` of `storage`, synced.
fn write(storage: &dyn Storage, name: &str, bytes: &[u8]) {
    let file = storage.create(name).expect("create");
    file.write_all_at(bytes, 0).expect("write");
    file.sync_data().expect("sync");
    storage.sync_dir().expect("sync dir");
}

/// Every length from empty to past the bytes asked for, with limits below, at and above it.
fn agrees_on_every_length(storage: &dyn Storage) {
    for len in 0..=9u8 {
        let bytes: Vec<u8> = (1..=len).collect();
        let name = format!("file-{len}");
        write(storage, &name, &bytes);
        let file = storage.open(&name).expect("open");
        for n in [0, 1, 3, 4, 5, 64] {
            for max in [u64::from(len).saturating_sub(1), u64::from(len), 100] {
                let (got, want) = (tail(&*file, n, max), from_whole(&*file, n, max));
                assert_eq!(got, want, "{len} bytes, the last {n}, at most {max}");
            }
        }
    }
}

#[test]
fn read_tail_answers_what_a_whole_read_answers_on_every_length() {
    agrees_on_every_length(&MemStorage::new());
    let dir = tempfile::tempdir().expect("temporary directory");
    agrees_on_every_length(&FileStorage::open(dir.path(), true).expect("storage"));
}

/// A file opened, then removed or replaced under its name (by a rename over it, or a new file
/// created under it): both reads answer alike.
fn agrees_after_the_name_moved(storage: &dyn Storage) {
    for change in 0..3 {
        write(storage, "held", b"the held version's bytes");
        let file = storage.open("held").expect("open");
        match change {
            0 => storage.remove("held").expect("remove"),
            1 => {
                write(storage, "other", b"another file of other bytes");
                storage.rename("other", "held").expect("rename");
            }
            _ => {
                storage.remove("held").expect("remove");
                write(storage, "held", b"xy");
            }
        }
        let (got, want) = (tail(&*file, 4, 100), from_whole(&*file, 4, 100));
        assert_eq!(got, want, "change {change}");
        let _ = storage.remove("held");
    }
}

#[test]
fn read_tail_answers_what_a_whole_read_answers_once_the_name_moved() {
    agrees_after_the_name_moved(&MemStorage::new());
    let dir = tempfile::tempdir().expect("temporary directory");
    agrees_after_the_name_moved(&FileStorage::open(dir.path(), true).expect("storage"));
}

#[test]
fn read_tail_fails_as_a_whole_read_fails_once_the_power_is_off() {
    let disk = MemStorage::new();
    write(&disk, "held", b"bytes");
    let file = disk.open("held").expect("open");
    disk.fail_after(Some(0));
    assert!(file.read_all(100).is_err());
    assert!(file.read_tail(4, 100).is_err());
}

/// The files of record `name` on `disk`.
fn version_file(name: &str, version: u64) -> String {
    format!("{name}.{version:020}.meta")
}

#[test]
fn the_ownership_check_tells_a_records_file_from_any_other_under_its_name() {
    let disk = MemStorage::new();
    let lock = disk.lock().expect("lock");
    let meta = FileMetaStore::owned(Arc::new(disk.clone()), &lock);
    let version = meta.put("rec", None, b"the record's bytes").expect("put");
    assert!(meta.is_current("rec", version).expect("check"));
    let file = version_file("rec", version);
    let held = disk.live_bytes(&file).expect("bytes");
    let mut last_differs = held.clone();
    *last_differs.last_mut().expect("a byte") ^= 1;
    let over = vec![7; MAX_RECORD_BYTES + 1];
    let cases: [(&str, Vec<u8>, bool); 5] = [
        ("its own bytes", held.clone(), true),
        ("a last byte changed", last_differs, false),
        ("cut to three bytes", held[..3].to_vec(), false),
        ("emptied", Vec::new(), false),
        ("grown past the record limit", over, false),
    ];
    for (what, bytes, current) in cases {
        disk.set_bytes(&file, bytes).expect("set");
        assert_eq!(
            meta.is_current("rec", version).expect("check"),
            current,
            "{what}"
        );
    }
    disk.remove(&file).expect("remove");
    assert!(!meta.is_current("rec", version).expect("check"), "removed");
}

/// On real files the check keeps the file it found under the version's name and, from its
/// second run on, asks whether the name still names that very file: another file put under
/// the name from outside is not the record's even when it holds the same bytes (a claim links
/// a version's bytes under the next name, so two versions' files may hold the same bytes), and
/// neither is a name removed, or a record whose next version was linked.
#[test]
fn the_ownership_check_on_real_files_tells_the_records_file_from_a_copy_of_it() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let disk = FileStorage::open(dir.path(), true).expect("storage");
    let lock = disk.lock().expect("lock");
    let meta = FileMetaStore::owned(Arc::new(disk.clone()), &lock);
    let version = meta.put("rec", None, b"the record's bytes").expect("put");
    let file = dir.path().join(version_file("rec", version));
    for _ in 0..3 {
        assert!(meta.is_current("rec", version).expect("check"));
    }
    // A copy of the version's file renamed over its name.
    let copy = dir.path().join("copy");
    std::fs::copy(&file, &copy).expect("copy");
    std::fs::rename(&copy, &file).expect("rename");
    assert!(!meta.is_current("rec", version).expect("check"), "a copy");
    assert!(
        !meta.is_current("rec", version).expect("check"),
        "a copy, again"
    );

    // Another record written twice, held at its second version: its next version linked
    // from outside, then removed; then its name removed.
    let first = meta.put("two", None, b"one").expect("put");
    let version = meta.put("two", Some(first), b"two").expect("put");
    let file = dir.path().join(version_file("two", version));
    let next = dir.path().join(version_file("two", version + 1));
    assert!(meta.is_current("two", version).expect("check"));
    assert!(meta.is_current("two", version).expect("check"));
    std::fs::hard_link(&file, &next).expect("link");
    assert!(
        !meta.is_current("two", version).expect("check"),
        "next linked"
    );
    std::fs::remove_file(&next).expect("remove");
    assert!(
        meta.is_current("two", version).expect("check"),
        "next removed"
    );
    std::fs::remove_file(&file).expect("remove");
    assert!(!meta.is_current("two", version).expect("check"), "removed");
}

/// A record deleted and created again starts at version 1 again, in a new file: the check
/// the owner made of its earlier life does not make it refuse the new one, even when both hold
/// the same bytes.
#[test]
fn the_ownership_check_on_real_files_takes_a_record_created_again_for_its_new_file() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let disk = FileStorage::open(dir.path(), true).expect("storage");
    let lock = disk.lock().expect("lock");
    let meta = FileMetaStore::owned(Arc::new(disk.clone()), &lock);
    let version = meta.put("rec", None, b"same bytes").expect("put");
    assert!(meta.is_current("rec", version).expect("check"));
    assert!(meta.is_current("rec", version).expect("check"));
    meta.delete("rec", version).expect("delete");
    assert_eq!(meta.get("rec").expect("read"), None);
    let again = meta.put("rec", None, b"same bytes").expect("put");
    assert_eq!(again, version, "created again at version 1");
    assert!(meta.is_current("rec", again).expect("check"));
    assert!(meta.is_current("rec", again).expect("check"));
}

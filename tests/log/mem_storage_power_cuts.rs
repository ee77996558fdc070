//! The in-memory disk: what a power cut loses, directory syncs, links, a full disk, and locks.

use ackstore::internals::error::Error;
use ackstore::internals::storage::*;

#[test]
fn unsynced_writes_and_names_are_lost_on_power_cut() {
    let disk = MemStorage::new();
    let f = disk.create("a").unwrap();
    f.write_all_at(b"abc", 0).unwrap();
    f.sync_data().unwrap();
    // The file's name was never made durable: it vanishes.
    assert!(disk.durable_image().list().unwrap().is_empty());
    disk.sync_dir().unwrap();
    f.write_all_at(b"def", 3).unwrap();
    let img = disk.durable_image();
    assert_eq!(img.live_bytes("a").unwrap(), b"abc");
    let torn = disk.crash_image(|_, d, l| l[..=d.len()].to_vec());
    assert_eq!(torn.live_bytes("a").unwrap(), b"abcd");
}

#[test]
fn removal_and_rename_are_durable_only_after_directory_sync() {
    let disk = MemStorage::new();
    disk.create("a").unwrap();
    disk.sync_dir().unwrap();
    disk.rename("a", "b").unwrap();
    assert_eq!(disk.durable_image().list().unwrap(), vec!["a".to_string()]);
    disk.sync_dir().unwrap();
    disk.remove("b").unwrap();
    assert_eq!(disk.durable_image().list().unwrap(), vec!["b".to_string()]);
}

#[test]
fn a_link_shares_the_file_is_durable_after_directory_sync_and_never_replaces() {
    let disk = MemStorage::new();
    let f = disk.create("a").unwrap();
    f.write_all_at(b"abc", 0).unwrap();
    f.sync_data().unwrap();
    disk.create("b").unwrap();
    disk.sync_dir().unwrap();
    disk.link("a", "c").unwrap();
    assert_eq!(disk.live_bytes("c").unwrap(), b"abc");
    assert!(disk.durable_image().live_bytes("c").is_none());
    assert!(disk.link("a", "b").is_err());
    assert!(disk.link("missing", "d").is_err());
    disk.sync_dir().unwrap();
    disk.remove("a").unwrap();
    disk.sync_dir().unwrap();
    assert_eq!(disk.durable_image().live_bytes("c").unwrap(), b"abc");
}

#[test]
fn every_operation_fails_once_the_power_is_cut() {
    let disk = MemStorage::new();
    let f = disk.create("a").unwrap();
    disk.fail_after(Some(1));
    f.write_all_at(b"x", 0).unwrap();
    assert!(f.sync_data().is_err());
    assert!(f.read_exact_at(&mut [0], 0).is_err());
    assert!(disk.list().is_err());
    disk.fail_after(None);
    assert_eq!(disk.live_bytes("a").unwrap(), b"x");
}

#[test]
fn a_full_disk_refuses_growing_writes_until_space_is_freed() {
    let disk = MemStorage::new();
    disk.set_capacity(Some(10));
    let a = disk.create("a").unwrap();
    a.write_all_at(b"12345678", 0).unwrap();
    let b = disk.create("b").unwrap();
    let err = b.write_all_at(b"abc", 0).unwrap_err();
    assert!(
        matches!(&err, Error::Io { source, .. } if source.raw_os_error() == Some(rustix::io::Errno::NOSPC.raw_os_error())),
        "{err}"
    );
    assert_eq!(disk.live_bytes("b").unwrap(), b"");
    // Overwriting in place needs no space; syncs and reads go on.
    a.write_all_at(b"x", 0).unwrap();
    a.sync_data().unwrap();
    disk.remove("a").unwrap();
    b.write_all_at(b"abc", 0).unwrap();
    assert_eq!(disk.used_bytes(), 3);
}

#[test]
fn enospc_after_n_writes_fails_only_growing_writes() {
    let disk = MemStorage::new();
    let f = disk.create("a").unwrap();
    disk.enospc_after(Some(1));
    f.write_all_at(b"ab", 0).unwrap();
    assert!(f.write_all_at(b"c", 2).is_err());
    f.write_all_at(b"x", 0).unwrap();
    f.sync_data().unwrap();
    disk.enospc_after(None);
    f.write_all_at(b"c", 2).unwrap();
    assert_eq!(disk.live_bytes("a").unwrap(), b"xbc");
}

#[test]
fn lock_is_exclusive_until_dropped() {
    let disk = MemStorage::new();
    let g = disk.lock().unwrap();
    assert!(matches!(disk.clone().lock(), Err(Error::Locked { .. })));
    drop(g);
    disk.lock().unwrap();
}

#[test]
fn a_broken_lock_lets_a_second_holder_in() {
    let disk = MemStorage::new();
    let first = disk.lock().unwrap();
    disk.break_lock();
    let second = disk.lock().unwrap();
    // The first holder's guard going away does not release the second's lock.
    drop(first);
    assert!(matches!(disk.lock(), Err(Error::Locked { .. })));
    drop(second);
    disk.lock().unwrap();
}

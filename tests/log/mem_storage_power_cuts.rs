//! The in-memory disk: what a power cut loses, directory syncs, links, a full disk, and locks.

use std::collections::BTreeMap;

use ackstore::internals::error::Error;
use ackstore::internals::storage::*;
use proptest::prelude::*;

use crate::support;

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

/// A name operation on the in-memory disk, over a few names so that they collide (a rename
/// onto an existing name replaces it, as on Linux; a rename to itself changes nothing), and
/// the power faults around them.
#[derive(Debug, Clone)]
enum NameOp {
    Create(u8),
    Remove(u8),
    Rename(u8, u8),
    Link(u8, u8),
    SyncDir,
    LoseUnsyncedNames,
    /// Replaces a file's bytes in both images: no name changes.
    SetBytes(u8),
    /// Lets this many more mutating operations succeed, then fails every one.
    PowerOffAfter(u8),
    PowerOn,
    /// Goes on with the disk a power cut leaves ([`MemStorage::durable_image`]), in which
    /// each durable name names a file of its own.
    Cut,
    /// Goes on through a clone, which shares the disk.
    Clone,
}

fn name_op() -> impl Strategy<Value = NameOp> {
    let name = 0..5u8;
    prop_oneof![
        3 => name.clone().prop_map(NameOp::Create),
        2 => name.clone().prop_map(NameOp::Remove),
        3 => (name.clone(), name.clone()).prop_map(|(a, b)| NameOp::Rename(a, b)),
        2 => (name.clone(), name.clone()).prop_map(|(a, b)| NameOp::Link(a, b)),
        2 => Just(NameOp::SyncDir),
        1 => Just(NameOp::LoseUnsyncedNames),
        1 => name.prop_map(NameOp::SetBytes),
        1 => (0..4u8).prop_map(NameOp::PowerOffAfter),
        1 => Just(NameOp::PowerOn),
        1 => Just(NameOp::Cut),
        1 => Just(NameOp::Clone),
    ]
}

proptest! {
    #![proptest_config(support::harness::proptest_config(300))]

    /// The live and durable name tables against a model that copies the whole live table at
    /// each directory sync (and the durable one back at each loss of unsynced names): the disk
    /// copies only the names changed since, which must come to the same, across operations
    /// refused with the power off and the fresh disk a power cut leaves. Each file holds
    /// bytes of its own (in both images), so a name shows which file it names.
    #[test]
    fn directory_syncs_make_durable_exactly_the_live_names(
        ops in prop::collection::vec(name_op(), 1..120),
    ) {
        let n = |i: u8| format!("n{i}");
        let mut disk = MemStorage::new();
        // Names to files, and each file's bytes.
        let mut live: BTreeMap<String, u32> = BTreeMap::new();
        let mut durable = live.clone();
        let mut files: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
        // Mutating operations the power lasts for, if it is to go off.
        let mut left: Option<u64> = None;
        let mut made = 0u32;
        for op in ops {
            let on = left != Some(0);
            let mut spend = |ok: bool| {
                if ok {
                    left = left.map(|l| l - 1);
                }
            };
            match op {
                NameOp::Create(a) => {
                    let ok = disk.create(&n(a)).is_ok();
                    let expected = on && !live.contains_key(&n(a));
                    prop_assert_eq!(ok, expected);
                    spend(ok);
                    if ok {
                        made += 1;
                        disk.set_bytes(&n(a), made.to_le_bytes().to_vec()).unwrap();
                        files.insert(made, made.to_le_bytes().to_vec());
                        live.insert(n(a), made);
                    }
                }
                NameOp::Remove(a) => {
                    let ok = disk.remove(&n(a)).is_ok();
                    prop_assert_eq!(ok, on && live.contains_key(&n(a)));
                    spend(ok);
                    if ok {
                        live.remove(&n(a));
                    }
                }
                NameOp::Rename(a, b) => {
                    let ok = disk.rename(&n(a), &n(b)).is_ok();
                    prop_assert_eq!(ok, on && live.contains_key(&n(a)));
                    spend(ok);
                    if ok {
                        let file = live.remove(&n(a)).unwrap();
                        live.insert(n(b), file);
                    }
                }
                NameOp::Link(a, b) => {
                    let ok = disk.link(&n(a), &n(b)).is_ok();
                    let expected = on && live.contains_key(&n(a)) && !live.contains_key(&n(b));
                    prop_assert_eq!(ok, expected);
                    spend(ok);
                    if ok {
                        live.insert(n(b), live[&n(a)]);
                    }
                }
                NameOp::SyncDir => {
                    let ok = disk.sync_dir().is_ok();
                    prop_assert_eq!(ok, on);
                    spend(ok);
                    if ok {
                        durable = live.clone();
                    }
                }
                NameOp::LoseUnsyncedNames => {
                    disk.lose_unsynced_names();
                    live = durable.clone();
                }
                NameOp::SetBytes(a) => {
                    made += 1;
                    let bytes = made.to_le_bytes().to_vec();
                    let ok = disk.set_bytes(&n(a), bytes.clone()).is_ok();
                    prop_assert_eq!(ok, live.contains_key(&n(a)));
                    if ok {
                        // Every name of the file, live or durable, shows the new bytes.
                        files.insert(live[&n(a)], bytes);
                    }
                }
                NameOp::PowerOffAfter(k) => {
                    disk.fail_after(Some(u64::from(k)));
                    left = Some(u64::from(k));
                }
                NameOp::PowerOn => {
                    disk.fail_after(None);
                    left = None;
                }
                NameOp::Cut => {
                    disk = disk.durable_image();
                    for file in durable.values_mut() {
                        made += 1;
                        files.insert(made, files[file].clone());
                        *file = made;
                    }
                    live = durable.clone();
                    left = None;
                }
                NameOp::Clone => {
                    disk = disk.clone();
                }
            }
            // Read without `list`, which fails with the power off.
            let shown = |d: &MemStorage| -> BTreeMap<String, Vec<u8>> {
                (0..5u8)
                    .filter_map(|i| d.live_bytes(&n(i)).map(|bytes| (n(i), bytes)))
                    .collect()
            };
            let bytes = |dir: &BTreeMap<String, u32>| -> BTreeMap<String, Vec<u8>> {
                dir.iter().map(|(name, file)| (name.clone(), files[file].clone())).collect()
            };
            prop_assert_eq!(shown(&disk), bytes(&live));
            prop_assert_eq!(shown(&disk.durable_image()), bytes(&durable));
        }
    }
}

//! The file metadata store: records, heads, compare-and-set, and damage.

use ackstore::internals::error::CorruptionKind;
use ackstore::internals::error::CorruptionPlace;
use ackstore::internals::error::{Error, Result};
use ackstore::internals::format::meta::MAX_RECORD_BYTES;
use ackstore::internals::format::meta::STORED_OVERHEAD;
use ackstore::internals::format::meta::encode_stored;
use ackstore::internals::meta::MetaStore;
use ackstore::internals::meta::file::*;
use ackstore::internals::storage::LockGuard;
use ackstore::internals::storage::Storage;
use ackstore::internals::storage::{FileStorage, MemStorage};
use std::sync::Arc;

fn mem_store() -> (MemStorage, FileMetaStore) {
    let disk = MemStorage::new();
    let store = FileMetaStore::new(Arc::new(disk.clone()));
    (disk, store)
}

/// Runs `check` against a store on the in-memory disk and on real files.
fn on_both_backends(check: impl Fn(Arc<dyn Storage>)) {
    check(Arc::new(MemStorage::new()));
    let dir = tempfile::tempdir().unwrap();
    check(Arc::new(FileStorage::open(dir.path(), false).unwrap()));
}

fn is_fenced<T>(r: &Result<T>) -> bool {
    matches!(r, Err(Error::Fenced { .. }))
}

#[test]
fn versions_start_at_one_and_increase_with_every_put() {
    on_both_backends(|storage| {
        let store = FileMetaStore::new(storage);
        assert_eq!(store.get("topic").unwrap(), None);
        assert_eq!(store.put("topic", None, b"one").unwrap(), 1);
        assert_eq!(store.put("topic", Some(1), b"two").unwrap(), 2);
        assert_eq!(store.put("topic", Some(2), b"").unwrap(), 3);
        assert_eq!(store.get("topic").unwrap(), Some((3, Vec::new())));
    });
}

#[test]
fn a_stale_version_is_refused_and_changes_nothing() {
    on_both_backends(|storage| {
        let store = FileMetaStore::new(storage.clone());
        store.put("topic", None, b"one").unwrap();
        store.put("topic", Some(1), b"two").unwrap();
        let files = storage.list().unwrap();
        assert!(is_fenced(&store.put("topic", Some(1), b"stale")));
        assert!(is_fenced(&store.put("topic", Some(3), b"future")));
        assert!(is_fenced(&store.put("topic", None, b"again")));
        assert!(is_fenced(&store.delete("topic", 1)));
        assert!(is_fenced(&store.put("cursor-1", Some(1), b"missing")));
        assert!(is_fenced(&store.delete("cursor-1", 1)));
        assert_eq!(store.get("topic").unwrap(), Some((2, b"two".to_vec())));
        assert_eq!(storage.list().unwrap(), files);
    });
}

#[test]
fn a_second_store_holding_a_stale_version_is_fenced() {
    on_both_backends(|storage| {
        let old_owner = FileMetaStore::new(storage.clone());
        let new_owner = FileMetaStore::new(storage);
        let v1 = old_owner.put("cursor-3", None, b"A").unwrap();
        let (seen, _) = new_owner.get("cursor-3").unwrap().unwrap();
        let v2 = new_owner.put("cursor-3", Some(seen), b"B").unwrap();
        let err = old_owner.put("cursor-3", Some(v1), b"A again").unwrap_err();
        assert!(err.to_string().contains("cursor-3.meta"), "{err}");
        assert!(is_fenced(&Err::<(), _>(err)));
        assert!(is_fenced(&old_owner.delete("cursor-3", v1)));
        assert_eq!(
            old_owner.get("cursor-3").unwrap(),
            Some((v2, b"B".to_vec()))
        );
    });
}

#[test]
fn delete_removes_the_record_and_list_names_only_records() {
    on_both_backends(|storage| {
        let store = FileMetaStore::new(storage.clone());
        store.put("topic", None, b"t").unwrap();
        store.put("cursor-2", None, b"c").unwrap();
        store.put("cursor-10", None, b"c").unwrap();
        // Other files share the directory: ledgers, and names that are not records.
        storage.create("ledger-00000000000000000001.log").unwrap();
        storage.create("Upper.meta").unwrap();
        storage.create("cursor-2.meta.tmp").unwrap();
        assert_eq!(store.list().unwrap(), ["cursor-10", "cursor-2", "topic"]);
        store.delete("cursor-2", 1).unwrap();
        assert_eq!(store.get("cursor-2").unwrap(), None);
        assert_eq!(store.list().unwrap(), ["cursor-10", "topic"]);
        assert_eq!(store.put("cursor-2", None, b"new").unwrap(), 1);
    });
}

#[test]
fn names_ackstore_does_not_generate_are_refused() {
    let (_, store) = mem_store();
    for bad in ["../topic", "a/b", "My Cursor", "", "topic.meta"] {
        assert!(matches!(store.get(bad), Err(Error::InvalidArgument { .. })));
        assert!(matches!(
            store.put(bad, None, b""),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            store.delete(bad, 1),
            Err(Error::InvalidArgument { .. })
        ));
    }
}

fn temp_files(storage: &Arc<dyn Storage>) -> Vec<String> {
    let mut files = storage.list().unwrap();
    files.retain(|f| f.ends_with(TEMP_SUFFIX));
    files
}

#[test]
fn leftover_temp_files_are_ignored_then_swept_before_the_first_write() {
    on_both_backends(|storage| {
        FileMetaStore::new(storage.clone())
            .put("topic", None, b"old")
            .unwrap();
        // A crashed writer's torn temporary file, one of a record never written again, and
        // one under the name older versions used.
        for temp in [
            "topic.00000000000000a1.meta.tmp",
            "cursor-9.00000000000000b2.meta.tmp",
            "topic.meta.tmp",
        ] {
            let torn = storage.create(temp).unwrap();
            torn.write_all_at(&encode_stored(2, b"new")[..10], 0)
                .unwrap();
            torn.sync_data().unwrap();
        }
        storage.create("ledger-00000000000000000001.log").unwrap();
        storage.sync_dir().unwrap();
        let store = FileMetaStore::new(storage.clone());
        assert_eq!(store.get("topic").unwrap(), Some((1, b"old".to_vec())));
        assert_eq!(store.list().unwrap(), ["topic"]);
        assert_eq!(temp_files(&storage).len(), 3, "reads change nothing");
        assert_eq!(store.put("cursor-1", None, b"c").unwrap(), 1);
        assert!(temp_files(&storage).is_empty());
        assert!(storage.exists("ledger-00000000000000000001.log").unwrap());
        assert_eq!(store.get("topic").unwrap(), Some((1, b"old".to_vec())));
    });
}

#[test]
fn every_write_uses_its_own_valid_temp_name() {
    let (_, a) = mem_store();
    let (_, b) = mem_store();
    let mut names = std::collections::BTreeSet::new();
    for store in [&a, &b] {
        let mut writes = store.writes.lock().unwrap();
        for _ in 0..50 {
            let temp = store.temp_file(&mut writes, &"c".repeat(64), u64::MAX);
            ackstore::internals::storage::validate_name(&temp).unwrap();
            assert!(temp.ends_with(TEMP_SUFFIX) && !temp.ends_with(RECORD_SUFFIX));
            assert!(names.insert(temp));
        }
    }
}

#[test]
fn a_stale_writer_whose_write_failed_midway_is_fenced_and_disturbs_nothing() {
    let disk = MemStorage::new();
    let old_owner = FileMetaStore::new(Arc::new(disk.clone()));
    let v1 = old_owner.put("cursor-4", None, b"A").unwrap();
    // The old owner's next write stops after creating its temporary file.
    disk.fail_after(Some(1));
    assert!(old_owner.put("cursor-4", Some(v1), b"A2").is_err());
    disk.fail_after(None);
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    assert_eq!(temp_files(&storage).len(), 1);
    let new_owner = FileMetaStore::new(Arc::new(disk.clone()));
    let v2 = new_owner.put("cursor-4", Some(v1), b"B").unwrap();
    assert!(is_fenced(&old_owner.put("cursor-4", Some(v1), b"A3")));
    assert!(is_fenced(&old_owner.delete("cursor-4", v1)));
    assert_eq!(
        new_owner.get("cursor-4").unwrap(),
        Some((v2, b"B".to_vec()))
    );
    assert_eq!(new_owner.put("cursor-4", Some(v2), b"C").unwrap(), v2 + 1);
    // The stale temporary file was for version 2, which the record has passed: the next
    // store's first write removes it.
    FileMetaStore::new(Arc::new(disk.clone()))
        .put("topic", None, b"t")
        .unwrap();
    assert!(temp_files(&storage).is_empty(), "swept by a later store");
}

#[test]
fn a_corrupted_record_file_is_reported_by_name() {
    on_both_backends(|storage| {
        let store = FileMetaStore::new(storage.clone());
        store.put("cursor-5", None, b"state").unwrap();
        let file = storage.open(&version_file("cursor-5", 1)).unwrap();
        file.write_all_at(b"X", 20).unwrap();
        let err = store.get("cursor-5").unwrap_err();
        assert!(
            matches!(&err, Error::Corrupted { place: CorruptionPlace::Record(record), kind: CorruptionKind::ChecksumMismatch }
                if record == "cursor-5"),
            "{err:?}"
        );
        // A record that cannot be verified cannot be compared, so it is not overwritten.
        assert!(matches!(
            store.put("cursor-5", Some(1), b"x"),
            Err(Error::Corrupted {
                place: CorruptionPlace::Record(_),
                ..
            })
        ));
        file.set_len(3).unwrap();
        assert!(matches!(
            store.get("cursor-5"),
            Err(Error::Corrupted {
                place: CorruptionPlace::Record(_),
                kind: CorruptionKind::Truncated,
            })
        ));
    });
}

#[test]
fn a_record_of_an_earlier_release_is_read_and_replaced_by_the_first_write() {
    on_both_backends(|storage| {
        let legacy = storage.create("topic.meta").unwrap();
        legacy.write_all_at(&encode_stored(3, b"old"), 0).unwrap();
        legacy.sync_data().unwrap();
        let store = FileMetaStore::new(storage.clone());
        assert_eq!(store.get("topic").unwrap(), Some((3, b"old".to_vec())));
        assert_eq!(store.list().unwrap(), ["topic"]);
        assert!(is_fenced(&store.put("topic", Some(2), b"stale")));
        assert_eq!(store.put("topic", Some(3), b"new").unwrap(), 4);
        assert_eq!(store.get("topic").unwrap(), Some((4, b"new".to_vec())));
        assert!(!storage.exists("topic.meta").unwrap(), "migrated");
    });
}

#[test]
fn a_stale_writer_is_fenced_after_older_versions_were_removed() {
    on_both_backends(|storage| {
        let stale = FileMetaStore::new(storage.clone());
        let owner = FileMetaStore::new(storage.clone());
        stale.put("topic", None, b"1").unwrap();
        owner.put("topic", Some(1), b"2").unwrap();
        owner.put("topic", Some(2), b"3").unwrap();
        // Version 2's file is gone; a writer still holding version 1 links version 2
        // anew, finds version 3 and is fenced.
        assert!(!storage.exists(&version_file("topic", 2)).unwrap());
        let mut writes = stale.writes.lock().unwrap();
        let err = stale
            .link_version(
                &mut writes,
                "topic",
                (Some(1), None),
                2,
                &encode_stored(2, b"x"),
            )
            .unwrap_err();
        drop(writes);
        assert!(is_fenced(&Err::<(), _>(err)));
        assert_eq!(owner.get("topic").unwrap(), Some((3, b"3".to_vec())));
    });
}

#[test]
fn a_claim_fences_the_holder_of_the_version_it_claims_and_keeps_the_bytes() {
    on_both_backends(|storage| {
        let owner = FileMetaStore::new(storage.clone());
        let former = FileMetaStore::new(storage.clone());
        assert_eq!(former.put("topic", None, b"A").unwrap(), 1);
        assert_eq!(owner.claim("topic", 1).unwrap(), 2);
        assert_eq!(owner.get("topic").unwrap(), Some((2, b"A".to_vec())));
        assert!(owner.is_current("topic", 2).unwrap());
        assert!(!former.is_current("topic", 1).unwrap());
        assert!(is_fenced(&former.put("topic", Some(1), b"late")));
        assert!(
            is_fenced(&former.claim("topic", 1)),
            "a second claim of version 1"
        );
        assert_eq!(owner.put("topic", Some(2), b"B").unwrap(), 3);
        assert_eq!(owner.get("topic").unwrap(), Some((3, b"B".to_vec())));
        // Version 1's file is gone now: its holder is refused all the same.
        assert!(is_fenced(&former.claim("topic", 1)));
        assert!(
            is_fenced(&owner.claim("topic", 7)),
            "a version never reached"
        );
    });
}

#[test]
fn a_power_cut_after_any_claim_leaves_the_record_whole_at_one_of_its_versions() {
    let total = {
        let (disk, store) = mem_store();
        store.put("topic", None, b"A").unwrap();
        let before = disk.mutations();
        store.claim("topic", 1).unwrap();
        store.claim("topic", 2).unwrap();
        disk.mutations() - before
    };
    for n in 0..=total {
        let (disk, store) = mem_store();
        store.put("topic", None, b"A").unwrap();
        disk.fail_after(Some(n));
        let claimed = store
            .claim("topic", 1)
            .and_then(|v| store.claim("topic", v));
        disk.fail_after(None);
        for image in [
            disk.durable_image(),
            disk.crash_image(|_, _, live| live.to_vec()),
        ] {
            let reopened = FileMetaStore::new(Arc::new(image));
            let (version, bytes) = reopened.get("topic").unwrap().expect("the record");
            assert_eq!(bytes, b"A", "cut after {n} operations ({claimed:?})");
            assert!(
                (1..=3).contains(&version),
                "cut after {n}: version {version}"
            );
            // Whoever reads it next writes on from the version it finds.
            assert_eq!(
                reopened.put("topic", Some(version), b"B").unwrap(),
                version + 1
            );
        }
    }
}

#[test]
fn repeated_claims_keep_a_bounded_number_of_names() {
    on_both_backends(|storage| {
        let store = FileMetaStore::new(storage.clone());
        let mut version = store.put("topic", None, b"A").unwrap();
        for _ in 0..20 {
            version = store.claim("topic", version).unwrap();
            let names = storage
                .list()
                .unwrap()
                .into_iter()
                .filter(|n| record_of_file(n) == Some("topic"))
                .count();
            assert!(names <= CLAIM_NAMES + 1, "{names} names after a claim");
        }
        assert_eq!(store.get("topic").unwrap(), Some((21, b"A".to_vec())));
    });
}

#[test]
fn claims_each_ended_by_a_power_cut_never_pile_up_durable_names() {
    let (disk, store) = mem_store();
    store.put("topic", None, b"A").unwrap();
    let mut disk = disk;
    for round in 0..40 {
        let store = FileMetaStore::new(Arc::new(disk.clone()));
        let (version, _) = store.get("topic").unwrap().expect("the record");
        store.claim("topic", version).unwrap();
        // Now and then something else syncs the directory (a journal tick, say).
        if round % 7 == 0 {
            disk.sync_dir().unwrap();
        }
        disk = disk.durable_image();
        let names = disk
            .list()
            .unwrap()
            .into_iter()
            .filter(|n| record_of_file(n) == Some("topic"))
            .count();
        assert!(
            names <= CLAIM_NAMES + 2,
            "round {round}: {names} durable names"
        );
        let reopened = FileMetaStore::new(Arc::new(disk.clone()));
        assert_eq!(
            reopened.get("topic").unwrap().map(|(_, b)| b),
            Some(b"A".to_vec())
        );
    }
}

#[test]
fn a_file_named_below_the_version_inside_it_is_damage() {
    let (disk, store) = mem_store();
    store.put("topic", None, b"A").unwrap();
    store.put("topic", Some(1), b"B").unwrap();
    let inside_two = disk.live_bytes(&version_file("topic", 2)).unwrap();
    let file = disk.create(&version_file("topic", 1)).unwrap();
    file.write_all_at(&inside_two, 0).unwrap();
    // Version 2 is still the highest and reads; a lower name holding version 2's
    // envelope would be damage if it were the one read.
    assert_eq!(store.get("topic").unwrap(), Some((2, b"B".to_vec())));
    disk.remove(&version_file("topic", 2)).unwrap();
    assert!(matches!(
        store.get("topic"),
        Err(Error::Corrupted {
            kind: CorruptionKind::InvalidField(_),
            ..
        })
    ));
}

#[test]
fn a_record_above_the_maximum_is_refused_and_one_at_it_is_kept() {
    let (disk, store) = mem_store();
    let before = disk.mutations();
    let err = store
        .put(
            "topic",
            None,
            &vec![0; MAX_RECORD_BYTES - STORED_OVERHEAD + 1],
        )
        .unwrap_err();
    assert!(matches!(err, Error::EntryTooLarge { .. }), "{err:?}");
    assert_eq!(disk.mutations(), before);
    assert_eq!(store.get("topic").unwrap(), None);
    let largest = vec![7; MAX_RECORD_BYTES - STORED_OVERHEAD];
    assert_eq!(store.put("topic", None, &largest).unwrap(), 1);
    assert_eq!(store.get("topic").unwrap(), Some((1, largest)));
}

/// One step of the crash workload, with the record state it leads to.
#[derive(Clone, Copy, Debug)]
enum Step {
    Put(&'static str, &'static [u8]),
    Delete(&'static str),
}

const WORKLOAD: &[Step] = &[
    Step::Put("topic", b"v1"),
    Step::Put("cursor-1", b"c1"),
    Step::Put("topic", b"v2 longer than the first"),
    Step::Put("cursor-1", b"c2"),
    Step::Delete("cursor-1"),
    Step::Put("topic", b""),
    Step::Put("cursor-1", b"c3"),
];

type Model = std::collections::BTreeMap<&'static str, (u64, &'static [u8])>;

/// The records after `step` succeeds on `model`.
fn predict(model: &Model, step: Step) -> Model {
    let mut next = model.clone();
    match step {
        Step::Put(name, bytes) => {
            let version = model.get(name).map_or(1, |(v, _)| v + 1);
            next.insert(name, (version, bytes));
        }
        Step::Delete(name) => {
            next.remove(name);
        }
    }
    next
}

fn apply(store: &FileMetaStore, model: &Model, step: Step) -> Result<()> {
    match step {
        Step::Put(name, bytes) => {
            let expected = model.get(name).map(|(v, _)| *v);
            store.put(name, expected, bytes).map(drop)
        }
        Step::Delete(name) => store.delete(name, model[name].0),
    }
}

const NAMES: [&str; 2] = ["topic", "cursor-1"];

/// What `store` holds for every record name of the workload.
fn observed(store: &FileMetaStore) -> Vec<Option<(u64, Vec<u8>)>> {
    NAMES.iter().map(|name| store.get(name).unwrap()).collect()
}

fn expected_from(model: &Model) -> Vec<Option<(u64, Vec<u8>)>> {
    NAMES
        .iter()
        .map(|name| model.get(name).map(|(v, b)| (*v, b.to_vec())))
        .collect()
}

/// Keeps the durable bytes and half of whatever was written but not synced.
fn torn(_: &str, durable: &[u8], live: &[u8]) -> Vec<u8> {
    let keep = durable.len() + live.len().saturating_sub(durable.len()) / 2;
    live.get(..keep).unwrap_or(durable).to_vec()
}

/// A store over `disk`, owned (holding `lock`) or not.
fn store_on(disk: &MemStorage, lock: Option<&LockGuard>) -> FileMetaStore {
    match lock {
        Some(lock) => FileMetaStore::owned(Arc::new(disk.clone()), lock),
        None => FileMetaStore::new(Arc::new(disk.clone())),
    }
}

#[test]
fn a_power_cut_at_any_operation_leaves_the_old_or_the_new_record_whole() {
    power_cuts_leave_the_old_or_the_new_record_whole(false);
}

#[test]
fn a_power_cut_at_any_operation_of_an_owned_store_leaves_the_old_or_the_new_record_whole() {
    power_cuts_leave_the_old_or_the_new_record_whole(true);
}

/// The names of record `name` in `disk`'s live directory.
fn names_of(disk: &MemStorage, name: &str) -> Vec<String> {
    let mut names: Vec<String> = disk
        .list()
        .unwrap()
        .into_iter()
        .filter(|f| record_of_file(f) == Some(name))
        .collect();
    names.sort();
    names
}

/// A store topic's open claims its record, and its first write replaces it: that write
/// removes the version the claim linked from as well as the one it replaced, so the record
/// keeps one version; a power cut after any storage operation of the claim and the write
/// leaves the claimed record or the new one, whole.
#[test]
fn an_owned_stores_first_put_after_its_claim_leaves_one_version_and_any_power_cut_a_whole_record() {
    let setup = || {
        let disk = MemStorage::new();
        let store = FileMetaStore::new(Arc::new(disk.clone()));
        let v = store.put("topic", None, b"A").unwrap();
        store.put("topic", Some(v), b"B").unwrap();
        disk.sync_dir().unwrap();
        disk.durable_image()
    };
    let claim_and_put = |disk: &MemStorage| -> Result<u64> {
        let lock = disk.lock()?;
        let store = FileMetaStore::owned(Arc::new(disk.clone()), &lock);
        let (version, bytes) = store.get("topic")?.expect("the record");
        assert_eq!(bytes, b"B");
        let claimed = store.claim("topic", version)?;
        store.put("topic", Some(claimed), b"C")
    };
    let total = {
        let disk = setup();
        let before = disk.mutations();
        let written = claim_and_put(&disk).unwrap();
        assert_eq!(
            names_of(&disk, "topic"),
            vec![version_file("topic", written)]
        );
        disk.mutations() - before
    };
    assert!(total > 3, "{total} operations");
    for n in 0..=total {
        let disk = setup();
        disk.fail_after(Some(n));
        let done = claim_and_put(&disk).is_ok();
        disk.fail_after(None);
        for image in [
            disk.durable_image(),
            disk.crash_image(torn),
            disk.crash_image(|_, _, live| live.to_vec()),
        ] {
            let got = FileMetaStore::new(Arc::new(image.clone()))
                .get("topic")
                .unwrap()
                .expect("a record");
            assert!(
                got.1 == b"B" || got.1 == b"C",
                "cut after {n} operations: {got:?}"
            );
            assert!(!done || got == (4, b"C".to_vec()), "cut after {n}: {got:?}");
        }
    }
}

/// A former owner that read version 1 of a record writes late, after the new owner (whose
/// store had already written, so its sweep ran) claimed the record and wrote it twice: the
/// second write freed the names the late write checks and links (versions 2 and 3), so only
/// the lookup of version 1, which the new owner's first write after its claim removed,
/// tells the former owner it lost. Its write is refused and the record stays the new
/// owner's.
#[test]
fn a_former_owners_late_write_after_the_new_owners_claim_and_two_writes_is_fenced() {
    former_owners_late_write_after_claims_and_two_writes(false);
}

/// [`a_former_owners_late_write_after_the_new_owners_claim_and_two_writes_is_fenced`] when
/// the new owner claimed the record twice before its first write of it: the version the
/// first claim linked from must go as well.
#[test]
fn a_former_owners_late_write_after_two_claims_and_two_writes_is_fenced() {
    former_owners_late_write_after_claims_and_two_writes(true);
}

fn former_owners_late_write_after_claims_and_two_writes(twice: bool) {
    let disk = MemStorage::new();
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    FileMetaStore::new(storage.clone())
        .put("topic", None, b"A")
        .unwrap();
    let former_lock = disk.lock().unwrap();
    let former = FileMetaStore::owned(storage.clone(), &former_lock);
    assert_eq!(former.get("topic").unwrap(), Some((1, b"A".to_vec())));
    disk.break_lock();
    let lock = disk.lock().unwrap();
    let owner = FileMetaStore::owned(storage.clone(), &lock);
    owner.put("other", None, b"first write: the sweep").unwrap();
    // One claim, or two with no write between.
    let claims = if twice { 2 } else { 1 };
    for version in 1..=claims {
        assert_eq!(owner.claim("topic", version).unwrap(), version + 1);
    }
    let v = claims + 1;
    assert_eq!(owner.put("topic", Some(v), b"B").unwrap(), v + 1);
    assert_eq!(owner.put("topic", Some(v + 1), b"C").unwrap(), v + 2);
    let late = former.put("topic", Some(1), b"late");
    assert!(is_fenced(&late), "claims {claims}: {late:?}");
    for store in [&owner, &FileMetaStore::new(storage.clone())] {
        assert_eq!(store.get("topic").unwrap(), Some((v + 2, b"C".to_vec())));
    }
    assert_eq!(owner.put("topic", Some(v + 2), b"D").unwrap(), v + 3);
}

fn power_cuts_leave_the_old_or_the_new_record_whole(owned: bool) {
    let mem_store = || {
        let disk = MemStorage::new();
        let lock = owned.then(|| disk.lock().unwrap());
        let store = store_on(&disk, lock.as_ref());
        (disk, store, lock)
    };
    let total = {
        let (disk, store, _lock) = mem_store();
        let mut model = Model::new();
        for step in WORKLOAD {
            apply(&store, &model, *step).unwrap();
            model = predict(&model, *step);
        }
        assert_eq!(observed(&store), expected_from(&model));
        disk.mutations()
    };
    for n in 0..=total {
        let (disk, store, lock) = mem_store();
        disk.fail_after(Some(n));
        let mut model = Model::new();
        // The states a power cut may leave: before and after the step in flight.
        let (mut before, mut after) = (model.clone(), model.clone());
        for step in WORKLOAD {
            let next = predict(&model, *step);
            (before, after) = (model.clone(), next.clone());
            if apply(&store, &model, *step).is_err() {
                break;
            }
            model = next;
            before.clone_from(&model);
        }
        let (before, after) = (expected_from(&before), expected_from(&after));
        disk.fail_after(None);
        drop(lock);
        for image in [
            disk.durable_image(),
            disk.crash_image(torn),
            disk.crash_image(|_, _, live| live.to_vec()),
        ] {
            let lock = owned.then(|| image.lock().unwrap());
            let store = store_on(&image, lock.as_ref());
            let seen = observed(&store);
            assert!(
                seen == before || seen == after,
                "cut after {n} operations: {seen:?} is neither {before:?} nor {after:?}"
            );
            // The recovered store takes further writes at the version it holds.
            let version = seen[0].as_ref().map(|(v, _)| *v);
            let next = store.put("topic", version, b"after the crash").unwrap();
            assert_eq!(
                store.get("topic").unwrap(),
                Some((next, b"after the crash".to_vec()))
            );
            assert!(
                image
                    .list()
                    .unwrap()
                    .iter()
                    .all(|f| !f.ends_with(TEMP_SUFFIX)),
                "cut after {n}: a temporary file survived a later put"
            );
        }
    }
}

/// A former owner's check whose two lookups another owner's claim and write overtake: the
/// write removes the checked version and the claimed one (lowest first), so each lookup alone
/// sees a record that never moved (the first the checked version, the second no next name).
/// The check must still answer that the record is no longer at the checked version.
#[test]
fn an_owner_check_a_claim_and_a_write_overtake_between_its_lookups_is_not_current() {
    use crate::support::hooked::Hooked;
    use std::sync::Barrier;

    let storage = Hooked::new(MemStorage::new());
    let former = FileMetaStore::new(Arc::new(storage.clone()));
    let owner = FileMetaStore::new(Arc::new(storage.clone()));
    assert_eq!(former.put("topic", None, b"A").unwrap(), 1);
    let barriers = Arc::new((Barrier::new(2), Barrier::new(2)));
    *storage.hooks.hold_after_lookup.lock().unwrap() = Some(("topic.".into(), barriers.clone()));
    let check = std::thread::spawn(move || former.is_current("topic", 1));
    // The check's first lookup has answered.
    barriers.0.wait();
    assert_eq!(owner.claim("topic", 1).unwrap(), 2);
    assert_eq!(owner.put("topic", Some(2), b"B").unwrap(), 3);
    barriers.1.wait();
    assert!(
        !check.join().unwrap().unwrap(),
        "the holder of version 1 was told it is current after version 3 was written"
    );
    assert_eq!(owner.get("topic").unwrap(), Some((3, b"B".to_vec())));
}

/// The read by two names of an owned store (the record's known version, then whether the next
/// exists), overtaken between them by another owner's claim and write as above: it must not
/// answer the bytes of the version that was replaced.
#[test]
fn an_owned_read_a_claim_and_a_write_overtake_between_its_lookups_answers_the_newest() {
    use crate::support::hooked::Hooked;
    use std::sync::Barrier;

    let storage = Hooked::new(MemStorage::new());
    let lock = storage.lock().unwrap();
    let former = FileMetaStore::owned(Arc::new(storage.clone()), &lock);
    let owner = FileMetaStore::new(Arc::new(storage.clone()));
    assert_eq!(former.put("topic", None, b"A").unwrap(), 1);
    assert_eq!(former.get("topic").unwrap(), Some((1, b"A".to_vec())));
    let barriers = Arc::new((Barrier::new(2), Barrier::new(2)));
    *storage.hooks.hold_after_lookup.lock().unwrap() = Some(("topic.".into(), barriers.clone()));
    let read = std::thread::spawn(move || former.get("topic"));
    // The read's first lookup has answered.
    barriers.0.wait();
    assert_eq!(owner.claim("topic", 1).unwrap(), 2);
    assert_eq!(owner.put("topic", Some(2), b"B").unwrap(), 3);
    barriers.1.wait();
    assert_eq!(
        read.join().unwrap().unwrap(),
        Some((3, b"B".to_vec())),
        "an owned store read version 1 after version 3 was written"
    );
    drop(lock);
}

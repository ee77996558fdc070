//! The store catalog's full chunks of topics in chunk records, the last partial one inline: a
//! creation writes the catalog's pins and that tail, not every name, so its bytes stay flat as
//! topics accumulate; a power cut at every step of a creation (one inside the tail, one that
//! fills it and writes its chunk record) and of the upgrade of a version 4 catalog keeps every
//! created topic and invents none; a failed sync at every step of a creation that fills the
//! tail leaves a store later creations extend; a former owner's creation during a claim is
//! refused or kept, never a collision; damage to a chunk record, or another store's chunk record
//! of the same name in its place, is refused by the open and reported by `verify`.

use crate::support;

use std::sync::Arc;

use ackstore::internals::format::store::{CATALOG_VERSION_V4, CHUNK_RECORD_PREFIX, CHUNK_TOPICS};
use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::internals::store::read_catalog;
use ackstore::{CorruptionKind, CorruptionPlace, Error, MemStorage, Storage, Store};
use support::config::store_without_flusher;
pub(crate) use support::crash::copy_into;
use support::crash::{Cut, Points, cut_everywhere_after, sound_images, sound_without_leftovers};
use support::hooked::{Hooked, for_each_sync_fault};
use support::takeover;
pub(crate) use support::tap::Written;
use support::tap::{Tap, assert_flat_from_1k_to_4k};

/// The name of the `i`-th topic created.
pub(crate) fn name(i: usize) -> String {
    format!("persistent://tenant/namespace/topic-{i}")
}

/// Creates topics `from..to` of `store`.
pub(crate) fn create(store: &Store, from: usize, to: usize) {
    for i in from..to {
        store.topic(&name(i)).expect("create");
    }
}

/// A closed store of `topics` topics on a fresh disk.
pub(crate) fn store_of(topics: usize) -> MemStorage {
    let disk = MemStorage::new();
    let store =
        Store::open_with_storage(Arc::new(disk.clone()), store_without_flusher()).expect("open");
    create(&store, 0, topics);
    store.close().expect("close");
    disk
}

/// Rewrites the catalog of the closed store on `disk` as an earlier build wrote it (version 4,
/// every topic inline) and removes its chunk records.
pub(crate) fn as_version_4(disk: &MemStorage) {
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let catalog = read_catalog(storage.clone())
        .expect("read")
        .expect("a store");
    let meta = FileMetaStore::new(storage.clone());
    let (version, _) = meta.get("store").expect("get").expect("catalog");
    meta.put(
        "store",
        Some(version),
        &catalog.encode_version(CATALOG_VERSION_V4),
    )
    .expect("write version 4");
    for file in storage.list_prefix(CHUNK_RECORD_PREFIX).expect("list") {
        storage.remove(&file).expect("remove");
    }
    storage.sync_dir().expect("sync dir");
}

/// Reopens the store on `storage` and checks that its topics are `names` in creation order,
/// with ids ascending and unique, and that `verify` finds it sound.
pub(crate) fn reopened_holds(storage: &Arc<dyn Storage>, names: &[String]) {
    let store = Store::open_with_storage(storage.clone(), store_without_flusher()).expect("open");
    assert_eq!(store.topic_names(), names);
    store.close().expect("close");
    drop(store);
    let catalog = read_catalog(storage.clone())
        .expect("read")
        .expect("a store");
    let read: Vec<&String> = catalog.topics.iter().map(|t| &t.name).collect();
    assert_eq!(read, names.iter().collect::<Vec<_>>());
    assert!(catalog.topics.windows(2).all(|w| w[0].id < w[1].id));
    sound_without_leftovers(storage, CHUNK_RECORD_PREFIX);
}

/// Creation `i` costs about the same bytes at 4,000 topics as at 1,000: a pin per full chunk
/// and the tail, and one chunk record per chunk's worth of creations, not every name (a
/// catalog of every name grows four times).
#[test]
fn bytes_written_per_creation_stay_flat_from_1k_to_4k_topics() {
    let disk = MemStorage::new();
    let written = Arc::new(Written::default());
    let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk.clone()), written.clone()));
    let store = Store::open_with_storage(storage.clone(), store_without_flusher()).expect("open");
    assert_flat_from_1k_to_4k(&written, CHUNK_TOPICS, "topics", |from, to| {
        create(&store, from, to);
    });
    store.close().expect("close");
    drop(store);
    let names: Vec<String> = (0..8 * CHUNK_TOPICS).map(name).collect();
    reopened_holds(&storage, &names);
}

/// After a power cut at `cut` of a workload that opened the store holding `before` and created
/// topic `new` (`created`: what the creation returned), the store holds `before` and, if the
/// creation returned `Ok`, `new`; nothing else, and `verify` finds no damage.
fn holds_after_cut(
    disk: &MemStorage,
    cut: Cut,
    before: &[String],
    new: &str,
    created: &ackstore::Result<()>,
) {
    for image in sound_images(disk, cut) {
        let store = Store::open_with_storage(image.clone(), store_without_flusher())
            .unwrap_or_else(|e| panic!("{cut:?}: open: {e}"));
        let names = store.topic_names();
        assert!(names.len() >= before.len(), "{cut:?}: {names:?}");
        assert_eq!(names[..before.len()], *before, "{cut:?}");
        match &names[before.len()..] {
            [] => assert!(created.is_err(), "{cut:?}: a created topic was lost"),
            [n] => assert_eq!(n, new, "{cut:?}"),
            more => panic!("{cut:?}: invented {more:?}"),
        }
        store
            .close()
            .unwrap_or_else(|e| panic!("{cut:?}: close: {e}"));
        drop(store);
        reopened_holds(&image, &names);
    }
}

/// Opens the store copied from `template` (power on), then creates one topic with the power
/// cut at every step of the open and the creation.
pub(crate) fn cut_at_every_step_of_a_creation(template: &MemStorage, before: usize) {
    let names: Vec<String> = (0..before).map(name).collect();
    let new = name(before);
    let clean = cut_everywhere_after(
        Points::every_in_release(5),
        |disk| copy_into(template, disk),
        |disk, ()| {
            let store = Store::open_with_storage(Arc::new(disk.clone()), store_without_flusher())?;
            store.topic(&new).map(drop)
        },
        |disk, cut, created| holds_after_cut(disk, cut, &names, &new, &created),
    );
    clean.result.expect("the creation without a cut");
}

#[test]
fn a_power_cut_at_every_step_of_a_creation_inside_the_tail_keeps_what_was_created() {
    cut_at_every_step_of_a_creation(&store_of(CHUNK_TOPICS + 5), CHUNK_TOPICS + 5);
}

#[test]
fn a_power_cut_at_every_step_of_a_creation_that_fills_the_tail_keeps_what_was_created() {
    cut_at_every_step_of_a_creation(&store_of(2 * CHUNK_TOPICS - 1), 2 * CHUNK_TOPICS - 1);
}

/// A creation that fills the tail (its chunk record written, then the catalog) with the `n`th
/// file sync or directory sync from its start failing, for every sync it makes: the creation
/// fails, the topic is recorded or not as the handle says, and creations of other topics then
/// succeed (the first fills the tail again: a chunk record of the failed attempt under the
/// same name, other bytes, is this owner's own leftover and is replaced); the store reopens
/// with exactly those topics and `verify` finds it sound.
#[test]
fn a_failed_sync_at_every_step_of_a_creation_that_fills_the_tail_leaves_a_store_that_grows() {
    let before = CHUNK_TOPICS - 1;
    let template = store_of(before - 1);
    let mut chunk_then_catalog_failed = false;
    // Every file sync in turn, then every directory sync, until one is past the creation.
    for_each_sync_fault(|fault| {
        let disk = MemStorage::new();
        copy_into(&template, &disk);
        let hooked = Hooked::new(disk.clone());
        let storage: Arc<dyn Storage> = Arc::new(hooked.clone());
        let store =
            Store::open_with_storage(storage.clone(), store_without_flusher()).expect("open");
        // A creation before the faults: its catalog write makes the open's claim durable (a
        // failed directory sync would otherwise forget the claim's link, another test's case).
        create(&store, before - 1, before);
        let counts = hooked.arm(fault);
        let filled = store.topic("filler").map(drop);
        if !hooked.fired(fault) {
            // Past the creation's last sync of that kind.
            filled.expect("the creation without a fault");
            store.close().expect("close");
            return false;
        }
        assert!(filled.is_err(), "{fault:?} at {counts:?}: {filled:?}");
        let failed = hooked.hooks.failed_syncs.lock().expect("hooks").clone();
        chunk_then_catalog_failed |= failed.iter().any(|f| f.starts_with("store."))
            && disk
                .list_prefix(CHUNK_RECORD_PREFIX)
                .expect("list")
                .iter()
                .any(|f| !f.ends_with(".tmp"));
        let mut names = store.topic_names();
        let kept = names.len() - before;
        assert!(kept <= 1, "{fault:?}: {names:?}");
        assert!(
            kept == 0 || names[before] == "filler",
            "{fault:?}: {names:?}"
        );
        for i in 0..3 {
            let other = format!("other-{i}");
            store
                .topic(&other)
                .unwrap_or_else(|e| panic!("{fault:?}: {other}: {e}"));
            names.push(other);
        }
        assert_eq!(store.topic_names(), names, "{fault:?}");
        store.close().expect("close");
        drop(store);
        reopened_holds(&storage, &names);
        true
    });
    assert!(
        chunk_then_catalog_failed,
        "no fault failed the catalog after its chunk record was written"
    );
}

#[test]
fn a_power_cut_at_every_step_of_the_upgrade_of_a_version_4_catalog_keeps_every_topic() {
    let template = store_of(CHUNK_TOPICS + 3);
    as_version_4(&template);
    cut_at_every_step_of_a_creation(&template, CHUNK_TOPICS + 3);
}

/// An earlier build's catalog opens, its topics moved into chunk records by the claim, and
/// opens again from them.
#[test]
fn a_version_4_catalog_opens_and_its_topics_move_into_chunks() {
    let disk = store_of(2 * CHUNK_TOPICS + 1);
    as_version_4(&disk);
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let names: Vec<String> = (0..=2 * CHUNK_TOPICS).map(name).collect();
    reopened_holds(&storage, &names);
    // The full chunks; the last topic stays inline.
    let chunks = storage.list_prefix(CHUNK_RECORD_PREFIX).expect("list");
    assert_eq!(chunks.len(), 2, "{chunks:?}");
}

/// A former owner creates a topic while a new owner claims the store and creates one, with the
/// claim at every storage operation of the former's creation: the former's creation is refused
/// or kept, the new owner's always kept, and the store is sound.
#[test]
fn a_former_owners_creation_during_a_claim_is_refused_or_kept_never_a_collision() {
    let template = store_of(CHUNK_TOPICS - 1);
    let before: Vec<String> = (0..CHUNK_TOPICS - 1).map(name).collect();
    let steps = {
        let disk = MemStorage::new();
        copy_into(&template, &disk);
        let hooked = takeover::Disk::new(Arc::new(disk.clone()));
        let old = Store::open_with_storage(hooked.storage.clone(), store_without_flusher())
            .expect("open");
        let at = hooked.hook.count();
        old.topic("former").expect("create");
        hooked.hook.count() - at
    };
    for n in 1..=steps {
        let disk = MemStorage::new();
        copy_into(&template, &disk);
        let hooked = takeover::Disk::new(Arc::new(disk.clone()));
        let old = Store::open_with_storage(hooked.storage.clone(), store_without_flusher())
            .expect("open");
        let new = {
            let disk = disk.clone();
            hooked.arm_takeover(n, move || {
                takeover::new_store_owner(&disk, store_without_flusher(), "new")
            })
        };
        let former = old.topic("former").map(drop);
        let new = new.lock().expect("slot").take().expect("the takeover ran");
        let names = new.topic_names();
        assert!(
            matches!(former, Ok(()) | Err(Error::Fenced { .. })),
            "step {n}: {former:?}"
        );
        let mut expected = before.clone();
        if former.is_ok() || names.contains(&"former".to_string()) {
            expected.push("former".into());
        }
        expected.push("new".into());
        assert_eq!(names, expected, "step {n}: {former:?}");
        new.close().expect("close");
        drop((new, old));
        reopened_holds(&(Arc::new(disk) as Arc<dyn Storage>), &expected);
    }
}

/// Each chunk record and the catalog deleted, cut, zeroed or bit-flipped, and each chunk
/// replaced by its sibling: the open refuses the store as damaged and `verify` reports damage
/// naming the same record.
#[test]
fn damage_to_any_chunk_or_to_the_catalog_is_refused_by_the_open_and_reported_by_verify() {
    let disk = store_of(2 * CHUNK_TOPICS - 1);
    let files = |prefix: &str| disk.list_prefix(prefix).expect("list");
    let bytes = |file: &str| disk.live_bytes(file).expect("bytes");
    {
        // The first creation fills the tail: its chunk record is written and pinned.
        let store = Store::open_with_storage(Arc::new(disk.clone()), store_without_flusher())
            .expect("open");
        create(&store, 2 * CHUNK_TOPICS - 1, 2 * CHUNK_TOPICS + 2);
        store.close().expect("close");
    }
    let chunks = files(CHUNK_RECORD_PREFIX);
    let catalog = files("store.");
    assert_eq!(
        (chunks.len(), catalog.len()),
        (2, 1),
        "{chunks:?} {catalog:?}"
    );
    let mut targets: Vec<(&str, String, Option<Vec<u8>>)> = Vec::new();
    for file in chunks.iter().chain(&catalog) {
        let whole = bytes(file);
        let mut flipped = whole.clone();
        flipped[whole.len() / 2] ^= 0x10;
        // A store directory without its catalog is not a store's: that is another test's.
        if file.starts_with(CHUNK_RECORD_PREFIX) {
            targets.push(("deleted", file.clone(), None));
        }
        targets.extend([
            (
                "truncated",
                file.clone(),
                Some(whole[..whole.len() / 2].to_vec()),
            ),
            ("zeroed", file.clone(), Some(vec![0; whole.len()])),
            ("bit flip", file.clone(), Some(flipped)),
        ]);
    }
    targets.extend([
        ("sibling", chunks[1].clone(), Some(bytes(&chunks[0]))),
        ("sibling", chunks[0].clone(), Some(bytes(&chunks[1]))),
    ]);
    for (what, file, damage) in targets {
        refused_as_damage(damaged_image(&disk, &file, damage), &file, what);
    }
}

/// Checks that `verify` reports damage naming the record of `file` in `storage` and that the
/// open refuses the store as [`Error::Corrupted`]; returns the record's name and the open's
/// error.
fn refused_as_damage(storage: Arc<dyn Storage>, file: &str, what: &str) -> (String, Error) {
    let report = ackstore::check::verify(&storage).expect("verify");
    let record = file.split_once('.').expect("a record file").0;
    assert!(
        !report.is_sound() && report.findings.iter().any(|f| f.file.contains(record)),
        "{what} {file}: {report}"
    );
    match Store::open_with_storage(storage, store_without_flusher()) {
        Err(e @ Error::Corrupted { .. }) => (record.to_owned(), e),
        opened => panic!("{what} {file}: {:?}", opened.err()),
    }
}

/// The durable image of `disk` with `file` deleted (`damage` `None`) or holding `damage`.
pub(crate) fn damaged_image(
    disk: &MemStorage,
    file: &str,
    damage: Option<Vec<u8>>,
) -> Arc<dyn Storage> {
    let damaged = disk.durable_image();
    match damage {
        None => damaged.remove(file).expect("remove"),
        Some(bytes) => damaged.set_bytes(file, bytes).expect("set"),
    }
    Arc::new(damaged)
}

/// The chunk record of another store whose topics differ, of the same index and the same
/// record name (both stores made by the same steps), put in place of this store's: the open
/// refuses it as damaged naming the chunk record, and `verify` reports it. The pin is the
/// CRC32 of the chunk's topics, which differ; the chunk record's frame checks out either way.
#[test]
fn a_sibling_stores_chunk_of_the_same_index_and_name_is_refused_by_the_open_and_verify() {
    let disk = store_of(CHUNK_TOPICS + 1);
    let sibling = MemStorage::new();
    {
        let store = Store::open_with_storage(Arc::new(sibling.clone()), store_without_flusher())
            .expect("open");
        for i in 0..=CHUNK_TOPICS {
            store.topic(&format!("sibling-{i}")).expect("create");
        }
        store.close().expect("close");
    }
    let chunks = disk.list_prefix(CHUNK_RECORD_PREFIX).expect("list");
    assert_eq!(
        chunks,
        sibling.list_prefix(CHUNK_RECORD_PREFIX).expect("list"),
        "both stores pin chunk 0 under the same name"
    );
    let [chunk] = chunks.as_slice() else {
        panic!("one chunk record: {chunks:?}");
    };
    let theirs = sibling.live_bytes(chunk).expect("bytes");
    assert_ne!(disk.live_bytes(chunk).expect("bytes"), theirs);
    let (record, error) = refused_as_damage(
        damaged_image(&disk, chunk, Some(theirs)),
        chunk,
        "another store's chunk",
    );
    assert!(
        matches!(
            &error,
            Error::Corrupted {
                place: CorruptionPlace::Record(name),
                kind: CorruptionKind::ChecksumMismatch,
            } if *name == record
        ),
        "{error:?}"
    );
}

/// A file named as a chunk record of the store catalog after a version no `u64` holds (20
/// digits and more; placed by hand, or a name bit-flipped): no owner ever names a record so, so
/// it is a leftover like any other the catalog does not pin, which `verify` warns of as one the
/// next open removes, and the next open does remove it.
#[test]
fn a_chunk_record_named_after_a_version_past_every_u64_is_removed_by_the_next_open() {
    let disk = store_of(3);
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let stray = format!("{CHUNK_RECORD_PREFIX}0-184467440737095516160.00000000000000000001.meta");
    let file = storage.create(&stray).expect("create");
    file.write_all_at(b"not a record", 0).expect("write");
    drop(file);
    let report = ackstore::check::verify(&storage).expect("verify");
    assert!(report.is_sound(), "{report}");
    assert!(
        report
            .unused
            .iter()
            .any(|f| f.file == stray && f.problem.contains("next open removes it")),
        "{report}"
    );
    let store = Store::open_with_storage(storage.clone(), store_without_flusher()).expect("open");
    store.close().expect("close");
    assert!(
        !storage.list().expect("list").contains(&stray),
        "the open left the leftover verify said it removes"
    );
    sound_without_leftovers(&storage, CHUNK_RECORD_PREFIX);
}

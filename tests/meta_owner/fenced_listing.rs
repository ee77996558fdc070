//! The listing an owned metadata store's first claim over a version takes after its link, which
//! it hands to a store topic's open (`MetaStore::take_fenced_listing`) instead of the open
//! listing again: it is what a listing shows right after the claim, less the names the claim
//! removed, on every layout a topic's files have (a directory of its own, the prefix `t{id}-`
//! on the in-memory disk, the flat `t{id}-` names of an earlier catalog beside the store's and
//! other topics' files on real files); any later change of the directory through the store
//! drops it, and only the first link over a version of an owned store of a whole directory
//! takes one.

use std::sync::Arc;

use ackstore::internals::format::meta::encode_stored;
use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::internals::store::space::TopicSpace;
use ackstore::{Error, FileStorage, MemStorage, Storage};

/// A record name's version file (`topic.00000000000000000002.meta`).
fn version_file(name: &str, version: u64) -> String {
    format!("{name}.{version:020}.meta")
}

/// Fills `storage` as a topic's files after a former owner's work: the topic record with two
/// names (a claim's), two cursor records, the temporary file of a write of one cut short, and
/// a ledger file. Returns the topic record's version.
fn fill(storage: &Arc<dyn Storage>) -> u64 {
    let former = FileMetaStore::new(storage.clone());
    let v = former.put("topic", None, b"the topic record").expect("put");
    let v = former.claim("topic", v).expect("claim");
    former.put("cursor-1", None, b"a cursor").expect("put");
    former.put("cursor-2", None, b"another").expect("put");
    for file in [
        "cursor-1.00000000000000000001.0123456789abcdef.meta.tmp".to_owned(),
        "ledger-00000000000000000001.log".to_owned(),
    ] {
        let f = storage.create(&file).expect("create");
        f.write_all_at(b"x", 0).expect("write");
        f.sync_data().expect("sync");
    }
    storage.sync_dir().expect("sync dir");
    v
}

/// Files of other topics and of the store beside the topic's (the flat layout keeps them in
/// one directory, the in-memory disk keeps every topic under its prefix).
fn neighbours(store: &Arc<dyn Storage>) {
    for file in [
        "store.00000000000000000003.meta",
        "journal-0000000000000001.seg",
        "t11-topic.00000000000000000001.meta",
        "t11-ledger-00000000000000000001.log",
    ] {
        store
            .create(file)
            .expect("create")
            .sync_data()
            .expect("sync");
    }
}

/// The storages a topic's files live in: a directory (in memory) of its own, topic 1's prefix
/// on the in-memory disk, topic 1's flat names in a store directory on real files, and topic
/// 1's directory of its own on real files; each with other files beside it.
fn layouts(dir: &std::path::Path) -> Vec<(&'static str, Arc<dyn Storage>)> {
    let alone: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let mem: Arc<dyn Storage> = Arc::new(MemStorage::new());
    neighbours(&mem);
    let flat_dir = dir.join("flat");
    let spaced_dir = dir.join("spaced");
    std::fs::create_dir_all(&flat_dir).expect("dir");
    std::fs::create_dir_all(&spaced_dir).expect("dir");
    let flat: Arc<dyn Storage> = Arc::new(FileStorage::open(&flat_dir, false).expect("open"));
    let spaced: Arc<dyn Storage> = Arc::new(FileStorage::open(&spaced_dir, false).expect("open"));
    neighbours(&flat);
    neighbours(&spaced);
    let space = |store: &Arc<dyn Storage>, spaced: bool| -> Arc<dyn Storage> {
        Arc::new(TopicSpace::open(store, 1, spaced, true, None).expect("space"))
    };
    vec![
        ("a directory in memory", alone),
        ("a prefix on the in-memory disk", space(&mem, true)),
        ("flat names on real files", space(&flat, false)),
        ("a directory of its own on real files", space(&spaced, true)),
    ]
}

/// An owned store of `storage` that read the topic record and claimed it: what a store topic's
/// open does first. Returns the store and the claimed version.
fn claimed(storage: &Arc<dyn Storage>) -> (FileMetaStore, u64) {
    let guard = storage.lock().expect("lock");
    let owned = FileMetaStore::owned(storage.clone(), &guard);
    let (version, _) = owned.get("topic").expect("get").expect("a record");
    let next = owned.claim("topic", version).expect("claim");
    (owned, next)
}

#[test]
fn a_claims_listing_is_what_a_listing_shows_after_it_on_every_layout() {
    let dir = tempfile::tempdir().expect("dir");
    for (layout, storage) in layouts(dir.path()) {
        let held = fill(&storage);
        let (owned, next) = claimed(&storage);
        assert_eq!(next, held + 1, "{layout}");
        let listed = owned.take_fenced_listing();
        let now = storage.list().expect("list");
        assert_eq!(listed.as_ref(), Some(&now), "{layout}");
        // The claim left the record's version and the claimed one, and removed the one below.
        assert!(
            now.contains(&version_file("topic", next)),
            "{layout}: {now:?}"
        );
        assert!(
            now.contains(&version_file("topic", held)),
            "{layout}: {now:?}"
        );
        assert!(
            !now.contains(&version_file("topic", held - 1)),
            "{layout}: {now:?}"
        );
        assert_eq!(owned.take_fenced_listing(), None, "{layout}: taken once");
    }
}

#[test]
fn reads_after_a_claim_keep_its_listing() {
    let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
    fill(&storage);
    let (owned, next) = claimed(&storage);
    assert!(owned.get("cursor-1").expect("get").is_some());
    assert!(owned.is_current("topic", next).expect("is_current"));
    assert_eq!(owned.list().expect("list").len(), 3);
    assert_eq!(
        owned.take_fenced_listing(),
        Some(storage.list().expect("list"))
    );
}

/// A change of the directory through the store after its claim.
type Change = fn(&FileMetaStore, u64);

#[test]
fn every_change_through_the_store_after_a_claim_drops_its_listing() {
    let changes: [(&str, Change); 7] = [
        ("a write of the claimed record", |m, v| {
            m.put("topic", Some(v), b"changed").map(drop).expect("put");
        }),
        ("a write of another record", |m, _| {
            m.put("cursor-1", Some(1), b"changed")
                .map(drop)
                .expect("put");
        }),
        ("a new record", |m, _| {
            m.put("cursor-9", None, b"new").map(drop).expect("put");
        }),
        ("a deletion", |m, _| {
            m.delete("cursor-2", 1).expect("delete")
        }),
        ("a discard", |m, _| {
            m.discard("cursor-2", 1).expect("discard")
        }),
        ("a claim of another record", |m, _| {
            m.claim("cursor-1", 1).map(drop).expect("claim");
        }),
        ("a sweep of leftovers", |m, _| {
            let temp = "cursor-1.00000000000000000001.0123456789abcdef.meta.tmp".to_owned();
            m.sweep_leftovers(&[temp]).expect("sweep");
        }),
    ];
    for (what, change) in changes {
        let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
        fill(&storage);
        let before = storage.list().expect("list");
        let (owned, next) = claimed(&storage);
        change(&owned, next);
        assert_ne!(
            storage.list().expect("list"),
            before,
            "{what} changed nothing"
        );
        assert_eq!(owned.take_fenced_listing(), None, "after {what}");
    }
}

#[test]
fn only_the_first_claim_over_a_version_of_an_owned_store_of_a_whole_directory_takes_a_listing() {
    // A store that is not owned lists the record's files alone.
    let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let v = fill(&storage);
    let shared = FileMetaStore::new(storage.clone());
    shared.claim("topic", v).expect("claim");
    assert_eq!(shared.take_fenced_listing(), None, "a store not owned");
    // A store that keeps some records only (a store's catalog) lists those alone.
    let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let v = fill(&storage);
    let guard = storage.lock().expect("lock");
    let scoped = FileMetaStore::owned_records(storage.clone(), &guard, &["topic"]);
    scoped.claim("topic", v).expect("claim");
    assert_eq!(
        scoped.take_fenced_listing(),
        None,
        "a store of some records"
    );
    drop(guard);
    // The second claim of an owned store checks its link by name lookups: no listing.
    let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
    fill(&storage);
    let (owned, _) = claimed(&storage);
    owned
        .take_fenced_listing()
        .expect("the first claim's listing");
    owned.claim("cursor-1", 1).expect("claim");
    assert_eq!(owned.take_fenced_listing(), None, "a second claim");
}

#[test]
fn a_claim_that_falls_back_to_a_write_hands_on_no_listing() {
    // A record of an earlier release (`topic.meta`, its version inside): the claim finds no
    // file of the version to link and writes the record instead.
    let disk = MemStorage::new();
    let legacy = disk.create("topic.meta").expect("create");
    legacy
        .write_all_at(&encode_stored(4, b"an earlier record"), 0)
        .expect("write");
    legacy.sync_data().expect("sync");
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let (owned, next) = claimed(&storage);
    assert_eq!(next, 5);
    assert_eq!(owned.take_fenced_listing(), None);
    assert_eq!(
        storage.list().expect("list"),
        [version_file("topic", 5)],
        "the write moved the record to its versioned name"
    );
}

#[test]
fn a_claim_fenced_by_another_writers_link_takes_its_listing_when_it_claims_again() {
    let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let v = fill(&storage);
    let guard = storage.lock().expect("lock");
    let owned = FileMetaStore::owned(storage.clone(), &guard);
    assert_eq!(owned.get("topic").expect("get").map(|(v, _)| v), Some(v));
    // A former owner's claim of the record lands between the read and the claim: its link
    // takes the next version's name first.
    let former = FileMetaStore::new(storage.clone());
    let written = former.claim("topic", v).expect("claim");
    let refused = owned.claim("topic", v);
    assert!(matches!(refused, Err(Error::Fenced { .. })), "{refused:?}");
    assert_eq!(owned.take_fenced_listing(), None, "a refused claim");
    let (again, _) = owned.get("topic").expect("get").expect("a record");
    assert_eq!(again, written);
    owned.claim("topic", again).expect("claim");
    assert_eq!(
        owned.take_fenced_listing(),
        Some(storage.list().expect("list"))
    );
}

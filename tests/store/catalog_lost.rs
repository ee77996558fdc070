//! A store directory whose catalog reads as absent while the store's files say it existed, on
//! real files and on the in-memory disk. Its newest version emptied (what the metadata layer
//! links for a deletion, which a store never makes of its catalog): `verify` (and the
//! command's gate before it) reports damage, the store's open refuses as `Corrupted` naming the
//! catalog, a topic's own open of the store's directory or of a topic's directory refuses as
//! `OwnedByStore`, and no refused open writes or removes anything (no fresh store over the
//! topics, no sweep of the older, intact versions); once the emptied version is taken away, the
//! store opens with every topic and flushed ack. Every version gone beside the store's topics
//! (their records name the store): the same, on real files and the in-memory disk. And what is
//! no store stays what it was: a topic of its own
//! beside a `t5/` directory or a `t5-x` file, a new topic among files named like a store's
//! topics, and what a store's first open cut short leaves.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ackstore::{
    CorruptionKind, CorruptionPlace, CursorOptions, Error, FileStorage, LedgerConfig,
    ManagedLedger, MemStorage, Position, Storage, Store,
};
use support::config::store_without_flusher;
use support::mutate::Tree;

const TOPICS: usize = 3;

/// A closed store of [`TOPICS`] topics of one entry each, reopened and closed once more (the
/// claim links the catalog's next version, a copy of the one before it). With `flushed`, each
/// topic's cursor `c` acked its entry and the store flushed (the journal holds them); without,
/// the store has no journal segment with a cursor in it. Returns each topic's entry.
fn store(dir: &Path, flushed: bool) -> Vec<Position> {
    let store = Store::open(dir, store_without_flusher()).expect("open");
    let mut entries = Vec::new();
    for i in 0..TOPICS {
        let topic = store.topic(&format!("topic-{i}")).expect("topic");
        let p = topic.append(b"entry").expect("append");
        topic.sync().expect("sync");
        if flushed {
            let c = topic
                .open_cursor("c", CursorOptions::default())
                .expect("cursor");
            c.ack(p).expect("ack");
        }
        entries.push(p);
    }
    store.flush_all().expect("flush");
    store.close().expect("close");
    drop(store);
    Store::open(dir, store_without_flusher())
        .expect("reopen")
        .close()
        .expect("close");
    entries
}

/// The catalog's committed version files in `dir`, oldest first.
pub(crate) fn catalog_versions(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("store.") && n.ends_with(".meta"))
        })
        .collect();
    found.sort();
    found
}

/// Every file under `dir` but the lock file (an open takes the lock), and every directory.
fn tree_without_lock(dir: &Path) -> Tree {
    let mut tree = Tree::read(dir);
    tree.files.remove(Path::new("LOCK"));
    tree
}

/// Checks that `dir` holds exactly `before` (the lock file aside): the same names, the same
/// bytes, the same directories.
fn unchanged(dir: &Path, before: &Tree, what: &str) {
    let after = tree_without_lock(dir);
    assert_eq!(
        before.files.keys().collect::<Vec<_>>(),
        after.files.keys().collect::<Vec<_>>(),
        "{what}: the refused open added or removed a file"
    );
    assert!(
        before.files == after.files,
        "{what}: the refused open wrote"
    );
    assert_eq!(before.dirs, after.dirs, "{what}");
}

/// Removes every committed version file of `dir`'s catalog.
fn remove_catalog(dir: &Path) {
    for version in catalog_versions(dir) {
        std::fs::remove_file(version).expect("remove");
    }
}

/// Checks that `dir` is a sound topic of its own to `verify` and `inspect`, and that its open
/// accepts it.
fn a_sound_topic(dir: &Path, what: &str) {
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(dir, false).expect("storage"));
    let report = ackstore::check::verify(&storage).expect("verify");
    assert!(report.is_sound(), "{what}: {report}");
    assert!(
        matches!(
            ackstore::check::inspect(&storage),
            Ok(ackstore::check::Inspection::Topic(_))
        ),
        "{what}"
    );
    ManagedLedger::open(dir, LedgerConfig::default())
        .expect("reopen")
        .close()
        .expect("close");
}

/// `verify` reports damage in `dir`'s store catalog (and the command's gate takes the
/// directory), a topic's own open of the directory, of its `t1` and of a new `t9` refuses as
/// [`Error::OwnedByStore`], and the store's open refuses as [`Error::Corrupted`] at the catalog
/// record with `kind`; none of them writes or removes anything.
fn refused_by_both(dir: &Path, kind: &CorruptionKind, what: &str) {
    let before = tree_without_lock(dir);
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(dir, false).expect("storage"));
    assert!(
        ackstore::check::holds_ackstore(&storage).expect("list"),
        "{what}: the command would stop before verify, as at a directory of no ackstore"
    );
    let report = ackstore::check::verify(&storage).expect("verify");
    assert!(
        !report.is_sound() && report.findings.iter().any(|f| f.file.contains("store")),
        "{what}: verify: {report}"
    );
    // A topic's own open, of the store's directory, of a topic's and of a new topic's in it:
    // refused, as a store's (the new topic's directory is not made).
    for topic_dir in [dir.to_path_buf(), dir.join("t1"), dir.join("t9")] {
        match ManagedLedger::open(&topic_dir, LedgerConfig::default()) {
            Err(Error::OwnedByStore { .. }) => {}
            other => panic!(
                "{what}: a topic's own open of {}: {:?}",
                topic_dir.display(),
                other.map(|_| "opened")
            ),
        }
    }
    match Store::open(dir, store_without_flusher()) {
        Err(Error::Corrupted {
            place: CorruptionPlace::Record(record),
            kind: found,
        }) if record == "store" && found == *kind => {}
        other => panic!("{what}: open: {:?}", other.map(|_| "opened")),
    }
    unchanged(dir, &before, what);
}

/// Whether the store in `dir` opens with every topic, each holding its entry, acked by its
/// cursor `c` when `flushed`, and `verify` finds it sound.
fn holds_everything(dir: &Path, entries: &[Position], flushed: bool) {
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(dir, false).expect("storage"));
    let report = ackstore::check::verify(&storage).expect("verify");
    assert!(report.is_sound(), "{report}");
    let store = Store::open(dir, store_without_flusher()).expect("open");
    let names: Vec<String> = (0..TOPICS).map(|i| format!("topic-{i}")).collect();
    assert_eq!(store.topic_names(), names);
    for (name, &p) in names.iter().zip(entries) {
        let topic = store.topic(name).expect("topic");
        let c = topic
            .open_cursor("c", CursorOptions::default())
            .expect("cursor");
        assert_eq!(c.is_acked(p).expect("is_acked"), flushed, "{name}");
    }
    store.close().expect("close");
}

/// The newest version's name holds an empty file of its own: refused by both, the open
/// writes nothing, and without that file the store is whole (the older version was kept).
/// Truncated in place instead, the file is the older version's too (the claim linked the
/// newest name to the same file), so both read as empty: refused by both, nothing written.
#[test]
fn an_emptied_newest_catalog_version_is_damage_to_verify_and_the_open_and_the_open_keeps_the_older()
{
    for (flushed, in_place) in [(false, false), (true, false), (false, true), (true, true)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let entries = store(dir.path(), flushed);
        let versions = catalog_versions(dir.path());
        assert!(versions.len() >= 2, "{versions:?}");
        let newest = versions.last().expect("a version");
        if in_place {
            std::fs::File::options()
                .write(true)
                .open(newest)
                .expect("open")
                .set_len(0)
                .expect("empty");
        } else {
            std::fs::remove_file(newest).expect("remove");
            std::fs::File::create(newest).expect("create");
        }
        let what = format!(
            "flushed {flushed}, {} emptied (in place {in_place})",
            newest.display()
        );
        refused_by_both(dir.path(), &CorruptionKind::Truncated, &what);
        std::fs::remove_file(newest).expect("remove");
        if in_place {
            refused_by_both(dir.path(), &CorruptionKind::Truncated, &what);
        } else {
            holds_everything(dir.path(), &entries, flushed);
        }
    }
}

/// Every catalog version gone beside the store's topics (their records name the store): the
/// same as an emptied one, but `InvalidField` (topics the catalog does not list).
#[test]
fn every_catalog_version_gone_beside_the_stores_topics_is_damage_to_verify_and_the_opens() {
    for flushed in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        store(dir.path(), flushed);
        remove_catalog(dir.path());
        refused_by_both(
            dir.path(),
            &CorruptionKind::InvalidField(
                "topics (the store holds files of a topic the catalog does not list)",
            ),
            &format!("flushed {flushed}, every catalog version removed"),
        );
    }
}

/// On the in-memory disk (no directories: every topic's files flat under `t{id}-`), every
/// catalog version gone: `verify` reports damage, the store's open and a topic's own open
/// refuse, and nothing changes.
#[test]
fn every_catalog_version_gone_on_the_in_memory_disk_is_damage_to_verify_and_the_opens() {
    let disk = MemStorage::new();
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    {
        let store =
            Store::open_with_storage(storage.clone(), store_without_flusher()).expect("open");
        let topic = store.topic("a").expect("topic");
        let p = topic.append(b"entry").expect("append");
        topic.sync().expect("sync");
        let c = topic
            .open_cursor("c", CursorOptions::default())
            .expect("cursor");
        c.ack(p).expect("ack");
        store.flush_all().expect("flush");
        store.close().expect("close");
    }
    for file in storage.list().expect("list") {
        if file.starts_with("store.") && file.ends_with(".meta") {
            storage.remove(&file).expect("remove");
        }
    }
    let before = storage.list().expect("list");
    assert!(ackstore::check::holds_ackstore(&storage).expect("list"));
    let report = ackstore::check::verify(&storage).expect("verify");
    assert!(!report.is_sound(), "{report}");
    match ManagedLedger::open_with_storage(storage.clone(), LedgerConfig::default()) {
        Err(Error::OwnedByStore { .. }) => {}
        other => panic!("a topic's own open: {:?}", other.map(|_| "opened")),
    }
    match Store::open_with_storage(storage.clone(), store_without_flusher()) {
        Err(Error::Corrupted {
            place: CorruptionPlace::Record(record),
            kind: CorruptionKind::InvalidField(_),
        }) if record == "store" => {}
        other => panic!("{:?}", other.map(|_| "opened")),
    }
    assert_eq!(before, storage.list().expect("list"), "the refused open");
}

/// A store of no topic whose catalog versions are all gone beside its journal segment: no
/// topic's files, so nothing says a store's catalog was lost; the open and `verify` agree.
#[test]
fn every_catalog_version_gone_beside_a_journal_segment_alone_is_judged_alike() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let store = Store::open(dir.path(), store_without_flusher()).expect("open");
        store.flush_all().expect("flush");
        store.close().expect("close");
    }
    remove_catalog(dir.path());
    let storage: Arc<dyn Storage> =
        Arc::new(FileStorage::open(dir.path(), false).expect("storage"));
    let report = ackstore::check::verify(&storage).expect("verify");
    let open = Store::open(dir.path(), store_without_flusher()).map(|_| "opened");
    assert_eq!(
        open.is_err(),
        !report.is_sound(),
        "open {open:?}, verify {report}"
    );
}

/// A topic of its own whose directory also holds another topic of its own in `t5/`, or a file
/// `t5-x`: its open accepts it, and `verify` and `inspect` find it a sound topic, not a store
/// that lost its catalog (the directory holds its own topic record and ledgers).
#[test]
fn a_topic_of_its_own_beside_a_t5_directory_or_file_is_a_sound_topic_to_verify_and_inspect() {
    for nested in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        let topic = ManagedLedger::open(dir.path(), LedgerConfig::default()).expect("topic");
        topic.append(b"entry").expect("append");
        topic.close().expect("close");
        if nested {
            let inner =
                ManagedLedger::open(dir.path().join("t5"), LedgerConfig::default()).expect("t5");
            inner.append(b"entry").expect("append");
            inner.close().expect("close");
        } else {
            std::fs::write(dir.path().join("t5-x"), b"x").expect("write");
        }
        a_sound_topic(dir.path(), &format!("nested {nested}"));
    }
}

/// What a store's first open cut short leaves on real files (the lock file, a temporary file
/// of the catalog's first write, an empty directory of topic 1): `verify` finds it sound, and
/// the next open makes the store.
#[test]
fn what_a_first_open_cut_short_leaves_is_sound_and_opens_as_a_new_store() {
    for (temp, empty_topic) in [(true, false), (false, true), (true, true)] {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("LOCK"), b"").expect("lock");
        if temp {
            std::fs::write(
                dir.path()
                    .join("store.00000000000000000001.0123456789abcdef.meta.tmp"),
                b"half",
            )
            .expect("temp");
        }
        if empty_topic {
            std::fs::create_dir(dir.path().join("t1")).expect("t1");
        }
        let storage: Arc<dyn Storage> =
            Arc::new(FileStorage::open(dir.path(), false).expect("storage"));
        let report = ackstore::check::verify(&storage).expect("verify");
        assert!(
            report.is_sound(),
            "temp {temp}, empty t1 {empty_topic}: {report}"
        );
        let store = Store::open(dir.path(), store_without_flusher()).expect("open");
        store
            .topic("a")
            .expect("topic")
            .append(b"x")
            .expect("append");
        store.close().expect("close");
    }
}

/// A new topic of its own in a directory holding only files or directories named like a
/// store's topics (`t1-notes.txt`, `t2024-01-01.log`, `t1/notes`), on real files and on the
/// in-memory disk: no catalog version, so no store; the topic opens.
#[test]
fn a_new_topic_among_names_like_a_stores_topics_opens() {
    for (file, nested) in [
        ("t1-notes.txt", false),
        ("t2024-01-01.log", false),
        ("notes", true),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        if nested {
            std::fs::create_dir(dir.path().join("t1")).expect("t1");
            std::fs::write(dir.path().join("t1").join(file), b"x").expect("write");
        } else {
            std::fs::write(dir.path().join(file), b"x").expect("write");
        }
        let topic = ManagedLedger::open(dir.path(), LedgerConfig::default())
            .unwrap_or_else(|e| panic!("{file} (in t1/: {nested}): {e}"));
        topic.append(b"entry").expect("append");
        topic.close().expect("close");
    }
    let disk: Arc<dyn Storage> = Arc::new(MemStorage::new());
    disk.create("t7-foo")
        .expect("create")
        .write_all_at(b"x", 0)
        .expect("write");
    ManagedLedger::open_with_storage(disk, LedgerConfig::default())
        .expect("open")
        .close()
        .expect("close");
}

/// A topic of its own beside a store's topic directory moved in as `t9/` (its record names a
/// store): the directory holds its own topic record, so it is a topic, whatever sits beside
/// it. `verify` finds it sound, `inspect` shows a topic, its open accepts it.
#[test]
fn a_topic_of_its_own_beside_a_stores_topic_directory_is_a_sound_topic() {
    let elsewhere = tempfile::tempdir().expect("tempdir");
    store(elsewhere.path(), true);
    let dir = tempfile::tempdir().expect("tempdir");
    let topic = ManagedLedger::open(dir.path(), LedgerConfig::default()).expect("topic");
    topic.append(b"entry").expect("append");
    topic.close().expect("close");
    std::fs::rename(elsewhere.path().join("t1"), dir.path().join("t9")).expect("move");
    a_sound_topic(dir.path(), "beside a store's t9/");
}

/// Every catalog version gone and the only topic's record unreadable: nothing left says a store
/// was there (a `t1/` of files is anyone's). The store's open refuses the directory as no
/// store of its own (`NotAckstore`) before it writes, as the command's gate does.
#[test]
fn every_catalog_version_gone_and_no_readable_topic_record_is_no_store_to_the_open_and_the_gate() {
    let dir = tempfile::tempdir().expect("tempdir");
    store(dir.path(), false);
    remove_catalog(dir.path());
    for topic in 0..TOPICS {
        for entry in std::fs::read_dir(dir.path().join(format!("t{}", topic + 1))).expect("list") {
            let path = entry.expect("entry").path();
            if path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("topic."))
            {
                std::fs::write(&path, b"not a topic record").expect("damage");
            }
        }
    }
    let before = tree_without_lock(dir.path());
    let storage: Arc<dyn Storage> =
        Arc::new(FileStorage::open(dir.path(), false).expect("storage"));
    assert!(!ackstore::check::holds_ackstore(&storage).expect("list"));
    match Store::open(dir.path(), store_without_flusher()) {
        Err(Error::NotAckstore { .. }) => {}
        other => panic!("{:?}", other.map(|_| "opened")),
    }
    unchanged(dir.path(), &before, "no readable topic record");
}

//! Attacks on a store's integrity checks: the name a journal state binds, the topics a catalog
//! lists, the cursors a topic's table lists. Each test is an edit or a history the checks
//! should catch (or should forgive) and asserts what a broker must see.

use crate::support;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use ackstore::internals::format::meta::TopicRecord;
use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::{Error, FileStorage, Position, Storage, Store};

/// Every ack of `cursor` at or below `last` of the ledgers `ledgers`, as positions (the
/// mark-delete position and what is individually acked above it).
fn acked(cursor: &ackstore::Cursor, ends: &[Position]) -> BTreeSet<Position> {
    let mut out = BTreeSet::new();
    for end in ends {
        for e in 0..=end.entry_id {
            let p = Position::new(end.ledger_id, e);
            if cursor.is_acked(p).expect("is_acked") {
                out.insert(p);
            }
        }
    }
    out
}

/// Rewrites the topic record of store topic `topic` (by its catalog id) in `dir` with `edit`,
/// as an operator's tool would (a valid record, checksum and all).
fn edit_topic_record(dir: &Path, topic: u64, edit: impl FnOnce(&mut TopicRecord)) {
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(dir, false).expect("storage"));
    let catalog = ackstore::internals::store::read_catalog(storage.clone())
        .expect("catalog")
        .expect("a store");
    let space =
        ackstore::internals::store::topic_storage(&storage, &catalog, topic).expect("topic");
    let meta = FileMetaStore::new(space);
    let (version, bytes) = meta.get("topic").expect("read").expect("topic record");
    let mut record = TopicRecord::decode(&bytes).expect("decode");
    edit(&mut record);
    meta.put("topic", Some(version), &record.encode())
        .expect("write");
}

fn verify_code(dir: &Path) -> (Option<i32>, String) {
    let v = support::mutate::verify(env!("CARGO_BIN_EXE_ackstore"), dir);
    (v.code, v.said)
}

/// A store upgraded from a journal of an earlier segment version (`tests/data/store-v2-flat`,
/// whose markers bind no name) and then used by this build: opened, every cursor opened,
/// `flush_all`, closed, twice. Two cursors of one topic then swap ids in the topic record.
/// Their journal states must not be handed to each other: the build had every chance to bind
/// each state to its cursor's name (each cursor was opened by name and flushed).
#[test]
fn an_upgraded_cursor_opened_and_flushed_by_this_build_is_bound_to_its_name() {
    let dir = support::samples::sample_dir("store-v2-flat");
    let config = ackstore::StoreConfig {
        flusher_threads: 0,
        ..ackstore::StoreConfig::default()
    };
    // What each cursor of the first topic holds, by name.
    let mut before = Vec::new();
    for round in 0..2 {
        let store = Store::open(dir.path(), config.clone()).expect("open");
        let name = store.topic_names()[0].clone();
        let topic = store.topic(&name).expect("topic");
        let ends = vec![topic.last_position().expect("entries")];
        let mut cursors = Vec::new();
        for c in topic.cursor_names() {
            let cursor = topic
                .open_cursor(&c, support::topic::earliest())
                .expect("cursor");
            let state = (
                cursor.mark_delete_position().expect("md"),
                acked(&cursor, &ends),
            );
            if round == 0 {
                before.push((c.clone(), state));
            } else {
                assert!(before.contains(&(c.clone(), state)), "{c} unchanged");
            }
            cursors.push(cursor);
        }
        store.flush_all().expect("flush_all");
        drop((cursors, topic));
        store.close().expect("close");
    }
    assert_eq!(before.len(), 2, "two cursors: {before:?}");
    assert_ne!(before[0].1, before[1].1, "the sample's cursors differ");

    edit_topic_record(dir.path(), 1, |r| {
        let table = r.cursors.tail_mut();
        let (a, b) = (table[0].id, table[1].id);
        table[0].id = b;
        table[1].id = a;
    });
    let (code, said) = verify_code(dir.path());
    let store = Store::open(dir.path(), config).expect("open");
    let name = store.topic_names()[0].clone();
    let topic = store.topic(&name).expect("topic");
    let ends = vec![topic.last_position().expect("entries")];
    for (c, state) in &before {
        match topic.open_cursor(c, support::topic::earliest()) {
            Err(Error::Corrupted { .. }) => {}
            Err(e) => panic!("{c}: {e}"),
            Ok(cursor) => {
                let now = (
                    cursor.mark_delete_position().expect("md"),
                    acked(&cursor, &ends),
                );
                assert_eq!(
                    &now, state,
                    "{c} opened with the other cursor's state (verify said {code:?}: {said})"
                );
            }
        }
    }
    assert_eq!(code, Some(1), "verify: {said}");
}

/// Names in a store's root that look like a topic's but are not the store's (`t01`, `t1x`,
/// `t`, `t-1` directories holding files; a file `t5` with no dash): the store never creates
/// them, open and verify both ignore them. A file named like an unlisted topic's (`t7-foo`)
/// is refused by both, in the same words.
#[test]
fn hostile_topic_like_names_in_the_root_open_and_verify_agree() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = ackstore::StoreConfig {
        flusher_threads: 0,
        ..ackstore::StoreConfig::default()
    };
    {
        let store = Store::open(dir.path(), config.clone()).expect("open");
        let t = store.topic("a").expect("a");
        t.append(b"x").expect("append");
        t.sync().expect("sync");
        drop(t);
        store.close().expect("close");
    }
    for d in ["t01", "t1x", "t", "t-1", "t+2", "t２"] {
        std::fs::create_dir(dir.path().join(d)).expect("mkdir");
        std::fs::write(
            dir.path().join(d).join("topic.00000000000000000001.meta"),
            b"junk",
        )
        .expect("write");
    }
    std::fs::write(dir.path().join("t5"), b"junk").expect("write");
    let (code, said) = verify_code(dir.path());
    let opened = Store::open(dir.path(), config.clone()).map(|s| s.close());
    assert!(matches!(opened, Ok(Ok(()))), "{opened:?}");
    assert_eq!(code, Some(0), "verify: {said}");

    std::fs::write(dir.path().join("t7-foo"), b"junk").expect("write");
    let (code, said) = verify_code(dir.path());
    let opened = Store::open(dir.path(), config).map(|s| s.close());
    assert!(matches!(opened, Err(Error::Corrupted { .. })), "{opened:?}");
    assert_eq!(code, Some(1), "verify: {said}");
}

/// A cursor created, acked and deleted again and again under one name while `flush_all` runs
/// in a loop on another thread and the flusher pool ticks (small segments: rollovers run
/// meanwhile). After a clean close, the reopened store holds exactly the last incarnation's
/// acks under that name (nothing of a deleted one comes back), the journal holds no state of a
/// deleted incarnation once the topic opened, and verify exits 0.
#[test]
fn a_cursor_deleted_and_recreated_while_ticks_run_comes_back_as_its_last_incarnation() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().expect("tempdir");
    let mut ledger = support::topic::config(1_000);
    ledger.cursor.flush_interval = Some(std::time::Duration::from_millis(1));
    let config = ackstore::StoreConfig {
        ledger,
        journal: ackstore::JournalConfig { segment_bytes: 512 },
        flusher_threads: 2,
        ..ackstore::StoreConfig::default()
    };
    let ends;
    let last: BTreeSet<Position>;
    {
        let store = Arc::new(Store::open(dir.path(), config.clone()).expect("open"));
        let topic = store.topic("a").expect("topic");
        let ps: Vec<Position> = (0..64u8)
            .map(|i| topic.append(&[i]).expect("append"))
            .collect();
        topic.sync().expect("sync");
        ends = vec![ps[63]];
        let stop = Arc::new(AtomicBool::new(false));
        let flusher = {
            let (store, stop) = (store.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut ticks = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    store.flush_all().expect("flush_all");
                    ticks += 1;
                }
                ticks
            })
        };
        let mut acks = BTreeSet::new();
        for round in 0..100usize {
            let c = topic
                .open_cursor("c", support::topic::earliest())
                .expect("cursor");
            acks.clear();
            for k in 0..(1 + round % 5) {
                let p = ps[(round * 7 + k * 13) % 64];
                c.ack(p).expect("ack");
                acks.insert(p);
            }
            if round % 3 == 0 {
                c.flush().expect("flush");
            }
            if round < 99 {
                topic.delete_cursor("c").expect("delete");
            }
        }
        stop.store(true, Ordering::SeqCst);
        assert!(flusher.join().expect("flusher") > 0);
        last = acks;
        drop(topic);
        store.close().expect("close");
    }
    let (code, said) = verify_code(dir.path());
    assert_eq!(code, Some(0), "verify: {said}");
    let store = Store::open(dir.path(), config).expect("open");
    let topic = store.topic("a").expect("topic");
    assert_eq!(topic.cursor_names(), ["c"]);
    assert_eq!(
        store.journal().cursors().len(),
        1,
        "only the last incarnation's state is held"
    );
    let c = topic
        .open_cursor("c", support::topic::earliest())
        .expect("c");
    assert_eq!(acked(&c, &ends), last);
}

/// What a deletion of a store cursor leaves when cut short after its table entry went (its
/// record first, then the entry; its journal state still held), plus a record file the store
/// never writes whose name spells the same id with a leading zero (`cursor-00`). Open finishes
/// the deletion (it reads `cursor-0` only); verify must say what open does.
#[test]
fn a_zero_padded_cursor_record_beside_a_deletion_cut_short_open_and_verify_agree() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = ackstore::StoreConfig {
        flusher_threads: 0,
        ..ackstore::StoreConfig::default()
    };
    {
        let store = Store::open(dir.path(), config.clone()).expect("open");
        let topic = store.topic("a").expect("topic");
        let p = topic.append(b"m").expect("append");
        topic.sync().expect("sync");
        for name in ["x", "y"] {
            let c = topic
                .open_cursor(name, support::topic::earliest())
                .expect("cursor");
            c.ack(p).expect("ack");
        }
        store.flush_all().expect("flush");
        store.close().expect("close");
    }
    let t1 = dir.path().join("t1");
    let records: Vec<_> = std::fs::read_dir(&t1)
        .expect("list")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .filter(|f| f.starts_with("cursor-0."))
        .collect();
    assert!(!records.is_empty(), "x is cursor 0");
    for r in &records {
        let padded = r.replacen("cursor-0.", "cursor-00.", 1);
        std::fs::rename(t1.join(r), t1.join(padded)).expect("rename");
    }
    edit_topic_record(dir.path(), 1, |r| r.cursors.retain(|c| &*c.name != "x"));
    let (code, said) = verify_code(dir.path());
    let opened =
        Store::open(dir.path(), config).and_then(|s| s.topic("a").map(|t| t.cursor_names()));
    match opened {
        Ok(names) => {
            assert_eq!(names, ["y"]);
            assert_eq!(code, Some(0), "open finished the deletion; verify: {said}");
        }
        Err(e) => assert_eq!(code, Some(1), "open refused ({e}); verify: {said}"),
    }
}

/// `tests/data/store-v2-flat` (a version 1 journal: no name bound) copied onto an in-memory disk.
fn upgraded_sample(disk: &ackstore::MemStorage) {
    let dir = support::samples::sample_dir("store-v2-flat");
    for entry in std::fs::read_dir(dir.path()).expect("list") {
        let entry = entry.expect("entry");
        let name = entry.file_name().into_string().expect("utf-8");
        let bytes = std::fs::read(entry.path()).expect("read");
        let file = disk.create(&name).expect("create");
        file.write_all_at(&bytes, 0).expect("write");
        file.sync_data().expect("sync");
    }
    disk.sync_dir().expect("sync dir");
}

type States = Vec<(String, (Option<Position>, BTreeSet<Position>))>;

/// Every cursor of every topic of the store on `disk`, opened by name: its mark-delete and acks.
fn states(disk: &ackstore::MemStorage) -> ackstore::Result<States> {
    let config = ackstore::StoreConfig {
        flusher_threads: 0,
        ..ackstore::StoreConfig::default()
    };
    let store = Store::open_with_storage(Arc::new(disk.clone()), config)?;
    let mut out = Vec::new();
    for t in store.topic_names() {
        let topic = store.topic(&t)?;
        let ends: Vec<Position> = topic.last_position().into_iter().collect();
        for c in topic.cursor_names() {
            let cursor = topic.open_cursor(&c, support::topic::earliest())?;
            let state = (cursor.mark_delete_position()?, acked(&cursor, &ends));
            out.push((format!("{t}/{c}"), state));
        }
    }
    store.close()?;
    Ok(out)
}

/// A power cut at every storage operation of the first use of an upgraded store by this build
/// (every cursor opened, `flush_all`, which binds each state to its cursor's name, close): the
/// next open works and every cursor holds exactly the state it held before.
#[test]
fn a_power_cut_while_an_upgraded_store_binds_its_cursors_names_loses_and_invents_nothing() {
    let original = {
        let disk = ackstore::MemStorage::new();
        upgraded_sample(&disk);
        states(&disk.durable_image()).expect("the sample opens")
    };
    assert_eq!(original.len(), 4, "{original:?}");
    let clean = support::crash::cut_everywhere_after(
        support::crash::Points::EVERY,
        upgraded_sample,
        |disk, ()| states(disk),
        |disk, cut, _| {
            let after = states(&disk.durable_image())
                .unwrap_or_else(|e| panic!("cut {}/{}: open: {e}", cut.n, cut.total));
            assert_eq!(after, original, "cut {}/{}", cut.n, cut.total);
        },
    );
    assert!(clean.total > 0);
    // Without a cut, every state binds its cursor's name afterwards.
    let disk = ackstore::MemStorage::new();
    upgraded_sample(&disk);
    states(&disk).expect("first use");
    let config = ackstore::StoreConfig {
        flusher_threads: 0,
        ..ackstore::StoreConfig::default()
    };
    let store = Store::open_with_storage(Arc::new(disk.durable_image()), config).expect("open");
    let journal = store.journal();
    for id in journal.cursors() {
        let bound = journal.committed_name(id).map(|(tag, _)| tag);
        assert!(bound.is_some_and(|tag| tag != 0), "{id:?} binds {bound:?}");
    }
}

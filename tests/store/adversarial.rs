//! A store's lifecycle guarantees tried the way a production deployment reaches them: a store's
//! topic directory named through a symlink or a path with `..`, a topic handle used after its
//! store is gone, every call of a former owner after a fence.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::{CursorOptions, Error, LedgerConfig, ManagedLedger, MemStorage, Store};
use support::topic::store_config;

fn assert_owned_by_store(opened: ackstore::Result<ManagedLedger>, what: &str) {
    match opened {
        Err(Error::OwnedByStore { .. }) => {}
        Err(e) => panic!("{what}: refused with the wrong error: {e}"),
        Ok(_) => panic!("{what}: opened as a topic of its own"),
    }
}

/// A store's topic directory reached by another name (a symlink to it, a path through one of
/// its subdirectories and `..`) is the same directory: it opens only through the store.
#[test]
fn a_stores_topic_directory_reached_by_another_name_is_refused() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store_dir = dir.path().join("store");
    let store = Store::open(&store_dir, store_config(1_000)).expect("open");
    let topic = store.topic("t").expect("topic");
    topic.append(b"store's entry").expect("append");
    topic.sync().expect("sync");
    let topic_dir = store_dir.join("t1");
    assert!(topic_dir.is_dir(), "the topic's own directory");
    let link = dir.path().join("orders");
    std::os::unix::fs::symlink(&topic_dir, &link).expect("symlink");
    let store_link = dir.path().join("broker-data");
    std::os::unix::fs::symlink(&store_dir, &store_link).expect("symlink");
    std::fs::create_dir(topic_dir.join("spare")).expect("a subdirectory");
    let config = LedgerConfig::default();
    for round in ["running", "closed"] {
        assert_owned_by_store(
            ManagedLedger::open(&link, config.clone()),
            &format!("a symlink to the {round} store's topic"),
        );
        assert_owned_by_store(
            ManagedLedger::open(topic_dir.join("spare").join(".."), config.clone()),
            &format!("the {round} store's topic through `spare/..`"),
        );
        assert_owned_by_store(
            ManagedLedger::open(store_link.join("t1"), config.clone()),
            &format!("the {round} store's topic under a symlink to the store"),
        );
        assert_owned_by_store(
            ManagedLedger::open(store_link.join("t9"), config.clone()),
            &format!("a topic the {round} store has not created, under a symlink"),
        );
        if round == "running" {
            drop(topic.clone());
            store.close().expect("close");
        }
    }
    drop((topic, store));
    assert!(
        !store_dir.join("t9").exists(),
        "a refused open creates nothing"
    );
    let store = Store::open(&store_dir, store_config(1_000)).expect("reopen");
    let topic = store.topic("t").expect("topic");
    assert_eq!(topic.next_index(), 1, "only the store's entry");
}

/// Every write through a topic or cursor handle kept after the store's last handle was
/// dropped is refused: none answers `Ok` for state that can never be synced.
#[test]
fn every_write_through_a_topic_kept_after_its_store_is_refused() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = Store::open(dir.path(), store_config(1_000)).expect("open");
    let topic = store.topic("t").expect("topic");
    let ps: Vec<_> = (0..8)
        .map(|_| topic.append(b"e").expect("append"))
        .collect();
    topic.sync().expect("sync");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    let other = topic
        .open_cursor("other", CursorOptions::default())
        .expect("cursor");
    cursor.ack(ps[1]).expect("ack");
    cursor.flush().expect("flush");
    let store2 = store.clone();
    drop(store);
    drop(store2);
    let mut outcomes: Vec<(&str, String)> = Vec::new();
    let mut record = |what: &'static str, ok: bool, debug: String| {
        if ok {
            outcomes.push((what, debug));
        }
    };
    let r = topic.append(b"late");
    record("append", r.is_ok(), format!("{r:?}"));
    let r = topic.sync();
    record("sync", r.is_ok(), format!("{r:?}"));
    let r = topic.open_cursor("new", CursorOptions::default());
    record("open_cursor", r.is_ok(), "Ok".into());
    let r = topic.delete_cursor("other");
    record("delete_cursor", r.is_ok(), format!("{r:?}"));
    let r = topic.trim_consumed();
    record("trim_consumed", r.is_ok(), format!("{r:?}"));
    let r = cursor.ack(ps[2]);
    record("ack", r.is_ok(), format!("{r:?}"));
    let r = cursor.ack_cumulative(ps[3]);
    record("ack_cumulative", r.is_ok(), format!("{r:?}"));
    let r = cursor.ack_many(&[ps[5]]);
    record("ack_many", r.is_ok(), format!("{r:?}"));
    let r = cursor.ack_batch_index(ps[6], 0, 4);
    record("ack_batch_index", r.is_ok(), format!("{r:?}"));
    let r = cursor.skip_entries(1);
    record("skip_entries", r.is_ok(), format!("{r:?}"));
    let r = cursor.mark_delete_with_properties(ps[4], BTreeMap::new());
    record("mark_delete_with_properties", r.is_ok(), format!("{r:?}"));
    let r = cursor.set_property("k", 1);
    record("set_property", r.is_ok(), format!("{r:?}"));
    let r = cursor.remove_property("k");
    record("remove_property", r.is_ok(), format!("{r:?}"));
    let r = cursor.seek(ps[0]);
    record("seek", r.is_ok(), format!("{r:?}"));
    let r = cursor.rewind();
    record("rewind", r.is_ok(), format!("{r:?}"));
    let r = cursor.seek_by_index(0);
    record("seek_by_index", r.is_ok(), format!("{r:?}"));
    let r = cursor.flush();
    record("flush", r.is_ok(), format!("{r:?}"));
    let r = other.ack(ps[0]);
    record("ack on another cursor", r.is_ok(), format!("{r:?}"));
    assert!(
        outcomes.is_empty(),
        "writes answered Ok after the store was gone: {outcomes:?}"
    );
    // What the drop kept: the flushed ack, nothing later.
    let store = Store::open(dir.path(), store_config(1_000)).expect("reopen");
    let again = store.topic("t").expect("topic");
    let c = again
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    assert!(c.is_acked(ps[1]).expect("is_acked"));
    assert!(!c.is_acked(ps[2]).expect("is_acked"));
    assert_eq!(again.cursor_names().len(), 2, "no cursor came or went");
    drop((topic, cursor, other));
}

/// After a fence, every call of the former owner that writes answers `Fenced`, never
/// `PreviousIo` or `Io`: the broker unloads, it does not reopen.
#[test]
fn every_call_of_a_fenced_store_answers_fenced() {
    let disk = MemStorage::new();
    let config = store_config(1_000);
    let old = Store::open_with_storage(Arc::new(disk.clone()), config.clone()).expect("open");
    let topic = old.topic("t").expect("topic");
    let ps: Vec<_> = (0..4)
        .map(|_| topic.append(b"e").expect("append"))
        .collect();
    topic.sync().expect("sync");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    cursor.ack(ps[0]).expect("ack");
    cursor.flush().expect("flush");
    disk.break_lock();
    let new = Store::open_with_storage(Arc::new(disk.clone()), config).expect("the new owner");
    let fenced = |r: &ackstore::Result<()>| matches!(r, Err(Error::Fenced { .. }));
    let mut wrong = Vec::new();
    for round in 0..3 {
        let _ = cursor.ack(ps[1 + round]);
        let r = cursor.flush();
        if !fenced(&r) {
            wrong.push(format!("round {round} flush: {r:?}"));
        }
        let r = old.flush_all().map(drop);
        if !fenced(&r) {
            wrong.push(format!("round {round} flush_all: {r:?}"));
        }
        let r = topic.append(b"late").and_then(|_| topic.sync());
        if !fenced(&r) {
            wrong.push(format!("round {round} append+sync: {r:?}"));
        }
        let r = old.topic(&format!("new{round}")).map(drop);
        if !fenced(&r) {
            wrong.push(format!("round {round} topic: {r:?}"));
        }
    }
    drop(cursor);
    let r = topic.close();
    if !fenced(&r) {
        wrong.push(format!("topic close: {r:?}"));
    }
    let r = old.close();
    if !fenced(&r) {
        wrong.push(format!("store close: {r:?}"));
    }
    assert!(wrong.is_empty(), "a former owner heard: {wrong:#?}");
    drop(new);
}

/// A store with tiny journal segments (a rollover and a new segment every few ticks) whose
/// three cursors share a small ack budget (evictions between ticks).
fn rolling_store_config() -> ackstore::StoreConfig {
    let mut config = store_config(50);
    config.ledger.cursor.persist_mode = ackstore::PersistMode::MultiEntry;
    config.ack_memory_bytes = Some(2 << 10);
    config.flusher_threads = 0;
    config.journal.segment_bytes = 4096;
    config
}

/// The disk fills at every write in turn of a workload of ticks, evictions, rollovers and new
/// segments (the catalog's write that lists a new segment included); once space returns, the
/// next `flush_all` succeeds, and a power cut right after it keeps exactly the acks made.
#[test]
fn a_full_disk_at_any_journal_write_is_retried_once_space_returns() {
    const ENTRIES: usize = 1_000;
    const CURSORS: usize = 3;
    let mut wrong = Vec::new();
    for k in 0..250u64 {
        let disk = MemStorage::new();
        let config = rolling_store_config();
        let store = Store::open_with_storage(Arc::new(disk.clone()), config.clone()).expect("open");
        let topic = store.topic("t").expect("topic");
        let ps = support::topic::append_n(&topic, ENTRIES as u64);
        topic.sync().expect("sync");
        let cursors: Vec<_> = (0..CURSORS)
            .map(|i| {
                topic
                    .open_cursor(&format!("c{i}"), CursorOptions::default())
                    .expect("cursor")
            })
            .collect();
        let mut model = vec![BTreeSet::new(); CURSORS];
        store.flush_all().expect("a flush with space");
        disk.enospc_after(Some(k));
        for round in 0..6 {
            for (ci, c) in cursors.iter().enumerate() {
                for i in ((round * 7 + ci)..ENTRIES).step_by(11 + ci) {
                    if c.ack(ps[i]).is_ok() {
                        model[ci].insert(i);
                    }
                }
            }
            // Fails or not, depending on where the disk filled.
            let _ = store.flush_all();
        }
        disk.enospc_after(None);
        if let Err(e) = store.flush_all() {
            wrong.push(format!(
                "full from write {k}: flush_all once space returned: {e}"
            ));
            continue;
        }
        let image = disk.durable_image();
        drop((cursors, topic, store));
        let store = Store::open_with_storage(Arc::new(image), config).expect("reopen");
        let topic = store.topic("t").expect("topic");
        for (ci, acked) in model.iter().enumerate() {
            let c = topic
                .open_cursor(&format!("c{ci}"), CursorOptions::default())
                .expect("cursor");
            let kept: BTreeSet<usize> = (0..ENTRIES)
                .filter(|&i| c.is_acked(ps[i]).expect("is_acked"))
                .collect();
            if &kept != acked {
                wrong.push(format!(
                    "full from write {k}: cursor c{ci} kept {} acks, acked {} (lost {:?}, invented {:?})",
                    kept.len(),
                    acked.len(),
                    acked.difference(&kept).next(),
                    kept.difference(acked).next()
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// A store's topic directory handed to `ManagedLedger::open_with_storage` as a storage of its
/// own is refused as when it is named by its path, running or not.
#[test]
fn a_stores_topic_directory_as_a_storage_of_its_own_is_refused() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = Store::open(dir.path(), store_config(1_000)).expect("open");
    let topic = store.topic("t").expect("topic");
    let p = topic.append(b"store's entry").expect("append");
    topic.sync().expect("sync");
    let storage =
        || Arc::new(ackstore::FileStorage::open(dir.path().join("t1"), false).expect("storage"));
    assert_owned_by_store(
        ManagedLedger::open_with_storage(storage(), LedgerConfig::default()),
        "the running store's topic as a storage",
    );
    drop(topic);
    store.close().expect("close");
    drop(store);
    assert_owned_by_store(
        ManagedLedger::open_with_storage(storage(), LedgerConfig::default()),
        "the closed store's topic as a storage",
    );
    let store = Store::open(dir.path(), store_config(1_000)).expect("reopen");
    let topic = store.topic("t").expect("topic");
    assert_eq!(topic.last_position(), Some(p), "only the store's entry");
}

#[test]
fn a_listed_topic_whose_record_is_gone_beside_its_ledgers_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), store_config(1 << 20)).unwrap();
        let t = store.topic("orders").unwrap();
        t.append(b"x").unwrap();
        t.sync().unwrap();
        t.close().unwrap();
        store.close().unwrap();
    }
    let topic_dir = dir.path().join("t1");
    let mut removed = 0;
    for e in std::fs::read_dir(&topic_dir).unwrap() {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().starts_with("topic.") {
            std::fs::remove_file(e.path()).unwrap();
            removed += 1;
        }
    }
    assert!(removed > 0, "no topic record in {}", topic_dir.display());
    let store = Store::open(dir.path(), store_config(1 << 20)).unwrap();
    match store.topic("orders") {
        Err(Error::Corrupted { .. }) => {}
        other => panic!("a listed topic with ledgers and no record: {other:?}"),
    }
}

//! A topic directory knows its host: a store's topic opened alone (by a storage that does not
//! show where it lives, or a copy of its directory somewhere else) is refused with
//! `Error::OwnedByStore` before anything is written, `verify` reports the same and `inspect`
//! refuses the same; a directory that hosts its own cursor journal (a topic opened alone), or a
//! topic of another store, found in a store's place is refused by the store's open. Either way
//! no flushed ack is lost and none is invented.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;

use ackstore::internals::format::meta::TopicRecord;
use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::{
    CursorOptions, Error, LedgerConfig, ManagedLedger, MemStorage, Position, Storage, Store,
};
use support::crash::{Points, cut_everywhere_after};
use support::topic::{append_n, earliest, store_config};

const TOPIC: &str = "persistent://t/ns/orders";
/// Entries of the topic; a batch-index cursor acks inside entry `BATCH_ENTRY`.
const ENTRIES: u64 = 12;
const BATCH_ENTRY: usize = 6;
const BATCH_SIZE: u32 = 4;

/// What each cursor acknowledged, as its state reads back: the entries acked whole, and the
/// batch indexes acked inside [`BATCH_ENTRY`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Acked {
    whole: Vec<Position>,
    batch: Vec<u32>,
}

/// The state of every cursor of `topic` on `entries`.
fn acked_states(topic: &ManagedLedger, entries: &[Position]) -> BTreeMap<String, Acked> {
    let mut states = BTreeMap::new();
    for name in topic.cursor_names() {
        let cursor = topic
            .open_cursor(&name, CursorOptions::default())
            .expect("cursor");
        let whole = entries
            .iter()
            .copied()
            .filter(|p| cursor.is_acked(*p).expect("is_acked"))
            .collect();
        let batch = (0..BATCH_SIZE)
            .filter(|i| {
                cursor
                    .is_batch_index_acked(entries[BATCH_ENTRY], *i)
                    .expect("batch index")
            })
            .collect();
        states.insert(name, Acked { whole, batch });
    }
    states
}

/// Three cursors of one topic: individual acks, a cumulative ack with a hole above it, and
/// batch-index acks; flushed. Returns the entries.
fn ack_three_cursors(topic: &ManagedLedger) -> Vec<Position> {
    let entries = append_n(topic, ENTRIES);
    let a = topic.open_cursor("a", earliest()).expect("cursor a");
    for i in [1, 3, 5, 8] {
        a.ack(entries[i]).expect("ack");
    }
    let b = topic.open_cursor("b", earliest()).expect("cursor b");
    b.ack_cumulative(entries[4]).expect("ack cumulative");
    b.ack(entries[9]).expect("ack");
    let c = topic.open_cursor("c/..", earliest()).expect("cursor c");
    for i in [0, 2] {
        c.ack_batch_index(entries[BATCH_ENTRY], i, BATCH_SIZE)
            .expect("batch ack");
    }
    c.ack(entries[10]).expect("ack");
    for cursor in [&a, &b, &c] {
        cursor.flush().expect("flush");
    }
    entries
}

/// A store on `disk` holding [`TOPIC`] with three flushed cursors, closed; returns the entries
/// and the cursors' states as the store reads them back.
fn store_with_acks(disk: &MemStorage) -> (Vec<Position>, BTreeMap<String, Acked>) {
    let store = Store::open_with_storage(Arc::new(disk.clone()), store_config(5)).expect("open");
    let topic = store.topic(TOPIC).expect("topic");
    let entries = ack_three_cursors(&topic);
    let states = acked_states(&topic, &entries);
    assert_eq!(states.len(), 3);
    assert!(states.values().all(|s| !s.whole.is_empty()));
    drop(topic);
    store.close().expect("close");
    (entries, states)
}

/// The files of the store's first topic (`t1-` on the in-memory disk), as a storage of their
/// own: what the topic's directory is on real files, copied (or reached through a storage that
/// does not say where it lives).
fn topic_files_alone(disk: &MemStorage) -> MemStorage {
    let alone = MemStorage::new();
    for name in disk.list().expect("list") {
        if let Some(inner) = name.strip_prefix("t1-") {
            copy_file(disk, &name, &alone, inner);
        }
    }
    assert!(
        alone
            .list()
            .expect("list")
            .iter()
            .any(|n| n.starts_with("topic.")),
        "the topic record was copied"
    );
    alone
}

/// Copies file `name` of `from` to `to` under `to_name`, durable there.
fn copy_file(from: &MemStorage, name: &str, to: &MemStorage, to_name: &str) {
    copy_bytes(from.live_bytes(name).expect("bytes"), to, to_name);
}

/// Creates file `name` of `to` holding `bytes`, durable.
fn copy_bytes(bytes: Vec<u8>, to: &MemStorage, name: &str) {
    to.create(name).expect("create");
    to.set_bytes(name, bytes).expect("copy");
    to.sync_dir().expect("sync");
}

fn assert_owned_by_store(opened: ackstore::Result<ManagedLedger>, what: &str) {
    match opened {
        Err(e @ Error::OwnedByStore { .. }) => {
            assert!(
                e.to_string().contains("store"),
                "{what}: the message names the store: {e}"
            );
        }
        Err(e) => panic!("{what}: refused with the wrong error: {e}"),
        Ok(_) => panic!("{what}: opened as a topic of its own"),
    }
}

/// A store's topic opened alone is refused whatever storage reaches it, before anything is
/// written; `verify` reports that refusal and `inspect` refuses it; the store reopens with every
/// flushed ack of every cursor.
#[test]
fn a_stores_topic_opened_alone_is_refused_and_the_store_keeps_every_flushed_ack() {
    let disk = MemStorage::new();
    let (entries, states) = store_with_acks(&disk);
    let alone = topic_files_alone(&disk);
    let before = alone.mutations();
    let storage: Arc<dyn Storage> = Arc::new(alone.clone());
    assert_owned_by_store(
        ManagedLedger::open_with_storage(storage.clone(), LedgerConfig::default()),
        "a store's topic copied out of the store",
    );
    assert_eq!(alone.mutations(), before, "a refused open writes nothing");
    let report = ackstore::check::verify(&storage).expect("verify");
    assert!(!report.is_sound(), "verify reports the refusal: {report}");
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.problem.contains("belongs to the store")),
        "{report}"
    );
    assert!(
        matches!(
            ackstore::check::inspect(&storage),
            Err(Error::OwnedByStore { .. })
        ),
        "inspect refuses it as the open does"
    );
    let store = Store::open_with_storage(Arc::new(disk.clone()), store_config(5)).expect("reopen");
    let topic = store.topic(TOPIC).expect("topic");
    assert_eq!(acked_states(&topic, &entries), states);
}

/// A topic opened alone, its acks flushed into the journal it hosts, put in the place of a
/// store's topic: the store's open of that topic refuses it (its acks are not in the store's
/// journal: opened, they would read as never made), `verify` of the store reports it, and the
/// directory still opens alone with its acks.
#[test]
fn a_directory_hosting_its_own_journal_in_a_stores_place_is_refused_by_the_store() {
    let disk = MemStorage::new();
    let (_, _) = store_with_acks(&disk);
    let own = MemStorage::new();
    let topic = ManagedLedger::open_with_storage(Arc::new(own.clone()), store_config(5).ledger)
        .expect("a topic alone");
    let entries = ack_three_cursors(&topic);
    let alone_states = acked_states(&topic, &entries);
    topic.close().expect("close");
    drop(topic);
    for name in disk.list().expect("list") {
        if name.starts_with("t1-") {
            disk.remove(&name).expect("remove");
        }
    }
    for name in own.list().expect("list") {
        copy_file(&own, &name, &disk, &format!("t1-{name}"));
    }
    assert_refused_as_another_host(&disk, "a topic alone in a store's place");
    let again = ManagedLedger::open_with_storage(Arc::new(own), store_config(5).ledger)
        .expect("the topic alone opens alone");
    assert_eq!(acked_states(&again, &entries), alone_states);
}

/// The topic record of the store's first topic on `disk`, and its version.
fn topic_record(disk: &MemStorage) -> (u64, TopicRecord) {
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let catalog = ackstore::internals::store::read_catalog(storage.clone())
        .expect("catalog")
        .expect("a store");
    let space = ackstore::internals::store::topic_storage(&storage, &catalog, 1).expect("topic");
    let (version, bytes) = FileMetaStore::new(space)
        .get("topic")
        .expect("read")
        .expect("a topic record");
    (version, TopicRecord::decode(&bytes).expect("decode"))
}

/// Rewrites the store's first topic's record as a store of an earlier release wrote it: format
/// version 1, naming no host.
fn forget_host(disk: &MemStorage) {
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let catalog = ackstore::internals::store::read_catalog(storage.clone())
        .expect("catalog")
        .expect("a store");
    let space = ackstore::internals::store::topic_storage(&storage, &catalog, 1).expect("topic");
    let (version, mut record) = topic_record(disk);
    assert_eq!(
        record.store_id, catalog.store_id,
        "a new topic names its store"
    );
    record.store_id = 0;
    FileMetaStore::new(space)
        .put("topic", Some(version), &record.encode())
        .expect("write the older record");
}

/// A store's topic whose record names no host (a store of an earlier release) is given its host
/// by the store's first open of it: a power cut at every storage operation of that open and of
/// the acks and flushes after it loses no flushed ack, invents none, and leaves a store that
/// opens, a `verify` that finds nothing, and a record that names the store or is the older one
/// whole (and then a copy of the topic opened alone is refused only by its place: see
/// `docs/format.md`, "Directories").
#[test]
fn a_power_cut_at_every_step_of_naming_an_older_topics_host_keeps_every_flushed_ack() {
    struct Run {
        made: BTreeMap<String, Acked>,
        flushed: BTreeMap<String, Acked>,
        entries: Vec<Position>,
    }
    let clean = cut_everywhere_after(
        Points::every_in_release(3),
        |disk| {
            let (entries, before) = store_with_acks(disk);
            forget_host(disk);
            assert_eq!(topic_record(disk).1.store_id, 0);
            (entries, before)
        },
        |disk, (entries, before): (Vec<Position>, BTreeMap<String, Acked>)| {
            let mut run = Run {
                made: before.clone(),
                flushed: before.clone(),
                entries: entries.clone(),
            };
            let _ = (|| -> ackstore::Result<()> {
                let store = Store::open_with_storage(Arc::new(disk.clone()), store_config(5))?;
                let topic = store.topic(TOPIC)?;
                // The truth holds every ack made, flushed or not.
                let a = topic.open_cursor("a", earliest())?;
                run.made
                    .get_mut("a")
                    .expect("a")
                    .whole
                    .insert(0, entries[0]);
                a.ack(entries[0])?;
                let c = topic.open_cursor("c/..", earliest())?;
                run.made.get_mut("c/..").expect("c").batch.push(3);
                c.ack_batch_index(entries[BATCH_ENTRY], 3, BATCH_SIZE)?;
                store.flush_all()?;
                run.flushed = run.made.clone();
                drop((a, c, topic));
                store.close()
            })();
            run
        },
        |disk, cut, run| {
            let image = disk.durable_image();
            let store = Store::open_with_storage(Arc::new(image.clone()), store_config(5))
                .unwrap_or_else(|e| panic!("{cut:?}: the store opens: {e}"));
            let topic = store
                .topic(TOPIC)
                .unwrap_or_else(|e| panic!("{cut:?}: the topic opens: {e}"));
            let states = acked_states(&topic, &run.entries);
            for (name, got) in &states {
                let (made, flushed) = (&run.made[name], &run.flushed[name]);
                // Never more than the acks made, never less than what a flush kept.
                assert!(
                    got.whole.iter().all(|p| made.whole.contains(p))
                        && got.batch.iter().all(|i| made.batch.contains(i)),
                    "{cut:?}: cursor {name:?} acked more than the truth: {got:?} > {made:?}"
                );
                assert!(
                    flushed.whole.iter().all(|p| got.whole.contains(p))
                        && flushed.batch.iter().all(|i| got.batch.contains(i)),
                    "{cut:?}: cursor {name:?} lost a flushed ack: {got:?} < {flushed:?}"
                );
            }
            drop(topic);
            store.close().expect("close");
            drop(store);
            let report = ackstore::check::verify(&(Arc::new(image.clone()) as Arc<dyn Storage>))
                .expect("verify");
            assert!(report.is_sound(), "{cut:?}: {report}");
            // The store's open named the host (the topic is opened above in every case).
            let catalog = ackstore::internals::store::read_catalog(Arc::new(image.clone()))
                .expect("catalog")
                .expect("a store");
            assert_eq!(topic_record(&image).1.store_id, catalog.store_id, "{cut:?}");
            assert_owned_by_store(
                ManagedLedger::open_with_storage(
                    Arc::new(topic_files_alone(&image)),
                    LedgerConfig::default(),
                ),
                &format!("{cut:?}: the topic copied out of the store"),
            );
        },
    );
    assert_eq!(
        clean.result.flushed["a"].whole.first(),
        Some(&clean.result.entries[0])
    );
}

/// The record a store's topic had before this release named its host, put back (its file
/// restored, the newer ones gone) after the store named it and wrote newer ledgers: the store's
/// open refuses it as an older record (it is not written again with a new block of ids above the
/// newer ledgers, which it would then delete as orphans), and `verify` reports the same.
#[test]
fn an_older_record_without_its_host_put_back_is_refused_not_named_again() {
    let disk = MemStorage::new();
    let (entries, _) = store_with_acks(&disk);
    forget_host(&disk);
    let record_files = |disk: &MemStorage| -> Vec<String> {
        disk.list()
            .expect("list")
            .into_iter()
            .filter(|n| n.starts_with("t1-topic.") && n.ends_with(".meta"))
            .collect()
    };
    let older = record_files(&disk);
    assert_eq!(older.len(), 1, "{older:?}");
    let older_bytes = disk.live_bytes(&older[0]).expect("bytes");
    let store = Store::open_with_storage(Arc::new(disk.clone()), store_config(5)).expect("open");
    let topic = store.topic(TOPIC).expect("topic");
    let newer = append_n(&topic, 12);
    assert!(newer.last().expect("entries").ledger_id > entries.last().expect("e").ledger_id);
    drop(topic);
    store.close().expect("close");
    drop(store);
    for name in record_files(&disk) {
        disk.remove(&name).expect("remove");
    }
    copy_bytes(older_bytes, &disk, &older[0]);
    let store = Store::open_with_storage(Arc::new(disk.clone()), store_config(5)).expect("open");
    match store.topic(TOPIC) {
        Err(Error::Corrupted { .. }) => {}
        Err(e) => panic!("refused with the wrong error: {e}"),
        Ok(_) => panic!("an older topic record opened, newer ledgers lost"),
    }
    drop(store);
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let report = ackstore::check::verify(&storage).expect("verify");
    assert!(!report.is_sound(), "verify reports what the open refuses");
}

/// What the store on `disk` answers for [`TOPIC`] whose record names another host: its open of
/// the topic refuses it as damage naming the record's host, and `verify` of the store reports
/// it (and only it); the other topics' checks are untouched.
fn assert_refused_as_another_host(disk: &MemStorage, what: &str) {
    let store = Store::open_with_storage(Arc::new(disk.clone()), store_config(5)).expect("open");
    match store.topic(TOPIC) {
        Err(e @ Error::Corrupted { .. }) => {
            assert!(
                e.to_string().contains("host"),
                "{what}: names the host: {e}"
            );
        }
        Err(e) => panic!("{what}: refused with the wrong error: {e}"),
        Ok(_) => panic!("{what}: opened as the store's own topic"),
    }
    drop(store);
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let report = ackstore::check::verify(&storage).expect("verify");
    let host: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.problem.contains("host"))
        .collect();
    assert_eq!(
        host.len(),
        1,
        "{what}: verify reports the host once: {report}"
    );
}

/// A topic of another store put in a store's place (its files copied over the store's topic of
/// the same id: two stores made the same way still have ids of their own), and a store's topic
/// record whose host field names another store (rewritten whole, its CRC recomputed): the
/// store refuses the topic and `verify` reports it; with the store's own files back, both
/// agree the store is sound and every flushed ack is there.
#[test]
fn a_topic_record_naming_another_store_is_refused_by_the_store_and_reported_by_verify() {
    let ours = MemStorage::new();
    let (entries, states) = store_with_acks(&ours);
    let theirs = MemStorage::new();
    let _ = store_with_acks(&theirs);
    let (_, our_record) = topic_record(&ours);
    let (_, their_record) = topic_record(&theirs);
    assert_ne!(
        our_record.store_id, their_record.store_id,
        "two stores made the same way have ids of their own"
    );
    let kept: Vec<(String, Vec<u8>)> = ours
        .list()
        .expect("list")
        .into_iter()
        .filter(|n| n.starts_with("t1-"))
        .map(|n| {
            let bytes = ours.live_bytes(&n).expect("bytes");
            (n, bytes)
        })
        .collect();
    let put_back = |disk: &MemStorage| {
        for name in disk.list().expect("list") {
            if name.starts_with("t1-") {
                disk.remove(&name).expect("remove");
            }
        }
        for (name, bytes) in &kept {
            copy_bytes(bytes.clone(), disk, name);
        }
    };
    // Another store's topic in our topic's place.
    for name in ours.list().expect("list") {
        if name.starts_with("t1-") {
            ours.remove(&name).expect("remove");
        }
    }
    for name in theirs.list().expect("list") {
        if name.starts_with("t1-") {
            copy_file(&theirs, &name, &ours, &name);
        }
    }
    assert_refused_as_another_host(&ours, "another store's topic");
    // Our topic, its host field naming another store under a valid CRC.
    put_back(&ours);
    let storage: Arc<dyn Storage> = Arc::new(ours.clone());
    let catalog = ackstore::internals::store::read_catalog(storage.clone())
        .expect("catalog")
        .expect("a store");
    let space = ackstore::internals::store::topic_storage(&storage, &catalog, 1).expect("topic");
    let (version, mut record) = topic_record(&ours);
    record.store_id ^= 1 << 17;
    FileMetaStore::new(space)
        .put("topic", Some(version), &record.encode())
        .expect("rewrite the host field");
    assert_refused_as_another_host(&ours, "a host field naming another store");
    put_back(&ours);
    let report = ackstore::check::verify(&storage).expect("verify");
    assert!(report.is_sound(), "our own files back: {report}");
    let store = Store::open_with_storage(Arc::new(ours.clone()), store_config(5)).expect("open");
    let topic = store.topic(TOPIC).expect("topic");
    assert_eq!(acked_states(&topic, &entries), states);
}

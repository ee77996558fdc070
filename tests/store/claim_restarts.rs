//! A store topic's claim by link (`MetaStore::claim`) across restarts without writes, the repair
//! a topic's open keeps in memory, and the one-instance-per-topic wait (`TopicLocks`): every
//! synced entry and flushed ack stays, the record's names stay bounded in the live and durable
//! images, and handles of a closed instance never make its next open wait.

use crate::support;

use support::topic::store_config;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ackstore::internals::format::meta::encode_stored;
use ackstore::{CursorOptions, Error, MemStorage, NonDurableOptions, Position, Storage, Store};

/// The topic record's versioned file names (`t1-topic.NNN.meta` on the flat in-memory disk).
fn record_names(disk: &MemStorage) -> Vec<String> {
    disk.list()
        .expect("list")
        .into_iter()
        .filter(|n| n.starts_with("t1-topic.") && n.ends_with(".meta"))
        .collect()
}

/// A store holding topic `t` (id 1) with 4 synced entries, cursor `sub` that acked the first
/// and flushed; the owner's process then died (nothing closed): the record lists the open
/// ledger with no count.
fn crashed_store() -> (MemStorage, Vec<Position>) {
    let disk = MemStorage::new();
    let store =
        Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000)).expect("open");
    let t = store.topic("t").expect("topic");
    let ps: Vec<Position> = (0..4).map(|_| t.append(b"e").expect("append")).collect();
    t.sync().expect("sync");
    let c = t
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    c.ack(ps[0]).expect("ack");
    c.flush().expect("flush");
    std::mem::forget(c);
    std::mem::forget(t);
    std::mem::forget(store);
    // A process crash: everything it wrote survives it, its lock goes with it.
    disk.break_lock();
    (disk, ps)
}

/// Restarts without writes, alternating process crashes (the same disk) and power cuts (the
/// durable image), with acks flushed in between: every synced entry stays, every flushed ack stays,
/// nothing is invented, and the record's names stay bounded in the live image (the durable
/// image: see the next test).
#[test]
fn restarts_without_writes_alternating_crashes_and_power_cuts_keep_everything() {
    let (mut disk, ps) = crashed_store();
    let mut flushed: BTreeSet<Position> = [ps[0]].into();
    for generation in 0..14usize {
        let store = Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000))
            .unwrap_or_else(|e| panic!("generation {generation}: open: {e}"));
        let t = store
            .topic("t")
            .unwrap_or_else(|e| panic!("generation {generation}: topic: {e}"));
        for p in &ps {
            t.read(*p)
                .unwrap_or_else(|e| panic!("generation {generation}: synced {p} lost: {e}"));
        }
        let c = t
            .open_cursor("sub", CursorOptions::default())
            .unwrap_or_else(|e| panic!("generation {generation}: cursor: {e}"));
        for p in &ps {
            let acked = c.is_acked(*p).expect("is_acked");
            assert_eq!(
                acked,
                flushed.contains(p),
                "generation {generation}: {p} acked {acked}, flushed {flushed:?}"
            );
        }
        if generation % 4 == 1 && flushed.len() < ps.len() {
            let p = ps[flushed.len()];
            c.ack(p).expect("ack");
            c.flush().expect("flush");
            flushed.insert(p);
        }
        let live = record_names(&disk);
        assert!(
            live.len() <= 5,
            "generation {generation}: the topic record has {} names: {live:?}",
            live.len()
        );
        std::mem::forget(c);
        std::mem::forget(t);
        std::mem::forget(store);
        disk = if generation % 2 == 0 {
            // A process crash: the same disk, the lock gone with the process.
            disk.break_lock();
            disk
        } else {
            disk.durable_image()
        };
    }
}

/// A store topic whose record is the legacy `topic.meta` of an earlier release (with an
/// identity): the claim falls back to a real write, and restarts then claim by link.
#[test]
fn a_legacy_topic_record_with_an_identity_opens_and_restarts() {
    let (disk, ps) = crashed_store();
    // Replace the versioned record by a legacy one holding the same bytes at its version.
    let names = record_names(&disk);
    let current = names.last().expect("a record").clone();
    let version: u64 = current
        .trim_start_matches("t1-topic.")
        .trim_end_matches(".meta")
        .parse()
        .expect("version");
    let store_meta = ackstore::internals::meta::FileMetaStore::new(Arc::new(disk.clone()));
    let _ = store_meta;
    // Read the payload through the public metadata store on the topic's prefix.
    let bytes = disk.live_bytes(&current).expect("bytes");
    let (_, payload) = ackstore::internals::format::meta::decode_stored(&bytes).expect("decode");
    for n in &names {
        disk.remove(n).expect("remove");
    }
    let legacy = disk.create("t1-topic.meta").expect("create");
    legacy
        .write_all_at(&encode_stored(version, &payload), 0)
        .expect("write");
    legacy.sync_data().expect("sync");
    disk.sync_dir().expect("sync dir");
    let mut disk = disk;
    for generation in 0..8 {
        let store = Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000))
            .unwrap_or_else(|e| panic!("generation {generation}: open: {e}"));
        let t = store
            .topic("t")
            .unwrap_or_else(|e| panic!("generation {generation}: topic: {e}"));
        for p in &ps {
            t.read(*p)
                .unwrap_or_else(|e| panic!("generation {generation}: {p}: {e}"));
        }
        let c = t
            .open_cursor("sub", CursorOptions::default())
            .expect("cursor");
        assert!(c.is_acked(ps[0]).expect("is_acked"));
        drop(c);
        drop(t);
        store.close().expect("close");
        drop(store);
        disk = disk.durable_image();
        assert!(record_names(&disk).len() <= 5, "{:?}", record_names(&disk));
    }
}

/// One instance per topic: a thread that still holds a durable cursor, a reader and an
/// `Entry` of the closed instance opens the topic again without waiting for the 30 s bound.
#[test]
fn handles_of_a_closed_instance_do_not_make_the_next_open_wait() {
    let disk = MemStorage::new();
    let store =
        Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000)).expect("open");
    let t = store.topic("t").expect("topic");
    let p = t.append(b"e").expect("append");
    t.sync().expect("sync");
    let c = t
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    let r = t
        .open_non_durable_cursor(
            ackstore::InitialPosition::Earliest,
            NonDurableOptions {
                inclusive: false,
                name: "r".into(),
            },
        )
        .expect("reader");
    let entry = c.read_entries(1).expect("read");
    t.close().expect("close");
    let start = Instant::now();
    let again = store.topic("t").expect("reopen");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "the reopen waited {:?}",
        start.elapsed()
    );
    assert_eq!(again.read(p).expect("read").payload, b"e");
    drop((c, r, entry));
    store.close().expect("close");
}

/// A thread blocked in `read_entries_or_wait` on a cursor of an instance that another thread
/// closes and opens again: the reopen does not wait, and the blocked read ends.
#[test]
fn a_blocked_read_of_a_closing_instance_does_not_hold_the_topic() {
    let disk = MemStorage::new();
    let store =
        Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000)).expect("open");
    let t = store.topic("t").expect("topic");
    let c = t
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    let reader = std::thread::spawn(move || c.read_entries_or_wait(1, Duration::from_secs(60)));
    std::thread::sleep(Duration::from_millis(100));
    t.close().expect("close");
    let start = Instant::now();
    let again = store.topic("t").expect("reopen");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    let read = reader.join().expect("join");
    assert!(matches!(read, Err(Error::Closed)), "{read:?}");
    drop(again);
    store.close().expect("close");
}

/// Restarts without writes, each ended by a power cut: the claim's cleanup of older names
/// removes those below the version it claims without syncing, so a power cut never brings back
/// more names than there were, and the durable image holds a bounded number of them. (Any
/// directory sync after a claim makes its link durable; here the first restarts flush a
/// cursor, whose journal tick syncs the directory.)
#[test]
fn restarts_each_ended_by_a_power_cut_keep_the_record_names_bounded() {
    let (mut disk, _ps) = crashed_store();
    let mut counts = Vec::new();
    for generation in 0..40usize {
        let store = Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000))
            .unwrap_or_else(|e| panic!("generation {generation}: open: {e}"));
        let t = store.topic("t").expect("topic");
        if generation < 4 {
            // Something that syncs the directory after the claim: a cursor flush.
            let c = t
                .open_cursor("sub", CursorOptions::default())
                .expect("cursor");
            c.ack(Position::new(1, 1 + generation as u64 % 3))
                .expect("ack");
            c.flush().expect("flush");
            std::mem::forget(c);
        }
        std::mem::forget(t);
        std::mem::forget(store);
        disk = disk.durable_image();
        counts.push(record_names(&disk).len());
    }
    assert!(
        counts.iter().all(|&n| n <= 5),
        "names of the topic record in the durable image after each power-cut restart: {counts:?}"
    );
}

/// The same for the store's catalog, claimed by a link and then written by `put` (the seal) on
/// every open after a crash (its older versions are removed after the directory sync, and
/// nothing syncs the removal): restarts each ended by a power cut.
#[test]
fn store_restarts_each_ended_by_a_power_cut_keep_the_catalog_names_bounded() {
    let (mut disk, _ps) = crashed_store();
    let mut counts = Vec::new();
    for generation in 0..20usize {
        let store = Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000))
            .unwrap_or_else(|e| panic!("generation {generation}: open: {e}"));
        std::mem::forget(store);
        disk = disk.durable_image();
        counts.push(
            disk.list()
                .expect("list")
                .iter()
                .filter(|n| n.starts_with("store.") && n.ends_with(".meta"))
                .count(),
        );
    }
    assert!(
        counts.iter().all(|&n| n <= 5),
        "names of the store catalog in the durable image after each power-cut restart: {counts:?}"
    );
}

/// Clean restarts that write nothing: each open claims the catalog by a link and records no
/// seal (the clean close's length is the newest segment's), each close records nothing new.
/// Alternating process restarts (the same disk) and power cuts (the durable image), the
/// catalog keeps a bounded number of names in both images, every flushed ack stays and none is
/// invented, and `verify` finds no damage.
#[test]
fn clean_restarts_without_writes_keep_the_catalog_whole_and_its_names_bounded() {
    let (mut disk, ps) = crashed_store();
    Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000))
        .expect("open")
        .close()
        .expect("a clean close");
    let catalog_names = |disk: &MemStorage| {
        disk.list()
            .expect("list")
            .into_iter()
            .filter(|n| n.starts_with("store.") && n.ends_with(".meta"))
            .count()
    };
    for generation in 0..24usize {
        let store = Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000))
            .unwrap_or_else(|e| panic!("generation {generation}: open: {e}"));
        let t = store.topic("t").expect("topic");
        let c = t
            .open_cursor("sub", CursorOptions::default())
            .expect("cursor");
        let acked: Vec<bool> = ps
            .iter()
            .map(|p| c.is_acked(*p).expect("is_acked"))
            .collect();
        assert_eq!(
            acked,
            [true, false, false, false],
            "generation {generation}: the flushed ack, and only it"
        );
        drop(c);
        drop(t);
        store
            .close()
            .unwrap_or_else(|e| panic!("generation {generation}: close: {e}"));
        for (image, names) in [
            ("live", catalog_names(&disk)),
            ("durable", catalog_names(&disk.durable_image())),
        ] {
            assert!(
                names <= 5,
                "generation {generation}: the catalog has {names} names in the {image} image"
            );
        }
        if generation % 2 == 1 {
            disk = disk.durable_image();
        }
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        let report = ackstore::check::verify(&storage).expect("verify runs");
        assert!(report.is_sound(), "generation {generation}: {report}");
    }
}

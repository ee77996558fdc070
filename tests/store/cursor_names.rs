//! A topic of many cursors (more than its cursor table is scanned for) finds each cursor by
//! name: reopened after a restart in any order, closed and reopened while cursors are created
//! and deleted around it, every cursor answers with its own acks, checked against a model.
//! Under writes that fail (power off for a moment, a full file system) and power cuts, no name
//! answers with another cursor's acks, flushed acks are kept, and the topic reopens: a deletion
//! cut short leaves files of a record without one (a tombstone and the versions it had not
//! removed, or a failed write's temporary file), which the open must not take for a cursor the
//! table lost.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::{CursorOptions, MemStorage, Position, Store};
use support::workload::Rng;

/// More cursors than a table the lookup scans (32).
const CURSORS: usize = 80;
const ENTRIES: u64 = 40;
const TOPIC: &str = "persistent://tenant/ns/many-cursors";

fn open(disk: &MemStorage) -> Store {
    Store::open_with_storage(
        Arc::new(disk.clone()),
        support::config::store(1_000, 1 << 20),
    )
    .expect("open")
}

/// Each cursor's acked entries (by index), by name.
type Model = BTreeMap<String, BTreeSet<u64>>;

/// Opens cursor `name` and checks its acks against `acked`, entry by entry.
fn check_one(
    topic: &ackstore::ManagedLedger,
    positions: &[Position],
    name: &str,
    acked: &BTreeSet<u64>,
) {
    let cursor = topic
        .open_cursor(name, CursorOptions::default())
        .expect("cursor");
    for (i, &p) in positions.iter().enumerate() {
        assert_eq!(
            cursor.is_acked(p).expect("is_acked"),
            acked.contains(&(i as u64)),
            "cursor {name}, entry {i}"
        );
    }
}

/// Opens every cursor of `model` by name in a random order and checks each one's acks.
fn check_all(
    topic: &ackstore::ManagedLedger,
    positions: &[Position],
    model: &Model,
    rng: &mut Rng,
) {
    let mut names: Vec<&String> = model.keys().collect();
    for i in (1..names.len()).rev() {
        names.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for name in names {
        check_one(topic, positions, name, &model[name]);
    }
}

/// Acks three entries chosen at random on cursor `name` (creating it) and records them.
fn ack_some(
    topic: &ackstore::ManagedLedger,
    positions: &[Position],
    model: &mut Model,
    name: &str,
    rng: &mut Rng,
) {
    let cursor = topic
        .open_cursor(name, CursorOptions::default())
        .expect("cursor");
    let acked = model.entry(name.to_owned()).or_default();
    for _ in 0..3 {
        // Above the first entry: a cursor's mark-delete stays at its start.
        let i = 1 + rng.below(ENTRIES - 1);
        cursor.ack(positions[i as usize]).expect("ack");
        acked.insert(i);
    }
    cursor.flush().expect("flush");
}

#[test]
fn every_cursor_of_a_large_table_answers_for_itself_across_creations_deletions_and_restarts() {
    let disk = MemStorage::new();
    let mut rng = Rng::new(0x6e61_6d65);
    let mut model = Model::new();
    let store = open(&disk);
    let topic = store.topic(TOPIC).expect("topic");
    let positions: Vec<Position> = (0..ENTRIES)
        .map(|i| topic.append(format!("{i}").as_bytes()).expect("append"))
        .collect();
    topic.sync().expect("sync");
    for c in 0..CURSORS {
        let name = format!("sub/{c}");
        ack_some(&topic, &positions, &mut model, &name, &mut rng);
    }
    store.close().expect("close");

    // A restart: every cursor reopened by name, in a random order (the lookups that build
    // the index), each with its own acks.
    let store = open(&disk);
    let topic = store.topic(TOPIC).expect("topic");
    check_all(&topic, &positions, &model, &mut rng);

    // Deletions and creations change the table between lookups: a deleted name comes back as
    // a new cursor with nothing acked, closed cursors reopen among the changes.
    for round in 0..6 {
        let gone = format!("sub/{}", rng.below(CURSORS as u64));
        if model.remove(&gone).is_some() {
            topic.delete_cursor(&gone).expect("delete");
        }
        let reopened = format!("sub/{}", rng.below(CURSORS as u64));
        if let Some(acked) = model.get(&reopened) {
            topic
                .open_cursor(&reopened, CursorOptions::default())
                .expect("cursor")
                .close()
                .expect("close cursor");
            check_one(&topic, &positions, &reopened, acked);
        }
        let created = format!("new/{round}");
        for name in [&gone, &created] {
            ack_some(&topic, &positions, &mut model, name, &mut rng);
        }
    }
    store.close().expect("close");

    let store = open(&disk);
    let topic = store.topic(TOPIC).expect("topic");
    check_all(&topic, &positions, &model, &mut rng);
    store.close().expect("close");
}

/// What a cursor name may show: the acks its flushes made durable (`must`) and every ack any
/// incarnation of that name made, flushed or not (`may`). Each ack is of an entry no other
/// ack ever takes, so a cursor answering with another cursor's state shows an entry outside
/// `may`.
#[derive(Default)]
struct Allowed {
    must: BTreeSet<u64>,
    may: BTreeSet<u64>,
}

/// Opens cursor `name` and checks it against `allowed`: nothing outside `may`, all of `must`.
fn check_allowed(
    topic: &ackstore::ManagedLedger,
    positions: &[Position],
    used: u64,
    name: &str,
    allowed: Option<&Allowed>,
) -> ackstore::Result<()> {
    let cursor = topic.open_cursor(name, CursorOptions::default())?;
    let none = Allowed::default();
    let allowed = allowed.unwrap_or(&none);
    for i in 1..used {
        let acked = cursor.is_acked(positions[i as usize])?;
        assert!(
            !acked || allowed.may.contains(&i),
            "cursor {name} shows entry {i}, which no incarnation of it acked"
        );
        assert!(
            acked || !allowed.must.contains(&i),
            "cursor {name} lost its flushed ack of entry {i}"
        );
    }
    Ok(())
}

#[test]
fn a_large_table_never_gives_a_name_another_cursors_id_under_failing_writes_and_power_cuts() {
    const NAMES: u64 = 48;
    const OPS: u64 = 700;
    let mut rng = Rng::new(0x6661_696c);
    let mut disk = MemStorage::new();
    let mut store = open(&disk);
    let mut topic = store.topic(TOPIC).expect("topic");
    // One entry per ack of the run, each acked once only, and entry 0 never (the start).
    let positions: Vec<Position> = (0..=OPS)
        .map(|i| topic.append(format!("{i}").as_bytes()).expect("append"))
        .collect();
    topic.sync().expect("sync");
    let mut model: BTreeMap<String, Allowed> = BTreeMap::new();
    let mut used = 1u64;
    let mut failed = 0u32;
    for op in 0..OPS {
        let name = format!("sub/{:03}", rng.below(NAMES));
        // A write that fails: the power goes for a moment, or the file system is full.
        let fault = rng.below(5);
        match fault {
            0 => disk.fail_after(Some(rng.below(8))),
            1 => disk.enospc_after(Some(rng.below(4))),
            _ => {}
        }
        match rng.below(4) {
            0 => {
                // A deletion that succeeds takes every ack of the name; one that fails may
                // have taken them or not.
                match topic.delete_cursor(&name) {
                    Ok(()) => {
                        model.remove(&name);
                    }
                    Err(_) => {
                        failed += 1;
                        if let Some(allowed) = model.get_mut(&name) {
                            allowed.must.clear();
                        }
                    }
                }
            }
            1 => {
                if check_allowed(&topic, &positions, used, &name, model.get(&name)).is_err() {
                    failed += 1;
                }
            }
            _ => {
                let entry = used;
                used += 1;
                let allowed = model.entry(name.clone()).or_default();
                allowed.may.insert(entry);
                let flushed = topic
                    .open_cursor(&name, CursorOptions::default())
                    .and_then(|c| {
                        c.ack(positions[entry as usize])?;
                        c.flush()
                    });
                match flushed {
                    Ok(()) => {
                        allowed.must.insert(entry);
                    }
                    Err(_) => failed += 1,
                }
            }
        }
        disk.fail_after(None);
        disk.enospc_after(None);
        if op % 50 == 49 {
            // A restart, half of them after a power cut: what was flushed is kept, nothing
            // else is promised.
            let cut = rng.chance(50);
            drop(topic);
            if cut {
                drop(store);
                disk = disk.durable_image();
            } else {
                let _ = store.close();
                drop(store);
            }
            store = open(&disk);
            topic = store.topic(TOPIC).expect("topic");
            let names: Vec<String> = (0..NAMES).map(|n| format!("sub/{n:03}")).collect();
            for name in &names {
                check_allowed(&topic, &positions, used, name, model.get(name)).expect("check");
            }
        }
    }
    assert!(failed > 0, "no write failed: the run tried nothing");
    drop(topic);
    store.close().expect("close");
}

/// A deletion the power stops at each of its storage operations, tried again with the power
/// back, then a power cut: verify finds it sound and the topic reopens (the files a deletion cut short left of the
/// record are no cursor the table lost), and the name answers with nothing acked.
#[test]
fn a_deletion_cut_short_then_done_leaves_a_topic_that_reopens() {
    for stop in 0..12 {
        let disk = MemStorage::new();
        let store = open(&disk);
        let topic = store.topic(TOPIC).expect("topic");
        let positions: Vec<Position> = (0..4)
            .map(|i| topic.append(format!("{i}").as_bytes()).expect("append"))
            .collect();
        topic.sync().expect("sync");
        let cursor = topic
            .open_cursor("gone", CursorOptions::default())
            .expect("cursor");
        cursor.ack(positions[2]).expect("ack");
        cursor.flush().expect("flush");
        drop(cursor);
        disk.fail_after(Some(stop));
        let first = topic.delete_cursor("gone");
        disk.fail_after(None);
        if first.is_err() {
            match topic.delete_cursor("gone") {
                Ok(()) | Err(ackstore::Error::NoSuchCursor { .. }) => {}
                Err(e) => panic!("stop {stop}: the deletion again: {e}"),
            }
        }
        drop(topic);
        drop(store);
        let image = disk.durable_image();
        let storage: Arc<dyn ackstore::Storage> = Arc::new(image.clone());
        let report = ackstore::check::verify(&storage).expect("verify");
        assert!(report.is_sound(), "stop {stop}: verify: {report}");
        let store = open(&image);
        let topic = store
            .topic(TOPIC)
            .unwrap_or_else(|e| panic!("stop {stop}: the topic after the cut: {e}"));
        assert!(
            !topic.cursor_names().iter().any(|n| n == "gone"),
            "stop {stop}: a deletion that returned Ok is listed again"
        );
        check_one(&topic, &positions, "gone", &BTreeSet::new());
        store.close().expect("close");
    }
}

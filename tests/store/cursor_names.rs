//! A topic of many cursors (more than its cursor table is scanned for) finds each cursor by
//! name: reopened after a restart in any order, closed and reopened while cursors are created
//! and deleted around it, every cursor answers with its own acks, checked against a model.

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

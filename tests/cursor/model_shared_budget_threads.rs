//! Cursors of one topic sharing a small ack budget, each acking on its own thread against a
//! model of its own (a mark-delete index and a set of acknowledged entries): acks of the entry
//! right after mark-delete (which move it without the ack set), acks scattered over many
//! ledgers (so each set holds more partitions than its slab scans, and other members release
//! them while it acks) and cumulative acks that drop most of them again. Every answer equals the
//! model's, every cursor ends with exactly its model's acks, before and after a reopen, and
//! once the threads are done the shared total is within the limit plus a partition a cursor.

use crate::support;

use std::sync::Arc;
use std::thread;

use ackstore::internals::ackset::MAX_PARTITION_BYTES;
use ackstore::{
    AckBudget, Cursor, CursorConfig, CursorOptions, LedgerConfig, ManagedLedger, MemStorage,
    Position,
};
use support::topic::append_n;
use support::workload::{EntryModel as Model, Rng};

const LIMIT: usize = 6 * 1024;
const CURSORS: usize = 4;
const ENTRIES: u64 = 6000;

fn check(cursor: &Cursor, model: &Model, ps: &[Position], what: &str) {
    assert_eq!(
        cursor.mark_delete_position().unwrap(),
        model.mark.map(|m| ps[m]),
        "{what}"
    );
    let acked: Vec<Position> = cursor
        .acked_ranges()
        .unwrap()
        .into_iter()
        .flat_map(|(a, b)| (a.entry_id..=b.entry_id).map(move |e| Position::new(a.ledger_id, e)))
        .collect();
    let want: Vec<Position> = model.acked.iter().map(|&i| ps[i]).collect();
    assert_eq!(acked, want, "{what}");
}

/// Acks of cursor `k` on its own thread; returns its model.
fn acker(k: usize, cursor: &Cursor, ps: &[Position]) -> Model {
    let mut rng = Rng::new(0x5eed + k as u64);
    let mut model = Model::default();
    for step in 0..4000 {
        let what = format!("cursor {k} step {step}");
        let roll = rng.below(100);
        if roll < 45 {
            let i = (model.floor() + rng.index(2)).min(ps.len() - 1);
            assert_eq!(cursor.ack(ps[i]).unwrap(), model.ack(i), "{what}: ack #{i}");
        } else if roll < 97 {
            // Scattered ahead of mark-delete, over many ledgers.
            let i = (model.floor() + rng.index(3000)).min(ps.len() - 1);
            assert_eq!(cursor.ack(ps[i]).unwrap(), model.ack(i), "{what}: ack #{i}");
        } else {
            let i = (model.floor() + rng.index(400)).min(ps.len() - 1);
            assert_eq!(
                cursor.ack_cumulative(ps[i]).unwrap(),
                model.ack_cumulative(i),
                "{what}: cumulative ack #{i}"
            );
        }
        if step % 500 == 499 {
            check(cursor, &model, ps, &what);
        }
    }
    model
}

#[test]
fn cursors_acking_on_threads_in_a_small_shared_budget_match_their_models() {
    let budget = AckBudget::new(LIMIT);
    let config = LedgerConfig {
        max_entries_per_ledger: 40,
        cursor: CursorConfig {
            lru_capacity_bytes: 1 << 20,
            ack_memory: Some(budget.clone()),
            ..CursorConfig::default()
        },
        ..LedgerConfig::default()
    };
    let disk = MemStorage::new();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), config.clone()).unwrap();
    let ps = append_n(&topic, ENTRIES);
    let names: Vec<String> = (0..CURSORS).map(|k| format!("c{k}")).collect();
    let cursors: Vec<Cursor> = names
        .iter()
        .map(|n| topic.open_cursor(n, CursorOptions::default()).unwrap())
        .collect();
    let mut models: Vec<Model> = thread::scope(|s| {
        let handles: Vec<_> = cursors
            .iter()
            .enumerate()
            .map(|(k, cursor)| {
                let ps = &ps;
                s.spawn(move || acker(k, cursor, ps))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // One more ack each, with no other thread holding a cursor, settles the shared total.
    for (cursor, model) in cursors.iter().zip(&mut models) {
        let i = ps.len() - 1;
        assert_eq!(cursor.ack(ps[i]).unwrap(), model.ack(i));
    }
    let s = budget.stats();
    assert!(
        s.resident_bytes <= LIMIT + CURSORS * MAX_PARTITION_BYTES,
        "{s:?}"
    );
    for (k, (cursor, model)) in cursors.iter().zip(&models).enumerate() {
        check(cursor, model, &ps, &format!("cursor {k} at the end"));
        cursor.close().unwrap();
    }
    topic.close().unwrap();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.durable_image()), config).unwrap();
    for (k, (name, model)) in names.iter().zip(&models).enumerate() {
        let cursor = topic.open_cursor(name, CursorOptions::default()).unwrap();
        check(&cursor, model, &ps, &format!("cursor {k} reopened"));
    }
}

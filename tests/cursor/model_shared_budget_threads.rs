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

/// One cursor's acks, a step at a time: its random choices and its model.
struct Acker {
    k: usize,
    rng: Rng,
    model: Model,
}

impl Acker {
    fn new(k: usize) -> Self {
        Self {
            k,
            rng: Rng::new(0x5eed + k as u64),
            model: Model::default(),
        }
    }

    /// Step `step` of cursor `k`: an ack near mark-delete, a scattered one or a cumulative one,
    /// each answer checked against the model, and the whole cursor every 500 steps.
    fn step(&mut self, cursor: &Cursor, ps: &[Position], step: usize) {
        let (k, rng, model) = (self.k, &mut self.rng, &mut self.model);
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
            check(cursor, model, ps, &what);
        }
    }
}

/// Acks of cursor `k` on its own thread; returns its model.
fn acker(k: usize, cursor: &Cursor, ps: &[Position]) -> Model {
    let mut acker = Acker::new(k);
    for step in 0..4000 {
        acker.step(cursor, ps, step);
    }
    acker.model
}

#[test]
fn cursors_acking_on_threads_in_a_small_shared_budget_match_their_models() {
    let budget = AckBudget::new(LIMIT);
    let (disk, config, topic, ps) = store(&budget);
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

/// Threads of each store, and cursors of each store each thread acks in turn.
const THREADS: usize = 3;
const PER_THREAD: usize = 3;

/// A topic of its own storage whose cursors share `budget`, with `ENTRIES` entries.
fn store(budget: &AckBudget) -> (MemStorage, LedgerConfig, ManagedLedger, Vec<Position>) {
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
    (disk, config, topic, ps)
}

/// Thread `t`'s acks: each step, one ack of each of its cursors of each store in turn (so it
/// turns from member to member, and from budget to budget, at every ack); returns the models,
/// by store then cursor.
fn turner(t: usize, stores: [(&[Cursor], &[Position]); 2]) -> [Vec<Acker>; 2] {
    let mut ackers = [0, 1].map(|s| {
        (0..PER_THREAD)
            .map(|j| Acker::new(100 * s + PER_THREAD * t + j))
            .collect::<Vec<_>>()
    });
    for step in 0..1500 {
        for j in 0..PER_THREAD {
            for (s, (cursors, ps)) in stores.iter().enumerate() {
                ackers[s][j].step(&cursors[PER_THREAD * t + j], ps, step);
            }
        }
    }
    ackers
}

/// Many cursors of two stores (a budget each) acked by the same threads, each thread turning
/// from cursor to cursor and store to store at every ack: every cursor matches its model, before
/// and after a reopen, and once the threads are done each budget's total is within its limit
/// plus a partition a cursor.
#[test]
fn threads_turning_between_cursors_of_two_stores_keep_each_budget_and_every_ack() {
    let budgets = [AckBudget::new(LIMIT), AckBudget::new(LIMIT)];
    let stores = budgets.clone().map(|b| store(&b));
    let cursors: Vec<Vec<Cursor>> = stores
        .iter()
        .map(|(_, _, topic, _)| {
            (0..THREADS * PER_THREAD)
                .map(|k| topic.open_cursor(&format!("c{k}"), CursorOptions::default()))
                .collect::<ackstore::Result<_>>()
                .unwrap()
        })
        .collect();
    let per_thread: Vec<[Vec<Acker>; 2]> = thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let pair = [0, 1].map(|i| (&cursors[i][..], &stores[i].3[..]));
                s.spawn(move || turner(t, pair))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, (disk, config, topic, ps)) in stores.into_iter().enumerate() {
        let mut models: Vec<Model> = per_thread
            .iter()
            .flat_map(|both| both[i].iter().map(|a| a.model.clone()))
            .collect();
        settle_and_check(&budgets[i], &cursors[i], &mut models, &ps);
        for cursor in &cursors[i] {
            cursor.close().unwrap();
        }
        topic.close().unwrap();
        let topic =
            ManagedLedger::open_with_storage(Arc::new(disk.durable_image()), config).unwrap();
        for (k, model) in models.iter().enumerate() {
            let cursor = topic
                .open_cursor(&format!("c{k}"), CursorOptions::default())
                .unwrap();
            check(
                &cursor,
                model,
                &ps,
                &format!("store {i} cursor {k} reopened"),
            );
        }
    }
}

/// The budget's total once no operation runs is what its cursors hold, one share each; one
/// more ack each, with no other thread holding a cursor, settles it within `budget`'s limit
/// plus a partition a cursor; every cursor holds its model's acks.
fn settle_and_check(budget: &AckBudget, cursors: &[Cursor], models: &mut [Model], ps: &[Position]) {
    let shares: usize = cursors
        .iter()
        .map(|c| c.stats().unwrap().ackset.resident_bytes)
        .sum();
    assert_eq!(budget.stats().resident_bytes, shares);
    for (cursor, model) in cursors.iter().zip(models.iter_mut()) {
        let i = ps.len() - 1;
        assert_eq!(cursor.ack(ps[i]).unwrap(), model.ack(i));
    }
    let s = budget.stats();
    assert!(
        s.resident_bytes <= LIMIT + cursors.len() * MAX_PARTITION_BYTES,
        "{s:?}"
    );
    assert!(s.released_bytes > 0, "the budget was never short: {s:?}");
    for (k, (cursor, model)) in cursors.iter().zip(models.iter()).enumerate() {
        check(cursor, model, ps, &format!("cursor {k} at the end"));
    }
}

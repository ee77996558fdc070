//! One ack memory budget for a store (`StoreConfig::ack_memory_bytes`): many cursors on several
//! topics share it, the store's resident ack state stays within it plus one partition after
//! every step, a cursor gone idle gives its memory up to another's growth, and every cursor's
//! acks survive eviction, release and a reopen of the store, as a model says.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::internals::ackset::MAX_PARTITION_BYTES;
use ackstore::{AppendMeta, Cursor, InitialPosition, ManagedLedger, MemStorage, Position, Store};
use support::topic::at;
use support::workload::{Rng, seed_from_env};

const TOPICS: usize = 3;
const CURSORS: usize = 4;
const ENTRIES: u64 = 96;
/// Entries per data ledger: each ledger is its own ack partition.
const PER_LEDGER: u64 = 4;
const BATCH: u32 = 5;

fn topic_name(t: usize) -> String {
    format!("persistent://tenant/ns/topic-{t}")
}

fn cursor_name(c: usize) -> String {
    format!("sub-{c}")
}

/// Per cursor: entries acknowledged whole, and messages acknowledged of the others.
#[derive(Debug, Clone, Default)]
struct Model {
    entries: BTreeSet<Position>,
    messages: BTreeSet<(Position, u32)>,
}

struct Open {
    _topics: Vec<Arc<ManagedLedger>>,
    cursors: Vec<Cursor>,
    positions: Vec<Vec<Position>>,
}

fn open_all(store: &Store, append: bool) -> Open {
    let mut topics = Vec::new();
    let mut cursors = Vec::new();
    let mut positions = Vec::new();
    for t in 0..TOPICS {
        let topic = store.topic(&topic_name(t)).unwrap();
        if append {
            for i in 0..ENTRIES {
                let meta = AppendMeta {
                    num_messages: BATCH,
                    timestamp: 1000 + i,
                };
                topic.append_with(b"m", meta).unwrap();
            }
            topic.sync().unwrap();
        }
        let first = topic.first_position().unwrap();
        let mut ps = vec![first];
        while ps.len() < ENTRIES as usize {
            let last = *ps.last().unwrap();
            let next = if last.entry_id + 1 < PER_LEDGER {
                Position::new(last.ledger_id, last.entry_id + 1)
            } else {
                Position::new(last.ledger_id + 1, 0)
            };
            ps.push(next);
        }
        for c in 0..CURSORS {
            cursors.push(
                topic
                    .open_cursor(&cursor_name(c), at(InitialPosition::Earliest, false))
                    .unwrap(),
            );
            positions.push(ps.clone());
        }
        topics.push(topic);
    }
    Open {
        _topics: topics,
        cursors,
        positions,
    }
}

/// The store's total within its limit plus `slack`, and equal to the sum of every cursor's
/// share.
fn check_budget(store: &Store, cursors: &[Cursor], slack: usize, what: &str) {
    let shares: usize = cursors
        .iter()
        .map(|c| {
            let a = c.stats().unwrap().ackset;
            assert_eq!(
                a.shared_limit_bytes,
                store.ack_memory_stats().unwrap().limit_bytes
            );
            a.resident_bytes + a.charged_bytes
        })
        .sum();
    let s = store.ack_memory_stats().unwrap();
    assert_eq!(s.members, cursors.len(), "{what}");
    assert_eq!(s.resident_bytes, shares, "{what}: {s:?}");
    assert!(
        s.resident_bytes <= s.limit_bytes + slack,
        "{what}: {} resident against {} + {slack}: {s:?}",
        s.resident_bytes,
        s.limit_bytes
    );
}

fn check_models(open: &Open, models: &[Model], what: &str) {
    for (k, c) in open.cursors.iter().enumerate() {
        for &p in &open.positions[k] {
            let whole = models[k].entries.contains(&p);
            assert_eq!(c.is_acked(p).unwrap(), whole, "{what}: cursor {k} at {p}");
            for i in 0..BATCH {
                let want = whole || models[k].messages.contains(&(p, i));
                assert_eq!(
                    c.is_batch_index_acked(p, i).unwrap(),
                    want,
                    "{what}: cursor {k} at {p} message {i}"
                );
            }
        }
    }
}

/// One random step on cursor `k`: an individual ack, a batch-index ack of one message, or a
/// read. Acking the last unacknowledged message of an entry acknowledges the entry whole.
fn step(rng: &mut Rng, open: &Open, models: &mut [Model], k: usize) {
    let c = &open.cursors[k];
    let p = open.positions[k][rng.index(ENTRIES as usize)];
    match rng.below(10) {
        0..=5 => {
            c.ack(p).unwrap();
            models[k].entries.insert(p);
        }
        6..=8 => {
            let i = rng.below(u64::from(BATCH)) as u32;
            c.ack_batch_index(p, i, BATCH).unwrap();
            let m = &mut models[k];
            if !m.entries.contains(&p) {
                m.messages.insert((p, i));
                if (0..BATCH).all(|j| m.messages.contains(&(p, j))) {
                    m.entries.insert(p);
                }
            }
        }
        _ => {
            c.read_entries(3).unwrap();
        }
    }
}

#[test]
fn many_cursors_on_several_topics_share_one_ack_budget_and_keep_their_acks() {
    let limit = 6 << 10;
    let seed = seed_from_env("ACKSTORE_SEED");
    let disk = MemStorage::new();
    let mut models = vec![Model::default(); TOPICS * CURSORS];
    {
        let store = Store::open_with_storage(
            Arc::new(disk.clone()),
            support::config::store_shared_budget(PER_LEDGER, limit),
        )
        .unwrap();
        let open = open_all(&store, true);
        let mut rng = Rng::new(seed);
        for n in 0..1500 {
            // Runs on one cursor, then another: a cursor gone idle holds memory the next
            // one's growth must take back.
            let k = (n / 25 + rng.index(2)) % open.cursors.len();
            step(&mut rng, &open, &mut models, k);
            check_budget(
                &store,
                &open.cursors,
                MAX_PARTITION_BYTES,
                &format!("seed {seed}, step {n}"),
            );
            if n % 300 == 299 {
                open.cursors[k].flush().unwrap();
            }
        }
        let s = store.ack_memory_stats().unwrap();
        assert!(s.released_bytes > 0, "no cursor ever gave memory up: {s:?}");
        assert!(
            s.peak_resident_bytes <= limit + MAX_PARTITION_BYTES,
            "{s:?}"
        );
        check_models(&open, &models, "before reopen");
        check_budget(
            &store,
            &open.cursors,
            MAX_PARTITION_BYTES,
            "after the check",
        );
        store.close().unwrap();
    }
    let store = Store::open_with_storage(
        Arc::new(disk),
        support::config::store_shared_budget(PER_LEDGER, limit),
    )
    .unwrap();
    let open = open_all(&store, false);
    check_models(&open, &models, "after reopen");
    check_budget(&store, &open.cursors, MAX_PARTITION_BYTES, "after reopen");
    store.close().unwrap();
    assert_eq!(store.ack_memory_stats().unwrap().resident_bytes, 0);
}

/// Threads acknowledging on cursors of several topics at once under one tiny budget: no
/// deadlock (a cursor asks others without blocking on their locks), every ack kept, and once
/// the threads are done the store is within its limit plus one partition.
#[test]
fn threads_acking_on_many_cursors_share_one_budget_without_deadlock() {
    let limit = 4 << 10;
    let seed = seed_from_env("ACKSTORE_SEED") ^ 3;
    let disk = MemStorage::new();
    let store = Store::open_with_storage(
        Arc::new(disk.clone()),
        support::config::store_shared_budget(PER_LEDGER, limit),
    )
    .unwrap();
    let open = open_all(&store, true);
    let threads = 4;
    let models: Vec<Vec<Model>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let open = &open;
                s.spawn(move || {
                    let mut rng = Rng::new(seed + t as u64);
                    let mut models = vec![Model::default(); TOPICS * CURSORS];
                    // Thread t owns the cursors k with k % threads == t, so the models are
                    // exact; every thread still asks every other cursor for memory.
                    let mine: Vec<usize> = (0..open.cursors.len())
                        .filter(|k| k % threads == t)
                        .collect();
                    for _ in 0..800 {
                        let k = mine[rng.index(mine.len())];
                        step(&mut rng, open, &mut models, k);
                    }
                    models
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut merged = vec![Model::default(); TOPICS * CURSORS];
    for (t, m) in models.into_iter().enumerate() {
        for k in (0..merged.len()).filter(|k| k % threads == t) {
            merged[k] = m[k].clone();
        }
    }
    // The reads of the check below bring the total back (the last thread may have finished
    // while another was busy and could not release); reading the figures changes nothing.
    let s = store.ack_memory_stats().unwrap();
    assert!(s.released_bytes > 0, "{s:?}");
    check_models(&open, &merged, "after the threads");
    check_budget(
        &store,
        &open.cursors,
        MAX_PARTITION_BYTES,
        "after the threads",
    );
    store.close().unwrap();
    drop(open);
    drop(store);
    let store = Store::open_with_storage(
        Arc::new(disk),
        support::config::store_shared_budget(PER_LEDGER, limit),
    )
    .unwrap();
    let open = open_all(&store, false);
    check_models(&open, &merged, "after reopen");
    store.close().unwrap();
}

/// Reading a cursor's figures changes no memory: with the store's total over its limit (the
/// hot partition of the cursor changed last is kept past it), reading every cursor's stats
/// leaves every share and the total as they were, so the shares read one after another add
/// up to the total.
#[test]
fn reading_cursor_stats_releases_nothing_and_the_shares_add_up() {
    let limit = 64;
    let store = Store::open_with_storage(
        Arc::new(MemStorage::new()),
        support::config::store_shared_budget(PER_LEDGER, limit),
    )
    .unwrap();
    let open = open_all(&store, true);
    // Every cursor acks in a ledger of its own, then the last one acks once more: its hot
    // partition alone puts the total over the tiny limit.
    for (k, c) in open.cursors.iter().enumerate() {
        c.ack(open.positions[k][(k * PER_LEDGER as usize) % ENTRIES as usize])
            .unwrap();
    }
    let last = open.cursors.len() - 1;
    open.cursors[last]
        .ack_batch_index(open.positions[last][1], 0, BATCH)
        .unwrap();
    let before = store.ack_memory_stats().unwrap();
    assert!(before.resident_bytes > limit, "{before:?}");
    let shares: Vec<usize> = open
        .cursors
        .iter()
        .map(|c| {
            let a = c.stats().unwrap().ackset;
            a.resident_bytes + a.charged_bytes
        })
        .collect();
    let after = store.ack_memory_stats().unwrap();
    assert_eq!(after.resident_bytes, before.resident_bytes, "{after:?}");
    assert_eq!(after.released_bytes, before.released_bytes, "{after:?}");
    assert_eq!(
        shares.iter().sum::<usize>(),
        after.resident_bytes,
        "{shares:?}"
    );
}

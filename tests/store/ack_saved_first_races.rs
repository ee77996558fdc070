//! Threads ack on many cursors of one store, in a small shared budget, while another thread
//! flushes the store over and over: partitions turn saved and then change again under the
//! acking threads. No ack is lost or invented in memory or across a reopen, and the budget
//! stays bounded.

use crate::support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ackstore::internals::ackset::MAX_PARTITION_BYTES;
use ackstore::{MemStorage, Position, Store};
use support::topic::{append_n, earliest};
use support::workload::Rng;

const PER_LEDGER: u64 = 4;
const ENTRIES: u64 = 160;
const CURSORS: usize = 8;
const THREADS: usize = 2;
const TOPIC: &str = "persistent://t/ns/saved-races";

fn run(seed: u64) {
    let limit = 2 << 10;
    let disk = MemStorage::new();
    let acked: Vec<Mutex<BTreeSet<Position>>> =
        (0..CURSORS).map(|_| Mutex::new(BTreeSet::new())).collect();
    let positions;
    {
        let store = Store::open_with_storage(
            Arc::new(disk.clone()),
            support::config::store_shared_budget(PER_LEDGER, limit),
        )
        .unwrap();
        let topic = store.topic(TOPIC).unwrap();
        positions = append_n(&topic, ENTRIES);
        let cursors: Vec<_> = (0..CURSORS)
            .map(|c| topic.open_cursor(&format!("c{c}"), earliest()).unwrap())
            .collect();
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let flusher = s.spawn(|| {
                let mut worst = 0;
                while !done.load(Ordering::SeqCst) {
                    store.flush_all().unwrap();
                    worst = worst.max(store.ack_memory_stats().unwrap().resident_bytes);
                }
                worst
            });
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (cursors, acked, positions) = (&cursors, &acked, &positions);
                    s.spawn(move || {
                        let mut rng = Rng::new(seed * 31 + t as u64);
                        for _ in 0..4000 {
                            let c = rng.index(CURSORS);
                            // Never entry 0: mark-delete stays, every ack is a hole.
                            let p = positions[1 + rng.index(positions.len() - 1)];
                            // Record before acking: a concurrent flush may persist it.
                            let mut set = acked[c].lock().unwrap();
                            cursors[c].ack(p).unwrap();
                            set.insert(p);
                        }
                    })
                })
                .collect();
            let joined: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
            done.store(true, Ordering::SeqCst);
            let worst = flusher.join().unwrap();
            for j in joined {
                j.unwrap();
            }
            let s = store.ack_memory_stats().unwrap();
            assert!(
                worst <= limit + (THREADS + 1) * 2 * MAX_PARTITION_BYTES,
                "{worst} resident against {limit}: {s:?}"
            );
            assert!(s.released_bytes > 0, "the budget never made room: {s:?}");
            assert!(
                s.peak_resident_bytes <= limit + MAX_PARTITION_BYTES,
                "{s:?}"
            );
        });
        for (c, cursor) in cursors.iter().enumerate() {
            let set = acked[c].lock().unwrap();
            for &p in &positions {
                assert_eq!(cursor.is_acked(p).unwrap(), set.contains(&p), "c{c} {p}");
            }
        }
        store.flush_all().unwrap();
        drop(cursors);
        store.close().unwrap();
    }
    let store = Store::open_with_storage(
        Arc::new(disk),
        support::config::store_shared_budget(PER_LEDGER, limit),
    )
    .unwrap();
    let topic = store.topic(TOPIC).unwrap();
    for (c, set) in acked.iter().enumerate() {
        let cursor = topic.open_cursor(&format!("c{c}"), earliest()).unwrap();
        let set = set.lock().unwrap();
        for &p in &positions {
            assert_eq!(
                cursor.is_acked(p).unwrap(),
                set.contains(&p),
                "c{c} {p} after reopen"
            );
        }
    }
    store.close().unwrap();
}

#[test]
fn acks_racing_a_flusher_in_a_small_shared_budget_are_all_kept() {
    for seed in 0..4 {
        run(seed);
    }
}

/// Threads ack every entry of their cursor in a random order (mark-delete jumps as holes fill)
/// while another thread trims consumed ledgers over and over: an entry is readable for as long
/// as some cursor has not acked it.
#[test]
fn trims_racing_acks_never_remove_an_unacked_entry() {
    let store = Store::open_with_storage(
        Arc::new(MemStorage::new()),
        support::config::store_shared_budget(PER_LEDGER, 2 << 10),
    )
    .unwrap();
    let topic = store.topic("persistent://t/ns/trim-races").unwrap();
    let positions = append_n(&topic, ENTRIES);
    let cursors: Vec<_> = (0..THREADS)
        .map(|c| topic.open_cursor(&format!("c{c}"), earliest()).unwrap())
        .collect();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let trimmer = s.spawn(|| {
            let mut trimmed = 0;
            while !done.load(Ordering::SeqCst) {
                trimmed += topic.trim_consumed().unwrap().len();
            }
            trimmed
        });
        let workers: Vec<_> = cursors
            .iter()
            .enumerate()
            .map(|(t, cursor)| {
                let (topic, positions) = (&topic, &positions);
                s.spawn(move || {
                    let mut rng = Rng::new(11 + t as u64);
                    let mut order = positions.clone();
                    for i in (1..order.len()).rev() {
                        order.swap(i, rng.index(i + 1));
                    }
                    for p in order {
                        topic
                            .read(p)
                            .unwrap_or_else(|e| panic!("c{t}: {p} unacked but gone: {e}"));
                        cursor.ack(p).unwrap();
                    }
                })
            })
            .collect();
        let joined: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        done.store(true, Ordering::SeqCst);
        let trimmed = trimmer.join().unwrap();
        for j in joined {
            j.unwrap();
        }
        assert!(trimmed > 0 || !topic.trim_consumed().unwrap().is_empty());
    });
    store.close().unwrap();
}

/// A cursor's partitions are saved by a flush, then each changes again; another cursor's acks
/// then push them out of a small budget. The changes are written, not dropped with the saved
/// copy: they are there in memory and after a reopen.
#[test]
fn a_saved_partition_changed_after_the_flush_is_written_when_evicted() {
    let disk = MemStorage::new();
    let limit = 1 << 10;
    let open_store = || {
        Store::open_with_storage(
            Arc::new(disk.clone()),
            support::config::store_shared_budget(PER_LEDGER, limit),
        )
        .unwrap()
    };
    let store = open_store();
    let topic = store.topic(TOPIC).unwrap();
    let positions = append_n(&topic, ENTRIES);
    let a = topic.open_cursor("a", earliest()).unwrap();
    let b = topic.open_cursor("b", earliest()).unwrap();
    let firsts: Vec<_> = positions
        .iter()
        .skip(1)
        .step_by(PER_LEDGER as usize)
        .collect();
    let seconds: Vec<_> = positions
        .iter()
        .skip(2)
        .step_by(PER_LEDGER as usize)
        .collect();
    for &&p in &firsts[..8] {
        a.ack(p).unwrap();
    }
    store.flush_all().unwrap();
    for &&p in &seconds[..8] {
        a.ack(p).unwrap();
    }
    for &&p in &firsts {
        b.ack(p).unwrap();
    }
    assert!(store.ack_memory_stats().unwrap().released_bytes > 0);
    for &&p in firsts[..8].iter().chain(&seconds[..8]) {
        assert!(a.is_acked(p).unwrap(), "{p} lost in memory");
    }
    drop((a, b, topic));
    store.close().unwrap();
    drop(store);
    let store = open_store();
    let topic = store.topic(TOPIC).unwrap();
    let a = topic.open_cursor("a", earliest()).unwrap();
    for &&p in firsts[..8].iter().chain(&seconds[..8]) {
        assert!(a.is_acked(p).unwrap(), "{p} lost after reopen");
    }
    store.close().unwrap();
}

//! Partial entries under a tiny budget with everything at once: threads acknowledging batch
//! indexes on a durable cursor (with cursor-ledger rollovers) and on a reader, another reading,
//! rewinding and moving the read position, a flusher that also trims, all checked against
//! what each thread acknowledged, during the run (the budget) and after a reopen (every message);
//! on a topic opened alone and on a store's topic.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ackstore::internals::ackset::MAX_PARTITION_BYTES;
use ackstore::{
    AppendMeta, Cursor, CursorConfig, InitialPosition, LedgerConfig, MemStorage, NonDurableOptions,
    PersistMode, Position,
};
use support::topic::{Host, at, config, on_each_host, open_hosted};
use support::workload::Rng;

const SIZE: u32 = 9;
const THREADS: u32 = 3;
const BUDGET: usize = 768;

fn cfg() -> LedgerConfig {
    LedgerConfig {
        cursor: CursorConfig {
            lru_capacity_bytes: BUDGET,
            persist_mode: PersistMode::MultiEntry,
            ..CursorConfig::default()
        },
        ..config(8)
    }
}

fn within_budget(c: &Cursor, what: &str) {
    let s = c.stats().unwrap();
    let a = &s.ackset;
    assert!(
        a.resident_bytes + a.charged_bytes <= BUDGET + MAX_PARTITION_BYTES,
        "{what}: {s:?}"
    );
}

/// Message `i` of entry `k` stays unacknowledged: every entry from the 30th on keeps one hole.
fn hole(k: usize, i: u32) -> bool {
    k >= 30 && i == (k as u32 % SIZE)
}

fn work(c: &Cursor, entries: &[Position], t: u32, seed: u64, trimmable: bool) {
    let mut rng = Rng::new(seed);
    let mut order: Vec<usize> = (0..entries.len()).collect();
    // The first entries in order (so mark-delete moves and trims have work), the rest shuffled.
    for j in (31..order.len()).rev() {
        let r = 30 + rng.index(j - 29);
        order.swap(j, r);
    }
    for k in order {
        for i in (t..SIZE).step_by(THREADS as usize) {
            if !hole(k, i) {
                match c.ack_batch_index(entries[k], i, SIZE) {
                    Ok(_) => {}
                    // A reader does not hold back trims: its entry may be gone.
                    Err(ackstore::Error::NoSuchEntry(_)) if trimmable => {}
                    Err(e) => panic!("{} message {i}: {e}", entries[k]),
                }
            }
        }
    }
}

fn check(c: &Cursor, entries: &[Position], from: Position, what: &str) {
    for (k, &p) in entries.iter().enumerate().filter(|(_, p)| **p >= from) {
        for i in 0..SIZE {
            assert_eq!(
                c.is_batch_index_acked(p, i).unwrap(),
                !hole(k, i),
                "{what}: {p} message {i}"
            );
        }
    }
}

#[test]
fn acks_reads_flushes_trims_and_a_reader_at_once_keep_every_message_within_the_budget() {
    on_each_host(everything_at_once);
}

fn everything_at_once(host: Host) {
    let disk = MemStorage::new();
    let topic = open_hosted(host, Arc::new(disk.clone()), &cfg()).unwrap();
    let entries: Vec<Position> = (0..200)
        .map(|i| {
            let meta = AppendMeta {
                num_messages: SIZE,
                timestamp: 1000 + i,
            };
            topic.append_with(b"b", meta).unwrap()
        })
        .collect();
    topic.sync().unwrap();
    let c = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    let reader = topic
        .open_non_durable_cursor(InitialPosition::Earliest, NonDurableOptions::default())
        .unwrap();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let flusher = s.spawn(|| {
            let mut n = 0;
            while !done.load(Ordering::SeqCst) || n == 0 {
                c.flush().unwrap();
                topic.trim_consumed().unwrap();
                within_budget(&c, "flusher");
                n += 1;
            }
        });
        let readers = s.spawn(|| {
            let mut rng = Rng::new(77);
            while !done.load(Ordering::SeqCst) {
                match rng.below(10) {
                    0 => c.rewind().unwrap(),
                    1 => {
                        let p = entries[rng.index(entries.len())];
                        // May be trimmed meanwhile: the cursor moves to what is retained.
                        let _ = c.seek_read_position(p);
                    }
                    _ => {
                        for e in c.read_entries(4).unwrap() {
                            let k = entries.iter().position(|&p| p == e.position).unwrap();
                            // Acks only grow: what a read reports acked was acknowledged.
                            if let Some(acked) = e.acked_batch_indexes.as_ref() {
                                for i in acked.iter() {
                                    assert!(!hole(k, i), "{} message {i} invented", e.position);
                                }
                            }
                        }
                    }
                }
                within_budget(&c, "reader");
                within_budget(&reader, "reader cursor");
            }
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let c = c.clone();
                let reader = reader.clone();
                let entries = &entries;
                s.spawn(move || {
                    work(&c, entries, t, 10 + u64::from(t), false);
                    work(&reader, entries, t, 20 + u64::from(t), true);
                })
            })
            .collect();
        // Stop the loops before a worker's panic is passed on, so a failure never hangs.
        let joined: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        done.store(true, Ordering::SeqCst);
        flusher.join().unwrap();
        readers.join().unwrap();
        for j in joined {
            j.unwrap();
        }
    });
    let from = topic.first_position().unwrap();
    check(&c, &entries, entries[0], "before reopen");
    check(&reader, &entries, from, "reader");
    within_budget(&reader, "reader after the run");
    assert!(c.stats().unwrap().batch_evictions > 0);
    c.close().unwrap();
    topic.close().unwrap();
    let topic = open_hosted(host, Arc::new(disk), &cfg()).unwrap();
    let c = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    check(&c, &entries, entries[0], "after reopen");
    within_budget(&c, "after reopen");
    topic.close().unwrap();
}

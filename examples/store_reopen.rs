//! A restart of a store that `ackstore perf --topics T --cursors C --dir D --keep` left, timed
//! alone and by phase, so two builds can be compared on the same directory (run each in turn):
//! `Store::open` (the catalog's claim and the journal's scan), every topic's open, then every
//! cursor's open and first read, as the perf workload's restart does from one thread. Prints each
//! round's wall time and the main thread's CPU time per phase (Linux: `/proc/thread-self/
//! schedstat`), then closes the store cleanly.
//!
//! The configuration is `ackstore perf --topics`'s (ledgers of 10,000 entries, the shared ack
//! budget of 150 bytes a cursor as with `--ack-budget-per-cursor-bytes 150`); the names are its
//! (`persistent://tenant/ns/topic-{t}`, `sub-{c}`).
//!
//! Run: `cargo run --release -- perf --topics 10000 --cursors 10 --ticks 3
//! --ack-budget-per-cursor-bytes 150 --dir D --keep`, then
//! `cargo run --release --example store_reopen -- D/store 10000 10 3`.

use std::time::{Duration, Instant};

use ackstore::{CursorConfig, CursorOptions, LedgerConfig, Store, StoreConfig};

/// The CPU time the calling thread has used.
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat");
    let ns = stat
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a CPU time in nanoseconds");
    Duration::from_nanos(ns)
}

fn config(cursors: usize) -> StoreConfig {
    StoreConfig {
        ledger: LedgerConfig {
            max_entries_per_ledger: 10_000,
            cursor: CursorConfig {
                lru_capacity_bytes: 64 << 10,
                flush_interval: Some(Duration::from_secs(3600)),
                ..CursorConfig::default()
            },
            ..LedgerConfig::default()
        },
        ack_memory_bytes: Some(150 * cursors),
        ..StoreConfig::default()
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir, topics, cursors, rest @ ..] = args.as_slice() else {
        panic!("usage: store_reopen DIR TOPICS CURSORS_PER_TOPIC [ROUNDS]");
    };
    let topics: usize = topics.parse().expect("a number of topics");
    let per_topic: usize = cursors.parse().expect("a number of cursors per topic");
    let rounds: usize = rest
        .first()
        .map_or(3, |r| r.parse().expect("a number of rounds"));
    println!("round  wall_ms  cpu_ms  open_cpu_ms  topics_cpu_ms  cursors_cpu_ms");
    for round in 1..=rounds {
        let (started, cpu0) = (Instant::now(), thread_cpu());
        let store = Store::open(dir, config(topics * per_topic)).expect("open the store");
        let cpu1 = thread_cpu();
        let opened: Vec<_> = (0..topics)
            .map(|t| {
                store
                    .topic(&format!("persistent://tenant/ns/topic-{t}"))
                    .expect("topic")
            })
            .collect();
        let cpu2 = thread_cpu();
        let mut cursors = Vec::with_capacity(topics * per_topic);
        for topic in &opened {
            for c in 0..per_topic {
                let cursor = topic
                    .open_cursor(&format!("sub-{c}"), CursorOptions::default())
                    .expect("cursor");
                cursor.read_entries(1).expect("first read");
                cursors.push(cursor);
            }
        }
        let (wall, cpu3) = (started.elapsed(), thread_cpu());
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "{round:>5}  {:>7.0}  {:>6.0}  {:>11.0}  {:>13.0}  {:>14.0}",
            ms(wall),
            ms(cpu3 - cpu0),
            ms(cpu1 - cpu0),
            ms(cpu2 - cpu1),
            ms(cpu3 - cpu2)
        );
        drop(cursors);
        for topic in &opened {
            topic.close().expect("close a topic");
        }
        drop(opened);
        store.close().expect("close the store");
    }
}

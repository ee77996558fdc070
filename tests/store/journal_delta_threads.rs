//! Threads over one store whose cursors flush deltas: each cursor is driven by its own thread
//! (individual and cumulative acks, seeks that clear the acks, its own flushes, closes and
//! reopens, a delete and re-creation under the same name), while another thread calls
//! `Store::flush_all` in a loop, the flusher pool ticks every millisecond, another thread
//! appends to the topics (their data ledgers roll every four entries), and the journal's
//! segments are small enough to roll over every few ticks. Once every thread has closed its
//! cursor and the store is closed, a reopened store recovers each cursor's acks exactly (a
//! close that returned `Ok` is kept, nothing is invented); an in-memory disk's durable image
//! (what a power cut right after the close leaves) recovers the same.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support;

use ackstore::{MemStorage, Position, Store};
use support::workload::Rng;

const ENTRIES: usize = 64;

/// One cursor's thread: returns its name and the acks it holds at its last close.
fn drive(
    store: Store,
    topic: String,
    name: String,
    ps: Vec<Position>,
    seed: u64,
) -> (String, String, BTreeSet<Position>) {
    let mut rng = Rng::new(seed);
    let mut t = store.topic(&topic).expect("topic");
    let mut cur = t
        .open_cursor(&name, support::topic::earliest())
        .expect("cursor");
    let mut truth = BTreeSet::new();
    for step in 0..300 {
        let p = ps[rng.index(ps.len())];
        let md = cur.mark_delete_position().expect("md");
        match rng.below(40) {
            0 => {
                cur.seek(p).expect("seek");
                truth = ps.iter().copied().filter(|q| *q < p).collect();
            }
            1 if md.is_none_or(|m| p > m) => {
                cur.ack_cumulative(p).expect("cumulative");
                truth.extend(ps.iter().filter(|q| **q <= p));
            }
            2 => cur.flush().expect("flush"),
            3 => {
                cur.close().expect("close");
                t = store.topic(&topic).expect("topic");
                cur = t
                    .open_cursor(&name, support::topic::earliest())
                    .expect("reopen");
            }
            4 if step % 3 == 0 => {
                t.delete_cursor(&name).expect("delete");
                cur = t
                    .open_cursor(&name, support::topic::earliest())
                    .expect("re-create");
                truth.clear();
            }
            _ => {
                if md.is_none_or(|m| p > m) {
                    cur.ack(p).expect("ack");
                    truth.insert(p);
                }
            }
        }
    }
    cur.close().expect("close");
    (topic, name, truth)
}

fn acked(store: &Store, topic: &str, name: &str, ps: &[Position]) -> BTreeSet<Position> {
    let t = store.topic(topic).expect("topic");
    let c = t
        .open_cursor(name, support::topic::earliest())
        .expect("cursor");
    ps.iter()
        .copied()
        .filter(|p| c.is_acked(*p).expect("is_acked"))
        .collect()
}

#[test]
fn cursors_acking_seeking_closing_and_deleted_while_ticks_and_rollovers_run_recover_exactly() {
    let disk = MemStorage::new();
    let store = Store::open_with_storage(
        Arc::new(disk.clone()),
        support::config::store_flushed(4, 600, 1024, Duration::from_millis(1), 2),
    )
    .expect("open");
    let mut entries = Vec::new();
    for t in ["a", "b"] {
        let topic = store.topic(t).expect("topic");
        let ps: Vec<Position> = (0..ENTRIES)
            .map(|i| topic.append(format!("{i}").as_bytes()).expect("append"))
            .collect();
        topic.sync().expect("sync");
        entries.push((t.to_string(), ps));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flusher = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                store.flush_all().expect("flush_all");
                n += 1;
            }
            n
        })
    };
    let appender = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for t in ["a", "b"] {
                    let topic = store.topic(t).expect("topic");
                    topic.append(format!("more{i}").as_bytes()).expect("append");
                    topic.sync().expect("sync");
                }
                i += 1;
                std::thread::yield_now();
            }
        })
    };
    let mut threads = Vec::new();
    let mut seed = 1;
    for (t, ps) in &entries {
        for n in ["x", "y", "z"] {
            let (store, t, ps) = (store.clone(), t.clone(), ps.clone());
            seed += 1;
            threads.push(std::thread::spawn(move || {
                drive(store, t, n.to_string(), ps, seed)
            }));
        }
    }
    let results: Vec<_> = threads
        .into_iter()
        .map(|h| h.join().expect("cursor thread"))
        .collect();
    stop.store(true, Ordering::Relaxed);
    let flushes = flusher.join().expect("flusher");
    appender.join().expect("appender");
    let stats = store.journal_stats();
    store.close().expect("close");
    drop(store);
    assert!(
        flushes > 0 && stats.deltas > 10,
        "{flushes} flush_all, {stats:?}"
    );
    for image in [disk.clone(), disk.durable_image()] {
        let store = Store::open_with_storage(
            Arc::new(image),
            support::config::store_flushed(4, 600, 1024, Duration::from_millis(1), 2),
        )
        .expect("reopen");
        for (t, n, truth) in &results {
            let ps = &entries.iter().find(|(x, _)| x == t).expect("topic").1;
            let got = acked(&store, t, n, ps);
            assert_eq!(
                got.difference(truth).collect::<Vec<_>>(),
                Vec::<&Position>::new(),
                "{t}/{n}: invented acks"
            );
            assert_eq!(
                truth.difference(&got).collect::<Vec<_>>(),
                Vec::<&Position>::new(),
                "{t}/{n}: lost acks of its close"
            );
        }
        store.close().expect("close");
    }
}

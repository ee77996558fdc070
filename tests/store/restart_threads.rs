//! A restart as a broker makes it: topics loaded from several threads at once. A store keeping
//! 2 descriptors open (so every file of every topic is closed and reopened by path all the
//! time, by every thread), its cursors' acks flushed and the store closed; then four threads
//! open every topic and every cursor of the reopened store, each starting at a different topic,
//! so that at any moment threads open the same topic and cursor and different ones at once.
//! Every cursor each thread opens holds exactly the acks flushed before the close, and its
//! first read (by one thread per cursor: handles of a cursor share its read position) answers
//! the first entry the model holds unacknowledged.

use std::collections::BTreeMap;
use std::sync::Barrier;

use ackstore::{Position, Store, StoreConfig};

use crate::support;
use support::workload::{Acked, Rng};

const THREADS: usize = 4;
const TOPICS: usize = 12;
const CURSORS: usize = 3;
const ENTRIES: usize = 24;

fn config() -> StoreConfig {
    StoreConfig {
        open_files: Some(2),
        ..support::config::store_budgeted(5, 64, 4096)
    }
}

fn topic_name(t: usize) -> String {
    format!("persistent://t/ns/restart-{t}")
}

fn cursor_name(c: usize) -> String {
    format!("sub-{c}")
}

/// Every topic's entries, and every cursor's acks as flushed: `(topic, cursor)` to its acks.
struct Model {
    entries: Vec<Vec<Position>>,
    acked: BTreeMap<(usize, usize), Acked>,
}

/// Appends `ENTRIES` entries to every topic (ledgers of 5 entries: several files per topic),
/// acknowledges a random part of them on every cursor (some cursors a prefix cumulatively
/// first), flushes and closes the store.
fn set_up(dir: &std::path::Path, seed: u64) -> Model {
    let mut rng = Rng::new(seed);
    let store = Store::open(dir, config()).expect("open");
    let mut model = Model {
        entries: Vec::new(),
        acked: BTreeMap::new(),
    };
    for t in 0..TOPICS {
        let topic = store.topic(&topic_name(t)).expect("topic");
        let cursors: Vec<_> = (0..CURSORS)
            .map(|c| {
                topic
                    .open_cursor(&cursor_name(c), support::topic::earliest())
                    .expect("cursor")
            })
            .collect();
        let entries: Vec<Position> = (0..ENTRIES)
            .map(|i| topic.append(format!("{t}/{i}").as_bytes()).expect("append"))
            .collect();
        topic.sync().expect("sync");
        for (c, cursor) in cursors.iter().enumerate() {
            let mut acked = Acked::default();
            if rng.below(3) == 0 {
                let through = entries[rng.index(ENTRIES / 2)];
                cursor.ack_cumulative(through).expect("ack cumulative");
                acked.ack_through(through);
            }
            for &p in &entries {
                if !acked.contains(p) && rng.below(2) == 0 {
                    cursor.ack(p).expect("ack");
                    acked.ack(p);
                }
            }
            model.acked.insert((t, c), acked);
        }
        model.entries.push(entries);
    }
    store.flush_all().expect("flush all");
    store.close().expect("close");
    model
}

/// Thread `w`'s share of the restart: every topic from topic `3 w` on, every cursor of it,
/// each checked against the model, and the cursors `(t, c)` with `(t + c) % THREADS == w`
/// read once.
fn reopen_and_check(store: &Store, model: &Model, w: usize, start: &Barrier) {
    start.wait();
    for i in 0..TOPICS {
        let t = (3 * w + i) % TOPICS;
        let topic = store.topic(&topic_name(t)).expect("topic");
        for c in 0..CURSORS {
            let cursor = topic
                .open_cursor(&cursor_name(c), support::topic::earliest())
                .expect("cursor");
            let acked = &model.acked[&(t, c)];
            let actual = support::workload::actual(&cursor).expect("acks");
            for &p in &model.entries[t] {
                assert_eq!(
                    actual.contains(p),
                    acked.contains(p),
                    "thread {w}, topic {t}, cursor {c}, {p:?}"
                );
            }
            // Handles of one cursor share its read position: one thread reads each cursor.
            if (t + c) % THREADS != w {
                continue;
            }
            let first = model.entries[t].iter().find(|p| !acked.contains(**p));
            let read = cursor.read_entries(1).expect("first read");
            assert_eq!(
                read.first().map(|e| e.position),
                first.copied(),
                "thread {w}, topic {t}, cursor {c}: the first read"
            );
            if let Some(e) = read.first() {
                let i = model.entries[t]
                    .iter()
                    .position(|p| *p == e.position)
                    .expect("a position of the model");
                assert_eq!(e.payload, format!("{t}/{i}").into_bytes());
            }
        }
    }
}

#[test]
fn a_restart_from_four_threads_opening_the_same_and_different_topics_keeps_every_flushed_ack() {
    let seed = support::workload::seed_from_env("ACKSTORE_RESTART_THREADS_SEED");
    eprintln!("seed {seed} (ACKSTORE_RESTART_THREADS_SEED)");
    let dir = tempfile::tempdir().expect("temporary directory");
    let model = set_up(dir.path(), seed);
    for round in 0..8 {
        let store = Store::open(dir.path(), config()).expect("reopen");
        let start = Barrier::new(THREADS);
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..THREADS)
                .map(|w| {
                    let (store, model, start) = (&store, &model, &start);
                    s.spawn(move || reopen_and_check(store, model, w, start))
                })
                .collect();
            for w in workers {
                w.join()
                    .unwrap_or_else(|_| panic!("a thread of round {round} failed"));
            }
        });
        store.close().expect("close");
        drop(store);
        assert_eq!(
            support::fds::open_under(dir.path()),
            0,
            "a closed store, round {round}"
        );
    }
}

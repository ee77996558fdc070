//! The descriptor cache under threads: a store keeping 1 (then 2) descriptors open, eight threads
//! each appending to, reading, acknowledging, flushing and closing and reopening the cursors of
//! their own topics, with the flusher pool committing ticks every few milliseconds into
//! journal segments of 512 bytes (a rollover, which removes the oldest segment, every few ticks)
//! and cursors of 64 bytes of ack memory (partitions evicted to the journal and loaded back).
//! Every file is closed and reopened by path all the time, by every thread, while the rollovers
//! remove segments other threads read. Every call answers `Ok`; every read returns the entry
//! written; a cursor closed and reopened holds exactly the acks the thread made; the process's
//! descriptors under the directory stay within the limit, the lock file and one per thread that
//! can be inside a file operation; after a close and a reopen every topic equals the model.

use std::collections::BTreeMap;
use std::sync::Barrier;
use std::time::Duration;

use ackstore::{Position, Store, StoreConfig};

use crate::support;
use support::workload::{Acked, Rng};

const THREADS: usize = 8;
const FLUSHERS: usize = 2;
const TOPICS_PER_THREAD: usize = 3;
const STEPS: usize = 250;

fn config(limit: usize) -> StoreConfig {
    StoreConfig {
        open_files: Some(limit),
        ..support::config::store_flushed(3, 64, 512, Duration::from_millis(2), FLUSHERS)
    }
}

fn name(t: usize) -> String {
    format!("persistent://t/ns/threads-{t}")
}

/// What one thread wrote to one of its topics.
#[derive(Default)]
struct TopicModel {
    entries: BTreeMap<Position, Vec<u8>>,
    acked: Acked,
}

impl TopicModel {
    fn unacked(&self) -> Vec<Position> {
        self.entries
            .keys()
            .filter(|p| !self.acked.contains(**p))
            .copied()
            .collect()
    }
}

/// The descriptors under `dir` while threads run: the cache's limit, the lock file, and two per
/// thread that may be inside a file operation (a descriptor the cache evicted while it was in
/// use, a file opened before the cache adopts it, or a directory being listed or synced; and a
/// descriptor it evicted, which it is closing). One per thread is not enough: a thread closing
/// (syncing) the descriptor its reopen evicted holds the reopened one too, which another thread
/// may evict meanwhile (seen with a limit of 1: 13 open against a bound of 12).
fn assert_bounded(dir: &std::path::Path, limit: usize, at: &str) {
    let open = support::fds::open_under(dir);
    let bound = limit + 1 + 2 * (THREADS + FLUSHERS);
    assert!(
        open <= bound,
        "{open} descriptors under the store's directory {at} (limit {limit}, bound {bound})"
    );
}

/// Checks every topic of `models` in `store` against its model: entries and acks.
fn check(store: &Store, models: &[TopicModel]) {
    for (t, m) in models.iter().enumerate() {
        let topic = store.topic(&name(t)).expect("topic");
        let cursor = topic
            .open_cursor("sub", support::topic::earliest())
            .expect("cursor");
        let actual = support::workload::actual(&cursor).expect("acks");
        for (p, payload) in &m.entries {
            assert_eq!(actual.contains(*p), m.acked.contains(*p), "topic {t} {p:?}");
            if !m.acked.contains(*p) {
                assert_eq!(&topic.read(*p).expect("read").payload, payload, "{p:?}");
            }
        }
    }
}

/// One thread's work on topics `first..first + TOPICS_PER_THREAD`; answers their models.
fn work(
    store: &Store,
    dir: &std::path::Path,
    limit: usize,
    first: usize,
    seed: u64,
) -> Vec<TopicModel> {
    let mut rng = Rng::new(seed);
    let mut models: Vec<TopicModel> = (0..TOPICS_PER_THREAD)
        .map(|_| TopicModel::default())
        .collect();
    let mut open: Vec<_> = (0..TOPICS_PER_THREAD)
        .map(|i| {
            let topic = store.topic(&name(first + i)).expect("topic");
            let cursor = topic
                .open_cursor("sub", support::topic::earliest())
                .expect("cursor");
            (topic, cursor)
        })
        .collect();
    for step in 0..STEPS {
        let i = rng.index(TOPICS_PER_THREAD);
        let t = first + i;
        let m = &mut models[i];
        let (topic, cursor) = &mut open[i];
        match rng.below(10) {
            0..=2 => {
                let payload = format!("{t}/{step}").into_bytes();
                let p = topic.append(&payload).expect("append");
                topic.sync().expect("sync");
                m.entries.insert(p, payload);
            }
            3 | 4 => {
                let unacked = m.unacked();
                if !unacked.is_empty() {
                    let p = unacked[rng.index(unacked.len())];
                    assert_eq!(topic.read(p).expect("read").payload, m.entries[&p], "{p:?}");
                }
            }
            5..=7 => m.acked.ack_one_of(&mut rng, &m.unacked(), cursor),
            8 => cursor.flush().expect("flush"),
            _ => {
                cursor.close().expect("close");
                *cursor = topic
                    .open_cursor("sub", support::topic::earliest())
                    .expect("reopen the cursor");
                let actual = support::workload::actual(cursor).expect("acks");
                for p in m.entries.keys() {
                    assert_eq!(actual.contains(*p), m.acked.contains(*p), "topic {t} {p:?}");
                }
            }
        }
        assert_bounded(dir, limit, &format!("at step {step} of topic {t}"));
    }
    models
}

fn run(limit: usize) {
    let seed = support::workload::seed_from_env("ACKSTORE_OPEN_FILES_THREADS_SEED");
    eprintln!("limit {limit}, seed {seed} (ACKSTORE_OPEN_FILES_THREADS_SEED)");
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = Store::open(dir.path(), config(limit)).expect("open");
    let start = Barrier::new(THREADS);
    let models: Vec<TopicModel> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|w| {
                let (store, start, dir) = (&store, &start, dir.path());
                s.spawn(move || {
                    start.wait();
                    work(
                        store,
                        dir,
                        limit,
                        w * TOPICS_PER_THREAD,
                        seed.wrapping_add(w as u64),
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a worker panicked"))
            .collect()
    });
    store.flush_all().expect("flush all");
    store.close().expect("close");
    drop(store);
    assert_eq!(support::fds::open_under(dir.path()), 0, "a closed store");
    let store = Store::open(dir.path(), config(limit)).expect("reopen");
    check(&store, &models);
    assert!(support::fds::open_under(dir.path()) <= limit + 1);
}

#[test]
fn eight_threads_on_a_store_keeping_one_descriptor_open_lose_nothing() {
    run(1);
}

#[test]
fn eight_threads_on_a_store_keeping_two_descriptors_open_lose_nothing() {
    run(2);
}

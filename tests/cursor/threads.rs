//! Concurrent ackers and a flusher on several threads against a model, and the background
//! flusher (`CursorConfig::flush_interval`).

use crate::support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use ackstore::MemStorage;
use ackstore::{Cursor, Error, Position};
use ackstore::{CursorConfig, InitialPosition, LedgerConfig, ManagedLedger, PersistMode};
use support::topic::{append_n, at};

fn ledger_config(mode: PersistMode, flush_interval: Option<Duration>) -> LedgerConfig {
    LedgerConfig {
        max_entries_per_ledger: 100,
        cursor: CursorConfig {
            persist_mode: mode,
            lru_capacity_bytes: 1024,
            flush_interval,
            ..CursorConfig::default()
        },
        ..LedgerConfig::default()
    }
}

fn acked_set(cursor: &Cursor, appended: &[Position]) -> BTreeSet<Position> {
    appended
        .iter()
        .copied()
        .filter(|&p| cursor.is_acked(p).unwrap())
        .collect()
}

/// Four threads ack disjoint, interleaved entries in scattered orders while a fifth flushes;
/// after each flush the durable image is kept with the acks that had returned before the
/// flush began. Every image must recover at least those acks and nothing beyond the final
/// truth; the live cursor and a reopen must hold exactly the truth.
#[test]
fn concurrent_ackers_and_a_flusher_keep_every_flushed_ack() {
    const THREADS: usize = 4;
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        let disk = MemStorage::new();
        let topic =
            ManagedLedger::open_with_storage(Arc::new(disk.clone()), ledger_config(mode, None))
                .unwrap();
        let appended = append_n(&topic, 2000);
        topic.sync().unwrap();
        let cursor = topic
            .open_cursor("sub", at(InitialPosition::Earliest, false))
            .unwrap();
        let done: Arc<Mutex<BTreeSet<Position>>> = Arc::default();
        let images = thread::scope(|s| {
            let ackers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (cursor, done, appended) = (cursor.clone(), done.clone(), &appended);
                    s.spawn(move || {
                        // Thread t acks entries i with i % 5 == t (every fifth stays unacked),
                        // walking its share with a stride so the order is scattered.
                        let mine: Vec<Position> = appended
                            .iter()
                            .enumerate()
                            .filter(|(i, _)| i % 5 == t)
                            .map(|(_, p)| *p)
                            .collect();
                        for k in 0..mine.len() {
                            let p = mine[(k * 37) % mine.len()];
                            cursor.ack(p).unwrap();
                            done.lock().unwrap().insert(p);
                        }
                    })
                })
                .collect();
            let flusher = {
                let (cursor, done, disk) = (cursor.clone(), done.clone(), disk.clone());
                s.spawn(move || {
                    // Flushes until every acker is done, keeping the first 30 images.
                    let mut images = Vec::new();
                    loop {
                        let before = done.lock().unwrap().clone();
                        cursor.flush().unwrap();
                        if images.len() < 30 {
                            images.push((before.clone(), disk.durable_image()));
                        }
                        if before.len() == 1600 {
                            return images;
                        }
                        thread::yield_now();
                    }
                })
            };
            for a in ackers {
                a.join().unwrap();
            }
            flusher.join().unwrap()
        });
        let truth = done.lock().unwrap().clone();
        assert_eq!(truth.len(), 1600);
        assert_eq!(
            acked_set(&cursor, &appended),
            truth,
            "{mode:?}: live cursor"
        );
        for (i, (flushed, image)) in images.into_iter().enumerate() {
            let topic =
                ManagedLedger::open_with_storage(Arc::new(image), ledger_config(mode, None))
                    .unwrap();
            let c = topic
                .open_cursor("sub", at(InitialPosition::Latest, false))
                .unwrap();
            let recovered = acked_set(&c, &appended);
            assert!(
                recovered.is_superset(&flushed),
                "{mode:?}: image {i} lost flushed acks"
            );
            assert!(
                recovered.is_subset(&truth),
                "{mode:?}: image {i} invented acks"
            );
            topic.close().unwrap();
        }
        topic.close().unwrap();
        let topic =
            ManagedLedger::open_with_storage(Arc::new(disk), ledger_config(mode, None)).unwrap();
        let c = topic
            .open_cursor("sub", at(InitialPosition::Latest, false))
            .unwrap();
        assert_eq!(acked_set(&c, &appended), truth, "{mode:?}: after reopen");
    }
}

/// Polls `cond` until it holds (the background flusher runs on its own schedule).
fn wait_for(mut cond: impl FnMut() -> bool) {
    for _ in 0..2000 {
        if cond() {
            return;
        }
        thread::sleep(Duration::from_millis(5));
    }
    panic!("the background flusher never got there");
}

#[test]
fn the_background_flusher_makes_acks_durable_without_a_flush_call() {
    let disk = MemStorage::new();
    let config = ledger_config(PersistMode::MultiEntry, Some(Duration::from_millis(2)));
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), config.clone()).unwrap();
    let p = append_n(&topic, 300);
    topic.sync().unwrap();
    let c = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    let acked: BTreeSet<Position> = (1..300).step_by(2).map(|i| p[i]).collect();
    for &q in &acked {
        c.ack(q).unwrap();
    }
    let flushes_before = c.stats().unwrap().persist.flushes;
    wait_for(|| c.stats().unwrap().persist.flushes > flushes_before);
    // Flushes happen only when something changed: the count settles.
    wait_for(|| {
        let a = c.stats().unwrap().persist.flushes;
        thread::sleep(Duration::from_millis(20));
        a == c.stats().unwrap().persist.flushes
    });
    // Power goes off with no flush call: the background flush kept every ack.
    let image = disk.durable_image();
    let after = ManagedLedger::open_with_storage(Arc::new(image), config.clone()).unwrap();
    let recovered = after
        .open_cursor("sub", at(InitialPosition::Latest, false))
        .unwrap();
    assert_eq!(acked_set(&recovered, &p), acked);
    after.close().unwrap();
    // Closing stops the flusher and releases the directory.
    topic.close().unwrap();
    drop(topic);
    let reopened = ManagedLedger::open_with_storage(Arc::new(disk), config).unwrap();
    reopened.close().unwrap();
}

#[test]
fn a_background_flush_error_is_kept_and_returned_by_the_next_flush() {
    let disk = MemStorage::new();
    let config = ledger_config(PersistMode::MultiEntry, Some(Duration::from_millis(2)));
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), config).unwrap();
    let p = append_n(&topic, 50);
    topic.sync().unwrap();
    let c = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    disk.fail_after(Some(0));
    c.ack(p[3]).unwrap();
    wait_for(|| c.stats().unwrap().background_error.is_some());
    // The disk heals before the flush call: the flusher skips a cursor whose error is kept, so
    // the error the call returns is the kept one, and a background flush after it cannot fail
    // again and keep a second error before the check below.
    disk.fail_after(None);
    assert!(matches!(c.flush(), Err(Error::Io { .. })));
    assert_eq!(c.stats().unwrap().background_error, None, "returned once");
    // The cursor keeps its acks in memory.
    assert!(c.is_acked(p[3]).unwrap());
}

//! Threads opening, closing and creating topics, opening cursors, acking, flushing,
//! deleting and recreating cursors, `flush_all` and the flusher pool, all at once; then a
//! restart checks every flushed ack is kept and none invented. A hang fails by the watchdog.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ackstore::{CursorOptions, Error, MemStorage, Position, Store, StoreConfig};

use crate::support;

const TOPICS: usize = 3;
const WORKERS: usize = 6;

#[derive(Default)]
struct Model {
    truth: BTreeSet<Position>,
    flushed: BTreeSet<Position>,
}

fn benign(e: &Error) -> bool {
    matches!(e, Error::Closed)
}

#[test]
fn everything_at_once_keeps_every_flushed_ack_and_never_hangs() {
    let disk = MemStorage::new();
    let entries: Vec<Vec<Position>> = {
        let store = Store::open_with_storage(
            Arc::new(disk.clone()),
            StoreConfig {
                ack_memory_bytes: Some(64 << 10),
                ..support::config::store_flushed(
                    16,
                    ackstore::CursorConfig::default().lru_capacity_bytes,
                    2048,
                    Duration::from_millis(3),
                    2,
                )
            },
        )
        .expect("open");
        let all = (0..TOPICS)
            .map(|t| {
                let topic = store.topic(&format!("t{t}")).expect("topic");
                let ps: Vec<Position> = (0..200)
                    .map(|_| topic.append(b"e").expect("append"))
                    .collect();
                topic.sync().expect("sync");
                ps
            })
            .collect();
        store.close().expect("close");
        all
    };
    let store = Arc::new(
        Store::open_with_storage(
            Arc::new(disk.clone()),
            StoreConfig {
                ack_memory_bytes: Some(64 << 10),
                ..support::config::store_flushed(
                    16,
                    ackstore::CursorConfig::default().lru_capacity_bytes,
                    2048,
                    Duration::from_millis(3),
                    2,
                )
            },
        )
        .expect("open"),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let models: Arc<Vec<Mutex<Model>>> = Arc::new((0..WORKERS).map(|_| Mutex::default()).collect());
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let progress = Arc::new(Mutex::new(Instant::now()));
    let mut handles = Vec::new();
    for w in 0..WORKERS {
        let (store, stop, models, errors, entries, progress) = (
            store.clone(),
            stop.clone(),
            models.clone(),
            errors.clone(),
            entries.clone(),
            progress.clone(),
        );
        handles.push(std::thread::spawn(move || {
            let t = w % TOPICS;
            let name = format!("t{t}");
            let cname = format!("c{w}");
            let ps = &entries[t];
            let mut i = (w * 37) % ps.len();
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                let r = (|| -> ackstore::Result<()> {
                    let topic = store.topic(&name)?;
                    let cursor = topic.open_cursor(&cname, CursorOptions::default())?;
                    for _ in 0..5 {
                        i = (i + 7) % ps.len();
                        cursor.ack(ps[i])?;
                        models[w].lock().unwrap().truth.insert(ps[i]);
                    }
                    if round.is_multiple_of(3) {
                        let before = models[w].lock().unwrap().truth.clone();
                        cursor.flush()?;
                        models[w].lock().unwrap().flushed = before;
                    }
                    if round.is_multiple_of(17) {
                        // Unload the topic (every worker on it sees `Closed` and reopens).
                        topic.close()?;
                    }
                    if round.is_multiple_of(29) {
                        store.flush_all()?;
                    }
                    if round.is_multiple_of(41) {
                        let extra = store.topic(&format!("extra-{w}-{round}"))?;
                        let x = extra.open_cursor("x", CursorOptions::default())?;
                        drop(x);
                        extra.delete_cursor("x")?;
                    }
                    Ok(())
                })();
                if let Err(e) = r
                    && !benign(&e)
                {
                    errors
                        .lock()
                        .unwrap()
                        .push(format!("worker {w} round {round}: {e:?}"));
                }
                *progress.lock().unwrap() = Instant::now();
            }
        }));
    }
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        std::thread::sleep(Duration::from_millis(50));
        let last = *progress.lock().unwrap();
        assert!(
            last.elapsed() < Duration::from_secs(10),
            "no progress for 10 s: a hang"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(20);
    for h in handles {
        while !h.is_finished() {
            assert!(Instant::now() < deadline, "a worker hangs");
            std::thread::sleep(Duration::from_millis(10));
        }
        h.join().expect("worker");
    }
    let closed = store.close();
    drop(store);
    let errs = errors.lock().unwrap().clone();
    let mut problems: Vec<String> = Vec::new();
    let again = match Store::open_with_storage(
        Arc::new(disk.clone()),
        StoreConfig {
            ack_memory_bytes: Some(64 << 10),
            ..support::config::store_flushed(
                16,
                ackstore::CursorConfig::default().lru_capacity_bytes,
                2048,
                Duration::from_millis(3),
                2,
            )
        },
    ) {
        Ok(s) => s,
        Err(e) => {
            problems.push(format!(
                "the store, closed (Ok) and dropped with every handle of the application, \
                 cannot be opened again: {e:?} (something still holds its lock)"
            ));
            disk.break_lock();
            Store::open_with_storage(
                Arc::new(disk.clone()),
                StoreConfig {
                    ack_memory_bytes: Some(64 << 10),
                    ..support::config::store_flushed(
                        16,
                        ackstore::CursorConfig::default().lru_capacity_bytes,
                        2048,
                        Duration::from_millis(3),
                        2,
                    )
                },
            )
            .expect("reopen")
        }
    };
    problems.extend(errs.iter().take(10).cloned());
    if let Err(e) = &closed {
        problems.push(format!("store close: {e:?}"));
    }
    for w in 0..WORKERS {
        let t = w % TOPICS;
        let topic = again.topic(&format!("t{t}")).expect("topic");
        let cursor = topic
            .open_cursor(&format!("c{w}"), CursorOptions::default())
            .expect("cursor");
        let m = models[w].lock().unwrap();
        let mut lost = 0;
        let mut invented = 0;
        for p in &entries[t] {
            let acked = cursor.is_acked(*p).expect("is_acked");
            if acked && !m.truth.contains(p) {
                invented += 1;
            }
            if !acked && m.flushed.contains(p) {
                lost += 1;
            }
        }
        if lost + invented > 0 {
            problems.push(format!(
                "c{w}: {lost} flushed acks lost, {invented} invented"
            ));
        }
    }
    let by_kind: BTreeMap<String, usize> = errs.iter().fold(BTreeMap::new(), |mut m, e| {
        let k = e
            .split(": ")
            .nth(1)
            .unwrap_or("")
            .chars()
            .take(40)
            .collect();
        *m.entry(k).or_default() += 1;
        m
    });
    assert!(
        problems.is_empty(),
        "{problems:#?}\nerrors by kind: {by_kind:#?}"
    );
}

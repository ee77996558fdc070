//! Several threads on one reopened cursor (claim pending) under a tiny budget, while
//! a producer appends and rolls ledgers; the state after a clean close matches a model.

use crate::support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use ackstore::{
    CursorConfig, CursorOptions, LedgerConfig, ManagedLedger, MemStorage, PersistMode, Position,
};
use support::topic::append_n;

fn cfg(mode: PersistMode, lru: usize, interval: Option<std::time::Duration>) -> LedgerConfig {
    LedgerConfig {
        max_entries_per_ledger: 20,
        cursor: CursorConfig {
            persist_mode: mode,
            lru_capacity_bytes: lru,
            flush_interval: interval,
            ..CursorConfig::default()
        },
        ..LedgerConfig::default()
    }
}

fn open(disk: &MemStorage, c: &LedgerConfig) -> ManagedLedger {
    ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone()).unwrap()
}

fn scenario(mode: PersistMode, interval: Option<std::time::Duration>) {
    let c = cfg(mode, 0, interval);
    let disk = MemStorage::new();
    let topic = open(&disk, &c);
    let ps = append_n(&topic, 400);
    topic.sync().unwrap();
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    let mut made: BTreeSet<Position> = ps.iter().copied().skip(1).step_by(4).collect();
    for &p in &made {
        cur.ack(p).unwrap();
    }
    cur.close().unwrap();
    topic.close().unwrap();

    let topic = Arc::new(open(&disk, &c));
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let produced = Arc::new(Mutex::new(ps.clone()));
    std::thread::scope(|s| {
        // producer
        {
            let topic = topic.clone();
            let produced = produced.clone();
            s.spawn(move || {
                for p in append_n(&topic, 300) {
                    produced.lock().unwrap().push(p);
                }
            });
        }
        // ackers
        for t in 0..3u64 {
            let cur = cur.clone();
            let acked = acked.clone();
            let ps = ps.clone();
            s.spawn(move || {
                for (i, &p) in ps.iter().enumerate() {
                    if (i as u64) % 3 == t && i % 2 == 0 {
                        cur.ack(p).unwrap();
                        acked.lock().unwrap().insert(p);
                    }
                }
            });
        }
        // readers
        {
            let cur = cur.clone();
            let ps = ps.clone();
            s.spawn(move || {
                for _ in 0..5 {
                    for &p in ps.iter().step_by(7) {
                        cur.is_acked(p).unwrap();
                    }
                    cur.stats().unwrap();
                    cur.backlog().unwrap();
                    cur.read_entries(50).unwrap();
                    cur.acked_ranges().unwrap();
                }
            });
        }
        // flusher
        {
            let cur = cur.clone();
            s.spawn(move || {
                for _ in 0..20 {
                    cur.flush().unwrap();
                    std::thread::yield_now();
                }
            });
        }
    });
    made.extend(acked.lock().unwrap().iter().copied());
    cur.close().unwrap();
    Arc::try_unwrap(topic).ok().unwrap().close().unwrap();
    let topic = open(&disk.durable_image(), &c);
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    let all = produced.lock().unwrap().clone();
    let mark = cur.mark_delete_position().unwrap();
    let got: BTreeSet<Position> = all
        .iter()
        .copied()
        .filter(|&p| mark.is_some_and(|m| p <= m) || cur.is_acked(p).unwrap())
        .collect();
    assert_eq!(got, made, "{mode:?} {interval:?}");
}

#[test]
fn threads_on_a_reopened_cursor_multi() {
    scenario(PersistMode::MultiEntry, None);
}

#[test]
fn threads_on_a_reopened_cursor_single() {
    scenario(PersistMode::SingleEntry, None);
}

#[test]
fn threads_on_a_reopened_cursor_with_a_background_flusher() {
    scenario(
        PersistMode::MultiEntry,
        Some(std::time::Duration::from_millis(1)),
    );
}

/// Seeks and closes racing with acks: no panic, no deadlock, and after a clean close the
/// state is never more than what was acked since the last seek plus before.
#[test]
fn seeks_and_closes_racing_with_acks_on_a_reopened_cursor() {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        let c = cfg(mode, 0, None);
        let disk = MemStorage::new();
        let topic = open(&disk, &c);
        let ps = append_n(&topic, 300);
        topic.sync().unwrap();
        let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
        for &p in ps.iter().skip(1).step_by(4) {
            cur.ack(p).unwrap();
        }
        cur.close().unwrap();
        topic.close().unwrap();
        for round in 0..10 {
            let topic = open(&disk, &c);
            let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
            std::thread::scope(|s| {
                let a = cur.clone();
                let ps2 = ps.clone();
                s.spawn(move || {
                    for &p in ps2.iter().skip(round).step_by(5) {
                        let _ = a.ack(p);
                    }
                });
                let b = cur.clone();
                let target = ps[round * 7];
                s.spawn(move || {
                    let _ = b.seek(target);
                    let _ = b.is_acked(target);
                });
                let d = cur.clone();
                s.spawn(move || {
                    let _ = d.stats();
                    let _ = d.flush();
                });
            });
            cur.close().unwrap();
            topic.close().unwrap();
        }
    }
}

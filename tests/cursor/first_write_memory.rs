//! Invariant 3 (bounded memory) around the deferred claim of a reopened cursor.

use std::sync::Arc;

use ackstore::internals::ackset::MAX_PARTITION_BYTES;
use ackstore::{
    AppendMeta, Cursor, CursorOptions, LedgerConfig, ManagedLedger, MemStorage, PersistMode,
    Position,
};

use crate::support;

const PER_LEDGER: u64 = 6;

fn open(disk: &MemStorage, c: &LedgerConfig) -> ManagedLedger {
    ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone()).unwrap()
}

/// A topic of `n` batch entries (10 messages each) whose cursor "sub" acked a few whole
/// entries and closed.
fn prepared(disk: &MemStorage, c: &LedgerConfig, n: usize) -> Vec<Position> {
    prepared_every(disk, c, n, 5)
}

fn prepared_every(disk: &MemStorage, c: &LedgerConfig, n: usize, every: usize) -> Vec<Position> {
    let topic = open(disk, c);
    let ps: Vec<Position> = (0..n)
        .map(|i| {
            topic
                .append_with(
                    b"b",
                    AppendMeta {
                        num_messages: 10,
                        timestamp: 1000 + i as u64,
                    },
                )
                .unwrap()
        })
        .collect();
    topic.sync().unwrap();
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    for &p in ps.iter().skip(3).step_by(every) {
        cur.ack(p).unwrap();
    }
    cur.close().unwrap();
    topic.close().unwrap();
    ps
}

fn within(c: &Cursor, budget: usize, what: &str) {
    let s = c.stats().unwrap();
    let a = &s.ackset;
    assert_eq!(a.pinned_partitions, 0, "{what}: {s:?}");
    assert!(
        a.resident_bytes + a.charged_bytes <= budget + MAX_PARTITION_BYTES,
        "{what}: {} resident + {} partial bytes ({} partial entries) against a budget of \
         {budget}",
        a.resident_bytes,
        a.charged_bytes,
        s.partial_entries,
    );
}

/// What the first write of the reopened cursor is.
#[derive(Debug, Clone, Copy)]
enum First {
    Flush,
    Seek,
    SeekByIndexInBatch,
    Rewind,
}

fn batch_acks_after(first: First, mode: PersistMode) {
    let budget = 1024;
    let c = support::config::topic(PER_LEDGER, mode, budget);
    let disk = MemStorage::new();
    let ps = prepared(&disk, &c, 1200);
    let topic = open(&disk, &c);
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    match first {
        First::Flush => {
            cur.ack(ps[0]).unwrap();
            cur.flush().unwrap();
        }
        First::Seek => cur.seek(ps[0]).unwrap(),
        First::SeekByIndexInBatch => cur.seek_by_index(3).unwrap(),
        First::Rewind => cur.rewind().unwrap(),
    }
    for (i, &p) in ps.iter().enumerate().skip(1) {
        if cur.is_acked(p).unwrap() {
            continue;
        }
        cur.ack_batch_index(p, 7, 10).unwrap();
        if i % 50 == 0 {
            within(
                &cur,
                budget,
                &format!("{mode:?} {first:?}: after {i} batch acks"),
            );
        }
    }
    within(&cur, budget, &format!("{mode:?} {first:?}: at the end"));
    cur.close().unwrap();
    topic.close().unwrap();
}

#[test]
fn control_batch_acks_after_a_first_flush_stay_within_budget() {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        batch_acks_after(First::Flush, mode);
    }
}

#[test]
fn batch_acks_after_a_first_write_that_is_a_seek_stay_within_budget() {
    batch_acks_after(First::Seek, PersistMode::MultiEntry);
}

#[test]
fn batch_acks_after_a_first_write_that_is_a_seek_single_entry() {
    batch_acks_after(First::Seek, PersistMode::SingleEntry);
}

#[test]
fn batch_acks_after_a_first_write_that_is_a_seek_by_index_in_a_batch() {
    batch_acks_after(First::SeekByIndexInBatch, PersistMode::MultiEntry);
}

#[test]
fn batch_acks_after_a_rewind_stay_within_budget() {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        batch_acks_after(First::Rewind, mode);
    }
}

#[test]
fn batch_acks_with_no_first_write_stay_within_budget() {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        let budget = 1024;
        let c = support::config::topic(PER_LEDGER, mode, budget);
        let disk = MemStorage::new();
        let ps = prepared(&disk, &c, 1200);
        let topic = open(&disk, &c);
        let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
        for (i, &p) in ps.iter().enumerate() {
            if cur.is_acked(p).unwrap() {
                continue;
            }
            cur.ack_batch_index(p, 7, 10).unwrap();
            if i % 50 == 0 {
                within(&cur, budget, &format!("{mode:?}: after {i} batch acks"));
            }
        }
        within(&cur, budget, &format!("{mode:?}: at the end"));
        cur.close().unwrap();
        topic.close().unwrap();
    }
}

/// Whole-entry acks after a seek as the first write: the ack set's stores were resumed by the
/// seek's clear, so this stays bounded (scopes the batch finding to partial entries).
#[test]
fn whole_entry_acks_after_a_first_write_that_is_a_seek_stay_within_budget() {
    let budget = 1024;
    let c = support::config::topic(PER_LEDGER, PersistMode::MultiEntry, budget);
    let disk = MemStorage::new();
    let ps = prepared(&disk, &c, 1200);
    let topic = open(&disk, &c);
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    cur.seek(ps[0]).unwrap();
    for (i, &p) in ps.iter().enumerate().skip(1).step_by(2) {
        cur.ack(p).unwrap();
        if i % 51 == 0 {
            within(&cur, budget, &format!("after {i} acks"));
        }
    }
    cur.close().unwrap();
    topic.close().unwrap();
}

/// After a seek as the first write, partial entries pile up in memory; the next flush brings
/// them back within the budget, and a reopen finds every partial ack (no data lost).
#[test]
fn partial_entries_held_after_a_seek_are_kept_by_the_next_flush() {
    let budget = 1024;
    let c = support::config::topic(PER_LEDGER, PersistMode::MultiEntry, budget);
    let disk = MemStorage::new();
    let ps = prepared(&disk, &c, 600);
    let topic = open(&disk, &c);
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    cur.seek(ps[0]).unwrap();
    for &p in &ps {
        cur.ack_batch_index(p, 7, 10).unwrap();
    }
    let peak = cur.stats().unwrap().batch_index_bytes;
    cur.flush().unwrap();
    cur.ack_batch_index(ps[0], 8, 10).unwrap();
    within(&cur, budget, &format!("after the next flush (peak {peak})"));
    cur.close().unwrap();
    topic.close().unwrap();
    let topic = open(&disk, &c);
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    for (i, &p) in ps.iter().enumerate() {
        assert!(cur.is_batch_index_acked(p, 7).unwrap(), "{i}");
        assert!(!cur.is_batch_index_acked(p, 6).unwrap(), "{i}");
    }
}

/// Single-entry mode with a recovered state small enough that the open makes no claim: a seek
/// as the first write leaves partial entries unbounded too.
#[test]
fn batch_acks_after_a_seek_single_entry_small_history() {
    let budget = 1024;
    let c = support::config::topic(PER_LEDGER, PersistMode::SingleEntry, budget);
    let disk = MemStorage::new();
    let ps = prepared_every(&disk, &c, 1200, 1000);
    let topic = open(&disk, &c);
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    cur.seek(ps[0]).unwrap();
    for (i, &p) in ps.iter().enumerate().skip(1) {
        cur.ack_batch_index(p, 7, 10).unwrap();
        if i % 50 == 0 {
            within(
                &cur,
                budget,
                &format!("SingleEntry seek: after {i} batch acks"),
            );
        }
    }
    cur.close().unwrap();
    topic.close().unwrap();
}

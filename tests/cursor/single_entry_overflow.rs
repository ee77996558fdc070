//! A reopened single-entry cursor whose state outgrows `max_ranges_single_entry`
//! (OverflowPolicy::Error, the default) before its first flush: its flushes are refused, but
//! its evictions go on to the journal, so it stays within the budget, as a cursor created by
//! this owner does in the same situation (invariant 3). The takeover case below is the
//! cursor-ledger writer's deferred claim.

use crate::support;

use std::sync::Arc;

use ackstore::internals::ackset::MAX_PARTITION_BYTES;
use ackstore::{
    CursorConfig, CursorOptions, LedgerConfig, ManagedLedger, MemStorage, OverflowPolicy,
    PersistMode, Position,
};
use support::topic::append_n;

const BUDGET: usize = 2048;

fn cfg() -> LedgerConfig {
    LedgerConfig {
        max_entries_per_ledger: 100,
        cursor: CursorConfig {
            persist_mode: PersistMode::SingleEntry,
            lru_capacity_bytes: BUDGET,
            max_ranges_single_entry: 100,
            on_single_entry_overflow: OverflowPolicy::Error,
            ..CursorConfig::default()
        },
        ..LedgerConfig::default()
    }
}

fn acks_past_the_snapshot_limit(reopened: bool) -> (usize, usize) {
    let c = cfg();
    let disk = MemStorage::new();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone()).unwrap();
    let ps: Vec<Position> = append_n(&topic, 30000);
    topic.sync().unwrap();
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    cur.ack(ps[1]).unwrap();
    cur.close().unwrap();
    let (topic, cur) = if reopened {
        topic.close().unwrap();
        let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c).unwrap();
        let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
        (topic, cur)
    } else {
        // The same topic handle: a cursor created by this owner.
        let cur = topic
            .open_cursor("fresh", CursorOptions::default())
            .unwrap();
        cur.ack(ps[1]).unwrap();
        cur.flush().unwrap();
        (topic, cur)
    };
    let mut worst = 0;
    for &p in ps.iter().skip(3).step_by(2) {
        cur.ack(p).unwrap();
        let s = cur.stats().unwrap().ackset;
        worst = worst.max(s.resident_bytes + s.charged_bytes);
    }
    assert!(
        cur.flush().is_err(),
        "the snapshot does not fit: the flush is refused"
    );
    drop(cur);
    drop(topic);
    (worst, BUDGET + MAX_PARTITION_BYTES)
}

#[test]
fn control_a_claimed_cursor_stays_within_the_budget_past_the_snapshot_limit() {
    let (worst, bound) = acks_past_the_snapshot_limit(false);
    assert!(worst <= bound, "{worst} > {bound}");
}

#[test]
fn a_reopened_cursor_stays_within_the_budget_past_the_snapshot_limit() {
    let (worst, bound) = acks_past_the_snapshot_limit(true);
    assert!(worst <= bound, "{worst} resident bytes > {bound}");
}

/// The same shape with a takeover instead of a snapshot limit: a handle whose claim is pending
/// when a newer owner takes the topic can never claim (every attempt is fenced), so its
/// evictions stay held and its memory grows with every ack; a handle that had claimed keeps
/// storing its evictions (to a ledger nobody reads) and stays within the budget.
fn acks_after_a_takeover(claimed_before: bool) -> usize {
    // The deferred claim is the cursor-ledger writer's.
    let c = LedgerConfig {
        cursor: CursorConfig {
            persist_mode: PersistMode::MultiEntry,
            ..cfg().cursor
        },
        ..cfg()
    };
    let disk = MemStorage::new();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone()).unwrap();
    let ps: Vec<Position> = append_n(&topic, 30000);
    topic.sync().unwrap();
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    cur.ack(ps[1]).unwrap();
    cur.close().unwrap();
    topic.close().unwrap();
    let old = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone()).unwrap();
    let cur = old.open_cursor("sub", CursorOptions::default()).unwrap();
    if claimed_before {
        cur.ack(ps[3]).unwrap();
        cur.flush().unwrap();
    }
    disk.break_lock();
    let _new = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c).unwrap();
    let mut worst = 0;
    for &p in ps.iter().skip(5).step_by(2) {
        cur.ack(p).unwrap();
        let s = cur.stats().unwrap().ackset;
        worst = worst.max(s.resident_bytes + s.charged_bytes);
    }
    worst
}

#[test]
fn control_a_fenced_handle_that_had_claimed_stays_within_the_budget() {
    let worst = acks_after_a_takeover(true);
    assert!(worst <= BUDGET + MAX_PARTITION_BYTES, "{worst}");
}

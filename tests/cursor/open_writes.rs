//! What opening an existing cursor writes (docs/format.md, "Topic directory", the write-step
//! table): nothing, unless a single-entry snapshot of a cursor ledger recovered past the budget
//! makes the claim at once; and what a rewind before the claim writes: the record only, naming
//! the recovered ledger.

use crate::support;

use std::sync::Arc;

use ackstore::{CursorOptions, ManagedLedger, MemStorage, PersistMode};
use support::topic::append_n;

/// Storage writes of `open_cursor` of a reopened cursor, and whether it moved the cursor to a
/// fresh ledger (the claim).
fn opening_writes(mode: PersistMode, lru: usize) -> (u64, bool) {
    let mut c = support::config::topic(50, mode, lru);
    if mode == PersistMode::SingleEntry {
        // The claim is the cursor-ledger writer's.
        c = support::config::on_cursor_ledgers(c);
    }
    let disk = MemStorage::new();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone()).unwrap();
    let ps = append_n(&topic, 500);
    topic.sync().unwrap();
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    for &p in ps.iter().skip(1).step_by(2) {
        cur.ack(p).unwrap();
    }
    let recovered_on = cur.stats().unwrap().persist.cursor_ledger;
    cur.close().unwrap();
    topic.close().unwrap();
    drop(topic);
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c).unwrap();
    let before = disk.mutations();
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    let wrote = disk.mutations() - before;
    (
        wrote,
        cur.stats().unwrap().persist.cursor_ledger != recovered_on,
    )
}

#[test]
fn reopening_a_multi_entry_cursor_under_a_tiny_budget_writes_nothing() {
    assert_eq!(opening_writes(PersistMode::MultiEntry, 0).0, 0);
}

/// A snapshot's partitions are unsaved once recovered (no entry of their own an eviction could
/// drop them to): past the budget, the open makes the claim at once.
#[test]
fn reopening_a_single_entry_cursor_past_its_budget_claims_at_once() {
    let (wrote, claimed) = opening_writes(PersistMode::SingleEntry, 0);
    assert!(wrote > 0 && claimed, "{wrote} writes, claimed: {claimed}");
    let (wrote, _) = opening_writes(PersistMode::SingleEntry, 1 << 20);
    assert_eq!(wrote, 0, "within the budget nothing is written");
}

/// A rewind before the first write writes the cursor record (the new epoch, by compare-and-set)
/// and keeps the recovered ledger: no claim.
#[test]
fn a_rewind_before_the_first_write_writes_the_record_and_keeps_the_recovered_ledger() {
    let c = support::config::topic(50, PersistMode::MultiEntry, 1 << 20);
    let disk = MemStorage::new();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone()).unwrap();
    let ps = append_n(&topic, 100);
    topic.sync().unwrap();
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    cur.ack(ps[3]).unwrap();
    cur.close().unwrap();
    topic.close().unwrap();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone()).unwrap();
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    let recovered_on = cur.stats().unwrap().persist.cursor_ledger;
    let epoch = cur.epoch().unwrap();
    let before = disk.mutations();
    cur.rewind().unwrap();
    assert!(disk.mutations() > before, "the rewind wrote the record");
    assert_eq!(cur.stats().unwrap().persist.cursor_ledger, recovered_on);
    drop(cur);
    topic.close().unwrap();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c).unwrap();
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    assert_eq!(
        cur.epoch().unwrap(),
        epoch + 1,
        "the rewind's epoch is durable"
    );
    assert!(cur.is_acked(ps[3]).unwrap());
}

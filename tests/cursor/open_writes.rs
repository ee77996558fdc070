//! What opening an existing multi-entry cursor writes (docs/format.md, "Topic directory", the
//! write-step table): nothing; and what a rewind before the first write writes: the record,
//! with the new epoch.

use crate::support;

use std::sync::Arc;

use ackstore::{CursorOptions, ManagedLedger, MemStorage, PersistMode};
use support::topic::append_n;

/// Storage writes of `open_cursor` of a reopened cursor of `mode` within `lru` bytes.
fn opening_writes(mode: PersistMode, lru: usize) -> u64 {
    let c = support::config::topic(50, mode, lru);
    let disk = MemStorage::new();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone()).unwrap();
    let ps = append_n(&topic, 500);
    topic.sync().unwrap();
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    for &p in ps.iter().skip(1).step_by(2) {
        cur.ack(p).unwrap();
    }
    cur.close().unwrap();
    topic.close().unwrap();
    drop(topic);
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c).unwrap();
    let before = disk.mutations();
    let _cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    disk.mutations() - before
}

#[test]
fn reopening_a_multi_entry_cursor_under_a_tiny_budget_writes_nothing() {
    assert_eq!(opening_writes(PersistMode::MultiEntry, 0), 0);
}

/// A rewind before the first write writes the cursor record (the new epoch, by compare-and-set).
#[test]
fn a_rewind_before_the_first_write_writes_the_record_with_its_epoch() {
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
    let epoch = cur.epoch().unwrap();
    let before = disk.mutations();
    cur.rewind().unwrap();
    assert!(disk.mutations() > before, "the rewind wrote the record");
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

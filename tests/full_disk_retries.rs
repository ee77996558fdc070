//! Retried closes, seeks and evictions on a full disk: a call that returned `Ok` persisted
//! everything, and one that could not says so.

mod ledger_support;

use std::sync::Arc;

use ackstore::Error;
use ackstore::cursor::{CursorConfig, PersistMode};
use ackstore::ledger::{CursorOptions, LedgerConfig, ManagedLedger};
use ackstore::storage::MemStorage;

fn config(lru: usize) -> LedgerConfig {
    LedgerConfig {
        max_entries_per_ledger: 20,
        cursor: CursorConfig {
            persist_mode: PersistMode::MultiEntry,
            lru_capacity_bytes: lru,
            cursor_ledger_max_entries: 64,
            ..CursorConfig::default()
        },
        ..LedgerConfig::default()
    }
}

fn open_mem(disk: &MemStorage, cfg: &LedgerConfig) -> ackstore::Result<ManagedLedger> {
    ManagedLedger::open_with_storage(Arc::new(disk.clone()), cfg.clone())
}

#[test]
fn a_retried_topic_close_after_a_failed_cursor_flush_never_returns_ok_without_the_acks() {
    let disk = MemStorage::new();
    let cfg = config(1 << 20);
    let topic = open_mem(&disk, &cfg).unwrap();
    let positions = ledger_support::append_n(&topic, 60);
    topic.sync().unwrap();
    let cursor = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    cursor.ack(positions[3]).unwrap();
    cursor.flush().unwrap();
    disk.set_capacity(Some(disk.used_bytes()));
    cursor.ack(positions[17]).unwrap();
    cursor.ack(positions[42]).unwrap();
    assert!(topic.close().is_err(), "no space to persist the acks");
    disk.set_capacity(None);
    assert!(
        matches!(topic.close(), Err(Error::Closed)),
        "a retried topic close returned Ok although the acks of its failed close are lost"
    );
    assert!(
        cursor.close().is_err(),
        "the cursor's close never says Ok either"
    );
    drop(topic);
    let topic = open_mem(&disk, &cfg).unwrap();
    let c = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    assert!(c.is_acked(positions[3]).unwrap(), "the flushed ack is kept");
}

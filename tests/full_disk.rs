//! A full file system: a failed `flush` or `close` guarantees nothing new and says so, and a
//! retry once space is free persists everything acked so far.

mod ledger_support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::cursor::{CursorConfig, PersistMode};
use ackstore::ledger::{CursorOptions, LedgerConfig, ManagedLedger};
use ackstore::storage::{MemStorage, Storage};
use ackstore::{Cursor, Error, Position};

const PER_LEDGER: u64 = 20;

fn config(mode: PersistMode, lru: usize) -> LedgerConfig {
    LedgerConfig {
        max_entries_per_ledger: PER_LEDGER,
        cursor: CursorConfig {
            persist_mode: mode,
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

fn is_enospc(e: &Error) -> bool {
    let text = e.to_string();
    matches!(e, Error::Io { source, .. } if source.raw_os_error() == Some(28))
        || text.contains("No space left")
}

fn ledger_files(disk: &MemStorage) -> BTreeSet<String> {
    disk.list()
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with("ledger-"))
        .collect()
}

/// A topic with `n` synced entries over several data ledgers, and cursor `sub`.
fn topic_with_entries(
    disk: &MemStorage,
    cfg: &LedgerConfig,
    n: u64,
) -> (ManagedLedger, Cursor, Vec<Position>) {
    let topic = open_mem(disk, cfg).expect("open");
    let positions = ledger_support::append_n(&topic, n);
    topic.sync().expect("sync");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    (topic, cursor, positions)
}

#[test]
fn a_retried_close_after_enospc_fails_until_space_is_free_then_persists_every_ack() {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        let disk = MemStorage::new();
        let cfg = config(mode, 1 << 20);
        let (topic, cursor, positions) = topic_with_entries(&disk, &cfg, 60);
        cursor.ack(positions[2]).unwrap();
        cursor.flush().expect("flush with space");
        disk.set_capacity(Some(disk.used_bytes()));
        for p in [5, 7, 30, 41] {
            cursor.ack(positions[p]).expect("an ack needs no space");
        }
        let first = cursor.close().expect_err("no space to persist the acks");
        assert!(is_enospc(&first), "{mode:?}: {first}");
        let again = cursor.close();
        assert!(
            again.is_err(),
            "{mode:?}: a retried close returned Ok without space to persist"
        );
        let flushed = cursor.flush();
        assert!(flushed.is_err(), "{mode:?}: a flush returned Ok on a full disk");
        disk.set_capacity(None);
        cursor
            .close()
            .expect("a retried close persists once space is free");
        assert!(cursor.close().is_ok(), "closing a closed cursor is idempotent");
        drop(topic);
        let topic = open_mem(&disk, &cfg).expect("reopen");
        let c = topic.open_cursor("sub", CursorOptions::default()).unwrap();
        for p in [2, 5, 7, 30, 41] {
            assert!(c.is_acked(positions[p]).unwrap(), "{mode:?}: ack of {p} lost");
        }
        assert_eq!(c.stats().unwrap().acked_entries, 5, "{mode:?}");
    }
}

#[test]
fn a_retried_flush_after_enospc_moves_to_a_fresh_cursor_ledger_and_persists() {
    let disk = MemStorage::new();
    let cfg = config(PersistMode::MultiEntry, 1 << 20);
    let (topic, cursor, positions) = topic_with_entries(&disk, &cfg, 60);
    cursor.ack(positions[1]).unwrap();
    cursor.flush().unwrap();
    let before = cursor.stats().unwrap().persist.cursor_ledger;
    disk.set_capacity(Some(disk.used_bytes()));
    cursor.ack(positions[9]).unwrap();
    assert!(cursor.flush().is_err());
    assert!(cursor.flush().is_err(), "still full");
    disk.set_capacity(None);
    cursor.ack(positions[11]).unwrap();
    cursor.flush().expect("a retried flush once space is free");
    let after = cursor.stats().unwrap().persist.cursor_ledger;
    assert_ne!(before, after, "the latched cursor ledger is left behind");
    // Power is cut right after the flush returned.
    let image = disk.durable_image();
    drop(topic);
    let topic = open_mem(&image, &cfg).expect("reopen");
    let c = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    for p in [1, 9, 11] {
        assert!(c.is_acked(positions[p]).unwrap(), "ack of {p} lost");
    }
    // The abandoned ledger does not outlive the next open.
    assert!(!ledger_files(&image).contains(&format!(
        "ledger-{:020}.log",
        before.expect("a cursor ledger")
    )));
}


//! Retried closes, seeks and evictions on a full disk: a call that returned `Ok` persisted
//! everything, and one that could not says so.

use crate::support;

use std::sync::Arc;

use ackstore::Error;
use ackstore::MemStorage;
use ackstore::{CursorOptions, LedgerConfig, ManagedLedger};

fn open_mem(disk: &MemStorage, cfg: &LedgerConfig) -> ackstore::Result<ManagedLedger> {
    ManagedLedger::open_with_storage(Arc::new(disk.clone()), cfg.clone())
}

#[test]
fn a_retried_topic_close_after_a_failed_cursor_flush_never_returns_ok_without_the_acks() {
    let disk = MemStorage::new();
    let cfg = support::config::topic(20, ackstore::PersistMode::MultiEntry, 1 << 20);
    let topic = open_mem(&disk, &cfg).unwrap();
    let positions = support::topic::append_n(&topic, 60);
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

/// Acks every other entry of `ledgers` data ledgers of `per_ledger` entries on a full disk
/// with a budget of nothing, after a first flush created the cursor ledger; the flush fails;
/// space is freed; a flush, a power cut, and every ack is there. With `reach_disk`, the
/// evictions are checked to have met the full disk (not only the write buffer).
fn acks_evicted_on_a_full_disk_are_kept_by_the_retried_flush(
    per_ledger: u64,
    ledgers: u64,
    reach_disk: bool,
) {
    let disk = MemStorage::new();
    let mut cfg = support::config::topic(20, ackstore::PersistMode::MultiEntry, 0);
    cfg.max_entries_per_ledger = per_ledger;
    let topic = open_mem(&disk, &cfg).unwrap();
    let positions = support::topic::append_n(&topic, per_ledger * ledgers);
    topic.sync().unwrap();
    let cursor = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    cursor.ack(positions[1]).unwrap();
    cursor.flush().unwrap();
    disk.set_capacity(Some(disk.used_bytes()));
    let mut acked: Vec<usize> = (3..positions.len()).step_by(2).collect();
    for &i in &acked {
        cursor.ack(positions[i]).unwrap();
        // A look at the first ledger's partition makes the one just changed leave memory (the
        // budget is nothing): every ack is an eviction write.
        cursor.is_acked(positions[1]).unwrap();
    }
    if reach_disk {
        let s = cursor.stats().unwrap().ackset;
        assert!(s.store_failures > 0, "an eviction met the full disk: {s:?}");
    }
    assert!(cursor.flush().is_err(), "no space to flush");
    disk.set_capacity(None);
    cursor
        .flush()
        .expect("the retried flush once space is free");
    acked.push(1);
    let image = disk.durable_image();
    drop(topic);
    let topic = open_mem(&image, &cfg).unwrap();
    let c = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    for (i, &p) in positions.iter().enumerate() {
        assert_eq!(c.is_acked(p).unwrap(), acked.contains(&i), "entry {i}");
    }
}

#[test]
fn acks_whose_evictions_were_only_buffered_when_the_disk_filled_are_kept_by_the_retried_flush() {
    acks_evicted_on_a_full_disk_are_kept_by_the_retried_flush(10, 30, false);
}

#[test]
fn acks_whose_evictions_reached_the_full_disk_are_kept_by_the_retried_flush() {
    acks_evicted_on_a_full_disk_are_kept_by_the_retried_flush(4_000, 12, true);
}

#[test]
fn a_seek_and_a_rewind_on_a_full_disk_with_pinned_partitions_change_nothing_and_work_once_space_is_free()
 {
    let disk = MemStorage::new();
    let mut cfg = support::config::topic(20, ackstore::PersistMode::MultiEntry, 0);
    cfg.max_entries_per_ledger = 4_000;
    let topic = open_mem(&disk, &cfg).unwrap();
    let positions = support::topic::append_n(&topic, 40_000);
    topic.sync().unwrap();
    let cursor = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    cursor.ack(positions[1]).unwrap();
    cursor.flush().unwrap();
    disk.set_capacity(Some(disk.used_bytes()));
    let acked: Vec<usize> = (3..40_000).step_by(2).collect();
    for &i in &acked {
        cursor.ack(positions[i]).unwrap();
        // The precondition, made here: a look at the first ledger's partition makes the one
        // just changed leave memory (the budget is nothing), so every ack is an eviction
        // write; they overflow the entry log's write buffer onto the full disk and pin.
        cursor.is_acked(positions[1]).unwrap();
    }
    assert!(cursor.stats().unwrap().ackset.pinned_partitions > 0);
    let epoch = cursor.epoch().unwrap();
    assert!(
        cursor.seek(positions[20_000]).is_err(),
        "no space for the seek"
    );
    assert!(cursor.rewind().is_err() || cursor.epoch().unwrap() == epoch + 1);
    let epoch = cursor.epoch().unwrap();
    for &i in &acked {
        assert!(
            cursor.is_acked(positions[i]).unwrap(),
            "a failed seek kept {i}"
        );
    }
    assert_eq!(cursor.mark_delete_position().unwrap(), None);
    disk.set_capacity(None);
    cursor
        .seek(positions[20_000])
        .expect("the seek once space is free");
    assert_eq!(cursor.epoch().unwrap(), epoch + 1);
    let s = cursor.stats().unwrap().ackset;
    assert_eq!(s.pinned_partitions, 0, "{s:?}");
    assert!(
        s.resident_bytes <= ackstore::internals::ackset::MAX_PARTITION_BYTES,
        "back within the budget: {s:?}"
    );
    cursor.ack(positions[20_003]).unwrap();
    cursor.flush().unwrap();
    let image = disk.durable_image();
    drop(topic);
    let topic = open_mem(&image, &cfg).unwrap();
    let c = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    for (i, &p) in positions.iter().enumerate() {
        let expected = i < 20_000 || i == 20_003;
        assert_eq!(c.is_acked(p).unwrap(), expected, "entry {i} after the seek");
    }
}

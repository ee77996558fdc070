//! A store's open scans its journal into an index of its cursors: every partition record seen
//! (for the markers after it to name) and every cursor's committed chain. What that scan
//! allocates in large blocks, freed or not (memory an allocator takes fresh from the system,
//! which clears each page at its first touch: [`super::large_allocated`]), is held under a
//! bound per record and per cursor. A restart of 100,000 cursors scanned about 270,000
//! partition records into hash tables rebuilt at every doubling, and its index of cursors
//! held entries of over 300 bytes in a table rebuilt the same way: a quarter of the restart's
//! page faults (issue 23).

use std::time::Duration;

use ackstore::{CursorConfig, CursorOptions, LedgerConfig, Store, StoreConfig};

use super::large_allocated;

fn config() -> StoreConfig {
    StoreConfig {
        ledger: LedgerConfig {
            cursor: CursorConfig {
                flush_interval: Some(Duration::from_secs(3600)),
                ..CursorConfig::default()
            },
            ..LedgerConfig::default()
        },
        flusher_threads: 0,
        ..StoreConfig::default()
    }
}

/// A store of one topic of `cursors` cursors, each acked once more before each of `ticks`
/// flushes (a partition record and a marker or delta per cursor per tick), closed. Returns the
/// partition records the flushes wrote.
fn populate(dir: &std::path::Path, cursors: usize, ticks: u64) -> u64 {
    let store = Store::open(dir, config()).expect("open the store");
    let topic = store
        .topic("persistent://tenant/ns/scanned")
        .expect("topic");
    for i in 0..(ticks as u32 + 2) {
        topic.append(&i.to_le_bytes()).expect("append");
    }
    topic.sync().expect("sync");
    let opened: Vec<_> = (0..cursors)
        .map(|c| {
            topic
                .open_cursor(&format!("sub-{c}"), CursorOptions::default())
                .expect("cursor")
        })
        .collect();
    let entries = opened[0].read_entries(ticks as usize + 2).expect("read");
    let mut records = 0;
    for tick in 0..ticks {
        for cursor in &opened {
            // Entry 0 stays unacked: each ack is a hole above the mark-delete.
            cursor
                .ack(entries[1 + tick as usize].position)
                .expect("ack");
        }
        let flushed = store.flush_all().expect("flush");
        assert_eq!(flushed.cursors, cursors as u64, "tick {tick}: every cursor");
        records += flushed.partitions;
    }
    drop(opened);
    topic.close().expect("close the topic");
    store.close().expect("close the store");
    records
}

/// Reopens a store of `cursors` cursors flushed `ticks` times (`populate`), checks that every
/// cursor's state came back, and holds the large blocks its open allocated under the bound.
fn scan_within_bound(cursors: usize, ticks: u64) {
    // On a memory-backed file system where there is one: each cursor's creation syncs the
    // topic's records, which a disk makes the most of this test's time.
    let dir = super::fds::files_dir();
    let records = populate(dir.path(), cursors, ticks);
    assert!(
        records >= cursors as u64 * ticks,
        "{records} partition records: one a cursor a tick at least"
    );
    let before = large_allocated();
    let store = Store::open(dir.path(), config()).expect("reopen the store");
    let scanned = large_allocated() - before;
    // Every cursor's state came back: the scan indexed every cursor.
    let topic = store
        .topic("persistent://tenant/ns/scanned")
        .expect("topic");
    for c in [0, cursors / 2, cursors - 1] {
        let cursor = topic
            .open_cursor(&format!("sub-{c}"), CursorOptions::default())
            .expect("cursor");
        let read = cursor.read_entries(1).expect("read");
        assert_eq!(read[0].position.entry_id, 0, "cursor {c}: entry 0 unacked");
        let read = cursor.read_entries(1).expect("read");
        assert_eq!(
            read[0].position.entry_id,
            ticks + 1,
            "cursor {c}: entries 1 to {ticks} acked"
        );
    }
    topic.close().expect("close the topic");
    store.close().expect("close the store");
    let bound = BOUND_FIXED + BOUND_PER_RECORD * records as usize + BOUND_PER_CURSOR * cursors;
    eprintln!(
        "journal scan: {scanned} bytes in large blocks for {records} partition records of \
         {cursors} cursors (bound {bound})"
    );
    assert!(
        scanned <= bound,
        "the journal scan allocated {scanned} bytes in large blocks for {records} partition \
         records of {cursors} cursors, over {bound}"
    );
}

#[test]
fn a_stores_journal_scan_allocates_little_per_partition_record() {
    scan_within_bound(1_000, 8);
}

#[test]
fn a_stores_journal_scan_allocates_little_per_cursor() {
    scan_within_bound(4_000, 1);
}

// Measured: 1,662,976 bytes for 8,000 records of 1,000 cursors, 2,318,336 for 16,000 of 1,000
// and 6,590,496 for 64,000 of 4,000 (about 1 MB whatever the counts, and 82 bytes a record);
// with the hash tables 5,483,408 bytes for 8,000 of 1,000.

/// Large blocks an open allocates whatever the journal holds.
const BOUND_FIXED: usize = 2 << 20;
/// Bytes per partition record seen: an 80-byte entry of the sorted vector that notes it, with
/// the vector's room to grow (up to twice its length). A hash table of 112-byte entries took
/// 256 to 512 a record over its doublings.
const BOUND_PER_RECORD: usize = 170;
/// Bytes per cursor: the index's slot of a boxed entry (24 bytes) over its table's doublings.
/// A table of the entries themselves (over 300 bytes) took 800 to 1,600.
const BOUND_PER_CURSOR: usize = 200;

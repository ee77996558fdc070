//! Known failure (not compiled into the suite; copy into tests/ to run it).
//!
//! A marker's batch table when partial entries spread over more partitions than one entry
//! holds rows for: the flush must still succeed (no cap on partial entries) and keep them all.
//! Today the batch table is always inline in the marker (32 bytes a partition, never paged like
//! the partition table), so once the partitions holding partial entries need more than the
//! largest entry, every flush fails with `EntryTooLarge` until enough of those entries are
//! completed: nothing acknowledged after that is made durable. With the default 5 MiB entry
//! that is about 160,000 partitions (ledgers or chunks) holding a partial entry each; here
//! a 4 KiB entry shows it with 399.

mod support;

use std::sync::Arc;

use ackstore::{
    AppendMeta, CursorConfig, InitialPosition, LedgerConfig, ManagedLedger, MemStorage, Position,
};
use support::topic::{at, config};

#[test]
fn known_partial_entries_in_more_partitions_than_a_marker_holds_rows_for_are_flushed() {
    let cursor = CursorConfig {
        max_entry_size: 4096,
        ..CursorConfig::default()
    };
    let base = config(1);
    let cfg = LedgerConfig {
        cursor,
        log: ackstore::LogConfig {
            max_entry_size: 4096,
            ..base.log
        },
        ..base
    };
    let disk = MemStorage::new();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), cfg.clone()).unwrap();
    let positions: Vec<Position> = (0..400)
        .map(|i| {
            topic
                .append_with(
                    format!("b{i}").as_bytes(),
                    AppendMeta {
                        num_messages: 4,
                        timestamp: 1,
                    },
                )
                .unwrap()
        })
        .collect();
    topic.sync().unwrap();
    let c = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    for &p in &positions[1..] {
        c.ack_batch_index(p, 1, 4).unwrap();
    }
    let flushed = c.flush();
    assert!(flushed.is_ok(), "{flushed:?}");
    // Acks keep working and flushing after it.
    c.ack(positions[0]).unwrap();
    c.flush().unwrap();
    drop(c);
    drop(topic);
    let image = disk.durable_image();
    let topic = ManagedLedger::open_with_storage(Arc::new(image), cfg).unwrap();
    let c = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    for &p in &positions[1..] {
        assert!(c.is_batch_index_acked(p, 1).unwrap(), "{p}");
        assert!(!c.is_batch_index_acked(p, 2).unwrap(), "{p}");
    }
    assert_eq!(c.mark_delete_position().unwrap(), Some(positions[0]));
    topic.close().unwrap();
}

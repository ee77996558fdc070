//! Known failure (not compiled into the suite; copy into tests/ to run it).
//!
//! `set_property` promises the properties a room such that every later marker fits in one
//! entry (`property_room`: the largest entry less a marker's fixed part and its largest inline
//! partition table), but the marker's batch table (32 bytes for each partition holding a
//! partially acknowledged entry, always inline) is not counted. Properties filling that room
//! plus a full inline table, then one batch-index ack: every flush fails with `EntryTooLarge`
//! until properties are removed or the partial entries completed.

mod support;

use ackstore::{Cursor, InitialPosition, ManagedLedger};
use support::topic::{append_n, at};

fn earliest(topic: &ManagedLedger, name: &str) -> Cursor {
    topic
        .open_cursor(name, at(InitialPosition::Earliest, false))
        .unwrap()
}

/// Properties as large as `set_property` accepts, a partition table as large as a marker holds
/// inline, then partially acknowledged entries: the room the properties were promised must
/// still hold the marker's batch table, or every later flush fails.
#[test]
fn known_properties_filling_their_room_leave_space_for_partial_entries() {
    let base = support::topic::config(4);
    let rows = 16;
    let cfg = ackstore::LedgerConfig {
        cursor: ackstore::CursorConfig {
            max_entry_size: 4096,
            index_page_rows: rows,
            ..ackstore::CursorConfig::default()
        },
        log: ackstore::LogConfig {
            max_entry_size: 4096,
            ..base.log
        },
        ..base
    };
    let topic =
        ManagedLedger::open_with_storage(std::sync::Arc::new(ackstore::MemStorage::new()), cfg)
            .unwrap();
    let p = append_n(&topic, 4 * rows as u64 + 8);
    let c = earliest(&topic, "sub");
    // One hole in each of `rows` ledgers: the marker's inline table is full.
    for l in 0..rows {
        c.ack(p[4 * l + 2]).unwrap();
    }
    let mut k = 0;
    while c
        .set_property(&format!("property-{k:04}"), i64::MAX)
        .is_ok()
    {
        k += 1;
    }
    assert!(k > 10, "{k} properties");
    c.flush().unwrap();
    for &pos in &p[4 * rows + 1..] {
        c.ack_batch_index(pos, 0, 3).unwrap();
    }
    let flushed = c.flush();
    assert!(flushed.is_ok(), "{flushed:?}");
    topic.close().unwrap();
}

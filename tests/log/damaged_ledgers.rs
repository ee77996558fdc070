//! One ledger's damage does not take a topic down: a damaged cursor ledger opens (damaged) and
//! its cursor recovers the last state before the damage, while a damaged data ledger refuses
//! the topic with an error naming it.
//!
//! Cursor persistence is not yet driven by the public `Cursor` API, so the cursor side is
//! checked through the entry log and `cursor::recover::recover`, on the version 1 sample
//! cursor ledger `tests/data/cursor-v1-multi` (two multi-entry flushes).

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::CursorConfig;
use ackstore::internals::cursor::recover::{RecoverySource, recover};
use ackstore::internals::format::cursor::{EntryKind, peek_kind};
use ackstore::internals::format::ledger::{FRAME_HEADER_LEN, HEADER_V1_LEN, decode_frame_header};
use ackstore::internals::log::{EntryLog, LogConfig, ledger_file_name};
use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::{Error, Position};
use ackstore::{FileStorage, MemStorage, Storage};
use ackstore::{LedgerConfig, ManagedLedger};

/// Byte offset of every frame of a version 1 ledger file whose frames are all whole.
fn frame_offsets(bytes: &[u8], entries: u64) -> Vec<usize> {
    let mut at = HEADER_V1_LEN;
    (0..entries)
        .map(|_| {
            let here = at;
            let h = decode_frame_header(&bytes[at..]).unwrap();
            at += FRAME_HEADER_LEN + h.payload_len as usize;
            here
        })
        .collect()
}

#[test]
fn a_flipped_byte_in_the_last_marker_opens_the_cursor_ledger_damaged_and_recovers_the_flush_before()
{
    let dir = support::samples::sample_dir("cursor-v1-multi");
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(dir.path(), false).unwrap());
    let ledger = 1;
    let name = ledger_file_name(ledger);
    // A third flush had begun: an entry after the last marker (a copy of the first entry, as a
    // partition entry would be) reached the disk.
    let (markers, entries) = {
        let log = EntryLog::open(Arc::clone(&storage), LogConfig::default()).unwrap();
        let count = log.entry_count(ledger).unwrap();
        let markers: Vec<u64> = (0..count)
            .filter(|i| {
                let payload = log.read(ledger, *i).unwrap().payload;
                matches!(peek_kind(&payload), Ok(EntryKind::Marker))
            })
            .collect();
        let first = log.read(ledger, 0).unwrap();
        log.append(ledger, first.meta, &first.payload).unwrap();
        log.sync(ledger).unwrap();
        (markers, count + 1)
    };
    assert_eq!(markers.len(), 2);
    let last_marker = markers[1];
    let path = dir.path().join(&name);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = frame_offsets(&bytes, entries)[usize::try_from(last_marker).unwrap()];
    bytes[at + FRAME_HEADER_LEN + 3] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();

    let log = Arc::new(EntryLog::open(Arc::clone(&storage), LogConfig::default()).unwrap());
    assert!(
        log.recovery_report().is_empty(),
        "the damage was cut as a tail"
    );
    let damaged = log.damaged_ledgers();
    assert_eq!(damaged.len(), 1);
    assert_eq!(damaged[0].id, ledger);
    assert_eq!(damaged[0].entries, last_marker);
    assert_eq!(damaged[0].damaged.as_ref().map(|d| d.0), Some(at as u64));

    let meta: Arc<dyn MetaStore> = Arc::new(FileMetaStore::new(storage));
    let mut cursor = recover(log, meta, "cursor-1", &CursorConfig::default()).unwrap();
    assert_eq!(
        cursor.report.source,
        RecoverySource::Marker(Position::new(ledger, markers[0]))
    );
    assert_eq!(cursor.state.mark_delete, Position::new(3, 0));
    let mut acked = BTreeSet::new();
    for (from, to) in cursor.acks.ranges().unwrap() {
        acked.extend((from.entry_id..=to.entry_id).map(|e| Position::new(from.ledger_id, e)));
    }
    // The first flush of the sample, without the second flush's 3:200000.
    let mut first_flush: BTreeSet<_> = [1, 3, 5].map(|e| Position::new(3, e)).into();
    first_flush.extend((70_000..=70_010).map(|e| Position::new(3, e)));
    assert_eq!(acked, first_flush);
}

#[test]
fn a_damaged_data_ledger_refuses_the_topic_naming_the_ledger() {
    let disk = MemStorage::new();
    let config = LedgerConfig {
        max_entries_per_ledger: 100,
        ..LedgerConfig::default()
    };
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), config.clone()).unwrap();
    let positions: Vec<Position> = (0..4)
        .map(|i| topic.append(format!("entry {i}").as_bytes()).unwrap())
        .collect();
    topic.sync().unwrap();
    // An entry appended after that sync records it (its durable mark covers entries 0 to 3),
    // so damage to them is corruption, not the torn end of an unsynced batch.
    topic.append(b"entry 4").unwrap();
    topic.sync().unwrap();
    // A power cut now: the data ledger is unsealed.
    let disk = disk.durable_image();
    drop(topic);
    let ledger = positions[0].ledger_id;
    let name = ledger_file_name(ledger);
    let mut bytes = disk.live_bytes(&name).unwrap();
    // One bit of entry 0's payload; entries 1 to 4 follow it whole. With no whole entry
    // before the damage, the ledger would otherwise look empty and be dropped.
    let at = ackstore::internals::format::ledger::HEADER_V3_LEN;
    bytes[at + FRAME_HEADER_LEN] ^= 1;
    disk.set_bytes(&name, bytes).unwrap();
    match ManagedLedger::open_with_storage(Arc::new(disk.clone()), config) {
        Err(Error::Corrupted {
            place: ackstore::CorruptionPlace::Ledger { ledger: l, offset },
            ..
        }) => {
            assert_eq!((l, offset), (ledger, at as u64));
        }
        other => panic!("expected Corrupted, got {other:?}"),
    }
    // Nothing was deleted: the entry log alone still opens the ledger, damaged.
    let log = EntryLog::open(Arc::new(disk), LogConfig::default()).unwrap();
    let info = log.ledger_info(ledger).unwrap();
    assert_eq!(info.entries, 0);
    assert_eq!(info.damaged.map(|d| d.0), Some(at as u64));
}

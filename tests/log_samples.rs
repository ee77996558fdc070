//! Sample ledger files of format version 1 under `tests/data/`, committed as bytes: today's code
//! must still read them, and still write the very same bytes, so a format change fails loudly.
//!
//! - `ledger-v1/`: ledger 1, sealed, entries "sealed entry 0..2"; ledger 2, unsealed, entries
//!   "open entry 0..1", each synced before the next was appended.
//! - `ledger-v1-torn/`: ledger 2 followed by 30 bytes of a torn frame.
//! - `ledger-v1-corrupt/`: ledger 2 with one payload byte of entry 0 flipped.

use std::path::Path;
use std::sync::Arc;

use ackstore::log::{EntryLog, EntryMeta, LogConfig, ledger_file_name};
use ackstore::storage::{MemStorage, Storage};
use ackstore::{CorruptionKind, Error};

fn meta(i: u64) -> EntryMeta {
    EntryMeta {
        index: 100 + i,
        num_messages: 2,
        timestamp: 1_700_000_000_000 + i,
    }
}

/// A memory disk holding a copy of the sample directory `name`.
fn sample(name: &str) -> MemStorage {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    let disk = MemStorage::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let file = disk
            .create(path.file_name().unwrap().to_str().unwrap())
            .unwrap();
        file.write_all_at(&std::fs::read(&path).unwrap(), 0)
            .unwrap();
    }
    disk
}

fn open(disk: &MemStorage) -> ackstore::Result<EntryLog> {
    EntryLog::open(Arc::new(disk.clone()), LogConfig::default())
}

fn assert_entries(log: &EntryLog, ledger: u64, prefix: &str, count: u64) {
    assert_eq!(log.entry_count(ledger).unwrap(), count);
    for i in 0..count {
        let e = log.read(ledger, i).unwrap();
        assert_eq!(e.meta, meta(i));
        assert_eq!(e.payload, format!("{prefix} entry {i}").into_bytes());
    }
}

#[test]
fn version_1_samples_open_and_read() {
    let log = open(&sample("ledger-v1")).unwrap();
    assert!(log.recovery_report().is_empty());
    assert_eq!(log.ledger_ids(), vec![1, 2]);
    assert!(log.ledger_info(1).unwrap().sealed);
    assert!(!log.ledger_info(2).unwrap().sealed);
    assert_entries(&log, 1, "sealed", 3);
    assert_entries(&log, 2, "open", 2);
}

#[test]
fn todays_writer_produces_the_version_1_sample_bytes() {
    let disk = MemStorage::new();
    let log = open(&disk).unwrap();
    let sealed = log.create_ledger().unwrap();
    for i in 0..3 {
        let payload = format!("sealed entry {i}");
        log.append(sealed, meta(i), payload.as_bytes()).unwrap();
    }
    log.seal(sealed).unwrap();
    let unsealed = log.create_ledger().unwrap();
    for i in 0..2 {
        let payload = format!("open entry {i}");
        log.append(unsealed, meta(i), payload.as_bytes()).unwrap();
        log.sync(unsealed).unwrap();
    }
    let samples = sample("ledger-v1");
    for id in [sealed, unsealed] {
        let name = ledger_file_name(id);
        assert_eq!(disk.live_bytes(&name), samples.live_bytes(&name), "{name}");
    }
}

#[test]
fn version_1_sample_with_a_torn_tail_is_cut_back() {
    let disk = sample("ledger-v1-torn");
    let log = open(&disk).unwrap();
    let report = log.recovery_report();
    assert_eq!(report.len(), 1);
    assert_eq!((report[0].ledger, report[0].dropped_bytes), (2, 30));
    assert_entries(&log, 2, "open", 2);
}

#[test]
fn version_1_sample_with_a_damaged_synced_entry_is_corruption() {
    let err = open(&sample("ledger-v1-corrupt")).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Corrupted {
                ledger: 2,
                offset: 36,
                kind: CorruptionKind::ChecksumMismatch
            }
        ),
        "{err}"
    );
}

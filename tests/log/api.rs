//! The entry log's API against a plain model: appends, reads, sync, seal, reopen, delete, and
//! every kind of bad input.

use crate::support;

use std::sync::Arc;

use support::crash::torn_image;
use support::log_model::{meta, payload};

use ackstore::internals::log::{EntryLog, LogConfig, RecoveryMode, ledger_file_name, verify_log};
use ackstore::{CorruptionKind, Error, Position};
use ackstore::{FileStorage, MemStorage, Storage};

fn open(disk: &MemStorage) -> EntryLog {
    EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap()
}

fn assert_holds(log: &EntryLog, ledger: u64, count: u64) {
    assert_eq!(log.entry_count(ledger).unwrap(), count);
    for i in 0..count {
        let e = log.read(ledger, i).unwrap();
        assert_eq!((e.entry_id, e.meta), (i, meta(i)));
        assert_eq!(e.payload, payload(ledger, i));
        assert_eq!(log.read_meta(ledger, i).unwrap(), meta(i));
    }
}

#[test]
fn entries_read_back_before_and_after_seal_and_reopen() {
    let disk = MemStorage::new();
    let log = open(&disk);
    let a = log.create_ledger().unwrap();
    let b = log.create_ledger().unwrap();
    assert!(b > a);
    for i in 0..50 {
        assert_eq!(log.append(a, meta(i), &payload(a, i)).unwrap(), i);
    }
    for i in 0..20 {
        assert_eq!(log.append(b, meta(i), &payload(b, i)).unwrap(), i);
    }
    assert_holds(&log, a, 50);
    log.sync(b).unwrap();
    log.seal(a).unwrap();
    log.seal(a).unwrap();
    assert!(matches!(log.append(a, meta(0), b"x"), Err(Error::Sealed(l)) if l == a));
    assert_holds(&log, a, 50);
    let info = log.ledger_info(a).unwrap();
    assert!(info.sealed);
    assert_eq!(info.entries, 50);
    assert_eq!(
        info.bytes,
        disk.live_bytes(&ledger_file_name(a)).unwrap().len() as u64
    );
    let collected: Vec<_> = log.entries(b, 5).unwrap().map(Result::unwrap).collect();
    assert_eq!(collected.len(), 15);
    assert_eq!(collected[0].entry_id, 5);
    drop(log);

    let log = open(&disk);
    assert!(log.recovery_report().is_empty());
    assert_eq!(log.ledger_ids(), vec![a, b]);
    assert!(log.ledger_info(a).unwrap().sealed);
    assert!(!log.ledger_info(b).unwrap().sealed);
    assert_holds(&log, a, 50);
    assert_holds(&log, b, 20);
    assert_eq!(log.append(b, meta(20), &payload(b, 20)).unwrap(), 20);
    let c = log.create_ledger().unwrap();
    assert!(c > b);
    assert!(verify_log(&disk).unwrap().is_empty());
}

#[test]
fn empty_ledgers_seal_and_reopen() {
    let disk = MemStorage::new();
    let log = open(&disk);
    let a = log.create_ledger().unwrap();
    let b = log.create_ledger().unwrap();
    log.seal(a).unwrap();
    drop(log);
    let log = open(&disk);
    assert_eq!(log.entry_count(a).unwrap(), 0);
    assert_eq!(log.entry_count(b).unwrap(), 0);
    assert!(log.ledger_info(a).unwrap().sealed);
    assert!(matches!(log.read(a, 0), Err(Error::NoSuchEntry(p)) if p == Position::new(a, 0)));
}

#[test]
fn oversized_entry_is_refused_and_nothing_is_written() {
    let disk = MemStorage::new();
    let config = LogConfig {
        max_entry_size: 100,
        ..LogConfig::default()
    };
    let log = EntryLog::open(Arc::new(disk.clone()), config).unwrap();
    assert_eq!(log.max_entry_size(), 100);
    let l = log.create_ledger().unwrap();
    let before = disk.mutations();
    let err = log.append(l, meta(0), &[0; 101]).unwrap_err();
    assert!(matches!(
        err,
        Error::EntryTooLarge {
            size: 101,
            max: 100
        }
    ));
    assert_eq!(disk.mutations(), before);
    assert_eq!(log.append(l, meta(0), &[0; 100]).unwrap(), 0);
    assert_eq!(
        LogConfig::default().max_entry_size,
        5 * 1024 * 1024,
        "the documented default"
    );
}

#[test]
fn missing_ledgers_and_entries_are_reported_as_such() {
    let disk = MemStorage::new();
    let log = open(&disk);
    assert!(matches!(log.read(7, 0), Err(Error::NoSuchLedger(7))));
    assert!(matches!(
        log.append(7, meta(0), b""),
        Err(Error::NoSuchLedger(7))
    ));
    assert!(matches!(log.sync(7), Err(Error::NoSuchLedger(7))));
    assert!(matches!(log.seal(7), Err(Error::NoSuchLedger(7))));
    assert!(matches!(log.delete_ledger(7), Err(Error::NoSuchLedger(7))));
    assert!(matches!(log.ledger_info(7), Err(Error::NoSuchLedger(7))));
    let l = log.create_ledger().unwrap();
    log.append(l, meta(0), b"a").unwrap();
    assert!(matches!(log.read(l, 1), Err(Error::NoSuchEntry(p)) if p == Position::new(l, 1)));
    assert!(matches!(
        log.read_meta(l, u64::MAX),
        Err(Error::NoSuchEntry(_))
    ));
    log.delete_ledger(l).unwrap();
    assert!(matches!(log.read(l, 0), Err(Error::NoSuchLedger(_))));
    assert!(log.ledger_ids().is_empty());
    // The deletion is durable: a power cut now keeps no ledger file.
    assert!(disk.durable_image().list().unwrap().is_empty());
}

#[test]
fn create_is_durable_when_it_returns() {
    let disk = MemStorage::new();
    let log = open(&disk);
    let l = log.create_ledger().unwrap();
    let after_cut = open(&disk.durable_image());
    assert_eq!(after_cut.ledger_ids(), vec![l]);
    assert!(after_cut.recovery_report().is_empty());
}

#[test]
fn a_second_owner_is_refused_in_process_and_across_handles() {
    let disk = MemStorage::new();
    let log = open(&disk);
    let err = EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap_err();
    assert!(matches!(err, Error::Locked { .. }), "{err}");
    // A read-only handle needs no lock.
    let ro = EntryLog::open_read_only(Arc::new(disk.clone()), LogConfig::default()).unwrap();
    assert!(matches!(ro.create_ledger(), Err(Error::Unsupported { .. })));
    drop(log);
    open(&disk);

    let dir = tempfile::tempdir().unwrap();
    let first = EntryLog::open(
        Arc::new(FileStorage::open(dir.path(), false).unwrap()),
        LogConfig::default(),
    )
    .unwrap();
    let second = EntryLog::open(
        Arc::new(FileStorage::open(dir.path(), false).unwrap()),
        LogConfig::default(),
    );
    assert!(matches!(second, Err(Error::Locked { .. })));
    drop(first);
}

const STRICT: LogConfig = LogConfig {
    recovery: RecoveryMode::Strict,
    ..LogConfig::DEFAULT
};

#[test]
fn a_file_that_is_not_a_ledger_is_corruption_and_other_names_are_ignored() {
    let disk = MemStorage::new();
    let f = disk.create("topic.meta").unwrap();
    f.write_all_at(b"not a ledger at all", 0).unwrap();
    let f = disk.create(&ledger_file_name(3)).unwrap();
    f.write_all_at(&[b'x'; 100], 0).unwrap();
    let err = EntryLog::open(Arc::new(disk.clone()), STRICT).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Corrupted {
                place: ackstore::CorruptionPlace::Ledger {
                    ledger: 3,
                    offset: 0
                },
                kind: CorruptionKind::BadMagic
            }
        ),
        "{err}"
    );
    // Tolerant: the other ledgers stay usable; this one opens damaged at byte 0, empty.
    let log = open(&disk);
    let info = log.ledger_info(3).unwrap();
    assert_eq!(
        (info.entries, info.damaged),
        (0, Some((0, CorruptionKind::BadMagic)))
    );
    assert!(matches!(
        log.read(3, 0),
        Err(Error::Corrupted {
            place: ackstore::CorruptionPlace::Ledger { ledger: 3, .. },
            ..
        })
    ));
    drop(log);
    disk.remove(&ledger_file_name(3)).unwrap();
    let log = open(&disk);
    assert!(log.ledger_ids().is_empty());
}

#[test]
fn a_header_naming_another_ledger_is_corruption() {
    let disk = MemStorage::new();
    let log = open(&disk);
    let l = log.create_ledger().unwrap();
    drop(log);
    let bytes = disk.live_bytes(&ledger_file_name(l)).unwrap();
    let f = disk.create(&ledger_file_name(l + 1)).unwrap();
    f.write_all_at(&bytes, 0).unwrap();
    let err = EntryLog::open(Arc::new(disk.clone()), STRICT).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Corrupted {
                place: ackstore::CorruptionPlace::Ledger { offset: 0, .. },
                ..
            }
        ),
        "{err}"
    );
    let log = open(&disk);
    assert_eq!(log.damaged_ledgers().len(), 1);
    assert_eq!(log.damaged_ledgers()[0].id, l + 1);
    assert!(log.ledger_info(l).unwrap().damaged.is_none());
}

#[test]
fn strict_mode_refuses_a_torn_tail_that_tolerant_mode_cuts() {
    let disk = MemStorage::new();
    let log = open(&disk);
    let l = log.create_ledger().unwrap();
    log.append(l, meta(0), &payload(l, 0)).unwrap();
    log.sync(l).unwrap();
    log.append(l, meta(1), &payload(l, 1)).unwrap();
    drop(log);
    let torn = torn_image(&disk, |_| 10);
    let strict = LogConfig {
        recovery: RecoveryMode::Strict,
        ..LogConfig::default()
    };
    let err = EntryLog::open(Arc::new(torn.clone()), strict).unwrap_err();
    assert!(
        matches!(
            err,
            Error::TornTail {
                dropped_bytes: 10,
                ..
            }
        ),
        "{err}"
    );
    // Read-only reports without cutting.
    let ro = EntryLog::open_read_only(Arc::new(torn.clone()), LogConfig::default()).unwrap();
    assert_eq!(ro.recovery_report().len(), 1);
    assert_eq!(ro.entry_count(l).unwrap(), 1);
    let name = ledger_file_name(l);
    let before = torn.live_bytes(&name).unwrap();
    drop(ro);
    assert_eq!(torn.live_bytes(&name).unwrap(), before);

    let log = open(&torn);
    let report = log.recovery_report();
    assert_eq!(report.len(), 1);
    assert_eq!((report[0].ledger, report[0].dropped_bytes), (l, 10));
    assert_holds(&log, l, 1);
    assert_eq!(log.append(l, meta(1), &payload(l, 1)).unwrap(), 1);
    log.sync(l).unwrap();
    drop(log);
    let log = open(&torn.durable_image());
    assert!(log.recovery_report().is_empty());
    assert_holds(&log, l, 2);
}

#[test]
fn a_failed_write_latches_the_ledger_until_reopened() {
    let disk = MemStorage::new();
    let log = open(&disk);
    let l = log.create_ledger().unwrap();
    log.append(l, meta(0), &payload(l, 0)).unwrap();
    log.sync(l).unwrap();
    // An entry larger than the write buffer is written at once.
    let big = vec![7u8; 100 * 1024];
    disk.fail_after(Some(0));
    assert!(matches!(
        log.append(l, meta(1), &big),
        Err(Error::Io { .. })
    ));
    disk.fail_after(None);
    assert!(matches!(
        log.append(l, meta(1), b"x"),
        Err(Error::PreviousIo)
    ));
    assert!(matches!(log.sync(l), Err(Error::PreviousIo)));
    assert!(matches!(log.seal(l), Err(Error::PreviousIo)));
    assert_holds(&log, l, 1);
    drop(log);
    let log = open(&disk);
    assert_eq!(log.append(l, meta(1), &payload(l, 1)).unwrap(), 1);
}

#[test]
fn a_failed_fsync_latches_and_is_never_retried() {
    let disk = MemStorage::new();
    let log = open(&disk);
    let l = log.create_ledger().unwrap();
    log.append(l, meta(0), &payload(l, 0)).unwrap();
    // The buffered entry's write succeeds, its fsync fails.
    disk.fail_after(Some(1));
    assert!(matches!(log.sync(l), Err(Error::Io { .. })));
    disk.fail_after(None);
    let before = disk.mutations();
    assert!(matches!(log.sync(l), Err(Error::PreviousIo)));
    assert!(matches!(
        log.append(l, meta(1), b""),
        Err(Error::PreviousIo)
    ));
    assert_eq!(
        disk.mutations(),
        before,
        "no write and no fsync after the latch"
    );
}

#[test]
fn a_failed_buffered_write_fails_the_sync_and_latches() {
    let disk = MemStorage::new();
    let log = open(&disk);
    let l = log.create_ledger().unwrap();
    log.append(l, meta(0), &payload(l, 0)).unwrap();
    disk.fail_after(Some(0));
    assert!(matches!(log.sync(l), Err(Error::Io { .. })));
    disk.fail_after(None);
    assert!(matches!(log.sync(l), Err(Error::PreviousIo)));
    // The entry stays readable from memory but was never durable.
    assert_holds(&log, l, 1);
    drop(log);
    assert_eq!(open(&disk.durable_image()).entry_count(l).unwrap(), 0);
}

#[test]
fn sync_without_new_appends_issues_no_fsync() {
    let disk = MemStorage::new();
    let log = open(&disk);
    let l = log.create_ledger().unwrap();
    log.append(l, meta(0), b"a").unwrap();
    let base = log.stats().fsyncs;
    log.sync(l).unwrap();
    log.sync(l).unwrap();
    let s = log.stats();
    assert_eq!(
        (s.fsyncs - base, s.sync_calls, s.appends, s.bytes_appended),
        (1, 2, 1, 1)
    );
}

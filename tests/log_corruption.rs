//! Bit rot: every byte of a small sealed and a small unsealed ledger damaged in turn. Each open
//! or read either returns the true entry or an error, never a wrong payload, and `verify`
//! always names a problem.

mod common;

use std::sync::Arc;

use ackstore::Error;
use ackstore::log::{EntryLog, LogConfig, RecoveryMode, ledger_file_name, verify_ledger};
use ackstore::storage::MemStorage;
use common::{meta, payload};

const ENTRIES: u64 = 5;

/// A disk holding one ledger of [`ENTRIES`] entries, each synced on its own, maybe sealed.
fn small_ledger(seal: bool) -> (MemStorage, u64) {
    let disk = MemStorage::new();
    let log = EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap();
    let id = log.create_ledger().unwrap();
    for i in 0..ENTRIES {
        log.append(id, meta(i), &payload(id, i)).unwrap();
        log.sync(id).unwrap();
    }
    if seal {
        log.seal(id).unwrap();
    }
    (disk, id)
}

/// Opens `disk` in every mode and reads every entry: each result is the truth or an error.
fn check_never_wrong(disk: &MemStorage, id: u64) {
    for (mode, read_only) in [
        (RecoveryMode::TolerateTail, true),
        (RecoveryMode::Strict, false),
        (RecoveryMode::TolerateTail, false),
    ] {
        let config = LogConfig {
            recovery: mode,
            ..LogConfig::default()
        };
        let storage = Arc::new(disk.clone());
        let opened = if read_only {
            EntryLog::open_read_only(storage, config)
        } else {
            EntryLog::open(storage, config)
        };
        let Ok(log) = opened else { continue };
        for i in 0..ENTRIES {
            if let Ok(e) = log.read(id, i) {
                assert_eq!((e.meta, e.payload), (meta(i), payload(id, i)), "entry {i}");
            }
            if let Ok(m) = log.read_meta(id, i) {
                assert_eq!(m, meta(i), "meta of entry {i}");
            }
        }
    }
}

fn flip_every_byte(seal: bool) {
    let (disk, id) = small_ledger(seal);
    let name = ledger_file_name(id);
    let original = disk.live_bytes(&name).unwrap();
    for at in 0..original.len() {
        for mask in [0x01, 0x80, 0xff] {
            let mut bad = original.clone();
            bad[at] ^= mask;
            let image = disk.durable_image();
            image.set_bytes(&name, bad).unwrap();
            // Verify first: the owner's open below repairs a torn tail in place.
            let problems = verify_ledger(&image, id).unwrap();
            assert!(
                !problems.is_empty(),
                "damage at byte {at} ^ {mask:#x} unnoticed"
            );
            check_never_wrong(&image, id);
        }
    }
}

#[test]
fn every_damaged_byte_of_a_sealed_ledger_reads_true_or_fails() {
    flip_every_byte(true);
}

#[test]
fn every_damaged_byte_of_an_unsealed_ledger_reads_true_or_fails() {
    flip_every_byte(false);
}

#[test]
fn damage_to_a_synced_frame_before_the_tail_is_corruption_not_a_torn_tail() {
    let (disk, id) = small_ledger(false);
    let name = ledger_file_name(id);
    let original = disk.live_bytes(&name).unwrap();
    // Damage the payload of entry 2 (of 5, each synced before the next was appended).
    let second_frame = 36 + (44 + payload(id, 0).len()) + (44 + payload(id, 1).len());
    let mut bad = original.clone();
    bad[second_frame + 50] ^= 1;
    let image = disk.durable_image();
    image.set_bytes(&name, bad).unwrap();
    let err = EntryLog::open(Arc::new(image.clone()), LogConfig::default()).unwrap_err();
    assert!(
        matches!(err, Error::Corrupted { ledger, offset, .. }
            if ledger == id && offset == second_frame as u64),
        "{err}"
    );
    let problems = verify_ledger(&image, id).unwrap();
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].entry, Some(2));
    assert!(!problems[0].torn_tail);
}

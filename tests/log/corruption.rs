//! Bit rot: every byte of a small sealed and a small unsealed ledger damaged in turn. Each open
//! or read either returns the true entry or an error, never a wrong payload and never a synced
//! entry silently gone, and `verify` names a problem for every byte but the redundant
//! synced-length slot copies. Damage inside one synced batch is corruption, not a torn tail, once
//! the synced-length slot recording that sync is on disk.

use crate::support;

use std::sync::Arc;

use ackstore::Error;
use ackstore::internals::format::ledger::{FRAME_HEADER_LEN, LedgerHeader, SLOTS_AT};
use ackstore::internals::log::{
    EntryLog, EntryMeta, LogConfig, RecoveryMode, ledger_file_name, verify_ledger,
};
use ackstore::{DEFAULT_MAP_SEALED_FROM, MemStorage};
use support::log_model::{meta, payload};

const ENTRIES: u64 = 5;

/// A disk holding one ledger of [`ENTRIES`] entries, each synced on its own, maybe sealed.
fn small_ledger(seal: bool) -> (MemStorage, u64) {
    synced_ledger(seal, true)
}

/// A disk holding one ledger of [`ENTRIES`] entries, synced after each or once after all (one
/// batch: every frame then carries the same durable mark), maybe sealed.
fn synced_ledger(seal: bool, sync_each: bool) -> (MemStorage, u64) {
    let disk = MemStorage::new();
    let log = EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap();
    let id = log.create_ledger().unwrap();
    for i in 0..ENTRIES {
        log.append(id, meta(i), &payload(id, i)).unwrap();
        if sync_each || i == ENTRIES - 1 {
            log.sync(id).unwrap();
        }
    }
    if seal {
        log.seal(id).unwrap();
    }
    (disk, id)
}

/// Opens `disk` in every mode and reads every entry: each result is the truth or
/// [`Error::Corrupted`]. Every entry was synced, so none may be missing ([`Error::NoSuchEntry`]
/// or a short count without damage); an owner's open in `TolerateTail` mode must succeed.
fn check_never_wrong(disk: &MemStorage, id: u64) {
    // A sealed ledger this small is read by position by default, and through a map at
    // `map_sealed_from` 0: both read paths see every damage.
    for (mode, read_only, map_sealed_from) in [
        (RecoveryMode::TolerateTail, true, 0),
        (RecoveryMode::Strict, false, 0),
        (RecoveryMode::TolerateTail, false, 0),
        (RecoveryMode::TolerateTail, true, DEFAULT_MAP_SEALED_FROM),
        (RecoveryMode::Strict, false, DEFAULT_MAP_SEALED_FROM),
        (RecoveryMode::TolerateTail, false, DEFAULT_MAP_SEALED_FROM),
    ] {
        let config = LogConfig {
            recovery: mode,
            map_sealed_from,
            ..LogConfig::default()
        };
        let storage = Arc::new(disk.clone());
        let opened = if read_only {
            EntryLog::open_read_only(storage, config)
        } else {
            EntryLog::open(storage, config)
        };
        let log = match opened {
            Ok(log) => log,
            Err(e) if mode == RecoveryMode::Strict => {
                assert!(
                    matches!(e, Error::Corrupted { .. } | Error::TornTail { .. }),
                    "{e}"
                );
                continue;
            }
            Err(e) => panic!("tolerant open failed: {e}"),
        };
        let info = log.ledger_info(id).unwrap();
        // Damage confined to the last frame has nothing valid after it, so bytes alone cannot
        // tell it from a torn tail: it may be cut, and the cut is reported.
        let last_cut_and_reported =
            info.entries == ENTRIES - 1 && log.recovery_report().iter().any(|r| r.ledger == id);
        assert!(
            info.entries == ENTRIES || info.damaged.is_some() || last_cut_and_reported,
            "synced entries went missing without a trace: {info:?}"
        );
        for i in 0..ENTRIES {
            match log.read(id, i) {
                Ok(e) => assert_eq!((e.meta, e.payload), (meta(i), payload(id, i)), "entry {i}"),
                Err(Error::Corrupted { .. }) => {}
                Err(Error::NoSuchEntry(_)) if last_cut_and_reported && i == ENTRIES - 1 => {}
                Err(e) => panic!("entry {i}: {e}"),
            }
            match log.read_meta(id, i) {
                Ok(m) => assert_eq!(m, meta(i), "meta of entry {i}"),
                Err(Error::Corrupted { .. }) => {}
                Err(Error::NoSuchEntry(_)) if last_cut_and_reported && i == ENTRIES - 1 => {}
                Err(e) => panic!("meta of entry {i}: {e}"),
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
            // A slot copy is redundant: a damaged one fails its checksum and the other counts.
            let in_slots = (SLOTS_AT..data_start(id)).contains(&at);
            assert!(
                !problems.is_empty() || in_slots,
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

/// Byte offset of the first frame of a ledger this build creates.
fn data_start(id: u64) -> usize {
    usize::try_from(LedgerHeader::new(id, 0).data_start()).unwrap()
}

/// Byte offset of entry `i`'s frame in a ledger of `payload(id, _)` entries.
fn frame_offset(id: u64, i: u64) -> usize {
    data_start(id)
        + (0..i)
            .map(|j| FRAME_HEADER_LEN + payload(id, j).len())
            .sum::<usize>()
}

/// Opens `image` in both modes and checks damage at `offset` is corruption: `Strict` refuses,
/// `TolerateTail` opens the ledger damaged with `before` readable entries.
fn assert_damaged(image: &MemStorage, id: u64, offset: u64, before: u64) {
    let strict = LogConfig {
        recovery: RecoveryMode::Strict,
        ..LogConfig::default()
    };
    let err = EntryLog::open(Arc::new(image.clone()), strict).unwrap_err();
    assert!(
        matches!(err, Error::Corrupted { place: ackstore::CorruptionPlace::Ledger { ledger, offset: o }, .. } if ledger == id && o == offset),
        "{err}"
    );
    let log = EntryLog::open(Arc::new(image.clone()), LogConfig::default()).unwrap();
    assert!(log.recovery_report().is_empty(), "damage was cut as a tail");
    let info = log.ledger_info(id).unwrap();
    assert_eq!(info.entries, before);
    assert_eq!(info.damaged.as_ref().map(|d| d.0), Some(offset));
    assert_eq!(log.damaged_ledgers(), vec![info]);
    for i in 0..before {
        assert_eq!(log.read(id, i).unwrap().payload, payload(id, i));
    }
    for i in before..=ENTRIES {
        let err = log.read(id, i).unwrap_err();
        assert!(
            matches!(err, Error::Corrupted { place: ackstore::CorruptionPlace::Ledger { offset: o, .. }, .. } if o == offset),
            "{err}"
        );
    }
    for refused in [
        log.append(id, meta(before), b"x").map(|_| ()),
        log.sync(id),
        log.seal(id),
    ] {
        assert!(
            matches!(refused, Err(Error::Corrupted { .. })),
            "{refused:?}"
        );
    }
    // The damage is reported, never repaired: the file is untouched by the tolerant open.
    drop(log);
    let again = EntryLog::open(Arc::new(image.clone()), LogConfig::default()).unwrap();
    assert_eq!(again.entry_count(id).unwrap(), before);
}

#[test]
fn damage_to_a_synced_frame_before_the_tail_is_corruption_not_a_torn_tail() {
    let (disk, id) = small_ledger(false);
    let name = ledger_file_name(id);
    let original = disk.live_bytes(&name).unwrap();
    // Damage the payload of entry 2 (of 5, each synced before the next was appended).
    let second_frame = frame_offset(id, 2);
    let mut bad = original.clone();
    bad[second_frame + 50] ^= 1;
    let image = disk.durable_image();
    image.set_bytes(&name, bad).unwrap();
    let problems = verify_ledger(&image, id).unwrap();
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].entry, Some(2));
    assert!(!problems[0].torn_tail);
    assert_damaged(&image, id, second_frame as u64, 2);
}

#[test]
fn damage_in_the_last_synced_batch_is_a_torn_tail_until_its_slot_is_on_disk_then_corruption() {
    // One batch synced once: every frame carries the mark of the header alone. Until the
    // synced-length slot written after that sync reaches the disk (by the next fsync or the
    // kernel's writeback), nothing in the file proves the batch was synced (a power cut may keep
    // any subset of its pages): damage anywhere in it is cut as a torn tail, reported.
    let (disk, id) = synced_ledger(false, false);
    let name = ledger_file_name(id);
    let durable = disk.durable_image().live_bytes(&name).unwrap();
    let written_back = disk.live_bytes(&name).unwrap();
    assert_eq!(durable.len(), written_back.len());
    assert_ne!(durable, written_back, "the slot write is not yet durable");
    for damaged_entry in 0..ENTRIES {
        let at = frame_offset(id, damaged_entry);
        for byte in [0, FRAME_HEADER_LEN + payload(id, damaged_entry).len() / 2] {
            let mut bad = durable.clone();
            bad[at + byte] ^= 1;
            let image = disk.durable_image();
            image.set_bytes(&name, bad).unwrap();
            let problems = verify_ledger(&image, id).unwrap();
            assert_eq!(problems.len(), 1);
            assert!(problems[0].torn_tail);
            let log = EntryLog::open(Arc::new(image), LogConfig::default()).unwrap();
            assert_eq!(log.entry_count(id).unwrap(), damaged_entry);
            assert!(log.damaged_ledgers().is_empty());
            let report = log.recovery_report();
            assert_eq!(report.len(), 1);
            assert_eq!(report[0].offset, at as u64);
        }
    }
    // With the slot written back, the same damage is corruption, in open and in verify.
    for damaged_entry in 0..ENTRIES {
        let at = frame_offset(id, damaged_entry);
        let mut bad = written_back.clone();
        bad[at + FRAME_HEADER_LEN] ^= 1;
        let image = disk.durable_image();
        image.set_bytes(&name, bad).unwrap();
        let problems = verify_ledger(&image, id).unwrap();
        assert!(!problems.is_empty() && problems.iter().all(|p| !p.torn_tail));
        assert_eq!(problems[0].offset, at as u64);
        assert_damaged(&image, id, at as u64, damaged_entry);
    }
    // A frame appended after that sync carries its mark, and the next sync makes the slot
    // durable: the same damage is corruption in the durable image alone.
    let log = EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap();
    log.append(id, meta(ENTRIES), &payload(id, ENTRIES))
        .unwrap();
    log.sync(id).unwrap();
    drop(log);
    let original = disk.durable_image().live_bytes(&name).unwrap();
    for damaged_entry in 0..ENTRIES {
        let at = frame_offset(id, damaged_entry);
        let mut bad = original.clone();
        bad[at + FRAME_HEADER_LEN] ^= 1;
        let image = disk.durable_image();
        image.set_bytes(&name, bad).unwrap();
        assert_damaged(&image, id, at as u64, damaged_entry);
    }
}

#[test]
fn a_payload_holding_a_whole_frame_does_not_turn_a_torn_tail_into_corruption() {
    // The payload of entry 1 carries a copy of the real frame 2 as it would be encoded
    // without the nonce (the version 1 checksum) and with a guessed one: neither is a frame of
    // this ledger, so cutting entry 1 short is still a torn tail.
    let disk = MemStorage::new();
    let log = EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap();
    let id = log.create_ledger().unwrap();
    log.append(id, meta(0), &payload(id, 0)).unwrap();
    log.sync(id).unwrap();
    let mut forged = Vec::new();
    for nonce in [None, Some(0), Some(1)] {
        let h = nonce.map_or(
            ackstore::internals::format::ledger::LedgerHeader::v1(id),
            |n| ackstore::internals::format::ledger::LedgerHeader::new(id, n),
        );
        let mark = frame_offset(id, 1) as u64;
        forged.extend(
            ackstore::internals::format::ledger::encode_frame(
                &h,
                2,
                mark,
                EntryMeta::default(),
                b"f",
            )
            .unwrap(),
        );
    }
    log.append(id, meta(1), &forged).unwrap();
    log.sync(id).unwrap();
    drop(log);
    let name = ledger_file_name(id);
    // The durable bytes: the slot written after the last sync has not reached the disk, so
    // nothing records that entry 1 was synced and a cut inside it reads as a torn write.
    let bytes = disk.durable_image().live_bytes(&name).unwrap();
    let image = disk.durable_image();
    image
        .set_bytes(&name, bytes[..bytes.len() - 1].to_vec())
        .unwrap();
    let log = EntryLog::open(Arc::new(image), LogConfig::default()).unwrap();
    assert_eq!(log.entry_count(id).unwrap(), 1);
    assert!(log.damaged_ledgers().is_empty());
    assert_eq!(log.recovery_report().len(), 1);
}

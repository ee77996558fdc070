//! Sample ledger files under `tests/data/`, committed as bytes, so a format change fails loudly.
//!
//! Version 3 (written today: version 2 plus the synced-length slots):
//! - `ledger-v3/`: ledger 1, sealed, entries "sealed entry 0..2"; ledger 2, unsealed, entries
//!   "open entry 0..1", each synced before the next was appended (slot copy 0 records the end
//!   of entry 0, copy 1 the end of entry 1).
//! - `ledger-v3-torn/`: ledger 2 followed by 30 bytes of a torn frame.
//! - `ledger-v3-corrupt/`: ledger 2 with one payload byte of entry 1, the last synced batch,
//!   flipped: only the slot records that it was synced.
//!
//! Version 2 (the nonce, no slots), still read and written on:
//! - `ledger-v2/`, `ledger-v2-torn/`: the same contents in version 2.
//! - `ledger-v2-corrupt/`: ledger 2 with one payload byte of entry 0 flipped.
//!
//! Version 1 (no nonce, unseeded checksums), still read and written on:
//! - `ledger-v1/`, `ledger-v1-torn/`, `ledger-v1-corrupt/`: the same contents in version 1.

use std::sync::Arc;

use ackstore::internals::format::ledger::{
    LedgerHeader, SLOTS_AT, VERSION, VERSION_1, VERSION_2, decode_header, encode_footer,
    encode_frame,
};
use ackstore::internals::log::{EntryLog, EntryMeta, LogConfig, RecoveryMode, ledger_file_name};
use ackstore::{CorruptionKind, Error};
use ackstore::{MemStorage, Storage};

fn meta(i: u64) -> EntryMeta {
    EntryMeta {
        index: 100 + i,
        num_messages: 2,
        timestamp: 1_700_000_000_000 + i,
    }
}

/// A memory disk holding a copy of the sample directory `name`.
fn sample(name: &str) -> MemStorage {
    let dir = crate::support::samples::data_dir().join(name);
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

fn strict() -> LogConfig {
    LogConfig {
        recovery: RecoveryMode::Strict,
        ..LogConfig::default()
    }
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

/// The bytes of the sample ledgers, built from the format's encoders for header `h`: the
/// sealed one (`prefix` "sealed", 3 entries) or the unsealed one ("open", 2 entries, each
/// synced before the next: its durable mark is the end of the previous frame, and in version 3
/// slot copy `i` records the end of entry `i`, written after the sync that covered it). With
/// `proof`, a version 3 sealed ledger's slot copy 0 claims the whole file, as today's seal
/// writes it after the footer's fsync (the samples were sealed before seals wrote it).
fn expected_bytes(h: &LedgerHeader, sealed: bool, proof: bool) -> Vec<u8> {
    let mut file = h.encode();
    let (prefix, count) = if sealed { ("sealed", 3) } else { ("open", 2) };
    let mut offsets = Vec::new();
    for i in 0..count {
        let mark = if sealed || i == 0 {
            h.data_start()
        } else {
            file.len() as u64
        };
        offsets.push(file.len() as u64);
        let payload = format!("{prefix} entry {i}");
        file.extend(encode_frame(h, i, mark, meta(i), payload.as_bytes()).unwrap());
        if !sealed && h.has_synced_slots() {
            let at = usize::try_from(LedgerHeader::slot_offset(i as usize)).unwrap();
            let slot = h.encode_slot(i as usize, file.len() as u64);
            file[at..at + slot.len()].copy_from_slice(&slot);
        }
    }
    if sealed {
        let data_end = file.len() as u64;
        file.extend(encode_footer(h, data_end, &offsets));
        if proof && h.has_synced_slots() {
            let at = usize::try_from(LedgerHeader::slot_offset(0)).unwrap();
            let slot = h.encode_slot(0, file.len() as u64);
            file[at..at + slot.len()].copy_from_slice(&slot);
        }
    }
    file
}

fn header_of(disk: &MemStorage, ledger: u64) -> LedgerHeader {
    decode_header(&disk.live_bytes(&ledger_file_name(ledger)).unwrap()).unwrap()
}

#[test]
fn samples_of_both_versions_open_and_read() {
    for (name, version) in [
        ("ledger-v3", VERSION),
        ("ledger-v2", VERSION_2),
        ("ledger-v1", VERSION_1),
    ] {
        let disk = sample(name);
        let log = open(&disk).unwrap();
        assert!(log.recovery_report().is_empty());
        assert_eq!(log.ledger_ids(), vec![1, 2]);
        assert!(log.ledger_info(1).unwrap().sealed);
        assert!(!log.ledger_info(2).unwrap().sealed);
        assert_entries(&log, 1, "sealed", 3);
        assert_entries(&log, 2, "open", 2);
        assert_eq!(header_of(&disk, 1).version, version);
    }
}

#[test]
fn sample_bytes_are_what_the_encoders_produce_for_their_nonce() {
    for name in ["ledger-v3", "ledger-v2", "ledger-v1"] {
        let disk = sample(name);
        for (id, sealed) in [(1, true), (2, false)] {
            let h = header_of(&disk, id);
            assert_eq!(
                disk.live_bytes(&ledger_file_name(id)).unwrap(),
                expected_bytes(&h, sealed, false),
                "{name} ledger {id}"
            );
        }
    }
}

#[test]
fn todays_writer_produces_version_3_bytes_with_a_fresh_nonce_per_ledger() {
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
    let (h1, h2) = (header_of(&disk, sealed), header_of(&disk, unsealed));
    assert_eq!((h1.version, h2.version), (VERSION, VERSION));
    assert_ne!(h1.nonce, h2.nonce);
    for (id, h, is_sealed) in [(sealed, h1, true), (unsealed, h2, false)] {
        assert_eq!(
            disk.live_bytes(&ledger_file_name(id)).unwrap(),
            expected_bytes(&h, is_sealed, true)
        );
    }
}

#[test]
fn version_1_and_2_ledgers_are_appended_to_and_sealed_in_their_own_form() {
    for (name, version) in [("ledger-v1", VERSION_1), ("ledger-v2", VERSION_2)] {
        let disk = sample(name);
        let log = open(&disk).unwrap();
        let before = disk.live_bytes(&ledger_file_name(2)).unwrap();
        log.append(2, meta(2), b"open entry 2").unwrap();
        log.sync(2).unwrap();
        // No slot is written into an older file: its bytes before the new frame are unchanged.
        let after = disk.live_bytes(&ledger_file_name(2)).unwrap();
        assert_eq!(after[..before.len()], before[..], "{name}");
        log.seal(2).unwrap();
        drop(log);
        assert_eq!(header_of(&disk, 2).version, version);
        let log = open(&disk).unwrap();
        assert!(log.ledger_info(2).unwrap().sealed);
        assert_entries(&log, 2, "open", 3);
        // New ledgers in the same directory are version 3.
        let id = log.create_ledger().unwrap();
        assert_eq!(header_of(&disk, id).version, VERSION);
        assert_eq!(
            disk.live_bytes(&ledger_file_name(id)).unwrap().len(),
            SLOTS_AT + 24
        );
    }
}

#[test]
fn samples_with_a_torn_tail_are_cut_back() {
    for name in ["ledger-v3-torn", "ledger-v2-torn", "ledger-v1-torn"] {
        let disk = sample(name);
        let log = open(&disk).unwrap();
        let report = log.recovery_report();
        assert_eq!(report.len(), 1);
        assert_eq!((report[0].ledger, report[0].dropped_bytes), (2, 30));
        assert_entries(&log, 2, "open", 2);
    }
}

#[test]
fn samples_with_a_damaged_synced_entry_open_damaged_or_refuse_in_strict_mode() {
    // (sample, offset of the damaged frame, whole entries before it)
    for (name, first_frame, before) in [
        ("ledger-v3-corrupt", 124, 1),
        ("ledger-v2-corrupt", 44, 0),
        ("ledger-v1-corrupt", 36, 0),
    ] {
        let disk = sample(name);
        let err = EntryLog::open(Arc::new(disk.clone()), strict()).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Corrupted {
                    place: ackstore::CorruptionPlace::Ledger { ledger: 2, offset },
                    kind: CorruptionKind::ChecksumMismatch
                } if offset == first_frame
            ),
            "{name}: {err}"
        );
        let log = open(&disk).unwrap();
        let info = log.ledger_info(2).unwrap();
        assert_eq!(
            (info.entries, info.damaged),
            (
                before,
                Some((first_frame, CorruptionKind::ChecksumMismatch))
            )
        );
        assert!(matches!(log.read(2, 1), Err(Error::Corrupted { .. })));
    }
}

#[test]
fn a_version_4_file_is_refused_as_an_unsupported_version() {
    let disk = sample("ledger-v3");
    let name = ledger_file_name(2);
    let mut bytes = disk.live_bytes(&name).unwrap();
    bytes[16] = 4;
    disk.set_bytes(&name, bytes).unwrap();
    let err = EntryLog::open(Arc::new(disk.clone()), strict()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Corrupted {
                place: ackstore::CorruptionPlace::Ledger { ledger: 2, .. },
                kind: CorruptionKind::UnsupportedVersion(4),
            }
        ),
        "{err}"
    );
}

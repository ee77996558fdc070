//! The synced-length slot: damage inside the last synced batch of a ledger (bit rot after an
//! fsync that returned `Ok`) is corruption naming the ledger and offset once the slot recording
//! that sync is on disk, in open (both recovery modes, both backends), in `verify`, for data
//! ledgers; a file cut short below the synced length is corruption too; a
//! torn slot copy falls back to the other one; and concurrent syncs leave a slot recording the
//! whole synced file.

use crate::support;

use std::sync::Arc;

use ackstore::internals::format::ledger::{
    HEADER_V3_LEN, LedgerHeader, SLOT_LEN, SLOTS_AT, decode_header,
};
use ackstore::internals::log::{
    EntryLog, LogConfig, RecoveryMode, ledger_file_name, verify_ledger,
};
use ackstore::{Error, LedgerConfig, ManagedLedger, Position};
use ackstore::{FileStorage, MemStorage, Storage};
use support::log_model::{meta, payload};

/// What a disk holds after a power cut once the kernel wrote back the pages overwritten in place
/// since the last fsync (the header's slot), and nothing of an unsynced tail.
fn slot_written_back(disk: &MemStorage) -> MemStorage {
    disk.crash_image(|_, durable, live| {
        let mut out = durable.to_vec();
        let common = durable.len().min(live.len());
        out[..common].copy_from_slice(&live[..common]);
        out
    })
}

fn strict() -> LogConfig {
    LogConfig {
        recovery: RecoveryMode::Strict,
        ..LogConfig::default()
    }
}

/// A disk with one data ledger: 3 entries synced, then 4 more synced in one last batch.
/// Returns the disk, the ledger id and the offset where the last batch starts.
fn two_batches() -> (MemStorage, u64, usize) {
    let disk = MemStorage::new();
    let log = EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap();
    let id = log.create_ledger().unwrap();
    for i in 0..3 {
        log.append(id, meta(i), &payload(id, i)).unwrap();
    }
    log.sync(id).unwrap();
    let batch = usize::try_from(log.ledger_info(id).unwrap().bytes).unwrap();
    for i in 3..7 {
        log.append(id, meta(i), &payload(id, i)).unwrap();
    }
    log.sync(id).unwrap();
    (disk, id, batch)
}

/// Frame start offsets of the ledger `id` holding entries `0..n` of [`payload`].
fn frame_starts(id: u64, n: u64) -> Vec<usize> {
    let mut at = HEADER_V3_LEN;
    (0..n)
        .map(|i| {
            let start = at;
            at += 44 + payload(id, i).len();
            start
        })
        .collect()
}

/// Checks that `image` holds ledger `id` damaged at `offset` with `before` whole entries: the
/// strict open refuses naming it, the tolerant open lists it damaged and cuts nothing, verify
/// reports corruption there; the same bytes on real files open the same way.
fn assert_corrupt_at(image: &MemStorage, id: u64, offset: u64, before: u64, what: &str) {
    match EntryLog::open(Arc::new(image.clone()), strict()) {
        Err(Error::Corrupted {
            place: ackstore::CorruptionPlace::Ledger { ledger, offset: o },
            ..
        }) => assert_eq!((ledger, o), (id, offset), "{what}"),
        other => panic!("{what}: strict open gave {other:?}"),
    }
    let problems = verify_ledger(image, id).unwrap();
    assert!(!problems.is_empty(), "{what}: verify found nothing");
    assert!(!problems[0].torn_tail, "{what}: verify called it torn");
    assert_eq!(problems[0].offset, offset, "{what}");
    let dir = tempfile::tempdir().unwrap();
    let name = ledger_file_name(id);
    std::fs::write(dir.path().join(&name), image.live_bytes(&name).unwrap()).unwrap();
    let files: Arc<dyn Storage> = Arc::new(FileStorage::open(dir.path(), false).unwrap());
    for storage in [Arc::new(image.clone()) as Arc<dyn Storage>, files] {
        let log = EntryLog::open(storage, LogConfig::default()).unwrap();
        assert!(log.recovery_report().is_empty(), "{what}: cut as a tail");
        let info = log.ledger_info(id).unwrap();
        assert_eq!(info.damaged.map(|d| d.0), Some(offset), "{what}");
        assert_eq!(info.entries, before, "{what}");
        for i in 0..before {
            assert_eq!(log.read(id, i).unwrap().payload, payload(id, i), "{what}");
        }
    }
}

#[test]
fn every_flipped_byte_of_the_last_synced_data_batch_is_corruption_once_the_slot_is_on_disk() {
    let (disk, id, batch) = two_batches();
    let name = ledger_file_name(id);
    let image = slot_written_back(&disk);
    let bytes = image.live_bytes(&name).unwrap();
    assert_eq!(bytes.len(), disk.live_bytes(&name).unwrap().len());
    let starts = frame_starts(id, 7);
    assert_eq!(starts[3], batch);
    for at in batch..bytes.len() {
        let mut bad = bytes.clone();
        bad[at] ^= 0x5a;
        let flipped = image.durable_image();
        flipped.set_bytes(&name, bad).unwrap();
        // The frame holding the byte is where the scan stops.
        let entry = starts.iter().rposition(|s| *s <= at).unwrap();
        assert_corrupt_at(
            &flipped,
            id,
            starts[entry] as u64,
            entry as u64,
            &format!("flip at {at}"),
        );
    }
}

#[test]
fn a_data_ledger_cut_short_below_its_synced_length_is_corruption() {
    let (disk, id, batch) = two_batches();
    let name = ledger_file_name(id);
    let image = slot_written_back(&disk);
    let bytes = image.live_bytes(&name).unwrap();
    let starts = frame_starts(id, 7);
    for len in batch..bytes.len() {
        let cut = image.durable_image();
        cut.set_bytes(&name, bytes[..len].to_vec()).unwrap();
        // The scan stops after the frames the cut left whole, where the next one starts.
        let whole = starts[1..]
            .iter()
            .chain([&bytes.len()])
            .filter(|end| **end <= len)
            .count();
        let at = starts[whole];
        assert_corrupt_at(&cut, id, at as u64, whole as u64, &format!("cut at {len}"));
    }
}

#[test]
fn a_torn_newest_slot_copy_falls_back_to_the_older_one() {
    let (disk, id, batch) = two_batches();
    let name = ledger_file_name(id);
    let bytes = slot_written_back(&disk).live_bytes(&name).unwrap();
    let h = decode_header(&bytes).unwrap();
    let slots = &bytes[SLOTS_AT..HEADER_V3_LEN];
    assert_eq!(h.decode_slots(slots), Some(bytes.len() as u64));
    // Two syncs: copy 0 records the first batch, copy 1 (the newest) the whole file.
    let newest = usize::try_from(LedgerHeader::slot_offset(1)).unwrap();
    let starts = frame_starts(id, 7);
    for torn in [4, 8, SLOT_LEN - 1] {
        let mut bad = bytes.clone();
        bad[newest + torn] ^= 0xff;
        // Damage in the last batch: only the lost copy recorded its sync, so it is a torn tail.
        let last = starts[5] + 50;
        bad[last] ^= 1;
        let image = disk.durable_image();
        image.set_bytes(&name, bad.clone()).unwrap();
        let log = EntryLog::open(Arc::new(image), LogConfig::default()).unwrap();
        assert!(log.damaged_ledgers().is_empty());
        assert_eq!(log.entry_count(id).unwrap(), 5);
        assert_eq!(log.recovery_report()[0].offset, starts[5] as u64);
        // Damage in the first batch: the older copy still records it.
        bad[last] ^= 1;
        bad[starts[1] + 50] ^= 1;
        let image = disk.durable_image();
        image.set_bytes(&name, bad).unwrap();
        assert_corrupt_at(&image, id, starts[1] as u64, 1, "first batch, torn slot");
    }
    assert!(batch < starts[5]);
}

#[test]
fn concurrent_syncs_on_real_files_leave_a_slot_recording_the_whole_synced_file() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(FileStorage::open(dir.path(), false).unwrap());
    let log = Arc::new(EntryLog::open(storage, LogConfig::default()).unwrap());
    let id = log.create_ledger().unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for i in 0..200u64 {
                    log.append(id, meta(i), &payload(t, i)).unwrap();
                    if i % 3 == t % 3 {
                        log.sync(id).unwrap();
                    }
                }
                log.sync(id).unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let bytes = std::fs::read(dir.path().join(ledger_file_name(id))).unwrap();
    let h = decode_header(&bytes).unwrap();
    assert_eq!(
        h.decode_slots(&bytes[SLOTS_AT..HEADER_V3_LEN]),
        Some(bytes.len() as u64)
    );
    assert_eq!(log.entry_count(id).unwrap(), 800);
    drop(log);
    // Every byte is recorded as synced: cutting the last byte is corruption, not a torn tail.
    let image = MemStorage::new();
    image
        .create(&ledger_file_name(id))
        .unwrap()
        .write_all_at(&bytes[..bytes.len() - 1], 0)
        .unwrap();
    let err = EntryLog::open(Arc::new(image), strict()).unwrap_err();
    assert!(
        matches!(err, Error::Corrupted { place: ackstore::CorruptionPlace::Ledger { ledger, .. }, .. } if ledger == id),
        "{err}"
    );
}

/// Writes every file of `image` into `dir`.
fn write_files(image: &MemStorage, dir: &std::path::Path) {
    for name in image.list().unwrap() {
        std::fs::write(dir.join(&name), image.live_bytes(&name).unwrap()).unwrap();
    }
}

/// The exit code `ackstore verify` gives `dir`, from the check it prints
/// (`ackstore::check::verify`): 0 sound, 1 damaged, 2 the check could not run.
fn verify_exit_code(dir: &std::path::Path) -> Option<i32> {
    let storage: std::sync::Arc<dyn ackstore::Storage> =
        std::sync::Arc::new(ackstore::FileStorage::open(dir, false).expect("the directory opens"));
    Some(match ackstore::check::verify(&storage) {
        Ok(report) => i32::from(!report.is_sound()),
        Err(_) => 2,
    })
}

#[test]
fn a_rotten_entry_of_the_last_synced_batch_refuses_the_topic_and_fails_verify() {
    let disk = MemStorage::new();
    let topic =
        ManagedLedger::open_with_storage(Arc::new(disk.clone()), LedgerConfig::default()).unwrap();
    let p: Vec<Position> = (0..10u8).map(|i| topic.append(&[i; 40]).unwrap()).collect();
    topic.sync().unwrap();
    let ledger = p[0].ledger_id;
    let name = ledger_file_name(ledger);
    let first = disk.live_bytes(&name).unwrap().len();
    for i in 10..20u8 {
        topic.append(&[i; 40]).unwrap();
    }
    topic.sync().unwrap();
    // A power cut now, the slot written back; then one byte of the last batch rots.
    let image = slot_written_back(&disk);
    drop(topic);
    let mut bytes = image.live_bytes(&name).unwrap();
    let at = first + (bytes.len() - first) / 2;
    bytes[at] ^= 0x04;
    image.set_bytes(&name, bytes).unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_files(&image, dir.path());
    match ManagedLedger::open_with_storage(Arc::new(image), LedgerConfig::default()) {
        Err(Error::Corrupted {
            place: ackstore::CorruptionPlace::Ledger { ledger: l, offset },
            ..
        }) => {
            assert_eq!(l, ledger);
            assert!((first as u64..=at as u64).contains(&offset), "{offset}");
        }
        Ok(t) => panic!(
            "the topic opened with {:?}: synced entries were cut",
            t.last_position()
        ),
        Err(e) => panic!("{e}"),
    }
    assert_eq!(verify_exit_code(dir.path()), Some(1));
    // The same on real files.
    match ManagedLedger::open(dir.path(), LedgerConfig::default()) {
        Err(Error::Corrupted {
            place: ackstore::CorruptionPlace::Ledger { ledger: l, .. },
            ..
        }) => assert_eq!(l, ledger),
        other => panic!("real files: {:?}", other.map(|t| t.last_position())),
    }
}

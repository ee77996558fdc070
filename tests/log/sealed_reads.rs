//! Reads of sealed ledgers by position and through a map. A sealed ledger smaller than
//! `LogConfig::map_sealed_from` is read by position (its frame's bounds from the index, then the
//! frame) and never mapped; a larger one through one map. Both paths return the same entries,
//! and damage done to the file while the log is open (a bit flipped anywhere, a frame or the
//! index zeroed, the file cut short, the older unsealed copy put back) reads as the truth or
//! fails with `Corrupted`: a read fails exactly when a byte it depends on (its frame, its two
//! index offsets) changed, and never returns a wrong entry or panics.
//!
//! A read by position takes its frame's bounds from the window of 16 index words its ledger
//! read last when the window holds them, else reads a new window from the entry's word: readers
//! at one position, and a reader going forward, take one read of the file an entry. Damage to a
//! frame is found whatever the window holds; a word damaged on disk after a window took it is
//! not read again (the copy read before is used, and the frame it names checked).

use crate::support;

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ackstore::internals::format::ledger::{SealedLayout, validate_sealed};
use ackstore::internals::log::{EntryLog, LogConfig, ledger_file_name};
use ackstore::{DEFAULT_MAP_SEALED_FROM, Error, FileStorage, MemStorage, Storage};
use support::log_model::{meta, payload};
use support::tap::{Hook, Op, Tap};

const ENTRIES: u64 = 24;

/// Every sealed ledger read through a map, and (the default) small ones by position.
const PATHS: [u64; 2] = [0, DEFAULT_MAP_SEALED_FROM];

fn config(map_sealed_from: u64) -> LogConfig {
    LogConfig {
        map_sealed_from,
        ..LogConfig::default()
    }
}

/// Creates a ledger of `entries` entries in `log`, synced and sealed; returns its id and the
/// file's bytes just before the seal (an older copy of it).
fn sealed_ledger(log: &EntryLog, storage: &dyn Storage, entries: u64) -> (u64, Vec<u8>) {
    sealed_ledger_of(log, storage, entries, payload)
}

/// [`sealed_ledger`] with the payloads `body(id, i)`.
pub(super) fn sealed_ledger_of(
    log: &EntryLog,
    storage: &dyn Storage,
    entries: u64,
    body: fn(u64, u64) -> Vec<u8>,
) -> (u64, Vec<u8>) {
    let id = log.create_ledger().unwrap();
    for i in 0..entries {
        log.append(id, meta(i), &body(id, i)).unwrap();
    }
    log.sync(id).unwrap();
    let file = storage.open(&ledger_file_name(id)).unwrap();
    let older = file.read_all(u64::MAX).unwrap().unwrap();
    log.seal(id).unwrap();
    (id, older)
}

#[test]
fn small_sealed_ledgers_are_read_by_position_and_larger_ones_through_one_map() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(dir.path(), false).unwrap());
    let (small, large) = {
        let log = EntryLog::open(storage.clone(), LogConfig::default()).unwrap();
        let (small, _) = sealed_ledger(&log, storage.as_ref(), 3);
        let (large, _) = sealed_ledger(&log, storage.as_ref(), 200);
        (small, large)
    };
    let size = |id| log_size(&storage, id);
    assert!(size(small) < size(large));
    // Only the large one reaches the size from which ledgers are mapped; every one of them; none.
    for (map_sealed_from, maps) in [(size(large), 1), (0, 2), (DEFAULT_MAP_SEALED_FROM, 0)] {
        let log = EntryLog::open(storage.clone(), config(map_sealed_from)).unwrap();
        for _round in 0..2 {
            for (id, entries) in [(small, 3), (large, 200)] {
                for i in 0..entries {
                    let e = log.read(id, i).unwrap();
                    assert_eq!((e.meta, e.payload), (meta(i), payload(id, i)));
                    assert_eq!(log.read_meta(id, i).unwrap(), meta(i));
                }
                assert!(matches!(log.read(id, entries), Err(Error::NoSuchEntry(_))));
            }
        }
        assert_eq!(log.stats().maps, maps, "map_sealed_from {map_sealed_from}");
    }
}

fn log_size(storage: &Arc<dyn Storage>, id: u64) -> u64 {
    storage.open(&ledger_file_name(id)).unwrap().size().unwrap()
}

/// The byte ranges entry `i`'s read depends on: its frame and the index offsets that bound it
/// (its own, and the next entry's, which is where its frame ends; the last one starts at its
/// offset and ends at the trailer's `data_end`, both held since open).
pub(super) fn depends_on(layout: &SealedLayout, bytes: &[u8], i: u64) -> [Range<usize>; 3] {
    let (start, end) = layout.frame_range(bytes, i).unwrap();
    let slot = |j: u64| {
        let at = usize::try_from(layout.offsets_start + 8 * j).unwrap();
        at..at + 8
    };
    // The last entry's frame starts where the open found it, reading the whole index.
    let (own, next) = if i + 1 < layout.entry_count {
        (slot(i), slot(i + 1))
    } else {
        (0..0, 0..0)
    };
    [
        usize::try_from(start).unwrap()..usize::try_from(end).unwrap(),
        own,
        next,
    ]
}

/// Opens a copy of `disk` by each read path, puts `damaged` in place of the sealed ledger `id`'s
/// file (`original` before), and reads every entry: each reads the truth, or fails with
/// `Corrupted` when `strict` and only when a byte it depends on changed.
fn check_damage(disk: &MemStorage, id: u64, original: &[u8], damaged: &[u8], strict: bool) {
    for map_sealed_from in PATHS {
        let image = disk.durable_image();
        let log = EntryLog::open(Arc::new(image.clone()), config(map_sealed_from)).unwrap();
        image
            .set_bytes(&ledger_file_name(id), damaged.to_vec())
            .unwrap();
        check_reads(&log, id, (original, damaged), strict, map_sealed_from);
    }
}

/// Reads every entry of the sealed ledger `id` of `log`, whose file was `original` when `log`
/// took its layout and is `damaged` now: each reads the truth, or fails with `Corrupted` when
/// `strict` and only when a byte it depends on changed.
fn check_reads(
    log: &EntryLog,
    id: u64,
    (original, damaged): (&[u8], &[u8]),
    strict: bool,
    map_sealed_from: u64,
) {
    let layout = validate_sealed(original, id).unwrap();
    let changed: Vec<usize> = (0..original.len())
        .filter(|&at| damaged.get(at) != original.get(at))
        .collect();
    for i in 0..ENTRIES {
        let hit = depends_on(&layout, original, i)
            .iter()
            .any(|r| changed.iter().any(|at| r.contains(at)));
        // Formatted only for a failure: the list of changed bytes is long.
        let what = || format!("entry {i}, map_sealed_from {map_sealed_from}, changed {changed:?}");
        for (read, truth) in [
            (
                log.read(id, i).map(|e| (e.meta, e.payload)),
                (meta(i), payload(id, i)),
            ),
            (
                log.read_meta(id, i).map(|m| (m, payload(id, i))),
                (meta(i), payload(id, i)),
            ),
        ] {
            match read {
                Ok(entry) => {
                    assert_eq!(entry, truth, "{}: a wrong entry", what());
                    assert!(!(strict && hit), "{}: damage unnoticed", what());
                }
                Err(Error::Corrupted { .. }) => {
                    assert!(!strict || hit, "{}: undamaged entry refused", what());
                }
                Err(e) => panic!("{}: {e}", what()),
            }
        }
    }
}

/// Seals a ledger with a log of each read path, puts its file as `damage` makes it in place
/// (from its bytes as sealed) and reads every entry through that log: the layout is the seal's
/// own, not an open's.
fn check_damage_after_seal(damage: impl Fn(&[u8]) -> Vec<u8>, strict: bool) {
    for map_sealed_from in PATHS {
        let disk = MemStorage::new();
        let log = EntryLog::open(Arc::new(disk.clone()), config(map_sealed_from)).unwrap();
        let (id, _) = sealed_ledger(&log, &disk, ENTRIES);
        let name = ledger_file_name(id);
        let original = disk.live_bytes(&name).unwrap();
        let damaged = damage(&original);
        disk.set_bytes(&name, damaged.clone()).unwrap();
        check_reads(&log, id, (&original, &damaged), strict, map_sealed_from);
    }
}

/// As [`a_sealed_ledger_damaged_while_open_reads_true_or_fails_by_position_and_by_map`], with
/// the log that sealed the ledger (its last frame's offset known at the seal, never read back).
#[test]
fn a_ledger_damaged_after_its_seal_reads_true_or_fails_through_the_log_that_sealed_it() {
    let disk = MemStorage::new();
    let id = {
        let log = EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap();
        sealed_ledger(&log, &disk, ENTRIES).0
    };
    // Every such ledger has the same layout: its entries are the same.
    let sample = disk.live_bytes(&ledger_file_name(id)).unwrap();
    let layout = validate_sealed(&sample, id).unwrap();
    // A bit flipped in each byte of the last frame, the index and the trailer; the file cut
    // short at each of them.
    let last = depends_on(&layout, &sample, ENTRIES - 1)[0].start;
    for at in last..sample.len() {
        check_damage_after_seal(
            |original| {
                let mut bad = original.to_vec();
                bad[at] ^= 0x80;
                bad
            },
            true,
        );
        check_damage_after_seal(|original| original[..at].to_vec(), false);
    }
}

#[test]
fn a_sealed_ledger_damaged_while_open_reads_true_or_fails_by_position_and_by_map() {
    let disk = MemStorage::new();
    let (id, older) = {
        let log = EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap();
        sealed_ledger(&log, &disk, ENTRIES)
    };
    let original = disk.live_bytes(&ledger_file_name(id)).unwrap();
    let layout = validate_sealed(&original, id).unwrap();
    // A bit flipped in every byte.
    for at in 0..original.len() {
        for mask in [0x01, 0x80] {
            let mut bad = original.clone();
            bad[at] ^= mask;
            check_damage(&disk, id, &original, &bad, true);
        }
    }
    // Each frame zeroed, and the whole index.
    let mut zeroed: Vec<Range<usize>> = (0..ENTRIES)
        .map(|i| depends_on(&layout, &original, i)[0].clone())
        .collect();
    zeroed.push(usize::try_from(layout.data_end).unwrap()..original.len());
    for range in zeroed {
        let mut bad = original.clone();
        bad[range].fill(0);
        check_damage(&disk, id, &original, &bad, true);
    }
    // Cut short at every length, and the older copy (before the seal) put back: the bytes a
    // read needs may be gone, so a read fails or reads the truth.
    for len in 0..original.len() {
        check_damage(&disk, id, &original, &original[..len], false);
    }
    check_damage(&disk, id, &original, &older, false);
}

/// Counts the reads of ledger files.
#[derive(Default)]
struct Reads(AtomicU64);

impl Hook for Reads {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        if matches!(op, Op::Read(name) if name.starts_with("ledger-")) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

/// A sealed ledger of `entries` entries on an in-memory disk, and a log of it (by position)
/// whose reads of ledger files are counted from now on.
fn counted_log(entries: u64) -> (MemStorage, u64, EntryLog, Arc<Reads>) {
    let disk = MemStorage::new();
    let id = {
        let log = EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap();
        sealed_ledger(&log, &disk, entries).0
    };
    let reads = Arc::new(Reads::default());
    let tap = Tap::new(Arc::new(disk.clone()), reads.clone());
    let log = EntryLog::open(Arc::new(tap), LogConfig::default()).unwrap();
    reads.0.store(0, Ordering::SeqCst);
    (disk, id, log, reads)
}

fn assert_true(log: &EntryLog, id: u64, i: u64) {
    let e = log.read(id, i).unwrap();
    assert_eq!((e.meta, e.payload), (meta(i), payload(id, i)), "entry {i}");
}

#[test]
fn readers_at_one_position_and_a_reader_going_forward_take_one_read_of_the_file_an_entry() {
    let (_disk, id, log, reads) = counted_log(40);
    // Ten subscriptions at entry 3: one read of the index (words 3 to 18), then a frame each.
    for _ in 0..10 {
        assert_true(&log, id, 3);
    }
    assert_eq!(reads.0.load(Ordering::SeqCst), 1 + 10);
    // Entries 4 to 17 lie in that window: their frames only.
    for i in 4..18 {
        assert_true(&log, id, i);
    }
    assert_eq!(reads.0.load(Ordering::SeqCst), 11 + 14);
    // From the start: windows from entries 0, 16 and 32 (the last holding 8 words, the last
    // entry's bounds ending at the frames' end); the last entry's start known since the open.
    reads.0.store(0, Ordering::SeqCst);
    for i in 0..40 {
        assert_true(&log, id, i);
        assert_eq!(log.read_meta(id, i).unwrap(), meta(i));
    }
    assert_eq!(reads.0.load(Ordering::SeqCst), 3 + 2 * 40);
    assert!(matches!(log.read(id, 40), Err(Error::NoSuchEntry(_))));
}

#[test]
fn a_frame_damaged_after_a_window_took_its_bounds_fails_and_a_word_damaged_after_is_not_read_again()
{
    let (disk, id, log, _reads) = counted_log(ENTRIES);
    let name = ledger_file_name(id);
    let original = disk.live_bytes(&name).unwrap();
    let layout = validate_sealed(&original, id).unwrap();
    // The window of entries 0 to 15.
    assert_true(&log, id, 0);
    // Entry 5's index word zeroed, entry 6's frame's checksum flipped, entry 20's word zeroed.
    let mut bad = original.clone();
    for i in [5, 20] {
        bad[depends_on(&layout, &original, i)[1].clone()].fill(0);
    }
    let frame = depends_on(&layout, &original, 6)[0].clone();
    bad[frame.end - 1] ^= 0x80;
    disk.set_bytes(&name, bad).unwrap();
    // Entry 5 from the window's copy, its frame checked whole: the truth.
    assert_true(&log, id, 5);
    assert!(matches!(log.read(id, 6), Err(Error::Corrupted { .. })));
    // Entry 20 lies past the window: its word is read, and refused.
    assert!(matches!(log.read(id, 20), Err(Error::Corrupted { .. })));
    // Entry 5 again, past the window that entry 20's read took: its word is read now, and
    // refused.
    assert!(matches!(log.read(id, 5), Err(Error::Corrupted { .. })));
    assert_true(&log, id, 7);
}

#[test]
fn threads_reading_one_small_sealed_ledger_at_once_read_the_truth() {
    let (_disk, id, log, _reads) = counted_log(300);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let log = &log;
            s.spawn(move || {
                // Each thread its own walk: forward, backward, and strides that leave and
                // re-enter each other's windows.
                for k in 0..3_000u64 {
                    let i = match t {
                        0 => k % 300,
                        1 => 299 - k % 300,
                        _ => (k * (7 + t * 6)) % 300,
                    };
                    assert_true(log, id, i);
                }
            });
        }
    });
}

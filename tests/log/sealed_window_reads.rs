//! Reads of small sealed ledgers by position through the index window (16 index words from one
//! read, kept by the ledger for the reads that follow), against damage done before and after a
//! window was taken: bit flips, zeroed and swapped index words, the file cut short, the older
//! unsealed copy and a sibling ledger's file of the same layout put in its place, on the
//! in-memory disk and on real files, with ledgers of 1 to 33 entries read in orders that enter
//! and leave windows, through the log that sealed them and through one that opened them.
//!
//! Every read is the truth or `Corrupted`. For damage that keeps the file's length: a read
//! whose frame changed fails, and a read none of whose bytes (its frame, its two index words)
//! changed reads the truth, whatever window its ledger holds.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ackstore::internals::format::ledger::{SealedLayout, validate_sealed};
use ackstore::internals::log::{EntryLog, LogConfig, ledger_file_name};
use ackstore::{Error, FileStorage, MemStorage, Storage};

use super::sealed_reads::{depends_on, sealed_ledger_of};
use crate::support::log_model::meta;

/// Entry counts around the window's length.
const COUNTS: [u64; 8] = [1, 2, 15, 16, 17, 31, 32, 33];

/// Entry `i` of ledger `id`: its length depends on `i` alone, so ledgers of as many entries
/// have the same layout (the same index words) and differ only in their bytes.
fn body(id: u64, i: u64) -> Vec<u8> {
    let len = usize::try_from(20 + (i * 13) % 50).unwrap();
    (0..len)
        .map(|j| u8::try_from((id * 31 + i * 7 + j as u64) & 0xff).unwrap())
        .collect()
}

/// A ledger of `n` entries of payloads [`body`], synced and sealed; its id and its bytes
/// before the seal.
fn sealed(log: &EntryLog, storage: &dyn Storage, n: u64) -> (u64, Vec<u8>) {
    sealed_ledger_of(log, storage, n, body)
}

/// What a damage works from: the ledger's file as sealed, before its seal, and the file of a
/// sibling ledger of the same layout.
struct Files {
    original: Vec<u8>,
    older: Vec<u8>,
    sibling: Vec<u8>,
}

/// One way to damage a ledger's file.
#[derive(Debug, Clone)]
enum Damage {
    Flip(usize, u8),
    ZeroWord(u64),
    /// Index words `a` and `b` swapped.
    SwapWords(u64, u64),
    Cut(usize),
    Older,
    Sibling,
}

impl Damage {
    fn apply(&self, layout: &SealedLayout, f: &Files) -> Vec<u8> {
        let word = |j: u64| {
            let at = usize::try_from(layout.offsets_start + 8 * j).unwrap();
            at..at + 8
        };
        let mut bad = f.original.clone();
        match *self {
            Damage::Flip(at, mask) => bad[at] ^= mask,
            Damage::ZeroWord(j) => bad[word(j)].fill(0),
            Damage::SwapWords(a, b) => {
                let wa = f.original[word(a)].to_vec();
                bad[word(a)].copy_from_slice(&f.original[word(b)]);
                bad[word(b)].copy_from_slice(&wa);
            }
            Damage::Cut(len) => bad.truncate(len),
            Damage::Older => bad.clone_from(&f.older),
            Damage::Sibling => bad.clone_from(&f.sibling),
        }
        bad
    }

    /// Every damage of a ledger of layout `layout` whose file is `file`.
    fn all(layout: &SealedLayout, file: &[u8]) -> Vec<Damage> {
        let n = layout.entry_count;
        let mut all = vec![Damage::Older, Damage::Sibling];
        // Every byte of the footer; of the header and of each frame, the first, a middle and
        // the last byte.
        let mut at: Vec<usize> = (usize::try_from(layout.data_end).unwrap()..file.len()).collect();
        at.extend([
            0,
            20,
            usize::try_from(layout.header.data_start()).unwrap() - 1,
        ]);
        for i in 0..n {
            let (start, end) = layout.frame_range(file, i).unwrap();
            let (start, end) = (
                usize::try_from(start).unwrap(),
                usize::try_from(end).unwrap(),
            );
            at.extend([start, (start + end) / 2, end - 1]);
        }
        for at in at {
            all.push(Damage::Flip(at, 0x01));
            all.push(Damage::Flip(at, 0x80));
            all.push(Damage::Cut(at));
        }
        for j in 0..n {
            all.push(Damage::ZeroWord(j));
            for k in [j + 1, j + 2, j + 16, n - 1] {
                if k < n && k != j {
                    all.push(Damage::SwapWords(j, k));
                }
            }
        }
        all
    }
}

/// Reads entry `i` of `id` both ways; each is the truth or `Corrupted`, and when `damaged` has
/// the original's length, fails if its frame changed and reads the truth if nothing it depends
/// on changed.
fn check_read(log: &EntryLog, id: u64, i: u64, (original, damaged): (&[u8], &[u8]), what: &str) {
    let layout = validate_sealed(original, id).unwrap();
    let deps = depends_on(&layout, original, i);
    let changed = |r: &Range<usize>| r.clone().any(|at| damaged.get(at) != original.get(at));
    let same_len = original.len() == damaged.len();
    let frame_changed = same_len && changed(&deps[0]);
    let untouched = same_len && !deps.iter().any(changed);
    let reads = [
        log.read(id, i).map(|e| (e.meta, e.payload)),
        log.read_meta(id, i).map(|m| (m, body(id, i))),
    ];
    for read in reads {
        match read {
            Ok(entry) => {
                assert_eq!(
                    entry,
                    (meta(i), body(id, i)),
                    "{what}, entry {i}: a wrong entry"
                );
                assert!(!frame_changed, "{what}, entry {i}: a changed frame read");
            }
            Err(Error::Corrupted { .. }) => {
                assert!(!untouched, "{what}, entry {i}: an undamaged entry refused");
            }
            Err(e) => panic!("{what}, entry {i}: {e}"),
        }
    }
}

/// The entries read before the damage (each takes or uses a window), for `n` entries.
fn warm_ups(n: u64) -> Vec<Vec<u64>> {
    let mut w = vec![vec![], vec![0], vec![n / 2], vec![n - 1], (0..n).collect()];
    if n >= 2 {
        w.push(vec![n - 2]);
    }
    if n > 16 {
        w.push(vec![16, 1]);
    }
    w
}

/// The orders of the reads after the damage: forward, backward, and from the middle out.
fn orders(n: u64) -> Vec<u64> {
    let mut o: Vec<u64> = (0..n).collect();
    o.extend((0..n).rev());
    o.extend((n / 2..n).chain(0..n / 2));
    o
}

/// Whether the ledger is read through the log that sealed it, or one that opened it.
#[derive(Debug, Clone, Copy)]
enum Made {
    SealedHere,
    Opened,
}

#[test]
fn a_small_sealed_ledger_damaged_before_or_after_its_window_reads_true_or_fails() {
    for n in COUNTS {
        for made in [Made::Opened, Made::SealedHere] {
            // A disk of the ledger and its sibling; for `Opened`, each case opens a copy.
            let disk = MemStorage::new();
            let log = EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap();
            let (id, older) = sealed(&log, &disk, n);
            let (sib, _) = sealed(&log, &disk, n);
            drop(log);
            let name = ledger_file_name(id);
            let files = Files {
                original: disk.live_bytes(&name).unwrap(),
                older,
                sibling: disk.live_bytes(&ledger_file_name(sib)).unwrap(),
            };
            let layout = validate_sealed(&files.original, id).unwrap();
            assert_eq!(
                layout.offsets_start,
                validate_sealed(&files.sibling, sib).unwrap().offsets_start
            );
            for damage in Damage::all(&layout, &files.original) {
                for warm in warm_ups(n) {
                    let what = format!("{n} entries, {made:?}, {damage:?}, warmed {warm:?}");
                    let (log, image, own) = match made {
                        Made::Opened => {
                            let image = disk.durable_image();
                            let log = EntryLog::open(Arc::new(image.clone()), LogConfig::default())
                                .unwrap();
                            (log, image, None)
                        }
                        Made::SealedHere => {
                            // Ids 1 and 2 again, with nonces of their own.
                            let image = MemStorage::new();
                            let log = EntryLog::open(Arc::new(image.clone()), LogConfig::default())
                                .unwrap();
                            let (again, older) = sealed(&log, &image, n);
                            let (sib, _) = sealed(&log, &image, n);
                            assert_eq!(again, id);
                            let own = Files {
                                original: image.live_bytes(&name).unwrap(),
                                older,
                                sibling: image.live_bytes(&ledger_file_name(sib)).unwrap(),
                            };
                            (log, image, Some(own))
                        }
                    };
                    let files = own.as_ref().unwrap_or(&files);
                    let damaged = damage.apply(&layout, files);
                    let pair = (&files.original[..], &damaged[..]);
                    for &i in &warm {
                        check_read(&log, id, i, (pair.0, pair.0), &what);
                    }
                    image.set_bytes(&name, damaged.clone()).unwrap();
                    for i in orders(n) {
                        check_read(&log, id, i, pair, &what);
                    }
                }
            }
        }
    }
}

/// Damage found by a read and then undone (the file's bytes as sealed again): the ledger's
/// reads are the truth again, whatever window the damaged bytes gave it.
#[test]
fn a_small_sealed_ledger_whose_damage_is_undone_reads_true_again() {
    for n in [17, 33] {
        let disk = MemStorage::new();
        let log = EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap();
        let (id, _) = sealed(&log, &disk, n);
        drop(log);
        let name = ledger_file_name(id);
        let original = disk.live_bytes(&name).unwrap();
        let layout = validate_sealed(&original, id).unwrap();
        for j in 1..n - 1 {
            let log = EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap();
            let files = Files {
                original: original.clone(),
                older: Vec::new(),
                sibling: Vec::new(),
            };
            let damaged = Damage::ZeroWord(j).apply(&layout, &files);
            disk.set_bytes(&name, damaged.clone()).unwrap();
            // Entry j - 1 ends at word j: refused, by a window read from the damaged file.
            let what = format!("{n} entries, word {j} zeroed");
            check_read(&log, id, j - 1, (&original, &damaged), &what);
            assert!(log.read(id, j - 1).is_err(), "{what}");
            disk.set_bytes(&name, original.clone()).unwrap();
            let what = format!("{n} entries, word {j} zeroed then restored");
            for i in orders(n) {
                check_read(&log, id, i, (&original, &original), &what);
            }
        }
    }
}

/// A ledger deleted and created again under the same id (ids reserved again) by the log that
/// read it: its reads are the new ledger's entries, not through the old one's window.
#[test]
fn a_ledger_deleted_and_created_again_under_its_id_reads_its_own_entries() {
    let disk = MemStorage::new();
    let log = EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap();
    let (id, _) = sealed(&log, &disk, 20);
    for i in 0..20 {
        assert_eq!(log.read(id, i).unwrap().payload, body(id, i));
    }
    log.read(id, 2).unwrap();
    log.delete_ledger(id).unwrap();
    log.reserve_ids(id, id + 1, None);
    let again = log.create_ledger().unwrap();
    assert_eq!(again, id);
    // Other entries under the same ids and layout: offset by 100 in their contents.
    for i in 0..20 {
        log.append(id, meta(i + 100), &body(id + 100, i)).unwrap();
    }
    log.seal(id).unwrap();
    for i in (0..20).chain((0..20).rev()) {
        let e = log.read(id, i).unwrap();
        assert_eq!((e.meta, e.payload), (meta(i + 100), body(id + 100, i)));
    }
}

/// Threads reading one small sealed ledger while its file turns damaged and back: every read
/// is the truth or fails (`Corrupted`, or the error of a read cut short by a file whose length
/// changed under it).
#[test]
fn threads_reading_a_small_sealed_ledger_whose_file_changes_under_them_read_true_or_fail() {
    let disk = MemStorage::new();
    let n = 40;
    let (id, files) = {
        let log = EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap();
        let (id, older) = sealed(&log, &disk, n);
        let (sib, _) = sealed(&log, &disk, n);
        let files = Files {
            original: disk.live_bytes(&ledger_file_name(id)).unwrap(),
            older,
            sibling: disk.live_bytes(&ledger_file_name(sib)).unwrap(),
        };
        (id, files)
    };
    let layout = validate_sealed(&files.original, id).unwrap();
    let name = ledger_file_name(id);
    let log = EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap();
    let variants: Vec<Vec<u8>> = Damage::all(&layout, &files.original)
        .iter()
        .step_by(7)
        .map(|d| d.apply(&layout, &files))
        .collect();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let (log, done) = (&log, &done);
            s.spawn(move || {
                let mut k = 0u64;
                while !done.load(Ordering::SeqCst) || k < 1_000 {
                    let i = (k * (5 + t * 6) + t) % n;
                    k += 1;
                    for read in [
                        log.read(id, i).map(|e| (e.meta, e.payload)),
                        log.read_meta(id, i).map(|m| (m, body(id, i))),
                    ] {
                        match read {
                            Ok(entry) => assert_eq!(entry, (meta(i), body(id, i)), "entry {i}"),
                            Err(Error::Corrupted { .. }) => {}
                            // A read of a file cut short that is whole again when the read
                            // asks its length: the short read's error as it is.
                            Err(Error::Io { source, .. })
                                if source.kind() == std::io::ErrorKind::UnexpectedEof => {}
                            Err(e) => panic!("entry {i}: {e:?}"),
                        }
                    }
                }
            });
        }
        for round in 0..4 {
            for v in &variants {
                disk.set_bytes(&name, v.clone()).unwrap();
                if round % 2 == 0 {
                    disk.set_bytes(&name, files.original.clone()).unwrap();
                }
            }
        }
        done.store(true, Ordering::SeqCst);
    });
}

/// On real files: the ledger's file written over in place (a word zeroed, a frame's byte
/// flipped, the sibling's bytes, the file cut short) after a window was taken reads true or
/// fails as on the in-memory disk.
#[test]
fn a_small_sealed_ledger_on_real_files_damaged_in_place_reads_true_or_fails() {
    let n = 33;
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(dir.path(), false).unwrap());
    let (id, files) = {
        let log = EntryLog::open(storage.clone(), LogConfig::default()).unwrap();
        let (id, older) = sealed(&log, storage.as_ref(), n);
        let (sib, _) = sealed(&log, storage.as_ref(), n);
        let read = |id| std::fs::read(dir.path().join(ledger_file_name(id))).unwrap();
        let files = Files {
            original: read(id),
            older,
            sibling: read(sib),
        };
        (id, files)
    };
    let layout = validate_sealed(&files.original, id).unwrap();
    let path = dir.path().join(ledger_file_name(id));
    let (start, _) = layout.frame_range(&files.original, 20).unwrap();
    let len = files.original.len();
    let mut damages = vec![
        Damage::ZeroWord(5),
        Damage::ZeroWord(20),
        Damage::SwapWords(3, 4),
        Damage::Flip(usize::try_from(start).unwrap() + 30, 0x80),
        Damage::Sibling,
        Damage::Older,
    ];
    damages.extend((0..len).step_by(29).map(Damage::Cut));
    for damage in damages {
        for warm in warm_ups(n) {
            std::fs::write(&path, &files.original).unwrap();
            let log = EntryLog::open(storage.clone(), LogConfig::default()).unwrap();
            let what = format!("real files, {damage:?}, warmed {warm:?}");
            for &i in &warm {
                check_read(&log, id, i, (&files.original, &files.original), &what);
            }
            let damaged = damage.apply(&layout, &files);
            // In place: the log's open file sees the new bytes.
            let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            std::os::unix::fs::FileExt::write_all_at(&f, &damaged, 0).unwrap();
            f.set_len(damaged.len() as u64).unwrap();
            drop(f);
            for i in orders(n) {
                check_read(&log, id, i, (&files.original, &damaged), &what);
            }
        }
    }
}

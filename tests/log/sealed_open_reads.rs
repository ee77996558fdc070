//! What a sealed ledger's open reads. It reads the file's header, then its last 16 KiB at once:
//! the trailer, and for a ledger of up to about 2,000 entries the whole index and last frame
//! too. A deferred ledger's first use (a topic's open reading its next message index from the
//! last entry) then takes the last entry's metadata from that read. Ledgers whose index or last
//! frame lie before it (many entries, a long last entry, a last frame across the read's start)
//! take one more read of what lies before, or a read of the last frame's header alone, and open
//! and read the same. Whatever byte of the footer or of the last frame is damaged, the open
//! finds a sealed ledger exactly when the whole file verifies as one (`validate_sealed`), every
//! read returns the truth or fails, and a damaged last frame fails the read that opens the
//! ledger as it fails any read.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ackstore::internals::format::ledger::{
    FRAME_HEADER_LEN, HEADER_V3_LEN, SealedLayout, TRAILER_LEN, validate_sealed,
};
use ackstore::internals::log::{EntryLog, EntryMeta, LogConfig, ledger_file_name, verify_ledger};
use ackstore::{Error, FileStorage, MemStorage, Storage};
use support::log_model::meta;
use support::tap::{Hook, Op, Tap};

/// The bytes the open reads at once from a ledger file's end.
const END_READ: usize = 16 * 1024;

/// A sealed ledger's shape: its number of entries and its last entry's payload length (the
/// others hold 40 bytes).
#[derive(Debug, Clone, Copy)]
struct Shape {
    entries: u64,
    last_len: usize,
}

/// Every part the open reads from its end read, and each that lies before it.
const SHAPES: [Shape; 5] = [
    // All in the end read.
    Shape {
        entries: 24,
        last_len: 100,
    },
    // An index of 24,012 bytes: the index's start and the last frame lie before the end read.
    Shape {
        entries: 3_000,
        last_len: 100,
    },
    // A last frame longer than the end read: its header is read alone.
    Shape {
        entries: 24,
        last_len: 20_000,
    },
    // Both.
    Shape {
        entries: 3_000,
        last_len: 20_000,
    },
    // A last frame of exactly the end read's length (header and payload), whose start lies 64
    // bytes before the end read (the footer of 2 entries takes the rest).
    Shape {
        entries: 2,
        last_len: END_READ - FRAME_HEADER_LEN,
    },
];

fn body(i: u64, shape: Shape) -> Vec<u8> {
    let len = if i + 1 == shape.entries {
        shape.last_len
    } else {
        40
    };
    (0..len)
        .map(|j| u8::try_from((j as u64 ^ i.wrapping_mul(31)) & 0xff).unwrap())
        .collect()
}

/// A disk holding one sealed ledger of `shape`; its id.
fn sealed_ledger(shape: Shape) -> (MemStorage, u64) {
    let disk = MemStorage::new();
    let log = EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap();
    let id = log.create_ledger().unwrap();
    for i in 0..shape.entries {
        log.append(id, meta(i), &body(i, shape)).unwrap();
    }
    log.sync(id).unwrap();
    log.seal(id).unwrap();
    (disk, id)
}

/// Counts the reads and stats of ledger files.
#[derive(Default)]
struct Counted {
    reads: AtomicU64,
    sizes: AtomicU64,
}

impl Hook for Counted {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        match op {
            Op::Read(name) if name.starts_with("ledger-") => {
                self.reads.fetch_add(1, Ordering::SeqCst);
            }
            Op::Size(name) if name.starts_with("ledger-") => {
                self.sizes.fetch_add(1, Ordering::SeqCst);
            }
            _ => {}
        }
        Ok(())
    }
}

/// The log of `storage` as a topic of a store opens it: ledger `id` recorded sealed with
/// `entries` entries, opened on its first use.
fn deferring(storage: Arc<dyn Storage>, id: u64, entries: u64) -> EntryLog {
    let guard = storage.lock().unwrap();
    let listed = storage.list().unwrap();
    let sealed = BTreeMap::from([(id, entries)]);
    EntryLog::open_locked_deferring(
        storage,
        LogConfig::default(),
        guard,
        (false, &listed),
        &sealed,
    )
    .unwrap()
}

/// Reads every entry of `log`'s ledger `id` of `shape`, and each one's metadata: all true.
fn assert_reads_true(log: &EntryLog, id: u64, shape: Shape) {
    for i in 0..shape.entries {
        let e = log.read(id, i).unwrap();
        assert_eq!((e.meta, e.payload), (meta(i), body(i, shape)), "{shape:?}");
        assert_eq!(log.read_meta(id, i).unwrap(), meta(i), "{shape:?}");
    }
}

/// The reads and stats of the ledger file that a deferred ledger's first use (its last entry's
/// metadata) makes: the header, the end, and what lies before the end read; the stat after the
/// header.
#[test]
fn a_deferred_sealed_ledger_opens_with_a_read_of_its_end_and_reads_what_lies_before_it() {
    // (reads, stats) of the open and the metadata's read: the header and the end read; and
    // one read of the bytes from the last frame up to the end read; and a read of the last
    // frame's header, then its read as an entry (too long for the open to take).
    let expected = [(2, 1), (3, 1), (4, 1), (5, 1), (3, 1)];
    for (shape, expected) in SHAPES.into_iter().zip(expected) {
        let (disk, id) = sealed_ledger(shape);
        let counted = Arc::new(Counted::default());
        let tap = Tap::new(Arc::new(disk.clone()), counted.clone());
        let log = deferring(Arc::new(tap), id, shape.entries);
        let last = shape.entries - 1;
        assert_eq!(log.read_meta(id, last).unwrap(), meta(last), "{shape:?}");
        let counts = (
            counted.reads.load(Ordering::SeqCst),
            counted.sizes.load(Ordering::SeqCst),
        );
        assert_eq!(counts, expected, "{shape:?}: (reads, stats) of the open");
        assert_reads_true(&log, id, shape);
        assert_eq!(log.ledger_info(id).unwrap().entries, shape.entries);
        drop(log);
        let log = EntryLog::open_read_only(Arc::new(disk.clone()), LogConfig::default()).unwrap();
        assert!(log.ledger_info(id).unwrap().sealed, "{shape:?}");
        assert_reads_true(&log, id, shape);
        assert_eq!(verify_ledger(&disk, id).unwrap(), vec![], "{shape:?}");
    }
}

/// The offsets of `layout`'s footer and last frame where damage is tried: every byte of the
/// trailer, of the index's first and last 16 bytes (its magic, first offset, last offset and
/// checksum), of the last frame's header and first and last 16 payload bytes, and the bytes on
/// each side of the end read's start.
fn damage_offsets(layout: &SealedLayout, len: usize) -> Vec<usize> {
    let last = usize::try_from(layout.last_frame.unwrap()).unwrap();
    let data_end = usize::try_from(layout.data_end).unwrap();
    let trailer = len - TRAILER_LEN;
    // A ledger file this short is read whole after its header.
    let end_read = if len > END_READ + HEADER_V3_LEN {
        len - END_READ - 2..len - END_READ + 2
    } else {
        0..0
    };
    let mut at: Vec<usize> = (trailer..len)
        .chain(data_end..data_end + 16)
        .chain(trailer - 16..trailer)
        .chain(last..last + FRAME_HEADER_LEN + 16)
        .chain(data_end - 16..data_end)
        .chain(end_read)
        .collect();
    at.sort_unstable();
    at.dedup();
    at
}

/// The first use of a deferred ledger, its last entry's metadata, on `disk` whose ledger `id`
/// (recorded with `entries`) holds damage: the truth, or an error naming the damage.
fn first_use_of_damaged(disk: &MemStorage, id: u64, shape: Shape) -> Result<EntryMeta, Error> {
    let log = deferring(Arc::new(disk.clone()), id, shape.entries);
    let read = log.read_meta(id, shape.entries - 1);
    if let Ok(m) = &read {
        assert_eq!(*m, meta(shape.entries - 1), "{shape:?}: a wrong entry");
    }
    read
}

#[test]
fn damage_to_a_sealed_ledgers_footer_or_last_frame_is_found_wherever_the_open_reads_it() {
    for shape in SHAPES {
        let (disk, id) = sealed_ledger(shape);
        let name = ledger_file_name(id);
        let original = disk.live_bytes(&name).unwrap();
        let layout = validate_sealed(&original, id).unwrap();
        let last = usize::try_from(layout.last_frame.unwrap()).unwrap();
        let data_end = usize::try_from(layout.data_end).unwrap();
        for at in damage_offsets(&layout, original.len()) {
            let mut bad = original.clone();
            bad[at] ^= 0x01;
            let image = disk.durable_image();
            image.set_bytes(&name, bad.clone()).unwrap();
            let what = format!("{shape:?}, byte {at} of {}", original.len());
            assert_ne!(
                verify_ledger(&image, id).unwrap(),
                vec![],
                "{what}: unnoticed"
            );
            let log = EntryLog::open_read_only(Arc::new(image.clone()), LogConfig::default())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(
                log.ledger_info(id).unwrap().sealed,
                validate_sealed(&bad, id).is_ok(),
                "{what}: sealed, against the whole file's check"
            );
            for i in 0..shape.entries {
                match log.read(id, i) {
                    Ok(e) => assert_eq!((e.meta, e.payload), (meta(i), body(i, shape)), "{what}"),
                    Err(Error::Corrupted { .. }) => {}
                    Err(e) => panic!("{what}: entry {i}: {e}"),
                }
            }
            drop(log);
            let first = first_use_of_damaged(&image, id, shape);
            if (last..data_end).contains(&at) {
                // The last frame: its read fails, the read that opens the ledger included.
                assert!(
                    matches!(first, Err(Error::Corrupted { .. })),
                    "{what}: {first:?}"
                );
            } else {
                assert!(
                    matches!(first, Ok(_) | Err(Error::Corrupted { .. })),
                    "{what}: {first:?}"
                );
            }
        }
    }
}

/// Ledgers at the edges of what the end read holds: a last frame whose start lies a few bytes
/// either side of the end read's start, a last frame a byte either side of the longest the
/// check reads whole, an index whose start lies a few bytes either side of the end read's
/// start. Each opens deferred, gives its last entry's metadata on first use, reads true, opens
/// sealed and verifies.
#[test]
fn sealed_ledgers_at_the_end_reads_edges_open_and_read_true() {
    // A footer of `n` entries: the index (magic, offsets, checksum) and the trailer.
    let footer = |n: usize| 8 * n + 12 + TRAILER_LEN;
    let mut shapes = Vec::new();
    for entries in [1_usize, 2, 3] {
        // The last frame starting `d` bytes after the end read's start.
        let before_end = END_READ - footer(entries) - FRAME_HEADER_LEN;
        for d in -3_isize..=3 {
            let last_len = before_end.checked_add_signed(-d).unwrap();
            shapes.push(Shape {
                entries: entries as u64,
                last_len,
            });
        }
        // A last frame of the longest read whole, and a byte either side.
        for d in -1_isize..=1 {
            let last_len = (END_READ - FRAME_HEADER_LEN).checked_add_signed(d).unwrap();
            shapes.push(Shape {
                entries: entries as u64,
                last_len,
            });
        }
    }
    // The index starting `d` bytes after the end read's start (entries of 40 bytes before).
    for n in 2_038_usize..=2_046 {
        for last_len in [0, 1, 40, 100] {
            shapes.push(Shape {
                entries: n as u64,
                last_len,
            });
        }
    }
    for shape in shapes {
        let (disk, id) = sealed_ledger(shape);
        let log = deferring(Arc::new(disk.clone()), id, shape.entries);
        let last = shape.entries - 1;
        assert_eq!(log.read_meta(id, last).unwrap(), meta(last), "{shape:?}");
        assert_reads_true(&log, id, shape);
        drop(log);
        let log = EntryLog::open_read_only(Arc::new(disk.clone()), LogConfig::default()).unwrap();
        assert!(log.ledger_info(id).unwrap().sealed, "{shape:?}");
        assert_eq!(
            log.ledger_info(id).unwrap().entries,
            shape.entries,
            "{shape:?}"
        );
        assert_eq!(verify_ledger(&disk, id).unwrap(), vec![], "{shape:?}");
    }
}

/// A sealed ledger's file cut short on real files, at every length up to a little past its
/// header and around the end read's start: the open never takes it for sealed, and every
/// entry it holds reads true.
#[test]
fn a_sealed_ledger_cut_short_on_real_files_is_never_sealed_and_reads_true() {
    let shape = SHAPES[4];
    let (disk, id) = sealed_ledger(shape);
    let name = ledger_file_name(id);
    let full = disk.live_bytes(&name).unwrap();
    let edge = full.len() - END_READ;
    let lens = (0..HEADER_V3_LEN + 8)
        .chain(edge - 8..edge + 8)
        .chain([full.len() - 1]);
    let mut with_entries = 0;
    for len in lens {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(&name), &full[..len]).unwrap();
        let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(dir.path(), false).unwrap());
        let Ok(log) = EntryLog::open_read_only(storage, LogConfig::default()) else {
            continue;
        };
        let Ok(info) = log.ledger_info(id) else {
            continue;
        };
        assert!(!info.sealed, "cut at {len}");
        with_entries += usize::from(info.entries > 0);
        for i in 0..info.entries {
            let e = log.read(id, i).unwrap();
            assert_eq!(
                (e.meta, e.payload),
                (meta(i), body(i, shape)),
                "cut at {len}"
            );
        }
    }
    // The cuts after the first frame (every one around the end read's start, and the last).
    assert_eq!(with_entries, 17);
}

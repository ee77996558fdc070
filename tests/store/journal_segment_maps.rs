//! A journal segment on real files is read through a map of it: taken at the first read of a
//! record, while the segment is the newest, it may cover bytes of a tick whose write failed
//! (a full disk) before the tick cut them back. The next tick writes other records over those
//! bytes; each reads back as written (from the map where it covers them, by position past it),
//! and again after a restart.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use ackstore::internals::ackset::PartitionKey;
use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::journal::index::CursorId;
use ackstore::internals::journal::{CursorFlush, Journal, JournalConfig, Seal};
use ackstore::{Error, FileStorage, Storage};
use roaring::RoaringBitmap;

use crate::support::tap::{Hook, Op, Tap};
use crate::support::tmpfs::is_no_space;

const CONFIG: JournalConfig = JournalConfig {
    segment_bytes: 1 << 20,
};

const READER: CursorId = CursorId {
    topic: 1,
    cursor: 1,
};
const WRITER: CursorId = CursorId {
    topic: 1,
    cursor: 2,
};

const KEY: PartitionKey = PartitionKey {
    ledger_id: 7,
    chunk: 0,
};

/// A partition of up to `n` acks scattered by `step` over the first `span` offsets from
/// `first` (no runs to compress).
fn bitmap(first: u32, step: u32, (n, span): (u32, u32)) -> RoaringBitmap {
    (0..n)
        .map(|i| first + i.wrapping_mul(step).wrapping_mul(2_654_435_761) % span)
        .collect()
}

/// Fails the next segment write once armed, after half of it landed and a read of the
/// reader's partition (the segment's first, so the one that maps it) saw those bytes.
#[derive(Default)]
struct FailAfterRead {
    journal: OnceLock<Weak<Journal>>,
    armed: Mutex<bool>,
    read_inside: Mutex<Option<RoaringBitmap>>,
    /// Maps of journal segments taken, and how many the read inside the failed write found.
    maps: AtomicU64,
    maps_inside: AtomicU64,
}

impl Hook for FailAfterRead {
    fn after(&self, op: Op<'_>) {
        if matches!(op, Op::Map(name) if name.ends_with(".seg")) {
            self.maps.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn write(
        &self,
        name: &str,
        buf: &[u8],
        offset: u64,
        write: &dyn Fn(&[u8], u64) -> ackstore::Result<()>,
    ) -> ackstore::Result<()> {
        if !name.ends_with(".seg")
            || buf.len() < 256
            || !std::mem::take(&mut *self.armed.lock().unwrap())
        {
            return write(buf, offset);
        }
        write(&buf[..buf.len() / 2], offset)?;
        let journal = self.journal.get().and_then(Weak::upgrade).expect("journal");
        *self.read_inside.lock().unwrap() = journal.load(READER, KEY).expect("load inside");
        let maps = self.maps.load(Ordering::SeqCst);
        self.maps_inside.store(maps, Ordering::SeqCst);
        Err(Error::io(
            "write",
            name,
            std::io::Error::from_raw_os_error(28),
        ))
    }
}

fn commit(journal: &Journal, cursor: CursorId, bitmap: &RoaringBitmap) -> ackstore::Result<()> {
    journal
        .commit(&[CursorFlush {
            cursor,
            name: 0,
            state: PersistedState::default(),
            written: vec![(KEY, bitmap.clone())],
            live: vec![KEY],
        }])
        .map(drop)
}

#[test]
fn records_written_over_a_failed_ticks_bytes_a_map_covers_read_back_as_written() {
    let dir = tempfile::tempdir().expect("a directory");
    let files: Arc<dyn Storage> = Arc::new(FileStorage::open(dir.path(), true).expect("files"));
    let hook = Arc::new(FailAfterRead::default());
    let tap = Tap::new(files, hook.clone());
    let journal = Arc::new(Journal::open(Arc::new(tap), CONFIG, Seal::default()).expect("open"));
    hook.journal.set(Arc::downgrade(&journal)).expect("once");

    let reader = bitmap(0, 1, (50, 60_000));
    commit(&journal, READER, &reader).expect("the reader's commit");
    *hook.armed.lock().unwrap() = true;
    let failed = bitmap(1, 2, (4_000, 60_000));
    let e = commit(&journal, WRITER, &failed).expect_err("the failed tick");
    assert!(is_no_space(&e), "{e}");
    assert_eq!(hook.read_inside.lock().unwrap().as_ref(), Some(&reader));
    // That read, the segment's first, read through the map it took, over the failed write's
    // first half.
    assert_eq!(hook.maps_inside.load(Ordering::SeqCst), 1, "the map taken");
    assert_eq!(journal.load(WRITER, KEY).expect("load"), None);

    // Other bytes at the offsets the failed tick wrote: a partition of different contents.
    let written = bitmap(5, 3, (300, 60_000));
    commit(&journal, WRITER, &written).expect("the tick after");
    assert_eq!(
        journal.load(WRITER, KEY).expect("load"),
        Some(written.clone())
    );
    assert_eq!(
        journal.load(READER, KEY).expect("load"),
        Some(reader.clone())
    );
    // And a record past every byte the map covers.
    let later = bitmap(9, 5, (6_000, 60_000));
    commit(&journal, WRITER, &later).expect("a later tick");
    assert_eq!(
        journal.load(WRITER, KEY).expect("load"),
        Some(later.clone())
    );

    drop(journal);
    let files: Arc<dyn Storage> = Arc::new(FileStorage::open(dir.path(), false).expect("files"));
    let reopened = Journal::open(files, CONFIG, Seal::default()).expect("reopen");
    assert_eq!(reopened.load(READER, KEY).expect("load"), Some(reader));
    assert_eq!(reopened.load(WRITER, KEY).expect("load"), Some(later));
}

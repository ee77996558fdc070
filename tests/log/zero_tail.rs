//! A long zero-filled extent after the last frame (a file extended but never written, or a
//! pre-allocated one) is the end of the log: open and verify keep every frame, report the
//! extent as a torn tail, and skip it without reading it where the file system reports holes.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ackstore::internals::log::{EntryLog, LogConfig, ledger_file_name, verify_ledger};
use ackstore::storage::{LockGuard, Mapped, StorageFile};
use ackstore::{FileStorage, MemStorage, Storage};
use support::log_model::{meta, payload};

/// A storage that counts the bytes read from its files.
#[derive(Debug, Clone)]
struct Counting {
    inner: Arc<dyn Storage>,
    read: Arc<AtomicU64>,
}

#[derive(Debug)]
struct CountingFile {
    inner: Arc<dyn StorageFile>,
    read: Arc<AtomicU64>,
}

impl Counting {
    fn new(inner: Arc<dyn Storage>) -> Self {
        Self {
            inner,
            read: Arc::new(AtomicU64::new(0)),
        }
    }

    fn wrap(&self, inner: Arc<dyn StorageFile>) -> Arc<dyn StorageFile> {
        Arc::new(CountingFile {
            inner,
            read: self.read.clone(),
        })
    }

    /// Bytes read since the last call.
    fn take(&self) -> u64 {
        self.read.swap(0, Ordering::SeqCst)
    }
}

impl Storage for Counting {
    fn location(&self) -> String {
        self.inner.location()
    }
    fn list(&self) -> ackstore::Result<Vec<String>> {
        self.inner.list()
    }
    fn exists(&self, name: &str) -> ackstore::Result<bool> {
        self.inner.exists(name)
    }
    fn create(&self, name: &str) -> ackstore::Result<Arc<dyn StorageFile>> {
        Ok(self.wrap(self.inner.create(name)?))
    }
    fn open(&self, name: &str) -> ackstore::Result<Arc<dyn StorageFile>> {
        Ok(self.wrap(self.inner.open(name)?))
    }
    fn remove(&self, name: &str) -> ackstore::Result<()> {
        self.inner.remove(name)
    }
    fn rename(&self, from: &str, to: &str) -> ackstore::Result<()> {
        self.inner.rename(from, to)
    }
    fn link(&self, from: &str, to: &str) -> ackstore::Result<()> {
        self.inner.link(from, to)
    }
    fn sync_dir(&self) -> ackstore::Result<()> {
        self.inner.sync_dir()
    }
    fn lock(&self) -> ackstore::Result<LockGuard> {
        self.inner.lock()
    }
}

impl StorageFile for CountingFile {
    fn size(&self) -> ackstore::Result<u64> {
        self.inner.size()
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> ackstore::Result<()> {
        self.read.fetch_add(buf.len() as u64, Ordering::SeqCst);
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> ackstore::Result<()> {
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> ackstore::Result<()> {
        self.inner.sync_data()
    }
    fn set_len(&self, len: u64) -> ackstore::Result<()> {
        self.inner.set_len(len)
    }
    fn map(&self) -> ackstore::Result<Mapped> {
        self.inner.map()
    }
    fn data_from(&self, offset: u64) -> ackstore::Result<u64> {
        self.inner.data_from(offset)
    }
}

const ENTRIES: u64 = 40;

/// Writes one unsealed ledger of [`ENTRIES`] synced entries and extends its file by `zeros`
/// zero bytes (a hole on real files). Returns the ledger id and the end of its last frame.
fn ledger_with_zero_tail(storage: &Arc<dyn Storage>, zeros: u64) -> (u64, u64) {
    let log = EntryLog::open(storage.clone(), LogConfig::default()).unwrap();
    let id = log.create_ledger().unwrap();
    for i in 0..ENTRIES {
        log.append(id, meta(i), &payload(id, i)).unwrap();
    }
    log.sync(id).unwrap();
    drop(log);
    let file = storage.open(&ledger_file_name(id)).unwrap();
    let end = file.size().unwrap();
    file.set_len(end + zeros).unwrap();
    file.sync_data().unwrap();
    (id, end)
}

/// Open (read-only and as owner) and verify keep every frame and report the zero extent as a
/// torn tail; returns the bytes each of the three read.
fn check_zero_tail(storage: &Counting, id: u64, end: u64, zeros: u64) -> [u64; 3] {
    let shared: Arc<dyn Storage> = Arc::new(storage.clone());
    storage.take();

    let log = EntryLog::open_read_only(shared.clone(), LogConfig::default()).unwrap();
    let read_only = storage.take();
    assert_eq!(log.entry_count(id).unwrap(), ENTRIES);
    let report = log.recovery_report();
    assert_eq!(report.len(), 1, "{report:?}");
    assert_eq!((report[0].offset, report[0].dropped_bytes), (end, zeros));
    assert!(log.damaged_ledgers().is_empty());
    drop(log);

    let problems = verify_ledger(shared.as_ref(), id).unwrap();
    let verify = storage.take();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].torn_tail);
    assert_eq!(problems[0].offset, end);

    let log = EntryLog::open(shared.clone(), LogConfig::default()).unwrap();
    let owner = storage.take();
    assert_eq!(log.recovery_report().len(), 1);
    assert_eq!(log.ledger_info(id).unwrap().bytes, end);
    for i in 0..ENTRIES {
        assert_eq!(log.read(id, i).unwrap().payload, payload(id, i));
    }
    drop(log);
    assert_eq!(
        shared.open(&ledger_file_name(id)).unwrap().size().unwrap(),
        end
    );
    [read_only, verify, owner]
}

#[test]
fn a_sparse_gigabyte_zero_tail_is_skipped_unread_and_every_frame_kept() {
    const GIB: u64 = 1 << 30;
    let dir = tempfile::tempdir().unwrap();
    let files: Arc<dyn Storage> = Arc::new(FileStorage::open(dir.path(), true).unwrap());
    // Whether this file system reports holes (SEEK_DATA); without it the tail is scanned.
    let holes = {
        let probe = files.create("probe").unwrap();
        probe.set_len(1 << 20).unwrap();
        let answer = probe.data_from(0).unwrap() == 1 << 20;
        files.remove("probe").unwrap();
        answer
    };
    let (id, end) = ledger_with_zero_tail(&files, GIB);
    let counted = Counting::new(files);
    let read = check_zero_tail(&counted, id, end, GIB);
    if holes {
        // The frames and a window around them; never the hole.
        for bytes in read {
            assert!(
                bytes < 4 << 20,
                "read {bytes} bytes of a file of {end} + 1 GiB"
            );
        }
    }
}

#[test]
fn a_written_zero_tail_in_memory_is_the_end_of_the_log() {
    const ZEROS: u64 = 48 << 20;
    let disk = MemStorage::new();
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let (id, end) = ledger_with_zero_tail(&storage, ZEROS);
    check_zero_tail(&Counting::new(storage), id, end, ZEROS);
}

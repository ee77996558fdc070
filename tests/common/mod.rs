//! Helpers shared by the entry-log tests: deterministic entries and a model of what a workload
//! was told (appended, synced, sealed, deleted) to check a reopened log against.

#![allow(dead_code, reason = "each test file uses a different subset")]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use ackstore::log::{EntryLog, EntryMeta};
use ackstore::storage::{LockGuard, Mapped, MemStorage, Storage, StorageFile};

/// The metadata of entry `i` of any ledger.
pub fn meta(i: u64) -> EntryMeta {
    EntryMeta {
        index: i * 10 + 9,
        num_messages: u32::try_from(i % 7).unwrap() + 1,
        timestamp: 1_000 + i,
    }
}

/// The payload of entry `i` of `ledger`: 0 to 299 bytes that differ between entries.
pub fn payload(ledger: u64, i: u64) -> Vec<u8> {
    let len = (i * 37 + ledger * 11) % 300;
    (0..len)
        .map(|j| u8::try_from((j ^ i ^ (ledger << 3)) & 0xff).unwrap())
        .collect()
}

/// What the workload knows about one ledger.
#[derive(Debug, Default, Clone)]
pub struct LedgerModel {
    /// Every entry whose append returned `Ok`, in order.
    pub appended: Vec<(EntryMeta, Vec<u8>)>,
    /// How many of them a returned `sync` (or `seal`) made durable.
    pub synced: usize,
    pub seal_started: bool,
    pub sealed: bool,
    pub delete_started: bool,
    pub deleted: bool,
}

/// What the workload knows about the whole log.
#[derive(Debug, Default, Clone)]
pub struct Model {
    pub ledgers: BTreeMap<u64, LedgerModel>,
}

impl Model {
    /// Creates a ledger through `log` and records it.
    pub fn create(&mut self, log: &EntryLog) -> ackstore::Result<u64> {
        let id = log.create_ledger()?;
        self.ledgers.insert(id, LedgerModel::default());
        Ok(id)
    }

    /// Appends the next entry of `id` and records it.
    pub fn append(&mut self, log: &EntryLog, id: u64) -> ackstore::Result<()> {
        let l = self.ledgers.get_mut(&id).unwrap();
        let i = l.appended.len() as u64;
        let (m, p) = (meta(i), payload(id, i));
        assert_eq!(log.append(id, m, &p)?, i);
        l.appended.push((m, p));
        Ok(())
    }

    /// Syncs `id` and records what became durable.
    pub fn sync(&mut self, log: &EntryLog, id: u64) -> ackstore::Result<()> {
        let l = self.ledgers.get_mut(&id).unwrap();
        let n = l.appended.len();
        log.sync(id)?;
        l.synced = n;
        Ok(())
    }

    /// Seals `id` and records it.
    pub fn seal(&mut self, log: &EntryLog, id: u64) -> ackstore::Result<()> {
        let l = self.ledgers.get_mut(&id).unwrap();
        l.seal_started = true;
        log.seal(id)?;
        l.sealed = true;
        l.synced = l.appended.len();
        Ok(())
    }

    /// Deletes `id` and records it.
    pub fn delete(&mut self, log: &EntryLog, id: u64) -> ackstore::Result<()> {
        let l = self.ledgers.get_mut(&id).unwrap();
        l.delete_started = true;
        log.delete_ledger(id)?;
        l.deleted = true;
        Ok(())
    }

    /// Checks a log reopened after a power cut: every synced entry is there, possibly some
    /// later whole entries, each exactly as appended; nothing else.
    pub fn check_recovered(&self, log: &EntryLog) {
        let ids = log.ledger_ids();
        for id in &ids {
            if !self.ledgers.contains_key(id) {
                // A create that never returned may leave an empty ledger behind.
                assert_eq!(log.entry_count(*id).unwrap(), 0, "unknown ledger {id}");
            }
        }
        for (id, l) in &self.ledgers {
            let exists = ids.contains(id);
            if l.deleted {
                assert!(!exists, "deleted ledger {id} came back");
                continue;
            }
            if !l.delete_started {
                assert!(exists, "ledger {id} was lost");
            }
            if !exists {
                continue;
            }
            let info = log.ledger_info(*id).unwrap();
            let count = usize::try_from(info.entries).unwrap();
            assert!(
                count >= l.synced && count <= l.appended.len(),
                "ledger {id}: {count} entries, synced {}, appended {}",
                l.synced,
                l.appended.len()
            );
            if l.sealed {
                assert!(info.sealed, "sealed ledger {id} came back unsealed");
            }
            if !l.seal_started {
                assert!(!info.sealed, "ledger {id} sealed by itself");
            }
            for (i, (m, p)) in l.appended.iter().take(count).enumerate() {
                let e = log.read(*id, i as u64).unwrap();
                assert_eq!((&e.meta, &e.payload), (m, p), "ledger {id} entry {i}");
            }
        }
    }
}

/// Hooks a [`Hooked`] storage runs on its files' operations.
#[derive(Default)]
pub struct Hooks {
    /// While set, every `map` fails with an I/O error (an exhausted address space or map count).
    pub fail_map: AtomicBool,
    /// `write_all_at` calls so far.
    pub writes: AtomicU64,
    /// `sync_data` calls so far.
    pub syncs: AtomicU64,
    /// When set, the next `sync_data` meets the first barrier before it starts and the second
    /// before it proceeds, so a test can hold one fsync in progress.
    pub hold_next_sync: Mutex<Option<Arc<(Barrier, Barrier)>>>,
}

/// A [`MemStorage`] whose files run [`Hooks`]; clones share the disk and the hooks.
#[derive(Clone)]
pub struct Hooked {
    pub disk: MemStorage,
    pub hooks: Arc<Hooks>,
}

impl Hooked {
    pub fn new(disk: MemStorage) -> Self {
        Self {
            disk,
            hooks: Arc::default(),
        }
    }
}

impl std::fmt::Debug for Hooked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hooked")
    }
}

#[derive(Debug)]
struct HookedFile {
    inner: Arc<dyn StorageFile>,
    hooks: Arc<Hooks>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hooks")
    }
}

impl Storage for Hooked {
    fn location(&self) -> String {
        self.disk.location()
    }
    fn list(&self) -> ackstore::Result<Vec<String>> {
        self.disk.list()
    }
    fn exists(&self, name: &str) -> ackstore::Result<bool> {
        self.disk.exists(name)
    }
    fn create(&self, name: &str) -> ackstore::Result<Arc<dyn StorageFile>> {
        let inner = self.disk.create(name)?;
        Ok(Arc::new(HookedFile {
            inner,
            hooks: Arc::clone(&self.hooks),
        }))
    }
    fn open(&self, name: &str) -> ackstore::Result<Arc<dyn StorageFile>> {
        let inner = self.disk.open(name)?;
        Ok(Arc::new(HookedFile {
            inner,
            hooks: Arc::clone(&self.hooks),
        }))
    }
    fn remove(&self, name: &str) -> ackstore::Result<()> {
        self.disk.remove(name)
    }
    fn rename(&self, from: &str, to: &str) -> ackstore::Result<()> {
        self.disk.rename(from, to)
    }
    fn link(&self, from: &str, to: &str) -> ackstore::Result<()> {
        self.disk.link(from, to)
    }
    fn sync_dir(&self) -> ackstore::Result<()> {
        self.disk.sync_dir()
    }
    fn lock(&self) -> ackstore::Result<LockGuard> {
        self.disk.lock()
    }
}

impl StorageFile for HookedFile {
    fn size(&self) -> ackstore::Result<u64> {
        self.inner.size()
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> ackstore::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> ackstore::Result<()> {
        self.hooks.writes.fetch_add(1, Ordering::SeqCst);
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> ackstore::Result<()> {
        let held = self.hooks.hold_next_sync.lock().unwrap().take();
        if let Some(barriers) = held {
            barriers.0.wait();
            barriers.1.wait();
        }
        self.hooks.syncs.fetch_add(1, Ordering::SeqCst);
        self.inner.sync_data()
    }
    fn set_len(&self, len: u64) -> ackstore::Result<()> {
        self.inner.set_len(len)
    }
    fn map(&self) -> ackstore::Result<Mapped> {
        if self.hooks.fail_map.load(Ordering::SeqCst) {
            let enomem = std::io::Error::from_raw_os_error(12);
            return Err(ackstore::Error::io("map", "hooked", enomem));
        }
        self.inner.map()
    }
}

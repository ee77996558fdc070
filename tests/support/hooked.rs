//! A storage wrapper for the entry-log tests: [`Hooked`] runs an in-memory disk whose files count
//! their writes and fsyncs, can hold one fsync in progress, and can refuse to map; it also counts
//! the names its listings return.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use ackstore::storage::{LockGuard, Mapped, StorageFile};
use ackstore::{MemStorage, Storage};

/// Two barriers an operation meets in turn: a test waits on the first to know the operation
/// reached the hook, and on the second to let it go on.
pub type Held = Arc<(Barrier, Barrier)>;

/// Hooks a [`Hooked`] storage runs on its files' operations.
#[derive(Default)]
pub struct Hooks {
    /// While set, every `map` fails with an I/O error (an exhausted address space or map count).
    pub fail_map: AtomicBool,
    /// `write_all_at` calls so far.
    pub writes: AtomicU64,
    /// `sync_data` calls so far.
    pub syncs: AtomicU64,
    /// `sync_dir` calls so far.
    pub dir_syncs: AtomicU64,
    /// Names the directory's listings returned so far (`list` and `list_prefix`).
    pub listed: AtomicU64,
    /// When set, the next `sync_data` meets the first barrier before it starts and the second
    /// before it proceeds, so a test can hold one fsync in progress.
    pub hold_next_sync: Mutex<Option<Arc<(Barrier, Barrier)>>>,
    /// When `n` (not 0), the `n`th `sync_data` from now fails with `EIO`, and the hook goes
    /// back to 0: a disk that lost the write-back of what that sync was to cover. As on Linux,
    /// the file forgets those bytes ([`MemStorage::lose_unsynced`]): no later sync writes them
    /// and later reads return what the disk holds, so an `Ok` built on them would lose them.
    pub fail_sync_in: AtomicU64,
    /// The names of the files whose sync [`Hooks::fail_sync_in`] failed, in order.
    pub failed_syncs: Mutex<Vec<String>>,
    /// When `n` (not 0), the `n`th `sync_dir` from now fails with `EIO`, and the hook goes
    /// back to 0; the directory forgets its unsynced name changes
    /// ([`MemStorage::lose_unsynced_names`]).
    pub fail_dir_sync_in: AtomicU64,
    /// When set to `(prefix, barriers)`, the next lookup (`exists` or `open`) of a name
    /// starting with `prefix` answers, then meets the first barrier and the second before it
    /// returns, so a test can run other operations between two name lookups.
    pub hold_after_lookup: Mutex<Option<(String, Held)>>,
    /// Lookups of [`Hooks::hold_after_lookup`]'s prefix that pass before the one held: each
    /// takes one off (so a test counts them by starting from a large number).
    pub pass_lookups: AtomicU64,
}

/// A [`MemStorage`] whose files run [`Hooks`]; clones share the disk and the hooks.
#[derive(Clone)]
pub struct Hooked {
    pub disk: MemStorage,
    pub hooks: Arc<Hooks>,
}

/// Which sync [`Hooked::arm`] fails: the `n`th of a file ([`Hooks::fail_sync_in`]), or the
/// `n`th of the directory ([`Hooks::fail_dir_sync_in`]), counted from then; 0 for none.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    File(u64),
    Dir(u64),
}

/// Runs `attempt` with the first file sync failing, then the second, and so on until an
/// attempt answers `false` (the fault never fired: it made fewer file syncs), then the same
/// with directory syncs.
pub fn for_each_sync_fault(mut attempt: impl FnMut(Fault) -> bool) {
    for kind in [Fault::File as fn(u64) -> Fault, Fault::Dir] {
        let mut n = 1;
        while attempt(kind(n)) {
            n += 1;
        }
    }
}

impl Hooked {
    /// File syncs and directory syncs so far.
    pub fn sync_counts(&self) -> (u64, u64) {
        (
            self.hooks.syncs.load(Ordering::SeqCst),
            self.hooks.dir_syncs.load(Ordering::SeqCst),
        )
    }

    /// Fails the sync `fault` names; returns [`Hooked::sync_counts`] at this point.
    pub fn arm(&self, fault: Fault) -> (u64, u64) {
        let counts = self.sync_counts();
        match fault {
            Fault::File(n) => self.hooks.fail_sync_in.store(n, Ordering::SeqCst),
            Fault::Dir(n) => self.hooks.fail_dir_sync_in.store(n, Ordering::SeqCst),
        }
        counts
    }

    /// Whether the sync `fault` names failed (disarming it when it did not: the call made
    /// fewer syncs of that kind).
    pub fn fired(&self, fault: Fault) -> bool {
        let armed = match fault {
            Fault::File(_) => &self.hooks.fail_sync_in,
            Fault::Dir(_) => &self.hooks.fail_dir_sync_in,
        };
        armed.swap(0, Ordering::SeqCst) == 0
    }

    pub fn new(disk: MemStorage) -> Self {
        Self {
            disk,
            hooks: Arc::default(),
        }
    }

    /// Holds the lookup of `name` on [`Hooks::hold_after_lookup`]'s barriers when it is the
    /// one awaited.
    fn after_lookup(&self, name: &str) {
        let held = {
            let mut hold = self.hooks.hold_after_lookup.lock().unwrap();
            match hold.as_ref() {
                Some((prefix, _)) if name.starts_with(prefix.as_str()) => {
                    let passing = self.hooks.pass_lookups.load(Ordering::SeqCst);
                    if passing > 0 {
                        self.hooks.pass_lookups.store(passing - 1, Ordering::SeqCst);
                        None
                    } else {
                        hold.take()
                    }
                }
                _ => None,
            }
        };
        if let Some((_, barriers)) = held {
            barriers.0.wait();
            barriers.1.wait();
        }
    }

    fn count_listed(&self, names: ackstore::Result<Vec<String>>) -> ackstore::Result<Vec<String>> {
        if let Ok(names) = &names {
            self.hooks
                .listed
                .fetch_add(names.len() as u64, Ordering::SeqCst);
        }
        names
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
    /// The disk and the name the file was opened by: a failed sync drops its unsynced bytes.
    disk: MemStorage,
    name: String,
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
        self.count_listed(self.disk.list())
    }
    fn list_prefix(&self, prefix: &str) -> ackstore::Result<Vec<String>> {
        self.count_listed(self.disk.list_prefix(prefix))
    }
    fn exists(&self, name: &str) -> ackstore::Result<bool> {
        let answer = self.disk.exists(name);
        self.after_lookup(name);
        answer
    }
    fn create(&self, name: &str) -> ackstore::Result<Arc<dyn StorageFile>> {
        let inner = self.disk.create(name)?;
        Ok(Arc::new(HookedFile {
            inner,
            hooks: Arc::clone(&self.hooks),
            disk: self.disk.clone(),
            name: name.to_string(),
        }))
    }
    fn open(&self, name: &str) -> ackstore::Result<Arc<dyn StorageFile>> {
        let inner = self.disk.open(name);
        self.after_lookup(name);
        let inner = inner?;
        Ok(Arc::new(HookedFile {
            inner,
            hooks: Arc::clone(&self.hooks),
            disk: self.disk.clone(),
            name: name.to_string(),
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
        self.hooks.dir_syncs.fetch_add(1, Ordering::SeqCst);
        if due(&self.hooks.fail_dir_sync_in) {
            self.disk.lose_unsynced_names();
            let eio = std::io::Error::from_raw_os_error(5);
            return Err(ackstore::Error::io("fsync directory", "hooked", eio));
        }
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
        if due(&self.hooks.fail_sync_in) {
            // The write-back was lost: the kernel forgets the pages (a file renamed or
            // removed since it was opened has nothing left to forget under its name).
            let _ = self.disk.lose_unsynced(&self.name);
            self.hooks
                .failed_syncs
                .lock()
                .unwrap()
                .push(self.name.clone());
            let eio = std::io::Error::from_raw_os_error(5);
            return Err(ackstore::Error::io("fdatasync", "hooked", eio));
        }
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
    fn map_always(&self) -> bool {
        self.inner.map_always()
    }
}

/// Counts one sync down on `hook` (see [`Hooks::fail_sync_in`]): whether this is the one to fail.
fn due(hook: &AtomicU64) -> bool {
    hook.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)) == Ok(1)
}

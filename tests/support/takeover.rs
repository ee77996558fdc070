//! A takeover in the middle of a call: [`Disk`] is a [`MemStorage`] that runs an action (a
//! new owner's open, a file removed behind the owner's back) right after its N-th operation,
//! reads included (an ownership check is a read), inside whatever call made it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ackstore::Result;
use ackstore::{LockGuard, Mapped, MemStorage, Storage, StorageFile};

type Action = Box<dyn FnOnce() + Send>;

#[derive(Default)]
pub struct Hook {
    count: AtomicU64,
    at: AtomicU64,
    action: Mutex<Option<Action>>,
}

impl Hook {
    /// Operations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// Runs `action` after `n` more operations.
    pub fn arm(&self, n: u64, action: Action) {
        self.at.store(self.count() + n, Ordering::SeqCst);
        *self.action.lock().unwrap() = Some(action);
    }

    /// The action if it has not run (then it runs now).
    pub fn run_if_pending(&self) {
        let action = self.action.lock().unwrap().take();
        if let Some(action) = action {
            action();
        }
    }

    fn tick<T>(&self, result: Result<T>) -> Result<T> {
        if result.is_ok() {
            let count = self.count.fetch_add(1, Ordering::SeqCst) + 1;
            if count == self.at.load(Ordering::SeqCst) {
                self.run_if_pending();
            }
        }
        result
    }
}

#[derive(Clone)]
pub struct Disk {
    pub disk: MemStorage,
    pub hook: Arc<Hook>,
}

impl std::fmt::Debug for Disk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("takeover::Disk")
    }
}

#[derive(Debug)]
struct File {
    inner: Arc<dyn StorageFile>,
    hook: Arc<Hook>,
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hook")
    }
}

impl Disk {
    fn wrap(&self, inner: Arc<dyn StorageFile>) -> Arc<dyn StorageFile> {
        Arc::new(File {
            inner,
            hook: self.hook.clone(),
        })
    }
}

impl Storage for Disk {
    fn location(&self) -> String {
        self.disk.location()
    }
    fn list(&self) -> Result<Vec<String>> {
        self.hook.tick(self.disk.list())
    }
    fn exists(&self, name: &str) -> Result<bool> {
        self.hook.tick(self.disk.exists(name))
    }
    fn create(&self, name: &str) -> Result<Arc<dyn StorageFile>> {
        let file = self.hook.tick(self.disk.create(name))?;
        Ok(self.wrap(file))
    }
    fn open(&self, name: &str) -> Result<Arc<dyn StorageFile>> {
        let file = self.hook.tick(self.disk.open(name))?;
        Ok(self.wrap(file))
    }
    fn remove(&self, name: &str) -> Result<()> {
        self.hook.tick(self.disk.remove(name))
    }
    fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.hook.tick(self.disk.rename(from, to))
    }
    fn link(&self, from: &str, to: &str) -> Result<()> {
        self.hook.tick(self.disk.link(from, to))
    }
    fn sync_dir(&self) -> Result<()> {
        self.hook.tick(self.disk.sync_dir())
    }
    fn lock(&self) -> Result<LockGuard> {
        self.disk.lock()
    }
}

impl StorageFile for File {
    fn size(&self) -> Result<u64> {
        self.hook.tick(self.inner.size())
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.hook.tick(self.inner.read_exact_at(buf, offset))
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.hook.tick(self.inner.write_all_at(buf, offset))
    }
    fn sync_data(&self) -> Result<()> {
        self.hook.tick(self.inner.sync_data())
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.hook.tick(self.inner.set_len(len))
    }
    fn map(&self) -> Result<Mapped> {
        self.inner.map()
    }
}

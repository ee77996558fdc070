//! A storage of a broker's that keeps the files of one tenant in a shared directory under a
//! name prefix of its own, and hands on the files the directory opens and creates: the names
//! ackstore gives are not the directory's.

use std::sync::Arc;

use ackstore::storage::{LockGuard, StorageFile};
use ackstore::{FileStorage, Storage};

/// The files of `inner` whose names start with `prefix`, by their names after it.
#[derive(Debug)]
pub struct Prefixed {
    /// The shared directory.
    pub inner: FileStorage,
    /// Put before every name in `inner`.
    pub prefix: &'static str,
}

impl Prefixed {
    fn full(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}

impl Storage for Prefixed {
    fn location(&self) -> String {
        format!("{} ({}*)", self.inner.location(), self.prefix)
    }
    fn list(&self) -> ackstore::Result<Vec<String>> {
        Ok(self
            .inner
            .list_prefix(self.prefix)?
            .into_iter()
            .filter_map(|n| n.strip_prefix(self.prefix).map(str::to_owned))
            .collect())
    }
    fn exists(&self, name: &str) -> ackstore::Result<bool> {
        self.inner.exists(&self.full(name))
    }
    fn create(&self, name: &str) -> ackstore::Result<Arc<dyn StorageFile>> {
        self.inner.create(&self.full(name))
    }
    fn open(&self, name: &str) -> ackstore::Result<Arc<dyn StorageFile>> {
        self.inner.open(&self.full(name))
    }
    fn remove(&self, name: &str) -> ackstore::Result<()> {
        self.inner.remove(&self.full(name))
    }
    fn rename(&self, from: &str, to: &str) -> ackstore::Result<()> {
        self.inner.rename(&self.full(from), &self.full(to))
    }
    fn link(&self, from: &str, to: &str) -> ackstore::Result<()> {
        self.inner.link(&self.full(from), &self.full(to))
    }
    fn sync_dir(&self) -> ackstore::Result<()> {
        self.inner.sync_dir()
    }
    fn lock(&self) -> ackstore::Result<LockGuard> {
        self.inner.lock()
    }
}

//! A topic's files inside the store's one directory.
//!
//! Owns: the mapping of a topic's file names into the store directory (`t{id}-{name}`), so
//! every topic of a store lives in one flat directory of one [`Storage`], under the store's one
//! lock. Must never let a name of one topic reach another topic's files or the store's own: the
//! inner name is checked by [`validate_name`] and the prefix ends in `-`, which no generated
//! store file name (`store.meta`, `journal-*`) starts with after a `t` and digits.

use std::sync::Arc;

use crate::error::Result;
use crate::storage::{LockGuard, Storage, StorageFile, validate_name};

/// The part of the store directory holding one topic's files.
#[derive(Debug)]
pub(crate) struct TopicSpace {
    inner: Arc<dyn Storage>,
    prefix: String,
    /// The store's lock, held as long as any topic of the store is open (`None` for tools that
    /// only read).
    _store_lock: Option<Arc<LockGuard>>,
}

impl TopicSpace {
    /// The files of topic `id` in `inner`, keeping `store_lock` held while the topic lives.
    pub(crate) fn new(
        inner: Arc<dyn Storage>,
        id: u64,
        store_lock: Option<Arc<LockGuard>>,
    ) -> Self {
        Self {
            inner,
            prefix: prefix_of(id),
            _store_lock: store_lock,
        }
    }

    fn full(&self, name: &str) -> Result<String> {
        validate_name(name)?;
        let full = format!("{}{name}", self.prefix);
        validate_name(&full)?;
        Ok(full)
    }
}

/// The file-name prefix of topic `id`.
pub(crate) fn prefix_of(id: u64) -> String {
    format!("t{id}-")
}

impl Storage for TopicSpace {
    fn location(&self) -> String {
        format!("{} (topic files {}*)", self.inner.location(), self.prefix)
    }

    fn list(&self) -> Result<Vec<String>> {
        Ok(self
            .inner
            .list()?
            .into_iter()
            .filter_map(|n| n.strip_prefix(self.prefix.as_str()).map(str::to_owned))
            .collect())
    }

    fn exists(&self, name: &str) -> Result<bool> {
        self.inner.exists(&self.full(name)?)
    }

    fn create(&self, name: &str) -> Result<Arc<dyn StorageFile>> {
        self.inner.create(&self.full(name)?)
    }

    fn open(&self, name: &str) -> Result<Arc<dyn StorageFile>> {
        self.inner.open(&self.full(name)?)
    }

    fn remove(&self, name: &str) -> Result<()> {
        self.inner.remove(&self.full(name)?)
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.inner.rename(&self.full(from)?, &self.full(to)?)
    }

    fn link(&self, from: &str, to: &str) -> Result<()> {
        self.inner.link(&self.full(from)?, &self.full(to)?)
    }

    fn sync_dir(&self) -> Result<()> {
        self.inner.sync_dir()
    }

    /// The store holds the directory's lock for all its topics, and every open topic keeps it
    /// held (even after the store handle is dropped); a topic is opened at most once per store
    /// (the store's topic table), so its lock is the store's.
    fn lock(&self) -> Result<LockGuard> {
        Ok(LockGuard::new(Box::new(())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemStorage;

    #[test]
    fn a_topic_sees_only_its_own_files() {
        let disk = MemStorage::new();
        let a = TopicSpace::new(Arc::new(disk.clone()), 1, None);
        let b = TopicSpace::new(Arc::new(disk.clone()), 11, None);
        a.create("topic.meta").expect("create");
        b.create("ledger-1.log").expect("create");
        assert_eq!(a.list().expect("list"), vec!["topic.meta".to_owned()]);
        assert_eq!(b.list().expect("list"), vec!["ledger-1.log".to_owned()]);
        assert!(!a.exists("ledger-1.log").expect("exists"));
        assert_eq!(
            disk.list().expect("list"),
            vec!["t1-topic.meta".to_owned(), "t11-ledger-1.log".to_owned()]
        );
        assert!(a.create("../x").is_err());
    }
}

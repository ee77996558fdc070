//! A topic's files inside the store.
//!
//! Owns: where a topic's files live in the store's storage, so every topic of a store lives
//! under the store's one lock. Two layouts (the catalog's `spaced_from` says which a topic
//! has, see [`crate::format::store`]):
//! - *spaced* (every topic of a store created by this release): the directory `t{id}` of its
//!   own, on storage that has directories ([`Storage::subdirectory`], real files); storage
//!   without directories (the in-memory disk, RADOS) keeps the files under the prefix `t{id}-`
//!   and lists them by prefix ([`Storage::list_prefix`], which those backends answer without
//!   reading other topics' names);
//! - *flat* (topics of a store created by catalog version 1 or 2): the files `t{id}-{name}` in
//!   the store directory itself.
//!
//! A spaced topic's listing, and so its open and every metadata read, costs what that topic
//! holds, not what the store holds; so does a flat topic's on the in-memory disk and RADOS. A
//! flat topic on real files lists the whole store directory (what the earlier release paid for
//! every topic): its files are not moved. Must never let a name of one topic reach another topic's
//! files or the store's own: the inner name is checked by [`validate_name`], the prefix ends in
//! `-`, which no generated store file name (`store.meta`, `journal-*`) starts with after a `t`
//! and digits, and a topic directory's name has no `-` or `.`, so it is no file name of the
//! store's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::hashing::IdSet;
use crate::storage::{LockGuard, Storage, StorageFile, validate_name};
use crate::sync::Monitor;

/// How long a topic's open waits for the previous instance of the same topic to finish its
/// last operation (a close returns before operations already running end).
const REOPEN_WAIT: Duration = Duration::from_secs(30);

/// The topics of one store that have an instance alive: one at a time per topic, so a topic
/// closed and opened again never has two instances writing its files (the store's lock covers
/// the directory, not each topic).
#[derive(Debug, Default)]
pub struct TopicLocks {
    /// The topics with an instance alive. An instance that lets go notifies the callers waiting
    /// for one, only when one waits (see [`Monitor`]).
    held: Monitor<IdSet<u64>>,
}

impl TopicLocks {
    /// Takes topic `id`, waiting up to [`REOPEN_WAIT`] for its previous instance to let go.
    fn take(self: &Arc<Self>, id: u64, location: &str) -> Result<LockGuard> {
        let deadline = Instant::now() + REOPEN_WAIT;
        let (mut held, free) = self
            .held
            .lock()
            .wait_until(Some(deadline), |ids| !ids.contains(&id));
        if !free {
            return Err(Error::Locked {
                path: location.into(),
            });
        }
        held.insert(id);
        Ok(LockGuard::new(Box::new(TopicHeld {
            locks: self.clone(),
            id,
        })))
    }

    /// Waits up to [`REOPEN_WAIT`] until no topic has an instance alive (every closed
    /// instance's last operation has ended); returns whether none has.
    pub(crate) fn wait_idle(&self) -> bool {
        let deadline = Instant::now() + REOPEN_WAIT;
        self.held
            .lock()
            .wait_until(Some(deadline), IdSet::is_empty)
            .1
    }
}

/// Topic `id` held; released when the instance's entry log goes.
struct TopicHeld {
    locks: Arc<TopicLocks>,
    id: u64,
}

impl Drop for TopicHeld {
    fn drop(&mut self) {
        let mut held = self.locks.held.lock();
        held.remove(&self.id);
        held.notify_all();
    }
}

/// The part of the store's storage holding one topic's files.
#[derive(Debug)]
pub struct TopicSpace {
    inner: Arc<dyn Storage>,
    /// Prepended to every name in `inner` (empty for a directory of the topic's own).
    prefix: String,
    /// The store's table of topics with a live instance (`None` for tools that only read).
    /// The store's own lock is the store's: it releases it once no instance is live.
    topic_locks: Option<Arc<TopicLocks>>,
    id: u64,
}

impl TopicSpace {
    /// The files of topic `id` in `store` (the store's storage): in the directory `t{id}`
    /// when `spaced` and the storage has directories (made first with `create`), else under
    /// the prefix `t{id}-`. Its own lock is topic `id` in the store's [`TopicLocks`]
    /// (`topic_locks`).
    ///
    /// # Errors
    /// [`crate::Error::Io`] when the topic's directory is missing (without `create`) or
    /// cannot be made.
    pub fn open(
        store: &Arc<dyn Storage>,
        id: u64,
        spaced: bool,
        create: bool,
        topic_locks: Option<Arc<TopicLocks>>,
    ) -> Result<Self> {
        let own = if spaced {
            store.subdirectory(&dir_of(id), create)?
        } else {
            None
        };
        Ok(match own {
            Some(dir) => Self {
                inner: dir,
                prefix: String::new(),
                topic_locks,
                id,
            },
            None => Self {
                inner: store.clone(),
                prefix: prefix_of(id),
                topic_locks,
                id,
            },
        })
    }

    fn full(&self, name: &str) -> Result<String> {
        validate_name(name)?;
        if self.prefix.is_empty() {
            return Ok(name.to_owned());
        }
        let full = format!("{}{name}", self.prefix);
        validate_name(&full)?;
        Ok(full)
    }
}

/// The file-name prefix of topic `id` in the store directory (flat layout, and spaced topics
/// on storage without directories).
pub(crate) fn prefix_of(id: u64) -> String {
    crate::format::numbered_name("t", id, 0, "-")
}

/// The topic id a directory (`is_dir`: `t{id}`) or file (`t{id}-...`) of a store directory
/// belongs to; `None` for every other name.
pub(crate) fn parse_topic_name(name: &str, is_dir: bool) -> Option<u64> {
    let rest = name.strip_prefix('t')?;
    let digits = if is_dir {
        rest
    } else {
        rest.split_once('-')?.0
    };
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    canonical.then(|| digits.parse().ok()).flatten()
}

/// The name of topic `id`'s own directory (spaced layout).
pub(crate) fn dir_of(id: u64) -> String {
    crate::format::numbered_name("t", id, 0, "")
}

impl Storage for TopicSpace {
    fn location(&self) -> String {
        if self.prefix.is_empty() {
            self.inner.location()
        } else {
            format!("{} (topic files {}*)", self.inner.location(), self.prefix)
        }
    }

    fn list(&self) -> Result<Vec<String>> {
        self.list_prefix("")
    }

    fn list_prefix(&self, prefix: &str) -> Result<Vec<String>> {
        if self.prefix.is_empty() {
            // A directory of its own: its names are the topic's (no copy of each).
            return self.inner.list_prefix(prefix);
        }
        let full = format!("{}{prefix}", self.prefix);
        Ok(self
            .inner
            .list_prefix(&full)?
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

    fn names_file(&self, name: &str, file: &dyn StorageFile) -> Result<Option<bool>> {
        self.inner.names_file(&self.full(name)?, file)
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

    fn creates_whole(&self) -> bool {
        self.inner.creates_whole()
    }

    fn create_whole(&self, name: &str, bytes: &[u8]) -> Result<()> {
        self.inner.create_whole(&self.full(name)?, bytes)
    }

    fn sync_dir(&self) -> Result<()> {
        self.inner.sync_dir()
    }

    /// The store holds the directory's lock for all its topics, until its last handle is
    /// dropped and every topic instance has let go ([`TopicLocks::wait_idle`]). A topic's own
    /// lock is its entry in the store's [`TopicLocks`]: the instance's entry log holds it until its last operation ends,
    /// and the next instance of the same topic waits for that (a tool that only reads takes
    /// none).
    fn lock(&self) -> Result<LockGuard> {
        match &self.topic_locks {
            Some(topics) => topics.take(self.id, &self.location()),
            None => Ok(LockGuard::new(Box::new(()))),
        }
    }
}

//! Many stores in one process: a [`StoreGroup`] shares one flusher pool and one ack memory
//! budget among its member stores, so a broker that owns many stores (bundles a fleet moves
//! one at a time) pays for threads and memory once, not per store.
//!
//! Owns: the group's [`flusher::Pool`] and its [`AckBudget`], and the membership of each store
//! (a store joins when it opens and leaves when its last handle is dropped). Never: keeps a
//! member store alive (the pool holds stores weakly; a store holds its group, so the group's
//! threads stop once the last handle of the group and the last member store are gone).

use std::path::Path;
use std::sync::Arc;

use super::Inner;
use super::{Store, StoreConfig};
use crate::ackset::{AckBudget, AckBudgetStats};
use crate::error::Result;
use crate::journal::flusher;
use crate::storage::{FileStorage, OpenFiles, Storage};

/// Settings of a [`StoreGroup`].
#[derive(Debug, Clone, Default)]
pub struct GroupConfig {
    /// Threads of the group's flusher pool, which runs the flush ticks of every member store,
    /// each store every `ledger.cursor.flush_interval` of its own config. With 0, no store of
    /// the group is flushed in the background (only [`Store::flush_all`], a cursor's `flush`
    /// or `close`, and seeks write cursor state).
    pub flusher_threads: usize,
    /// One memory budget for the resident ack state of every cursor of every member store;
    /// `None`: each store has its own [`StoreConfig::ack_memory_bytes`], if any.
    pub ack_memory_bytes: Option<usize>,
    /// The most file descriptors the files of every member store opened by
    /// [`StoreGroup::open`] hold open at once, all members together (one descriptor cache, as
    /// one budget bounds their ack memory; see [`StoreConfig::open_files`] for what it covers).
    /// `None`: the process's cache
    /// ([`OpenFiles::process`](crate::storage::OpenFiles::process), limit
    /// [`default_open_files`](crate::storage::default_open_files), half the process's soft
    /// `RLIMIT_NOFILE`), shared with every store and topic of the process that has no limit of
    /// its own. A member's own [`StoreConfig::open_files`] is not used.
    pub open_files: Option<usize>,
}

/// Stores that share one flusher pool and one ack memory budget. Cheap to share (`Clone`
/// shares the same group).
///
/// A store opened through the group ([`StoreGroup::open`], [`StoreGroup::open_with_storage`])
/// is an ordinary [`Store`] with its own directory, lock and journal; only the pool and the
/// budget are the group's: [`StoreConfig::flusher_threads`] is not used (the group's
/// [`GroupConfig::flusher_threads`] is), and [`StoreConfig::ack_memory_bytes`] only when the
/// group has no budget. The pool runs each store's ticks on that store's own
/// `flush_interval`, ticks of different stores in parallel up to the pool's size, and drops a
/// store from its schedule when the store's last handle is dropped (waiting for a tick of it
/// in progress). The threads run while the group has a handle or a member store; the last of
/// them to go stops and joins them.
///
/// [`Store::open`] is a group of its own with the store's `flusher_threads`.
#[derive(Debug, Clone)]
pub struct StoreGroup {
    shared: Arc<GroupShared>,
}

/// What the group's handles and member stores share.
#[derive(Debug)]
pub(super) struct GroupShared {
    pub(super) pool: flusher::Pool<Inner>,
    budget: Option<AckBudget>,
    /// The descriptor cache of every member opened by [`StoreGroup::open`].
    open_files: OpenFiles,
}

/// A store's place in its group: leaving is the first step of the store's shutdown.
#[derive(Debug)]
pub(super) struct Membership {
    pub(super) group: Arc<GroupShared>,
    pub(super) id: u64,
}

impl Membership {
    /// Leaves the schedule, waiting for a tick of the store in progress.
    pub(super) fn leave(&self) {
        self.group.pool.leave(self.id);
    }
}

impl StoreGroup {
    /// A group with no member yet; its threads start with the first member store that has a
    /// flush interval.
    #[must_use]
    pub fn new(config: &GroupConfig) -> Self {
        Self {
            shared: Arc::new(GroupShared {
                pool: flusher::Pool::new(config.flusher_threads),
                budget: config.ack_memory_bytes.map(AckBudget::new),
                open_files: config
                    .open_files
                    .map_or_else(OpenFiles::process, OpenFiles::new),
            }),
        }
    }

    /// The group of one store that [`Store::open`] makes: the store's own pool size (none
    /// without a flush interval) and no group budget (the store's `ack_memory_bytes` makes its
    /// own).
    pub(super) fn of_one(config: &StoreConfig) -> Self {
        let threads = if config.ledger.cursor.flush_interval.is_some() {
            config.flusher_threads
        } else {
            0
        };
        Self::new(&GroupConfig {
            flusher_threads: threads,
            ack_memory_bytes: None,
            open_files: config.open_files,
        })
    }

    /// Opens the store in directory `dir` as a member of this group: [`Store::open`], with the
    /// group's pool, budget and descriptor cache ([`GroupConfig::open_files`]).
    ///
    /// # Errors
    /// Those of [`Store::open`]; [`crate::Error::Closed`] after [`StoreGroup::close`].
    pub fn open(&self, dir: impl AsRef<Path>, config: StoreConfig) -> Result<Store> {
        let storage = FileStorage::open_sharing(dir, true, &self.shared.open_files)?;
        self.open_with_storage(Arc::new(storage), config)
    }

    /// Opens the store kept in `storage` as a member of this group (for instance one
    /// namespace of a `RadosCluster` connection shared by the group, feature `rados`).
    ///
    /// # Errors
    /// Those of [`Store::open_with_storage`]; [`crate::Error::Closed`] after
    /// [`StoreGroup::close`].
    pub fn open_with_storage(
        &self,
        storage: Arc<dyn Storage>,
        mut config: StoreConfig,
    ) -> Result<Store> {
        if let Some(budget) = &self.shared.budget {
            config.ledger.cursor.ack_memory = Some(budget.clone());
        } else if let Some(bytes) = config.ack_memory_bytes {
            config.ledger.cursor.ack_memory = Some(AckBudget::new(bytes));
        }
        Store::open_member(storage, config, &self.shared)
    }

    /// The group's ack memory budget: its limit, the resident ack state of every open cursor
    /// of every member together, its peak, and how many cursors share it; `None` without
    /// [`GroupConfig::ack_memory_bytes`].
    #[must_use]
    pub fn ack_memory_stats(&self) -> Option<AckBudgetStats> {
        self.shared.budget.as_ref().map(AckBudget::stats)
    }

    /// The member stores open now (a store leaves when its last handle is dropped).
    #[must_use]
    pub fn stores(&self) -> usize {
        self.shared.pool.members().len()
    }

    /// The threads of the group's flusher pool (running once a member has a flush interval).
    #[must_use]
    pub fn flusher_threads(&self) -> usize {
        self.shared.pool.size()
    }

    /// Closes every open topic of every member store as [`Store::close`] does, then stops the
    /// flusher pool and waits for its threads, and returns the first error. The member stores
    /// stay open (their directories locked, their topics can be opened again) but are no
    /// longer flushed in the background: drop them to release them. Opening a store in the
    /// group afterwards fails with [`crate::Error::Closed`].
    ///
    /// # Errors
    /// The first error of a member's close.
    pub fn close(&self) -> Result<()> {
        let mut first = None;
        for inner in self.shared.pool.members() {
            if let Err(e) = inner.close_topics() {
                first.get_or_insert(e);
            }
        }
        self.shared.pool.stop();
        first.map_or(Ok(()), Err)
    }
}

//! The store: every topic of a broker under one directory and one lock.
//!
//! Owns: the store directory's ownership (its lock and its claim), the catalog of its topics
//! (the metadata record `store`, see [`crate::format::store`]), the list of the cursor journal's
//! segments that count, and the table of open topics, each a [`ManagedLedger`] opened lazily on
//! first use in a directory of its own (`space.rs`). Must never use a topic's name as a path:
//! a topic's directory (or, in stores of the flat layout, its file-name prefix) is named after
//! the id the catalog gives it.
//!
//! Ownership is the topic rules one level up (`docs/cursors.md`, "Topics of a store"): the store
//! takes the directory's lock once, then claims the store by linking its catalog's current
//! version under the next version's name ([`MetaStore::claim`]: nothing written or synced)
//! before it opens any topic, so a former owner still running (a broken lock, shared storage)
//! is refused its next catalog write ([`Error::Fenced`]). Every topic's ownership
//! checks are the store's (the catalog version this handle wrote is still the current one: two
//! name lookups), after each sync and around each record write, so a former owner is fenced on
//! every topic at once, including those this owner has not opened; a topic's open only claims
//! its record with a link (no byte written, no sync), which settles a former owner's record
//! write still in flight, and writes nothing else unless its state needs it.
//!
//! The claim also seals the cursor journal ([`crate::journal`], "Ownership"): after the catalog is
//! written, the journal is opened with the seals and the segment list the catalog holds, its
//! newest segment is sealed at its verified end, and the seal is recorded in the catalog by a
//! compare-and-set, durable before the open returns. Whatever a former owner appends to that
//! segment afterwards is ignored by every later open, a segment it creates afterwards is never
//! listed (its catalog write is refused), and this owner's ticks start a new segment, listed
//! before it is written to. A seal at the length the last clean close recorded for that
//! segment is not written: no owner appends to a segment it did not create, and its creator
//! closed it, so a restart after a clean close syncs nothing (docs/format.md, "Claim and
//! seal").

pub mod catalog;
mod group;
pub mod space;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::ackset::{AckBudget, AckBudgetStats};
use crate::cursor::journal::TopicJournal;
use crate::error::{Error, Result};
use crate::format::store::CatalogSeal;
use crate::format::store::MAX_TOPIC_NAME_LEN;
use crate::hashing::{HashMapExt, IdMap, IdSet};
use crate::journal::{Journal, JournalConfig, JournalStats, OwnerCheck, Seal, SegmentHooks};
use crate::ledger::{LedgerConfig, ManagedLedger};
use crate::meta::{FileMetaStore, MetaStore};
use crate::storage::{LockGuard, Storage};

use catalog::CatalogHandle;
pub use catalog::STORE_RECORD;
pub use group::{GroupConfig, StoreGroup};
use group::{GroupShared, Membership};
use space::TopicSpace;

/// Settings of a store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Settings of every topic of the store. `ledger.cursor.flush_interval` is the interval of
    /// the store's flush ticks (see `flusher_threads`), not one thread per cursor.
    pub ledger: LedgerConfig,
    /// Settings of the store's cursor journal.
    pub journal: JournalConfig,
    /// One memory budget for the resident ack state of every cursor of the store (ack
    /// partitions and partial entries): a cursor that needs room asks the least recently used
    /// others to release theirs first. `None`: each cursor has only its own
    /// `ledger.cursor.lru_capacity_bytes`. See [`Store::ack_memory_stats`].
    pub ack_memory_bytes: Option<usize>,
    /// Threads of the store's flusher pool, which runs a flush tick over every cursor of the
    /// store every `ledger.cursor.flush_interval` (default 2; none without an interval). With 0,
    /// only [`Store::flush_all`], a cursor's `flush` or `close`, and seeks write cursor state.
    /// Not used by a store of a [`StoreGroup`], which has the group's pool.
    pub flusher_threads: usize,
    /// The most file descriptors the store's files hold open at once, over all its topics,
    /// cursors and journal segments: past it, the least recently used idle descriptors close
    /// (a written one syncs first) and reopen on their file's next use. Outside it: the
    /// directory's lock file, a directory descriptor while a listing or a directory sync runs,
    /// a descriptor evicted while an operation still uses it, and one evicted while its
    /// closing sync runs (at most two per thread inside a file operation).
    ///
    /// `None` (the default): the store's files share the process's descriptor cache
    /// ([`OpenFiles::process`](crate::storage::OpenFiles::process), limit
    /// [`default_open_files`](crate::storage::default_open_files): half the process's soft
    /// `RLIMIT_NOFILE`, at least 1, at most 65,536) with every other store, group and topic
    /// opened alone that has no limit of its own: a process opening several stores, or topics
    /// alone beside a store, is bounded by that one limit together (a limit per store let two
    /// stores take the whole soft limit). `Some(n)`: a cache of the store's own of `n`
    /// descriptors. Used by [`Store::open`]; a store of a [`StoreGroup`] shares the group's
    /// cache ([`GroupConfig::open_files`]), and a storage given to
    /// [`Store::open_with_storage`] has whichever it was opened with.
    pub open_files: Option<usize>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            ledger: LedgerConfig::default(),
            journal: JournalConfig::default(),
            ack_memory_bytes: None,
            flusher_threads: 2,
            open_files: None,
        }
    }
}

/// What one [`Store::flush_all`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreFlush {
    /// Cursors whose changes the tick committed.
    pub cursors: u64,
    /// Partition records the tick wrote.
    pub partitions: u64,
    /// Bytes the tick appended to the journal.
    pub bytes: u64,
    /// `fdatasync` and directory syncs the tick made.
    pub syncs: u64,
}

/// Every topic of a broker in one directory. Cheap to share (`Clone` shares the same store).
///
/// [`Store::close`] shuts the store down for every handle and releases the directory's lock
/// before it returns. Dropping the last handle shuts the store down before the drop returns (if
/// it was not closed already): the flusher pool
/// stops (a tick in progress ends first), every open topic is closed as by [`Store::close`]
/// (errors are logged, not returned: call [`Store::close`] first to see them), and the
/// directory's lock is released, so [`Store::open`] of the same directory succeeds at once.
/// A topic or cursor handle kept after that refuses every call with [`Error::Closed`]: a write
/// a store that is gone could never make durable is never answered `Ok`.
#[derive(Debug, Clone)]
pub struct Store {
    inner: Arc<Handle>,
}

/// What every handle of one store shares; dropping it (the last handle's drop) shuts the
/// store down: it leaves its group's flusher schedule (a tick in progress ends first), then
/// closes. The flusher pool's threads hold the store only weakly and never hold this, so the
/// group (held here) is never dropped on one of its own threads.
#[derive(Debug)]
struct Handle {
    inner: Arc<Inner>,
    membership: Membership,
}

impl std::ops::Deref for Handle {
    type Target = Inner;

    fn deref(&self) -> &Inner {
        &self.inner
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.membership.leave();
        match self.inner.shut_down() {
            // Closed already by `Store::close`.
            Ok(()) | Err(Error::Closed) => {}
            Err(e) => ::log::warn!(target: crate::observe::LOG_TARGET,
                "{}: closing the store as its last handle was dropped failed; acks since the \
                 last successful flush may be lost: {}", self.storage.location(), e.with_sources()),
        }
    }
}

#[derive(Debug)]
struct Inner {
    storage: Arc<dyn Storage>,
    config: StoreConfig,
    catalog: Arc<Mutex<CatalogHandle>>,
    /// One slot per topic name used: the slot's lock serializes opening that topic (other
    /// topics open meanwhile); it holds the topic while it is open.
    topics: Mutex<HashMap<String, Arc<TopicSlot>>>,
    journal: Arc<Journal>,
    /// The directory's lock; taken out (released) when the store shuts down: at
    /// [`Store::close`], or at the last handle's drop.
    lock: Mutex<Option<LockGuard>>,
    /// Set (under the `topics` lock, so no topic opens after it) when the store shuts down:
    /// every later call is [`Error::Closed`].
    closed: std::sync::atomic::AtomicBool,
    /// Topics with an instance alive (one at a time per topic).
    topic_locks: Arc<space::TopicLocks>,
    /// By topic id, the cursors whose state the journal recovered when the store opened, until
    /// their topic first opens (which checks them against its cursor table).
    recovered: Mutex<IdMap<u64, Vec<u64>>>,
}

impl Inner {
    fn recovered(&self) -> MutexGuard<'_, IdMap<u64, Vec<u64>>> {
        self.recovered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the store has shut down ([`Store::close`], or the last handle dropped).
    fn is_closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Marks the store closed; whether it was open. Under the `topics` lock: a topic whose
    /// open began before is in the map, and closed by [`Inner::shut_down`]; none begins after.
    fn mark_closed(&self) -> bool {
        let _topics = lock_topics(&self.topics);
        !self.closed.swap(true, std::sync::atomic::Ordering::AcqRel)
    }

    /// Closes every open topic, waits for the last operation of every topic instance to end,
    /// then releases the directory's lock: once this returns, a new store may open the
    /// directory, and no handle of this one writes to it again (a topic handle kept refuses
    /// every call). Runs after the store left its flusher schedule; once.
    fn shut_down(&self) -> Result<()> {
        if !self.mark_closed() {
            return Err(Error::Closed);
        }
        let closed = self.close_topics();
        if !self.topic_locks.wait_idle() {
            ::log::warn!(target: crate::observe::LOG_TARGET,
                "{}: a closed topic's operation still runs after the store's last handle was \
                 dropped; the directory's lock is released all the same",
                self.storage.location());
        }
        self.lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        closed
    }

    /// [`Store::close`].
    fn close_topics(&self) -> Result<()> {
        let flushed = self.flush_tick(false);
        let slots: Vec<Arc<TopicSlot>> =
            lock_topics(&self.topics).drain().map(|(_, s)| s).collect();
        // An open in progress finishes first: its topic is closed with the others.
        let topics: Vec<Arc<ManagedLedger>> = slots
            .iter()
            .filter_map(|s| {
                let _opening = s
                    .opening
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                s.set(None)
            })
            .collect();
        let mut first = flushed.err();
        for t in topics {
            match t.close() {
                // Closed before, by a close whose caller heard how it ended (a failed one
                // answers every later close so): not this store's close's outcome.
                Ok(()) | Err(Error::Closed) => {}
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        if first.is_none()
            && let Some(tail) = self.journal.synced_tail()
        {
            // What a later open checks the newest segment against (an older copy of it ends
            // before); a lower bound, so appends after this close keep it true.
            let closed = CatalogSeal {
                segment: tail.segment,
                len: tail.len,
            };
            first = self
                .catalog
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .record_close(closed)
                .err();
        }
        first.map_or(Ok(()), Err)
    }

    /// One flush tick over every dirty cursor of every open topic: each is staged under its own
    /// lock, then the tick commits (one sync for all) without any cursor's lock. With
    /// `keep_errors` (the flusher pool), a cursor's staging failure is kept for its next
    /// `flush` or `close` and a failed commit is logged (its cursors are unsettled, so their
    /// next flush stages them again; a failed sync latches the journal, so every later flush
    /// reports it); otherwise the first error is returned, after the others committed.
    ///
    /// Covers every cursor open when it is called: the tick is begun (the journal's tick lock
    /// taken) before the cursors are listed, and a cursor's close commits its last state in a
    /// tick of its own, so each cursor either closed before the listing (its close's tick is
    /// done: durable, or it failed and the cursor counts as lost) or is listed, even when its
    /// topic's close has begun, and staged here.
    pub(super) fn flush_tick(&self, keep_errors: bool) -> Result<StoreFlush> {
        let mut tick = self.journal.begin_tick();
        let slots: Vec<Arc<TopicSlot>> = lock_topics(&self.topics).values().cloned().collect();
        // A topic still opening is not waited for: it has no cursor yet. A topic closing is
        // listed: its cursors not closed yet wait for this tick to close.
        let cursors: Vec<_> = slots
            .iter()
            .filter_map(|slot| slot.instance())
            .flat_map(|t| t.open_cursors())
            .collect();
        let mut first_error = None;
        for cursor in &cursors {
            if let Err(e) = cursor.stage_into(&mut tick, keep_errors) {
                first_error.get_or_insert(e);
            }
        }
        let committed = tick.commit();
        if keep_errors && let Err(e) = &committed {
            ::log::warn!(target: crate::observe::LOG_TARGET,
                "{}: a flush tick of the store failed; the next tick writes its cursors again: \
                 {}", self.storage.location(), e.with_sources());
        }
        let stats = committed?;
        first_error.map_or(Ok(()), Err)?;
        Ok(StoreFlush {
            cursors: stats.cursors,
            partitions: stats.partitions,
            bytes: stats.bytes,
            syncs: stats.syncs,
        })
    }
}

impl crate::journal::flusher::Ticked for Inner {
    fn tick(&self) {
        // Errors were kept for the cursors (or logged, for a failed commit).
        let _ = self.flush_tick(true);
    }
}

/// One topic name of the store: `opening` serializes opening that topic (its open may take a
/// while, and other topics open meanwhile); `topic` is the instance, once open.
#[derive(Debug, Default)]
pub struct TopicSlot {
    opening: Mutex<()>,
    topic: Mutex<Option<Arc<ManagedLedger>>>,
}

impl TopicSlot {
    /// The instance, if one is open (never waits for an open in progress).
    fn open(&self) -> Option<Arc<ManagedLedger>> {
        self.topic
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .filter(|t| !t.is_closed())
    }

    /// The instance, open or closing (never waits for an open in progress).
    fn instance(&self) -> Option<Arc<ManagedLedger>> {
        self.topic
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set(&self, topic: Option<Arc<ManagedLedger>>) -> Option<Arc<ManagedLedger>> {
        std::mem::replace(
            &mut *self
                .topic
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            topic,
        )
    }
}

/// Runs `f` on the catalog behind `held` (the journal's hooks hold it weakly, so a dropped
/// store's journal refuses with [`Error::Closed`]).
fn on_catalog<T>(
    held: &std::sync::Weak<Mutex<CatalogHandle>>,
    f: impl FnOnce(&mut CatalogHandle) -> Result<T>,
) -> Result<T> {
    let catalog = held.upgrade().ok_or(Error::Closed)?;
    let mut catalog = catalog
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    f(&mut catalog)
}

fn lock_topics(
    topics: &Mutex<HashMap<String, Arc<TopicSlot>>>,
) -> MutexGuard<'_, HashMap<String, Arc<TopicSlot>>> {
    topics
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Store {
    /// Opens the store in directory `dir`, creating the directory and the store if needed.
    ///
    /// The open takes the directory's lock and claims the store (a link of its catalog's
    /// current version, nothing written or synced) before it opens anything, then opens the
    /// cursor journal and seals its newest segment (a compare-and-set of the catalog, only when
    /// the seal changes it and the last clean close did not end that segment there); it opens
    /// no topic: [`Store::topic`] does, on first use. After a clean close it syncs nothing.
    ///
    /// # Errors
    /// [`Error::Locked`] while another store (in this process or another) holds the directory;
    /// [`Error::NotAckstore`] for a directory that holds files but no store catalog (a topic
    /// directory of [`ManagedLedger::open`], for instance); [`Error::Corrupted`] for a damaged
    /// catalog or journal segment.
    pub fn open(dir: impl AsRef<Path>, config: StoreConfig) -> Result<Self> {
        StoreGroup::of_one(&config).open(dir, config)
    }

    /// Opens the store kept in `storage` (for instance a
    /// [`MemStorage`](crate::storage::MemStorage)), alone in a [`StoreGroup`] of its own
    /// ([`StoreConfig::flusher_threads`] threads, [`StoreConfig::ack_memory_bytes`]).
    pub fn open_with_storage(storage: Arc<dyn Storage>, config: StoreConfig) -> Result<Self> {
        StoreGroup::of_one(&config).open_with_storage(storage, config)
    }

    /// Opens the store kept in `storage` as a member of `group`, whose budget `config`
    /// already carries, and records how long an open that succeeded took
    /// ([`observe::STORE_OPEN_SECONDS`](crate::observe::STORE_OPEN_SECONDS)).
    fn open_member(
        storage: Arc<dyn Storage>,
        config: StoreConfig,
        group: &Arc<GroupShared>,
    ) -> Result<Self> {
        let started = std::time::Instant::now();
        let location = storage.location();
        let store = Self::claim_member(storage, config, group)?;
        metrics::histogram!(crate::observe::STORE_OPEN_SECONDS, "topic" => location)
            .record(started.elapsed().as_secs_f64());
        Ok(store)
    }

    /// [`Store::open_member`]'s work: the lock, the catalog's claim, the journal's scan and
    /// seal.
    fn claim_member(
        storage: Arc<dyn Storage>,
        config: StoreConfig,
        group: &Arc<GroupShared>,
    ) -> Result<Self> {
        let lock = storage.lock()?;
        // The store's own record only: each topic's records are its own metadata store's, so
        // the claim reads and sweeps a handful of names whatever the number of topics.
        let meta: Arc<dyn MetaStore> = Arc::new(FileMetaStore::owned_records(
            storage.clone(),
            &lock,
            &[STORE_RECORD],
        ));
        let mut catalog = CatalogHandle::claim(&storage, &meta)?;
        let seals = journal_seals(catalog.catalog());
        let journal = Journal::open_listed(
            storage.clone(),
            config.journal,
            &seals,
            journal_listing(catalog.catalog()),
        )?;
        let mut recovered: IdMap<u64, Vec<u64>> = IdMap::new();
        for c in journal.cursors() {
            recovered.entry(c.topic).or_default().push(c.cursor);
        }
        check_unlisted_topics(
            storage.as_ref(),
            catalog.catalog(),
            recovered.keys().copied(),
        )?;
        let seal = journal.seal_tail();
        catalog.record_seal(
            CatalogSeal {
                segment: seal.segment,
                len: seal.len,
            },
            &journal.segments(),
        )?;
        let catalog = Arc::new(Mutex::new(catalog));
        let held = Arc::downgrade(&catalog);
        journal.set_owner_check(OwnerCheck(Arc::new({
            let held = held.clone();
            move || on_catalog(&held, |c| c.check_owner())
        })));
        let segment_hook = |edit: fn(&mut CatalogHandle, u64) -> Result<()>| {
            let held = held.clone();
            Arc::new(move |seq: u64| on_catalog(&held, |c| edit(c, seq)))
        };
        journal.set_segment_hooks(SegmentHooks {
            created: segment_hook(CatalogHandle::add_segment),
            deleted: segment_hook(CatalogHandle::remove_segment),
            listed: Arc::new(move |seq: u64| on_catalog(&held, |c| c.known_listed(seq))),
        });
        let interval = config.ledger.cursor.flush_interval;
        let inner = Arc::new(Inner {
            storage,
            config,
            catalog,
            topics: Mutex::new(HashMap::new()),
            journal: Arc::new(journal),
            lock: Mutex::new(Some(lock)),
            closed: std::sync::atomic::AtomicBool::new(false),
            topic_locks: Arc::default(),
            recovered: Mutex::new(recovered),
        });
        let id = group.pool.join(&inner, interval)?;
        Ok(Self {
            inner: Arc::new(Handle {
                inner,
                membership: Membership {
                    group: group.clone(),
                    id,
                },
            }),
        })
    }

    /// Makes every acknowledgement of every open cursor of the store durable in one tick: each
    /// dirty cursor is staged under its own lock (its changed partitions appended, its state
    /// kept for its marker), then the tick appends every marker and syncs once (plus a
    /// directory sync when it started a segment), without holding any cursor's lock, so acks
    /// go on meanwhile. Returns once the tick is durable. For a broker that flushes on its own
    /// schedule; the flusher pool runs the same tick on `flush_interval`.
    ///
    /// `Ok` means every cursor open when the call began is durable, including the cursors of
    /// a topic whose close is under way.
    ///
    /// # Errors
    /// The first cursor's error (its topic fenced, a failed partition load; [`Error::Closed`]
    /// for a cursor whose topic's close failed to flush it meanwhile), after the other cursors
    /// were committed; [`Error::Io`] from the tick: then nothing it staged is guaranteed; a
    /// failed write (a full disk) is tried again by the next flush, a failed sync makes every
    /// later flush of the store fail with [`Error::PreviousIo`] until it is reopened;
    /// [`Error::Fenced`] on every call once another owner claimed the store.
    pub fn flush_all(&self) -> Result<StoreFlush> {
        if self.inner.is_closed() {
            return Err(Error::Closed);
        }
        self.inner.flush_tick(false)
    }

    /// The topic named `name`, opened on first use and created if the store does not hold it.
    /// Every call with the same name returns the same topic while it is open; after the topic
    /// was closed ([`ManagedLedger::close`], a broker unloading it), the next call opens it
    /// again.
    ///
    /// A name is any UTF-8 of 1 to 1,024 bytes; it is kept in the catalog and never used as a
    /// path. Creating a topic writes the catalog (one compare-and-set) before any of the
    /// topic's files, so a crash leaves either no topic or an empty one.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or longer name; [`Error::Fenced`] when another
    /// owner claimed the store since this one opened; the errors of [`ManagedLedger::open`].
    pub fn topic(&self, name: &str) -> Result<Arc<ManagedLedger>> {
        check_topic_name(name)?;
        let slot = self.slot(name)?;
        self.open_in_slot(name, &slot)
    }

    /// The slot of topic `name` in the map of open topics, made if missing.
    ///
    /// # Errors
    /// [`Error::Closed`] once the store is closed.
    pub(crate) fn slot(&self, name: &str) -> Result<Arc<TopicSlot>> {
        let mut topics = self.topics();
        // Checked under the map's lock, which the close takes to set it: a slot taken before
        // is in the map when the close drains it.
        if self.inner.is_closed() {
            return Err(Error::Closed);
        }
        Ok(topics.entry(name.to_owned()).or_default().clone())
    }

    /// The topic of `slot`, opened under the slot's lock if it is not open.
    ///
    /// # Errors
    /// [`Error::Closed`] once the store is closed; those of [`Store::topic`].
    pub(crate) fn open_in_slot(&self, name: &str, slot: &TopicSlot) -> Result<Arc<ManagedLedger>> {
        // Only this topic's slot is held while it opens: other topics open in parallel.
        let _opening = slot
            .opening
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Checked again under the slot's lock: the close marks the store closed before it
        // takes each slot's lock, so an open either holds the lock first (and its topic is
        // closed by the close) or finds the store closed here; none opens after the close
        // took the slot, when the directory's lock may already be released.
        if self.inner.is_closed() {
            return Err(Error::Closed);
        }
        if let Some(t) = slot.open() {
            return Ok(t);
        }
        let storage = &self.inner.storage;
        let mut catalog = self.catalog();
        let id = catalog.id_of_or_create(name, |id, spaced| {
            // The topic's directory, before the catalog write that lists the topic (whose
            // directory sync makes the directory's name durable too).
            if spaced {
                storage.subdirectory(&space::dir_of(id), true)?;
            }
            Ok(())
        })?;
        let spaced = catalog.catalog().is_spaced(id);
        let store_id = catalog.catalog().store_id;
        drop(catalog);
        let space: Arc<dyn Storage> = Arc::new(TopicSpace::open(
            storage,
            id,
            spaced,
            false,
            Some(self.inner.topic_locks.clone()),
        )?);
        let recovered = self.inner.recovered().get(&id).cloned().unwrap_or_default();
        let topic = Arc::new(ManagedLedger::open_in_store(
            space,
            self.inner.config.ledger.clone(),
            TopicJournal {
                journal: self.inner.journal.clone(),
                topic: id,
                name: name.into(),
            },
            (&recovered, store_id),
        )?);
        // Checked once: a cursor recovered later is one this store wrote, under a listing.
        self.inner.recovered().remove(&id);
        slot.set(Some(topic.clone()));
        Ok(topic)
    }

    /// Names of every topic of the store, open or not, in creation order.
    #[must_use]
    pub fn topic_names(&self) -> Vec<String> {
        self.catalog().names()
    }

    /// Names of the topics open in this handle.
    #[must_use]
    pub fn open_topic_names(&self) -> Vec<String> {
        let slots: Vec<(String, Arc<TopicSlot>)> = self
            .topics()
            .iter()
            .map(|(n, s)| (n.clone(), s.clone()))
            .collect();
        let mut names: Vec<String> = slots
            .into_iter()
            .filter(|(_, s)| s.open().is_some())
            .map(|(n, _)| n)
            .collect();
        names.sort();
        names
    }

    /// Closes the store: leaves its flusher schedule (a tick in progress ends first), closes
    /// every open topic (each flushes and closes its cursors, see [`ManagedLedger::close`]),
    /// waits for the last operation of each, then releases the directory's lock, so
    /// [`Store::open`] of the directory (in this process or another) succeeds once this
    /// returns, while this handle and its clones live. Returns the first error of the
    /// topics' closes (not of a topic closed before by [`ManagedLedger::close`], whose caller
    /// heard its outcome); the store is closed either way (call [`Store::flush_all`] first to
    /// retry a failed flush).
    ///
    /// Every dirty cursor is first committed by one tick ([`Store::flush_all`]), so closing
    /// many cursors costs a handful of syncs, not one per cursor. After it, every call on the
    /// store ([`Store::topic`], [`Store::flush_all`], [`Store::close`]) fails with
    /// [`Error::Closed`], as does every call on a topic or cursor handle kept from it.
    ///
    /// # Errors
    /// [`Error::Closed`] when the store was closed already; the first error of the last flush
    /// and the topics' closes ([`Error::Fenced`] once another owner claimed the store).
    pub fn close(&self) -> Result<()> {
        self.inner.membership.leave();
        self.inner.inner.shut_down()
    }

    /// The store's cursor journal, whose ticks and rollovers check this store still owns the
    /// directory (for the tools and tests that drive it directly).
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    #[must_use]
    pub fn journal(&self) -> &Arc<Journal> {
        &self.inner.journal
    }

    /// The store's ack memory budget: its limit, the resident ack state of every open cursor
    /// together, its peak, and how many cursors share it; `None` without
    /// [`StoreConfig::ack_memory_bytes`]. Per-cursor figures: `CursorStats::ackset`
    /// (`resident_bytes + charged_bytes` is a cursor's share).
    #[must_use]
    pub fn ack_memory_stats(&self) -> Option<AckBudgetStats> {
        self.inner
            .config
            .ledger
            .cursor
            .ack_memory
            .as_ref()
            .map(AckBudget::stats)
    }

    /// Counters of the store's cursor journal.
    #[must_use]
    pub fn journal_stats(&self) -> JournalStats {
        self.inner.journal.stats()
    }

    /// The journal seals the store's catalog holds (what `inspect` and `verify` pass
    /// `journal::check_sealed`), for the command and tests.
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    #[must_use]
    pub fn journal_seals(&self) -> Vec<Seal> {
        journal_seals(self.catalog().catalog())
    }

    /// The store's storage (for tools: `inspect`, `verify`).
    #[must_use]
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.inner.storage
    }

    fn topics(&self) -> MutexGuard<'_, HashMap<String, Arc<TopicSlot>>> {
        lock_topics(&self.inner.topics)
    }

    fn catalog(&self) -> MutexGuard<'_, CatalogHandle> {
        self.inner
            .catalog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The files of topic `id` of the store kept in `storage`, whose catalog is `catalog`, as a
/// topic's own storage (for tools that read a store's topics without opening the store:
/// `ackstore inspect` and `verify`). Creates nothing.
///
/// # Errors
/// [`Error::Io`] when the topic's directory is missing.
pub fn topic_storage(
    storage: &Arc<dyn Storage>,
    catalog: &crate::format::store::Catalog,
    id: u64,
) -> Result<Arc<dyn Storage>> {
    Ok(Arc::new(TopicSpace::open(
        storage,
        id,
        catalog.is_spaced(id),
        false,
        None,
    )?))
}

/// How file `file` of topic `id` is named in the store's storage, for messages: `t{id}/file`
/// for a topic in a directory of its own, `t{id}-file` otherwise (`file` empty: the topic's
/// directory or prefix itself).
#[must_use]
pub fn topic_file(
    storage: &Arc<dyn Storage>,
    catalog: &crate::format::store::Catalog,
    id: u64,
    file: &str,
) -> String {
    // Storage without directories answers `Ok(None)`; a missing directory (`Err`) is still
    // named as the directory it should be.
    let own_dir = catalog.is_spaced(id)
        && !matches!(storage.subdirectory(&space::dir_of(id), false), Ok(None));
    if own_dir {
        format!("{}/{file}", space::dir_of(id))
    } else {
        format!("{}{file}", space::prefix_of(id))
    }
}

/// The catalog of the store kept in `storage` with its topics (read from the chunk records it
/// pins, as the open reads them), read without writing; `None` when `storage` holds no store.
///
/// # Errors
/// [`Error::Corrupted`] for a damaged catalog, and for one that reads as deleted or is gone
/// beside a store's topic (`catalog::refuse_lost_catalog`, as the open refuses them);
/// [`Error::Io`].
pub fn read_catalog(storage: Arc<dyn Storage>) -> Result<Option<crate::format::store::Catalog>> {
    let meta = FileMetaStore::new(storage);
    let Some((_, bytes)) = meta.get(STORE_RECORD)? else {
        catalog::refuse_lost_catalog(meta.storage())?;
        return Ok(None);
    };
    let mut catalog =
        crate::format::store::Catalog::decode(&bytes).map_err(|c| c.in_record(STORE_RECORD))?;
    catalog::load_chunks(&meta, &mut catalog)?;
    Ok(Some(catalog))
}

/// What [`check_unlisted_topics`] finds wrong with a catalog when a topic's directory or flat
/// file holds a file and the catalog does not list the topic.
pub(crate) const UNLISTED_TOPIC_FILES: &str =
    "topics (the store holds files of a topic the catalog does not list)";

/// Checks that the store kept in `storage` holds nothing of a topic its `catalog` does not
/// list (topics are never removed from a catalog): no cursor state in the journal
/// (`journal_topics`: the topic ids of every cursor the journal holds a committed state of),
/// and, on storage with directories, no topic directory (`t{id}/`) or flat topic file
/// (`t{id}-...`) holding a file. A creation cut short leaves at most an empty directory of the
/// next id (made before the catalog write that lists the topic), which is not damage. What
/// [`Store::open`] refuses and `ackstore verify` reports.
///
/// # Errors
/// [`Error::Corrupted`] naming the store catalog and the topic id found; [`Error::Io`].
pub fn check_unlisted_topics(
    storage: &dyn Storage,
    catalog: &crate::format::store::Catalog,
    journal_topics: impl IntoIterator<Item = u64>,
) -> Result<()> {
    let listed: IdSet<u64> = catalog.topics.iter().map(|t| t.id).collect();
    let unlisted = |what: &'static str| {
        Err(Error::corrupted_at(
            crate::error::CorruptionPlace::Record(STORE_RECORD.into()),
            crate::error::CorruptionKind::InvalidField(what),
        ))
    };
    if journal_topics.into_iter().any(|t| !listed.contains(&t)) {
        return unlisted(
            "topics (the cursor journal holds the state of a topic the catalog does not list)",
        );
    }
    let Some(dir) = storage.local_dir() else {
        return Ok(());
    };
    let io = |e: std::io::Error| Error::io("list", storage.location(), e);
    let mut found = false;
    let mut failed = None;
    let every = |_: &[u8]| true;
    crate::storage::each_entry(dir, every, |name, is_dir| {
        let Ok(name) = std::str::from_utf8(name) else {
            return true;
        };
        let Some(id) = space::parse_topic_name(name, is_dir) else {
            return true;
        };
        if listed.contains(&id) {
            return true;
        }
        found = !is_dir || {
            let mut holds = false;
            if let Err(e) = crate::storage::each_entry(&dir.join(name), every, |_, _| {
                holds = true;
                false
            }) {
                failed = Some(e);
            }
            holds
        };
        !found && failed.is_none()
    })
    .map_err(io)?;
    if let Some(e) = failed {
        return Err(io(e));
    }
    if found {
        return unlisted(UNLISTED_TOPIC_FILES);
    }
    Ok(())
}

/// Whether `storage`, which holds no catalog version, holds a store's topic: a topic directory
/// (`t{id}/`) or flat topic record files (`t{id}-topic.{v}.meta`) whose topic record names a
/// store ([`TopicRecord::store_id`](crate::format::meta::TopicRecord::store_id)). Only a store
/// makes such a topic, so that store's catalog is gone: damage to the store, which `verify`
/// reports, the store's open refuses and a topic's own open refuses too. Names alone say
/// nothing (a file or directory named `t1-notes.txt` or `t1/` is anyone's), nor does a topic of
/// its own (it names no store).
///
/// Reads the topic records of the `t{id}` names in id order until one decodes, and answers by
/// it: the topics of one store are of one kind, so the first readable record speaks for them
/// (a damaged one proves nothing and the next is read). Topics of a store of an earlier release,
/// whose records name no store, are not found.
///
/// # Errors
/// [`Error::Io`] when the directory cannot be listed.
pub(crate) fn holds_store_topic(storage: &Arc<dyn Storage>) -> Result<bool> {
    let topic_record =
        |rest: &str| crate::meta::file::record_of_file(rest) == Some(crate::ledger::TOPIC_RECORD);
    // A flat name is a candidate when it is a topic record's file (`t{id}-topic...`).
    let flat = |name: &str| {
        let id = space::parse_topic_name(name, false)?;
        let rest = name.split_once('-').map_or("", |(_, rest)| rest);
        topic_record(rest).then_some(id)
    };
    let mut candidates: Vec<(u64, bool)> = Vec::new();
    if let Some(dir) = storage.local_dir() {
        crate::storage::each_entry(
            dir,
            |_| true,
            |name, is_dir| {
                if let Ok(name) = std::str::from_utf8(name) {
                    let id = if is_dir {
                        space::parse_topic_name(name, true)
                    } else {
                        flat(name)
                    };
                    candidates.extend(id.map(|id| (id, is_dir)));
                }
                true
            },
        )
        .map_err(|e| Error::io("list", storage.location(), e))?;
    } else {
        candidates.extend(
            storage
                .list()?
                .iter()
                .filter_map(|n| flat(n))
                .map(|id| (id, false)),
        );
    }
    candidates.sort_unstable();
    candidates.dedup();
    for (id, spaced) in candidates {
        let Ok(topic) = space::TopicSpace::open(storage, id, spaced, false, None) else {
            continue;
        };
        let topic: Arc<dyn Storage> = Arc::new(topic);
        let record = FileMetaStore::new(topic)
            .get(crate::ledger::TOPIC_RECORD)
            .ok()
            .flatten()
            .and_then(|(_, bytes)| crate::format::meta::TopicRecord::decode(&bytes).ok());
        if let Some(record) = record {
            return Ok(record.store_id != 0);
        }
    }
    Ok(false)
}

/// The journal segments `catalog` lists, as [`Journal::open_listed`] and
/// [`journal::check_listed`](crate::journal::check_listed) take them (`None`: a catalog of version 1 or 2, for which every
/// segment file counts).
#[must_use]
pub fn journal_listing(
    catalog: &crate::format::store::Catalog,
) -> Option<crate::journal::Listed<'_>> {
    catalog
        .segments
        .as_deref()
        .map(|segments| crate::journal::Listed {
            segments,
            retired_through: catalog.retired_through,
            closed: catalog.closed.map(Seal::from),
        })
}

/// The journal seals `catalog` holds, as [`journal::check_sealed`](crate::journal::check_sealed) and
/// [`Journal::open_sealed`] take them.
#[must_use]
pub fn journal_seals(catalog: &crate::format::store::Catalog) -> Vec<Seal> {
    catalog.seals.iter().map(|s| Seal::from(*s)).collect()
}

fn check_topic_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_TOPIC_NAME_LEN {
        return Err(Error::InvalidArgument {
            reason: format!(
                "a topic name is 1 to {MAX_TOPIC_NAME_LEN} bytes of UTF-8, not {} bytes",
                name.len()
            ),
        });
    }
    Ok(())
}

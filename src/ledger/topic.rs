//! The shared state of one open topic: entry log, topic record, layout, open cursors.
//!
//! Owns: appends (message index, clamped timestamps, ledger rollover), the topic record's
//! updates (by compare-and-set, always before the ledger files they describe change), and
//! trimming. [`crate::ledger::ManagedLedger`] and every [`crate::cursor::Cursor`] share one
//! `TopicCore`.
//!
//! What readers see: an appended entry becomes readable once a finished fsync covers it (see
//! `finder::Layouts` and `docs/cursors.md`, "Read visibility"): the sync and the seal that
//! cover entries move the readable end and wake the waiting reads.
//!
//! Lock order (outer first): `writer` -> `layout` -> `cursors` -> a cursor's published
//! mark-delete. A cursor operation takes its own state lock, then `layout` for reading; it never
//! takes `writer` or `cursors` while holding its state.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{
    Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak,
};
use std::time::Instant;

use super::config::LedgerConfig;
use super::names::CursorNames;
use super::table;
use crate::cursor::CursorConfig;
use crate::cursor::journal::TopicJournal;
use crate::cursor::{self, CursorShared, NO_MARK_DELETE, TopicAccess};
use crate::error::{Error, Result};
use crate::finder::{Layout, Layouts, LedgerSpan, ReadableLayout};
use crate::format::meta::{CursorRecord, LedgerRecord, TopicRecord};
use crate::hashing::{HashMapExt, IdMap};
use crate::log::{EntryLog, EntryMeta, IdSource};
use crate::meta::MetaStore;
use crate::observe;
use crate::position::Position;
use crate::sync::{Monitor, lock};

/// Name of the topic's metadata record.
pub const TOPIC_RECORD: &str = "topic";

/// Ledger ids an owner reserves at a time in the topic record (at its open, then whenever it
/// has used them up): every ledger file, data or cursor, gets an id from a block no other owner
/// ever had, so two owners never create, or delete, a file of the same id.
pub(crate) const ID_BLOCK: u64 = 64;

/// State only appends, rollovers, trims and cursor creation change.
pub(crate) struct Writer {
    /// The topic record as last written, and its version.
    pub(crate) record: TopicRecord,
    pub(crate) version: u64,
    /// The data ledger appends go to; `None` until the next append creates one.
    pub(crate) current: Option<u64>,
    /// Payload bytes appended to `current`.
    pub(crate) current_bytes: u64,
    /// Timestamp of the last entry (the floor of the next one).
    pub(crate) last_timestamp: u64,
    /// `record`'s cursor table by name; told of every replacement of `record` (`commit`).
    pub(crate) names: CursorNames,
}

impl Writer {
    /// The id the cursor table gives cursor `name`, if it lists it (see [`CursorNames`]).
    pub(crate) fn cursor_id(&mut self, name: &str) -> Option<u64> {
        self.names.id_of(&self.record.cursors, name)
    }
}

/// One open topic.
pub(crate) struct TopicCore {
    pub(crate) location: Arc<str>,
    log: RwLock<Option<Arc<EntryLog>>>,
    pub(crate) meta: Arc<dyn MetaStore>,
    pub(crate) config: LedgerConfig,
    /// `config.cursor`, shared by the topic's journal cursors instead of a copy each.
    pub(crate) cursor_config: Arc<CursorConfig>,
    /// Every appended entry and the readable prefix of them.
    layout: RwLock<Layouts>,
    writer: Mutex<Writer>,
    /// The topic record's version as this handle last wrote it (a copy of `Writer::version`
    /// that cursors read without taking `writer`).
    owned_version: AtomicU64,
    /// The topic record as last committed. Held across every record write and the update of
    /// `owned_version` that follows it, so an ownership check that finds the stored version
    /// ahead of `owned_version` can wait for the write in flight and compare again. Innermost
    /// lock: nothing but the metadata store is used while holding it.
    committing: Mutex<TopicRecord>,
    /// Open cursors by name.
    cursors: Mutex<BTreeMap<Arc<str>, Arc<CursorShared>>>,
    /// A close failed (a cursor's flush or the seal): what it could not persist is lost, so a
    /// later close answers [`Error::Closed`], never `Ok`.
    close_failed: AtomicBool,
    /// A close has begun: set under `writer`, so a cursor open (which holds `writer` until its
    /// cursor is registered) either finished before the close saw the open cursors, or is
    /// refused.
    closing: AtomicBool,
    /// A topic-record write of this handle whose outcome is unknown (it failed and the store
    /// could not be read back): the version it would have created, its bytes and the record.
    /// Guarded by `committing`. Until it is settled, a stored record equal to it is this
    /// handle's own write, not a newer owner's.
    uncertain: Mutex<Option<(u64, Vec<u8>, TopicRecord)>>,
    /// An uncertain write was found to have taken and `committing` holds it; the writer's
    /// copy is refreshed at its next commit.
    adopted: AtomicBool,
    /// Set once a fence of this handle has been logged (later refusals are only counted).
    fence_reported: AtomicBool,
    /// The directory forgot topic-record versions this handle linked: a failed directory
    /// sync (of this record's write, or of any other file's in the directory) takes back
    /// every name it was to make durable, the claim's too, and with it the proof of
    /// ownership. A failed sync is never retried: from then on every record write, and every
    /// step that would change a ledger file before one, answers [`Error::PreviousIo`] until
    /// the topic is reopened; reads go on.
    record_failed: AtomicBool,
    /// Open non-durable cursors (readers) by id: closed with the topic, never in the topic
    /// record, never consulted by trimming. Keyed so opening and closing one costs O(1)
    /// whatever the number of readers.
    readers: Mutex<IdMap<u64, Weak<CursorShared>>>,
    /// Changes that may let a waiting read return: entries made readable, moves of a read
    /// position, closes and deletions of cursors, the topic's close. A waiting read waits on it
    /// until the count moves past the value it saw before reading.
    wakes: Monitor<u64>,
    /// The cursor journal its cursors persist through: the store's, for a topic of a store;
    /// for a topic opened alone, the one it hosts in its directory (`None` only while it
    /// opens).
    pub(crate) journal: Option<TopicJournal>,
    /// Whether the topic is a store's: its ownership is the store's, and its journal the
    /// store's.
    pub(crate) in_store: bool,
    /// Cursors of a topic opened alone whose journal state its open found without a cursor
    /// table entry (a deletion cut short): forgotten once the journal's hooks are set.
    pub(crate) forget_at_open: Mutex<Vec<u64>>,
    /// Cursors whose state the journal holds while their record still names a cursor ledger
    /// (an import cut short after the journal's commit, `cursor::import`), by id, with that
    /// ledger: their next write switches the record and deletes the ledger.
    pub(crate) superseded: Mutex<std::collections::BTreeMap<u64, u64>>,
    /// Ledger files to delete once the topic record no longer lists them durably: empty
    /// ledgers a store topic's open dropped from its record in memory only (see
    /// `ledger::open`). Deleted after the next record write that succeeds.
    deferred_deletes: Mutex<Vec<u64>>,
}

impl std::fmt::Debug for TopicCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topic")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl TopicCore {
    pub(crate) fn new(
        log: Arc<EntryLog>,
        meta: Arc<dyn MetaStore>,
        config: LedgerConfig,
        layout: Layout,
        writer: Writer,
    ) -> Self {
        let read_unsynced = config.read_unsynced;
        Self {
            location: log.storage().location().into(),
            cursor_config: Arc::new(config.cursor.clone()),
            log: RwLock::new(Some(log)),
            meta,
            config,
            layout: RwLock::new(Layouts::new(layout, read_unsynced)),
            owned_version: AtomicU64::new(writer.version),
            committing: Mutex::new(writer.record.clone()),
            writer: Mutex::new(writer),
            cursors: Mutex::new(BTreeMap::new()),
            close_failed: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            uncertain: Mutex::new(None),
            adopted: AtomicBool::new(false),
            fence_reported: AtomicBool::new(false),
            record_failed: AtomicBool::new(false),
            readers: Mutex::new(IdMap::new()),
            wakes: Monitor::new(0),
            journal: None,
            in_store: false,
            forget_at_open: Mutex::new(Vec::new()),
            superseded: Mutex::new(std::collections::BTreeMap::new()),
            deferred_deletes: Mutex::new(Vec::new()),
        }
    }

    /// Ledgers to delete after the next record write (see `deferred_deletes`).
    pub(crate) fn defer_deletes(&self, ledgers: Vec<u64>) {
        lock(&self.deferred_deletes).extend(ledgers);
    }

    /// Deletes the deferred ledgers: the record just written no longer lists them. A failure
    /// leaves the file for the next open (an orphan then), so it is not reported.
    fn delete_deferred(&self) {
        let ledgers: Vec<u64> = std::mem::take(&mut *lock(&self.deferred_deletes));
        if ledgers.is_empty() {
            return;
        }
        if let Ok(log) = self.log() {
            for id in ledgers {
                let _ = log.delete_ledger(id);
            }
        }
    }

    pub(crate) fn writer(&self) -> MutexGuard<'_, Writer> {
        lock(&self.writer)
    }

    /// Marks the topic closing, under `writer` (see `closing`).
    fn writer_and_closing(&self) {
        let _w = self.writer();
        self.closing.store(true, Ordering::SeqCst);
    }

    /// Whether a close has begun.
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    pub(crate) fn cursors(&self) -> MutexGuard<'_, BTreeMap<Arc<str>, Arc<CursorShared>>> {
        lock(&self.cursors)
    }

    /// The open non-durable cursors (dead handles are pruned on every registration).
    pub(crate) fn readers(&self) -> MutexGuard<'_, IdMap<u64, Weak<CursorShared>>> {
        lock(&self.readers)
    }

    /// Wakes every waiting read: entries became readable, a read position moved, or a cursor
    /// or the topic closed. Each read looks again and waits on if it still finds nothing.
    ///
    /// Acks that move a read position, cursor closes and syncs call this whether or not
    /// anything waits: [`Monitor`] notifies only when a read is parked.
    fn wake_all(&self) {
        let mut wakes = self.wakes.lock();
        *wakes += 1;
        wakes.notify_all();
    }

    /// Reads currently waiting in `Cursor::read_entries_or_wait` (for tests that must act
    /// while a read is parked).
    pub(crate) fn parked_reads(&self) -> usize {
        self.wakes.waiters()
    }

    /// Both views of the ledgers: every appended entry, and the readable prefix.
    pub(crate) fn layouts(&self) -> RwLockReadGuard<'_, Layouts> {
        self.layout.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn layout_mut(&self) -> RwLockWriteGuard<'_, Layouts> {
        self.layout.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes `record` over the version `writer` holds.
    pub(crate) fn commit(&self, writer: &mut Writer, mut record: TopicRecord) -> Result<()> {
        let mut committed = lock(&self.committing);
        self.check_record_writes()?;
        if let Some((version, adopted)) = self.settle()? {
            self.owned_version.store(version, Ordering::SeqCst);
            *committed = adopted;
            self.adopted.store(true, Ordering::SeqCst);
        }
        if self.adopted.swap(false, Ordering::SeqCst) {
            // An earlier write of ours took after all: `record` was built on the record before
            // it, so it is not written; the caller's next attempt builds on the adopted one.
            let before = std::mem::replace(&mut writer.record, committed.clone());
            writer
                .names
                .changed(&before.cursors, &writer.record.cursors);
            writer.version = self.owned_version.load(Ordering::SeqCst);
            return Err(Error::PreviousIo);
        }
        // A block of ledger ids reserved since `writer` last committed stays reserved, and the
        // journal listing is the hooks' (see `edit_record`), never the writer's.
        record.next_ledger_id = record.next_ledger_id.max(committed.next_ledger_id);
        record.journal.clone_from(&committed.journal);
        let version = match self.put_record(&mut record) {
            Ok(version) => version,
            Err((e, Some(version))) => {
                // The new version is the record now (its write failed after it was linked, at
                // the directory sync, say): this handle knows it, so no later write of its own
                // is refused as a newer owner's (should the directory forget it, the next one
                // answers `PreviousIo`, `record_failed`); the caller still learns of the
                // error. The chunk records it superseded stay, leftovers for the next open.
                self.owned_version.store(version, Ordering::SeqCst);
                committed.clone_from(&record);
                drop(committed);
                writer.version = version;
                writer
                    .names
                    .changed(&writer.record.cursors, &record.cursors);
                writer.record = record;
                return Err(e);
            }
            Err((e, None)) => return Err(e),
        };
        self.owned_version.store(version, Ordering::SeqCst);
        let superseded = table::superseded(&committed, &record);
        committed.clone_from(&record);
        drop(committed);
        writer.version = version;
        writer
            .names
            .changed(&writer.record.cursors, &record.cursors);
        writer.record = record;
        table::discard(self.meta.as_ref(), &superseded);
        self.delete_deferred();
        Ok(())
    }

    /// Writes the topic record `record` over the version this handle owns, the chunk records
    /// of its cursor table that it does not pin yet first (`table::stage_chunks`: `record` is
    /// left pinning them, whatever the outcome). On an error, also returns the version the
    /// store holds when that is `record` itself, one past the owned version: the write failed
    /// after its new version was linked (its directory sync, or the removal of older
    /// versions), so the record is this handle's write, durable or not. Caller holds
    /// `committing`.
    fn put_record(
        &self,
        record: &mut TopicRecord,
    ) -> std::result::Result<u64, (Error, Option<u64>)> {
        let owned = self.owned_version.load(Ordering::SeqCst);
        match table::stage_chunks(self.meta.as_ref(), record, (owned, owned + 1)) {
            Ok(()) => {}
            Err(e @ Error::Fenced { .. }) => return Err((self.refused(owned, e), None)),
            Err(e) => return Err((e, None)),
        }
        let encoded = record.encode();
        let e = match self.meta.put(TOPIC_RECORD, Some(owned), &encoded) {
            Ok(version) => return Ok(version),
            Err(e @ Error::Fenced { .. }) => return Err((self.refused(owned, e), None)),
            Err(e) => e,
        };
        let linked = match self.meta.get(TOPIC_RECORD) {
            Ok(Some((version, bytes))) if version == owned + 1 && bytes == encoded => Some(version),
            Ok(Some((version, _))) if version == owned => None,
            Ok(Some((version, _))) if version < owned => {
                // The failed directory sync took back names this handle linked.
                self.record_failed.store(true, Ordering::SeqCst);
                None
            }
            _ => {
                *lock(&self.uncertain) = Some((owned + 1, encoded, record.clone()));
                None
            }
        };
        Err((e, linked))
    }

    /// Settles an uncertain write of ours (caller holds `committing`): `Some` with its version
    /// and record when the store holds it (this handle must adopt it), `None` when it did not
    /// take. An error when the store cannot be read.
    fn settle(&self) -> Result<Option<(u64, TopicRecord)>> {
        let mut uncertain = lock(&self.uncertain);
        let Some((version, bytes, _)) = uncertain.as_ref() else {
            return Ok(None);
        };
        let stored = self.meta.get(TOPIC_RECORD)?;
        let took = stored
            .as_ref()
            .is_some_and(|(v, b)| v == version && b == bytes);
        let settled = uncertain.take();
        Ok(settled.filter(|_| took).map(|(v, _, r)| (v, r)))
    }

    /// Reserves the next block of [`ID_BLOCK`] ledger ids in the topic record (by
    /// compare-and-set, so no other owner ever uses them) and returns it.
    fn reserve_ids(&self) -> Result<(u64, u64)> {
        self.edit_record(|record| {
            let start = record.next_ledger_id;
            let end = start
                .checked_add(ID_BLOCK)
                .ok_or_else(|| Error::LimitExceeded {
                    reason: "the topic has run out of ledger ids".into(),
                })?;
            record.next_ledger_id = end;
            Ok((start, end))
        })
    }

    /// Writes the topic record as last committed, changed by `edit`, over the version this
    /// handle owns (nothing when `edit` changes nothing), without the writer: what changes
    /// only here (blocks of ledger ids, the hosted journal's listing) is kept by every later
    /// [`TopicCore::commit`]. A write that failed after its new version was linked counts as
    /// written (the error is still returned).
    pub(crate) fn edit_record<T>(
        &self,
        edit: impl FnOnce(&mut TopicRecord) -> Result<T>,
    ) -> Result<T> {
        let mut committed = lock(&self.committing);
        self.check_record_writes()?;
        if let Some((version, adopted)) = self.settle()? {
            // Our earlier write took; the writer adopts it at its next commit.
            self.owned_version.store(version, Ordering::SeqCst);
            *committed = adopted;
            self.adopted.store(true, Ordering::SeqCst);
        }
        let mut record = committed.clone();
        let out = edit(&mut record)?;
        if record == *committed {
            return Ok(out);
        }
        let version = match self.put_record(&mut record) {
            Ok(version) => version,
            Err((e, Some(version))) => {
                self.owned_version.store(version, Ordering::SeqCst);
                *committed = record;
                return Err(e);
            }
            Err((e, None)) => return Err(e),
        };
        self.owned_version.store(version, Ordering::SeqCst);
        let superseded = table::superseded(&committed, &record);
        *committed = record;
        drop(committed);
        table::discard(self.meta.as_ref(), &superseded);
        self.delete_deferred();
        Ok(out)
    }

    /// The topic record as last committed, if the store still holds this handle's version of
    /// it (`None` when it moved on, or a write of this handle may have taken).
    pub(crate) fn committed_if_current(&self) -> Result<Option<TopicRecord>> {
        let committed = lock(&self.committing);
        if lock(&self.uncertain).is_some() {
            return Ok(None);
        }
        let owned = self.owned_version.load(Ordering::SeqCst);
        let current = matches!(self.meta.get(TOPIC_RECORD)?, Some((v, _)) if v == owned);
        Ok(current.then(|| committed.clone()))
    }

    /// Makes the entry log take its next blocks of ledger ids from [`TopicCore::reserve_ids`].
    pub(crate) fn install_id_source(self: &Arc<Self>) -> Result<()> {
        let topic = Arc::downgrade(self);
        self.log()?.set_id_source(IdSource(Arc::new(move || {
            topic.upgrade().ok_or(Error::Closed)?.reserve_ids()
        })));
        Ok(())
    }

    /// Fails with [`Error::Fenced`] when the topic record is no longer at the version this
    /// handle wrote last: a newer owner opened the directory (every open claims the record),
    /// so this handle must not change the topic's files or records any more. One metadata
    /// read; taken before steps that touch ledger files (creating, sealing), because the
    /// record write that follows them would only be refused after the file changed.
    ///
    /// Takes the writer guard to show it is held (no topic commit is in flight); a block
    /// reservation of ledger ids may be, which `check_version` waits for.
    pub(crate) fn check_owner(&self, _writer: &Writer) -> Result<()> {
        self.check_record_writes()?;
        self.check_version(self.owned_version.load(Ordering::SeqCst))
    }

    /// [`Error::PreviousIo`] once the directory forgot versions this handle linked
    /// (`record_failed`).
    fn check_record_writes(&self) -> Result<()> {
        if self.record_failed.load(Ordering::SeqCst) {
            Err(Error::PreviousIo)
        } else {
            Ok(())
        }
    }

    /// Invariant: the stored version differs from `owned_version` only while this handle's
    /// own record write is in flight (it holds `committing`), after another owner wrote, or
    /// after the directory forgot versions this handle linked (`record_failed` is then set,
    /// and a record below `owned_version` answers [`Error::PreviousIo`]). A mismatch is
    /// therefore checked again once `committing` is free: only a mismatch that persists with
    /// no write of ours in flight, at or above our version, means a newer owner.
    ///
    /// A topic of a store has the store's proof instead: the store's claim fences every former
    /// owner of every topic (`ledger::open`, rule 0), and its check costs two name lookups.
    fn check_version(&self, owned: u64) -> Result<()> {
        if self.in_store
            && let Some(tj) = &self.journal
        {
            return tj.check_store_owner().map_err(|e| self.fenced(e));
        }
        if self.meta.is_current(TOPIC_RECORD, owned)? {
            return Ok(());
        }
        let mut committed = lock(&self.committing);
        if let Some((version, adopted)) = self.settle()? {
            // Our own write whose outcome was unknown took: not a newer owner. The writer
            // adopts it at its next commit.
            self.owned_version.store(version, Ordering::SeqCst);
            *committed = adopted;
            self.adopted.store(true, Ordering::SeqCst);
        }
        let owned = self.owned_version.load(Ordering::SeqCst);
        if self.meta.is_current(TOPIC_RECORD, owned)? {
            return Ok(());
        }
        Err(self.refused(
            owned,
            Error::Fenced {
                what: format!("{} (topic record)", self.location),
            },
        ))
    }

    /// What the refusal `fence` of a check or a write built on version `owned` tells the
    /// caller: `PreviousIo` when the record is below `owned` (`meta::forgot_version`: a failed
    /// directory sync took back names this handle linked, its claim's or a write's), which
    /// latches `record_failed`; otherwise the fence, counted. Reads the record once, on a
    /// refusal only; a read that fails leaves the fence as it is.
    fn refused(&self, owned: u64, fence: Error) -> Error {
        if let Ok(true) = crate::meta::forgot_version(self.meta.as_ref(), TOPIC_RECORD, owned) {
            self.record_failed.store(true, Ordering::SeqCst);
            return Error::PreviousIo;
        }
        self.fenced(fence)
    }

    /// Counts the fence `e` (and logs the first one of this handle); returns it.
    fn fenced(&self, e: Error) -> Error {
        if let Error::Fenced { what } = &e {
            observe::fenced(&self.location, "topic", what, &self.fence_reported);
        }
        e
    }

    /// Appends one entry of `num_messages` messages; see `ManagedLedger::append_with`.
    pub(crate) fn append(
        &self,
        payload: &[u8],
        num_messages: u32,
        timestamp: u64,
    ) -> Result<Position> {
        if num_messages == 0 {
            return Err(Error::InvalidArgument {
                reason: "an entry carries at least one message (num_messages was 0)".into(),
            });
        }
        let log = self.log()?;
        let max = u64::from(log.max_entry_size());
        if payload.len() as u64 > max {
            return Err(Error::EntryTooLarge {
                size: payload.len() as u64,
                max,
            });
        }
        let mut w = self.writer();
        if w.current.is_some() && self.current_is_full(&w) {
            self.seal_current(&log, &mut w)?;
        }
        let ledger = match w.current {
            Some(id) => id,
            None => self.start_ledger(&log, &mut w)?,
        };
        let timestamp = timestamp.max(w.last_timestamp);
        let index = self.layouts().appended().next_index() + u64::from(num_messages) - 1;
        let meta = EntryMeta {
            index,
            num_messages,
            timestamp,
        };
        let entry_id = log.append(ledger, meta, payload)?;
        w.last_timestamp = timestamp;
        w.current_bytes += payload.len() as u64;
        let mut layouts = self.layout_mut();
        let layout = layouts.appended_mut();
        layout.set_next_index(index + 1);
        if let Some(span) = layout.spans_mut().last_mut() {
            if span.entries == 0 {
                span.first_timestamp = timestamp;
            }
            span.entries = entry_id + 1;
            span.last_timestamp = timestamp;
        }
        let position = Position::new(ledger, entry_id);
        let readable = layouts.appended_entry(position, index, timestamp);
        drop(layouts);
        if readable {
            self.wake_all();
        }
        Ok(position)
    }

    fn current_is_full(&self, w: &Writer) -> bool {
        let entries = self
            .layouts()
            .appended()
            .spans()
            .last()
            .map_or(0, |s| s.entries);
        entries >= self.config.max_entries_per_ledger
            || w.current_bytes >= self.config.max_ledger_bytes
    }

    /// Creates the next data ledger and records it (with no entries yet) before anything is
    /// appended to it, so an unrecorded ledger never holds a data entry.
    fn start_ledger(&self, log: &EntryLog, w: &mut Writer) -> Result<u64> {
        self.check_owner(w)?;
        let id = log.create_ledger()?;
        let first_index = self.layouts().appended().next_index();
        let mut record = w.record.clone();
        record.ledgers.push(LedgerRecord {
            id,
            entries: 0,
            first_index,
            first_timestamp: w.last_timestamp,
            last_timestamp: w.last_timestamp,
        });
        record.next_ledger_id = record.next_ledger_id.max(id + 1);
        self.commit(w, record)?;
        self.layout_mut()
            .appended_mut()
            .spans_mut()
            .push(LedgerSpan {
                id,
                entries: 0,
                first_index,
                first_timestamp: w.last_timestamp,
                last_timestamp: w.last_timestamp,
            });
        w.current = Some(id);
        w.current_bytes = 0;
        Ok(id)
    }

    /// Seals the current ledger and records its final summary.
    pub(crate) fn seal_current(&self, log: &EntryLog, w: &mut Writer) -> Result<()> {
        let Some(id) = w.current else { return Ok(()) };
        self.check_owner(w)?;
        log.seal(id)?;
        self.reveal_synced(log, id)?;
        let span = self.layouts().appended().span(id).copied();
        let mut record = w.record.clone();
        // The newest ledger stays in the tail whatever the chunks (`ChunkEntry::TAIL_KEEP`).
        let rec = record
            .ledgers
            .tail_mut()
            .iter_mut()
            .rev()
            .find(|l| l.id == id);
        if let (Some(span), Some(rec)) = (span, rec) {
            *rec = ledger_record(&span);
        }
        self.commit(w, record)?;
        w.current = None;
        w.current_bytes = 0;
        Ok(())
    }

    /// Makes every entry appended so far durable.
    pub(crate) fn sync(&self) -> Result<()> {
        let log = self.log()?;
        let Some(id) = self.writer().current else {
            return Ok(());
        };
        log.sync(id)?;
        // After the fsync, before `Ok`: a newer owner records this ledger at the count it read
        // after its claim, so entries synced after that claim are never read by anyone.
        self.check_version(self.owned_version.load(Ordering::SeqCst))?;
        self.reveal_synced(&log, id)
    }

    /// Makes readable the entries of `ledger` (and of the sealed ledgers before it) that a
    /// finished fsync covered, and wakes the waiting reads if any became readable.
    fn reveal_synced(&self, log: &EntryLog, ledger: u64) -> Result<()> {
        let synced = log.synced_entries(ledger)?;
        if self.layout_mut().reveal(ledger, synced) {
            self.wake_all();
        }
        Ok(())
    }

    /// Deletes the sealed data ledgers every cursor has acknowledged entirely; see
    /// `ManagedLedger::trim_consumed`.
    pub(crate) fn trim_consumed(&self) -> Result<Vec<u64>> {
        let log = self.log()?;
        let mut w = self.writer();
        let mut layouts = self.layout_mut();
        let layout = layouts.appended();
        let bound = self.consumed_bound(&w.record)?;
        // The last non-empty ledger stays: it carries the topic's last position, index and
        // timestamp.
        let keep_last = layout
            .spans()
            .iter()
            .rposition(|s| s.entries > 0)
            .unwrap_or(0);
        let consumed = layout
            .spans()
            .iter()
            .take(keep_last)
            .take_while(|s| bound.covers(s))
            .map(|s| s.id)
            .collect::<Vec<_>>();
        if consumed.is_empty() {
            return Ok(consumed);
        }
        let mut record = w.record.clone();
        // The consumed ledgers are the first the record lists (the record and the layout list
        // the same ledgers in id order): removing them from the front costs the chunks they
        // empty and the one they cut into. Were they not, each is removed where it is.
        let front = (record.ledgers.iter().zip(&consumed))
            .take_while(|(l, id)| l.id == **id)
            .count();
        if front == consumed.len() {
            record.ledgers.remove_first(front);
        } else {
            record.ledgers.retain(|l| !consumed.contains(&l.id));
        }
        self.commit(&mut w, record)?;
        layouts.trim(&consumed);
        drop(layouts);
        drop(w);
        // The record no longer lists them; a file left behind by a crash here is deleted by
        // the next open.
        for &id in &consumed {
            log.delete_ledger(id)?;
        }
        Ok(consumed)
    }

    /// What every cursor, open or not, has acknowledged.
    fn consumed_bound(&self, record: &TopicRecord) -> Result<Consumed> {
        let open = self.cursors();
        let mut bound = Consumed::All;
        for entry in record.cursors.iter() {
            // A closed cursor persisted through the journal: the journal holds its state (its
            // record only the state it was created with).
            let journaled = (!open.contains_key(&*entry.name))
                .then(|| self.journal.as_ref()?.committed_state(entry.id))
                .flatten();
            let mark = match open.get(&*entry.name) {
                Some(c) => c.published_mark(),
                None if journaled.is_some() => journaled
                    .map(|s| s.mark_delete)
                    .filter(|m| *m != NO_MARK_DELETE),
                None => match self.meta.get(&cursor::record_name(entry.id))? {
                    Some((_, bytes)) => {
                        let cursor = CursorRecord::decode(&bytes)
                            .map_err(|c| c.in_record(cursor::record_name(entry.id)))?;
                        cursor.check_identity(entry.id, &entry.name, record.topic_id)?;
                        let m = cursor.mark_delete;
                        (m != NO_MARK_DELETE).then_some(m)
                    }
                    None => None,
                },
            };
            bound = match (bound, mark) {
                (_, None) | (Consumed::Nothing, _) => Consumed::Nothing,
                (Consumed::All, Some(m)) => Consumed::UpTo(m),
                (Consumed::UpTo(b), Some(m)) => Consumed::UpTo(b.min(m)),
            };
        }
        Ok(bound)
    }

    /// Closes every open cursor, seals the current ledger and releases the entry log (and with
    /// it the directory lock, once no operation is in flight).
    pub(crate) fn close(&self) -> Result<()> {
        let Ok(log) = self.log() else {
            return if self.close_failed.load(Ordering::SeqCst) {
                Err(Error::Closed)
            } else {
                Ok(())
            };
        };
        self.writer_and_closing();
        let open: Vec<_> = self.cursors().values().cloned().collect();
        let readers: Vec<_> = self.readers().drain().map(|(_, r)| r).collect();
        for reader in readers.iter().filter_map(Weak::upgrade) {
            // A non-durable cursor persists nothing: its close cannot fail.
            let _ = reader.close();
        }
        let mut first_error = None;
        for c in open {
            if let Err(e) = c.close() {
                first_error.get_or_insert(e);
            }
        }
        {
            let mut w = self.writer();
            let has_entries = self
                .layouts()
                .appended()
                .spans()
                .last()
                .is_some_and(|s| Some(s.id) == w.current && s.entries > 0);
            if has_entries && let Err(e) = self.seal_current(&log, &mut w) {
                first_error.get_or_insert(e);
            }
        }
        if first_error.is_none()
            && let Err(e) = self.record_journal_close()
        {
            first_error = Some(e);
        }
        if first_error.is_some() {
            self.close_failed.store(true, Ordering::SeqCst);
        }
        *self.log.write().unwrap_or_else(PoisonError::into_inner) = None;
        self.wake_all();
        first_error.map_or(Ok(()), Err)
    }
}

/// The entries every cursor has acknowledged.
#[derive(Debug, Clone, Copy)]
enum Consumed {
    /// There is no cursor: everything counts as consumed.
    All,
    /// Every entry at or before this position.
    UpTo(Position),
    /// Some cursor has acknowledged no retained entry.
    Nothing,
}

impl Consumed {
    /// Whether every entry of `span` is consumed.
    fn covers(self, span: &LedgerSpan) -> bool {
        match self {
            Self::All => true,
            Self::Nothing => false,
            Self::UpTo(m) => span
                .last_entry()
                .map_or(span.id <= m.ledger_id, |last| last <= m),
        }
    }
}

/// The record of a ledger summarised by `span`.
pub(crate) fn ledger_record(span: &LedgerSpan) -> LedgerRecord {
    LedgerRecord {
        id: span.id,
        entries: span.entries,
        first_index: span.first_index,
        first_timestamp: span.first_timestamp,
        last_timestamp: span.last_timestamp,
    }
}

impl TopicAccess for TopicCore {
    fn log(&self) -> Result<Arc<EntryLog>> {
        self.log
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or(Error::Closed)
    }

    fn layout(&self) -> ReadableLayout<'_> {
        ReadableLayout::new(self.layouts())
    }

    fn check_owner(&self) -> Result<()> {
        self.check_version(self.owned_version.load(Ordering::SeqCst))
    }

    fn wait_for_change(&self, seen: u64, deadline: Option<Instant>) -> u64 {
        *self
            .wakes
            .lock()
            .wait_until(deadline, |&count| count != seen)
            .0
    }

    fn changes_seen(&self) -> u64 {
        *self.wakes.lock()
    }

    fn wake_readers(&self) {
        self.wake_all();
    }

    fn release(&self, cursor: &CursorShared) {
        if cursor.is_durable() {
            let mut open = self.cursors();
            if open
                .get(cursor.name())
                .is_some_and(|c| std::ptr::eq(c.as_ref(), cursor))
            {
                open.remove(cursor.name());
            }
        } else {
            let mut readers = self.readers();
            if readers
                .get(&cursor.id())
                .is_some_and(|r| std::ptr::eq(r.as_ptr(), cursor))
            {
                readers.remove(&cursor.id());
            }
        }
        // A read of this cursor waiting for an append wakes and finds it closed; reads of
        // other cursors wake and wait on for what is left of their timeout.
        self.wake_all();
    }
}

//! Flushing a cursor's ack state to its cursor ledger.
//!
//! Owns: the cursor ledger of one cursor (created on the first flush), what a flush writes
//! there, and rollover to a new cursor ledger. The cursor record, which points to the ledger,
//! is written only through the persister's `RecordOwner` (`record.rs`: compare-and-set, owner
//! check, fence, failure latch).
//!
//! - [`PersistMode::MultiEntry`] (default): each dirty partition is written, a small one inline
//!   in its row of the compact partition table, a larger one as its own entry; the table's
//!   changed index pages follow, then a compact marker (mark-delete, epoch, properties, and the
//!   table: its rows, or references to its pages, each with its CRC) is appended, then the
//!   ledger is synced (`persist/multi.rs`). The marker is the commit point, and only references
//!   entries of its own ledger written before it. Only then are the written partitions marked
//!   clean.
//! - Batch-index acks (`persist/batch.rs`): a partition whose partial entries changed gets a
//!   batch-index entry before the marker, which lists every partition's in its batch table
//!   (inline, or through batch pages when it has more than 16 rows); a snapshot carries them
//!   inline.
//! - [`PersistMode::SingleEntry`]: one snapshot entry holds every range. Over
//!   `max_ranges_single_entry` or the entry size the flush is loud: an error with nothing
//!   written ([`super::OverflowPolicy::Error`]), or a logged warning plus a counter in
//!   [`PersistStats`] ([`super::OverflowPolicy::Warn`]); never a silent cut.
//! - Rollover (after `cursor_ledger_max_entries` entries or `cursor_ledger_max_bytes` bytes, or
//!   when asked): a new ledger receives every live partition (dirty ones from memory, the others
//!   copied from the old ledger after a CRC check), then the marker (or snapshot), then a sync;
//!   the record is switched to it by compare-and-set; only then is the old ledger deleted.
//!
//! Must never: reference an entry of another ledger or a later entry from a marker; delete a
//! ledger the record may still point to; write the record except by compare-and-set.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::ackset::{PartitionKey, PartitionStore, RangeSetWrapper};
use crate::cursor::batch::BatchAcks;
use crate::error::{Error, Result};
pub use crate::format::cursor::PersistedState;
use crate::format::cursor::{
    BATCH_ROW_LEN, BatchRow, EntryKind, PageRef, ROW_LEN, TableRef, batch_page_len,
    encode_batch_page, index_page_len, marker_len, payload_crc,
};
use crate::format::meta::{CursorIdentity, CursorRecord};
use crate::log::EntryLog;
use crate::meta::MetaStore;
use crate::observe::{self, CursorLabels};

use super::batch_store::{BATCH_INLINE_ROWS, BatchTable};
use super::config::CursorConfig;
use super::config::PersistMode;
use super::record::Fence;
use super::record::{RecordOwner, VersionedRecord};
use super::snapshot::{apply_overflow, build_snapshot};
pub use super::stats::PersistStats;
use super::store::{
    CursorLedgerStore, EntryCache, Location, Shared, SharedState, append_entry, ensure_ledger,
    read_stored, stored_as_payload, write_partition_payload,
};
use super::table::CommittedTable;

mod batch;
mod multi;

/// Flushes between refreshes of the cursor record's fallback mark-delete.
pub const DEFAULT_RECORD_REFRESH_FLUSHES: u64 = 64;

/// Tries of a write while a deferred claim is pending (see `CursorPersister::defer_claim`): a
/// former owner's record write still in flight refuses at most one per former handle.
const CLAIM_ATTEMPTS: u32 = 4;

/// What one flush wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushStats {
    /// Entries appended to the cursor ledger (partitions, pages, marker or snapshot).
    pub entries: u64,
    /// Payload bytes appended.
    pub bytes: u64,
    /// Partitions whose changed contents were written: inline in an index page or the marker,
    /// or in a partition entry of their own.
    pub partitions: u64,
    /// Index pages appended.
    pub pages: u64,
    /// Size of the marker or snapshot.
    pub commit_bytes: u64,
    /// Whether the flush rolled over to a new cursor ledger.
    pub rolled_over: bool,
    /// Ranges written to a snapshot.
    pub snapshot_ranges: u64,
    /// Ranges a single-entry snapshot left out (only with [`super::OverflowPolicy::Warn`]).
    pub ranges_cut: u64,
    /// Batch-index entries appended (partitions whose partial entries changed).
    pub batch_entries: u64,
}

/// How the last committed marker lists the partitions (for `inspect`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableShape {
    /// Partitions carried inline by the marker's rows or its index pages.
    pub inline: u64,
    /// Partitions in entries of their own.
    pub separate: u64,
    /// Index pages the marker lists (0: the table is inline in the marker, or the marker is of
    /// an earlier kind).
    pub pages: u64,
}

/// Writes one cursor's ack state to its cursor ledger and keeps its record pointing there.
///
/// Obtain one from [`super::recover::recover`], which also hands out the cursor's
/// `RangeSetWrapper`, whose partition store is this cursor's ledger. Not shared between threads: the owner serializes
/// acks and flushes (`&mut` on both).
#[derive(Debug)]
pub struct CursorPersister {
    log: Arc<EntryLog>,
    config: CursorConfig,
    shared: SharedState,
    /// The cursor record, its compare-and-set version, fence and failure latch.
    record: RecordOwner,
    committed: CommittedTable,
    /// The batch-index entries the last marker references.
    batch_table: BatchTable,
    /// The batch pages holding that batch table (empty when it was inline, or not known since
    /// a recovery: the next flush that pages it writes them afresh).
    batch_pages: Vec<PageRef>,
    /// The batch-index entries of cold partitions a single-entry rollover copied to the new
    /// cursor ledger, for the flush to hand to the cursor's partial entries.
    moved_batch: BatchTable,
    stats: PersistStats,
    pending_deletes: Vec<u64>,
    rollover_requested: bool,
    /// The last flush committed a marker (the multi-entry form), not a snapshot.
    wrote_marker: bool,
    record_refresh_flushes: u64,
    /// The labels of this cursor's metrics.
    labels: CursorLabels,
    /// Set once a fence has been logged (later refusals are only counted).
    fence_reported: AtomicBool,
    /// `AckSetStats::store_failures` as last published.
    published_store_failures: u64,
}

/// Where a cursor's persistence reads and writes, and with which settings.
#[derive(Debug, Clone)]
pub(crate) struct Handles {
    pub log: Arc<EntryLog>,
    pub meta: Arc<dyn MetaStore>,
    /// The cursor record in `meta` (`cursor-{id}`).
    pub record_name: String,
    pub config: CursorConfig,
}

/// Parts a recovery hands to [`CursorPersister::assemble`].
pub(crate) struct Assembly {
    pub record: Option<VersionedRecord>,
    pub shared: Shared,
    pub committed: CommittedTable,
    pub persisted_bytes: u64,
    /// The batch-index entries of the recovered marker.
    pub batch_table: BatchTable,
}

impl CursorPersister {
    pub(crate) fn assemble(handles: Handles, parts: Assembly) -> Self {
        let Handles {
            log,
            meta,
            record_name,
            config,
        } = handles;
        let labels = CursorLabels::new(log.storage().location(), &record_name);
        let stats = PersistStats {
            cursor_ledger: parts.shared.ledger,
            persisted_bytes: parts.persisted_bytes,
            ..PersistStats::default()
        };
        Self {
            log,
            config,
            shared: SharedState::new(parts.shared),
            record: RecordOwner::new(meta, record_name, parts.record),
            committed: parts.committed,
            batch_table: parts.batch_table,
            batch_pages: Vec::new(),
            moved_batch: BatchTable::new(),
            stats,
            pending_deletes: Vec::new(),
            rollover_requested: false,
            wrote_marker: false,
            record_refresh_flushes: DEFAULT_RECORD_REFRESH_FLUSHES,
            labels,
            fence_reported: AtomicBool::new(false),
            published_store_failures: 0,
        }
    }

    /// The labels of this cursor's metrics.
    pub(crate) fn labels(&self) -> &CursorLabels {
        &self.labels
    }

    /// Counts (and, the first time, logs) `result` when it is [`Error::Fenced`].
    fn observe_fence<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(Error::Fenced { what }) = &result {
            observe::fenced(&self.labels.topic, "cursor", what, &self.fence_reported);
        }
        result
    }

    /// Publishes what a successful flush changed, from the same figures as [`PersistStats`]
    /// and [`AckSetStats`](crate::ackset::AckSetStats).
    fn publish_flush(&mut self, flush: &FlushStats, acks: &RangeSetWrapper) {
        let l = &self.labels;
        l.count(observe::FLUSHES, 1);
        l.count(observe::FLUSH_BYTES, flush.bytes);
        let a = acks.stats();
        l.set(observe::RESIDENT_BYTES, a.resident_bytes);
        l.set(observe::BUDGET_BYTES, a.budget_bytes);
        l.set(observe::PINNED_PARTITIONS, a.pinned_partitions);
        // The wrapper's counter only grows: publish what it gained since the last flush.
        l.count(
            observe::STORE_FAILURES,
            a.store_failures
                .saturating_sub(self.published_store_failures),
        );
        self.published_store_failures = a.store_failures;
    }

    /// A partition store over this cursor's ledger, for a `RangeSetWrapper` of this cursor.
    ///
    /// The wrapper handed out by recovery already has one;
    /// a second wrapper over the same cursor would see the same locations.
    #[must_use]
    pub fn partition_store(&self) -> Box<dyn PartitionStore> {
        Box::new(CursorLedgerStore::new(
            Arc::clone(&self.log),
            self.shared.clone(),
        ))
    }

    /// Where the cursor's partial entries are evicted to: this cursor's ledger.
    pub(crate) fn batch_store(&self) -> Box<dyn super::batch_store::BatchStore> {
        Box::new(super::batch_store::CursorBatchStore::new(
            Arc::clone(&self.log),
            self.shared.clone(),
        ))
    }

    /// The settings this cursor persists with.
    #[must_use]
    pub fn config(&self) -> &CursorConfig {
        &self.config
    }

    /// Switches between single- and multi-entry mode for the following flushes.
    pub fn set_mode(&mut self, mode: PersistMode) {
        self.config.persist_mode = mode;
    }

    /// The current cursor ledger, if one has been created.
    #[must_use]
    pub fn cursor_ledger(&self) -> Option<u64> {
        self.shared.lock().ledger
    }

    /// The cursor record as this persister last read or wrote it, with its version. Every
    /// write of the record must go through this persister ([`CursorPersister::update_record`]),
    /// or its next compare-and-set fails with [`Error::Fenced`].
    #[must_use]
    pub fn record(&self) -> Option<(u64, &CursorRecord)> {
        self.record.current()
    }

    /// Every `flushes` flushes, a flush also refreshes the cursor record's fallback mark-delete
    /// (one metadata write) when it changed; 0: only when the cursor ledger changes. Default
    /// [`DEFAULT_RECORD_REFRESH_FLUSHES`].
    pub fn set_record_refresh_flushes(&mut self, flushes: u64) {
        self.record_refresh_flushes = flushes;
    }

    /// Sets the ownership check a flush runs once its writes are durable, before it returns
    /// `Ok` or deletes a ledger it replaced. A new owner claims the topic before it reads any
    /// cursor state, so a flush whose check passes after its sync was read by every later
    /// owner or happened before it read; a flush whose check fails returns [`Error::Fenced`]
    /// (its state may or may not be seen) and keeps every ledger.
    pub fn set_fence(&mut self, fence: Fence) {
        self.record.set_fence(fence);
    }

    /// Sets the identity every record this persister writes carries (cursor id and topic id),
    /// so a record found under another cursor's name or in another topic is refused.
    pub fn set_identity(&mut self, identity: CursorIdentity) {
        self.record.set_identity(identity);
    }

    /// Makes the next flush roll over to a new cursor ledger whatever the old one's size.
    pub fn request_rollover(&mut self) {
        self.rollover_requested = true;
    }

    /// Defers this handle's claim of the cursor to its first write: the recovered cursor
    /// ledger may still be appended to by a former owner that lost the topic without knowing
    /// it, so this handle only reads it. Nothing is appended to it (evictions store nothing:
    /// hold the ack set's stores too), and the next flush (or seek) writes the whole state to
    /// a fresh cursor ledger and switches the record to it by compare-and-set: the claim. A
    /// record write of a former owner that lands after this handle read the record (at most
    /// one in flight per former handle) does not fence this handle while the fence shows the
    /// topic is still its own: the record's current version is adopted and the write tried
    /// again (the former owner's write returned [`Error::Fenced`] to it, so nothing it was
    /// promised is lost).
    pub(crate) fn defer_claim(&mut self) {
        self.rollover_requested = true;
        self.shared.lock().claim_pending = true;
    }

    /// After the topic was lost with the claim still deferred: evictions may append to the
    /// recovered ledger again, as a handle that had claimed appends to its own. Safe only once
    /// the fence failed: every later flush of this handle is refused before it writes (the
    /// topic's and the record's checks), so no marker of it follows those partitions, and what
    /// they append lies past everything a newer owner read there.
    pub(crate) fn release_claim_after_fence(&mut self) {
        self.shared.lock().claim_pending = false;
    }

    /// Whether this handle's claim is still deferred (see [`CursorPersister::defer_claim`]).
    #[must_use]
    pub fn claim_pending(&self) -> bool {
        self.shared.lock().claim_pending
    }

    /// Runs `write`; while the claim is pending, a refusal by compare-and-set is settled as
    /// [`CursorPersister::defer_claim`] says, up to [`CLAIM_ATTEMPTS`] tries in all.
    fn claiming<T>(&mut self, mut write: impl FnMut(&mut Self) -> Result<T>) -> Result<T> {
        let mut attempts = 1;
        loop {
            match write(self) {
                Err(Error::Fenced { .. })
                    if attempts < CLAIM_ATTEMPTS
                        && self.claim_pending()
                        && !self.record.is_latched() =>
                {
                    attempts += 1;
                    self.record.check_fence()?;
                    self.record.adopt_current()?;
                }
                written => return written,
            }
        }
    }

    /// How the last committed marker lists the partitions (all zero after a snapshot, or
    /// before any marker).
    #[must_use]
    pub fn table_shape(&self) -> TableShape {
        let inline = self
            .committed
            .rows
            .iter()
            .filter(|r| r.location.inline_at.is_some())
            .count() as u64;
        TableShape {
            inline,
            separate: self.committed.rows.len() as u64 - inline,
            pages: self.committed.pages.len() as u64,
        }
    }

    /// Counters since this handle opened.
    #[must_use]
    pub fn stats(&self) -> PersistStats {
        let s = self.shared.lock();
        PersistStats {
            cursor_ledger: s.ledger,
            entries_written: s.entries_written,
            bytes_written: s.bytes_written,
            evictions_stored: s.evictions_stored,
            pending_deletes: self.pending_deletes.len() as u64,
            ..self.stats
        }
    }

    fn max_entry_size(&self) -> usize {
        self.config.max_entry_size.min(self.log.max_entry_size()) as usize
    }

    /// Rows an index page holds, which is also the most rows a marker holds inline (a page must
    /// fit in one entry).
    fn rows_per_page(&self) -> usize {
        let fit = (self.max_entry_size().saturating_sub(index_page_len(0))) / ROW_LEN;
        self.config.index_page_rows.min(fit).max(2)
    }

    /// Bytes the encoded properties may take so that every later marker or snapshot fits in one
    /// entry: the largest entry less a marker's fixed part and its largest inline table.
    /// The batch table is counted at its largest inline size, [`BATCH_INLINE_ROWS`] rows,
    /// which is also the room of that many batch-page references.
    pub(crate) fn property_room(&self) -> usize {
        let fixed = marker_len(&PersistedState::default(), TableRef::Inline(&[]));
        let batch = 4 + BATCH_INLINE_ROWS * BATCH_ROW_LEN;
        self.max_entry_size()
            .saturating_sub(fixed + self.rows_per_page() * ROW_LEN + batch)
    }

    /// Rows a batch page holds (a page must fit in one entry).
    fn batch_rows_per_page(&self) -> usize {
        let fit = (self.max_entry_size().saturating_sub(batch_page_len(0))) / BATCH_ROW_LEN;
        self.config.index_page_rows.min(fit).max(2)
    }

    /// Persists `state` and every ack in `acks`, durably: when this returns `Ok`, a power cut
    /// at any later moment recovers at least these acks and this mark-delete (invariant 2).
    ///
    /// Costs what changed in multi-entry mode: the dirty partitions, the index pages whose rows
    /// changed, and the marker. Creates the cursor ledger on the first flush and rolls over when
    /// it is full. After an error the cursor ledger keeps its last committed state, and after
    /// an I/O error (or a failed eviction write) the next flush rolls over to a fresh ledger, as
    /// the entry log refuses further writes to the failed one; after an error whose outcome on
    /// the record is unknown, every later flush fails with [`Error::PreviousIo`] until the
    /// cursor is reopened. On success, evictions may store again
    /// ([`RangeSetWrapper::resume_stores`]).
    ///
    /// # Errors
    /// [`Error::Fenced`], with nothing written, once another owner has written the cursor
    /// record (see [`CursorPersister::check_owner`]); every later flush fails the same way.
    /// [`Error::Fenced`] also when the fence (see [`CursorPersister::set_fence`]) fails after
    /// the writes: then the state is durable but a newer owner may not have seen it.
    ///
    /// This persists no batch-index state: a cursor with partial entries flushes with
    /// `flush_with_batch`.
    pub fn flush(
        &mut self,
        state: &PersistedState,
        acks: &mut RangeSetWrapper,
    ) -> Result<FlushStats> {
        self.flush_with_batch(state, acks, &mut BatchAcks::default())
    }

    /// As [`CursorPersister::flush`], persisting `batch` too: the partitions whose partial
    /// entries changed get a new batch-index entry, the marker (or snapshot) holds them all.
    /// On success `batch` is marked clean.
    pub(crate) fn flush_with_batch(
        &mut self,
        state: &PersistedState,
        acks: &mut RangeSetWrapper,
        batch: &mut BatchAcks,
    ) -> Result<FlushStats> {
        let ledger_before = self.cursor_ledger();
        let flushed = self.claiming(|this| this.flush_inner(state, acks, batch));
        let moved_batch = std::mem::take(&mut self.moved_batch);
        if flushed.is_ok() {
            let moved = self.cursor_ledger() != ledger_before;
            if self.wrote_marker {
                batch.mark_committed(&self.batch_table, moved);
            } else {
                batch.mark_committed(&moved_batch, moved);
            }
        }
        self.observe_fence(flushed)
    }

    fn flush_inner(
        &mut self,
        state: &PersistedState,
        acks: &mut RangeSetWrapper,
        batch: &mut BatchAcks,
    ) -> Result<FlushStats> {
        self.record.check_latch()?;
        state.validate()?;
        self.check_owner()?;
        let before = self.stats();
        let rollover = self.rollover_due()?;
        self.wrote_marker = self.config.persist_mode == PersistMode::MultiEntry;
        let written = match self.config.persist_mode {
            PersistMode::MultiEntry => self.flush_multi(state, acks, batch, rollover),
            PersistMode::SingleEntry => match self.flush_single(state, acks, batch, rollover) {
                // A deferred claim whose snapshot no longer fits is made in the multi-entry
                // form, which keeps every range (either mode opens the other's state): the
                // cursor then stores its evictions in a ledger of its own, as a cursor this
                // owner created does, and its next single-entry flush reports the limit.
                Err(Error::LimitExceeded { .. }) if self.claim_pending() => {
                    self.wrote_marker = true;
                    self.flush_multi(state, acks, batch, rollover)
                }
                written => written,
            },
        };
        let mut flush = match written {
            Ok(flush) => flush,
            Err(e) => {
                if matches!(e, Error::Io { .. } | Error::PreviousIo) {
                    // The entry log latches a ledger after a failed write or fsync and never
                    // retries one: a retry writes the whole state to a fresh ledger instead.
                    self.shared.lock().ledger_failed = true;
                }
                return Err(e);
            }
        };
        let after = self.stats();
        flush.entries = after.entries_written - before.entries_written;
        flush.bytes = after.bytes_written - before.bytes_written;
        flush.rolled_over = rollover;
        self.rollover_requested &= !rollover;
        self.stats.flushes += 1;
        self.stats.rollovers += u64::from(rollover);
        self.stats.partitions_written += flush.partitions;
        self.stats.pages_written += flush.pages;
        self.stats.last_flush_bytes = flush.bytes;
        self.publish_flush(&flush, acks);
        // The state is in a ledger of this handle's own (a fresh one, or the first it created):
        // the claim, if deferred, is made.
        self.shared.lock().claim_pending = false;
        // Partitions an eviction could not store (pinned past the budget) are written now, or
        // their current copy is: evictions may store again.
        acks.resume_stores();
        self.refresh_record(state)?;
        // After the sync, before `Ok` and before a replaced ledger goes: a newer owner may be
        // reading it.
        self.record.check_fence()?;
        self.retry_deletes();
        Ok(flush)
    }

    /// Keeps the record's fallback mark-delete (used only when the cursor ledger is lost)
    /// within [`CursorPersister::set_record_refresh_flushes`] flushes of the committed one.
    fn refresh_record(&mut self, state: &PersistedState) -> Result<()> {
        let every = self.record_refresh_flushes;
        let behind = self
            .record
            .current()
            .is_some_and(|(_, r)| r.mark_delete != state.mark_delete);
        if every == 0 || !self.stats.flushes.is_multiple_of(every) || !behind {
            return Ok(());
        }
        self.record.put(self.record.ledger(), state)
    }

    /// Fails with [`Error::Fenced`] when the cursor record is no longer at the version this
    /// persister last wrote or read: a newer owner of the topic has claimed the cursor (it
    /// writes the record when it opens the cursor), so this handle must not write any more.
    /// Costs one metadata read. A newer owner never reads this handle's cursor ledger (it
    /// switched the record to a ledger of its own), so even a write racing with the check
    /// stays invisible to it.
    pub fn check_owner(&self) -> Result<()> {
        self.observe_fence(self.record.check_owner())
    }

    fn rollover_due(&self) -> Result<bool> {
        let Some(ledger) = self.cursor_ledger() else {
            return Ok(false);
        };
        if self.rollover_requested || self.shared.lock().refuses_stores() {
            return Ok(true);
        }
        let info = self.log.ledger_info(ledger)?;
        // A ledger opened damaged refuses appends: the state recovered from before the damage
        // moves to a new ledger.
        Ok(info.damaged.is_some()
            || info.entries >= self.config.cursor_ledger_max_entries
            || info.bytes >= self.config.cursor_ledger_max_bytes)
    }

    /// The ledger a flush writes to: a new one for a rollover, else the current one.
    fn target(&self, rollover: bool) -> Result<u64> {
        if rollover {
            self.log.create_ledger()
        } else {
            ensure_ledger(&self.log, &self.shared)
        }
    }

    /// Runs `write` against `target`; a rollover ledger is deleted again if the write failed
    /// before the record could have been switched to it.
    fn with_target<T>(
        &mut self,
        rollover: bool,
        write: impl FnOnce(&mut Self, u64) -> Result<T>,
    ) -> Result<T> {
        let target = self.target(rollover)?;
        let result = write(self, target);
        // A refused compare-and-set may still have been current for a moment (another owner's
        // write built on it), so after `Fenced` the ledger stays; the next open removes it if
        // no record names it.
        let fenced = matches!(result, Err(Error::Fenced { .. }));
        if result.is_err() && rollover && !self.record.is_latched() && !fenced {
            // Best effort: the record never pointed to it, so it is only garbage.
            let _ = self.log.delete_ledger(target);
        }
        result
    }

    fn flush_multi(
        &mut self,
        state: &PersistedState,
        acks: &mut RangeSetWrapper,
        batch: &BatchAcks,
        rollover: bool,
    ) -> Result<FlushStats> {
        let unchanged = !rollover
            && self.committed.state.as_ref() == Some(state)
            && acks.dirty_keys().is_empty()
            && acks.partitions().len() == self.committed.rows.len()
            && self.batch_unchanged(batch);
        if unchanged {
            // The last marker already says all of this: nothing to write or sync.
            return Ok(FlushStats::default());
        }
        self.with_target(rollover, |this, target| {
            this.write_multi(state, acks, batch, target, rollover)
        })
    }

    /// Copies the partition stored at `location` of the old ledger to `target` as a partition
    /// entry of its own, checked on the way (an entry byte for byte, an inline partition in the
    /// entry its record makes).
    fn copy_partition(
        &self,
        old: Option<u64>,
        target: u64,
        key: PartitionKey,
        location: &Location,
    ) -> Result<Location> {
        let old = old.ok_or(Error::NoSuchLedger(target))?;
        let stored = read_stored(&self.log, old, key, location, &mut EntryCache::default())?;
        let payload = stored_as_payload(key, stored, location.cardinality);
        write_partition_payload(
            &self.log,
            &self.shared,
            target,
            &payload,
            location.cardinality,
        )
    }

    /// Writes the batch pages a marker over `table` (rows `rows`) needs: none while the batch
    /// table fits inline ([`BATCH_INLINE_ROWS`] rows), the committed pages again when the
    /// table is unchanged and the ledger the same, otherwise every page afresh, each as full
    /// as an entry allows. Returns the marker's page references.
    fn write_batch_pages(
        &self,
        table: &BatchTable,
        rows: &[BatchRow],
        target: u64,
        rollover: bool,
        flush: &mut FlushStats,
    ) -> Result<Vec<PageRef>> {
        if rows.len() <= BATCH_INLINE_ROWS {
            return Ok(Vec::new());
        }
        if !rollover && !self.batch_pages.is_empty() && *table == self.batch_table {
            return Ok(self.batch_pages.clone());
        }
        let mut pages = Vec::new();
        for page_rows in rows.chunks(self.batch_rows_per_page()) {
            let payload = encode_batch_page(page_rows)?;
            let entry_id = append_entry(
                &self.log,
                &self.shared,
                target,
                EntryKind::BatchPage,
                &payload,
            )?;
            flush.pages += 1;
            pages.push(PageRef {
                first: page_rows.first().map_or((0, 0), BatchRow::key),
                entry_id,
                crc: payload_crc(&payload),
                rows: u32::try_from(page_rows.len()).unwrap_or(u32::MAX),
            });
        }
        Ok(pages)
    }

    fn flush_single(
        &mut self,
        state: &PersistedState,
        acks: &mut RangeSetWrapper,
        batch: &mut BatchAcks,
        rollover: bool,
    ) -> Result<FlushStats> {
        // Built first: loading cold partitions may evict and store others in the old ledger.
        // Cold partial entries are read for the snapshot without becoming resident.
        let partitions = batch.partitions()?;
        let snapshot = build_snapshot(
            state,
            acks,
            &partitions,
            self.max_entry_size(),
            self.config.max_ranges_single_entry,
        )?;
        let max_bytes = self.max_entry_size();
        apply_overflow(
            &snapshot,
            (&self.config, max_bytes),
            &self.labels,
            &mut self.stats,
        )?;
        let live = acks.partitions();
        self.with_target(rollover, |this, target| {
            let old = this.cursor_ledger();
            let mut fresh_locations = BTreeMap::new();
            if rollover {
                // Partitions the store holds must move with the cursor. (A resident partition
                // whose copy is stale is stored again before the wrapper drops it.)
                for (key, _) in &live {
                    let existing = this.shared.lock().locations.get(key).copied();
                    if let Some(l) = existing {
                        fresh_locations.insert(*key, this.copy_partition(old, target, *key, &l)?);
                    }
                }
            }
            // The cold partial entries' copies move too (their entries are in the snapshot,
            // but they stay cold in memory).
            let moved_batch = if rollover {
                this.copy_cold_batch(batch, target)?
            } else {
                BatchTable::new()
            };
            let fresh = rollover.then_some(fresh_locations);
            this.commit(target, EntryKind::Snapshot, &snapshot.payload, state, fresh)?;
            this.moved_batch = moved_batch;
            this.stats.snapshots += 1;
            this.stats.persisted_bytes = snapshot.payload.len() as u64;
            this.committed = CommittedTable::default();
            this.batch_table = BatchTable::new();
            this.batch_pages = Vec::new();
            Ok(FlushStats {
                commit_bytes: snapshot.payload.len() as u64,
                snapshot_ranges: snapshot.ranges,
                ranges_cut: snapshot.cut,
                ..FlushStats::default()
            })
        })
    }

    /// Appends the commit entry (marker or snapshot) to `target`, syncs it, points the record at
    /// `target`, and, after a rollover, makes `target` with `fresh` locations current; returns
    /// the commit entry's id.
    fn commit(
        &mut self,
        target: u64,
        kind: EntryKind,
        payload: &[u8],
        state: &PersistedState,
        fresh: Option<BTreeMap<PartitionKey, Location>>,
    ) -> Result<u64> {
        let entry_id = append_entry(&self.log, &self.shared, target, kind, payload)?;
        self.log.sync(target)?;
        if let Some(replaced) = self.record.switch(target, state)? {
            self.pending_deletes.push(replaced);
        }
        if let Some(locations) = fresh {
            let mut s = self.shared.lock();
            let old = s.ledger.replace(target);
            s.locations = locations;
            s.ledger_failed = false;
            drop(s);
            // The ledger rolled away from: the record's previous one (queued by the switch) or
            // one the record never named (created by an eviction or a first flush that failed).
            if let Some(old) = old.filter(|o| *o != target && !self.pending_deletes.contains(o)) {
                self.pending_deletes.push(old);
            }
        }
        Ok(entry_id)
    }

    /// Writes the record's fallback state (mark-delete, epoch, properties) by compare-and-set,
    /// keeping its cursor ledger. The fallback serves when the cursor ledger is lost; call it
    /// on close so that fallback is fresh. Writes nothing when the record already holds `state`.
    pub fn update_record(&mut self, state: &PersistedState) -> Result<()> {
        self.claiming(|this| this.record.update(state))
    }

    fn retry_deletes(&mut self) {
        let log = &self.log;
        self.pending_deletes
            .retain(|&ledger| match log.delete_ledger(ledger) {
                Ok(()) | Err(Error::NoSuchLedger(_)) => false,
                Err(_) => true,
            });
    }

    /// This persister's record (with its version, fence and identity) and every cursor ledger
    /// it knows (the record's, one an eviction or a failed flush created, and those queued for
    /// deletion), for their retirement once the cursor moved into the journal
    /// (`cursor::import`).
    pub(crate) fn into_retirement(mut self) -> super::import::Retirement {
        let mut ledgers = std::mem::take(&mut self.pending_deletes);
        ledgers.extend(self.cursor_ledger());
        ledgers.extend(self.record.ledger());
        ledgers.sort_unstable();
        ledgers.dedup();
        super::import::Retirement::new(self.record, self.log, ledgers)
    }

    /// Deletes this cursor's ledgers (for a deleted cursor). Delete the cursor record first: a
    /// crash in between leaves an unreferenced ledger, never a record pointing nowhere useful.
    pub fn delete_ledgers(mut self) -> Result<()> {
        if let Some(ledger) = self.cursor_ledger() {
            self.pending_deletes.push(ledger);
        }
        for ledger in std::mem::take(&mut self.pending_deletes) {
            match self.log.delete_ledger(ledger) {
                Ok(()) | Err(Error::NoSuchLedger(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

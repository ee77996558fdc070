//! Persisting a cursor of a store's topic through the store's shared cursor journal.
//!
//! Owns: what one cursor stages into a journal tick (its changed partitions, its changed
//! partial entries and its state), its recovery from the journal's index, its removal from the
//! journal, and [`JournalBatches`], the [`BatchStore`] that evicts a cursor's partial entries
//! to the journal as batch records and loads them back verified. The journal itself
//! (segments, group commit, index, rollover, ownership) is `crate::journal`; it knows
//! cursors only by id, so this layer uses it as it uses the entry log.
//!
//! A flush of a journal cursor is two steps with different locks (see `docs/persistence.md`,
//! "Cursors of a store"):
//! 1. *stage*, under the cursor's lock: the partitions whose journal copy is not current are
//!    appended (not synced) and the state is kept for the tick's marker; the staged partitions
//!    are marked persisted, so the cursor's acks go on at once;
//! 2. *commit*, without the cursor's lock: the tick appends every staged marker and syncs once.
//!    The flush is durable when the commit returns `Ok`. A tick that ends without committing
//!    the cursor's marker leaves the cursor *unsettled* in the journal, and an unsettled
//!    cursor's next flush stages a marker whatever its dirty state says (a failed sync also
//!    latches the journal), so marking partitions persisted at stage time never makes a later
//!    flush report state durable that is not.
//!
//! Lock order: a tick (the journal's tick lock) is begun before a cursor's lock is taken,
//! never while holding it.
//!
//! A cursor of the single-entry form ([`PersistMode::SingleEntry`]) stages a snapshot record
//! instead: its whole state (every range, under the range cap and the entry size, the overflow
//! policy applied as for a cursor ledger, and its partial entries inline), committed by the
//! tick like a marker; its evictions still go to the journal as partition records, which its
//! snapshots never reference. Its recovery reads that record back and holds every range
//! (as a cursor ledger's snapshot recovers). Whichever form committed later is the cursor's
//! state; a cursor may change form on a reopen.
//!
//! Partial entries (batch-index acks) follow the same two steps: a flush stages a batch record
//! for every partition whose partial entries changed and have no current copy in the journal
//! (an eviction may have written one), and the marker's batch table lists every partition
//! with partial entries; the staged locations become the partial entries' committed ones at
//! stage time, as the staged partitions are marked persisted.
//!
//! Must never: stage a marker that references a partition or batch record whose journal copy
//! is not the cursor's current contents; sync or commit while the cursor's lock is held for an
//! ack path.

use std::sync::Arc;

use crate::ackset::{PartitionKey, RangeSetWrapper};
use crate::error::{CorruptionKind, CorruptionPlace, Error, Result};
use crate::format::cursor::{
    BatchPartition, BatchRow, PersistedState, ROW_LEN, TableRef, decode_batch_entry, marker_len,
};
use crate::format::journal::{
    BODY_FIXED_LEN, MAX_BODY_LEN, NAME_TAG_LEN, OTHER_CURSORS_STATE, name_tag,
};
use crate::journal::index::{CursorId, PartLoc};
use crate::journal::{BatchStage, Journal, JournalPartitions, SnapshotCounts, Tick};
use crate::observe::CursorLabels;

use super::batch::BatchAcks;
use super::batch_store::{BatchLocation, BatchTable};
use super::batch_store::{BatchStore, encode};
use super::config::{CursorConfig, PersistMode};
use super::recover::RecoveredBatch;
use super::snapshot::{apply_overflow, build_snapshot};
use super::stats::PersistStats;

/// The store's journal as one topic's cursors see it: the journal and the topic's id in the
/// store catalog.
#[derive(Debug, Clone)]
pub(crate) struct TopicJournal {
    /// The store's cursor journal.
    pub journal: Arc<Journal>,
    /// The topic's id in the store catalog (the `topic` of every [`CursorId`]).
    pub topic: u64,
    /// The topic's name in the store catalog, which each cursor's name tag binds.
    pub name: Arc<str>,
}

impl TopicJournal {
    /// [`Error::Fenced`] once another owner has claimed the store: the ownership proof of a
    /// store's topic (one per store, not one per topic).
    pub(crate) fn check_store_owner(&self) -> Result<()> {
        self.journal.check_store_owner()
    }

    /// The journal id of the topic's cursor `cursor`.
    pub(crate) fn cursor_id(&self, cursor: u64) -> CursorId {
        CursorId {
            topic: self.topic,
            cursor,
        }
    }

    /// The mark-delete the journal committed for `cursor`, if it holds a state for it
    /// (`Some(None)`: a state without a mark-delete).
    pub(crate) fn committed_state(&self, cursor: u64) -> Option<PersistedState> {
        self.journal.state(self.cursor_id(cursor))
    }
}

/// A recovered cursor's acks: its ack set and its partial entries.
pub(crate) type AckState = (RangeSetWrapper, RecoveredBatch);

/// One cursor's persistence through the store's journal.
#[derive(Debug)]
pub(crate) struct JournalCursor {
    journal: Arc<Journal>,
    id: CursorId,
    /// The name tag of the cursor's name, which its markers bind.
    name: u32,
    /// Shared by the topic's journal cursors.
    config: Arc<CursorConfig>,
    /// The state of the last marker staged, and how many live partitions and partitions with
    /// partial entries it listed: a flush with the same state and no changed partition stages
    /// nothing.
    staged: Option<(PersistedState, usize, usize)>,
    stats: PersistStats,
    labels: CursorLabels,
}

impl JournalCursor {
    /// The settings this cursor persists with.
    pub(crate) fn config(&self) -> &Arc<CursorConfig> {
        &self.config
    }

    /// A cursor with nothing in the journal yet, and its empty ack set (evicted partitions go to
    /// the journal, unsynced).
    pub(crate) fn new(
        tj: &TopicJournal,
        (cursor, name): (u64, &str),
        config: Arc<CursorConfig>,
        labels: CursorLabels,
    ) -> (Self, RangeSetWrapper) {
        let this = Self {
            journal: Arc::clone(&tj.journal),
            id: tj.cursor_id(cursor),
            name: name_tag(&tj.name, name),
            config,
            staged: None,
            stats: PersistStats::default(),
            labels,
        };
        let acks = RangeSetWrapper::new(this.partition_store(), this.config.lru_capacity_bytes);
        (this, acks)
    }

    /// The cursor as the journal committed it: its state, its ack set with every live
    /// partition listed and none loaded (each loads from the journal on first touch), and its
    /// partial entries, every partition cold (loaded from its batch record on first use).
    /// `None` when the journal holds no state for it. Reads and writes nothing; the copies of
    /// its partitions and partial entries that no committed marker references (written by a
    /// former handle's evictions after its last commit) leave the journal's index, so every
    /// load finds the committed copy.
    ///
    /// # Errors
    /// [`Error::Corrupted`] at the chain's newest record when the journal's state of this id
    /// binds another name: the topic record lists this cursor under another cursor's id, and
    /// that state is not this cursor's.
    pub(crate) fn recover(
        tj: &TopicJournal,
        (cursor, name): (u64, &str),
        config: Arc<CursorConfig>,
        labels: CursorLabels,
    ) -> Result<Option<(Self, PersistedState, AckState)>> {
        let id = tj.cursor_id(cursor);
        // No handle of the cursor is open: whatever it evicted after its last commit is no
        // part of the state recovered here.
        tj.journal.drop_pending(id);
        let name = name_tag(&tj.name, name);
        let bound = tj.journal.committed_name(id);
        if let Some((bound, at)) = bound
            && bound != 0
            && bound != name
        {
            return Err(Error::corrupted_at(
                CorruptionPlace::Journal {
                    segment: at.segment,
                    offset: at.offset,
                },
                CorruptionKind::InvalidField(OTHER_CURSORS_STATE),
            ));
        }
        if bound.is_none() {
            return Ok(None);
        }
        let snapshot = tj.journal.read_snapshot(id, |snapshot| {
            let batch = snapshot.batch.clone();
            let ranges: Vec<(u64, u64, u64)> = snapshot.ranges().collect();
            Ok((snapshot.state.clone(), ranges, batch))
        })?;
        if let Some((state, ranges, partial)) = snapshot {
            // A fall back is logged and counted as a cursor ledger's is.
            if let Some(at) = tj.journal.fell_back(id) {
                let detail = format!(
                    ": its newest marker (journal segment {} at byte {}) does not verify",
                    at.segment, at.offset
                );
                labels.recovered("journal snapshot", &detail, true);
            }
            // The snapshot is the cursor's state: every range is held (as a cursor ledger's
            // snapshot recovers), and its next flush of either form writes a whole state.
            let this = Self {
                journal: Arc::clone(&tj.journal),
                id,
                name,
                staged: None,
                stats: PersistStats::default(),
                config,
                labels,
            };
            let mut acks =
                RangeSetWrapper::new(this.partition_store(), this.config.lru_capacity_bytes);
            for (ledger, first, last) in ranges {
                acks.add_range(ledger, first, last)?;
            }
            let mut batch = BatchAcks::with_store(this.batch_store());
            batch.load(partial);
            return Ok(Some((
                this,
                state,
                (acks, RecoveredBatch::from_acks(batch)),
            )));
        }
        let Some((state, rows)) = tj.journal.committed(id) else {
            return Ok(None);
        };
        let batch_table: BatchTable = tj
            .journal
            .committed_batch(id)
            .into_iter()
            .map(|(key, part)| Ok((key, location(key, &part)?)))
            .collect::<Result<_>>()?;
        let this = Self {
            journal: Arc::clone(&tj.journal),
            id,
            name,
            // A chain that binds no name (written before markers bound one) is not what this
            // cursor stages: its next flush writes a marker binding its name, however little
            // changed, so the name check covers it from then on.
            staged: bound
                .is_some_and(|(bound, _)| bound != 0)
                .then(|| (state.clone(), rows.len(), batch_table.len())),
            stats: PersistStats {
                persisted_bytes: 0,
                ..PersistStats::default()
            },
            config,
            labels,
        };
        let acks = RangeSetWrapper::with_index(
            this.partition_store(),
            this.config.lru_capacity_bytes,
            rows,
        );
        let mut batch = BatchAcks::with_store(this.batch_store());
        batch.load_cold(&batch_table);
        Ok(Some((
            this,
            state,
            (acks, RecoveredBatch::from_acks(batch)),
        )))
    }

    /// Where this cursor's partial entries are evicted to: batch records in the journal.
    pub(crate) fn batch_store(&self) -> Box<dyn BatchStore> {
        Box::new(JournalBatches {
            journal: Arc::clone(&self.journal),
            cursor: self.id,
        })
    }

    /// Whether the journal's state of this cursor binds no name yet (its next flush binds it,
    /// so the cursor counts as changed until then).
    pub(crate) fn binds_no_name(&self) -> bool {
        self.staged.is_none()
    }

    /// Where this cursor's partitions are evicted to and loaded from: the journal.
    pub(crate) fn partition_store(&self) -> Box<dyn crate::ackset::PartitionStore> {
        Box::new(JournalPartitions::new(Arc::clone(&self.journal), self.id))
    }

    /// The state the journal committed for this cursor, if it holds one.
    pub(crate) fn committed_state(&self) -> Option<PersistedState> {
        self.journal.committed(self.id).map(|(state, _)| state)
    }

    /// The journal this cursor persists through.
    pub(crate) fn journal(&self) -> &Arc<Journal> {
        &self.journal
    }

    /// The labels of this cursor's metrics.
    pub(crate) fn labels(&self) -> &CursorLabels {
        &self.labels
    }

    /// Counters since this handle opened (`cursor_ledger` is always `None`).
    pub(crate) fn stats(&self) -> PersistStats {
        self.stats
    }

    /// Bytes the encoded properties may take: as for a cursor-ledger cursor of the same
    /// settings (so a topic's cursors accept the same properties whichever way they persist).
    pub(crate) fn property_room(&self) -> usize {
        let fixed = marker_len(&PersistedState::default(), TableRef::Inline(&[]));
        let batch =
            4 + super::batch_store::BATCH_INLINE_ROWS * crate::format::cursor::BATCH_ROW_LEN;
        let entry = usize::try_from(self.config.max_entry_size).unwrap_or(usize::MAX);
        entry.saturating_sub(fixed + self.config.index_page_rows * ROW_LEN + batch)
    }

    /// Stages `state`, every ack of `acks` and every partial entry of `batch` into `tick`
    /// (step 1 of a flush, under the cursor's lock): appends the live partitions whose journal
    /// copy is not current and the batch records of the partitions whose partial entries have
    /// no current copy, marks them persisted (and the partial entries committed at the staged
    /// locations), and keeps `state` for the tick's marker. Returns `false` (nothing staged)
    /// when the last staged marker already says all of this.
    ///
    /// # Errors
    /// Those of [`Tick::stage_with_batch`] (nothing is marked persisted then); a failed
    /// partition load; a partition's partial entries that do not encode.
    pub(crate) fn stage(
        &mut self,
        tick: &mut Tick<'_>,
        state: &PersistedState,
        acks: &mut RangeSetWrapper,
        batch: &mut BatchAcks,
    ) -> Result<bool> {
        if self.config.persist_mode == PersistMode::SingleEntry {
            return self.stage_snapshot(tick, state, acks, batch).map(|()| true);
        }
        self.stage_chain(tick, state, acks, batch)
    }

    /// [`JournalCursor::stage`] in the multi-entry form whatever the cursor's form: partitions,
    /// batch records and a marker. An import stages this way in either form, so every
    /// partition and partial entry it moves (cold ones included, whose copies the ledger it
    /// retires held) has a journal copy the cursor's later loads find; a snapshot references
    /// none. A cursor of the single-entry form then commits snapshots, each newer than that
    /// chain, which stays its fallback (see `docs/format.md`, "Snapshot record").
    ///
    /// # Errors
    /// Those of [`JournalCursor::stage`].
    pub(crate) fn stage_chain(
        &mut self,
        tick: &mut Tick<'_>,
        state: &PersistedState,
        acks: &mut RangeSetWrapper,
        batch: &mut BatchAcks,
    ) -> Result<bool> {
        let dirty = acks.dirty_keys();
        let live: Vec<PartitionKey> = acks.partitions().into_iter().map(|(k, _)| k).collect();
        let batch_keys = batch.keys();
        let unchanged = dirty.is_empty()
            && batch.dirty_keys().is_empty()
            && !self.unsettled()
            && self
                .staged
                .as_ref()
                .is_some_and(|(s, n, b)| s == state && *n == live.len() && *b == batch_keys.len());
        if unchanged {
            return Ok(false);
        }
        let mut written = Vec::new();
        for &key in &live {
            let current = self
                .journal
                .stored_cardinality(self.id, key)
                .is_some_and(|c| acks.stored_copy_current(key, c));
            if !current {
                let bitmap = acks.bitmap(key)?.ok_or_else(|| Error::InvalidArgument {
                    reason: format!("partition {}:{} vanished", key.ledger_id, key.chunk),
                })?;
                written.push((key, bitmap));
            }
        }
        let staged_batch = self.batch_stage(batch, &batch_keys)?;
        let locations = tick.stage_with_batch(
            (self.id, self.name),
            state.clone(),
            (&written, &live),
            &staged_batch,
        )?;
        let table: BatchTable = locations
            .iter()
            .map(|(key, part)| Ok((*key, location(*key, part)?)))
            .collect::<Result<_>>()?;
        batch.mark_committed(&table);
        for (key, _) in &written {
            acks.mark_persisted(*key);
        }
        for key in dirty {
            // Not written: its journal copy (stored by an eviction) is current.
            acks.mark_clean(key);
        }
        // Partitions an eviction could not store are in the journal now: evictions may store
        // again.
        acks.resume_stores();
        self.staged = Some((state.clone(), live.len(), batch_keys.len()));
        self.stats.flushes += 1;
        self.stats.markers += 1;
        self.stats.partitions_written += written.len() as u64;
        self.stats.entries_written += (written.len() + staged_batch.written.len()) as u64 + 1;
        Ok(true)
    }

    /// [`JournalCursor::stage`] of a seek's reset state (no acks, a new mark-delete). A cursor
    /// whose journal holds a snapshot stages it as a snapshot, whatever its form: a recovery
    /// falls back from a chain that does not verify to the cursor's snapshot, so that snapshot
    /// must never hold acks a seek cleared (after the reset, acks only grow until the next).
    ///
    /// # Errors
    /// Those of [`JournalCursor::stage`].
    pub(crate) fn stage_reset(
        &mut self,
        (tick, state): (&mut Tick<'_>, &PersistedState),
        (acks, batch): (&mut RangeSetWrapper, &mut BatchAcks),
    ) -> Result<()> {
        if self.config.persist_mode != PersistMode::SingleEntry
            && self.journal.has_snapshot(self.id)
        {
            return self.stage_snapshot(tick, state, acks, batch);
        }
        self.stage(tick, state, acks, batch).map(drop)
    }

    /// [`JournalCursor::stage`] of a cursor of the single-entry form: builds one snapshot of
    /// `state`, every range of `acks` (loading cold partitions) and every partial entry of
    /// `batch` (reading cold ones, which stay cold) under the range cap and the entry size,
    /// applies the overflow policy to what did not fit, and stages it as the cursor's snapshot
    /// record. Then the partial entries count as committed and evictions may store again.
    ///
    /// # Errors
    /// [`Error::LimitExceeded`] (nothing staged) when ranges do not fit and the policy is
    /// [`crate::cursor::OverflowPolicy::Error`], or the snapshot (whose partial entries are
    /// never cut) is larger than a record; those of [`Tick::stage_snapshot`]; a failed load.
    fn stage_snapshot(
        &mut self,
        tick: &mut Tick<'_>,
        state: &PersistedState,
        acks: &mut RangeSetWrapper,
        batch: &mut BatchAcks,
    ) -> Result<()> {
        let partitions = batch.partitions()?;
        let entry_size = usize::try_from(self.config.max_entry_size).unwrap_or(usize::MAX);
        let max_bytes = entry_size.min(MAX_BODY_LEN - BODY_FIXED_LEN - NAME_TAG_LEN);
        let snapshot = build_snapshot(
            state,
            acks,
            &partitions,
            max_bytes,
            self.config.max_ranges_single_entry,
        )?;
        let mut counted = self.stats;
        apply_overflow(
            &snapshot,
            (&self.config, max_bytes),
            &self.labels,
            &mut counted,
        )?;
        let counts = SnapshotCounts {
            ranges: snapshot.ranges,
            batch_partitions: partitions.len() as u64,
            partial_entries: partitions.iter().map(|p| p.entries.len() as u64).sum(),
        };
        tick.stage_snapshot(
            (self.id, self.name),
            state.clone(),
            &snapshot.payload,
            counts,
        )?;
        batch.mark_committed(&BatchTable::new());
        acks.resume_stores();
        // A later flush in the multi-entry form (after a reopen) writes a whole marker.
        self.staged = None;
        self.stats = PersistStats {
            flushes: counted.flushes + 1,
            snapshots: counted.snapshots + 1,
            entries_written: counted.entries_written + 1,
            persisted_bytes: snapshot.payload.len() as u64,
            ..counted
        };
        Ok(())
    }

    /// Which of the partitions `keys` of `batch` a flush writes a batch record for (those
    /// whose current partial entries the journal holds no copy of) and which it keeps.
    fn batch_stage(&self, batch: &BatchAcks, keys: &[PartitionKey]) -> Result<BatchStage> {
        let mut out = BatchStage::default();
        for &key in keys {
            let stored = batch.stored_location(key).filter(|l| {
                self.journal
                    .stored_batch(self.id, key)
                    .is_some_and(|p| p.crc == l.row.crc)
            });
            match (stored, batch.resident_partition(key)) {
                (Some(l), _) => out.kept.push((key, l.row.crc)),
                (None, Some(p)) => {
                    let payload = encode(&p)?;
                    let entries = u32::try_from(p.entries.len()).unwrap_or(u32::MAX);
                    out.written.push((key, payload, entries));
                }
                // Cold, and the journal's copy is not the one it names: the state cannot be
                // written as it is.
                (None, None) => {
                    return Err(Error::corrupted_at(
                        key.place(),
                        CorruptionKind::InvalidField("batch record"),
                    ));
                }
            }
        }
        Ok(out)
    }

    /// Whether a tick that staged this cursor ended without committing its marker: the next
    /// flush stages one even if nothing changed since.
    pub(crate) fn unsettled(&self) -> bool {
        self.journal.is_unsettled(self.id)
    }
}

/// The [`BatchLocation`] of the batch record of `key` at `part` (its journal location packed
/// into the row's entry id).
fn location(key: PartitionKey, part: &PartLoc) -> Result<BatchLocation> {
    Ok(BatchLocation {
        row: BatchRow {
            ledger_id: key.ledger_id,
            chunk: key.chunk,
            entry_id: part.loc.pack().ok_or_else(|| Error::LimitExceeded {
                reason: "journal location beyond 4 GiB in a segment".into(),
            })?,
            crc: part.crc,
            entries: u32::try_from(part.cardinality).unwrap_or(u32::MAX),
        },
        len: part.frame_len,
    })
}

/// A [`BatchStore`] over the journal: `store` appends a batch record (unsynced; it counts once
/// a committed marker's batch table references it), `load` reads the journal's newest batch
/// record of the partition and checks it is the one the location names (CRC and partial-entry
/// count: a rollover moves records, so the location's place is not used) before decoding it.
#[derive(Debug)]
pub(crate) struct JournalBatches {
    journal: Arc<Journal>,
    cursor: CursorId,
}

impl BatchStore for JournalBatches {
    fn load(&mut self, key: PartitionKey, location: &BatchLocation) -> Result<BatchPartition> {
        let bad = |kind| Error::corrupted_at(key.place(), kind);
        let (part, payload) = self
            .journal
            .load_batch(self.cursor, key)?
            .ok_or_else(|| bad(CorruptionKind::Missing))?;
        if part.crc != location.row.crc || part.cardinality != u64::from(location.row.entries) {
            return Err(bad(CorruptionKind::InvalidField(
                "batch record does not match its row",
            )));
        }
        let partition = decode_batch_entry(&payload).map_err(|c| bad(c.kind))?;
        if (partition.ledger_id, partition.chunk) != (key.ledger_id, key.chunk)
            || partition.entries.len() != location.row.entries as usize
        {
            return Err(bad(CorruptionKind::InvalidField(
                "batch record does not match its row",
            )));
        }
        Ok(partition)
    }

    fn store(&mut self, partition: &BatchPartition) -> Result<BatchLocation> {
        let payload = encode(partition)?;
        let key = PartitionKey {
            ledger_id: partition.ledger_id,
            chunk: partition.chunk,
        };
        let entries = u32::try_from(partition.entries.len()).unwrap_or(u32::MAX);
        let part = self
            .journal
            .store_batch(self.cursor, key, (&payload, entries))?;
        location(key, &part)
    }

    fn forget(&mut self, key: PartitionKey) {
        self.journal.forget_batch(self.cursor, key);
    }
}

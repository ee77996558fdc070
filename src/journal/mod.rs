//! The cursor journal: one shared, group-committed log of every cursor's ack state.
//!
//! Owns: the journal segment files (`journal-{seq:016}.seg`, [`crate::format::journal`]) of one
//! store, the writer that appends to the newest segment, the index of every cursor's records
//! ([`index`]), recovery on open, and segment rollover. Must never: return `Ok` from
//! [`Journal::commit`] before every record of the tick is synced; reference a partition from
//! a marker before the partition's record precedes the marker in the log; delete a segment
//! before what it holds that is still live was copied and synced elsewhere; write after a
//! failed sync or a fence (the journal latches until the store is reopened; a failed write is
//! cut back and the next write starts where it did, see [`Journal::is_unsettled`]).
//!
//! The room, by concern: [`Journal`], its settings and counters here; segment files (names,
//! header, slots, predecessor) in `segment.rs`; the appending side and its latch in
//! `writer.rs`; ticks in `tick.rs` (with the snapshot records of single-entry cursors) and
//! the records they write (partitions, batch records, markers, deltas) in `marker.rs`; a cursor's partitions in the journal in `partitions.rs`;
//! the open's recovery scan in `recover.rs` and what each record does to it in `scan.rs`;
//! rollover in `rollover.rs`; the offline check in `check.rs`; the flusher pool that runs the
//! ticks of its hosts in [`flusher`]; what the host provides and is
//! told (the segment list, seals, hooks, the owner's check) in `host.rs`; the index of every
//! cursor's records in [`index`]. The room imports only the layers below it (`format`, `log`,
//! `storage`, `ackset`, `error`); its host, the store, imports it.
//!
//! **Ownership.** The journal is opened by the store that holds the directory. A former owner
//! that lost the directory without knowing it may still append to the segment that was newest
//! when the new owner opened: the new owner records that segment's length in the store catalog
//! (the seal) and never appends to it, and every later open ignores bytes past the seal. The
//! owner's check ([`Journal::set_owner_check`]) runs after a tick's syncs, before it returns
//! `Ok` or indexes anything, and before a rollover deletes a segment: a former owner's tick
//! fails with [`Error::Fenced`] (its records lie past the new owner's seal or were read by its
//! open), it never deletes a segment, and the journal refuses every later write.

mod check;
pub mod flusher;
mod host;
pub mod index;
mod marker;
mod partitions;
mod recover;
mod rollover;
pub mod rows;
mod scan;
mod segment;
mod tick;
mod writer;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::ackset::PartitionKey;
use crate::error::{CorruptionKind, CorruptionPlace, Error};
use crate::format::cursor::{PersistedState, Snapshot};
use crate::format::journal::JournalLoc;
use crate::hashing::{IdMap, IdSet};
use crate::storage::Storage;
use crate::sync::lock;
use index::{CursorId, PartLoc, ShardedIndex};
use writer::Writer;

pub use check::{
    JournalCheck, check, check_listed, check_sealed, committed_ranges, snapshot_entries,
};
pub use host::{Listed, OwnerCheck, Seal, SegmentHooks};
pub use marker::marker_room;
pub use partitions::{JournalPartitions, SeenBounds};
pub use rollover::{SEGMENT_SLACK, segment_bound};
pub use segment::{parse_segment_name, segment_name};
pub use tick::{BatchStage, CursorFlush, SnapshotCounts, Tick};

/// Settings of the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalConfig {
    /// A tick that finds the newest segment at or past this size starts a new one (a segment
    /// holding no record yet takes one whatever this size, so even a limit below the header's
    /// size lets a rollover end). 16 MiB by default. An open scans every segment, and a tick
    /// leaves at most about twice the live bytes plus one segment (the rollover's trigger), so
    /// this size is the part of a restart's scan that does not shrink with the live state:
    /// larger segments roll over less often and are scanned longer.
    pub segment_bytes: u64,
}

impl Default for JournalConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 16 << 20,
        }
    }
}

/// What a tick or a rollover did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TickStats {
    /// Cursors committed.
    pub cursors: u64,
    /// Partition records written.
    pub partitions: u64,
    /// Bytes appended.
    pub bytes: u64,
    /// `fdatasync` and directory syncs made.
    pub syncs: u64,
    /// Segments deleted by rollovers after the tick.
    pub segments_deleted: u64,
}

/// Counters since open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Ticks committed.
    pub ticks: u64,
    /// File and directory syncs.
    pub syncs: u64,
    /// Bytes appended.
    pub bytes_written: u64,
    /// Partition loads.
    pub loads: u64,
    /// Segments deleted by rollover.
    pub rollovers: u64,
    /// Markers written as deltas (by ticks).
    pub deltas: u64,
    /// Full markers rollovers wrote to re-base a cursor's chain.
    pub rebases: u64,
    /// Segment files now.
    pub segments: u64,
    /// Bytes of every segment file now.
    pub segment_bytes: u64,
    /// Bytes of the records still live.
    pub live_bytes: u64,
}

/// The store's cursor journal.
#[derive(Debug)]
pub struct Journal {
    storage: Arc<dyn Storage>,
    config: JournalConfig,
    /// Serializes ticks and rollovers (appends of evictions do not take it).
    tick: Mutex<()>,
    writer: Mutex<Writer>,
    index: ShardedIndex,
    /// Files by segment, for reads without the writer's lock.
    files: RwLock<BTreeMap<u64, Arc<segment::SegmentFile>>>,
    counters: Counters,
    /// Run after a tick's syncs and before a rollover deletes a segment.
    owner: RwLock<Option<OwnerCheck>>,
    /// Where new and deleted segments are listed.
    hooks: RwLock<Option<SegmentHooks>>,
    /// Cursors staged into a tick that failed (or was dropped) before it committed their
    /// marker: their next flush writes a marker whatever their dirty state says, so a state a
    /// cursor took for written at stage time is never left without its marker. Changed under
    /// the tick lock only.
    unsettled: Mutex<IdSet<CursorId>>,
    /// Cursors whose newest marker or delta did not verify at open, which recovered their
    /// single-entry snapshot instead, with where that record starts.
    fallbacks: IdMap<CursorId, JournalLoc>,
}

#[derive(Debug, Default)]
struct Counters {
    /// The write order of partition copies ([`PartLoc::seq`]); taken under the writer's lock.
    seq: AtomicU64,
    ticks: AtomicU64,
    syncs: AtomicU64,
    bytes: AtomicU64,
    loads: AtomicU64,
    rollovers: AtomicU64,
    deltas: AtomicU64,
    rebases: AtomicU64,
}

fn corrupt(segment: u64, offset: u64, kind: CorruptionKind) -> Error {
    Error::corrupted_at(CorruptionPlace::Journal { segment, offset }, kind)
}

impl Journal {
    /// The segments that count now, ascending: what the store lists after its claim.
    #[must_use]
    pub fn segments(&self) -> Vec<u64> {
        lock(&self.writer).segments.keys().copied().collect()
    }

    /// Every cursor with a committed marker or snapshot.
    #[must_use]
    pub fn cursors(&self) -> Vec<CursorId> {
        self.index.cursors()
    }

    /// The cursor's committed chain's state and its live partitions with their cardinalities
    /// (whether or not the chain is the cursor's state: see [`Journal::read_snapshot`]).
    #[must_use]
    pub fn committed(
        &self,
        cursor: CursorId,
    ) -> Option<(PersistedState, Vec<(PartitionKey, u64)>)> {
        let index = self.index.of(cursor);
        let c = index.committed(cursor)?;
        Some((
            c.state.clone(),
            c.rows.iter().map(|(k, r)| (*k, r.cardinality)).collect(),
        ))
    }

    /// Where the batch record of every partition with partial entries of the cursor's committed
    /// state is: the batch table a cursor recovers its partial entries from, cold.
    #[must_use]
    pub fn committed_batch(&self, cursor: CursorId) -> Vec<(PartitionKey, PartLoc)> {
        self.index
            .of(cursor)
            .committed(cursor)
            .map(|c| c.batch.iter().map(|(k, p)| (*k, *p)).collect())
            .unwrap_or_default()
    }

    /// The name tag the cursor's committed state binds (0: none, see
    /// [`index::Committed::name`]) and where it starts: its snapshot record when that is its
    /// state, else its chain's newest record.
    #[must_use]
    pub fn committed_name(&self, cursor: CursorId) -> Option<(u32, JournalLoc)> {
        let index = self.index.of(cursor);
        match index.current_snapshot(cursor) {
            Some(s) => Some((s.name, s.loc)),
            None => index.committed(cursor).map(|c| (c.name, c.marker)),
        }
    }

    /// Where the cursor's newest marker or delta starts if it did not verify at open and the
    /// cursor's state is its single-entry snapshot instead (the fallback).
    #[must_use]
    pub fn fell_back(&self, cursor: CursorId) -> Option<JournalLoc> {
        self.fallbacks.get(&cursor).copied()
    }

    /// The cursor's committed mark-delete, epoch and properties, of whichever form (chain or
    /// snapshot) is its state.
    #[must_use]
    pub fn state(&self, cursor: CursorId) -> Option<PersistedState> {
        self.index.of(cursor).state(cursor).cloned()
    }

    /// Whether the cursor has a snapshot record (its state, or its chain's fallback).
    #[must_use]
    pub fn has_snapshot(&self, cursor: CursorId) -> bool {
        self.index.of(cursor).snapshot(cursor).is_some()
    }

    /// Runs `read` over the cursor's snapshot when that is its state (see
    /// [`index::SnapshotLoc::current`]): the record is read back and verified (its frame, its
    /// payload CRC, the snapshot's CRC bound to the cursor and its name, the snapshot's own
    /// checks). `Ok(None)` when the cursor's state is not a snapshot.
    ///
    /// # Errors
    /// [`Error::Corrupted`] at the record when it no longer verifies; [`Error::Io`]; those of
    /// `read`.
    pub fn read_snapshot<T>(
        &self,
        cursor: CursorId,
        read: impl FnOnce(&Snapshot<'_>) -> crate::error::Result<T>,
    ) -> crate::error::Result<Option<T>> {
        let Some(mut s) = self.index.of(cursor).current_snapshot(cursor).cloned() else {
            return Ok(None);
        };
        // A rollover points the index at its copy before it deletes the segment: a segment
        // gone since the lookup is looked up again (see `Journal::load`).
        let file = loop {
            let file = self
                .files
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&s.loc.segment)
                .cloned();
            if let Some(file) = file {
                break file;
            }
            match self.index.of(cursor).current_snapshot(cursor) {
                Some(moved) if moved.loc != s.loc => s = moved.clone(),
                _ => {
                    return Err(corrupt(
                        s.loc.segment,
                        s.loc.offset,
                        CorruptionKind::Missing,
                    ));
                }
            }
        };
        partitions::read_snapshot_at(file.as_ref(), cursor, &s, read).map(Some)
    }

    /// Counters since open and the journal's size now.
    #[must_use]
    pub fn stats(&self) -> JournalStats {
        let (segments, segment_bytes) = {
            let w = lock(&self.writer);
            (
                w.segments.len() as u64,
                w.segments.values().map(|s| s.len).sum(),
            )
        };
        JournalStats {
            ticks: self.counters.ticks.load(Ordering::Relaxed),
            syncs: self.counters.syncs.load(Ordering::Relaxed),
            bytes_written: self.counters.bytes.load(Ordering::Relaxed),
            loads: self.counters.loads.load(Ordering::Relaxed),
            rollovers: self.counters.rollovers.load(Ordering::Relaxed),
            deltas: self.counters.deltas.load(Ordering::Relaxed),
            rebases: self.counters.rebases.load(Ordering::Relaxed),
            segments,
            segment_bytes,
            live_bytes: self.index.live_bytes(),
        }
    }

    /// Whether `cursor` was staged into a tick that did not commit its marker: its next flush
    /// must stage a marker even when nothing changed since.
    #[must_use]
    pub fn is_unsettled(&self, cursor: CursorId) -> bool {
        lock(&self.unsettled).contains(&cursor)
    }
}

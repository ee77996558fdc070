//! Where every cursor's committed and pending partitions live in the journal.
//!
//! Owns: the in-memory index of the store's cursor journal: for every cursor, its newest
//! committed marker (state, the location of every live partition and of every batch record:
//! the partial entries of one partition), its newest committed single-entry snapshot
//! ([`SnapshotLoc`]), and the partitions and batch records written since (by evictions) that
//! no marker references yet. Pure data, no I/O; rebuilt by
//! the journal's open (`recover.rs`). Batch records are indexed as partitions are, in rows of
//! their own (a partition may have both an ack record and a batch record).
//!
//! Sized for a store of 100,000 cursors: a cursor is one entry of one hash map (its committed
//! chain and its pending rows together, hashed once per lookup, with `crate::hashing`'s hasher),
//! and a cursor's rows are a [`Rows`], a sorted vector while they are few.
//!
//! A cursor's committed state is a *chain*: a full marker and the deltas built on it since,
//! each naming the one before. [`Committed`] holds the chain's result (every live row), where
//! its newest record is (the base of the next delta) and the oldest segment the chain still
//! needs ([`Committed::floor`]): a rollover of that segment re-bases the chain first.
//!
//! A cursor may hold both forms (it switched form on a reopen): the one committed later is its
//! state ([`SnapshotLoc::current`]), the other its fallback, kept until a newer state of that
//! form replaces it or the cursor is forgotten.
//!
//! Invariant: [`Index::lookup`] returns the newest copy of a partition by write order
//! ([`PartLoc::seq`], not its place in the log: a rollover copies an old committed copy to
//! the end of the log, after newer pending ones): a copy older than another is never returned.
//!
//! The open journal keeps its index as a [`ShardedIndex`]: [`SHARDS`] indexes, each of the
//! cursors a hash of their id puts there, each under a lock of its own.

use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard};

pub use super::rows::{Row, Rows};
use crate::ackset::PartitionKey;
use crate::format::cursor::PersistedState;
use crate::format::journal::JournalLoc;
use crate::hashing::IdMap;
use crate::sync::lock;

/// A cursor of the store: its topic's catalog id and its id within the topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CursorId {
    /// The topic's id in the store catalog.
    pub topic: u64,
    /// The cursor's id within its topic.
    pub cursor: u64,
}

/// One partition record in the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartLoc {
    /// When its contents were written, counted by the journal since open (copies keep it;
    /// copies recovered on open have 0, as nothing is pending then).
    pub seq: u64,
    /// Where its frame starts.
    pub loc: JournalLoc,
    /// Bytes of its frame.
    pub frame_len: u64,
    /// What a marker row this build writes names it by: the CRC32 of its payload, or for a
    /// batch record the CRC32 of its payload without the entry's own CRC
    /// ([`crate::format::journal::batch_row_crc`], which tells batch records apart; a batch row
    /// of a segment before version 8 holds the CRC32 of the whole payload instead, the scan
    /// checks that and keeps this).
    pub crc: u32,
    /// Acked entries in the partition (for a batch record: its partial entries).
    pub cardinality: u64,
    /// The version of the segment it is in: how its payload reads
    /// ([`crate::format::journal::decode_partition_payload`]). Sits in what would be padding:
    /// a row stays 64 bytes.
    pub version: u16,
}

/// A cursor's committed state: its newest marker or delta and what the chain adds up to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// Where the frame of the chain's newest record (a marker or a delta) starts: the base
    /// the next delta names.
    pub marker: JournalLoc,
    /// Bytes of a full marker of this state: the frame of the marker itself, or, after a delta,
    /// the full marker a re-base writes. The live bytes count this, not the chain's deltas,
    /// which a re-base replaces.
    pub marker_len: u64,
    /// CRC32 of the payload of the record at `marker`, which the next delta names.
    pub crc: u32,
    /// The name tag of the cursor the chain belongs to (`crate::format::journal::name_tag`);
    /// 0 when unknown (a chain of a version 3 segment, until its cursor's next flush).
    pub name: u32,
    /// The lowest segment holding a record of the chain (its full marker, a delta, or a
    /// partition one of them references): recovery reads them all, so that segment is not
    /// deleted before the chain is re-based by a full marker elsewhere.
    pub floor: u64,
    /// Mark-delete, epoch and properties.
    pub state: PersistedState,
    /// Every live partition and where it is.
    pub rows: Rows,
    /// Every partition with partial entries and where its batch record is.
    pub batch: Rows,
    /// Whether a live batch row of the chain was accepted under a marker or delta of a segment
    /// before version 8, whose batch rows hold the CRC32 of the whole payload (the same for
    /// every batch record) and so bind the record by its location alone: the cursor's next
    /// marker is full, never a delta, so that a version 8 row names every live batch record.
    /// Set only by a recovery scan; a full marker of this build clears it.
    pub unbound_batch: bool,
}

impl Committed {
    /// Bytes of the chain's full marker and of every record it references: what the journal
    /// keeps live for it.
    fn bytes(&self) -> u64 {
        self.marker_len + self.records().map(|r| r.frame_len).sum::<u64>()
    }

    /// The floor of a chain that starts with a full marker at `marker` over `rows` and
    /// `batch`.
    #[must_use]
    pub fn full_floor(marker: JournalLoc, rows: &Rows, batch: &Rows) -> u64 {
        rows.values()
            .chain(batch.values())
            .map(|r| r.loc.segment)
            .fold(marker.segment, u64::min)
    }

    /// Every record the chain references: its partitions and its batch records.
    pub fn records(&self) -> impl Iterator<Item = &PartLoc> {
        self.rows.values().chain(self.batch.values())
    }
}

/// A cursor's newest committed single-entry snapshot record: its whole state in one record,
/// referencing no other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotLoc {
    /// Where its frame starts.
    pub loc: JournalLoc,
    /// Bytes of its frame.
    pub frame_len: u64,
    /// CRC32 of the record's payload (name tag and bound snapshot entry).
    pub crc: u32,
    /// The name tag it binds (see [`Committed::name`]).
    pub name: u32,
    /// Mark-delete, epoch and properties.
    pub state: PersistedState,
    /// Acked ranges above mark-delete it holds.
    pub ranges: u64,
    /// Partitions with partial entries it holds, and those partial entries.
    pub batch: (u64, u64),
    /// Whether it committed after the newest record of the cursor's chain (or the cursor has
    /// no chain): it is then the cursor's state, and the chain its fallback; otherwise the
    /// chain is the state, and this the fallback.
    pub current: bool,
}

/// A delta the recovery scan verified, to apply with [`Index::apply_delta`].
#[derive(Debug, Clone)]
pub struct AppliedDelta {
    /// Where the delta's frame starts.
    pub marker: JournalLoc,
    /// Bytes of a full marker of the resulting state (see [`Committed::marker_len`]).
    pub marker_len: u64,
    /// CRC32 of the delta's payload.
    pub crc: u32,
    /// The name tag the delta binds (see [`Committed::name`]).
    pub name: u32,
    /// The cursor's state the delta holds.
    pub state: PersistedState,
    /// Keys removed from the base.
    pub removed: Vec<PartitionKey>,
    /// Rows added or rewritten, each verified.
    pub added: Vec<(PartitionKey, PartLoc)>,
    /// Batch keys removed from the base.
    pub removed_batch: Vec<PartitionKey>,
    /// Batch rows added or rewritten, each verified.
    pub added_batch: Vec<(PartitionKey, PartLoc)>,
    /// [`Committed::unbound_batch`] of the chain the delta makes.
    pub unbound_batch: bool,
}

/// The index of the whole journal: one entry per cursor, so a lookup hashes its cursor once
/// and finds its committed and pending rows together.
///
/// Invariant: `live` is the sum of [`Entry::bytes`] over every entry: each change of an entry
/// adds and takes away the bytes of the records it adds and drops, so [`Index::live_bytes`],
/// which every tick's rollover check reads, costs the same whatever the number of cursors.
///
/// An entry is boxed: the table moves 24-byte slots when it grows, not entries of over 300
/// bytes. A recovery scan of 100,000 cursors grew a table of inline entries to 46 MB, each
/// doubling in memory the allocator took fresh from the system (a table that size is mapped
/// and unmapped whole) and copied into: a quarter of the restart's page faults.
#[derive(Debug, Default)]
pub struct Index {
    cursors: IdMap<CursorId, Box<Entry>>,
    live: u64,
}

/// One cursor's part of the index. Invariant: an entry with no committed chain, no snapshot
/// and no pending row is not kept.
#[derive(Debug, Default)]
struct Entry {
    committed: Option<Committed>,
    /// Boxed: only a single-entry cursor has one, so an entry of a multi-entry cursor (the
    /// default) is 104 bytes smaller than with the location inline.
    snapshot: Option<Box<SnapshotLoc>>,
    pending: Rows,
    pending_batch: Rows,
}

impl Entry {
    /// Bytes of every record the entry references: its chain's full marker (see
    /// [`Committed::marker_len`]) and records, its snapshot and its pending records.
    fn bytes(&self) -> u64 {
        self.committed.as_ref().map_or(0, Committed::bytes)
            + self.snapshot.as_ref().map_or(0, |s| s.frame_len)
            + rows_bytes(&self.pending)
            + rows_bytes(&self.pending_batch)
    }

    fn is_empty(&self) -> bool {
        self.committed.is_none()
            && self.snapshot.is_none()
            && self.pending.is_empty()
            && self.pending_batch.is_empty()
    }

    /// The cursor's chain committed after its snapshot: the snapshot is its fallback now.
    fn chain_is_newest(&mut self) {
        if let Some(s) = self.snapshot.as_mut() {
            s.current = false;
        }
    }
}

/// Bytes of the records of `rows`.
fn rows_bytes(rows: &Rows) -> u64 {
    rows.values().map(|r| r.frame_len).sum()
}

/// Drops from `pending` the copies that `referenced` (the rows a commit made) holds, or newer
/// ones: a pending copy survives a commit only if written after the row it would replace.
/// Returns the bytes of the copies dropped.
fn settle_pending(
    pending: &mut Rows,
    referenced: impl Fn(&PartitionKey) -> Option<PartLoc>,
) -> u64 {
    let mut dropped = 0;
    if !pending.is_empty() {
        pending.retain(|k, v| {
            let keep = referenced(k).is_none_or(|row| v.seq > row.seq);
            if !keep {
                dropped += v.frame_len;
            }
            keep
        });
    }
    dropped
}

/// The newer (by write order) of a pending and a committed copy.
pub(super) fn newest(pending: Option<PartLoc>, committed: Option<PartLoc>) -> Option<PartLoc> {
    match (pending, committed) {
        (Some(p), Some(c)) => Some(if p.seq > c.seq { p } else { c }),
        (p, c) => p.or(c),
    }
}

impl Index {
    /// Changes `cursor`'s entry with `change`, and drops the entry if that leaves it empty.
    fn change<T>(&mut self, cursor: CursorId, change: impl FnOnce(&mut Entry) -> T) -> Option<T> {
        let entry = self.cursors.get_mut(&cursor)?;
        let out = change(entry);
        if entry.is_empty() {
            self.cursors.remove(&cursor);
        }
        Some(out)
    }

    /// Counts `added` bytes of records in and `dropped` bytes out of [`Index::live_bytes`].
    fn account(&mut self, added: u64, dropped: u64) {
        // Added first: `dropped` is part of what the total holds, with or without `added`.
        self.live = self.live + added - dropped;
    }

    /// A partition of `cursor` was written at `part` and is not committed yet.
    pub fn stage(&mut self, cursor: CursorId, key: PartitionKey, part: PartLoc) {
        let replaced = self
            .cursors
            .entry(cursor)
            .or_default()
            .pending
            .insert(key, part);
        self.account(part.frame_len, replaced.map_or(0, |r| r.frame_len));
    }

    /// A batch record of `cursor` was written at `part` and is not committed yet.
    pub fn stage_batch(&mut self, cursor: CursorId, key: PartitionKey, part: PartLoc) {
        let replaced = self
            .cursors
            .entry(cursor)
            .or_default()
            .pending_batch
            .insert(key, part);
        self.account(part.frame_len, replaced.map_or(0, |r| r.frame_len));
    }

    /// `cursor`'s marker at `committed.marker` was synced: it replaces the cursor's earlier
    /// one. Pending copies it references, or older than the one it references, are dropped.
    pub fn commit(&mut self, cursor: CursorId, committed: Committed) {
        let added = committed.bytes();
        let entry = self.cursors.entry(cursor).or_default();
        let mut dropped = settle_pending(&mut entry.pending, |k| committed.rows.get(k).copied());
        dropped += settle_pending(&mut entry.pending_batch, |k| {
            committed.batch.get(k).copied()
        });
        dropped += entry.committed.replace(committed).map_or(0, |c| c.bytes());
        entry.chain_is_newest();
        self.account(added, dropped);
    }

    /// `cursor`'s snapshot at `snapshot.loc` was synced: it replaces the cursor's earlier one
    /// and is its state (the chain, if any, becomes its fallback).
    pub fn commit_snapshot(&mut self, cursor: CursorId, snapshot: SnapshotLoc) {
        let added = snapshot.frame_len;
        let replaced = self
            .cursors
            .entry(cursor)
            .or_default()
            .snapshot
            .replace(Box::new(SnapshotLoc {
                current: true,
                ..snapshot
            }));
        self.account(added, replaced.map_or(0, |s| s.frame_len));
    }

    /// The cursor's chain does not verify (a recovery scan found its newest record damaged)
    /// and it has a snapshot: the chain is dropped and the snapshot is its state. Returns
    /// whether the cursor has a snapshot (nothing changes without one).
    pub fn fall_back_to_snapshot(&mut self, cursor: CursorId) -> bool {
        let Some(entry) = self.cursors.get_mut(&cursor) else {
            return false;
        };
        let Some(s) = entry.snapshot.as_mut() else {
            return false;
        };
        s.current = true;
        let dropped = entry.committed.take().map_or(0, |c| c.bytes());
        self.account(0, dropped);
        true
    }

    /// Applies a verified delta at `marker` to `cursor`'s committed chain, in place: `removed`
    /// keys go, `added` rows replace or join, the state and the chain's newest record become
    /// the delta's. Pending copies it references, or older ones, are dropped as by
    /// [`Index::commit`]. Does nothing for a cursor without a committed marker.
    pub fn apply_delta(&mut self, cursor: CursorId, delta: AppliedDelta) {
        let Some(entry) = self.cursors.get_mut(&cursor) else {
            return;
        };
        let Some(c) = entry.committed.as_mut() else {
            return;
        };
        let (mut added, mut dropped) = (delta.marker_len, c.marker_len);
        let frame = |row: Option<PartLoc>| row.map_or(0, |r| r.frame_len);
        for key in &delta.removed {
            dropped += frame(c.rows.remove(key));
        }
        let mut floor = c.floor.min(delta.marker.segment);
        for (key, part) in &delta.added {
            floor = floor.min(part.loc.segment);
            added += part.frame_len;
            dropped += frame(c.rows.insert(*key, *part));
        }
        for key in &delta.removed_batch {
            dropped += frame(c.batch.remove(key));
        }
        for (key, part) in &delta.added_batch {
            floor = floor.min(part.loc.segment);
            added += part.frame_len;
            dropped += frame(c.batch.insert(*key, *part));
        }
        c.floor = floor;
        c.marker = delta.marker;
        c.marker_len = delta.marker_len;
        c.crc = delta.crc;
        c.name = delta.name;
        c.state = delta.state;
        c.unbound_batch = delta.unbound_batch;
        entry.chain_is_newest();
        let found = |added: &'_ [(PartitionKey, PartLoc)], k: &PartitionKey| {
            added.iter().find(|(a, _)| a == k).map(|(_, row)| *row)
        };
        for (pending, rows) in [
            (&mut entry.pending, &delta.added),
            (&mut entry.pending_batch, &delta.added_batch),
        ] {
            dropped += settle_pending(pending, |k| found(rows, k));
        }
        self.account(added, dropped);
    }

    /// The cursor no longer has `key` (its acks were all removed): drops its pending copy.
    pub fn forget_partition(&mut self, cursor: CursorId, key: PartitionKey) {
        if let Some(Some(dropped)) = self.change(cursor, |e| e.pending.remove(&key)) {
            self.account(0, dropped.frame_len);
        }
    }

    /// The cursor no longer uses its pending batch record of `key` (the partition changed or
    /// is gone).
    pub fn forget_batch(&mut self, cursor: CursorId, key: PartitionKey) {
        if let Some(Some(dropped)) = self.change(cursor, |e| e.pending_batch.remove(&key)) {
            self.account(0, dropped.frame_len);
        }
    }

    /// Drops every pending copy of `cursor` (partitions and batch records no committed marker
    /// references): the evictions of a handle that closed without committing them.
    pub fn drop_pending(&mut self, cursor: CursorId) {
        let dropped = self.change(cursor, |e| {
            rows_bytes(&std::mem::take(&mut e.pending))
                + rows_bytes(&std::mem::take(&mut e.pending_batch))
        });
        if let Some(dropped) = dropped {
            self.account(0, dropped);
        }
    }

    /// A rollover copied `cursor`'s pending copy of `key` (a batch record when `batch`) from
    /// `from` to `copy`: the copy takes its place only while that copy is still pending there.
    /// One replaced by a newer copy, committed, forgotten (the cursor no longer holds the
    /// partition) or dropped (a recovered cursor's) meanwhile stays gone: its copy is garbage,
    /// never a pending row nothing owns. Returns whether the copy took its place.
    pub fn move_pending(
        &mut self,
        (batch, cursor, key): (bool, CursorId, PartitionKey),
        from: JournalLoc,
        copy: PartLoc,
    ) -> bool {
        let Some(entry) = self.cursors.get_mut(&cursor) else {
            return false;
        };
        let rows = if batch {
            &mut entry.pending_batch
        } else {
            &mut entry.pending
        };
        if rows.get(&key).is_none_or(|row| row.loc != from) {
            return false;
        }
        let replaced = rows.insert(key, copy).map_or(0, |r| r.frame_len);
        self.account(copy.frame_len, replaced);
        true
    }

    /// The cursor was deleted.
    pub fn remove(&mut self, cursor: CursorId) {
        if let Some(entry) = self.cursors.remove(&cursor) {
            self.account(0, entry.bytes());
        }
    }

    /// The newest batch record of `key` of `cursor`, pending or committed.
    #[must_use]
    pub fn lookup_batch(&self, cursor: CursorId, key: PartitionKey) -> Option<PartLoc> {
        let entry = self.cursors.get(&cursor)?;
        let pending = entry.pending_batch.get(&key).copied();
        let committed = entry.committed.as_ref().and_then(|c| c.batch.get(&key));
        newest(pending, committed.copied())
    }

    /// The cursor's pending batch records (`None` when it has none).
    #[must_use]
    pub fn pending_batch(&self, cursor: CursorId) -> Option<&Rows> {
        let entry = self.cursors.get(&cursor)?;
        (!entry.pending_batch.is_empty()).then_some(&entry.pending_batch)
    }

    /// The newest copy of `key` of `cursor`, pending or committed.
    #[must_use]
    pub fn lookup(&self, cursor: CursorId, key: PartitionKey) -> Option<PartLoc> {
        let entry = self.cursors.get(&cursor)?;
        let pending = entry.pending.get(&key).copied();
        let committed = entry.committed.as_ref().and_then(|c| c.rows.get(&key));
        newest(pending, committed.copied())
    }

    /// The cursor's committed marker.
    #[must_use]
    pub fn committed(&self, cursor: CursorId) -> Option<&Committed> {
        self.cursors.get(&cursor)?.committed.as_ref()
    }

    /// The cursor's pending partitions (`None` when it has none).
    #[must_use]
    pub fn pending(&self, cursor: CursorId) -> Option<&Rows> {
        let entry = self.cursors.get(&cursor)?;
        (!entry.pending.is_empty()).then_some(&entry.pending)
    }

    /// The cursor's newest committed snapshot.
    #[must_use]
    pub fn snapshot(&self, cursor: CursorId) -> Option<&SnapshotLoc> {
        self.cursors.get(&cursor)?.snapshot.as_deref()
    }

    /// The cursor's snapshot if it is the cursor's state (committed after its chain, or
    /// without one).
    #[must_use]
    pub fn current_snapshot(&self, cursor: CursorId) -> Option<&SnapshotLoc> {
        self.snapshot(cursor).filter(|s| s.current)
    }

    /// The cursor's committed state, of whichever form is current.
    #[must_use]
    pub fn state(&self, cursor: CursorId) -> Option<&PersistedState> {
        match self.current_snapshot(cursor) {
            Some(s) => Some(&s.state),
            None => self.committed(cursor).map(|c| &c.state),
        }
    }

    /// Every cursor with a committed marker or snapshot, sorted.
    #[must_use]
    pub fn cursors(&self) -> Vec<CursorId> {
        let mut ids: Vec<CursorId> = self.with_state().collect();
        ids.sort_unstable();
        ids
    }

    /// Every cursor with a committed marker or snapshot, in no order.
    fn with_state(&self) -> impl Iterator<Item = CursorId> + '_ {
        self.cursors
            .iter()
            .filter(|(_, e)| e.committed.is_some() || e.snapshot.is_some())
            .map(|(id, _)| *id)
    }

    /// Cursors whose committed chain reaches down to `segment` (see [`Committed::floor`]),
    /// whose snapshot is at or below it, or with a pending record in it, sorted.
    #[must_use]
    pub fn cursors_in(&self, segment: u64) -> Vec<CursorId> {
        let mut ids: Vec<CursorId> = self
            .cursors
            .iter()
            .filter(|(_, e)| {
                e.committed.as_ref().is_some_and(|c| {
                    c.floor <= segment
                        || c.marker.segment == segment
                        || c.records().any(|r| r.loc.segment == segment)
                }) || e
                    .snapshot
                    .as_ref()
                    .is_some_and(|s| s.loc.segment <= segment)
                    || e.pending
                        .values()
                        .chain(e.pending_batch.values())
                        .any(|r| r.loc.segment == segment)
            })
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Bytes of every record a recovery or a load may still need: committed markers, their
    /// partitions and batch records, snapshots, pending ones. Kept as the index changes: no
    /// walk of the cursors.
    #[must_use]
    pub fn live_bytes(&self) -> u64 {
        self.live
    }

    /// [`Index::live_bytes`] counted again from every entry: what the kept total must equal.
    #[must_use]
    pub fn recount_live_bytes(&self) -> u64 {
        self.cursors.values().map(|e| e.bytes()).sum()
    }
}

/// Shards of a [`ShardedIndex`].
pub const SHARDS: usize = 64;

/// The open journal's index, split by cursor into [`SHARDS`] [`Index`]es, each under a lock of
/// its own.
///
/// Nothing in an [`Index`] ties two cursors together but the live-byte total, which is the sum
/// of the shards': every other question and change is one cursor's, answered by that cursor's
/// shard alone. So a load, an eviction or a flush's staging of one cursor waits only for work
/// on the cursors of its own shard. Under one lock, a tick staging 100,000 cursors held the
/// index for a moment per cursor, and a broker's ack that loaded an evicted partition meanwhile
/// slept on that lock often enough to set the ack p99 during ticks (`docs/benchmarks.md`,
/// "Acks during a tick: the journal's index in shards").
///
/// Invariant: a cursor's entry is only ever in the shard [`ShardedIndex::of`] locks for it.
/// A change of many cursors that readers must see whole (a tick's commit of its markers, a
/// rollover's of its copies: a cursor with both forms has both rewritten, and either one alone
/// would make its fallback its state for a moment) holds every shard ([`ShardedIndex::all`]),
/// as the one lock was held. What only reads many cursors, a tick's build of its markers or a
/// rollover's reading of what it copies, takes one cursor's shard at a time: ticks and
/// rollovers are serialized by the journal's tick lock (no committed state changes meanwhile),
/// and evictions stage under the writer's lock, which a rollover holds throughout.
///
/// Lock order: a thread holds one shard, or every shard (taken in shard order), never one and
/// then another; the writer's lock and the tick lock come before any shard.
#[derive(Debug)]
pub struct ShardedIndex {
    /// Where a cursor's shard is: a hash of its id, seeded at random per index.
    hasher: foldhash::fast::RandomState,
    shards: Box<[Mutex<Index>]>,
}

impl ShardedIndex {
    /// `index`'s entries, each moved to its cursor's shard; each shard's live bytes are those
    /// of its entries.
    #[must_use]
    pub fn new(index: Index) -> Self {
        let hasher = foldhash::fast::RandomState::default();
        let mut shards: Vec<Index> = (0..SHARDS).map(|_| Index::default()).collect();
        let live = index.live;
        for (cursor, entry) in index.cursors {
            let shard = &mut shards[shard_of(&hasher, cursor)];
            shard.live += entry.bytes();
            shard.cursors.insert(cursor, entry);
        }
        debug_assert_eq!(shards.iter().map(|s| s.live).sum::<u64>(), live);
        Self {
            hasher,
            shards: shards.into_iter().map(Mutex::new).collect(),
        }
    }

    /// The shard that holds `cursor`'s entry, locked.
    pub fn of(&self, cursor: CursorId) -> MutexGuard<'_, Index> {
        lock(&self.shards[shard_of(&self.hasher, cursor)])
    }

    /// Every shard, each locked in turn (the one before unlocked first).
    pub fn each(&self) -> impl Iterator<Item = MutexGuard<'_, Index>> {
        self.shards.iter().map(|s| lock(s))
    }

    /// Every shard, locked together (in shard order), for a change of many cursors that
    /// readers must see whole (see the type's docs).
    #[must_use]
    pub fn all(&self) -> AllShards<'_> {
        AllShards {
            hasher: &self.hasher,
            guards: self.each().collect(),
        }
    }

    /// Every cursor with a committed marker or snapshot, sorted.
    #[must_use]
    pub fn cursors(&self) -> Vec<CursorId> {
        let mut ids = Vec::new();
        for shard in self.each() {
            ids.extend(shard.with_state());
        }
        // Sorted once, not each shard's first.
        ids.sort_unstable();
        ids
    }

    /// [`Index::live_bytes`] of the whole index: the sum of the shards'.
    #[must_use]
    pub fn live_bytes(&self) -> u64 {
        self.each().map(|s| s.live_bytes()).sum()
    }
}

/// Every shard of a [`ShardedIndex`], held ([`ShardedIndex::all`]).
#[derive(Debug)]
pub struct AllShards<'a> {
    hasher: &'a foldhash::fast::RandomState,
    guards: Vec<MutexGuard<'a, Index>>,
}

impl AllShards<'_> {
    /// The shard of `cursor`.
    pub fn of(&mut self, cursor: CursorId) -> &mut Index {
        &mut self.guards[shard_of(self.hasher, cursor)]
    }
}

/// The shard of `cursor` (the top bits of its hash: the shards' own tables hash with seeds of
/// their own).
fn shard_of(hasher: &foldhash::fast::RandomState, cursor: CursorId) -> usize {
    const BITS: u32 = SHARDS.trailing_zeros();
    // The top `BITS` bits of a 64-bit hash: always below `SHARDS`.
    (hasher.hash_one(cursor) >> (u64::BITS - BITS)) as usize
}

//! Where every cursor's committed and pending partitions live in the journal.
//!
//! Owns: the in-memory index of the store's cursor journal: for every cursor, its newest
//! committed marker (state, the location of every live partition and of every batch record:
//! the partial entries of one partition), its newest committed single-entry snapshot
//! ([`SnapshotLoc`]), and the partitions and batch records written since (by evictions) that
//! no marker references yet. Pure data, no I/O; rebuilt by
//! the journal's open (`recover.rs`). Batch records are indexed as partitions are, in maps of their
//! own (a partition may have both an ack record and a batch record).
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

use std::collections::{BTreeMap, HashMap};

use crate::ackset::PartitionKey;
use crate::format::cursor::PersistedState;
use crate::format::journal::JournalLoc;

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
    /// CRC32 of its payload (the cursor-ledger partition entry).
    pub crc: u32,
    /// Acked entries in the partition (for a batch record: its partial entries).
    pub cardinality: u64,
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
    pub rows: BTreeMap<PartitionKey, PartLoc>,
    /// Every partition with partial entries and where its batch record is.
    pub batch: BTreeMap<PartitionKey, PartLoc>,
}

impl Committed {
    /// The floor of a chain that starts with a full marker at `marker` over `rows` and
    /// `batch`.
    #[must_use]
    pub fn full_floor(
        marker: JournalLoc,
        rows: &BTreeMap<PartitionKey, PartLoc>,
        batch: &BTreeMap<PartitionKey, PartLoc>,
    ) -> u64 {
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
}

/// The index of the whole journal.
#[derive(Debug, Default)]
pub struct Index {
    committed: HashMap<CursorId, Committed>,
    snapshots: HashMap<CursorId, SnapshotLoc>,
    pending: HashMap<CursorId, BTreeMap<PartitionKey, PartLoc>>,
    pending_batch: HashMap<CursorId, BTreeMap<PartitionKey, PartLoc>>,
}

/// Drops from `pending` the copies of `cursor` that `referenced` (the rows a commit made)
/// holds, or newer ones: a pending copy survives a commit only if written after the row it
/// would replace.
fn settle_pending<'a>(
    pending: &mut HashMap<CursorId, BTreeMap<PartitionKey, PartLoc>>,
    cursor: CursorId,
    referenced: impl Fn(&PartitionKey) -> Option<&'a PartLoc>,
) {
    if let Some(p) = pending.get_mut(&cursor) {
        p.retain(|k, v| referenced(k).is_none_or(|row| v.seq > row.seq));
        if p.is_empty() {
            pending.remove(&cursor);
        }
    }
}

/// The newer (by write order) of a pending and a committed copy.
pub(super) fn newest(pending: Option<PartLoc>, committed: Option<PartLoc>) -> Option<PartLoc> {
    match (pending, committed) {
        (Some(p), Some(c)) => Some(if p.seq > c.seq { p } else { c }),
        (p, c) => p.or(c),
    }
}

impl Index {
    /// A partition of `cursor` was written at `part` and is not committed yet.
    pub fn stage(&mut self, cursor: CursorId, key: PartitionKey, part: PartLoc) {
        self.pending.entry(cursor).or_default().insert(key, part);
    }

    /// A batch record of `cursor` was written at `part` and is not committed yet.
    pub fn stage_batch(&mut self, cursor: CursorId, key: PartitionKey, part: PartLoc) {
        self.pending_batch
            .entry(cursor)
            .or_default()
            .insert(key, part);
    }

    /// `cursor`'s marker at `committed.marker` was synced: it replaces the cursor's earlier
    /// one. Pending copies it references, or older than the one it references, are dropped.
    pub fn commit(&mut self, cursor: CursorId, committed: Committed) {
        settle_pending(&mut self.pending, cursor, |k| committed.rows.get(k));
        settle_pending(&mut self.pending_batch, cursor, |k| committed.batch.get(k));
        self.committed.insert(cursor, committed);
        self.chain_is_newest(cursor);
    }

    /// `cursor`'s snapshot at `snapshot.loc` was synced: it replaces the cursor's earlier one
    /// and is its state (the chain, if any, becomes its fallback).
    pub fn commit_snapshot(&mut self, cursor: CursorId, snapshot: SnapshotLoc) {
        self.snapshots.insert(
            cursor,
            SnapshotLoc {
                current: true,
                ..snapshot
            },
        );
    }

    /// The cursor's chain committed after its snapshot: the snapshot is its fallback now.
    fn chain_is_newest(&mut self, cursor: CursorId) {
        if let Some(s) = self.snapshots.get_mut(&cursor) {
            s.current = false;
        }
    }

    /// The cursor's chain does not verify (a recovery scan found its newest record damaged)
    /// and it has a snapshot: the chain is dropped and the snapshot is its state. Returns
    /// whether the cursor has a snapshot (nothing changes without one).
    pub fn fall_back_to_snapshot(&mut self, cursor: CursorId) -> bool {
        let Some(s) = self.snapshots.get_mut(&cursor) else {
            return false;
        };
        s.current = true;
        self.committed.remove(&cursor);
        true
    }

    /// Applies a verified delta at `marker` to `cursor`'s committed chain, in place: `removed`
    /// keys go, `added` rows replace or join, the state and the chain's newest record become
    /// the delta's. Pending copies it references, or older ones, are dropped as by
    /// [`Index::commit`]. Does nothing for a cursor without a committed marker.
    pub fn apply_delta(&mut self, cursor: CursorId, delta: AppliedDelta) {
        let Some(c) = self.committed.get_mut(&cursor) else {
            return;
        };
        for key in &delta.removed {
            c.rows.remove(key);
        }
        let mut floor = c.floor.min(delta.marker.segment);
        for (key, part) in &delta.added {
            floor = floor.min(part.loc.segment);
            c.rows.insert(*key, *part);
        }
        for key in &delta.removed_batch {
            c.batch.remove(key);
        }
        for (key, part) in &delta.added_batch {
            floor = floor.min(part.loc.segment);
            c.batch.insert(*key, *part);
        }
        c.floor = floor;
        c.marker = delta.marker;
        c.marker_len = delta.marker_len;
        c.crc = delta.crc;
        c.name = delta.name;
        c.state = delta.state;
        self.chain_is_newest(cursor);
        let found = |added: &'_ [(PartitionKey, PartLoc)], k: &PartitionKey| {
            added.iter().find(|(a, _)| a == k).map(|(_, row)| *row)
        };
        for (pending, added) in [
            (&mut self.pending, &delta.added),
            (&mut self.pending_batch, &delta.added_batch),
        ] {
            if let Some(p) = pending.get_mut(&cursor) {
                p.retain(|k, v| found(added, k).is_none_or(|row| v.seq > row.seq));
                if p.is_empty() {
                    pending.remove(&cursor);
                }
            }
        }
    }

    /// The cursor no longer has `key` (its acks were all removed): drops its pending copy.
    pub fn forget_partition(&mut self, cursor: CursorId, key: PartitionKey) {
        if let Some(p) = self.pending.get_mut(&cursor) {
            p.remove(&key);
        }
    }

    /// The cursor no longer uses its pending batch record of `key` (the partition changed or
    /// is gone).
    pub fn forget_batch(&mut self, cursor: CursorId, key: PartitionKey) {
        if let Some(p) = self.pending_batch.get_mut(&cursor) {
            p.remove(&key);
        }
    }

    /// The cursor was deleted.
    pub fn remove(&mut self, cursor: CursorId) {
        self.committed.remove(&cursor);
        self.snapshots.remove(&cursor);
        self.pending.remove(&cursor);
        self.pending_batch.remove(&cursor);
    }

    /// The newest batch record of `key` of `cursor`, pending or committed.
    #[must_use]
    pub fn lookup_batch(&self, cursor: CursorId, key: PartitionKey) -> Option<PartLoc> {
        let pending = self
            .pending_batch
            .get(&cursor)
            .and_then(|p| p.get(&key))
            .copied();
        let committed = self
            .committed
            .get(&cursor)
            .and_then(|c| c.batch.get(&key))
            .copied();
        newest(pending, committed)
    }

    /// The cursor's pending batch records.
    #[must_use]
    pub fn pending_batch(&self, cursor: CursorId) -> Option<&BTreeMap<PartitionKey, PartLoc>> {
        self.pending_batch.get(&cursor)
    }

    /// The newest copy of `key` of `cursor`, pending or committed.
    #[must_use]
    pub fn lookup(&self, cursor: CursorId, key: PartitionKey) -> Option<PartLoc> {
        let pending = self.pending.get(&cursor).and_then(|p| p.get(&key)).copied();
        let committed = self
            .committed
            .get(&cursor)
            .and_then(|c| c.rows.get(&key))
            .copied();
        newest(pending, committed)
    }

    /// The cursor's committed marker.
    #[must_use]
    pub fn committed(&self, cursor: CursorId) -> Option<&Committed> {
        self.committed.get(&cursor)
    }

    /// The cursor's pending partitions.
    #[must_use]
    pub fn pending(&self, cursor: CursorId) -> Option<&BTreeMap<PartitionKey, PartLoc>> {
        self.pending.get(&cursor)
    }

    /// The cursor's newest committed snapshot.
    #[must_use]
    pub fn snapshot(&self, cursor: CursorId) -> Option<&SnapshotLoc> {
        self.snapshots.get(&cursor)
    }

    /// The cursor's snapshot if it is the cursor's state (committed after its chain, or
    /// without one).
    #[must_use]
    pub fn current_snapshot(&self, cursor: CursorId) -> Option<&SnapshotLoc> {
        self.snapshots.get(&cursor).filter(|s| s.current)
    }

    /// The cursor's committed state, of whichever form is current.
    #[must_use]
    pub fn state(&self, cursor: CursorId) -> Option<&PersistedState> {
        match self.current_snapshot(cursor) {
            Some(s) => Some(&s.state),
            None => self.committed.get(&cursor).map(|c| &c.state),
        }
    }

    /// Every cursor with a committed marker or snapshot, sorted.
    #[must_use]
    pub fn cursors(&self) -> Vec<CursorId> {
        let mut ids: Vec<CursorId> = self
            .committed
            .keys()
            .chain(self.snapshots.keys())
            .copied()
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Cursors whose committed chain reaches down to `segment` (see [`Committed::floor`]) or
    /// with a pending record in it, sorted.
    #[must_use]
    pub fn cursors_in(&self, segment: u64) -> Vec<CursorId> {
        let mut ids: Vec<CursorId> = self
            .committed
            .iter()
            .filter(|(_, c)| {
                c.floor <= segment
                    || c.marker.segment == segment
                    || c.records().any(|r| r.loc.segment == segment)
            })
            .map(|(id, _)| *id)
            .chain(
                self.snapshots
                    .iter()
                    .filter(|(_, s)| s.loc.segment <= segment)
                    .map(|(id, _)| *id),
            )
            .chain(
                self.pending
                    .iter()
                    .chain(&self.pending_batch)
                    .filter(|(_, p)| p.values().any(|r| r.loc.segment == segment))
                    .map(|(id, _)| *id),
            )
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Bytes of every record a recovery or a load may still need: committed markers, their
    /// partitions and batch records, snapshots, pending ones.
    #[must_use]
    pub fn live_bytes(&self) -> u64 {
        let committed: u64 = self
            .committed
            .values()
            .map(|c| c.marker_len + c.records().map(|r| r.frame_len).sum::<u64>())
            .sum::<u64>()
            + self.snapshots.values().map(|s| s.frame_len).sum::<u64>();
        let pending: u64 = self
            .pending
            .values()
            .chain(self.pending_batch.values())
            .flat_map(BTreeMap::values)
            .map(|r| r.frame_len)
            .sum();
        committed + pending
    }
}

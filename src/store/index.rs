//! Where every cursor's committed and pending partitions live in the journal.
//!
//! Owns: the in-memory index of the store's cursor journal: for every cursor, its newest
//! committed marker (state and the location of every live partition) and the partitions
//! written since (by evictions) that no marker references yet. Pure data, no I/O; rebuilt by
//! [`super::journal`] on open.
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
    /// Acked entries in the partition.
    pub cardinality: u64,
}

/// A cursor's newest committed marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// Where the marker's frame starts.
    pub marker: JournalLoc,
    /// Bytes of the marker's frame.
    pub marker_len: u64,
    /// Mark-delete, epoch and properties.
    pub state: PersistedState,
    /// Every live partition and where it is.
    pub rows: BTreeMap<PartitionKey, PartLoc>,
}

/// The index of the whole journal.
#[derive(Debug, Default)]
pub struct Index {
    committed: HashMap<CursorId, Committed>,
    pending: HashMap<CursorId, BTreeMap<PartitionKey, PartLoc>>,
}

impl Index {
    /// A partition of `cursor` was written at `part` and is not committed yet.
    pub fn stage(&mut self, cursor: CursorId, key: PartitionKey, part: PartLoc) {
        self.pending.entry(cursor).or_default().insert(key, part);
    }

    /// `cursor`'s marker at `committed.marker` was synced: it replaces the cursor's earlier
    /// one. Pending copies it references, or older than the one it references, are dropped.
    pub fn commit(&mut self, cursor: CursorId, committed: Committed) {
        if let Some(p) = self.pending.get_mut(&cursor) {
            p.retain(|k, v| committed.rows.get(k).is_none_or(|row| v.seq > row.seq));
            if p.is_empty() {
                self.pending.remove(&cursor);
            }
        }
        self.committed.insert(cursor, committed);
    }

    /// The cursor no longer has `key` (its acks were all removed): drops its pending copy.
    pub fn forget_partition(&mut self, cursor: CursorId, key: PartitionKey) {
        if let Some(p) = self.pending.get_mut(&cursor) {
            p.remove(&key);
        }
    }

    /// The cursor was deleted.
    pub fn remove(&mut self, cursor: CursorId) {
        self.committed.remove(&cursor);
        self.pending.remove(&cursor);
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
        match (pending, committed) {
            (Some(p), Some(c)) => Some(if p.seq > c.seq { p } else { c }),
            (p, c) => p.or(c),
        }
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

    /// Every cursor with a committed marker, sorted.
    #[must_use]
    pub fn cursors(&self) -> Vec<CursorId> {
        let mut ids: Vec<CursorId> = self.committed.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Cursors with a committed or pending record in `segment`, sorted.
    #[must_use]
    pub fn cursors_in(&self, segment: u64) -> Vec<CursorId> {
        let mut ids: Vec<CursorId> = self
            .committed
            .iter()
            .filter(|(_, c)| {
                c.marker.segment == segment || c.rows.values().any(|r| r.loc.segment == segment)
            })
            .map(|(id, _)| *id)
            .chain(
                self.pending
                    .iter()
                    .filter(|(_, p)| p.values().any(|r| r.loc.segment == segment))
                    .map(|(id, _)| *id),
            )
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Bytes of every record a recovery or a load may still need: committed markers, their
    /// partitions, pending partitions.
    #[must_use]
    pub fn live_bytes(&self) -> u64 {
        let committed: u64 = self
            .committed
            .values()
            .map(|c| c.marker_len + c.rows.values().map(|r| r.frame_len).sum::<u64>())
            .sum();
        let pending: u64 = self
            .pending
            .values()
            .flat_map(BTreeMap::values)
            .map(|r| r.frame_len)
            .sum();
        committed + pending
    }
}

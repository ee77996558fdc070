//! Batch-index acks (PIP-54): which messages of a partially acknowledged entry are acknowledged.
//!
//! Owns: [`BatchAcks`], the partial entries of one cursor and the rule that an entry whose last
//! message is acknowledged becomes an acknowledged entry. Entries with no acknowledged message,
//! and entries acknowledged whole, are never in it, so a cursor that acks whole entries pays
//! one empty-map lookup per read entry.
//!
//! Invariant kept with `CursorState`: every position here is a retained entry after mark-delete
//! that is not individually acknowledged, with at least one message acknowledged and one not.
//!
//! Must never: do I/O.

use std::collections::{BTreeMap, BTreeSet};

use roaring::RoaringBitmap;

use crate::ackset::PartitionKey;
use crate::error::{Error, Result};
use crate::format::cursor::{BatchPartition, PartialEntry};
use crate::position::Position;

/// Bytes a partial entry costs besides its bitmap: the map node, key and size.
const ENTRY_OVERHEAD: usize = 64;

/// What acknowledging one message did to its entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchAck {
    /// The message was already acknowledged.
    Unchanged,
    /// The message is acknowledged; others of the entry are not yet.
    Partial,
    /// It was the entry's last unacknowledged message: the entry is to be acknowledged whole
    /// (it has left the partial entries).
    Complete,
}

/// The partial entries of one cursor.
#[derive(Debug, Default)]
pub(crate) struct BatchAcks {
    partial: BTreeMap<Position, (u32, RoaringBitmap)>,
    bytes: usize,
    /// Partitions whose partial entries changed since they were last persisted.
    dirty: BTreeSet<PartitionKey>,
}

fn cost(acked: &RoaringBitmap) -> usize {
    ENTRY_OVERHEAD + acked.serialized_size()
}

impl BatchAcks {
    /// Acknowledges message `index` of the entry at `pos`, which holds `batch_size` messages.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `batch_size` 0, `index >= batch_size`, or a
    /// `batch_size` other than the one given for earlier messages of the entry; nothing
    /// changes.
    pub(crate) fn ack(&mut self, pos: Position, index: u32, batch_size: u32) -> Result<BatchAck> {
        if index >= batch_size {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "batch index {index} of {pos} is not below its batch size {batch_size}; \
                     nothing was changed"
                ),
            });
        }
        if let Some((size, acked)) = self.partial.get_mut(&pos) {
            if *size != batch_size {
                return Err(Error::InvalidArgument {
                    reason: format!(
                        "{pos} was acknowledged with batch size {size}, not {batch_size}; \
                         nothing was changed"
                    ),
                });
            }
            let before = cost(acked);
            if !acked.insert(index) {
                return Ok(BatchAck::Unchanged);
            }
            self.dirty.insert(PartitionKey::of(pos));
            if acked.len() == u64::from(batch_size) {
                self.bytes -= before;
                self.partial.remove(&pos);
                return Ok(BatchAck::Complete);
            }
            self.bytes = self.bytes - before + cost(acked);
            return Ok(BatchAck::Partial);
        }
        if batch_size == 1 {
            return Ok(BatchAck::Complete);
        }
        let mut acked = RoaringBitmap::new();
        acked.insert(index);
        self.bytes += cost(&acked);
        self.partial.insert(pos, (batch_size, acked));
        self.dirty.insert(PartitionKey::of(pos));
        Ok(BatchAck::Partial)
    }

    /// Makes messages `0..skip` of the entry at `pos` (of `batch_size` messages) its only
    /// acknowledged ones: what a seek to message `skip` of that entry leaves.
    pub(crate) fn set_prefix(&mut self, pos: Position, batch_size: u32, skip: u32) {
        self.remove(pos);
        if skip == 0 || skip >= batch_size {
            return;
        }
        let mut acked = RoaringBitmap::new();
        acked.insert_range(0..skip);
        self.bytes += cost(&acked);
        self.partial.insert(pos, (batch_size, acked));
        self.dirty.insert(PartitionKey::of(pos));
    }

    /// The acknowledged messages of the entry at `pos`, `None` when it has none (or is
    /// acknowledged whole).
    pub(crate) fn acked(&self, pos: Position) -> Option<&RoaringBitmap> {
        if self.partial.is_empty() {
            return None;
        }
        self.partial.get(&pos).map(|(_, acked)| acked)
    }

    /// Whether message `index` of the entry at `pos` is acknowledged here.
    pub(crate) fn contains(&self, pos: Position, index: u32) -> bool {
        self.acked(pos).is_some_and(|a| a.contains(index))
    }

    /// Forgets the entry at `pos` (acknowledged whole, or gone).
    pub(crate) fn remove(&mut self, pos: Position) {
        if let Some((_, acked)) = self.partial.remove(&pos) {
            self.bytes -= cost(&acked);
            self.dirty.insert(PartitionKey::of(pos));
        }
    }

    /// Forgets every entry at or before `pos`.
    pub(crate) fn remove_at_most(&mut self, pos: Position) {
        if self
            .partial
            .first_key_value()
            .is_none_or(|(first, _)| *first > pos)
        {
            return;
        }
        let above = match pos.entry_id.checked_add(1) {
            Some(e) => self.partial.split_off(&Position::new(pos.ledger_id, e)),
            None => BTreeMap::new(),
        };
        let below = std::mem::replace(&mut self.partial, above);
        self.bytes -= below.values().map(|(_, a)| cost(a)).sum::<usize>();
        self.dirty
            .extend(below.keys().map(|p| PartitionKey::of(*p)));
    }

    /// Forgets everything.
    pub(crate) fn clear(&mut self) {
        self.dirty
            .extend(self.partial.keys().map(|p| PartitionKey::of(*p)));
        self.partial.clear();
        self.bytes = 0;
    }

    /// Replaces the state with the persisted `partitions` (all clean). Entries that are not
    /// partial are refused by the decoder, so every one is kept as it is.
    pub(crate) fn load(&mut self, partitions: Vec<BatchPartition>) {
        self.partial.clear();
        self.bytes = 0;
        self.dirty.clear();
        for p in partitions {
            for e in p.entries {
                self.bytes += cost(&e.acked);
                self.partial.insert(
                    Position::new(p.ledger_id, e.entry_id),
                    (e.batch_size, e.acked),
                );
            }
        }
    }

    /// Keeps only the entries `keep` accepts (marking the partitions that lose one dirty);
    /// returns whether any was dropped.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(Position) -> bool) -> bool {
        let before = self.partial.len();
        let mut dropped = Vec::new();
        self.partial.retain(|p, (_, acked)| {
            let k = keep(*p);
            if !k {
                dropped.push((*p, cost(acked)));
            }
            k
        });
        for (p, c) in &dropped {
            self.bytes -= c;
            self.dirty.insert(PartitionKey::of(*p));
        }
        before != self.partial.len()
    }

    /// Partitions whose partial entries changed since [`BatchAcks::mark_clean`].
    pub(crate) fn dirty_keys(&self) -> &BTreeSet<PartitionKey> {
        &self.dirty
    }

    /// Records that every partition is persisted as it is now.
    pub(crate) fn mark_clean(&mut self) {
        self.dirty.clear();
    }

    /// The partial entries of partition `key`, as a batch-index entry encodes them; `None`
    /// when it has none.
    pub(crate) fn partition(&self, key: PartitionKey) -> Option<BatchPartition> {
        let first = Position::new(key.ledger_id, key.first_entry());
        let entries: Vec<_> = self
            .partial
            .range(first..)
            .take_while(|(p, _)| PartitionKey::of(**p) == key)
            .map(|(p, (size, acked))| PartialEntry {
                entry_id: p.entry_id,
                batch_size: *size,
                acked: acked.clone(),
            })
            .collect();
        (!entries.is_empty()).then_some(BatchPartition {
            ledger_id: key.ledger_id,
            chunk: key.chunk,
            entries,
        })
    }

    /// Keys of the partitions holding partial entries, ascending.
    pub(crate) fn keys(&self) -> Vec<PartitionKey> {
        let mut out: Vec<PartitionKey> = Vec::new();
        for p in self.partial.keys() {
            let key = PartitionKey::of(*p);
            if out.last() != Some(&key) {
                out.push(key);
            }
        }
        out
    }

    /// Number of partial entries.
    pub(crate) fn len(&self) -> u64 {
        self.partial.len() as u64
    }

    /// Memory the partial entries take, estimated from their serialized bitmaps plus a fixed
    /// overhead each.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The partial entries grouped by partition, as batch-index entries encode them.
    pub(crate) fn partitions(&self) -> Vec<BatchPartition> {
        let mut out: Vec<BatchPartition> = Vec::new();
        for (pos, (size, acked)) in &self.partial {
            let key = PartitionKey::of(*pos);
            let entry = PartialEntry {
                entry_id: pos.entry_id,
                batch_size: *size,
                acked: acked.clone(),
            };
            match out.last_mut() {
                Some(p) if (p.ledger_id, p.chunk) == (key.ledger_id, key.chunk) => {
                    p.entries.push(entry);
                }
                _ => out.push(BatchPartition {
                    ledger_id: key.ledger_id,
                    chunk: key.chunk,
                    entries: vec![entry],
                }),
            }
        }
        out
    }
}

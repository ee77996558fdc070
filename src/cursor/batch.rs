//! Batch-index acks (PIP-54): which messages of a partially acknowledged entry are acknowledged.
//!
//! Owns: [`BatchAcks`], the partial entries of one cursor, the rule that an entry whose last
//! message is acknowledged becomes an acknowledged entry, and which of them stay in memory.
//! Entries with no acknowledged message, and entries acknowledged whole, are never in it, so a
//! cursor that acks whole entries pays one empty-map lookup per read entry.
//!
//! Memory: partial entries are grouped by ack-set partition ([`PartitionKey`]). A partition's
//! partial entries are *resident* (in memory, charged [`ENTRY_OVERHEAD`] plus the serialized
//! bitmap each) or *cold*: evicted to the cursor's [`BatchStore`] (a batch-index entry of the
//! cursor ledger), with only its location and entry count kept, outside the budget, like the
//! ack set's index. [`BatchAcks::evict_to`] evicts resident partitions, least recently used
//! first (the most recently used one may be kept past it, see there), until the resident bytes
//! fit what it is given; an unsaved one is stored first (a
//! failed store keeps it resident past the budget, *pinned*, until the next successful flush
//! calls [`BatchAcks::mark_committed`]). Every operation loads the cold partition it touches
//! first; nothing here evicts on its own, the cursor state calls `evict_to` after each
//! operation. Without a store (a state that is never evicted, such as a seek's prefix), every
//! partition stays resident.
//!
//! Two flags per partition, as in the ack set: *dirty* (changed since the last commit, whether
//! resident or not: the next flush writes or references a new batch-index entry for it) and,
//! for a resident one, whether the store holds its current contents (loaded and unchanged
//! since, or written by the last flush): evicting it then writes nothing.
//!
//! Invariant kept with `CursorState`: every position here is a retained entry after mark-delete
//! that is not individually acknowledged, with at least one message acknowledged and one not.
//! A key is resident or cold, never both.
//!
//! Must never: do I/O other than through its [`BatchStore`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use lru::LruCache;
use roaring::RoaringBitmap;

use crate::ackset::PartitionKey;
use crate::error::{Error, Result};
use crate::format::cursor::{BatchPartition, MAX_BATCH_SIZE, PartialEntry};
use crate::position::Position;

use super::batch_store::BatchStore;
use super::batch_store::{BatchLocation, BatchTable};

/// Bytes a partial entry costs besides its bitmap: the map node, key and size.
pub(crate) const ENTRY_OVERHEAD: usize = 64;

/// What acknowledging one message did to its entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchAck {
    /// The message was already acknowledged.
    Unchanged,
    /// The message is acknowledged; others of the entry are not yet.
    Partial,
    /// It was the entry's last unacknowledged message: the entry is to be acknowledged whole
    /// (it has left the partial entries).
    Complete,
}

/// Eviction counters of the partial entries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchCounters {
    /// Partitions loaded back from the store.
    pub loads: u64,
    /// Partitions evicted from memory.
    pub evictions: u64,
    /// Partitions written to the store on eviction.
    pub stores: u64,
    /// Evictions whose store failed.
    pub store_failures: u64,
}

/// The partial entries of one cursor.
#[derive(Default)]
pub struct BatchAcks {
    /// The resident partial entries.
    partial: BTreeMap<Position, (u32, RoaringBitmap)>,
    /// What the resident ones are charged.
    bytes: usize,
    /// Partitions whose partial entries changed since they were last committed.
    dirty: BTreeSet<PartitionKey>,
    /// Evicted partitions: where the store holds them.
    cold: BTreeMap<PartitionKey, BatchLocation>,
    /// Partial entries of the cold partitions.
    cold_entries: u64,
    /// Resident partitions whose current contents the store holds, and where.
    saved: BTreeMap<PartitionKey, BatchLocation>,
    /// Resident partitions, most recently used first.
    lru: Recency,
    store: Option<Box<dyn BatchStore>>,
    /// A store failed since the last commit: unsaved partitions are not evicted.
    stores_blocked: bool,
    counters: BatchCounters,
}

/// The resident partitions' recency. The cache is made at the first resident partition: most
/// cursors never have a partial entry, and an empty `LruCache` still allocates its two list
/// ends (and takes 64 bytes inline, where the box takes 8).
#[derive(Default)]
struct Recency(Option<Box<LruCache<PartitionKey, ()>>>);

impl Recency {
    fn put(&mut self, key: PartitionKey) {
        self.0
            .get_or_insert_with(|| Box::new(LruCache::unbounded()))
            .put(key, ());
    }

    fn touch(&mut self, key: PartitionKey) {
        if let Some(lru) = &mut self.0 {
            lru.get(&key);
        }
    }

    fn pop(&mut self, key: PartitionKey) {
        if let Some(lru) = &mut self.0 {
            lru.pop(&key);
        }
    }

    fn contains(&self, key: PartitionKey) -> bool {
        self.0.as_ref().is_some_and(|lru| lru.contains(&key))
    }

    fn most_recent(&self) -> Option<PartitionKey> {
        self.0.as_ref()?.peek_mru().map(|(k, ())| *k)
    }

    fn least_recent_first(&self) -> impl Iterator<Item = PartitionKey> + '_ {
        self.0
            .iter()
            .flat_map(|lru| lru.iter().rev().map(|(k, ())| *k))
    }

    fn clear(&mut self) {
        self.0 = None;
    }
}

impl fmt::Debug for BatchAcks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchAcks")
            .field("resident", &self.partial.len())
            .field("cold_partitions", &self.cold.len())
            .field("cold_entries", &self.cold_entries)
            .field("bytes", &self.bytes)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

/// Refuses a batch-index ack that declares more than [`MAX_BATCH_SIZE`] messages, or an index
/// not below its batch size (`batch_size` 0 included), with [`Error::InvalidArgument`].
pub(crate) fn check_batch_ack(pos: Position, index: u32, batch_size: u32) -> Result<()> {
    if batch_size > MAX_BATCH_SIZE {
        return Err(Error::InvalidArgument {
            reason: format!(
                "batch size {batch_size} of {pos} is above the maximum of {MAX_BATCH_SIZE} \
                 messages; nothing was changed"
            ),
        });
    }
    if index >= batch_size {
        return Err(Error::InvalidArgument {
            reason: format!(
                "batch index {index} of {pos} is not below its batch size {batch_size}; \
                 nothing was changed"
            ),
        });
    }
    Ok(())
}

fn cost(acked: &RoaringBitmap) -> usize {
    ENTRY_OVERHEAD + acked.serialized_size()
}

fn first_of(key: PartitionKey) -> Position {
    Position::new(key.ledger_id, key.first_entry())
}

impl BatchAcks {
    /// Empty partial entries evicting to `store`.
    #[must_use]
    pub fn with_store(store: Box<dyn BatchStore>) -> Self {
        Self {
            store: Some(store),
            ..Self::default()
        }
    }

    /// From now on evicts to `store` (which must hold whatever the cold partitions' locations
    /// name: the same cursor ledger, or none cold).
    pub(crate) fn set_store(&mut self, store: Box<dyn BatchStore>) {
        self.store = Some(store);
    }

    /// Acknowledges message `index` of the entry at `pos`, which holds `batch_size` messages.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] as [`check_batch_ack`], or a
    /// `batch_size` other than the one given for earlier messages of the entry; a failed load
    /// of the entry's cold partition. Nothing changes.
    pub fn ack(&mut self, pos: Position, index: u32, batch_size: u32) -> Result<BatchAck> {
        check_batch_ack(pos, index, batch_size)?;
        let key = PartitionKey::of(pos);
        self.ensure(key)?;
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
                self.touch(key);
                return Ok(BatchAck::Unchanged);
            }
            if acked.len() == u64::from(batch_size) {
                self.bytes -= before;
                self.partial.remove(&pos);
                self.changed(key);
                return Ok(BatchAck::Complete);
            }
            self.bytes = self.bytes - before + cost(acked);
            self.changed(key);
            return Ok(BatchAck::Partial);
        }
        if batch_size == 1 {
            return Ok(BatchAck::Complete);
        }
        let mut acked = RoaringBitmap::new();
        acked.insert(index);
        self.bytes += cost(&acked);
        self.partial.insert(pos, (batch_size, acked));
        self.changed(key);
        Ok(BatchAck::Partial)
    }

    /// Makes messages `0..skip` of the entry at `pos` (of `batch_size` messages) its only
    /// acknowledged ones: what a seek to message `skip` of that entry leaves.
    pub(crate) fn set_prefix(&mut self, pos: Position, batch_size: u32, skip: u32) -> Result<()> {
        self.remove(pos)?;
        if skip == 0 || skip >= batch_size {
            return Ok(());
        }
        let mut acked = RoaringBitmap::new();
        acked.insert_range(0..skip);
        self.bytes += cost(&acked);
        self.partial.insert(pos, (batch_size, acked));
        self.changed(PartitionKey::of(pos));
        Ok(())
    }

    /// The acknowledged messages of the entry at `pos`, `None` when it has none (or is
    /// acknowledged whole). Loads the entry's partition when it is cold.
    pub fn acked(&mut self, pos: Position) -> Result<Option<RoaringBitmap>> {
        if self.partial.is_empty() && self.cold.is_empty() {
            return Ok(None);
        }
        let key = PartitionKey::of(pos);
        self.ensure(key)?;
        let found = self.partial.get(&pos).map(|(_, acked)| acked.clone());
        if found.is_some() {
            self.touch(key);
        }
        Ok(found)
    }

    /// Loads the partition of `pos` if it is cold, so that [`Self::remove`] of it needs no I/O.
    pub(crate) fn prepare(&mut self, pos: Position) -> Result<()> {
        self.ensure(PartitionKey::of(pos))
    }

    /// Forgets the entry at `pos` (acknowledged whole, or gone). Only fails when its partition
    /// is cold and does not load (never after [`Self::prepare`] of `pos`).
    pub(crate) fn remove(&mut self, pos: Position) -> Result<()> {
        let key = PartitionKey::of(pos);
        self.ensure(key)?;
        if let Some((_, acked)) = self.partial.remove(&pos) {
            self.bytes -= cost(&acked);
            self.changed(key);
        }
        Ok(())
    }

    /// Forgets every entry at or before `pos`. Cold partitions entirely before it are dropped
    /// without being loaded; only the one holding `pos` may be.
    pub fn remove_at_most(&mut self, pos: Position) -> Result<()> {
        let key = PartitionKey::of(pos);
        let below: Vec<PartitionKey> = self.cold.range(..key).map(|(k, _)| *k).collect();
        for k in below {
            self.drop_cold(k);
        }
        self.ensure(key)?;
        if self
            .partial
            .first_key_value()
            .is_none_or(|(first, _)| *first > pos)
        {
            return Ok(());
        }
        // The first position after `pos` (none after the last position of the last ledger).
        let next = pos.entry_id.checked_add(1).map_or_else(
            || pos.ledger_id.checked_add(1).map(|l| Position::new(l, 0)),
            |e| Some(Position::new(pos.ledger_id, e)),
        );
        let above = next.map_or_else(BTreeMap::new, |n| self.partial.split_off(&n));
        let below = std::mem::replace(&mut self.partial, above);
        self.bytes -= below.values().map(|(_, a)| cost(a)).sum::<usize>();
        let keys: BTreeSet<PartitionKey> = below.keys().map(|p| PartitionKey::of(*p)).collect();
        for k in keys {
            self.changed(k);
        }
        Ok(())
    }

    /// Forgets everything, resident or cold.
    pub(crate) fn clear(&mut self) {
        for key in std::mem::take(&mut self.cold).into_keys() {
            self.dirty.insert(key);
            if let Some(store) = self.store.as_mut() {
                store.forget(key);
            }
        }
        self.cold_entries = 0;
        for key in self.resident_keys() {
            self.dirty.insert(key);
            self.forget_saved(key);
        }
        self.partial.clear();
        self.lru.clear();
        self.bytes = 0;
        // As the ack set's `clear`: evictions try the store again (it refuses while it must).
        self.stores_blocked = false;
    }

    /// Adds the persisted `partitions` (held inline by a snapshot) as resident and clean.
    /// Entries that are not partial are refused by the decoder, so every one is kept as it is.
    pub(crate) fn load(&mut self, partitions: Vec<BatchPartition>) {
        for p in partitions {
            let key = PartitionKey {
                ledger_id: p.ledger_id,
                chunk: p.chunk,
            };
            for e in p.entries {
                self.bytes += cost(&e.acked);
                self.partial.insert(
                    Position::new(p.ledger_id, e.entry_id),
                    (e.batch_size, e.acked),
                );
            }
            self.lru.put(key);
        }
    }

    /// Adds the committed partitions of `table` as cold (a marker's batch table), loaded on
    /// first use.
    pub(crate) fn load_cold(&mut self, table: &BatchTable) {
        for (key, location) in table {
            self.cold_entries += u64::from(location.row.entries);
            self.cold.insert(*key, *location);
        }
    }

    /// Loads every cold partition from the store: every partial entry is resident after it.
    ///
    /// # Errors
    /// Those of the store's load (the partitions loaded before it stay resident).
    pub(crate) fn warm(&mut self) -> Result<()> {
        for key in self.cold.keys().copied().collect::<Vec<_>>() {
            self.ensure(key)?;
        }
        Ok(())
    }

    /// Whether every entry of partition `key` is resident (it is not cold).
    pub(crate) fn is_cold(&self, key: PartitionKey) -> bool {
        self.cold.contains_key(&key)
    }

    /// Keeps only the entries of partition `key` that `keep` accepts, loading it if cold;
    /// returns whether any was dropped.
    pub(crate) fn retain_in(
        &mut self,
        key: PartitionKey,
        mut keep: impl FnMut(Position) -> bool,
    ) -> Result<bool> {
        self.ensure(key)?;
        let dropped: Vec<Position> = self
            .entries_of(key)
            .map(|(p, _)| p)
            .filter(|p| !keep(*p))
            .collect();
        for p in &dropped {
            if let Some((_, acked)) = self.partial.remove(p) {
                self.bytes -= cost(&acked);
            }
        }
        if !dropped.is_empty() {
            self.changed(key);
        }
        Ok(!dropped.is_empty())
    }

    /// The resident entries of partition `key`, ascending.
    fn entries_of(
        &self,
        key: PartitionKey,
    ) -> impl Iterator<Item = (Position, &(u32, RoaringBitmap))> + '_ {
        self.partial
            .range(first_of(key)..)
            .take_while(move |(p, _)| PartitionKey::of(**p) == key)
            .map(|(p, v)| (*p, v))
    }

    /// Partitions whose partial entries changed since they were last committed.
    #[must_use]
    pub fn dirty_keys(&self) -> &BTreeSet<PartitionKey> {
        &self.dirty
    }

    /// Records that every partition is persisted as it is now (a snapshot holds them, or a
    /// seek committed them); where their copies are does not change.
    pub(crate) fn mark_clean(&mut self) {
        self.dirty.clear();
    }

    /// Evictions keep unsaved partitions resident until the next commit
    /// ([`Self::mark_committed`]), without counting a failure (see
    /// `RangeSetWrapper::hold_stores`).
    pub(crate) fn hold_stores(&mut self) {
        self.stores_blocked = true;
    }

    /// Evictions try the store again (see `RangeSetWrapper::resume_stores`); the next
    /// charge evicts down to the budget.
    pub(crate) fn resume_stores(&mut self) {
        self.stores_blocked = false;
    }

    /// Records a commit of every partition as it is now, at the locations of `table` (a
    /// marker's or snapshot's batch table): cold partitions are found there from now on,
    /// resident ones are saved there. Evictions store again.
    pub(crate) fn mark_committed(&mut self, table: &BatchTable) {
        self.dirty.clear();
        self.stores_blocked = false;
        for (key, location) in table {
            if let Some(cold) = self.cold.get_mut(key) {
                *cold = *location;
            } else if self.lru.contains(*key) {
                self.saved.insert(*key, *location);
            }
        }
    }

    /// The partial entries of resident partition `key`, as a batch-index entry encodes them;
    /// `None` when it has none here.
    pub(crate) fn resident_partition(&self, key: PartitionKey) -> Option<BatchPartition> {
        let entries: Vec<_> = self
            .entries_of(key)
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

    /// Where the store holds the current contents of partition `key`, if it does: always for
    /// a cold one, for a resident one loaded or flushed and unchanged since.
    pub(crate) fn stored_location(&self, key: PartitionKey) -> Option<BatchLocation> {
        self.cold
            .get(&key)
            .or_else(|| self.saved.get(&key))
            .copied()
    }

    /// Keys of the partitions holding partial entries, resident or cold, ascending.
    #[must_use]
    pub fn keys(&self) -> Vec<PartitionKey> {
        let mut out: BTreeSet<PartitionKey> = self.cold.keys().copied().collect();
        out.extend(self.resident_keys());
        out.into_iter().collect()
    }

    /// Keys of the resident partitions, ascending.
    fn resident_keys(&self) -> Vec<PartitionKey> {
        let mut out: Vec<PartitionKey> = Vec::new();
        for p in self.partial.keys() {
            let key = PartitionKey::of(*p);
            if out.last() != Some(&key) {
                out.push(key);
            }
        }
        out
    }

    /// Number of partial entries, resident or cold.
    #[must_use]
    #[allow(
        clippy::len_without_is_empty,
        reason = "a count the tests read; emptiness is never asked"
    )]
    pub fn len(&self) -> u64 {
        self.partial.len() as u64 + self.cold_entries
    }

    /// Memory the resident partial entries take, estimated from their serialized bitmaps plus
    /// [`ENTRY_OVERHEAD`] each.
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Memory the resident partial entries of partitions the store does not hold take: what
    /// an eviction would have to store (the others leave memory for free). At most
    /// [`Self::bytes`].
    pub(crate) fn unsaved_bytes(&self) -> usize {
        self.partial
            .iter()
            .filter(|(p, _)| !self.saved.contains_key(&PartitionKey::of(**p)))
            .map(|(_, (_, acked))| cost(acked))
            .sum()
    }

    /// Partitions evicted (cold).
    #[must_use]
    pub fn cold_partitions(&self) -> usize {
        self.cold.len()
    }

    /// Eviction counters.
    #[must_use]
    pub fn counters(&self) -> BatchCounters {
        self.counters
    }

    /// Every partial entry grouped by partition, as batch-index entries encode them; cold
    /// partitions are read from the store without becoming resident.
    pub fn partitions(&mut self) -> Result<Vec<BatchPartition>> {
        let mut out = Vec::new();
        for key in self.keys() {
            if let Some(location) = self.cold.get(&key).copied() {
                let store = self.store.as_mut().ok_or(Error::Closed)?;
                out.push(store.load(key, &location)?);
                self.counters.loads += 1;
            } else if let Some(p) = self.resident_partition(key) {
                out.push(p);
            }
        }
        Ok(out)
    }

    /// Evicts resident partitions, least recently used first, until the resident bytes are
    /// at most `room` or none is left to evict. Without a store nothing is evicted. A
    /// partition whose store fails stays resident (pinned) and later evictions store nothing
    /// until [`Self::mark_committed`].
    ///
    /// With `keep_hot`, the most recently used partition stays resident past `room`: so a
    /// run of acks into one partition larger than the budget does not write and read it back
    /// at every ack (what `room` bounds is the others; a flush, after which that partition's
    /// copy is current, evicts it for free).
    pub fn evict_to(&mut self, room: usize, keep_hot: bool) {
        if self.bytes <= room || self.store.is_none() {
            return;
        }
        let hot = self.lru.most_recent().filter(|_| keep_hot);
        let order: Vec<PartitionKey> = self
            .lru
            .least_recent_first()
            .filter(|k| Some(*k) != hot)
            .collect();
        for key in order {
            if self.bytes <= room {
                break;
            }
            self.evict(key);
        }
    }

    /// Evicts resident partition `key`, storing it first unless the store holds it already;
    /// returns whether it left memory.
    fn evict(&mut self, key: PartitionKey) -> bool {
        let location = if let Some(l) = self.saved.get(&key) {
            *l
        } else {
            let Some(partition) = self.resident_partition(key) else {
                self.lru.pop(key);
                return true;
            };
            if self.stores_blocked {
                return false;
            }
            let Some(store) = self.store.as_mut() else {
                return false;
            };
            let Ok(stored) = store.store(&partition) else {
                // Nothing is lost: the partition stays resident and dirty, and the next flush
                // meets the same condition and reports it.
                self.counters.store_failures += 1;
                self.stores_blocked = true;
                return false;
            };
            self.counters.stores += 1;
            stored
        };
        let positions: Vec<Position> = self.entries_of(key).map(|(p, _)| p).collect();
        for p in positions {
            if let Some((_, acked)) = self.partial.remove(&p) {
                self.bytes -= cost(&acked);
            }
        }
        self.saved.remove(&key);
        self.lru.pop(key);
        self.cold_entries += u64::from(location.row.entries);
        self.cold.insert(key, location);
        self.counters.evictions += 1;
        true
    }

    /// Makes partition `key` resident if it is cold. On `Err` nothing has changed.
    fn ensure(&mut self, key: PartitionKey) -> Result<()> {
        let Some(location) = self.cold.get(&key).copied() else {
            return Ok(());
        };
        let store = self.store.as_mut().ok_or(Error::Closed)?;
        let partition = store.load(key, &location)?;
        self.counters.loads += 1;
        self.cold.remove(&key);
        self.cold_entries -= u64::from(location.row.entries);
        for e in partition.entries {
            self.bytes += cost(&e.acked);
            self.partial.insert(
                Position::new(partition.ledger_id, e.entry_id),
                (e.batch_size, e.acked),
            );
        }
        self.saved.insert(key, location);
        self.lru.put(key);
        Ok(())
    }

    /// Drops cold partition `key` entirely (its entries are all gone), without loading it.
    pub(crate) fn drop_cold(&mut self, key: PartitionKey) {
        if let Some(location) = self.cold.remove(&key) {
            self.cold_entries -= u64::from(location.row.entries);
            self.dirty.insert(key);
            if let Some(store) = self.store.as_mut() {
                store.forget(key);
            }
        }
    }

    /// Partition `key` (resident) was used: most recently used now.
    fn touch(&mut self, key: PartitionKey) {
        self.lru.touch(key);
    }

    /// Resident partition `key` changed: dirty, its stored copy stale, and most recently used
    /// (or forgotten when it has no entry left).
    fn changed(&mut self, key: PartitionKey) {
        self.dirty.insert(key);
        self.forget_saved(key);
        if self.entries_of(key).next().is_some() {
            self.lru.put(key);
        } else {
            self.lru.pop(key);
        }
    }

    /// The store's copy of resident partition `key`, if any, is no longer current.
    fn forget_saved(&mut self, key: PartitionKey) {
        if self.saved.remove(&key).is_some()
            && let Some(store) = self.store.as_mut()
        {
            store.forget(key);
        }
    }
}

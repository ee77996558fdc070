//! [`RangeSetWrapper`]: the ack set with partitions resident under an LRU byte budget.
//!
//! Every live partition is listed in an index (key, cardinality, resident?, dirty?) that stays in
//! memory outside the budget (at most [`INDEX_ENTRY_BYTES`] a partition); bitmaps are resident or
//! in the [`PartitionStore`]. A resident partition is charged an upper bound of its heap (see the
//! module `ackset`), not its serialized size. Resident partitions live in the slots of
//! [`Residents`], which finds them by key, so touching one costs a hash probe and no
//! allocation. The partition in use ("hot", the most recently used) is in no recency list, so
//! runs of acks in one partition cost no lookup at all. When another partition becomes hot,
//! the previous one joins a list as its most recent entry and, if the resident bytes are over
//! the budget, partitions are evicted until they are within it: they never exceed the budget
//! plus the hot partition.
//!
//! The others are in two recency lists: *saved* partitions (the store holds their contents) and
//! *unsaved* ones. Evictions take the least recently used saved partition while there is one,
//! since dropping it writes nothing, and store an unsaved one only when no saved one is left;
//! a shared budget asks other sets for their saved partitions first too
//! ([`Releasable`](super::Releasable)). A partition moves to the saved list, as its most
//! recent entry, when the persistence layer says the store holds it
//! ([`RangeSetWrapper::mark_persisted`]).
//!
//! When the store fails (a full disk), the partition it could not take stays resident, *pinned*
//! in a list of its own, past the budget, and later evictions pin unsaved partitions without
//! trying the store (saved ones are still dropped) until [`RangeSetWrapper::resume_stores`]:
//! acks keep working in memory, nothing is lost, and the persistence layer's next successful
//! flush writes the pinned partitions (they are dirty). `AckSetStats` counts the failures and the
//! pinned partitions.
//!
//! Two flags per partition, independent of each other:
//! - *dirty*: changed since the last [`RangeSetWrapper::mark_clean`] of its key, whether resident
//!   or not; the persistence layer writes dirty partitions at its next flush.
//! - *unsaved* (resident partitions only): the store does not hold its current contents. Evicting
//!   an unsaved partition first calls [`PartitionStore::store`]; evicting a saved one just drops
//!   it. A loaded partition is saved until it changes.

use std::fmt;
use std::ops::Bound;

use roaring::RoaringBitmap;

use super::index::PartitionIndex;
use super::resident::{List, Resident, Residents};
use super::{
    AckRange, Charge, Direction, LAST_OFFSET, PartitionKey, PartitionStore, RangeJoiner, chunks,
    clip, count_clipped, settle, settle_after_insert, settle_len,
};
use super::{BudgetLink, Releasable};
use crate::error::{CorruptionKind, Error, Result};
use crate::position::Position;

/// Bytes the index is charged per live partition, outside the budget: key and entry (32 bytes)
/// in B-tree leaves of 11 slots that are at least 5 full (368-byte leaves, so at most 74 bytes an
/// entry), plus the internal nodes above them (under 20 bytes an entry), rounded up. An index of
/// a few partitions is a vector of exactly their 32-byte entries ([`PartitionIndex`]).
pub const INDEX_ENTRY_BYTES: usize = 96;

/// Most live partitions the index keeps in its sorted vector (a B-tree past them).
pub const INDEX_FEW: usize = 8;

/// Counters and sizes of a cursor's ack set: resident bytes against its budget, partitions
/// resident, evicted and loaded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AckSetStats {
    /// Bytes charged for resident partitions (an upper bound of each one's heap) and for the
    /// spare slots and the table of the slab that holds them.
    pub resident_bytes: usize,
    /// The highest `resident_bytes` ever reached.
    pub peak_resident_bytes: usize,
    /// The configured budget for resident partitions.
    pub budget_bytes: usize,
    /// Bytes charged to the budget by state kept beside the partitions (a cursor's partial
    /// entries of batch-index acks): partitions are evicted so that resident plus charged bytes
    /// stay within the budget.
    pub charged_bytes: usize,
    /// Bytes charged for the index of live partitions, outside the budget.
    pub index_bytes: usize,
    /// Partitions whose bitmap is in memory.
    pub resident_partitions: usize,
    /// Live (non-empty) partitions, resident or not.
    pub partitions: usize,
    /// Partitions changed since they were last persisted.
    pub dirty_partitions: usize,
    /// Partitions loaded from the store.
    pub loads: u64,
    /// Partitions evicted from memory.
    pub evictions: u64,
    /// Partitions handed to the store on eviction.
    pub stores: u64,
    /// Evictions whose store failed (a full disk, for instance).
    pub store_failures: u64,
    /// Partitions kept resident past the budget because the store could not take them; their
    /// bytes are in `resident_bytes`.
    pub pinned_partitions: usize,
    /// The limit of the budget shared with other cursors (a store's `ack_memory_bytes`), 0
    /// when the set has none; `resident_bytes + charged_bytes` is this set's share of it.
    pub shared_limit_bytes: usize,
}

/// A live partition. While it is resident (in the [`Residents`]), its [`Resident`] holds the
/// authoritative cardinality (the bitmap's) and dirty flag, and `cardinality`/`dirty` here are
/// stale until it is evicted.
#[derive(Clone, Copy, Debug)]
struct IndexEntry {
    cardinality: u64,
    resident: bool,
    dirty: bool,
}

/// The ack set under an LRU byte budget: the same queries as [`AckSet`](super::AckSet), fallible
/// because touching a partition that is not resident loads it from the [`PartitionStore`].
///
/// On `Err` (a failed load), the operation has changed nothing, except `add_range`, which may
/// have added the part of the range in the partitions before the failing one. A failed store
/// is no error: the partition stays resident (pinned).
pub struct RangeSetWrapper {
    store: Box<dyn PartitionStore>,
    budget: usize,
    /// Bytes of state outside the partitions charged to `budget` ([`Self::set_charge`]).
    charged: usize,
    index: PartitionIndex<IndexEntry, INDEX_FEW>,
    /// Resident partitions: the hot one, and the others in their lists (saved, unsaved, and
    /// pinned: unsaved ones the store could not take).
    residents: Residents,
    /// A store failed since the last [`RangeSetWrapper::resume_stores`]: evictions pin unsaved
    /// partitions instead of storing them.
    stores_blocked: bool,
    store_failures: u64,
    len: u64,
    /// Bytes charged for the resident partitions (their slots included; not the spare ones).
    partition_bytes: usize,
    peak_resident_bytes: usize,
    dirty: usize,
    loads: u64,
    evictions: u64,
    stores: u64,
    /// Membership of a budget shared with other cursors' sets.
    link: Option<BudgetLink>,
}

impl fmt::Debug for RangeSetWrapper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RangeSetWrapper")
            .field("len", &self.len)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl RangeSetWrapper {
    /// An empty set keeping at most `budget_bytes` (plus one partition) resident.
    #[must_use]
    pub fn new(store: Box<dyn PartitionStore>, budget_bytes: usize) -> Self {
        Self {
            store,
            budget: budget_bytes,
            charged: 0,
            index: PartitionIndex::default(),
            residents: Residents::new(),
            stores_blocked: false,
            store_failures: 0,
            len: 0,
            partition_bytes: 0,
            peak_resident_bytes: 0,
            dirty: 0,
            loads: 0,
            evictions: 0,
            stores: 0,
            link: None,
        }
    }

    /// Makes this set a member of a budget shared with other sets: from now on its resident
    /// plus charged bytes count in the shared total, it evicts down to what the others leave
    /// (after asking them to release, least recently used first), and other members may ask it
    /// to release ([`Self::release`], called by its cursor's hook).
    pub fn join_budget(&mut self, link: BudgetLink) {
        self.link = Some(link);
        self.publish();
        self.make_room();
    }

    /// Releases resident partitions of `what`, the hot one too, saved ones first and each
    /// kind least recently used first, until `bytes` are freed or nothing of `what` is left
    /// but what the store could not take; returns the bytes freed. For another cursor that
    /// needs the shared budget's room.
    pub fn release(&mut self, bytes: usize, what: Releasable) -> usize {
        let before = self.resident_bytes();
        self.residents.retire_hot();
        while before.saturating_sub(self.resident_bytes()) < bytes
            && self.evict_one(what == Releasable::Any)
        {}
        self.free_tables();
        self.publish();
        before.saturating_sub(self.resident_bytes())
    }

    /// Bytes charged for the resident partitions and the slab's spare slots.
    fn resident_bytes(&self) -> usize {
        self.partition_bytes + self.residents.overhead_bytes()
    }

    /// Raises the peak to the resident bytes now, if they are higher.
    fn note_peak(&mut self) {
        self.peak_resident_bytes = self.peak_resident_bytes.max(self.resident_bytes());
    }

    /// Publishes the resident plus charged bytes, and the saved ones among them, to the
    /// shared budget, if any.
    fn publish(&self) {
        if let Some(link) = &self.link {
            let hot_saved = self
                .residents
                .hot()
                .filter(|r| !r.unsaved)
                .map_or(0, |r| r.charge.bytes);
            link.publish(
                self.resident_bytes() + self.charged,
                self.residents.list_bytes(List::Saved) + hot_saved,
            );
        }
    }

    /// Lazy recovery: these partitions, with their cardinalities, are in `store`; none is
    /// resident or dirty, and each is loaded on first touch. Entries with cardinality 0 are
    /// ignored; for a key given twice the last one counts.
    #[must_use]
    pub fn with_index(
        store: Box<dyn PartitionStore>,
        budget_bytes: usize,
        index: impl IntoIterator<Item = (PartitionKey, u64)>,
    ) -> Self {
        let mut set = Self::new(store, budget_bytes);
        for (key, cardinality) in index.into_iter().filter(|(_, c)| *c > 0) {
            let entry = IndexEntry {
                cardinality,
                resident: false,
                dirty: false,
            };
            let old = set.index.insert(key, entry).map_or(0, |e| e.cardinality);
            set.len = set.len - old + cardinality;
        }
        set
    }

    /// Adds one position; `true` if it was not acked before.
    pub fn add(&mut self, pos: Position) -> Result<bool> {
        let offset = PartitionKey::offset_of(pos.entry_id);
        let added = self.change_partition(PartitionKey::of(pos), true, |b, len| {
            let added = b.insert(offset);
            (added, len + u64::from(added))
        })?;
        Ok(added.unwrap_or(false))
    }

    /// Adds every position of `positions`; returns how many were not acked before. The same
    /// as one [`Self::add`] each, but cheaper: the positions are taken [`GROUP`] at a time and,
    /// when such a group lies in one ledger within [`GROUP`] partitions, ordered by partition
    /// (see [`by_partition`]); consecutive positions in one partition cost one visit of it (one
    /// lookup, one round of bookkeeping), a resident partition is found without being moved in
    /// its recency list, the lists are brought up to date once a group (and before a partition
    /// is loaded or created), and a shared budget hears of the change once, at the end. The
    /// partitions a group touches become the most recently used, in the order they were
    /// last visited, the last one hot, as after one [`Self::add`] each; the resident bytes are
    /// brought within the budget at the end of each group, and as soon as a visit leaves them
    /// past it (as [`Self::add`] would at the next partition), so they never exceed the budget
    /// plus one partition. On `Err` (a failed load) some of the positions are added, not all.
    pub fn add_many(&mut self, positions: impl IntoIterator<Item = Position>) -> Result<u64> {
        let mut positions = positions.into_iter();
        let mut taken = [Position::default(); GROUP];
        let mut ordered = [Position::default(); GROUP];
        let mut added = 0;
        // The partition visited: its key, its slot, and its cardinality when the visit began.
        // Its bitmap and `len` change during the visit; the rest of its bookkeeping is done
        // when the visit ends (`note_change`).
        let mut visit: Option<(PartitionKey, u32, u64)> = None;
        // The resident partitions visited since the lists were last brought up to date, in the
        // order of their visits (at most one a position of the group).
        let mut visited = [0u32; GROUP];
        let mut in_visited = 0;
        let mut failed = None;
        while failed.is_none() {
            let mut n = 0;
            for (place, pos) in taken.iter_mut().zip(positions.by_ref()) {
                *place = pos;
                n += 1;
            }
            if n == 0 {
                break;
            }
            for &pos in by_partition(&taken[..n], &mut ordered) {
                let key = PartitionKey::of(pos);
                let slot = match visit {
                    Some((seen, slot, _)) if seen == key => slot,
                    _ => {
                        let grew = visit
                            .take()
                            .is_some_and(|(_, slot, before)| self.end_visit(slot, before));
                        let slot = if let Some(slot) = self.residents.find(key) {
                            visited[in_visited] = slot;
                            in_visited += 1;
                            if grew && self.over_budget() {
                                // As one `add` each: the partition left grew past the budget,
                                // so room is made with this one hot.
                                self.relink(&visited[..in_visited]);
                                in_visited = 0;
                                self.make_room();
                                // Making room may have moved the hot partition.
                                self.residents
                                    .hot_slot(key)
                                    .expect("making room keeps the hot partition")
                            } else {
                                slot
                            }
                        } else {
                            // A load or a creation may evict: the lists first.
                            self.relink(&visited[..in_visited]);
                            in_visited = 0;
                            match self.hot_slot(key, true) {
                                Ok(Some(slot)) => slot,
                                Ok(None) => unreachable!("hot_slot creates the partition"),
                                Err(e) => {
                                    failed = Some(e);
                                    break;
                                }
                            }
                        };
                        let before = u64::from(self.residents.get(slot).len);
                        visit = Some((key, slot, before));
                        slot
                    }
                };
                let resident = self.residents.get_mut(slot);
                if resident
                    .bitmap
                    .insert(PartitionKey::offset_of(pos.entry_id))
                {
                    resident.len += 1;
                    added += 1;
                }
            }
            if let Some((_, slot, before)) = visit.take() {
                self.end_visit(slot, before);
            }
            self.relink(&visited[..in_visited]);
            in_visited = 0;
            if self.over_budget() {
                self.make_room();
            }
        }
        self.touched();
        failed.map_or(Ok(added), Err)
    }

    /// Brings the recency lists up to date after [`Self::add_many`] visited the resident
    /// partitions in `visited` (in that order, a partition possibly more than once) without
    /// moving them: as if each visit had made its partition hot, the hot partition joins its
    /// list, each visited one but the last is moved to its list (by its flag) as the most
    /// recently used, and the last one becomes hot.
    fn relink(&mut self, visited: &[u32]) {
        let Some((&last, earlier)) = visited.split_last() else {
            return;
        };
        self.residents.retire_hot();
        for &slot in earlier {
            self.residents.relist_by_flag(slot);
        }
        self.residents.make_hot(last);
    }

    /// Ends a visit of [`Self::add_many`] to the partition in `slot`, which held `before`
    /// values when it began and has had values inserted since; returns whether the resident
    /// bytes grew.
    fn end_visit(&mut self, slot: u32, before: u64) -> bool {
        let bytes = self.partition_bytes;
        let after = u64::from(self.residents.get(slot).len);
        debug_assert_eq!(
            after,
            self.residents.get(slot).bitmap.len(),
            "counted inserts"
        );
        self.note_change(slot, before, after, true);
        self.partition_bytes > bytes
    }

    /// Adds the entries `first..=last` of one ledger; returns how many were not acked before.
    /// Costs one partition touch per `2^PARTITION_BITS` entries of the range.
    pub fn add_range(&mut self, ledger_id: u64, first: u64, last: u64) -> Result<u64> {
        let mut added = 0;
        for (key, lo, hi) in chunks(ledger_id, first, last) {
            added += self
                .change_partition(key, true, |b, len| {
                    let added = b.insert_range(lo..=hi);
                    (added, len + added)
                })?
                .unwrap_or(0);
        }
        Ok(added)
    }

    /// Whether `pos` is acked.
    pub fn contains(&mut self, pos: Position) -> Result<bool> {
        let key = PartitionKey::of(pos);
        let offset = PartitionKey::offset_of(pos.entry_id);
        // A partition not in memory whose bounds the store still knows (a recovery read them)
        // answers for an offset outside them without a load; inside them, the load verifies
        // the partition before it answers.
        if self.index.get(&key).is_some_and(|e| !e.resident)
            && let Some((lo, hi)) = self.store.known_bounds(key)
            && !(lo..=hi).contains(&offset)
        {
            return Ok(false);
        }
        let found = self.read_partition(key, |b| b.contains(offset))?;
        Ok(found.unwrap_or(false))
    }

    /// The last position of the run of acked positions that starts at `pos` (runs never span
    /// ledgers), `None` when `pos` is not acked. Loads the partitions the run spans and changes
    /// nothing else, so a caller can look a run up before it changes anything.
    pub fn run_end(&mut self, pos: Position) -> Result<Option<Position>> {
        let mut key = PartitionKey::of(pos);
        let mut from = PartitionKey::offset_of(pos.entry_id);
        let mut end = None;
        loop {
            let run = self.read_partition(key, |b| {
                let mut runs = b.iter();
                runs.advance_to(from);
                runs.next_range()
                    .filter(|r| *r.start() == from)
                    .map(|r| *r.end())
            })?;
            let Some(last) = run.flatten() else {
                return Ok(end);
            };
            end = Some(key.position(last));
            match key.chunk.checked_add(1) {
                Some(chunk) if last == LAST_OFFSET => {
                    key = PartitionKey { chunk, ..key };
                    from = 0;
                }
                _ => return Ok(end),
            }
        }
    }

    /// Drops every position `<= pos`. Partitions entirely below `pos` are dropped without being
    /// loaded; only the partition holding `pos` may be. No empty partition is left behind, and
    /// the store is told to forget the dropped ones.
    pub fn remove_at_most(&mut self, pos: Position) -> Result<()> {
        let key = PartitionKey::of(pos);
        let offset = PartitionKey::offset_of(pos.entry_id);
        self.change_partition(key, false, |b, len| ((), len - b.remove_range(..=offset)))?;
        let below: Vec<PartitionKey> = self.index.range(..key).map(|(k, _)| *k).collect();
        for k in below {
            self.drop_partition(k);
        }
        self.publish();
        Ok(())
    }

    /// The lowest maximal range; loads only the partitions it spans.
    pub fn first_range(&mut self) -> Result<Option<AckRange>> {
        self.first_visited(Direction::Ascending)
    }

    /// The highest maximal range; loads only the partitions it spans.
    pub fn last_range(&mut self) -> Result<Option<AckRange>> {
        self.first_visited(Direction::Descending)
    }

    /// Every maximal inclusive range, ascending (a range never spans two ledgers). Loads every
    /// partition in turn, evicting as it goes; [`Self::for_each_range`] streams instead.
    pub fn ranges(&mut self) -> Result<Vec<AckRange>> {
        let mut out = Vec::new();
        self.for_each_range(|r| {
            out.push(r);
            true
        })?;
        Ok(out)
    }

    /// Calls `f` with every maximal range, ascending, until it returns `false`.
    pub fn for_each_range(&mut self, mut f: impl FnMut(AckRange) -> bool) -> Result<()> {
        self.visit(Direction::Ascending, &mut f)
    }

    /// Number of maximal ranges (loads every partition).
    pub fn range_count(&mut self) -> Result<u64> {
        let mut count = 0;
        self.for_each_range(|_| {
            count += 1;
            true
        })?;
        Ok(count)
    }

    /// Number of acked positions, from the index (no I/O).
    #[must_use]
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing is acked.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of acked positions in `from..=to` (0 when `from > to`). Partitions entirely inside
    /// are counted from the index; at most the two at the ends are loaded.
    pub fn cardinality_between(&mut self, from: Position, to: Position) -> Result<u64> {
        if from > to {
            return Ok(0);
        }
        let mut total = 0;
        let mut edges = Vec::with_capacity(2);
        for (key, entry) in self
            .index
            .range(PartitionKey::of(from)..=PartitionKey::of(to))
        {
            match clip(*key, from, to) {
                None => total += self.state(*key, entry).0,
                Some(bounds) => edges.push((*key, bounds)),
            }
        }
        for (key, bounds) in edges {
            let counted = self.read_partition(key, |b| count_clipped(b, Some(bounds)))?;
            total += counted.unwrap_or(0);
        }
        Ok(total)
    }

    /// The lowest and the highest acked positions. Reads the bounds of at most two partitions:
    /// a resident one's from its bitmap, a stored one's from the store when it can tell them
    /// without decoding the partition ([`PartitionStore::bounds`]), which leaves it cold;
    /// otherwise the partition is loaded.
    pub fn span(&mut self) -> Result<Option<(Position, Position)>> {
        Ok(self.lowest()?.zip(self.highest()?))
    }

    /// The lowest acked position; reads one partition's bounds as [`Self::span`] does.
    pub fn lowest(&mut self) -> Result<Option<Position>> {
        let Some(first) = self.index.first_key_value().map(|(k, _)| *k) else {
            return Ok(None);
        };
        Ok(self.bounds(first)?.map(|(lo, _)| first.position(lo)))
    }

    /// The highest acked position; reads one partition's bounds as [`Self::span`] does.
    pub fn highest(&mut self) -> Result<Option<Position>> {
        let Some(last) = self.index.last_key_value().map(|(k, _)| *k) else {
            return Ok(None);
        };
        Ok(self.bounds(last)?.map(|(_, hi)| last.position(hi)))
    }

    /// The lowest and highest offsets of a live partition (see [`Self::span`]); `None` if it
    /// does not exist.
    fn bounds(&mut self, key: PartitionKey) -> Result<Option<(u32, u32)>> {
        let Some(entry) = self.index.get(&key).copied() else {
            return Ok(None);
        };
        if !entry.resident
            && let Some((lo, hi)) = self.store.bounds(key)?
        {
            if lo > hi || hi > LAST_OFFSET {
                return Err(Error::corrupted_at(
                    key.place(),
                    CorruptionKind::InvalidField("offsets beyond the partition"),
                ));
            }
            return Ok(Some((lo, hi)));
        }
        Ok(self
            .read_partition(key, |b| b.min().zip(b.max()))?
            .flatten())
    }

    /// Drops every ack; the store is told to forget every partition.
    pub fn clear(&mut self) {
        for key in self.index.keys() {
            self.store.forget(*key);
        }
        self.index.clear();
        self.residents = Residents::new();
        self.stores_blocked = false;
        self.len = 0;
        self.partition_bytes = 0;
        self.dirty = 0;
        self.publish();
    }

    /// Every live partition with its cardinality, ascending (no I/O).
    #[must_use]
    pub fn partitions(&self) -> Vec<(PartitionKey, u64)> {
        self.index
            .iter()
            .map(|(k, e)| (*k, self.state(*k, e).0))
            .collect()
    }

    /// Live partitions changed since their last [`Self::mark_clean`], ascending, resident or not.
    #[must_use]
    pub fn dirty_keys(&self) -> Vec<PartitionKey> {
        self.index
            .iter()
            .filter(|(k, e)| self.state(**k, e).1)
            .map(|(k, _)| *k)
            .collect()
    }

    /// A copy of `key`'s bitmap (`entry_id - key.first_entry()`), loading it if needed; `None`
    /// if the partition does not exist.
    pub fn bitmap(&mut self, key: PartitionKey) -> Result<Option<RoaringBitmap>> {
        self.read_partition(key, RoaringBitmap::clone)
    }

    /// The partition's current contents are persisted: it is no longer dirty. Does not touch the
    /// store or residency; an unknown key is ignored.
    pub fn mark_clean(&mut self, key: PartitionKey) {
        let Some(entry) = self.index.get_mut(&key) else {
            return;
        };
        let resident = entry.resident.then(|| self.residents.find(key)).flatten();
        let dirty = match resident {
            Some(slot) => &mut self.residents.get_mut(slot).dirty,
            None => &mut entry.dirty,
        };
        if *dirty {
            *dirty = false;
            self.dirty -= 1;
        }
    }

    /// The partition's current contents are persisted and the store holds them (the
    /// persistence layer wrote it where the store loads it from): it is clean, and evicting it
    /// needs no store (a cached one moves to the saved cache, a pinned one stays pinned until
    /// [`Self::resume_stores`]). An unknown key is ignored.
    pub fn mark_persisted(&mut self, key: PartitionKey) {
        self.mark_clean(key);
        let Some(slot) = self.residents.find(key) else {
            return;
        };
        self.residents.get_mut(slot).unsaved = false;
        if self.residents.list_of(slot) == Some(List::Unsaved) {
            self.residents.relist(slot, List::Saved, true);
        }
    }

    /// Unsaved partitions kept resident past the budget because the store could not take
    /// them (or stores are held).
    #[must_use]
    pub fn pinned_partitions(&self) -> usize {
        self.residents.list_len(List::Pinned)
    }

    /// Evictions pin unsaved partitions instead of storing them until
    /// [`Self::resume_stores`], without counting a failure: the persistence layer has no
    /// store that takes writes yet (a cursor read from a cursor ledger, before its import).
    pub fn hold_stores(&mut self) {
        self.stores_blocked = true;
    }

    /// The store takes writes again (the persistence layer's last flush succeeded): pinned
    /// partitions rejoin their lists, in key order, as their least recently used entries and
    /// are evicted down to the budget, each stored first if still unsaved (a failure pins it
    /// again).
    pub fn resume_stores(&mut self) {
        self.stores_blocked = false;
        let mut pinned: Vec<(PartitionKey, u32)> = self
            .residents
            .slots_of(List::Pinned)
            .into_iter()
            .map(|slot| (self.residents.key(slot), slot))
            .collect();
        pinned.sort_unstable();
        for (_, slot) in pinned {
            let list = if self.residents.get(slot).unsaved {
                List::Unsaved
            } else {
                List::Saved
            };
            self.residents.relist(slot, list, false);
        }
        self.make_room();
    }

    /// Replaces the store (a cursor moving to another persistence, `cursor::import`): the new
    /// store must hold every live partition that is not resident, and a current copy of every
    /// resident one marked persisted, since the set reads and trusts it as it did the old one.
    pub(crate) fn replace_store(&mut self, store: Box<dyn PartitionStore>) {
        self.store = store;
    }

    /// The store, for the persistence layer to tell it where partitions were written.
    pub fn store_mut(&mut self) -> &mut dyn PartitionStore {
        self.store.as_mut()
    }

    /// Whether `key`'s bitmap is in memory.
    #[must_use]
    pub fn is_resident(&self, key: PartitionKey) -> bool {
        self.index.get(&key).is_some_and(|e| e.resident)
    }

    /// Whether a stored copy of `key` holding `stored_cardinality` entries is the partition's
    /// current contents, so a flush may reference it instead of writing the partition again.
    ///
    /// The store holds the current contents of a live partition that is not resident (it was
    /// stored when evicted, or has not changed since it was loaded) and of a resident one that
    /// is clean; a resident dirty one has changed since. A copy of another cardinality is stale
    /// whatever the flags say. An unknown key has no current copy.
    #[must_use]
    pub fn stored_copy_current(&self, key: PartitionKey, stored_cardinality: u64) -> bool {
        self.index.get(&key).is_some_and(|entry| {
            let (cardinality, dirty) = self.state(key, entry);
            cardinality == stored_cardinality && !(dirty && entry.resident)
        })
    }

    /// Charges `bytes` of state kept beside the partitions to the budget (replacing the
    /// previous charge) and evicts partitions until the resident bytes fit in what is left.
    /// The hot partition is never evicted, so the bound stays the budget plus one partition.
    pub fn set_charge(&mut self, bytes: usize) {
        let grew = bytes > self.charged;
        self.charged = bytes;
        if grew || self.link.as_ref().is_some_and(|l| l.excess() > 0) {
            self.make_room();
        } else {
            self.publish();
        }
    }

    /// Bytes of state outside the partitions charged now (the last [`Self::set_charge`]).
    pub(crate) fn charge(&self) -> usize {
        self.charged
    }

    /// What the budget leaves for state kept beside the partitions: the budget (or what a
    /// shared budget's other members leave, if less) less the resident partitions.
    pub(crate) fn room_for_charge(&self) -> usize {
        let room = self
            .link
            .as_ref()
            .map_or(self.budget, |l| self.budget.min(l.room()));
        room.saturating_sub(self.resident_bytes())
    }

    /// Lowers the charge of state kept beside the partitions to `bytes` (at most the current
    /// one) without evicting anything or asking other members: for a release on another
    /// member's request.
    pub(crate) fn lower_charge(&mut self, bytes: usize) {
        self.charged = bytes.min(self.charged);
        self.publish();
    }

    /// Sizes and counters.
    #[must_use]
    pub fn stats(&self) -> AckSetStats {
        AckSetStats {
            resident_bytes: self.resident_bytes(),
            peak_resident_bytes: self.peak_resident_bytes,
            budget_bytes: self.budget,
            charged_bytes: self.charged,
            index_bytes: self.index.len() * INDEX_ENTRY_BYTES,
            resident_partitions: self.residents.len(),
            partitions: self.index.len(),
            dirty_partitions: self.dirty,
            loads: self.loads,
            evictions: self.evictions,
            stores: self.stores,
            store_failures: self.store_failures,
            pinned_partitions: self.residents.list_len(List::Pinned),
            shared_limit_bytes: self.link.as_ref().map_or(0, |l| l.budget().limit()),
        }
    }

    /// `(cardinality, dirty)` of a live partition, from its resident copy if it has one.
    fn state(&self, key: PartitionKey, entry: &IndexEntry) -> (u64, bool) {
        match entry.resident.then(|| self.residents.find(key)).flatten() {
            Some(slot) => {
                let r = self.residents.get(slot);
                (u64::from(r.len), r.dirty)
            }
            None => (entry.cardinality, entry.dirty),
        }
    }

    /// Runs `f` on `key`'s bitmap, made hot first; `None` when the partition does not exist.
    fn read_partition<R>(
        &mut self,
        key: PartitionKey,
        f: impl FnOnce(&RoaringBitmap) -> R,
    ) -> Result<Option<R>> {
        let Some(slot) = self.hot_slot(key, false)? else {
            return Ok(None);
        };
        let out = f(&self.residents.get(slot).bitmap);
        self.touched();
        Ok(Some(out))
    }

    /// Runs `f` on `key`'s bitmap, made hot first (created empty when `create` and the partition
    /// does not exist; `None` when it does not exist and not `create`); `f` is given the
    /// bitmap's cardinality and returns it after its change. If it changed, the partition
    /// becomes dirty and unsaved, and is dropped if empty.
    fn change_partition<R>(
        &mut self,
        key: PartitionKey,
        create: bool,
        f: impl FnOnce(&mut RoaringBitmap, u64) -> (R, u64),
    ) -> Result<Option<R>> {
        let Some(slot) = self.hot_slot(key, create)? else {
            return Ok(None);
        };
        let resident = self.residents.get_mut(slot);
        let before = u64::from(resident.len);
        let (out, after) = f(&mut resident.bitmap, before);
        debug_assert_eq!(after, resident.bitmap.len(), "the cardinality f returned");
        self.note_change(slot, before, after, after == before + 1);
        self.touched();
        Ok(Some(out))
    }

    /// The bookkeeping after the bitmap in `slot` went from `before` values to `after`
    /// (`inserts_only`: by `insert`s alone, which never make a run container): keeps it
    /// compact, records its cardinality, marks it dirty and unsaved, recharges it, and drops
    /// it if it is left empty. Every change of a resident bitmap ends here before anything
    /// else (eviction, the budget) reads the partition's charge.
    fn note_change(&mut self, slot: u32, before: u64, after: u64, inserts_only: bool) {
        let resident = self.residents.get_mut(slot);
        if before != after {
            if inserts_only {
                settle_after_insert(&mut resident.bitmap, resident.charge, after);
            } else {
                settle_len(&mut resident.bitmap, after);
            }
            resident.len = u32::try_from(after).expect("a partition holds at most 2^16 values");
            resident.unsaved = true;
            if !resident.dirty {
                resident.dirty = true;
                self.dirty += 1;
            }
            let charge =
                resident
                    .charge
                    .after_change(&resident.bitmap, after, after > before, inserts_only);
            // Written only when it changed: most inserts leave the charge as it was.
            // `add_many` changes partitions that are in a list: their list's bytes follow.
            if charge != resident.charge {
                let old = self.residents.recharge(slot, charge);
                if charge.bytes != old.bytes {
                    self.partition_bytes = self.partition_bytes - old.bytes + charge.bytes;
                    self.note_peak();
                }
            }
            self.len = self.len - before + after;
        }
        if after == 0 {
            let key = self.residents.key(slot);
            self.drop_partition(key);
        }
    }

    /// The slot of `key`'s partition, made hot first (see [`Self::make_hot`]).
    fn hot_slot(&mut self, key: PartitionKey, create: bool) -> Result<Option<u32>> {
        match self.residents.hot_slot(key) {
            Some(slot) => Ok(Some(slot)),
            None => self.make_hot(key, create),
        }
    }

    /// After every operation on a partition: in a shared budget, publishes this set's bytes
    /// (and that it was used last) and makes room if the total is over the limit.
    fn touched(&mut self) {
        if let Some(link) = &self.link {
            self.publish();
            if link.excess() > 0 {
                self.make_room();
            } else {
                link.settled();
            }
        }
    }

    /// Makes `key` the hot partition and returns its slot: the previous hot one joins its list,
    /// then `key` is taken from its list, loaded, or (when `create`) created empty, and when
    /// that leaves the resident bytes over the budget, others are evicted down to it (before a
    /// load or a creation, which add bytes). `None` if it does not exist and is not to be
    /// created. On `Err` nothing observable has changed.
    fn make_hot(&mut self, key: PartitionKey, create: bool) -> Result<Option<u32>> {
        if let Some(slot) = self.residents.find(key) {
            // No bytes change: eviction is needed only if the previous hot partition was past
            // the budget.
            self.residents.make_hot(slot);
            if self.over_budget() {
                self.make_room();
                // Making room may have moved the hot partition to the slab's first slot.
                return Ok(self.residents.hot_slot(key));
            }
            return Ok(Some(slot));
        }
        let entry = self.index.get(&key).copied();
        if entry.is_none() && !create {
            return Ok(None);
        }
        self.residents.retire_hot();
        // The slot first, so that room is made for the slab's growth too.
        self.residents.reserve_one();
        self.make_room();
        let resident = if let Some(entry) = entry {
            let bitmap = self.load(key, entry.cardinality)?;
            self.loads += 1;
            self.admit(key, bitmap, false, entry.dirty)
        } else {
            self.admit(key, RoaringBitmap::new(), true, false)
        };
        let slot = self.residents.insert_hot(resident);
        self.note_peak();
        if let Some(e) = self.index.get_mut(&key) {
            e.resident = true;
        } else {
            self.index.insert(
                key,
                IndexEntry {
                    cardinality: 0,
                    resident: true,
                    dirty: false,
                },
            );
        }
        Ok(Some(slot))
    }

    /// Whether the resident bytes, with the charge, are over this set's budget, or the shared
    /// budget's total over its limit (as last published).
    fn over_budget(&self) -> bool {
        self.resident_bytes() + self.charged > self.budget
            || self.link.as_ref().is_some_and(|l| l.excess() > 0)
    }

    /// Charges a bitmap that becomes resident.
    fn admit(
        &mut self,
        key: PartitionKey,
        bitmap: RoaringBitmap,
        unsaved: bool,
        dirty: bool,
    ) -> Resident {
        let charge = Charge::of(&bitmap, Charge::default());
        self.partition_bytes += charge.bytes;
        Resident::new(key, bitmap, charge, unsaved, dirty)
    }

    /// Loads a partition the index lists with `expected` entries, checking it.
    fn load(&mut self, key: PartitionKey, expected: u64) -> Result<RoaringBitmap> {
        let bad = |kind| Error::corrupted_at(key.place(), kind);
        let mut bitmap = self
            .store
            .load(key)?
            .ok_or_else(|| bad(CorruptionKind::Missing))?;
        if bitmap.max().is_some_and(|m| m > LAST_OFFSET) {
            return Err(bad(CorruptionKind::InvalidField(
                "offsets beyond the partition",
            )));
        }
        if bitmap.len() != expected {
            return Err(bad(CorruptionKind::CountMismatch {
                found: bitmap.len(),
                expected,
            }));
        }
        settle(&mut bitmap);
        Ok(bitmap)
    }

    /// Evicts listed partitions until the resident bytes are within the budget (the hot
    /// partition is never evicted; one the store cannot take is pinned): saved partitions
    /// first, this set's and then, in a shared budget, other sets' (asked through the budget),
    /// and only then unsaved ones, which are stored first (a write on this thread). The slab's
    /// spare slots are freed if the resident bytes are still over the budget.
    fn make_room(&mut self) {
        let room = self.reclaim_shared(Releasable::Saved);
        self.evict_to(room, false);
        if self.resident_bytes() > room {
            let room = self.reclaim_shared(Releasable::Any);
            self.evict_to(room, true);
            if self.resident_bytes() > room {
                self.free_tables();
            }
        }
        if let Some(link) = &self.link {
            self.publish();
            link.settled();
        }
    }

    /// What this set may hold now: its budget less the charge and, in a shared budget, what
    /// the other members hold after they were asked to release memory of `what` (if the
    /// shared total is over the limit).
    fn reclaim_shared(&self, what: Releasable) -> usize {
        let room = self.budget.saturating_sub(self.charged);
        let Some(link) = &self.link else {
            return room;
        };
        self.publish();
        link.reclaim_from_others(what);
        room.min(link.room().saturating_sub(self.charged))
    }

    /// Evicts listed partitions, saved ones first, until the resident bytes are at most `room`
    /// or none of what `unsaved_too` allows is left.
    fn evict_to(&mut self, room: usize, unsaved_too: bool) {
        while self.resident_bytes() > room && self.evict_one(unsaved_too) {}
    }

    /// Gives back the slab's spare slots when no partition but the hot one is resident.
    fn free_tables(&mut self) {
        self.residents.shrink();
    }

    /// Evicts the least recently used saved partition (dropped: the store holds it) or, when
    /// none is listed and `unsaved_too`, the least recently used unsaved one, storing it first.
    /// If the store fails, or failed since the last [`Self::resume_stores`], the unsaved
    /// partition is pinned instead: it stays resident, past the budget. Returns `false` when
    /// there was nothing to evict.
    fn evict_one(&mut self, unsaved_too: bool) -> bool {
        let slot = if let Some(slot) = self.residents.oldest(List::Saved) {
            slot
        } else if let Some(slot) = unsaved_too
            .then(|| self.residents.oldest(List::Unsaved))
            .flatten()
        {
            let key = self.residents.key(slot);
            if !self.stores_blocked
                && self
                    .store
                    .store(key, &self.residents.get(slot).bitmap)
                    .is_err()
            {
                // The error itself is not the caller's: nothing is lost, and the persistence
                // layer's next flush meets the same condition and reports it.
                self.store_failures += 1;
                self.stores_blocked = true;
            }
            if self.stores_blocked {
                self.residents.relist(slot, List::Pinned, true);
                return true;
            }
            self.stores += 1;
            slot
        } else {
            return false;
        };
        let key = self.residents.key(slot);
        let resident = self.residents.remove(slot);
        self.partition_bytes -= resident.charge.bytes;
        if let Some(entry) = self.index.get_mut(&key) {
            entry.resident = false;
            entry.cardinality = u64::from(resident.len);
            entry.dirty = resident.dirty;
        }
        self.evictions += 1;
        true
    }

    /// Removes a partition entirely: index, memory, and the store's copy.
    fn drop_partition(&mut self, key: PartitionKey) {
        let Some(entry) = self.index.remove(&key) else {
            return;
        };
        let (cardinality, dirty) = self.state(key, &entry);
        self.len -= cardinality;
        if dirty {
            self.dirty -= 1;
        }
        if let Some(slot) = self.residents.find(key) {
            let resident = self.residents.remove(slot);
            self.partition_bytes -= resident.charge.bytes;
        }
        self.free_tables();
        self.store.forget(key);
    }

    /// The first range met walking in `direction`.
    fn first_visited(&mut self, direction: Direction) -> Result<Option<AckRange>> {
        let mut found = None;
        self.visit(direction, &mut |r| {
            found = Some(r);
            false
        })?;
        Ok(found)
    }

    /// Feeds every maximal range, in `direction`, to `f` until it returns `false`, loading one
    /// partition at a time.
    fn visit(&mut self, direction: Direction, f: &mut dyn FnMut(AckRange) -> bool) -> Result<()> {
        let mut joiner = RangeJoiner::new(direction);
        let mut last_seen: Option<PartitionKey> = None;
        loop {
            let bound = last_seen.map_or(Bound::Unbounded, Bound::Excluded);
            let next = match direction {
                Direction::Ascending => self.index.range((bound, Bound::Unbounded)).next(),
                Direction::Descending => self.index.range((Bound::Unbounded, bound)).next_back(),
            };
            let Some(key) = next.map(|(k, _)| *k) else {
                break;
            };
            last_seen = Some(key);
            if !joiner.could_continue(key)
                && let Some(done) = joiner.finish()
                && !f(done)
            {
                return Ok(());
            }
            let more = self.read_partition(key, |b| joiner.push_bitmap(key, b, f))?;
            if more == Some(false) {
                return Ok(());
            }
        }
        if let Some(r) = joiner.finish() {
            f(r);
        }
        Ok(())
    }
}

/// Positions [`RangeSetWrapper::add_many`] takes at a time, and the most partitions such a group
/// may span to be ordered by partition.
pub const GROUP: usize = 64;

/// `positions` (at most [`GROUP`]) ordered by partition, in `out` when they needed ordering: a
/// counting sort by partition, stable, when they are all in one ledger and span at most
/// [`GROUP`] partitions (a few operations a position); else as they came.
fn by_partition<'a>(positions: &'a [Position], out: &'a mut [Position; GROUP]) -> &'a [Position] {
    debug_assert!(positions.len() <= GROUP);
    let Some(first) = positions.first() else {
        return positions;
    };
    let chunk = |p: &Position| PartitionKey::of(*p).chunk;
    let (mut low, mut high) = (chunk(first), chunk(first));
    let mut one_ledger = true;
    for p in positions {
        one_ledger &= p.ledger_id == first.ledger_id;
        low = low.min(chunk(p));
        high = high.max(chunk(p));
    }
    if !one_ledger || low == high || high - low >= GROUP as u64 {
        return positions;
    }
    // Below `high - low < GROUP`: every index fits, and a count (at most GROUP) fits a u8.
    let bucket = |p: &Position| usize::try_from(chunk(p) - low).unwrap_or(0);
    let mut next = [0u8; GROUP + 1];
    for p in positions {
        next[bucket(p) + 1] += 1;
    }
    for i in 1..next.len() {
        next[i] += next[i - 1];
    }
    for p in positions {
        let place = &mut next[bucket(p)];
        out[usize::from(*place)] = *p;
        *place += 1;
    }
    &out[..positions.len()]
}

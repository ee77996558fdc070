//! [`AckSet`]: every partition of the ack set in memory, without a bound.

use std::collections::BTreeMap;
use std::collections::btree_map;

use roaring::RoaringBitmap;

use super::{
    AckRange, Charge, Direction, PartitionKey, RangeJoiner, chunks, clip, count_clipped, settle,
};
use crate::position::Position;

/// Acknowledged positions as roaring bitmaps, one per partition (a data ledger and a span of
/// `2^PARTITION_BITS` entry ids). Every `u64` entry id is stored exactly.
///
/// Ranges are inclusive, maximal, and never span ledgers. No partition is ever empty.
#[derive(Clone, Debug, Default)]
pub struct AckSet {
    /// Every live partition and the slot holding its bitmap.
    index: BTreeMap<PartitionKey, usize>,
    /// Bitmaps by slot; a slot listed in `free` holds an empty bitmap and no partition.
    slots: Vec<RoaringBitmap>,
    free: Vec<usize>,
    /// The partition last written to, so runs of acks in one partition skip the index.
    hot: Option<(PartitionKey, usize)>,
    len: u64,
}

impl PartialEq for AckSet {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.partitions().eq(other.partitions())
    }
}

impl AckSet {
    /// An empty set.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one position; `true` if it was not acked before.
    pub fn add(&mut self, pos: Position) -> bool {
        let bitmap = self.bitmap_mut(PartitionKey::of(pos));
        let added = bitmap.insert(PartitionKey::offset_of(pos.entry_id));
        if added {
            settle(bitmap);
            self.len += 1;
        }
        added
    }

    /// Adds the entries `first..=last` of one ledger; returns how many were not acked before.
    /// An empty range (`first > last`) adds nothing.
    pub fn add_range(&mut self, ledger_id: u64, first: u64, last: u64) -> u64 {
        let mut added = 0;
        for (key, lo, hi) in chunks(ledger_id, first, last) {
            let bitmap = self.bitmap_mut(key);
            added += bitmap.insert_range(lo..=hi);
            settle(bitmap);
        }
        self.len += added;
        added
    }

    /// The bitmap of `key`, created empty if the partition does not exist yet; the caller
    /// makes it non-empty.
    fn bitmap_mut(&mut self, key: PartitionKey) -> &mut RoaringBitmap {
        let slot = match self.hot {
            Some((hot, slot)) if hot == key => slot,
            _ => {
                let slot = if let Some(&slot) = self.index.get(&key) {
                    slot
                } else {
                    let slot = self.free.pop().unwrap_or_else(|| {
                        self.slots.push(RoaringBitmap::new());
                        self.slots.len() - 1
                    });
                    self.index.insert(key, slot);
                    slot
                };
                self.hot = Some((key, slot));
                slot
            }
        };
        &mut self.slots[slot]
    }

    /// The bitmap of an existing partition.
    fn bitmap(&self, key: PartitionKey) -> Option<&RoaringBitmap> {
        let slot = match self.hot {
            Some((hot, slot)) if hot == key => slot,
            _ => *self.index.get(&key)?,
        };
        self.slots.get(slot)
    }

    /// Removes a partition from the index and frees its slot; returns its cardinality.
    fn release(&mut self, key: PartitionKey, slot: usize) -> u64 {
        if self.hot.is_some_and(|(hot, _)| hot == key) {
            self.hot = None;
        }
        let bitmap = std::mem::take(&mut self.slots[slot]);
        self.free.push(slot);
        bitmap.len()
    }

    /// Whether `pos` is acked.
    #[must_use]
    pub fn contains(&self, pos: Position) -> bool {
        self.bitmap(PartitionKey::of(pos))
            .is_some_and(|b| b.contains(PartitionKey::offset_of(pos.entry_id)))
    }

    /// Drops every position `<= pos` (the mark-delete position moved there). Partitions that
    /// become empty are dropped, so no empty ledger is left behind.
    pub fn remove_at_most(&mut self, pos: Position) {
        let key = PartitionKey::of(pos);
        let kept = self.index.split_off(&key);
        let below = std::mem::replace(&mut self.index, kept);
        for (k, slot) in below {
            self.len -= self.release(k, slot);
        }
        if let Some(&slot) = self.index.get(&key) {
            let bitmap = &mut self.slots[slot];
            self.len -= bitmap.remove_range(..=PartitionKey::offset_of(pos.entry_id));
            if bitmap.is_empty() {
                self.index.remove(&key);
                self.release(key, slot);
            } else {
                settle(bitmap);
            }
        }
    }

    /// The lowest maximal range.
    #[must_use]
    pub fn first_range(&self) -> Option<AckRange> {
        self.ranges().next()
    }

    /// The highest maximal range.
    #[must_use]
    pub fn last_range(&self) -> Option<AckRange> {
        let mut joiner = RangeJoiner::new(Direction::Descending);
        let mut found = None;
        for (key, bitmap) in self.partitions().rev() {
            let more = joiner.push_bitmap(key, bitmap, &mut |r| {
                found = Some(r);
                false
            });
            if !more {
                return found;
            }
        }
        joiner.finish()
    }

    /// Every maximal inclusive range, ascending. A range never spans two ledgers.
    #[must_use]
    pub fn ranges(&self) -> Ranges<'_> {
        Ranges {
            index: self.index.iter(),
            slots: &self.slots,
            current: None,
            joiner: RangeJoiner::new(Direction::Ascending),
        }
    }

    /// Number of maximal ranges (walks every range).
    #[must_use]
    pub fn range_count(&self) -> u64 {
        self.ranges().map(|_| 1).sum()
    }

    /// Number of acked positions.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing is acked.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of acked positions in `from..=to` (0 when `from > to`).
    #[must_use]
    pub fn cardinality_between(&self, from: Position, to: Position) -> u64 {
        if from > to {
            return 0;
        }
        self.index
            .range(PartitionKey::of(from)..=PartitionKey::of(to))
            .map(|(key, &slot)| count_clipped(&self.slots[slot], clip(*key, from, to)))
            .sum()
    }

    /// The lowest and the highest acked positions.
    #[must_use]
    pub fn span(&self) -> Option<(Position, Position)> {
        let (first_key, first) = self.partitions().next()?;
        let (last_key, last) = self.partitions().next_back()?;
        Some((
            first_key.position(first.min()?),
            last_key.position(last.max()?),
        ))
    }

    /// Drops every ack.
    pub fn clear(&mut self) {
        self.index.clear();
        self.slots.clear();
        self.free.clear();
        self.hot = None;
        self.len = 0;
    }

    /// Every partition with its bitmap (`entry_id - key.first_entry()`), ascending.
    #[must_use]
    pub fn partitions(
        &self,
    ) -> impl DoubleEndedIterator<Item = (PartitionKey, &RoaringBitmap)> + '_ {
        self.index.iter().map(|(k, &slot)| (*k, &self.slots[slot]))
    }

    /// Number of partitions.
    #[must_use]
    pub fn partition_count(&self) -> usize {
        self.index.len()
    }

    /// Memory the set's partitions hold, measured as the wrapper charges a partition it has just
    /// loaded: array containers by capacity, bitmap containers at 8 KiB, run containers at twice
    /// their runs (the set does not track how many runs they once held), plus
    /// `PARTITION_OVERHEAD_BYTES` per partition.
    #[must_use]
    pub fn heap_bytes(&self) -> usize {
        self.partitions()
            .map(|(_, b)| Charge::of(b, Charge::default()).bytes)
            .sum()
    }
}

/// Iterator over the maximal ranges of an [`AckSet`], ascending.
pub struct Ranges<'a> {
    index: btree_map::Iter<'a, PartitionKey, usize>,
    slots: &'a [RoaringBitmap],
    current: Option<(PartitionKey, roaring::bitmap::Iter<'a>)>,
    joiner: RangeJoiner,
}

impl std::fmt::Debug for Ranges<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ranges")
            .field("pending", &self.joiner.pending)
            .finish_non_exhaustive()
    }
}

impl Iterator for Ranges<'_> {
    type Item = AckRange;

    fn next(&mut self) -> Option<AckRange> {
        loop {
            if let Some((key, runs)) = &mut self.current
                && let Some(run) = runs.next_range()
            {
                if let Some(done) = self.joiner.push(*key, *run.start(), *run.end()) {
                    return Some(done);
                }
                continue;
            }
            match self.index.next() {
                Some((key, &slot)) => self.current = Some((*key, self.slots[slot].iter())),
                None => return self.joiner.finish(),
            }
        }
    }
}

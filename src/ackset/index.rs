//! [`PartitionIndex`]: a map from partition key to a value, ordered by key, that keeps a few
//! entries in a sorted vector and more in a B-tree. The one ordered map keyed by partition of
//! the crate: the ack set's index of live partitions (`FEW` = 8) and a cursor's rows in the
//! journal index (`journal::rows`, `FEW` = 32) are both one.
//!
//! A store holds many cursors, and most of them have one or two live partitions: a `BTreeMap`
//! takes a whole leaf (11 slots: 368 bytes with the ack set's 32-byte entries, about 700 with
//! the journal's 64-byte rows) for the first one, where the vector takes one entry's bytes: it
//! grows by exactly one entry per insert. Past `FEW` entries the index is a B-tree, so no
//! operation costs more than `O(FEW)` over the B-tree's: inserting or removing near the front
//! of a long index (mark-delete moving over thousands of partitions) stays logarithmic. It
//! returns to the vector once a removal leaves half of `FEW` or fewer, so a size going back and
//! forth across `FEW` does not move the entries on every change.
//!
//! Invariant: iteration is in ascending key order and a key appears once, whichever form holds
//! the entries; two indexes with the same entries are equal whatever their form.

use std::collections::{BTreeMap, btree_map};
use std::ops::{Bound, RangeBounds};
use std::slice;

use super::PartitionKey;

/// Partition keys to `V`, ascending; at most `FEW` entries in a sorted vector, more in a
/// B-tree (see the module docs).
#[derive(Clone, Debug)]
pub struct PartitionIndex<V, const FEW: usize>(Form<V>);

#[derive(Clone, Debug)]
enum Form<V> {
    /// At most `FEW` entries, sorted by key, keys unique.
    Few(Vec<(PartitionKey, V)>),
    /// More than `FEW / 2`.
    Many(BTreeMap<PartitionKey, V>),
}

impl<V, const FEW: usize> Default for PartitionIndex<V, FEW> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V: PartialEq, const FEW: usize> PartialEq for PartitionIndex<V, FEW> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<V: Eq, const FEW: usize> Eq for PartitionIndex<V, FEW> {}

/// The entries of a [`PartitionIndex`] in a key range, either end first.
#[derive(Clone, Debug)]
pub enum Iter<'a, V> {
    /// Of the vector.
    Few(slice::Iter<'a, (PartitionKey, V)>),
    /// Of the B-tree.
    Many(btree_map::Range<'a, PartitionKey, V>),
}

impl<'a, V> Iterator for Iter<'a, V> {
    type Item = (&'a PartitionKey, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Self::Few(it) => it.next().map(|(k, v)| (k, v)),
            Self::Many(it) => it.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Self::Few(it) => it.size_hint(),
            Self::Many(it) => it.size_hint(),
        }
    }
}

impl<V> DoubleEndedIterator for Iter<'_, V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        match self {
            Self::Few(it) => it.next_back().map(|(k, v)| (k, v)),
            Self::Many(it) => it.next_back(),
        }
    }
}

/// Where the entries of `range` start or end in `entries` (sorted): the first index past
/// every key below the start, and the first index past every key within the end.
fn span<V>(
    entries: &[(PartitionKey, V)],
    range: &impl RangeBounds<PartitionKey>,
) -> (usize, usize) {
    let start = match range.start_bound() {
        Bound::Included(s) => entries.partition_point(|(k, _)| k < s),
        Bound::Excluded(s) => entries.partition_point(|(k, _)| k <= s),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(e) => entries.partition_point(|(k, _)| k <= e),
        Bound::Excluded(e) => entries.partition_point(|(k, _)| k < e),
        Bound::Unbounded => entries.len(),
    };
    // An empty range (start past end) yields nothing, as a B-tree's does for valid bounds.
    (start, end.max(start))
}

impl<V, const FEW: usize> PartitionIndex<V, FEW> {
    /// No entry.
    #[must_use]
    pub const fn new() -> Self {
        Self(Form::Few(Vec::new()))
    }

    /// The entries of an iterator of `(key, value)`; of a key given twice, the later value
    /// stands (as inserting them one by one would leave it). Sorts once: O(n log n) whatever
    /// the order. (An inherent function, not `FromIterator`: a trait impl naming the key type
    /// would make it reachable from the crate root, where it cannot be named.)
    pub fn from_pairs(iter: impl IntoIterator<Item = (PartitionKey, V)>) -> Self {
        let mut entries: Vec<(PartitionKey, V)> = iter.into_iter().collect();
        // Stable: of equal keys the later comes later. `dedup_by` keeps the first of a run and
        // passes each later one as `later`: its value moves into the kept one, so the last
        // value of a key stands. In place: no second vector.
        entries.sort_by_key(|(k, _)| *k);
        entries.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                std::mem::swap(&mut later.1, &mut kept.1);
            }
            same
        });
        if entries.len() <= FEW {
            // Reallocates only when keys repeated or the iterator over-reserved.
            entries.shrink_to_fit();
            Self(Form::Few(entries))
        } else {
            Self(Form::Many(entries.into_iter().collect()))
        }
    }

    /// Number of entries.
    #[must_use]
    pub fn len(&self) -> usize {
        match &self.0 {
            Form::Few(v) => v.len(),
            Form::Many(m) => m.len(),
        }
    }

    /// Whether there is no entry.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The capacity of the sorted vector, in entries, or `None` while the entries are in a
    /// B-tree (for memory accounting and its tests).
    #[must_use]
    pub fn vector_capacity(&self) -> Option<usize> {
        match &self.0 {
            Form::Few(v) => Some(v.capacity()),
            Form::Many(_) => None,
        }
    }

    /// Removes every entry and frees the memory.
    pub fn clear(&mut self) {
        *self = Self::new();
    }

    /// The value of `key`.
    #[must_use]
    pub fn get(&self, key: &PartitionKey) -> Option<&V> {
        match &self.0 {
            Form::Few(v) => v
                .binary_search_by(|(k, _)| k.cmp(key))
                .ok()
                .map(|i| &v[i].1),
            Form::Many(m) => m.get(key),
        }
    }

    /// The value of `key`, to change.
    pub fn get_mut(&mut self, key: &PartitionKey) -> Option<&mut V> {
        match &mut self.0 {
            Form::Few(v) => v
                .binary_search_by(|(k, _)| k.cmp(key))
                .ok()
                .map(|i| &mut v[i].1),
            Form::Many(m) => m.get_mut(key),
        }
    }

    /// Whether `key` has an entry.
    #[must_use]
    pub fn contains_key(&self, key: &PartitionKey) -> bool {
        self.get(key).is_some()
    }

    /// Sets the value of `key`; returns the one it replaced.
    pub fn insert(&mut self, key: PartitionKey, value: V) -> Option<V> {
        match &mut self.0 {
            Form::Few(v) => match v.binary_search_by(|(k, _)| k.cmp(&key)) {
                Ok(i) => Some(std::mem::replace(&mut v[i].1, value)),
                Err(_) if v.len() >= FEW => {
                    let mut m: BTreeMap<PartitionKey, V> = std::mem::take(v).into_iter().collect();
                    m.insert(key, value);
                    self.0 = Form::Many(m);
                    None
                }
                Err(i) => {
                    // Exactly the entries' room: most indexes stay at one or two entries.
                    v.reserve_exact(1);
                    v.insert(i, (key, value));
                    None
                }
            },
            Form::Many(m) => m.insert(key, value),
        }
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &PartitionKey) -> Option<V> {
        let removed = match &mut self.0 {
            Form::Few(v) => {
                let i = v.binary_search_by(|(k, _)| k.cmp(key)).ok()?;
                Some(v.remove(i).1)
            }
            Form::Many(m) => m.remove(key),
        };
        self.shrink();
        removed
    }

    /// Keeps only the entries for which `keep` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(&PartitionKey, &mut V) -> bool) {
        match &mut self.0 {
            Form::Few(v) => v.retain_mut(|(k, value)| keep(k, value)),
            Form::Many(m) => m.retain(|k, value| keep(k, value)),
        }
        self.shrink();
    }

    /// After a removal: an empty vector's memory freed, and back to the vector (of exactly
    /// the entries) once a B-tree holds half of `FEW` or fewer.
    fn shrink(&mut self) {
        match &mut self.0 {
            Form::Few(v) if v.is_empty() => *v = Vec::new(),
            Form::Many(m) if m.len() <= FEW / 2 => {
                self.0 = Form::Few(std::mem::take(m).into_iter().collect());
            }
            _ => {}
        }
    }

    /// The entries with keys in `range`, ascending (or from the end, with `next_back`).
    #[must_use]
    pub fn range(&self, range: impl RangeBounds<PartitionKey>) -> Iter<'_, V> {
        match &self.0 {
            Form::Few(v) => {
                let (start, end) = span(v, &range);
                Iter::Few(v[start..end].iter())
            }
            Form::Many(m) => Iter::Many(m.range(range)),
        }
    }

    /// Every entry, ascending.
    // No `IntoIterator` for `&PartitionIndex`: that generic impl makes `PartitionKey` count as
    // reachable from the crate root in the build without `internals`, which CI's
    // `-D unnameable_types` refuses.
    #[allow(clippy::iter_without_into_iter)]
    #[must_use]
    pub fn iter(&self) -> Iter<'_, V> {
        self.range(..)
    }

    /// Every key, ascending.
    pub fn keys(&self) -> impl Iterator<Item = &PartitionKey> {
        self.iter().map(|(k, _)| k)
    }

    /// Every value, in ascending key order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }

    /// Every value, in ascending key order, to change in place.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        // One of the two is empty: no boxing, one iterator type for both forms.
        let (few, many) = match &mut self.0 {
            Form::Few(v) => (Some(v.iter_mut().map(|(_, value)| value)), None),
            Form::Many(m) => (None, Some(m.values_mut())),
        };
        few.into_iter().flatten().chain(many.into_iter().flatten())
    }

    /// The entry of the lowest key.
    #[must_use]
    pub fn first_key_value(&self) -> Option<(&PartitionKey, &V)> {
        self.iter().next()
    }

    /// The entry of the highest key.
    #[must_use]
    pub fn last_key_value(&self) -> Option<(&PartitionKey, &V)> {
        self.iter().next_back()
    }
}

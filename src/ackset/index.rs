//! [`PartitionIndex`]: a map from partition key to a value, ordered by key, that keeps a few
//! entries in a sorted vector of exactly their number and more in a B-tree.
//!
//! A store holds a ack set per cursor, and most cursors' sets have one or two live partitions:
//! a `BTreeMap` takes a whole leaf (11 slots, 368 bytes with the ack set's 32-byte entries) for
//! the first one, where the vector takes 32 bytes. Past [`FEW`] entries the index is a B-tree,
//! so no operation costs more than `O(FEW)` over the B-tree's: inserting or removing near the
//! front of a long index (mark-delete moving over thousands of partitions) stays logarithmic.
//! It returns to the vector only when cleared.

use std::collections::{BTreeMap, btree_map};
use std::ops::{Bound, RangeBounds};
use std::slice;

use super::PartitionKey;

/// Most entries the sorted vector holds; one more moves them into a B-tree.
pub const FEW: usize = 8;

/// Partition keys to `V`, ascending.
#[derive(Clone, Debug)]
pub enum PartitionIndex<V> {
    /// At most [`FEW`] entries, sorted by key, in a vector of exactly that capacity.
    Few(Vec<(PartitionKey, V)>),
    /// More.
    Many(BTreeMap<PartitionKey, V>),
}

impl<V> Default for PartitionIndex<V> {
    fn default() -> Self {
        Self::Few(Vec::new())
    }
}

/// The entries of a [`PartitionIndex`] in a key range, either end first.
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
}

impl<V> DoubleEndedIterator for Iter<'_, V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        match self {
            Self::Few(it) => it.next_back().map(|(k, v)| (k, v)),
            Self::Many(it) => it.next_back(),
        }
    }
}

impl<'a, V> IntoIterator for &'a PartitionIndex<V> {
    type Item = (&'a PartitionKey, &'a V);
    type IntoIter = Iter<'a, V>;

    fn into_iter(self) -> Iter<'a, V> {
        self.iter()
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

impl<V> PartitionIndex<V> {
    /// Number of entries.
    #[must_use]
    pub fn len(&self) -> usize {
        match self {
            Self::Few(v) => v.len(),
            Self::Many(m) => m.len(),
        }
    }

    /// Whether there is no entry.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every entry and frees the memory.
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// The value of `key`.
    #[must_use]
    pub fn get(&self, key: &PartitionKey) -> Option<&V> {
        match self {
            Self::Few(v) => v
                .binary_search_by(|(k, _)| k.cmp(key))
                .ok()
                .map(|i| &v[i].1),
            Self::Many(m) => m.get(key),
        }
    }

    /// The value of `key`, to change.
    pub fn get_mut(&mut self, key: &PartitionKey) -> Option<&mut V> {
        match self {
            Self::Few(v) => v
                .binary_search_by(|(k, _)| k.cmp(key))
                .ok()
                .map(|i| &mut v[i].1),
            Self::Many(m) => m.get_mut(key),
        }
    }

    /// Sets the value of `key`; returns the one it replaced.
    pub fn insert(&mut self, key: PartitionKey, value: V) -> Option<V> {
        match self {
            Self::Few(v) => match v.binary_search_by(|(k, _)| k.cmp(&key)) {
                Ok(i) => Some(std::mem::replace(&mut v[i].1, value)),
                Err(_) if v.len() == FEW => {
                    let mut m: BTreeMap<PartitionKey, V> = std::mem::take(v).into_iter().collect();
                    m.insert(key, value);
                    *self = Self::Many(m);
                    None
                }
                Err(i) => {
                    // Exactly the entries' room: most indexes stay at one or two entries.
                    v.reserve_exact(1);
                    v.insert(i, (key, value));
                    None
                }
            },
            Self::Many(m) => m.insert(key, value),
        }
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &PartitionKey) -> Option<V> {
        match self {
            Self::Few(v) => {
                let i = v.binary_search_by(|(k, _)| k.cmp(key)).ok()?;
                let (_, value) = v.remove(i);
                if v.is_empty() {
                    *v = Vec::new();
                }
                Some(value)
            }
            Self::Many(m) => m.remove(key),
        }
    }

    /// The entries with keys in `range`, ascending (or from the end, with `next_back`).
    #[must_use]
    pub fn range(&self, range: impl RangeBounds<PartitionKey>) -> Iter<'_, V> {
        match self {
            Self::Few(v) => {
                let (start, end) = span(v, &range);
                Iter::Few(v[start..end].iter())
            }
            Self::Many(m) => Iter::Many(m.range(range)),
        }
    }

    /// Every entry, ascending.
    #[must_use]
    pub fn iter(&self) -> Iter<'_, V> {
        self.range(..)
    }

    /// Every key, ascending.
    pub fn keys(&self) -> impl Iterator<Item = &PartitionKey> {
        self.iter().map(|(k, _)| k)
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

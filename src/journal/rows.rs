//! A cursor's rows in the journal index: where each of its partitions' records is.
//!
//! Owns: [`Rows`], an ordered map from [`PartitionKey`] to [`PartLoc`] sized for the common case
//! of a store of many cursors: most cursors hold one to a few rows, which a sorted vector keeps
//! in a 64-byte slot each (a `BTreeMap` takes a node of eleven slots, about 700 bytes, for one
//! row). Past [`FEW`] rows it is a `BTreeMap`, so inserting or removing one row of a cursor with
//! many costs O(log n), never a shift of every row.
//!
//! Invariant: iteration is in ascending key order and a key appears once, whichever form holds
//! the rows; two `Rows` with the same rows are equal whatever their form.

use std::collections::BTreeMap;
use std::collections::btree_map;

use super::index::PartLoc;
use crate::ackset::PartitionKey;

/// One row: a partition and where its record is.
pub type Row = (PartitionKey, PartLoc);

/// Most rows kept in the sorted vector: past it the rows move to a `BTreeMap`, and back once
/// they fall to half of it (never back and forth on every change at the boundary).
pub const FEW: usize = 32;

/// An ordered map of a cursor's partitions to their records (see the module docs).
#[derive(Debug, Clone)]
pub struct Rows(Form);

#[derive(Debug, Clone)]
enum Form {
    /// Sorted by key, keys unique, at most [`FEW`] rows.
    Few(Vec<(PartitionKey, PartLoc)>),
    Many(BTreeMap<PartitionKey, PartLoc>),
}

impl Default for Rows {
    fn default() -> Self {
        Self::new()
    }
}

impl PartialEq for Rows {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Rows {}

impl Rows {
    /// No rows.
    #[must_use]
    pub const fn new() -> Self {
        Self(Form::Few(Vec::new()))
    }

    /// How many rows.
    #[must_use]
    pub fn len(&self) -> usize {
        match &self.0 {
            Form::Few(v) => v.len(),
            Form::Many(m) => m.len(),
        }
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The row of `key`.
    #[must_use]
    pub fn get(&self, key: &PartitionKey) -> Option<&PartLoc> {
        match &self.0 {
            Form::Few(v) => v
                .binary_search_by(|(k, _)| k.cmp(key))
                .ok()
                .map(|i| &v[i].1),
            Form::Many(m) => m.get(key),
        }
    }

    /// Whether `key` has a row.
    #[must_use]
    pub fn contains_key(&self, key: &PartitionKey) -> bool {
        self.get(key).is_some()
    }

    /// Sets the row of `key`; returns the one it replaces.
    pub fn insert(&mut self, key: PartitionKey, part: PartLoc) -> Option<PartLoc> {
        match &mut self.0 {
            Form::Few(v) => match v.binary_search_by(|(k, _)| k.cmp(&key)) {
                Ok(i) => Some(std::mem::replace(&mut v[i].1, part)),
                Err(i) if v.len() < FEW => {
                    v.insert(i, (key, part));
                    None
                }
                Err(_) => {
                    let mut m: BTreeMap<_, _> = std::mem::take(v).into_iter().collect();
                    m.insert(key, part);
                    self.0 = Form::Many(m);
                    None
                }
            },
            Form::Many(m) => m.insert(key, part),
        }
    }

    /// Removes the row of `key`; returns it.
    pub fn remove(&mut self, key: &PartitionKey) -> Option<PartLoc> {
        let removed = match &mut self.0 {
            Form::Few(v) => v
                .binary_search_by(|(k, _)| k.cmp(key))
                .ok()
                .map(|i| v.remove(i).1),
            Form::Many(m) => m.remove(key),
        };
        self.shrink();
        removed
    }

    /// Keeps only the rows for which `keep` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(&PartitionKey, &mut PartLoc) -> bool) {
        match &mut self.0 {
            Form::Few(v) => v.retain_mut(|(k, p)| keep(k, p)),
            Form::Many(m) => m.retain(|k, p| keep(k, p)),
        }
        self.shrink();
    }

    /// Back to the vector once a map holds half of [`FEW`] rows or fewer.
    fn shrink(&mut self) {
        if let Form::Many(m) = &mut self.0
            && m.len() <= FEW / 2
        {
            self.0 = Form::Few(std::mem::take(m).into_iter().collect());
        }
    }

    /// Every row, in ascending key order.
    #[must_use]
    // The lint sees `Rows` only when `internals` makes it public.
    #[cfg_attr(
        feature = "internals",
        expect(
            clippy::iter_without_into_iter,
            reason = "a trait impl naming the key and record types would make them reachable \
                      from the crate root, where they cannot be named"
        )
    )]
    pub fn iter(&self) -> Iter<'_> {
        match &self.0 {
            Form::Few(v) => Iter::Few(v.iter()),
            Form::Many(m) => Iter::Many(m.iter()),
        }
    }

    /// Every row's record, in ascending key order, to change in place.
    pub fn values_mut(&mut self) -> Box<dyn Iterator<Item = &mut PartLoc> + '_> {
        match &mut self.0 {
            Form::Few(v) => Box::new(v.iter_mut().map(|(_, p)| p)),
            Form::Many(m) => Box::new(m.values_mut()),
        }
    }

    /// Every row's key, in ascending order.
    pub fn keys(&self) -> impl Iterator<Item = &PartitionKey> {
        self.iter().map(|(k, _)| k)
    }

    /// Every row's record, in ascending key order.
    pub fn values(&self) -> impl Iterator<Item = &PartLoc> {
        self.iter().map(|(_, p)| p)
    }
}

impl Rows {
    /// The rows of an iterator of `(key, record)`; of a key given twice, the later record
    /// stands (as inserting them one by one would leave it). Sorts once: O(n log n) whatever
    /// the order. (An inherent function, not `FromIterator`: a trait impl naming the key and
    /// record types would make them reachable from the crate root, where they cannot be
    /// named.)
    pub fn from_pairs(iter: impl IntoIterator<Item = (PartitionKey, PartLoc)>) -> Self {
        let mut v: Vec<(PartitionKey, PartLoc)> = iter.into_iter().collect();
        // Stable: of equal keys the later stays last, and is the one kept below.
        v.sort_by_key(|(k, _)| *k);
        let mut rows: Vec<(PartitionKey, PartLoc)> = Vec::with_capacity(v.len());
        for (key, part) in v {
            match rows.last_mut() {
                Some(last) if last.0 == key => last.1 = part,
                _ => rows.push((key, part)),
            }
        }
        if rows.len() <= FEW {
            rows.shrink_to_fit();
            Self(Form::Few(rows))
        } else {
            Self(Form::Many(rows.into_iter().collect()))
        }
    }
}

/// The rows of a [`Rows`], in ascending key order.
#[derive(Debug, Clone)]
pub enum Iter<'a> {
    /// Of the sorted vector.
    Few(std::slice::Iter<'a, (PartitionKey, PartLoc)>),
    /// Of the map.
    Many(btree_map::Iter<'a, PartitionKey, PartLoc>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a PartitionKey, &'a PartLoc);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Few(i) => i.next().map(|(k, p)| (k, p)),
            Iter::Many(i) => i.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Iter::Few(i) => i.size_hint(),
            Iter::Many(i) => i.size_hint(),
        }
    }
}

impl ExactSizeIterator for Iter<'_> {}

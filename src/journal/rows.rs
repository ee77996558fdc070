//! A cursor's rows in the journal index: where each of its partitions' records is.
//!
//! Owns: [`Rows`], a cursor's partitions to their records ([`PartLoc`]) in the crate's ordered
//! map keyed by partition ([`PartitionIndex`]) with a bound of [`FEW`], sized for the common
//! case of a store of many cursors: most cursors hold one to a few rows, which its sorted
//! vector keeps in a 64-byte slot each (a `BTreeMap` takes a node of eleven slots, about 700
//! bytes, for one row). Past [`FEW`] rows it is a `BTreeMap`, so inserting or removing one row
//! of a cursor with many costs O(log n), never a shift of every row.

use super::index::PartLoc;
use crate::ackset::PartitionKey;
use crate::ackset::index::PartitionIndex;

/// One row: a partition and where its record is.
pub type Row = (PartitionKey, PartLoc);

/// Most rows kept in the sorted vector: past it the rows move to a `BTreeMap`, and back once
/// they fall to half of it (never back and forth on every change at the boundary).
pub const FEW: usize = 32;

/// An ordered map of a cursor's partitions to their records (see the module docs).
pub type Rows = PartitionIndex<PartLoc, FEW>;

//! Finding a cursor of the topic record's cursor table by name.
//!
//! Owns: an index of the writer's cursor table by name, built from the table at the second
//! lookup of a table of more than a few cursors, then kept up to date by each change of the table
//! ([`CursorNames::changed`]) at the cost of what changed: the chunks that are not the same
//! shared entries any more and the tail past what both tables share. So a topic's n cursor
//! opens (a restart) cost O(n) in all, and a creation costs what its record write costs, not a
//! scan of the table. Must never answer from an index of another table: every change of the
//! table is told to it, and a lookup checks the table's length against the index's.

use std::collections::HashMap;
use std::sync::Arc;

use crate::format::meta::{CursorEntry, CursorTable};

/// Tables of at most this many cursors are scanned: a scan of a few entries costs less than
/// hashing the name, and the index's memory is spent only on large tables.
const SCAN_UP_TO: usize = 32;

/// The cursor table's names, indexed from the second lookup on.
///
/// Invariant: `index`, when present, maps each name of the current table to its id, and
/// `len` is that table's length: its owner calls [`CursorNames::changed`] with the table
/// before and after every replacement or edit. A table that lists a name twice (only damage
/// makes one) is not indexed: it is scanned, and the first entry of the name answers.
#[derive(Debug, Default)]
pub(crate) struct CursorNames {
    /// Name to id, and the length of the table it indexes.
    index: Option<(HashMap<Arc<str>, u64>, usize)>,
    /// Lookups answered by a scan since the index was last dropped (a change of the table does
    /// not reset them: it updates the index at the cost of the change).
    scans: u32,
}

impl CursorNames {
    /// The id `table` gives cursor `name`, if it lists it: that of its first entry of that
    /// name.
    pub(crate) fn id_of(&mut self, table: &CursorTable, name: &str) -> Option<u64> {
        if let Some((index, len)) = &self.index {
            if *len == table.len() {
                return index.get(name).copied();
            }
            // Not the table it was built from: a table changed without `changed`.
            self.drop_index();
        }
        if table.len() <= SCAN_UP_TO || self.scans == 0 {
            self.scans = self.scans.saturating_add(1);
            return scan(table, name);
        }
        let mut index = HashMap::with_capacity(table.len());
        for entry in table.iter() {
            if index.insert(entry.name.clone(), entry.id).is_some() {
                // A name listed twice: scanned, never indexed.
                return scan(table, name);
            }
        }
        let id = index.get(name).copied();
        self.index = Some((index, table.len()));
        id
    }

    /// Follows the table from `before` to `after`: the chunks whose entries are not the same
    /// shared ones, and the tails past their common start, are taken out and put in.
    pub(crate) fn changed(&mut self, before: &CursorTable, after: &CursorTable) {
        // Not indexed yet: the lookups so far still count towards building it.
        let Some((index, len)) = &mut self.index else {
            return;
        };
        let empty: Arc<[CursorEntry]> = Arc::from([]);
        let chunks = before.chunks().len().max(after.chunks().len());
        let mut out: Vec<&CursorEntry> = Vec::new();
        let mut into: Vec<&CursorEntry> = Vec::new();
        for k in 0..chunks {
            let old = before.chunks().get(k).map_or(&empty, |c| &c.entries);
            let new = after.chunks().get(k).map_or(&empty, |c| &c.entries);
            if !Arc::ptr_eq(old, new) {
                out.extend(old.iter());
                into.extend(new.iter());
            }
        }
        let shared = before
            .tail()
            .iter()
            .zip(after.tail())
            .take_while(|(a, b)| a.id == b.id && Arc::ptr_eq(&a.name, &b.name))
            .count();
        out.extend(&before.tail()[shared..]);
        into.extend(&after.tail()[shared..]);
        for entry in out {
            if index.get(&entry.name) == Some(&entry.id) {
                index.remove(&entry.name);
            }
        }
        // A name listed twice is scanned from now on.
        let unique = into
            .into_iter()
            .all(|entry| index.insert(entry.name.clone(), entry.id).is_none());
        *len = after.len();
        if !unique || *len != index.len() {
            self.drop_index();
        }
    }

    /// Drops the index: it is rebuilt on a later lookup.
    fn drop_index(&mut self) {
        self.index = None;
        self.scans = 0;
    }
}

/// The id of the first entry of `table` named `name`.
fn scan(table: &CursorTable, name: &str) -> Option<u64> {
    table.iter().find(|c| &*c.name == name).map(|c| c.id)
}

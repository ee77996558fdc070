//! Finding a cursor of the topic record's cursor table by name.
//!
//! Owns: an index of the writer's cursor table by name, built from the table only when a
//! second lookup comes before the table changes, so a topic's n cursor opens (a restart) cost
//! O(n) in all where a scan per open cost O(n^2), while a creation (one lookup, then a record
//! write that changes the table) builds nothing. Must never answer from an index of another
//! table: every replacement of the table drops it, and a lookup checks what it finds against
//! the table.

use std::collections::HashMap;
use std::sync::Arc;

use crate::format::meta::CursorEntry;

/// Tables of at most this many cursors are scanned: a scan of a few entries costs less than
/// hashing the name, and the index's memory is spent only on large tables.
const SCAN_UP_TO: usize = 32;

/// The cursor table's names, indexed once lookups outnumber the table's changes.
///
/// Invariant: `index`, when present, maps each name of the table it was built from to the
/// position of that name's first entry, and that table is the current one: its owner calls
/// [`CursorNames::changed`] whenever the table is replaced or edited. A lookup also checks
/// the table's length and the entry at the position it finds, and rebuilds on a mismatch: an
/// id it returns is always that of an entry of the current table named `name`.
#[derive(Debug, Default)]
pub(crate) struct CursorNames {
    /// Name to position of its first entry, and the length of the table it indexes.
    index: Option<(HashMap<Arc<str>, usize>, usize)>,
    /// Lookups answered by a scan since the table last changed.
    scans: u32,
}

impl CursorNames {
    /// The id `table` gives cursor `name`, if it lists it: the first entry of that name, as
    /// [`crate::format::meta::TopicRecord::cursor_id`] finds it.
    pub(crate) fn id_of(&mut self, table: &[CursorEntry], name: &str) -> Option<u64> {
        if let Some((index, len)) = &self.index {
            if *len == table.len() {
                match index.get(name) {
                    Some(&at) => {
                        if let Some(entry) = table.get(at).filter(|e| &*e.name == name) {
                            return Some(entry.id);
                        }
                    }
                    None => return None,
                }
            }
            // Not the table it was built from: a table changed without `changed`.
            self.changed();
        }
        if table.len() <= SCAN_UP_TO || self.scans == 0 {
            self.scans = self.scans.saturating_add(1);
            return scan(table, name);
        }
        let mut index = HashMap::with_capacity(table.len());
        for (at, entry) in table.iter().enumerate() {
            index.entry(entry.name.clone()).or_insert(at);
        }
        let id = index.get(name).and_then(|&at| table.get(at)).map(|e| e.id);
        self.index = Some((index, table.len()));
        id
    }

    /// Drops the index: the table was replaced or edited.
    pub(crate) fn changed(&mut self) {
        self.index = None;
        self.scans = 0;
    }
}

/// The id of the first entry of `table` named `name`.
fn scan(table: &[CursorEntry], name: &str) -> Option<u64> {
    table.iter().find(|c| &*c.name == name).map(|c| c.id)
}

//! Positions of entries in a managed ledger.
//!
//! Owns: the total order of entries, (ledger id, entry id), shared by every layer.

use std::fmt;

/// The address of one entry: the ledger that holds it and its id within that ledger.
///
/// Positions are totally ordered by `(ledger_id, entry_id)`, which is the order of appends.
/// Displayed as `L:E`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Position {
    /// The ledger holding the entry.
    pub ledger_id: u64,
    /// The entry's id within its ledger; the first entry of a ledger is 0.
    pub entry_id: u64,
}

impl Position {
    /// Builds a position.
    #[must_use]
    pub const fn new(ledger_id: u64, entry_id: u64) -> Self {
        Self {
            ledger_id,
            entry_id,
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.ledger_id, self.entry_id)
    }
}

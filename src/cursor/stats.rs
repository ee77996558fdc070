//! Counters of a cursor's persistence.
//!
//! Owns: [`PersistStats`], what a cursor's persistence counted since its handle opened (through
//! the journal; while a cursor is read from a cursor ledger, that ledger and the size of the
//! state read). Must never: hold state a flush depends on.

/// Counters of one cursor's persistence since its handle opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PersistStats {
    /// The cursor ledger the cursor is read from, until its first write imports it into the
    /// journal (`None` once it is imported, and for every other cursor).
    pub cursor_ledger: Option<u64>,
    /// Bytes of the committed state where the figure is known: the last single-entry snapshot
    /// staged, or, for a cursor read from a cursor ledger, what its recovery read there.
    pub persisted_bytes: u64,
    /// Records staged into the journal by flushes: partitions, batch records and markers or
    /// snapshots.
    pub entries_written: u64,
    /// Flushes staged (a seek's and a rewind's included).
    pub flushes: u64,
    /// Markers staged.
    pub markers: u64,
    /// Snapshots staged.
    pub snapshots: u64,
    /// Partitions whose changed contents flushes wrote.
    pub partitions_written: u64,
    /// Single-entry flushes that hit a limit and cut ranges.
    pub overflows: u64,
    /// Ranges left out by those flushes, in total.
    pub ranges_cut: u64,
}

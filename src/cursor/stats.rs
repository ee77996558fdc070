//! Counters of a cursor's persistence.
//!
//! Owns: [`PersistStats`], what a cursor's persistence counted since its handle opened (the
//! journal's and a cursor ledger's alike). Must never: hold state a flush depends on.

/// Counters of one cursor's persistence since its handle opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PersistStats {
    /// The cursor ledger, once there is one.
    pub cursor_ledger: Option<u64>,
    /// Bytes of the committed state: the partitions in entries of their own, the index pages
    /// (which carry the small partitions inline) and the marker (or the snapshot), which is what
    /// a recovery reads, less the entry log's frame header around each of those entries.
    pub persisted_bytes: u64,
    /// Entries appended to cursor ledgers (flushes and evictions).
    pub entries_written: u64,
    /// Payload bytes appended to cursor ledgers (flushes and evictions).
    pub bytes_written: u64,
    /// Partitions written because the LRU evicted them dirty.
    pub evictions_stored: u64,
    /// Successful flushes.
    pub flushes: u64,
    /// Markers written.
    pub markers: u64,
    /// Snapshots written.
    pub snapshots: u64,
    /// Rollovers to a new cursor ledger.
    pub rollovers: u64,
    /// Partitions whose changed contents flushes wrote (inline or in entries of their own; what
    /// a rollover carries over unchanged is not counted).
    pub partitions_written: u64,
    /// Index pages written.
    pub pages_written: u64,
    /// Payload bytes the last flush appended.
    pub last_flush_bytes: u64,
    /// Single-entry flushes that hit a limit and cut ranges.
    pub overflows: u64,
    /// Ranges left out by those flushes, in total.
    pub ranges_cut: u64,
    /// Old cursor ledgers whose deletion failed and is retried on the next flush.
    pub pending_deletes: u64,
}

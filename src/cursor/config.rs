//! How cursors keep their acknowledgement state.
//!
//! Owns: [`CursorConfig`] and its enums ([`PersistMode`], [`OverflowPolicy`]). Pure data:
//! this file imports nothing of the cursor layer, which reads it (only the ack set's shared
//! budget handle).

use std::time::Duration;

use crate::ackset::AckBudget;

/// Settings of every cursor of a managed ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CursorConfig {
    /// How the ack state is persisted.
    pub persist_mode: PersistMode,
    /// Largest state a flush writes as one record, in bytes: it caps a single-entry snapshot,
    /// and what the properties may take (see `Cursor::set_property`).
    pub max_entry_size: u32,
    /// Byte budget of the resident ack state (an LRU of ack partitions).
    pub lru_capacity_bytes: usize,
    /// Most ranges a single-entry snapshot holds.
    pub max_ranges_single_entry: u64,
    /// What a single-entry snapshot does past its limits.
    pub on_single_entry_overflow: OverflowPolicy,
    /// Rows of 36 bytes that `max_entry_size` keeps free beside the properties (the inline table
    /// of a cursor ledger's marker), which bounds what the properties may take (see
    /// `Cursor::set_property`).
    pub index_page_rows: usize,
    /// On recovery from a cursor ledger, read and CRC-check every partition a marker
    /// references before accepting it.
    pub verify_on_recover: bool,
    /// How often the flusher pool of the cursors' journal (the store's, or the one a topic
    /// alone hosts) flushes the cursors that changed (`None`: only `flush`, `close` and seeks
    /// write). Its errors are kept and returned by each cursor's next `flush` or `close`.
    pub flush_interval: Option<Duration>,
    /// A memory budget shared with other cursors (what a store sets from
    /// `StoreConfig::ack_memory_bytes`): each cursor's resident ack state (partitions and
    /// partial entries) counts in it, and a cursor that needs room asks the least recently
    /// used others to release theirs before it evicts its own. `lru_capacity_bytes` still
    /// bounds each cursor. `None`: only `lru_capacity_bytes`.
    pub ack_memory: Option<AckBudget>,
}

impl Default for CursorConfig {
    fn default() -> Self {
        Self {
            persist_mode: PersistMode::MultiEntry,
            max_entry_size: 5 << 20,
            lru_capacity_bytes: 64 << 20,
            max_ranges_single_entry: 10_000,
            on_single_entry_overflow: OverflowPolicy::Error,
            index_page_rows: 1024,
            verify_on_recover: true,
            flush_interval: None,
            ack_memory: None,
        }
    }
}

/// How a cursor's ack state is written to its journal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PersistMode {
    /// One snapshot record with every range, capped by `max_ranges_single_entry` and
    /// `max_entry_size`.
    SingleEntry,
    /// Dirty partitions as records of their own plus a marker or delta; no cap.
    #[default]
    MultiEntry,
}

/// What a single-entry flush does when the ranges do not fit in one entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OverflowPolicy {
    /// Fail the flush with [`Error::LimitExceeded`](crate::error::Error::LimitExceeded); nothing is written.
    #[default]
    Error,
    /// Persist the ranges that fit (the lowest ones), log a warning and count the
    /// ranges left out in `PersistStats::ranges_cut`. Acks left out are redelivered after a
    /// restart.
    Warn,
}

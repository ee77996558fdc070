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
    /// Largest cursor-ledger entry, in bytes.
    pub max_entry_size: u32,
    /// Byte budget of the resident ack state (an LRU of ack partitions).
    pub lru_capacity_bytes: usize,
    /// Entries after which a cursor ledger rolls over to a new one.
    pub cursor_ledger_max_entries: u64,
    /// Bytes after which a cursor ledger rolls over to a new one.
    pub cursor_ledger_max_bytes: u64,
    /// Most ranges a single-entry snapshot holds.
    pub max_ranges_single_entry: u64,
    /// What a single-entry snapshot does past its limits.
    pub on_single_entry_overflow: OverflowPolicy,
    /// Most rows an index page of the persisted ack state holds, and most rows a marker holds
    /// inline.
    pub index_page_rows: usize,
    /// Most bytes an index page of the persisted ack state takes, and most bytes of rows a
    /// marker holds inline. A partition whose encoding takes at most a quarter of this is
    /// carried inline by its row rather than in an entry of its own, so a flush after one ack
    /// writes one page of at most this size, at most one partition entry, and the marker.
    pub index_page_bytes: usize,
    /// On recovery, read and CRC-check every partition a marker references before accepting it.
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
            cursor_ledger_max_entries: 50_000,
            cursor_ledger_max_bytes: 1 << 30,
            max_ranges_single_entry: 10_000,
            on_single_entry_overflow: OverflowPolicy::Error,
            index_page_rows: 1024,
            index_page_bytes: 4096,
            verify_on_recover: true,
            flush_interval: None,
            ack_memory: None,
        }
    }
}

/// How a cursor's ack state is written to its cursor ledger.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PersistMode {
    /// One snapshot entry with every range, capped by `max_ranges_single_entry` and the entry
    /// size.
    SingleEntry,
    /// Dirty partitions as their own entries plus a marker; no cap.
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

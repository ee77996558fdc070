//! How cursors keep their acknowledgement state.
//!
//! Owns: [`CursorConfig`] and its enums. Pure data.

use std::time::Duration;

/// How a cursor's individually acknowledged entries are persisted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PersistMode {
    /// One snapshot entry holding every range, up to
    /// [`CursorConfig::max_ranges_single_entry`] ranges.
    SingleEntry,
    /// Each dirty partition of the ack set as its own entry, then a marker that commits them.
    #[default]
    MultiEntry,
}

/// What a single-entry snapshot does when the ack state does not fit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OverflowPolicy {
    /// The flush fails with [`crate::Error::LimitExceeded`]; nothing is cut.
    #[default]
    Error,
    /// The snapshot keeps the lowest ranges that fit, prints a warning and counts the ranges
    /// left out in the cursor's stats; acks left out are delivered again after a restart.
    Warn,
}

/// Settings of every cursor of a managed ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CursorConfig {
    /// How the ack state is persisted.
    pub persist_mode: PersistMode,
    /// Largest cursor-ledger entry, in bytes.
    pub max_entry_size: u32,
    /// Byte budget of the resident ack state (the `RangeSetWrapper` LRU).
    pub lru_capacity_bytes: usize,
    /// Entries after which a cursor ledger rolls over to a new one.
    pub cursor_ledger_max_entries: u64,
    /// Bytes after which a cursor ledger rolls over to a new one.
    pub cursor_ledger_max_bytes: u64,
    /// Most ranges a single-entry snapshot holds.
    pub max_ranges_single_entry: u64,
    /// What a single-entry snapshot does past its limits.
    pub on_single_entry_overflow: OverflowPolicy,
    /// Rows per index page of the persisted ack state, and most rows a marker holds inline.
    pub index_page_rows: usize,
    /// On recovery, read and CRC-check every partition a marker references before accepting it.
    pub verify_on_recover: bool,
    /// How often the persistence layer flushes in the background (`None`: only on `flush`,
    /// `close`, seeks and rewinds). Without that layer nothing flushes in the background.
    pub flush_interval: Option<Duration>,
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
            verify_on_recover: true,
            flush_interval: None,
        }
    }
}

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
    /// The snapshot keeps the oldest ranges that fit, logs a warning and counts the cut in the
    /// cursor's stats.
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
    /// Most ranges a single-entry snapshot holds.
    pub max_ranges_single_entry: u64,
    /// What a single-entry snapshot does past its limits.
    pub on_single_entry_overflow: OverflowPolicy,
    /// Flush in the background this often (`None`: only on `flush` and `close`).
    pub flush_interval: Option<Duration>,
}

impl Default for CursorConfig {
    fn default() -> Self {
        Self {
            persist_mode: PersistMode::MultiEntry,
            max_entry_size: 5 << 20,
            lru_capacity_bytes: 64 << 20,
            cursor_ledger_max_entries: 50_000,
            max_ranges_single_entry: 10_000,
            on_single_entry_overflow: OverflowPolicy::Error,
            flush_interval: None,
        }
    }
}

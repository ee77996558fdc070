//! How a managed ledger lays out its data.
//!
//! Owns: [`LedgerConfig`]. Pure data.

use crate::cursor::CursorConfig;
use crate::log::LogConfig;

/// Settings of a managed ledger (one topic).
#[derive(Debug, Clone)]
pub struct LedgerConfig {
    /// A data ledger is sealed, and the next append starts a new one, once it holds this many
    /// entries (at least 1).
    pub max_entries_per_ledger: u64,
    /// ... or once the payloads appended to it reach this many bytes.
    pub max_ledger_bytes: u64,
    /// Settings of the entry log underneath.
    pub log: LogConfig,
    /// Settings of every cursor.
    pub cursor: CursorConfig,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        Self {
            max_entries_per_ledger: 50_000,
            max_ledger_bytes: 1 << 30,
            log: LogConfig::default(),
            cursor: CursorConfig::default(),
        }
    }
}

//! How a managed ledger lays out its data.
//!
//! Owns: [`LedgerConfig`]. Pure data.

use crate::cursor::CursorConfig;
use crate::log::LogConfig;

/// Settings of a managed ledger (one topic).
#[derive(Debug, Clone)]
pub struct LedgerConfig {
    /// Once a data ledger holds this many entries (at least 1), the next append seals it,
    /// records it in the topic record and starts a new ledger. (Sealing at the next append
    /// rather than at the filling one means an append that returns an error never wrote its
    /// entry; `close` seals the last ledger too.)
    pub max_entries_per_ledger: u64,
    /// The same, once the payloads appended to a data ledger reach this many bytes.
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

//! How a managed ledger lays out its data.
//!
//! Owns: [`LedgerConfig`]. Pure data.

use crate::cursor::CursorConfig;
use crate::format::ledger::{FRAME_HEADER_LEN, HEADER_V3_LEN, footer_len};
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
    /// Whether readers see entries before a sync makes them durable. `false` (the default):
    /// every reader (cursors durable or not, waiting reads, backlogs, `ManagedLedger::read`,
    /// `last_position`, the searches) stops at the last synced entry, as `BookKeeper`'s
    /// last-add-confirmed, and a waiting read is woken by the sync that makes entries durable.
    /// `true`: an entry is readable as soon as `append` returns. The consequence: after a
    /// crash (a power cut, or a process crash before the data reached the kernel), consumers
    /// may have received, processed and acknowledged entries that no longer exist, and that
    /// a producer was never told were stored; a later entry then takes their positions. See
    /// `docs/cursors.md`, "Read visibility".
    pub read_unsynced: bool,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        Self {
            max_entries_per_ledger: 50_000,
            max_ledger_bytes: 1 << 30,
            log: LogConfig::default(),
            cursor: CursorConfig::default(),
            read_unsynced: false,
        }
    }
}

impl LedgerConfig {
    /// The largest a data ledger file of this configuration can grow: its header, payloads up
    /// to [`LedgerConfig::max_ledger_bytes`] plus the one largest entry that crosses it (a
    /// ledger is sealed at the *next* append), a frame header per entry, and the footer that
    /// indexes [`LedgerConfig::max_entries_per_ledger`] entries. On storage that caps a file
    /// (RADOS refuses an object above `osd_max_object_size`, 128 MiB by default), keep this
    /// at or below the cap, or appends fail once a ledger reaches it.
    #[must_use]
    pub fn largest_ledger_file(&self) -> u64 {
        let per_entry = (FRAME_HEADER_LEN as u64).saturating_add(8);
        let footer = footer_len(0).unwrap_or(u64::MAX);
        (HEADER_V3_LEN as u64)
            .saturating_add(self.max_ledger_bytes.saturating_sub(1))
            .saturating_add(u64::from(self.log.max_entry_size))
            .saturating_add(self.max_entries_per_ledger.saturating_mul(per_entry))
            .saturating_add(footer)
    }
}

//! What the examples that reopen a store `ackstore perf --topics T --cursors C --dir D --keep`
//! left share with that workload: its configuration and its names.

use std::time::Duration;

use ackstore::{CursorConfig, LedgerConfig, StoreConfig};

/// `ackstore perf --topics`'s configuration for a store of `cursors` cursors: ledgers of 10,000
/// entries, no background flush (the caller's ticks flush), and the shared ack budget of 150
/// bytes a cursor, as with `--ack-budget-per-cursor-bytes 150`.
pub fn config(cursors: usize) -> StoreConfig {
    StoreConfig {
        ledger: LedgerConfig {
            max_entries_per_ledger: 10_000,
            cursor: CursorConfig {
                lru_capacity_bytes: 64 << 10,
                flush_interval: Some(Duration::from_secs(3600)),
                ..CursorConfig::default()
            },
            ..LedgerConfig::default()
        },
        ack_memory_bytes: Some(150 * cursors),
        ..StoreConfig::default()
    }
}

/// The workload's name of topic `t`.
pub fn topic_name(t: usize) -> String {
    format!("persistent://tenant/ns/topic-{t}")
}

/// The workload's name of a topic's cursor `c`.
pub fn cursor_name(c: usize) -> String {
    format!("sub-{c}")
}

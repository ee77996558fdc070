//! The `ackstore perf --topics` workload's configuration and names, in one file: the command's
//! `perf_store` module uses it, and the examples that reopen a store the command kept
//! (`examples/store_reopen.rs`, `examples/store_ticks.rs`) and the heap test of a reopened
//! store's cursors (`tests/heap/cursor.rs`) take it by `#[path]`, so they open what it wrote.

use std::time::Duration;

use ackstore::{CursorConfig, LedgerConfig, StoreConfig};

/// The cursor settings of both of the command's runs: ledgers of 10,000 entries, and a flush
/// interval so the per-cursor path starts its flusher thread per cursor (as a broker would),
/// long enough that only the ticks flush.
pub fn ledger_config() -> LedgerConfig {
    LedgerConfig {
        max_entries_per_ledger: 10_000,
        cursor: CursorConfig {
            lru_capacity_bytes: 64 << 10,
            flush_interval: Some(Duration::from_secs(3600)),
            ..CursorConfig::default()
        },
        ..LedgerConfig::default()
    }
}

/// The store's configuration with a shared ack budget of `ack_budget` bytes (the command's
/// `--ack-budget-bytes`, or `--ack-budget-per-cursor-bytes` times the cursors).
pub fn store_config(ack_budget: usize) -> StoreConfig {
    StoreConfig {
        ledger: ledger_config(),
        ack_memory_bytes: Some(ack_budget),
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

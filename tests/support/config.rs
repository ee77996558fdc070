//! Configurations the tests share, one function per shape: sizes small enough that a short
//! workload rolls data ledgers and journal segments over and evicts partitions.
//! What a test depends on (entries per data ledger, persist mode, ack memory, segment size,
//! flush interval) is an argument; everything else is the default.

use std::time::Duration;

use ackstore::{CursorConfig, JournalConfig, LedgerConfig, PersistMode, StoreConfig};

/// A topic whose data ledgers roll every `per_ledger` entries, its cursors written in `mode`
/// within `lru` bytes of ack memory each.
pub fn topic(per_ledger: u64, mode: PersistMode, lru: usize) -> LedgerConfig {
    LedgerConfig {
        max_entries_per_ledger: per_ledger,
        cursor: CursorConfig {
            persist_mode: mode,
            lru_capacity_bytes: lru,
            ..CursorConfig::default()
        },
        ..LedgerConfig::default()
    }
}

/// [`topic`] whose cursors the background flusher flushes every `flush_every`.
pub fn topic_flushed(
    per_ledger: u64,
    mode: PersistMode,
    lru: usize,
    flush_every: Duration,
) -> LedgerConfig {
    let mut config = topic(per_ledger, mode, lru);
    config.cursor.flush_interval = Some(flush_every);
    config
}

/// A store with no flusher pool: the test's own flushes are the only ones.
pub fn store_without_flusher() -> StoreConfig {
    StoreConfig {
        flusher_threads: 0,
        ..StoreConfig::default()
    }
}

/// [`store_without_flusher`] whose journal segments are `segment_bytes` long.
pub fn store_journal(segment_bytes: u64) -> StoreConfig {
    StoreConfig {
        journal: JournalConfig { segment_bytes },
        ..store_without_flusher()
    }
}

/// [`store_journal`] whose topics roll their data ledgers every `per_ledger` entries.
pub fn store(per_ledger: u64, segment_bytes: u64) -> StoreConfig {
    StoreConfig {
        ledger: super::topic::config(per_ledger),
        ..store_journal(segment_bytes)
    }
}

/// [`store`] whose cursors have `lru` bytes of ack memory each.
pub fn store_budgeted(per_ledger: u64, lru: usize, segment_bytes: u64) -> StoreConfig {
    StoreConfig {
        ledger: topic(per_ledger, PersistMode::default(), lru),
        ..store_journal(segment_bytes)
    }
}

/// [`store_budgeted`] flushed every `flush_every` by a pool of `flusher_threads` threads.
pub fn store_flushed(
    per_ledger: u64,
    lru: usize,
    segment_bytes: u64,
    flush_every: Duration,
    flusher_threads: usize,
) -> StoreConfig {
    let mut config = store_budgeted(per_ledger, lru, segment_bytes);
    config.ledger.cursor.flush_interval = Some(flush_every);
    config.flusher_threads = flusher_threads;
    config
}

/// A store whose cursors share one ack budget of `limit` bytes, each cursor alone allowed far
/// more (1 MiB), with topics rolling data ledgers every `per_ledger` entries.
pub fn store_shared_budget(per_ledger: u64, limit: usize) -> StoreConfig {
    StoreConfig {
        ledger: topic(per_ledger, PersistMode::default(), 1 << 20),
        ack_memory_bytes: Some(limit),
        ..StoreConfig::default()
    }
}

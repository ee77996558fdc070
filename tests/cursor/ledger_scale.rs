//! Scale of the persistence layer driven directly: ten million alternating acks over 200 data
//! ledgers under a 4 MiB budget survive a flush and a reopen exactly, with resident memory within
//! the budget throughout.

use crate::support;

use ackstore::CursorConfig;
use ackstore::MemStorage;
use ackstore::Position;
use ackstore::internals::ackset::MAX_PARTITION_BYTES;
use support::cursor_ledger::{Env, open_cursor};

const LEDGERS: u64 = 200;
const ACKS_PER_LEDGER: u64 = 50_000;

#[test]
fn ten_million_alternating_acks_survive_reopen_within_budget() {
    alternating_acks_survive_reopen(4 << 20);
}

#[test]
fn ten_million_alternating_acks_survive_reopen_with_constant_eviction() {
    // A quarter of the state fits: partitions are evicted to and reloaded from the cursor
    // ledger all the time.
    let evictions = alternating_acks_survive_reopen(1 << 20);
    assert!(evictions > 200, "{evictions} evictions");
}

/// Acks, flushes, reopens and checks every entry; returns the evictions after the reopen.
fn alternating_acks_survive_reopen(budget: usize) -> u64 {
    let config = CursorConfig {
        lru_capacity_bytes: budget,
        ..CursorConfig::default()
    };
    let disk = MemStorage::new();
    {
        let env = Env::open(&disk).unwrap();
        let mut cursor = open_cursor(&env, &config).unwrap();
        for ledger in 1..=LEDGERS {
            for i in 0..ACKS_PER_LEDGER {
                cursor.ack(Position::new(ledger, 2 * i)).unwrap();
            }
        }
        let flush = cursor.flush().unwrap();
        assert!(flush.partitions > 0);
        let stats = cursor.acks.stats();
        assert!(
            stats.peak_resident_bytes <= budget + MAX_PARTITION_BYTES,
            "{stats:?}"
        );
    }
    let env = Env::open(&disk).unwrap();
    let mut cursor = open_cursor(&env, &config).unwrap();
    assert_eq!(cursor.acks.len(), LEDGERS * ACKS_PER_LEDGER);
    assert_eq!(
        cursor.acks.range_count().unwrap(),
        LEDGERS * ACKS_PER_LEDGER
    );
    for ledger in 1..=LEDGERS {
        for e in 0..2 * ACKS_PER_LEDGER {
            let acked = cursor.acks.contains(Position::new(ledger, e)).unwrap();
            assert_eq!(acked, e % 2 == 0, "{ledger}:{e}");
        }
    }
    let stats = cursor.acks.stats();
    assert!(
        stats.peak_resident_bytes <= budget + MAX_PARTITION_BYTES,
        "{stats:?}"
    );
    stats.evictions
}

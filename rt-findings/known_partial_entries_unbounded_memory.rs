//! Known failure (not compiled into the suite; copy into tests/ to run it).
//!
//! Bounded memory with batch-index acks: partial entries are charged to the ack set's LRU
//! budget, but they are never evicted (docs/cursors.md: "Partial entries themselves stay
//! resident"), so a consumer that acks one message of every batch grows the cursor's memory
//! with the backlog, whatever `lru_capacity_bytes` says. Holes (whole-entry acks) in the same
//! pattern stay within the budget plus one partition; partial entries do not.

mod support;

use std::sync::Arc;

use ackstore::{
    AppendMeta, CursorConfig, InitialPosition, LedgerConfig, ManagedLedger, MemStorage,
};
use support::topic::{at, config};

#[test]
fn known_partial_entries_stay_within_the_lru_budget() {
    let budget = 4096;
    let cfg = LedgerConfig {
        cursor: CursorConfig {
            lru_capacity_bytes: budget,
            ..CursorConfig::default()
        },
        ..config(1000)
    };
    let topic = ManagedLedger::open_with_storage(Arc::new(MemStorage::new()), cfg).unwrap();
    let positions: Vec<_> = (0..20_000)
        .map(|_| {
            topic
                .append_with(
                    b"b",
                    AppendMeta {
                        num_messages: 10,
                        timestamp: 1,
                    },
                )
                .unwrap()
        })
        .collect();
    let c = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    for &p in positions.iter().skip(1).step_by(2) {
        c.ack_batch_index(p, 3, 10).unwrap();
    }
    c.flush().unwrap();
    let s = c.stats().unwrap();
    let a = &s.ackset;
    let one_partition = a.peak_resident_bytes.saturating_sub(budget);
    assert!(
        a.resident_bytes + a.charged_bytes <= budget + one_partition.max(16 << 10),
        "{} partial entries take {} bytes against a budget of {budget}: {a:?}",
        s.partial_entries,
        s.batch_index_bytes,
    );
    topic.close().unwrap();
}

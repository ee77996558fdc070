//! Scale through the public API: alternating acks over 200 data ledgers under a 4 MiB ack
//! budget, on real files; flush, close, reopen; every ack present, the range count exact, the
//! resident ack memory within the budget plus one partition throughout.
//!
//! Release builds (CI) append 20 million entries and ack 10 million of them. Debug builds
//! scale down to 2,000 entries per ledger (200,000 entries, 100,000 acks) so a plain
//! `cargo test` stays fast; the code path is the same.

use crate::support;

use ackstore::internals::ackset::MAX_PARTITION_BYTES;
use ackstore::{AppendMeta, Position};
use ackstore::{InitialPosition, ManagedLedger};
use support::topic::at;

const LEDGERS: u64 = 200;
const BUDGET: usize = 4 << 20;

fn entries_per_ledger() -> u64 {
    if cfg!(debug_assertions) {
        2_000
    } else {
        100_000
    }
}

#[test]
fn alternating_acks_over_200_ledgers_survive_close_and_reopen_within_budget() {
    let per_ledger = entries_per_ledger();
    let dir = tempfile::tempdir().unwrap();
    let topic = ManagedLedger::open(
        dir.path(),
        support::config::topic(
            entries_per_ledger(),
            ackstore::PersistMode::MultiEntry,
            BUDGET,
        ),
    )
    .unwrap();
    let meta = AppendMeta {
        num_messages: 1,
        timestamp: 0,
    };
    let mut ledgers = Vec::new();
    for _ in 0..LEDGERS * per_ledger {
        let p = topic.append_with(b"", meta).unwrap();
        if ledgers.last() != Some(&p.ledger_id) {
            ledgers.push(p.ledger_id);
        }
    }
    topic.sync().unwrap();
    assert_eq!(ledgers.len() as u64, LEDGERS);
    let cursor = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    // Every odd entry of every ledger: one range per ack, no ack ever joins mark-delete.
    for &ledger in &ledgers {
        for e in (1..per_ledger).step_by(2) {
            assert!(cursor.ack(Position::new(ledger, e)).unwrap());
        }
    }
    let acks = LEDGERS * per_ledger / 2;
    let stats = cursor.stats().unwrap();
    assert_eq!(stats.acked_entries, acks);
    assert!(
        stats.ackset.peak_resident_bytes <= BUDGET + MAX_PARTITION_BYTES,
        "{stats:?}"
    );
    cursor.flush().unwrap();
    cursor.close().unwrap();
    topic.close().unwrap();

    let topic = ManagedLedger::open(
        dir.path(),
        support::config::topic(
            entries_per_ledger(),
            ackstore::PersistMode::MultiEntry,
            BUDGET,
        ),
    )
    .unwrap();
    let cursor = topic
        .open_cursor("sub", at(InitialPosition::Latest, false))
        .unwrap();
    assert_eq!(cursor.mark_delete_position().unwrap(), None);
    assert_eq!(cursor.stats().unwrap().acked_entries, acks);
    assert_eq!(cursor.acked_range_count().unwrap(), acks);
    for &ledger in &ledgers {
        for e in 0..per_ledger {
            let p = Position::new(ledger, e);
            assert_eq!(cursor.is_acked(p).unwrap(), e % 2 == 1, "{p}");
        }
    }
    let stats = cursor.stats().unwrap();
    assert!(
        stats.ackset.peak_resident_bytes <= BUDGET + MAX_PARTITION_BYTES,
        "{stats:?}"
    );
    assert_eq!(cursor.backlog().unwrap(), LEDGERS * per_ledger - acks);
    topic.close().unwrap();
}

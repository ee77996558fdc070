//! Invariant 3 while a reopened cursor's claim is pending, under every kind of
//! operation (acks, batch-index acks, reads, is-acked, ranges), checked after each one.

use crate::support;

use std::sync::Arc;

use ackstore::internals::ackset::MAX_PARTITION_BYTES;
use ackstore::{AppendMeta, CursorOptions, ManagedLedger, MemStorage, PersistMode, Position};
use support::workload::Rng;

fn run(seed: u64, mode: PersistMode, budget: usize) {
    let mut rng = Rng::new(seed);
    let c = support::config::topic(8, mode, budget);
    let disk = MemStorage::new();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone()).unwrap();
    let ps: Vec<Position> = (0..800)
        .map(|i| {
            topic
                .append_with(
                    b"b",
                    AppendMeta {
                        num_messages: 4,
                        timestamp: i,
                    },
                )
                .unwrap()
        })
        .collect();
    topic.sync().unwrap();
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    for &p in &ps {
        match rng.below(4) {
            0 => {
                cur.ack(p).unwrap();
            }
            1 => {
                cur.ack_batch_index(p, 1, 4).unwrap();
            }
            _ => {}
        }
    }
    cur.close().unwrap();
    topic.close().unwrap();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c).unwrap();
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    let mut peak = 0;
    for step in 0..600 {
        let p = ps[rng.index(ps.len())];
        let op = rng.below(8);
        match op {
            0 => {
                let _ = cur.ack(p);
            }
            1 => {
                let _ = cur.ack_batch_index(p, rng.below(4) as u32, 4);
            }
            2 => {
                cur.is_acked(p).unwrap();
            }
            3 => {
                cur.read_entries(20).unwrap();
            }
            4 => {
                cur.is_batch_index_acked(p, 2).unwrap();
            }
            5 => {
                cur.acked_range_count().unwrap();
            }
            6 => {
                cur.last_acked_range().unwrap();
            }
            _ => {
                cur.seek_read_position(p).unwrap();
            }
        }
        // Measured without running a cursor operation that could claim first.
        let s = cur.stats().unwrap();
        let held = s.ackset.resident_bytes + s.ackset.charged_bytes;
        peak = peak.max(held);
        assert!(
            held <= budget + MAX_PARTITION_BYTES,
            "seed {seed} {mode:?} budget {budget} step {step} op {op}: {held} bytes: {:?} \
             partial {}",
            s.ackset,
            s.partial_entries
        );
    }
    let _ = peak;
    cur.close().unwrap();
    topic.close().unwrap();
}

#[test]
fn memory_while_the_claim_is_pending_multi() {
    for seed in 0..8 {
        for budget in [0, 2048] {
            run(seed, PersistMode::MultiEntry, budget);
        }
    }
}

#[test]
fn memory_while_the_claim_is_pending_single() {
    for seed in 0..8 {
        for budget in [0, 2048] {
            run(seed, PersistMode::SingleEntry, budget);
        }
    }
}

//! `Cursor::ack` on cursors that share one full ack memory budget
//! (`CursorConfig::ack_memory`, a store's `ack_memory_bytes`), at 1,000, 10,000 and 100,000
//! members: once the budget is full, an ack that needs room asks other members to release
//! memory, so the cost of that reclaim per ack must not grow with the number of members. The
//! baseline in the same run is the same ack with 1,000 members; the figure to read is the ratio
//! of the 100,000-member time to it (flat is 1.0).
//!
//! Each cursor is a reader (a non-durable cursor: the same ack path and budget as a durable
//! cursor, with evicted partitions kept encoded in memory, so the bench measures memory work,
//! not I/O). Every member first acks one entry (so every member holds a partition and the
//! budget is over its limit); each iteration then acks a pseudo-random entry of a
//! pseudo-random member.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use ackstore::{
    AckBudget, CursorConfig, InitialPosition, LedgerConfig, ManagedLedger, MemStorage,
    NonDurableOptions, Position,
};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

/// Entries of the topic (one ledger, so one partition per member).
const ENTRIES: u64 = 4096;
/// The shared budget: far below what the members hold together.
const BUDGET: usize = 256 << 10;

/// A topic in memory with `members` readers sharing one full budget, each holding one acked
/// entry.
fn members(members: usize) -> (ManagedLedger, Vec<ackstore::Cursor>, Vec<Position>) {
    let config = LedgerConfig {
        cursor: CursorConfig {
            ack_memory: Some(AckBudget::new(BUDGET)),
            ..CursorConfig::default()
        },
        ..LedgerConfig::default()
    };
    let topic =
        ManagedLedger::open_with_storage(Arc::new(MemStorage::new()), config).expect("open topic");
    let positions: Vec<Position> = (0..ENTRIES)
        .map(|_| topic.append(b"x").expect("append"))
        .collect();
    topic.sync().expect("sync");
    let cursors: Vec<_> = (0..members)
        .map(|i| {
            let c = topic
                .open_non_durable_cursor(
                    InitialPosition::Earliest,
                    NonDurableOptions {
                        inclusive: true,
                        name: format!("reader-{i}"),
                    },
                )
                .expect("open reader");
            c.ack(positions[(i * 7) % positions.len()]).expect("ack");
            c
        })
        .collect();
    (topic, cursors, positions)
}

fn shared_budget(c: &mut Criterion) {
    let mut group = c.benchmark_group("shared_budget_full_ack");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));
    for n in [1_000usize, 10_000, 100_000] {
        let (topic, cursors, positions) = members(n);
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                // xorshift64: a fixed sequence, the same in every run.
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let cursor = &cursors[(state % cursors.len() as u64) as usize];
                let pos = positions[((state >> 32) % positions.len() as u64) as usize];
                black_box(cursor.ack(pos).expect("ack"))
            });
        });
        for cursor in cursors {
            cursor.close().expect("close");
        }
        topic.close().expect("close topic");
    }
    group.finish();
}

criterion_group!(benches, shared_budget);
criterion_main!(benches);

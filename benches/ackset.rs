//! Individual acks per second on `AckSet` and `RangeSetWrapper` against a baseline measured in the
//! same run: a `BTreeMap<Position, Position>` interval set that merges neighbours on insert, as
//! Guava's `TreeRangeSet` (Pulsar's default ack range set) does.
//!
//! Each iteration starts from an empty set and acks `ACKS` entries of one ledger in one of four
//! patterns (`tests/support/ack_patterns.rs`). Sizes for the same patterns come from
//! `tests/ackset/size.rs`.

#[path = "../tests/support/ack_patterns.rs"]
mod ack_patterns;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use ack_patterns::{LEDGER, Pattern};
use ackstore::Position;
use ackstore::internals::ackset::{AckSet, MemPartitionStore, RangeSetWrapper};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

/// Individual acks per iteration.
const ACKS: u64 = 200_000;

/// Budget for the wrapper: larger than any pattern needs, so this measures its bookkeeping, not
/// eviction (eviction is exercised by the tests).
const WRAPPER_BUDGET: usize = 64 << 20;

/// Inclusive ranges keyed by their first position, merged with their neighbours on insert.
#[derive(Default)]
struct BTreeRangeSet {
    ranges: BTreeMap<Position, Position>,
}

impl BTreeRangeSet {
    /// Adds `p`; `true` if it was not in the set.
    fn add(&mut self, p: Position) -> bool {
        let before = self.ranges.range(..=p).next_back().map(|(s, e)| (*s, *e));
        if before.is_some_and(|(_, end)| end >= p) {
            return false;
        }
        let joins_before = before
            .filter(|(_, end)| end.ledger_id == p.ledger_id && end.entry_id + 1 == p.entry_id)
            .map(|(start, _)| start);
        let next = Position::new(p.ledger_id, p.entry_id + 1);
        let joins_after = self.ranges.get(&next).copied();
        if joins_after.is_some() {
            self.ranges.remove(&next);
        }
        match (joins_before, joins_after) {
            (Some(start), after) => {
                self.ranges.insert(start, after.unwrap_or(p));
            }
            (None, after) => {
                self.ranges.insert(p, after.unwrap_or(p));
            }
        }
        true
    }

    fn len(&self) -> usize {
        self.ranges.len()
    }
}

/// The baseline is a faithful range set: same maximal ranges as the `AckSet` for these acks.
fn assert_same_ranges(positions: &[Position]) {
    let mut baseline = BTreeRangeSet::default();
    let mut set = AckSet::new();
    for &p in positions {
        assert_eq!(baseline.add(p), set.add(p));
    }
    assert!(baseline.ranges.into_iter().eq(set.ranges()));
}

fn individual_acks(c: &mut Criterion) {
    let mut group = c.benchmark_group("ackset-individual-acks");
    group.sample_size(10);
    group.throughput(Throughput::Elements(ACKS));
    for pattern in Pattern::ALL {
        let positions: Vec<Position> = pattern
            .entries(ACKS)
            .into_iter()
            .map(|e| Position::new(LEDGER, e))
            .collect();
        assert_same_ranges(&positions);
        group.bench_with_input(
            BenchmarkId::new("btreemap-baseline", pattern.name()),
            &positions,
            |b, positions| {
                b.iter(|| {
                    let mut set = BTreeRangeSet::default();
                    for &p in positions {
                        black_box(set.add(p));
                    }
                    set.len()
                });
            },
        );
        group.bench_with_input(
            BenchmarkId::new("ackset", pattern.name()),
            &positions,
            |b, positions| {
                b.iter(|| {
                    let mut set = AckSet::new();
                    for &p in positions {
                        black_box(set.add(p));
                    }
                    set.len()
                });
            },
        );
        group.bench_with_input(
            BenchmarkId::new("range-set-wrapper", pattern.name()),
            &positions,
            |b, positions| {
                b.iter(|| {
                    let store = Box::new(MemPartitionStore::new());
                    let mut set = RangeSetWrapper::new(store, WRAPPER_BUDGET);
                    for &p in positions {
                        black_box(set.add(p).expect("in-memory store"));
                    }
                    set.len()
                });
            },
        );
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = individual_acks
}
criterion_main!(benches);

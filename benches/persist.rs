//! The partition record's encoder and decoder, each against version 1's in the same run:
//!
//! - encoding one partition record (`encode_partition`, version 2) of a 50,000-entry ledger per
//!   ack pattern, and of the store workload's small partition (250 of the first 500 entries),
//!   against version 1's roaring copy (`encode_partition_v1`) of the same set;
//! - decoding that record (`decode_partition`), against decoding the version 1 record.
//!
//! Run: `cargo bench --bench persist -- --warm-up-time 1 --measurement-time 5`.

use std::hint::black_box;
use std::time::Duration;

use ackstore::internals::format::partition::{
    PartitionKey, decode_partition, encode_partition, encode_partition_v1,
};
use criterion::{Criterion, criterion_group, criterion_main};
use roaring::RoaringBitmap;

/// Entries of the ledger one encoded partition covers (as `ackstore perf` writes them).
const PARTITION_ENTRIES: u32 = 50_000;

/// The acked offsets of one partition under `pattern`, from a fixed seed.
fn partition_set(pattern: &str) -> RoaringBitmap {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        // xorshift64*: a fixed, dependency-free sequence.
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11
    };
    #[expect(clippy::cast_precision_loss, reason = "a uniform draw in [0, 1)")]
    let mut uniform = move || next() as f64 / (1u64 << 53) as f64;
    match pattern {
        "alternating" => (0..PARTITION_ENTRIES).step_by(2).collect(),
        "holes:100" => {
            // A hole every 100 entries on average, gaps uniform in [50, 150].
            let mut set: RoaringBitmap = (0..PARTITION_ENTRIES).collect();
            let mut at = 0u32;
            loop {
                #[expect(clippy::cast_possible_truncation, reason = "a gap below 151")]
                let gap = 50 + (uniform() * 101.0) as u32;
                at += gap;
                if at >= PARTITION_ENTRIES {
                    break set;
                }
                set.remove(at);
            }
        }
        _ => {
            let p: f64 = pattern
                .strip_prefix("random:")
                .and_then(|p| p.parse().ok())
                .expect("pattern");
            (0..PARTITION_ENTRIES).filter(|_| uniform() < p).collect()
        }
    }
}

/// The sets of `patterns` over 50,000 entries, and the partition of `ackstore perf --topics`'s
/// store workload: every other entry of the first 500 (a topic of 1,000 entries), where a
/// partition's 65,536 offsets are nearly all outside the set.
fn sets_and_store_partition(patterns: &[&str]) -> Vec<(String, RoaringBitmap)> {
    patterns
        .iter()
        .map(|p| ((*p).to_string(), partition_set(p)))
        .chain([(
            "store_250_of_500".to_string(),
            (0..500).step_by(2).collect::<RoaringBitmap>(),
        )])
        .collect()
}

fn encode(c: &mut Criterion) {
    let mut group = c.benchmark_group("persist/encode_partition_50000");
    let key = PartitionKey {
        ledger_id: 7,
        chunk: 0,
    };
    let sets = sets_and_store_partition(&[
        "alternating",
        "random:0.5",
        "random:0.9",
        "random:0.99",
        "random:0.999",
        "holes:100",
        "random:0.01",
    ]);
    for (pattern, set) in sets {
        eprintln!(
            "persist/encode_partition_50000/{pattern}: {} acked, version 2 {} bytes, version 1 {} \
             bytes",
            set.len(),
            encode_partition(key, &set).len(),
            encode_partition_v1(key, &set).len()
        );
        group.bench_function(format!("{pattern}/v2"), |b| {
            b.iter(|| black_box(encode_partition(key, black_box(&set))));
        });
        group.bench_function(format!("{pattern}/v1_baseline"), |b| {
            b.iter(|| black_box(encode_partition_v1(key, black_box(&set))));
        });
    }
    group.finish();
}

fn decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("persist/decode_partition_50000");
    let key = PartitionKey {
        ledger_id: 7,
        chunk: 0,
    };
    let sets = sets_and_store_partition(&[
        "alternating",
        "random:0.5",
        "random:0.99",
        "holes:100",
        "random:0.01",
    ]);
    for (pattern, set) in sets {
        let v2 = encode_partition(key, &set);
        let v1 = encode_partition_v1(key, &set);
        group.bench_function(format!("{pattern}/v2"), |b| {
            b.iter(|| black_box(decode_partition(black_box(&v2))));
        });
        group.bench_function(format!("{pattern}/v1_baseline"), |b| {
            b.iter(|| black_box(decode_partition(black_box(&v1))));
        });
    }
    group.finish();
}

fn settings() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .configure_from_args()
}

criterion_group! {
    name = benches;
    config = settings();
    targets = encode, decode
}
criterion_main!(benches);

//! Encoding and decoding one ack partition record (version 2), per body the encoder chooses: the
//! work the ack budget does for every eviction and load, a flush for every partition it writes
//! and recovery for every partition it reads. Each set is a partition's worth of one shape
//! (`SETS`); the decoder's time includes its canonical check (the set re-priced against the
//! encoder's choice) and building the `RoaringBitmap`. Timed on the thread's CPU clock: the
//! figures are compared across builds on a shared machine, where wall time counts the waits for
//! a core.

#[path = "../tests/support/workload.rs"]
#[allow(dead_code, reason = "the bench draws offsets only")]
mod workload;

use std::hint::black_box;
use std::time::Duration;

use rustix::time::{ClockId, clock_gettime};

use ackstore::internals::format::partition::{
    PartitionKey, decode_partition, encode_partition, partition_encoding,
};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use roaring::RoaringBitmap;
use workload::Rng;

/// Offsets a partition holds.
const SPAN: u32 = 1 << 16;

/// `n` offsets below `SPAN`, repeatable for the same seed.
fn offsets(seed: u64, n: usize) -> Vec<u32> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| u32::try_from(rng.below(u64::from(SPAN))).expect("below 2^16"))
        .collect()
}

/// The sets, named by the shape that makes the encoder pick each body.
fn sets() -> Vec<(&'static str, RoaringBitmap)> {
    let sparse: RoaringBitmap = offsets(1, 3_000).into_iter().collect();
    let few: RoaringBitmap = offsets(2, 20).into_iter().collect();
    let mut dense: RoaringBitmap = (0..SPAN).collect();
    for v in offsets(3, 3_000) {
        dense.remove(v);
    }
    // Every third entry, with a few fourths: the bounded code.
    let bounded: RoaringBitmap = offsets(4, 20_000)
        .into_iter()
        .zip(0..SPAN / 3)
        .map(|(r, i)| 3 * i + u32::from(r % 8 == 0))
        .collect();
    let half: RoaringBitmap = offsets(5, 60_000)
        .into_iter()
        .zip(0..SPAN)
        .filter(|(r, _)| r % 2 == 0)
        .map(|(_, i)| i)
        .collect();
    let mut runs = RoaringBitmap::new();
    for start in offsets(6, 12) {
        runs.insert_range(start..(start + 2_000).min(SPAN));
    }
    vec![
        ("gaps-acked-3000", sparse),
        ("gaps-acked-20", few),
        ("gaps-holes-3000", dense),
        ("gaps-bounded", bounded),
        ("bitmap-half", half),
        ("roaring-runs", runs),
    ]
}

/// The CPU time this thread spent in `f`.
fn cpu_time(f: impl FnOnce()) -> Duration {
    let now = || {
        let t = clock_gettime(ClockId::ThreadCPUTime);
        Duration::new(
            u64::try_from(t.tv_sec).expect("after boot"),
            u32::try_from(t.tv_nsec).expect("below 10^9"),
        )
    };
    let started = now();
    f();
    now() - started
}

fn codec(c: &mut Criterion) {
    let key = PartitionKey {
        ledger_id: 123_456,
        chunk: 7,
    };
    let mut group = c.benchmark_group("partition_codec");
    for (name, set) in sets() {
        let record = encode_partition(key, &set);
        let encoding = partition_encoding(&record).expect("a version 2 record");
        eprintln!("{name}: {encoding:?}, {} bytes", record.len());
        group.bench_with_input(BenchmarkId::new("encode", name), &set, |b, set| {
            b.iter_custom(|iters| {
                cpu_time(|| {
                    for _ in 0..iters {
                        black_box(encode_partition(key, black_box(set)));
                    }
                })
            });
        });
        group.bench_with_input(BenchmarkId::new("decode", name), &record, |b, record| {
            b.iter_custom(|iters| {
                cpu_time(|| {
                    for _ in 0..iters {
                        black_box(decode_partition(black_box(record)).expect("decodes"));
                    }
                })
            });
        });
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = codec
}
criterion_main!(benches);

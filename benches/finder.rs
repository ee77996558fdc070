//! Seeks by message index and by timestamp on a large topic, and appends through the managed
//! ledger against the raw entry log.
//!
//! - `find/by_index` and `find/by_timestamp`: `ManagedLedger::find_by_index` /
//!   `find_by_timestamp` of pseudo-random targets on a topic of `ACKSTORE_BENCH_ENTRIES` entries
//!   (default 10 million, 8-byte payloads, ledgers of 50,000 entries, sealed). Baseline in the
//!   same run: a binary search of an in-memory `Vec` holding every entry's index (or timestamp)
//!   and position, the ideal index that costs 24 bytes of memory per entry. Header reads per
//!   find are counted over 10,000 finds and printed, with the `ceil(log2 n) + 2` bound.
//! - `seek/by_index` and `seek/by_timestamp`: the same through `Cursor`, which also writes the
//!   cursor record durably (temp file, fsync, rename, directory fsync) before returning.
//! - `append/managed_ledger` against `append/entry_log`: 100-byte entries, each on a fresh
//!   directory, without sync.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use ackstore::FileStorage;
use ackstore::Position;
use ackstore::internals::log::{EntryLog, EntryMeta, LogConfig};
use ackstore::{AppendMeta, CursorOptions, InitialPosition, LedgerConfig, ManagedLedger};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const PER_LEDGER: u64 = 50_000;

fn entries() -> u64 {
    std::env::var("ACKSTORE_BENCH_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000)
}

/// Batch size and timestamp of entry `i`: batches of 1 to 4 messages, four entries per
/// timestamp tick.
fn shape(i: u64) -> AppendMeta {
    AppendMeta {
        num_messages: u32::try_from(i % 4).unwrap_or(0) + 1,
        timestamp: 1_700_000_000_000 + i / 4,
    }
}

/// A tiny deterministic generator (64-bit LCG) for targets.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) % n
    }
}

struct Topic {
    _dir: tempfile::TempDir,
    topic: ManagedLedger,
    /// (last message index, position) and (timestamp, position) of every entry.
    by_index: Vec<(u64, Position)>,
    by_time: Vec<(u64, Position)>,
}

fn build(n: u64) -> Topic {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = LedgerConfig {
        max_entries_per_ledger: PER_LEDGER,
        ..LedgerConfig::default()
    };
    let started = Instant::now();
    let topic = ManagedLedger::open(dir.path(), config.clone()).expect("open");
    let mut by_index = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
    let mut by_time = Vec::with_capacity(by_index.capacity());
    let mut index = 0;
    for i in 0..n {
        let meta = shape(i);
        let pos = topic.append_with(&i.to_le_bytes(), meta).expect("append");
        index += u64::from(meta.num_messages);
        by_index.push((index - 1, pos));
        by_time.push((meta.timestamp, pos));
    }
    topic.close().expect("close");
    let topic = ManagedLedger::open(dir.path(), config).expect("reopen");
    eprintln!(
        "built {n} entries in {} ledgers in {:.1} s",
        topic.ledgers().len(),
        started.elapsed().as_secs_f64()
    );
    Topic {
        _dir: dir,
        topic,
        by_index,
        by_time,
    }
}

fn ceil_log2(n: u64) -> u64 {
    u64::from(u64::BITS - n.saturating_sub(1).leading_zeros())
}

/// Prints header reads per seek over 10,000 seeks of `seek`.
fn count_header_reads(t: &Topic, what: &str, mut seek: impl FnMut(&mut Lcg)) {
    let header_reads = || t.topic.log_stats().expect("stats").header_reads;
    let mut rng = Lcg(7);
    let (mut total, mut max) = (0, 0);
    for _ in 0..10_000 {
        let before = header_reads();
        seek(&mut rng);
        let reads = header_reads() - before;
        total += reads;
        max = max.max(reads);
    }
    eprintln!(
        "{what}: {:.2} header reads per call on average, {max} at most (bound ceil(log2 {PER_LEDGER}) + 2 = {})",
        total as f64 / 10_000.0,
        ceil_log2(PER_LEDGER) + 2
    );
}

fn seeks(c: &mut Criterion) {
    let t = build(entries());
    let cursor = t
        .topic
        .open_cursor(
            "bench",
            CursorOptions {
                initial_position: InitialPosition::Earliest,
                inclusive: false,
            },
        )
        .expect("cursor");
    let b = t.topic.next_index();
    let (t0, t1) = (t.by_time[0].0, t.by_time[t.by_time.len() - 1].0);

    count_header_reads(&t, "find_by_index", |rng| {
        t.topic.find_by_index(rng.below(b)).expect("find");
    });
    count_header_reads(&t, "find_by_timestamp", |rng| {
        t.topic
            .find_by_timestamp(t0 + rng.below(t1 - t0 + 1))
            .expect("find");
    });

    let mut group = c.benchmark_group("find");
    group.throughput(Throughput::Elements(1));
    let mut rng = Lcg(1);
    group.bench_function("by_index", |bench| {
        bench.iter(|| {
            t.topic
                .find_by_index(black_box(rng.below(b)))
                .expect("find")
        });
    });
    let mut rng = Lcg(1);
    group.bench_function("by_index_in_memory_baseline", |bench| {
        bench.iter(|| {
            let x = black_box(rng.below(b));
            let i = t.by_index.partition_point(|&(index, _)| index < x);
            black_box(t.by_index[i].1)
        });
    });
    let mut rng = Lcg(2);
    group.bench_function("by_timestamp", |bench| {
        bench.iter(|| {
            t.topic
                .find_by_timestamp(black_box(t0 + rng.below(t1 - t0 + 1)))
                .expect("find")
        });
    });
    let mut rng = Lcg(2);
    group.bench_function("by_timestamp_in_memory_baseline", |bench| {
        bench.iter(|| {
            let ts = black_box(t0 + rng.below(t1 - t0 + 1));
            let i = t.by_time.partition_point(|&(time, _)| time <= ts);
            black_box(t.by_time.get(i).map(|e| e.1))
        });
    });
    group.finish();

    // A cursor seek is a find plus the durable write of the cursor record.
    let mut group = c.benchmark_group("seek");
    group.sample_size(20);
    let mut rng = Lcg(3);
    group.bench_function("by_index", |bench| {
        bench.iter(|| cursor.seek_by_index(black_box(rng.below(b))).expect("seek"));
    });
    let mut rng = Lcg(4);
    group.bench_function("by_timestamp", |bench| {
        bench.iter(|| {
            cursor
                .seek_by_timestamp(black_box(t0 + rng.below(t1 - t0 + 1)))
                .expect("seek");
        });
    });
    group.finish();
}

fn appends(c: &mut Criterion) {
    let payload = [7u8; 100];
    let mut group = c.benchmark_group("append");
    group.throughput(Throughput::Bytes(payload.len() as u64));

    let dir = tempfile::tempdir().expect("temp dir");
    let storage = Arc::new(FileStorage::open(dir.path(), true).expect("storage"));
    let log = EntryLog::open(storage, LogConfig::default()).expect("log");
    let ledger = log.create_ledger().expect("ledger");
    let mut i = 0u64;
    group.bench_function("entry_log", |bench| {
        bench.iter(|| {
            let meta = EntryMeta {
                index: i,
                num_messages: 1,
                timestamp: i,
            };
            i += 1;
            log.append(ledger, meta, black_box(&payload))
                .expect("append")
        });
    });
    drop(log);

    let dir = tempfile::tempdir().expect("temp dir");
    let topic = ManagedLedger::open(dir.path(), LedgerConfig::default()).expect("open");
    let mut i = 0u64;
    group.bench_function("managed_ledger", |bench| {
        bench.iter(|| {
            let meta = AppendMeta {
                num_messages: 1,
                timestamp: i,
            };
            i += 1;
            topic
                .append_with(black_box(&payload), meta)
                .expect("append")
        });
    });
    group.finish();
}

criterion_group!(benches, appends, seeks);
criterion_main!(benches);

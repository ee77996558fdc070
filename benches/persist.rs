//! Cursor persistence on real files, each figure against a baseline measured in the same run:
//!
//! - flush after one new ack with 10M holes resident: multi-entry (one partition plus the
//!   marker) against single-entry (the whole snapshot again); bytes written are printed;
//! - full persist of 10M holes: time, and bytes per range against Pulsar's `MessageRange`
//!   encoding of the same ranges (`ackset::pulsar::message_range_bytes`), both modes;
//! - recovery of 1M and 10M holes: open to first read (lazy), and to full load;
//! - encoding one partition record (`encode_partition`, version 2) of a 50,000-entry ledger per
//!   ack pattern, and of the store workload's small partition (250 of the first 500 entries),
//!   against version 1's roaring copy (`encode_partition_v1`) of the same set;
//! - decoding that record (`decode_partition`), against decoding the version 1 record.
//!
//! Run: `cargo bench --bench persist -- --warm-up-time 1 --measurement-time 5`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use ackstore::CursorConfig;
use ackstore::PersistMode;
use ackstore::Position;
use ackstore::internals::ackset::RangeSetWrapper;
use ackstore::internals::ackset::pulsar::message_range_bytes;
use ackstore::internals::cursor::persist::{CursorPersister, PersistedState};
use ackstore::internals::cursor::recover::recover;
use ackstore::internals::format::partition::{
    PartitionKey, decode_partition, encode_partition, encode_partition_v1,
};
use ackstore::internals::log::{EntryLog, LogConfig};
use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::{FileStorage, Storage};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use roaring::RoaringBitmap;

const RECORD: &str = "cursor-1";
/// Entries per data ledger: holes are spread over several data ledgers as on a real topic.
const LEDGER_ENTRIES: u64 = 1 << 20;

struct Dir {
    _tmp: tempfile::TempDir,
    storage: Arc<dyn Storage>,
}

impl Dir {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(tmp.path(), true).unwrap());
        Self { _tmp: tmp, storage }
    }

    fn open(&self) -> (Arc<EntryLog>, Arc<dyn MetaStore>) {
        // Single-entry snapshots of 10M ranges need entries far above the 5 MiB default.
        let log = EntryLog::open(
            Arc::clone(&self.storage),
            LogConfig {
                max_entry_size: 256 << 20,
                ..LogConfig::default()
            },
        )
        .unwrap();
        let meta: Arc<dyn MetaStore> = Arc::new(FileMetaStore::new(Arc::clone(&self.storage)));
        (Arc::new(log), meta)
    }
}

fn config(mode: PersistMode) -> CursorConfig {
    CursorConfig {
        persist_mode: mode,
        max_entry_size: 256 << 20,
        max_ranges_single_entry: u64::MAX,
        ..CursorConfig::default()
    }
}

/// The `i`-th acked entry of the alternating pattern (entries 0, 2, 4, ...).
fn hole_neighbour(i: u64) -> Position {
    let entry = 2 * i;
    Position::new(1 + entry / LEDGER_ENTRIES, entry % LEDGER_ENTRIES)
}

/// A cursor with `holes` alternating acks, all resident and dirty.
fn cursor(dir: &Dir, holes: u64, mode: PersistMode) -> (CursorPersister, RangeSetWrapper) {
    let (log, meta) = dir.open();
    let (persister, mut acks) =
        CursorPersister::new_cursor(log, meta, RECORD, config(mode)).unwrap();
    for i in 0..holes {
        acks.add(hole_neighbour(i)).unwrap();
    }
    (persister, acks)
}

fn state() -> PersistedState {
    PersistedState::default()
}

fn flush_after_one_ack(c: &mut Criterion) {
    const HOLES: u64 = 10_000_000;
    let mut group = c.benchmark_group("persist/flush_after_one_ack_10M_holes");
    group.sample_size(10);
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        let dir = Dir::new();
        let (mut persister, mut acks) = cursor(&dir, HOLES, mode);
        persister.flush(&state(), &mut acks).unwrap();
        // Fill one hole per flush, walking through the holes.
        let mut next = 0u64;
        let mut one = |persister: &mut CursorPersister, acks: &mut RangeSetWrapper| {
            let filled = hole_neighbour(next);
            next += 1;
            acks.add(Position::new(filled.ledger_id, filled.entry_id + 1))
                .unwrap();
            persister.flush(&state(), acks).unwrap()
        };
        let sample = one(&mut persister, &mut acks);
        eprintln!(
            "persist/flush_after_one_ack_10M_holes/{mode:?}: {} bytes written ({} partitions, \
             commit entry {} bytes)",
            sample.bytes, sample.partitions, sample.commit_bytes
        );
        group.bench_function(format!("{mode:?}"), |b| {
            b.iter(|| black_box(one(&mut persister, &mut acks)));
        });
    }
    group.finish();
}

fn full_persist(c: &mut Criterion) {
    const HOLES: u64 = 10_000_000;
    let mut group = c.benchmark_group("persist/full_persist_10M_holes");
    group.sample_size(10);
    let pulsar = message_range_bytes((0..HOLES).map(|i| {
        let p = hole_neighbour(i);
        (p, p)
    }));
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        let dir = Dir::new();
        let (mut persister, mut acks) = cursor(&dir, HOLES, mode);
        persister.flush(&state(), &mut acks).unwrap();
        let persisted = persister.stats().persisted_bytes;
        #[expect(clippy::cast_precision_loss, reason = "a ratio for a report")]
        let (ours, theirs) = (
            persisted as f64 / HOLES as f64,
            pulsar as f64 / HOLES as f64,
        );
        eprintln!(
            "persist/full_persist_10M_holes/{mode:?}: {persisted} bytes, {ours:.3} bytes/range; \
             Pulsar MessageRange {theirs:.2} bytes/range; ratio 1/{:.0}",
            theirs / ours
        );
        drop((persister, acks));
        group.bench_function(format!("{mode:?}"), |b| {
            b.iter_batched(
                || {
                    let dir = Dir::new();
                    let (persister, acks) = cursor(&dir, HOLES, mode);
                    (dir, persister, acks)
                },
                |(dir, mut persister, mut acks)| {
                    persister.flush(&state(), &mut acks).unwrap();
                    (dir, persister, acks)
                },
                BatchSize::PerIteration,
            );
        });
    }
    group.finish();
}

fn recovery(c: &mut Criterion) {
    let mut group = c.benchmark_group("persist/recover");
    group.sample_size(10);
    for holes in [1_000_000u64, 10_000_000] {
        let label = format!("{}M_holes", holes / 1_000_000);
        let probe = hole_neighbour(holes / 2);
        for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
            let dir = Dir::new();
            {
                let (mut persister, mut acks) = cursor(&dir, holes, mode);
                persister.flush(&state(), &mut acks).unwrap();
            }
            group.bench_function(format!("{label}/{mode:?}/first_read"), |b| {
                b.iter(|| {
                    let (log, meta) = dir.open();
                    let mut cursor = recover(log, meta, RECORD, config(mode)).unwrap();
                    assert!(cursor.acks.contains(probe).unwrap());
                });
            });
            if mode == PersistMode::SingleEntry {
                // A snapshot is decoded whole before the first read: that is its full load.
                continue;
            }
            group.bench_function(format!("{label}/{mode:?}/full_load"), |b| {
                b.iter(|| {
                    let (log, meta) = dir.open();
                    let mut cursor = recover(log, meta, RECORD, config(mode)).unwrap();
                    assert_eq!(cursor.acks.range_count().unwrap(), holes);
                });
            });
        }
    }
    group.finish();
}

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
    targets = flush_after_one_ack, full_persist, recovery, encode, decode
}
criterion_main!(benches);

//! ackstore against the cursor store a broker engineer would otherwise build: one roaring bitmap
//! per (ledger, 65,536-entry block), kept in a `HashMap` in memory and written to redb, one
//! durable write transaction (`Durability::Immediate`: fsync before `commit` returns) per flush,
//! each dirty block as its run-optimized portable serialization. Both run in the same process
//! on the same data, on real files in a temporary directory, one after the other per figure:
//!
//! - acks/s in memory: alternating (every other entry), random 50% and sparse 1% of 1M and 10M
//!   entries, acked in entry order (ackstore: `RangeSetWrapper::add` of a store cursor's ack set;
//!   baseline: the map lookup and `RoaringBitmap::insert`, marking the block dirty);
//! - flush after one more ack with 10M alternating entries acked: time, and bytes handed to
//!   `write` (`wchar` of `/proc/self/io`, printed): ackstore writes the dirty partition and the
//!   marker in one tick of a store's cursor journal;
//! - restart to first answer with 10M alternating: open the files and answer one is-acked;
//! - full load of 10M random 50%: open and count every acked range.
//!
//! ackstore's side is a store's cursor journal (one segment, listed as a store's catalog lists
//! it), recovered as a store cursor is: the journal's scan (every marker, no partition
//! decoded), the cursor's rows, then the answer (one partition loaded) or every partition
//! loaded and its ranges counted. `Store::open`'s claim and seal (catalog writes) come on top:
//! `ackstore perf --in-store`.
//!
//! Run: `cargo bench --bench vs_redb -- --warm-up-time 1 --measurement-time 3`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ackstore::CursorConfig;
use ackstore::Position;
use ackstore::internals::ackset::RangeSetWrapper;
use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::journal::index::CursorId;
use ackstore::internals::journal::{
    CursorFlush, Journal, JournalConfig, JournalPartitions, Listed,
};
use ackstore::{FileStorage, Storage};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use roaring::RoaringBitmap;

/// Entries per data ledger (as in the persist bench).
const LEDGER_ENTRIES: u64 = 1 << 20;
/// Entries per baseline block: one roaring container.
const BLOCK_BITS: u32 = 16;
/// The baseline's table: (ledger, block) to a roaring portable serialization.
const BLOCKS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("acks");

/// The acked positions of `pattern` over the first `entries` entries, in entry order.
fn positions(pattern: &str, entries: u64) -> Vec<Position> {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut draw = move || {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11
    };
    let keep: Box<dyn FnMut(u64) -> bool> = match pattern {
        "alternating" => Box::new(|e| e % 2 == 0),
        "random_50" => Box::new(move |_| draw() % 2 == 0),
        "sparse_1" => Box::new(move |_| draw() % 100 == 0),
        _ => unreachable!("pattern"),
    };
    let mut keep = keep;
    (0..entries)
        .filter(|&e| keep(e))
        .map(|e| Position::new(1 + e / LEDGER_ENTRIES, e % LEDGER_ENTRIES))
        .collect()
}

/// Bytes this process has handed to `write` and friends so far.
fn written() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|io| {
            io.lines()
                .find_map(|l| l.strip_prefix("wchar: ").and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// The baseline: roaring blocks in memory, dirty ones written to redb per flush.
#[derive(Default)]
struct Blocks {
    blocks: HashMap<(u64, u64), (RoaringBitmap, bool)>,
}

impl Blocks {
    fn ack(&mut self, pos: Position) -> bool {
        let key = (pos.ledger_id, pos.entry_id >> BLOCK_BITS);
        let block = self.blocks.entry(key).or_default();
        block.1 = true;
        block
            .0
            .insert((pos.entry_id & ((1 << BLOCK_BITS) - 1)) as u32)
    }

    /// One durable write transaction holding every dirty block.
    fn flush(&mut self, db: &Database) {
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(BLOCKS).unwrap();
            let mut buf = Vec::new();
            for (key, (bitmap, dirty)) in &mut self.blocks {
                if *dirty {
                    bitmap.optimize();
                    buf.clear();
                    bitmap.serialize_into(&mut buf).unwrap();
                    table.insert(*key, buf.as_slice()).unwrap();
                    *dirty = false;
                }
            }
        }
        txn.commit().unwrap();
    }

    fn contains(db: &Database, pos: Position) -> bool {
        let txn = db.begin_read().unwrap();
        let table = txn.open_table(BLOCKS).unwrap();
        let key = (pos.ledger_id, pos.entry_id >> BLOCK_BITS);
        table.get(key).unwrap().is_some_and(|bytes| {
            let bitmap = RoaringBitmap::deserialize_from(bytes.value()).unwrap();
            bitmap.contains((pos.entry_id & ((1 << BLOCK_BITS) - 1)) as u32)
        })
    }

    /// Loads every block and counts the ranges of acked entries (runs of consecutive values,
    /// joined across adjacent blocks of one ledger).
    fn load_and_count_ranges(db: &Database) -> u64 {
        let txn = db.begin_read().unwrap();
        let table = txn.open_table(BLOCKS).unwrap();
        let mut loaded = Vec::new();
        for row in table.iter().unwrap() {
            let (key, bytes) = row.unwrap();
            let bitmap = RoaringBitmap::deserialize_from(bytes.value()).unwrap();
            loaded.push((key.value(), bitmap));
        }
        let mut ranges = 0;
        let mut last: Option<Position> = None;
        for ((ledger, block), bitmap) in &loaded {
            for v in bitmap {
                let pos = Position::new(*ledger, (block << BLOCK_BITS) | u64::from(v));
                if last
                    .is_none_or(|l| l.ledger_id != pos.ledger_id || l.entry_id + 1 != pos.entry_id)
                {
                    ranges += 1;
                }
                last = Some(pos);
            }
        }
        ranges
    }
}

/// The one cursor of the journal variant.
const JOURNAL_CURSOR: CursorId = CursorId {
    topic: 1,
    cursor: 1,
};

/// Opens the journal in `dir` as a store does after its claim: the segments its catalog lists
/// (every segment file here), nothing sealed.
fn open_journal(dir: &Path) -> Arc<Journal> {
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(dir, true).unwrap());
    let mut segments: Vec<u64> = storage
        .list_prefix("journal-")
        .unwrap()
        .iter()
        .filter_map(|n| ackstore::internals::journal::parse_segment_name(n))
        .collect();
    segments.sort_unstable();
    let listed = Listed {
        segments: &segments,
        retired_through: 0,
        closed: None,
    };
    let journal = Journal::open_listed(storage, JournalConfig::default(), &[], Some(listed));
    Arc::new(journal.unwrap())
}

/// A store cursor's empty ack set over `journal`, keeping at most `budget` bytes resident.
fn journal_set(journal: &Arc<Journal>, budget: usize) -> RangeSetWrapper {
    RangeSetWrapper::new(
        Box::new(JournalPartitions::new(journal.clone(), JOURNAL_CURSOR)),
        budget,
    )
}

/// One tick of `journal` for the cursor of `set`: its dirty partitions and its marker, synced.
fn journal_tick(journal: &Journal, set: &mut RangeSetWrapper) {
    let written = set
        .dirty_keys()
        .into_iter()
        .map(|k| (k, set.bitmap(k).unwrap().unwrap()))
        .collect();
    journal
        .commit(&[CursorFlush {
            cursor: JOURNAL_CURSOR,
            name: 0,
            state: PersistedState::default(),
            written,
            live: set.partitions().into_iter().map(|(k, _)| k).collect(),
        }])
        .unwrap();
    for k in set.dirty_keys() {
        set.mark_persisted(k);
    }
}

/// `acks` added to a store cursor's ack set and flushed in one tick of a journal in `dir`.
fn journal_flushed(dir: &Path, acks: &[Position]) -> (Arc<Journal>, RangeSetWrapper) {
    let journal = open_journal(dir);
    let mut set = journal_set(&journal, usize::MAX);
    for &p in acks {
        set.add(p).unwrap();
    }
    journal_tick(&journal, &mut set);
    (journal, set)
}

/// A store cursor's recovery from the journal in `dir`: the scan, then its rows.
fn journal_recovered(dir: &Path) -> RangeSetWrapper {
    let journal = open_journal(dir);
    let (_, rows) = journal.committed(JOURNAL_CURSOR).unwrap();
    RangeSetWrapper::with_index(
        Box::new(JournalPartitions::new(journal, JOURNAL_CURSOR)),
        CursorConfig::default().lru_capacity_bytes,
        rows,
    )
}

fn acks_per_second(c: &mut Criterion) {
    for entries in [1_000_000u64, 10_000_000] {
        let mut group = c.benchmark_group(format!("vs_redb/acks_{}M", entries / 1_000_000));
        group.sample_size(10);
        for pattern in ["alternating", "random_50", "sparse_1"] {
            let acks = positions(pattern, entries);
            group.throughput(Throughput::Elements(acks.len() as u64));
            group.bench_function(format!("{pattern}/ackstore"), |b| {
                b.iter_batched(
                    || {
                        let dir = tempfile::tempdir().unwrap();
                        let journal = open_journal(dir.path());
                        let set = journal_set(&journal, CursorConfig::default().lru_capacity_bytes);
                        (dir, journal, set)
                    },
                    |(dir, journal, mut set)| {
                        for &p in &acks {
                            set.add(p).unwrap();
                        }
                        (dir, journal, set)
                    },
                    BatchSize::PerIteration,
                );
            });
            group.bench_function(format!("{pattern}/redb_roaring"), |b| {
                b.iter_batched(
                    Blocks::default,
                    |mut blocks| {
                        for &p in &acks {
                            blocks.ack(p);
                        }
                        blocks
                    },
                    BatchSize::PerIteration,
                );
            });
        }
        group.finish();
    }
}

/// 10M entries acked in `pattern`, flushed once by each store into its own directory.
fn persisted(
    pattern: &str,
) -> (
    tempfile::TempDir,
    Arc<Journal>,
    RangeSetWrapper,
    tempfile::TempDir,
    Database,
    Blocks,
) {
    let acks = positions(pattern, 10_000_000);
    let ours = tempfile::tempdir().unwrap();
    let (journal, set) = journal_flushed(ours.path(), &acks);
    let theirs = tempfile::tempdir().unwrap();
    let db = Database::create(theirs.path().join("acks.redb")).unwrap();
    let mut blocks = Blocks::default();
    for &p in &acks {
        blocks.ack(p);
    }
    blocks.flush(&db);
    (ours, journal, set, theirs, db, blocks)
}

fn flush_after_one_ack(c: &mut Criterion) {
    let mut group = c.benchmark_group("vs_redb/flush_after_one_ack_10M_alternating");
    group.sample_size(10);
    let (_ours, journal, mut set, _theirs, db, mut blocks) = persisted("alternating");
    // Each flush fills the next hole: entry 1, 3, 5, ...
    let (mut ours_next, mut theirs_next) = (0u64, 0u64);
    let fill = |next: &mut u64| {
        let entry = 2 * *next + 1;
        *next += 1;
        Position::new(1 + entry / LEDGER_ENTRIES, entry % LEDGER_ENTRIES)
    };
    let before = written();
    set.add(fill(&mut ours_next)).unwrap();
    journal_tick(&journal, &mut set);
    let ours_written = written() - before;
    let before = written();
    blocks.ack(fill(&mut theirs_next));
    blocks.flush(&db);
    let theirs_written = written() - before;
    eprintln!(
        "vs_redb/flush_after_one_ack_10M_alternating: ackstore {ours_written} bytes written, \
         redb_roaring {theirs_written} bytes written"
    );
    group.bench_function("ackstore", |b| {
        b.iter(|| {
            set.add(fill(&mut ours_next)).unwrap();
            journal_tick(&journal, &mut set);
        });
    });
    group.bench_function("redb_roaring", |b| {
        b.iter(|| {
            blocks.ack(fill(&mut theirs_next));
            blocks.flush(&db);
        });
    });
    group.finish();
}

fn restart(c: &mut Criterion) {
    let mut group = c.benchmark_group("vs_redb/restart_10M");
    group.sample_size(10);
    for (pattern, what) in [("alternating", "first_answer"), ("random_50", "full_load")] {
        let (ours, journal, set, theirs, db, _blocks) = persisted(pattern);
        let probe = Position::new(1 + 5_000_000 / LEDGER_ENTRIES, 5_000_000 % LEDGER_ENTRIES);
        let expected_ranges = Blocks::load_and_count_ranges(&db);
        drop((journal, set, db));
        let path = theirs.path().join("acks.redb");
        let answer = |acks: &mut RangeSetWrapper| {
            if what == "first_answer" {
                assert!(acks.contains(probe).unwrap());
            } else {
                assert_eq!(acks.range_count().unwrap(), expected_ranges);
            }
        };
        group.bench_function(format!("{pattern}/{what}/journal"), |b| {
            b.iter(|| answer(&mut journal_recovered(ours.path())));
        });
        group.bench_function(format!("{pattern}/{what}/redb_roaring"), |b| {
            b.iter(|| {
                let db = Database::open(&path).unwrap();
                if what == "first_answer" {
                    assert!(Blocks::contains(&db, probe));
                } else {
                    assert_eq!(Blocks::load_and_count_ranges(&db), expected_ranges);
                }
            });
        });
    }
    group.finish();
}

fn settings() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args()
}

criterion_group! {
    name = benches;
    config = settings();
    targets = acks_per_second, flush_after_one_ack, restart
}
criterion_main!(benches);

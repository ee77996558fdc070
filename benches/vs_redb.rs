//! ackstore against the cursor store a broker engineer would otherwise build: one roaring bitmap
//! per (ledger, 65,536-entry block), kept in a `HashMap` in memory and written to redb, one
//! durable write transaction (`Durability::Immediate`: fsync before `commit` returns) per flush,
//! each dirty block as its run-optimized portable serialization. Both run in the same process
//! on the same data, on real files in a temporary directory, one after the other per figure:
//!
//! - acks/s in memory: alternating (every other entry), random 50% and sparse 1% of 1M and 10M
//!   entries, acked in entry order (ackstore: `RangeSetWrapper::add` of a cursor's ack set;
//!   baseline: the map lookup and `RoaringBitmap::insert`, marking the block dirty);
//! - flush after one more ack with 10M alternating entries acked: time, and bytes handed to
//!   `write` (`wchar` of `/proc/self/io`, printed; ackstore's own count beside it);
//! - restart to first answer with 10M alternating: open the files and answer one is-acked;
//! - full load of 10M random 50%: open and count every acked range.
//!
//! The two restarts run a third way too, `journal`: the same ack set flushed in one tick of a
//! store's cursor journal (one segment, listed as a store's catalog lists it), recovered as a
//! store cursor is: the journal's scan (every marker, no partition decoded), the cursor's rows,
//! then the answer (one partition loaded) or every partition loaded and its ranges counted.
//! `Store::open`'s claim and seal (catalog writes) come on top: `ackstore perf --in-store`.
//!
//! Run: `cargo bench --bench vs_redb -- --warm-up-time 1 --measurement-time 3`.

use std::collections::HashMap;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ackstore::CursorConfig;
use ackstore::Position;
use ackstore::internals::ackset::RangeSetWrapper;
use ackstore::internals::cursor::persist::{CursorPersister, PersistedState};
use ackstore::internals::cursor::recover::recover;
use ackstore::internals::journal::index::CursorId;
use ackstore::internals::journal::{
    CursorFlush, Journal, JournalConfig, JournalPartitions, Listed,
};
use ackstore::internals::log::{EntryLog, LogConfig};
use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::{FileStorage, Storage};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use roaring::RoaringBitmap;

const RECORD: &str = "cursor-1";
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

fn log_and_meta(dir: &Path) -> (Arc<EntryLog>, Arc<dyn MetaStore>) {
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(dir, true).unwrap());
    let log = EntryLog::open(Arc::clone(&storage), LogConfig::default()).unwrap();
    let meta: Arc<dyn MetaStore> = Arc::new(FileMetaStore::new(storage));
    (Arc::new(log), meta)
}

fn new_cursor(dir: &Path) -> (CursorPersister, RangeSetWrapper) {
    let (log, meta) = log_and_meta(dir);
    CursorPersister::new_cursor(log, meta, RECORD, CursorConfig::default()).unwrap()
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

/// `acks` added to a store cursor's ack set and flushed in one tick of a journal in `dir`.
fn journal_flushed(dir: &Path, acks: &[Position]) {
    let journal = open_journal(dir);
    let mut set = RangeSetWrapper::new(
        Box::new(JournalPartitions::new(journal.clone(), JOURNAL_CURSOR)),
        usize::MAX,
    );
    for &p in acks {
        set.add(p).unwrap();
    }
    let live: Vec<_> = set.partitions().into_iter().map(|(k, _)| k).collect();
    let written = live
        .iter()
        .map(|&k| (k, set.bitmap(k).unwrap().unwrap()))
        .collect();
    journal
        .commit(&[CursorFlush {
            cursor: JOURNAL_CURSOR,
            name: 0,
            state: PersistedState::default(),
            written,
            live,
        }])
        .unwrap();
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
                        let cursor = new_cursor(dir.path());
                        (dir, cursor)
                    },
                    |(dir, (persister, mut set))| {
                        for &p in &acks {
                            set.add(p).unwrap();
                        }
                        (dir, persister, set)
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
    CursorPersister,
    RangeSetWrapper,
    tempfile::TempDir,
    Database,
    Blocks,
) {
    let acks = positions(pattern, 10_000_000);
    let ours = tempfile::tempdir().unwrap();
    let (mut persister, mut set) = new_cursor(ours.path());
    let theirs = tempfile::tempdir().unwrap();
    let db = Database::create(theirs.path().join("acks.redb")).unwrap();
    let mut blocks = Blocks::default();
    for &p in &acks {
        set.add(p).unwrap();
        blocks.ack(p);
    }
    persister
        .flush(&PersistedState::default(), &mut set)
        .unwrap();
    blocks.flush(&db);
    (ours, persister, set, theirs, db, blocks)
}

fn flush_after_one_ack(c: &mut Criterion) {
    let mut group = c.benchmark_group("vs_redb/flush_after_one_ack_10M_alternating");
    group.sample_size(10);
    let (_ours, mut persister, mut set, _theirs, db, mut blocks) = persisted("alternating");
    // Each flush fills the next hole: entry 1, 3, 5, ...
    let (mut ours_next, mut theirs_next) = (0u64, 0u64);
    let fill = |next: &mut u64| {
        let entry = 2 * *next + 1;
        *next += 1;
        Position::new(1 + entry / LEDGER_ENTRIES, entry % LEDGER_ENTRIES)
    };
    let before = written();
    set.add(fill(&mut ours_next)).unwrap();
    let stats = persister
        .flush(&PersistedState::default(), &mut set)
        .unwrap();
    let ours_written = written() - before;
    let before = written();
    blocks.ack(fill(&mut theirs_next));
    blocks.flush(&db);
    let theirs_written = written() - before;
    eprintln!(
        "vs_redb/flush_after_one_ack_10M_alternating: ackstore {ours_written} bytes written \
         ({} appended by the persister), redb_roaring {theirs_written} bytes written",
        stats.bytes
    );
    group.bench_function("ackstore", |b| {
        b.iter(|| {
            set.add(fill(&mut ours_next)).unwrap();
            black_box(
                persister
                    .flush(&PersistedState::default(), &mut set)
                    .unwrap(),
            )
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
        let (ours, persister, set, theirs, db, _blocks) = persisted(pattern);
        let probe = Position::new(1 + 5_000_000 / LEDGER_ENTRIES, 5_000_000 % LEDGER_ENTRIES);
        let expected_ranges = Blocks::load_and_count_ranges(&db);
        drop((persister, set, db));
        let journal = tempfile::tempdir().unwrap();
        journal_flushed(journal.path(), &positions(pattern, 10_000_000));
        let path = theirs.path().join("acks.redb");
        let answer = |acks: &mut RangeSetWrapper| {
            if what == "first_answer" {
                assert!(acks.contains(probe).unwrap());
            } else {
                assert_eq!(acks.range_count().unwrap(), expected_ranges);
            }
        };
        group.bench_function(format!("{pattern}/{what}/ackstore"), |b| {
            b.iter(|| {
                let (log, meta) = log_and_meta(ours.path());
                let mut cursor = recover(log, meta, RECORD, CursorConfig::default()).unwrap();
                answer(&mut cursor.acks);
            });
        });
        group.bench_function(format!("{pattern}/{what}/journal"), |b| {
            b.iter(|| answer(&mut journal_recovered(journal.path())));
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

//! Opening a topic of 200 sealed data ledgers (1,000 entries of 450 B each, 93 MiB), on real
//! files, warm page cache.
//!
//! - `topic_open/proven`: `ManagedLedger::open` of the closed topic: every sealed ledger carries
//!   its seal's proof (the synced-length slot claiming the whole file), so the open fsyncs and
//!   maps none of them.
//! - `topic_open/unproven_then_read_each` (the baseline: what the open cost before the proof):
//!   the proofs are removed before each open (untimed), then the open fsyncs every sealed ledger,
//!   and one read of every ledger maps each, as the former open mapped them all.
//!
//! - `entry_log_open/proven`: the entry log's share of the first figure, `EntryLog::open` of the
//!   same directory alone (the topic open adds the claim of the topic record: a metadata write
//!   with its fsyncs).
//! - `topic_open/store_topic`: the same topic (200 sealed ledgers) as a topic of a store, opened
//!   by `Store::topic` on the open store, then closed (untimed): its claim is a link, no write
//!   and no sync.
//! - `store_open/claim_scan_seal`: `Store::open` of that store, whose one cursor flushed before
//!   a clean close: the catalog's claim, the journal's scan, the seal.
//!
//! - `topic_open_cursors/alone_{10,300}_cursors`: `ManagedLedger::open` of a closed topic of its
//!   own of 2,000 small sealed ledgers (10 entries of 100 B) whose 10 or 300 cursors each acked
//!   and flushed: the open claims every cursor record, and should cost about the same with
//!   either number (the baseline is the 10-cursor open; the ratio is what the bench shows).
//!
//! Prints the fsyncs and maps of one open of each kind.

use std::path::Path;
use std::time::{Duration, Instant};

use ackstore::internals::format::ledger::{HEADER_V3_LEN, LedgerHeader, SLOTS_AT, decode_header};
use ackstore::internals::log::{EntryLog, LogConfig, ledger_file_name, parse_ledger_file_name};
use ackstore::{
    CursorOptions, FileStorage, LedgerConfig, ManagedLedger, Position, Store, StoreConfig,
};
use criterion::{Criterion, criterion_group, criterion_main};

const LEDGERS: u64 = 200;
const ENTRIES: u64 = 1_000;
const PAYLOAD: usize = 450;

fn config() -> LedgerConfig {
    LedgerConfig {
        max_entries_per_ledger: ENTRIES,
        ..LedgerConfig::default()
    }
}

/// The topic of the store variant.
const TOPIC: &str = "persistent://tenant/ns/two-hundred-ledgers";

fn store_config() -> StoreConfig {
    StoreConfig {
        ledger: config(),
        flusher_threads: 0,
        ..StoreConfig::default()
    }
}

/// Appends [`LEDGERS`] ledgers of entries to `ml` and closes it.
fn fill(ml: &ManagedLedger) {
    let payload = vec![7u8; PAYLOAD];
    for _ in 0..LEDGERS * ENTRIES {
        ml.append(&payload).expect("append");
    }
    ml.close().expect("close");
}

/// A closed topic of [`LEDGERS`] sealed ledgers.
fn build(dir: &Path) {
    fill(&ManagedLedger::open(dir, config()).expect("open"));
}

/// A closed store whose topic [`TOPIC`] has [`LEDGERS`] sealed ledgers and one cursor that
/// acked its first entry and flushed.
fn build_store(dir: &Path) {
    let store = Store::open(dir, store_config()).expect("store");
    let ml = store.topic(TOPIC).expect("topic");
    let cursor = ml
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    let first = ml.append(b"first").expect("append");
    ml.sync().expect("sync");
    cursor.ack(first).expect("ack");
    cursor.flush().expect("flush");
    drop(cursor);
    fill(&ml);
    store.close().expect("close");
}

/// Small ledgers of the cursor-count group: 2,000 ledgers of 10 entries.
const SMALL_LEDGERS: u64 = 2_000;

/// A closed topic of its own of [`SMALL_LEDGERS`] sealed ledgers of 10 entries of 100 B,
/// whose `cursors` cursors each acked one entry of their own and flushed.
fn build_with_cursors(dir: &Path, cursors: u64) {
    let config = LedgerConfig {
        max_entries_per_ledger: 10,
        ..LedgerConfig::default()
    };
    let ml = ManagedLedger::open(dir, config).expect("open");
    let positions: Vec<Position> = (0..SMALL_LEDGERS * 10)
        .map(|_| ml.append(&[7u8; 100]).expect("append"))
        .collect();
    ml.sync().expect("sync");
    for c in 0..cursors {
        let cursor = ml
            .open_cursor(&format!("sub-{c}"), CursorOptions::default())
            .expect("cursor");
        cursor
            .ack(positions[usize::try_from(c * 7).expect("index")])
            .expect("ack");
        cursor.flush().expect("flush");
    }
    ml.close().expect("close");
}

fn ledger_ids(dir: &Path) -> Vec<u64> {
    let mut ids: Vec<u64> = std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(|e| parse_ledger_file_name(e.ok()?.file_name().to_str()?))
        .collect();
    ids.sort_unstable();
    ids
}

/// Rewrites every ledger's slots as a build without the seal's proof left them.
fn strip_proofs(dir: &Path) {
    use std::os::unix::fs::FileExt;
    for id in ledger_ids(dir) {
        let path = dir.join(ledger_file_name(id));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .expect("ledger");
        let mut head = [0u8; HEADER_V3_LEN];
        file.read_exact_at(&mut head, 0).expect("header");
        let h = decode_header(&head).expect("header");
        let fresh = LedgerHeader::new(id, h.nonce).encode();
        file.write_all_at(&fresh[SLOTS_AT..HEADER_V3_LEN], SLOTS_AT as u64)
            .expect("slots");
    }
}

fn read_each(ml: &ManagedLedger, dir: &Path) {
    for id in ledger_ids(dir) {
        let _ = ml.read(Position::new(id, 0));
    }
}

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    build(dir);
    // One open of each kind, for the counts.
    let ml = ManagedLedger::open(dir, config()).expect("open");
    let s = ml.log_stats().expect("stats");
    println!("proven open: {} fsyncs, {} maps", s.fsyncs, s.maps);
    drop(ml);
    strip_proofs(dir);
    let ml = ManagedLedger::open(dir, config()).expect("open");
    read_each(&ml, dir);
    let s = ml.log_stats().expect("stats");
    println!(
        "unproven open and a read of each ledger: {} fsyncs, {} maps",
        s.fsyncs, s.maps
    );
    drop(ml);

    let mut g = c.benchmark_group("topic_open");
    g.sample_size(10);
    g.bench_function("proven", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let ml = ManagedLedger::open(dir, config()).expect("open");
                total += start.elapsed();
                drop(ml);
            }
            total
        });
    });
    g.bench_function("unproven_then_read_each", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                strip_proofs(dir);
                let start = Instant::now();
                let ml = ManagedLedger::open(dir, config()).expect("open");
                read_each(&ml, dir);
                total += start.elapsed();
                drop(ml);
            }
            total
        });
    });
    let store_dir = tempfile::tempdir().expect("tempdir");
    build_store(store_dir.path());
    g.bench_function("store_topic", |b| {
        let store = Store::open(store_dir.path(), store_config()).expect("store");
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let ml = store.topic(TOPIC).expect("topic");
                total += start.elapsed();
                ml.close().expect("close");
            }
            total
        });
        store.close().expect("close");
    });
    g.finish();
    let mut g = c.benchmark_group("store_open");
    g.sample_size(10);
    g.bench_function("claim_scan_seal", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let store = Store::open(store_dir.path(), store_config()).expect("store");
                total += start.elapsed();
                // As a broker's run before a restart: the next entry read, acked and flushed (a
                // tick, which starts a segment after the one this open sealed), a clean close.
                let ml = store.topic(TOPIC).expect("topic");
                let cursor = ml
                    .open_cursor("sub", CursorOptions::default())
                    .expect("cursor");
                let entry = cursor.read_entries(1).expect("read");
                cursor.ack(entry[0].position).expect("ack");
                cursor.flush().expect("flush");
                drop(cursor);
                store.close().expect("close");
            }
            total
        });
    });
    g.finish();
    let mut g = c.benchmark_group("topic_open_cursors");
    g.sample_size(10);
    for cursors in [10, 300] {
        let dir = tempfile::tempdir().expect("tempdir");
        build_with_cursors(dir.path(), cursors);
        let config = LedgerConfig {
            max_entries_per_ledger: 10,
            ..LedgerConfig::default()
        };
        g.bench_function(format!("alone_{cursors}_cursors"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let ml = ManagedLedger::open(dir.path(), config.clone()).expect("open");
                    total += start.elapsed();
                    ml.close().expect("close");
                }
                total
            });
        });
    }
    g.finish();
    let mut g = c.benchmark_group("entry_log_open");
    g.sample_size(10);
    g.bench_function("proven", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let storage = FileStorage::open(dir, false).expect("storage");
                let log = EntryLog::open(std::sync::Arc::new(storage), LogConfig::default())
                    .expect("log");
                total += start.elapsed();
                assert_eq!(log.stats().fsyncs, 0);
                drop(log);
            }
            total
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! Entry-log benchmarks, each against a baseline measured in the same run.
//!
//! - `append/{log,baseline}/{size}/{unsynced,sync64}`: appending entries of 128 B, 1 KiB and
//!   16 KiB to a ledger, against `std::fs::File::write_all` of the same payload bytes into a
//!   plain file in the same directory, with the same `fdatasync` every 64 entries (or none).
//! - `read_sealed/{log,by_position,baseline}`: reading every entry of a sealed ledger (4096 x
//!   1 KiB, checksum checked) through its memory map (`log`), and by position as a ledger under
//!   `LogConfig::map_sealed_from` is read (`by_position`: its bounds from the index, then its
//!   frame, two `pread`s), against `read_exact_at` of the same 1 KiB chunks from a plain file.
//!   `paired append/...` lines print a second, load-robust figure: 15 alternating batches of
//!   2048 appends each for the log, the `write_all` baseline and a 64 KiB `BufWriter` baseline,
//!   the median time per append of each and the log's throughput as a share of each.
//! - `group_commit/{2,4}_threads`: threads each appending a 1 KiB entry and syncing; prints the
//!   fsyncs per append the log issued.
//!
//! Files live in a temporary directory under the system's temporary directory.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ackstore::FileStorage;
use ackstore::internals::log::{EntryLog, EntryMeta, LogConfig};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

/// Appends between file rotations, so files stay small whatever the iteration count.
const ROTATE_EVERY: u64 = 4096;
const SYNC_EVERY: u64 = 64;

fn open_log(dir: &std::path::Path) -> EntryLog {
    let storage = FileStorage::open(dir, false).expect("storage");
    EntryLog::open(Arc::new(storage), LogConfig::default()).expect("log")
}

/// Times `iters` calls of `step(target, i)`, on targets opened (by `open`) and closed (by
/// `close`) outside the timing every [`ROTATE_EVERY`] calls, so files stay small.
fn time_in_batches<T>(
    iters: u64,
    mut open: impl FnMut() -> T,
    mut step: impl FnMut(&mut T, u64),
    mut close: impl FnMut(T),
) -> Duration {
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let mut target = open();
        let batch = (iters - done).min(ROTATE_EVERY);
        let start = Instant::now();
        for i in 0..batch {
            step(&mut target, i);
        }
        total += start.elapsed();
        close(target);
        done += batch;
    }
    total
}

/// Whether entry `i` (from 0) is followed by a sync.
fn syncs_after(i: u64, sync_every: Option<u64>) -> bool {
    sync_every.is_some_and(|n| (i + 1).is_multiple_of(n))
}

/// Times `iters` appends of `payload` to the log, syncing every `sync_every` entries.
fn time_log_appends(
    log: &EntryLog,
    payload: &[u8],
    sync_every: Option<u64>,
    iters: u64,
) -> Duration {
    time_in_batches(
        iters,
        || log.create_ledger().expect("create"),
        |ledger, i| {
            let meta = EntryMeta {
                index: i,
                num_messages: 1,
                timestamp: i,
            };
            log.append(*ledger, meta, payload).expect("append");
            if syncs_after(i, sync_every) {
                log.sync(*ledger).expect("sync");
            }
        },
        |ledger| log.delete_ledger(ledger).expect("delete"),
    )
}

/// The baseline of [`time_log_appends`]: `write_all` of the same payloads into a plain file.
fn time_plain_writes(
    dir: &std::path::Path,
    payload: &[u8],
    sync_every: Option<u64>,
    iters: u64,
) -> Duration {
    let path = dir.join("baseline.bin");
    time_in_batches(
        iters,
        || File::create(&path).expect("create"),
        |file, i| {
            file.write_all(payload).expect("write");
            if syncs_after(i, sync_every) {
                file.sync_data().expect("sync");
            }
        },
        |file| {
            drop(file);
            std::fs::remove_file(&path).expect("remove");
        },
    )
}

/// A second baseline: the same writes through a 64 KiB `BufWriter` (flushed before each sync),
/// the user-space batching the log's write buffer also does.
fn time_buffered_writes(
    dir: &std::path::Path,
    payload: &[u8],
    sync_every: Option<u64>,
    iters: u64,
) -> Duration {
    let path = dir.join("buffered.bin");
    time_in_batches(
        iters,
        || std::io::BufWriter::with_capacity(64 * 1024, File::create(&path).expect("create")),
        |file, i| {
            file.write_all(payload).expect("write");
            if syncs_after(i, sync_every) {
                file.flush().expect("flush");
                file.get_ref().sync_data().expect("sync");
            }
        },
        |file| {
            drop(file);
            std::fs::remove_file(&path).expect("remove");
        },
    )
}

/// Alternates log and baseline batches, so both see the same machine load, and prints the
/// median time per append of each and the log's throughput as a share of the baseline's.
fn paired(log: &EntryLog, dir: &std::path::Path, payload: &[u8], sync: Option<u64>, id: &str) {
    const ROUNDS: usize = 15;
    const BATCH: u64 = 2048;
    let median = |mut times: Vec<Duration>| {
        times.sort();
        times[times.len() / 2]
    };
    let (mut ours, mut base, mut buffered) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        ours.push(time_log_appends(log, payload, sync, BATCH) / 2048);
        base.push(time_plain_writes(dir, payload, sync, BATCH) / 2048);
        buffered.push(time_buffered_writes(dir, payload, sync, BATCH) / 2048);
    }
    let (ours, base, buffered) = (median(ours), median(base), median(buffered));
    let share = |other: Duration| 100.0 * other.as_secs_f64() / ours.as_secs_f64();
    println!(
        "paired append/{id}: log {} ns/append; write_all {} ns (log throughput {:.0}% of it); \
         BufWriter {} ns (log throughput {:.0}% of it)",
        ours.as_nanos(),
        base.as_nanos(),
        share(base),
        buffered.as_nanos(),
        share(buffered),
    );
}

fn append(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path());
    let mut group = c.benchmark_group("append");
    for size in [128usize, 1024, 16 * 1024] {
        let payload = vec![0x5a; size];
        group.throughput(Throughput::Bytes(size as u64));
        for (mode, sync_every) in [("unsynced", None), ("sync64", Some(SYNC_EVERY))] {
            let id = format!("{size}/{mode}");
            group.bench_function(BenchmarkId::new("log", &id), |b| {
                b.iter_custom(|iters| time_log_appends(&log, &payload, sync_every, iters));
            });
            group.bench_function(BenchmarkId::new("baseline", &id), |b| {
                b.iter_custom(|iters| time_plain_writes(dir.path(), &payload, sync_every, iters));
            });
            paired(&log, dir.path(), &payload, sync_every, &id);
        }
    }
    group.finish();
}

fn read_sealed(c: &mut Criterion) {
    const ENTRIES: u64 = 4096;
    const SIZE: usize = 1024;
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(dir.path());
    let ledger = log.create_ledger().expect("create");
    let payload = vec![0xa5; SIZE];
    let plain = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(dir.path().join("plain.bin"))
        .expect("create");
    for i in 0..ENTRIES {
        log.append(ledger, EntryMeta::default(), &payload)
            .expect("append");
        plain
            .write_all_at(&payload, i * SIZE as u64)
            .expect("write");
    }
    log.seal(ledger).expect("seal");
    plain.sync_data().expect("sync");

    let mut group = c.benchmark_group("read_sealed");
    group.throughput(Throughput::Bytes(ENTRIES * SIZE as u64));
    // Every entry of the ledger read through `log`: the bytes read.
    let read_all = |log: &EntryLog| -> usize {
        (0..ENTRIES)
            .map(|i| log.read(ledger, i).expect("read").payload.len())
            .sum()
    };
    group.bench_function("log", |b| b.iter(|| read_all(&log)));
    // A read-only handle of the same directory that reads the ledger by position.
    let by_position = EntryLog::open_read_only(
        Arc::new(FileStorage::open(dir.path(), false).expect("storage")),
        LogConfig {
            map_sealed_from: u64::MAX,
            ..LogConfig::default()
        },
    )
    .expect("log");
    group.bench_function("by_position", |b| b.iter(|| read_all(&by_position)));
    group.bench_function("baseline", |b| {
        b.iter(|| {
            let mut sum = 0usize;
            for i in 0..ENTRIES {
                let mut buf = vec![0u8; SIZE];
                plain
                    .read_exact_at(&mut buf, i * SIZE as u64)
                    .expect("read");
                sum += buf.len();
            }
            sum
        });
    });
    group.finish();
}

fn group_commit(c: &mut Criterion) {
    const PER_THREAD: u64 = 64;
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Arc::new(open_log(dir.path()));
    let payload = vec![0x33; 1024];
    let mut group = c.benchmark_group("group_commit");
    group.sample_size(10);
    for threads in [2u64, 4] {
        let (mut appends, mut fsyncs) = (0, 0);
        group.throughput(Throughput::Elements(threads * PER_THREAD));
        group.bench_function(format!("{threads}_threads"), |b| {
            b.iter(|| {
                let ledger = log.create_ledger().expect("create");
                let before = log.stats();
                std::thread::scope(|s| {
                    for _ in 0..threads {
                        let log = Arc::clone(&log);
                        let payload = &payload;
                        s.spawn(move || {
                            for _ in 0..PER_THREAD {
                                log.append(ledger, EntryMeta::default(), payload)
                                    .expect("append");
                                log.sync(ledger).expect("sync");
                            }
                        });
                    }
                });
                let after = log.stats();
                appends += after.appends - before.appends;
                fsyncs += after.fsyncs - before.fsyncs;
                log.delete_ledger(ledger).expect("delete");
            });
        });
        #[expect(clippy::cast_precision_loss, reason = "a printed ratio")]
        let ratio = fsyncs as f64 / appends.max(1) as f64;
        println!(
            "group_commit/{threads}_threads: {fsyncs} fsyncs for {appends} appends+syncs = {ratio:.3} fsyncs per append"
        );
    }
    group.finish();
}

criterion_group!(benches, append, read_sealed, group_commit);
criterion_main!(benches);

//! A topic on Ceph RADOS against the same topic on local files, measured in the same run
//! (cargo feature `rados`; `CEPH_CONF` names the cluster, `ACKSTORE_RADOS_POOL` the pool,
//! default `ackstore`):
//!
//! - append latency: one 1 KiB entry appended and synced (a write acknowledged by the cluster
//!   against `write` + `fdatasync`);
//! - append throughput: 1,000 entries of 1 KiB appended, then one sync;
//! - flush: one new individual ack, then `flush` (a partition and a marker);
//! - recovery to first read: open the topic, open its cursor (100,000 entries, every other one
//!   acked), read one entry;
//! - flush latency percentiles (before the criterion benches): one new ack then `flush`, on a
//!   topic alone and on a store's topic (a journal tick), on both backends, the four taking turns
//!   flush by flush so that they meet the same load; p50, p99 and the maximum of
//!   `ACKSTORE_FLUSH_SAMPLES` flushes each (default 1,000; 0 skips the pass), after 20 not
//!   counted. Criterion's filter does not apply to it.
//!
//! Run: `CEPH_CONF=... cargo bench --features rados --bench rados -- --warm-up-time 1
//! --measurement-time 5`; without `CEPH_CONF` it says so and measures nothing. The figures of a
//! single-node test cluster are not production figures.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ackstore::{Cursor, CursorOptions, LedgerConfig, ManagedLedger, Position};
use ackstore::{FileStorage, RadosCluster, Storage, Store, StoreConfig};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};

const PAYLOAD: usize = 1024;
const BATCH: u64 = 1000;
const RECOVERY_ENTRIES: u64 = 100_000;

/// A fresh topic's storage on each backend, kept alive with whatever owns its directory.
struct Backends {
    _tmp: Vec<tempfile::TempDir>,
    cluster: RadosCluster,
    pool: String,
    run: String,
}

/// Namespaces made by this process so far: each `Backends` gets fresh ones.
static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Backends {
    fn new() -> Self {
        let conf = std::env::var("CEPH_CONF").expect("CEPH_CONF must name the cluster's ceph.conf");
        Self {
            _tmp: Vec::new(),
            cluster: RadosCluster::connect(conf).expect("connect to the cluster"),
            pool: std::env::var("ACKSTORE_RADOS_POOL").unwrap_or_else(|_| "ackstore".into()),
            run: format!("bench-{}", std::process::id()),
        }
    }

    fn storage(&mut self, backend: &str) -> Arc<dyn Storage> {
        let made = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if backend == "files" {
            let tmp = tempfile::tempdir().unwrap();
            let s = Arc::new(FileStorage::open(tmp.path(), true).unwrap());
            self._tmp.push(tmp);
            s
        } else {
            let ns = format!("{}-{made}", self.run);
            Arc::new(self.cluster.storage(&self.pool, &ns).unwrap())
        }
    }
}

fn config() -> LedgerConfig {
    LedgerConfig {
        max_entries_per_ledger: 50_000,
        ..LedgerConfig::default()
    }
}

fn earliest() -> CursorOptions {
    CursorOptions::default()
}

fn append(c: &mut Criterion) {
    let mut backends = Backends::new();
    let payload = vec![0xA5u8; PAYLOAD];
    let mut group = c.benchmark_group("append_and_sync_1KiB");
    group.throughput(Throughput::Bytes(PAYLOAD as u64));
    for backend in ["files", "rados"] {
        let topic = ManagedLedger::open_with_storage(backends.storage(backend), config()).unwrap();
        group.bench_function(BenchmarkId::from_parameter(backend), |b| {
            b.iter(|| {
                black_box(topic.append(&payload).unwrap());
                topic.sync().unwrap();
            });
        });
        topic.close().unwrap();
    }
    group.finish();

    let mut group = c.benchmark_group("append_1000x1KiB_then_sync");
    group.throughput(Throughput::Bytes(PAYLOAD as u64 * BATCH));
    for backend in ["files", "rados"] {
        let topic = ManagedLedger::open_with_storage(backends.storage(backend), config()).unwrap();
        group.bench_function(BenchmarkId::from_parameter(backend), |b| {
            b.iter(|| {
                for _ in 0..BATCH {
                    black_box(topic.append(&payload).unwrap());
                }
                topic.sync().unwrap();
            });
        });
        topic.close().unwrap();
    }
    group.finish();
}

fn flush(c: &mut Criterion) {
    let mut backends = Backends::new();
    let mut group = c.benchmark_group("flush_after_one_ack");
    for backend in ["files", "rados"] {
        let topic = ManagedLedger::open_with_storage(backends.storage(backend), config()).unwrap();
        let cursor = topic.open_cursor("sub", earliest()).unwrap();
        let positions: Vec<_> = (0..200_000u64)
            .map(|i| topic.append(&i.to_le_bytes()).unwrap())
            .collect();
        topic.sync().unwrap();
        let mut next = positions.iter().skip(1).step_by(2);
        group.bench_function(BenchmarkId::from_parameter(backend), |b| {
            b.iter(|| {
                cursor.ack(*next.next().expect("enough entries")).unwrap();
                cursor.flush().unwrap();
            });
        });
        cursor.close().unwrap();
        topic.close().unwrap();
    }
    group.finish();
}

fn recovery(c: &mut Criterion) {
    let mut backends = Backends::new();
    let mut group = c.benchmark_group("recovery_to_first_read");
    group.sample_size(10);
    for backend in ["files", "rados"] {
        let storage = backends.storage(backend);
        {
            let topic = ManagedLedger::open_with_storage(storage.clone(), config()).unwrap();
            let cursor = topic.open_cursor("sub", earliest()).unwrap();
            let positions: Vec<_> = (0..RECOVERY_ENTRIES)
                .map(|i| topic.append(&i.to_le_bytes()).unwrap())
                .collect();
            // Entries are acked once durable (a reader never sees an entry a crash can take).
            topic.sync().unwrap();
            for &p in positions.iter().skip(1).step_by(2) {
                cursor.ack(p).unwrap();
            }
            cursor.flush().unwrap();
            cursor.close().unwrap();
            topic.close().unwrap();
        }
        group.bench_function(BenchmarkId::from_parameter(backend), |b| {
            b.iter(|| {
                let topic = ManagedLedger::open_with_storage(storage.clone(), config()).unwrap();
                let cursor = topic.open_cursor("sub", earliest()).unwrap();
                black_box(cursor.read_entries(1).unwrap());
                cursor.close().unwrap();
                topic.close().unwrap();
            });
        });
    }
    group.finish();
}

/// Flushes of each kind not counted in the percentiles (connections, caches, first segments).
const FLUSH_WARM_UP: usize = 20;

/// One cursor taking part in the flush latency pass, with the entries it acks one by one.
struct Flusher {
    label: &'static str,
    backend: &'static str,
    cursor: Cursor,
    unacked: std::vec::IntoIter<Position>,
    took: Vec<Duration>,
    /// Keeps a store's topics open (none for a topic alone).
    _store: Option<Store>,
    _topic: Arc<ManagedLedger>,
}

impl Flusher {
    fn new(
        label: &'static str,
        backend: &'static str,
        storage: Arc<dyn Storage>,
        in_store: bool,
        flushes: usize,
    ) -> Self {
        let (store, topic) = if in_store {
            let config = StoreConfig {
                ledger: config(),
                flusher_threads: 0,
                ..StoreConfig::default()
            };
            let store = Store::open_with_storage(storage, config).unwrap();
            let topic = store.topic("flushed").unwrap();
            (Some(store), topic)
        } else {
            (
                None,
                Arc::new(ManagedLedger::open_with_storage(storage, config()).unwrap()),
            )
        };
        let cursor = topic.open_cursor("sub", earliest()).unwrap();
        // Every other entry acked: each flush adds a hole's neighbour, never moves mark-delete.
        let unacked: Vec<_> = (0..2 * flushes as u64)
            .map(|i| topic.append(&i.to_le_bytes()).unwrap())
            .skip(1)
            .step_by(2)
            .collect();
        topic.sync().unwrap();
        Self {
            label,
            backend,
            cursor,
            unacked: unacked.into_iter(),
            took: Vec::with_capacity(flushes),
            _store: store,
            _topic: topic,
        }
    }

    fn ack_and_flush(&mut self) {
        let p = self.unacked.next().expect("enough entries");
        let started = Instant::now();
        self.cursor.ack(p).unwrap();
        self.cursor.flush().unwrap();
        self.took.push(started.elapsed());
    }

    /// The `q` quantile (0..=1) of the counted flushes, nearest rank.
    fn quantile(&self, q: f64) -> Duration {
        let mut counted = self.took[FLUSH_WARM_UP..].to_vec();
        counted.sort_unstable();
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "a rank within a vector of a few thousand"
        )]
        let rank = ((q * counted.len() as f64).ceil() as usize).clamp(1, counted.len());
        counted[rank - 1]
    }
}

/// Flush latency percentiles on both backends, measured in turns (see the module docs).
fn flush_latency() {
    let samples: usize = std::env::var("ACKSTORE_FLUSH_SAMPLES")
        .ok()
        .map_or(1_000, |v| {
            v.parse().expect("ACKSTORE_FLUSH_SAMPLES: a number")
        });
    if samples == 0 {
        return;
    }
    let flushes = samples + FLUSH_WARM_UP;
    let mut backends = Backends::new();
    let mut flushers: Vec<Flusher> = [("topic alone", false), ("store topic", true)]
        .into_iter()
        .flat_map(|(label, in_store)| ["files", "rados"].map(|backend| (label, backend, in_store)))
        .map(|(label, backend, in_store)| {
            Flusher::new(label, backend, backends.storage(backend), in_store, flushes)
        })
        .collect();
    for _ in 0..flushes {
        for f in &mut flushers {
            f.ack_and_flush();
        }
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("flush_latency: one new ack + flush, {samples} flushes each, in turns (ms)");
    println!(
        "{:<12} {:<6} {:>8} {:>8} {:>8}",
        "cursor", "on", "p50", "p99", "max"
    );
    for f in &flushers {
        println!(
            "{:<12} {:<6} {:>8.2} {:>8.2} {:>8.2}",
            f.label,
            f.backend,
            ms(f.quantile(0.5)),
            ms(f.quantile(0.99)),
            ms(f.quantile(1.0))
        );
    }
    for pair in flushers.chunks(2) {
        let (files, rados) = (&pair[0], &pair[1]);
        let ratio = |q| ms(rados.quantile(q)) / ms(files.quantile(q));
        println!(
            "{:<12} rados / files: p50 {:.2}x, p99 {:.2}x",
            files.label,
            ratio(0.5),
            ratio(0.99)
        );
    }
    for f in flushers {
        f.cursor.close().unwrap();
    }
}

criterion_group!(benches, append, flush, recovery);

fn main() {
    if std::env::var_os("CEPH_CONF").is_none() {
        println!(
            "skipping the RADOS benches: CEPH_CONF must name a cluster's ceph.conf \
             (scripts/ceph/start-cluster.sh DIR prints it)"
        );
        return;
    }
    // `cargo bench` passes `--bench`; `cargo test --benches` runs each bench once and skips
    // the pass.
    if std::env::args().any(|a| a == "--bench") {
        flush_latency();
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}

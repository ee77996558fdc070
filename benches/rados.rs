//! A topic on Ceph RADOS against the same topic on local files, measured in the same run
//! (cargo feature `rados`; `CEPH_CONF` names the cluster, `ACKSTORE_RADOS_POOL` the pool,
//! default `ackstore`):
//!
//! - append latency: one 1 KiB entry appended and synced (a write acknowledged by the cluster
//!   against `write` + `fdatasync`);
//! - append throughput: 1,000 entries of 1 KiB appended, then one sync;
//! - flush: one new individual ack, then `flush` (a partition and a marker);
//! - recovery to first read: open the topic, open its cursor (100,000 entries, every other one
//!   acked), read one entry.
//!
//! Run: `CEPH_CONF=... cargo bench --features rados --bench rados -- --warm-up-time 1
//! --measurement-time 5`. The figures of a single-node test cluster are not production figures.

use std::hint::black_box;
use std::sync::Arc;

use ackstore::{CursorOptions, LedgerConfig, ManagedLedger};
use ackstore::{FileStorage, RadosCluster, Storage};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

const PAYLOAD: usize = 1024;
const BATCH: u64 = 1000;
const RECOVERY_ENTRIES: u64 = 100_000;

/// A fresh topic's storage on each backend, kept alive with whatever owns its directory.
struct Backends {
    _tmp: Vec<tempfile::TempDir>,
    cluster: RadosCluster,
    pool: String,
    run: String,
    made: u32,
}

impl Backends {
    fn new() -> Self {
        let conf = std::env::var("CEPH_CONF").expect("CEPH_CONF must name the cluster's ceph.conf");
        Self {
            _tmp: Vec::new(),
            cluster: RadosCluster::connect(conf).expect("connect to the cluster"),
            pool: std::env::var("ACKSTORE_RADOS_POOL").unwrap_or_else(|_| "ackstore".into()),
            run: format!("bench-{}", std::process::id()),
            made: 0,
        }
    }

    fn storage(&mut self, backend: &str) -> Arc<dyn Storage> {
        self.made += 1;
        if backend == "files" {
            let tmp = tempfile::tempdir().unwrap();
            let s = Arc::new(FileStorage::open(tmp.path(), true).unwrap());
            self._tmp.push(tmp);
            s
        } else {
            let ns = format!("{}-{}", self.run, self.made);
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
            for i in 0..RECOVERY_ENTRIES {
                let p = topic.append(&i.to_le_bytes()).unwrap();
                if i % 2 == 1 {
                    cursor.ack(p).unwrap();
                }
            }
            topic.sync().unwrap();
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

criterion_group!(benches, append, flush, recovery);
criterion_main!(benches);

//! One append of a 100 B entry and its `sync`, the call a broker makes per produced message
//! when it acknowledges the producer only once the entry is durable: on a topic opened alone
//! and on a topic of a store, each in a temporary directory (set `TMPDIR` to choose the file
//! system: `/dev/shm` shows what the library adds, a disk shows its `fsync`).
//!
//! - `append_sync/raw_file`: the baseline, a 100 B `write_all` at the end of a plain file and
//!   its `sync_data`, what any durable log pays.
//! - `append_sync/topic_alone`, `append_sync/store_topic`: `ManagedLedger::append` then
//!   `ManagedLedger::sync` (which checks that this handle still owns the topic: the topic
//!   record's, or the store catalog's, ownership check).

use std::io::Write;

use ackstore::{LedgerConfig, ManagedLedger, Store, StoreConfig};
use criterion::{Criterion, criterion_group, criterion_main};

const PAYLOAD: [u8; 100] = [7; 100];

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("append_sync");
    let raw_dir = tempfile::tempdir().expect("tempdir");
    let mut raw = std::fs::File::create(raw_dir.path().join("log")).expect("file");
    g.bench_function("raw_file", |b| {
        b.iter(|| {
            raw.write_all(&PAYLOAD).expect("write");
            raw.sync_data().expect("sync");
        });
    });
    let alone_dir = tempfile::tempdir().expect("tempdir");
    let alone = ManagedLedger::open(alone_dir.path(), LedgerConfig::default()).expect("open");
    g.bench_function("topic_alone", |b| {
        b.iter(|| {
            alone.append(&PAYLOAD).expect("append");
            alone.sync().expect("sync");
        });
    });
    alone.close().expect("close");
    let store_dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(
        store_dir.path(),
        StoreConfig {
            flusher_threads: 0,
            ..StoreConfig::default()
        },
    )
    .expect("store");
    let topic = store.topic("persistent://t/n/append-sync").expect("topic");
    g.bench_function("store_topic", |b| {
        b.iter(|| {
            topic.append(&PAYLOAD).expect("append");
            topic.sync().expect("sync");
        });
    });
    drop(topic);
    store.close().expect("close");
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! Takeover time of a store on Ceph RADOS against its number of topics (cargo feature `rados`;
//! `CEPH_CONF` names the cluster, `ACKSTORE_RADOS_POOL` the pool, default `ackstore`).
//!
//! For each size (arguments, default 10 100 300 1000 topics) it builds a store in a fresh
//! namespace, each topic holding one synced entry and a cursor with a flushed ack, closes it,
//! then takes it over three times as a new owner would: `Store::open_with_storage` (the lock,
//! the owner epoch, the claim of the catalog, the journal's seal, each object the open touches
//! stamped first), then the first answer (one topic opened, its cursor read); and, apart, the
//! storage's lock alone (lock, epoch). It prints one row per size: the objects in the namespace
//! and the median of three runs of each. The time a dead owner's lease takes to run out comes
//! on top (see docs/deployment.md).
//!
//! Run: `CEPH_CONF=... cargo run --release --features rados --example rados_takeover`.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ackstore::{CursorOptions, InitialPosition, RadosCluster, Storage, Store, StoreConfig};

fn config() -> StoreConfig {
    StoreConfig {
        flusher_threads: 0,
        ..StoreConfig::default()
    }
}

fn earliest() -> CursorOptions {
    CursorOptions {
        initial_position: InitialPosition::Earliest,
        inclusive: true,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() -> ackstore::Result<()> {
    let conf = std::env::var("CEPH_CONF").expect("CEPH_CONF must name the cluster's ceph.conf");
    let pool = std::env::var("ACKSTORE_RADOS_POOL").unwrap_or_else(|_| "ackstore".into());
    let sizes: Vec<usize> = {
        let args: Vec<usize> = std::env::args()
            .skip(1)
            .map(|a| a.parse().expect("a number of topics"))
            .collect();
        if args.is_empty() {
            vec![10, 100, 300, 1000]
        } else {
            args
        }
    };
    let cluster = RadosCluster::connect(&conf)?;
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    println!(
        "| topics | objects | build s | takeover: lock ms | takeover: open ms | takeover: first answer ms |"
    );
    println!("|---|---|---|---|---|---|");
    for n in sizes {
        let ns = format!("takeover-{}-{n}-{nanos}", std::process::id());
        let built = Instant::now();
        {
            let store = Store::open_with_storage(Arc::new(cluster.storage(&pool, &ns)?), config())?;
            for i in 0..n {
                let topic = store.topic(&format!("t{i}"))?;
                let p = topic.append(b"entry")?;
                topic.sync()?;
                let cursor = topic.open_cursor("sub", earliest())?;
                cursor.ack(p)?;
                cursor.flush()?;
            }
            store.close()?;
        }
        let built = built.elapsed();
        let objects = cluster.storage(&pool, &ns)?.list()?.len();
        let mut lock = Vec::new();
        for _ in 0..3 {
            let started = Instant::now();
            let guard = cluster.storage(&pool, &ns)?.lock()?;
            lock.push(started.elapsed());
            drop(guard);
        }
        lock.sort();
        let mut open = Vec::new();
        let mut first = Vec::new();
        for _ in 0..3 {
            let started = Instant::now();
            let store = Store::open_with_storage(Arc::new(cluster.storage(&pool, &ns)?), config())?;
            open.push(started.elapsed());
            let topic = store.topic("t0")?;
            let cursor = topic.open_cursor("sub", earliest())?;
            let _ = cursor.read_entries(1)?;
            first.push(started.elapsed());
            drop((cursor, topic));
            store.close()?;
        }
        open.sort();
        first.sort();
        println!(
            "| {n} | {objects} | {:.1} | {:.0} | {:.0} | {:.0} |",
            built.as_secs_f64(),
            ms(lock[1]),
            ms(open[1]),
            ms(first[1])
        );
    }
    Ok(())
}

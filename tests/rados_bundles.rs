//! Many stores (bundles) in one process on RADOS (`CEPH_CONF`): 64 stores of a `StoreGroup`
//! opened through one `RadosCluster` connection run on the group's flusher threads plus the
//! connection's one lease renewal thread, whatever the number of stores; each store's lease is
//! renewed once per third of the lease, never more; and a store whose lease another owner
//! takes is told (its hook, `LeaseState::Lost`, its writes fenced) while every other store
//! keeps its lease and its renewals.
//!
//! One test in this binary: it counts the threads of the process (`/proc/self/task`), which
//! other tests running beside it would change.

#![cfg(feature = "rados")]

mod support;

use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use ackstore::{
    CursorConfig, CursorOptions, Error, GroupConfig, LeaseState, LedgerConfig, RadosStorage,
    Storage, Store, StoreConfig, StoreGroup,
};
use support::rados::{cluster, fresh_namespace, pool};

const STORES: usize = 64;
const POOL: usize = 2;
/// Threads that open the stores.
const OPENERS: usize = 8;
const LEASE: Duration = Duration::from_secs(3);
/// How long the test waits for an event before it gives up (a guard against a hang).
const GUARD: Duration = Duration::from_secs(60);

fn threads_now() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .count()
}

fn config() -> StoreConfig {
    StoreConfig {
        ledger: LedgerConfig {
            cursor: CursorConfig {
                flush_interval: Some(Duration::from_millis(100)),
                ..CursorConfig::default()
            },
            ..LedgerConfig::default()
        },
        ..StoreConfig::default()
    }
}

/// Waits until every store of `which` has renewed its lease `more` times since `counts` were
/// read, each still held.
fn wait_renewed(storages: &[RadosStorage], which: &[usize], counts: &[u64], more: u64) {
    let deadline = Instant::now() + GUARD;
    for &i in which {
        while storages[i].lease_renewals() < counts[i] + more {
            assert!(
                Instant::now() < deadline,
                "store {i} renewed {} times, not {more} more than {}",
                storages[i].lease_renewals(),
                counts[i]
            );
            assert!(
                matches!(storages[i].lease_state(), LeaseState::Held { .. }),
                "store {i}: {:?}",
                storages[i].lease_state()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn many_stores_through_one_connection_share_one_renewal_thread_and_lose_their_leases_alone() {
    let cluster = cluster();
    // The connection's own threads, once it has talked to every OSD.
    let probe = cluster
        .storage(&pool(), &fresh_namespace("bundle-probe"))
        .expect("open a namespace");
    for i in 0..16 {
        let f = probe.create(&format!("f{i}")).expect("create");
        f.write_all_at(b"x", 0).expect("write");
        f.sync_data().expect("sync");
    }
    let connection = threads_now();
    let group = StoreGroup::new(&GroupConfig {
        flusher_threads: POOL,
        ack_memory_bytes: Some(8 << 20),
        open_files: None,
    });
    let (lost, told) = mpsc::channel();
    let open = |i: usize| -> (RadosStorage, String, Store) {
        let namespace = fresh_namespace("bundle");
        let storage = cluster
            .storage(&pool(), &namespace)
            .expect("open a namespace")
            .with_lease(LEASE);
        let lost = lost.clone();
        storage.on_lease_lost(move |state| {
            let _ = lost.send((i, state.clone()));
        });
        let store = group
            .open_with_storage(Arc::new(storage.clone()), config())
            .expect("open a store");
        (storage, namespace, store)
    };
    let mut opened = vec![open(0)];
    // One topic, written through store 0's lease; the other stores are only held.
    let topic = opened[0].2.topic("t").expect("topic");
    let p = topic.append(b"entry").expect("append");
    topic.sync().expect("sync");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    cursor.ack(p).expect("ack");
    // The connection's threads, the group's pool and the renewal thread, all running.
    let base = threads_now();
    // The other stores, opened by a few threads at once (gone before threads are counted).
    std::thread::scope(|s| {
        let openers: Vec<_> = (0..OPENERS)
            .map(|k| {
                let open = &open;
                s.spawn(move || {
                    (1..STORES)
                        .filter(|i| i % OPENERS == k)
                        .map(|i| (i, open(i)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut rest: Vec<_> = openers
            .into_iter()
            .flat_map(|o| o.join().expect("an opener"))
            .collect();
        rest.sort_by_key(|(i, _)| *i);
        opened.extend(rest.into_iter().map(|(_, o)| o));
    });
    let (storages, namespaces, stores): (Vec<_>, Vec<_>, Vec<_>) = opened.into_iter().fold(
        (Vec::new(), Vec::new(), Vec::new()),
        |(mut a, mut b, mut c), (x, y, z)| {
            a.push(x);
            b.push(y);
            c.push(z);
            (a, b, c)
        },
    );
    let threads = threads_now();
    eprintln!(
        "{STORES} stores: {threads} threads ({base} with one store, {connection} for the \
         connection alone)"
    );
    assert!(
        base <= connection + POOL + 1,
        "{base} threads with one store: more than the connection's {connection}, the pool's \
         {POOL} and the renewal thread"
    );
    assert_eq!(
        threads, base,
        "threads grew with the stores: {base} with one store, {threads} with {STORES}"
    );
    // Renewals: at least three more for every store, and never more than one per third of the
    // lease (plus the one in flight at each end of the window).
    let counts: Vec<u64> = storages.iter().map(RadosStorage::lease_renewals).collect();
    let from = Instant::now();
    let all: Vec<usize> = (0..STORES).collect();
    wait_renewed(&storages, &all, &counts, 3);
    let window = from.elapsed();
    let most = (window.as_secs_f64() / (LEASE / 3).as_secs_f64()).ceil() as u64 + 2;
    for (i, s) in storages.iter().enumerate() {
        let renewed = s.lease_renewals() - counts[i];
        assert!(
            renewed <= most,
            "store {i} renewed {renewed} times in {window:?} with a {LEASE:?} lease"
        );
    }
    assert_eq!(threads_now(), base);
    // Another owner takes store 0's namespace: store 0 alone is told, the others keep theirs.
    let thief = cluster
        .storage(&pool(), &namespaces[0])
        .expect("open the namespace")
        .with_lease(LEASE);
    thief.break_lock().expect("break the lock");
    let taken = thief.lock().expect("take the lock");
    let (who, state) = told.recv_timeout(GUARD).expect("store 0 was not told");
    assert_eq!(who, 0);
    assert!(matches!(state, LeaseState::Lost { .. }), "{state:?}");
    assert!(matches!(storages[0].lease_state(), LeaseState::Lost { .. }));
    let write = topic.append(b"after").and_then(|_| topic.sync());
    assert!(matches!(write, Err(Error::Fenced { .. })), "{write:?}");
    let counts: Vec<u64> = storages.iter().map(RadosStorage::lease_renewals).collect();
    wait_renewed(&storages, &all[1..], &counts, 2);
    assert!(
        told.try_recv().is_err(),
        "another store was told its lease is lost"
    );
    drop(taken);
    drop((cursor, topic));
    drop(stores);
}

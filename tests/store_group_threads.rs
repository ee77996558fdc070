//! The threads of a process running many stores in one `StoreGroup`: the group's pool size,
//! whatever the number of stores, topics and cursors, and none left once the group and its
//! stores are gone. One test in this binary: it counts the threads of the process
//! (`/proc/self/task`), which other tests running beside it would change.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ackstore::{
    CursorConfig, CursorOptions, GroupConfig, LedgerConfig, MemStorage, Store, StoreConfig,
    StoreGroup,
};

fn threads_now() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .count()
}

#[test]
fn many_stores_in_a_group_run_on_the_pools_threads_and_leave_none_behind() {
    const STORES: usize = 32;
    const TOPICS: usize = 4;
    let config = StoreConfig {
        ledger: LedgerConfig {
            cursor: CursorConfig {
                flush_interval: Some(Duration::from_millis(5)),
                ..CursorConfig::default()
            },
            ..LedgerConfig::default()
        },
        ..StoreConfig::default()
    };
    let before = threads_now();
    let group = StoreGroup::new(&GroupConfig {
        flusher_threads: 3,
        ack_memory_bytes: Some(1 << 20),
        open_files: None,
    });
    assert_eq!(threads_now(), before, "no thread before the first store");
    let mut stores = Vec::new();
    let mut cursors = Vec::new();
    for s in 0..STORES {
        let store: Store = group
            .open_with_storage(Arc::new(MemStorage::new()), config.clone())
            .expect("open");
        for t in 0..TOPICS {
            let topic = store.topic(&format!("topic-{t}")).expect("topic");
            let p = topic.append(b"m").expect("append");
            topic.append(b"m").expect("append");
            topic.sync().expect("sync");
            let cursor = topic
                .open_cursor("sub", CursorOptions::default())
                .expect("cursor");
            cursor.ack(p).expect("ack");
            cursors.push((s, cursor));
        }
        stores.push(store);
        assert_eq!(threads_now(), before + 3, "{} stores", s + 1);
    }
    // Every store is ticked by the pool's three threads.
    let deadline = Instant::now() + Duration::from_secs(60);
    for (s, store) in stores.iter().enumerate() {
        while store.journal_stats().ticks == 0 {
            assert!(Instant::now() < deadline, "store {s} was never ticked");
            std::thread::yield_now();
        }
    }
    assert_eq!(threads_now(), before + 3);
    drop(cursors);
    drop(group);
    assert_eq!(threads_now(), before + 3, "the stores keep the pool");
    drop(stores);
    assert_eq!(
        threads_now(),
        before,
        "the last store's drop stopped and joined the pool"
    );
}

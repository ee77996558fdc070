//! The store's flusher pool: a fixed number of threads flushes every cursor of the store on
//! `flush_interval`, so the process's threads do not grow with cursors, and what a pool tick
//! committed survives a power cut. One test in this binary: it counts the threads of the
//! process (`/proc/self/task`), which other tests running beside it would change.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ackstore::{
    CursorConfig, CursorOptions, LedgerConfig, MemStorage, Position, Store, StoreConfig,
};

fn threads_now() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .count()
}

/// Waits until the pool has staged every cursor's acks (no cursor has a dirty partition left:
/// a pool tick clears them under the cursor's lock as it stages); fails after a minute.
fn wait_until_staged(cursors: &[(usize, usize, ackstore::Cursor, Vec<Position>)]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for (t, c, cursor, _) in cursors {
        while cursor.stats().expect("stats").ackset.dirty_partitions > 0 {
            assert!(
                Instant::now() < deadline,
                "the flusher pool never staged {t}/{c}"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

#[test]
fn a_pool_of_two_threads_flushes_every_cursor_and_threads_do_not_grow_with_cursors() {
    const TOPICS: usize = 20;
    const CURSORS: usize = 10;
    let disk = MemStorage::new();
    let config = StoreConfig {
        ledger: LedgerConfig {
            cursor: CursorConfig {
                flush_interval: Some(Duration::from_millis(5)),
                ..CursorConfig::default()
            },
            ..LedgerConfig::default()
        },
        flusher_threads: 2,
        ..StoreConfig::default()
    };
    let before = threads_now();
    let store = Store::open_with_storage(Arc::new(disk.clone()), config.clone()).expect("open");
    assert_eq!(threads_now(), before + 2, "the pool's two threads");
    let mut cursors = Vec::new();
    for t in 0..TOPICS {
        let topic = store.topic(&format!("topic-{t}")).expect("topic");
        let ps: Vec<Position> = (0..20)
            .map(|i| topic.append(format!("{i}").as_bytes()).expect("append"))
            .collect();
        topic.sync().expect("sync");
        for c in 0..CURSORS {
            let cursor = topic
                .open_cursor(&format!("sub-{c}"), CursorOptions::default())
                .expect("cursor");
            cursors.push((t, c, cursor, ps.clone()));
        }
    }
    assert_eq!(
        threads_now(),
        before + 2,
        "{} cursors with a flush interval, still the pool's two threads",
        TOPICS * CURSORS
    );
    for (_, c, cursor, ps) in &cursors {
        cursor.ack(ps[c + 2]).expect("ack");
        cursor.ack(ps[c + 5]).expect("ack");
    }
    wait_until_staged(&cursors);
    // Waits for the pool's tick in progress, if any; the pool left nothing for it to commit.
    let last = store.flush_all().expect("flush_all");
    assert_eq!(last.cursors, 0, "the pool committed every cursor");
    assert!(store.journal_stats().ticks >= 1);
    let image = disk.durable_image();
    let reopened = Store::open_with_storage(
        Arc::new(image),
        StoreConfig {
            flusher_threads: 0,
            ..config
        },
    )
    .expect("reopen the power-cut image");
    for (t, c, _, ps) in &cursors {
        let topic = reopened.topic(&format!("topic-{t}")).expect("topic");
        let cursor = topic
            .open_cursor(&format!("sub-{c}"), CursorOptions::default())
            .expect("cursor");
        assert!(cursor.is_acked(ps[c + 2]).expect("is_acked"), "{t}/{c}");
        assert!(cursor.is_acked(ps[c + 5]).expect("is_acked"), "{t}/{c}");
        assert_eq!(cursor.acked_range_count().expect("ranges"), 2, "{t}/{c}");
    }
    drop(reopened);
    drop(cursors);
    store.close().expect("close");
    drop(store);
    let deadline = Instant::now() + Duration::from_secs(60);
    while threads_now() > before {
        assert!(
            Instant::now() < deadline,
            "the pool's threads outlived the store"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

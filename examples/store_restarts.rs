//! How `Store::open`'s time and the store's files follow the number of restarts it lived through.
//!
//! A store of one topic (3,000 synced entries, one cursor) is restarted N times (the argument,
//! default 1,500), each run as a broker's: `Store::open`, the topic, the cursor's next entry
//! read, acked and flushed, a clean close. Every 250 restarts it prints the time of the last
//! `Store::open` and the number of files in the store's directory. Each restart's first flush
//! starts a journal segment (a new owner never appends to a segment it did not create), and the
//! rollover's count trigger removes the oldest, so the files stay at 7 (4 of them journal
//! segments, the bound for live bytes within one segment) and the open's time flat; without
//! that trigger both grow by one segment per restart.
//!
//! Run: `cargo run --release --example store_restarts -- 1500` (the store lives in a temporary
//! directory under `TMPDIR`).

use std::time::Instant;

use ackstore::{CursorOptions, Store, StoreConfig};

fn config() -> StoreConfig {
    StoreConfig {
        flusher_threads: 0,
        ..StoreConfig::default()
    }
}

fn main() {
    let restarts: usize = std::env::args()
        .nth(1)
        .map_or(1_500, |n| n.parse().expect("a number of restarts"));
    let dir = tempfile::tempdir().expect("temporary directory");
    {
        let store = Store::open(dir.path(), config()).expect("store");
        let topic = store.topic("t").expect("topic");
        for _ in 0..restarts * 2 {
            topic.append(b"x").expect("append");
        }
        topic.sync().expect("sync");
        store.close().expect("close");
    }
    println!("restart  store_open_us  files");
    for i in 1..=restarts {
        let start = Instant::now();
        let store = Store::open(dir.path(), config()).expect("store");
        let open = start.elapsed();
        let topic = store.topic("t").expect("topic");
        let cursor = topic
            .open_cursor("sub", CursorOptions::default())
            .expect("cursor");
        let entries = cursor.read_entries(1).expect("read");
        cursor.ack(entries[0].position).expect("ack");
        cursor.flush().expect("flush");
        drop(cursor);
        store.close().expect("close");
        if i == 1 || i % 250 == 0 || i == restarts {
            let files = std::fs::read_dir(dir.path()).expect("list").count();
            println!("{i:7}  {:13.1}  {files:5}", open.as_secs_f64() * 1e6);
        }
    }
}

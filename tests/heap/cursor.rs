//! A store cursor's heap at its open after a restart, measured on the heap itself: a counting
//! global allocator follows every byte the opening thread allocates while a reopened store's
//! cursors are opened and read once (as a broker's restart does), and what stays allocated per
//! cursor is held under a bound (issue 23: 100,000 cursors in one store within 1 GiB).

use ackstore::{CursorOptions, Store};

use super::{live, signed};

// The perf workload's configuration and names (`ackstore perf --topics`), as the examples that
// reopen its stores use them.
#[path = "../../cli/src/perf_workload.rs"]
mod perf_workload;

use perf_workload::{cursor_name, store_config, topic_name};

const TOPICS: usize = 4;
const PER_TOPIC: usize = 100;

/// As with `--ack-budget-per-cursor-bytes 150`.
fn config() -> ackstore::StoreConfig {
    store_config(150 * TOPICS * PER_TOPIC)
}

/// A store of `TOPICS` topics of `PER_TOPIC` cursors each, every cursor with a hole and its
/// mark-delete moved (as the perf workload leaves them), closed.
fn populate(dir: &std::path::Path) {
    let store = Store::open(dir, config()).expect("open the store");
    for t in 0..TOPICS {
        let topic = store.topic(&topic_name(t)).expect("topic");
        for i in 0..20u32 {
            topic.append(&i.to_le_bytes()).expect("append");
        }
        topic.sync().expect("sync");
        for c in 0..PER_TOPIC {
            let cursor = topic
                .open_cursor(&cursor_name(c), CursorOptions::default())
                .expect("cursor");
            let entries = cursor.read_entries(20).expect("read");
            cursor.ack_cumulative(entries[4].position).expect("ack");
            cursor.ack(entries[7].position).expect("ack");
            cursor.ack(entries[9 + c % 10].position).expect("ack");
        }
        topic.close().expect("close the topic");
    }
    store.close().expect("close the store");
}

#[test]
fn a_store_cursor_reopened_after_a_restart_holds_little_heap() {
    // On a memory-backed file system where there is one: each cursor's creation syncs the
    // topic's records, which a disk makes the most of this test's time.
    let dir = super::fds::files_dir();
    populate(dir.path());
    let store = Store::open(dir.path(), config()).expect("reopen the store");
    let topics: Vec<_> = (0..TOPICS)
        .map(|t| store.topic(&topic_name(t)).expect("topic"))
        .collect();
    let names: Vec<String> = (0..PER_TOPIC).map(cursor_name).collect();
    let mut cursors = Vec::with_capacity(TOPICS * PER_TOPIC);
    let before = live();
    for topic in &topics {
        for name in &names {
            let cursor = topic
                .open_cursor(name, CursorOptions::default())
                .expect("cursor");
            let read = cursor.read_entries(1).expect("first read");
            assert_eq!(read.len(), 1, "cursor {name}: one entry after mark-delete");
            drop(read);
            cursors.push(cursor);
        }
    }
    let per_cursor = (live() - before) / signed(TOPICS * PER_TOPIC);
    eprintln!("heap per reopened cursor: {per_cursor} bytes");
    assert!(
        per_cursor <= BOUND,
        "a reopened cursor holds {per_cursor} bytes of heap, over {BOUND}"
    );
    drop(cursors);
    for topic in &topics {
        topic.close().expect("close a topic");
    }
    store.close().expect("close the store");
}

/// The most heap a reopened cursor may hold after its first read: measured 1,448 bytes (the
/// cursor's shared part, 1,144 with its `Arc`, its ack set's index of one partition, its
/// budget membership, its stores' handles and its names), 2,028 before the index of a few
/// partitions became a vector and the cursor's copies of its topic's settings and names were
/// shared.
const BOUND: isize = 1_600;

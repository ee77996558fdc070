//! A store in a process whose limit of open files (`RLIMIT_NOFILE`) is far below its number of
//! topics: the process (this binary re-run with a soft limit of 128, and again with 64) creates
//! 200 topics, appends to each, syncs, acknowledges and flushes a cursor, and every call
//! succeeds; reopened by this process, every topic holds what the other was answered `Ok` for. A
//! store that kept a descriptor per topic fails with `EMFILE` (os error 24) near the 64th topic,
//! and so does one whose default limit took the whole of a small soft limit.

use std::path::{Path, PathBuf};
use std::process::Command;

use ackstore::{Position, Store, StoreConfig};

use crate::support;

const DIR: &str = "ACKSTORE_OPEN_FILES_DIR";
const SOFT: &str = "ACKSTORE_OPEN_FILES_SOFT";
const TOPICS: usize = 200;

fn config() -> StoreConfig {
    // The default limit of open files: half the soft limit the child sets before it opens.
    StoreConfig {
        ledger: support::topic::config(2),
        ..support::config::store_journal(4096)
    }
}

fn name(t: usize) -> String {
    format!("persistent://t/ns/many-{t}")
}

fn payload(t: usize, i: u64) -> Vec<u8> {
    format!("{t}/{i}").into_bytes()
}

/// Sets this process's soft limit of open files (`RLIMIT_NOFILE`) to `soft`, keeping the hard
/// limit: what `ulimit -Sn` does before a command runs.
fn limit_open_files(soft: u64) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let Rlimit { maximum, .. } = getrlimit(Resource::Nofile);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(soft),
            maximum,
        },
    )
    .expect("set RLIMIT_NOFILE");
}

/// The child's part: under the low limit, every topic is written, synced and acknowledged.
fn child(dir: &Path, soft: u64) {
    limit_open_files(soft);
    let store = Store::open(dir, config()).expect("open");
    let mut topics = Vec::new();
    for t in 0..TOPICS {
        let topic = store.topic(&name(t)).expect("topic");
        for i in 0..3 {
            topic.append(&payload(t, i)).expect("append");
        }
        topic.sync().expect("sync");
        let cursor = topic
            .open_cursor("sub", support::topic::earliest())
            .expect("cursor");
        let first = cursor.read_entries(1).expect("read")[0].position;
        cursor.ack(first).expect("ack");
        cursor.flush().expect("flush");
        // Kept open: a broker keeps its topics loaded.
        topics.push((topic, cursor));
    }
    store.flush_all().expect("flush all");
    drop(topics);
    store.close().expect("close");
}

#[test]
fn a_store_of_more_topics_than_the_process_may_open_files_succeeds() {
    run(
        "a_store_of_more_topics_than_the_process_may_open_files_succeeds",
        128,
    );
}

#[test]
fn a_store_under_a_soft_limit_of_64_open_files_leaves_half_of_them_to_the_process() {
    run(
        "a_store_under_a_soft_limit_of_64_open_files_leaves_half_of_them_to_the_process",
        64,
    );
}

/// Runs test `test` again as a child under a soft limit of `soft` open files, which does the
/// work ([`child`]), then checks every topic against what the child was answered.
fn run(test: &str, soft: u64) {
    if let Ok(dir) = std::env::var(DIR) {
        let soft = std::env::var(SOFT)
            .ok()
            .and_then(|s| s.parse().ok())
            .expect("the child's soft limit");
        child(&PathBuf::from(dir), soft);
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let test = support::harness::test_path(module_path!(), test);
    let out = Command::new(std::env::current_exe().expect("this binary"))
        .args([test.as_str(), "--exact", "--test-threads=1", "--quiet"])
        .env(DIR, dir.path())
        .env(SOFT, soft.to_string())
        .output()
        .expect("run the child");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "the child under a limit of {soft} open files failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let store = Store::open(dir.path(), config()).expect("reopen");
    assert_eq!(store.topic_names().len(), TOPICS);
    for t in 0..TOPICS {
        let topic = store.topic(&name(t)).expect("topic");
        let cursor = topic
            .open_cursor("sub", support::topic::earliest())
            .expect("cursor");
        let mark = cursor.mark_delete_position().expect("mark-delete");
        let entries = cursor.read_entries(10).expect("read");
        let read: Vec<_> = entries.iter().map(|e| e.payload.clone()).collect();
        assert_eq!(read, [payload(t, 1), payload(t, 2)], "topic {t}");
        let first = mark.expect("the first entry is acknowledged");
        assert_eq!(
            Some(first),
            entries[0]
                .position
                .entry_id
                .checked_sub(1)
                .map(|entry_id| Position {
                    entry_id,
                    ..entries[0].position
                }),
            "topic {t}"
        );
    }
}

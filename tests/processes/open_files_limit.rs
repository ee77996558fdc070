//! A store in a process whose limit of open files (`RLIMIT_NOFILE`) is far below its number of
//! topics: the process (this binary re-run with a soft limit of 128) creates 200 topics, appends
//! to each, syncs, acknowledges and flushes a cursor, and every call succeeds; reopened by this
//! process, every topic holds what the other was answered `Ok` for. A store that kept a
//! descriptor per topic fails with `EMFILE` (os error 24) near the 64th topic.

use std::path::{Path, PathBuf};
use std::process::Command;

use ackstore::{Position, Store, StoreConfig};

use crate::support;

const DIR: &str = "ACKSTORE_OPEN_FILES_DIR";
const TEST: &str = "a_store_of_more_topics_than_the_process_may_open_files_succeeds";
const TOPICS: usize = 200;
const SOFT_LIMIT: u64 = 128;

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
fn child(dir: &Path) {
    limit_open_files(SOFT_LIMIT);
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
    if let Ok(dir) = std::env::var(DIR) {
        child(&PathBuf::from(dir));
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let test = support::harness::test_path(module_path!(), TEST);
    let out = Command::new(std::env::current_exe().expect("this binary"))
        .args([test.as_str(), "--exact", "--test-threads=1", "--quiet"])
        .env(DIR, dir.path())
        .output()
        .expect("run the child");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "the child under a limit of {SOFT_LIMIT} open files failed:\n{}\n{}",
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

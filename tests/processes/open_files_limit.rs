//! A store in a process whose limit of open files (`RLIMIT_NOFILE`) is far below its number of
//! topics: the process (this binary re-run with a soft limit of 128, and again with 64) creates
//! 200 topics, appends to each, syncs, acknowledges and flushes a cursor, and every call
//! succeeds; reopened by this process, every topic holds what the other was answered `Ok` for. A
//! store that kept a descriptor per topic fails with `EMFILE` (os error 24) near the 64th topic,
//! and so does one whose default limit took the whole of a small soft limit.
//!
//! Topics opened alone and stores with the default limit share the process's one bound: under a
//! soft limit of 128, 40 topics alone and 4 stores of 30 topics, all kept open, each written,
//! acknowledged and flushed, never hold more descriptors than that bound plus their lock files
//! (counted in `/proc/self/fd` after every step). A cache per topic alone and per store runs out
//! of descriptors (`EMFILE`) a few topics in.

use std::path::{Path, PathBuf};

use ackstore::storage::OpenFiles;
use ackstore::{ManagedLedger, Store, StoreConfig};

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
fn child(dir: &Path) {
    let store = Store::open(dir, config()).expect("open");
    let mut topics = Vec::new();
    for t in 0..TOPICS {
        let topic = store.topic(&name(t)).expect("topic");
        let cursor = write_and_ack(&topic, t, 0);
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
        module_path!(),
        "a_store_of_more_topics_than_the_process_may_open_files_succeeds",
        128,
        child,
        check,
    );
}

#[test]
fn a_store_under_a_soft_limit_of_64_open_files_leaves_half_of_them_to_the_process() {
    run(
        module_path!(),
        "a_store_under_a_soft_limit_of_64_open_files_leaves_half_of_them_to_the_process",
        64,
        child,
        check,
    );
}

/// Runs test `test` of module `module` (its `module_path!()`) again as a child under a soft
/// limit of `soft` open files, which does the work (`child`, given the directory), then checks
/// what the child was answered (`check`).
pub(crate) fn run(module: &str, test: &str, soft: u64, child: fn(&Path), check: fn(&Path)) {
    if let Ok(dir) = std::env::var(DIR) {
        let soft = std::env::var(SOFT)
            .ok()
            .and_then(|s| s.parse().ok())
            .expect("the child's soft limit");
        limit_open_files(soft);
        child(&PathBuf::from(dir));
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let test = support::harness::test_path(module, test);
    let out = support::harness::child_quiet(&std::env::current_exe().expect("this binary"), &test)
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
    check(dir.path());
}

/// Every topic of [`child`]'s store holds what the child was answered `Ok` for.
fn check(dir: &Path) {
    let store = Store::open(dir, config()).expect("reopen");
    assert_eq!(store.topic_names().len(), TOPICS);
    for t in 0..TOPICS {
        let topic = store.topic(&name(t)).expect("topic");
        check_topic(&topic, t, 0, &format!("topic {t}"));
    }
}

const ALONE: usize = 40;
const STORES: usize = 4;
const STORE_TOPICS: usize = 30;

/// The entry (of three) that topic `t`'s cursor acknowledges: the model of every topic.
fn acked_of(t: usize) -> usize {
    t % 3
}

fn alone_dir(dir: &Path, t: usize) -> PathBuf {
    dir.join(format!("alone-{t}"))
}

fn store_dir(dir: &Path, s: usize) -> PathBuf {
    dir.join(format!("store-{s}"))
}

/// Topic `t` of a store (numbered across the stores, so each payload is distinct).
fn store_topic(s: usize, t: usize) -> (String, usize) {
    (name(t), ALONE + s * STORE_TOPICS + t)
}

/// Appends three entries to `topic` (topic `t`'s payloads), syncs them, acknowledges entry
/// `acked` and flushes the cursor, which is returned.
fn write_and_ack(topic: &ManagedLedger, t: usize, acked: usize) -> ackstore::Cursor {
    for i in 0..3 {
        topic.append(&payload(t, i)).expect("append");
    }
    topic.sync().expect("sync");
    let cursor = topic
        .open_cursor("sub", support::topic::earliest())
        .expect("cursor");
    let entries = cursor.read_entries(3).expect("read");
    assert_eq!(entries.len(), 3);
    cursor.ack(entries[acked].position).expect("ack");
    cursor.flush().expect("flush");
    cursor
}

/// The child of [`topics_opened_alone_and_stores_share_the_process_bound_of_open_files`]:
/// topics alone, then stores, every one kept open; after every step the descriptors under
/// `dir` are at most the process's bound plus the lock file of each topic alone and store
/// open.
fn child_alone_and_stores(dir: &Path) {
    let bound = OpenFiles::process().limit();
    let mut locks = 0;
    let assert_bounded = |locks: usize, after: &str| {
        let open = support::fds::open_under(dir);
        assert!(
            open <= bound + locks,
            "{open} descriptors under the directory after {after} (bound {bound} + {locks} locks)"
        );
    };
    let mut kept = Vec::new();
    for t in 0..ALONE {
        let topic = ManagedLedger::open(alone_dir(dir, t), support::topic::config(2))
            .unwrap_or_else(|e| panic!("open topic {t} alone: {e}"));
        locks += 1;
        let cursor = write_and_ack(&topic, t, acked_of(t));
        assert_bounded(locks, &format!("topic {t} alone"));
        kept.push((topic, cursor));
    }
    let mut stores = Vec::new();
    for s in 0..STORES {
        let store = Store::open(store_dir(dir, s), config())
            .unwrap_or_else(|e| panic!("open store {s}: {e}"));
        locks += 1;
        let mut topics = Vec::new();
        for t in 0..STORE_TOPICS {
            let (name, model) = store_topic(s, t);
            let topic = store
                .topic(&name)
                .unwrap_or_else(|e| panic!("store {s} topic {t}: {e}"));
            let cursor = write_and_ack(&topic, model, acked_of(model));
            assert_bounded(locks, &format!("store {s} topic {t}"));
            topics.push((topic, cursor));
        }
        store.flush_all().expect("flush all");
        assert_bounded(locks, &format!("store {s}'s flush"));
        stores.push((store, topics));
    }
    for (s, (store, topics)) in stores.into_iter().enumerate() {
        drop(topics);
        store
            .close()
            .unwrap_or_else(|e| panic!("close store {s}: {e}"));
    }
    for (t, (topic, cursor)) in kept.into_iter().enumerate() {
        drop(cursor);
        topic
            .close()
            .unwrap_or_else(|e| panic!("close topic {t} alone: {e}"));
    }
}

/// A reopened cursor of topic `t` acknowledges exactly entry `acked` of its three: it reads the
/// other two, and its mark-delete is on the first entry only when that one is acknowledged.
fn check_topic(topic: &ManagedLedger, t: usize, acked: usize, what: &str) {
    let cursor = topic
        .open_cursor("sub", support::topic::earliest())
        .expect("cursor");
    let read: Vec<_> = cursor
        .read_entries(10)
        .expect("read")
        .into_iter()
        .map(|e| e.payload)
        .collect();
    let unacked: Vec<_> = (0..3u64)
        .filter(|i| *i as usize != acked)
        .map(|i| payload(t, i))
        .collect();
    assert_eq!(read, unacked, "{what}");
    let mark = cursor.mark_delete_position().expect("mark-delete");
    assert_eq!(mark.is_some(), acked == 0, "{what}: mark-delete {mark:?}");
}

/// Every topic alone and every store topic of [`child_alone_and_stores`] holds what the child
/// was answered `Ok` for.
fn check_alone_and_stores(dir: &Path) {
    for t in 0..ALONE {
        let topic =
            ManagedLedger::open(alone_dir(dir, t), support::topic::config(2)).expect("reopen");
        check_topic(&topic, t, acked_of(t), &format!("topic {t} alone"));
        topic.close().expect("close");
    }
    for s in 0..STORES {
        let store = Store::open(store_dir(dir, s), config()).expect("reopen");
        assert_eq!(store.topic_names().len(), STORE_TOPICS);
        for t in 0..STORE_TOPICS {
            let (name, model) = store_topic(s, t);
            let topic = store.topic(&name).expect("topic");
            check_topic(
                &topic,
                model,
                acked_of(model),
                &format!("store {s} topic {t}"),
            );
        }
        store.close().expect("close");
    }
}

#[test]
fn topics_opened_alone_and_stores_share_the_process_bound_of_open_files() {
    run(
        module_path!(),
        "topics_opened_alone_and_stores_share_the_process_bound_of_open_files",
        128,
        child_alone_and_stores,
        check_alone_and_stores,
    );
}

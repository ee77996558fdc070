//! A store's life around its handles: dropping the last handle releases the directory at once,
//! a topic handle kept after the store is gone refuses every write, a store's topic directory
//! opens only through the store, a former owner hears `Fenced` on every call, and `flush_all`
//! covers a topic whose close is under way.

use crate::support;

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ackstore::{
    CursorOptions, Error, InitialPosition, LedgerConfig, ManagedLedger, MemStorage,
    NonDurableOptions, Position, Store, StoreConfig,
};
use support::tap::{Hook, Op, Tap};
use support::topic::store_config;

/// A store whose flusher pool ticks as often as it can, so a tick is in progress at almost any
/// moment.
fn busy_flusher_config() -> StoreConfig {
    let mut config = store_config(1_000);
    config.ledger.cursor.flush_interval = Some(Duration::from_millis(1));
    config.flusher_threads = 2;
    config
}

/// Holds the first sync of a journal segment by a thread of the flusher pool once armed: tells
/// the test it is there, and waits until the test lets it go.
#[derive(Default)]
struct TickGate {
    armed: Mutex<Option<(Sender<()>, Receiver<()>)>>,
}

impl Hook for TickGate {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        let flusher = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("ackstore-flusher"));
        if flusher
            && matches!(op, Op::Sync(name) if name.starts_with("journal-"))
            && let Some((reached, go)) = self.armed.lock().expect("gate").take()
        {
            reached.send(()).expect("the test waits");
            go.recv().expect("the test lets the tick go");
        }
        Ok(())
    }
}

/// The last handle is dropped while a pool thread is in the middle of a tick: the drop waits
/// for that tick, and the directory can be opened again the moment the drop has returned.
#[test]
fn dropping_the_last_handle_releases_the_directory_before_the_drop_returns() {
    let disk = MemStorage::new();
    let gate = Arc::new(TickGate::default());
    let storage: Arc<dyn ackstore::Storage> =
        Arc::new(Tap::new(Arc::new(disk.clone()), gate.clone()));
    for round in 0..20 {
        let store = Store::open_with_storage(storage.clone(), busy_flusher_config())
            .unwrap_or_else(|e| panic!("round {round}: open after the last handle went: {e}"));
        let topic = store.topic("t").expect("topic");
        let p = topic.append(b"e").expect("append");
        topic.sync().expect("sync");
        let cursor = topic
            .open_cursor("sub", CursorOptions::default())
            .expect("cursor");
        let (reached_tx, reached) = channel();
        let (go, go_rx) = channel();
        *gate.armed.lock().expect("gate") = Some((reached_tx, go_rx));
        // A dirty cursor: the pool's next tick syncs, and is held there.
        cursor.ack(p).expect("ack");
        reached.recv().expect("a pool tick reaches its sync");
        drop(cursor);
        drop(topic);
        let dropping = std::thread::spawn(move || drop(store));
        go.send(()).expect("the tick waits");
        dropping.join().expect("the drop");
        let again = Store::open_with_storage(storage.clone(), busy_flusher_config())
            .unwrap_or_else(|e| panic!("round {round}: open right after the drop: {e}"));
        let c = again
            .topic("t")
            .and_then(|t| t.open_cursor("sub", CursorOptions::default()))
            .expect("cursor");
        assert!(c.is_acked(p).expect("is_acked"), "round {round}");
        drop(c);
        again.close().expect("close");
    }
    // On real files, a close then a drop releases it just the same.
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = Store::open(dir.path(), busy_flusher_config()).expect("open");
    store.topic("t").expect("topic");
    store.close().expect("close");
    drop(store);
    Store::open(dir.path(), busy_flusher_config()).expect("open after close and drop");
}

/// Topic `t` of `store` with four synced entries and cursor `sub` that acked the second (not
/// flushed).
fn topic_with_an_ack(store: &Store) -> (Arc<ManagedLedger>, ackstore::Cursor, Vec<Position>) {
    let topic = store.topic("t").expect("topic");
    let ps = support::topic::append_n(&topic, 4);
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    cursor.ack(ps[1]).expect("ack");
    (topic, cursor, ps)
}

#[test]
fn a_topic_kept_after_its_store_was_dropped_refuses_every_write_and_loses_no_flushed_ack() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = Store::open(dir.path(), store_config(1_000)).expect("open");
    let (topic, cursor, ps) = topic_with_an_ack(&store);
    drop(store);
    assert!(
        matches!(topic.append(b"late"), Err(Error::Closed)),
        "an append on a topic whose store is gone"
    );
    assert!(
        matches!(cursor.ack(ps[2]), Err(Error::Closed)),
        "an ack on a cursor whose store is gone"
    );
    assert!(matches!(topic.sync(), Err(Error::Closed)));
    assert!(matches!(cursor.flush(), Err(Error::Closed)));
    // The directory is free although the handles live, and the store's drop kept the ack
    // made before it.
    let store = Store::open(dir.path(), store_config(1_000)).expect("reopen");
    let again = store.topic("t").expect("topic");
    let c = again
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    assert!(c.is_acked(ps[1]).expect("is_acked"));
    assert!(!c.is_acked(ps[2]).expect("is_acked"));
    assert_eq!(
        again.last_position(),
        Some(ps[3]),
        "no entry after the drop"
    );
    drop((topic, cursor));
}

fn assert_owned_by_store(opened: ackstore::Result<ManagedLedger>, what: &str) {
    match opened {
        Err(Error::OwnedByStore { .. }) => {}
        Err(e) => panic!("{what}: refused with the wrong error: {e}"),
        Ok(_) => panic!("{what}: opened as a topic of its own"),
    }
}

#[test]
fn a_stores_topic_directory_opens_only_through_the_store_running_or_not() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = Store::open(dir.path(), store_config(1_000)).expect("open");
    let topic = store.topic("t").expect("topic");
    let p = topic.append(b"store's entry").expect("append");
    topic.sync().expect("sync");
    let topic_dir = dir.path().join("t1");
    assert!(topic_dir.is_dir(), "the topic's own directory");
    let config = LedgerConfig::default();
    assert_owned_by_store(
        ManagedLedger::open(&topic_dir, config.clone()),
        "the running store's topic",
    );
    assert_owned_by_store(
        ManagedLedger::open(dir.path(), config.clone()),
        "the running store's directory",
    );
    assert_owned_by_store(
        ManagedLedger::open(dir.path().join("t7"), config.clone()),
        "a topic directory the store has not created yet",
    );
    assert!(
        !dir.path().join("t7").exists(),
        "a refused open creates nothing"
    );
    drop(topic);
    store.close().expect("close");
    drop(store);
    assert_owned_by_store(
        ManagedLedger::open(&topic_dir, config.clone()),
        "the closed store's topic",
    );
    assert_owned_by_store(
        ManagedLedger::open(dir.path(), config.clone()),
        "the closed store's directory",
    );
    // Relative paths name the same directory.
    let relative = std::env::current_dir()
        .ok()
        .and_then(|cwd| pathdiff(&topic_dir, &cwd));
    if let Some(relative) = relative {
        assert_owned_by_store(
            ManagedLedger::open(relative, config.clone()),
            "the topic by a relative path",
        );
    }
    // A directory of that name outside any store is a topic like any other.
    let elsewhere = tempfile::tempdir().expect("temporary directory");
    ManagedLedger::open(elsewhere.path().join("t1"), config).expect("a plain topic named t1");
    // The store's topic holds only the store's entry.
    let store = Store::open(dir.path(), store_config(1_000)).expect("reopen");
    let topic = store.topic("t").expect("topic");
    assert_eq!(topic.last_position(), Some(p));
}

/// `path` relative to `base` when `path` lies under `base`.
fn pathdiff(path: &std::path::Path, base: &std::path::Path) -> Option<std::path::PathBuf> {
    path.strip_prefix(base)
        .ok()
        .map(std::path::Path::to_path_buf)
}

#[test]
fn the_directory_of_a_store_on_storage_without_directories_is_no_topic() {
    let disk = MemStorage::new();
    support::topic::store_topic_with_a_flushed_cursor(
        Arc::new(disk.clone()),
        store_config(1_000),
        3,
    );
    assert_owned_by_store(
        ManagedLedger::open_with_storage(Arc::new(disk.clone()), LedgerConfig::default()),
        "the closed store's storage",
    );
    let store = Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000))
        .expect("the store still opens");
    assert_owned_by_store(
        ManagedLedger::open_with_storage(Arc::new(disk), LedgerConfig::default()),
        "the running store's storage",
    );
    drop(store);
}

#[test]
fn a_fenced_store_answers_fenced_on_every_later_flush() {
    let disk = MemStorage::new();
    let config = store_config(1_000);
    let old = Store::open_with_storage(Arc::new(disk.clone()), config.clone()).expect("open");
    let topic = old.topic("t").expect("topic");
    let ps: Vec<_> = (0..4)
        .map(|_| topic.append(b"e").expect("append"))
        .collect();
    topic.sync().expect("sync");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    cursor.ack(ps[0]).expect("ack");
    cursor.flush().expect("flush");
    disk.break_lock();
    let new = Store::open_with_storage(Arc::new(disk.clone()), config).expect("the new owner");
    for (i, p) in ps.iter().enumerate().skip(1) {
        let _ = cursor.ack(*p);
        let flushed = if i % 2 == 0 {
            cursor.flush()
        } else {
            old.flush_all().map(drop)
        };
        assert!(
            matches!(flushed, Err(Error::Fenced { .. })),
            "call {i} of the former owner: {flushed:?}"
        );
    }
    assert!(matches!(old.flush_all(), Err(Error::Fenced { .. })));
    drop(new);
}

/// Blocks the first read of a data ledger after it is armed until it is opened.
#[derive(Default)]
struct Gate {
    armed: Mutex<Option<(Sender<()>, Receiver<()>)>>,
}

impl Hook for Gate {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        if matches!(op, Op::Read(name) if name.contains("ledger-"))
            && let Some((reached, open)) = self.armed.lock().expect("gate").take()
        {
            reached.send(()).expect("the test waits");
            open.recv().expect("the test opens the gate");
        }
        Ok(())
    }
}

/// A topic's close is under way (it has begun and waits for a reader's read to end before it
/// closes its durable cursor) when `flush_all` is called: the call's `Ok` covers the cursor,
/// so a power cut right after it keeps the ack made before the call.
#[test]
fn flush_all_covers_the_cursors_of_a_topic_whose_close_is_under_way() {
    let disk = MemStorage::new();
    let gate = Arc::new(Gate::default());
    let mut config = store_config(1_000);
    config.flusher_threads = 0;
    let storage = Arc::new(Tap::new(Arc::new(disk.clone()), gate.clone()));
    let store = Store::open_with_storage(storage, config.clone()).expect("open");
    let topic = store.topic("t").expect("topic");
    let ps: Vec<_> = (0..4)
        .map(|_| topic.append(b"e").expect("append"))
        .collect();
    topic.sync().expect("sync");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    let reader = topic
        .open_non_durable_cursor(InitialPosition::Earliest, NonDurableOptions::default())
        .expect("reader");
    cursor.ack(ps[2]).expect("the ack the call must cover");

    let (reached_tx, reached) = channel();
    let (open, open_rx) = channel();
    *gate.armed.lock().expect("gate") = Some((reached_tx, open_rx));
    std::thread::scope(|s| {
        let read = s.spawn(|| reader.read_entries(1));
        reached
            .recv()
            .expect("the reader's read reaches the ledger file");
        let closed = s.spawn(|| topic.close());
        // The close has begun once the store no longer lists the topic as open; it then
        // waits for the reader, whose read is held at the gate.
        while !store.open_topic_names().is_empty() {
            std::thread::yield_now();
        }
        let flushed = store.flush_all();
        let image = disk.durable_image();
        open.send(()).expect("the reader waits");
        let _ = read.join().expect("reader thread");
        closed.join().expect("closer thread").expect("close");
        flushed.expect("flush_all");
        let store = Store::open_with_storage(Arc::new(image), config).expect("reopen");
        let topic = store.topic("t").expect("topic");
        let c = topic
            .open_cursor("sub", CursorOptions::default())
            .expect("cursor");
        assert!(
            c.is_acked(ps[2]).expect("is_acked"),
            "flush_all returned Ok without the ack made before it"
        );
    });
}

/// Fails every operation `hits` picks, once armed, with an I/O error of kind `kind`.
struct FailOps {
    armed: std::sync::atomic::AtomicBool,
    hits: fn(Op<'_>) -> bool,
    kind: std::io::ErrorKind,
}

impl FailOps {
    fn new(hits: fn(Op<'_>) -> bool, kind: std::io::ErrorKind) -> Self {
        Self {
            armed: std::sync::atomic::AtomicBool::new(false),
            hits,
            kind,
        }
    }
}

impl Hook for FailOps {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        if self.armed.load(std::sync::atomic::Ordering::SeqCst) && (self.hits)(op) {
            return Err(Error::io(
                op.kind(),
                op.name(),
                std::io::Error::from(self.kind),
            ));
        }
        Ok(())
    }
}

#[test]
fn an_io_error_of_a_former_owner_is_answered_as_the_fence_it_is() {
    let disk = MemStorage::new();
    // Every write to a journal segment fails with "not found", as shared storage answers a
    // former owner whose object the new owner removed.
    let vanished = Arc::new(FailOps::new(
        |op| matches!(op, Op::Write(name) if name.starts_with("journal-")),
        std::io::ErrorKind::NotFound,
    ));
    let config = store_config(1_000);
    let storage = Arc::new(Tap::new(Arc::new(disk.clone()), vanished.clone()));
    let old = Store::open_with_storage(storage, config.clone()).expect("open");
    let topic = old.topic("t").expect("topic");
    let ps: Vec<_> = (0..3)
        .map(|_| topic.append(b"e").expect("append"))
        .collect();
    topic.sync().expect("sync");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    cursor.ack(ps[0]).expect("ack");
    cursor.flush().expect("flush");
    disk.break_lock();
    let new = Store::open_with_storage(Arc::new(disk.clone()), config).expect("the new owner");
    vanished
        .armed
        .store(true, std::sync::atomic::Ordering::SeqCst);
    cursor.ack(ps[1]).expect("ack");
    let flushed = cursor.flush();
    assert!(
        matches!(flushed, Err(Error::Fenced { .. })),
        "the former owner's first error: {flushed:?}"
    );
    assert!(matches!(old.flush_all(), Err(Error::Fenced { .. })));
    drop(new);
}

/// `Store::close` releases the directory while the closed store's handles live: a new store
/// opens it at once (on the in-memory disk and on real files) with every flushed ack, and every
/// later call on the closed store, its topics and cursors is `Error::Closed`.
#[test]
fn closing_a_store_releases_its_directory_while_its_handles_live() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let disk = MemStorage::new();
    let opens: [&dyn Fn() -> ackstore::Result<Store>; 2] = [
        &|| Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000)),
        &|| Store::open(dir.path(), store_config(1_000)),
    ];
    for open in opens {
        let store = open().expect("open");
        let kept = store.clone();
        let (topic, cursor, ps) = topic_with_an_ack(&store);
        assert!(
            matches!(open(), Err(Error::Locked { .. })),
            "held while open"
        );
        // Not flushed: the close flushes it.
        store.close().expect("close");
        let again = open().expect("open while the closed store's handles live");
        for (what, closed) in [
            ("topic", kept.topic("t").map(drop)),
            ("another topic", kept.topic("u").map(drop)),
            ("flush_all", kept.flush_all().map(drop)),
            ("close", kept.close()),
            ("append", topic.append(b"late").map(drop)),
            ("ack", cursor.ack(ps[2]).map(drop)),
            ("flush", cursor.flush()),
        ] {
            assert!(
                matches!(closed, Err(Error::Closed)),
                "{what} on the closed store: {closed:?}"
            );
        }
        let c = again
            .topic("t")
            .and_then(|t| t.open_cursor("sub", CursorOptions::default()))
            .expect("cursor");
        assert!(c.is_acked(ps[1]).expect("is_acked"), "the close flushed it");
        assert!(
            !c.is_acked(ps[2]).expect("is_acked"),
            "made after the close"
        );
        assert_eq!(again.topic_names(), ["t"], "no topic `u` was created");
        drop(c);
        again.close().expect("close");
        drop((store, kept, topic, cursor));
    }
}

/// Topics opened from several threads while the store closes: each open either finishes before
/// the close and is closed by it, or is refused; none writes after the close returned, so a new
/// store opened then owns the directory alone.
#[test]
fn topics_opened_while_the_store_closes_are_closed_with_it_or_refused() {
    for round in 0..20 {
        let disk = MemStorage::new();
        let store =
            Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000)).expect("open");
        store.topic("t0").expect("topic");
        let (started_tx, started) = channel();
        let openers: Vec<_> = (0..4)
            .map(|i| {
                let store = store.clone();
                let started = started_tx.clone();
                std::thread::spawn(move || {
                    started.send(()).expect("the test waits");
                    (0..8)
                        .map(|j| store.topic(&format!("t{i}-{j}")))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for _ in 0..4 {
            started.recv().expect("an opener started");
        }
        store.close().expect("close");
        let again = Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000))
            .unwrap_or_else(|e| panic!("round {round}: open after the close: {e}"));
        for opener in openers {
            for opened in opener.join().expect("opener") {
                match opened {
                    Ok(topic) => assert!(
                        matches!(topic.append(b"late"), Err(Error::Closed)),
                        "round {round}: a topic of the closed store appended"
                    ),
                    Err(Error::Closed) => {}
                    Err(e) => panic!("round {round}: {e}"),
                }
            }
        }
        again.close().expect("close");
    }
}

/// A topic whose own close failed (its caller heard the error) is not reported again by the
/// store's close as `Error::Closed`, which says the store was closed already: the store's close
/// of an open store succeeds, releases the directory, and answers `Closed` only when called
/// again.
#[test]
fn a_stores_close_after_a_topics_failed_close_closes_the_store() {
    let disk = MemStorage::new();
    // Every sync of a data ledger fails, as a failing disk answers.
    let hook = Arc::new(FailOps::new(
        |op| matches!(op, Op::Sync(name) if name.contains("ledger-")),
        std::io::ErrorKind::Other,
    ));
    let storage: Arc<dyn ackstore::Storage> =
        Arc::new(Tap::new(Arc::new(disk.clone()), hook.clone()));
    let store = Store::open_with_storage(storage, store_config(1_000)).expect("open");
    let topic = store.topic("t").expect("topic");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    let p = topic.append(b"e").expect("append");
    topic.sync().expect("sync");
    cursor.ack(p).expect("ack");
    cursor.flush().expect("flush");
    topic.append(b"unsynced").expect("append");
    hook.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let failed = topic.close();
    assert!(
        failed.is_err(),
        "the topic's close syncs its ledger: {failed:?}"
    );
    hook.armed.store(false, std::sync::atomic::Ordering::SeqCst);
    let closed = store.close();
    assert!(closed.is_ok(), "the store's close: {closed:?}");
    assert!(matches!(store.close(), Err(Error::Closed)));
    let again = Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000))
        .expect("the directory is released");
    let topic = again.topic("t").expect("topic");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    assert!(cursor.is_acked(p).expect("is_acked"), "flushed means kept");
}

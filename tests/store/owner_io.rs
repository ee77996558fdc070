//! A single owner after an I/O error of a catalog write is never told it is fenced, and a slow
//! topic open never stalls the flushes of other topics.

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use ackstore::{CursorOptions, Error, MemStorage, Position, Storage, Store, StoreConfig};
use support::tap::{Hook, Op, Tap};

/// A hook on an in-memory disk that can fail its next directory sync once, and hold the first
/// listing of a given prefix until released.
#[derive(Clone, Default)]
struct Faulty {
    disk: MemStorage,
    fail_next_sync_dir: Arc<AtomicBool>,
    gate: Arc<Gate>,
}

#[derive(Default)]
struct Gate {
    /// The prefix whose next listing waits (and `true` once a listing is waiting).
    prefix: Mutex<Option<(String, bool)>>,
    /// Signalled when a listing starts waiting.
    arrived: Condvar,
    open: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    fn arm(&self, prefix: &str) {
        *self.prefix.lock().unwrap() = Some((prefix.to_owned(), false));
        *self.open.lock().unwrap() = false;
    }
    fn release(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
    /// Returns once a listing of the armed prefix is waiting.
    fn wait_for_a_listing(&self) {
        let mut armed = self.prefix.lock().unwrap();
        while !armed.as_ref().is_some_and(|p| p.1) {
            armed = self.arrived.wait(armed).unwrap();
        }
    }
    fn pass(&self, prefix: &str) {
        {
            let mut armed = self.prefix.lock().unwrap();
            match armed.as_mut() {
                Some((p, waiting)) if p == prefix && !*waiting => *waiting = true,
                _ => return,
            }
            self.arrived.notify_all();
        }
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.cv.wait(open).unwrap();
        }
    }
}

impl Faulty {
    fn storage(&self) -> Arc<dyn Storage> {
        Arc::new(Tap::new(
            Arc::new(self.disk.clone()),
            Arc::new(self.clone()),
        ))
    }
}

impl Hook for Faulty {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        match op {
            Op::List(prefix) => self.gate.pass(prefix),
            Op::SyncDir if self.fail_next_sync_dir.swap(false, Ordering::SeqCst) => {
                return Err(Error::io(
                    "sync directory",
                    "faulty",
                    std::io::Error::other("injected: one directory sync fails"),
                ));
            }
            _ => {}
        }
        Ok(())
    }
}

/// A single owner whose catalog write (listing a new journal segment, which every owner's first
/// tick does) fails at its directory sync, after the new catalog version was linked: the
/// journal latches (the tick fails), the catalog handle adopts the version it linked, so the
/// store's ownership check keeps passing and no topic of the only owner is told
/// `Error::Fenced`.
#[test]
fn a_single_owner_is_never_told_it_is_fenced_after_a_failed_catalog_sync() {
    let faulty = Faulty::default();
    let store = Store::open_with_storage(faulty.storage(), StoreConfig::default()).expect("open");
    let topic = store.topic("t").expect("topic");
    let p = topic.append(b"x").expect("append");
    topic.sync().expect("sync");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    cursor.ack(p).expect("ack");
    // The first tick starts a segment and lists it in the catalog; that write's directory
    // sync fails.
    faulty.fail_next_sync_dir.store(true, Ordering::SeqCst);
    let flushed = cursor.flush();
    assert!(flushed.is_err(), "the injected fault reaches the tick");
    assert!(
        !matches!(flushed, Err(Error::Fenced { .. })),
        "the tick: {flushed:?}"
    );
    // No other owner exists. The topic's own data path did not fail.
    topic.append(b"y").expect("append");
    let synced = topic.sync();
    let created = store.topic("other").map(drop);
    assert!(
        !matches!(synced, Err(Error::Fenced { .. }))
            && !matches!(created, Err(Error::Fenced { .. })),
        "the only owner of the store, after one failed directory sync of a catalog write: \
         its topic's sync returned {synced:?}, a topic creation {created:?}"
    );
}

/// One slow topic open (a long scan of an open ledger, an fsync on open, a stalled storage call)
/// never stalls `flush_all` (the flusher pool's tick) over the other topics: a topic that is
/// opening has no cursor yet, and the tick does not wait for it.
#[test]
fn a_slow_topic_open_never_stalls_the_flushes_of_other_topics() {
    let faulty = Faulty::default();
    {
        let store =
            Store::open_with_storage(faulty.storage(), StoreConfig::default()).expect("open");
        store.topic("a").expect("a");
        let b = store.topic("b").expect("b");
        b.append(b"x").expect("append");
        b.sync().expect("sync");
        drop(b);
        store.close().expect("close");
    }
    let store =
        Arc::new(Store::open_with_storage(faulty.storage(), StoreConfig::default()).expect("open"));
    let a = store.topic("a").expect("a");
    let p: Position = a.append(b"1").expect("append");
    a.sync().expect("sync");
    let cursor = a
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    cursor.ack(p).expect("ack");
    // Topic "b" (catalog id 2) opens now; its first listing of its files stalls.
    faulty.gate.arm("t2-");
    let opening = {
        let store = store.clone();
        std::thread::spawn(move || store.topic("b").map(drop))
    };
    faulty.gate.wait_for_a_listing();
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let store = store.clone();
        std::thread::spawn(move || {
            let _ = tx.send(store.flush_all().map(|f| f.cursors));
        });
    }
    let flushed = rx.recv_timeout(Duration::from_secs(3));
    faulty.gate.release();
    opening.join().expect("thread").expect("b opens");
    assert!(
        flushed.is_ok(),
        "flush_all of topic a's cursor did not return within 3 s while topic b was opening"
    );
}

/// A storage that stops answering once armed: every operation fails as a RADOS operation
/// timeout does, and is recorded.
#[derive(Clone, Default)]
struct Unanswered {
    disk: MemStorage,
    armed: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Hook for Unanswered {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        if !self.armed.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.seen
            .lock()
            .unwrap()
            .push(format!("{} {}", op.kind(), op.name()));
        Err(Error::io(
            "storage call",
            "unanswered",
            std::io::Error::new(std::io::ErrorKind::TimedOut, "injected: no answer in time"),
        ))
    }
}

/// A flush that meets a storage which does not answer in time fails with that timeout, having
/// tried only its journal write: the store does not go on to ask the same storage whether
/// a newer owner took it (which would wait as long again, so a flush against a stalled cluster
/// would take twice its operation timeout).
#[test]
fn a_flush_against_a_storage_that_times_out_fails_without_asking_it_who_owns_the_store() {
    let unanswered = Unanswered::default();
    let storage: Arc<dyn Storage> = Arc::new(Tap::new(
        Arc::new(unanswered.disk.clone()),
        Arc::new(unanswered.clone()),
    ));
    // No flusher thread: only this test's flushes touch the storage.
    let config = StoreConfig {
        flusher_threads: 0,
        ..StoreConfig::default()
    };
    let store = Store::open_with_storage(storage, config).expect("open");
    let topic = store.topic("t").expect("topic");
    let p = topic.append(b"x").expect("append");
    topic.sync().expect("sync");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    cursor.ack(p).expect("ack");
    cursor.flush().expect("first flush, the storage answering");
    let q = topic.append(b"y").expect("append");
    topic.sync().expect("sync");
    cursor.ack(q).expect("ack");
    unanswered.armed.store(true, Ordering::SeqCst);
    let flushed = cursor.flush();
    let seen = unanswered.seen.lock().unwrap().clone();
    match &flushed {
        Err(Error::Io { source, .. }) => assert_eq!(
            source.kind(),
            std::io::ErrorKind::TimedOut,
            "the flush reports the timeout: {flushed:?}"
        ),
        other => panic!("the flush against an unanswering storage returned {other:?}"),
    }
    // The failed write and its undo touch the journal segment; nothing reads the store's
    // record.
    assert!(
        !seen.is_empty() && seen.iter().all(|op| op.contains(" journal-")),
        "operations tried after the storage stopped answering: {seen:?}"
    );
}

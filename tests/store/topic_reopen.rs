//! A topic of a store closed while an operation on it is in flight, and opened again by
//! `Store::topic` while that operation still runs: the store keeps one instance of a topic at a
//! time (the next instance's open waits for the closed one's last operation), and a cursor
//! opened while its topic closes is refused, so no two instances of a topic or a cursor ever
//! write at once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ackstore::{CursorOptions, MemStorage, Position, Storage, Store};
use support::tap::{Hook, Op, Tap};

use crate::support;

use support::topic::store_config;

type Action = Box<dyn FnOnce() + Send>;
type Pred = Box<dyn Fn(&str, &str) -> bool + Send>;

/// An in-memory disk that runs an action on the first operation matching a predicate of
/// (operation, name), on the thread that makes it: before a create or an existence check,
/// after a write.
#[derive(Clone, Default)]
struct Armed {
    disk: MemStorage,
    armed: Arc<Mutex<Vec<(Pred, Action)>>>,
}

impl Armed {
    fn arm(&self, pred: impl Fn(&str, &str) -> bool + Send + 'static, action: Action) {
        self.armed.lock().unwrap().push((Box::new(pred), action));
    }

    fn on(&self, op: &str, name: &str) {
        let action = {
            let mut armed = self.armed.lock().unwrap();
            let at = armed.iter().position(|(p, _)| p(op, name));
            at.map(|i| armed.remove(i).1)
        };
        if let Some(action) = action {
            action();
        }
    }

    fn storage(&self) -> Arc<dyn Storage> {
        Arc::new(Tap::new(
            Arc::new(self.disk.clone()),
            Arc::new(self.clone()),
        ))
    }
}

impl Hook for Armed {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        if matches!(op, Op::Exists(_) | Op::Create(_)) {
            self.on(op.kind(), op.name());
        }
        Ok(())
    }

    fn after(&self, op: Op<'_>) {
        if matches!(op, Op::Write(_)) {
            self.on(op.kind(), op.name());
        }
    }
}

fn on_thread(name: &'static str) -> bool {
    std::thread::current().name() == Some(name)
}

/// A `trim_consumed` takes the topic's log, then waits for its writer lock, which `close`
/// holds while it seals; while the trim then records its change and deletes the consumed
/// ledgers, another thread opens the topic again. That open waits for the trim (the closed
/// instance's last operation) before it reads the record, so the second instance sees the trim
/// and its own writes never list a deleted ledger again: the topic reopens after a restart.
#[test]
fn a_trim_in_flight_across_a_close_and_a_reopen_never_leaves_a_topic_that_cannot_open() {
    let tap = Armed::default();
    let store = Arc::new(Store::open_with_storage(tap.storage(), store_config(2)).expect("open"));
    let first = store.topic("t").expect("topic");
    // Ledgers of two entries: 1:0 1:1 | 2:0 2:1 | 3:0 (the open ledger at close).
    let ps: Vec<Position> = (0..5)
        .map(|_| first.append(b"e").expect("append"))
        .collect();
    first.sync().expect("sync");
    let cursor = first
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    cursor.ack_cumulative(ps[3]).expect("ack");
    cursor.flush().expect("flush");
    drop(cursor);

    let trimmed = Arc::new(Mutex::new(None));
    let second = Arc::new(Mutex::new(None));
    {
        // While `close` seals the open ledger (holding the writer lock): a trim starts.
        let (first, store, trimmed, second, tap2) = (
            first.clone(),
            store.clone(),
            trimmed.clone(),
            second.clone(),
            tap.clone(),
        );
        tap.arm(
            |op, name| op == "write" && name.contains("ledger-") && on_thread("closer"),
            Box::new(move || {
                // When the trim, past the close, starts its record write: the topic
                // is opened again.
                tap2.arm(
                    |op, name| op == "create" && name.contains("topic.") && on_thread("trimmer"),
                    Box::new(move || {
                        // Another thread opens the topic again while the trim writes.
                        std::thread::spawn(move || {
                            *second.lock().unwrap() = Some(store.topic("t"));
                        });
                        std::thread::sleep(Duration::from_millis(50));
                    }),
                );
                std::thread::Builder::new()
                    .name("trimmer".into())
                    .spawn(move || {
                        *trimmed.lock().unwrap() = Some(first.trim_consumed());
                    })
                    .expect("spawn");
                std::thread::sleep(Duration::from_millis(200));
            }),
        );
    }
    {
        let first = first.clone();
        std::thread::Builder::new()
            .name("closer".into())
            .spawn(move || first.close())
            .expect("spawn")
            .join()
            .expect("join")
            .expect("close");
    }
    // Wait for the trim.
    let trim = loop {
        if let Some(t) = trimmed.lock().unwrap().take() {
            break t;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let second = loop {
        if let Some(opened) = second.lock().unwrap().take() {
            break opened.expect("the second open, once the trim is done");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let trim = trim.expect("the trim of the closed instance, which had begun before its close");
    // The second instance works on: appends past a ledger boundary (a record write).
    let more: Vec<Position> = (0..3)
        .map(|_| second.append(b"n").expect("append"))
        .collect();
    second.sync().expect("the second instance's sync");
    drop(second);
    drop(first);
    let closed = store.close();
    drop(store);
    let again =
        Store::open_with_storage(Arc::new(tap.disk.clone()), store_config(2)).expect("reopen");
    let reopened = again.topic("t").map(|t| t.read(more[2]).map(|e| e.payload));
    assert!(
        matches!(reopened, Ok(Ok(_))),
        "the trim on the closed instance returned {trim:?}; the store's close {closed:?}; \
         after a restart the topic: {reopened:?}"
    );
}

/// A cursor opened while its topic closes (between the close's look at its open cursors and
/// their closes) is refused with `Error::Closed`: no cursor of a closed instance lives on beside
/// the topic's next instance under the same journal id, and the store, closed, opens again.
#[test]
fn a_cursor_opened_while_its_topic_closes_never_outlives_the_close() {
    let tap = Armed::default();
    let store = Arc::new(Store::open_with_storage(tap.storage(), store_config(2)).expect("open"));
    let first = store.topic("t").expect("topic");
    let ps: Vec<Position> = (0..6)
        .map(|_| first.append(b"e").expect("append"))
        .collect();
    first.sync().expect("sync");
    let sub = first
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    sub.ack(ps[0]).expect("ack");
    let late = Arc::new(Mutex::new(None));
    {
        let (first, late) = (first.clone(), late.clone());
        // While `close` flushes `sub` (a journal write on the closing thread).
        tap.arm(
            |op, name| op == "write" && name.starts_with("journal-") && on_thread("closer"),
            Box::new(move || {
                let opened =
                    std::thread::spawn(move || first.open_cursor("late", CursorOptions::default()))
                        .join()
                        .expect("join");
                *late.lock().unwrap() = Some(opened);
            }),
        );
    }
    {
        let first = first.clone();
        std::thread::Builder::new()
            .name("closer".into())
            .spawn(move || first.close())
            .expect("spawn")
            .join()
            .expect("join")
            .expect("close");
    }
    drop(sub);
    let late = late.lock().unwrap().take().expect("the hook ran");
    assert!(
        matches!(late, Err(ackstore::Error::Closed)),
        "open_cursor on a closing topic: {:?}",
        late.map(drop)
    );
    // The topic's next instance opens the cursor and flushes; the store closes and reopens.
    let second = store.topic("t").expect("opened again");
    let late = second
        .open_cursor("late", CursorOptions::default())
        .expect("the cursor on the new instance");
    late.ack(ps[4]).expect("ack");
    late.flush().expect("flush");
    drop(late);
    drop(second);
    drop(first);
    store.close().expect("close");
    drop(store);
    let again = Store::open_with_storage(Arc::new(tap.disk.clone()), store_config(2))
        .expect("the store, closed and dropped, opens again");
    let topic = again.topic("t").expect("topic");
    let cursor = topic
        .open_cursor("late", CursorOptions::default())
        .expect("cursor");
    assert!(cursor.is_acked(ps[4]).expect("is_acked"), "a flushed ack");
    let sub = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    assert!(
        sub.is_acked(ps[0]).expect("is_acked"),
        "flushed by the close"
    );
}

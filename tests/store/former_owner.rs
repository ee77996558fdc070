//! A former owner of a store (its lock broken, it does not know) at work while a new owner claims
//! the store, with the takeover placed at every storage operation of the former owner's call:
//! the former owner never deletes, cuts or hides what the new owner wrote, and a record write of
//! the former owner's that was in flight at the claim never undoes what the new owner then
//! flushed.

use crate::support;

use std::sync::{Arc, Mutex};

use ackstore::{CursorOptions, Error, MemStorage, Position, Store};
use support::takeover;
use support::tap::{Hook, Tap};
use support::topic::store_config;
use support::topic::store_topic_with_a_flushed_cursor;

/// A store holding topic `t` with three synced entries and a cursor `sub` that acked the
/// first one and flushed, closed cleanly.
fn prepared(per_ledger: u64) -> MemStorage {
    let disk = MemStorage::new();
    store_topic_with_a_flushed_cursor(Arc::new(disk.clone()), store_config(per_ledger), 3);
    disk
}

/// Which of the three entries of `prepared` cursor `sub` of `topic` has acknowledged.
fn sub_acked(topic: &ackstore::ManagedLedger) -> Vec<bool> {
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    acked_of(&cursor)
}

/// Which of the three entries of `prepared` `cursor` has acknowledged.
fn acked_of(cursor: &ackstore::Cursor) -> Vec<bool> {
    (0..3)
        .map(|e| cursor.is_acked(Position::new(1, e)).expect("is_acked"))
        .collect()
}

/// A former owner opens a topic it had not opened yet while the new owner claims the store,
/// opens the topic, creates a ledger, appends and syncs (`Ok`), at every step of that open: the
/// former owner's open (which takes every ledger file its record read does not list for an
/// orphan) never deletes the new owner's ledger, so the synced entry survives a restart.
#[test]
fn a_former_owners_topic_open_never_deletes_a_ledger_of_the_new_owner() {
    // How many storage operations the former owner's open of `t` makes.
    let steps = {
        let disk = prepared(1_000);
        let hooked = takeover::Disk::new(Arc::new(disk.clone()));
        let old =
            Store::open_with_storage(hooked.storage.clone(), store_config(1_000)).expect("open");
        let before = hooked.hook.count();
        old.topic("t").expect("topic");
        hooked.hook.count() - before
    };
    let mut failures = Vec::new();
    for n in 1..=steps {
        let disk = prepared(1_000);
        let hooked = takeover::Disk::new(Arc::new(disk.clone()));
        let old =
            Store::open_with_storage(hooked.storage.clone(), store_config(1_000)).expect("open");
        let new = {
            let disk = disk.clone();
            hooked.arm_takeover(n, move || {
                let store = takeover::new_store_owner(&disk, store_config(1_000), "t");
                let topic = store.topic("t").expect("topic");
                let p = topic.append(b"new owner's entry").expect("append");
                topic.sync().expect("the new owner's sync");
                drop(topic);
                (store, p)
            })
        };
        // The former owner's open of the topic; its outcome does not matter.
        let _ = old.topic("t");
        let (new, p) = new.lock().expect("slot").take().expect("the takeover ran");
        let topic = new.topic("t").expect("topic");
        let read_now = topic.read(p).map(|e| e.payload);
        let closed = new.close();
        drop((topic, new));
        drop(old);
        let again = Store::open_with_storage(Arc::new(disk.durable_image()), store_config(1_000));
        // The store stays open while its topic is read.
        let after = again.as_ref().map_err(ToString::to_string).and_then(|s| {
            s.topic("t")
                .and_then(|t| t.read(p).map(|e| e.payload))
                .map_err(|e| e.to_string())
        });
        if !matches!(&after, Ok(b) if b == b"new owner's entry") {
            failures.push(format!(
                "takeover after step {n} of the former owner's open: the new owner's synced \
                 entry {p}: read by the new owner {read_now:?}, its close {closed:?}, after a \
                 restart {after:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A former owner deletes a cursor while the new owner claims the store and, only consuming,
/// acks and flushes that cursor (`Ok`), at every step of the deletion: the deletion's record
/// write either landed before the new owner's topic claim (then the new owner never had the
/// cursor) or is refused by it, so a cursor the new owner flushed is never gone after a restart.
#[test]
fn a_fenced_cursor_deletion_never_takes_effect_under_the_new_owner() {
    let steps = {
        let disk = prepared(1_000);
        let hooked = takeover::Disk::new(Arc::new(disk.clone()));
        let old =
            Store::open_with_storage(hooked.storage.clone(), store_config(1_000)).expect("open");
        let topic = old.topic("t").expect("topic");
        let before = hooked.hook.count();
        topic.delete_cursor("sub").expect("delete");
        hooked.hook.count() - before
    };
    let mut failures = Vec::new();
    for n in 1..=steps {
        let disk = prepared(1_000);
        let hooked = takeover::Disk::new(Arc::new(disk.clone()));
        let old =
            Store::open_with_storage(hooked.storage.clone(), store_config(1_000)).expect("open");
        let old_topic = old.topic("t").expect("topic");
        let new = {
            let disk = disk.clone();
            hooked.arm_takeover(n, move || {
                takeover::new_store_owner(&disk, store_config(1_000), "t")
            })
        };
        let deleted = old_topic.delete_cursor("sub");
        let new = new.lock().expect("slot").take().expect("the takeover ran");
        // The new owner consumes: acks the second entry and flushes.
        let topic = new.topic("t").expect("topic");
        let cursor = topic
            .open_cursor("sub", CursorOptions::default())
            .expect("cursor");
        cursor.ack(Position::new(1, 1)).expect("ack");
        let flushed = cursor.flush();
        drop(cursor);
        drop(topic);
        new.close().expect("close");
        drop(new);
        drop((old_topic, old));
        let again =
            Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000)).expect("reopen");
        let topic = again.topic("t").expect("topic");
        let names = topic.cursor_names();
        let acked = sub_acked(&topic);
        if flushed.is_ok() && (names != ["sub"] || !acked[1]) {
            failures.push(format!(
                "takeover after step {n} of the former owner's delete_cursor (which returned \
                 {deleted:?}): the new owner's flush returned Ok, yet after a restart the \
                 cursors are {names:?} and `sub` has acked {acked:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The same race for messages: were the fenced deletion of the only cursor to stand, a later
/// `trim_consumed` would find no cursor and delete entries no one acknowledged. Every entry
/// the new owner's cursor has not acknowledged stays readable.
#[test]
fn a_fenced_cursor_deletion_never_lets_a_trim_delete_unacknowledged_entries() {
    // One entry per ledger: 1:0 .. 4:0 (ledger ids from the first block).
    let disk = MemStorage::new();
    let ps = store_topic_with_a_flushed_cursor(Arc::new(disk.clone()), store_config(1), 4);
    let hooked = takeover::Disk::new(Arc::new(disk.clone()));
    let old = Store::open_with_storage(hooked.storage.clone(), store_config(1)).expect("open");
    let old_topic = old.topic("t").expect("topic");
    // Step 2: the former owner's pre-check (two lookups) has just passed.
    let new = {
        let disk = disk.clone();
        hooked.arm_takeover(2, move || {
            takeover::new_store_owner(&disk, store_config(1), "t")
        })
    };
    let deleted = old_topic.delete_cursor("sub");
    assert!(matches!(deleted, Err(Error::Fenced { .. })), "{deleted:?}");
    let new = new.lock().expect("slot").take().expect("the takeover ran");
    {
        let topic = new.topic("t").expect("topic");
        let cursor = topic
            .open_cursor("sub", CursorOptions::default())
            .expect("the new owner's cursor");
        cursor.ack(ps[1]).expect("ack");
        cursor.flush().expect("the new owner's flush");
    }
    new.close().expect("close");
    drop(new);
    drop((old_topic, old));
    let again = Store::open_with_storage(Arc::new(disk.clone()), store_config(1)).expect("reopen");
    let topic = again.topic("t").expect("topic");
    let names = topic.cursor_names();
    let trimmed = topic.trim_consumed().expect("trim");
    let unacked = topic.read(ps[2]).map(|e| e.payload);
    assert!(
        unacked.is_ok(),
        "after the new owner's restart the cursors are {names:?}, a trim deleted ledgers \
         {trimmed:?}, and entry {} that no cursor ever acknowledged is gone: {unacked:?}",
        ps[2]
    );
}

/// A hook whose first write of more than `min` bytes to a ledger file writes its first half,
/// runs `action`, then writes the rest: a write another reader can see half done, as a
/// concurrent `pread` can on a real file system.
struct SplitWrites {
    action: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    min: usize,
}

impl Hook for SplitWrites {
    fn write(
        &self,
        name: &str,
        buf: &[u8],
        offset: u64,
        write: &dyn Fn(&[u8], u64) -> ackstore::Result<()>,
    ) -> ackstore::Result<()> {
        if name.contains("ledger-") && buf.len() > self.min {
            let action = self.action.lock().expect("action").take();
            if let Some(action) = action {
                let half = buf.len() / 2;
                write(&buf[..half], offset)?;
                action();
                return write(&buf[half..], offset + half as u64);
            }
        }
        write(buf, offset)
    }
}

/// A former owner's topic open meets the new owner's write in progress (half of it visible)
/// at the end of the new owner's ledger: a topic of a store cuts no torn tail, so the new
/// owner's write completes whole, its `sync` returns `Ok`, and its entries read back after a
/// power cut.
#[test]
fn a_former_owners_topic_open_never_cuts_the_new_owners_write_in_progress() {
    let disk = prepared(1_000);
    let old = Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000)).expect("open");
    disk.break_lock();
    let split = Arc::new(SplitWrites {
        action: Mutex::default(),
        min: 400,
    });
    let new = Store::open_with_storage(
        Arc::new(Tap::new(Arc::new(disk.clone()), split.clone())),
        store_config(1_000),
    )
    .expect("claim");
    let topic = new.topic("t").expect("topic");
    let ps: Vec<Position> = (0..3)
        .map(|i| {
            topic
                .append(format!("entry {i} of the new owner {}", "x".repeat(200)).as_bytes())
                .expect("append")
        })
        .collect();
    let opened_by_old = Arc::new(Mutex::new(None));
    {
        let (old_open, opened_by_old) = (Arc::new(old), opened_by_old.clone());
        *split.action.lock().expect("action") = Some(Box::new(move || {
            // The former owner, which never opened `t`, opens it now.
            let r = old_open.topic("t").map(drop);

            *opened_by_old.lock().expect("slot") = Some(r);
        }));
    }
    let synced = topic.sync();
    let old_result = opened_by_old.lock().expect("slot").take();
    assert!(
        old_result.is_some(),
        "the split write ran the former owner's open"
    );
    synced.expect("the new owner's sync");
    let now: Vec<_> = ps
        .iter()
        .map(|p| topic.read(*p).map(|e| e.payload))
        .collect();
    drop(topic);
    let closed = new.close();
    drop(new);
    let again = Store::open_with_storage(Arc::new(disk.durable_image()), store_config(1_000));
    let after: ackstore::Result<Vec<Vec<u8>>> = again.and_then(|s| {
        let t = s.topic("t")?;
        ps.iter().map(|p| t.read(*p).map(|e| e.payload)).collect()
    });
    assert!(
        after.is_ok(),
        "the new owner's sync returned Ok (reads then: {now:?}, close {closed:?}); the former \
         owner's open returned {old_result:?}; after a power cut the new owner's entries read \
         {after:?}"
    );
}

/// A former owner reopens a cursor its store's journal holds after a new owner claimed the
/// store and flushed that cursor further: the reopen reads and writes no file (the topic's open
/// made the ownership check), and what the former owner then acks and flushes is refused as
/// `Fenced` and never reaches the new owner's state.
#[test]
fn a_former_owner_reopens_a_journal_cursor_without_storage_and_its_flush_is_fenced() {
    let disk = prepared(1_000);
    let hooked = takeover::Disk::new(Arc::new(disk.clone()));
    let old = Store::open_with_storage(hooked.storage.clone(), store_config(1_000)).expect("open");
    let old_topic = old.topic("t").expect("topic");
    let new = takeover::new_store_owner(&disk, store_config(1_000), "t");
    {
        let topic = new.topic("t").expect("topic");
        let cursor = topic
            .open_cursor("sub", CursorOptions::default())
            .expect("cursor");
        cursor.ack(Position::new(1, 1)).expect("ack");
        cursor.flush().expect("the new owner's flush");
    }
    let before = hooked.hook.count();
    let reopened = old_topic.open_cursor("sub", CursorOptions::default());
    assert_eq!(
        hooked.hook.count(),
        before,
        "reopening a cursor the journal holds made storage operations"
    );
    let cursor = reopened.expect("a reopen from the journal's index");
    // The state the former owner's open recovered: entry 0 acknowledged, no more.
    assert_eq!(acked_of(&cursor), [true, false, false]);
    cursor.ack(Position::new(1, 2)).expect("an ack in memory");
    let flushed = cursor.flush();
    assert!(matches!(flushed, Err(Error::Fenced { .. })), "{flushed:?}");
    drop((cursor, old_topic));
    drop(old);
    new.close().expect("close");
    drop(new);
    let again = Store::open_with_storage(Arc::new(disk), store_config(1_000)).expect("reopen");
    let topic = again.topic("t").expect("topic");
    let acked = sub_acked(&topic);
    assert_eq!(
        acked,
        [true, true, false],
        "the new owner's state after a restart"
    );
}

//! A cursor its topic closed after a failed flush (the disk full), opened again in the same
//! store once space returned: it holds everything its last `Ok` flush covered and nothing the
//! application did not ack, whatever its evictions wrote to the journal after that flush. Those
//! copies (of ack partitions and of partial entries) no marker references; the reopened cursor
//! recovers the committed state, never reads them as its own.

use crate::support;

use std::sync::Arc;

use ackstore::{Cursor, CursorOptions, ManagedLedger, MemStorage, Position, Store};
use support::tmpfs::{chain, is_no_space};

const TOPIC: &str = "persistent://t/ns/closed-after-a-failed-flush";

/// The store on `disk` (ledgers of 10 entries, each its own ack partition; cursors with no ack
/// memory of their own).
fn open(disk: &MemStorage) -> Store {
    let config = support::config::store_budgeted(10, 0, 4096);
    Store::open_with_storage(Arc::new(disk.clone()), config).expect("open")
}

/// The store on `disk`, its topic of 20 entries (two ledgers), their positions, and the topic's
/// cursor `sub`.
fn twenty_entries(disk: &MemStorage) -> (Store, Arc<ManagedLedger>, Vec<Position>, Cursor) {
    let store = open(disk);
    let topic = store.topic(TOPIC).expect("topic");
    let ps = support::topic::append_n(&topic, 20);
    let c = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    (store, topic, ps, c)
}

/// Closes `store` and opens it again on `disk`, with the cursor `sub` of its topic.
fn restarted(store: Store, disk: &MemStorage) -> (Store, Cursor) {
    store.close().expect("close");
    drop(store);
    let store = open(disk);
    let c = store
        .topic(TOPIC)
        .expect("the topic after a restart")
        .open_cursor("sub", CursorOptions::default())
        .expect("the cursor after a restart");
    (store, c)
}

/// Runs `flushed` on a cursor of a topic of 20 entries in two ledgers of 10 (each its own ack
/// partition), the cursor with no ack memory of its own (every change of partition evicts the
/// others to the journal), then flushes it; runs `unflushed`, which leaves a partition the
/// flush wrote changed and evicted; fills the disk and closes the topic, whose close of the
/// cursor fails; gives the space back and opens the topic and the cursor again in the same
/// store: `check` passes on it. Then it acks the last entry and flushes (referencing the
/// journal's copy of every partition it did not change), and the store restarts: `check`
/// passes again.
fn reopened(
    flushed: impl Fn(&Cursor, &[Position]),
    unflushed: impl Fn(&Cursor, &[Position]),
    check: impl Fn(&Cursor, &[Position]),
) {
    let disk = MemStorage::new();
    let (store, topic, ps, c) = twenty_entries(&disk);
    flushed(&c, &ps);
    c.flush().expect("the flush with space");
    unflushed(&c, &ps);
    disk.set_capacity(Some(disk.used_bytes()));
    let e = topic
        .close()
        .expect_err("the cursor's flush on a full disk");
    assert!(is_no_space(&e), "{}", chain(&e));
    drop((c, topic));
    disk.set_capacity(None);
    let topic = store.topic(TOPIC).expect("the topic again");
    let c = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("the cursor again");
    check(&c, &ps);
    c.ack(ps[19]).expect("ack");
    c.flush().expect("a flush with space");
    drop((c, topic));
    let (store, c) = restarted(store, &disk);
    check(&c, &ps);
    assert!(acked(&c, ps[19]), "entry 19 was flushed and is lost");
    store.close().expect("close");
}

/// Whether `p` is acked, the error spelt out.
fn acked(c: &Cursor, p: Position) -> bool {
    c.is_acked(p)
        .unwrap_or_else(|e| panic!("is_acked({p}): {}", chain(&e)))
}

/// A cumulative ack moved mark-delete over an entry the flush wrote in a partition, and an ack
/// after it left that partition as many entries as the flush wrote: the evicted copy has the
/// cardinality of the committed one, but not its entries.
#[test]
fn a_flushed_ack_is_kept_when_a_later_copy_of_its_partition_has_as_many_entries() {
    reopened(
        |c, ps| {
            c.ack(ps[2]).expect("ack");
            c.ack(ps[4]).expect("ack");
        },
        |c, ps| {
            c.ack_cumulative(ps[2]).expect("cumulative ack");
            c.ack(ps[6]).expect("ack");
            // The first ledger's partition is evicted, written to the journal.
            c.ack(ps[15]).expect("ack");
        },
        |c, ps| {
            for i in [2, 4] {
                assert!(acked(c, ps[i]), "entry {i} was flushed and is lost");
            }
            for i in [3, 5, 7, 8, 9, 14, 16] {
                assert!(!acked(c, ps[i]), "entry {i} was never acked");
            }
        },
    );
}

/// An ack after the flush grew a partition the flush wrote, and it was evicted: its copy holds
/// more entries than the committed one.
#[test]
fn a_partition_grown_after_the_last_flush_reads_as_that_flush_wrote_it() {
    reopened(
        |c, ps| {
            c.ack(ps[4]).expect("ack");
        },
        |c, ps| {
            c.ack(ps[6]).expect("ack");
            c.ack(ps[15]).expect("ack");
        },
        |c, ps| {
            assert!(acked(c, ps[4]), "entry 4 was flushed and is lost");
            for i in [0, 5, 7, 14, 16] {
                assert!(!acked(c, ps[i]), "entry {i} was never acked");
            }
        },
    );
}

/// A cumulative ack moved mark-delete over a partial entry the flush wrote, and a batch-index
/// ack after it left that partition of partial entries as many entries as the flush wrote: the
/// evicted copy has the entry count of the committed batch record, but not its entries.
#[test]
fn flushed_partial_entries_are_kept_when_a_later_copy_has_as_many_entries() {
    reopened(
        |c, ps| {
            c.ack_batch_index(ps[3], 0, 4).expect("batch ack");
        },
        |c, ps| {
            c.ack_cumulative(ps[3]).expect("cumulative ack");
            c.ack_batch_index(ps[5], 1, 4).expect("batch ack");
            // The first ledger's partial entries are evicted, written to the journal.
            c.ack_batch_index(ps[13], 0, 4).expect("batch ack");
            c.ack(ps[15]).expect("ack");
        },
        |c, ps| {
            let message = |p: Position, i| {
                c.is_batch_index_acked(p, i)
                    .unwrap_or_else(|e| panic!("message {i} of {p}: {}", chain(&e)))
            };
            assert!(
                message(ps[3], 0),
                "message 0 of entry 3 was flushed and is lost"
            );
            for (e, i) in [(3, 1), (5, 0), (5, 2), (13, 1)] {
                assert!(
                    !message(ps[e], i),
                    "message {i} of entry {e} was never acked"
                );
            }
            for i in [0, 4, 6, 14, 16] {
                assert!(!acked(c, ps[i]), "entry {i} was never acked");
            }
        },
    );
}

/// A cursor opened again while its first handle is open (its evictions since its last flush
/// pending in the journal) is that handle, never one recovered from the committed state: the
/// first handle's next flush references those copies, and both handles see every ack.
#[test]
fn a_cursor_opened_twice_keeps_the_copies_its_open_handle_evicted() {
    let disk = MemStorage::new();
    let (store, topic, ps, first) = twenty_entries(&disk);
    first.ack(ps[4]).expect("ack");
    first.flush().expect("flush");
    first.ack(ps[6]).expect("ack");
    // The first ledger's partition, grown since the flush, is evicted to the journal.
    first.ack(ps[15]).expect("ack");
    let second = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("the cursor again");
    for c in [&first, &second] {
        for i in [4, 6, 15] {
            assert!(acked(c, ps[i]), "entry {i} was acked and is lost");
        }
        assert!(!acked(c, ps[5]), "entry 5 was never acked");
    }
    second.flush().expect("flush");
    drop((first, second, topic));
    let (store, c) = restarted(store, &disk);
    for i in [4, 6, 15] {
        assert!(acked(&c, ps[i]), "entry {i} was flushed and is lost");
    }
    for i in [0, 5, 7, 14, 16] {
        assert!(!acked(&c, ps[i]), "entry {i} was never acked");
    }
    store.close().expect("close");
}

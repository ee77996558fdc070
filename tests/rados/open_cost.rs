//! What a takeover costs on RADOS: the round trips a new owner waits for, one after the other,
//! from its store open to the first answer of one of the store's topics, while the former
//! owner still holds its handle (its lock broken, as after its death). Each is a network round
//! trip and, for a write, a commit on every replica: on a loaded three-OSD pool they, more than
//! the lease, decide when a dead broker's stores serve again.

#![cfg(feature = "rados")]

use crate::support;

use std::sync::Arc;

use ackstore::{CursorOptions, InitialPosition, RadosStorage, Store};
use support::rados::{cluster, fresh_namespace, pool};

/// Topics of the store taken over; its open must not depend on them (see
/// `tests/meta_owner/meta_owned.rs`), only the topic asked for costs.
const TOPICS: usize = 10;
/// The round trips allowed from the store's open to the first answer of one of its topics: 53,
/// two of them for each of the three ownership checks on the way, each of which opens the file
/// of the version it holds and reads its end (a lookup of its name would pass for a stray linked
/// into it). A store topic's open checks the store's ownership after its listing only before it
/// removes something, which a takeover like this one does not.
const MOST_ROUND_TRIPS: u64 = 53;

fn storage(ns: &str) -> RadosStorage {
    cluster().storage(&pool(), ns).expect("namespace")
}

fn earliest() -> CursorOptions {
    CursorOptions {
        initial_position: InitialPosition::Earliest,
        inclusive: true,
    }
}

#[test]
fn a_store_taken_over_answers_within_a_bounded_number_of_round_trips() {
    let ns = fresh_namespace("open-cost");
    let config = support::config::store_without_flusher;
    // The former owner: every topic one synced entry acked and one not, its cursor flushed;
    // then it keeps its handle and its lease, as a broker that stopped answering.
    let former = Store::open_with_storage(Arc::new(storage(&ns)), config()).expect("open");
    for t in 0..TOPICS {
        let topic = former.topic(&format!("t{t}")).expect("topic");
        let first = topic.append(b"acked").expect("append");
        topic.append(b"unacked").expect("append");
        topic.sync().expect("sync");
        let cursor = topic.open_cursor("sub", earliest()).expect("cursor");
        cursor.ack(first).expect("ack");
    }
    former.flush_all().expect("flush");

    let taker = storage(&ns);
    taker.break_lock().expect("break the former owner's lock");
    let before = taker.round_trips();
    let store = Store::open_with_storage(Arc::new(taker.clone()), config()).expect("take over");
    let opened = taker.round_trips() - before;
    let topic = store.topic("t0").expect("topic");
    let cursor = topic.open_cursor("sub", earliest()).expect("cursor");
    let read = cursor.read_entries(1).expect("read");
    let answered = taker.round_trips() - before;
    assert_eq!(read.len(), 1, "the entry the former owner did not ack");
    assert_eq!(read[0].payload, b"unacked");
    assert!(
        answered <= MOST_ROUND_TRIPS,
        "the takeover waited for {answered} round trips to its first answer ({opened} for the \
         store's open), more than {MOST_ROUND_TRIPS}"
    );
    drop((cursor, topic));
    store.close().expect("close");
    drop(former);
}

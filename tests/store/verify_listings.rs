//! What `verify` lists: a bounded number of directory listings whatever the number of a
//! topic's cursors. Each cursor has its own record files beside the topic's ledgers; reading
//! each record through a listing of its own made a store of 20 topics of 1,000 cursors take
//! 20 s to verify (181,210 `getdents64` calls), against 1.6 s for the same cursors 10 a topic.

use crate::support;

use std::sync::Arc;

use ackstore::{CursorOptions, MemStorage, Storage, Store};
use support::config::store_without_flusher;
use support::tap::{Listings, Tap};

/// The listings `verify` runs on a store of one topic of `cursors` cursors, each with an ack
/// flushed; the store must verify sound.
fn listings_of_verify(cursors: usize) -> u64 {
    let disk = MemStorage::new();
    let store = Store::open_with_storage(Arc::new(disk.clone()), store_without_flusher())
        .expect("open the store");
    let topic = store.topic("persistent://t/ns/many").expect("topic");
    let mut last = None;
    for _ in 0..8 {
        last = Some(topic.append(b"entry").expect("append"));
    }
    topic.sync().expect("sync");
    let last = last.expect("an entry");
    for c in 0..cursors {
        let cursor = topic
            .open_cursor(&format!("sub-{c}"), CursorOptions::default())
            .expect("cursor");
        cursor.ack(last).expect("ack");
    }
    store.flush_all().expect("flush");
    store.close().expect("close");
    let listings = Arc::new(Listings::default());
    let tapped: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk), listings.clone()));
    let verification = ackstore::check::verify(&tapped).expect("verify");
    assert!(verification.is_sound(), "{verification}");
    assert_eq!(verification.cursors, cursors, "{verification}");
    listings.count()
}

#[test]
fn verify_lists_a_topic_a_bounded_number_of_times_whatever_its_cursors() {
    let few = listings_of_verify(20);
    let many = listings_of_verify(200);
    assert_eq!(
        few, many,
        "verify listed {few} times for 20 cursors, {many} for 200: a listing per cursor"
    );
}

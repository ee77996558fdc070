//! The steps of [`Store::topic`] taken one at a time against [`Store::close`]: what no test
//! through the public calls can order at will (a thread paused between taking a topic's slot
//! and its lock).

use ackstore::internals::error::Error;
use ackstore::internals::steps;
use ackstore::internals::storage::MemStorage;
use ackstore::internals::store::*;
use std::sync::Arc;

/// A topic's open that took its slot before the store's close, and the slot's lock only after
/// the close let go of it (the opening thread paused in between), is refused: it does not open
/// the topic again after the close, when the directory's lock may belong to a new owner.
#[test]
fn an_open_that_took_its_slot_before_the_close_is_refused_after_it() {
    let disk = MemStorage::new();
    let store =
        Store::open_with_storage(Arc::new(disk.clone()), StoreConfig::default()).expect("open");
    let topic = store.topic("t").expect("topic");
    let p = topic.append(b"e").expect("append");
    topic.sync().expect("sync");
    let slot = steps::topic_slot(&store, "t").expect("the slot, before the close");
    store.close().expect("close");
    // Before any new owner claims the directory (whose claim would fence a late writer of the
    // catalog, not of the topic's files), as a second process opening it may be at this moment.
    let late = steps::open_in_slot(&store, "t", &slot);
    assert!(
        matches!(late, Err(Error::Closed)),
        "a topic opened after its store's close: {late:?}"
    );
    let again = Store::open_with_storage(Arc::new(disk.clone()), StoreConfig::default())
        .expect("a new owner opens the directory after the close");
    assert_eq!(again.topic_names(), ["t"]);
    let reopened = again.topic("t").expect("the new owner's topic");
    assert_eq!(reopened.read(p).expect("read").payload, b"e");
}

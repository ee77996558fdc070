//! What a topic's open lists: a bounded number of directory listings whatever the number of
//! its cursors. A topic opened alone claims every cursor record; each claim of a record whose
//! names the metadata store knows from its listing is checked by name lookups, not by a listing
//! of the directory (which holds every ledger file), so the open does not grow with cursors
//! times files. Each record keeps at most two names however often the topic reopens, and every
//! flushed ack is there after each reopen.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::{
    Cursor, CursorOptions, ManagedLedger, MemStorage, Position, Storage, Store, StoreConfig,
};
use support::tap::{Listings, Tap};

/// A topic opened alone on `disk` (through a tap counting listings into `listings`).
fn open(disk: &MemStorage, listings: &Arc<Listings>) -> ManagedLedger {
    let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk.clone()), listings.clone()));
    ManagedLedger::open_with_storage(storage, support::topic::config(4)).expect("open")
}

fn name(c: usize) -> String {
    format!("sub-{c}")
}

/// The entries cursor `c` acked: a few of its own, so each cursor's state differs.
fn acked_by(ps: &[Position], c: usize) -> BTreeSet<Position> {
    ps.iter().skip(c % 7).step_by(7).copied().collect()
}

/// Appends 40 entries to `topic` (returned) and opens its `cursors` cursors, each acking its
/// entries ([`acked_by`]), then handed to `each`.
fn append_and_ack(topic: &ManagedLedger, cursors: usize, each: impl Fn(&Cursor)) -> Vec<Position> {
    let ps = support::topic::append_n(topic, 40);
    for c in 0..cursors {
        let cursor = topic
            .open_cursor(&name(c), CursorOptions::default())
            .expect("cursor");
        for p in acked_by(&ps, c) {
            cursor.ack(p).expect("ack");
        }
        each(&cursor);
    }
    ps
}

/// A topic of 40 entries over 10 ledgers whose `cursors` cursors each acked their entries and
/// flushed, closed cleanly. Returns the entries.
fn populate(disk: &MemStorage, cursors: usize) -> Vec<Position> {
    let topic = open(disk, &Arc::default());
    let ps = append_and_ack(&topic, cursors, |cursor| cursor.flush().expect("flush"));
    topic.close().expect("close");
    ps
}

/// The listings of one open and close of the topic on `disk`, after checking every cursor's
/// acked entries against the model.
fn listings_of_a_reopen(disk: &MemStorage, cursors: usize, ps: &[Position]) -> u64 {
    let listings = Arc::new(Listings::default());
    let topic = open(disk, &listings);
    let at_open = listings.count();
    assert_acks(&topic, cursors, ps);
    topic.close().expect("close");
    at_open
}

/// Every one of `cursors` cursors of `topic` holds exactly the acks of the model among `ps`.
fn assert_acks(topic: &ManagedLedger, cursors: usize, ps: &[Position]) {
    for c in 0..cursors {
        let cursor = topic
            .open_cursor(&name(c), CursorOptions::default())
            .expect("cursor");
        let acked: BTreeSet<Position> = ps
            .iter()
            .copied()
            .filter(|p| cursor.is_acked(*p).expect("is_acked"))
            .collect();
        assert_eq!(acked, acked_by(ps, c), "cursor {c}");
    }
}

/// The most names any one record has in `disk`'s directory.
fn most_names_of_a_record(disk: &MemStorage) -> usize {
    let mut names = std::collections::BTreeMap::<String, usize>::new();
    for file in disk.list().expect("list") {
        if let Some(record) = ackstore::internals::meta::record_of_file(&file) {
            *names.entry(record.to_owned()).or_default() += 1;
        }
    }
    names.into_values().max().unwrap_or(0)
}

#[test]
fn a_topic_alone_lists_as_often_with_200_cursors_as_with_5_and_keeps_two_names_a_record() {
    let mut per_open = Vec::new();
    for cursors in [5, 200] {
        let disk = MemStorage::new();
        let ps = populate(&disk, cursors);
        // The first reopen finds every record with one name, later ones with two (the
        // previous claim's): both are claimed by name lookups.
        let opens: Vec<u64> = (0..4)
            .map(|_| listings_of_a_reopen(&disk, cursors, &ps))
            .collect();
        assert!(
            most_names_of_a_record(&disk) <= 2,
            "{cursors} cursors: a record has more than two names after four reopens"
        );
        per_open.push(opens);
    }
    assert_eq!(
        per_open[0], per_open[1],
        "listings of each of four opens with 5 cursors, then with 200"
    );
    assert!(per_open[0].iter().all(|&l| l <= 10), "{per_open:?}");
}

#[test]
fn a_record_with_older_names_brought_back_is_claimed_and_left_with_two_names() {
    let disk = MemStorage::new();
    let ps = populate(&disk, 3);
    for _ in 0..5 {
        listings_of_a_reopen(&disk, 3, &ps);
    }
    // Three more names below each cursor record's two, as power cuts that undid the removals
    // of earlier claims would leave: each holds the record's bytes (a claim links, so every
    // name of a record holds the same bytes).
    let mut highest = std::collections::BTreeMap::<String, u64>::new();
    for file in disk.list().expect("list") {
        let Some(record) = ackstore::internals::meta::record_of_file(&file) else {
            continue;
        };
        let version: u64 = file
            .strip_prefix(&format!("{record}."))
            .and_then(|rest| rest.strip_suffix(".meta"))
            .and_then(|digits| digits.parse().ok())
            .expect("version");
        let top = highest.entry(record.to_owned()).or_default();
        *top = (*top).max(version);
    }
    for (record, version) in highest.iter().filter(|(r, _)| r.starts_with("cursor-")) {
        assert!(*version >= 5, "{record} at {version}");
        let head = format!("{record}.{version:020}.meta");
        for older in version - 4..version - 1 {
            disk.link(&head, &format!("{record}.{older:020}.meta"))
                .expect("link");
        }
    }
    assert!(most_names_of_a_record(&disk) >= 4);
    listings_of_a_reopen(&disk, 3, &ps);
    assert!(most_names_of_a_record(&disk) <= 2);
    listings_of_a_reopen(&disk, 3, &ps);
    assert!(most_names_of_a_record(&disk) <= 2);
}

/// Listings of each of three reopens of a store's topic of `cursors` cursors (each flushed,
/// the store closed cleanly), counted from the topic's open on (after the store's).
fn listings_of_store_topic_reopens(cursors: usize) -> Vec<u64> {
    let disk = MemStorage::new();
    let config = StoreConfig {
        ledger: support::topic::config(4),
        flusher_threads: 0,
        ..StoreConfig::default()
    };
    let store = Store::open_with_storage(Arc::new(disk.clone()), config.clone()).expect("store");
    let topic = store.topic("persistent://t/n/listings").expect("topic");
    let ps = append_and_ack(&topic, cursors, |_| {});
    store.flush_all().expect("flush");
    drop(topic);
    store.close().expect("close");
    let mut opens = Vec::new();
    for _ in 0..3 {
        let listings = Arc::new(Listings::default());
        let storage: Arc<dyn Storage> =
            Arc::new(Tap::new(Arc::new(disk.clone()), listings.clone()));
        let store = Store::open_with_storage(storage, config.clone()).expect("reopen");
        let before = listings.count();
        let topic = store.topic("persistent://t/n/listings").expect("topic");
        opens.push(listings.count() - before);
        assert_acks(&topic, cursors, &ps);
        drop(topic);
        store.close().expect("close");
    }
    opens
}

#[test]
fn a_store_topic_lists_as_often_with_200_cursors_as_with_5() {
    assert_eq!(
        listings_of_store_topic_reopens(5),
        listings_of_store_topic_reopens(200),
        "listings of each open of the topic"
    );
}

/// A store's topic reopened lists its files twice: once to read its record (the version to
/// claim), once right after the claim's link (what fences a former owner), and that listing
/// serves the open's checks of its ledgers and cursor records: nothing is written between them.
#[test]
fn a_store_topic_reopen_lists_its_files_twice() {
    assert_eq!(
        listings_of_store_topic_reopens(3),
        vec![2, 2, 2],
        "listings of each reopen of the topic"
    );
}

//! A store on RADOS: a former owner's cursor deletion in flight at the claim never undoes what
//! the new owner flushed (the topic's claim takes the record's next version first, which the
//! former owner's exclusive create of it then loses), and a prefix listing pages through every
//! matching name of the namespace's index and no other.

#![cfg(feature = "rados")]

use crate::support;

use std::sync::Arc;

use ackstore::{CursorOptions, Position, RadosStorage, Storage, Store};
use support::rados::{cluster, fresh_namespace, pool};
use support::takeover;
use support::topic::store_topic_with_a_flushed_cursor;

fn storage(ns: &str) -> RadosStorage {
    cluster().storage(&pool(), ns).expect("namespace")
}

#[test]
fn on_rados_a_fenced_cursor_deletion_never_takes_effect_under_the_new_owner() {
    let mut failures = Vec::new();
    for n in 1..=14u64 {
        let ns = fresh_namespace("store-fenced-delete");
        store_topic_with_a_flushed_cursor(
            Arc::new(storage(&ns)),
            support::config::store_without_flusher(),
            3,
        );
        let hooked = takeover::Disk::new(Arc::new(storage(&ns)));
        let old = Store::open_with_storage(
            hooked.storage.clone(),
            support::config::store_without_flusher(),
        )
        .expect("open");
        let old_topic = old.topic("t").expect("topic");
        let new = {
            let ns = ns.clone();
            hooked.arm_takeover(n, move || {
                let s = storage(&ns);
                s.break_lock().expect("break");
                let store =
                    Store::open_with_storage(Arc::new(s), support::config::store_without_flusher())
                        .expect("the new owner");
                store.topic("t").expect("topic");
                store
            })
        };
        let deleted = old_topic.delete_cursor("sub");
        let Some(new) = new.lock().unwrap().take() else {
            continue;
        };
        let topic = new.topic("t").expect("topic");
        let cursor = topic
            .open_cursor("sub", CursorOptions::default())
            .expect("cursor");
        cursor.ack(Position::new(1, 1)).expect("ack");
        let flushed = cursor.flush();
        drop((cursor, topic));
        new.close().expect("close");
        drop(new);
        drop((old_topic, old));
        let again = Store::open_with_storage(
            Arc::new(storage(&ns)),
            support::config::store_without_flusher(),
        )
        .expect("reopen");
        let topic = again.topic("t").expect("topic");
        let names = topic.cursor_names();
        let cursor = topic
            .open_cursor("sub", CursorOptions::default())
            .expect("cursor");
        let acked1 = cursor.is_acked(Position::new(1, 1)).expect("is_acked");
        if flushed.is_ok() && (names != ["sub"] || !acked1) {
            failures.push(format!(
                "step {n}: the former owner's delete returned {deleted:?}; the new owner's \
                 flush Ok; after a restart cursors {names:?}, its flushed ack kept: {acked1}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `list_prefix` on RADOS pages through the index with a filter prefix: more than a page of
/// matching names, names of a longer prefix (`t11-` against `t1-`), names around it.
#[test]
fn on_rados_a_prefix_listing_pages_through_every_matching_name_and_no_other() {
    let s = storage(&fresh_namespace("store-prefix-list"));
    let mut want = Vec::new();
    for i in 0..2100 {
        let n = format!("t1-ledger-{i:020}.log");
        s.create(&n).expect("create");
        want.push(n);
    }
    for i in 0..40 {
        s.create(&format!("t11-x{i}")).expect("create");
        s.create(&format!("t0-x{i}")).expect("create");
        s.create(&format!("t2-x{i}")).expect("create");
    }
    s.create("t1").expect("create");
    s.create("t1-").expect("create");
    want.push("t1-".to_owned());
    want.sort();
    let got = s.list_prefix("t1-").expect("list");
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
    assert_eq!(s.list_prefix("t11-").expect("list").len(), 40);
    assert_eq!(
        s.list_prefix("t1-ledger-0000000000000000209")
            .expect("list")
            .len(),
        10
    );
    assert_eq!(s.list_prefix("zz").expect("list").len(), 0);
    assert_eq!(s.list().expect("list").len(), 2100 + 120 + 2);
}

/// A store's topic on RADOS lives under its `t{id}-` prefix in the store's namespace: the
/// store's namespace opened as a topic alone is refused by its catalog, and the topic's objects
/// copied into a namespace of their own are refused by their topic record, which names the
/// store, before anything is written there.
#[test]
fn on_rados_a_stores_topic_never_opens_alone() {
    let ns = fresh_namespace("store-topic-alone");
    store_topic_with_a_flushed_cursor(
        Arc::new(storage(&ns)),
        support::config::store_without_flusher(),
        3,
    );
    let refused = |opened: ackstore::Result<ackstore::ManagedLedger>, what: &str| match opened {
        Err(ackstore::Error::OwnedByStore { .. }) => {}
        Err(e) => panic!("{what}: refused with the wrong error: {e}"),
        Ok(_) => panic!("{what}: a store's topic opened alone"),
    };
    refused(
        ackstore::ManagedLedger::open_with_storage(
            Arc::new(storage(&ns)),
            ackstore::LedgerConfig::default(),
        ),
        "the store's namespace",
    );
    let store = storage(&ns);
    let copy_ns = fresh_namespace("store-topic-alone-copy");
    let copy = storage(&copy_ns);
    for name in store.list_prefix("t1-").expect("list") {
        let bytes = store
            .open(&name)
            .and_then(|f| f.read_all(u64::MAX))
            .expect("read")
            .expect("bytes");
        let file = copy.create(&name["t1-".len()..]).expect("create");
        file.write_all_at(&bytes, 0).expect("write");
        file.sync_data().expect("sync");
    }
    let before = copy.list().expect("list");
    refused(
        ackstore::ManagedLedger::open_with_storage(
            Arc::new(storage(&copy_ns)),
            ackstore::LedgerConfig::default(),
        ),
        "the topic's objects in a namespace of their own",
    );
    assert_eq!(copy.list().expect("list"), before, "nothing written");
}

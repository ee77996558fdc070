//! Hostile and damaged namespaces on RADOS (`CEPH_CONF`): an owner epoch at its limit, a lost
//! index of names.

#![cfg(feature = "rados")]

use crate::support;

use std::sync::Arc;

use ackstore::{CursorOptions, Error, InitialPosition, ManagedLedger, Storage};
use support::rados::{cluster, fresh_namespace, pool};

fn storage(namespace: &str) -> Arc<dyn Storage> {
    Arc::new(cluster().storage(&pool(), namespace).unwrap())
}

#[test]
fn an_owner_epoch_at_its_limit_is_refused_not_wrapped_to_an_unfenced_owner() {
    let namespace = fresh_namespace("epoch-limit");
    let s = cluster().storage(&pool(), &namespace).unwrap();
    drop(s.lock().unwrap());
    support::rados::rados_cli(
        &namespace,
        &[
            "setxattr",
            "LOCK",
            "ackstore.owner-epoch",
            &u64::MAX.to_string(),
        ],
    );
    let taken = std::panic::catch_unwind(|| s.lock().map(|guard| (guard, s.epoch())));
    match taken {
        Err(_) => panic!("an owner epoch at u64::MAX panicked the lock"),
        Ok(Ok((_guard, epoch))) => {
            panic!("lock taken with epoch {epoch}: writes of this owner are not fenced")
        }
        Ok(Err(e)) => assert!(!matches!(e, Error::Locked { .. }), "{e}"),
    }
}

#[test]
fn a_lost_index_of_names_is_not_an_empty_topic() {
    let namespace = fresh_namespace("lost-index");
    let topic =
        ManagedLedger::open_with_storage(storage(&namespace), support::topic::config(4)).unwrap();
    let cursor = topic
        .open_cursor(
            "sub",
            CursorOptions {
                initial_position: InitialPosition::Earliest,
                inclusive: true,
            },
        )
        .unwrap();
    for i in 0..10u32 {
        topic.append(&i.to_le_bytes()).unwrap();
    }
    topic.sync().unwrap();
    let first = cursor.read_entries(1).unwrap()[0].position;
    cursor.ack(first).unwrap();
    cursor.flush().unwrap();
    drop(cursor);
    topic.close().unwrap();

    // The one object that names every other is lost (an unfound object marked lost, an
    // operator's mistake): the topic's ten entries are still there.
    support::rados::rados_cli(&namespace, &["rm", ".ackstore-names"]);
    let topic =
        ManagedLedger::open_with_storage(storage(&namespace), support::topic::config(4)).unwrap();
    assert_eq!(topic.cursor_names(), vec!["sub".to_owned()]);
    let cursor = topic
        .open_cursor(
            "sub",
            CursorOptions {
                initial_position: InitialPosition::Earliest,
                inclusive: true,
            },
        )
        .unwrap();
    let unacked: Vec<u32> = cursor
        .read_entries(100)
        .unwrap()
        .iter()
        .map(|e| u32::from_le_bytes(e.payload[..].try_into().unwrap()))
        .collect();
    assert_eq!(
        unacked,
        (1..10).collect::<Vec<_>>(),
        "entries or the flushed ack lost"
    );
}

#[test]
fn a_namespace_whose_index_was_lost_still_lists_its_files_and_keeps_them_listed() {
    let namespace = fresh_namespace("lost-index-list");
    let s = cluster().storage(&pool(), &namespace).unwrap();
    for name in ["a", "b", "c"] {
        s.create(name).unwrap();
    }
    support::rados::rados_cli(&namespace, &["rm", ".ackstore-names"]);
    assert_eq!(s.list().unwrap(), vec!["a", "b", "c"]);
    // The next name added brings the others back into the index.
    s.create("d").unwrap();
    assert_eq!(s.list().unwrap(), vec!["a", "b", "c", "d"]);
    assert_eq!(
        support::rados::rados_cli(&namespace, &["listomapkeys", ".ackstore-names"]),
        "a\nb\nc\nd\n"
    );
    // An owner stamps (and so fences) every object of it that it touches, listed or not.
    let _owner = s.lock().unwrap();
    assert!(s.exists("a").unwrap());
    let epoch = format!("{:020}", s.epoch());
    assert_eq!(
        support::rados::rados_cli(&namespace, &["getxattr", "a", "ackstore.epoch"]).trim_end(),
        epoch
    );
}

#[test]
fn a_map_racing_with_an_overwrite_never_leaves_stale_bytes_in_the_cache() {
    let s = cluster()
        .storage(&pool(), &fresh_namespace("map-race"))
        .unwrap();
    let writer = s.create("f").unwrap();
    writer.write_all_at(&0u64.to_le_bytes(), 0).unwrap();
    writer.sync_data().unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            let f = s.open("f").unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = f.map().unwrap();
            }
        })
    };
    // Overwrites in place (the same size each time); once one is synced, a map shows it.
    for version in 1..=1000u64 {
        writer.write_all_at(&version.to_le_bytes(), 0).unwrap();
        writer.sync_data().unwrap();
        let seen = u64::from_le_bytes((*writer.map().unwrap()).as_ref().try_into().unwrap());
        if seen != version {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            reader.join().unwrap();
            panic!("version {version} synced, map shows {seen}");
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    reader.join().unwrap();
}

//! The store: many topics in one directory under one lock, opened lazily; ownership at the store
//! level; names that are not paths; power cuts while topics are created and used.

use crate::support;

use std::sync::Arc;

use ackstore::MemStorage;
use ackstore::{Error, ManagedLedger, Position, Store, StoreConfig};
use support::crash::cut_everywhere;

fn mem_store(disk: &MemStorage) -> ackstore::Result<Store> {
    Store::open_with_storage(Arc::new(disk.clone()), StoreConfig::default())
}

/// Runs `test` on a fresh store on each backend: the in-memory disk, real files, and (built with
/// the `rados` feature) a RADOS namespace; `open` opens the same store again.
fn on_each_backend(mut test: impl FnMut(&dyn Fn() -> ackstore::Result<Store>)) {
    eprintln!("backend: in-memory disk");
    let disk = MemStorage::new();
    test(&|| mem_store(&disk));
    let dir = tempfile::tempdir().expect("temporary directory");
    eprintln!("backend: real files in {}", dir.path().display());
    test(&|| Store::open(dir.path(), StoreConfig::default()));
    #[cfg(feature = "rados")]
    {
        let namespace = support::rados::fresh_namespace("store");
        eprintln!("backend: RADOS namespace {namespace}");
        test(&|| {
            let storage = support::rados::cluster().storage(&support::rados::pool(), &namespace)?;
            Store::open_with_storage(Arc::new(storage), StoreConfig::default())
        });
    }
}

#[test]
fn topics_are_created_lazily_and_reopen_with_their_entries_and_cursors() {
    on_each_backend(|open| {
        let store = open().expect("open");
        assert!(store.topic_names().is_empty());
        let names = ["persistent://t/ns/a", "persistent://t/ns/b", "c"];
        for (i, name) in names.iter().enumerate() {
            let topic = store.topic(name).expect("topic");
            for j in 0..=i {
                topic
                    .append(format!("{name}/{j}").as_bytes())
                    .expect("append");
            }
            topic.sync().expect("sync");
            let cursor = topic
                .open_cursor("sub", support::topic::earliest())
                .expect("cursor");
            cursor.ack(Position::new(1, 0)).expect("ack");
            cursor.flush().expect("flush");
        }
        assert!(Arc::ptr_eq(
            &store.topic(names[0]).expect("again"),
            &store.topic(names[0]).expect("again")
        ));
        store.close().expect("close");
        drop(store);

        let store = open().expect("reopen");
        assert_eq!(store.topic_names(), names);
        assert!(store.open_topic_names().is_empty(), "reopen opens no topic");
        for (i, name) in names.iter().enumerate() {
            let topic = store.topic(name).expect("topic");
            let cursor = topic
                .open_cursor("sub", support::topic::earliest())
                .expect("cursor");
            assert_eq!(
                cursor.mark_delete_position().expect("md"),
                Some(Position::new(1, 0))
            );
            assert_eq!(
                topic.read(Position::new(1, 0)).expect("read").payload,
                format!("{name}/0").as_bytes()
            );
            assert_eq!(cursor.backlog().expect("backlog"), i as u64);
        }
    });
}

#[test]
fn a_second_store_on_the_same_directory_is_refused_while_the_first_is_open() {
    on_each_backend(|open| {
        let first = open().expect("open");
        first.topic("a").expect("topic");
        assert!(matches!(open(), Err(Error::Locked { .. })));
        let topic = first.topic("a").expect("topic");
        drop(first);
        // The drop of the last store handle closed its topics and released the lock: a topic
        // handle kept refuses writes, and the directory opens again at once.
        assert!(
            matches!(topic.append(b"late"), Err(Error::Closed)),
            "a topic of a dropped store refuses writes"
        );
        let again = open().expect("open after the first was dropped");
        assert_eq!(again.topic_names(), ["a"]);
        drop(topic);
    });
}

#[test]
fn a_former_owner_that_lost_the_lock_is_fenced_by_the_new_one() {
    let disk = MemStorage::new();
    let old = mem_store(&disk).expect("open");
    let topic = old.topic("a").expect("topic");
    topic.append(b"x").expect("append");
    disk.break_lock();
    let new = mem_store(&disk).expect("second owner after the lock broke");
    assert!(
        matches!(old.topic("b"), Err(Error::Fenced { .. })),
        "catalog write of the old owner"
    );
    new.topic("a").expect("the new owner opens the topic");
    assert!(matches!(
        topic.append(b"y").and_then(|_| topic.sync()),
        Err(Error::Fenced { .. })
    ));
    assert_eq!(new.topic_names(), ["a"]);
}

#[test]
fn topic_names_are_never_paths() {
    on_each_backend(|open| {
        let store = open().expect("open");
        let nasty = [
            "../../etc",
            "/",
            "a/../../b",
            "\0",
            "é/ü",
            &"x".repeat(1024),
        ];
        for name in nasty {
            store
                .topic(name)
                .expect("any UTF-8 name")
                .append(b"m")
                .expect("append");
        }
        assert!(matches!(
            store.topic(""),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            store.topic(&"x".repeat(1025)),
            Err(Error::InvalidArgument { .. })
        ));
        for file in store.storage().list().expect("list") {
            ackstore::storage::validate_name(&file).expect("every file name is generated");
        }
        drop(store);
        assert_eq!(open().expect("reopen").topic_names(), nasty);
    });
}

#[test]
fn a_topic_directory_is_not_taken_for_a_store() {
    let dir = tempfile::tempdir().expect("temporary directory");
    ManagedLedger::open(dir.path(), Default::default())
        .expect("topic")
        .append(b"m")
        .expect("append");
    assert!(matches!(
        Store::open(dir.path(), StoreConfig::default()),
        Err(Error::NotAckstore { .. })
    ));
}

#[test]
fn a_power_cut_while_topics_are_created_keeps_every_topic_and_ack_that_was_durable() {
    // The workload returns the topics whose creation returned Ok and the acks flushed Ok.
    cut_everywhere(
        |disk| {
            let mut done: Vec<(String, bool)> = Vec::new();
            let Ok(store) = mem_store(disk) else {
                return done;
            };
            for name in ["a", "b/c", "d"] {
                let Ok(topic) = store.topic(name) else { break };
                done.push((name.to_owned(), false));
                let flushed = (|| {
                    topic.append(b"m")?;
                    topic.sync()?;
                    let cursor = topic.open_cursor("sub", support::topic::earliest())?;
                    cursor.ack(Position::new(1, 0))?;
                    cursor.flush()
                })();
                match flushed {
                    Ok(()) => done.last_mut().expect("pushed").1 = true,
                    Err(_) => break,
                }
            }
            done
        },
        |disk, cut, done| {
            let store = mem_store(&disk.durable_image()).unwrap_or_else(|e| panic!("{cut:?}: {e}"));
            let names = store.topic_names();
            for (name, flushed) in &done {
                assert!(names.contains(name), "{cut:?}: topic {name} lost");
                let topic = store.topic(name).unwrap_or_else(|e| panic!("{cut:?}: {e}"));
                if *flushed {
                    let cursor = topic
                        .open_cursor("sub", support::topic::earliest())
                        .expect("cursor");
                    assert_eq!(
                        cursor.mark_delete_position().expect("md"),
                        Some(Position::new(1, 0)),
                        "{cut:?}: flushed ack of {name} lost"
                    );
                }
            }
            for name in &names {
                store
                    .topic(name)
                    .unwrap_or_else(|e| panic!("{cut:?}: topic {name}: {e}"));
            }
        },
    );
}

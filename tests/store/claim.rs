//! One claim per store: `Store::open` fences every former owner of every topic at once, so a
//! restart writes the same few records whatever the number of topics and cursors, a topic's
//! open lists and reads only that topic's own files, a former owner that lost the store is
//! refused on topics the new owner has not even opened, and the new owner is never told it is
//! fenced, wherever in a former owner's operation the takeover lands. Stores written with the
//! earlier flat layout (catalog version 2) open as they were.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ackstore::{CursorOptions, Error, MemStorage, Position, Storage, Store, StoreConfig};
use support::crash::{Points, cut_everywhere_after};
use support::hooked::Hooked;
use support::takeover;
use support::topic::store_config;

fn open(storage: Arc<dyn Storage>) -> ackstore::Result<Store> {
    Store::open_with_storage(storage, store_config(1_000))
}

fn topic_name(t: usize) -> String {
    format!("persistent://tenant/ns/topic-{t}")
}

/// A store of `topics` topics of 20 entries, `cursors` cursors each with some acks flushed,
/// closed cleanly.
fn populate(storage: &Arc<dyn Storage>, topics: usize, cursors: usize) {
    let store = open(storage.clone()).expect("open");
    for t in 0..topics {
        let topic = store.topic(&topic_name(t)).expect("topic");
        let ps: Vec<Position> = (0..20)
            .map(|i| topic.append(format!("{t}/{i}").as_bytes()).expect("append"))
            .collect();
        topic.sync().expect("sync");
        for c in 0..cursors {
            let cursor = topic
                .open_cursor(&format!("sub-{c}"), CursorOptions::default())
                .expect("cursor");
            for p in ps.iter().skip(c).step_by(2) {
                cursor.ack(*p).expect("ack");
            }
        }
    }
    store.close().expect("close");
}

/// Every file of the disk but the store's own (its catalog and journal), with its bytes.
fn topic_files(disk: &MemStorage) -> BTreeMap<String, Vec<u8>> {
    disk.list()
        .expect("list")
        .into_iter()
        .filter(|n| !n.starts_with("store.") && !n.starts_with("journal-"))
        .map(|n| {
            let bytes = disk.live_bytes(&n).expect("bytes");
            (n, bytes)
        })
        .collect()
}

/// Opens the store, every topic and every cursor, and checks each cursor's first unread entry.
fn restart(storage: Arc<dyn Storage>, topics: usize, cursors: usize) -> Store {
    let store = open(storage).expect("reopen");
    for t in 0..topics {
        let topic = store.topic(&topic_name(t)).expect("topic");
        for c in 0..cursors {
            let cursor = topic
                .open_cursor(&format!("sub-{c}"), CursorOptions::default())
                .expect("cursor");
            let first = cursor.read_entries(1).expect("read");
            // Cursor `c` acked every other entry from entry `c` on (`populate`): its first
            // unacked entry is entry 1 for cursor 0, entry 0 for the others.
            let want = u64::from(c == 0);
            assert_eq!(
                first[0].position,
                Position::new(1, want),
                "topic {t} cursor {c}"
            );
        }
    }
    store
}

/// Checks that between `before` and `after` (topic files with their bytes) no byte of a topic
/// file changed and the only new files are claims: a topic record's bytes under its next
/// version's name.
fn only_claims_were_added(before: &BTreeMap<String, Vec<u8>>, after: &BTreeMap<String, Vec<u8>>) {
    for (name, bytes) in before {
        if let Some(now) = after.get(name) {
            assert_eq!(now, bytes, "{name} was rewritten");
        } else {
            assert!(name.contains("topic."), "{name} was removed");
        }
    }
    for (name, bytes) in after.iter().filter(|(n, _)| !before.contains_key(*n)) {
        assert!(name.contains("topic."), "{name} is new and not a claim");
        assert!(
            before
                .iter()
                .any(|(n, b)| n.contains("topic.") && b == bytes),
            "{name} is new and holds bytes no earlier topic record held"
        );
    }
}

#[test]
fn a_restart_syncs_nothing_per_topic_or_cursor_and_rewrites_no_topic_file() {
    let restart_syncs = |topics: usize, cursors: usize| {
        let hooked = Hooked::new(MemStorage::new());
        let storage: Arc<dyn Storage> = Arc::new(hooked.clone());
        populate(&storage, topics, cursors);
        let files = topic_files(&hooked.disk);
        let syncs = |h: &Hooked| {
            h.hooks.syncs.load(Ordering::SeqCst) + h.hooks.dir_syncs.load(Ordering::SeqCst)
        };
        let before = syncs(&hooked);
        let store = restart(storage, topics, cursors);
        let made = syncs(&hooked) - before;
        only_claims_were_added(&files, &topic_files(&hooked.disk));
        store.close().expect("close");
        made
    };
    let small = restart_syncs(2, 2);
    let large = restart_syncs(12, 6);
    assert_eq!(
        small, large,
        "reopening 12 topics of 6 cursors synced more than reopening 2 of 2: a topic's claim is a \
         link, a cursor's reopen writes nothing"
    );
}

#[test]
fn opening_a_topic_lists_only_its_own_files_whatever_the_size_of_the_store() {
    let listed_by_one_topic = |topics: usize| {
        let counting = Hooked::new(MemStorage::new());
        let storage: Arc<dyn Storage> = Arc::new(counting.clone());
        populate(&storage, topics, 3);
        let store = open(storage).expect("reopen");
        let before = counting.hooks.listed.load(Ordering::SeqCst);
        let topic = store.topic(&topic_name(1)).expect("topic");
        for c in 0..3 {
            let cursor = topic
                .open_cursor(&format!("sub-{c}"), CursorOptions::default())
                .expect("cursor");
            cursor.read_entries(1).expect("read");
            cursor.flush().expect("flush");
        }
        topic.append(b"more").expect("append");
        topic.sync().expect("sync");
        let listed = counting.hooks.listed.load(Ordering::SeqCst) - before;
        store.close().expect("close");
        listed
    };
    let few = listed_by_one_topic(3);
    let many = listed_by_one_topic(40);
    assert_eq!(
        few, many,
        "one topic's open, cursors, flushes and sync listed {many} names in a store of 40 \
         topics against {few} in a store of 3"
    );
}

#[test]
fn a_former_owner_is_refused_on_every_topic_once_the_store_is_claimed() {
    let disk = MemStorage::new();
    let old = Store::open_with_storage(Arc::new(disk.clone()), store_config(4)).expect("open");
    let a = old.topic("a").expect("topic");
    let b = old.topic("b").expect("topic");
    let ps: Vec<Position> = (0..6).map(|_| a.append(b"x").expect("append")).collect();
    a.sync().expect("sync");
    b.append(b"y").expect("append");
    b.sync().expect("sync");
    let cursor = a
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    cursor.ack_cumulative(ps[4]).expect("ack");
    cursor.flush().expect("flush");
    disk.break_lock();
    // The new owner claims the store and opens no topic.
    let new = Store::open_with_storage(Arc::new(disk.clone()), store_config(4)).expect("claim");
    let files = topic_files(&disk);
    let fenced = |what: &str, r: ackstore::Result<()>| {
        assert!(
            matches!(r, Err(Error::Fenced { .. })),
            "{what} of the former owner: {r:?}"
        );
    };
    fenced(
        "a sync",
        a.append(b"late").map(drop).and_then(|()| a.sync()),
    );
    fenced(
        "a rollover",
        (0..4).try_for_each(|_| b.append(b"z").map(drop)),
    );
    fenced(
        "a cursor flush",
        cursor.ack(ps[5]).and_then(|_| cursor.flush()),
    );
    fenced("a trim", a.trim_consumed().map(drop));
    fenced(
        "a cursor creation",
        a.open_cursor("other", CursorOptions::default()).map(drop),
    );
    fenced("a cursor deletion", a.delete_cursor("sub"));
    fenced("a topic creation", old.topic("c").map(drop));
    // Nothing the former owner did after the claim removed a file (its trim and its deletion
    // stopped at their record writes' checks).
    for name in files.keys() {
        assert!(disk.exists(name).expect("exists"), "{name} was removed");
    }
    // The new owner finds every entry and ack made durable before the claim, and is never
    // told it is fenced.
    let a = new.topic("a").expect("topic");
    let b = new.topic("b").expect("topic");
    for p in &ps {
        a.read(*p).expect("a synced entry");
    }
    let cursor = a
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    assert_eq!(cursor.mark_delete_position().expect("md"), Some(ps[4]));
    assert!(!cursor.is_acked(ps[5]).expect("is_acked"), "a fenced flush");
    let more: Vec<Position> = (0..9).map(|_| b.append(b"n").expect("append")).collect();
    b.sync().expect("sync");
    let other = b
        .open_cursor("other", CursorOptions::default())
        .expect("cursor");
    other
        .ack_cumulative(*more.last().expect("some"))
        .expect("ack");
    other.flush().expect("flush");
    b.trim_consumed().expect("trim");
    a.delete_cursor("sub").expect("delete");
    new.close().expect("close");
    drop((a, b, cursor, other, new));
    let again = Store::open_with_storage(Arc::new(disk.clone()), store_config(4)).expect("reopen");
    let b = again.topic("b").expect("topic");
    assert_eq!(b.last_position(), more.last().copied());
    assert_eq!(
        again.topic("a").expect("topic").cursor_names(),
        Vec::<String>::new()
    );
}

/// What the former owner's run saw of its own calls.
#[derive(Debug, Default)]
struct FormerRun {
    /// Entries whose `sync` returned `Ok`.
    synced: Vec<Position>,
    /// Positions acknowledged by a `flush` that returned `Ok`.
    flushed: Vec<Position>,
    /// A trim ran (whatever its outcome): the ledgers it may have removed held only entries
    /// at or before the flushed mark-delete.
    trimmed_to: Option<Position>,
}

/// The former owner's workload on a topic of ledgers of 3 entries: appends that roll ledgers,
/// syncs, a cursor created, acked and flushed, a trim. Stops at the first error.
fn former_owner_workload(store: &Store) -> FormerRun {
    let mut run = FormerRun::default();
    let _ = (|| -> ackstore::Result<()> {
        let topic = store.topic("t")?;
        let mut appended = Vec::new();
        for round in 0..3 {
            for _ in 0..2 {
                appended.push(topic.append(format!("{round}").as_bytes())?);
            }
            topic.sync()?;
            run.synced.clone_from(&appended);
        }
        let cursor = topic.open_cursor("sub", CursorOptions::default())?;
        cursor.ack_cumulative(appended[3])?;
        cursor.flush()?;
        run.flushed = appended[..=3].to_vec();
        run.trimmed_to = Some(appended[3]);
        topic.trim_consumed()?;
        appended.push(topic.append(b"last")?);
        topic.sync()?;
        run.synced = appended;
        Ok(())
    })();
    run
}

#[test]
fn a_takeover_at_any_step_of_a_former_owners_work_never_fences_the_new_owner() {
    // The former owner's store first holds the topic with two entries and a cursor.
    let prepared = || {
        let disk = MemStorage::new();
        let store =
            Store::open_with_storage(Arc::new(disk.clone()), store_config(3)).expect("open");
        let topic = store.topic("t").expect("topic");
        topic.append(b"p").expect("append");
        topic.sync().expect("sync");
        drop(topic);
        store.close().expect("close");
        disk
    };
    let steps = {
        let disk = prepared();
        let hooked = takeover::Disk::new(Arc::new(disk.clone()));
        let store =
            Store::open_with_storage(hooked.storage.clone(), store_config(3)).expect("open");
        let before = hooked.hook.count();
        let run = former_owner_workload(&store);
        assert_eq!(
            run.synced.len(),
            7,
            "the workload runs whole without a takeover"
        );
        hooked.hook.count() - before
    };
    for n in 1..=steps {
        let disk = prepared();
        let hooked = takeover::Disk::new(Arc::new(disk.clone()));
        let old = Store::open_with_storage(hooked.storage.clone(), store_config(3)).expect("open");
        // The new owner claims the store and opens the topic in the middle of the former
        // owner's call, so a record write of the former owner may land after the new owner
        // read the record.
        let new = {
            let disk = disk.clone();
            hooked.arm_takeover(n, move || {
                takeover::new_store_owner(&disk, store_config(3), "t")
            })
        };
        let run = former_owner_workload(&old);
        let new = new.lock().expect("slot").take().expect("the takeover ran");
        // Every entry and ack the former owner was told is durable is the new owner's.
        let topic = new
            .topic("t")
            .unwrap_or_else(|e| panic!("takeover after step {n}: {e}"));
        // Entries a trim may have removed were consumed (acknowledged by the flushed cursor).
        for p in run
            .synced
            .iter()
            .filter(|p| run.trimmed_to.is_none_or(|t| **p > t))
        {
            topic
                .read(*p)
                .unwrap_or_else(|e| panic!("takeover after step {n}: synced {p} lost: {e}"));
        }
        if !run.flushed.is_empty() {
            let cursor = topic
                .open_cursor("sub", CursorOptions::default())
                .expect("cursor");
            for p in &run.flushed {
                assert!(
                    cursor.is_acked(*p).expect("is_acked"),
                    "takeover after step {n}: flushed ack of {p} lost"
                );
            }
        }
        // The new owner works as a single owner does: never fenced.
        let mine = (|| -> ackstore::Result<Vec<Position>> {
            let ps = (0..7)
                .map(|_| topic.append(b"new"))
                .collect::<ackstore::Result<Vec<_>>>()?;
            topic.sync()?;
            let cursor = topic.open_cursor("mine", CursorOptions::default())?;
            cursor.ack_cumulative(ps[2])?;
            cursor.flush()?;
            topic.trim_consumed()?;
            Ok(ps)
        })()
        .unwrap_or_else(|e| panic!("takeover after step {n}: the new owner got {e}"));
        new.close()
            .unwrap_or_else(|e| panic!("takeover after step {n}: close: {e}"));
        drop((topic, new, old));
        let again =
            Store::open_with_storage(Arc::new(disk.clone()), store_config(3)).expect("reopen");
        let topic = again.topic("t").expect("topic");
        // The ledger of the first three was consumed and trimmed.
        for p in &mine[3..] {
            topic
                .read(*p)
                .unwrap_or_else(|e| panic!("takeover after step {n}: {p}: {e}"));
        }
        let cursor = topic
            .open_cursor("mine", CursorOptions::default())
            .expect("cursor");
        assert_eq!(cursor.mark_delete_position().expect("md"), Some(mine[2]));
    }
}

#[test]
fn a_closed_topic_of_a_store_opens_again_on_its_next_use() {
    let store = open(Arc::new(MemStorage::new())).expect("open");
    let topic = store.topic("t").expect("topic");
    let first = topic.append(b"1").expect("append");
    topic.close().expect("close");
    assert!(matches!(topic.append(b"2"), Err(Error::Closed)));
    let again = store.topic("t").expect("opened again");
    assert_eq!(again.read(first).expect("read").payload, b"1");
    let second = again.append(b"2").expect("append");
    again.sync().expect("sync");
    assert!(second > first);
    assert_eq!(store.open_topic_names(), ["t"]);
}

#[test]
fn topics_of_a_store_on_real_files_live_in_directories_of_their_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage: Arc<dyn Storage> =
        Arc::new(ackstore::FileStorage::open(dir.path(), false).expect("dir"));
    populate(&storage, 3, 2);
    let mut root: Vec<String> = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    root.sort();
    let files: Vec<&String> = root.iter().filter(|n| !n.starts_with('t')).collect();
    assert!(
        files
            .iter()
            .all(|n| *n == "LOCK" || n.starts_with("store") || n.starts_with("journal-")),
        "{root:?}"
    );
    for t in 1..=3 {
        let sub = dir.path().join(format!("t{t}"));
        assert!(sub.is_dir(), "{root:?}");
        assert!(
            std::fs::read_dir(&sub).expect("list").any(|e| e
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .starts_with("ledger-")),
            "topic {t} keeps its ledgers in its directory"
        );
    }
    restart(storage, 3, 2).close().expect("close");
}

#[test]
fn a_store_written_with_the_flat_layout_opens_and_puts_new_topics_in_directories() {
    let dir = support::samples::sample_dir("store-v2-flat");
    let names = ["persistent://tenant/ns/orders", "../../etc/passwd \u{e9}"];
    let check = |store: &Store| {
        assert_eq!(store.topic_names()[..2], names);
        for name in names {
            let topic = store.topic(name).expect("topic");
            assert_eq!(topic.last_position().map(|p| p.ledger_id), Some(1));
            let a = topic
                .open_cursor("sub-a", CursorOptions::default())
                .expect("cursor");
            let b = topic
                .open_cursor("sub/b", CursorOptions::default())
                .expect("cursor");
            assert_eq!(
                a.mark_delete_position().expect("md"),
                Some(Position::new(1, 2))
            );
            let acked = |c: &ackstore::Cursor| {
                (0..10)
                    .filter(|&e| c.is_acked(Position::new(1, e)).expect("is_acked"))
                    .collect::<Vec<u64>>()
            };
            assert_eq!(acked(&a), [0, 1, 2, 5, 7], "{name}");
            assert_eq!(acked(&b), [0, 9], "{name}");
        }
    };
    let store = Store::open(dir.path(), StoreConfig::default()).expect("open");
    check(&store);
    let topic = store.topic("new").expect("a new topic");
    let p = topic.append(b"n").expect("append");
    topic.sync().expect("sync");
    drop(topic);
    store.close().expect("close");
    drop(store);
    assert!(
        dir.path().join("t3").is_dir(),
        "the new topic has a directory"
    );
    assert!(
        dir.path()
            .join("t1-ledger-00000000000000000001.log")
            .is_file(),
        "the flat topics stay where they were"
    );
    let store = Store::open(dir.path(), StoreConfig::default()).expect("reopen");
    check(&store);
    assert_eq!(
        store
            .topic("new")
            .expect("topic")
            .read(p)
            .expect("read")
            .payload,
        b"n"
    );
}

/// A store whose owner's process died (no close): each topic's record still lists the ledger it
/// was appending to with no count. Reopening records the count in memory only, so the restart
/// rewrites no topic file (each topic's record gains its claim's name); the topic's next record
/// write makes the repair durable, and a power cut at any step of it reopens with every synced
/// entry, before or after.
#[test]
fn a_restart_after_a_crash_rewrites_no_topic_file_and_repairs_it_with_the_next_write() {
    let crashed = || {
        let disk = MemStorage::new();
        let store =
            Store::open_with_storage(Arc::new(disk.clone()), store_config(4)).expect("open");
        let mut synced = Vec::new();
        for t in 0..3 {
            let topic = store.topic(&topic_name(t)).expect("topic");
            let ps: Vec<Position> = (0..6)
                .map(|_| topic.append(b"e").expect("append"))
                .collect();
            topic.sync().expect("sync");
            let cursor = topic
                .open_cursor("sub", CursorOptions::default())
                .expect("cursor");
            cursor.ack(ps[1]).expect("ack");
            cursor.flush().expect("flush");
            synced.push(ps);
        }
        // The owner's process dies (what it wrote survives it; its lock goes with it):
        // nothing is closed or sealed.
        std::mem::forget(store);
        disk.break_lock();
        (disk, synced)
    };
    let (disk, synced) = crashed();
    let files = topic_files(&disk);
    let store = Store::open_with_storage(Arc::new(disk.clone()), store_config(4)).expect("reopen");
    for (t, ps) in synced.iter().enumerate() {
        let topic = store.topic(&topic_name(t)).expect("topic");
        for p in ps {
            topic.read(*p).expect("a synced entry");
        }
        let cursor = topic
            .open_cursor("sub", CursorOptions::default())
            .expect("cursor");
        assert!(cursor.is_acked(ps[1]).expect("is_acked"));
        assert_eq!(cursor.read_entries(1).expect("read")[0].position, ps[0]);
    }
    only_claims_were_added(&files, &topic_files(&disk));
    drop(store);

    // The first write of a topic after the restart, cut at every step.
    cut_everywhere_after(
        Points::EVERY,
        |fresh| {
            for (name, bytes) in disk.list().expect("list").iter().map(|n| {
                let b = disk.live_bytes(n).expect("bytes");
                (n.clone(), b)
            }) {
                let file = fresh.create(&name).expect("create");
                file.write_all_at(&bytes, 0).expect("write");
                file.sync_data().expect("sync");
            }
            fresh.sync_dir().expect("sync dir");
        },
        |fresh, ()| -> Option<Position> {
            let store = Store::open_with_storage(Arc::new(fresh.clone()), store_config(4)).ok()?;
            let topic = store.topic(&topic_name(0)).ok()?;
            let p = topic.append(b"after").ok()?;
            topic.sync().ok()?;
            Some(p)
        },
        |fresh, cut, appended| {
            let image = fresh.durable_image();
            let store = Store::open_with_storage(Arc::new(image.clone()), store_config(4))
                .unwrap_or_else(|e| panic!("{cut:?}: {e}"));
            for (t, ps) in synced.iter().enumerate() {
                let topic = store.topic(&topic_name(t)).expect("topic");
                for p in ps {
                    topic
                        .read(*p)
                        .unwrap_or_else(|e| panic!("{cut:?}: {p} lost: {e}"));
                }
                if t == 0
                    && let Some(p) = appended
                {
                    assert_eq!(topic.read(p).expect("the new entry").payload, b"after");
                }
            }
        },
    );
}

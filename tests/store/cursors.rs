//! Cursors of a store's topics persist through the store's shared journal: through the public
//! `Store` API (cursor flushes and `flush_all` ticks), checked per cursor against a model after a
//! power cut at every storage operation and every byte of the unsynced tail; a reopen restores
//! every cursor exactly and costs the same whatever the number of cursors; seeks, rewinds,
//! properties and deletes as with cursor ledgers; threads acking, seeking, closing and flushing
//! while producers roll ledgers.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::{
    CursorConfig, CursorOptions, Error, LedgerConfig, MemStorage, Position, RecoverySource,
    Storage, Store, StoreConfig,
};
use support::crash::{Points, cut_everywhere_after, torn_image, unsynced_tail};
use support::workload::Rng;

const TOPICS: usize = 3;
const CURSORS: usize = 3;
const ENTRIES: u64 = 120;

fn topic_name(t: usize) -> String {
    format!("persistent://tenant/ns/topic-{t}")
}

fn cursor_name(c: usize) -> String {
    format!("sub/{c}")
}

fn open(disk: &MemStorage) -> ackstore::Result<Store> {
    Store::open_with_storage(
        Arc::new(disk.clone()),
        StoreConfig {
            ledger: support::config::topic(40, ackstore::PersistMode::MultiEntry, 1200),
            ..StoreConfig::default()
        },
    )
}

/// One cursor's acked set: everything at or before mark-delete, plus individual acks.
type Acked = BTreeSet<Position>;

/// Every cursor's acked set, by (topic, cursor).
type Model = BTreeMap<(usize, usize), Acked>;

/// What the armed workload knows: the acks it made (the truth) and those an `Ok` flush covered.
#[derive(Debug, Default, Clone)]
struct Outcome {
    truth: Model,
    durable: Model,
}

/// Creates the topics with their entries (synced) and their cursors, then closes the store.
/// Returns every topic's positions.
fn prepare(disk: &MemStorage) -> Vec<Vec<Position>> {
    let store = open(disk).expect("open");
    let mut positions = Vec::new();
    for t in 0..TOPICS {
        let topic = store.topic(&topic_name(t)).expect("topic");
        let mut ps = Vec::new();
        for i in 0..ENTRIES {
            ps.push(topic.append(format!("{t}/{i}").as_bytes()).expect("append"));
        }
        topic.sync().expect("sync");
        for c in 0..CURSORS {
            topic
                .open_cursor(&cursor_name(c), CursorOptions::default())
                .expect("cursor");
        }
        positions.push(ps);
    }
    store.close().expect("close");
    positions
}

/// Reopens the store, then acks at random across every cursor, flushing one cursor, or all of
/// them, now and then; stops at the first error (the power is gone).
fn workload(disk: &MemStorage, positions: &[Vec<Position>], seed: u64) -> Outcome {
    let mut outcome = Outcome::default();
    for t in 0..TOPICS {
        for c in 0..CURSORS {
            outcome.truth.insert((t, c), Acked::new());
            outcome.durable.insert((t, c), Acked::new());
        }
    }
    let _ = run(disk, positions, seed, &mut outcome);
    outcome
}

fn run(
    disk: &MemStorage,
    positions: &[Vec<Position>],
    seed: u64,
    outcome: &mut Outcome,
) -> ackstore::Result<()> {
    let store = open(disk)?;
    let mut cursors = BTreeMap::new();
    for t in 0..TOPICS {
        let topic = store.topic(&topic_name(t))?;
        for c in 0..CURSORS {
            cursors.insert(
                (t, c),
                topic.open_cursor(&cursor_name(c), CursorOptions::default())?,
            );
        }
    }
    let keys: Vec<(usize, usize)> = cursors.keys().copied().collect();
    let mut rng = Rng::new(seed);
    for step in 0..90 {
        let key = keys[rng.index(keys.len())];
        let cursor = &cursors[&key];
        let ps = &positions[key.0];
        if rng.chance(8) {
            let upto = ps[rng.index(ps.len() / 3)];
            let mark = cursor.mark_delete_position()?;
            if mark.is_none_or(|m| upto > m) {
                cursor.ack_cumulative(upto)?;
                let truth = outcome.truth.get_mut(&key).expect("cursor");
                truth.extend(ps.iter().copied().filter(|p| *p <= upto));
            }
        } else {
            let pos = ps[rng.index(ps.len())];
            cursor.ack(pos)?;
            outcome.truth.get_mut(&key).expect("cursor").insert(pos);
        }
        if step % 30 == 14 {
            // Every cursor, one flush each: each is a tick of its own.
            for (k, c) in &cursors {
                c.flush()?;
                outcome.durable.insert(*k, outcome.truth[k].clone());
            }
        } else if step % 30 == 29 {
            // Every cursor in one tick.
            store.flush_all()?;
            outcome.durable.clone_from(&outcome.truth);
        } else if rng.chance(15) {
            cursor.flush()?;
            outcome.durable.insert(key, outcome.truth[&key].clone());
        }
    }
    store.close()?;
    outcome.durable = outcome.truth.clone();
    Ok(())
}

/// What the cursor holds acknowledged among `positions`.
fn acked_of(cursor: &ackstore::Cursor, positions: &[Position]) -> Acked {
    positions
        .iter()
        .copied()
        .filter(|p| cursor.is_acked(*p).expect("is_acked"))
        .collect()
}

/// Opens the store on `image` and checks every cursor: never more acked than the truth, every
/// ack an `Ok` flush covered kept.
fn check(image: &MemStorage, positions: &[Vec<Position>], outcome: &Outcome, what: &str) {
    let store = open(image).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    for (t, ps) in positions.iter().enumerate() {
        let topic = store.topic(&topic_name(t)).expect("topic");
        for c in 0..CURSORS {
            let cursor = topic
                .open_cursor(&cursor_name(c), CursorOptions::default())
                .expect("cursor");
            let got = acked_of(&cursor, ps);
            let truth = &outcome.truth[&(t, c)];
            let durable = &outcome.durable[&(t, c)];
            assert!(
                got.is_subset(truth),
                "{what}: cursor {t}/{c} recovered acks never made: {:?}",
                got.difference(truth).collect::<Vec<_>>()
            );
            assert!(
                durable.is_subset(&got),
                "{what}: cursor {t}/{c} lost flushed acks: {:?}",
                durable.difference(&got).collect::<Vec<_>>()
            );
        }
    }
}

#[test]
fn a_power_cut_at_every_step_of_store_cursor_flushes_loses_no_flushed_ack_and_invents_none() {
    let mut cuts_after_a_flush = 0;
    let clean = cut_everywhere_after(
        Points::every_in_release(5),
        prepare,
        |disk, positions| (workload(disk, &positions, 7), positions),
        |disk, cut, (outcome, positions)| {
            check(
                &disk.durable_image(),
                &positions,
                &outcome,
                &format!("{cut:?}"),
            );
            cuts_after_a_flush += usize::from(outcome.durable.values().any(|d| !d.is_empty()));
        },
    );
    let (outcome, _) = clean.result;
    assert_eq!(
        outcome.durable, outcome.truth,
        "the clean run closes the store"
    );
    assert!(
        cuts_after_a_flush > 50,
        "only {cuts_after_a_flush} cut points after a flush"
    );
}

#[test]
fn every_byte_of_the_unsynced_journal_tail_recovers_to_the_model() {
    let mut images = 0;
    cut_everywhere_after(
        Points::every_in_release(7),
        prepare,
        |disk, positions| (workload(disk, &positions, 11), positions),
        |disk, cut, (outcome, positions)| {
            let tail = unsynced_tail(disk);
            if tail == 0 {
                return;
            }
            let step = if tail > 300 { 1 } else { (tail / 5).max(1) };
            for keep in (0..=tail).step_by(step) {
                let image = torn_image(disk, |_| keep);
                check(
                    &image,
                    &positions,
                    &outcome,
                    &format!("{cut:?}, {keep} of {tail} tail bytes"),
                );
                images += 1;
            }
        },
    );
    assert!(images > 200, "only {images} torn images checked");
}

/// A store of `topics` topics with `cursors` cursors each, every cursor with acks, flushed and
/// closed.
fn populated(disk: &MemStorage, topics: usize, cursors: usize) {
    let store = open(disk).expect("open");
    for t in 0..topics {
        let topic = store.topic(&topic_name(t)).expect("topic");
        let ps: Vec<Position> = (0..ENTRIES)
            .map(|i| topic.append(format!("{i}").as_bytes()).expect("append"))
            .collect();
        topic.sync().expect("sync");
        for c in 0..cursors {
            let cursor = topic
                .open_cursor(&cursor_name(c), CursorOptions::default())
                .expect("cursor");
            for p in ps.iter().skip(c).step_by(3) {
                cursor.ack(*p).expect("ack");
            }
            cursor
                .set_property("c", i64::try_from(c).expect("small"))
                .expect("property");
        }
    }
    store.close().expect("close");
}

#[test]
fn reopening_a_store_restores_every_cursor_exactly_from_the_journal() {
    let disk = MemStorage::new();
    let store = open(&disk).expect("open");
    let mut expected = BTreeMap::new();
    for t in 0..TOPICS {
        let topic = store.topic(&topic_name(t)).expect("topic");
        let ps: Vec<Position> = (0..ENTRIES)
            .map(|i| topic.append(format!("{i}").as_bytes()).expect("append"))
            .collect();
        topic.sync().expect("sync");
        for c in 0..4 {
            let cursor = topic
                .open_cursor(&cursor_name(c), CursorOptions::default())
                .expect("cursor");
            cursor.ack_cumulative(ps[c * 3]).expect("cumulative");
            for p in ps.iter().skip(10 + c).step_by(c + 2) {
                cursor.ack(*p).expect("ack");
            }
            cursor
                .set_property("t", i64::try_from(t).expect("small"))
                .expect("property");
            match c {
                1 => cursor.seek(ps[50]).expect("seek"),
                2 => cursor.rewind().expect("rewind"),
                _ => {}
            }
            if c == 1 {
                cursor.ack(ps[70]).expect("ack after the seek");
            }
            expected.insert(
                (t, c),
                (
                    cursor.mark_delete_position().expect("mark"),
                    cursor.acked_ranges().expect("ranges"),
                    cursor.properties().expect("properties"),
                    cursor.epoch().expect("epoch"),
                ),
            );
        }
    }
    store.close().expect("close");
    drop(store);
    // Only the store's journal holds cursor state: no cursor ledger was created.
    let store = open(&disk.durable_image()).expect("reopen");
    for t in 0..TOPICS {
        let topic = store.topic(&topic_name(t)).expect("topic");
        for c in 0..4 {
            let cursor = topic
                .open_cursor(&cursor_name(c), CursorOptions::default())
                .expect("cursor");
            let got = (
                cursor.mark_delete_position().expect("mark"),
                cursor.acked_ranges().expect("ranges"),
                cursor.properties().expect("properties"),
                cursor.epoch().expect("epoch"),
            );
            assert_eq!(got, expected[&(t, c)], "cursor {t}/{c}");
            let stats = cursor.stats().expect("stats");
            assert_eq!(stats.recovery_source, Some(RecoverySource::Journal));
            assert_eq!(stats.persist.cursor_ledger, None);
        }
        let files = topic.ledgers().len();
        assert!(files > 0);
    }
}

#[test]
fn a_store_restart_writes_as_much_with_many_cursors_as_with_few() {
    let mutations_of_restart = |cursors: usize| {
        let disk = MemStorage::new();
        populated(&disk, 2, cursors);
        let before = disk.mutations();
        let store = open(&disk).expect("reopen");
        for t in 0..2 {
            let topic = store.topic(&topic_name(t)).expect("topic");
            for c in 0..cursors {
                let cursor = topic
                    .open_cursor(&cursor_name(c), CursorOptions::default())
                    .expect("cursor");
                assert!(cursor.acked_range_count().expect("ranges") > 0);
            }
        }
        let after = disk.mutations();
        let files = disk.list().expect("list").len();
        drop(store);
        (after - before, files)
    };
    let (few, files_few) = mutations_of_restart(2);
    let (many, files_many) = mutations_of_restart(12);
    assert_eq!(
        few, many,
        "reopening 24 cursors wrote more than reopening 4: no cursor creates a file or rewrites a \
         record on reopen"
    );
    // Cursor records only: no cursor ledger per cursor.
    assert_eq!(files_many - files_few, 2 * 10);
}

#[test]
fn a_deleted_cursor_of_a_store_is_gone_from_the_journal_after_a_reopen() {
    let disk = MemStorage::new();
    populated(&disk, 1, 3);
    let store = open(&disk).expect("open");
    let topic = store.topic(&topic_name(0)).expect("topic");
    let before = store.journal_stats().live_bytes;
    topic.delete_cursor(&cursor_name(1)).expect("delete");
    assert!(store.journal_stats().live_bytes < before);
    store.close().expect("close");
    drop((topic, store));
    let store = open(&disk.durable_image()).expect("reopen");
    let topic = store.topic(&topic_name(0)).expect("topic");
    assert_eq!(topic.cursor_names(), vec![cursor_name(0), cursor_name(2)]);
    let again = topic
        .open_cursor(&cursor_name(1), CursorOptions::default())
        .expect("a new cursor of the same name");
    assert_eq!(again.acked_range_count().expect("ranges"), 0);
    assert_eq!(again.stats().expect("stats").recovery_source, None);
}

#[test]
fn trimming_a_store_topic_reads_closed_cursors_from_the_journal() {
    let disk = MemStorage::new();
    let store = open(&disk).expect("open");
    let topic = store.topic(&topic_name(0)).expect("topic");
    let ps: Vec<Position> = (0..ENTRIES)
        .map(|i| topic.append(format!("{i}").as_bytes()).expect("append"))
        .collect();
    topic.sync().expect("sync");
    let slow = topic
        .open_cursor("slow", CursorOptions::default())
        .expect("cursor");
    let fast = topic
        .open_cursor("fast", CursorOptions::default())
        .expect("cursor");
    fast.ack_cumulative(ps[100]).expect("ack");
    slow.ack_cumulative(ps[45]).expect("ack");
    slow.close().expect("close");
    fast.close().expect("close");
    // Ledgers of 40 entries: the first is consumed by both; the second not by `slow`.
    let trimmed = topic.trim_consumed().expect("trim");
    assert_eq!(trimmed, vec![ps[0].ledger_id]);
}

#[test]
fn batch_index_acks_on_a_store_cursor_persist_through_the_journal() {
    let disk = MemStorage::new();
    let store = open(&disk).expect("open");
    let topic = store.topic(&topic_name(0)).expect("topic");
    let p = topic.append(b"batch").expect("append");
    topic.sync().expect("sync");
    let cursor = topic
        .open_cursor("c", CursorOptions::default())
        .expect("cursor");
    assert!(cursor.ack_batch_index(p, 1, 4).expect("batch-index ack"));
    assert!(!cursor.is_acked(p).expect("is_acked"));
    cursor.flush().expect("flush");
    drop((cursor, topic));
    std::mem::forget(store);
    let store = open(&disk.durable_image()).expect("reopen");
    let topic = store.topic(&topic_name(0)).expect("topic");
    let cursor = topic
        .open_cursor("c", CursorOptions::default())
        .expect("cursor");
    let acked: Vec<bool> = (0..4)
        .map(|i| cursor.is_batch_index_acked(p, i).expect("acked"))
        .collect();
    assert_eq!(acked, [false, true, false, false]);
    for i in [0, 2, 3] {
        cursor.ack_batch_index(p, i, 4).expect("batch-index ack");
    }
    assert_eq!(cursor.mark_delete_position().expect("mark"), Some(p));
}

#[test]
fn flush_all_commits_every_dirty_cursor_of_every_topic_with_one_sync() {
    let disk = MemStorage::new();
    let store = open(&disk).expect("open");
    let mut cursors = Vec::new();
    for t in 0..TOPICS {
        let topic = store.topic(&topic_name(t)).expect("topic");
        let ps: Vec<Position> = (0..ENTRIES)
            .map(|i| topic.append(format!("{i}").as_bytes()).expect("append"))
            .collect();
        topic.sync().expect("sync");
        for c in 0..CURSORS {
            let cursor = topic
                .open_cursor(&cursor_name(c), CursorOptions::default())
                .expect("cursor");
            cursors.push((cursor, ps.clone()));
        }
    }
    for round in 0..3_usize {
        for (i, (cursor, ps)) in cursors.iter().enumerate() {
            cursor.ack(ps[round * 20 + i + 1]).expect("ack");
        }
        let first = store.flush_all().expect("flush_all");
        assert_eq!(first.cursors, (TOPICS * CURSORS) as u64, "round {round}");
        // The first tick starts the journal's first segment: its header is synced, then it is
        // listed in the store's catalog (a compare-and-set: the record's sync and the
        // directory's, which also makes the new segment's name durable), then the tick syncs.
        assert_eq!(first.syncs, if round == 0 { 4 } else { 1 }, "round {round}");
        let again = store.flush_all().expect("nothing changed");
        assert_eq!((again.cursors, again.syncs), (0, 0));
    }
    let image = disk.durable_image();
    let reopened = open(&image).expect("reopen");
    for (i, (_, ps)) in cursors.iter().enumerate() {
        let topic = reopened.topic(&topic_name(i / CURSORS)).expect("topic");
        let cursor = topic
            .open_cursor(&cursor_name(i % CURSORS), CursorOptions::default())
            .expect("cursor");
        for round in 0..3 {
            assert!(cursor.is_acked(ps[round * 20 + i + 1]).expect("is_acked"));
        }
        assert_eq!(cursor.acked_range_count().expect("ranges"), 3);
    }
}

/// Producers append (rolling a data ledger every 16 entries) while a thread per cursor acks,
/// seeks now and then, flushes, and closes and reopens its cursor, and another thread runs
/// `flush_all`; afterwards every cursor, closed with the store and reopened, is exactly what it
/// was.
#[test]
fn threads_acking_seeking_closing_and_flushing_through_one_store_keep_every_cursor_exact() {
    let dir = tempfile::tempdir().expect("dir");
    let config = StoreConfig {
        ledger: LedgerConfig {
            max_entries_per_ledger: 16,
            cursor: CursorConfig {
                lru_capacity_bytes: 4096,
                ..CursorConfig::default()
            },
            ..LedgerConfig::default()
        },
        ..StoreConfig::default()
    };
    let store = Store::open(dir.path(), config.clone()).expect("open");
    let topics: Vec<_> = (0..TOPICS)
        .map(|t| store.topic(&topic_name(t)).expect("topic"))
        .collect();
    for topic in &topics {
        for i in 0..64 {
            topic.append(format!("{i}").as_bytes()).expect("append");
        }
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    let finals = std::sync::Mutex::new(BTreeMap::new());
    std::thread::scope(|s| {
        for topic in &topics {
            let done = &done;
            s.spawn(move || {
                let mut i = 0;
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    topic.append(format!("p{i}").as_bytes()).expect("append");
                    i += 1;
                    if i % 50 == 0 {
                        std::thread::yield_now();
                    }
                }
            });
        }
        {
            let store = &store;
            let done = &done;
            s.spawn(move || {
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    store.flush_all().expect("flush_all");
                }
            });
        }
        let workers: Vec<_> = (0..TOPICS * CURSORS)
            .map(|k| {
                let topic = &topics[k / CURSORS];
                let finals = &finals;
                s.spawn(move || {
                    let name = cursor_name(k % CURSORS);
                    let mut rng = Rng::new(k as u64 + 1);
                    let mut cursor = topic
                        .open_cursor(&name, CursorOptions::default())
                        .expect("cursor");
                    for step in 0..400 {
                        let last = topic.last_position().expect("entries");
                        let first = topic.first_position().expect("entries");
                        let ledger =
                            first.ledger_id + rng.below(last.ledger_id - first.ledger_id + 1);
                        let pos = Position::new(ledger, rng.below(16)).min(last);
                        match cursor.ack(pos) {
                            Ok(_) | Err(Error::NoSuchEntry { .. }) => {}
                            Err(e) => panic!("ack {pos}: {e}"),
                        }
                        match step % 100 {
                            37 => cursor.seek(pos).expect("seek"),
                            61 => cursor.rewind().expect("rewind"),
                            73 => {
                                cursor.close().expect("close");
                                cursor = topic
                                    .open_cursor(&name, CursorOptions::default())
                                    .expect("reopen");
                            }
                            _ if rng.chance(10) => cursor.flush().expect("flush"),
                            _ => {}
                        }
                    }
                    finals.lock().expect("finals").insert(
                        k,
                        (
                            cursor.mark_delete_position().expect("mark"),
                            cursor.acked_ranges().expect("ranges"),
                            cursor.epoch().expect("epoch"),
                        ),
                    );
                })
            })
            .collect();
        // Every worker joined before `done`, then their panics: a worker's panic must not
        // leave the flushing thread running, and the scope waiting for it.
        let joined: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        for worker in joined {
            worker.expect("worker");
        }
    });
    store.close().expect("close");
    drop((topics, store));
    let store = Store::open(dir.path(), config).expect("reopen");
    let finals = finals.into_inner().expect("finals");
    for (k, expected) in finals {
        let topic = store.topic(&topic_name(k / CURSORS)).expect("topic");
        let cursor = topic
            .open_cursor(&cursor_name(k % CURSORS), CursorOptions::default())
            .expect("cursor");
        let got = (
            cursor.mark_delete_position().expect("mark"),
            cursor.acked_ranges().expect("ranges"),
            cursor.epoch().expect("epoch"),
        );
        assert_eq!(got, expected, "cursor {k}");
    }
}

#[test]
fn a_former_owners_cursor_flush_is_fenced_and_never_seen_by_the_new_owner() {
    let disk = MemStorage::new();
    let old = open(&disk).expect("open");
    let topic = old.topic(&topic_name(0)).expect("topic");
    let ps: Vec<Position> = (0..10)
        .map(|i| topic.append(format!("{i}").as_bytes()).expect("append"))
        .collect();
    topic.sync().expect("sync");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    cursor.ack(ps[3]).expect("ack");
    cursor.flush().expect("flush before the takeover");
    disk.break_lock();
    let new = open(&disk).expect("second owner after the lock broke");
    cursor.ack(ps[5]).expect("acks go on in memory");
    assert!(matches!(cursor.flush(), Err(Error::Fenced { .. })));
    assert!(
        old.flush_all().is_err(),
        "the former owner's journal refuses every later tick"
    );
    let topic = new.topic(&topic_name(0)).expect("topic");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    assert!(cursor.is_acked(ps[3]).expect("is_acked"), "flushed before");
    assert!(!cursor.is_acked(ps[5]).expect("is_acked"), "fenced flush");
    cursor.ack(ps[7]).expect("ack");
    cursor.flush().expect("the new owner flushes");
}

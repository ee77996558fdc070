//! Cursors of a store's topics persist through the store's shared journal: through the public
//! `Store` API, checked per cursor against a model after a power cut at every storage operation
//! and every byte of the unsynced tail; a reopen restores every cursor exactly and costs the
//! same whatever the number of cursors; seeks, rewinds, properties and deletes as with cursor
//! ledgers.

mod support;

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

/// Data ledgers of 40 entries and a small ack budget, so cursors hold several partitions and
/// evict some to the journal between flushes.
fn config() -> StoreConfig {
    StoreConfig {
        ledger: LedgerConfig {
            max_entries_per_ledger: 40,
            cursor: CursorConfig {
                lru_capacity_bytes: 1200,
                ..CursorConfig::default()
            },
            ..LedgerConfig::default()
        },
        ..StoreConfig::default()
    }
}

fn topic_name(t: usize) -> String {
    format!("persistent://tenant/ns/topic-{t}")
}

fn cursor_name(c: usize) -> String {
    format!("sub/{c}")
}

fn open(disk: &MemStorage) -> ackstore::Result<Store> {
    Store::open_with_storage(Arc::new(disk.clone()), config())
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
        if step % 15 == 14 {
            // Every cursor, one flush each: each is a tick of its own.
            for (k, c) in &cursors {
                c.flush()?;
                outcome.durable.insert(*k, outcome.truth[k].clone());
            }
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
fn batch_index_acks_on_a_store_cursor_are_refused_loudly() {
    let disk = MemStorage::new();
    let store = open(&disk).expect("open");
    let topic = store.topic(&topic_name(0)).expect("topic");
    let p = topic.append(b"batch").expect("append");
    let cursor = topic
        .open_cursor("c", CursorOptions::default())
        .expect("cursor");
    assert!(matches!(
        cursor.ack_batch_index(p, 1, 4),
        Err(Error::Unsupported { .. })
    ));
    assert!(!cursor.is_acked(p).expect("is_acked"));
}

//! Topic ownership hand-off, end to end: the new owner's redelivery, the consumer filter that
//! drops it, the epoch that lets a server-side reset through, and the fence that keeps a
//! previous owner from writing anything the new one sees.
//!
//! A previous owner that does not know it lost the directory is simulated with
//! `MemStorage::break_lock` (shared storage on which the lock did not hold, or a lock broken by
//! an operator); on real files the `flock` makes a second owner impossible within one host,
//! which `a_second_owner_is_refused_while_the_first_holds_the_directory` checks.
//!
//! The hand-off, epoch and redelivery tests run on a topic opened alone and on a topic of a
//! store (whose cursors persist through the store's journal).

use crate::support;

use std::collections::HashMap;
use std::sync::Arc;

use ackstore::{Cursor, InitialPosition, ManagedLedger};
use ackstore::{Error, Position};
use ackstore::{ReceivedFilter, SubscriptionType};
use proptest::prelude::*;
use support::topic::{
    Host, append_n, at, config, mem_hosted, mem_topic, on_each_backend_and_host, on_each_host,
    reopen, reopen_hosted,
};

const PER_LEDGER: u64 = 4;
const SUB: &str = "sub";

fn open_sub(topic: &ManagedLedger) -> Cursor {
    topic
        .open_cursor(SUB, at(InitialPosition::Earliest, false))
        .expect("open cursor")
}

/// A consumer: its filter, and the message numbers (payload `m{i}` is message `i + 1`) its
/// application processed, in order.
struct Consumer {
    filter: ReceivedFilter,
    processed: Vec<u64>,
    last_processed: Option<Position>,
}

impl Consumer {
    fn new(filter_enabled: bool) -> Self {
        Self {
            filter: ReceivedFilter::new(SubscriptionType::Failover, filter_enabled).unwrap(),
            processed: Vec::new(),
            last_processed: None,
        }
    }

    /// The broker delivers everything the cursor has; the consumer filters and processes.
    fn receive_all(&mut self, cursor: &Cursor) {
        loop {
            let (epoch, entries) = cursor.read_entries_at_epoch(2).unwrap();
            if entries.is_empty() {
                return;
            }
            for entry in entries {
                if self.filter.admit(entry.position, epoch) {
                    self.processed.push(message_number(&entry.payload));
                    self.last_processed = Some(entry.position);
                }
            }
        }
    }
}

fn message_number(payload: &[u8]) -> u64 {
    std::str::from_utf8(payload)
        .ok()
        .and_then(|s| s.strip_prefix('m'))
        .and_then(|n| n.parse::<u64>().ok())
        .expect("payload m{i}")
        + 1
}

/// How owner A leaves the topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Departure {
    /// A closes the topic (its cursor flushes, nothing was acknowledged).
    Close,
    /// A's machine loses power: B opens what the disk durably holds.
    Crash,
    /// A keeps running without knowing: its lock was broken, B opens next to it.
    LostLock,
}

/// Owner A appends and delivers 1..=5, leaves without acknowledgements, owner B opens the
/// directory and delivers again; the consumer then acknowledges cumulatively what it
/// processed. Returns what the application processed.
fn hand_off(host: Host, filter_enabled: bool, departure: Departure) -> Vec<u64> {
    let (disk, a) = mem_hosted(host, PER_LEDGER);
    let ca = open_sub(&a);
    append_n(&a, 5);
    a.sync().unwrap();
    let mut consumer = Consumer::new(filter_enabled);
    consumer.receive_all(&ca);
    assert_eq!(consumer.processed, [1, 2, 3, 4, 5]);
    let epoch = ca.epoch().unwrap();

    let (b_disk, stale) = match departure {
        Departure::Close => {
            a.close().unwrap();
            (disk, None)
        }
        Departure::Crash => (disk.durable_image(), Some(a)),
        Departure::LostLock => {
            disk.break_lock();
            (disk, Some(a))
        }
    };
    let b = reopen_hosted(host, &b_disk, PER_LEDGER);
    let cb = open_sub(&b);
    // A reopen after an ownership move is not a reset: the epoch stays.
    assert_eq!(cb.epoch().unwrap(), epoch);
    consumer.receive_all(&cb);
    let last = consumer.last_processed.expect("something processed");
    cb.ack_cumulative(last).unwrap();
    cb.flush().unwrap();
    assert_eq!(cb.backlog().unwrap(), 0);
    drop(stale);
    b.close().unwrap();

    let again = reopen_hosted(host, &b_disk, PER_LEDGER);
    let c = open_sub(&again);
    assert_eq!(c.mark_delete_position().unwrap(), Some(last));
    assert_eq!(c.backlog().unwrap(), 0);
    consumer.processed
}

#[test]
fn a_hand_off_replays_one_to_five_which_only_the_filter_drops() {
    on_each_host(|host| {
        for departure in [Departure::Close, Departure::Crash, Departure::LostLock] {
            assert_eq!(
                hand_off(host, true, departure),
                [1, 2, 3, 4, 5],
                "filter enabled, {departure:?}"
            );
            assert_eq!(
                hand_off(host, false, departure),
                [1, 2, 3, 4, 5, 1, 2, 3, 4, 5],
                "filter disabled, {departure:?}"
            );
        }
    });
}

/// Owner A acknowledges single messages of batches, flushes, acknowledges more, and leaves; owner
/// B delivers each batch with the messages A's flush covered marked acknowledged (and, after a
/// clean close, the later ones too), never one A did not acknowledge; a fenced A's flush changes
/// nothing B sees.
#[test]
fn a_hand_off_keeps_the_messages_a_flushed_batch_index_ack_covered() {
    on_each_host(|host| {
        for departure in [Departure::Close, Departure::Crash, Departure::LostLock] {
            batch_acks_across_a_hand_off(host, departure);
        }
    });
}

fn batch_acks_across_a_hand_off(host: Host, departure: Departure) {
    let (disk, a) = mem_hosted(host, PER_LEDGER);
    let batches: Vec<Position> = (0..6)
        .map(|i| {
            let meta = ackstore::AppendMeta {
                num_messages: 4,
                timestamp: i,
            };
            a.append_with(b"batch", meta).unwrap()
        })
        .collect();
    a.sync().unwrap();
    let ca = open_sub(&a);
    // Flushed: messages 0 and 2 of batch 1, all of batch 0 (acknowledged whole by the last).
    for (entry, index) in [(1, 0), (1, 2), (0, 0), (0, 1), (0, 2), (0, 3)] {
        ca.ack_batch_index(batches[entry], index, 4).unwrap();
    }
    ca.flush().unwrap();
    // Not flushed: message 3 of batch 4.
    ca.ack_batch_index(batches[4], 3, 4).unwrap();
    let flushed: Vec<Vec<u32>> = vec![vec![], vec![0, 2], vec![], vec![], vec![], vec![]];
    let mut all = flushed.clone();
    all[4] = vec![3];

    let (b_disk, stale) = match departure {
        Departure::Close => {
            a.close().unwrap();
            (disk, None)
        }
        Departure::Crash => (disk.durable_image(), Some(a)),
        Departure::LostLock => {
            disk.break_lock();
            (disk, Some(a))
        }
    };
    let b = reopen_hosted(host, &b_disk, PER_LEDGER);
    if departure == Departure::LostLock {
        // The former owner acknowledges more and flushes: fenced, nothing of it is seen.
        ca.ack_batch_index(batches[2], 1, 4).unwrap();
        assert!(is_fenced(ca.flush()), "{host:?}");
    }
    let cb = open_sub(&b);
    assert_eq!(cb.mark_delete_position().unwrap(), Some(batches[0]));
    let delivered: Vec<(Position, Vec<u32>)> = cb
        .read_entries(10)
        .unwrap()
        .into_iter()
        .map(|e| {
            let acked = e.acked_batch_indexes.iter().flatten().collect();
            (e.position, acked)
        })
        .collect();
    let expected = if departure == Departure::Close {
        &all
    } else {
        &flushed
    };
    let want: Vec<(Position, Vec<u32>)> = batches[1..]
        .iter()
        .copied()
        .zip(expected[1..].iter().cloned())
        .collect();
    assert_eq!(delivered, want, "{host:?}, {departure:?}");
    drop(stale);
}

#[test]
fn a_server_seek_back_to_two_after_five_is_delivered_again_through_the_epoch() {
    on_each_host(a_seek_back_is_delivered_again);
}

fn a_seek_back_is_delivered_again(host: Host) {
    let (disk, topic) = mem_hosted(host, PER_LEDGER);
    let cursor = open_sub(&topic);
    let p = append_n(&topic, 5);
    let mut consumer = Consumer::new(true);
    consumer.receive_all(&cursor);
    cursor.seek(p[1]).unwrap();
    consumer.receive_all(&cursor);
    assert_eq!(consumer.processed, [1, 2, 3, 4, 5, 2, 3, 4, 5]);
    assert_eq!(consumer.filter.dropped(), 0);

    // The seek's epoch is durable; a later ownership move replays 2..=5 under it, dropped.
    topic.close().unwrap();
    let moved = reopen_hosted(host, &disk, PER_LEDGER);
    let cursor = open_sub(&moved);
    assert_eq!(cursor.epoch().unwrap(), 1);
    consumer.receive_all(&cursor);
    assert_eq!(consumer.processed.len(), 9);
    assert_eq!(consumer.filter.dropped(), 4);
}

#[test]
fn the_epoch_rises_on_every_reset_and_survives_every_ownership_move() {
    on_each_host(the_epoch_survives_every_ownership_move);
}

fn the_epoch_survives_every_ownership_move(host: Host) {
    let (disk, a) = mem_hosted(host, PER_LEDGER);
    let p = append_n(&a, 8);
    a.sync().unwrap();
    let ca = open_sub(&a);
    ca.seek(p[2]).unwrap();
    ca.seek_by_index(5).unwrap();
    ca.seek_by_timestamp(1001).unwrap();
    ca.rewind().unwrap();
    assert_eq!(ca.epoch().unwrap(), 4);
    let mut disk = disk;
    let mut topic = a;
    for departure in [Departure::LostLock, Departure::Crash, Departure::Close] {
        match departure {
            Departure::Close => topic.close().unwrap(),
            Departure::Crash => disk = disk.durable_image(),
            Departure::LostLock => disk.break_lock(),
        }
        topic = reopen_hosted(host, &disk, PER_LEDGER);
        let cursor = open_sub(&topic);
        assert_eq!(cursor.epoch().unwrap(), 4, "after {departure:?}");
        let (epoch, entries) = cursor.read_entries_at_epoch(8).unwrap();
        assert_eq!(
            (epoch, entries.first().map(|e| e.position)),
            (4, Some(p[2]))
        );
    }
    let cursor = open_sub(&topic);
    cursor.seek(p[0]).unwrap();
    assert_eq!(cursor.epoch().unwrap(), 5);
}

#[test]
fn a_redeliver_request_is_a_rewind_and_its_entries_pass_the_filter() {
    on_each_backend_and_host(PER_LEDGER, |topic| {
        let cursor = open_sub(&topic);
        let p = append_n(&topic, 5);
        let mut consumer = Consumer::new(true);
        consumer.receive_all(&cursor);
        cursor.ack_cumulative(p[1]).unwrap();
        // The consumer's `redeliverUnacknowledgedMessages`: its filter forgets, the broker
        // rewinds the cursor (which also raises the epoch).
        consumer.filter.redeliver_unacknowledged();
        cursor.rewind().unwrap();
        assert_eq!(cursor.epoch().unwrap(), 1);
        consumer.receive_all(&cursor);
        assert_eq!(consumer.processed, [1, 2, 3, 4, 5, 3, 4, 5]);
        assert_eq!(consumer.filter.dropped(), 0);
    });
}

#[test]
fn the_filter_refuses_shared_and_key_shared_subscriptions() {
    for sub in [SubscriptionType::Shared, SubscriptionType::KeyShared] {
        assert!(matches!(
            ReceivedFilter::new(sub, true),
            Err(Error::Unsupported { .. })
        ));
    }
}

#[test]
fn a_second_owner_is_refused_while_the_first_holds_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let first = ManagedLedger::open(dir.path(), config(PER_LEDGER)).unwrap();
    assert!(matches!(
        ManagedLedger::open(dir.path(), config(PER_LEDGER)),
        Err(Error::Locked { .. })
    ));
    first.close().unwrap();
    ManagedLedger::open(dir.path(), config(PER_LEDGER)).unwrap();

    let (disk, topic) = mem_topic(PER_LEDGER);
    assert!(matches!(
        ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(PER_LEDGER)),
        Err(Error::Locked { .. })
    ));
    drop(topic);
    reopen(&disk, PER_LEDGER);
}

fn is_fenced<T: std::fmt::Debug>(result: ackstore::Result<T>) -> bool {
    matches!(result, Err(Error::Fenced { .. }))
}

/// What the new owner sees of a cursor.
fn cursor_view(cursor: &Cursor) -> (Option<Position>, Vec<(Position, Position)>, u64) {
    (
        cursor.mark_delete_position().unwrap(),
        cursor.acked_ranges().unwrap(),
        cursor.epoch().unwrap(),
    )
}

#[test]
fn a_fenced_handle_writes_nothing_the_new_owner_sees() {
    let (disk, a) = mem_topic(PER_LEDGER);
    let p = append_n(&a, 10);
    a.sync().unwrap();
    let ca = open_sub(&a);
    let other_a = a
        .open_cursor("other", at(InitialPosition::Earliest, false))
        .unwrap();
    ca.ack_cumulative(p[1]).unwrap();
    ca.ack(p[4]).unwrap();
    ca.flush().unwrap();
    other_a.ack_cumulative(p[0]).unwrap();
    other_a.flush().unwrap();

    disk.break_lock();
    let b = reopen(&disk, PER_LEDGER);
    // B has not opened "other" yet: A's writes to it are already fenced by the topic record.
    other_a.ack_cumulative(p[8]).unwrap();
    assert!(is_fenced(other_a.flush()));
    let cb = open_sub(&b);
    let before = cursor_view(&cb);
    let ledgers = b.ledgers();
    assert_eq!(before, (Some(p[1]), vec![(p[4], p[4])], 0));

    // A keeps going: acks, flushes, seeks, a property, cursor changes, trimming, closing.
    ca.ack(p[6]).unwrap();
    ca.ack_cumulative(p[3]).unwrap();
    ca.set_property("k", 7).unwrap();
    assert!(is_fenced(ca.flush()));
    assert!(is_fenced(ca.flush()), "the fence holds on retry");
    assert!(is_fenced(ca.seek(p[8])));
    assert!(is_fenced(ca.rewind()));
    assert!(is_fenced(ca.seek_by_index(9)));
    assert!(is_fenced(
        a.open_cursor("new", at(InitialPosition::Earliest, false))
    ));
    assert!(is_fenced(a.delete_cursor("other")));
    assert!(is_fenced(a.trim_consumed()));
    assert!(is_fenced(a.close()));
    drop(a);
    // A going away does not release B's lock.
    assert!(matches!(
        ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(PER_LEDGER)),
        Err(Error::Locked { .. })
    ));

    assert_eq!(cursor_view(&cb), before);
    assert!(cb.properties().unwrap().is_empty());
    assert_eq!(b.cursor_names(), ["other", "sub"]);
    assert_eq!(b.last_position(), Some(p[9]));
    assert_eq!(b.ledgers(), ledgers);
    let other_b = b
        .open_cursor("other", at(InitialPosition::Earliest, false))
        .unwrap();
    assert_eq!(other_b.mark_delete_position().unwrap(), Some(p[0]));
    b.close().unwrap();

    // And after the new owner reopens.
    let c = reopen(&disk, PER_LEDGER);
    assert_eq!(cursor_view(&open_sub(&c)), before);
    assert_eq!(c.cursor_names(), ["other", "sub"]);
    let other_c = c
        .open_cursor("other", at(InitialPosition::Earliest, false))
        .unwrap();
    assert_eq!(other_c.mark_delete_position().unwrap(), Some(p[0]));
    assert_eq!(c.last_position(), Some(p[9]));
    assert_eq!(c.ledgers(), ledgers);
}

#[test]
fn a_fenced_owners_appends_are_never_read_by_the_new_owner_nor_after_a_reopen() {
    let (disk, a) = mem_topic(100);
    let p = append_n(&a, 5);
    a.sync().unwrap();
    disk.break_lock();
    let b = reopen(&disk, 100);
    // A's data ledger was sealed by B's open; A's append is not checked per entry, but B
    // never reads past the count it sealed, and appends to a ledger of its own.
    let stale = a.append(b"stale").unwrap();
    assert_eq!(stale, Position::new(p[4].ledger_id, 5));
    let mine = b.append(b"m5").unwrap();
    b.sync().unwrap();
    assert!(mine.ledger_id > p[4].ledger_id, "{mine} after {}", p[4]);
    let cb = open_sub(&b);
    let read: Vec<u64> = cb
        .read_entries(10)
        .unwrap()
        .iter()
        .map(|e| message_number(&e.payload))
        .collect();
    assert_eq!(read, [1, 2, 3, 4, 5, 6]);
    assert!(matches!(
        b.read(Position::new(p[4].ledger_id, 5)),
        Err(Error::NoSuchEntry(_))
    ));
    // Its next topic-record write (the seal on close) is refused.
    assert!(is_fenced(a.close()));
    b.close().unwrap();

    // The stale entry is still in the file, past the count the record holds: never read.
    let c = reopen(&disk, 100);
    let cc = open_sub(&c);
    assert_eq!(cc.mark_delete_position().unwrap(), None);
    let read: Vec<u64> = cc
        .read_entries(10)
        .unwrap()
        .iter()
        .map(|e| message_number(&e.payload))
        .collect();
    assert_eq!(read, [1, 2, 3, 4, 5, 6]);
    assert_eq!(c.ledgers()[0].entries, 5);
    let log = c.entry_log().unwrap();
    assert_eq!(log.entry_count(p[4].ledger_id).unwrap(), 6);
}

/// One step of the property test.
#[derive(Clone, Debug)]
enum Op {
    /// The broker delivers up to this many entries.
    Deliver(usize),
    /// The consumer asks for every unacknowledged entry again (a rewind).
    Redeliver,
    /// An administrator seeks to entry k (past the end: latest).
    Seek(usize),
    /// The consumer acknowledges cumulatively the last message it received since the last
    /// reset.
    Ack,
    /// The producer appends this many entries (synced).
    Append(u64),
    /// The topic moves to a new owner.
    Move(Departure),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..4).prop_map(Op::Deliver),
        1 => Just(Op::Redeliver),
        1 => (0usize..40).prop_map(Op::Seek),
        2 => Just(Op::Ack),
        2 => (1u64..4).prop_map(Op::Append),
        1 => Just(Op::Move(Departure::Close)),
        1 => Just(Op::Move(Departure::Crash)),
        1 => Just(Op::Move(Departure::LostLock)),
    ]
}

proptest! {
    #![proptest_config(support::harness::proptest_config(256))]

    #[test]
    fn a_message_is_admitted_twice_only_after_a_redeliver_or_a_covering_seek(
        host in prop_oneof![Just(Host::Alone), Just(Host::Store)],
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let (mut disk, mut topic) = mem_hosted(host, PER_LEDGER);
        let mut cursor = open_sub(&topic);
        let mut positions = append_n(&topic, 8);
        topic.sync().unwrap();
        let mut filter = ReceivedFilter::new(SubscriptionType::Exclusive, true).unwrap();
        // Message -> step of its last admission; steps of redeliver requests; (step, target
        // message) of seeks; the epoch the model expects.
        let mut admitted: HashMap<u64, usize> = HashMap::new();
        let mut redelivers: Vec<usize> = Vec::new();
        let mut seeks: Vec<(usize, u64)> = Vec::new();
        let mut epoch = 0;
        // The largest message acknowledged cumulatively since the last seek (an acknowledgement sent after a seek back, before the consumer saw the seek's
        // epoch, covers messages the seek wanted again: the broker may skip them).
        let mut acked_since_reset = 0;
        let mut number_at: HashMap<Position, u64> = positions
            .iter()
            .enumerate()
            .map(|(i, &p)| (p, i as u64 + 1))
            .collect();
        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Deliver(max) => {
                    let (at_epoch, entries) = cursor.read_entries_at_epoch(max).unwrap();
                    prop_assert_eq!(at_epoch, epoch);
                    for entry in entries {
                        let message = message_number(&entry.payload);
                        if !filter.admit(entry.position, at_epoch) {
                            prop_assert!(
                                admitted.contains_key(&message) || message <= acked_since_reset,
                                "message {} dropped but neither processed nor acknowledged", message
                            );
                            continue;
                        }
                        if let Some(&first) = admitted.get(&message) {
                            let redelivered = redelivers.iter().any(|&t| first < t);
                            let covered = seeks.iter().any(|&(t, to)| first < t && to <= message);
                            prop_assert!(
                                redelivered || covered,
                                "message {} admitted again without a redeliver or a seek", message
                            );
                        }
                        admitted.insert(message, step);
                    }
                }
                Op::Redeliver => {
                    filter.redeliver_unacknowledged();
                    cursor.rewind().unwrap();
                    epoch += 1;
                    redelivers.push(step);
                    // A redeliver request asks again for what is *unacknowledged*: a cumulative
                    // ack sent before it still covers its messages (if a crash loses that ack,
                    // the broker redelivers them and the filter may drop them: they were acked).
                    // Only a seek takes acknowledgements back.
                }
                Op::Seek(k) => {
                    let target = positions
                        .get(k)
                        .copied()
                        .unwrap_or(Position::new(u64::MAX / 2, 0));
                    cursor.seek(target).unwrap();
                    epoch += 1;
                    seeks.push((step, k as u64 + 1));
                    acked_since_reset = 0;
                }
                Op::Ack => {
                    // The consumer acknowledges the last message it received since the last
                    // reset (its filter knows which).
                    let mark = cursor.mark_delete_position().unwrap();
                    if let Some(last) = filter.largest_received().filter(|&l| Some(l) > mark) {
                        cursor.ack_cumulative(last).unwrap();
                        acked_since_reset = acked_since_reset.max(number_at[&last]);
                    }
                }
                Op::Append(n) => {
                    let first = positions.len() as u64;
                    for i in first..first + n {
                        let p = topic.append(format!("m{i}").as_bytes()).unwrap();
                        positions.push(p);
                        number_at.insert(p, i + 1);
                    }
                    topic.sync().unwrap();
                }
                Op::Move(departure) => {
                    let stale = match departure {
                        Departure::Close => {
                            topic.close().unwrap();
                            None
                        }
                        Departure::Crash => {
                            disk = disk.durable_image();
                            None
                        }
                        Departure::LostLock => {
                            disk.break_lock();
                            Some(cursor.clone())
                        }
                    };
                    let moved = reopen_hosted(host, &disk, PER_LEDGER);
                    let moved_cursor = open_sub(&moved);
                    prop_assert_eq!(moved_cursor.epoch().unwrap(), epoch);
                    if let Some(stale) = stale {
                        // The previous owner's cursor is fenced.
                        prop_assert!(is_fenced(stale.seek(positions[0])));
                    }
                    topic = moved;
                    cursor = moved_cursor;
                }
            }
        }
    }
}

/// The new owner never writes into a ledger the previous owner may still be appending to: the
/// stale owner's appends after the hand-off, synced or not, and its attempt to seal, leave
/// every ledger readable, and every later open sees exactly what the new owner saw.
#[test]
fn a_stale_owner_appending_during_a_hand_off_leaves_every_ledger_readable() {
    for synced_before in [false, true] {
        let (disk, old) = mem_topic(1_000);
        let before = append_n(&old, 10);
        if synced_before {
            old.sync().unwrap();
        }
        disk.break_lock();
        let new = reopen(&disk, 1_000);
        let seen = new.last_position();
        // The stale owner goes on: more entries in the same ledger, synced, then a close
        // (which would seal it).
        let _ = support::topic::append_unsynced(&old, 7);
        let _ = old.sync();
        let _ = old.close();
        drop(old);
        assert_eq!(new.last_position(), seen);
        if synced_before {
            assert_eq!(seen, before.last().copied(), "synced entries are seen");
        }
        // Unsynced entries may still sit in the stale owner's buffer: the new owner sees a
        // prefix of them.
        let before: Vec<Position> = before.into_iter().filter(|&p| Some(p) <= seen).collect();
        for &p in &before {
            new.read(p)
                .expect("an entry the new owner saw stays readable");
        }
        let after = append_n(&new, 3);
        new.sync().unwrap();
        new.close().unwrap();
        drop(new);
        let later = reopen(&disk, 1_000);
        assert_eq!(later.last_position(), after.last().copied());
        for &p in before.iter().chain(&after) {
            later.read(p).expect("readable after a reopen");
        }
        drop(later);
        let crashed = support::topic::reopen(&disk.durable_image(), 1_000);
        assert_eq!(crashed.last_position(), after.last().copied());
    }
}

/// Exchanging two cursor records (a hand edit, a restore from the wrong backup) must not give
/// a cursor the other one's state: the record is refused as corruption. (Cursors on cursor
/// ledgers, whose record names their state; a cursor the journal holds is recovered from the
/// journal, whose state binds its name.)
#[test]
fn swapped_cursor_records_are_refused_as_corruption() {
    use ackstore::internals::meta::{FileMetaStore, MetaStore};
    // Cursors `ahead` and `behind` of the committed sample.
    let disk = support::samples::ledger_sample("cursor-ledger-ahead-behind").disk();
    let meta = FileMetaStore::new(Arc::new(disk.clone()));
    let (va, a) = meta.get("cursor-0").unwrap().unwrap();
    let (vb, b) = meta.get("cursor-1").unwrap().unwrap();
    meta.put("cursor-0", Some(va), &b).unwrap();
    meta.put("cursor-1", Some(vb), &a).unwrap();
    let topic = reopen(&disk, PER_LEDGER);
    for name in ["ahead", "behind"] {
        match topic.open_cursor(name, at(InitialPosition::Earliest, false)) {
            Err(Error::Corrupted {
                place: ackstore::CorruptionPlace::Record(record),
                ..
            }) => assert!(record.starts_with("cursor-")),
            Err(e) => panic!("{name}: {e}"),
            Ok(c) => panic!(
                "{name} opened with mark-delete {:?}",
                c.mark_delete_position().unwrap()
            ),
        }
    }
    // Trimming reads closed cursors' records too: it refuses rather than trim by a record
    // that is not the cursor's.
    assert!(matches!(
        topic.trim_consumed(),
        Err(Error::Corrupted {
            place: ackstore::CorruptionPlace::Record(_),
            ..
        })
    ));
}

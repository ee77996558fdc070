//! Batch-index acks (PIP-54): messages acknowledged one by one inside batched entries, against
//! a model; the entry is acknowledged whole with its last message; reads report the
//! acknowledged messages; seek by index into a batch; the consumer filter at message level.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};

use ackstore::Position;
use ackstore::{
    AppendMeta, Cursor, Error, InitialPosition, ManagedLedger, NonDurableOptions, ReceivedFilter,
    SubscriptionType,
};
use support::topic::{
    at, mem_hosted, mem_topic, on_each_backend_and_host, on_each_host, reopen, reopen_hosted,
};
use support::workload::{Rng, seed_from_env};

/// Appends one entry per batch size and syncs them (readers see synced entries only); returns
/// the positions and sizes.
fn append_batches(topic: &ManagedLedger, sizes: &[u32]) -> Vec<(Position, u32)> {
    let entries = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let meta = AppendMeta {
                num_messages: n,
                timestamp: 1000 + i as u64,
            };
            (topic.append_with(b"batch", meta).unwrap(), n)
        })
        .collect();
    topic.sync().unwrap();
    entries
}

fn earliest(topic: &ManagedLedger) -> Cursor {
    topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap()
}

/// The model: acknowledged messages per entry; an entry is acknowledged once all are.
#[derive(Default)]
struct Model {
    acked: BTreeMap<Position, BTreeSet<u32>>,
}

impl Model {
    fn entry_acked(&self, pos: Position, size: u32) -> bool {
        self.acked
            .get(&pos)
            .is_some_and(|s| s.len() == size as usize)
    }
    fn partial(&self, pos: Position, size: u32) -> Option<BTreeSet<u32>> {
        self.acked
            .get(&pos)
            .filter(|s| !s.is_empty() && s.len() < size as usize)
            .cloned()
    }
}

fn check_against_model(c: &Cursor, entries: &[(Position, u32)], model: &Model, what: &str) {
    let mut mark = None;
    for &(pos, size) in entries {
        if !model.entry_acked(pos, size) {
            break;
        }
        mark = Some(pos);
    }
    assert_eq!(c.mark_delete_position().unwrap(), mark, "{what}");
    for &(pos, size) in entries {
        assert_eq!(
            c.is_acked(pos).unwrap(),
            model.entry_acked(pos, size),
            "{what}: {pos}"
        );
        for i in 0..size {
            let want = model.acked.get(&pos).is_some_and(|s| s.contains(&i));
            assert_eq!(
                c.is_batch_index_acked(pos, i).unwrap(),
                want,
                "{what}: {pos}#{i}"
            );
        }
    }
    // A full read from mark-delete delivers every entry not acknowledged whole, each with
    // exactly its acknowledged messages.
    c.rewind().unwrap();
    let read = c.read_entries(entries.len() + 1).unwrap();
    let want: Vec<_> = entries
        .iter()
        .filter(|&&(p, n)| !model.entry_acked(p, n))
        .map(|&(p, n)| (p, model.partial(p, n)))
        .collect();
    let got: Vec<_> = read
        .iter()
        .map(|e| {
            (
                e.position,
                e.acked_batch_indexes
                    .as_ref()
                    .map(|b| b.iter().collect::<BTreeSet<u32>>()),
            )
        })
        .collect();
    assert_eq!(got, want, "{what}");
    let partial = want.iter().filter(|(_, p)| p.is_some()).count() as u64;
    assert_eq!(c.stats().unwrap().partial_entries, partial, "{what}");
}

#[test]
fn batch_acks_in_random_order_over_mixed_batch_sizes_agree_with_the_model() {
    let seed = seed_from_env("BATCH_ACK_SEED");
    eprintln!("BATCH_ACK_SEED={seed}");
    on_each_backend_and_host(6, |topic| {
        let mut rng = Rng::new(seed);
        let sizes: Vec<u32> = (0..30).map(|_| 1 + rng.below(12) as u32).collect();
        let entries = append_batches(&topic, &sizes);
        let durable = earliest(&topic);
        let reader = topic
            .open_non_durable_cursor(InitialPosition::Earliest, NonDurableOptions::default())
            .unwrap();
        let mut messages: Vec<(Position, u32, u32)> = entries
            .iter()
            .flat_map(|&(p, n)| (0..n).map(move |i| (p, i, n)))
            .collect();
        // Shuffle, then ack in that order (some twice).
        for i in (1..messages.len()).rev() {
            messages.swap(i, rng.index(i + 1));
        }
        let mut model = Model::default();
        for (step, &(pos, i, n)) in messages.iter().enumerate() {
            let fresh = !model.entry_acked(pos, n)
                && !model.acked.get(&pos).is_some_and(|s| s.contains(&i));
            for c in [&durable, &reader] {
                assert_eq!(c.ack_batch_index(pos, i, n).unwrap(), fresh, "step {step}");
                assert!(
                    !c.ack_batch_index(pos, i, n).unwrap(),
                    "a repeat changes nothing"
                );
            }
            model.acked.entry(pos).or_default().insert(i);
            if step % 37 == 0 {
                check_against_model(&durable, &entries, &model, &format!("durable, step {step}"));
                check_against_model(&reader, &entries, &model, &format!("reader, step {step}"));
            }
        }
        assert_eq!(durable.backlog().unwrap(), 0);
        assert_eq!(
            durable.mark_delete_position().unwrap(),
            entries.last().map(|e| e.0)
        );
        assert_eq!(durable.stats().unwrap().partial_entries, 0);
        topic.close().unwrap();
    });
}

#[test]
fn whole_entry_and_cumulative_acks_override_batch_indexes() {
    let (_disk, topic) = mem_topic(10);
    let e = append_batches(&topic, &[4, 4, 4, 4]);
    let c = earliest(&topic);
    c.ack_batch_index(e[1].0, 0, 4).unwrap();
    c.ack_batch_index(e[2].0, 3, 4).unwrap();
    c.ack_batch_index(e[3].0, 1, 4).unwrap();
    assert_eq!(c.stats().unwrap().partial_entries, 3);
    assert!(c.stats().unwrap().batch_index_bytes > 0);
    // A whole-entry ack of a partial entry acknowledges all its messages.
    assert!(c.ack(e[1].0).unwrap());
    assert!(c.is_batch_index_acked(e[1].0, 2).unwrap());
    assert!(!c.ack_batch_index(e[1].0, 2, 4).unwrap());
    // A cumulative ack drops the partial state below it.
    c.ack_cumulative(e[2].0).unwrap();
    assert_eq!(c.stats().unwrap().partial_entries, 1);
    let read = c.read_entries(10).unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!(
        read[0]
            .acked_batch_indexes
            .as_ref()
            .map(|b| b.iter().collect::<Vec<_>>()),
        Some(vec![1])
    );
    // A full seek clears batch indexes as it clears acks.
    c.seek(e[0].0).unwrap();
    assert_eq!(c.stats().unwrap().partial_entries, 0);
    assert!(
        c.read_entries(10)
            .unwrap()
            .iter()
            .all(|e| e.acked_batch_indexes.is_none())
    );
}

#[test]
fn batch_acks_refuse_bad_arguments_and_change_nothing() {
    let (_disk, topic) = mem_topic(10);
    let e = append_batches(&topic, &[4, 4]);
    let c = earliest(&topic);
    assert!(matches!(
        c.ack_batch_index(e[0].0, 4, 4),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        c.ack_batch_index(e[0].0, 0, 0),
        Err(Error::InvalidArgument { .. })
    ));
    c.ack_batch_index(e[0].0, 0, 4).unwrap();
    assert!(matches!(
        c.ack_batch_index(e[0].0, 1, 5),
        Err(Error::InvalidArgument { .. })
    ));
    let missing = Position::new(e[1].0.ledger_id, e[1].0.entry_id + 1);
    assert!(matches!(
        c.ack_batch_index(missing, 0, 2),
        Err(Error::NoSuchEntry(p)) if p == missing
    ));
    assert!(!c.is_batch_index_acked(e[0].0, 1).unwrap());
    assert_eq!(c.stats().unwrap().partial_entries, 1);
    // A batch of one: its only message acknowledges the entry.
    let one = append_batches(&topic, &[1]);
    assert!(c.ack_batch_index(one[0].0, 0, 1).unwrap());
    assert!(c.is_acked(one[0].0).unwrap());
}

/// Seek by index to every message of every batch: the entry holding it is read next, with the
/// messages before it acknowledged, so the first message a consumer processes is the one
/// sought.
#[test]
fn seek_by_index_into_every_message_of_a_batch_acks_the_messages_before_it() {
    on_each_backend_and_host(2, |topic| {
        let sizes = [3, 1, 5, 4];
        let entries = append_batches(&topic, &sizes);
        let c = earliest(&topic);
        let mut first_index = 0u64;
        for &(pos, n) in &entries {
            for k in 0..n {
                let index = first_index + u64::from(k);
                c.seek_by_index(index).unwrap();
                let read = c.read_entries(1).unwrap();
                assert_eq!(read[0].position, pos, "index {index}");
                let acked: Vec<u32> = read[0]
                    .acked_batch_indexes
                    .as_ref()
                    .map(|b| b.iter().collect())
                    .unwrap_or_default();
                assert_eq!(acked, (0..k).collect::<Vec<_>>(), "index {index}");
                let next_message = (0..n).find(|i| !acked.contains(i)).unwrap();
                assert_eq!(read[0].first_index() + u64::from(next_message), index);
            }
            first_index += u64::from(n);
        }
        // Past the end: the next entry appended, with nothing acknowledged in it.
        c.seek_by_index(first_index).unwrap();
        assert!(c.read_entries(1).unwrap().is_empty());
        topic.close().unwrap();
    });
}

/// Completed entries are persisted like acks, and so are the messages of entries still
/// partial: after a restart such an entry is delivered with them marked acknowledged, so only
/// its other messages are dispatched again.
#[test]
fn completed_batches_survive_a_reopen_and_partial_ones_survive_too() {
    on_each_host(completed_and_partial_batches_survive_a_reopen);
}

fn completed_and_partial_batches_survive_a_reopen(host: support::topic::Host) {
    let (disk, topic) = mem_hosted(host, 10);
    let e = append_batches(&topic, &[2, 3, 2]);
    topic.sync().unwrap();
    let c = earliest(&topic);
    c.ack_batch_index(e[1].0, 0, 3).unwrap();
    c.ack_batch_index(e[1].0, 2, 3).unwrap();
    c.ack_batch_index(e[1].0, 1, 3).unwrap();
    c.ack_batch_index(e[2].0, 1, 2).unwrap();
    c.flush().unwrap();
    drop(c);
    std::mem::forget(topic);
    let topic = reopen_hosted(host, &disk.durable_image(), 10);
    let c = earliest(&topic);
    assert!(c.is_acked(e[1].0).unwrap());
    let read = c.read_entries(10).unwrap();
    let got: Vec<_> = read
        .iter()
        .map(|x| {
            let acked = x.acked_batch_indexes.as_ref();
            (x.position, acked.map(|b| b.iter().collect::<Vec<u32>>()))
        })
        .collect();
    assert_eq!(got, vec![(e[0].0, None), (e[2].0, Some(vec![1]))]);
    assert!(c.is_batch_index_acked(e[2].0, 1).unwrap());
    assert!(!c.is_batch_index_acked(e[2].0, 0).unwrap());
}

/// The consumer filter at message level: after a redelivery of a partly received batch, the
/// messages already received are dropped and the rest admitted.
#[test]
fn the_received_filter_works_at_message_level() {
    let (_disk, topic) = mem_topic(10);
    let e = append_batches(&topic, &[4, 4]);
    let c = earliest(&topic);
    let mut filter = ReceivedFilter::new(SubscriptionType::Failover, true).unwrap();
    let (epoch, read) = c.read_entries_at_epoch(1).unwrap();
    // The consumer received messages 0..=1 of the first batch, acked message 0, then its
    // connection dropped (the rest of the batch never arrived).
    assert!(filter.admit_message(read[0].position, 0, epoch));
    assert!(filter.admit_message(read[0].position, 1, epoch));
    c.ack_batch_index(e[0].0, 0, 4).unwrap();
    // The topic moves to a new owner: everything after mark-delete is sent again, same epoch.
    let topic2_cursor = topic
        .open_non_durable_cursor(
            InitialPosition::At(e[0].0),
            NonDurableOptions {
                inclusive: true,
                name: "redelivery".into(),
            },
        )
        .unwrap();
    topic2_cursor.ack_batch_index(e[0].0, 0, 4).unwrap();
    let redelivered = topic2_cursor.read_entries(10).unwrap();
    let mut processed = Vec::new();
    for entry in &redelivered {
        for i in 0..entry.num_messages {
            let acked = entry
                .acked_batch_indexes
                .as_ref()
                .is_some_and(|b| b.contains(i));
            if !acked && filter.admit_message(entry.position, i, epoch) {
                processed.push((entry.position, i));
            }
        }
    }
    let want: Vec<_> = (2..4)
        .map(|i| (e[0].0, i))
        .chain((0..4).map(|i| (e[1].0, i)))
        .collect();
    assert_eq!(processed, want);
    assert_eq!(filter.dropped(), 1, "message 1 was received before");
    assert_eq!(filter.largest_received_message(), Some((e[1].0, 3)));
    // A whole entry admitted counts as all of its messages.
    let mut whole = ReceivedFilter::new(SubscriptionType::Exclusive, true).unwrap();
    assert!(whole.admit(e[0].0, 0));
    assert!(!whole.admit_message(e[0].0, 3, 0));
    assert!(whole.admit_message(e[1].0, 0, 0));
}

/// A power cut at every storage step of a flush made while entries are partially acknowledged
/// (and every byte of the unsynced tail kept): the recovered cursor never holds an ack that was
/// not made (a partial entry is never an entry acknowledged, and holds no message not acked),
/// and once the flush returned `Ok` it holds every entry completed by batch-index acks before
/// it, and every partial entry.
#[test]
fn a_power_cut_during_a_flush_with_batch_state_never_invents_an_ack() {
    on_each_host(power_cut_during_a_flush_never_invents_an_ack);
}

fn power_cut_during_a_flush_never_invents_an_ack(host: support::topic::Host) {
    let clean = support::crash::cut_everywhere_after(
        support::crash::Points { from: 1, step: 1 },
        |disk| {
            let topic = reopen_hosted(host, disk, 10);
            let e = append_batches(&topic, &[3, 2, 4, 2, 5]);
            topic.sync().unwrap();
            let c = earliest(&topic);
            c.ack(e[3].0).unwrap();
            c.flush().unwrap();
            (topic, c, e)
        },
        |_, (topic, c, e)| {
            // Entry 1 completed by its messages, entries 0 and 4 left partial.
            c.ack_batch_index(e[1].0, 1, 2).unwrap();
            c.ack_batch_index(e[1].0, 0, 2).unwrap();
            c.ack_batch_index(e[0].0, 2, 3).unwrap();
            c.ack_batch_index(e[4].0, 0, 5).unwrap();
            let flushed = c.flush();
            (topic, c, e, flushed)
        },
        |disk, support::crash::Cut { n, .. }, (topic, c, e, flushed)| {
            drop(c);
            std::mem::forget(topic);
            let tail = support::crash::unsynced_tail(disk);
            let torn = (0..=tail).map(|k| (k, support::crash::torn_image(disk, |u| u.min(k))));
            for (keep, image) in std::iter::once((0, disk.durable_image())).chain(torn) {
                let what = format!("cut at {n}, {keep} tail bytes kept");
                let topic = reopen_hosted(host, &image, 10);
                let c = earliest(&topic);
                assert_eq!(c.mark_delete_position().unwrap(), None, "{what}");
                assert!(c.is_acked(e[3].0).unwrap(), "{what}: flushed before");
                for i in [0, 2, 4] {
                    assert!(!c.is_acked(e[i].0).unwrap(), "{what}: entry {i} invented");
                }
                let acked = c.is_acked(e[1].0).unwrap();
                if flushed.is_ok() {
                    assert!(acked, "{what}: flushed, then lost");
                }
                let partial = c.stats().unwrap().partial_entries;
                if flushed.is_ok() {
                    assert_eq!(partial, 2, "{what}: flushed partial entries lost");
                }
                let read = c.read_entries(10).unwrap();
                for x in &read {
                    let acked: Vec<u32> = x
                        .acked_batch_indexes
                        .as_ref()
                        .map(|b| b.iter().collect())
                        .unwrap_or_default();
                    let allowed: &[u32] = match x.position {
                        p if p == e[0].0 => &[2],
                        p if p == e[1].0 => &[0, 1],
                        p if p == e[4].0 => &[0],
                        _ => &[],
                    };
                    assert!(
                        acked.iter().all(|i| allowed.contains(i)),
                        "{what}: {} holds {acked:?}",
                        x.position
                    );
                }
                topic.close().unwrap();
            }
        },
    );
    assert!(clean.result.3.is_ok());
    assert!(clean.total >= 3, "the flush took {} writes", clean.total);
}

/// Four threads ack the messages of the same batches, each a different share, on a durable
/// cursor and a reader: every message changes the state exactly once across threads, every
/// entry ends acknowledged, mark-delete reaches the last entry, and no partial state is left.
#[test]
fn threads_acking_messages_of_the_same_batches_complete_each_entry_once() {
    const THREADS: u32 = 4;
    on_each_host(threads_complete_each_entry_once::<THREADS>);
}

fn threads_complete_each_entry_once<const THREADS: u32>(host: support::topic::Host) {
    let (_disk, topic) = mem_hosted(host, 16);
    let sizes: Vec<u32> = (0..64).map(|i| 2 + (i % 9)).collect();
    let entries = append_batches(&topic, &sizes);
    let durable = earliest(&topic);
    let reader = topic
        .open_non_durable_cursor(InitialPosition::Earliest, NonDurableOptions::default())
        .unwrap();
    for c in [&durable, &reader] {
        let changed: u64 = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let entries = &entries;
                    s.spawn(move || {
                        let mut changed = 0u64;
                        // Every thread acks every message once, in its own order; only the
                        // first ack of each message may report a change.
                        for k in 0..entries.len() {
                            let (pos, n) = entries[(k * 7 + t as usize * 13) % entries.len()];
                            for i in 0..n {
                                let i = (i + t) % n;
                                changed += u64::from(c.ack_batch_index(pos, i, n).unwrap());
                            }
                        }
                        changed
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        let messages: u64 = sizes.iter().map(|&n| u64::from(n)).sum();
        // An entry completes only with its last unacknowledged message, so the first ack of
        // every message, whichever thread makes it, is the one change it reports.
        assert_eq!(changed, messages);
        assert_eq!(
            c.mark_delete_position().unwrap(),
            entries.last().map(|e| e.0)
        );
        assert_eq!(c.backlog().unwrap(), 0);
        assert_eq!(c.stats().unwrap().partial_entries, 0);
        assert_eq!(c.stats().unwrap().batch_index_bytes, 0);
    }
}

/// A batch-index ack declaring more than `MAX_BATCH_SIZE` messages is refused, whatever the
/// entry's state, and changes nothing; one at the maximum is persisted in bytes that follow the
/// messages acknowledged (runs of them), not the declared size, and recovered.
#[test]
fn a_batch_size_above_the_maximum_is_refused_and_one_at_it_costs_what_was_acked() {
    use ackstore::MAX_BATCH_SIZE;
    use ackstore::internals::format::cursor::encode_batch_entry;
    let (disk, topic) = mem_topic(10);
    let e = append_batches(&topic, &[MAX_BATCH_SIZE, MAX_BATCH_SIZE + 1, u32::MAX, 2]);
    topic.sync().unwrap();
    let c = earliest(&topic);
    c.ack(e[3].0).unwrap();
    for (pos, size) in [
        (e[1].0, MAX_BATCH_SIZE + 1),
        (e[2].0, u32::MAX),
        (e[0].0, u32::MAX),
        // An entry acknowledged whole: refused all the same, not `Ok(false)`.
        (e[3].0, u32::MAX),
    ] {
        for index in [0, MAX_BATCH_SIZE, size - 1] {
            assert!(
                matches!(
                    c.ack_batch_index(pos, index, size),
                    Err(Error::InvalidArgument { .. })
                ),
                "{pos} index {index} of {size}"
            );
        }
    }
    let stats = c.stats().unwrap();
    assert_eq!((stats.partial_entries, stats.batch_index_bytes), (0, 0));
    assert!(c.batch_index_partitions().unwrap().is_empty());
    assert!(!c.is_batch_index_acked(e[1].0, 0).unwrap());

    // At the maximum: three messages, far apart.
    let acked = [0, 7, MAX_BATCH_SIZE - 1];
    for index in acked {
        assert!(c.ack_batch_index(e[0].0, index, MAX_BATCH_SIZE).unwrap());
    }
    let partitions = c.batch_index_partitions().unwrap();
    assert_eq!(partitions.len(), 1);
    let bytes = encode_batch_entry(&partitions[0]).unwrap();
    // Frame 8 + fixed 20 + CRC 4; the record: head 1, size 3 (a varint of 2^20), runs
    // [1, 6, 1, 2^20 - 9, 1]: count 1, lengths 1 + 1 + 1 + 3 + 1 (a 131,072-byte bitmap
    // otherwise).
    assert_eq!(bytes.len(), 32 + 1 + 3 + 1 + 7);
    // Memory: a small bitmap, not the declared size.
    assert!(c.stats().unwrap().batch_index_bytes < 1024);
    let journal_bytes = || topic.journal_stats().unwrap().bytes_written;
    let before = journal_bytes();
    c.flush().unwrap();
    let appended = journal_bytes() - before;
    assert!(appended > 0 && appended < 4096, "{appended} bytes");
    drop(c);
    std::mem::forget(topic);
    let topic = reopen(&disk.durable_image(), 10);
    let c = earliest(&topic);
    let read = c.read_entries(1).unwrap();
    assert_eq!(read[0].position, e[0].0);
    let got: Vec<u32> = read[0]
        .acked_batch_indexes
        .as_ref()
        .unwrap()
        .iter()
        .collect();
    assert_eq!(got, acked);
}

//! The cursor operations a dispatcher uses, each against Pulsar's `ManagedCursor` behaviour
//! and a model: read-position-only seek, skip, many acks under one lock, mark-delete with
//! properties (atomic, also across power cuts), property removal, backlog between positions,
//! first unacknowledged entry, last acknowledged range, the read that waits for entries, and what readers see (synced entries only).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use ackstore::{Cursor, Error, InitialPosition, ManagedLedger, Position};
use support::crash::{Cut, Points, cut_everywhere_after, torn_image, unsynced_tail};
use support::topic::{append_n, at, mem_topic, on_each_backend, read_positions, reopen};
use support::workload::{Rng, seed_from_env};

fn earliest(topic: &ManagedLedger, name: &str) -> Cursor {
    topic
        .open_cursor(name, at(InitialPosition::Earliest, false))
        .unwrap()
}

#[test]
fn seek_read_position_keeps_acks_mark_delete_and_epoch() {
    on_each_backend(4, |topic| {
        let p = append_n(&topic, 10);
        let c = earliest(&topic, "sub");
        assert_eq!(read_positions(&c, 10), p);
        c.ack_cumulative(p[1]).unwrap();
        c.ack(p[4]).unwrap();
        c.ack(p[5]).unwrap();
        let epoch = c.epoch().unwrap();
        c.seek_read_position(p[3]).unwrap();
        assert_eq!(read_positions(&c, 3), vec![p[3], p[6], p[7]]);
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[1]));
        assert_eq!(c.acked_ranges().unwrap(), vec![(p[4], p[5])]);
        assert_eq!(
            c.epoch().unwrap(),
            epoch,
            "a read-position move is no reset"
        );
        // Before mark-delete: reads from the first entry after it (Pulsar moves the read
        // position to mark-delete + 1).
        c.seek_read_position(p[0]).unwrap();
        assert_eq!(c.read_position().unwrap(), p[2]);
        assert_eq!(
            read_positions(&c, 10),
            vec![p[2], p[3], p[6], p[7], p[8], p[9]]
        );
        // Past the end: the next entry appended.
        c.seek_read_position(Position::new(u64::MAX, 0)).unwrap();
        assert!(c.read_entries(5).unwrap().is_empty());
        // Nothing is persisted by it: a reopen reads from mark-delete.
        c.close().unwrap();
        let c = earliest(&topic, "sub");
        assert_eq!(read_positions(&c, 2), vec![p[2], p[3]]);
        topic.close().unwrap();
    });
}

#[test]
fn skip_entries_steps_over_acked_entries_and_persists_like_an_ack() {
    let (disk, topic) = mem_topic(4);
    let p = append_n(&topic, 10);
    topic.sync().unwrap();
    let c = earliest(&topic, "sub");
    c.ack(p[2]).unwrap();
    c.ack(p[3]).unwrap();
    c.ack(p[7]).unwrap();
    assert_eq!(c.skip_entries(0).unwrap(), 0);
    assert_eq!(c.mark_delete_position().unwrap(), None);
    // Skips p0, p1 and p4: the acknowledged p2 and p3 do not count.
    assert_eq!(c.skip_entries(3).unwrap(), 3);
    assert_eq!(c.mark_delete_position().unwrap(), Some(p[4]));
    assert_eq!(c.acked_ranges().unwrap(), vec![(p[7], p[7])]);
    assert_eq!(read_positions(&c, 1), vec![p[5]]);
    // p5 and p6 are skipped, then mark-delete absorbs the acknowledged p7.
    assert_eq!(c.skip_entries(2).unwrap(), 2);
    assert_eq!(c.mark_delete_position().unwrap(), Some(p[7]));
    c.flush().unwrap();
    drop(c);
    std::mem::forget(topic);
    let topic = reopen(&disk.durable_image(), 4);
    let c = earliest(&topic, "sub");
    assert_eq!(c.mark_delete_position().unwrap(), Some(p[7]));
    // Fewer remain than asked.
    assert_eq!(c.skip_entries(100).unwrap(), 2);
    assert_eq!(c.backlog().unwrap(), 0);
    assert!(c.read_entries(10).unwrap().is_empty());
}

#[test]
fn ack_many_acks_all_or_nothing() {
    on_each_backend(4, |topic| {
        let p = append_n(&topic, 10);
        let c = earliest(&topic, "sub");
        c.ack_cumulative(p[0]).unwrap();
        assert_eq!(c.ack_many(&[p[0], p[3], p[5], p[5], p[1]]).unwrap(), 3);
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[1]));
        assert_eq!(c.acked_ranges().unwrap(), vec![(p[3], p[3]), (p[5], p[5])]);
        let missing = Position::new(p[9].ledger_id, p[9].entry_id + 5);
        assert!(matches!(
            c.ack_many(&[p[6], missing, p[7]]),
            Err(Error::NoSuchEntry(m)) if m == missing
        ));
        assert!(
            !c.is_acked(p[6]).unwrap(),
            "nothing of a refused call is applied"
        );
        assert_eq!(c.backlog().unwrap(), 6);
        topic.close().unwrap();
    });
}

/// Threads ack disjoint batches of `K` entries with `ack_many` while another watches the
/// backlog: it only ever moves by whole batches, so no one sees half a call.
#[test]
fn ack_many_is_seen_whole_by_other_threads() {
    const K: usize = 5;
    let (_disk, topic) = mem_topic(50);
    let p = append_n(&topic, 400);
    let c = earliest(&topic, "sub");
    let total = p.len() as u64;
    thread::scope(|s| {
        for t in 0..2 {
            let c = c.clone();
            let mine: Vec<Position> = p.iter().copied().skip(t).step_by(2).collect();
            s.spawn(move || {
                for batch in mine.chunks(K) {
                    assert_eq!(c.ack_many(batch).unwrap(), K as u64);
                }
            });
        }
        let c = c.clone();
        s.spawn(move || {
            loop {
                let backlog = c.backlog().unwrap();
                assert_eq!((total - backlog) % K as u64, 0, "a batch seen in part");
                if backlog == 0 {
                    break;
                }
            }
        });
    });
    assert_eq!(c.mark_delete_position().unwrap(), p.last().copied());
}

#[test]
fn mark_delete_with_properties_replaces_both_or_neither() {
    on_each_backend(4, |topic| {
        let p = append_n(&topic, 10);
        let c = earliest(&topic, "sub");
        c.set_property("old", 1).unwrap();
        let props = BTreeMap::from([("a".to_owned(), 2), ("b".to_owned(), -3)]);
        assert!(c.mark_delete_with_properties(p[3], props.clone()).unwrap());
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[3]));
        assert_eq!(c.properties().unwrap(), props);
        assert!(!c.mark_delete_with_properties(p[3], props.clone()).unwrap());
        // The same position with other properties replaces them only.
        assert!(
            c.mark_delete_with_properties(p[3], BTreeMap::new())
                .unwrap()
        );
        assert!(c.properties().unwrap().is_empty());
        // Refused calls change neither.
        c.set_property("kept", 9).unwrap();
        let kept = c.properties().unwrap();
        let long = BTreeMap::from([("x".repeat(5000), 1)]);
        assert!(matches!(
            c.mark_delete_with_properties(p[6], long),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            c.mark_delete_with_properties(p[1], props.clone()),
            Err(Error::InvalidArgument { .. })
        ));
        let beyond = Position::new(p[9].ledger_id, p[9].entry_id + 1);
        assert!(matches!(
            c.mark_delete_with_properties(beyond, props.clone()),
            Err(Error::NoSuchEntry(_))
        ));
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[3]));
        assert_eq!(c.properties().unwrap(), kept);
        c.mark_delete_with_properties(p[7], props.clone()).unwrap();
        c.close().unwrap();
        let c = earliest(&topic, "sub");
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[7]));
        assert_eq!(c.properties().unwrap(), props);
        topic.close().unwrap();
    });
}

/// A power cut at every storage step of the flush after `mark_delete_with_properties`, and
/// every byte of the unsynced tail kept: the reopened cursor has the old mark-delete with the
/// old properties or the new with the new, never a mix; after `Ok` the new.
#[test]
fn mark_delete_with_properties_survives_a_power_cut_whole_or_not_at_all() {
    let new_props = BTreeMap::from([("ledger".to_owned(), 42), ("z".to_owned(), 7)]);
    let old_props = BTreeMap::from([("ledger".to_owned(), 1)]);
    let clean = cut_everywhere_after(
        Points { from: 1, step: 1 },
        |disk| {
            let topic = reopen(disk, 4);
            let p = append_n(&topic, 10);
            topic.sync().unwrap();
            let c = earliest(&topic, "sub");
            c.ack(p[5]).unwrap();
            c.mark_delete_with_properties(p[1], old_props.clone())
                .unwrap();
            c.flush().unwrap();
            (topic, c, p)
        },
        |_, (topic, c, p)| {
            c.mark_delete_with_properties(p[6], new_props.clone())
                .unwrap();
            let flushed = c.flush();
            (topic, c, p, flushed)
        },
        |disk, Cut { n, .. }, (topic, c, p, flushed)| {
            drop(c);
            std::mem::forget(topic);
            let tail = unsynced_tail(disk);
            let images = (0..=tail).map(|keep| (keep, torn_image(disk, |u| u.min(keep))));
            for (keep, image) in std::iter::once((0, disk.durable_image())).chain(images) {
                let what = format!("cut at {n}, {keep} bytes of the unsynced tail kept");
                let topic = reopen(&image, 4);
                let c = earliest(&topic, "sub");
                let state = (c.mark_delete_position().unwrap(), c.properties().unwrap());
                let old = (Some(p[1]), old_props.clone());
                let new = (Some(p[6]), new_props.clone());
                assert!(state == old || state == new, "{what}: {state:?}");
                if flushed.is_ok() {
                    assert_eq!(state, new, "{what}: flushed, then lost");
                }
                topic.close().unwrap();
            }
        },
    );
    assert!(clean.result.3.is_ok());
    assert!(clean.total >= 3, "the flush took {} writes", clean.total);
}

#[test]
fn remove_property_is_persisted_and_removing_nothing_writes_nothing() {
    let (_disk, topic) = mem_topic(4);
    append_n(&topic, 3);
    let c = earliest(&topic, "sub");
    c.set_property("a", 1).unwrap();
    c.set_property("b", 2).unwrap();
    c.close().unwrap();
    let c = earliest(&topic, "sub");
    assert_eq!(c.remove_property("a").unwrap(), Some(1));
    c.close().unwrap();
    let c = earliest(&topic, "sub");
    assert_eq!(
        c.properties().unwrap(),
        BTreeMap::from([("b".to_owned(), 2)])
    );
    let flushes = c.stats().unwrap().flushes;
    assert_eq!(c.remove_property("a").unwrap(), None);
    c.flush().unwrap();
    assert_eq!(
        c.stats().unwrap().flushes,
        flushes,
        "nothing changed, nothing written"
    );
}

/// `has_more_entries`, `entries_in_backlog`, `first_unacked` and `last_acked_range` after random
/// acks, reads and read-position moves, against a model.
#[test]
fn backlog_queries_agree_with_the_model() {
    let seed = seed_from_env("DISPATCHER_SEED");
    eprintln!("DISPATCHER_SEED={seed}");
    on_each_backend(7, |topic| {
        let mut rng = Rng::new(seed);
        let mut p = append_n(&topic, 60);
        let c = earliest(&topic, "sub");
        let mut acked: BTreeSet<Position> = BTreeSet::new();
        let mut read_from = 0usize;
        for step in 0..500 {
            match rng.below(6) {
                0 | 1 => {
                    let q = p[rng.index(p.len())];
                    c.ack(q).unwrap();
                    acked.insert(q);
                }
                2 => {
                    let n = rng.below(8) as usize;
                    let got = read_positions(&c, n);
                    let want: Vec<_> = p[read_from..]
                        .iter()
                        .copied()
                        .filter(|q| !acked.contains(q))
                        .take(n)
                        .collect();
                    assert_eq!(got, want, "step {step}");
                    if let Some(last) = got.last() {
                        read_from = p.iter().position(|q| q == last).unwrap() + 1;
                    }
                }
                3 => {
                    read_from = rng.index(p.len());
                    c.seek_read_position(p[read_from]).unwrap();
                }
                4 => p.extend(append_n(&topic, 1 + rng.below(3))),
                _ => {
                    let (i, j) = (rng.index(p.len()), rng.index(p.len()));
                    let want = p
                        .iter()
                        .filter(|q| **q >= p[i] && **q <= p[j] && !acked.contains(q))
                        .count() as u64;
                    assert_eq!(
                        c.entries_in_backlog(p[i], p[j]).unwrap(),
                        want,
                        "step {step}"
                    );
                }
            }
            let unacked: Vec<_> = p.iter().copied().filter(|q| !acked.contains(q)).collect();
            assert_eq!(c.first_unacked().unwrap(), unacked.first().copied());
            let has_more = p[read_from..].iter().any(|q| !acked.contains(q));
            assert_eq!(c.has_more_entries().unwrap(), has_more, "step {step}");
            // The last range of acks above the first unacknowledged entry, as the model sees it.
            let last_range = unacked.first().and_then(|&first| {
                let above: Vec<_> = acked.iter().copied().filter(|&q| q > first).collect();
                let &hi = above.last()?;
                let mut lo = hi;
                for &q in above.iter().rev().skip(1) {
                    let next = p[p.iter().position(|x| *x == q).unwrap() + 1];
                    if next != lo || q.ledger_id != hi.ledger_id {
                        break;
                    }
                    lo = q;
                }
                Some((lo, hi))
            });
            assert_eq!(c.last_acked_range().unwrap(), last_range, "step {step}");
            if unacked.is_empty() {
                read_from = p.len();
            }
        }
        topic.close().unwrap();
    });
}

#[test]
fn a_waiting_read_is_woken_by_the_sync_that_makes_entries_readable() {
    on_each_backend(4, |topic| {
        let topic = Arc::new(topic);
        append_n(&topic, 2);
        let c = earliest(&topic, "sub");
        let other = earliest(&topic, "other");
        assert_eq!(c.read_entries(10).unwrap().len(), 2);
        assert_eq!(other.read_entries(10).unwrap().len(), 2);
        let got = thread::scope(|s| {
            let reader = s.spawn(|| c.read_entries_or_wait(10, NEVER));
            until_parked(&topic, 1);
            let appended = topic.append(b"late").unwrap();
            assert!(
                !other.has_more_entries().unwrap() && other.read_entries(10).unwrap().is_empty(),
                "an unsynced entry is not readable"
            );
            topic.sync().unwrap();
            (reader.join().unwrap().unwrap(), appended)
        });
        let (entries, appended) = got;
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].position, appended);
        assert_eq!(entries[0].payload, b"late");
        topic.close().unwrap();
    });
}

#[test]
fn readers_stop_at_the_last_synced_entry() {
    let (disk, topic) = mem_topic(3);
    let synced = append_n(&topic, 4);
    let c = earliest(&topic, "sub");
    let unsynced = support::topic::append_unsynced(&topic, 4);
    // The first unsynced entries sit in a ledger a rollover sealed: the seal made them durable.
    let sealed: Vec<Position> = unsynced
        .iter()
        .copied()
        .filter(|p| p.ledger_id == synced[3].ledger_id)
        .collect();
    let mut readable = synced.clone();
    readable.extend(&sealed);
    assert_eq!(topic.last_position(), readable.last().copied());
    assert_eq!(topic.next_index(), readable.len() as u64);
    assert_eq!(topic.find_by_index(readable.len() as u64).unwrap(), None);
    assert_eq!(c.backlog().unwrap(), readable.len() as u64);
    assert_eq!(read_positions(&c, 100), readable);
    assert!(!c.has_more_entries().unwrap());
    let pending = unsynced[sealed.len()];
    assert!(matches!(topic.read(pending), Err(Error::NoSuchEntry(_))));
    assert!(matches!(c.ack(pending), Err(Error::NoSuchEntry(_))));
    let latest = topic
        .open_cursor("latest", at(InitialPosition::Latest, true))
        .unwrap();
    assert_eq!(
        read_positions(&latest, 100),
        vec![*readable.last().unwrap()]
    );
    let reader = topic
        .open_non_durable_cursor(
            InitialPosition::Earliest,
            ackstore::NonDurableOptions::default(),
        )
        .unwrap();
    assert_eq!(read_positions(&reader, 100), readable);
    // A power cut now takes only entries no reader received.
    let image = disk.durable_image();
    let after =
        ackstore::ManagedLedger::open_with_storage(Arc::new(image), support::topic::config(3))
            .unwrap();
    assert_eq!(after.last_position(), readable.last().copied());
    after.close().unwrap();
    // The sync makes the rest readable to every reader.
    topic.sync().unwrap();
    assert_eq!(read_positions(&c, 100), unsynced[sealed.len()..].to_vec());
    assert_eq!(
        read_positions(&latest, 100),
        unsynced[sealed.len()..].to_vec()
    );
    assert_eq!(
        read_positions(&reader, 100),
        unsynced[sealed.len()..].to_vec()
    );
    assert_eq!(topic.last_position(), unsynced.last().copied());
    assert_eq!(topic.next_index(), 8);
}

#[test]
fn read_unsynced_makes_appends_readable_at_once() {
    let cfg = ackstore::LedgerConfig {
        read_unsynced: true,
        ..support::topic::config(3)
    };
    let topic =
        ManagedLedger::open_with_storage(Arc::new(ackstore::MemStorage::new()), cfg).unwrap();
    let c = earliest(&topic, "sub");
    let got = thread::scope(|s| {
        let reader = s.spawn(|| c.read_entries_or_wait(10, NEVER));
        until_parked(&topic, 1);
        let p = topic.append(b"at once").unwrap();
        (reader.join().unwrap().unwrap(), p)
    });
    assert_eq!(got.0.len(), 1);
    assert_eq!(got.0[0].position, got.1);
    assert_eq!(topic.last_position(), Some(got.1));
}

#[test]
fn a_waiting_read_returns_empty_after_its_timeout() {
    let (_disk, topic) = mem_topic(4);
    let p = append_n(&topic, 3);
    let c = earliest(&topic, "sub");
    c.ack(p[2]).unwrap();
    assert_eq!(
        read_positions(&c, 10),
        vec![p[0], p[1]],
        "nothing is left to read"
    );
    assert!(
        c.read_entries_or_wait(10, Duration::from_millis(30))
            .unwrap()
            .is_empty()
    );
    assert!(
        c.read_entries_or_wait(0, Duration::from_secs(600))
            .unwrap()
            .is_empty()
    );
    // With entries there, it returns them without waiting.
    c.seek_read_position(p[0]).unwrap();
    let entries = c
        .read_entries_or_wait(10, Duration::from_secs(600))
        .unwrap();
    assert_eq!(
        entries.iter().map(|e| e.position).collect::<Vec<_>>(),
        vec![p[0], p[1]]
    );
}

#[test]
fn closing_the_topic_wakes_a_waiting_read_with_closed() {
    let (_disk, topic) = mem_topic(4);
    let c = earliest(&topic, "sub");
    let result = thread::scope(|s| {
        let reader = s.spawn(|| c.read_entries_or_wait(10, Duration::from_secs(600)));
        thread::sleep(Duration::from_millis(20));
        topic.close().unwrap();
        reader.join().unwrap()
    });
    assert!(matches!(result, Err(Error::Closed)), "{result:?}");
}

/// Returns once `n` reads of `topic` are parked in `read_entries_or_wait`.
fn until_parked(topic: &ManagedLedger, n: usize) {
    while topic.parked_reads() < n {
        thread::yield_now();
    }
}

/// A read that waits with this timeout must be woken: the test would wait it out, then fail.
const NEVER: Duration = Duration::from_secs(60);

#[test]
fn every_move_of_the_read_position_wakes_a_parked_read() {
    type Move = fn(&Cursor, &[Position]) -> ackstore::Result<()>;
    let moves: [(&str, Move); 6] = [
        ("rewind", |c, _| c.rewind()),
        ("seek", |c, p| c.seek(p[1])),
        ("seek_by_index", |c, _| c.seek_by_index(1)),
        ("seek_by_timestamp", |c, _| c.seek_by_timestamp(1000)),
        ("seek_read_position", |c, p| c.seek_read_position(p[1])),
        ("seek to before the first entry", |c, _| {
            c.seek(Position::new(0, 0))
        }),
    ];
    for (what, reposition) in moves {
        let (_disk, topic) = mem_topic(2);
        let p = append_n(&topic, 3);
        topic.sync().unwrap();
        let c = earliest(&topic, "sub");
        assert_eq!(read_positions(&c, 10), p, "{what}");
        let expected = if what == "rewind" || what.contains("before") {
            p.clone()
        } else {
            p[1..].to_vec()
        };
        let got = thread::scope(|s| {
            let reader = s.spawn(|| c.read_entries_or_wait(10, NEVER));
            until_parked(&topic, 1);
            reposition(&c, &p).unwrap();
            reader.join().unwrap()
        });
        let got: Vec<Position> = got.unwrap().into_iter().map(|e| e.position).collect();
        assert_eq!(got, expected, "{what} must wake the parked read");
    }
}

#[test]
fn a_parked_read_of_a_deleted_or_closed_cursor_ends_with_closed() {
    for delete in [true, false] {
        let (_disk, topic) = mem_topic(4);
        append_n(&topic, 2);
        topic.sync().unwrap();
        let c = earliest(&topic, "sub");
        assert_eq!(c.read_entries(10).unwrap().len(), 2);
        let result = thread::scope(|s| {
            let reader = s.spawn(|| c.read_entries_or_wait(10, NEVER));
            until_parked(&topic, 1);
            if delete {
                topic.delete_cursor("sub").unwrap();
            } else {
                c.close().unwrap();
            }
            reader.join().unwrap()
        });
        assert!(
            matches!(result, Err(Error::Closed)),
            "delete: {delete}: {result:?}"
        );
    }
}

#[test]
fn a_move_of_another_cursor_wakes_nothing_it_can_read() {
    let (_disk, topic) = mem_topic(4);
    let p = append_n(&topic, 2);
    topic.sync().unwrap();
    let waiting = earliest(&topic, "waiting");
    let other = earliest(&topic, "other");
    assert_eq!(read_positions(&waiting, 10), p);
    let got = thread::scope(|s| {
        let reader = s.spawn(|| waiting.read_entries_or_wait(10, NEVER));
        until_parked(&topic, 1);
        // Wakes the read, which finds nothing and parks again.
        other.rewind().unwrap();
        until_parked(&topic, 1);
        waiting.seek_read_position(p[1]).unwrap();
        reader.join().unwrap()
    });
    let got: Vec<Position> = got.unwrap().into_iter().map(|e| e.position).collect();
    assert_eq!(got, vec![p[1]]);
}

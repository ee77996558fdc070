//! The cursor operations of Pulsar parity under hostile use: waits with extreme timeouts,
//! closes racing a waiting read, out-of-range batch indexes and sizes, acks of many positions
//! with one bad one, skips past the end.

use crate::support;

use std::thread;
use std::time::Duration;

use ackstore::{Cursor, Error, InitialPosition, MAX_BATCH_SIZE, ManagedLedger, Position};
use support::topic::{append_n, at, mem_topic, read_positions};

fn earliest(topic: &ManagedLedger, name: &str) -> Cursor {
    topic
        .open_cursor(name, at(InitialPosition::Earliest, false))
        .unwrap()
}

/// A dispatcher that waits "forever" passes `Duration::MAX`: the read returns what is there,
/// and never panics computing its deadline.
#[test]
fn a_waiting_read_with_the_largest_timeout_returns_entries() {
    let (_disk, topic) = mem_topic(4);
    let p = append_n(&topic, 2);
    let c = earliest(&topic, "sub");
    let entries = c.read_entries_or_wait(10, Duration::MAX).unwrap();
    assert_eq!(entries.iter().map(|e| e.position).collect::<Vec<_>>(), p);
    // And with nothing there, the sync that makes an append readable wakes it.
    let got = thread::scope(|s| {
        let reader = s.spawn(|| c.read_entries_or_wait(10, Duration::MAX));
        thread::sleep(Duration::from_millis(20));
        let appended = topic.append(b"late").unwrap();
        topic.sync().unwrap();
        (reader.join().unwrap().unwrap(), appended)
    });
    assert_eq!(got.0.len(), 1);
    assert_eq!(got.0[0].position, got.1);
    topic.close().unwrap();
}

/// Closing the cursor (not the topic) while another thread waits on it ends the wait with
/// `Closed`, as the documentation says, instead of leaving the read asleep until its timeout.
#[test]
fn closing_the_cursor_wakes_its_waiting_read_with_closed() {
    let (_disk, topic) = mem_topic(4);
    let c = earliest(&topic, "sub");
    let result = thread::scope(|s| {
        let reader = s.spawn(|| c.read_entries_or_wait(10, Duration::from_secs(30)));
        thread::sleep(Duration::from_millis(20));
        c.close().unwrap();
        reader.join().unwrap()
    });
    assert!(matches!(result, Err(Error::Closed)), "{result:?}");
    topic.close().unwrap();
}

/// The same for a reader (non-durable cursor) closed while it waits.
#[test]
fn closing_a_reader_wakes_its_waiting_read_with_closed() {
    let (_disk, topic) = mem_topic(4);
    let r = topic
        .open_non_durable_cursor(InitialPosition::Latest, Default::default())
        .unwrap();
    let result = thread::scope(|s| {
        let reader = s.spawn(|| r.read_entries_or_wait(10, Duration::from_secs(30)));
        thread::sleep(Duration::from_millis(20));
        r.close().unwrap();
        reader.join().unwrap()
    });
    assert!(matches!(result, Err(Error::Closed)), "{result:?}");
    topic.close().unwrap();
}

/// Hostile batch arguments: size 0, index at or past the size, a size changed mid-entry, a
/// position past the last entry: each is refused and nothing changes; `u32::MAX` messages
/// work.
#[test]
fn hostile_batch_index_arguments_change_nothing() {
    let (_disk, topic) = mem_topic(4);
    let p = append_n(&topic, 6);
    let c = earliest(&topic, "sub");
    assert!(matches!(
        c.ack_batch_index(p[1], 0, 0),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        c.ack_batch_index(p[1], 5, 5),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(c.ack_batch_index(p[1], 1, 5).unwrap());
    assert!(matches!(
        c.ack_batch_index(p[1], 2, 6),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(!c.is_batch_index_acked(p[1], 2).unwrap());
    assert!(matches!(
        c.ack_batch_index(Position::new(p[5].ledger_id, p[5].entry_id + 1), 0, 2),
        Err(Error::NoSuchEntry(_))
    ));
    assert!(matches!(
        c.ack_batch_index(Position::new(u64::MAX, u64::MAX), 0, 2),
        Err(Error::NoSuchEntry(_))
    ));
    // Above the maximum batch size: refused, nothing changes.
    assert!(matches!(
        c.ack_batch_index(p[2], u32::MAX - 1, u32::MAX),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(!c.is_batch_index_acked(p[2], u32::MAX - 1).unwrap());
    assert!(
        c.ack_batch_index(p[2], MAX_BATCH_SIZE - 1, MAX_BATCH_SIZE)
            .unwrap()
    );
    assert!(c.is_batch_index_acked(p[2], MAX_BATCH_SIZE - 1).unwrap());
    assert!(!c.is_batch_index_acked(p[2], 0).unwrap());
    assert_eq!(c.stats().unwrap().partial_entries, 2);
    c.flush().unwrap();
    c.close().unwrap();
    let c = earliest(&topic, "sub");
    assert!(c.is_batch_index_acked(p[2], MAX_BATCH_SIZE - 1).unwrap());
    assert!(c.is_batch_index_acked(p[1], 1).unwrap());
    assert!(matches!(
        c.ack_batch_index(p[1], 2, 6),
        Err(Error::InvalidArgument { .. })
    ));
    topic.close().unwrap();
}

/// `ack_many` with duplicates, unsorted, empty, and one bad position: all or nothing.
#[test]
fn ack_many_is_all_or_nothing_and_takes_duplicates_and_any_order() {
    let (_disk, topic) = mem_topic(4);
    let p = append_n(&topic, 8);
    let c = earliest(&topic, "sub");
    assert_eq!(c.ack_many(&[]).unwrap(), 0);
    let bad = Position::new(p[7].ledger_id, p[7].entry_id + 5);
    assert!(matches!(
        c.ack_many(&[p[3], p[2], bad]),
        Err(Error::NoSuchEntry(b)) if b == bad
    ));
    assert!(!c.is_acked(p[3]).unwrap());
    assert_eq!(c.ack_many(&[p[5], p[3], p[5], p[3], p[0]]).unwrap(), 3);
    assert_eq!(c.mark_delete_position().unwrap(), Some(p[0]));
    assert_eq!(read_positions(&c, 10), vec![p[1], p[2], p[4], p[6], p[7]]);
    // Skip past the end skips what remains and no more.
    assert_eq!(c.skip_entries(u64::MAX).unwrap(), 5);
    assert_eq!(c.mark_delete_position().unwrap(), Some(p[7]));
    assert!(!c.has_more_entries().unwrap());
    assert_eq!(c.entries_in_backlog(p[0], p[7]).unwrap(), 0);
    topic.close().unwrap();
}

/// A reader holding partial entries and acks in ledgers the topic then trims (readers do not
/// hold trimming back): its backlog, reads, and waiting read only see retained entries, and the
/// trimmed partial entries are not reported.
#[test]
fn a_reader_with_partial_entries_in_trimmed_ledgers_reads_only_what_is_retained() {
    let (_disk, topic) = mem_topic(2);
    let p = append_n(&topic, 6);
    let r = topic
        .open_non_durable_cursor(InitialPosition::Earliest, Default::default())
        .unwrap();
    r.ack_batch_index(p[0], 0, 3).unwrap();
    r.ack_batch_index(p[1], 1, 3).unwrap();
    r.ack(p[2]).unwrap();
    let c = earliest(&topic, "sub");
    c.ack_cumulative(p[3]).unwrap();
    c.flush().unwrap();
    topic.trim_consumed().unwrap();
    let trimmed = r.ack_batch_index(p[1], 2, 3);
    assert!(
        matches!(trimmed, Ok(false) | Err(Error::NoSuchEntry(_))),
        "{trimmed:?}"
    );
    let backlog = r.entries_in_backlog(p[0], p[5]).unwrap();
    assert_eq!(
        backlog, 2,
        "p4 and p5 are what is retained and unacknowledged"
    );
    assert!(r.has_more_entries().unwrap());
    let got: Vec<_> = r
        .read_entries_or_wait(10, Duration::from_secs(30))
        .unwrap()
        .iter()
        .map(|e| e.position)
        .collect();
    assert_eq!(got, vec![p[4], p[5]]);
    assert_eq!(r.first_unacked().unwrap(), Some(p[4]));
    assert_eq!(r.stats().unwrap().partial_entries, 0, "{:?}", r.stats());
    topic.close().unwrap();
}

/// Threads acking messages of the same batches while others ack cumulatively, skip, seek the
/// read position and flush: at the end every entry is acknowledged, no partial entry is left,
/// the budget charge is back to zero, and a reopen finds everything acknowledged.
#[test]
fn batch_acks_racing_cumulative_acks_skips_and_flushes_leave_no_partial_state() {
    let (disk, topic) = mem_topic(16);
    let p = append_n(&topic, 400);
    let c = earliest(&topic, "sub");
    thread::scope(|s| {
        for t in 0..2u32 {
            let (c, p) = (&c, &p);
            s.spawn(move || {
                for (k, &pos) in p.iter().enumerate() {
                    for i in (0..4).map(|i| (i + t + k as u32) % 4) {
                        match c.ack_batch_index(pos, i, 4) {
                            Ok(_) => {}
                            Err(e) => panic!("{pos} {i}: {e:?}"),
                        }
                    }
                }
            });
        }
        s.spawn(|| {
            for k in (0..400).step_by(37) {
                let _ = c.ack_cumulative(p[k]);
                c.seek_read_position(p[k / 2]).unwrap();
                c.flush().unwrap();
            }
        });
        s.spawn(|| {
            for _ in 0..20 {
                c.skip_entries(3).unwrap();
                c.flush().unwrap();
            }
        });
    });
    c.flush().unwrap();
    let s = c.stats().unwrap();
    assert_eq!(c.mark_delete_position().unwrap(), Some(p[399]));
    assert_eq!(s.partial_entries, 0);
    assert_eq!(s.batch_index_bytes, 0);
    assert_eq!(s.ackset.charged_bytes, 0);
    drop(c);
    drop(topic);
    let topic = ManagedLedger::open_with_storage(
        std::sync::Arc::new(disk.durable_image()),
        support::topic::config(16),
    )
    .unwrap();
    let c = earliest(&topic, "sub");
    assert_eq!(c.mark_delete_position().unwrap(), Some(p[399]));
    assert_eq!(c.stats().unwrap().partial_entries, 0);
    topic.close().unwrap();
}

/// The budget charge follows the partial entries as whole-entry acks, many acks, cumulative
/// acks and skips remove them, before any flush (a reader never flushes): `charged_bytes`
/// equals `batch_index_bytes`, as documented, instead of keeping a charge for entries gone.
#[test]
fn the_budget_charge_follows_partial_entries_removed_by_other_acks() {
    let (_disk, topic) = mem_topic(4);
    let p = append_n(&topic, 40);
    let durable = earliest(&topic, "sub");
    let reader = topic
        .open_non_durable_cursor(InitialPosition::Earliest, Default::default())
        .unwrap();
    for c in [&durable, &reader] {
        let charge = |what: &str| {
            let s = c.stats().unwrap();
            assert_eq!(
                s.ackset.charged_bytes as u64, s.batch_index_bytes,
                "after {what}: {} partial entries",
                s.partial_entries
            );
        };
        for &pos in &p[1..] {
            c.ack_batch_index(pos, 0, 5).unwrap();
        }
        charge("batch acks");
        c.ack(p[3]).unwrap();
        charge("a whole-entry ack");
        c.ack_many(&p[5..10]).unwrap();
        charge("ack_many");
        c.ack_cumulative(p[20]).unwrap();
        charge("a cumulative ack");
        c.skip_entries(5).unwrap();
        charge("a skip");
        c.mark_delete_with_properties(p[30], Default::default())
            .unwrap();
        charge("mark_delete_with_properties");
        c.ack_batch_index(p[35], 1, 5).unwrap();
        c.seek(p[32]).unwrap();
        charge("a seek");
    }
    topic.close().unwrap();
}

/// `entries_in_backlog` and `has_more_entries` against a model, for bounds that are entries,
/// holes between ledgers, past the end of a ledger, and the extremes.
#[test]
fn entries_in_backlog_agrees_with_a_model_for_any_bounds() {
    let (_disk, topic) = mem_topic(5);
    let p = append_n(&topic, 23);
    let c = earliest(&topic, "sub");
    let mut rng = support::workload::Rng::new(7);
    let mut acked = std::collections::BTreeSet::new();
    for _ in 0..10 {
        let k = rng.index(p.len());
        c.ack(p[k]).unwrap();
        acked.insert(p[k]);
    }
    c.ack_cumulative(p[2]).unwrap();
    acked.extend(p[..=2].iter().copied());
    let mut bounds: Vec<Position> = p.clone();
    for q in &p {
        bounds.push(Position::new(q.ledger_id, q.entry_id + 1));
        bounds.push(Position::new(q.ledger_id + 1, 0));
        bounds.push(Position::new(q.ledger_id, u64::MAX));
    }
    bounds.push(Position::new(0, 0));
    bounds.push(Position::new(u64::MAX, u64::MAX));
    for &from in &bounds {
        for &to in &bounds {
            let want = p
                .iter()
                .filter(|q| **q >= from && **q <= to && !acked.contains(q))
                .count() as u64;
            assert_eq!(
                c.entries_in_backlog(from, to).unwrap(),
                want,
                "{from}..={to}"
            );
        }
    }
    for &at in &bounds {
        c.seek_read_position(at).unwrap();
        let want = p.iter().any(|q| *q >= at && !acked.contains(q));
        assert_eq!(c.has_more_entries().unwrap(), want, "read position {at}");
    }
    topic.close().unwrap();
}

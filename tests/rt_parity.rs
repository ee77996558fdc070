//! The cursor operations of Pulsar parity under hostile use: waits with extreme timeouts,
//! closes racing a waiting read, out-of-range batch indexes and sizes, acks of many positions
//! with one bad one, skips past the end.

mod support;

use std::thread;
use std::time::Duration;

use ackstore::{Cursor, Error, InitialPosition, ManagedLedger, Position};
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
    // And with nothing there, an append wakes it.
    let got = thread::scope(|s| {
        let reader = s.spawn(|| c.read_entries_or_wait(10, Duration::MAX));
        thread::sleep(Duration::from_millis(20));
        let appended = topic.append(b"late").unwrap();
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
    assert!(c.ack_batch_index(p[2], u32::MAX - 1, u32::MAX).unwrap());
    assert!(c.is_batch_index_acked(p[2], u32::MAX - 1).unwrap());
    assert!(!c.is_batch_index_acked(p[2], 0).unwrap());
    assert_eq!(c.stats().unwrap().partial_entries, 2);
    c.flush().unwrap();
    c.close().unwrap();
    let c = earliest(&topic, "sub");
    assert!(c.is_batch_index_acked(p[2], u32::MAX - 1).unwrap());
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

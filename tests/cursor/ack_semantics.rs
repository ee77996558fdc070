//! Acknowledgement semantics of a cursor: individual and cumulative acks, mark-delete, backlog,
//! reads that skip acked entries.

use crate::support;

use ackstore::InitialPosition;
use ackstore::{Error, Position};
use support::topic::{append_n, at, on_each_backend, read_positions};

#[test]
fn a_single_out_of_order_ack_leaves_mark_delete_and_filling_the_hole_jumps() {
    on_each_backend(100, |topic| {
        let p = append_n(&topic, 10);
        let c = topic
            .open_cursor("sub", at(InitialPosition::Earliest, false))
            .unwrap();
        assert_eq!(c.mark_delete_position().unwrap(), None);

        assert!(c.ack(p[1]).unwrap());
        assert_eq!(c.mark_delete_position().unwrap(), None);
        c.ack(p[2]).unwrap();
        c.ack(p[4]).unwrap();
        assert_eq!(c.acked_ranges().unwrap(), vec![(p[1], p[2]), (p[4], p[4])]);

        // Filling the hole at 0 absorbs 1 and 2, stops at the hole at 3.
        c.ack(p[0]).unwrap();
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[2]));
        assert_eq!(c.acked_ranges().unwrap(), vec![(p[4], p[4])]);
        c.ack(p[3]).unwrap();
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[4]));
        assert!(c.acked_ranges().unwrap().is_empty());
        assert_eq!(c.backlog().unwrap(), 5);
    });
}

#[test]
fn acks_in_random_order_decrement_the_backlog_by_exactly_one_each() {
    on_each_backend(7, |topic| {
        let p = append_n(&topic, 200);
        let c = topic
            .open_cursor("sub", at(InitialPosition::Earliest, false))
            .unwrap();
        // A fixed permutation (multiplication by a unit modulo a prime above the count).
        let order: Vec<usize> = (0..211u64)
            .map(|i| usize::try_from(i * 97 % 211).unwrap())
            .filter(|&i| i < p.len())
            .collect();
        assert_eq!(order.len(), p.len());
        let mut expected = 200;
        assert_eq!(c.backlog().unwrap(), expected);
        for &i in &order {
            assert!(c.ack(p[i]).unwrap());
            expected -= 1;
            assert_eq!(c.backlog().unwrap(), expected, "after acking {}", p[i]);
            assert!(!c.ack(p[i]).unwrap(), "a repeated ack changes nothing");
            assert_eq!(c.backlog().unwrap(), expected);
        }
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[199]));
        assert!(c.acked_ranges().unwrap().is_empty());
    });
}

#[test]
fn reads_skip_acked_entries_and_advance_the_read_position() {
    on_each_backend(4, |topic| {
        let p = append_n(&topic, 10);
        let c = topic
            .open_cursor("sub", at(InitialPosition::Earliest, false))
            .unwrap();
        for i in [1, 2, 5, 8] {
            c.ack(p[i]).unwrap();
        }
        assert_eq!(read_positions(&c, 3), vec![p[0], p[3], p[4]]);
        assert_eq!(c.read_position().unwrap(), p[5]);
        assert_eq!(read_positions(&c, 10), vec![p[6], p[7], p[9]]);
        assert!(read_positions(&c, 10).is_empty());
        assert_eq!(
            c.read_position().unwrap(),
            Position::new(p[9].ledger_id, p[9].entry_id + 1)
        );

        // Entries appended later are read next.
        let more = append_n(&topic, 2);
        assert_eq!(read_positions(&c, 10), more);

        // Rewind reads everything after mark-delete again, still skipping acked entries.
        c.rewind().unwrap();
        assert_eq!(read_positions(&c, 4), vec![p[0], p[3], p[4], p[6]]);
        let entries = c.read_entries(1).unwrap();
        assert_eq!(entries[0].payload, b"m7");
    });
}

#[test]
fn mark_delete_moves_across_ledger_boundaries() {
    // One entry per ledger: every step of mark-delete crosses a ledger.
    on_each_backend(1, |topic| {
        let p = append_n(&topic, 6);
        assert!(p.windows(2).all(|w| w[0].ledger_id < w[1].ledger_id));
        let c = topic
            .open_cursor("sub", at(InitialPosition::Earliest, false))
            .unwrap();
        for i in (1..6).rev() {
            c.ack(p[i]).unwrap();
        }
        assert_eq!(c.mark_delete_position().unwrap(), None);
        assert_eq!(
            c.acked_ranges().unwrap().len(),
            5,
            "ranges never span ledgers"
        );
        c.ack(p[0]).unwrap();
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[5]));
        assert_eq!(c.backlog().unwrap(), 0);
    });
}

#[test]
fn mark_delete_moves_over_trimmed_ledgers() {
    on_each_backend(2, |topic| {
        let p = append_n(&topic, 8);
        let a = topic
            .open_cursor("a", at(InitialPosition::Earliest, false))
            .unwrap();
        let b = topic
            .open_cursor("b", at(InitialPosition::Earliest, false))
            .unwrap();
        a.ack_cumulative(p[3]).unwrap();
        b.ack_cumulative(p[5]).unwrap();
        assert_eq!(
            topic.trim_consumed().unwrap(),
            vec![p[0].ledger_id, p[2].ledger_id]
        );
        // `a`'s mark-delete is the last entry of a trimmed ledger; acking the first retained
        // entries moves it over the gap.
        a.ack(p[5]).unwrap();
        assert_eq!(a.mark_delete_position().unwrap(), Some(p[3]));
        a.ack(p[4]).unwrap();
        assert_eq!(a.mark_delete_position().unwrap(), Some(p[5]));
        // A cursor created after the trim starts before the first retained entry.
        let c = topic
            .open_cursor("c", at(InitialPosition::Earliest, false))
            .unwrap();
        assert_eq!(c.mark_delete_position().unwrap(), None);
        assert_eq!(c.backlog().unwrap(), 4);
        c.ack(p[4]).unwrap();
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[4]));
        assert_eq!(read_positions(&c, 10), p[5..].to_vec());
    });
}

#[test]
fn cumulative_ack_behind_mark_delete_or_beyond_the_last_entry_fails_and_changes_nothing() {
    on_each_backend(3, |topic| {
        let p = append_n(&topic, 9);
        let c = topic
            .open_cursor("sub", at(InitialPosition::Earliest, false))
            .unwrap();
        c.ack(p[6]).unwrap();
        assert!(c.ack_cumulative(p[4]).unwrap());
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[4]));
        let before = (
            c.backlog().unwrap(),
            c.acked_ranges().unwrap(),
            c.epoch().unwrap(),
        );

        assert!(matches!(
            c.ack_cumulative(p[2]),
            Err(Error::InvalidArgument { .. })
        ));
        let beyond = Position::new(p[8].ledger_id, p[8].entry_id + 1);
        assert!(matches!(
            c.ack_cumulative(beyond),
            Err(Error::NoSuchEntry(_))
        ));
        assert!(matches!(
            c.ack_cumulative(Position::new(p[8].ledger_id + 50, 0)),
            Err(Error::NoSuchEntry(_))
        ));
        assert!(matches!(c.ack(beyond), Err(Error::NoSuchEntry(_))));
        assert!(
            !c.ack_cumulative(p[4]).unwrap(),
            "repeating it changes nothing"
        );
        assert!(
            !c.ack(p[1]).unwrap(),
            "acking below mark-delete changes nothing"
        );
        assert_eq!(
            (
                c.backlog().unwrap(),
                c.acked_ranges().unwrap(),
                c.epoch().unwrap()
            ),
            before
        );
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[4]));

        // A cumulative ack up to the entry before an individual ack absorbs it.
        c.ack_cumulative(p[5]).unwrap();
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[6]));
        assert!(c.is_acked(p[0]).unwrap() && c.is_acked(p[6]).unwrap());
        assert!(!c.is_acked(p[7]).unwrap());
    });
}

#[test]
fn cursors_are_independent_and_usable_from_other_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<ackstore::Cursor>();
    assert_send_sync::<ackstore::ManagedLedger>();

    on_each_backend(10, |topic| {
        let p = append_n(&topic, 40);
        let a = topic
            .open_cursor("a", at(InitialPosition::Earliest, false))
            .unwrap();
        let b = topic
            .open_cursor("b", at(InitialPosition::Earliest, false))
            .unwrap();
        let evens: Vec<_> = p.iter().copied().step_by(2).collect();
        let handle = {
            let a = a.clone();
            std::thread::spawn(move || {
                for pos in evens {
                    a.ack(pos).unwrap();
                }
            })
        };
        for pos in p.iter().skip(1).step_by(2) {
            a.ack(*pos).unwrap();
        }
        handle.join().unwrap();
        assert_eq!(a.mark_delete_position().unwrap(), Some(p[39]));
        assert_eq!(b.backlog().unwrap(), 40);
        // A second handle to an open name shares its state.
        let again = topic
            .open_cursor("a", at(InitialPosition::Latest, false))
            .unwrap();
        assert_eq!(again.backlog().unwrap(), 0);
    });
}

#[test]
fn appends_reads_acks_and_trims_on_several_threads_deliver_every_entry_once_in_order() {
    const N: usize = 2000;
    on_each_backend(50, |topic| {
        let topic = std::sync::Arc::new(topic);
        let cursor = topic
            .open_cursor("sub", at(InitialPosition::Earliest, false))
            .unwrap();
        let writer = {
            let topic = topic.clone();
            std::thread::spawn(move || append_n(&topic, N as u64))
        };
        let reader = {
            let cursor = cursor.clone();
            std::thread::spawn(move || {
                let mut received = Vec::new();
                while received.len() < N {
                    let batch = read_positions(&cursor, 16);
                    // Acks within a batch arrive newest first: every batch leaves holes that the
                    // last ack fills.
                    for &pos in batch.iter().rev() {
                        cursor.ack(pos).unwrap();
                    }
                    received.extend(batch);
                    std::thread::yield_now();
                }
                received
            })
        };
        let trimmer = {
            let topic = topic.clone();
            let cursor = cursor.clone();
            std::thread::spawn(move || {
                let mut deleted = 0;
                while cursor.mark_delete_position().unwrap().is_none()
                    || topic.last_position() != cursor.mark_delete_position().unwrap()
                    || topic.next_index() < N as u64
                {
                    deleted += topic.trim_consumed().unwrap().len();
                    assert!(cursor.backlog().unwrap() <= N as u64);
                    std::thread::yield_now();
                }
                deleted
            })
        };
        let appended = writer.join().unwrap();
        let received = reader.join().unwrap();
        let deleted = trimmer.join().unwrap() + topic.trim_consumed().unwrap().len();
        assert_eq!(received, appended);
        assert_eq!(
            cursor.mark_delete_position().unwrap(),
            appended.last().copied()
        );
        assert_eq!(cursor.backlog().unwrap(), 0);
        assert_eq!(deleted, N / 50 - 1, "every ledger but the last is trimmed");
    });
}

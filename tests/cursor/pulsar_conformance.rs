//! Edge cases of a cursor checked against the answers Apache Pulsar's managed cursor gives
//! (`ManagedCursorImpl`, `NonDurableCursorImpl`): entries of trimmed ledgers count as
//! acknowledged, a reset into a trimmed ledger lands on the first retained entry, a mark-delete
//! that passes the read position carries it forward, readers start where Pulsar's readers start,
//! the backlog counts retained entries only, and a deleted cursor opened again starts afresh.
//! The cases the other modules already assert (acks at or behind mark-delete, skips, resets
//! inside the topic, batch indexes) are not repeated here.

use crate::support;

use ackstore::{Cursor, Error, InitialPosition, ManagedLedger, NonDurableOptions, Position};
use support::topic::{
    append_n, append_unsynced, at, mem_topic, on_each_backend, read_positions, reopen,
};

fn earliest(topic: &ManagedLedger, name: &str) -> Cursor {
    topic
        .open_cursor(name, at(InitialPosition::Earliest, false))
        .unwrap()
}

/// Eight entries in ledgers of two; the first two ledgers (`p[0]..=p[3]`) trimmed after the only
/// cursor, `first`, acknowledged them cumulatively.
fn topic_with_two_trimmed_ledgers(topic: &ManagedLedger) -> Vec<Position> {
    let p = append_n(topic, 8);
    let first = earliest(topic, "first");
    first.ack_cumulative(p[3]).unwrap();
    assert_eq!(
        topic.trim_consumed().unwrap(),
        vec![p[0].ledger_id, p[2].ledger_id]
    );
    assert_eq!(topic.first_position(), Some(p[4]));
    p
}

/// Pulsar gives a cursor created after a trim the mark-delete `first-ledger:-1`, before every
/// retained entry and after every trimmed one: `ManagedCursorImpl.asyncDelete` skips a position
/// `internalIsMessageDeleted` finds at or before it, `isMessageDeleted` answers true, and
/// `setAcknowledgedPosition` refuses a mark-delete behind it (`MarkDeletingMarkedPosition`, an
/// `IllegalArgumentException`). A position of a trimmed ledger is therefore an acknowledged one.
#[test]
fn positions_in_a_trimmed_ledger_count_as_acknowledged() {
    on_each_backend(2, |topic| {
        let p = topic_with_two_trimmed_ledgers(&topic);
        let c = earliest(&topic, "late");
        assert_eq!(c.mark_delete_position().unwrap(), None);
        assert_eq!(c.backlog().unwrap(), 4);

        assert!(!c.ack(p[1]).unwrap(), "a trimmed entry is already acked");
        assert!(c.is_acked(p[0]).unwrap() && c.is_acked(p[3]).unwrap());
        assert!(!c.is_acked(p[4]).unwrap());
        assert_eq!(c.ack_many(&[p[2], p[6]]).unwrap(), 1);
        assert!(!c.ack_batch_index(p[0], 0, 1).unwrap());
        assert!(matches!(
            c.ack_cumulative(p[3]),
            Err(Error::InvalidArgument { .. })
        ));
        assert_eq!(c.mark_delete_position().unwrap(), None);
        assert_eq!(c.acked_ranges().unwrap(), vec![(p[6], p[6])]);
        assert_eq!(c.backlog().unwrap(), 3);
        assert_eq!(read_positions(&c, 10), vec![p[4], p[5], p[7]]);

        assert!(c.is_batch_index_acked(p[1], 0).unwrap());
        assert!(matches!(
            c.mark_delete_with_properties(p[2], std::collections::BTreeMap::new()),
            Err(Error::InvalidArgument { .. })
        ));
        assert_eq!(c.mark_delete_position().unwrap(), None);

        // The cursor whose mark-delete is in a trimmed ledger answers the same.
        let first = earliest(&topic, "first");
        assert!(!first.ack(p[0]).unwrap());
        assert!(first.is_acked(p[2]).unwrap());
        assert_eq!(first.mark_delete_position().unwrap(), Some(p[3]));
        topic.close().unwrap();
    });
}

/// A reader does not hold trimming back: the entries it read may be trimmed before it
/// acknowledges them, and its late acks are the acks of entries already acknowledged, as in
/// Pulsar (`NonDurableCursorImpl` inherits `asyncDelete`), never an error that would fail the
/// acks sent with them.
#[test]
fn a_readers_late_acks_of_trimmed_entries_change_nothing_and_fail_nothing() {
    on_each_backend(2, |topic| {
        let p = append_n(&topic, 8);
        let r = topic
            .open_non_durable_cursor(InitialPosition::Earliest, NonDurableOptions::default())
            .unwrap();
        assert_eq!(read_positions(&r, 4), p[..4].to_vec());
        let durable = earliest(&topic, "sub");
        durable.ack_cumulative(p[3]).unwrap();
        assert_eq!(topic.trim_consumed().unwrap().len(), 2);

        assert!(!r.ack(p[1]).unwrap());
        assert_eq!(r.ack_many(&[p[0], p[2], p[5]]).unwrap(), 1);
        assert!(r.is_acked(p[3]).unwrap());
        assert_eq!(r.acked_ranges().unwrap(), vec![(p[5], p[5])]);
        assert_eq!(r.backlog().unwrap(), 3);
        assert_eq!(read_positions(&r, 10), vec![p[4], p[6], p[7]]);
        topic.close().unwrap();
    });
}

/// `ManagedCursorImpl.asyncResetCursor` moves a position that is not valid (its ledger is gone)
/// to `getNextValidPosition`, the first retained entry, and `internalResetCursor` sets
/// mark-delete to the position before it and clears the individual acks.
#[test]
fn a_reset_into_a_trimmed_ledger_lands_on_the_first_retained_entry() {
    on_each_backend(2, |topic| {
        let p = topic_with_two_trimmed_ledgers(&topic);
        let c = earliest(&topic, "first");
        c.ack(p[5]).unwrap();
        c.ack(p[6]).unwrap();
        c.seek(p[1]).unwrap();
        assert_eq!(c.mark_delete_position().unwrap(), None);
        assert!(c.acked_ranges().unwrap().is_empty());
        assert_eq!(c.backlog().unwrap(), 4);
        assert_eq!(read_positions(&c, 10), p[4..].to_vec());

        // Moving only the read position there reads from the entry after mark-delete
        // (Pulsar's `seek` keeps the read position after mark-delete).
        c.ack_cumulative(p[4]).unwrap();
        c.seek_read_position(p[2]).unwrap();
        assert_eq!(read_positions(&c, 10), p[5..].to_vec());

        // A reader told to start in a trimmed ledger starts at the first retained entry
        // (`NonDurableCursorImpl.recoverCursor` takes `getNextValidPosition`).
        for inclusive in [false, true] {
            let r = topic
                .open_non_durable_cursor(
                    InitialPosition::At(p[2]),
                    NonDurableOptions {
                        inclusive,
                        name: String::new(),
                    },
                )
                .unwrap();
            assert_eq!(read_positions(&r, 10), p[4..].to_vec(), "{inclusive}");
        }
        topic.close().unwrap();
    });
}

/// `ManagedCursorImpl.setAcknowledgedPosition`: when the new mark-delete is at or past the read
/// position, the read position moves to the entry after it; otherwise it stays. An individual
/// ack never moves it.
#[test]
fn a_mark_delete_passing_the_read_position_carries_it_forward_and_never_back() {
    on_each_backend(3, |topic| {
        let p = append_n(&topic, 12);
        let c = earliest(&topic, "sub");
        assert_eq!(read_positions(&c, 2), vec![p[0], p[1]]);
        assert_eq!(c.read_position().unwrap(), p[2]);

        c.ack_cumulative(p[5]).unwrap();
        assert_eq!(c.read_position().unwrap(), p[6]);
        assert_eq!(read_positions(&c, 1), vec![p[6]]);

        // Behind the read position: it stays.
        c.ack_cumulative(p[6]).unwrap();
        c.ack(p[10]).unwrap();
        assert_eq!(c.read_position().unwrap(), p[7]);
        assert_eq!(read_positions(&c, 3), vec![p[7], p[8], p[9]]);
        assert_eq!(c.read_position().unwrap(), p[10]);

        // An individual ack that fills the hole moves mark-delete over the run after it and the
        // read position past it.
        c.ack_many(&[p[8], p[9], p[7]]).unwrap();
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[10]));
        assert_eq!(c.read_position().unwrap(), p[11]);

        // Skipping past the read position carries it too.
        c.rewind().unwrap();
        assert_eq!(c.read_position().unwrap(), p[11]);
        let more = append_n(&topic, 3);
        assert_eq!(c.skip_entries(2).unwrap(), 2);
        assert_eq!(c.mark_delete_position().unwrap(), Some(more[0]));
        assert_eq!(c.read_position().unwrap(), more[1]);
        assert_eq!(read_positions(&c, 10), more[1..].to_vec());
        topic.close().unwrap();
    });
}

/// A reader (`NonDurableCursorImpl`): `Earliest` starts before the first entry, `Latest` after
/// the last one; the broker gives an inclusive start the position before the one asked for, so
/// `Latest` inclusive reads the last entry (`PersistentTopic.getNonDurableSubscription` with
/// `startMessageIdInclusive`). Every case then reads the next entry appended. (A reader at a
/// retained position is in `non_durable`.)
#[test]
fn readers_start_where_pulsar_readers_start() {
    for per_ledger in [1, 4] {
        let probe = mem_topic(per_ledger).1;
        let p = append_n(&probe, 6);
        // Past the end of the last ledger: `getNextValidPosition` finds no valid position and
        // answers the last confirmed entry's next, which is `Latest`.
        let past = Position::new(p[5].ledger_id, p[5].entry_id + 5);
        let cases: [(InitialPosition, bool, Vec<Position>); 6] = [
            (InitialPosition::Earliest, false, p.clone()),
            (InitialPosition::Earliest, true, p.clone()),
            (InitialPosition::Latest, false, vec![]),
            (InitialPosition::Latest, true, vec![p[5]]),
            (InitialPosition::At(past), false, vec![]),
            (InitialPosition::At(past), true, vec![]),
        ];
        for (start, inclusive, mut expected) in cases {
            let (_disk, topic) = mem_topic(per_ledger);
            assert_eq!(append_n(&topic, 6), p);
            let r = topic
                .open_non_durable_cursor(
                    start,
                    NonDurableOptions {
                        inclusive,
                        name: "reader".to_owned(),
                    },
                )
                .unwrap();
            expected.extend(append_n(&topic, 1));
            assert_eq!(
                read_positions(&r, 100),
                expected,
                "{start:?} inclusive={inclusive} per_ledger={per_ledger}"
            );
        }
    }
}

/// `ManagedCursorImpl.getNumberOfEntriesInBacklog(true)` counts the entries of the ledgers that
/// exist in `(mark-delete, last]` (`ManagedLedgerImpl.getNumberOfEntries(range)`) less the
/// individual acks in it; a range starting in a trimmed ledger counts from the first retained
/// entry.
#[test]
fn the_backlog_counts_retained_entries_only() {
    on_each_backend(2, |topic| {
        let p = topic_with_two_trimmed_ledgers(&topic);
        let c = earliest(&topic, "late");
        let first = earliest(&topic, "first");
        for cursor in [&c, &first] {
            assert_eq!(cursor.backlog().unwrap(), 4);
            assert_eq!(cursor.entries_in_backlog(p[0], p[7]).unwrap(), 4);
            assert_eq!(cursor.entries_in_backlog(p[1], p[4]).unwrap(), 1);
            cursor.ack(p[5]).unwrap();
            cursor.ack(p[7]).unwrap();
            assert_eq!(cursor.backlog().unwrap(), 2);
            assert_eq!(cursor.entries_in_backlog(p[2], p[6]).unwrap(), 2);
            assert_eq!(cursor.first_unacked().unwrap(), Some(p[4]));
        }
        topic.close().unwrap();
    });
}

/// `ManagedLedgerImpl.asyncDeleteCursor` removes the cursor and its state; `openCursor` of the
/// same name afterwards creates a new cursor at the initial position it is given
/// (`ManagedCursorImpl.initialize`), with none of the old acks, now and after a restart.
#[test]
fn a_deleted_cursor_opened_again_starts_afresh_at_its_new_initial_position() {
    let (disk, topic) = mem_topic(3);
    let p = append_n(&topic, 9);
    let c = earliest(&topic, "sub");
    c.ack_cumulative(p[1]).unwrap();
    c.ack(p[4]).unwrap();
    c.set_property("k", 7).unwrap();
    c.flush().unwrap();
    topic.delete_cursor("sub").unwrap();

    let c = topic
        .open_cursor("sub", at(InitialPosition::Latest, false))
        .unwrap();
    assert_eq!(c.mark_delete_position().unwrap(), Some(p[8]));
    assert_eq!(c.backlog().unwrap(), 0);
    assert!(c.properties().unwrap().is_empty());
    c.close().unwrap();
    topic.delete_cursor("sub").unwrap();

    let c = earliest(&topic, "sub");
    assert_eq!(c.mark_delete_position().unwrap(), None);
    assert!(c.acked_ranges().unwrap().is_empty());
    assert_eq!(c.backlog().unwrap(), 9);
    c.close().unwrap();
    topic.close().unwrap();

    let topic = reopen(&disk, 3);
    let c = topic
        .open_cursor("sub", at(InitialPosition::Latest, false))
        .unwrap();
    assert_eq!(c.mark_delete_position().unwrap(), None);
    assert!(!c.is_acked(p[4]).unwrap());
    assert_eq!(read_positions(&c, 20), p);
}

/// Pulsar resets by time through `PersistentMessageFinder` (`findNewestMatching` over the
/// available entries, publish time `<= t`), then to the entry after the one found, or to the
/// first position when none matches: entries of trimmed ledgers are never found.
#[test]
fn a_reset_by_time_sees_retained_entries_only() {
    on_each_backend(2, |topic| {
        // `append_n` stamps 1000, 1001, ...
        let p = topic_with_two_trimmed_ledgers(&topic);
        assert_eq!(topic.find_by_timestamp(1002).unwrap(), None);
        assert_eq!(topic.find_by_timestamp(1004).unwrap(), Some(p[4]));
        let c = earliest(&topic, "first");
        c.seek_by_timestamp(1001).unwrap();
        assert_eq!(c.mark_delete_position().unwrap(), None);
        assert_eq!(read_positions(&c, 10), p[4..].to_vec());
        c.seek_by_timestamp(1005).unwrap();
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[5]));
        assert_eq!(read_positions(&c, 10), p[6..].to_vec());
        topic.close().unwrap();
    });
}

/// A trim can leave no readable entry: the last non-empty ledger it keeps may hold only
/// entries not yet synced. The trimmed entries are still behind every cursor's mark-delete, so
/// a reader's late acks and a late cursor's answers are those of acknowledged entries, as
/// when a retained entry is readable.
#[test]
fn trimmed_entries_count_as_acknowledged_while_no_retained_entry_is_readable() {
    on_each_backend(2, |topic| {
        let p = append_n(&topic, 4);
        let r = topic
            .open_non_durable_cursor(InitialPosition::Earliest, NonDurableOptions::default())
            .unwrap();
        assert_eq!(read_positions(&r, 4), p);
        let durable = earliest(&topic, "sub");
        durable.ack_cumulative(p[3]).unwrap();
        let unsynced = append_unsynced(&topic, 1);
        assert_eq!(topic.trim_consumed().unwrap().len(), 2);
        assert_eq!(topic.first_position(), None, "nothing readable is retained");

        assert!(!r.ack(p[1]).unwrap());
        assert_eq!(r.ack_many(&[p[0], p[2]]).unwrap(), 0);
        assert!(r.is_acked(p[3]).unwrap());
        let late = earliest(&topic, "late");
        assert!(late.is_acked(p[0]).unwrap());
        assert!(!late.ack(p[2]).unwrap());
        assert!(matches!(
            late.ack_cumulative(p[3]),
            Err(Error::InvalidArgument { .. })
        ));

        topic.sync().unwrap();
        assert!(!r.is_acked(unsynced[0]).unwrap() && !late.is_acked(unsynced[0]).unwrap());
        assert_eq!(read_positions(&r, 10), unsynced);
        assert_eq!(read_positions(&late, 10), unsynced);
        topic.close().unwrap();
    });
}

/// A group mixing trimmed, acknowledged, fresh, repeated and missing positions: the trimmed
/// ones (and those of a ledger that never existed before the first) are ignored as acknowledged
/// entries, the count is of the fresh entries only, and a missing position fails the whole group
/// with nothing changed, as `ack` refuses it.
#[test]
fn a_group_mixing_trimmed_acked_fresh_and_missing_positions() {
    on_each_backend(2, |topic| {
        let p = topic_with_two_trimmed_ledgers(&topic);
        let never = Position::new(0, 5);
        assert!(never < p[0]);
        let c = earliest(&topic, "late");
        assert!(c.ack(p[5]).unwrap());
        let missing = Position::new(p[7].ledger_id, p[7].entry_id + 1);
        let before = c.acked_ranges().unwrap();
        assert!(matches!(
            c.ack_many(&[p[0], p[6], never, missing, p[4]]),
            Err(Error::NoSuchEntry(q)) if q == missing
        ));
        assert_eq!(c.acked_ranges().unwrap(), before);
        assert_eq!(c.mark_delete_position().unwrap(), None);
        assert!(!c.is_acked(p[4]).unwrap() && !c.is_acked(p[6]).unwrap());

        assert!(!c.ack(never).unwrap());
        assert!(c.is_acked(never).unwrap());
        let group = [p[3], p[5], p[6], never, p[6], p[1], p[4]];
        assert_eq!(c.ack_many(&group).unwrap(), 2);
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[6]));
        assert!(c.acked_ranges().unwrap().is_empty());
        assert_eq!(c.ack_many(&group).unwrap(), 0);
        assert_eq!(read_positions(&c, 10), vec![p[7]]);
        topic.close().unwrap();
    });
}

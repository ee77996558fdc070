//! Where a new cursor starts reading, for every initial position, inclusive or not, on empty
//! topics, with one entry per ledger, in trimmed ledgers and past the end.

use crate::support;

use ackstore::Position;
use ackstore::{InitialPosition, ManagedLedger};
use support::topic::{append_n, at, mem_topic, on_each_backend, read_positions, reopen};

/// Opens a cursor, appends one more entry (`next`), and returns what the cursor reads.
fn reads_after_open(
    topic: &ManagedLedger,
    name: &str,
    initial: InitialPosition,
    inclusive: bool,
) -> (Vec<Position>, Position) {
    let c = topic.open_cursor(name, at(initial, inclusive)).unwrap();
    let next = append_n(topic, 1)[0];
    (read_positions(&c, 100), next)
}

#[test]
fn every_initial_position_on_a_topic_with_entries() {
    for per_ledger in [1, 3, 100] {
        // Positions are the same on every fresh topic with the same config.
        on_each_backend(per_ledger, |topic| {
            let p = append_n(&topic, 5);
            let cases: [(InitialPosition, bool, Vec<Position>); 8] = [
                (InitialPosition::Earliest, false, p.clone()),
                (InitialPosition::Earliest, true, p.clone()),
                (InitialPosition::Latest, false, vec![]),
                (InitialPosition::Latest, true, vec![p[4]]),
                (InitialPosition::At(p[2]), false, p[3..].to_vec()),
                (InitialPosition::At(p[2]), true, p[2..].to_vec()),
                (InitialPosition::At(p[4]), false, vec![]),
                (InitialPosition::At(p[0]), true, p.clone()),
            ];
            for (initial, inclusive, mut expected) in cases {
                let (_disk, topic) = mem_topic(per_ledger);
                assert_eq!(append_n(&topic, 5), p);
                let (read, next) = reads_after_open(&topic, "c", initial, inclusive);
                expected.push(next);
                assert_eq!(
                    read, expected,
                    "{initial:?} inclusive={inclusive} per_ledger={per_ledger}"
                );
            }
        });
    }
}

#[test]
fn on_an_empty_topic_every_initial_position_reads_the_first_entry_appended() {
    for per_ledger in [1, 50_000] {
        for (initial, inclusive) in [
            (InitialPosition::Earliest, false),
            (InitialPosition::Latest, false),
            (InitialPosition::Latest, true),
            (InitialPosition::At(Position::new(1, 0)), false),
            (InitialPosition::At(Position::new(1, 0)), true),
            (InitialPosition::At(Position::new(7, 3)), true),
        ] {
            on_each_backend(per_ledger, |topic| {
                assert_eq!(topic.first_position(), None);
                assert_eq!(topic.last_position(), None);
                let c = topic.open_cursor("c", at(initial, inclusive)).unwrap();
                assert_eq!(c.mark_delete_position().unwrap(), None);
                assert_eq!(c.backlog().unwrap(), 0);
                let p = append_n(&topic, 2);
                assert_eq!(
                    read_positions(&c, 10),
                    p,
                    "{initial:?} inclusive={inclusive}"
                );
            });
        }
    }
}

#[test]
fn a_position_in_a_trimmed_ledger_starts_at_the_earliest_retained_entry() {
    on_each_backend(2, |topic| {
        let p = append_n(&topic, 6);
        let holder = topic
            .open_cursor("holder", at(InitialPosition::Earliest, false))
            .unwrap();
        holder.ack_cumulative(p[3]).unwrap();
        assert_eq!(topic.trim_consumed().unwrap().len(), 2);
        assert_eq!(topic.first_position(), Some(p[4]));
        for inclusive in [false, true] {
            let name = format!("late-{inclusive}");
            let c = topic
                .open_cursor(&name, at(InitialPosition::At(p[1]), inclusive))
                .unwrap();
            assert_eq!(c.mark_delete_position().unwrap(), None);
            assert_eq!(read_positions(&c, 10), p[4..].to_vec());
        }
    });
}

#[test]
fn a_position_past_the_end_reads_the_next_entry_appended() {
    on_each_backend(3, |topic| {
        append_n(&topic, 5);
        for (i, (ledgers_ahead, inclusive)) in [(0, false), (0, true), (1000, true)]
            .into_iter()
            .enumerate()
        {
            let last = topic.last_position().unwrap();
            let past = if ledgers_ahead == 0 {
                Position::new(last.ledger_id, last.entry_id + 1)
            } else {
                Position::new(last.ledger_id + ledgers_ahead, 5)
            };
            let c = topic
                .open_cursor(&format!("c{i}"), at(InitialPosition::At(past), inclusive))
                .unwrap();
            assert_eq!(c.mark_delete_position().unwrap(), Some(last));
            assert_eq!(c.backlog().unwrap(), 0);
            let next = append_n(&topic, 1)[0];
            assert_eq!(read_positions(&c, 10), vec![next]);
        }
    });
}

#[test]
fn a_position_between_entries_moves_to_the_next_existing_entry() {
    // Ledgers of 3 entries: `L:5` does not exist, the next entry is the first of the next ledger.
    on_each_backend(3, |topic| {
        let p = append_n(&topic, 6);
        let gap = Position::new(p[0].ledger_id, 5);
        for inclusive in [false, true] {
            let c = topic
                .open_cursor(
                    &format!("g{inclusive}"),
                    at(InitialPosition::At(gap), inclusive),
                )
                .unwrap();
            assert_eq!(c.mark_delete_position().unwrap(), Some(p[2]));
            assert_eq!(read_positions(&c, 10), p[3..].to_vec());
        }
    });
}

#[test]
fn an_existing_cursor_ignores_the_initial_position_and_keeps_its_state() {
    let (disk, topic) = mem_topic(4);
    let p = append_n(&topic, 10);
    let c = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    c.ack_cumulative(p[5]).unwrap();
    c.close().unwrap();
    let again = topic
        .open_cursor("sub", at(InitialPosition::Latest, true))
        .unwrap();
    assert_eq!(again.mark_delete_position().unwrap(), Some(p[5]));
    assert_eq!(read_positions(&again, 100), p[6..].to_vec());
    topic.close().unwrap();

    let topic = reopen(&disk, 4);
    let after = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    assert_eq!(after.mark_delete_position().unwrap(), Some(p[5]));
    assert_eq!(read_positions(&after, 100), p[6..].to_vec());
}

//! `ack_many` against the same acks made one by one with `ack`, on two cursors of one topic:
//! groups in any order with duplicates, within a few partitions of one ledger (which the ack set
//! orders by partition before adding them) or across ledgers (which it takes as they come),
//! longer than the ack set's group of 64, with positions at or behind mark-delete, positions that
//! are no retained entry (the call is refused whole), and entries partially acknowledged by batch
//! index. After every step both cursors agree on everything a broker asks of them.

use crate::support;

use ackstore::{Cursor, Error, ManagedLedger, Position};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use support::topic::{earliest, mem_topic};

/// Entries of the first data ledger: four whole ack-set partitions (65,536 entries each) and a
/// part of a fifth.
const FIRST_LEDGER: u64 = 4 * 65_536 + 100;
/// Entries of the second data ledger.
const SECOND_LEDGER: u64 = 300;
/// Messages of an entry acknowledged by batch index.
const BATCH: u32 = 3;

#[derive(Clone, Debug)]
enum Op {
    /// `ack_many` on one cursor, `ack` of each position in turn on the other.
    AckMany(Vec<Position>),
    Ack(Position),
    Cumulative(Position),
    BatchIndex(Position, u32),
}

/// Entry ids of the first ledger around the partitions' edges, the entry after mark-delete
/// often among them, and a few past the ledger's end (no entry).
fn first_ledger_entry() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..24,
        2 => 65_530u64..65_545,
        2 => 131_066u64..131_080,
        1 => 196_600u64..196_610,
        1 => (FIRST_LEDGER - 8)..(FIRST_LEDGER + 2),
    ]
}

/// A position of the first ledger (its id is `first`'s), or rarely of the second or of no
/// ledger (`id + 5`).
fn position(first: u64) -> impl Strategy<Value = Position> {
    prop_oneof![
        12 => first_ledger_entry().prop_map(move |e| Position::new(first, e)),
        3 => (0u64..SECOND_LEDGER + 1).prop_map(move |e| Position::new(first + 1, e)),
        1 => (0u64..4).prop_map(move |e| Position::new(first + 5, e)),
    ]
}

fn op(first: u64) -> impl Strategy<Value = Op> {
    // Groups in one ledger (ordered by partition) and mixed ones (taken as they come).
    let one_ledger = prop::collection::vec(first_ledger_entry(), 0..150)
        .prop_map(move |es| es.into_iter().map(|e| Position::new(first, e)).collect());
    let mixed = prop::collection::vec(position(first), 0..150);
    prop_oneof![
        8 => prop_oneof![one_ledger, mixed].prop_map(Op::AckMany),
        2 => position(first).prop_map(Op::Ack),
        1 => position(first).prop_map(Op::Cumulative),
        3 => (position(first), 0..BATCH).prop_map(|(p, i)| Op::BatchIndex(p, i)),
    ]
}

/// Whether `p` is an entry of the topic (the first ledger's id is `first`).
fn retained(first: u64, p: Position) -> bool {
    (p.ledger_id == first && p.entry_id < FIRST_LEDGER)
        || (p.ledger_id == first + 1 && p.entry_id < SECOND_LEDGER)
}

/// Applies `op` to `many` (with `ack_many`) and to `one` (with single acks), comparing answers.
fn apply(first: u64, op: &Op, many: &Cursor, one: &Cursor) {
    match op {
        Op::AckMany(positions) => {
            let mark = one.mark_delete_position().unwrap();
            let bad = positions
                .iter()
                .find(|p| mark.is_none_or(|m| **p > m) && !retained(first, **p));
            match (many.ack_many(positions), bad) {
                (Err(Error::NoSuchEntry(p)), Some(bad)) => assert_eq!(p, *bad),
                (Ok(changed), None) => {
                    let singly: u64 = positions
                        .iter()
                        .map(|p| u64::from(one.ack(*p).unwrap()))
                        .sum();
                    assert_eq!(
                        changed, singly,
                        "newly acknowledged entries of {positions:?}"
                    );
                }
                (answer, bad) => {
                    panic!("ack_many answered {answer:?}, the first bad one is {bad:?}")
                }
            }
        }
        Op::Ack(p) => assert_eq!(many.ack(*p).ok(), one.ack(*p).ok()),
        Op::Cumulative(p) => {
            assert_eq!(many.ack_cumulative(*p).ok(), one.ack_cumulative(*p).ok());
        }
        Op::BatchIndex(p, i) => assert_eq!(
            many.ack_batch_index(*p, *i, BATCH).ok(),
            one.ack_batch_index(*p, *i, BATCH).ok()
        ),
    }
}

/// Both cursors' acks, mark-delete, backlog and partial entries agree.
fn same_state(ops: &[Op], many: &Cursor, one: &Cursor) {
    assert_eq!(
        many.mark_delete_position().unwrap(),
        one.mark_delete_position().unwrap()
    );
    assert_eq!(many.acked_ranges().unwrap(), one.acked_ranges().unwrap());
    assert_eq!(many.backlog().unwrap(), one.backlog().unwrap());
    assert_eq!(many.read_position().unwrap(), one.read_position().unwrap());
    assert_eq!(
        many.stats().unwrap().partial_entries,
        one.stats().unwrap().partial_entries
    );
    for op in ops {
        if let Op::BatchIndex(p, _) = op {
            for i in 0..BATCH {
                assert_eq!(
                    many.is_batch_index_acked(*p, i).ok(),
                    one.is_batch_index_acked(*p, i).ok()
                );
            }
        }
    }
}

#[test]
fn ack_many_acks_as_single_acks_do_in_any_order_and_grouping() {
    let (_disk, topic) = mem_topic(FIRST_LEDGER);
    let append = |topic: &ManagedLedger, n: u64| {
        let first = topic.append(b"").unwrap();
        for _ in 1..n {
            topic.append(b"").unwrap();
        }
        first
    };
    let first = append(&topic, FIRST_LEDGER);
    let second = append(&topic, SECOND_LEDGER);
    topic.sync().unwrap();
    assert_eq!(
        (first.entry_id, second),
        (0, Position::new(first.ledger_id + 1, 0))
    );
    let mut runner = TestRunner::new(support::harness::proptest_config(
        if cfg!(debug_assertions) { 16 } else { 96 },
    ));
    let case = std::cell::Cell::new(0u32);
    let strategy = prop::collection::vec(op(first.ledger_id), 1..40);
    runner
        .run(&strategy, |ops| {
            case.set(case.get() + 1);
            let names = [
                format!("many-{}", case.get()),
                format!("one-{}", case.get()),
            ];
            let many = topic.open_cursor(&names[0], earliest()).unwrap();
            let one = topic.open_cursor(&names[1], earliest()).unwrap();
            for op in &ops {
                apply(first.ledger_id, op, &many, &one);
                same_state(&ops, &many, &one);
            }
            drop((many, one));
            for name in &names {
                topic.delete_cursor(name).unwrap();
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

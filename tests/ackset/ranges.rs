//! Ranges of acknowledged positions: never across ledgers, joined across partitions, counted exactly.

use ackstore::internals::ackset::set::*;
use ackstore::internals::position::Position;

fn p(ledger_id: u64, entry_id: u64) -> Position {
    Position::new(ledger_id, entry_id)
}

#[test]
fn ranges_never_span_ledgers() {
    let mut s = AckSet::new();
    s.add_range(1, 5, 9);
    s.add_range(2, 0, 3);
    assert_eq!(
        s.ranges().collect::<Vec<_>>(),
        vec![(p(1, 5), p(1, 9)), (p(2, 0), p(2, 3))]
    );
    assert_eq!(s.range_count(), 2);
    assert_eq!(s.last_range(), Some((p(2, 0), p(2, 3))));
}

#[test]
fn ranges_join_across_partition_boundaries() {
    let mut s = AckSet::new();
    s.add_range(3, 65_530, 3 * 65_536 + 2);
    s.add(p(3, 70_000));
    assert_eq!(s.partition_count(), 4);
    let whole = (p(3, 65_530), p(3, 3 * 65_536 + 2));
    assert_eq!(s.ranges().collect::<Vec<_>>(), vec![whole]);
    assert_eq!(s.first_range(), Some(whole));
    assert_eq!(s.last_range(), Some(whole));
    assert_eq!(s.len(), 3 * 65_536 + 2 - 65_530 + 1);
}

#[test]
fn adding_an_acked_position_changes_nothing() {
    let mut s = AckSet::new();
    assert!(s.add(p(1, 7)));
    let before = s.clone();
    assert!(!s.add(p(1, 7)));
    assert_eq!(s.add_range(1, 7, 7), 0);
    assert_eq!(s, before);
    assert_eq!(s.len(), 1);
}

#[test]
fn cardinality_counts_across_ledgers() {
    let mut s = AckSet::new();
    s.add_range(1, 0, 99);
    s.add_range(2, 0, 200_000);
    s.add_range(3, 10, 19);
    assert_eq!(s.cardinality_between(p(1, 50), p(3, 14)), 50 + 200_001 + 5);
    assert_eq!(s.cardinality_between(p(2, 1), p(2, 150_000)), 150_000);
    assert_eq!(s.cardinality_between(p(3, 14), p(1, 50)), 0);
    assert_eq!(
        s.cardinality_between(p(0, 0), p(u64::MAX, u64::MAX)),
        s.len()
    );
}

#[test]
fn remove_at_most_leaves_no_empty_ledger_or_partition() {
    let mut s = AckSet::new();
    s.add_range(1, 0, 10);
    s.add_range(2, 0, 70_000);
    s.add(p(3, 1));
    s.remove_at_most(p(2, 70_000));
    assert_eq!(
        s.partitions().map(|(k, _)| k.ledger_id).collect::<Vec<_>>(),
        vec![3]
    );
    assert_eq!(s.len(), 1);
    s.remove_at_most(p(3, 1));
    assert!(s.is_empty());
    assert_eq!(s.partition_count(), 0);
    assert_eq!(s.first_range(), None);
}

#[test]
fn the_largest_entry_ids_are_stored_exactly() {
    let mut s = AckSet::new();
    assert_eq!(s.add_range(1, u64::MAX - 2, u64::MAX), 3);
    assert!(s.add(p(1, 1 << 40)));
    assert!(s.contains(p(1, u64::MAX)));
    assert!(!s.contains(p(1, (1 << 40) + 1)));
    assert!(!s.contains(p(1, 0)));
    assert_eq!(s.span(), Some((p(1, 1 << 40), p(1, u64::MAX))));
    assert_eq!(s.last_range(), Some((p(1, u64::MAX - 2), p(1, u64::MAX))));
}

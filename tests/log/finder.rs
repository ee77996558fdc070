//! The retained ledgers' layout: stepping over empty ledgers and gaps, counts after a mark, and pending entries.

use ackstore::internals::finder::*;
use ackstore::internals::position::Position;

fn span(id: u64, entries: u64, first_index: u64) -> LedgerSpan {
    LedgerSpan {
        id,
        entries,
        first_index,
        first_timestamp: first_index,
        last_timestamp: first_index + entries.saturating_sub(1),
    }
}

/// Ledgers 2 (3 entries), 4 (empty), 7 (2 entries), 9 (empty).
fn layout() -> Layout {
    Layout::new(
        vec![span(2, 3, 0), span(4, 0, 3), span(7, 2, 3), span(9, 0, 5)],
        5,
    )
}

#[test]
fn revealing_every_pending_entry_releases_their_memory() {
    let mut layouts = Layouts::new(Layout::new(vec![span(2, 0, 0)], 0), false);
    for entry in 0..1_000 {
        layouts.appended_mut().set_next_index(entry + 1);
        if let Some(span) = layouts.appended_mut().spans_mut().last_mut() {
            span.entries = entry + 1;
        }
        assert!(!layouts.appended_entry(Position::new(2, entry), entry, entry));
    }
    assert!(layouts.reveal(2, 600));
    assert!(
        layouts.pending.capacity() >= 400,
        "400 entries still pending"
    );
    assert!(layouts.reveal(2, 1_000));
    assert_eq!(layouts.readable().end(), Position::new(2, 1_000));
    assert_eq!(layouts.pending.capacity(), 0);
}

#[test]
fn stepping_skips_empty_ledgers_and_gaps_in_ids() {
    let l = layout();
    assert_eq!(l.first_entry(), Some(Position::new(2, 0)));
    assert_eq!(l.last_entry(), Some(Position::new(7, 1)));
    assert_eq!(l.end(), Position::new(7, 2));
    assert_eq!(l.after(Position::new(2, 2)), Some(Position::new(7, 0)));
    assert_eq!(l.after(Position::new(3, 0)), Some(Position::new(7, 0)));
    assert_eq!(
        l.after(Position::new(2, u64::MAX)),
        Some(Position::new(7, 0))
    );
    assert_eq!(l.after(Position::new(7, 1)), None);
    assert_eq!(l.after_mark(None), Some(Position::new(2, 0)));
    assert_eq!(l.before(Position::new(7, 0)), Some(Position::new(2, 2)));
    assert_eq!(l.before(Position::new(5, 9)), Some(Position::new(2, 2)));
    assert_eq!(l.before(Position::new(7, 99)), Some(Position::new(7, 1)));
    assert_eq!(l.before(Position::new(2, 0)), None);
    assert_eq!(
        l.at_or_after(Position::new(0, 5)),
        Some(Position::new(2, 0))
    );
    assert_eq!(
        l.at_or_after(Position::new(2, 3)),
        Some(Position::new(7, 0))
    );
    assert_eq!(l.at_or_after(Position::new(8, 0)), None);
}

#[test]
fn counts_after_a_mark_span_ledgers() {
    let l = layout();
    assert_eq!(l.count_after(None), 5);
    assert_eq!(l.count_after(Some(Position::new(2, 0))), 4);
    assert_eq!(l.count_after(Some(Position::new(2, 2))), 2);
    assert_eq!(l.count_after(Some(Position::new(1, 7))), 5);
    assert_eq!(l.count_after(Some(Position::new(7, 1))), 0);
    assert_eq!(l.count_after(Some(Position::new(8, 0))), 0);
    assert!(l.contains(Position::new(7, 1)));
    assert!(!l.contains(Position::new(7, 2)));
    assert!(!l.contains(Position::new(4, 0)));
}

#[test]
fn an_empty_layout_has_no_entries() {
    let l = Layout::default();
    assert_eq!(l.first_entry(), None);
    assert_eq!(l.end(), Position::default());
    assert_eq!(l.after_mark(None), None);
    assert_eq!(l.first_index(), 0);
}

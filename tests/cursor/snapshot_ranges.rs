//! A snapshot's ranges: maximal runs, merged only within a ledger.

use ackstore::internals::cursor::snapshot::*;
use roaring::RoaringBitmap;

#[test]
fn runs_are_maximal() {
    let bitmap: RoaringBitmap = [0, 1, 2, 4, 6, 7, u32::MAX].into_iter().collect();
    assert_eq!(
        bitmap_runs(&bitmap).collect::<Vec<_>>(),
        vec![(0, 2), (4, 4), (6, 7), (u32::MAX, u32::MAX)]
    );
}

#[test]
fn touching_ranges_merge_only_within_a_ledger() {
    let mut m = Merger::default();
    assert_eq!(m.push(1, 0, 9), None);
    assert_eq!(m.push(1, 10, 12), None);
    assert_eq!(m.push(2, 13, 13), Some((1, 0, 12)));
    assert_eq!(m.push(2, 15, 15), Some((2, 13, 13)));
    assert_eq!(m.pending, Some((2, 15, 15)));
}

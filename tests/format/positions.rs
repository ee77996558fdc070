//! Positions: their order and encoding.

use ackstore::internals::position::*;

#[test]
fn positions_order_by_ledger_then_entry() {
    assert!(Position::new(1, 99) < Position::new(2, 0));
    assert!(Position::new(2, 0) < Position::new(2, 1));
    assert_eq!(Position::new(3, 4).to_string(), "3:4");
}

//! A cursor whose cursor ledger was damaged on disk (bit rot before the tail) still opens, never
//! reports more acks than were flushed, and moves its state to a new cursor ledger on the next
//! flush instead of failing forever.

use ackstore::internals::log::ledger_file_name;
use ackstore::{CursorOptions, LedgerConfig, ManagedLedger, Position};

#[test]
fn a_damaged_cursor_ledger_recovers_an_older_state_and_the_next_flush_moves_to_a_new_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let config = crate::support::config::on_cursor_ledgers(LedgerConfig::default());
    let ml = ManagedLedger::open(dir.path(), config.clone()).unwrap();
    let positions: Vec<Position> = (0..100).map(|i| ml.append(&[i]).unwrap()).collect();
    ml.sync().unwrap();
    let cursor = ml.open_cursor("c", CursorOptions::default()).unwrap();
    cursor.ack(positions[10]).unwrap();
    cursor.flush().unwrap();
    let ledger = cursor
        .stats()
        .unwrap()
        .persist
        .cursor_ledger
        .expect("a cursor ledger");
    let path = dir.path().join(ledger_file_name(ledger));
    let first_flush_end = std::fs::metadata(&path).unwrap().len();
    cursor.ack(positions[20]).unwrap();
    cursor.flush().unwrap();
    cursor.close().unwrap();
    ml.close().unwrap();

    // Rot one byte inside the first flush's marker; the second flush's entries follow it, so
    // this is damage before the tail, not a torn write.
    let mut bytes = std::fs::read(&path).unwrap();
    let at = usize::try_from(first_flush_end).unwrap() - 6;
    bytes[at] ^= 0x10;
    std::fs::write(&path, bytes).unwrap();

    let ml = ManagedLedger::open(dir.path(), config.clone()).unwrap();
    let cursor = ml.open_cursor("c", CursorOptions::default()).unwrap();
    // Nothing readable after the damage verifies, so the cursor falls back to its record:
    // fewer acks than the truth (a redelivery), never more.
    for (i, p) in positions.iter().enumerate() {
        if cursor.is_acked(*p).unwrap() {
            assert!(i == 10 || i == 20, "entry {i} reported acked but never was");
        }
    }
    cursor.ack(positions[10]).unwrap();
    cursor.ack(positions[30]).unwrap();
    cursor
        .flush()
        .expect("the flush moves to a new cursor ledger");
    let new_ledger = cursor.stats().unwrap().persist.cursor_ledger.unwrap();
    assert_ne!(
        new_ledger, ledger,
        "the damaged ledger is not written to again"
    );
    cursor.close().unwrap();
    ml.close().unwrap();

    let ml = ManagedLedger::open(dir.path(), config).unwrap();
    let cursor = ml.open_cursor("c", CursorOptions::default()).unwrap();
    assert!(cursor.is_acked(positions[10]).unwrap());
    assert!(cursor.is_acked(positions[30]).unwrap());
    assert!(!cursor.is_acked(positions[11]).unwrap());
    assert!(
        !path.exists(),
        "the damaged ledger is deleted once the new one is recorded"
    );
}

//! The in-memory batch table: partial acks of batched messages, evicted and loaded back.

use ackstore::internals::ackset::PartitionKey;
use ackstore::internals::cursor::batch::*;
use ackstore::internals::cursor::batch_store::MemBatchStore;
use ackstore::internals::position::Position;

fn p(ledger_id: u64, entry_id: u64) -> Position {
    Position::new(ledger_id, entry_id)
}

/// Whether message `index` of the entry at `pos` is acknowledged in `b`.
fn contains(b: &mut BatchAcks, pos: Position, index: u32) -> ackstore::Result<bool> {
    Ok(b.acked(pos)?.is_some_and(|a| a.contains(index)))
}

#[test]
fn evicted_partitions_load_back_on_use_and_count_as_partial() {
    let mut b = BatchAcks::with_store(Box::new(MemBatchStore::default()));
    for ledger in 1..=4 {
        for entry in 0..10 {
            assert_eq!(b.ack(p(ledger, entry), 1, 4).unwrap(), BatchAck::Partial);
        }
    }
    b.evict_to(0, false);
    assert_eq!((b.bytes(), b.cold_partitions(), b.len()), (0, 4, 40));
    assert_eq!(b.counters().stores, 4);
    assert!(contains(&mut b, p(2, 3), 1).unwrap());
    assert!(!contains(&mut b, p(2, 3), 2).unwrap());
    assert_eq!((b.cold_partitions(), b.counters().loads), (3, 1));
    // Loaded and unchanged: evicting it again writes nothing.
    b.evict_to(0, false);
    assert_eq!(b.counters().stores, 4);
    // A change makes it unsaved again.
    assert_eq!(b.ack(p(3, 0), 2, 4).unwrap(), BatchAck::Partial);
    b.evict_to(0, false);
    assert_eq!(b.counters().stores, 5);
    assert_eq!(b.partitions().unwrap().len(), 4);
    assert_eq!(b.keys().len(), 4);
}

#[test]
fn trimming_drops_cold_partitions_below_without_loading_them() {
    let mut b = BatchAcks::with_store(Box::new(MemBatchStore::default()));
    for ledger in 1..=3 {
        b.ack(p(ledger, 5), 0, 2).unwrap();
        b.ack(p(ledger, 9), 0, 2).unwrap();
    }
    b.evict_to(0, false);
    b.remove_at_most(p(2, 5)).unwrap();
    assert_eq!(
        b.counters().loads,
        1,
        "only the partition holding 2:5 loads"
    );
    assert_eq!(b.len(), 3);
    assert_eq!(b.acked(p(2, 5)).unwrap(), None);
    assert!(b.acked(p(2, 9)).unwrap().is_some());
    assert!(b.acked(p(3, 5)).unwrap().is_some());
    assert!(b.dirty_keys().contains(&PartitionKey::of(p(1, 5))));
}

#[test]
fn without_a_store_nothing_is_evicted() {
    let mut b = BatchAcks::default();
    b.ack(p(1, 1), 0, 3).unwrap();
    b.evict_to(0, false);
    assert!(b.bytes() > 0);
    assert_eq!(b.cold_partitions(), 0);
}

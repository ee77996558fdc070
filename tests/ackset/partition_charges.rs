//! Partition keys, the joiner of ranges across chunks, and the memory a partition is charged.

use ackstore::internals::ackset::*;
use ackstore::internals::position::Position;
use roaring::RoaringBitmap;

fn key(ledger_id: u64, chunk: u64) -> PartitionKey {
    PartitionKey { ledger_id, chunk }
}

#[test]
fn joiner_joins_across_chunks_but_never_across_ledgers() {
    let top = LAST_OFFSET;
    let mut j = RangeJoiner::new(Direction::Ascending);
    assert_eq!(j.push(key(1, 0), 5, top), None);
    assert_eq!(j.push(key(1, 1), 0, 3), None);
    let first = j.push(key(2, 0), 0, 0);
    assert_eq!(first, Some((Position::new(1, 5), Position::new(1, 65539))));
    assert_eq!(j.finish(), Some((Position::new(2, 0), Position::new(2, 0))));

    let mut j = RangeJoiner::new(Direction::Descending);
    assert_eq!(j.push(key(1, 1), 0, 3), None);
    assert_eq!(j.push(key(1, 0), 5, top), None);
    assert_eq!(
        j.push(key(0, 0), top, top),
        Some((Position::new(1, 5), Position::new(1, 65539)))
    );
}

#[test]
fn clip_reports_whole_partitions_as_none() {
    let from = Position::new(1, 10);
    let to = Position::new(1, 3 << 16);
    assert_eq!(clip(key(1, 0), from, to), Some((10, 65535)));
    assert_eq!(clip(key(1, 1), from, to), None);
    assert_eq!(clip(key(1, 3), from, to), Some((0, 0)));
}

#[test]
fn charge_keeps_the_capacity_that_removed_values_leave_behind() {
    let mut b: RoaringBitmap = (0..4000).map(|v| v * 2).collect();
    let full = Charge::of(&b, Charge::default());
    assert!(full.bytes >= 8000 + PARTITION_OVERHEAD_BYTES);
    b.remove_range(..7990);
    assert_eq!(b.len(), 5);
    assert_eq!(Charge::of(&b, full), full, "the array keeps its capacity");
    assert!(Charge::of(&b.clone(), Charge::default()).bytes < 64 + PARTITION_OVERHEAD_BYTES);
}

#[test]
fn charge_after_single_inserts_equals_the_charge_from_statistics() {
    // Array growth through every reallocation, the conversion to a bitmap container, a
    // full partition made one run by settle, and inserts into a run container.
    let mut b = RoaringBitmap::new();
    let mut charge = Charge::of(&b, Charge::default());
    let insert = |b: &mut RoaringBitmap, v: u32, charge: &mut Charge| {
        let before = *charge;
        assert!(b.insert(v));
        settle_after_insert(b, before, b.len());
        *charge = before.after_change(b, b.len(), true, true);
        assert_eq!(*charge, Charge::of(b, before), "after inserting {v}");
    };
    for v in (0..1 << 16).step_by(3) {
        insert(&mut b, v, &mut charge);
    }
    for v in 0..1 << 16 {
        if !b.contains(v) {
            insert(&mut b, v, &mut charge);
        }
    }
    assert_eq!(b.len(), PARTITION_SPAN);
    assert!(b.serialized_size() < 32, "settled to one run");
    let mut r = RoaringBitmap::new();
    r.insert_range(0..=9);
    r.optimize();
    let mut charge = Charge::of(&r, Charge::default());
    for v in (20..400).step_by(2) {
        insert(&mut r, v, &mut charge);
    }
}

#[test]
fn charge_of_a_run_container_survives_merging_runs() {
    let mut b = RoaringBitmap::new();
    b.insert_range(0..=9);
    let mut charge = Charge::of(&b, Charge::default());
    for v in (20..2000).step_by(2) {
        b.insert(v);
        charge = Charge::of(&b, charge);
    }
    assert_eq!(charge.run_peak, 991);
    for v in (21..2000).step_by(2) {
        b.insert(v);
        charge = Charge::of(&b, charge);
    }
    assert_eq!(b.statistics().n_run_containers, 1);
    assert_eq!(charge.run_peak, 991, "merged runs leave the vector as long");
    assert!(charge.bytes >= 2 * 991 * 4);
    assert!(charge.bytes <= MAX_PARTITION_BYTES);
}

#[test]
fn settle_collapses_a_full_partition_to_one_run() {
    let mut b: RoaringBitmap = (0..1 << 16).collect();
    assert!(b.serialized_size() > 8192);
    settle(&mut b);
    assert!(b.serialized_size() < 32);
}

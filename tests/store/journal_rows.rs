//! Journal index rows: their size, ordered-map behaviour in both forms, and collecting.

use ackstore::internals::ackset::PartitionKey;
use ackstore::internals::format::journal::JournalLoc;
use ackstore::internals::journal::index::PartLoc;
use ackstore::internals::journal::rows::*;
use std::collections::BTreeMap;

fn key(i: u64) -> PartitionKey {
    PartitionKey {
        ledger_id: i % 7,
        chunk: i,
    }
}

fn part(seq: u64) -> PartLoc {
    PartLoc {
        seq,
        loc: JournalLoc {
            segment: 1,
            offset: seq,
        },
        frame_len: 10,
        crc: 0,
        cardinality: 1,
        version: ackstore::internals::format::journal::SEGMENT_VERSION,
    }
}

#[test]
fn a_row_takes_the_64_bytes_the_module_docs_state() {
    assert_eq!(std::mem::size_of::<Row>(), 64);
}

/// A cursor's rows (committed, and pending, in the journal index) take 32 bytes inline: a
/// vector or a B-tree, and which of the two.
#[test]
fn a_cursors_rows_take_32_bytes_inline() {
    assert_eq!(std::mem::size_of::<Rows>(), 32);
}

/// Every operation, through both forms and across the boundary both ways, against a
/// `BTreeMap` model; the sequence of keys is a fixed pseudo-random walk.
#[test]
fn rows_behave_as_an_ordered_map_in_both_forms() {
    let mut rows = Rows::new();
    let mut model = BTreeMap::new();
    let mut x = 7_u64;
    for step in 0..20_000_u64 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        // The key range widens then narrows, so the rows grow past FEW and shrink below.
        let span = 1 + (step / 500 % 8) * 12;
        let k = key((x >> 33) % span);
        match (x >> 20) % 4 {
            0 | 1 => assert_eq!(rows.insert(k, part(step)), model.insert(k, part(step))),
            2 => assert_eq!(rows.remove(&k), model.remove(&k)),
            _ => {
                let cut = (x >> 40) % span;
                rows.retain(|k, _| k.chunk != cut);
                model.retain(|k, _| k.chunk != cut);
            }
        }
        assert_eq!(rows.len(), model.len());
        assert_eq!(rows.get(&k), model.get(&k));
        assert!(rows.iter().eq(model.iter()), "step {step}");
    }
    let collected = Rows::from_pairs(model.iter().rev().map(|(k, p)| (*k, *p)));
    assert_eq!(collected, rows);
}

#[test]
fn collecting_keeps_the_later_of_two_rows_of_a_key_in_both_forms() {
    for n in [3, FEW + 5] {
        let rows = Rows::from_pairs(
            (0..n as u64)
                .map(|i| (key(i), part(i)))
                .chain([(key(1), part(99))]),
        );
        assert_eq!(rows.len(), n);
        assert_eq!(rows.get(&key(1)), Some(&part(99)));
        assert!(rows.keys().zip(rows.keys().skip(1)).all(|(a, b)| a < b));
    }
}

//! The partition index: a sorted vector of a few entries, a B-tree past them, against a
//! `BTreeMap` model through every operation, both sides of the switch.

use std::collections::BTreeMap;
use std::ops::Bound;

use ackstore::internals::ackset::PartitionKey;
use ackstore::internals::ackset::index::{FEW, PartitionIndex};
use proptest::prelude::*;

fn key(ledger_id: u64, chunk: u64) -> PartitionKey {
    PartitionKey { ledger_id, chunk }
}

#[derive(Clone, Debug)]
enum Op {
    Insert(PartitionKey, u32),
    Remove(PartitionKey),
    Change(PartitionKey, u32),
    Clear,
}

/// Keys from a small space, so inserts, removals and lookups meet.
fn a_key() -> impl Strategy<Value = PartitionKey> {
    (0..6u64, 0..4u64).prop_map(|(l, c)| key(l, c))
}

fn an_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (a_key(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
        3 => a_key().prop_map(Op::Remove),
        2 => (a_key(), any::<u32>()).prop_map(|(k, v)| Op::Change(k, v)),
        1 => Just(Op::Clear),
    ]
}

fn bound(b: Option<(PartitionKey, bool)>) -> Bound<PartitionKey> {
    match b {
        None => Bound::Unbounded,
        Some((k, true)) => Bound::Included(k),
        Some((k, false)) => Bound::Excluded(k),
    }
}

/// Every query of `index` answers as `model`'s, ranges of every kind of bound included (a
/// B-tree refuses a range whose start is past its end, so those are not asked).
fn agrees(index: &PartitionIndex<u32>, model: &BTreeMap<PartitionKey, u32>) {
    let all: Vec<_> = index.iter().map(|(k, v)| (*k, *v)).collect();
    let expected: Vec<_> = model.iter().map(|(k, v)| (*k, *v)).collect();
    assert_eq!(all, expected);
    assert_eq!(index.len(), model.len());
    assert_eq!(index.first_key_value(), model.first_key_value());
    assert_eq!(index.last_key_value(), model.last_key_value());
    let keys: Vec<PartitionKey> = (0..7u64)
        .flat_map(|l| (0..5u64).map(move |c| key(l, c)))
        .collect();
    for k in &keys {
        assert_eq!(index.get(k), model.get(k));
    }
    let ends: Vec<Option<(PartitionKey, bool)>> = std::iter::once(None)
        .chain(
            keys.iter()
                .step_by(3)
                .flat_map(|k| [Some((*k, true)), Some((*k, false))]),
        )
        .collect();
    for s in &ends {
        for e in &ends {
            let (s, e) = (bound(*s), bound(*e));
            let valid = match (s, e) {
                (
                    Bound::Included(a) | Bound::Excluded(a),
                    Bound::Included(b) | Bound::Excluded(b),
                ) => {
                    a < b || (a == b && matches!((s, e), (Bound::Included(_), Bound::Included(_))))
                }
                _ => true,
            };
            if !valid {
                continue;
            }
            let got: Vec<_> = index.range((s, e)).map(|(k, v)| (*k, *v)).collect();
            let want: Vec<_> = model.range((s, e)).map(|(k, v)| (*k, *v)).collect();
            assert_eq!(got, want, "range {s:?}..{e:?}");
            let back = index.range((s, e)).next_back().map(|(k, v)| (*k, *v));
            assert_eq!(
                back,
                want.last().copied(),
                "range {s:?}..{e:?} from its end"
            );
        }
    }
}

fn apply(index: &mut PartitionIndex<u32>, model: &mut BTreeMap<PartitionKey, u32>, op: &Op) {
    match *op {
        Op::Insert(k, v) => assert_eq!(index.insert(k, v), model.insert(k, v)),
        Op::Remove(k) => assert_eq!(index.remove(&k), model.remove(&k)),
        Op::Change(k, v) => {
            let got = index.get_mut(&k).map(|x| std::mem::replace(x, v));
            let want = model.get_mut(&k).map(|x| std::mem::replace(x, v));
            assert_eq!(got, want);
        }
        Op::Clear => {
            index.clear();
            model.clear();
        }
    }
}

proptest! {
    #[test]
    fn partition_index_answers_as_a_btree_map(ops in prop::collection::vec(an_op(), 1..80)) {
        let mut index = PartitionIndex::default();
        let mut model = BTreeMap::new();
        for op in &ops {
            apply(&mut index, &mut model, op);
            agrees(&index, &model);
            // The vector never holds more than a few.
            if let PartitionIndex::Few(v) = &index {
                prop_assert!(v.len() <= FEW);
            }
        }
    }
}

#[test]
fn a_partition_index_of_one_entry_holds_one_entry_of_heap() {
    let mut index = PartitionIndex::default();
    index.insert(key(1, 0), 7u64);
    let PartitionIndex::Few(v) = &index else {
        panic!("one entry is kept in the vector");
    };
    assert_eq!(v.capacity(), 1);
    for l in 2..=u64::try_from(FEW).expect("FEW fits") + 1 {
        index.insert(key(l, 0), l);
    }
    assert!(
        matches!(index, PartitionIndex::Many(_)),
        "past FEW entries: a B-tree"
    );
    index.clear();
    assert!(matches!(&index, PartitionIndex::Few(v) if v.capacity() == 0));
}

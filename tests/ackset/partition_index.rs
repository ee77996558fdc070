//! The partition index: a sorted vector of a few entries, a B-tree past them and back to the
//! vector at half, against a `BTreeMap` model through every operation, at both bounds the crate
//! uses (the ack set's 8 and the journal rows' 32), both sides of each switch.

use std::collections::BTreeMap;
use std::ops::Bound;

use ackstore::internals::ackset::PartitionKey;
use ackstore::internals::ackset::index::PartitionIndex;
use ackstore::internals::ackset::wrapper::INDEX_FEW;
use ackstore::internals::journal::rows::FEW as ROWS_FEW;
use proptest::prelude::*;

type Model = BTreeMap<PartitionKey, u32>;

/// Chunks per ledger in the key space.
const CHUNKS: u64 = 4;

fn key(ledger_id: u64, chunk: u64) -> PartitionKey {
    PartitionKey { ledger_id, chunk }
}

#[derive(Clone, Debug)]
enum Op {
    Insert(PartitionKey, u32),
    Remove(PartitionKey),
    Change(PartitionKey, u32),
    /// Keeps the keys of the other chunks.
    Retain(u64),
    /// Adds one to every value.
    Bump,
    /// Collects the model's entries anew, each after a stale value of its key.
    Rebuild,
    Clear,
}

/// Keys from `ledgers * CHUNKS` of them (twice the bound), so inserts, removals and lookups
/// meet and the index crosses its bound both ways.
fn a_key(ledgers: u64) -> impl Strategy<Value = PartitionKey> {
    (0..ledgers, 0..CHUNKS).prop_map(|(l, c)| key(l, c))
}

/// An operation of a phase that fills the index (inserts most, never clears) or drains it
/// (removes most, retains, clears).
fn an_op(ledgers: u64, filling: bool) -> BoxedStrategy<Op> {
    let insert = (a_key(ledgers), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v));
    let remove = a_key(ledgers).prop_map(Op::Remove);
    let change = (a_key(ledgers), any::<u32>()).prop_map(|(k, v)| Op::Change(k, v));
    if filling {
        prop_oneof![
            60 => insert,
            6 => remove,
            4 => change,
            1 => Just(Op::Bump),
            2 => Just(Op::Rebuild),
        ]
        .boxed()
    } else {
        prop_oneof![
            6 => insert,
            60 => remove,
            4 => change,
            6 => (0..CHUNKS).prop_map(Op::Retain),
            1 => Just(Op::Bump),
            2 => Just(Op::Rebuild),
            1 => Just(Op::Clear),
        ]
        .boxed()
    }
}

/// Phases of filling and draining in turn, the first filling, each long enough to cross the
/// bound `few` of a key space of twice its keys.
fn some_ops(few: usize) -> impl Strategy<Value = Vec<Op>> {
    let ledgers = ledgers(few);
    (1..8usize)
        .prop_flat_map(move |phases| {
            (0..phases)
                .map(|i| prop::collection::vec(an_op(ledgers, i % 2 == 0), few * 2..few * 4))
                .collect::<Vec<_>>()
        })
        .prop_map(|phases| phases.concat())
}

fn bound(b: Option<(PartitionKey, bool)>) -> Bound<PartitionKey> {
    match b {
        None => Bound::Unbounded,
        Some((k, true)) => Bound::Included(k),
        Some((k, false)) => Bound::Excluded(k),
    }
}

/// Whether a B-tree takes the range (it refuses a start past the end).
fn valid(s: Bound<PartitionKey>, e: Bound<PartitionKey>) -> bool {
    match (s, e) {
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
            a < b || (a == b && matches!((s, e), (Bound::Included(_), Bound::Included(_))))
        }
        _ => true,
    }
}

/// Every range query of `index` answers as `model`'s, with every kind of bound at about six
/// keys of the space of `ledgers` (and one past it).
fn ranges_agree<const FEW: usize>(index: &PartitionIndex<u32, FEW>, model: &Model, ledgers: u64) {
    let keys: Vec<PartitionKey> = (0..=ledgers)
        .flat_map(|l| (0..=CHUNKS).map(move |c| key(l, c)))
        .collect();
    let step = (keys.len() / 6).max(1);
    let ends: Vec<Option<(PartitionKey, bool)>> = std::iter::once(None)
        .chain(
            keys.iter()
                .step_by(step)
                .flat_map(|k| [Some((*k, true)), Some((*k, false))]),
        )
        .collect();
    for s in &ends {
        for e in &ends {
            let (s, e) = (bound(*s), bound(*e));
            if !valid(s, e) {
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

/// Every query of `index` answers as `model`'s.
fn agrees<const FEW: usize>(index: &PartitionIndex<u32, FEW>, model: &Model, ledgers: u64) {
    let all: Vec<_> = index.iter().map(|(k, v)| (*k, *v)).collect();
    let expected: Vec<_> = model.iter().map(|(k, v)| (*k, *v)).collect();
    assert_eq!(all, expected);
    assert!(index.keys().eq(model.keys()));
    assert!(index.values().eq(model.values()));
    assert_eq!(index.len(), model.len());
    assert_eq!(index.is_empty(), model.is_empty());
    assert_eq!(index.first_key_value(), model.first_key_value());
    assert_eq!(index.last_key_value(), model.last_key_value());
    for l in 0..=ledgers {
        for c in 0..=CHUNKS {
            let k = key(l, c);
            assert_eq!(index.get(&k), model.get(&k));
            assert_eq!(index.contains_key(&k), model.contains_key(&k));
        }
    }
    ranges_agree(index, model, ledgers);
}

/// The index the model's entries collect into, each key given first with a stale value and
/// then, in descending order, with its own (the later stands); it equals `index` whatever the
/// forms, and differs from it once a value differs.
fn rebuilt<const FEW: usize>(
    index: &PartitionIndex<u32, FEW>,
    model: &Model,
) -> PartitionIndex<u32, FEW> {
    let stale = model.iter().map(|(k, v)| (*k, v.wrapping_add(7)));
    let fresh = model.iter().rev().map(|(k, v)| (*k, *v));
    let collected = PartitionIndex::from_pairs(stale.chain(fresh));
    assert!(collected == *index, "collected equals the index");
    if let Some((k, v)) = model.first_key_value() {
        let mut changed = collected.clone();
        changed.insert(*k, v.wrapping_add(1));
        assert!(changed != *index, "a changed value makes an unequal index");
    }
    collected
}

/// Applies `op` to both; returns whether it removed entries only (the index may go back to the
/// vector) or `None` for one that makes the form anew (clear, collect).
fn apply<const FEW: usize>(
    index: &mut PartitionIndex<u32, FEW>,
    model: &mut Model,
    op: &Op,
) -> Option<bool> {
    match *op {
        Op::Insert(k, v) => assert_eq!(index.insert(k, v), model.insert(k, v)),
        Op::Remove(k) => {
            assert_eq!(index.remove(&k), model.remove(&k));
            return Some(true);
        }
        Op::Change(k, v) => {
            let got = index.get_mut(&k).map(|x| std::mem::replace(x, v));
            let want = model.get_mut(&k).map(|x| std::mem::replace(x, v));
            assert_eq!(got, want);
        }
        Op::Retain(chunk) => {
            index.retain(|k, _| k.chunk != chunk);
            model.retain(|k, _| k.chunk != chunk);
            return Some(true);
        }
        Op::Bump => {
            index.values_mut().for_each(|v| *v = v.wrapping_add(1));
            model.values_mut().for_each(|v| *v = v.wrapping_add(1));
        }
        Op::Rebuild => {
            *index = rebuilt(index, model);
            return None;
        }
        Op::Clear => {
            index.clear();
            model.clear();
            return None;
        }
    }
    Some(false)
}

/// Runs `ops` on an index of bound `FEW` and on the model, checking every answer and the form
/// after each: a B-tree from an insert past `FEW` until a removal leaves `FEW / 2` or fewer.
fn run<const FEW: usize>(ops: &[Op], ledgers: u64) {
    let mut index = PartitionIndex::<u32, FEW>::new();
    let mut model = Model::new();
    let mut many = false;
    for op in ops {
        many = match apply(&mut index, &mut model, op) {
            None => model.len() > FEW,
            Some(true) => many && model.len() > FEW / 2,
            Some(false) => many || model.len() > FEW,
        };
        agrees(&index, &model, ledgers);
        assert_eq!(
            index.vector_capacity().is_none(),
            many,
            "a B-tree at {} entries after {op:?}",
            model.len()
        );
        if let Some(capacity) = index.vector_capacity() {
            assert!(capacity <= FEW, "the vector never holds more than FEW");
        }
    }
}

/// Ledgers of the key space of bound `few`: twice the bound's keys.
fn ledgers(few: usize) -> u64 {
    u64::try_from(few).expect("bound fits") * 2 / CHUNKS
}

proptest! {
    #[test]
    fn the_ack_sets_partition_index_answers_as_a_btree_map(
        ops in some_ops(INDEX_FEW),
    ) {
        run::<INDEX_FEW>(&ops, ledgers(INDEX_FEW));
    }

    #[test]
    fn the_journals_rows_answer_as_a_btree_map(
        ops in some_ops(ROWS_FEW),
    ) {
        run::<ROWS_FEW>(&ops, ledgers(ROWS_FEW));
    }
}

/// One entry takes one entry of heap; past `FEW` a B-tree; back to a vector of exactly the
/// entries at half of `FEW`, not before; none once empty.
fn heap_follows_the_entries<const FEW: usize>() {
    let mut index = PartitionIndex::<u64, FEW>::new();
    index.insert(key(1, 0), 7);
    assert_eq!(
        index.vector_capacity(),
        Some(1),
        "one entry: one entry of heap"
    );
    let few = u64::try_from(FEW).expect("FEW fits");
    for l in 2..=few {
        index.insert(key(l, 0), l);
    }
    assert_eq!(
        index.vector_capacity(),
        Some(FEW),
        "FEW entries: the vector"
    );
    index.insert(key(few + 1, 0), 0);
    assert_eq!(index.vector_capacity(), None, "past FEW entries: a B-tree");
    for l in (few / 2 + 2..=few + 1).rev() {
        index.remove(&key(l, 0));
        assert_eq!(index.vector_capacity(), None, "still a B-tree above half");
    }
    index.remove(&key(few / 2 + 1, 0));
    assert_eq!(
        index.vector_capacity(),
        Some(FEW / 2),
        "at half: the vector"
    );
    index.retain(|_, _| false);
    assert_eq!(index.vector_capacity(), Some(0), "empty: no heap");
    index.insert(key(1, 0), 1);
    index.clear();
    assert_eq!(index.vector_capacity(), Some(0), "cleared: no heap");
}

#[test]
fn a_partition_index_holds_the_heap_of_its_entries_at_both_bounds() {
    heap_follows_the_entries::<INDEX_FEW>();
    heap_follows_the_entries::<ROWS_FEW>();
}

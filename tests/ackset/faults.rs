//! The wrapper against a `BTreeSet<Position>` model while its partition store fails loads and
//! stores at chosen steps, under budgets of nothing, one partition and a few: every answer that
//! is not an error equals the model's, a failed operation changes nothing it does not document,
//! no ack is invented or lost, and the resident bytes stay within the budget plus one partition
//! plus what the store could not take.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use ackstore::internals::ackset::{
    MAX_PARTITION_BYTES, MemPartitionStore, PARTITION_OVERHEAD_BYTES, PartitionKey, PartitionStore,
    RangeSetWrapper,
};
use ackstore::{Error, Position, Result};
use proptest::prelude::*;
use roaring::RoaringBitmap;

use crate::model::model_ranges;
use crate::support;

/// The store and the faults to inject into it, shared by the test and the wrapper.
#[derive(Default)]
struct Faults {
    inner: MemPartitionStore,
    /// The next this many loads fail.
    failing_loads: u32,
    /// Every store fails while set.
    stores_fail: bool,
}

#[derive(Clone, Default)]
struct FaultyStore(Arc<Mutex<Faults>>);

impl FaultyStore {
    fn with<R>(&self, f: impl FnOnce(&mut Faults) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

fn injected(what: &str) -> Error {
    Error::Unsupported {
        what: format!("injected {what} failure"),
    }
}

impl PartitionStore for FaultyStore {
    fn load(&mut self, key: PartitionKey) -> Result<Option<RoaringBitmap>> {
        self.with(|f| {
            if f.failing_loads > 0 {
                f.failing_loads -= 1;
                return Err(injected("load"));
            }
            f.inner.load(key)
        })
    }
    fn store(&mut self, key: PartitionKey, bitmap: &RoaringBitmap) -> Result<()> {
        self.with(|f| {
            if f.stores_fail {
                return Err(injected("store"));
            }
            f.inner.store(key, bitmap)
        })
    }
    fn forget(&mut self, key: PartitionKey) {
        self.with(|f| f.inner.forget(key));
    }
}

#[derive(Clone, Debug)]
enum Op {
    Add(Position),
    AddMany(Vec<Position>),
    AddRange(u64, u64, u64),
    RemoveAtMost(Position),
    Contains(Position),
    FirstRange,
    Ranges,
    Bitmap(PartitionKey),
    /// Writes every dirty partition through the store and marks it persisted; when every write
    /// succeeded, stores are resumed, and with `reopen` the wrapper is reopened from the index.
    Flush {
        reopen: bool,
    },
    Clear,
    FailLoads(u32),
    FailStores(bool),
    HoldStores,
}

/// Few ledgers, entries in three chunks each, so a dozen partitions exist: the slab grows past
/// the slots it scans into a table, and shrinks back when they are dropped.
fn entry_id() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..20, 65_530u64..65_545, 131_070u64..131_080]
}

fn position() -> impl Strategy<Value = Position> {
    (1u64..5, entry_id()).prop_map(|(l, e)| Position::new(l, e))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => position().prop_map(Op::Add),
        3 => prop_oneof![
            // In one ledger (ordered by partition) and across ledgers.
            (1u64..5, prop::collection::vec(entry_id(), 0..140))
                .prop_map(|(l, es)| es.into_iter().map(|e| Position::new(l, e)).collect()),
            prop::collection::vec(position(), 0..140),
        ]
        .prop_map(Op::AddMany),
        3 => (1u64..5, entry_id(), 0u64..70_000)
            .prop_map(|(l, first, len)| Op::AddRange(l, first, first + len % 40_000)),
        2 => position().prop_map(Op::RemoveAtMost),
        3 => position().prop_map(Op::Contains),
        1 => Just(Op::FirstRange),
        1 => Just(Op::Ranges),
        1 => position().prop_map(|p| Op::Bitmap(PartitionKey::of(p))),
        2 => any::<bool>().prop_map(|reopen| Op::Flush { reopen }),
        1 => prop_oneof![9 => Just(Op::Ranges), 1 => Just(Op::Clear)],
        2 => (1u32..4).prop_map(Op::FailLoads),
        2 => any::<bool>().prop_map(Op::FailStores),
        1 => Just(Op::HoldStores),
    ]
}

fn model_bitmap(model: &BTreeSet<Position>, key: PartitionKey) -> Option<RoaringBitmap> {
    let bitmap: RoaringBitmap = model
        .iter()
        .filter(|p| PartitionKey::of(**p) == key)
        .map(|p| PartitionKey::offset_of(p.entry_id))
        .collect();
    (!bitmap.is_empty()).then_some(bitmap)
}

/// Every position of the wrapper, read with faults off.
fn contents(w: &mut RangeSetWrapper, store: &FaultyStore) -> BTreeSet<Position> {
    let saved = store.with(|f| std::mem::take(&mut f.failing_loads));
    let mut out = BTreeSet::new();
    for (from, to) in w.ranges().expect("ranges with loads working") {
        for e in from.entry_id..=to.entry_id {
            out.insert(Position::new(from.ledger_id, e));
        }
    }
    store.with(|f| f.failing_loads = saved);
    out
}

/// The wrapper's contents after an add that failed, checked against the `model` before it:
/// nothing lost, and nothing added that the call was not `given`.
fn after_failed_add(
    model: &BTreeSet<Position>,
    w: &mut RangeSetWrapper,
    store: &FaultyStore,
    given: impl Fn(&Position) -> bool,
) -> BTreeSet<Position> {
    let now = contents(w, store);
    assert!(model.is_subset(&now), "an ack was lost");
    assert!(
        now.iter().all(|p| model.contains(p) || given(p)),
        "an ack was invented"
    );
    now
}

/// Writes every dirty partition as the persistence layer does; `true` when all were written.
fn flush(w: &mut RangeSetWrapper) -> bool {
    for key in w.dirty_keys() {
        let Ok(bitmap) = w.bitmap(key) else {
            return false;
        };
        let bitmap = bitmap.expect("a dirty key is live");
        if w.store_mut().store(key, &bitmap).is_err() {
            return false;
        }
        w.mark_persisted(key);
    }
    w.resume_stores();
    true
}

/// Applies `op` to the wrapper and the model, comparing every answer that is not an error.
fn step(
    op: &Op,
    model: &mut BTreeSet<Position>,
    w: &mut RangeSetWrapper,
    store: &FaultyStore,
    budget: usize,
) {
    match *op {
        Op::Add(p) => {
            if let Ok(added) = w.add(p) {
                assert_eq!(added, model.insert(p), "add {p}");
            }
        }
        Op::AddMany(ref ps) => {
            let expected = ps
                .iter()
                .filter(|p| !model.contains(p))
                .collect::<BTreeSet<_>>();
            match w.add_many(ps.iter().copied()) {
                Ok(added) => {
                    assert_eq!(added, expected.len() as u64, "add_many {ps:?}");
                    model.extend(ps.iter().copied());
                }
                // Documented: some of the positions may have been added, and nothing else.
                Err(_) => *model = after_failed_add(model, w, store, |p| ps.contains(p)),
            }
        }
        Op::AddRange(l, first, last) => {
            // The model after the range, without copying it: its members plus `range`.
            let range = Position::new(l, first)..=Position::new(l, last);
            let present = model.range(range.clone()).count() as u64;
            let expected = last - first + 1 - present;
            match w.add_range(l, first, last) {
                Ok(added) => {
                    assert_eq!(added, expected, "add_range {l}:{first}..={last}");
                    model.extend((first..=last).map(|e| Position::new(l, e)));
                }
                // Documented: the part of the range before the failing partition may have
                // been added, and nothing else.
                Err(_) => *model = after_failed_add(model, w, store, |p| range.contains(p)),
            }
        }
        Op::RemoveAtMost(p) => {
            if w.remove_at_most(p).is_ok() {
                *model = model.split_off(&p);
                model.remove(&p);
            }
        }
        Op::Contains(p) => {
            if let Ok(found) = w.contains(p) {
                assert_eq!(found, model.contains(&p), "contains {p}");
            }
        }
        Op::FirstRange => {
            if let Ok(first) = w.first_range() {
                assert_eq!(first, model_ranges(model).first().copied());
            }
        }
        Op::Ranges => {
            if let Ok(ranges) = w.ranges() {
                assert_eq!(ranges, model_ranges(model));
            }
        }
        Op::Bitmap(key) => {
            if let Ok(bitmap) = w.bitmap(key) {
                assert_eq!(bitmap, model_bitmap(model, key), "{key:?}");
            }
        }
        Op::Flush { reopen } => {
            if flush(w) && reopen {
                let index = w.partitions();
                *w = RangeSetWrapper::with_index(Box::new(store.clone()), budget, index);
            }
        }
        Op::Clear => {
            w.clear();
            model.clear();
        }
        Op::FailLoads(n) => store.with(|f| f.failing_loads = n),
        Op::FailStores(fail) => store.with(|f| f.stores_fail = fail),
        Op::HoldStores => w.hold_stores(),
    }
}

/// Budgets of nothing, about one small partition, two, and eight (the slab needs a table).
fn budget() -> impl Strategy<Value = usize> {
    let one = PARTITION_OVERHEAD_BYTES + 64;
    prop_oneof![
        Just(0),
        Just(one),
        Just(2 * one),
        Just(8 * one),
        0usize..3_000
    ]
}

proptest! {
    #![proptest_config(support::harness::proptest_config(
        if cfg!(debug_assertions) { 64 } else { 512 }
    ))]

    #[test]
    fn wrapper_answers_like_the_model_while_its_store_fails_loads_and_stores(
        budget in budget(),
        ops in prop::collection::vec(op(), 1..100),
    ) {
        let store = FaultyStore::default();
        let mut w = RangeSetWrapper::new(Box::new(store.clone()), budget);
        let mut model = BTreeSet::new();
        for op in &ops {
            step(op, &mut model, &mut w, &store, budget);
            prop_assert_eq!(w.len(), model.len() as u64, "after {:?}", op);
            let stats = w.stats();
            prop_assert_eq!(stats.dirty_partitions, w.dirty_keys().len());
            let pinned = stats.pinned_partitions;
            prop_assert!(
                stats.resident_bytes <= budget + (pinned + 1) * MAX_PARTITION_BYTES,
                "after {:?}: {:?}", op, stats
            );
        }
        // Nothing invented or lost, read with the faults gone, and again after a reopen from
        // what a successful flush wrote.
        store.with(|f| {
            f.failing_loads = 0;
            f.stores_fail = false;
        });
        // Compared as maximal ranges, which name one set each.
        let ranges = model_ranges(&model);
        prop_assert_eq!(w.ranges().expect("ranges with the faults gone"), ranges.clone());
        prop_assert!(flush(&mut w));
        prop_assert_eq!(w.stats().pinned_partitions, 0);
        let index = w.partitions();
        let mut reopened = RangeSetWrapper::with_index(Box::new(store.clone()), budget, index);
        prop_assert_eq!(reopened.ranges().expect("ranges after a reopen"), ranges);
    }
}

//! The ack sets against a plain `BTreeSet<Position>` model: random operation sequences on an
//! `AckSet` and on a `RangeSetWrapper` whose budget is so small that partitions are evicted and
//! reloaded all the time, with flush-and-reopen through a lazy index; and the wrapper against
//! `AckSet` itself with ranges that cross several chunks, the budget checked after every step.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use ackstore::Position;
use ackstore::Result;
use ackstore::internals::ackset::{
    AckSet, AckSetStats, MAX_PARTITION_BYTES, MemPartitionStore, PartitionKey, PartitionStore,
    RangeSetWrapper,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use roaring::RoaringBitmap;

/// A store shared between successive wrappers, like the cursor ledger outlives a cursor handle.
#[derive(Clone, Default)]
struct SharedStore(Arc<Mutex<MemPartitionStore>>);

impl SharedStore {
    fn with<R>(&self, f: impl FnOnce(&mut MemPartitionStore) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl PartitionStore for SharedStore {
    fn load(&mut self, key: PartitionKey) -> Result<Option<RoaringBitmap>> {
        self.with(|s| s.load(key))
    }
    fn store(&mut self, key: PartitionKey, bitmap: &RoaringBitmap) -> Result<()> {
        self.with(|s| s.store(key, bitmap))
    }
    fn forget(&mut self, key: PartitionKey) {
        self.with(|s| s.forget(key));
    }
}

#[derive(Clone, Debug)]
enum Op {
    Add(Position),
    AddMany(Vec<Position>),
    AddRange(u64, u64, u64),
    RemoveAtMost(Position),
    Contains(Position),
    Ranges,
    FirstRange,
    LastRange,
    RangeCount,
    CardinalityBetween(Position, Position),
    Span,
    Clear,
    FlushAndReopen,
}

/// Entry ids clustered at chunk boundaries (so ranges cross them) and at the top of `u64`.
fn entry_id() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..40,
        65_520u64..65_560,
        131_060u64..131_080,
        (u64::MAX - 30)..=u64::MAX,
    ]
}

fn position() -> impl Strategy<Value = Position> {
    (0u64..4, entry_id()).prop_map(|(l, e)| Position::new(l, e))
}

/// Groups for `add_many`, up to twice the group it takes at a time: in one ledger within two
/// partitions or 63 apart (ordered by partition), 64 apart (taken as they come), and anywhere.
pub(crate) fn positions() -> impl Strategy<Value = Vec<Position>> {
    let group = |last_chunk: u64| {
        let far = last_chunk << 16;
        (
            0u64..4,
            prop::collection::vec(
                prop_oneof![0u64..40, 65_520u64..65_560, far..far + 4],
                0..140,
            ),
        )
            .prop_map(|(l, es)| es.into_iter().map(|e| Position::new(l, e)).collect())
    };
    prop_oneof![
        group(2),
        group(63),
        group(64),
        prop::collection::vec(position(), 0..140),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => position().prop_map(Op::Add),
        2 => positions().prop_map(Op::AddMany),
        3 => (0u64..4, entry_id(), 0u64..80)
            .prop_map(|(l, first, len)| Op::AddRange(l, first, first.saturating_add(len))),
        1 => position().prop_map(Op::RemoveAtMost),
        2 => position().prop_map(Op::Contains),
        1 => Just(Op::Ranges),
        1 => Just(Op::FirstRange),
        1 => Just(Op::LastRange),
        1 => Just(Op::RangeCount),
        2 => (position(), position()).prop_map(|(a, b)| Op::CardinalityBetween(a, b)),
        1 => Just(Op::Span),
        1 => prop_oneof![9 => Just(false), 1 => Just(true)].prop_map(|c| if c { Op::Clear } else { Op::Ranges }),
        1 => Just(Op::FlushAndReopen),
    ]
}

pub(crate) fn model_ranges(model: &BTreeSet<Position>) -> Vec<(Position, Position)> {
    let mut out: Vec<(Position, Position)> = Vec::new();
    for &p in model {
        match out.last_mut() {
            Some((_, last))
                if last.ledger_id == p.ledger_id
                    && last.entry_id.checked_add(1) == Some(p.entry_id) =>
            {
                *last = p;
            }
            _ => out.push((p, p)),
        }
    }
    out
}

/// The wrapper under test and what it needs to be reopened.
struct Subject {
    wrapper: RangeSetWrapper,
    store: SharedStore,
    budget: usize,
    /// (loads, evictions, stores) of every wrapper this subject has had.
    totals: (u64, u64, u64),
}

impl Subject {
    fn new(budget: usize) -> Self {
        let store = SharedStore::default();
        Self {
            wrapper: RangeSetWrapper::new(Box::new(store.clone()), budget),
            store,
            budget,
            totals: (0, 0, 0),
        }
    }

    /// Adds the current wrapper's counters to the totals (before it is replaced or dropped).
    fn retire_counters(&mut self) {
        let s = self.wrapper.stats();
        self.totals.0 += s.loads;
        self.totals.1 += s.evictions;
        self.totals.2 += s.stores;
    }

    /// Writes every dirty partition to the store, marks it clean, and reopens from the index.
    fn flush_and_reopen(&mut self) {
        for key in self.wrapper.dirty_keys() {
            let bitmap = self
                .wrapper
                .bitmap(key)
                .expect("bitmap")
                .expect("dirty key is live");
            self.wrapper.store_mut().store(key, &bitmap).expect("store");
            self.wrapper.mark_clean(key);
        }
        let index = self.wrapper.partitions();
        self.retire_counters();
        self.wrapper =
            RangeSetWrapper::with_index(Box::new(self.store.clone()), self.budget, index);
    }
}

/// Applies one operation to the model, the set and the wrapper, comparing every answer.
fn step(op: &Op, model: &mut BTreeSet<Position>, set: &mut AckSet, w: &mut Subject) {
    let wr = &mut w.wrapper;
    match *op {
        Op::Add(p) => {
            let expected = model.insert(p);
            assert_eq!(set.add(p), expected);
            assert_eq!(wr.add(p).expect("add"), expected);
        }
        Op::AddMany(ref ps) => {
            let before = model.len();
            model.extend(ps.iter().copied());
            let added = (model.len() - before) as u64;
            assert_eq!(ps.iter().filter(|p| set.add(**p)).count() as u64, added);
            assert_eq!(wr.add_many(ps.iter().copied()).expect("add_many"), added);
        }
        Op::AddRange(l, first, last) => {
            let before = model.len();
            let mut e = first;
            loop {
                model.insert(Position::new(l, e));
                if e == last {
                    break;
                }
                e += 1;
            }
            let added = (model.len() - before) as u64;
            assert_eq!(set.add_range(l, first, last), added);
            assert_eq!(wr.add_range(l, first, last).expect("add_range"), added);
        }
        Op::RemoveAtMost(p) => {
            *model = model.split_off(&p);
            model.remove(&p);
            set.remove_at_most(p);
            wr.remove_at_most(p).expect("remove_at_most");
        }
        Op::Contains(p) => {
            assert_eq!(set.contains(p), model.contains(&p));
            assert_eq!(wr.contains(p).expect("contains"), model.contains(&p));
        }
        Op::Ranges => {
            let expected = model_ranges(model);
            assert_eq!(set.ranges().collect::<Vec<_>>(), expected);
            assert_eq!(wr.ranges().expect("ranges"), expected);
        }
        Op::FirstRange => {
            let expected = model_ranges(model).first().copied();
            assert_eq!(set.first_range(), expected);
            assert_eq!(wr.first_range().expect("first_range"), expected);
        }
        Op::LastRange => {
            let expected = model_ranges(model).last().copied();
            assert_eq!(set.last_range(), expected);
            assert_eq!(wr.last_range().expect("last_range"), expected);
        }
        Op::RangeCount => {
            let expected = model_ranges(model).len() as u64;
            assert_eq!(set.range_count(), expected);
            assert_eq!(wr.range_count().expect("range_count"), expected);
        }
        Op::CardinalityBetween(a, b) => {
            let expected = if a <= b {
                model.range(a..=b).count() as u64
            } else {
                0
            };
            assert_eq!(set.cardinality_between(a, b), expected);
            assert_eq!(wr.cardinality_between(a, b).expect("cardinality"), expected);
        }
        Op::Span => {
            let expected = model.first().copied().zip(model.last().copied());
            assert_eq!(set.span(), expected);
            assert_eq!(wr.span().expect("span"), expected);
        }
        Op::Clear => {
            model.clear();
            set.clear();
            wr.clear();
        }
        Op::FlushAndReopen => w.flush_and_reopen(),
    }
}

/// Every partition is live, non-empty, and holds exactly the model's positions in its span.
fn check_partitions(model: &BTreeSet<Position>, set: &AckSet, w: &RangeSetWrapper) {
    let mut expected: Vec<(PartitionKey, u64)> = Vec::new();
    for &p in model {
        let key = PartitionKey::of(p);
        match expected.last_mut() {
            Some((k, n)) if *k == key => *n += 1,
            _ => expected.push((key, 1)),
        }
    }
    assert_eq!(w.partitions(), expected);
    let set_parts: Vec<(PartitionKey, u64)> = set.partitions().map(|(k, b)| (k, b.len())).collect();
    assert_eq!(set_parts, expected);
}

#[test]
fn both_sets_match_the_model_while_partitions_are_evicted_and_reloaded() {
    // Budgets from nothing to a few small partitions: eviction on almost every touch.
    against_the_model(0..1_000, 1_000);
}

/// As [`both_sets_match_the_model_while_partitions_are_evicted_and_reloaded`], under budgets
/// that keep several partitions resident, so that `add_many` finds them in their lists and
/// grows them there.
#[test]
fn both_sets_match_the_model_with_several_partitions_resident() {
    against_the_model(1_000..12_000, 200);
}

/// Random operation sequences on the sets against the model, under a budget from `budgets`,
/// the bounds and counters checked after every step; at least `moves` loads, evictions and
/// stores in all.
fn against_the_model(budgets: std::ops::Range<usize>, moves: u64) {
    let mut runner = TestRunner::new(Config {
        cases: if cfg!(debug_assertions) { 128 } else { 2_048 },
        failure_persistence: None,
        ..Config::default()
    });
    let (loads, evictions, stores) = (Cell::new(0u64), Cell::new(0u64), Cell::new(0u64));
    let strategy = (budgets, prop::collection::vec(op(), 1..120));
    runner
        .run(&strategy, |(budget, ops)| {
            let mut model = BTreeSet::new();
            let mut set = AckSet::new();
            let mut subject = Subject::new(budget);
            for op in &ops {
                step(op, &mut model, &mut set, &mut subject);
                let stats = subject.wrapper.stats();
                assert_eq!(subject.wrapper.len(), model.len() as u64);
                assert_eq!(set.len(), model.len() as u64);
                assert_within_budget(&stats, budget);
                assert_eq!(stats.dirty_partitions, subject.wrapper.dirty_keys().len());
            }
            check_partitions(&model, &set, &subject.wrapper);
            assert_eq!(
                subject.wrapper.ranges().expect("ranges"),
                model_ranges(&model)
            );
            subject.retire_counters();
            let (l, e, s) = subject.totals;
            loads.set(loads.get() + l);
            evictions.set(evictions.get() + e);
            stores.set(stores.get() + s);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(loads.get() > moves, "loads {}", loads.get());
    assert!(evictions.get() > moves, "evictions {}", evictions.get());
    assert!(stores.get() > moves, "stores {}", stores.get());
}

/// One step of the wrapper-against-`AckSet` comparison: long ranges that cross several chunks and
/// mark-delete moves, with the queries checked after each.
#[derive(Clone, Debug)]
enum PairOp {
    Add(Position),
    AddMany(Vec<Position>),
    AddRange(u64, u64, u64),
    RemoveAtMost(Position),
    Query(Position, Position),
}

fn pair_op() -> impl Strategy<Value = PairOp> {
    let entry = prop_oneof![
        0u64..300,
        65_400u64..65_700,
        131_000u64..131_200,
        (u64::MAX - 5)..=u64::MAX,
    ];
    let pos = (1u64..4, entry.clone()).prop_map(|(l, e)| Position::new(l, e));
    prop_oneof![
        6 => pos.clone().prop_map(PairOp::Add),
        2 => positions().prop_map(PairOp::AddMany),
        2 => (1u64..4, entry, 0u64..70_000)
            .prop_map(|(l, first, n)| PairOp::AddRange(l, first, first.saturating_add(n))),
        1 => pos.clone().prop_map(PairOp::RemoveAtMost),
        2 => (pos.clone(), pos).prop_map(|(a, b)| PairOp::Query(a, b)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(debug_assertions) { 64 } else { 300 },
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn wrapper_answers_like_the_unbounded_set_and_stays_within_its_budget(
        ops in prop::collection::vec(pair_op(), 0..60),
        budget in 0usize..3_000,
    ) {
        let mut w = RangeSetWrapper::new(Box::new(MemPartitionStore::new()), budget);
        let mut s = AckSet::new();
        for op in ops {
            match op {
                PairOp::Add(p) => prop_assert_eq!(w.add(p).expect("add"), s.add(p)),
                PairOp::AddMany(ps) => {
                    let added = ps.iter().filter(|p| s.add(**p)).count() as u64;
                    prop_assert_eq!(w.add_many(ps).expect("add_many"), added);
                }
                PairOp::AddRange(l, a, b) => {
                    prop_assert_eq!(w.add_range(l, a, b).expect("add_range"), s.add_range(l, a, b));
                }
                PairOp::RemoveAtMost(p) => {
                    w.remove_at_most(p).expect("remove_at_most");
                    s.remove_at_most(p);
                }
                PairOp::Query(a, b) => {
                    prop_assert_eq!(w.cardinality_between(a, b).expect("count"), s.cardinality_between(a, b));
                    prop_assert_eq!(w.contains(a).expect("contains"), s.contains(a));
                }
            }
            prop_assert_eq!(w.len(), s.len());
            prop_assert_eq!(w.first_range().expect("first"), s.first_range());
            prop_assert_eq!(w.last_range().expect("last"), s.last_range());
            let stats = w.stats();
            prop_assert!(stats.resident_bytes <= budget + MAX_PARTITION_BYTES, "{:?}", stats);
        }
        prop_assert_eq!(w.ranges().expect("ranges"), s.ranges().collect::<Vec<_>>());
    }
}

/// `add_many` over resident partitions moves them in the recency lists as one `add` each does
/// (the last visit of each counts, the last partition visited is hot): with no eviction during
/// the call, a set given a group by `add_many` and one given it by `add`s then evict the same
/// partitions, in the same order, as new partitions come in; both for a group ordered by
/// partition (its visits in that order) and one taken as it comes (partitions 100 apart),
/// visiting partitions many times.
#[test]
fn add_many_leaves_the_recency_order_of_one_add_each() {
    for spacing in [1u64, 100] {
        let chunks: Vec<u64> = (0..10).map(|c| c * spacing).collect();
        // Room for the ten bitmap partitions and a few small ones, so that no eviction happens
        // before the new partitions come in.
        let budget = 12 * MAX_PARTITION_BYTES;
        let mut by_many = RangeSetWrapper::new(Box::new(MemPartitionStore::default()), budget);
        let mut by_one = RangeSetWrapper::new(Box::new(MemPartitionStore::default()), budget);
        for w in [&mut by_many, &mut by_one] {
            for &c in &chunks {
                // Even offsets only: a bitmap container, charged the same whatever is added.
                for e in (0..10_000u64).step_by(2) {
                    w.add(Position::new(1, (c << 16) + e)).expect("add");
                }
            }
        }
        let mut draw = 0x2545_f491_4f6c_dd1d_u64;
        let group: Vec<Position> = (0..200)
            .map(|_| {
                draw ^= draw << 13;
                draw ^= draw >> 7;
                draw ^= draw << 17;
                let c = chunks[usize::try_from(draw % 10).expect("small")];
                Position::new(1, (c << 16) + (draw >> 8) % 20_000)
            })
            .collect();
        // `add_many` takes 64 positions at a time, ordered by partition (stably) when they lie
        // within 64 partitions of one ledger.
        let mut added = 0;
        for taken in group.chunks(64) {
            let mut taken = taken.to_vec();
            if spacing == 1 {
                taken.sort_by_key(|p| PartitionKey::of(*p).chunk);
            }
            added += taken
                .iter()
                .filter(|p| by_one.add(**p).expect("add"))
                .count();
        }
        assert_eq!(
            by_many.add_many(group.iter().copied()).expect("add_many"),
            added as u64
        );
        assert_eq!(by_many.stats(), by_one.stats(), "spacing {spacing}");
        assert_eq!(by_many.stats().evictions, 0, "spacing {spacing}");
        for extra in 0..30u64 {
            // A new bitmap partition each time.
            for e in (0..10_000u64).step_by(2) {
                let p = Position::new(2, (extra << 16) + e);
                by_many.add(p).expect("add");
                by_one.add(p).expect("add");
            }
            for &c in &chunks {
                let key = PartitionKey::of(Position::new(1, c << 16));
                assert_eq!(
                    by_many.is_resident(key),
                    by_one.is_resident(key),
                    "spacing {spacing}, after {extra} new partitions, chunk {c}"
                );
            }
            assert_eq!(by_many.stats(), by_one.stats(), "spacing {spacing}");
        }
        assert!(
            by_one.stats().evictions >= 10,
            "every partition of the group evicted"
        );
    }
}

/// A group of `add_many` that grows many resident partitions (array containers at their
/// capacity, which double at the next value) stays within the budget plus one partition while
/// it runs, as one `add` each does, not only at its end: the peak is the bound of every step.
#[test]
fn add_many_growing_resident_partitions_stays_within_the_budget_while_it_runs() {
    const CHUNKS: u64 = 40;
    let mut probe = RangeSetWrapper::new(Box::new(MemPartitionStore::default()), usize::MAX);
    // 2,048 values a partition: an array container whose capacity is exactly its length.
    for c in 0..CHUNKS {
        for e in 0..2_048u64 {
            probe.add(Position::new(1, (c << 16) + 2 * e)).expect("add");
        }
    }
    let budget = probe.stats().resident_bytes;
    // The same partitions under a budget they just fit in, every one resident.
    let fitting = || {
        let mut fit = RangeSetWrapper::new(Box::new(MemPartitionStore::default()), budget);
        for c in 0..CHUNKS {
            for e in 0..2_048u64 {
                fit.add(Position::new(1, (c << 16) + 2 * e)).expect("add");
            }
        }
        assert_eq!(fit.stats().evictions, 0, "{:?}", fit.stats());
        fit
    };
    let mut w = fitting();
    let mut by_one = fitting();
    let mut model: BTreeSet<Position> = (0..CHUNKS)
        .flat_map(|c| (0..2_048u64).map(move |e| Position::new(1, (c << 16) + 2 * e)))
        .collect();
    // One new value in every partition, in one group.
    let group: Vec<Position> = (0..CHUNKS)
        .map(|c| Position::new(1, (c << 16) + 1))
        .collect();
    assert_eq!(w.add_many(group.iter().copied()).expect("add_many"), CHUNKS);
    for &p in &group {
        assert!(by_one.add(p).expect("add"));
    }
    model.extend(group);
    let one = by_one.stats();
    assert!(
        one.peak_resident_bytes <= budget + MAX_PARTITION_BYTES,
        "{one:?}"
    );
    assert_within_budget(&w.stats(), budget);
    assert_eq!(w.len(), model.len() as u64);
    assert_eq!(
        w.ranges().expect("ranges"),
        model_ranges(&model),
        "every ack kept across the evictions"
    );
}

/// The resident bytes, now and at their peak, are within `budget` plus one partition.
fn assert_within_budget(stats: &AckSetStats, budget: usize) {
    assert!(
        stats.resident_bytes <= budget + MAX_PARTITION_BYTES,
        "{stats:?}"
    );
    assert!(
        stats.peak_resident_bytes <= budget + MAX_PARTITION_BYTES,
        "{stats:?}"
    );
}

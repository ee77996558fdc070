//! The range set over partitions: acks, ranges, removals, loads and evictions, against known answers.

use ackstore::internals::ackset::PartitionKey;
use ackstore::internals::ackset::PartitionStore;
use ackstore::internals::ackset::wrapper::*;
use ackstore::internals::ackset::{
    MAX_PARTITION_BYTES, MemPartitionStore, PARTITION_OVERHEAD_BYTES,
};
use ackstore::internals::error::CorruptionKind;
use ackstore::internals::error::{Error, Result};
use ackstore::internals::position::Position;
use roaring::RoaringBitmap;

fn p(ledger_id: u64, entry_id: u64) -> Position {
    Position::new(ledger_id, entry_id)
}

fn key(ledger_id: u64, chunk: u64) -> PartitionKey {
    PartitionKey { ledger_id, chunk }
}

/// A store whose `store` fails while `broken`, counting calls.
#[derive(Default)]
struct FlakyStore {
    inner: MemPartitionStore,
    broken: bool,
}

impl PartitionStore for FlakyStore {
    fn load(&mut self, key: PartitionKey) -> Result<Option<RoaringBitmap>> {
        self.inner.load(key)
    }
    fn store(&mut self, key: PartitionKey, bitmap: &RoaringBitmap) -> Result<()> {
        if self.broken {
            return Err(Error::Unsupported {
                what: "store is broken".to_owned(),
            });
        }
        self.inner.store(key, bitmap)
    }
}

/// One small partition per ledger, so every ledger costs the same few bytes.
fn small_partition_budget(partitions: usize) -> usize {
    partitions * (PARTITION_OVERHEAD_BYTES + 18)
}

#[test]
fn evicting_a_dirty_partition_stores_it_and_a_clean_one_is_just_dropped() {
    let mut w = RangeSetWrapper::new(Box::new(MemPartitionStore::new()), 0);
    w.add(p(1, 1)).expect("add");
    w.add(p(2, 1)).expect("add evicts ledger 1 first");
    let s = w.stats();
    assert_eq!((s.evictions, s.stores, s.resident_partitions), (1, 1, 1));
    assert!(!w.is_resident(key(1, 0)));
    assert!(w.contains(p(1, 1)).expect("load back"));
    assert_eq!(w.stats().loads, 1);
    // Ledger 2 was evicted unsaved (stored); ledger 1 was loaded and not changed since.
    assert!(w.contains(p(2, 1)).expect("load back"));
    let s = w.stats();
    assert_eq!((s.evictions, s.stores, s.loads), (3, 2, 2));
    // Still dirty: dirtiness follows mark_clean, not residency.
    assert_eq!(w.dirty_keys(), vec![key(1, 0), key(2, 0)]);
    w.mark_clean(key(1, 0));
    assert_eq!(w.dirty_keys(), vec![key(2, 0)]);
}

#[test]
fn a_saved_partition_is_evicted_before_an_older_unsaved_one() {
    let budget = small_partition_budget(3);
    let mut w = RangeSetWrapper::new(Box::new(MemPartitionStore::new()), budget);
    for ledger in 1..=3 {
        w.add(p(ledger, 1)).expect("add");
    }
    // The store holds (2, 0) now; (1, 0), used longer ago, it does not.
    w.store_mut()
        .store(key(2, 0), &RoaringBitmap::from([1]))
        .expect("store");
    w.mark_persisted(key(2, 0));
    w.add(p(4, 1)).expect("add");
    let s = w.stats();
    assert_eq!((s.evictions, s.stores), (1, 0), "{s:?}");
    assert!(w.is_resident(key(1, 0)) && !w.is_resident(key(2, 0)));
    // With no saved partition left, the least recently used unsaved one is stored.
    w.add(p(5, 1)).expect("add");
    let s = w.stats();
    assert_eq!((s.evictions, s.stores), (2, 1), "{s:?}");
    assert!(!w.is_resident(key(1, 0)));
    assert_eq!(w.range_count().expect("count"), 5);
}

#[test]
fn partitions_used_in_turn_under_every_small_budget_keep_every_ack() {
    // Budgets from nothing to a few partitions, in steps smaller than one: evictions, the
    // slab growing past what the budget leaves and giving its spare slots back all happen
    // while partitions that are still resident are used again.
    for budget in (0..40).map(|i| i * 40) {
        let mut w = RangeSetWrapper::new(Box::new(MemPartitionStore::new()), budget);
        let mut model = ackstore::internals::ackset::AckSet::new();
        for round in 0..6u64 {
            for ledger in (1..=6u64).map(|l| if round % 2 == 0 { l } else { 7 - l }) {
                let pos = p(ledger, round * 3 + ledger % 2);
                assert_eq!(w.contains(pos).expect("contains"), model.contains(pos));
                assert_eq!(w.add(pos).expect("add"), model.add(pos), "budget {budget}");
                if ledger == round + 1 {
                    w.add_range(ledger, 100, 100 + 500 * round).expect("add");
                    model.add_range(ledger, 100, 100 + 500 * round);
                }
                let s = w.stats();
                assert!(s.resident_bytes <= budget + MAX_PARTITION_BYTES, "{s:?}");
            }
        }
        assert_eq!(w.len(), model.len(), "budget {budget}");
        assert_eq!(
            w.ranges().expect("ranges"),
            model.ranges().collect::<Vec<_>>()
        );
    }
}

#[test]
fn lazy_index_loads_only_what_is_touched() {
    let mut store = MemPartitionStore::new();
    store
        .store(key(5, 0), &RoaringBitmap::from([3, 4]))
        .expect("store");
    store
        .store(key(6, 2), &RoaringBitmap::from([0]))
        .expect("store");
    let index = [(key(5, 0), 2), (key(6, 2), 1)];
    let mut w = RangeSetWrapper::with_index(Box::new(store), 1 << 20, index);
    assert_eq!((w.len(), w.stats().resident_partitions), (3, 0));
    assert_eq!(
        w.cardinality_between(p(5, 0), p(5, u64::MAX))
            .expect("count"),
        2
    );
    // Partition (5, 0) lies wholly inside, so the index answered.
    assert_eq!(w.stats().loads, 0);
    assert_eq!(w.first_range().expect("first"), Some((p(5, 3), p(5, 4))));
    assert_eq!(w.stats().loads, 1);
    assert!(w.dirty_keys().is_empty());
}

#[test]
fn bounds_of_stored_partitions_are_read_without_loading_them() {
    let mut store = MemPartitionStore::new();
    // Gaps and bitmap records start with their bounds; a roaring one does not (a full
    // partition but one run of holes), so its bounds need a load.
    let (gaps, bitmap) = (
        (0..500).step_by(2).collect::<RoaringBitmap>(),
        RoaringBitmap::from([3, 4, 6]),
    );
    let mut roaring: RoaringBitmap = (0..1 << 16).collect();
    roaring.remove_range(1000..30_000);
    for (k, set) in [
        (key(5, 0), &gaps),
        (key(6, 2), &bitmap),
        (key(7, 0), &roaring),
    ] {
        store.store(k, set).expect("store");
    }
    let index = [
        (key(5, 0), gaps.len()),
        (key(6, 2), bitmap.len()),
        (key(7, 0), roaring.len()),
    ];
    let mut w = RangeSetWrapper::with_index(Box::new(store), 1 << 20, index);
    assert_eq!(w.lowest().expect("lowest"), Some(p(5, 0)));
    assert_eq!(w.stats().loads, 0);
    w.remove_at_most(p(5, 498)).expect("remove");
    assert_eq!(w.stats().loads, 1, "partition (5, 0) only");
    assert_eq!(w.lowest().expect("lowest"), Some(p(6, (2 << 16) + 3)));
    assert_eq!(w.stats().loads, 1);
    assert_eq!(w.highest().expect("highest"), Some(p(7, 65_535)));
    assert_eq!(
        w.stats().loads,
        2,
        "a roaring record is loaded for its bounds"
    );
    assert_eq!(
        w.span().expect("span"),
        Some((p(6, (2 << 16) + 3), p(7, 65_535)))
    );
    assert_eq!(w.stats().loads, 2);
    // A resident partition's bounds are its bitmap's, changes included.
    w.add(p(6, (2 << 16) + 1)).expect("add");
    assert_eq!(w.lowest().expect("lowest"), Some(p(6, (2 << 16) + 1)));
    assert_eq!(w.stats().loads, 3);
}

#[test]
fn remove_at_most_drops_whole_partitions_without_loading_them() {
    let mut w = RangeSetWrapper::new(Box::new(MemPartitionStore::new()), 0);
    w.add_range(1, 0, 200_000).expect("add");
    w.add(p(2, 5)).expect("add");
    w.add(p(2, 9)).expect("add");
    w.add(p(3, 0)).expect("add");
    let loads = w.stats().loads;
    w.remove_at_most(p(2, 5)).expect("remove");
    assert_eq!(
        w.stats().loads,
        loads + 1,
        "only partition (2, 0) is loaded"
    );
    assert_eq!(w.partitions(), vec![(key(2, 0), 1), (key(3, 0), 1)]);
    assert_eq!(w.len(), 2);
    w.remove_at_most(p(3, 0)).expect("remove");
    assert!(w.partitions().is_empty() && w.is_empty());
    assert_eq!(w.stats().resident_bytes, 0);
}

/// A store that fails while its shared switch is set.
struct SwitchedStore {
    inner: MemPartitionStore,
    broken: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl PartitionStore for SwitchedStore {
    fn load(&mut self, key: PartitionKey) -> Result<Option<RoaringBitmap>> {
        self.inner.load(key)
    }
    fn store(&mut self, key: PartitionKey, bitmap: &RoaringBitmap) -> Result<()> {
        if self.broken.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::Unsupported {
                what: "store is broken".to_owned(),
            });
        }
        self.inner.store(key, bitmap)
    }
}

#[test]
fn a_failed_store_pins_the_partition_and_acks_go_on_until_stores_resume() {
    let broken = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let store = SwitchedStore {
        inner: MemPartitionStore::new(),
        broken: broken.clone(),
    };
    let mut w = RangeSetWrapper::new(Box::new(store), 0);
    for ledger in 1..=5 {
        w.add(p(ledger, 1))
            .expect("an add never fails for want of a store");
    }
    let s = w.stats();
    assert_eq!(
        (s.store_failures, s.stores, s.evictions),
        (1, 0, 0),
        "{s:?}"
    );
    assert_eq!(s.pinned_partitions, 4, "{s:?}");
    for ledger in 1..=5 {
        assert!(w.contains(p(ledger, 1)).expect("resident"));
    }
    assert_eq!(w.len(), 5);
    assert_eq!(w.dirty_keys().len(), 5);
    // Touching a pinned partition makes it hot; the previous hot one is pinned in turn.
    w.add(p(2, 7)).expect("add");
    assert_eq!(w.stats().pinned_partitions, 4);
    // A flush persisted (1, 0) where the store finds it; the others are still unsaved.
    broken.store(false, std::sync::atomic::Ordering::SeqCst);
    w.store_mut()
        .store(key(1, 0), &RoaringBitmap::from([1]))
        .expect("store");
    w.mark_persisted(key(1, 0));
    w.resume_stores();
    let s = w.stats();
    assert_eq!(s.pinned_partitions, 0, "{s:?}");
    assert!(s.resident_bytes <= MAX_PARTITION_BYTES, "{s:?}");
    assert_eq!(s.stores, 3, "(1, 0) needed no store: {s:?}");
    assert_eq!(
        w.ranges().expect("ranges").len(),
        6,
        "ledger 2 holds two ranges"
    );
}

#[test]
fn dropping_or_clearing_pinned_partitions_frees_them() {
    let store = FlakyStore {
        broken: true,
        ..FlakyStore::default()
    };
    let mut w = RangeSetWrapper::new(Box::new(store), 0);
    for ledger in 1..=4 {
        w.add(p(ledger, 1)).expect("add");
    }
    // (2, 0) becomes hot to be trimmed, which pins (4, 0): (3, 0) and (4, 0) stay pinned.
    w.remove_at_most(p(2, 1))
        .expect("drop two pinned partitions");
    let s = w.stats();
    assert_eq!((s.pinned_partitions, s.partitions), (2, 2), "{s:?}");
    assert_eq!(w.len(), 2);
    w.clear();
    let s = w.stats();
    assert_eq!((s.pinned_partitions, s.resident_bytes), (0, 0), "{s:?}");
}

#[test]
fn resident_bytes_stay_within_budget_plus_one_partition() {
    let budget = small_partition_budget(4);
    let mut w = RangeSetWrapper::new(Box::new(MemPartitionStore::new()), budget);
    for ledger in 0..100 {
        w.add_range(ledger, 0, 3).expect("add");
        assert!(w.stats().resident_bytes <= budget + MAX_PARTITION_BYTES);
    }
    let s = w.stats();
    assert!(s.peak_resident_bytes <= budget + MAX_PARTITION_BYTES);
    assert!(s.evictions >= 90, "{s:?}");
    assert_eq!(s.index_bytes, 100 * INDEX_ENTRY_BYTES);
    assert_eq!(w.range_count().expect("count"), 100);
}

#[test]
fn a_partition_the_store_lost_is_a_clear_error() {
    let index = [(key(3, 0), 2)];
    let mut w = RangeSetWrapper::with_index(Box::new(MemPartitionStore::new()), 1024, index);
    let err = w.contains(p(3, 0)).expect_err("missing");
    assert!(matches!(
        err,
        Error::Corrupted {
            place: ackstore::internals::error::CorruptionPlace::Partition {
                ledger_id: 3,
                chunk: 0,
            },
            kind: CorruptionKind::Missing,
        }
    ));
    assert!(err.to_string().contains("listed but not found"));
}

#[test]
fn stored_copy_is_current_only_for_an_unchanged_partition() {
    let mut w = RangeSetWrapper::new(Box::new(MemPartitionStore::new()), 1 << 20);
    w.add(p(1, 1)).unwrap();
    w.add(p(1, 2)).unwrap();
    // Resident and changed since any copy was stored.
    assert!(!w.stored_copy_current(key(1, 0), 2));
    w.mark_persisted(key(1, 0));
    assert!(w.stored_copy_current(key(1, 0), 2));
    // A copy of another size is stale.
    assert!(!w.stored_copy_current(key(1, 0), 1));
    assert!(!w.stored_copy_current(key(9, 0), 0));

    // Evicted: the store holds what it was evicted with, dirty or not.
    let mut w = RangeSetWrapper::new(Box::new(MemPartitionStore::new()), 0);
    w.add(p(2, 5)).unwrap();
    w.add(p(3, 5)).unwrap();
    assert!(!w.is_resident(key(2, 0)));
    assert!(w.stored_copy_current(key(2, 0), 1));
}

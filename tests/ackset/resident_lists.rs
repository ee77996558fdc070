//! Resident partitions: recency lists, the table that finds them, and shrinking.

use ackstore::internals::ackset::Charge;
use ackstore::internals::ackset::PartitionKey;
use ackstore::internals::ackset::resident::*;
use roaring::RoaringBitmap;

fn key(ledger_id: u64) -> PartitionKey {
    PartitionKey {
        ledger_id,
        chunk: 0,
    }
}

fn resident(ledger_id: u64, unsaved: bool, bytes: usize) -> Resident {
    let charge = Charge {
        bytes,
        ..Charge::default()
    };
    Resident::new(key(ledger_id), RoaringBitmap::new(), charge, unsaved, false)
}

fn keys(r: &Residents, list: List) -> Vec<u64> {
    r.slots_of(list)
        .into_iter()
        .map(|s| r.key(s).ledger_id)
        .collect()
}

#[test]
fn lists_keep_recency_and_bytes_through_hot_changes_moves_and_removals() {
    let mut r = Residents::new();
    for (ledger, bytes) in (1..=4).zip([100, 200, 300, 400]) {
        r.retire_hot();
        r.insert_hot(resident(ledger, ledger % 2 == 0, bytes));
    }
    // 4 is hot; 1 and 3 saved, 2 unsaved.
    assert_eq!(keys(&r, List::Saved), [3, 1]);
    assert_eq!(keys(&r, List::Unsaved), [2]);
    assert_eq!(r.list_bytes(List::Saved), 400);
    assert_eq!(r.hot_slot(key(4)), Some(3));
    // Touching 1 makes it hot; 4 joins the unsaved list as its newest.
    let one = r.find(key(1)).expect("resident");
    r.retire_hot();
    r.make_hot(one);
    assert_eq!(keys(&r, List::Saved), [3]);
    assert_eq!(keys(&r, List::Unsaved), [4, 2]);
    assert_eq!(r.list_bytes(List::Unsaved), 600);
    // 2 is pinned, then rejoins the saved list as its oldest.
    let two = r.oldest(List::Unsaved).expect("oldest unsaved");
    r.relist(two, List::Pinned, true);
    assert_eq!(
        (r.list_len(List::Pinned), r.list_len(List::Unsaved)),
        (1, 1)
    );
    r.relist(two, List::Saved, false);
    assert_eq!(keys(&r, List::Saved), [3, 2]);
    assert_eq!(r.list_of(two), Some(List::Saved));
    assert_eq!(r.list_of(one), None, "hot");
    // Removing frees slots that the next insert reuses, with no allocation.
    let capacity = r.slots.capacity();
    assert_eq!(r.remove(two).charge.bytes, 200);
    let three = r.oldest(List::Saved).expect("oldest saved");
    r.remove(three);
    assert_eq!((r.len(), r.list_bytes(List::Saved)), (2, 0));
    assert_eq!(r.find(key(3)), None);
    assert_eq!(
        r.overhead_bytes(),
        (capacity - 2) * SLOT_BYTES + r.table.capacity() * TABLE_PLACE_BYTES
    );
    r.retire_hot();
    r.insert_hot(resident(5, true, 1));
    r.retire_hot();
    r.insert_hot(resident(6, true, 1));
    assert_eq!(r.slots.capacity(), capacity);
    assert_eq!(keys(&r, List::Unsaved), [5, 4]);
    assert_eq!(keys(&r, List::Saved), [1]);
}

#[test]
fn the_table_finds_every_resident_partition_through_inserts_removals_and_growth() {
    // Keys that differ in the ledger, the chunk or both, so homes collide and probes wrap.
    let mut r = Residents::new();
    let mut model = std::collections::BTreeMap::new();
    let mut draw = 0x9e37_79b9_7f4a_7c15_u64;
    for step in 0..20_000u64 {
        draw ^= draw << 13;
        draw ^= draw >> 7;
        draw ^= draw << 17;
        let k = PartitionKey {
            ledger_id: draw % 7,
            chunk: (draw >> 8) % 40,
        };
        if let Some(slot) = r.find(k) {
            assert_eq!(model.get(&k), Some(&slot), "step {step}");
            if draw.is_multiple_of(3) {
                model.remove(&k);
                assert_eq!(r.remove(slot).key, k);
            } else {
                r.retire_hot();
                if r.list_of(slot).is_some() {
                    r.make_hot(slot);
                }
            }
        } else {
            assert!(!model.contains_key(&k), "step {step}");
            r.retire_hot();
            let resident = Resident::new(k, RoaringBitmap::new(), Charge::default(), false, false);
            model.insert(k, r.insert_hot(resident));
        }
        if step % 1000 == 999 {
            for (&k, &slot) in &model {
                assert_eq!(r.find(k), Some(slot));
            }
            assert_eq!(r.len(), model.len());
            assert!(r.table.len() >= 2 * r.slots.capacity());
        }
    }
}

#[test]
fn shrink_keeps_only_the_hot_partition() {
    let mut r = Residents::new();
    r.insert_hot(resident(1, true, 1));
    r.retire_hot();
    r.insert_hot(resident(2, true, 1));
    r.shrink();
    assert_eq!(r.len(), 2, "another partition is resident");
    let one = r.oldest(List::Unsaved).expect("oldest");
    r.remove(one);
    r.shrink();
    assert_eq!(r.slots.capacity(), 1);
    assert_eq!(r.overhead_bytes(), r.table.capacity() * TABLE_PLACE_BYTES);
    assert_eq!((r.hot_slot(key(2)), r.find(key(2))), (Some(0), Some(0)));
    r.remove(0);
    r.shrink();
    assert_eq!((r.slots.capacity(), r.overhead_bytes(), r.len()), (0, 0, 0));
}

/// A partition recharged where it is (in a list, or hot) keeps its list's bytes equal to the
/// sum of its partitions' charges, through moves within the list and to another one.
#[test]
fn a_recharge_keeps_the_bytes_of_the_list_holding_the_partition() {
    let mut r = Residents::new();
    for ledger in 1..=3 {
        r.retire_hot();
        r.insert_hot(resident(ledger, false, 100));
    }
    r.retire_hot();
    let charged = |bytes| Charge {
        bytes,
        ..Charge::default()
    };
    let one = r.find(key(1)).expect("resident");
    assert_eq!(r.recharge(one, charged(700)).bytes, 100);
    assert_eq!(r.list_bytes(List::Saved), 900);
    // Moved to the newest end of its list, then to the unsaved list.
    r.relist_by_flag(one);
    assert_eq!(keys(&r, List::Saved), [1, 3, 2]);
    assert_eq!(r.list_bytes(List::Saved), 900);
    r.relist(one, List::Unsaved, true);
    assert_eq!(
        (r.list_bytes(List::Saved), r.list_bytes(List::Unsaved)),
        (200, 700)
    );
    // The hot partition is in no list: its charge counts in none.
    let two = r.find(key(2)).expect("resident");
    r.make_hot(two);
    r.recharge(two, charged(50));
    r.retire_hot();
    assert_eq!(
        (r.list_bytes(List::Saved), r.list_bytes(List::Unsaved)),
        (150, 700)
    );
}

/// One step of [`make_hot_keeps_every_list_as_the_model_does`].
#[derive(Debug, Clone)]
enum Step {
    /// A new partition becomes hot (the hot one retired first): its flag and bytes.
    Insert(bool, usize),
    /// The `n`-th listed partition (by key) becomes hot, the hot one joining its list.
    Touch(usize),
    /// The `n`-th listed partition is pinned.
    Pin(usize),
    /// The hot partition joins its list.
    Retire,
    /// The `n`-th listed partition is removed.
    Remove(usize),
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        2 => (any::<bool>(), 1..1_000usize).prop_map(|(u, b)| Step::Insert(u, b)),
        4 => any::<usize>().prop_map(Step::Touch),
        1 => any::<usize>().prop_map(Step::Pin),
        1 => Just(Step::Retire),
        1 => any::<usize>().prop_map(Step::Remove),
    ]
}

proptest::proptest! {
    #![proptest_config(crate::support::harness::proptest_default_config())]

    /// `make_hot` of a listed partition while another is hot retires that one into its list
    /// and takes the new one out of its own, in one step: every list's order, length and bytes
    /// are the model's after each step (the two in the same list, in different lists, the
    /// retired one in the list the new one left, a pinned one made hot).
    #[test]
    fn make_hot_keeps_every_list_as_the_model_does(
        steps in proptest::collection::vec(step(), 1..200),
    ) {
        let mut r = Residents::new();
        // Per key: its flag and bytes; its list (newest first) or hot.
        let mut flags = std::collections::BTreeMap::<u64, (bool, usize)>::new();
        let mut lists: [Vec<u64>; 3] = Default::default();
        let mut hot: Option<u64> = None;
        let mut next = 1;
        let by_flag = |unsaved: bool| if unsaved { List::Unsaved } else { List::Saved };
        let retire = |hot: &mut Option<u64>, lists: &mut [Vec<u64>; 3], flags: &std::collections::BTreeMap<u64, (bool, usize)>| {
            if let Some(h) = hot.take() {
                lists[by_flag(flags[&h].0) as usize].insert(0, h);
            }
        };
        for step in steps {
            let listed: Vec<u64> = flags.keys().copied().filter(|k| Some(*k) != hot).collect();
            let pick = |n: usize| listed.get(n % listed.len().max(1)).copied();
            match step {
                Step::Insert(unsaved, bytes) => {
                    r.retire_hot();
                    retire(&mut hot, &mut lists, &flags);
                    r.insert_hot(resident(next, unsaved, bytes));
                    flags.insert(next, (unsaved, bytes));
                    hot = Some(next);
                    next += 1;
                }
                Step::Touch(n) => {
                    let Some(k) = pick(n) else { continue };
                    r.make_hot(r.find(key(k)).expect("resident"));
                    retire(&mut hot, &mut lists, &flags);
                    for list in &mut lists {
                        list.retain(|&x| x != k);
                    }
                    hot = Some(k);
                }
                Step::Pin(n) => {
                    let Some(k) = pick(n) else { continue };
                    r.relist(r.find(key(k)).expect("resident"), List::Pinned, true);
                    for list in &mut lists {
                        list.retain(|&x| x != k);
                    }
                    lists[List::Pinned as usize].insert(0, k);
                }
                Step::Retire => {
                    r.retire_hot();
                    retire(&mut hot, &mut lists, &flags);
                }
                Step::Remove(n) => {
                    let Some(k) = pick(n) else { continue };
                    r.remove(r.find(key(k)).expect("resident"));
                    for list in &mut lists {
                        list.retain(|&x| x != k);
                    }
                    flags.remove(&k);
                }
            }
            for list in [List::Saved, List::Unsaved, List::Pinned] {
                let want = &lists[list as usize];
                proptest::prop_assert_eq!(&keys(&r, list), want, "{:?}", list);
                proptest::prop_assert_eq!(r.list_len(list), want.len());
                let bytes: usize = want.iter().map(|k| flags[k].1).sum();
                proptest::prop_assert_eq!(r.list_bytes(list), bytes, "{:?}", list);
            }
            let hot_slot = hot.and_then(|h| r.hot_slot(key(h)));
            proptest::prop_assert_eq!(hot_slot.is_some(), hot.is_some());
            proptest::prop_assert_eq!(r.len(), flags.len());
        }
    }
}

//! The partition body codec: word counts, small sets, and gap bodies in their canonical form.

use proptest::prelude::*;
use roaring::RoaringBitmap;

use ackstore::internals::format::partition::code::*;

/// The statistics of a class by visiting every gap, the way the encoder writes them.
fn model(words: &[u64], lo: u32, hi: u32, holes: bool) -> (u64, u64, u32, u32, Vec<u32>) {
    let (mut members, mut sum, mut min, mut max) = (0u64, 0u64, u32::MAX, 0u32);
    let mut gaps = Vec::new();
    for_each_gap(words, lo, hi, holes, |gap, zeros| {
        members += 1 + u64::from(zeros);
        sum += u64::from(gap);
        min = min.min(if zeros > 0 { 0 } else { gap });
        max = max.max(gap);
        gaps.push(gap);
        gaps.extend(std::iter::repeat_n(0, zeros as usize));
    });
    gaps.sort_unstable();
    (members, sum, min, max, gaps)
}

fn counted(st: &Stats) -> (u64, u64, u32, u32, Vec<u32>) {
    let mut gaps = Vec::new();
    for (g, n) in st.gaps() {
        gaps.extend(std::iter::repeat_n(g, n as usize));
    }
    gaps.sort_unstable();
    (st.members, st.sum, st.min, st.max, gaps)
}

/// The dense form through the set's serialization: what `words_of` must equal.
fn words_through_serialization(bitmap: &RoaringBitmap) -> Option<Words> {
    let mut serialized = Vec::new();
    bitmap.serialize_into(&mut serialized).unwrap();
    parse_roaring(&serialized)
}

proptest! {
    #[test]
    fn words_of_equals_the_dense_form_of_the_serialization(
        values in proptest::collection::vec(0u32..70_000, 0..6_000),
        run in proptest::option::of((0u32..65_536, 0u32..20_000)),
    ) {
        let mut bitmap: RoaringBitmap = values.iter().copied().collect();
        if let Some((start, len)) = run {
            bitmap.insert_range(start..start.saturating_add(len));
        }
        bitmap.optimize();
        let expected = words_through_serialization(&bitmap);
        prop_assert_eq!(words_of(&bitmap), expected);
        // Without the values a partition cannot hold: the same set, bit for bit.
        bitmap.remove_range(1 << 16..);
        let words = words_of(&bitmap).unwrap();
        prop_assert_eq!(Some(words.clone()), words_through_serialization(&bitmap));
        let set: Vec<u32> = (0..1u32 << 16)
            .filter(|&v| words.get(v as usize / 64).is_some_and(|w| w >> (v % 64) & 1 == 1))
            .collect();
        prop_assert_eq!(set, bitmap.iter().collect::<Vec<_>>());
    }
}

proptest! {
    /// The thread's kept dense form, used for one set after another (a dense one, a run, a few
    /// values, values a partition cannot hold, the empty set): each call sees exactly its own
    /// set, never a bit a call before it set.
    #[test]
    fn the_kept_dense_form_holds_only_the_set_of_each_call(
        sets in proptest::collection::vec(
            (proptest::collection::vec(0u32..70_000, 0..5_000),
             proptest::option::of((0u32..65_536, 0u32..20_000))),
            1..6,
        ),
    ) {
        for (values, run) in sets {
            let mut bitmap: RoaringBitmap = values.iter().copied().collect();
            if let Some((start, len)) = run {
                bitmap.insert_range(start..start.saturating_add(len));
            }
            bitmap.optimize();
            prop_assert_eq!(with_words_of(&bitmap, <[u64]>::to_vec), words_of(&bitmap));
            bitmap.remove_range(1 << 16..);
            prop_assert_eq!(with_words_of(&bitmap, <[u64]>::to_vec), words_of(&bitmap));
        }
    }
}

/// After a call whose `f` panics with the kept dense form full, the next call on the thread
/// still sees only its own set, and a call made from inside `f` builds its own form.
#[test]
fn the_kept_dense_form_recovers_from_a_panic_and_nests() {
    let full: RoaringBitmap = (0..1u32 << 16).collect();
    let panicked = std::panic::catch_unwind(|| {
        with_words_of(&full, |_| panic!("a failing caller"));
    });
    assert!(panicked.is_err());
    let few: RoaringBitmap = [3u32, 70, 65_535].into_iter().collect();
    assert_eq!(with_words_of(&few, <[u64]>::to_vec), words_of(&few));
    let inner = with_words_of(&full, |outer| {
        let inner = with_words_of(&few, <[u64]>::to_vec);
        (outer.to_vec(), inner)
    });
    assert_eq!(inner, Some((words_of(&full).unwrap(), words_of(&few))));
    assert_eq!(
        with_words_of(&RoaringBitmap::new(), <[u64]>::to_vec),
        Some(empty_words())
    );
}

#[test]
fn sets_of_one_two_and_three_members_decode_canonical_with_empty_classes() {
    for (lo, hi, middle) in [(5, 5, false), (5, 6, false), (5, 7, false), (5, 7, true)] {
        let mut words = empty_words();
        set_bit(&mut words, lo);
        set_bit(&mut words, hi);
        if middle {
            set_bit(&mut words, 6);
        }
        let body = gaps_body(&words, lo, hi, usize::MAX).unwrap();
        let (decoded, reading) = decode_gaps(&body, 1 << 16).unwrap();
        assert_eq!(decoded, words);
        assert_eq!(
            reading.acked.members + reading.holes_stats.members,
            u64::from((hi - lo).saturating_sub(1))
        );
        assert!(reading.is_canonical(usize::MAX), "{lo} {hi} {middle}");
    }
}

#[test]
fn a_gaps_body_is_canonical_only_as_the_encoder_writes_it() {
    // Holes every ~100 entries, and acked entries every ~100: each class coded once.
    for holes_sparse in [false, true] {
        let mut words = empty_words();
        let mut v = 3u32;
        while v < 50_000 {
            set_bit(&mut words, v);
            v += 90 + (v * 7919) % 23;
        }
        if holes_sparse {
            let (lo, hi) = bounds(&words).unwrap();
            for w in &mut words {
                *w = !*w;
            }
            fill(&mut words, 0, lo - 1, true);
            fill(&mut words, hi + 1, (1 << 16) - 1, true);
        }
        let (lo, hi) = bounds(&words).unwrap();
        let (best, len) = gaps_plan(&words, lo, hi, usize::MAX).unwrap();
        assert_eq!(best.holes, holes_sparse);
        let body = write_gaps(&words, lo, hi, best, len);
        let canonical = |body: &[u8]| {
            let (decoded, reading) = decode_gaps(body, 1 << 16).unwrap();
            assert_eq!(decoded, words);
            reading.is_canonical(usize::MAX)
        };
        assert!(canonical(&body));
        // A zero byte after the codes.
        let mut longer = body.clone();
        longer.push(0);
        assert!(!canonical(&longer));
        // A padding bit set after the last code.
        let used = best.bits % 8;
        assert_ne!(used, 0, "no padding to test");
        let mut dirty = body.clone();
        *dirty.last_mut().unwrap() |= 0x80;
        assert!(!canonical(&dirty));
        // Another code or parameter for the same class, and the other class's best plan:
        // the same set, not the encoder's bytes.
        let st = stats(&words, lo, hi, best.holes);
        let (min, range) = (st.min, st.max - st.min + 1);
        let others = match best.code {
            Code::Rice(k) => [
                Code::Rice(k + 1),
                Code::Rice(k - 1),
                Code::Bounded { min, range },
            ],
            Code::Bounded { .. } => [
                Code::Bounded {
                    min: min - 1,
                    range: range + 1,
                },
                Code::Bounded {
                    min,
                    range: range + 1,
                },
                Code::Rice((st.sum / st.members).ilog2() as u8),
            ],
        };
        for code in others {
            let other = Plan { code, ..best };
            assert!(
                !canonical(&write_gaps(&words, lo, hi, other, len)),
                "{code:?}"
            );
        }
        let other_class = plan(&stats(&words, lo, hi, !best.holes), u64::MAX).unwrap();
        assert!(!canonical(&write_gaps(&words, lo, hi, other_class, len)));
    }
}

proptest! {
    /// Runs of both classes of every length around the word size and the short-run
    /// limit, anywhere in the partition.
    #[test]
    fn counted_gaps_match_visiting_every_gap_and_decoding_the_body(
        start in 0u32..1 << 16,
        runs in prop::collection::vec((1u32..300, 1u32..300, 0u8..3), 0..200),
    ) {
        let mut words = empty_words();
        let mut at = start;
        for (acked, holes, scale) in runs {
            let (acked, holes) = match scale {
                0 => (acked % 20 + 1, holes % 20 + 1),
                1 => (acked % 70 + 1, holes % 70 + 1),
                _ => (acked, holes),
            };
            let end = (at + acked).min(1 << 16);
            fill(&mut words, at, end - 1, false);
            at = end + holes;
            if at >= 1 << 16 {
                break;
            }
        }
        if let Some((lo, hi)) = bounds(&words) {
            for holes in [false, true] {
                prop_assert_eq!(
                    counted(&stats(&words, lo, hi, holes)),
                    model(&words, lo, hi, holes)
                );
            }
            // Decoding the gaps body gathers the same statistics of both classes, and
            // finds it canonical for the budget it was written with.
            let body = gaps_body(&words, lo, hi, usize::MAX).unwrap();
            let (decoded, reading) = decode_gaps(&body, 1 << 16).unwrap();
            prop_assert_eq!(&decoded, &words);
            prop_assert_eq!(counted(&reading.acked), model(&words, lo, hi, false));
            prop_assert_eq!(counted(&reading.holes_stats), model(&words, lo, hi, true));
            prop_assert!(reading.is_canonical(usize::MAX));
            prop_assert!(reading.is_canonical(body.len()));
            prop_assert!(!reading.is_canonical(body.len() - 1));
        }
    }
}

/// A thread-local whose destructor encodes a partition after the thread's kept dense form is
/// gone (it was set up before the thread's first encode, so it is destroyed after the form):
/// the encoding is made, and is the same, as a store kept in a thread-local flushes when its
/// thread ends. Before, the access to the destroyed form panicked in a destructor, which aborts
/// the process.
#[test]
fn an_encode_from_a_thread_locals_destructor_after_the_kept_form_is_gone() {
    use std::sync::mpsc;

    struct EncodesOnDrop(mpsc::Sender<Vec<u8>>);
    impl Drop for EncodesOnDrop {
        fn drop(&mut self) {
            let set: RoaringBitmap = [1u32, 5, 900].into_iter().collect();
            let key = ackstore::internals::format::partition::PartitionKey::of(
                ackstore::Position::new(3, 0),
            );
            let _ = self
                .0
                .send(ackstore::internals::format::partition::encode_partition(
                    key, &set,
                ));
        }
    }
    thread_local! {
        static ON_EXIT: std::cell::RefCell<Option<EncodesOnDrop>> =
            const { std::cell::RefCell::new(None) };
    }
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        ON_EXIT.with(|slot| *slot.borrow_mut() = Some(EncodesOnDrop(send)));
        // The thread's first encode sets its kept form up after `ON_EXIT`.
        let full: RoaringBitmap = (0..1u32 << 16).collect();
        assert!(with_words_of(&full, |w| w.len()).is_some());
    })
    .join()
    .expect("the thread ends without a panic");
    let set: RoaringBitmap = [1u32, 5, 900].into_iter().collect();
    let key =
        ackstore::internals::format::partition::PartitionKey::of(ackstore::Position::new(3, 0));
    assert_eq!(
        receive.recv().expect("the destructor encoded"),
        ackstore::internals::format::partition::encode_partition(key, &set)
    );
}

proptest! {
    /// The decoders' kept dense form (`zeroed_words`, given back by `keep_words`), used for one
    /// record after another on this thread: every record of a set (each encoding the encoder
    /// picks: gaps, a span bitmap, roaring forms) decodes to exactly that set, also right after
    /// a damaged record (a byte of its body changed, its CRC made valid again), whose decode
    /// may stop midway or be refused as not canonical.
    #[test]
    fn records_decoded_one_after_another_each_hold_only_their_set(
        sets in proptest::collection::vec(
            (proptest::collection::vec(0u32..65_536, 0..3_000),
             proptest::option::of((0u32..65_536, 0u32..40_000)),
             any::<(usize, u8)>()),
            1..8,
        ),
    ) {
        use ackstore::internals::format::partition::{PartitionKey, decode_partition, encode_partition};
        let key = PartitionKey { ledger_id: 7, chunk: 3 };
        for (values, run, (at, flip)) in sets {
            let mut bitmap: RoaringBitmap = values.iter().copied().collect();
            if let Some((start, len)) = run {
                bitmap.insert_range(start..(start + len).min(1 << 16));
            }
            let record = encode_partition(key, &bitmap);
            // Damaged: one byte of the body changed, the CRC recomputed over the rest.
            let mut damaged = record.clone();
            let covered = damaged.len() - 4;
            let body_at = covered.saturating_sub(1 + at % covered.max(1)).max(10);
            if let Some(b) = damaged.get_mut(body_at.min(covered.saturating_sub(1))) {
                *b ^= flip | 1;
            }
            let crc = crc32fast::hash(&damaged[..covered]);
            damaged[covered..].copy_from_slice(&crc.to_le_bytes());
            if let Ok((k, set)) = decode_partition(&damaged) {
                // Accepted only as the encoder's own bytes for what it decoded to.
                prop_assert_eq!(encode_partition(k, &set), damaged);
            }
            let (k, set) = decode_partition(&record).expect("the encoder's record");
            prop_assert_eq!(k, key);
            prop_assert_eq!(set, bitmap);
        }
    }
}

//! Bounded memory (design invariant 3): millions of scattered acks under a small byte budget stay
//! within the budget plus one partition at every step, and none is lost through eviction.

use ackstore::Position;
use ackstore::internals::ackset::{MAX_PARTITION_BYTES, MemPartitionStore, RangeSetWrapper};

/// Entries per ledger that are candidates for an ack: one ack per window of `WINDOW` entries.
const ACKS_PER_LEDGER: u64 = 50_000;
const WINDOW: u64 = 20;

/// The `i`-th ack of a ledger: one entry in window `i`, at an offset that varies with `i`, so each
/// partition holds about 3,300 scattered entries (an array container of ~6.5 KiB).
fn acked_entry(ledger: u64, i: u64) -> u64 {
    i * WINDOW + (i.wrapping_mul(2_654_435_761) ^ ledger) % WINDOW
}

/// Visits the acks of a ledger in a scattered order (a stride coprime to the count), so every
/// partition of the ledger is touched again and again.
fn scattered(n: u64) -> impl Iterator<Item = u64> {
    const STRIDE: u64 = 7_919;
    (0..n).map(move |k| (k * STRIDE) % n)
}

#[test]
fn ten_million_acks_over_200_ledgers_stay_within_a_4_mib_budget_and_all_survive() {
    // Release: the full 10 million acks. Debug builds are ~30x slower, so they check 1/10 of the
    // ledgers under 1/10 of the budget, which keeps the same ratio of data to budget.
    let (ledgers, budget) = if cfg!(debug_assertions) {
        (20, 410 * 1024)
    } else {
        (200, 4 << 20)
    };
    let mut w = RangeSetWrapper::new(Box::new(MemPartitionStore::new()), budget);
    let limit = budget + MAX_PARTITION_BYTES;
    for ledger in 0..ledgers {
        for i in scattered(ACKS_PER_LEDGER) {
            assert!(
                w.add(Position::new(ledger, acked_entry(ledger, i)))
                    .expect("add")
            );
        }
        let s = w.stats();
        assert!(s.resident_bytes <= limit, "after ledger {ledger}: {s:?}");
    }
    let s = w.stats();
    // The peak is updated at every change, so this bounds every step, not only the samples.
    assert!(s.peak_resident_bytes <= limit, "{s:?}");
    assert_eq!(w.len(), ledgers * ACKS_PER_LEDGER);
    assert!(
        s.evictions > 0 && s.stores > 0,
        "the data must not fit: {s:?}"
    );
    // Everything evicted is still there, and nothing else is.
    for ledger in 0..ledgers {
        for i in 0..ACKS_PER_LEDGER {
            let entry = acked_entry(ledger, i);
            assert!(w.contains(Position::new(ledger, entry)).expect("contains"));
            let other = i * WINDOW + (entry + 1) % WINDOW;
            assert!(!w.contains(Position::new(ledger, other)).expect("contains"));
        }
    }
    let s = w.stats();
    println!(
        "{} acks over {ledgers} ledgers, budget {budget} B: {s:?}",
        w.len()
    );
    assert!(s.peak_resident_bytes <= limit, "{s:?}");
    assert!(s.loads > 0, "{s:?}");
    // Acks in neighbouring windows may touch; every other ack starts a range of its own.
    let touching: u64 = (0..ledgers)
        .map(|l| {
            (1..ACKS_PER_LEDGER)
                .filter(|&i| acked_entry(l, i - 1) + 1 == acked_entry(l, i))
                .count() as u64
        })
        .sum();
    assert!(touching > 0);
    assert_eq!(w.range_count().expect("range count"), w.len() - touching);
}

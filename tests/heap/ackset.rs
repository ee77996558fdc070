//! Bounded memory measured on the heap itself (design invariant 3): a counting global allocator
//! follows every byte a `RangeSetWrapper` allocates, and after every operation of a worst-ish
//! workload (random acks over many partitions of every container kind, then mark-delete moves)
//! the wrapper's heap stays within the budget, plus one partition, plus the index, plus a fixed
//! slack.

use ackstore::Position;
use ackstore::Result;
use ackstore::internals::ackset::{
    INDEX_ENTRY_BYTES, MAX_PARTITION_BYTES, MemPartitionStore, PartitionKey, PartitionStore,
    RangeSetWrapper,
};
use ackstore::internals::format::partition::code;
use roaring::RoaringBitmap;

use super::{COUNTING, live, signed};

/// Runs `f` with counting off.
fn uncounted<R>(f: impl FnOnce() -> R) -> R {
    COUNTING.with(|c| c.set(false));
    let out = f();
    COUNTING.with(|c| c.set(true));
    out
}

/// A store whose own memory is not counted. A loaded bitmap is counted: the wrapper owns it.
struct UncountedStore(MemPartitionStore);

impl PartitionStore for UncountedStore {
    fn load(&mut self, key: PartitionKey) -> Result<Option<RoaringBitmap>> {
        self.0.load(key)
    }
    fn store(&mut self, key: PartitionKey, bitmap: &RoaringBitmap) -> Result<()> {
        uncounted(|| self.0.store(key, bitmap))
    }
    fn forget(&mut self, key: PartitionKey) {
        uncounted(|| self.0.forget(key));
    }
}

impl Drop for UncountedStore {
    fn drop(&mut self) {
        uncounted(|| drop(std::mem::take(&mut self.0)));
    }
}

/// Heap the wrapper may hold beyond budget, one partition and index: the B-tree's root leaf and
/// the LRU table's smallest sizes, which the per-entry charges do not cover.
const SLACK_BYTES: usize = 1024;

/// A deterministic generator (xorshift), so the workload is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Two workloads of different seeds, one per thread (each thread counts its own heap), each on
/// half the ledgers under half the budget (the same acks per partition and partitions per byte
/// of budget as one workload of all of them), so the test takes half the time on two cores.
#[test]
fn wrapper_heap_stays_within_budget_one_partition_and_index() {
    let ops: u64 = if cfg!(debug_assertions) {
        30_000
    } else {
        300_000
    };
    let seeds = [0x9E37_79B9_7F4A_7C15, 0xD1B5_4A32_D192_ED03];
    let results: Vec<_> = std::thread::scope(|s| {
        let runs: Vec<_> = seeds
            .into_iter()
            .map(|seed| s.spawn(move || workload(seed, ops)))
            .collect();
        runs.into_iter()
            .map(|run| run.join().expect("workload"))
            .collect()
    });
    for (budget, worst, s) in results {
        assert!(s.evictions > 1_000 && s.loads > 1_000, "{s:?}");
        println!(
            "budget {budget} B: worst heap without the index {worst} B (budget + {} B), {s:?}",
            worst - signed(budget)
        );
    }
}

/// `ops` random acks over many partitions of every container kind, then mark-delete moves, on
/// one wrapper; checks its heap after every operation (on this thread's count) and returns the
/// budget, the worst heap seen without the index, and the wrapper's last stats.
fn workload(seed: u64, ops: u64) -> (usize, isize, ackstore::internals::ackset::AckSetStats) {
    const LEDGERS: u64 = 4;
    const CHUNKS: u64 = 24;
    let budget = 128 << 10;
    let mut rng = Rng(seed);
    // The dense form this thread's decoders keep from one load to the next (8 KiB a thread that
    // loads partitions, whatever its wrappers) is the thread's, not the wrapper's: made before
    // the count starts, as a thread that loaded a partition before holds it.
    code::keep_words(code::zeroed_words(), None);
    let base = live();
    let mut w = RangeSetWrapper::new(Box::new(UncountedStore(MemPartitionStore::new())), budget);
    let mut worst = 0isize;
    let mut check = |w: &RangeSetWrapper, step: &str| {
        let heap = live() - base;
        let s = w.stats();
        let limit = budget + MAX_PARTITION_BYTES + s.partitions * INDEX_ENTRY_BYTES + SLACK_BYTES;
        assert!(
            heap <= signed(limit),
            "{step}: heap {heap} > {limit}: {s:?}"
        );
        worst = worst.max(heap - signed(s.partitions * INDEX_ENTRY_BYTES));
    };
    // Each partition gets its own density, so array, bitmap and run containers all occur, and
    // arrays grow by doubling past what they were loaded with.
    let density = |ledger: u64, chunk: u64| 1 + (ledger * 31 + chunk * 7) % 24;
    for i in 0..ops {
        let ledger = rng.below(LEDGERS);
        let chunk = rng.below(CHUNKS);
        let base_entry = chunk << 16;
        let d = density(ledger, chunk);
        if d == 1 && rng.below(4) == 0 {
            // Runs: short ranges, which later acks between them merge.
            let first = base_entry + rng.below(1 << 16);
            w.add_range(ledger, first, first + rng.below(8))
                .expect("add_range");
        } else {
            let entry = base_entry + rng.below(1 << 16) / d * d;
            w.add(Position::new(ledger, entry)).expect("add");
        }
        if i % 64 == 0 {
            check(&w, "acks");
        }
    }
    check(&w, "after acks");
    // Mark-delete moves up through every ledger, removing partly and then wholly.
    for ledger in 0..LEDGERS {
        for step in 0..CHUNKS * 4 {
            let entry = step << 14;
            w.remove_at_most(Position::new(ledger, entry))
                .expect("remove_at_most");
            check(&w, "removes");
            w.add(Position::new(ledger, entry + 1 + rng.below(1 << 14)))
                .expect("add");
            check(&w, "acks between removes");
        }
    }
    let s = w.stats();
    drop(w);
    assert_eq!(live(), base, "the wrapper frees all it holds");
    (budget, worst, s)
}

//! The set of individually acknowledged entries above a cursor's mark-delete position.
//!
//! Owns: the in-memory representation of acks as roaring bitmaps split into partitions
//! ([`PartitionKey`]: a data ledger and a span of `2^PARTITION_BITS` entry ids), the maximal
//! inclusive ranges they form, and the byte budget of what stays resident.
//! - [`AckSet`]: every partition in memory, no bound; the reference the wrapper is tested against.
//! - [`RangeSetWrapper`]: the same queries with partitions resident under an LRU byte budget,
//!   evicted to and loaded from a [`PartitionStore`].
//! - [`AckBudget`]: one budget shared by many cursors' wrappers (a store's `ack_memory_bytes`).
//! - [`pulsar`]: what Pulsar's own encoding of the same ranges would cost, for comparison.
//!
//! Must never: do I/O itself (a [`PartitionStore`] does it), drop an ack without being asked
//! (`remove_at_most`, `clear`), let a range span two ledgers, or truncate an entry id: every `u64`
//! entry id is stored exactly (the partition's chunk holds the high bits).
//!
//! Memory: what the wrapper's budget bounds is the heap of its resident partitions. Each is
//! charged an upper bound of what its bitmap holds (array containers by their capacity, which
//! roaring lets grow to twice the contents; bitmap containers 8 KiB; run containers twice the
//! most runs held since they became run containers), plus a fixed overhead for the container
//! vector and the partition's slot in the slab of resident partitions, plus the slab's spare
//! slots. The index of live partitions is
//! outside the budget: at most `INDEX_ENTRY_BYTES` (96) per live partition, that is per 65,536
//! entry ids of ledger span that hold an ack. `tests/heap/ackset.rs` checks the real heap against
//! budget + `MAX_PARTITION_BYTES` + index with a counting allocator.
//!
//! Invariants shared by both sets: no partition is empty; a partition's bitmap only holds
//! values below `2^PARTITION_BITS`; ranges join across chunk boundaries within a ledger, so
//! every reported range is maximal.

pub mod budget;
pub mod index;
pub mod resident;
pub mod set;
pub mod store;
pub mod wrapper;

pub mod pulsar;

pub use crate::format::partition::{PARTITION_BITS, PARTITION_SPAN, PartitionKey};
pub use budget::{AckBudget, AckBudgetStats};
pub(crate) use budget::{BudgetLink, Releasable, Release};
pub use set::{AckSet, Ranges};
pub use store::{MemPartitionStore, PartitionStore};
pub use wrapper::{AckSetStats, INDEX_ENTRY_BYTES, RangeSetWrapper};

use roaring::RoaringBitmap;

use crate::format::partition::MAX_BITMAP_BYTES;
use crate::position::Position;

/// An inclusive range of acked positions within one ledger.
pub type AckRange = (Position, Position);

/// Bytes a resident partition is charged on top of its container's store: the bitmap's vector of
/// containers (a partition has one container, in a vector that may have grown to 4 slots of 40
/// bytes: 160, measured with roaring 0.12 on a 64-bit target), and the slot of the slab of
/// resident partitions holding key, bitmap, flags and links (at most 96 bytes, checked at
/// compile time). The slab's spare slots are charged apart, the index outside the budget.
pub const PARTITION_OVERHEAD_BYTES: usize = 256;

/// The most a resident partition is charged. Its container's store is one of: an array of at most
/// 4,096 values in a vector of capacity at most twice that (16 KiB); a bitmap (8 KiB); a
/// run list of at most `MAX_BITMAP_BYTES / 4 + 2` runs (a longer one is converted on the next
/// change), charged at twice that many 4-byte runs.
pub const MAX_PARTITION_BYTES: usize = 2 * (MAX_BITMAP_BYTES + 8) + PARTITION_OVERHEAD_BYTES;

/// Most values a roaring array container holds before it becomes a bitmap container.
const ARRAY_LIMIT: usize = 4096;

/// Heap bytes of a bitmap container.
const BITMAP_CONTAINER_BYTES: usize = 8192;

/// The largest offset within a partition.
pub const LAST_OFFSET: u32 = u32::MAX >> (32 - PARTITION_BITS);

/// What a resident partition is charged against the budget: an upper bound of the heap its bitmap
/// holds, plus [`PARTITION_OVERHEAD_BYTES`]. Charging the serialized size instead would be up to
/// 2x low, as roaring's vectors grow by doubling and keep their capacity when values go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Charge {
    /// Bytes charged.
    pub bytes: usize,
    /// The most runs the partition's run container has held since it became one (0 when it is
    /// not one): the run vector's capacity is at most twice that, as it only grows by doubling.
    pub run_peak: usize,
    /// The container is a bitmap (8 KiB whatever it holds).
    pub bitmap_container: bool,
    /// The capacity, in values, of the array container (0 when it is not one): up to this many
    /// values it holds without reallocating.
    pub array_capacity: usize,
}

impl Charge {
    /// The charge of `bitmap` after a change, given its charge before (`Charge::default()` for a
    /// bitmap just decoded or created, whose vectors are exactly as long as their contents).
    /// - array container: its capacity, which roaring reports (as `capacity * 4` bytes);
    /// - bitmap container: 8 KiB;
    /// - run container: roaring reports only the number of runs, and merging runs shrinks it but
    ///   not the vector, so it is charged at twice the most runs held since it became a run
    ///   container (at least the 4 a vector first allocates).
    #[must_use]
    pub fn of(bitmap: &RoaringBitmap, before: Charge) -> Self {
        let stats = bitmap.statistics();
        let array = usize::try_from(stats.n_bytes_array_containers / 2).unwrap_or(usize::MAX);
        let bitmaps = stats.n_bitset_containers as usize * BITMAP_CONTAINER_BYTES;
        let run_peak = if stats.n_run_containers == 0 {
            0
        } else {
            // `n_bytes_run_containers` is 2 bytes of run count plus 4 bytes per run.
            let runs = usize::try_from(stats.n_bytes_run_containers).unwrap_or(usize::MAX) / 4;
            runs.max(before.run_peak)
        };
        let runs = if run_peak == 0 {
            0
        } else {
            (2 * run_peak).max(4) * 4
        };
        Self {
            bytes: array + bitmaps + runs + PARTITION_OVERHEAD_BYTES,
            run_peak,
            bitmap_container: stats.n_bitset_containers > 0,
            // `n_bytes_array_containers` is 4 bytes per value of capacity.
            array_capacity: usize::try_from(stats.n_bytes_array_containers / 4)
                .unwrap_or(usize::MAX),
        }
    }

    /// The charge after a change of `bitmap`, which now holds `len` values, `grew` if it gained
    /// values (`inserts_only` if by `insert`s alone). Two growths need no statistics (which scan
    /// a bitmap container for its largest value): a bitmap container stays one (8 KiB) unless
    /// it becomes full (then `settle` makes it one run), and an array container that gained
    /// values by `insert`s alone and holds no more than its capacity and the array limit was
    /// neither reallocated (a vector grows only past its capacity, and an insert never shrinks
    /// it) nor converted (that happens only past the limit), so it is charged as before.
    #[must_use]
    pub fn after_change(
        self,
        bitmap: &RoaringBitmap,
        len: u64,
        grew: bool,
        inserts_only: bool,
    ) -> Self {
        let same_array = inserts_only && len <= self.array_capacity.min(ARRAY_LIMIT) as u64;
        if grew && ((self.bitmap_container && len < PARTITION_SPAN) || same_array) {
            self
        } else {
            Self::of(bitmap, self)
        }
    }
}

/// Keeps a partition bitmap compact after a change: a full partition collapses to one run, and a
/// run container that outgrew the largest plain form is converted back (roaring leaves both as
/// they are on insert).
pub fn settle(bitmap: &mut RoaringBitmap) {
    settle_len(bitmap, bitmap.len());
}

/// [`settle`] of a bitmap known to hold `len` values (counting a run container's values takes
/// a walk of its runs).
fn settle_len(bitmap: &mut RoaringBitmap, len: u64) {
    if len == PARTITION_SPAN || bitmap.serialized_size() > MAX_BITMAP_BYTES {
        bitmap.optimize();
    }
}

/// [`settle`] after `insert`s grew a partition charged `before` to `len` values: an insert
/// never makes an array or bitmap container a run container, so only a full partition or a
/// run container needs looking at.
pub fn settle_after_insert(bitmap: &mut RoaringBitmap, before: Charge, len: u64) {
    if before.run_peak > 0 || len == PARTITION_SPAN {
        settle_len(bitmap, len);
    }
}

/// The offsets of `key`'s partition that lie in `[from, to]`: `None` when the partition is
/// entirely inside, else the clipped local bounds. The caller only asks for keys between
/// `PartitionKey::of(from)` and `PartitionKey::of(to)`.
#[must_use]
pub fn clip(key: PartitionKey, from: Position, to: Position) -> Option<(u32, u32)> {
    let lo = if key == PartitionKey::of(from) {
        PartitionKey::offset_of(from.entry_id)
    } else {
        0
    };
    let hi = if key == PartitionKey::of(to) {
        PartitionKey::offset_of(to.entry_id)
    } else {
        LAST_OFFSET
    };
    (lo != 0 || hi != LAST_OFFSET).then_some((lo, hi))
}

/// Acked entries of `bitmap` in the local bounds from [`clip`] (`None`: all of them).
fn count_clipped(bitmap: &RoaringBitmap, bounds: Option<(u32, u32)>) -> u64 {
    match bounds {
        None => bitmap.len(),
        Some((lo, hi)) => bitmap.range_cardinality(lo..=hi),
    }
}

/// The partitions that `first..=last` of `ledger_id` touches, with the local offsets it covers in
/// each, ascending. Empty when `first > last`.
fn chunks(ledger_id: u64, first: u64, last: u64) -> impl Iterator<Item = (PartitionKey, u32, u32)> {
    let mut next = (first <= last).then_some(first);
    std::iter::from_fn(move || {
        let start = next?;
        let key = PartitionKey::of(Position::new(ledger_id, start));
        let end = last.min(key.last_entry());
        next = end.checked_add(1).filter(|n| *n <= last);
        Some((
            key,
            PartitionKey::offset_of(start),
            PartitionKey::offset_of(end),
        ))
    })
}

/// Direction in which partitions are visited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Ascending,
    Descending,
}

/// Joins the per-partition runs of consecutive offsets, fed in one direction, into maximal ranges:
/// a run that continues the pending range in the same ledger extends it (this only happens across
/// a chunk boundary, as runs within a bitmap are already maximal).
#[derive(Debug)]
pub struct RangeJoiner {
    direction: Direction,
    pending: Option<AckRange>,
}

impl RangeJoiner {
    #[must_use]
    pub fn new(direction: Direction) -> Self {
        Self {
            direction,
            pending: None,
        }
    }

    /// Adds the run `lo..=hi` of `key`'s partition; returns a range that is now complete.
    pub fn push(&mut self, key: PartitionKey, lo: u32, hi: u32) -> Option<AckRange> {
        let (first, last) = (key.position(lo), key.position(hi));
        let Some((p_first, p_last)) = self.pending else {
            self.pending = Some((first, last));
            return None;
        };
        let joins = first.ledger_id == p_first.ledger_id
            && match self.direction {
                Direction::Ascending => p_last.entry_id.checked_add(1) == Some(first.entry_id),
                Direction::Descending => last.entry_id.checked_add(1) == Some(p_first.entry_id),
            };
        if joins {
            self.pending = Some(match self.direction {
                Direction::Ascending => (p_first, last),
                Direction::Descending => (first, p_last),
            });
            None
        } else {
            self.pending.replace((first, last))
        }
    }

    /// Whether a run of `key`'s partition could extend the pending range (so it is not complete
    /// before that partition has been seen).
    fn could_continue(&self, key: PartitionKey) -> bool {
        self.pending.is_some_and(|(first, last)| {
            first.ledger_id == key.ledger_id
                && match self.direction {
                    Direction::Ascending => last.entry_id.checked_add(1) == Some(key.first_entry()),
                    Direction::Descending => {
                        key.last_entry().checked_add(1) == Some(first.entry_id)
                    }
                }
        })
    }

    /// Feeds every run of one partition's bitmap, in the joiner's direction, to `emit` (which
    /// returns `false` to stop); returns `false` if `emit` stopped.
    fn push_bitmap(
        &mut self,
        key: PartitionKey,
        bitmap: &RoaringBitmap,
        emit: &mut dyn FnMut(AckRange) -> bool,
    ) -> bool {
        let mut runs = bitmap.iter();
        loop {
            let run = match self.direction {
                Direction::Ascending => runs.next_range(),
                Direction::Descending => runs.next_range_back(),
            };
            let Some(run) = run else { return true };
            if let Some(done) = self.push(key, *run.start(), *run.end())
                && !emit(done)
            {
                return false;
            }
        }
    }

    /// Takes the last pending range.
    pub fn finish(&mut self) -> Option<AckRange> {
        self.pending.take()
    }
}

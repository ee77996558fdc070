//! The batch-index phase of `ackstore perf --batch-size N`: acknowledges some messages of every
//! entry left unacknowledged, flushes, then measures the bytes the partial state added to the
//! cursor's committed state against Pulsar's `BatchedEntryDeletionIndexInfo` encoding of the
//! same state.

use ackstore::pulsar;
use ackstore::{Cursor, Position};
use roaring::RoaringBitmap;

/// Which messages of a batch a consumer has acknowledged when the cursor is persisted.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum BatchPattern {
    /// The first k messages, k uniform in [1, N - 1]: a consumer acking in order, caught
    /// mid-batch (the common case).
    Prefix,
    /// Each message with probability 1/2 (at least one acked, one not): the worst case.
    Random,
}

/// What the batch phase measured.
#[derive(Debug, Default)]
pub struct BatchFigures {
    /// Entries left partially acknowledged.
    pub partial_entries: u64,
    /// Bytes the partial state added to the committed state of the cursor: its batch-index
    /// entries (frames and CRCs included) plus the marker's batch table.
    pub batch_index_bytes: u64,
    /// Bytes the flush of the partial state appended (batch-index entries and the marker).
    pub batch_flush_bytes: u64,
    /// Bytes of Pulsar's `batchedEntryDeletionIndexInfo` elements for the same state.
    pub pulsar_batch_index_bytes: u64,
    /// Batch-index acks made.
    pub batch_acks: u64,
    /// Milliseconds the batch-index acks took (evictions of partial entries included).
    pub batch_ack_ms: f64,
    /// Resident ack state (partitions plus partial entries) after the flush.
    pub batch_resident_bytes: u64,
    /// Evictions of partitions of partial entries during the phase.
    pub batch_evictions: u64,
}

/// How a run measures a cursor: a flush returning the bytes it appended to the journal the
/// cursor persists through (its store's, or the one its topic hosts), and the journal's live
/// bytes.
pub type StoreJournal<'a> = (
    &'a dyn Fn(&Cursor) -> ackstore::Result<u64>,
    &'a dyn Fn() -> u64,
);

/// `SplitMix64`, seeded: the same run picks the same messages.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Acknowledges, in every entry of `positions` that `cursor` has not acknowledged, the
/// messages `pattern` picks out of `batch_size`, then measures the partial state: `flush`
/// flushes the cursor and returns the bytes the flush appended to its journal, and `live` is
/// the journal's live bytes.
pub fn run(
    cursor: &Cursor,
    positions: &[Position],
    (batch_size, pattern, seed): (u32, BatchPattern, u64),
    (flush, live): StoreJournal<'_>,
) -> ackstore::Result<BatchFigures> {
    let mut figures = BatchFigures::default();
    if batch_size < 2 {
        return Ok(figures);
    }
    cursor.flush()?;
    let before = live();
    let mut rng = seed ^ 0x0ba7_c4ed;
    let started = std::time::Instant::now();
    // The partial entries acknowledged, each with its acknowledged messages (never all of
    // them): the state Pulsar's encoding is sized for.
    let mut partial: Vec<(Position, RoaringBitmap)> = Vec::new();
    for &pos in positions {
        if cursor.is_acked(pos)? {
            continue;
        }
        let picked: Vec<u32> = match pattern {
            BatchPattern::Prefix => {
                let k = 1 + u32::try_from(next(&mut rng) % u64::from(batch_size - 1)).unwrap_or(0);
                (0..k).collect()
            }
            BatchPattern::Random => {
                let mut picked: Vec<u32> = (0..batch_size)
                    .filter(|_| next(&mut rng) & 1 == 1)
                    .collect();
                if picked.is_empty() {
                    picked.push(0);
                }
                if picked.len() == batch_size as usize {
                    picked.pop();
                }
                picked
            }
        };
        for &index in &picked {
            cursor.ack_batch_index(pos, index, batch_size)?;
            figures.batch_acks += 1;
        }
        partial.push((pos, picked.into_iter().collect()));
    }
    figures.batch_ack_ms = started.elapsed().as_secs_f64() * 1e3;
    let flushed = flush(cursor)?;
    let stats = cursor.stats()?;
    figures.batch_resident_bytes =
        (stats.ackset.resident_bytes + stats.ackset.charged_bytes) as u64;
    figures.batch_evictions = stats.batch_evictions;
    // In the journal: what the partial state added to the live records (its batch
    // records and the marker's batch table), and what the flush after the acks appended (the
    // batch records evictions did not write before it, and the marker or delta).
    figures.batch_index_bytes = live().saturating_sub(before);
    figures.batch_flush_bytes = flushed;
    for (pos, acked) in &partial {
        figures.partial_entries += 1;
        figures.pulsar_batch_index_bytes +=
            pulsar::batch_deletion_index_bytes(*pos, batch_size, acked);
    }
    Ok(figures)
}

//! Batch-index acks of one partition: the messages already acknowledged inside entries that are
//! acknowledged only in part (PIP-54).
//!
//! Owns: the encoding of a batch-index entry (kind 5 of the cursor-ledger frame). Pure; decode
//! allocates at most in proportion to its input and never panics. `docs/format.md`, section
//! "Batch-index entry", draws the bytes.
//!
//! ```text
//! body    size    field
//! 0       8       data ledger id (u64 LE)
//! 8       8       chunk: entry_id >> PARTITION_BITS (u64 LE)
//! 16      4       count of partial entries (u32 LE, >= 1)
//! 20      ...     count records, entry ids ascending:
//!                   head   varint: (gap << 2) | (same_size << 1) | runs
//!                            gap: entry offset in the chunk minus (previous offset + 1);
//!                            the first record's gap is its offset
//!                   size   varint batch size (>= 2), absent when same_size (equal to the
//!                          previous record's; never set on the first record)
//!                   acked  runs = 0: ceil(size / 8) bytes, bit i (LSB first) = message i acked,
//!                            bits from size on zero
//!                          runs = 1: varint k, then k varint run lengths, alternately acked
//!                            and not acked, starting with acked (see below)
//! ```
//!
//! Runs: the first run is acked messages and may be empty only as the very first length
//! (`0` when message 0 is not acked); every later length is at least 1 and the lengths add up to
//! `size`. The encoder writes runs only when strictly shorter than the bitmap, and the decoder
//! accepts only that choice, with canonical varints, so every state has one encoding
//! (decode then encode gives back the bytes). A partial entry has at least one message acked
//! and one not: anything else is refused.

use roaring::RoaringBitmap;

use super::{EntryKind, end_frame, open_frame, start_frame};
use crate::error::CorruptionKind;
use crate::format::partition::{PARTITION_BITS, PARTITION_SPAN};
use crate::format::{Corruption, Reader, put_varint, varint_len};

/// Bytes of a batch-index entry's fixed body: ledger, chunk, count.
pub const BATCH_FIXED_LEN: usize = 8 + 8 + 4;

/// The messages acknowledged so far inside one partially acknowledged entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartialEntry {
    /// The entry's id in its data ledger.
    pub entry_id: u64,
    /// Messages in the entry (its `num_messages`).
    pub batch_size: u32,
    /// Indexes (`0..batch_size`) of the messages acknowledged.
    pub acked: RoaringBitmap,
}

impl PartialEntry {
    /// Whether this is a partial state: some message acknowledged, some not, all within the
    /// batch.
    #[must_use]
    pub fn is_partial(&self) -> bool {
        let len = self.acked.len();
        len > 0 && len < u64::from(self.batch_size) && self.acked.max() < Some(self.batch_size)
    }
}

/// A decoded batch-index entry: the partial entries of one partition `(ledger, chunk)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchPartition {
    /// Data ledger.
    pub ledger_id: u64,
    /// Chunk of the data ledger (`entry_id >> PARTITION_BITS`).
    pub chunk: u64,
    /// The partial entries, entry ids ascending, each within the chunk.
    pub entries: Vec<PartialEntry>,
}

/// The largest batch size (`num_messages` of an entry) a batch-index ack may declare:
/// 1,048,576 (2^20). Pulsar bounds a batch by its producer's `batchingMaxMessages` (1,000 by
/// default) and, whatever the producer asks, by the broker's `maxMessageSize` (5 MB by default):
/// every message of a batch carries at least 6 bytes of framing (its metadata's 4-byte length and
/// the required `payload_size` field), so no batch the broker accepts holds more than about
/// 874,000 messages. At this size an entry's acknowledged messages take at most 128 KiB, in
/// memory and in a record (the bitmap form).
pub const MAX_BATCH_SIZE: u32 = 1 << 20;

/// Run lengths of `acked` over `0..size`: acked first (possibly 0), then alternating. Built
/// from the bitmap's ranges, so the work and the output follow the runs of acknowledged
/// messages, never `size`: a batch declared with 2^32 - 1 messages of which 3 are acked costs
/// what a batch of 10 does.
#[must_use]
pub fn runs(acked: &RoaringBitmap, size: u32) -> Vec<u64> {
    let size = u64::from(size);
    let mut out: Vec<u64> = Vec::new();
    // The first index no run covers yet.
    let mut at = 0u64;
    let mut ranges = acked.iter();
    while let Some(range) = ranges.next_range() {
        let start = u64::from(*range.start());
        if start >= size {
            break;
        }
        let end = (u64::from(*range.end()) + 1).min(size);
        if out.is_empty() {
            if start > 0 {
                out.extend([0, start]);
            }
            out.push(end - start);
        } else if start == at {
            // A range that continues the previous one (ranges are maximal; kept for safety).
            if let Some(last) = out.last_mut() {
                *last += end - start;
            }
        } else {
            out.extend([start - at, end - start]);
        }
        at = end;
    }
    if at < size {
        if out.is_empty() {
            out.push(0);
        }
        out.push(size - at);
    }
    out
}

fn bitmap_len(size: u32) -> usize {
    (size as usize).div_ceil(8)
}

fn runs_len(runs: &[u64]) -> usize {
    varint_len(runs.len() as u64) + runs.iter().map(|&r| varint_len(r)).sum::<usize>()
}

/// Encoded size of one record after `previous_size` (its batch size, `None` for the first).
fn record_len(gap: u64, previous_size: Option<u32>, e: &PartialEntry) -> usize {
    let runs = runs(&e.acked, e.batch_size);
    let same = previous_size == Some(e.batch_size);
    let size_len = if same {
        0
    } else {
        varint_len(u64::from(e.batch_size))
    };
    let acked = runs_len(&runs).min(bitmap_len(e.batch_size));
    varint_len(gap << 2) + size_len + acked
}

/// Encoded size of the entry for `partition`.
#[must_use]
pub fn batch_entry_len(partition: &BatchPartition) -> usize {
    let mut len = super::HEADER_LEN + BATCH_FIXED_LEN + super::CRC_LEN;
    let mut next = partition.chunk << PARTITION_BITS;
    let mut previous = None;
    for e in &partition.entries {
        len += record_len(e.entry_id.saturating_sub(next), previous, e);
        next = e.entry_id + 1;
        previous = Some(e.batch_size);
    }
    len
}

/// Encodes a batch-index entry. The caller keeps the entries ascending, within the chunk,
/// and each partial ([`PartialEntry::is_partial`]); `None` otherwise (nothing is written).
#[must_use]
pub fn encode_batch_entry(partition: &BatchPartition) -> Option<Vec<u8>> {
    let count = u32::try_from(partition.entries.len()).ok()?;
    if count == 0 {
        return None;
    }
    let first = partition.chunk.checked_shl(PARTITION_BITS)?;
    let mut out = start_frame(
        EntryKind::BatchIndexes,
        batch_entry_len(partition) - super::HEADER_LEN - super::CRC_LEN,
    );
    out.extend_from_slice(&partition.ledger_id.to_le_bytes());
    out.extend_from_slice(&partition.chunk.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    let mut next = first;
    let mut previous = None;
    for e in &partition.entries {
        let gap = e.entry_id.checked_sub(next)?;
        if e.entry_id - first >= PARTITION_SPAN || !e.is_partial() {
            return None;
        }
        let runs = runs(&e.acked, e.batch_size);
        let use_runs = runs_len(&runs) < bitmap_len(e.batch_size);
        let same = previous == Some(e.batch_size);
        put_varint(
            &mut out,
            (gap << 2) | (u64::from(same) << 1) | u64::from(use_runs),
        );
        if !same {
            put_varint(&mut out, u64::from(e.batch_size));
        }
        if use_runs {
            put_varint(&mut out, runs.len() as u64);
            for r in runs {
                put_varint(&mut out, r);
            }
        } else {
            let mut bytes = vec![0u8; bitmap_len(e.batch_size)];
            for i in &e.acked {
                if let Some(b) = bytes.get_mut((i / 8) as usize) {
                    *b |= 1 << (i % 8);
                }
            }
            out.extend_from_slice(&bytes);
        }
        next = e.entry_id + 1;
        previous = Some(e.batch_size);
    }
    Some(end_frame(out))
}

/// Decodes and verifies a batch-index entry.
pub fn decode_batch_entry(payload: &[u8]) -> Result<BatchPartition, Corruption> {
    let mut body = open_frame(payload, EntryKind::BatchIndexes)?;
    let ledger_id = body.u64()?;
    let chunk_at = body.offset();
    let chunk = body.u64()?;
    let first = chunk
        .checked_shl(PARTITION_BITS)
        .filter(|f| f >> PARTITION_BITS == chunk)
        .ok_or(Corruption::new(
            CorruptionKind::InvalidField("chunk"),
            chunk_at,
        ))?;
    // Each record takes at least its head and one byte of acks.
    let count = body.count_u32(2)?;
    if count == 0 {
        return Err(Corruption::new(CorruptionKind::BadLength, chunk_at + 8));
    }
    let mut entries = Vec::with_capacity(count);
    let mut next = first;
    let mut previous: Option<u32> = None;
    for _ in 0..count {
        entries.push(decode_record(&mut body, first, &mut next, &mut previous)?);
    }
    body.finish()?;
    Ok(BatchPartition {
        ledger_id,
        chunk,
        entries,
    })
}

/// The key and the partial-entry count of a batch-index entry, after its frame verifies (CRC,
/// magic, kind) and its fixed body reads (chunk in range, count at least 1): what a scan needs
/// of an entry it does not load. Its records are decoded only by [`decode_batch_entry`].
pub fn peek_batch_entry(payload: &[u8]) -> Result<(u64, u64, u32), Corruption> {
    let mut body = open_frame(payload, EntryKind::BatchIndexes)?;
    let ledger_id = body.u64()?;
    let chunk_at = body.offset();
    let chunk = body.u64()?;
    if chunk
        .checked_shl(PARTITION_BITS)
        .is_none_or(|f| f >> PARTITION_BITS != chunk)
    {
        return Err(Corruption::new(
            CorruptionKind::InvalidField("chunk"),
            chunk_at,
        ));
    }
    let count = body.u32()?;
    if count == 0 {
        return Err(Corruption::new(CorruptionKind::BadLength, chunk_at + 8));
    }
    Ok((ledger_id, chunk, count))
}

fn decode_record(
    body: &mut Reader<'_>,
    first: u64,
    next: &mut u64,
    previous: &mut Option<u32>,
) -> Result<PartialEntry, Corruption> {
    let at = body.offset();
    let bad = |field| Corruption::new(CorruptionKind::InvalidField(field), at);
    let head = body.varint()?;
    let (gap, same, use_runs) = (head >> 2, head & 2 != 0, head & 1 != 0);
    let entry_id = next
        .checked_add(gap)
        .filter(|e| e - first < PARTITION_SPAN)
        .ok_or(bad("batch entry id"))?;
    let batch_size = if same {
        previous.ok_or(bad("batch size"))?
    } else {
        let size = u32::try_from(body.varint()?).map_err(|_| bad("batch size"))?;
        if *previous == Some(size) {
            return Err(bad("batch size"));
        }
        size
    };
    if batch_size < 2 {
        return Err(bad("batch size"));
    }
    let mut acked = RoaringBitmap::new();
    if use_runs {
        // Each run takes at least one byte: the count is bounded by the input.
        let k = usize::try_from(body.varint()?).map_err(|_| bad("batch runs"))?;
        if k > body.remaining() {
            return Err(Corruption::new(CorruptionKind::BadLength, at));
        }
        let mut at_index = 0u64;
        let mut runs = Vec::with_capacity(k);
        for i in 0..k {
            let run = body.varint()?;
            if run == 0 && i > 0 {
                return Err(bad("batch runs"));
            }
            let end = at_index
                .checked_add(run)
                .filter(|&e| e <= u64::from(batch_size))
                .ok_or(bad("batch runs"))?;
            if i % 2 == 0 && run > 0 {
                // Both ends are within `batch_size`, a u32.
                acked.insert_range(
                    u32::try_from(at_index).map_err(|_| bad("batch runs"))?
                        ..u32::try_from(end).map_err(|_| bad("batch runs"))?,
                );
            }
            runs.push(run);
            at_index = end;
        }
        if at_index != u64::from(batch_size) || runs_len(&runs) >= bitmap_len(batch_size) {
            return Err(bad("batch runs"));
        }
    } else {
        let bytes = body.take(bitmap_len(batch_size))?;
        for (i, &b) in bytes.iter().enumerate() {
            for bit in 0..8u32 {
                if b & (1 << bit) != 0 {
                    let index = u32::try_from(i * 8).map_err(|_| bad("batch bitmap"))? + bit;
                    if index >= batch_size {
                        return Err(bad("batch bitmap"));
                    }
                    acked.insert(index);
                }
            }
        }
        if runs_len(&runs(&acked, batch_size)) < bitmap_len(batch_size) {
            return Err(bad("batch bitmap"));
        }
    }
    let entry = PartialEntry {
        entry_id,
        batch_size,
        acked,
    };
    if !entry.is_partial() {
        return Err(bad("batch acks"));
    }
    *next = entry_id + 1;
    *previous = Some(batch_size);
    Ok(entry)
}

//! The single-entry snapshot: a cursor's whole ack state in one entry, ranges grouped by data
//! ledger and encoded as varint gaps and spans (see the parent module for the entry frame).

use super::batch::{BatchPartition, decode_batch_entry, encode_batch_entry};
use super::{
    CRC_LEN, Corruption, EntryKind, FLAG_BATCH, MAGIC, PersistedState, Reader, SNAPSHOT_GROUP_LEN,
    corrupt, end_frame, open_frame_bound, put_varint, start_frame, varint_len,
};
use crate::error::{CorruptionKind, Error, Result};

/// Builds a snapshot entry from ascending ranges, under a byte and a range limit.
///
/// Body: cursor state (as in a marker), ledger group count u32, then per data ledger (ascending):
/// ledger id u64, range count u32 (>= 1), and per range two varints: `gap` and `span`. The first
/// range of a group starts at `gap`; a later one at `previous_last + 2 + gap` (maximal ranges
/// have at least one unacked entry between them); it ends at `first + span`.
///
/// With batch-index state ([`SnapshotWriter::finish_with_batch`]) the frame has [`FLAG_BATCH`]
/// and the groups are followed by a batch section: count u32 (>= 1), then per partition
/// (ascending by `(ledger, chunk)`) a length u32 and a whole batch-index entry (kind 5, its own
/// frame and CRC) of that length.
#[derive(Debug)]
pub struct SnapshotWriter {
    out: Vec<u8>,
    groups: u32,
    groups_at: usize,
    group_count_at: usize,
    group_ranges: u32,
    last: Option<(u64, u64)>,
    ranges: u64,
    max_bytes: usize,
    max_ranges: u64,
}

impl SnapshotWriter {
    /// Starts a snapshot of `state` that may grow to `max_bytes` (whole payload) and hold
    /// `max_ranges` ranges.
    pub fn new(state: &PersistedState, max_bytes: usize, max_ranges: u64) -> Result<Self> {
        state.validate()?;
        let mut out = start_frame(EntryKind::Snapshot, state.encoded_len() + 4);
        state.encode_into(&mut out);
        let groups_at = out.len();
        out.extend_from_slice(&0u32.to_le_bytes());
        if out.len() + CRC_LEN > max_bytes {
            return Err(Error::EntryTooLarge {
                size: (out.len() + CRC_LEN) as u64,
                max: max_bytes as u64,
            });
        }
        Ok(Self {
            out,
            groups: 0,
            groups_at,
            group_count_at: 0,
            group_ranges: 0,
            last: None,
            ranges: 0,
            max_bytes,
            max_ranges,
        })
    }

    /// Adds the inclusive range `[first, last]` of data ledger `ledger`.
    ///
    /// Ranges must come ascending and maximal (never adjacent or overlapping), else
    /// [`Error::InvalidArgument`]. Returns `false`, adding nothing, when the range would break
    /// the byte or range limit; the snapshot is then full.
    pub fn push(&mut self, ledger: u64, first: u64, last: u64) -> Result<bool> {
        if first > last {
            return Err(Error::InvalidArgument {
                reason: format!("range {ledger}:{first}..={ledger}:{last} is empty"),
            });
        }
        let gap = match self.last {
            Some((l, prev)) if l == ledger => {
                let gap = first.checked_sub(prev).and_then(|d| d.checked_sub(2));
                Some(gap.ok_or_else(|| Error::InvalidArgument {
                    reason: format!(
                        "range starting at {ledger}:{first} is not after {ledger}:{prev} with a gap"
                    ),
                })?)
            }
            Some((l, _)) if l > ledger => {
                return Err(Error::InvalidArgument {
                    reason: format!("ranges of ledger {ledger} come after ledger {l}"),
                });
            }
            _ => None,
        };
        let span = last - first;
        let new_group = gap.is_none();
        let gap = gap.unwrap_or(first);
        let need =
            if new_group { SNAPSHOT_GROUP_LEN } else { 0 } + varint_len(gap) + varint_len(span);
        if self.ranges >= self.max_ranges || self.out.len() + need + CRC_LEN > self.max_bytes {
            return Ok(false);
        }
        if new_group {
            self.groups += 1;
            self.out.extend_from_slice(&ledger.to_le_bytes());
            self.group_count_at = self.out.len();
            self.out.extend_from_slice(&0u32.to_le_bytes());
            self.group_ranges = 0;
        }
        put_varint(&mut self.out, gap);
        put_varint(&mut self.out, span);
        self.group_ranges += 1;
        self.patch(self.group_count_at, self.group_ranges);
        self.patch(self.groups_at, self.groups);
        self.last = Some((ledger, last));
        self.ranges += 1;
        Ok(true)
    }

    fn patch(&mut self, at: usize, value: u32) {
        if let Some(slot) = self.out.get_mut(at..at + 4) {
            slot.copy_from_slice(&value.to_le_bytes());
        }
    }

    /// Ranges added so far.
    #[must_use]
    pub fn ranges(&self) -> u64 {
        self.ranges
    }

    /// Size the payload will have once finished.
    #[must_use]
    pub fn len(&self) -> usize {
        self.out.len() + CRC_LEN
    }

    /// Whether no range was added.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.ranges == 0
    }

    /// The finished payload.
    #[must_use]
    pub fn finish(self) -> Vec<u8> {
        end_frame(self.out)
    }

    /// The finished payload with `batch` (partitions ascending by `(ledger, chunk)`, each
    /// partial) in its batch section; the bytes of [`SnapshotWriter::finish`] when `batch` is
    /// empty. `None` when a partition does not encode (see [`encode_batch_entry`]).
    #[must_use]
    pub fn finish_with_batch(mut self, batch: &[BatchPartition]) -> Option<Vec<u8>> {
        if batch.is_empty() {
            return Some(self.finish());
        }
        let flags_at = MAGIC.len() + 2;
        self.out
            .get_mut(flags_at..flags_at + 2)?
            .copy_from_slice(&FLAG_BATCH.to_le_bytes());
        self.out
            .extend_from_slice(&u32::try_from(batch.len()).ok()?.to_le_bytes());
        for p in batch {
            let entry = encode_batch_entry(p)?;
            self.out
                .extend_from_slice(&u32::try_from(entry.len()).ok()?.to_le_bytes());
            self.out.extend_from_slice(&entry);
        }
        Some(end_frame(self.out))
    }
}

/// A decoded, verified snapshot; its ranges decode on the fly.
#[derive(Debug, Clone)]
pub struct Snapshot<'a> {
    /// Mark-delete, epoch and properties at the flush.
    pub state: PersistedState,
    /// Number of ranges.
    pub range_count: u64,
    /// Batch-index state: the partial entries, by partition (empty without [`FLAG_BATCH`]).
    pub batch: Vec<BatchPartition>,
    groups: &'a [u8],
    groups_offset: usize,
    group_count: u32,
}

impl Snapshot<'_> {
    /// The ranges as `(ledger, first, last)`, inclusive, ascending, maximal.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        let mut body = Reader::at(self.groups, self.groups_offset);
        // Verified by `decode_snapshot`, so a walk cannot fail; a failure ends the walk.
        let mut groups_left = self.group_count;
        let mut ledger = 0;
        let mut in_group = 0u32;
        let mut prev: Option<u64> = None;
        std::iter::from_fn(move || {
            while in_group == 0 {
                if groups_left == 0 {
                    return None;
                }
                groups_left -= 1;
                ledger = body.u64().ok()?;
                in_group = body.u32().ok()?;
                prev = None;
            }
            let (first, last) = next_range(&mut body, prev).ok()?;
            in_group -= 1;
            prev = Some(last);
            Some((ledger, first, last))
        })
    }
}

fn next_range(body: &mut Reader<'_>, prev: Option<u64>) -> Result<(u64, u64), Corruption> {
    let at = body.offset();
    let gap = body.varint()?;
    let span = body.varint()?;
    let first = match prev {
        None => Some(gap),
        Some(p) => p.checked_add(2).and_then(|s| s.checked_add(gap)),
    };
    let last = first.and_then(|f| f.checked_add(span).map(|l| (f, l)));
    last.ok_or(corrupt(at, CorruptionKind::InvalidField("range")))
}

/// Decodes and verifies a snapshot (CRC, then a full walk of its ranges without allocating).
pub fn decode_snapshot(payload: &[u8]) -> Result<Snapshot<'_>, Corruption> {
    decode_snapshot_bound(payload, &[])
}

/// [`decode_snapshot`] of a snapshot whose CRC covers `binding` before its bytes (see
/// [`super::bind_entry`]; a journal's snapshot record binds its cursor): a snapshot bound to
/// anything else fails its CRC.
pub fn decode_snapshot_bound<'a>(
    payload: &'a [u8],
    binding: &[u8],
) -> Result<Snapshot<'a>, Corruption> {
    let (mut body, flags) = open_frame_bound(payload, EntryKind::Snapshot, FLAG_BATCH, binding)?;
    let state = PersistedState::decode_from(&mut body)?;
    let group_count = body.u32()?;
    let groups_offset = body.offset();
    let groups = body.rest();
    let mut range_count = 0u64;
    let mut prev_ledger: Option<u64> = None;
    for _ in 0..group_count {
        let at = body.offset();
        let ledger = body.u64()?;
        let ranges = body.u32()?;
        if ranges == 0 || prev_ledger.is_some_and(|p| p >= ledger) {
            return Err(corrupt(at, CorruptionKind::InvalidField("ledger group")));
        }
        let mut prev = None;
        for _ in 0..ranges {
            let (_, last) = next_range(&mut body, prev)?;
            prev = Some(last);
        }
        prev_ledger = Some(ledger);
        range_count += u64::from(ranges);
    }
    let batch = if flags & FLAG_BATCH == 0 {
        Vec::new()
    } else {
        decode_batch_section(&mut body)?
    };
    body.finish()?;
    Ok(Snapshot {
        state,
        range_count,
        batch,
        groups,
        groups_offset,
        group_count,
    })
}

/// Decodes a snapshot's batch section (see [`SnapshotWriter`]), verifying every entry.
fn decode_batch_section(body: &mut Reader<'_>) -> Result<Vec<BatchPartition>, Corruption> {
    let at = body.offset();
    // Each partition takes at least its length and a framed entry.
    let count = body.count_u32(4 + super::HEADER_LEN + CRC_LEN)?;
    if count == 0 {
        return Err(corrupt(at, CorruptionKind::InvalidField("batch section")));
    }
    let mut out: Vec<BatchPartition> = Vec::with_capacity(count);
    for _ in 0..count {
        let entry_at = body.offset();
        let len = body.len_u32()?;
        let entry = decode_batch_entry(body.take(len)?).map_err(|e| Corruption {
            kind: e.kind,
            offset: (entry_at + 4) as u64 + e.offset,
        })?;
        if out
            .last()
            .is_some_and(|p| (p.ledger_id, p.chunk) >= (entry.ledger_id, entry.chunk))
        {
            return Err(corrupt(
                entry_at,
                CorruptionKind::InvalidField("batch order"),
            ));
        }
        out.push(entry);
    }
    Ok(out)
}

/// Encodes a decoded snapshot again (for round-trip checks).
pub fn reencode_snapshot(snapshot: &Snapshot<'_>) -> Result<Vec<u8>> {
    let mut writer = SnapshotWriter::new(&snapshot.state, usize::MAX, u64::MAX)?;
    for (ledger, first, last) in snapshot.ranges() {
        writer.push(ledger, first, last)?;
    }
    writer
        .finish_with_batch(&snapshot.batch)
        .ok_or_else(|| Error::InvalidArgument {
            reason: "a snapshot's batch-index state does not encode".to_string(),
        })
}

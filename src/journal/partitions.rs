//! A cursor's partitions and batch records in the journal: evictions append them unsynced,
//! loads read the newest copy and verify it ([`JournalPartitions`], a cursor's partition
//! store); and the reading back of a cursor's snapshot record.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use roaring::RoaringBitmap;

use super::index::{CursorId, Index, PartLoc, SnapshotLoc};
use super::marker::{cursor_record, partition_record};
use super::segment::SegmentFile;
use super::{Journal, corrupt, lock};
use crate::ackset::{PartitionKey, PartitionStore};
use crate::error::{CorruptionKind, Error, Result};
use crate::format::cursor::{Snapshot, decode_snapshot_bound, payload_crc, peek_batch_entry};
use crate::format::journal::{
    JournalLoc, PartitionPayload, RecordKind, SEGMENT_VERSION, batch_row_crc,
    decode_partition_payload, decode_record, encode_partition_payload, encode_record,
    record_binding, record_len, split_name_tag,
};

impl Journal {
    /// The newest copy of `key` of `cursor`, read and verified (frame CRC, the CRC, key and
    /// cardinality the index holds, then the partition decoder's checks); `None` when the
    /// journal holds none.
    pub fn load(&self, cursor: CursorId, key: PartitionKey) -> Result<Option<RoaringBitmap>> {
        let Some((part, payload)) = self.read_newest(cursor, |index| index.lookup(cursor, key))?
        else {
            return Ok(None);
        };
        let bitmap = verified_partition(&payload, key, &part)?;
        self.counters.loads.fetch_add(1, Ordering::Relaxed);
        Ok(Some(bitmap))
    }

    /// The lowest and highest acked offsets of the newest copy of `key` of `cursor`, read
    /// without decoding its set ([`PartitionPayload::bounds`]) after the frame CRC and the
    /// CRC, key and cardinality the index holds verify; `None` when the journal holds no copy,
    /// or its encoding does not start with its bounds (then only a load tells them).
    ///
    /// `seen` holds the bounds an earlier call read and the copy it read them from: when that
    /// copy is still the newest (same location and CRC: a record is never rewritten in place,
    /// a newer copy is written elsewhere), they are returned without a read; a call that reads
    /// bounds records them there.
    pub fn stored_bounds(
        &self,
        cursor: CursorId,
        key: PartitionKey,
        seen: &mut Option<SeenBounds>,
    ) -> Result<Option<(u32, u32)>> {
        let Some(part) = self.index.of(cursor).lookup(cursor, key) else {
            return Ok(None);
        };
        if let Some(bounds) = seen.and_then(|s| s.of(&part)) {
            return Ok(Some(bounds));
        }
        let Some((part, payload)) =
            self.read_newest_from(cursor, part, |index| index.lookup(cursor, key))?
        else {
            return Ok(None);
        };
        let bounds = verified_entry(&payload, key, &part)?
            .bounds()
            .map_err(|c| Error::corrupted_at(key.place(), c.kind))?;
        if let Some(bounds) = bounds {
            *seen = Some(SeenBounds {
                loc: part.loc,
                crc: part.crc,
                bounds,
            });
        }
        Ok(bounds)
    }

    /// The bounds `seen` holds, when the copy they were read from is still the newest copy of
    /// `key` of `cursor` (see [`Journal::stored_bounds`]); nothing is read.
    #[must_use]
    pub fn seen_bounds(
        &self,
        cursor: CursorId,
        key: PartitionKey,
        seen: Option<SeenBounds>,
    ) -> Option<(u32, u32)> {
        let seen = seen?;
        let part = self.index.of(cursor).lookup(cursor, key)?;
        seen.of(&part)
    }

    /// The newest batch record of `key` of `cursor` (pending or committed), read and its frame
    /// and the CRC, key and partial-entry count the index holds verified; `None` when the
    /// journal holds none. Returns the record's payload (a batch-index entry, which the caller
    /// decodes) and where it is.
    pub fn load_batch(
        &self,
        cursor: CursorId,
        key: PartitionKey,
    ) -> Result<Option<(PartLoc, Vec<u8>)>> {
        let Some((part, payload)) =
            self.read_newest(cursor, |index| index.lookup_batch(cursor, key))?
        else {
            return Ok(None);
        };
        let bad = |kind| Error::corrupted_at(key.place(), kind);
        if batch_row_crc(&payload) != part.crc {
            return Err(bad(CorruptionKind::ChecksumMismatch));
        }
        let (ledger_id, chunk, entries) = peek_batch_entry(&payload).map_err(|c| bad(c.kind))?;
        if (PartitionKey { ledger_id, chunk }) != key || u64::from(entries) != part.cardinality {
            return Err(bad(CorruptionKind::InvalidField("batch record key")));
        }
        self.counters.loads.fetch_add(1, Ordering::Relaxed);
        Ok(Some((part, payload)))
    }

    /// The newest batch record of `key` of `cursor` in the journal (pending or committed).
    #[must_use]
    pub fn stored_batch(&self, cursor: CursorId, key: PartitionKey) -> Option<PartLoc> {
        self.index.of(cursor).lookup_batch(cursor, key)
    }

    /// Appends the batch record `payload` (a batch-index entry of `entries` partial entries of
    /// partition `key`) of `cursor` without a sync (an eviction): it counts once a committed
    /// marker references it, and loads see it at once. Returns where it is.
    pub fn store_batch(
        &self,
        cursor: CursorId,
        key: PartitionKey,
        (payload, entries): (&[u8], u32),
    ) -> Result<PartLoc> {
        let mut buf = Vec::with_capacity(record_len(payload.len()));
        encode_record(&mut buf, &cursor_record(RecordKind::Batch, cursor, payload))?;
        let stored = {
            let mut w = lock(&self.writer);
            self.append(&mut w, &buf, false).map(|at| {
                let part = PartLoc {
                    seq: self.counters.seq.fetch_add(1, Ordering::Relaxed) + 1,
                    loc: at,
                    frame_len: buf.len() as u64,
                    crc: batch_row_crc(payload),
                    cardinality: u64::from(entries),
                    version: SEGMENT_VERSION,
                };
                self.index.of(cursor).stage_batch(cursor, key, part);
                part
            })
        };
        stored.map_err(|e| self.failure(e))
    }

    /// The cursor no longer uses its pending batch record of `key`.
    pub fn forget_batch(&self, cursor: CursorId, key: PartitionKey) {
        self.index.of(cursor).forget_batch(cursor, key);
    }

    /// The cardinality of the newest copy of `key` of `cursor` in the journal (pending or
    /// committed), `None` when it holds none: a flush references that copy instead of writing
    /// the partition again when the cursor's ack set says it is current.
    #[must_use]
    pub fn stored_cardinality(&self, cursor: CursorId, key: PartitionKey) -> Option<u64> {
        self.index
            .of(cursor)
            .lookup(cursor, key)
            .map(|p| p.cardinality)
    }

    /// The copy `find` looks up in `cursor`'s shard of the index and its payload, read after
    /// its frame verifies; `None` when the index holds none.
    fn read_newest(
        &self,
        cursor: CursorId,
        find: impl Fn(&Index) -> Option<PartLoc>,
    ) -> Result<Option<(PartLoc, Vec<u8>)>> {
        let Some(part) = find(&self.index.of(cursor)) else {
            return Ok(None);
        };
        self.read_newest_from(cursor, part, find)
    }

    /// [`Self::read_newest`] of `part`, which `find` found. A rollover copies a segment's
    /// live records forward and points the index at the copies before it deletes the
    /// segment, without the lock of a load that looked a copy up in it just before: a read
    /// that fails while the index now names another copy reads that one instead.
    fn read_newest_from(
        &self,
        cursor: CursorId,
        mut part: PartLoc,
        find: impl Fn(&Index) -> Option<PartLoc>,
    ) -> Result<Option<(PartLoc, Vec<u8>)>> {
        loop {
            match self.read_payload(part.loc, part.frame_len) {
                Ok(payload) => return Ok(Some((part, payload))),
                Err(e) => match find(&self.index.of(cursor)) {
                    Some(moved) if moved.loc != part.loc => part = moved,
                    _ => return Err(e),
                },
            }
        }
    }

    /// The payload of the record at `loc`, after its frame verifies.
    pub(super) fn read_payload(&self, loc: JournalLoc, frame_len: u64) -> Result<Vec<u8>> {
        let file = self
            .files
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&loc.segment)
            .cloned()
            .ok_or_else(|| corrupt(loc.segment, loc.offset, CorruptionKind::Missing))?;
        read_payload_at(file.as_ref(), loc, frame_len)
    }

    /// Appends one partition of `cursor` without a sync (an eviction): it counts once a
    /// committed marker references it, and loads see it at once.
    pub fn store_partition(
        &self,
        cursor: CursorId,
        key: PartitionKey,
        bitmap: &RoaringBitmap,
    ) -> Result<()> {
        self.store_partition_unexplained(cursor, key, bitmap)
            .map_err(|e| self.failure(e))
    }

    fn store_partition_unexplained(
        &self,
        cursor: CursorId,
        key: PartitionKey,
        bitmap: &RoaringBitmap,
    ) -> Result<()> {
        let payload = encode_partition_payload(key, bitmap);
        let mut buf = Vec::with_capacity(record_len(payload.len()));
        encode_record(&mut buf, &partition_record(cursor, &payload))?;
        let mut w = lock(&self.writer);
        let base = self.append(&mut w, &buf, false)?;
        self.index.of(cursor).stage(
            cursor,
            key,
            PartLoc {
                seq: self.counters.seq.fetch_add(1, Ordering::Relaxed) + 1,
                loc: base,
                frame_len: buf.len() as u64,
                crc: payload_crc(&payload),
                cardinality: bitmap.len(),
                version: SEGMENT_VERSION,
            },
        );
        Ok(())
    }

    /// The cursor no longer holds `key`.
    pub fn forget_partition(&self, cursor: CursorId, key: PartitionKey) {
        self.index.of(cursor).forget_partition(cursor, key);
    }

    /// Forgets every copy of `cursor` that no committed marker references (what evictions
    /// wrote since its last commit), for a cursor recovered from its committed state: a copy
    /// its former handle wrote after that commit (a flush failed on a full disk, then the
    /// topic closed the cursor) is not that state, and a load, a bound or a flush that
    /// references a current copy must never take it for one.
    pub fn drop_pending(&self, cursor: CursorId) {
        self.index.of(cursor).drop_pending(cursor);
    }
}

/// The payload of the record whose frame of `frame_len` bytes starts at `loc` in `file` (its
/// segment), after the frame verifies.
pub(super) fn read_payload_at(
    file: &SegmentFile,
    loc: JournalLoc,
    frame_len: u64,
) -> Result<Vec<u8>> {
    let mut frame = vec![0u8; usize::try_from(frame_len).unwrap_or(usize::MAX)];
    file.read_exact_at(&mut frame, loc.offset)?;
    match decode_record(&frame) {
        Ok(Some((rec, len))) if len == frame.len() => {
            let start = frame.len() - rec.payload.len();
            frame.drain(..start);
            Ok(frame)
        }
        Ok(_) => Err(corrupt(loc.segment, loc.offset, CorruptionKind::BadLength)),
        Err(c) => Err(corrupt(loc.segment, loc.offset + c.offset, c.kind)),
    }
}

/// Runs `read` over `cursor`'s snapshot record `s` in `file` (its segment), after the frame,
/// the payload CRC `s` holds, and the snapshot (its CRC bound to the cursor and the name tag
/// its payload starts with, and its own checks) verify.
pub(super) fn read_snapshot_at<T>(
    file: &SegmentFile,
    cursor: CursorId,
    s: &SnapshotLoc,
    read: impl FnOnce(&Snapshot<'_>) -> Result<T>,
) -> Result<T> {
    let payload = read_payload_at(file, s.loc, s.frame_len)?;
    let bad = |kind| corrupt(s.loc.segment, s.loc.offset, kind);
    if payload_crc(&payload) != s.crc {
        return Err(bad(CorruptionKind::ChecksumMismatch));
    }
    let (name, entry) = split_name_tag(SEGMENT_VERSION, &payload).map_err(|c| bad(c.kind))?;
    let binding = record_binding(SEGMENT_VERSION, cursor.topic, cursor.cursor, name);
    let snapshot = decode_snapshot_bound(entry, binding.as_slice()).map_err(|c| bad(c.kind))?;
    read(&snapshot)
}

/// The bitmap of partition `key` in `payload` (a partition record's), after the CRC, key and
/// cardinality `part` holds and the partition decoder's checks verify it.
pub(super) fn verified_partition(
    payload: &[u8],
    key: PartitionKey,
    part: &PartLoc,
) -> Result<RoaringBitmap> {
    verified_entry(payload, key, part)?
        .bitmap()
        .map_err(|c| Error::corrupted_at(key.place(), c.kind))
}

/// The partition in `payload` (a partition record's, read as the version `part` holds says),
/// after the CRC, key and cardinality `part` holds verify; its set is not decoded.
fn verified_entry<'a>(
    payload: &'a [u8],
    key: PartitionKey,
    part: &PartLoc,
) -> Result<PartitionPayload<'a>> {
    let bad = |kind| Error::corrupted_at(key.place(), kind);
    if payload_crc(payload) != part.crc {
        return Err(bad(CorruptionKind::ChecksumMismatch));
    }
    let entry = decode_partition_payload(payload, part.version).map_err(|c| bad(c.kind))?;
    if entry.key != key || entry.cardinality != part.cardinality {
        return Err(bad(CorruptionKind::InvalidField("partition key")));
    }
    Ok(entry)
}

/// Bounds of a partition read from one copy of it ([`Journal::stored_bounds`]), with where that
/// copy is and its payload's CRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeenBounds {
    loc: JournalLoc,
    crc: u32,
    bounds: (u32, u32),
}

impl SeenBounds {
    /// The bounds, if `part` is the copy they were read from.
    fn of(self, part: &PartLoc) -> Option<(u32, u32)> {
        (part.loc == self.loc && part.crc == self.crc).then_some(self.bounds)
    }
}

/// The journal as a cursor's partition store: evictions append (unsynced), loads read the
/// newest copy.
#[derive(Debug)]
pub struct JournalPartitions {
    journal: Arc<Journal>,
    cursor: CursorId,
    /// The bounds last read (a recovery asks for the highest and then the lowest ack, and a
    /// cursor's first read whether an entry lies outside them, of one partition).
    seen: Option<SeenBounds>,
}

impl JournalPartitions {
    /// The partitions of `cursor` in `journal`.
    #[must_use]
    pub fn new(journal: Arc<Journal>, cursor: CursorId) -> Self {
        Self {
            journal,
            cursor,
            seen: None,
        }
    }
}

impl PartitionStore for JournalPartitions {
    fn load(&mut self, key: PartitionKey) -> Result<Option<RoaringBitmap>> {
        self.journal.load(self.cursor, key)
    }

    fn store(&mut self, key: PartitionKey, bitmap: &RoaringBitmap) -> Result<()> {
        self.journal.store_partition(self.cursor, key, bitmap)
    }

    fn bounds(&mut self, key: PartitionKey) -> Result<Option<(u32, u32)>> {
        self.journal.stored_bounds(self.cursor, key, &mut self.seen)
    }

    fn known_bounds(&mut self, key: PartitionKey) -> Option<(u32, u32)> {
        self.journal.seen_bounds(self.cursor, key, self.seen)
    }

    fn forget(&mut self, key: PartitionKey) {
        self.journal.forget_partition(self.cursor, key);
    }
}

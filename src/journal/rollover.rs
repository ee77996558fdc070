//! Rollover by rewrite: the oldest segment's live records are copied forward, then it goes.
//!
//! **Rollover.** When the segments hold more than twice the live bytes plus one segment, or
//! are more in number than [`segment_bound`] (twice the segments the live bytes fill, plus
//! [`SEGMENT_SLACK`]), the oldest segment's live records (committed partitions, pending partitions) are copied to the
//! newest segment, every cursor whose chain (full marker, deltas, the partitions they
//! reference) reaches into the oldest segment is re-based with a full marker there, all is
//! synced, and only then is the oldest segment deleted. The live bytes count a full marker per
//! cursor, not its deltas: deltas are garbage a re-base reclaims. The index is not locked while
//! the copies are written and synced: a pending copy takes its copy's place only if it is still
//! pending where it was read ([`Index::move_pending`]), so one that a cursor forgot or a
//! recovery dropped meanwhile is not brought back.
//!
//! **The count trigger.** Bytes alone do not bound the number of segments: a new owner never
//! appends to a segment it did not create, so every restart whose owner flushes leaves its
//! predecessor's short newest segment behind, and an open scans every segment. Every segment
//! below the newest that this owner filled holds at least `segment_bytes` (one stops taking
//! appends only there), so while the bytes are within their bound such segments number at most
//! `2 * live / segment_bytes + 2`, within [`segment_bound`]: the count trigger fires only when
//! short segments (a former owner's or an earlier version's newest) are there, and rolls the
//! oldest segments until the count is back within the bound. Copying the oldest segment's live
//! records may start a new segment when the newest is full, so a roll may not lower the count;
//! a call makes at most as many count-triggered rolls as there were segments when it began,
//! and the next tick goes on from there.

use std::sync::atomic::Ordering;

use super::index::{Committed, CursorId, Index, PartLoc, Rows, SnapshotLoc};
use super::marker::{append_marker, cursor_record};
use super::segment::segment_name;
use super::{Journal, TickStats, corrupt, lock};
use crate::error::{CorruptionKind, Result};
use crate::format::journal::{
    JournalLoc, RecordKind, SEGMENT_VERSION, SEGMENT_VERSION_V7, decode_partition_payload,
    encode_partition_payload, encode_record, record_crc,
};

/// Segments above twice the number the live bytes fill, past which a rollover runs whatever
/// the bytes: one for the newest segment, which takes appends until full, and one for the
/// rounding down of the byte bound's `2 * live / segment_bytes + 2` full segments (see the
/// module docs), so a journal of full segments within the byte bound never triggers it.
pub const SEGMENT_SLACK: u64 = 2;

/// The most segments a journal keeps (after a tick's rollover) while `live` bytes are live in
/// segments of `segment_bytes`: twice the segments the live bytes fill, plus [`SEGMENT_SLACK`].
#[must_use]
pub fn segment_bound(live: u64, segment_bytes: u64) -> u64 {
    2 * live.div_ceil(segment_bytes.max(1)) + SEGMENT_SLACK
}

impl Journal {
    /// Rolls over while the segments hold more than twice the live bytes plus one segment, or
    /// are more than [`segment_bound`] of them: copies the oldest segment's live records to
    /// the newest, syncs, deletes the oldest. Returns the segments deleted.
    pub(super) fn roll_over_locked(&self) -> Result<u64> {
        let mut deleted = 0;
        // The count trigger's guard: a roll may start a segment as it deletes one (see the
        // module docs), so the count trigger rolls at most the segments there were at first.
        let mut count_rolls = None;
        loop {
            let (count, total, oldest) = {
                let w = lock(&self.writer);
                (
                    w.segments.len() as u64,
                    w.segments.values().map(|s| s.len).sum::<u64>(),
                    w.segments.keys().next().copied(),
                )
            };
            let live = self.index.live_bytes();
            let Some(oldest) = oldest else { break };
            let count_rolls = count_rolls.get_or_insert(count);
            let over_bytes = total > 2 * live + self.config.segment_bytes;
            let over_count =
                *count_rolls > 0 && count > segment_bound(live, self.config.segment_bytes);
            if count < 2 || !over_bytes && !over_count {
                break;
            }
            if !over_bytes {
                *count_rolls -= 1;
            }
            self.roll_over_segment(oldest)?;
            deleted += 1;
        }
        Ok(deleted)
    }

    /// Copies what is live in segment `oldest` to the newest segment, syncs, then deletes it.
    pub(crate) fn roll_over_segment(&self, oldest: u64) -> Result<()> {
        let mut stats = TickStats::default();
        let mut w = lock(&self.writer);
        if w.segments.keys().next_back() == Some(&oldest)
            || w.sealed == Some(oldest) && w.segments.len() < 2
        {
            return Ok(());
        }
        let new_segment = self.segment_for_tick(&mut w, &mut stats)?;
        let (seq, base) = Self::newest(&w)?;
        let mut buf = Vec::new();
        let mut commits = Vec::new();
        let mut staged = Vec::new();
        // Shard by shard: a cursor's records are all in its own shard, and no eviction stages
        // a copy meanwhile (each appends under the writer's lock, held here).
        for index in self.index.each() {
            for cursor in index.cursors_in(oldest) {
                self.rewrite_state(&index, &mut buf, (seq, base), cursor, &mut commits)?;
                for (kind, pending) in [
                    (RecordKind::Partition, index.pending(cursor)),
                    (RecordKind::Batch, index.pending_batch(cursor)),
                ] {
                    for (key, part) in pending.into_iter().flat_map(Rows::iter) {
                        if part.loc.segment == oldest {
                            let copy =
                                self.copy_record(&mut buf, (seq, base), (kind, cursor), *part)?;
                            staged.push((kind == RecordKind::Batch, cursor, *key, part.loc, copy));
                        }
                    }
                }
            }
        }
        self.append(&mut w, &buf, true)?;
        drop(w);
        self.sync_newest(seq, &mut stats)?;
        if new_segment {
            self.sync_dir(&mut stats)?;
        }
        {
            // Seen whole: a cursor with both forms has both rewritten, and the one committed
            // later is its state again only once both are in.
            let mut index = self.index.all();
            for (cursor, rewritten) in commits {
                match rewritten {
                    Rewritten::Chain(c) => {
                        self.counters.rebases.fetch_add(1, Ordering::Relaxed);
                        index.of(cursor).commit(cursor, c);
                    }
                    Rewritten::Snapshot(s) => index.of(cursor).commit_snapshot(cursor, s),
                }
            }
            for (batch, cursor, key, from, copy) in staged {
                index
                    .of(cursor)
                    .move_pending((batch, cursor, key), from, copy);
            }
        }
        // A former owner must not delete what the new owner reads.
        self.check_owner()?;
        if let Some(hooks) = self.hooks() {
            // Out of the list before its file goes: a crash in between leaves a file no list
            // names, which the next claim removes. A catalog write known not to have taken
            // leaves the segment listed, its file and its copies in place: the next tick's
            // rollover drops it again.
            let listed = (hooks.deleted)(oldest);
            if let Err(e) = &listed
                && !Self::catalog_unchanged(&hooks, oldest, e, true)
            {
                lock(&self.writer).latch(e);
            }
            listed?;
        }
        let mut w = lock(&self.writer);
        w.segments.remove(&oldest);
        if w.sealed == Some(oldest) {
            w.sealed = None;
        }
        drop(w);
        let removed = self.storage.remove(&segment_name(oldest));
        let removed = removed.and_then(|()| self.storage.sync_dir());
        if let Err(e) = &removed {
            lock(&self.writer).latch(e);
        }
        removed?;
        self.files
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&oldest);
        self.counters.rollovers.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Re-bases `cursor`'s committed chain `c` into `buf`, which is appended at `base` of
    /// segment `seq`: copies of its records below that segment, then a full marker. Every live
    /// partition and batch record below the newest segment is copied, not only those in the
    /// oldest: the re-based chain then lies in the newest segment alone, so a cursor is
    /// re-based once per pass over the segments, and a pass writes at most the live bytes.
    fn rebase(
        &self,
        buf: &mut Vec<u8>,
        (seq, base): (u64, u64),
        cursor: CursorId,
        c: &Committed,
    ) -> Result<Committed> {
        let mut copied = [
            (RecordKind::Partition, c.rows.clone()),
            (RecordKind::Batch, c.batch.clone()),
        ];
        for (kind, records) in &mut copied {
            for part in records.values_mut() {
                if part.loc.segment < seq {
                    *part = self.copy_record(buf, (seq, base), (*kind, cursor), *part)?;
                }
            }
        }
        let [(_, rows), (_, batch)] = copied;
        // A full marker: the re-based chain needs nothing of the oldest segment.
        let at = (seq, base + buf.len() as u64);
        let (rebased, _) = append_marker(buf, (cursor, c.name), at, None, &c.state, (rows, batch))?;
        Ok(rebased)
    }

    /// Rewrites `cursor`'s committed state into `buf`, which is appended at `base` of segment
    /// `seq`, pushing each rewritten form to `commits`: its chain re-based and its snapshot
    /// copied, the form committed earlier first (see the module docs).
    fn rewrite_state(
        &self,
        index: &Index,
        buf: &mut Vec<u8>,
        (seq, base): (u64, u64),
        cursor: CursorId,
        commits: &mut Vec<(CursorId, Rewritten)>,
    ) -> Result<()> {
        let snapshot = index.snapshot(cursor);
        let snapshot_first = snapshot.is_some_and(|s| !s.current);
        if let Some(s) = snapshot.filter(|_| snapshot_first) {
            let copy = self.copy_snapshot(buf, (seq, base), cursor, s)?;
            commits.push((cursor, Rewritten::Snapshot(copy)));
        }
        if let Some(c) = index.committed(cursor) {
            let rebased = self.rebase(buf, (seq, base), cursor, c)?;
            commits.push((cursor, Rewritten::Chain(rebased)));
        }
        if let Some(s) = snapshot.filter(|_| !snapshot_first) {
            let copy = self.copy_snapshot(buf, (seq, base), cursor, s)?;
            commits.push((cursor, Rewritten::Snapshot(copy)));
        }
        Ok(())
    }

    /// Copies `cursor`'s snapshot record `s` (verified against its payload CRC) into `buf`,
    /// which is appended at `base` of segment `seq`; returns the copy, committed once synced
    /// with the form it was (state or fallback).
    fn copy_snapshot(
        &self,
        buf: &mut Vec<u8>,
        (seq, base): (u64, u64),
        cursor: CursorId,
        s: &SnapshotLoc,
    ) -> Result<SnapshotLoc> {
        let part = PartLoc {
            seq: 0,
            loc: s.loc,
            frame_len: s.frame_len,
            crc: s.crc,
            cardinality: 0,
            version: SEGMENT_VERSION,
        };
        let copy = self.copy_record(buf, (seq, base), (RecordKind::Snapshot, cursor), part)?;
        Ok(SnapshotLoc {
            loc: copy.loc,
            ..s.clone()
        })
    }

    /// Copies `cursor`'s partition, batch or snapshot record (`kind`) at `part` (verified)
    /// into `buf`, which is appended at `base` of segment `seq` (of this build's version);
    /// returns the copy's location. A partition record of a segment before version 7 is
    /// rewritten in this version's form (decoded with every check a load makes): the copy
    /// then has another payload, CRC and length, which the re-based marker names. A batch
    /// record of any version is copied byte for byte: its payload is the same in every
    /// version, and so is the CRC a row names it by ([`record_crc`]).
    fn copy_record(
        &self,
        buf: &mut Vec<u8>,
        (seq, base): (u64, u64),
        (kind, cursor): (RecordKind, CursorId),
        part: PartLoc,
    ) -> Result<PartLoc> {
        let mut payload = self.read_payload(part.loc, part.frame_len)?;
        let bad = |kind| corrupt(part.loc.segment, part.loc.offset, kind);
        if record_crc(kind, &payload) != part.crc {
            return Err(bad(CorruptionKind::ChecksumMismatch));
        }
        if kind == RecordKind::Partition && part.version < SEGMENT_VERSION_V7 {
            let entry =
                decode_partition_payload(&payload, part.version).map_err(|c| bad(c.kind))?;
            let bitmap = super::partitions::verified_partition(&payload, entry.key, &part)?;
            payload = encode_partition_payload(entry.key, &bitmap);
        }
        let loc = JournalLoc {
            segment: seq,
            offset: base + buf.len() as u64,
        };
        let before = buf.len();
        encode_record(buf, &cursor_record(kind, cursor, &payload))?;
        Ok(PartLoc {
            loc,
            frame_len: (buf.len() - before) as u64,
            crc: record_crc(kind, &payload),
            version: SEGMENT_VERSION,
            ..part
        })
    }
}

/// A cursor's state a rollover rewrote: its chain re-based, or its snapshot copied.
enum Rewritten {
    Chain(Committed),
    Snapshot(SnapshotLoc),
}

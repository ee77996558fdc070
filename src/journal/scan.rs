//! What each record a recovery scan reads does to the index it builds ([`Scan`]): which markers
//! and deltas commit, which were superseded by a rollover, and what is damage (see
//! `recover.rs`, "Recovery").

use super::corrupt;
use super::index::{AppliedDelta, Committed, CursorId, Index, PartLoc, Rows, SnapshotLoc};
use super::marker::{full_marker_frame_len, named_payload};
use crate::ackset::PartitionKey;
use crate::error::{CorruptionKind, Result};
use crate::format::cursor::{
    BatchRow, Marker, PartitionRow, Table, decode_marker_bound, decode_snapshot_bound, payload_crc,
    peek_batch_entry,
};
use crate::format::journal::{
    JournalLoc, Record, RecordKind, SEGMENT_VERSION_V2, SEGMENT_VERSION_V3, SEGMENT_VERSION_V5,
    SEGMENT_VERSION_V6, SEGMENT_VERSION_V8, cursor_binding, decode_delta, decode_partition_payload,
    record_binding, record_crc,
};
use crate::hashing::{IdMap, IdSet};

/// What a scan of the segments found, before it becomes the index.
#[derive(Default)]
pub(super) struct Scan {
    pub(super) index: Index,
    /// Every partition record seen.
    partitions: Seen<()>,
    /// Every batch record seen (version 5), with the CRC32 of its whole payload (what a batch
    /// row of a marker before version 8 holds; its `PartLoc` holds what a version 8 row holds,
    /// [`crate::format::journal::batch_row_crc`]).
    batches: Seen<u32>,
    forgotten: IdSet<CursorId>,
    /// The oldest segment scanned: a record that references an older one was superseded
    /// before a rollover removed what it references.
    first: u64,
    /// Markers and deltas superseded that way, and deltas built on them.
    stale: IdSet<JournalLoc>,
    /// Cursors whose newest marker or delta so far was superseded that way, with its location:
    /// a rollover re-bases a cursor with a full marker before it removes the segment its chain
    /// reaches into, so such a record must be followed by one that commits.
    unrebased: IdMap<CursorId, JournalLoc>,
    /// Cursors whose chain's newest marker or delta did not verify below the synced length
    /// and which fell back to their snapshot, with where that record starts.
    pub(super) fallbacks: Vec<(CursorId, JournalLoc)>,
    /// Frames below what is known to be written whose CRC failed and that were passed over
    /// (their length read as written and the next frame verifying), in scan order: where each
    /// starts and where its damage was found.
    damaged: Vec<(JournalLoc, u64)>,
    /// Those of them a marker or delta that fell back to its cursor's snapshot references:
    /// accounted for. Any other is damage that refuses the scan.
    explained: IdSet<JournalLoc>,
}

/// Partition or batch records a scan saw, each with its cursor, its key, where it is and `X`,
/// in the order of their locations, which is the order a scan reads them (segments in order,
/// each from its start): a record is appended, and found by a binary search on its location.
///
/// A vector, not a hash table: a restart of 100,000 cursors sees about 270,000 partition
/// records, and a table of them was rebuilt at every doubling, each time in memory the
/// allocator takes fresh from the system (a table that size is mapped and unmapped whole):
/// a quarter of the restart's page faults. A vector grows in place (a large one is remapped,
/// not copied) and its entries are 80 bytes, not a table's 112.
#[derive(Default)]
struct Seen<X> {
    records: Vec<(CursorId, PartitionKey, PartLoc, X)>,
}

impl<X> Seen<X> {
    /// Notes a record; one at a location already noted replaces it. Appends when `part` is
    /// past every record noted (always, in a scan); otherwise inserts it in order, so lookups
    /// stay right whatever the order of the calls.
    fn insert(&mut self, cursor: CursorId, key: PartitionKey, part: PartLoc, extra: X) {
        let record = (cursor, key, part, extra);
        match self.records.last() {
            Some(last) if last.2.loc >= part.loc => match self.position(part.loc) {
                Ok(i) => self.records[i] = record,
                Err(i) => self.records.insert(i, record),
            },
            _ => self.records.push(record),
        }
    }

    /// The record noted at `loc`.
    fn get(&self, loc: JournalLoc) -> Option<&(CursorId, PartitionKey, PartLoc, X)> {
        self.position(loc).ok().map(|i| &self.records[i])
    }

    fn position(&self, loc: JournalLoc) -> std::result::Result<usize, usize> {
        self.records.binary_search_by(|r| r.2.loc.cmp(&loc))
    }
}

impl Scan {
    /// An empty scan whose oldest segment is `first`.
    pub(super) fn new(first: u64) -> Self {
        Self {
            first,
            ..Self::default()
        }
    }

    /// Applies one verified record. Returns whether a marker or delta did not commit (the
    /// cursor keeps its previous state: the walk back). With `promised` (the record lies below
    /// a synced length), a marker or delta that does not commit is corruption, unless it
    /// references a segment a rollover removed (it was superseded before that).
    pub(super) fn record(
        &mut self,
        loc: JournalLoc,
        frame_len: u64,
        rec: &Record<'_>,
        version: u16,
        promised: bool,
    ) -> Result<bool> {
        let cursor = CursorId {
            topic: rec.topic,
            cursor: rec.cursor,
        };
        // From version 3 a forget names its cursor and a marker's own CRC covers the cursor it
        // belongs to; from version 4 also the name tag the marker or delta starts with.
        let ids = cursor_binding(cursor.topic, cursor.cursor);
        let forget_binding: &[u8] = if version >= SEGMENT_VERSION_V3 {
            &ids
        } else {
            &[]
        };
        let (name, payload) = named_payload(rec, version);
        let bound = record_binding(version, cursor.topic, cursor.cursor, name);
        let binding = bound.as_slice();
        let refused = |what: &'static str| {
            Err(corrupt(
                loc.segment,
                loc.offset,
                CorruptionKind::InvalidField(what),
            ))
        };
        if self.forgotten.contains(&cursor) {
            // Nothing of a deleted cursor counts; but a marker, delta or forget that is not
            // its cursor's own (moved from another cursor, whose state it then lacks) is
            // damage as anywhere else.
            let own = match rec.kind {
                RecordKind::Partition | RecordKind::Batch => true,
                RecordKind::Marker => decode_marker_bound(payload, binding).is_ok(),
                RecordKind::Delta => decode_delta(payload, binding, version).is_ok(),
                RecordKind::Snapshot => decode_snapshot_bound(payload, binding).is_ok(),
                RecordKind::Forget => rec.payload == forget_binding,
            };
            return if own || !promised {
                Ok(false)
            } else {
                refused("record of another cursor")
            };
        }
        match rec.kind {
            RecordKind::Partition | RecordKind::Batch => {
                self.partition_record(cursor, (loc, frame_len, version), rec);
            }
            RecordKind::Marker => {
                if let Some(c) = self.verified_marker(
                    cursor,
                    (loc, frame_len, version),
                    (rec.payload, payload),
                    binding,
                ) {
                    self.index.commit(cursor, Committed { name, ..c });
                    self.unrebased.remove(&cursor);
                } else if self.marker_is_stale(payload, binding, version) {
                    self.stale.insert(loc);
                    self.unrebased.insert(cursor, loc);
                } else if promised {
                    let named = marker_locations(decode_marker_bound(payload, binding).ok());
                    return self.fall_back(cursor, loc, "marker", &named);
                } else {
                    return Ok(true);
                }
            }
            RecordKind::Delta => {
                // A segment of version 1 holds no delta: one there was never written by a
                // build that writes them.
                if version < SEGMENT_VERSION_V2 {
                    return Ok(false);
                }
                if let Some(d) = self.verified_delta(
                    cursor,
                    (loc, version),
                    (rec.payload, payload),
                    (binding, name),
                ) {
                    self.index.apply_delta(cursor, d);
                    self.unrebased.remove(&cursor);
                } else if self.delta_is_stale(payload, binding, version) {
                    self.stale.insert(loc);
                    self.unrebased.insert(cursor, loc);
                } else if promised {
                    let delta = decode_delta(payload, binding, version).ok();
                    let named = marker_locations(delta.map(|d| d.marker));
                    return self.fall_back(cursor, loc, "delta", &named);
                } else {
                    return Ok(true);
                }
            }
            RecordKind::Snapshot => {
                return self.snapshot_record(cursor, (loc, frame_len, version), rec, promised);
            }
            RecordKind::Forget => {
                // A forget names its cursor in its payload too (versions 3 and 4).
                if rec.payload != forget_binding {
                    return if promised {
                        refused("forget")
                    } else {
                        Ok(true)
                    };
                }
                self.index.remove(cursor);
                self.forgotten.insert(cursor);
                self.unrebased.remove(&cursor);
            }
        }
        Ok(false)
    }

    /// A snapshot record of `cursor` at `loc`: commits when it verifies (bound to the cursor
    /// and the name tag it starts with); one that does not is corruption below the synced
    /// length, and past it the cursor keeps its previous state (the walk back). A segment
    /// before version 6 holds none that counts: no build wrote one there.
    fn snapshot_record(
        &mut self,
        cursor: CursorId,
        (loc, frame_len, version): (JournalLoc, u64, u16),
        rec: &Record<'_>,
        promised: bool,
    ) -> Result<bool> {
        if version < SEGMENT_VERSION_V6 {
            return Ok(false);
        }
        let (name, payload) = named_payload(rec, version);
        let binding = record_binding(version, cursor.topic, cursor.cursor, name);
        match decode_snapshot_bound(payload, binding.as_slice()) {
            Ok(snapshot) => {
                let batch = &snapshot.batch;
                self.index.commit_snapshot(
                    cursor,
                    SnapshotLoc {
                        loc,
                        frame_len,
                        crc: payload_crc(rec.payload),
                        name,
                        state: snapshot.state.clone(),
                        ranges: snapshot.range_count,
                        batch: (
                            batch.len() as u64,
                            batch.iter().map(|p| p.entries.len() as u64).sum(),
                        ),
                        current: true,
                    },
                );
                Ok(false)
            }
            Err(_) if promised => Err(corrupt(
                loc.segment,
                loc.offset,
                CorruptionKind::InvalidField("snapshot"),
            )),
            Err(_) => Ok(true),
        }
    }

    /// A marker or delta of `cursor` at `loc` that does not commit below the synced length:
    /// the cursor's state is its snapshot, if it has one (its chain is dropped, and later
    /// deltas on it do not commit either), and the damaged frames among the records it names
    /// (`named`) are accounted for; without one, corruption: at the first damaged frame not
    /// accounted for, else at `loc`.
    fn fall_back(
        &mut self,
        cursor: CursorId,
        loc: JournalLoc,
        what: &'static str,
        named: &[JournalLoc],
    ) -> Result<bool> {
        if self.index.fall_back_to_snapshot(cursor) {
            self.unrebased.remove(&cursor);
            self.fallbacks.push((cursor, loc));
            let damaged: Vec<JournalLoc> = named
                .iter()
                .copied()
                .filter(|n| self.damaged.iter().any(|(d, _)| d == n))
                .collect();
            self.explained.extend(damaged);
            return Ok(false);
        }
        Err(self.first_damage().unwrap_or_else(|| {
            corrupt(loc.segment, loc.offset, CorruptionKind::InvalidField(what))
        }))
    }

    /// A frame at `loc` whose CRC failed (found at `found`, a byte offset in its segment) was
    /// passed over: damage, unless a marker or delta that falls back to its cursor's snapshot
    /// references it.
    pub(super) fn damaged_frame(&mut self, loc: JournalLoc, found: u64) {
        self.damaged.push((loc, found));
    }

    /// The first damaged frame passed over that nothing accounts for, as the error a scan
    /// stopping there returns (`ChecksumMismatch` where it was found).
    pub(super) fn first_damage(&self) -> Option<crate::error::Error> {
        self.damaged
            .iter()
            .find(|(d, _)| !self.explained.contains(d))
            .map(|(d, found)| corrupt(d.segment, *found, CorruptionKind::ChecksumMismatch))
    }

    /// Notes a partition or batch record, to verify the rows of later markers against: its key
    /// and cardinality, read as its segment's version lays them out (its set is not decoded).
    /// A payload that does not decode is never referenced by a marker that counts; only a
    /// segment of version 5 or later holds batch records (no earlier build wrote one, and no
    /// earlier marker references one).
    fn partition_record(
        &mut self,
        cursor: CursorId,
        (loc, frame_len, version): (JournalLoc, u64, u16),
        rec: &Record<'_>,
    ) {
        let crc = record_crc(rec.kind, rec.payload);
        let at = |cardinality| PartLoc {
            seq: 0,
            loc,
            frame_len,
            crc,
            cardinality,
            version,
        };
        if rec.kind == RecordKind::Batch {
            if version >= SEGMENT_VERSION_V5
                && let Ok((ledger_id, chunk, entries)) = peek_batch_entry(rec.payload)
            {
                let key = PartitionKey { ledger_id, chunk };
                let part = at(u64::from(entries));
                self.batches
                    .insert(cursor, key, part, payload_crc(rec.payload));
            }
        } else if let Ok(p) = decode_partition_payload(rec.payload, version) {
            self.partitions.insert(cursor, p.key, at(p.cardinality), ());
        }
    }

    /// After the last segment: a cursor whose newest marker or delta references a segment
    /// older than the scan's first was never re-based, so that segment was removed (or
    /// dropped from the list) by something other than a rollover, and the cursor's state is
    /// lost, not older.
    pub(super) fn check_rebased(&self) -> Result<()> {
        match self.unrebased.values().min() {
            Some(loc) => Err(corrupt(
                loc.segment,
                loc.offset,
                CorruptionKind::InvalidField("marker on a removed segment"),
            )),
            None => Ok(()),
        }
    }

    /// Whether a marker that does not commit references a segment older than the scan's
    /// first: a rollover re-based its cursor before removing that segment.
    fn marker_is_stale(&self, payload: &[u8], binding: &[u8], version: u16) -> bool {
        let Ok(marker) = decode_marker_bound(payload, binding) else {
            return false;
        };
        self.references_removed(&marker, version)
    }

    /// Whether a marker's rows (or, from version 5, its batch rows) name a segment older than
    /// the scan's first.
    fn references_removed(&self, marker: &Marker<'_>, version: u16) -> bool {
        let Table::Inline(rows) = marker.table else {
            return false;
        };
        let batch = marker
            .batch
            .iter()
            .map(|b| b.entry_id)
            .filter(|_| version >= SEGMENT_VERSION_V5);
        rows.iter()
            .map(|row| row.entry_id)
            .chain(batch)
            .any(|at| JournalLoc::unpack(at).segment < self.first)
    }

    /// Whether a delta that does not commit builds on a record superseded that way (or on
    /// one in a removed segment), or references a removed segment.
    fn delta_is_stale(&self, payload: &[u8], binding: &[u8], version: u16) -> bool {
        let Ok(delta) = decode_delta(payload, binding, version) else {
            return false;
        };
        if delta.base.segment < self.first || self.stale.contains(&delta.base) {
            return true;
        }
        self.references_removed(&delta.marker, version)
    }

    /// The row a marker or delta holds, if it names a partition record of `cursor` seen
    /// before `loc` with the key, CRC and cardinality the row holds.
    fn verified_row(
        &self,
        cursor: CursorId,
        loc: JournalLoc,
        row: &PartitionRow,
    ) -> Option<(PartitionKey, PartLoc)> {
        let at = JournalLoc::unpack(row.entry_id);
        let (c, key, part, ()) = self.partitions.get(at)?;
        let ok = *c == cursor
            && key.ledger_id == row.ledger_id
            && key.chunk == row.chunk
            && part.crc == row.crc
            && part.cardinality == row.cardinality
            && at < loc;
        ok.then_some((*key, *part))
    }

    /// The batch row a marker or delta of a segment of `version` holds, if it names a batch
    /// record of `cursor` seen before `loc` with the key, CRC and partial-entry count the row
    /// holds. From version 8 the row's CRC is the record's [`batch_row_crc`], so a row accepts
    /// only the exact record it names; before, it is the CRC32 of the whole payload, which
    /// every batch record that verifies shares, read as those versions read it.
    ///
    /// [`batch_row_crc`]: crate::format::journal::batch_row_crc
    fn verified_batch_row(
        &self,
        cursor: CursorId,
        (loc, version): (JournalLoc, u16),
        row: &BatchRow,
    ) -> Option<(PartitionKey, PartLoc)> {
        let at = JournalLoc::unpack(row.entry_id);
        let (c, key, part, whole) = self.batches.get(at)?;
        let crc = if version >= SEGMENT_VERSION_V8 {
            part.crc
        } else {
            *whole
        };
        let ok = *c == cursor
            && key.ledger_id == row.ledger_id
            && key.chunk == row.chunk
            && crc == row.crc
            && part.cardinality == u64::from(row.entries)
            && at < loc;
        ok.then_some((*key, *part))
    }

    /// The batch rows of `marker` as verified locations: none before version 5 (a marker
    /// there with a batch table does not verify), a batch table in pages never.
    fn verified_batch(
        &self,
        cursor: CursorId,
        (loc, version): (JournalLoc, u16),
        marker: &Marker<'_>,
    ) -> Option<Vec<(PartitionKey, PartLoc)>> {
        if !marker.batch_pages.is_empty()
            || (version < SEGMENT_VERSION_V5 && !marker.batch.is_empty())
        {
            return None;
        }
        marker
            .batch
            .iter()
            .map(|row| self.verified_batch_row(cursor, (loc, version), &row))
            .collect()
    }

    /// The delta as a change of the cursor's committed chain, if its base is the cursor's
    /// committed marker or delta (location and payload CRC), every key it removes is live
    /// there, and every row it adds verifies as a marker's row does (batch keys and rows
    /// alike).
    fn verified_delta(
        &self,
        cursor: CursorId,
        (loc, version): (JournalLoc, u16),
        (record_payload, payload): (&[u8], &[u8]),
        (binding, name): (&[u8], u32),
    ) -> Option<AppliedDelta> {
        let base = self.index.committed(cursor)?;
        let delta = decode_delta(payload, binding, version).ok()?;
        // A chain belongs to one name: a delta never renames its base's cursor (a base of a
        // version 3 segment knows no name).
        if delta.base != base.marker
            || delta.base_crc != base.crc
            || (base.name != 0 && base.name != name)
        {
            return None;
        }
        let Table::Inline(rows) = delta.marker.table else {
            return None;
        };
        let removed = removed_keys(delta.removed(), &base.rows)?;
        let mut added = Vec::with_capacity(rows.len());
        for row in rows.iter() {
            let (key, part) = self.verified_row(cursor, loc, &row)?;
            removed.binary_search(&key).is_err().then_some(())?;
            added.push((key, part));
        }
        let removed_batch = removed_keys(delta.removed_batch(), &base.batch)?;
        let added_batch = self.verified_batch(cursor, (loc, version), &delta.marker)?;
        for (key, _) in &added_batch {
            removed_batch.binary_search(key).is_err().then_some(())?;
        }
        let live = live_after(&base.rows, &removed, &added);
        let live_batch = live_after(&base.batch, &removed_batch, &added_batch);
        // A batch row of this delta, or one the base kept, that a segment before version 8
        // accepted binds its record by location alone while it is live.
        let unbound_batch = live_batch > 0
            && (base.unbound_batch || (version < SEGMENT_VERSION_V8 && !added_batch.is_empty()));
        Some(AppliedDelta {
            marker: loc,
            marker_len: full_marker_frame_len(&delta.marker.state, live, live_batch),
            crc: payload_crc(record_payload),
            name,
            state: delta.marker.state,
            removed,
            added,
            removed_batch,
            added_batch,
            unbound_batch,
        })
    }

    /// The marker as committed state, if every row names a partition record of this cursor
    /// seen before it, with the CRC and cardinality the row holds, and every batch row a batch
    /// record so.
    fn verified_marker(
        &self,
        cursor: CursorId,
        (loc, frame_len, version): (JournalLoc, u64, u16),
        (record_payload, payload): (&[u8], &[u8]),
        binding: &[u8],
    ) -> Option<Committed> {
        let marker = decode_marker_bound(payload, binding).ok()?;
        let Table::Inline(rows) = marker.table else {
            return None;
        };
        let live = Rows::from_pairs(
            rows.iter()
                .map(|row| self.verified_row(cursor, loc, &row))
                .collect::<Option<Vec<_>>>()?,
        );
        let batch = Rows::from_pairs(self.verified_batch(cursor, (loc, version), &marker)?);
        Some(Committed {
            marker: loc,
            marker_len: frame_len,
            crc: payload_crc(record_payload),
            name: 0,
            floor: Committed::full_floor(loc, &live, &batch),
            state: marker.state,
            rows: live,
            unbound_batch: version < SEGMENT_VERSION_V8 && !batch.is_empty(),
            batch,
        })
    }
}

/// Where the partition and batch records `marker`'s rows name are (none when it did not
/// decode).
fn marker_locations(marker: Option<Marker<'_>>) -> Vec<JournalLoc> {
    let Some(marker) = marker else {
        return Vec::new();
    };
    let rows = match marker.table {
        Table::Inline(rows) => rows.iter().map(|r| r.entry_id).collect(),
        Table::Paged(_) => Vec::new(),
    };
    rows.into_iter()
        .chain(marker.batch.iter().map(|b| b.entry_id))
        .map(JournalLoc::unpack)
        .collect()
}

/// The keys a delta removes, if every one is live in `base`.
fn removed_keys(keys: impl Iterator<Item = (u64, u64)>, base: &Rows) -> Option<Vec<PartitionKey>> {
    keys.map(|(ledger_id, chunk)| {
        let key = PartitionKey { ledger_id, chunk };
        base.contains_key(&key).then_some(key)
    })
    .collect()
}

/// How many keys `base` holds after a delta removes `removed` and adds `added`.
fn live_after(base: &Rows, removed: &[PartitionKey], added: &[(PartitionKey, PartLoc)]) -> usize {
    base.len() - removed.len() + added.iter().filter(|(k, _)| !base.contains_key(k)).count()
}

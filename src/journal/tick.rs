//! Ticks: cursors staged one by one, then committed together ([`Tick`]).
//!
//! **Group commit.** A tick appends, for every cursor that changed, the partitions it wrote
//! and then its marker (the PIP-81 shape: partitions, then the marker that commits them), or
//! for a cursor of the single-entry form its snapshot record, as one write, then makes them durable with one `fdatasync` (plus, when the tick starts a new
//! segment, one of the sealed segment and one of the directory). So a tick over any number of
//! cursors costs one to three syncs.

use std::sync::MutexGuard;
use std::sync::atomic::Ordering;

use roaring::RoaringBitmap;

use super::index::{Committed, CursorId, PartLoc, Row, Rows, SnapshotLoc};
use super::marker::{append_marker, check_marker_fits, cursor_record, full_marker_frame_len};
use super::{Journal, TickStats, lock};
use crate::ackset::PartitionKey;
use crate::error::{Error, Result};
use crate::format::cursor::{PersistedState, bind_entry, payload_crc};
use crate::format::journal::{
    BODY_FIXED_LEN, JournalLoc, MAX_BODY_LEN, NAME_TAG_LEN, Record, RecordKind, SEGMENT_VERSION,
    cursor_binding, encode_record, put_partition_payload, record_binding, record_crc,
};
use crate::hashing::{HashMapExt, IdMap, IdSet};

/// One cursor's part of a tick: its state and its ack partitions as of one snapshot.
#[derive(Debug, Clone)]
pub struct CursorFlush {
    /// The cursor.
    pub cursor: CursorId,
    /// Its name tag (`crate::format::journal::name_tag` of its name; 0 binds no name).
    pub name: u32,
    /// Mark-delete, epoch and properties.
    pub state: PersistedState,
    /// Partitions that changed since they were last written, with their contents.
    pub written: Vec<(PartitionKey, RoaringBitmap)>,
    /// Every live partition (changed or not); those not in `written` must have a copy in the
    /// journal already.
    pub live: Vec<PartitionKey>,
}

impl Journal {
    /// Commits every cursor of `flushes` in one tick: [`Journal::begin_tick`], one
    /// [`Tick::stage`] per cursor, [`Tick::commit`].
    ///
    /// # Errors
    /// Those of [`Tick::stage`] and [`Tick::commit`].
    pub fn commit(&self, flushes: &[CursorFlush]) -> Result<TickStats> {
        let mut tick = self.begin_tick();
        for f in flushes {
            tick.stage((f.cursor, f.name), f.state.clone(), &f.written, &f.live)?;
        }
        tick.commit()
    }

    /// Starts a tick: ticks and rollovers run one at a time, evictions and loads go on.
    pub fn begin_tick(&self) -> Tick<'_> {
        Tick {
            journal: self,
            _serial: lock(&self.tick),
            staged: Vec::new(),
            snapshots: Vec::new(),
            uncommitted: Vec::new(),
            stats: TickStats::default(),
            started: false,
            scratch: Scratch::default(),
        }
    }

    /// Deletes the cursor's records from the index and appends a forget record, synced.
    pub fn forget(&self, cursor: CursorId) -> Result<()> {
        self.forget_unexplained(cursor).map_err(|e| self.failure(e))
    }

    fn forget_unexplained(&self, cursor: CursorId) -> Result<()> {
        let _tick = lock(&self.tick);
        let mut stats = TickStats::default();
        let mut w = lock(&self.writer);
        let new_segment = self.segment_for_tick(&mut w, &mut stats)?;
        let (seq, _) = Self::newest(&w)?;
        let mut buf = Vec::new();
        encode_record(
            &mut buf,
            &Record {
                kind: RecordKind::Forget,
                topic: cursor.topic,
                cursor: cursor.cursor,
                // Every forget goes to a segment of this build's version: it names its cursor.
                payload: &cursor_binding(cursor.topic, cursor.cursor),
            },
        )?;
        self.append(&mut w, &buf, true)?;
        drop(w);
        self.sync_newest(seq, &mut stats)?;
        if new_segment {
            self.sync_dir(&mut stats)?;
        }
        self.index.of(cursor).remove(cursor);
        lock(&self.unsettled).remove(&cursor);
        Ok(())
    }
}

/// The record of `cursor`'s snapshot `entry` (a cursor-ledger snapshot entry) for a segment of
/// this build's version: the name tag `name`, then the entry with its CRC bound to the cursor.
pub(super) fn snapshot_payload(cursor: CursorId, name: u32, entry: &[u8]) -> Vec<u8> {
    let mut payload = Vec::with_capacity(NAME_TAG_LEN + entry.len());
    payload.extend_from_slice(&name.to_le_bytes());
    payload.extend_from_slice(entry);
    if let Some(bound) = payload.get_mut(NAME_TAG_LEN..) {
        let binding = record_binding(SEGMENT_VERSION, cursor.topic, cursor.cursor, name);
        bind_entry(bound, binding.as_slice());
    }
    payload
}

/// One group commit in progress: cursors are staged one by one, each under its own lock (its
/// written partitions are appended at once, so the log orders them with the cursor's
/// evictions), then [`Tick::commit`] appends every marker and syncs once.
#[derive(Debug)]
pub struct Tick<'a> {
    journal: &'a Journal,
    _serial: MutexGuard<'a, ()>,
    staged: Vec<Staged>,
    /// Cursors of the single-entry form staged, each with its snapshot record's payload.
    snapshots: Vec<StagedSnapshot>,
    /// Cursors whose markers the commit in progress has taken from `staged`, until they are
    /// in the index.
    uncommitted: Vec<CursorId>,
    stats: TickStats,
    started: bool,
    /// Buffers [`Tick::stage_with_batch`] reuses from one cursor to the next, emptied before
    /// each use: the payloads of a cursor's partitions, where each ends, and their records.
    /// A tick stages every dirty cursor of the store; a fresh buffer each, and each payload's
    /// own, were most of a tick's allocations.
    scratch: Scratch,
}

/// See [`Tick::scratch`].
#[derive(Debug, Default)]
struct Scratch {
    payloads: Vec<u8>,
    ends: Vec<usize>,
    records: Vec<u8>,
}

impl Drop for Tick<'_> {
    /// A tick that ends without committing what it staged (a failed commit, or a flush that
    /// failed after staging) leaves those cursors unsettled (see `Journal::unsettled`), while
    /// the tick lock is still held, so no later tick skips them.
    fn drop(&mut self) {
        if self.staged.is_empty() && self.snapshots.is_empty() && self.uncommitted.is_empty() {
            return;
        }
        let mut unsettled = lock(&self.journal.unsettled);
        unsettled.extend(self.staged.iter().map(|s| s.cursor));
        unsettled.extend(self.snapshots.iter().map(|s| s.cursor));
        unsettled.extend(self.uncommitted.iter().copied());
    }
}

/// One cursor staged into a tick: what its marker will commit.
#[derive(Debug)]
struct Staged {
    cursor: CursorId,
    name: u32,
    state: PersistedState,
    rows: Rows,
    batch: Rows,
}

/// One cursor of the single-entry form staged into a tick: its snapshot record.
#[derive(Debug)]
struct StagedSnapshot {
    cursor: CursorId,
    /// The record's payload ([`snapshot_payload`]).
    payload: Vec<u8>,
    /// What the index keeps of it once committed (its place is set then).
    committed: SnapshotLoc,
}

/// What a cursor's single-entry snapshot holds, as a tick stages it
/// ([`Tick::stage_snapshot`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotCounts {
    /// Acked ranges above mark-delete.
    pub ranges: u64,
    /// Partitions with partial entries.
    pub batch_partitions: u64,
    /// Partial entries.
    pub partial_entries: u64,
}

/// A cursor's partial entries (batch-index acks) as a tick stages them: the batch records to
/// write, and the partitions whose current batch record the journal holds already.
#[derive(Debug, Clone, Default)]
pub struct BatchStage {
    /// Partitions whose partial entries changed since their batch record was written: key,
    /// the batch-index entry encoding them, and how many partial entries it holds.
    pub written: Vec<(PartitionKey, Vec<u8>, u32)>,
    /// Partitions whose newest batch record in the journal is current, with the CRC the cursor
    /// expects of it (its [`crate::format::journal::batch_row_crc`], what the index holds).
    pub kept: Vec<(PartitionKey, u32)>,
}

impl Tick<'_> {
    /// Stages one cursor as of a snapshot taken under its lock: appends `written` (partitions
    /// changed since they were last written; not synced) and resolves where every `live`
    /// partition's current copy is. Call it while holding the cursor's lock, so no eviction of
    /// the cursor falls between the snapshot and these appends; it waits for no sync. `name`
    /// is the cursor's name tag, which its marker binds (0 binds none).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (nothing staged) when a live partition is neither written
    /// nor in the journal; [`Error::LimitExceeded`] (nothing staged, the journal and the tick
    /// go on) when the cursor's full marker would be larger than a record may be (see
    /// [`marker_room`](super::marker_room)), or a written batch record is;
    /// [`Error::PreviousIo`] after an earlier failure; [`Error::Io`].
    pub fn stage(
        &mut self,
        cursor: (CursorId, u32),
        state: PersistedState,
        written: &[(PartitionKey, RoaringBitmap)],
        live: &[PartitionKey],
    ) -> Result<()> {
        self.stage_with_batch(cursor, state, (written, live), &BatchStage::default())
            .map(drop)
    }

    /// [`Tick::stage`] with the cursor's partial entries: appends the batch records of
    /// `batch.written` with the partitions, and resolves each of `batch.kept` to the journal's
    /// newest batch record of it. Returns where the marker's batch table will say each one is.
    ///
    /// # Errors
    /// As [`Tick::stage`]; [`Error::InvalidArgument`] (nothing staged) too when a kept batch
    /// partition has no batch record in the journal, or one with another CRC.
    pub fn stage_with_batch(
        &mut self,
        (cursor, name): (CursorId, u32),
        state: PersistedState,
        acks: (&[(PartitionKey, RoaringBitmap)], &[PartitionKey]),
        batch: &BatchStage,
    ) -> Result<Rows> {
        let j = self.journal;
        self.stage_unexplained((cursor, name), state, acks, batch)
            .map_err(|e| j.failure(e))
    }

    fn stage_unexplained(
        &mut self,
        (cursor, name): (CursorId, u32),
        state: PersistedState,
        (written, live): (&[(PartitionKey, RoaringBitmap)], &[PartitionKey]),
        batch: &BatchStage,
    ) -> Result<Rows> {
        state.validate()?;
        check_marker_fits(&state, live.len(), batch.kept.len() + batch.written.len())?;
        let j = self.journal;
        // Taken for this cursor and put back after it: a cursor that fails leaves the next
        // one fresh buffers (each is emptied before its use either way).
        let Scratch {
            mut payloads,
            mut ends,
            records: mut buf,
        } = std::mem::take(&mut self.scratch);
        payloads.clear();
        ends.clear();
        buf.clear();
        // Encoded before the writer's lock is taken: evictions append meanwhile.
        for (key, bitmap) in written {
            put_partition_payload(&mut payloads, *key, bitmap);
            ends.push(payloads.len());
        }
        let mut w = lock(&j.writer);
        if !self.started {
            j.start_segment_if_needed(&mut w, &mut self.stats)?;
            self.started = true;
        }
        let (mut rows, live_written) = resolve_live(j, cursor, (written, live), batch)?;
        let (seq, base) = Journal::newest(&w)?;
        let mut parts = Vec::with_capacity(written.len());
        let copy = |buf: &mut Vec<u8>, kind, payload: &[u8], cardinality| {
            let before = buf.len();
            encode_record(buf, &cursor_record(kind, cursor, payload))?;
            Ok(PartLoc {
                seq: j.counters.seq.fetch_add(1, Ordering::Relaxed) + 1,
                loc: JournalLoc {
                    segment: seq,
                    offset: base + before as u64,
                },
                frame_len: (buf.len() - before) as u64,
                crc: record_crc(kind, payload),
                cardinality,
                version: SEGMENT_VERSION,
            })
        };
        let mut start = 0;
        for ((key, bitmap), &end) in written.iter().zip(&ends) {
            let payload = payloads.get(start..end).unwrap_or_default();
            let part = copy(&mut buf, RecordKind::Partition, payload, bitmap.len())?;
            parts.push((*key, part));
            start = end;
        }
        let mut batch_parts = Vec::with_capacity(batch.written.len());
        for (key, payload, entries) in &batch.written {
            let part = copy(&mut buf, RecordKind::Batch, payload, u64::from(*entries))?;
            batch_parts.push((*key, part));
        }
        if !buf.is_empty() {
            j.append(&mut w, &buf, true)?;
        }
        let mut index = j.index.of(cursor);
        for (key, part) in &parts {
            index.stage(cursor, *key, *part);
        }
        for (key, part) in &batch_parts {
            index.stage_batch(cursor, *key, *part);
        }
        rows.extend(
            live_written
                .into_iter()
                .filter_map(|key| Some((key, index.lookup(cursor, key)?))),
        );
        // Sorted once: the rows arrive as the live ones resolved, then the written ones.
        let rows = Rows::from_pairs(rows);
        let batch_rows = Rows::from_pairs(
            batch
                .kept
                .iter()
                .map(|(k, _)| k)
                .chain(batch.written.iter().map(|(k, _, _)| k))
                .filter_map(|key| Some((*key, index.lookup_batch(cursor, *key)?))),
        );
        self.stats.partitions += (parts.len() + batch_parts.len()) as u64;
        self.stats.bytes += buf.len() as u64;
        self.scratch = Scratch {
            payloads,
            ends,
            records: buf,
        };
        self.staged.push(Staged {
            cursor,
            name,
            state,
            rows,
            batch: batch_rows.clone(),
        });
        Ok(batch_rows)
    }

    /// Stages one cursor of the single-entry form: `entry`, a cursor-ledger snapshot entry of
    /// its whole state (`state`, its acked ranges and its partial entries, holding what
    /// `counts` says), becomes a snapshot record bound to the cursor and its name tag `name`,
    /// appended by [`Tick::commit`] with the markers. Nothing is written before the commit.
    ///
    /// # Errors
    /// [`Error::LimitExceeded`] (nothing staged, the journal and the tick go on) when the
    /// record would be larger than a reader accepts; [`Error::PreviousIo`] after an earlier
    /// failure.
    pub fn stage_snapshot(
        &mut self,
        (cursor, name): (CursorId, u32),
        state: PersistedState,
        entry: &[u8],
        counts: SnapshotCounts,
    ) -> Result<()> {
        let body = BODY_FIXED_LEN + NAME_TAG_LEN + entry.len();
        if body > MAX_BODY_LEN {
            return Err(Error::LimitExceeded {
                reason: format!(
                    "the cursor's snapshot of {} bytes is over the {MAX_BODY_LEN} bytes a \
                     journal record holds: use multi-entry persistence",
                    entry.len()
                ),
            });
        }
        let j = self.journal;
        {
            let mut w = lock(&j.writer);
            let started = if self.started {
                w.check_latch()
            } else {
                j.start_segment_if_needed(&mut w, &mut self.stats)
            };
            started.map_err(|e| j.failure(e))?;
            self.started = true;
        }
        let payload = snapshot_payload(cursor, name, entry);
        self.snapshots.push(StagedSnapshot {
            cursor,
            committed: SnapshotLoc {
                loc: JournalLoc {
                    segment: 0,
                    offset: 0,
                },
                frame_len: record_len_of(&payload),
                crc: payload_crc(&payload),
                name,
                state,
                ranges: counts.ranges,
                batch: (counts.batch_partitions, counts.partial_entries),
                current: true,
            },
            payload,
        });
        Ok(())
    }

    /// Appends every staged cursor's marker, syncs once (and the directory when a segment was
    /// created since its last sync), then publishes the markers to the index and rolls over
    /// what the journal has outgrown. Returns after the sync.
    ///
    /// # Errors
    /// [`Error::PreviousIo`] after an earlier failure; [`Error::Io`]: nothing new is
    /// guaranteed, and the journal refuses every later write.
    pub fn commit(self) -> Result<TickStats> {
        let j = self.journal;
        self.commit_unexplained().map_err(|e| j.failure(e))
    }

    fn commit_unexplained(mut self) -> Result<TickStats> {
        let j = self.journal;
        if self.staged.is_empty() && self.snapshots.is_empty() {
            // Nothing new, but a cursor's earlier flush may have been staged into a tick that
            // failed: after a failure no flush reports success.
            lock(&j.writer).check_latch()?;
            return Ok(self.stats);
        }
        let mut w = lock(&j.writer);
        let (seq, base) = Journal::newest(&w)?;
        // Room for every marker in full (a delta is smaller) up to two slices: the buffer
        // rarely grows by copying, and the pages of room a tick's deltas leave unused are never
        // touched.
        let room: u64 = self
            .staged
            .iter()
            .map(|s| full_marker_frame_len(&s.state, s.rows.len(), s.batch.len()))
            .chain(self.snapshots.iter().map(|s| s.committed.frame_len))
            .sum();
        let mut buf = Vec::with_capacity(usize::try_from(room).unwrap_or(0).min(2 * MARKER_SLICE));
        // Bytes of this tick's records appended before those in `buf`.
        let mut appended = 0u64;
        let mut commits: Vec<(CursorId, Committed)> = Vec::with_capacity(self.staged.len());
        // Until their markers are in the index, a failure leaves these cursors unsettled.
        self.uncommitted = self
            .staged
            .iter()
            .map(|s| s.cursor)
            .chain(self.snapshots.iter().map(|s| s.cursor))
            .collect();
        let built = (|| -> Result<Vec<(CursorId, SnapshotLoc)>> {
            // Ticks and rollovers run one at a time: no committed chain changes meanwhile. Each
            // cursor's shard is locked for its own lookup alone: loads and evictions of the
            // other cursors go on while the markers are built.
            // Where each cursor's newest marker of this tick is in `commits`: one lookup per
            // staged cursor, so a tick costs the same per cursor whatever their number.
            let mut newest: IdMap<CursorId, usize> = IdMap::with_capacity(self.staged.len());
            for staged in std::mem::take(&mut self.staged) {
                let cursor = staged.cursor;
                // A cursor staged twice in one tick builds on its own earlier marker.
                let prior = newest.get(&cursor).map(|&i| &commits[i].1);
                let at = (seq, base + appended + buf.len() as u64);
                let (next, kind) = {
                    // The shard is held for the lookup and the marker's encoding, not for
                    // the write of a slice below.
                    let shard = prior.is_none().then(|| j.index.of(cursor));
                    let chain = prior.or_else(|| shard.as_ref()?.committed(cursor));
                    append_marker(
                        &mut buf,
                        (cursor, staged.name),
                        at,
                        chain,
                        &staged.state,
                        (staged.rows, staged.batch),
                    )?
                };
                if kind == RecordKind::Delta {
                    j.counters.deltas.fetch_add(1, Ordering::Relaxed);
                }
                newest.insert(cursor, commits.len());
                commits.push((cursor, next));
                if buf.len() >= MARKER_SLICE {
                    j.append(&mut w, &buf, true)?;
                    appended += buf.len() as u64;
                    buf.clear();
                }
            }
            let start = base + appended;
            let snapshots =
                encode_snapshots(std::mem::take(&mut self.snapshots), &mut buf, (seq, start))?;
            j.append(&mut w, &buf, true)?;
            Ok(snapshots)
        })();
        let snapshots = built.inspect_err(|e| {
            // A failure of the first slice was cut back by `append`; one after slices landed
            // cuts the segment back to where the tick began: the next tick writes every
            // marker again (a full disk freed meanwhile loses nothing), as after a tick's one
            // write failed.
            if appended > 0 {
                j.undo_tick(&mut w, seq, base, e);
            }
        })?;
        let dir = w.dir_unsynced;
        drop(w);
        // The sync runs without the writer's lock: evictions keep appending meanwhile.
        j.sync_newest(seq, &mut self.stats)?;
        if dir {
            j.sync_dir(&mut self.stats)?;
        }
        j.check_owner()?;
        {
            // Seen whole, as the tick's one sync made it durable.
            let mut index = j.index.all();
            let mut unsettled = lock(&j.unsettled);
            self.stats.cursors = (commits.len() + snapshots.len()) as u64;
            for (cursor, c) in commits {
                index.of(cursor).commit(cursor, c);
                unsettled.remove(&cursor);
            }
            for (cursor, s) in snapshots {
                index.of(cursor).commit_snapshot(cursor, s);
                unsettled.remove(&cursor);
            }
            self.uncommitted.clear();
        }
        self.stats.bytes += appended + buf.len() as u64;
        j.counters.ticks.fetch_add(1, Ordering::Relaxed);
        self.stats.segments_deleted = j.roll_over_locked()?;
        Ok(self.stats)
    }
}

/// Appends the snapshot record of each of `staged` to `buf`, which starts at offset `start` of
/// segment `seq`; returns each cursor with where its record is.
fn encode_snapshots(
    staged: Vec<StagedSnapshot>,
    buf: &mut Vec<u8>,
    (seq, start): (u64, u64),
) -> Result<Vec<(CursorId, SnapshotLoc)>> {
    let mut snapshots = Vec::with_capacity(staged.len());
    for staged in staged {
        let loc = JournalLoc {
            segment: seq,
            offset: start + buf.len() as u64,
        };
        encode_record(
            buf,
            &Record {
                kind: RecordKind::Snapshot,
                topic: staged.cursor.topic,
                cursor: staged.cursor.cursor,
                payload: &staged.payload,
            },
        )?;
        snapshots.push((
            staged.cursor,
            SnapshotLoc {
                loc,
                ..staged.committed
            },
        ));
    }
    Ok(snapshots)
}

/// Bytes of markers a tick's commit collects before it appends them, under the writer's lock
/// all along (no eviction falls between two slices). One buffer of every marker was 40 MB at
/// 300,000 dirty cursors, allocated afresh each tick and cold by the time the kernel copied it:
/// that one write took four times the time per cursor it took at 30,000 (`docs/benchmarks.md`,
/// "Where the growth from 100,000 to 1M cursors is").
const MARKER_SLICE: usize = 1 << 20;

/// Bytes of the frame of a record whose payload is `payload`.
fn record_len_of(payload: &[u8]) -> u64 {
    crate::format::journal::record_len(payload.len()) as u64
}

/// Where each of `live` not in `written` is (its newest copy in the journal), and which of
/// `live` are in `written` (resolved once staged): each live partition is looked up once.
///
/// # Errors
/// [`Error::InvalidArgument`] when a live partition is neither written nor in the journal, or
/// a kept batch partition has no batch record of its CRC.
fn resolve_live(
    j: &Journal,
    cursor: CursorId,
    (written, live): (&[(PartitionKey, RoaringBitmap)], &[PartitionKey]),
    batch: &BatchStage,
) -> Result<(Vec<Row>, Vec<PartitionKey>)> {
    let mut rows = Vec::with_capacity(live.len());
    let mut live_written = Vec::new();
    // One set of the written keys: a flush that writes every partition of a cursor with many
    // costs the same per partition as one that writes a few.
    let written_keys: IdSet<&PartitionKey> = written.iter().map(|(k, _)| k).collect();
    let index = j.index.of(cursor);
    for key in live {
        if written_keys.contains(key) {
            live_written.push(*key);
        } else if let Some(part) = index.lookup(cursor, *key) {
            rows.push((*key, part));
        } else {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "partition {}:{} of cursor {}/{} is live but neither written nor in the \
                     journal",
                    key.ledger_id, key.chunk, cursor.topic, cursor.cursor
                ),
            });
        }
    }
    if let Some((key, _)) = batch
        .kept
        .iter()
        .find(|(k, crc)| index.lookup_batch(cursor, *k).is_none_or(|p| p.crc != *crc))
    {
        return Err(Error::InvalidArgument {
            reason: format!(
                "partial entries of partition {}:{} of cursor {}/{} are kept but the journal \
                 holds no batch record of them",
                key.ledger_id, key.chunk, cursor.topic, cursor.cursor
            ),
        });
    }
    Ok((rows, live_written))
}

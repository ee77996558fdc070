//! The cursor journal: one shared, group-committed log of every cursor's ack state.
//!
//! Owns: the journal segment files (`journal-{seq:016}.seg`, [`crate::format::journal`]) of one
//! store, the writer that appends to the newest segment, the index of every cursor's records
//! ([`index`]), recovery on open, and segment rollover. Must never: return `Ok` from
//! [`Journal::commit`] before every record of the tick is synced; reference a partition from
//! a marker before the partition's record precedes the marker in the log; delete a segment
//! before what it holds that is still live was copied and synced elsewhere; write after a
//! failed sync or a fence (the journal latches until the store is reopened; a failed write is
//! cut back and the next write starts where it did, see [`Journal::is_unsettled`]).
//!
//! **Group commit.** A tick appends, for every cursor that changed, the partitions it wrote
//! and then its marker (the PIP-81 shape: partitions, then the marker that commits them), as
//! one write, then makes them durable with one `fdatasync` (plus, when the tick starts a new
//! segment, one of the sealed segment and one of the directory). So a tick over any number of
//! cursors costs one to three syncs.
//!
//! **Deltas.** A cursor's marker is a *delta* (record kind 4) whenever it is smaller than a
//! full marker: the cursor's state, the rows added or rewritten and the keys removed since its
//! committed marker or delta, which it names (location and payload CRC) as its base. So the
//! bytes of a tick grow with what changed, not with the cursor's live partitions. A cursor's
//! first marker, and one that changes most of its rows (a seek), is full.
//!
//! **Synced length.** A segment (version 3) carries two slots after its header recording a
//! length a finished `fdatasync` covered, written after each sync with no sync of its own (the
//! ledger's slot). The header and slots are synced before the segment is listed, and a segment
//! that stops being the newest is synced with a slot claiming all of it; the next segment's
//! header then names it and that final length (its predecessor), so each listed segment but
//! the oldest must follow the one listed before it at exactly the length found there. A
//! marker's own CRC covers its cursor's ids (version 3), so it counts for no other cursor.
//!
//! **Recovery** scans the segments in order, in bounded memory. A marker counts only if every
//! partition it references is a record of the same cursor, before it in the log, whose payload
//! CRC is the one the marker holds; a delta only if, besides, its base is the cursor's
//! committed marker or delta at that point of the scan. Below a segment's synced length, one
//! that does not count is corruption; past it (only in the newest segment) the cursor keeps its
//! previous state (the walk back), and a delta on a rejected one is rejected too. A record that
//! references a segment a rollover removed was superseded and is skipped, provided a record of
//! the same cursor that commits follows it (the rollover's re-base); otherwise it is corruption. The newest segment
//! ends at the first record that does not verify past its synced length (a torn tail, cut
//! off); a listed segment that is missing, has a bad header or predecessor, has both slot copies
//! failing, is shorter than its synced length or seal, ends elsewhere than its successor's
//! header says, or does not verify below them (anywhere, in any other segment) is corruption,
//! and is never removed or cut. Partitions are not decoded until loaded.
//!
//! **Rollover.** When the segments hold more than twice the live bytes plus one segment, the
//! oldest segment's live records (committed partitions, pending partitions) are copied to the
//! newest segment, every cursor whose chain (full marker, deltas, the partitions they
//! reference) reaches into the oldest segment is re-based with a full marker there, all is
//! synced, and only then is the oldest segment deleted. The live bytes count a full marker per
//! cursor, not its deltas: deltas are garbage a re-base reclaims.
//!
//! **Ownership.** The journal is opened by the store that holds the directory. A former owner
//! that lost the directory without knowing it may still append to the segment that was newest
//! when the new owner opened: the new owner records that segment's length in the store catalog
//! (the seal) and never appends to it, and every later open ignores bytes past the seal. The
//! owner's check ([`Journal::set_owner_check`]) runs after a tick's syncs, before it returns
//! `Ok` or indexes anything, and before a rollover deletes a segment: a former owner's tick
//! fails with [`Error::Fenced`] (its records lie past the new owner's seal or were read by its
//! open), it never deletes a segment, and the journal refuses every later write.

pub mod index;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use roaring::RoaringBitmap;

use crate::ackset::{PartitionKey, PartitionStore};
use crate::error::{CorruptionKind, CorruptionPlace, Error, Result};
use crate::format::cursor::{
    BatchRow, Marker, PartitionEntry, PartitionRow, PersistedState, ROW_LEN, Table, TableRef,
    bind_entry, decode_marker_bound, decode_partition_entry, encode_marker_with_batch,
    encode_partition_entry, marker_with_batch_len, payload_crc, peek_batch_entry,
};
use crate::format::journal::{
    BODY_FIXED_LEN, JournalLoc, MAX_BODY_LEN, MAX_SEGMENT, NAME_TAG_LEN, PREDECESSOR_AT,
    Predecessor, RECORD_HEADER_LEN, Record, RecordKind, SEGMENT_HEADER_LEN, SEGMENT_HEADER_V3_LEN,
    SEGMENT_VERSION, SEGMENT_VERSION_V2, SEGMENT_VERSION_V3, SLOT_COPIES, SLOT_LEN, SLOTS_AT,
    SLOTS_LEN, cursor_binding, decode_delta, decode_predecessor, decode_record,
    decode_segment_header_version, decode_slot, delta_len, encode_delta, encode_record,
    encode_segment_header, encode_slot, peek_body_len, record_binding, record_len, records_start,
    split_name_tag,
};
use crate::format::partition::{decode_partition, encode_partition};
use crate::log::Window;
use crate::storage::{Storage, StorageFile};
use index::{AppliedDelta, Committed, CursorId, Index, PartLoc};

/// The segments a store's catalog lists (see `crate::format::store`): they alone count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listed<'a> {
    /// The listed segments, ascending.
    pub segments: &'a [u64],
    /// The highest segment a rollover dropped from the list (0: none): an unlisted segment file
    /// above it that holds records was dropped by something else, which is damage.
    pub retired_through: u64,
    /// The segment and length the store's last clean close recorded: while that segment is
    /// listed, its records reach at least that far (a shorter one is an older copy).
    pub closed: Option<Seal>,
}

/// Settings of the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalConfig {
    /// A tick that finds the newest segment at or past this size starts a new one (a segment
    /// holding no record yet takes one whatever this size, so even a limit below the header's
    /// size lets a rollover end).
    pub segment_bytes: u64,
}

impl Default for JournalConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 64 << 20,
        }
    }
}

/// Bytes of the newest segment that belong to a former owner's journal: every open ignores
/// what lies past `len` in segment `segment`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Seal {
    /// The segment sealed (0: none).
    pub segment: u64,
    /// Its bytes that count.
    pub len: u64,
}

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

/// What a tick or a rollover did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TickStats {
    /// Cursors committed.
    pub cursors: u64,
    /// Partition records written.
    pub partitions: u64,
    /// Bytes appended.
    pub bytes: u64,
    /// `fdatasync` and directory syncs made.
    pub syncs: u64,
    /// Segments deleted by rollovers after the tick.
    pub segments_deleted: u64,
}

/// Counters since open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Ticks committed.
    pub ticks: u64,
    /// File and directory syncs.
    pub syncs: u64,
    /// Bytes appended.
    pub bytes_written: u64,
    /// Partition loads.
    pub loads: u64,
    /// Segments deleted by rollover.
    pub rollovers: u64,
    /// Markers written as deltas (by ticks).
    pub deltas: u64,
    /// Full markers rollovers wrote to re-base a cursor's chain.
    pub rebases: u64,
    /// Segment files now.
    pub segments: u64,
    /// Bytes of every segment file now.
    pub segment_bytes: u64,
    /// Bytes of the records still live.
    pub live_bytes: u64,
}

/// The owner's check: [`Error::Fenced`] once another owner has claimed the store.
#[derive(Clone)]
pub struct OwnerCheck(pub Arc<dyn Fn() -> Result<()> + Send + Sync>);

/// Where the store lists the segments that count (its catalog, see
/// [`crate::format::store::Catalog::segments`]): `created` runs once a new segment's file and
/// header exist and before anything is written after the header, and makes the segment's name
/// durable (the catalog's own directory sync) or fails; `deleted` runs before a rolled-over
/// segment's file is removed. A failure of either latches the journal, except a failed `created`
/// that `unlisted` confirms never reached the list (a full disk refused the catalog's new
/// version): that segment is removed again, as one whose header failed, and the next tick
/// starts a segment anew.
#[derive(Clone)]
pub struct SegmentHooks {
    /// Lists a new segment.
    pub created: Arc<dyn Fn(u64) -> Result<()> + Send + Sync>,
    /// After a failed `created`: whether the list is known not to name the segment (the
    /// catalog still holds the version this owner wrote last). `false` when unsure.
    pub unlisted: Arc<dyn Fn(u64) -> Result<bool> + Send + Sync>,
    /// Drops a segment from the list.
    pub deleted: Arc<dyn Fn(u64) -> Result<()> + Send + Sync>,
}

impl std::fmt::Debug for SegmentHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SegmentHooks")
    }
}

/// Syncs one `created` hook makes (the catalog's compare-and-set: its record file and the
/// directory), counted in the tick that started the segment.
const CREATED_HOOK_SYNCS: u64 = 2;

/// How many existing names a new segment skips at most (segments a former owner created after
/// this store's claim, which no list names) before the journal gives up.
const SEGMENT_NAME_ATTEMPTS: u64 = 64;

impl std::fmt::Debug for OwnerCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OwnerCheck")
    }
}

/// A segment file, its length and its format version.
#[derive(Debug, Clone)]
struct Segment {
    file: Arc<dyn StorageFile>,
    len: u64,
    /// A segment of an earlier version is never appended to: it has no slots.
    version: u16,
    /// What each slot copy claims now (version 3): lengths a finished `fdatasync` covered.
    claims: [u64; SLOT_COPIES],
    /// No slot was written since the segment's last `fdatasync`.
    claims_durable: bool,
}

/// The appending side, behind one lock: appends are short writes to the page cache.
#[derive(Debug, Default)]
struct Writer {
    /// Every segment, by sequence; the last one is appended to unless it is sealed.
    segments: BTreeMap<u64, Segment>,
    /// A segment the store does not own the tail of: never appended to.
    sealed: Option<u64>,
    /// Bytes appended to the newest segment since its last sync.
    unsynced: bool,
    /// A segment was created since the last directory sync (by a tick or an eviction).
    dir_unsynced: bool,
    /// Why the journal refuses every later write: a sync failed, or the owner's check said
    /// another owner claimed the store. Never cleared until the store is reopened.
    latched: Option<Latch>,
}

/// Why a journal refuses every later write (see [`Writer::latched`]).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Latch {
    /// A sync (or a write the journal cannot undo) failed: [`Error::PreviousIo`].
    Io,
    /// Another owner claimed the store: [`Error::Fenced`] on every later call, so a former
    /// owner is told it lost the store every time, not once.
    Fenced(String),
}

impl Writer {
    /// The error every write answers once the journal latched; `None` while it has not.
    fn refusal(&self) -> Option<Error> {
        self.latched.as_ref().map(|l| match l {
            Latch::Io => Error::PreviousIo,
            Latch::Fenced(what) => Error::Fenced { what: what.clone() },
        })
    }

    /// `Err` with the latch's error once the journal latched.
    fn check_latch(&self) -> Result<()> {
        self.refusal().map_or(Ok(()), Err)
    }

    /// Latches after `e`: a fence is remembered as a fence, anything else as a failed I/O.
    /// A fence is never downgraded to an I/O failure by a later error.
    fn latch(&mut self, e: &Error) {
        match e {
            Error::Fenced { what } => self.latched = Some(Latch::Fenced(what.clone())),
            _ => {
                self.latched.get_or_insert(Latch::Io);
            }
        }
    }
}

/// The store's cursor journal.
#[derive(Debug)]
pub struct Journal {
    storage: Arc<dyn Storage>,
    config: JournalConfig,
    /// Serializes ticks and rollovers (appends of evictions do not take it).
    tick: Mutex<()>,
    writer: Mutex<Writer>,
    index: Mutex<Index>,
    /// Files by segment, for reads without the writer's lock.
    files: RwLock<BTreeMap<u64, Arc<dyn StorageFile>>>,
    counters: Counters,
    /// Run after a tick's syncs and before a rollover deletes a segment.
    owner: RwLock<Option<OwnerCheck>>,
    /// Where new and deleted segments are listed.
    hooks: RwLock<Option<SegmentHooks>>,
    /// Cursors staged into a tick that failed (or was dropped) before it committed their
    /// marker: their next flush writes a marker whatever their dirty state says, so a state a
    /// cursor took for written at stage time is never left without its marker. Changed under
    /// the tick lock only.
    unsettled: Mutex<HashSet<CursorId>>,
}

#[derive(Debug, Default)]
struct Counters {
    /// The write order of partition copies ([`PartLoc::seq`]); taken under the writer's lock.
    seq: AtomicU64,
    ticks: AtomicU64,
    syncs: AtomicU64,
    bytes: AtomicU64,
    loads: AtomicU64,
    rollovers: AtomicU64,
    deltas: AtomicU64,
    rebases: AtomicU64,
}

/// The file name of segment `seq`.
#[must_use]
pub fn segment_name(seq: u64) -> String {
    format!("journal-{seq:016}.seg")
}

/// The sequence number of a segment file name.
#[must_use]
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("journal-")?.strip_suffix(".seg")?;
    (digits.len() == 16 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// What a read-only check of a journal found ([`check`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JournalCheck {
    /// Segment files.
    pub segments: u64,
    /// Records that verify.
    pub records: u64,
    /// Cursors with a committed marker.
    pub cursors: u64,
    /// Those cursors, sorted: a store's open recovers each from the journal alone (its cursor
    /// record is not read).
    pub committed: Vec<index::CursorId>,
    /// The name tag each of those cursors' chain binds (0: none) and where its newest record
    /// starts: the store's open hands a chain only to the cursor of that name.
    pub names: BTreeMap<index::CursorId, (u32, JournalLoc)>,
    /// Each of those cursors' committed state: mark-delete, the newest record of its chain,
    /// and where each of its partitions and batch records is.
    pub states: BTreeMap<index::CursorId, index::Committed>,
    /// Batch records (the partial entries of one partition) the committed cursors' states
    /// reference.
    pub batch_partitions: u64,
    /// Partial entries (entries with some, not all, messages acknowledged) in those records.
    pub partial_entries: u64,
    /// Where the newest segment's torn tail starts and how many bytes it holds (the next open
    /// cuts it off): not damage.
    pub torn_tail: Option<(u64, u64, u64)>,
    /// Segment files the store's list does not name (a former owner's after the claim, or a
    /// creation cut short): never read; the next open removes them. Not damage.
    pub strays: Vec<u64>,
}

/// Checks the journal in `storage` without writing anything: every segment header and record,
/// as [`Journal::open`] does.
///
/// # Errors
/// [`Error::Corrupted`] at the segment and offset of the first damage; [`Error::Io`].
pub fn check(storage: &dyn Storage, seal: Seal) -> Result<JournalCheck> {
    check_sealed(storage, &[seal])
}

/// [`check`] with every seal a store's catalog holds (see [`Journal::open_sealed`]).
///
/// # Errors
/// As [`check`].
pub fn check_sealed(storage: &dyn Storage, seals: &[Seal]) -> Result<JournalCheck> {
    check_listed(storage, seals, None)
}

/// [`check_sealed`] of the segments `listed` names only (`None`: every segment file), as
/// [`Journal::open_listed`] reads them.
///
/// # Errors
/// As [`check`].
pub fn check_listed(
    storage: &dyn Storage,
    seals: &[Seal],
    listed: Option<Listed<'_>>,
) -> Result<JournalCheck> {
    let (scan, writer, report) = scan_segments(storage, seals, listed, false)?;
    Ok(JournalCheck {
        segments: writer.segments.len() as u64,
        records: report.records,
        cursors: scan.index.cursors().len() as u64,
        committed: scan.index.cursors(),
        names: scan
            .index
            .cursors()
            .into_iter()
            .filter_map(|c| {
                let committed = scan.index.committed(c)?;
                Some((c, (committed.name, committed.marker)))
            })
            .collect(),
        states: scan
            .index
            .cursors()
            .into_iter()
            .filter_map(|c| Some((c, scan.index.committed(c)?.clone())))
            .collect(),
        batch_partitions: committed_batch(&scan.index).map(|_| 1).sum(),
        partial_entries: committed_batch(&scan.index).map(|p| p.cardinality).sum(),
        torn_tail: report.torn_tail,
        strays: report.strays,
    })
}

/// Every batch record the committed cursors of `index` reference.
fn committed_batch(index: &Index) -> impl Iterator<Item = &PartLoc> {
    index
        .cursors()
        .into_iter()
        .filter_map(|c| index.committed(c))
        .flat_map(|c| c.batch.values())
}

#[derive(Debug, Default)]
struct ScanReport {
    records: u64,
    torn_tail: Option<(u64, u64, u64)>,
    strays: Vec<u64>,
    /// The first marker or delta of the newest segment that did not commit (past its synced
    /// length): an open's claim stops before it, so the next open walks back the same way.
    walked_back: Option<u64>,
}

/// Reads every segment `listed` names (every segment file with `None`) in order into an
/// index, in bounded memory: one read-ahead window (a record is at most [`MAX_BODY_LEN`]
/// bytes), and a zero-filled run is skipped as the ledger scan skips one (holes unread, other
/// zeros tested a window at a time). With `repair`, cuts the newest segment's torn tail off
/// (and syncs it) and removes the segment files the list does not name; without, only reports
/// them.
///
/// What counts as damage, never cut: a listed segment that is missing; a header (or
/// predecessor) that does not verify in a listed segment, or both its slot copies; a segment
/// shorter than its slots' synced length or its seal; a predecessor other than the segment
/// scanned before, or at another length than its records end at; a record that does not verify
/// below the synced length or the seal, or anywhere in a segment other than the newest; a
/// marker or delta that does not verify below the synced length; a cursor whose last marker or
/// delta builds on a segment older than the first scanned. Strays are removed only after all
/// of that passed.
fn scan_segments(
    storage: &dyn Storage,
    seals: &[Seal],
    listed: Option<Listed<'_>>,
    repair: bool,
) -> Result<(Scan, Writer, ScanReport)> {
    let sealed = |seq: u64| seals.iter().find(|s| s.segment == seq && seq != 0);
    let mut report = ScanReport::default();
    let seqs = segments_to_scan(storage, listed, &mut report)?;
    let mut scan = Scan {
        first: seqs.first().copied().unwrap_or(0),
        ..Scan::default()
    };
    let mut writer = Writer::default();
    let last = seqs.last().copied();
    // The segment scanned before this one and the length its records end at.
    let mut before: Option<Predecessor> = None;
    for &seq in &seqs {
        let newest = Some(seq) == last;
        let seal = sealed(seq).map(|s| s.len);
        let file = storage.open(&segment_name(seq))?;
        let file_size = file.size()?;
        if let Some(len) = seal
            && file_size < len
        {
            // The claim that sealed it had verified and synced every byte below the seal.
            return Err(corrupt(seq, file_size, CorruptionKind::Truncated));
        }
        let limit = seal.map_or(file_size, |len| len.min(file_size));
        let mut win = Window::new(file.as_ref())?;
        let head_len = (SLOTS_AT as u64).min(limit);
        let head = window_get(&mut win, 0, head_len, limit)?.unwrap_or_default();
        let (version, previous) = match segment_version(head, seq) {
            Ok(Ok(named)) => named,
            Ok(Err(_))
                if newest
                    && seal.is_none()
                    && listed.is_none()
                    && win.first_nonzero_from(SEGMENT_HEADER_V3_LEN as u64)? >= file_size =>
            {
                // Without a list: a segment whose header never became durable, and that holds
                // nothing after it (a tick syncs the header before it appends anything).
                if repair {
                    storage.remove(&segment_name(seq))?;
                    storage.sync_dir()?;
                } else {
                    report.torn_tail = Some((seq, 0, file_size));
                }
                continue;
            }
            Ok(Err(e)) | Err(e) => return Err(e),
        };
        if version >= SEGMENT_VERSION_V3 {
            check_predecessor(seq, previous, before)?;
        }
        let start = records_start(version) as u64;
        let (claims, synced) = synced_len(&mut win, (seq, version, file_size), listed, newest)?;
        if file_size < synced {
            return Err(corrupt(seq, file_size, CorruptionKind::Truncated));
        }
        // Frames below the synced length or the seal must verify; markers and deltas below the
        // synced length must commit (a seal may lie past a walk-back its claim accepted).
        let frames_known = synced.max(seal.unwrap_or(0)).min(limit);
        let markers_known = synced.min(limit);
        let (at, stop) = scan_records(
            &mut win,
            &mut scan,
            &mut report,
            (seq, version, newest),
            (start, markers_known, limit),
        )?;
        if let Some((offset, kind)) = stop {
            let zero_end = kind == CorruptionKind::InvalidField("zero length");
            let tail_nonzero = win.first_nonzero_from(at)? < limit;
            if at < frames_known || (!newest || seal.is_some()) && (!zero_end || tail_nonzero) {
                // Synced bytes that do not verify: damage, whatever they look like.
                return Err(corrupt(seq, offset, kind));
            }
            if newest && seal.is_none() && at < file_size {
                if repair {
                    file.set_len(at)?;
                    file.sync_data()?;
                } else if tail_nonzero {
                    report.torn_tail = Some((seq, at, file_size - at));
                }
            }
        }
        writer.segments.insert(
            seq,
            Segment {
                file,
                len: at,
                version,
                claims,
                claims_durable: true,
            },
        );
        before = Some(Predecessor {
            segment: seq,
            len: at,
        });
    }
    scan.check_rebased()?;
    let retired = listed.map_or(0, |l| l.retired_through);
    check_strays(storage, &report.strays, retired, repair)?;
    Ok((scan, writer, report))
}

/// What the slot copies of segment `seq` (of `version`, `file_size` bytes) claim, and the
/// synced length that makes: the larger claim, or the length the store's last clean close
/// recorded of it if larger (that close's own slot write was not synced, a power cut after it
/// may leave it unwritten). Versions without slots claim nothing.
fn synced_len(
    win: &mut Window<'_>,
    (seq, version, file_size): (u64, u16, u64),
    listed: Option<Listed<'_>>,
    newest: bool,
) -> Result<([u64; SLOT_COPIES], u64)> {
    let claims = if version >= SEGMENT_VERSION_V3 {
        segment_claims(win, seq, file_size, listed.is_some() || !newest)?
    } else {
        [0; SLOT_COPIES]
    };
    let synced = claims.iter().copied().max().unwrap_or(0);
    Ok((claims, synced.max(closed_len(listed, seq))))
}

/// The length of segment `seq` the store's last clean close recorded (0: none).
fn closed_len(listed: Option<Listed<'_>>, seq: u64) -> u64 {
    listed
        .and_then(|l| l.closed)
        .filter(|c| c.segment == seq)
        .map_or(0, |c| c.len)
}

/// What each slot copy of version 3 segment `seq` claims. With `synced_header` (the segment is
/// listed, or not the newest), both copies failing is corruption: a header and its slots are
/// synced before the segment is listed (and before a later segment starts), and a slot write
/// replaces one copy at a time, so a power cut never spoils both.
fn segment_claims(
    win: &mut Window<'_>,
    seq: u64,
    file_size: u64,
    synced_header: bool,
) -> Result<[u64; SLOT_COPIES]> {
    let slots = window_get(win, SLOTS_AT as u64, SLOTS_LEN as u64, file_size)?
        .ok_or_else(|| corrupt(seq, file_size, CorruptionKind::Truncated))?;
    let claims = slot_claims(seq, slots);
    if synced_header && claims.iter().all(|c| *c == 0) {
        return Err(corrupt(
            seq,
            SLOTS_AT as u64,
            CorruptionKind::ChecksumMismatch,
        ));
    }
    Ok(claims)
}

/// Checks that no segment file the list does not name was ever listed, unless a rollover
/// retired it: a segment is listed before anything is written after its header, and a rollover
/// unlists only the oldest, recording it as `retired` (the highest segment retired) in the
/// same catalog write. So an unlisted segment above `retired` is a former owner's whose
/// listing was refused, or a creation cut short before its listing, and holds nothing past its
/// header; one that holds something there was dropped from the list, with ticks it promised
/// (and state no listed segment may hold).
/// With `repair`, then removes them: only once every listed segment verified, so a segment
/// that should have been listed is evidence, never removed.
fn check_strays(storage: &dyn Storage, strays: &[u64], retired: u64, repair: bool) -> Result<()> {
    for &stray in strays.iter().filter(|s| **s > retired) {
        // A stray listed a moment ago may be gone: a former owner's rollover removes the
        // segment it unlisted before this owner's claim. Gone is what a repair makes of it.
        let file = match storage.open(&segment_name(stray)) {
            Ok(file) => file,
            Err(e) if is_not_found(&e) => continue,
            Err(e) => return Err(e),
        };
        let mut win = Window::new(file.as_ref())?;
        let head_len = (SEGMENT_HEADER_LEN as u64).min(file.size()?);
        let head = win.get(0, head_len)?.unwrap_or_default();
        let start = head
            .get(..SEGMENT_HEADER_LEN)
            .and_then(|h| decode_segment_header_version(h).ok())
            .map_or(SEGMENT_HEADER_V3_LEN, |(_, version)| records_start(version));
        let holds = win.first_nonzero_from(start as u64)?;
        if holds < file.size()? {
            return Err(corrupt(
                stray,
                holds,
                CorruptionKind::InvalidField("records in a segment the list does not name"),
            ));
        }
    }
    if repair {
        for &stray in strays {
            match storage.remove(&segment_name(stray)) {
                Err(e) if !is_not_found(&e) => return Err(e),
                _ => {}
            }
        }
    }
    Ok(())
}

/// Checks that version 3 segment `seq`, which names `previous` as the segment it follows,
/// follows the segment scanned before it (`before`, with the length its records end at): the
/// predecessor's length is final when a segment starts, so a predecessor of another length is
/// an older or altered copy, and a predecessor other than the segment before it is a segment
/// missing from the list (legitimate gaps in the numbers are skipped names, which no header
/// names). The oldest segment scanned names one a rollover removed, or none.
fn check_predecessor(
    seq: u64,
    previous: Option<Predecessor>,
    before: Option<Predecessor>,
) -> Result<()> {
    let Some(before) = before else {
        return Ok(());
    };
    match previous {
        Some(p) if p.segment == before.segment => match before.len.cmp(&p.len) {
            std::cmp::Ordering::Less => {
                Err(corrupt(p.segment, before.len, CorruptionKind::Truncated))
            }
            std::cmp::Ordering::Greater => Err(corrupt(
                p.segment,
                p.len,
                CorruptionKind::InvalidField("segment length"),
            )),
            std::cmp::Ordering::Equal => Ok(()),
        },
        _ => Err(corrupt(
            seq,
            PREDECESSOR_AT as u64,
            CorruptionKind::InvalidField("predecessor"),
        )),
    }
}

/// The segments a scan reads, ascending: those `listed` names, every one of which must exist
/// (`None`: every segment file). Files the list does not name are reported as strays.
fn segments_to_scan(
    storage: &dyn Storage,
    listed: Option<Listed<'_>>,
    report: &mut ScanReport,
) -> Result<Vec<u64>> {
    let mut found: Vec<u64> = storage
        .list_prefix("journal-")?
        .iter()
        .filter_map(|n| parse_segment_name(n))
        .collect();
    found.sort_unstable();
    Ok(
        if let Some(Listed {
            segments: listed, ..
        }) = listed
        {
            // A segment is listed only after its header is durable, and unlisted before its file
            // is removed: a listed segment that is gone was removed by something else, and the
            // state it held cannot be told from an older one.
            if let Some(&gone) = listed.iter().find(|s| found.binary_search(s).is_err()) {
                return Err(corrupt(gone, 0, CorruptionKind::Missing));
            }
            let strays: Vec<u64> = found
                .iter()
                .copied()
                .filter(|s| !listed.contains(s))
                .collect();
            report.strays = strays;
            let mut seqs = listed.to_vec();
            seqs.sort_unstable();
            seqs.dedup();
            seqs
        } else {
            found
        },
    )
}

/// Reads the records of segment `seq` from `start` up to `limit` into `scan`; returns where
/// they end and, if before `limit`, why (the offset and kind of the first bytes that are not a
/// record that verifies). A marker or delta below `markers_known` that does not commit is
/// corruption.
fn scan_records(
    win: &mut Window<'_>,
    scan: &mut Scan,
    report: &mut ScanReport,
    (seq, version, newest): (u64, u16, bool),
    (start, markers_known, limit): (u64, u64, u64),
) -> Result<(u64, Option<(u64, CorruptionKind)>)> {
    let mut at = start;
    let stop = loop {
        if at >= limit {
            break None;
        }
        let Some(head) = window_get(win, at, 4, limit)? else {
            break Some((at, CorruptionKind::Truncated));
        };
        let n = peek_body_len(head).unwrap_or(0);
        if n == 0 {
            break Some((at, CorruptionKind::InvalidField("zero length")));
        }
        if !(BODY_FIXED_LEN..=MAX_BODY_LEN).contains(&n) {
            break Some((at, CorruptionKind::BadLength));
        }
        let Some(frame) = window_get(win, at, (RECORD_HEADER_LEN + n) as u64, limit)? else {
            break Some((at, CorruptionKind::Truncated));
        };
        match decode_record(frame) {
            Ok(Some((rec, len))) => {
                let loc = JournalLoc {
                    segment: seq,
                    offset: at,
                };
                let walked_back =
                    scan.record(loc, len as u64, &rec, version, at < markers_known)?;
                if walked_back && newest && report.walked_back.is_none() {
                    report.walked_back = Some(at);
                }
                report.records += 1;
                at += len as u64;
            }
            Ok(None) => break Some((at, CorruptionKind::InvalidField("zero length"))),
            Err(c) => break Some((at + c.offset, c.kind)),
        }
    };
    Ok((at, stop))
}

/// Writes `claim` (a length an `fdatasync` of segment `seq` covered) into its slot copy that
/// claims less, with no sync of its own, unless a copy claims as much already or the segment
/// has no slots. Returns whether it wrote. A failed write latches the journal.
fn write_claim(w: &mut Writer, seq: u64, claim: u64) -> Result<bool> {
    let Some(seg) = w.segments.get(&seq) else {
        return Ok(false);
    };
    if seg.version < SEGMENT_VERSION_V3 || seg.claims.iter().any(|c| *c >= claim) {
        return Ok(false);
    }
    let copy = usize::from(seg.claims[1] < seg.claims[0]);
    let at = (SLOTS_AT + copy * SLOT_LEN) as u64;
    let written = seg.file.write_all_at(&encode_slot(seq, copy, claim), at);
    if let Some(seg) = w.segments.get_mut(&seq) {
        if written.is_ok() {
            seg.claims[copy] = claim;
        }
        seg.claims_durable = false;
    }
    Journal::latch_on(w, written)?;
    Ok(true)
}

/// Bytes `[off, off + len)` of the window, `None` when they reach past `limit`.
fn window_get<'w>(
    win: &'w mut Window<'_>,
    off: u64,
    len: u64,
    limit: u64,
) -> Result<Option<&'w [u8]>> {
    if off.checked_add(len).is_none_or(|end| end > limit) {
        return Ok(None);
    }
    win.get(off, len)
}

/// Each slot copy's claim (0 for one that does not verify).
fn slot_claims(seq: u64, slots: &[u8]) -> [u64; SLOT_COPIES] {
    let mut claims = [0; SLOT_COPIES];
    for (copy, claim) in claims.iter_mut().enumerate() {
        let at = copy * SLOT_LEN;
        *claim = slots
            .get(at..at + SLOT_LEN)
            .map_or(0, |slot| decode_slot(seq, copy, slot));
    }
    claims
}

/// The version of segment `seq` from its header (`bytes`: up to [`SLOTS_AT`] bytes) and, for
/// version 3, the segment it follows: `Ok(Err(_))` for a header that does not verify (a torn
/// one, in the newest segment), `Err(_)` for one that verifies but names another segment or a
/// version this build does not read (never a torn header).
fn segment_version(bytes: &[u8], seq: u64) -> Result<Result<(u16, Option<Predecessor>)>> {
    match bytes
        .get(..SEGMENT_HEADER_LEN)
        .map(decode_segment_header_version)
    {
        Some(Ok((s, version))) if s == seq && version < SEGMENT_VERSION_V3 => {
            Ok(Ok((version, None)))
        }
        Some(Ok((s, version))) if s == seq => {
            let named = bytes.get(PREDECESSOR_AT..SLOTS_AT).unwrap_or_default();
            Ok(decode_predecessor(seq, named)
                .map(|p| (version, p))
                .map_err(|c| corrupt(seq, c.offset, c.kind)))
        }
        Some(Ok(_)) => Err(corrupt(seq, 12, CorruptionKind::InvalidField("segment"))),
        Some(Err(c)) if matches!(c.kind, CorruptionKind::UnsupportedVersion(_)) => {
            Err(corrupt(seq, c.offset, c.kind))
        }
        Some(Err(c)) => Ok(Err(corrupt(seq, c.offset, c.kind))),
        None => Ok(Err(corrupt(seq, 0, CorruptionKind::Truncated))),
    }
}

fn is_not_found(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}

fn corrupt(segment: u64, offset: u64, kind: CorruptionKind) -> Error {
    Error::corrupted_at(CorruptionPlace::Journal { segment, offset }, kind)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a scan of the segments found, before it becomes the index.
#[derive(Default)]
struct Scan {
    index: Index,
    /// Every partition record seen, by location.
    partitions: HashMap<JournalLoc, (CursorId, PartitionKey, PartLoc)>,
    /// Every batch record seen (version 5), by location.
    batches: HashMap<JournalLoc, (CursorId, PartitionKey, PartLoc)>,
    forgotten: std::collections::HashSet<CursorId>,
    /// The oldest segment scanned: a record that references an older one was superseded
    /// before a rollover removed what it references.
    first: u64,
    /// Markers and deltas superseded that way, and deltas built on them.
    stale: std::collections::HashSet<JournalLoc>,
    /// Cursors whose newest marker or delta so far was superseded that way, with its location:
    /// a rollover re-bases a cursor with a full marker before it removes the segment its chain
    /// reaches into, so such a record must be followed by one that commits.
    unrebased: HashMap<CursorId, JournalLoc>,
}

impl Scan {
    /// Applies one verified record. Returns whether a marker or delta did not commit (the
    /// cursor keeps its previous state: the walk back). With `promised` (the record lies below
    /// a synced length), a marker or delta that does not commit is corruption, unless it
    /// references a segment a rollover removed (it was superseded before that).
    fn record(
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
                    return refused("marker");
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
                    return refused("delta");
                } else {
                    return Ok(true);
                }
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

    /// Notes a partition or batch record, to verify the rows of later markers against. A
    /// payload that does not decode is never referenced by a marker that counts; only a segment
    /// of version 5 holds batch records (no earlier build wrote one, and no earlier marker
    /// references one).
    fn partition_record(
        &mut self,
        cursor: CursorId,
        (loc, frame_len, version): (JournalLoc, u64, u16),
        rec: &Record<'_>,
    ) {
        let crc = payload_crc(rec.payload);
        let at = |ledger_id, chunk, cardinality| {
            let part = PartLoc {
                seq: 0,
                loc,
                frame_len,
                crc,
                cardinality,
            };
            (cursor, PartitionKey { ledger_id, chunk }, part)
        };
        if rec.kind == RecordKind::Batch {
            if version >= SEGMENT_VERSION
                && let Ok((ledger_id, chunk, entries)) = peek_batch_entry(rec.payload)
            {
                self.batches
                    .insert(loc, at(ledger_id, chunk, u64::from(entries)));
            }
        } else if let Ok(p) = decode_partition_entry(rec.payload) {
            self.partitions
                .insert(loc, at(p.ledger_id, p.chunk, p.cardinality));
        }
    }

    /// After the last segment: a cursor whose newest marker or delta references a segment
    /// older than the scan's first was never re-based, so that segment was removed (or
    /// dropped from the list) by something other than a rollover, and the cursor's state is
    /// lost, not older.
    fn check_rebased(&self) -> Result<()> {
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
            .filter(|_| version >= SEGMENT_VERSION);
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
        let (c, key, part) = self.partitions.get(&at)?;
        let ok = *c == cursor
            && key.ledger_id == row.ledger_id
            && key.chunk == row.chunk
            && part.crc == row.crc
            && part.cardinality == row.cardinality
            && at < loc;
        ok.then_some((*key, *part))
    }

    /// The batch row a marker or delta holds, if it names a batch record of `cursor` seen
    /// before `loc` with the key, CRC and partial-entry count the row holds.
    fn verified_batch_row(
        &self,
        cursor: CursorId,
        loc: JournalLoc,
        row: &BatchRow,
    ) -> Option<(PartitionKey, PartLoc)> {
        let at = JournalLoc::unpack(row.entry_id);
        let (c, key, part) = self.batches.get(&at)?;
        let ok = *c == cursor
            && key.ledger_id == row.ledger_id
            && key.chunk == row.chunk
            && part.crc == row.crc
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
        if !marker.batch_pages.is_empty() || (version < SEGMENT_VERSION && !marker.batch.is_empty())
        {
            return None;
        }
        marker
            .batch
            .iter()
            .map(|row| self.verified_batch_row(cursor, loc, &row))
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
        let mut live = BTreeMap::new();
        for row in rows.iter() {
            let (key, part) = self.verified_row(cursor, loc, &row)?;
            live.insert(key, part);
        }
        let batch: BTreeMap<_, _> = self
            .verified_batch(cursor, (loc, version), &marker)?
            .into_iter()
            .collect();
        Some(Committed {
            marker: loc,
            marker_len: frame_len,
            crc: payload_crc(record_payload),
            name: 0,
            floor: Committed::full_floor(loc, &live, &batch),
            state: marker.state,
            rows: live,
            batch,
        })
    }
}

/// The keys a delta removes, if every one is live in `base`.
fn removed_keys(
    keys: impl Iterator<Item = (u64, u64)>,
    base: &BTreeMap<PartitionKey, PartLoc>,
) -> Option<Vec<PartitionKey>> {
    keys.map(|(ledger_id, chunk)| {
        let key = PartitionKey { ledger_id, chunk };
        base.contains_key(&key).then_some(key)
    })
    .collect()
}

/// How many keys `base` holds after a delta removes `removed` and adds `added`.
fn live_after(
    base: &BTreeMap<PartitionKey, PartLoc>,
    removed: &[PartitionKey],
    added: &[(PartitionKey, PartLoc)],
) -> usize {
    base.len() - removed.len() + added.iter().filter(|(k, _)| !base.contains_key(k)).count()
}

impl Journal {
    /// Opens the journal kept in `storage` (the store's directory), ignoring bytes past `seal`
    /// (see [`Seal`]). Reads every segment; decodes markers, not partitions. Writes nothing
    /// except cutting a torn tail off the newest segment past its synced length (one truncate
    /// and one sync), a slot of the newest segment claiming what it verified, and, without a
    /// list, removing a newest segment whose header never became durable and that holds nothing.
    ///
    /// # Errors
    /// [`Error::Corrupted`] at the journal segment and offset when a listed segment is missing,
    /// a header does not verify, a segment is shorter than its synced length or seal, a record
    /// below them (or in a segment other than the newest) does not verify, or a marker or delta
    /// below the synced length does not commit; [`Error::Io`].
    pub fn open(storage: Arc<dyn Storage>, config: JournalConfig, seal: Seal) -> Result<Self> {
        Self::open_sealed(storage, config, &[seal])
    }

    /// [`Journal::open`] with several seals: a store's catalog keeps one for every segment a
    /// claim sealed that still exists, since a segment sealed by one claim is no longer the
    /// newest at the next. Seals of segment 0 are ignored.
    ///
    /// # Errors
    /// As [`Journal::open`].
    pub fn open_sealed(
        storage: Arc<dyn Storage>,
        config: JournalConfig,
        seals: &[Seal],
    ) -> Result<Self> {
        Self::open_listed(storage, config, seals, None)
    }

    /// [`Journal::open_sealed`] reading only the segments `listed` names (`None`: every
    /// segment file) and removing the segment files it does not name: a store's catalog lists
    /// the segments that count ([`SegmentHooks`]), so a segment a former owner created after
    /// the claim is never read.
    ///
    /// # Errors
    /// As [`Journal::open`].
    pub fn open_listed(
        storage: Arc<dyn Storage>,
        config: JournalConfig,
        seals: &[Seal],
        listed: Option<Listed<'_>>,
    ) -> Result<Self> {
        if config.segment_bytes == 0 || config.segment_bytes > u64::from(u32::MAX) {
            return Err(Error::InvalidArgument {
                reason: "journal segment_bytes must be 1 byte to 4 GiB".into(),
            });
        }
        let (scan, mut writer, report) = scan_segments(storage.as_ref(), seals, listed, true)?;
        // A former owner that died before its tick's sync left the newest segment's bytes, and
        // perhaps its name, in the page cache only. This owner recovers cursors from them and
        // its markers reference their partitions, so they become durable before anything uses
        // them: otherwise a power cut after this owner's first tick (which syncs the directory)
        // leaves that segment empty under a durable name, or drops partitions its synced markers
        // reference. Only the newest segment can be unsynced: a tick syncs the newest before
        // starting the next.
        let newest = writer.segments.keys().next_back().copied();
        if let Some(seq) = newest {
            if let Some(seg) = writer.segments.get(&seq) {
                seg.file.sync_data()?;
            }
            storage.sync_dir()?;
        }
        let sealed_newest = newest.filter(|newest| seals.iter().any(|s| s.segment == *newest));
        if let Some(seq) = newest.filter(|_| sealed_newest.is_none()) {
            // Everything it holds is durable now: its slots claim it, except from a marker or
            // delta that did not commit on (the next open walks back the same way, and nothing
            // is appended after it).
            let end = writer.segments.get(&seq).map_or(0, |s| s.len);
            let claim = report.walked_back.map_or(end, |at| at.min(end));
            write_claim(&mut writer, seq, claim)?;
            if report.walked_back.is_some() {
                writer.sealed = Some(seq);
            }
        }
        if sealed_newest.is_some() {
            writer.sealed = sealed_newest;
        }
        let files = writer
            .segments
            .iter()
            .map(|(s, seg)| (*s, seg.file.clone()))
            .collect();
        Ok(Self {
            storage,
            config,
            tick: Mutex::new(()),
            writer: Mutex::new(writer),
            index: Mutex::new(scan.index),
            files: RwLock::new(files),
            counters: Counters::default(),
            owner: RwLock::new(None),
            hooks: RwLock::new(None),
            unsettled: Mutex::default(),
        })
    }

    /// The segments that count now, ascending: what the store lists after its claim.
    #[must_use]
    pub fn segments(&self) -> Vec<u64> {
        lock(&self.writer).segments.keys().copied().collect()
    }

    /// Every later segment creation and rollover deletion runs `hooks` (see [`SegmentHooks`]).
    pub fn set_segment_hooks(&self, hooks: SegmentHooks) {
        *self
            .hooks
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(hooks);
    }

    fn hooks(&self) -> Option<SegmentHooks> {
        self.hooks
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The newest segment and its length: what a new owner seals (see [`Seal`]).
    #[must_use]
    pub fn tail(&self) -> Seal {
        let w = lock(&self.writer);
        w.segments
            .iter()
            .next_back()
            .map_or(Seal::default(), |(s, seg)| Seal {
                segment: *s,
                len: seg.len,
            })
    }

    /// The newest segment and the length of it an `fdatasync` covered, as its slots claim
    /// (`None` without a segment, or for a newest segment of a version without slots): what a
    /// clean close records in the catalog.
    #[must_use]
    pub fn synced_tail(&self) -> Option<Seal> {
        let w = lock(&self.writer);
        let (segment, seg) = w.segments.iter().next_back()?;
        (seg.version >= SEGMENT_VERSION_V3).then(|| Seal {
            segment: *segment,
            len: seg.claims.iter().copied().max().unwrap_or(0),
        })
    }

    /// Seals the newest segment at its verified end and returns the seal ([`Seal::default`]
    /// when there is no segment): this journal never appends to it again, and the owner records
    /// the seal so every later open ignores what a former owner appends past it.
    pub fn seal_tail(&self) -> Seal {
        let mut w = lock(&self.writer);
        let tail = w
            .segments
            .iter()
            .next_back()
            .map_or(Seal::default(), |(s, seg)| Seal {
                segment: *s,
                len: seg.len,
            });
        if tail.segment != 0 {
            w.sealed = Some(tail.segment);
        }
        tail
    }

    /// Every later tick and rollover runs `check` (see the module docs, "Ownership"); an
    /// error from it latches the journal.
    pub fn set_owner_check(&self, check: OwnerCheck) {
        *self
            .owner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(check);
    }

    /// Runs the owner's check without latching the journal (`Ok` when none is set): the
    /// store-level ownership proof a store's topics run after their own syncs and around their
    /// record writes.
    pub(crate) fn check_store_owner(&self) -> Result<()> {
        let check = self
            .owner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        check.map_or(Ok(()), |check| (check.0)())
    }

    /// What a failed write, sync or rollover tells its caller: an I/O error while another
    /// owner has claimed the store is the fence (on shared storage a former owner's write may
    /// fail with "not found" because the new owner removed the object), latched as one; any
    /// other error unchanged.
    fn failure(&self, e: Error) -> Error {
        // A storage that did not answer in time (a RADOS operation timeout) would keep the
        // check waiting as long again: the failure is reported as it is, so a flush fails
        // within one operation timeout.
        let unanswered = matches!(&e, Error::Io { source, .. }
            if source.kind() == std::io::ErrorKind::TimedOut);
        if !matches!(e, Error::Io { .. }) || unanswered {
            return e;
        }
        match self.check_store_owner() {
            Err(fenced @ Error::Fenced { .. }) => {
                lock(&self.writer).latch(&fenced);
                fenced
            }
            _ => e,
        }
    }

    /// Runs the owner's check; an error latches the journal.
    fn check_owner(&self) -> Result<()> {
        let checked = self.check_store_owner();
        if let Err(e) = &checked {
            lock(&self.writer).latch(e);
        }
        checked
    }

    /// Every cursor with a committed marker.
    #[must_use]
    pub fn cursors(&self) -> Vec<CursorId> {
        lock(&self.index).cursors()
    }

    /// The cursor's committed state and its live partitions with their cardinalities.
    #[must_use]
    pub fn committed(
        &self,
        cursor: CursorId,
    ) -> Option<(PersistedState, Vec<(PartitionKey, u64)>)> {
        let index = lock(&self.index);
        let c = index.committed(cursor)?;
        Some((
            c.state.clone(),
            c.rows.iter().map(|(k, r)| (*k, r.cardinality)).collect(),
        ))
    }

    /// Where the batch record of every partition with partial entries of the cursor's committed
    /// state is: the batch table a cursor recovers its partial entries from, cold.
    #[must_use]
    pub fn committed_batch(&self, cursor: CursorId) -> Vec<(PartitionKey, PartLoc)> {
        lock(&self.index)
            .committed(cursor)
            .map(|c| c.batch.iter().map(|(k, p)| (*k, *p)).collect())
            .unwrap_or_default()
    }

    /// The name tag the cursor's committed chain binds (0: none, see
    /// [`index::Committed::name`]) and where the chain's newest record starts.
    #[must_use]
    pub fn committed_name(&self, cursor: CursorId) -> Option<(u32, JournalLoc)> {
        let index = lock(&self.index);
        index.committed(cursor).map(|c| (c.name, c.marker))
    }

    /// Counters since open and the journal's size now.
    #[must_use]
    pub fn stats(&self) -> JournalStats {
        let (segments, segment_bytes) = {
            let w = lock(&self.writer);
            (
                w.segments.len() as u64,
                w.segments.values().map(|s| s.len).sum(),
            )
        };
        JournalStats {
            ticks: self.counters.ticks.load(Ordering::Relaxed),
            syncs: self.counters.syncs.load(Ordering::Relaxed),
            bytes_written: self.counters.bytes.load(Ordering::Relaxed),
            loads: self.counters.loads.load(Ordering::Relaxed),
            rollovers: self.counters.rollovers.load(Ordering::Relaxed),
            deltas: self.counters.deltas.load(Ordering::Relaxed),
            rebases: self.counters.rebases.load(Ordering::Relaxed),
            segments,
            segment_bytes,
            live_bytes: lock(&self.index).live_bytes(),
        }
    }

    /// The newest copy of `key` of `cursor`, read and verified (frame CRC, the CRC, key and
    /// cardinality the index holds, then the partition decoder's checks); `None` when the
    /// journal holds none.
    pub fn load(&self, cursor: CursorId, key: PartitionKey) -> Result<Option<RoaringBitmap>> {
        let Some(part) = lock(&self.index).lookup(cursor, key) else {
            return Ok(None);
        };
        let payload = self.read_payload(part.loc, part.frame_len)?;
        let bad = |kind| Error::corrupted_at(key.place(), kind);
        if payload_crc(&payload) != part.crc {
            return Err(bad(CorruptionKind::ChecksumMismatch));
        }
        let entry = decode_partition_entry(&payload).map_err(|c| bad(c.kind))?;
        let (found, bitmap) = decode_partition(entry.body).map_err(|c| bad(c.kind))?;
        if found != key || bitmap.len() != part.cardinality {
            return Err(bad(CorruptionKind::InvalidField("partition key")));
        }
        self.counters.loads.fetch_add(1, Ordering::Relaxed);
        Ok(Some(bitmap))
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
        let Some(part) = lock(&self.index).lookup_batch(cursor, key) else {
            return Ok(None);
        };
        let payload = self.read_payload(part.loc, part.frame_len)?;
        let bad = |kind| Error::corrupted_at(key.place(), kind);
        if payload_crc(&payload) != part.crc {
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
        lock(&self.index).lookup_batch(cursor, key)
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
        encode_record(&mut buf, &cursor_record(RecordKind::Batch, cursor, payload));
        let stored = {
            let mut w = lock(&self.writer);
            self.append(&mut w, &buf, false).map(|at| {
                let part = PartLoc {
                    seq: self.counters.seq.fetch_add(1, Ordering::Relaxed) + 1,
                    loc: at,
                    frame_len: buf.len() as u64,
                    crc: payload_crc(payload),
                    cardinality: u64::from(entries),
                };
                lock(&self.index).stage_batch(cursor, key, part);
                part
            })
        };
        stored.map_err(|e| self.failure(e))
    }

    /// The cursor no longer uses its pending batch record of `key`.
    pub fn forget_batch(&self, cursor: CursorId, key: PartitionKey) {
        lock(&self.index).forget_batch(cursor, key);
    }

    /// The cardinality of the newest copy of `key` of `cursor` in the journal (pending or
    /// committed), `None` when it holds none: a flush references that copy instead of writing
    /// the partition again when the cursor's ack set says it is current.
    #[must_use]
    pub fn stored_cardinality(&self, cursor: CursorId, key: PartitionKey) -> Option<u64> {
        lock(&self.index).lookup(cursor, key).map(|p| p.cardinality)
    }

    /// Whether `cursor` was staged into a tick that did not commit its marker: its next flush
    /// must stage a marker even when nothing changed since.
    #[must_use]
    pub fn is_unsettled(&self, cursor: CursorId) -> bool {
        lock(&self.unsettled).contains(&cursor)
    }

    /// Whether a sync failed (or the owner's check did): every later tick fails with
    /// [`Error::PreviousIo`] (or [`Error::Fenced`]) until the store is reopened.
    #[must_use]
    pub fn is_latched(&self) -> bool {
        lock(&self.writer).latched.is_some()
    }

    /// The payload of the record at `loc`, after its frame verifies.
    fn read_payload(&self, loc: JournalLoc, frame_len: u64) -> Result<Vec<u8>> {
        let file = self
            .files
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&loc.segment)
            .cloned()
            .ok_or_else(|| corrupt(loc.segment, loc.offset, CorruptionKind::Missing))?;
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
        let payload = partition_payload(key, bitmap);
        let mut buf = Vec::with_capacity(record_len(payload.len()));
        encode_record(&mut buf, &partition_record(cursor, &payload));
        let mut w = lock(&self.writer);
        let base = self.append(&mut w, &buf, false)?;
        lock(&self.index).stage(
            cursor,
            key,
            PartLoc {
                seq: self.counters.seq.fetch_add(1, Ordering::Relaxed) + 1,
                loc: base,
                frame_len: buf.len() as u64,
                crc: payload_crc(&payload),
                cardinality: bitmap.len(),
            },
        );
        Ok(())
    }

    /// The cursor no longer holds `key`.
    pub fn forget_partition(&self, cursor: CursorId, key: PartitionKey) {
        lock(&self.index).forget_partition(cursor, key);
    }

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
            uncommitted: Vec::new(),
            stats: TickStats::default(),
            started: false,
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
        );
        self.append(&mut w, &buf, true)?;
        drop(w);
        self.sync_newest(seq, &mut stats)?;
        if new_segment {
            self.sync_dir(&mut stats)?;
        }
        lock(&self.index).remove(cursor);
        lock(&self.unsettled).remove(&cursor);
        Ok(())
    }

    fn newest(w: &Writer) -> Result<(u64, u64)> {
        w.segments
            .iter()
            .next_back()
            .map(|(s, seg)| (*s, seg.len))
            .ok_or(Error::PreviousIo)
    }

    /// Makes sure the tick appends to a segment this store owns that is below its size limit:
    /// otherwise syncs the newest (its tail may hold evictions) and starts the next. Returns
    /// whether a segment was created since the last directory sync (by this tick or an
    /// eviction): its name needs one before the tick returns.
    fn segment_for_tick(&self, w: &mut Writer, stats: &mut TickStats) -> Result<bool> {
        self.start_segment_if_needed(w, stats)?;
        Ok(w.dir_unsynced)
    }

    fn start_segment_if_needed(&self, w: &mut Writer, stats: &mut TickStats) -> Result<()> {
        w.check_latch()?;
        if self.appendable(w) {
            return Ok(());
        }
        let newest = w.segments.iter().next_back().map(|(s, seg)| (*s, seg.len));
        let next = newest.map_or(1, |(s, _)| s + 1);
        if next > MAX_SEGMENT {
            return Err(Error::LimitExceeded {
                reason: "journal segment numbers are exhausted".into(),
            });
        }
        if let Some((seq, len)) = newest
            && w.sealed != Some(seq)
        {
            // The segment stops being the newest and is never synced again: its tail (which may
            // hold evictions) and a slot claiming all of it become durable now, so every byte of
            // an older segment is below its synced length.
            let seg = w
                .segments
                .get(&seq)
                .map(|s| (s.file.clone(), s.claims_durable));
            if let Some((file, claims_durable)) = seg {
                if w.unsynced || !claims_durable {
                    Self::latch_on(w, file.sync_data())?;
                    stats.syncs += 1;
                    self.counters.syncs.fetch_add(1, Ordering::Relaxed);
                }
                if write_claim(w, seq, len)? {
                    Self::latch_on(w, file.sync_data())?;
                    stats.syncs += 1;
                    self.counters.syncs.fetch_add(1, Ordering::Relaxed);
                }
                if let Some(s) = w.segments.get_mut(&seq) {
                    s.claims_durable = true;
                }
            }
        }
        let mut next = next;
        let file = loop {
            match self.storage.create(&segment_name(next)) {
                Ok(file) => break file,
                // A segment no list names: a former owner's, created after this store's claim
                // (never read; the next claim removes it). Take the next name.
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::AlreadyExists
                        && next < MAX_SEGMENT
                        && next - newest.map_or(0, |(s, _)| s) < SEGMENT_NAME_ATTEMPTS =>
                {
                    next += 1;
                }
                // Nothing was created (a full disk, for instance): the next tick tries again.
                Err(e) => {
                    if matches!(e, Error::Fenced { .. }) {
                        w.latch(&e);
                    }
                    return Err(e);
                }
            }
        };
        // The segment this one follows, at the length it ends with: it was synced above (or
        // sealed, never appended to again), so its records end there on every later scan.
        let header = encode_segment_header(
            next,
            newest.map(|(segment, len)| Predecessor { segment, len }),
        );
        // The header and its slots are durable before the segment is listed: a listed segment
        // whose header does not verify is damage, never a creation cut short.
        if let Err(e) = file
            .write_all_at(&header, 0)
            .and_then(|()| file.sync_data())
        {
            // Not listed, never referenced: removed again, and the next tick tries anew with a
            // new file (a failed sync of a file that is dropped is never retried).
            if matches!(e, Error::Fenced { .. }) {
                w.latch(&e);
            } else if let Err(removed) = self.storage.remove(&segment_name(next)) {
                w.latch(&removed);
            }
            return Err(e);
        }
        stats.syncs += 1;
        self.counters.syncs.fetch_add(1, Ordering::Relaxed);
        w.segments.insert(
            next,
            Segment {
                file: file.clone(),
                len: SEGMENT_HEADER_V3_LEN as u64,
                version: SEGMENT_VERSION,
                claims: [SEGMENT_HEADER_V3_LEN as u64; SLOT_COPIES],
                claims_durable: true,
            },
        );
        w.unsynced = true;
        w.dir_unsynced = true;
        self.files
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(next, file);
        if let Some(hooks) = self.hooks() {
            // Listed before any record goes into it; the list's write syncs the directory,
            // which holds the new name.
            if let Err(e) = (hooks.created)(next) {
                self.unlist_failed_segment(w, &hooks, next, &e);
                return Err(e);
            }
            w.dir_unsynced = false;
            stats.syncs += CREATED_HOOK_SYNCS;
            self.counters
                .syncs
                .fetch_add(CREATED_HOOK_SYNCS, Ordering::Relaxed);
        }
        Ok(())
    }

    /// After segment `next`'s listing failed with `e`: a segment the list is known not to name
    /// holds nothing but its header, so it is dropped and its file removed (the next tick
    /// starts a segment anew); a fence, a listing that may have taken (its directory sync
    /// failed, say), or a failed removal latches.
    fn unlist_failed_segment(&self, w: &mut Writer, hooks: &SegmentHooks, next: u64, e: &Error) {
        let unlisted =
            !matches!(e, Error::Fenced { .. }) && matches!((hooks.unlisted)(next), Ok(true));
        if !unlisted {
            w.latch(e);
            return;
        }
        w.segments.remove(&next);
        self.files
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&next);
        if let Err(removed) = self.storage.remove(&segment_name(next)) {
            w.latch(&removed);
        }
    }

    /// Whether a tick may append to the newest segment: this store owns its tail, it is of
    /// this build's version (an earlier one holds no delta) and below its size limit.
    fn appendable(&self, w: &Writer) -> bool {
        // A segment holding no record yet takes one whatever the size limit: with a limit at
        // or below the header's size, every rollover would otherwise start a segment to copy
        // nothing into, and the rollover loop would never shrink the total.
        w.segments.iter().next_back().is_some_and(|(seq, seg)| {
            w.sealed != Some(*seq)
                && seg.version == SEGMENT_VERSION
                && (seg.len < self.config.segment_bytes || seg.len <= SEGMENT_HEADER_V3_LEN as u64)
        })
    }

    /// Appends `buf` to the newest segment; returns where it starts. An eviction before the
    /// first tick, or after an open that found a sealed or earlier-version newest segment,
    /// starts a segment.
    fn append(&self, w: &mut Writer, buf: &[u8], in_tick: bool) -> Result<JournalLoc> {
        w.check_latch()?;
        let newest = w
            .segments
            .iter()
            .next_back()
            .map(|(s, seg)| (*s, seg.version));
        if !in_tick
            && (newest.is_none_or(|(_, v)| v != SEGMENT_VERSION)
                || newest.map(|(s, _)| s) == w.sealed)
        {
            let mut scratch = TickStats::default();
            self.start_segment_if_needed(w, &mut scratch)?;
        }
        let (seq, len) = Self::newest(w)?;
        let file = w
            .segments
            .get(&seq)
            .map(|s| s.file.clone())
            .ok_or(Error::PreviousIo)?;
        if let Err(e) = file.write_all_at(buf, len) {
            Self::undo_write(w, file.as_ref(), len, &e);
            return Err(e);
        }
        if let Some(s) = w.segments.get_mut(&seq) {
            s.len += buf.len() as u64;
        }
        w.unsynced = true;
        self.counters
            .bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(JournalLoc {
            segment: seq,
            offset: len,
        })
    }

    /// After a write at `len` failed (a full disk, for instance): cuts the file back to `len`,
    /// so whatever part of the write reached the file is gone and the next append writes at
    /// `len` again. Nothing of the failed write was indexed or reported, so the journal goes on
    /// as if it had never been tried. A fence, or a cut that fails too, latches: a journal
    /// never writes past bytes it does not know.
    fn undo_write(w: &mut Writer, file: &dyn StorageFile, len: u64, e: &Error) {
        if matches!(e, Error::Fenced { .. }) {
            w.latch(e);
        } else if let Err(cut) = file.set_len(len) {
            w.latch(&cut);
        }
    }

    fn latch_on<T>(w: &mut Writer, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            w.latch(e);
        }
        r
    }

    /// Syncs the newest segment, then writes a slot claiming what the sync covered (a plain
    /// write, durable with the next sync). A failed slot write latches the journal; the sync
    /// still succeeded.
    fn sync_newest(&self, seq: u64, stats: &mut TickStats) -> Result<()> {
        // Every append that finished before the sync starts is covered by it: appends write
        // under the writer's lock before they grow `len`.
        let (file, covered) = lock(&self.writer)
            .segments
            .get(&seq)
            .map(|s| (s.file.clone(), s.len))
            .ok_or(Error::PreviousIo)?;
        let synced = file.sync_data();
        stats.syncs += 1;
        self.counters.syncs.fetch_add(1, Ordering::Relaxed);
        let mut w = lock(&self.writer);
        if let Err(e) = &synced {
            w.latch(e);
        } else if w.sealed != Some(seq) {
            // A failed slot write latches the journal; the records this sync covered are
            // durable all the same.
            write_claim(&mut w, seq, covered).ok();
        }
        synced
    }

    fn sync_dir(&self, stats: &mut TickStats) -> Result<()> {
        let synced = self.storage.sync_dir();
        stats.syncs += 1;
        self.counters.syncs.fetch_add(1, Ordering::Relaxed);
        let mut w = lock(&self.writer);
        if let Err(e) = &synced {
            w.latch(e);
        } else {
            // Segments created after the sync started set it again; a name created while
            // the sync ran may be covered or not, so only a creation before it is cleared:
            // ticks and rollovers hold the tick lock, and evictions create a segment only
            // when none is open for appends, which a tick in progress has ensured.
            w.dir_unsynced = false;
        }
        synced
    }

    /// Rolls over while the segments hold more than twice the live bytes plus one segment:
    /// copies the oldest segment's live records to the newest, syncs, deletes the oldest.
    /// Returns the segments deleted.
    fn roll_over_locked(&self) -> Result<u64> {
        let mut deleted = 0;
        loop {
            let (count, total, oldest) = {
                let w = lock(&self.writer);
                (
                    w.segments.len(),
                    w.segments.values().map(|s| s.len).sum::<u64>(),
                    w.segments.keys().next().copied(),
                )
            };
            let live = lock(&self.index).live_bytes();
            let Some(oldest) = oldest else { break };
            if count < 2 || total <= 2 * live + self.config.segment_bytes {
                break;
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
        {
            let index = lock(&self.index);
            for cursor in index.cursors_in(oldest) {
                if let Some(c) = index.committed(cursor) {
                    commits.push((cursor, self.rebase(&mut buf, (seq, base), cursor, c)?));
                }
                for (kind, pending) in [
                    (RecordKind::Partition, index.pending(cursor)),
                    (RecordKind::Batch, index.pending_batch(cursor)),
                ] {
                    for (key, part) in pending.into_iter().flatten() {
                        if part.loc.segment == oldest {
                            let copy =
                                self.copy_record(&mut buf, (seq, base), (kind, cursor), *part)?;
                            staged.push((kind, cursor, *key, copy));
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
            let mut index = lock(&self.index);
            self.counters
                .rebases
                .fetch_add(commits.len() as u64, Ordering::Relaxed);
            for (cursor, c) in commits {
                index.commit(cursor, c);
            }
            for (kind, cursor, key, part) in staged {
                // Only if no newer copy was staged meanwhile.
                if kind == RecordKind::Batch {
                    if index
                        .lookup_batch(cursor, key)
                        .is_none_or(|p| p.loc.segment == oldest)
                    {
                        index.stage_batch(cursor, key, part);
                    }
                } else if index
                    .lookup(cursor, key)
                    .is_none_or(|p| p.loc.segment == oldest)
                {
                    index.stage(cursor, key, part);
                }
            }
        }
        // A former owner must not delete what the new owner reads.
        self.check_owner()?;
        if let Some(hooks) = self.hooks() {
            // Out of the list before its file goes: a crash in between leaves a file no list
            // names, which the next claim removes.
            let listed = (hooks.deleted)(oldest);
            if let Err(e) = &listed {
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

    /// Copies `cursor`'s partition or batch record (`kind`) at `part` (verified) into `buf`,
    /// which is appended at `base` of segment `seq`; returns the copy's location.
    fn copy_record(
        &self,
        buf: &mut Vec<u8>,
        (seq, base): (u64, u64),
        (kind, cursor): (RecordKind, CursorId),
        part: PartLoc,
    ) -> Result<PartLoc> {
        let payload = self.read_payload(part.loc, part.frame_len)?;
        if payload_crc(&payload) != part.crc {
            return Err(corrupt(
                part.loc.segment,
                part.loc.offset,
                CorruptionKind::ChecksumMismatch,
            ));
        }
        let loc = JournalLoc {
            segment: seq,
            offset: base + buf.len() as u64,
        };
        encode_record(buf, &cursor_record(kind, cursor, &payload));
        Ok(PartLoc { loc, ..part })
    }
}

/// One group commit in progress: cursors are staged one by one, each under its own lock (its
/// written partitions are appended at once, so the log orders them with the cursor's
/// evictions), then [`Tick::commit`] appends every marker and syncs once.
#[derive(Debug)]
pub struct Tick<'a> {
    journal: &'a Journal,
    _serial: MutexGuard<'a, ()>,
    staged: Vec<Staged>,
    /// Cursors whose markers the commit in progress has taken from `staged`, until they are
    /// in the index.
    uncommitted: Vec<CursorId>,
    stats: TickStats,
    started: bool,
}

impl Drop for Tick<'_> {
    /// A tick that ends without committing what it staged (a failed commit, or a flush that
    /// failed after staging) leaves those cursors unsettled (see `Journal::unsettled`), while
    /// the tick lock is still held, so no later tick skips them.
    fn drop(&mut self) {
        if self.staged.is_empty() && self.uncommitted.is_empty() {
            return;
        }
        let mut unsettled = lock(&self.journal.unsettled);
        unsettled.extend(self.staged.iter().map(|s| s.cursor));
        unsettled.extend(self.uncommitted.iter().copied());
    }
}

/// One cursor staged into a tick: what its marker will commit.
#[derive(Debug)]
struct Staged {
    cursor: CursorId,
    name: u32,
    state: PersistedState,
    rows: BTreeMap<PartitionKey, PartLoc>,
    batch: BTreeMap<PartitionKey, PartLoc>,
}

/// A cursor's partial entries (batch-index acks) as a tick stages them: the batch records to
/// write, and the partitions whose current batch record the journal holds already.
#[derive(Debug, Clone, Default)]
pub struct BatchStage {
    /// Partitions whose partial entries changed since their batch record was written: key,
    /// the batch-index entry encoding them, and how many partial entries it holds.
    pub written: Vec<(PartitionKey, Vec<u8>, u32)>,
    /// Partitions whose newest batch record in the journal is current, with the payload CRC
    /// the cursor expects of it.
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
    /// nor in the journal; [`Error::PreviousIo`] after an earlier failure; [`Error::Io`].
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
    ) -> Result<BTreeMap<PartitionKey, PartLoc>> {
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
    ) -> Result<BTreeMap<PartitionKey, PartLoc>> {
        state.validate()?;
        let j = self.journal;
        let mut w = lock(&j.writer);
        if !self.started {
            j.start_segment_if_needed(&mut w, &mut self.stats)?;
            self.started = true;
        }
        {
            let index = lock(&j.index);
            if let Some(key) = live.iter().find(|k| {
                !written.iter().any(|(w, _)| w == *k) && index.lookup(cursor, **k).is_none()
            }) {
                return Err(Error::InvalidArgument {
                    reason: format!(
                        "partition {}:{} of cursor {}/{} is live but neither written nor in the \
                         journal",
                        key.ledger_id, key.chunk, cursor.topic, cursor.cursor
                    ),
                });
            }
            if let Some((key, _)) = batch
                .kept
                .iter()
                .find(|(k, crc)| index.lookup_batch(cursor, *k).is_none_or(|p| p.crc != *crc))
            {
                return Err(Error::InvalidArgument {
                    reason: format!(
                        "partial entries of partition {}:{} of cursor {}/{} are kept but the \
                         journal holds no batch record of them",
                        key.ledger_id, key.chunk, cursor.topic, cursor.cursor
                    ),
                });
            }
        }
        let (seq, base) = Journal::newest(&w)?;
        let mut buf = Vec::new();
        let mut parts = Vec::with_capacity(written.len());
        let copy = |buf: &mut Vec<u8>, kind, payload: &[u8], cardinality| {
            let before = buf.len();
            encode_record(buf, &cursor_record(kind, cursor, payload));
            PartLoc {
                seq: j.counters.seq.fetch_add(1, Ordering::Relaxed) + 1,
                loc: JournalLoc {
                    segment: seq,
                    offset: base + before as u64,
                },
                frame_len: (buf.len() - before) as u64,
                crc: payload_crc(payload),
                cardinality,
            }
        };
        for (key, bitmap) in written {
            let payload = partition_payload(*key, bitmap);
            let part = copy(&mut buf, RecordKind::Partition, &payload, bitmap.len());
            parts.push((*key, part));
        }
        let mut batch_parts = Vec::with_capacity(batch.written.len());
        for (key, payload, entries) in &batch.written {
            let part = copy(&mut buf, RecordKind::Batch, payload, u64::from(*entries));
            batch_parts.push((*key, part));
        }
        if !buf.is_empty() {
            j.append(&mut w, &buf, true)?;
        }
        let mut index = lock(&j.index);
        for (key, part) in &parts {
            index.stage(cursor, *key, *part);
        }
        for (key, part) in &batch_parts {
            index.stage_batch(cursor, *key, *part);
        }
        let mut rows = BTreeMap::new();
        for key in live {
            if let Some(part) = index.lookup(cursor, *key) {
                rows.insert(*key, part);
            }
        }
        let mut batch_rows = BTreeMap::new();
        for key in batch
            .kept
            .iter()
            .map(|(k, _)| k)
            .chain(batch.written.iter().map(|(k, _, _)| k))
        {
            if let Some(part) = index.lookup_batch(cursor, *key) {
                batch_rows.insert(*key, part);
            }
        }
        self.stats.partitions += (parts.len() + batch_parts.len()) as u64;
        self.stats.bytes += buf.len() as u64;
        self.staged.push(Staged {
            cursor,
            name,
            state,
            rows,
            batch: batch_rows.clone(),
        });
        Ok(batch_rows)
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
        if self.staged.is_empty() {
            // Nothing new, but a cursor's earlier flush may have been staged into a tick that
            // failed: after a failure no flush reports success.
            lock(&j.writer).check_latch()?;
            return Ok(self.stats);
        }
        let mut w = lock(&j.writer);
        let (seq, base) = Journal::newest(&w)?;
        let mut buf = Vec::new();
        let mut commits: Vec<(CursorId, Committed)> = Vec::with_capacity(self.staged.len());
        // Until their markers are in the index, a failure leaves these cursors unsettled.
        self.uncommitted = self.staged.iter().map(|s| s.cursor).collect();
        {
            // Ticks and rollovers run one at a time: no committed chain changes meanwhile.
            let index = lock(&j.index);
            // Where each cursor's newest marker of this tick is in `commits`: one lookup per
            // staged cursor, so a tick costs the same per cursor whatever their number.
            let mut newest: HashMap<CursorId, usize> = HashMap::with_capacity(self.staged.len());
            for staged in std::mem::take(&mut self.staged) {
                let cursor = staged.cursor;
                // A cursor staged twice in one tick builds on its own earlier marker.
                let prior = newest.get(&cursor).map(|&i| &commits[i].1);
                let chain = prior.or_else(|| index.committed(cursor));
                let at = (seq, base + buf.len() as u64);
                let (next, kind) = append_marker(
                    &mut buf,
                    (cursor, staged.name),
                    at,
                    chain,
                    &staged.state,
                    (staged.rows, staged.batch),
                )?;
                if kind == RecordKind::Delta {
                    j.counters.deltas.fetch_add(1, Ordering::Relaxed);
                }
                newest.insert(cursor, commits.len());
                commits.push((cursor, next));
            }
        }
        j.append(&mut w, &buf, true)?;
        let dir = w.dir_unsynced;
        drop(w);
        // The sync runs without the writer's lock: evictions keep appending meanwhile.
        j.sync_newest(seq, &mut self.stats)?;
        if dir {
            j.sync_dir(&mut self.stats)?;
        }
        j.check_owner()?;
        {
            let mut index = lock(&j.index);
            let mut unsettled = lock(&j.unsettled);
            self.stats.cursors = commits.len() as u64;
            for (cursor, c) in commits {
                index.commit(cursor, c);
                unsettled.remove(&cursor);
            }
            self.uncommitted.clear();
        }
        self.stats.bytes += buf.len() as u64;
        j.counters.ticks.fetch_add(1, Ordering::Relaxed);
        self.stats.segments_deleted = j.roll_over_locked()?;
        Ok(self.stats)
    }
}

fn partition_payload(key: PartitionKey, bitmap: &RoaringBitmap) -> Vec<u8> {
    let body = encode_partition(key, bitmap);
    encode_partition_entry(&PartitionEntry {
        ledger_id: key.ledger_id,
        chunk: key.chunk,
        cardinality: bitmap.len(),
        body: &body,
    })
}

fn partition_record(cursor: CursorId, payload: &[u8]) -> Record<'_> {
    cursor_record(RecordKind::Partition, cursor, payload)
}

fn cursor_record(kind: RecordKind, cursor: CursorId, payload: &[u8]) -> Record<'_> {
    Record {
        kind,
        topic: cursor.topic,
        cursor: cursor.cursor,
        payload,
    }
}

/// The name tag a marker or delta record binds and the payload after it (0 and the whole
/// payload for other kinds, and before version 4). A payload too short for its tag is an empty
/// one: a marker that does not verify.
fn named_payload<'a>(rec: &Record<'a>, version: u16) -> (u32, &'a [u8]) {
    match rec.kind {
        RecordKind::Marker | RecordKind::Delta => {
            split_name_tag(version, rec.payload).unwrap_or((0, &[]))
        }
        RecordKind::Partition | RecordKind::Forget | RecordKind::Batch => (0, rec.payload),
    }
}

/// Bytes of the frame of a full marker of `state` with `rows` live partitions and `batch`
/// batch rows.
fn full_marker_frame_len(state: &PersistedState, rows: usize, batch: usize) -> u64 {
    let payload =
        NAME_TAG_LEN + marker_with_batch_len(state, TableRef::Inline(&[]), batch) + rows * ROW_LEN;
    record_len(payload) as u64
}

fn batch_rows<'a>(
    live: impl Iterator<Item = (&'a PartitionKey, &'a PartLoc)>,
) -> Result<Vec<BatchRow>> {
    live.map(|(k, p)| {
        Ok(BatchRow {
            ledger_id: k.ledger_id,
            chunk: k.chunk,
            entry_id: p.loc.pack().ok_or_else(too_far)?,
            crc: p.crc,
            // A batch record holds at most a partition's entries (2^16), so this never
            // saturates.
            entries: u32::try_from(p.cardinality).unwrap_or(u32::MAX),
        })
    })
    .collect()
}

/// The rows a delta adds or rewrites, and the keys it removes.
type Changes<'a> = (Vec<(&'a PartitionKey, &'a PartLoc)>, Vec<(u64, u64)>);

/// What a delta changes of `base` to make `live`: the rows added or rewritten, and the keys
/// removed.
fn changes<'a>(
    base: &BTreeMap<PartitionKey, PartLoc>,
    live: &'a BTreeMap<PartitionKey, PartLoc>,
) -> Changes<'a> {
    let added = live
        .iter()
        .filter(|(k, p)| base.get(k).is_none_or(|b| b.loc != p.loc))
        .collect();
    let removed = base
        .keys()
        .filter(|k| !live.contains_key(k))
        .map(|k| (k.ledger_id, k.chunk))
        .collect();
    (added, removed)
}

fn marker_rows<'a>(
    live: impl Iterator<Item = (&'a PartitionKey, &'a PartLoc)>,
) -> Result<Vec<PartitionRow>> {
    live.map(|(k, p)| {
        Ok(PartitionRow {
            ledger_id: k.ledger_id,
            chunk: k.chunk,
            entry_id: p.loc.pack().ok_or_else(too_far)?,
            crc: p.crc,
            cardinality: p.cardinality,
        })
    })
    .collect()
}

fn too_far() -> Error {
    Error::LimitExceeded {
        reason: "journal location beyond 4 GiB in a segment".into(),
    }
}

/// Appends `cursor`'s next marker record to `buf`, whose first byte lands at `at` (segment,
/// offset), and returns the committed chain it makes and the record's kind: a delta on `chain`
/// (the cursor's committed marker or delta) when one is smaller than a full marker, else a
/// full marker of every `live` row and batch row.
fn append_marker(
    buf: &mut Vec<u8>,
    (cursor, name): (CursorId, u32),
    (segment, offset): (u64, u64),
    chain: Option<&Committed>,
    state: &PersistedState,
    (live, live_batch): (
        BTreeMap<PartitionKey, PartLoc>,
        BTreeMap<PartitionKey, PartLoc>,
    ),
) -> Result<(Committed, RecordKind)> {
    let loc = JournalLoc { segment, offset };
    // Every marker goes to a segment of this build's version: its CRC covers the cursor and
    // its name tag, which the payload starts with.
    let bound = record_binding(SEGMENT_VERSION, cursor.topic, cursor.cursor, name);
    let binding = bound.as_slice();
    let full_len = full_marker_frame_len(state, live.len(), live_batch.len());
    // A chain never changes its name: a delta builds only on a chain of this name or of none.
    let chain = chain.filter(|base| base.name == 0 || base.name == name);
    let delta = chain.and_then(|base| {
        let (added, removed) = changes(&base.rows, &live);
        let (added_batch, removed_batch) = changes(&base.batch, &live_batch);
        let len = NAME_TAG_LEN
            + delta_len(
                removed.len(),
                removed_batch.len(),
                marker_with_batch_len(state, TableRef::Inline(&[]), added_batch.len())
                    + added.len() * ROW_LEN,
            );
        (record_len(len) < usize::try_from(full_len).unwrap_or(usize::MAX)).then_some((
            base,
            (added, removed),
            (added_batch, removed_batch),
        ))
    });
    let (kind, payload, floor) =
        if let Some((base, (added, removed), (added_batch, removed_batch))) = delta {
            let floor = added
                .iter()
                .chain(&added_batch)
                .map(|(_, p)| p.loc.segment)
                .fold(base.floor.min(segment), u64::min);
            let mut marker = encode_marker_with_batch(
                state,
                TableRef::Inline(&marker_rows(added.into_iter())?),
                &batch_rows(added_batch.into_iter())?,
            )?;
            bind_entry(&mut marker, binding);
            let mut payload = name.to_le_bytes().to_vec();
            let base_loc = base.marker.pack().ok_or_else(too_far)?;
            encode_delta(
                &mut payload,
                (base_loc, base.crc),
                &removed,
                &removed_batch,
                &marker,
            );
            (RecordKind::Delta, payload, floor)
        } else {
            let rows = marker_rows(live.iter())?;
            let mut marker = encode_marker_with_batch(
                state,
                TableRef::Inline(&rows),
                &batch_rows(live_batch.iter())?,
            )?;
            bind_entry(&mut marker, binding);
            let mut payload = Vec::with_capacity(NAME_TAG_LEN + marker.len());
            payload.extend_from_slice(&name.to_le_bytes());
            payload.extend_from_slice(&marker);
            let floor = Committed::full_floor(loc, &live, &live_batch);
            (RecordKind::Marker, payload, floor)
        };
    encode_record(
        buf,
        &Record {
            kind,
            topic: cursor.topic,
            cursor: cursor.cursor,
            payload: &payload,
        },
    );
    let committed = Committed {
        marker: loc,
        marker_len: full_len,
        crc: payload_crc(&payload),
        name,
        floor,
        state: state.clone(),
        rows: live,
        batch: live_batch,
    };
    Ok((committed, kind))
}

/// The journal as a cursor's partition store: evictions append (unsynced), loads read the
/// newest copy.
#[derive(Debug)]
pub struct JournalPartitions {
    journal: Arc<Journal>,
    cursor: CursorId,
}

impl JournalPartitions {
    /// The partitions of `cursor` in `journal`.
    #[must_use]
    pub fn new(journal: Arc<Journal>, cursor: CursorId) -> Self {
        Self { journal, cursor }
    }
}

impl PartitionStore for JournalPartitions {
    fn load(&mut self, key: PartitionKey) -> Result<Option<RoaringBitmap>> {
        self.journal.load(self.cursor, key)
    }

    fn store(&mut self, key: PartitionKey, bitmap: &RoaringBitmap) -> Result<()> {
        self.journal.store_partition(self.cursor, key, bitmap)
    }

    fn forget(&mut self, key: PartitionKey) {
        self.journal.forget_partition(self.cursor, key);
    }
}

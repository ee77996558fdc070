//! The store's cursor journal: segment header and record frames.
//!
//! Owns: the bytes of a journal segment file (`journal-{seq:016}.seg`). A segment is a header,
//! then records appended back to back, then zeros (or nothing). Every record carries one
//! cursor's partition, batch-index entry (its partial entries of one partition), marker, delta,
//! single-entry snapshot or deletion; the payloads of batch-index entries, markers and
//! snapshots are the cursor-ledger payloads of [`crate::format::cursor`], unchanged, a delta
//! wraps such a marker, and a partition's payload (version 7, [`encode_partition_payload`]) is
//! its key, cardinality and set under the frame's one CRC (before version 7 a cursor-ledger
//! partition entry). All integers little-endian.
//!
//! ```text
//! segment header (SEGMENT_HEADER_LEN = 24 bytes; versions 3 to 8: then the predecessor and
//! SLOT_COPIES slots)
//! 0   8  magic "ACKSJRNL"
//! 8   2  version (8; version 7, whose batch rows hold the CRC32 of the whole batch record,
//!          version 6, whose partition records wrap a cursor-ledger partition entry,
//!          version 5, without snapshot records, version 4, without batch records,
//!          version 3, whose markers bind no name, and versions 2 and 1, without slots, are
//!          still read; 1 holds no delta)
//! 10  2  flags (0)
//! 12  8  segment sequence number (the number in the file name)
//! 20  4  CRC32 of bytes [0, 20)
//!
//! predecessor (PREDECESSOR_LEN = 20 bytes at PREDECESSOR_AT = 24; version 3)
//! 0   8  sequence number of the segment this one follows (0: none, the journal's first)
//! 8   8  that segment's final length (0 with none)
//! 16  4  CRC32 of this segment's sequence number (8 bytes) and bytes [0, 16)
//!
//! synced-length slot i (SLOT_LEN = 12 bytes at SLOTS_AT + i * SLOT_LEN, i = 0, 1; version 3)
//! 0   8  synced length: a segment length a finished fdatasync covered
//! 8   4  CRC32 of the sequence number (8 bytes), the byte i and the synced length
//!
//! records start at records_start(version): 24 (versions 1, 2), 68 (versions 3 to 8)
//!
//! record frame (RECORD_HEADER_LEN = 8 bytes, then the body)
//! 0   4  body length n (0: no record here, the end of the segment)
//! 4   4  CRC32 of bytes [0, 4) and of the body
//! 8   n  body: kind u8 | topic id u64 | cursor id u64 | payload (n - 17 bytes)
//! ```
//!
//! Kinds: 1 partition (payload from version 7: key, cardinality and set, see `partition.rs`;
//! before: a cursor-ledger partition entry), 2 marker (payload: a
//! cursor-ledger marker with an inline table, whose row `entry_id` is a journal location, see
//! [`JournalLoc`], and whose row `crc` is the CRC32 of the partition record's payload, in
//! every version),
//! A row names its partition record by location and payload CRC in every version, so a marker of
//! a version 7 or 8 segment may name a partition record of an earlier segment (a flush names an
//! unchanged partition where its current copy is) whatever that segment's version. With the
//! checks of the record it names (its cursor ids the marker's, its key and cardinality the
//! row's), a row accepts only that exact record: one of another cursor, of another partition,
//! or of an older tick of the same partition (another set, so another payload CRC) put at that
//! location is refused.
//! 3 forget (the cursor was deleted; payload empty before version 3, in version 3 the record's
//! topic and cursor ids again, so a forget moved to another cursor does not match), 4 delta (an incremental marker, below;
//! only in segments of version 2 and later), 5 batch (version 5: a cursor-ledger batch-index
//! entry, the partial entries of one partition; it counts once a marker's inline batch table
//! names it, row `entry_id` its journal location and row `crc`, in a marker of a version 8
//! segment, the CRC32 of its payload without the entry's own CRC ([`batch_row_crc`]), which
//! differs from one batch record to another; in versions 5 to 7 the CRC32 of the whole payload,
//! the same for every batch record, so there a row tells two batch records of one cursor,
//! partition and partial-entry count apart by their location alone),
//! 6 snapshot (version 6: the cursor's whole state in one record, see below). In a segment of
//! version 3 or later the CRC a marker (of a marker record, or inside a delta) ends with covers
//! the record's topic id and cursor id
//! ([`cursor_binding`], 16 bytes) before the marker's bytes, so a marker moved to another
//! cursor fails its own CRC even with the frame's CRC recomputed.
//!
//! In a segment of version 4 or later the payload of a marker, delta or snapshot record starts
//! with the cursor's
//! *name tag* (`NAME_TAG_LEN` = 4 bytes, [`name_tag`]: the CRC32 of its topic's and its own
//! name, never 0;
//! 0 for a state re-based by a rollover before its cursor's first flush since a version 3
//! segment, which knew no name), and the marker's CRC covers the name tag after the topic and
//! cursor ids ([`record_binding`], 20 bytes). A cursor's state is handed only to the cursor of
//! that name: a topic record whose cursor ids were swapped or moved does not hand one cursor's
//! acks to another.
//!
//! A *snapshot* record (kind 6, version 6) is what a cursor of the single-entry form
//! (`PersistMode::SingleEntry`) commits: its payload is the name tag, then a cursor-ledger
//! snapshot entry ([`crate::format::cursor::SnapshotWriter`]: the state, every acked range
//! above mark-delete, and the partial entries inline) whose CRC covers the record's binding
//! ([`record_binding`]) before its bytes, as a marker's does; it references no other record and
//! commits once synced. A cursor's newest committed marker or delta chain and its newest
//! committed snapshot are both kept: whichever committed later is its state, the other its
//! fallback when the newer one does not verify.
//!
//! ```text
//! delta payload (DELTA_FIXED_LEN = 16 bytes, then the removed keys, then a marker)
//! 0        8   base: the JournalLoc (packed) of the marker or delta this one builds on
//! 8        4   base CRC: CRC32 of the base record's payload
//! 12       4   removed count r; in version 5 bit 31 (REMOVED_BATCH_FLAG) set says removed
//!              batch keys follow the removed keys
//! 16       16r removed partition keys: ledger u64, chunk u64, strictly ascending
//! (flag)   4   removed batch count b (>= 1), then 16b removed batch keys, strictly ascending:
//!              partitions whose partial entries are gone since the base
//! ...      m   a cursor-ledger marker (inline table; before version 5 no batch table, from
//!              version 5 an inline one of the batch records added or rewritten since the
//!              base): the cursor's whole state and a row for every partition added or
//!              rewritten since the base
//! ```

pub mod partition;

pub use partition::{
    PartitionPayload, decode_partition_payload, encode_partition_payload, put_partition_payload,
};

use super::cursor::{Marker, Table, decode_marker_bound};
use super::{Corruption, Reader};
use crate::error::{CorruptionKind, Error};

/// Magic at the start of every segment.
pub const SEGMENT_MAGIC: [u8; 8] = *b"ACKSJRNL";
/// Segment format version this build writes: segments that may hold deltas, batch records and
/// snapshot records, carry synced-length slots after the header, whose markers bind their
/// cursor's name, whose partition records carry the partition directly, and whose markers name
/// each batch record by its inner CRC ([`batch_row_crc`]).
pub const SEGMENT_VERSION: u16 = SEGMENT_VERSION_V8;
/// Segments whose markers' batch rows name a batch record by the CRC32 of its payload without
/// its last four bytes ([`batch_row_crc`]), which differs from one batch record to another.
pub const SEGMENT_VERSION_V8: u16 = 8;
/// Segments whose partition records carry the partition's key, cardinality and set under the
/// record frame's CRC alone ([`encode_partition_payload`]), and whose batch rows hold the
/// CRC32 of the whole batch record payload: still read, never appended to.
pub const SEGMENT_VERSION_V7: u16 = 7;
/// Segments that may hold snapshot records, whose partition records wrap a cursor-ledger
/// partition entry: still read, never appended to.
pub const SEGMENT_VERSION_V6: u16 = 6;
/// Segments that may hold batch records, without snapshot records: still read, never appended
/// to.
pub const SEGMENT_VERSION_V5: u16 = 5;
/// Segments whose markers bind their cursor's name, without batch records: still read, never
/// appended to.
pub const SEGMENT_VERSION_V4: u16 = 4;
/// Segments with slots whose markers bind no name: still read, never appended to.
pub const SEGMENT_VERSION_V3: u16 = 3;
/// Segments that may hold deltas, without slots: still read, never appended to.
pub const SEGMENT_VERSION_V2: u16 = 2;
/// The first segment format version, without deltas: still read, never appended to.
pub const SEGMENT_VERSION_V1: u16 = 1;
/// Bytes of the segment header: magic, version, flags, sequence, CRC.
pub const SEGMENT_HEADER_LEN: usize = 8 + 2 + 2 + 8 + 4;
/// Bytes of one synced-length slot: the length, its CRC.
pub const SLOT_LEN: usize = 8 + 4;
/// Copies of the synced-length slot (version 3), written alternately.
pub const SLOT_COPIES: usize = 2;
/// Where a version 3 segment names the segment it follows: right after the header.
pub const PREDECESSOR_AT: usize = SEGMENT_HEADER_LEN;
/// Bytes of the predecessor: its sequence number, its final length, a CRC.
pub const PREDECESSOR_LEN: usize = 8 + 8 + 4;
/// Where the first slot starts: right after the predecessor.
pub const SLOTS_AT: usize = PREDECESSOR_AT + PREDECESSOR_LEN;
/// Bytes of both slot copies.
pub const SLOTS_LEN: usize = SLOT_COPIES * SLOT_LEN;
/// Bytes of a version 3 header with its slots: where its first record starts (versions 3 to 8).
pub const SEGMENT_HEADER_V3_LEN: usize = SLOTS_AT + SLOTS_LEN;
/// Bytes of a record frame before its body: length, CRC.
pub const RECORD_HEADER_LEN: usize = 4 + 4;
/// Bytes of a record body before its payload: kind, topic, cursor.
pub const BODY_FIXED_LEN: usize = 1 + 8 + 8;
/// Largest record body accepted (a marker of about 1.8 million partitions).
pub const MAX_BODY_LEN: usize = 64 << 20;
/// Largest segment sequence number: it must fit the high half of a [`JournalLoc`].
pub const MAX_SEGMENT: u64 = u32::MAX as u64;
/// Bytes of a forget record's payload in a segment of version 3 or 4: the record's topic id
/// and cursor id again ([`cursor_binding`]); empty in earlier versions.
pub const FORGET_V3_LEN: usize = 16;
/// What a journal state bound to another cursor's name is reported as (by the store's open
/// and by `ackstore verify`): the topic record lists a cursor under the id of another one.
pub const OTHER_CURSORS_STATE: &str =
    "the journal's state under this cursor's id belongs to another cursor (name differs)";
/// What a store's topic record is reported as when its cursor table lacks a cursor whose record
/// is kept, of an id below the table's next one (by the topic's open and by `ackstore verify`):
/// on a store a creation lists a cursor before writing its record, and a deletion removes the
/// record before the table drops the cursor, so only an edit of the table leaves such a record.
pub const UNLISTED_CURSOR: &str = "cursor table (a cursor whose record is kept is not listed)";
/// Bytes of the name tag a marker or delta record's payload starts with (version 4).
pub const NAME_TAG_LEN: usize = 4;
/// Bytes of a version 4 marker's binding: topic id, cursor id, name tag.
pub const BINDING_LEN: usize = 8 + 8 + NAME_TAG_LEN;
/// Bytes of the CRC a batch record's payload (a cursor-ledger batch-index entry) ends with.
pub const BATCH_CRC_LEN: usize = 4;
/// Bytes of a delta payload before its removed keys: base location, base CRC, removed count.
pub const DELTA_FIXED_LEN: usize = 8 + 4 + 4;
/// Bytes of one removed key of a delta: ledger, chunk.
pub const DELTA_KEY_LEN: usize = 8 + 8;

/// What a journal record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// One ack partition of a cursor, not committed until a marker references it.
    Partition = 1,
    /// The commit point of one cursor's flush: its state and every live partition's location.
    Marker = 2,
    /// The cursor was deleted: none of its earlier records count.
    Forget = 3,
    /// An incremental marker: the cursor's state and the partitions changed since the marker
    /// or delta it names as its base.
    Delta = 4,
    /// The partial entries (batch-index acks) of one partition of a cursor, not committed
    /// until a marker's batch table references it (version 5).
    Batch = 5,
    /// A cursor's whole state in one record (the single-entry form, version 6): committed
    /// once synced, referencing nothing.
    Snapshot = 6,
}

impl RecordKind {
    fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Partition),
            2 => Some(Self::Marker),
            3 => Some(Self::Forget),
            4 => Some(Self::Delta),
            5 => Some(Self::Batch),
            6 => Some(Self::Snapshot),
            _ => None,
        }
    }
}

/// Where a record starts: segment sequence and byte offset of its frame. A marker row stores it
/// as one `u64`: the segment in the high 32 bits, the offset in the low 32 (segments are far
/// below 4 GiB, see [`JournalLoc::pack`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JournalLoc {
    /// Segment sequence number.
    pub segment: u64,
    /// Byte offset of the record frame within the segment.
    pub offset: u64,
}

impl JournalLoc {
    /// The `u64` a marker row stores; `None` when either half does not fit in 32 bits.
    #[must_use]
    pub fn pack(self) -> Option<u64> {
        (self.segment <= MAX_SEGMENT && u32::try_from(self.offset).is_ok())
            .then_some((self.segment << 32) | self.offset)
    }

    /// The location a marker row's `u64` names.
    #[must_use]
    pub fn unpack(v: u64) -> Self {
        Self {
            segment: v >> 32,
            offset: v & u64::from(u32::MAX),
        }
    }
}

/// One decoded record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// What it holds.
    pub kind: RecordKind,
    /// The topic's id in the store catalog.
    pub topic: u64,
    /// The cursor's id within its topic.
    pub cursor: u64,
    /// The cursor-ledger payload (empty for a forget).
    pub payload: &'a [u8],
}

/// The segment a version 3 segment follows, as its header names it: the journal's newest
/// segment when this one started, and the length it ended with (it is never appended to
/// again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Predecessor {
    /// Its sequence number.
    pub segment: u64,
    /// Its final length in bytes.
    pub len: u64,
}

/// The header of a new segment `seq` (version 3) following `previous` (`None`: the journal's
/// first segment), with both slots claiming the header alone.
#[must_use]
pub fn encode_segment_header(
    seq: u64,
    previous: Option<Predecessor>,
) -> [u8; SEGMENT_HEADER_V3_LEN] {
    let mut out = [0u8; SEGMENT_HEADER_V3_LEN];
    let mut body = Vec::with_capacity(SEGMENT_HEADER_V3_LEN);
    body.extend_from_slice(&SEGMENT_MAGIC);
    body.extend_from_slice(&SEGMENT_VERSION.to_le_bytes());
    body.extend_from_slice(&0u16.to_le_bytes());
    body.extend_from_slice(&seq.to_le_bytes());
    let crc = crc32fast::hash(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    let previous = previous.unwrap_or(Predecessor { segment: 0, len: 0 });
    let mut named = [0u8; 16];
    let (at_seq, at_len) = named.split_at_mut(8);
    at_seq.copy_from_slice(&previous.segment.to_le_bytes());
    at_len.copy_from_slice(&previous.len.to_le_bytes());
    body.extend_from_slice(&named);
    body.extend_from_slice(&predecessor_crc(seq, &named).to_le_bytes());
    for copy in 0..SLOT_COPIES {
        body.extend_from_slice(&encode_slot(seq, copy, SEGMENT_HEADER_V3_LEN as u64));
    }
    out.copy_from_slice(&body);
    out
}

fn predecessor_crc(seq: u64, named: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&seq.to_le_bytes());
    h.update(named);
    h.finalize()
}

/// The segment that version 3 segment `seq` follows, from its [`PREDECESSOR_LEN`] bytes at
/// [`PREDECESSOR_AT`]: `Ok(None)` for the journal's first segment.
///
/// # Errors
/// `Truncated` when `bytes` is short, `ChecksumMismatch` (also for another segment's
/// predecessor), `InvalidField("predecessor")` for a length without a segment or a segment
/// not below `seq` (offsets within the segment).
pub fn decode_predecessor(seq: u64, bytes: &[u8]) -> Result<Option<Predecessor>, Corruption> {
    let mut r = Reader::at(bytes, PREDECESSOR_AT);
    let segment = r.u64()?;
    let len = r.u64()?;
    let crc = r.u32()?;
    let named = bytes.get(..16).unwrap_or_default();
    if predecessor_crc(seq, named) != crc {
        return Err(Corruption::new(
            CorruptionKind::ChecksumMismatch,
            PREDECESSOR_AT,
        ));
    }
    match (segment, len) {
        (0, 0) => Ok(None),
        (s, _) if s == 0 || s >= seq => Err(Corruption::new(
            CorruptionKind::InvalidField("predecessor"),
            PREDECESSOR_AT,
        )),
        (segment, len) => Ok(Some(Predecessor { segment, len })),
    }
}

/// The bytes a version 3 segment binds into the CRC of a marker of cursor `cursor` of topic
/// `topic` (the marker of a marker record or of a delta): topic id, cursor id, little-endian.
#[must_use]
pub fn cursor_binding(topic: u64, cursor: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    let (t, c) = out.split_at_mut(8);
    t.copy_from_slice(&topic.to_le_bytes());
    c.copy_from_slice(&cursor.to_le_bytes());
    out
}

/// The name tag of cursor `cursor` of topic `topic` (names as the broker gives them): the
/// CRC32 of the topic name's length (u64, little-endian), the topic name and the cursor name,
/// 1 where that is 0 (0 is the tag of a state whose name is not known). Binding the topic's name
/// too, a catalog whose topic names were swapped hands no cursor another topic's state.
#[must_use]
pub fn name_tag(topic: &str, cursor: &str) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&(topic.len() as u64).to_le_bytes());
    h.update(topic.as_bytes());
    h.update(cursor.as_bytes());
    h.finalize().max(1)
}

/// What the CRC of a marker of cursor `cursor` of topic `topic` covers before the marker's
/// bytes in a segment of `version`: nothing before version 3, the topic and cursor ids in
/// version 3, and the name tag `name` after them in version 4.
#[must_use]
pub fn record_binding(version: u16, topic: u64, cursor: u64, name: u32) -> Binding {
    let mut bytes = [0u8; BINDING_LEN];
    let (ids, tag) = bytes.split_at_mut(16);
    ids.copy_from_slice(&cursor_binding(topic, cursor));
    tag.copy_from_slice(&name.to_le_bytes());
    let len = match version {
        v if v >= SEGMENT_VERSION_V4 => BINDING_LEN,
        SEGMENT_VERSION_V3 => 16,
        _ => 0,
    };
    Binding { bytes, len }
}

/// The bytes a marker's CRC covers before the marker ([`record_binding`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    bytes: [u8; BINDING_LEN],
    len: usize,
}

impl Binding {
    /// The bound bytes.
    #[must_use]
    pub fn as_slice(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or_default()
    }
}

/// Splits the payload of a marker, delta or snapshot record of a segment of `version` into the
/// name tag it starts with (version 4; 0 before, where no name is bound) and the marker, delta
/// or snapshot payload after it.
///
/// # Errors
/// `Truncated` when a version 4 payload is shorter than the tag.
pub fn split_name_tag(version: u16, payload: &[u8]) -> Result<(u32, &[u8]), Corruption> {
    if version < SEGMENT_VERSION_V4 {
        return Ok((0, payload));
    }
    payload
        .split_first_chunk::<NAME_TAG_LEN>()
        .map(|(tag, rest)| (u32::from_le_bytes(*tag), rest))
        .ok_or(Corruption::new(CorruptionKind::Truncated, 0))
}

/// The CRC a marker's batch row names the batch record with payload `payload` by, in a
/// segment of version 8: the CRC32 of the payload without its last [`BATCH_CRC_LEN`] bytes,
/// the batch-index entry's own CRC (the entry verifies only when it equals them). The CRC32 of
/// the whole payload, which the rows of versions 5 to 7 hold, is the CRC residue of every
/// batch-index entry that verifies (its trailing CRC covers the bytes before it), so it tells
/// no two batch records apart; this one differs with the entry's contents.
#[must_use]
pub fn batch_row_crc(payload: &[u8]) -> u32 {
    let covered = payload.len().saturating_sub(BATCH_CRC_LEN);
    crc32fast::hash(payload.get(..covered).unwrap_or_default())
}

/// The CRC a marker row or delta base names a record of `kind` with payload `payload` by
/// (what the journal's index holds of it): [`batch_row_crc`] for a batch record, the CRC32 of
/// the whole payload for every other kind.
#[must_use]
pub fn record_crc(kind: RecordKind, payload: &[u8]) -> u32 {
    match kind {
        RecordKind::Batch => batch_row_crc(payload),
        _ => crc32fast::hash(payload),
    }
}

/// Where the records of a segment of `version` start.
#[must_use]
pub const fn records_start(version: u16) -> usize {
    if version >= SEGMENT_VERSION_V3 {
        SEGMENT_HEADER_V3_LEN
    } else {
        SEGMENT_HEADER_LEN
    }
}

/// Slot copy `copy` of segment `seq` claiming `synced_len`: written at
/// `SLOTS_AT + copy * SLOT_LEN`. The CRC covers the sequence number and the copy's number, so
/// a slot copied from another segment or to the other place fails it.
#[must_use]
pub fn encode_slot(seq: u64, copy: usize, synced_len: u64) -> [u8; SLOT_LEN] {
    let mut out = [0u8; SLOT_LEN];
    let len = synced_len.to_le_bytes();
    let crc = slot_crc(seq, copy, &len).to_le_bytes();
    let (at_len, at_crc) = out.split_at_mut(len.len());
    at_len.copy_from_slice(&len);
    at_crc.copy_from_slice(&crc);
    out
}

fn slot_crc(seq: u64, copy: usize, len: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&seq.to_le_bytes());
    h.update(&[u8::try_from(copy).unwrap_or(u8::MAX)]);
    h.update(len);
    h.finalize()
}

/// The claim of slot copy `copy` of segment `seq` (`slot` is its [`SLOT_LEN`] bytes), 0 when
/// it does not verify.
#[must_use]
pub fn decode_slot(seq: u64, copy: usize, slot: &[u8]) -> u64 {
    let Some((len, rest)) = slot.split_first_chunk::<8>() else {
        return 0;
    };
    let Some(crc) = rest.first_chunk::<4>() else {
        return 0;
    };
    if slot_crc(seq, copy, len) == u32::from_le_bytes(*crc) {
        u64::from_le_bytes(*len)
    } else {
        0
    }
}

/// The synced length the slots of segment `seq` record: the larger claim of the copies that
/// verify, 0 when none does (or `slots` is shorter than both copies). `slots` starts at
/// [`SLOTS_AT`].
#[must_use]
pub fn decode_slots(seq: u64, slots: &[u8]) -> u64 {
    slots
        .chunks_exact(SLOT_LEN)
        .take(SLOT_COPIES)
        .enumerate()
        .map(|(copy, slot)| decode_slot(seq, copy, slot))
        .max()
        .unwrap_or(0)
}

/// Checks a segment header; returns its sequence number.
pub fn decode_segment_header(bytes: &[u8]) -> Result<u64, Corruption> {
    decode_segment_header_version(bytes).map(|(seq, _)| seq)
}

/// Checks a segment header of either version; returns its sequence number and version. A
/// header whose CRC verifies but whose version is unknown is `UnsupportedVersion`, never a
/// torn header.
pub fn decode_segment_header_version(bytes: &[u8]) -> Result<(u64, u16), Corruption> {
    let mut r = Reader::new(bytes);
    if r.array::<8>()? != SEGMENT_MAGIC {
        return Err(Corruption::new(CorruptionKind::BadMagic, 0));
    }
    let version = r.u16()?;
    let flags = r.u16()?;
    let seq = r.u64()?;
    let covered = bytes
        .get(..SEGMENT_HEADER_LEN - 4)
        .ok_or(Corruption::new(CorruptionKind::Truncated, bytes.len()))?;
    if crc32fast::hash(covered) != r.u32()? {
        return Err(Corruption::new(CorruptionKind::ChecksumMismatch, 0));
    }
    if !(SEGMENT_VERSION_V1..=SEGMENT_VERSION).contains(&version) {
        return Err(Corruption::new(
            CorruptionKind::UnsupportedVersion(u32::from(version)),
            8,
        ));
    }
    if flags != 0 {
        return Err(Corruption::new(CorruptionKind::InvalidField("flags"), 10));
    }
    if seq > MAX_SEGMENT {
        return Err(Corruption::new(CorruptionKind::InvalidField("segment"), 12));
    }
    Ok((seq, version))
}

/// Appends the frame of one record to `out`.
///
/// # Errors
/// [`Error::LimitExceeded`] (nothing appended) for a body above [`MAX_BODY_LEN`], which
/// every reader refuses: no record is written that a recovery would not read.
pub fn encode_record(out: &mut Vec<u8>, record: &Record<'_>) -> Result<(), Error> {
    let body_len = BODY_FIXED_LEN + record.payload.len();
    if body_len > MAX_BODY_LEN {
        return Err(Error::LimitExceeded {
            reason: format!(
                "a journal record of {body_len} bytes (kind {:?}) is over the {MAX_BODY_LEN} \
                 bytes a reader accepts",
                record.kind
            ),
        });
    }
    let len = u32::try_from(body_len).unwrap_or(u32::MAX).to_le_bytes();
    let start = out.len();
    out.extend_from_slice(&len);
    out.extend_from_slice(&[0; 4]);
    out.push(record.kind as u8);
    out.extend_from_slice(&record.topic.to_le_bytes());
    out.extend_from_slice(&record.cursor.to_le_bytes());
    out.extend_from_slice(record.payload);
    let mut h = crc32fast::Hasher::new();
    h.update(&len);
    h.update(out.get(start + RECORD_HEADER_LEN..).unwrap_or_default());
    if let Some(slot) = out.get_mut(start + 4..start + RECORD_HEADER_LEN) {
        slot.copy_from_slice(&h.finalize().to_le_bytes());
    }
    Ok(())
}

/// Bytes of the frame of a record whose payload is `payload_len` bytes.
#[must_use]
pub const fn record_len(payload_len: usize) -> usize {
    RECORD_HEADER_LEN + BODY_FIXED_LEN + payload_len
}

/// The body length a frame header announces (`None` with fewer than 4 bytes): 0 is the end of
/// the segment. Lets a reader fetch exactly one frame.
#[must_use]
pub fn peek_body_len(bytes: &[u8]) -> Option<usize> {
    bytes
        .first_chunk::<4>()
        .map(|b| u32::from_le_bytes(*b) as usize)
}

/// Decodes the record whose frame starts at `bytes[0]`. `Ok(None)` at the end of the segment
/// (no bytes, or a zero length); `Ok(Some((record, frame_len)))` for a record that verifies.
///
/// # Errors
/// `Truncated` when the frame runs past `bytes`, `BadLength` for a length below the fixed body
/// or above [`MAX_BODY_LEN`], `ChecksumMismatch`, `InvalidField("record kind")`, and
/// `BadLength` for a forget whose payload is neither empty nor [`FORGET_V3_LEN`] bytes.
pub fn decode_record(bytes: &[u8]) -> Result<Option<(Record<'_>, usize)>, Corruption> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let mut r = Reader::new(bytes);
    let len = r.u32()? as usize;
    if len == 0 {
        return Ok(None);
    }
    if !(BODY_FIXED_LEN..=MAX_BODY_LEN).contains(&len) {
        return Err(Corruption::new(CorruptionKind::BadLength, 0));
    }
    let len_bytes = bytes.get(..4).unwrap_or_default();
    let crc = r.u32()?;
    let body = r.take(len)?;
    let mut h = crc32fast::Hasher::new();
    h.update(len_bytes);
    h.update(body);
    if h.finalize() != crc {
        return Err(Corruption::new(CorruptionKind::ChecksumMismatch, 4));
    }
    let mut b = Reader::at(body, RECORD_HEADER_LEN);
    let kind = RecordKind::from_code(b.u8()?).ok_or(Corruption::new(
        CorruptionKind::InvalidField("record kind"),
        8,
    ))?;
    let topic = b.u64()?;
    let cursor = b.u64()?;
    let payload = b.rest();
    if kind == RecordKind::Forget && !(payload.is_empty() || payload.len() == FORGET_V3_LEN) {
        return Err(Corruption::new(CorruptionKind::BadLength, 0));
    }
    Ok(Some((
        Record {
            kind,
            topic,
            cursor,
            payload,
        },
        RECORD_HEADER_LEN + len,
    )))
}

/// A decoded, verified delta payload (see the module docs): borrowed, nothing allocated.
#[derive(Debug, Clone)]
pub struct Delta<'a> {
    /// Where the marker or delta it builds on starts.
    pub base: JournalLoc,
    /// CRC32 of the base record's payload.
    pub base_crc: u32,
    /// The removed keys, `DELTA_KEY_LEN` bytes each, strictly ascending.
    removed: &'a [u8],
    /// The keys whose batch rows are removed (version 5), as `removed`.
    removed_batch: &'a [u8],
    /// The cursor's state and the added or rewritten rows (inline, no batch table).
    pub marker: Marker<'a>,
    /// The bytes `marker` was decoded from.
    pub marker_bytes: &'a [u8],
}

impl<'a> Delta<'a> {
    /// The partitions the base has and this delta removes, as `(ledger, chunk)`, ascending.
    pub fn removed(&self) -> impl Iterator<Item = (u64, u64)> + 'a {
        keys(self.removed)
    }

    /// How many keys it removes.
    #[must_use]
    pub fn removed_len(&self) -> usize {
        self.removed.len() / DELTA_KEY_LEN
    }

    /// The partitions whose partial entries the base has and this delta removes (version 5),
    /// as `(ledger, chunk)`, ascending.
    pub fn removed_batch(&self) -> impl Iterator<Item = (u64, u64)> + 'a {
        keys(self.removed_batch)
    }

    /// How many batch keys it removes.
    #[must_use]
    pub fn removed_batch_len(&self) -> usize {
        self.removed_batch.len() / DELTA_KEY_LEN
    }
}

fn keys(bytes: &[u8]) -> impl Iterator<Item = (u64, u64)> + '_ {
    bytes.chunks_exact(DELTA_KEY_LEN).filter_map(|k| {
        let (ledger, chunk) = k.split_first_chunk::<8>()?;
        Some((
            u64::from_le_bytes(*ledger),
            u64::from_le_bytes(*chunk.first_chunk::<8>()?),
        ))
    })
}

/// Bytes of a version 5 delta payload removing `removed` keys and `removed_batch` batch keys
/// around a marker of `marker_len` bytes (the batch keys' count only when there are some).
#[must_use]
pub const fn delta_len(removed: usize, removed_batch: usize, marker_len: usize) -> usize {
    let batch = if removed_batch == 0 {
        0
    } else {
        4 + removed_batch * DELTA_KEY_LEN
    };
    DELTA_FIXED_LEN + removed * DELTA_KEY_LEN + batch + marker_len
}

/// The bit of a delta's removed count that says removed batch keys follow the removed keys
/// (version 5). A count never reaches it: a record holds far fewer keys.
pub const REMOVED_BATCH_FLAG: u32 = 1 << 31;

fn put_keys(out: &mut Vec<u8>, keys: &[(u64, u64)], flag: u32) {
    // A cursor has far fewer than 2^31 live partitions (a marker of them would exceed
    // MAX_BODY_LEN long before).
    let count = u32::try_from(keys.len()).unwrap_or(u32::MAX) & !REMOVED_BATCH_FLAG;
    out.extend_from_slice(&(count | flag).to_le_bytes());
    for (ledger, chunk) in keys {
        out.extend_from_slice(&ledger.to_le_bytes());
        out.extend_from_slice(&chunk.to_le_bytes());
    }
}

/// Appends a version 5 delta payload to `out`: `base` (packed) and `base_crc`, the `removed`
/// keys, the `removed_batch` keys (both ascending, as the caller's sorted maps yield them),
/// then `marker` (a cursor-ledger marker with an inline table and, when batch partitions were
/// added or rewritten, an inline batch table, already encoded).
pub fn encode_delta(
    out: &mut Vec<u8>,
    (base, base_crc): (u64, u32),
    removed: &[(u64, u64)],
    removed_batch: &[(u64, u64)],
    marker: &[u8],
) {
    out.reserve(delta_len(removed.len(), removed_batch.len(), marker.len()));
    out.extend_from_slice(&base.to_le_bytes());
    out.extend_from_slice(&base_crc.to_le_bytes());
    if removed_batch.is_empty() {
        put_keys(out, removed, 0);
    } else {
        put_keys(out, removed, REMOVED_BATCH_FLAG);
        put_keys(out, removed_batch, 0);
    }
    out.extend_from_slice(marker);
}

/// Reads a count and that many keys, strictly ascending; with `flagged` (version 5), also
/// whether the count carries [`REMOVED_BATCH_FLAG`].
fn read_keys<'a>(r: &mut Reader<'a>, flagged: bool) -> Result<(&'a [u8], bool), Corruption> {
    let raw = r.u32()?;
    let flag = flagged && raw & REMOVED_BATCH_FLAG != 0;
    let count = if flag { raw & !REMOVED_BATCH_FLAG } else { raw } as usize;
    if count > r.remaining() / DELTA_KEY_LEN {
        return Err(Corruption::new(CorruptionKind::BadLength, r.offset() - 4));
    }
    let at = r.offset();
    let bytes = r.records(count, DELTA_KEY_LEN)?;
    let mut previous = None;
    for (i, key) in keys(bytes).enumerate() {
        if previous.is_some_and(|p| p >= key) {
            return Err(Corruption::new(
                CorruptionKind::InvalidField("removed key order"),
                at + i * DELTA_KEY_LEN,
            ));
        }
        previous = Some(key);
    }
    Ok((bytes, flag))
}

/// Decodes and verifies a delta payload of a segment of `version`: the removed counts against
/// the bytes left, the keys strictly ascending, then the marker (its own CRC, bound to
/// `binding` as [`decode_marker_bound`] checks it, and its other checks), whose table must be
/// inline. Before version 5 a delta has no removed batch keys and its marker no batch table;
/// from version 5 its batch table, if any, is inline.
///
/// # Errors
/// `Truncated`, `BadLength`, `InvalidField("removed key order")`, `InvalidField("delta
/// table")`, and the marker decoder's errors (offsets within the payload).
pub fn decode_delta<'a>(
    payload: &'a [u8],
    binding: &[u8],
    version: u16,
) -> Result<Delta<'a>, Corruption> {
    let mut r = Reader::new(payload);
    let base = JournalLoc::unpack(r.u64()?);
    let base_crc = r.u32()?;
    let (removed, more) = read_keys(&mut r, version >= SEGMENT_VERSION_V5)?;
    let removed_batch = if more {
        let (keys, _) = read_keys(&mut r, false)?;
        if keys.is_empty() {
            return Err(Corruption::new(CorruptionKind::BadLength, r.offset() - 4));
        }
        keys
    } else {
        &[]
    };
    let marker_at = r.offset();
    let delta = Delta {
        base,
        base_crc,
        removed,
        removed_batch,
        marker: decode_marker_bound(r.rest(), binding).map_err(|c| c.after(marker_at))?,
        marker_bytes: r.rest(),
    };
    if !matches!(delta.marker.table, Table::Inline(_))
        || !delta.marker.batch_pages.is_empty()
        || (version < SEGMENT_VERSION_V5 && !delta.marker.batch.is_empty())
    {
        return Err(Corruption::new(
            CorruptionKind::InvalidField("delta table"),
            marker_at,
        ));
    }
    Ok(delta)
}

//! Byte layouts of the entries a cursor ledger holds: partition, marker, snapshot, index page,
//! batch indexes, batch page, and the compact marker and index page (`compact.rs`).
//!
//! Owns: the verification and decoding of cursor-ledger entry payloads, and the encoding of
//! the kinds the journal still writes inside its records (partition, marker, snapshot, batch
//! indexes: kinds 1, 2, 3 and 5). Kinds 4, 6, 7 and 8 are only read: cursor ledgers are
//! imported into the journal, never written (`crate::cursor::import`). Pure functions over byte
//! slices; never does I/O, never panics, never allocates more than its input on decode (decoded
//! tables and range lists are borrowed views that parse on the fly). `docs/format.md`, section
//! "Cursor ledger entries", draws every byte.
//!
//! Every entry payload has the same frame:
//!
//! ```text
//! offset  size  field
//! 0       4     magic  b"AKCL"
//! 4       1     version (1)
//! 5       1     kind: 1 partition, 2 marker, 3 snapshot, 4 index page, 5 batch indexes,
//!               6 batch page, 7 compact marker, 8 compact index page
//! 6       2     flags: 0, or FLAG_BATCH (bit 0) on a marker (kind 2 or 7) or snapshot that
//!               carries batch-index state (a reader without batch support refuses the entry),
//!               and FLAG_BATCH_PAGED (bit 1) with it on a marker whose batch table is paged
//! 8       n     body (per kind, below)
//! 8+n     4     CRC32 (crc32fast, IEEE) of bytes [0, 8+n), little-endian
//! ```
//!
//! All integers are little-endian. A decoder checks the magic, then the CRC, and only then
//! trusts any length inside the body.

use std::collections::BTreeMap;

pub use super::MAX_VARINT_LEN;
use super::{Corruption, Reader, put_varint, varint_len};
use crate::error::{CorruptionKind, Error, Result};
use crate::position::Position;

/// Magic at the start of every cursor-ledger entry payload.
pub const MAGIC: [u8; 4] = *b"AKCL";
/// The format version this build writes and reads.
pub const VERSION: u8 = 1;
/// Bytes of the frame header: magic, version, kind, flags.
pub const HEADER_LEN: usize = MAGIC.len() + 1 + 1 + 2;
/// Bytes of the trailing CRC.
pub const CRC_LEN: usize = 4;
/// Bytes of one partition-table row: ledger, chunk, entry id, CRC, cardinality.
pub const ROW_LEN: usize = 8 + 8 + 8 + 4 + 8;
/// Bytes of one index-page reference: first ledger, first chunk, entry id, CRC, row count.
pub const PAGE_REF_LEN: usize = 8 + 8 + 8 + 4 + 4;
/// Bytes of a partition entry's fixed body before the partition bytes: ledger, chunk,
/// cardinality, body length.
pub const PARTITION_FIXED_LEN: usize = 8 + 8 + 8 + 4;
/// Most properties a marker or snapshot may carry.
pub const MAX_PROPERTIES: usize = 4096;
/// Longest property name, in bytes.
pub const MAX_PROPERTY_NAME: usize = 1024;
/// Bytes of a snapshot's per-ledger group header: ledger id, range count.
pub const SNAPSHOT_GROUP_LEN: usize = 8 + 4;
/// Frame flag of a marker (or snapshot) followed by a batch table (or batch section). Markers
/// and snapshots without batch-index state keep flags 0, byte for byte what earlier builds wrote.
pub const FLAG_BATCH: u16 = 1;
/// Bytes of one batch-table row: ledger, chunk, entry id, CRC, partial-entry count.
pub const BATCH_ROW_LEN: usize = 8 + 8 + 8 + 4 + 4;
/// Frame flag of a marker whose batch table lives in batch pages (kind 6): the marker then
/// lists page references ([`PAGE_REF_LEN`] each) where an inline batch table lists rows. Set
/// only together with [`FLAG_BATCH`].
pub const FLAG_BATCH_PAGED: u16 = 2;
// A marker sizes its batch table the same whether it lists rows or pages.
const _: () = assert!(PAGE_REF_LEN == BATCH_ROW_LEN);

/// What a cursor-ledger entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// One partition of the ack set (roaring bitmap of a span of entry ids).
    Partition = 1,
    /// The commit point of a multi-entry flush: cursor state plus the partition table.
    Marker = 2,
    /// The whole cursor state in one entry (single-entry mode).
    Snapshot = 3,
    /// A page of the partition table, referenced by a marker.
    IndexPage = 4,
    /// Batch-index acks of one partition (`batch.rs`).
    BatchIndexes = 5,
    /// A page of a marker's batch table (rows of [`BATCH_ROW_LEN`] bytes), referenced by a
    /// marker with [`FLAG_BATCH_PAGED`].
    BatchPage = 6,
    /// The commit point of a multi-entry flush with a compact partition table (`compact.rs`):
    /// variable-length rows, small partitions inline.
    CompactMarker = 7,
    /// A page of a compact marker's partition table (`compact.rs`).
    CompactPage = 8,
}

impl EntryKind {
    fn from_byte(b: u8) -> Option<Self> {
        match b {
            1 => Some(Self::Partition),
            2 => Some(Self::Marker),
            3 => Some(Self::Snapshot),
            4 => Some(Self::IndexPage),
            5 => Some(Self::BatchIndexes),
            6 => Some(Self::BatchPage),
            7 => Some(Self::CompactMarker),
            8 => Some(Self::CompactPage),
            _ => None,
        }
    }

    /// The code written in the frame (also used as a hint in the entry-log frame header).
    #[must_use]
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// CRC32 of a whole entry payload, as a marker or page stores it to reference that entry.
#[must_use]
pub fn payload_crc(payload: &[u8]) -> u32 {
    crc32fast::hash(payload)
}

fn corrupt(offset: usize, kind: CorruptionKind) -> Corruption {
    Corruption::new(kind, offset)
}

/// The kind of an entry, read from its frame header only (magic, version, kind; no CRC check).
pub fn peek_kind(payload: &[u8]) -> Result<EntryKind, Corruption> {
    let header = payload
        .get(..HEADER_LEN)
        .ok_or(corrupt(payload.len(), CorruptionKind::Truncated))?;
    if header.get(..MAGIC.len()) != Some(&MAGIC[..]) {
        return Err(corrupt(0, CorruptionKind::BadMagic));
    }
    let version = header.get(MAGIC.len()).copied().unwrap_or_default();
    if version != VERSION {
        return Err(corrupt(
            MAGIC.len(),
            CorruptionKind::UnsupportedVersion(u32::from(version)),
        ));
    }
    let kind = header.get(MAGIC.len() + 1).copied().unwrap_or_default();
    EntryKind::from_byte(kind).ok_or(corrupt(
        MAGIC.len() + 1,
        CorruptionKind::InvalidField("entry kind"),
    ))
}

/// Verifies the frame of `payload` (magic, version, kind, CRC, flags) and returns a reader over
/// the body whose offsets count from the start of the payload.
fn open_frame(payload: &[u8], want: EntryKind) -> Result<Reader<'_>, Corruption> {
    open_frame_flags(payload, want, 0).map(|(body, _)| body)
}

/// As [`open_frame`], accepting the flag bits in `allowed`; returns the flags too.
fn open_frame_flags(
    payload: &[u8],
    want: EntryKind,
    allowed: u16,
) -> Result<(Reader<'_>, u16), Corruption> {
    open_frame_bound(payload, want, allowed, &[])
}

/// As [`open_frame_flags`], for a frame whose CRC covers `binding` before the frame's bytes.
fn open_frame_bound<'a>(
    payload: &'a [u8],
    want: EntryKind,
    allowed: u16,
    binding: &[u8],
) -> Result<(Reader<'a>, u16), Corruption> {
    if payload.len() < HEADER_LEN + CRC_LEN {
        return Err(corrupt(payload.len(), CorruptionKind::Truncated));
    }
    let kind = peek_kind(payload)?;
    let (covered, stored) = payload
        .split_last_chunk::<CRC_LEN>()
        .ok_or(corrupt(payload.len(), CorruptionKind::Truncated))?;
    if bound_crc(binding, covered) != u32::from_le_bytes(*stored) {
        return Err(corrupt(covered.len(), CorruptionKind::ChecksumMismatch));
    }
    if kind != want {
        return Err(corrupt(
            MAGIC.len() + 1,
            CorruptionKind::InvalidField("entry kind"),
        ));
    }
    let mut header = Reader::new(covered);
    header.take(MAGIC.len() + 2)?;
    let flags = header.u16()?;
    if flags & !allowed != 0 {
        return Err(corrupt(
            MAGIC.len() + 2,
            CorruptionKind::InvalidField("flags"),
        ));
    }
    Ok((Reader::at(header.rest(), HEADER_LEN), flags))
}

/// A new entry of kind `kind` with no flags: its header, room for `capacity` body bytes.
#[must_use]
pub fn start_frame(kind: EntryKind, capacity: usize) -> Vec<u8> {
    start_frame_flags(kind, capacity, 0)
}

/// A new entry of kind `kind` with flags `flags`: its header, room for `capacity` body bytes.
#[must_use]
pub fn start_frame_flags(kind: EntryKind, capacity: usize, flags: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + capacity + CRC_LEN);
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(kind.code());
    out.extend_from_slice(&flags.to_le_bytes());
    out
}

/// CRC32 of `binding` followed by `covered`: a frame's CRC, bound to what `binding` names
/// (nothing when it is empty, the plain CRC of the frame).
fn bound_crc(binding: &[u8], covered: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(binding);
    h.update(covered);
    h.finalize()
}

/// Rewrites the trailing CRC of the encoded entry `entry` so that it covers `binding` before
/// the entry's bytes: the entry then decodes only with the same binding
/// ([`decode_marker_bound`]). Nothing changes size.
pub fn bind_entry(entry: &mut [u8], binding: &[u8]) {
    if let Some((covered, stored)) = entry.split_last_chunk_mut::<CRC_LEN>() {
        *stored = bound_crc(binding, covered).to_le_bytes();
    }
}

/// Ends the entry `out` with the CRC of its bytes.
#[must_use]
pub fn end_frame(mut out: Vec<u8>) -> Vec<u8> {
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

// ---------------------------------------------------------------------------------------------
// Cursor state shared by markers and snapshots.

/// The cursor state every marker and snapshot carries besides the acks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PersistedState {
    /// Everything at or below this position is acknowledged.
    pub mark_delete: Position,
    /// The cursor epoch (increases on every seek or reset).
    pub epoch: u64,
    /// Application properties.
    pub properties: BTreeMap<String, i64>,
}

impl PersistedState {
    /// Encoded size in bytes.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        8 + 8
            + 8
            + 4
            + self
                .properties
                .keys()
                .map(|k| 2 + k.len() + 8)
                .sum::<usize>()
    }

    /// Checks the limits a decoder enforces, so nothing is written that could not be read back.
    pub fn validate(&self) -> Result<()> {
        if self.properties.len() > MAX_PROPERTIES {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "a cursor may carry at most {MAX_PROPERTIES} properties, not {}",
                    self.properties.len()
                ),
            });
        }
        if let Some(name) = self.properties.keys().find(|k| k.len() > MAX_PROPERTY_NAME) {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "cursor property name of {} bytes exceeds the maximum of {MAX_PROPERTY_NAME}",
                    name.len()
                ),
            });
        }
        Ok(())
    }

    /// Appends the state's encoding (mark-delete, epoch, properties) to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.mark_delete.ledger_id.to_le_bytes());
        out.extend_from_slice(&self.mark_delete.entry_id.to_le_bytes());
        out.extend_from_slice(&self.epoch.to_le_bytes());
        // `validate` bounds both counts far below these integer widths.
        let count = u32::try_from(self.properties.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&count.to_le_bytes());
        for (name, value) in &self.properties {
            let len = u16::try_from(name.len()).unwrap_or(u16::MAX);
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&value.to_le_bytes());
        }
    }

    fn decode_from(body: &mut Reader<'_>) -> Result<Self, Corruption> {
        let mark_delete = Position::new(body.u64()?, body.u64()?);
        let epoch = body.u64()?;
        let count_at = body.offset();
        let count = body.len_u32()?;
        // Each property takes at least its length and value bytes.
        if count > MAX_PROPERTIES || count.saturating_mul(2 + 8) > body.remaining() {
            return Err(corrupt(count_at, CorruptionKind::BadLength));
        }
        let mut properties = BTreeMap::new();
        let mut previous: Option<&str> = None;
        for _ in 0..count {
            let at = body.offset();
            let len = usize::from(body.u16()?);
            if len > MAX_PROPERTY_NAME {
                return Err(corrupt(at, CorruptionKind::BadLength));
            }
            let name = std::str::from_utf8(body.take(len)?)
                .map_err(|_| corrupt(at, CorruptionKind::InvalidField("property name")))?;
            if previous.is_some_and(|p| p >= name) {
                return Err(corrupt(at, CorruptionKind::InvalidField("property order")));
            }
            previous = Some(name);
            let value = body.i64()?;
            properties.insert(name.to_string(), value);
        }
        Ok(Self {
            mark_delete,
            epoch,
            properties,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Partition table rows and index-page references.

/// One row of the partition table: where a live partition's entry is and how to check it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionRow {
    /// Data ledger of the partition.
    pub ledger_id: u64,
    /// Chunk of the partition within the data ledger.
    pub chunk: u64,
    /// Cursor-ledger entry holding the partition.
    pub entry_id: u64,
    /// CRC32 of that entry's whole payload.
    pub crc: u32,
    /// Number of acked entries in the partition.
    pub cardinality: u64,
}

impl PartitionRow {
    /// The partition's key as `(ledger, chunk)`, the table's sort order.
    #[must_use]
    pub fn key(&self) -> (u64, u64) {
        (self.ledger_id, self.chunk)
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.ledger_id.to_le_bytes());
        out.extend_from_slice(&self.chunk.to_le_bytes());
        out.extend_from_slice(&self.entry_id.to_le_bytes());
        out.extend_from_slice(&self.crc.to_le_bytes());
        out.extend_from_slice(&self.cardinality.to_le_bytes());
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let mut r = Reader::new(bytes);
        Some(Self {
            ledger_id: r.u64().ok()?,
            chunk: r.u64().ok()?,
            entry_id: r.u64().ok()?,
            crc: r.u32().ok()?,
            cardinality: r.u64().ok()?,
        })
    }
}

/// A reference from a marker to one index page of the partition table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRef {
    /// Key `(ledger, chunk)` of the page's first row.
    pub first: (u64, u64),
    /// Cursor-ledger entry holding the page.
    pub entry_id: u64,
    /// CRC32 of that entry's whole payload.
    pub crc: u32,
    /// Number of rows in the page.
    pub rows: u32,
}

impl PageRef {
    fn encode_into(&self, out: &mut Vec<u8>) {
        encode_ref_row(out, self.first, self.entry_id, self.crc, self.rows);
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let (first, entry_id, crc, rows) = decode_ref_row(bytes)?;
        Some(Self {
            first,
            entry_id,
            crc,
            rows,
        })
    }
}

/// The 32-byte layout of a row that refers to another cursor-ledger entry by key, shared by
/// index-page references and batch rows: key `(u64, u64)`, entry id u64, CRC u32, count u32.
fn encode_ref_row(out: &mut Vec<u8>, key: (u64, u64), entry_id: u64, crc: u32, count: u32) {
    out.extend_from_slice(&key.0.to_le_bytes());
    out.extend_from_slice(&key.1.to_le_bytes());
    out.extend_from_slice(&entry_id.to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
}

/// Reads the layout [`encode_ref_row`] writes.
fn decode_ref_row(bytes: &[u8]) -> Option<((u64, u64), u64, u32, u32)> {
    let mut r = Reader::new(bytes);
    Some((
        (r.u64().ok()?, r.u64().ok()?),
        r.u64().ok()?,
        r.u32().ok()?,
        r.u32().ok()?,
    ))
}

/// A reference from a marker to one batch-index entry (kind 5): the partial entries of one
/// partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRow {
    /// Data ledger of the partition.
    pub ledger_id: u64,
    /// Chunk of the partition within the data ledger.
    pub chunk: u64,
    /// Cursor-ledger entry holding the batch-index entry.
    pub entry_id: u64,
    /// CRC32 of that entry's whole payload.
    pub crc: u32,
    /// Number of partial entries it holds.
    pub entries: u32,
}

impl BatchRow {
    /// The partition's key as `(ledger, chunk)`, the table's sort order.
    #[must_use]
    pub fn key(&self) -> (u64, u64) {
        (self.ledger_id, self.chunk)
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        encode_ref_row(out, self.key(), self.entry_id, self.crc, self.entries);
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let ((ledger_id, chunk), entry_id, crc, entries) = decode_ref_row(bytes)?;
        Some(Self {
            ledger_id,
            chunk,
            entry_id,
            crc,
            entries,
        })
    }
}

/// A verified, borrowed list of fixed-size records, decoded on access.
#[derive(Debug, Clone, Copy)]
pub struct Records<'a, T> {
    bytes: &'a [u8],
    each: usize,
    decode: fn(&[u8]) -> Option<T>,
}

impl<'a, T: 'a> Records<'a, T> {
    /// Number of records.
    #[must_use]
    pub fn len(&self) -> usize {
        self.bytes.len() / self.each
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The records in order.
    pub fn iter(&self) -> impl Iterator<Item = T> + 'a {
        let decode = self.decode;
        self.bytes.chunks_exact(self.each).filter_map(decode)
    }
}

/// The partition rows of a marker or index page, ascending by key.
pub type Rows<'a> = Records<'a, PartitionRow>;
/// The index-page references of a marker, ascending by first key.
pub type PageRefs<'a> = Records<'a, PageRef>;
/// The batch table of a marker, ascending by key.
pub type BatchRows<'a> = Records<'a, BatchRow>;

/// Decodes `count` records of `each` bytes and checks that `key` ascends strictly and `valid`
/// holds for each, naming `field` in the error otherwise.
fn decode_records<'a, T: 'a>(
    body: &mut Reader<'a>,
    count: usize,
    each: usize,
    decode: fn(&[u8]) -> Option<T>,
    key: fn(&T) -> (u64, u64),
    field: &'static str,
) -> Result<Records<'a, T>, Corruption> {
    let at = body.offset();
    let bytes = body.records(count, each)?;
    let records = Records {
        bytes,
        each,
        decode,
    };
    let mut previous = None;
    for (i, record) in records.iter().enumerate() {
        let k = key(&record);
        if previous.is_some_and(|p| p >= k) {
            return Err(corrupt(at + i * each, CorruptionKind::InvalidField(field)));
        }
        previous = Some(k);
    }
    Ok(records)
}

fn decode_rows<'a>(body: &mut Reader<'a>, count: usize) -> Result<Rows<'a>, Corruption> {
    decode_records(
        body,
        count,
        ROW_LEN,
        PartitionRow::decode,
        PartitionRow::key,
        "row order",
    )
}

fn decode_page_refs<'a>(body: &mut Reader<'a>, count: usize) -> Result<PageRefs<'a>, Corruption> {
    let at = body.offset();
    let pages = decode_records(
        body,
        count,
        PAGE_REF_LEN,
        PageRef::decode,
        |p| p.first,
        "index page order",
    )?;
    match pages.iter().position(|p| p.rows == 0) {
        Some(i) => Err(corrupt(
            at + i * PAGE_REF_LEN,
            CorruptionKind::InvalidField("index page rows"),
        )),
        None => Ok(pages),
    }
}

// ---------------------------------------------------------------------------------------------
// Partition entries.

/// A decoded partition entry: its key and cardinality, and the partition bytes it wraps
/// (`format::partition` encoding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionEntry<'a> {
    /// Data ledger of the partition.
    pub ledger_id: u64,
    /// Chunk of the partition within the data ledger.
    pub chunk: u64,
    /// Number of acked entries in the partition.
    pub cardinality: u64,
    /// The partition's own encoding.
    pub body: &'a [u8],
}

/// Encodes a partition entry around `body` (the partition's own encoding).
///
/// Body: ledger u64, chunk u64, cardinality u64, body length u32, body.
#[must_use]
pub fn encode_partition_entry(entry: &PartitionEntry<'_>) -> Vec<u8> {
    let mut out = start_frame(EntryKind::Partition, PARTITION_FIXED_LEN + entry.body.len());
    out.extend_from_slice(&entry.ledger_id.to_le_bytes());
    out.extend_from_slice(&entry.chunk.to_le_bytes());
    out.extend_from_slice(&entry.cardinality.to_le_bytes());
    // Entries are bounded by the entry log's maximum entry size, far below 4 GiB.
    let len = u32::try_from(entry.body.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(entry.body);
    end_frame(out)
}

/// Encodes `bitmap` as the partition entry of `key`: its partition encoding
/// ([`encode_partition`](crate::format::partition::encode_partition)) inside a partition entry.
#[must_use]
pub fn encode_partition_payload(
    key: crate::format::partition::PartitionKey,
    bitmap: &roaring::RoaringBitmap,
) -> Vec<u8> {
    let body = crate::format::partition::encode_partition(key, bitmap);
    encode_partition_entry(&PartitionEntry {
        ledger_id: key.ledger_id,
        chunk: key.chunk,
        cardinality: bitmap.len(),
        body: &body,
    })
}

/// Decodes and verifies a partition entry.
pub fn decode_partition_entry(payload: &[u8]) -> Result<PartitionEntry<'_>, Corruption> {
    let mut body = open_frame(payload, EntryKind::Partition)?;
    let ledger_id = body.u64()?;
    let chunk = body.u64()?;
    let cardinality = body.u64()?;
    let at = body.offset();
    let len = body.len_u32()?;
    if len != body.remaining() {
        return Err(corrupt(at, CorruptionKind::BadLength));
    }
    let inner = body.take(len)?;
    body.finish()?;
    Ok(PartitionEntry {
        ledger_id,
        chunk,
        cardinality,
        body: inner,
    })
}

// ---------------------------------------------------------------------------------------------
// Markers and index pages.

/// How a marker lists the live partitions.
#[derive(Debug, Clone, Copy)]
pub enum TableRef<'a> {
    /// Every row in the marker itself.
    Inline(&'a [PartitionRow]),
    /// The rows live in index pages; the marker lists the pages.
    Paged(&'a [PageRef]),
}

/// A decoded marker's table.
#[derive(Debug, Clone, Copy)]
pub enum Table<'a> {
    /// Every row in the marker itself.
    Inline(Rows<'a>),
    /// The rows live in index pages; the marker lists the pages.
    Paged(PageRefs<'a>),
}

const TABLE_INLINE: u8 = 0;
/// The table byte of a marker whose rows live in index pages.
pub const TABLE_PAGED: u8 = 1;

/// A decoded, verified marker.
#[derive(Debug, Clone)]
pub struct Marker<'a> {
    /// Mark-delete, epoch and properties at the flush.
    pub state: PersistedState,
    /// The live partitions (or the pages listing them).
    pub table: Table<'a>,
    /// The batch-index entries of the partitions with partial entries (empty when the marker
    /// has no [`FLAG_BATCH`], or when its batch table is paged).
    pub batch: BatchRows<'a>,
    /// The batch pages holding the batch table (empty unless [`FLAG_BATCH_PAGED`]).
    pub batch_pages: PageRefs<'a>,
}

/// Encoded size of a marker with `state` and a table of `rows` inline rows or `pages` pages.
#[must_use]
pub fn marker_len(state: &PersistedState, table: TableRef<'_>) -> usize {
    let table_len = match table {
        TableRef::Inline(rows) => rows.len() * ROW_LEN,
        TableRef::Paged(pages) => pages.len() * PAGE_REF_LEN,
    };
    HEADER_LEN + state.encoded_len() + 1 + 4 + table_len + CRC_LEN
}

/// Encoded size of a marker as [`marker_len`], followed by a batch table of `batch_rows` rows
/// (nothing when 0).
#[must_use]
pub fn marker_with_batch_len(
    state: &PersistedState,
    table: TableRef<'_>,
    batch_rows: usize,
) -> usize {
    let batch = if batch_rows == 0 {
        0
    } else {
        4 + batch_rows * BATCH_ROW_LEN
    };
    marker_len(state, table) + batch
}

/// Encodes a marker.
///
/// Body: cursor state (mark-delete ledger u64, entry u64, epoch u64, property count u32, then
/// per property: name length u16, UTF-8 name, value i64, names ascending), table kind u8
/// (0 inline, 1 paged), count u32, then `count` rows ([`ROW_LEN`] each) or page references
/// ([`PAGE_REF_LEN`] each), ascending by key.
pub fn encode_marker(state: &PersistedState, table: TableRef<'_>) -> Result<Vec<u8>> {
    encode_marker_with_batch(state, table, &[])
}

/// Encodes a marker as [`encode_marker`], followed, when `batch` is not empty, by the batch
/// table: count u32 (>= 1), then `count` rows of [`BATCH_ROW_LEN`] bytes (ledger u64, chunk
/// u64, entry id u64, CRC u32, partial entries u32), ascending by `(ledger, chunk)`; the frame
/// then has [`FLAG_BATCH`] set. With `batch` empty the bytes are those of [`encode_marker`].
/// (A marker whose batch table is in batch pages, [`FLAG_BATCH_PAGED`], is only read.)
pub fn encode_marker_with_batch(
    state: &PersistedState,
    table: TableRef<'_>,
    batch: &[BatchRow],
) -> Result<Vec<u8>> {
    state.validate()?;
    let (kind, count) = match table {
        TableRef::Inline(rows) => (TABLE_INLINE, rows.len()),
        TableRef::Paged(pages) => (TABLE_PAGED, pages.len()),
    };
    let count = u32::try_from(count).map_err(|_| Error::LimitExceeded {
        reason: format!("{count} entries in one marker table"),
    })?;
    let batch_count = u32::try_from(batch.len()).map_err(|_| Error::LimitExceeded {
        reason: format!("{} rows in one marker's batch table", batch.len()),
    })?;
    let flags = if batch.is_empty() { 0 } else { FLAG_BATCH };
    let mut out = start_frame_flags(
        EntryKind::Marker,
        marker_with_batch_len(state, table, batch.len()) - HEADER_LEN - CRC_LEN,
        flags,
    );
    state.encode_into(&mut out);
    out.push(kind);
    out.extend_from_slice(&count.to_le_bytes());
    match table {
        TableRef::Inline(rows) => rows.iter().for_each(|r| r.encode_into(&mut out)),
        TableRef::Paged(pages) => pages.iter().for_each(|p| p.encode_into(&mut out)),
    }
    if !batch.is_empty() {
        out.extend_from_slice(&batch_count.to_le_bytes());
        for r in batch {
            r.encode_into(&mut out);
        }
    }
    Ok(end_frame(out))
}

/// Reads a marker's batch section (the same in markers of kind 2 and 7) for frame `flags`:
/// nothing without [`FLAG_BATCH`], else count u32 (>= 1) and the rows, or with
/// [`FLAG_BATCH_PAGED`] the batch page references ([`BATCH_ROW_LEN`] = [`PAGE_REF_LEN`]
/// bytes each); returns the inline batch rows, or the batch pages (the other list empty).
fn decode_batch_section<'a>(
    body: &mut Reader<'a>,
    flags: u16,
) -> Result<(BatchRows<'a>, PageRefs<'a>), Corruption> {
    let empty_pages = Records {
        bytes: &[],
        each: PAGE_REF_LEN,
        decode: PageRef::decode,
    };
    let empty_rows = Records {
        bytes: &[],
        each: BATCH_ROW_LEN,
        decode: BatchRow::decode,
    };
    if flags & FLAG_BATCH == 0 {
        return Ok((empty_rows, empty_pages));
    }
    let at = body.offset();
    let count = body.len_u32()?;
    if count == 0 {
        return Err(corrupt(at, CorruptionKind::InvalidField("batch table")));
    }
    if flags & FLAG_BATCH_PAGED != 0 {
        return Ok((empty_rows, decode_page_refs(body, count)?));
    }
    Ok((decode_batch_rows(body, count, at)?, empty_pages))
}

/// Reads `count` batch rows (after their count, read at offset `at`): ascending, none empty.
fn decode_batch_rows<'a>(
    body: &mut Reader<'a>,
    count: usize,
    at: usize,
) -> Result<BatchRows<'a>, Corruption> {
    let rows = decode_records(
        body,
        count,
        BATCH_ROW_LEN,
        BatchRow::decode,
        BatchRow::key,
        "batch row order",
    )?;
    if let Some(i) = rows.iter().position(|r| r.entries == 0) {
        return Err(corrupt(
            at + 4 + i * BATCH_ROW_LEN,
            CorruptionKind::InvalidField("batch row entries"),
        ));
    }
    Ok(rows)
}

/// Decodes and verifies a marker (CRC, field ranges, table order).
pub fn decode_marker(payload: &[u8]) -> Result<Marker<'_>, Corruption> {
    decode_marker_bound(payload, &[])
}

/// Decodes and verifies a marker whose CRC covers `binding` before its bytes (see
/// [`bind_entry`]); with `binding` empty, [`decode_marker`]. A marker bound to anything else
/// fails its CRC.
pub fn decode_marker_bound<'a>(
    payload: &'a [u8],
    binding: &[u8],
) -> Result<Marker<'a>, Corruption> {
    let (mut body, flags) = open_frame_bound(
        payload,
        EntryKind::Marker,
        FLAG_BATCH | FLAG_BATCH_PAGED,
        binding,
    )?;
    if flags == FLAG_BATCH_PAGED {
        return Err(corrupt(6, CorruptionKind::InvalidField("flags")));
    }
    let state = PersistedState::decode_from(&mut body)?;
    let kind_at = body.offset();
    let kind = body.u8()?;
    let count = body.len_u32()?;
    let table = match kind {
        TABLE_INLINE => Table::Inline(decode_rows(&mut body, count)?),
        TABLE_PAGED => Table::Paged(decode_page_refs(&mut body, count)?),
        _ => return Err(corrupt(kind_at, CorruptionKind::InvalidField("table kind"))),
    };
    let (batch, batch_pages) = decode_batch_section(&mut body, flags)?;
    body.finish()?;
    Ok(Marker {
        state,
        table,
        batch,
        batch_pages,
    })
}

/// Decodes and verifies an index page.
pub fn decode_index_page(payload: &[u8]) -> Result<Rows<'_>, Corruption> {
    let mut body = open_frame(payload, EntryKind::IndexPage)?;
    let count = body.len_u32()?;
    let rows = decode_rows(&mut body, count)?;
    body.finish()?;
    Ok(rows)
}

/// Decodes and verifies a batch page: at least one row, ascending, none empty.
pub fn decode_batch_page(payload: &[u8]) -> Result<BatchRows<'_>, Corruption> {
    let mut body = open_frame(payload, EntryKind::BatchPage)?;
    let at = body.offset();
    let count = body.len_u32()?;
    if count == 0 {
        return Err(corrupt(at, CorruptionKind::InvalidField("batch page")));
    }
    let rows = decode_batch_rows(&mut body, count, at)?;
    body.finish()?;
    Ok(rows)
}

pub mod batch;
pub mod compact;
mod snapshot;

pub use batch::{
    BATCH_FIXED_LEN, BatchPartition, MAX_BATCH_SIZE, PartialEntry, batch_entry_len,
    decode_batch_entry, encode_batch_entry, peek_batch_entry,
};
pub use compact::{
    CompactMarker, CompactPageRef, CompactPageRefs, CompactRow, CompactRows, CompactTable,
    ENTRY_CRC_LEN, MAX_INLINE_LEN, MIN_PAGE_REF_LEN, MIN_ROW_LEN, RowForm, decode_compact_marker,
    decode_compact_page,
};
pub use snapshot::{
    Snapshot, SnapshotWriter, decode_snapshot, decode_snapshot_bound, reencode_snapshot,
};

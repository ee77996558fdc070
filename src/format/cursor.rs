//! Byte layouts of the entries a cursor ledger holds: partition, marker, snapshot, index page.
//!
//! Owns: the encoding and verification of cursor-ledger entry payloads. Pure functions over byte
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
//! 5       1     kind: 1 partition, 2 marker, 3 snapshot, 4 index page
//! 6       2     flags (0)
//! 8       n     body (per kind, below)
//! 8+n     4     CRC32 (crc32fast, IEEE) of bytes [0, 8+n), little-endian
//! ```
//!
//! All integers are little-endian. A decoder checks the magic, then the CRC, and only then
//! trusts any length inside the body.

use std::collections::BTreeMap;

use byteorder::{LittleEndian, ReadBytesExt};

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
/// Most bytes one varint may take (a `u64` in LEB128).
pub const MAX_VARINT_LEN: usize = 10;
/// Bytes of a snapshot's per-ledger group header: ledger id, range count.
pub const SNAPSHOT_GROUP_LEN: usize = 8 + 4;

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
}

impl EntryKind {
    fn from_byte(b: u8) -> Option<Self> {
        match b {
            1 => Some(Self::Partition),
            2 => Some(Self::Marker),
            3 => Some(Self::Snapshot),
            4 => Some(Self::IndexPage),
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

fn corrupt(offset: usize, kind: CorruptionKind) -> Error {
    Error::corrupted(0, offset as u64, kind)
}

/// The kind of an entry, read from its frame header only (magic, version, kind; no CRC check).
pub fn peek_kind(payload: &[u8]) -> Result<EntryKind> {
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

/// Verifies the frame of `payload` (magic, version, kind, CRC, flags) and returns the body.
fn open_frame(payload: &[u8], want: EntryKind) -> Result<Body<'_>> {
    if payload.len() < HEADER_LEN + CRC_LEN {
        return Err(corrupt(payload.len(), CorruptionKind::Truncated));
    }
    let kind = peek_kind(payload)?;
    let crc_at = payload.len() - CRC_LEN;
    let (covered, mut crc_bytes) = payload.split_at(crc_at);
    let stored = crc_bytes
        .read_u32::<LittleEndian>()
        .map_err(|_| corrupt(crc_at, CorruptionKind::Truncated))?;
    if crc32fast::hash(covered) != stored {
        return Err(corrupt(crc_at, CorruptionKind::ChecksumMismatch));
    }
    if kind != want {
        return Err(corrupt(
            MAGIC.len() + 1,
            CorruptionKind::InvalidField("entry kind"),
        ));
    }
    let mut flags = covered.get(MAGIC.len() + 2..HEADER_LEN).unwrap_or_default();
    if flags.read_u16::<LittleEndian>().ok() != Some(0) {
        return Err(corrupt(
            MAGIC.len() + 2,
            CorruptionKind::InvalidField("flags"),
        ));
    }
    Ok(Body {
        rest: covered.get(HEADER_LEN..).unwrap_or_default(),
        offset: HEADER_LEN,
    })
}

/// A bounds-checked reader over an entry body that knows its offset within the payload.
struct Body<'a> {
    rest: &'a [u8],
    offset: usize,
}

impl<'a> Body<'a> {
    fn truncated(&self) -> Error {
        corrupt(self.offset, CorruptionKind::Truncated)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.rest.len() {
            return Err(self.truncated());
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        self.offset += n;
        Ok(head)
    }

    /// One fixed-size integer, read by `read` from the next `size` bytes.
    fn int<T>(&mut self, size: usize, read: fn(&mut &'a [u8]) -> std::io::Result<T>) -> Result<T> {
        let v = read(&mut self.rest).map_err(|_| self.truncated())?;
        self.offset += size;
        Ok(v)
    }

    fn u8(&mut self) -> Result<u8> {
        self.int(1, ReadBytesExt::read_u8)
    }

    fn u16(&mut self) -> Result<u16> {
        self.int(2, ReadBytesExt::read_u16::<LittleEndian>)
    }

    fn u32(&mut self) -> Result<u32> {
        self.int(4, ReadBytesExt::read_u32::<LittleEndian>)
    }

    fn u64(&mut self) -> Result<u64> {
        self.int(8, ReadBytesExt::read_u64::<LittleEndian>)
    }

    fn i64(&mut self) -> Result<i64> {
        self.int(8, ReadBytesExt::read_i64::<LittleEndian>)
    }

    /// A canonical LEB128 `u64`: no redundant trailing zero groups, no overflow.
    fn varint(&mut self) -> Result<u64> {
        let start = self.offset;
        let mut value = 0u64;
        for (i, shift) in (0..MAX_VARINT_LEN).zip((0u32..).step_by(7)) {
            let byte = self.u8()?;
            let bits = u64::from(byte & 0x7f);
            if i == MAX_VARINT_LEN - 1 && byte > 1 {
                return Err(corrupt(start, CorruptionKind::InvalidField("varint")));
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                if byte == 0 && i > 0 {
                    return Err(corrupt(start, CorruptionKind::InvalidField("varint")));
                }
                return Ok(value);
            }
        }
        Err(corrupt(start, CorruptionKind::InvalidField("varint")))
    }

    /// `count` records of `each` bytes, checked against what remains before anything is used.
    fn records(&mut self, count: usize, each: usize) -> Result<&'a [u8]> {
        let len = count
            .checked_mul(each)
            .filter(|&len| len <= self.rest.len())
            .ok_or(corrupt(self.offset, CorruptionKind::BadLength))?;
        self.take(len)
    }

    fn finish(&self) -> Result<()> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(corrupt(self.offset, CorruptionKind::BadLength))
        }
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let low = (v & 0x7f).to_le_bytes()[0];
        v >>= 7;
        if v == 0 {
            out.push(low);
            return;
        }
        out.push(low | 0x80);
    }
}

fn varint_len(v: u64) -> usize {
    let bits = 64 - v.leading_zeros() as usize;
    bits.max(1).div_ceil(7)
}

fn start_frame(kind: EntryKind, capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + capacity + CRC_LEN);
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(kind.code());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

fn end_frame(mut out: Vec<u8>) -> Vec<u8> {
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
            return Err(Error::InvalidArgument(format!(
                "a cursor may carry at most {MAX_PROPERTIES} properties, not {}",
                self.properties.len()
            )));
        }
        if let Some(name) = self.properties.keys().find(|k| k.len() > MAX_PROPERTY_NAME) {
            return Err(Error::InvalidArgument(format!(
                "cursor property name of {} bytes exceeds the maximum of {MAX_PROPERTY_NAME}",
                name.len()
            )));
        }
        Ok(())
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
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

    fn decode_from(body: &mut Body<'_>) -> Result<Self> {
        let mark_delete = Position::new(body.u64()?, body.u64()?);
        let epoch = body.u64()?;
        let count_at = body.offset;
        let count = body.u32()? as usize;
        // Each property takes at least its length and value bytes.
        if count > MAX_PROPERTIES || count.saturating_mul(2 + 8) > body.rest.len() {
            return Err(corrupt(count_at, CorruptionKind::BadLength));
        }
        let mut properties = BTreeMap::new();
        let mut previous: Option<&str> = None;
        for _ in 0..count {
            let at = body.offset;
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

    fn decode(mut bytes: &[u8]) -> Option<Self> {
        Some(Self {
            ledger_id: bytes.read_u64::<LittleEndian>().ok()?,
            chunk: bytes.read_u64::<LittleEndian>().ok()?,
            entry_id: bytes.read_u64::<LittleEndian>().ok()?,
            crc: bytes.read_u32::<LittleEndian>().ok()?,
            cardinality: bytes.read_u64::<LittleEndian>().ok()?,
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
        out.extend_from_slice(&self.first.0.to_le_bytes());
        out.extend_from_slice(&self.first.1.to_le_bytes());
        out.extend_from_slice(&self.entry_id.to_le_bytes());
        out.extend_from_slice(&self.crc.to_le_bytes());
        out.extend_from_slice(&self.rows.to_le_bytes());
    }

    fn decode(mut bytes: &[u8]) -> Option<Self> {
        Some(Self {
            first: (
                bytes.read_u64::<LittleEndian>().ok()?,
                bytes.read_u64::<LittleEndian>().ok()?,
            ),
            entry_id: bytes.read_u64::<LittleEndian>().ok()?,
            crc: bytes.read_u32::<LittleEndian>().ok()?,
            rows: bytes.read_u32::<LittleEndian>().ok()?,
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

/// Decodes `count` records of `each` bytes and checks that `key` ascends strictly and `valid`
/// holds for each, naming `field` in the error otherwise.
fn decode_records<'a, T: 'a>(
    body: &mut Body<'a>,
    count: usize,
    each: usize,
    decode: fn(&[u8]) -> Option<T>,
    key: fn(&T) -> (u64, u64),
    field: &'static str,
) -> Result<Records<'a, T>> {
    let at = body.offset;
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

fn decode_rows<'a>(body: &mut Body<'a>, count: usize) -> Result<Rows<'a>> {
    decode_records(
        body,
        count,
        ROW_LEN,
        PartitionRow::decode,
        PartitionRow::key,
        "row order",
    )
}

fn decode_page_refs<'a>(body: &mut Body<'a>, count: usize) -> Result<PageRefs<'a>> {
    let at = body.offset;
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

/// Decodes and verifies a partition entry.
pub fn decode_partition_entry(payload: &[u8]) -> Result<PartitionEntry<'_>> {
    let mut body = open_frame(payload, EntryKind::Partition)?;
    let ledger_id = body.u64()?;
    let chunk = body.u64()?;
    let cardinality = body.u64()?;
    let at = body.offset;
    let len = body.u32()? as usize;
    if len != body.rest.len() {
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
const TABLE_PAGED: u8 = 1;

/// A decoded, verified marker.
#[derive(Debug, Clone)]
pub struct Marker<'a> {
    /// Mark-delete, epoch and properties at the flush.
    pub state: PersistedState,
    /// The live partitions (or the pages listing them).
    pub table: Table<'a>,
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

/// Encodes a marker.
///
/// Body: cursor state (mark-delete ledger u64, entry u64, epoch u64, property count u32, then
/// per property: name length u16, UTF-8 name, value i64, names ascending), table kind u8
/// (0 inline, 1 paged), count u32, then `count` rows ([`ROW_LEN`] each) or page references
/// ([`PAGE_REF_LEN`] each), ascending by key.
pub fn encode_marker(state: &PersistedState, table: TableRef<'_>) -> Result<Vec<u8>> {
    state.validate()?;
    let (kind, count) = match table {
        TableRef::Inline(rows) => (TABLE_INLINE, rows.len()),
        TableRef::Paged(pages) => (TABLE_PAGED, pages.len()),
    };
    let count = u32::try_from(count)
        .map_err(|_| Error::LimitExceeded(format!("{count} entries in one marker table")))?;
    let mut out = start_frame(
        EntryKind::Marker,
        marker_len(state, table) - HEADER_LEN - CRC_LEN,
    );
    state.encode_into(&mut out);
    out.push(kind);
    out.extend_from_slice(&count.to_le_bytes());
    match table {
        TableRef::Inline(rows) => rows.iter().for_each(|r| r.encode_into(&mut out)),
        TableRef::Paged(pages) => pages.iter().for_each(|p| p.encode_into(&mut out)),
    }
    Ok(end_frame(out))
}

/// Decodes and verifies a marker (CRC, field ranges, table order).
pub fn decode_marker(payload: &[u8]) -> Result<Marker<'_>> {
    let mut body = open_frame(payload, EntryKind::Marker)?;
    let state = PersistedState::decode_from(&mut body)?;
    let kind_at = body.offset;
    let kind = body.u8()?;
    let count = body.u32()? as usize;
    let table = match kind {
        TABLE_INLINE => Table::Inline(decode_rows(&mut body, count)?),
        TABLE_PAGED => Table::Paged(decode_page_refs(&mut body, count)?),
        _ => return Err(corrupt(kind_at, CorruptionKind::InvalidField("table kind"))),
    };
    body.finish()?;
    Ok(Marker { state, table })
}

/// Encoded size of an index page of `rows` rows.
#[must_use]
pub fn index_page_len(rows: usize) -> usize {
    HEADER_LEN + 4 + rows * ROW_LEN + CRC_LEN
}

/// Encodes an index page. Body: row count u32, rows ascending by key.
pub fn encode_index_page(rows: &[PartitionRow]) -> Result<Vec<u8>> {
    let count = u32::try_from(rows.len())
        .map_err(|_| Error::LimitExceeded(format!("{} rows in one index page", rows.len())))?;
    let mut out = start_frame(EntryKind::IndexPage, 4 + rows.len() * ROW_LEN);
    out.extend_from_slice(&count.to_le_bytes());
    for r in rows {
        r.encode_into(&mut out);
    }
    Ok(end_frame(out))
}

/// Decodes and verifies an index page.
pub fn decode_index_page(payload: &[u8]) -> Result<Rows<'_>> {
    let mut body = open_frame(payload, EntryKind::IndexPage)?;
    let count = body.u32()? as usize;
    let rows = decode_rows(&mut body, count)?;
    body.finish()?;
    Ok(rows)
}

// ---------------------------------------------------------------------------------------------
// Snapshots.

/// Builds a snapshot entry from ascending ranges, under a byte and a range limit.
///
/// Body: cursor state (as in a marker), ledger group count u32, then per data ledger (ascending):
/// ledger id u64, range count u32 (>= 1), and per range two varints: `gap` and `span`. The first
/// range of a group starts at `gap`; a later one at `previous_last + 2 + gap` (maximal ranges
/// have at least one unacked entry between them); it ends at `first + span`.
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
            return Err(Error::InvalidArgument(format!(
                "range {ledger}:{first}..={ledger}:{last} is empty"
            )));
        }
        let gap = match self.last {
            Some((l, prev)) if l == ledger => {
                let gap = first.checked_sub(prev).and_then(|d| d.checked_sub(2));
                Some(gap.ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "range starting at {ledger}:{first} is not after {ledger}:{prev} with a gap"
                    ))
                })?)
            }
            Some((l, _)) if l > ledger => {
                return Err(Error::InvalidArgument(format!(
                    "ranges of ledger {ledger} come after ledger {l}"
                )));
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
}

/// A decoded, verified snapshot; its ranges decode on the fly.
#[derive(Debug, Clone)]
pub struct Snapshot<'a> {
    /// Mark-delete, epoch and properties at the flush.
    pub state: PersistedState,
    /// Number of ranges.
    pub range_count: u64,
    groups: &'a [u8],
    groups_offset: usize,
    group_count: u32,
}

impl Snapshot<'_> {
    /// The ranges as `(ledger, first, last)`, inclusive, ascending, maximal.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        let mut body = Body {
            rest: self.groups,
            offset: self.groups_offset,
        };
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

fn next_range(body: &mut Body<'_>, prev: Option<u64>) -> Result<(u64, u64)> {
    let at = body.offset;
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
pub fn decode_snapshot(payload: &[u8]) -> Result<Snapshot<'_>> {
    let mut body = open_frame(payload, EntryKind::Snapshot)?;
    let state = PersistedState::decode_from(&mut body)?;
    let group_count = body.u32()?;
    let groups_offset = body.offset;
    let groups = body.rest;
    let mut range_count = 0u64;
    let mut prev_ledger: Option<u64> = None;
    for _ in 0..group_count {
        let at = body.offset;
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
    body.finish()?;
    Ok(Snapshot {
        state,
        range_count,
        groups,
        groups_offset,
        group_count,
    })
}

/// Encodes a decoded snapshot again (for round-trip checks).
pub fn reencode_snapshot(snapshot: &Snapshot<'_>) -> Result<Vec<u8>> {
    let mut writer = SnapshotWriter::new(&snapshot.state, usize::MAX, u64::MAX)?;
    for (ledger, first, last) in snapshot.ranges() {
        writer.push(ledger, first, last)?;
    }
    Ok(writer.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> PersistedState {
        PersistedState {
            mark_delete: Position::new(3, 41),
            epoch: 7,
            properties: [("a".to_string(), -1), ("zz".to_string(), 99)].into(),
        }
    }

    fn row(ledger_id: u64, chunk: u64) -> PartitionRow {
        PartitionRow {
            ledger_id,
            chunk,
            entry_id: ledger_id * 10 + chunk,
            crc: 0xdead_beef,
            cardinality: 5,
        }
    }

    fn kind_of(err: &Error) -> Option<&CorruptionKind> {
        match err {
            Error::Corrupted { kind, .. } => Some(kind),
            _ => None,
        }
    }

    #[test]
    fn encoded_sizes_are_pinned() {
        assert_eq!(HEADER_LEN, 8);
        assert_eq!(ROW_LEN, 36);
        assert_eq!(PAGE_REF_LEN, 32);
        let empty = PersistedState::default();
        assert_eq!(empty.encoded_len(), 28);
        let marker = encode_marker(&empty, TableRef::Inline(&[])).unwrap();
        assert_eq!(marker.len(), 8 + 28 + 1 + 4 + 4);
        assert_eq!(marker.len(), marker_len(&empty, TableRef::Inline(&[])));
        let rows = [row(1, 0), row(1, 1)];
        let marker = encode_marker(&state(), TableRef::Inline(&rows)).unwrap();
        assert_eq!(marker.len(), marker_len(&state(), TableRef::Inline(&rows)));
        assert_eq!(encode_index_page(&rows).unwrap().len(), index_page_len(2));
        let part = encode_partition_entry(&PartitionEntry {
            ledger_id: 1,
            chunk: 2,
            cardinality: 3,
            body: b"abc",
        });
        assert_eq!(part.len(), HEADER_LEN + PARTITION_FIXED_LEN + 3 + CRC_LEN);
        let mut w = SnapshotWriter::new(&empty, usize::MAX, u64::MAX).unwrap();
        assert!(w.push(9, 0, 0).unwrap());
        assert!(w.push(9, 2, 2).unwrap());
        // Group header, then two bytes per alternating range.
        assert_eq!(w.len(), 8 + 28 + 4 + SNAPSHOT_GROUP_LEN + 2 + 2 + CRC_LEN);
    }

    #[test]
    fn marker_round_trips_inline_and_paged() {
        let rows = [row(1, 0), row(1, 1), row(4, 0)];
        let bytes = encode_marker(&state(), TableRef::Inline(&rows)).unwrap();
        assert_eq!(peek_kind(&bytes).unwrap(), EntryKind::Marker);
        let marker = decode_marker(&bytes).unwrap();
        assert_eq!(marker.state, state());
        let Table::Inline(got) = marker.table else {
            panic!("inline table expected")
        };
        assert_eq!(got.iter().collect::<Vec<_>>(), rows);

        let pages = [
            PageRef {
                first: (1, 0),
                entry_id: 4,
                crc: 1,
                rows: 3,
            },
            PageRef {
                first: (7, 2),
                entry_id: 9,
                crc: 2,
                rows: 1,
            },
        ];
        let bytes = encode_marker(&state(), TableRef::Paged(&pages)).unwrap();
        let Table::Paged(got) = decode_marker(&bytes).unwrap().table else {
            panic!("paged table expected")
        };
        assert_eq!(got.iter().collect::<Vec<_>>(), pages);
    }

    #[test]
    fn index_page_and_partition_entry_round_trip() {
        let rows = [row(2, 0), row(2, 5)];
        let page = encode_index_page(&rows).unwrap();
        let got = decode_index_page(&page).unwrap();
        assert_eq!(got.iter().collect::<Vec<_>>(), rows);
        let entry = PartitionEntry {
            ledger_id: 8,
            chunk: 1,
            cardinality: 12,
            body: b"roaring",
        };
        let bytes = encode_partition_entry(&entry);
        assert_eq!(decode_partition_entry(&bytes).unwrap(), entry);
        // A page is not a partition.
        assert!(decode_partition_entry(&page).is_err());
    }

    #[test]
    fn snapshot_round_trips_ranges_across_ledgers() {
        let ranges = [
            (1, 0, 0),
            (1, 2, 10),
            (1, u64::MAX - 3, u64::MAX),
            (5, 7, 7),
        ];
        let mut w = SnapshotWriter::new(&state(), usize::MAX, u64::MAX).unwrap();
        for &(l, f, t) in &ranges {
            assert!(w.push(l, f, t).unwrap());
        }
        let bytes = w.finish();
        let snap = decode_snapshot(&bytes).unwrap();
        assert_eq!(snap.state, state());
        assert_eq!(snap.range_count, 4);
        assert_eq!(snap.ranges().collect::<Vec<_>>(), ranges);
        assert_eq!(reencode_snapshot(&snap).unwrap(), bytes);
    }

    #[test]
    fn snapshot_writer_refuses_unordered_or_adjacent_ranges() {
        let mut w = SnapshotWriter::new(&state(), usize::MAX, u64::MAX).unwrap();
        assert!(w.push(2, 5, 6).unwrap());
        assert!(w.push(2, 7, 9).is_err(), "adjacent range accepted");
        assert!(w.push(2, 3, 3).is_err(), "earlier range accepted");
        assert!(w.push(1, 3, 3).is_err(), "earlier ledger accepted");
        assert!(w.push(2, 9, 8).is_err(), "empty range accepted");
    }

    #[test]
    fn snapshot_writer_stops_at_range_and_byte_limits() {
        let mut w = SnapshotWriter::new(&state(), usize::MAX, 2).unwrap();
        assert!(w.push(1, 0, 0).unwrap());
        assert!(w.push(1, 2, 2).unwrap());
        assert!(!w.push(1, 4, 4).unwrap());
        assert_eq!(w.ranges(), 2);
        let base = SnapshotWriter::new(&state(), usize::MAX, 0).unwrap().len();
        let mut w = SnapshotWriter::new(&state(), base + SNAPSHOT_GROUP_LEN + 2, 100).unwrap();
        assert!(w.push(1, 0, 0).unwrap());
        assert!(!w.push(1, 2, 2).unwrap());
        assert_eq!(w.finish().len(), base + SNAPSHOT_GROUP_LEN + 2);
    }

    #[test]
    fn every_bit_flip_is_detected() {
        let rows = [row(1, 0), row(3, 1)];
        let samples = [
            encode_marker(&state(), TableRef::Inline(&rows)).unwrap(),
            encode_index_page(&rows).unwrap(),
            encode_partition_entry(&PartitionEntry {
                ledger_id: 1,
                chunk: 0,
                cardinality: 1,
                body: b"xyz",
            }),
        ];
        for bytes in &samples {
            for i in 0..bytes.len() * 8 {
                let mut bad = bytes.clone();
                bad[i / 8] ^= 1 << (i % 8);
                assert!(decode_marker(&bad).is_err());
                assert!(decode_index_page(&bad).is_err());
                assert!(decode_partition_entry(&bad).is_err());
                assert!(decode_snapshot(&bad).is_err());
            }
        }
    }

    #[test]
    fn truncations_are_errors() {
        let bytes = encode_marker(&state(), TableRef::Inline(&[row(1, 0)])).unwrap();
        for len in 0..bytes.len() {
            assert!(
                decode_marker(&bytes[..len]).is_err(),
                "length {len} accepted"
            );
        }
    }

    #[test]
    fn lengths_are_checked_before_use() {
        // A marker whose row count claims far more rows than the bytes hold, with a valid CRC.
        let mut bytes = encode_marker(&PersistedState::default(), TableRef::Inline(&[])).unwrap();
        bytes.truncate(bytes.len() - CRC_LEN);
        let count_at = bytes.len() - 4;
        bytes[count_at..].copy_from_slice(&u32::MAX.to_le_bytes());
        let bytes = end_frame(bytes);
        let err = decode_marker(&bytes).unwrap_err();
        assert_eq!(kind_of(&err), Some(&CorruptionKind::BadLength));
    }

    #[test]
    fn unordered_rows_are_corruption() {
        let bytes = encode_index_page(&[row(2, 0), row(1, 0)]).unwrap();
        let err = decode_index_page(&bytes).unwrap_err();
        assert_eq!(
            kind_of(&err),
            Some(&CorruptionKind::InvalidField("row order"))
        );
    }

    #[test]
    fn overlong_varints_are_refused() {
        let mut body = Body {
            rest: &[0x80, 0x00],
            offset: 0,
        };
        assert!(body.varint().is_err());
        let mut body = Body {
            rest: &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02],
            offset: 0,
        };
        assert!(body.varint().is_err());
        for v in [0, 1, 127, 128, 300, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
            let mut body = Body {
                rest: &out,
                offset: 0,
            };
            assert_eq!(body.varint().unwrap(), v);
        }
    }

    #[test]
    fn oversized_properties_are_refused_before_writing() {
        let mut s = state();
        s.properties.insert("x".repeat(MAX_PROPERTY_NAME + 1), 0);
        assert!(encode_marker(&s, TableRef::Inline(&[])).is_err());
        assert!(SnapshotWriter::new(&s, usize::MAX, 1).is_err());
    }
}

//! Compact partition tables: the compact marker (kind 7) and the compact index page (kind 8).
//!
//! Owns: the decoding of a partition table whose rows are variable-length and may carry a
//! small partition's record inline, so a partition costs a few bytes beyond its record instead
//! of a 40-byte entry frame and a 36-byte row. `docs/format.md`, "Compact marker (kind 7)" and
//! "Compact index page (kind 8)", draws every byte. Pure and panic-free like the rest of
//! `format`; decoded lists are borrowed views (nothing allocated beyond the input).
//!
//! ```text
//! compact row (5 bytes or more)
//!   key          ledger varint, chunk varint, delta-coded against the previous row of the
//!                same list (the first row of a list is absolute):
//!                  same ledger: 0, then chunk - previous chunk - 1
//!                  next ledger: ledger - previous ledger, then chunk
//!   cardinality  varint, at most 2^16
//!   form         varint n:
//!                  n = 0: the partition is in its own partition entry (kind 1):
//!                         entry_id varint, crc u32 (CRC-32 of that entry's payload)
//!                  n > 0: the partition's inline form (a version 2 record without magic,
//!                         version, key and CRC; `format::partition::inline_form`), n bytes
//!
//! compact page reference (8 bytes or more)
//!   first        the page's first key, delta-coded against the previous reference's as rows
//!   entry_id     varint
//!   crc          u32, CRC-32 of the page entry's payload
//!   rows         varint, at least 1
//!
//! compact index page (kind 8), after the 8-byte frame header:
//!   count        varint, at least 1
//!   rows         count compact rows, strictly ascending by (ledger, chunk)
//!   crc          u32
//!
//! compact marker (kind 7), after the 8-byte frame header (flags as kind 2's):
//!   state        as kind 2: mark-delete, epoch, properties
//!   table kind   u8: 0 rows inline, 1 index pages
//!   count        varint (pages: at least 1)
//!   table        count compact rows, or count compact page references
//!   batch        only with FLAG_BATCH: as kind 2's (count u32, 32-byte rows or page refs)
//!   crc          u32
//! ```
//!
//! The key coding makes every list strictly ascending by construction. This build writes
//! neither kind (cursor ledgers are only read, `crate::cursor::import`): the decoders read what
//! earlier releases wrote, and their tests decode the committed samples (`tests/data/cursor-v2-*`,
//! `tests/data/cursor-ledger-*`).

use super::{
    BatchRows, Corruption, EntryKind, FLAG_BATCH, FLAG_BATCH_PAGED, PageRefs, PersistedState,
    Reader, TABLE_INLINE, TABLE_PAGED, corrupt, decode_batch_section, open_frame, open_frame_flags,
};
use crate::error::{CorruptionKind, Result};
use crate::format::partition::{MAX_CHUNK, MAX_RECORD_BYTES, PARTITION_SPAN};

/// Fewest bytes a compact row takes: one-byte key varints, cardinality and form, and one byte
/// of inline form.
pub const MIN_ROW_LEN: usize = 1 + 1 + 1 + 1 + 1;
/// Fewest bytes a compact page reference takes: one-byte key varints and entry id, the CRC and
/// a one-byte row count.
pub const MIN_PAGE_REF_LEN: usize = 1 + 1 + 1 + 4 + 1;
/// Bytes of a compact row's reference to a partition entry beyond its varints: the CRC.
pub const ENTRY_CRC_LEN: usize = 4;
/// Longest inline form a row may carry: no version 2 record is longer than
/// [`MAX_RECORD_BYTES`], and its inline form is shorter still.
pub const MAX_INLINE_LEN: usize = MAX_RECORD_BYTES;

/// Where a compact row's partition is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowForm<'a> {
    /// In its own partition entry (kind 1) of the same cursor ledger.
    Entry {
        /// The partition entry.
        entry_id: u64,
        /// CRC-32 of that entry's whole payload.
        crc: u32,
    },
    /// In the row itself: the partition record's inline form
    /// (`format::partition::inline_form`), at least one byte.
    Inline(&'a [u8]),
}

/// One row of a compact partition table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactRow<'a> {
    /// Data ledger of the partition.
    pub ledger_id: u64,
    /// Chunk of the partition within the data ledger.
    pub chunk: u64,
    /// Number of acked entries in the partition (at most 2^16).
    pub cardinality: u64,
    /// Where the partition's record is.
    pub form: RowForm<'a>,
}

impl CompactRow<'_> {
    /// The partition's key as `(ledger, chunk)`, the table's sort order.
    #[must_use]
    pub fn key(&self) -> (u64, u64) {
        (self.ledger_id, self.chunk)
    }
}

/// A reference from a compact marker to one compact index page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactPageRef {
    /// Key `(ledger, chunk)` of the page's first row.
    pub first: (u64, u64),
    /// Cursor-ledger entry holding the page.
    pub entry_id: u64,
    /// CRC-32 of that entry's whole payload.
    pub crc: u32,
    /// Number of rows in the page (at least 1).
    pub rows: u32,
}

/// Reads a key coded after `prev`; `field` names it in the error.
fn read_key(
    r: &mut Reader<'_>,
    prev: Option<(u64, u64)>,
    field: &'static str,
) -> Result<(u64, u64), Corruption> {
    let at = r.offset();
    let bad = || corrupt(at, CorruptionKind::InvalidField(field));
    let a = r.varint()?;
    let b = r.varint()?;
    let key = match prev {
        None => (a, b),
        Some((ledger, chunk)) if a == 0 => (
            ledger,
            chunk
                .checked_add(1)
                .and_then(|c| c.checked_add(b))
                .ok_or_else(bad)?,
        ),
        Some((ledger, _)) => (ledger.checked_add(a).ok_or_else(bad)?, b),
    };
    if key.1 > MAX_CHUNK {
        return Err(corrupt(at, CorruptionKind::InvalidField("chunk")));
    }
    Ok(key)
}

/// Reads one row after `prev`; returns it and the payload offset of its inline form (0 for a
/// row that references an entry).
fn read_row<'a>(
    r: &mut Reader<'a>,
    prev: Option<(u64, u64)>,
) -> Result<(CompactRow<'a>, usize), Corruption> {
    let (ledger_id, chunk) = read_key(r, prev, "row key")?;
    let at = r.offset();
    let cardinality = r.varint()?;
    if cardinality > PARTITION_SPAN {
        return Err(corrupt(at, CorruptionKind::InvalidField("cardinality")));
    }
    let at = r.offset();
    let n = r.varint()?;
    let (form, inline_at) = if n == 0 {
        let entry_id = r.varint()?;
        let crc = r.u32()?;
        (RowForm::Entry { entry_id, crc }, 0)
    } else {
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n <= MAX_INLINE_LEN)
            .ok_or(corrupt(at, CorruptionKind::BadLength))?;
        let inline_at = r.offset();
        (RowForm::Inline(r.take(n)?), inline_at)
    };
    let row = CompactRow {
        ledger_id,
        chunk,
        cardinality,
        form,
    };
    Ok((row, inline_at))
}

fn read_page_ref(
    r: &mut Reader<'_>,
    prev: Option<(u64, u64)>,
) -> Result<(CompactPageRef, usize), Corruption> {
    let first = read_key(r, prev, "index page order")?;
    let entry_id = r.varint()?;
    let crc = r.u32()?;
    let at = r.offset();
    let rows = r
        .varint()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|&n| n > 0)
        .ok_or(corrupt(at, CorruptionKind::InvalidField("index page rows")))?;
    let page = CompactPageRef {
        first,
        entry_id,
        crc,
        rows,
    };
    Ok((page, 0))
}

/// A verified, borrowed, delta-coded list (rows or page references), decoded on access.
#[derive(Debug, Clone, Copy)]
pub struct Compact<'a, T> {
    bytes: &'a [u8],
    /// Offset of `bytes` within the payload they were decoded from.
    base: usize,
    count: usize,
    read: ReadItem<'a, T>,
    key: fn(&T) -> (u64, u64),
}

/// How an item of a delta-coded list is read after the key of the one before it: the item
/// and the payload offset of its inline form (0 when it has none).
type ReadItem<'a, T> = fn(&mut Reader<'a>, Option<(u64, u64)>) -> Result<(T, usize), Corruption>;

/// The rows of a compact marker or page, ascending by key.
pub type CompactRows<'a> = Compact<'a, CompactRow<'a>>;
/// The page references of a compact marker, ascending by first key.
pub type CompactPageRefs<'a> = Compact<'a, CompactPageRef>;

impl<'a, T: 'a> Compact<'a, T> {
    /// Number of items.
    #[must_use]
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The items in order, each with the payload offset of its inline form (rows that carry
    /// one; 0 otherwise).
    pub fn located(&self) -> impl Iterator<Item = (T, usize)> + 'a {
        let mut reader = Reader::at(self.bytes, self.base);
        let mut prev = None;
        let (read, key) = (self.read, self.key);
        (0..self.count).map_while(move |_| {
            // The list was read whole when it was decoded: this cannot fail.
            let (item, at) = read(&mut reader, prev).ok()?;
            prev = Some(key(&item));
            Some((item, at))
        })
    }

    /// The items in order.
    pub fn iter(&self) -> impl Iterator<Item = T> + 'a {
        self.located().map(|(item, _)| item)
    }
}

/// Reads `count` items of a delta-coded list (each at least `min_len` bytes, checked against
/// what remains before anything is read) and returns the view over them.
fn decode_list<'a, T>(
    body: &mut Reader<'a>,
    count: usize,
    min_len: usize,
    read: ReadItem<'a, T>,
    key: fn(&T) -> (u64, u64),
) -> Result<Compact<'a, T>, Corruption> {
    if count
        .checked_mul(min_len)
        .is_none_or(|n| n > body.remaining())
    {
        return Err(body.error(CorruptionKind::BadLength));
    }
    let base = body.offset();
    let start = body.position();
    let all = body.rest();
    let mut prev = None;
    for _ in 0..count {
        let (item, _) = read(body, prev)?;
        prev = Some(key(&item));
    }
    let bytes = all.get(..body.position() - start).unwrap_or_default();
    Ok(Compact {
        bytes,
        base,
        count,
        read,
        key,
    })
}

fn row_key(row: &CompactRow<'_>) -> (u64, u64) {
    row.key()
}

fn page_first(page: &CompactPageRef) -> (u64, u64) {
    page.first
}

fn decode_rows<'a>(body: &mut Reader<'a>, count: usize) -> Result<CompactRows<'a>, Corruption> {
    decode_list(body, count, MIN_ROW_LEN, read_row, row_key)
}

fn decode_page_refs<'a>(
    body: &mut Reader<'a>,
    count: usize,
) -> Result<CompactPageRefs<'a>, Corruption> {
    decode_list(body, count, MIN_PAGE_REF_LEN, read_page_ref, page_first)
}

/// A varint count, as `usize`.
fn read_count(body: &mut Reader<'_>) -> Result<usize, Corruption> {
    let at = body.offset();
    usize::try_from(body.varint()?).map_err(|_| corrupt(at, CorruptionKind::BadLength))
}

// ---------------------------------------------------------------------------------------------
// Compact index pages.

/// Decodes and verifies a compact index page (CRC, at least one row, field ranges).
pub fn decode_compact_page(payload: &[u8]) -> Result<CompactRows<'_>, Corruption> {
    let mut body = open_frame(payload, EntryKind::CompactPage)?;
    let at = body.offset();
    let count = read_count(&mut body)?;
    if count == 0 {
        return Err(corrupt(at, CorruptionKind::InvalidField("index page rows")));
    }
    let rows = decode_rows(&mut body, count)?;
    body.finish()?;
    Ok(rows)
}

// ---------------------------------------------------------------------------------------------
// Compact markers.

/// A decoded compact marker's table.
#[derive(Debug, Clone, Copy)]
pub enum CompactTable<'a> {
    /// Every row in the marker itself.
    Inline(CompactRows<'a>),
    /// The rows live in compact index pages; the marker lists the pages.
    Paged(CompactPageRefs<'a>),
}

/// A decoded, verified compact marker.
#[derive(Debug, Clone)]
pub struct CompactMarker<'a> {
    /// Mark-delete, epoch and properties at the flush.
    pub state: PersistedState,
    /// The live partitions (or the pages listing them).
    pub table: CompactTable<'a>,
    /// The batch-index entries of the partitions with partial entries (as in a marker of
    /// kind 2).
    pub batch: BatchRows<'a>,
    /// The batch pages holding the batch table (as in a marker of kind 2).
    pub batch_pages: PageRefs<'a>,
}

/// Decodes and verifies a compact marker (CRC, field ranges; the key coding makes the table
/// ascending).
pub fn decode_compact_marker(payload: &[u8]) -> Result<CompactMarker<'_>, Corruption> {
    let (mut body, flags) = open_frame_flags(
        payload,
        EntryKind::CompactMarker,
        FLAG_BATCH | FLAG_BATCH_PAGED,
    )?;
    if flags == FLAG_BATCH_PAGED {
        return Err(corrupt(6, CorruptionKind::InvalidField("flags")));
    }
    let state = PersistedState::decode_from(&mut body)?;
    let kind_at = body.offset();
    let kind = body.u8()?;
    let count_at = body.offset();
    let count = read_count(&mut body)?;
    let table = match kind {
        TABLE_INLINE => CompactTable::Inline(decode_rows(&mut body, count)?),
        TABLE_PAGED if count == 0 => {
            return Err(corrupt(count_at, CorruptionKind::InvalidField("table")));
        }
        TABLE_PAGED => CompactTable::Paged(decode_page_refs(&mut body, count)?),
        _ => return Err(corrupt(kind_at, CorruptionKind::InvalidField("table kind"))),
    };
    let (batch, batch_pages) = decode_batch_section(&mut body, flags)?;
    body.finish()?;
    Ok(CompactMarker {
        state,
        table,
        batch,
        batch_pages,
    })
}

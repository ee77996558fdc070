//! The ack partition record: one partition of a cursor's acknowledged-entry set.
//!
//! Owns: the partition key ([`PartitionKey`], [`PARTITION_BITS`]) and the byte layout of one
//! encoded partition. Must never: perform I/O, panic on any input, or allocate more than the
//! input it decodes.
//!
//! Two versions, told apart by the `u16` after the magic (drawn in `docs/format.md`, section
//! "Ack partition"; all integers little-endian):
//!
//! ```text
//! version 2 (written)                      version 1 (read only)
//! offset  size  field                      offset  size  field
//!  0       4    magic     b"AckP"           0       4    magic        b"AckP"
//!  4       2    version   2                 4       2    version      1
//!  6       1    encoding  0..=3             6       2    flags        0
//!  7      1-10  ledger_id varint            8       8    ledger_id
//!  .      1-7   chunk     varint           16       8    chunk
//!  .       b    body (per encoding)        24       4    cardinality
//!  .       4    crc32 of all before        28       4    bitmap_len n
//!                                          32       n    roaring bitmap
//!                                          32+n     4    crc32 of all before
//! ```
//!
//! A version 2 body is one of: nothing (the empty set); roaring's portable serialization in its
//! run-optimized form; the gaps between the members of the rarer class (acked entries, or the
//! holes between the smallest and largest acked entry) in a Golomb-Rice code, or in a truncated
//! binary code when every gap lies in a narrow range; or one bit per
//! entry of the span between the smallest and largest acked entry. The encoder writes the
//! shortest (code in `code.rs`), so one set of entries has exactly one encoding in each version,
//! and the decoder refuses any other: what decodes re-encodes to the same bytes
//! ([`encode_partition`] for version 2, [`encode_partition_v1`] for version 1).

// Public (under `internals`) for the tests of the body codec, which price its plans.
#[allow(
    clippy::must_use_candidate,
    clippy::len_without_is_empty,
    reason = "its public functions serve the codec's tests, not callers"
)]
pub mod code;
mod inline;

use std::io::Write as _;

use roaring::RoaringBitmap;

pub use inline::{
    decode_inline, encode_inline, inline_form, inline_overhead, peek_inline_bounds, put_inline,
    record_of_inline,
};

use super::{Corruption, Reader};
use crate::error::{CorruptionKind, CorruptionPlace};
use crate::position::Position;

/// A partition covers entry ids `[chunk << PARTITION_BITS, (chunk + 1) << PARTITION_BITS)` of one
/// ledger, so the offsets it stores always fit the bitmap's `u32` values.
pub const PARTITION_BITS: u32 = 16;

/// Number of entry ids one partition covers.
pub const PARTITION_SPAN: u64 = 1 << PARTITION_BITS;

/// Largest chunk number: the one that holds entry id `u64::MAX`.
pub const MAX_CHUNK: u64 = u64::MAX >> PARTITION_BITS;

/// The identity of one partition: a data ledger and a fixed span of entry ids within it.
///
/// Keys order like the positions they cover: by ledger, then by chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionKey {
    /// The data ledger.
    pub ledger_id: u64,
    /// Which span of entry ids: `entry_id >> PARTITION_BITS`.
    pub chunk: u64,
}

impl PartitionKey {
    /// The partition holding `pos`.
    #[must_use]
    pub const fn of(pos: Position) -> Self {
        Self {
            ledger_id: pos.ledger_id,
            chunk: pos.entry_id >> PARTITION_BITS,
        }
    }

    /// The place to name when this partition's stored copy fails verification.
    #[must_use]
    pub const fn place(&self) -> CorruptionPlace {
        CorruptionPlace::Partition {
            ledger_id: self.ledger_id,
            chunk: self.chunk,
        }
    }

    /// First entry id the partition covers.
    #[must_use]
    pub const fn first_entry(&self) -> u64 {
        self.chunk << PARTITION_BITS
    }

    /// Last entry id the partition covers (inclusive).
    #[must_use]
    pub const fn last_entry(&self) -> u64 {
        self.first_entry() | (PARTITION_SPAN - 1)
    }

    /// The offset of `entry_id` within its partition: the value stored in the bitmap.
    #[must_use]
    pub const fn offset_of(entry_id: u64) -> u32 {
        // The mask keeps PARTITION_BITS (16) bits, which a u32 holds.
        (entry_id & (PARTITION_SPAN - 1)) as u32
    }

    /// The position of bitmap value `offset` in this partition.
    #[must_use]
    pub const fn position(&self, offset: u32) -> Position {
        Position::new(self.ledger_id, self.first_entry() | offset as u64)
    }
}

impl std::fmt::Display for PartitionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:chunk {}", self.ledger_id, self.chunk)
    }
}

/// Magic number at the start of every partition record.
pub const MAGIC: [u8; 4] = *b"AckP";
/// The format version this build writes: the smallest of four encodings, varint key.
pub const VERSION: u16 = 2;
/// The first format version (roaring only, fixed-width header), still read.
pub const VERSION_1: u16 = 1;

/// How a partition record stores its set of entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartitionEncoding {
    /// Version 1: a roaring bitmap behind a fixed 32-byte header.
    RoaringV1,
    /// Version 2, no entry acked: no body.
    Empty,
    /// Version 2: roaring's portable serialization, run-optimized.
    Roaring,
    /// Version 2: the gaps between members of the rarer class, Golomb-Rice coded.
    Gaps,
    /// Version 2: one bit per entry between the smallest and the largest acked entry.
    Bitmap,
}

impl PartitionEncoding {
    /// The byte a version 2 record stores at offset 6.
    const fn code(self) -> u8 {
        match self {
            Self::RoaringV1 | Self::Empty => 0,
            Self::Roaring => 1,
            Self::Gaps => 2,
            Self::Bitmap => 3,
        }
    }

    const fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Self::Empty),
            1 => Some(Self::Roaring),
            2 => Some(Self::Gaps),
            3 => Some(Self::Bitmap),
            _ => None,
        }
    }
}

/// The encoding a record claims in its header (version and encoding byte), read without
/// checking anything else: for reports and tests, never a substitute for decoding.
#[must_use]
pub fn partition_encoding(record: &[u8]) -> Option<PartitionEncoding> {
    if record.get(..MAGIC_LEN) != Some(&MAGIC[..]) {
        return None;
    }
    match read_u16_at(record, VERSION_AT)? {
        VERSION_1 => Some(PartitionEncoding::RoaringV1),
        VERSION => PartitionEncoding::from_code(*record.get(ENCODING_AT)?),
        _ => None,
    }
}

const MAGIC_LEN: usize = MAGIC.len();
const VERSION_LEN: usize = 2;
const FLAGS_LEN: usize = 2;
const LEDGER_LEN: usize = 8;
const CHUNK_LEN: usize = 8;
const CARDINALITY_LEN: usize = 4;
const BITMAP_LEN_LEN: usize = 4;
pub const CRC_LEN: usize = 4;

pub const VERSION_AT: usize = MAGIC_LEN;
pub const FLAGS_AT: usize = VERSION_AT + VERSION_LEN;
pub const LEDGER_AT: usize = FLAGS_AT + FLAGS_LEN;
pub const CHUNK_AT: usize = LEDGER_AT + LEDGER_LEN;
pub const CARDINALITY_AT: usize = CHUNK_AT + CHUNK_LEN;
pub const BITMAP_LEN_AT: usize = CARDINALITY_AT + CARDINALITY_LEN;
/// Bytes before the bitmap.
pub const HEADER_LEN: usize = BITMAP_LEN_AT + BITMAP_LEN_LEN;
/// Bytes a version 1 record adds around its bitmap: header and CRC.
pub const OVERHEAD_LEN: usize = HEADER_LEN + CRC_LEN;

/// Version 2: where the encoding byte sits, right after the version.
pub const ENCODING_AT: usize = VERSION_AT + VERSION_LEN;
/// Version 2: bytes before the key's varints.
pub const V2_FIXED_LEN: usize = ENCODING_AT + 1;
/// Version 2: the shortest record (the empty set of ledger 0, chunk 0).
pub const V2_MIN_LEN: usize = V2_FIXED_LEN + 1 + 1 + CRC_LEN;
/// Version 2: the longest header (a ten-byte ledger id and a seven-byte chunk).
pub const V2_HEADER_MAX: usize = V2_FIXED_LEN + code::MAX_VARINT_LEN + 7;

// The roaring portable format (https://github.com/RoaringBitmap/RoaringFormatSpec), restricted
// to what a partition can hold: at most one container, with key 0.
// Its header is read in one place, `code::portable_layout`, for both format versions.
const CONTAINER_BITMAP_BYTES: usize = (1 << 16) / 8;
/// Cookie, container count, one description and one offset (the layout without runs).
const ROARING_HEADER_MAX: usize = 4 + 4 + 4 + 4;

/// Largest roaring serialization of a partition in its smallest form: a full bitmap container
/// after the longest header (run or array forms are only chosen when smaller).
pub const MAX_BITMAP_BYTES: usize = ROARING_HEADER_MAX + CONTAINER_BITMAP_BYTES;
/// Largest encoded partition record of either version: a version 1 full bitmap container. A
/// version 2 record never exceeds it: its bitmap body covers at most 2^16 - 2 entries after a
/// header of at most 24 bytes, and roaring is chosen only when shorter.
pub const MAX_RECORD_BYTES: usize = OVERHEAD_LEN + MAX_BITMAP_BYTES;

/// Encodes one partition in the current version (2), in the shortest of its encodings (ties go
/// to gaps, then bitmap, then roaring). `bitmap` holds `entry_id - key.first_entry()` for every
/// acked entry of the partition, so every value is below `2^PARTITION_BITS` (the ack set
/// guarantees this; bytes encoded from a bitmap that breaks it are refused by
/// [`decode_partition`]).
#[must_use]
pub fn encode_partition(key: PartitionKey, bitmap: &RoaringBitmap) -> Vec<u8> {
    let (encoding, body) = encoded_body(bitmap);
    frame_v2_code(key, encoding.code(), &body)
}

/// The encoding and body of `bitmap` in version 2 (what a record holds between its key and its
/// CRC): the shortest encoding, or roaring for values outside the partition, which the decoder
/// refuses.
fn encoded_body(bitmap: &RoaringBitmap) -> (PartitionEncoding, Vec<u8>) {
    // The set's bounds from the bitmap (its first and last container's): the dense form's
    // words outside them are zero, and nothing scans them for that.
    let bounds = bitmap.min().zip(bitmap.max());
    if let Some(body) = code::with_words_of(bitmap, |words| smallest_body(words, bounds)) {
        body
    } else {
        let mut smallest = bitmap.clone();
        smallest.optimize();
        let mut body = Vec::with_capacity(smallest.serialized_size());
        // Writing into a Vec cannot fail.
        let _ = smallest.serialize_into(&mut body);
        (PartitionEncoding::Roaring, body)
    }
}

/// A version 2 record around `body` whose encoding byte is `code` (any byte: a record built
/// from an inline form carries the form's byte, valid or not, for the decoder to judge).
fn frame_v2_code(key: PartitionKey, code: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(V2_HEADER_MAX + body.len() + CRC_LEN);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.push(code);
    code::put_varint(&mut out, key.ledger_id);
    code::put_varint(&mut out, key.chunk);
    out.extend_from_slice(body);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The shortest version 2 body of the set `words` holds, whose smallest and largest members
/// are `bounds` (`None`: the empty set), and its encoding.
fn smallest_body(words: &[u64], bounds: Option<(u32, u32)>) -> (PartitionEncoding, Vec<u8>) {
    let Some((lo, hi)) = bounds else {
        return (PartitionEncoding::Empty, Vec::new());
    };
    let span_len = code::span_body_len(lo, hi);
    let roaring_len = code::roaring_len(words, lo, hi);
    // The gaps body is only returned when it is no longer than both others.
    if let Some(gaps) = code::gaps_body(words, lo, hi, span_len.min(roaring_len)) {
        return (PartitionEncoding::Gaps, gaps);
    }
    if span_len <= roaring_len {
        (PartitionEncoding::Bitmap, code::span_body(words, lo, hi))
    } else {
        (
            PartitionEncoding::Roaring,
            code::roaring_body(words, lo, hi),
        )
    }
}

/// Encodes one partition in version 1 (roaring behind a fixed header): what older builds wrote.
/// Kept so that version 1 records can be re-encoded (the decoder's canonical check) and written
/// as samples; new records are version 2 ([`encode_partition`]).
#[must_use]
pub fn encode_partition_v1(key: PartitionKey, bitmap: &RoaringBitmap) -> Vec<u8> {
    let mut smallest = bitmap.clone();
    smallest.optimize();
    let bitmap_len = smallest.serialized_size();
    let mut out = Vec::with_capacity(OVERHEAD_LEN + bitmap_len);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION_1.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&key.ledger_id.to_le_bytes());
    out.extend_from_slice(&key.chunk.to_le_bytes());
    out.extend_from_slice(&saturate_u32(smallest.len()).to_le_bytes());
    out.extend_from_slice(&saturate_u32(bitmap_len as u64).to_le_bytes());
    // Writing into a Vec cannot fail; a failure would leave a record the decoder refuses.
    let _ = smallest.serialize_into(&mut out);
    let crc = crc32fast::hash(&out);
    let _ = out.write_all(&crc.to_le_bytes());
    out
}

/// Decodes one partition record, of either version, which must span all of `bytes`; the
/// error's offset counts from the start of `bytes`.
///
/// Checks, in order: length, magic, CRC (before any other field is trusted), version, then the
/// version's fields: every length and count against what remains and its maximum before
/// anything is allocated, and finally that the bytes are the one encoding the set has in that
/// version. In version 2 that last check does not re-encode the record: the encoding byte must
/// be the one the encoder's pricing picks for the decoded set (priced, no body written), and
/// the body must be that encoding's bytes (a bitmap body by its zero padding and length, a
/// roaring body against the set's canonical roaring form, which the decoder builds anyway, a
/// gaps body by its parameters against the encoder's plan, priced from the gap counts of both
/// classes gathered while its codes were read, and by its length and zero padding). Decoding a
/// version 2 record allocates, whatever the record claims, the set's dense form (a fixed
/// 8 KiB), its smallest roaring form (at most 8 KiB) and, for a gaps record, the two classes'
/// gap counts (3 KiB).
pub fn decode_partition(bytes: &[u8]) -> Result<(PartitionKey, RoaringBitmap), Corruption> {
    let bad = |at: usize, kind: CorruptionKind| Corruption::new(kind, at);
    let covered = checked_record(bytes)?;
    match read_u16(covered, VERSION_AT) {
        VERSION => decode_v2(covered, &bad),
        VERSION_1 => decode_v1(bytes, covered, &bad),
        version => Err(bad(
            VERSION_AT,
            CorruptionKind::UnsupportedVersion(version.into()),
        )),
    }
}

/// The lowest and highest acked offsets of a record, read without decoding its set, when its
/// encoding starts with them (version 2, gaps and bitmap bodies); `None` for the others
/// (empty, roaring, version 1), whose bounds only the whole decoding gives. Returns the key
/// with them.
///
/// What it reads is checked as [`decode_partition`] checks it: length, magic, the CRC over the
/// whole record (before any field is trusted), the version, the encoding byte, the key's
/// varints (valid, the shortest, the chunk at most [`MAX_CHUNK`]) and both bounds (below
/// 2^16). The rest of the body is not read: a record that passes here may still fail the
/// decoder's later checks, which the first load of the partition runs before its set is used.
pub fn peek_bounds(bytes: &[u8]) -> Result<Option<(PartitionKey, u32, u32)>, Corruption> {
    let bad = |at: usize, kind: CorruptionKind| Corruption::new(kind, at);
    let covered = checked_record(bytes)?;
    match read_u16(covered, VERSION_AT) {
        VERSION => {}
        VERSION_1 => return Ok(None),
        version => {
            return Err(bad(
                VERSION_AT,
                CorruptionKind::UnsupportedVersion(version.into()),
            ));
        }
    }
    let (encoding, key, body_at) = v2_header(covered, &bad)?;
    let body = covered.get(body_at..).unwrap_or_default();
    Ok(body_bounds(encoding, body)
        .map_err(|c| c.after(body_at))?
        .map(|(lo, hi)| (key, lo, hi)))
}

/// The lowest and highest acked offsets a version 2 `body` of `encoding` starts with (gaps and
/// bitmap bodies; `None` for the others), both below 2^16; the error's offset counts from the
/// body's start.
fn body_bounds(encoding: PartitionEncoding, body: &[u8]) -> Result<Option<(u32, u32)>, Corruption> {
    if !matches!(
        encoding,
        PartitionEncoding::Gaps | PartitionEncoding::Bitmap
    ) {
        return Ok(None);
    }
    code::body_bounds(body, PARTITION_SPAN)
        .map(Some)
        .map_err(|_| Corruption::new(CorruptionKind::InvalidField("span"), 0))
}

/// The bytes of a record that the CRC covers, after the checks that come before any field is
/// trusted: the length (at least [`V2_MIN_LEN`], at most [`MAX_RECORD_BYTES`]), the magic, and
/// the CRC.
fn checked_record(bytes: &[u8]) -> Result<&[u8], Corruption> {
    let bad = |at: usize, kind: CorruptionKind| Corruption::new(kind, at);
    if bytes.len() < V2_MIN_LEN {
        return Err(bad(bytes.len(), CorruptionKind::Truncated));
    }
    if bytes.get(..MAGIC_LEN) != Some(&MAGIC[..]) {
        return Err(bad(0, CorruptionKind::BadMagic));
    }
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(bad(0, CorruptionKind::BadLength));
    }
    let (covered, stored_crc) = bytes
        .split_last_chunk::<CRC_LEN>()
        .ok_or(bad(bytes.len(), CorruptionKind::Truncated))?;
    if crc32fast::hash(covered) != u32::from_le_bytes(*stored_crc) {
        return Err(bad(covered.len(), CorruptionKind::ChecksumMismatch));
    }
    Ok(covered)
}

/// The encoding, the key and where the body starts, of a version 2 record whose CRC has been
/// checked (`covered` is all but the CRC); the key's varints must be the shortest.
fn v2_header(
    covered: &[u8],
    bad: &dyn Fn(usize, CorruptionKind) -> Corruption,
) -> Result<(PartitionEncoding, PartitionKey, usize), Corruption> {
    let code_byte = covered.get(ENCODING_AT).copied().unwrap_or(u8::MAX);
    let encoding = PartitionEncoding::from_code(code_byte)
        .ok_or_else(|| bad(ENCODING_AT, CorruptionKind::InvalidField("encoding")))?;
    let mut fields = Reader::at(
        covered.get(V2_FIXED_LEN..).unwrap_or_default(),
        V2_FIXED_LEN,
    );
    let ledger_id = fields
        .varint_loose()
        .map_err(|_| bad(V2_FIXED_LEN, CorruptionKind::InvalidField("ledger_id")))?;
    let chunk_at = fields.offset();
    let chunk = fields
        .varint_loose()
        .ok()
        .filter(|&c| c <= MAX_CHUNK)
        .ok_or_else(|| bad(chunk_at, CorruptionKind::InvalidField("chunk")))?;
    let body_at = fields.offset();
    // The key's varints are the shortest ones.
    if body_at != V2_FIXED_LEN + code::varint_len(ledger_id) + code::varint_len(chunk) {
        return Err(bad(
            ENCODING_AT,
            CorruptionKind::InvalidField("partition encoding"),
        ));
    }
    Ok((encoding, PartitionKey { ledger_id, chunk }, body_at))
}

/// The fields of a version 2 record whose CRC has been checked (`covered` is all but the CRC).
fn decode_v2(
    covered: &[u8],
    bad: &dyn Fn(usize, CorruptionKind) -> Corruption,
) -> Result<(PartitionKey, RoaringBitmap), Corruption> {
    let (encoding, key, body_at) = v2_header(covered, bad)?;
    let body = covered.get(body_at..).unwrap_or_default();
    decode_body(encoding, body, ENCODING_AT, body_at, bad).map(|bitmap| (key, bitmap))
}

/// The set of a version 2 `body` of `encoding`, with every check the record decoder makes of
/// a body: it decodes within the partition's span, and `encoding` and `body` are exactly what
/// the encoder writes for that set. Shared by [`decode_partition`] and
/// [`decode_inline`](inline::decode_inline), which has no record around the body: an error
/// about the encoding is at `encoding_at`, one about the body at `body_at`.
fn decode_body(
    encoding: PartitionEncoding,
    body: &[u8],
    encoding_at: usize,
    body_at: usize,
    bad: &dyn Fn(usize, CorruptionKind) -> Corruption,
) -> Result<RoaringBitmap, Corruption> {
    let not_canonical = || {
        bad(
            encoding_at,
            CorruptionKind::InvalidField("partition encoding"),
        )
    };
    let body_error = |e: code::BodyError| match e {
        code::BodyError::Span => bad(body_at, CorruptionKind::InvalidField("span")),
        code::BodyError::Length => bad(body_at, CorruptionKind::BadLength),
        code::BodyError::Code => bad(body_at, CorruptionKind::InvalidField("gap code")),
        code::BodyError::NotCanonical => not_canonical(),
    };
    let bad_bitmap = || bad(body_at, CorruptionKind::InvalidField("bitmap"));
    let mut gaps = None;
    // The set and its smallest and largest members: a gaps or bitmap body names them in its
    // span, and its decoder sets both and nothing outside them; a roaring body's are looked
    // for in the set.
    let (words, bounds) = match encoding {
        PartitionEncoding::Empty if body.is_empty() => (code::empty_words(), None),
        PartitionEncoding::Empty => return Err(bad(body_at, CorruptionKind::BadLength)),
        PartitionEncoding::Roaring | PartitionEncoding::RoaringV1 => {
            let words = code::parse_roaring(body).ok_or_else(bad_bitmap)?;
            let bounds = code::bounds(&words);
            (words, bounds)
        }
        PartitionEncoding::Gaps => {
            let (words, reading) = code::decode_gaps(body, PARTITION_SPAN).map_err(body_error)?;
            gaps = Some(reading);
            let bounds = code::body_bounds(body, PARTITION_SPAN).map_err(body_error)?;
            (words, Some(bounds))
        }
        PartitionEncoding::Bitmap => {
            let words = code::decode_span(body, PARTITION_SPAN).map_err(body_error)?;
            let bounds = code::body_bounds(body, PARTITION_SPAN).map_err(body_error)?;
            (words, Some(bounds))
        }
    };
    debug_assert_eq!(
        bounds,
        code::bounds(&words),
        "a body's span is its set's bounds"
    );
    // Its roaring body; none for the empty set.
    let bounded = bounds.map(|(lo, hi)| (lo, hi, code::roaring_body(&words, lo, hi)));
    // Canonical: the encoding is the one the encoder picks for this set, and the body is the
    // bytes it writes in that encoding. The encoder's choice is priced without writing the
    // bodies it does not pick; each body is compared by the cheapest sufficient test.
    let canonical = match &bounded {
        // Only the empty body decodes to the empty set.
        None => encoding == PartitionEncoding::Empty,
        &Some((lo, hi, ref roaring)) => {
            let span_len = code::span_body_len(lo, hi);
            let budget = span_len.min(roaring.len());
            match encoding {
                // The encoder writes gaps exactly when they fit in `budget`; its plan is priced
                // from the gap counts the decoding gathered.
                PartitionEncoding::Gaps => gaps.is_some_and(|g| g.is_canonical(budget)),
                // Zero padding (checked by `decode_span`) and the shortest span varints: the
                // body has exactly the encoder's length.
                PartitionEncoding::Bitmap => {
                    span_len <= roaring.len()
                        && body.len() == span_len
                        && code::gaps_len(&words, lo, hi, budget).is_none()
                }
                PartitionEncoding::Roaring | PartitionEncoding::RoaringV1 => {
                    span_len > roaring.len()
                        && *roaring == body
                        && code::gaps_len(&words, lo, hi, budget).is_none()
                }
                PartitionEncoding::Empty => false,
            }
        }
    };
    // Every member lies between the bounds (for a gaps or bitmap body by its decoder, above).
    code::keep_words(words, bounds);
    if !canonical {
        return Err(not_canonical());
    }
    match bounded {
        Some((_, _, roaring)) => {
            RoaringBitmap::deserialize_from(&roaring[..]).map_err(|_| bad_bitmap())
        }
        None => Ok(RoaringBitmap::new()),
    }
}

/// The fields of a version 1 record whose CRC has been checked.
fn decode_v1(
    bytes: &[u8],
    covered: &[u8],
    bad: &dyn Fn(usize, CorruptionKind) -> Corruption,
) -> Result<(PartitionKey, RoaringBitmap), Corruption> {
    if bytes.len() < OVERHEAD_LEN {
        return Err(bad(bytes.len(), CorruptionKind::Truncated));
    }
    if read_u16(covered, FLAGS_AT) != 0 {
        return Err(bad(FLAGS_AT, CorruptionKind::InvalidField("flags")));
    }
    let key = PartitionKey {
        ledger_id: read_u64(covered, LEDGER_AT),
        chunk: read_u64(covered, CHUNK_AT),
    };
    if key.chunk > MAX_CHUNK {
        return Err(bad(CHUNK_AT, CorruptionKind::InvalidField("chunk")));
    }
    let cardinality = u64::from(read_u32(covered, CARDINALITY_AT));
    if cardinality > PARTITION_SPAN {
        return Err(bad(
            CARDINALITY_AT,
            CorruptionKind::InvalidField("cardinality"),
        ));
    }
    let bitmap_len = read_u32(covered, BITMAP_LEN_AT) as usize;
    let body = covered.get(HEADER_LEN..).unwrap_or_default();
    if bitmap_len > MAX_BITMAP_BYTES || bitmap_len != body.len() {
        return Err(bad(BITMAP_LEN_AT, CorruptionKind::BadLength));
    }
    if code::portable_layout(body).map(|l| l.len()) != Some(body.len()) {
        return Err(bad(HEADER_LEN, CorruptionKind::InvalidField("bitmap")));
    }
    let bitmap = RoaringBitmap::deserialize_from(body)
        .map_err(|_| bad(HEADER_LEN, CorruptionKind::InvalidField("bitmap")))?;
    if bitmap.len() != cardinality {
        return Err(bad(
            CARDINALITY_AT,
            CorruptionKind::InvalidField("cardinality"),
        ));
    }
    if encode_partition_v1(key, &bitmap) != bytes {
        return Err(bad(
            HEADER_LEN,
            CorruptionKind::InvalidField("bitmap encoding"),
        ));
    }
    Ok((key, bitmap))
}

fn read_u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Reader::new(bytes.get(at..)?).u16().ok()
}

fn read_u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Reader::new(bytes.get(at..)?).u32().ok()
}

/// Header fields: `at` lies within the header, whose length the caller has checked.
fn read_u16(header: &[u8], at: usize) -> u16 {
    read_u16_at(header, at).unwrap_or_default()
}

fn read_u32(header: &[u8], at: usize) -> u32 {
    read_u32_at(header, at).unwrap_or_default()
}

fn read_u64(header: &[u8], at: usize) -> u64 {
    header
        .get(at..)
        .and_then(|b| Reader::new(b).u64().ok())
        .unwrap_or_default()
}

fn saturate_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

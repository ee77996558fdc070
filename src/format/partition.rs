//! The ack partition record: one partition of a cursor's acknowledged-entry set.
//!
//! Owns: the partition key ([`PartitionKey`], [`PARTITION_BITS`]) and the byte layout of one
//! encoded partition. Must never: perform I/O, panic on any input, or allocate more than the
//! input it decodes.
//!
//! Layout (all integers little-endian; drawn in `docs/format.md`, section "Ack partition"):
//!
//! ```text
//! offset  size  field
//!  0       4    magic        b"AckP"
//!  4       2    version      1
//!  6       2    flags        0 (reserved)
//!  8       8    ledger_id    data ledger the entries belong to
//! 16       8    chunk        entry_id >> PARTITION_BITS, at most MAX_CHUNK
//! 24       4    cardinality  number of acked entries, 0..=2^PARTITION_BITS
//! 28       4    bitmap_len   n, at most MAX_BITMAP_BYTES
//! 32       n    bitmap       roaring portable serialization of (entry_id - first_entry)
//! 32+n     4    crc32        CRC-32 (IEEE) of bytes [0, 32+n): header and bitmap
//! ```
//!
//! The bitmap is always written in its smallest form (`RoaringBitmap::optimize`), so one set of
//! entries has exactly one encoding, and the decoder refuses any other: what decodes re-encodes
//! to the same bytes.

use std::io::Write as _;

use byteorder::{ByteOrder as _, LittleEndian};
use roaring::RoaringBitmap;

use crate::error::{CorruptionKind, Error, Result};
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
/// The only format version this build writes and reads.
pub const VERSION: u16 = 1;

const MAGIC_LEN: usize = MAGIC.len();
const VERSION_LEN: usize = 2;
const FLAGS_LEN: usize = 2;
const LEDGER_LEN: usize = 8;
const CHUNK_LEN: usize = 8;
const CARDINALITY_LEN: usize = 4;
const BITMAP_LEN_LEN: usize = 4;
const CRC_LEN: usize = 4;

const VERSION_AT: usize = MAGIC_LEN;
const FLAGS_AT: usize = VERSION_AT + VERSION_LEN;
const LEDGER_AT: usize = FLAGS_AT + FLAGS_LEN;
const CHUNK_AT: usize = LEDGER_AT + LEDGER_LEN;
const CARDINALITY_AT: usize = CHUNK_AT + CHUNK_LEN;
const BITMAP_LEN_AT: usize = CARDINALITY_AT + CARDINALITY_LEN;
/// Bytes before the bitmap.
pub const HEADER_LEN: usize = BITMAP_LEN_AT + BITMAP_LEN_LEN;
/// Bytes a record adds around its bitmap: header and CRC.
pub const OVERHEAD_LEN: usize = HEADER_LEN + CRC_LEN;

// The roaring portable format (https://github.com/RoaringBitmap/RoaringFormatSpec), restricted
// to what a partition can hold: at most one container, with key 0.
const COOKIE_NO_RUNS: u32 = 12346;
const COOKIE_RUNS: u16 = 12347;
const ARRAY_LIMIT: usize = 4096;
const CONTAINER_BITMAP_BYTES: usize = (1 << 16) / 8;
/// Cookie, container count, one description and one offset (the layout without runs).
const ROARING_HEADER_MAX: usize = 4 + 4 + 4 + 4;

/// Largest roaring serialization of a partition in its smallest form: a full bitmap container
/// after the longest header (run or array forms are only chosen when smaller).
pub const MAX_BITMAP_BYTES: usize = ROARING_HEADER_MAX + CONTAINER_BITMAP_BYTES;
/// Largest encoded partition record.
pub const MAX_RECORD_BYTES: usize = OVERHEAD_LEN + MAX_BITMAP_BYTES;

/// Encodes one partition. `bitmap` holds `entry_id - key.first_entry()` for every acked entry
/// of the partition, so every value is below `2^PARTITION_BITS` (the ack set guarantees this;
/// bytes encoded from a bitmap that breaks it are refused by [`decode_partition`]).
#[must_use]
pub fn encode_partition(key: PartitionKey, bitmap: &RoaringBitmap) -> Vec<u8> {
    let mut smallest = bitmap.clone();
    smallest.optimize();
    let bitmap_len = smallest.serialized_size();
    let mut out = Vec::with_capacity(OVERHEAD_LEN + bitmap_len);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
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

/// Decodes one partition record, which must span all of `bytes`.
///
/// On failure the error is [`Error::Corrupted`] with `ledger` 0 and `offset` relative to the start
/// of `bytes`; callers that know where the record lives use [`decode_partition_at`].
pub fn decode_partition(bytes: &[u8]) -> Result<(PartitionKey, RoaringBitmap)> {
    decode_partition_at(bytes, 0, 0)
}

/// Decodes one partition record that was read from `ledger` at byte `offset`; errors name them.
///
/// Checks, in order: length, magic, CRC (before any other field is trusted), version, flags,
/// lengths against what remains and their maxima, the roaring header against the exact bitmap
/// length (so nothing larger than the input is allocated), the cardinality, and that the bytes
/// are the one encoding [`encode_partition`] writes.
pub fn decode_partition_at(
    bytes: &[u8],
    ledger: u64,
    offset: u64,
) -> Result<(PartitionKey, RoaringBitmap)> {
    let bad = |at: usize, kind: CorruptionKind| {
        Error::corrupted(ledger, offset.saturating_add(at as u64), kind)
    };
    if bytes.len() < OVERHEAD_LEN {
        return Err(bad(bytes.len(), CorruptionKind::Truncated));
    }
    if bytes.get(..MAGIC_LEN) != Some(&MAGIC[..]) {
        return Err(bad(0, CorruptionKind::BadMagic));
    }
    let crc_at = bytes.len() - CRC_LEN;
    let (covered, stored_crc) = bytes.split_at(crc_at);
    if crc32fast::hash(covered) != LittleEndian::read_u32(stored_crc) {
        return Err(bad(crc_at, CorruptionKind::ChecksumMismatch));
    }
    let version = read_u16(covered, VERSION_AT);
    if version != VERSION {
        return Err(bad(
            VERSION_AT,
            CorruptionKind::UnsupportedVersion(version.into()),
        ));
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
    if roaring_len(body) != Some(body.len()) {
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
    if encode_partition(key, &bitmap) != bytes {
        return Err(bad(
            HEADER_LEN,
            CorruptionKind::InvalidField("bitmap encoding"),
        ));
    }
    Ok((key, bitmap))
}

/// The length the roaring serialization at the start of `body` must have, read from its header,
/// when it describes what a partition can hold (no container, or one container with key 0);
/// `None` otherwise.
fn roaring_len(body: &[u8]) -> Option<usize> {
    let cookie = read_u32_at(body, 0)?;
    // (where the container description starts, whether the container is a run container)
    let (description_at, run) = if cookie == COOKIE_NO_RUNS {
        match read_u32_at(body, 4)? {
            0 => return Some(8),
            1 => (8, false),
            _ => return None,
        }
    } else if cookie & 0xFFFF == u32::from(COOKIE_RUNS) && cookie >> 16 == 0 {
        // One container; a one-byte run flag set follows the cookie, no offsets (fewer than 4).
        match body.get(4)? {
            0 => (5, false),
            1 => (5, true),
            _ => return None,
        }
    } else {
        return None;
    };
    if read_u16_at(body, description_at)? != 0 {
        return None;
    }
    let cardinality = usize::from(read_u16_at(body, description_at + 2)?) + 1;
    let data_at = if cookie == COOKIE_NO_RUNS {
        description_at + 8
    } else {
        description_at + 4
    };
    let data_len = if run {
        2 + 4 * usize::from(read_u16_at(body, data_at)?)
    } else if cardinality <= ARRAY_LIMIT {
        2 * cardinality
    } else {
        CONTAINER_BITMAP_BYTES
    };
    Some(data_at + data_len)
}

fn read_u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    bytes.get(at..at + 2).map(LittleEndian::read_u16)
}

fn read_u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    bytes.get(at..at + 4).map(LittleEndian::read_u32)
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
        .get(at..at + 8)
        .map(LittleEndian::read_u64)
        .unwrap_or_default()
}

fn saturate_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ledger_id: u64, chunk: u64) -> PartitionKey {
        PartitionKey { ledger_id, chunk }
    }

    fn roundtrip(bitmap: &RoaringBitmap) -> Vec<u8> {
        let k = key(7, 3);
        let bytes = encode_partition(k, bitmap);
        let (k2, b2) = decode_partition(&bytes).expect("own encoding decodes");
        assert_eq!((k2, &b2), (k, bitmap));
        bytes
    }

    #[test]
    fn header_offsets_follow_the_documented_layout() {
        assert_eq!((VERSION_AT, FLAGS_AT, LEDGER_AT, CHUNK_AT), (4, 6, 8, 16));
        assert_eq!((CARDINALITY_AT, BITMAP_LEN_AT, HEADER_LEN), (24, 28, 32));
        assert_eq!(OVERHEAD_LEN, 36);
        assert_eq!(MAX_BITMAP_BYTES, 8208);
        assert_eq!(MAX_RECORD_BYTES, 8244);
    }

    #[test]
    fn encoded_sizes_are_pinned() {
        // Empty: cookie + container count.
        assert_eq!(roundtrip(&RoaringBitmap::new()).len(), 36 + 8);
        // One value, array form: cookie, count, description, offset, one u16.
        assert_eq!(roundtrip(&RoaringBitmap::from([5])).len(), 36 + 16 + 2);
        // 100 sparse values: array of 100 u16.
        let sparse: RoaringBitmap = (0..100).map(|i| i * 100).collect();
        assert_eq!(roundtrip(&sparse).len(), 36 + 16 + 200);
        // A full partition collapses to one run: cookie, run flags, description, run count, run.
        let full: RoaringBitmap = (0..1 << 16).collect();
        assert_eq!(roundtrip(&full).len(), 36 + 4 + 1 + 4 + 2 + 4);
        // Every other entry: the 8 KiB bitmap container, the largest form.
        let alternating: RoaringBitmap = (0..1 << 16).step_by(2).collect();
        assert_eq!(roundtrip(&alternating).len(), MAX_RECORD_BYTES);
    }

    #[test]
    fn encoding_is_canonical_whatever_the_in_memory_form() {
        let mut a: RoaringBitmap = (10..5000).collect();
        let b = a.clone();
        a.optimize();
        assert_eq!(
            encode_partition(key(1, 1), &a),
            encode_partition(key(1, 1), &b)
        );
    }

    #[test]
    fn key_maps_positions_to_chunks_and_back() {
        let p = Position::new(9, (5 << PARTITION_BITS) + 17);
        let k = PartitionKey::of(p);
        assert_eq!(k, key(9, 5));
        assert_eq!(k.first_entry(), 5 << 16);
        assert_eq!(k.last_entry(), (6 << 16) - 1);
        assert_eq!(k.position(PartitionKey::offset_of(p.entry_id)), p);
        let top = PartitionKey::of(Position::new(1, u64::MAX));
        assert_eq!(top.chunk, MAX_CHUNK);
        assert_eq!(top.last_entry(), u64::MAX);
    }

    fn corruption(bytes: &[u8]) -> CorruptionKind {
        match decode_partition(bytes) {
            Err(Error::Corrupted { kind, .. }) => kind,
            other => panic!("expected corruption, got {other:?}"),
        }
    }

    fn with_crc(mut bytes: Vec<u8>) -> Vec<u8> {
        let at = bytes.len() - CRC_LEN;
        let crc = crc32fast::hash(&bytes[..at]);
        bytes[at..].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    #[test]
    fn decoder_names_what_is_wrong() {
        let good = encode_partition(key(1, 2), &RoaringBitmap::from([1, 2, 3]));
        assert_eq!(corruption(&good[..10]), CorruptionKind::Truncated);
        let mut flipped = good.clone();
        flipped[0] ^= 1;
        assert_eq!(corruption(&flipped), CorruptionKind::BadMagic);
        let mut flipped = good.clone();
        flipped[HEADER_LEN] ^= 1;
        assert_eq!(corruption(&flipped), CorruptionKind::ChecksumMismatch);
        let mut v2 = good.clone();
        v2[VERSION_AT] = 2;
        assert_eq!(
            corruption(&with_crc(v2)),
            CorruptionKind::UnsupportedVersion(2)
        );
        let mut card = good.clone();
        card[CARDINALITY_AT] = 4;
        assert_eq!(
            corruption(&with_crc(card)),
            CorruptionKind::InvalidField("cardinality")
        );
        let mut long = good.clone();
        long[BITMAP_LEN_AT] += 1;
        assert_eq!(corruption(&with_crc(long)), CorruptionKind::BadLength);
    }

    #[test]
    fn decoder_refuses_values_outside_the_partition() {
        // A second container (values >= 2^16) is not something a partition can hold.
        let bytes = encode_partition(key(1, 2), &RoaringBitmap::from([1, 1 << 16]));
        assert_eq!(corruption(&bytes), CorruptionKind::InvalidField("bitmap"));
    }

    #[test]
    fn decoder_refuses_non_canonical_bitmaps() {
        // The same values in array form although the run form is smaller.
        let values: RoaringBitmap = (0..100).collect();
        let mut body = Vec::new();
        values.serialize_into(&mut body).expect("vec write");
        let mut bytes = encode_partition(key(1, 2), &RoaringBitmap::new());
        bytes.truncate(HEADER_LEN);
        bytes[CARDINALITY_AT..CARDINALITY_AT + 4].copy_from_slice(&100u32.to_le_bytes());
        let len = u32::try_from(body.len()).expect("small");
        bytes[BITMAP_LEN_AT..BITMAP_LEN_AT + 4].copy_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(&body);
        bytes.extend_from_slice(&[0; CRC_LEN]);
        assert_eq!(
            corruption(&with_crc(bytes)),
            CorruptionKind::InvalidField("bitmap encoding")
        );
    }

    #[test]
    fn errors_carry_the_callers_location() {
        let err = decode_partition_at(b"short", 42, 1000).expect_err("too short");
        assert!(matches!(
            err,
            Error::Corrupted {
                ledger: 42,
                offset: 1005,
                kind: CorruptionKind::Truncated
            }
        ));
    }
}

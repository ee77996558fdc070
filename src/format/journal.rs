//! The store's cursor journal: segment header and record frames.
//!
//! Owns: the bytes of a journal segment file (`journal-{seq:016}.seg`). A segment is a header,
//! then records appended back to back, then zeros (or nothing). Every record carries one
//! cursor's partition, marker or deletion; the payloads of partitions and markers are the
//! cursor-ledger payloads of [`crate::format::cursor`], unchanged. All integers little-endian.
//!
//! ```text
//! segment header (SEGMENT_HEADER_LEN = 24 bytes)
//! 0   8  magic "ACKSJRNL"
//! 8   2  version (1)
//! 10  2  flags (0)
//! 12  8  segment sequence number (the number in the file name)
//! 20  4  CRC32 of bytes [0, 20)
//!
//! record frame (RECORD_HEADER_LEN = 8 bytes, then the body)
//! 0   4  body length n (0: no record here, the end of the segment)
//! 4   4  CRC32 of bytes [0, 4) and of the body
//! 8   n  body: kind u8 | topic id u64 | cursor id u64 | payload (n - 17 bytes)
//! ```
//!
//! Kinds: 1 partition (payload: a cursor-ledger partition entry), 2 marker (payload: a
//! cursor-ledger marker with an inline table, whose row `entry_id` is a journal location, see
//! [`JournalLoc`], and whose row `crc` is the CRC32 of the partition record's payload),
//! 3 forget (the cursor was deleted; empty payload).

use super::{Corruption, Reader};
use crate::error::CorruptionKind;

/// Magic at the start of every segment.
pub const SEGMENT_MAGIC: [u8; 8] = *b"ACKSJRNL";
/// Segment format version this build writes and reads.
pub const SEGMENT_VERSION: u16 = 1;
/// Bytes of the segment header: magic, version, flags, sequence, CRC.
pub const SEGMENT_HEADER_LEN: usize = 8 + 2 + 2 + 8 + 4;
/// Bytes of a record frame before its body: length, CRC.
pub const RECORD_HEADER_LEN: usize = 4 + 4;
/// Bytes of a record body before its payload: kind, topic, cursor.
pub const BODY_FIXED_LEN: usize = 1 + 8 + 8;
/// Largest record body accepted (a marker of about 1.8 million partitions).
pub const MAX_BODY_LEN: usize = 64 << 20;
/// Largest segment sequence number: it must fit the high half of a [`JournalLoc`].
pub const MAX_SEGMENT: u64 = u32::MAX as u64;

/// What a journal record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// One ack partition of a cursor, not committed until a marker references it.
    Partition = 1,
    /// The commit point of one cursor's flush: its state and every live partition's location.
    Marker = 2,
    /// The cursor was deleted: none of its earlier records count.
    Forget = 3,
}

impl RecordKind {
    fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Partition),
            2 => Some(Self::Marker),
            3 => Some(Self::Forget),
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

/// The header of segment `seq`.
#[must_use]
pub fn encode_segment_header(seq: u64) -> [u8; SEGMENT_HEADER_LEN] {
    let mut out = [0u8; SEGMENT_HEADER_LEN];
    let mut body = Vec::with_capacity(SEGMENT_HEADER_LEN);
    body.extend_from_slice(&SEGMENT_MAGIC);
    body.extend_from_slice(&SEGMENT_VERSION.to_le_bytes());
    body.extend_from_slice(&0u16.to_le_bytes());
    body.extend_from_slice(&seq.to_le_bytes());
    let crc = crc32fast::hash(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    out.copy_from_slice(&body);
    out
}

/// Checks a segment header; returns its sequence number.
pub fn decode_segment_header(bytes: &[u8]) -> Result<u64, Corruption> {
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
    if version != SEGMENT_VERSION {
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
    Ok(seq)
}

/// Appends the frame of one record to `out`.
pub fn encode_record(out: &mut Vec<u8>, record: &Record<'_>) {
    let body_len = BODY_FIXED_LEN + record.payload.len();
    // Callers keep payloads under MAX_BODY_LEN (markers and partitions are bounded far below).
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
/// `BadLength` for a forget with a payload.
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
    if kind == RecordKind::Forget && !payload.is_empty() {
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

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn headers_and_records_round_trip_at_their_documented_sizes() {
        let h = encode_segment_header(7);
        assert_eq!(h.len(), 24);
        assert_eq!(decode_segment_header(&h).unwrap(), 7);
        let mut out = Vec::new();
        let rec = Record {
            kind: RecordKind::Marker,
            topic: 3,
            cursor: 9,
            payload: b"payload",
        };
        encode_record(&mut out, &rec);
        assert_eq!(out.len(), record_len(7));
        assert_eq!(out.len(), 8 + 17 + 7);
        assert_eq!(decode_record(&out).unwrap(), Some((rec, out.len())));
        assert_eq!(decode_record(&[0; 8]).unwrap(), None);
        assert_eq!(decode_record(&[]).unwrap(), None);
    }

    #[test]
    fn every_truncation_and_flipped_bit_of_a_record_is_refused() {
        let mut out = Vec::new();
        encode_record(
            &mut out,
            &Record {
                kind: RecordKind::Partition,
                topic: 1,
                cursor: 2,
                payload: &[5; 20],
            },
        );
        for n in 1..out.len() {
            assert!(decode_record(&out[..n]).is_err(), "prefix {n}");
        }
        for i in 0..out.len() * 8 {
            let mut b = out.clone();
            b[i / 8] ^= 1 << (i % 8);
            assert!(!matches!(decode_record(&b), Ok(Some(_))), "bit {i}");
        }
        let h = encode_segment_header(1);
        for i in 0..h.len() * 8 {
            let mut b = h;
            b[i / 8] ^= 1 << (i % 8);
            assert!(decode_segment_header(&b).is_err(), "header bit {i}");
        }
    }

    #[test]
    fn locations_pack_into_one_marker_row_field() {
        let loc = JournalLoc {
            segment: 5,
            offset: 1234,
        };
        assert_eq!(JournalLoc::unpack(loc.pack().unwrap()), loc);
        assert_eq!(
            JournalLoc {
                segment: 1 << 32,
                offset: 0
            }
            .pack(),
            None
        );
    }
}

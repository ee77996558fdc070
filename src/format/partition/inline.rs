//! The *inline form* of a version 2 partition record: the record without the bytes a table row
//! that holds it already carries or protects.
//!
//! Owns: converting between a version 2 record and its inline form, and decoding an inline
//! form. A row of a compact partition table (`format::cursor`, kinds 7 and 8) names the
//! partition's key and sits inside an entry whose CRC covers it, so the record's magic,
//! version, key varints and CRC say nothing the row does not; the row keeps only the rest:
//!
//! ```text
//! version 2 record                              inline form
//! offset  size  field                           offset  size  field
//!  0       4    magic     b"AckP"               (implied)
//!  4       2    version   2                     (implied)
//!  6       1    encoding  0..=3                  0       1    encoding
//!  7      1-10  ledger_id varint                (the row's key)
//!  .      1-7   chunk     varint                (the row's key)
//!  .       b    body                             1       b    body
//!  .       4    crc32 of all before             (the entry's CRC covers the row)
//! ```
//!
//! Decoding runs the record decoder's checks of the key, the length and the body on the inline
//! form as it stands (no record is rebuilt), so an inline form is accepted exactly when its
//! record ([`record_of_inline`]) is: the same checks, the same one encoding per set. Must
//! never: accept a version 1 record as an inline form (its layout differs; such records stay
//! in their own entries).

use roaring::RoaringBitmap;

use super::{
    CRC_LEN, MAGIC, MAX_CHUNK, MAX_RECORD_BYTES, PartitionEncoding, PartitionKey, V2_FIXED_LEN,
    VERSION, VERSION_AT, body_bounds, code, decode_body, encoded_body, frame_v2_code,
};
use crate::error::CorruptionKind;
use crate::format::{Corruption, Reader};

/// Bytes a version 2 record of `key` has beyond its inline form: magic, version, the key's
/// varints and the CRC.
#[must_use]
pub fn inline_overhead(key: PartitionKey) -> usize {
    V2_FIXED_LEN - 1 + code::varint_len(key.ledger_id) + code::varint_len(key.chunk) + CRC_LEN
}

/// The inline form of `record`: its encoding byte and body. `None` unless `record` is a
/// version 2 record whose CRC holds and whose key varints are the shortest (every record this
/// build writes); the body itself is not checked here (decoding the inline form checks it).
#[must_use]
pub fn inline_form(record: &[u8]) -> Option<Vec<u8>> {
    if record.get(..MAGIC.len()) != Some(&MAGIC[..]) {
        return None;
    }
    let (covered, crc) = record.split_last_chunk::<CRC_LEN>()?;
    if crc32fast::hash(covered) != u32::from_le_bytes(*crc) {
        return None;
    }
    let mut header = Reader::new(covered.get(VERSION_AT..)?);
    if header.u16().ok()? != VERSION {
        return None;
    }
    let encoding = header.u8().ok()?;
    header.varint().ok()?;
    header.varint().ok()?;
    let body = header.rest();
    let mut out = Vec::with_capacity(1 + body.len());
    out.push(encoding);
    out.extend_from_slice(body);
    Some(out)
}

/// The inline form of `bitmap`: [`inline_form`] of [`encode_partition`](super::encode_partition) of it under any key,
/// written without the record around it ([`put_inline`]).
#[must_use]
pub fn encode_inline(bitmap: &RoaringBitmap) -> Vec<u8> {
    let mut out = Vec::new();
    put_inline(&mut out, bitmap);
    out
}

/// Appends the inline form of `bitmap` to `out`: its encoding byte, then its body.
pub fn put_inline(out: &mut Vec<u8>, bitmap: &RoaringBitmap) {
    let (encoding, body) = encoded_body(bitmap);
    out.reserve(1 + body.len());
    out.push(encoding.code());
    out.extend_from_slice(&body);
}

/// The lowest and highest acked offsets of an inline form, read without decoding its set, as
/// [`peek_bounds`](super::peek_bounds) reads them from a record: `None` for an encoding that
/// does not start with them; the encoding byte and both bounds (below 2^16) checked, the rest
/// of the body not read (decoding checks it). The error's offset counts from the start of
/// `inline`.
pub fn peek_inline_bounds(inline: &[u8]) -> Result<Option<(u32, u32)>, Corruption> {
    let (code, body) = inline
        .split_first()
        .ok_or(Corruption::new(CorruptionKind::Truncated, 0))?;
    let encoding = PartitionEncoding::from_code(*code)
        .ok_or(Corruption::new(CorruptionKind::InvalidField("encoding"), 0))?;
    body_bounds(encoding, body).map_err(|c| c.after(1))
}

/// The version 2 record of partition `key` whose inline form is `inline` (at least the
/// encoding byte; an empty `inline` gives a record the decoder refuses).
#[must_use]
pub fn record_of_inline(key: PartitionKey, inline: &[u8]) -> Vec<u8> {
    let (encoding, body) = inline
        .split_first()
        .map_or((u8::MAX, &[][..]), |(e, b)| (*e, b));
    frame_v2_code(key, encoding, body)
}

/// Decodes the inline form of partition `key` (what [`decode_partition`](super::decode_partition) accepts of the
/// record [`record_of_inline`] rebuilds, nothing else, without rebuilding it); the error's
/// offset counts from the start of `inline`: 0 for the key, the length and the encoding byte,
/// 1 for the body.
pub fn decode_inline(key: PartitionKey, inline: &[u8]) -> Result<RoaringBitmap, Corruption> {
    let bad = |at: usize, kind: CorruptionKind| Corruption::new(kind, at);
    let (code, body) = inline
        .split_first()
        .ok_or(bad(0, CorruptionKind::Truncated))?;
    if inline_overhead(key) + inline.len() > MAX_RECORD_BYTES {
        return Err(bad(0, CorruptionKind::BadLength));
    }
    let encoding = PartitionEncoding::from_code(*code)
        .ok_or(bad(0, CorruptionKind::InvalidField("encoding")))?;
    if key.chunk > MAX_CHUNK {
        return Err(bad(0, CorruptionKind::InvalidField("chunk")));
    }
    decode_body(encoding, body, 0, 1, &bad)
}

//! The payload of a journal partition record (kind 1), in each segment version.
//!
//! Owns: the bytes of a partition record's payload and reading its key, cardinality, bounds
//! and set back. Must never: perform I/O, panic on any input, or trust a field the record
//! frame's CRC has not covered (the caller decodes a payload only from a frame that verified).
//!
//! ```text
//! version 7 (written): the partition carried directly
//! offset  size  field
//! 0       1-10  ledger_id    varint, shortest form
//! .       1-7   chunk        varint, shortest form, at most MAX_CHUNK
//! .       1-3   cardinality  varint, shortest form, at most 2^16: acked entries
//! .       1     encoding     0..=3, as an ack partition record's (`format::partition`)
//! .       b     body         per encoding, as an ack partition record's
//!
//! versions 1 to 6 (read only): a cursor-ledger partition entry (`AKCL`, kind 1: its own
//! magic, key, cardinality and CRC) around an ack partition record (its own magic, key and
//! CRC)
//! ```
//!
//! A version 7 payload has no CRC of its own: the record frame's CRC covers it (with the
//! frame's length, kind, topic and cursor ids), and the encoding byte and body are the ack
//! partition record's *inline form* (`format::partition::inline_form`): the record without its
//! magic, version, key and CRC, decoded by the record decoder with every check it makes.

use roaring::RoaringBitmap;

use super::SEGMENT_VERSION_V7;
use crate::error::CorruptionKind;
use crate::format::cursor::decode_partition_entry;
use crate::format::partition::{
    MAX_CHUNK, PARTITION_SPAN, PartitionKey, decode_inline, decode_partition, peek_bounds,
    peek_inline_bounds, put_inline,
};
use crate::format::{Corruption, Reader, put_varint};

/// The payload of a version 7 partition record of `key` holding `bitmap` (offsets within the
/// partition).
#[must_use]
pub fn encode_partition_payload(key: PartitionKey, bitmap: &RoaringBitmap) -> Vec<u8> {
    let mut out = Vec::new();
    put_partition_payload(&mut out, key, bitmap);
    out
}

/// Appends [`encode_partition_payload`]'s bytes to `out`, for a caller that encodes many
/// partitions into one buffer.
pub fn put_partition_payload(out: &mut Vec<u8>, key: PartitionKey, bitmap: &RoaringBitmap) {
    put_varint(out, key.ledger_id);
    put_varint(out, key.chunk);
    put_varint(out, bitmap.len());
    put_inline(out, bitmap);
}

/// How a decoded payload holds its set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Set<'a> {
    /// Version 7: the ack partition record's inline form.
    Inline(&'a [u8]),
    /// Versions 1 to 6: a whole ack partition record, with its own key and CRC.
    Record(&'a [u8]),
}

/// A partition record's payload: its key and cardinality, read; its set, not yet decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionPayload<'a> {
    /// The partition.
    pub key: PartitionKey,
    /// Acked entries in it, as the payload states them.
    pub cardinality: u64,
    set: Set<'a>,
    /// Where the set starts in the payload.
    set_at: usize,
}

/// The key and cardinality of the payload of a partition record of a segment of `version`,
/// its set not decoded: in version 7 the three varints (shortest forms, the chunk at most
/// [`MAX_CHUNK`], the cardinality at most 2^16) and a set of at least its encoding byte;
/// before, the cursor-ledger partition entry's frame and CRC.
///
/// # Errors
/// `Truncated`, `InvalidField("varint")`, `("chunk")`, `("cardinality")`, and those of
/// [`decode_partition_entry`] before version 7 (offsets within the payload).
pub fn decode_partition_payload(
    payload: &[u8],
    version: u16,
) -> Result<PartitionPayload<'_>, Corruption> {
    if version < SEGMENT_VERSION_V7 {
        let entry = decode_partition_entry(payload)?;
        let set_at = payload.len().saturating_sub(entry.body.len() + 4);
        return Ok(PartitionPayload {
            key: PartitionKey {
                ledger_id: entry.ledger_id,
                chunk: entry.chunk,
            },
            cardinality: entry.cardinality,
            set: Set::Record(entry.body),
            set_at,
        });
    }
    let mut r = Reader::new(payload);
    // A varint in its shortest form, at most `max`.
    let mut field = |max: u64, name: &'static str| {
        let at = r.offset();
        let value = r.varint()?;
        if value > max {
            return Err(Corruption::new(CorruptionKind::InvalidField(name), at));
        }
        Ok(value)
    };
    let ledger_id = field(u64::MAX, "ledger_id")?;
    let chunk = field(MAX_CHUNK, "chunk")?;
    let cardinality = field(PARTITION_SPAN, "cardinality")?;
    let set_at = r.offset();
    let inline = r.rest();
    if inline.is_empty() {
        return Err(Corruption::new(CorruptionKind::Truncated, set_at));
    }
    Ok(PartitionPayload {
        key: PartitionKey { ledger_id, chunk },
        cardinality,
        set: Set::Inline(inline),
        set_at,
    })
}

impl PartitionPayload<'_> {
    /// The set, decoded with every check of the ack partition record decoder
    /// ([`decode_partition`]); its key must be the payload's, and its size the cardinality.
    ///
    /// # Errors
    /// The decoder's, `InvalidField("partition key")` for a record of another key,
    /// `InvalidField("cardinality")` for a set of another size (offsets within the payload).
    pub fn bitmap(&self) -> Result<RoaringBitmap, Corruption> {
        let bitmap = match self.set {
            Set::Inline(inline) => decode_inline(self.key, inline),
            Set::Record(record) => decode_partition(record).and_then(|(found, bitmap)| {
                (found == self.key).then_some(bitmap).ok_or(Corruption::new(
                    CorruptionKind::InvalidField("partition key"),
                    0,
                ))
            }),
        }
        .map_err(|c| c.after(self.set_at))?;
        if bitmap.len() != self.cardinality {
            return Err(Corruption::new(
                CorruptionKind::InvalidField("cardinality"),
                0,
            ));
        }
        Ok(bitmap)
    }

    /// The lowest and highest acked offsets of the set, read without decoding it, when its
    /// encoding starts with them (see [`peek_bounds`]); `None` otherwise. A set of
    /// `cardinality` members spans at least that many offsets.
    ///
    /// # Errors
    /// Those of [`peek_bounds`] (or of its inline form), `InvalidField("partition key")` for a
    /// record of another key, `InvalidField("partition span")` for bounds too close for the
    /// cardinality (offsets within the payload).
    pub fn bounds(&self) -> Result<Option<(u32, u32)>, Corruption> {
        let bounds = match self.set {
            Set::Inline(inline) => peek_inline_bounds(inline),
            Set::Record(record) => peek_bounds(record).and_then(|peeked| match peeked {
                Some((found, lo, hi)) if found == self.key => Ok(Some((lo, hi))),
                Some(_) => Err(Corruption::new(
                    CorruptionKind::InvalidField("partition key"),
                    0,
                )),
                None => Ok(None),
            }),
        }
        .map_err(|c| c.after(self.set_at))?;
        match bounds {
            Some((lo, hi)) if u64::from(hi.saturating_sub(lo)) + 1 < self.cardinality => Err(
                Corruption::new(CorruptionKind::InvalidField("partition span"), 0),
            ),
            _ => Ok(bounds),
        }
    }
}

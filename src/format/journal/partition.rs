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
    put_varint(&mut out, key.ledger_id);
    put_varint(&mut out, key.chunk);
    put_varint(&mut out, bitmap.len());
    put_inline(&mut out, bitmap);
    out
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

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use crate::format::cursor::encode_partition_payload as encode_wrapped;
    use crate::format::journal::SEGMENT_VERSION_V6;
    use proptest::prelude::*;

    fn key(ledger_id: u64, chunk: u64) -> PartitionKey {
        PartitionKey { ledger_id, chunk }
    }

    /// What a version 7 payload costs beyond its set's inline form: the key's and the
    /// cardinality's varints, no magic and no CRC. A partition of a data ledger id below 2^14
    /// in its first chunk, under 128 acked entries, costs 3 bytes before its encoding byte.
    #[test]
    fn a_version_7_payload_is_the_key_the_cardinality_and_the_inline_form() {
        let set = [3u32, 9, 10, 11, 40_000]
            .into_iter()
            .collect::<RoaringBitmap>();
        let k = key(1234, 0);
        let payload = encode_partition_payload(k, &set);
        let inline = crate::format::partition::encode_inline(&set);
        assert_eq!(payload.len(), 2 + 1 + 1 + inline.len());
        assert_eq!(&payload[4..], &inline[..]);
        let decoded = decode_partition_payload(&payload, SEGMENT_VERSION_V7).unwrap();
        assert_eq!((decoded.key, decoded.cardinality), (k, 5));
        assert_eq!(decoded.bitmap().unwrap(), set);
        // The wrapped form of versions 1 to 6 reads to the same partition.
        let wrapped = encode_wrapped(k, &set);
        let old = decode_partition_payload(&wrapped, SEGMENT_VERSION_V6).unwrap();
        assert_eq!((old.key, old.cardinality), (k, 5));
        assert_eq!(old.bitmap().unwrap(), set);
        assert_eq!(old.bounds().unwrap(), decoded.bounds().unwrap());
        // Neither form reads as the other.
        assert!(decode_partition_payload(&payload, SEGMENT_VERSION_V6).is_err());
        assert!(
            decode_partition_payload(&wrapped, SEGMENT_VERSION_V7)
                .and_then(|p| p.bitmap())
                .is_err()
        );
        // The largest key and cardinality fit in their varints.
        let full = (0..u32::try_from(PARTITION_SPAN).unwrap()).collect::<RoaringBitmap>();
        let big = encode_partition_payload(key(u64::MAX, MAX_CHUNK), &full);
        let decoded = decode_partition_payload(&big, SEGMENT_VERSION_V7).unwrap();
        assert_eq!(decoded.cardinality, PARTITION_SPAN);
        assert_eq!(decoded.bitmap().unwrap(), full);
    }

    /// Every truncation of a payload, and every bit flipped in it, is refused by the decoder or
    /// by the set's checks, or reads to another key or cardinality: never to the same
    /// partition with another set (the frame's CRC is what refuses the rest).
    #[test]
    fn every_truncation_and_flipped_bit_of_a_version_7_payload_is_refused_or_reads_otherwise() {
        let set = (0..3000u32)
            .filter(|e| e % 1000 != 7)
            .collect::<RoaringBitmap>();
        let k = key(77, 3);
        let payload = encode_partition_payload(k, &set);
        for n in 0..payload.len() {
            let refused = decode_partition_payload(&payload[..n], SEGMENT_VERSION_V7)
                .and_then(|p| p.bitmap());
            assert!(refused.is_err(), "cut at {n}");
        }
        for bit in 0..payload.len() * 8 {
            let mut b = payload.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            let Ok(p) = decode_partition_payload(&b, SEGMENT_VERSION_V7) else {
                continue;
            };
            if let Ok(found) = p.bitmap() {
                assert!(
                    p.key != k || p.cardinality != set.len() || found != set,
                    "bit {bit} reads to the same partition"
                );
            }
            // Bounds never panic and never claim a span the cardinality does not fit.
            if let Ok(Some((lo, hi))) = p.bounds() {
                assert!(u64::from(hi - lo) + 1 >= p.cardinality, "bit {bit}");
            }
        }
    }

    #[test]
    fn a_version_7_payload_refuses_long_varints_and_out_of_range_fields() {
        let set = [1u32].into_iter().collect::<RoaringBitmap>();
        // A two-byte varint for ledger 1: not the shortest form.
        let mut long = vec![0x81, 0x00];
        long.extend_from_slice(&encode_partition_payload(key(1, 0), &set)[1..]);
        assert!(decode_partition_payload(&long, SEGMENT_VERSION_V7).is_err());
        let mut chunk = Vec::new();
        put_varint(&mut chunk, 1);
        put_varint(&mut chunk, MAX_CHUNK + 1);
        put_varint(&mut chunk, 1);
        chunk.extend_from_slice(&crate::format::partition::encode_inline(&set));
        assert_eq!(
            decode_partition_payload(&chunk, SEGMENT_VERSION_V7)
                .unwrap_err()
                .kind,
            CorruptionKind::InvalidField("chunk")
        );
        let mut cardinality = Vec::new();
        put_varint(&mut cardinality, 1);
        put_varint(&mut cardinality, 0);
        put_varint(&mut cardinality, PARTITION_SPAN + 1);
        cardinality.push(0);
        assert_eq!(
            decode_partition_payload(&cardinality, SEGMENT_VERSION_V7)
                .unwrap_err()
                .kind,
            CorruptionKind::InvalidField("cardinality")
        );
        // A cardinality the set does not have.
        let mut other = Vec::new();
        put_varint(&mut other, 1);
        put_varint(&mut other, 0);
        put_varint(&mut other, 2);
        other.extend_from_slice(&crate::format::partition::encode_inline(&set));
        let p = decode_partition_payload(&other, SEGMENT_VERSION_V7).unwrap();
        assert_eq!(
            p.bitmap().unwrap_err().kind,
            CorruptionKind::InvalidField("cardinality")
        );
    }

    /// What `bounds` peeks of a payload of segment `version` against what `bitmap` decodes:
    /// a payload the decoder accepts has bounds the peek reads without refusing, and they are
    /// the set's lowest and highest offsets.
    fn assert_peek_agrees(payload: &[u8], version: u16) -> Result<(), TestCaseError> {
        let Ok(p) = decode_partition_payload(payload, version) else {
            return Ok(());
        };
        if let Ok(set) = p.bitmap() {
            match p.bounds() {
                Ok(Some(found)) => prop_assert_eq!(Some(found), set.min().zip(set.max())),
                Ok(None) => {}
                Err(e) => prop_assert!(false, "decodes but the peek refused: {e:?}"),
            }
        }
        Ok(())
    }

    proptest! {
        /// Every random set, in both forms, intact, cut at any length, or with any byte
        /// rewritten: the peeked bounds and the decoded set never disagree, and a payload
        /// that decodes is never refused by the peek.
        #[test]
        fn peeked_bounds_of_any_payload_agree_with_its_decoded_set(
            offsets in prop::collection::vec(0u32..65_536, 1..400),
            ledger in any::<u64>(),
            chunk in 0..=MAX_CHUNK,
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            damage in 0u8..3,
        ) {
            let set = offsets.into_iter().collect::<RoaringBitmap>();
            let k = key(ledger, chunk);
            for (mut payload, version) in [
                (encode_partition_payload(k, &set), SEGMENT_VERSION_V7),
                (encode_wrapped(k, &set), SEGMENT_VERSION_V6),
            ] {
                let i = at.index(payload.len());
                match damage {
                    0 => {
                        let p = decode_partition_payload(&payload, version).unwrap();
                        prop_assert_eq!(p.bitmap().unwrap(), set.clone());
                    }
                    1 => payload.truncate(i),
                    _ => payload[i] = byte,
                }
                assert_peek_agrees(&payload, version)?;
            }
        }
    }
}

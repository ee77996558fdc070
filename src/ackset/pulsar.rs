//! The size of Pulsar's own encoding of an ack range set, the anchor of ackstore's size targets.
//!
//! Owns: an exact byte count of the protobuf Pulsar writes; never encodes anything itself.
//!
//! Pulsar persists individually deleted messages in `managed-ledger/src/main/proto/MLDataFormats.proto`
//! (proto2) as
//!
//! ```text
//! message PositionInfo {              // cursor-ledger entry
//!     required int64 ledgerId = 1;
//!     required int64 entryId  = 2;
//!     repeated MessageRange individualDeletedMessages = 3;
//!     repeated LongProperty properties = 4;
//! }
//! message ManagedCursorInfo {         // metadata-store fallback; same field type, number 4
//!     ...
//!     repeated MessageRange individualDeletedMessages = 4;
//! }
//! message MessageRange {
//!     required NestedPositionInfo lowerEndpoint = 1;
//!     required NestedPositionInfo upperEndpoint = 2;
//! }
//! message NestedPositionInfo {
//!     required int64 ledgerId = 1;
//!     required int64 entryId  = 2;
//! }
//! ```
//!
//! Both field numbers are below 16, so every tag is one byte. A range `[first, last]` is stored as
//! Guava's open-closed range `(first - 1, last]`: the lower endpoint's entry id is `first - 1`,
//! which is `-1` (a ten-byte varint, as protobuf writes every negative int64) when `first` is 0.

use crate::position::Position;

/// Bytes of one protobuf tag with a field number below 16.
const TAG_BYTES: u64 = 1;

/// Bytes of `v` as a protobuf base-128 varint (a negative int64 is written as its `u64` two's
/// complement: ten bytes).
#[must_use]
pub fn varint_bytes(v: u64) -> u64 {
    // Seven bits per byte; zero still takes one byte.
    u64::from((64 - (v | 1).leading_zeros()).div_ceil(7))
}

/// Bytes of a `NestedPositionInfo { ledgerId, entryId }`, without its own tag and length.
fn nested_position_bytes(ledger_id: i64, entry_id: i64) -> u64 {
    TAG_BYTES
        + varint_bytes(ledger_id.cast_unsigned())
        + TAG_BYTES
        + varint_bytes(entry_id.cast_unsigned())
}

/// Bytes of a length-delimited field holding `len` bytes: tag, length varint, contents.
fn delimited_bytes(len: u64) -> u64 {
    TAG_BYTES + varint_bytes(len) + len
}

/// Exact bytes Pulsar's `PositionInfo.individualDeletedMessages` (field 3, repeated
/// `MessageRange`) takes for these inclusive ranges: for each range, the field's tag and length
/// plus a `MessageRange` of two length-delimited `NestedPositionInfo`s, lower endpoint
/// `(ledger, first - 1)` and upper endpoint `(ledger, last)`. Ledger and entry ids are Pulsar's
/// `int64`: ids above `i64::MAX` count as the negative numbers Pulsar would store.
#[must_use]
pub fn message_range_bytes(ranges: impl IntoIterator<Item = (Position, Position)>) -> u64 {
    ranges
        .into_iter()
        .map(|(first, last)| {
            let lower = nested_position_bytes(
                first.ledger_id.cast_signed(),
                first.entry_id.cast_signed().wrapping_sub(1),
            );
            let upper =
                nested_position_bytes(last.ledger_id.cast_signed(), last.entry_id.cast_signed());
            delimited_bytes(delimited_bytes(lower) + delimited_bytes(upper))
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(ledger: u64, first: u64, last: u64) -> (Position, Position) {
        (Position::new(ledger, first), Position::new(ledger, last))
    }

    #[test]
    fn varints_take_seven_bits_per_byte() {
        assert_eq!(varint_bytes(0), 1);
        assert_eq!(varint_bytes(127), 1);
        assert_eq!(varint_bytes(128), 2);
        assert_eq!(varint_bytes(16_383), 2);
        assert_eq!(varint_bytes(16_384), 3);
        assert_eq!(varint_bytes((-1i64).cast_unsigned()), 10);
        assert_eq!(varint_bytes(u64::MAX >> 1), 9);
    }

    #[test]
    fn small_range_takes_fourteen_bytes() {
        // lower (1, 4): 08 01 10 04 = 4 bytes, as field 1: 0a 04 + 4 = 6.
        // upper (1, 5): the same 6 bytes as field 2. MessageRange: 12 bytes.
        // As PositionInfo field 3: 1a 0c + 12 = 14.
        assert_eq!(message_range_bytes([range(1, 5, 5)]), 14);
    }

    #[test]
    fn range_starting_at_entry_zero_pays_for_minus_one() {
        // Ledger 123456 is a 3-byte varint. lower (123456, -1): 1 + 3 + 1 + 10 = 15, field 17;
        // upper (123456, 0): 1 + 3 + 1 + 1 = 6, field 8; MessageRange 25; with tag and length 27.
        assert_eq!(message_range_bytes([range(123_456, 0, 0)]), 27);
    }

    #[test]
    fn typical_broker_range_and_sums() {
        // Ledger 1_000_000 (3-byte varint), entries 300_000..=300_001 (3 bytes each):
        // nested 8 bytes, fields 10 each, MessageRange 20, with tag and length 22.
        let r = range(1_000_000, 300_000, 300_001);
        assert_eq!(message_range_bytes([r]), 22);
        assert_eq!(message_range_bytes([r, r, r]), 66);
        assert_eq!(message_range_bytes([]), 0);
    }
}

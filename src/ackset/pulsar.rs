//! The size of Pulsar's own encoding of an ack range set, the anchor of ackstore's size targets.
//!
//! Owns: exact byte counts of what Pulsar writes for an ack state, in each of its encodings:
//! the `MessageRange` list, the `LongListMap` word arrays (Pulsar 4.2's default), and per-ledger
//! roaring bitmaps (the PIP-485 proposal). Never writes anything itself; the one compressor the
//! roaring figure needs is passed in by the caller, so the library depends on none.
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
//! Since `managedLedgerPersistIndividualAckAsLongArray` became the default (Pulsar 4.1), the
//! same state goes instead into
//!
//! ```text
//! message PositionInfo {
//!     ...
//!     repeated LongListMap individualDeletedMessageRanges = 6;
//! }
//! message LongListMap {               // one per ledger holding an acked entry
//!     required int64 key    = 1;      // the ledger id
//!     repeated int64 values = 2;      // java.util.BitSet.toLongArray() of its acked entry ids
//! }
//! ```
//!
//! `values` is not declared packed, so every word is its own tag and varint: a word with bit 63
//! set is a negative int64 (ten bytes), a zero word two bytes with its tag. The bit set holds
//! entry `e` at bit `e`, so its words run from entry 0 to the ledger's highest acked entry.
//!
//! All field numbers here are below 16, so every tag is one byte. A range `[first, last]` is stored as
//! Guava's open-closed range `(first - 1, last]`: the lower endpoint's entry id is `first - 1`,
//! which is `-1` (a ten-byte varint, as protobuf writes every negative int64) when `first` is 0.

use roaring::RoaringBitmap;

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

/// Bytes of the `BitSet.toLongArray()` words of a ledger's acked entries (entry ids below
/// 2^32, as Pulsar's `int` bit indexes): word `w` holds entries `64w .. 64w + 63`, least
/// significant bit first, up to the word of the highest acked entry.
fn long_array_words(acked: &RoaringBitmap) -> impl Iterator<Item = u64> + '_ {
    let words = acked.max().map_or(0, |max| max / 64 + 1);
    let mut values = acked.iter().peekable();
    (0..words).map(move |w| {
        let mut word = 0u64;
        while let Some(&e) = values.peek() {
            if e / 64 != w {
                break;
            }
            word |= 1 << (e % 64);
            values.next();
        }
        word
    })
}

/// Exact bytes of Pulsar's `PositionInfo.individualDeletedMessageRanges` (field 6, repeated
/// `LongListMap`) for these ledgers, each given with the set of its acked entry ids: per ledger
/// that holds any, the field's tag and length, then the key (ledger id) and every word of the
/// ledger's bit set as an unpacked `int64`.
#[must_use]
pub fn long_list_map_bytes<'a>(ledgers: impl IntoIterator<Item = (u64, &'a RoaringBitmap)>) -> u64 {
    ledgers
        .into_iter()
        .filter(|(_, acked)| !acked.is_empty())
        .map(|(ledger_id, acked)| {
            let words: u64 = long_array_words(acked)
                .map(|word| TAG_BYTES + varint_bytes(word))
                .sum();
            delimited_bytes(TAG_BYTES + varint_bytes(ledger_id) + words)
        })
        .sum()
}

/// Bytes of the per-ledger roaring encoding of the PIP-485 proposal for these ledgers, each given
/// with the set of its acked entry ids: the set as a 32-bit `RoaringBitmap`, run-optimized, in
/// the portable serialization, then compressed, keeping the compressed form only when it is
/// smaller (the proposal makes LZ4 optional). `compressed_len` returns the length of its input
/// once compressed (LZ4 in `ackstore perf` and the size test).
///
/// The proposal does not fix its protobuf message, so each ledger is counted with the least
/// framing any message needs: as a repeated field of `{ int64 key = 1; bytes bitmap = 2; }`,
/// a tag and length around a tag and varint key and a tag and length around the bytes.
#[must_use]
pub fn roaring_bytes<'a>(
    ledgers: impl IntoIterator<Item = (u64, &'a RoaringBitmap)>,
    mut compressed_len: impl FnMut(&[u8]) -> usize,
) -> u64 {
    ledgers
        .into_iter()
        .filter(|(_, acked)| !acked.is_empty())
        .map(|(ledger_id, acked)| {
            let mut optimized = acked.clone();
            optimized.optimize();
            let mut serialized = Vec::with_capacity(optimized.serialized_size());
            // Writing into a Vec cannot fail.
            let _ = optimized.serialize_into(&mut serialized);
            let len = compressed_len(&serialized).min(serialized.len()) as u64;
            delimited_bytes(TAG_BYTES + varint_bytes(ledger_id) + delimited_bytes(len))
        })
        .sum()
}

/// Exact bytes of one element of Pulsar's `PositionInfo.batchedEntryDeletionIndexInfo` (field
/// 5, repeated), which Pulsar writes for every partially acknowledged entry (up to
/// `maxBatchDeletedIndexToPersist`):
///
/// ```text
/// message BatchedEntryDeletionIndexInfo {
///     required NestedPositionInfo position = 1;
///     repeated int64 deleteSet = 2;          // not packed
/// }
/// ```
///
/// `deleteSet` is `BitSet.toLongArray()` of the entry's ack set, in which a set bit is a
/// message *not yet* acknowledged (the batch starts all set and acks clear bits); trailing zero
/// words are dropped. Each word is its own tag and `int64` varint (ten bytes when bit 63 is
/// set). `acked` holds the acknowledged indexes in `0..batch_size`.
#[must_use]
pub fn batch_deletion_index_bytes(pos: Position, batch_size: u32, acked: &RoaringBitmap) -> u64 {
    let mut unacked = RoaringBitmap::new();
    unacked.insert_range(0..batch_size);
    unacked -= acked;
    let words: u64 = long_array_words(&unacked)
        .map(|word| TAG_BYTES + varint_bytes(word))
        .sum();
    let position = delimited_bytes(nested_position_bytes(
        pos.ledger_id.cast_signed(),
        pos.entry_id.cast_signed(),
    ));
    delimited_bytes(position + words)
}

//! Message ids and ack sets: how a Pulsar `MessageIdData` (ledger id, entry id, batch index)
//! maps to an ackstore [`Position`] and a batch index, and how the protocol's ack sets (bit
//! sets over a batch, a set bit meaning "not acknowledged") map to the indexes a cursor holds.
//!
//! Owns no state. Must never turn an id the client made up into an ack of more than it names:
//! an ack set is read only over `0..n` for the `n` messages of the entry it names, and the
//! special ids `earliest` and `latest` are recognised here and nowhere else.

use ackstore::Position;
use pulsar::proto::MessageIdData;

/// A stored entry's bytes: the message metadata as the producer encoded it, then the payload.
/// Layout: `u32` big-endian metadata length, the metadata (protobuf), the payload bytes.
pub struct StoredEntry<'a> {
    /// The `MessageMetadata` bytes.
    pub metadata: &'a [u8],
    /// The payload after the metadata (one message, or a batch of single-message frames).
    pub payload: &'a [u8],
}

/// Encodes what a `SEND` carried into an entry's bytes (see [`StoredEntry`]).
pub fn encode_entry(metadata: &[u8], payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(metadata.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(4 + metadata.len() + payload.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(metadata);
    out.extend_from_slice(payload);
    out
}

/// Splits an entry's bytes; `None` when they do not hold the layout of [`StoredEntry`].
pub fn decode_entry(bytes: &[u8]) -> Option<StoredEntry<'_>> {
    let (len, rest) = bytes.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
    if len > rest.len() {
        return None;
    }
    let (metadata, payload) = rest.split_at(len);
    Some(StoredEntry { metadata, payload })
}

/// Where a client's id points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `MessageId.earliest` (ledger and entry id -1).
    Earliest,
    /// `MessageId.latest` (ledger and entry id `i64::MAX`).
    Latest,
    /// A stored entry, and the message inside it when the id names one of a batch.
    At(Position, Option<u32>),
}

/// Reads a client's message id.
pub fn target(id: &MessageIdData) -> Target {
    let signed_ledger = id.ledger_id as i64;
    if signed_ledger < 0 {
        return Target::Earliest;
    }
    if id.ledger_id >= i64::MAX as u64 {
        return Target::Latest;
    }
    let index = id.batch_index.and_then(|i| u32::try_from(i).ok());
    Target::At(Position::new(id.ledger_id, id.entry_id), index)
}

/// The id of a stored entry, or of one message of a batched entry.
pub fn message_id(pos: Position, batch_index: Option<u32>) -> MessageIdData {
    MessageIdData {
        ledger_id: pos.ledger_id,
        entry_id: pos.entry_id,
        partition: Some(-1),
        batch_index: Some(batch_index.map_or(-1, |i| i as i32)),
        ..Default::default()
    }
}

/// The id a topic with no entry answers for its last message (-1, -1, -1): every id a client
/// holds compares greater or equal, so `hasMessageAvailable` is false.
pub fn no_message_id() -> MessageIdData {
    MessageIdData {
        ledger_id: u64::MAX,
        entry_id: u64::MAX,
        partition: Some(-1),
        batch_index: Some(-1),
        ..Default::default()
    }
}

/// The indexes of `0..batch_size` an ack set marks acknowledged (bit clear).
pub fn acked_indexes(ack_set: &[i64], batch_size: u32) -> Vec<u32> {
    (0..batch_size)
        .filter(|&i| {
            let word = (i / 64) as usize;
            let bit = i % 64;
            let set = ack_set
                .get(word)
                .is_some_and(|w| (*w as u64 >> bit) & 1 == 1);
            !set
        })
        .collect()
}

/// The ack set to dispatch with an entry of `batch_size` messages of which `acked` are
/// acknowledged: a set bit for each message still to deliver.
pub fn dispatch_ack_set(batch_size: u32, acked: impl Fn(u32) -> bool) -> Vec<i64> {
    let words = batch_size.div_ceil(64) as usize;
    let mut out = vec![0u64; words];
    for i in 0..batch_size {
        if !acked(i) {
            out[(i / 64) as usize] |= 1 << (i % 64);
        }
    }
    out.into_iter().map(|w| w as i64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_sets_round_trip_over_a_batch_wider_than_one_word() {
        let acked = [0u32, 5, 63, 64, 99];
        let set = dispatch_ack_set(100, |i| acked.contains(&i));
        assert_eq!(set.len(), 2);
        assert_eq!(acked_indexes(&set, 100), acked.to_vec());
    }

    #[test]
    fn an_empty_ack_set_acknowledges_the_whole_batch() {
        assert_eq!(acked_indexes(&[], 3), vec![0, 1, 2]);
    }

    #[test]
    fn special_ids_are_recognised() {
        let mut id = no_message_id();
        assert_eq!(target(&id), Target::Earliest);
        id.ledger_id = i64::MAX as u64;
        id.entry_id = i64::MAX as u64;
        assert_eq!(target(&id), Target::Latest);
        let id = message_id(Position::new(3, 4), Some(2));
        assert_eq!(target(&id), Target::At(Position::new(3, 4), Some(2)));
    }

    #[test]
    fn entries_split_back_into_metadata_and_payload() {
        let bytes = encode_entry(b"meta", b"payload");
        let e = decode_entry(&bytes).expect("layout");
        assert_eq!((e.metadata, e.payload), (&b"meta"[..], &b"payload"[..]));
        assert!(decode_entry(&[0, 0, 0, 9, 1]).is_none());
        assert!(decode_entry(&[0, 0]).is_none());
    }
}

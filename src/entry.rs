//! Entries as a topic's readers see them.
//!
//! Owns: the [`Entry`] value handed out by reads (an entry-log frame plus its position and the
//! message metadata the managed ledger stores in every frame header). Pure data, no I/O.

use roaring::RoaringBitmap;

use crate::log::LogEntry;
use crate::position::Position;

/// One entry of a topic, as returned by reads.
///
/// An entry carries one message or a batch of `num_messages` messages. `index` is the message
/// index of the *last* message in the entry, so the entry holds the messages
/// `index + 1 - num_messages ..= index`; the first message ever appended to a topic has index 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Where the entry lives.
    pub position: Position,
    /// Message index of the last message in the entry.
    pub index: u64,
    /// Number of messages in the entry (at least 1).
    pub num_messages: u32,
    /// Append timestamp; never smaller than the previous entry's.
    pub timestamp: u64,
    /// The bytes given to the append.
    pub payload: Vec<u8>,
    /// For an entry read through a cursor: the indexes (`0..num_messages`) of its messages
    /// that cursor has acknowledged at batch-index level, which a dispatcher filters out;
    /// `None` when there are none (the entry is not acknowledged in part), which costs
    /// nothing. Always `None` for [`ManagedLedger::read`](crate::ManagedLedger::read).
    pub acked_batch_indexes: Option<RoaringBitmap>,
}

impl Entry {
    /// The message index of the first message in the entry.
    #[must_use]
    pub fn first_index(&self) -> u64 {
        (self.index + 1).saturating_sub(u64::from(self.num_messages))
    }

    pub(crate) fn from_log(ledger_id: u64, entry: LogEntry) -> Self {
        Self {
            position: Position::new(ledger_id, entry.entry_id),
            index: entry.meta.index,
            num_messages: entry.meta.num_messages,
            timestamp: entry.meta.timestamp,
            payload: entry.payload,
            acked_batch_indexes: None,
        }
    }
}

//! The consumer-side filter of already-received entries (PIP-260), extended with an epoch.
//!
//! Owns: the decision, on the consumer's side, whether a delivered entry is new or a silent
//! redelivery of one the consumer already received. A client library embeds one
//! [`ReceivedFilter`] per ordered (Exclusive or Failover) consumer and asks it about every entry
//! *before* the application processes the entry. Must never do I/O or talk to a broker: its
//! state lives in the consumer's memory and is lost when the consumer restarts.
//!
//! Why the epoch: the proposal's filter cannot tell a silent redelivery (a new topic owner
//! reloaded the cursor and sends everything after mark-delete again) from a redelivery the
//! server meant (an administrator seeked or reset the cursor). The cursor's epoch tells them
//! apart: it increases on every seek, reset and consumer redeliver request, and *not* when the
//! topic moves to another owner; every delivered entry carries the epoch it was read under. A
//! newer epoch clears the filter, so a reset is honoured without restarting the consumer; an
//! older one marks an entry that was sent before the reset and is no longer wanted.
//!
//! The user guide is `docs/consumer-filter.md`.

use std::fmt;

use crate::error::{Error, Result};
use crate::position::Position;

/// How a subscription dispatches entries to its consumers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SubscriptionType {
    /// One consumer receives every entry, in order.
    Exclusive,
    /// One active consumer at a time receives every entry, in order; others stand by.
    Failover,
    /// Entries are spread over all consumers, in no particular order.
    Shared,
    /// Entries are spread over consumers by key; each consumer sees its keys' entries, with
    /// gaps.
    KeyShared,
}

impl SubscriptionType {
    /// Whether a consumer of this subscription receives entries in position order.
    #[must_use]
    pub fn is_ordered(self) -> bool {
        matches!(self, Self::Exclusive | Self::Failover)
    }
}

impl fmt::Display for SubscriptionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Exclusive => "Exclusive",
            Self::Failover => "Failover",
            Self::Shared => "Shared",
            Self::KeyShared => "Key_Shared",
        })
    }
}

/// Drops entries a consumer has already received: everything at or below the largest position
/// received since the last reset, and everything sent under an older epoch.
///
/// Off unless enabled: a disabled filter admits every entry and records nothing. It only makes
/// sense for ordered subscriptions (Exclusive, Failover), and the only redelivery it lets
/// through is [`ReceivedFilter::redeliver_unacknowledged`] (all unacknowledged entries):
/// individually redelivered entries are at or below the largest received position, so they
/// are dropped.
#[derive(Clone, Debug)]
pub struct ReceivedFilter {
    enabled: bool,
    /// Largest message admitted since the last reset: its entry and batch index (`u32::MAX`
    /// for a whole entry admitted by [`ReceivedFilter::admit`]).
    largest: Option<(Position, u32)>,
    /// Newest epoch seen.
    epoch: u64,
    /// Entries not admitted.
    dropped: u64,
}

impl ReceivedFilter {
    /// A filter for a consumer of a `subscription`; `enabled` false makes it admit everything.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when enabled for a `Shared` or `Key_Shared` subscription: their
    /// dispatch is not ordered, so the largest received position says nothing about what is
    /// still to come.
    pub fn new(subscription: SubscriptionType, enabled: bool) -> Result<Self> {
        if enabled && !subscription.is_ordered() {
            return Err(Error::Unsupported {
                what: format!(
                    "the received-message filter needs ordered dispatch, and a {subscription} \
                 subscription dispatches entries out of order (a later entry may arrive before \
                 an earlier one), so filtering by the largest received position would drop \
                 entries never seen; use it with Exclusive or Failover, or leave it disabled"
                ),
            });
        }
        Ok(Self {
            enabled,
            largest: None,
            epoch: 0,
            dropped: 0,
        })
    }

    /// Whether the filter drops anything at all.
    #[must_use]
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Decides whether the consumer should process the entry at `position`, delivered under the
    /// cursor's `epoch`; call it when the entry arrives, before the application sees it.
    ///
    /// - An epoch newer than any seen means the server seeked, reset or redelivered: the filter
    ///   forgets what it received, then judges the entry (so it is admitted).
    /// - An epoch older than the newest seen means the entry was sent before such a reset: it
    ///   is dropped.
    /// - Otherwise the entry is admitted, and recorded as the largest received, only if it is
    ///   above the largest position received so far.
    ///
    /// A disabled filter returns `true` and records nothing.
    pub fn admit(&mut self, position: Position, epoch: u64) -> bool {
        self.admit_message(position, u32::MAX, epoch)
    }

    /// [`Self::admit`] for one message of a batched entry: message `batch_index` of the entry
    /// at `position`. Messages are ordered by entry, then batch index, so after a redelivery of
    /// a batch the consumer received up to message `k` of, messages `0..=k` are dropped and
    /// the rest admitted. A whole entry admitted by [`Self::admit`] counts as all its messages
    /// received. Use it when batch-index acks are on, for the messages of an entry the
    /// dispatcher did not filter out (see `Entry::acked_batch_indexes`).
    pub fn admit_message(&mut self, position: Position, batch_index: u32, epoch: u64) -> bool {
        let message = (position, batch_index);
        if !self.enabled {
            return true;
        }
        if epoch > self.epoch {
            self.epoch = epoch;
            self.largest = None;
        }
        let fresh = epoch == self.epoch && self.largest.is_none_or(|largest| message > largest);
        if fresh {
            self.largest = Some(message);
        } else {
            self.dropped += 1;
        }
        fresh
    }

    /// Forgets the largest received position, so the redelivery of every unacknowledged entry
    /// that the consumer is about to request passes the filter. Call it just before sending the
    /// request. (Redelivery of individual entries is not supported: those entries are dropped.)
    pub fn redeliver_unacknowledged(&mut self) {
        self.largest = None;
    }

    /// The largest position admitted since the last reset, if any.
    #[must_use]
    pub fn largest_received(&self) -> Option<Position> {
        self.largest.map(|(position, _)| position)
    }

    /// The largest message admitted since the last reset: its entry and batch index
    /// (`u32::MAX` when the whole entry was admitted by [`Self::admit`]).
    #[must_use]
    pub fn largest_received_message(&self) -> Option<(Position, u32)> {
        self.largest
    }

    /// The newest epoch seen.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// How many entries the filter has dropped.
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

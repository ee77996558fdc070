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

#[cfg(test)]
mod tests {
    use super::*;

    fn p(entry_id: u64) -> Position {
        Position::new(1, entry_id)
    }

    fn ordered(enabled: bool) -> ReceivedFilter {
        ReceivedFilter::new(SubscriptionType::Failover, enabled).unwrap()
    }

    #[test]
    fn unordered_subscriptions_are_refused_with_the_reason() {
        for sub in [SubscriptionType::Shared, SubscriptionType::KeyShared] {
            let err = ReceivedFilter::new(sub, true).unwrap_err();
            assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
            assert!(err.to_string().contains("out of order"), "{err}");
            // Disabled, the filter is inert and harmless for any subscription.
            let mut inert = ReceivedFilter::new(sub, false).unwrap();
            assert!(inert.admit(p(2), 0) && inert.admit(p(1), 0));
        }
        for sub in [SubscriptionType::Exclusive, SubscriptionType::Failover] {
            assert!(ReceivedFilter::new(sub, true).unwrap().is_enabled());
        }
    }

    #[test]
    fn an_ownership_move_redelivery_is_dropped() {
        let mut filter = ordered(true);
        assert!((1..=5).all(|e| filter.admit(p(e), 0)));
        // The new owner sends 1..=5 again under the same epoch, then 6.
        assert!((1..=5).all(|e| !filter.admit(p(e), 0)));
        assert!(filter.admit(p(6), 0));
        assert_eq!(filter.dropped(), 5);
        assert_eq!(filter.largest_received(), Some(p(6)));
    }

    #[test]
    fn a_disabled_filter_admits_every_redelivery() {
        let mut filter = ordered(false);
        assert!((1..=5).chain(1..=5).all(|e| filter.admit(p(e), 0)));
        assert_eq!(filter.dropped(), 0);
        assert_eq!(filter.largest_received(), None);
    }

    #[test]
    fn a_server_seek_back_is_honoured_through_the_epoch() {
        let mut filter = ordered(true);
        assert!((1..=5).all(|e| filter.admit(p(e), 0)));
        // Seek back to 2: the cursor's epoch went from 0 to 1.
        assert!((2..=5).all(|e| filter.admit(p(e), 1)));
        assert_eq!(filter.epoch(), 1);
        // Entries sent before the seek and still in flight are stale.
        assert!(!filter.admit(p(6), 0));
        assert_eq!(filter.dropped(), 1);
    }

    #[test]
    fn redeliver_unacknowledged_lets_the_redelivery_through_once() {
        let mut filter = ordered(true);
        assert!((1..=5).all(|e| filter.admit(p(e), 3)));
        filter.redeliver_unacknowledged();
        assert_eq!(filter.largest_received(), None);
        assert!((1..=5).all(|e| filter.admit(p(e), 3)));
        assert!(!filter.admit(p(4), 3));
    }

    #[test]
    fn individual_redelivery_is_filtered() {
        let mut filter = ordered(true);
        assert!((1..=5).all(|e| filter.admit(p(e), 0)));
        assert!(!filter.admit(p(3), 0));
    }

    #[test]
    fn positions_compare_across_ledgers() {
        let mut filter = ordered(true);
        assert!(filter.admit(Position::new(1, 900), 0));
        assert!(filter.admit(Position::new(2, 0), 0));
        assert!(!filter.admit(Position::new(1, 901), 0));
    }

    mod model {
        use std::collections::HashMap;

        use proptest::prelude::*;

        use super::super::*;

        /// What happens next between the broker and an ordered consumer.
        #[derive(Clone, Debug)]
        enum Op {
            /// The broker sends the entry at its read position and advances.
            Deliver,
            /// The topic moved to another owner, which reloaded the cursor and reads again from
            /// an earlier point (never before the last seek target, which moved mark-delete):
            /// the epoch is unchanged.
            OwnershipMove(usize),
            /// An administrator seeked the cursor (back or forward): the epoch increases.
            Seek(usize),
            /// The consumer asks for every unacknowledged entry again; the broker rewinds to the
            /// entry after mark-delete (the last seek target) and, when `true`, increases the
            /// epoch.
            Redeliver(bool),
            /// One of the entries sent under an older epoch arrives late.
            Stale(usize),
        }

        const ENTRIES: usize = 40;

        /// Entry `i` of the topic: four entries per ledger, ledgers from 3 on.
        fn position(i: usize) -> Position {
            Position::new(3 + (i / 4) as u64, (i % 4) as u64)
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                8 => Just(Op::Deliver),
                1 => (0..ENTRIES).prop_map(Op::OwnershipMove),
                1 => (0..ENTRIES).prop_map(Op::Seek),
                1 => any::<bool>().prop_map(Op::Redeliver),
                1 => any::<usize>().prop_map(Op::Stale),
            ]
        }

        /// The broker's side: read position, epoch, and what it has sent.
        #[derive(Default)]
        struct Broker {
            next: usize,
            epoch: u64,
            /// Mark-delete floor: a reload never reads before the last seek target.
            floor: usize,
            sent: Vec<(usize, u64)>,
        }

        /// The specification, over entry indexes: what the filter must answer.
        #[derive(Default)]
        struct Spec {
            largest: Option<usize>,
            epoch: u64,
        }

        impl Spec {
            fn admit(&mut self, index: usize, epoch: u64) -> bool {
                if epoch > self.epoch {
                    (self.epoch, self.largest) = (epoch, None);
                }
                let admit = epoch == self.epoch && self.largest.is_none_or(|l| index > l);
                if admit {
                    self.largest = Some(index);
                }
                admit
            }
        }

        proptest! {
            #[test]
            fn an_entry_is_admitted_twice_only_after_a_redeliver_or_a_covering_seek(
                ops in proptest::collection::vec(op(), 0..200),
                enabled: bool,
            ) {
                let mut filter = ReceivedFilter::new(SubscriptionType::Exclusive, enabled).unwrap();
                let mut broker = Broker::default();
                let mut spec = Spec::default();
                // Each entry's last admission (time, epoch); redeliver request times; epoch
                // bumps (new epoch, first entry they send again).
                let mut admitted: HashMap<usize, (usize, u64)> = HashMap::new();
                let mut redelivers: Vec<usize> = Vec::new();
                let mut bumps: Vec<(u64, usize)> = Vec::new();
                let mut drops = 0u64;
                for (time, op) in ops.into_iter().enumerate() {
                    let (index, epoch) = match op {
                        Op::Deliver if broker.next < ENTRIES => {
                            let sent = (broker.next, broker.epoch);
                            broker.next += 1;
                            broker.sent.push(sent);
                            sent
                        }
                        Op::Deliver => continue,
                        Op::Stale(pick) => {
                            let older: Vec<_> =
                                broker.sent.iter().filter(|(_, e)| *e < broker.epoch).collect();
                            match older.get(pick % older.len().max(1)) {
                                Some(&&sent) => sent,
                                None => continue,
                            }
                        }
                        Op::OwnershipMove(to) => {
                            broker.next = broker.next.min(to.max(broker.floor));
                            continue;
                        }
                        Op::Seek(to) => {
                            (broker.next, broker.floor) = (to, to);
                            broker.epoch += 1;
                            bumps.push((broker.epoch, to));
                            continue;
                        }
                        Op::Redeliver(bump) => {
                            filter.redeliver_unacknowledged();
                            spec.largest = None;
                            redelivers.push(time);
                            broker.next = broker.floor;
                            if bump {
                                broker.epoch += 1;
                                bumps.push((broker.epoch, broker.next));
                            }
                            continue;
                        }
                    };
                    let admit = filter.admit(position(index), epoch);
                    if !enabled {
                        prop_assert!(admit);
                        continue;
                    }
                    prop_assert_eq!(admit, spec.admit(index, epoch), "entry {} at epoch {}", index, epoch);
                    if !admit {
                        drops += 1;
                        continue;
                    }
                    if let Some(&(t0, e0)) = admitted.get(&index) {
                        let redelivered = redelivers.iter().any(|&t| t0 < t && t < time);
                        let reset = bumps.iter().any(|&(e, from)| e0 < e && e <= epoch && from <= index);
                        prop_assert!(
                            redelivered || reset,
                            "entry {} admitted again without a redeliver or a reset covering it", index
                        );
                    }
                    admitted.insert(index, (time, epoch));
                }
                prop_assert_eq!(filter.dropped(), drops);
                if enabled {
                    prop_assert_eq!(filter.largest_received(), spec.largest.map(position));
                }
            }
        }
    }
}

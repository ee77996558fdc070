//! The consumer-side filter of already-received entries (PIP-260), against a model.

use ackstore::internals::error::Error;
use ackstore::internals::filter::*;
use ackstore::internals::position::Position;

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

    use ackstore::internals::filter::*;
    use ackstore::internals::position::Position;

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

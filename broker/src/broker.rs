//! The broker's shared state: the ackstore [`Store`] holding every topic, and the subscriptions
//! open on each topic.
//!
//! Owns the table of subscriptions by topic and name. A topic is a store topic named by the
//! client's full topic name (`persistent://tenant/namespace/name`), created on first use; a
//! durable subscription is a store cursor of that name (or, with `cursors_in_memory`, a
//! non-durable cursor kept for the broker's lifetime); a reader's subscription is a
//! non-durable cursor that lives as long as its consumer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ackstore::{CursorOptions, InitialPosition, ManagedLedger, NonDurableOptions, Store};
use pulsar::proto::ServerError;

use crate::subscription::{Kind, Subscription};

/// Where a new cursor starts.
#[derive(Debug, Clone, Copy)]
pub struct Start {
    /// Its initial position.
    pub position: InitialPosition,
    /// Whether that position's entry is read first.
    pub inclusive: bool,
}

/// The broker.
pub struct Broker {
    /// Every topic and cursor.
    pub store: Store,
    /// The service URL a lookup answers (this broker).
    pub url: String,
    /// Durable subscriptions keep their cursor in memory only (a measurement baseline).
    pub cursors_in_memory: bool,
    subscriptions: Mutex<HashMap<(String, String), Arc<Subscription>>>,
    next_key: AtomicU64,
}

impl Broker {
    /// A broker over `store`, answering lookups with `url`.
    pub fn new(store: Store, url: String, cursors_in_memory: bool) -> Self {
        Self {
            store,
            url,
            cursors_in_memory,
            subscriptions: Mutex::new(HashMap::new()),
            next_key: AtomicU64::new(1),
        }
    }

    /// A key no other consumer attachment has.
    pub fn next_key(&self) -> u64 {
        self.next_key.fetch_add(1, Ordering::Relaxed)
    }

    fn subscriptions(&self) -> MutexGuard<'_, HashMap<(String, String), Arc<Subscription>>> {
        self.subscriptions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The topic `name`, created on first use.
    pub fn topic(&self, name: &str) -> Result<Arc<ManagedLedger>, String> {
        self.store.topic(name).map_err(|e| e.to_string())
    }

    /// The durable subscription `name` of `topic`, opened (or created at `start`) on first use.
    /// Refused with `ConsumerBusy` (as by a Pulsar broker: a refusal the client does not retry)
    /// when it exists with consumers of another kind; without consumers it is replaced by one of
    /// the new kind, once the old one's dispatcher has ended, starting at the cursor's first
    /// unacknowledged entry (what the old one read but never had acknowledged is delivered
    /// again). A store that fails is `ServiceNotReady` (the client tries again).
    pub fn durable(
        &self,
        topic: &str,
        name: &str,
        kind: Kind,
        start: Start,
    ) -> Result<Arc<Subscription>, (ServerError, String)> {
        let not_ready = |e: String| (ServerError::ServiceNotReady, e);
        let mut subs = self.subscriptions();
        let key = (topic.to_owned(), name.to_owned());
        let mut replaced = false;
        if let Some(sub) = subs.get(&key) {
            if sub.kind == kind {
                return Ok(sub.clone());
            }
            if sub.has_consumers() {
                return Err((
                    ServerError::ConsumerBusy,
                    format!("subscription {name} is {:?}, not {kind:?}", sub.kind),
                ));
            }
            sub.close_and_wait();
            subs.remove(&key);
            replaced = true;
        }
        let ledger = self.topic(topic).map_err(not_ready)?;
        let cursor = if self.cursors_in_memory {
            ledger.open_non_durable_cursor(
                start.position,
                NonDurableOptions {
                    inclusive: start.inclusive,
                    name: name.to_owned(),
                },
            )
        } else {
            ledger.open_cursor(
                name,
                CursorOptions {
                    initial_position: start.position,
                    inclusive: start.inclusive,
                },
            )
        }
        .map_err(|e| not_ready(e.to_string()))?;
        let sub = Subscription::start(name.to_owned(), kind, false, ledger, cursor)
            .map_err(|e| not_ready(e.to_string()))?;
        if replaced && let Err(e) = sub.rewind() {
            sub.close();
            return Err(not_ready(e.to_string()));
        }
        subs.insert(key, sub.clone());
        Ok(sub)
    }

    /// Creates the durable subscription `name` of `topic` from its first entry unless it exists
    /// (a producer's initial subscription, as a Pulsar broker creates it: what is sent before its
    /// first consumer is kept for it); it takes the kind of its first consumer.
    pub fn initial_subscription(&self, topic: &str, name: &str) -> Result<(), String> {
        if self
            .subscriptions()
            .contains_key(&(topic.to_owned(), name.to_owned()))
        {
            return Ok(());
        }
        let start = Start {
            position: InitialPosition::Earliest,
            inclusive: false,
        };
        match self.durable(topic, name, Kind::Shared, start) {
            Ok(_) => Ok(()),
            // Made meanwhile by a consumer of another kind.
            Err((ServerError::ConsumerBusy, _)) => Ok(()),
            Err((_, e)) => Err(e),
        }
    }

    /// A reader's subscription on `topic`: a new non-durable cursor at `start`.
    pub fn reader(
        &self,
        topic: &str,
        name: &str,
        start: Start,
    ) -> Result<Arc<Subscription>, String> {
        let ledger = self.topic(topic)?;
        let cursor = ledger
            .open_non_durable_cursor(
                start.position,
                NonDurableOptions {
                    inclusive: start.inclusive,
                    name: name.to_owned(),
                },
            )
            .map_err(|e| e.to_string())?;
        Subscription::start(name.to_owned(), Kind::Exclusive, true, ledger, cursor)
            .map_err(|e| e.to_string())
    }

    /// Forgets an unsubscribed durable subscription.
    pub fn forget(&self, topic: &str, name: &str) {
        self.subscriptions()
            .remove(&(topic.to_owned(), name.to_owned()));
    }

    /// Stops every dispatcher (before the store closes).
    pub fn stop(&self) {
        for sub in self.subscriptions().values() {
            sub.close();
        }
    }
}

//! The layers under the public face, for the benches, the fuzz targets and the tests (the
//! `ackstore` command uses the public API only: `ackstore::check`, `ackstore::pulsar`). Public
//! only with the `internals` feature and hidden from the documentation: nothing here is a stable
//! interface. A broker uses the names re-exported at the crate root.
//!
//! Layers, lowest first (a layer never imports one above it):
//! - `position` and `error`: shared vocabulary; `hashing`: the hash tables' hasher; `sync`: the
//!   poison-tolerant mutex lock and the monitor (a condition variable notified only when a
//!   caller waits);
//! - `format`: pure encode/decode of every on-disk record;
//! - `storage`: files behind a trait (real files, or an in-memory disk that can lose power),
//!   public as `ackstore::storage` and re-exported here under its old path;
//! - `log`: the entry log, a directory of append-only, CRC-framed ledger files;
//! - `meta`: small versioned records with compare-and-set (topic and cursor records);
//! - `ackset`: acknowledged entries as roaring partitions, resident under an LRU budget;
//! - `finder`: the retained ledgers' layout, and searches by message index and timestamp;
//! - `entry`: what a read returns;
//! - `journal`: the group-committed cursor journal, one log of every cursor's ack state, and
//!   its index (the host lists its segments, records its seals and checks its ownership);
//! - `cursor`: a subscription's acks, reads and seeks, and its ack state persisted in its own
//!   cursor ledger (flush, rollover, recovery);
//! - `ledger`: the managed ledger, one topic in one directory, and its cursor registry;
//! - `filter`: the consumer-side filter of already-received entries (PIP-260);
//! - `store`: every topic of a broker in one directory under one lock, opened lazily, hosting
//!   the cursor journal.

// Without the feature, items only the command, benches or tests call are unused.
#![cfg_attr(not(feature = "internals"), allow(dead_code, unused_imports))]
// Modules public here only for the tests keep their docs' links to their own private items
// (this surface is hidden from the documentation).
#![allow(rustdoc::private_intra_doc_links)]

#[path = "ackset/mod.rs"]
pub mod ackset;
#[path = "cursor/mod.rs"]
pub mod cursor;
#[path = "entry.rs"]
pub mod entry;
#[path = "error.rs"]
pub mod error;
#[path = "filter.rs"]
pub mod filter;
#[path = "finder.rs"]
pub mod finder;
#[path = "format/mod.rs"]
pub mod format;
#[path = "hashing.rs"]
pub mod hashing;
#[path = "journal/mod.rs"]
pub mod journal;
#[path = "ledger/mod.rs"]
pub mod ledger;
#[path = "log/mod.rs"]
pub mod log;
#[path = "meta/mod.rs"]
pub mod meta;
#[path = "position.rs"]
pub mod position;
pub use crate::storage;
#[path = "store/mod.rs"]
pub mod store;
#[path = "sync.rs"]
pub mod sync;

/// The RADOS lease's lock-step input and the outcome of a renewal, for their tests (the
/// backend's modules stay private to `storage::rados`).
#[cfg(feature = "rados")]
pub mod rados_lease {
    pub use crate::storage::rados::lease::{Renewal, lock_op_input};
}

/// Steps of public calls taken one at a time, for the tests that order them at will: what no
/// caller of the public API can reach (the types they name are public here only).
pub mod steps {
    use std::sync::Arc;

    use crate::ackset::budget::BudgetLink;
    use crate::error::Result;
    use crate::store::TopicSlot;
    use crate::{AckBudget, ManagedLedger, Store};

    /// A new member of `budget`, with no hook yet: what a cursor holds once it joins.
    #[must_use]
    pub fn join_budget(budget: &AckBudget) -> BudgetLink {
        budget.join()
    }

    /// The first step of [`Store::topic`]: the slot of topic `name`, made if missing.
    pub fn topic_slot(store: &Store, name: &str) -> Result<Arc<TopicSlot>> {
        store.slot(name)
    }

    /// The second step of [`Store::topic`]: the topic of `slot`, opened under the slot's lock.
    pub fn open_in_slot(store: &Store, name: &str, slot: &TopicSlot) -> Result<Arc<ManagedLedger>> {
        store.open_in_slot(name, slot)
    }
}

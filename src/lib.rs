//! ackstore: an embeddable storage engine that persists message-broker cursors.
//!
//! A topic's entries live in an append-only log of ledgers; every subscription has a cursor
//! whose acknowledgement state (the mark-delete position plus every individually acknowledged
//! entry above it) survives crashes, restarts and ownership hand-offs, however many ack holes
//! there are, in bounded memory. The design, vocabulary and invariants are in `docs/` and the
//! README.
//!
//! Start at [`ManagedLedger`]: open a topic directory, append entries, open a [`Cursor`] per
//! subscription, ack, flush, close. Everything a broker embeds is re-exported here: the topic
//! and cursor handles with their configuration and statistics, the [`Storage`] trait and its two
//! backends, the consumer-side [`ReceivedFilter`], and the one [`Error`] enum. Metric names and
//! the log target are constants in [`observe`].
//! Many topics in one directory: [`Store`].
//!
//! Beside the root: [`storage`] holds the plumbing a [`Storage`] implementation needs (its file
//! handle, lock guard, mapped view and the file-name rule); [`check`] reads a topic directory or
//! a store without writing and reports what is damaged and what it holds (what the `ackstore`
//! command's `verify` and `inspect` print); [`pulsar`] sizes Pulsar's own encodings of an ack
//! state, the baseline of ackstore's size figures.

#![deny(missing_docs)]
#![warn(clippy::pedantic)]
// Every fallible function returns the one `Error` enum, whose variants document themselves.
#![allow(
    clippy::missing_errors_doc,
    clippy::missing_panics_doc,
    clippy::module_name_repetitions
)]

pub mod check;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals;
#[cfg(not(feature = "internals"))]
mod internals;
pub mod observe;
pub mod storage;

// The layers keep their `crate::<layer>` paths inside the crate.
use internals::{
    ackset, cursor, entry, error, filter, finder, format, hashing, journal, ledger, log, meta,
    position, store, sync,
};

pub use ackset::AckSetStats;
pub use ackset::pulsar;
pub use ackset::{AckBudget, AckBudgetStats};
pub use cursor::{
    Cursor, CursorConfig, CursorOptions, CursorStats, InitialPosition, OverflowPolicy, PersistMode,
    PersistStats, RecoverySource,
};
pub use entry::Entry;
pub use error::{CorruptionKind, CorruptionPlace, Error, Result};
pub use filter::{ReceivedFilter, SubscriptionType};
pub use finder::LedgerSpan;
pub use format::cursor::{MAX_BATCH_SIZE, MAX_PROPERTIES, MAX_PROPERTY_NAME};
pub use journal::{JournalConfig, JournalStats};
pub use ledger::{AppendMeta, LedgerConfig, ManagedLedger, NonDurableOptions};
pub use log::{
    DEFAULT_MAP_SEALED_FROM, DEFAULT_MAX_ENTRY_SIZE, LedgerInfo, LogConfig, LogStats, RecoveryMode,
    TailRepair,
};
pub use position::Position;
pub use storage::{FileStorage, LeaseState, MemStorage, Storage};
#[cfg(feature = "rados")]
pub use storage::{RadosCluster, RadosOptions, RadosStorage, RadosTimeouts};
pub use store::{GroupConfig, Store, StoreConfig, StoreFlush, StoreGroup};

/// The README's examples, compiled and run as doctests so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

//! ackstore: an embeddable storage engine that persists message-broker cursors.
//!
//! A topic's entries live in an append-only log of ledgers; every subscription has a cursor
//! whose acknowledgement state (the mark-delete position plus every individually acknowledged
//! entry above it) survives crashes, restarts and ownership hand-offs, however many ack holes
//! there are, in bounded memory. The design, vocabulary and invariants are in `docs/` and the
//! README.
//!
//! Layers, lowest first (a layer never imports one above it):
//! - [`position`] and [`error`]: shared vocabulary; [`observe`]: metric names and log events;
//! - [`format`](mod@format): pure encode/decode of every on-disk record;
//! - [`storage`]: files behind a trait (real files, or an in-memory disk that can lose power);
//! - [`log`]: the entry log, a directory of append-only, CRC-framed ledger files;
//! - [`meta`]: small versioned records with compare-and-set (topic and cursor records);
//! - [`ackset`]: acknowledged entries as roaring partitions, resident under an LRU budget;
//! - [`finder`]: the retained ledgers' layout, and searches by message index and timestamp;
//! - [`cursor`]: a subscription's acks, reads and seeks, and its ack state persisted in its own
//!   cursor ledger (flush, rollover, recovery);
//! - [`ledger`]: the managed ledger, one topic in one directory, and its cursor registry;
//! - [`filter`]: the consumer-side filter of already-received entries (PIP-260);
//! - [`store`]: every topic of a broker in one directory under one lock, opened lazily.

#![deny(missing_docs)]
#![warn(clippy::pedantic)]
// Every fallible function returns the one `Error` enum, whose variants document themselves.
#![allow(
    clippy::missing_errors_doc,
    clippy::missing_panics_doc,
    clippy::module_name_repetitions
)]

pub mod ackset;
pub mod cursor;
pub mod entry;
pub mod error;
pub mod filter;
pub mod finder;
pub mod format;
pub mod ledger;
pub mod log;
pub mod meta;
pub mod observe;
pub mod position;
pub mod storage;
pub mod store;

pub use error::{CorruptionKind, CorruptionPlace, Error, Result};
pub use ledger::{
    AppendMeta, Cursor, CursorOptions, Entry, InitialPosition, LedgerConfig, ManagedLedger,
};
pub use position::Position;
pub use store::{Store, StoreConfig};

/// The README's examples, compiled and run as doctests so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

//! ackstore: an embeddable storage engine that persists message-broker cursors.
//!
//! A topic's entries live in an append-only log of ledgers; every subscription has a cursor
//! whose acknowledgement state (the mark-delete position plus every individually acknowledged
//! entry above it) survives crashes, restarts and ownership hand-offs, however many ack holes
//! there are, in bounded memory. The design, vocabulary and invariants are in `docs/` and the
//! README.
//!
//! Layers, lowest first (a layer never imports one above it):
//! - [`storage`]: files behind a trait (real files, or an in-memory disk that can lose power);
//! - [`position`] and [`error`]: shared vocabulary.

#![deny(missing_docs)]
#![warn(clippy::pedantic)]
// Every fallible function returns the one `Error` enum, whose variants document themselves.
#![allow(
    clippy::missing_errors_doc,
    clippy::missing_panics_doc,
    clippy::module_name_repetitions
)]

pub mod error;
pub mod format;
pub mod position;
pub mod storage;

pub use error::{CorruptionKind, Error, Result};
pub use position::Position;

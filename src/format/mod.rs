//! On-disk byte layouts: pure encode and decode functions, CRCs and versions; no I/O.
//!
//! Owns: every format ackstore writes. Must never touch a file or the clock.

pub mod cursor;

//! Byte layouts of everything ackstore writes, as pure functions over byte slices.
//!
//! Owns: encoding, decoding, magic numbers, versions and checksums. Must never do I/O, panic on
//! any input, or allocate ahead of the bytes it was given.

pub mod meta;

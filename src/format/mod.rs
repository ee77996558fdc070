//! Byte layouts of everything ackstore writes: pure encode/decode over byte slices.
//!
//! Owns: magic numbers, versions, field order, endianness and CRC coverage of every record.
//! Must never: perform I/O, panic on any input, or allocate more than the input it decodes.
//! Every layout is drawn in `docs/format.md`.

pub mod partition;

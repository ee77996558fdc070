//! The on-disk formats: every record's encoder and decoder, their pinned sizes, round trips,
//! the versions earlier releases wrote (committed samples), and damaged bytes, which decode to
//! an error and never panic.
//!
//! One test binary for the layer: each module is the file of one behaviour.

#[path = "../support/mod.rs"]
mod support;

mod batch_entries;
mod compact_markers;
mod cursor_records;
mod cursor_samples;
mod journal_partitions;
mod journal_records;
mod ledger_frames;
mod meta_records;
mod names;
mod partition_bodies;
mod partition_known_answers;
mod partition_records;
mod positions;
mod reader;
mod store_catalogs;

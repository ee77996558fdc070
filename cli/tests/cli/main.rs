//! The `ackstore` command end to end (`perf`, `inspect`, `verify`), and `verify` agreeing with the
//! owner's open on healthy, damaged, torn and power-cut directories.
//!
//! One test binary for the layer: each module is the file of one behaviour, and the shared
//! setup in `tests/support` is compiled once for all of them.

#[path = "../../../tests/support/mod.rs"]
mod support;

mod commands;
mod cursor_identity;
mod output;
mod rados;
mod store;
mod store_integrity_attacks;
mod store_journal_rollover;
mod store_metadata_edits;
mod store_mutation;
mod store_verify_agrees;
mod verify_after_power_cut;
mod verify_agrees;
mod verify_agrees_journal_damage;
mod verify_agrees_mid_first_write;

//! The entry log: its API, group commit, opens and their proofs, crashes and torn or zero tails,
//! damage, and sample files of every version.
//!
//! One test binary for the layer: each module is the file of one behaviour, and the shared
//! setup in `tests/support` is compiled once for all of them.

#[path = "../support/mod.rs"]
mod support;

mod api;
mod corruption;
mod crash;
mod damaged_ledgers;
mod file_storage;
mod file_storage_threads;
mod finder;
mod group_commit;
mod ledger_file_names;
mod listing;
mod mem_storage_power_cuts;
mod model;
mod open;
mod open_proof;
mod samples;
mod sealed_open_reads;
mod sealed_reads;
mod sealed_window_reads;
mod storage_names;
mod synced_ledger_buffer;
mod synced_slot;
mod zero_tail;

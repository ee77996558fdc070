//! Cursors of a topic: ack semantics, seeks, batch-index acks, reopen and the first write after a
//! restart, crashes, memory bounds, threads, and the committed samples of cursor ledgers.
//!
//! One test binary for the layer: each module is the file of one behaviour, and the shared
//! setup in `tests/support` is compiled once for all of them.

#[path = "../support/mod.rs"]
mod support;

mod ack_known_ledger;
mod ack_known_races;
mod ack_many_attacks;
mod ack_many_groups;
mod ack_next_failed_load;
mod ack_semantics;
mod batch_acks;
mod batch_cold_partials;
mod batch_memory;
mod batch_persist;
mod batch_table;
mod batch_table_paged;
mod batch_threads;
mod crash;
mod dispatcher;
mod failing_loads;
mod first_write_crash;
mod first_write_crash_batch;
mod first_write_full_disk;
mod first_write_memory;
mod first_write_memory_each_op;
mod first_write_shared_budget;
mod first_write_threads;
mod hostile_calls;
mod initial_positions;
mod ledger_samples;
mod mark_move_failures;
mod mixed_acks_crash;
mod model;
mod model_shared_budget_threads;
mod non_durable;
mod open_writes;
mod properties;
mod pulsar_conformance;
mod received_filter;
mod reopen;
mod scale;
mod seek;
mod seek_crash;
mod single_entry_journal;
mod single_entry_journal_attacks;
mod single_entry_overflow;
mod snapshot_ranges;
mod threads;

//! The managed ledger (a topic opened alone): appends, rollover, trimming, crashes, a full disk,
//! concurrency stress, what operators see, and the open that stamps cursor records of an earlier
//! release.
//!
//! One test binary for the layer: each module is the file of one behaviour, and the shared
//! setup in `tests/support` is compiled once for all of them.

#[path = "../support/mod.rs"]
mod support;

mod claim_lookup_attacks;
mod crash;
mod cursor_ledger_import;
mod cursor_table_attacks;
mod cursor_table_chunks;
mod deletion_leftovers;
mod dropped_ledger_late_entries;
mod failed_fsync;
mod former_owner_creation;
mod full_disk;
mod full_disk_retries;
mod hosted_journal;
mod hosted_journal_owners;
mod import_attacks;
mod ledger_chunk_attacks;
mod ledger_chunks;
mod listed_cursor_without_record;
mod lost_temporary_record_file;
mod managed_ledger;
mod monitor;
mod open_during_former_owner_rolls;
mod open_listings;
mod open_stamps_earlier_cursor_records;
mod open_syncs;
mod operator_metrics_and_events;
mod pulsar_trimming;
mod sealed_ledger_damage_agrees_with_verify;
mod sealed_ledgers_open_on_first_use;
mod short_ledger_legitimate_sequences;
mod stress_threads;
mod sweep_against_new_owner;
mod unlisted_entry_like_a_cursor_ledger;

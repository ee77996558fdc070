//! The store: many topics under one claim, the shared cursor journal (markers, deltas, rollover,
//! space bound), its crashes, former owners, threads and the ack memory budget.
//!
//! One test binary for the layer: each module is the file of one behaviour, and the shared
//! setup in `tests/support` is compiled once for all of them.

#[path = "../support/mod.rs"]
mod support;

mod ack_memory;
mod ack_memory_pressure;
mod ack_memory_saved_first;
mod ack_saved_first_races;
mod adversarial;
mod batch_acks;
mod batch_attacks;
mod catalog_attacks;
mod catalog_chunks;
mod catalog_claim_races;
mod catalog_topic_ids;
mod catalog_write_unknown;
mod check_api;
mod claim;
mod claim_restarts;
mod crash;
mod cursor_names;
mod cursor_shared_parts;
mod cursor_threads_model;
mod cursors;
mod dirsync_latch_attacks;
mod failed_dir_sync_of_a_topic_record;
mod failed_sync_every_tick_a_segment;
mod former_owner;
mod former_owner_appends;
mod former_owner_open_leftovers;
mod full_file_system;
mod full_file_system_records;
mod group;
mod index;
mod journal;
mod journal_batch_exchange_sweep;
mod journal_batch_row_binding;
mod journal_batch_row_versions;
mod journal_catalog_faults;
mod journal_cursor_faults;
mod journal_default_segments;
mod journal_delta;
mod journal_delta_crash_every_change;
mod journal_delta_former_owner;
mod journal_delta_hostile_bytes;
mod journal_delta_space_bound;
mod journal_delta_store_crash;
mod journal_delta_takeover;
mod journal_delta_threads;
mod journal_marker_bound;
mod journal_marker_slices;
mod journal_partition_records;
mod journal_proof;
mod journal_rollover_races;
mod journal_rollover_threads;
mod journal_rows;
mod journal_seen_bounds;
mod journal_segment_count;
mod journal_segment_count_owners;
mod journal_snapshot_sample;
mod journal_threads;
mod journal_tiny_segments;
mod legacy_cursor_ledger_adopt;
mod lifecycle;
mod open_against_close;
mod open_files;
mod open_files_threads;
mod open_syncs;
mod owner_io;
mod reopen_after_failed_close;
mod seal;
mod single_entry_journal_versions;
mod single_owner_never_refused;
mod store_topic_claim_attacks;
mod store_topic_fenced_listing;
mod stress;
mod tick_slice_attacks;
mod topic_close;
mod topic_host;
mod topic_reopen;
mod topic_spaces;
mod topics_in_one_directory;

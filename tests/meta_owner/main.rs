//! Topic metadata and ownership: compare-and-set records, migration, takeovers, races, former
//! owners, I/O errors that never fence, and the hand-off between brokers.
//!
//! One test binary for the layer: each module is the file of one behaviour, and the shared
//! setup in `tests/support` is compiled once for all of them.

#[path = "../support/mod.rs"]
mod support;

mod after_fence_attacks;
mod after_io_error;
mod claim_lookup_attacks;
mod delete_cursor;
mod fenced_listing;
mod former_owner_after_takeover;
mod handoff;
mod ident_attacks;
mod io_error_never_fenced;
mod kept_file_attacks;
mod meta_cas;
mod meta_file_store;
mod meta_migration;
mod meta_owned;
mod meta_record_names;
mod race;
mod read_tail;
mod takeover;

//! Several processes on one directory: a child killed with SIGKILL at random moments, and two
//! processes sharing a directory without the lock. Each test re-runs this binary as its child
//! processes.
//!
//! One test binary for the layer: each module is the file of one behaviour, and the shared
//! setup in `tests/support` is compiled once for all of them.

#[path = "../support/mod.rs"]
mod support;

mod files_another_user_owns;
mod lock_kept_while_files_close;
mod lock_not_inherited;
mod open_files_limit;
mod shared_open_files;
mod sigkill_ack_many;
mod sigkill_ack_partitions;
mod sigkill_ack_partitions_child;
mod sigkill_ack_partitions_model;
mod sigkill_child;
mod sigkill_many_cursors;
mod sigkill_rollover_default_segments;
mod store_close_and_alone;
mod two_processes_one_directory;

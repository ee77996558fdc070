//! What the integration tests share, one submodule per concern. Each test crate
//! (`tests/<crate>/main.rs`, or a test binary of its own such as `tests/heap/main.rs`) declares
//! `mod support;` once and its modules use what they need; nothing here is a test of its own.
//!
//! - `cli`: the `ackstore` command (in the tests of package `ackstore-cli`, which builds it) run
//!   with its progress display off, its JSON.
//! - [`config`]: topic, cursor and store configurations, one function per shape.
//! - [`crash`]: power cuts at every storage operation ([`crash::cut_everywhere`]) and torn
//!   images of unsynced tails ([`crash::torn_image`]), for every crash test.
//! - [`log_model`]: deterministic entries and a model of an entry-log workload.
//! - [`fds`]: the process's open descriptors under a directory, and a temporary directory for
//!   files (memory-backed where there is one).
//! - [`harness`]: the name the test harness gives a test, and the command that re-runs this
//!   binary on one test as a child process.
//! - [`hooked`]: an in-memory disk whose files count writes and fsyncs and can stall or fail.
//! - [`journal`]: cursors backed by a store's cursor journal, committed in ticks, and their model.
//! - [`topic`]: managed ledgers on an in-memory disk, appends and cursor options.
//! - [`tmpfs`]: a real small file system (a tmpfs of a given size and inode count, mounted
//!   where the test may mount one), filled up and freed again by the test.
//! - [`takeover`]: a storage that runs a takeover (or any action) after its N-th operation,
//!   inside the call that made it.
//! - [`tap`]: a pass-through storage with a hook before and after every operation and around
//!   every write.
//! - [`workload`]: a seeded random source and the acknowledged-set model of the stress and
//!   process-kill tests.
//! - [`ack_patterns`]: how consumers acknowledge, shared with the ack-set benchmark.
//! - `rados` (feature `rados`): storage in the test Ceph cluster, a fresh namespace per call.
//! - [`prefixed`]: a storage that keeps its files under a name prefix in a directory of real
//!   files, handing on that directory's files (as a broker's storage wrapper may).
//! - [`samples`]: copies of the committed sample directories under `tests/data/`, and what
//!   the samples of cursor ledgers hold.
//! - [`mutate`]: a store directory read into memory, damage and checksum-recomputed edits
//!   applied to a copy of it, and `ackstore verify` run on the result.
//!
//! `ack_patterns` is also compiled alone into a benchmark, so it imports nothing from its
//! siblings.

#![allow(dead_code, reason = "each test file uses a different subset")]

pub mod ack_patterns;
pub mod cli;
pub mod config;
pub mod crash;
pub mod fds;
pub mod harness;
pub mod hooked;
pub mod journal;
pub mod log_model;
pub mod mutate;
pub mod prefixed;
#[cfg(feature = "rados")]
pub mod rados;
pub mod samples;
pub mod takeover;
pub mod tap;
pub mod tmpfs;
pub mod topic;
pub mod workload;

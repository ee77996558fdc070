//! The RADOS backend against a real Ceph cluster (`CEPH_CONF`): the storage contract, the lease
//! and fail-over between processes, waiting opens, stores, hostile namespaces, object sizes and
//! the command.
//!
//! One test binary for the layer: each module is the file of one behaviour, and the shared
//! setup in `tests/support` is compiled once for all of them. The backend-generic behaviour
//! tests of the other layers (`support::topic::on_each_backend`) are compiled in here too, from
//! their own files, so a build with the `rados` feature runs them on RADOS without building
//! the other test crates again.

#[path = "../support/mod.rs"]
mod support;

mod failover;
mod fencing_attacks;
mod hostile_namespaces;
mod lease_lost;
mod lease_state;
mod lock_wait;
mod object_size;
mod open_cost;
mod shortcuts;
mod storage;
mod store;
mod takeover;

// Backend-generic tests of the other layers: on RADOS and on local files.
#[path = "../cursor/ack_semantics.rs"]
mod cursor_ack_semantics;
#[path = "../cursor/initial_positions.rs"]
mod cursor_initial_positions;
#[path = "../cursor/properties.rs"]
mod cursor_properties;
#[path = "../cursor/seek.rs"]
mod cursor_seek;
#[path = "../meta_owner/handoff.rs"]
mod meta_owner_handoff;
#[path = "../meta_owner/meta_cas.rs"]
mod meta_owner_meta_cas;
#[path = "../store/topics_in_one_directory.rs"]
mod store_topics_in_one_directory;
#[path = "../topic/managed_ledger.rs"]
mod topic_managed_ledger;

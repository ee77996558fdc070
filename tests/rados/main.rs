//! The RADOS backend against a real Ceph cluster (`CEPH_CONF`): the storage contract, the lease
//! and fail-over between processes, waiting opens, stores, hostile namespaces, object sizes and
//! the command.
//!
//! One test binary for the layer: each module is the file of one behaviour, and the shared
//! setup in `tests/support` is compiled once for all of them.

#[path = "../support/mod.rs"]
mod support;

mod cli;
mod failover;
mod hostile_namespaces;
mod lease_lost;
mod lock_wait;
mod object_size;
mod storage;
mod store;

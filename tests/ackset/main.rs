//! The ack set: ranges and partitions against a model (with a store that fails), its memory
//! budget, encoded sizes, and partition records of every format version.
//!
//! One test binary for the layer: each module is the file of one behaviour, and the shared
//! setup in `tests/support` is compiled once for all of them.

#[path = "../support/mod.rs"]
mod support;

mod budget;
mod budget_members;
mod faults;
mod model;
mod partition_charges;
mod partition_index;
mod partition_samples;
mod partition_store;
mod pulsar_sizes;
mod range_set;
mod ranges;
mod resident_lists;
mod size;

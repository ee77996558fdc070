//! Cursors: a subscription's position and ack state.
//!
//! This file declares the persistence submodules only:
//! - [`persist`]: flushing the ack state to the cursor's own cursor ledger (single-entry
//!   snapshot, or partitions plus a marker), rollover, and the cursor record's pointer;
//! - [`recover`]: resuming from the newest valid state in the cursor ledger;
//! - [`store`]: the cursor ledger as the `PartitionStore` of the cursor's `RangeSetWrapper`.

pub mod persist;
pub mod recover;
mod snapshot;
pub mod store;
mod table;

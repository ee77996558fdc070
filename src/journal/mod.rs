//! The cursor journal: one shared, group-committed log of every cursor's ack state.
//!
//! Owns: the index of every cursor's records in the journal ([`index`]). Must never import a
//! layer above it (`store`, `cursor`, `ledger`, `check`).

pub mod index;

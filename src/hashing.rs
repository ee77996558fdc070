//! The hasher of the crate's hash tables.
//!
//! Owns: which hasher a table keys with. Tables keyed by what ackstore makes itself (ids,
//! positions, partition keys, journal locations, the names of its own records and files) are
//! [`IdMap`] and [`IdSet`]: foldhash, seeded at random for each table, several times cheaper
//! than `SipHash` for the short keys these tables hold (`SipHash` was about a twentieth of a
//! 100,000-cursor restart's instructions, docs/benchmarks.md). Tables keyed by names a broker's
//! clients may choose (topic and subscription names, and paths under a directory the caller
//! named) keep `std::collections::HashMap`'s `SipHash`: foldhash resists only collisions crafted
//! without observing the process, and a tenant who picks many names could otherwise make one
//! table's lookups slow.

pub use foldhash::{HashMapExt, HashSetExt};

/// A hash map keyed by values ackstore makes itself (see the module).
pub type IdMap<K, V> = foldhash::HashMap<K, V>;

/// A hash set of values ackstore makes itself (see the module).
pub type IdSet<T> = foldhash::HashSet<T>;

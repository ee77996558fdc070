//! [`PartitionStore`]: where the wrapper puts evicted partitions and loads cold ones from, and
//! [`MemPartitionStore`], an in-memory store for tests and tools.

use roaring::RoaringBitmap;

use super::PartitionKey;
use crate::error::{CorruptionKind, Error, Result};
use crate::format::partition::{decode_partition, encode_partition, peek_bounds};
use crate::hashing::IdMap;

/// Where a [`RangeSetWrapper`](super::RangeSetWrapper) puts partitions it evicts and loads the
/// partitions it does not hold. Object safe.
///
/// The store remembers where it put each partition: after `store(key, b)` returns `Ok`, `load(key)`
/// returns `b` until the next `store` or `forget` of that key. Bitmaps hold
/// `entry_id - key.first_entry()`.
pub trait PartitionStore: Send {
    /// The last bitmap stored under `key`, or `None` if there is none.
    fn load(&mut self, key: PartitionKey) -> Result<Option<RoaringBitmap>>;

    /// Keeps `bitmap` as the contents of `key`, replacing any earlier one.
    fn store(&mut self, key: PartitionKey, bitmap: &RoaringBitmap) -> Result<()>;

    /// The lowest and highest values of the last bitmap stored under `key`, when the store can
    /// tell them without decoding the whole bitmap, from bytes it checked as a load checks
    /// them (at least their CRC); `None` when it cannot (then the caller loads the partition)
    /// or holds none. The default tells none.
    fn bounds(&mut self, key: PartitionKey) -> Result<Option<(u32, u32)>> {
        let _ = key;
        Ok(None)
    }

    /// The bounds [`PartitionStore::bounds`] last told for `key`, when the store still holds the
    /// copy they were read from and can tell so without a read; `None` otherwise. The default
    /// tells none.
    fn known_bounds(&mut self, key: PartitionKey) -> Option<(u32, u32)> {
        let _ = key;
        None
    }

    /// The partition no longer exists (its acks were all removed); the store may drop its copy.
    /// It is never loaded again unless stored again first.
    fn forget(&mut self, key: PartitionKey) {
        let _ = key;
    }
}

/// A [`PartitionStore`] in a `HashMap`, holding each partition in its encoded form (so every load
/// goes through the partition decoder and its checks).
#[derive(Debug, Default)]
pub struct MemPartitionStore {
    records: IdMap<PartitionKey, Vec<u8>>,
    loads: u64,
    stores: u64,
}

impl MemPartitionStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of partitions held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the store holds nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Bytes of all records held.
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.records.values().map(Vec::len).sum()
    }

    /// Number of successful `load` calls that found a partition.
    #[must_use]
    pub fn loads(&self) -> u64 {
        self.loads
    }

    /// Number of `store` calls.
    #[must_use]
    pub fn stores(&self) -> u64 {
        self.stores
    }

    /// The encoded record of `key`, if held.
    #[must_use]
    pub fn record(&self, key: PartitionKey) -> Option<&[u8]> {
        self.records.get(&key).map(Vec::as_slice)
    }
}

impl PartitionStore for MemPartitionStore {
    fn load(&mut self, key: PartitionKey) -> Result<Option<RoaringBitmap>> {
        let Some(record) = self.records.get(&key) else {
            return Ok(None);
        };
        let (found, bitmap) =
            decode_partition(record).map_err(|c| Error::corrupted_at(key.place(), c.kind))?;
        if found != key {
            return Err(Error::corrupted_at(
                key.place(),
                CorruptionKind::InvalidField("partition key"),
            ));
        }
        self.loads += 1;
        Ok(Some(bitmap))
    }

    fn store(&mut self, key: PartitionKey, bitmap: &RoaringBitmap) -> Result<()> {
        self.records.insert(key, encode_partition(key, bitmap));
        self.stores += 1;
        Ok(())
    }

    fn bounds(&mut self, key: PartitionKey) -> Result<Option<(u32, u32)>> {
        let Some(record) = self.records.get(&key) else {
            return Ok(None);
        };
        match peek_bounds(record).map_err(|c| Error::corrupted_at(key.place(), c.kind))? {
            Some((found, lo, hi)) if found == key => Ok(Some((lo, hi))),
            Some(_) => Err(Error::corrupted_at(
                key.place(),
                CorruptionKind::InvalidField("partition key"),
            )),
            None => Ok(None),
        }
    }

    fn forget(&mut self, key: PartitionKey) {
        self.records.remove(&key);
    }
}

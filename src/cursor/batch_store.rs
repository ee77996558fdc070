//! Where a cursor's partial entries (batch-index acks) go when they are evicted from memory,
//! and where cold ones are loaded from.
//!
//! Owns: [`BatchLocation`] (where a partition's batch-index entry or batch record is, as a
//! marker's row names it), the [`BatchStore`] trait and two of its implementations:
//! [`CursorBatchStore`], which reads a cursor ledger's batch-index entries (kind 5) back
//! verified, for a cursor read from its ledger until its import; and [`MemBatchStore`], which
//! keeps them encoded in memory, for a non-durable cursor. The journal's is `journal.rs`.
//!
//! Must never: sync or commit anything, write to a cursor ledger, or hand out a partition whose
//! entry fails its CRC, key or count check.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::ackset::PartitionKey;
use crate::error::{CorruptionKind, CorruptionPlace, Error, Result};
use crate::format::cursor::{
    BatchPartition, BatchRow, decode_batch_entry, encode_batch_entry, payload_crc,
};
use crate::hashing::IdMap;
use crate::log::EntryLog;
use crate::position::Position;

use super::store::at_entry;

/// Most rows a marker holds its batch table inline; a larger table goes to batch pages
/// (kind 6) and the marker lists those instead, so the table takes at most this many rows'
/// bytes of a marker until more than this many pages are needed.
pub(crate) const BATCH_INLINE_ROWS: usize = 16;

/// Where a partition's committed batch-index entry is, and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLocation {
    /// The marker's row for it.
    pub row: BatchRow,
    /// Bytes of the entry's payload.
    pub len: u64,
}

/// The committed batch table: one location per partition with partial entries.
pub(crate) type BatchTable = BTreeMap<PartitionKey, BatchLocation>;

/// Where evicted partial entries are kept, one batch-index entry per partition. Object safe.
pub trait BatchStore: Send + fmt::Debug {
    /// Reads back the partition `key` stored at `location`, checking that it is what
    /// `location` describes.
    fn load(&mut self, key: PartitionKey, location: &BatchLocation) -> Result<BatchPartition>;

    /// Keeps `partition` (not empty) and returns where it is.
    fn store(&mut self, partition: &BatchPartition) -> Result<BatchLocation>;

    /// The copy of `key` is no longer needed (the partition changed or is gone); the store may
    /// drop it.
    fn forget(&mut self, key: PartitionKey) {
        let _ = key;
    }
}

/// Encodes `partition` as a batch-index entry.
pub(crate) fn encode(partition: &BatchPartition) -> Result<Vec<u8>> {
    encode_batch_entry(partition).ok_or_else(|| Error::InvalidArgument {
        reason: format!(
            "batch-index state of partition {}:{} does not encode",
            partition.ledger_id, partition.chunk
        ),
    })
}

/// The location of `payload`, the encoding of `partition`, at `entry_id`.
fn location_of(partition: &BatchPartition, entry_id: u64, payload: &[u8]) -> BatchLocation {
    BatchLocation {
        row: BatchRow {
            ledger_id: partition.ledger_id,
            chunk: partition.chunk,
            entry_id,
            crc: payload_crc(payload),
            entries: u32::try_from(partition.entries.len()).unwrap_or(u32::MAX),
        },
        len: payload.len() as u64,
    }
}

/// Decodes a batch-index entry read from `place`, checking CRC, key and entry count against
/// `location`.
fn decode_checked(
    key: PartitionKey,
    location: &BatchLocation,
    payload: &[u8],
    place: Position,
) -> Result<BatchPartition> {
    let bad = |kind| Error::Corrupted {
        place: CorruptionPlace::Entry(place),
        kind,
    };
    if payload_crc(payload) != location.row.crc {
        return Err(bad(CorruptionKind::ChecksumMismatch));
    }
    let partition =
        decode_batch_entry(payload).map_err(|e| at_entry(place.ledger_id, place.entry_id, e))?;
    if (partition.ledger_id, partition.chunk) != (key.ledger_id, key.chunk)
        || partition.entries.len() != location.row.entries as usize
    {
        return Err(bad(CorruptionKind::InvalidField(
            "batch entry does not match its row",
        )));
    }
    Ok(partition)
}

/// A read-only [`BatchStore`] over one cursor's cursor ledger, for a cursor read from it until
/// its first write moves it into the journal (`import.rs`): `load` reads a batch-index entry,
/// `store` refuses (the cursor's partial entries hold their stores until the import installs
/// the journal's).
#[derive(Debug)]
pub(crate) struct CursorBatchStore {
    log: Arc<EntryLog>,
    /// The cursor ledger; `None` when the record names none, or a missing one.
    ledger: Option<u64>,
}

impl CursorBatchStore {
    pub(crate) fn new(log: Arc<EntryLog>, ledger: Option<u64>) -> Self {
        Self { log, ledger }
    }
}

impl BatchStore for CursorBatchStore {
    fn load(&mut self, key: PartitionKey, location: &BatchLocation) -> Result<BatchPartition> {
        let ledger = self.ledger.ok_or(Error::Corrupted {
            place: key.place(),
            kind: CorruptionKind::Missing,
        })?;
        let payload = self.log.read(ledger, location.row.entry_id)?.payload;
        decode_checked(
            key,
            location,
            &payload,
            Position::new(ledger, location.row.entry_id),
        )
    }

    fn store(&mut self, partition: &BatchPartition) -> Result<BatchLocation> {
        Err(Error::Unsupported {
            what: format!(
                "partial entries of partition {}:{} cannot be stored in a cursor ledger, which \
                 is read only",
                partition.ledger_id, partition.chunk
            ),
        })
    }
}

/// A [`BatchStore`] in memory, holding each partition as its batch-index entry (so every load
/// goes through the decoder and its checks): what a non-durable cursor evicts to. It keeps
/// the newest copy of each partition only.
#[derive(Debug, Default)]
pub struct MemBatchStore {
    entries: IdMap<PartitionKey, (u64, Vec<u8>)>,
    next_id: u64,
}

impl BatchStore for MemBatchStore {
    fn load(&mut self, key: PartitionKey, location: &BatchLocation) -> Result<BatchPartition> {
        let place = Position::new(0, location.row.entry_id);
        match self.entries.get(&key) {
            Some((id, payload)) if *id == location.row.entry_id => {
                decode_checked(key, location, payload, place)
            }
            _ => Err(Error::Corrupted {
                place: key.place(),
                kind: CorruptionKind::Missing,
            }),
        }
    }

    fn store(&mut self, partition: &BatchPartition) -> Result<BatchLocation> {
        let payload = encode(partition)?;
        let id = self.next_id;
        self.next_id += 1;
        let location = location_of(partition, id, &payload);
        let key = PartitionKey {
            ledger_id: partition.ledger_id,
            chunk: partition.chunk,
        };
        self.entries.insert(key, (id, payload));
        Ok(location)
    }

    fn forget(&mut self, key: PartitionKey) {
        self.entries.remove(&key);
    }
}

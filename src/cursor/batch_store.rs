//! Where a cursor's partial entries (batch-index acks) go when they are evicted from memory,
//! and where cold ones are loaded from.
//!
//! Owns: [`BatchLocation`] (where a partition's batch-index entry is, as a marker's row names
//! it), the [`BatchStore`] trait and its two implementations: [`CursorBatchStore`], which
//! appends an evicted partition's partial entries to the cursor ledger as a batch-index entry
//! (kind 5, exactly the bytes a flush writes) and reads them back verified; and
//! [`MemBatchStore`], which keeps them encoded in memory, for a non-durable cursor (it has no
//! cursor ledger).
//!
//! Must never: sync or commit anything (an entry written here is meaningful only once a marker
//! that references it is synced), or hand out a partition whose entry fails its CRC, key or
//! count check.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use crate::ackset::PartitionKey;
use crate::error::{CorruptionKind, CorruptionPlace, Error, Result};
use crate::format::cursor::{
    BatchPartition, BatchRow, EntryKind, decode_batch_entry, encode_batch_entry, payload_crc,
};
use crate::log::EntryLog;
use crate::position::Position;

use super::store::{SharedState, append_entry, at_entry, ensure_ledger};

/// Most rows a marker holds its batch table inline; a larger table goes to batch pages
/// (kind 6) and the marker lists those instead, so the table takes at most this many rows'
/// bytes of a marker until more than this many pages are needed.
pub(crate) const BATCH_INLINE_ROWS: usize = 16;

/// Where a partition's committed batch-index entry is, and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchLocation {
    /// The marker's row for it.
    pub row: BatchRow,
    /// Bytes of the entry's payload.
    pub len: u64,
}

/// The committed batch table: one location per partition with partial entries.
pub(crate) type BatchTable = BTreeMap<PartitionKey, BatchLocation>;

/// Where evicted partial entries are kept, one batch-index entry per partition. Object safe.
pub(crate) trait BatchStore: Send + fmt::Debug {
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

/// A [`BatchStore`] over one cursor's cursor ledger: `store` appends a batch-index entry
/// (creating the cursor ledger if the cursor has none yet), `load` reads one from the current
/// cursor ledger.
#[derive(Debug)]
pub(crate) struct CursorBatchStore {
    log: Arc<EntryLog>,
    shared: SharedState,
}

impl CursorBatchStore {
    pub(crate) fn new(log: Arc<EntryLog>, shared: SharedState) -> Self {
        Self { log, shared }
    }
}

impl BatchStore for CursorBatchStore {
    fn load(&mut self, key: PartitionKey, location: &BatchLocation) -> Result<BatchPartition> {
        let ledger = self.shared.lock().ledger.ok_or(Error::Corrupted {
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
        if self.shared.lock().refuses_stores() {
            return Err(Error::PreviousIo);
        }
        let payload = encode(partition)?;
        let written = ensure_ledger(&self.log, &self.shared).and_then(|ledger| {
            append_entry(
                &self.log,
                &self.shared,
                ledger,
                EntryKind::BatchIndexes,
                &payload,
            )
        });
        match written {
            Ok(entry_id) => Ok(location_of(partition, entry_id, &payload)),
            Err(e) => {
                // The ledger latched (or could not be created): the next flush starts afresh.
                let mut s = self.shared.lock();
                s.ledger_failed |= s.ledger.is_some();
                Err(e)
            }
        }
    }
}

/// A [`BatchStore`] in memory, holding each partition as its batch-index entry (so every load
/// goes through the decoder and its checks): what a non-durable cursor evicts to. It keeps
/// the newest copy of each partition only.
#[derive(Debug, Default)]
pub(crate) struct MemBatchStore {
    entries: HashMap<PartitionKey, (u64, Vec<u8>)>,
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

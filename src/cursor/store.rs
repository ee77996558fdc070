//! The cursor ledger as the read-only backing store of a cursor's ack partitions.
//!
//! Owns: where each partition of one cursor's ack set lives in its cursor ledger (an entry of
//! its own, or inline in a row of a compact index page or marker: entry id, CRC, cardinality,
//! offset, as the recovered marker lists them) and reading them back verified, for a cursor
//! read from a cursor ledger until its first write moves it into the journal (`import.rs`).
//!
//! Must never: hand out a partition whose entry fails its CRC (the CRC of the entry that holds
//! it, end to end), key or cardinality check; write to the ledger.

use std::collections::BTreeMap;
use std::sync::Arc;

use roaring::RoaringBitmap;

use crate::ackset::{PartitionKey, PartitionStore};
use crate::error::{CorruptionKind, CorruptionPlace, Error, Result};
use crate::format::Corruption;
use crate::format::cursor::{decode_partition_entry, payload_crc};
use crate::format::partition::{decode_inline, decode_partition};
use crate::log::EntryLog;
use crate::position::Position;

/// Where one partition's current version lives in the cursor ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// Cursor-ledger entry holding the partition: its own partition entry, or the compact
    /// index page or marker whose row carries it inline.
    pub entry_id: u64,
    /// CRC32 of that entry's whole payload.
    pub crc: u32,
    /// Acked entries in the partition.
    pub cardinality: u64,
    /// Bytes of the partition: its entry's payload, or its inline form.
    pub len: u64,
    /// Where the inline form starts in that entry's payload; `None` for a partition in an
    /// entry of its own.
    pub inline_at: Option<u32>,
}

/// A partition's stored bytes, as read back and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stored {
    /// The payload of its own partition entry (CRC, key and cardinality checked).
    Entry(Vec<u8>),
    /// Its inline form (the CRC of the entry that carries it checked).
    Inline(Vec<u8>),
}

/// The last entry read whole to take an inline partition out of it: rows of one page (or
/// marker) are read one after the other, so one entry read serves them all.
#[derive(Debug, Default)]
pub(crate) struct EntryCache {
    /// Ledger, entry id, the payload's CRC (checked when it was read) and the payload.
    last: Option<(u64, u64, u32, Arc<Vec<u8>>)>,
}

/// Entries larger than this are read again for each partition rather than kept.
const CACHED_ENTRY_MAX: usize = 64 << 10;

impl EntryCache {
    /// The payload of entry `entry_id` of `ledger`, whose CRC must be `crc`.
    fn read(
        &mut self,
        log: &EntryLog,
        ledger: u64,
        entry_id: u64,
        crc: u32,
    ) -> Result<Arc<Vec<u8>>> {
        if let Some((l, e, c, payload)) = &self.last
            && (*l, *e, *c) == (ledger, entry_id, crc)
        {
            return Ok(Arc::clone(payload));
        }
        let payload = log.read(ledger, entry_id)?.payload;
        if payload_crc(&payload) != crc {
            return Err(entry_corrupted(
                ledger,
                entry_id,
                CorruptionKind::ChecksumMismatch,
            ));
        }
        let payload = Arc::new(payload);
        if payload.len() <= CACHED_ENTRY_MAX {
            self.last = Some((ledger, entry_id, crc, Arc::clone(&payload)));
        }
        Ok(payload)
    }
}

fn entry_corrupted(ledger: u64, entry_id: u64, kind: CorruptionKind) -> Error {
    Error::Corrupted {
        place: CorruptionPlace::Entry(Position::new(ledger, entry_id)),
        kind,
    }
}

/// Names the cursor-ledger entry a decoder's corruption was found in.
pub(crate) fn at_entry(ledger: u64, entry_id: u64, err: Corruption) -> Error {
    err.in_entry(Position::new(ledger, entry_id))
}

/// Reads the partition of `key` at `location` in `ledger`, checked: a partition entry's CRC,
/// key and cardinality; an inline form's carrying entry's CRC and its bounds within it (the
/// form itself is checked when decoded).
pub(crate) fn read_stored(
    log: &EntryLog,
    ledger: u64,
    key: PartitionKey,
    location: &Location,
    cache: &mut EntryCache,
) -> Result<Stored> {
    let Some(at) = location.inline_at else {
        let payload = log.read(ledger, location.entry_id)?.payload;
        check_partition_payload(ledger, key, location, &payload)?;
        return Ok(Stored::Entry(payload));
    };
    let payload = cache.read(log, ledger, location.entry_id, location.crc)?;
    let start = at as usize;
    let end = usize::try_from(location.len)
        .ok()
        .and_then(|len| start.checked_add(len));
    end.and_then(|end| payload.get(start..end))
        .map(|bytes| Stored::Inline(bytes.to_vec()))
        .ok_or_else(|| {
            entry_corrupted(
                ledger,
                location.entry_id,
                CorruptionKind::InvalidField("inline partition bounds"),
            )
        })
}

/// Decodes what [`read_stored`] returned into the partition's bitmap, checking key and
/// cardinality against the record.
pub(crate) fn decode_stored(
    ledger: u64,
    key: PartitionKey,
    location: &Location,
    stored: &Stored,
) -> Result<RoaringBitmap> {
    match stored {
        Stored::Entry(payload) => decode_partition_payload(ledger, key, location, payload),
        Stored::Inline(inline) => {
            let bitmap = decode_inline(key, inline).map_err(|e| {
                at_entry(
                    ledger,
                    location.entry_id,
                    e.after(location.inline_at.unwrap_or(0) as usize),
                )
            })?;
            if bitmap.len() != location.cardinality {
                return Err(entry_corrupted(
                    ledger,
                    location.entry_id,
                    CorruptionKind::InvalidField("partition cardinality"),
                ));
            }
            Ok(bitmap)
        }
    }
}

/// Checks a partition entry payload against the row that references it (CRC first).
pub(crate) fn check_partition_payload(
    ledger: u64,
    key: PartitionKey,
    location: &Location,
    payload: &[u8],
) -> Result<()> {
    let bad = |kind| entry_corrupted(ledger, location.entry_id, kind);
    if payload_crc(payload) != location.crc {
        return Err(bad(CorruptionKind::ChecksumMismatch));
    }
    let entry =
        decode_partition_entry(payload).map_err(|e| at_entry(ledger, location.entry_id, e))?;
    if (entry.ledger_id, entry.chunk) != (key.ledger_id, key.chunk) {
        return Err(bad(CorruptionKind::InvalidField("partition key")));
    }
    if entry.cardinality != location.cardinality {
        return Err(bad(CorruptionKind::InvalidField("partition cardinality")));
    }
    Ok(())
}

/// Decodes a verified partition payload into its bitmap, checking key and cardinality again
/// against the inner encoding.
fn decode_partition_payload(
    ledger: u64,
    key: PartitionKey,
    location: &Location,
    payload: &[u8],
) -> Result<RoaringBitmap> {
    let bad = |kind| entry_corrupted(ledger, location.entry_id, kind);
    let entry =
        decode_partition_entry(payload).map_err(|e| at_entry(ledger, location.entry_id, e))?;
    let (inner_key, bitmap) =
        decode_partition(entry.body).map_err(|e| at_entry(ledger, location.entry_id, e))?;
    if inner_key != key {
        return Err(bad(CorruptionKind::InvalidField("partition key")));
    }
    if bitmap.len() != location.cardinality {
        return Err(bad(CorruptionKind::InvalidField("partition cardinality")));
    }
    Ok(bitmap)
}

/// A read-only [`PartitionStore`] over one cursor's cursor ledger, for a cursor read from it
/// until its first write moves it into the journal (`import.rs`).
///
/// `load` reads a partition back, from its own entry or from the row of the page or marker
/// that carries it inline, and verifies the CRC of the entry read, the key and the
/// cardinality. `store` refuses: nothing is ever appended to a cursor ledger (the cursor's ack
/// set holds its stores until the import installs the journal's).
#[derive(Debug)]
pub struct CursorLedgerStore {
    log: Arc<EntryLog>,
    /// The cursor ledger; `None` when the record names none, or a missing one.
    ledger: Option<u64>,
    /// Where the recovered marker puts every live partition.
    locations: BTreeMap<PartitionKey, Location>,
    /// The page (or marker) last read for an inline partition.
    cache: EntryCache,
}

impl CursorLedgerStore {
    /// The store of `ledger` with the partitions at `locations`.
    pub(crate) fn new(
        log: Arc<EntryLog>,
        ledger: Option<u64>,
        locations: BTreeMap<PartitionKey, Location>,
    ) -> Self {
        Self {
            log,
            ledger,
            locations,
            cache: EntryCache::default(),
        }
    }
}

impl PartitionStore for CursorLedgerStore {
    fn load(&mut self, key: PartitionKey) -> Result<Option<RoaringBitmap>> {
        let (Some(ledger), Some(location)) = (self.ledger, self.locations.get(&key).copied())
        else {
            return Ok(None);
        };
        let stored = read_stored(&self.log, ledger, key, &location, &mut self.cache)?;
        decode_stored(ledger, key, &location, &stored).map(Some)
    }

    fn store(&mut self, key: PartitionKey, _bitmap: &RoaringBitmap) -> Result<()> {
        Err(Error::Unsupported {
            what: format!(
                "partition {}:{} cannot be stored in a cursor ledger, which is read only",
                key.ledger_id, key.chunk
            ),
        })
    }

    fn forget(&mut self, key: PartitionKey) {
        // Its entry stays in the ledger, which is only read and goes whole once imported.
        self.locations.remove(&key);
    }
}

//! The cursor ledger as the backing store of a cursor's ack partitions.
//!
//! Owns: where each partition of one cursor's ack set lives in its cursor ledger (an entry of
//! its own, or inline in a row of a compact index page or marker: entry id, CRC, cardinality,
//! offset), writing evicted partitions there and reading them back verified. Shared between the
//! [`CursorLedgerStore`] inside the cursor's `RangeSetWrapper` and the cursor's persister, which
//! commits these locations with a marker.
//!
//! Must never: hand out a partition whose entry fails its CRC (the CRC of the entry that holds
//! it, end to end), key or cardinality check; sync or commit anything (an entry written here is
//! durable and meaningful only once a marker that references it is synced).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use roaring::RoaringBitmap;

use crate::ackset::{PartitionKey, PartitionStore};
use crate::error::{CorruptionKind, CorruptionPlace, Error, Result};
use crate::format::Corruption;
use crate::format::cursor::{
    EntryKind, PartitionEntry, decode_partition_entry, encode_partition_entry,
    encode_partition_payload, payload_crc,
};
use crate::format::partition::{decode_inline, decode_partition, record_of_inline};
use crate::log::{EntryLog, EntryMeta};
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

/// State shared by the store and the persister of one cursor.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// The cursor ledger entries are appended to; created on first need.
    pub ledger: Option<u64>,
    /// Newest location of every partition written to `ledger` (a superset of the live ones).
    pub locations: BTreeMap<PartitionKey, Location>,
    /// Partitions written by evictions since the handle opened.
    pub evictions_stored: u64,
    /// Entries appended (by evictions and flushes).
    pub entries_written: u64,
    /// Payload bytes appended (by evictions and flushes).
    pub bytes_written: u64,
    /// A write to `ledger` failed: the entry log refuses further writes to it, so the next
    /// flush moves the state to a fresh cursor ledger, and evictions store nothing until then.
    pub ledger_failed: bool,
    /// `ledger` is the one this handle recovered from and has not claimed yet
    /// ([`super::persist::CursorPersister::defer_claim`]): a former owner may still append to
    /// it, so nothing is appended to it; the next flush moves the state to a fresh cursor
    /// ledger, and evictions store nothing until then.
    pub claim_pending: bool,
}

impl Shared {
    /// Whether an eviction may append to `ledger` (see `ledger_failed` and `claim_pending`).
    pub(crate) fn refuses_stores(&self) -> bool {
        self.ledger_failed || self.claim_pending
    }
}

/// Handle on the shared state.
#[derive(Debug, Clone, Default)]
pub(crate) struct SharedState(Arc<Mutex<Shared>>);

impl SharedState {
    pub(crate) fn new(shared: Shared) -> Self {
        Self(Arc::new(Mutex::new(shared)))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Shared> {
        // The state is plain data updated after each successful write; keep it after a panic.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The entry-log frame metadata of a cursor-ledger entry: its kind, so recovery can skip
/// partitions and pages by reading frame headers only.
pub(crate) fn kind_meta(kind: EntryKind) -> EntryMeta {
    EntryMeta {
        index: 0,
        num_messages: u32::from(kind.code()),
        timestamp: 0,
    }
}

/// Appends `payload` (an encoded entry of `kind`) to `ledger`, counting it in `shared`.
pub(crate) fn append_entry(
    log: &EntryLog,
    shared: &SharedState,
    ledger: u64,
    kind: EntryKind,
    payload: &[u8],
) -> Result<u64> {
    let id = log.append(ledger, kind_meta(kind), payload)?;
    let mut s = shared.lock();
    s.entries_written += 1;
    s.bytes_written += payload.len() as u64;
    Ok(id)
}

/// Writes `bitmap` as the partition entry of `key` to `ledger`; returns its location.
pub(crate) fn write_partition(
    log: &EntryLog,
    shared: &SharedState,
    ledger: u64,
    key: PartitionKey,
    bitmap: &RoaringBitmap,
) -> Result<Location> {
    let payload = encode_partition_payload(key, bitmap);
    write_partition_payload(log, shared, ledger, &payload, bitmap.len())
}

/// Appends `payload`, a partition entry holding `cardinality` acked entries, to `ledger`;
/// returns its location.
pub(crate) fn write_partition_payload(
    log: &EntryLog,
    shared: &SharedState,
    ledger: u64,
    payload: &[u8],
    cardinality: u64,
) -> Result<Location> {
    let entry_id = append_entry(log, shared, ledger, EntryKind::Partition, payload)?;
    Ok(Location {
        entry_id,
        crc: payload_crc(payload),
        cardinality,
        len: payload.len() as u64,
        inline_at: None,
    })
}

/// The partition entry holding the version 2 `record` of `key`.
pub(crate) fn partition_payload_of_record(
    key: PartitionKey,
    record: &[u8],
    cardinality: u64,
) -> Vec<u8> {
    encode_partition_entry(&PartitionEntry {
        ledger_id: key.ledger_id,
        chunk: key.chunk,
        cardinality,
        body: record,
    })
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

/// The partition entry payload of what [`read_stored`] returned: the entry itself, or one
/// built around the record an inline form stands for.
pub(crate) fn stored_as_payload(key: PartitionKey, stored: Stored, cardinality: u64) -> Vec<u8> {
    match stored {
        Stored::Entry(payload) => payload,
        Stored::Inline(inline) => {
            partition_payload_of_record(key, &record_of_inline(key, &inline), cardinality)
        }
    }
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

/// A [`PartitionStore`] over one cursor's cursor ledger.
///
/// `store` appends the partition as its own entry (creating the cursor ledger if the cursor has
/// none yet) and remembers where it went; `load` reads it back, from its own entry or from the
/// row of the page or marker that carries it inline, and verifies the CRC of the entry read,
/// the key and the cardinality. Nothing here syncs: the persister's next flush commits what was
/// stored.
#[derive(Debug)]
pub struct CursorLedgerStore {
    log: Arc<EntryLog>,
    shared: SharedState,
    /// The page (or marker) last read for an inline partition.
    cache: EntryCache,
}

impl CursorLedgerStore {
    pub(crate) fn new(log: Arc<EntryLog>, shared: SharedState) -> Self {
        Self {
            log,
            shared,
            cache: EntryCache::default(),
        }
    }
}

/// The cursor ledger of `shared`, created if there is none yet.
pub(crate) fn ensure_ledger(log: &EntryLog, shared: &SharedState) -> Result<u64> {
    let mut s = shared.lock();
    if let Some(ledger) = s.ledger {
        return Ok(ledger);
    }
    let ledger = log.create_ledger()?;
    s.ledger = Some(ledger);
    s.locations.clear();
    Ok(ledger)
}

impl PartitionStore for CursorLedgerStore {
    fn load(&mut self, key: PartitionKey) -> Result<Option<RoaringBitmap>> {
        let (ledger, location) = {
            let s = self.shared.lock();
            match (s.ledger, s.locations.get(&key)) {
                (Some(ledger), Some(location)) => (ledger, *location),
                _ => return Ok(None),
            }
        };
        let stored = read_stored(&self.log, ledger, key, &location, &mut self.cache)?;
        decode_stored(ledger, key, &location, &stored).map(Some)
    }

    fn store(&mut self, key: PartitionKey, bitmap: &RoaringBitmap) -> Result<()> {
        if self.shared.lock().refuses_stores() {
            return Err(Error::PreviousIo);
        }
        let written = ensure_ledger(&self.log, &self.shared)
            .and_then(|ledger| write_partition(&self.log, &self.shared, ledger, key, bitmap));
        let location = match written {
            Ok(location) => location,
            Err(e) => {
                // The ledger latched (or could not be created): the next flush starts afresh.
                let mut s = self.shared.lock();
                s.ledger_failed |= s.ledger.is_some();
                return Err(e);
            }
        };
        let mut s = self.shared.lock();
        s.locations.insert(key, location);
        s.evictions_stored += 1;
        Ok(())
    }

    fn forget(&mut self, key: PartitionKey) {
        // The entry stays in the ledger until rollover; no later marker references it.
        self.shared.lock().locations.remove(&key);
    }
}

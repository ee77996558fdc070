//! Recovering a cursor's ack state on open.
//!
//! Owns: choosing which persisted state a cursor resumes from. The cursor record names the
//! cursor ledger; the ledger is walked back from its tail to the newest state entry that
//! verifies:
//!
//! - a marker whose index pages and partitions (with `verify_on_recover`) all pass their CRC,
//!   key and cardinality checks and all lie before it in the same ledger: the ack set is rebuilt
//!   lazily from its table (`RangeSetWrapper::with_index`, nothing resident), so the first read
//!   waits only for the marker and its pages;
//! - a single-entry snapshot: decoded into the ack set.
//!
//! Batch-index state is restored lazily: the marker's batch pages, if any, are read, and
//! with `verify_on_recover` every batch-index entry its batch table references is read and
//! checked (CRC, key, count; one at a time, not kept) as part of verifying the marker (a
//! damaged one makes the walk pass over that marker, like a damaged partition); the partial
//! entries themselves stay cold ([`RecoveredBatch`]) until first used. A snapshot carries its
//! own. The record's fallback holds no holes and no partial entries.
//!
//! A torn or corrupt marker, page, partition or snapshot does not stop the walk: an older state
//! serves. A ledger cut short below a length a finished fsync covered (a truncated sealed
//! ledger) is refused instead: its lost states were flushed. A missing ledger, or one without any valid state, falls back to the record's
//! mark-delete with no holes. Either mode reads what the other wrote.
//!
//! Must never: return more acks than some flushed (or evicted) state held, use an entry that
//! failed its CRC, or follow a reference to an entry at or after the marker.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::ackset::{PartitionKey, RangeSetWrapper};
use crate::error::{CorruptionKind, CorruptionPlace, Error, Result};
use crate::format::Corruption;
use crate::format::cursor::{
    BatchPartition, BatchRow, BatchRows, CompactRows, CompactTable, EntryKind, PageRef, PageRefs,
    PartitionRow, PersistedState, Records, RowForm, Table, decode_batch_entry, decode_batch_page,
    decode_compact_marker, decode_compact_page, decode_index_page, decode_marker, decode_snapshot,
    payload_crc, peek_kind,
};
use crate::log::EntryLog;
use crate::meta::MetaStore;
use crate::position::Position;

use crate::format::meta::CursorIdentity;
use crate::observe::CursorLabels;

use super::batch::BatchAcks;
use super::batch_store::{BatchLocation, BatchTable, CursorBatchStore};
use super::config::CursorConfig;
use super::record::{Fence, RecordOwner, VersionedRecord, read_record};
use super::stats::PersistStats;
use super::store::{CursorLedgerStore, Location, at_entry, check_partition_payload};

/// Which persisted state a recovery resumed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoverySource {
    /// A multi-entry marker at this cursor-ledger position.
    Marker(Position),
    /// A single-entry snapshot at this cursor-ledger position.
    Snapshot(Position),
    /// The cursor record's mark-delete, with no holes: there was no cursor ledger, it was
    /// missing, or it held no valid state.
    Record,
    /// The newest committed marker of the cursor in its store's journal (a cursor of a
    /// store's topic).
    Journal,
}

/// How a recovery went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Where the state came from.
    pub source: RecoverySource,
    /// The record named a cursor ledger that does not exist.
    pub ledger_missing: bool,
    /// Newer markers or snapshots that failed verification and were passed over.
    pub rejected: u64,
    /// Why the newest rejected one was refused.
    pub first_rejection: Option<String>,
}

/// One live partition of a verified marker's table and where its record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Row {
    /// The partition.
    pub key: PartitionKey,
    /// Its record: its own entry, or inline in a page or the marker.
    pub location: Location,
}

/// How the recovered marker lists the partitions (for `inspect`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableShape {
    /// Partitions carried inline by the marker's rows or its index pages.
    pub inline: u64,
    /// Partitions in entries of their own.
    pub separate: u64,
    /// Compact index pages the marker lists (0: the table is inline in the marker, or the
    /// marker is of kind 2).
    pub pages: u64,
}

/// What a cursor read from its cursor ledger keeps of it until its first write imports it into
/// the journal and retires the ledger (`import.rs`): its record as read (its compare-and-set
/// version, and the fence and identity the opener gives it), the ledger, and the figures of
/// the recovered state. Reads and writes nothing itself.
#[derive(Debug)]
pub struct LedgerSource {
    record: RecordOwner,
    log: Arc<EntryLog>,
    /// The cursor ledger the state was read from (`None`: the record names none, or it is
    /// missing).
    ledger: Option<u64>,
    /// Bytes of the recovered state: what the recovery read.
    persisted_bytes: u64,
    table: TableShape,
    /// Ranges of the recovered state when it was a single-entry snapshot (`None` otherwise).
    snapshot_ranges: Option<u64>,
}

impl LedgerSource {
    /// The cursor ledger the state was read from.
    #[must_use]
    pub fn cursor_ledger(&self) -> Option<u64> {
        self.ledger
    }

    /// How the recovered marker lists the partitions (all zero after a snapshot, or without
    /// a marker).
    #[must_use]
    pub fn table_shape(&self) -> TableShape {
        self.table
    }

    /// Ranges of the recovered state when it was a single-entry snapshot.
    #[must_use]
    pub fn snapshot_ranges(&self) -> Option<u64> {
        self.snapshot_ranges
    }

    /// What the cursor's figures report until its import: the ledger and the size of the
    /// recovered state.
    pub(crate) fn stats(&self) -> PersistStats {
        PersistStats {
            cursor_ledger: self.ledger,
            persisted_bytes: self.persisted_bytes,
            ..PersistStats::default()
        }
    }

    /// Every write of the record (the retirement's switch) runs `fence` after it.
    pub(crate) fn set_fence(&mut self, fence: Fence) {
        self.record.set_fence(fence);
    }

    /// Every record written (the retirement's switch) carries `identity`.
    pub(crate) fn set_identity(&mut self, identity: CursorIdentity) {
        self.record.set_identity(identity);
    }

    /// The record, the entry log and every cursor ledger to delete once the record names none
    /// (the one it names, and the one read, if another).
    pub(crate) fn into_parts(self) -> (RecordOwner, Arc<EntryLog>, Vec<u64>) {
        let mut ledgers: Vec<u64> = self
            .record
            .ledger()
            .into_iter()
            .chain(self.ledger)
            .collect();
        ledgers.sort_unstable();
        ledgers.dedup();
        (self.record, self.log, ledgers)
    }
}

/// A cursor recovered from its cursor ledger: its state, its ack set and what its import needs.
#[derive(Debug)]
pub struct RecoveredCursor {
    /// Mark-delete and properties of the recovered state. The epoch is the larger of the
    /// state's and the record's, so it never goes back.
    pub state: PersistedState,
    /// The acks above mark-delete; partitions load on first touch.
    pub acks: RangeSetWrapper,
    /// The record and ledger the state was read from.
    pub source: LedgerSource,
    /// The partial entries (batch-index acks) of the recovered state: held by a snapshot, or
    /// listed by a marker and loaded on first use.
    pub batch: RecoveredBatch,
    /// Which state was used and what was passed over.
    pub report: RecoveryReport,
}

/// The partial entries (batch-index acks) of a recovered state. A marker's are *cold*: only
/// where each partition's batch-index entry is and how many entries it holds are in memory,
/// and a partition is read (and checked: CRC, key, count) on first use. A snapshot's are
/// held in memory (the snapshot is read whole anyway); the cursor evicts them to its budget.
#[derive(Debug, Default)]
pub struct RecoveredBatch(BatchAcks);

impl RecoveredBatch {
    pub(crate) fn into_inner(self) -> BatchAcks {
        self.0
    }

    /// Partial entries recovered by another path (the journal's batch table).
    pub(crate) fn from_acks(batch: BatchAcks) -> Self {
        Self(batch)
    }

    /// See `BatchAcks::hold_stores`.
    pub(crate) fn hold_stores(&mut self) {
        self.0.hold_stores();
    }

    /// Number of partial entries (no I/O).
    #[must_use]
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// Whether there is no partial entry.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.len() == 0
    }

    /// Every partial entry, by partition: cold partitions are read from the cursor ledger
    /// (one read each, checked).
    ///
    /// # Errors
    /// I/O errors, and [`Error::Corrupted`] for a batch-index entry that fails its checks.
    pub fn partitions(&mut self) -> Result<Vec<BatchPartition>> {
        self.0.partitions()
    }
}

/// Recovers the cursor whose record is `record_name` (`cursor-{id}`) in `meta`.
///
/// Reads the record, then walks the cursor ledger back from its tail (see the module docs).
/// Cost to first read: the marker, its index pages and, with `verify_on_recover`, one read of
/// each partition entry for its CRC; no bitmap is decoded.
///
/// # Errors
/// [`Error::NoSuchCursor`] when there is no record; [`Error::Corrupted`] at the record when the record
/// does not decode; I/O errors of the entry log. Damaged cursor-ledger entries are not errors:
/// they are passed over and counted in the report.
pub fn recover(
    log: Arc<EntryLog>,
    meta: Arc<dyn MetaStore>,
    record_name: &str,
    config: &CursorConfig,
) -> Result<RecoveredCursor> {
    let VersionedRecord { version, record } =
        read_record(meta.as_ref(), record_name)?.ok_or_else(|| Error::NoSuchCursor {
            name: record_name.to_string(),
        })?;
    let fallback = PersistedState {
        mark_delete: record.mark_delete,
        epoch: record.epoch,
        properties: record.properties.clone(),
    };
    let mut report = RecoveryReport {
        source: RecoverySource::Record,
        ledger_missing: false,
        rejected: 0,
        first_rejection: None,
    };
    let mut found = Found::None;
    let mut ledger = None;
    if let Some(named) = record.cursor_ledger {
        match log.entry_count(named) {
            Ok(count) => {
                refuse_truncated(&log, named)?;
                ledger = Some(named);
                found = walk_back(&log, named, count, config, &mut report)?;
            }
            Err(Error::NoSuchLedger(_)) => report.ledger_missing = true,
            Err(e) => return Err(e),
        }
    }
    let epoch = record.epoch;
    let had_ledger = ledger.is_some() || report.ledger_missing;
    let labels = CursorLabels::new(log.storage().location().into(), record_name);
    let source = LedgerSource {
        record: RecordOwner::new(
            meta,
            record_name.to_string(),
            Some(VersionedRecord { version, record }),
        ),
        log,
        ledger,
        persisted_bytes: 0,
        table: TableShape::default(),
        snapshot_ranges: None,
    };
    let mut recovered = resume(source, config.lru_capacity_bytes, found, fallback, report)?;
    recovered.state.epoch = recovered.state.epoch.max(epoch);
    observe_recovery(&recovered.report, &labels, had_ledger);
    Ok(recovered)
}

/// [`Error::Corrupted`] naming cursor ledger `ledger` when the log opened it cut short below a
/// length a finished fsync covered (`CorruptionKind::Truncated`: below the seal's proof of a
/// sealed ledger, or a synced-length slot): no power cut leaves that, and the states it cut
/// were flushed, so walking back to an older one would lose acks silently. A torn tail (no
/// proof that the cut bytes were synced) is a crash, and the walk goes on from what is left.
fn refuse_truncated(log: &EntryLog, ledger: u64) -> Result<()> {
    match log.ledger_info(ledger)?.damaged {
        Some((offset, CorruptionKind::Truncated)) => {
            Err(Error::corrupted(ledger, offset, CorruptionKind::Truncated))
        }
        _ => Ok(()),
    }
}

/// Counts the recovery by source and logs it: at `info` when it fell back (to a single-entry
/// snapshot, or to the record's mark-delete although the record named a cursor ledger) or
/// passed over rejected state, at `debug` otherwise.
fn observe_recovery(report: &RecoveryReport, labels: &CursorLabels, had_ledger: bool) {
    let (source, fell_back) = match report.source {
        RecoverySource::Marker(_) => ("marker", false),
        RecoverySource::Snapshot(_) => ("snapshot", true),
        RecoverySource::Record => ("record", had_ledger),
        RecoverySource::Journal => ("journal", false),
    };
    let missing = if report.ledger_missing {
        "; its cursor ledger is missing"
    } else {
        ""
    };
    let rejected = report
        .first_rejection
        .as_ref()
        .map_or_else(String::new, |why| {
            format!(
                "; passed over {} newer state entries (the newest: {why})",
                report.rejected
            )
        });
    let detail = format!("{missing}{rejected}");
    labels.recovered(source, &detail, fell_back || report.rejected > 0);
}

/// Builds the ack set (over `budget` bytes) and the partial entries from what the walk found,
/// both loading from the ledger `source` read, and names the source in `report`.
fn resume(
    mut source: LedgerSource,
    budget: usize,
    found: Found,
    fallback: PersistedState,
    mut report: RecoveryReport,
) -> Result<RecoveredCursor> {
    let (log, ledger) = (&source.log, source.ledger);
    let batch_store = || Box::new(CursorBatchStore::new(Arc::clone(log), ledger));
    match found {
        Found::None => {
            let store = CursorLedgerStore::new(Arc::clone(log), ledger, BTreeMap::new());
            let acks = RangeSetWrapper::new(Box::new(store), budget);
            let batch = RecoveredBatch(BatchAcks::with_store(batch_store()));
            report.source = RecoverySource::Record;
            Ok(RecoveredCursor {
                state: fallback,
                acks,
                source,
                batch,
                report,
            })
        }
        Found::Marker(m) => {
            let index: Vec<_> = m
                .rows
                .iter()
                .map(|r| (r.key, r.location.cardinality))
                .collect();
            let locations = m.rows.iter().map(|r| (r.key, r.location)).collect();
            let store = CursorLedgerStore::new(Arc::clone(log), ledger, locations);
            let mut batch = BatchAcks::with_store(batch_store());
            batch.load_cold(&m.batch_table);
            let acks = RangeSetWrapper::with_index(Box::new(store), budget, index);
            let inline = m
                .rows
                .iter()
                .filter(|r| r.location.inline_at.is_some())
                .count() as u64;
            source.table = TableShape {
                inline,
                separate: m.rows.len() as u64 - inline,
                pages: m.pages,
            };
            source.persisted_bytes = m.bytes;
            report.source = RecoverySource::Marker(m.at);
            Ok(RecoveredCursor {
                state: m.state,
                acks,
                source,
                batch: RecoveredBatch(batch),
                report,
            })
        }
        Found::Snapshot { at, payload } => {
            let store = CursorLedgerStore::new(Arc::clone(log), ledger, BTreeMap::new());
            let mut acks = RangeSetWrapper::new(Box::new(store), budget);
            let snapshot =
                decode_snapshot(&payload).map_err(|e| at_entry(at.ledger_id, at.entry_id, e))?;
            let mut ranges = 0;
            for (ledger, first, last) in snapshot.ranges() {
                acks.add_range(ledger, first, last)?;
                ranges += 1;
            }
            source.snapshot_ranges = Some(ranges);
            let mut batch = BatchAcks::with_store(batch_store());
            batch.load(snapshot.batch);
            source.persisted_bytes = payload.len() as u64;
            report.source = RecoverySource::Snapshot(at);
            Ok(RecoveredCursor {
                state: snapshot.state,
                acks,
                source,
                batch: RecoveredBatch(batch),
                report,
            })
        }
    }
}

/// A verified marker: its state and the full partition table.
pub(super) struct FoundMarker {
    at: Position,
    state: PersistedState,
    /// Every live partition and where its record is, ascending.
    rows: Vec<Row>,
    /// The compact index pages of the table (none for an inline table or a marker of kind 2).
    pages: u64,
    /// Bytes read to verify it: what a recovery reads.
    bytes: u64,
    batch_table: BatchTable,
}

enum Found {
    None,
    Marker(FoundMarker),
    Snapshot { at: Position, payload: Vec<u8> },
}

/// Errors that mean the disk or handle failed, as opposed to bytes that failed verification.
pub(super) fn is_fatal(err: &Error) -> bool {
    matches!(err, Error::Io { .. } | Error::PreviousIo | Error::Closed)
}

/// Counts a state entry that failed verification; a failing disk is an error instead.
fn reject(report: &mut RecoveryReport, err: Error) -> Result<()> {
    if is_fatal(&err) {
        return Err(err);
    }
    report.rejected += 1;
    report
        .first_rejection
        .get_or_insert_with(|| err.with_sources());
    Ok(())
}

/// Walks `ledger` back from entry `count - 1` to the newest state entry that verifies.
fn walk_back(
    log: &EntryLog,
    ledger: u64,
    count: u64,
    config: &CursorConfig,
    report: &mut RecoveryReport,
) -> Result<Found> {
    for entry_id in (0..count).rev() {
        // The frame header carries the kind: partitions and pages are skipped unread.
        match log.read_meta(ledger, entry_id) {
            Ok(meta)
                if [
                    EntryKind::Partition,
                    EntryKind::IndexPage,
                    EntryKind::BatchPage,
                    EntryKind::CompactPage,
                ]
                .iter()
                .any(|k| meta.num_messages == u32::from(k.code())) =>
            {
                continue;
            }
            Ok(_) => {}
            Err(e) => {
                reject(report, e)?;
                continue;
            }
        }
        let payload = match log.read(ledger, entry_id) {
            Ok(entry) => entry.payload,
            Err(e) => {
                reject(report, e)?;
                continue;
            }
        };
        let at = Position::new(ledger, entry_id);
        let attempt = match peek_kind(&payload) {
            Ok(EntryKind::Marker | EntryKind::CompactMarker) => {
                verify_marker(log, at, &payload, config.verify_on_recover).map(Found::Marker)
            }
            Ok(EntryKind::Snapshot) => decode_snapshot(&payload)
                .map(|_| ())
                .map_err(|e| at_entry(ledger, entry_id, e))
                .map(|()| Found::Snapshot { at, payload }),
            Ok(
                EntryKind::Partition
                | EntryKind::IndexPage
                | EntryKind::BatchIndexes
                | EntryKind::BatchPage
                | EntryKind::CompactPage,
            ) => continue,
            Err(e) => Err(at_entry(ledger, entry_id, e)),
        };
        match attempt {
            Ok(found) => return Ok(found),
            Err(e) => reject(report, e)?,
        }
    }
    Ok(Found::None)
}

fn bad(ledger: u64, entry_id: u64, kind: CorruptionKind) -> Error {
    Error::Corrupted {
        place: CorruptionPlace::Entry(Position::new(ledger, entry_id)),
        kind,
    }
}

/// Reads entry `entry_id` (which must come before the marker at `at`) and checks its CRC.
fn read_referenced(log: &EntryLog, at: Position, entry_id: u64, crc: u32) -> Result<Vec<u8>> {
    if entry_id >= at.entry_id {
        return Err(bad(
            at.ledger_id,
            at.entry_id,
            CorruptionKind::InvalidField("reference to a later entry"),
        ));
    }
    let payload = log.read(at.ledger_id, entry_id)?.payload;
    if payload_crc(&payload) != crc {
        return Err(bad(
            at.ledger_id,
            entry_id,
            CorruptionKind::ChecksumMismatch,
        ));
    }
    Ok(payload)
}

/// Reads the pages a marker at `at` references (index pages of the partition table, or batch
/// pages of the batch table), checks each one's CRC, row count, first key and that its keys stay
/// below the next page's first key, and appends their rows to `out`; adds the bytes read to
/// `bytes`. A page that fails is [`Error::Corrupted`] naming it, with `what` as the field.
#[allow(clippy::too_many_arguments)]
fn read_pages<T>(
    log: &EntryLog,
    at: Position,
    pages: &[PageRef],
    decode: for<'p> fn(&'p [u8]) -> std::result::Result<Records<'p, T>, Corruption>,
    key: fn(&T) -> (u64, u64),
    what: &'static str,
    bytes: &mut u64,
    out: &mut Vec<T>,
) -> Result<()> {
    let ledger = at.ledger_id;
    for (i, page) in pages.iter().enumerate() {
        let payload = read_referenced(log, at, page.entry_id, page.crc)?;
        *bytes += payload.len() as u64;
        let rows = decode(&payload).map_err(|e| at_entry(ledger, page.entry_id, e))?;
        let next = pages.get(i + 1).map(|p| p.first);
        let first = rows.iter().next().map(|r| key(&r));
        let in_range = rows.iter().all(|r| next.is_none_or(|n| key(&r) < n));
        if rows.len() != page.rows as usize || first != Some(page.first) || !in_range {
            return Err(bad(
                ledger,
                page.entry_id,
                CorruptionKind::InvalidField(what),
            ));
        }
        out.extend(rows.iter());
    }
    Ok(())
}

/// Decodes the marker at `at` (of kind 2 or 7) and verifies everything it references: its
/// index pages (CRC, row count, first key, key range), and with `verify` every partition in an
/// entry of its own (CRC, key, cardinality) and the batch table's entries. A partition carried
/// inline is covered by the CRC of the page or marker that carries it, and is decoded only when
/// first touched.
pub(super) fn verify_marker(
    log: &EntryLog,
    at: Position,
    payload: &[u8],
    verify: bool,
) -> Result<FoundMarker> {
    let ledger = at.ledger_id;
    let named = |e| at_entry(ledger, at.entry_id, e);
    let mut bytes = payload.len() as u64;
    let (state, rows, pages, batch, batch_pages) =
        if peek_kind(payload).map_err(named)? == EntryKind::CompactMarker {
            let m = decode_compact_marker(payload).map_err(named)?;
            let (rows, pages) = compact_table(log, at, payload, m.table, verify, &mut bytes)?;
            (m.state, rows, pages, m.batch, m.batch_pages)
        } else {
            let m = decode_marker(payload).map_err(named)?;
            let rows = legacy_table(log, at, m.table, verify, &mut bytes)?;
            (m.state, rows, 0, m.batch, m.batch_pages)
        };
    let batch_table = read_batch_table(log, at, batch, batch_pages, verify, &mut bytes)?;
    Ok(FoundMarker {
        at,
        state,
        rows,
        pages,
        bytes,
        batch_table,
    })
}

/// The rows of a marker of kind 2 (inline, or through index pages of kind 4, read and checked),
/// each in an entry of its own, verified as [`external_row`] does.
fn legacy_table(
    log: &EntryLog,
    at: Position,
    table: Table<'_>,
    verify: bool,
    bytes: &mut u64,
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    match table {
        Table::Inline(inline) => rows.extend(inline.iter()),
        Table::Paged(refs) => {
            let pages: Vec<PageRef> = refs.iter().collect();
            read_pages(
                log,
                at,
                &pages,
                decode_index_page,
                PartitionRow::key,
                "index page range",
                bytes,
                &mut rows,
            )?;
        }
    }
    rows.iter()
        .map(|r| {
            let key = PartitionKey {
                ledger_id: r.ledger_id,
                chunk: r.chunk,
            };
            external_row(
                log,
                at,
                key,
                r.entry_id,
                r.crc,
                r.cardinality,
                verify,
                bytes,
            )
        })
        .collect()
}

/// The rows of a compact marker's table (inline in the marker at `at`, whose payload is
/// `payload`, or in compact index pages, each read, CRC-checked, and checked against its
/// reference: row count, first key, and every key below the next page's first), with the
/// number of pages.
fn compact_table(
    log: &EntryLog,
    at: Position,
    payload: &[u8],
    table: CompactTable<'_>,
    verify: bool,
    bytes: &mut u64,
) -> Result<(Vec<Row>, u64)> {
    let ledger = at.ledger_id;
    let mut rows = Vec::new();
    let mut pages = 0;
    match table {
        CompactTable::Inline(list) => {
            let carrier = (at.entry_id, payload_crc(payload));
            compact_rows(log, at, list, carrier, verify, bytes, &mut rows)?;
        }
        CompactTable::Paged(refs) => {
            let refs: Vec<_> = refs.iter().collect();
            for (i, page) in refs.iter().enumerate() {
                let page_payload = read_referenced(log, at, page.entry_id, page.crc)?;
                *bytes += page_payload.len() as u64;
                let list = decode_compact_page(&page_payload)
                    .map_err(|e| at_entry(ledger, page.entry_id, e))?;
                let next = refs.get(i + 1).map(|p| p.first);
                let first = list.iter().next().map(|r| r.key());
                let in_range = list.iter().all(|r| next.is_none_or(|n| r.key() < n));
                if list.len() != page.rows as usize || first != Some(page.first) || !in_range {
                    return Err(bad(
                        ledger,
                        page.entry_id,
                        CorruptionKind::InvalidField("index page range"),
                    ));
                }
                let carrier = (page.entry_id, page.crc);
                compact_rows(log, at, list, carrier, verify, bytes, &mut rows)?;
                pages += 1;
            }
        }
    }
    Ok((rows, pages))
}

/// Appends to `out` the rows of `list`, carried by entry `carrier` (id, payload CRC): inline
/// partitions located in it, others verified as [`external_row`] does.
fn compact_rows(
    log: &EntryLog,
    at: Position,
    list: CompactRows<'_>,
    carrier: (u64, u32),
    verify: bool,
    bytes: &mut u64,
    out: &mut Vec<Row>,
) -> Result<()> {
    for (row, inline_at) in list.located() {
        let key = PartitionKey {
            ledger_id: row.ledger_id,
            chunk: row.chunk,
        };
        out.push(match row.form {
            RowForm::Inline(inline) => Row {
                key,
                location: Location {
                    entry_id: carrier.0,
                    crc: carrier.1,
                    cardinality: row.cardinality,
                    len: inline.len() as u64,
                    inline_at: Some(u32::try_from(inline_at).unwrap_or(u32::MAX)),
                },
            },
            RowForm::Entry { entry_id, crc } => {
                external_row(log, at, key, entry_id, crc, row.cardinality, verify, bytes)?
            }
        });
    }
    Ok(())
}

/// The row of a partition in entry `entry_id` of its own, referenced by the marker at `at`:
/// the entry must come before the marker, and with `verify` it is read and checked (CRC, key,
/// cardinality) and its bytes counted in `bytes`.
#[allow(clippy::too_many_arguments)]
fn external_row(
    log: &EntryLog,
    at: Position,
    key: PartitionKey,
    entry_id: u64,
    crc: u32,
    cardinality: u64,
    verify: bool,
    bytes: &mut u64,
) -> Result<Row> {
    let mut location = Location {
        entry_id,
        crc,
        cardinality,
        len: 0,
        inline_at: None,
    };
    if verify {
        let partition = read_referenced(log, at, entry_id, crc)?;
        check_partition_payload(at.ledger_id, key, &location, &partition)?;
        location.len = partition.len() as u64;
        *bytes += location.len;
    } else if entry_id >= at.entry_id {
        return Err(bad(
            at.ledger_id,
            at.entry_id,
            CorruptionKind::InvalidField("reference to a later entry"),
        ));
    }
    Ok(Row { key, location })
}

/// Reads and checks the batch table of the marker at `at` (its inline `batch` rows, or its
/// `batch_pages`): its batch pages, if any, then, with `verify`, every batch-index entry it
/// lists (CRC, key and count; decoded one at a time and not kept: the partial entries load on
/// first use); adds the bytes read to `bytes`.
fn read_batch_table(
    log: &EntryLog,
    at: Position,
    batch: BatchRows<'_>,
    batch_pages: PageRefs<'_>,
    verify: bool,
    bytes: &mut u64,
) -> Result<BatchTable> {
    let ledger = at.ledger_id;
    let mut batch_rows: Vec<BatchRow> = batch.iter().collect();
    let batch_pages: Vec<PageRef> = batch_pages.iter().collect();
    read_pages(
        log,
        at,
        &batch_pages,
        decode_batch_page,
        BatchRow::key,
        "batch page range",
        bytes,
        &mut batch_rows,
    )?;
    let mut batch_table = BatchTable::new();
    for row in batch_rows {
        let mut len = 0;
        if verify {
            let payload = read_referenced(log, at, row.entry_id, row.crc)?;
            let partition =
                decode_batch_entry(&payload).map_err(|e| at_entry(ledger, row.entry_id, e))?;
            if (partition.ledger_id, partition.chunk) != row.key()
                || partition.entries.len() != row.entries as usize
            {
                return Err(bad(
                    ledger,
                    row.entry_id,
                    CorruptionKind::InvalidField("batch entry does not match its row"),
                ));
            }
            len = payload.len() as u64;
            *bytes += len;
        } else if row.entry_id >= at.entry_id {
            return Err(bad(
                ledger,
                row.entry_id,
                CorruptionKind::InvalidField("reference to a later entry"),
            ));
        }
        batch_table.insert(
            PartitionKey {
                ledger_id: row.ledger_id,
                chunk: row.chunk,
            },
            BatchLocation { row, len },
        );
    }
    Ok(batch_table)
}

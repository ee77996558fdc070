//! Checking a whole cursor ledger, read-only, for the `verify` and `inspect` commands.
//!
//! Owns: [`check_cursor_ledger`] and its report. Every entry is decoded and every marker
//! verified with everything it references, by the same checks a recovery runs (`recover.rs`),
//! so the check and an open agree on which state a cursor resumes from. Beyond what a recovery
//! reads, every partition is decoded: those in entries of their own, and those carried inline
//! by compact index pages and markers (a recovery decodes these only when first touched).
//!
//! Must never: write, or stop at the first damaged entry (each is listed with its reason).

use crate::ackset::PartitionKey;
use crate::error::{CorruptionKind, CorruptionPlace, Error, Result};
use crate::format::cursor::{
    CompactRows, CompactTable, EntryKind, RowForm, decode_batch_entry, decode_batch_page,
    decode_compact_marker, decode_compact_page, decode_index_page, decode_partition_entry,
    decode_snapshot, peek_kind,
};
use crate::format::partition::{decode_inline, decode_partition};
use crate::log::EntryLog;
use crate::position::Position;

use super::recover::{RecoverySource, is_fatal, verify_marker};
use super::store::at_entry;

/// What a full, read-only check of a cursor ledger found (for `verify` and `inspect` tools).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerCheck {
    /// Entries in the ledger.
    pub entries: u64,
    /// Partition entries (committed or not).
    pub partitions: u64,
    /// Partitions carried inline by compact index pages and markers (committed or not).
    pub inline_partitions: u64,
    /// Index pages, of the partition table and of batch tables.
    pub index_pages: u64,
    /// Batch-index entries (committed or not).
    pub batch_entries: u64,
    /// Markers.
    pub markers: u64,
    /// Snapshots.
    pub snapshots: u64,
    /// The newest marker or snapshot that verifies: the state a recovery would resume from.
    pub newest_valid: Option<RecoverySource>,
    /// Every entry that failed its checks.
    pub problems: Vec<EntryProblem>,
}

/// One entry of a cursor ledger that failed its checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryProblem {
    /// The entry's id in the cursor ledger.
    pub entry: u64,
    /// Why it failed, with the error's sources.
    pub reason: String,
}

/// Reads every entry of cursor ledger `ledger` and checks it: each partition entry decodes
/// (CRC, key, bitmap), each batch-index entry, index page and snapshot (with its batch
/// section) decodes, and each marker verifies with
/// everything it references. Never writes; works on a read-only [`EntryLog`].
///
/// # Errors
/// [`Error::NoSuchLedger`](crate::Error::NoSuchLedger) and I/O errors; damaged entries are listed in
/// [`LedgerCheck::problems`], not returned as errors.
pub fn check_cursor_ledger(log: &EntryLog, ledger: u64) -> Result<LedgerCheck> {
    let mut check = LedgerCheck {
        entries: log.entry_count(ledger)?,
        ..LedgerCheck::default()
    };
    for entry_id in 0..check.entries {
        let at = Position::new(ledger, entry_id);
        let named = |e| at_entry(ledger, entry_id, e);
        let verdict = log.read(ledger, entry_id).and_then(|entry| {
            let payload = entry.payload;
            match peek_kind(&payload).map_err(named)? {
                EntryKind::Partition => {
                    check.partitions += 1;
                    let partition = decode_partition_entry(&payload).map_err(named)?;
                    decode_partition(partition.body).map_err(named)?;
                    Ok(None)
                }
                EntryKind::BatchIndexes => {
                    check.batch_entries += 1;
                    decode_batch_entry(&payload).map(|_| None).map_err(named)
                }
                EntryKind::IndexPage => {
                    check.index_pages += 1;
                    decode_index_page(&payload).map(|_| None).map_err(named)
                }
                EntryKind::BatchPage => {
                    check.index_pages += 1;
                    decode_batch_page(&payload).map(|_| None).map_err(named)
                }
                EntryKind::CompactPage => {
                    check.index_pages += 1;
                    let rows = decode_compact_page(&payload).map_err(named)?;
                    check.inline_partitions += check_inline(at, rows)?;
                    Ok(None)
                }
                EntryKind::Marker => {
                    check.markers += 1;
                    verify_marker(log, at, &payload, true).map(|_| Some(RecoverySource::Marker(at)))
                }
                EntryKind::CompactMarker => {
                    check.markers += 1;
                    let marker = decode_compact_marker(&payload).map_err(named)?;
                    if let CompactTable::Inline(rows) = marker.table {
                        check.inline_partitions += check_inline(at, rows)?;
                    }
                    verify_marker(log, at, &payload, true).map(|_| Some(RecoverySource::Marker(at)))
                }
                EntryKind::Snapshot => {
                    check.snapshots += 1;
                    decode_snapshot(&payload)
                        .map(|_| Some(RecoverySource::Snapshot(at)))
                        .map_err(named)
                }
            }
        });
        match verdict {
            Ok(Some(source)) => check.newest_valid = Some(source),
            Ok(None) => {}
            Err(e) if is_fatal(&e) => return Err(e),
            Err(e) => check.problems.push(EntryProblem {
                entry: entry_id,
                reason: e.with_sources(),
            }),
        }
    }
    Ok(check)
}

/// Decodes every partition `rows` carry inline (rows of the entry at `at`) and checks its
/// cardinality against its row; returns how many there were.
fn check_inline(at: Position, rows: CompactRows<'_>) -> Result<u64> {
    let mut inline = 0;
    for (row, offset) in rows.located() {
        let RowForm::Inline(bytes) = row.form else {
            continue;
        };
        let key = PartitionKey {
            ledger_id: row.ledger_id,
            chunk: row.chunk,
        };
        let bitmap = decode_inline(key, bytes)
            .map_err(|e| at_entry(at.ledger_id, at.entry_id, e.after(offset)))?;
        if bitmap.len() != row.cardinality {
            return Err(Error::Corrupted {
                place: CorruptionPlace::Entry(at),
                kind: CorruptionKind::InvalidField("partition cardinality"),
            });
        }
        inline += 1;
    }
    Ok(inline)
}

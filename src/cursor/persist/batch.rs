//! Batch-index state in the cursor ledger: which batch-index entries (kind 5) a flush writes,
//! keeps or copies, and the batch table its marker commits.
//!
//! Owns: the committed batch table of one cursor ([`BatchLocation`] per partition with partial
//! entries). A flush writes a batch-index entry only for a partition whose partial entries
//! changed since the last commit (or that has no committed entry, as after a single-entry
//! flush or a rollover's fresh ledger); the others keep their committed entry, or on a
//! rollover have it copied, CRC-checked, to the new ledger. The marker references every one,
//! inline up to [`BATCH_INLINE_ROWS`] rows, otherwise through batch pages (kind 6) written
//! before it: all of them when the table changed or the ledger is new, none otherwise.
//!
//! A partition evicted from memory (see `cursor/batch.rs`) has a batch-index entry the
//! eviction wrote, unsynced and referenced by no marker yet: a flush references it as it is
//! (or copies it on a rollover) instead of loading the partition.
//!
//! Must never: reference an entry of another ledger, or keep a row whose partition changed.

use crate::cursor::batch::BatchAcks;
use crate::error::{CorruptionKind, CorruptionPlace, Error, Result};
use crate::format::cursor::{BatchRow, EntryKind, payload_crc};
use crate::position::Position;

use super::super::batch_store::{BatchLocation, BatchTable, encode};
use super::super::store::append_entry;
use super::{CursorPersister, FlushStats};

impl CursorPersister {
    /// Writes to `target` the batch-index entries a marker over `batch` needs and returns the
    /// new table (not yet committed): changed partitions from memory, unchanged ones kept (or
    /// copied, on a rollover).
    pub(super) fn write_batch(
        &self,
        batch: &BatchAcks,
        target: u64,
        rollover: bool,
        flush: &mut FlushStats,
    ) -> Result<BatchTable> {
        let old = self.cursor_ledger();
        let mut table = BatchTable::new();
        for key in batch.keys() {
            // A copy the store holds (a cold partition, or a resident one loaded or flushed
            // and unchanged since) is current and in this ledger; otherwise the committed
            // entry serves while the partition is clean.
            let current = batch.stored_location(key).or_else(|| {
                self.batch_table
                    .get(&key)
                    .copied()
                    .filter(|_| !batch.dirty_keys().contains(&key))
            });
            let location = match current {
                Some(l) if rollover => self.copy_batch_entry(old, target, &l)?,
                Some(l) => l,
                None => {
                    let Some(partition) = batch.resident_partition(key) else {
                        continue;
                    };
                    let payload = encode(&partition)?;
                    let entry_id = append_entry(
                        &self.log,
                        &self.shared,
                        target,
                        EntryKind::BatchIndexes,
                        &payload,
                    )?;
                    flush.batch_entries += 1;
                    BatchLocation {
                        row: BatchRow {
                            ledger_id: key.ledger_id,
                            chunk: key.chunk,
                            entry_id,
                            crc: payload_crc(&payload),
                            entries: u32::try_from(partition.entries.len()).unwrap_or(u32::MAX),
                        },
                        len: payload.len() as u64,
                    }
                }
            };
            table.insert(key, location);
        }
        Ok(table)
    }

    /// Copies the batch-index entries of the cold partitions of `batch` from the cursor
    /// ledger to `target` (a single-entry flush's rollover, whose snapshot carries the
    /// partial entries inline: the cold copies must move with the cursor).
    pub(super) fn copy_cold_batch(&self, batch: &BatchAcks, target: u64) -> Result<BatchTable> {
        let old = self.cursor_ledger();
        let mut table = BatchTable::new();
        for key in batch.keys() {
            if batch.is_cold(key)
                && let Some(l) = batch.stored_location(key)
            {
                table.insert(key, self.copy_batch_entry(old, target, &l)?);
            }
        }
        Ok(table)
    }

    /// Copies the batch-index entry at `location` of the old ledger to `target`, after
    /// checking its CRC.
    fn copy_batch_entry(
        &self,
        old: Option<u64>,
        target: u64,
        location: &BatchLocation,
    ) -> Result<BatchLocation> {
        let old = old.ok_or(Error::NoSuchLedger(target))?;
        let payload = self.log.read(old, location.row.entry_id)?.payload;
        if payload_crc(&payload) != location.row.crc {
            return Err(Error::Corrupted {
                place: CorruptionPlace::Entry(Position::new(old, location.row.entry_id)),
                kind: CorruptionKind::ChecksumMismatch,
            });
        }
        let entry_id = append_entry(
            &self.log,
            &self.shared,
            target,
            EntryKind::BatchIndexes,
            &payload,
        )?;
        Ok(BatchLocation {
            row: BatchRow {
                entry_id,
                ..location.row
            },
            len: location.len,
        })
    }

    /// Whether the committed batch table already holds `batch` as it is.
    pub(super) fn batch_unchanged(&self, batch: &BatchAcks) -> bool {
        batch.dirty_keys().is_empty() && batch.keys().iter().eq(self.batch_table.keys())
    }
}

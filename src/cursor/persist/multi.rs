//! What a multi-entry flush writes for the ack partitions: each partition in its own entry or
//! inline in the compact table, the table's changed pages, and the compact marker.
//!
//! Owns: the choice of form per partition and the writing of the compact table. A partition
//! whose record's inline form takes at most a quarter of a page (`index_page_bytes / 4`) is
//! carried inline by its table row; a larger one gets a partition entry (kind 1). The table is
//! inline in the compact marker (kind 7) while it is empty or its rows fit one page (and the
//! cursor state is no larger than a page, so reading an inline partition back never reads a
//! large marker), otherwise in compact index pages (kind 8), of which a flush writes
//! only those whose rows changed (`cursor::table`). An unchanged inline partition of a page
//! that is written again is copied from the page (or marker) that carried it, CRC-checked; a
//! rollover copies every live partition this way, inlining small ones that an eviction had
//! written to entries of their own.
//!
//! Must never: reference an entry of another ledger or one written after the marker; point a
//! location at a page before that page is written; copy a partition whose carrying entry fails
//! its CRC.

use std::collections::{BTreeMap, HashSet};

use roaring::RoaringBitmap;

use crate::ackset::{PartitionKey, RangeSetWrapper};
use crate::cursor::batch::BatchAcks;
use crate::error::{Error, Result};
use crate::format::cursor::{
    BatchRef, BatchRow, CompactPageRef, CompactRow, CompactTable, CompactTableRef, EntryKind,
    ROW_LEN, RowForm, batch_page_len, decode_compact_marker, decode_compact_page,
    decode_partition_entry, encode_compact_marker, encode_compact_page, payload_crc,
};
use crate::format::partition::{encode_partition, inline_form};

use super::super::store::{
    EntryCache, Location, Stored, append_entry, at_entry, partition_payload_of_record, read_stored,
    stored_as_payload, write_partition_payload,
};
use super::super::table::{Body, CommittedTable, Limits, NewRow, Page, PagePlan, Row, plan_pages};
use super::{CursorPersister, FlushStats, PersistedState};

/// The key of the first page when a page has no row (never: pages are written non-empty).
const LOWEST_KEY: PartitionKey = PartitionKey {
    ledger_id: 0,
    chunk: 0,
};

/// What one multi-entry flush is writing, and where.
struct Writing {
    /// The ledger written to.
    target: u64,
    /// Whether `target` is a new ledger replacing `old`.
    rollover: bool,
    /// The ledger the committed state is in.
    old: Option<u64>,
    /// The page or marker last read to copy an inline partition.
    cache: EntryCache,
    /// On a rollover, every partition's location in `target`, for the commit to install.
    fresh: BTreeMap<PartitionKey, Location>,
    /// What the flush wrote so far.
    flush: FlushStats,
}

/// A row ready to encode: its inline form read or built.
struct Ready {
    key: PartitionKey,
    cardinality: u64,
    /// `None`: the partition is in entry `entry` (id, CRC).
    inline: Option<Vec<u8>>,
    entry: (u64, u32),
}

impl Ready {
    fn row(&self) -> CompactRow<'_> {
        CompactRow {
            ledger_id: self.key.ledger_id,
            chunk: self.key.chunk,
            cardinality: self.cardinality,
            form: match &self.inline {
                Some(bytes) => RowForm::Inline(bytes),
                None => RowForm::Entry {
                    entry_id: self.entry.0,
                    crc: self.entry.1,
                },
            },
        }
    }
}

/// The new table once its pages are written: what the marker lists.
enum Layout {
    /// Every row in the marker.
    Inline(Vec<Ready>),
    /// The pages, in key order.
    Paged(Vec<Page>),
}

impl CursorPersister {
    /// Most rows and bytes of a page.
    pub(super) fn table_limits(&self) -> Limits {
        Limits {
            rows: self.rows_per_page(),
            bytes: self
                .config
                .index_page_bytes
                .min(self.max_entry_size())
                .max(1),
        }
    }

    /// Most rows and bytes of rows a marker holds inline: a page's, within the room
    /// [`CursorPersister::property_room`] keeps for the table (`rows * ROW_LEN`).
    fn marker_limits(&self) -> Limits {
        let page = self.table_limits();
        Limits {
            rows: page.rows,
            bytes: page.bytes.min(page.rows * ROW_LEN),
        }
    }

    /// Longest inline form a row carries: a quarter of a page, so a page holds at least four.
    fn inline_max(&self) -> usize {
        self.table_limits().bytes / 4
    }

    /// Writes the partitions that need it, the changed index pages and the compact marker to
    /// `target`, syncs, switches the record if needed, then marks the written partitions clean.
    pub(super) fn write_multi(
        &mut self,
        state: &PersistedState,
        acks: &mut RangeSetWrapper,
        batch: &BatchAcks,
        target: u64,
        rollover: bool,
    ) -> Result<FlushStats> {
        let mut w = Writing {
            target,
            rollover,
            old: self.cursor_ledger(),
            cache: EntryCache::default(),
            fresh: BTreeMap::new(),
            flush: FlushStats::default(),
        };
        let dirty: HashSet<_> = acks.dirty_keys().into_iter().collect();
        let rows = self.table_rows(acks, &mut w)?;
        let mut placed: Vec<Option<Location>> = rows
            .iter()
            .map(|r| match r.body {
                Body::Stored(l) => Some(l),
                Body::Inline(_) => None,
            })
            .collect();
        let layout = self.write_table(state, &rows, &mut placed, &mut w)?;
        let batch_table = self.write_batch(batch, target, rollover, &mut w.flush)?;
        let batch_rows: Vec<BatchRow> = batch_table.values().map(|l| l.row).collect();
        let batch_pages =
            self.write_batch_pages(&batch_table, &batch_rows, target, rollover, &mut w.flush)?;
        let batch_ref = if batch_pages.is_empty() {
            BatchRef::Inline(&batch_rows)
        } else {
            BatchRef::Paged(&batch_pages)
        };
        let marker = match &layout {
            Layout::Inline(ready) => {
                let compact: Vec<CompactRow<'_>> = ready.iter().map(Ready::row).collect();
                encode_compact_marker(state, CompactTableRef::Inline(&compact), batch_ref)?
            }
            Layout::Paged(pages) => {
                let refs: Vec<CompactPageRef> = pages.iter().map(page_ref).collect();
                encode_compact_marker(state, CompactTableRef::Paged(&refs), batch_ref)?
            }
        };
        let fresh = rollover.then_some(std::mem::take(&mut w.fresh));
        let marker_id = self.commit(target, EntryKind::CompactMarker, &marker, state, fresh)?;
        let pages = match layout {
            Layout::Paged(pages) => pages,
            Layout::Inline(_) => {
                self.locate_in_marker(target, marker_id, &marker, &mut placed)?;
                Vec::new()
            }
        };
        for key in dirty {
            acks.mark_persisted(key);
        }
        let committed: Vec<Row> = rows
            .iter()
            .zip(placed)
            .filter_map(|(r, l)| {
                l.map(|location| Row {
                    key: r.key,
                    location,
                })
            })
            .collect();
        self.stats.markers += 1;
        self.stats.persisted_bytes = committed
            .iter()
            .filter(|r| r.location.inline_at.is_none())
            .map(|r| r.location.len)
            .sum::<u64>()
            + pages.iter().map(|p| p.len).sum::<u64>()
            + batch_table.values().map(|l| l.len).sum::<u64>()
            + batch_pages
                .iter()
                .map(|p| batch_page_len(p.rows as usize) as u64)
                .sum::<u64>()
            + marker.len() as u64;
        w.flush.commit_bytes = marker.len() as u64;
        self.committed = CommittedTable {
            rows: committed,
            pages,
            state: Some(state.clone()),
        };
        self.batch_table = batch_table;
        self.batch_pages = batch_pages;
        Ok(w.flush)
    }

    /// The rows of the new table, one per live partition, ascending: an unchanged partition
    /// where it is stored (on a rollover, carried over to `w.target`), a changed one encoded
    /// now (its own entry written at once when too large to go inline).
    fn table_rows(&mut self, acks: &mut RangeSetWrapper, w: &mut Writing) -> Result<Vec<NewRow>> {
        let inline_max = self.inline_max();
        let live = acks.partitions();
        let mut rows = Vec::with_capacity(live.len());
        for (key, _) in live {
            let existing = self.shared.lock().locations.get(&key).copied();
            let current = existing.filter(|l| acks.stored_copy_current(key, l.cardinality));
            let row = match current {
                Some(l) if w.rollover => self.carry_over(w, key, &l, inline_max)?,
                Some(l) => NewRow {
                    key,
                    cardinality: l.cardinality,
                    body: Body::Stored(l),
                },
                None => {
                    let bitmap = acks.bitmap(key)?.unwrap_or_default();
                    w.flush.partitions += 1;
                    self.fresh_row(w.target, key, &bitmap, inline_max)?
                }
            };
            if let Body::Stored(l) = row.body {
                self.place(w, key, l);
            }
            rows.push(row);
        }
        Ok(rows)
    }

    /// Records that partition `key` is now at `location` of the flush's target: in the shared
    /// locations at once, or, on a rollover, in those the commit installs.
    fn place(&self, w: &mut Writing, key: PartitionKey, location: Location) {
        if w.rollover {
            w.fresh.insert(key, location);
        } else {
            self.shared.lock().locations.insert(key, location);
        }
    }

    /// Locates the partitions carried inline by `marker`, just committed as entry `marker_id`
    /// of `target`, in the shared locations and in `placed` (its rows, in order).
    fn locate_in_marker(
        &self,
        target: u64,
        marker_id: u64,
        marker: &[u8],
        placed: &mut [Option<Location>],
    ) -> Result<()> {
        let crc = payload_crc(marker);
        let decoded = decode_compact_marker(marker).map_err(|e| at_entry(target, marker_id, e))?;
        if let CompactTable::Inline(list) = decoded.table {
            let mut s = self.shared.lock();
            for ((row, at), slot) in list.located().zip(placed.iter_mut()) {
                if let RowForm::Inline(bytes) = row.form {
                    let location = inline_location(marker_id, crc, row.cardinality, bytes, at);
                    s.locations.insert(key_of(&row), location);
                    *slot = Some(location);
                }
            }
        }
        Ok(())
    }

    /// The row of a partition whose contents changed: inline when its record's inline form is
    /// at most `inline_max` bytes, otherwise written now as a partition entry of `target`.
    fn fresh_row(
        &self,
        target: u64,
        key: PartitionKey,
        bitmap: &RoaringBitmap,
        inline_max: usize,
    ) -> Result<NewRow> {
        let record = encode_partition(key, bitmap);
        let cardinality = bitmap.len();
        self.row_of(
            target,
            key,
            cardinality,
            inline_form(&record),
            inline_max,
            || partition_payload_of_record(key, &record, cardinality),
        )
    }

    /// The row of partition `key`: inline when `inline` (its inline form, if it has one) is at
    /// most `inline_max` bytes, otherwise in the partition entry `payload` makes, written now
    /// to `target`.
    fn row_of(
        &self,
        target: u64,
        key: PartitionKey,
        cardinality: u64,
        inline: Option<Vec<u8>>,
        inline_max: usize,
        payload: impl FnOnce() -> Vec<u8>,
    ) -> Result<NewRow> {
        let body = if let Some(bytes) = inline.filter(|b| b.len() <= inline_max) {
            Body::Inline(bytes)
        } else {
            Body::Stored(write_partition_payload(
                &self.log,
                &self.shared,
                target,
                &payload(),
                cardinality,
            )?)
        };
        Ok(NewRow {
            key,
            cardinality,
            body,
        })
    }

    /// The row, in the rollover's new ledger, of a partition stored at `location` of the old
    /// ledger: read and checked, then inline if its inline form is at most `inline_max` bytes
    /// (an inline one, or a version 2 record in an entry of its own), else its entry copied.
    fn carry_over(
        &self,
        w: &mut Writing,
        key: PartitionKey,
        location: &Location,
        inline_max: usize,
    ) -> Result<NewRow> {
        let old = w.old.ok_or(Error::NoSuchLedger(w.target))?;
        let stored = read_stored(&self.log, old, key, location, &mut w.cache)?;
        let inline = match &stored {
            Stored::Inline(bytes) => Some(bytes.clone()),
            Stored::Entry(payload) => decode_partition_entry(payload)
                .ok()
                .and_then(|e| inline_form(e.body)),
        };
        let cardinality = location.cardinality;
        self.row_of(w.target, key, cardinality, inline, inline_max, || {
            stored_as_payload(key, stored, cardinality)
        })
    }

    /// Writes the pages of the new table `rows` that need it (none when the table goes inline
    /// in the marker), recording in `placed` where each inline row landed and where each
    /// partition now is ([`CursorPersister::place`]).
    fn write_table(
        &mut self,
        state: &PersistedState,
        rows: &[NewRow],
        placed: &mut [Option<Location>],
        w: &mut Writing,
    ) -> Result<Layout> {
        let limits = self.table_limits();
        let inline = rows.is_empty()
            || (self.marker_limits().fit_inline(rows) && state.encoded_len() <= limits.bytes);
        if inline {
            return Ok(Layout::Inline(self.ready(w.target, rows, &mut w.cache)?));
        }
        let empty = CommittedTable::default();
        let base = if w.rollover { &empty } else { &self.committed };
        let plan = plan_pages(base, rows, limits);
        let mut pages = Vec::with_capacity(plan.len());
        for step in plan {
            let range = match step {
                PagePlan::Keep(page) => {
                    pages.push(page);
                    continue;
                }
                PagePlan::Write(range) => range,
            };
            let page_rows = rows.get(range.clone()).unwrap_or_default();
            let ready = self.ready(w.target, page_rows, &mut w.cache)?;
            let compact: Vec<CompactRow<'_>> = ready.iter().map(Ready::row).collect();
            let payload = encode_compact_page(&compact)?;
            let entry_id = append_entry(
                &self.log,
                &self.shared,
                w.target,
                EntryKind::CompactPage,
                &payload,
            )?;
            w.flush.pages += 1;
            let crc = payload_crc(&payload);
            let decoded =
                decode_compact_page(&payload).map_err(|e| at_entry(w.target, entry_id, e))?;
            let slots = placed.get_mut(range).unwrap_or_default();
            for ((row, at), slot) in decoded.located().zip(slots) {
                if let RowForm::Inline(bytes) = row.form {
                    let location = inline_location(entry_id, crc, row.cardinality, bytes, at);
                    self.place(w, key_of(&row), location);
                    *slot = Some(location);
                }
            }
            pages.push(Page {
                first: page_rows.first().map_or(LOWEST_KEY, |r| r.key),
                entry_id,
                crc,
                rows: u32::try_from(page_rows.len()).unwrap_or(u32::MAX),
                len: payload.len() as u64,
            });
        }
        Ok(Layout::Paged(pages))
    }

    /// `rows` ready to encode: unchanged inline partitions read from the page or marker of
    /// `ledger` that carries them (CRC-checked).
    fn ready(&self, ledger: u64, rows: &[NewRow], cache: &mut EntryCache) -> Result<Vec<Ready>> {
        rows.iter()
            .map(|r| {
                let (inline, entry) = match &r.body {
                    Body::Inline(bytes) => (Some(bytes.clone()), (0, 0)),
                    Body::Stored(l) if l.inline_at.is_none() => (None, (l.entry_id, l.crc)),
                    Body::Stored(l) => match read_stored(&self.log, ledger, r.key, l, cache)? {
                        Stored::Inline(bytes) => (Some(bytes), (0, 0)),
                        Stored::Entry(_) => (None, (l.entry_id, l.crc)),
                    },
                };
                Ok(Ready {
                    key: r.key,
                    cardinality: r.cardinality,
                    inline,
                    entry,
                })
            })
            .collect()
    }
}

/// The location of an inline partition of `bytes` at payload offset `at` of entry `entry_id`.
fn inline_location(entry_id: u64, crc: u32, cardinality: u64, bytes: &[u8], at: usize) -> Location {
    Location {
        entry_id,
        crc,
        cardinality,
        len: bytes.len() as u64,
        inline_at: Some(u32::try_from(at).unwrap_or(u32::MAX)),
    }
}

fn key_of(row: &CompactRow<'_>) -> PartitionKey {
    PartitionKey {
        ledger_id: row.ledger_id,
        chunk: row.chunk,
    }
}

/// A compact marker's reference to `page`.
fn page_ref(page: &Page) -> CompactPageRef {
    CompactPageRef {
        first: (page.first.ledger_id, page.first.chunk),
        entry_id: page.entry_id,
        crc: page.crc,
        rows: page.rows,
    }
}

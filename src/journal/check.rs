//! The offline check: a read-only scan of a journal, as an open reads it, into a report.

use std::collections::BTreeMap;
use std::sync::Arc;

use roaring::RoaringBitmap;

use super::host::{Listed, Seal};
use super::index::{Committed, CursorId, Index, PartLoc, Rows, SnapshotLoc};
use super::partitions::{read_payload_at, read_snapshot_at, verified_partition};
use super::recover::scan_segments;
use super::segment::{SegmentFile, segment_name};
use crate::ackset::{PartitionKey, PartitionStore, RangeSetWrapper};
use crate::error::{Error, Result};
use crate::format::journal::JournalLoc;
use crate::hashing::{HashMapExt, IdMap};
use crate::storage::Storage;

/// Bytes of partitions [`committed_ranges`] keeps resident while it walks a state.
const RANGE_WALK_BYTES: usize = 8 << 20;

/// What a read-only check of a journal found ([`check`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JournalCheck {
    /// Segment files.
    pub segments: u64,
    /// Records that verify.
    pub records: u64,
    /// Cursors with a committed marker or snapshot.
    pub cursors: u64,
    /// Those cursors, sorted: a store's open recovers each from the journal alone (its cursor
    /// record is not read).
    pub committed: Vec<CursorId>,
    /// The name tag each of those cursors' state binds (0: none) and where its newest record
    /// (of its chain, or its snapshot when that is its state) starts: the store's open hands
    /// a state only to the cursor of that name.
    pub names: BTreeMap<CursorId, (u32, JournalLoc)>,
    /// Each of those cursors' committed chain: mark-delete, the newest record of its chain,
    /// and where each of its partitions and batch records is.
    pub states: BTreeMap<CursorId, Committed>,
    /// Each of those cursors' newest committed single-entry snapshot (its state when
    /// [`SnapshotLoc::current`], else the fallback of its chain).
    pub snapshots: BTreeMap<CursorId, SnapshotLoc>,
    /// Cursors whose chain's newest marker or delta did not verify, and whose open falls back
    /// to their snapshot, with where that record starts: damage, which the open survives.
    pub fallbacks: Vec<(CursorId, JournalLoc)>,
    /// Batch records (the partial entries of one partition) the committed cursors' states
    /// reference.
    pub batch_partitions: u64,
    /// Partial entries (entries with some, not all, messages acknowledged) in those records.
    pub partial_entries: u64,
    /// Where the newest segment's torn tail starts and how many bytes it holds (the next open
    /// cuts it off): not damage.
    pub torn_tail: Option<(u64, u64, u64)>,
    /// Segment files the store's list does not name (a former owner's after the claim, or a
    /// creation cut short): never read; the next open removes them. Not damage.
    pub strays: Vec<u64>,
}

/// Checks the journal in `storage` without writing anything: every segment header and record,
/// as [`Journal::open`](super::Journal::open) does.
///
/// # Errors
/// [`Error::Corrupted`](crate::error::Error::Corrupted) at the segment and offset of the first damage; [`Error::Io`](crate::error::Error::Io).
pub fn check(storage: &dyn Storage, seal: Seal) -> Result<JournalCheck> {
    check_sealed(storage, &[seal])
}

/// [`check`] with every seal a store's catalog holds (see [`Journal::open_sealed`](super::Journal::open_sealed)).
///
/// # Errors
/// As [`check`].
pub fn check_sealed(storage: &dyn Storage, seals: &[Seal]) -> Result<JournalCheck> {
    check_listed(storage, seals, None)
}

/// [`check_sealed`] of the segments `listed` names only (`None`: every segment file), as
/// [`Journal::open_listed`](super::Journal::open_listed) reads them.
///
/// # Errors
/// As [`check`].
pub fn check_listed(
    storage: &dyn Storage,
    seals: &[Seal],
    listed: Option<Listed<'_>>,
) -> Result<JournalCheck> {
    let (scan, writer, report) = scan_segments(storage, seals, listed, false)?;
    Ok(JournalCheck {
        segments: writer.segments.len() as u64,
        records: report.records,
        cursors: scan.index.cursors().len() as u64,
        committed: scan.index.cursors(),
        names: scan
            .index
            .cursors()
            .into_iter()
            .filter_map(|c| {
                if let Some(s) = scan.index.current_snapshot(c) {
                    return Some((c, (s.name, s.loc)));
                }
                let committed = scan.index.committed(c)?;
                Some((c, (committed.name, committed.marker)))
            })
            .collect(),
        states: scan
            .index
            .cursors()
            .into_iter()
            .filter_map(|c| Some((c, scan.index.committed(c)?.clone())))
            .collect(),
        snapshots: scan
            .index
            .cursors()
            .into_iter()
            .filter_map(|c| Some((c, scan.index.snapshot(c)?.clone())))
            .collect(),
        fallbacks: scan.fallbacks.clone(),
        batch_partitions: committed_batch(&scan.index).map(|_| 1).sum::<u64>()
            + current_snapshots(&scan.index)
                .map(|s| s.batch.0)
                .sum::<u64>(),
        partial_entries: committed_batch(&scan.index)
            .map(|p| p.cardinality)
            .sum::<u64>()
            + current_snapshots(&scan.index)
                .map(|s| s.batch.1)
                .sum::<u64>(),
        torn_tail: report.torn_tail,
        strays: report.strays,
    })
}

/// Every batch record the committed chains that are their cursors' state reference.
fn committed_batch(index: &Index) -> impl Iterator<Item = &PartLoc> {
    index
        .cursors()
        .into_iter()
        .filter(|c| index.current_snapshot(*c).is_none())
        .filter_map(|c| index.committed(c))
        .flat_map(|c| c.batch.values())
}

/// Every snapshot that is its cursor's state.
fn current_snapshots(index: &Index) -> impl Iterator<Item = &SnapshotLoc> {
    index
        .cursors()
        .into_iter()
        .filter_map(|c| index.current_snapshot(c))
}

/// The entries acknowledged above mark-delete in `cursor`'s snapshot `s` (one [`check`]
/// found in the journal of `storage`): the record is read back and verified as an open of
/// the cursor reads it.
///
/// # Errors
/// [`Error::Corrupted`](crate::error::Error::Corrupted) at the record when it does not
/// verify; [`Error::Io`](crate::error::Error::Io).
pub fn snapshot_entries(storage: &dyn Storage, cursor: CursorId, s: &SnapshotLoc) -> Result<u64> {
    let file = SegmentFile::new(storage.open(&segment_name(s.loc.segment))?, false, false);
    read_snapshot_at(&file, cursor, s, |snapshot| {
        Ok(snapshot
            .ranges()
            .map(|(_, first, last)| last - first + 1)
            .sum())
    })
}

/// The maximal acknowledged ranges of `state` (a committed state [`check`] found in the
/// journal of `storage`): every partition record it lists is read and verified as a load does
/// (frame, CRC, key and cardinality, then the partition decoder's checks), a few at a time.
///
/// # Errors
/// [`Error::Corrupted`](crate::error::Error::Corrupted) naming the first partition whose
/// record does not verify (a store's open does not read partitions: the cursor's first load
/// of it fails the same way); [`Error::Io`](crate::error::Error::Io).
pub fn committed_ranges(storage: Arc<dyn Storage>, state: &Committed) -> Result<u64> {
    let index: Vec<(PartitionKey, u64)> = state
        .rows
        .iter()
        .map(|(key, part)| (*key, part.cardinality))
        .collect();
    let records = CommittedPartitions {
        storage,
        rows: state.rows.clone(),
        files: IdMap::new(),
    };
    RangeSetWrapper::with_index(Box::new(records), RANGE_WALK_BYTES, index).range_count()
}

/// The partition records of one committed state, read from their segment files without the
/// journal open: the offline check's partition store. Read only.
struct CommittedPartitions {
    storage: Arc<dyn Storage>,
    rows: Rows,
    /// Segment files opened so far.
    files: IdMap<u64, Arc<SegmentFile>>,
}

impl PartitionStore for CommittedPartitions {
    fn load(&mut self, key: PartitionKey) -> Result<Option<RoaringBitmap>> {
        let Some(part) = self.rows.get(&key).copied() else {
            return Ok(None);
        };
        let file = if let Some(file) = self.files.get(&part.loc.segment) {
            Arc::clone(file)
        } else {
            let file = self.storage.open(&segment_name(part.loc.segment))?;
            let file = Arc::new(SegmentFile::new(file, false, false));
            self.files.insert(part.loc.segment, Arc::clone(&file));
            file
        };
        let payload = read_payload_at(&file, part.loc, part.frame_len)?;
        verified_partition(&payload, key, &part).map(Some)
    }

    fn store(&mut self, key: PartitionKey, _bitmap: &RoaringBitmap) -> Result<()> {
        Err(Error::InvalidArgument {
            reason: format!(
                "the offline check writes nothing (partition {}:{})",
                key.ledger_id, key.chunk
            ),
        })
    }
}

//! Single-entry snapshots: the whole ack set as maximal ranges in one entry.
//!
//! Owns: turning a `RangeSetWrapper` into a snapshot payload under the byte and range limits
//! (counting every range that did not fit), a snapshot back into ranges, and the overflow
//! policy ([`apply_overflow`]) both writers of a snapshot (the cursor ledger's and the
//! journal's) apply to a snapshot that did not hold every range.

use roaring::RoaringBitmap;

use crate::ackset::RangeSetWrapper;
use crate::error::Error;
use crate::error::Result;
use crate::format::cursor::{BatchPartition, PersistedState, SnapshotWriter};
use crate::observe::{self, CursorLabels};

use super::config::{CursorConfig, OverflowPolicy};
use super::stats::PersistStats;

/// A snapshot payload and what did not fit in it.
#[derive(Debug)]
pub(crate) struct BuiltSnapshot {
    /// The encoded snapshot entry.
    pub payload: Vec<u8>,
    /// Ranges written.
    pub ranges: u64,
    /// Ranges left out because a limit was hit.
    pub cut: u64,
}

/// Applies `config`'s overflow policy to `snapshot` (built under `max_bytes` and the range
/// cap): with ranges cut, [`OverflowPolicy::Error`] refuses the flush
/// ([`Error::LimitExceeded`], nothing written) and [`OverflowPolicy::Warn`] logs a warning and
/// counts the cut in `stats` and the cursor's metrics, so a cut is never silent.
///
/// # Errors
/// [`Error::LimitExceeded`] as above.
pub(crate) fn apply_overflow(
    snapshot: &BuiltSnapshot,
    (config, max_bytes): (&CursorConfig, usize),
    labels: &CursorLabels,
    stats: &mut PersistStats,
) -> Result<()> {
    if snapshot.cut == 0 {
        return Ok(());
    }
    let message = overflow_message(
        snapshot.ranges + snapshot.cut,
        snapshot.cut,
        config,
        max_bytes,
    );
    match config.on_single_entry_overflow {
        OverflowPolicy::Error => Err(Error::LimitExceeded { reason: message }),
        OverflowPolicy::Warn => {
            ::log::warn!(target: observe::LOG_TARGET,
                "{}: record `{}`: {message}",
                labels.topic,
                labels.cursor
            );
            stats.overflows += 1;
            stats.ranges_cut += snapshot.cut;
            labels.count(observe::SNAPSHOT_RANGES_CUT, snapshot.cut);
            Ok(())
        }
    }
}

/// What a broker is told of a single-entry state of `ranges` ranges of which `cut` do not fit.
fn overflow_message(ranges: u64, cut: u64, config: &CursorConfig, max_bytes: usize) -> String {
    format!(
        "the cursor's {ranges} ack ranges do not fit in one entry (at most {} ranges and \
         {max_bytes} bytes); {cut} ranges would be left out. Use multi-entry persistence to \
         keep them all",
        config.max_ranges_single_entry,
    )
}

/// Decides at the open of a cursor read from a cursor ledger's single-entry snapshot of
/// `ranges` ranges, for a cursor of the single-entry form, what its flushes will do with the
/// ranges past `config`'s range cap (the import, its first write, keeps every range; the
/// snapshot of the flush after it would cut them): under [`OverflowPolicy::Error`] the open
/// fails, so a flush never fails later for state the broker did not add; under
/// [`OverflowPolicy::Warn`] a warning says now how many ranges that flush will leave out (it
/// logs and counts the cut again when it happens). A cut is never silent.
///
/// # Errors
/// [`Error::LimitExceeded`] under [`OverflowPolicy::Error`] when `ranges` exceeds the cap.
pub(crate) fn check_imported_snapshot(
    ranges: u64,
    config: &CursorConfig,
    labels: &CursorLabels,
) -> Result<()> {
    let Some(cut) = ranges
        .checked_sub(config.max_ranges_single_entry)
        .filter(|&cut| cut > 0)
    else {
        return Ok(());
    };
    let max_bytes = usize::try_from(config.max_entry_size).unwrap_or(usize::MAX);
    let message = overflow_message(ranges, cut, config, max_bytes);
    match config.on_single_entry_overflow {
        OverflowPolicy::Error => Err(Error::LimitExceeded {
            reason: format!("opening a cursor read from its cursor ledger: {message}"),
        }),
        OverflowPolicy::Warn => {
            ::log::warn!(target: observe::LOG_TARGET,
                "{}: record `{}`: read from its cursor ledger: {message}; its first flush \
                 keeps every range, the flush after it keeps the lowest {}",
                labels.topic,
                labels.cursor,
                config.max_ranges_single_entry
            );
            Ok(())
        }
    }
}

/// Maximal runs `[first, last]` of consecutive values in `bitmap`, ascending.
pub fn bitmap_runs(bitmap: &RoaringBitmap) -> impl Iterator<Item = (u32, u32)> + '_ {
    let mut values = bitmap.iter().peekable();
    std::iter::from_fn(move || {
        let first = values.next()?;
        let mut last = first;
        while values
            .next_if(|&v| Some(v) == last.checked_add(1))
            .is_some()
        {
            last += 1;
        }
        Some((first, last))
    })
}

/// Joins ranges that touch (the end of one partition and the start of the next).
#[derive(Debug, Default)]
pub struct Merger {
    /// The range not yet emitted: ledger, first and last entry.
    pub pending: Option<(u64, u64, u64)>,
}

impl Merger {
    /// Adds an ascending range; returns a finished maximal range when one is complete.
    pub fn push(&mut self, ledger: u64, first: u64, last: u64) -> Option<(u64, u64, u64)> {
        match &mut self.pending {
            Some((l, _, end)) if *l == ledger && end.checked_add(1) == Some(first) => {
                *end = last;
                None
            }
            _ => self.pending.replace((ledger, first, last)),
        }
    }
}

/// Encodes `acks` and the partial entries `batch` as a snapshot of `state`, loading cold
/// partitions as it goes. The batch section is never cut: a snapshot too large for it fails
/// to append ([`Error::EntryTooLarge`]).
pub(crate) fn build_snapshot(
    state: &PersistedState,
    acks: &mut RangeSetWrapper,
    batch: &[BatchPartition],
    max_bytes: usize,
    max_ranges: u64,
) -> Result<BuiltSnapshot> {
    let mut writer = SnapshotWriter::new(state, max_bytes, max_ranges)?;
    let mut cut = 0u64;
    let mut emit = |writer: &mut SnapshotWriter, (ledger, first, last)| -> Result<()> {
        if cut > 0 || !writer.push(ledger, first, last)? {
            cut += 1;
        }
        Ok(())
    };
    let mut merger = Merger::default();
    for (key, _) in acks.partitions() {
        let Some(bitmap) = acks.bitmap(key)? else {
            continue;
        };
        let base = key.first_entry();
        for (first, last) in bitmap_runs(&bitmap) {
            let range = (
                key.ledger_id,
                base + u64::from(first),
                base + u64::from(last),
            );
            if let Some(done) = merger.push(range.0, range.1, range.2) {
                emit(&mut writer, done)?;
            }
        }
    }
    if let Some(done) = merger.pending.take() {
        emit(&mut writer, done)?;
    }
    let ranges = writer.ranges();
    let payload = writer
        .finish_with_batch(batch)
        .ok_or_else(|| Error::InvalidArgument {
            reason: "the cursor's batch-index state does not encode".to_string(),
        })?;
    Ok(BuiltSnapshot {
        payload,
        ranges,
        cut,
    })
}

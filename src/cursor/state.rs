//! A cursor's state and the rules that move it.
//!
//! Owns: [`CursorState`] (mark-delete, read position, individually acknowledged entries above
//! mark-delete, properties, epoch) and every transition of it, each resolved against the topic's
//! current [`Layout`]. This is the seam persistence works on: a flush writes a `CursorState`
//! out as a [`PersistedState`] plus its ack set, recovery rebuilds one from a
//! [`RecoveredCursor`](super::recover::RecoveredCursor).
//!
//! Invariants kept by every method here:
//! - every position in `acks` is a retained entry strictly after `mark_delete`;
//! - the entry after `mark_delete`, if any, is not in `acks` (mark-delete has absorbed every
//!   contiguous acknowledged entry);
//! - `mark_delete` never moves backwards except through [`CursorState::reset_to`].
//!
//! Must never: do I/O other than through the ack set's partition store.

use std::collections::BTreeMap;

use crate::ackset::{RangeSetWrapper, Releasable};
use crate::error::{Error, Result};
use crate::finder::Layout;
use crate::format::cursor::{MAX_PROPERTIES, MAX_PROPERTY_NAME, PersistedState};
use crate::format::meta::CursorRecord;
use crate::position::Position;

use super::batch::{BatchAck, BatchAcks};
use super::{CursorOptions, InitialPosition};

/// How "no entry acknowledged" is written in the `mark_delete` field of a cursor record.
///
/// Data ledger ids start at 1 (the managed ledger bumps the entry log's id counter before it
/// creates any ledger), so `0:0` is never an entry.
pub const NO_MARK_DELETE: Position = Position::new(0, 0);

/// Everything a cursor knows, in memory.
pub struct CursorState {
    /// Every entry at or before it is acknowledged; `None` when no retained entry is (the
    /// cursor starts before the first entry). Pulsar writes this as `L:-1`.
    pub(crate) mark_delete: Option<Position>,
    /// The next read returns the first unacknowledged retained entry at or after this
    /// position (and after `mark_delete`).
    pub(crate) read_position: Position,
    /// Individually acknowledged entries after `mark_delete`.
    pub(crate) acks: RangeSetWrapper,
    /// Application properties stored with the mark-delete position.
    pub(crate) properties: BTreeMap<String, i64>,
    /// Increases on every seek, rewind and reset; never on reopen.
    pub(crate) epoch: u64,
    /// Acknowledged messages of partially acknowledged entries (after mark-delete, not in
    /// `acks`).
    pub(crate) batch: BatchAcks,
    /// What the topic's layout said about one ledger, so an ack there needs no look at the
    /// layout (see [`KnownLedger`]); `None` until a durable cursor's ack records it.
    known: Option<KnownLedger>,
}

/// A ledger's retained entries and the entry after mark-delete, as the topic's readable layout
/// showed them while mark-delete and the epoch were `mark` and `epoch`.
///
/// Valid for a durable cursor while its mark-delete and epoch are still those: trimming waits
/// for every durable cursor's published mark-delete, which is never past its own, so no entry
/// after `mark` leaves the layout, and the readable layout only grows at its end. So entries
/// `0..entries` of ledger `ledger_id` stay retained, and `after_mark` stays the first retained
/// entry after `mark`. A seek, rewind or reset raises the epoch and clears it.
#[derive(Clone, Copy, Debug)]
struct KnownLedger {
    ledger_id: u64,
    /// A lower bound of the ledger's entries (it may have grown since).
    entries: u64,
    mark: Option<Position>,
    epoch: u64,
    after_mark: Position,
}

impl KnownLedger {
    /// Whether `pos` is one of the ledger's entries known to be retained.
    fn holds(&self, pos: Position) -> bool {
        pos.ledger_id == self.ledger_id && pos.entry_id < self.entries
    }
}

impl CursorState {
    /// The state of a new cursor opened with `options` on `layout`.
    pub(crate) fn initial(layout: &Layout, options: CursorOptions, acks: RangeSetWrapper) -> Self {
        let mut state = Self {
            mark_delete: None,
            read_position: Position::default(),
            acks,
            properties: BTreeMap::new(),
            epoch: 0,
            batch: BatchAcks::default(),
            known: None,
        };
        state.reset_to(layout, initial_target(layout, options));
        state
    }

    /// The state of a reopened cursor: what recovery found, resolved against `layout`.
    ///
    /// Acks of entries the topic no longer holds are dropped: entries in trimmed ledgers (at or
    /// before some mark-delete that trimming saw in memory) and entries appended but lost in a
    /// power cut before the data ledger was synced (an entry that does not exist is never
    /// delivered, so an ack of it means nothing). Then mark-delete absorbs the acked entries
    /// that follow it, so the read position is the first unacknowledged entry after it. Only
    /// the partitions at the two ends of the retained entries are loaded. Returns the state and
    /// whether it differs from what was persisted.
    ///
    /// `batch` is the persisted batch-index state: a partial entry survives only while it is a
    /// retained entry after mark-delete that is not acknowledged whole.
    pub(crate) fn recovered(
        persisted: &PersistedState,
        layout: &Layout,
        acks: RangeSetWrapper,
        batch: super::recover::RecoveredBatch,
    ) -> Result<(Self, bool)> {
        let mark_delete =
            (persisted.mark_delete != NO_MARK_DELETE).then_some(persisted.mark_delete);
        let mut state = Self {
            mark_delete,
            read_position: Position::default(),
            acks,
            properties: persisted.properties.clone(),
            epoch: persisted.epoch,
            batch: batch.into_inner(),
            known: None,
        };
        let before = (state.mark_delete, state.acks.len(), state.batch.len());
        state.drop_missing(layout)?;
        state.drop_stale_partials(layout)?;
        state.absorb(layout)?;
        state.read_position = layout
            .after_mark(state.mark_delete)
            .unwrap_or_else(|| layout.end());
        state.charge_batch();
        let changed = before != (state.mark_delete, state.acks.len(), state.batch.len());
        Ok((state, changed))
    }

    /// Drops partial entries that are not retained entries after mark-delete, or that are
    /// acknowledged whole, one partition at a time (evicting as it goes).
    ///
    /// A cold partition (listed by a marker) is dropped whole without a load when its data
    /// ledger is no longer retained, kept without a load when it lies within its ledger's
    /// entries, and loaded and checked otherwise (it may reach entries a power cut lost). A
    /// committed state never holds an entry both partial and acknowledged whole (a flush
    /// writes both from one state), so cold partitions are not checked against the acks.
    fn drop_stale_partials(&mut self, layout: &Layout) -> Result<()> {
        for key in self.batch.keys() {
            let cold = self.batch.is_cold(key);
            if cold {
                match layout.span(key.ledger_id) {
                    None => {
                        self.batch.drop_cold(key);
                        continue;
                    }
                    Some(span)
                        if key
                            .first_entry()
                            .checked_add(crate::ackset::PARTITION_SPAN)
                            .is_some_and(|end| end <= span.entries) =>
                    {
                        continue;
                    }
                    Some(_) => {}
                }
            }
            let mark = self.mark_delete;
            let mut in_acks = std::collections::BTreeSet::new();
            if !cold && let Some(p) = self.batch.resident_partition(key) {
                for e in p.entries {
                    let pos = Position::new(p.ledger_id, e.entry_id);
                    if self.acks.contains(pos)? {
                        in_acks.insert(pos);
                    }
                }
            }
            self.batch.retain_in(key, |pos| {
                layout.contains(pos) && mark.is_none_or(|m| pos > m) && !in_acks.contains(&pos)
            })?;
            self.charge_batch();
        }
        Ok(())
    }

    /// Charges the resident partial entries' memory to the ack set's budget, so both share
    /// one budget: resident ack partitions are evicted to make room for them first; when the
    /// ack set cannot shrink further (only its hot partition, or pinned ones, left), partial
    /// entries are evicted, least recently used first, until both fit. So the resident ack
    /// state stays within the budget plus the ack set's one hot partition (plus what a failed
    /// store pins).
    ///
    /// The partition of partial entries in use (the most recently used) stays resident past
    /// the budget, as the ack set's hot partition does, until [`Self::settle_batch`].
    pub(crate) fn charge_batch(&mut self) {
        self.fit_batch(true);
    }

    /// As [`Self::charge_batch`], without keeping the partition of partial entries in use:
    /// after a flush, when its copy in the cursor ledger is current and evicting it writes
    /// nothing.
    pub(crate) fn settle_batch(&mut self) {
        self.fit_batch(false);
    }

    fn fit_batch(&mut self, keep_hot: bool) {
        // No partial entries, none charged: nothing to charge or evict (runs after every
        // operation; the ack set published its own bytes already).
        if self.batch.bytes() == 0 && self.acks.charge() == 0 {
            return;
        }
        self.acks.set_charge(self.batch.bytes());
        let room = self.acks.room_for_charge();
        if self.batch.bytes() > room {
            self.batch.evict_to(room, keep_hot);
            self.acks.set_charge(self.batch.bytes());
        }
    }

    /// Whether evictions kept unsaved state resident past the budget: ack partitions pinned,
    /// or partial entries the store does not hold beyond the room the ack set leaves them.
    /// Partial entries the store holds (loaded from it, unchanged since) never count: an
    /// eviction drops them without a write, so keeping the one in use resident writes nothing.
    pub(crate) fn holds_unsaved_past_budget(&self) -> bool {
        self.acks.pinned_partitions() > 0
            || (self.batch.bytes() > self.acks.room_for_charge()
                && self.batch.unsaved_bytes() > self.acks.room_for_charge())
    }

    /// Releases up to `bytes` of resident ack state of `what` (ack partitions first, then,
    /// for [`Releasable::Any`], partial entries) for another cursor sharing the budget; returns
    /// the bytes released. Evicts without asking anyone else.
    pub(crate) fn release_memory(&mut self, bytes: usize, what: Releasable) -> usize {
        let mut freed = self.acks.release(bytes, what);
        if freed < bytes && what == Releasable::Any {
            let before = self.batch.bytes();
            self.batch
                .evict_to(before.saturating_sub(bytes - freed), false);
            freed += before - self.batch.bytes();
            self.acks.lower_charge(self.batch.bytes());
        }
        freed
    }

    /// The acknowledged messages of the partially acknowledged entry at `pos` (`None` when
    /// it has none), loading its partition if cold (and evicting to the budget after).
    pub(crate) fn partial_acked(
        &mut self,
        pos: Position,
    ) -> Result<Option<roaring::RoaringBitmap>> {
        // A load may evict other partitions in the same call, so the count of cold partitions
        // alone does not tell whether the resident bytes changed.
        let before = (self.batch.cold_partitions(), self.batch.bytes());
        let acked = self.batch.acked(pos);
        if (self.batch.cold_partitions(), self.batch.bytes()) != before {
            self.charge_batch();
        }
        acked
    }

    /// Whether message `index` of the entry at `pos` is acknowledged at batch-index level.
    pub(crate) fn batch_index_acked(&mut self, pos: Position, index: u32) -> Result<bool> {
        Ok(self
            .partial_acked(pos)?
            .is_some_and(|acked| acked.contains(index)))
    }

    /// Drops acks of positions that are not retained entries (see [`Self::recovered`]).
    fn drop_missing(&mut self, layout: &Layout) -> Result<()> {
        let Some(last) = layout.last_entry() else {
            self.acks.clear();
            return Ok(());
        };
        if let Some(first) = layout.first_entry()
            && let Some(below) = layout_floor(first)
        {
            self.acks.remove_at_most(below)?;
        }
        // The highest ack is told by its partition's bounds, without a load when the store
        // can read them.
        if self.acks.highest()?.is_some_and(|h| h > last) {
            // Rare (a power cut lost acknowledged entries): rebuild from the ranges that exist.
            let kept: Vec<_> = self
                .acks
                .ranges()?
                .into_iter()
                .filter(|&(from, _)| from <= last)
                .map(|(from, to)| (from, to.min(last)))
                .collect();
            self.acks.clear();
            for (from, to) in kept {
                self.acks
                    .add_range(from.ledger_id, from.entry_id, to.entry_id)?;
            }
        }
        Ok(())
    }

    /// The persisted form of this state (the ack set is persisted alongside).
    pub(crate) fn persisted(&self) -> PersistedState {
        PersistedState {
            mark_delete: self.mark_delete.unwrap_or(NO_MARK_DELETE),
            epoch: self.epoch,
            properties: self.properties.clone(),
        }
    }

    /// The cursor record of this state, for a cursor without a cursor ledger yet.
    pub(crate) fn to_record(&self, name: &str) -> CursorRecord {
        CursorRecord {
            name: name.to_owned(),
            cursor_ledger: None,
            mark_delete: self.mark_delete.unwrap_or(NO_MARK_DELETE),
            epoch: self.epoch,
            properties: self.properties.clone(),
            identity: None,
        }
    }

    /// Catches up with a trim that did not wait for this cursor (a non-durable one): acks of
    /// entries no longer retained are dropped, and a mark-delete before the first retained
    /// entry becomes "before every entry" (`None`), which reads and backlog treat alike.
    pub(crate) fn follow_trim(&mut self, layout: &Layout) -> Result<()> {
        let Some(first) = layout.first_entry() else {
            return Ok(());
        };
        let Some(below) = layout_floor(first) else {
            return Ok(());
        };
        let mut moved = false;
        if self.mark_delete.is_some_and(|m| m <= below) {
            self.mark_delete = None;
            moved = true;
        }
        if self.acks.lowest()?.is_some_and(|low| low <= below) {
            self.acks.remove_at_most(below)?;
            moved = true;
        }
        self.batch.remove_at_most(below)?;
        if moved {
            self.absorb(layout)?;
        }
        Ok(())
    }

    /// Acknowledges one entry. Returns whether anything changed.
    pub(crate) fn ack(&mut self, layout: &Layout, pos: Position) -> Result<bool> {
        if self.mark_delete.is_some_and(|m| pos <= m) {
            return Ok(false);
        }
        if !layout.contains(pos) {
            return acked_before_retained(layout, pos);
        }
        // With no partial entry anywhere (resident or cold) there is none to load or forget.
        let batched = self.batch.len() > 0;
        if batched {
            // Loaded first, so the partial entry leaves with the ack, not on a later error.
            self.batch.prepare(pos)?;
        }
        // Mark-delete moves only when the first entry after it is acknowledged: after every
        // change the first acknowledged range starts past that entry (`absorb`), so an ack
        // elsewhere leaves it where it is, and the first range is not looked up (a partition
        // visit per ack otherwise). That entry is never in `acks`: mark-delete moves onto it
        // without it, and over the acknowledged entries that follow it, if the next one is.
        if layout.after_mark(self.mark_delete) == Some(pos) {
            // Looked up before mark-delete moves: a failed load leaves it where it was, not
            // before an acknowledged entry it did not absorb.
            let next_acked = match layout.after(pos) {
                Some(next) => self.acks.contains(next)?,
                None => false,
            };
            self.move_onto(layout, pos, next_acked, batched)?;
            return Ok(true);
        }
        self.add_individually(pos, batched)
    }

    /// Adds `pos`, an entry after the one after mark-delete, to `acks`, and forgets it as a
    /// partial entry (`batched`: there may be partial entries, loaded by `prepare` first).
    fn add_individually(&mut self, pos: Position, batched: bool) -> Result<bool> {
        if !self.acks.add(pos)? {
            return Ok(false);
        }
        if batched {
            self.batch.remove(pos)?;
        }
        Ok(true)
    }

    /// Records what `layout` says about `pos`'s ledger and the entry after mark-delete, for
    /// [`Self::ack_known`]. Only for a durable cursor (a non-durable one follows trims that
    /// do not wait for it).
    pub(crate) fn learn_ledger(&mut self, layout: &Layout, pos: Position) {
        self.known = layout
            .span(pos.ledger_id)
            .zip(layout.after_mark(self.mark_delete))
            .map(|(span, after_mark)| KnownLedger {
                ledger_id: span.id,
                entries: span.entries,
                mark: self.mark_delete,
                epoch: self.epoch,
                after_mark,
            });
    }

    /// [`Self::ack`] without the layout, answered by what [`Self::learn_ledger`] recorded.
    /// `None` when that is not enough, or when a partition failed to load: then nothing has
    /// changed, and the caller acks with the layout (which meets, and reports, the same
    /// failure). Only for a durable cursor (see [`KnownLedger`]).
    ///
    /// Answers an ack of an entry of the known ledger past the entry after mark-delete (an
    /// individual ack), and of the entry after mark-delete when the entry after it is in the
    /// known ledger and not acknowledged (mark-delete moves by one).
    pub(crate) fn ack_known(&mut self, pos: Position) -> Option<bool> {
        let known = self
            .known
            .filter(|k| k.mark == self.mark_delete && k.epoch == self.epoch && k.holds(pos))?;
        let batched = self.batch.len() > 0;
        if pos > known.after_mark {
            if batched {
                self.batch.prepare(pos).ok()?;
            }
            return self.add_individually(pos, batched).ok();
        }
        if pos != known.after_mark {
            // At or before mark-delete: `ack` answers without the layout either.
            return None;
        }
        let next = Position::new(pos.ledger_id, pos.entry_id.checked_add(1)?);
        // As `ack` does for the entry after mark-delete, when the entry after it is in the
        // known ledger and not acknowledged (then nothing is absorbed). Looked up first: when
        // it is acknowledged, nothing has changed and `ack` absorbs with the layout.
        if !known.holds(next) || self.acks.contains(next).ok()? {
            return None;
        }
        if batched {
            // `remove` cannot fail after `prepare`.
            self.batch
                .prepare(pos)
                .and_then(|()| self.batch.remove(pos))
                .ok()?;
        }
        self.mark_delete = Some(pos);
        self.known = Some(KnownLedger {
            mark: self.mark_delete,
            after_mark: next,
            ..known
        });
        Some(true)
    }

    /// Whether mark-delete must be published for trims now, `published` being the value
    /// published last. Trimming deletes whole ledgers whose last entry is at or before every
    /// durable cursor's published mark-delete: a mark-delete that moved within the known
    /// ledger and is still before its last known entry deletes nothing that `published` in
    /// the same ledger would not, so it is published later (by the next operation that
    /// changes that, or with the layout).
    pub(crate) fn must_publish(&self, published: Option<Position>) -> bool {
        let (Some(mark), Some(old), Some(known)) = (self.mark_delete, published, self.known) else {
            return self.mark_delete != published;
        };
        if mark == old {
            return false;
        }
        !(mark.ledger_id == old.ledger_id
            && known.holds(mark)
            && mark.entry_id.saturating_add(1) < known.entries
            && old < mark)
    }

    /// Acknowledges message `index` of the entry at `pos`, which holds `batch_size` messages;
    /// the entry is acknowledged whole once its last message is. Returns whether anything
    /// changed (`false` for a message, or an entry, already acknowledged).
    pub(crate) fn ack_batch_index(
        &mut self,
        layout: &Layout,
        pos: Position,
        index: u32,
        batch_size: u32,
    ) -> Result<bool> {
        // Refused whatever the entry's state, before anything is looked at or changed.
        super::batch::check_batch_ack(pos, index, batch_size)?;
        if self.mark_delete.is_some_and(|m| pos <= m) {
            return Ok(false);
        }
        if !layout.contains(pos) {
            return acked_before_retained(layout, pos);
        }
        if self.acks.contains(pos)? {
            return Ok(false);
        }
        let changed = match self.batch.ack(pos, index, batch_size)? {
            BatchAck::Unchanged => Ok(false),
            BatchAck::Partial => Ok(true),
            BatchAck::Complete => self.ack(layout, pos),
        };
        self.charge_batch();
        changed
    }

    /// Acknowledges every entry up to and including `pos`. Returns whether anything changed.
    pub(crate) fn ack_cumulative(&mut self, layout: &Layout, pos: Position) -> Result<bool> {
        match self.mark_delete {
            Some(m) if pos == m => return Ok(false),
            Some(m) if pos < m => {
                return Err(Error::InvalidArgument {
                    reason: format!(
                        "cumulative ack of {pos} is behind the mark-delete position {m}; \
                     nothing was changed"
                    ),
                });
            }
            _ => {}
        }
        if !layout.contains(pos) {
            return Err(refuse_missing(layout, pos, "cumulative ack"));
        }
        self.cover(layout, pos)?;
        Ok(true)
    }

    /// Moves mark-delete to `pos`, after it, and over the acknowledged entries that follow
    /// it, as `absorb` would, with every load first: on an error nothing has changed (never a
    /// mark-delete moved over acks it did not drop, nor one stopped before an acked entry).
    fn cover(&mut self, layout: &Layout, pos: Position) -> Result<()> {
        let mut end = pos;
        while let Some(next) = layout.after(end)
            && let Some(last) = self.acks.run_end(next)?
        {
            end = last;
        }
        if self.batch.len() > 0 {
            // So that the partial entries' removal below needs no I/O.
            self.batch.prepare(end)?;
        }
        self.acks.remove_at_most(end)?;
        self.mark_delete = Some(end);
        self.batch.remove_at_most(end)
    }

    /// Acknowledges every position of `positions` at once: all are checked first, so when one
    /// is no retained entry nothing changes; a partition that fails to load may leave a part
    /// acknowledged (never the entry after mark-delete individually). Returns how many entries
    /// were newly acknowledged.
    pub(crate) fn ack_many(&mut self, layout: &Layout, positions: &[Position]) -> Result<u64> {
        let mark = self.mark_delete;
        // A position before the first retained entry is before mark-delete too.
        let after_mark =
            |p: &Position| mark.is_none_or(|m| *p > m) && !layout.before_first_entry(*p);
        let first_unacked = layout.after_mark(mark);
        // The entry after mark-delete is never in `acks`: given, it is newly acknowledged.
        let mut fills_first = false;
        let mut all_after_mark = true;
        // The ledger looked up last and its entry count: a call's positions are mostly in one.
        let mut span: Option<(u64, u64)> = None;
        for p in positions {
            if !after_mark(p) {
                all_after_mark = false;
                continue;
            }
            let entries = match span {
                Some((id, entries)) if id == p.ledger_id => entries,
                _ => {
                    let entries = layout.span(p.ledger_id).map_or(0, |s| s.entries);
                    span = Some((p.ledger_id, entries));
                    entries
                }
            };
            if p.entry_id >= entries {
                return Err(Error::NoSuchEntry(*p));
            }
            fills_first |= Some(*p) == first_unacked;
        }
        // The entry after mark-delete goes as in `ack`: never into `acks`, mark-delete moves
        // onto it once the rest of the call is in, and whether the entry after it was
        // acknowledged before is looked up first (a failed load then changes nothing).
        let floor = first_unacked.filter(|_| fills_first);
        let batched = self.batch.len() > 0;
        let next_acked = match floor {
            Some(floor) => {
                if batched {
                    self.batch.prepare(floor)?;
                }
                match layout.after(floor) {
                    Some(next) => self.acks.contains(next)? || positions.contains(&next),
                    None => false,
                }
            }
            None => false,
        };
        let mut acked = positions
            .iter()
            .copied()
            .filter(|p| after_mark(p) && Some(*p) != floor);
        // As in `ack`: no partial entry to load or forget when there is none at all, and then
        // the positions go to the ack set in one call (unfiltered when none is left out).
        let added = if !batched && all_after_mark && floor.is_none() {
            self.acks.add_many(positions.iter().copied())?
        } else if batched {
            acked.try_fold(0, |changed, pos| {
                self.batch.prepare(pos)?;
                let added = self.acks.add(pos)?;
                self.batch.remove(pos)?;
                Ok(changed + u64::from(added))
            })?
        } else {
            self.acks.add_many(acked)?
        };
        let Some(floor) = floor else {
            return Ok(added);
        };
        self.move_onto(layout, floor, next_acked, batched)?;
        Ok(added + 1)
    }

    /// Acknowledges `floor`, the entry right after mark-delete, which is never in `acks`:
    /// mark-delete moves onto it, then (`next_acked`: the entry after it is acknowledged) over
    /// the acknowledged entries after it; its partial acks are forgotten (`batched`: there may
    /// be some). A failure before mark-delete moved past `floor` (a load of the first range)
    /// puts it back: the entry is then not applied, rather than left with an acknowledged
    /// entry right after mark-delete.
    fn move_onto(
        &mut self,
        layout: &Layout,
        floor: Position,
        next_acked: bool,
        batched: bool,
    ) -> Result<()> {
        let mark = self.mark_delete;
        self.mark_delete = Some(floor);
        // `absorb` forgets the partial acks of every entry it leaves behind mark-delete.
        let moved = if next_acked {
            self.absorb(layout)
        } else if batched {
            self.batch.remove(floor)
        } else {
            Ok(())
        };
        if moved.is_err() && self.mark_delete == Some(floor) {
            self.mark_delete = mark;
        }
        moved
    }

    /// Acknowledges the next `n` unacknowledged entries after mark-delete, stepping over the
    /// individually acknowledged ones (they do not count), so mark-delete moves to the last
    /// entry skipped. Fewer are skipped when fewer remain. Returns the number skipped.
    /// Visits every entry it steps over: O(n + acknowledged entries in between).
    pub(crate) fn skip(&mut self, layout: &Layout, n: u64) -> Result<u64> {
        let mut skipped = 0;
        let mut last = None;
        let mut next = layout.after_mark(self.mark_delete);
        while skipped < n {
            let Some(pos) = next else { break };
            if !self.acks.contains(pos)? {
                skipped += 1;
            }
            last = Some(pos);
            next = layout.after(pos);
        }
        if let Some(last) = last {
            self.cover(layout, last)?;
        }
        Ok(skipped)
    }

    /// Moves mark-delete to `pos` as [`Self::ack_cumulative`] does and replaces the properties
    /// with `properties`, both or neither: every check runs before anything changes.
    /// `room` is what a cursor-ledger entry leaves the properties (see [`check_property`]).
    /// Returns whether anything changed.
    pub(crate) fn mark_delete_with_properties(
        &mut self,
        layout: &Layout,
        pos: Position,
        properties: BTreeMap<String, i64>,
        room: usize,
    ) -> Result<bool> {
        let mut checked = BTreeMap::new();
        for (key, value) in properties {
            check_property(&checked, &key, room)?;
            checked.insert(key, value);
        }
        if let Some(m) = self.mark_delete
            && pos < m
        {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "mark-delete to {pos} is behind the mark-delete position {m}; nothing was \
                     changed"
                ),
            });
        }
        if self.mark_delete != Some(pos) && !layout.contains(pos) {
            return Err(refuse_missing(layout, pos, "mark-delete"));
        }
        let moved = self.ack_cumulative(layout, pos)?;
        let replaced = self.properties != checked;
        self.properties = checked;
        Ok(moved || replaced)
    }

    /// Moves only the read position (Pulsar's `seek(position)`): the next read starts at the
    /// first retained entry at or after `pos`, or after mark-delete when `pos` is at or before
    /// it. Acks, mark-delete and the epoch are kept.
    pub(crate) fn set_read_position(&mut self, pos: Position) {
        self.read_position = pos;
    }

    /// The first entry after mark-delete (never individually acknowledged: mark-delete absorbs
    /// those), `None` when every retained entry is acknowledged.
    pub(crate) fn first_unacked(&self, layout: &Layout) -> Option<Position> {
        layout.after_mark(self.mark_delete)
    }

    /// Unacknowledged retained entries in `from..=to` (entries at or before mark-delete are
    /// acknowledged). O(ledgers) plus at most two partition loads.
    pub(crate) fn unacked_between(
        &mut self,
        layout: &Layout,
        from: Position,
        to: Position,
    ) -> Result<u64> {
        let Some(floor) = layout.after_mark(self.mark_delete) else {
            return Ok(0);
        };
        let from = from.max(floor);
        if from > to {
            return Ok(0);
        }
        let entries = count_between(layout, from, to);
        Ok(entries.saturating_sub(self.acks.cardinality_between(from, to)?))
    }

    /// Whether a read would return an entry now: an unacknowledged entry at or after the read
    /// position.
    pub(crate) fn has_more(&mut self, layout: &Layout) -> Result<bool> {
        match (self.read_start(layout), layout.last_entry()) {
            (Some(from), Some(last)) => Ok(self.unacked_between(layout, from, last)? > 0),
            _ => Ok(false),
        }
    }

    /// Moves mark-delete over every acknowledged entry that directly follows it.
    fn absorb(&mut self, layout: &Layout) -> Result<()> {
        // The lowest ack first: it is told without a load when the store can read its
        // partition's bounds, and the first range is read only when it starts there.
        while self
            .acks
            .lowest()?
            .is_some_and(|low| Some(low) == layout.after_mark(self.mark_delete))
            && let Some((_, last)) = self.acks.first_range()?
        {
            // Dropped first: a failed load leaves mark-delete where it was, never past acks.
            self.acks.remove_at_most(last)?;
            self.mark_delete = Some(last);
        }
        if let Some(mark) = self.mark_delete {
            self.batch.remove_at_most(mark)?;
        }
        Ok(())
    }

    /// Whether `pos` is acknowledged (at or before mark-delete, or individually).
    pub(crate) fn is_acked(&mut self, pos: Position) -> Result<bool> {
        if self.mark_delete.is_some_and(|m| pos <= m) {
            return Ok(true);
        }
        self.acks.contains(pos)
    }

    /// Makes `target` the next entry to read (`None`: the next entry appended), with every
    /// entry before it acknowledged and none after it.
    pub(crate) fn reset_to(&mut self, layout: &Layout, target: Option<Position>) {
        self.mark_delete = mark_before(layout, target);
        self.read_position = target.unwrap_or_else(|| layout.end());
        self.acks.clear();
        self.batch.clear();
        self.known = None;
    }

    /// Reads again from the first entry after mark-delete.
    pub(crate) fn rewind(&mut self, layout: &Layout) {
        self.known = None;
        self.read_position = layout
            .after_mark(self.mark_delete)
            .unwrap_or_else(|| layout.end());
    }

    /// The first retained entry a read may return (acknowledged or not), if any.
    fn read_start(&self, layout: &Layout) -> Option<Position> {
        let from = layout.at_or_after(self.read_position)?;
        let floor = layout.after_mark(self.mark_delete)?;
        Some(from.max(floor))
    }

    /// The position the next read starts from: the next retained entry at or after the read
    /// position, or, when there is none yet, the end of the topic.
    pub(crate) fn read_position(&self, layout: &Layout) -> Position {
        self.read_start(layout)
            .unwrap_or_else(|| self.read_position.max(layout.end()))
    }

    /// Picks the next `max` unacknowledged entries to read and moves the read position past
    /// them.
    pub(crate) fn plan_read(&mut self, layout: &Layout, max: usize) -> Result<Vec<Position>> {
        let mut out = Vec::new();
        if max == 0 {
            return Ok(out);
        }
        let mut next = self.read_start(layout);
        while out.len() < max {
            let Some(pos) = next else { break };
            if !self.acks.contains(pos)? {
                out.push(pos);
            }
            next = layout.after(pos);
        }
        self.read_position = next.unwrap_or_else(|| layout.end());
        Ok(out)
    }

    /// Exact number of retained entries after mark-delete that are not acknowledged.
    /// O(ledgers), independent of the number of entries.
    pub(crate) fn backlog(&self, layout: &Layout) -> u64 {
        layout
            .count_after(self.mark_delete)
            .saturating_sub(self.acks.len())
    }
}

/// Checks that setting property `key` keeps `properties` within what every marker and snapshot
/// can carry: a name of at most [`MAX_PROPERTY_NAME`] bytes, at most [`MAX_PROPERTIES`]
/// properties, and encoded properties (name length u16, name, value i64 each) of at most `room`
/// bytes. Replacing the value of an existing property always fits.
pub(crate) fn check_property(
    properties: &BTreeMap<String, i64>,
    key: &str,
    room: usize,
) -> Result<()> {
    if key.len() > MAX_PROPERTY_NAME {
        return Err(Error::InvalidArgument {
            reason: format!(
                "a cursor property name may have at most {MAX_PROPERTY_NAME} bytes, not {}; \
             nothing was changed",
                key.len()
            ),
        });
    }
    if properties.contains_key(key) {
        return Ok(());
    }
    if properties.len() >= MAX_PROPERTIES {
        return Err(Error::LimitExceeded {
            reason: format!(
                "a cursor may carry at most {MAX_PROPERTIES} properties; remove one first \
             (nothing was changed)"
            ),
        });
    }
    let encoded = |k: &str| 2 + k.len() + 8;
    let total = properties.keys().map(|k| encoded(k)).sum::<usize>() + encoded(key);
    if total > room {
        return Err(Error::LimitExceeded {
            reason: format!(
                "the cursor's properties would take {total} bytes, more than the {room} bytes a \
             cursor-ledger entry leaves them; nothing was changed"
            ),
        });
    }
    Ok(())
}

/// The mark-delete of a cursor whose next read is `target` (`None`: the next entry appended).
pub(crate) fn mark_before(layout: &Layout, target: Option<Position>) -> Option<Position> {
    match target {
        Some(t) => layout.before(t),
        None => layout.last_entry(),
    }
}

/// What an individual ack of `pos`, not a retained entry, answers. A position before the first
/// retained entry (in a trimmed ledger, say) is at or before mark-delete whatever the cursor:
/// mark-delete is never before that entry's predecessor (`None` stands just before the entry,
/// Pulsar's `first-ledger:-1`), so it is an entry already acknowledged (`Ok(false)`), never a
/// missing one ([`Error::NoSuchEntry`]).
fn acked_before_retained(layout: &Layout, pos: Position) -> Result<bool> {
    if layout.before_first_entry(pos) {
        Ok(false)
    } else {
        Err(Error::NoSuchEntry(pos))
    }
}

/// The error for moving mark-delete (`what`) to `pos`, which is not a retained entry: behind
/// mark-delete when it lies before the first retained entry (see [`acked_before_retained`]),
/// missing otherwise.
fn refuse_missing(layout: &Layout, pos: Position, what: &str) -> Error {
    if layout.before_first_entry(pos) {
        Error::InvalidArgument {
            reason: format!(
                "{what} to {pos} is behind the mark-delete position (it is before the first \
                 retained entry); nothing was changed"
            ),
        }
    } else {
        Error::NoSuchEntry(pos)
    }
}

/// The entry a new cursor reads first (`None`: the next entry appended).
fn initial_target(layout: &Layout, options: CursorOptions) -> Option<Position> {
    match (options.initial_position, options.inclusive) {
        (InitialPosition::Earliest, _) => layout.first_entry(),
        (InitialPosition::Latest, false) => None,
        (InitialPosition::Latest, true) => layout.last_entry(),
        (InitialPosition::At(p), false) => layout.after(p),
        (InitialPosition::At(p), true) => layout.at_or_after(p),
    }
}

/// Retained entries in `from..=to`. O(ledgers).
fn count_between(layout: &Layout, from: Position, to: Position) -> u64 {
    if from > to {
        return 0;
    }
    let from_on = layout.count_after(layout.before(from));
    from_on.saturating_sub(layout.count_after(Some(to)))
}

/// The highest position below the retained entry `first` (`None` when nothing can be below).
fn layout_floor(first: Position) -> Option<Position> {
    match first.entry_id.checked_sub(1) {
        Some(e) => Some(Position::new(first.ledger_id, e)),
        None => first
            .ledger_id
            .checked_sub(1)
            .map(|l| Position::new(l, u64::MAX)),
    }
}

//! Where entries are: the retained data ledgers of a topic, and searches by message index and
//! by timestamp.
//!
//! Owns: [`Layout`], the in-memory summary of every retained data ledger (entry count, first
//! message index, first and last timestamp), with the position arithmetic every cursor operation
//! uses (the entry after or before a position, how many entries follow one), and the two
//! searches [`find_by_index`] and [`find_by_timestamp`]; and a topic's two views of its ledgers
//! (`Layouts`): every entry appended, and the readable prefix that cursors and searches see.
//!
//! A search picks the ledger from the summaries without any I/O, then bisects that ledger's
//! entries through [`EntryLog::read_meta`], which reads one frame header. A ledger of `n`
//! entries costs at most `ceil(log2 n)` header reads (the bound the design promises is
//! `ceil(log2 n) + 2`); each read is counted in [`crate::log::LogStats::header_reads`].
//!
//! Must never: write anything, or read a payload.

use std::collections::VecDeque;
use std::sync::RwLockReadGuard;

use crate::error::Result;
use crate::log::EntryLog;
use crate::position::Position;

/// Summary of one retained data ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerSpan {
    /// The ledger's id.
    pub id: u64,
    /// Entries it holds (entry ids `0..entries`).
    pub entries: u64,
    /// Message index of the first message of its first entry (for an empty ledger: the index
    /// its first message will get).
    pub first_index: u64,
    /// Timestamp of its first entry (for an empty ledger: the topic's last timestamp).
    pub first_timestamp: u64,
    /// Timestamp of its last entry.
    pub last_timestamp: u64,
}

impl LedgerSpan {
    /// Position of the ledger's last entry, if it has any.
    #[must_use]
    pub fn last_entry(&self) -> Option<Position> {
        self.entries
            .checked_sub(1)
            .map(|e| Position::new(self.id, e))
    }
}

/// The retained data ledgers of a topic, oldest first, and the next message index.
///
/// Ledger ids ascend but need not be consecutive (cursor ledgers share the id space, and
/// trimmed ledgers leave the front). Entry ids are dense within a ledger. Message indexes and
/// timestamps never decrease from one entry to the next, across ledgers too.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    spans: Vec<LedgerSpan>,
    next_index: u64,
    /// Every ledger of a lower id was trimmed (or never existed): 0 until a trim.
    trimmed_below: u64,
}

impl Layout {
    /// A layout of `spans` (ascending ids), whose last message has index `next_index - 1`.
    #[must_use]
    pub fn new(spans: Vec<LedgerSpan>, next_index: u64) -> Self {
        debug_assert!(spans.windows(2).all(|w| w[0].id < w[1].id));
        Self {
            spans,
            next_index,
            trimmed_below: 0,
        }
    }

    /// The retained ledgers, oldest first.
    #[must_use]
    pub fn spans(&self) -> &[LedgerSpan] {
        &self.spans
    }

    /// One past the index of the last message appended (`B` in `[A, B)`); 0 on a new topic.
    #[must_use]
    pub fn next_index(&self) -> u64 {
        self.next_index
    }

    /// Index of the first retained message (`A` in `[A, B)`); equals [`Self::next_index`] when
    /// no entry is retained.
    #[must_use]
    pub fn first_index(&self) -> u64 {
        self.spans
            .iter()
            .find(|s| s.entries > 0)
            .map_or(self.next_index, |s| s.first_index)
    }

    /// Total number of retained entries.
    #[must_use]
    pub fn entries(&self) -> u64 {
        self.spans.iter().map(|s| s.entries).sum()
    }

    /// The first retained entry.
    #[must_use]
    pub fn first_entry(&self) -> Option<Position> {
        self.spans
            .iter()
            .find(|s| s.entries > 0)
            .map(|s| Position::new(s.id, 0))
    }

    /// Whether `pos` lies before the first retained entry: in a ledger trimmed or that never
    /// existed before it, also while the ledgers after a trim hold no entry yet (or, in the
    /// readable view, no readable one).
    #[must_use]
    pub fn before_first_entry(&self, pos: Position) -> bool {
        pos.ledger_id < self.trimmed_below || self.first_entry().is_some_and(|first| pos < first)
    }

    /// The last entry.
    #[must_use]
    pub fn last_entry(&self) -> Option<Position> {
        self.spans.iter().rev().find_map(LedgerSpan::last_entry)
    }

    /// The position one past the last entry (`L:n` for a last ledger `L` of `n` entries), or
    /// `0:0` when nothing is retained. Every entry appended later is at or after it.
    #[must_use]
    pub fn end(&self) -> Position {
        self.last_entry().map_or(Position::default(), |p| {
            Position::new(p.ledger_id, p.entry_id + 1)
        })
    }

    /// The summary of ledger `id`, if retained.
    #[must_use]
    pub fn span(&self, id: u64) -> Option<&LedgerSpan> {
        self.spans
            .binary_search_by_key(&id, |s| s.id)
            .ok()
            .and_then(|i| self.spans.get(i))
    }

    /// Whether `pos` is a retained entry.
    #[must_use]
    pub fn contains(&self, pos: Position) -> bool {
        self.span(pos.ledger_id)
            .is_some_and(|s| pos.entry_id < s.entries)
    }

    /// The first retained entry at or after `pos`.
    #[must_use]
    pub fn at_or_after(&self, pos: Position) -> Option<Position> {
        let from = self.spans.partition_point(|s| s.id < pos.ledger_id);
        self.spans.get(from..)?.iter().find_map(|s| {
            if s.id == pos.ledger_id {
                (pos.entry_id < s.entries).then_some(pos)
            } else {
                (s.entries > 0).then(|| Position::new(s.id, 0))
            }
        })
    }

    /// The first retained entry after `pos`.
    #[must_use]
    pub fn after(&self, pos: Position) -> Option<Position> {
        match pos.entry_id.checked_add(1) {
            Some(e) => self.at_or_after(Position::new(pos.ledger_id, e)),
            None => pos
                .ledger_id
                .checked_add(1)
                .and_then(|l| self.at_or_after(Position::new(l, 0))),
        }
    }

    /// The first retained entry after a mark-delete position (`None`: before every entry).
    #[must_use]
    pub fn after_mark(&self, mark: Option<Position>) -> Option<Position> {
        match mark {
            Some(m) => self.after(m),
            None => self.first_entry(),
        }
    }

    /// The last retained entry before `pos`.
    #[must_use]
    pub fn before(&self, pos: Position) -> Option<Position> {
        let upto = self.spans.partition_point(|s| s.id <= pos.ledger_id);
        self.spans.get(..upto)?.iter().rev().find_map(|s| {
            if s.id == pos.ledger_id {
                let below = pos.entry_id.min(s.entries);
                below.checked_sub(1).map(|e| Position::new(s.id, e))
            } else {
                s.last_entry()
            }
        })
    }

    /// Number of retained entries after a mark-delete position (`None`: all of them).
    /// O(ledgers).
    #[must_use]
    pub fn count_after(&self, mark: Option<Position>) -> u64 {
        let Some(m) = mark else {
            return self.entries();
        };
        let from = self.spans.partition_point(|s| s.id < m.ledger_id);
        self.spans
            .get(from..)
            .unwrap_or_default()
            .iter()
            .map(|s| {
                if s.id == m.ledger_id {
                    s.entries.saturating_sub(m.entry_id.saturating_add(1))
                } else {
                    s.entries
                }
            })
            .sum()
    }

    pub fn spans_mut(&mut self) -> &mut Vec<LedgerSpan> {
        &mut self.spans
    }

    pub fn set_next_index(&mut self, next_index: u64) {
        self.next_index = next_index;
    }

    /// The retained non-empty ledger a search must look in: the last one whose `key` is at
    /// most `bound` (keys never decrease along the layout).
    fn last_span_with(&self, bound: u64, key: impl Fn(&LedgerSpan) -> u64) -> Option<LedgerSpan> {
        let upto = self.spans.partition_point(|s| key(s) <= bound);
        self.spans
            .get(..upto)?
            .iter()
            .rev()
            .find(|s| s.entries > 0)
            .copied()
    }
}

/// A topic's two views of its retained data ledgers, under one lock: every entry appended
/// (what appends, rollovers, seals and trimming work on), and the readable prefix of it (what
/// every cursor, `ManagedLedger::read`, `last_position` and the searches see).
///
/// Invariant: the readable layout is a prefix of the appended one: its ledgers are the
/// appended ledgers up to some ledger `L` (all but `L` whole), and it ends at the readable end.
/// By default that end only moves to an entry a finished fsync covered (a sync, or the seal of
/// its ledger), so no reader ever receives an entry a crash can take away (as
/// `BookKeeper`'s last-add-confirmed); a topic that reads unsynced entries keeps a single layout.
#[derive(Debug)]
pub struct Layouts {
    appended: Layout,
    /// `None` when unsynced entries are readable: readers see `appended`.
    readable: Option<Layout>,
    /// Entries appended but not readable yet, oldest first (empty when `readable` is `None`).
    pub pending: VecDeque<Pending>,
}

/// An appended entry that is not readable yet: what the readable layout needs to end at it.
#[derive(Debug, Clone, Copy)]
pub struct Pending {
    position: Position,
    index: u64,
    timestamp: u64,
}

impl Layouts {
    /// Views of `layout`, every entry of which is durable (what open found); with
    /// `read_unsynced`, every entry appended later is readable at once.
    #[must_use]
    pub fn new(layout: Layout, read_unsynced: bool) -> Self {
        Self {
            readable: (!read_unsynced).then(|| layout.clone()),
            appended: layout,
            pending: VecDeque::new(),
        }
    }

    /// Every entry appended.
    pub(crate) fn appended(&self) -> &Layout {
        &self.appended
    }

    /// Every entry appended, for an append or a new ledger (then [`Self::appended_entry`]).
    pub fn appended_mut(&mut self) -> &mut Layout {
        &mut self.appended
    }

    /// What readers see.
    #[must_use]
    pub fn readable(&self) -> &Layout {
        self.readable.as_ref().unwrap_or(&self.appended)
    }

    /// Records the entry just appended at `position` (message `index`, `timestamp`); returns
    /// whether it is readable at once (the topic reads unsynced entries).
    pub fn appended_entry(&mut self, position: Position, index: u64, timestamp: u64) -> bool {
        if self.readable.is_none() {
            return true;
        }
        self.pending.push_back(Pending {
            position,
            index,
            timestamp,
        });
        false
    }

    /// Makes readable every appended entry of the ledgers before `ledger` (sealed, so durable)
    /// and its first `synced` entries; returns whether the readable end moved.
    pub fn reveal(&mut self, ledger: u64, synced: u64) -> bool {
        let Some(readable) = self.readable.as_mut() else {
            return false;
        };
        let mut last = None;
        while let Some(p) = self.pending.front().copied() {
            let durable = p.position.ledger_id < ledger
                || (p.position.ledger_id == ledger && p.position.entry_id < synced);
            if !durable {
                break;
            }
            last = self.pending.pop_front();
        }
        let Some(last) = last else {
            return false;
        };
        if self.pending.is_empty() {
            // Nothing pending holds no memory: a store keeps many topics open, most of them
            // idle between syncs (the deque grows again with the next appends, amortised O(1)).
            self.pending = VecDeque::new();
        }
        let spans = self.appended.spans();
        let Ok(upto) = spans.binary_search_by_key(&last.position.ledger_id, |s| s.id) else {
            // Trimming never passes the readable end, so the ledger is retained.
            return false;
        };
        // The readable ledgers are a prefix of the appended ones; the last may be partial.
        let whole = readable.spans.len().saturating_sub(1).min(upto);
        readable.spans.truncate(whole);
        readable
            .spans
            .extend(spans.get(whole..=upto).unwrap_or_default().iter().copied());
        if let Some(span) = readable.spans.last_mut() {
            span.entries = last.position.entry_id + 1;
            span.last_timestamp = last.timestamp;
        }
        readable.next_index = last.index + 1;
        true
    }

    /// Drops the trimmed ledgers `trimmed` (the oldest appended ones) from both views.
    /// Both remember that every ledger up to the last trimmed one is gone: the readable view
    /// may be left with no entry (the ledgers kept hold only entries not synced yet).
    pub(crate) fn trim(&mut self, trimmed: &[u64]) {
        let below = trimmed.iter().max().map_or(0, |id| id.saturating_add(1));
        for layout in std::iter::once(&mut self.appended).chain(self.readable.as_mut()) {
            layout.spans.retain(|s| !trimmed.contains(&s.id));
            layout.trimmed_below = layout.trimmed_below.max(below);
        }
    }
}

/// A read lock on a topic's [`Layouts`] that shows its readable layout: what a cursor holds
/// while it reads, acks or moves (a trim waits for it).
pub(crate) struct ReadableLayout<'a>(RwLockReadGuard<'a, Layouts>);

impl<'a> ReadableLayout<'a> {
    /// The readable layout of the locked `layouts`.
    pub(crate) fn new(layouts: RwLockReadGuard<'a, Layouts>) -> Self {
        Self(layouts)
    }
}

impl std::ops::Deref for ReadableLayout<'_> {
    type Target = Layout;

    fn deref(&self) -> &Layout {
        self.0.readable()
    }
}

/// The first entry whose message index is at least `index`: the entry holding message `index`
/// when it is retained, the first retained entry when `index` is older, and `None` when no
/// message with that index has been appended yet (`index >= B`).
///
/// Reads at most `ceil(log2 n)` frame headers, `n` the entry count of the ledger holding it.
pub fn find_by_index(log: &EntryLog, layout: &Layout, index: u64) -> Result<Option<Position>> {
    if index >= layout.next_index() {
        return Ok(None);
    }
    let Some(span) = layout.last_span_with(index, |s| s.first_index) else {
        // Older than every retained message.
        return Ok(layout.first_entry());
    };
    // The ledger's last entry holds an index >= `index`: either the next non-empty ledger
    // starts above `index`, or this is the last ledger and `index < next_index`.
    let (mut lo, mut hi) = (0, span.entries - 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if log.read_meta(span.id, mid)?.index >= index {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Ok(Some(Position::new(span.id, lo)))
}

/// The last entry whose timestamp is at most `timestamp`, or `None` when every retained entry
/// is younger (or none is retained). Among equal timestamps, the last such entry.
///
/// Reads at most `ceil(log2 n)` frame headers, `n` the entry count of the ledger holding it,
/// and none when the answer is a ledger's last entry.
pub fn find_by_timestamp(
    log: &EntryLog,
    layout: &Layout,
    timestamp: u64,
) -> Result<Option<Position>> {
    let Some(span) = layout.last_span_with(timestamp, |s| s.first_timestamp) else {
        return Ok(None);
    };
    if span.last_timestamp <= timestamp {
        return Ok(span.last_entry());
    }
    // Entry 0 qualifies (its timestamp is the ledger's first), the last entry does not.
    let (mut lo, mut hi) = (0, span.entries - 1);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if log.read_meta(span.id, mid)?.timestamp <= timestamp {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(Some(Position::new(span.id, lo)))
}

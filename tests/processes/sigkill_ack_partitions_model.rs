//! The model of `sigkill_ack_partitions`: a topic's entries, and a cursor's acknowledged state
//! as roaring bitmaps by ledger, with the checks of a recovered cursor against it.

use std::collections::BTreeMap;

use ackstore::{Cursor, ManagedLedger, Position};
use roaring::RoaringBitmap;

use crate::support;
use support::workload::{before, first_missing};

/// An entry id as the model's bitmaps hold it (the ledgers here have fewer than 2^32 entries).
fn id32(entry_id: u64) -> u32 {
    u32::try_from(entry_id).expect("entry ids of these ledgers fit 32 bits")
}

/// The entries of a topic: each data ledger's are `0..count`, the ledgers in order; the first
/// `synced` of them, in that order, are readable.
#[derive(Debug, Clone, Default)]
pub(super) struct Entries {
    pub(super) ledgers: Vec<(u64, u64)>,
    pub(super) synced: u64,
}

impl Entries {
    /// What `topic` holds, readable up to its last readable entry.
    pub(super) fn of(topic: &ManagedLedger) -> Self {
        let mut entries = Self {
            ledgers: topic
                .ledgers()
                .iter()
                .filter(|span| span.entries > 0)
                .map(|span| (span.id, span.entries))
                .collect(),
            synced: 0,
        };
        entries.synced = entries.through(topic.last_position());
        entries
    }

    pub(super) fn len(&self) -> u64 {
        self.ledgers.iter().map(|(_, n)| n).sum()
    }

    /// The entries of ledger `ledger_id`.
    pub(super) fn count(&self, ledger_id: u64) -> u64 {
        self.ledgers
            .iter()
            .find(|(l, _)| *l == ledger_id)
            .map_or(0, |(_, n)| *n)
    }

    /// An entry appended (to the last ledger, or as the first of a new one).
    pub(super) fn appended(&mut self, p: Position) {
        match self.ledgers.last_mut() {
            Some((l, n)) if *l == p.ledger_id => *n = (*n).max(p.entry_id + 1),
            _ => self.ledgers.push((p.ledger_id, p.entry_id + 1)),
        }
    }

    /// The entry at `index`, in order.
    pub(super) fn position(&self, index: u64) -> Position {
        let mut i = index;
        for &(l, n) in &self.ledgers {
            if i < n {
                return Position::new(l, i);
            }
            i -= n;
        }
        panic!("entry {index} of a topic of {} entries", self.len())
    }

    /// How many entries are at or before `mark`: the index of the first one after it.
    pub(super) fn through(&self, mark: Option<Position>) -> u64 {
        let Some(m) = mark else { return 0 };
        self.ledgers
            .iter()
            .map(|&(l, n)| match l.cmp(&m.ledger_id) {
                std::cmp::Ordering::Less => n,
                std::cmp::Ordering::Equal => n.min(m.entry_id.saturating_add(1)),
                std::cmp::Ordering::Greater => 0,
            })
            .sum()
    }

    /// The first `upto` entries, by ledger: (ledger, entries), ledgers with none left out.
    pub(super) fn prefix(&self, upto: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut left = upto;
        self.ledgers
            .iter()
            .map(move |&(l, n)| {
                let k = n.min(left);
                left -= k;
                (l, k)
            })
            .filter(|(_, k)| *k > 0)
    }
}

/// A cursor's acknowledged state as the model keeps it: every entry at or before `mark`, the
/// entries of `set` (entry ids by ledger), and the messages of `partial` (batch size and
/// acknowledged messages of entries not acknowledged whole).
#[derive(Debug, Clone, Default)]
pub(super) struct Acks {
    pub(super) mark: Option<Position>,
    pub(super) set: BTreeMap<u64, RoaringBitmap>,
    pub(super) partial: BTreeMap<Position, (u32, RoaringBitmap)>,
}

impl Acks {
    /// Every entry up to `mark`, nothing after it: the state a seek leaves.
    pub(super) fn reset(mark: Option<Position>) -> Self {
        Self {
            mark,
            ..Self::default()
        }
    }

    fn holds(&self, p: Position) -> bool {
        self.mark.is_some_and(|m| p <= m)
            || self
                .set
                .get(&p.ledger_id)
                .is_some_and(|b| b.contains(id32(p.entry_id)))
    }

    pub(super) fn ack(&mut self, p: Position) {
        self.set
            .entry(p.ledger_id)
            .or_default()
            .insert(id32(p.entry_id));
        self.partial.remove(&p);
    }

    pub(super) fn ack_through(&mut self, p: Position) {
        self.mark = self.mark.max(Some(p));
        self.partial.retain(|q, _| *q > p);
    }

    /// Message `i` of the entry at `p`, of `size` messages; the last one acks the entry.
    pub(super) fn ack_message(&mut self, p: Position, i: u32, size: u32) {
        if self.holds(p) {
            return;
        }
        let (_, acked) = self
            .partial
            .entry(p)
            .or_insert_with(|| (size, RoaringBitmap::new()));
        acked.insert(i);
        if acked.len() >= u64::from(size) {
            self.ack(p);
        }
    }

    /// Adds what `other` holds (which has no partial entry).
    pub(super) fn extend(&mut self, other: &Acks) {
        debug_assert!(other.partial.is_empty());
        self.mark = self.mark.max(other.mark);
        for (l, b) in &other.set {
            *self.set.entry(*l).or_default() |= b;
        }
        if let Some(m) = self.mark {
            self.partial.retain(|q, _| *q > m);
        }
    }

    /// What both this and the reset to just before `target` hold: what a seek to `target` cut
    /// by the kill must keep, whichever side of it the kill landed.
    pub(super) fn meet_reset(&self, target: Position) -> Self {
        let mark = before(target);
        let mut set = BTreeMap::new();
        if let Some(m) = mark {
            for (&l, b) in self.set.range(..=m.ledger_id) {
                let mut b = b.clone();
                if l == m.ledger_id && m.entry_id < u64::from(u32::MAX) {
                    b.remove_range(id32(m.entry_id) + 1..);
                }
                set.insert(l, b);
            }
        }
        Self {
            mark: self.mark.min(mark),
            set,
            partial: self
                .partial
                .iter()
                .filter(|(p, _)| **p < target)
                .map(|(p, e)| (*p, e.clone()))
                .collect(),
        }
    }

    /// The entries of `entries` this holds whole, by ledger.
    fn whole(&self, entries: &Entries) -> BTreeMap<u64, RoaringBitmap> {
        entries
            .ledgers
            .iter()
            .map(|&(l, n)| {
                let mut b = self.set.get(&l).cloned().unwrap_or_default();
                b.remove_range(id32(n)..);
                let through = match self.mark {
                    Some(m) if l < m.ledger_id => n,
                    Some(m) if l == m.ledger_id => n.min(m.entry_id.saturating_add(1)),
                    _ => 0,
                };
                b.insert_range(0..id32(through));
                (l, b)
            })
            .collect()
    }
}

/// What the log says about one cursor.
#[derive(Debug, Default)]
pub(super) struct Model {
    /// Everything the log shows acknowledged: nothing outside it may be recovered.
    pub(super) truth: Acks,
    /// What the last `F`, or the last seek that returned, committed: present after the kill.
    pub(super) committed: Acks,
    /// A seek logged and not seen returning: its target.
    pub(super) seeking: Option<Position>,
}

/// Whether `whole` (by ledger) holds the entry at `p`.
fn whole_holds(whole: &BTreeMap<u64, RoaringBitmap>, p: Position) -> bool {
    whole
        .get(&p.ledger_id)
        .is_some_and(|b| b.contains(id32(p.entry_id)))
}

/// What `cursor` holds, checked: mark-delete and every acked entry are entries of `entries`;
/// each partial entry is one of them, with some messages acknowledged and some not, not
/// acknowledged whole, answered alike by `is_batch_index_acked`, and there are as many as
/// `CursorStats::partial_entries` counts.
pub(super) fn recovered(cursor: &Cursor, entries: &Entries) -> Result<Acks, String> {
    let e = |e: ackstore::Error| e.to_string();
    let mut acks = Acks::reset(cursor.mark_delete_position().map_err(e)?);
    for (from, to) in cursor.acked_ranges().map_err(e)? {
        acks.set
            .entry(from.ledger_id)
            .or_default()
            .insert_range(id32(from.entry_id)..=id32(to.entry_id));
    }
    if let Some(m) = acks.mark
        && entries.count(m.ledger_id) <= m.entry_id
    {
        return Err(format!("mark-delete {m} is no entry"));
    }
    for (l, b) in &acks.set {
        if let Some(last) = b.max().map(u64::from)
            && entries.count(*l) <= last
        {
            return Err(format!(
                "{l}:{last} is acked and is no entry the log appended (invariant 1)"
            ));
        }
    }
    let whole = acks.whole(entries);
    for partition in cursor.batch_index_partitions().map_err(e)? {
        for entry in partition.entries {
            let p = Position::new(partition.ledger_id, entry.entry_id);
            let size = entry.batch_size;
            if entry.acked.is_empty()
                || entry.acked.len() >= u64::from(size)
                || entry.acked.max().is_some_and(|i| i >= size)
                || whole_holds(&whole, p)
                || entries.count(p.ledger_id) <= p.entry_id
            {
                return Err(format!(
                    "{p} (of {size} messages, {:?} acked) is no partial entry: it is acked \
                     whole, no entry, or its messages are all or none",
                    entry.acked
                ));
            }
            for i in 0..size {
                let answered = cursor.is_batch_index_acked(p, i).map_err(e)?;
                if answered != entry.acked.contains(i) {
                    return Err(format!(
                        "is_batch_index_acked({p}, {i}) answers {answered}, the partial \
                         entries say otherwise"
                    ));
                }
            }
            acks.partial.insert(p, (size, entry.acked));
        }
    }
    let counted = cursor.stats().map_err(e)?.partial_entries;
    if counted != acks.partial.len() as u64 {
        return Err(format!(
            "stats count {counted} partial entries, the cursor lists {}",
            acks.partial.len()
        ));
    }
    Ok(acks)
}

/// Checks what a cursor recovered, `got`, against the model `m` over `entries`.
pub(super) fn check_against(got: &Acks, m: &Model, entries: &Entries) -> Result<(), String> {
    let held = got.whole(entries);
    let truth = m.truth.whole(entries);
    if let Some(p) = first_missing(&held, &truth) {
        return Err(format!(
            "{p} is acked but the log never acked it, nor all its messages (invariant 1)"
        ));
    }
    for (p, (size, acked)) in &got.partial {
        if whole_holds(&truth, *p) {
            continue;
        }
        match m.truth.partial.get(p) {
            Some((logged, _)) if logged != size => {
                return Err(format!(
                    "{p} is a partial entry of {size} messages; the log acked it as {logged}"
                ));
            }
            Some((_, logged)) if acked.is_subset(logged) => {}
            _ => {
                return Err(format!(
                    "messages {acked:?} of {p} are acked but the log never acked them all \
                     (invariant 1)"
                ));
            }
        }
    }
    let committed = m.committed.whole(entries);
    if let Some(p) = first_missing(&committed, &held) {
        return Err(format!(
            "{p} was acked before an Ok flush, close or seek and is lost (invariant 2)"
        ));
    }
    for (p, (_, acked)) in &m.committed.partial {
        if whole_holds(&held, *p) {
            continue;
        }
        let kept = got
            .partial
            .get(p)
            .map(|(_, k)| k.clone())
            .unwrap_or_default();
        let lost = acked - &kept;
        if !lost.is_empty() {
            return Err(format!(
                "messages {lost:?} of {p} were acked before an Ok flush, close or seek and \
                 are lost (invariant 2)"
            ));
        }
    }
    Ok(())
}

//! Shared by the stress and process-kill tests: a seeded random source and the model of one
//! cursor's acknowledged set (a mark-delete bound plus individual acks, and the messages of batches
//! acknowledged one by one), and the same over entry numbers (indexes into a topic's positions).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{SystemTime, UNIX_EPOCH};

use ackstore::Position;
use roaring::RoaringBitmap;

/// splitmix64: small, seedable, good enough to pick operations.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A source that repeats for the same seed.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// An index into a slice of `len > 0` items.
    pub fn index(&mut self, len: usize) -> usize {
        usize::try_from(self.below(len as u64)).expect("fits")
    }

    /// A copy of one of `items`, or `None` when there is none.
    pub fn pick<T: Clone>(&mut self, items: &[T]) -> Option<T> {
        (!items.is_empty()).then(|| items[self.index(items.len())].clone())
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The seed from environment variable `var`, or a fresh one from the clock. Tests print it on
/// failure so a run can be repeated.
pub fn seed_from_env(var: &str) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("after 1970")
                .as_nanos();
            u64::try_from(nanos % u128::from(u64::MAX)).expect("fits")
        })
}

/// The greatest position before `p`: a reset to `p` acknowledges everything up to it.
pub fn before(p: Position) -> Option<Position> {
    if p.entry_id > 0 {
        Some(Position {
            ledger_id: p.ledger_id,
            entry_id: p.entry_id - 1,
        })
    } else {
        p.ledger_id.checked_sub(1).map(|ledger_id| Position {
            ledger_id,
            entry_id: u64::MAX,
        })
    }
}

/// The first entry `a` holds and `b` does not, comparing two sets of entries kept by ledger.
///
/// Each ledger's bits are first checked as a subset (a search of `b` per run of `a`): roaring's
/// difference of two run-compressed sets removes `b`'s runs from `a` one at a time, moving the
/// rest of `a` each time, which is quadratic in the runs of sets of thousands of holes. The
/// difference is computed only for a ledger that is not a subset, to name its first entry.
pub fn first_missing(
    a: &BTreeMap<u64, RoaringBitmap>,
    b: &BTreeMap<u64, RoaringBitmap>,
) -> Option<Position> {
    let empty = RoaringBitmap::new();
    a.iter().find_map(|(&ledger_id, bits)| {
        let other = b.get(&ledger_id).unwrap_or(&empty);
        if bits.is_subset(other) {
            return None;
        }
        let missing = bits - other;
        missing
            .min()
            .map(|e| Position::new(ledger_id, u64::from(e)))
    })
}

/// What `cursor` holds acknowledged over `ledgers` (of `per_ledger` entries each, below 2^32):
/// the entries up to its mark-delete and those of its acked ranges, by ledger (a ledger with
/// none left out). A range that spans ledgers or passes `per_ledger` is an error.
///
/// Each ledger's entries are set in a plain bit array and read into the bitmap at once: the
/// ranges of a ledger of thousands of holes, inserted one by one, cost the tests (built
/// unoptimised, with roaring's generic insert) more than the store they check.
pub fn held_by_ledger(
    cursor: &ackstore::Cursor,
    ledgers: &[u64],
    per_ledger: u64,
) -> Result<BTreeMap<u64, RoaringBitmap>, String> {
    let e = |e: ackstore::Error| e.to_string();
    let words = usize::try_from(per_ledger.div_ceil(64)).expect("a ledger's bits fit memory");
    let mut bits: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut set = |ledger: u64, from: u64, through: u64| {
        let words = bits.entry(ledger).or_insert_with(|| vec![0; words]);
        // A word at a time: the entries from `entry` to the last of its word or `through`.
        let mut entry = from;
        while entry <= through {
            let last = through.min(entry | 63);
            let n = last - entry + 1;
            let ones = if n == 64 { u64::MAX } else { (1 << n) - 1 };
            words[(entry / 64) as usize] |= ones << (entry % 64);
            entry = last + 1;
        }
    };
    if let Some(m) = cursor.mark_delete_position().map_err(e)? {
        for &l in ledgers.iter().filter(|&&l| l <= m.ledger_id) {
            let through = if l < m.ledger_id {
                per_ledger
            } else {
                (m.entry_id + 1).min(per_ledger)
            };
            if through > 0 {
                set(l, 0, through - 1);
            }
        }
    }
    for (from, to) in cursor.acked_ranges().map_err(e)? {
        if from.ledger_id != to.ledger_id
            || from.entry_id > to.entry_id
            || to.entry_id >= per_ledger
        {
            return Err(format!("acked range {from}..={to} is no range of entries"));
        }
        set(from.ledger_id, from.entry_id, to.entry_id);
    }
    Ok(bits
        .into_iter()
        .map(|(ledger, words)| {
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            (ledger, RoaringBitmap::from_lsb0_bytes(0, &bytes))
        })
        .filter(|(_, bitmap)| !bitmap.is_empty())
        .collect())
}

/// A cursor's acknowledged set read back as an [`Acked`] (mark-delete plus every entry of every
/// acked range; ranges never span ledgers).
pub fn actual(cursor: &ackstore::Cursor) -> ackstore::Result<Acked> {
    let mut acked = Acked::reset(cursor.mark_delete_position()?);
    for (from, to) in cursor.acked_ranges()? {
        for entry_id in from.entry_id..=to.entry_id {
            acked.ack(Position {
                ledger_id: from.ledger_id,
                entry_id,
            });
        }
    }
    Ok(acked)
}

/// A set of acknowledged positions: every position at or before `mark` (when set), plus `set`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acked {
    /// Every position at or before it is acknowledged.
    pub mark: Option<Position>,
    /// Individually acknowledged positions (some may lie at or before `mark`).
    pub set: BTreeSet<Position>,
}

impl Acked {
    /// Whether `p` is in the set.
    pub fn contains(&self, p: Position) -> bool {
        self.mark.is_some_and(|m| p <= m) || self.set.contains(&p)
    }

    /// Adds one position.
    pub fn ack(&mut self, p: Position) {
        self.set.insert(p);
    }

    /// Acknowledges on `cursor` one of `unacked` (chosen by `rng`; none when it is empty) and
    /// adds it here once the ack answered `Ok`.
    pub fn ack_one_of(&mut self, rng: &mut Rng, unacked: &[Position], cursor: &ackstore::Cursor) {
        if !unacked.is_empty() {
            let p = unacked[rng.index(unacked.len())];
            cursor.ack(p).expect("ack");
            self.ack(p);
        }
    }

    /// Adds every position up to and including `p`.
    pub fn ack_through(&mut self, p: Position) {
        self.mark = self.mark.max(Some(p));
    }

    /// Adds everything `other` holds.
    pub fn extend(&mut self, other: &Acked) {
        self.mark = self.mark.max(other.mark);
        self.set.extend(other.set.iter().copied());
    }

    /// What both `self` and a reset to `mark` hold: the positions a crash in the middle of that
    /// reset must keep, whichever side of it the crash lands.
    pub fn meet_reset(&self, mark: Option<Position>) -> Self {
        Self {
            mark: self.mark.min(mark),
            set: self
                .set
                .iter()
                .copied()
                .filter(|&p| mark.is_some_and(|m| p <= m))
                .collect(),
        }
    }

    /// The state a reset leaves: every position up to `mark` and nothing after it.
    pub fn reset(mark: Option<Position>) -> Self {
        Self {
            mark,
            set: BTreeSet::new(),
        }
    }
}

/// Messages acknowledged one by one (batch-index acks), by entry: what a cursor holds beyond the
/// whole entries of an [`Acked`] beside it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Messages(pub BTreeMap<Position, BTreeSet<u32>>);

impl Messages {
    /// Adds message `i` of the entry at `p`.
    pub fn ack(&mut self, p: Position, i: u32) {
        self.0.entry(p).or_default().insert(i);
    }

    /// Adds everything `other` holds.
    pub fn extend(&mut self, other: &Messages) {
        for (&p, indexes) in &other.0 {
            self.0.entry(p).or_default().extend(indexes);
        }
    }

    /// Whether message `i` of the entry at `p` is acknowledged, here or as a whole entry of
    /// `whole`.
    pub fn holds(&self, whole: &Acked, p: Position, i: u32) -> bool {
        whole.contains(p) || self.0.get(&p).is_some_and(|s| s.contains(&i))
    }

    /// Whether the entry at `p`, of `size` messages, is acknowledged: whole in `whole`, or
    /// every one of its messages here.
    pub fn holds_entry(&self, whole: &Acked, p: Position, size: u32) -> bool {
        whole.contains(p) || self.0.get(&p).is_some_and(|s| s.len() == size as usize)
    }

    /// What a reset to `target` keeps on both sides of it: the messages of entries before it.
    pub fn meet_reset(&self, target: Position) -> Self {
        Self(
            self.0
                .iter()
                .filter(|(p, _)| **p < target)
                .map(|(p, s)| (*p, s.clone()))
                .collect(),
        )
    }
}

/// The messages `cursor` acknowledges one by one among `entries` (each with its number of
/// messages), entries it acknowledges whole left out.
pub fn actual_messages(
    cursor: &ackstore::Cursor,
    entries: impl IntoIterator<Item = (Position, u32)>,
) -> ackstore::Result<Messages> {
    let mut out = Messages::default();
    for (p, size) in entries {
        if cursor.is_acked(p)? {
            continue;
        }
        for i in 0..size {
            if cursor.is_batch_index_acked(p, i)? {
                out.ack(p, i);
            }
        }
    }
    Ok(out)
}

/// Every ack a crash workload made, per cursor, and those a flush that returned `Ok` covers:
/// after any crash each cursor must answer a set between the two (never more acked than the
/// truth; flushed means kept).
#[derive(Debug, Clone)]
pub struct MadeAndFlushed {
    /// Every ack made, per cursor.
    pub made: Vec<BTreeSet<Position>>,
    /// The acks a flush that returned `Ok` covers, per cursor.
    pub flushed: Vec<BTreeSet<Position>>,
}

impl MadeAndFlushed {
    /// Cursors whose acks `durable` were made and flushed before the workload.
    pub fn new(durable: Vec<BTreeSet<Position>>) -> Self {
        Self {
            made: durable.clone(),
            flushed: durable,
        }
    }

    /// Panics (naming `what`) unless every cursor's `answered` set lies between what it flushed
    /// and what it made.
    pub fn check(&self, answered: &[BTreeSet<Position>], what: &str) {
        for (c, answered) in answered.iter().enumerate() {
            assert!(
                answered.is_subset(&self.made[c]),
                "{what}: cursor {c} answers acks never made: {:?}",
                answered.difference(&self.made[c]).collect::<Vec<_>>()
            );
            assert!(
                answered.is_superset(&self.flushed[c]),
                "{what}: cursor {c} lost flushed acks: {:?}",
                self.flushed[c].difference(answered).collect::<Vec<_>>()
            );
        }
    }
}

/// A cursor's acknowledged entries as indexes into the topic's positions: every entry up to
/// `mark`, and `acked`, all after it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EntryModel {
    /// Every entry up to it is acknowledged.
    pub mark: Option<usize>,
    /// Entries acknowledged individually, all after `mark`.
    pub acked: BTreeSet<usize>,
}

impl EntryModel {
    /// The entry right after mark-delete.
    pub fn floor(&self) -> usize {
        self.mark.map_or(0, |m| m + 1)
    }

    /// Whether entry `i` is acknowledged.
    pub fn contains(&self, i: usize) -> bool {
        self.mark.is_some_and(|m| i <= m) || self.acked.contains(&i)
    }

    /// Mark-delete absorbs the acknowledged entries that follow it.
    pub fn absorb(&mut self) {
        while self.acked.remove(&self.floor()) {
            self.mark = Some(self.floor());
        }
    }

    /// `ack(i)`: whether it was newly acknowledged.
    pub fn ack(&mut self, i: usize) -> bool {
        self.ack_many(&[i]) == 1
    }

    /// `ack_cumulative(i)`: whether anything changed.
    pub fn ack_cumulative(&mut self, i: usize) -> bool {
        if self.mark.is_some_and(|m| i <= m) {
            return false;
        }
        self.mark = Some(i);
        self.acked.retain(|&a| a > i);
        self.absorb();
        true
    }

    /// `ack_many` of `group`: the number of entries newly acknowledged.
    pub fn ack_many(&mut self, group: &[usize]) -> u64 {
        let mut added = 0;
        for &i in group {
            if !self.contains(i) {
                self.acked.insert(i);
                added += 1;
            }
        }
        self.absorb();
        added
    }

    /// Every entry of `self` is in `other`.
    pub fn within(&self, other: &EntryModel) -> bool {
        self.mark <= other.mark && self.acked.iter().all(|&i| other.contains(i))
    }

    /// What `cursor` holds, over the topic's positions `ps` (in order).
    pub fn of(cursor: &ackstore::Cursor, ps: &[Position]) -> EntryModel {
        let index = |p: Position| ps.binary_search(&p).expect("a position of the topic");
        let mut model = EntryModel {
            mark: cursor.mark_delete_position().unwrap().map(index),
            acked: BTreeSet::new(),
        };
        for (from, to) in cursor.acked_ranges().unwrap() {
            let first = index(from);
            let len = usize::try_from(to.entry_id - from.entry_id).unwrap() + 1;
            model.acked.extend(first..first + len);
        }
        model
    }
}

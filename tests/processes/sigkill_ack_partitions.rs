//! Process kill on a store whose cursors share a tiny ack budget, where `sigkill_ack_many` does
//! not reach: data ledgers of several ack partitions each (a partition is 65,536 entries of one
//! ledger, `ackstore::internals::ackset::PartitionKey`), and batch-index acks. The store, its
//! three topics of three cursors, the 4 KiB budget they share, the flusher pool and the two
//! threads of the child (each acking on topics of its own) are that test's (`open` there);
//! the kill loop is `sigkill_child`'s.
//!
//! - Ledgers of 140,000 entries, three partitions each (65,536, 65,536 and 8,928 entries), two
//!   a topic (and the small ledgers the children append to: each open of a topic starts a
//!   ledger): `ack_many` groups within one ledger (which `add_many` orders by partition) and
//!   across ledgers, with positions next to the boundaries 65,535 / 65,536 / 131,071 / 131,072
//!   and a ledger's ends; seeks that leave mark-delete up to 4 entries before such a boundary
//!   (on the entry before it, so that the entry after mark-delete is the first of a partition,
//!   one time in four), then a cumulative ack across it, an `ack_many` of every entry from the
//!   one after mark-delete to a few past it, or an `ack_many` of a few entries past it and an
//!   `ack` of each entry up to it, the last of which moves mark-delete over them. A partition of
//!   a few thousand holes is charged more than the whole budget, so nearly every change of
//!   partition evicts one to the journal and loads another.
//! - Batch-index acks (`ack_batch_index` of a message the cursor does not answer acknowledged,
//!   or of every message of an entry one by one, answered by `is_batch_index_acked` in the
//!   child right after), on those ledgers and on ledgers of 16 entries (many small partitions
//!   of partial entries), mixed with `ack_many` and `ack` of the same entries. Partial entries
//!   are charged to the shared budget and evicted to the journal. One cursor of each topic
//!   (the one that seeks) makes no batch-index ack, so its `ack_many` groups go through
//!   `add_many` (a cursor with partial entries acks a group one position at a time).
//!
//! The log, one whole line a `write`: `A t L:E` after an append to topic `t` returned, `Y t`
//! after its sync returned `Ok`; *before* a call of cursor `k` (cursor `k % CURSORS` of topic
//! `k / CURSORS`): `M k L:E L:E ...` (`ack_many`), `K k L:E` (`ack`), `C k L:E`
//! (`ack_cumulative`), `B k L:E i n` (`ack_batch_index` of message `i` of an entry of `n`
//! messages), `S k L:E` (`seek`); *after* a call returned `Ok`: `s k` (the seek), `F k` (a flush
//! or close of cursor `k`; after `flush_all`, one for every cursor of the thread that called
//! it). A call is logged before it is made, so the kill may come between the line and the call:
//! what the log shows acknowledged is what a cursor *may* hold (nothing outside it), what it
//! showed at the cursor's last `F` or `s` is what it *must* hold. A seek logged without its `s`
//! may have committed or not: the first bound takes what either side of it holds, the second
//! what both do. Checked after every kill, over every entry of every topic (roaring bitmaps by
//! ledger, so that a check costs little at hundreds of thousands of entries):
//! - every entry synced before the kill is there;
//! - invariant 1: nothing is acknowledged, whole or by message, that the log does not show
//!   acknowledged (an entry whose every message the log shows acknowledged counts as whole);
//! - invariant 2: every entry and message acknowledged before the cursor's last `F` or `s` is
//!   acknowledged (a message also by its whole entry);
//! - the partial entries a cursor holds (`Cursor::batch_index_partitions`) have the batch size
//!   their acks gave, some messages acknowledged and some not, are not acknowledged whole, and
//!   agree with `is_batch_index_acked` and `CursorStats::partial_entries`;
//! - reading every cursor back through the budget made room, and kept it plus the one ack
//!   partition and the one partition of partial entries in use (docs/cursors.md, "Memory").
//!
//! The parent empties the log after each check (the next child learns the topics' entries from
//! the topics). The child is in `sigkill_ack_partitions_child`, the model and the checks of a
//! cursor in `sigkill_ack_partitions_model`. `KILL_ROUNDS` sets the number of kills (20 by
//! default); `ACKSTORE_KILL_SEED` repeats a run's choices.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;

use ackstore::internals::ackset::{MAX_PARTITION_BYTES, PARTITION_SPAN, PartitionKey};
use ackstore::{AppendMeta, Cursor, ManagedLedger, Position};
use roaring::RoaringBitmap;

use super::sigkill_ack_many::{
    ACK_BUDGET, CURSORS, TOPICS, close_cursors_and_store, cursor_name, open as open_store,
    open_cursors,
};
use super::sigkill_ack_partitions_child::child;
use super::sigkill_ack_partitions_model::{Acks, Entries, Model, check_against, recovered};
use super::sigkill_child::{
    Workload, kill_rounds, kill_rounds_from_env, new_log_lines, parse_position, run_kill_test,
};
use crate::support;
use support::workload::before;

/// What a resident partial entry is charged besides its serialized bitmap (docs/cursors.md,
/// "Batch-index acks": `batch_index_bytes`).
const PARTIAL_ENTRY_BYTES: usize = 64;

/// The topics' ledgers and what the cursors acknowledge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// Ledgers of 140,000 entries, three partitions each; whole-entry acks.
    LedgersOfThreePartitions,
    /// The same ledgers, half the entries batches of 2 to 5 messages; batch-index acks too.
    BatchesInLedgersOfThreePartitions,
    /// Ledgers of 16 entries, so a partition each (64 a topic, and more); batches and
    /// batch-index acks.
    BatchesInSmallLedgers,
}

impl Shape {
    /// Entries of a data ledger.
    pub(super) fn per_ledger(self) -> u64 {
        match self {
            Self::LedgersOfThreePartitions | Self::BatchesInLedgersOfThreePartitions => 140_000,
            Self::BatchesInSmallLedgers => 16,
        }
    }

    /// Entries of each topic before the first child: 2 ledgers, or 64. (Each open of a topic
    /// starts a ledger: the children append to small ledgers of their own.)
    fn prepared_entries(self) -> u64 {
        match self {
            Self::LedgersOfThreePartitions | Self::BatchesInLedgersOfThreePartitions => {
                2 * self.per_ledger()
            }
            Self::BatchesInSmallLedgers => 64 * self.per_ledger(),
        }
    }

    /// Whether the entries carry batches and the cursors ack single messages of them.
    pub(super) fn batches(self) -> bool {
        self != Self::LedgersOfThreePartitions
    }

    /// Messages of entry number `i` appended by the preparation: with batches, every other one
    /// is a batch of 2 to 5.
    fn prepared_messages(self, i: u64) -> u32 {
        if self.batches() && i % 2 == 1 {
            2 + u32::try_from(i / 2 % 4).expect("small")
        } else {
            1
        }
    }

    /// The test that runs the harness on this shape (the child is that test, run again).
    fn test_name(self) -> String {
        let name = match self {
            Self::LedgersOfThreePartitions => {
                "sigkill_while_acking_many_across_partitions_of_one_ledger_keeps_flushed_acks_and_invents_none"
            }
            Self::BatchesInLedgersOfThreePartitions => {
                "sigkill_while_acking_batch_indexes_across_partitions_of_one_ledger_keeps_flushed_messages"
            }
            Self::BatchesInSmallLedgers => {
                "sigkill_while_acking_batch_indexes_under_a_tiny_shared_budget_keeps_flushed_messages_and_invents_none"
            }
        };
        support::harness::test_path(module_path!(), name)
    }
}

#[test]
fn sigkill_while_acking_many_across_partitions_of_one_ledger_keeps_flushed_acks_and_invents_none() {
    run(Shape::LedgersOfThreePartitions);
}

#[test]
fn sigkill_while_acking_batch_indexes_across_partitions_of_one_ledger_keeps_flushed_messages() {
    run(Shape::BatchesInLedgersOfThreePartitions);
}

#[test]
fn sigkill_while_acking_batch_indexes_under_a_tiny_shared_budget_keeps_flushed_messages_and_invents_none()
 {
    run(Shape::BatchesInSmallLedgers);
}

/// The parent, or (in a child) the workload.
fn run(shape: Shape) {
    run_kill_test(
        &shape,
        |dir, log, seed| child(shape, dir, log, seed),
        |seed| {
            let rounds = kill_rounds_from_env(20);
            let mut parent = Parent::new(shape);
            kill_rounds(&mut parent, rounds, seed).and_then(|()| parent.enough(rounds))
        },
    );
}

#[derive(Debug)]
struct Parent {
    shape: Shape,
    /// Each topic's entries.
    entries: Vec<Entries>,
    /// How many of each topic's entries an earlier check found there (or the preparation made).
    seen: Vec<u64>,
    cursors: BTreeMap<usize, Model>,
    /// How much of the log has been applied.
    offset: u64,
    counts: Counts,
}

/// What the children did, from the log, and what the checks found.
#[derive(Debug, Default)]
struct Counts {
    groups: u64,
    grouped_positions: u64,
    /// Groups with positions in two partitions or more of one ledger.
    groups_over_partitions: u64,
    acks: u64,
    cumulative: u64,
    /// Cumulative acks to a later partition of mark-delete's ledger.
    cumulative_across: u64,
    message_acks: u64,
    seeks: u64,
    flushes: u64,
    /// Recovered mark-deletes on the last entry of a partition (the entry after them the first
    /// of the next).
    marks_before_a_boundary: u64,
    /// Partial entries the checks found.
    partial_entries: u64,
    /// The most entries a checked cursor held acknowledged beyond mark-delete.
    most_holes: u64,
    /// Bytes the cursors released to one another while the checks read them back.
    released_bytes: u64,
}

impl Parent {
    fn new(shape: Shape) -> Self {
        Self {
            shape,
            entries: vec![Entries::default(); TOPICS],
            seen: vec![0; TOPICS],
            cursors: BTreeMap::new(),
            offset: 0,
            counts: Counts::default(),
        }
    }

    fn apply(&mut self, line: &str) -> Result<(), String> {
        let bad = || format!("bad log line {line:?}");
        let mut words = line.split(' ');
        let tag = words.next().unwrap_or("");
        if tag == "E" {
            return Err(format!("the child failed: {line}"));
        }
        if tag == "O" {
            return Ok(());
        }
        let n: usize = words.next().and_then(|w| w.parse().ok()).ok_or_else(bad)?;
        let p = words.next().map(parse_position);
        match (tag, p) {
            ("A", Some(Some(p))) => self.entries.get_mut(n).ok_or_else(bad)?.appended(p),
            ("Y", None) => {
                let entries = self.entries.get_mut(n).ok_or_else(bad)?;
                entries.synced = entries.len();
            }
            ("M", Some(Some(p))) => {
                let mut group = vec![p];
                for w in words {
                    group.push(parse_position(w).ok_or_else(bad)?);
                }
                self.acked_many(n, &group);
            }
            ("B", Some(Some(p))) => {
                let mut numbers = words.map(str::parse::<u32>);
                let (Some(Ok(i)), Some(Ok(size))) = (numbers.next(), numbers.next()) else {
                    return Err(bad());
                };
                self.counts.message_acks += 1;
                self.model(n).truth.ack_message(p, i, size);
            }
            ("K", Some(Some(p))) => {
                self.counts.acks += 1;
                self.model(n).truth.ack(p);
            }
            ("C", Some(Some(p))) => self.acked_through(n, p),
            ("S", Some(Some(p))) => {
                let m = self.model(n);
                m.truth.extend(&Acks::reset(before(p)));
                m.seeking = Some(p);
            }
            ("s", None) => {
                self.counts.seeks += 1;
                let m = self.model(n);
                let p = m.seeking.take().ok_or_else(bad)?;
                m.truth = Acks::reset(before(p));
                m.committed = m.truth.clone();
            }
            ("F", None) => {
                self.counts.flushes += 1;
                let m = self.model(n);
                m.committed = m.truth.clone();
            }
            _ => return Err(bad()),
        }
        Ok(())
    }

    fn model(&mut self, k: usize) -> &mut Model {
        self.cursors.entry(k).or_default()
    }

    fn acked_many(&mut self, k: usize, group: &[Position]) {
        self.counts.groups += 1;
        self.counts.grouped_positions += group.len() as u64;
        let first = PartitionKey::of(group[0]);
        if group.iter().any(|p| {
            let key = PartitionKey::of(*p);
            key.ledger_id == first.ledger_id && key.chunk != first.chunk
        }) {
            self.counts.groups_over_partitions += 1;
        }
        let m = self.model(k);
        for &p in group {
            m.truth.ack(p);
        }
    }

    fn acked_through(&mut self, k: usize, p: Position) {
        self.counts.cumulative += 1;
        let m = self.cursors.entry(k).or_default();
        let next = m
            .truth
            .mark
            .map(|mark| Position::new(mark.ledger_id, mark.entry_id.saturating_add(1)));
        if next.is_some_and(|n| {
            n.ledger_id == p.ledger_id && PartitionKey::of(n).chunk < PartitionKey::of(p).chunk
        }) {
            self.counts.cumulative_across += 1;
        }
        m.truth.ack_through(p);
    }

    /// The kills must have landed mid-workload, not only during start-up, and reached what
    /// this test is for.
    fn enough(&self, rounds: usize) -> Result<(), String> {
        let c = &self.counts;
        let three_partitions = self.shape != Shape::BatchesInSmallLedgers;
        let missing = c.groups == 0
            || c.acks == 0
            || c.flushes == 0
            || c.seeks == 0
            || c.released_bytes == 0
            || (three_partitions && c.groups_over_partitions == 0)
            || (self.shape.batches() && (c.message_acks == 0 || c.partial_entries == 0));
        if rounds >= 10 && missing {
            return Err(format!(
                "the children did too little before being killed: {c:?}"
            ));
        }
        eprintln!(
            "{rounds} kills: {} ack_many groups of {} positions ({} over several partitions of \
             a ledger), {} acks, {} cumulative ({} into a later partition), {} batch-index \
             acks, {} seeks, {} flushes or closes logged; {} entries; the checks found {} \
             mark-deletes before a partition boundary, {} partial entries, at most {} holes in \
             a cursor, and released {} bytes of the budget",
            c.groups,
            c.grouped_positions,
            c.groups_over_partitions,
            c.acks,
            c.cumulative,
            c.cumulative_across,
            c.message_acks,
            c.seeks,
            c.flushes,
            self.entries.iter().map(Entries::len).sum::<u64>(),
            c.marks_before_a_boundary,
            c.partial_entries,
            c.most_holes,
            c.released_bytes,
        );
        Ok(())
    }

    /// After a kill: every entry of `topic` synced before it is there; the model takes the
    /// topic's entries as the reopen found them (appends the kill cut before their line are
    /// entries too, unsynced ones it took are none).
    fn check_entries(&mut self, t: usize, topic: &ManagedLedger) -> Result<(), String> {
        let found = Entries::of(topic);
        let model = &self.entries[t];
        for (l, synced) in model.prefix(model.synced) {
            let last = Position::new(l, synced - 1);
            if found.count(l) < synced || found.synced < found.through(Some(last)) {
                return Err(format!(
                    "topic {t}: entry {last} was synced before the kill and is gone"
                ));
            }
        }
        for i in self.seen[t]..model.synced {
            let p = model.position(i);
            if let Err(e) = topic.read(p) {
                return Err(format!(
                    "topic {t}: entry {p} was synced before the kill and is gone: {e}"
                ));
            }
        }
        self.seen[t] = found.len();
        self.entries[t] = found;
        Ok(())
    }

    /// Checks cursor `k` (open as `cursor`) against the model, and takes what it recovered as
    /// the next child's start.
    fn check_cursor(&mut self, k: usize, cursor: &Cursor) -> Result<(), String> {
        let entries = &self.entries[k / CURSORS];
        let m = self.cursors.entry(k).or_default();
        // A seek the kill cut: either side of it may be what was committed.
        if let Some(target) = m.seeking.take() {
            m.committed = m.committed.meet_reset(target);
        }
        let got = recovered(cursor, entries)?;
        check_against(&got, m, entries)?;
        let c = &mut self.counts;
        if got
            .mark
            .is_some_and(|mark| mark.entry_id % PARTITION_SPAN == PARTITION_SPAN - 1)
        {
            c.marks_before_a_boundary += 1;
        }
        c.partial_entries += got.partial.len() as u64;
        c.most_holes = c
            .most_holes
            .max(got.set.values().map(RoaringBitmap::len).sum());
        m.truth = got.clone();
        m.committed = got;
        Ok(())
    }

    /// The most bytes one partition of partial entries of a checked cursor is charged.
    fn largest_partial_partition(&self) -> usize {
        let mut bytes: BTreeMap<(usize, PartitionKey), usize> = BTreeMap::new();
        for (k, m) in &self.cursors {
            for (p, (_, acked)) in &m.truth.partial {
                *bytes.entry((*k, PartitionKey::of(*p))).or_default() +=
                    PARTIAL_ENTRY_BYTES + acked.serialized_size();
            }
        }
        bytes.into_values().max().unwrap_or(0)
    }
}

impl Workload for Parent {
    /// Every topic filled with its shape's entries, synced.
    fn prepare(&mut self, dir: &Path, _log: &Path) -> Result<(), String> {
        let (store, topics) = open_store(dir, self.shape.per_ledger())
            .map_err(|e| format!("open to prepare: {e}"))?;
        for (t, topic) in topics.iter().enumerate() {
            for i in 0..self.shape.prepared_entries() {
                let meta = AppendMeta {
                    num_messages: self.shape.prepared_messages(i),
                    timestamp: 0,
                };
                topic
                    .append_with(b"entry", meta)
                    .map_err(|e| format!("prepare: append: {e}"))?;
            }
            topic.sync().map_err(|e| format!("prepare: sync: {e}"))?;
            self.entries[t] = Entries::of(topic);
            self.seen[t] = self.entries[t].len();
        }
        store.close().map_err(|e| format!("prepare: close: {e}"))
    }

    fn test_name(&self) -> String {
        self.shape.test_name()
    }

    fn apply_log(&mut self, path: &Path) -> Result<(), String> {
        new_log_lines(path, &mut self.offset)?
            .lines()
            .try_for_each(|line| self.apply(line))
    }

    /// Reopens the store; checks every topic's entries and every cursor against the model,
    /// all cursors open under the one budget; then empties the log.
    fn check(&mut self, dir: &Path, log_path: &Path, round: usize) -> Result<(), String> {
        let (store, topics) = open_store(dir, self.shape.per_ledger())
            .map_err(|e| format!("round {round}: reopen after the kill: {e}"))?;
        for (t, topic) in topics.iter().enumerate() {
            self.check_entries(t, topic)
                .map_err(|e| format!("round {round}: {e}"))?;
        }
        let cursors = open_cursors(&topics, round)?;
        for (k, cursor) in cursors.iter().enumerate() {
            self.check_cursor(k, cursor).map_err(|e| {
                format!(
                    "round {round}: topic {}: {}: {e}",
                    k / CURSORS,
                    cursor_name(k)
                )
            })?;
        }
        // Reading every cursor back went through the one small budget: it made room, and
        // stayed within it plus the ack partition and the partition of partial entries in use.
        let budget = store
            .ack_memory_stats()
            .ok_or("the store has no ack budget")?;
        self.counts.released_bytes += budget.released_bytes;
        let bound = ACK_BUDGET + MAX_PARTITION_BYTES + self.largest_partial_partition();
        if budget.peak_resident_bytes > bound {
            return Err(format!(
                "round {round}: the cursors held {} bytes resident under a budget of \
                 {ACK_BUDGET} (at most {bound} with the partitions in use)",
                budget.peak_resident_bytes
            ));
        }
        close_cursors_and_store(&store, cursors, round)?;
        File::create(log_path).map_err(|e| format!("empty the log: {e}"))?;
        self.offset = 0;
        Ok(())
    }
}

//! Random appends of single messages and batches, acks (individual, cumulative and of one
//! message of a batch), reads, seeks (by position and by message index, into a batch too),
//! rewinds, trims, flushes, cursor and topic reopens and power cuts against a plain model of one
//! cursor: a mark-delete index, a `BTreeSet` of individually acknowledged entry numbers and the
//! acknowledged messages of each partly acknowledged entry. Every case runs on one host, a topic
//! opened alone or a topic of a store, drawn with the rest of its input.
//!
//! After a power cut (the durable image of the in-memory disk, taken after the power failed at
//! one of the first steps of a flush or a close of the cursor), the reopened cursor holds every message the last `Ok` flush, close or
//! seek committed and no message the model does not hold; the model then continues from what
//! the cursor recovered.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};

use ackstore::{AppendMeta, Cursor, InitialPosition, MemStorage, Position};
use proptest::prelude::*;
use support::topic::{Host, Hosted, at, config, open_hosted};

#[derive(Debug, Clone)]
enum Op {
    /// Appends `.0` entries, each of `1 + .1 % max_batch` messages, and syncs them.
    Append(u64, u32),
    Ack(usize),
    /// Acknowledges the entry `.0` (0..3) after the first one past mark-delete: the entry
    /// right after mark-delete, which moves it without the ack set, and its neighbours.
    AckNext(usize),
    AckCumulative(usize),
    /// Acknowledges one message (`.1` modulo the entry's size) of an entry.
    AckBatchIndex(usize, u32),
    /// Acknowledges one message of the entry `.0` (0..3) after the first one past mark-delete.
    AckBatchIndexNext(usize, u32),
    Read(usize),
    Seek(usize),
    SeekByIndex(usize),
    Rewind,
    Trim,
    Flush,
    ReopenCursor,
    ReopenTopic,
    /// The power fails after `.0` more storage operations, during a flush (`.1` false) or a
    /// close of the cursor (`.1` true).
    PowerCut(u64, bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1..4u64, any::<u32>()).prop_map(|(n, b)| Op::Append(n, b)),
        5 => any::<usize>().prop_map(Op::Ack),
        3 => (0..3usize).prop_map(Op::AckNext),
        2 => (0..3usize, any::<u32>()).prop_map(|(i, m)| Op::AckBatchIndexNext(i, m)),
        2 => any::<usize>().prop_map(Op::AckCumulative),
        4 => (any::<usize>(), any::<u32>()).prop_map(|(i, m)| Op::AckBatchIndex(i, m)),
        3 => (0..5usize).prop_map(Op::Read),
        1 => any::<usize>().prop_map(Op::Seek),
        2 => any::<usize>().prop_map(Op::SeekByIndex),
        1 => Just(Op::Rewind),
        1 => Just(Op::Trim),
        1 => Just(Op::Flush),
        1 => Just(Op::ReopenCursor),
        1 => Just(Op::ReopenTopic),
        1 => (0..8u64, any::<bool>()).prop_map(|(k, close)| Op::PowerCut(k, close)),
    ]
}

/// The acknowledged state of the cursor, over entry numbers `0..positions.len()`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Acks {
    /// Every entry `..=mark` is acknowledged.
    mark: Option<usize>,
    acked: BTreeSet<usize>,
    /// Entries acknowledged in part: their acknowledged messages (never all of them).
    partial: BTreeMap<usize, BTreeSet<u32>>,
}

impl Acks {
    fn entry_acked(&self, i: usize) -> bool {
        self.mark.is_some_and(|m| i <= m) || self.acked.contains(&i)
    }

    fn message_acked(&self, i: usize, m: u32) -> bool {
        self.entry_acked(i) || self.partial.get(&i).is_some_and(|s| s.contains(&m))
    }
}

/// The cursor as the documentation describes it.
#[derive(Debug, Default)]
struct Model {
    positions: Vec<Position>,
    /// Messages in each entry.
    sizes: Vec<u32>,
    /// Message index of each entry's first message.
    first_index: Vec<u64>,
    /// Entries `..trimmed` are deleted.
    trimmed: usize,
    acks: Acks,
    /// What the last `Ok` flush, close or seek persisted: a power cut keeps it.
    committed: Acks,
    read: usize,
}

impl Model {
    /// First retained entry not covered by mark-delete. (A trim follows mark-delete in memory,
    /// so after a power cut the recovered mark-delete may lie before the first retained entry.)
    fn floor(&self) -> usize {
        self.acks
            .mark
            .map_or(self.trimmed, |m| (m + 1).max(self.trimmed))
    }

    fn absorb(&mut self) {
        while self.acks.acked.remove(&self.floor()) {
            self.acks.mark = Some(self.floor());
        }
        let floor = self.floor();
        self.acks.partial.retain(|&i, _| i >= floor);
    }

    fn ack(&mut self, i: usize) -> Option<bool> {
        // An entry of a trimmed ledger is before mark-delete (Pulsar's `first-ledger:-1`).
        if self.acks.mark.is_some_and(|m| i <= m) || i < self.trimmed {
            return Some(false);
        }
        if i >= self.positions.len() {
            return None;
        }
        self.acks.partial.remove(&i);
        let added = self.acks.acked.insert(i);
        self.absorb();
        Some(added)
    }

    fn ack_cumulative(&mut self, i: usize) -> Option<bool> {
        match self.acks.mark {
            Some(m) if i == m => return Some(false),
            Some(m) if i < m => return None,
            _ => {}
        }
        if i < self.trimmed || i >= self.positions.len() {
            return None;
        }
        self.acks.mark = Some(i);
        self.acks.acked.retain(|&a| a > i);
        self.absorb();
        Some(true)
    }

    fn ack_batch_index(&mut self, i: usize, m: u32) -> Option<bool> {
        if self.acks.mark.is_some_and(|mark| i <= mark) || i < self.trimmed {
            return Some(false);
        }
        if i >= self.positions.len() {
            return None;
        }
        if self.acks.acked.contains(&i) {
            return Some(false);
        }
        let messages = self.acks.partial.entry(i).or_default();
        let added = messages.insert(m);
        if messages.len() == self.sizes[i] as usize {
            self.ack(i);
        }
        Some(added)
    }

    /// What `read_entries(max)` delivers: each entry with its messages acknowledged in part.
    fn read(&mut self, max: usize) -> Vec<(Position, Option<Vec<u32>>)> {
        let mut out = Vec::new();
        if max == 0 {
            return out;
        }
        let mut j = self.read.max(self.floor());
        while j < self.positions.len() && out.len() < max {
            if !self.acks.acked.contains(&j) {
                let partial = self.acks.partial.get(&j);
                out.push((
                    self.positions[j],
                    partial.map(|s| s.iter().copied().collect()),
                ));
            }
            j += 1;
        }
        self.read = j;
        out
    }

    /// A reset to entry `i` (`positions.len()` and above: latest), its first `skip` messages
    /// acknowledged at batch-index level.
    fn seek(&mut self, i: usize, skip: u32) {
        let t = i.max(self.trimmed).min(self.positions.len());
        self.acks = Acks {
            mark: if t > self.trimmed { Some(t - 1) } else { None },
            ..Acks::default()
        };
        if skip > 0 {
            self.acks.partial.insert(t, (0..skip).collect());
        }
        self.read = t;
        self.committed = self.acks.clone();
    }

    /// [`Self::seek`] to the entry holding message `index`, as `seek_by_index` resolves it.
    fn seek_by_index(&mut self, index: u64) {
        let total = self
            .first_index
            .last()
            .zip(self.sizes.last())
            .map_or(0, |(f, s)| f + u64::from(*s));
        if index >= total {
            return self.seek(self.positions.len(), 0);
        }
        let e = self.first_index.partition_point(|&f| f <= index) - 1;
        if e < self.trimmed {
            return self.seek(self.trimmed, 0);
        }
        let skip = u32::try_from(index - self.first_index[e]).unwrap();
        self.seek(e, skip);
    }

    fn backlog(&self) -> u64 {
        (self.positions.len() - self.floor() - self.acks.acked.len()) as u64
    }

    fn end(&self) -> Position {
        self.positions.last().map_or(Position::default(), |p| {
            Position::new(p.ledger_id, p.entry_id + 1)
        })
    }

    fn read_position(&self) -> Position {
        let i = self.read.max(self.floor());
        self.positions.get(i).copied().unwrap_or_else(|| self.end())
    }

    /// Ledgers a trim deletes: whole ledgers at or before mark-delete, never the last one.
    fn trimmable(&self) -> Vec<u64> {
        let Some(last) = self.positions.last() else {
            return vec![];
        };
        let covered = self.acks.mark.map_or(0, |m| m + 1);
        let mut out: Vec<u64> = Vec::new();
        for (i, p) in self.positions.iter().enumerate().skip(self.trimmed) {
            if p.ledger_id == last.ledger_id {
                break;
            }
            let ledger_end = self.positions[i..]
                .iter()
                .take_while(|q| q.ledger_id == p.ledger_id)
                .count()
                + i;
            if ledger_end > covered {
                break;
            }
            if out.last() != Some(&p.ledger_id) {
                out.push(p.ledger_id);
            }
        }
        out
    }

    /// After a power cut: checks that the cursor holds every message `committed` holds and
    /// none the model does not, then takes what the cursor recovered as the model's state.
    fn recover(&mut self, topic: &Hosted, cursor: &Cursor) {
        self.trimmed = match topic.first_position() {
            Some(first) => self.positions.partition_point(|&p| p < first),
            None => self.positions.len(),
        };
        let mut recovered = Acks {
            mark: cursor
                .mark_delete_position()
                .unwrap()
                .map(|m| self.positions.partition_point(|&p| p <= m) - 1),
            ..Acks::default()
        };
        for i in self.trimmed..self.positions.len() {
            let pos = self.positions[i];
            let entry = cursor.is_acked(pos).unwrap();
            for m in 0..self.sizes[i] {
                let got = cursor.is_batch_index_acked(pos, m).unwrap();
                assert!(
                    got || !self.committed.message_acked(i, m),
                    "message {m} of entry #{i} was committed and is lost"
                );
                assert!(
                    !got || self.acks.message_acked(i, m),
                    "message {m} of entry #{i} is acknowledged and never was"
                );
                if got && !entry {
                    recovered.partial.entry(i).or_default().insert(m);
                }
            }
            if entry && !recovered.entry_acked(i) {
                recovered.acked.insert(i);
            }
        }
        self.acks = recovered;
        self.committed = self.acks.clone();
        self.read = self.floor();
    }
}

fn pick(sel: usize, len: usize) -> usize {
    sel % (len + 2)
}

fn position_of(model: &Model, i: usize) -> Position {
    model.positions.get(i).copied().unwrap_or_else(|| {
        let end = model.end();
        Position::new(
            end.ledger_id,
            end.entry_id + (i - model.positions.len()) as u64,
        )
    })
}

fn check(model: &Model, cursor: &Cursor) {
    assert_eq!(
        cursor.mark_delete_position().unwrap(),
        model.acks.mark.map(|m| model.positions[m])
    );
    assert_eq!(cursor.backlog().unwrap(), model.backlog());
    let acked: Vec<Position> = cursor
        .acked_ranges()
        .unwrap()
        .into_iter()
        .flat_map(|(a, b)| {
            assert_eq!(a.ledger_id, b.ledger_id, "ranges never span ledgers");
            (a.entry_id..=b.entry_id).map(move |e| Position::new(a.ledger_id, e))
        })
        .collect();
    let want: Vec<Position> = model
        .acks
        .acked
        .iter()
        .map(|&i| model.positions[i])
        .collect();
    assert_eq!(acked, want);
    assert_eq!(cursor.read_position().unwrap(), model.read_position());
    for i in model.trimmed..model.positions.len() {
        let pos = model.positions[i];
        assert_eq!(
            cursor.is_acked(pos).unwrap(),
            model.acks.entry_acked(i),
            "entry #{i}"
        );
        for m in 0..model.sizes[i] {
            assert_eq!(
                cursor.is_batch_index_acked(pos, m).unwrap(),
                model.acks.message_acked(i, m),
                "message {m} of entry #{i}"
            );
        }
    }
}

/// A topic on `disk` kept by `host`, `per_ledger` entries per ledger, its cursors keeping at
/// most `budget` bytes of ack partitions resident (0: every partition is evicted after each
/// touch).
fn open(host: Host, disk: &MemStorage, per_ledger: u64, budget: usize) -> Hosted {
    let mut cfg = config(per_ledger);
    cfg.cursor.lru_capacity_bytes = budget;
    open_hosted(host, std::sync::Arc::new(disk.clone()), &cfg).unwrap()
}

/// An existing cursor ignores the options it is opened with.
fn reopen_cursor(topic: &Hosted) -> Cursor {
    topic
        .open_cursor("sub", at(InitialPosition::Latest, true))
        .unwrap()
}

/// Runs `ops` on the topic `host` keeps, of `per_ledger` entries per ledger, whose entries hold
/// at most `max_batch` messages and whose cursors keep at most `budget` bytes resident.
fn run(host: Host, per_ledger: u64, max_batch: u32, budget: usize, ops: &[Op]) {
    let mut disk = MemStorage::new();
    let mut topic = open(host, &disk, per_ledger, budget);
    let mut model = Model::default();
    let mut cursor = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    for op in ops {
        let len = model.positions.len();
        match *op {
            Op::Append(n, b) => {
                let size = 1 + b % max_batch;
                for _ in 0..n {
                    let next = model
                        .first_index
                        .last()
                        .zip(model.sizes.last())
                        .map_or(0, |(f, s)| f + u64::from(*s));
                    let meta = AppendMeta {
                        num_messages: size,
                        timestamp: 1000 + next,
                    };
                    model.positions.push(topic.append_with(b"m", meta).unwrap());
                    model.sizes.push(size);
                    model.first_index.push(next);
                }
                topic.sync().unwrap();
            }
            Op::Ack(sel) | Op::AckNext(sel) => {
                let i = match *op {
                    Op::AckNext(..) => model.floor() + sel,
                    _ => pick(sel, len),
                };
                let got = cursor.ack(position_of(&model, i)).ok();
                assert_eq!(got, model.ack(i), "ack #{i}");
            }
            Op::AckCumulative(sel) => {
                let i = pick(sel, len);
                let got = cursor.ack_cumulative(position_of(&model, i)).ok();
                assert_eq!(got, model.ack_cumulative(i), "cumulative ack #{i}");
            }
            Op::AckBatchIndex(sel, m) | Op::AckBatchIndexNext(sel, m) => {
                let i = match *op {
                    Op::AckBatchIndexNext(..) => model.floor() + sel,
                    _ => pick(sel, len),
                };
                let size = model.sizes.get(i).copied().unwrap_or(max_batch);
                let m = m % size;
                let got = cursor.ack_batch_index(position_of(&model, i), m, size).ok();
                assert_eq!(got, model.ack_batch_index(i, m), "ack of {m} in #{i}");
            }
            Op::Read(max) => {
                let got: Vec<(Position, Option<Vec<u32>>)> = cursor
                    .read_entries(max)
                    .unwrap()
                    .into_iter()
                    .map(|e| {
                        let partial = e.acked_batch_indexes.map(|b| b.iter().collect());
                        (e.position, partial)
                    })
                    .collect();
                assert_eq!(got, model.read(max));
            }
            Op::Seek(sel) => {
                let i = pick(sel, len);
                cursor.seek(position_of(&model, i)).unwrap();
                model.seek(i, 0);
            }
            Op::SeekByIndex(sel) => {
                let total = model.first_index.last().map_or(0, |f| f + 4);
                let index = (sel as u64) % (total + 2);
                cursor.seek_by_index(index).unwrap();
                model.seek_by_index(index);
            }
            Op::Rewind => {
                cursor.rewind().unwrap();
                model.read = model.floor();
            }
            Op::Trim => {
                let deleted = topic.trim_consumed().unwrap();
                assert_eq!(deleted, model.trimmable());
                model.trimmed += model.positions[model.trimmed..]
                    .iter()
                    .take_while(|p| deleted.contains(&p.ledger_id))
                    .count();
            }
            Op::Flush => {
                cursor.flush().unwrap();
                model.committed = model.acks.clone();
            }
            Op::ReopenCursor => {
                cursor.close().unwrap();
                model.committed = model.acks.clone();
                cursor = reopen_cursor(&topic);
                model.read = model.floor();
            }
            Op::ReopenTopic => {
                drop(cursor);
                topic.close().unwrap();
                model.committed = model.acks.clone();
                topic = open(host, &disk, per_ledger, budget);
                cursor = reopen_cursor(&topic);
                model.read = model.floor();
            }
            Op::PowerCut(k, close) => {
                disk.fail_after(Some(k));
                let persisted = if close {
                    cursor.close()
                } else {
                    cursor.flush()
                };
                if persisted.is_ok() {
                    model.committed = model.acks.clone();
                }
                let image = disk.durable_image();
                // The process is gone: its handles find a dead disk.
                disk.fail_after(Some(0));
                drop(cursor);
                drop(topic);
                disk = image;
                topic = open(host, &disk, per_ledger, budget);
                cursor = reopen_cursor(&topic);
                model.recover(&topic, &cursor);
            }
        }
        check(&model, &cursor);
    }
}

fn host() -> impl Strategy<Value = Host> {
    prop_oneof![Just(Host::Alone), Just(Host::Store)]
}

proptest! {
    #![proptest_config(support::harness::proptest_config(300))]

    #[test]
    fn cursor_matches_the_model(
        host in host(),
        per_ledger in 1..5u64,
        max_batch in prop_oneof![Just(1u32), 2..5u32],
        budget in prop_oneof![Just(0usize), Just(64usize << 20)],
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        run(host, per_ledger, max_batch, budget, &ops);
    }
}

#[test]
fn model_run_with_trims_and_reopens() {
    let ops = [
        Op::Append(3, 0),
        Op::Append(3, 0),
        Op::Ack(1),
        Op::Ack(0),
        Op::Trim,
        Op::Seek(0),
        Op::Read(2),
        Op::ReopenCursor,
        Op::AckCumulative(4),
        Op::Trim,
        Op::Append(2, 0),
        Op::SeekByIndex(100),
        Op::Read(3),
        Op::Rewind,
    ];
    for host in [Host::Alone, Host::Store] {
        run(host, 2, 1, 0, &ops);
        run(host, 2, 1, 64 << 20, &ops);
    }
}

#[test]
fn model_run_with_batches_partial_acks_and_power_cuts() {
    let ops = [
        Op::Append(3, 2),
        Op::Append(2, 1),
        Op::AckBatchIndex(0, 0),
        Op::AckBatchIndex(0, 2),
        Op::AckBatchIndex(3, 1),
        Op::Flush,
        Op::AckBatchIndex(1, 0),
        Op::PowerCut(1, false),
        Op::AckBatchIndex(0, 1),
        Op::SeekByIndex(4),
        Op::Read(3),
        Op::AckBatchIndex(1, 2),
        Op::ReopenTopic,
        Op::Read(3),
        Op::AckBatchIndex(2, 0),
        Op::PowerCut(2, true),
        Op::AckBatchIndex(3, 0),
        Op::PowerCut(100, true),
        Op::Trim,
    ];
    for host in [Host::Alone, Host::Store] {
        for budget in [0, 64 << 20] {
            run(host, 2, 3, budget, &ops);
        }
    }
}

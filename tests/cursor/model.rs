//! Random appends, acks (individual and cumulative), reads, seeks, rewinds, trims and cursor
//! reopens against a plain model of one cursor: a mark-delete index plus a `BTreeSet` of
//! individually acknowledged entry numbers.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::MemStorage;
use ackstore::{Cursor, Position};
use ackstore::{InitialPosition, ManagedLedger};
use proptest::prelude::*;
use support::topic::{append_n, at, config, read_positions};

#[derive(Debug, Clone)]
enum Op {
    Append(u64),
    Ack(usize),
    AckCumulative(usize),
    Read(usize),
    Seek(usize),
    SeekByIndex(usize),
    Rewind,
    Trim,
    ReopenCursor,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1..4u64).prop_map(Op::Append),
        6 => any::<usize>().prop_map(Op::Ack),
        2 => any::<usize>().prop_map(Op::AckCumulative),
        3 => (0..5usize).prop_map(Op::Read),
        1 => any::<usize>().prop_map(Op::Seek),
        1 => any::<usize>().prop_map(Op::SeekByIndex),
        1 => Just(Op::Rewind),
        1 => Just(Op::Trim),
        1 => Just(Op::ReopenCursor),
    ]
}

/// The cursor as the documentation describes it, over entry numbers `0..positions.len()`.
#[derive(Debug, Default)]
struct Model {
    positions: Vec<Position>,
    /// Entries `..trimmed` are deleted.
    trimmed: usize,
    /// Every entry `..=mark` is acknowledged.
    mark: Option<usize>,
    acked: BTreeSet<usize>,
    read: usize,
}

impl Model {
    /// First entry not covered by mark-delete.
    fn floor(&self) -> usize {
        self.mark.map_or(self.trimmed, |m| m + 1)
    }

    fn absorb(&mut self) {
        while self.acked.remove(&self.floor()) {
            self.mark = Some(self.floor());
        }
    }

    fn ack(&mut self, i: usize) -> Option<bool> {
        if self.mark.is_some_and(|m| i <= m) {
            return Some(false);
        }
        if i < self.trimmed || i >= self.positions.len() {
            return None;
        }
        let added = self.acked.insert(i);
        self.absorb();
        Some(added)
    }

    fn ack_cumulative(&mut self, i: usize) -> Option<bool> {
        match self.mark {
            Some(m) if i == m => return Some(false),
            Some(m) if i < m => return None,
            _ => {}
        }
        if i < self.trimmed || i >= self.positions.len() {
            return None;
        }
        self.mark = Some(i);
        self.acked.retain(|&a| a > i);
        self.absorb();
        Some(true)
    }

    fn read(&mut self, max: usize) -> Vec<Position> {
        let mut out = Vec::new();
        if max == 0 {
            return out;
        }
        let mut j = self.read.max(self.floor());
        while j < self.positions.len() && out.len() < max {
            if !self.acked.contains(&j) {
                out.push(self.positions[j]);
            }
            j += 1;
        }
        self.read = j;
        out
    }

    /// A reset to entry `i` (`positions.len()` and above: latest).
    fn seek(&mut self, i: usize) {
        let t = i.max(self.trimmed).min(self.positions.len());
        self.mark = if t > self.trimmed { Some(t - 1) } else { None };
        self.acked.clear();
        self.read = t;
    }

    fn backlog(&self) -> u64 {
        (self.positions.len() - self.floor() - self.acked.len()) as u64
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
        let covered = self.mark.map_or(0, |m| m + 1);
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
        model.mark.map(|m| model.positions[m])
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
    let want: Vec<Position> = model.acked.iter().map(|&i| model.positions[i]).collect();
    assert_eq!(acked, want);
    assert_eq!(cursor.read_position().unwrap(), model.read_position());
}

/// Runs `ops` on a topic of `per_ledger` entries per ledger whose cursors keep at most
/// `budget` bytes of ack partitions resident (0: every partition is evicted after each touch).
fn run(per_ledger: u64, budget: usize, ops: &[Op]) {
    let mut cfg = config(per_ledger);
    cfg.cursor.lru_capacity_bytes = budget;
    let topic = ManagedLedger::open_with_storage(Arc::new(MemStorage::new()), cfg).unwrap();
    let mut model = Model::default();
    let mut cursor = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    for op in ops {
        let len = model.positions.len();
        match *op {
            Op::Append(n) => model.positions.extend(append_n(&topic, n)),
            Op::Ack(sel) => {
                let i = pick(sel, len);
                let got = cursor.ack(position_of(&model, i)).ok();
                assert_eq!(got, model.ack(i), "ack #{i}");
            }
            Op::AckCumulative(sel) => {
                let i = pick(sel, len);
                let got = cursor.ack_cumulative(position_of(&model, i)).ok();
                assert_eq!(got, model.ack_cumulative(i), "cumulative ack #{i}");
            }
            Op::Read(max) => assert_eq!(read_positions(&cursor, max), model.read(max)),
            Op::Seek(sel) => {
                let i = pick(sel, len);
                cursor.seek(position_of(&model, i)).unwrap();
                model.seek(i);
            }
            Op::SeekByIndex(sel) => {
                // Every entry carries one message, so entry number i holds message index i.
                let i = pick(sel, len);
                cursor.seek_by_index(i as u64).unwrap();
                model.seek(i);
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
            Op::ReopenCursor => {
                cursor.close().unwrap();
                cursor = topic
                    .open_cursor("sub", at(InitialPosition::Latest, true))
                    .unwrap();
                // Close flushes: every individual ack survives the reopen.
                model.read = model.floor();
            }
        }
        check(&model, &cursor);
        for i in 0..model.positions.len() {
            let expected = model.mark.is_some_and(|m| i <= m) || model.acked.contains(&i);
            assert_eq!(cursor.is_acked(model.positions[i]).unwrap(), expected);
        }
    }
}

proptest! {
    #![proptest_config(support::harness::proptest_config(300))]

    #[test]
    fn cursor_matches_the_model(
        per_ledger in 1..5u64,
        budget in prop_oneof![Just(0usize), Just(64usize << 20)],
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        run(per_ledger, budget, &ops);
    }
}

#[test]
fn model_run_with_trims_and_reopens() {
    let ops = [
        Op::Append(3),
        Op::Append(3),
        Op::Ack(1),
        Op::Ack(0),
        Op::Trim,
        Op::Seek(0),
        Op::Read(2),
        Op::ReopenCursor,
        Op::AckCumulative(4),
        Op::Trim,
        Op::Append(2),
        Op::SeekByIndex(100),
        Op::Read(3),
        Op::Rewind,
    ];
    run(2, 0, &ops);
    run(2, 64 << 20, &ops);
}

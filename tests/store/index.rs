//! The journal index against a plain model: after any sequence of stages (evictions),
//! commits (markers), deltas, snapshots, fall-backs, forgets and removals, a lookup returns the
//! newest copy in log order, and the live bytes the index keeps are those of every record the
//! model holds (counted again from the entries too). Midway the index is split into the open
//! journal's shards ([`ShardedIndex`]), and the rest of the operations go to each cursor's
//! shard: nothing is lost or counted twice by the split, and a cursor's shard alone answers for
//! it.

use std::collections::{BTreeMap, HashMap};

use ackstore::internals::ackset::PartitionKey;
use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::format::journal::JournalLoc;
use ackstore::internals::journal::index::{
    AppliedDelta, Committed, CursorId, Index, PartLoc, Rows, ShardedIndex, SnapshotLoc,
};
use proptest::prelude::*;

use crate::support;

#[derive(Debug, Clone)]
enum Op {
    Stage(u8, u8),
    /// Commit cursor with these keys live; each either written now or referenced.
    Commit(u8, Vec<(u8, bool)>),
    Forget(u8, u8),
    Remove(u8),
    /// A batch record of the cursor's key written (pending), or dropped.
    StageBatch(u8, u8),
    ForgetBatch(u8, u8),
    /// A snapshot record committed for the cursor.
    Snapshot(u8),
    /// The cursor's chain dropped for its snapshot (when it has one).
    FallBack(u8),
    /// A delta on the cursor's chain (when it has one): keys removed, keys written now.
    Delta(u8, Vec<u8>, Vec<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    let keys = || prop::collection::vec(0u8..5, 0..3);
    prop_oneof![
        4 => (0u8..3, 0u8..5).prop_map(|(c, k)| Op::Stage(c, k)),
        3 => (0u8..3, prop::collection::vec((0u8..5, any::<bool>()), 0..5)).prop_map(|(c, ks)| Op::Commit(c, ks)),
        1 => (0u8..3, 0u8..5).prop_map(|(c, k)| Op::Forget(c, k)),
        1 => (0u8..3).prop_map(Op::Remove),
        2 => (0u8..3, 0u8..5).prop_map(|(c, k)| Op::StageBatch(c, k)),
        1 => (0u8..3, 0u8..5).prop_map(|(c, k)| Op::ForgetBatch(c, k)),
        1 => (0u8..3).prop_map(Op::Snapshot),
        1 => (0u8..3).prop_map(Op::FallBack),
        2 => (0u8..3, keys(), keys()).prop_map(|(c, r, a)| Op::Delta(c, r, a)),
    ]
}

/// The cursor an operation is about (every operation is about one).
fn op_cursor(op: &Op) -> u8 {
    match op {
        Op::Stage(c, _)
        | Op::Commit(c, _)
        | Op::Forget(c, _)
        | Op::Remove(c)
        | Op::StageBatch(c, _)
        | Op::ForgetBatch(c, _)
        | Op::Snapshot(c)
        | Op::FallBack(c)
        | Op::Delta(c, _, _) => *c,
    }
}

fn cursor(c: u8) -> CursorId {
    CursorId {
        topic: 1,
        cursor: u64::from(c),
    }
}

fn key(k: u8) -> PartitionKey {
    PartitionKey {
        ledger_id: 1,
        chunk: u64::from(k),
    }
}

/// Copies are named by the clock tick that wrote them (their write order and their offset);
/// a chain's marker by the tick of its newest record.
#[derive(Default)]
struct Model {
    committed: HashMap<u8, BTreeMap<u8, u64>>,
    /// The clock tick of each chain's newest marker or delta (its full marker's length).
    markers: HashMap<u8, u64>,
    staged: HashMap<(u8, u8), u64>,
    staged_batch: HashMap<(u8, u8), u64>,
    snapshots: HashMap<u8, u64>,
}

impl Model {
    /// Bytes of every record the model holds: what the index's live bytes must be.
    fn live_bytes(&self) -> u64 {
        let rows: u64 = self
            .committed
            .values()
            .flat_map(|r| r.values())
            .map(|&t| len(t))
            .sum();
        let markers: u64 = self.markers.values().map(|&t| len(t)).sum();
        let staged: u64 = self
            .staged
            .values()
            .chain(self.staged_batch.values())
            .map(|&t| len(t))
            .sum();
        let snapshots: u64 = self.snapshots.values().map(|&t| len(t)).sum();
        rows + markers + staged + snapshots
    }

    fn remove(&mut self, c: u8) {
        self.committed.remove(&c);
        self.markers.remove(&c);
        self.snapshots.remove(&c);
        self.staged.retain(|(mc, _), _| *mc != c);
        self.staged_batch.retain(|(mc, _), _| *mc != c);
    }

    fn newest(&self, c: u8, k: u8) -> Option<u64> {
        let committed = self
            .committed
            .get(&c)
            .and_then(|rows| rows.get(&k))
            .copied();
        let staged = self.staged.get(&(c, k)).copied();
        committed.max(staged)
    }
}

/// The length of the record written at clock tick `t`: records differ in length, so a count
/// that takes one for another is seen.
fn len(t: u64) -> u64 {
    10 + t % 7
}

/// Where the marker, delta or snapshot written at clock tick `t` is, and its length.
fn record_at(t: u64) -> (JournalLoc, u64) {
    (
        JournalLoc {
            segment: 1,
            offset: t,
        },
        len(t),
    )
}

fn part(offset: u64) -> PartLoc {
    PartLoc {
        seq: offset,
        loc: JournalLoc { segment: 1, offset },
        frame_len: len(offset),
        crc: 0,
        cardinality: 1,
        version: ackstore::internals::format::journal::SEGMENT_VERSION,
    }
}

proptest! {
    #![proptest_config(support::harness::proptest_default_config())]

    #[test]
    fn lookups_return_the_newest_copy_in_log_order(
        ops in prop::collection::vec(op(), 1..60),
        split_at in 0usize..70,
    ) {
        let mut whole = Index::default();
        let mut sharded: Option<ShardedIndex> = None;
        let mut model = Model::default();
        let mut clock = 0u64;
        for (i, op) in ops.into_iter().enumerate() {
            if i == split_at {
                sharded = Some(ShardedIndex::new(std::mem::take(&mut whole)));
            }
            // The operation's cursor's shard, held for the operation alone (the checks below
            // lock every shard).
            let mut shard = sharded.as_ref().map(|s| s.of(cursor(op_cursor(&op))));
            let index: &mut Index = match shard.as_deref_mut() {
                Some(index) => index,
                None => &mut whole,
            };
            match op {
                Op::Stage(c, k) => {
                    clock += 1;
                    index.stage(cursor(c), key(k), part(clock));
                    model.staged.insert((c, k), clock);
                }
                Op::Commit(c, keys) => {
                    // Only keys with a copy (or written now) can be live, as the journal checks.
                    let mut rows = Rows::new();
                    let mut model_rows = BTreeMap::new();
                    for (k, write) in keys {
                        let loc = if write {
                            clock += 1;
                            Some(clock)
                        } else {
                            model.newest(c, k)
                        };
                        if let Some(loc) = loc {
                            rows.insert(key(k), part(loc));
                            model_rows.insert(k, loc);
                        }
                    }
                    clock += 1;
                    let (marker, marker_len) = record_at(clock);
                    index.commit(cursor(c), Committed {
                        marker,
                        marker_len,
                        crc: 0,
                        name: 0,
                        floor: 1,
                        state: PersistedState::default(),
                        rows,
                        batch: Default::default(),
                        unbound_batch: false,
                    });
                    // A marker commits the copies it references: an older or the same staged
                    // copy of a live key is no longer pending.
                    for (k, loc) in &model_rows {
                        if model.staged.get(&(c, *k)).is_some_and(|s| s <= loc) {
                            model.staged.remove(&(c, *k));
                        }
                    }
                    model.committed.insert(c, model_rows);
                    model.markers.insert(c, clock);
                }
                Op::Forget(c, k) => {
                    index.forget_partition(cursor(c), key(k));
                    model.staged.remove(&(c, k));
                }
                Op::Remove(c) => {
                    index.remove(cursor(c));
                    model.remove(c);
                }
                Op::StageBatch(c, k) => {
                    clock += 1;
                    index.stage_batch(cursor(c), key(k), part(clock));
                    model.staged_batch.insert((c, k), clock);
                }
                Op::ForgetBatch(c, k) => {
                    index.forget_batch(cursor(c), key(k));
                    model.staged_batch.remove(&(c, k));
                }
                Op::Snapshot(c) => {
                    clock += 1;
                    let (loc, frame_len) = record_at(clock);
                    index.commit_snapshot(cursor(c), SnapshotLoc {
                        loc,
                        frame_len,
                        crc: 0,
                        name: 0,
                        state: PersistedState::default(),
                        ranges: 0,
                        batch: (0, 0),
                        current: true,
                    });
                    model.snapshots.insert(c, clock);
                }
                Op::FallBack(c) => {
                    let fell = index.fall_back_to_snapshot(cursor(c));
                    prop_assert_eq!(fell, model.snapshots.contains_key(&c));
                    if fell {
                        model.committed.remove(&c);
                        model.markers.remove(&c);
                    }
                }
                Op::Delta(c, removed, written) => {
                    let mut added = Vec::new();
                    for k in written {
                        clock += 1;
                        added.push((key(k), part(clock)));
                    }
                    clock += 1;
                    let (marker, marker_len) = record_at(clock);
                    index.apply_delta(cursor(c), AppliedDelta {
                        marker,
                        marker_len,
                        crc: 0,
                        name: 0,
                        state: PersistedState::default(),
                        removed: removed.iter().map(|&k| key(k)).collect(),
                        added: added.clone(),
                        removed_batch: Vec::new(),
                        added_batch: Vec::new(),
                        unbound_batch: false,
                    });
                    if let Some(rows) = model.committed.get_mut(&c) {
                        for k in &removed {
                            rows.remove(k);
                        }
                        for (k, p) in &added {
                            let k = u8::try_from(k.chunk).unwrap();
                            rows.insert(k, p.seq);
                            // As a marker's row does: an older or the same staged copy goes.
                            if model.staged.get(&(c, k)).is_some_and(|s| *s <= p.seq) {
                                model.staged.remove(&(c, k));
                            }
                        }
                        model.markers.insert(c, clock);
                    }
                }
            }
            drop(shard);
            let (live, recounted, cursors) = match &sharded {
                Some(s) => (
                    s.live_bytes(),
                    s.each().map(|i| i.recount_live_bytes()).sum(),
                    s.cursors(),
                ),
                None => (whole.live_bytes(), whole.recount_live_bytes(), whole.cursors()),
            };
            prop_assert_eq!(live, model.live_bytes());
            prop_assert_eq!(recounted, model.live_bytes());
            let with_state: Vec<CursorId> = (0..3)
                .filter(|c| model.committed.contains_key(c) || model.snapshots.contains_key(c))
                .map(cursor)
                .collect();
            prop_assert_eq!(cursors, with_state);
            for c in 0..3 {
                let shard;
                let index = match &sharded {
                    Some(s) => {
                        shard = s.of(cursor(c));
                        &*shard
                    }
                    None => &whole,
                };
                for k in 0..5 {
                    prop_assert_eq!(
                        index.lookup(cursor(c), key(k)).map(|p| p.loc.offset),
                        model.newest(c, k),
                        "cursor {} key {}", c, k
                    );
                }
                prop_assert_eq!(index.committed(cursor(c)).is_some(), model.committed.contains_key(&c));
            }
        }
    }
}

//! The journal index against a plain model: after any sequence of stages (evictions),
//! commits (markers), forgets and removals, a lookup returns the newest copy in log order.

use std::collections::{BTreeMap, HashMap};

use ackstore::internals::ackset::PartitionKey;
use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::format::journal::JournalLoc;
use ackstore::internals::journal::index::{Committed, CursorId, Index, PartLoc, Rows};
use proptest::prelude::*;

use crate::support;

#[derive(Debug, Clone)]
enum Op {
    Stage(u8, u8),
    /// Commit cursor with these keys live; each either written now or referenced.
    Commit(u8, Vec<(u8, bool)>),
    Forget(u8, u8),
    Remove(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3, 0u8..5).prop_map(|(c, k)| Op::Stage(c, k)),
        3 => (0u8..3, prop::collection::vec((0u8..5, any::<bool>()), 0..5)).prop_map(|(c, ks)| Op::Commit(c, ks)),
        1 => (0u8..3, 0u8..5).prop_map(|(c, k)| Op::Forget(c, k)),
        1 => (0u8..3).prop_map(Op::Remove),
    ]
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

#[derive(Default)]
struct Model {
    committed: HashMap<u8, BTreeMap<u8, u64>>,
    staged: HashMap<(u8, u8), u64>,
}

impl Model {
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

fn part(offset: u64) -> PartLoc {
    PartLoc {
        seq: offset,
        loc: JournalLoc { segment: 1, offset },
        frame_len: 10,
        crc: 0,
        cardinality: 1,
        version: ackstore::internals::format::journal::SEGMENT_VERSION,
    }
}

proptest! {
    #![proptest_config(support::harness::proptest_default_config())]

    #[test]
    fn lookups_return_the_newest_copy_in_log_order(ops in prop::collection::vec(op(), 1..60)) {
        let mut index = Index::default();
        let mut model = Model::default();
        let mut clock = 0u64;
        for op in ops {
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
                    index.commit(cursor(c), Committed {
                        marker: JournalLoc { segment: 1, offset: clock },
                        marker_len: 10,
                        crc: 0,
                        name: 0,
                        floor: 1,
                        state: PersistedState::default(),
                        rows,
                        batch: Default::default(),
                    });
                    // A marker commits the copies it references: an older or the same staged
                    // copy of a live key is no longer pending.
                    for (k, loc) in &model_rows {
                        if model.staged.get(&(c, *k)).is_some_and(|s| s <= loc) {
                            model.staged.remove(&(c, *k));
                        }
                    }
                    model.committed.insert(c, model_rows);
                }
                Op::Forget(c, k) => {
                    index.forget_partition(cursor(c), key(k));
                    model.staged.remove(&(c, k));
                }
                Op::Remove(c) => {
                    index.remove(cursor(c));
                    model.committed.remove(&c);
                    model.staged.retain(|(mc, _), _| *mc != c);
                }
            }
            for c in 0..3 {
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

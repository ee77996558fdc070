//! Delta ticks of the store's cursor journal under every kind of change a cursor makes, with a
//! power cut after every storage operation and torn unsynced tails: acks spread over many
//! partitions (deltas that rewrite or add rows), mark-delete advances that drop whole
//! partitions (deltas with removed keys), seeks that drop every ack (a marker of no row),
//! deleted cursors (forget records) replaced by new ones, ticks over many cursors of which some
//! are staged twice (a delta on a delta of the same tick), evictions between ticks, reopens,
//! and small segments so rollovers re-base chains often.
//!
//! The model keeps, per cursor, the state of the last tick that returned `Ok` and every state
//! staged since (each tagged by a unique epoch): after any cut, a cursor the journal recovers
//! must hold exactly the acks of the candidate whose epoch it recovers (never a mix of two
//! states, never an ack of none), and a cursor deleted by a forget that returned `Ok` must not
//! come back.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::internals::ackset::{PARTITION_SPAN, RangeSetWrapper};
use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::journal::index::CursorId;
use ackstore::internals::journal::{Journal, JournalConfig, JournalPartitions, Seal, Tick};
use ackstore::{MemStorage, Position};
use support::crash::{cut_everywhere, torn_image, unsynced_tail};
use support::workload::Rng;

/// `None`: no committed state (never flushed, or deleted).
type Candidate = Option<(u64, BTreeSet<Position>)>;

#[derive(Debug, Default, Clone)]
struct Model {
    /// Per cursor: the state of the last `Ok` tick (or forget) first, then every one staged
    /// since.
    candidates: BTreeMap<CursorId, Vec<Candidate>>,
    ticks: u64,
    deltas: u64,
    rebases: u64,
    forgets: u64,
    seeks: u64,
    removals: u64,
    doubles: u64,
}

struct Live {
    set: RangeSetWrapper,
    truth: BTreeSet<Position>,
}

fn open(disk: &MemStorage, config: JournalConfig) -> ackstore::Result<Arc<Journal>> {
    Ok(Arc::new(Journal::open(
        Arc::new(disk.clone()),
        config,
        Seal::default(),
    )?))
}

fn set_of(journal: &Arc<Journal>, c: CursorId, budget: usize) -> RangeSetWrapper {
    let rows = journal.committed(c).map(|(_, r)| r).unwrap_or_default();
    RangeSetWrapper::with_index(
        Box::new(JournalPartitions::new(journal.clone(), c)),
        budget,
        rows,
    )
}

fn acks(set: &mut RangeSetWrapper) -> ackstore::Result<BTreeSet<Position>> {
    let mut out = BTreeSet::new();
    for (key, _) in set.partitions() {
        let b = set.bitmap(key)?.expect("live partition");
        out.extend(
            b.iter()
                .map(|o| Position::new(key.ledger_id, key.first_entry() + u64::from(o))),
        );
    }
    Ok(out)
}

/// Stages `c` into `tick` as a store cursor does.
fn stage(
    journal: &Journal,
    tick: &mut Tick<'_>,
    c: CursorId,
    set: &mut RangeSetWrapper,
    epoch: u64,
) -> ackstore::Result<()> {
    let live: Vec<_> = set.partitions().into_iter().map(|(k, _)| k).collect();
    let mut written = Vec::new();
    for &key in &live {
        let current = journal
            .stored_cardinality(c, key)
            .is_some_and(|card| set.stored_copy_current(key, card));
        if !current {
            written.push((key, set.bitmap(key)?.expect("live")));
        }
    }
    let state = PersistedState {
        epoch,
        ..PersistedState::default()
    };
    tick.stage((c, 0), state, &written, &live)?;
    for (key, _) in &written {
        set.mark_persisted(*key);
    }
    for key in set.dirty_keys() {
        set.mark_clean(key);
    }
    set.resume_stores();
    Ok(())
}

const BUDGET: usize = 1500;
const WIDE: u64 = 10 * PARTITION_SPAN;

/// The workload: `steps` random operations over four cursors at a time. Stops at the first
/// error, as a process that lost its disk would.
fn workload(disk: &MemStorage, config: JournalConfig, seed: u64, steps: u64) -> Model {
    let mut model = Model::default();
    let mut rng = Rng::new(seed);
    let mut next_id = 1;
    let mut epoch = 0;
    let Ok(mut journal) = open(disk, config) else {
        return model;
    };
    let mut live: BTreeMap<CursorId, Live> = BTreeMap::new();
    for _ in 0..4 {
        let c = CursorId {
            topic: 1 + next_id % 2,
            cursor: next_id,
        };
        next_id += 1;
        live.insert(
            c,
            Live {
                set: set_of(&journal, c, BUDGET),
                truth: BTreeSet::new(),
            },
        );
        model.candidates.insert(c, vec![None]);
    }
    let stats_sum = |j: &Journal, m: &mut Model| {
        let s = j.stats();
        m.deltas += s.deltas;
        m.rebases += s.rebases;
    };
    for _ in 0..steps {
        let ids: Vec<CursorId> = live.keys().copied().collect();
        let c = ids[rng.index(ids.len())];
        let roll = rng.below(100);
        if roll < 55 {
            let l = live.get_mut(&c).expect("cursor");
            for _ in 0..1 + rng.below(3) {
                let pos = Position::new(1 + rng.below(3), rng.below(WIDE));
                if l.set.add(pos).is_err() {
                    stats_sum(&journal, &mut model);
                    return model;
                }
                l.truth.insert(pos);
            }
        } else if roll < 62 {
            let l = live.get_mut(&c).expect("cursor");
            let md = Position::new(1 + rng.below(3), rng.below(WIDE));
            if l.set.remove_at_most(md).is_err() {
                stats_sum(&journal, &mut model);
                return model;
            }
            l.truth.retain(|p| *p > md);
            model.removals += 1;
        } else if roll < 66 {
            let l = live.get_mut(&c).expect("cursor");
            l.set.clear();
            l.truth.clear();
            model.seeks += 1;
        } else if roll < 70 {
            // Delete the cursor and start a new one.
            live.remove(&c);
            model.candidates.get_mut(&c).expect("c").push(None);
            if journal.forget(c).is_err() {
                stats_sum(&journal, &mut model);
                return model;
            }
            model.candidates.insert(c, vec![None]);
            model.forgets += 1;
            let n = CursorId {
                topic: 1 + next_id % 2,
                cursor: next_id,
            };
            next_id += 1;
            live.insert(
                n,
                Live {
                    set: set_of(&journal, n, BUDGET),
                    truth: BTreeSet::new(),
                },
            );
            model.candidates.insert(n, vec![None]);
        } else if roll < 96 {
            let mut tick = journal.begin_tick();
            let mut staged: Vec<(CursorId, u64, BTreeSet<Position>)> = Vec::new();
            let ids: Vec<CursorId> = live.keys().copied().collect();
            let mut failed = false;
            for id in ids {
                if !rng.chance(70) {
                    continue;
                }
                let twice = rng.chance(20);
                let l = live.get_mut(&id).expect("cursor");
                epoch += 1;
                if stage(&journal, &mut tick, id, &mut l.set, epoch).is_err() {
                    failed = true;
                    break;
                }
                staged.push((id, epoch, l.truth.clone()));
                model
                    .candidates
                    .get_mut(&id)
                    .expect("c")
                    .push(Some((epoch, l.truth.clone())));
                if twice {
                    let pos = Position::new(1 + rng.below(3), rng.below(WIDE));
                    if l.set.add(pos).is_err() {
                        failed = true;
                        break;
                    }
                    l.truth.insert(pos);
                    epoch += 1;
                    if stage(&journal, &mut tick, id, &mut l.set, epoch).is_err() {
                        failed = true;
                        break;
                    }
                    staged.push((id, epoch, l.truth.clone()));
                    model
                        .candidates
                        .get_mut(&id)
                        .expect("c")
                        .push(Some((epoch, l.truth.clone())));
                    model.doubles += 1;
                }
            }
            if failed || tick.commit().is_err() {
                stats_sum(&journal, &mut model);
                return model;
            }
            for (id, e, truth) in staged {
                model.candidates.insert(id, vec![Some((e, truth))]);
            }
            model.ticks += 1;
        } else {
            // Reopen: every cursor goes on from what the journal committed.
            stats_sum(&journal, &mut model);
            let ids: Vec<CursorId> = live.keys().copied().collect();
            live.clear();
            drop(journal);
            journal = match open(disk, config) {
                Ok(j) => j,
                Err(_) => return model,
            };
            for id in ids {
                let mut set = set_of(&journal, id, BUDGET);
                let truth = match model.candidates[&id].last().cloned().flatten() {
                    Some((_, t)) => t,
                    None => BTreeSet::new(),
                };
                let Ok(got) = acks(&mut set) else {
                    return model;
                };
                assert_eq!(
                    got, truth,
                    "a clean reopen recovers the last Ok tick of {id:?}"
                );
                let set = set_of(&journal, id, BUDGET);
                live.insert(id, Live { set, truth });
            }
        }
    }
    stats_sum(&journal, &mut model);
    model
}

fn check(image: &MemStorage, config: JournalConfig, model: &Model, what: &str) {
    let journal = open(image, config).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    for (id, candidates) in &model.candidates {
        match journal.committed(*id) {
            None => assert!(
                candidates.contains(&None),
                "{what}: {id:?} lost its committed state; candidates {:?}",
                candidates
                    .iter()
                    .map(|c| c.as_ref().map(|(e, _)| *e))
                    .collect::<Vec<_>>()
            ),
            Some((state, _)) => {
                let Some(Some((_, truth))) = candidates
                    .iter()
                    .find(|c| c.as_ref().is_some_and(|(e, _)| *e == state.epoch))
                else {
                    panic!(
                        "{what}: {id:?} recovered epoch {} which is no candidate {:?}",
                        state.epoch,
                        candidates
                            .iter()
                            .map(|c| c.as_ref().map(|(e, _)| *e))
                            .collect::<Vec<_>>()
                    );
                };
                let mut set = set_of(&journal, *id, usize::MAX);
                let got = acks(&mut set).unwrap_or_else(|e| panic!("{what}: load {id:?}: {e}"));
                if let Some(p) = got.difference(truth).next() {
                    panic!(
                        "{what}: {id:?} epoch {} recovered ack {p} its state does not hold",
                        state.epoch
                    );
                }
                if let Some(p) = truth.difference(&got).next() {
                    panic!(
                        "{what}: {id:?} epoch {} lost ack {p} of its state",
                        state.epoch
                    );
                }
            }
        }
    }
}

fn run(segment_bytes: u64, seed: u64, steps: u64, torn: bool) -> Model {
    let config = JournalConfig { segment_bytes };
    let mut torn_checked = 0u64;
    let clean = cut_everywhere(
        |disk| workload(disk, config, seed, steps),
        |disk, cut, model| {
            check(&disk.durable_image(), config, &model, &format!("{cut:?}"));
            if torn {
                let tail = unsynced_tail(disk);
                let step = (tail / 40).max(1);
                for keep in (1..tail).step_by(step) {
                    check(
                        &torn_image(disk, |_| keep),
                        config,
                        &model,
                        &format!("{cut:?}, {keep} of {tail} tail bytes"),
                    );
                    torn_checked += 1;
                }
            }
        },
    );
    let m = clean.result;
    assert!(m.ticks > 10, "{m:?}");
    if torn {
        assert!(torn_checked > 100, "{torn_checked}");
    }
    m
}

#[test]
fn every_cut_of_deltas_with_removals_seeks_forgets_and_double_stages_recovers_a_staged_state() {
    let m = run(4096, 11, 260, false);
    assert!(
        m.deltas > 20 && m.forgets > 2 && m.seeks > 2 && m.removals > 5 && m.doubles > 3,
        "{m:?}"
    );
}

#[test]
fn the_same_with_small_segments_rolling_over_every_few_ticks() {
    let m = run(700, 12, 260, false);
    assert!(m.rebases > 3, "{m:?}");
}

#[test]
fn torn_tails_of_the_same_workload_recover_a_staged_state() {
    run(1500, 13, 160, true);
}

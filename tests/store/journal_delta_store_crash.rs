//! A store whose cursors span many partitions (a data ledger per four entries, so a flush
//! after a few acks is a delta), with small journal segments (rollovers re-base chains), under
//! a power cut after every storage operation: individual and cumulative acks, seeks that clear
//! the acks (a marker of no row, then deltas on it), a cursor deleted and created again under
//! the same name (a new id, the old one forgotten), a topic closed and reopened, and the store
//! closed and reopened (deltas on chains a recovery rebuilt).
//!
//! The model keeps, per cursor name, the acked set of the last write that returned `Ok` and
//! every state a write started since; after any cut, each cursor recovers exactly one of them
//! (checked entry by entry with `is_acked`), and a deleted cursor whose deletion returned `Ok`
//! stays deleted unless its re-creation started. Torn unsynced tails (every file keeping part of
//! what it had not synced) are checked the same way.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::{MemStorage, Position, Store};
use support::crash::{Points, cut_everywhere_after, torn_image, unsynced_tail};
use support::workload::Rng;

const TOPICS: [&str; 2] = ["a", "b"];
const NAMES: [&str; 2] = ["x", "y"];
const ENTRIES: usize = 48;

type Key = (String, String);
/// `None`: the cursor does not exist.
type State = Option<BTreeSet<Position>>;

#[derive(Debug, Default, Clone)]
struct Model {
    entries: BTreeMap<String, Vec<Position>>,
    candidates: BTreeMap<Key, Vec<State>>,
    truth: BTreeMap<Key, BTreeSet<Position>>,
    writes: u64,
    error: Option<String>,
    deltas: u64,
    rebases: u64,
}

impl Model {
    fn start(&mut self, k: &Key, s: State) {
        self.candidates.entry(k.clone()).or_default().push(s);
    }
    fn done(&mut self, k: &Key, s: State) {
        self.candidates.insert(k.clone(), vec![s]);
    }
}

/// Prepared with the power on: topics with their entries, cursors created and flushed once.
fn prepare(disk: &MemStorage, segment_bytes: u64) -> Model {
    let mut m = Model::default();
    let store = Store::open_with_storage(
        Arc::new(disk.clone()),
        support::config::store(4, segment_bytes),
    )
    .unwrap();
    for t in TOPICS {
        let topic = store.topic(t).unwrap();
        let ps: Vec<Position> = (0..ENTRIES)
            .map(|i| topic.append(format!("{t}{i}").as_bytes()).unwrap())
            .collect();
        topic.sync().unwrap();
        m.entries.insert(t.into(), ps);
        for n in NAMES {
            topic.open_cursor(n, support::topic::earliest()).unwrap();
            let k = (t.to_string(), n.to_string());
            m.done(&k, Some(BTreeSet::new()));
            m.truth.insert(k, BTreeSet::new());
        }
    }
    store.close().unwrap();
    m
}

fn workload(disk: &MemStorage, mut m: Model, segment_bytes: u64, seed: u64) -> Model {
    let mut rng = Rng::new(seed);
    let r = (|| -> ackstore::Result<()> {
        for _reopen in 0..2 {
            let store = Store::open_with_storage(
                Arc::new(disk.clone()),
                support::config::store(4, segment_bytes),
            )?;
            let mut topics = BTreeMap::new();
            let mut cursors = BTreeMap::new();
            for t in TOPICS {
                let topic = store.topic(t)?;
                for n in NAMES {
                    cursors.insert(
                        (t.to_string(), n.to_string()),
                        topic.open_cursor(n, support::topic::earliest())?,
                    );
                }
                topics.insert(t.to_string(), topic);
            }
            for _round in 0..7 {
                let keys: Vec<Key> = cursors.keys().cloned().collect();
                for k in &keys {
                    let ps = m.entries[&k.0].clone();
                    for _ in 0..3 {
                        let p = ps[rng.index(ps.len())];
                        let cur = &cursors[k];
                        if cur.mark_delete_position()?.is_some_and(|md| p <= md) {
                            continue;
                        }
                        cur.ack(p)?;
                        m.truth.get_mut(k).unwrap().insert(p);
                    }
                }
                let k = &keys[rng.index(keys.len())];
                match rng.below(6) {
                    0 => {
                        let ps = m.entries[&k.0].clone();
                        let p = ps[rng.index(ps.len() / 2)];
                        let cur = &cursors[k];
                        if cur.mark_delete_position()?.is_none_or(|md| p > md) {
                            cur.ack_cumulative(p)?;
                            m.truth
                                .get_mut(k)
                                .unwrap()
                                .extend(ps.iter().filter(|q| **q <= p));
                        }
                    }
                    1 => {
                        // A seek: everything before `p` acked, nothing from it on.
                        let ps = m.entries[&k.0].clone();
                        let p = ps[rng.index(ps.len())];
                        let after: BTreeSet<Position> =
                            ps.iter().copied().filter(|q| *q < p).collect();
                        m.truth.insert(k.clone(), after.clone());
                        m.start(k, Some(after.clone()));
                        m.writes += 1;
                        cursors[k].seek(p)?;
                        m.done(k, Some(after));
                    }
                    2 => {
                        cursors.remove(k);
                        m.start(k, None);
                        m.writes += 1;
                        topics[&k.0].delete_cursor(&k.1)?;
                        m.done(k, None);
                        m.start(k, Some(BTreeSet::new()));
                        let cur = topics[&k.0].open_cursor(&k.1, support::topic::earliest())?;
                        m.done(k, Some(BTreeSet::new()));
                        m.truth.insert(k.clone(), BTreeSet::new());
                        cursors.insert(k.clone(), cur);
                    }
                    3 => {
                        // Topic closed and reopened (a broker unloading it).
                        let t = k.0.clone();
                        let ks: Vec<Key> = cursors.keys().filter(|c| c.0 == t).cloned().collect();
                        for c in &ks {
                            m.start(c, Some(m.truth[c].clone()));
                        }
                        m.writes += 1;
                        for c in &ks {
                            cursors.remove(c).unwrap().close()?;
                            m.done(c, Some(m.truth[c].clone()));
                        }
                        topics[&t].close()?;
                        let topic = store.topic(&t)?;
                        for c in ks {
                            cursors.insert(
                                c.clone(),
                                topic.open_cursor(&c.1, support::topic::earliest())?,
                            );
                        }
                        topics.insert(t, topic);
                    }
                    _ => {}
                }
                let keys: Vec<Key> = cursors.keys().cloned().collect();
                for c in &keys {
                    m.start(c, Some(m.truth[c].clone()));
                }
                m.writes += 1;
                store.flush_all()?;
                for c in &keys {
                    m.done(c, Some(m.truth[c].clone()));
                }
            }
            drop(cursors);
            drop(topics);
            let stats = store.journal_stats();
            m.deltas += stats.deltas;
            m.rebases += stats.rebases;
            store.close()?;
        }
        Ok(())
    })();
    m.error = r.err().map(|e| e.to_string());
    m
}

fn check(image: &MemStorage, m: &Model, segment_bytes: u64, what: &str) {
    let store = Store::open_with_storage(
        Arc::new(image.clone()),
        support::config::store(4, segment_bytes),
    )
    .unwrap_or_else(|e| panic!("{what}: open: {e}"));
    for t in TOPICS {
        let topic = store
            .topic(t)
            .unwrap_or_else(|e| panic!("{what}: topic {t}: {e}"));
        let names = topic.cursor_names();
        for n in NAMES {
            let k = (t.to_string(), n.to_string());
            let cands = &m.candidates[&k];
            if !names.iter().any(|x| x == n) {
                assert!(cands.contains(&None), "{what}: {k:?} vanished");
                continue;
            }
            let cur = topic
                .open_cursor(n, support::topic::earliest())
                .unwrap_or_else(|e| panic!("{what}: {k:?}: {e}"));
            let mut got = BTreeSet::new();
            for p in &m.entries[t] {
                if cur
                    .is_acked(*p)
                    .unwrap_or_else(|e| panic!("{what}: {k:?} {p}: {e}"))
                {
                    got.insert(*p);
                }
            }
            if !cands.iter().any(|c| c.as_ref() == Some(&got)) {
                let best = cands.iter().flatten().last().cloned().unwrap_or_default();
                panic!(
                    "{what}: {k:?} recovered {} acks matching none of {} candidates; invented vs \
                     the newest: {:?}; lost vs the newest: {:?}",
                    got.len(),
                    cands.len(),
                    got.difference(&best).collect::<Vec<_>>(),
                    best.difference(&got).collect::<Vec<_>>(),
                );
            }
        }
    }
    store
        .close()
        .unwrap_or_else(|e| panic!("{what}: close: {e}"));
}

fn run(segment_bytes: u64, seed: u64, step: usize) {
    let clean = cut_everywhere_after(
        Points { from: 0, step },
        |disk| prepare(disk, segment_bytes),
        |disk, m| workload(disk, m, segment_bytes, seed),
        |disk, cut, m| {
            check(
                &disk.durable_image(),
                &m,
                segment_bytes,
                &format!("{cut:?}"),
            )
        },
    );
    assert_eq!(clean.result.error, None, "the run without a cut fails");
    let m = clean.result;
    assert!(
        m.writes >= 14 && m.deltas > 10,
        "writes {}, deltas {}",
        m.writes,
        m.deltas
    );
    if segment_bytes < 1000 {
        assert!(m.rebases > 0, "rebases {}", m.rebases);
    }
}

#[test]
fn every_cut_of_store_delta_flushes_seeks_deletes_and_reopens_recovers_a_written_state() {
    run(2048, 3, 1);
}

#[test]
fn the_same_with_segments_rolling_over_every_tick() {
    run(200, 4, 1);
}

#[test]
fn torn_unsynced_tails_of_store_delta_flushes_recover_a_written_state() {
    let segment_bytes = 600;
    let mut images = 0;
    cut_everywhere_after(
        Points { from: 0, step: 2 },
        |disk| prepare(disk, segment_bytes),
        |disk, m| workload(disk, m, segment_bytes, 5),
        |disk, cut, m| {
            let tail = unsynced_tail(disk);
            for keep in (1..tail).step_by((tail / 6).max(1)) {
                check(
                    &torn_image(disk, |_| keep),
                    &m,
                    segment_bytes,
                    &format!("{cut:?}, {keep} of {tail}"),
                );
                images += 1;
            }
        },
    );
    assert!(images > 200, "{images}");
}

//! Power cuts at every step of a run of flushes mixing batch-index acks with whole-entry acks,
//! `ack_many` and `skip_entries`, in single-entry mode and across cursor-ledger rollovers: the
//! recovered state is the last `Ok` flush's or the one in flight, never a message more, never
//! one lost once flushed.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::{
    AppendMeta, Cursor, CursorConfig, InitialPosition, LedgerConfig, ManagedLedger, PersistMode,
    Position,
};
use support::crash::{Cut, Points, cut_everywhere_after, torn_image, unsynced_tail};
use support::topic::{at, config};
use support::workload::Rng;

type Model = BTreeMap<Position, BTreeSet<u32>>;

fn observed(c: &Cursor, entries: &[(Position, u32)]) -> Model {
    let mut m = Model::new();
    for &(pos, size) in entries {
        for i in 0..size {
            if c.is_batch_index_acked(pos, i).unwrap() {
                m.entry(pos).or_default().insert(i);
            }
        }
    }
    m
}

fn full(m: &Model, pos: Position, n: u32) -> bool {
    m.get(&pos).is_some_and(|s| s.len() == n as usize)
}

fn run(cursor: CursorConfig, seed: u64) {
    let ledgers = LedgerConfig {
        cursor,
        ..config(6)
    };
    let sizes: Vec<u32> = (0..24).map(|i| 2 + (i % 4)).collect();
    let clean = cut_everywhere_after(
        Points::EVERY,
        |disk| {
            let topic =
                ManagedLedger::open_with_storage(Arc::new(disk.clone()), ledgers.clone()).unwrap();
            let e: Vec<(Position, u32)> = sizes
                .iter()
                .map(|&n| {
                    let meta = AppendMeta {
                        num_messages: n,
                        timestamp: 1,
                    };
                    (topic.append_with(b"b", meta).unwrap(), n)
                })
                .collect();
            topic.sync().unwrap();
            let c = topic
                .open_cursor("sub", at(InitialPosition::Earliest, false))
                .unwrap();
            (topic, c, e)
        },
        |_, (topic, c, e)| {
            let mut rng = Rng::new(seed);
            let mut model = Model::new();
            // (model at the flush, its result)
            let mut flushes = vec![(Model::new(), Ok(()))];
            for _round in 0..6 {
                for _ in 0..5 {
                    let k = rng.index(e.len());
                    let (pos, n) = e[k];
                    let i = rng.below(u64::from(n)) as u32;
                    if c.ack_batch_index(pos, i, n).unwrap() {
                        model.entry(pos).or_default().insert(i);
                    }
                }
                match rng.below(3) {
                    0 => {
                        let pick: Vec<_> = (0..3).map(|_| e[rng.index(e.len())]).collect();
                        let positions: Vec<_> = pick.iter().map(|p| p.0).collect();
                        c.ack_many(&positions).unwrap();
                        for (p, n) in pick {
                            model.insert(p, (0..n).collect());
                        }
                    }
                    1 => {
                        let want = rng.below(2) + 1;
                        let mut left = want;
                        let got = c.skip_entries(want).unwrap();
                        for &(p, n) in &e {
                            if left == 0 {
                                break;
                            }
                            if !full(&model, p, n) {
                                left -= 1;
                            }
                            model.insert(p, (0..n).collect());
                        }
                        assert_eq!(got, want - left);
                    }
                    _ => {}
                }
                let r = c.flush();
                flushes.push((model.clone(), r));
            }
            (topic, c, e, flushes)
        },
        |disk, Cut { n, .. }, (topic, c, e, flushes)| {
            drop(c);
            std::mem::forget(topic);
            let last_ok = flushes.iter().rposition(|(_, r)| r.is_ok()).unwrap();
            let allowed: Vec<&Model> = flushes[last_ok..].iter().take(2).map(|(m, _)| m).collect();
            let tail = unsynced_tail(disk);
            let torn = (0..=tail).map(|k| (k, torn_image(disk, |u| u.min(k))));
            for (keep, image) in std::iter::once((0, disk.durable_image())).chain(torn) {
                let topic =
                    ManagedLedger::open_with_storage(Arc::new(image), ledgers.clone()).unwrap();
                let c = topic
                    .open_cursor("sub", at(InitialPosition::Earliest, false))
                    .unwrap();
                let got = observed(&c, &e);
                assert!(
                    allowed.contains(&&got),
                    "cut at {n}, {keep} tail bytes kept, last Ok flush {last_ok}: {got:?} \
                     not in {allowed:?}"
                );
                topic.close().unwrap();
            }
        },
    );
    assert!(clean.result.3.iter().all(|(_, r)| r.is_ok()));
}

#[test]
fn power_cuts_in_flushes_with_batch_state_skips_and_many_acks_in_single_entry_mode() {
    for seed in [1, 2, 3] {
        run(
            CursorConfig {
                persist_mode: PersistMode::SingleEntry,
                ..CursorConfig::default()
            },
            seed,
        );
    }
}

#[test]
fn power_cuts_in_flushes_with_batch_state_skips_and_many_acks_across_rollovers() {
    for seed in [1, 2, 3] {
        run(
            CursorConfig {
                ..CursorConfig::default()
            },
            seed,
        );
    }
}

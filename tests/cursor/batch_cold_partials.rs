//! Cold partial entries (evicted to the cursor ledger) through the cursor's resets and its
//! cursor ledger's rollovers: full seeks, seeks by index into a batch, rewinds and cumulative
//! acks mixed with batch-index acks under a tiny budget, with a flush and a reopen every round,
//! in both persist modes, against a model of acknowledged messages; on a topic opened alone and
//! on a store's topic (cold partial entries are batch records in the store's journal).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::{
    AppendMeta, Cursor, CursorConfig, InitialPosition, LedgerConfig, MemStorage, PersistMode,
    Position,
};
use support::topic::{Host, at, config, on_each_host, open_hosted};
use support::workload::Rng;

const PER_LEDGER: u64 = 6;

fn tiny(mode: PersistMode) -> LedgerConfig {
    LedgerConfig {
        cursor: CursorConfig {
            lru_capacity_bytes: 256,
            persist_mode: mode,
            ..CursorConfig::default()
        },
        ..config(PER_LEDGER)
    }
}

/// Entries with their batch size and first message index.
struct Topic {
    entries: Vec<(Position, u32, u64)>,
}

type Model = BTreeMap<Position, BTreeSet<u32>>;

fn check(c: &Cursor, topic: &Topic, model: &Model, what: &str) {
    for &(pos, size, _) in &topic.entries {
        let acked = model.get(&pos);
        for i in 0..size {
            assert_eq!(
                c.is_batch_index_acked(pos, i).unwrap(),
                acked.is_some_and(|s| s.contains(&i)),
                "{what}: {pos} message {i}"
            );
        }
        assert_eq!(
            c.is_acked(pos).unwrap(),
            acked.is_some_and(|s| s.len() == size as usize),
            "{what}: {pos}"
        );
    }
}

fn run(host: Host, mode: PersistMode, seed: u64) {
    let disk = MemStorage::new();
    let open = || open_hosted(host, Arc::new(disk.clone()), &tiny(mode)).unwrap();
    let mut rng = Rng::new(seed);
    let topic = {
        let ml = open();
        let mut next_index = 0;
        let entries = (0..120)
            .map(|i| {
                let n = 2 + rng.below(20) as u32;
                let meta = AppendMeta {
                    num_messages: n,
                    timestamp: 1000 + i,
                };
                let p = ml.append_with(b"b", meta).unwrap();
                let first = next_index;
                next_index += u64::from(n);
                (p, n, first)
            })
            .collect();
        ml.sync().unwrap();
        ml.close().unwrap();
        Topic { entries }
    };
    let all = |size: u32| (0..size).collect::<BTreeSet<_>>();
    let mut model = Model::new();
    for round in 0..8 {
        let ml = open();
        let c = ml
            .open_cursor("sub", at(InitialPosition::Earliest, false))
            .unwrap();
        let what = format!("{mode:?} seed {seed} round {round}");
        check(&c, &topic, &model, &format!("{what}, after reopen"));
        for step in 0..200 {
            let k = rng.index(topic.entries.len());
            let (pos, size, first) = topic.entries[k];
            match rng.below(100) {
                0..=84 => {
                    let i = rng.below(u64::from(size)) as u32;
                    c.ack_batch_index(pos, i, size).unwrap();
                    model.entry(pos).or_default().insert(i);
                }
                85..=92 => {
                    c.ack(pos).unwrap();
                    model.insert(pos, all(size));
                }
                93..=94 => {
                    c.seek(pos).unwrap();
                    model.clear();
                    for &(p, n, _) in &topic.entries[..k] {
                        model.insert(p, all(n));
                    }
                }
                95..=96 => {
                    let skip = rng.below(u64::from(size)) as u32;
                    c.seek_by_index(first + u64::from(skip)).unwrap();
                    model.clear();
                    for &(p, n, _) in &topic.entries[..k] {
                        model.insert(p, all(n));
                    }
                    if skip > 0 {
                        model.insert(pos, (0..skip).collect());
                    }
                }
                97..=98 => {
                    c.rewind().unwrap();
                }
                _ if c.mark_delete_position().unwrap().is_none_or(|m| pos > m) => {
                    c.ack_cumulative(pos).unwrap();
                    for &(p, n, _) in &topic.entries[..=k] {
                        model.insert(p, all(n));
                    }
                }
                _ => {}
            }
            if step % 50 == 49 {
                check(&c, &topic, &model, &format!("{what}, step {step}"));
            }
        }
        c.flush().unwrap();
        check(&c, &topic, &model, &format!("{what}, after flush"));
        let s = c.stats().unwrap();
        assert!(s.batch_evictions > 0 || round > 0, "{s:?}");
        ml.close().unwrap();
    }
}

#[test]
fn cold_partial_entries_survive_seeks_rollovers_and_reopens_in_multi_entry_mode() {
    for seed in 0..4 {
        on_each_host(|host| run(host, PersistMode::MultiEntry, seed));
    }
}

#[test]
fn cold_partial_entries_survive_seeks_rollovers_and_reopens_in_single_entry_mode() {
    for seed in 0..4 {
        on_each_host(|host| run(host, PersistMode::SingleEntry, seed));
    }
}

/// A power cut at every step of: batch-index acks that evict partial entries to the cursor
/// ledger (unsynced kind-5 entries), a seek by index into the middle of a batch, more such
/// acks, a flush, with rollovers of the cursor ledger on the way. What recovers is the state
/// flushed before, the seek's state, or the final one; never a mix, never an ack the seek
/// cleared; and the final one once the flush returned `Ok`.
#[test]
fn a_power_cut_around_a_seek_over_cold_partial_entries_recovers_a_whole_state() {
    on_each_host(power_cut_around_a_seek);
}

fn power_cut_around_a_seek(host: Host) {
    use support::crash::{Cut, Points, cut_everywhere_after, torn_image, unsynced_tail};
    let cfg = tiny(PersistMode::MultiEntry);
    let mut rng = Rng::new(5);
    let sizes: Vec<u32> = (0..60).map(|_| 2 + rng.below(30) as u32).collect();
    let plan: Vec<(usize, u32)> = (0..60)
        .map(|_| {
            let k = rng.index(sizes.len());
            (k, rng.below(u64::from(sizes[k])) as u32)
        })
        .collect();
    let target = 20;
    let skip = sizes[target] / 2;
    let first_index: u64 = sizes[..target].iter().map(|&n| u64::from(n)).sum();
    type Acked = BTreeMap<Position, BTreeSet<u32>>;
    let ack = |c: &Cursor, m: &mut Acked, e: &[(Position, u32)], k: usize, i: u32| {
        let (p, n) = e[k];
        if m.get(&p).is_some_and(|s| s.len() == n as usize) {
            return true;
        }
        let ok = c.ack_batch_index(p, i, n).is_ok();
        if ok {
            m.entry(p).or_default().insert(i);
        }
        ok
    };
    let clean = cut_everywhere_after(
        Points::every_in_release(2),
        |disk| {
            let ml = open_hosted(host, Arc::new(disk.clone()), &cfg.clone()).unwrap();
            let e: Vec<(Position, u32)> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| {
                    let meta = AppendMeta {
                        num_messages: n,
                        timestamp: 1000 + i as u64,
                    };
                    (ml.append_with(b"b", meta).unwrap(), n)
                })
                .collect();
            ml.sync().unwrap();
            let c = ml
                .open_cursor("sub", at(InitialPosition::Earliest, false))
                .unwrap();
            let mut before = Acked::new();
            for &(k, i) in &plan[..20] {
                assert!(ack(&c, &mut before, &e, k, i));
            }
            c.flush().unwrap();
            (ml, c, e, before)
        },
        |_, (ml, c, e, before)| {
            let mut m = before.clone();
            let mut ok = plan[20..40].iter().all(|&(k, i)| ack(&c, &mut m, &e, k, i));
            let seeked = ok && c.seek_by_index(first_index + u64::from(skip)).is_ok();
            let mut at_seek = Acked::new();
            for &(p, n) in &e[..target] {
                at_seek.insert(p, (0..n).collect());
            }
            at_seek.insert(e[target].0, (0..skip).collect());
            let mut after = at_seek.clone();
            ok = seeked
                && plan[40..]
                    .iter()
                    .all(|&(k, i)| ack(&c, &mut after, &e, k, i));
            let flushed = ok && c.flush().is_ok();
            (ml, c, e, before, at_seek, after, seeked, flushed)
        },
        |disk, Cut { n, .. }, (ml, c, e, before, at_seek, after, seeked, flushed)| {
            drop(c);
            std::mem::forget(ml);
            let tail = unsynced_tail(disk);
            let torn = (0..=tail)
                .step_by(11)
                .map(|k| (k, torn_image(disk, |u| u.min(k))));
            for (keep, image) in std::iter::once((0, disk.durable_image())).chain(torn) {
                let what = format!("cut at {n}, {keep} tail bytes kept");
                let ml = open_hosted(host, Arc::new(image), &cfg.clone()).unwrap();
                let c = ml
                    .open_cursor("sub", at(InitialPosition::Earliest, false))
                    .unwrap();
                let mut got = Acked::new();
                for &(pos, size) in &e {
                    for i in 0..size {
                        if c.is_batch_index_acked(pos, i).unwrap() {
                            got.entry(pos).or_default().insert(i);
                        }
                    }
                }
                if flushed {
                    assert_eq!(got, after, "{what}: flushed, then lost");
                } else if seeked {
                    assert!(got == at_seek || got == after, "{what}: {got:?}");
                } else {
                    assert!(got == before || got == at_seek, "{what}: {got:?}");
                }
                ml.close().unwrap();
            }
        },
    );
    assert!(clean.result.7, "the clean run flushed");
    assert!(clean.total > 20, "{} storage operations", clean.total);
}

/// Bad bytes anywhere in a topic whose cursor keeps cold partial entries (kind-5 entries in its
/// cursor ledger, loaded on use): opening the topic and the cursor and touching every message is
/// an error or a state within the truth, never a panic and never an invented ack.
#[test]
fn flipped_bytes_under_cold_partial_entries_are_errors_or_a_subset_never_a_panic() {
    on_each_host(flipped_bytes_under_cold_partial_entries);
}

fn flipped_bytes_under_cold_partial_entries(host: Host) {
    let cfg = tiny(PersistMode::MultiEntry);
    let disk = MemStorage::new();
    let mut rng = Rng::new(9);
    let mut truth: BTreeMap<Position, BTreeSet<u32>> = BTreeMap::new();
    let entries: Vec<(Position, u32)> = {
        let ml = open_hosted(host, Arc::new(disk.clone()), &cfg.clone()).unwrap();
        let e: Vec<(Position, u32)> = (0..40)
            .map(|i| {
                let n = 4 + rng.below(20) as u32;
                let meta = AppendMeta {
                    num_messages: n,
                    timestamp: 1000 + i,
                };
                (ml.append_with(b"b", meta).unwrap(), n)
            })
            .collect();
        ml.sync().unwrap();
        let c = ml
            .open_cursor("sub", at(InitialPosition::Earliest, false))
            .unwrap();
        for &(p, n) in e.iter().skip(1) {
            for i in (0..n).step_by(3) {
                c.ack_batch_index(p, i, n).unwrap();
                truth.entry(p).or_default().insert(i);
            }
        }
        c.flush().unwrap();
        assert!(c.stats().unwrap().batch_cold_partitions > 0);
        ml.close().unwrap();
        e
    };
    let mut names = Vec::new();
    let _ = disk.crash_image(|name, d, _| {
        names.push((name.to_owned(), d.to_vec()));
        d.to_vec()
    });
    let mut opened = 0;
    for (name, bytes) in &names {
        for off in (0..bytes.len()).step_by(5) {
            let image = disk.durable_image();
            let mut bad = bytes.clone();
            bad[off] ^= 0x10;
            image.set_bytes(name, bad).unwrap();
            let Ok(ml) = open_hosted(host, Arc::new(image), &cfg.clone()) else {
                continue;
            };
            let Ok(c) = ml.open_cursor("sub", at(InitialPosition::Earliest, false)) else {
                continue;
            };
            opened += 1;
            for &(p, n) in &entries {
                for i in 0..n {
                    if let Ok(true) = c.is_batch_index_acked(p, i) {
                        assert!(
                            truth.get(&p).is_some_and(|s| s.contains(&i)),
                            "{name} byte {off} flipped: {p} message {i} invented"
                        );
                    }
                }
            }
            let _ = c.read_entries(1000);
        }
    }
    assert!(opened > 0);
}

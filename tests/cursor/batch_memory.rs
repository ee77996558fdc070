//! Bounded memory with batch-index acks (invariant 3): partial entries are charged to the ack
//! set's LRU budget and evicted to the cursor ledger past it, so a consumer that acks one
//! message of every batch keeps the cursor within `lru_capacity_bytes` plus one partition,
//! whatever the backlog; after a reopen, and with a power cut at every step, the partial
//! entries are what a model says. On a topic opened alone and on a store's topic (evicted
//! partial entries go to the store's journal).

use crate::support;

use std::sync::Arc;

use ackstore::{
    AppendMeta, CursorConfig, InitialPosition, LedgerConfig, ManagedLedger, MemStorage,
};
use support::topic::{Host, Hosted, at, config, on_each_host, open_hosted};

#[test]
fn partial_entries_stay_within_the_lru_budget() {
    on_each_host(partial_entries_within_the_budget);
}

fn partial_entries_within_the_budget(host: Host) {
    let budget = 4096;
    let cfg = LedgerConfig {
        cursor: CursorConfig {
            lru_capacity_bytes: budget,
            ..CursorConfig::default()
        },
        ..config(1000)
    };
    let topic = open_hosted(host, Arc::new(MemStorage::new()), &cfg).unwrap();
    let positions: Vec<_> = (0..20_000)
        .map(|_| {
            topic
                .append_with(
                    b"b",
                    AppendMeta {
                        num_messages: 10,
                        timestamp: 1,
                    },
                )
                .unwrap()
        })
        .collect();
    topic.sync().unwrap();
    let c = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    for &p in positions.iter().skip(1).step_by(2) {
        c.ack_batch_index(p, 3, 10).unwrap();
    }
    c.flush().unwrap();
    let s = c.stats().unwrap();
    let a = &s.ackset;
    let one_partition = a.peak_resident_bytes.saturating_sub(budget);
    assert!(
        a.resident_bytes + a.charged_bytes <= budget + one_partition.max(16 << 10),
        "{} partial entries take {} bytes against a budget of {budget}: {a:?}",
        s.partial_entries,
        s.batch_index_bytes,
    );
    topic.close().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Model tests under a tiny budget.

use std::collections::{BTreeMap, BTreeSet};

use ackstore::internals::ackset::MAX_PARTITION_BYTES;
use ackstore::{Cursor, PersistMode, Position};
use support::crash::{Cut, Points, cut_everywhere_after, torn_image, unsynced_tail};
use support::workload::{Rng, seed_from_env};

/// Entries per data ledger: every ledger is its own ack-set partition, so a few hundred
/// entries make dozens of partitions of partial entries.
const PER_LEDGER: u64 = 6;

/// Appends one entry per batch size and syncs them (readers see synced entries only); returns
/// the positions and sizes.
fn append_batches(topic: &ManagedLedger, sizes: &[u32]) -> Vec<(Position, u32)> {
    let entries = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let meta = AppendMeta {
                num_messages: n,
                timestamp: 1000 + i as u64,
            };
            (topic.append_with(b"batch", meta).unwrap(), n)
        })
        .collect();
    topic.sync().unwrap();
    entries
}

fn tiny(budget: usize, mode: PersistMode) -> LedgerConfig {
    LedgerConfig {
        cursor: CursorConfig {
            lru_capacity_bytes: budget,
            persist_mode: mode,
            ..CursorConfig::default()
        },
        ..config(PER_LEDGER)
    }
}

/// Acknowledged messages per entry (a whole-entry ack as every message).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Model {
    acked: BTreeMap<Position, BTreeSet<u32>>,
}

impl Model {
    fn ack(&mut self, pos: Position, index: u32) {
        self.acked.entry(pos).or_default().insert(index);
    }
    fn ack_whole(&mut self, pos: Position, size: u32) {
        self.acked.insert(pos, (0..size).collect());
    }
    fn entry_acked(&self, pos: Position, size: u32) -> bool {
        self.acked
            .get(&pos)
            .is_some_and(|s| s.len() == size as usize)
    }
}

/// Resident ack state (ack partitions plus partial entries) within the budget plus one
/// partition, as invariant 3 states it.
fn assert_within_budget(c: &Cursor, budget: usize, what: &str) {
    let s = c.stats().unwrap();
    let a = &s.ackset;
    assert_eq!(a.pinned_partitions, 0, "{what}");
    assert_eq!(a.charged_bytes as u64, s.batch_index_bytes, "{what}");
    assert!(
        a.resident_bytes + a.charged_bytes <= budget + MAX_PARTITION_BYTES,
        "{what}: {} resident + {} partial bytes against a budget of {budget}: {s:?}",
        a.resident_bytes,
        a.charged_bytes,
    );
}

/// Checks every message of `entries`, mark-delete, what a full read delivers (with its
/// acknowledged batch indexes) and the partial-entry count against `model`.
fn check(c: &Cursor, entries: &[(Position, u32)], model: &Model, budget: usize, what: &str) {
    for &(pos, size) in entries {
        for i in 0..size {
            let want = model.acked.get(&pos).is_some_and(|s| s.contains(&i));
            assert_eq!(
                c.is_batch_index_acked(pos, i).unwrap(),
                want,
                "{what}: {pos} message {i}"
            );
        }
        assert_within_budget(c, budget, what);
    }
    let mark = entries
        .iter()
        .take_while(|&&(p, n)| model.entry_acked(p, n))
        .last()
        .map(|e| e.0);
    assert_eq!(c.mark_delete_position().unwrap(), mark, "{what}");
    c.rewind().unwrap();
    let mut got = Vec::new();
    loop {
        let read = c.read_entries(7).unwrap();
        assert_within_budget(c, budget, what);
        if read.is_empty() {
            break;
        }
        got.extend(read.into_iter().map(|e| {
            let acked = e.acked_batch_indexes.as_ref();
            (e.position, acked.map(|b| b.iter().collect::<BTreeSet<_>>()))
        }));
    }
    let want: Vec<_> = entries
        .iter()
        .filter(|&&(p, n)| !model.entry_acked(p, n))
        .map(|&(p, _)| (p, model.acked.get(&p).cloned()))
        .collect();
    assert_eq!(got, want, "{what}");
    let partial = want.iter().filter(|(_, a)| a.is_some()).count() as u64;
    assert_eq!(c.stats().unwrap().partial_entries, partial, "{what}");
}

fn sizes(rng: &mut Rng, n: usize) -> Vec<u32> {
    (0..n).map(|_| 2 + rng.below(40) as u32).collect()
}

fn earliest(topic: &ManagedLedger) -> Cursor {
    topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap()
}

/// Rounds of random batch-index acks (mixed batch sizes, some whole-entry acks, a rare
/// cumulative ack) over dozens of partitions with a budget far below their partial entries:
/// the budget holds after every step, every message matches the model after every round's
/// flush and reopen, and partial entries really were evicted and loaded back.
fn random_acks_under_a_tiny_budget(mode: PersistMode, seed: u64) {
    on_each_host(|host| random_acks_on(host, mode, seed));
}

fn random_acks_on(host: Host, mode: PersistMode, seed: u64) {
    let budget = 2048;
    let cfg = tiny(budget, mode);
    let mut rng = Rng::new(seed);
    let sizes = sizes(&mut rng, 240);
    let run = |topic_open: &dyn Fn() -> Hosted, stop: &dyn Fn(Hosted)| {
        let mut rng = Rng::new(seed ^ 0x5eed);
        let topic = topic_open();
        let entries = append_batches(&topic, &sizes);
        topic.sync().unwrap();
        let mut model = Model::default();
        let mut evictions = 0;
        let mut loads = 0;
        let mut topic = Some(topic);
        for round in 0..4 {
            let t = topic.take().unwrap();
            let c = earliest(&t);
            for step in 0..300u32 {
                let (pos, size) = entries[rng.index(entries.len())];
                let what = format!("seed {seed}, round {round}, step {step}");
                match rng.below(100) {
                    0..=84 => {
                        let i = rng.below(u64::from(size)) as u32;
                        let mark = c.mark_delete_position().unwrap();
                        if mark.is_none_or(|m| pos > m) && !model.entry_acked(pos, size) {
                            c.ack_batch_index(pos, i, size).unwrap();
                            model.ack(pos, i);
                        }
                    }
                    85..=97 => {
                        c.ack(pos).unwrap();
                        model.ack_whole(pos, size);
                    }
                    _ => {
                        // Within the first sixth, so partial entries stay for the rest.
                        let (pos, _) = entries[rng.index(entries.len() / 6)];
                        if c.mark_delete_position().unwrap().is_none_or(|m| pos > m) {
                            c.ack_cumulative(pos).unwrap();
                            for &(p, n) in entries.iter().take_while(|e| e.0 <= pos) {
                                model.ack_whole(p, n);
                            }
                        }
                    }
                }
                assert_within_budget(&c, budget, &what);
                if step.is_multiple_of(97) {
                    c.flush().unwrap();
                    assert_within_budget(&c, budget, &what);
                }
            }
            let s = c.stats().unwrap();
            evictions += s.batch_evictions;
            loads += s.batch_loads;
            check(
                &c,
                &entries,
                &model,
                budget,
                &format!("seed {seed}, round {round}"),
            );
            c.flush().unwrap();
            drop(c);
            stop(t);
            let t = topic_open();
            let c = earliest(&t);
            let what = format!("seed {seed}, after reopen {round}");
            assert_within_budget(&c, budget, &what);
            check(&c, &entries, &model, budget, &what);
            drop(c);
            topic = Some(t);
        }
        stop(topic.take().unwrap());
        assert!(
            evictions > 10 && loads > 10,
            "seed {seed}: {evictions} evictions, {loads} loads"
        );
    };
    eprintln!("backend: in-memory disk");
    let current = std::cell::RefCell::new(MemStorage::new());
    run(
        &|| {
            let image = current.borrow().durable_image();
            *current.borrow_mut() = image.clone();
            open_hosted(host, Arc::new(image), &cfg.clone()).unwrap()
        },
        &std::mem::forget,
    );
    let dir = tempfile::tempdir().unwrap();
    eprintln!("backend: real files in {}", dir.path().display());
    run(
        &|| {
            let files = ackstore::FileStorage::open(dir.path(), true).unwrap();
            open_hosted(host, Arc::new(files), &cfg).unwrap()
        },
        &|t| t.close().unwrap(),
    );
}

#[test]
fn random_batch_acks_under_a_tiny_budget_match_the_model_in_multi_entry_mode() {
    random_acks_under_a_tiny_budget(PersistMode::MultiEntry, seed_from_env("ACKSTORE_SEED"));
}

#[test]
fn random_batch_acks_under_a_tiny_budget_match_the_model_in_single_entry_mode() {
    random_acks_under_a_tiny_budget(PersistMode::SingleEntry, seed_from_env("ACKSTORE_SEED") ^ 1);
}

/// A reopened cursor keeps its partial entries cold: only their locations are in memory until
/// a read or an ack touches them, and the first touch loads just that partition. Recovery reads
/// only a partition that reaches past its ledger's last entry (to drop entries a power cut
/// lost), here the second one.
#[test]
fn a_reopened_cursor_loads_partial_entries_only_when_touched() {
    on_each_host(loads_only_when_touched);
}

fn loads_only_when_touched(host: Host) {
    const SPAN: usize = 1 << 16;
    let cfg = config(2 * SPAN as u64);
    let disk = MemStorage::new();
    let topic = open_hosted(host, Arc::new(disk.clone()), &cfg.clone()).unwrap();
    let entries = append_batches(&topic, &vec![4; SPAN + 10]);
    topic.sync().unwrap();
    let c = earliest(&topic);
    for &(p, n) in entries[1..300].iter().chain(&entries[SPAN + 1..]) {
        c.ack_batch_index(p, 1, n).unwrap();
    }
    c.close().unwrap();
    topic.close().unwrap();
    let topic = open_hosted(host, Arc::new(disk), &cfg).unwrap();
    let c = earliest(&topic);
    let s = c.stats().unwrap();
    assert_eq!(s.partial_entries, 299 + 9);
    assert_eq!((s.batch_cold_partitions, s.batch_loads), (1, 1), "{s:?}");
    let resident = s.batch_index_bytes;
    let read = c.read_entries(3).unwrap();
    assert_eq!(read[0].acked_batch_indexes, None);
    assert_eq!(
        read[1]
            .acked_batch_indexes
            .as_ref()
            .map(|b| b.iter().collect::<Vec<_>>()),
        Some(vec![1])
    );
    let s = c.stats().unwrap();
    assert_eq!((s.batch_cold_partitions, s.batch_loads), (0, 2), "{s:?}");
    assert!(s.batch_index_bytes > resident);
    topic.close().unwrap();
}

/// A reader has no cursor ledger: its partial entries past the budget are kept encoded in
/// memory, so the resident part keeps to the budget, and every message still reads right.
#[test]
fn a_reader_evicts_partial_entries_within_its_budget_and_keeps_them() {
    let budget = 1024;
    let topic = ManagedLedger::open_with_storage(
        Arc::new(MemStorage::new()),
        tiny(budget, PersistMode::MultiEntry),
    )
    .unwrap();
    let mut rng = Rng::new(7);
    let entries = append_batches(&topic, &sizes(&mut rng, 120));
    let reader = topic
        .open_non_durable_cursor(
            ackstore::InitialPosition::Earliest,
            ackstore::NonDurableOptions::default(),
        )
        .unwrap();
    let mut model = Model::default();
    for _ in 0..600 {
        let (pos, size) = entries[rng.index(entries.len())];
        if model.entry_acked(pos, size) {
            continue;
        }
        let i = rng.below(u64::from(size)) as u32;
        reader.ack_batch_index(pos, i, size).unwrap();
        model.ack(pos, i);
        assert_within_budget(&reader, budget, "reader");
    }
    check(&reader, &entries, &model, budget, "reader");
    assert!(reader.stats().unwrap().batch_evictions > 0);
    topic.close().unwrap();
}

/// A power cut at every storage step (and every byte of the unsynced tail kept) of a
/// workload whose batch-index acks evict partial entries to the cursor ledger, then flush:
/// the recovered state is the last `Ok` flush's, or this one's; never a message more, never
/// a flushed one lost. Evicted entries written before the cut are never taken for committed.
#[test]
fn a_power_cut_while_partial_entries_are_evicted_recovers_a_flushed_state() {
    on_each_host(power_cut_while_evicted);
}

fn power_cut_while_evicted(host: Host) {
    let budget = 512;
    let cfg = tiny(budget, PersistMode::MultiEntry);
    let mut rng = Rng::new(11);
    let sizes = sizes(&mut rng, 60);
    let plan: Vec<(usize, u32)> = (0..40)
        .map(|_| {
            let k = rng.index(sizes.len());
            (k, rng.below(u64::from(sizes[k])) as u32)
        })
        .collect();
    let clean = cut_everywhere_after(
        Points::every_in_release(3),
        |disk| {
            let topic = open_hosted(host, Arc::new(disk.clone()), &cfg.clone()).unwrap();
            let e = append_batches(&topic, &sizes);
            topic.sync().unwrap();
            let c = earliest(&topic);
            let mut before = Model::default();
            for &(k, i) in &plan[..20] {
                if !before.entry_acked(e[k].0, e[k].1) {
                    c.ack_batch_index(e[k].0, i, e[k].1).unwrap();
                    before.ack(e[k].0, i);
                }
            }
            c.flush().unwrap();
            (topic, c, e, before)
        },
        |_, (topic, c, e, before)| {
            let mut after = before.clone();
            let mut failed = false;
            for &(k, i) in &plan[20..] {
                if after.entry_acked(e[k].0, e[k].1) {
                    continue;
                }
                // A lost disk may fail the eviction's store (the ack still works in memory)
                // or a load (the ack fails): either way the flush decides.
                if c.ack_batch_index(e[k].0, i, e[k].1).is_ok() {
                    after.ack(e[k].0, i);
                } else {
                    failed = true;
                }
            }
            let evictions = c.stats().map(|s| s.batch_evictions).unwrap_or(0);
            let flushed = if failed {
                Err(())
            } else {
                c.flush().map_err(drop)
            };
            (topic, c, e, before, after, flushed, evictions)
        },
        |disk, Cut { n, .. }, (topic, c, e, before, after, flushed, _)| {
            drop(c);
            std::mem::forget(topic);
            let tail = unsynced_tail(disk);
            let torn = (0..=tail)
                .step_by(7)
                .map(|k| (k, torn_image(disk, |u| u.min(k))));
            for (keep, image) in std::iter::once((0, disk.durable_image())).chain(torn) {
                let what = format!("cut at {n}, {keep} tail bytes kept");
                let topic = open_hosted(host, Arc::new(image), &cfg.clone()).unwrap();
                let c = earliest(&topic);
                let mut got = Model::default();
                for &(pos, size) in &e {
                    for i in 0..size {
                        if c.is_batch_index_acked(pos, i).unwrap() {
                            got.ack(pos, i);
                        }
                    }
                }
                if flushed.is_ok() {
                    assert_eq!(got, after, "{what}: flushed, then lost");
                } else {
                    assert!(got == before || got == after, "{what}: {got:?}");
                }
                check(&c, &e, &got, budget, &what);
                topic.close().unwrap();
            }
        },
    );
    assert!(clean.result.5.is_ok());
    assert!(clean.result.6 > 5, "{} evictions", clean.result.6);
}

/// Threads acknowledging batch indexes of the same entries while another flushes in a loop,
/// under a tiny budget: every acknowledged message survives the final flush and a reopen, an
/// entry completes exactly when its last message is acknowledged, and the budget holds
/// between flushes.
#[test]
fn threads_acking_batch_indexes_while_a_flusher_runs_keep_every_message() {
    on_each_host(threads_while_a_flusher_runs);
}

fn threads_while_a_flusher_runs(host: Host) {
    const THREADS: u32 = 4;
    const SIZE: u32 = 8;
    let budget = 1024;
    let cfg = tiny(budget, PersistMode::MultiEntry);
    let disk = MemStorage::new();
    let topic = open_hosted(host, Arc::new(disk.clone()), &cfg.clone()).unwrap();
    let entries = append_batches(&topic, &vec![SIZE; 150]);
    topic.sync().unwrap();
    let c = earliest(&topic);
    // Thread t acknowledges messages t and t + THREADS of every entry, except message 7 of
    // every third entry: those stay partial, the others complete.
    let skipped = |k: usize, i: u32| k.is_multiple_of(3) && i == SIZE - 1;
    let done = std::sync::atomic::AtomicBool::new(false);
    // Flushes completed so far: each worker, halfway through, waits for one more, so flushes
    // run between acks on every machine, however the threads are scheduled.
    let flushed = (std::sync::Mutex::new(0u64), std::sync::Condvar::new());
    std::thread::scope(|s| {
        let flusher = s.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                c.flush().unwrap();
                assert_within_budget(&c, budget, "flusher");
                *flushed.0.lock().unwrap() += 1;
                flushed.1.notify_all();
            }
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let c = c.clone();
                let entries = &entries;
                let flushed = &flushed;
                s.spawn(move || {
                    for (k, &(pos, size)) in entries.iter().enumerate() {
                        if k == entries.len() / 2 {
                            let seen = flushed.0.lock().unwrap();
                            let before = *seen;
                            drop(flushed.1.wait_while(seen, |n| *n == before).unwrap());
                        }
                        for i in [t, t + THREADS] {
                            if !skipped(k, i) {
                                c.ack_batch_index(pos, i, size).unwrap();
                            }
                        }
                    }
                })
            })
            .collect();
        // Every worker joined before `done`, then their panics: a worker's panic must not
        // leave the flusher running, and the scope waiting for it.
        let joined: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        for worker in joined {
            worker.unwrap();
        }
        flusher.join().unwrap();
    });
    let mut model = Model::default();
    for (k, &(pos, size)) in entries.iter().enumerate() {
        for i in (0..size).filter(|&i| !skipped(k, i)) {
            model.ack(pos, i);
        }
    }
    check(&c, &entries, &model, budget, "before reopen");
    assert!(c.stats().unwrap().batch_evictions > 0);
    c.close().unwrap();
    topic.close().unwrap();
    let topic = open_hosted(host, Arc::new(disk), &cfg).unwrap();
    let c = earliest(&topic);
    check(&c, &entries, &model, budget, "after reopen");
    topic.close().unwrap();
}

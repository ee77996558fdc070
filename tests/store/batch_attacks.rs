//! Adversarial sequences of batch-index acks on a store's cursors, checked against a model of
//! acknowledged messages after every flush and reopen: batch acks followed by whole, cumulative
//! acks and seeks past or into partial entries, the last missing message of a partial entry, a
//! cursor deleted with partial entries and recreated under its name, over tiny segments (every
//! few ticks roll over) and a budget so small that partial entries are evicted to the journal.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::{
    AppendMeta, Cursor, CursorConfig, InitialPosition, LedgerConfig, ManagedLedger, MemStorage,
    Position, Store, StoreConfig,
};
use support::crash::{torn_image, unsynced_tail};
use support::topic::at;

/// Acknowledged messages: (entry, index).
type Messages = BTreeSet<(Position, u32)>;

const NAMES: [&str; 3] = ["a", "b", "c"];

fn config() -> StoreConfig {
    StoreConfig {
        ledger: LedgerConfig {
            max_entries_per_ledger: 3,
            cursor: CursorConfig {
                lru_capacity_bytes: 256,
                ..CursorConfig::default()
            },
            ..LedgerConfig::default()
        },
        journal: ackstore::internals::journal::JournalConfig { segment_bytes: 700 },
        flusher_threads: 0,
        ..StoreConfig::default()
    }
}

fn earliest(topic: &ManagedLedger, name: &str) -> Cursor {
    topic
        .open_cursor(name, at(InitialPosition::Earliest, false))
        .expect("cursor")
}

fn observed(c: &Cursor, entries: &[(Position, u32)]) -> Messages {
    let mut out = Messages::new();
    for &(pos, size) in entries {
        for i in 0..size {
            if c.is_batch_index_acked(pos, i).expect("acked") {
                out.insert((pos, i));
            }
        }
    }
    out
}

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

struct Run {
    disk: MemStorage,
    store: Option<Store>,
    topic: Option<Arc<ManagedLedger>>,
    cursors: Vec<Cursor>,
}

impl Run {
    fn open(disk: MemStorage) -> Self {
        let store = Store::open_with_storage(Arc::new(disk.clone()), config()).expect("open");
        let topic = store.topic("t").expect("topic");
        let cursors = NAMES.iter().map(|n| earliest(&topic, n)).collect();
        Self {
            disk,
            store: Some(store),
            topic: Some(topic),
            cursors,
        }
    }

    fn topic(&self) -> &ManagedLedger {
        self.topic.as_ref().expect("topic")
    }

    /// A power cut right now that keeps `keep` bytes of every file's unsynced tail: that
    /// image opens.
    fn power_cut(mut self, keep: usize) -> Self {
        self.cursors.clear();
        self.topic = None;
        std::mem::forget(self.store.take());
        let image = torn_image(&self.disk, |u| u.min(keep));
        Self::open(image)
    }
}

/// One seed's sequence: random batch acks, whole acks, cumulative acks, seeks by position and
/// by message index, last-message acks, cursor deletions; a flush of every cursor and then a
/// power cut every few steps, after which each cursor holds exactly its model's messages.
fn sequence(seed: u64) {
    let disk = MemStorage::new();
    let mut run = Run::open(disk);
    let sizes: Vec<u32> = (0..18).map(|i| 1 + (i * 7 + seed as u32) % 5).collect();
    let entries: Vec<(Position, u32)> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let meta = AppendMeta {
                num_messages: n,
                timestamp: 1 + i as u64,
            };
            (run.topic().append_with(b"m", meta).expect("append"), n)
        })
        .collect();
    run.topic().sync().expect("sync");
    let first_index: Vec<u64> = sizes
        .iter()
        .scan(0u64, |acc, &n| {
            let f = *acc;
            *acc += u64::from(n);
            Some(f)
        })
        .collect();
    let total: u64 = sizes.iter().map(|&n| u64::from(n)).sum();
    let all = &entries;
    let whole =
        |e: usize| -> Vec<(Position, u32)> { (0..all[e].1).map(|i| (all[e].0, i)).collect() };
    let mut truth: Vec<Messages> = vec![Messages::new(); NAMES.len()];
    // What a power cut may recover: at least `floor` (flushed, or made durable by a seek or a
    // deletion), at most `ceiling` (the floor and every message acknowledged since).
    let mut floor: Vec<Messages> = vec![Messages::new(); NAMES.len()];
    let mut ceiling: Vec<Messages> = vec![Messages::new(); NAMES.len()];
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut log = Vec::new();
    for step in 0..90 {
        let k = rng.below(NAMES.len() as u64) as usize;
        let e = rng.below(entries.len() as u64) as usize;
        let (pos, n) = entries[e];
        let op = rng.below(21);
        log.push((step, k, e, op));
        let c = &run.cursors[k];
        let t = &mut truth[k];
        // Whatever is at or before mark-delete counts acknowledged whole.
        match op {
            0..=10 => {
                let i = rng.below(u64::from(n)) as u32;
                c.ack_batch_index(pos, i, n).expect("batch ack");
                t.insert((pos, i));
            }
            11 => {
                // The last missing message of a partial entry, when it has one.
                let missing: Vec<u32> = (0..n).filter(|i| !t.contains(&(pos, *i))).collect();
                if missing.len() == 1 {
                    c.ack_batch_index(pos, missing[0], n).expect("last");
                    t.insert((pos, missing[0]));
                }
            }
            12 | 13 => {
                c.ack(pos).expect("ack");
                t.extend(whole(e));
            }
            14 => {
                // Behind mark-delete it is refused and changes nothing.
                match c.ack_cumulative(pos) {
                    Ok(_) => {}
                    Err(ackstore::Error::InvalidArgument { .. }) => continue,
                    Err(e) => panic!("cumulative: {e}"),
                }
                for x in 0..=e {
                    t.extend(whole(x));
                }
            }
            15 => {
                c.seek(pos).expect("seek");
                t.clear();
                for x in 0..e {
                    t.extend(whole(x));
                }
                floor[k] = t.clone();
                ceiling[k] = t.clone();
            }
            16 => {
                let index = rng.below(total);
                c.seek_by_index(index).expect("seek by index");
                t.clear();
                let x = first_index.partition_point(|&f| f <= index) - 1;
                for y in 0..x {
                    t.extend(whole(y));
                }
                let skip = (index - first_index[x]) as u32;
                t.extend((0..skip).map(|i| (entries[x].0, i)));
                floor[k] = t.clone();
                ceiling[k] = t.clone();
            }
            17 => {
                run.cursors.remove(k);
                run.topic().delete_cursor(NAMES[k]).expect("delete");
                let fresh = earliest(run.topic(), NAMES[k]);
                run.cursors.insert(k, fresh);
                t.clear();
                floor[k].clear();
                ceiling[k].clear();
            }
            18 => {
                // A power cut without a flush, keeping some of the unsynced tail.
                let tail = unsynced_tail(&run.disk);
                let keep = rng.below(tail as u64 + 1) as usize;
                run = run.power_cut(keep);
                for (k, c) in run.cursors.iter().enumerate() {
                    let got = observed(c, &entries);
                    let invented: Vec<_> = got.difference(&ceiling[k]).collect();
                    let lost: Vec<_> = floor[k].difference(&got).collect();
                    assert!(
                        invented.is_empty() && lost.is_empty(),
                        "seed {seed}, cursor {}, keep {keep} of {tail}: invented {invented:?}, \
                         lost {lost:?}, after {log:?}",
                        NAMES[k]
                    );
                    truth[k] = got.clone();
                    floor[k] = got.clone();
                    ceiling[k] = got;
                }
                continue;
            }
            _ => {
                run.store
                    .as_ref()
                    .expect("store")
                    .flush_all()
                    .expect("flush");
                floor.clone_from(&truth);
                ceiling.clone_from(&truth);
                run = run.power_cut(0);
                for (k, c) in run.cursors.iter().enumerate() {
                    assert_eq!(
                        observed(c, &entries),
                        truth[k],
                        "seed {seed}, cursor {}, after {log:?}",
                        NAMES[k]
                    );
                }
                continue;
            }
        }
        assert_eq!(
            observed(&run.cursors[k], &entries),
            truth[k],
            "seed {seed}, live cursor {}, after {log:?}",
            NAMES[k]
        );
        ceiling[k].extend(truth[k].iter().copied());
    }
    run.store
        .as_ref()
        .expect("store")
        .flush_all()
        .expect("flush");
    let run = run.power_cut(0);
    for (k, c) in run.cursors.iter().enumerate() {
        assert_eq!(
            observed(c, &entries),
            truth[k],
            "seed {seed}, end, {}",
            NAMES[k]
        );
    }
}

/// Random sequences over many seeds: every flush followed by a power cut recovers exactly the
/// acknowledged messages, never more (no partial entry back whole or more acked), never fewer;
/// a power cut without a flush, keeping any part of the unsynced tail (batch records evicted
/// but not referenced, a tick's records without its marker), recovers at least what was
/// flushed or made durable by a seek or a deletion, and nothing acknowledged by no one.
#[test]
fn random_batch_ack_sequences_with_seeks_deletions_and_power_cuts_match_the_model() {
    for seed in 1..200 {
        sequence(seed);
    }
}

/// Four threads acknowledge messages of the same entries of one cursor (thread `w` takes the
/// indexes `i` with `i % 4 == w`, so the entries become whole through whichever thread acks last)
/// under a budget that evicts partial entries to the journal, while the store's flusher pool
/// and a thread calling `flush_all` run ticks over segments small enough to roll over: after a
/// last flush and a power cut the cursor holds exactly every message acknowledged.
///
/// The ticking thread acknowledges one more entry of a cursor of its own before each tick until
/// a rollover has deleted a segment, and keeps ticking until then: every tick writes a marker
/// whatever the other threads did, so a rollover comes after a bounded number of ticks, however
/// the threads interleave and however many evictions they make.
#[test]
fn acks_of_the_same_entries_from_several_threads_with_evictions_rollovers_and_flushers_are_kept() {
    let mut config = config();
    config.flusher_threads = 2;
    config.ledger.cursor.flush_interval = Some(std::time::Duration::from_millis(1));
    config.journal.segment_bytes = 2048;
    let disk = MemStorage::new();
    let store = Store::open_with_storage(Arc::new(disk.clone()), config.clone()).expect("open");
    let topic = store.topic("t").expect("topic");
    let entries: Vec<(Position, u32)> = (0..1500u64)
        .map(|i| {
            let n = 4 + (i % 3) as u32;
            let meta = AppendMeta {
                num_messages: n,
                timestamp: 1 + i,
            };
            (topic.append_with(b"m", meta).expect("append"), n)
        })
        .collect();
    topic.sync().expect("sync");
    let c = earliest(&topic, "sub");
    let filler = earliest(&topic, "filler");
    let done = std::sync::atomic::AtomicBool::new(false);
    let want: Messages = std::thread::scope(|s| {
        let ticker = s.spawn(|| {
            let mut fill = entries.iter();
            let rolled = || store.journal_stats().rollovers > 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) || !rolled() {
                if !rolled() {
                    let &(pos, _) = fill
                        .next()
                        .expect("a rollover before the filler acknowledged every entry");
                    filler.ack(pos).expect("filler ack");
                }
                store.flush_all().expect("tick");
            }
        });
        let workers: Vec<_> = (0..4u32)
            .map(|w| {
                let c = c.clone();
                let entries = &entries;
                s.spawn(move || {
                    let mut mine = Messages::new();
                    for (k, &(pos, n)) in entries.iter().enumerate() {
                        // Every third entry keeps one message unacknowledged.
                        for i in (0..n).filter(|i| i % 4 == w && !(k % 3 == 0 && *i == 0)) {
                            c.ack_batch_index(pos, i, n).expect("batch ack");
                            mine.insert((pos, i));
                        }
                    }
                    mine
                })
            })
            .collect();
        // Every worker joined before `done`, then their panics: a worker's panic must not
        // leave the ticker running, and the scope waiting for it.
        let joined: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        let want = joined
            .into_iter()
            .flat_map(|w| w.expect("worker"))
            .collect();
        ticker.join().expect("ticker");
        want
    });
    assert_eq!(observed(&c, &entries), want, "before the power cut");
    let stats = c.stats().expect("stats");
    assert!(stats.batch_evictions > 0, "{stats:?}");
    c.flush().expect("flush");
    assert!(store.journal_stats().rollovers > 0);
    drop(filler);
    drop(c);
    drop(topic);
    std::mem::forget(store);
    let store = Store::open_with_storage(Arc::new(disk.durable_image()), config).expect("reopen");
    let topic = store.topic("t").expect("topic");
    let c = earliest(&topic, "sub");
    assert_eq!(observed(&c, &entries), want, "after the power cut");
}

/// A disk that fills after each of the first growing writes of a workload of batch-index acks
/// (evictions under a tiny budget, ticks over tiny segments that roll over): acks that return
/// `Ok` are kept in memory, and once space returns a flush that returns `Ok` keeps every one of
/// them across a power cut (keeping any part of the unsynced tail), while a power cut never
/// brings back a message no ack returned `Ok` for.
#[test]
fn a_disk_full_at_any_write_of_evictions_and_rollovers_loses_no_flushed_message_and_invents_none() {
    for full_after in 0..200u64 {
        let disk = MemStorage::new();
        let store = Store::open_with_storage(Arc::new(disk.clone()), config()).expect("open");
        let topic = store.topic("t").expect("topic");
        let entries: Vec<(Position, u32)> = (0..60u64)
            .map(|i| {
                let meta = AppendMeta {
                    num_messages: 3 + (i % 2) as u32,
                    timestamp: 1 + i,
                };
                (
                    topic.append_with(b"m", meta).expect("append"),
                    meta.num_messages,
                )
            })
            .collect();
        topic.sync().expect("sync");
        let cursors: Vec<Cursor> = NAMES.iter().map(|n| earliest(&topic, n)).collect();
        let mut truth = vec![Messages::new(); NAMES.len()];
        let mut floor = vec![Messages::new(); NAMES.len()];
        let round = |truth: &mut Vec<Messages>, floor: &mut Vec<Messages>, r: usize| {
            for (k, c) in cursors.iter().enumerate() {
                for (e, &(pos, n)) in entries.iter().enumerate() {
                    if (e + k + r).is_multiple_of(3) {
                        let i = ((e + r) % n as usize) as u32;
                        if c.ack_batch_index(pos, i, n).is_ok() {
                            truth[k].insert((pos, i));
                        }
                    }
                }
            }
            if store.flush_all().is_ok() {
                floor.clone_from(truth);
            }
        };
        for r in 0..8 {
            if r == 3 {
                disk.enospc_after(Some(full_after));
            }
            round(&mut truth, &mut floor, r);
        }
        for (k, c) in cursors.iter().enumerate() {
            assert_eq!(
                observed(c, &entries),
                truth[k],
                "full after {full_after}: in memory"
            );
        }
        disk.enospc_after(None);
        let after_space = store.flush_all();
        if after_space.is_ok() {
            floor.clone_from(&truth);
        }
        drop(cursors);
        drop(topic);
        std::mem::forget(store);
        for keep in [0, usize::MAX] {
            let image = torn_image(&disk, |u| u.min(keep));
            let store = Store::open_with_storage(Arc::new(image), config())
                .unwrap_or_else(|e| panic!("full after {full_after}, keep {keep}: open: {e}"));
            let topic = store.topic("t").expect("topic");
            for (k, name) in NAMES.iter().enumerate() {
                let got = observed(&earliest(&topic, name), &entries);
                let invented: Vec<_> = got.difference(&truth[k]).collect();
                let lost: Vec<_> = floor[k].difference(&got).collect();
                assert!(
                    invented.is_empty() && lost.is_empty(),
                    "full after {full_after}, keep {keep}, {name} (flush after space: \
                     {after_space:?}): invented {invented:?}, lost {lost:?}"
                );
            }
        }
    }
}

/// A batch size other than the one an entry's partial acks were given is refused, whether the
/// entry's partial state is in memory, evicted to the journal, or cold after a reopen, and the
/// refusal changes nothing.
#[test]
fn a_different_batch_size_for_a_cold_partial_entry_is_refused_and_changes_nothing() {
    let disk = MemStorage::new();
    let store = Store::open_with_storage(Arc::new(disk.clone()), config()).expect("open");
    let topic = store.topic("t").expect("topic");
    let entries: Vec<(Position, u32)> = (0..90u64)
        .map(|i| {
            let meta = AppendMeta {
                num_messages: 4,
                timestamp: 1 + i,
            };
            (topic.append_with(b"m", meta).expect("append"), 4)
        })
        .collect();
    topic.sync().expect("sync");
    let c = earliest(&topic, "sub");
    let mut want = Messages::new();
    for &(pos, n) in &entries {
        c.ack_batch_index(pos, 1, n).expect("batch ack");
        want.insert((pos, 1));
    }
    assert!(c.stats().expect("stats").batch_cold_partitions > 0);
    let refuse = |c: &Cursor, what: &str| {
        for &(pos, n) in &entries {
            let r = c.ack_batch_index(pos, 2, n + 1);
            assert!(
                matches!(r, Err(ackstore::Error::InvalidArgument { .. })),
                "{what}: {pos}: {r:?}"
            );
        }
        assert_eq!(observed(c, &entries), want, "{what}");
    };
    refuse(&c, "evicted");
    c.flush().expect("flush");
    drop(c);
    drop(topic);
    std::mem::forget(store);
    let store = Store::open_with_storage(Arc::new(disk.durable_image()), config()).expect("reopen");
    let topic = store.topic("t").expect("topic");
    let c = earliest(&topic, "sub");
    refuse(&c, "cold after a reopen");
}

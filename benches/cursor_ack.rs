//! Acks through the call a broker makes, `Cursor::ack` (and `Cursor::ack_many` in groups of
//! 64), against two in-memory baselines measured in the same run on the same positions:
//!
//! - roaring blocks in a map: one `RoaringBitmap` per (ledger, 65,536-entry block) in a
//!   `HashMap` (what a cursor store kept in redb, fjall or RocksDB holds in memory), each ack a
//!   map lookup and an insert, the block marked dirty;
//! - the same map behind a `Mutex`, locked for each ack: what a store of roaring blocks that
//!   many threads ack into pays per call, as `Cursor::ack` takes the cursor's lock;
//! - a dense bitset: one bit per entry of the topic (Pulsar's long array), each ack a bit set.
//!
//! Patterns over the first `ENTRIES` entries of a topic of one ledger: random 50%, random 1%,
//! random 99%, and every entry but a hole every 1,000; each acked in entry order and in a random
//! order. The cursor is a fresh one of a store's topic on the in-memory disk, in the store's
//! shared ack budget of 64 MiB (its creation and deletion are not timed); nothing is flushed: this is the per-ack work in memory (the budget's
//! accounting, the LRU, batch bookkeeping, the cursor's lock and checks). Each figure is
//! elements (acks) per second; the ratios to the baselines are what to read.
//!
//! Each timed loop is timed on the clock `ACKSTORE_BENCH_CLOCK` names: `wall` (the default,
//! `Instant`) or `cpu`, the bench thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), which leaves
//! out the time the thread waits for a core: on a machine shared with other jobs the wall time
//! of every function, baselines included, grows with the load, and the CPU time much less. Both
//! the baselines and the cursor's acks run on the bench thread alone (nothing is flushed, so no
//! other thread of the store works for them), so the CPU time is their whole cost.
//!
//! `cursor_ack_threads` times two threads acking at once, each its own cursor, in one store (a
//! shared ack budget) and in two (see [`two_threads`]).
//!
//! Run: `cargo bench --bench cursor_ack -- --warm-up-time 1 --measurement-time 3`
//! (`ACKSTORE_BENCH_ENTRIES=10000000` for 10M entries, `ACKSTORE_BENCH_CLOCK=cpu` for CPU time).

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ackstore::{CursorOptions, LedgerConfig, MemStorage, Position, Store, StoreConfig};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use roaring::RoaringBitmap;

/// Entries of the topic (`ACKSTORE_BENCH_ENTRIES` overrides).
const ENTRIES: u64 = 1_000_000;
/// Entries per baseline block: one roaring container.
const BLOCK_BITS: u32 = 16;
/// Positions per `ack_many` call.
const GROUP: usize = 64;

/// The clock the timed loops are timed on (see the module docs).
#[derive(Clone, Copy)]
enum Clock {
    Wall,
    Cpu,
}

impl Clock {
    fn from_env() -> Self {
        match std::env::var("ACKSTORE_BENCH_CLOCK").as_deref() {
            Ok("cpu") => Self::Cpu,
            Ok("wall") | Err(_) => Self::Wall,
            Ok(other) => panic!("ACKSTORE_BENCH_CLOCK is wall or cpu, not {other}"),
        }
    }

    /// How long `f` took on this clock.
    fn time(self, f: impl FnOnce()) -> Duration {
        match self {
            Self::Wall => {
                let started = Instant::now();
                f();
                started.elapsed()
            }
            Self::Cpu => {
                let cpu = || {
                    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
                    Duration::new(
                        u64::try_from(t.tv_sec).unwrap(),
                        u32::try_from(t.tv_nsec).unwrap(),
                    )
                };
                let started = cpu();
                f();
                cpu() - started
            }
        }
    }
}

fn entries() -> u64 {
    std::env::var("ACKSTORE_BENCH_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ENTRIES)
}

/// xorshift64*, seeded: deterministic draws without a dependency.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11
    }
}

/// The entry ids `pattern` acks among `0..n`, in entry order.
fn pattern(name: &str, n: u64) -> Vec<u64> {
    let mut draw = Draw(0x9e37_79b9_7f4a_7c15);
    (0..n)
        .filter(|&e| match name {
            "random_50" => draw.next() % 100 < 50,
            "random_1" => draw.next() % 100 < 1,
            "random_99" => draw.next() % 100 < 99,
            "holes_1000" => e % 1_000 != 999,
            _ => unreachable!("pattern"),
        })
        .collect()
}

/// `ids` in a random order (Fisher-Yates).
fn shuffled(ids: &[u64]) -> Vec<u64> {
    let mut out = ids.to_vec();
    let mut draw = Draw(0x2545_f491_4f6c_dd1d);
    for i in (1..out.len()).rev() {
        let j = usize::try_from(draw.next() % (i as u64 + 1)).unwrap();
        out.swap(i, j);
    }
    out
}

/// Roaring blocks in a map, as a cursor store over a key-value store keeps them in memory.
#[derive(Default)]
struct Blocks(HashMap<(u64, u64), (RoaringBitmap, bool)>);

impl Blocks {
    fn ack(&mut self, pos: Position) -> bool {
        let block = self
            .0
            .entry((pos.ledger_id, pos.entry_id >> BLOCK_BITS))
            .or_default();
        block.1 = true;
        block
            .0
            .insert(u32::try_from(pos.entry_id & ((1 << BLOCK_BITS) - 1)).unwrap())
    }
}

/// One bit per entry.
struct Dense(Vec<u64>);

impl Dense {
    fn ack(&mut self, entry: u64) -> bool {
        let word = &mut self.0[usize::try_from(entry / 64).unwrap()];
        let bit = 1 << (entry % 64);
        let new = *word & bit == 0;
        *word |= bit;
        new
    }
}

fn cursor_acks(c: &mut Criterion) {
    let n = entries();
    let clock = Clock::from_env();
    let store = bench_store(n);
    let topic = store.topic("bench").unwrap();
    let mut first = None;
    for _ in 0..n {
        let p = topic.append(b"").unwrap();
        first.get_or_insert(p);
    }
    topic.sync().unwrap();
    let first = first.unwrap();
    let at = |e: u64| Position::new(first.ledger_id, first.entry_id + e);
    let mut fresh = 0u64;
    for name in ["random_50", "random_1", "random_99", "holes_1000"] {
        let in_order = pattern(name, n);
        for (order, ids) in [
            ("entry_order", in_order.clone()),
            ("random_order", shuffled(&in_order)),
        ] {
            let positions: Vec<Position> = ids.iter().map(|&e| at(e)).collect();
            let mut group =
                c.benchmark_group(format!("cursor_ack/{}M/{name}/{order}", n / 1_000_000));
            group.sample_size(10);
            group.throughput(Throughput::Elements(positions.len() as u64));
            // Each baseline's state is created (and dropped) in the timed loop, as before the
            // clock could be chosen: an empty map and a zeroed vector.
            group.bench_function("roaring_blocks_in_a_map", |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| {
                            clock.time(|| {
                                let mut blocks = Blocks::default();
                                for p in &positions {
                                    black_box(blocks.ack(*p));
                                }
                                drop(black_box(blocks));
                            })
                        })
                        .sum()
                });
            });
            group.bench_function("roaring_blocks_in_a_locked_map", |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| {
                            clock.time(|| {
                                let blocks = std::sync::Mutex::new(Blocks::default());
                                for p in &positions {
                                    black_box(blocks.lock().expect("blocks").ack(*p));
                                }
                                drop(black_box(blocks));
                            })
                        })
                        .sum()
                });
            });
            group.bench_function("dense_bitset", |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| {
                            clock.time(|| {
                                let mut dense =
                                    Dense(vec![0; usize::try_from(n.div_ceil(64)).unwrap()]);
                                for e in &ids {
                                    black_box(dense.ack(*e));
                                }
                                drop(black_box(dense));
                            })
                        })
                        .sum()
                });
            });
            let mut timed = |b: &mut criterion::Bencher, many: bool| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        fresh += 1;
                        let name = format!("bench-{fresh}");
                        let cursor = topic.open_cursor(&name, CursorOptions::default()).unwrap();
                        total += clock.time(|| {
                            if many {
                                for chunk in positions.chunks(GROUP) {
                                    black_box(cursor.ack_many(chunk).unwrap());
                                }
                            } else {
                                for p in &positions {
                                    black_box(cursor.ack(*p).unwrap());
                                }
                            }
                        });
                        drop(cursor);
                        topic.delete_cursor(&name).unwrap();
                    }
                    total
                });
            };
            group.bench_function("cursor_ack", |b| timed(b, false));
            group.bench_function("cursor_ack_many_64", |b| timed(b, true));
            group.finish();
        }
    }
}

/// A store on the in-memory disk whose ledgers hold `n` entries, with the shared budget of
/// [`cursor_acks`].
fn bench_store(n: u64) -> Store {
    Store::open_with_storage(
        Arc::new(MemStorage::new()),
        StoreConfig {
            ledger: LedgerConfig {
                max_entries_per_ledger: n,
                ..LedgerConfig::default()
            },
            ack_memory_bytes: Some(64 << 20),
            ..StoreConfig::default()
        },
    )
    .unwrap()
}

/// Two threads acking at once, each its own cursor of its own topic (random 50%, in a random
/// order): the topics in one store, so the cursors share its ack budget (what a broker's
/// threads do), against the same in two stores, which share nothing. Each figure is the CPU
/// time of both threads (or the wall time of the pair, `ACKSTORE_BENCH_CLOCK=wall`) for both
/// passes: what one store costs more is what its cursors' acks write to shared memory.
fn two_threads(c: &mut Criterion) {
    let n = entries();
    let clock = Clock::from_env();
    let ids = shuffled(&pattern("random_50", n));
    let one = bench_store(n);
    let mut group = c.benchmark_group(format!("cursor_ack_threads/{}M/2", n / 1_000_000));
    group.sample_size(10);
    group.throughput(Throughput::Elements(2 * ids.len() as u64));
    for (name, stores) in [
        ("one_store", [one.clone(), one]),
        ("two_stores", [bench_store(n), bench_store(n)]),
    ] {
        let topics: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(i, store)| {
                let topic = store.topic(&format!("bench-{i}")).unwrap();
                let first = topic.append(b"").unwrap();
                for _ in 1..n {
                    topic.append(b"").unwrap();
                }
                topic.sync().unwrap();
                (topic, first)
            })
            .collect();
        let mut fresh = 0u64;
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    fresh += 1;
                    let cursors: Vec<_> = topics
                        .iter()
                        .map(|(topic, first)| {
                            let cursor = topic
                                .open_cursor(&format!("bench-{fresh}"), CursorOptions::default())
                                .unwrap();
                            (cursor, *first)
                        })
                        .collect();
                    let start = std::sync::Barrier::new(2);
                    let pass = |(cursor, first): &(ackstore::Cursor, Position)| {
                        start.wait();
                        clock.time(|| {
                            for &e in &ids {
                                let p = Position::new(first.ledger_id, first.entry_id + e);
                                black_box(cursor.ack(p).unwrap());
                            }
                        })
                    };
                    let started = Instant::now();
                    let times: Vec<Duration> = std::thread::scope(|s| {
                        let handles: Vec<_> = cursors.iter().map(|c| s.spawn(|| pass(c))).collect();
                        handles.into_iter().map(|h| h.join().unwrap()).collect()
                    });
                    total += match clock {
                        Clock::Cpu => times.iter().sum(),
                        Clock::Wall => started.elapsed(),
                    };
                    for ((topic, _), (cursor, _)) in topics.iter().zip(cursors) {
                        drop(cursor);
                        topic.delete_cursor(&format!("bench-{fresh}")).unwrap();
                    }
                }
                total
            });
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1));
    targets = cursor_acks, two_threads
}
criterion_main!(benches);

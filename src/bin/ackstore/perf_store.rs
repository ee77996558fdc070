//! `ackstore perf --topics T --cursors C`: a broker's workload on a store of T topics with C
//! cursors each, on real files, and with `--baseline` the same workload on T topic directories of
//! `ManagedLedger::open` (every cursor in its own cursor ledger, flushed one by one), measured in
//! the same run.
//!
//! Phases: create the topics (entries appended and synced) and their cursors; several flush
//! ticks, each after acks on every cursor (one each, then as many again spread over the cursors
//! by a Zipf law), with a second thread acking while the tick runs (its latencies during the
//! tick give `ack_p99_us_during_flush`); close, then a timed restart (open, every topic, every
//! cursor to its first read); verify every entry of every cursor against the truth. Exits 1 if
//! any cursor differs.

#![allow(
    clippy::cast_precision_loss,
    reason = "timings and counts for people, far below 2^52"
)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ackstore::{
    Cursor, CursorConfig, CursorOptions, LedgerConfig, ManagedLedger, Position, Store, StoreConfig,
};

/// The workload's shape.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Topics.
    pub topics: usize,
    /// Cursors per topic.
    pub cursors: usize,
    /// Entries per topic.
    pub entries: u64,
    /// Flush ticks.
    pub ticks: usize,
    /// Seed of the ack choices.
    pub seed: u64,
}

/// What one run measured.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Every flush tick's duration.
    pub tick_ms: Vec<f64>,
    /// File and directory syncs of every tick (for the baseline: the entry logs' fsyncs, the
    /// cursor records' atomic writes not counted).
    pub tick_syncs: Vec<u64>,
    /// Restart: open, every topic, every cursor to its first read.
    pub restart: Duration,
    /// Threads of the process while the cursors were open.
    pub threads: usize,
    /// 99th percentile of the acks made while a tick ran, in microseconds.
    pub ack_p99_us: f64,
    /// Acks measured during ticks.
    pub acks_during_flush: usize,
    /// Resident ack bytes of every cursor after the last tick.
    pub resident_ack_bytes: u64,
    /// Whether every cursor matched the truth after the restart.
    pub verified: bool,
    /// Cursors that did not.
    pub mismatches: u64,
}

impl Figures {
    /// Median and maximum tick, in milliseconds.
    pub fn tick_median_max(&self) -> (f64, f64) {
        let mut t = self.tick_ms.clone();
        t.sort_by(f64::total_cmp);
        let median = t.get(t.len() / 2).copied().unwrap_or(0.0);
        (median, t.last().copied().unwrap_or(0.0))
    }

    /// The JSON object of these figures.
    pub fn json(&self, shape: &Shape) -> serde_json::Value {
        let (median, max) = self.tick_median_max();
        let total = (shape.topics * shape.cursors).max(1);
        let restart_ms = self.restart.as_secs_f64() * 1e3;
        serde_json::json!({
            "topics": shape.topics,
            "cursors": shape.cursors,
            "total_cursors": shape.topics * shape.cursors,
            "flush_tick_ms": { "median": median, "max": max },
            "fsyncs_per_tick": self.tick_syncs.iter().copied().max().unwrap_or(0),
            "restart_ms": restart_ms,
            "restart_per_cursor_us": restart_ms * 1e3 / total as f64,
            "threads": self.threads,
            "resident_ack_bytes": self.resident_ack_bytes,
            "ack_p99_us_during_flush": self.ack_p99_us,
            "acks_during_flush": self.acks_during_flush,
            "verified": self.verified,
        })
    }
}

/// The truth of one cursor: which entries of its topic are acknowledged.
type Truth = Vec<bool>;

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n.max(1) as u64).unwrap_or(0)
    }
}

/// Cumulative Zipf weights (exponent 1) over `n` ranks.
fn zipf(n: usize) -> Vec<f64> {
    let mut acc = 0.0;
    (1..=n)
        .map(|r| {
            acc += 1.0 / r as f64;
            acc
        })
        .collect()
}

fn zipf_pick(cumulative: &[f64], rng: &mut Rng) -> usize {
    let total = cumulative.last().copied().unwrap_or(1.0);
    let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64 * total;
    cumulative
        .partition_point(|&c| c < u)
        .min(cumulative.len() - 1)
}

fn threads_now() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, Iterator::count)
}

/// The cursor settings of both runs: a flush interval so the per-cursor path starts its
/// flusher thread per cursor (as a broker would), long enough that only the ticks flush.
fn ledger_config() -> LedgerConfig {
    LedgerConfig {
        max_entries_per_ledger: 10_000,
        cursor: CursorConfig {
            lru_capacity_bytes: 64 << 10,
            flush_interval: Some(Duration::from_secs(3600)),
            ..CursorConfig::default()
        },
        ..LedgerConfig::default()
    }
}

/// The topics and cursors of one run, however they are kept.
struct Fleet {
    store: Option<Store>,
    topics: Vec<Arc<ManagedLedger>>,
    /// (topic, cursor handle, the topic's positions).
    cursors: Vec<(usize, Cursor)>,
}

impl Fleet {
    fn topic_name(t: usize) -> String {
        format!("persistent://tenant/ns/topic-{t}")
    }

    fn open(dir: &Path, baseline: bool, shape: &Shape) -> ackstore::Result<Self> {
        let (store, topics) = if baseline {
            let topics = (0..shape.topics)
                .map(|t| {
                    ManagedLedger::open(dir.join(format!("t{t}")), ledger_config()).map(Arc::new)
                })
                .collect::<ackstore::Result<Vec<_>>>()?;
            (None, topics)
        } else {
            let store = Store::open(
                dir,
                StoreConfig {
                    ledger: ledger_config(),
                    ..StoreConfig::default()
                },
            )?;
            let topics = (0..shape.topics)
                .map(|t| store.topic(&Self::topic_name(t)))
                .collect::<ackstore::Result<Vec<_>>>()?;
            (Some(store), topics)
        };
        let mut cursors = Vec::with_capacity(shape.topics * shape.cursors);
        for (t, topic) in topics.iter().enumerate() {
            for c in 0..shape.cursors {
                cursors.push((
                    t,
                    topic.open_cursor(&format!("sub-{c}"), CursorOptions::default())?,
                ));
            }
        }
        Ok(Self {
            store,
            topics,
            cursors,
        })
    }

    /// One flush tick: `flush_all`, or every cursor's own flush. Returns the syncs it made.
    fn tick(&self) -> ackstore::Result<u64> {
        if let Some(store) = &self.store {
            return Ok(store.flush_all()?.syncs);
        }
        let fsyncs = |topics: &[Arc<ManagedLedger>]| -> ackstore::Result<u64> {
            topics
                .iter()
                .map(|t| t.log_stats().map(|s| s.fsyncs))
                .sum::<ackstore::Result<u64>>()
        };
        let before = fsyncs(&self.topics)?;
        for (_, cursor) in &self.cursors {
            cursor.flush()?;
        }
        Ok(fsyncs(&self.topics)? - before)
    }

    fn close(self) -> ackstore::Result<()> {
        if let Some(store) = &self.store {
            return store.close();
        }
        for t in &self.topics {
            t.close()?;
        }
        Ok(())
    }
}

/// Runs the workload in `dir` (the store's directory, or the parent of the baseline's topic
/// directories).
pub fn run(dir: &Path, baseline: bool, shape: &Shape) -> ackstore::Result<Figures> {
    let mut figures = Figures::default();
    // Create: topics with their entries, then the cursors.
    let fleet = Fleet::open(dir, baseline, shape)?;
    let payload = [0xA5_u8; 100];
    let mut positions: Vec<Vec<Position>> = Vec::with_capacity(shape.topics);
    for topic in &fleet.topics {
        let ps = (0..shape.entries)
            .map(|_| topic.append(&payload))
            .collect::<ackstore::Result<Vec<_>>>()?;
        topic.sync()?;
        positions.push(ps);
    }
    figures.threads = threads_now();
    let total = fleet.cursors.len();
    let half = usize::try_from(shape.entries / 2)
        .unwrap_or(usize::MAX)
        .max(1);
    let mut truth: Vec<Truth> = vec![vec![false; positions.first().map_or(0, Vec::len)]; total];
    let mut next = vec![0usize; total];
    let weights = zipf(total);
    let mut rng = Rng(shape.seed);
    let mut latencies = Vec::new();
    // Acks: the ticks' acks take the lower half of each topic, alternating entries (a hole
    // between every two); the concurrent acker the upper half.
    let mut ack = |k: usize, truth: &mut [Truth], fleet: &Fleet| -> ackstore::Result<()> {
        let (t, cursor) = &fleet.cursors[k];
        let i = (next[k] * 2 + k % 2) % half;
        next[k] += 1;
        cursor.ack(positions[*t][i])?;
        truth[k][i] = true;
        Ok(())
    };
    let mut acker_truth: Vec<(usize, usize)> = Vec::new();
    for tick in 0..shape.ticks {
        for k in 0..total {
            ack(k, &mut truth, &fleet)?;
        }
        for _ in 0..total {
            ack(zipf_pick(&weights, &mut rng), &mut truth, &fleet)?;
        }
        let flushing = AtomicBool::new(true);
        let (syncs, elapsed, acker) = std::thread::scope(|s| {
            let acker = s.spawn(|| {
                let mut rng = Rng(shape.seed ^ (tick as u64 + 1));
                let mut made = Vec::new();
                let mut times = Vec::new();
                let upper = usize::try_from(shape.entries).unwrap_or(usize::MAX) - half;
                while flushing.load(Ordering::SeqCst) && upper > 0 {
                    let k = rng.below(total);
                    let i = half + rng.below(upper);
                    let (t, cursor) = &fleet.cursors[k];
                    let started = Instant::now();
                    let result = cursor.ack(positions[*t][i]);
                    let took = started.elapsed();
                    if result.is_err() {
                        break;
                    }
                    if flushing.load(Ordering::SeqCst) {
                        times.push(took.as_secs_f64() * 1e6);
                    }
                    made.push((k, i));
                }
                (made, times)
            });
            let started = Instant::now();
            let syncs = fleet.tick();
            let elapsed = started.elapsed();
            flushing.store(false, Ordering::SeqCst);
            (syncs, elapsed, acker.join())
        });
        figures.tick_syncs.push(syncs?);
        figures.tick_ms.push(elapsed.as_secs_f64() * 1e3);
        let (made, times) = acker.map_err(|_| ackstore::Error::InvalidArgument {
            reason: "the acking thread panicked".into(),
        })?;
        acker_truth.extend(made);
        latencies.extend(times);
    }
    for (k, i) in acker_truth {
        truth[k][i] = true;
    }
    latencies.sort_by(f64::total_cmp);
    figures.acks_during_flush = latencies.len();
    figures.ack_p99_us = latencies
        .get((latencies.len() * 99 / 100).min(latencies.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0.0);
    figures.resident_ack_bytes = fleet
        .cursors
        .iter()
        .map(|(_, c)| c.stats().map(|s| s.ackset.resident_bytes as u64))
        .sum::<ackstore::Result<u64>>()?;
    fleet.close()?;

    restart_and_verify(dir, baseline, shape, &positions, &truth, &mut figures)?;
    Ok(figures)
}

/// The timed restart (open, every topic, every cursor to its first read), then every entry of
/// every cursor checked against `truth`.
fn restart_and_verify(
    dir: &Path,
    baseline: bool,
    shape: &Shape,
    positions: &[Vec<Position>],
    truth: &[Truth],
    figures: &mut Figures,
) -> ackstore::Result<()> {
    // Restart: open, every topic, every cursor to its first read.
    let started = Instant::now();
    let fleet = Fleet::open(dir, baseline, shape)?;
    for (_, cursor) in &fleet.cursors {
        cursor.read_entries(1)?;
    }
    figures.restart = started.elapsed();

    // Verify every entry of every cursor.
    for (k, (t, cursor)) in fleet.cursors.iter().enumerate() {
        let mut same = true;
        for (i, p) in positions[*t].iter().enumerate() {
            same &= cursor.is_acked(*p)? == truth[k][i];
        }
        figures.mismatches += u64::from(!same);
    }
    figures.verified = figures.mismatches == 0;
    fleet.close()
}

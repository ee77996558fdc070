//! `ackstore perf --topics T --cursors C`: a broker's workload on a store of T topics with C
//! cursors each, on real files, and with `--baseline` the same workload on T topic directories of
//! `ManagedLedger::open` (each topic hosting a journal of its own, every cursor flushed on its own:
//! a journal commit per cursor), measured in the same run.
//!
//! Phases: create the topics (entries appended and synced) and their cursors; several flush
//! ticks, each after acks on every cursor (one each, then as many again spread over the cursors
//! by a Zipf law), with a second thread acking while the tick runs (its latencies during the
//! tick give `ack_p99_us_during_flush`); close, then a timed restart (open, every topic, every
//! cursor to its first read; the topics and cursors from `--restart-threads` threads); verify
//! every entry of every cursor against the truth. Exits 1 if any cursor differs.

#![allow(
    clippy::cast_precision_loss,
    reason = "timings and counts for people, far below 2^52"
)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ackstore::{Cursor, CursorOptions, ManagedLedger, Position, Store};

use crate::perf_workload::{cursor_name, ledger_config, store_config, topic_name};

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
    /// The store's one ack memory budget, in bytes (the baseline's cursors have a budget each).
    pub ack_budget: usize,
    /// Threads of the timed restart's topic opens and cursor opens with their first reads (the
    /// store's open is one call).
    pub restart_threads: usize,
}

/// What one run measured.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Every flush tick's duration.
    pub tick_ms: Vec<f64>,
    /// File and directory syncs of every tick (for the baseline: the entry logs' fsyncs, the
    /// cursor records' atomic writes not counted).
    pub tick_syncs: Vec<u64>,
    /// Bytes every tick appended to the store's journal (empty for the baseline).
    pub tick_bytes: Vec<u64>,
    /// What each tick's journal did besides its own records (empty for the baseline): the
    /// segments its rollovers deleted, the full markers they wrote to re-base chains, and the
    /// partitions loaded back from the journal while it ran.
    pub tick_journal: Vec<TickJournal>,
    /// Restart: open, every topic, every cursor to its first read.
    pub restart: Duration,
    /// The restart's phases: the store's open (its claim and the journal's scan; the
    /// baseline has none), every topic's open, every cursor's open and first read.
    pub restart_phases: [Phase; 3],
    /// CPU time of every thread of the process during the restart, the resident-set sampler's
    /// included (on a shared machine the restart's wall time is mostly waiting for a CPU).
    pub restart_cpu: Duration,
    /// Creating the topics (with their entries) and the cursors, before the first tick.
    pub setup: Duration,
    /// The store's one ack memory budget (`None`: the baseline, a budget per cursor).
    pub ack_memory_budget_bytes: Option<u64>,
    /// Threads of the process while the cursors were open.
    pub threads: usize,
    /// 99th percentile of the acks made while a tick ran, in microseconds.
    pub ack_p99_us: f64,
    /// Acks measured during ticks.
    pub acks_during_flush: usize,
    /// Resident ack bytes of every cursor after the last tick.
    pub resident_ack_bytes: u64,
    /// The store's budget's peak of resident ack bytes after an operation ended (`None`: the
    /// baseline).
    pub resident_ack_peak_bytes: Option<u64>,
    /// Bytes the store's cursors released because another cursor needed room in the full
    /// budget, up to the end of the last tick (`None`: the baseline).
    pub ack_released_bytes: Option<u64>,
    /// CPU time of every thread of the process but the concurrent acker during each tick.
    pub tick_cpu_ms: Vec<f64>,
    /// Where the thread that ran each tick spent its wall time: on a CPU, runnable but waiting
    /// for one (the machine's other work), and neither (blocked: syncs, locks), in milliseconds.
    pub tick_thread_ms: Vec<[f64; 3]>,
    /// Resident set before the set-up and after it (topics, entries and cursors created).
    pub rss_before_setup: u64,
    /// See `rss_before_setup`.
    pub rss_after_setup: u64,
    /// The process's peak resident set during the run (reset at its start where the kernel
    /// allows).
    pub peak_rss: u64,
    /// The peaks of the resident set's two parts, sampled every few milliseconds during the
    /// run: anonymous memory (the heap: what the process keeps) and mapped file pages
    /// (sealed ledgers read through their map: page cache the kernel may reclaim).
    pub peak_rss_anon: u64,
    /// See `peak_rss_anon`.
    pub peak_rss_file: u64,
    /// Whether every cursor matched the truth after the restart.
    pub verified: bool,
    /// Cursors that did not.
    pub mismatches: u64,
}

impl Figures {
    /// Median and maximum tick, in milliseconds.
    pub fn tick_median_max(&self) -> (f64, f64) {
        median_max(&self.tick_ms)
    }

    /// The JSON object of these figures.
    pub fn json(&self, shape: &Shape) -> serde_json::Value {
        let (median, max) = self.tick_median_max();
        let total = (shape.topics * shape.cursors).max(1);
        let restart_ms = self.restart.as_secs_f64() * 1e3;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (cpu_median, cpu_max) = median_max(&self.tick_cpu_ms);
        let thread_median =
            |i: usize| median_max(&self.tick_thread_ms.iter().map(|t| t[i]).collect::<Vec<_>>()).0;
        let grown = self.rss_after_setup.saturating_sub(self.rss_before_setup);
        let (bytes_median, _) = median_max(
            &self
                .tick_bytes
                .iter()
                .map(|&b| b as f64)
                .collect::<Vec<_>>(),
        );
        serde_json::json!({
            "topics": shape.topics,
            "cursors": shape.cursors,
            "total_cursors": shape.topics * shape.cursors,
            "setup_ms": ms(self.setup),
            "flush_tick_ms": { "median": median, "max": max },
            "tick_cpu_ms": { "median": cpu_median, "max": cpu_max },
            "tick_thread_ms": {
                "on_cpu": thread_median(0),
                "waiting_for_cpu": thread_median(1),
                "blocked": thread_median(2),
            },
            "tick_cpu_per_dirty_cursor_us": cpu_median * 1e3 / total as f64,
            "peak_rss_bytes": self.peak_rss,
            "peak_rss_anon_bytes": self.peak_rss_anon,
            "peak_rss_file_bytes": self.peak_rss_file,
            "peak_rss_anon_per_cursor_bytes": self.peak_rss_anon as f64 / total as f64,
            "setup_rss_bytes": grown,
            "setup_rss_per_cursor_bytes": grown as f64 / total as f64,
            "fsyncs_per_tick": self.tick_syncs.iter().copied().max().unwrap_or(0),
            "tick_bytes_median": bytes_median,
            "tick_journal": self.tick_journal.iter().map(|t| serde_json::json!({
                "rollovers": t.rollovers,
                "rebases": t.rebases,
                "loads": t.loads,
            })).collect::<Vec<_>>(),
            "restart_ms": restart_ms,
            "restart_phases_ms": {
                "open": ms(self.restart_phases[0].wall),
                "topics": ms(self.restart_phases[1].wall),
                "cursors": ms(self.restart_phases[2].wall),
            },
            "restart_phases_cpu_ms": {
                "open": ms(self.restart_phases[0].cpu),
                "topics": ms(self.restart_phases[1].cpu),
                "cursors": ms(self.restart_phases[2].cpu),
            },
            "restart_per_cursor_us": restart_ms * 1e3 / total as f64,
            "restart_threads": shape.restart_threads,
            "restart_cpu_ms": ms(self.restart_cpu),
            "ack_memory_budget_bytes": self.ack_memory_budget_bytes,
            "threads": self.threads,
            "resident_ack_bytes": self.resident_ack_bytes,
            "resident_ack_peak_bytes": self.resident_ack_peak_bytes,
            "ack_released_bytes": self.ack_released_bytes,
            "ack_p99_us_during_flush": self.ack_p99_us,
            "acks_during_flush": self.acks_during_flush,
            "verified": self.verified,
        })
    }
}

/// The wall time of one phase of a run, and the CPU time of every thread of the process
/// meanwhile.
#[derive(Debug, Clone, Copy, Default)]
pub struct Phase {
    /// Wall time.
    pub wall: Duration,
    /// CPU time of every thread of the process (the resident-set sampler's included).
    pub cpu: Duration,
}

/// When a phase started, on both clocks of a [`Phase`].
struct Stamp {
    wall: Instant,
    cpu_ns: u64,
}

impl Stamp {
    fn now() -> Self {
        Self {
            cpu_ns: process_cpu_ns(None),
            wall: Instant::now(),
        }
    }

    /// The phase from this stamp to now.
    fn elapsed(&self) -> Phase {
        Phase {
            wall: self.wall.elapsed(),
            cpu: Duration::from_nanos(process_cpu_ns(None).saturating_sub(self.cpu_ns)),
        }
    }
}

/// What one tick's journal did besides the tick's own records (counter differences of
/// `Store::journal_stats` around the tick).
#[derive(Debug, Clone, Copy, Default)]
pub struct TickJournal {
    /// Segments its rollovers deleted.
    pub rollovers: u64,
    /// Full markers its rollovers wrote to re-base cursors' chains.
    pub rebases: u64,
    /// Partitions loaded back from the journal while the tick ran (the concurrent acker's
    /// loads too).
    pub loads: u64,
}

impl TickJournal {
    /// What the journal of `store` did since its counters were `before`.
    fn since(before: Option<ackstore::JournalStats>, store: Option<&Store>) -> Option<Self> {
        let (before, after) = (before?, store?.journal_stats());
        Some(Self {
            rollovers: after.rollovers - before.rollovers,
            rebases: after.rebases - before.rebases,
            loads: after.loads - before.loads,
        })
    }
}

/// The median and the maximum of `values` (0 for none).
fn median_max(values: &[f64]) -> (f64, f64) {
    let mut t = values.to_vec();
    t.sort_by(f64::total_cmp);
    let median = t.get(t.len() / 2).copied().unwrap_or(0.0);
    (median, t.last().copied().unwrap_or(0.0))
}

/// The truth of one cursor: which entries of its topic are acknowledged, a bit each.
#[derive(Clone)]
struct Truth(Vec<u64>);

impl Truth {
    fn new(entries: usize) -> Self {
        Self(vec![0; entries.div_ceil(64)])
    }

    fn set(&mut self, i: usize) {
        if let Some(word) = self.0.get_mut(i / 64) {
            *word |= 1 << (i % 64);
        }
    }

    fn get(&self, i: usize) -> bool {
        self.0
            .get(i / 64)
            .is_some_and(|word| word & (1 << (i % 64)) != 0)
    }
}

/// A topic's positions, kept as runs of consecutive entries of one ledger: `(index of the
/// run's first entry, its first position)`, so the workload's own memory stays small next to
/// what it measures.
struct Positions {
    runs: Vec<(usize, Position)>,
    len: usize,
}

impl Positions {
    fn new(all: &[Position]) -> Self {
        let mut runs: Vec<(usize, Position)> = Vec::new();
        for (i, p) in all.iter().enumerate() {
            let continues = i > 0
                && all[i - 1].ledger_id == p.ledger_id
                && all[i - 1].entry_id + 1 == p.entry_id;
            if !continues {
                runs.push((i, *p));
            }
        }
        Self {
            runs,
            len: all.len(),
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    /// The position of the topic's entry `i` (`i < len`).
    fn at(&self, i: usize) -> Position {
        let run = self.runs.partition_point(|(first, _)| *first <= i) - 1;
        let (first, p) = self.runs[run];
        Position::new(p.ledger_id, p.entry_id + (i - first) as u64)
    }
}

/// Nanoseconds on a CPU of the thread whose `schedstat` file is `path`.
fn cpu_ns(path: &Path) -> u64 {
    schedstat(path)[0]
}

/// The first two fields of a thread's `schedstat` file: nanoseconds on a CPU, and nanoseconds
/// runnable on a run queue, waiting for one (zeros where unreadable).
fn schedstat(path: &Path) -> [u64; 2] {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut fields = text.split_whitespace().map(|f| f.parse().unwrap_or(0));
    [fields.next().unwrap_or(0), fields.next().unwrap_or(0)]
}

/// Nanoseconds on a CPU of every thread of the process, ended ones included (the process's
/// CPU clock), but thread `except` (a thread id as `/proc/self/task` names it, alive while it is
/// measured).
fn process_cpu_ns(except: Option<&std::ffi::OsStr>) -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    let all = u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000
        + u64::try_from(now.tv_nsec).unwrap_or(0);
    let excepted = except.map_or(0, |id| {
        cpu_ns(&Path::new("/proc/self/task").join(id).join("schedstat"))
    });
    all.saturating_sub(excepted)
}

/// The calling thread's id, as its directory under `/proc/self/task` is named.
fn thread_id() -> Option<std::ffi::OsString> {
    std::fs::read_link("/proc/thread-self")
        .ok()?
        .file_name()
        .map(std::ffi::OsStr::to_os_string)
}

/// A field of `/proc/self/status` in bytes (`VmRSS`, `VmHWM`); 0 where there is none.
pub fn status_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
                .and_then(|v| v.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// The peaks of `RssAnon` and `RssFile` (`/proc/self/status`), sampled every 5 ms from a
/// thread of its own until [`RssPeaks::finish`].
struct RssPeaks {
    stop: std::sync::mpsc::Sender<()>,
    sampler: std::thread::JoinHandle<(u64, u64)>,
}

impl RssPeaks {
    fn start() -> Self {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let sampler = std::thread::spawn(move || {
            let mut peaks = (0, 0);
            loop {
                peaks.0 = peaks.0.max(status_bytes("RssAnon"));
                peaks.1 = peaks.1.max(status_bytes("RssFile"));
                match stopped.recv_timeout(Duration::from_millis(5)) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return peaks,
                }
            }
        });
        Self { stop, sampler }
    }

    /// The peaks (anonymous, file), with a last sample.
    fn finish(self) -> (u64, u64) {
        let _ = self.stop.send(());
        let last = (status_bytes("RssAnon"), status_bytes("RssFile"));
        self.sampler
            .join()
            .map_or(last, |p| (p.0.max(last.0), p.1.max(last.1)))
    }
}

/// Resets the process's peak resident set to its current one (Linux `clear_refs` 5; ignored
/// where unavailable, then the peak is the process's so far).
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

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

/// The store's default ack memory budget (`--ack-budget-bytes`): 64 MiB.
pub const STORE_ACK_BUDGET: usize = 64 << 20;

/// The topics and cursors of one run, however they are kept.
struct Fleet {
    store: Option<Store>,
    topics: Vec<Arc<ManagedLedger>>,
    /// (topic, cursor handle, the topic's positions).
    cursors: Vec<(usize, Cursor)>,
}

impl Fleet {
    /// Opens every topic and cursor, from `threads` threads (topics and their cursors spread
    /// over them), each cursor read once after its open if `first_read`; `phases` gets the wall
    /// and CPU time of the store's open, of the topics' and of the cursors'.
    fn open(
        dir: &Path,
        baseline: bool,
        shape: &Shape,
        phases: &mut [Phase; 3],
        (threads, first_read): (usize, bool),
    ) -> ackstore::Result<Self> {
        let started = Stamp::now();
        let (store, topics) = if baseline {
            let topics = in_parallel(shape.topics, threads, |t| {
                ManagedLedger::open(dir.join(format!("t{t}")), ledger_config()).map(Arc::new)
            })?;
            phases[1] = started.elapsed();
            (None, topics)
        } else {
            let store = Store::open(dir, store_config(shape.ack_budget))?;
            phases[0] = started.elapsed();
            let topics_started = Stamp::now();
            let topics = in_parallel(shape.topics, threads, |t| store.topic(&topic_name(t)))?;
            phases[1] = topics_started.elapsed();
            (Some(store), topics)
        };
        let cursors_started = Stamp::now();
        let per_topic = in_parallel(shape.topics, threads, |t| {
            (0..shape.cursors)
                .map(|c| {
                    let cursor =
                        topics[t].open_cursor(&cursor_name(c), CursorOptions::default())?;
                    if first_read {
                        cursor.read_entries(1)?;
                    }
                    Ok(cursor)
                })
                .collect::<ackstore::Result<Vec<_>>>()
        })?;
        let cursors = per_topic
            .into_iter()
            .enumerate()
            .flat_map(|(t, cs)| cs.into_iter().map(move |c| (t, c)))
            .collect();
        phases[2] = cursors_started.elapsed();
        Ok(Self {
            store,
            topics,
            cursors,
        })
    }

    /// One flush tick: `flush_all`, or every cursor's own flush. Returns the syncs it made and
    /// the bytes it appended to the store's journal (0 for the baseline).
    fn tick(&self) -> ackstore::Result<(u64, u64)> {
        if let Some(store) = &self.store {
            let done = store.flush_all()?;
            return Ok((done.syncs, done.bytes));
        }
        // The entry logs' fsyncs and the syncs of the journal each topic hosts.
        let fsyncs = |topics: &[Arc<ManagedLedger>]| -> ackstore::Result<u64> {
            topics
                .iter()
                .map(|t| {
                    let journal = t.journal_stats().map_or(0, |j| j.syncs);
                    t.log_stats().map(|s| s.fsyncs + journal)
                })
                .sum::<ackstore::Result<u64>>()
        };
        let before = fsyncs(&self.topics)?;
        for (_, cursor) in &self.cursors {
            cursor.flush()?;
        }
        Ok((fsyncs(&self.topics)? - before, 0))
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

/// Threads that create the topics, their entries and their cursors before the first tick (a
/// broker loads topics concurrently; the timed restart opens them from `--restart-threads`,
/// one by default).
const SETUP_THREADS: usize = 8;

/// `f(0..n)`, run from `threads` threads, in order.
fn in_parallel<T: Send>(
    n: usize,
    threads: usize,
    f: impl Fn(usize) -> ackstore::Result<T> + Sync,
) -> ackstore::Result<Vec<T>> {
    if threads <= 1 {
        return (0..n).map(f).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut done: Vec<(usize, T)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads.min(n.max(1)))
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        if i >= n {
                            break Ok(mine);
                        }
                        match f(i) {
                            Ok(t) => mine.push((i, t)),
                            Err(e) => break Err(e),
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join().unwrap_or_else(|_| {
                    Err(ackstore::Error::InvalidArgument {
                        reason: "a thread opening topics or cursors panicked".into(),
                    })
                })
            })
            .collect::<ackstore::Result<Vec<Vec<(usize, T)>>>>()
    })?
    .into_iter()
    .flatten()
    .collect();
    done.sort_by_key(|(i, _)| *i);
    Ok(done.into_iter().map(|(_, t)| t).collect())
}

/// Creates the topics, their cursors and their entries (synced); returns them with every
/// topic's positions.
fn set_up(dir: &Path, baseline: bool, shape: &Shape) -> ackstore::Result<(Fleet, Vec<Positions>)> {
    let fleet = Fleet::open(
        dir,
        baseline,
        shape,
        &mut [Phase::default(); 3],
        (SETUP_THREADS, false),
    )?;
    let payload = [0xA5_u8; 100];
    let positions = in_parallel(shape.topics, SETUP_THREADS, |t| {
        let topic = &fleet.topics[t];
        let ps = (0..shape.entries)
            .map(|_| topic.append(&payload))
            .collect::<ackstore::Result<Vec<_>>>()?;
        topic.sync()?;
        Ok(Positions::new(&ps))
    })?;
    Ok((fleet, positions))
}

/// The second thread of a tick: acks random entries of the upper half of every topic (`upper`
/// entries from `half`) on random cursors while `flushing` holds, recording each ack's latency in
/// microseconds, and stays alive until `flushing` is cleared (the tick's CPU figure leaves this
/// thread out by reading its own CPU, which a thread that ended no longer has).
fn ack_while_flushing(
    flushing: &AtomicBool,
    seed: u64,
    (fleet, positions, half, upper): (&Fleet, &[Positions], usize, usize),
    truth: &mut [Truth],
) -> Vec<f64> {
    let total = fleet.cursors.len();
    let mut rng = Rng(seed);
    let mut times = Vec::new();
    while flushing.load(Ordering::SeqCst) && upper > 0 {
        let k = rng.below(total);
        let i = half + rng.below(upper);
        let (t, cursor) = &fleet.cursors[k];
        let started = Instant::now();
        let result = cursor.ack(positions[*t].at(i));
        let took = started.elapsed();
        if result.is_err() {
            break;
        }
        if flushing.load(Ordering::SeqCst) {
            times.push(took.as_secs_f64() * 1e6);
        }
        truth[k].set(i);
    }
    while flushing.load(Ordering::SeqCst) {
        std::thread::park();
    }
    times
}

/// Runs the workload in `dir` (the store's directory, or the parent of the baseline's topic
/// directories).
pub fn run(dir: &Path, baseline: bool, shape: &Shape) -> ackstore::Result<Figures> {
    let mut figures = Figures {
        ack_memory_budget_bytes: (!baseline).then_some(shape.ack_budget as u64),
        ..Figures::default()
    };
    reset_peak_rss();
    let rss_peaks = RssPeaks::start();
    figures.rss_before_setup = status_bytes("VmRSS");
    let setup = Instant::now();
    let (fleet, positions) = set_up(dir, baseline, shape)?;
    figures.setup = setup.elapsed();
    figures.rss_after_setup = status_bytes("VmRSS");
    figures.threads = threads_now();
    let total = fleet.cursors.len();
    let half = usize::try_from(shape.entries / 2)
        .unwrap_or(usize::MAX)
        .max(1);
    let mut truth: Vec<Truth> =
        vec![Truth::new(positions.first().map_or(0, Positions::len)); total];
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
        cursor.ack(positions[*t].at(i))?;
        truth[k].set(i);
        Ok(())
    };
    for tick in 0..shape.ticks {
        for k in 0..total {
            ack(k, &mut truth, &fleet)?;
        }
        for _ in 0..total {
            ack(zipf_pick(&weights, &mut rng), &mut truth, &fleet)?;
        }
        let journal_before = fleet.store.as_ref().map(Store::journal_stats);
        let flushing = AtomicBool::new(true);
        let figures_thread = &mut figures.tick_thread_ms;
        let truth_now = &mut truth;
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (syncs, elapsed, cpu, acker) = std::thread::scope(|s| {
            let acker = s.spawn(|| {
                let _ = started_tx.send(thread_id());
                let seed = shape.seed ^ (tick as u64 + 1);
                let upper = usize::try_from(shape.entries).unwrap_or(usize::MAX) - half;
                ack_while_flushing(
                    &flushing,
                    seed,
                    (&fleet, &positions, half, upper),
                    truth_now,
                )
            });
            // Every thread but the acker, from when it runs to the tick's end.
            let acker_id = started_rx.recv().ok().flatten();
            let cpu_started = process_cpu_ns(acker_id.as_deref());
            let own = Path::new("/proc/thread-self/schedstat");
            let own_started = schedstat(own);
            let started = Instant::now();
            let syncs = fleet.tick();
            let elapsed = started.elapsed();
            let own_ended = schedstat(own);
            let cpu = process_cpu_ns(acker_id.as_deref()).saturating_sub(cpu_started);
            let ms = |i: usize| own_ended[i].saturating_sub(own_started[i]) as f64 / 1e6;
            let wall = elapsed.as_secs_f64() * 1e3;
            figures_thread.push([ms(0), ms(1), (wall - ms(0) - ms(1)).max(0.0)]);
            flushing.store(false, Ordering::SeqCst);
            acker.thread().unpark();
            (syncs, elapsed, cpu, acker.join())
        });
        let (syncs, bytes) = syncs?;
        figures.tick_syncs.push(syncs);
        figures.tick_bytes.extend((!baseline).then_some(bytes));
        figures
            .tick_journal
            .extend(TickJournal::since(journal_before, fleet.store.as_ref()));
        figures.tick_ms.push(elapsed.as_secs_f64() * 1e3);
        figures.tick_cpu_ms.push(cpu as f64 / 1e6);
        let times = acker.map_err(|_| ackstore::Error::InvalidArgument {
            reason: "the acking thread panicked".into(),
        })?;
        latencies.extend(times);
    }
    record_acks(latencies, &fleet, &mut figures)?;
    fleet.close()?;

    restart_and_verify(dir, baseline, shape, &positions, &truth, &mut figures)?;
    figures.peak_rss = status_bytes("VmHWM");
    (figures.peak_rss_anon, figures.peak_rss_file) = rss_peaks.finish();
    Ok(figures)
}

/// The acks measured during the ticks (`latencies`, in microseconds), the store's budget
/// figures and every cursor's resident ack bytes, after the last tick.
fn record_acks(
    mut latencies: Vec<f64>,
    fleet: &Fleet,
    figures: &mut Figures,
) -> ackstore::Result<()> {
    latencies.sort_by(f64::total_cmp);
    figures.acks_during_flush = latencies.len();
    figures.ack_p99_us = latencies
        .get((latencies.len() * 99 / 100).min(latencies.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0.0);
    let budget = fleet.store.as_ref().and_then(Store::ack_memory_stats);
    figures.resident_ack_peak_bytes = budget.map(|s| s.peak_resident_bytes as u64);
    figures.ack_released_bytes = budget.map(|s| s.released_bytes);
    figures.resident_ack_bytes = fleet
        .cursors
        .iter()
        .map(|(_, c)| c.stats().map(|s| s.ackset.resident_bytes as u64))
        .sum::<ackstore::Result<u64>>()?;
    Ok(())
}

/// The timed restart (open, every topic, every cursor to its first read, from
/// `shape.restart_threads` threads), then every entry of every cursor checked against `truth`.
fn restart_and_verify(
    dir: &Path,
    baseline: bool,
    shape: &Shape,
    positions: &[Positions],
    truth: &[Truth],
    figures: &mut Figures,
) -> ackstore::Result<()> {
    // Restart: open, every topic, every cursor to its first read, from `restart_threads`.
    let cpu_started = process_cpu_ns(None);
    let started = Instant::now();
    let fleet = Fleet::open(
        dir,
        baseline,
        shape,
        &mut figures.restart_phases,
        (shape.restart_threads, true),
    )?;
    figures.restart = started.elapsed();
    figures.restart_cpu = Duration::from_nanos(process_cpu_ns(None).saturating_sub(cpu_started));

    // Verify every entry of every cursor.
    for (k, (t, cursor)) in fleet.cursors.iter().enumerate() {
        let mut same = true;
        for i in 0..positions[*t].len() {
            same &= cursor.is_acked(positions[*t].at(i))? == truth[k].get(i);
        }
        figures.mismatches += u64::from(!same);
    }
    figures.verified = figures.mismatches == 0;
    fleet.close()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spins until the calling thread has used `ns` nanoseconds of CPU (its own counter, so
    /// however loaded the machine).
    fn spin_for_cpu(ns: u64) {
        let own = Path::new("/proc/thread-self/schedstat");
        let start = cpu_ns(own);
        let mut x = 0u64;
        while cpu_ns(own).saturating_sub(start) < ns {
            for i in 0..10_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
        }
    }

    /// A phase's CPU counts the threads that ran it, which have ended when it is measured.
    #[test]
    fn the_cpu_of_threads_that_ended_counts_in_the_process_cpu() {
        const EACH_NS: u64 = 20_000_000;
        let before = process_cpu_ns(None);
        in_parallel(3, 3, |_| {
            spin_for_cpu(EACH_NS);
            Ok(())
        })
        .expect("workers");
        let used = process_cpu_ns(None).saturating_sub(before);
        assert!(
            used >= 3 * EACH_NS,
            "{used} ns counted for 3 workers of at least {EACH_NS} ns each"
        );
    }
}

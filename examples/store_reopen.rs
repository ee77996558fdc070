//! A restart of a store that `ackstore perf --topics T --cursors C --dir D --keep` left, timed
//! alone and by phase, so two builds can be compared on the same directory (run each in turn):
//! `Store::open` (the catalog's claim and the journal's scan), every topic's open, then every
//! cursor's open and first read, as the perf workload's restart does (from one thread, or with
//! THREADS from that many, as `--restart-threads`: topics, then every topic's cursors, taken in
//! turn by the threads, as a broker loads topics concurrently). Prints each round's wall time
//! and CPU time per phase (of every thread of the process, the phase's workers included; Linux:
//! `/proc/self/task/*/schedstat`), and for the topics' and the cursors' phases the time their
//! threads were runnable but waiting for a CPU (the machine's other work: what the threads'
//! time neither on a CPU nor waiting for one is not, locks and I/O), then closes the store
//! cleanly.
//!
//! The configuration is `ackstore perf --topics`'s (ledgers of 10,000 entries, the shared ack
//! budget of 150 bytes a cursor as with `--ack-budget-per-cursor-bytes 150`); the names are its
//! (`persistent://tenant/ns/topic-{t}`, `sub-{c}`).
//!
//! Run: `cargo run --release -- perf --topics 10000 --cursors 10 --ticks 3
//! --ack-budget-per-cursor-bytes 150 --dir D --keep`, then
//! `cargo run --release --example store_reopen -- D/store 10000 10 3 [THREADS]`.
//!
//! With `ACKSTORE_WARM_MIB=N` in the environment, the process first writes one byte in every
//! page of N MiB of fresh memory and frees it, so the restart's heap comes from pages the
//! machine has just backed. On a virtual machine that hands free memory back to its host (a
//! balloon's free page reporting), a fresh process's first touch of each page costs a fault in
//! the host as well, which on the 2-core guests here doubles the cursors' phase of a
//! 100,000-cursor restart and varies with whatever freed memory before it (a copy of the store,
//! say): without the warm-up a round measures the machine's memory as much as the restart
//! (docs/benchmarks.md, "A fresh process's restart on a guest: the host's first touch").

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ackstore::{CursorOptions, Store};

#[path = "../cli/src/perf_workload.rs"]
mod perf_workload;

use perf_workload::{cursor_name, store_config, topic_name};

/// A thread's time on a CPU and runnable but waiting for one (the machine's other work), or
/// the sum of several threads'.
#[derive(Clone, Copy, Default)]
struct Sched {
    cpu: Duration,
    wait: Duration,
}

impl Sched {
    /// A thread's, from its `schedstat` file (zeros where unreadable).
    fn of(schedstat: &std::path::Path) -> Self {
        let text = std::fs::read_to_string(schedstat).unwrap_or_default();
        let mut fields = text
            .split_whitespace()
            .map(|f| Duration::from_nanos(f.parse().unwrap_or(0)));
        Self {
            cpu: fields.next().unwrap_or_default(),
            wait: fields.next().unwrap_or_default(),
        }
    }

    /// The process's: every live thread's, plus what the workers of [`in_parallel`] used
    /// before they ended (a worker still listed while it exits is counted once).
    fn process(ended: &Ended) -> Self {
        std::fs::read_dir("/proc/self/task")
            .expect("/proc/self/task")
            .filter_map(Result::ok)
            .filter(|t| !ended.threads.contains(&t.file_name()))
            .map(|t| Self::of(&t.path().join("schedstat")))
            .fold(ended.sched, Self::add)
    }

    fn add(self, other: Self) -> Self {
        Self {
            cpu: self.cpu + other.cpu,
            wait: self.wait + other.wait,
        }
    }

    /// Milliseconds on a CPU and waiting for one, from `before` to `self` (zero where a thread
    /// of the store that ended between the two readings left `self` below `before`).
    fn ms_since(self, before: Self) -> (f64, f64) {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        (
            ms(self.cpu.saturating_sub(before.cpu)),
            ms(self.wait.saturating_sub(before.wait)),
        )
    }
}

/// The workers of [`in_parallel`] that ended: their thread ids, and their time.
#[derive(Default)]
struct Ended {
    threads: std::collections::BTreeSet<std::ffi::OsString>,
    sched: Sched,
}

/// `f(0..n)` from `threads` threads taking the next index in turn, in order; adds to `ended`
/// the workers and the time they used (read by each as it ends).
fn in_parallel<T: Send>(
    n: usize,
    threads: usize,
    ended: &mut Ended,
    f: impl Fn(usize) -> T + Sync,
) -> Vec<T> {
    if threads <= 1 {
        return (0..n).map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let own = std::path::Path::new("/proc/thread-self/schedstat");
    let mut done: Vec<(usize, T)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        if i >= n {
                            let id = std::fs::read_link("/proc/thread-self")
                                .ok()
                                .and_then(|p| p.file_name().map(std::ffi::OsStr::to_os_string));
                            return (mine, Sched::of(own), id);
                        }
                        mine.push((i, f(i)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| {
                let (mine, cpu, id) = w.join().expect("a worker");
                ended.sched = ended.sched.add(cpu);
                ended.threads.extend(id);
                mine
            })
            .collect()
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, t)| t).collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir, topics, cursors, rest @ ..] = args.as_slice() else {
        panic!("usage: store_reopen DIR TOPICS CURSORS_PER_TOPIC [ROUNDS [THREADS]]");
    };
    let topics: usize = topics.parse().expect("a number of topics");
    let per_topic: usize = cursors.parse().expect("a number of cursors per topic");
    let rounds: usize = rest
        .first()
        .map_or(3, |r| r.parse().expect("a number of rounds"));
    let threads: usize = rest
        .get(1)
        .map_or(1, |t| t.parse().expect("a number of threads"));
    if let Some(mib) = std::env::var("ACKSTORE_WARM_MIB")
        .ok()
        .filter(|m| !m.is_empty())
    {
        warm(mib.parse().expect("ACKSTORE_WARM_MIB: a number of MiB"));
    }
    println!(
        "threads  round  wall_ms  cpu_ms  open_ms  open_cpu_ms  topics_ms  topics_cpu_ms  \
         topics_wait_ms  cursors_ms  cursors_cpu_ms  cursors_wait_ms"
    );
    for round in 1..=rounds {
        let mut ended = Ended::default();
        let (started, s0) = (Instant::now(), Sched::process(&ended));
        let store =
            Store::open(dir, store_config(150 * topics * per_topic)).expect("open the store");
        let (opened_at, s1) = (started.elapsed(), Sched::process(&ended));
        let opened = in_parallel(topics, threads, &mut ended, |t| {
            store.topic(&topic_name(t)).expect("topic")
        });
        let (topics_at, s2) = (started.elapsed(), Sched::process(&ended));
        let cursors = in_parallel(topics, threads, &mut ended, |t| {
            (0..per_topic)
                .map(|c| {
                    let cursor = opened[t]
                        .open_cursor(&cursor_name(c), CursorOptions::default())
                        .expect("cursor");
                    cursor.read_entries(1).expect("first read");
                    cursor
                })
                .collect::<Vec<_>>()
        });
        let (wall, s3) = (started.elapsed(), Sched::process(&ended));
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (open, topics_phase, cursors_phase) =
            (s1.ms_since(s0), s2.ms_since(s1), s3.ms_since(s2));
        println!(
            "{threads:>7}  {round:>5}  {:>7.0}  {:>6.0}  {:>7.0}  {:>11.0}  {:>9.0}  {:>13.0}  \
             {:>14.0}  {:>10.0}  {:>14.0}  {:>15.0}",
            ms(wall),
            s3.ms_since(s0).0,
            ms(opened_at),
            open.0,
            ms(topics_at - opened_at),
            topics_phase.0,
            topics_phase.1,
            ms(wall - topics_at),
            cursors_phase.0,
            cursors_phase.1,
        );
        drop(cursors);
        for topic in &opened {
            topic.close().expect("close a topic");
        }
        drop(opened);
        store.close().expect("close the store");
    }
}

/// Writes one byte in every page of `mib` MiB of fresh memory, then frees it (see the module's
/// documentation).
fn warm(mib: usize) {
    let mut block = vec![0_u8; mib << 20];
    for page in block.chunks_mut(4096) {
        page[0] = 1;
    }
    std::hint::black_box(&block);
}

//! Flush ticks of a store that `ackstore perf --topics T --cursors C --dir D --keep` left, with
//! every cursor dirty, timed alone: the store opened (every topic, every cursor), then TICKS
//! rounds of one ack per cursor (the entry at its read position, so its mark-delete moves)
//! followed by one `Store::flush_all`. Prints each tick's wall time and CPU time (of every
//! thread of the process, the flusher pool's included; Linux: `/proc/self/task/*/schedstat`)
//! and the median CPU time per cursor, then closes the store cleanly.
//!
//! Its use is comparing a tick's cost per cursor between store sizes, or builds, on the same
//! directories (copy a kept store before each run: the ticks change it), and profiling the
//! ticks without the set-up: with WAIT_MS the process prints `ready PID` once the store is
//! open and waits that long before the first ack, time for a profiler to attach
//! (`perf record -p PID`).
//!
//! Run: `cargo run --release -- perf --topics 10000 --cursors 10 --ticks 3
//! --ack-budget-per-cursor-bytes 150 --dir D --keep`, then
//! `cargo run --release --example store_ticks -- D/store 10000 10 3 [WAIT_MS]`.

use std::time::{Duration, Instant};

use ackstore::{Cursor, CursorOptions, Store};

#[path = "../cli/src/perf_workload.rs"]
mod perf_workload;

use perf_workload::{cursor_name, store_config, topic_name};

/// CPU time of every thread of the process so far (threads that ended are not counted; the
/// store's threads live as long as it does).
fn process_cpu() -> Duration {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse().ok())
        .map(Duration::from_nanos)
        .sum()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir, topics, per_topic, ticks, rest @ ..] = args.as_slice() else {
        panic!("usage: store_ticks DIR TOPICS CURSORS_PER_TOPIC TICKS [WAIT_MS]");
    };
    let topics: usize = topics.parse().expect("a number of topics");
    let per_topic: usize = per_topic.parse().expect("a number of cursors per topic");
    let ticks: usize = ticks.parse().expect("a number of ticks");
    let store = Store::open(dir, store_config(150 * topics * per_topic)).expect("open the store");
    let mut cursors: Vec<Cursor> = Vec::with_capacity(topics * per_topic);
    for t in 0..topics {
        let topic = store.topic(&topic_name(t)).expect("topic");
        for c in 0..per_topic {
            let cursor = topic
                .open_cursor(&cursor_name(c), CursorOptions::default())
                .expect("cursor");
            cursors.push(cursor);
        }
    }
    if let Some(wait) = rest.first() {
        println!("ready {}", std::process::id());
        std::thread::sleep(Duration::from_millis(wait.parse().expect("WAIT_MS")));
    }
    println!("tick  wall_ms  cpu_ms  cpu_us_per_cursor");
    let mut per_cursor = Vec::with_capacity(ticks);
    for tick in 1..=ticks {
        for cursor in &cursors {
            let at = cursor.read_position().expect("read position");
            // An entry past the end of the topic is no entry to ack: that cursor stays clean.
            let _ = cursor.ack(at);
        }
        let (started, cpu) = (Instant::now(), process_cpu());
        store.flush_all().expect("tick");
        let (wall, cpu) = (started.elapsed(), process_cpu().saturating_sub(cpu));
        let us = cpu.as_secs_f64() * 1e6 / cursors.len() as f64;
        per_cursor.push(us);
        println!(
            "{tick:4}  {:7.1}  {:6.1}  {us:17.2}",
            wall.as_secs_f64() * 1e3,
            cpu.as_secs_f64() * 1e3
        );
    }
    per_cursor.sort_by(f64::total_cmp);
    if let Some(median) = per_cursor.get(per_cursor.len() / 2) {
        println!("median CPU per cursor and tick: {median:.2} us");
    }
    drop(cursors);
    store.close().expect("close");
}

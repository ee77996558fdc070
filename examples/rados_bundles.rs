//! Many stores (bundles) in one broker process on Ceph RADOS, and their takeover by two
//! processes in parallel after the first one is killed (cargo feature `rados`; `CEPH_CONF`
//! names the cluster, `ACKSTORE_RADOS_POOL` the pool, default `ackstore`).
//!
//! Arguments: `[STORES] [TOPICS] [LEASE_SECONDS]`, default 64 stores of 100 topics with the
//! default 10 s lease. The example runs itself three times as a child:
//!
//! 1. the holder opens the stores in one `StoreGroup` (2 flusher threads, one ack budget)
//!    through one `RadosCluster` connection, each in a fresh namespace, and builds them (every
//!    topic one synced entry and a cursor `sub` whose ack is flushed); then it reports, over
//!    two leases, the process's threads, the lease renewals per second of all its stores
//!    together, and its resident memory;
//! 2. the parent kills the holder with SIGKILL;
//! 3. two takers start at once, each taking half the stores in a group of its own, every
//!    store opened in parallel with a bounded wait on its lock (`with_lock_wait`); each store's
//!    time is from the kill to its first answer (the store open, then `t0`'s cursor read), and
//!    past its lease: from when the lease of the holder's last renewal of it (seen every 2 ms
//!    while holding) ran out.
//!
//! Run: `CEPH_CONF=... cargo run --release --features rados --example rados_bundles [-- 64 100 10]`;
//! `ACKSTORE_BUNDLES_EACH=1` also prints each store's time, and the time its store open
//! returned, from the kill.
//! The namespaces are kept; `ACKSTORE_BUNDLES_PREFIX` set to the prefix a run printed reuses its
//! stores (the holder then opens every topic and builds only what is missing).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ackstore::{
    CursorOptions, GroupConfig, InitialPosition, RadosCluster, RadosStorage, Store, StoreConfig,
    StoreGroup,
};

const ROLE: &str = "ACKSTORE_BUNDLES_ROLE";
const FLUSHER_THREADS: usize = 2;
const BUILD_THREADS: usize = 8;

struct Args {
    stores: usize,
    topics: usize,
    lease: Duration,
    conf: String,
    pool: String,
}

fn args() -> Args {
    let nums: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    Args {
        stores: nums
            .first()
            .map_or(64, |&n| usize::try_from(n).expect("stores")),
        topics: nums
            .get(1)
            .map_or(100, |&n| usize::try_from(n).expect("topics")),
        lease: Duration::from_secs(nums.get(2).copied().unwrap_or(10)),
        conf: std::env::var("CEPH_CONF").expect("CEPH_CONF must name the cluster's ceph.conf"),
        pool: std::env::var("ACKSTORE_RADOS_POOL").unwrap_or_else(|_| "ackstore".into()),
    }
}

fn config() -> StoreConfig {
    let mut config = StoreConfig::default();
    config.ledger.cursor.flush_interval = Some(Duration::from_millis(200));
    config
}

fn group() -> StoreGroup {
    StoreGroup::new(&GroupConfig {
        flusher_threads: FLUSHER_THREADS,
        ack_memory_bytes: Some(64 << 20),
        open_files: None,
    })
}

fn earliest() -> CursorOptions {
    CursorOptions {
        initial_position: InitialPosition::Earliest,
        inclusive: true,
    }
}

fn threads_now() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, Iterator::count)
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The 1, 5 and 15 minute load averages (`/proc/loadavg`).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").expect("stdout");
    out.flush().expect("stdout");
}

/// The holder: builds the stores, reports, then waits to be killed.
fn hold(a: &Args, prefix: &str) -> ackstore::Result<()> {
    let cluster = RadosCluster::connect(&a.conf)?;
    let group = group();
    let built = Instant::now();
    let opened: Vec<(RadosStorage, Store)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..BUILD_THREADS)
            .map(|w| {
                let (cluster, group) = (&cluster, &group);
                s.spawn(
                    move || -> ackstore::Result<Vec<(usize, RadosStorage, Store)>> {
                        let mut mine = Vec::new();
                        for i in (w..a.stores).step_by(BUILD_THREADS) {
                            let storage = cluster
                                .storage(&a.pool, &format!("{prefix}-{i}"))?
                                .with_lease(a.lease);
                            let store =
                                group.open_with_storage(Arc::new(storage.clone()), config())?;
                            let mut cursors = Vec::new();
                            let existing = store.topic_names().len();
                            for t in 0..a.topics {
                                let topic = store.topic(&format!("t{t}"))?;
                                if t < existing {
                                    // Built by an earlier run (ACKSTORE_BUNDLES_PREFIX): opened.
                                    cursors.push(topic.open_cursor("sub", earliest())?);
                                    continue;
                                }
                                let p = topic.append(b"entry")?;
                                topic.append(b"entry")?;
                                topic.sync()?;
                                let cursor = topic.open_cursor("sub", earliest())?;
                                cursor.ack(p)?;
                                cursors.push(cursor);
                            }
                            store.flush_all()?;
                            mine.push((i, storage, store));
                        }
                        Ok(mine)
                    },
                )
            })
            .collect();
        let mut all = Vec::new();
        for w in workers {
            all.extend(w.join().expect("a build thread")?);
        }
        all.sort_by_key(|(i, _, _)| *i);
        Ok::<_, ackstore::Error>(all.into_iter().map(|(_, st, s)| (st, s)).collect())
    })?;
    say(&format!("built {:.1}", built.elapsed().as_secs_f64()));
    let renewals =
        |o: &[(RadosStorage, Store)]| -> u64 { o.iter().map(|(s, _)| s.lease_renewals()).sum() };
    let (before, from) = (renewals(&opened), Instant::now());
    // When each store's lease was last renewed (its renewal count seen to move, every 2 ms):
    // the lease runs out a lease after, which is when a taker can have the store.
    let mut seen: Vec<u64> = opened.iter().map(|(s, _)| s.lease_renewals()).collect();
    let mut renewed_at = vec![0u128; opened.len()];
    let mut sample = || {
        for (k, (s, _)) in opened.iter().enumerate() {
            let n = s.lease_renewals();
            if n != seen[k] {
                seen[k] = n;
                renewed_at[k] = unix_nanos();
            }
        }
    };
    while from.elapsed() < a.lease * 2 {
        sample();
        std::thread::sleep(Duration::from_millis(2));
    }
    let per_s = (renewals(&opened) - before) as f64 / from.elapsed().as_secs_f64();
    let threads = threads_now();
    sample();
    say(&format!(
        "renewed {}",
        renewed_at
            .iter()
            .map(u128::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    ));
    say(&format!(
        "holding threads {threads} renewals_per_s {per_s:.1} rss_mib {:.0}",
        rss_mib()
    ));
    // Killed here.
    loop {
        std::thread::park();
    }
}

/// A taker: takes stores `from..to` in parallel, each answering once open; prints each time
/// from the kill (`killed_at`, Unix nanoseconds).
fn take(a: &Args, prefix: &str, from: usize, to: usize, killed_at: u128) -> ackstore::Result<()> {
    let cluster = RadosCluster::connect(&a.conf)?;
    let group = group();
    let connected = unix_nanos();
    let times: Vec<(usize, f64, f64)> = std::thread::scope(|s| {
        let tasks: Vec<_> = (from..to)
            .map(|i| {
                let (cluster, group) = (&cluster, &group);
                s.spawn(move || -> ackstore::Result<(usize, f64, f64, Store)> {
                    let storage = cluster
                        .storage(&a.pool, &format!("{prefix}-{i}"))?
                        .with_lease(a.lease)
                        .with_lock_wait(a.lease * 3);
                    let store = group.open_with_storage(Arc::new(storage), config())?;
                    let opened = unix_nanos();
                    let topic = store.topic("t0")?;
                    let cursor = topic.open_cursor("sub", earliest())?;
                    let read = cursor.read_entries(1)?;
                    assert_eq!(read.len(), 1, "store {i}: the unacked entry");
                    let ms = (unix_nanos() - killed_at) as f64 / 1e6;
                    let open_ms = (opened - killed_at) as f64 / 1e6;
                    Ok((i, ms, open_ms, store))
                })
            })
            .collect();
        let mut times = Vec::new();
        let mut stores = Vec::new();
        for t in tasks {
            let (i, ms, open_ms, store) = t.join().expect("a taker thread")?;
            times.push((i, ms, open_ms));
            stores.push(store);
        }
        Ok::<_, ackstore::Error>(times)
    })?;
    say(&format!(
        "connected {:.0}",
        (connected.saturating_sub(killed_at)) as f64 / 1e6
    ));
    for (i, ms, open_ms) in times {
        say(&format!("store {i} {ms:.0} opened {open_ms:.0}"));
    }
    say(&format!(
        "taker threads {} rss_mib {:.0}",
        threads_now(),
        rss_mib()
    ));
    Ok(())
}

fn child(role: &str, extra: &[(&str, String)]) -> Child {
    Command::new(std::env::current_exe().expect("the example"))
        .args(std::env::args().skip(1))
        .env(ROLE, role)
        .envs(extra.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::piped())
        .spawn()
        .expect("start a child")
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let k = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[k.min(sorted.len() - 1)]
}

fn main() -> ackstore::Result<()> {
    let a = args();
    if let Ok(role) = std::env::var(ROLE) {
        let prefix = std::env::var("ACKSTORE_BUNDLES_PREFIX").expect("prefix");
        return match role.as_str() {
            "hold" => hold(&a, &prefix),
            _ => {
                let num =
                    |k: &str| -> u128 { std::env::var(k).expect(k).parse().expect("a number") };
                take(
                    &a,
                    &prefix,
                    usize::try_from(num("ACKSTORE_BUNDLES_FROM")).expect("from"),
                    usize::try_from(num("ACKSTORE_BUNDLES_TO")).expect("to"),
                    num("ACKSTORE_BUNDLES_KILLED_AT"),
                )
            }
        };
    }
    // A prefix of an earlier run reuses its stores (the holder builds only what they lack).
    let prefix = std::env::var("ACKSTORE_BUNDLES_PREFIX")
        .unwrap_or_else(|_| format!("bundles-{}-{}", std::process::id(), unix_nanos()));
    println!("namespaces {prefix}-0..{}", a.stores);
    println!(
        "{} stores x {} topics, lease {:?}, holder: one connection, one group ({FLUSHER_THREADS} \
         flusher threads)",
        a.stores, a.topics, a.lease
    );
    let mut holder = child("hold", &[("ACKSTORE_BUNDLES_PREFIX", prefix.clone())]);
    let mut lines = BufReader::new(holder.stdout.take().expect("stdout")).lines();
    let mut renewed_at: Vec<u128> = Vec::new();
    for line in lines.by_ref() {
        let line = line.expect("the holder's output");
        if let Some(rest) = line.strip_prefix("renewed ") {
            renewed_at = rest
                .split_whitespace()
                .map(|t| t.parse().expect("a time"))
                .collect();
            continue;
        }
        println!("holder: {line}");
        if line.starts_with("holding") {
            break;
        }
    }
    let killed_at = unix_nanos();
    holder.kill().expect("SIGKILL the holder");
    println!("load average at the kill: {}", load_average());
    holder.wait().expect("reap the holder");
    let half = a.stores / 2;
    let takers: Vec<Child> = [(0, half), (half, a.stores)]
        .iter()
        .map(|&(from, to)| {
            child(
                "take",
                &[
                    ("ACKSTORE_BUNDLES_PREFIX", prefix.clone()),
                    ("ACKSTORE_BUNDLES_FROM", from.to_string()),
                    ("ACKSTORE_BUNDLES_TO", to.to_string()),
                    ("ACKSTORE_BUNDLES_KILLED_AT", killed_at.to_string()),
                ],
            )
        })
        .collect();
    // A store's time past its lease: from when its last renewal's lease ran out.
    let lease_ms = a.lease.as_secs_f64() * 1e3;
    let past_lease = |store: usize, ms: f64| -> Option<f64> {
        let renewed = *renewed_at.get(store).filter(|t| **t > 0)?;
        Some(ms - (renewed as f64 - killed_at as f64) / 1e6 - lease_ms)
    };
    let (mut all, mut all_past) = (Vec::new(), Vec::new());
    for (k, mut t) in takers.into_iter().enumerate() {
        let out = BufReader::new(t.stdout.take().expect("stdout"));
        let (mut times, mut past) = (Vec::new(), Vec::new());
        for line in out.lines() {
            let line = line.expect("a taker's output");
            if let Some(rest) = line.strip_prefix("store ") {
                let mut words = rest.split_whitespace();
                let store: usize = words.next().and_then(|w| w.parse().ok()).expect("a store");
                let ms: f64 = words.next().and_then(|m| m.parse().ok()).expect("a time");
                times.push(ms);
                past.extend(past_lease(store, ms));
                if std::env::var_os("ACKSTORE_BUNDLES_EACH").is_some() {
                    println!("taker {k}: {line}");
                }
            } else {
                println!("taker {k}: {line}");
            }
        }
        let status = t.wait().expect("reap a taker");
        assert!(status.success(), "taker {k} failed: {status}");
        times.sort_by(f64::total_cmp);
        println!(
            "taker {k}: {} stores, from the kill to the first answer: min {:.0} ms, median {:.0} \
             ms, p90 {:.0} ms, max {:.0} ms",
            times.len(),
            times[0],
            percentile(&times, 0.5),
            percentile(&times, 0.9),
            times[times.len() - 1]
        );
        past.sort_by(f64::total_cmp);
        if !past.is_empty() {
            println!(
                "taker {k}: past each store's lease (from its last renewal's lease to the first \
                 answer): median {:.0} ms, p90 {:.0} ms, max {:.0} ms",
                percentile(&past, 0.5),
                percentile(&past, 0.9),
                past[past.len() - 1]
            );
        }
        all.extend(times);
        all_past.extend(past);
    }
    all.sort_by(f64::total_cmp);
    all_past.sort_by(f64::total_cmp);
    println!(
        "all {} stores: median {:.0} ms, max {:.0} ms (lease + 1 s = {} ms); past the lease: \
         median {:.0} ms, max {:.0} ms",
        all.len(),
        percentile(&all, 0.5),
        all[all.len() - 1],
        (a.lease + Duration::from_secs(1)).as_millis(),
        percentile(&all_past, 0.5),
        all_past.last().copied().unwrap_or(f64::NAN)
    );
    Ok(())
}

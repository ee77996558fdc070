//! SIGKILL takeover of stores on RADOS (`CEPH_CONF`). A broker process holds stores, acks
//! entries of every topic at random and flushes each store in turn, telling its parent each ack
//! *before* it makes it and each store's flush *after* it returned `Ok`; it is killed with
//! SIGKILL in the middle of that. New owners then take the stores over (one owner for a store
//! of 300 topics; two owners, each through a connection of its own, splitting eight stores) and
//! every cursor is checked against the killed process's log: every ack a flush confirmed is
//! there (invariant 2), and nothing is acked that the process did not ack (invariant 1). Each
//! new owner opens a store only once the killed owner's lease has run out (a waiting open), and
//! the time from the kill to every topic served is printed.

#![cfg(feature = "rados")]

use crate::support;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ackstore::{Position, RadosCluster, Store};
use support::config::store_without_flusher;
use support::rados::{Broker, broker_role, cluster, conf, fresh_namespace, pool, tell};
use support::topic::earliest;
use support::workload::{Rng, seed_from_env};

/// The broker's namespaces (one per store: `{prefix}-{store}`), stores and topics per store.
const NAMESPACES: &str = "ACKSTORE_TAKEOVER_NAMESPACES";
const STORES: &str = "ACKSTORE_TAKEOVER_STORES";
const TOPICS: &str = "ACKSTORE_TAKEOVER_TOPICS";
const SEED: &str = "ACKSTORE_TAKEOVER_SEED";
/// Entries of each topic, all in its first ledger.
const ENTRIES: u64 = 4;
const CURSOR: &str = "sub";
const LEASE: Duration = Duration::from_secs(2);
/// Threads that build the stores in the broker and check them in the test.
const THREADS: usize = 8;
/// Flush rounds (every store flushed once) the broker completes before it is killed.
const ROUNDS: usize = 3;
/// A guard against a hang, not a timing claim.
const GUARD: Duration = Duration::from_secs(120);

fn namespace(prefix: &str, store: usize) -> String {
    format!("{prefix}-{store}")
}

fn open_store(cluster: &RadosCluster, ns: &str) -> Store {
    let storage = cluster
        .storage(&pool(), ns)
        .expect("namespace")
        .with_lease(LEASE)
        .with_lock_wait(GUARD);
    Store::open_with_storage(Arc::new(storage), store_without_flusher())
        .unwrap_or_else(|e| panic!("open the store in {ns}: {e}"))
}

fn env_usize(var: &str) -> usize {
    std::env::var(var).unwrap().parse().unwrap()
}

/// Runs `f` over `0..n` on [`THREADS`] threads.
fn in_parallel(n: usize, f: impl Fn(usize) + Sync) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= n {
                        return;
                    }
                    f(i);
                }
            });
        }
    });
}

/// A topic's cursor `sub` in the broker, and the ledger its entries are in.
type Held = (Arc<ackstore::Cursor>, u64);

/// The broker role: builds the stores (every topic `ENTRIES` synced entries and the cursor
/// `sub`), says `E store topic ledger` for each topic and `ready`, then acks at random and
/// flushes store after store until it is killed (`A store topic ledger entry` before an ack,
/// `F store` after a flush of the store returned `Ok`).
fn run_broker() {
    let prefix = std::env::var(NAMESPACES).unwrap();
    let (stores, topics) = (env_usize(STORES), env_usize(TOPICS));
    let mut rng = Rng::new(std::env::var(SEED).unwrap().parse().unwrap());
    let opened: Vec<Store> = (0..stores)
        .map(|s| open_store(cluster(), &namespace(&prefix, s)))
        .collect();
    let slots: Vec<std::sync::Mutex<Option<Held>>> = (0..stores * topics)
        .map(|_| std::sync::Mutex::new(None))
        .collect();
    in_parallel(stores * topics, |i| {
        let (s, t) = (i / topics, i % topics);
        let topic = opened[s].topic(&format!("t{t}")).unwrap();
        let first = topic.append(b"entry").unwrap();
        for _ in 1..ENTRIES {
            topic.append(b"entry").unwrap();
        }
        topic.sync().unwrap();
        let cursor = topic.open_cursor(CURSOR, earliest()).unwrap();
        *slots[i].lock().unwrap() = Some((Arc::new(cursor), first.ledger_id));
    });
    let cursors: Vec<Held> = slots
        .into_iter()
        .map(|slot| slot.into_inner().unwrap().unwrap())
        .collect();
    for store in &opened {
        store.flush_all().unwrap();
    }
    for (i, (_, ledger)) in cursors.iter().enumerate() {
        tell(&format!("E {} {} {ledger}", i / topics, i % topics));
    }
    tell("ready");
    loop {
        for (s, store) in opened.iter().enumerate() {
            for _ in 0..=rng.below(2 * topics as u64) {
                let t = rng.index(topics);
                let (cursor, ledger) = &cursors[s * topics + t];
                let entry = rng.below(ENTRIES);
                tell(&format!("A {s} {t} {ledger} {entry}"));
                cursor.ack(Position::new(*ledger, entry)).unwrap();
            }
            store.flush_all().unwrap();
            tell(&format!("F {s}"));
        }
    }
}

/// What the killed broker's log says of one topic: its ledger, the acks it attempted, and
/// those a flush of its store confirmed.
#[derive(Default, Clone)]
struct Logged {
    ledger: u64,
    attempted: BTreeSet<u64>,
    flushed: BTreeSet<u64>,
}

/// Reads the broker's log into `(store, topic) -> Logged`.
fn model(lines: &[String]) -> HashMap<(usize, usize), Logged> {
    let mut topics: HashMap<(usize, usize), Logged> = HashMap::new();
    // Acks since the last flush of each store.
    let mut pending: HashMap<usize, Vec<(usize, u64)>> = HashMap::new();
    for line in lines {
        let words: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| -> u64 { words[i].parse().unwrap() };
        let store = |i: usize| -> usize { words[i].parse().unwrap() };
        match words[0] {
            "E" => topics.entry((store(1), store(2))).or_default().ledger = num(3),
            "A" => {
                let (s, t) = (store(1), store(2));
                let logged = topics.entry((s, t)).or_default();
                assert_eq!(logged.ledger, num(3), "an ack in another ledger");
                logged.attempted.insert(num(4));
                pending.entry(s).or_default().push((t, num(4)));
            }
            "F" => {
                let s = store(1);
                for (t, entry) in pending.remove(&s).unwrap_or_default() {
                    topics.get_mut(&(s, t)).unwrap().flushed.insert(entry);
                }
            }
            _ => {}
        }
    }
    topics
}

/// Checks every topic of `store` (of `topics` topics) against the log; the number of flushed
/// acks checked.
fn check_store(
    store: &Store,
    s: usize,
    topics: usize,
    logged: &HashMap<(usize, usize), Logged>,
) -> usize {
    let checked = std::sync::atomic::AtomicUsize::new(0);
    in_parallel(topics, |t| {
        let log = &logged[&(s, t)];
        let topic = store.topic(&format!("t{t}")).unwrap();
        let cursor = topic.open_cursor(CURSOR, earliest()).unwrap();
        for entry in 0..ENTRIES {
            let acked = cursor.is_acked(Position::new(log.ledger, entry)).unwrap();
            assert!(
                !acked || log.attempted.contains(&entry),
                "store {s} topic t{t}: entry {entry} is acked but the killed owner never acked it"
            );
            if log.flushed.contains(&entry) {
                assert!(
                    acked,
                    "store {s} topic t{t}: the flushed ack of {entry} is lost"
                );
                checked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    });
    checked.into_inner()
}

/// Starts a broker holding `stores` stores of `topics` topics in fresh namespaces, lets it
/// complete [`ROUNDS`] flush rounds, kills it, and returns the namespaces' prefix, its log and
/// when it was killed.
fn kill_a_broker(test: &str, stores: usize, topics: usize) -> (String, Vec<String>, Instant) {
    let prefix = fresh_namespace("takeover");
    let seed = seed_from_env(SEED);
    eprintln!("{SEED}={seed}");
    let test = support::harness::test_path(module_path!(), test);
    let (stores_text, topics_text, seed_text) =
        (stores.to_string(), topics.to_string(), seed.to_string());
    let mut broker = Broker::spawn(
        &test,
        "broker",
        &[
            (NAMESPACES, prefix.as_str()),
            (STORES, stores_text.as_str()),
            (TOPICS, topics_text.as_str()),
            (SEED, seed_text.as_str()),
        ],
    );
    broker.expect("ready", GUARD);
    for _ in 0..ROUNDS {
        broker.expect(&format!("F {}", stores - 1), GUARD);
    }
    broker.kill();
    let killed = Instant::now();
    (prefix, broker.heard_all(), killed)
}

#[test]
fn a_store_of_300_topics_killed_mid_flush_is_taken_over_with_every_flushed_ack() {
    const TEST: &str =
        "a_store_of_300_topics_killed_mid_flush_is_taken_over_with_every_flushed_ack";
    const TOPICS_300: usize = 300;
    if broker_role().is_some() {
        return run_broker();
    }
    let (prefix, lines, killed) = kill_a_broker(TEST, 1, TOPICS_300);
    let logged = model(&lines);
    let store = open_store(cluster(), &namespace(&prefix, 0));
    let opened = killed.elapsed();
    let checked = check_store(&store, 0, TOPICS_300, &logged);
    eprintln!(
        "300 topics: open {:.2} s after the kill (lease {LEASE:?}), every topic served and \
         checked {:.2} s after it; {checked} flushed acks checked",
        opened.as_secs_f64(),
        killed.elapsed().as_secs_f64()
    );
    assert!(checked > 0, "no flushed ack to check");
    store.close().unwrap();
}

#[test]
fn many_stores_of_a_killed_owner_split_across_two_new_owners_keep_every_flushed_ack() {
    const TEST: &str =
        "many_stores_of_a_killed_owner_split_across_two_new_owners_keep_every_flushed_ack";
    const MANY: usize = 8;
    const TOPICS_EACH: usize = 10;
    if broker_role().is_some() {
        return run_broker();
    }
    let (prefix, lines, killed) = kill_a_broker(TEST, MANY, TOPICS_EACH);
    let logged = model(&lines);
    // Two owners, each with a connection of its own (a client of the cluster as another
    // process would be), each taking half the stores at once.
    let checked: usize = std::thread::scope(|scope| {
        let owners: Vec<_> = (0..2)
            .map(|owner| {
                let (prefix, logged) = (&prefix, &logged);
                scope.spawn(move || {
                    let cluster = RadosCluster::connect(conf()).expect("connect");
                    let mut checked = 0;
                    for s in (owner..MANY).step_by(2) {
                        let store = open_store(&cluster, &namespace(prefix, s));
                        checked += check_store(&store, s, TOPICS_EACH, logged);
                        eprintln!(
                            "owner {owner}: store {s} served and checked {:.2} s after the kill",
                            killed.elapsed().as_secs_f64()
                        );
                        store.close().unwrap();
                    }
                    checked
                })
            })
            .collect();
        owners.into_iter().map(|o| o.join().unwrap()).sum()
    });
    assert!(checked > 0, "no flushed ack to check");
}

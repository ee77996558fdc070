//! Many stores in one process (`StoreGroup`): one flusher pool runs every member store's ticks
//! on that store's own interval, ticks of different stores in parallel; one ack budget bounds
//! the resident ack state of every cursor of every member; a store whose last handle is dropped
//! leaves the group (its directory is free at once, the others go on); closing the group closes
//! every member's topics, with their acks durable, and refuses new members.

use crate::support;

use std::collections::BTreeSet;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use ackstore::internals::ackset::MAX_PARTITION_BYTES;
use ackstore::{
    Cursor, CursorConfig, CursorOptions, Error, GroupConfig, LedgerConfig, ManagedLedger,
    MemStorage, Position, Store, StoreConfig, StoreGroup,
};
use support::hooked::Hooked;
use support::tap::{Hook, Op, Tap};
use support::workload::{Rng, seed_from_env};

/// How long a test waits for the pool before it gives up (a guard against a hang).
const GUARD: Duration = Duration::from_secs(60);

fn config(interval: Option<Duration>) -> StoreConfig {
    StoreConfig {
        ledger: LedgerConfig {
            max_entries_per_ledger: 4,
            cursor: CursorConfig {
                flush_interval: interval,
                ..CursorConfig::default()
            },
            ..LedgerConfig::default()
        },
        // A store of a group has the group's pool: this is not used.
        flusher_threads: 7,
        ..StoreConfig::default()
    }
}

fn group(threads: usize, budget: Option<usize>) -> StoreGroup {
    StoreGroup::new(&GroupConfig {
        flusher_threads: threads,
        ack_memory_bytes: budget,
        open_files: None,
    })
}

/// A topic of `store` with `n` synced entries and a cursor `sub` from the earliest one.
fn topic_with_cursor(store: &Store, n: u64) -> (Arc<ManagedLedger>, Cursor, Vec<Position>) {
    let topic = store.topic("t").expect("topic");
    let ps: Vec<Position> = (0..n)
        .map(|i| topic.append(format!("{i}").as_bytes()).expect("append"))
        .collect();
    topic.sync().expect("sync");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    (topic, cursor, ps)
}

/// Waits until the pool committed a tick of `store` that staged `cursor` (its acks are in the
/// journal: no dirty partition left, and the store's tick count passed `ticks`).
fn wait_ticked(store: &Store, cursor: &Cursor, ticks: u64, what: &str) {
    let deadline = Instant::now() + GUARD;
    while cursor.stats().expect("stats").ackset.dirty_partitions > 0
        || store.journal_stats().ticks <= ticks
    {
        assert!(Instant::now() < deadline, "the pool never ticked {what}");
        std::thread::yield_now();
    }
}

fn reopen_acked(disk: &MemStorage, p: Position) -> bool {
    let store = Store::open_with_storage(Arc::new(disk.durable_image()), config(None))
        .expect("reopen the power-cut image");
    let topic = store.topic("t").expect("topic");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    cursor.is_acked(p).expect("is_acked")
}

#[test]
fn one_pool_ticks_each_member_store_on_its_own_interval() {
    const STORES: usize = 12;
    let group = group(2, None);
    let fast = Some(Duration::from_millis(3));
    let disks: Vec<MemStorage> = (0..=STORES).map(|_| MemStorage::new()).collect();
    let stores: Vec<Store> = disks
        .iter()
        .enumerate()
        .map(|(i, d)| {
            // The last store's interval is far beyond the test: the pool never ticks it.
            let interval = if i == STORES {
                Some(Duration::from_secs(3600))
            } else {
                fast
            };
            group
                .open_with_storage(Arc::new(d.clone()), config(interval))
                .expect("open")
        })
        .collect();
    assert_eq!(group.stores(), STORES + 1);
    let open: Vec<_> = stores.iter().map(|s| topic_with_cursor(s, 8)).collect();
    let slow = &open[STORES];
    slow.1.ack(slow.2[2]).expect("ack");
    for round in 0..3 {
        for (s, (_, cursor, ps)) in stores.iter().zip(&open).take(STORES) {
            let ticks = s.journal_stats().ticks;
            cursor.ack(ps[round + 1]).expect("ack");
            wait_ticked(s, cursor, ticks, "a fast store");
        }
    }
    for (i, (s, (_, cursor, _))) in stores.iter().zip(&open).enumerate().take(STORES) {
        assert!(
            s.journal_stats().ticks >= 3,
            "store {i}: {:?}",
            s.journal_stats()
        );
        assert_eq!(cursor.stats().unwrap().ackset.dirty_partitions, 0);
    }
    assert_eq!(
        stores[STORES].journal_stats().ticks,
        0,
        "the store due in an hour was ticked"
    );
    assert!(slow.1.stats().unwrap().ackset.dirty_partitions > 0);
    // What the pool committed survives a power cut; the slow store's ack was never flushed.
    for (i, disk) in disks.iter().enumerate().take(STORES) {
        assert!(reopen_acked(disk, open[i].2[3]), "store {i}");
    }
    assert!(!reopen_acked(&disks[STORES], slow.2[2]));
}

/// A tick held in its sync does not hold up another store's tick: the pool runs them in
/// parallel (with a pool of one thread this test would wait for ever, which the guard turns
/// into a failure).
#[test]
fn a_stalled_tick_of_one_store_does_not_hold_up_the_others() {
    let group = group(2, None);
    let interval = Some(Duration::from_millis(2));
    let stalled = Hooked::new(MemStorage::new());
    let a = group
        .open_with_storage(Arc::new(stalled.clone()), config(interval))
        .expect("open a");
    let b = group
        .open_with_storage(Arc::new(MemStorage::new()), config(interval))
        .expect("open b");
    let (_ta, ca, pa) = topic_with_cursor(&a, 4);
    let (_tb, cb, pb) = topic_with_cursor(&b, 4);
    let hold = Arc::new((Barrier::new(2), Barrier::new(2)));
    *stalled.hooks.hold_next_sync.lock().unwrap() = Some(hold.clone());
    ca.ack(pa[1]).expect("ack");
    // A's tick is now in its sync, on one of the pool's threads, until the second barrier.
    hold.0.wait();
    let ticks = b.journal_stats().ticks;
    cb.ack(pb[1]).expect("ack");
    wait_ticked(
        &b,
        &cb,
        ticks,
        "the second store while the first one's tick was stalled",
    );
    // A's tick is still held (nothing here may touch A: its tick holds its locks).
    hold.1.wait();
    wait_ticked(&a, &ca, 0, "the first store once its sync went on");
}

#[test]
fn one_budget_bounds_the_ack_memory_of_every_member_store() {
    const STORES: usize = 4;
    const TOPICS: usize = 2;
    const ENTRIES: u64 = 64;
    let limit = 8 << 10;
    let group = group(1, Some(limit));
    let disks: Vec<MemStorage> = (0..STORES).map(|_| MemStorage::new()).collect();
    let mut cursors = Vec::new();
    let mut stores = Vec::new();
    for d in &disks {
        let mut c = config(Some(Duration::from_millis(5)));
        c.ledger.cursor.lru_capacity_bytes = 1 << 20;
        // The group's budget is used, not a store's own.
        c.ack_memory_bytes = Some(1 << 30);
        let store = group
            .open_with_storage(Arc::new(d.clone()), c)
            .expect("open");
        for t in 0..TOPICS {
            let topic = store.topic(&format!("topic-{t}")).expect("topic");
            let ps: Vec<Position> = (0..ENTRIES)
                .map(|_| topic.append(b"m").expect("append"))
                .collect();
            topic.sync().expect("sync");
            let cursor = topic
                .open_cursor("sub", CursorOptions::default())
                .expect("cursor");
            cursors.push((stores.len(), t, topic, cursor, ps));
        }
        stores.push(store);
    }
    let mut models = vec![BTreeSet::new(); cursors.len()];
    let mut rng = Rng::new(seed_from_env("ACKSTORE_SEED"));
    for n in 0..2000 {
        // Runs on one cursor then another, across stores: an idle store's cursors must give
        // their memory up to another store's.
        let k = (n / 40 + rng.index(2)) % cursors.len();
        let (_, _, _, cursor, ps) = &cursors[k];
        let p = ps[rng.index(ps.len())];
        cursor.ack(p).expect("ack");
        models[k].insert(p);
        let s = group.ack_memory_stats().expect("the group's budget");
        assert_eq!(s.members, cursors.len());
        assert!(
            s.resident_bytes <= s.limit_bytes + MAX_PARTITION_BYTES,
            "step {n}: {s:?}"
        );
        for store in &stores {
            assert_eq!(
                store.ack_memory_stats(),
                Some(s),
                "one budget for every store"
            );
        }
    }
    assert_eq!(group.ack_memory_stats().unwrap().limit_bytes, limit);
    for (k, (_, _, _, cursor, ps)) in cursors.iter().enumerate() {
        for p in ps {
            assert_eq!(
                cursor.is_acked(*p).unwrap(),
                models[k].contains(p),
                "{k} {p}"
            );
        }
    }
    for store in &stores {
        store.flush_all().expect("flush_all");
    }
    for (k, (s, t, _, _, ps)) in cursors.iter().enumerate() {
        let store = Store::open_with_storage(Arc::new(disks[*s].durable_image()), config(None))
            .expect("reopen");
        let topic = store.topic(&format!("topic-{t}")).expect("topic");
        let cursor = topic
            .open_cursor("sub", CursorOptions::default())
            .expect("cursor");
        for p in ps {
            assert_eq!(
                cursor.is_acked(*p).unwrap(),
                models[k].contains(p),
                "{k} {p}"
            );
        }
    }
}

#[test]
fn a_dropped_store_leaves_the_group_and_frees_its_directory_at_once() {
    let group = group(2, None);
    let interval = Some(Duration::from_millis(2));
    let (da, db) = (MemStorage::new(), MemStorage::new());
    let a = group
        .open_with_storage(Arc::new(da.clone()), config(interval))
        .expect("open a");
    let b = group
        .open_with_storage(Arc::new(db), config(interval))
        .expect("open b");
    let (ta, ca, pa) = topic_with_cursor(&a, 4);
    let (_tb, cb, pb) = topic_with_cursor(&b, 4);
    ca.ack(pa[0]).expect("ack");
    wait_ticked(&a, &ca, 0, "a");
    assert_eq!(group.stores(), 2);
    drop(a);
    assert_eq!(group.stores(), 1, "the dropped store left");
    // Its handles kept refuse, and its directory opens again at once (the pool holds nothing).
    assert!(matches!(ta.append(b"x"), Err(Error::Closed)));
    assert!(matches!(ca.ack(pa[1]), Err(Error::Closed)));
    let again = group
        .open_with_storage(Arc::new(da.clone()), config(interval))
        .expect("the dropped store's directory is free");
    assert_eq!(group.stores(), 2);
    drop(again);
    // The other member is still ticked.
    cb.ack(pb[2]).expect("ack");
    wait_ticked(&b, &cb, 0, "the store left in the group");
    assert!(reopen_acked(&da, pa[0]));
}

#[test]
fn a_group_outlives_its_handles_while_a_member_store_is_open() {
    let g = group(1, None);
    let store = g
        .open_with_storage(
            Arc::new(MemStorage::new()),
            config(Some(Duration::from_millis(2))),
        )
        .expect("open");
    drop(g);
    let (_t, cursor, ps) = topic_with_cursor(&store, 4);
    cursor.ack(ps[1]).expect("ack");
    wait_ticked(&store, &cursor, 0, "a store whose group handle was dropped");
}

#[test]
fn closing_the_group_closes_every_member_topic_durably_and_refuses_new_members() {
    // No interval: only the close writes the acks.
    let group = group(2, None);
    let disks: Vec<MemStorage> = (0..3).map(|_| MemStorage::new()).collect();
    let stores: Vec<Store> = disks
        .iter()
        .map(|d| {
            group
                .open_with_storage(Arc::new(d.clone()), config(None))
                .expect("open")
        })
        .collect();
    let open: Vec<_> = stores.iter().map(|s| topic_with_cursor(s, 4)).collect();
    for (_, cursor, ps) in &open {
        cursor.ack(ps[2]).expect("ack");
    }
    group.close().expect("close the group");
    for (topic, cursor, ps) in &open {
        assert!(matches!(topic.append(b"x"), Err(Error::Closed)));
        assert!(matches!(cursor.ack(ps[3]), Err(Error::Closed)));
    }
    for (i, disk) in disks.iter().enumerate() {
        assert!(reopen_acked(disk, open[i].2[2]), "store {i}");
    }
    let refused = group.open_with_storage(Arc::new(MemStorage::new()), config(None));
    assert!(matches!(refused, Err(Error::Closed)), "{refused:?}");
}

/// Holds the first storage operation the group's closing thread makes on either member, once:
/// tells the test which member it is in, and waits until the test lets it go; counts the
/// operations that thread makes on each member.
struct GroupCloseGate {
    member: usize,
    shared: Arc<GateShared>,
}

#[derive(Default)]
struct GateShared {
    armed: std::sync::Mutex<Option<(Sender<usize>, Receiver<()>)>>,
    ops: [std::sync::atomic::AtomicU64; 2],
}

/// The name of the thread that closes the group.
const GROUP_CLOSER: &str = "group-closer";

impl Hook for GroupCloseGate {
    fn before(&self, _op: Op<'_>) -> ackstore::Result<()> {
        if std::thread::current().name() != Some(GROUP_CLOSER) {
            return Ok(());
        }
        self.shared.ops[self.member].fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let armed = self.shared.armed.lock().expect("gate").take();
        if let Some((reached, go)) = armed {
            reached.send(self.member).expect("the test waits");
            go.recv().expect("the test lets the group's close go");
        }
        Ok(())
    }
}

/// A member store closed (`Store::close`) while the group's close is busy with another member:
/// the group's close does not touch the closed store's directory afterwards (its lock was
/// released: a new owner may hold it), and the new owner keeps every flushed ack.
#[test]
fn closing_the_group_leaves_alone_a_member_closed_meanwhile() {
    let g = group(0, None);
    let shared = Arc::new(GateShared::default());
    let disks = [MemStorage::new(), MemStorage::new()];
    let stores: Vec<Store> = (0..2)
        .map(|member| {
            let tap = Tap::new(
                Arc::new(disks[member].clone()),
                Arc::new(GroupCloseGate {
                    member,
                    shared: shared.clone(),
                }),
            );
            g.open_with_storage(Arc::new(tap), config(None))
                .expect("open a member")
        })
        .collect();
    let mut acked = Vec::new();
    let mut kept = Vec::new();
    for store in &stores {
        let (topic, cursor, ps) = topic_with_cursor(store, 4);
        cursor.ack(ps[1]).expect("ack");
        cursor.flush().expect("flush");
        acked.push(ps[1]);
        kept.push((topic, cursor));
    }
    let (reached_tx, reached) = channel();
    let (go, go_rx) = channel();
    *shared.armed.lock().expect("gate") = Some((reached_tx, go_rx));
    std::thread::scope(|s| {
        let closer = std::thread::Builder::new()
            .name(GROUP_CLOSER.into())
            .spawn_scoped(s, || g.close())
            .expect("spawn");
        let busy = reached.recv().expect("the group's close reached a member");
        let other = 1 - busy;
        stores[other].close().expect("close the other member");
        let before = shared.ops[other].load(std::sync::atomic::Ordering::SeqCst);
        // A new owner of the closed member's directory.
        let again = Store::open_with_storage(Arc::new(disks[other].clone()), config(None))
            .expect("open the closed member's directory");
        go.send(()).expect("the group's close waits");
        let closed = closer.join().expect("group closer");
        assert_eq!(
            shared.ops[other].load(std::sync::atomic::Ordering::SeqCst),
            before,
            "the group's close touched the directory of a store closed before it got there"
        );
        closed.expect("the group's close");
        let topic = again.topic("t").expect("topic");
        let cursor = topic
            .open_cursor("sub", CursorOptions::default())
            .expect("cursor");
        assert!(cursor.is_acked(acked[other]).expect("is_acked"), "flushed");
    });
    drop(kept);
}

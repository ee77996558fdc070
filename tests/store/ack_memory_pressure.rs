//! The store's ack memory budget under pressure from outside a single cursor: the bound
//! sampled while threads acknowledge on many journal cursors, and cursors closed or deleted
//! while others ask them to release memory.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ackstore::internals::ackset::MAX_PARTITION_BYTES;
use ackstore::{AppendMeta, Cursor, InitialPosition, ManagedLedger, MemStorage, Position, Store};
use support::topic::at;
use support::workload::Rng;

const ENTRIES: u64 = 96;
const PER_LEDGER: u64 = 4;

fn positions(topic: &ManagedLedger) -> Vec<Position> {
    let first = topic.first_position().unwrap();
    let mut ps = vec![first];
    while ps.len() < ENTRIES as usize {
        let last = *ps.last().unwrap();
        ps.push(if last.entry_id + 1 < PER_LEDGER {
            Position::new(last.ledger_id, last.entry_id + 1)
        } else {
            Position::new(last.ledger_id + 1, 0)
        });
    }
    ps
}

fn topic(store: &Store, t: usize, append: bool) -> Arc<ManagedLedger> {
    let topic = store
        .topic(&format!("persistent://t/ns/topic-{t}"))
        .unwrap();
    if append {
        for i in 0..ENTRIES {
            let meta = AppendMeta {
                num_messages: 1,
                timestamp: 1000 + i,
            };
            topic.append_with(b"m", meta).unwrap();
        }
        topic.sync().unwrap();
    }
    topic
}

/// Threads ack every other entry on their own journal cursors while a watcher samples the
/// store's total: it never exceeds the limit plus one partition per cursor being changed.
#[test]
fn store_budget_holds_while_threads_ack_on_journal_cursors() {
    let limit = 4 << 10;
    let threads = 4;
    let store = Store::open_with_storage(
        Arc::new(MemStorage::new()),
        support::config::store_shared_budget(PER_LEDGER, limit),
    )
    .unwrap();
    let topics: Vec<_> = (0..3).map(|t| topic(&store, t, true)).collect();
    let mut cursors: Vec<(Cursor, Vec<Position>)> = Vec::new();
    for t in &topics {
        for c in 0..4 {
            let cursor = t
                .open_cursor(&format!("sub-{c}"), at(InitialPosition::Earliest, false))
                .unwrap();
            cursors.push((cursor, positions(t)));
        }
    }
    let done = AtomicBool::new(false);
    let worst = std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            let mut worst = 0;
            while !done.load(Ordering::SeqCst) {
                worst = worst.max(store.ack_memory_stats().unwrap().resident_bytes);
                std::thread::yield_now();
            }
            worst
        });
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let cursors = &cursors;
                s.spawn(move || {
                    let mut rng = Rng::new(7 + t as u64);
                    let mine: Vec<_> = (0..cursors.len()).filter(|k| k % threads == t).collect();
                    for n in 0..3000 {
                        let (c, ps) = &cursors[mine[rng.index(mine.len())]];
                        // Odd entries only: holes everywhere, no mark-delete move.
                        let p = ps[rng.index(ps.len() / 2) * 2 + 1];
                        c.ack(p).unwrap();
                        if n % 500 == 499 {
                            c.flush().unwrap();
                        }
                    }
                })
            })
            .collect();
        // Stop the watcher before a worker's panic is passed on, so a failure never hangs.
        let joined: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        done.store(true, Ordering::SeqCst);
        let worst = watcher.join().unwrap();
        for j in joined {
            j.unwrap();
        }
        worst
    });
    let s = store.ack_memory_stats().unwrap();
    assert!(
        worst <= limit + threads * 2 * MAX_PARTITION_BYTES,
        "{worst} resident during the run against {limit}: {s:?}"
    );
    assert!(
        s.peak_resident_bytes <= limit + MAX_PARTITION_BYTES,
        "{s:?}"
    );
    store.close().unwrap();
}

/// A cursor closed, or deleted, while its handle is still held: it leaves the budget (its
/// bytes no longer count), other cursors' growth never writes its state again, and the name
/// opened afresh after a reopen holds none of the old acks.
#[test]
fn closed_and_deleted_cursors_leave_the_store_budget() {
    let limit = 2 << 10;
    let disk = MemStorage::new();
    {
        let store = Store::open_with_storage(
            Arc::new(disk.clone()),
            support::config::store_shared_budget(PER_LEDGER, limit),
        )
        .unwrap();
        let t = topic(&store, 0, true);
        let ps = positions(&t);
        let open = |name: &str| {
            t.open_cursor(name, at(InitialPosition::Earliest, false))
                .unwrap()
        };
        let closed = open("closed");
        let deleted = open("deleted");
        let busy = open("busy");
        for p in ps.iter().skip(1).step_by(2) {
            closed.ack(*p).unwrap();
            deleted.ack(*p).unwrap();
        }
        closed.close().unwrap();
        t.delete_cursor("deleted").unwrap();
        for p in ps.iter().skip(1).step_by(2) {
            busy.ack(*p).unwrap();
        }
        let s = store.ack_memory_stats().unwrap();
        let share = |c: &Cursor| {
            let a = c.stats().unwrap().ackset;
            a.resident_bytes + a.charged_bytes
        };
        assert_eq!(s.members, 1, "{s:?}");
        assert_eq!(s.resident_bytes, share(&busy), "{s:?}");
        drop((closed, deleted));
        store.close().unwrap();
    }
    let store = Store::open_with_storage(
        Arc::new(disk),
        support::config::store_shared_budget(PER_LEDGER, limit),
    )
    .unwrap();
    let t = topic(&store, 0, false);
    let again = t
        .open_cursor("deleted", at(InitialPosition::Earliest, false))
        .unwrap();
    for p in positions(&t) {
        assert!(!again.is_acked(p).unwrap(), "{p} acked on a deleted cursor");
    }
    store.close().unwrap();
}

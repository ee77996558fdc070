//! Group commit: threads appending and syncing one ledger. Every entry whose sync returned is
//! durable at that moment, the ledger never issues more fsyncs than sync calls, and syncs that
//! wait behind a running fsync share the next one.

use crate::support;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};
use std::thread;

use ackstore::internals::log::{EntryLog, EntryMeta, LogConfig};
use ackstore::{FileStorage, MemStorage, Storage};
use support::hooked::Hooked;

const THREADS: u64 = 4;
const PER_THREAD: u64 = 40;

fn entry(thread: u64, i: u64) -> (EntryMeta, Vec<u8>) {
    let meta = EntryMeta {
        index: thread,
        num_messages: u32::try_from(i).unwrap(),
        timestamp: thread * 1_000 + i,
    };
    (meta, format!("thread {thread} entry {i}").into_bytes())
}

/// Runs the appending threads; `after_sync(ledger, entry_id, meta, payload)` runs in the thread
/// right after its sync returned.
fn run(log: &Arc<EntryLog>, after_sync: impl Fn(u64, u64, EntryMeta, &[u8]) + Sync) -> u64 {
    let ledger = log.create_ledger().unwrap();
    let base = log.stats();
    thread::scope(|s| {
        for t in 0..THREADS {
            let log = Arc::clone(log);
            let after_sync = &after_sync;
            s.spawn(move || {
                for i in 0..PER_THREAD {
                    let (meta, payload) = entry(t, i);
                    let id = log.append(ledger, meta, &payload).unwrap();
                    log.sync(ledger).unwrap();
                    after_sync(ledger, id, meta, &payload);
                }
            });
        }
    });
    let stats = log.stats();
    let syncs = stats.sync_calls - base.sync_calls;
    let fsyncs = stats.fsyncs - base.fsyncs;
    assert_eq!(syncs, THREADS * PER_THREAD);
    assert!(fsyncs <= syncs, "{fsyncs} fsyncs for {syncs} syncs");
    assert_eq!(log.entry_count(ledger).unwrap(), THREADS * PER_THREAD);
    ledger
}

#[test]
fn concurrent_syncs_make_every_synced_entry_durable_with_at_most_one_fsync_each() {
    let disk = MemStorage::new();
    let log = Arc::new(EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap());
    run(&log, |ledger, id, meta, payload| {
        // Cut the power right now: the entry must be on the durable image.
        let image = disk.durable_image();
        let after = EntryLog::open_read_only(Arc::new(image), LogConfig::default()).unwrap();
        let e = after.read(ledger, id).unwrap();
        assert_eq!((e.meta, e.payload.as_slice()), (meta, payload));
    });
}

#[test]
fn concurrent_syncs_on_real_files_keep_every_entry() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(dir.path(), false).unwrap());
    let log = Arc::new(EntryLog::open(Arc::clone(&storage), LogConfig::default()).unwrap());
    let ledger = run(&log, |_, _, _, _| {});
    drop(log);
    let log = EntryLog::open(storage, LogConfig::default()).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for id in 0..THREADS * PER_THREAD {
        let e = log.read(ledger, id).unwrap();
        let (t, i) = (e.meta.index, u64::from(e.meta.num_messages));
        assert_eq!(entry(t, i), (e.meta, e.payload));
        assert!(seen.insert((t, i)));
    }
}

#[test]
fn syncs_waiting_behind_a_running_fsync_share_the_next_one() {
    const WAITERS: u64 = 3;
    let hooked = Hooked::new(MemStorage::new());
    let log = EntryLog::open(Arc::new(hooked.clone()), LogConfig::default()).unwrap();
    let ledger = log.create_ledger().unwrap();
    let base = log.stats();
    let base_syncs = hooked.hooks.syncs.load(Ordering::SeqCst);
    let hold = Arc::new((Barrier::new(2), Barrier::new(2)));
    *hooked.hooks.hold_next_sync.lock().unwrap() = Some(Arc::clone(&hold));
    let writes = || hooked.hooks.writes.load(Ordering::SeqCst);
    thread::scope(|s| {
        let log = &log;
        s.spawn(move || {
            let (meta, payload) = entry(WAITERS, 0);
            log.append(ledger, meta, &payload).unwrap();
            log.sync(ledger).unwrap();
        });
        // The first sync's fsync has started and is held.
        hold.0.wait();
        let before = writes();
        for t in 0..WAITERS {
            s.spawn(move || {
                let (meta, payload) = entry(t, 0);
                log.append(ledger, meta, &payload).unwrap();
                log.sync(ledger).unwrap();
            });
        }
        // Each waiter's sync hands its entry to the file before it waits for the fsync flag,
        // so once every one has written, all of them are behind the held fsync.
        while writes() < before + WAITERS {
            thread::yield_now();
        }
        hold.1.wait();
    });
    let stats = log.stats();
    assert_eq!(stats.sync_calls - base.sync_calls, WAITERS + 1);
    // The held fsync, then one fsync for all the waiters.
    assert_eq!(stats.fsyncs - base.fsyncs, 2);
    assert_eq!(hooked.hooks.syncs.load(Ordering::SeqCst) - base_syncs, 2);
    let after =
        EntryLog::open_read_only(Arc::new(hooked.disk.durable_image()), LogConfig::default())
            .unwrap();
    assert_eq!(after.entry_count(ledger).unwrap(), WAITERS + 1);
}

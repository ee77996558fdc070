//! Group commit: threads appending and syncing one ledger. Every entry whose sync returned is
//! durable at that moment, and the ledger never issues more fsyncs than sync calls.

mod common;

use std::sync::Arc;
use std::thread;

use ackstore::log::{EntryLog, EntryMeta, LogConfig};
use ackstore::storage::{FileStorage, MemStorage, Storage};

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

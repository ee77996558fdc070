//! Bytes a store cursor's flush appends to the cursor journal after one more ack, against the
//! size of the cursor's ack state.
//!
//! A cursor's ack set holds alternating acks (every even entry id of one ledger, the pattern
//! with the most partitions per acked entry) over 1M, 10M and 100M entries, flushed once in
//! full. Then, `FLUSHES` times, one more ack (a hole in a different partition each time) and a
//! flush, staged as a store cursor stages it (`cursor::journal`: the partitions whose journal
//! copy is not current, every live partition's key, one tick). Prints, per state size, the
//! median bytes a flush appended (`TickStats::bytes`: partition records and the marker), the
//! smallest and largest, and the median time of the tick on real files.
//!
//! Run: `cargo bench --bench journal_flush_bytes` (`-- 1000000 10000000` for chosen sizes).

use std::sync::Arc;
use std::time::{Duration, Instant};

use ackstore::internals::ackset::RangeSetWrapper;
use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::journal::index::CursorId;
use ackstore::internals::journal::{CursorFlush, Journal, JournalConfig, JournalPartitions, Seal};
use ackstore::{FileStorage, Position, Storage};

/// Flushes measured per state size, each after one more ack.
const FLUSHES: u64 = 9;

fn flush(journal: &Journal, id: CursorId, set: &mut RangeSetWrapper) -> (u64, Duration) {
    let live: Vec<_> = set.partitions().into_iter().map(|(k, _)| k).collect();
    let mut written = Vec::new();
    for &k in &live {
        let current = journal
            .stored_cardinality(id, k)
            .is_some_and(|c| set.stored_copy_current(k, c));
        if !current {
            written.push((k, set.bitmap(k).unwrap().unwrap()));
        }
    }
    let state = PersistedState {
        mark_delete: Position::new(0, 0),
        epoch: 0,
        properties: Default::default(),
    };
    let started = Instant::now();
    let stats = journal
        .commit(&[CursorFlush {
            name: 0,
            cursor: id,
            state,
            written: written.clone(),
            live,
        }])
        .unwrap();
    let took = started.elapsed();
    for (k, _) in written {
        set.mark_persisted(k);
    }
    for k in set.dirty_keys() {
        set.mark_clean(k);
    }
    (stats.bytes, took)
}

fn median<T: Copy + Ord>(v: &mut [T]) -> T {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() {
    let sizes: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![1_000_000, 10_000_000, 100_000_000]
    } else {
        sizes
    };
    println!(
        "| entries | holes | partitions | bytes per flush (median) | min - max | tick (median) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for entries in sizes {
        let tmp = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(tmp.path(), true).unwrap());
        let journal = Arc::new(
            Journal::open(
                storage,
                JournalConfig {
                    segment_bytes: 256 << 20,
                },
                Seal::default(),
            )
            .unwrap(),
        );
        let id = CursorId {
            topic: 1,
            cursor: 1,
        };
        let mut set = RangeSetWrapper::new(
            Box::new(JournalPartitions::new(journal.clone(), id)),
            1 << 30,
        );
        for e in (0..entries).step_by(2) {
            set.add(Position::new(1, e)).unwrap();
        }
        let partitions = set.partitions().len() as u64;
        flush(&journal, id, &mut set);
        let mut bytes = Vec::new();
        let mut times = Vec::new();
        let stride = entries / FLUSHES;
        for i in 0..FLUSHES {
            set.add(Position::new(1, (i * stride) | 1)).unwrap();
            let (b, t) = flush(&journal, id, &mut set);
            bytes.push(b);
            times.push(t);
        }
        let lo = *bytes.iter().min().unwrap();
        let hi = *bytes.iter().max().unwrap();
        println!(
            "| {entries} | {} | {partitions} | {} | {lo} - {hi} | {:.2?} |",
            entries / 2,
            median(&mut bytes),
            median(&mut times)
        );
    }
}

//! The cursor journal's flush tick, on real files.
//!
//! A flush tick of `CURSORS` cursors, each with one new ack (one dirty partition): one journal
//! tick (`Journal::commit`: every cursor's partition and marker, one `fdatasync`). The syncs
//! per tick are printed.
//!
//! Run: `cargo bench --bench journal -- --warm-up-time 1 --measurement-time 10`.

use std::sync::Arc;

use ackstore::Position;
use ackstore::internals::ackset::RangeSetWrapper;
use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::journal::index::CursorId;
use ackstore::internals::journal::{CursorFlush, Journal, JournalConfig, JournalPartitions, Seal};
use ackstore::{FileStorage, Storage};
use criterion::{Criterion, criterion_group, criterion_main};

const CURSORS: u64 = 200;

fn storage(tmp: &tempfile::TempDir) -> Arc<dyn Storage> {
    Arc::new(FileStorage::open(tmp.path(), true).unwrap())
}

fn state(epoch: u64) -> PersistedState {
    PersistedState {
        mark_delete: Position::new(0, 0),
        epoch,
        properties: Default::default(),
    }
}

fn tick(c: &mut Criterion) {
    let mut group = c.benchmark_group("flush_tick_200_cursors");
    group.sample_size(10);

    let tmp = tempfile::tempdir().unwrap();
    let journal =
        Arc::new(Journal::open(storage(&tmp), JournalConfig::default(), Seal::default()).unwrap());
    let mut cursors: Vec<(CursorId, RangeSetWrapper)> = (0..CURSORS)
        .map(|i| {
            let id = CursorId {
                topic: i / 10,
                cursor: i,
            };
            let store = Box::new(JournalPartitions::new(journal.clone(), id));
            (id, RangeSetWrapper::new(store, 64 << 20))
        })
        .collect();
    let mut next = 0u64;
    let mut ticks = 0u64;
    let syncs_before = journal.stats().syncs;
    group.bench_function("journal_one_tick", |b| {
        b.iter(|| {
            next += 1;
            let mut flushes = Vec::with_capacity(cursors.len());
            for (id, set) in &mut cursors {
                set.add(Position::new(1, next * 2)).unwrap();
                let written = set
                    .dirty_keys()
                    .into_iter()
                    .map(|k| (k, set.bitmap(k).unwrap().unwrap()))
                    .collect();
                flushes.push(CursorFlush {
                    name: 0,
                    cursor: *id,
                    state: state(next),
                    written,
                    live: set.partitions().into_iter().map(|(k, _)| k).collect(),
                });
            }
            journal.commit(&flushes).unwrap();
            for (_, set) in &mut cursors {
                for k in set.dirty_keys() {
                    set.mark_persisted(k);
                }
            }
            ticks += 1;
        });
    });
    let syncs = journal.stats().syncs - syncs_before;
    println!(
        "journal: {ticks} ticks of {CURSORS} cursors, {syncs} syncs: {:.2} syncs per tick",
        syncs as f64 / ticks as f64
    );

    group.finish();
}

criterion_group!(benches, tick);
criterion_main!(benches);

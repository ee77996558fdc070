//! The journal under several threads: acks (with evictions appending partitions) on many
//! cursors from several threads while a flusher commits ticks; a tick's fsync held in progress
//! while evictions append and loads read.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use ackstore::MemStorage;
use ackstore::Position;
use ackstore::internals::ackset::{PartitionKey, RangeSetWrapper};
use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::journal::index::CursorId;
use ackstore::internals::journal::{CursorFlush, Journal, JournalConfig, JournalPartitions, Seal};
use roaring::RoaringBitmap;
use support::hooked::Hooked;
use support::workload::Rng;

type Shared = Arc<Mutex<(RangeSetWrapper, BTreeSet<Position>)>>;

fn cursor(i: u64) -> CursorId {
    CursorId {
        topic: i % 4,
        cursor: i,
    }
}

/// Stages every cursor under its lock (its changed partitions appended there), commits the
/// tick outside every cursor lock, then marks clean the partitions whose contents are still
/// what was written.
fn tick(journal: &Journal, cursors: &[(CursorId, Shared)]) -> ackstore::Result<()> {
    let mut tick = journal.begin_tick();
    let mut written_by_cursor = Vec::new();
    for (id, shared) in cursors {
        let mut guard = shared.lock().expect("cursor lock");
        let set = &mut guard.0;
        let mut written = Vec::new();
        for key in set.dirty_keys() {
            if set.is_resident(key) {
                written.push((key, set.bitmap(key)?.expect("live")));
            }
        }
        let live: Vec<_> = set.partitions().into_iter().map(|(k, _)| k).collect();
        tick.stage((*id, 0), PersistedState::default(), &written, &live)?;
        written_by_cursor.push(written);
    }
    tick.commit()?;
    for ((_, shared), written) in cursors.iter().zip(&written_by_cursor) {
        let mut guard = shared.lock().expect("cursor lock");
        let set = &mut guard.0;
        for (key, bitmap) in written {
            if set.bitmap(*key)?.as_ref() == Some(bitmap) {
                set.mark_persisted(*key);
            }
        }
    }
    Ok(())
}

#[test]
fn threads_acking_many_cursors_while_a_flusher_ticks_recover_exactly_what_they_acked() {
    let disk = MemStorage::new();
    let config = JournalConfig {
        segment_bytes: 16 << 10,
    };
    let journal =
        Arc::new(Journal::open(Arc::new(disk.clone()), config, Seal::default()).expect("open"));
    let cursors: Vec<(CursorId, Shared)> = (0..16)
        .map(|i| {
            let id = cursor(i);
            let store = Box::new(JournalPartitions::new(journal.clone(), id));
            (
                id,
                Arc::new(Mutex::new((
                    RangeSetWrapper::new(store, 2000),
                    BTreeSet::new(),
                ))),
            )
        })
        .collect();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let ackers: Vec<_> = (0..4u64)
            .map(|t| {
                let cursors = &cursors;
                s.spawn(move || {
                    let mut rng = Rng::new(100 + t);
                    for _ in 0..3000 {
                        let (_, shared) = &cursors[rng.index(cursors.len())];
                        let pos = Position::new(1 + rng.below(3), rng.below(4 << 16));
                        let mut guard = shared.lock().expect("cursor lock");
                        guard.0.add(pos).expect("ack");
                        guard.1.insert(pos);
                    }
                })
            })
            .collect();
        let flusher = s.spawn(|| {
            // At least one tick, however the threads are scheduled.
            loop {
                tick(&journal, &cursors).expect("tick");
                if done.load(Ordering::SeqCst) {
                    break;
                }
            }
        });
        // Every acker joined before `done`, then their panics: an acker's panic must not
        // leave the flusher running, and the scope waiting for it.
        let joined: Vec<_> = ackers.into_iter().map(|a| a.join()).collect();
        done.store(true, Ordering::SeqCst);
        for acker in joined {
            acker.expect("acker");
        }
        flusher.join().expect("flusher");
    });
    tick(&journal, &cursors).expect("final tick");
    let truth: BTreeMap<CursorId, BTreeSet<Position>> = cursors
        .iter()
        .map(|(id, s)| (*id, s.lock().expect("lock").1.clone()))
        .collect();
    drop(cursors);
    drop(journal);

    let journal = Arc::new(
        Journal::open(Arc::new(disk.durable_image()), config, Seal::default()).expect("reopen"),
    );
    for (id, acked) in truth {
        let (_, rows) = journal.committed(id).expect("committed");
        let mut got = BTreeSet::new();
        for (key, card) in rows {
            let bitmap = journal.load(id, key).expect("load").expect("partition");
            assert_eq!(bitmap.len(), card);
            got.extend(
                bitmap
                    .iter()
                    .map(|o| Position::new(key.ledger_id, key.first_entry() + u64::from(o))),
            );
        }
        assert_eq!(got, acked, "cursor {id:?}");
    }
}

#[test]
fn evictions_and_loads_go_on_while_a_ticks_fsync_is_in_progress() {
    let hooked = Hooked::new(MemStorage::new());
    let config = JournalConfig::default();
    let journal =
        Arc::new(Journal::open(Arc::new(hooked.clone()), config, Seal::default()).expect("open"));
    let a = cursor(1);
    let b = cursor(2);
    let key_of = |e: u64| ackstore::internals::ackset::PartitionKey::of(Position::new(1, e));
    let bitmap = roaring::RoaringBitmap::from([1u32, 5, 9]);
    journal
        .store_partition(a, key_of(0), &bitmap)
        .expect("eviction before the tick");
    let barriers = Arc::new((Barrier::new(2), Barrier::new(2)));
    *hooked.hooks.hold_next_sync.lock().expect("hooks") = Some(barriers.clone());
    std::thread::scope(|s| {
        let ticking = s.spawn(|| {
            journal.commit(&[CursorFlush {
                name: 0,
                cursor: a,
                state: PersistedState::default(),
                written: Vec::new(),
                live: vec![key_of(0)],
            }])
        });
        barriers.0.wait(); // the tick's fsync has started and is held
        journal
            .store_partition(b, key_of(1 << 16), &bitmap)
            .expect("an eviction appends during the fsync");
        assert_eq!(
            journal.load(a, key_of(0)).expect("load"),
            Some(bitmap.clone())
        );
        assert_eq!(
            journal.load(b, key_of(1 << 16)).expect("load"),
            Some(bitmap.clone())
        );
        barriers.1.wait(); // let the fsync finish
        let stats = ticking.join().expect("tick thread").expect("tick");
        assert_eq!(
            stats.syncs, 2,
            "the file and, for the new segment, the directory"
        );
    });
    let reopened = Journal::open(
        Arc::new(hooked.disk.durable_image()),
        config,
        Seal::default(),
    )
    .expect("reopen");
    assert_eq!(reopened.load(a, key_of(0)).expect("load"), Some(bitmap));
    assert!(
        reopened.committed(b).is_none(),
        "b's eviction was never committed"
    );
}

/// Loads of one cursor's partition on several threads while another cursor's evictions fill
/// segments and ticks roll the segment holding the partition's copy over again and again: a
/// rollover points the index at its copy before the segment goes, so a load that looked the
/// old copy up just before reads the new one, and every load finds the partition.
#[test]
fn loads_racing_the_rollovers_that_move_their_copy_always_find_it() {
    let config = JournalConfig {
        segment_bytes: 4 << 10,
    };
    let journal = Arc::new(
        Journal::open(Arc::new(MemStorage::new()), config, Seal::default()).expect("open"),
    );
    let (a, b) = (cursor(0), cursor(1));
    let key = PartitionKey {
        ledger_id: 1,
        chunk: 0,
    };
    let bitmap: RoaringBitmap = (0..3000u32).step_by(3).collect();
    journal.store_partition(a, key, &bitmap).expect("store");
    let mut tick = journal.begin_tick();
    tick.stage((a, 0), PersistedState::default(), &[], &[key])
        .expect("stage");
    tick.commit().expect("commit");
    let done = AtomicBool::new(false);
    let failed: Mutex<Vec<String>> = Mutex::default();
    std::thread::scope(|s| {
        let loaders: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    while !done.load(Ordering::SeqCst) {
                        match journal.load(a, key) {
                            Ok(Some(got)) if got == bitmap => {}
                            other => failed.lock().unwrap().push(format!("{other:?}")),
                        }
                    }
                })
            })
            .collect();
        let garbage: RoaringBitmap = (0..2000u32).step_by(2).collect();
        while journal.stats().rollovers < 3000 && failed.lock().unwrap().is_empty() {
            journal.store_partition(b, key, &garbage).expect("evict");
            let mut tick = journal.begin_tick();
            tick.stage((b, 0), PersistedState::default(), &[], &[key])
                .expect("stage");
            tick.commit().expect("commit");
        }
        done.store(true, Ordering::SeqCst);
        for l in loaders {
            l.join().expect("loader");
        }
    });
    let failed = failed.into_inner().unwrap();
    assert!(
        failed.is_empty(),
        "{} loads failed, first: {:?}",
        failed.len(),
        failed.first()
    );
}

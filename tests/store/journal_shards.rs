//! The journal's index in shards against the changes of many cursors that readers must see
//! whole. A rollover re-bases every cursor whose chain reaches the oldest segment and copies
//! its snapshot; a cursor that holds both forms (a chain and a single-entry snapshot, one the
//! fallback of the other) has both rewritten, and its state is the one committed later. Seen
//! with one of the two applied, the fallback would be its state: after a seek's reset (a
//! snapshot over an older chain) that is acks the seek cleared, more acked than the truth; the
//! other way round an older snapshot, a flush that returned `Ok` lost.
//!
//! Readers ask for every such cursor's state, the way a cursor's open recovers it, while
//! ticks of another cursor keep rolling segments over, until every such cursor was re-based
//! many times: every answer must be the state committed last.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ackstore::internals::ackset::PartitionKey;
use ackstore::internals::format::cursor::{PersistedState, SnapshotWriter};
use ackstore::internals::journal::index::CursorId;
use ackstore::internals::journal::{CursorFlush, Journal, JournalConfig, Seal, SnapshotCounts};
use ackstore::{MemStorage, Position};
use roaring::RoaringBitmap;

/// Cursors with both forms: even ones a chain then a snapshot (the snapshot their state),
/// odd ones a snapshot then a chain (the chain their state).
const BOTH: u64 = 256;
/// Re-bases of each of them the readers race against.
const REBASES_EACH: u64 = 100;
/// Ticks of the filler cursor at most: a few thousand make the re-bases above; the bound keeps a
/// rollover that stopped re-basing from running the test forever.
const MAX_TICKS: u32 = 1_000_000;

fn state(mark_delete_entry: u64, epoch: u64) -> PersistedState {
    PersistedState {
        mark_delete: Position::new(1, mark_delete_entry),
        epoch,
        properties: Default::default(),
    }
}

fn commit_chain(journal: &Journal, cursor: CursorId, state: &PersistedState) {
    journal
        .commit(&[CursorFlush {
            cursor,
            name: 0,
            state: state.clone(),
            written: Vec::new(),
            live: Vec::new(),
        }])
        .expect("a chain's commit");
}

fn commit_snapshot(journal: &Journal, cursor: CursorId, state: &PersistedState) {
    let writer = SnapshotWriter::new(state, usize::MAX, u64::MAX).expect("a snapshot's writer");
    let entry = writer
        .finish_with_batch(&[])
        .expect("a snapshot's encoding");
    let mut tick = journal.begin_tick();
    tick.stage_snapshot(
        (cursor, 0),
        state.clone(),
        &entry,
        SnapshotCounts::default(),
    )
    .expect("a snapshot's stage");
    tick.commit().expect("a snapshot's commit");
}

/// Sets its flag when dropped.
struct Done<'a>(&'a AtomicBool);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn cursor(i: u64) -> CursorId {
    CursorId {
        topic: 7,
        cursor: i,
    }
}

/// The state a cursor's open recovers: its snapshot when that is its state, else its chain's.
fn recovered(journal: &Journal, c: CursorId) -> PersistedState {
    let snapshot = journal
        .read_snapshot(c, |s| Ok(s.state.clone()))
        .expect("a snapshot's read");
    snapshot.unwrap_or_else(|| journal.committed(c).expect("a chain").0)
}

#[test]
fn a_cursor_with_both_forms_is_never_read_at_its_fallback_while_rollovers_rewrite_it() {
    let journal = Journal::open(
        Arc::new(MemStorage::new()),
        JournalConfig {
            segment_bytes: 4096,
        },
        Seal::default(),
    )
    .expect("open");
    for i in 0..BOTH {
        if i % 2 == 0 {
            commit_chain(&journal, cursor(i), &state(100, 1));
            commit_snapshot(&journal, cursor(i), &state(5, 2));
        } else {
            commit_snapshot(&journal, cursor(i), &state(5, 1));
            commit_chain(&journal, cursor(i), &state(100, 2));
        }
    }
    let done = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let wrong: std::sync::Mutex<Vec<(u64, PersistedState)>> = std::sync::Mutex::default();
    let rebases_before = journal.stats().rebases;
    std::thread::scope(|s| {
        s.spawn(|| {
            // The readers stop when the filler does, a panic included.
            let _done = Done(&done);
            // Each tick writes a fresh partition of another cursor: its older copies become
            // garbage and every few ticks a rollover re-bases every cursor above.
            let filler = CursorId {
                topic: 99,
                cursor: 1,
            };
            let key = PartitionKey {
                ledger_id: 1,
                chunk: 0,
            };
            let mut n = 0u32;
            while journal.stats().rebases - rebases_before < REBASES_EACH * BOTH && n < MAX_TICKS {
                n += 1;
                let bitmap: RoaringBitmap = (0..300u32).map(|o| o * 7 + n).collect();
                journal
                    .commit(&[CursorFlush {
                        cursor: filler,
                        name: 0,
                        state: PersistedState::default(),
                        written: vec![(key, bitmap)],
                        live: vec![key],
                    }])
                    .expect("a filler tick");
            }
        });
        for reader in 0..2 {
            let (done, reads, wrong, journal) = (&done, &reads, &wrong, &journal);
            s.spawn(move || {
                while !done.load(Ordering::SeqCst) {
                    for i in 0..BOTH {
                        let got = if reader == 0 {
                            journal.state(cursor(i)).expect("a state")
                        } else {
                            recovered(journal, cursor(i))
                        };
                        reads.fetch_add(1, Ordering::Relaxed);
                        if got.epoch != 2 {
                            wrong.lock().expect("wrong").push((i, got));
                        }
                    }
                }
            });
        }
    });
    let rebases = journal.stats().rebases - rebases_before;
    assert!(
        rebases >= REBASES_EACH * BOTH,
        "{rebases} re-bases in {MAX_TICKS} ticks"
    );
    let wrong = wrong.into_inner().expect("wrong");
    assert!(
        wrong.is_empty(),
        "{} of {} reads found a fallback as the state, the first: {:?}",
        wrong.len(),
        reads.load(Ordering::Relaxed),
        wrong.first()
    );
    for i in 0..BOTH {
        assert_eq!(recovered(&journal, cursor(i)).epoch, 2, "cursor {i}");
    }
}

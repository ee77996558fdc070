//! A rollover against the index changes that need no tick: it reads a cursor's pending copies
//! in the oldest segment, appends their copies, syncs with no lock of the index held, then
//! points each pending row at its copy. A pending copy that left the index in that window
//! (the cursor no longer holds the partition, its recovery dropped its pending copies, its
//! batch record was replaced or is gone) must stay gone: a row brought back is one nothing
//! owns, looked up by the cursor's next flush as its stored copy and counted live.
//!
//! The rollover is paused at its sync, the change is made, and the rollover goes on. Which
//! sync that is comes from a first run of the same operations without the change: the last
//! sync of a journal segment before the first segment's removal, in the commit that removes
//! it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

use ackstore::MemStorage;
use ackstore::internals::ackset::PartitionKey;
use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::journal::index::CursorId;
use ackstore::internals::journal::{CursorFlush, Journal, JournalConfig, Seal};
use roaring::RoaringBitmap;

use crate::support::tap::{Hook, Op, Tap};

/// The journal's syncs of a segment since the count was reset, the count when the first
/// segment's removal came, and, once armed, the sync to pause at: [`Paused`] is sent there,
/// then the go awaited.
#[derive(Default)]
struct PauseRolloverSync {
    syncs: AtomicU64,
    removed_after: Mutex<Option<u64>>,
    armed: Mutex<Option<Gate>>,
}

/// The ordinal of the sync to pause at, where to tell it was reached, and the go to await.
type Gate = (u64, Sender<Paused>, Receiver<()>);

/// The flushing thread reached the paused sync (`true`) or is done (`false`).
struct Paused(bool);

impl PauseRolloverSync {
    fn reset(&self) {
        self.syncs.store(0, Ordering::SeqCst);
        self.removed_after.lock().expect("removal").take();
    }
}

impl Hook for PauseRolloverSync {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        match op {
            Op::Sync(name) if name.starts_with("journal-") => {
                let nth = self.syncs.fetch_add(1, Ordering::SeqCst);
                let mut armed = self.armed.lock().expect("gate");
                if armed.as_ref().is_some_and(|(at, _, _)| *at == nth) {
                    let (_, paused, go) = armed.take().expect("armed");
                    drop(armed);
                    paused.send(Paused(true)).expect("paused");
                    go.recv().expect("go");
                }
            }
            Op::Remove(name) if name.starts_with("journal-") && name.ends_with("1.seg") => {
                let mut removed = self.removed_after.lock().expect("removal");
                removed.get_or_insert(self.syncs.load(Ordering::SeqCst));
            }
            _ => {}
        }
        Ok(())
    }
}

const BUSY: CursorId = CursorId {
    topic: 1,
    cursor: 1,
};
const RACED: CursorId = CursorId {
    topic: 1,
    cursor: 2,
};
/// A batch record's payload and partial-entry count: the journal stores and copies it as it
/// is (only a load decodes it).
const BATCH: (&[u8], u32) = (b"two partial entries", 2);
const KEY: PartitionKey = PartitionKey {
    ledger_id: 7,
    chunk: 0,
};

fn bitmap(values: impl IntoIterator<Item = u32>) -> RoaringBitmap {
    values.into_iter().collect()
}

/// Commits `cursor` with one partition of `acks` written.
fn commit(journal: &Journal, cursor: CursorId, acks: &RoaringBitmap) {
    let key = PartitionKey {
        ledger_id: 1,
        chunk: 0,
    };
    journal
        .commit(&[CursorFlush {
            cursor,
            name: 0,
            state: PersistedState::default(),
            written: vec![(key, acks.clone())],
            live: vec![key],
        }])
        .expect("commit");
}

/// A journal of small segments whose first holds `RACED`'s pending copies (`stage`), behind
/// a tap with the pause.
fn journal_with_pending(stage: impl Fn(&Journal)) -> (Arc<Journal>, Arc<PauseRolloverSync>) {
    let hook = Arc::new(PauseRolloverSync::default());
    let tap = Tap::new(Arc::new(MemStorage::new()), hook.clone());
    let journal = Journal::open(
        Arc::new(tap),
        JournalConfig { segment_bytes: 512 },
        Seal::default(),
    )
    .expect("open");
    commit(&journal, BUSY, &bitmap([0]));
    stage(&journal);
    (Arc::new(journal), hook)
}

/// Commits `BUSY` (one more ack each time) until a commit's rollover removes the first
/// segment; returns that commit's round and the ordinal of its rollover's sync.
fn rounds_to_rollover(journal: &Journal, hook: &PauseRolloverSync) -> (u32, u64) {
    for round in 1..10_000u32 {
        hook.reset();
        commit(journal, BUSY, &bitmap(0..=round));
        if let Some(syncs) = *hook.removed_after.lock().expect("removal") {
            assert!(syncs > 0, "the first segment removed before any sync");
            return (round, syncs - 1);
        }
    }
    panic!("no commit rolled the first segment over");
}

/// A journal from `stage` commits `BUSY` as [`rounds_to_rollover`] found, and runs `during`
/// while the rollover that removes the first segment is paused at its sync.
fn roll_over_with(stage: impl Fn(&Journal), during: impl FnOnce(&Journal)) -> Arc<Journal> {
    let (first, hook) = journal_with_pending(&stage);
    let (rolls_at, sync) = rounds_to_rollover(&first, &hook);
    drop(first);
    let (journal, hook) = journal_with_pending(&stage);
    for round in 1..rolls_at {
        commit(&journal, BUSY, &bitmap(0..=round));
    }
    let (events, event) = channel();
    let (go, gate) = channel();
    hook.reset();
    *hook.armed.lock().expect("gate") = Some((sync, events.clone(), gate));
    std::thread::scope(|s| {
        s.spawn(|| {
            commit(&journal, BUSY, &bitmap(0..=rolls_at));
            events.send(Paused(false)).expect("done");
        });
        let Paused(paused) = event.recv().expect("an event");
        assert!(paused, "the commit ended without the sync to pause at");
        during(&journal);
        go.send(()).expect("go");
    });
    assert!(
        !journal.segments().contains(&1),
        "the first segment is still there: {:?}",
        journal.segments()
    );
    journal
}

/// `RACED` holds no copy of `KEY` and the journal counts no byte of it live.
fn assert_gone(journal: &Journal, what: &str) {
    assert_eq!(
        journal.stored_cardinality(RACED, KEY),
        None,
        "{what}: the rollover brought a pending partition copy back"
    );
    assert_eq!(
        journal.stored_batch(RACED, KEY),
        None,
        "{what}: the rollover brought a pending batch record back"
    );
    // Nothing else of `RACED`'s, and `BUSY` deleted: nothing is live.
    journal.forget(BUSY).expect("forget");
    assert_eq!(
        journal.stats().live_bytes,
        0,
        "{what}: live bytes with no cursor state left"
    );
}

fn evict_partition(j: &Journal) {
    j.store_partition(RACED, KEY, &bitmap([1, 2, 3]))
        .expect("evict");
}

fn evict_batch(j: &Journal) {
    j.store_batch(RACED, KEY, BATCH).expect("evict the batch");
}

#[test]
fn a_partition_forgotten_during_a_rollover_stays_forgotten() {
    let journal = roll_over_with(evict_partition, |j| j.forget_partition(RACED, KEY));
    assert_gone(&journal, "forget_partition");
}

#[test]
fn pending_copies_dropped_during_a_rollover_stay_dropped() {
    let both = |j: &Journal| {
        evict_partition(j);
        evict_batch(j);
    };
    let journal = roll_over_with(both, |j| j.drop_pending(RACED));
    assert_gone(&journal, "drop_pending");
}

#[test]
fn a_batch_record_forgotten_during_a_rollover_stays_forgotten() {
    let journal = roll_over_with(evict_batch, |j| j.forget_batch(RACED, KEY));
    assert_gone(&journal, "forget_batch");
}

/// Pending copies still pending when the rollover points at their copies move there: each
/// copy is read back, and counted live.
#[test]
fn pending_copies_left_alone_move_with_the_rollover() {
    let both = |j: &Journal| {
        evict_partition(j);
        evict_batch(j);
    };
    let journal = roll_over_with(both, |_| {});
    assert_eq!(journal.stored_cardinality(RACED, KEY), Some(3));
    assert_eq!(
        journal.load(RACED, KEY).expect("load"),
        Some(bitmap([1, 2, 3]))
    );
    let batch = journal.stored_batch(RACED, KEY).expect("the batch record");
    assert_ne!(batch.loc.segment, 1, "the batch record was not moved");
    journal.forget(BUSY).expect("forget");
    assert!(
        journal.stats().live_bytes > 0,
        "the moved copies count live"
    );
}

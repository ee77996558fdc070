//! Rollovers against the index changes that need no tick, on several threads at once: each
//! thread owns two cursors and evicts, forgets and drops their partitions and batch records,
//! and commits them now and then, in segments so small that every tick rolls one over, while
//! the other threads' ticks roll over segments holding its pending copies. Each thread keeps
//! a model of what its cursors hold (a pending and a committed copy of each partition, a
//! pending batch record); at the end the journal holds exactly that, every copy reads back,
//! the live bytes are those a restart counts, and none is left once every cursor is forgotten.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use ackstore::internals::ackset::PartitionKey;
use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::format::journal::batch_row_crc;
use ackstore::internals::journal::index::CursorId;
use ackstore::internals::journal::{CursorFlush, Journal, JournalConfig, Seal};
use ackstore::{FileStorage, MemStorage, Storage};
use roaring::RoaringBitmap;
use support::tap::{Hook, Op, Tap};
use support::workload::{Rng, seed_from_env};

const THREADS: u64 = 3;
const CURSORS_PER_THREAD: u64 = 2;
const KEYS: u64 = 4;
const OPS: usize = 1500;
const CONFIG: JournalConfig = JournalConfig {
    segment_bytes: 2048,
};

/// What one cursor holds of one partition: the cardinality of its pending copy, of its
/// committed copy, and of its pending batch record (a copy's contents follow from it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Held {
    pending: Option<u64>,
    committed: Option<u64>,
    batch: Option<u64>,
}

type Model = BTreeMap<(CursorId, PartitionKey), Held>;

fn key(i: u64) -> PartitionKey {
    PartitionKey {
        ledger_id: 1 + i,
        chunk: 0,
    }
}

/// A partition of `card` acks, its contents fixed by `card`.
fn bitmap(card: u64) -> RoaringBitmap {
    (0..u32::try_from(card).expect("small"))
        .map(|o| o * 3)
        .collect()
}

/// A batch record's payload; the journal stores and copies it as it is.
fn batch_payload(card: u64) -> Vec<u8> {
    format!("batch record of {card} partial entries").into_bytes()
}

/// Commits `cursor` with every partition it holds a copy of live (none written): the marker
/// references the newest copy of each.
fn commit(journal: &Journal, cursor: CursorId, model: &mut Model) {
    let mut live = Vec::new();
    for ((c, k), held) in model.iter_mut() {
        if *c != cursor {
            continue;
        }
        held.committed = held.pending.take().or(held.committed);
        if held.committed.is_some() {
            live.push(*k);
        }
    }
    journal
        .commit(&[CursorFlush {
            cursor,
            name: 0,
            state: PersistedState::default(),
            written: Vec::new(),
            live,
        }])
        .expect("commit");
}

/// Which changes [`step`] picks from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Changes {
    /// Any, commits too.
    All,
    /// Only those of the index alone: forgets and drops.
    IndexOnly,
}

/// One random change of one of `cursors`, of those `changes` allows, applied to the journal
/// and to `model`.
fn step(
    journal: &Journal,
    (rng, changes): (&mut Rng, Changes),
    cursors: &[CursorId],
    model: &mut Model,
) {
    let cursor = cursors[rng.index(cursors.len())];
    let k = key(rng.below(KEYS));
    let card = 1 + rng.below(300);
    let roll = match changes {
        Changes::All => rng.below(100),
        Changes::IndexOnly => [35, 70, 80][rng.index(3)],
    };
    let held = model.entry((cursor, k)).or_default();
    match roll {
        0..35 => {
            journal
                .store_partition(cursor, k, &bitmap(card))
                .expect("evict");
            held.pending = Some(card);
        }
        35..50 => {
            journal.forget_partition(cursor, k);
            held.pending = None;
        }
        50..70 => {
            let entries = u32::try_from(card).expect("small");
            journal
                .store_batch(cursor, k, (&batch_payload(card), entries))
                .expect("evict a batch record");
            held.batch = Some(card);
        }
        70..80 => {
            journal.forget_batch(cursor, k);
            held.batch = None;
        }
        80..85 => {
            journal.drop_pending(cursor);
            for ((c, _), held) in model.iter_mut() {
                if *c == cursor {
                    held.pending = None;
                    held.batch = None;
                }
            }
        }
        _ => commit(journal, cursor, model),
    }
}

fn thread_cursors(t: u64) -> Vec<CursorId> {
    (0..CURSORS_PER_THREAD)
        .map(|i| CursorId {
            topic: 1 + t,
            cursor: i,
        })
        .collect()
}

/// Runs every thread's changes; returns the models joined.
fn run_threads(journal: &Journal, seed: u64) -> Model {
    let models: Vec<Model> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                s.spawn(move || {
                    let cursors = thread_cursors(t);
                    let mut rng = Rng::new(seed.wrapping_add(t));
                    let mut model = Model::new();
                    for _ in 0..OPS {
                        step(journal, (&mut rng, Changes::All), &cursors, &mut model);
                        // No other thread changes these cursors: the journal holds what
                        // the model does after every change.
                        assert_holds(journal, &model, seed);
                    }
                    model
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("thread"))
            .collect()
    });
    models.into_iter().flatten().collect()
}

/// Every cursor `model` holds anything of, once each.
fn cursors_of(model: &Model) -> BTreeSet<CursorId> {
    model.keys().map(|(c, _)| *c).collect()
}

/// The journal holds exactly what `model` says, and every copy reads back.
fn assert_holds(journal: &Journal, model: &Model, seed: u64) {
    for (&(cursor, k), held) in model {
        let newest = held.pending.or(held.committed);
        let at = format!("seed {seed}, cursor {cursor:?}, partition {k:?}");
        assert_eq!(journal.stored_cardinality(cursor, k), newest, "{at}");
        let loaded = journal.load(cursor, k).expect("load");
        assert_eq!(loaded, newest.map(bitmap), "{at}: contents");
        // A batch record is stored and copied as it is (only a cursor's load decodes it):
        // its CRC and count name its contents.
        let batch = journal
            .stored_batch(cursor, k)
            .map(|p| (p.cardinality, p.crc));
        let expected = held
            .batch
            .map(|card| (card, batch_row_crc(&batch_payload(card))));
        assert_eq!(batch, expected, "{at}: batch record");
    }
}

/// A restart over `storage` holds every committed copy of `model` and counts `live` bytes.
fn assert_restart(storage: Arc<dyn Storage>, model: &Model, live: u64, seed: u64) {
    let reopened = Journal::open(storage, CONFIG, Seal::default()).expect("reopen");
    for (&(cursor, k), held) in model {
        let at = format!("seed {seed}, cursor {cursor:?}, partition {k:?} after a restart");
        assert_eq!(
            reopened.stored_cardinality(cursor, k),
            held.committed,
            "{at}"
        );
        let loaded = reopened.load(cursor, k).expect("load");
        assert_eq!(loaded, held.committed.map(bitmap), "{at}: contents");
    }
    assert_eq!(
        reopened.stats().live_bytes,
        live,
        "seed {seed}: the live bytes of the committed state, against a restart's"
    );
    for cursor in cursors_of(model) {
        reopened.forget(cursor).expect("forget");
    }
    assert_eq!(
        reopened.stats().live_bytes,
        0,
        "seed {seed}: live bytes with every cursor forgotten"
    );
}

/// Runs the threads over `storage`, checks what the journal holds, then drops every pending
/// copy and checks a restart over `restarted()` (called once the journal is closed).
fn run(storage: Arc<dyn Storage>, restarted: impl FnOnce() -> Arc<dyn Storage>) {
    let seed = seed_from_env("ROLLOVER_THREADS_SEED");
    let journal = Journal::open(storage, CONFIG, Seal::default()).expect("open");
    let model = run_threads(&journal, seed);
    check(journal, &model, seed, restarted);
}

/// [`assert_holds`], then every pending copy dropped and [`assert_restart`] over
/// `restarted()` (called once `journal` is closed).
fn check(journal: Journal, model: &Model, seed: u64, restarted: impl FnOnce() -> Arc<dyn Storage>) {
    assert!(
        journal.stats().rollovers > 50,
        "seed {seed}: too few rollovers to race: {:?}",
        journal.stats()
    );
    assert_holds(&journal, model, seed);
    // With every pending copy dropped, what is live is the committed state a restart reads.
    for cursor in cursors_of(model) {
        journal.drop_pending(cursor);
    }
    let live = journal.stats().live_bytes;
    drop(journal);
    assert_restart(restarted(), model, live, seed);
}

#[test]
fn pending_copies_changed_on_threads_while_ticks_roll_over_hold_what_each_thread_left() {
    let disk = MemStorage::new();
    run(Arc::new(disk.clone()), || Arc::new(disk.durable_image()));
}

/// The same over real files: each sync takes the disk's time, and the other threads' changes
/// land in the window between a rollover's read of the index and its move of the copies.
#[test]
fn pending_copies_changed_on_threads_while_ticks_roll_over_real_files() {
    let dir = tempfile::tempdir().expect("dir");
    let open =
        || -> Arc<dyn Storage> { Arc::new(FileStorage::open(dir.path(), true).expect("storage")) };
    run(open(), open);
}

/// Changes of the raced cursors made inside the journal's segment syncs (ticks' and
/// rollovers'), on the syncing thread: each lands between a rollover's read of the index and
/// its move of the copies when the sync is a rollover's. Only the index's changes (forgets and
/// drops) are made there: the sync of a segment a new one seals runs under the writer's lock,
/// which an eviction takes. The raced cursors' evictions and commits come between ticks.
#[derive(Default)]
struct ChangeDuringSyncs {
    journal: OnceLock<Weak<Journal>>,
    raced: Mutex<Option<(Rng, Model)>>,
}

impl Hook for ChangeDuringSyncs {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        let Op::Sync(name) = op else { return Ok(()) };
        let journal = self.journal.get().and_then(Weak::upgrade);
        // A sync inside a commit of the raced cursors changes nothing.
        if let (true, Some(journal), Ok(mut raced)) =
            (name.starts_with("journal-"), journal, self.raced.try_lock())
            && let Some((rng, model)) = raced.as_mut()
        {
            step(&journal, (rng, Changes::IndexOnly), &RACED, model);
        }
        Ok(())
    }
}

const RACED: [CursorId; 2] = [
    CursorId {
        topic: 9,
        cursor: 1,
    },
    CursorId {
        topic: 9,
        cursor: 2,
    },
];

/// One thread changes and commits its cursors, and commits the raced ones now and then; every
/// segment sync changes the raced cursors' pending copies ([`ChangeDuringSyncs`]).
#[test]
fn pending_copies_changed_inside_every_rollovers_sync_hold_what_the_changes_left() {
    let seed = seed_from_env("ROLLOVER_THREADS_SEED");
    let disk = MemStorage::new();
    let hook = Arc::new(ChangeDuringSyncs::default());
    let tap = Tap::new(Arc::new(disk.clone()), hook.clone());
    let journal = Arc::new(Journal::open(Arc::new(tap), CONFIG, Seal::default()).expect("open"));
    hook.journal
        .set(Arc::downgrade(&journal))
        .expect("set once");
    *hook.raced.lock().expect("raced") = Some((Rng::new(seed ^ 0x5eed), Model::new()));
    let cursors = thread_cursors(0);
    let mut rng = Rng::new(seed);
    let mut model = Model::new();
    for _ in 0..OPS * 2 {
        if rng.chance(30) {
            let mut raced = hook.raced.lock().expect("raced");
            let (raced_rng, raced) = raced.as_mut().expect("raced");
            step(&journal, (raced_rng, Changes::All), &RACED, raced);
        } else {
            step(&journal, (&mut rng, Changes::All), &cursors, &mut model);
        }
        // After every change, the raced cursors' made inside its syncs too.
        let raced = hook.raced.lock().expect("raced");
        let (_, raced) = raced.as_ref().expect("raced");
        assert_holds(&journal, raced, seed);
        assert_holds(&journal, &model, seed);
    }
    let (_, raced) = hook.raced.lock().expect("raced").take().expect("raced");
    model.extend(raced);
    let journal = Arc::into_inner(journal).expect("the only handle");
    check(journal, &model, seed, || Arc::new(disk.durable_image()));
}

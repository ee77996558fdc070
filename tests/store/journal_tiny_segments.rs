//! Segment rollover with segments no larger than their own 24-byte header
//! (`JournalConfig::segment_bytes` accepts 1 byte to 4 GiB): every tick, forget and rollover
//! finds the newest segment full and starts a new one. After cursors are deleted (forget
//! records), the live bytes are small and the segments' bytes are mostly headers; the rollover
//! that follows the next tick must end (and the store keep to its space bound) rather than
//! replace each deleted segment by a new empty one forever. The storage refuses every operation
//! past a generous allowance, so a rollover that does not end shows up as a failed tick, not as
//! a hang. The recovered state is checked against a model.

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::internals::ackset::{PARTITION_SPAN, RangeSetWrapper};
use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::journal::index::CursorId;
use ackstore::internals::journal::{CursorFlush, Journal, JournalConfig, JournalPartitions, Seal};
use ackstore::{MemStorage, Position};

fn id(i: u64) -> CursorId {
    CursorId {
        topic: 1,
        cursor: i,
    }
}

fn open(disk: &MemStorage, config: JournalConfig) -> Arc<Journal> {
    Arc::new(Journal::open(Arc::new(disk.clone()), config, Seal::default()).expect("open"))
}

fn set_of(journal: &Arc<Journal>, c: CursorId) -> RangeSetWrapper {
    let rows = journal.committed(c).map(|(_, r)| r).unwrap_or_default();
    RangeSetWrapper::with_index(
        Box::new(JournalPartitions::new(journal.clone(), c)),
        usize::MAX,
        rows,
    )
}

fn flush(
    journal: &Journal,
    c: CursorId,
    set: &mut RangeSetWrapper,
    epoch: u64,
) -> ackstore::Result<()> {
    let live: Vec<_> = set.partitions().into_iter().map(|(k, _)| k).collect();
    let mut written = Vec::new();
    for &key in &live {
        let current = journal
            .stored_cardinality(c, key)
            .is_some_and(|card| set.stored_copy_current(key, card));
        if !current {
            written.push((key, set.bitmap(key)?.expect("live")));
        }
    }
    journal.commit(&[CursorFlush {
        name: 0,
        cursor: c,
        state: PersistedState {
            epoch,
            ..PersistedState::default()
        },
        written,
        live,
    }])?;
    for key in set.dirty_keys() {
        set.mark_persisted(key);
    }
    Ok(())
}

fn acks_of(journal: &Arc<Journal>, c: CursorId) -> BTreeSet<Position> {
    let mut set = set_of(journal, c);
    let mut out = BTreeSet::new();
    for (key, _) in set.partitions() {
        let b = set.bitmap(key).expect("load").expect("live");
        out.extend(
            b.iter()
                .map(|o| Position::new(key.ledger_id, key.first_entry() + u64::from(o))),
        );
    }
    out
}

/// `cursors` cursors flush one after another (one tick each, so one segment each), all but the
/// first are deleted, then the first acks and flushes again a few times.
fn forget_most_then_tick(segment_bytes: u64, cursors: u64) {
    let config = JournalConfig { segment_bytes };
    let disk = MemStorage::new();
    let journal = open(&disk, config);
    let mut model = BTreeSet::new();
    let mut first = set_of(&journal, id(0));
    for i in 0..cursors {
        let c = id(i);
        let mut set = if i == 0 {
            None
        } else {
            Some(set_of(&journal, c))
        };
        let s = set.as_mut().unwrap_or(&mut first);
        let pos = Position::new(1, i * 3);
        s.add(pos).expect("ack");
        if i == 0 {
            model.insert(pos);
        }
        flush(&journal, c, s, 1).expect("flush");
    }
    for i in 1..cursors {
        journal.forget(id(i)).expect("forget");
    }
    // Far more storage operations than a rollover of every segment needs.
    disk.fail_after(Some(200_000));
    for round in 0..4u64 {
        let pos = Position::new(1, PARTITION_SPAN + round);
        first.add(pos).expect("ack");
        model.insert(pos);
        if let Err(e) = flush(&journal, id(0), &mut first, 2 + round) {
            let stats = journal.stats();
            panic!(
                "segment_bytes {segment_bytes}: tick {round} after the deletes failed ({e}) once \
                 200,000 storage operations were used: the rollover did not end; {stats:?}"
            );
        }
        let stats = journal.stats();
        assert!(
            stats.segment_bytes <= 2 * stats.live_bytes + segment_bytes,
            "segment_bytes {segment_bytes}: space bound after tick {round}: {stats:?}"
        );
    }
    drop((first, journal));
    disk.fail_after(None);
    let reopened = open(&disk.durable_image(), config);
    assert_eq!(acks_of(&reopened, id(0)), model);
    for i in 1..cursors {
        assert!(
            reopened.committed(id(i)).is_none(),
            "deleted cursor {i} came back"
        );
    }
}

#[test]
fn rollover_ends_with_one_byte_segments_after_most_cursors_are_deleted() {
    forget_most_then_tick(1, 40);
}

#[test]
fn rollover_ends_with_header_sized_segments_after_most_cursors_are_deleted() {
    forget_most_then_tick(24, 40);
}

#[test]
fn rollover_ends_with_small_segments_after_most_cursors_are_deleted() {
    forget_most_then_tick(200, 40);
}

/// The same through the public API: a store whose journal segments are 16 bytes, a topic with
/// 40 cursors each flushed on its own, 39 of them deleted, then `flush_all` after one more ack.
#[test]
fn a_store_with_16_byte_segments_flushes_after_deleting_most_cursors() {
    use ackstore::{CursorOptions, LedgerConfig, Store, StoreConfig};
    let config = StoreConfig {
        ledger: LedgerConfig::default(),
        journal: JournalConfig { segment_bytes: 16 },
        flusher_threads: 0,
        ..StoreConfig::default()
    };
    let disk = MemStorage::new();
    let store = Store::open_with_storage(Arc::new(disk.clone()), config.clone()).expect("open");
    let t = store.topic("t").expect("topic");
    let ps: Vec<Position> = (0..50)
        .map(|i| t.append(format!("{i}").as_bytes()).expect("append"))
        .collect();
    t.sync().expect("sync");
    let mut cursors = Vec::new();
    for i in 0..40 {
        let c = t
            .open_cursor(&format!("c{i}"), CursorOptions::default())
            .expect("cursor");
        c.ack(ps[i + 1]).expect("ack");
        c.flush().expect("flush");
        cursors.push(c);
    }
    let keep = cursors.remove(0);
    drop(cursors);
    for i in 1..40 {
        t.delete_cursor(&format!("c{i}")).expect("delete");
    }
    disk.fail_after(Some(200_000));
    keep.ack(ps[30]).expect("ack");
    let flushed = store.flush_all();
    let stats = store.journal_stats();
    assert!(
        flushed.is_ok(),
        "flush_all after the deletes failed ({flushed:?}) once 200,000 storage operations were \
         used: the rollover did not end; {stats:?}"
    );
}

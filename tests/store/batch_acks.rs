//! Batch-index acks (PIP-54) on a store's cursors, persisted as batch records in the store's
//! journal: a power cut at every storage operation of a workload whose ticks roll segments over
//! keeps every message a flush returned `Ok` for and never brings back a message, or a whole
//! entry, the application did not acknowledge; partial entries evicted under a tiny budget load
//! back verified, before and after a reopen; acks from several threads while ticks run; and
//! the version 5 sample, whose records this build writes byte for byte (under a header of its
//! own version). Every check compares against a model of acknowledged messages.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ackstore::internals::ackset::{PartitionKey, RangeSetWrapper};
use ackstore::internals::format::cursor::{
    BatchPartition, PartialEntry, PersistedState, decode_batch_entry, encode_batch_entry,
};
use ackstore::internals::format::journal::{
    RecordKind, SEGMENT_HEADER_V3_LEN, SEGMENT_VERSION, batch_row_crc, name_tag,
};
use ackstore::internals::journal::{
    BatchStage, Journal, JournalConfig, JournalPartitions, Seal, segment_name,
};
use ackstore::{
    AppendMeta, Cursor, CursorConfig, CursorOptions, InitialPosition, LedgerConfig, MemStorage,
    Position, Store, StoreConfig,
};
use roaring::RoaringBitmap;
use support::crash::{Cut, Points, cut_everywhere_after, torn_image, unsynced_tail};
use support::topic::at;

/// Acknowledged messages: (entry, index).
type Messages = BTreeSet<(Position, u32)>;

fn store_config(per_ledger: u64, segment_bytes: u64, cursor: CursorConfig) -> StoreConfig {
    StoreConfig {
        ledger: LedgerConfig {
            max_entries_per_ledger: per_ledger,
            cursor,
            ..LedgerConfig::default()
        },
        journal: JournalConfig { segment_bytes },
        flusher_threads: 0,
        ..StoreConfig::default()
    }
}

/// Appends one entry per batch size to `topic` and syncs them; returns positions and sizes.
fn append_batches(
    topic: &ackstore::ManagedLedger,
    sizes: &[u32],
) -> ackstore::Result<Vec<(Position, u32)>> {
    let entries = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let meta = AppendMeta {
                num_messages: n,
                timestamp: 1000 + i as u64,
            };
            topic.append_with(b"batch", meta).map(|p| (p, n))
        })
        .collect::<ackstore::Result<Vec<_>>>()?;
    topic.sync()?;
    Ok(entries)
}

fn earliest(topic: &ackstore::ManagedLedger, name: &str) -> ackstore::Result<Cursor> {
    topic.open_cursor(name, at(InitialPosition::Earliest, false))
}

/// Every message `c` reports acknowledged (whole entries as all their messages).
fn observed(c: &Cursor, entries: &[(Position, u32)]) -> Messages {
    support::topic::acked_messages(c, entries.iter().copied()).expect("acked")
}

/// What reads deliver of `entries` to a rewound `c`: each entry not acknowledged whole, with
/// the messages acknowledged inside it.
fn delivered(c: &Cursor, entries: &[(Position, u32)]) -> Vec<(Position, Option<BTreeSet<u32>>)> {
    c.rewind().expect("rewind");
    c.read_entries(entries.len() + 1)
        .expect("read")
        .into_iter()
        .map(|e| {
            let acked = e.acked_batch_indexes.map(|b| b.iter().collect());
            (e.position, acked)
        })
        .collect()
}

/// What reads should deliver when `acked` are the acknowledged messages.
fn expected(
    entries: &[(Position, u32)],
    acked: &Messages,
) -> Vec<(Position, Option<BTreeSet<u32>>)> {
    entries
        .iter()
        .filter_map(|&(p, n)| {
            let inside: BTreeSet<u32> = (0..n).filter(|i| acked.contains(&(p, *i))).collect();
            match inside.len() {
                k if k == n as usize => None,
                0 => Some((p, None)),
                _ => Some((p, Some(inside))),
            }
        })
        .collect()
}

#[derive(Debug, Default, Clone)]
struct Model {
    entries: Vec<(Position, u32)>,
    /// Every message acknowledged, per cursor.
    truth: BTreeMap<&'static str, Messages>,
    /// Messages covered by a flush that returned `Ok`, per cursor.
    flushed: BTreeMap<&'static str, Messages>,
    rollovers: u64,
}

const CURSORS: [&str; 2] = ["x", "y"];

fn crash_config() -> StoreConfig {
    store_config(4, 600, CursorConfig::default())
}

/// Two cursors of a store's topic acknowledge messages of batches (and a few whole entries)
/// over eight rounds, each ending with a flush (a tick of the store, or of the cursor alone);
/// the journal's tiny segments make ticks roll segments over, copying batch records.
fn workload(disk: &MemStorage) -> Model {
    let mut m = Model::default();
    let _ = (|| -> ackstore::Result<()> {
        let store = Store::open_with_storage(Arc::new(disk.clone()), crash_config())?;
        let topic = store.topic("t")?;
        let sizes: Vec<u32> = (0..24).map(|i| 2 + (i % 4)).collect();
        m.entries = append_batches(&topic, &sizes)?;
        let cursors: Vec<Cursor> = CURSORS
            .iter()
            .map(|c| earliest(&topic, c))
            .collect::<ackstore::Result<_>>()?;
        for round in 0..8u64 {
            for (k, (name, c)) in CURSORS.iter().zip(&cursors).enumerate() {
                for j in 0..4u64 {
                    let e = ((round * 5 + j * 7 + k as u64 * 3) % 24) as usize;
                    let (pos, n) = m.entries[e];
                    let i = ((round + j + k as u64) % u64::from(n)) as u32;
                    let truth = m.truth.entry(name).or_default();
                    if (round + j) % 9 == 4 {
                        truth.extend((0..n).map(|i| (pos, i)));
                        c.ack(pos)?;
                    } else {
                        truth.insert((pos, i));
                        c.ack_batch_index(pos, i, n)?;
                    }
                }
            }
            if round % 3 == 1 {
                cursors[0].flush()?;
                let t = m.truth.get("x").cloned().unwrap_or_default();
                m.flushed.insert("x", t);
            } else {
                store.flush_all()?;
                m.flushed = m.truth.clone();
            }
            m.rollovers = store.journal_stats().rollovers;
        }
        drop(cursors);
        drop(topic);
        store.close()?;
        m.flushed = m.truth.clone();
        Ok(())
    })();
    m
}

fn check(image: &MemStorage, m: &Model, what: &str) {
    let store = Store::open_with_storage(Arc::new(image.clone()), crash_config())
        .unwrap_or_else(|e| panic!("{what}: open: {e}"));
    let topic = store.topic("t").unwrap_or_else(|e| panic!("{what}: {e}"));
    let names = topic.cursor_names();
    for name in CURSORS {
        let Some(truth) = m.truth.get(name) else {
            continue;
        };
        if !names.iter().any(|n| n == name) {
            assert!(
                m.flushed.get(name).is_none_or(BTreeSet::is_empty),
                "{what}: {name} lost"
            );
            continue;
        }
        let c = earliest(&topic, name).unwrap_or_else(|e| panic!("{what}: {name}: {e}"));
        let got = observed(&c, &m.entries);
        let invented: Vec<_> = got.difference(truth).collect();
        assert!(
            invented.is_empty(),
            "{what}: {name}: never acknowledged: {invented:?}"
        );
        let flushed = m.flushed.get(name).cloned().unwrap_or_default();
        let lost: Vec<_> = flushed.difference(&got).collect();
        assert!(
            lost.is_empty(),
            "{what}: {name}: flushed with Ok, lost: {lost:?}"
        );
        assert_eq!(
            delivered(&c, &m.entries),
            expected(&m.entries, &got),
            "{what}: {name}"
        );
    }
    if m.entries.is_empty() {
        return;
    }
    // The recovered store works on: one more batch-index ack and a flush.
    let c = earliest(&topic, "x").unwrap_or_else(|e| panic!("{what}: {e}"));
    let (pos, n) = m.entries[23];
    c.ack_batch_index(pos, n - 1, n)
        .unwrap_or_else(|e| panic!("{what}: ack after recovery: {e}"));
    c.flush()
        .unwrap_or_else(|e| panic!("{what}: flush after recovery: {e}"));
}

/// A power cut after every storage operation of [`workload`] (ticks, rollovers that copy batch
/// records and re-base chains, segment creations and deletions), with the durable image and
/// images keeping part of the unsynced tail: flushed messages are kept, none is invented.
#[test]
fn a_power_cut_anywhere_in_store_ticks_and_rollovers_keeps_flushed_batch_acks_and_invents_none() {
    let clean = cut_everywhere_after(
        Points::every_in_release(7),
        |_| (),
        |disk, ()| workload(disk),
        |disk, Cut { n, .. }, m| {
            let tail = unsynced_tail(disk);
            check(&disk.durable_image(), &m, &format!("cut at {n}"));
            for keep in [tail / 2, tail] {
                let image = torn_image(disk, |u| u.min(keep));
                check(&image, &m, &format!("cut at {n}, {keep} tail bytes kept"));
            }
        },
    );
    assert!(
        clean.result.rollovers >= 2,
        "rollovers: {}",
        clean.result.rollovers
    );
    assert_eq!(
        clean.result.flushed, clean.result.truth,
        "the clean run closed the store"
    );
    eprintln!("{} cut points", clean.total);
    let partial = expected(&clean.result.entries, &clean.result.truth["y"])
        .iter()
        .filter(|(_, a)| a.is_some())
        .count();
    assert!(
        partial >= 4,
        "the workload leaves partial entries: {partial}"
    );
}

/// Under a budget far below the partial entries' size, they are charged to the ack set's
/// budget and evicted to the journal (batch records, unsynced); every read loads them back
/// verified; a flush references the evicted copies; after a reopen they are cold and load on
/// first use, exactly as acknowledged.
#[test]
fn partial_entries_evicted_to_the_journal_under_a_tiny_budget_load_back_before_and_after_a_reopen()
{
    let budget = 2048;
    let config = store_config(
        4,
        64 << 20,
        CursorConfig {
            lru_capacity_bytes: budget,
            ..CursorConfig::default()
        },
    );
    let disk = MemStorage::new();
    let store = Store::open_with_storage(Arc::new(disk.clone()), config.clone()).expect("open");
    let topic = store.topic("t").expect("topic");
    // Four entries per data ledger: every ledger is its own ack partition.
    let entries = append_batches(&topic, &[3; 400]).expect("append");
    let c = earliest(&topic, "sub").expect("cursor");
    let mut acked = Messages::new();
    for (k, &(pos, n)) in entries.iter().enumerate() {
        if k % 3 == 0 {
            c.ack(pos).expect("ack");
            acked.extend((0..n).map(|i| (pos, i)));
        } else {
            c.ack_batch_index(pos, 1, n).expect("batch ack");
            acked.insert((pos, 1));
        }
    }
    let stats = c.stats().expect("stats");
    assert!(stats.partial_entries > 200, "{stats:?}");
    assert!(
        stats.batch_evictions > 0 && stats.batch_cold_partitions > 0,
        "{stats:?}"
    );
    assert_eq!(
        stats.ackset.charged_bytes as u64, stats.batch_index_bytes,
        "partial entries are charged to the ack set's budget"
    );
    let s = stats.ackset;
    let one_partition = s.peak_resident_bytes.saturating_sub(budget);
    assert!(
        s.resident_bytes + s.charged_bytes <= budget + one_partition.max(1024),
        "{s:?}"
    );
    c.flush().expect("flush");
    assert_eq!(observed(&c, &entries), acked);
    assert!(c.stats().expect("stats").batch_loads > 0);
    assert_eq!(delivered(&c, &entries), expected(&entries, &acked));
    drop((c, topic));
    std::mem::forget(store);
    let store = Store::open_with_storage(Arc::new(disk.durable_image()), config).expect("reopen");
    let topic = store.topic("t").expect("topic");
    let c = earliest(&topic, "sub").expect("cursor");
    let reopened = c.stats().expect("stats");
    assert_eq!(reopened.partial_entries, stats.partial_entries);
    assert!(reopened.batch_cold_partitions > 0, "{reopened:?}");
    assert_eq!(observed(&c, &entries), acked);
    assert_eq!(delivered(&c, &entries), expected(&entries, &acked));
    assert!(c.stats().expect("stats").batch_loads > 0);
}

/// Four threads acknowledge messages of their own entries through handles of one cursor (and
/// of a second cursor) while another thread runs store ticks until they are done: the store's
/// final state after a reopen holds exactly every message acknowledged.
#[test]
fn batch_index_acks_from_several_threads_while_ticks_run_are_all_kept() {
    let config = store_config(8, 4096, CursorConfig::default());
    let disk = MemStorage::new();
    let store = Store::open_with_storage(Arc::new(disk.clone()), config.clone()).expect("open");
    let topic = store.topic("t").expect("topic");
    let entries = append_batches(&topic, &[6; 160]).expect("append");
    let cursors = [
        earliest(&topic, "x").expect("x"),
        earliest(&topic, "y").expect("y"),
    ];
    let done = AtomicBool::new(false);
    // The ticker and the workers start together, and the ticker runs at least one tick after
    // they started, however the threads are scheduled.
    let start = std::sync::Barrier::new(5);
    let models: Vec<Messages> = std::thread::scope(|s| {
        let ticker = s.spawn(|| {
            start.wait();
            loop {
                store.flush_all().expect("tick");
                if done.load(Ordering::SeqCst) {
                    break;
                }
            }
        });
        let workers: Vec<_> = (0..4usize)
            .map(|w| {
                let c = cursors[w % 2].clone();
                let entries = &entries;
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    let mut mine = Messages::new();
                    for (k, &(pos, n)) in entries.iter().enumerate().filter(|(k, _)| k % 4 == w) {
                        for i in (0..n).filter(|i| !(*i as usize + k).is_multiple_of(3)) {
                            c.ack_batch_index(pos, i, n).expect("batch ack");
                            mine.insert((pos, i));
                        }
                    }
                    mine
                })
            })
            .collect();
        // Every worker joined before `done`, then their panics: a worker's panic must not
        // leave the ticker running, and the scope waiting for it.
        let joined: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        done.store(true, Ordering::SeqCst);
        let models: Vec<Messages> = joined.into_iter().map(|w| w.expect("worker")).collect();
        ticker.join().expect("ticker");
        models
    });
    store.flush_all().expect("last tick");
    drop(cursors);
    drop(topic);
    std::mem::forget(store);
    let store = Store::open_with_storage(Arc::new(disk.durable_image()), config).expect("reopen");
    let topic = store.topic("t").expect("topic");
    for (k, name) in ["x", "y"].into_iter().enumerate() {
        let want: Messages = models
            .iter()
            .skip(k)
            .step_by(2)
            .flatten()
            .copied()
            .collect();
        let c = earliest(&topic, name).expect("cursor");
        assert_eq!(observed(&c, &entries), want, "{name}");
        assert_eq!(delivered(&c, &entries), expected(&entries, &want), "{name}");
    }
}

/// A seek by index into a batch on a store cursor commits the prefix of that entry with the
/// seek: after a power cut right after it, the entry is delivered with exactly those messages
/// acknowledged.
#[test]
fn a_seek_by_index_into_a_batch_on_a_store_cursor_survives_a_power_cut_after_it() {
    let config = store_config(8, 64 << 20, CursorConfig::default());
    let disk = MemStorage::new();
    let store = Store::open_with_storage(Arc::new(disk.clone()), config.clone()).expect("open");
    let topic = store.topic("t").expect("topic");
    let entries = append_batches(&topic, &[4, 5, 3]).expect("append");
    let c = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    c.ack_batch_index(entries[2].0, 0, 3).expect("batch ack");
    // Message indexes: entry 0 holds 0..4, entry 1 holds 4..9; index 6 is message 2 of entry 1.
    c.seek_by_index(6).expect("seek");
    let want: Messages = (0..4)
        .map(|i| (entries[0].0, i))
        .chain([(entries[1].0, 0), (entries[1].0, 1)])
        .collect();
    assert_eq!(observed(&c, &entries), want);
    drop((c, topic));
    std::mem::forget(store);
    let store = Store::open_with_storage(Arc::new(disk.durable_image()), config).expect("reopen");
    let topic = store.topic("t").expect("topic");
    let c = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    assert_eq!(
        observed(&c, &entries),
        want,
        "the seek's prefix, and no earlier ack"
    );
    assert_eq!(c.mark_delete_position().expect("mark"), Some(entries[0].0));
    assert_eq!(delivered(&c, &entries), expected(&entries, &want));
}

// ---------------------------------------------------------------------------------------------
// The version 5 sample.

use support::samples::{
    JOURNAL_SAMPLE_CURSOR as NAME, JOURNAL_SAMPLE_ID as ID, JOURNAL_SAMPLE_TOPIC as TOPIC,
    commit_sample_tick,
};
const SAMPLE: &str = "journal-v5-batch";

fn partition(ledger_id: u64, entries: &[(u64, u32, &[u32])]) -> BatchPartition {
    BatchPartition {
        ledger_id,
        chunk: 0,
        entries: entries
            .iter()
            .map(|&(entry_id, batch_size, acked)| PartialEntry {
                entry_id,
                batch_size,
                acked: acked.iter().copied().collect::<RoaringBitmap>(),
            })
            .collect(),
    }
}

fn key_of(p: &BatchPartition) -> PartitionKey {
    PartitionKey {
        ledger_id: p.ledger_id,
        chunk: p.chunk,
    }
}

fn written(p: &BatchPartition) -> (PartitionKey, Vec<u8>, u32) {
    (
        key_of(p),
        encode_batch_entry(p).expect("encode"),
        p.entries.len() as u32,
    )
}

fn kept(p: &BatchPartition) -> (PartitionKey, u32) {
    (
        key_of(p),
        batch_row_crc(&encode_batch_entry(p).expect("encode")),
    )
}

/// The journal of `tests/data/journal-v5-batch`: whole-entry acks in two partitions and
/// partial entries in two (a full marker), a delta that rewrites one partition's partial
/// entries, and a delta that removes the other's as mark-delete moves past it. Returns the
/// state, the acks and the partial entries it ends with.
fn sample_v5(disk: &MemStorage) -> (PersistedState, BTreeSet<Position>, Vec<BatchPartition>) {
    let (journal, mut set) = support::journal::journal_and_acks(disk, ID);
    let acks = [Position::new(1, 0), Position::new(2, 5)];
    for p in acks {
        set.add(p).expect("ack");
    }
    let live: Vec<PartitionKey> = set.partitions().into_iter().map(|(k, _)| k).collect();
    let bitmaps: Vec<_> = live
        .iter()
        .map(|k| (*k, set.bitmap(*k).expect("load").expect("live")))
        .collect();
    let name = name_tag(TOPIC, NAME);
    let a = partition(1, &[(3, 4, &[0]), (9, 3, &[1, 2])]);
    let b = partition(2, &[(7, 3, &[1])]);
    let mut tick = journal.begin_tick();
    let stage = BatchStage {
        written: vec![written(&a), written(&b)],
        kept: Vec::new(),
    };
    tick.stage_with_batch(
        (ID, name),
        PersistedState::default(),
        (&bitmaps, &live),
        &stage,
    )
    .expect("stage");
    tick.commit().expect("tick");
    let a2 = partition(1, &[(3, 4, &[0, 2]), (9, 3, &[1, 2])]);
    let stage = BatchStage {
        written: vec![written(&a2)],
        kept: vec![kept(&b)],
    };
    commit_sample_tick(&journal, PersistedState::default(), &live, &stage);
    let state = PersistedState {
        mark_delete: Position::new(1, 20),
        epoch: 2,
        properties: [("offset".to_string(), 7)].into(),
    };
    let stage = BatchStage {
        written: Vec::new(),
        kept: vec![kept(&a2)],
    };
    commit_sample_tick(&journal, state.clone(), &live[1..], &stage);
    assert_eq!(journal.stats().deltas, 2);
    (state, [acks[1]].into(), vec![a2])
}

/// What a journal holds of cursor [`ID`]: state, acks, partial entries.
fn recovered(journal: &Arc<Journal>) -> (PersistedState, BTreeSet<Position>, Vec<BatchPartition>) {
    let (state, rows) = journal.committed(ID).expect("committed");
    let mut set = RangeSetWrapper::with_index(
        Box::new(JournalPartitions::new(journal.clone(), ID)),
        usize::MAX,
        rows,
    );
    let mut acks = BTreeSet::new();
    for (key, _) in set.partitions() {
        let bitmap = set.bitmap(key).expect("load").expect("live");
        acks.extend(
            bitmap
                .iter()
                .map(|o| Position::new(key.ledger_id, key.first_entry() + u64::from(o))),
        );
    }
    let batch = journal
        .committed_batch(ID)
        .into_iter()
        .map(|(key, _)| {
            let (_, payload) = journal.load_batch(ID, key).expect("load").expect("record");
            decode_batch_entry(&payload).expect("decode")
        })
        .collect();
    (state, acks, batch)
}

#[test]
fn the_version_5_sample_reads_to_its_exact_batch_state_and_this_build_writes_its_batch_records_byte_for_byte()
 {
    let disk = MemStorage::new();
    let want = sample_v5(&disk);
    let written = disk.live_bytes(&segment_name(1)).expect("segment");
    // A sample of an earlier version: kept as it was committed, never written again.
    let dir = support::samples::sample_dir(SAMPLE);
    let sample = std::fs::read(dir.path().join(segment_name(1))).expect("sample");
    assert_eq!(&sample[8..10], &5u16.to_le_bytes(), "a version 5 segment");
    assert_eq!(
        &written[8..10],
        &SEGMENT_VERSION.to_le_bytes(),
        "this build's version"
    );
    // The same records in the same order, the batch records byte for byte (partition records
    // carry their partition directly from version 7, so they, and the rows naming them, differ).
    let records = |segment: &[u8]| {
        support::mutate::records_of(segment)
            .into_iter()
            .map(|r| {
                let body = (r.kind == ackstore::internals::format::journal::RecordKind::Batch)
                    .then(|| segment[r.offset..r.offset + r.len].to_vec());
                (r.kind, body)
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        records(&written),
        records(&sample),
        "this build writes the sample's batch records byte for byte"
    );
    let storage = ackstore::FileStorage::open(dir.path(), true).expect("storage");
    let journal = Arc::new(
        Journal::open(Arc::new(storage), JournalConfig::default(), Seal::default()).expect("open"),
    );
    assert_eq!(recovered(&journal), want);
    assert_eq!(
        journal.committed_name(ID).map(|(n, _)| n),
        Some(name_tag(TOPIC, NAME))
    );
}

/// Opens the journal in `dir` (a sample's copy) and checks it holds `want` of cursor [`ID`],
/// bound to its name.
fn check_batch_sample(
    dir: &std::path::Path,
    want: &(PersistedState, BTreeSet<Position>, Vec<BatchPartition>),
) {
    let storage = ackstore::FileStorage::open(dir, true).expect("storage");
    let journal = Arc::new(
        Journal::open(Arc::new(storage), JournalConfig::default(), Seal::default()).expect("open"),
    );
    assert_eq!(&recovered(&journal), want);
    assert_eq!(
        journal.committed_name(ID).map(|(n, _)| n),
        Some(name_tag(TOPIC, NAME))
    );
}

/// Each record of `segment` (records from the header on): its kind, its frame's length, and
/// its frame's bytes unless it is a marker or a delta (whose batch rows' CRCs are what version
/// 8 changes).
fn records_but_markers(segment: &[u8]) -> Vec<(RecordKind, usize, Option<Vec<u8>>)> {
    support::mutate::records_of(segment)
        .into_iter()
        .map(|r| {
            let body = (!matches!(r.kind, RecordKind::Marker | RecordKind::Delta))
                .then(|| segment[r.offset..r.offset + r.len].to_vec());
            (r.kind, r.len, body)
        })
        .collect()
}

/// `tests/data/journal-v7-batch`: the journal of the version 5 sample as the version 7 build
/// wrote it (partitions, batch records, a full marker with a batch table, a delta rewriting one
/// batch record and a delta removing the other), its batch rows holding the CRC32 of the whole
/// batch record. It reads to its exact state, and this build writes the same records, every
/// partition and batch record byte for byte, its markers and deltas of the same lengths.
#[test]
fn the_version_7_batch_sample_reads_to_its_exact_state() {
    let disk = MemStorage::new();
    let want = sample_v5(&disk);
    let written = disk.live_bytes(&segment_name(1)).expect("segment");
    // A sample of an earlier version: kept as it was committed, never written again.
    let dir = support::samples::sample_dir("journal-v7-batch");
    let sample = std::fs::read(dir.path().join(segment_name(1))).expect("sample");
    assert_eq!(&sample[8..10], &7u16.to_le_bytes(), "a version 7 segment");
    assert_eq!(records_but_markers(&written), records_but_markers(&sample));
    assert_ne!(
        written[SEGMENT_HEADER_V3_LEN..],
        sample[SEGMENT_HEADER_V3_LEN..]
    );
    check_batch_sample(dir.path(), &want);
}

/// `tests/data/journal-v8-batch`: the same journal as this build writes it, byte for byte, its
/// batch rows naming each batch record by [`batch_row_crc`]; it reads to its exact state.
#[test]
fn the_version_8_batch_sample_reads_to_its_exact_state_and_this_build_writes_it_byte_for_byte() {
    let disk = MemStorage::new();
    let want = sample_v5(&disk);
    let written = disk.live_bytes(&segment_name(1)).expect("segment");
    let (dir, sample) =
        support::samples::written_sample("journal-v8-batch", &segment_name(1), &written);
    assert_eq!(&sample[8..10], &SEGMENT_VERSION.to_le_bytes());
    assert_eq!(
        written, sample,
        "this build writes the sample byte for byte"
    );
    check_batch_sample(dir.path(), &want);
}

/// The version 7 sample goes on under this build: a tick adds four partitions (a full marker,
/// in a version 8 segment: the first marker this build writes on a chain holding a version 7
/// batch row), then a tick drops every partition (a full marker, smaller than a delta removing
/// five keys); both keep the sample's last batch record where it is, in the version 7 segment,
/// and their batch rows name it by its [`batch_row_crc`]. The journal
/// reopens to that state, the batch record still read from the version 7 segment.
#[test]
fn a_version_8_marker_names_a_batch_record_of_the_version_7_sample_by_its_inner_crc() {
    let disk = MemStorage::new();
    let (_, _, batch) = sample_v5(&MemStorage::new());
    support::samples::load_sample(&disk, "journal-v7-batch");
    let (journal, _) = support::journal::journal_and_acks(&disk, ID);
    let name = name_tag(TOPIC, NAME);
    let (state, rows) = journal.committed(ID).expect("committed");
    let mut live: Vec<PartitionKey> = rows.into_iter().map(|(k, _)| k).collect();
    let added: Vec<(PartitionKey, RoaringBitmap)> = (0..4)
        .map(|chunk| {
            (
                PartitionKey {
                    ledger_id: 5,
                    chunk,
                },
                [1u32].into_iter().collect(),
            )
        })
        .collect();
    live.extend(added.iter().map(|(k, _)| *k));
    let kept = BatchStage {
        written: Vec::new(),
        kept: batch.iter().map(kept).collect(),
    };
    let deltas = journal.stats().deltas;
    let mut tick = journal.begin_tick();
    tick.stage_with_batch((ID, name), state.clone(), (&added, &live), &kept)
        .expect("stage");
    tick.commit().expect("tick");
    assert_eq!(journal.stats().deltas, deltas, "a full marker");
    let mut tick = journal.begin_tick();
    tick.stage_with_batch((ID, name), state.clone(), (&[], &[]), &kept)
        .expect("stage");
    tick.commit().expect("tick");
    assert_eq!(journal.stats().deltas, deltas, "a full marker again");
    drop(journal);
    let second = disk.live_bytes(&segment_name(2)).expect("a second segment");
    assert_eq!(&second[8..10], &SEGMENT_VERSION.to_le_bytes());
    let journal = Arc::new(
        Journal::open(
            Arc::new(disk.clone()),
            JournalConfig::default(),
            Seal::default(),
        )
        .expect("reopen"),
    );
    assert_eq!(recovered(&journal), (state, BTreeSet::new(), batch));
    let named: Vec<u64> = journal
        .committed_batch(ID)
        .iter()
        .map(|(_, part)| part.loc.segment)
        .collect();
    assert_eq!(
        named,
        [1],
        "the batch record stays in the version 7 segment"
    );
}

/// Each byte of the sample's batch records and of the markers that reference them, flipped
/// below the synced length: the open refuses the journal (`Corrupted`), never a state with
/// other partial entries.
#[test]
fn a_flipped_bit_in_a_synced_batch_record_or_batch_row_is_corruption() {
    let disk = MemStorage::new();
    let want = sample_v5(&disk);
    let bytes = disk.live_bytes(&segment_name(1)).expect("segment");
    for at in (ackstore::internals::format::journal::SEGMENT_HEADER_V3_LEN..bytes.len()).step_by(3)
    {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x10;
        match support::journal::open_segment_bytes(&damaged) {
            Err(ackstore::Error::Corrupted { .. }) => {}
            Err(e) => panic!("byte {at}: {e}"),
            Ok(j) => assert_eq!(recovered(&Arc::new(j)), want, "byte {at}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// verify and inspect on a store with batch records.

/// A store on real files whose cursor holds partial entries in several partitions, flushed
/// through the journal (a full marker with a batch table, then a delta), closed cleanly;
/// returns the entries and the acknowledged messages.
fn store_with_batch_records(dir: &std::path::Path) -> (Vec<(Position, u32)>, Messages) {
    let store = Store::open(dir, store_config(4, 64 << 20, CursorConfig::default())).expect("open");
    let topic = store.topic("t").expect("topic");
    let entries = append_batches(&topic, &[3; 12]).expect("append");
    let c = earliest(&topic, "sub").expect("cursor");
    let mut acked = Messages::new();
    for (k, &(pos, n)) in entries.iter().enumerate().skip(1) {
        c.ack_batch_index(pos, (k % 3) as u32, n)
            .expect("batch ack");
        acked.insert((pos, (k % 3) as u32));
        if k == 6 {
            c.flush().expect("flush");
        }
    }
    c.flush().expect("flush");
    drop((c, topic));
    store.close().expect("close");
    (entries, acked)
}

/// Opens the store and reads every message's state of cursor `sub` (every batch record loads).
fn opened_state(dir: &std::path::Path, entries: &[(Position, u32)]) -> ackstore::Result<Messages> {
    let store = Store::open(dir, store_config(4, 64 << 20, CursorConfig::default()))?;
    let topic = store.topic("t")?;
    let c = earliest(&topic, "sub")?;
    let out = support::topic::acked_messages(&c, entries.iter().copied())?;
    drop((c, topic));
    store.close()?;
    Ok(out)
}

/// `ackstore verify` and the store's open agree on every damaged byte of the batch records:
/// both refuse it (it lies below the segment's synced length); the intact store verifies,
/// `inspect` counts its batch records, and it opens to the model.
#[test]
fn verify_and_open_agree_on_damaged_batch_records_and_inspect_counts_them() {
    let dir = tempfile::tempdir().expect("dir");
    let (entries, acked) = store_with_batch_records(dir.path());
    assert_eq!(support::mutate::verify_checked(dir.path()).code, Some(0));
    let storage: Arc<dyn ackstore::Storage> =
        Arc::new(ackstore::FileStorage::open(dir.path(), false).expect("the directory opens"));
    let Ok(ackstore::check::Inspection::Store(report)) = ackstore::check::inspect(&storage) else {
        panic!("a store inspects as a store");
    };
    assert!(report.journal.batch_partitions >= 3, "{report}");
    assert_eq!(
        report.journal.partial_entries,
        acked.len() as u64,
        "{report}"
    );
    assert_eq!(opened_state(dir.path(), &entries).expect("opens"), acked);
    let segment = dir.path().join(segment_name(1));
    let bytes = std::fs::read(&segment).expect("segment");
    let records = support::journal::batch_records(&bytes);
    assert!(records.len() >= 3, "{records:?}");
    for (at, len) in records {
        for offset in (at..at + len).step_by(7) {
            let mut damaged = bytes.clone();
            damaged[offset] ^= 0x04;
            std::fs::write(&segment, &damaged).expect("damage");
            let verdict = support::mutate::verify_checked(dir.path());
            let opened = opened_state(dir.path(), &entries);
            assert!(
                matches!(opened, Err(ackstore::Error::Corrupted { .. })),
                "byte {offset}: {opened:?}"
            );
            assert_eq!(verdict.code, Some(1), "byte {offset}: {verdict:?}");
        }
    }
    std::fs::write(&segment, &bytes).expect("restore");
    assert_eq!(
        opened_state(dir.path(), &entries).expect("opens again"),
        acked
    );
}

/// The journal bytes a flush appends after one more batch-index ack, for a cursor whose
/// partial entries span `partitions` partitions (one data ledger each).
fn flush_bytes_after_one_batch_ack(partitions: usize) -> (u64, u64) {
    let disk = MemStorage::new();
    let store = Store::open_with_storage(
        Arc::new(disk),
        store_config(1, 64 << 20, CursorConfig::default()),
    )
    .expect("open");
    let topic = store.topic("t").expect("topic");
    let entries = append_batches(&topic, &vec![4; partitions + 1]).expect("append");
    let c = earliest(&topic, "sub").expect("cursor");
    for &(pos, n) in &entries[1..] {
        c.ack_batch_index(pos, 0, n).expect("batch ack");
    }
    c.flush().expect("flush");
    let mut deltas = Vec::new();
    for k in 1..=2 {
        let before = store.journal_stats().bytes_written;
        let (pos, n) = entries[k * partitions / 3];
        c.ack_batch_index(pos, 1, n).expect("batch ack");
        c.flush().expect("flush");
        deltas.push(store.journal_stats().bytes_written - before);
    }
    assert!(store.journal_stats().deltas >= 2);
    (deltas[0], deltas[1])
}

/// A delta carries only the batch partitions that changed: the bytes of a flush after one
/// batch-index ack are the same with 20 partitions holding partial entries as with 200.
#[test]
fn a_flush_after_one_batch_index_ack_appends_as_much_whatever_the_partitions_holding_partial_entries()
 {
    let few = flush_bytes_after_one_batch_ack(20);
    let many = flush_bytes_after_one_batch_ack(200);
    assert_eq!(few, many, "bytes of a flush after one batch-index ack");
    assert!(many.0 < 300, "one batch record and a delta: {many:?}");
}

/// A version 4 journal (the committed sample) takes partial entries: the next tick starts a
/// version 5 segment, its delta builds on the version 4 chain and adds a batch record, the
/// version 4 segment is never appended to, and a reopen finds the old acks and the partial
/// entries.
#[test]
fn a_version_4_journal_goes_on_with_batch_records_in_a_segment_of_this_builds_version() {
    let dir = support::samples::sample_dir("journal-v4-delta");
    let v4 = std::fs::read(dir.path().join(segment_name(1))).expect("sample");
    let storage: Arc<dyn ackstore::Storage> =
        Arc::new(ackstore::FileStorage::open(dir.path(), false).expect("storage"));
    let open = || {
        Arc::new(
            Journal::open(storage.clone(), JournalConfig::default(), Seal::default())
                .expect("open"),
        )
    };
    let journal = open();
    let (state, acks, batch) = recovered(&journal);
    assert!(batch.is_empty() && !acks.is_empty());
    let (_, rows) = journal.committed(ID).expect("committed");
    let live: Vec<PartitionKey> = rows.iter().map(|(k, _)| *k).collect();
    let partial = partition(7, &[(2, 5, &[0, 3])]);
    let stage = BatchStage {
        written: vec![written(&partial)],
        kept: Vec::new(),
    };
    commit_sample_tick(&journal, state.clone(), &live, &stage);
    assert_eq!(journal.stats().deltas, 1, "a delta on the version 4 chain");
    assert_eq!(journal.tail().segment, 2);
    drop(journal);
    let segment2 = std::fs::read(dir.path().join(segment_name(2))).expect("segment 2");
    assert_eq!(
        &segment2[8..10],
        &SEGMENT_VERSION.to_le_bytes(),
        "a segment of this build's version"
    );
    assert_eq!(
        std::fs::read(dir.path().join(segment_name(1))).expect("segment 1"),
        v4,
        "a version 4 segment is never appended to"
    );
    assert_eq!(recovered(&open()), (state, acks, vec![partial]));
}

/// A full disk while partial entries are evicted: the evictions' appends fail and the
/// partitions stay resident (pinned) past the budget, the batch-index acks go on, a flush fails
/// and changes nothing; once space returns the next flush makes every message durable and the
/// resident state goes back within the budget.
#[test]
fn a_full_disk_pins_partial_entries_and_the_flush_after_it_keeps_every_message() {
    let budget = 2048;
    let config = store_config(
        4,
        64 << 20,
        CursorConfig {
            lru_capacity_bytes: budget,
            ..CursorConfig::default()
        },
    );
    let disk = MemStorage::new();
    let store = Store::open_with_storage(Arc::new(disk.clone()), config.clone()).expect("open");
    let topic = store.topic("t").expect("topic");
    let entries = append_batches(&topic, &[3; 400]).expect("append");
    let c = earliest(&topic, "sub").expect("cursor");
    let mut acked = Messages::new();
    for &(pos, n) in &entries[1..100] {
        c.ack_batch_index(pos, 1, n).expect("batch ack");
        acked.insert((pos, 1));
    }
    c.flush().expect("flush");
    disk.set_capacity(Some(disk.used_bytes()));
    for &(pos, n) in &entries[100..] {
        c.ack_batch_index(pos, 2, n)
            .expect("a batch-index ack on a full disk");
        acked.insert((pos, 2));
    }
    assert!(c.flush().is_err(), "a flush on a full disk");
    assert_eq!(observed(&c, &entries), acked, "nothing lost in memory");
    disk.set_capacity(None);
    c.flush().expect("the flush once space returned");
    let s = c.stats().expect("stats").ackset;
    let one_partition = s.peak_resident_bytes.saturating_sub(budget);
    assert!(
        s.resident_bytes + s.charged_bytes <= budget + one_partition.max(1024),
        "back within the budget: {s:?}"
    );
    drop((c, topic));
    std::mem::forget(store);
    let store = Store::open_with_storage(Arc::new(disk.durable_image()), config).expect("reopen");
    let topic = store.topic("t").expect("topic");
    let c = earliest(&topic, "sub").expect("cursor");
    assert_eq!(observed(&c, &entries), acked);
}

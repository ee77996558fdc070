//! Delta markers of the store's cursor journal: what a flush after one ack appends does not
//! grow with the cursor's live partitions; a power cut at every storage operation and every
//! torn tail byte while cursors flush deltas, roll segments over and reopen keeps every
//! committed ack and invents none; a delta whose partition is damaged or missing is
//! corruption below the segment's synced length and, past it, rejected with every delta built
//! on it; a rollover re-bases the chains that reach into the segment it
//! deletes. Every check compares against a model (`BTreeSet<Position>` per cursor).

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::internals::ackset::{PARTITION_SPAN, RangeSetWrapper};
use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::format::journal::{
    Record, SEGMENT_HEADER_V3_LEN, SLOT_COPIES, SLOT_LEN, SLOTS_AT, decode_record, encode_record,
    encode_slot, name_tag,
};
use ackstore::internals::journal::{
    CursorFlush, Journal, JournalConfig, JournalPartitions, JournalStats, Seal, TickStats,
    parse_segment_name, segment_name,
};
use ackstore::{FileStorage, MemStorage, Position, Storage};
use support::crash::{cut_everywhere, torn_image, unsynced_tail};
use support::journal::{Fleet, Outcome, check, cursor_ids};
use support::workload::Rng;

/// The topic and the name of the cursor whose state the journal binds.
use support::samples::{
    JOURNAL_SAMPLE_CURSOR as NAME, JOURNAL_SAMPLE_ID as ID, JOURNAL_SAMPLE_TOPIC as TOPIC,
};

fn open(disk: &MemStorage, config: JournalConfig) -> Arc<Journal> {
    Arc::new(Journal::open(Arc::new(disk.clone()), config, Seal::default()).expect("open"))
}

/// A cursor of `journal` whose ack set starts from what the journal committed.
fn cursor(journal: &Arc<Journal>) -> RangeSetWrapper {
    cursor_within(journal, usize::MAX)
}

/// [`cursor`] keeping at most `budget` bytes of partitions resident (the rest evicted to the
/// journal, unsynced, before a tick).
fn cursor_within(journal: &Arc<Journal>, budget: usize) -> RangeSetWrapper {
    let rows = journal
        .committed(ID)
        .map(|(_, rows)| rows)
        .unwrap_or_default();
    let store = Box::new(JournalPartitions::new(journal.clone(), ID));
    RangeSetWrapper::with_index(store, budget, rows)
}

/// Flushes `set` as a store cursor stages it: the live partitions whose journal copy is not
/// current, every live key, one tick.
fn flush(journal: &Journal, set: &mut RangeSetWrapper) -> TickStats {
    flush_state(journal, set, PersistedState::default())
}

/// [`flush`] with `state`.
fn flush_state(journal: &Journal, set: &mut RangeSetWrapper, state: PersistedState) -> TickStats {
    try_flush_state(journal, set, state).expect("tick")
}

/// [`flush_state`], its load or tick failing with the error (as on a disk that lost power).
fn try_flush_state(
    journal: &Journal,
    set: &mut RangeSetWrapper,
    state: PersistedState,
) -> ackstore::Result<TickStats> {
    let live: Vec<_> = set.partitions().into_iter().map(|(k, _)| k).collect();
    let mut written = Vec::new();
    for &key in &live {
        let current = journal
            .stored_cardinality(ID, key)
            .is_some_and(|c| set.stored_copy_current(key, c));
        if !current {
            written.push((key, set.bitmap(key)?.expect("live")));
        }
    }
    let stats = journal.commit(&[CursorFlush {
        name: name_tag(TOPIC, NAME),
        cursor: ID,
        state,
        written,
        live,
    }])?;
    for key in set.dirty_keys() {
        set.mark_persisted(key);
    }
    Ok(stats)
}

/// Every ack the journal on `disk` recovers for the cursor.
fn recovered(disk: &MemStorage, config: JournalConfig) -> BTreeSet<Position> {
    acks_of(&open(disk, config))
}

/// Every ack `journal` committed for the cursor, its partitions loaded.
fn acks_of(journal: &Arc<Journal>) -> BTreeSet<Position> {
    try_acks_of(journal).expect("load")
}

/// [`acks_of`], a load that fails failing with its error.
fn try_acks_of(journal: &Arc<Journal>) -> ackstore::Result<BTreeSet<Position>> {
    let mut set = cursor(journal);
    let mut acks = BTreeSet::new();
    for (key, _) in set.partitions() {
        let bitmap = set.bitmap(key)?.expect("live");
        acks.extend(
            bitmap
                .iter()
                .map(|o| Position::new(key.ledger_id, key.first_entry() + u64::from(o))),
        );
    }
    Ok(acks)
}

/// Bytes the tick after one more ack appends, for a cursor with `partitions` live ones; the
/// state recovered after it is the model's.
fn bytes_after_one_ack(partitions: u64) -> u64 {
    let disk = MemStorage::new();
    let config = JournalConfig::default();
    let journal = open(&disk, config);
    let mut set = cursor(&journal);
    let mut model = BTreeSet::new();
    for p in 0..partitions {
        let pos = Position::new(1, p * PARTITION_SPAN);
        set.add(pos).expect("ack");
        model.insert(pos);
    }
    let first = flush(&journal, &mut set);
    assert_eq!(first.partitions, partitions);
    let pos = Position::new(1, PARTITION_SPAN + 1);
    set.add(pos).expect("ack");
    model.insert(pos);
    let one = flush(&journal, &mut set);
    assert_eq!(one.partitions, 1, "one partition changed");
    assert_eq!(journal.stats().deltas, 1, "the second marker is a delta");
    drop((set, journal));
    assert_eq!(recovered(&disk.durable_image(), config), model);
    one.bytes
}

#[test]
fn a_flush_after_one_ack_appends_the_same_bytes_at_100_and_10000_live_partitions() {
    let small = bytes_after_one_ack(100);
    let large = bytes_after_one_ack(10_000);
    // A full marker of 10,000 partitions alone would take 360,000 bytes.
    assert!(small < 512, "{small} bytes at 100 partitions");
    assert!(
        large.abs_diff(small) <= 8,
        "{small} bytes at 100 partitions, {large} at 10,000"
    );
}

/// Small segments: the workloads below start segments and roll over many times.
fn small_segments() -> JournalConfig {
    JournalConfig {
        segment_bytes: 4096,
    }
}

/// About three partitions per cursor resident, so evictions append partitions between ticks.
const BUDGET: usize = 1500;

/// Entry ids acked lie below this: 16 partitions per ledger, so most flushes are deltas.
const WIDE: u64 = 16 * PARTITION_SPAN;

/// What the workload did, and the journal counters summed over its opens.
#[derive(Debug, Default)]
struct Run {
    outcome: Outcome,
    deltas: u64,
    rebases: u64,
    rollovers: u64,
}

impl Run {
    fn add(&mut self, stats: JournalStats) {
        self.deltas += stats.deltas;
        self.rebases += stats.rebases;
        self.rollovers += stats.rollovers;
    }
}

/// `rounds` opens of a fleet on `disk`, each acking `acks` entries chosen by `seed` over
/// [`WIDE`] entry ids of two ledgers and ticking every `every` acks. Stops at the first error,
/// as a process that lost its disk would.
fn delta_workload(disk: &MemStorage, seed: u64, rounds: u64, acks: u64, every: u64) -> Run {
    let config = small_segments();
    let mut run = Run::default();
    let ids = cursor_ids();
    let mut rng = Rng::new(seed);
    for _ in 0..rounds {
        let Ok(mut fleet) = Fleet::open(disk, config, BUDGET) else {
            return run;
        };
        for i in 1..=acks {
            let id = ids[rng.index(ids.len())];
            let pos = Position::new(1 + rng.below(2), rng.below(WIDE));
            run.outcome.truth.entry(id).or_default().insert(pos);
            if fleet.ack(id, pos).is_err() {
                run.add(fleet.journal.stats());
                return run;
            }
            if i % every == 0 {
                if fleet.tick().is_err() {
                    run.add(fleet.journal.stats());
                    return run;
                }
                run.outcome.durable = run.outcome.truth.clone();
                run.outcome.ticks += 1;
            }
        }
        run.add(fleet.journal.stats());
    }
    run
}

#[test]
fn a_power_cut_at_every_step_of_delta_ticks_rollovers_and_reopens_keeps_every_committed_ack() {
    let config = small_segments();
    let clean = cut_everywhere(
        |disk| delta_workload(disk, 21, 3, 90, 6),
        |disk, cut, run| {
            check(
                &disk.durable_image(),
                config,
                &run.outcome,
                &format!("{cut:?}"),
            );
        },
    );
    let run = clean.result;
    assert_eq!(run.outcome.ticks, 45);
    assert!(run.deltas > 100, "deltas written: {run:?}");
    assert!(run.rollovers > 0 && run.rebases > 0, "re-bases: {run:?}");
}

#[test]
fn every_byte_of_an_unsynced_tick_of_deltas_recovers_to_the_model() {
    let config = small_segments();
    let mut checked = 0;
    cut_everywhere(
        |disk| delta_workload(disk, 5, 2, 60, 6),
        |disk, cut, run| {
            let tail = unsynced_tail(disk);
            if tail == 0 {
                return;
            }
            let step = if tail > 300 { 1 } else { (tail / 7).max(1) };
            for keep in (0..=tail).step_by(step) {
                let image = torn_image(disk, |_| keep);
                check(
                    &image,
                    config,
                    &run.outcome,
                    &format!("{cut:?}, {keep} of {tail} tail bytes"),
                );
                checked += 1;
            }
        },
    );
    assert!(checked > 1000, "only {checked} torn images checked");
}

/// A cursor with eight partitions (a full marker), then two deltas: the first rewrites
/// partition 3, the second (built on the first) partition 5. Returns the disk, the acks of
/// the full marker, every ack made, and where the first delta's partition record starts.
fn chain_of_two_deltas() -> (MemStorage, BTreeSet<Position>, BTreeSet<Position>, usize) {
    let disk = MemStorage::new();
    let journal = open(&disk, JournalConfig::default());
    let mut set = cursor(&journal);
    let mut truth = BTreeSet::new();
    for p in 0..8 {
        let pos = Position::new(1, p * PARTITION_SPAN);
        set.add(pos).expect("ack");
        truth.insert(pos);
    }
    flush(&journal, &mut set);
    let base = truth.clone();
    let at = usize::try_from(journal.tail().len).expect("offset");
    for pos in [
        Position::new(1, 3 * PARTITION_SPAN + 5),
        Position::new(1, 5 * PARTITION_SPAN + 7),
    ] {
        set.add(pos).expect("ack");
        truth.insert(pos);
        assert_eq!(flush(&journal, &mut set).partitions, 1);
    }
    assert_eq!(journal.stats().deltas, 2);
    (disk, base, truth, at)
}

/// Re-frames the record at `at` of segment 1 after `edit` (same length, valid frame CRC).
fn rewrite_record(disk: &MemStorage, at: usize, edit: impl FnOnce(&mut Vec<u8>, &mut u64)) {
    let name = segment_name(1);
    let mut bytes = disk.live_bytes(&name).expect("segment");
    let (rec, len) = decode_record(&bytes[at..]).expect("frame").expect("record");
    let mut payload = rec.payload.to_vec();
    let mut cursor = rec.cursor;
    edit(&mut payload, &mut cursor);
    let mut framed = Vec::new();
    encode_record(
        &mut framed,
        &Record {
            kind: rec.kind,
            topic: rec.topic,
            cursor,
            payload: &payload,
        },
    )
    .expect("the record encodes");
    assert_eq!(framed.len(), len);
    bytes[at..at + len].copy_from_slice(&framed);
    disk.set_bytes(&name, bytes).expect("rewrite");
}

/// The damage at `at` lies below segment 1's synced length: the delta that references it is
/// corruption, never a walk back; then, with the slots as a power cut that lost every slot
/// write leaves them (claiming the header only), the same bytes are never promised and the
/// delta is walked back.
fn assert_refused_below_the_synced_length(disk: &MemStorage, at: usize) {
    match Journal::open(
        Arc::new(disk.clone()),
        JournalConfig::default(),
        Seal::default(),
    ) {
        Err(ackstore::Error::Corrupted {
            place: ackstore::CorruptionPlace::Journal { segment, offset },
            ..
        }) => assert!(segment == 1 && offset > at as u64, "{segment} {offset}"),
        Err(e) => panic!("refused, but not at the delta: {e}"),
        Ok(_) => panic!("a delta below the synced length was walked back"),
    }
    let name = segment_name(1);
    let mut bytes = disk.live_bytes(&name).expect("segment");
    for copy in 0..SLOT_COPIES {
        let slot = encode_slot(1, copy, SEGMENT_HEADER_V3_LEN as u64);
        let from = SLOTS_AT + copy * SLOT_LEN;
        bytes[from..from + SLOT_LEN].copy_from_slice(&slot);
    }
    disk.set_bytes(&name, bytes).expect("rewrite");
}

/// The journal recovers the full marker's state, then builds a new delta on it that a reopen
/// keeps.
fn assert_recovers_the_base_and_goes_on(disk: &MemStorage, base: &BTreeSet<Position>) {
    let config = JournalConfig::default();
    assert_eq!(&recovered(disk, config), base, "the deltas were rejected");
    let journal = open(disk, config);
    let mut set = cursor(&journal);
    let pos = Position::new(1, 6 * PARTITION_SPAN + 9);
    set.add(pos).expect("ack");
    flush(&journal, &mut set);
    assert_eq!(journal.stats().deltas, 1, "a delta on the recovered marker");
    drop((set, journal));
    let mut expected = base.clone();
    expected.insert(pos);
    assert_eq!(recovered(&disk.durable_image(), config), expected);
}

#[test]
fn a_delta_whose_partition_is_damaged_is_rejected_with_every_delta_built_on_it() {
    let (disk, base, truth, at) = chain_of_two_deltas();
    assert_eq!(recovered(&disk, JournalConfig::default()), truth);
    // The partition entry's own CRC (its last four bytes) no longer matches: the frame still
    // verifies, so this is no torn tail, and the record is not the one the delta names.
    rewrite_record(&disk, at, |payload, _| {
        let last = payload.len() - 1;
        payload[last] ^= 0x10;
    });
    assert_refused_below_the_synced_length(&disk, at);
    assert_recovers_the_base_and_goes_on(&disk, &base);
}

#[test]
fn a_delta_whose_partition_is_missing_is_rejected_with_every_delta_built_on_it() {
    let (disk, base, _, at) = chain_of_two_deltas();
    // The record at the delta's location now belongs to another cursor.
    rewrite_record(&disk, at, |_, cursor| *cursor = 99);
    assert_refused_below_the_synced_length(&disk, at);
    assert_recovers_the_base_and_goes_on(&disk, &base);
}

#[test]
fn rollover_re_bases_chains_so_deleting_their_oldest_segment_keeps_the_exact_state() {
    let config = small_segments();
    let disk = MemStorage::new();
    let journal = open(&disk, config);
    let mut set = cursor(&journal);
    let mut model = BTreeSet::new();
    for p in 0..40 {
        let pos = Position::new(1, p * PARTITION_SPAN);
        set.add(pos).expect("ack");
        model.insert(pos);
    }
    flush(&journal, &mut set);
    let mut rng = Rng::new(8);
    for _ in 0..300 {
        let pos = Position::new(1, rng.below(40 * PARTITION_SPAN));
        set.add(pos).expect("ack");
        model.insert(pos);
        flush(&journal, &mut set);
        let stats = journal.stats();
        assert!(
            stats.segment_bytes <= 2 * stats.live_bytes + config.segment_bytes,
            "the rollover's bound: {stats:?}"
        );
    }
    let stats = journal.stats();
    assert!(stats.deltas >= 290, "{stats:?}");
    assert!(stats.rollovers >= 2 && stats.rebases >= 2, "{stats:?}");
    drop((set, journal));
    let image = disk.durable_image();
    let segments: Vec<u64> = image
        .list()
        .expect("list")
        .iter()
        .filter_map(|n| parse_segment_name(n))
        .collect();
    assert!(
        !segments.contains(&1),
        "the segment of the first full marker was deleted: {segments:?}"
    );
    assert_eq!(recovered(&image, config), model);
}

/// The journal of `tests/data/journal-v2-delta`, `journal-v3-delta` and `journal-v4-delta`
/// (of the cursor named [`NAME`] from version 4): a full marker of four partitions, a delta
/// that rewrites one, a delta that adds one, and a delta that removes one as the mark-delete
/// moves past it. Returns the state and the acks it ends with.
fn sample_journal(disk: &MemStorage) -> (PersistedState, BTreeSet<Position>) {
    let journal = open(disk, JournalConfig::default());
    let mut set = cursor(&journal);
    let mut model = BTreeSet::new();
    let first = [
        Position::new(1, 0),
        Position::new(1, PARTITION_SPAN),
        Position::new(1, 2 * PARTITION_SPAN),
        Position::new(2, 5),
    ];
    for pos in first {
        set.add(pos).expect("ack");
        model.insert(pos);
    }
    flush(&journal, &mut set);
    for pos in [
        Position::new(1, PARTITION_SPAN + 1),
        Position::new(1, 3 * PARTITION_SPAN),
    ] {
        set.add(pos).expect("ack");
        model.insert(pos);
        flush(&journal, &mut set);
    }
    let mark_delete = Position::new(1, PARTITION_SPAN - 1);
    set.remove_at_most(mark_delete).expect("mark-delete");
    model.retain(|p| *p > mark_delete);
    let state = PersistedState {
        mark_delete,
        epoch: 3,
        properties: [("offset".to_string(), 42)].into(),
    };
    flush_state(&journal, &mut set, state.clone());
    assert_eq!(journal.stats().deltas, 3);
    (state, model)
}

/// Opens sample `name` (a journal of [`sample_journal`] written by the build of segment version
/// `version`) and checks it holds the sample's state and acks, bound to `bound` (the name tag
/// of [`NAME`] from version 4, none before); returns its segment's bytes.
fn check_sample(name: &str, version: u16, bound: u32) -> Vec<u8> {
    let disk = MemStorage::new();
    let (state, model) = sample_journal(&disk);
    let dir = support::samples::sample_dir(name);
    let sample = std::fs::read(dir.path().join(segment_name(1))).expect("sample");
    assert_eq!(
        &sample[8..10],
        &version.to_le_bytes(),
        "a version {version} segment"
    );
    let storage = FileStorage::open(dir.path(), true).expect("storage");
    let journal = Arc::new(
        Journal::open(Arc::new(storage), JournalConfig::default(), Seal::default()).expect("open"),
    );
    let (recovered_state, _) = journal.committed(ID).expect("committed");
    assert_eq!(recovered_state, state);
    assert_eq!(acks_of(&journal), model);
    assert_eq!(journal.committed_name(ID).map(|(n, _)| n), Some(bound));
    sample
}

#[test]
fn the_version_2_sample_with_deltas_reads_to_its_exact_state() {
    check_sample("journal-v2-delta", 2, 0);
}

#[test]
fn the_version_3_sample_reads_to_its_exact_state_binding_no_name() {
    check_sample("journal-v3-delta", 3, 0);
}

#[test]
fn the_version_4_sample_reads_to_its_exact_state_and_name() {
    check_sample("journal-v4-delta", 4, name_tag(TOPIC, NAME));
}

#[test]
fn the_version_6_sample_reads_to_its_exact_state_and_name() {
    check_sample("journal-v6-delta", 6, name_tag(TOPIC, NAME));
}

/// What this build writes of [`sample_journal`] holds the version 6 sample's records, kind for
/// kind, with every partition record smaller by what the version 6 wrapping cost: the cursor
/// entry's frame (magic, version, kind, flags: 8 bytes), its fixed key, cardinality and length
/// (28) and CRC (4), and the ack partition record's magic and version (6) and CRC (4), less the
/// cardinality's varint, which the version 7 payload adds before the set's encoding byte: 50
/// bytes less 1 to 3. Markers and deltas keep their sizes.
#[test]
fn this_build_writes_the_sample_with_each_partition_under_the_frames_one_crc() {
    use ackstore::internals::format::journal::{
        RecordKind, SEGMENT_VERSION, decode_partition_payload,
    };
    use ackstore::internals::format::varint_len;
    use support::mutate::records_of;

    let sample = check_sample("journal-v6-delta", 6, name_tag(TOPIC, NAME));
    let disk = MemStorage::new();
    sample_journal(&disk);
    let written = disk.live_bytes(&segment_name(1)).expect("segment");
    assert_eq!(&written[8..10], &SEGMENT_VERSION.to_le_bytes());
    let (old, new) = (records_of(&sample), records_of(&written));
    assert_eq!(
        old.iter().map(|r| r.kind).collect::<Vec<_>>(),
        new.iter().map(|r| r.kind).collect::<Vec<_>>(),
        "the same records in the same order"
    );
    let mut saved = 0;
    for (o, n) in old.iter().zip(&new) {
        if n.kind != RecordKind::Partition {
            assert_eq!(o.len, n.len, "a {:?} keeps its size", n.kind);
            continue;
        }
        let payload = &written[n.offset + 25..n.offset + n.len];
        let p = decode_partition_payload(payload, SEGMENT_VERSION).expect("a partition");
        let cardinality = usize::try_from(p.cardinality).expect("fits");
        assert_eq!(o.len - n.len, 50 - varint_len(cardinality as u64));
        saved += o.len - n.len;
    }
    assert_eq!(sample.len() - written.len(), saved);
}

/// The version 6 sample opened by this build, acked (a partition it holds rewritten, a new
/// one) and flushed: the tick goes into a new version 7 segment, its delta naming the
/// unchanged partitions where the version 6 segment holds them, which is never appended to; a
/// reopen has the sample's acks and the new ones. Then a rollover of the version 6 segment
/// rewrites its live partitions in version 7 form, and the next reopen has them all again.
#[test]
fn a_version_6_journal_goes_on_in_a_version_7_segment_with_the_same_acks_and_the_new_ones() {
    use ackstore::internals::format::journal::SEGMENT_VERSION;

    let (_, mut model) = sample_journal(&MemStorage::new());
    let dir = support::samples::sample_dir("journal-v6-delta");
    let v6 = std::fs::read(dir.path().join(segment_name(1))).expect("sample");
    assert_eq!(&v6[8..10], &6u16.to_le_bytes(), "a version 6 segment");
    let storage: Arc<dyn Storage> =
        Arc::new(FileStorage::open(dir.path(), false).expect("storage"));
    let config = JournalConfig::default();
    let journal = Arc::new(Journal::open(storage.clone(), config, Seal::default()).expect("open"));
    assert_eq!(acks_of(&journal), model);
    let (state, before) = journal.committed(ID).expect("committed");
    let mut set = cursor(&journal);
    for pos in [
        Position::new(1, 3 * PARTITION_SPAN + 9),
        Position::new(4, 1),
    ] {
        set.add(pos).expect("ack");
        model.insert(pos);
    }
    let stats = flush_state(&journal, &mut set, state.clone());
    assert_eq!(stats.partitions, 2, "one partition rewritten, one new");
    assert_eq!(journal.stats().deltas, 1, "a delta on the version 6 chain");
    drop((set, journal));
    let segment2 = std::fs::read(dir.path().join(segment_name(2))).expect("segment 2");
    assert_eq!(&segment2[8..10], &SEGMENT_VERSION.to_le_bytes());
    assert_eq!(
        std::fs::read(dir.path().join(segment_name(1))).expect("segment 1"),
        v6,
        "a version 6 segment is never appended to"
    );
    let reopened =
        Arc::new(Journal::open(storage.clone(), config, Seal::default()).expect("reopen"));
    assert_eq!(acks_of(&reopened), model);
    let (again, rows) = reopened.committed(ID).expect("committed");
    assert_eq!(again, state);
    assert_eq!(rows.len(), before.len() + 1);
    drop(reopened);

    // Segments of one record's room: the next tick starts a segment and rolls the version 6
    // one over, its live partitions copied forward in this version's form.
    let tiny = JournalConfig { segment_bytes: 1 };
    let journal = Arc::new(Journal::open(storage.clone(), tiny, Seal::default()).expect("open"));
    let mut set = cursor(&journal);
    let pos = Position::new(4, 2);
    set.add(pos).expect("ack");
    model.insert(pos);
    flush_state(&journal, &mut set, state.clone());
    assert!(journal.stats().rollovers >= 1, "{:?}", journal.stats());
    assert!(
        !journal.segments().contains(&1),
        "the version 6 segment was rolled over: {:?}",
        journal.segments()
    );
    drop((set, journal));
    let reopened = Arc::new(Journal::open(storage, config, Seal::default()).expect("reopen"));
    assert_eq!(acks_of(&reopened), model);
    assert_eq!(reopened.committed(ID).expect("committed").0, state);
}

#[test]
fn a_version_1_segment_reads_and_its_cursors_go_on_in_a_new_version_3_segment() {
    let dir = support::samples::sample_dir("store-v2-flat");
    let name = segment_name(1);
    let v1 = std::fs::read(dir.path().join(&name)).expect("sample segment");
    assert_eq!(
        &v1[8..10],
        &1u16.to_le_bytes(),
        "the sample is a version 1 segment"
    );
    let storage: Arc<dyn Storage> =
        Arc::new(FileStorage::open(dir.path(), false).expect("storage"));
    let config = JournalConfig::default();
    let journal = Arc::new(Journal::open(storage.clone(), config, Seal::default()).expect("open"));
    let ids = journal.cursors();
    assert!(!ids.is_empty(), "the sample's cursors are committed");
    let id = ids[0];
    let (state, rows) = journal.committed(id).expect("committed");
    let mut live: Vec<_> = rows.iter().map(|(k, _)| *k).collect();
    let pos = Position::new(9, 1);
    let mut added = RangeSetWrapper::new(
        Box::new(JournalPartitions::new(journal.clone(), id)),
        usize::MAX,
    );
    added.add(pos).expect("ack");
    let key = added.partitions()[0].0;
    live.push(key);
    live.sort_unstable();
    journal
        .commit(&[CursorFlush {
            name: 0,
            cursor: id,
            state: state.clone(),
            written: vec![(key, added.bitmap(key).expect("load").expect("live"))],
            live,
        }])
        .expect("tick");
    assert_eq!(journal.stats().deltas, 1, "a delta on the version 1 marker");
    assert_eq!(journal.tail().segment, 2, "written to a new segment");
    drop((added, journal));
    assert_eq!(
        std::fs::read(dir.path().join(&name)).expect("segment"),
        v1,
        "a version 1 segment is never appended to"
    );
    let reopened = Journal::open(storage, config, Seal::default()).expect("reopen");
    let (again, rows_again) = reopened.committed(id).expect("committed");
    assert_eq!(again, state);
    assert_eq!(rows_again.len(), rows.len() + 1);
    assert!(rows_again.iter().any(|(k, c)| *k == key && *c == 1));
}

/// The version 6 sample continued by this build with the power cut after every storage
/// operation (and every torn byte of the unsynced tails): the open that finds the version 6
/// segment newest, a tick that starts the version 7 segment (or, with no partition kept
/// resident, the evictions before it that start it), a reopen with segments of one
/// record's room and a tick whose rollover rewrites the version 6 partitions in version 7
/// form. At every cut the offline check and the open agree (both read the image, to the same
/// rows), every row's version is the header version of the segment it points into, and the
/// acks recovered are those of a tick that returned `Ok` or of the one cut short: never fewer
/// than the last flushed, never more than the truth.
#[test]
fn a_power_cut_at_every_step_of_a_version_6_journal_going_on_in_version_7_keeps_the_flushed_acks() {
    use support::crash::{Points, cut_everywhere_after, cut_images};
    use support::samples::load_sample;

    let (state, sample) = sample_journal(&MemStorage::new());
    // The acks each tick of the workload adds, in order, and what the journal holds after it.
    let ticks = [
        vec![
            Position::new(1, 3 * PARTITION_SPAN + 9),
            Position::new(4, 1),
        ],
        vec![Position::new(4, 2), Position::new(2, 7)],
    ];
    let mut truths = vec![sample.clone()];
    for acks in &ticks {
        let mut next = truths.last().expect("a truth").clone();
        next.extend(acks.iter().copied());
        truths.push(next);
    }
    let tiny = JournalConfig { segment_bytes: 1 };
    for budget in [usize::MAX, 0] {
        // One tick of `acks` on `journal`; once the tick returned, how many segments the
        // journal had before it (the acks' evictions may start one).
        let tick = |journal: &Arc<Journal>, acks: &[Position]| -> ackstore::Result<usize> {
            let mut set = cursor_within(journal, budget);
            for &pos in acks {
                set.add(pos)?;
            }
            let before = journal.segments().len();
            try_flush_state(journal, &mut set, state.clone()).map(|_| before)
        };
        // How many ticks returned `Ok`, the rollovers of the last, and the segments before
        // the first.
        let workload = |disk: &MemStorage, ()| {
            let mut flushed = 0;
            let mut rollovers = 0;
            let mut first = None;
            for (i, (acks, config)) in ticks
                .iter()
                .zip([JournalConfig::default(), tiny])
                .enumerate()
            {
                let Ok(journal) = Journal::open(Arc::new(disk.clone()), config, Seal::default())
                else {
                    break;
                };
                let journal = Arc::new(journal);
                let Ok(before) = tick(&journal, acks) else {
                    break;
                };
                rollovers = journal.stats().rollovers;
                first = first.or(Some(before));
                flushed = i + 1;
            }
            (flushed, rollovers, first)
        };
        let mut images = 0;
        let clean = cut_everywhere_after(
            Points::EVERY,
            |disk| load_sample(disk, "journal-v6-delta"),
            workload,
            |disk, cut, (flushed, _, _)| {
                for (kept, image) in cut_images(disk) {
                    images += 1;
                    let what = format!("budget {budget}, {cut:?}, {kept} unsynced bytes kept");
                    let acks = check_agrees_with_open(&image, &what);
                    let at = truths.iter().position(|t| *t == acks);
                    assert!(
                        at.is_some_and(|at| at >= flushed && at <= flushed + 1),
                        "{what}: {flushed} ticks returned, recovered {acks:?}"
                    );
                }
            },
        );
        assert_eq!(
            clean.result.0,
            ticks.len(),
            "a clean run flushes every tick"
        );
        assert!(clean.result.1 >= 1, "the last tick rolled over");
        assert!(images > clean.total, "{images} images");
        // Evicted before the tick, the acks start the version 7 segment themselves.
        let evicted = budget == 0;
        assert_eq!(
            clean.result.2,
            Some(1 + usize::from(evicted)),
            "budget {budget}"
        );
    }
}

/// Checks the journal on `image` offline and opens it: both read it, to the same state and
/// rows; every row is read as the header version of the segment it points into, and every
/// partition of the state verifies. Returns the acks the open recovers.
fn check_agrees_with_open(image: &MemStorage, what: &str) -> BTreeSet<Position> {
    use ackstore::internals::journal::{check as offline_check, committed_ranges};

    let storage: Arc<dyn Storage> = Arc::new(image.clone());
    let found = offline_check(storage.as_ref(), Seal::default())
        .unwrap_or_else(|e| panic!("{what}: the check refuses the journal: {e}"));
    let journal = open(image, JournalConfig::default());
    let committed = found.states.get(&ID).expect("a committed state");
    let rows: Vec<_> = committed
        .rows
        .iter()
        .map(|(k, p)| (*k, p.cardinality))
        .collect();
    assert_eq!(
        journal.committed(ID),
        Some((committed.state.clone(), rows)),
        "{what}: the check and the open agree"
    );
    for (key, part) in committed.rows.iter() {
        let header = image
            .live_bytes(&segment_name(part.loc.segment))
            .expect("the segment a row names");
        assert_eq!(
            &header[8..10],
            &part.version.to_le_bytes(),
            "{what}: {key:?} read as its segment's version"
        );
    }
    committed_ranges(storage, committed)
        .unwrap_or_else(|e| panic!("{what}: a partition does not verify: {e}"));
    acks_of(&journal)
}

/// The version 6 sample goes on through 200 ticks in 1200-byte segments, each a
/// reopen: a tick's markers name partitions of the version 6 segment while version 7 segments
/// pile up behind it, until a rollover rewrites them; at every tick the offline check and the
/// open agree on the model's acks, and every row reads as its segment's version.
#[test]
fn a_version_6_journal_through_many_version_7_segments_and_rollovers_keeps_the_models_acks() {
    use ackstore::internals::format::journal::SEGMENT_VERSION;

    let (state, mut model) = sample_journal(&MemStorage::new());
    let disk = MemStorage::new();
    support::samples::load_sample(&disk, "journal-v6-delta");
    let config = JournalConfig {
        segment_bytes: 1200,
    };
    let mut rng = Rng::new(77);
    let (mut mixed, mut rollovers) = (0, 0);
    for round in 0..200 {
        let journal = open(&disk, config);
        let mut set = cursor(&journal);
        for _ in 0..3 {
            let pos = Position::new(1 + rng.below(4), rng.below(6 * PARTITION_SPAN));
            if pos > state.mark_delete {
                set.add(pos).expect("ack");
                model.insert(pos);
            }
        }
        flush_state(&journal, &mut set, state.clone());
        let segments = journal.segments();
        rollovers += journal.stats().rollovers;
        drop((set, journal));
        if segments.first() == Some(&1) && segments.len() > 2 {
            mixed += 1;
        }
        for seq in segments.iter().filter(|s| **s != 1) {
            let bytes = disk.live_bytes(&segment_name(*seq)).expect("segment");
            assert_eq!(
                &bytes[8..10],
                &SEGMENT_VERSION.to_le_bytes(),
                "segment {seq}"
            );
        }
        let what = format!("round {round}, segments {segments:?}");
        assert_eq!(check_agrees_with_open(&disk, &what), model, "{what}");
    }
    let journal = open(&disk, config);
    assert!(
        !journal.segments().contains(&1),
        "the version 6 segment rolled over"
    );
    assert!(
        mixed > 2,
        "version 6 and 7 segments were live together: {mixed} ticks"
    );
    assert!(rollovers > 50, "{rollovers} rollovers");
}

/// The version 6 sample gone on in a version 7 segment, then either segment's header relabelled
/// with another version under a recomputed header CRC: a partition record is then read with the
/// other layout. The offline check (with every partition of the state) and the open (with every
/// load) refuse together, or both read the exact acks, or (the tick past the synced length the
/// slots claim) both walk back to the state before the tick: never more than the truth, and a
/// tick the slots claim is never walked back.
#[test]
fn a_segment_relabelled_with_another_version_is_refused_by_the_check_and_the_open_together() {
    use ackstore::internals::journal::{check as offline_check, committed_ranges};

    let (state, mut truth) = sample_journal(&MemStorage::new());
    let before = truth.clone();
    let disk = MemStorage::new();
    support::samples::load_sample(&disk, "journal-v6-delta");
    let journal = open(&disk, JournalConfig::default());
    let mut set = cursor(&journal);
    for pos in [
        Position::new(4, 1),
        Position::new(1, 3 * PARTITION_SPAN + 9),
    ] {
        set.add(pos).expect("ack");
        truth.insert(pos);
    }
    flush_state(&journal, &mut set, state);
    assert_eq!(journal.segments(), vec![1, 2]);
    drop((set, journal));
    let mut accepted = Vec::new();
    // The durable image, whose slots claim segment 2's header only (the tick's slot write was
    // not synced yet: the tick may be walked back), and the image with every byte written,
    // whose slot claims the tick (promised: it commits or the journal is refused).
    let cases = [(1, 7u16), (1, 5), (2, 6), (2, 5)];
    for (promised, (seq, version)) in [false, true]
        .into_iter()
        .flat_map(|p| cases.into_iter().map(move |c| (p, c)))
    {
        let image = disk.durable_image();
        if promised {
            let live = disk.live_bytes(&segment_name(2)).expect("segment 2");
            image.set_bytes(&segment_name(2), live).expect("its slot");
        }
        let name = segment_name(seq);
        let mut bytes = image.live_bytes(&name).expect("segment");
        bytes[8..10].copy_from_slice(&version.to_le_bytes());
        let crc = crc32fast::hash(&bytes[..20]);
        bytes[20..24].copy_from_slice(&crc.to_le_bytes());
        image.set_bytes(&name, bytes).expect("rewrite");
        let what = format!("segment {seq} relabelled version {version}, promised {promised}");
        let storage: Arc<dyn Storage> = Arc::new(image.clone());
        let checked =
            offline_check(storage.as_ref(), Seal::default()).and_then(|found| {
                match found.states.get(&ID) {
                    Some(committed) => committed_ranges(storage.clone(), committed).map(|_| ()),
                    None => Ok(()),
                }
            });
        let opened = Journal::open(storage.clone(), JournalConfig::default(), Seal::default())
            .and_then(|journal| try_acks_of(&Arc::new(journal)));
        assert_eq!(
            checked.is_ok(),
            opened.is_ok(),
            "{what}: {checked:?} {opened:?}"
        );
        if let Ok(acks) = opened {
            accepted.push((promised, seq, version, acks == truth));
            if acks != truth {
                assert!(!promised, "{what}: a promised tick walked back");
                assert_eq!(
                    acks, before,
                    "{what}: the state before the tick or after it"
                );
            }
        }
    }
    // The version 6 segment reads as version 5 whole; version 7 partition records never read
    // as an earlier layout, so a relabelled segment 2 walks its tick back where the slots do
    // not claim it, and is refused where they do.
    assert_eq!(
        accepted,
        vec![
            (false, 1, 5, true),
            (false, 2, 6, false),
            (false, 2, 5, false),
            (true, 1, 5, true)
        ]
    );
}

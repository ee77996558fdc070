//! Batch rows across segment versions: `tests/data/journal-v7-batch` (a version 7 segment whose
//! batch rows hold the CRC32 of the whole batch record, the same for every batch record) goes
//! on under this build until a version 8 full marker names the sample's live batch record by
//! its inner CRC, in the version 7 segment or as a rollover's byte-for-byte copy in a version 8
//! one: the first flush of this build writes one, even one that a chain of this build would
//! make a delta (and a journal of this build goes on with deltas, after a reopen too). Then the sample's two batch records of one partition and partial-entry count (the
//! first tick's and the delta's that rewrote it, frames of the same length) exchanged, or one
//! copied over the other, or the older one copied over the rolled-over copy of the live one:
//! the open refuses the journal (`Corrupted`: the records lie below the synced length) and the
//! offline check reports the same damage, unless the damage hit only the record that the
//! sample's superseded version 7 marker alone names (then both read the undamaged state). And a
//! power cut anywhere as this build goes on with the sample, rolling its chain over into
//! version 8 segments: the open reads a state a tick committed, and the check agrees.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::MemStorage;
use ackstore::internals::ackset::PartitionKey;
use ackstore::internals::format::cursor::{
    BatchPartition, PartialEntry, decode_batch_entry, encode_batch_entry,
};
use ackstore::internals::format::journal::{RecordKind, batch_row_crc, name_tag};
use ackstore::internals::journal::{BatchStage, Journal, JournalConfig, Seal, segment_name};
use roaring::RoaringBitmap;
use support::crash::{Cut, Points, cut_everywhere_after, torn_image, unsynced_tail};
use support::samples::{
    JOURNAL_SAMPLE_CURSOR as NAME, JOURNAL_SAMPLE_ID as ID, JOURNAL_SAMPLE_TOPIC as TOPIC,
};

/// The version 7 sample: `tests/data/journal-v7-batch`.
const V7: &str = "journal-v7-batch";
/// The version 7 sample gone on by a version 8 build in a version 8 delta naming no batch record:
/// `tests/data/journal-v7-batch-delta`.
const V7_DELTA: &str = "journal-v7-batch-delta";

/// Acknowledged messages of the partial entries: (ledger, entry, message).
type Partial = BTreeSet<(u64, u64, u32)>;

/// The sample's partial entries as the journal on `disk` opens them (`None`: refused).
fn opened(disk: &MemStorage) -> ackstore::Result<Partial> {
    let journal = Journal::open(
        Arc::new(disk.clone()),
        JournalConfig::default(),
        Seal::default(),
    )?;
    let mut out = Partial::new();
    for (key, _) in journal.committed_batch(ID) {
        let (_, payload) = journal.load_batch(ID, key)?.expect("a batch record");
        let p = decode_batch_entry(&payload).expect("decodes");
        for e in &p.entries {
            out.extend(e.acked.iter().map(|i| (p.ledger_id, e.entry_id, i)));
        }
    }
    Ok(out)
}

/// The journal on `disk` opened by this build.
fn open_journal(disk: &MemStorage) -> Journal {
    Journal::open(
        Arc::new(disk.clone()),
        JournalConfig::default(),
        Seal::default(),
    )
    .expect("open")
}

/// The sample's cursor's batch records as a flush that changes no partial entry keeps them:
/// each with its [`batch_row_crc`].
fn kept_batch(journal: &Journal) -> BatchStage {
    let kept = journal
        .committed_batch(ID)
        .into_iter()
        .map(|(key, _)| {
            let (_, payload) = journal.load_batch(ID, key).expect("load").expect("record");
            (key, batch_row_crc(&payload))
        })
        .collect();
    BatchStage {
        written: Vec::new(),
        kept,
    }
}

/// One tick of the sample's cursor on `journal` keeping its state and its batch records:
/// `added` written, the cursor's live partitions those committed and those of `added` (none at
/// all with `drop_all`). Returns the deltas the tick wrote.
fn tick_keeping_batch(
    journal: &Journal,
    added: &[(PartitionKey, RoaringBitmap)],
    drop_all: bool,
) -> u64 {
    let (state, rows) = journal.committed(ID).expect("committed");
    let mut live: Vec<PartitionKey> = rows.into_iter().map(|(k, _)| k).collect();
    live.extend(added.iter().map(|(k, _)| *k));
    if drop_all {
        live.clear();
    }
    let stage = kept_batch(journal);
    let deltas = journal.stats().deltas;
    let mut tick = journal.begin_tick();
    tick.stage_with_batch((ID, name_tag(TOPIC, NAME)), state, (added, &live), &stage)
        .expect("stage");
    tick.commit().expect("tick");
    journal.stats().deltas - deltas
}

/// Partitions `5:first..5:first + n`, each with one ack.
fn new_partitions(first: u64, n: u64) -> Vec<(PartitionKey, RoaringBitmap)> {
    (first..first + n)
        .map(|chunk| {
            let key = PartitionKey {
                ledger_id: 5,
                chunk,
            };
            (key, [1u32].into_iter().collect())
        })
        .collect()
}

/// `sample` (the version 7 sample, or [`V7_DELTA`]) on a disk, gone
/// on under this build by a tick adding four partitions and changing no partial entry (a full
/// marker, the first this build writes for a chain holding a version 7 batch row, naming the
/// sample's batch record by its inner CRC), then, with `drop_all`, a tick dropping every
/// partition (a full marker, smaller than a delta removing five keys). Returns the disk, the
/// partial entries it holds and the deltas the ticks wrote.
fn continued(sample: &str, drop_all: bool) -> (MemStorage, Partial, u64) {
    let disk = MemStorage::new();
    support::samples::load_sample(&disk, sample);
    let want = opened(&disk).expect("the sample opens");
    let journal = open_journal(&disk);
    let mut deltas = tick_keeping_batch(&journal, &new_partitions(0, 4), false);
    if drop_all {
        deltas += tick_keeping_batch(&journal, &[], true);
    }
    drop(journal);
    assert_eq!(opened(&disk).expect("reopens"), want);
    (disk, want, deltas)
}

/// The sample segment's two batch records of partition 1:0 (frame offset, frame length).
fn same_partition_records(segment: &[u8]) -> [(usize, usize); 2] {
    let batch: Vec<(usize, usize)> = support::mutate::records_of(segment)
        .into_iter()
        .filter(|r| r.kind == RecordKind::Batch)
        .map(|r| (r.offset, r.len))
        .collect();
    // The sample writes partitions 1:0 and 2:0, then rewrites 1:0.
    let [a, _, a2] = batch[..] else {
        panic!("three batch records: {batch:?}");
    };
    assert_eq!(a.1, a2.1, "frames of the same length");
    assert_ne!(segment[a.0..a.0 + a.1], segment[a2.0..a2.0 + a2.1]);
    [a, a2]
}

/// Each damage of the version 7 segment of `disk`: what it is and the damaged bytes.
fn damages(disk: &MemStorage) -> Vec<(&'static str, Vec<u8>)> {
    let bytes = disk.live_bytes(&segment_name(1)).expect("segment 1");
    let [(a, len), (b, _)] = same_partition_records(&bytes);
    let moved = |(x, y): (usize, usize), copy: bool| {
        let mut out = bytes.clone();
        out[y..y + len].copy_from_slice(&bytes[x..x + len]);
        if !copy {
            out[x..x + len].copy_from_slice(&bytes[y..y + len]);
        }
        out
    };
    vec![
        ("the two records exchanged", moved((a, b), false)),
        ("the first over the second", moved((a, b), true)),
        ("the second over the first", moved((b, a), true)),
    ]
}

/// Applies each damage to a copy of the journal on `disk` and returns what the open and the
/// offline check made of it.
fn outcomes(
    disk: &MemStorage,
) -> Vec<(
    &'static str,
    ackstore::Result<Partial>,
    ackstore::Result<ackstore::internals::journal::JournalCheck>,
)> {
    damages(disk)
        .into_iter()
        .map(|(what, bytes)| {
            let image = disk.durable_image();
            image.set_bytes(&segment_name(1), bytes).expect("damage");
            let checked = ackstore::internals::journal::check(&image, Seal::default());
            (what, opened(&image), checked)
        })
        .collect()
}

/// The outcomes of [`outcomes`] on `disk`, gone on under this build from the sample (whose
/// partial entries are `want`): the open and the check refuse the exchange and the first record
/// over the second, and read the second over the first to `want`.
fn assert_refused(disk: &MemStorage, want: &Partial) {
    for (what, opened, checked) in outcomes(disk) {
        // The first record is named by the sample's version 7 marker alone, which a delta
        // superseded: a copy over it changes nothing that counts.
        if what == "the second over the first" {
            assert_eq!(&opened.expect(what), want, "{what}");
            checked.expect(what);
            continue;
        }
        assert!(
            matches!(opened, Err(ackstore::Error::Corrupted { .. })),
            "{what}: {opened:?}"
        );
        assert!(
            matches!(checked, Err(ackstore::Error::Corrupted { .. })),
            "{what}: {checked:?}"
        );
    }
}

#[test]
fn a_version_8_full_marker_refuses_batch_records_exchanged_in_the_version_7_segment() {
    let (disk, want, deltas) = continued(V7, true);
    assert_eq!(deltas, 0, "two full markers");
    assert_refused(&disk, &want);
}

/// The first flush of this build on the sample changes no partial entry and adds partitions
/// (a delta on any chain of this build): it writes a full marker, whose batch row names the
/// sample's live batch record by its inner CRC, so the two batch records exchanged in the
/// version 7 segment are refused by the open and the check from that one tick on. (A delta
/// there named no batch record, and the exchange opened with the older record's acks.)
#[test]
fn the_first_flush_of_this_build_binds_the_version_7_batch_record_by_its_inner_crc() {
    let (disk, want, deltas) = continued(V7, false);
    assert_refused(&disk, &want);
    assert_eq!(deltas, 0, "a full marker");
}

/// `tests/data/journal-v7-batch-delta`: the version 7 sample gone on by a version 8 build that
/// did not mark such chains (its choice of a delta blind to version 7 rows) with a tick adding
/// four partitions and changing no partial entry: a version 8 segment holding the partition
/// records and a delta that names no batch record. Its two batch records of one partition
/// exchanged in the version 7 segment open with the older record's acks, the version 7 rows
/// still binding the live one. This build's first flush on it (another such tick) writes a full
/// marker (the chain's mark survives the version 8 delta), and the same exchange is then refused
/// by the open and the check.
#[test]
fn a_version_8_delta_on_the_version_7_sample_leaves_its_batch_rows_bound_until_the_next_flush() {
    let disk = MemStorage::new();
    support::samples::load_sample(&disk, V7_DELTA);
    let want = opened(&disk).expect("the sample opens");
    let (what, exchanged, checked) = outcomes(&disk).swap_remove(0);
    assert_eq!(what, "the two records exchanged");
    // The first tick's record of partition 1:0: entry 3 with message 0 acknowledged (the
    // delta's added message 2), entry 9 with messages 1 and 2.
    let older: Partial = [(1, 3, 0), (1, 9, 1), (1, 9, 2)].into();
    assert_ne!(older, want);
    assert_eq!(
        exchanged.expect("opens"),
        older,
        "the version 7 rows bind by location"
    );
    checked.expect("the check finds nothing either");
    let (disk, want_after, deltas) = continued(V7_DELTA, false);
    assert_eq!(want_after, want);
    assert_refused(&disk, &want);
    assert_eq!(deltas, 0, "a full marker");
}

/// The sample gone on under this build with segments of one byte: ticks that keep its state
/// until a rollover has re-based the cursor into a version 8 segment (a full marker naming the
/// byte-for-byte copy of the sample's live batch record by its inner CRC) and removed the
/// version 7 segment. Returns the disk, the segment holding the copy and the copy's frame.
fn rolled_over() -> (MemStorage, u64, (usize, usize)) {
    let disk = MemStorage::new();
    support::samples::load_sample(&disk, "journal-v7-batch");
    let want = opened(&disk).expect("the sample opens");
    let tiny = JournalConfig { segment_bytes: 1 };
    let journal = Journal::open(Arc::new(disk.clone()), tiny, Seal::default()).expect("open");
    let (state, rows) = journal.committed(ID).expect("committed");
    let live: Vec<PartitionKey> = rows.into_iter().map(|(k, _)| k).collect();
    let kept = journal
        .committed_batch(ID)
        .into_iter()
        .map(|(key, part)| (key, part.crc))
        .collect();
    let stage = BatchStage {
        written: Vec::new(),
        kept,
    };
    for _ in 0..3 {
        support::samples::commit_sample_tick(&journal, state.clone(), &live, &stage);
    }
    let (_, part) = journal.committed_batch(ID)[0];
    drop(journal);
    assert!(
        disk.live_bytes(&segment_name(1)).is_none(),
        "segment 1 removed"
    );
    assert_eq!(opened(&disk).expect("reopens"), want);
    let offset = usize::try_from(part.loc.offset).expect("offset");
    let len = usize::try_from(part.frame_len).expect("length");
    (disk, part.loc.segment, (offset, len))
}

/// The sample's older batch record of the same partition and count (its first tick's, which
/// its delta rewrote) written over the rolled-over copy of the live one, in the version 8
/// segment: the open and the check refuse the journal.
#[test]
fn an_older_batch_record_over_its_rolled_over_copy_is_refused_by_open_and_check() {
    let (disk, segment, (at, len)) = rolled_over();
    let sample = std::fs::read(
        support::samples::data_dir()
            .join("journal-v7-batch")
            .join(segment_name(1)),
    )
    .expect("sample");
    let [(older, older_len), (live, _)] = same_partition_records(&sample);
    assert_eq!(older_len, len);
    let mut bytes = disk.live_bytes(&segment_name(segment)).expect("segment");
    assert_eq!(
        bytes[at..at + len],
        sample[live..live + len],
        "a byte-for-byte copy"
    );
    bytes[at..at + len].copy_from_slice(&sample[older..older + len]);
    disk.set_bytes(&segment_name(segment), bytes)
        .expect("damage");
    let checked = ackstore::internals::journal::check(&disk, Seal::default());
    let opened = opened(&disk);
    assert!(
        matches!(opened, Err(ackstore::Error::Corrupted { .. })),
        "{opened:?}"
    );
    assert!(
        matches!(checked, Err(ackstore::Error::Corrupted { .. })),
        "{checked:?}"
    );
}

/// Partition 1:0's partial entries as tick `i` of [`power_cut_workload`] writes them: entry 3
/// of 4 messages with message `i % 3` acknowledged, and entry 9 of 3 with message `i % 2`.
fn tick_partition(i: u32) -> BatchPartition {
    let entry = |entry_id, batch_size, acked: u32| PartialEntry {
        entry_id,
        batch_size,
        acked: [acked].into_iter().collect(),
    };
    BatchPartition {
        ledger_id: 1,
        chunk: 0,
        entries: vec![entry(3, 4, i % 3), entry(9, 3, i % 2)],
    }
}

/// The acknowledged messages of `p`.
fn messages(p: &BatchPartition) -> Partial {
    p.entries
        .iter()
        .flat_map(|e| e.acked.iter().map(|i| (p.ledger_id, e.entry_id, i)))
        .collect()
}

/// The sample on `disk` gone on under this build with segments of one byte (every tick rolls
/// over, re-basing the sample's version 7 chain into version 8 segments): six ticks, the even
/// ones writing a batch record of partition 1:0 ([`tick_partition`]), the odd ones keeping the
/// newest. Returns how many ticks returned `Ok`, stopping at the first error, and the
/// rollovers.
fn power_cut_workload(disk: &MemStorage) -> (usize, u64) {
    let tiny = JournalConfig { segment_bytes: 1 };
    let Ok(journal) = Journal::open(Arc::new(disk.clone()), tiny, Seal::default()) else {
        return (0, 0);
    };
    let Some((state, rows)) = journal.committed(ID) else {
        return (0, 0);
    };
    let live: Vec<PartitionKey> = rows.into_iter().map(|(k, _)| k).collect();
    let name = (ID, name_tag(TOPIC, NAME));
    let mut kept = Vec::new();
    for i in 0..6u32 {
        let stage = if i % 2 == 0 {
            let p = tick_partition(i);
            let payload = encode_batch_entry(&p).expect("encodes");
            kept = vec![(
                PartitionKey {
                    ledger_id: 1,
                    chunk: 0,
                },
                batch_row_crc(&payload),
            )];
            BatchStage {
                written: vec![(kept[0].0, payload, 2)],
                kept: Vec::new(),
            }
        } else {
            BatchStage {
                written: Vec::new(),
                kept: kept.clone(),
            }
        };
        let mut tick = journal.begin_tick();
        let done = tick
            .stage_with_batch(name, state.clone(), (&[], &live), &stage)
            .and_then(|_| tick.commit());
        if done.is_err() {
            return (i as usize, journal.stats().rollovers);
        }
    }
    (6, journal.stats().rollovers)
}

/// What the journal holds after `n` ticks of [`power_cut_workload`] returned `Ok`.
fn after_ticks(sample: &Partial, n: usize) -> Partial {
    match n {
        0 => sample.clone(),
        n => messages(&tick_partition(u32::try_from((n - 1) & !1).expect("small"))),
    }
}

/// A power cut after every storage operation of [`power_cut_workload`] on the version 7 sample
/// (ticks appending version 8 records, rollovers copying the sample's batch record and
/// re-basing its chain, segment creations and removals), on the durable image and on images
/// keeping part of the unsynced tail: the open and the offline check agree, and the open reads
/// the state of the last tick that returned `Ok` or of the one in flight, nothing else.
#[test]
fn a_power_cut_anywhere_as_this_build_goes_on_with_the_version_7_sample_keeps_a_committed_state() {
    let sample = {
        let disk = MemStorage::new();
        support::samples::load_sample(&disk, "journal-v7-batch");
        opened(&disk).expect("the sample opens")
    };
    let clean = cut_everywhere_after(
        Points::EVERY,
        |disk| support::samples::load_sample(disk, "journal-v7-batch"),
        |disk, ()| power_cut_workload(disk),
        |disk, Cut { n, .. }, (done, _)| {
            let allowed = [after_ticks(&sample, done), after_ticks(&sample, done + 1)];
            let tail = unsynced_tail(disk);
            let images = [disk.durable_image(), torn_image(disk, |u| u.min(tail / 2))];
            for image in images {
                let checked = ackstore::internals::journal::check(&image, Seal::default());
                let got = opened(&image);
                assert_eq!(
                    got.is_ok(),
                    checked.is_ok(),
                    "cut at {n}: {got:?} {checked:?}"
                );
                let got = got.unwrap_or_else(|e| panic!("cut at {n}: {e}"));
                assert!(
                    allowed.contains(&got),
                    "cut at {n} after {done} ticks: {got:?}"
                );
            }
        },
    );
    assert_eq!(clean.result.0, 6);
    assert!(clean.result.1 >= 3, "rollovers: {}", clean.result.1);
    eprintln!("{} cut points", clean.total);
}

/// The deltas of three ticks changing no partial entry on the journal of `sample`: one adding
/// four partitions, one adding a fifth, and, after a reopen, one adding a sixth.
fn deltas_of_three_ticks(sample: &str) -> [u64; 3] {
    let disk = MemStorage::new();
    support::samples::load_sample(&disk, sample);
    let journal = open_journal(&disk);
    let first = tick_keeping_batch(&journal, &new_partitions(0, 4), false);
    let second = tick_keeping_batch(&journal, &new_partitions(4, 1), false);
    drop(journal);
    let journal = open_journal(&disk);
    let third = tick_keeping_batch(&journal, &new_partitions(5, 1), false);
    assert_eq!(journal.stats().rebases, 0, "{sample}: no rollover");
    [first, second, third]
}

/// A journal this build wrote (`tests/data/journal-v8-batch`: the version 7 sample's journal
/// with version 8 batch rows) goes on with deltas from its first flush, a reopen's included;
/// the version 7 sample's first flush is a full marker, and every later one, after a reopen
/// too, a delta on it.
#[test]
fn a_journal_of_this_build_flushes_deltas_and_the_version_7_sample_after_one_full_marker() {
    assert_eq!(deltas_of_three_ticks("journal-v8-batch"), [1, 1, 1]);
    assert_eq!(deltas_of_three_ticks("journal-v7-batch"), [0, 1, 1]);
}

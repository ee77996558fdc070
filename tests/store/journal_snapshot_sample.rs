//! The snapshot samples: a cursor's multi-entry state (a partition and a full marker), then two
//! snapshot records of the single-entry form, the second with partial entries. The version 6
//! sample (`tests/data/journal-v6-snapshot`, its partition record a wrapped cursor-ledger
//! entry), the version 7 one (`tests/data/journal-v7-snapshot`, the partition under the frame's
//! one CRC) and the version 8 one this build writes byte for byte
//! (`tests/data/journal-v8-snapshot`, the same records under a version 8 header) all read to
//! the second snapshot's exact state, with the chain kept as its fallback; a bit flipped
//! anywhere below the synced length refuses the open or leaves that state, never another.

use std::sync::Arc;

use ackstore::internals::ackset::PartitionKey;
use ackstore::internals::format::cursor::{
    BatchPartition, PartialEntry, PersistedState, SnapshotWriter,
};
use ackstore::internals::format::journal::{SEGMENT_HEADER_V3_LEN, SEGMENT_VERSION, name_tag};
use ackstore::internals::journal::{Journal, JournalConfig, Seal, SnapshotCounts, segment_name};
use ackstore::{MemStorage, Position};
use roaring::RoaringBitmap;

use crate::support;

use support::samples::{
    JOURNAL_SAMPLE_CURSOR as NAME, JOURNAL_SAMPLE_ID as ID, JOURNAL_SAMPLE_TOPIC as TOPIC,
};
const SAMPLE_V6: &str = "journal-v6-snapshot";
const SAMPLE_V7: &str = "journal-v7-snapshot";
const SAMPLE: &str = "journal-v8-snapshot";

/// What a cursor's snapshot holds: its state, its ranges, its partial entries.
type Whole = (PersistedState, Vec<(u64, u64, u64)>, Vec<BatchPartition>);

/// Stages the snapshot `whole` of cursor [`ID`] into a tick of `journal` and commits it.
fn commit_snapshot(journal: &Journal, (state, ranges, batch): &Whole) {
    let mut w = SnapshotWriter::new(state, usize::MAX, u64::MAX).expect("writer");
    for &(ledger, first, last) in ranges {
        assert!(w.push(ledger, first, last).expect("push"));
    }
    let entry = w.finish_with_batch(batch).expect("encode");
    let counts = SnapshotCounts {
        ranges: ranges.len() as u64,
        batch_partitions: batch.len() as u64,
        partial_entries: batch.iter().map(|p| p.entries.len() as u64).sum(),
    };
    let mut tick = journal.begin_tick();
    tick.stage_snapshot((ID, name_tag(TOPIC, NAME)), state.clone(), &entry, counts)
        .expect("stage");
    tick.commit().expect("tick");
}

/// The journal of the samples; returns the state it ends with.
fn sample_journal(disk: &MemStorage) -> Whole {
    let (journal, mut set) = support::journal::journal_and_acks(disk, ID);
    set.add(Position::new(1, 7)).expect("ack");
    let live: Vec<PartitionKey> = set.partitions().into_iter().map(|(k, _)| k).collect();
    let bitmaps: Vec<_> = live
        .iter()
        .map(|k| (*k, set.bitmap(*k).expect("load").expect("live")))
        .collect();
    let mut tick = journal.begin_tick();
    tick.stage(
        (ID, name_tag(TOPIC, NAME)),
        PersistedState::default(),
        &bitmaps,
        &live,
    )
    .expect("stage");
    tick.commit().expect("tick");
    let first: Whole = (
        PersistedState {
            mark_delete: Position::new(1, 4),
            epoch: 1,
            properties: [("offset".to_string(), 7)].into(),
        },
        vec![(1, 6, 9), (1, 12, 12), (3, 0, 4)],
        Vec::new(),
    );
    commit_snapshot(&journal, &first);
    let partial = BatchPartition {
        ledger_id: 3,
        chunk: 0,
        entries: vec![PartialEntry {
            entry_id: 6,
            batch_size: 5,
            acked: [0, 3].into_iter().collect::<RoaringBitmap>(),
        }],
    };
    let second: Whole = (
        PersistedState {
            mark_delete: Position::new(1, 9),
            epoch: 2,
            properties: [("offset".to_string(), 8)].into(),
        },
        vec![(1, 12, 13), (3, 0, 4)],
        vec![partial],
    );
    commit_snapshot(&journal, &second);
    second
}

/// The snapshot that is cursor [`ID`]'s state in `journal`.
fn recovered(journal: &Journal) -> Option<Whole> {
    journal
        .read_snapshot(ID, |s| {
            Ok((s.state.clone(), s.ranges().collect(), s.batch.clone()))
        })
        .expect("read")
}

/// Opens the sample copied to `dir` and checks it holds `want`, with the chain of one
/// partition kept as the fallback.
fn check_sample(dir: &std::path::Path, want: &Whole) {
    let storage = ackstore::FileStorage::open(dir, true).expect("storage");
    let journal =
        Journal::open(Arc::new(storage), JournalConfig::default(), Seal::default()).expect("open");
    assert_eq!(recovered(&journal), Some(want.clone()));
    assert_eq!(journal.state(ID), Some(want.0.clone()));
    assert_eq!(
        journal.committed_name(ID).map(|(n, _)| n),
        Some(name_tag(TOPIC, NAME))
    );
    // The chain is kept as the fallback.
    let (chain, rows) = journal.committed(ID).expect("the chain");
    assert_eq!((chain, rows.len()), (PersistedState::default(), 1));
}

#[test]
fn the_version_6_sample_reads_to_its_newest_snapshot() {
    let want = sample_journal(&MemStorage::new());
    // A sample of an earlier version: kept as it was committed, never written again.
    let dir = support::samples::sample_dir(SAMPLE_V6);
    let sample = std::fs::read(dir.path().join(segment_name(1))).expect("sample");
    assert_eq!(&sample[8..10], &6u16.to_le_bytes(), "a version 6 segment");
    check_sample(dir.path(), &want);
}

/// The version 7 sample holds the records this build writes, byte for byte, under a version 7
/// header: it holds no batch row, the one thing version 8 changes.
#[test]
fn the_version_7_sample_reads_to_its_newest_snapshot() {
    let disk = MemStorage::new();
    let want = sample_journal(&disk);
    let written = disk.live_bytes(&segment_name(1)).expect("segment");
    // A sample of an earlier version: kept as it was committed, never written again.
    let dir = support::samples::sample_dir(SAMPLE_V7);
    let sample = std::fs::read(dir.path().join(segment_name(1))).expect("sample");
    assert_eq!(&sample[8..10], &7u16.to_le_bytes(), "a version 7 segment");
    assert_eq!(
        sample[SEGMENT_HEADER_V3_LEN..],
        written[SEGMENT_HEADER_V3_LEN..],
        "the same records"
    );
    check_sample(dir.path(), &want);
}

#[test]
fn the_version_8_sample_reads_to_its_newest_snapshot_and_this_build_writes_it_byte_for_byte() {
    let disk = MemStorage::new();
    let want = sample_journal(&disk);
    let written = disk.live_bytes(&segment_name(1)).expect("segment");
    let (dir, sample) = support::samples::written_sample(SAMPLE, &segment_name(1), &written);
    assert_eq!(&sample[8..10], &SEGMENT_VERSION.to_le_bytes());
    assert_eq!(
        written, sample,
        "this build writes the sample byte for byte"
    );
    check_sample(dir.path(), &want);
}

#[test]
fn a_flipped_bit_in_the_synced_sample_refuses_the_open_or_leaves_its_state() {
    let disk = MemStorage::new();
    let want = sample_journal(&disk);
    let bytes = disk.live_bytes(&segment_name(1)).expect("segment");
    for at in SEGMENT_HEADER_V3_LEN..bytes.len() {
        for bit in [0, 5] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 1 << bit;
            match support::journal::open_segment_bytes(&damaged) {
                Err(ackstore::Error::Corrupted { .. }) => {}
                Err(e) => panic!("byte {at} bit {bit}: {e}"),
                Ok(j) => assert_eq!(recovered(&j), Some(want.clone()), "byte {at} bit {bit}"),
            }
        }
    }
}

//! A version 5 journal (the committed sample) opened by this build and written to in the
//! single-entry form: the snapshot goes into a new segment of this build's version (7), the
//! version 5 segment is never appended to, and a reopen reads both (the snapshot as the
//! cursor's state, the version 5 chain kept as its fallback).

use crate::support;

use std::sync::Arc;

use ackstore::internals::format::cursor::{PersistedState, SnapshotWriter};
use ackstore::internals::format::journal::name_tag;
use ackstore::internals::journal::{Journal, JournalConfig, Seal, SnapshotCounts, segment_name};

/// The sample's cursor (see `batch_acks.rs`, which writes it).
use support::samples::JOURNAL_SAMPLE_ID as ID;

#[test]
fn a_version_5_journal_goes_on_with_a_snapshot_in_a_segment_of_this_builds_version() {
    let dir = support::samples::sample_dir("journal-v5-batch");
    let v5 = std::fs::read(dir.path().join(segment_name(1))).expect("sample");
    assert_eq!(&v5[8..10], &5u16.to_le_bytes(), "a version 5 segment");
    let storage: Arc<dyn ackstore::Storage> =
        Arc::new(ackstore::FileStorage::open(dir.path(), false).expect("storage"));
    let open =
        || Journal::open(storage.clone(), JournalConfig::default(), Seal::default()).expect("open");
    let journal = open();
    let (chain, rows) = journal.committed(ID).expect("the version 5 chain");
    assert!(!rows.is_empty());
    let state = PersistedState {
        epoch: chain.epoch + 1,
        ..chain.clone()
    };
    let mut snapshot = SnapshotWriter::new(&state, 1 << 20, 100).expect("writer");
    assert!(snapshot.push(1_000, 3, 5).expect("push"));
    let mut tick = journal.begin_tick();
    tick.stage_snapshot(
        (ID, name_tag("t", "sub")),
        state.clone(),
        &snapshot.finish(),
        SnapshotCounts {
            ranges: 1,
            batch_partitions: 0,
            partial_entries: 0,
        },
    )
    .expect("stage");
    tick.commit().expect("tick");
    drop(journal);
    let segment2 = std::fs::read(dir.path().join(segment_name(2))).expect("segment 2");
    assert_eq!(
        &segment2[8..10],
        &ackstore::internals::format::journal::SEGMENT_VERSION.to_le_bytes(),
        "a segment of this build's version"
    );
    assert_eq!(
        std::fs::read(dir.path().join(segment_name(1))).expect("segment 1"),
        v5,
        "a version 5 segment is never appended to"
    );
    let reopened = open();
    assert_eq!(reopened.state(ID), Some(state), "the snapshot is the state");
    let ranges = reopened
        .read_snapshot(ID, |s| Ok(s.ranges().collect::<Vec<_>>()))
        .expect("read")
        .expect("a snapshot");
    assert_eq!(ranges, vec![(1_000, 3, 5)]);
    let (fallback, _) = reopened.committed(ID).expect("the chain, its fallback");
    assert_eq!(fallback, chain);
}

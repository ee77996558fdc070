//! The store's cursor journal: many cursors on several topics committed by group-commit ticks,
//! checked per cursor against the model after a power cut at every storage operation and at
//! every byte of the unsynced tail; segment rollover cut at every step; damage and sealing.

use crate::support;

use std::sync::Arc;

use ackstore::Error;
use ackstore::internals::journal::{
    CursorFlush, Journal, JournalConfig, Seal, parse_segment_name, segment_name,
};
use ackstore::{MemStorage, Storage};
use support::crash::{cut_everywhere, torn_image, unsynced_tail};
use support::journal::{CURSORS, Fleet, check, run};

/// Small segments, so the workloads below start segments and roll over several times.
fn small_segments() -> JournalConfig {
    JournalConfig {
        segment_bytes: 4096,
    }
}

/// A budget of about three partitions per cursor at the densities below, so evictions append
/// partitions between ticks.
const BUDGET: usize = 1500;

fn segments(disk: &MemStorage) -> Vec<u64> {
    disk.list()
        .unwrap_or_default()
        .iter()
        .filter_map(|n| parse_segment_name(n))
        .collect()
}

#[test]
fn a_tick_commits_every_dirty_cursor_with_one_sync() {
    let disk = MemStorage::new();
    let config = JournalConfig::default();
    let mut outcome = run(&disk, config, usize::MAX, 1, 600, 100);
    assert_eq!(outcome.ticks, 6);
    let mut fleet = Fleet::open(&disk, config, usize::MAX).expect("open");
    for (id, (set, _)) in &mut fleet.cursors {
        let pos = ackstore::Position::new(9, id.cursor);
        set.add(pos).expect("ack");
        outcome.truth.entry(*id).or_default().insert(pos);
    }
    let syncs = fleet.tick().expect("tick");
    assert_eq!(syncs, 1, "one fdatasync for {CURSORS} cursors");
    outcome.durable = outcome.truth.clone();
    check(&disk.durable_image(), config, &outcome, "after the tick");
    let stats = fleet.journal.stats();
    assert_eq!((stats.ticks, stats.syncs), (1, 1));
}

#[test]
fn a_power_cut_at_every_step_of_ticks_over_many_cursors_loses_no_committed_ack_and_invents_none() {
    let config = small_segments();
    let clean = cut_everywhere(
        |disk| run(disk, config, BUDGET, 7, 240, 40),
        |disk, cut, outcome| {
            check(&disk.durable_image(), config, &outcome, &format!("{cut:?}"));
        },
    );
    assert_eq!(clean.result.ticks, 6);
}

#[test]
fn every_byte_of_the_unsynced_tail_recovers_to_the_model() {
    let config = small_segments();
    // Cut points where the unsynced tail is longest: just before a tick's sync.
    let mut tails_checked = 0;
    cut_everywhere(
        |disk| run(disk, config, BUDGET, 11, 160, 40),
        |disk, cut, outcome| {
            let tail = unsynced_tail(disk);
            if tail == 0 {
                return;
            }
            // Every byte on cut points with a long tail (a tick written, not yet synced); a
            // spread of bytes on the others.
            let step = if tail > 200 { 1 } else { (tail / 7).max(1) };
            for keep in (0..=tail).step_by(step) {
                let image = torn_image(disk, |_| keep);
                check(
                    &image,
                    config,
                    &outcome,
                    &format!("{cut:?}, {keep} of {tail} tail bytes"),
                );
                tails_checked += 1;
            }
        },
    );
    assert!(
        tails_checked > 1000,
        "only {tails_checked} torn images checked"
    );
}

#[test]
fn segment_rollover_cut_at_every_step_keeps_every_cursor() {
    let config = JournalConfig {
        segment_bytes: 2048,
    };
    // Prepare: enough ticks that the journal holds several segments; then one more workload
    // whose ticks roll over (copy live records, sync, delete the oldest) under the cut.
    let clean = cut_everywhere(
        |disk| {
            let outcome = run(disk, config, BUDGET, 3, 400, 25);
            (outcome, segments(disk))
        },
        |disk, cut, (outcome, _)| {
            check(&disk.durable_image(), config, &outcome, &format!("{cut:?}"));
        },
    );
    let journal = Journal::open(
        Arc::new({
            let d = MemStorage::new();
            run(&d, config, BUDGET, 3, 400, 25);
            d
        }),
        config,
        Seal::default(),
    )
    .expect("open");
    assert!(clean.result.0.ticks == 16);
    let stats = journal.stats();
    assert!(
        stats.segments <= 4,
        "rollover bounds the segments: {stats:?}"
    );
    assert!(
        stats.segment_bytes <= 2 * stats.live_bytes + 3 * config.segment_bytes,
        "{stats:?}"
    );
    assert!(
        !clean.result.1.contains(&1),
        "the first segment was rolled over and deleted"
    );
}

#[test]
fn a_damaged_record_in_a_sealed_segment_is_corruption_not_a_panic() {
    let config = JournalConfig {
        segment_bytes: 2048,
    };
    let disk = MemStorage::new();
    run(&disk, config, BUDGET, 5, 200, 20);
    let segs = segments(&disk);
    assert!(segs.len() >= 2);
    let name = segment_name(segs[0]);
    let mut bytes = disk.live_bytes(&name).expect("segment");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    disk.set_bytes(&name, bytes).expect("damage");
    match Journal::open(Arc::new(disk.clone()), config, Seal::default()) {
        Err(Error::Corrupted { .. }) => {}
        other => panic!("expected corruption, got {other:?}"),
    }
}

#[test]
fn bytes_past_the_seal_are_ignored_and_never_appended_to() {
    let config = JournalConfig::default();
    let disk = MemStorage::new();
    let before = run(&disk, config, usize::MAX, 9, 120, 60);
    let seal = Journal::open(Arc::new(disk.clone()), config, Seal::default())
        .expect("open")
        .tail();
    // A former owner appends a tick after the new owner took the seal.
    let mut former = Fleet::open(&disk, config, usize::MAX).expect("former owner");
    let id = support::journal::cursor_ids()[0];
    former.ack(id, ackstore::Position::new(7, 7)).expect("ack");
    former.tick().expect("tick");
    let sealed_bytes = disk
        .live_bytes(&segment_name(seal.segment))
        .expect("segment");

    let journal = Journal::open(Arc::new(disk.clone()), config, seal).expect("new owner");
    let (state, rows) = journal.committed(id).expect("committed");
    assert!(
        rows.iter().all(|(k, _)| k.ledger_id != 7),
        "a record past the seal was read"
    );
    let other = support::journal::cursor_ids()[1];
    journal
        .commit(&[CursorFlush {
            name: 0,
            cursor: other,
            state: state.clone(),
            written: Vec::new(),
            live: journal
                .committed(other)
                .map(|(_, r)| r.into_iter().map(|(k, _)| k).collect())
                .unwrap_or_default(),
        }])
        .expect("the new owner commits");
    assert_eq!(journal.tail().segment, seal.segment + 1, "a new segment");
    assert_eq!(
        disk.live_bytes(&segment_name(seal.segment))
            .expect("segment"),
        sealed_bytes,
        "the sealed segment is never appended to"
    );
    drop(journal);
    let reopened = Journal::open(Arc::new(disk.clone()), config, seal).expect("reopen");
    let (_, rows) = reopened.committed(id).expect("committed");
    assert!(rows.iter().all(|(k, _)| k.ledger_id != 7));
    let _ = before;
}

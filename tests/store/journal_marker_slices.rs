//! A tick's markers are appended in slices of about 1 MiB (`tick.rs`, `MARKER_SLICE`), not in
//! one buffer of the whole tick. A tick of 60,000 cursors writes several slices and reads back
//! whole; a write that fails on the first slice is cut back and the next tick writes again (as
//! a tick's one write always was); a write that fails on a later slice cuts the segment back
//! to where the tick began, so none of its slices stays and the next tick writes them all
//! again; a power cut at every step of such a tick, whatever part of its unsynced bytes
//! survives, leaves every cursor at a state it had: the one its last successful tick made
//! durable, or the tick's, never another.

use std::sync::Arc;

use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::journal::index::CursorId;
use ackstore::internals::journal::{CursorFlush, Journal, JournalConfig, Seal};
use ackstore::{MemStorage, Position, Storage};

/// Cursors of every tick: their markers (deltas after the first tick) fill a few slices.
const CURSORS: u64 = 60_000;

fn id(i: u64) -> CursorId {
    CursorId {
        topic: 1 + i / 1_000,
        cursor: i % 1_000,
    }
}

fn open(disk: &MemStorage) -> Arc<Journal> {
    Arc::new(
        Journal::open(
            Arc::new(disk.clone()),
            JournalConfig::default(),
            Seal::default(),
        )
        .expect("open"),
    )
}

/// Every cursor's flush to mark-delete `mark` (no acks above it: markers alone).
fn flushes(mark: u64) -> Vec<CursorFlush> {
    (0..CURSORS)
        .map(|i| CursorFlush {
            cursor: id(i),
            name: 0,
            state: PersistedState {
                mark_delete: Position::new(1, mark),
                epoch: 0,
                properties: Default::default(),
            },
            written: Vec::new(),
            live: Vec::new(),
        })
        .collect()
}

/// Each cursor's mark-delete entry in `journal`.
fn marks(journal: &Journal) -> Vec<u64> {
    (0..CURSORS)
        .map(|i| journal.state(id(i)).expect("a state").mark_delete.entry_id)
        .collect()
}

#[test]
fn a_tick_of_many_cursors_appends_its_markers_in_slices_and_reads_back_whole() {
    let disk = MemStorage::new();
    let journal = open(&disk);
    journal.commit(&flushes(1)).unwrap();
    let before = disk.growing_writes();
    let stats = journal.commit(&flushes(2)).unwrap();
    let writes = disk.growing_writes() - before;
    // Three slices at least, each one write of at least 1 MiB but the last.
    assert!(stats.bytes > 3 << 20, "{} bytes", stats.bytes);
    assert!(
        (3..=stats.bytes.div_ceil(1 << 20)).contains(&writes),
        "{writes} writes"
    );
    drop(journal);
    assert!(marks(&open(&disk)).iter().all(|&m| m == 2));
}

#[test]
fn a_failed_first_slice_is_cut_back_and_the_next_tick_writes_again() {
    let disk = MemStorage::new();
    let journal = open(&disk);
    journal.commit(&flushes(1)).unwrap();
    disk.enospc_after(Some(0));
    assert!(journal.commit(&flushes(2)).is_err());
    disk.enospc_after(None);
    assert!(!journal.is_latched());
    journal.commit(&flushes(3)).unwrap();
    drop(journal);
    assert!(marks(&open(&disk)).iter().all(|&m| m == 3));
}

#[test]
fn a_failed_later_slice_cuts_the_tick_back_and_the_next_tick_writes_again() {
    for landed in [1, 2] {
        let disk = MemStorage::new();
        let journal = open(&disk);
        journal.commit(&flushes(1)).unwrap();
        let (segment, length) = newest_segment(&disk);
        disk.enospc_after(Some(landed));
        assert!(journal.commit(&flushes(2)).is_err(), "{landed}");
        disk.enospc_after(None);
        // None of the failed tick's slices stays: the segment is as the last tick left it.
        assert_eq!(newest_segment(&disk), (segment.clone(), length), "{landed}");
        assert!(!journal.is_latched(), "{landed}");
        // A reopen now finds every cursor at its durable tick's state.
        assert!(marks(&open(&disk)).iter().all(|&m| m == 1), "{landed}");
        // The disk has room again: the next tick writes every marker, and it is kept.
        journal.commit(&flushes(3)).unwrap();
        drop(journal);
        assert!(marks(&open(&disk)).iter().all(|&m| m == 3), "{landed}");
    }
}

/// The name and live length of the newest journal segment on `disk`.
fn newest_segment(disk: &MemStorage) -> (String, usize) {
    let name = disk
        .list()
        .expect("list")
        .into_iter()
        .filter(|f| f.ends_with(".seg"))
        .max()
        .expect("a segment");
    let len = disk.live_bytes(&name).expect("bytes").len();
    (name, len)
}

/// Each cursor's mark-delete entry in the journal a power cut left on `image`.
fn marks_after_cut(image: &MemStorage, what: &str) -> Vec<u64> {
    let journal = Journal::open(
        Arc::new(image.clone()),
        JournalConfig::default(),
        Seal::default(),
    )
    .unwrap_or_else(|e| panic!("{what}: the open after the cut: {e}"));
    marks(&journal)
}

#[test]
fn a_power_cut_at_every_step_of_a_tick_of_several_slices_keeps_each_cursor_at_a_state_it_had() {
    let (mut finished, mut mixed) = (false, false);
    for n in 0.. {
        let disk = MemStorage::new();
        let journal = open(&disk);
        journal.commit(&flushes(1)).unwrap();
        disk.fail_after(Some(n));
        let done = journal.commit(&flushes(2)).is_ok();
        drop(journal);
        // What reached the disk: only what was synced, every byte written, or the synced bytes
        // and half of what was written after them.
        let half = |_: &str, durable: &[u8], live: &[u8]| {
            let keep = durable.len().max(
                live.len()
                    .min(durable.len() + (live.len().saturating_sub(durable.len())) / 2),
            );
            live[..keep.min(live.len())].to_vec()
        };
        let images = [
            ("synced", disk.durable_image()),
            ("written", disk.crash_image(|_, _, live| live.to_vec())),
            ("half", disk.crash_image(half)),
        ];
        for (what, image) in images {
            let what = format!("cut after {n} steps, {what}");
            let marks = marks_after_cut(&image, &what);
            // Flushed means kept; nothing past what the cursor had.
            if done {
                assert!(marks.iter().all(|&m| m == 2), "{what}");
            } else {
                assert!(marks.iter().all(|&m| m == 1 || m == 2), "{what}");
                // A cut between two slices leaves the first cursors moved and the rest not.
                mixed |= marks.contains(&1) && marks.contains(&2);
            }
        }
        if done {
            finished = true;
            break;
        }
        assert!(n < 100, "the tick never completed");
    }
    assert!(finished);
    assert!(mixed, "no cut fell between two slices");
}

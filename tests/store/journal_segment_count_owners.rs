//! The rollover's count trigger against its edges: a single owner that never restarts, whose
//! live bytes change a lot between ticks (cursors deleted, acks jumping the mark-delete past
//! everything), never leaves a short segment below the newest, so the trigger never fires for
//! it and the segments stay within both bounds; a new owner claiming the store at every step of
//! a former owner's flush that rolls over by count loses no `Ok` flush and invents no ack; a
//! storage failure (a power cut, a full disk) at every step of a count-triggered rollover,
//! followed by more use of the store, loses no `Ok` flush, invents no ack, and a reopened owner
//! rolls the count back within the bound; restarts whose records are larger than a segment, some deleting a cursor
//! (the bound drops with the live bytes), keep the segments within the bound and the acks.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::internals::journal::{parse_segment_name, segment_bound};
use ackstore::{CursorOptions, MemStorage, Position, Storage};
use support::takeover;
use support::workload::Rng;

use super::journal_segment_count::{
    Host, LARGE_SEGMENTS, Owner, assert_acks, fill, restarted_to_the_bound, segment_files,
};

/// Acks per cursor, the model of what the application did.
type Acks = BTreeMap<String, BTreeSet<Position>>;

/// The segment files on `disk`, oldest first, with their lengths.
fn segment_lengths(disk: &MemStorage) -> Vec<(u64, u64)> {
    let mut segments: Vec<(u64, u64)> = disk
        .list()
        .expect("list")
        .iter()
        .filter_map(|n| {
            let seq = parse_segment_name(n)?;
            Some((seq, disk.live_bytes(n).expect("segment bytes").len() as u64))
        })
        .collect();
    segments.sort_unstable();
    segments
}

/// One owner of `host` with segments of `segment_bytes` runs 300 ticks without a restart:
/// acks on four cursors, cursors deleted and made again, cumulative acks that jump the
/// mark-delete past every entry. After every tick each segment below the newest holds at least
/// `segment_bytes` (the premise of the count bound: with it, the segments within the byte bound
/// are within `segment_bound`, so the count trigger never fires and the owner rolls over no more
/// than the byte trigger makes it), the segments are within both bounds, and at the end the
/// acks match the model, before and after a reopen.
fn a_single_owner_keeps_every_segment_below_the_newest_full(host: Host, segment_bytes: u64) {
    const NAMES: [&str; 4] = ["a", "b", "c", "d"];
    let disk = MemStorage::new();
    let ps = fill(host, &disk, 200);
    let owner = Owner::open(host, Arc::new(disk.clone()), segment_bytes).expect("open");
    let mut rng = Rng::new(segment_bytes);
    let mut truth = Acks::new();
    let mut cursors = BTreeMap::new();
    let mut deleted = 0;
    let mut ticks = 0;
    for tick in 0..300 {
        let name = NAMES[rng.index(NAMES.len())];
        if rng.chance(5) {
            // A deletion: the live bytes drop by the cursor's whole state.
            drop(cursors.remove(name));
            if truth.remove(name).is_some() {
                owner.topic.delete_cursor(name).expect("delete");
                deleted += 1;
            }
            continue;
        }
        let cursor = cursors.entry(name).or_insert_with(|| {
            owner
                .topic
                .open_cursor(name, CursorOptions::default())
                .expect("cursor")
        });
        let acked = truth.entry(name.to_owned()).or_default();
        if rng.chance(5) {
            // The mark-delete past everything: the state shrinks to a position.
            let last = ps[ps.len() - 1];
            cursor.ack_cumulative(last).expect("ack_cumulative");
            acked.extend(ps.iter().copied());
        } else {
            // Scattered acks: the state grows by partitions.
            for _ in 0..1 + rng.below(30) {
                let p = ps[rng.index(ps.len())];
                cursor.ack(p).expect("ack");
                acked.insert(p);
            }
        }
        cursor.flush().expect("flush");
        let stats = owner.stats();
        let segments = segment_lengths(&disk);
        assert_eq!(segments.len() as u64, stats.segments, "tick {tick}");
        if let Some((_, below)) = segments.split_last() {
            for (seq, len) in below {
                assert!(
                    *len >= segment_bytes,
                    "tick {tick}: segment {seq} of {len} bytes below the newest: {segments:?}"
                );
            }
        }
        // The bounds hold after a tick (a flush of acks already flushed runs none, and a
        // deletion's garbage waits for the next one).
        if stats.ticks > ticks {
            ticks = stats.ticks;
            assert!(
                stats.segments <= segment_bound(stats.live_bytes, segment_bytes),
                "tick {tick}: {stats:?}"
            );
            assert!(
                stats.segment_bytes <= 2 * stats.live_bytes + segment_bytes,
                "tick {tick}: {stats:?}"
            );
        }
    }
    assert!(ticks >= 100, "{ticks} ticks");
    assert!(deleted >= 5, "{deleted} deletions");
    assert!(owner.stats().rollovers >= 10, "{:?}", owner.stats());
    assert_acks(&owner, &ps, &truth);
    drop(cursors);
    owner.close().expect("close");
    let owner = Owner::open(host, Arc::new(disk.clone()), segment_bytes).expect("reopen");
    assert_acks(&owner, &ps, &truth);
    for name in NAMES.iter().filter(|n| !truth.contains_key(**n)) {
        assert!(acked_of(&owner, name, &ps).is_empty(), "{name} revived");
    }
}

#[test]
fn a_single_stores_segments_below_the_newest_are_full_so_the_count_trigger_stays_idle() {
    // Below the segment header, a tick's size and a few ticks' size.
    for segment_bytes in [16, 512, 4 << 10] {
        a_single_owner_keeps_every_segment_below_the_newest_full(Host::Store, segment_bytes);
    }
}

#[test]
fn a_single_topic_alones_segments_below_the_newest_are_full_so_the_count_trigger_stays_idle() {
    for segment_bytes in [16, 512, 4 << 10] {
        a_single_owner_keeps_every_segment_below_the_newest_full(Host::Alone, segment_bytes);
    }
}

/// Asserts that `owner`'s cursors hold every ack of `flushed` and none outside `truth`.
fn assert_kept_and_not_invented(
    owner: &Owner,
    ps: &[Position],
    (truth, flushed): (&Acks, &Acks),
    what: &str,
) {
    for (name, truth) in truth {
        let cursor = owner
            .topic
            .open_cursor(name, CursorOptions::default())
            .unwrap_or_else(|e| panic!("{what}: {name}: {e}"));
        for p in ps {
            let acked = cursor
                .is_acked(*p)
                .unwrap_or_else(|e| panic!("{what}: {name} at {p}: {e}"));
            assert!(!acked || truth.contains(p), "{what}: {name}: {p} invented");
            let kept = flushed.get(name).is_none_or(|f| !f.contains(p));
            assert!(acked || kept, "{what}: {name}: {p} lost");
        }
    }
}

/// Asserts that `verify` finds no damage on `disk`: a failed operation or a former owner's
/// refused writes are never damage, and the open that follows must agree.
fn assert_sound(disk: &MemStorage, what: &str) {
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let report =
        ackstore::check::verify(&storage).unwrap_or_else(|e| panic!("{what}: verify: {e}"));
    assert!(report.is_sound(), "{what}: {report}");
}

/// The acks of the cursor `name` of `owner` among `ps`.
fn acked_of(owner: &Owner, name: &str, ps: &[Position]) -> BTreeSet<Position> {
    let cursor = owner
        .topic
        .open_cursor(name, CursorOptions::default())
        .expect("cursor");
    ps.iter()
        .copied()
        .filter(|p| cursor.is_acked(*p).expect("is_acked"))
        .collect()
}

/// A former owner's flush whose tick leaves the segments over the count bound (so it rolls
/// over by count), with a new owner claiming the store (its lock broken) after every storage
/// operation of that flush in turn. The former owner's flush either returns `Ok`, and then the
/// new owner holds its acks, or fails; the new owner then acks and flushes (it must succeed)
/// and closes. The reopened cursors hold every ack of an `Ok` flush of either owner and none
/// the application did not make, and every segment the reopened journal lists is on the disk.
fn a_takeover_at_every_step_of_a_former_owners_count_rollover(host: Host) {
    let steps = {
        let disk = MemStorage::new();
        let (ps, _) = restarted_to_the_bound(host, &disk);
        let tapped = takeover::Disk::new(Arc::new(disk.clone()));
        let owner = Owner::open(host, tapped.storage.clone(), LARGE_SEGMENTS).expect("open");
        let before = tapped.hook.count();
        owner
            .ack_and_flush(&[("x", ps[30]), ("y", ps[31])])
            .expect("flush");
        assert!(owner.stats().rollovers >= 1, "{:?}", owner.stats());
        tapped.hook.count() - before
    };
    let mut former_ok = 0;
    for n in 1..=steps {
        let what = format!("takeover after step {n} of {steps}");
        let disk = MemStorage::new();
        let (ps, mut truth) = restarted_to_the_bound(host, &disk);
        let mut flushed = truth.clone();
        let tapped = takeover::Disk::new(Arc::new(disk.clone()));
        let former = Owner::open(host, tapped.storage.clone(), LARGE_SEGMENTS).expect("open");
        let new = {
            let disk = disk.clone();
            tapped.arm_takeover(n, move || {
                disk.break_lock();
                Owner::open(host, Arc::new(disk.clone()), LARGE_SEGMENTS)
            })
        };
        let acks = [("x", ps[30]), ("y", ps[31])];
        for (name, p) in acks {
            truth.entry(name.to_owned()).or_default().insert(p);
        }
        if former.ack_and_flush(&acks).is_ok() {
            former_ok += 1;
            flushed = truth.clone();
        }
        let new = new
            .lock()
            .expect("slot")
            .take()
            .expect("the takeover ran")
            .unwrap_or_else(|e| panic!("{what}: the new owner's open: {e}"));
        // The former owner goes on: its flushes must not touch what the new owner reads.
        let _ = former.ack_and_flush(&[("x", ps[33])]);
        truth.entry("x".to_owned()).or_default().insert(ps[33]);
        let acks = [("x", ps[35]), ("y", ps[2])];
        for (name, p) in acks {
            truth.entry(name.to_owned()).or_default().insert(p);
        }
        new.ack_and_flush(&acks)
            .unwrap_or_else(|e| panic!("{what}: the new owner's flush: {e}"));
        for name in ["x", "y"] {
            let held = acked_of(&new, name, &ps);
            flushed.entry(name.to_owned()).or_default().extend(held);
        }
        let _ = former.ack_and_flush(&[("y", ps[36])]);
        truth.entry("y".to_owned()).or_default().insert(ps[36]);
        std::mem::forget(former);
        new.close()
            .unwrap_or_else(|e| panic!("{what}: the new owner's close: {e}"));
        disk.break_lock();
        assert_sound(&disk, &what);
        let owner = Owner::open(host, Arc::new(disk.clone()), LARGE_SEGMENTS)
            .unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
        assert_kept_and_not_invented(&owner, &ps, (&truth, &flushed), &what);
        assert_eq!(segment_files(&disk), owner.stats().segments, "{what}");
    }
    assert!(steps > 10, "{steps} steps");
    assert!(former_ok >= 1, "no former owner's flush returned Ok");
}

#[test]
fn a_new_owner_claiming_a_store_during_a_former_owners_count_rollover_loses_no_ok_flush() {
    a_takeover_at_every_step_of_a_former_owners_count_rollover(Host::Store);
}

#[test]
fn a_new_owner_claiming_a_topic_alone_during_a_former_owners_count_rollover_loses_no_ok_flush() {
    a_takeover_at_every_step_of_a_former_owners_count_rollover(Host::Alone);
}

/// How the storage fails from a chosen operation of a flush on.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Every operation from the chosen mutation on fails, as a power cut.
    PowerOff,
    /// Every write that grows a file from the chosen one on fails with `ENOSPC`, writing
    /// nothing; syncs, removals and reads go on working, as on a full file system.
    FullDisk,
}

impl Fault {
    /// The operations of this kind `disk` made so far.
    fn count(self, disk: &MemStorage) -> u64 {
        match self {
            Fault::PowerOff => disk.mutations(),
            Fault::FullDisk => disk.growing_writes(),
        }
    }

    /// Fails the operations of this kind of `disk` after `n` more (`None`: none fails).
    fn arm(self, disk: &MemStorage, n: Option<u64>) {
        match self {
            Fault::PowerOff => disk.fail_after(n),
            Fault::FullDisk => disk.enospc_after(n),
        }
    }
}

/// A storage failure (`fault`) at every mutation, or every growing write, (segment writes,
/// syncs, catalog and record writes, removals) of a flush that rolls over by count, after which
/// the same owner goes on: it acks and flushes again (which may fail, the journal latched) and
/// closes. A reopened owner holds
/// every ack of an `Ok` flush and none the application did not make, flushes again, and its
/// segments are back within the bound.
fn a_failure_at_every_step_of_a_count_rollover_then_more_use(host: Host, fault: Fault) {
    let steps = {
        let disk = MemStorage::new();
        let (ps, _) = restarted_to_the_bound(host, &disk);
        let owner = Owner::open(host, Arc::new(disk.clone()), LARGE_SEGMENTS).expect("open");
        let before = fault.count(&disk);
        owner
            .ack_and_flush(&[("x", ps[30]), ("y", ps[31])])
            .expect("flush");
        assert!(owner.stats().rollovers >= 1, "{:?}", owner.stats());
        fault.count(&disk) - before
    };
    let mut failed = 0;
    for n in 0..steps {
        let what = format!("{fault:?} after {n} of {steps} operations");
        let disk = MemStorage::new();
        let (ps, mut truth) = restarted_to_the_bound(host, &disk);
        let mut flushed = truth.clone();
        let owner = Owner::open(host, Arc::new(disk.clone()), LARGE_SEGMENTS).expect("open");
        let rounds = [
            [("x", ps[30]), ("y", ps[31])],
            [("x", ps[35]), ("y", ps[2])],
        ];
        for (round, acks) in rounds.iter().enumerate() {
            if round == 0 {
                fault.arm(&disk, Some(n));
            }
            for (name, p) in acks {
                truth.entry((*name).to_owned()).or_default().insert(*p);
            }
            let result = owner.ack_and_flush(acks);
            fault.arm(&disk, None);
            // An `Ok` flush keeps what each cursor held then (a cursor whose handles all went
            // after a failed flush is opened again from what is durable).
            match result {
                Ok(()) => {
                    for name in ["x", "y"] {
                        let held = acked_of(&owner, name, &ps);
                        flushed.entry(name.to_owned()).or_default().extend(held);
                    }
                }
                Err(_) => failed += 1,
            }
        }
        let _ = owner.close();
        disk.break_lock();
        assert_sound(&disk, &what);
        let owner = Owner::open(host, Arc::new(disk.clone()), LARGE_SEGMENTS)
            .unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
        assert_kept_and_not_invented(&owner, &ps, (&truth, &flushed), &what);
        owner
            .ack_and_flush(&[("x", ps[39])])
            .unwrap_or_else(|e| panic!("{what}: flush after reopen: {e}"));
        let stats = owner.stats();
        assert!(
            stats.segments <= segment_bound(stats.live_bytes, LARGE_SEGMENTS),
            "{what}: {stats:?}"
        );
        owner.close().expect("close");
        // A segment file the failure left unlisted (created, its header not written) is
        // removed by the first open after a listed segment is above it: this one.
        let owner = Owner::open(host, Arc::new(disk.clone()), LARGE_SEGMENTS)
            .unwrap_or_else(|e| panic!("{what}: second reopen: {e}"));
        assert_eq!(
            segment_files(&disk),
            owner.stats().segments,
            "{what}: {:?}",
            segment_lengths(&disk)
        );
        owner.close().expect("close");
    }
    assert!(steps >= 3, "{steps} steps");
    assert!(failed as u64 >= steps, "{failed} failed flushes");
}

#[test]
fn a_failure_at_every_step_of_a_stores_count_rollover_then_more_use_loses_no_ok_flush() {
    a_failure_at_every_step_of_a_count_rollover_then_more_use(Host::Store, Fault::PowerOff);
    a_failure_at_every_step_of_a_count_rollover_then_more_use(Host::Store, Fault::FullDisk);
}

#[test]
fn a_failure_at_every_step_of_a_topic_alones_count_rollover_then_more_use_loses_no_ok_flush() {
    a_failure_at_every_step_of_a_count_rollover_then_more_use(Host::Alone, Fault::PowerOff);
    a_failure_at_every_step_of_a_count_rollover_then_more_use(Host::Alone, Fault::FullDisk);
}

/// Restarts of `host` with segments of 256 bytes, smaller than one cursor's record (each run
/// acks 40 scattered entries on one of three cursors), and every fifth run deleting a cursor
/// instead (the live bytes drop by its state, the bound with them): after every run's tick the
/// segments are within the bound, and at the end every cursor holds exactly the model's acks, a
/// deleted one none it had before.
fn restarts_with_records_larger_than_a_segment_and_cursors_deleted(host: Host) {
    const SEGMENT: u64 = 256;
    const NAMES: [&str; 3] = ["p", "q", "r"];
    let disk = MemStorage::new();
    let ps = fill(host, &disk, 200);
    let mut rng = Rng::new(7);
    let mut truth = Acks::new();
    let mut rollovers = 0;
    for run in 0..60 {
        let owner = Owner::open(host, Arc::new(disk.clone()), SEGMENT).expect("open");
        let name = NAMES[run % NAMES.len()];
        let acker = if run % 5 == 4 && truth.remove(name).is_some() {
            owner.topic.delete_cursor(name).expect("delete");
            // Another cursor's flush runs the tick that rolls over.
            NAMES[(run + 1) % NAMES.len()]
        } else {
            name
        };
        let acks: Vec<(&str, Position)> =
            (0..40).map(|_| (acker, ps[rng.index(ps.len())])).collect();
        for (name, p) in &acks {
            truth.entry((*name).to_owned()).or_default().insert(*p);
        }
        owner.ack_and_flush(&acks).expect("flush");
        let stats = owner.stats();
        rollovers += stats.rollovers;
        assert!(
            stats.segments <= segment_bound(stats.live_bytes, SEGMENT),
            "run {run}: {stats:?}"
        );
        assert_eq!(segment_files(&disk), stats.segments, "run {run}");
        owner.close().expect("close");
    }
    assert!(rollovers >= 30, "{rollovers} rollovers");
    let owner = Owner::open(host, Arc::new(disk.clone()), SEGMENT).expect("open");
    assert_acks(&owner, &ps, &truth);
    for name in NAMES.iter().filter(|n| !truth.contains_key(**n)) {
        assert!(acked_of(&owner, name, &ps).is_empty(), "{name} revived");
    }
}

#[test]
fn a_store_restarted_with_records_larger_than_a_segment_and_cursors_deleted_stays_bounded() {
    restarts_with_records_larger_than_a_segment_and_cursors_deleted(Host::Store);
}

#[test]
fn a_topic_alone_restarted_with_records_larger_than_a_segment_and_cursors_deleted_stays_bounded() {
    restarts_with_records_larger_than_a_segment_and_cursors_deleted(Host::Alone);
}

//! Damage aimed at the journal's single-entry snapshot and at the recovery rule that passes
//! over a frame whose CRC fails when a marker falling back to its cursor's snapshot names it:
//! a frame's length field damaged so that the pass-over would step over whole records of
//! other cursors, a bit flipped in any record's length field, and two frames damaged at once
//! (the snapshot and the chain among them), a chain damaged after a seek cleared the acks of
//! an older snapshot. After each, an open either refuses the journal or recovers every
//! cursor's flushed state (a cursor that fell back: its snapshot, never more), and `verify`
//! never calls the damaged journal sound.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::internals::format::journal::RecordKind;
use ackstore::{
    LedgerConfig, MemStorage, OverflowPolicy, PersistMode, Position, Storage, Store, StoreConfig,
};
use support::mutate::records_of;
use support::topic::{append_n, earliest};

/// Entries per data ledger: acks in two ledgers make two partitions.
const PER_LEDGER: u64 = 25;

fn ledger(mode: PersistMode) -> LedgerConfig {
    let mut c = support::config::topic(PER_LEDGER, mode, 64 << 10);
    c.cursor.max_ranges_single_entry = 10_000;
    c.cursor.on_single_entry_overflow = OverflowPolicy::Error;
    c
}

fn open(
    disk: &MemStorage,
    c: &LedgerConfig,
) -> ackstore::Result<(Store, Arc<ackstore::ManagedLedger>)> {
    open_in(disk, c, support::config::store_without_flusher())
}

/// Topic `t` of the store on `disk` opened with `config`, its topics' configuration `c`.
fn open_in(
    disk: &MemStorage,
    c: &LedgerConfig,
    config: StoreConfig,
) -> ackstore::Result<(Store, Arc<ackstore::ManagedLedger>)> {
    let store = Store::open_with_storage(
        Arc::new(disk.clone()) as Arc<dyn Storage>,
        StoreConfig {
            ledger: c.clone(),
            ..config
        },
    )?;
    let topic = store.topic("t")?;
    Ok((store, topic))
}

/// What each cursor of a prepared store must recover: its flushed acks and, for one that
/// may fall back, its snapshot's.
struct Truth {
    ps: Vec<Position>,
    flushed: BTreeMap<&'static str, BTreeSet<Position>>,
    snapshot: BTreeMap<&'static str, BTreeSet<Position>>,
}

/// A fresh store with 60 entries whose cursor `a` acknowledged `acked` and flushed them as a
/// single-entry snapshot; the store closed.
fn with_a_snapshot(acked: &[usize]) -> (MemStorage, Vec<Position>) {
    let disk = MemStorage::new();
    let (store, t) = open(&disk, &ledger(PersistMode::SingleEntry)).unwrap();
    let ps = append_n(&t, 60);
    t.sync().unwrap();
    let a = t.open_cursor("a", earliest()).unwrap();
    for &i in acked {
        a.ack(ps[i]).unwrap();
    }
    a.flush().unwrap();
    drop(a);
    drop(t);
    store.close().unwrap();
    (disk, ps)
}

/// A store whose cursor `a` flushed `{1}` as a single-entry snapshot, then, in the
/// multi-entry form, `{1, 3, 30, 55}` (a partition in each of ledgers 0, 1 and 2), then
/// cursor `b` (multi-entry, no snapshot) flushed `{5, 30}`, then `a` acknowledged every entry
/// up to 34 and flushed again: its mark-delete drops its ledger-0 and ledger-1 partitions, so
/// its newest marker is a full one naming only its ledger-2 partition, written before `b`'s
/// records.
fn prepared() -> (MemStorage, Truth) {
    let (disk, ps) = with_a_snapshot(&[1]);
    let (store, t) = open(&disk, &ledger(PersistMode::MultiEntry)).unwrap();
    let a = t.open_cursor("a", earliest()).unwrap();
    for i in [3, 30, 55] {
        a.ack(ps[i]).unwrap();
    }
    a.flush().unwrap();
    let b = t.open_cursor("b", earliest()).unwrap();
    b.ack(ps[5]).unwrap();
    b.ack(ps[30]).unwrap();
    b.flush().unwrap();
    for p in &ps[..=34] {
        a.ack(*p).unwrap();
    }
    a.flush().unwrap();
    drop((a, b));
    drop(t);
    store.close().unwrap();
    let set = |is: &[usize]| is.iter().map(|&i| ps[i]).collect::<BTreeSet<_>>();
    let truth = Truth {
        flushed: [
            ("a", set(&[(0..=34).collect::<Vec<_>>(), vec![55]].concat())),
            ("b", set(&[5, 30])),
        ]
        .into(),
        snapshot: [("a", set(&[1]))].into(),
        ps,
    };
    (disk, truth)
}

/// The acknowledged entries of every cursor of `truth` after an open of a copy of `disk`.
fn recovered(
    disk: &MemStorage,
    truth: &Truth,
) -> ackstore::Result<BTreeMap<&'static str, BTreeSet<Position>>> {
    let (store, t) = open(&disk.durable_image(), &ledger(PersistMode::MultiEntry))?;
    let mut out = BTreeMap::new();
    for name in truth.flushed.keys() {
        let cursor = t.open_cursor(name, earliest())?;
        out.insert(*name, acked(&cursor, &truth.ps));
    }
    drop(t);
    drop(store);
    Ok(out)
}

fn verify(disk: &MemStorage) -> ackstore::check::Verification {
    ackstore::check::verify(&(Arc::new(disk.clone()) as Arc<dyn Storage>)).unwrap()
}

/// The invariants after damage `what` done to `disk`: `verify` reports it; an open refuses
/// the journal or recovers each cursor's flushed state, or its snapshot's for a cursor that
/// has one (and `verify` then names the fall back).
fn check_damaged(disk: &MemStorage, truth: &Truth, what: &str) {
    let report = verify(disk);
    assert!(
        !report.is_sound(),
        "{what}: damage verify calls sound: {report}"
    );
    let Ok(got) = recovered(disk, truth) else {
        return;
    };
    for (name, state) in &got {
        if *state == truth.flushed[name] {
            continue;
        }
        assert_eq!(
            Some(state),
            truth.snapshot.get(name),
            "{what}: cursor {name} recovered neither its flushed state nor its snapshot"
        );
        assert!(
            report.findings.iter().any(|f| f
                .problem
                .contains("falls back to its single-entry snapshot")),
            "{what}: cursor {name} fell back and verify does not say so: {report}"
        );
    }
}

/// The journal segments of `disk` that hold records, with their bytes.
fn segments(disk: &MemStorage) -> Vec<(String, Vec<u8>)> {
    let mut names = disk.list_prefix("journal-").unwrap();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let bytes = disk.live_bytes(&n).unwrap();
            (n, bytes)
        })
        .filter(|(_, b)| !records_of(b).is_empty())
        .collect()
}

/// A frame's length field rewritten so that a frame of cursor `a` ends exactly where a later
/// record starts: passing over it as one damaged frame would step over every record between,
/// `b`'s flushed marker among them.
#[test]
fn a_length_field_that_steps_over_whole_records_never_loses_another_cursors_state() {
    let (clean, truth) = prepared();
    assert_eq!(recovered(&clean, &truth).unwrap(), truth.flushed);
    let mut tried = 0;
    let a = segments(&clean)
        .iter()
        .flat_map(|(_, bytes)| records_of(bytes))
        .find(|r| r.kind == RecordKind::Snapshot)
        .expect("a's snapshot")
        .cursor;
    for (name, bytes) in segments(&clean) {
        let records = records_of(&bytes);
        for (i, r) in records.iter().enumerate() {
            if r.cursor != a || r.kind != RecordKind::Partition {
                continue;
            }
            for later in &records[i + 2..] {
                let body = (later.offset - r.offset - 8) as u32;
                let disk = clean.durable_image();
                let mut damaged = bytes.clone();
                damaged[r.offset..r.offset + 4].copy_from_slice(&body.to_le_bytes());
                disk.set_bytes(&name, damaged).unwrap();
                let what = format!(
                    "{name}: the partition at {} made to end at the {:?} at {}",
                    r.offset, later.kind, later.offset
                );
                check_damaged(&disk, &truth, &what);
                tried += 1;
            }
        }
    }
    assert!(tried > 0, "no partition of a's before later records");
}

/// Every bit of every record's length field, one at a time.
#[test]
fn a_bit_flipped_in_any_length_field_is_refused_or_recovers_the_flushed_state() {
    let (clean, truth) = prepared();
    for (name, bytes) in segments(&clean) {
        for r in records_of(&bytes) {
            for bit in 0..32 {
                let disk = clean.durable_image();
                let mut damaged = bytes.clone();
                damaged[r.offset + bit / 8] ^= 1 << (bit % 8);
                disk.set_bytes(&name, damaged).unwrap();
                let what = format!(
                    "{name}: bit {bit} of the length of the {:?} at {}",
                    r.kind, r.offset
                );
                check_damaged(&disk, &truth, &what);
            }
        }
    }
}

/// Two frames' CRCs failing at once (a bit of each body flipped): the snapshot and a
/// partition of the chain, two partitions of different cursors, a partition and the marker.
#[test]
fn two_damaged_frames_at_once_are_refused_or_recover_the_flushed_state() {
    let (clean, truth) = prepared();
    for (name, bytes) in segments(&clean) {
        let records = records_of(&bytes);
        for (i, first) in records.iter().enumerate() {
            for second in &records[i + 1..] {
                let disk = clean.durable_image();
                let mut damaged = bytes.clone();
                damaged[first.offset + first.len - 1] ^= 0x20;
                damaged[second.offset + second.len - 1] ^= 0x20;
                disk.set_bytes(&name, damaged).unwrap();
                let what = format!(
                    "{name}: the {:?} at {} and the {:?} at {}",
                    first.kind, first.offset, second.kind, second.offset
                );
                check_damaged(&disk, &truth, &what);
            }
        }
    }
}

/// The entries of `ps` that `cursor` holds acknowledged.
fn acked(cursor: &ackstore::Cursor, ps: &[Position]) -> BTreeSet<Position> {
    ps.iter()
        .copied()
        .filter(|p| cursor.is_acked(*p).expect("is_acked"))
        .collect()
}

/// The entries of `ps` cursor `a` holds acknowledged after an open of a copy of `disk`.
fn acks_of_a(disk: &MemStorage, ps: &[Position]) -> ackstore::Result<BTreeSet<Position>> {
    let (store, t) = open(&disk.durable_image(), &ledger(PersistMode::MultiEntry))?;
    let a = t.open_cursor("a", earliest())?;
    let got = acked(&a, ps);
    drop(a);
    drop(t);
    drop(store);
    Ok(got)
}

/// Flips a bit of the body of the newest marker or delta of `disk`'s journal (its frame's CRC
/// then fails), or of the newest partition before it.
fn flip_newest(disk: &MemStorage, kinds: &[RecordKind]) {
    for (name, mut bytes) in segments(disk).into_iter().rev() {
        let records = records_of(&bytes);
        let Some(marker) = records
            .iter()
            .rposition(|r| matches!(r.kind, RecordKind::Marker | RecordKind::Delta))
        else {
            continue;
        };
        let target = records[..=marker]
            .iter()
            .rev()
            .find(|r| kinds.contains(&r.kind))
            .expect("a record to damage");
        bytes[target.offset + target.len - 1] ^= 0x20;
        disk.set_bytes(&name, bytes).unwrap();
        return;
    }
    panic!("no marker");
}

/// Cursor `a` flushed `{10, 11, 12}` as a snapshot, then in the multi-entry form `change`
/// left it `{2}` flushed (the snapshot holds acks the cursor no longer has): after its newest
/// partition or marker is damaged, `verify` reports it and an open recovers no more than
/// `{2}`, if it opens.
fn never_back_to_cleared_acks(change: impl Fn(&ackstore::ManagedLedger, &[Position])) {
    for damaged in [RecordKind::Partition, RecordKind::Marker] {
        let (disk, ps) = with_a_snapshot(&[10, 11, 12]);
        {
            let (store, t) = open(&disk, &ledger(PersistMode::MultiEntry)).unwrap();
            change(&t, &ps);
            drop(t);
            store.close().unwrap();
        }
        let truth: BTreeSet<Position> = [ps[2]].into();
        assert_eq!(acks_of_a(&disk, &ps).unwrap(), truth, "before the damage");
        flip_newest(&disk, &[damaged]);
        let report = verify(&disk);
        assert!(!report.is_sound(), "damaged {damaged:?}: {report}");
        if let Ok(got) = acks_of_a(&disk, &ps) {
            assert!(
                got.is_subset(&truth),
                "damaged {damaged:?}: recovered {got:?}, more than the {truth:?} acknowledged"
            );
        }
    }
}

/// A snapshot older than the chain, and a seek in between that cleared the snapshot's acks:
/// a damaged chain must not fall back to acks the seek cleared (never more acked than the
/// truth).
#[test]
fn a_chain_damaged_after_a_seek_never_falls_back_to_acks_the_seek_cleared() {
    never_back_to_cleared_acks(|t, ps| {
        let a = t.open_cursor("a", earliest()).unwrap();
        a.seek(ps[0]).unwrap();
        a.ack(ps[2]).unwrap();
        a.flush().unwrap();
    });
}

/// A cursor deleted and created again under the same name: the former cursor's snapshot is
/// never the new one's state or fallback, whatever of the new cursor's chain is damaged.
#[test]
fn a_recreated_cursor_never_falls_back_to_its_former_incarnations_snapshot() {
    never_back_to_cleared_acks(|t, ps| {
        t.delete_cursor("a").unwrap();
        let a = t.open_cursor("a", earliest()).unwrap();
        a.ack(ps[2]).unwrap();
        a.flush().unwrap();
    });
}

/// Several single-entry cursors of one store acknowledge and flush from their own threads
/// while the store's flusher ticks run, in small segments that roll over; the store reopens in
/// the other form and again: every cursor recovers exactly what it had acknowledged when its
/// last flush returned.
#[test]
fn single_entry_cursors_flushing_from_threads_while_ticks_run_keep_every_flushed_ack() {
    const CURSORS: usize = 4;
    const ENTRIES: usize = 2400;
    let disk = MemStorage::new();
    let opened = |mode| {
        let mut c = ledger(mode);
        c.cursor.flush_interval = Some(std::time::Duration::from_millis(1));
        let config = StoreConfig {
            flusher_threads: 2,
            ..support::config::store_journal(2048)
        };
        open_in(&disk, &c, config).unwrap()
    };
    let ps = {
        let (store, t) = opened(PersistMode::SingleEntry);
        let ps = append_n(&t, ENTRIES as u64);
        t.sync().unwrap();
        drop(t);
        store.close().unwrap();
        ps
    };
    let mut model: Vec<BTreeSet<Position>> = vec![BTreeSet::new(); CURSORS];
    for (round, mode) in [
        PersistMode::SingleEntry,
        PersistMode::MultiEntry,
        PersistMode::SingleEntry,
    ]
    .into_iter()
    .enumerate()
    {
        let (store, t) = opened(mode);
        let flushed: Vec<BTreeSet<Position>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..CURSORS)
                .map(|c| {
                    let (t, ps, mut acked) = (&t, &ps, model[c].clone());
                    s.spawn(move || {
                        let cursor = t.open_cursor(&format!("c{c}"), earliest()).unwrap();
                        // Each round acknowledges a third of the entries this cursor takes
                        // (every CURSORS-th, shifted by the cursor), flushing every few acks.
                        let mine: Vec<usize> = (c..ENTRIES)
                            .step_by(CURSORS)
                            .filter(|i| i % 3 == round)
                            .collect();
                        for (n, &i) in mine.iter().enumerate() {
                            cursor.ack(ps[i]).unwrap();
                            acked.insert(ps[i]);
                            if n % 5 == 4 {
                                cursor.flush().unwrap();
                            }
                        }
                        cursor.flush().unwrap();
                        acked
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        model = flushed;
        drop(t);
        // A power cut after the last flushes: only what they made durable counts.
        drop(store);
        let (store, t) = open(&disk.durable_image(), &ledger(mode)).unwrap();
        for (c, want) in model.iter().enumerate() {
            let cursor = t.open_cursor(&format!("c{c}"), earliest()).unwrap();
            let got = acked(&cursor, &ps);
            assert_eq!(&got, want, "round {round} ({mode:?}): cursor c{c}");
        }
        drop(t);
        drop(store);
    }
    assert!(verify(&disk).is_sound());
}

/// A power cut at every step of a cursor's life across changes of form, in segments small
/// enough to roll over: its snapshot, a seek in the multi-entry form, an ack flushed there,
/// an ack flushed back in the single-entry form, and one more in the multi-entry form. Every
/// cut image opens (in either form) with one of the states the steps committed, never one
/// older than the last step that returned, and `verify` finds it sound.
#[test]
fn a_power_cut_at_every_step_across_seeks_and_changes_of_form_keeps_one_flushed_state() {
    use support::crash::{Cut, Points, cut_everywhere_after};
    let small = || support::config::store_journal(1024);
    let forms = [
        PersistMode::MultiEntry,
        PersistMode::MultiEntry,
        PersistMode::SingleEntry,
        PersistMode::MultiEntry,
    ];
    let clean = cut_everywhere_after(
        Points::every_in_release(3),
        |disk| {
            let (store, t) = open_in(disk, &ledger(PersistMode::SingleEntry), small()).unwrap();
            let ps = append_n(&t, 60);
            t.sync().unwrap();
            let a = t.open_cursor("a", earliest()).unwrap();
            for i in [10, 11, 12, 40] {
                a.ack(ps[i]).unwrap();
            }
            a.flush().unwrap();
            drop(a);
            drop(t);
            store.close().unwrap();
            ps
        },
        |disk, ps| {
            // How many steps returned `Ok`.
            let mut done = 0;
            for (step, mode) in forms.into_iter().enumerate() {
                let ran = (|| {
                    let (store, t) = open_in(disk, &ledger(mode), small())?;
                    let a = t.open_cursor("a", earliest())?;
                    match step {
                        0 => a.seek(ps[0])?,
                        1 => drop(a.ack(ps[2])?),
                        2 => drop(a.ack(ps[3])?),
                        _ => drop(a.ack(ps[30])?),
                    }
                    a.flush()?;
                    drop(a);
                    drop(t);
                    store.close()
                })();
                if ran.is_err() {
                    break;
                }
                done += 1;
            }
            (ps, done)
        },
        |disk, Cut { n, .. }, (ps, done)| {
            let set = |is: &[usize]| is.iter().map(|&i| ps[i]).collect::<BTreeSet<_>>();
            let states = [
                set(&[10, 11, 12, 40]),
                set(&[]),
                set(&[2]),
                set(&[2, 3]),
                set(&[2, 3, 30]),
            ];
            let image = disk.durable_image();
            for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
                let (store, t) = open(&image.durable_image(), &ledger(mode)).unwrap();
                let a = t.open_cursor("a", earliest()).unwrap();
                let got = acked(&a, &ps);
                let at = states.iter().position(|s| *s == got);
                assert!(
                    at.is_some_and(|at| at >= done && at <= done + 1),
                    "cut {n}, {done} steps done, {mode:?}: {got:?}"
                );
                drop(a);
                drop(t);
                drop(store);
            }
            assert!(verify(&image).is_sound(), "cut {n}");
        },
    );
    assert_eq!(clean.result.1, forms.len());
}

/// The range cap at its bound, with partial entries in the snapshot: exactly
/// `max_ranges_single_entry` ranges are all kept by either policy; one more is refused by
/// `Error` (nothing written) and cut by `Warn` (the highest range, counted); the partial
/// entries are kept in every case.
#[test]
fn at_the_range_cap_and_one_past_it_the_snapshot_keeps_its_partial_entries() {
    const CAP: u64 = 5;
    for policy in [OverflowPolicy::Error, OverflowPolicy::Warn] {
        for ranges in [CAP, CAP + 1] {
            let what = format!("{policy:?}, {ranges} ranges");
            let mut c = ledger(PersistMode::SingleEntry);
            c.cursor.max_ranges_single_entry = CAP;
            c.cursor.on_single_entry_overflow = policy;
            let disk = MemStorage::new();
            let (store, t) = open(&disk, &c).unwrap();
            let ps = append_n(&t, 60);
            t.sync().unwrap();
            let a = t.open_cursor("a", earliest()).unwrap();
            // Partial entries first, flushed: what a refused flush leaves.
            a.ack_batch_index(ps[40], 2, 8).unwrap();
            a.ack_batch_index(ps[50], 0, 3).unwrap();
            a.flush().unwrap();
            let odd: Vec<Position> = (0..ranges).map(|i| ps[(2 * i + 1) as usize]).collect();
            for p in &odd {
                a.ack(*p).unwrap();
            }
            let before = disk.mutations();
            let flushed = a.flush();
            let kept: BTreeSet<Position> = match (policy, ranges > CAP) {
                (OverflowPolicy::Error, true) => {
                    assert!(
                        matches!(flushed, Err(ackstore::Error::LimitExceeded { .. })),
                        "{what}: {flushed:?}"
                    );
                    assert_eq!(disk.mutations(), before, "{what}: nothing written");
                    BTreeSet::new()
                }
                (_, over) => {
                    flushed.unwrap();
                    let stats = a.stats().unwrap().persist;
                    assert_eq!(
                        (stats.overflows, stats.ranges_cut),
                        (u64::from(over), u64::from(over)),
                        "{what}"
                    );
                    odd.iter().copied().take(CAP as usize).collect()
                }
            };
            // A power cut now: only what the flushes made durable counts.
            std::mem::forget(a);
            std::mem::forget(t);
            std::mem::forget(store);
            let (store, t) = open(&disk.durable_image(), &c).unwrap();
            let a = t.open_cursor("a", earliest()).unwrap();
            let got = acked(&a, &ps);
            assert_eq!(got, kept, "{what}");
            for (p, i, n) in [(ps[40], 2, 8), (ps[50], 0, 3)] {
                assert!(a.is_batch_index_acked(p, i).unwrap(), "{what}: {p:?} {i}");
                assert!(!a.is_batch_index_acked(p, i + 1).unwrap(), "{what}: {p:?}");
                assert!(i + 1 < n);
            }
            drop(a);
            drop(t);
            drop(store);
        }
    }
}

/// A snapshot one byte over what a journal record holds (a 64 MiB body, with the record's
/// fixed part and the name tag) is refused when staged, with nothing written, and the tick
/// goes on: it commits, and the journal reopens clean.
#[test]
fn a_snapshot_over_the_record_size_is_refused_with_nothing_written() {
    use ackstore::internals::format::cursor::PersistedState;
    use ackstore::internals::format::journal::{BODY_FIXED_LEN, MAX_BODY_LEN, NAME_TAG_LEN};
    use ackstore::internals::journal::index::CursorId;
    use ackstore::internals::journal::{Journal, JournalConfig, Seal, SnapshotCounts};
    let disk = MemStorage::new();
    let storage = Arc::new(disk.clone()) as Arc<dyn Storage>;
    let journal =
        Journal::open(storage.clone(), JournalConfig::default(), Seal::default()).unwrap();
    let before = disk.mutations();
    let entry = vec![7u8; MAX_BODY_LEN - BODY_FIXED_LEN - NAME_TAG_LEN + 1];
    let mut tick = journal.begin_tick();
    let refused = tick.stage_snapshot(
        (
            CursorId {
                topic: 1,
                cursor: 1,
            },
            0,
        ),
        PersistedState::default(),
        &entry,
        SnapshotCounts {
            ranges: 0,
            batch_partitions: 0,
            partial_entries: 0,
        },
    );
    assert!(
        matches!(refused, Err(ackstore::Error::LimitExceeded { .. })),
        "{refused:?}"
    );
    assert_eq!(disk.mutations(), before, "nothing written");
    tick.commit().unwrap();
    drop(journal);
    let reopened = Journal::open(storage, JournalConfig::default(), Seal::default()).unwrap();
    assert!(
        reopened
            .state(CursorId {
                topic: 1,
                cursor: 1
            })
            .is_none()
    );
}

/// Cursor `a`'s snapshot record given another topic's ids, or another cursor's, its frame's
/// CRC recomputed: its own CRC binds the ids, so the open refuses it and `verify` reports it;
/// neither hands its acks to anyone.
#[test]
fn a_snapshot_given_another_topics_or_cursors_ids_is_refused_by_open_and_verify() {
    use ackstore::internals::format::journal::{Record, decode_record, encode_record};
    for (topic, cursor) in [(1, 0), (0, 1)] {
        let (disk, ps) = with_a_snapshot(&[10, 11, 12]);
        let (name, mut bytes) = segments(&disk)
            .into_iter()
            .find(|(_, b)| records_of(b).iter().any(|r| r.kind == RecordKind::Snapshot))
            .expect("a segment with the snapshot");
        let at = records_of(&bytes)
            .into_iter()
            .find(|r| r.kind == RecordKind::Snapshot)
            .expect("the snapshot");
        let (rec, len) = decode_record(&bytes[at.offset..]).unwrap().unwrap();
        let mut out = Vec::new();
        encode_record(
            &mut out,
            &Record {
                topic: rec.topic ^ topic,
                cursor: rec.cursor ^ cursor,
                ..rec
            },
        )
        .unwrap();
        assert_eq!(out.len(), len);
        bytes[at.offset..at.offset + len].copy_from_slice(&out);
        disk.set_bytes(&name, bytes).unwrap();
        let what = format!("topic ^ {topic}, cursor ^ {cursor}");
        assert!(!verify(&disk).is_sound(), "{what}");
        match acks_of_a(&disk, &ps) {
            Err(ackstore::Error::Corrupted { .. }) => {}
            other => panic!("{what}: {other:?}"),
        }
    }
}

//! The single-entry form (`PersistMode::SingleEntry`) on the cursor journal, on a topic opened
//! alone and on a store's topic: a flush commits one snapshot record of the cursor's whole state;
//! the range cap and `OverflowPolicy` apply as on a cursor ledger; a cursor that changed form
//! falls back from a multi-entry state that does not verify to its snapshot (open and `verify`
//! agree); a power cut at every step of a single-entry flush and of a change of form keeps one
//! flushed state; rollovers carry snapshots; a snapshot record damaged or moved to another
//! cursor is refused.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::internals::format::journal::{
    BODY_FIXED_LEN, RECORD_HEADER_LEN, RecordKind, decode_record, encode_record,
};
use ackstore::{
    Cursor, JournalConfig, LedgerConfig, ManagedLedger, MemStorage, OverflowPolicy, PersistMode,
    Position, Storage, Store, StoreConfig,
};
use support::crash::{Cut, Points, cut_everywhere_after};
use support::mutate::records_of;
use support::topic::{Host, Hosted, append_n, earliest, on_each_host};

/// Entries per data ledger: the workloads span several ledgers.
const PER_LEDGER: u64 = 25;

/// Segments small enough that a short workload rolls them over.
const SMALL_SEGMENTS: u64 = 2048;

/// A topic whose cursors persist in `mode`, at most `max_ranges` ranges in a snapshot, over
/// which `policy` applies.
fn ledger(mode: PersistMode, max_ranges: u64, policy: OverflowPolicy) -> LedgerConfig {
    let mut c = support::config::topic(PER_LEDGER, mode, 64 << 10);
    c.cursor.max_ranges_single_entry = max_ranges;
    c.cursor.on_single_entry_overflow = policy;
    c
}

fn single() -> LedgerConfig {
    ledger(PersistMode::SingleEntry, 10_000, OverflowPolicy::Error)
}

fn multi() -> LedgerConfig {
    ledger(PersistMode::MultiEntry, 10_000, OverflowPolicy::Error)
}

/// The topic `host` keeps on `disk`, its journal's segments `segment_bytes` long.
fn open_with(
    host: Host,
    disk: &MemStorage,
    c: &LedgerConfig,
    segment_bytes: u64,
) -> ackstore::Result<Hosted> {
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let journal = JournalConfig { segment_bytes };
    Ok(match host {
        Host::Alone => Hosted {
            store: None,
            topic: Arc::new(ManagedLedger::open_with_journal(
                storage,
                c.clone(),
                journal,
            )?),
        },
        Host::Store => {
            let store = Store::open_with_storage(
                storage,
                StoreConfig {
                    ledger: c.clone(),
                    journal,
                    ..support::config::store_without_flusher()
                },
            )?;
            let topic = store.topic("t")?;
            Hosted {
                store: Some(store),
                topic,
            }
        }
    })
}

fn open(host: Host, disk: &MemStorage, c: &LedgerConfig) -> ackstore::Result<Hosted> {
    open_with(host, disk, c, JournalConfig::default().segment_bytes)
}

/// The entries of `ps` that `cursor` holds acknowledged (mark-delete included).
fn acked(cursor: &Cursor, ps: &[Position]) -> BTreeSet<Position> {
    ps.iter()
        .copied()
        .filter(|p| cursor.is_acked(*p).expect("is_acked"))
        .collect()
}

/// The acknowledged entries of cursor `sub` after an open with `c` of what `disk` holds after
/// a power cut (the open's own writes go to that copy).
fn recovered(
    host: Host,
    disk: &MemStorage,
    c: &LedgerConfig,
    ps: &[Position],
) -> ackstore::Result<BTreeSet<Position>> {
    let t = open(host, &disk.durable_image(), c)?;
    let cursor = t.open_cursor("sub", earliest())?;
    Ok(acked(&cursor, ps))
}

/// A fresh disk holding the topic of `host` with `n` entries, its cursor `sub` created in
/// `c`'s form, having acknowledged `first` and flushed; the topic closed.
fn prepared(
    host: Host,
    c: &LedgerConfig,
    n: u64,
    first: &[usize],
) -> (MemStorage, Vec<Position>, BTreeSet<Position>) {
    let disk = MemStorage::new();
    let t = open(host, &disk, c).unwrap();
    let ps = append_n(&t, n);
    t.sync().unwrap();
    let cursor = t.open_cursor("sub", earliest()).unwrap();
    for &i in first {
        cursor.ack(ps[i]).unwrap();
    }
    cursor.flush().unwrap();
    let model = first.iter().map(|&i| ps[i]).collect();
    drop(cursor);
    t.close().unwrap();
    (disk, ps, model)
}

/// Reopens the topic of `host` on `disk` in `c`'s form, acknowledges `more` and flushes.
fn ack_and_flush(host: Host, disk: &MemStorage, c: &LedgerConfig, ps: &[Position], more: &[usize]) {
    let t = open(host, disk, c).unwrap();
    let cursor = t.open_cursor("sub", earliest()).unwrap();
    for &i in more {
        cursor.ack(ps[i]).unwrap();
    }
    cursor.flush().unwrap();
    drop(cursor);
    t.close().unwrap();
}

#[test]
fn a_single_entry_cursor_persists_its_acks_and_partial_entries_as_one_journal_snapshot() {
    on_each_host(|host| {
        let (disk, ps, model) = prepared(host, &single(), 60, &[1, 3, 4, 5, 30, 58]);
        let t = open(host, &disk, &single()).unwrap();
        let cursor = t.open_cursor("sub", earliest()).unwrap();
        assert_eq!(acked(&cursor, &ps), model, "{host:?}");
        cursor.ack_batch_index(ps[40], 2, 8).unwrap();
        cursor.flush().unwrap();
        let stats = cursor.stats().unwrap().persist;
        assert_eq!(stats.cursor_ledger, None, "{host:?}: no cursor ledger");
        assert_eq!((stats.snapshots, stats.markers), (1, 0), "{host:?}");
        drop(cursor);
        t.close().unwrap();

        let t = open(host, &disk, &single()).unwrap();
        let cursor = t.open_cursor("sub", earliest()).unwrap();
        assert_eq!(acked(&cursor, &ps), model, "{host:?}");
        assert!(cursor.is_batch_index_acked(ps[40], 2).unwrap(), "{host:?}");
        assert!(!cursor.is_batch_index_acked(ps[40], 3).unwrap(), "{host:?}");
        drop(cursor);
        t.close().unwrap();
        let report = ackstore::check::verify(&(Arc::new(disk) as Arc<dyn Storage>)).unwrap();
        assert!(report.is_sound(), "{host:?}: {report}");
        if host == Host::Store {
            let [j] = report.journal.as_slice() else {
                panic!("{host:?}: one journal cursor: {report}")
            };
            assert!(j.snapshot, "{host:?}: {j}");
            assert_eq!((j.acked_ranges, j.acked_entries), (Some(4), 6), "{j}");
            assert_eq!((j.batch_records, j.partial_entries), (1, 1), "{j}");
        }
    });
}

#[test]
fn over_the_range_cap_the_error_policy_refuses_the_flush_and_writes_nothing() {
    on_each_host(|host| {
        let c = ledger(PersistMode::SingleEntry, 5, OverflowPolicy::Error);
        let (disk, ps, model) = prepared(host, &c, 60, &[1, 3]);
        let t = open(host, &disk, &c).unwrap();
        let cursor = t.open_cursor("sub", earliest()).unwrap();
        for i in (5..30).step_by(2) {
            cursor.ack(ps[i]).unwrap();
        }
        let before = disk.mutations();
        let refused = cursor.flush();
        assert!(
            matches!(refused, Err(ackstore::Error::LimitExceeded { .. })),
            "{host:?}: {refused:?}"
        );
        assert_eq!(
            disk.mutations(),
            before,
            "{host:?}: the refused flush wrote nothing"
        );
        // The process stops here: nothing of this handle is written again.
        std::mem::forget(cursor);
        std::mem::forget(t);
        assert_eq!(
            recovered(host, &disk, &c, &ps).unwrap(),
            model,
            "{host:?}: the state flushed before"
        );
    });
}

#[test]
fn over_the_range_cap_the_warn_policy_keeps_the_lowest_ranges_and_counts_the_cut() {
    on_each_host(|host| {
        let c = ledger(PersistMode::SingleEntry, 5, OverflowPolicy::Warn);
        let odd: Vec<usize> = (1..40).step_by(2).collect();
        let disk = MemStorage::new();
        let t = open(host, &disk, &c).unwrap();
        let ps = append_n(&t, 60);
        t.sync().unwrap();
        let cursor = t.open_cursor("sub", earliest()).unwrap();
        for &i in &odd {
            cursor.ack(ps[i]).unwrap();
        }
        cursor.flush().unwrap();
        let stats = cursor.stats().unwrap().persist;
        assert_eq!((stats.overflows, stats.ranges_cut), (1, 15), "{host:?}");
        drop(cursor);
        std::mem::forget(t);
        // The five lowest ranges, and nothing else.
        let kept: BTreeSet<Position> = odd[..5].iter().map(|&i| ps[i]).collect();
        assert_eq!(recovered(host, &disk, &c, &ps).unwrap(), kept, "{host:?}");
    });
}

/// The frame of the newest record of `kind` in the newest segment of `disk` holding one (its
/// file name and offset), and the newest partition record before it there.
fn newest_of(disk: &MemStorage, kinds: &[RecordKind]) -> (String, usize, Option<usize>) {
    let mut names = disk.list_prefix("journal-").unwrap();
    names.sort();
    for name in names.iter().rev() {
        let bytes = disk.live_bytes(name).unwrap();
        let records = records_of(&bytes);
        if let Some(i) = records.iter().rposition(|r| kinds.contains(&r.kind)) {
            let partition = records[..i]
                .iter()
                .rev()
                .find(|r| r.kind == RecordKind::Partition)
                .map(|r| r.offset);
            return (name.clone(), records[i].offset, partition);
        }
    }
    panic!("no record of {kinds:?}");
}

/// Rewrites the record at `offset` of `name` with `edit` applied to its kind, ids and payload,
/// its frame's CRC recomputed (so only the checks inside the payload can notice).
fn edit_record(
    disk: &MemStorage,
    (name, offset): (&str, usize),
    edit: impl FnOnce(&mut u64, &mut [u8]),
) {
    let mut bytes = disk.live_bytes(name).unwrap();
    let (rec, len) = decode_record(&bytes[offset..]).unwrap().unwrap();
    let mut cursor = rec.cursor;
    let mut payload = rec.payload.to_vec();
    edit(&mut cursor, &mut payload);
    let mut out = Vec::new();
    encode_record(
        &mut out,
        &ackstore::internals::format::journal::Record {
            cursor,
            payload: &payload,
            ..rec
        },
    )
    .unwrap();
    assert_eq!(out.len(), len);
    bytes[offset..offset + len].copy_from_slice(&out);
    disk.set_bytes(name, bytes).unwrap();
}

fn flip_last_payload_byte(_: &mut u64, payload: &mut [u8]) {
    let last = payload.len() - 5;
    payload[last] ^= 0x10;
}

fn verify(disk: &MemStorage) -> ackstore::check::Verification {
    ackstore::check::verify(&(Arc::new(disk.clone()) as Arc<dyn Storage>)).unwrap()
}

/// The open of `disk` with `c` refuses it as damage, and `verify` finds it unsound.
fn refused_by_open_and_verify(
    host: Host,
    disk: &MemStorage,
    c: &LedgerConfig,
    ps: &[Position],
    what: &str,
) {
    let opened = recovered(host, disk, c, ps);
    assert!(
        matches!(opened, Err(ackstore::Error::Corrupted { .. })),
        "{what}: {opened:?}"
    );
    assert!(!verify(disk).is_sound(), "{what}");
}

/// What is damaged of the newest marker of a cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Damage {
    /// A bit of the marker, its frame's CRC recomputed: the marker's own CRC fails.
    Marker,
    /// A bit of a partition it names, its frame's CRC recomputed: the marker's row CRC fails.
    PartitionEdited,
    /// A bit of a partition it names: the frame's CRC fails.
    PartitionFlipped,
}

/// Applies `damage` to the newest marker or delta in `disk` (or a partition before it).
fn damage_newest_marker(disk: &MemStorage, damage: Damage) {
    let (name, marker, partition) = newest_of(disk, &[RecordKind::Marker, RecordKind::Delta]);
    let partition = partition.expect("a partition before the marker");
    match damage {
        Damage::Marker => edit_record(disk, (&name, marker), flip_last_payload_byte),
        // The last byte of the partition's set: a partition record may be shorter than the
        // five bytes a marker's edit skips.
        Damage::PartitionEdited => edit_record(disk, (&name, partition), |_, payload| {
            if let Some(last) = payload.last_mut() {
                *last ^= 0x10;
            }
        }),
        // The first byte of its payload (the key's first varint), inside its frame whatever its
        // length.
        Damage::PartitionFlipped => {
            let mut bytes = disk.live_bytes(&name).unwrap();
            bytes[partition + RECORD_HEADER_LEN + BODY_FIXED_LEN] ^= 2;
            disk.set_bytes(&name, bytes).unwrap();
        }
    }
}

#[test]
fn a_damaged_newest_marker_or_partition_falls_back_to_the_snapshot_and_verify_agrees() {
    on_each_host(|host| {
        for damage in [
            Damage::Marker,
            Damage::PartitionEdited,
            Damage::PartitionFlipped,
        ] {
            let what = format!("{host:?}, {damage:?}");
            // The snapshot holds {1, 3, 5}; the marker written after the change of form holds
            // {1, 3, 5, 7, 9} (the snapshot's ranges in new partitions).
            let (disk, ps, snapshot) = prepared(host, &single(), 60, &[1, 3, 5]);
            ack_and_flush(host, &disk, &multi(), &ps, &[7, 9]);
            assert_eq!(
                recovered(host, &disk, &multi(), &ps).unwrap().len(),
                5,
                "{what}: the marker is the state"
            );
            damage_newest_marker(&disk, damage);

            for c in [multi(), single()] {
                assert_eq!(
                    recovered(host, &disk, &c, &ps).unwrap(),
                    snapshot,
                    "{what}: the snapshot's state, never more"
                );
            }
            let report = verify(&disk);
            assert!(!report.is_sound(), "{what}: {report}");
            assert!(
                report.findings.iter().any(|f| f
                    .problem
                    .contains("falls back to its single-entry snapshot")),
                "{what}: {report}"
            );
            if host == Host::Store {
                let [j] = report.journal.as_slice() else {
                    panic!("{what}: one journal cursor: {report}")
                };
                assert!(j.snapshot, "{what}: {j}");
                assert_eq!(j.acked_entries, 3, "{what}: {j}");
            }
        }
    });
}

#[test]
fn control_a_damaged_marker_without_a_snapshot_is_refused_by_open_and_verify() {
    on_each_host(|host| {
        for damage in [
            Damage::Marker,
            Damage::PartitionEdited,
            Damage::PartitionFlipped,
        ] {
            let what = format!("{host:?}, {damage:?}");
            let (disk, ps, _) = prepared(host, &multi(), 60, &[1, 3, 5]);
            damage_newest_marker(&disk, damage);
            refused_by_open_and_verify(host, &disk, &multi(), &ps, &what);
        }
    });
}

/// A flipped bit in a marker's own frame cannot be told apart from one in any other cursor's
/// record (the ids it holds are what failed): refused, snapshot or not.
#[test]
fn a_marker_whose_frame_fails_its_crc_is_refused_even_with_a_snapshot() {
    on_each_host(|host| {
        let (disk, ps, _) = prepared(host, &single(), 60, &[1, 3, 5]);
        ack_and_flush(host, &disk, &multi(), &ps, &[7, 9]);
        let (name, marker, _) = newest_of(&disk, &[RecordKind::Marker, RecordKind::Delta]);
        let mut bytes = disk.live_bytes(&name).unwrap();
        bytes[marker + 30] ^= 8;
        disk.set_bytes(&name, bytes).unwrap();
        refused_by_open_and_verify(host, &disk, &multi(), &ps, &format!("{host:?}"));
    });
}

#[test]
fn a_snapshot_record_flipped_or_moved_to_another_cursor_is_refused_by_open_and_verify() {
    on_each_host(|host| {
        for moved in [false, true] {
            let what = format!("{host:?}, moved {moved}");
            let (disk, ps, _) = prepared(host, &single(), 60, &[1, 3, 5]);
            // A second cursor, so the moved snapshot names one that exists.
            {
                let t = open(host, &disk, &single()).unwrap();
                let other = t.open_cursor("other", earliest()).unwrap();
                other.ack(ps[2]).unwrap();
                other.flush().unwrap();
                drop(other);
                t.close().unwrap();
            }
            let mut names = disk.list_prefix("journal-").unwrap();
            names.sort();
            let (name, offset) = names
                .iter()
                .find_map(|n| {
                    let bytes = disk.live_bytes(n).unwrap();
                    let first = records_of(&bytes)
                        .into_iter()
                        .find(|r| r.kind == RecordKind::Snapshot)?;
                    Some((n.clone(), first.offset))
                })
                .expect("a snapshot record");
            if moved {
                edit_record(&disk, (&name, offset), |cursor, _| *cursor ^= 1);
            } else {
                let mut bytes = disk.live_bytes(&name).unwrap();
                bytes[offset + 30] ^= 4;
                disk.set_bytes(&name, bytes).unwrap();
            }
            refused_by_open_and_verify(host, &disk, &single(), &ps, &what);
        }
    });
}

/// A power cut at every step of `workload` (acks `more` of the entries of a topic whose cursor
/// flushed `first` in `from`'s form, then a flush in `to`'s form): every cut image opens with
/// the state before the flush or after it, and the latter once the flush returned `Ok`.
fn cut_at_every_step(host: Host, from: &LedgerConfig, to: &LedgerConfig) {
    let first = [1, 3, 5, 26];
    let more = [7, 9, 27, 50];
    let clean = cut_everywhere_after(
        Points::every_in_release(3),
        |disk| {
            let t = open(host, disk, from).unwrap();
            let ps = append_n(&t, 60);
            t.sync().unwrap();
            let cursor = t.open_cursor("sub", earliest()).unwrap();
            for &i in &first {
                cursor.ack(ps[i]).unwrap();
            }
            cursor.flush().unwrap();
            drop(cursor);
            t.close().unwrap();
            ps
        },
        |disk, ps| {
            let flushed = (|| {
                let t = open(host, disk, to)?;
                let cursor = t.open_cursor("sub", earliest())?;
                for &i in &more {
                    cursor.ack(ps[i])?;
                }
                cursor.flush()?;
                std::mem::forget(cursor);
                std::mem::forget(t);
                Ok::<_, ackstore::Error>(())
            })();
            (ps, flushed)
        },
        |disk, Cut { n, .. }, (ps, flushed)| {
            let before: BTreeSet<Position> = first.iter().map(|&i| ps[i]).collect();
            let mut after = before.clone();
            after.extend(more.iter().map(|&i| ps[i]));
            let image = disk.durable_image();
            for c in [from, to] {
                let got = recovered(host, &image, c, &ps).unwrap();
                assert!(
                    got == after || (got == before && flushed.is_err()),
                    "{host:?}, cut {n}: {got:?}"
                );
            }
            assert!(verify(&image).is_sound(), "{host:?}, cut {n}");
        },
    );
    assert!(clean.result.1.is_ok());
}

#[test]
fn a_power_cut_at_every_step_of_a_single_entry_flush_keeps_one_flushed_state() {
    on_each_host(|host| cut_at_every_step(host, &single(), &single()));
}

#[test]
fn a_power_cut_at_every_step_of_a_change_of_form_keeps_one_flushed_state() {
    on_each_host(|host| {
        cut_at_every_step(host, &single(), &multi());
        cut_at_every_step(host, &multi(), &single());
    });
}

#[test]
fn rollovers_carry_the_snapshots_of_single_entry_cursors() {
    on_each_host(|host| {
        let disk = MemStorage::new();
        let names = ["a", "b", "c"];
        let mut models = vec![BTreeSet::new(); names.len()];
        let t = open_with(host, &disk, &single(), SMALL_SEGMENTS).unwrap();
        let ps = append_n(&t, 400);
        t.sync().unwrap();
        let cursors: Vec<Cursor> = names
            .iter()
            .map(|n| t.open_cursor(n, earliest()).unwrap())
            .collect();
        // One cursor switches to the other form halfway, so a rollover carries both forms.
        for round in 0..40usize {
            for (i, cursor) in cursors.iter().enumerate() {
                let p = ps[1 + 2 * (round * 3 + i)];
                cursor.ack(p).unwrap();
                models[i].insert(p);
                cursor.flush().unwrap();
            }
        }
        let first = disk.list_prefix("journal-").unwrap();
        drop(cursors);
        t.close().unwrap();
        let t = open_with(host, &disk, &multi(), SMALL_SEGMENTS).unwrap();
        let switched = t.open_cursor("a", earliest()).unwrap();
        for round in 40..60usize {
            let p = ps[1 + 2 * (round * 3)];
            switched.ack(p).unwrap();
            models[0].insert(p);
            switched.flush().unwrap();
        }
        drop(switched);
        t.close().unwrap();
        let mut now = disk.list_prefix("journal-").unwrap();
        now.sort();
        assert!(
            !now.contains(&first.iter().min().unwrap().clone()),
            "{host:?}: the first segment rolled away ({first:?} -> {now:?})"
        );
        for c in [single(), multi()] {
            let t = open_with(host, &disk.durable_image(), &c, SMALL_SEGMENTS).unwrap();
            for (name, model) in names.iter().zip(&models) {
                let cursor = t.open_cursor(name, earliest()).unwrap();
                assert_eq!(&acked(&cursor, &ps), model, "{host:?}: cursor {name}");
            }
        }
        assert!(verify(&disk).is_sound(), "{host:?}");
    });
}

#[test]
fn deleting_a_single_entry_cursor_forgets_its_snapshot_and_its_fallback() {
    on_each_host(|host| {
        for last in [single(), multi()] {
            let what = format!("{host:?}, last flush {:?}", last.cursor.persist_mode);
            // A snapshot, a marker after a change of form, then a flush in the form `last`:
            // the journal holds both forms, the one of `last` the newer.
            let (disk, ps, _) = prepared(host, &single(), 60, &[1, 3, 5]);
            ack_and_flush(host, &disk, &multi(), &ps, &[7]);
            ack_and_flush(host, &disk, &last, &ps, &[9]);
            let t = open(host, &disk, &last).unwrap();
            t.delete_cursor("sub").unwrap();
            t.close().unwrap();
            let report = verify(&disk);
            assert!(report.is_sound(), "{what}: {report}");
            let storage: Arc<dyn Storage> = Arc::new(disk.clone());
            match ackstore::check::inspect(&storage).unwrap() {
                ackstore::check::Inspection::Store(s) => {
                    assert_eq!(s.journal.cursors, 0, "{what}: {s:?}");
                    assert!(s.cursors.is_empty(), "{what}: {s:?}");
                }
                ackstore::check::Inspection::Topic(t) => {
                    assert!(t.journal.is_empty(), "{what}: {:?}", t.journal);
                }
                other => panic!("{what}: {other:?}"),
            }
            // A cursor of the same name is a new one: none of the old acks.
            assert!(
                recovered(host, &disk, &last, &ps).unwrap().is_empty(),
                "{what}"
            );
        }
    });
}

//! A cursor whose record names a cursor ledger (every directory an earlier release wrote) opens
//! read-only from it and moves into its topic's journal at its first write: the journal commits
//! the whole state, the record is switched to the journal's form, the ledger deleted. On both
//! hosts (a topic alone, a store's topic), with every kind of first write, a power cut at every
//! step, a full disk during the move, and `verify` against open on every directory the move can
//! leave; and every committed sample of a cursor ledger that is a topic directory.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::check::Inspection;
use ackstore::internals::format::meta::CursorRecord;
use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::{Cursor, LedgerConfig, ManagedLedger, MemStorage, Position, Storage};
use support::crash::{Cut, Points, cut_everywhere_after};
use support::topic::{Host, Hosted, earliest, on_each_host, open_hosted, topic_storage};

const PER_LEDGER: u64 = 40;
const ENTRIES: u64 = 120;

fn open(host: Host, storage: Arc<dyn Storage>) -> ackstore::Result<Hosted> {
    open_hosted(host, storage, &support::topic::config(PER_LEDGER))
}

/// Copies onto `disk` the committed sample of the topic `host` keeps with [`ENTRIES`] entries
/// in data ledgers of [`PER_LEDGER`], whose cursor `sub` is on a cursor ledger, every third
/// entry from the second acknowledged; returns the entries' positions and `sub`'s acks.
fn legacy_on(host: Host, disk: &MemStorage) -> (Vec<Position>, BTreeSet<Position>) {
    let sample = support::samples::ledger_sample_on(host, "");
    assert_eq!(sample.shape, (ENTRIES, PER_LEDGER));
    sample.load(disk);
    (sample.positions(), sample.acks("sub"))
}

/// [`legacy_on`] a fresh disk.
fn legacy(host: Host) -> (MemStorage, Vec<Position>, BTreeSet<Position>) {
    let disk = MemStorage::new();
    let (positions, acked) = legacy_on(host, &disk);
    (disk, positions, acked)
}

/// The entries among `positions` that `cursor` counts as acknowledged (at or before mark-delete,
/// or acked one by one).
fn done(cursor: &Cursor, positions: &[Position]) -> ackstore::Result<BTreeSet<Position>> {
    let mark = cursor.mark_delete_position()?;
    let mut out = BTreeSet::new();
    for &p in positions {
        if mark.is_some_and(|m| p <= m) || cursor.is_acked(p)? {
            out.insert(p);
        }
    }
    Ok(out)
}

/// `acked` with every entry before the first one it lacks (what mark-delete then covers).
fn with_prefix(acked: &BTreeSet<Position>, positions: &[Position]) -> BTreeSet<Position> {
    let mut out = acked.clone();
    out.extend(positions.iter().take_while(|p| acked.contains(p)));
    out
}

/// The cursor ledger each cursor record of the topic on `disk` names, by record.
fn record_ledgers(host: Host, disk: &MemStorage) -> BTreeMap<String, Option<u64>> {
    let meta = FileMetaStore::new(topic_storage(host, disk));
    meta.list()
        .unwrap()
        .into_iter()
        .filter(|name| name.starts_with("cursor-"))
        .map(|name| {
            let (_, bytes) = meta.get(&name).unwrap().unwrap();
            let ledger = CursorRecord::decode(&bytes).unwrap().cursor_ledger;
            (name, ledger)
        })
        .collect()
}

/// The ledger files of `topic` that are not its data ledgers: cursor ledgers, or orphans.
fn cursor_ledger_files(topic: &ManagedLedger) -> Vec<u64> {
    let data: BTreeSet<u64> = topic.ledgers().iter().map(|l| l.id).collect();
    topic
        .entry_log()
        .unwrap()
        .ledger_ids()
        .into_iter()
        .filter(|id| !data.contains(id))
        .collect()
}

fn verify(disk: &MemStorage) -> ackstore::check::Verification {
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    ackstore::check::verify(&storage).unwrap()
}

/// Reopens the topic on `disk` and checks the import is complete: cursor `sub` holds `want`
/// (and, if given, property `x`), no record names a cursor ledger, no cursor ledger file is
/// left, and `verify` finds nothing wrong.
fn check_imported(
    host: Host,
    disk: &MemStorage,
    positions: &[Position],
    want: &BTreeSet<Position>,
    what: &str,
) {
    let report = verify(disk);
    assert!(report.is_sound(), "{what}: {report}");
    let hosted = open(host, Arc::new(disk.clone())).unwrap();
    let cursor = hosted.open_cursor("sub", earliest()).unwrap();
    assert_eq!(&done(&cursor, positions).unwrap(), want, "{what}");
    assert_eq!(
        cursor.stats().unwrap().persist.cursor_ledger,
        None,
        "{what}"
    );
    assert_eq!(cursor_ledger_files(&hosted), Vec::<u64>::new(), "{what}");
    drop(cursor);
    hosted.close().unwrap();
    assert!(
        record_ledgers(host, disk).values().all(Option::is_none),
        "{what}: {:?}",
        record_ledgers(host, disk)
    );
}

/// The writes that persist a cursor, each of which is a cursor ledger's first write.
#[derive(Debug, Clone, Copy)]
enum Write {
    Flush,
    MarkDeleteWithProperties,
    Seek,
    Rewind,
    Close,
}

/// Every kind of first write moves the cursor into the journal on each host: its state is the
/// ledger's plus the write, the ledger file is deleted, the record names no ledger, `verify`
/// is clean, and a reopen finds the same state.
#[test]
fn every_first_write_moves_a_ledger_cursor_into_the_journal_on_each_host() {
    on_each_host(|host| {
        for write in [
            Write::Flush,
            Write::MarkDeleteWithProperties,
            Write::Seek,
            Write::Rewind,
            Write::Close,
        ] {
            let what = format!("{host:?}, {write:?}");
            let (disk, positions, acked) = legacy(host);
            assert!(record_ledgers(host, &disk).values().all(Option::is_some));
            let hosted = open(host, Arc::new(disk.clone())).unwrap();
            let cursor = hosted.open_cursor("sub", earliest()).unwrap();
            assert!(
                cursor.stats().unwrap().persist.cursor_ledger.is_some(),
                "{what}"
            );
            let ledger_files = cursor_ledger_files(&hosted);
            assert_eq!(ledger_files.len(), 1, "{what}");
            assert_eq!(done(&cursor, &positions).unwrap(), acked, "{what}: read");
            let mut want = acked.clone();
            match write {
                Write::Flush => {
                    cursor.ack(positions[0]).unwrap();
                    want.insert(positions[0]);
                    want = with_prefix(&want, &positions);
                    cursor.flush().unwrap();
                }
                Write::MarkDeleteWithProperties => {
                    cursor
                        .mark_delete_with_properties(positions[3], [("x".into(), 7)].into())
                        .unwrap();
                    want.extend(&positions[..=3]);
                    want = with_prefix(&want, &positions);
                    cursor.flush().unwrap();
                }
                Write::Seek => {
                    cursor.seek(positions[60]).unwrap();
                    want = positions[..60].iter().copied().collect();
                }
                Write::Rewind => cursor.rewind().unwrap(),
                Write::Close => {
                    cursor.ack(positions[0]).unwrap();
                    want.insert(positions[0]);
                    want = with_prefix(&want, &positions);
                }
            }
            let epoch = cursor.epoch().unwrap();
            if matches!(write, Write::Close) {
                cursor.close().unwrap();
            } else {
                assert_eq!(
                    cursor.stats().unwrap().persist.cursor_ledger,
                    None,
                    "{what}"
                );
                assert_eq!(done(&cursor, &positions).unwrap(), want, "{what}: after");
                drop(cursor);
            }
            assert_eq!(cursor_ledger_files(&hosted), Vec::<u64>::new(), "{what}");
            hosted.close().unwrap();
            check_imported(host, &disk.durable_image(), &positions, &want, &what);
            let hosted = open(host, Arc::new(disk.durable_image())).unwrap();
            let cursor = hosted.open_cursor("sub", earliest()).unwrap();
            assert_eq!(cursor.epoch().unwrap(), epoch, "{what}");
            if matches!(write, Write::MarkDeleteWithProperties) {
                assert_eq!(cursor.properties().unwrap().get("x"), Some(&7), "{what}");
            }
        }
    });
}

/// Deleting a cursor still on its cursor ledger deletes the ledger with its record.
#[test]
fn deleting_a_ledger_cursor_deletes_its_ledger_on_each_host() {
    on_each_host(|host| {
        let (disk, _, _) = legacy(host);
        let hosted = open(host, Arc::new(disk.clone())).unwrap();
        let cursor = hosted.open_cursor("sub", earliest()).unwrap();
        drop(cursor);
        hosted.delete_cursor("sub").unwrap();
        assert_eq!(cursor_ledger_files(&hosted), Vec::<u64>::new());
        hosted.close().unwrap();
        assert!(record_ledgers(host, &disk).is_empty());
        let hosted = open(host, Arc::new(disk.durable_image())).unwrap();
        assert!(hosted.cursor_names().is_empty());
        assert!(verify(&disk.durable_image()).is_sound());
    });
}

/// A power cut after every storage operation of an import (an ack and a flush of a cursor read
/// from its cursor ledger, then the topic's close), on each host. After each cut `verify` is
/// clean on what the disk keeps, `inspect` shows the state the open takes (the ledger's or the
/// journal's) with no problem, and so it stays when the cursor ledger is then damaged (a
/// flipped byte), whichever step the cut fell on: an open reads that ledger only while the
/// journal holds nothing of the cursor. The reopened cursor holds at least the ledger's state
/// and at most that plus the new acks (all of them once the flush returned `Ok`); its next
/// write finishes whatever the cut left (the record switched, the ledger deleted), and a
/// reopen after it finds no cursor ledger.
#[test]
fn a_power_cut_at_every_step_of_an_import_keeps_the_ledger_state_or_the_journal_state() {
    on_each_host(|host| {
        let new_acks = |positions: &[Position]| [positions[0], positions[50], positions[100]];
        let mut mid_import = 0;
        let clean = cut_everywhere_after(
            Points::every_in_release(3),
            |disk| {
                let (positions, acked) = legacy_on(host, disk);
                let hosted = open(host, Arc::new(disk.clone())).unwrap();
                let cursor = hosted.open_cursor("sub", earliest()).unwrap();
                (hosted, cursor, positions, acked)
            },
            |_, (hosted, cursor, positions, acked)| {
                let flushed = new_acks(&positions)
                    .iter()
                    .try_for_each(|&p| cursor.ack(p).map(drop))
                    .and_then(|()| cursor.flush());
                drop(cursor);
                let closed = hosted.close();
                (positions, acked, flushed.is_ok(), closed.is_ok())
            },
            |disk, Cut { n, .. }, (positions, acked, flushed, _)| {
                let image = disk.durable_image();
                let what = format!("{host:?}, cut at {n}");
                let inspected = verified_and_inspected(&image, &what);
                let mut upper = acked.clone();
                upper.extend(new_acks(&positions));
                let upper = with_prefix(&upper, &positions);
                let lower = if flushed {
                    upper.clone()
                } else {
                    acked.clone()
                };
                // What the open finds, before it deletes orphans or a close retires a ledger.
                let found = image.durable_image();
                let hosted = open(host, Arc::new(image.clone())).unwrap();
                let cursor = hosted.open_cursor("sub", earliest()).unwrap();
                let got = done(&cursor, &positions).unwrap();
                assert!(
                    got.is_superset(&lower) && got.is_subset(&upper),
                    "{what}: {got:?}"
                );
                let on_ledger = cursor.stats().unwrap().persist.cursor_ledger.is_some();
                inspected_as_opened(inspected, on_ledger, &what);
                let data: BTreeSet<u64> = hosted.ledgers().iter().map(|l| l.id).collect();
                drop(cursor);
                drop(hosted);
                let leftover: Vec<u64> = ledger_files(host, &found)
                    .into_iter()
                    .filter(|id| !data.contains(id))
                    .collect();
                if !on_ledger && !leftover.is_empty() {
                    // The journal holds the cursor, and a ledger is left (the record still
                    // names it, or it is an orphan): damaging it or removing it changes nothing.
                    mid_import += 1;
                    for remove in [false, true] {
                        let damaged = found.durable_image();
                        if remove {
                            let name = ledger_file(host, &damaged, leftover[0]);
                            topic_storage(host, &damaged).remove(&name).unwrap();
                        } else {
                            flip_a_byte_of(host, &damaged, leftover[0]);
                        }
                        let what = format!("{what}, ledger removed: {remove}");
                        let report = verify(&damaged);
                        assert!(report.is_sound(), "{what}: {report}");
                        let hosted = open(host, Arc::new(damaged.clone())).unwrap();
                        let cursor = hosted.open_cursor("sub", earliest()).unwrap();
                        assert_eq!(done(&cursor, &positions).unwrap(), got, "{what}");
                        drop(cursor);
                        hosted.close().unwrap();
                    }
                }
                // One more write finishes the move.
                let hosted = open(host, Arc::new(image.clone())).unwrap();
                let cursor = hosted.open_cursor("sub", earliest()).unwrap();
                let last = positions[ENTRIES as usize - 1];
                cursor.ack(last).unwrap();
                cursor.flush().unwrap();
                drop(cursor);
                hosted.close().unwrap();
                let mut want = got.clone();
                want.insert(last);
                check_imported(host, &image, &positions, &want, &what);
            },
        );
        let (_, _, flushed, closed) = clean.result;
        assert!(flushed && closed, "{host:?}: the clean run");
        eprintln!(
            "{host:?}: {} cuts, {mid_import} inside the move",
            clean.total
        );
        assert!(mid_import > 0, "{host:?}: no cut fell inside the move");
        assert!(clean.total > 5, "{host:?}: {} operations", clean.total);
    });
}

/// `inspect` of `image`, once `verify` found it sound.
fn verified_and_inspected(image: &MemStorage, what: &str) -> Inspection {
    let report = verify(image);
    assert!(report.is_sound(), "{what}: {report}");
    let storage: Arc<dyn Storage> = Arc::new(image.clone());
    ackstore::check::inspect(&storage).unwrap()
}

/// `inspect` shows cursor `sub` with the state the open took (the cursor ledger's when
/// `on_ledger`, else the journal's), and no problem.
fn inspected_as_opened(inspected: Inspection, on_ledger: bool, what: &str) {
    match inspected {
        Inspection::Topic(t) => {
            assert!(t.problems.is_empty(), "{what}: {:?}", t.problems);
            let sub = t.view.cursors.iter().find(|c| c.name == "sub").unwrap();
            let journal = sub.state_source.starts_with("topic journal");
            assert_eq!(journal, !on_ledger, "{what}: {}", sub.state_source);
        }
        Inspection::Store(s) => {
            let journal = s.cursors.iter().any(|c| c.cursor.as_deref() == Some("sub"));
            assert_eq!(journal, !on_ledger, "{what}");
        }
        other => panic!("{what}: {other:?}"),
    }
}

/// The ids of the ledger files of the topic on `disk`.
fn ledger_files(host: Host, disk: &MemStorage) -> Vec<u64> {
    topic_storage(host, disk)
        .list()
        .unwrap()
        .iter()
        .filter_map(|f| {
            f.strip_prefix("ledger-")?
                .strip_suffix(".log")?
                .parse()
                .ok()
        })
        .collect()
}

/// The name of ledger `ledger`'s file of the topic on `disk`.
fn ledger_file(host: Host, disk: &MemStorage, ledger: u64) -> String {
    let name = ackstore::internals::log::ledger_file_name(ledger);
    assert!(topic_storage(host, disk).exists(&name).unwrap(), "{name}");
    name
}

/// Flips a byte in the middle of ledger `ledger`'s file of the topic on `disk`.
fn flip_a_byte_of(host: Host, disk: &MemStorage, ledger: u64) {
    let storage = topic_storage(host, disk);
    let file = storage.open(&ledger_file(host, disk, ledger)).unwrap();
    let len = file.size().unwrap();
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, len / 2).unwrap();
    byte[0] ^= 0x10;
    file.write_all_at(&byte, len / 2).unwrap();
    file.sync_data().unwrap();
}

/// A full disk at every growing write of an import: a flush that fails leaves the state on the
/// cursor ledger (the record names it, a reopen finds the ledger's state); with the space back,
/// the same handle's next flush moves it (or, once a failed write latched the journal, the
/// next owner's), and nothing is lost.
#[test]
fn a_full_disk_during_an_import_leaves_the_ledger_state_and_a_retry_moves_it() {
    on_each_host(|host| {
        for k in 0.. {
            let what = format!("{host:?}, space for {k} writes");
            let (disk, positions, acked) = legacy(host);
            let hosted = open(host, Arc::new(disk.clone())).unwrap();
            let cursor = hosted.open_cursor("sub", earliest()).unwrap();
            cursor.ack(positions[0]).unwrap();
            let mut want = acked.clone();
            want.insert(positions[0]);
            let want = with_prefix(&want, &positions);
            disk.enospc_after(Some(k));
            let flushed = cursor.flush();
            disk.enospc_after(None);
            if flushed.is_ok() {
                drop(cursor);
                hosted.close().unwrap();
                check_imported(host, &disk.durable_image(), &positions, &want, &what);
                assert!(k > 0, "{what}: the move made no growing write");
                break;
            }
            let image = disk.durable_image();
            assert!(
                record_ledgers(host, &image).values().all(Option::is_some),
                "{what}: the record was switched by a failed flush"
            );
            {
                let hosted = open(host, Arc::new(image.clone())).unwrap();
                let c = hosted.open_cursor("sub", earliest()).unwrap();
                assert_eq!(
                    done(&c, &positions).unwrap(),
                    acked,
                    "{what}: after the failure"
                );
            }
            if cursor.flush().is_err() {
                drop(cursor);
                std::mem::forget(hosted);
                let hosted = open(host, Arc::new(disk.durable_image())).unwrap();
                let cursor = hosted.open_cursor("sub", earliest()).unwrap();
                cursor.ack(positions[0]).unwrap();
                cursor.flush().unwrap();
                drop(cursor);
                hosted.close().unwrap();
                check_imported(host, &disk.durable_image(), &positions, &want, &what);
            } else {
                drop(cursor);
                hosted.close().unwrap();
                check_imported(host, &disk.durable_image(), &positions, &want, &what);
            }
        }
    });
}

/// The committed samples of cursor ledgers that are topic directories
/// (`tests/data/cursor-v1-batch-*`: partial entries in markers, pages and a single-entry
/// snapshot) open to the state they hold, move into the journal at their first write with every
/// partial entry, and keep it through a reopen; the ledger is gone and `verify` is clean.
#[test]
fn the_batch_samples_move_into_the_journal_with_every_partial_entry() {
    let p = |l: u64, e: u64| Position::new(l, e);
    let reads = |c: &Cursor| -> Vec<(Position, Option<Vec<u32>>)> {
        c.read_entries(30)
            .unwrap()
            .iter()
            .map(|e| {
                let acked = e.acked_batch_indexes.as_ref();
                (e.position, acked.map(|b| b.iter().collect()))
            })
            .collect()
    };
    let two = vec![
        (p(1, 1), Some(vec![0, 7])),
        (p(1, 2), None),
        (p(1, 4), Some(vec![13])),
        (p(1, 5), None),
    ];
    let paged: Vec<_> = (1..20)
        .filter(|&i| i != 5)
        .map(|i| {
            (
                p(i + 1, 0),
                Some(if i >= 10 { vec![1, 3] } else { vec![1] }),
            )
        })
        .collect();
    for (name, want, write) in [
        ("cursor-v1-batch-multi", two.clone(), p(1, 2)),
        ("cursor-v1-batch-single", two, p(1, 2)),
        ("cursor-v1-batch-paged", paged, p(3, 0)),
    ] {
        let dir = support::samples::sample_dir(name);
        let topic = ManagedLedger::open(dir.path(), LedgerConfig::default()).unwrap();
        let c = topic.open_cursor("sub", earliest()).unwrap();
        assert_eq!(reads(&c), want, "{name}");
        assert!(c.stats().unwrap().persist.cursor_ledger.is_some(), "{name}");
        assert_eq!(cursor_ledger_files(&topic).len(), 1, "{name}");
        c.ack(write).unwrap();
        c.flush().unwrap();
        let want: Vec<_> = want.into_iter().filter(|(pos, _)| *pos != write).collect();
        assert_eq!(c.stats().unwrap().persist.cursor_ledger, None, "{name}");
        assert_eq!(cursor_ledger_files(&topic), Vec::<u64>::new(), "{name}");
        c.close().unwrap();
        topic.close().unwrap();
        let storage: Arc<dyn Storage> =
            Arc::new(ackstore::FileStorage::open(dir.path(), false).unwrap());
        let report = ackstore::check::verify(&storage).unwrap();
        assert!(report.is_sound(), "{name}: {report}");
        let topic = ManagedLedger::open(dir.path(), LedgerConfig::default()).unwrap();
        let c = topic.open_cursor("sub", earliest()).unwrap();
        assert_eq!(reads(&c), want, "{name}: reopened");
        c.close().unwrap();
        topic.close().unwrap();
    }
}

/// A second owner claims the topic (its lock broken, as shared storage would let it) after
/// every storage operation of a former owner's import, reads included, and opens the cursor
/// there and then; the former owner's flush returns whatever it returns, and the new owner
/// acks and flushes. On each host: the new owner sees at least the ledger's state and nothing
/// nobody acked (and the former owner's acks once its flush returned `Ok`), its own flush is
/// never refused, the former owner's next flush is, and a restart after the new owner's close
/// keeps what both were promised, with no cursor ledger left.
#[test]
fn a_second_owner_claiming_at_every_step_of_an_import_keeps_every_ok_flush() {
    on_each_host(|host| {
        let takeover = |n: u64| -> u64 {
            let (disk, positions, acked) = legacy(host);
            let hooked = support::takeover::Disk::new(Arc::new(disk.clone()));
            let old = open(host, hooked.storage.clone()).unwrap();
            let cursor = old.open_cursor("sub", earliest()).unwrap();
            let theirs = [positions[0], positions[50]];
            let ours = [positions[2], positions[90]];
            for p in theirs {
                cursor.ack(p).unwrap();
            }
            let start = hooked.hook.count();
            let slot = {
                let disk = disk.clone();
                let positions = positions.clone();
                hooked.arm_takeover(n, move || {
                    disk.break_lock();
                    let new = open(host, Arc::new(disk.clone()))?;
                    let c = new.open_cursor("sub", earliest())?;
                    let seen = done(&c, &positions)?;
                    Ok::<_, ackstore::Error>((new, c, seen))
                })
            };
            let flushed = cursor.flush();
            let steps = hooked.hook.count() - start;
            hooked.hook.run_if_pending();
            let what = format!("{host:?}, claim after {n} of {steps}");
            let (new, c, seen) = slot
                .lock()
                .unwrap()
                .take()
                .expect("the takeover ran")
                .unwrap_or_else(|e| panic!("{what}: the new owner: {e}"));
            let mut made = acked.clone();
            made.extend(theirs.iter().chain(&ours));
            let made = with_prefix(&made, &positions);
            assert!(seen.is_subset(&made), "{what}: invented");
            assert!(seen.is_superset(&acked), "{what}: lost the ledger's state");
            if flushed.is_ok() {
                assert!(
                    theirs.iter().all(|p| seen.contains(p)),
                    "{what}: the former owner's Ok flush is unseen"
                );
            }
            let _ = cursor.ack(positions[110]);
            assert!(
                cursor.flush().is_err(),
                "{what}: the former owner flushed again"
            );
            for p in ours {
                c.ack(p).unwrap();
            }
            c.flush()
                .unwrap_or_else(|e| panic!("{what}: the new owner's flush: {e}"));
            drop((cursor, c));
            std::mem::forget(old);
            new.close().unwrap();
            let image = disk.durable_image();
            let later = open(host, Arc::new(image.clone())).unwrap();
            let lc = later.open_cursor("sub", earliest()).unwrap();
            let got = done(&lc, &positions).unwrap();
            let mut all = made.clone();
            all.insert(positions[110]);
            assert!(
                got.is_subset(&with_prefix(&all, &positions)),
                "{what}: invented"
            );
            assert!(
                seen.iter().chain(&ours).all(|p| got.contains(p)),
                "{what}: lost what the new owner flushed"
            );
            lc.ack(positions[119]).unwrap();
            lc.flush().unwrap();
            assert_eq!(cursor_ledger_files(&later), Vec::<u64>::new(), "{what}");
            drop(lc);
            later.close().unwrap();
            steps
        };
        let steps = takeover(u64::MAX);
        assert!(steps > 3, "{host:?}: {steps}");
        for n in 1..=steps {
            takeover(n);
        }
    });
}

/// The cursor `name` of `topic` counts as acknowledged exactly the entries of `want` (mark-delete
/// and every individual ack), without a call per entry of the topic.
fn check_done_exactly(cursor: &Cursor, want: &BTreeSet<Position>, what: &str) {
    let mark = cursor
        .mark_delete_position()
        .unwrap()
        .expect("a mark-delete");
    assert!(
        (0..=mark.entry_id).all(|e| want.contains(&Position::new(mark.ledger_id, e))),
        "{what}: mark-delete {mark} covers an entry not acknowledged"
    );
    let mut acked = BTreeSet::new();
    for (from, to) in cursor.acked_ranges().unwrap() {
        assert_eq!(from.ledger_id, to.ledger_id, "{what}");
        acked.extend((from.entry_id..=to.entry_id).map(|e| Position::new(from.ledger_id, e)));
    }
    let invented: Vec<_> = acked.difference(want).take(5).collect();
    assert!(
        invented.is_empty(),
        "{what}: acked but not wanted: {invented:?}"
    );
    let lost: Vec<_> = want
        .iter()
        .filter(|p| **p > mark && !acked.contains(p))
        .take(5)
        .collect();
    assert!(lost.is_empty(), "{what}: wanted but not acked: {lost:?}");
}

/// Every committed sample that is a cursor ledger and its record (`tests/data/cursor-v1-*` and
/// `cursor-v2-*`: markers and pages of both table forms, a single-entry snapshot, torn last
/// markers), made the cursor of a topic alone whose data ledgers hold every entry it acked,
/// opens to exactly the state it holds (mark-delete 3:0, over the acks that follow it, epoch 2,
/// property `x` = 7, its acks),
/// moves into the topic's journal at its first write (one more ack, flushed), and keeps that
/// state plus the ack through a reopen; the ledger is gone and `verify` is clean.
#[test]
fn every_cursor_ledger_sample_opens_to_its_state_and_moves_into_the_journal_at_its_first_write() {
    use support::samples::{dense, first_flush, sample_as_topic};
    let three = Position::new(3, 200_000);
    let v1 = |extra: u64| -> BTreeSet<Position> {
        let mut acks: BTreeSet<_> = [1, 3, 5].map(|e| Position::new(3, e)).into();
        acks.extend((70_000..=70_010).map(|e| Position::new(3, e)));
        acks.extend((0..extra).map(|c| Position::new(4, c << 16)));
        acks
    };
    let both = |mut acks: BTreeSet<Position>| {
        acks.insert(three);
        acks
    };
    let mut v2_multi = both(first_flush(0));
    v2_multi.extend(dense());
    let samples = [
        ("cursor-v1-multi", both(v1(0))),
        ("cursor-v1-single", both(v1(0))),
        ("cursor-v1-paged-torn-marker", v1(10)),
        ("cursor-v2-multi", v2_multi),
        ("cursor-v2-paged-torn-marker", both(first_flush(10))),
    ];
    for (name, acks) in samples {
        let mut want = acks;
        want.insert(Position::new(3, 0));
        // Data ledgers 3, 4 and 5 holding every entry the sample acked.
        let data: Vec<(u64, u64)> = (3..=5)
            .map(|l| {
                let last = want.iter().filter(|p| p.ledger_id == l).map(|p| p.entry_id);
                (l, last.max().map_or(1, |e| e + 1))
            })
            .collect();
        let (disk, cursor_name) = sample_as_topic(name, &data);
        let topic =
            ManagedLedger::open_with_storage(Arc::new(disk.clone()), LedgerConfig::default())
                .unwrap();
        let c = topic.open_cursor(&cursor_name, earliest()).unwrap();
        assert!(c.stats().unwrap().persist.cursor_ledger.is_some(), "{name}");
        assert_eq!(c.epoch().unwrap(), 2, "{name}");
        assert_eq!(c.properties().unwrap().get("x"), Some(&7), "{name}");
        check_done_exactly(&c, &want, name);
        let more = Position::new(3, 7);
        c.ack(more).unwrap();
        want.insert(more);
        c.flush().unwrap();
        assert_eq!(c.stats().unwrap().persist.cursor_ledger, None, "{name}");
        assert_eq!(cursor_ledger_files(&topic), Vec::<u64>::new(), "{name}");
        drop(c);
        topic.close().unwrap();
        let image = disk.durable_image();
        let report = verify(&image);
        assert!(report.is_sound(), "{name}: {report}");
        let topic =
            ManagedLedger::open_with_storage(Arc::new(image), LedgerConfig::default()).unwrap();
        let c = topic.open_cursor(&cursor_name, earliest()).unwrap();
        assert_eq!(c.epoch().unwrap(), 2, "{name}: reopened");
        assert_eq!(
            c.properties().unwrap().get("x"),
            Some(&7),
            "{name}: reopened"
        );
        check_done_exactly(&c, &want, &format!("{name}: reopened"));
        drop(c);
        topic.close().unwrap();
    }
}

/// A cursor read from a cursor ledger and opened for the single-entry form moves into the
/// journal at its first write too, on each host: the move commits its whole state (nothing is
/// cut), the ledger goes, and its next flush commits a snapshot record; a reopen finds every ack
/// of both flushes, from the journal.
#[test]
fn a_ledger_cursor_opened_for_the_single_entry_form_moves_into_the_journal_on_each_host() {
    on_each_host(|host| {
        let (disk, positions, acked) = legacy(host);
        let config = single_form();
        let hosted = open_hosted(host, Arc::new(disk.clone()), &config).unwrap();
        let cursor = hosted.open_cursor("sub", earliest()).unwrap();
        let mut want = acked.clone();
        for p in [positions[0], positions[2]] {
            cursor.ack(p).unwrap();
            cursor.flush().unwrap();
            want.insert(p);
        }
        let want = with_prefix(&want, &positions);
        let stats = cursor.stats().unwrap().persist;
        assert!(stats.cursor_ledger.is_none(), "{host:?}");
        assert_eq!(stats.snapshots, 1, "{host:?}: {stats:?}");
        drop(cursor);
        hosted.close().unwrap();
        let image = disk.durable_image();
        assert!(
            record_ledgers(host, &image).values().all(Option::is_none),
            "{host:?}"
        );
        let hosted = open_hosted(host, Arc::new(image), &config).unwrap();
        let cursor = hosted.open_cursor("sub", earliest()).unwrap();
        assert_eq!(done(&cursor, &positions).unwrap(), want, "{host:?}");
        assert_eq!(
            cursor.stats().unwrap().recovery_source,
            Some(ackstore::RecoverySource::Journal),
            "{host:?}"
        );
        assert_eq!(cursor_ledger_files(&hosted), Vec::<u64>::new(), "{host:?}");
    });
}

/// The config of [`open`] with cursors of the single-entry form.
fn single_form() -> LedgerConfig {
    let mut config = support::topic::config(PER_LEDGER);
    config.cursor.persist_mode = ackstore::PersistMode::SingleEntry;
    config
}

/// Messages of each batch entry of the single-entry import tests.
const BATCH: u32 = 8;

/// A cursor ledger cursor's acks as the application made them: whole entries, and the
/// acknowledged messages of entries acknowledged in part.
#[derive(Debug, Clone, Default)]
struct Truth {
    whole: BTreeSet<Position>,
    partial: BTreeMap<Position, BTreeSet<u32>>,
}

impl Truth {
    fn ack(&mut self, cursor: &Cursor, p: Position) {
        cursor.ack(p).unwrap();
        self.whole.insert(p);
        self.partial.remove(&p);
    }

    fn ack_message(&mut self, cursor: &Cursor, p: Position, index: u32) {
        cursor.ack_batch_index(p, index, BATCH).unwrap();
        if !self.whole.contains(&p) {
            self.partial.entry(p).or_default().insert(index);
        }
    }

    /// Whether `cursor` holds exactly these acks over `positions` (every partition and partial
    /// entry touched, cold ones loaded).
    fn check(&self, cursor: &Cursor, positions: &[Position], what: &str) {
        let whole = with_prefix(&self.whole, positions);
        assert_eq!(
            done(cursor, positions).unwrap(),
            whole,
            "{what}: whole entries"
        );
        for &p in positions.iter().filter(|p| !whole.contains(p)) {
            let got: BTreeSet<u32> = (0..BATCH)
                .filter(|&i| cursor.is_batch_index_acked(p, i).unwrap())
                .collect();
            let want = self.partial.get(&p).cloned().unwrap_or_default();
            assert_eq!(got, want, "{what}: messages of {p}");
        }
    }
}

/// Entries of the single-entry import tests, in data ledgers of [`SMALL_LEDGERS`] entries: one
/// ack partition per data ledger, 20 of them.
const SMALL_LEDGERS: u64 = 8;

/// The config of the single-entry import tests: the single-entry form, an ack budget of a few
/// partitions, so most of the ledger's partitions and partial entries stay cold.
fn single_entry_config() -> LedgerConfig {
    support::config::topic(SMALL_LEDGERS, ackstore::PersistMode::SingleEntry, 1024)
}

/// A topic kept by `host` on `disk` of 160 entries in 20 data ledgers, whose cursor `sub` is on
/// a cursor ledger holding every third entry from the second acked and messages 0 and 3 of
/// every fifth entry from the first acked in part (both forms written by an earlier release:
/// partitions, batch-index entries, a marker): a copy of the committed sample.
fn batch_legacy(host: Host, disk: &MemStorage) -> (Vec<Position>, Truth) {
    let sample = support::samples::ledger_sample_on(host, "-batch");
    assert_eq!(sample.shape, (160, SMALL_LEDGERS));
    let partial = sample.partial.expect("partial entries");
    assert_eq!(partial.batch, BATCH);
    sample.load(disk);
    let truth = Truth {
        whole: sample.acks("sub"),
        partial: sample
            .batch()
            .into_iter()
            .map(|p| (p, partial.indexes.iter().copied().collect()))
            .collect(),
    };
    (sample.positions(), truth)
}

/// Opens `sub` of the topic `host` keeps on `storage` in the single-entry form and touches its
/// whole state (which the budget then evicts): partitions and partial entries are cold, in the
/// cursor ledger, before the first write.
fn open_single_entry(
    host: Host,
    storage: Arc<dyn Storage>,
    config: &LedgerConfig,
    (positions, truth): (&[Position], &Truth),
) -> (Hosted, Cursor) {
    let hosted = open_hosted(host, storage, config).unwrap();
    let cursor = hosted.open_cursor("sub", earliest()).unwrap();
    truth.check(&cursor, positions, "read from the ledger");
    let stats = cursor.stats().unwrap();
    assert!(stats.persist.cursor_ledger.is_some(), "{host:?}");
    assert!(
        stats.ackset.resident_partitions < stats.ackset.partitions,
        "{host:?}: {stats:?}"
    );
    assert!(stats.batch_cold_partitions > 0, "{host:?}: {stats:?}");
    (hosted, cursor)
}

/// The single-entry cursor `sub` of the topic `host` keeps on `image` is moved: `verify` is
/// clean, no record names a cursor ledger, and a reopen recovers exactly `truth` from the
/// journal, with no cursor ledger file left.
fn check_moved(
    host: Host,
    image: &MemStorage,
    (positions, truth): (&[Position], &Truth),
    what: &str,
) {
    let report = verify(image);
    assert!(report.is_sound(), "{what}: {report}");
    assert!(
        record_ledgers(host, image).values().all(Option::is_none),
        "{what}"
    );
    let hosted = open_hosted(host, Arc::new(image.clone()), &single_entry_config()).unwrap();
    let cursor = hosted.open_cursor("sub", earliest()).unwrap();
    truth.check(&cursor, positions, what);
    assert_eq!(
        cursor.stats().unwrap().recovery_source,
        Some(ackstore::RecoverySource::Journal),
        "{what}"
    );
    assert_eq!(cursor_ledger_files(&hosted), Vec::<u64>::new(), "{what}");
}

/// First writes of a single-entry cursor read from a cursor ledger.
#[derive(Debug, Clone, Copy)]
enum SingleWrite {
    Flush,
    Close,
    Tick,
    Seek,
    Eviction,
}

/// A cursor read from a cursor ledger, opened for the single-entry form under a small ack budget
/// (most partitions and partial entries cold, in the ledger), moves into the journal at each
/// kind of first write on each host (a store's flush tick on a store, where a test can run
/// one): the move carries every cold partition and partial entry,
/// so the same handle then reads every ack back, acks across every partition and flushes
/// snapshots; a reopen finds exactly the acks made (against a model), from the journal, and no
/// cursor ledger is left.
#[test]
fn a_single_entry_ledger_cursor_with_cold_state_moves_at_each_first_write() {
    on_each_host(|host| {
        for write in [
            SingleWrite::Flush,
            SingleWrite::Close,
            SingleWrite::Tick,
            SingleWrite::Seek,
            SingleWrite::Eviction,
        ] {
            let what = format!("{host:?}, {write:?}");
            let disk = MemStorage::new();
            let (positions, mut truth) = batch_legacy(host, &disk);
            if matches!((write, host), (SingleWrite::Tick, Host::Alone)) {
                // A topic alone ticks on its own flusher thread only, on a timer.
                continue;
            }
            let config = single_entry_config();
            let storage = Arc::new(disk.clone());
            let (hosted, cursor) = open_single_entry(host, storage, &config, (&positions, &truth));
            let (p, q) = (positions[3], positions[150]);
            match write {
                SingleWrite::Flush | SingleWrite::Close | SingleWrite::Tick => {
                    truth.ack(&cursor, p);
                    truth.ack_message(&cursor, q, 6);
                }
                SingleWrite::Seek => {
                    cursor.seek(positions[60]).unwrap();
                    truth = Truth {
                        whole: positions[..60].iter().copied().collect(),
                        ..Truth::default()
                    };
                }
                SingleWrite::Eviction => {
                    // Acks in every partition, until unsaved ones pass the budget.
                    for &p in positions.iter().skip(2).step_by(SMALL_LEDGERS as usize) {
                        truth.ack(&cursor, p);
                        if cursor.stats().unwrap().persist.cursor_ledger.is_none() {
                            break;
                        }
                    }
                }
            }
            match (write, &hosted.store) {
                (SingleWrite::Flush, _) => cursor.flush().unwrap(),
                (SingleWrite::Close, _) => {
                    cursor.close().unwrap();
                    assert_eq!(cursor_ledger_files(&hosted), Vec::<u64>::new(), "{what}");
                }
                (SingleWrite::Tick, store) => {
                    store.as_ref().expect("a store").flush_all().unwrap();
                }
                (SingleWrite::Eviction, _) => assert_eq!(
                    cursor.stats().unwrap().persist.cursor_ledger,
                    None,
                    "{what}: the acks past the budget moved nothing"
                ),
                (SingleWrite::Seek, _) => {}
            }
            let cursor = if matches!(write, SingleWrite::Close) {
                hosted.open_cursor("sub", earliest()).unwrap()
            } else {
                cursor
            };
            let what = format!("{what}: moved");
            truth.ack_message(&cursor, positions[151], 1);
            cursor.flush().unwrap();
            assert_eq!(
                cursor.stats().unwrap().persist.cursor_ledger,
                None,
                "{what}"
            );
            assert_eq!(cursor_ledger_files(&hosted), Vec::<u64>::new(), "{what}");
            truth.check(&cursor, &positions, &what);
            // More acks across every partition, cold ones loaded from the journal.
            for &p in positions.iter().skip(7).step_by(SMALL_LEDGERS as usize) {
                truth.ack(&cursor, p);
            }
            for &p in positions.iter().skip(5).step_by(SMALL_LEDGERS as usize) {
                truth.ack_message(&cursor, p, 5);
            }
            cursor.flush().unwrap();
            assert!(
                cursor.stats().unwrap().persist.snapshots > 0,
                "{what}: {:?}",
                cursor.stats().unwrap().persist
            );
            drop(cursor);
            hosted.close().unwrap();
            let image = disk.durable_image();
            check_moved(
                host,
                &image,
                (&positions, &truth),
                &format!("{what}, reopened"),
            );
        }
    });
}

/// What `cursor` counts as acknowledged over `positions`: whole entries (with mark-delete's),
/// and the messages of the others acknowledged in part.
fn acked_now(cursor: &Cursor, positions: &[Position]) -> Truth {
    let whole = done(cursor, positions).unwrap();
    let partial = positions
        .iter()
        .filter(|p| !whole.contains(p))
        .filter_map(|&p| {
            let acked: BTreeSet<u32> = (0..BATCH)
                .filter(|&i| cursor.is_batch_index_acked(p, i).unwrap())
                .collect();
            (!acked.is_empty()).then_some((p, acked))
        })
        .collect();
    Truth { whole, partial }
}

/// Whether every ack of `small` (whole entries, and messages) is one of `big`'s over
/// `positions`, mark-delete's prefix counted in both.
fn acks_within(small: &Truth, big: &Truth, positions: &[Position]) -> bool {
    let big_whole = with_prefix(&big.whole, positions);
    with_prefix(&small.whole, positions).is_subset(&big_whole)
        && small.partial.iter().all(|(p, acked)| {
            big_whole.contains(p) || big.partial.get(p).is_some_and(|b| acked.is_subset(b))
        })
}

/// A power cut after every storage operation of the move of a single-entry cursor read from a
/// cursor ledger under a small ack budget (its partitions and partial entries cold in the
/// ledger): an ack and a partial ack flushed (the move), acks across every partition flushed
/// again (a snapshot record), then the topic's close, on each host. After each cut `verify`
/// is clean, `inspect` shows the state the open takes (the ledger's or the journal's), and the
/// open holds every ack of the last flush that returned `Ok` and nothing the application did
/// not ack; one more write then finishes the move, and a reopen finds no cursor ledger.
#[test]
fn a_power_cut_at_every_step_of_a_single_entry_import_with_cold_state() {
    on_each_host(|host| {
        let config = single_entry_config();
        let mut inside = 0;
        let clean = cut_everywhere_after(
            Points::every_in_release(3),
            |disk| {
                let (positions, truth) = batch_legacy(host, disk);
                let storage = Arc::new(disk.clone());
                let (hosted, cursor) =
                    open_single_entry(host, storage, &config, (&positions, &truth));
                (hosted, cursor, positions, truth)
            },
            |_, (hosted, cursor, positions, legacy)| {
                let mut truth = legacy.clone();
                let mut flushed = legacy.clone();
                let run = (|| -> ackstore::Result<()> {
                    cursor.ack(positions[3])?;
                    truth.whole.insert(positions[3]);
                    cursor.ack_batch_index(positions[150], 6, BATCH)?;
                    truth.partial.entry(positions[150]).or_default().insert(6);
                    cursor.flush()?;
                    flushed = truth.clone();
                    for &p in positions.iter().skip(7).step_by(SMALL_LEDGERS as usize) {
                        cursor.ack(p)?;
                        truth.whole.insert(p);
                    }
                    for &p in positions.iter().skip(5).step_by(SMALL_LEDGERS as usize) {
                        cursor.ack_batch_index(p, 5, BATCH)?;
                        truth.partial.entry(p).or_default().insert(5);
                    }
                    cursor.flush()?;
                    flushed = truth.clone();
                    Ok(())
                })();
                drop(cursor);
                let closed = hosted.close();
                (positions, truth, flushed, run.is_ok() && closed.is_ok())
            },
            |disk, Cut { n, .. }, (positions, truth, flushed, _)| {
                let image = disk.durable_image();
                let what = format!("{host:?}, cut at {n}");
                let inspected = verified_and_inspected(&image, &what);
                let hosted = open_hosted(host, Arc::new(image.clone()), &config).unwrap();
                let cursor = hosted.open_cursor("sub", earliest()).unwrap();
                let got = acked_now(&cursor, &positions);
                assert!(acks_within(&got, &truth, &positions), "{what}: invented");
                assert!(acks_within(&flushed, &got, &positions), "{what}: lost");
                let on_ledger = cursor.stats().unwrap().persist.cursor_ledger.is_some();
                inspected_as_opened(inspected, on_ledger, &what);
                if !on_ledger && !record_ledgers(host, &image).values().all(Option::is_none) {
                    inside += 1;
                }
                // One more write finishes the move.
                let last = positions[159];
                cursor.ack(last).unwrap();
                cursor.flush().unwrap();
                drop(cursor);
                hosted.close().unwrap();
                let mut want = got.clone();
                want.whole.insert(last);
                let image = image.durable_image();
                check_moved(
                    host,
                    &image,
                    (&positions, &want),
                    &format!("{what}, finished"),
                );
            },
        );
        assert!(clean.result.3, "{host:?}: the clean run");
        eprintln!("{host:?}: {} cuts, {inside} inside the move", clean.total);
        assert!(
            inside > 0,
            "{host:?}: no cut fell between the commit and the switch"
        );
    });
}

/// How a cursor ledger of a committed sample is damaged before its cursor is opened.
#[derive(Debug, Clone, Copy)]
enum Damage {
    Deleted,
    Truncated,
    SecondHalfZeroed,
    ByteFlipped,
    /// Replaced by the cursor ledger of the sample's other cursor.
    SwappedWithAnothersLedger,
}

/// The cursor ledger of the samples' cursor `sub` damaged every way before its first open, on
/// each host (samples `cursor-ledger-*-two`): `verify` and open agree (a report with no
/// finding opens `sub` to exactly its acks; an open that fails follows a report of damage; a
/// torn tail may cost acks, as a power cut does); whatever opens
/// never holds more than `sub` acked, errors are errors (never panics), the first write moves
/// the cursor into the journal with no cursor ledger of `sub` left, and `other` keeps its acks.
#[test]
fn a_damaged_cursor_ledger_of_a_sample_opens_to_at_most_its_acks_and_imports() {
    on_each_host(|host| {
        for damage in [
            Damage::Deleted,
            Damage::Truncated,
            Damage::SecondHalfZeroed,
            Damage::ByteFlipped,
            Damage::SwappedWithAnothersLedger,
        ] {
            let what = format!("{host:?}, {damage:?}");
            let sample = support::samples::ledger_sample_on(host, "-two");
            let disk = sample.disk();
            let positions = sample.positions();
            let ledgers = record_ledgers(host, &disk);
            let storage = topic_storage(host, &disk);
            let meta = FileMetaStore::new(storage.clone());
            let ledger_of = |cursor: &str| {
                let (_, ledger) = ledgers
                    .iter()
                    .find(|(record, _)| {
                        let (_, bytes) = meta.get(record).unwrap().unwrap();
                        CursorRecord::decode(&bytes).unwrap().name == cursor
                    })
                    .unwrap();
                ackstore::internals::log::ledger_file_name(ledger.expect("a cursor ledger"))
            };
            let (name, others) = (ledger_of("sub"), ledger_of("other"));
            let read = |file: &str| {
                let f = storage.open(file).unwrap();
                let mut bytes = vec![0; usize::try_from(f.size().unwrap()).unwrap()];
                f.read_exact_at(&mut bytes, 0).unwrap();
                bytes
            };
            let mut bytes = read(&name);
            let half = bytes.len() / 2;
            match damage {
                Damage::Deleted => bytes.clear(),
                Damage::Truncated => bytes.truncate(half),
                Damage::SecondHalfZeroed => bytes[half..].fill(0),
                Damage::ByteFlipped => bytes[half] ^= 0x10,
                Damage::SwappedWithAnothersLedger => bytes = read(&others),
            }
            storage.remove(&name).unwrap();
            if !matches!(damage, Damage::Deleted) {
                let f = storage.create(&name).unwrap();
                f.write_all_at(&bytes, 0).unwrap();
                f.sync_data().unwrap();
            }
            storage.sync_dir().unwrap();
            let report = verify(&disk);
            let opened = open(host, Arc::new(disk.clone())).and_then(|hosted| {
                let cursor = hosted.open_cursor("sub", earliest())?;
                let got = done(&cursor, &positions)?;
                Ok((hosted, cursor, got))
            });
            let (hosted, cursor, got) = match opened {
                Ok(opened) => opened,
                Err(e) => {
                    assert!(!report.is_sound(), "{what}: {e}, but verify: {report}");
                    continue;
                }
            };
            let truth = sample.done("sub");
            assert!(got.is_subset(&truth), "{what}: acks invented");
            if report.findings.is_empty() {
                assert_eq!(got, truth, "{what}: nothing found, yet {report}");
            }
            cursor.ack(positions[0]).unwrap();
            cursor.flush().unwrap();
            drop(cursor);
            hosted.close().unwrap();
            let image = disk.durable_image();
            let hosted = open(host, Arc::new(image.clone())).unwrap();
            let cursor = hosted.open_cursor("sub", earliest()).unwrap();
            let mut upper = truth.clone();
            upper.insert(positions[0]);
            let after = done(&cursor, &positions).unwrap();
            assert!(after.contains(&positions[0]), "{what}: the flushed ack");
            assert!(after.is_subset(&with_prefix(&upper, &positions)), "{what}");
            assert_eq!(
                cursor.stats().unwrap().persist.cursor_ledger,
                None,
                "{what}"
            );
            let other = hosted.open_cursor("other", earliest()).unwrap();
            assert_eq!(
                done(&other, &positions).unwrap(),
                sample.done("other"),
                "{what}: other"
            );
            drop((cursor, other));
            hosted.close().unwrap();
            assert!(
                !topic_storage(host, &image).exists(&name).unwrap()
                    || matches!(damage, Damage::SwappedWithAnothersLedger),
                "{what}: sub's cursor ledger is left"
            );
        }
    });
}

/// A cursor read from a cursor ledger, opened for the single-entry form, imported by a flush
/// (its chain) and flushed again (its first snapshot, after a seek back to the start or not),
/// then reopened in the multi-entry form, acked and flushed, then reopened in each form: every
/// flushed ack is kept and none a seek cleared comes back, against a model, with `verify`
/// clean. The import's chain is the cursor's only chain until the change of form, so the
/// multi-entry flush must write a whole state, not build on it.
#[test]
fn an_imported_single_entry_cursor_changing_form_keeps_every_flushed_ack() {
    on_each_host(|host| {
        for seek in [false, true] {
            let what = format!("{host:?}, seek {seek}");
            let (disk, positions, acked) = legacy(host);
            let single = single_form();
            let multi = support::topic::config(PER_LEDGER);
            let hosted = open_hosted(host, Arc::new(disk.clone()), &single).unwrap();
            let cursor = hosted.open_cursor("sub", earliest()).unwrap();
            let mut want = acked.clone();
            want.insert(positions[5]);
            cursor.ack(positions[5]).unwrap();
            cursor.flush().unwrap();
            assert_eq!(
                cursor.stats().unwrap().persist.markers,
                1,
                "{what}: the import"
            );
            if seek {
                cursor.seek(positions[0]).unwrap();
                want.clear();
            }
            want.insert(positions[8]);
            cursor.ack(positions[8]).unwrap();
            cursor.flush().unwrap();
            assert!(cursor.stats().unwrap().persist.snapshots > 0, "{what}");
            drop(cursor);
            hosted.close().unwrap();
            let disk = disk.durable_image();
            let hosted = open_hosted(host, Arc::new(disk.clone()), &multi).unwrap();
            let cursor = hosted.open_cursor("sub", earliest()).unwrap();
            let what_now = format!("{what}: reopened multi-entry");
            assert_eq!(
                done(&cursor, &positions).unwrap(),
                with_prefix(&want, &positions),
                "{what_now}"
            );
            want.insert(positions[11]);
            cursor.ack(positions[11]).unwrap();
            cursor.flush().unwrap();
            drop(cursor);
            hosted.close().unwrap();
            let image = disk.durable_image();
            let report = verify(&image);
            assert!(report.is_sound(), "{what}: {report}");
            for (config, form) in [(&multi, "multi-entry"), (&single, "single-entry")] {
                let hosted = open_hosted(host, Arc::new(image.durable_image()), config).unwrap();
                let cursor = hosted.open_cursor("sub", earliest()).unwrap();
                assert_eq!(
                    done(&cursor, &positions).unwrap(),
                    with_prefix(&want, &positions),
                    "{what}: flushed multi-entry, reopened {form}"
                );
            }
        }
    });
}

/// `image` with one bit of the payload of the journal record at `offset` of segment `name`
/// flipped: with the frame's CRC recomputed (`reframe`, so only the checks inside the record
/// or of the records naming it can notice), or not (the frame's CRC fails).
fn flip_a_payload_bit(image: &MemStorage, (name, offset): (&str, usize), at: usize, reframe: bool) {
    use ackstore::internals::format::journal::{Record, decode_record, encode_record};
    let mut bytes = image.live_bytes(name).unwrap();
    let (record, len) = decode_record(&bytes[offset..]).unwrap().unwrap();
    let mut payload = record.payload.to_vec();
    let at = at % payload.len();
    payload[at] ^= 0x04;
    let mut out = Vec::new();
    encode_record(
        &mut out,
        &Record {
            payload: &payload,
            ..record
        },
    )
    .unwrap();
    assert_eq!(out.len(), len);
    if reframe {
        bytes[offset..offset + len].copy_from_slice(&out);
    } else {
        let start = len - payload.len();
        bytes[offset + start + at] ^= 0x04;
    }
    image.set_bytes(name, bytes).unwrap();
}

/// A single-entry cursor read from a cursor ledger, imported (its chain: partitions and a
/// marker) and flushed again (its snapshot), then a bit flipped in each record of the chain
/// and of the snapshot, with its frame's CRC recomputed or not: the open either refuses the
/// directory as damage, as `verify` does, or recovers exactly the acks flushed (the snapshot,
/// which is the cursor's state); never more. A flipped snapshot is always refused by both.
#[test]
fn damage_to_an_imports_chain_or_the_snapshot_after_it_never_recovers_more_than_flushed() {
    use ackstore::internals::format::journal::RecordKind;
    on_each_host(|host| {
        let (disk, positions, acked) = legacy(host);
        let single = single_form();
        let hosted = open_hosted(host, Arc::new(disk.clone()), &single).unwrap();
        let cursor = hosted.open_cursor("sub", earliest()).unwrap();
        let mut want = acked.clone();
        for p in [positions[5], positions[8]] {
            cursor.ack(p).unwrap();
            cursor.flush().unwrap();
            want.insert(p);
        }
        let want = with_prefix(&want, &positions);
        drop(cursor);
        hosted.close().unwrap();
        let base = disk.durable_image();
        let mut targets = Vec::new();
        for name in base.list_prefix("journal-").unwrap() {
            let bytes = base.live_bytes(&name).unwrap();
            for r in support::mutate::records_of(&bytes) {
                if matches!(
                    r.kind,
                    RecordKind::Marker | RecordKind::Partition | RecordKind::Snapshot
                ) {
                    targets.push((name.clone(), r.offset, r.len, r.kind));
                }
            }
        }
        let kinds: BTreeSet<String> = targets.iter().map(|t| format!("{:?}", t.3)).collect();
        assert_eq!(
            kinds.len(),
            3,
            "{host:?}: the chain and the snapshot: {targets:?}"
        );
        for (name, offset, len, kind) in targets {
            for (at, reframe) in [(16, true), (len / 2, true), (len / 2, false), (len, false)] {
                let what = format!("{host:?}: {kind:?} at {offset}, bit {at}, reframed {reframe}");
                let image = base.durable_image();
                flip_a_payload_bit(&image, (&name, offset), at, reframe);
                let sound = verify(&image).is_sound();
                let opened = open_hosted(host, Arc::new(image.clone()), &single).and_then(|h| {
                    let cursor = h.open_cursor("sub", earliest())?;
                    done(&cursor, &positions)
                });
                match opened {
                    Ok(got) => {
                        assert!(kind != RecordKind::Snapshot, "{what}: opened");
                        assert_eq!(got, want, "{what}");
                    }
                    Err(ackstore::Error::Corrupted { .. }) => assert!(!sound, "{what}"),
                    Err(e) => panic!("{what}: {e}"),
                }
            }
        }
    });
}

/// A cursor read from a cursor ledger holding more ack ranges than the single-entry form's cap,
/// opened for that form: the import (its first flush) commits every range as its chain; the
/// next flush meets the cap. Under the error policy it fails and writes nothing, so a reopen
/// recovers exactly what the import flushed; under the warn policy it commits the lowest
/// ranges, counts the cut, and a reopen recovers those, never an ack nobody made.
#[test]
fn over_the_range_cap_an_import_keeps_every_range_and_the_next_flush_applies_the_policy() {
    use ackstore::OverflowPolicy;
    on_each_host(|host| {
        for policy in [OverflowPolicy::Error, OverflowPolicy::Warn] {
            let what = format!("{host:?}, {policy:?}");
            let (disk, positions, acked) = legacy(host);
            let mut single = single_form();
            single.cursor.max_ranges_single_entry = 10;
            single.cursor.on_single_entry_overflow = policy;
            let hosted = open_hosted(host, Arc::new(disk.clone()), &single).unwrap();
            let cursor = hosted.open_cursor("sub", earliest()).unwrap();
            let mut imported = acked.clone();
            imported.insert(positions[5]);
            cursor.ack(positions[5]).unwrap();
            cursor.flush().unwrap();
            assert_eq!(
                cursor.stats().unwrap().persist.cursor_ledger,
                None,
                "{what}"
            );
            let mut truth = imported.clone();
            truth.insert(positions[8]);
            cursor.ack(positions[8]).unwrap();
            let flushed = cursor.flush();
            let stats = cursor.stats().unwrap().persist;
            match policy {
                OverflowPolicy::Error => assert!(
                    matches!(flushed, Err(ackstore::Error::LimitExceeded { .. })),
                    "{what}: {flushed:?}"
                ),
                _ => {
                    flushed.unwrap();
                    assert!(stats.ranges_cut > 0, "{what}: {stats:?}");
                }
            }
            drop(cursor);
            let image = disk.durable_image();
            drop(hosted);
            let report = verify(&image);
            assert!(report.is_sound(), "{what}: {report}");
            let hosted = open_hosted(host, Arc::new(image), &single).unwrap();
            let cursor = hosted.open_cursor("sub", earliest()).unwrap();
            let got = done(&cursor, &positions).unwrap();
            match policy {
                OverflowPolicy::Error => {
                    assert_eq!(got, with_prefix(&imported, &positions), "{what}");
                }
                _ => {
                    assert!(got.is_subset(&with_prefix(&truth, &positions)), "{what}");
                    assert!(got.len() < imported.len(), "{what}: the cut ranges");
                }
            }
        }
    });
}

// A cursor read from a cursor ledger before its first write: every committed sample's cursors
// opened, looked at and closed without a write keep their ledger and their acks (closing drops
// the pending import, never the state it reads; opening writes nothing, whatever the ack
// memory), and the first write of a later open moves them into the journal exactly once.

/// The config the sample's cursors were last written with.
fn sample_config(sample: &support::samples::LedgerSample) -> LedgerConfig {
    let mut config = support::topic::config(sample.shape.1);
    if let Some(lru) = sample.partial.and_then(|p| p.lru) {
        config.cursor.lru_capacity_bytes = lru;
    }
    config
}

fn open_sample(sample: &support::samples::LedgerSample, disk: &MemStorage) -> Hosted {
    open_hosted(sample.host, Arc::new(disk.clone()), &sample_config(sample)).unwrap()
}

/// Whether each of those ledgers is still a ledger file of the topic.
fn ledgers_present(
    sample: &support::samples::LedgerSample,
    hosted: &Hosted,
    disk: &MemStorage,
) -> bool {
    let ids = hosted.entry_log().unwrap().ledger_ids();
    record_ledgers(sample.host, disk)
        .values()
        .all(|l| l.is_some_and(|l| ids.contains(&l)))
}

/// Checks that cursor `name` holds exactly the sample's acks (`extra` too) and, for `sub`, its
/// partial entries.
fn check(
    sample: &support::samples::LedgerSample,
    cursor: &Cursor,
    name: &str,
    extra: &[Position],
    what: &str,
) {
    let mut want = sample.done(name);
    want.extend(extra);
    let positions = sample.positions();
    // What mark-delete then covers.
    let prefix: Vec<Position> = positions
        .iter()
        .copied()
        .take_while(|p| want.contains(p))
        .collect();
    want.extend(prefix);
    assert_eq!(done(cursor, &positions).unwrap(), want, "{what}");
    if name != "sub" {
        return;
    }
    let Some(partial) = sample.partial else {
        return;
    };
    for p in sample.batch().into_iter().filter(|p| !extra.contains(p)) {
        for i in 0..partial.batch {
            assert_eq!(
                cursor.is_batch_index_acked(p, i).unwrap(),
                partial.indexes.contains(&i),
                "{what}: {p} message {i}"
            );
        }
    }
}

/// The first write of cursor `name` of `sample`'s topic `hosted` on `disk` (after its ack of
/// `extra`): a flush, which moves it into the journal; then a reopen of the durable image with
/// `config`, which finds the sample's acks and `extra` there. Returns the image.
fn import_and_reopen(
    sample: &support::samples::LedgerSample,
    config: &LedgerConfig,
    (hosted, cursor): (Hosted, Cursor),
    disk: &MemStorage,
    (name, extra): (&str, Position),
    what: &str,
) -> MemStorage {
    cursor.flush().unwrap();
    assert_eq!(
        cursor.stats().unwrap().persist.cursor_ledger,
        None,
        "{what}"
    );
    check(sample, &cursor, name, &[extra], &format!("{what}: moved"));
    drop(cursor);
    hosted.close().unwrap();
    let image = disk.durable_image();
    let hosted = open_hosted(sample.host, Arc::new(image.clone()), config).unwrap();
    let cursor = hosted.open_cursor(name, earliest()).unwrap();
    let stats = cursor.stats().unwrap();
    assert_eq!(stats.persist.cursor_ledger, None, "{what}: reopened");
    check(
        sample,
        &cursor,
        name,
        &[extra],
        &format!("{what}: reopened"),
    );
    drop(cursor);
    hosted.close().unwrap();
    image
}

/// Every cursor of every sample: opened, read (acks, stats, properties, epoch) and closed with
/// no write, twice over, keeps its cursor ledger named and on disk and `verify` clean; the
/// topic's next open finds the same acks, and the first write then moves the cursor into the
/// journal with exactly the sample's acks and the write, which a reopen finds again.
#[test]
fn a_ledger_cursor_closed_before_its_first_write_keeps_its_ledger_and_imports_later() {
    for sample in support::samples::ledger_samples() {
        let positions = sample.positions();
        for c in sample.cursors {
            let name = c.name;
            let what = format!("{}, cursor {name}", sample.name);
            let disk = sample.disk();
            let before = record_ledgers(sample.host, &disk);
            assert!(before.values().all(Option::is_some), "{what}");
            for round in 0..2 {
                let hosted = open_sample(&sample, &disk);
                let cursor = hosted.open_cursor(name, earliest()).unwrap();
                let stats = cursor.stats().unwrap();
                assert!(
                    stats.persist.cursor_ledger.is_some(),
                    "{what}: {round}: {stats:?}"
                );
                let _ = cursor.properties().unwrap();
                let _ = cursor.epoch().unwrap();
                check(
                    &sample,
                    &cursor,
                    name,
                    &[],
                    &format!("{what}: read {round}"),
                );
                let after = cursor.stats().unwrap();
                assert!(
                    after.persist.cursor_ledger.is_some(),
                    "{what}: {round}: reads imported it: {after:?}"
                );
                cursor.close().unwrap();
                assert!(ledgers_present(&sample, &hosted, &disk), "{what}: {round}");
                hosted.close().unwrap();
                assert_eq!(
                    record_ledgers(sample.host, &disk),
                    before,
                    "{what}: {round}"
                );
                let report = ackstore::check::verify(&(Arc::new(disk.durable_image()) as _));
                let report = report.unwrap();
                assert!(report.is_sound(), "{what}: {round}: {report}");
            }
            // The first write after those opens.
            let want = sample.done(name);
            let extra = *positions.iter().find(|p| !want.contains(p)).unwrap();
            let hosted = open_sample(&sample, &disk);
            let cursor = hosted.open_cursor(name, earliest()).unwrap();
            check(&sample, &cursor, name, &[], &format!("{what}: before"));
            cursor.ack(extra).unwrap();
            let image = import_and_reopen(
                &sample,
                &sample_config(&sample),
                (hosted, cursor),
                &disk,
                (name, extra),
                &what,
            );
            let moved = record_ledgers(sample.host, &image);
            assert!(moved.values().any(Option::is_none), "{what}: {moved:?}");
        }
    }
}

/// The first writes of every cursor of the samples with several cursors, at once from threads,
/// each racing a close of the same cursor from another thread and, on a store, a flush of all:
/// every flush or close that returned `Ok` keeps its ack, and a reopen finds each cursor's
/// sample acks plus its ack, imported once (no record names a ledger).
#[test]
fn first_writes_racing_closes_and_a_topic_flush_import_each_ledger_cursor_once() {
    use std::sync::Barrier;
    for name in [
        "cursor-ledger-three",
        "cursor-ledger-store-two",
        "cursor-ledger-alone-two",
    ] {
        let sample = support::samples::ledger_sample(name);
        let positions = sample.positions();
        let disk = sample.disk();
        let hosted = open_sample(&sample, &disk);
        let cursors: Vec<(&str, Cursor, Position)> = sample
            .cursors
            .iter()
            .map(|c| {
                let cursor = hosted.open_cursor(c.name, earliest()).unwrap();
                let want = sample.done(c.name);
                let extra = *positions.iter().find(|p| !want.contains(p)).unwrap();
                cursor.ack(extra).unwrap();
                (c.name, cursor, extra)
            })
            .collect();
        let start = Barrier::new(2 * cursors.len() + 1);
        std::thread::scope(|s| {
            for (_, cursor, _) in &cursors {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    match cursor.flush() {
                        Ok(()) | Err(ackstore::Error::Closed) => {}
                        Err(e) => panic!("{name}: flush: {e}"),
                    }
                });
                s.spawn(move || {
                    start.wait();
                    cursor.close().unwrap();
                });
            }
            start.wait();
            if let Some(store) = &hosted.store {
                store.flush_all().unwrap();
            }
        });
        hosted.close().unwrap();
        let image = disk.durable_image();
        let report = ackstore::check::verify(&(Arc::new(image.clone()) as _)).unwrap();
        assert!(report.is_sound(), "{name}: {report}");
        let hosted = open_sample(&sample, &image);
        for (cursor_name, _, extra) in &cursors {
            let what = format!("{name}, cursor {cursor_name}");
            let cursor = hosted.open_cursor(cursor_name, earliest()).unwrap();
            assert_eq!(
                cursor.stats().unwrap().persist.cursor_ledger,
                None,
                "{what}"
            );
            check(&sample, &cursor, cursor_name, &[*extra], &what);
        }
        hosted.close().unwrap();
        let ledgers = record_ledgers(sample.host, &image);
        assert!(ledgers.values().all(Option::is_none), "{name}: {ledgers:?}");
    }
}

/// Every cursor of every sample opened with ack memory for almost nothing (every partition and
/// partial entry evicted after each touch, loaded back from the ledger at the next): its reads
/// (every ack, every partial entry, the ranges, the backlog) answer the sample's state and, but
/// for a single-entry snapshot's, write nothing; its first write then, batch-index acks completing a cold partial entry for `sub` (an
/// ack of an entry otherwise), moves it into the journal with the sample's state and the ack.
#[test]
fn a_ledger_cursor_under_a_tiny_ack_memory_reads_without_writing_and_imports_at_its_first_write() {
    for sample in support::samples::ledger_samples() {
        let positions = sample.positions();
        let mut config = sample_config(&sample);
        config.cursor.lru_capacity_bytes = 1;
        for c in sample.cursors {
            let name = c.name;
            let what = format!("{}, cursor {name}, tiny", sample.name);
            let disk = sample.disk();
            let hosted = open_hosted(sample.host, Arc::new(disk.clone()), &config).unwrap();
            let cursor = hosted.open_cursor(name, earliest()).unwrap();
            for _ in 0..2 {
                check(&sample, &cursor, name, &[], &what);
                let _ = cursor.acked_ranges().unwrap();
                let _ = cursor.backlog().unwrap();
                let _ = cursor.first_unacked().unwrap();
            }
            // A snapshot's partitions have no entry of their own to be loaded back from: they
            // stay unsaved in memory, and the open imports them to keep within the budget.
            if sample.mode == ackstore::PersistMode::MultiEntry {
                let stats = cursor.stats().unwrap();
                assert!(stats.persist.cursor_ledger.is_some(), "{what}: {stats:?}");
                assert_eq!(stats.persist.entries_written, 0, "{what}: {stats:?}");
            }
            let partial = sample.batch();
            let extra = match (sample.partial, partial.first()) {
                (Some(p), Some(&at)) if name == "sub" => {
                    // Every message it lacks: the entry is then acknowledged whole.
                    for index in (0..p.batch).filter(|i| !p.indexes.contains(i)) {
                        cursor.ack_batch_index(at, index, p.batch).unwrap();
                    }
                    at
                }
                _ => {
                    let want = sample.done(name);
                    let p = *positions.iter().find(|p| !want.contains(p)).unwrap();
                    cursor.ack(p).unwrap();
                    p
                }
            };
            import_and_reopen(
                &sample,
                &config,
                (hosted, cursor),
                &disk,
                (name, extra),
                &what,
            );
        }
    }
}

/// A ledger cursor read from a single-entry snapshot of more ranges than the range cap of the
/// single-entry form it is opened in is decided at the open: under `OverflowPolicy::Error` the
/// open is refused with `LimitExceeded`, writing nothing (the ledger stays the cursor's, and the
/// multi-entry form opens it with every ack); under `Warn` it opens with every ack, its import
/// keeps them all, and the flush after the import keeps the lowest ranges, counting the cut.
#[test]
fn a_single_entry_ledger_cursor_over_the_range_cap_is_decided_at_its_open_on_each_host() {
    on_each_host(|host| {
        let sample = support::samples::ledger_sample_on(host, "-single");
        let positions = sample.positions();
        let acked = sample.done("sub");
        // Every third entry: one range each (40).
        let ranges = acked.len() as u64;
        let mut config = single_form();
        config.cursor.max_ranges_single_entry = 10;

        let disk = sample.disk();
        let hosted = open_hosted(host, Arc::new(disk.clone()), &config).unwrap();
        let refused = hosted.open_cursor("sub", earliest()).unwrap_err();
        assert!(
            matches!(refused, ackstore::Error::LimitExceeded { .. }),
            "{host:?}: {refused}"
        );
        assert!(
            refused
                .to_string()
                .contains(&format!("{ranges} ack ranges")),
            "{host:?}: {refused}"
        );
        hosted.close().unwrap();
        assert!(
            record_ledgers(host, &disk).values().all(Option::is_some),
            "{host:?}: the refused open moved the cursor"
        );
        let hosted = open(host, Arc::new(disk.clone())).unwrap();
        let cursor = hosted.open_cursor("sub", earliest()).unwrap();
        assert_eq!(done(&cursor, &positions).unwrap(), acked, "{host:?}");
        drop(cursor);
        hosted.close().unwrap();

        config.cursor.on_single_entry_overflow = ackstore::OverflowPolicy::Warn;
        let disk = sample.disk();
        let hosted = open_hosted(host, Arc::new(disk.clone()), &config).unwrap();
        let cursor = hosted.open_cursor("sub", earliest()).unwrap();
        assert_eq!(done(&cursor, &positions).unwrap(), acked, "{host:?}");
        // Entries 119 and 117 join the ranges of 118: the count stays.
        let mut want = acked.clone();
        for i in [119, 117] {
            cursor.ack(positions[i]).unwrap();
            cursor.flush().unwrap();
            want.insert(positions[i]);
            assert_eq!(done(&cursor, &positions).unwrap(), want, "{host:?}");
        }
        let stats = cursor.stats().unwrap().persist;
        assert_eq!(stats.cursor_ledger, None, "{host:?}");
        assert_eq!(
            (stats.overflows, stats.ranges_cut),
            (1, ranges - 10),
            "{host:?}"
        );
        drop(cursor);
        hosted.close().unwrap();
        let hosted = open_hosted(host, Arc::new(disk.durable_image()), &config).unwrap();
        let cursor = hosted.open_cursor("sub", earliest()).unwrap();
        let kept = cursor.acked_ranges().unwrap();
        assert_eq!(kept.len(), 10, "{host:?}: {kept:?}");
        let recovered = done(&cursor, &positions).unwrap();
        let lowest: BTreeSet<Position> = want.iter().copied().take(10).collect();
        assert_eq!(recovered, lowest, "{host:?}");
    });
}

/// A copy of the sample [`legacy`] keeps for `host` whose cursor ledger (sealed first when
/// `sealed`, as an owner's open proves a seal) is cut short by `cut` bytes: the disk, the
/// ledger, its file's name and length before the cut, the entries' positions and `sub`'s acks.
fn cut_cursor_ledger(
    host: Host,
    sealed: bool,
    cut: u64,
) -> (MemStorage, u64, String, Vec<Position>, BTreeSet<Position>) {
    let (disk, positions, acked) = legacy(host);
    let ledger = record_ledgers(host, &disk)
        .values()
        .flatten()
        .copied()
        .next()
        .expect("sub's cursor ledger");
    let storage = topic_storage(host, &disk);
    if sealed {
        let log = ackstore::internals::log::EntryLog::open(storage.clone(), Default::default())
            .expect("log");
        log.seal(ledger).expect("seal");
        assert!(log.ledger_info(ledger).expect("info").sealed);
    }
    let name = ledger_file(host, &disk, ledger);
    let file = storage.open(&name).expect("open");
    let len = file.size().expect("size");
    file.set_len(len - cut).expect("cut");
    file.sync_data().expect("sync");
    (disk, ledger, name, positions, acked)
}

/// A sealed cursor ledger (the seal's proof claims the whole file) cut short anywhere: its
/// footer only, or into its frames. No power cut leaves that, and the states it cut were
/// flushed: the cursor's open refuses with `Corrupted` naming the ledger instead of walking
/// back to an older state (which lost every ack here), and `verify` reports it as damage.
#[test]
fn a_sealed_cursor_ledger_cut_short_is_refused_by_the_cursors_open_and_reported_by_verify() {
    on_each_host(|host| {
        for cut in [1, 36, 60, 100] {
            let (disk, ledger, name, _, _) = cut_cursor_ledger(host, true, cut);
            let what = format!("{host:?}, {name} cut by {cut}");
            let report = verify(&disk);
            assert!(
                !report.is_sound() && report.findings.iter().any(|f| f.file.ends_with(&name)),
                "{what}: {report}"
            );
            let hosted = open(host, Arc::new(disk.clone())).expect("the topic opens");
            match hosted.open_cursor("sub", earliest()) {
                Err(ackstore::Error::Corrupted {
                    place: ackstore::CorruptionPlace::Ledger { ledger: named, .. },
                    kind: ackstore::CorruptionKind::Truncated,
                }) if named == ledger => {}
                other => panic!("{what}: {:?}", other.map(|_| "opened")),
            }
            hosted.close().expect("close");
        }
    });
}

/// An unsealed cursor ledger (the samples': nothing records that its last entry was synced) cut
/// short anywhere reads as a torn tail, which a power cut leaves: the format cannot tell the two
/// apart. `verify` lists it as a torn tail (sound), and the cursor opens from an older state, or
/// from its record's mark-delete with no holes: never more acked than the sample.
#[test]
fn an_unsealed_cursor_ledger_cut_short_reads_as_a_torn_tail_and_never_adds_an_ack() {
    on_each_host(|host| {
        for cut in [1, 36, 100] {
            let (disk, _, name, positions, acked) = cut_cursor_ledger(host, false, cut);
            let what = format!("{host:?}, {name} cut by {cut}");
            let report = verify(&disk);
            assert!(
                report.is_sound()
                    && report
                        .findings
                        .iter()
                        .any(|f| f.file.ends_with(&name) && f.torn_tail),
                "{what}: {report}"
            );
            let hosted = open(host, Arc::new(disk.clone())).expect("the topic opens");
            let cursor = hosted.open_cursor("sub", earliest()).expect("cursor");
            let got = done(&cursor, &positions).expect("acks");
            let truth = with_prefix(&acked, &positions);
            assert!(got.is_subset(&truth), "{what}: more acked than the sample");
            drop(cursor);
            hosted.close().expect("close");
        }
    });
}

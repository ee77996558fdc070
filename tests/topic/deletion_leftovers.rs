//! A cursor's deletion cut short by a power cut at each of its storage operations, on each host:
//! what it leaves behind (a tombstone, the files of a record whose delete did not finish, a
//! temporary file) is reported by `verify` as leftovers, never as damage; the next open removes
//! it, even one that writes no record (a store's topic after a clean restart), and `verify` then
//! reports nothing; through two reopens the cursors are what the model allows (the deleted one
//! gone or whole, the other untouched). A power cut or a failing call at each step of the sweep
//! itself leaves what the next open finishes, and loses no flushed ack.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::{MemStorage, Position, Storage};
use support::crash::{Points, cut_everywhere_after};
use support::topic::{Host, Hosted, append_n, config, earliest, on_each_host, open_hosted};

const PER_LEDGER: u64 = 4;

/// The files a cut-short write or deletion may leave: temporary files and tombstones (empty
/// record files).
fn leftover_files(disk: &MemStorage) -> BTreeSet<String> {
    disk.list()
        .expect("list")
        .into_iter()
        .filter(|f| {
            f.ends_with(".meta.tmp")
                || (f.ends_with(".meta") && disk.live_bytes(f).is_some_and(|b| b.is_empty()))
        })
        .collect()
}

/// The files `report` names as metadata leftovers: what the topic's next open removes.
fn leftovers_reported(report: &ackstore::check::Verification) -> BTreeSet<String> {
    report
        .unused
        .iter()
        .filter(|f| f.place == "metadata record")
        .map(|f| f.file.clone())
        .collect()
}

/// `verify` on `disk`: no damage, every tombstone reported as a metadata leftover, and every
/// file so reported still there. Returns the files reported.
fn verified_leftovers(disk: &MemStorage, what: &str) -> BTreeSet<String> {
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let report = ackstore::check::verify(&storage).expect("verify");
    assert!(report.is_sound(), "{what}: {report}");
    let reported = leftovers_reported(&report);
    let names: BTreeSet<String> = disk.list().expect("list").into_iter().collect();
    assert!(
        reported.is_subset(&names),
        "{what}: leftovers reported that are not there: {reported:?}"
    );
    let tombstones: BTreeSet<String> = leftover_files(disk)
        .into_iter()
        .filter(|f| f.ends_with(".meta"))
        .collect();
    assert!(
        tombstones.is_subset(&reported),
        "{what}: tombstones not reported: {:?}\n{report}",
        tombstones.difference(&reported).collect::<Vec<_>>()
    );
    reported
}

/// Reopens `disk` as `host`: cursor `b` holds its flushed ack, cursor `a` is gone (it must be
/// once its delete answered `Ok`) or holds its flushed ack; closes.
fn reopen_and_check(host: Host, disk: &MemStorage, first: Position, deleted: bool) {
    let topic = open_hosted(host, Arc::new(disk.clone()), &config(PER_LEDGER)).expect("reopen");
    let names = topic.cursor_names();
    assert!(names.contains(&"b".to_string()), "cursor b lost: {names:?}");
    let a = names.contains(&"a".to_string());
    assert!(
        !(deleted && a),
        "cursor a came back after its delete answered Ok"
    );
    let mut kept = vec!["b"];
    if a {
        kept.push("a");
    }
    for name in kept {
        let cursor = topic.open_cursor(name, earliest()).expect("cursor");
        assert!(
            cursor.is_acked(first).expect("is_acked"),
            "cursor {name} lost its flushed ack"
        );
    }
    topic.close().expect("close");
}

/// Cursors `a` and `b` of the topic `host` keeps on `disk`, each holding its flushed ack on
/// the first of 5 entries appended; returns that entry, the topic closed.
fn flushed_cursors(host: Host, disk: &MemStorage) -> Position {
    let topic = open_hosted(host, Arc::new(disk.clone()), &config(PER_LEDGER)).expect("open");
    let first = append_n(&topic, 5)[0];
    for name in ["a", "b"] {
        let cursor = topic.open_cursor(name, earliest()).expect("cursor");
        cursor.ack(first).expect("ack");
        cursor.flush().expect("flush");
    }
    topic.close().expect("close");
    first
}

/// Two rounds of [`reopen_and_check`] on `image`, after each of which no leftover is on the
/// disk and `verify` reports none.
fn reopen_twice_leaving_nothing(
    host: Host,
    image: &MemStorage,
    (first, deleted): (Position, bool),
    what: &str,
) {
    for round in 0..2 {
        reopen_and_check(host, image, first, deleted);
        let what = format!("{what}, reopen {round}");
        let left = leftover_files(image);
        assert!(left.is_empty(), "{what}: left {left:?}");
        let reported = verified_leftovers(image, &what);
        assert!(reported.is_empty(), "{what}: reported {reported:?}");
    }
}

#[test]
fn a_cursor_deletion_cut_at_each_step_leaves_leftovers_verify_reports_and_the_next_open_removes() {
    on_each_host(|host| {
        let mut seen = 0;
        cut_everywhere_after(
            Points::every_in_release(3),
            |disk| flushed_cursors(host, disk),
            |disk, first| {
                let deleted = open_hosted(host, Arc::new(disk.clone()), &config(PER_LEDGER))
                    .and_then(|topic| topic.delete_cursor("a"));
                (first, deleted.is_ok())
            },
            |disk, cut, (first, deleted)| {
                let image = disk.durable_image();
                let what = format!("{host:?} {cut:?}");
                seen += verified_leftovers(&image, &what).len();
                reopen_twice_leaving_nothing(host, &image, (first, deleted), &what);
            },
        );
        assert!(seen > 0, "{host:?}: no cut left a leftover");
    });
}

/// The durable image of a disk where cursors `a` and `b` hold their flushed ack on the first
/// entry and `a`'s deletion was cut short with the most files of its record left (its tombstone
/// and a version below it, or else just the tombstone), and that first entry.
fn cut_short_deletion_image(host: Host) -> (MemStorage, Position) {
    let mut best: Option<(usize, MemStorage, Position)> = None;
    for n in 1.. {
        let disk = MemStorage::new();
        let first = flushed_cursors(host, &disk);
        disk.fail_after(Some(n));
        let deleted = open_hosted(host, Arc::new(disk.clone()), &config(PER_LEDGER))
            .and_then(|topic| topic.delete_cursor("a"));
        let image = disk.durable_image();
        let Some(tombstone) = leftover_files(&image)
            .into_iter()
            .find(|f| f.ends_with(".meta"))
        else {
            if deleted.is_ok() {
                break;
            }
            continue;
        };
        let record = tombstone.split('.').next().expect("record name").to_owned();
        let files = image
            .list()
            .expect("list")
            .into_iter()
            .filter(|f| f.starts_with(&format!("{record}.")))
            .count();
        if best.as_ref().is_none_or(|(most, _, _)| files > *most) {
            best = Some((files, image, first));
        }
        if deleted.is_ok() {
            break;
        }
    }
    let (_, image, first) = best.expect("no cut of the deletion left a tombstone");
    (image, first)
}

/// Writes every file of `image` into `disk`, durable.
fn copy_into(image: &MemStorage, disk: &MemStorage) {
    for name in image.list().expect("list") {
        drop(disk.create(&name).expect("create"));
        disk.set_bytes(&name, image.live_bytes(&name).expect("bytes"))
            .expect("set bytes");
    }
    disk.sync_dir().expect("sync");
}

#[test]
fn a_power_cut_or_a_failing_removal_at_each_step_of_the_opens_sweep_keeps_every_flushed_ack() {
    on_each_host(|host| {
        let (leftover, first) = cut_short_deletion_image(host);
        let what = format!("{host:?}, prepared");
        assert!(!verified_leftovers(&leftover, &what).is_empty(), "{what}");
        let mut interrupted = 0;
        let clean = cut_everywhere_after(
            Points::EVERY,
            |disk| copy_into(&leftover, disk),
            |disk, ()| {
                open_hosted(host, Arc::new(disk.clone()), &config(PER_LEDGER))
                    .and_then(Hosted::close)
                    .is_ok()
            },
            |disk, cut, opened| {
                interrupted += usize::from(!opened);
                let image = disk.durable_image();
                // A power cut: the durable image; a failing removal (or any failing
                // operation) the process lives through: the live directory, the power back.
                disk.fail_after(None);
                disk.break_lock();
                for (state, image) in [("power cut", image), ("failed call", disk.clone())] {
                    let what = format!("{host:?} {cut:?} {state}");
                    verified_leftovers(&image, &what);
                    reopen_twice_leaving_nothing(host, &image, (first, false), &what);
                }
            },
        );
        assert!(clean.result, "{host:?}: the open without a cut failed");
        assert!(interrupted > 0, "{host:?}: no cut interrupted the open");
    });
}

/// A live cursor's record at two versions (its first and a claim's durable link), each emptied
/// in turn so the highest may read as a tombstone, on each host: `verify` finds damage exactly
/// when the open refuses the topic; an open that goes on keeps every flushed ack (the cursors
/// live in the journal), and once it and a metadata write ran, `verify` reports no leftover.
#[test]
fn a_live_cursor_record_emptied_to_look_like_a_tombstone_is_judged_alike_by_verify_and_open() {
    on_each_host(|host| {
        let disk = MemStorage::new();
        let first = flushed_cursors(host, &disk);
        let version_1 = disk
            .list()
            .expect("list")
            .into_iter()
            .find(|f| f.ends_with("cursor-0.00000000000000000001.meta"))
            .expect("cursor a's record");
        // A claim's link made durable: the bytes of version 1 under version 2's name, the
        // version a tombstone over version 1 would take.
        let version_2 = version_1.replace(".00000000000000000001.", ".00000000000000000002.");
        drop(disk.create(&version_2).expect("create"));
        let bytes = disk.live_bytes(&version_1).expect("bytes");
        disk.set_bytes(&version_2, bytes).expect("set bytes");
        disk.sync_dir().expect("sync");
        let records = [version_1, version_2];
        assert!(!records.is_empty(), "{host:?}: no record of cursor a");
        for emptied in &records {
            let image = disk.durable_image();
            image.set_bytes(emptied, Vec::new()).expect("empty");
            let what = format!("{host:?}, {emptied} emptied of {records:?}");
            let storage: Arc<dyn Storage> = Arc::new(image.clone());
            let report = ackstore::check::verify(&storage).expect("verify");
            let opened = open_hosted(host, Arc::new(image.clone()), &config(PER_LEDGER));
            let opened = match opened {
                Ok(topic) => topic,
                Err(e) => {
                    assert!(
                        !report.is_sound(),
                        "{what}: open refused ({e}), verify: {report}"
                    );
                    continue;
                }
            };
            assert!(
                report.is_sound(),
                "{what}: the open went on, verify: {report}"
            );
            for name in ["a", "b"] {
                match opened.open_cursor(name, earliest()) {
                    Ok(cursor) => assert!(
                        cursor.is_acked(first).expect("is_acked"),
                        "{what}: cursor {name} lost its flushed ack"
                    ),
                    Err(e) => assert!(name == "a", "{what}: cursor {name}: {e}"),
                }
            }
            // A topic alone's open leaves a listed cursor's files to its first metadata
            // write (a cursor created here), as verify's finding says.
            drop(opened.open_cursor("c", earliest()).expect("cursor c"));
            opened.close().expect("close");
            // What verify called leftovers the open or that write removed.
            let reported = verified_leftovers(&image, &what);
            assert!(reported.is_empty(), "{what}: after the open: {reported:?}");
        }
    });
}

/// A tombstone linked over the highest version of cursor `a`'s record while the topic record
/// still lists `a`, on each host: on a store a deletion cut short after the tombstone leaves
/// exactly that (the record goes before the table entry), on a topic alone only damage does
/// (its table drops the cursor first). Every file `verify` says the next open removes is gone
/// once the topic opened (before any write), every other tombstone is still there, and both
/// cursors keep their flushed acks (their state is in the journal).
#[test]
fn a_tombstone_over_a_listed_cursors_record_is_removed_by_the_open_exactly_when_verify_says_so() {
    on_each_host(|host| {
        let disk = MemStorage::new();
        let first = flushed_cursors(host, &disk);
        let names = disk.list().expect("list");
        let top = names
            .iter()
            .filter(|f| f.contains("cursor-0.") && f.ends_with(".meta"))
            .max()
            .expect("cursor a's record")
            .clone();
        let digits = top
            .trim_end_matches(".meta")
            .rsplit('.')
            .next()
            .expect("version");
        let version: u64 = digits.parse().expect("version digits");
        let tombstone = top.replace(&format!(".{digits}."), &format!(".{:020}.", version + 1));
        drop(disk.create(&tombstone).expect("create"));
        disk.sync_dir().expect("sync");
        let image = disk.durable_image();
        let what = format!("{host:?}, {tombstone} over {top}");
        let storage: Arc<dyn Storage> = Arc::new(image.clone());
        let report = ackstore::check::verify(&storage).expect("verify");
        let removed_by_open = leftovers_reported(&report);
        let topic = open_hosted(host, Arc::new(image.clone()), &config(PER_LEDGER))
            .unwrap_or_else(|e| panic!("{what}: open refused ({e}), verify: {report}"));
        assert!(
            report.is_sound(),
            "{what}: the open went on, verify: {report}"
        );
        let left: BTreeSet<String> = image.list().expect("list").into_iter().collect();
        let kept: Vec<&String> = removed_by_open.intersection(&left).collect();
        assert!(
            kept.is_empty(),
            "{what}: verify said the open removes {kept:?}\n{report}"
        );
        let unreported: Vec<String> = leftover_files(&image)
            .into_iter()
            .filter(|f| !report.unused.iter().any(|u| u.file == *f))
            .collect();
        assert!(
            unreported.is_empty(),
            "{what}: not reported {unreported:?}\n{report}"
        );
        for name in ["a", "b"] {
            let cursor = topic.open_cursor(name, earliest()).expect("cursor");
            assert!(
                cursor.is_acked(first).expect("is_acked"),
                "{what}: cursor {name} lost its flushed ack"
            );
        }
        drop(topic.open_cursor("c", earliest()).expect("cursor c"));
        topic.close().expect("close");
        let reported = verified_leftovers(&image, &what);
        assert!(reported.is_empty(), "{what}: after a write: {reported:?}");
    });
}

//! A cursor the topic record's cursor table lists whose cursor record is gone, on a topic opened
//! alone, the journal it hosts holding nothing of that cursor. Such a topic writes a cursor's
//! record before its table lists it, and drops the cursor from its table before deleting the
//! record, so no power cut leaves that state: it is damage. `verify` reports it and the topic's
//! open (or the cursor's open, for a record lost while the topic is open) refuses it with
//! `Corrupted` naming the cursor record, rather than starting the cursor again from the
//! options given then: started at `Latest`, it would acknowledge every entry appended since its
//! creation. A power cut at every step of a cursor's creation and deletion with entries
//! appended in between leaves only states both accept, and the cursor never acknowledges an
//! entry appended after its creation: on a topic alone, and on a store, where a creation or a
//! deletion cut short does leave the cursor listed without its record, and it starts again with
//! nothing acknowledged whatever the options given.

use crate::support;

use std::sync::Arc;

use ackstore::check::Verification;
use ackstore::{CorruptionPlace, Error, InitialPosition, ManagedLedger, MemStorage, Position};
use ackstore::{Storage, internals::cursor::record_name};
use support::crash::{Points, cut_everywhere_after, sound_images};
use support::topic::{Host, append_n, at, config, earliest, on_each_host, open_hosted};

const PER_LEDGER: u64 = 4;

/// What is done to the record of the listed cursor.
#[derive(Debug, Clone, Copy)]
enum Damage {
    /// Every file of the record removed.
    Deleted,
    /// Its newest version emptied: it reads as a deletion's tombstone.
    Emptied,
    /// Its newest version cut in half.
    Truncated,
    /// Its newest version overwritten with zeros, its length kept.
    Zeroed,
}

/// What the test knows of the topic: cursor `b`'s flushed ack on `before[0]`; cursor `a`,
/// created at `Latest` after `before` and never flushed, acknowledges `before` and nothing of
/// `after`, appended since; `a`'s record name.
struct Truth {
    before: Vec<Position>,
    after: Vec<Position>,
    record: String,
}

/// The files of record `record` on `disk`, by ascending version.
fn record_files(disk: &MemStorage, record: &str) -> Vec<String> {
    let mut files: Vec<String> = disk
        .list()
        .expect("list")
        .into_iter()
        .filter(|f| f.starts_with(&format!("{record}.")) && f.ends_with(".meta"))
        .collect();
    files.sort();
    files
}

fn damage(disk: &MemStorage, record: &str, damage: Damage) {
    let files = record_files(disk, record);
    let newest = files.last().expect("a file of the record").clone();
    let bytes = disk.live_bytes(&newest).expect("bytes");
    match damage {
        Damage::Deleted => {
            for f in &files {
                disk.remove(f).expect("remove");
            }
            disk.sync_dir().expect("sync");
        }
        Damage::Emptied => disk.set_bytes(&newest, Vec::new()).expect("empty"),
        Damage::Truncated => disk
            .set_bytes(&newest, bytes[..bytes.len() / 2].to_vec())
            .expect("truncate"),
        Damage::Zeroed => disk.set_bytes(&newest, vec![0; bytes.len()]).expect("zero"),
    }
}

/// The image a power cut leaves of a topic alone on which cursor `b` flushed its ack, cursor
/// `a` was created at `Latest` (never flushed, so its hosted journal holds nothing of it), and
/// entries were appended after.
fn prepared() -> (MemStorage, Truth) {
    let disk = MemStorage::new();
    let topic =
        ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(PER_LEDGER)).expect("open");
    let before = append_n(&topic, 3);
    let b = topic.open_cursor("b", earliest()).expect("cursor b");
    b.ack(before[0]).expect("ack");
    b.flush().expect("flush");
    let a = topic
        .open_cursor("a", at(InitialPosition::Latest, false))
        .expect("cursor a");
    assert_eq!(
        a.mark_delete_position().expect("mark"),
        before.last().copied()
    );
    let after = append_n(&topic, 5);
    let image = disk.durable_image();
    drop(topic);
    let names =
        ManagedLedger::open_with_storage(Arc::new(image.durable_image()), config(PER_LEDGER))
            .expect("open the image")
            .cursor_names();
    assert_eq!(names, ["a", "b"]);
    let truth = Truth {
        before,
        after,
        // Cursor ids are given out in creation order.
        record: record_name(1),
    };
    let report = verify(&image);
    assert!(report.is_sound(), "undamaged: {report}");
    assert!(
        !report
            .journal
            .iter()
            .any(|j| j.cursor.as_deref() == Some("a")),
        "the journal holds cursor a: {report}"
    );
    (image, truth)
}

fn verify(disk: &MemStorage) -> Verification {
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    ackstore::check::verify(&storage).expect("verify")
}

/// Cursor `a` on `topic` (if listed: its mark-delete is returned) acknowledges nothing
/// appended after its creation, nor anything past its mark-delete at creation; cursor `b`
/// keeps its flushed ack.
fn check_cursors(topic: &ManagedLedger, truth: &Truth, what: &str) -> Option<Option<Position>> {
    check_b(topic, truth, what);
    if !topic.cursor_names().contains(&"a".to_owned()) {
        return None;
    }
    let a = topic
        .open_cursor("a", at(InitialPosition::Latest, false))
        .unwrap_or_else(|e| panic!("{what}: cursor a: {e}"));
    let mark = a.mark_delete_position().expect("mark");
    assert!(
        mark <= truth.before.last().copied(),
        "{what}: cursor a's mark-delete {mark:?} past its creation's"
    );
    for &p in &truth.after {
        assert!(
            !a.is_acked(p).expect("is_acked"),
            "{what}: cursor a acknowledges {p}, appended after its creation"
        );
    }
    Some(mark)
}

/// Cursor `b` on `topic` keeps its flushed ack.
fn check_b(topic: &ManagedLedger, truth: &Truth, what: &str) {
    let b = topic.open_cursor("b", earliest()).expect("cursor b");
    assert!(
        b.is_acked(truth.before[0]).expect("is_acked"),
        "{what}: cursor b lost its flushed ack"
    );
}

/// `error` is `Corrupted` naming record `record`.
fn names_record(error: &Error, record: &str) -> bool {
    matches!(error, Error::Corrupted { place: CorruptionPlace::Record(r), .. } if r == record)
}

#[test]
fn a_listed_cursors_record_gone_or_damaged_on_a_topic_alone_is_refused_by_its_open_as_verify_reports_it()
 {
    let (image, truth) = prepared();
    for kind in [
        Damage::Deleted,
        Damage::Emptied,
        Damage::Truncated,
        Damage::Zeroed,
    ] {
        let disk = image.durable_image();
        damage(&disk, &truth.record, kind);
        let what = format!("{} {kind:?}", truth.record);
        let report = verify(&disk);
        let named = report
            .findings
            .iter()
            .any(|f| !f.torn_tail && f.file.starts_with(&format!("{}.", truth.record)));
        assert!(named, "{what}: verify does not name the record: {report}");
        match ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(PER_LEDGER)) {
            Ok(topic) => {
                let _ = check_cursors(&topic, &truth, &what);
                panic!("{what}: the open went on, verify: {report}");
            }
            Err(e) => assert!(
                names_record(&e, &truth.record),
                "{what}: refused with {e:?}, not naming the record"
            ),
        }
        // Refused before any cursor record was deleted: the other cursor's record is there.
        assert!(
            !record_files(&disk, &record_name(0)).is_empty(),
            "{what}: cursor b's record removed"
        );
    }
}

#[test]
fn a_listed_cursors_record_removed_while_its_topic_alone_is_open_is_refused_by_the_cursors_open() {
    let (image, truth) = prepared();
    let disk = image.durable_image();
    let topic =
        ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(PER_LEDGER)).expect("open");
    damage(&disk, &truth.record, Damage::Deleted);
    let report = verify(&disk);
    assert!(!report.is_sound(), "verify: {report}");
    match topic.open_cursor("a", at(InitialPosition::Latest, false)) {
        Ok(a) => {
            let acked: Vec<Position> = (truth.after.iter().copied())
                .filter(|&p| a.is_acked(p).expect("is_acked"))
                .collect();
            panic!("cursor a started again, acknowledging {acked:?}; verify: {report}");
        }
        Err(e) => assert!(names_record(&e, &truth.record), "refused with {e:?}"),
    }
    // Nothing was written for it: the topic still lists it, and its record is still gone.
    assert!(topic.cursor_names().contains(&"a".to_owned()));
    assert!(record_files(&disk, &truth.record).is_empty());
    check_b(&topic, &truth, "the record removed while open");
}

/// A power cut at every storage operation of a topic's open, a cursor's creation at `Latest`,
/// appends, and that cursor's deletion, on each host: each image (durable bytes alone, every
/// unsynced byte kept) is sound for `verify` and opens, and the cursor, when still listed,
/// acknowledges nothing appended after its creation, whatever options its next open is given.
/// On a topic alone no cut leaves it listed without its record; on a store a creation cut short
/// after the table's write, or a deletion cut short after the record's removal, does, and the
/// cursor starts again with nothing acknowledged.
#[test]
fn a_power_cut_at_every_step_of_a_cursors_creation_and_deletion_never_acknowledges_later_entries() {
    on_each_host(|host| {
        let (mut listed, mut restarted) = (0, 0);
        let clean = cut_everywhere_after(
            Points::every_in_release(3),
            |disk| {
                let topic =
                    open_hosted(host, Arc::new(disk.clone()), &config(PER_LEDGER)).expect("open");
                let before = append_n(&topic, 3);
                let b = topic.open_cursor("b", earliest()).expect("cursor b");
                b.ack(before[0]).expect("ack");
                drop(b);
                topic.close().expect("close");
                before
            },
            |disk, before| {
                let mut truth = Truth {
                    before,
                    after: Vec::new(),
                    record: record_name(1),
                };
                let run = (|| {
                    let topic = open_hosted(host, Arc::new(disk.clone()), &config(PER_LEDGER))?;
                    drop(topic.open_cursor("a", at(InitialPosition::Latest, false))?);
                    for _ in 0..5 {
                        truth.after.push(topic.append(b"after")?);
                    }
                    topic.sync()?;
                    topic.delete_cursor("a")?;
                    topic.append(b"last")?;
                    topic.close()
                })();
                (truth, run.is_ok())
            },
            |disk, cut, (truth, finished)| {
                assert_eq!(finished, !cut.interrupted(), "{host:?} {cut:?}");
                let images = sound_images(disk, cut).into_iter().zip(["durable", "torn"]);
                for (storage, image) in images {
                    let what = format!("{host:?} {cut:?}, {image} image");
                    let topic = open_hosted(host, storage, &config(PER_LEDGER))
                        .unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
                    if let Some(mark) = check_cursors(&topic, &truth, &what) {
                        listed += 1;
                        // Created at `Latest` after `before`: only a restart has no mark.
                        restarted += usize::from(mark.is_none());
                    }
                    topic.close().expect("close");
                }
            },
        );
        assert!(
            clean.result.1,
            "{host:?}: the workload without a cut failed"
        );
        assert!(listed > 0, "{host:?}: no cut left cursor a listed");
        match host {
            Host::Alone => assert_eq!(restarted, 0, "a topic alone restarted cursor a"),
            Host::Store => assert!(
                restarted > 0,
                "no cut left a listed cursor without a record"
            ),
        }
    });
}

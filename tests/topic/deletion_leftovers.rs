//! A cursor's deletion cut short by a power cut at each of its storage operations, on each host:
//! what it leaves behind (a tombstone, the files of a record whose delete did not finish, a
//! temporary file) is reported by `verify` as leftovers, never as damage; the next open removes
//! it, even one that writes no record (a store's topic after a clean restart), and `verify` then
//! reports nothing; through two reopens the cursors are what the model allows (the deleted one
//! gone or whole, the other untouched).

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::{MemStorage, Position, Storage};
use support::crash::{Points, cut_everywhere_after};
use support::topic::{Host, append_n, config, earliest, on_each_host, open_hosted};

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

/// `verify` on `disk`: no damage, every tombstone reported as a metadata leftover, and every
/// file so reported still there. Returns the files reported.
fn verified_leftovers(disk: &MemStorage, what: &str) -> BTreeSet<String> {
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let report = ackstore::check::verify(&storage).expect("verify");
    assert!(report.is_sound(), "{what}: {report}");
    let reported: BTreeSet<String> = report
        .unused
        .iter()
        .filter(|f| f.place == "metadata record")
        .map(|f| f.file.clone())
        .collect();
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

#[test]
fn a_cursor_deletion_cut_at_each_step_leaves_leftovers_verify_reports_and_the_next_open_removes() {
    on_each_host(|host| {
        let mut seen = 0;
        cut_everywhere_after(
            Points::every_in_release(3),
            |disk| {
                let topic =
                    open_hosted(host, Arc::new(disk.clone()), &config(PER_LEDGER)).expect("open");
                let first = append_n(&topic, 5)[0];
                for name in ["a", "b"] {
                    let cursor = topic.open_cursor(name, earliest()).expect("cursor");
                    cursor.ack(first).expect("ack");
                    cursor.flush().expect("flush");
                }
                topic.close().expect("close");
                first
            },
            |disk, first| {
                let deleted = open_hosted(host, Arc::new(disk.clone()), &config(PER_LEDGER))
                    .and_then(|topic| topic.delete_cursor("a"));
                (first, deleted.is_ok())
            },
            |disk, cut, (first, deleted)| {
                let image = disk.durable_image();
                let what = format!("{host:?} {cut:?}");
                seen += verified_leftovers(&image, &what).len();
                for round in 0..2 {
                    reopen_and_check(host, &image, first, deleted);
                    let what = format!("{what}, reopen {round}");
                    let left = leftover_files(&image);
                    assert!(left.is_empty(), "{what}: left {left:?}");
                    let reported = verified_leftovers(&image, &what);
                    assert!(reported.is_empty(), "{what}: reported {reported:?}");
                }
            },
        );
        assert!(seen > 0, "{host:?}: no cut left a leftover");
    });
}

//! A power cut is never damage: after a cut at any storage operation of a workload that opens
//! a topic, rolls ledgers over, creates, flushes, closes and deletes cursors, trims and closes,
//! the owner's open accepts what the disk holds and `ackstore verify` exits 0 on it.

use crate::support;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use ackstore::{InitialPosition, ManagedLedger};
use ackstore::{MemStorage, Storage};
use support::crash::{Cut, cut_everywhere, torn_image};
use support::topic::at;

const PER_LEDGER: u64 = 4;

/// The workload; stops at the first error (the power is off from then on).
fn workload(disk: &MemStorage) -> ackstore::Result<()> {
    let topic = ManagedLedger::open_with_storage(
        Arc::new(disk.clone()),
        support::topic::config(PER_LEDGER),
    )?;
    let positions = (0..10u8)
        .map(|i| topic.append(&[i]))
        .collect::<ackstore::Result<Vec<_>>>()?;
    topic.sync()?;
    let keep = topic.open_cursor("keep", at(InitialPosition::Earliest, false))?;
    let gone = topic.open_cursor("gone", at(InitialPosition::Earliest, false))?;
    keep.ack_cumulative(positions[5])?;
    keep.ack(positions[8])?;
    keep.flush()?;
    gone.ack(positions[1])?;
    gone.flush()?;
    topic.delete_cursor("gone")?;
    topic.trim_consumed()?;
    keep.close()?;
    let keep = topic.open_cursor("keep", at(InitialPosition::Earliest, false))?;
    keep.ack(positions[9])?;
    keep.flush()?;
    topic.close()?;
    // A second owner of the closed directory.
    let again = ManagedLedger::open_with_storage(
        Arc::new(disk.clone()),
        support::topic::config(PER_LEDGER),
    )?;
    again.open_cursor("late", at(InitialPosition::Latest, false))?;
    again.close()
}

fn write_image(image: &MemStorage, dir: &Path) {
    for name in image.list().unwrap() {
        std::fs::write(dir.join(&name), image.live_bytes(&name).unwrap()).unwrap();
    }
}

#[test]
fn after_a_power_cut_at_any_operation_open_accepts_and_verify_exits_0() {
    let clean = cut_everywhere(workload, |disk, cut, result| {
        let Cut { n, total } = cut;
        if cut.interrupted() {
            assert!(
                result.is_err(),
                "cut after {n} of {total}: the workload went on"
            );
        }
        disk.fail_after(None);
        // Alternate the two images a cut may leave, to bound the processes this test starts.
        let (kind, image) = if n % 2 == 0 {
            ("durable", disk.durable_image())
        } else {
            // Durable bytes plus half of what was written but not synced.
            ("torn", torn_image(disk, |unsynced| unsynced / 2))
        };
        {
            let tmp = tempfile::tempdir().unwrap();
            write_image(&image, tmp.path());
            let dir = tmp.path().to_str().unwrap();
            if image.list().unwrap().is_empty() {
                return;
            }
            let verified = Command::new(env!("CARGO_BIN_EXE_ackstore"))
                .args(["verify", dir])
                .env("ACKSTORE_NO_PROGRESS", "1")
                .output()
                .unwrap();
            let code = verified.status.code();
            let opened = ManagedLedger::open(tmp.path(), support::topic::config(PER_LEDGER));
            assert!(
                opened.is_ok(),
                "cut after {n} of {total} operations ({kind}): open said {:?}",
                opened.err()
            );
            assert!(
                code == Some(0)
                    || (code == Some(2)
                        && !image
                            .list()
                            .unwrap()
                            .iter()
                            .any(|f| f.starts_with("ledger-") || f.starts_with("topic."))),
                "cut after {n} of {total} operations ({kind}): verify exited {code:?}:\n{}{}",
                String::from_utf8_lossy(&verified.stdout),
                String::from_utf8_lossy(&verified.stderr)
            );
            drop(opened);
            if n % 8 != 0 {
                return;
            }
            // And after that open, verify still agrees.
            let again = Command::new(env!("CARGO_BIN_EXE_ackstore"))
                .args(["verify", dir])
                .env("ACKSTORE_NO_PROGRESS", "1")
                .output()
                .unwrap();
            assert_eq!(
                again.status.code(),
                Some(0),
                "cut after {n} ({kind}), reopened: {}",
                String::from_utf8_lossy(&again.stdout)
            );
        }
    });
    assert!(clean.total > 20);
}

/// Crashes leave no garbage that outlives the next owner: after a cut at any operation, one
/// open and close of what the disk holds leave, per live record, its version and at most the
/// one its claim linked from (an open that writes nothing claims each record with a link, and
/// the record's next write removes the name it linked from: no other older version, no
/// tombstone of a deleted record, no temporary file) and only ledgers a record references.
#[test]
fn after_a_power_cut_at_any_operation_the_next_owner_leaves_no_garbage() {
    use ackstore::internals::meta::{FileMetaStore, MetaStore, record_of_file};
    cut_everywhere(workload, |disk, cut, result| {
        let Cut { n, total } = cut;
        if cut.interrupted() {
            assert!(result.is_err(), "cut after {n}: the workload went on");
        }
        disk.fail_after(None);
        let image = disk.durable_image();
        let topic = ManagedLedger::open_with_storage(
            Arc::new(image.clone()),
            support::topic::config(PER_LEDGER),
        )
        .unwrap();
        topic.close().unwrap();
        drop(topic);
        let files = image.list().unwrap();
        let live = FileMetaStore::new(Arc::new(image.clone())).list().unwrap();
        let mut records: Vec<&str> = files.iter().filter_map(|f| record_of_file(f)).collect();
        records.sort_unstable();
        for name in &live {
            let mut versions: Vec<u64> = files
                .iter()
                .filter(|f| record_of_file(f) == Some(name.as_str()))
                .filter_map(|f| f.split('.').nth(1)?.parse().ok())
                .collect();
            versions.sort_unstable();
            assert!(
                versions.len() == 1 || (versions.len() == 2 && versions[0] + 1 == versions[1]),
                "cut after {n} of {total} operations: record `{name}` has versions {versions:?} \
                 (its own, and at most the one its claim linked from): {files:?}"
            );
        }
        records.dedup();
        assert_eq!(
            records, live,
            "cut after {n} of {total} operations: record files {files:?}"
        );
        assert!(
            files.iter().all(|f| !f.ends_with(".tmp")),
            "cut after {n}: {files:?}"
        );
    });
}

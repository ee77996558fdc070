//! `ackstore verify` agrees with the owner's open (topic and cursor) on directories
//! where a reopened cursor crashed mid-claim, or was never written while a former owner kept
//! appending to the cursor ledger it recovered from.

use crate::support;

use std::path::Path;
use std::sync::Arc;

use ackstore::{CursorOptions, LedgerConfig, ManagedLedger, MemStorage, PersistMode, Storage};
use support::crash::{Points, cut_everywhere_after, torn_image, unsynced_tail};
use support::topic::append_n;

fn dump(disk: &MemStorage, dir: &Path) {
    for name in disk.list().unwrap() {
        if let Some(bytes) = disk.live_bytes(&name) {
            std::fs::write(dir.join(&name), bytes).unwrap();
        }
    }
}

/// verify's exit code, and whether the topic and its cursor open.
fn agree(image: &MemStorage, c: &LedgerConfig, what: &str) {
    let tmp = tempfile::tempdir().unwrap();
    dump(image, tmp.path());
    let out = support::cli::run(&["verify", tmp.path().to_str().unwrap()]);
    let opened = ManagedLedger::open(tmp.path(), c.clone())
        .and_then(|t| t.open_cursor("sub", CursorOptions::default()).map(|_| ()));
    let expected = if opened.is_ok() { Some(0) } else { Some(1) };
    assert_eq!(
        out.status.code(),
        expected,
        "{what}: open said {:?}; verify printed {}{}",
        opened.err(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn verify_agrees_with_open_at_every_cut_of_a_deferred_claim() {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        let c = support::config::topic(40, mode, 0);
        cut_everywhere_after(
            Points { from: 0, step: 2 },
            |disk| {
                let topic =
                    ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone()).unwrap();
                let ps = append_n(&topic, 130);
                topic.sync().unwrap();
                let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
                for &p in ps.iter().skip(1).step_by(3) {
                    cur.ack(p).unwrap();
                }
                cur.close().unwrap();
                topic.close().unwrap();
                ps
            },
            |disk, ps| {
                let _ = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone())
                    .and_then(|topic| {
                        let cur = topic.open_cursor("sub", CursorOptions::default())?;
                        for &p in ps.iter().step_by(5) {
                            cur.ack(p)?;
                        }
                        cur.flush()
                    });
            },
            |disk, cut, ()| {
                let what = format!("{mode:?} cut {}/{}", cut.n, cut.total);
                agree(&disk.durable_image(), &c, &what);
                let tail = unsynced_tail(disk);
                if tail > 0 {
                    agree(&torn_image(disk, |u| u / 2), &c, &format!("{what} torn"));
                }
            },
        );
    }
}

/// A former owner keeps acking with a tiny budget (evictions appended to the ledger the new
/// owner recovered from) and flushing, while the new owner only reads; then both stop.
#[test]
fn verify_agrees_with_open_after_a_former_owner_appended_to_the_recovered_ledger() {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        let c = support::config::topic(40, mode, 0);
        let disk = MemStorage::new();
        let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone()).unwrap();
        let ps = append_n(&topic, 200);
        topic.sync().unwrap();
        let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
        for &p in ps.iter().skip(1).step_by(3) {
            cur.ack(p).unwrap();
        }
        cur.flush().unwrap();
        disk.break_lock();
        let new = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone()).unwrap();
        let ncur = new.open_cursor("sub", CursorOptions::default()).unwrap();
        for &p in ps.iter().step_by(2) {
            let _ = cur.ack(p);
            let _ = ncur.is_acked(p).unwrap();
        }
        let _ = cur.flush();
        agree(&disk, &c, &format!("{mode:?} live"));
        agree(&disk.durable_image(), &c, &format!("{mode:?} durable"));
        drop(ncur);
        new.close().unwrap();
        agree(&disk, &c, &format!("{mode:?} after the new owner closed"));
    }
}

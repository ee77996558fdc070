//! Cursor records carry their identity: `verify` reports a record found under another
//! cursor's name as damage, on real files, through the binary.

use std::process::Command;
use std::sync::Arc;

use ackstore::FileStorage;
use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::{CursorOptions, LedgerConfig, ManagedLedger};

use crate::support;

#[test]
fn verify_reports_swapped_cursor_records_as_damage() {
    let dir = tempfile::tempdir().unwrap();
    {
        let ml = ManagedLedger::open(dir.path(), LedgerConfig::default()).unwrap();
        let p: Vec<_> = (0..10).map(|i| ml.append(&[i]).unwrap()).collect();
        ml.sync().unwrap();
        for (name, upto) in [("ahead", 8), ("behind", 1)] {
            let c = ml.open_cursor(name, CursorOptions::default()).unwrap();
            c.ack_cumulative(p[upto]).unwrap();
            c.close().unwrap();
        }
        ml.close().unwrap();
    }
    let verify = || {
        Command::new(env!("CARGO_BIN_EXE_ackstore"))
            .args(["verify", dir.path().to_str().unwrap()])
            .env("ACKSTORE_NO_PROGRESS", "1")
            .output()
            .unwrap()
    };
    assert_eq!(verify().status.code(), Some(0));
    let meta = FileMetaStore::new(Arc::new(FileStorage::open(dir.path(), false).unwrap()));
    let (va, a) = meta.get("cursor-0").unwrap().unwrap();
    let (vb, b) = meta.get("cursor-1").unwrap().unwrap();
    meta.put("cursor-0", Some(va), &b).unwrap();
    meta.put("cursor-1", Some(vb), &a).unwrap();
    let out = verify();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("another cursor"), "{text}");
}

/// A cursor record copied over another cursor's is damage: opening that cursor refuses it, and
/// the owner's open must not take the overwritten cursor's ledger for an orphan and delete it
/// (the state an operator could still restore).
#[test]
fn a_cursor_record_copied_over_another_is_refused_and_its_ledger_kept() {
    // Cursors on cursor ledgers (a committed sample), whose record names their state (a
    // cursor the journal holds is recovered from the journal, whose state binds its name).
    let dir = support::samples::sample_dir("cursor-ledger-ahead-behind");
    let ledgers = || {
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| ackstore::internals::log::parse_ledger_file_name(n).is_some())
            .collect();
        names.sort();
        names
    };
    let meta = FileMetaStore::new(Arc::new(FileStorage::open(dir.path(), false).unwrap()));
    let (va, _) = meta.get("cursor-0").unwrap().unwrap();
    let (_, b) = meta.get("cursor-1").unwrap().unwrap();
    meta.put("cursor-0", Some(va), &b).unwrap();
    let before = ledgers();
    if let Ok(ml) = ManagedLedger::open(dir.path(), LedgerConfig::default()) {
        assert!(matches!(
            ml.open_cursor("ahead", CursorOptions::default()),
            Err(ackstore::Error::Corrupted {
                place: ackstore::CorruptionPlace::Record(_),
                ..
            })
        ));
        ml.close().unwrap();
    }
    assert_eq!(ledgers(), before, "the open deleted a ledger");
}

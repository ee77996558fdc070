//! `ackstore verify` agrees with the owner's open: whatever `ManagedLedger::open`, or the first
//! read of a sealed ledger (which the open does not read), refuses, verify reports as damage
//! (exit 1); what they accept, verify does not (exit 0): damage past a sealed ledger's recorded
//! count (its footer, bytes after it), which no read uses, is a warning. Open never
//! deletes the file of a recorded ledger. `inspect` exits 2 when the topic record is
//! unreadable.

use std::path::Path;

use ackstore::ManagedLedger;
use ackstore::internals::log::{ledger_file_name, parse_ledger_file_name};
use ackstore::internals::meta::record_of_file;

use crate::support;

/// A closed topic of 50 entries in sealed ledgers of 20; returns the recorded ledger ids.
fn topic(dir: &Path) -> Vec<u64> {
    let ml = ManagedLedger::open(dir, support::topic::config(20)).unwrap();
    for i in 0..50 {
        ml.append(format!("entry {i}").as_bytes()).unwrap();
    }
    ml.close().unwrap();
    let mut ids: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| parse_ledger_file_name(e.unwrap().file_name().to_str()?))
        .collect();
    ids.sort_unstable();
    ids
}

type Damage = fn(&Path, &[u64]);

/// The files of every committed version of the topic record, oldest first.
fn topic_record_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(record_of_file)
                == Some("topic")
        })
        .collect();
    files.sort();
    files
}

fn resize(dir: &Path, id: u64, len: impl Fn(u64) -> u64) {
    let path = dir.join(ledger_file_name(id));
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let size = file.metadata().unwrap().len();
    file.set_len(len(size)).unwrap();
}

#[test]
fn verify_calls_damage_exactly_what_open_refuses() {
    let cases: [(&str, Damage); 5] = [
        ("untouched", |_, _| {}),
        ("a sealed ledger emptied to 0 bytes", |dir, ids| {
            resize(dir, ids[0], |_| 0);
        }),
        ("a sealed ledger cut in half", |dir, ids| {
            resize(dir, ids[0], |size| size / 2);
        }),
        ("the topic record removed", |dir, _| {
            let files = topic_record_files(dir);
            assert!(!files.is_empty());
            for file in files {
                std::fs::remove_file(file).unwrap();
            }
        }),
        ("a sparse zero extent after a sealed ledger", |dir, ids| {
            resize(dir, ids[1], |size| size + (64 << 20));
        }),
    ];
    for (what, damage) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let ids = topic(dir);
        assert!(ids.len() >= 3, "{what}: {ids:?}");
        damage(dir, &ids);
        // Ledger files only: a refused open has still claimed the topic (a new version of its
        // record, the superseded one removed), which is what fences a former owner.
        let before: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_str().and_then(parse_ledger_file_name).is_some())
            .collect();
        let verified = support::cli::run(&["verify", dir.to_str().unwrap()]);
        let code = verified.status.code();
        let opened = ManagedLedger::open(dir, support::topic::config(20)).and_then(|ml| {
            // A sealed ledger's damage is the error of its first read.
            for span in ml.ledgers().iter().filter(|s| s.entries > 0) {
                ml.read(ackstore::Position::new(span.id, 0))?;
            }
            Ok(ml)
        });
        let expected = if opened.is_ok() { Some(0) } else { Some(1) };
        assert_eq!(
            code,
            expected,
            "{what}: open said {:?}, verify printed {}",
            opened.as_ref().err(),
            String::from_utf8_lossy(&verified.stdout)
        );
        if opened.is_err() {
            // A refused open deletes no ledger file.
            for name in &before {
                assert!(dir.join(name).exists(), "{what}: open deleted {name:?}");
            }
        }
    }
}

#[test]
fn inspect_exits_2_when_the_topic_record_is_unreadable() {
    let tmp = tempfile::tempdir().unwrap();
    topic(tmp.path());
    let current = topic_record_files(tmp.path()).pop().unwrap();
    std::fs::write(current, b"not a record").unwrap();
    let out = support::cli::run(&["inspect", tmp.path().to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(ManagedLedger::open(tmp.path(), support::topic::config(20)).is_err());
}

/// Owner A keeps appending `stale` entries (synced every 7) to the ledger owner B sealed when
/// it took the directory over (the lock file removed, as on shared storage) while B appends to
/// a ledger of its own, then both stop.
fn fenced_owner_appends_past_the_seal(dir: &Path, stale: u64) {
    let a = ManagedLedger::open(dir, support::topic::config(20)).unwrap();
    for i in 0..50 {
        a.append(format!("entry {i}").as_bytes()).unwrap();
    }
    a.sync().unwrap();
    std::fs::remove_file(dir.join("LOCK")).unwrap();
    let b = ManagedLedger::open(dir, support::topic::config(20)).unwrap();
    for i in 0..5 {
        b.append(format!("new {i}").as_bytes()).unwrap();
    }
    b.sync().unwrap();
    for i in 0..stale {
        // A rollover needs the topic record, which refuses A: stop there.
        if a.append(format!("stale {i}").as_bytes()).is_err() {
            break;
        }
        if i % 7 == 6 {
            let _ = a.sync();
        }
    }
    let _ = a.sync();
    drop(a);
    b.close().unwrap();
}

#[test]
fn a_fenced_owners_frames_past_a_sealed_count_are_not_damage() {
    for stale in [1, 3, 9, 40] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        fenced_owner_appends_past_the_seal(dir, stale);
        let verified = support::cli::run(&["verify", dir.to_str().unwrap()]);
        let opened = ManagedLedger::open(dir, support::topic::config(20));
        assert!(
            opened.is_ok(),
            "{stale} stale entries: open said {:?}",
            opened.err()
        );
        assert_eq!(
            verified.status.code(),
            Some(0),
            "{stale} stale entries: verify printed {}",
            String::from_utf8_lossy(&verified.stdout)
        );
    }
}

/// A change to a ledger file's bytes.
type Edit = fn(&mut Vec<u8>);

/// Changes the bytes of ledger `id`'s file in `dir` by `edit`.
fn edit_ledger(dir: &Path, id: u64, edit: impl FnOnce(&mut Vec<u8>)) {
    let path = dir.join(ledger_file_name(id));
    let mut bytes = std::fs::read(&path).unwrap();
    edit(&mut bytes);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn damage_no_read_relies_on_is_a_warning_and_every_entry_is_served() {
    let cases: [(&str, Edit); 3] = [
        ("a bit flipped in the footer's index", |bytes| {
            // The trailer (the last 36 bytes) starts with where the frames end.
            let trailer = bytes.len() - 36;
            let data_end = u64::from_le_bytes(bytes[trailer..trailer + 8].try_into().unwrap());
            bytes[usize::try_from(data_end).unwrap() + 12] ^= 1;
        }),
        ("a bit flipped in the trailer", |bytes| {
            let at = bytes.len() - 2;
            bytes[at] ^= 0x10;
        }),
        ("bytes appended after the footer", |bytes| {
            bytes.extend_from_slice(b"not a frame");
        }),
    ];
    for (what, damage) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let ids = topic(dir);
        edit_ledger(dir, ids[0], damage);
        let verified = support::cli::run(&["verify", dir.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&verified.stdout).into_owned();
        assert_eq!(verified.status.code(), Some(0), "{what}: {text}");
        let warning = text
            .lines()
            .find(|l| l.contains("WARNING"))
            .unwrap_or_else(|| panic!("{what}: no warning in {text}"));
        assert!(
            warning.contains(&ledger_file_name(ids[0]))
                && warning.contains("the footer (index, its checksum or trailer) does not verify")
                && warning.contains("the 20 entries the topic record counts are whole"),
            "{what}: {warning}"
        );
        assert!(!text.contains("DAMAGED"), "{what}: {text}");
        let json = support::cli::run(&["verify", "--json", dir.to_str().unwrap()]);
        let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        assert_eq!(
            (&report["ok"], &report["warnings"]),
            (&serde_json::json!(true), &serde_json::json!(1)),
            "{what}: {report}"
        );
        // The open serves every entry, the damaged ledger's included, as appended.
        let ml = ManagedLedger::open(dir, support::topic::config(20)).unwrap();
        let cursor = ml.open_cursor("all", support::topic::earliest()).unwrap();
        let mut payloads = Vec::new();
        loop {
            let read = cursor.read_entries(100).unwrap();
            if read.is_empty() {
                break;
            }
            payloads.extend(read.into_iter().map(|e| e.payload));
        }
        let appended: Vec<Vec<u8>> = (0..50).map(|i| format!("entry {i}").into_bytes()).collect();
        assert_eq!(payloads, appended, "{what}");
        drop(cursor);
        ml.close().unwrap();
    }
}

//! `ackstore verify` agrees with `Store::open` plus opening every cursor and reading its every
//! ack (which loads every partition) on store directories whose journal holds full markers and
//! deltas over several segments, after one damage at a time to one record: a byte flipped
//! (the frame no longer verifies), or the record re-framed with a valid CRC after a change of
//! its payload (a delta's base location, base CRC, removed count, removed keys, marker bytes; a
//! marker's or partition's byte). Neither side panics, a directory verify passes opens, and
//! since every record of a cleanly closed store is below its segment's synced length, every
//! such damage is corruption for both.

use std::path::{Path, PathBuf};
use std::process::Command;

use ackstore::internals::format::journal::{
    Record, RecordKind, decode_record, decode_segment_header_version, encode_record,
};
use ackstore::internals::journal::JournalConfig;
use ackstore::{LedgerConfig, Position, Store, StoreConfig};

use crate::support;

fn verify(dir: &Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ackstore"))
        .args(["verify", dir.to_str().unwrap(), "--json"])
        .env("ACKSTORE_NO_PROGRESS", "1")
        .output()
        .expect("runs");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!text.contains("panicked"), "verify panicked: {text}");
    (out.status.code(), text)
}

fn opens(dir: &Path) -> ackstore::Result<()> {
    let store = Store::open(dir, StoreConfig::default())?;
    for name in store.topic_names() {
        let t = store.topic(&name)?;
        let first = t.first_position();
        for c in t.cursor_names() {
            let cur = t.open_cursor(&c, support::topic::earliest())?;
            if let Some(first) = first {
                let mut p = Some(first);
                while let Some(pos) = p {
                    cur.is_acked(pos)?;
                    p = next(&t, pos);
                }
            }
            cur.read_entries(1)?;
        }
    }
    store.close()
}

fn next(t: &ackstore::ManagedLedger, pos: Position) -> Option<Position> {
    let last = t.last_position()?;
    if pos >= last {
        return None;
    }
    [
        Position::new(pos.ledger_id, pos.entry_id + 1),
        Position::new(pos.ledger_id + 1, 0),
    ]
    .into_iter()
    .find(|&cand| cand <= last && t.read(cand).is_ok())
}

fn build(dir: &Path) {
    let config = StoreConfig {
        ledger: LedgerConfig {
            max_entries_per_ledger: 4,
            ..LedgerConfig::default()
        },
        journal: JournalConfig {
            segment_bytes: 1500,
        },
        flusher_threads: 0,
        ..StoreConfig::default()
    };
    let store = Store::open(dir, config).unwrap();
    let t = store.topic("t").unwrap();
    let ps: Vec<Position> = (0..40)
        .map(|i| t.append(format!("{i}").as_bytes()).unwrap())
        .collect();
    t.sync().unwrap();
    let cs: Vec<_> = ["x", "y"]
        .iter()
        .map(|n| t.open_cursor(n, support::topic::earliest()).unwrap())
        .collect();
    for round in 0..8usize {
        for (i, c) in cs.iter().enumerate() {
            c.ack(ps[(round * 7 + i * 13 + 1) % ps.len()]).unwrap();
        }
        if round == 5 {
            cs[0].ack_cumulative(ps[9]).unwrap();
        }
        store.flush_all().unwrap();
    }
    assert!(
        store.journal_stats().deltas > 4,
        "{:?}",
        store.journal_stats()
    );
    drop(cs);
    drop(t);
    store.close().unwrap();
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("journal-")
        })
        .collect();
    v.sort();
    v
}

fn copy_dir(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

type Edit = fn(RecordKind, &mut Vec<u8>) -> bool;

fn edits() -> Vec<(&'static str, Edit)> {
    vec![
        ("delta base offset", |k, p| {
            k == RecordKind::Delta && {
                p[0] = p[0].wrapping_add(1);
                true
            }
        }),
        ("delta base crc", |k, p| {
            k == RecordKind::Delta && {
                p[8] ^= 1;
                true
            }
        }),
        ("delta removed count huge", |k, p| {
            k == RecordKind::Delta && {
                p[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
                true
            }
        }),
        ("delta removed count one more", |k, p| {
            k == RecordKind::Delta && {
                let n = u32::from_le_bytes(p[12..16].try_into().unwrap());
                p[12..16].copy_from_slice(&(n + 1).to_le_bytes());
                true
            }
        }),
        ("delta removed keys duplicated", |k, p| {
            k == RecordKind::Delta && u32::from_le_bytes(p[12..16].try_into().unwrap()) >= 2 && {
                let (a, b) = (p[16..32].to_vec(), 32);
                p[b..b + 16].copy_from_slice(&a);
                true
            }
        }),
        // A partition record's first varint: the key's ledger id one off, under a recomputed
        // CRC (the row names another key).
        ("partition key", |k, p| {
            k == RecordKind::Partition && {
                p[0] ^= 0x01;
                true
            }
        }),
        ("payload last byte", |k, p| {
            k != RecordKind::Forget && !p.is_empty() && {
                let l = p.len() - 1;
                p[l] ^= 0x40;
                true
            }
        }),
        ("payload middle byte", |k, p| {
            k != RecordKind::Forget && p.len() > 20 && {
                let m = p.len() / 2;
                p[m] ^= 0x08;
                true
            }
        }),
    ]
}

#[test]
fn verify_agrees_with_open_after_each_damage_to_each_journal_record() {
    let base = tempfile::tempdir().unwrap();
    build(base.path());
    let (code, report) = verify(base.path());
    assert_eq!(code, Some(0), "{report}");
    opens(base.path()).expect("the undamaged store opens");
    let mut cases = 0;
    let mut disagreements = Vec::new();
    let mut promised = Vec::new();
    for seg in segments(base.path()) {
        let name = seg.file_name().unwrap().to_owned();
        let bytes = std::fs::read(&seg).unwrap();
        // Where the segment's version puts its first record.
        let (_, version) = decode_segment_header_version(&bytes).unwrap();
        let mut at = ackstore::internals::format::journal::records_start(version);
        let mut records = Vec::new();
        while let Ok(Some((rec, len))) = decode_record(&bytes[at..]) {
            records.push((at, len, rec.kind));
            at += len;
        }
        for &(at, len, kind) in &records {
            let mut damages: Vec<(String, Vec<u8>)> = Vec::new();
            let mut flipped = bytes.clone();
            flipped[at + len / 2] ^= 0x20;
            damages.push((format!("{kind:?} frame byte"), flipped));
            for (what, edit) in edits() {
                let (rec, _) = decode_record(&bytes[at..]).unwrap().unwrap();
                let mut payload = rec.payload.to_vec();
                if !edit(kind, &mut payload) {
                    continue;
                }
                let mut framed = Vec::new();
                encode_record(
                    &mut framed,
                    &Record {
                        payload: &payload,
                        ..rec
                    },
                )
                .expect("the record encodes");
                let mut out = bytes.clone();
                out[at..at + len].copy_from_slice(&framed);
                damages.push((format!("{kind:?} {what}"), out));
            }
            for (what, damaged) in damages {
                let dir = tempfile::tempdir().unwrap();
                copy_dir(base.path(), dir.path());
                std::fs::write(dir.path().join(&name), &damaged).unwrap();
                let (code, report) = verify(dir.path());
                let opened = std::panic::catch_unwind(|| opens(dir.path()))
                    .unwrap_or_else(|_| panic!("open panicked: {name:?} {at} {what}"));
                cases += 1;
                // Every record of a cleanly closed store lies below its segment's synced
                // length: damage to one is corruption for both, never a walk back or a cut.
                if opened.is_ok() || code != Some(1) {
                    promised.push(format!("{name:?} record at {at} ({what}): open {opened:?}"));
                }
                if opened.is_ok() != (code == Some(0)) {
                    disagreements.push(format!(
                        "{name:?} record at {at} ({what}): open {opened:?}, verify {code:?} {}",
                        report.chars().take(300).collect::<String>()
                    ));
                }
            }
        }
    }
    assert!(cases > 30, "{cases}");
    assert!(
        disagreements.is_empty(),
        "{} of {cases}:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
    assert!(
        promised.is_empty(),
        "{} of {cases} opened:\n{}",
        promised.len(),
        promised.join("\n")
    );
}

//! `ackstore verify` agrees with `Store::open` on stores of both layouts and on the
//! states a crash leaves between the new steps (a topic directory made, its catalog write not;
//! a listed topic whose first open never wrote its record; an unlisted journal segment).

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use ackstore::{CursorOptions, Position, Store, StoreConfig};

fn verify(dir: &Path) -> (Option<i32>, serde_json::Value) {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_ackstore"))
        .args(["verify", dir.to_str().unwrap(), "--json"])
        .env("ACKSTORE_NO_PROGRESS", "1")
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let v = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{e}: {text} {:?}", out.stderr));
    (out.status.code(), v)
}

/// Opens the store, each topic, the first entry of each of its ledgers (a sealed ledger is
/// checked on its first use, not by the topic's open) and each cursor.
fn opens(dir: &Path) -> ackstore::Result<()> {
    let store = Store::open(dir, StoreConfig::default())?;
    for name in store.topic_names() {
        let t = store.topic(&name)?;
        for span in t.ledgers().iter().filter(|s| s.entries > 0) {
            t.read(ackstore::Position::new(span.id, 0))?;
        }
        for c in t.cursor_names() {
            t.open_cursor(&c, CursorOptions::default())?
                .read_entries(1)?;
        }
    }
    store.close()
}

#[test]
fn verify_agrees_with_open_on_a_flat_store_after_the_upgrade() {
    let dir = support::samples::sample_dir("store-v2-flat");
    let (code, report) = verify(dir.path());
    assert_eq!(code, Some(0), "v2 as committed: {report}");
    {
        let store = Store::open(dir.path(), StoreConfig::default()).expect("open");
        let t = store.topic("new").expect("new topic");
        let p = t.append(b"n").expect("append");
        t.sync().expect("sync");
        let c = t
            .open_cursor("s", CursorOptions::default())
            .expect("cursor");
        c.ack(p).expect("ack");
        c.flush().expect("flush");
        let old = store
            .topic("persistent://tenant/ns/orders")
            .expect("flat topic");
        old.append(b"more").expect("append");
        old.sync().expect("sync");
        drop((c, t, old));
        store.close().expect("close");
    }
    let (code, report) = verify(dir.path());
    assert_eq!(code, Some(0), "after the upgrade: {report}");
    assert_eq!(report["topics"], 3, "{report}");
    opens(dir.path()).expect("opens");
}

#[test]
fn verify_agrees_with_open_on_a_listed_topic_whose_directory_is_empty() {
    // A topic the catalog lists whose first open was cut before its record was written: the
    // store opens it as a new, empty topic.
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        store.topic("a").unwrap();
        store.close().unwrap();
    }
    for f in std::fs::read_dir(dir.path().join("t1")).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    let (code, report) = verify(dir.path());
    let opened = opens(dir.path());
    assert_eq!(
        opened.is_ok(),
        code == Some(0),
        "open {opened:?} vs verify {report}"
    );
}

#[test]
fn verify_agrees_with_open_on_a_stray_topic_directory_and_an_unlisted_segment() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        let t = store.topic("a").unwrap();
        let p = t.append(b"x").unwrap();
        t.sync().unwrap();
        let c = t.open_cursor("s", CursorOptions::default()).unwrap();
        c.ack(p).unwrap();
        c.flush().unwrap();
        drop((c, t));
        store.close().unwrap();
    }
    // A crash after `mkdir t2`, before the catalog write that lists topic 2; and a segment
    // file whose listing never happened: its header, naming the newest segment, and nothing
    // else (a segment is listed before anything is written after its header).
    std::fs::create_dir(dir.path().join("t2")).unwrap();
    let segs: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("journal-"))
        .collect();
    let last = segs.iter().max().unwrap().clone();
    let n: u64 = last["journal-".len()..last.len() - 4].parse().unwrap();
    let stray = dir.path().join(format!("journal-{:016}.seg", n + 1));
    let previous = ackstore::internals::format::journal::Predecessor {
        segment: n,
        len: std::fs::metadata(dir.path().join(&last)).unwrap().len(),
    };
    std::fs::write(
        &stray,
        ackstore::internals::format::journal::encode_segment_header(n + 1, Some(previous)),
    )
    .unwrap();
    let (code, report) = verify(dir.path());
    assert_eq!(code, Some(0), "{report}");
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let t = store.topic("a").unwrap();
    let c = t.open_cursor("s", CursorOptions::default()).unwrap();
    assert!(c.is_acked(Position::new(1, 0)).unwrap());
    let b = store.topic("b").expect("topic b reuses t2");
    b.append(b"y").unwrap();
    b.sync().unwrap();
    drop((c, t, b));
    store.close().unwrap();
    let (code, report) = verify(dir.path());
    assert_eq!(code, Some(0), "{report}");
}

/// A store whose journal spans at least three segments, the newest holding records, closed
/// cleanly; its segment files, oldest first.
fn store_of_several_segments(dir: &Path) -> Vec<std::path::PathBuf> {
    let config = StoreConfig {
        ledger: ackstore::LedgerConfig {
            max_entries_per_ledger: 8,
            ..ackstore::LedgerConfig::default()
        },
        journal: ackstore::internals::journal::JournalConfig { segment_bytes: 700 },
        flusher_threads: 0,
        ..StoreConfig::default()
    };
    let store = Store::open(dir, config).unwrap();
    let t = store.topic("t").unwrap();
    let ps: Vec<Position> = (0..48).map(|i| t.append(&[i]).unwrap()).collect();
    t.sync().unwrap();
    let cs: Vec<_> = ["x", "y", "z"]
        .iter()
        .map(|n| t.open_cursor(n, CursorOptions::default()).unwrap())
        .collect();
    for round in 0..12usize {
        for (i, c) in cs.iter().enumerate() {
            c.ack(ps[(round * 5 + i * 11 + 1) % ps.len()]).unwrap();
        }
        store.flush_all().unwrap();
    }
    drop((cs, t));
    store.close().unwrap();
    let mut segs: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
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
    segs.sort();
    assert!(segs.len() >= 3, "{segs:?}");
    segs
}

fn copy_tree(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_tree(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

#[test]
fn verify_agrees_with_open_on_missing_damaged_and_cut_journal_segments() {
    let base = tempfile::tempdir().unwrap();
    let segs = store_of_several_segments(base.path());
    let (code, report) = verify(base.path());
    assert_eq!(code, Some(0), "{report}");
    let newest = segs.last().unwrap().clone();
    let newest_bytes = std::fs::read(&newest).unwrap();
    // The last record of the newest segment: it starts where the one before it ends.
    let (_, version) =
        ackstore::internals::format::journal::decode_segment_header_version(&newest_bytes).unwrap();
    let start = ackstore::internals::format::journal::records_start(version);
    let mut at = start;
    let mut last = (start, 0);
    while let Ok(Some((_, len))) =
        ackstore::internals::format::journal::decode_record(&newest_bytes[at..])
    {
        last = (at, len);
        at += len;
    }
    assert!(last.1 > 0, "the newest segment holds records");
    let oldest = segs[0].clone();
    let middle = segs[segs.len() / 2].clone();
    type Damage = Box<dyn Fn(&Path)>;
    let file = |p: &std::path::PathBuf| p.file_name().unwrap().to_owned();
    let cases: Vec<(&str, std::ffi::OsString, Damage)> = vec![
        (
            "oldest missing",
            file(&oldest),
            Box::new(|p| std::fs::remove_file(p).unwrap()),
        ),
        (
            "middle missing",
            file(&middle),
            Box::new(|p| std::fs::remove_file(p).unwrap()),
        ),
        (
            "newest missing",
            file(&newest),
            Box::new(|p| std::fs::remove_file(p).unwrap()),
        ),
        (
            "newest header bit",
            file(&newest),
            Box::new(|p| {
                let mut b = std::fs::read(p).unwrap();
                b[13] ^= 0x02;
                std::fs::write(p, b).unwrap();
            }),
        ),
        (
            "newest last record bit",
            file(&newest),
            Box::new(move |p| {
                let mut b = std::fs::read(p).unwrap();
                b[last.0 + last.1 / 2] ^= 0x02;
                std::fs::write(p, b).unwrap();
            }),
        ),
        (
            "newest cut at its last record",
            file(&newest),
            Box::new(move |p| {
                let b = std::fs::read(p).unwrap();
                std::fs::write(p, &b[..last.0]).unwrap();
            }),
        ),
        (
            "oldest cut by one byte",
            file(&oldest),
            Box::new(|p| {
                let b = std::fs::read(p).unwrap();
                std::fs::write(p, &b[..b.len() - 1]).unwrap();
            }),
        ),
    ];
    for (what, name, damage) in cases {
        let dir = tempfile::tempdir().unwrap();
        copy_tree(base.path(), dir.path());
        damage(&dir.path().join(&name));
        let (code, report) = verify(dir.path());
        let opened = opens(dir.path());
        let seq: u64 = name.to_str().unwrap()["journal-".len()..][..16]
            .parse()
            .unwrap();
        assert_eq!(code, Some(1), "{what}: verify {report}");
        assert!(
            report.to_string().contains(&format!("segment {seq}")),
            "{what}: verify names segment {seq}: {report}"
        );
        match opened {
            Err(ackstore::Error::Corrupted {
                place: ackstore::CorruptionPlace::Journal { segment, .. },
                ..
            }) if segment == seq => {}
            other => panic!("{what}: open {other:?}"),
        }
    }
    // A zero-filled tail (a sparse extent) of the newest segment is no damage for either.
    let dir = tempfile::tempdir().unwrap();
    copy_tree(base.path(), dir.path());
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join(file(&newest)))
        .unwrap();
    f.set_len(newest_bytes.len() as u64 + (64 << 20)).unwrap();
    drop(f);
    let (code, report) = verify(dir.path());
    assert_eq!(code, Some(0), "zero tail: {report}");
    opens(dir.path()).expect("zero tail opens");
}

/// A copy of directory `from` (and its subdirectories) in a new temporary directory.
fn copy_of(from: &Path) -> tempfile::TempDir {
    fn copy(from: &Path, to: &Path) {
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            let target = to.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                std::fs::create_dir(&target).unwrap();
                copy(&e.path(), &target);
            } else {
                std::fs::copy(e.path(), target).unwrap();
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    copy(from, dir.path());
    dir
}

/// The files of record `name` in `dir` (`{name}.{version}.meta`), newest last.
fn record_files(dir: &Path, name: &str) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let f = p.file_name().unwrap().to_str().unwrap();
            f.starts_with(&format!("{name}.")) && f.ends_with(".meta")
        })
        .collect();
    files.sort();
    files
}

fn flip_middle(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x10;
    std::fs::write(path, bytes).unwrap();
}

/// Opens the store, every topic and every cursor to its first read; the ack of `held` must be
/// there.
fn opens_with(dir: &Path, held: Position) -> ackstore::Result<()> {
    let store = Store::open(dir, StoreConfig::default())?;
    for name in store.topic_names() {
        let t = store.topic(&name)?;
        for c in t.cursor_names() {
            let cursor = t.open_cursor(&c, CursorOptions::default())?;
            cursor.read_entries(1)?;
            if c == "held" {
                assert!(cursor.is_acked(held)?, "the held cursor's ack is lost");
            }
        }
    }
    store.close()
}

/// The directory of topic `a`, the store's first topic.
fn t1(d: &Path) -> std::path::PathBuf {
    d.join("t1")
}

fn ledger(d: &Path) -> std::path::PathBuf {
    std::fs::read_dir(t1(d))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "log"))
        .expect("a ledger file in t1")
}

fn newest(d: &Path, name: &str) -> std::path::PathBuf {
    record_files(d, name).pop().expect(name)
}

fn remove_record(d: &Path, name: &str) {
    for f in record_files(d, name) {
        std::fs::remove_file(f).unwrap();
    }
}

/// An unlisted creation cut short: the topic's open then reads every record. Its id is in the
/// block of ids the topic record reserved (a store's topic creates no file of an id its record
/// has not reserved; one at or above the record's next id is damage).
fn cut_create(d: &Path) {
    let name = ackstore::internals::log::ledger_file_name(60);
    std::fs::write(t1(d).join(name), b"ack").unwrap();
}

/// A copy of cursor 1's record under id 7, which the topic record does not list.
fn orphan(d: &Path) {
    let from = newest(&t1(d), "cursor-1");
    let name = from
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .replace("cursor-1.", "cursor-7.");
    std::fs::copy(&from, t1(d).join(name)).unwrap();
}

/// Every kind of file of a store damaged (or added, or removed) one at a time: `verify` exits
/// 1 exactly when the store, a topic or a cursor refuses to open, and reports a damaged file
/// that open does not read as a warning (in its JSON too), not as damage.
#[test]
fn verify_agrees_with_open_on_every_kind_of_store_file() {
    // Topic `a` (t1): cursor `held` (id 0) acked and flushed, so the journal holds it; cursor
    // `fresh` (id 1) created and never flushed, so its record holds its state.
    let base = tempfile::tempdir().unwrap();
    let acked = {
        let store = Store::open(base.path(), StoreConfig::default()).unwrap();
        let t = store.topic("a").unwrap();
        let p = t.append(b"x").unwrap();
        t.append(b"y").unwrap();
        t.sync().unwrap();
        let held = t.open_cursor("held", CursorOptions::default()).unwrap();
        held.ack(p).unwrap();
        held.flush().unwrap();
        let fresh = t.open_cursor("fresh", CursorOptions::default()).unwrap();
        drop((held, fresh, t));
        store.close().unwrap();
        p
    };
    type Mutation = Box<dyn Fn(&Path)>;
    // (what, the mutation, whether open works, whether verify warns)
    let cases: Vec<(&str, Mutation, bool, bool)> = vec![
        ("nothing", Box::new(|_| {}), true, false),
        (
            "catalog flipped",
            Box::new(|d| flip_middle(&newest(d, "store"))),
            false,
            false,
        ),
        (
            "topic record flipped",
            Box::new(|d| flip_middle(&newest(&t1(d), "topic"))),
            false,
            false,
        ),
        (
            "data ledger flipped",
            Box::new(|d| flip_middle(&ledger(d))),
            false,
            false,
        ),
        (
            "held cursor's record flipped",
            Box::new(|d| flip_middle(&newest(&t1(d), "cursor-0"))),
            true,
            true,
        ),
        (
            "held cursor's record removed",
            Box::new(|d| remove_record(&t1(d), "cursor-0")),
            true,
            true,
        ),
        (
            "fresh cursor's record flipped",
            Box::new(|d| flip_middle(&newest(&t1(d), "cursor-1"))),
            false,
            false,
        ),
        (
            "fresh cursor's record removed",
            Box::new(|d| remove_record(&t1(d), "cursor-1")),
            true,
            true,
        ),
        ("an unlisted cursor record", Box::new(orphan), true, true),
        (
            "an unlisted cursor record flipped",
            Box::new(|d| {
                orphan(d);
                flip_middle(&newest(&t1(d), "cursor-7"));
            }),
            false,
            false,
        ),
        (
            "an unlisted creation cut short",
            Box::new(cut_create),
            true,
            false,
        ),
        (
            "an unlisted creation cut short and the held cursor's record flipped",
            Box::new(|d| {
                cut_create(d);
                flip_middle(&newest(&t1(d), "cursor-0"));
            }),
            false,
            true,
        ),
        (
            "a stray record flipped",
            Box::new(|d| {
                std::fs::write(
                    t1(d).join("stray.00000000000000000001.meta"),
                    b"not a record",
                )
                .unwrap();
            }),
            true,
            true,
        ),
        (
            "garbage in the store's LOCK",
            Box::new(|d| std::fs::write(d.join("LOCK"), b"garbage").unwrap()),
            true,
            false,
        ),
        (
            "a stray file in the store",
            Box::new(|d| std::fs::write(d.join("notes.txt"), b"x").unwrap()),
            true,
            false,
        ),
        (
            "a stray file in a topic",
            Box::new(|d| std::fs::write(t1(d).join("notes.txt"), b"x").unwrap()),
            true,
            false,
        ),
    ];
    for (what, mutate, open_works, warns) in cases {
        let dir = copy_of(base.path());
        mutate(dir.path());
        let (code, report) = verify(dir.path());
        let opened = opens_with(dir.path(), acked);
        assert_eq!(
            opened.is_ok(),
            open_works,
            "{what}: open {opened:?}; verify {report}"
        );
        assert_eq!(
            code,
            Some(if open_works { 0 } else { 1 }),
            "{what}: verify disagrees with open ({opened:?}): {report}"
        );
        let warned = report["unused"].as_array().is_some_and(|u| !u.is_empty());
        assert_eq!(warned, warns, "{what}: {report}");
    }
}

/// A store cursor's record file gone while the journal holds the cursor's state: the open
/// reads the state from the journal, and verify warns of the record without calling it what
/// it would be on a topic opened alone (a cursor the journal holds nothing of).
#[test]
fn a_missing_cursor_record_whose_state_the_journal_holds_is_a_warning_that_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), StoreConfig::default()).expect("open");
    let t = store.topic("t").expect("topic");
    let ps: Vec<Position> = (0..10u8).map(|i| t.append(&[i]).expect("append")).collect();
    t.sync().expect("sync");
    let c = t
        .open_cursor("c", CursorOptions::default())
        .expect("cursor");
    c.ack(ps[4]).expect("ack");
    c.flush().expect("flush");
    drop((c, t));
    store.close().expect("close");
    drop(store);
    let record = std::fs::read_dir(dir.path().join("t1"))
        .expect("topic directory")
        .map(|e| e.expect("entry").file_name().into_string().expect("name"))
        .find(|n| n.starts_with("cursor-0."))
        .expect("the cursor's record");
    std::fs::remove_file(dir.path().join("t1").join(record)).expect("remove");

    let (code, report) = verify(dir.path());
    assert_eq!(code, Some(0), "{report}");
    let warnings = report["unused"].to_string();
    assert!(
        warnings.contains("missing, although the topic record lists it; not read"),
        "{report}"
    );
    assert!(!warnings.contains("holds nothing"), "{report}");
    let store = Store::open(dir.path(), StoreConfig::default()).expect("open");
    let c = store
        .topic("t")
        .expect("topic")
        .open_cursor("c", CursorOptions::default())
        .expect("cursor");
    let acked: Vec<bool> = ps
        .iter()
        .map(|p| c.is_acked(*p).expect("is_acked"))
        .collect();
    assert_eq!(acked, (0..10).map(|i| i == 4).collect::<Vec<_>>());
}

//! A store's cursor journal never opens an older state than the one it committed: a listed
//! segment that is missing, cut short, or whose header or synced records are damaged is
//! `Error::Corrupted` naming the segment, open removes and cuts nothing of it, and a seek whose
//! marker is unreadable is damage, never a walk back to the acks the seek cleared. Real files,
//! each damage on a copy of one cleanly closed store.

use std::path::{Path, PathBuf};

use ackstore::internals::format::journal::{Record, RecordKind, decode_record, encode_record};
use ackstore::internals::store::journal::JournalConfig;
use ackstore::{
    CorruptionPlace, CursorOptions, Error, InitialPosition, LedgerConfig, Position, Store,
    StoreConfig,
};

fn config() -> StoreConfig {
    StoreConfig {
        ledger: LedgerConfig {
            max_entries_per_ledger: 8,
            ..LedgerConfig::default()
        },
        journal: JournalConfig {
            segment_bytes: 1200,
        },
        flusher_threads: 0,
        ..StoreConfig::default()
    }
}

fn opts() -> CursorOptions {
    CursorOptions {
        initial_position: InitialPosition::Earliest,
        inclusive: false,
    }
}

/// A store whose journal spans at least three segments, the newest holding records, closed
/// cleanly. Returns the positions appended.
fn build(dir: &Path) -> Vec<Position> {
    let store = Store::open(dir, config()).unwrap();
    let t = store.topic("t").unwrap();
    let ps: Vec<Position> = (0..48)
        .map(|i| t.append(format!("{i}").as_bytes()).unwrap())
        .collect();
    t.sync().unwrap();
    let cs: Vec<_> = ["x", "y", "z"]
        .iter()
        .map(|n| t.open_cursor(n, opts()).unwrap())
        .collect();
    for round in 0..12usize {
        for (i, c) in cs.iter().enumerate() {
            c.ack(ps[(round * 5 + i * 11 + 1) % ps.len()]).unwrap();
        }
        store.flush_all().unwrap();
    }
    drop(cs);
    drop(t);
    store.close().unwrap();
    ps
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

fn seq_of(path: &Path) -> u64 {
    let name = path.file_name().unwrap().to_str().unwrap();
    name["journal-".len()..name.len() - ".seg".len()]
        .parse()
        .unwrap()
}

/// Where a segment's records start: after the header (24 bytes), and in version 3 after its
/// two synced-length slots (24 more).
fn records_start(bytes: &[u8]) -> usize {
    if u16::from_le_bytes([bytes[8], bytes[9]]) >= 3 {
        48
    } else {
        24
    }
}

/// `(offset, frame length, kind)` of every record of a segment file.
fn records(bytes: &[u8]) -> Vec<(usize, usize, RecordKind)> {
    let mut at = records_start(bytes);
    let mut out = Vec::new();
    while let Ok(Some((rec, len))) = decode_record(&bytes[at..]) {
        out.push((at, len, rec.kind));
        at += len;
    }
    out
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

fn refused_naming(opened: ackstore::Result<Store>, segment: u64, what: &str) {
    match opened {
        Err(Error::Corrupted {
            place: CorruptionPlace::Journal { segment: s, .. },
            ..
        }) if s == segment => {}
        Err(e) => panic!("{what}: refused, but not as damage of segment {segment}: {e}"),
        Ok(_) => panic!("{what}: opened"),
    }
}

#[test]
fn a_missing_listed_segment_oldest_middle_or_newest_is_refused_naming_it() {
    let base = tempfile::tempdir().unwrap();
    build(base.path());
    let segs = segments(base.path());
    assert!(segs.len() >= 3, "{segs:?}");
    for (what, seg) in [
        ("oldest", &segs[0]),
        ("middle", &segs[segs.len() / 2]),
        ("newest", &segs[segs.len() - 1]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(base.path(), dir.path());
        std::fs::remove_file(dir.path().join(seg.file_name().unwrap())).unwrap();
        refused_naming(Store::open(dir.path(), config()), seq_of(seg), what);
        let err = Store::open(dir.path(), config()).err().unwrap().to_string();
        assert!(err.contains(&format!("segment {}", seq_of(seg))), "{err}");
    }
}

#[test]
fn a_flipped_bit_in_a_synced_record_of_the_newest_segment_is_corruption_and_open_cuts_nothing() {
    let base = tempfile::tempdir().unwrap();
    build(base.path());
    let newest = segments(base.path()).pop().unwrap();
    let bytes = std::fs::read(&newest).unwrap();
    let recs = records(&bytes);
    assert!(!recs.is_empty(), "the newest segment holds records");
    for &(at, len, kind) in [recs[0], recs[recs.len() - 1]].iter() {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(base.path(), dir.path());
        let path = dir.path().join(newest.file_name().unwrap());
        let mut damaged = bytes.clone();
        damaged[at + len / 2] ^= 0x10;
        std::fs::write(&path, &damaged).unwrap();
        refused_naming(
            Store::open(dir.path(), config()),
            seq_of(&newest),
            &format!("{kind:?} at {at}"),
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            damaged,
            "open cut or changed it"
        );
    }
}

#[test]
fn a_damaged_header_of_a_listed_segment_is_corruption_and_the_segment_stays() {
    let base = tempfile::tempdir().unwrap();
    build(base.path());
    for seg in segments(base.path()) {
        let bytes = std::fs::read(&seg).unwrap();
        for byte in [0, 9, 13, 21] {
            let dir = tempfile::tempdir().unwrap();
            copy_dir(base.path(), dir.path());
            let path = dir.path().join(seg.file_name().unwrap());
            let mut damaged = bytes.clone();
            damaged[byte] ^= 0x04;
            std::fs::write(&path, &damaged).unwrap();
            refused_naming(
                Store::open(dir.path(), config()),
                seq_of(&seg),
                &format!("header byte {byte} of {seg:?}"),
            );
            assert_eq!(
                std::fs::read(&path).unwrap(),
                damaged,
                "open removed or changed it"
            );
        }
    }
}

#[test]
fn a_listed_segment_cut_below_what_it_holds_is_corruption() {
    let base = tempfile::tempdir().unwrap();
    build(base.path());
    let segs = segments(base.path());
    for seg in [&segs[0], &segs[segs.len() - 1]] {
        let bytes = std::fs::read(seg).unwrap();
        let recs = records(&bytes);
        // At a record boundary (every record before the cut verifies) and inside a record.
        let (at, len, _) = recs[recs.len() - 1];
        for cut in [at, at + len / 2] {
            let dir = tempfile::tempdir().unwrap();
            copy_dir(base.path(), dir.path());
            let path = dir.path().join(seg.file_name().unwrap());
            std::fs::write(&path, &bytes[..cut]).unwrap();
            refused_naming(
                Store::open(dir.path(), config()),
                seq_of(seg),
                &format!("{seg:?} cut at {cut}"),
            );
            assert_eq!(std::fs::read(&path).unwrap().len(), cut, "open changed it");
        }
    }
}

#[test]
fn a_seek_whose_marker_is_unreadable_is_corruption_never_the_acks_it_cleared() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        flusher_threads: 0,
        ..StoreConfig::default()
    };
    let ps: Vec<Position>;
    {
        let store = Store::open(dir.path(), config.clone()).unwrap();
        let t = store.topic("t").unwrap();
        ps = (0..20).map(|i| t.append(&[i]).unwrap()).collect();
        t.sync().unwrap();
        let c = t.open_cursor("c", opts()).unwrap();
        for p in ps.iter().skip(5).step_by(2) {
            c.ack(*p).unwrap();
        }
        c.flush().unwrap();
        // The seek clears every individual ack: it commits a marker with no partition.
        c.seek(ps[0]).unwrap();
        assert!(!c.is_acked(ps[5]).unwrap());
        drop(c);
        drop(t);
        store.close().unwrap();
    }
    // The seek's marker is the last marker of the journal: make it unreadable, its frame still
    // verifying (the marker's own checksum fails).
    let seg = segments(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let (at, len, kind) = *records(&bytes)
        .iter()
        .rev()
        .find(|(_, _, k)| matches!(k, RecordKind::Marker | RecordKind::Delta))
        .unwrap();
    let (rec, _) = decode_record(&bytes[at..]).unwrap().unwrap();
    let mut payload = rec.payload.to_vec();
    let last = payload.len() - 1;
    payload[last] ^= 0x01;
    let mut framed = Vec::new();
    encode_record(
        &mut framed,
        &Record {
            payload: &payload,
            ..rec
        },
    );
    assert_eq!(framed.len(), len);
    bytes[at..at + len].copy_from_slice(&framed);
    std::fs::write(&seg, &bytes).unwrap();
    match Store::open(dir.path(), config) {
        Err(Error::Corrupted {
            place: CorruptionPlace::Journal { segment, offset },
            ..
        }) => {
            assert_eq!((segment, offset), (seq_of(&seg), at as u64), "{kind:?}");
        }
        Err(e) => panic!("refused, but not as the seek's damage: {e}"),
        Ok(store) => {
            let t = store.topic("t").unwrap();
            let c = t.open_cursor("c", opts()).unwrap();
            panic!(
                "opened; entry {} acked again: {}",
                ps[5],
                c.is_acked(ps[5]).unwrap()
            );
        }
    }
}

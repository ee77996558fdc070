//! A store's cursor journal never opens an older state than the one it committed: a listed
//! segment that is missing, cut short, or whose header or synced records are damaged is
//! `Error::Corrupted` naming the segment, open removes and cuts nothing of it, and a seek whose
//! marker is unreadable is damage, never a walk back to the acks the seek cleared. So is a
//! segment whose two synced-length slots both fail, an older copy of a segment that a later
//! segment's header says ended longer, a segment dropped from the list, and a marker moved to
//! another cursor. Real files, each damage on a copy of one cleanly closed store.

use crate::support;

use std::path::{Path, PathBuf};

use ackstore::internals::format::journal::{
    Record, RecordKind, SLOT_COPIES, SLOT_LEN, SLOTS_AT, decode_record,
    decode_segment_header_version, encode_record, encode_slot,
};
use ackstore::{CorruptionPlace, Error, Position, Store, StoreConfig};

/// Journal segment size: small enough that [`build`] spans at least three segments.
const SEGMENT_BYTES: u64 = 700;

/// A store whose journal spans at least three segments, the newest holding records, closed
/// cleanly. Returns the positions appended.
fn build(dir: &Path) -> Vec<Position> {
    let store = Store::open(dir, support::config::store(8, SEGMENT_BYTES)).unwrap();
    let t = store.topic("t").unwrap();
    let ps: Vec<Position> = (0..48)
        .map(|i| t.append(format!("{i}").as_bytes()).unwrap())
        .collect();
    t.sync().unwrap();
    let cs: Vec<_> = ["x", "y", "z"]
        .iter()
        .map(|n| t.open_cursor(n, support::topic::earliest()).unwrap())
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

/// Where a segment's records start, as its version puts them.
fn records_start(bytes: &[u8]) -> usize {
    let (_, version) = decode_segment_header_version(bytes).unwrap();
    ackstore::internals::format::journal::records_start(version)
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
        refused_naming(
            Store::open(dir.path(), support::config::store(8, SEGMENT_BYTES)),
            seq_of(seg),
            what,
        );
        let err = Store::open(dir.path(), support::config::store(8, SEGMENT_BYTES))
            .err()
            .unwrap()
            .to_string();
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
            Store::open(dir.path(), support::config::store(8, SEGMENT_BYTES)),
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
                Store::open(dir.path(), support::config::store(8, SEGMENT_BYTES)),
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
                Store::open(dir.path(), support::config::store(8, SEGMENT_BYTES)),
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
        let c = t.open_cursor("c", support::topic::earliest()).unwrap();
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
    )
    .expect("the record encodes");
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
            let c = t.open_cursor("c", support::topic::earliest()).unwrap();
            panic!(
                "opened; entry {} acked again: {}",
                ps[5],
                c.is_acked(ps[5]).unwrap()
            );
        }
    }
}

#[test]
fn both_slot_copies_of_a_listed_segment_failing_is_corruption_never_a_torn_tail() {
    let base = tempfile::tempdir().unwrap();
    build(base.path());
    let segs = segments(base.path());
    for seg in [&segs[0], &segs[segs.len() - 1]] {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(base.path(), dir.path());
        let path = dir.path().join(seg.file_name().unwrap());
        let mut damaged = std::fs::read(seg).unwrap();
        damaged[SLOTS_AT..SLOTS_AT + SLOT_COPIES * SLOT_LEN].fill(0);
        std::fs::write(&path, &damaged).unwrap();
        refused_naming(
            Store::open(dir.path(), support::config::store(8, SEGMENT_BYTES)),
            seq_of(seg),
            &format!("both slots of {seg:?} zeroed"),
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            damaged,
            "open cut or changed it"
        );
    }
}

#[test]
fn an_older_copy_of_an_older_segment_consistent_in_itself_is_corruption() {
    let base = tempfile::tempdir().unwrap();
    build(base.path());
    let segs = segments(base.path());
    assert!(segs.len() >= 3, "{segs:?}");
    for seg in &segs[..segs.len() - 1] {
        // The segment as it was before its last record: its slots claim exactly that length,
        // as an earlier state of the file would.
        let bytes = std::fs::read(seg).unwrap();
        let recs = records(&bytes);
        let (cut, _, _) = recs[recs.len() - 1];
        let mut older = bytes[..cut].to_vec();
        for copy in 0..SLOT_COPIES {
            let at = SLOTS_AT + copy * SLOT_LEN;
            older[at..at + SLOT_LEN].copy_from_slice(&encode_slot(seq_of(seg), copy, cut as u64));
        }
        let dir = tempfile::tempdir().unwrap();
        copy_dir(base.path(), dir.path());
        let path = dir.path().join(seg.file_name().unwrap());
        std::fs::write(&path, &older).unwrap();
        refused_naming(
            Store::open(dir.path(), support::config::store(8, SEGMENT_BYTES)),
            seq_of(seg),
            &format!("{seg:?} replaced by its first {cut} bytes"),
        );
        assert_eq!(std::fs::read(&path).unwrap(), older, "open changed it");
    }
}

/// Drops the segment at place `i` of the catalog's list of `base` (its file stays) in a copy,
/// and checks that the copy's open refuses it as journal damage and removes nothing.
fn unlisted_is_refused(base: &Path, i: usize) {
    use support::mutate::{CatalogEdit, Mutation, Tree};
    let segs = segments(base);
    let mut tree = Tree::read(base);
    Mutation::Catalog(CatalogEdit::Unlist(i))
        .apply(&mut tree)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    tree.write(dir.path());
    match Store::open(dir.path(), support::config::store(8, SEGMENT_BYTES)) {
        Err(Error::Corrupted {
            place: CorruptionPlace::Journal { .. },
            ..
        }) => {}
        Err(e) => panic!("segment {i} unlisted: refused, but not as journal damage: {e}"),
        Ok(_) => panic!("segment {i} unlisted: opened"),
    }
    assert!(
        dir.path().join(segs[i].file_name().unwrap()).exists(),
        "open removed the unlisted segment {i}"
    );
}

#[test]
fn a_middle_segment_dropped_from_the_catalog_list_is_corruption_not_a_stray() {
    let base = tempfile::tempdir().unwrap();
    build(base.path());
    let segs = segments(base.path());
    assert!(segs.len() >= 3, "{segs:?}");
    // The next segment's header names it.
    unlisted_is_refused(base.path(), segs.len() / 2);
}

#[test]
fn the_newest_segment_dropped_from_the_catalog_list_while_it_holds_ticks_is_corruption() {
    let base = tempfile::tempdir().unwrap();
    build(base.path());
    let segs = segments(base.path());
    // Records are written into a segment only after it is listed: an unlisted one that holds
    // any was dropped from the list, never a creation cut short or a former owner's.
    unlisted_is_refused(base.path(), segs.len() - 1);
}

#[test]
fn the_only_listed_segment_dropped_from_the_catalog_list_is_corruption() {
    let base = tempfile::tempdir().unwrap();
    {
        let store = Store::open(base.path(), support::config::store(8, SEGMENT_BYTES)).unwrap();
        let t = store.topic("t").unwrap();
        let p = t.append(b"x").unwrap();
        t.sync().unwrap();
        let c = t.open_cursor("c", support::topic::earliest()).unwrap();
        c.ack(p).unwrap();
        store.flush_all().unwrap();
        drop(c);
        drop(t);
        store.close().unwrap();
    }
    assert_eq!(segments(base.path()).len(), 1);
    unlisted_is_refused(base.path(), 0);
}

#[test]
fn an_oldest_segment_a_committed_chain_reaches_into_dropped_from_the_list_is_corruption() {
    // One cursor: a full marker of many partitions in the first segment, then deltas on it that
    // fill later segments. Its live bytes stay above what a rollover would reclaim, so its
    // chain keeps reaching into the first segment.
    let base = tempfile::tempdir().unwrap();
    {
        let store = Store::open(base.path(), support::config::store(8, SEGMENT_BYTES)).unwrap();
        let t = store.topic("t").unwrap();
        let ps: Vec<Position> = (0..64)
            .map(|i| t.append(format!("{i}").as_bytes()).unwrap())
            .collect();
        t.sync().unwrap();
        let c = t.open_cursor("c", support::topic::earliest()).unwrap();
        for p in ps.iter().skip(1).step_by(2) {
            c.ack(*p).unwrap();
        }
        store.flush_all().unwrap();
        for p in ps.iter().skip(2).step_by(2).take(12) {
            c.ack(*p).unwrap();
            store.flush_all().unwrap();
        }
        drop(c);
        drop(t);
        store.close().unwrap();
    }
    let segs = segments(base.path());
    assert!(segs.len() >= 2, "{segs:?}");
    unlisted_is_refused(base.path(), 0);
}

/// Rewrites the journal record at `at` (`len` bytes) of segment file `seg` as a record of cursor
/// `to`, its frame CRC recomputed: what a defect writing a valid frame for the wrong cursor
/// leaves.
fn move_record_to_cursor(seg: &Path, at: usize, len: usize, to: u64) {
    let mut bytes = std::fs::read(seg).unwrap();
    let (record, _) = decode_record(&bytes[at..]).unwrap().unwrap();
    let payload = record.payload.to_vec();
    let mut framed = Vec::new();
    encode_record(
        &mut framed,
        &Record {
            cursor: to,
            payload: &payload,
            ..record
        },
    )
    .expect("the record encodes");
    assert_eq!(framed.len(), len);
    bytes[at..at + len].copy_from_slice(&framed);
    std::fs::write(seg, &bytes).unwrap();
}

#[test]
fn a_marker_moved_to_another_cursor_with_its_frame_crc_recomputed_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        flusher_threads: 0,
        ..StoreConfig::default()
    };
    {
        let store = Store::open(dir.path(), config.clone()).unwrap();
        let t = store.topic("t").unwrap();
        let ps: Vec<Position> = (0..20).map(|i| t.append(&[i]).unwrap()).collect();
        t.sync().unwrap();
        // Cumulative acks only: every marker holds no partition row, so nothing but the
        // marker's own checksum can say whose it is.
        let a = t.open_cursor("a", support::topic::earliest()).unwrap();
        let b = t.open_cursor("b", support::topic::earliest()).unwrap();
        a.ack_cumulative(ps[2]).unwrap();
        a.flush().unwrap();
        b.ack_cumulative(ps[15]).unwrap();
        b.flush().unwrap();
        drop((a, b));
        drop(t);
        store.close().unwrap();
    }
    let seg = segments(dir.path()).pop().unwrap();
    let bytes = std::fs::read(&seg).unwrap();
    let recs = records(&bytes);
    let markers: Vec<_> = recs
        .iter()
        .filter(|(_, _, k)| *k == RecordKind::Marker)
        .map(|&(at, len, _)| (at, len, decode_record(&bytes[at..]).unwrap().unwrap().0))
        .collect();
    let (at, len, last) = *markers.last().unwrap();
    let other = markers
        .iter()
        .map(|(_, _, r)| r.cursor)
        .find(|c| *c != last.cursor)
        .expect("markers of two cursors");
    move_record_to_cursor(&seg, at, len, other);
    match Store::open(dir.path(), config) {
        Err(Error::Corrupted {
            place: CorruptionPlace::Journal { segment, offset },
            ..
        }) => assert_eq!((segment, offset), (seq_of(&seg), at as u64)),
        Err(e) => panic!("refused, but not as the moved marker's damage: {e}"),
        Ok(store) => {
            let t = store.topic("t").unwrap();
            let a = t.open_cursor("a", support::topic::earliest()).unwrap();
            panic!(
                "opened; cursor a's mark-delete is {:?}",
                a.mark_delete_position()
            );
        }
    }
}

#[test]
fn a_forget_moved_to_another_cursor_with_its_frame_crc_recomputed_is_corruption() {
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
        let a = t.open_cursor("a", support::topic::earliest()).unwrap();
        let b = t.open_cursor("b", support::topic::earliest()).unwrap();
        for p in ps.iter().step_by(3) {
            b.ack(*p).unwrap();
        }
        a.ack(ps[1]).unwrap();
        store.flush_all().unwrap();
        drop(a);
        t.delete_cursor("a").unwrap();
        drop(b);
        drop(t);
        store.close().unwrap();
    }
    let seg = segments(dir.path()).pop().unwrap();
    let bytes = std::fs::read(&seg).unwrap();
    let recs = records(&bytes);
    let (at, len, _) = *recs
        .iter()
        .find(|(_, _, k)| *k == RecordKind::Forget)
        .expect("a forget record");
    let (forget, _) = decode_record(&bytes[at..]).unwrap().unwrap();
    let other = recs
        .iter()
        .map(|&(o, _, _)| decode_record(&bytes[o..]).unwrap().unwrap().0.cursor)
        .find(|c| *c != forget.cursor)
        .expect("records of cursor b");
    move_record_to_cursor(&seg, at, len, other);
    match Store::open(dir.path(), config) {
        Err(Error::Corrupted {
            place: CorruptionPlace::Journal { segment, offset },
            ..
        }) => assert_eq!((segment, offset), (seq_of(&seg), at as u64)),
        Err(e) => panic!("refused, but not as the moved forget's damage: {e}"),
        Ok(store) => {
            let t = store.topic("t").unwrap();
            let b = t.open_cursor("b", support::topic::earliest()).unwrap();
            panic!(
                "opened; cursor b holds entry {} acked: {}",
                ps[0],
                b.is_acked(ps[0]).unwrap()
            );
        }
    }
}

#[test]
fn a_marker_moved_to_a_deleted_cursor_is_corruption_not_ignored() {
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
        let a = t.open_cursor("a", support::topic::earliest()).unwrap();
        let b = t.open_cursor("b", support::topic::earliest()).unwrap();
        a.ack(ps[1]).unwrap();
        b.ack(ps[2]).unwrap();
        store.flush_all().unwrap();
        drop(a);
        t.delete_cursor("a").unwrap();
        // b's newest marker comes after a's forget.
        b.ack(ps[7]).unwrap();
        b.flush().unwrap();
        drop(b);
        drop(t);
        store.close().unwrap();
    }
    let seg = segments(dir.path()).pop().unwrap();
    let bytes = std::fs::read(&seg).unwrap();
    let recs = records(&bytes);
    let decoded: Vec<_> = recs
        .iter()
        .map(|&(at, len, _)| (at, len, decode_record(&bytes[at..]).unwrap().unwrap().0))
        .collect();
    let deleted = decoded
        .iter()
        .find(|(_, _, r)| r.kind == RecordKind::Forget)
        .map(|(_, _, r)| r.cursor)
        .expect("a forget record");
    let &(at, len, last) = decoded
        .iter()
        .rev()
        .find(|(_, _, r)| matches!(r.kind, RecordKind::Marker | RecordKind::Delta))
        .unwrap();
    assert_ne!(last.cursor, deleted, "the last marker is b's");
    move_record_to_cursor(&seg, at, len, deleted);
    match Store::open(dir.path(), config) {
        Err(Error::Corrupted {
            place: CorruptionPlace::Journal { segment, offset },
            ..
        }) => assert_eq!((segment, offset), (seq_of(&seg), at as u64)),
        Err(e) => panic!("refused, but not as the moved marker's damage: {e}"),
        Ok(store) => {
            let t = store.topic("t").unwrap();
            let b = t.open_cursor("b", support::topic::earliest()).unwrap();
            panic!(
                "opened; cursor b holds entry {} acked: {}",
                ps[7],
                b.is_acked(ps[7]).unwrap()
            );
        }
    }
}

//! Sample directories of every cursor-ledger form, each a cursor ledger and its record on real
//! files, open to exactly the state they hold, so a format change that breaks old files fails
//! here: `tests/data/cursor-v1-*` (markers and index pages of kinds 2 and 4, every partition in
//! an entry of its own) and `tests/data/cursor-v2-*` (compact markers and index pages of kinds 7
//! and 8, small partitions inline).

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::CursorConfig;
use ackstore::Position;
use ackstore::internals::cursor::recover::{RecoveredCursor, RecoverySource, recover};
use ackstore::internals::cursor::verify::check_cursor_ledger;
use ackstore::internals::format::cursor::{
    CompactTable, EntryKind, RowForm, decode_compact_marker, peek_kind,
};
use ackstore::internals::log::{EntryLog, LogConfig};
use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::{FileStorage, Storage};

/// Copies sample `name` into a temporary directory (opening may repair a torn tail) and
/// recovers its cursor; also returns how many torn tails the log cut.
fn open_sample(name: &str) -> (tempfile::TempDir, RecoveredCursor, usize) {
    let dir = support::samples::sample_dir(name);
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(dir.path(), false).unwrap());
    let log = Arc::new(EntryLog::open(Arc::clone(&storage), LogConfig::default()).unwrap());
    let repairs = log.recovery_report().len();
    let meta: Arc<dyn MetaStore> = Arc::new(FileMetaStore::new(storage));
    let cursor = recover(log, meta, "cursor-1", &CursorConfig::default()).unwrap();
    (dir, cursor, repairs)
}

fn acked(cursor: &mut RecoveredCursor) -> BTreeSet<Position> {
    let mut out = BTreeSet::new();
    for (from, to) in cursor.acks.ranges().unwrap() {
        out.extend((from.entry_id..=to.entry_id).map(|e| Position::new(from.ledger_id, e)));
    }
    out
}

/// What every sample's first flush held: mark-delete 3:0, epoch 2, property x = 7.
fn first_flush(extra_partitions: u64) -> BTreeSet<Position> {
    let mut acks: BTreeSet<_> = [1, 3, 5].map(|e| Position::new(3, e)).into();
    acks.extend((70_000..=70_010).map(|e| Position::new(3, e)));
    acks.extend((0..extra_partitions).map(|c| Position::new(4, c << 16)));
    acks
}

fn check_state(cursor: &RecoveredCursor) {
    assert_eq!(cursor.state.mark_delete, Position::new(3, 0));
    assert_eq!(cursor.state.epoch, 2);
    assert_eq!(cursor.state.properties.get("x"), Some(&7));
}

/// Both flushes of an intact sample: the first flush plus 3:200000.
fn check_both_flushes(name: &str, from_snapshot: bool) {
    let (_dir, mut cursor, repairs) = open_sample(name);
    assert_eq!(repairs, 0);
    let source = cursor.report.source;
    assert_eq!(
        matches!(source, RecoverySource::Snapshot(_)),
        from_snapshot,
        "{source:?}"
    );
    assert_ne!(source, RecoverySource::Record);
    check_state(&cursor);
    let mut expected = first_flush(0);
    expected.insert(Position::new(3, 200_000));
    assert_eq!(acked(&mut cursor), expected);
}

#[test]
fn multi_entry_sample_recovers_from_its_last_marker() {
    check_both_flushes("cursor-v1-multi", false);
}

#[test]
fn single_entry_sample_recovers_from_its_last_snapshot() {
    check_both_flushes("cursor-v1-single", true);
}

#[test]
fn sample_with_a_torn_last_marker_recovers_the_paged_marker_before_it() {
    let (_dir, mut cursor, repairs) = open_sample("cursor-v1-paged-torn-marker");
    assert_eq!(repairs, 1, "the torn marker is cut as the ledger's tail");
    assert!(matches!(cursor.report.source, RecoverySource::Marker(_)));
    check_state(&cursor);
    assert_eq!(acked(&mut cursor), first_flush(10));
}

/// The payload of the newest entry of cursor ledger 1 in `dir` that is a marker of `kind`.
fn last_marker(dir: &tempfile::TempDir, kind: EntryKind) -> Vec<u8> {
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(dir.path(), false).unwrap());
    let log = EntryLog::open(storage, LogConfig::default()).unwrap();
    (0..log.entry_count(1).unwrap())
        .map(|e| log.read(1, e).unwrap().payload)
        .filter(|p| peek_kind(p).unwrap() == kind)
        .last()
        .expect("a marker of that kind")
}

/// `tests/data/cursor-v2-multi`: two flushes of the first-flush state plus a random half of
/// ledger 4's second partition (`support::samples::dense`), then 3:200000. Its compact marker
/// holds the table inline: small partitions inline, the dense one in an entry of its own.
#[test]
fn compact_sample_recovers_inline_and_separate_partitions_lazily() {
    let (dir, mut cursor, repairs) = open_sample("cursor-v2-multi");
    assert_eq!(repairs, 0);
    assert!(matches!(cursor.report.source, RecoverySource::Marker(_)));
    assert_eq!(cursor.report.rejected, 0);
    check_state(&cursor);
    assert_eq!(
        cursor.acks.stats().resident_partitions,
        0,
        "nothing decoded yet"
    );
    assert!(cursor.acks.contains(Position::new(3, 200_000)).unwrap());
    assert_eq!(
        cursor.acks.stats().resident_partitions,
        1,
        "one partition decoded"
    );
    let mut expected = support::samples::first_flush(0);
    expected.extend(support::samples::dense());
    expected.insert(Position::new(3, 200_000));
    assert_eq!(acked(&mut cursor), expected);
    drop(cursor);
    let marker = last_marker(&dir, EntryKind::CompactMarker);
    let CompactTable::Inline(rows) = decode_compact_marker(&marker).unwrap().table else {
        panic!("the sample's table is inline")
    };
    let forms: Vec<bool> = rows
        .iter()
        .map(|r| matches!(r.form, RowForm::Inline(_)))
        .collect();
    assert_eq!(
        forms,
        [true, true, true, true, false],
        "3:0, 3:1, 3:3 and 4:0 inline; 4:1 in an entry of its own"
    );
}

/// `tests/data/cursor-v2-paged-torn-marker`: pages of at most 256 bytes and 4 rows; the first
/// flush of ten more partitions of ledger 5 paged the table (the scattered partition in an entry
/// of its own, as it exceeds a quarter of such a page), the second rewrote one page, the third
/// (5:196617) was torn inside its marker.
#[test]
fn compact_sample_with_a_torn_last_marker_recovers_the_paged_marker_before_it() {
    let (dir, mut cursor, repairs) = open_sample("cursor-v2-paged-torn-marker");
    assert_eq!(repairs, 1, "the torn marker is cut as the ledger's tail");
    assert!(matches!(cursor.report.source, RecoverySource::Marker(_)));
    check_state(&cursor);
    let mut expected = support::samples::first_flush(10);
    expected.insert(Position::new(3, 200_000));
    assert_eq!(acked(&mut cursor), expected);
    let source = cursor.report.source;
    drop(cursor);
    let marker = last_marker(&dir, EntryKind::CompactMarker);
    let table = decode_compact_marker(&marker).unwrap().table;
    assert!(
        matches!(table, CompactTable::Paged(pages) if pages.len() >= 4),
        "the recovered marker lists pages"
    );
    // The check a `verify` runs agrees: no damage before the cut, the same state.
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(dir.path(), false).unwrap());
    let log = EntryLog::open(storage, LogConfig::default()).unwrap();
    let check = check_cursor_ledger(&log, 1).unwrap();
    assert!(check.problems.is_empty(), "{:?}", check.problems);
    assert_eq!(check.newest_valid, Some(source));
    assert!(check.inline_partitions > 0 && check.partitions > 0);
}

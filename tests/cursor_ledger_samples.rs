//! Sample directories written by format version 1 (`tests/data/cursor-v1-*`: a cursor ledger and
//! its record, on real files) still open to exactly the state they hold, so a format change that
//! breaks old files fails here.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::CursorConfig;
use ackstore::Position;
use ackstore::internals::cursor::recover::{RecoveredCursor, RecoverySource, recover};
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
    let cursor = recover(log, meta, "cursor-1", CursorConfig::default()).unwrap();
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

//! Attacks on the import of a cursor read from a cursor ledger into its topic's journal, on
//! both hosts: damage to the cursor records and the ledgers around the move, read against what
//! every other cursor of the topic flushed.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::internals::format::meta::CursorRecord;
use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::{Cursor, MemStorage, Position};
use support::topic::{
    Host, Hosted, earliest, on_each_host, open_hosted, topic_storage, with_a_ledger_cursor,
};

const PER_LEDGER: u64 = 40;
const ENTRIES: u64 = 120;

fn open(host: Host, disk: &MemStorage) -> ackstore::Result<Hosted> {
    open_hosted(
        host,
        Arc::new(disk.clone()),
        &support::topic::config(PER_LEDGER),
    )
}

/// The entries among `positions` that `cursor` counts as acknowledged.
fn done(cursor: &Cursor, positions: &[Position]) -> BTreeSet<Position> {
    let mark = cursor.mark_delete_position().unwrap();
    positions
        .iter()
        .copied()
        .filter(|&p| mark.is_some_and(|m| p <= m) || cursor.is_acked(p).unwrap())
        .collect()
}

/// The topic `host` keeps on a fresh disk with [`ENTRIES`] entries and two cursors on cursor
/// ledgers, as an earlier release wrote them: `sub` acked every third entry from the second,
/// `other` every fifth from the third. Returns the disk, the positions and `other`'s acks.
fn two_ledger_cursors(host: Host) -> (MemStorage, Vec<Position>, BTreeSet<Position>) {
    let disk = MemStorage::new();
    let (positions, _) = with_a_ledger_cursor(host, &disk, (ENTRIES, PER_LEDGER), |i| i % 3 == 1);
    let ml = ackstore::ManagedLedger::open_with_storage(
        topic_storage(host, &disk),
        support::config::on_cursor_ledgers(support::topic::config(PER_LEDGER)),
    )
    .unwrap();
    let other = ml.open_cursor("other", earliest()).unwrap();
    let acked: BTreeSet<Position> = positions.iter().copied().skip(2).step_by(5).collect();
    for &p in &acked {
        other.ack(p).unwrap();
    }
    other.close().unwrap();
    ml.close().unwrap();
    (disk, positions, acked)
}

/// The name of cursor `cursor`'s record in the topic's metadata store `meta`.
fn record_of(meta: &FileMetaStore, cursor: &str) -> String {
    meta.list()
        .unwrap()
        .into_iter()
        .filter(|name| name.starts_with("cursor-"))
        .find(|name| {
            let (_, bytes) = meta.get(name).unwrap().unwrap();
            CursorRecord::decode(&bytes).unwrap().name == cursor
        })
        .unwrap()
}

/// Cursor `sub` is imported (the journal holds it, its record names no ledger), then its
/// record is replaced by a copy of `other`'s, which names `other`'s cursor ledger (a record
/// moved or restored under the wrong name). `sub` still opens from the journal and writes;
/// whatever the open and `verify` make of the misplaced record, `other`'s cursor ledger is
/// never taken for `sub`'s superseded one: `other` keeps every ack it flushed.
#[test]
fn a_misplaced_record_of_an_imported_cursor_never_retires_a_siblings_ledger() {
    on_each_host(|host| {
        let (disk, positions, other_acked) = two_ledger_cursors(host);
        let hosted = open(host, &disk).unwrap();
        let sub = hosted.open_cursor("sub", earliest()).unwrap();
        let mut sub_acked = done(&sub, &positions);
        sub.ack(positions[0]).unwrap();
        sub.flush().unwrap();
        sub_acked.insert(positions[0]);
        assert_eq!(sub.stats().unwrap().persist.cursor_ledger, None);
        drop(sub);
        hosted.close().unwrap();

        let meta = FileMetaStore::new(topic_storage(host, &disk));
        let (sub_name, other_name) = (record_of(&meta, "sub"), record_of(&meta, "other"));
        let (_, other_bytes) = meta.get(&other_name).unwrap().unwrap();
        assert!(
            CursorRecord::decode(&other_bytes)
                .unwrap()
                .cursor_ledger
                .is_some()
        );
        let (version, _) = meta.get(&sub_name).unwrap().unwrap();
        meta.put(&sub_name, Some(version), &other_bytes).unwrap();

        // The misplaced record may be refused; if the topic opens, `sub` writes.
        if let Ok(hosted) = open(host, &disk) {
            if let Ok(sub) = hosted.open_cursor("sub", earliest()) {
                assert_eq!(done(&sub, &positions), sub_acked, "{host:?}: sub");
                sub.ack(positions[3]).unwrap();
                let _ = sub.flush();
                let _ = sub.close();
            }
            let _ = hosted.close();
        }
        // Put `sub`'s record right again, as an operator repairing the damage would.
        let (version, _) = meta.get(&sub_name).unwrap().unwrap();
        let mut repaired = CursorRecord::decode(&other_bytes).unwrap();
        repaired.name = "sub".into();
        repaired.cursor_ledger = None;
        repaired.identity = None;
        meta.put(&sub_name, Some(version), &repaired.encode())
            .unwrap();

        let hosted = open(host, &disk).unwrap();
        let other = hosted.open_cursor("other", earliest()).unwrap();
        assert_eq!(done(&other, &positions), other_acked, "{host:?}: other");
    });
}

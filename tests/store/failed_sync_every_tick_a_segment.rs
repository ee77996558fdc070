//! A failed `fdatasync` or directory sync at each sync in turn of a store whose journal starts
//! a new segment at every tick (segments of 1 byte): so many of the failures hit a new
//! segment's header or the catalog's temporary file that lists it, the two that do not latch
//! (docs/persistence.md, "A failed fsync"). The call that made the failing sync fails, the
//! cursors go on acking and flushing (later ticks after a header's or a record's failure may
//! answer `Ok`), and a power cut afterwards keeps every ack a flush answered `Ok` for and
//! invents none.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

use ackstore::{MemStorage, Position, Store};
use support::config::store;
use support::hooked::{Fault, Hooked};
use support::topic::earliest;

const PER_LEDGER: u64 = 4;
const ENTRIES: usize = 12;
const CURSORS: [&str; 2] = ["a", "b"];

/// What the cursors were told: per cursor, every ack tried and the acks an `Ok` flush covered.
#[derive(Debug, Default)]
struct Model {
    entries: Vec<Position>,
    tried: BTreeMap<&'static str, BTreeSet<Position>>,
    durable: BTreeMap<&'static str, BTreeSet<Position>>,
}

/// Appends and syncs [`ENTRIES`] entries, then acks each in turn on each cursor and flushes
/// after every ack, going on after any error; returns the model, the disk, the names of the
/// files whose sync failed and the syncs made (file, directory).
fn run(fault: Fault) -> (Model, MemStorage, Vec<String>, (u64, u64)) {
    let disk = MemStorage::new();
    let hooked = Hooked::new(disk.clone());
    let config = store(PER_LEDGER, 1);
    let store = Store::open_with_storage(Arc::new(hooked.clone()), config).expect("open");
    let topic = store.topic("t").expect("topic");
    let mut m = Model::default();
    for i in 0..ENTRIES {
        m.entries
            .push(topic.append(format!("e{i}").as_bytes()).expect("append"));
    }
    topic.sync().expect("sync");
    let cursors: Vec<_> = CURSORS
        .iter()
        .map(|name| topic.open_cursor(name, earliest()).expect("cursor"))
        .collect();
    let before = hooked.arm(fault);
    let armed =
        || hooked.hooks.fail_sync_in.load(SeqCst) + hooked.hooks.fail_dir_sync_in.load(SeqCst) != 0;
    for &p in &m.entries {
        for (name, cursor) in CURSORS.iter().zip(&cursors) {
            m.tried.entry(name).or_default().insert(p);
            if cursor.ack(p).is_err() {
                continue;
            }
            let was_armed = armed();
            let flushed = cursor.flush();
            if was_armed && !armed() {
                assert!(
                    flushed.is_err(),
                    "{fault:?}: the flush whose sync failed answered Ok"
                );
            }
            if flushed.is_ok() {
                let acked = m.tried[name].clone();
                m.durable.insert(name, acked);
            }
        }
    }
    let after = hooked.sync_counts();
    drop(cursors);
    drop(topic);
    let _ = store.close();
    let failed = std::mem::take(&mut *hooked.hooks.failed_syncs.lock().unwrap());
    (m, disk, failed, (after.0 - before.0, after.1 - before.1))
}

/// Reopens the disk after a power cut and checks the cursors against `m`.
fn check(image: &MemStorage, m: &Model, what: &str) {
    let store = Store::open_with_storage(Arc::new(image.clone()), store(PER_LEDGER, 1))
        .unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    let topic = store.topic("t").expect("topic");
    for name in CURSORS {
        let cursor = topic.open_cursor(name, earliest()).expect("cursor");
        let got: BTreeSet<Position> = m
            .entries
            .iter()
            .copied()
            .filter(|&p| cursor.is_acked(p).expect("is_acked"))
            .collect();
        let tried = m.tried.get(name).cloned().unwrap_or_default();
        let durable = m.durable.get(name).cloned().unwrap_or_default();
        assert!(got.is_subset(&tried), "{what}: cursor {name} invented acks");
        assert!(
            durable.is_subset(&got),
            "{what}: cursor {name} lost flushed acks {:?}",
            durable.difference(&got).collect::<Vec<_>>()
        );
    }
    drop(topic);
    store.close().expect("close");
}

#[test]
fn a_failed_sync_of_a_new_segments_header_or_its_listing_then_more_ticks_loses_no_ok_flush() {
    let (clean, disk, failed, (syncs, dir_syncs)) = run(Fault::File(0));
    assert!(failed.is_empty());
    check(&disk.durable_image(), &clean, "no failure");
    assert!(
        syncs > 20 && dir_syncs > 20,
        "syncs: {syncs} of files, {dir_syncs} of the directory"
    );
    let mut kinds = BTreeSet::new();
    let mut went_on_after = 0;
    let faults = (1..=syncs)
        .map(Fault::File)
        .chain((1..=dir_syncs).map(Fault::Dir));
    for fault in faults {
        let (m, disk, failed, _) = run(fault);
        // Not latched: the ticks after the failure go on answering Ok, to the last ack.
        let went_on = CURSORS
            .iter()
            .all(|name| m.durable.get(name).is_some_and(|d| d.len() == ENTRIES));
        went_on_after += usize::from(went_on && !failed.is_empty());
        for file in failed {
            kinds.insert(if file.ends_with(".meta.tmp") {
                "record"
            } else if file.contains("journal-") {
                "segment"
            } else {
                "other"
            });
        }
        check(&disk.durable_image(), &m, &format!("{fault:?}"));
    }
    assert!(
        kinds.contains("record") && kinds.contains("segment"),
        "failed: {kinds:?}"
    );
    assert!(
        went_on_after > 0,
        "no failed sync was followed by Ok flushes"
    );
}

//! The repair a store topic's open keeps in memory, against a former owner (its lock broken, it
//! does not know) that appends to the ledger it was writing after the new owner claimed the
//! store and read that ledger, while the new owner consumes without a record write and then
//! crashes: synced entries stay, flushed acks stay, nothing is invented, indexes only grow.

use crate::support;

use support::topic::store_config;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::{CursorOptions, MemStorage, Position, Store};
use support::crash::torn_image;

struct Run {
    disk: MemStorage,
    synced: Vec<Position>,
    /// Every ack any application thread made (former owner's and new owner's).
    truth: BTreeSet<Position>,
    /// Acks covered by a flush that returned Ok.
    flushed: BTreeSet<Position>,
    /// What the former owner appended after the claim, and whether its sync returned Ok.
    late: Vec<Position>,
    late_synced: bool,
}

fn run(new_owner_appends: bool) -> Run {
    let disk = MemStorage::new();
    let old = Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000)).expect("open");
    let ot = old.topic("t").expect("topic");
    let synced: Vec<Position> = (0..3).map(|_| ot.append(b"o").expect("append")).collect();
    ot.sync().expect("sync");
    let oc = ot
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    oc.ack(synced[0]).expect("ack");
    oc.flush().expect("flush");
    let mut truth: BTreeSet<Position> = [synced[0]].into();
    let mut flushed = truth.clone();

    disk.break_lock();
    let new = Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000)).expect("claim");
    let nt = new.topic("t").expect("new owner's topic");
    assert_eq!(nt.last_position(), Some(synced[2]));

    // The former owner goes on: two appends to its open ledger, a sync, an ack and a flush.
    let late: Vec<Position> = (0..2)
        .map(|_| ot.append(b"late").expect("append"))
        .collect();
    let late_synced = ot.sync().is_ok();
    // Its ack of a late entry takes only if the entry became readable (its sync returned Ok).
    let acked = oc.ack(late[0]).is_ok_and(|changed| changed);
    if acked {
        truth.insert(late[0]);
    }
    if oc.flush().is_ok() && acked {
        flushed.insert(late[0]);
    }

    // The new owner consumes what it read, and flushes.
    let nc = nt
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    assert!(nc.is_acked(synced[0]).expect("is_acked"));
    for p in &synced[1..] {
        nc.ack(*p).expect("ack");
        truth.insert(*p);
    }
    nc.ack_cumulative(synced[2]).expect("ack_cumulative");
    nc.flush().expect("the new owner's flush");
    flushed.extend(synced.iter().copied());
    let mut synced = synced;
    if new_owner_appends {
        let p = nt.append(b"n").expect("append");
        nt.sync().expect("the new owner's sync");
        synced.push(p);
    }
    // Both processes die.
    std::mem::forget((nc, nt, new, oc, ot, old));
    Run {
        disk,
        synced,
        truth,
        flushed,
        late,
        late_synced,
    }
}

fn check(image: &MemStorage, r: &Run, what: &str) {
    let store = Store::open_with_storage(Arc::new(image.clone()), store_config(1_000))
        .unwrap_or_else(|e| panic!("{what}: open: {e}"));
    let t = store
        .topic("t")
        .unwrap_or_else(|e| panic!("{what}: topic: {e}"));
    for p in &r.synced {
        t.read(*p)
            .unwrap_or_else(|e| panic!("{what}: synced {p} lost: {e}"));
    }
    if r.late_synced {
        for p in &r.late {
            t.read(*p)
                .unwrap_or_else(|e| panic!("{what}: {p} synced Ok by the former owner, lost: {e}"));
        }
    }
    let c = t
        .open_cursor("sub", CursorOptions::default())
        .unwrap_or_else(|e| panic!("{what}: cursor: {e}"));
    let all: Vec<Position> = r.synced.iter().chain(&r.late).copied().collect();
    for p in &all {
        let acked = c.is_acked(*p).expect("is_acked");
        assert!(
            !acked || r.truth.contains(p),
            "{what}: {p} acked, never acked by any application thread"
        );
        assert!(
            acked || !r.flushed.contains(p),
            "{what}: {p} flushed Ok, lost"
        );
    }
    // Indexes never go backwards over what a consumer reads from the start.
    let reader = t
        .open_non_durable_cursor(
            ackstore::InitialPosition::Earliest,
            ackstore::NonDurableOptions {
                inclusive: true,
                name: "r".into(),
            },
        )
        .expect("reader");
    let mut last: Option<(Position, u64)> = None;
    loop {
        let batch = reader.read_entries(16).expect("read");
        if batch.is_empty() {
            break;
        }
        for e in batch {
            if let Some((p, i)) = last {
                assert!(
                    e.position > p && e.index > i,
                    "{what}: {} (index {}) after {p} (index {i})",
                    e.position,
                    e.index
                );
            }
            last = Some((e.position, e.index));
        }
    }
    // The recovered owner writes and restarts.
    let p = t
        .append(b"after")
        .unwrap_or_else(|e| panic!("{what}: append: {e}"));
    t.sync().unwrap_or_else(|e| panic!("{what}: sync: {e}"));
    drop((c, reader, t));
    store
        .close()
        .unwrap_or_else(|e| panic!("{what}: close: {e}"));
    drop(store);
    let again = Store::open_with_storage(Arc::new(image.clone()), store_config(1_000))
        .unwrap_or_else(|e| panic!("{what}: second open: {e}"));
    let t = again
        .topic("t")
        .unwrap_or_else(|e| panic!("{what}: second topic: {e}"));
    t.read(p).unwrap_or_else(|e| panic!("{what}: {p}: {e}"));
}

#[test]
fn a_former_owners_late_appends_never_break_the_acked_set_after_a_crash() {
    for appends in [false, true] {
        let r = run(appends);
        assert!(
            !r.late_synced,
            "the former owner's sync after the claim returned Ok"
        );
        for (name, image) in [
            ("durable", r.disk.durable_image()),
            ("live", r.disk.crash_image(|_, _, live| live.to_vec())),
            ("torn", torn_image(&r.disk, |n| n / 2)),
        ] {
            check(
                &image,
                &r,
                &format!("new owner appends {appends}, {name} image"),
            );
        }
    }
}

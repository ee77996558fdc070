//! A new owner claims the store at every storage operation of a former owner's flush tick of
//! deltas (with small segments, so the tick also starts a segment and rolls over, re-basing
//! chains): the new owner recovers chains the former owner built, acks and flushes its own
//! deltas on them (`Ok`), and the former owner tries once more. After a restart from the
//! durable image, no cursor holds an ack nobody made, the new owner's flushed acks are all
//! there, and so are the former owner's if its tick returned `Ok`.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::{MemStorage, Position, Store};
use support::takeover;

/// Journal segment size: small enough that the former owner's tick writes deltas, re-bases and
/// rolls over.
const SEGMENT_BYTES: u64 = 500;

const NAMES: [&str; 3] = ["x", "y", "z"];

fn pos(i: u64) -> Position {
    // Entry i of the topic: ledgers of four entries, numbered from 1.
    Position::new(1 + i / 4, i % 4)
}

/// The former owner's chains: twelve ticks of deltas. Returns the acks made.
fn prepare(disk: &MemStorage) -> BTreeMap<String, BTreeSet<Position>> {
    let store = Store::open_with_storage(
        Arc::new(disk.clone()),
        support::config::store(4, SEGMENT_BYTES),
    )
    .unwrap();
    let t = store.topic("t").unwrap();
    let ps: Vec<Position> = (0..64)
        .map(|i| t.append(format!("{i}").as_bytes()).unwrap())
        .collect();
    assert_eq!(ps[13], pos(13), "entry positions");
    t.sync().unwrap();
    let mut truth: BTreeMap<String, BTreeSet<Position>> = BTreeMap::new();
    let cs: Vec<_> = NAMES
        .iter()
        .map(|n| t.open_cursor(n, support::topic::earliest()).unwrap())
        .collect();
    for round in 0..12u64 {
        for (i, (n, c)) in NAMES.iter().zip(&cs).enumerate() {
            let p = pos((round * 11 + i as u64 * 17 + 3) % 64);
            c.ack(p).unwrap();
            truth.entry(n.to_string()).or_default().insert(p);
        }
        store.flush_all().unwrap();
    }
    drop(cs);
    drop(t);
    store.close().unwrap();
    truth
}

/// One scenario with the claim after `n` operations of the former owner's tick (`u64::MAX`:
/// no claim during it). Returns the number of operations the tick made and any failure.
fn scenario(n: u64) -> (u64, Option<String>) {
    let disk = MemStorage::new();
    let mut truth = prepare(&disk);
    let mut flushed = truth.clone();
    let hooked = takeover::Disk::new(Arc::new(disk.clone()));
    let old = Store::open_with_storage(
        hooked.storage.clone(),
        support::config::store(4, SEGMENT_BYTES),
    )
    .unwrap();
    let ot = old.topic("t").unwrap();
    let ocs: Vec<_> = NAMES
        .iter()
        .map(|n| ot.open_cursor(n, support::topic::earliest()).unwrap())
        .collect();
    for (i, (name, c)) in NAMES.iter().zip(&ocs).enumerate() {
        for k in 0..3u64 {
            let p = pos((40 + i as u64 * 7 + k * 5) % 64);
            c.ack(p).unwrap();
            truth.get_mut(*name).unwrap().insert(p);
        }
    }
    let slot = {
        let disk = disk.clone();
        hooked.arm_takeover(n, move || {
            takeover::new_store_owner(&disk, support::config::store(4, SEGMENT_BYTES), "t")
        })
    };
    let before = hooked.hook.count();
    let former = old.flush_all();
    let steps = hooked.hook.count() - before;
    if n == u64::MAX {
        let stats = old.journal_stats();
        assert!(
            former.is_ok() && stats.deltas > 0 && stats.rebases > 0 && stats.rollovers > 0,
            "the tick without a claim writes deltas and re-bases: {stats:?} {former:?}"
        );
    }
    if former.is_ok() {
        flushed = truth.clone();
    }
    let new = match slot.lock().unwrap().take() {
        Some(new) => new,
        None => takeover::new_store_owner(&disk, support::config::store(4, SEGMENT_BYTES), "t"),
    };
    let nt = new.topic("t").unwrap();
    let ncs: Vec<_> = NAMES
        .iter()
        .map(|n| nt.open_cursor(n, support::topic::earliest()).unwrap())
        .collect();
    let mut new_flushed = BTreeMap::new();
    for (i, (name, c)) in NAMES.iter().zip(&ncs).enumerate() {
        let p = pos((20 + i as u64 * 3) % 64);
        c.ack(p).unwrap();
        truth.get_mut(*name).unwrap().insert(p);
        let acked: BTreeSet<Position> = (0..64)
            .map(pos)
            .filter(|p| c.is_acked(*p).unwrap())
            .collect();
        new_flushed.insert(name.to_string(), acked);
    }
    if let Err(e) = new.flush_all() {
        return (
            steps,
            Some(format!(
                "claim after {n}: the new owner's flush failed: {e}"
            )),
        );
    }
    // The former owner tries again.
    for c in &ocs {
        let _ = c.ack(pos(63));
    }
    let again = old.flush_all();
    if again.is_ok() {
        for n in NAMES {
            truth.get_mut(n).unwrap().insert(pos(63));
            flushed.get_mut(n).unwrap().insert(pos(63));
        }
    }
    std::mem::forget((ncs, nt, new, ocs, ot, old));
    let store = match Store::open_with_storage(
        Arc::new(disk.durable_image()),
        support::config::store(4, SEGMENT_BYTES),
    ) {
        Ok(s) => s,
        Err(e) => return (steps, Some(format!("claim after {n}: restart: {e}"))),
    };
    let t = store.topic("t").unwrap();
    for name in NAMES {
        let c = t.open_cursor(name, support::topic::earliest()).unwrap();
        let got: BTreeSet<Position> = (0..64)
            .map(pos)
            .filter(|p| c.is_acked(*p).unwrap())
            .collect();
        if let Some(p) = got.difference(&truth[name]).next() {
            return (
                steps,
                Some(format!("claim after {n}: {name} holds {p}, never acked")),
            );
        }
        if let Some(p) = new_flushed[name].difference(&got).next() {
            return (
                steps,
                Some(format!(
                    "claim after {n}: {name} lost {p} of the new owner's Ok flush"
                )),
            );
        }
        if let Some(p) = flushed[name].difference(&got).next() {
            return (
                steps,
                Some(format!(
                    "claim after {n}: {name} lost {p} of the former owner's Ok tick ({former:?}, then {again:?})"
                )),
            );
        }
    }
    (steps, None)
}

#[test]
fn a_claim_at_every_step_of_a_former_owners_delta_tick_keeps_every_ok_flush_and_invents_nothing() {
    let (steps, failure) = scenario(u64::MAX);
    assert_eq!(failure, None);
    assert!(steps > 5, "{steps}");
    let mut failures = Vec::new();
    for n in 1..=steps {
        if let (_, Some(f)) = scenario(n) {
            failures.push(f);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

//! Two owners of one store whose cursor flushes are deltas: a former owner (its lock broken, it
//! does not know) goes on acking and flushing deltas after a new owner claimed the store and
//! sealed the journal's newest segment, interleaved with the new owner's own deltas, which build
//! on a chain the former owner wrote; with small segments both owners' ticks start segments
//! and roll over (the former owner's are refused or ignored). After both die, every image (the
//! durable one and every torn tail of the unsynced bytes) recovers each cursor with nothing the
//! application did not ack, every ack of a flush that returned `Ok` (either owner's), and the
//! recovered store flushes again and keeps what it flushed.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::{MemStorage, Position, Store};
use support::crash::{torn_image, unsynced_tail};
use support::workload::Rng;

const NAMES: [&str; 3] = ["x", "y", "z"];

struct Outcome {
    disk: MemStorage,
    entries: Vec<Position>,
    truth: BTreeMap<String, BTreeSet<Position>>,
    flushed: BTreeMap<String, BTreeSet<Position>>,
    former_ok: u64,
}

fn scenario(segment_bytes: u64, seed: u64, former_rounds: u64) -> Outcome {
    let mut rng = Rng::new(seed);
    let disk = MemStorage::new();
    let old = Store::open_with_storage(
        Arc::new(disk.clone()),
        support::config::store(4, segment_bytes),
    )
    .unwrap();
    let ot = old.topic("t").unwrap();
    let entries: Vec<Position> = (0..64)
        .map(|i| ot.append(format!("{i}").as_bytes()).unwrap())
        .collect();
    ot.sync().unwrap();
    let mut truth: BTreeMap<String, BTreeSet<Position>> = BTreeMap::new();
    let mut flushed: BTreeMap<String, BTreeSet<Position>> = BTreeMap::new();
    let old_cursors: Vec<_> = NAMES
        .iter()
        .map(|n| ot.open_cursor(n, support::topic::earliest()).unwrap())
        .collect();
    // The former owner builds chains: a full marker, then deltas.
    for _ in 0..6 {
        for (n, c) in NAMES.iter().zip(&old_cursors) {
            for _ in 0..3 {
                let p = entries[rng.index(entries.len())];
                c.ack(p).unwrap();
                truth.entry(n.to_string()).or_default().insert(p);
            }
        }
        old.flush_all().unwrap();
        flushed = truth.clone();
    }
    let new =
        support::takeover::new_store_owner(&disk, support::config::store(4, segment_bytes), "t");
    let nt = new.topic("t").unwrap();
    let new_cursors: Vec<_> = NAMES
        .iter()
        .map(|n| nt.open_cursor(n, support::topic::earliest()).unwrap())
        .collect();
    let mut former_ok = 0;
    for round in 0..6 {
        if round < former_rounds {
            // The former owner acks and flushes on (deltas past the seal, or refused).
            for (n, c) in NAMES.iter().zip(&old_cursors) {
                let p = entries[rng.index(entries.len())];
                if c.ack(p).is_ok() {
                    truth.entry(n.to_string()).or_default().insert(p);
                }
            }
            let before = truth.clone();
            if old.flush_all().is_ok() {
                former_ok += 1;
                for (n, acks) in before {
                    flushed.entry(n).or_default().extend(acks);
                }
            }
        }
        // The new owner's deltas, on the chains it recovered.
        let mut new_truth = BTreeMap::new();
        for (n, c) in NAMES.iter().zip(&new_cursors) {
            for _ in 0..2 {
                let p = entries[rng.index(entries.len())];
                c.ack(p).unwrap();
                truth.entry(n.to_string()).or_default().insert(p);
            }
            let acked: BTreeSet<Position> = entries
                .iter()
                .copied()
                .filter(|p| c.is_acked(*p).unwrap())
                .collect();
            new_truth.insert(n.to_string(), acked);
        }
        new.flush_all().expect("the new owner's flush");
        for (n, acks) in new_truth {
            flushed.entry(n).or_default().extend(acks);
        }
    }
    assert!(new.journal_stats().deltas > 5, "{:?}", new.journal_stats());
    std::mem::forget((new_cursors, nt, new, old_cursors, ot, old));
    Outcome {
        disk,
        entries,
        truth,
        flushed,
        former_ok,
    }
}

fn check(image: &MemStorage, o: &Outcome, segment_bytes: u64, what: &str) {
    let store = Store::open_with_storage(
        Arc::new(image.clone()),
        support::config::store(4, segment_bytes),
    )
    .unwrap_or_else(|e| panic!("{what}: open: {e}"));
    let t = store
        .topic("t")
        .unwrap_or_else(|e| panic!("{what}: topic: {e}"));
    let mut cursors = Vec::new();
    for n in NAMES {
        let c = t
            .open_cursor(n, support::topic::earliest())
            .unwrap_or_else(|e| panic!("{what}: {n}: {e}"));
        let got: BTreeSet<Position> = o
            .entries
            .iter()
            .copied()
            .filter(|p| {
                c.is_acked(*p)
                    .unwrap_or_else(|e| panic!("{what}: {n} {p}: {e}"))
            })
            .collect();
        let truth = &o.truth[n];
        let flushed = &o.flushed[n];
        if let Some(p) = got.difference(truth).next() {
            panic!("{what}: {n} recovered ack {p} nobody made");
        }
        if let Some(p) = flushed.difference(&got).next() {
            panic!("{what}: {n} lost ack {p} of a flush that returned Ok");
        }
        cursors.push((c, got));
    }
    // The recovered store goes on: one more ack each, flushed, kept by a reopen.
    for (c, got) in &mut cursors {
        if let Some(p) = o.entries.iter().find(|p| !got.contains(p)) {
            c.ack(*p).unwrap();
            got.insert(*p);
        }
    }
    store
        .flush_all()
        .unwrap_or_else(|e| panic!("{what}: flush after recovery: {e}"));
    let expected: Vec<BTreeSet<Position>> = cursors.iter().map(|(_, g)| g.clone()).collect();
    drop(cursors);
    drop(t);
    store.close().unwrap();
    let again = Store::open_with_storage(
        Arc::new(image.durable_image()),
        support::config::store(4, segment_bytes),
    )
    .unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    let t = again.topic("t").unwrap();
    for (n, want) in NAMES.iter().zip(expected) {
        let c = t.open_cursor(n, support::topic::earliest()).unwrap();
        let got: BTreeSet<Position> = o
            .entries
            .iter()
            .copied()
            .filter(|p| c.is_acked(*p).unwrap())
            .collect();
        assert_eq!(got, want, "{what}: {n} after the recovered store's flush");
    }
}

fn run(segment_bytes: u64) {
    let mut images = 0;
    for former_rounds in 0..=6 {
        for seed in 1..=3 {
            let o = scenario(segment_bytes, seed * 10 + former_rounds, former_rounds);
            let what = format!(
                "segments {segment_bytes}, former rounds {former_rounds}, seed {seed}, former Ok {}",
                o.former_ok
            );
            check(
                &o.disk.durable_image(),
                &o,
                segment_bytes,
                &format!("{what}: durable"),
            );
            check(
                &o.disk.crash_image(|_, _, live| live.to_vec()),
                &o,
                segment_bytes,
                &format!("{what}: live"),
            );
            let tail = unsynced_tail(&o.disk);
            for keep in (1..tail).step_by((tail / 25).max(1)) {
                check(
                    &torn_image(&o.disk, |_| keep),
                    &o,
                    segment_bytes,
                    &format!("{what}: {keep} of {tail}"),
                );
                images += 1;
            }
        }
    }
    let _ = images;
}

#[test]
fn a_former_owners_deltas_after_the_claim_never_add_or_remove_a_committed_ack() {
    run(64 << 20);
}

#[test]
fn the_same_with_segments_that_both_owners_roll_over() {
    run(600);
}

//! Two owners of one topic directory (the lock broken). The former owner keeps
//! acking (its tiny budget evicts into the cursor ledger the new owner recovered from),
//! flushing and closing; the new owner reads, acks, sometimes flushes or closes, sometimes
//! never writes. A later owner never recovers an ack nobody made, nor loses one the new
//! owner's Ok flush kept; the new owner never sees an ack made by the former owner after the
//! takeover; the new owner is never fenced.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::{
    CursorOptions, Error, LedgerConfig, ManagedLedger, MemStorage, PersistMode, Position,
};
use support::topic::append_n;
use support::workload::Rng;

fn open(disk: &MemStorage, c: &LedgerConfig) -> ManagedLedger {
    ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone()).unwrap()
}

fn done(cur: &ackstore::Cursor, ps: &[Position]) -> BTreeSet<Position> {
    let mark = cur.mark_delete_position().unwrap();
    ps.iter()
        .copied()
        .filter(|&p| mark.is_some_and(|m| p <= m) || cur.is_acked(p).unwrap())
        .collect()
}

fn round(seed: u64, mode: PersistMode) {
    let mut rng = Rng::new(seed);
    let old_lru = if rng.chance(50) { 0 } else { 1 << 20 };
    let new_lru = if rng.chance(50) { 0 } else { 1 << 20 };
    let disk = MemStorage::new();
    let c_old = support::config::topic(30, mode, old_lru);
    let c_new = support::config::topic(30, mode, new_lru);
    let n = 150;
    // History: a first owner acks and closes.
    let t0 = open(&disk, &c_old);
    let ps = append_n(&t0, n);
    t0.sync().unwrap();
    let cur0 = t0.open_cursor("sub", CursorOptions::default()).unwrap();
    let mut flushed: BTreeSet<Position> = BTreeSet::new();
    for &p in &ps {
        if rng.chance(30) {
            cur0.ack(p).unwrap();
            flushed.insert(p);
        }
    }
    cur0.close().unwrap();
    t0.close().unwrap();
    // The former owner reopens, acks more, maybe flushes (its own claim).
    let fo = open(&disk, &c_old);
    let fcur = fo.open_cursor("sub", CursorOptions::default()).unwrap();
    let mut made = flushed.clone();
    for &p in &ps {
        if rng.chance(10) {
            fcur.ack(p).unwrap();
            made.insert(p);
        }
    }
    if rng.chance(70) {
        fcur.flush().unwrap();
        flushed.extend(made.iter().copied());
    }
    let before_takeover = made.clone();
    // Takeover.
    disk.break_lock();
    let no = open(&disk, &c_new);
    let ncur = no.open_cursor("sub", CursorOptions::default()).unwrap();
    let mut new_made = BTreeSet::new();
    let mut new_flushed = BTreeSet::new();
    let mut new_closed = false;
    let mut f_dirty = false;
    for step in 0..200 {
        let p = ps[rng.index(ps.len())];
        match rng.below(10) {
            0..=3 => {
                if let Ok(true) = fcur.ack(p) {
                    f_dirty = true;
                }
                made.insert(p);
            }
            4 => {
                let r = fcur.flush();
                assert!(
                    (!f_dirty && r.is_ok())
                        || matches!(r, Err(Error::Fenced { .. }) | Err(Error::Closed)),
                    "seed {seed}: former owner's flush after the takeover: {r:?}"
                );
            }
            5..=6 => {
                let got = ncur.is_acked(p);
                if new_closed {
                    continue;
                }
                let got = got.unwrap();
                let mark = ncur.mark_delete_position().unwrap();
                let consumed = mark.is_some_and(|m| p <= m);
                if got && !consumed {
                    assert!(
                        before_takeover.contains(&p) || new_made.contains(&p),
                        "seed {seed} step {step}: the new owner sees {p} acked, made by \
                         the former owner after the takeover"
                    );
                }
            }
            7 => {
                if !new_closed {
                    ncur.ack(p).unwrap();
                    new_made.insert(p);
                }
            }
            8 => {
                if !new_closed && rng.chance(50) {
                    ncur.flush().unwrap_or_else(|e| {
                        panic!("seed {seed} step {step}: the new owner's flush: {e}")
                    });
                    new_flushed.extend(new_made.iter().copied());
                }
            }
            _ => {
                if !new_closed && rng.chance(10) {
                    ncur.close().unwrap_or_else(|e| {
                        panic!("seed {seed} step {step}: the new owner's close: {e}")
                    });
                    new_flushed.extend(new_made.iter().copied());
                    new_closed = true;
                }
            }
        }
    }
    made.extend(new_made.iter().copied());
    let _ = fcur.close();
    drop(fcur);
    drop(fo);
    if !new_closed {
        drop(ncur);
    }
    no.close()
        .unwrap_or_else(|e| panic!("seed {seed}: the new owner's topic close: {e}"));
    // Later owners, live and after a power cut.
    for (image, how) in [(disk.clone(), "live"), (disk.durable_image(), "durable")] {
        image.break_lock();
        let later = open(&image, &c_new);
        let lcur = later.open_cursor("sub", CursorOptions::default()).unwrap();
        let got = done(&lcur, &ps);
        let extra: Vec<_> = got.difference(&made).collect();
        assert!(extra.is_empty(), "seed {seed} {how}: invented {extra:?}");
        let lost: Vec<_> = flushed.iter().filter(|p| !got.contains(p)).collect();
        assert!(
            lost.is_empty(),
            "seed {seed} {how}: lost acks flushed before the takeover {lost:?}"
        );
        // every ack the new owner made was kept by its topic close (close flushes)
        let lost_new: Vec<_> = new_made.iter().filter(|p| !got.contains(p)).collect();
        assert!(
            lost_new.is_empty(),
            "seed {seed} {how}: lost the new owner's acks {lost_new:?}"
        );
        drop(lcur);
        later.close().unwrap();
    }
}

#[test]
fn two_owners_random_multi() {
    for seed in 0..60 {
        round(seed, PersistMode::MultiEntry);
    }
}

#[test]
fn two_owners_random_single() {
    for seed in 0..60 {
        round(seed, PersistMode::SingleEntry);
    }
}

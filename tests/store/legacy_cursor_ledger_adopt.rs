//! A store topic's cursor kept in a cursor ledger (written before the store's
//! journal carried cursors) is reopened with its claim deferred. A store's open does not write
//! cursor records again, so a former owner's record write can land after the new owner read
//! the record: the claim's adopt path.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::{CursorOptions, Error, MemStorage, Position, Store, StoreConfig};
use support::topic::{Host, append_n, store_config};

/// A store with topic "t" of `n` entries (120 or 300) in data ledgers of 50 whose cursor "sub"
/// lives in a cursor ledger, acked 1, 4, 7, ... and closed: a copy of its committed sample.
fn legacy_store(disk: &MemStorage, n: u64) -> (Vec<Position>, BTreeSet<Position>) {
    let what = if n == 120 { "-50" } else { "-300" };
    let sample = support::samples::ledger_sample_on(Host::Store, what);
    assert_eq!(sample.shape, (n, 50));
    sample.load(disk);
    (sample.positions(), sample.acks("sub"))
}

fn done(cur: &ackstore::Cursor, ps: &[Position]) -> BTreeSet<Position> {
    let mark = cur.mark_delete_position().unwrap();
    ps.iter()
        .copied()
        .filter(|&p| mark.is_some_and(|m| p <= m) || cur.is_acked(p).unwrap())
        .collect()
}

#[test]
fn a_legacy_ledger_cursor_of_a_store_reopens_and_claims() {
    let disk = MemStorage::new();
    let (ps, mut acked) = legacy_store(&disk, 120);
    let store = Store::open_with_storage(Arc::new(disk.clone()), store_config(50)).unwrap();
    let t = store.topic("t").unwrap();
    let cur = t.open_cursor("sub", CursorOptions::default()).unwrap();
    assert!(
        cur.stats().unwrap().persist.cursor_ledger.is_some(),
        "the cursor kept its cursor ledger"
    );
    assert_eq!(done(&cur, &ps), acked);
    cur.ack(ps[0]).unwrap();
    acked.insert(ps[0]);
    cur.flush().unwrap();
    drop(cur);
    drop(t);
    store.close().unwrap();
    let store = Store::open_with_storage(Arc::new(disk.durable_image()), store_config(50)).unwrap();
    let t = store.topic("t").unwrap();
    let cur = t.open_cursor("sub", CursorOptions::default()).unwrap();
    assert_eq!(done(&cur, &ps), acked);
}

/// The former store owner (whose cursor claimed its ledger) rolls its cursor ledger over with
/// a flush that passed its owner check just before the takeover; the takeover (the new owner's
/// store open and cursor reopen) happens after every storage operation of that flush in turn.
/// The new owner then acks and flushes: never fenced; a later owner never recovers an ack
/// nobody made and keeps every ack the new owner flushed.
#[test]
fn a_takeover_at_every_step_of_a_former_store_owners_rollover() {
    use support::takeover;
    let total = {
        let disk = MemStorage::new();
        let (ps, _) = legacy_store(&disk, 120);
        let hooked = takeover::Disk::new(Arc::new(disk.clone()));
        let store = Store::open_with_storage(hooked.storage.clone(), store_config(50)).unwrap();
        let t = store.topic("t").unwrap();
        let cur = t.open_cursor("sub", CursorOptions::default()).unwrap();
        cur.ack(ps[5]).unwrap();
        let before = hooked.hook.count();
        cur.flush().unwrap();
        hooked.hook.count() - before
    };
    assert!(total > 3, "{total}");
    for n in 1..=total {
        let disk = MemStorage::new();
        let (ps, acked) = legacy_store(&disk, 120);
        let hooked = takeover::Disk::new(Arc::new(disk.clone()));
        let store = Store::open_with_storage(hooked.storage.clone(), store_config(50)).unwrap();
        let t = store.topic("t").unwrap();
        let old = t.open_cursor("sub", CursorOptions::default()).unwrap();
        let old_acks = [ps[5], ps[62]];
        for p in old_acks {
            old.ack(p).unwrap();
        }
        let new_acks = [ps[11], ps[71]];
        let slot = {
            let disk = disk.clone();
            let ps = ps.clone();
            hooked.arm_takeover(n, move || {
                disk.break_lock();
                let store = Store::open_with_storage(Arc::new(disk.clone()), store_config(50))?;
                let t = store.topic("t")?;
                let cur = t.open_cursor("sub", CursorOptions::default())?;
                let seen = done(&cur, &ps);
                let v = record_files(&disk);
                Ok::<_, Error>((store, t, cur, (seen, v)))
            })
        };
        let flushed = old.flush();
        hooked.hook.run_if_pending();
        let (new_store, new_t, new_cur, (seen, v_at_takeover)) = slot
            .lock()
            .unwrap()
            .take()
            .expect("the takeover ran")
            .unwrap_or_else(|e| panic!("step {n}: the new owner: {e}"));
        let made: BTreeSet<Position> = acked
            .iter()
            .chain(&old_acks)
            .chain(&new_acks)
            .copied()
            .collect();
        assert!(seen.is_subset(&made), "step {n}: invented");
        assert!(acked.is_subset(&seen), "step {n}: lost");
        if flushed.is_ok() {
            assert!(
                old_acks.iter().all(|p| seen.contains(p)),
                "step {n}: the former owner's Ok flush is unseen"
            );
        }
        if record_files(&disk) != v_at_takeover {
            eprintln!("step {n}: the record changed after the new owner read it ({flushed:?})");
        }
        // The former owner keeps going: more acks, another flush (fenced).
        let _ = old.ack(ps[90]);
        let f2 = old.flush();
        assert!(
            f2.is_err(),
            "step {n}: the former owner flushed after the takeover"
        );
        for p in new_acks {
            new_cur.ack(p).unwrap();
        }
        new_cur.flush().unwrap_or_else(|e| {
            panic!("step {n}: the new owner's flush (flushed={flushed:?}): {e}")
        });
        drop(old);
        drop(t);
        drop(store);
        drop(new_cur);
        drop(new_t);
        new_store.close().unwrap();
        let later =
            Store::open_with_storage(Arc::new(disk.durable_image()), store_config(50)).unwrap();
        let lt = later.topic("t").unwrap();
        let lc = lt.open_cursor("sub", CursorOptions::default()).unwrap();
        let got = done(&lc, &ps);
        let mut made_all = made.clone();
        made_all.insert(ps[90]);
        assert!(
            got.is_subset(&made_all),
            "step {n}: a later owner invented {:?}",
            got.difference(&made_all).collect::<Vec<_>>()
        );
        assert!(
            new_acks.iter().chain(&acked).all(|p| got.contains(p)),
            "step {n}: a later owner lost the new owner's flushed acks"
        );
    }
}

/// The cursor record's files (their names carry the version).
fn record_files(disk: &MemStorage) -> Vec<String> {
    use ackstore::Storage;
    fn walk(s: &dyn ackstore::Storage, out: &mut Vec<String>) {
        for n in s.list().unwrap() {
            if n.contains("cursor-") && n.ends_with(".meta") {
                out.push(n);
            }
        }
    }
    let mut out = Vec::new();
    walk(disk, &mut out);
    if let Ok(Some(sub)) = disk.subdirectory("t1", false) {
        walk(sub.as_ref(), &mut out);
    }
    out.sort();
    out
}

fn legacy_cfg(mode: ackstore::PersistMode, interval: Option<std::time::Duration>) -> StoreConfig {
    let mut c = store_config(50);
    c.ledger.cursor.persist_mode = mode;
    c.ledger.cursor.lru_capacity_bytes = 0;
    c.ledger.cursor.flush_interval = interval;
    c.ack_memory_bytes = Some(4096);
    c
}

/// A legacy ledger cursor (claim pending) next to journal cursors under one shared ack budget,
/// with the store's flusher pool running, threads acking every cursor, a producer appending:
/// no deadlock, and after a clean close every ack is kept.
#[test]
fn a_pending_legacy_claim_among_journal_cursors_with_the_flusher_pool() {
    for mode in [
        ackstore::PersistMode::MultiEntry,
        ackstore::PersistMode::SingleEntry,
    ] {
        let disk = MemStorage::new();
        let (ps, mut acked) = legacy_store(&disk, 300);
        let cfg = legacy_cfg(mode, Some(std::time::Duration::from_millis(1)));
        let store = Store::open_with_storage(Arc::new(disk.clone()), cfg.clone()).unwrap();
        let t = store.topic("t").unwrap();
        let legacy = t.open_cursor("sub", CursorOptions::default()).unwrap();
        assert!(legacy.stats().unwrap().persist.cursor_ledger.is_some());
        let others: Vec<_> = (0..3)
            .map(|i| {
                t.open_cursor(&format!("j{i}"), CursorOptions::default())
                    .unwrap()
            })
            .collect();
        let new_acks: Vec<Position> = ps.iter().copied().skip(2).step_by(3).collect();
        std::thread::scope(|s| {
            let t2 = t.clone();
            s.spawn(move || {
                let _ = append_n(&t2, 200);
            });
            let l = legacy.clone();
            let na = new_acks.clone();
            s.spawn(move || {
                for p in na {
                    l.ack(p).unwrap();
                    let _ = l.stats().unwrap();
                }
            });
            for o in &others {
                let o = o.clone();
                let ps = ps.clone();
                s.spawn(move || {
                    for &p in ps.iter().step_by(2) {
                        o.ack(p).unwrap();
                    }
                    o.flush().unwrap();
                });
            }
            let st = &store;
            s.spawn(move || {
                for _ in 0..5 {
                    st.flush_all().unwrap();
                }
            });
        });
        acked.extend(new_acks);
        legacy.close().unwrap();
        for o in others {
            o.close().unwrap();
        }
        drop(t);
        store.close().unwrap();
        let store = Store::open_with_storage(Arc::new(disk.durable_image()), cfg).unwrap();
        let t = store.topic("t").unwrap();
        let cur = t.open_cursor("sub", CursorOptions::default()).unwrap();
        assert_eq!(done(&cur, &ps), acked, "{mode:?}");
    }
}

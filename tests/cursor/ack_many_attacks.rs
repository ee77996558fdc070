//! `ack_many` where its grouped path is weakest, against a model of the acknowledged entries
//! (mark-delete and the entries acknowledged after it): groups whose partitions lie 63, 64 and
//! 65 partitions apart (ordered by partition up to 64, taken as they come beyond), on partition
//! edges, with duplicates and the entry after mark-delete among them, under a budget that keeps
//! only the partition in use resident; a read that fails at each step of a call; positions of
//! trimmed ledgers and entries not yet readable; threads sharing one cursor and cursors sharing
//! one budget; and a power cut at every step of the flush that follows big groups.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::thread;

use crate::failing_loads::{FIRST, SECOND, SPAN, reopened, small_topic};
use ackstore::internals::ackset::MAX_PARTITION_BYTES;
use ackstore::{
    AckBudget, Cursor, CursorConfig, Error, LedgerConfig, ManagedLedger, MemStorage, Position,
};
use support::crash::{Cut, Points, cut_everywhere_after};
use support::tap::FailOne;
use support::topic::{append_n, append_unsynced, config, earliest};
use support::workload::{EntryModel as Model, Rng};

/// The cursor holds what `model` holds, and never acknowledges individually an entry at or
/// before mark-delete, nor the entry right after it.
fn holds(cursor: &Cursor, ps: &[Position], model: &Model, what: &str) {
    if let Some(broken) = individual_ack_at_the_floor(cursor, ps) {
        panic!("{what}: {broken}");
    }
    assert_eq!(Model::of(cursor, ps), *model, "{what}");
}

/// The entry right after mark-delete (or one before it) acknowledged individually, which the
/// cursor never leaves: what it holds then.
fn individual_ack_at_the_floor(cursor: &Cursor, ps: &[Position]) -> Option<String> {
    let got = Model::of(cursor, ps);
    let first = *got.acked.first()?;
    (first <= got.floor()).then(|| {
        format!(
            "entry #{first} acknowledged individually with mark-delete at {:?}",
            got.mark
        )
    })
}

/// Indexes of entries around the edges of partitions `0..=last` of a ledger whose first entry is
/// at index `base`, in a random order, with some duplicates: `n` of them.
fn edge_group(rng: &mut Rng, base: usize, last: usize, n: usize) -> Vec<usize> {
    let mut group: Vec<usize> = (0..n)
        .map(|_| {
            let chunk = rng.index(last + 1);
            let at = match rng.below(4) {
                0 => 0,
                1 => SPAN - 1,
                2 => 1,
                _ => rng.index(SPAN),
            };
            base + chunk * SPAN + at
        })
        .collect();
    // Both ends of the span, so the group spans exactly `last` partitions.
    group[0] = base + last * SPAN;
    group[n / 2] = base + SPAN - 1;
    let dup = group[rng.index(n)];
    group[n - 1] = dup;
    group
}

/// A topic of one ledger of 66 partitions and 10 entries and a second of 300, its cursors keeping
/// only the partition in use resident.
fn big_topic() -> (MemStorage, ManagedLedger, Vec<Position>, LedgerConfig) {
    let disk = MemStorage::new();
    let mut cfg = config(66 * SPAN as u64 + 10);
    cfg.cursor.lru_capacity_bytes = 0;
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), cfg.clone()).unwrap();
    let ps = append_n(&topic, 66 * SPAN as u64 + 10 + 300);
    assert_eq!(ps[66 * SPAN + 10].ledger_id, ps[0].ledger_id + 1);
    (disk, topic, ps, cfg)
}

#[test]
fn groups_spanning_63_64_and_65_partitions_ack_as_the_model_says_under_a_zero_budget() {
    let (disk, topic, ps, cfg) = big_topic();
    let c = topic.open_cursor("sub", earliest()).unwrap();
    let mut model = Model::default();
    let mut rng = Rng::new(0xac4);
    let second = 66 * SPAN + 10;
    for step in 0..60 {
        let what = format!("step {step}");
        let mut group = match step % 5 {
            // Exactly 63, 64 and 65 partitions apart, 64 positions (one group) or more.
            0 => edge_group(&mut rng, 0, 63, 64),
            1 => edge_group(&mut rng, 0, 64, 64),
            2 => {
                let n = 64 + rng.index(70);
                edge_group(&mut rng, 0, 65, n)
            }
            // Two ledgers in one group.
            3 => {
                let mut g = edge_group(&mut rng, 0, 63, 40);
                g.extend((0..24).map(|_| second + rng.index(300)));
                g
            }
            // Within few partitions, crossing a group of 64.
            _ => edge_group(&mut rng, 0, 2, 130),
        };
        // The entry after mark-delete in the middle, and some behind mark-delete.
        let mid = group.len() / 2;
        group.insert(mid, model.floor());
        if let Some(m) = model.mark {
            group.insert(1, m);
            group.push(m / 2);
        }
        let positions: Vec<Position> = group.iter().map(|&i| ps[i]).collect();
        let want = model.ack_many(&group);
        assert_eq!(c.ack_many(&positions).unwrap(), want, "{what}: {group:?}");
        holds(&c, &ps, &model, &what);
        if step % 7 == 6 {
            c.flush().unwrap();
        }
    }
    // The whole group behind mark-delete changes nothing.
    let behind: Vec<Position> = (0..model.floor()).step_by(7).map(|i| ps[i]).collect();
    assert_eq!(c.ack_many(&behind).unwrap(), 0);
    holds(&c, &ps, &model, "a group behind mark-delete");
    let s = c.stats().unwrap().ackset;
    assert!(s.evictions > 0 && s.loads > 0, "{s:?}");
    c.flush().unwrap();
    drop(c);
    topic.close().unwrap();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.durable_image()), cfg).unwrap();
    let c = topic.open_cursor("sub", earliest()).unwrap();
    holds(&c, &ps, &model, "reopened");
}

/// What the cursor of [`small_topic`] acknowledged and flushed besides mark-delete at #4.
const ACKED: [usize; 4] = [6, SPAN + 5, 2 * SPAN + 7, FIRST + 3];

/// A read (or any storage operation) failing at each step of `ack_many` in turn: the call
/// answers `Ok` with the model's count or fails with part of the group applied, never more than
/// the group, never less than before, and mark-delete absorbing what it added; the same call
/// again completes it, and a flush and reopen keep exactly the model.
#[test]
fn a_failure_at_each_step_of_ack_many_leaves_a_part_of_the_group_and_the_rest_completes_it() {
    // Sorted by partition (one ledger), then taken as they come (two ledgers), the entry after
    // mark-delete (#5) last in either order, duplicates and one entry behind mark-delete.
    let one_ledger = vec![
        2 * SPAN + 9,
        SPAN + 5,
        3 * SPAN + 2,
        SPAN + 6,
        SPAN - 1,
        2,
        9,
        5,
        SPAN + 6,
    ];
    let two_ledgers = vec![FIRST + 4, 2 * SPAN + 8, SPAN, FIRST + 3, 9, 7, 5, FIRST + 4];
    let mut broken = Vec::new();
    for partial in [false, true] {
        for group in [&one_ledger, &two_ledgers] {
            let positions = |ps: &[Position]| group.iter().map(|&i| ps[i]).collect::<Vec<_>>();
            let mut failures = 0;
            for at in 1.. {
                let what = format!("partial {partial}, group {group:?}, failure at {at}");
                let disk = MemStorage::new();
                let hook = Arc::new(FailOne::default());
                let (topic, ps, c, before) = small_topic(&disk, hook.clone(), &ACKED, partial);
                let mut full = before.clone();
                let want = full.ack_many(group);
                hook.arm(at);
                let answer = c.ack_many(&positions(&ps));
                hook.arm(0);
                let failed = hook.failed.lock().unwrap().take();
                let after = Model::of(&c, &ps);
                let what = format!("{what}, answered {answer:?}, failed {failed:?}");
                match answer {
                    Ok(n) => {
                        assert_eq!(n, want, "{what} ({failed:?})");
                        holds(&c, &ps, &full, &what);
                    }
                    Err(e) => {
                        assert!(failed.is_some(), "{what}: {e}");
                        assert!(!matches!(e, Error::NoSuchEntry(_)), "{what}: {e}");
                        failures += 1;
                        assert!(before.within(&after), "{what}: {after:?} lost {before:?}");
                        assert!(after.within(&full), "{what}: {after:?} beyond {full:?}");
                        // Kept to the end, so every failure point is tried and named.
                        if let Some(b) = individual_ack_at_the_floor(&c, &ps) {
                            broken.push(format!("{what}: {b}"));
                        }
                        let rest = group.iter().filter(|&&i| !after.contains(i));
                        let rest: BTreeSet<usize> = rest.copied().collect();
                        assert_eq!(
                            c.ack_many(&positions(&ps)).unwrap(),
                            rest.len() as u64,
                            "{what}: again, after {e}"
                        );
                        holds(&c, &ps, &full, &what);
                    }
                }
                if partial {
                    assert!(c.is_batch_index_acked(ps[9], 2).unwrap(), "{what}");
                }
                c.flush().unwrap();
                drop(c);
                topic.close().unwrap();
                let (_topic, c) = reopened(&disk);
                holds(&c, &ps, &full, &format!("{what}, reopened"));
                if failed.is_none() {
                    break;
                }
            }
            assert!(
                failures > 0,
                "partial {partial}, group {group:?}: no load failed"
            );
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// Positions after mark-delete that are no retained entry (of no ledger, far ids, an entry
/// appended but not yet synced) fail the whole group with the position `ack` refuses first,
/// and nothing changes; positions behind mark-delete, those of a trimmed ledger among them
/// whatever the cursor, are ignored.
#[test]
fn a_group_with_a_position_that_is_no_entry_is_refused_whole_as_ack_refuses_it() {
    let disk = MemStorage::new();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(10)).unwrap();
    let ps = append_n(&topic, 40);
    let old = topic.open_cursor("old", earliest()).unwrap();
    old.ack_cumulative(ps[14]).unwrap();
    assert_eq!(topic.trim_consumed().unwrap(), vec![ps[0].ledger_id]);
    let unsynced = append_unsynced(&topic, 3);
    // A cursor opened after the trim, at the first retained entry: the trimmed ledger's entries
    // lie before it.
    let c = topic.open_cursor("sub", earliest()).unwrap();
    let last = ps[39].ledger_id;
    let bad = [
        ps[3],
        Position::new(last + 1, 0),
        Position::new(last, 10),
        Position::new(last, u64::MAX),
        Position::new(u64::MAX, u64::MAX),
        Position::new(ps[20].ledger_id, 10),
        unsynced[0],
    ];
    for cursor in [&c, &old] {
        for b in bad {
            let mark = cursor.mark_delete_position().unwrap();
            let ranges = cursor.acked_ranges().unwrap();
            let single = cursor.ack(b);
            let group = [ps[25], b, ps[31], ps[26]];
            let many = cursor.ack_many(&group);
            match (&single, &many) {
                // Behind mark-delete (or before the first retained entry, which a mark-delete
                // of `None` stands just before): ignored, the others acknowledged.
                (Ok(false), Ok(_)) => {
                    let behind = mark.is_some_and(|m| b <= m)
                        || topic.first_position().is_some_and(|first| b < first);
                    assert!(behind, "{b} after {mark:?}");
                    assert!(group.iter().all(|p| cursor.is_acked(*p).unwrap()), "{b}");
                }
                (Err(Error::NoSuchEntry(p)), Err(Error::NoSuchEntry(q))) => {
                    assert_eq!((p, q), (&b, &b));
                    assert_eq!(cursor.mark_delete_position().unwrap(), mark, "{b}");
                    assert_eq!(cursor.acked_ranges().unwrap(), ranges, "{b}");
                }
                _ => panic!("{}: {b}: ack {single:?}, ack_many {many:?}", cursor.name()),
            }
        }
    }
    // Behind mark-delete, with the trimmed ledger's entries: ignored.
    assert_eq!(old.ack_many(&[ps[3], ps[14], ps[0], ps[9]]).unwrap(), 0);
    assert_eq!(old.mark_delete_position().unwrap(), Some(ps[14]));
}

/// Threads acking disjoint parts of the topic with `ack_many`, `ack` and cumulative acks on one
/// cursor while another flushes it, trims and reads its stats; and cursors, each on its own
/// thread, sharing one small budget. No ack is lost, each cursor ends with its model, and once
/// the threads are done the shared total is within the limit plus a partition a cursor.
#[test]
fn threads_acking_groups_on_one_cursor_and_on_cursors_sharing_a_budget_lose_nothing() {
    const LIMIT: usize = 6 * 1024;
    const CURSORS: usize = 3;
    const THREADS: usize = 3;
    let budget = AckBudget::new(LIMIT);
    let cfg = LedgerConfig {
        max_entries_per_ledger: 2 * SPAN as u64 + 50,
        cursor: CursorConfig {
            lru_capacity_bytes: 1 << 20,
            ack_memory: Some(budget.clone()),
            ..CursorConfig::default()
        },
        ..LedgerConfig::default()
    };
    let disk = MemStorage::new();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), cfg.clone()).unwrap();
    let n = 3 * (2 * SPAN + 50);
    let ps = append_n(&topic, n as u64);
    let cursors: Vec<Cursor> = (0..CURSORS)
        .map(|k| topic.open_cursor(&format!("c{k}"), earliest()).unwrap())
        .collect();
    let done = std::sync::atomic::AtomicUsize::new(0);
    // Each (cursor, thread) acks the entries `t (mod THREADS)` it picks, in groups.
    let picked: Vec<Vec<BTreeSet<usize>>> = thread::scope(|s| {
        let handles: Vec<Vec<_>> = cursors
            .iter()
            .enumerate()
            .map(|(k, cursor)| {
                (0..THREADS)
                    .map(|t| {
                        let (ps, done) = (&ps, &done);
                        s.spawn(move || {
                            let mut rng = Rng::new((k * THREADS + t) as u64 + 77);
                            let mut mine = BTreeSet::new();
                            for _ in 0..60 {
                                let base = rng.index(n / THREADS) * THREADS + t;
                                let len = 1 + rng.index(150);
                                let group: Vec<usize> = (0..len)
                                    .map(|_| {
                                        let far = rng.index(4) * SPAN;
                                        (base + far + rng.index(200) * THREADS) % n
                                    })
                                    .map(|i| i - i % THREADS + t)
                                    .filter(|&i| i < n)
                                    .collect();
                                let positions: Vec<Position> =
                                    group.iter().map(|&i| ps[i]).collect();
                                match rng.below(3) {
                                    0 => {
                                        for p in &positions {
                                            cursor.ack(*p).unwrap();
                                        }
                                    }
                                    _ => {
                                        cursor.ack_many(&positions).unwrap();
                                    }
                                }
                                mine.extend(group);
                            }
                            done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            mine
                        })
                    })
                    .collect()
            })
            .collect();
        // Flushes, trims and stats until every acker is done.
        let busy = s.spawn(|| {
            let mut rounds = 0u64;
            while done.load(std::sync::atomic::Ordering::SeqCst) < CURSORS * THREADS || rounds < 3 {
                for cursor in &cursors {
                    cursor.flush().unwrap();
                    cursor.stats().unwrap();
                }
                topic.trim_consumed().unwrap();
                rounds += 1;
            }
        });
        let picked = handles
            .into_iter()
            .map(|hs| hs.into_iter().map(|h| h.join().unwrap()).collect())
            .collect();
        busy.join().unwrap();
        picked
    });
    // One more ack each, with no other thread holding a cursor, settles the shared total.
    let mut models = Vec::new();
    for (cursor, picked) in cursors.iter().zip(&picked) {
        let mut model = Model::default();
        for mine in picked {
            model.ack_many(&mine.iter().copied().collect::<Vec<_>>());
        }
        let last = n - 1;
        assert_eq!(
            cursor.ack_many(&[ps[last]]).unwrap(),
            model.ack_many(&[last])
        );
        holds(cursor, &ps, &model, cursor.name());
        models.push(model);
    }
    let s = budget.stats();
    assert!(
        s.resident_bytes <= LIMIT + CURSORS * MAX_PARTITION_BYTES,
        "{s:?}"
    );
    for cursor in &cursors {
        cursor.close().unwrap();
    }
    topic.close().unwrap();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.durable_image()), cfg).unwrap();
    for (k, model) in models.iter().enumerate() {
        let c = topic.open_cursor(&format!("c{k}"), earliest()).unwrap();
        holds(&c, &ps, model, &format!("c{k} reopened"));
    }
}

/// A power cut at every step of the flush that follows big `ack_many` groups (over three
/// partitions, two ledgers, the entry after mark-delete among them, every partition but the one
/// in use evicted): the reopened cursor holds every entry of the last `Ok` flush and none the
/// cursor was not told of; after the flush returned `Ok`, exactly what it was told; `verify`
/// finds the directory sound.
#[test]
fn a_power_cut_at_every_step_of_a_flush_after_big_groups_keeps_what_was_flushed() {
    let mut cfg = config(FIRST as u64);
    cfg.cursor.lru_capacity_bytes = 0;
    let group = |rng: &mut Rng, model: &Model, len: usize| {
        let mut g: Vec<usize> = (0..len)
            .map(|_| match rng.below(3) {
                0 => FIRST + rng.index(SECOND),
                _ => rng.index(FIRST),
            })
            .collect();
        g.insert(len / 2, model.floor());
        g
    };
    cut_everywhere_after(
        Points::every_in_release(5),
        |disk| {
            let topic =
                ManagedLedger::open_with_storage(Arc::new(disk.clone()), cfg.clone()).unwrap();
            let ps = append_n(&topic, (FIRST + SECOND) as u64);
            let c = topic.open_cursor("sub", earliest()).unwrap();
            let mut rng = Rng::new(0xf1);
            let mut model = Model::default();
            for _ in 0..4 {
                let g = group(&mut rng, &model, 400);
                let positions: Vec<Position> = g.iter().map(|&i| ps[i]).collect();
                assert_eq!(c.ack_many(&positions).unwrap(), model.ack_many(&g));
            }
            c.flush().unwrap();
            let flushed = model.clone();
            for _ in 0..4 {
                let g = group(&mut rng, &model, 400);
                let positions: Vec<Position> = g.iter().map(|&i| ps[i]).collect();
                assert_eq!(c.ack_many(&positions).unwrap(), model.ack_many(&g));
            }
            (topic, c, ps, flushed, model)
        },
        |_, (topic, c, ps, flushed, told)| {
            let answer = c.flush();
            (topic, c, ps, flushed, told, answer)
        },
        |disk, Cut { n, total }, (topic, c, ps, flushed, told, answer)| {
            drop(c);
            std::mem::forget(topic);
            let image = disk.durable_image();
            let storage: Arc<dyn ackstore::Storage> = Arc::new(image.clone());
            let report = ackstore::check::verify(&storage).expect("verify runs");
            assert!(report.is_sound(), "cut {n} of {total}: {report}");
            let topic = ManagedLedger::open_with_storage(Arc::new(image), cfg.clone()).unwrap();
            let c = topic.open_cursor("sub", earliest()).unwrap();
            let got = Model::of(&c, &ps);
            let what = format!("cut {n} of {total}, flush {answer:?}");
            assert!(flushed.within(&got), "{what}: lost flushed acks");
            assert!(got.within(&told), "{what}: {got:?} beyond {told:?}");
            if answer.is_ok() {
                assert_eq!(got, told, "{what}");
            }
            holds(&c, &ps, &got, &what);
        },
    );
}

/// `ack` of the entry right after mark-delete, a failure at each step of it in turn, beside the
/// same for `ack_many` above: it never leaves that entry acknowledged individually either, and
/// the same ack again moves mark-delete where the model says.
#[test]
fn a_failure_at_each_step_of_an_ack_after_mark_delete_leaves_no_individual_ack_at_the_floor() {
    let mut failures = 0;
    for at in 1.. {
        let disk = MemStorage::new();
        let hook = Arc::new(FailOne::default());
        let (_topic, ps, c, mut model) = small_topic(&disk, hook.clone(), &ACKED, false);
        hook.arm(at);
        let answer = c.ack(ps[5]);
        hook.arm(0);
        let failed = hook.failed.lock().unwrap().take();
        let what = format!("failure at {at}, answered {answer:?}, failed {failed:?}");
        if let Some(broken) = individual_ack_at_the_floor(&c, &ps) {
            panic!("{what}: {broken}");
        }
        model.ack(5);
        if answer.is_err() {
            failures += 1;
            c.ack(ps[5]).unwrap();
        }
        holds(&c, &ps, &model, &what);
        if failed.is_none() {
            break;
        }
    }
    assert!(failures > 0, "no load failed");
}

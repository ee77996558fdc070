//! Acks a durable cursor answers from the ledger it learnt, raced on many threads against
//! appends that roll ledgers over, trims, a second cursor and a seek: no trim deletes an entry
//! a cursor has not acknowledged, each entry is newly acknowledged exactly once whatever the
//! number of threads acking it, and mark-delete, backlog and acknowledged ranges (live and
//! after a reopen) are those of a model of the acks; an ack raced with a seek ends as one of
//! the two orders would.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Barrier, Condvar, Mutex};
use std::thread;

use ackstore::{Cursor, LedgerSpan, ManagedLedger, Position};
use support::topic::{append_n, earliest, mem_hosted, on_each_host, reopen_hosted};

const PER_LEDGER: u64 = 16;

/// Positions appended and synced so far, in append order, and a wake-up when more are.
#[derive(Default)]
struct Appended {
    positions: Mutex<Vec<Position>>,
    grew: Condvar,
}

impl Appended {
    /// Position `i`, waiting for it to be appended and synced.
    fn wait_for(&self, i: usize) -> Position {
        let mut p = self.positions.lock().unwrap();
        while p.len() <= i {
            p = self.grew.wait(p).unwrap();
        }
        p[i]
    }

    fn extend(&self, more: &[Position]) {
        self.positions.lock().unwrap().extend_from_slice(more);
        self.grew.notify_all();
    }

    fn snapshot(&self) -> Vec<Position> {
        self.positions.lock().unwrap().clone()
    }
}

/// Whether cursor `c`'s state holds together against the topic's ledgers `spans`: every
/// individually acknowledged entry is a retained entry after mark-delete, the entry after
/// mark-delete is not acknowledged, and the backlog counts the rest.
fn check_consistent(c: &Cursor, spans: &[LedgerSpan], what: &str) {
    let retained: Vec<Position> = spans
        .iter()
        .flat_map(|s| (0..s.entries).map(move |e| Position::new(s.id, e)))
        .collect();
    let mark = c.mark_delete_position().unwrap();
    let after: Vec<Position> = retained
        .iter()
        .copied()
        .filter(|p| mark.is_none_or(|m| *p > m))
        .collect();
    let acked: BTreeSet<Position> = c
        .acked_ranges()
        .unwrap()
        .into_iter()
        .flat_map(|(from, to)| {
            (from.entry_id..=to.entry_id).map(move |e| Position::new(from.ledger_id, e))
        })
        .collect();
    for p in &acked {
        assert!(
            after.contains(p),
            "{what}: ack of {p} is not a retained entry after {mark:?}"
        );
    }
    if let Some(first) = after.first() {
        assert!(
            !acked.contains(first),
            "{what}: {first} after mark-delete {mark:?} is acked"
        );
    }
    assert_eq!(
        c.backlog().unwrap(),
        (after.len() - acked.len()) as u64,
        "{what}: backlog"
    );
}

/// Checks cursor `c` against the model of acks of every entry of `p` but the holes: mark-delete
/// before the first hole, every later entry but the holes individually acknowledged, the holes
/// the backlog, and still readable.
fn check_model(
    c: &Cursor,
    topic: &ManagedLedger,
    p: &[Position],
    hole: impl Fn(usize) -> bool,
    what: &str,
) {
    let first_hole = (0..p.len()).find(|&i| hole(i)).expect("a hole");
    let model = ranges_of(
        (first_hole + 1..p.len())
            .filter(|&i| !hole(i))
            .map(|i| p[i]),
    );
    let holes: Vec<Position> = (0..p.len()).filter(|&i| hole(i)).map(|i| p[i]).collect();
    assert_eq!(
        c.mark_delete_position().unwrap(),
        Some(p[first_hole - 1]),
        "{what}"
    );
    assert_eq!(c.acked_ranges().unwrap(), model, "{what}");
    assert_eq!(c.backlog().unwrap(), holes.len() as u64, "{what}");
    check_consistent(c, &topic.ledgers(), what);
    for q in holes {
        topic.read(q).unwrap();
    }
}

/// Ascending entries `positions` as maximal inclusive ranges that never span ledgers (what
/// `Cursor::acked_ranges` answers).
fn ranges_of(positions: impl Iterator<Item = Position>) -> Vec<(Position, Position)> {
    let mut ranges: Vec<(Position, Position)> = Vec::new();
    for q in positions {
        match ranges.last_mut() {
            Some((_, to)) if to.ledger_id == q.ledger_id && to.entry_id + 1 == q.entry_id => {
                *to = q;
            }
            _ => ranges.push((q, q)),
        }
    }
    ranges
}

/// The ledgers of `spans` a trim may delete with every entry up to `bound` acknowledged by
/// every cursor: those whose last entry is covered, never the last non-empty one.
fn covered(spans: &[LedgerSpan], bound: Position) -> Vec<u64> {
    let keep_last = spans.iter().rposition(|s| s.entries > 0).unwrap_or(0);
    spans
        .iter()
        .take(keep_last)
        .take_while(|s| s.last_entry().is_none_or(|l| l <= bound))
        .map(|s| s.id)
        .collect()
}

/// Four threads ack every entry of cursor `a`, each entry twice (on two threads), except holes
/// near the end; one thread acks cursor `b` in entry order; a producer appends and syncs
/// batches (rolling ledgers over); a trimmer trims until they are done and, after each trim,
/// checks that both cursors acknowledged every entry of each deleted ledger.
#[test]
fn acks_on_many_threads_racing_trims_and_rollovers_never_lose_an_unacked_entry() {
    const FIRST: usize = 160;
    const TOTAL: usize = 480;
    const ACKERS: usize = 4;
    let hole = |i: usize| i >= 400 && i.is_multiple_of(7);
    on_each_host(|host| {
        let (disk, hosted) = mem_hosted(host, PER_LEDGER);
        let topic: &ManagedLedger = &hosted;
        let appended = Appended::default();
        appended.extend(&append_n(topic, FIRST as u64));
        let a = topic.open_cursor("a", earliest()).unwrap();
        let b = topic.open_cursor("b", earliest()).unwrap();
        let newly: Vec<AtomicU32> = (0..TOTAL).map(|_| AtomicU32::new(0)).collect();
        let running = AtomicUsize::new(ACKERS + 2);
        let trimmed = Mutex::new(Vec::new());
        thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..(TOTAL - FIRST) / 20 {
                    appended.extend(&append_n(topic, 20));
                }
                running.fetch_sub(1, Ordering::SeqCst);
            });
            for t in 0..ACKERS {
                let (a, appended, newly, running) = (a.clone(), &appended, &newly, &running);
                s.spawn(move || {
                    // Thread t acks entries i with i % ACKERS in {t, t + 1}: each twice, in an
                    // order that differs between threads (odd threads step backwards in
                    // blocks of 8).
                    let mine: Vec<usize> = (0..TOTAL)
                        .filter(|i| {
                            (i % ACKERS == t || i % ACKERS == (t + 1) % ACKERS) && !hole(*i)
                        })
                        .collect();
                    let order: Vec<usize> = if t % 2 == 0 {
                        mine
                    } else {
                        mine.chunks(8)
                            .flat_map(|c| c.iter().rev().copied())
                            .collect()
                    };
                    for i in order {
                        let p = appended.wait_for(i);
                        if a.ack(p).unwrap() {
                            newly[i].fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    running.fetch_sub(1, Ordering::SeqCst);
                });
            }
            s.spawn(|| {
                for i in 0..TOTAL {
                    assert!(b.ack(appended.wait_for(i)).unwrap(), "b: entry {i}");
                }
                running.fetch_sub(1, Ordering::SeqCst);
            });
            s.spawn(|| {
                loop {
                    let done = running.load(Ordering::SeqCst) == 0;
                    let deleted = topic.trim_consumed().unwrap();
                    let known = appended.snapshot();
                    for p in known.iter().filter(|p| deleted.contains(&p.ledger_id)) {
                        assert!(a.is_acked(*p).unwrap(), "a: {p} deleted unacknowledged");
                        assert!(b.is_acked(*p).unwrap(), "b: {p} deleted unacknowledged");
                    }
                    trimmed.lock().unwrap().extend(deleted);
                    if done {
                        break;
                    }
                    thread::yield_now();
                }
            });
        });
        let p = appended.snapshot();
        for (i, n) in newly.iter().enumerate() {
            let want = u32::from(!hole(i));
            assert_eq!(
                n.load(Ordering::SeqCst),
                want,
                "entry {i} newly acknowledged"
            );
        }
        check_model(&a, topic, &p, hole, "live");
        // Every ledger mark-delete covers is gone, whatever mark-delete was published lazily.
        let all: Vec<LedgerSpan> = {
            let mut spans = BTreeMap::new();
            for q in &p {
                let e = spans.entry(q.ledger_id).or_insert(0);
                *e = (*e).max(q.entry_id + 1);
            }
            spans
                .into_iter()
                .map(|(id, entries)| LedgerSpan {
                    id,
                    entries,
                    first_index: 0,
                    first_timestamp: 0,
                    last_timestamp: 0,
                })
                .collect()
        };
        let mut deleted = trimmed.into_inner().unwrap();
        deleted.extend(topic.trim_consumed().unwrap());
        let first_hole = (0..TOTAL).find(|&i| hole(i)).unwrap();
        assert_eq!(deleted, covered(&all, p[first_hole - 1]));
        drop((a, b));
        hosted.close().unwrap();
        let hosted = reopen_hosted(host, &disk, PER_LEDGER);
        let a = hosted.open_cursor("a", earliest()).unwrap();
        check_model(&a, &hosted, &p, hole, "reopened");
        assert!(hosted.trim_consumed().unwrap().is_empty());
    });
}

/// Rounds of one ack raced against one seek, released together by a barrier: the cursor ends
/// as the ack then the seek would leave it, or the seek then the ack. Before each round the
/// cursor acks in the target ledger, so the raced ack may be answered from it.
#[test]
fn an_ack_raced_with_a_seek_ends_as_one_of_the_two_orders() {
    on_each_host(|host| {
        let (_disk, hosted) = mem_hosted(host, PER_LEDGER);
        let topic: &ManagedLedger = &hosted;
        let p = append_n(topic, 4 * PER_LEDGER);
        let c = topic.open_cursor("c", earliest()).unwrap();
        let start = Barrier::new(2);
        for round in 0..60usize {
            // The seek target k and the acked entry j, in the same ledger or around it.
            let k = 1 + (round * 7) % (p.len() - 3);
            let j = match round % 3 {
                0 => k,
                1 => k + 1 + round % 2,
                _ => k - 1,
            };
            c.seek(p[k]).unwrap();
            // An ack of mark-delete changes nothing and learns its ledger (mostly j's).
            assert!(!c.ack(p[k - 1]).unwrap());
            let acked = thread::scope(|s| {
                let acker = s.spawn(|| {
                    start.wait();
                    c.ack(p[j]).unwrap()
                });
                start.wait();
                c.seek(p[k]).unwrap();
                acker.join().unwrap()
            });
            let what = format!("round {round}: seek to {k}, ack of {j}");
            let state = (c.mark_delete_position().unwrap(), c.acked_ranges().unwrap());
            // Ack first: the seek clears it. Seek first: the ack lands on the sought state.
            let ack_first = (Some(p[k - 1]), vec![]);
            let seek_first = match j.cmp(&k) {
                std::cmp::Ordering::Less => ack_first.clone(),
                std::cmp::Ordering::Equal => (Some(p[k]), vec![]),
                std::cmp::Ordering::Greater => (Some(p[k - 1]), vec![(p[j], p[j])]),
            };
            assert!(
                state == ack_first || state == seek_first,
                "{what}: {state:?}"
            );
            if state == seek_first && j >= k {
                assert!(acked, "{what}: the ack after the seek changed the state");
            }
            check_consistent(&c, &topic.ledgers(), &what);
        }
    });
}

/// Single acks on two threads race `ack_many` and batch-index acks of the same entries on two
/// more, a rewinder, a reader acking its own copy and a trimmer; each entry of a durable
/// cursor is acknowledged by every kind of call. The cursor ends where the model says
/// (every entry acknowledged but the holes), live and after a reopen, and a trim in between
/// never deletes an entry it still needs.
#[test]
fn single_acks_racing_ack_many_batch_acks_rewinds_and_a_reader_agree_with_the_model() {
    const TOTAL: usize = 320;
    let hole = |i: usize| i % 53 == 50;
    on_each_host(|host| {
        let (disk, hosted) = mem_hosted(host, PER_LEDGER);
        let topic: &ManagedLedger = &hosted;
        let p = append_n(topic, TOTAL as u64);
        let c = topic.open_cursor("c", earliest()).unwrap();
        let reader = topic
            .open_non_durable_cursor(
                ackstore::InitialPosition::Earliest,
                ackstore::NonDurableOptions::default(),
            )
            .unwrap();
        let wanted: Vec<usize> = (0..TOTAL).filter(|&i| !hole(i)).collect();
        let running = AtomicUsize::new(4);
        let start = Barrier::new(7);
        thread::scope(|s| {
            for t in 0..2 {
                let (c, p, wanted, running, start) = (c.clone(), &p, &wanted, &running, &start);
                s.spawn(move || {
                    start.wait();
                    let order: Vec<usize> = if t == 0 {
                        wanted.clone()
                    } else {
                        wanted
                            .chunks(5)
                            .flat_map(|w| w.iter().rev().copied())
                            .collect()
                    };
                    for i in order {
                        c.ack(p[i]).unwrap();
                    }
                    running.fetch_sub(1, Ordering::SeqCst);
                });
            }
            s.spawn(|| {
                start.wait();
                for w in wanted.chunks(3).rev() {
                    let ps: Vec<Position> = w.iter().map(|&i| p[i]).collect();
                    c.ack_many(&ps).unwrap();
                }
                running.fetch_sub(1, Ordering::SeqCst);
            });
            s.spawn(|| {
                start.wait();
                for &i in wanted.iter().rev() {
                    c.ack_batch_index(p[i], 1, 2).unwrap();
                    c.ack_batch_index(p[i], 0, 2).unwrap();
                }
                running.fetch_sub(1, Ordering::SeqCst);
            });
            s.spawn(|| {
                start.wait();
                while running.load(Ordering::SeqCst) > 0 {
                    c.rewind().unwrap();
                    thread::yield_now();
                }
            });
            s.spawn(|| {
                start.wait();
                // Trims do not wait for a reader: an ack may find its ledger gone.
                for &i in &wanted {
                    match reader.ack(p[i]) {
                        Ok(_) => {}
                        Err(ackstore::Error::NoSuchEntry(q)) if q == p[i] => {
                            let spans = topic.ledgers();
                            assert!(spans.iter().all(|s| s.id != q.ledger_id), "{q} refused");
                        }
                        Err(e) => panic!("reader's ack of {}: {e}", p[i]),
                    }
                }
            });
            s.spawn(|| {
                start.wait();
                loop {
                    let done = running.load(Ordering::SeqCst) == 0;
                    for id in topic.trim_consumed().unwrap() {
                        for q in p.iter().filter(|q| q.ledger_id == id) {
                            assert!(c.is_acked(*q).unwrap(), "{q} deleted unacknowledged");
                        }
                    }
                    if done {
                        break;
                    }
                    thread::yield_now();
                }
            });
        });
        check_model(&c, topic, &p, hole, "live");
        let holes = (0..TOTAL).filter(|&i| hole(i)).count() as u64;
        assert_eq!(reader.backlog().unwrap(), holes);
        check_consistent(&reader, &topic.ledgers(), "reader");
        drop((c, reader));
        hosted.close().unwrap();
        let hosted = reopen_hosted(host, &disk, PER_LEDGER);
        let c = hosted.open_cursor("c", earliest()).unwrap();
        check_model(&c, &hosted, &p, hole, "reopened");
    });
}

/// Acks on several threads (answered from the learnt ledger) while another thread closes the
/// cursor or deletes it, released together: every ack returns `Ok` or `Closed`, nothing
/// blocks, and what the trim then deletes follows the cursors that remain.
#[test]
fn acks_racing_a_close_or_a_delete_of_their_cursor_end_closed_without_a_trim_past_the_others() {
    on_each_host(|host| {
        for delete in [false, true] {
            let (_disk, hosted) = mem_hosted(host, PER_LEDGER);
            let topic: &ManagedLedger = &hosted;
            let p = append_n(topic, 6 * PER_LEDGER);
            let keep = topic.open_cursor("keep", earliest()).unwrap();
            // The cursor that stays stops inside the fourth ledger.
            let keep_mark = p[3 * PER_LEDGER as usize + 4];
            keep.ack_cumulative(keep_mark).unwrap();
            let c = topic.open_cursor("gone", earliest()).unwrap();
            assert!(c.ack(p[0]).unwrap());
            let start = Barrier::new(4);
            thread::scope(|s| {
                for t in 0..3 {
                    let (c, p, start) = (c.clone(), &p, &start);
                    s.spawn(move || {
                        start.wait();
                        for q in p.iter().skip(1 + t).step_by(3) {
                            match c.ack(*q) {
                                Ok(_) | Err(ackstore::Error::Closed) => {}
                                Err(e) => panic!("ack of {q}: {e}"),
                            }
                        }
                    });
                }
                start.wait();
                if delete {
                    topic.delete_cursor("gone").unwrap();
                } else {
                    c.close().unwrap();
                }
            });
            assert!(matches!(c.ack(p[1]), Err(ackstore::Error::Closed)));
            let deleted = topic.trim_consumed().unwrap();
            let spans = topic.ledgers();
            if delete {
                assert_eq!(
                    deleted,
                    p[..3 * PER_LEDGER as usize]
                        .iter()
                        .map(|q| q.ledger_id)
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .collect::<Vec<_>>()
                );
            } else {
                // The closed cursor's persisted state holds it back at its own mark-delete.
                let reopened = topic.open_cursor("gone", earliest()).unwrap();
                let mark = reopened.mark_delete_position().unwrap().unwrap();
                check_consistent(&reopened, &spans, "reopened");
                let bound = mark.min(keep_mark);
                for q in p.iter().filter(|q| deleted.contains(&q.ledger_id)) {
                    assert!(*q <= bound, "{q} deleted past {bound}");
                }
            }
            check_consistent(&keep, &spans, "keep");
        }
    });
}

/// Acks answered from the learnt ledger, then a flush, with the power cut at every storage
/// operation (the unsynced tail lost or kept in part): a reopen never finds more acknowledged
/// than was acked, and once the flush returned `Ok` finds every one of them; the trim of the
/// reopened topic deletes only what the recovered mark-delete covers.
#[test]
fn acks_from_the_learnt_ledger_then_a_flush_survive_a_power_cut_at_every_step() {
    use support::crash::{Cut, Points, cut_everywhere_after, cut_images};
    on_each_host(|host| {
        let clean = cut_everywhere_after(
            Points { from: 1, step: 1 },
            |disk| {
                let topic = reopen_hosted(host, disk, PER_LEDGER);
                let p = append_n(&topic, 3 * PER_LEDGER);
                let c = topic.open_cursor("c", earliest()).unwrap();
                // Ledger 0 acked whole (slow), then one ack in ledger 1 learns it.
                for q in &p[..PER_LEDGER as usize + 1] {
                    assert!(c.ack(*q).unwrap());
                }
                c.flush().unwrap();
                (topic, c, p)
            },
            |_, (topic, c, p)| {
                // Every one of these is answered without the layout: in ledger 1, past the
                // entry after mark-delete or that entry with the next one unacknowledged.
                let acked: Vec<usize> = (17..24).chain([30, 26]).collect();
                for &i in &acked {
                    assert!(c.ack(p[i]).unwrap(), "entry {i}");
                }
                let flushed = c.flush();
                (topic, c, p, acked, flushed)
            },
            |disk, Cut { n, .. }, (topic, c, p, acked, flushed)| {
                drop(c);
                std::mem::forget(topic);
                for (keep, image) in cut_images(disk) {
                    let what = format!("cut at {n}, {keep} tail bytes kept");
                    let topic = reopen_hosted(host, &image, PER_LEDGER);
                    let c = topic.open_cursor("c", earliest()).unwrap();
                    for (i, q) in p.iter().enumerate() {
                        let truth = i <= PER_LEDGER as usize || acked.contains(&i);
                        let now = c.is_acked(*q).unwrap();
                        assert!(truth || !now, "{what}: entry {i} acknowledged, never acked");
                        if flushed.is_ok() || i <= PER_LEDGER as usize {
                            assert_eq!(now, truth, "{what}: entry {i}");
                        }
                    }
                    check_consistent(&c, &topic.ledgers(), &what);
                    let mark = c.mark_delete_position().unwrap().unwrap();
                    for id in topic.trim_consumed().unwrap() {
                        for q in p.iter().filter(|q| q.ledger_id == id) {
                            assert!(*q <= mark, "{what}: {q} trimmed past {mark}");
                        }
                    }
                }
            },
        );
        assert!(clean.result.4.is_ok(), "the flush without a cut");
        assert!(
            clean.total > 2,
            "the flush writes: {} operations",
            clean.total
        );
    });
}

//! The cursor journal a topic opened alone hosts, against a power cut at every storage
//! operation of a cursor's creation, flushes and deletion on a topic whose record listed no
//! journal yet (its first segment turns the record into version 2) and of the clean close that
//! records the closed seal; and against a former owner past a broken lock, with a second handle
//! claiming the directory at every storage operation of the former's open (whichever claimed
//! last owns the topic), of its flushes (one of which rolls a segment over), of its clean close
//! and of its deletion of a cursor, or before it acks, flushes, creates and deletes cursors on.
//! Every open after a cut or a takeover opens, `verify` finds no damage, each cursor keeps every
//! ack of a flush that returned `Ok` (either owner's) and recovers no ack that was not made, and
//! a fenced owner's flush never returns `Ok`. The same holds for `ENOSPC` from every write of a run of flushes on (a power cut while
//! full, then space returning), for cursors flushing from threads while the topic closes, and
//! for a power cut after a new owner opened behind one killed at any storage operation of its
//! flushes (the open syncs what the killed owner left unsynced before building on it).

use crate::hosted_journal::open;
use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::{Cursor, InitialPosition, ManagedLedger, MemStorage, Position, Storage};
use support::crash::{Cut, Points, cut_everywhere_after};
use support::topic::{append_n, at};

/// What a cursor was told: every ack made, and the acks made before a flush that returned `Ok`.
#[derive(Debug, Default, Clone)]
struct Told {
    made: BTreeSet<Position>,
    flushed: BTreeSet<Position>,
}

impl Told {
    /// Acks `positions`, flushing after every `every` acks and at the end.
    fn ack(
        &mut self,
        cursor: &Cursor,
        positions: &[Position],
        every: usize,
    ) -> ackstore::Result<()> {
        for (i, &p) in positions.iter().enumerate() {
            cursor.ack(p)?;
            self.made.insert(p);
            if (i + 1) % every == 0 {
                self.flush(cursor)?;
            }
        }
        self.flush(cursor)
    }

    fn flush(&mut self, cursor: &Cursor) -> ackstore::Result<()> {
        cursor.flush()?;
        self.flushed.clone_from(&self.made);
        Ok(())
    }

    /// Checks what a reopened topic recovered of this cursor (`None`: the cursor is gone).
    fn check(&self, got: Option<&BTreeSet<Position>>, what: &str) {
        match got {
            Some(got) => {
                assert!(
                    got.is_subset(&self.made),
                    "{what}: acks recovered that were never made"
                );
                assert!(got.is_superset(&self.flushed), "{what}: flushed acks lost");
            }
            None => assert!(
                self.flushed.is_empty(),
                "{what}: a cursor with flushed acks is gone"
            ),
        }
    }
}

/// The acked entries among `positions` of every cursor of the topic in `storage`, by name.
fn recovered_all(
    storage: Arc<dyn Storage>,
    positions: &[Position],
) -> ackstore::Result<Vec<(String, BTreeSet<Position>)>> {
    let topic = open(storage)?;
    let mut all = Vec::new();
    for name in topic.cursor_names() {
        let cursor = topic.open_cursor(&name, at(InitialPosition::Earliest, false))?;
        let mut acked = BTreeSet::new();
        for &p in positions {
            if cursor.is_acked(p)? {
                acked.insert(p);
            }
        }
        cursor.close()?;
        all.push((name, acked));
    }
    topic.close()?;
    Ok(all)
}

fn verify_damage(storage: Arc<dyn Storage>) -> usize {
    ackstore::check::verify(&storage)
        .expect("verify reads the directory")
        .damaged()
}

/// How far the cursor workload got on a topic alone.
#[derive(Debug, Default)]
struct Progress {
    a: Told,
    b: Told,
    /// The deletion of cursor `a` began, and whether it returned `Ok`.
    deleting: bool,
    deleted: bool,
    closed: bool,
}

/// Opens the topic, creates cursor `a` and flushes acks, creates cursor `b` and flushes acks,
/// deletes `a`, flushes more of `b`, then closes; stops at the first error.
fn cursors_come_and_go(
    disk: &MemStorage,
    positions: &[Position],
    progress: &mut Progress,
    held: &mut Option<ManagedLedger>,
) -> ackstore::Result<()> {
    let topic = held.insert(open(Arc::new(disk.clone()))?);
    let a = topic.open_cursor("a", at(InitialPosition::Earliest, false))?;
    let evens: Vec<Position> = positions.iter().copied().step_by(2).collect();
    progress.a.ack(&a, &evens[..20], 7)?;
    let b = topic.open_cursor("b", at(InitialPosition::Earliest, false))?;
    let thirds: Vec<Position> = positions.iter().copied().step_by(3).collect();
    progress.b.ack(&b, &thirds[..15], 5)?;
    a.close()?;
    progress.deleting = true;
    topic.delete_cursor("a")?;
    progress.deleted = true;
    progress.b.ack(&b, &thirds[15..], 5)?;
    b.close()?;
    topic.close()?;
    progress.closed = true;
    Ok(())
}

#[test]
fn a_power_cut_at_every_step_of_cursors_created_flushed_and_deleted_on_a_topic_alone_keeps_the_flushed_acks()
 {
    let clean = cut_everywhere_after(
        Points::every_in_release(5),
        |disk| {
            // A topic whose record lists no journal: its first cursor creates the first segment.
            let topic = open(Arc::new(disk.clone())).unwrap();
            let positions = append_n(&topic, 120);
            topic.close().unwrap();
            positions
        },
        |disk, positions| {
            let mut progress = Progress::default();
            let mut held = None;
            let result = cursors_come_and_go(disk, &positions, &mut progress, &mut held);
            // A topic that did not close is a process that lost its disk: it does nothing more.
            std::mem::forget(held);
            (positions, progress, result)
        },
        |disk, Cut { n, .. }, (positions, progress, _)| {
            let what = format!("cut at {n}");
            let image: Arc<dyn Storage> = Arc::new(disk.durable_image());
            assert_eq!(
                verify_damage(image.clone()),
                0,
                "{what}: verify found damage"
            );
            let got = recovered_all(image, &positions).unwrap_or_else(|e| panic!("{what}: {e}"));
            let find = |name: &str| got.iter().find(|(n, _)| n == name).map(|(_, s)| s);
            if progress.deleted {
                assert!(find("a").is_none(), "{what}: a deleted cursor came back");
            } else if !progress.deleting {
                progress.a.check(find("a"), &format!("{what}, cursor a"));
            }
            progress.b.check(find("b"), &format!("{what}, cursor b"));
            if find("a").is_none() {
                // A cursor created under a gone cursor's name starts empty, and stays so
                // through a restart.
                let image: Arc<dyn Storage> = Arc::new(disk.durable_image());
                let topic = open(image.clone()).unwrap();
                let a = topic.open_cursor("a", at(InitialPosition::Earliest, false));
                let a = a.unwrap_or_else(|e| panic!("{what}: a new cursor a: {e}"));
                let fresh: Vec<Position> = positions
                    .iter()
                    .copied()
                    .filter(|&p| a.is_acked(p).unwrap())
                    .collect();
                assert_eq!(fresh, [], "{what}: a new cursor a holds acks");
                a.close().unwrap();
                topic.close().unwrap();
                let got = recovered_all(image, &positions).unwrap();
                let a = got.iter().find(|(n, _)| n == "a").map(|(_, s)| s);
                assert_eq!(
                    a,
                    Some(&BTreeSet::new()),
                    "{what}: the new cursor a restarted"
                );
            }
        },
    );
    let (_, progress, result) = clean.result;
    result.expect("the workload runs without a cut");
    assert!(progress.closed);
}

/// Acks `positions` on `cursor` one by one, flushing after each; every ack is told as made, and
/// every flush must fail (its handle lost the topic). Returns how many flushes returned `Ok`.
fn acks_of_a_fenced_owner(cursor: &Cursor, positions: &[Position]) -> usize {
    positions
        .iter()
        .filter(|&&p| cursor.ack(p).is_ok() && cursor.flush().is_ok())
        .count()
}

#[test]
fn a_former_owner_of_a_topic_alone_past_a_broken_lock_is_fenced_and_invents_nothing() {
    let disk = MemStorage::new();
    let former = open(Arc::new(disk.clone())).unwrap();
    let positions = append_n(&former, 300);
    let old = former
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    let mut told = Told::default();
    let before: Vec<Position> = positions[..60].iter().copied().step_by(3).collect();
    told.ack(&old, &before, 4).unwrap();

    // The lock breaks; a second owner claims the directory while the first runs on.
    disk.break_lock();
    let owner = open(Arc::new(disk.clone())).unwrap();
    let new = owner
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    // Both ack in turns, far enough for each to roll segments over: the former owner acks
    // entries the new one never acks, so any of them recovered later was invented.
    let mut invented_if_seen = BTreeSet::new();
    let mut fenced_oks = 0;
    for round in 0..8 {
        let chunk = &positions[60 + round * 30..90 + round * 30];
        let theirs: Vec<Position> = chunk.iter().copied().step_by(3).collect();
        let ours: Vec<Position> = chunk.iter().copied().skip(1).step_by(3).collect();
        fenced_oks += acks_of_a_fenced_owner(&old, &theirs);
        invented_if_seen.extend(theirs);
        told.ack(&new, &ours, 3).unwrap();
        // A cursor the former owner creates and deletes must leave no trace either.
        let _ = former.open_cursor(
            &format!("stale-{round}"),
            at(InitialPosition::Earliest, false),
        );
        let _ = former.delete_cursor(&format!("stale-{round}"));
    }
    assert_eq!(fenced_oks, 0, "a fenced owner's flush returned Ok");
    let _ = old.close();
    let _ = former.close();
    told.flush(&new).unwrap();
    assert!(owner.journal_stats().unwrap().rollovers > 0);
    new.close().unwrap();
    owner.close().unwrap();

    for (what, image) in [("live", disk.clone()), ("durable", disk.durable_image())] {
        let image: Arc<dyn Storage> = Arc::new(image);
        assert_eq!(
            verify_damage(image.clone()),
            0,
            "{what}: verify found damage"
        );
        let got = recovered_all(image, &positions).unwrap_or_else(|e| panic!("{what}: {e}"));
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["sub"], "{what}: the fenced owner's cursors");
        let acked = &got[0].1;
        told.check(Some(acked), what);
        assert!(
            acked.is_disjoint(&invented_if_seen),
            "{what}: the fenced owner's acks recovered"
        );
    }
}

/// What the former owner is doing when the new owner claims the topic.
#[derive(Debug, Clone, Copy)]
enum Doing {
    /// Flushes of a few acks each, until one tick rolls a segment over.
    Flushing,
    /// A clean close, which flushes and records the closed seal.
    Closing,
    /// The deletion of a cursor with flushed acks.
    Deleting,
}

/// A topic alone whose cursor `sub` (and `gone`) flushed acks into several segments, closed;
/// the positions and what each cursor was told.
fn prepared_for_takeover(disk: &MemStorage) -> (Vec<Position>, Told, Told) {
    let topic = open(Arc::new(disk.clone())).unwrap();
    let positions = append_n(&topic, 240);
    let sub = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    let gone = topic
        .open_cursor("gone", at(InitialPosition::Earliest, false))
        .unwrap();
    let (mut s, mut g) = (Told::default(), Told::default());
    let early: Vec<Position> = positions[..80].iter().copied().step_by(3).collect();
    s.ack(&sub, &early, 5).unwrap();
    g.ack(&gone, &early, 9).unwrap();
    sub.close().unwrap();
    gone.close().unwrap();
    topic.close().unwrap();
    (positions, s, g)
}

/// One scenario with the new owner's claim after `n` storage operations of what the former
/// owner is doing (`u64::MAX`: no claim during it). Returns the operations it made and any
/// failure.
fn takeover_during(doing: Doing, n: u64) -> (u64, Option<String>) {
    let disk = MemStorage::new();
    let (positions, sub_told, gone_told) = prepared_for_takeover(&disk);
    let hooked = support::takeover::Disk::new(Arc::new(disk.clone()));
    let former = open(hooked.storage.clone()).unwrap();
    let sub = former
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    // Acked in a run of flushes long enough to roll a segment over.
    let theirs: Vec<Position> = positions[80..].iter().copied().step_by(2).collect();
    let mut former_told = sub_told.clone();
    if !matches!(doing, Doing::Flushing) {
        for &p in &theirs {
            sub.ack(p).unwrap();
        }
        former_told.made.extend(theirs.iter().copied());
    }
    let slot = arm_new_owner(&hooked, &disk, n);
    let before = hooked.hook.count();
    let rollovers = former.journal_stats().unwrap().rollovers;
    let (result, sub) = match doing {
        Doing::Flushing => {
            let flushed = theirs
                .chunks(2)
                .try_for_each(|chunk| former_told.ack(&sub, chunk, chunk.len()));
            (flushed, Some(sub))
        }
        Doing::Closing => {
            drop(sub);
            (former.close(), None)
        }
        Doing::Deleting => (former.delete_cursor("gone"), Some(sub)),
    };
    let steps = hooked.hook.count() - before;
    let what = format!("{doing:?}, claim after {n}");
    if n == u64::MAX {
        assert!(result.is_ok(), "{what}: {result:?}");
        if matches!(doing, Doing::Flushing) {
            assert!(
                former.journal_stats().unwrap().rollovers > rollovers,
                "the flush rolls a segment over"
            );
        }
    }
    let former_ok = result.is_ok();
    if former_ok && matches!(doing, Doing::Closing) {
        former_told.flushed.clone_from(&former_told.made);
    }
    let owner = match new_owner(&disk, &slot) {
        Ok(owner) => owner,
        Err(e) => return (steps, Some(format!("{what}: the new owner's open: {e}"))),
    };
    let new = match owner.open_cursor("sub", at(InitialPosition::Earliest, false)) {
        Ok(c) => c,
        Err(e) => return (steps, Some(format!("{what}: the new owner's cursor: {e}"))),
    };
    let ours: Vec<Position> = positions[1..80].iter().copied().step_by(3).collect();
    let mut owner_told = Told::default();
    if let Err(e) = owner_told.ack(&new, &ours, 7) {
        return (steps, Some(format!("{what}: the new owner's flush: {e}")));
    }
    // The former owner tries again.
    if let Some(sub) = &sub {
        let last = positions[positions.len() - 1];
        if sub.ack(last).is_ok() && sub.flush().is_ok() {
            return (
                steps,
                Some(format!("{what}: a fenced owner's flush returned Ok")),
            );
        }
    }
    std::mem::forget((sub, former, new, owner));
    // Every ack either owner made is one the application made; each kept what it flushed.
    let mut sub_told = sub_told;
    for told in [former_told, owner_told] {
        sub_told.made.extend(told.made);
        sub_told.flushed.extend(told.flushed);
    }
    let failure = restarted(disk.durable_image(), &positions, &what, |find| {
        sub_told.check(find("sub"), &format!("{what}, sub (former {result:?})"));
        match find("gone") {
            // A deletion that failed may still take, as a deletion cut short by a crash does.
            None if matches!(doing, Doing::Deleting) => {}
            Some(_) if matches!(doing, Doing::Deleting) && former_ok => {
                panic!("{what}: a deleted cursor came back");
            }
            got => gone_told.check(got, &format!("{what}, gone")),
        }
    });
    (steps, failure)
}

/// The acks of a cursor of a restarted topic, by its name (`None`: no such cursor).
type Find<'a> = &'a dyn Fn(&str) -> Option<&'a BTreeSet<Position>>;

/// Restarts the topic on `image` (after verifying it) and runs `check` on the acks of its
/// cursors among `positions`: the first failure (damage, a refused open, a failed check).
fn restarted(
    image: MemStorage,
    positions: &[Position],
    what: &str,
    check: impl FnOnce(Find<'_>),
) -> Option<String> {
    let image: Arc<dyn Storage> = Arc::new(image);
    let damage = verify_damage(image.clone());
    if damage > 0 {
        return Some(format!("{what}: verify found {damage} damaged"));
    }
    let got = match recovered_all(image, positions) {
        Ok(got) => got,
        Err(e) => return Some(format!("{what}: restart: {e}")),
    };
    let find = |name: &str| got.iter().find(|(n, _)| n == name).map(|(_, s)| s);
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&find)));
    checked.err().map(|e| panic_message(&*e))
}

/// A new owner that breaks the lock of the topic on `disk` and opens it after `n` more storage
/// operations through `hooked`, inside whatever call makes the `n`-th.
fn arm_new_owner(
    hooked: &support::takeover::Disk,
    disk: &MemStorage,
    n: u64,
) -> Arc<std::sync::Mutex<Option<ackstore::Result<ManagedLedger>>>> {
    let disk = disk.clone();
    hooked.arm_takeover(n, move || {
        disk.break_lock();
        open(Arc::new(disk.clone()))
    })
}

/// The new owner: the one the takeover in `slot` opened, or one opened now if none ran.
fn new_owner(
    disk: &MemStorage,
    slot: &std::sync::Mutex<Option<ackstore::Result<ManagedLedger>>>,
) -> ackstore::Result<ManagedLedger> {
    slot.lock().unwrap().take().unwrap_or_else(|| {
        disk.break_lock();
        open(Arc::new(disk.clone()))
    })
}

fn panic_message(e: &(dyn std::any::Any + Send)) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_string()))
        .unwrap_or_default()
}

#[test]
fn a_claim_at_every_step_of_a_former_owners_flush_close_or_deletion_keeps_every_ok_flush_of_a_topic_alone()
 {
    let mut failures = Vec::new();
    for doing in [Doing::Flushing, Doing::Closing, Doing::Deleting] {
        let (steps, failure) = takeover_during(doing, u64::MAX);
        assert_eq!(failure, None);
        assert!(steps > 3, "{doing:?}: {steps}");
        for n in 1..=steps {
            if let (_, Some(f)) = takeover_during(doing, n) {
                failures.push(f);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One run of flushes of a topic alone whose disk fails every write that grows a file with
/// `ENOSPC` from the `n`-th on (`u64::MAX`: never): the acks and flushes go on while the disk is
/// full; a power cut then keeps every `Ok` flush; once space returns, one flush persists every
/// ack and a restart finds them all. Returns the growing writes of the run and any failure.
fn full_disk_during_flushes(n: u64) -> (u64, Option<String>) {
    let disk = MemStorage::new();
    let (positions, sub_told, _) = prepared_for_takeover(&disk);
    let topic = open(Arc::new(disk.clone())).unwrap();
    let sub = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    let mut told = sub_told;
    let what = format!("ENOSPC from write {n}");
    let before = disk.growing_writes();
    if n != u64::MAX {
        disk.enospc_after(Some(n));
    }
    let theirs: Vec<Position> = positions[80..].iter().copied().step_by(2).collect();
    let mut failed = 0;
    for chunk in theirs.chunks(2) {
        if told.ack(&sub, chunk, chunk.len()).is_err() {
            failed += 1;
        }
    }
    let writes = disk.growing_writes() - before;
    let rolled = topic.journal_stats().unwrap().rollovers > 0;
    if n == u64::MAX && (failed > 0 || !rolled) {
        return (
            writes,
            Some(format!("{what}: {failed} failed, rolled over: {rolled}")),
        );
    }
    let check = |image: MemStorage, told: &Told, when: &str| {
        let what = format!("{what}, {when}");
        restarted(image, &positions, &what, |find| {
            told.check(find("sub"), &what)
        })
    };
    if let Some(f) = check(disk.durable_image(), &told, "a power cut while full") {
        return (writes, Some(f));
    }
    disk.enospc_after(None);
    if let Err(e) = told.flush(&sub) {
        return (
            writes,
            Some(format!("{what}: the flush once space returned: {e}")),
        );
    }
    let more: Vec<Position> = positions[81..].iter().copied().step_by(4).collect();
    if let Err(e) = told.ack(&sub, &more, 5) {
        return (
            writes,
            Some(format!("{what}: flushes after space returned: {e}")),
        );
    }
    if let Err(e) = sub.close().and_then(|()| topic.close()) {
        return (writes, Some(format!("{what}: the close: {e}")));
    }
    // Every ack was flushed: the restart holds exactly them.
    told.made.clone_from(&told.flushed);
    (
        writes,
        check(disk.durable_image(), &told, "a restart after the close"),
    )
}

#[test]
fn a_full_disk_at_every_write_of_flushes_of_a_topic_alone_keeps_every_ok_flush_and_a_retry_persists_all()
 {
    let (writes, failure) = full_disk_during_flushes(u64::MAX);
    assert_eq!(failure, None);
    assert!(writes > 3, "{writes}");
    let failures: Vec<String> = (0..=writes)
        .filter_map(|n| full_disk_during_flushes(n).1)
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Cursors acked and flushed each from a thread of its own while their topic closes.
const THREADS: usize = 8;

#[test]
fn cursors_flushing_from_threads_while_a_topic_alone_closes_keep_every_ok_flush() {
    for round in 0..20 {
        let disk = MemStorage::new();
        let mut cfg = support::config::topic(40, ackstore::PersistMode::MultiEntry, 1 << 20);
        // The topic's own flusher ticks all along, and is stopped by the close.
        cfg.cursor.flush_interval = Some(std::time::Duration::from_millis(1));
        let topic = ManagedLedger::open_with_journal(
            Arc::new(disk.clone()),
            cfg,
            ackstore::JournalConfig {
                segment_bytes: 2048,
            },
        )
        .unwrap();
        let positions = append_n(&topic, 400);
        let cursors: Vec<Cursor> = (0..THREADS)
            .map(|i| {
                topic
                    .open_cursor(&format!("c{i}"), at(InitialPosition::Earliest, false))
                    .unwrap()
            })
            .collect();
        let started = std::sync::Barrier::new(THREADS + 1);
        let (told, closed) = std::thread::scope(|s| {
            let workers: Vec<_> = cursors
                .iter()
                .enumerate()
                .map(|(i, cursor)| {
                    let (positions, started) = (&positions, &started);
                    s.spawn(move || {
                        let mut told = Told::default();
                        let mine = positions.iter().copied().skip(i).step_by(THREADS + 1);
                        let mut flushes = 0;
                        for (k, p) in mine.enumerate() {
                            if cursor.ack(p).is_err() {
                                break;
                            }
                            told.made.insert(p);
                            if k % 3 == 2 {
                                if told.flush(cursor).is_err() {
                                    break;
                                }
                                flushes += 1;
                                if flushes == 2 {
                                    started.wait();
                                }
                            }
                        }
                        if flushes < 2 {
                            started.wait();
                        }
                        told
                    })
                })
                .collect();
            started.wait();
            let closed = topic.close();
            let told: Vec<Told> = workers.into_iter().map(|w| w.join().unwrap()).collect();
            (told, closed)
        });
        closed.unwrap_or_else(|e| panic!("round {round}: the close: {e}"));
        drop(cursors);
        for image in [disk.clone(), disk.durable_image()] {
            let image: Arc<dyn Storage> = Arc::new(image);
            assert_eq!(verify_damage(image.clone()), 0, "round {round}: damage");
            let got = recovered_all(image, &positions).unwrap();
            for (i, told) in told.iter().enumerate() {
                let name = format!("c{i}");
                let acked = got.iter().find(|(n, _)| *n == name).map(|(_, s)| s);
                told.check(acked, &format!("round {round}, {name}"));
            }
        }
    }
}

/// The new owner's claim after `n` storage operations of a former owner's open of the topic
/// (which claims the record, opens the journal, seals its newest segment and records the seal),
/// then each acks and flushes: returns the operations the open made and any failure.
fn takeover_during_open(n: u64) -> (u64, Option<String>) {
    let disk = MemStorage::new();
    let (positions, mut told, gone_told) = prepared_for_takeover(&disk);
    let hooked = support::takeover::Disk::new(Arc::new(disk.clone()));
    let slot = arm_new_owner(&hooked, &disk, n);
    let before = hooked.hook.count();
    let former = open(hooked.storage.clone());
    let steps = hooked.hook.count() - before;
    let what = format!("claim after {n} of the former's open");
    let owner = match new_owner(&disk, &slot) {
        Ok(owner) => owner,
        Err(e) => return (steps, Some(format!("{what}: the new owner's open: {e}"))),
    };
    // Whichever claimed last owns the topic (the former, when its claim came after the other's
    // open): of the two, at most one flush returns `Ok`, and what it flushed is kept.
    let flush_on = |topic: &ManagedLedger, acks: &[Position], told: &mut Told| {
        let cursor = topic.open_cursor("sub", at(InitialPosition::Earliest, false))?;
        told.ack(&cursor, acks, 7)
    };
    let ours: Vec<Position> = positions[1..80].iter().copied().step_by(3).collect();
    let mut owner_told = Told::default();
    let owner_ok = flush_on(&owner, &ours, &mut owner_told).is_ok();
    let mut former_told = Told::default();
    let theirs = [positions[positions.len() - 1]];
    let former_ok = former
        .as_ref()
        .is_ok_and(|former| flush_on(former, &theirs, &mut former_told).is_ok());
    if owner_ok == former_ok {
        return (
            steps,
            Some(format!(
                "{what}: the new owner's flush Ok: {owner_ok}, the former's: {former_ok}"
            )),
        );
    }
    for other in [owner_told, former_told] {
        told.made.extend(other.made);
        told.flushed.extend(other.flushed);
    }
    std::mem::forget((former, owner));
    let failure = restarted(disk.durable_image(), &positions, &what, |find| {
        told.check(find("sub"), &format!("{what}, sub"));
        gone_told.check(find("gone"), &format!("{what}, gone"));
    });
    (steps, failure)
}

#[test]
fn a_claim_at_every_step_of_a_former_owners_open_of_a_topic_alone_keeps_every_ok_flush() {
    let (steps, failure) = takeover_during_open(u64::MAX);
    assert_eq!(failure, None);
    assert!(steps > 3, "{steps}");
    let failures: Vec<String> = (1..=steps)
        .filter_map(|n| takeover_during_open(n).1)
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A former owner killed after `n` storage operations of a run of flushes (one rolls a segment
/// over), its unsynced writes left in the page cache; a new owner opens the directory, acks and
/// flushes; then the power fails. Returns the operations of the run and any failure.
fn open_after_a_kill_then_a_power_cut(n: u64) -> (u64, Option<String>) {
    let disk = MemStorage::new();
    let (positions, told, _) = prepared_for_takeover(&disk);
    let former = open(Arc::new(disk.clone())).unwrap();
    let sub = former
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    let mut former_told = told.clone();
    let before = disk.mutations();
    if n != u64::MAX {
        disk.fail_after(Some(n));
    }
    let theirs: Vec<Position> = positions[80..].iter().copied().step_by(2).collect();
    let run = theirs
        .chunks(2)
        .try_for_each(|chunk| former_told.ack(&sub, chunk, chunk.len()));
    let steps = disk.mutations() - before;
    // The process is gone; the page cache is not.
    std::mem::forget((sub, former));
    disk.fail_after(None);
    let what = format!("killed after {n}");
    if n == u64::MAX && run.is_err() {
        return (steps, Some(format!("{what}: {run:?}")));
    }
    disk.break_lock();
    let owner = match open(Arc::new(disk.clone())) {
        Ok(owner) => owner,
        Err(e) => return (steps, Some(format!("{what}: the new owner's open: {e}"))),
    };
    let ours: Vec<Position> = positions[1..80].iter().copied().step_by(3).collect();
    let mut owner_told = Told::default();
    let cursor = owner.open_cursor("sub", at(InitialPosition::Earliest, false));
    if let Err(e) = cursor.and_then(|c| owner_told.ack(&c, &ours, 7)) {
        return (steps, Some(format!("{what}: the new owner's flush: {e}")));
    }
    std::mem::forget(owner);
    let mut told = former_told;
    told.made.extend(owner_told.made);
    told.flushed.extend(owner_told.flushed);
    let failure = restarted(disk.durable_image(), &positions, &what, |find| {
        told.check(find("sub"), &format!("{what}, sub"));
    });
    (steps, failure)
}

#[test]
fn a_power_cut_after_a_new_owner_opened_a_topic_alone_behind_a_killed_one_keeps_every_ok_flush() {
    let (steps, failure) = open_after_a_kill_then_a_power_cut(u64::MAX);
    assert_eq!(failure, None);
    assert!(steps > 3, "{steps}");
    let failures: Vec<String> = (0..steps)
        .filter_map(|n| open_after_a_kill_then_a_power_cut(n).1)
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A new owner opens the topic, acks and flushes right after `n` storage operations of a
/// former owner's open, its storage failing after `m` writes of the flushes (its first tick
/// starts a segment, which its record lists before any record goes into it: the failure may
/// leave it listed and holding its header alone); then the former's open goes on. A restart
/// finds every listed segment and every ack a flush kept. Returns the operations of the
/// former's open and any failure.
fn a_new_owner_flushing_during_open(n: u64, m: u64) -> (u64, Option<String>) {
    let disk = MemStorage::new();
    let (positions, mut told, gone_told) = prepared_for_takeover(&disk);
    let hooked = support::takeover::Disk::new(Arc::new(disk.clone()));
    let ours: Vec<Position> = positions[1..80].iter().copied().step_by(3).collect();
    let newer = disk.clone();
    let slot = hooked.arm_takeover(n, move || {
        newer.break_lock();
        let owner = open(Arc::new(newer.clone()))?;
        let cursor = owner.open_cursor("sub", at(InitialPosition::Earliest, false))?;
        let mut owner_told = Told::default();
        newer.fail_after(Some(m));
        let _ = owner_told.ack(&cursor, &ours, 7);
        newer.fail_after(None);
        Ok::<_, ackstore::Error>((owner, cursor, owner_told))
    });
    let before = hooked.hook.count();
    let former = open(hooked.storage.clone());
    let steps = hooked.hook.count() - before;
    let what = format!("a new owner's flushes failing after {m} after {n} of the former's open");
    let Some(taken) = slot.lock().unwrap().take() else {
        return (steps, None);
    };
    let (owner, cursor, owner_told) = match taken {
        Ok(taken) => taken,
        Err(e) => return (steps, Some(format!("{what}: the new owner: {e}"))),
    };
    told.made.extend(owner_told.made);
    told.flushed.extend(owner_told.flushed);
    std::mem::forget((former, owner, cursor));
    // The new owner's process is gone, its writes in the page cache; then the power fails.
    disk.break_lock();
    let failure = [disk.clone(), disk.durable_image()]
        .into_iter()
        .find_map(|image| {
            restarted(image, &positions, &what, |find| {
                told.check(find("sub"), &format!("{what}, sub"));
                gone_told.check(find("gone"), &format!("{what}, gone"));
            })
        });
    (steps, failure)
}

#[test]
fn a_former_owners_open_never_removes_a_segment_a_new_owner_listed_after_its_claim() {
    let (steps, failure) = a_new_owner_flushing_during_open(u64::MAX, u64::MAX);
    assert_eq!(failure, None);
    assert!(steps > 3, "{steps}");
    // The first tick's segment is created and listed within its first 16 writes.
    let failures: Vec<String> = (1..=steps)
        .flat_map(|n| (1..=16).map(move |m| (n, m)))
        .filter_map(|(n, m)| a_new_owner_flushing_during_open(n, m).1)
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

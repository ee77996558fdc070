//! Store cursors persisted through the shared journal, under the faults production brings:
//! power cuts at every step of a workload that deletes and recreates cursors while segments roll
//! over, a full disk under a flush tick, and deletes racing the store's ticks from threads.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

use ackstore::{Cursor, CursorOptions, ManagedLedger, MemStorage, Position, Storage, Store};
use support::crash::{Points, cut_everywhere_after, torn_image, unsynced_tail};
use support::hooked::Hooked;
use support::workload::Rng;

const CURSORS: usize = 3;
const ENTRIES: u64 = 90;
const TOPIC: &str = "persistent://t/ns/rt";

fn open(disk: &MemStorage) -> ackstore::Result<Store> {
    open_on(Arc::new(disk.clone()))
}

fn open_on(storage: Arc<dyn Storage>) -> ackstore::Result<Store> {
    Store::open_with_storage(storage, support::config::store_budgeted(30, 900, 600))
}

fn name(c: usize) -> String {
    format!("sub/{c}")
}

fn prepare(disk: &MemStorage) -> Vec<Position> {
    let store = open(disk).expect("open");
    let topic = store.topic(TOPIC).expect("topic");
    let ps: Vec<Position> = (0..ENTRIES)
        .map(|i| topic.append(format!("{i}").as_bytes()).expect("append"))
        .collect();
    topic.sync().expect("sync");
    for c in 0..CURSORS {
        topic
            .open_cursor(&name(c), CursorOptions::default())
            .expect("cursor");
    }
    store.close().expect("close");
    ps
}

/// Per cursor name: what the application acked, what an `Ok` flush covered, and the acks of a
/// former cursor of the same name whose delete did not return `Ok` (it may come back).
#[derive(Debug, Default, Clone)]
struct Model {
    truth: BTreeMap<usize, BTreeSet<Position>>,
    durable: BTreeMap<usize, BTreeSet<Position>>,
    undeleted: BTreeMap<usize, BTreeSet<Position>>,
}

fn workload(disk: &MemStorage, ps: &[Position], seed: u64) -> Model {
    let mut m = Model::default();
    for c in 0..CURSORS {
        m.truth.insert(c, BTreeSet::new());
        m.durable.insert(c, BTreeSet::new());
    }
    let _ = run(disk, ps, seed, &mut m);
    m
}

fn run(disk: &MemStorage, ps: &[Position], seed: u64, m: &mut Model) -> ackstore::Result<()> {
    let store = open(disk)?;
    let topic = store.topic(TOPIC)?;
    let mut cursors = Vec::new();
    for c in 0..CURSORS {
        cursors.push(topic.open_cursor(&name(c), CursorOptions::default())?);
    }
    let mut rng = Rng::new(seed);
    for step in 0..70 {
        let c = rng.index(CURSORS);
        let pos = ps[rng.index(ps.len())];
        cursors[c].ack(pos)?;
        m.truth.get_mut(&c).expect("cursor").insert(pos);
        if step % 9 == 8 {
            store.flush_all()?;
            m.durable.clone_from(&m.truth);
        } else if step % 23 == 22 {
            // Delete the cursor and create a new one of the same name before the next tick.
            m.undeleted.insert(c, m.truth[&c].clone());
            topic.delete_cursor(&name(c))?;
            m.undeleted.remove(&c);
            m.truth.insert(c, BTreeSet::new());
            m.durable.insert(c, BTreeSet::new());
            cursors[c] = topic.open_cursor(&name(c), CursorOptions::default())?;
        } else if rng.chance(6) {
            cursors[c].flush()?;
            m.durable.insert(c, m.truth[&c].clone());
        }
    }
    store.close()?;
    m.durable.clone_from(&m.truth);
    Ok(())
}

fn check(image: &MemStorage, ps: &[Position], m: &Model, what: &str) {
    let store = open(image).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    let topic = store.topic(TOPIC).expect("topic");
    for c in 0..CURSORS {
        let cursor = topic
            .open_cursor(&name(c), CursorOptions::default())
            .unwrap_or_else(|e| panic!("{what}: cursor {c}: {e}"));
        let got: BTreeSet<Position> = ps
            .iter()
            .copied()
            .filter(|p| cursor.is_acked(*p).expect("is_acked"))
            .collect();
        let truth = &m.truth[&c];
        let old = m.undeleted.get(&c);
        let allowed = got.is_subset(truth) || old.is_some_and(|o| got.is_subset(o));
        assert!(
            allowed,
            "{what}: cursor {c} recovered acks never made: {:?}",
            got.difference(truth).collect::<Vec<_>>()
        );
        if old.is_none() {
            let durable = &m.durable[&c];
            assert!(
                durable.is_subset(&got),
                "{what}: cursor {c} lost flushed acks: {:?}",
                durable.difference(&got).collect::<Vec<_>>()
            );
        }
    }
}

#[test]
fn a_power_cut_anywhere_while_cursors_are_deleted_recreated_and_segments_roll_keeps_the_model() {
    let clean = cut_everywhere_after(
        Points::every_in_release(5),
        prepare,
        |disk, ps| (workload(disk, &ps, 5), ps),
        |disk, cut, (m, ps)| {
            check(&disk.durable_image(), &ps, &m, &format!("{cut:?}"));
        },
    );
    assert!(clean.total > 50, "only {} operations", clean.total);
}

#[test]
fn every_torn_journal_tail_while_cursors_are_deleted_recreated_and_segments_roll_keeps_the_model() {
    let mut images = 0;
    cut_everywhere_after(
        Points::every_in_release(5),
        prepare,
        |disk, ps| (workload(disk, &ps, 9), ps),
        |disk, cut, (m, ps)| {
            let tail = unsynced_tail(disk);
            for keep in 0..=tail {
                let image = torn_image(disk, |_| keep);
                check(
                    &image,
                    &ps,
                    &m,
                    &format!("{cut:?}, {keep} of {tail} tail bytes"),
                );
                images += 1;
            }
        },
    );
    assert!(images > 100, "only {images} torn images");
}

#[test]
fn after_a_tick_fails_on_a_full_disk_no_later_flush_or_close_reports_success() {
    let disk = MemStorage::new();
    let ps = prepare(&disk);
    let store = open(&disk).expect("open");
    let (topic, cursors, mut truth) = acked_and_flushed(&store, &ps);
    let mut durable = truth.clone();
    disk.set_capacity(Some(disk.used_bytes() + 200));
    let mut failed = false;
    for round in 0..40 {
        for (c, cursor) in cursors.iter().enumerate() {
            let p = ps[(round * 7 + c * 13 + 1) % ps.len()];
            cursor.ack(p).expect("acks never wait for the disk");
            truth.entry(c).or_default().insert(p);
        }
        match store.flush_all() {
            Ok(_) if !failed => durable.clone_from(&truth),
            Ok(_) => panic!("round {round}: a flush_all after a failed tick returned Ok"),
            Err(_) => failed = true,
        }
        if failed {
            for (c, cursor) in cursors.iter().enumerate() {
                assert!(
                    cursor.flush().is_err(),
                    "round {round}: cursor {c} flush returned Ok after a failed tick"
                );
            }
        }
    }
    assert!(failed, "the disk never filled");
    for (c, cursor) in cursors.iter().enumerate() {
        assert!(cursor.close().is_err(), "cursor {c} close returned Ok");
    }
    let _ = store.close();
    drop((cursors, topic, store));
    let image = disk.durable_image();
    image.set_capacity(None);
    check_reopened(&image, &ps, &truth, &durable, "");
}

/// Each cursor's acks among `ps` the workload made (`truth`) or an `Ok` flush covered.
type Acks = BTreeMap<usize, BTreeSet<Position>>;

/// The topic's cursors, opened.
fn open_cursors(topic: &ManagedLedger) -> Vec<Cursor> {
    (0..CURSORS)
        .map(|c| {
            topic
                .open_cursor(&name(c), CursorOptions::default())
                .expect("cursor")
        })
        .collect()
}

/// Opens the topic's cursors in `store`, acks every fourth entry of `ps` from a different
/// start for each, and flushes: the topic, the cursors and their acks.
fn acked_and_flushed(store: &Store, ps: &[Position]) -> (Arc<ManagedLedger>, Vec<Cursor>, Acks) {
    let topic = store.topic(TOPIC).expect("topic");
    let cursors = open_cursors(&topic);
    let mut truth = Acks::new();
    for (c, cursor) in cursors.iter().enumerate() {
        for p in ps.iter().skip(c).step_by(4) {
            cursor.ack(*p).expect("ack");
            truth.entry(c).or_default().insert(*p);
        }
    }
    store.flush_all().expect("flush_all");
    (topic, cursors, truth)
}

/// Reopens `image` (a disk after a power cut): every cursor's acks lie within `truth` and hold
/// `durable`. `what` starts each message.
fn check_reopened(image: &MemStorage, ps: &[Position], truth: &Acks, durable: &Acks, what: &str) {
    let store = open(image).expect("reopen");
    let topic = store.topic(TOPIC).expect("topic");
    for c in 0..CURSORS {
        let cursor = topic
            .open_cursor(&name(c), CursorOptions::default())
            .expect("cursor");
        let got: BTreeSet<Position> = ps
            .iter()
            .copied()
            .filter(|p| cursor.is_acked(*p).expect("is_acked"))
            .collect();
        assert!(got.is_subset(&truth[&c]), "{what}cursor {c} invented acks");
        assert!(
            durable[&c].is_subset(&got),
            "{what}cursor {c} lost flushed acks"
        );
    }
}

/// A flush one of whose `fdatasync`s fails (the disk lost the write-back), for each sync the
/// flush makes in turn, must not answer `Ok`, and a power cut afterwards keeps every ack of
/// each `Ok` flush (the first one's, and any later one's that answered `Ok`) and invents
/// none. The harnesses that cut the power fail every operation after the cut, reads
/// too, so a sync's error swallowed would be hidden there by the next operation failing.
#[test]
fn a_flush_whose_fsync_fails_never_answers_ok_and_a_power_cut_keeps_every_ok_flush() {
    let mut failed = 0;
    while fsync_fails(failed + 1) {
        failed += 1;
    }
    assert!(failed >= 2, "a flush made only {failed} syncs");
}

/// The workload of the test above with the `nth` sync of its second flush failing. Returns
/// whether the flush made that many syncs.
fn fsync_fails(nth: u64) -> bool {
    let disk = MemStorage::new();
    let ps = prepare(&disk);
    let hooked = Hooked::new(disk.clone());
    let store = open_on(Arc::new(hooked.clone())).expect("open");
    let (topic, cursors, mut truth) = acked_and_flushed(&store, &ps);
    let mut durable = truth.clone();
    for (c, cursor) in cursors.iter().enumerate() {
        for p in ps.iter().skip(c + 1).step_by(4) {
            cursor.ack(*p).expect("ack");
            truth.entry(c).or_default().insert(*p);
        }
    }
    hooked.hooks.fail_sync_in.store(nth, SeqCst);
    let flushed = store.flush_all();
    if hooked.hooks.fail_sync_in.swap(0, SeqCst) != 0 {
        flushed.expect("a flush with every sync kept");
        return false;
    }
    assert!(
        flushed.is_err(),
        "sync {nth}: a flush_all whose fsync failed returned Ok"
    );
    // A later flush that answers `Ok` made what it covers durable, whatever failed before.
    for (c, cursor) in cursors.iter().enumerate() {
        if cursor.flush().is_ok() {
            durable.insert(c, truth[&c].clone());
        }
    }
    std::mem::forget((cursors, topic, store));
    check_reopened(
        &disk.durable_image(),
        &ps,
        &truth,
        &durable,
        &format!("sync {nth}: "),
    );
    true
}

/// Cursors deleted and created again under the same name from several threads, while another
/// thread runs `flush_all`, the flusher pool ticks and producers roll ledgers: after a close and
/// a reopen every cursor is exactly what its thread last saw.
#[test]
fn deletes_and_recreations_racing_flush_all_and_the_pool_reopen_to_each_cursors_last_state() {
    let dir = tempfile::tempdir().expect("dir");
    let mut config = support::config::store_budgeted(30, 900, 600);
    config.flusher_threads = 2;
    config.journal.segment_bytes = 4096;
    config.ledger.cursor.flush_interval = Some(std::time::Duration::from_millis(1));
    let store = Store::open(dir.path(), config.clone()).expect("open");
    let topic = store.topic(TOPIC).expect("topic");
    for i in 0..60 {
        topic.append(format!("{i}").as_bytes()).expect("append");
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    let finals = std::sync::Mutex::new(BTreeMap::new());
    std::thread::scope(|s| {
        let (topic, store, done) = (&topic, &store, &done);
        s.spawn(move || {
            let mut i = 0u64;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                topic.append(format!("p{i}").as_bytes()).expect("append");
                i += 1;
            }
        });
        s.spawn(move || {
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                store.flush_all().expect("flush_all");
            }
        });
        let workers: Vec<_> = (0..4)
            .map(|k| {
                let finals = &finals;
                s.spawn(move || {
                    let name = name(k);
                    let mut rng = Rng::new(k as u64 + 17);
                    let mut cursor = topic
                        .open_cursor(&name, CursorOptions::default())
                        .expect("cursor");
                    for step in 0..300 {
                        let last = topic.last_position().expect("entries");
                        let first = topic.first_position().expect("entries");
                        let ledger =
                            first.ledger_id + rng.below(last.ledger_id - first.ledger_id + 1);
                        let pos = Position::new(ledger, rng.below(30)).min(last);
                        match cursor.ack(pos) {
                            Ok(_) | Err(ackstore::Error::NoSuchEntry { .. }) => {}
                            Err(e) => panic!("ack {pos}: {e}"),
                        }
                        match step % 50 {
                            19 => cursor.seek(pos).expect("seek"),
                            29 => {
                                topic.delete_cursor(&name).expect("delete");
                                cursor = topic
                                    .open_cursor(&name, CursorOptions::default())
                                    .expect("recreate");
                            }
                            39 => {
                                cursor.close().expect("close");
                                cursor = topic
                                    .open_cursor(&name, CursorOptions::default())
                                    .expect("reopen");
                            }
                            _ if rng.chance(10) => cursor.flush().expect("flush"),
                            _ => {}
                        }
                    }
                    finals.lock().expect("finals").insert(
                        k,
                        (
                            cursor.mark_delete_position().expect("mark"),
                            cursor.acked_ranges().expect("ranges"),
                        ),
                    );
                })
            })
            .collect();
        // Every worker joined before `done`, then their panics: a worker's panic must not
        // leave the flushing thread running, and the scope waiting for it.
        let joined: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        for worker in joined {
            worker.expect("worker");
        }
    });
    store.close().expect("close");
    drop((topic, store));
    let store = Store::open(dir.path(), config).expect("reopen");
    let topic = store.topic(TOPIC).expect("topic");
    for (k, expected) in finals.into_inner().expect("finals") {
        let cursor = topic
            .open_cursor(&name(k), CursorOptions::default())
            .expect("cursor");
        let got = (
            cursor.mark_delete_position().expect("mark"),
            cursor.acked_ranges().expect("ranges"),
        );
        assert_eq!(got, expected, "cursor {k}");
    }
}

/// A backward seek returns once it is durable: a power cut at any later point never brings back
/// the acks the seek cleared, and a seek that returned `Ok` is where the cursor reopens.
#[test]
fn a_seek_that_returned_ok_survives_a_power_cut_and_its_cleared_acks_never_return() {
    #[derive(Debug, Clone, Default)]
    struct Seen {
        /// The acked set after the last operation that returned `Ok`, and before it.
        truth: BTreeSet<Position>,
        before: Option<BTreeSet<Position>>,
        seeked_to: Option<Position>,
    }
    fn work(disk: &MemStorage, ps: &[Position]) -> Seen {
        let mut seen = Seen::default();
        let _ = (|| -> ackstore::Result<()> {
            let store = open(disk)?;
            let topic = store.topic(TOPIC)?;
            let cursor = topic.open_cursor(&name(0), CursorOptions::default())?;
            cursor.ack_cumulative(ps[50])?;
            cursor.ack(ps[70])?;
            seen.truth = ps[..=50].iter().copied().chain([ps[70]]).collect();
            store.flush_all()?;
            let cleared: BTreeSet<Position> = BTreeSet::new();
            seen.before = Some(seen.truth.clone());
            cursor.seek(ps[10])?;
            seen.truth = ps[..10].iter().copied().collect::<BTreeSet<_>>();
            seen.truth.extend(cleared);
            seen.before = None;
            seen.seeked_to = Some(ps[10]);
            cursor.ack(ps[80])?;
            seen.before = Some(seen.truth.clone());
            seen.truth.insert(ps[80]);
            store.flush_all()?;
            seen.before = None;
            store.close()?;
            Ok(())
        })();
        seen
    }
    cut_everywhere_after(
        Points::EVERY,
        prepare,
        |disk, ps| (work(disk, &ps), ps),
        |disk, cut, (seen, ps)| {
            let store = open(&disk.durable_image()).expect("reopen");
            let topic = store.topic(TOPIC).expect("topic");
            let cursor = topic
                .open_cursor(&name(0), CursorOptions::default())
                .expect("cursor");
            let got: BTreeSet<Position> = ps
                .iter()
                .copied()
                .filter(|p| cursor.is_acked(*p).expect("is_acked"))
                .collect();
            let ok = got.is_subset(&seen.truth)
                || seen.before.as_ref().is_some_and(|b| got.is_subset(b));
            assert!(
                ok,
                "{cut:?}: acks never made (or cleared by a seek): {got:?}"
            );
            if let Some(to) = seen.seeked_to {
                let read = cursor.read_position().expect("read position");
                assert!(
                    read <= to,
                    "{cut:?}: reopened at {read}, past the seek to {to}"
                );
            }
        },
    );
}

/// Every byte of a journal segment flipped in turn: opening the store and its cursors answers
/// an error or a state, never a panic, and never acks that were not made.
#[test]
fn a_corrupt_byte_anywhere_in_a_journal_segment_never_panics_or_invents_acks() {
    let disk = MemStorage::new();
    let ps = prepare(&disk);
    let mut truth: BTreeMap<usize, BTreeSet<Position>> = BTreeMap::new();
    {
        let store = open(&disk).expect("open");
        let topic = store.topic(TOPIC).expect("topic");
        for c in 0..CURSORS {
            let cursor = topic
                .open_cursor(&name(c), CursorOptions::default())
                .expect("cursor");
            for p in ps.iter().skip(c).step_by(3) {
                cursor.ack(*p).expect("ack");
                truth.entry(c).or_default().insert(*p);
            }
            store.flush_all().expect("flush");
        }
        store.close().expect("close");
    }
    let image = disk.durable_image();
    let names: Vec<String> = ackstore::Storage::list(&image)
        .expect("list")
        .into_iter()
        .filter(|n| n.contains("journal"))
        .collect();
    assert!(!names.is_empty(), "no journal files among the store's");
    let mut flipped = 0;
    for n in &names {
        let bytes = image.live_bytes(n).expect("bytes");
        for at in 0..bytes.len() {
            let bad = image.durable_image();
            let mut b = bytes.clone();
            b[at] ^= 0x5a;
            bad.set_bytes(n, b).expect("set");
            flipped += 1;
            let result = std::panic::catch_unwind(|| {
                let Ok(store) = open(&bad) else { return };
                let Ok(topic) = store.topic(TOPIC) else {
                    return;
                };
                for c in 0..CURSORS {
                    let Ok(cursor) = topic.open_cursor(&name(c), CursorOptions::default()) else {
                        continue;
                    };
                    for p in &ps {
                        if let Ok(true) = cursor.is_acked(*p) {
                            assert!(
                                truth[&c].contains(p),
                                "{n} byte {at}: cursor {c} acks {p}, never acked"
                            );
                        }
                    }
                }
            });
            assert!(result.is_ok(), "{n}: a flipped byte {at} panicked");
        }
    }
    assert!(flipped > 100, "only {flipped} bytes flipped");
}

/// A former owner that has not noticed the takeover yet ticks into a new segment before the new
/// owner's first tick: the new owner's flushes still succeed and it never sees the former
/// owner's acks.
#[test]
fn a_former_owners_segment_rollover_before_the_new_owners_first_tick_does_not_stop_it() {
    let disk = MemStorage::new();
    let ps = prepare(&disk);
    let old = open(&disk).expect("open");
    let old_topic = old.topic(TOPIC).expect("topic");
    let old_cursor = old_topic
        .open_cursor(&name(0), CursorOptions::default())
        .expect("cursor");
    old_cursor.ack(ps[3]).expect("ack");
    old.flush_all().expect("flush before the takeover");
    disk.break_lock();
    let new = open(&disk).expect("second owner after the lock broke");
    for p in ps.iter().skip(10).step_by(2) {
        old_cursor.ack(*p).expect("acks go on in memory");
    }
    assert!(old.flush_all().is_err(), "the former owner is fenced");
    let topic = new.topic(TOPIC).expect("topic");
    let cursor = topic
        .open_cursor(&name(0), CursorOptions::default())
        .expect("cursor");
    cursor.ack(ps[7]).expect("ack");
    new.flush_all()
        .expect("the new owner flushes after the former owner's tick");
    drop((cursor, topic, new));
    let store = open(&disk.durable_image()).expect("reopen");
    let topic = store.topic(TOPIC).expect("topic");
    let cursor = topic
        .open_cursor(&name(0), CursorOptions::default())
        .expect("cursor");
    assert!(cursor.is_acked(ps[3]).expect("is_acked"));
    assert!(cursor.is_acked(ps[7]).expect("is_acked"));
    assert!(!cursor.is_acked(ps[10]).expect("is_acked"), "fenced ack");
}

/// Hostile cursor names on a store's topic: each opens and reopens with its acks or is refused
/// with an error, and none leaves a file outside the store's own names.
#[test]
fn hostile_cursor_names_on_a_store_topic_reopen_or_are_refused() {
    let disk = MemStorage::new();
    let ps = prepare(&disk);
    let names = [
        "../../etc/passwd".to_owned(),
        "a/b/../../c".to_owned(),
        "nul\0inside".to_owned(),
        "\u{202e}rtl".to_owned(),
        "x".repeat(4096),
        "y".repeat(70_000),
        String::new(),
    ];
    let mut accepted = Vec::new();
    {
        let store = open(&disk).expect("open");
        let topic = store.topic(TOPIC).expect("topic");
        for (i, n) in names.iter().enumerate() {
            if let Ok(cursor) = topic.open_cursor(n, CursorOptions::default()) {
                cursor.ack(ps[i]).expect("ack");
                accepted.push(i);
            }
        }
        store.close().expect("close");
    }
    let store = open(&disk.durable_image()).expect("reopen");
    let topic = store.topic(TOPIC).expect("topic");
    for i in accepted {
        let cursor = topic
            .open_cursor(&names[i], CursorOptions::default())
            .unwrap_or_else(|e| panic!("name {i}: {e}"));
        assert!(cursor.is_acked(ps[i]).expect("is_acked"), "name {i}");
    }
    for f in ackstore::Storage::list(&disk).expect("list") {
        assert!(
            !f.contains("..") && !f.contains('/') && !f.contains('\0'),
            "{f:?}"
        );
    }
}

/// Threads ack while one thread runs `flush_all`, the pool ticks and producers append: every ack
/// that returned before a `flush_all` began that then returned `Ok` is in the durable image, and
/// no ack appears that was never made.
#[test]
fn acks_made_before_an_ok_flush_all_are_durable_while_threads_ack_and_the_pool_ticks() {
    let disk = MemStorage::new();
    let ps = prepare(&disk);
    let mut config = support::config::store_budgeted(30, 900, 600);
    config.flusher_threads = 2;
    config.ledger.cursor.flush_interval = Some(std::time::Duration::from_millis(1));
    let store = Store::open_with_storage(Arc::new(disk.clone()), config).expect("open");
    let topic = store.topic(TOPIC).expect("topic");
    let cursors = open_cursors(&topic);
    let truth: Vec<std::sync::Mutex<BTreeSet<Position>>> =
        (0..CURSORS).map(|_| Default::default()).collect();
    let durable = std::sync::Mutex::new(vec![BTreeSet::new(); CURSORS]);
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let (truth, durable, done, store, ps) = (&truth, &durable, &done, &store, &ps);
        s.spawn(move || {
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let before: Vec<_> = truth.iter().map(|t| t.lock().expect("t").clone()).collect();
                store.flush_all().expect("flush_all");
                *durable.lock().expect("durable") = before;
            }
        });
        let workers: Vec<_> = cursors
            .iter()
            .enumerate()
            .map(|(c, cursor)| {
                s.spawn(move || {
                    let mut rng = Rng::new(c as u64 + 3);
                    for step in 0..600 {
                        let p = ps[rng.index(ps.len())];
                        cursor.ack(p).expect("ack");
                        truth[c].lock().expect("t").insert(p);
                        if step % 97 == 0 {
                            cursor.flush().expect("flush");
                        }
                    }
                })
            })
            .collect();
        // Every worker joined before `done`, then their panics: a worker's panic must not
        // leave the flushing thread running, and the scope waiting for it.
        let joined: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        for worker in joined {
            worker.expect("worker");
        }
    });
    let image = disk.durable_image();
    drop((cursors, topic, store));
    let store = open(&image).expect("reopen");
    let topic = store.topic(TOPIC).expect("topic");
    let durable = durable.into_inner().expect("durable");
    for c in 0..CURSORS {
        let cursor = topic
            .open_cursor(&name(c), CursorOptions::default())
            .expect("cursor");
        let got: BTreeSet<Position> = ps
            .iter()
            .copied()
            .filter(|p| cursor.is_acked(*p).expect("is_acked"))
            .collect();
        let t = truth[c].lock().expect("t");
        assert!(got.is_subset(&t), "cursor {c} invented acks");
        assert!(
            durable[c].is_subset(&got),
            "cursor {c} lost acks an Ok flush_all covered: {:?}",
            durable[c].difference(&got).collect::<Vec<_>>()
        );
    }
}

/// A process dies at any step of a tick (its writes reach the page cache, its sync may not
/// run); the next owner opens the directory, acks and flushes with `Ok`; then the power goes.
/// What the next owner flushed is kept, and nothing is acked that no one acked.
#[test]
fn a_new_owners_ok_flush_survives_a_power_cut_after_taking_over_an_unsynced_tick() {
    let mut checked = 0;
    for n in 0..40 {
        let disk = MemStorage::new();
        let ps = prepare(&disk);
        let old = open(&disk).expect("open");
        let old_topic = old.topic(TOPIC).expect("topic");
        let old_cursors: Vec<_> = (0..CURSORS)
            .map(|c| {
                old_topic
                    .open_cursor(&name(c), CursorOptions::default())
                    .expect("cursor")
            })
            .collect();
        let mut truth: Vec<BTreeSet<Position>> = vec![BTreeSet::new(); CURSORS];
        for (c, cursor) in old_cursors.iter().enumerate() {
            for p in ps.iter().take(40).skip(c).step_by(3) {
                cursor.ack(*p).expect("ack");
                truth[c].insert(*p);
            }
        }
        disk.fail_after(Some(n));
        let died_cleanly = old.flush_all().is_ok();
        // The process dies: nothing of it runs again, its page-cache writes stay.
        std::mem::forget((old_cursors, old_topic, old));
        disk.fail_after(None);
        disk.break_lock();
        let new = open(&disk).expect("the next owner opens");
        let topic = new.topic(TOPIC).expect("topic");
        let mut flushed: Vec<BTreeSet<Position>> = vec![BTreeSet::new(); CURSORS];
        for c in 0..CURSORS {
            let cursor = topic
                .open_cursor(&name(c), CursorOptions::default())
                .expect("cursor");
            for p in ps.iter().skip(60 + c).step_by(4) {
                cursor.ack(*p).expect("ack");
                truth[c].insert(*p);
                flushed[c].insert(*p);
            }
        }
        new.flush_all().expect("the next owner flushes");
        std::mem::forget((topic, new));
        let image = disk.durable_image();
        let store =
            open(&image).unwrap_or_else(|e| panic!("n={n}: reopen after the power cut: {e:?}"));
        let topic = store.topic(TOPIC).expect("topic");
        for c in 0..CURSORS {
            let cursor = topic
                .open_cursor(&name(c), CursorOptions::default())
                .expect("cursor");
            let got: BTreeSet<Position> = ps
                .iter()
                .copied()
                .filter(|p| cursor.is_acked(*p).expect("is_acked"))
                .collect();
            assert!(got.is_subset(&truth[c]), "n={n}: cursor {c} invented acks");
            assert!(
                flushed[c].is_subset(&got),
                "n={n} (old tick ok: {died_cleanly}): cursor {c} lost acks the next owner \
                 flushed: {:?}",
                flushed[c].difference(&got).collect::<Vec<_>>()
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 40);
}

/// After the disk filled under a tick of the pool, the process closes the store (with an
/// error), frees space and opens the same directory again in the same process: the store opens
/// and every cursor holds at least what was flushed before the disk filled.
#[test]
fn a_store_closed_after_a_full_disk_tick_opens_again_in_the_same_process() {
    let disk = MemStorage::new();
    let ps = prepare(&disk);
    let mut config = support::config::store_budgeted(30, 900, 600);
    config.flusher_threads = 2;
    config.ledger.cursor.flush_interval = Some(std::time::Duration::from_millis(1));
    let store = Store::open_with_storage(Arc::new(disk.clone()), config.clone()).expect("open");
    let topic = store.topic(TOPIC).expect("topic");
    let cursor = topic
        .open_cursor(&name(0), CursorOptions::default())
        .expect("cursor");
    cursor.ack(ps[1]).expect("ack");
    cursor.flush().expect("flush");
    disk.set_capacity(Some(disk.used_bytes() + 64));
    let mut i = 2;
    while cursor.flush().is_ok() {
        cursor
            .ack(ps[i % ps.len()])
            .expect("acks never wait for the disk");
        i += 1;
        assert!(i < 10_000, "the disk never filled");
    }
    assert!(cursor.flush().is_err(), "a flush after a failed one");
    assert!(store.close().is_err(), "close after a failed tick");
    drop((cursor, topic, store));
    disk.set_capacity(None);
    let store = Store::open_with_storage(Arc::new(disk.clone()), config).expect("opens again");
    let topic = store.topic(TOPIC).expect("topic");
    let cursor = topic
        .open_cursor(&name(0), CursorOptions::default())
        .expect("cursor");
    assert!(cursor.is_acked(ps[1]).expect("is_acked"));
    store.close().expect("close");
}

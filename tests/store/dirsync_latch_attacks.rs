//! Attacks on what a failed directory sync latches (the directory forgets the names the sync
//! covered, as the in-memory disk models it), with what the single-threaded test of a roll
//! (`failed_dir_sync_of_a_topic_record.rs`) does not try: another topic's failed directory
//! sync at every storage operation of a roll, threads at once on several topics, a failed
//! directory sync of the catalog at every step of a topic's creation, a power cut at every
//! step after a failed directory sync, and a new owner after one. No call of the only owner
//! answers `Fenced`; every `Ok` survives a reopen of what the disk holds; a former owner never
//! writes over a new owner's state.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use ackstore::{Cursor, Error, ManagedLedger, MemStorage, Position, Storage, Store, StoreConfig};
use support::config::store;
use support::hooked::{Fault, Hooked};
use support::tap::{Hook, Op, Tap};
use support::topic::earliest;
use support::workload::Rng;

const PER_LEDGER: u64 = 4;
const SEGMENT_BYTES: u64 = 16 << 10;

/// What the application was told about one topic and its cursor `c`: the entries appended
/// (with their bytes) and how many of them, from the first, a sync answered `Ok` for; every
/// ack tried, the acks answered `Ok`, and those a flush answered `Ok` for; whether a trim ran.
#[derive(Debug, Default, Clone)]
struct Told {
    appended: Vec<(Position, Vec<u8>)>,
    synced: usize,
    tried: BTreeSet<Position>,
    acked: BTreeSet<Position>,
    flushed: BTreeSet<Position>,
    trimmed: bool,
}

impl Told {
    fn append_and_sync(&mut self, topic: &ManagedLedger, n: usize, tag: &str) -> Result<(), Error> {
        for _ in 0..n {
            let body = format!("{tag}-{}", self.appended.len()).into_bytes();
            let p = topic.append(&body)?;
            self.appended.push((p, body));
        }
        let covered = self.appended.len();
        topic.sync()?;
        self.synced = self.synced.max(covered);
        Ok(())
    }

    /// Acks up to `n` synced entries not tried yet, every other one (holes), through `cursor`.
    fn ack_some(&mut self, cursor: &Cursor, n: usize) -> Result<(), Error> {
        let fresh: Vec<Position> = self.appended[..self.synced]
            .iter()
            .map(|(p, _)| *p)
            .filter(|p| !self.tried.contains(p))
            .step_by(2)
            .take(n)
            .collect();
        for p in fresh {
            self.tried.insert(p);
            cursor.ack(p)?;
            self.acked.insert(p);
        }
        Ok(())
    }

    fn flush(&mut self, cursor: &Cursor) -> Result<(), Error> {
        let covered = self.acked.clone();
        cursor.flush()?;
        self.flushed.extend(covered);
        Ok(())
    }

    fn trim(&mut self, topic: &ManagedLedger) -> Result<(), Error> {
        self.trimmed = true;
        topic.trim_consumed().map(drop)
    }
}

/// Calls and what they answered.
type Outcomes = Vec<(String, Result<(), Error>)>;

/// `Err(message)` unless `holds`.
macro_rules! ensure {
    ($holds:expr, $($message:tt)+) => {
        if !$holds {
            return Err(format!($($message)+));
        }
    };
}

/// `Err` unless every call answered `Ok`, `PreviousIo` or the injected error of the failed
/// directory sync itself: never `Fenced`, with one owner.
fn never_fenced(outcomes: &Outcomes, what: &str) -> Result<(), String> {
    for (call, outcome) in outcomes {
        let fine = match outcome {
            Ok(()) | Err(Error::PreviousIo) => true,
            Err(Error::Io { op, .. }) => *op == "fsync directory",
            Err(_) => false,
        };
        ensure!(fine, "{what}: {call} answered {outcome:?} with one owner");
    }
    Ok(())
}

fn assert_never_fenced(outcomes: &Outcomes, what: &str) {
    never_fenced(outcomes, what).unwrap_or_else(|e| panic!("{e}"));
}

/// Checks what `disk` holds after a power cut now: `verify` finds no damage, the store opens,
/// every topic of `told` holds every entry a sync answered `Ok` for, its cursor `c` keeps every
/// ack a flush answered `Ok` for and holds no ack never tried, and both take writes again.
fn durable_holds(
    disk: &MemStorage,
    config: &StoreConfig,
    told: &BTreeMap<String, Told>,
    what: &str,
) -> Result<(), String> {
    let image: Arc<dyn Storage> = Arc::new(disk.durable_image());
    let report = ackstore::check::verify(&image).map_err(|e| format!("{what}: verify: {e}"))?;
    ensure!(report.is_sound(), "{what}: verify: {report}");
    let reopened = Store::open_with_storage(image, config.clone())
        .map_err(|e| format!("{what}: the reopen of the image failed: {e}"))?;
    for (name, told) in told {
        let topic = reopened
            .topic(name)
            .map_err(|e| format!("{what}: topic {name} after the reopen: {e}"))?;
        let cursor = topic
            .open_cursor("c", earliest())
            .map_err(|e| format!("{what}: cursor c of {name} after the reopen: {e}"))?;
        for (p, body) in &told.appended[..told.synced] {
            match topic.read(*p) {
                Ok(entry) => ensure!(&entry.payload == body, "{what}: {name} {p} changed"),
                // A trim removes ledgers whose entries every cursor acknowledged.
                Err(Error::NoSuchEntry(_)) if told.trimmed && told.tried.contains(p) => continue,
                Err(e) => return Err(format!("{what}: {name} {p} was synced, now {e}")),
            }
            let acked = cursor
                .is_acked(*p)
                .map_err(|e| format!("{what}: is_acked {name} {p}: {e}"))?;
            ensure!(
                !told.flushed.contains(p) || acked,
                "{what}: {name} {p} flushed as acked, now not"
            );
            ensure!(
                told.tried.contains(p) || !acked,
                "{what}: {name} {p} never acked, now acked"
            );
        }
        let mut after = Told::default();
        after
            .append_and_sync(&topic, PER_LEDGER as usize + 1, "reopened")
            .map_err(|e| format!("{what}: {name} after the reopen: {e}"))?;
        after
            .ack_some(&cursor, 2)
            .and_then(|()| after.flush(&cursor))
            .map_err(|e| format!("{what}: {name} flush after the reopen: {e}"))?;
    }
    reopened
        .close()
        .map_err(|e| format!("{what}: close after the reopen: {e}"))
}

fn check_durable(
    disk: &MemStorage,
    config: &StoreConfig,
    told: &BTreeMap<String, Told>,
    what: &str,
) {
    durable_holds(disk, config, told, what).unwrap_or_else(|e| panic!("{e}"));
}

/// What a held thread tells the test.
enum Event {
    /// The storage operation it holds after (kind and name).
    Held(String),
    /// Its call ended with this answer.
    Done(Result<(), Error>),
}

/// A [`Hook`] that holds the thread making the `at`-th storage operation that changes the
/// directory or a file (a creation, link, removal, write, sync...) counted from
/// [`Pause::arm`], once the operation ran, until the test lets it go: the test runs another
/// thread's work at exactly that step. Lookups and reads are not held: the store's ownership
/// check makes them under the store's lock, which every topic's check takes.
#[derive(Default)]
struct Pause {
    seen: AtomicU64,
    at: AtomicU64,
    parked: Mutex<Option<(mpsc::Sender<Event>, mpsc::Receiver<()>)>>,
}

impl Pause {
    fn arm(&self, at: u64, tell: mpsc::Sender<Event>, resume: mpsc::Receiver<()>) {
        *self.parked.lock().unwrap() = Some((tell, resume));
        self.seen.store(0, Ordering::SeqCst);
        self.at.store(at, Ordering::SeqCst);
    }

    /// Holds nothing from now on.
    fn disarm(&self) {
        self.at.store(0, Ordering::SeqCst);
        *self.parked.lock().unwrap() = None;
    }
}

impl Hook for Pause {
    fn after(&self, op: Op<'_>) {
        if matches!(
            op,
            Op::List(_) | Op::Exists(_) | Op::Open(_) | Op::Size(_) | Op::Read(_) | Op::Map(_)
        ) {
            return;
        }
        let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        if n != self.at.load(Ordering::SeqCst) {
            return;
        }
        let parked = self.parked.lock().unwrap().take();
        if let Some((tell, resume)) = parked {
            let held = Event::Held(format!("{} {}", op.kind(), op.name()));
            if tell.send(held).is_ok() {
                resume.recv().unwrap();
            }
        }
    }
}

/// One topic of a store rolls to a new ledger (one append past a full ledger, then a sync)
/// while, at one storage operation of that roll after another, another topic's roll fails its
/// directory sync: the names the roll created and linked up to then (the new ledger's file,
/// the topic record's version naming it) are taken back with the failed sync, though the
/// roll's own directory sync comes after and succeeds. The owner is alone: nothing answers
/// `Fenced`, and the entries a sync answered `Ok` for are on the disk.
#[test]
fn another_topics_failed_directory_sync_at_every_step_of_a_roll_keeps_every_synced_entry() {
    let mut held_at = 0;
    let mut failures = Vec::new();
    let mut k = 1;
    loop {
        let disk = MemStorage::new();
        let hooked = Hooked::new(disk.clone());
        let pause = Arc::new(Pause::default());
        let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(hooked.clone()), pause.clone()));
        let config = store(PER_LEDGER, SEGMENT_BYTES);
        let owner = Store::open_with_storage(storage, config.clone()).expect("open");
        let (a, b) = (owner.topic("a").expect("a"), owner.topic("b").expect("b"));
        let (ca, cb) = (
            a.open_cursor("c", earliest()).expect("cursor"),
            b.open_cursor("c", earliest()).expect("cursor"),
        );
        let mut told: BTreeMap<String, Told> = BTreeMap::new();
        let mut ta = Told::default();
        let mut tb = Told::default();
        // Both current ledgers full: the next append of either rolls.
        ta.append_and_sync(&a, PER_LEDGER as usize, "a").expect("a");
        tb.append_and_sync(&b, PER_LEDGER as usize, "b").expect("b");
        ta.ack_some(&ca, 1)
            .and_then(|()| ta.flush(&ca))
            .expect("flush");
        let (tell, events) = mpsc::channel();
        let (resume, resumed) = mpsc::channel();
        pause.arm(k, tell.clone(), resumed);
        let mut outcomes = Outcomes::new();
        let mut step = None;
        std::thread::scope(|s| {
            let ta = &mut ta;
            let a = &a;
            s.spawn(move || {
                let answer = ta.append_and_sync(a, 1, "roll");
                tell.send(Event::Done(answer)).unwrap();
            });
            let answer = match events.recv().unwrap() {
                Event::Held(op) => {
                    hooked.arm(Fault::Dir(1));
                    let failed = tb.append_and_sync(&b, 1, "failing");
                    assert!(
                        hooked.fired(Fault::Dir(1)),
                        "b's roll made no directory sync"
                    );
                    outcomes.push(("b's roll with the failed directory sync".into(), failed));
                    step = Some(op);
                    resume.send(()).unwrap();
                    match events.recv().unwrap() {
                        Event::Done(answer) => answer,
                        Event::Held(_) => unreachable!("held once"),
                    }
                }
                Event::Done(answer) => answer,
            };
            outcomes.push(("a's roll".into(), answer));
        });
        pause.disarm();
        let Some(step) = step else {
            break;
        };
        held_at += 1;
        let what = format!("b's directory sync failed after change {k} of a's roll ({step})");
        for round in 0..2 {
            for (name, topic, cursor, t) in [("a", &a, &ca, &mut ta), ("b", &b, &cb, &mut tb)] {
                let synced = t.append_and_sync(topic, PER_LEDGER as usize, &format!("r{round}"));
                outcomes.push((format!("{name} append and sync {round}"), synced));
                let flushed = t.ack_some(cursor, 2).and_then(|()| t.flush(cursor));
                outcomes.push((format!("{name} ack and flush {round}"), flushed));
            }
        }
        outcomes.push((
            "creation of a topic".into(),
            owner.topic("created").map(drop),
        ));
        let answered = never_fenced(&outcomes, &what);
        drop((ca, cb, a, b));
        let _ = owner.close();
        told.insert("a".into(), ta);
        told.insert("b".into(), tb);
        let kept = durable_holds(&disk, &config, &told, &what);
        failures.extend(answered.err());
        failures.extend(kept.err());
        k += 1;
    }
    assert!(held_at > 5, "the roll made {held_at} changes");
    assert!(
        failures.is_empty(),
        "{} of {held_at} steps failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A store of several topics on which threads append and roll (small ledgers), ack, flush,
/// trim, create topics and cursors and flush the store at once, while one directory sync, the
/// `n`-th from the start, fails, for several `n`: no call answers `Fenced` (the owner is
/// alone), each answers `Ok`, `PreviousIo` or the injected error, and a reopen of what the
/// disk holds keeps every entry a sync and every ack a flush answered `Ok` for, invents no
/// ack, and `verify` finds no damage. The interleaving varies with the scheduler; what is
/// asserted holds for every interleaving.
#[test]
fn threads_at_once_around_one_failed_directory_sync_are_never_fenced_and_keep_every_ok() {
    const WORKERS: usize = 4;
    const ROUNDS: usize = 16;
    let seed = support::workload::seed_from_env("ACKSTORE_SEED");
    for n in 1..=40u64 {
        let disk = MemStorage::new();
        let hooked = Hooked::new(disk.clone());
        let storage: Arc<dyn Storage> = Arc::new(hooked.clone());
        let config = store(PER_LEDGER, SEGMENT_BYTES);
        let owner = Store::open_with_storage(storage, config.clone()).expect("open");
        let topics: Vec<Arc<ManagedLedger>> = (0..WORKERS)
            .map(|w| owner.topic(&format!("w{w}")).expect("topic"))
            .collect();
        hooked.arm(Fault::Dir(n));
        let what = format!("directory sync {n} failed (seed {seed})");
        let results: Vec<(BTreeMap<String, Told>, Outcomes)> = std::thread::scope(|s| {
            let mut handles = Vec::new();
            for (w, topic) in topics.iter().enumerate() {
                let owner = &owner;
                handles.push(s.spawn(move || {
                    let mut rng = Rng::new(seed ^ (n << 8) ^ w as u64);
                    let name = format!("w{w}");
                    let mut t = Told::default();
                    let mut outcomes = Outcomes::new();
                    let cursor = match topic.open_cursor("c", earliest()) {
                        Ok(c) => c,
                        Err(e) => {
                            outcomes.push((format!("{name} open c"), Err(e)));
                            return (BTreeMap::from([(name, t)]), outcomes);
                        }
                    };
                    for round in 0..ROUNDS {
                        let k = 1 + rng.index(PER_LEDGER as usize + 2);
                        let r = t.append_and_sync(topic, k, &format!("{name}-{round}"));
                        outcomes.push((format!("{name} append and sync {round}"), r));
                        let r = t.ack_some(&cursor, 1 + rng.index(3));
                        outcomes.push((format!("{name} ack {round}"), r));
                        match rng.below(4) {
                            0 => {
                                let r = t.flush(&cursor);
                                outcomes.push((format!("{name} flush {round}"), r));
                            }
                            1 => {
                                let r = t.trim(topic);
                                outcomes.push((format!("{name} trim {round}"), r));
                            }
                            2 => {
                                let r = topic
                                    .open_cursor(&format!("x{round}"), earliest())
                                    .map(drop);
                                outcomes.push((format!("{name} new cursor {round}"), r));
                            }
                            _ => {
                                let r = owner.flush_all().map(drop);
                                outcomes.push((format!("{name} flush_all {round}"), r));
                            }
                        }
                    }
                    let r = t.flush(&cursor);
                    outcomes.push((format!("{name} last flush"), r));
                    (BTreeMap::from([(name, t)]), outcomes)
                }));
            }
            let owner = &owner;
            handles.push(s.spawn(move || {
                let mut told = BTreeMap::new();
                let mut outcomes = Outcomes::new();
                for i in 0..4 {
                    let name = format!("n{i}");
                    let mut t = Told::default();
                    let created = owner.topic(&name).and_then(|topic| {
                        let cursor = topic.open_cursor("c", earliest())?;
                        t.append_and_sync(&topic, 2, &name)?;
                        t.ack_some(&cursor, 1)?;
                        t.flush(&cursor)
                    });
                    outcomes.push((format!("creation of {name}"), created));
                    told.insert(name, t);
                }
                (told, outcomes)
            }));
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let fired = hooked.fired(Fault::Dir(n));
        let mut told = BTreeMap::new();
        for (t, outcomes) in results {
            assert_never_fenced(&outcomes, &what);
            told.extend(t);
        }
        drop(topics);
        let _ = owner.close();
        check_durable(&disk, &config, &told, &what);
        if !fired {
            break;
        }
    }
}

/// Opens a store on `storage` with topics `a` and `b` (an entry synced and a flushed ack each)
/// written by a first owner that closed, and reopens it: the owner returned holds claims (the
/// catalog's, by a link) that no directory sync covered yet.
fn reopened_store(
    storage: &Arc<dyn Storage>,
    config: &StoreConfig,
) -> (Store, BTreeMap<String, Told>) {
    let mut told = BTreeMap::new();
    {
        let first = Store::open_with_storage(storage.clone(), config.clone()).expect("open");
        for name in ["a", "b"] {
            let topic = first.topic(name).expect("topic");
            let cursor = topic.open_cursor("c", earliest()).expect("cursor");
            let mut t = Told::default();
            t.append_and_sync(&topic, PER_LEDGER as usize + 1, name)
                .expect("append");
            t.ack_some(&cursor, 1)
                .and_then(|()| t.flush(&cursor))
                .expect("flush");
            told.insert(name.to_string(), t);
        }
        first.close().expect("close");
    }
    let owner = Store::open_with_storage(storage.clone(), config.clone()).expect("reopen");
    (owner, told)
}

/// After the creation of topic `created` was answered (whatever it answered): every call on
/// every topic and cursor, a cursor's creation, a trim and another topic's creation.
fn later_calls(owner: &Store, told: &mut BTreeMap<String, Told>, outcomes: &mut Outcomes) {
    for name in ["a", "b", "created"] {
        let t = told.entry(name.to_string()).or_default();
        let topic = match owner.topic(name) {
            Ok(topic) => topic,
            Err(e) => {
                outcomes.push((format!("open of {name}"), Err(e)));
                continue;
            }
        };
        let cursor = match topic.open_cursor("c", earliest()) {
            Ok(c) => c,
            Err(e) => {
                outcomes.push((format!("cursor c of {name}"), Err(e)));
                continue;
            }
        };
        let r = t.append_and_sync(&topic, PER_LEDGER as usize + 1, "later");
        outcomes.push((format!("{name} append and sync"), r));
        let r = t.ack_some(&cursor, 2).and_then(|()| t.flush(&cursor));
        outcomes.push((format!("{name} ack and flush"), r));
        let r = topic.open_cursor("other", earliest()).map(drop);
        outcomes.push((format!("{name} new cursor"), r));
        let r = t.trim(&topic);
        outcomes.push((format!("{name} trim"), r));
    }
    let r = owner.topic("created-after").map(drop);
    outcomes.push(("creation of another topic".into(), r));
    let r = owner.flush_all().map(drop);
    outcomes.push(("flush_all".into(), r));
}

/// A failed directory sync at every directory sync of a topic's creation (the catalog's
/// write, the topic's first files), on a store just created (its claim made durable by its
/// creation) and on a store reopened (its catalog claim a link no sync covered yet): no later
/// call answers `Fenced`, and a reopen keeps every `Ok`.
#[test]
fn a_failed_directory_sync_at_every_step_of_a_topic_creation_fences_no_later_call() {
    for reopened in [false, true] {
        let mut fired = 0;
        let mut n = 1;
        loop {
            let disk = MemStorage::new();
            let hooked = Hooked::new(disk.clone());
            let storage: Arc<dyn Storage> = Arc::new(hooked.clone());
            let config = store(PER_LEDGER, SEGMENT_BYTES);
            let (owner, mut told) = if reopened {
                reopened_store(&storage, &config)
            } else {
                (
                    Store::open_with_storage(storage.clone(), config.clone()).expect("open"),
                    BTreeMap::new(),
                )
            };
            hooked.arm(Fault::Dir(n));
            let created = owner.topic("created").map(drop);
            if !hooked.fired(Fault::Dir(n)) {
                created.expect("the creation without a fault");
                break;
            }
            fired += 1;
            let what = format!(
                "directory sync {n} of a topic's creation failed ({} store)",
                if reopened { "reopened" } else { "new" }
            );
            let mut outcomes = vec![("the creation".to_string(), created)];
            later_calls(&owner, &mut told, &mut outcomes);
            assert_never_fenced(&outcomes, &what);
            let _ = owner.close();
            check_durable(&disk, &config, &told, &what);
            n += 1;
        }
        assert!(fired > 0, "no directory sync of the creation failed");
    }
}

/// A failed directory sync at every directory sync of a roll of a reopened store's topic, then
/// a power cut after every storage operation of the calls that follow (every topic and
/// cursor): what the disk holds opens, `verify` finds no damage, and every `Ok` given before
/// the cut is kept.
#[test]
fn a_failed_directory_sync_then_a_power_cut_at_every_later_step_keeps_every_ok() {
    let mut cuts = 0;
    let mut n = 1;
    loop {
        let run = |cut: Option<u64>| {
            let disk = MemStorage::new();
            let hooked = Hooked::new(disk.clone());
            let storage: Arc<dyn Storage> = Arc::new(hooked.clone());
            let config = store(PER_LEDGER, SEGMENT_BYTES);
            let (owner, mut told) = reopened_store(&storage, &config);
            let a = owner.topic("a").expect("a");
            hooked.arm(Fault::Dir(n));
            let t = told.get_mut("a").expect("a");
            let rolled = t.append_and_sync(&a, PER_LEDGER as usize, "roll");
            if !hooked.fired(Fault::Dir(n)) {
                rolled.expect("the roll without a fault");
                return None;
            }
            drop(a);
            let armed = disk.mutations();
            disk.fail_after(cut);
            let mut outcomes = vec![("the roll".to_string(), rolled)];
            later_calls(&owner, &mut told, &mut outcomes);
            let made = disk.mutations() - armed;
            if cut.is_none() {
                assert_never_fenced(&outcomes, &format!("directory sync {n} of a roll failed"));
            }
            let _ = owner.close();
            Some((disk, config, told, made))
        };
        let Some((disk, config, told, total)) = run(None) else {
            break;
        };
        check_durable(&disk, &config, &told, &format!("directory sync {n} failed"));
        for cut in 0..total {
            let (disk, config, told, _) = run(Some(cut)).expect("the same run");
            let what = format!("directory sync {n} of a roll failed, power cut after {cut}");
            check_durable(&disk, &config, &told, &what);
            cuts += 1;
        }
        n += 1;
    }
    assert!(cuts > 20, "{cuts} power cuts");
}

/// The owner of a reopened store (its claims links no sync covered yet) fails a directory
/// sync in a roll of topic `a`, which takes its claims back; while it still runs, a new owner
/// opens the store (the lock broken, as `support::takeover` does) and writes topic `b`. Every
/// later call of the former owner answers `Fenced` or `PreviousIo`, never `Ok`: the new
/// owner's claims are links of the versions the former owner's claims had taken before the
/// directory forgot them, which must not pass for the former owner's own. The new owner's
/// writes survive, and nothing of the former owner's is in the new owner's store.
#[test]
fn a_former_owner_whose_claim_a_failed_directory_sync_took_back_never_passes_for_the_new_one() {
    let disk = MemStorage::new();
    let hooked = Hooked::new(disk.clone());
    let storage: Arc<dyn Storage> = Arc::new(hooked.clone());
    let config = store(PER_LEDGER, SEGMENT_BYTES);
    let (former, mut told) = reopened_store(&storage, &config);
    let (fa, fb) = (former.topic("a").expect("a"), former.topic("b").expect("b"));
    let fcb = fb.open_cursor("c", earliest()).expect("cursor");
    hooked.arm(Fault::Dir(1));
    let mut former_told = told.clone();
    let failed =
        former_told
            .get_mut("a")
            .expect("a")
            .append_and_sync(&fa, PER_LEDGER as usize, "former");
    assert!(
        hooked.fired(Fault::Dir(1)),
        "the roll made no directory sync"
    );
    assert!(
        matches!(failed, Err(Error::Io { .. } | Error::PreviousIo)),
        "the roll answered {failed:?}"
    );
    // The new owner, while the former one runs.
    disk.break_lock();
    let new = Store::open_with_storage(storage.clone(), config.clone()).expect("new owner");
    let nb = new.topic("b").expect("b");
    let ncb = nb.open_cursor("c", earliest()).expect("cursor");
    // The former owner goes on with topic b, its cursor and the catalog, before the new owner
    // wrote anything past its claims.
    let fbt = former_told.get_mut("b").expect("b");
    // In order: a vector's items are evaluated first to last.
    let outcomes: Outcomes = vec![
        (
            "former owner's append and sync of b".into(),
            fbt.append_and_sync(&fb, 1, "former"),
        ),
        (
            "former owner's roll of b".into(),
            fbt.append_and_sync(&fb, PER_LEDGER as usize, "former-roll"),
        ),
        (
            "former owner's ack and flush of b's cursor".into(),
            fbt.ack_some(&fcb, 2).and_then(|()| fbt.flush(&fcb)),
        ),
        (
            "former owner's creation of a topic".into(),
            former.topic("former-made").map(drop),
        ),
        (
            "former owner's flush_all".into(),
            former.flush_all().map(drop),
        ),
    ];
    let mut wrong = Vec::new();
    for (call, outcome) in &outcomes {
        if !matches!(outcome, Err(Error::Fenced { .. } | Error::PreviousIo)) {
            wrong.push(format!(
                "{call} answered {outcome:?} after a new owner claimed the store"
            ));
        }
    }
    // The new owner writes, unharmed.
    let t = told.get_mut("b").expect("b");
    for round in 0..2 {
        let written = t
            .append_and_sync(&nb, PER_LEDGER as usize, &format!("new-{round}"))
            .and_then(|()| t.ack_some(&ncb, 2))
            .and_then(|()| t.flush(&ncb));
        if let Err(e) = written {
            wrong.push(format!("the new owner's writes {round} answered {e:?}"));
        }
    }
    drop((fa, fb, fcb));
    drop((nb, ncb));
    if let Err(e) = new.close() {
        wrong.push(format!("the new owner's close answered {e:?}"));
    }
    match Store::open_with_storage(Arc::new(disk.durable_image()), config.clone()) {
        Ok(image) => {
            let names = image.topic_names();
            if names.iter().any(|n| n == "former-made") {
                wrong.push(format!(
                    "the former owner's topic is in the store: {names:?}"
                ));
            }
            drop(image);
            let what = "a new owner after a failed directory sync";
            wrong.extend(durable_holds(&disk, &config, &told, what).err());
        }
        Err(e) => wrong.push(format!("the new owner's store does not open: {e}")),
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

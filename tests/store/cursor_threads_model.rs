//! Threads share every cursor of one store's topic: individual acks (many answered from the
//! ledger a cursor learnt), groups with duplicates, positions behind mark-delete and positions
//! that are no entry, cumulative acks, batch-index acks, skips, seeks, rewinds, flushes, and
//! deletions of a cursor followed by its creation again under the same name; meanwhile an
//! appender rolls small data ledgers over, a trimmer deletes the ledgers mark-delete passed,
//! `flush_all` and the flusher pool tick, the topic is unloaded and opened again, and every
//! cursor shares a tiny ack budget (evictions and loads all the time). Every call's answer is
//! checked against a model of its cursor, no trim deletes an entry a cursor has not
//! acknowledged, each cursor ends as its model, and power cuts taken while the threads run
//! recover no ack the model did not hold and every ack a flush that returned `Ok` covered.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use ackstore::{
    Cursor, CursorOptions, Error, ManagedLedger, MemStorage, PersistMode, Position, Store,
    StoreConfig,
};
use support::workload::{EntryModel, Rng};

const TOPIC: &str = "persistent://t/ns/cursor-threads";
const PER_LEDGER: u64 = 6;
const CURSORS: usize = 5;
const WORKERS: usize = 4;
const OPS: usize = 1500;
const MAX_ENTRIES: usize = 900;
const BATCH: u32 = 3;
const CUTS: usize = 4;

fn config(mode: PersistMode) -> StoreConfig {
    let mut config =
        support::config::store_flushed(PER_LEDGER, 1 << 20, 4096, Duration::from_millis(1), 2);
    config.ack_memory_bytes = Some(1 << 10);
    config.ledger.cursor.persist_mode = mode;
    config
}

/// One cursor's handle and what the calls that returned made of it.
struct Slot {
    cursor: Option<Cursor>,
    truth: EntryModel,
    /// Messages acknowledged of entries not acknowledged whole.
    partial: BTreeMap<usize, BTreeSet<u32>>,
    /// Acks a flush that returned `Ok` covered (a lower bound of what a power cut keeps).
    flushed: EntryModel,
    /// Raised by every call that may take acks away (a seek, a deletion).
    generation: u64,
    /// Deleted, not created again yet (its creation met the topic's unload).
    deleted: bool,
}

/// Positions appended and synced so far, in order.
#[derive(Default)]
struct Appended(RwLock<Vec<Position>>);

impl Appended {
    fn snapshot(&self) -> Vec<Position> {
        self.0.read().unwrap().clone()
    }
}

/// `a` and `b` together (both acknowledged-sets of one generation of a cursor).
fn union(a: &EntryModel, b: &EntryModel) -> EntryModel {
    let mut out = EntryModel {
        mark: a.mark.max(b.mark),
        acked: BTreeSet::new(),
    };
    for &i in a.acked.iter().chain(&b.acked) {
        if !out.contains(i) {
            out.acked.insert(i);
        }
    }
    out.absorb();
    out
}

fn retained(topic: &ManagedLedger) -> BTreeSet<u64> {
    topic.ledgers().iter().map(|s| s.id).collect()
}

/// The model of a cursor created now at `Earliest`: every entry before the first retained one.
fn initial(topic: &ManagedLedger, ps: &[Position]) -> EntryModel {
    let ids = retained(topic);
    let first = ps.iter().position(|p| ids.contains(&p.ledger_id));
    EntryModel {
        mark: match first {
            Some(0) => None,
            Some(i) => Some(i - 1),
            None => ps.len().checked_sub(1),
        },
        acked: BTreeSet::new(),
    }
}

/// A durable image and, for each cursor, what it had acknowledged and what a flush had covered.
type Cut = (MemStorage, Vec<(EntryModel, EntryModel)>);

struct World {
    store: Store,
    appended: Appended,
    /// Held for writing while the topic is unloaded, so no append is cut by the close.
    unloading: RwLock<()>,
    slots: Vec<Mutex<Slot>>,
    problems: Mutex<Vec<String>>,
    done: AtomicBool,
    /// Durable images taken with every slot locked, with each cursor's model then.
    cuts: Mutex<Vec<Cut>>,
}

impl World {
    fn problem(&self, p: String) {
        self.problems.lock().unwrap().push(p);
    }

    fn topic(&self) -> Arc<ManagedLedger> {
        loop {
            match self.store.topic(TOPIC) {
                Ok(t) => return t,
                Err(Error::Closed) => {}
                Err(e) => panic!("topic: {e:?}"),
            }
        }
    }
}

/// Whether `e` is the refusal of position `q` that the model allows: `q` is no entry (`bad`).
/// An entry a trim deleted is never refused as missing: it lies behind mark-delete, whatever
/// the cursor's (one created after the trim has `None`, just before the first retained entry).
fn allowed_refusal(e: &Error, bad: &BTreeSet<Position>) -> bool {
    matches!(e, Error::NoSuchEntry(q) if bad.contains(q))
}

fn worker(w: &World, seed: u64) {
    let mut rng = Rng::new(seed);
    for round in 0..OPS {
        let c = rng.index(CURSORS);
        let mut s = w.slots[c].lock().unwrap();
        // Taken under the slot's lock: it holds every entry the model names.
        let ps = w.appended.snapshot();
        let topic = w.topic();
        let cursor = match s.cursor.clone() {
            Some(cursor) => cursor,
            None => match topic.open_cursor(&format!("c{c}"), CursorOptions::default()) {
                Ok(cursor) => {
                    if s.deleted {
                        // Created only now: every ledger trimmed meanwhile is behind it.
                        s.truth = initial(&topic, &ps);
                        s.deleted = false;
                    }
                    s.cursor = Some(cursor.clone());
                    cursor
                }
                Err(Error::Closed) => continue,
                Err(e) => panic!("open c{c}: {e:?}"),
            },
        };
        let floor = s.truth.floor();
        // Mostly near mark-delete, where mark-delete moves and holes fill.
        let pick = |rng: &mut Rng| -> usize {
            if floor < ps.len() && rng.chance(70) {
                (floor + rng.index(12)).min(ps.len() - 1)
            } else {
                rng.index(ps.len())
            }
        };
        let what = format!("c{c} round {round}");
        let op = rng.below(100);
        let outcome: Result<(), Error> = (|| {
            match op {
                0..=39 => {
                    let i = pick(&mut rng);
                    let got = cursor.ack(ps[i]);
                    match got {
                        Ok(changed) => {
                            let want = s.truth.ack(i);
                            if want {
                                s.partial.remove(&i);
                            }
                            if changed != want {
                                w.problem(format!(
                                    "{what}: ack {} answered {changed}, model {want}",
                                    ps[i]
                                ));
                            }
                        }
                        Err(e) if allowed_refusal(&e, &BTreeSet::new()) => {}
                        Err(e) => return Err(e),
                    }
                }
                40..=54 => {
                    let mut group: Vec<Position> = Vec::new();
                    let mut bad = BTreeSet::new();
                    for _ in 0..1 + rng.index(8) {
                        let i = pick(&mut rng);
                        group.push(ps[i]);
                        if rng.chance(30) {
                            group.push(ps[i]);
                        }
                        if rng.chance(15) && floor > 0 {
                            group.push(ps[rng.index(floor)]);
                        }
                    }
                    if rng.chance(10) {
                        let last = ps[ps.len() - 1];
                        let q = Position::new(last.ledger_id, last.entry_id + 1000);
                        bad.insert(q);
                        let at = rng.index(group.len() + 1);
                        group.insert(at, q);
                    }
                    match cursor.ack_many(&group) {
                        Ok(n) => {
                            if !bad.is_empty() {
                                w.problem(format!(
                                    "{what}: ack_many with {bad:?} answered Ok({n})"
                                ));
                            }
                            let idx: Vec<usize> =
                                group.iter().map(|p| ps.binary_search(p).unwrap()).collect();
                            let dedup: BTreeSet<usize> = idx.iter().copied().collect();
                            let want = s.truth.ack_many(&dedup.into_iter().collect::<Vec<_>>());
                            for i in &idx {
                                if s.truth.contains(*i) {
                                    s.partial.remove(i);
                                }
                            }
                            if n != want {
                                w.problem(format!(
                                    "{what}: ack_many {group:?} answered {n}, model {want}"
                                ));
                            }
                        }
                        Err(e) if allowed_refusal(&e, &bad) => {}
                        Err(e) => return Err(e),
                    }
                }
                55..=61 => {
                    let i = pick(&mut rng);
                    let got = cursor.ack_cumulative(ps[i]);
                    let behind = s.truth.mark.is_some_and(|m| i < m);
                    match got {
                        Ok(changed) => {
                            if behind {
                                w.problem(format!(
                                    "{what}: ack_cumulative {} behind mark answered Ok",
                                    ps[i]
                                ));
                            }
                            let want = s.truth.ack_cumulative(i);
                            let m = s.truth.mark;
                            s.partial.retain(|k, _| m.is_none_or(|m| *k > m));
                            if changed != want {
                                w.problem(format!(
                                    "{what}: ack_cumulative {} answered {changed}, model {want}",
                                    ps[i]
                                ));
                            }
                        }
                        Err(Error::InvalidArgument { .. }) if behind => {}
                        // An entry a trim deleted is behind mark-delete.
                        Err(Error::InvalidArgument { .. })
                            if !retained(&topic).contains(&ps[i].ledger_id) => {}
                        Err(e) => return Err(e),
                    }
                }
                62..=71 => {
                    let i = pick(&mut rng);
                    let k = u32::try_from(rng.below(u64::from(BATCH))).unwrap();
                    match cursor.ack_batch_index(ps[i], k, BATCH) {
                        Ok(changed) => {
                            let want = if s.truth.contains(i) {
                                false
                            } else {
                                let set = s.partial.entry(i).or_default();
                                let new = set.insert(k);
                                if set.len() == BATCH as usize {
                                    s.partial.remove(&i);
                                    s.truth.ack(i);
                                }
                                new
                            };
                            if changed != want {
                                w.problem(format!("{what}: ack_batch_index {} {k} answered {changed}, model {want}", ps[i]));
                            }
                        }
                        Err(e) if allowed_refusal(&e, &BTreeSet::new()) => {}
                        Err(e) => return Err(e),
                    }
                }
                72..=77 => {
                    let unacked = (floor..ps.len()).filter(|&i| !s.truth.contains(i)).count();
                    if unacked > 0 {
                        let n = 1 + rng.below(unacked.min(20) as u64);
                        let skipped = cursor.skip_entries(n)?;
                        let mut left = n;
                        let mut i = floor;
                        while left > 0 {
                            if !s.truth.contains(i) {
                                left -= 1;
                            }
                            i += 1;
                        }
                        s.truth.ack_cumulative(i - 1);
                        let m = s.truth.mark;
                        s.partial.retain(|k, _| m.is_none_or(|m| *k > m));
                        if skipped != n {
                            w.problem(format!("{what}: skip_entries {n} skipped {skipped}"));
                        }
                    }
                }
                78..=81 => {
                    let i = pick(&mut rng).saturating_sub(rng.index(10));
                    cursor.seek(ps[i])?;
                    // A target a trim deleted reads the first retained entry next.
                    let first = initial(&topic, &ps).floor();
                    let i = i.max(first);
                    s.generation += 1;
                    s.truth = EntryModel {
                        mark: i.checked_sub(1),
                        acked: BTreeSet::new(),
                    };
                    s.partial.clear();
                    s.flushed = s.truth.clone();
                }
                82..=84 => {
                    cursor.rewind()?;
                    s.flushed = s.truth.clone();
                }
                85..=94 => {
                    cursor.flush()?;
                    s.flushed = s.truth.clone();
                }
                _ => {
                    drop(cursor);
                    s.cursor = None;
                    topic.delete_cursor(&format!("c{c}"))?;
                    s.generation += 1;
                    s.deleted = true;
                    s.truth = EntryModel::default();
                    s.partial.clear();
                    s.flushed = EntryModel::default();
                    let cursor = topic.open_cursor(&format!("c{c}"), CursorOptions::default())?;
                    s.truth = initial(&topic, &ps);
                    s.deleted = false;
                    s.cursor = Some(cursor);
                }
            }
            Ok(())
        })();
        match outcome {
            Ok(()) => {}
            Err(Error::Closed) => s.cursor = None,
            Err(e) => {
                let ps = w.appended.snapshot();
                let topic = w.topic();
                let detail = match &e {
                    Error::NoSuchEntry(q) => format!(
                        "retained {} model acked {:?} mark {:?} first {:?} cursor mark {:?}",
                        retained(&topic).contains(&q.ledger_id),
                        ps.binary_search(q).map(|i| s.truth.contains(i)),
                        s.truth.mark.map(|m| ps[m]),
                        topic.first_position(),
                        s.cursor.as_ref().map(|c| c.mark_delete_position()),
                    ),
                    _ => String::new(),
                };
                w.problem(format!("{what}: op {op}: {e:?} {detail}"));
            }
        }
    }
}

fn appender(w: &World) {
    let mut n = 0u64;
    while !w.done.load(Ordering::SeqCst) && w.appended.0.read().unwrap().len() < MAX_ENTRIES {
        let _unloading = w.unloading.read().unwrap();
        let topic = w.topic();
        let mut batch = Vec::new();
        for _ in 0..4 {
            match topic.append(format!("e{n}").as_bytes()) {
                Ok(p) => batch.push(p),
                Err(e) => panic!("append: {e:?}"),
            }
            n += 1;
        }
        topic.sync().expect("sync");
        w.appended.0.write().unwrap().extend(batch);
    }
}

fn trimmer(w: &World) {
    while !w.done.load(Ordering::SeqCst) {
        let generations: Vec<u64> = w
            .slots
            .iter()
            .map(|s| s.lock().unwrap().generation)
            .collect();
        let topic = w.topic();
        let deleted = match topic.trim_consumed() {
            Ok(d) => d,
            Err(Error::Closed) => continue,
            Err(e) => panic!("trim: {e:?}"),
        };
        if deleted.is_empty() {
            continue;
        }
        let ps = w.appended.snapshot();
        for (c, slot) in w.slots.iter().enumerate() {
            let s = slot.lock().unwrap();
            if s.generation != generations[c] || s.deleted {
                continue;
            }
            for (i, p) in ps.iter().enumerate() {
                if deleted.contains(&p.ledger_id) && !s.truth.contains(i) {
                    w.problem(format!(
                        "trim deleted ledger {} holding {p}, not acked by c{c}",
                        p.ledger_id
                    ));
                }
            }
        }
    }
}

fn flusher(w: &World) {
    while !w.done.load(Ordering::SeqCst) {
        let before: Vec<(u64, EntryModel)> = w
            .slots
            .iter()
            .map(|s| {
                let s = s.lock().unwrap();
                (s.generation, s.truth.clone())
            })
            .collect();
        match w.store.flush_all() {
            Ok(_) => {
                for (slot, (generation, truth)) in w.slots.iter().zip(before) {
                    let mut s = slot.lock().unwrap();
                    if s.generation == generation {
                        s.flushed = union(&s.flushed, &truth);
                    }
                }
            }
            Err(Error::Closed) => {}
            Err(e) => w.problem(format!("flush_all: {e:?}")),
        }
    }
}

fn unloader(w: &World, disk: &MemStorage) {
    let mut rng = Rng::new(7);
    let mut cuts = 0;
    while !w.done.load(Ordering::SeqCst) {
        if rng.chance(50) && cuts < CUTS {
            let slots: Vec<_> = w.slots.iter().map(|s| s.lock().unwrap()).collect();
            let image = disk.durable_image();
            let models = slots
                .iter()
                .map(|s| (s.truth.clone(), s.flushed.clone()))
                .collect();
            drop(slots);
            w.cuts.lock().unwrap().push((image, models));
            cuts += 1;
        } else {
            let _unloading = w.unloading.write().unwrap();
            if let Err(e) = w.topic().close() {
                w.problem(format!("topic close: {e:?}"));
            }
        }
        // Let the others work between two unloads: wait for the appender's next batch.
        let seen = w.appended.0.read().unwrap().len();
        while !w.done.load(Ordering::SeqCst)
            && w.appended.0.read().unwrap().len() == seen
            && seen < MAX_ENTRIES
        {
            std::thread::yield_now();
        }
    }
}

/// Every retained entry of `ps` acknowledged by `cursor` as `truth` says, its mark-delete
/// leaving the same first entry unacknowledged, and its backlog the rest.
fn check_cursor(
    topic: &ManagedLedger,
    cursor: &Cursor,
    truth: &EntryModel,
    partial: Option<&BTreeMap<usize, BTreeSet<u32>>>,
    ps: &[Position],
    what: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    let ids = retained(topic);
    let mut backlog = 0;
    for (i, p) in ps.iter().enumerate() {
        if !ids.contains(&p.ledger_id) {
            continue;
        }
        let acked = cursor.is_acked(*p).unwrap();
        backlog += u64::from(!truth.contains(i));
        if acked != truth.contains(i) {
            out.push(format!(
                "{what}: {p} acked {acked}, model {}",
                truth.contains(i)
            ));
        }
        if let Some(partial) = partial
            && !truth.contains(i)
        {
            for k in 0..BATCH {
                let want = partial.get(&i).is_some_and(|set| set.contains(&k));
                let got = cursor.is_batch_index_acked(*p, k).unwrap();
                if got != want {
                    out.push(format!("{what}: {p} message {k} acked {got}, model {want}"));
                }
            }
        }
    }
    let first_after = |m: Option<Position>| {
        ps.iter()
            .copied()
            .find(|p| ids.contains(&p.ledger_id) && m.is_none_or(|m| *p > m))
    };
    let mark = cursor.mark_delete_position().unwrap();
    if first_after(mark) != first_after(truth.mark.map(|m| ps[m])) {
        out.push(format!(
            "{what}: mark-delete {mark:?}, model {:?}",
            truth.mark.map(|m| ps[m])
        ));
    }
    if partial.is_some() {
        let got = cursor.backlog().unwrap();
        if got != backlog {
            out.push(format!("{what}: backlog {got}, model {backlog}"));
        }
    }
    out
}

fn run(seed: u64, mode: PersistMode) {
    let disk = MemStorage::new();
    let store = Store::open_with_storage(Arc::new(disk.clone()), config(mode)).expect("open");
    {
        let topic = store.topic(TOPIC).unwrap();
        let ps = support::topic::append_n(&topic, 40);
        let slots = (0..CURSORS)
            .map(|c| {
                let cursor = topic
                    .open_cursor(&format!("c{c}"), CursorOptions::default())
                    .unwrap();
                Mutex::new(Slot {
                    cursor: Some(cursor),
                    truth: EntryModel::default(),
                    partial: BTreeMap::new(),
                    flushed: EntryModel::default(),
                    generation: 0,
                    deleted: false,
                })
            })
            .collect();
        let world = World {
            store,
            appended: Appended(RwLock::new(ps)),
            unloading: RwLock::new(()),
            slots,
            problems: Mutex::default(),
            done: AtomicBool::new(false),
            cuts: Mutex::default(),
        };
        let w = &world;
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..WORKERS)
                .map(|t| scope.spawn(move || worker(w, seed * 100 + t as u64)))
                .collect();
            let others = vec![
                scope.spawn(|| appender(w)),
                scope.spawn(|| trimmer(w)),
                scope.spawn(|| flusher(w)),
                scope.spawn(|| unloader(w, &disk)),
            ];
            let joined: Vec<_> = workers.into_iter().map(|h| h.join()).collect();
            w.done.store(true, Ordering::SeqCst);
            let rest: Vec<_> = others.into_iter().map(|h| h.join()).collect();
            for j in joined.into_iter().chain(rest) {
                if let Err(p) = j {
                    std::panic::resume_unwind(p);
                }
            }
        });
        let mut problems = world.problems.lock().unwrap().clone();
        let ps = world.appended.snapshot();
        let topic = world.topic();
        for (c, slot) in world.slots.iter().enumerate() {
            let s = slot.lock().unwrap();
            let cursor = topic
                .open_cursor(&format!("c{c}"), CursorOptions::default())
                .unwrap();
            problems.extend(check_cursor(
                &topic,
                &cursor,
                &s.truth,
                Some(&s.partial),
                &ps,
                &format!("seed {seed} c{c} live"),
            ));
        }
        let mut cuts = std::mem::take(&mut *world.cuts.lock().unwrap());
        let models = world
            .slots
            .iter()
            .map(|s| {
                let s = s.lock().unwrap();
                (s.truth.clone(), s.flushed.clone())
            })
            .collect();
        cuts.push((disk.durable_image(), models));
        for (n, (image, models)) in cuts.into_iter().enumerate() {
            let again =
                Store::open_with_storage(Arc::new(image), config(mode)).expect("reopen image");
            let topic = again.topic(TOPIC).unwrap();
            let ids = retained(&topic);
            for (c, (truth, flushed)) in models.iter().enumerate() {
                let cursor = topic
                    .open_cursor(&format!("c{c}"), CursorOptions::default())
                    .unwrap();
                for (i, p) in ps.iter().enumerate() {
                    if !ids.contains(&p.ledger_id) || topic.read(*p).is_err() {
                        continue;
                    }
                    let acked = cursor.is_acked(*p).unwrap();
                    if acked && !truth.contains(i) {
                        problems.push(format!("seed {seed} cut {n} c{c}: {p} acked, never acked"));
                    }
                    if !acked && flushed.contains(i) {
                        problems.push(format!("seed {seed} cut {n} c{c}: {p} flushed, lost"));
                    }
                }
            }
            again.close().unwrap();
        }
        problems.truncate(20);
        assert!(problems.is_empty(), "{problems:#?}");
        world.store.close().unwrap();
    }
}

#[test]
fn threads_on_every_cursor_of_a_store_with_trims_unloads_and_a_tiny_budget_match_the_model() {
    for seed in 1..=3 {
        run(seed, PersistMode::MultiEntry);
    }
}

/// As above, each cursor persisted as one snapshot record.
#[test]
fn threads_on_every_cursor_of_a_store_in_the_single_entry_form_match_the_model() {
    for seed in 1..=3 {
        run(seed, PersistMode::SingleEntry);
    }
}

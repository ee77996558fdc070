//! Concurrency stress: one topic with a data ledger rolled over every few entries, producer
//! threads appending and syncing, several cursors each driven by two threads (ack, read and
//! ack, cumulative ack, flush, rewind, property, seek, close and reopen) with the background
//! flusher on, a trimmer, and a thread creating and deleting scratch cursors, all at once.
//! Bounded by operation counts, not time.
//!
//! Checked against a model of each cursor (what was acknowledged, what the last `Ok` flush,
//! close or seek committed, and everything ever acknowledged):
//! - with one owner, no call fails (in particular, never `Error::Fenced`);
//! - at every close and reopen, and at the end, the cursor holds exactly the model's acks;
//! - after a power cut at the end (in-memory disk), invariant 1 (nothing acked that was never
//!   acked) and invariant 2 (every ack committed by an `Ok` flush, close or seek is there);
//! - after `close` and a reopen of the topic, every cursor holds exactly the model's acks.
//!
//! The seed is printed on failure; `ACKSTORE_STRESS_SEED=N` repeats its choices (the thread
//! interleaving is the machine's).

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread;
use std::time::Duration;

use ackstore::MemStorage;
use ackstore::{Cursor, CursorOptions, Error, Position};
use ackstore::{ManagedLedger, PersistMode};
use support::workload::{Acked, Rng, actual, before, seed_from_env};

/// How much work one run does.
#[derive(Debug, Clone, Copy)]
struct Size {
    producers: usize,
    appends_per_producer: usize,
    cursors: usize,
    threads_per_cursor: usize,
    ops_per_thread: usize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Every appended position, in the order the appends returned, and how many of them the last
/// `Ok` sync covered.
#[derive(Debug, Default)]
struct Appended {
    positions: Vec<Position>,
    synced: usize,
}

/// One modelled cursor.
#[derive(Debug, Default)]
struct Model {
    /// What the cursor holds now.
    truth: Acked,
    /// What an `Ok` flush, close or seek committed: present after any crash.
    committed: Acked,
    /// Everything ever acknowledged, by an ack, a cumulative ack or a reset: nothing outside it
    /// may ever be recovered.
    ever: Acked,
}

struct Driven {
    name: String,
    /// Shared by ops that may run together; exclusive for a seek and for close and reopen, so
    /// the model knows which acks a reset or a close saw.
    handle: RwLock<Option<Cursor>>,
    model: Mutex<Model>,
}

struct Run<'a> {
    seed: u64,
    topic: &'a ManagedLedger,
    appended: Mutex<Appended>,
    errors: Mutex<Vec<String>>,
    mismatches: Mutex<Vec<String>>,
    producers_left: Mutex<usize>,
    stop: AtomicBool,
    cursors: Vec<Driven>,
}

impl Run<'_> {
    fn error(&self, what: impl Into<String>) {
        lock(&self.errors).push(what.into());
    }

    fn mismatch(&self, what: impl Into<String>) {
        lock(&self.mismatches).push(what.into());
    }

    /// Whether `err` is the documented answer to an ack of `p` in a trimmed ledger: a position
    /// before the first retained entry and after mark-delete is not a retained entry.
    fn trimmed(&self, p: Position, err: &Error) -> bool {
        matches!(err, Error::NoSuchEntry(_)) && self.topic.first_position().is_some_and(|f| p < f)
    }

    fn snapshot(&self) -> Vec<Position> {
        lock(&self.appended).positions.clone()
    }

    /// A random appended position: mostly a recent one, sometimes any.
    fn pick(&self, rng: &mut Rng) -> Option<Position> {
        let a = lock(&self.appended);
        // Only synced entries are readable, so only they can have been delivered and acked.
        let n = a.synced.min(a.positions.len());
        if n == 0 {
            return None;
        }
        let window = if rng.chance(80) { n.min(60) } else { n };
        Some(a.positions[n - 1 - rng.index(window)])
    }

    fn produce(&self, producer: usize, count: usize) {
        for i in 0..count {
            match self.topic.append(format!("p{producer}-{i}").as_bytes()) {
                Ok(p) => lock(&self.appended).positions.push(p),
                Err(e) => self.error(format!("producer {producer}: append: {e}")),
            }
            if i % 16 == 15 {
                let covered = lock(&self.appended).positions.len();
                match self.topic.sync() {
                    Ok(()) => {
                        let mut a = lock(&self.appended);
                        a.synced = a.synced.max(covered);
                    }
                    Err(e) => self.error(format!("producer {producer}: sync: {e}")),
                }
            }
        }
        let mut left = lock(&self.producers_left);
        *left -= 1;
    }

    fn trim(&self) {
        while !self.stop.load(Ordering::Relaxed) {
            if let Err(e) = self.topic.trim_consumed() {
                self.error(format!("trim_consumed: {e}"));
            }
            thread::sleep(Duration::from_millis(1));
        }
    }

    /// Creates a cursor, acks, flushes, deletes it; its handle then fails with `Closed`.
    fn scratch(&self, seed: u64) {
        let mut rng = Rng::new(seed);
        let mut i = 0;
        while !self.stop.load(Ordering::Relaxed) {
            i += 1;
            let name = format!("scratch-{i}");
            let cursor = match self.topic.open_cursor(&name, CursorOptions::default()) {
                Ok(c) => c,
                Err(e) => {
                    self.error(format!("open_cursor {name}: {e}"));
                    continue;
                }
            };
            for _ in 0..rng.below(8) {
                if let Some(p) = self.pick(&mut rng)
                    && let Err(e) = cursor.ack(p)
                    && !self.trimmed(p, &e)
                {
                    self.error(format!("{name}: ack {p}: {e}"));
                }
            }
            if let Err(e) = cursor.flush() {
                self.error(format!("{name}: flush: {e}"));
            }
            if rng.chance(30)
                && let Err(e) = cursor.close()
            {
                self.error(format!("{name}: close: {e}"));
            }
            if let Err(e) = self.topic.delete_cursor(&name) {
                self.error(format!("delete_cursor {name}: {e}"));
            }
            if self.topic.cursor_names().contains(&name) {
                self.mismatch(format!("{name} is still listed after delete_cursor"));
            }
            match cursor.ack(Position {
                ledger_id: 0,
                entry_id: 0,
            }) {
                Err(Error::Closed) => {}
                other => self.mismatch(format!("{name}: ack after delete: {other:?}")),
            }
        }
    }

    /// Compares the cursor with the model over every retained appended position.
    fn check_exact(&self, cursor: &Cursor, truth: &Acked, when: &str) {
        let first = self.topic.first_position();
        for p in self.snapshot() {
            if first.is_none_or(|f| p < f) {
                continue;
            }
            match cursor.is_acked(p) {
                Ok(actual) if actual == truth.contains(p) => {}
                Ok(actual) => {
                    self.mismatch(format!(
                        "{} {when}: {p} acked {actual}, model says {}",
                        cursor.name(),
                        truth.contains(p)
                    ));
                    return;
                }
                Err(e) => {
                    self.error(format!("{} {when}: is_acked {p}: {e}", cursor.name()));
                    return;
                }
            }
        }
    }

    fn drive(&self, c: usize, t: usize, ops: usize) {
        let d = &self.cursors[c];
        let mut rng = Rng::new(self.seed ^ ((c as u64) << 32) ^ (t as u64 + 1));
        for _ in 0..ops {
            let roll = rng.below(100);
            if roll < 84 {
                let guard = d.handle.read().unwrap_or_else(PoisonError::into_inner);
                let Some(cursor) = guard.as_ref() else { return };
                self.shared_op(d, cursor, roll, &mut rng);
            } else {
                let mut guard = d.handle.write().unwrap_or_else(PoisonError::into_inner);
                if guard.is_none() {
                    return;
                }
                if roll < 92 {
                    self.seek(d, guard.as_ref().expect("open"), &mut rng);
                } else {
                    self.close_and_reopen(d, &mut guard);
                }
            }
        }
    }

    /// Operations that run alongside the cursor's other thread and its background flusher.
    fn shared_op(&self, d: &Driven, cursor: &Cursor, roll: u64, rng: &mut Rng) {
        let name = &d.name;
        match roll {
            0..40 => {
                let Some(p) = self.pick(rng) else { return };
                match cursor.ack(p) {
                    Ok(_) => {
                        let mut m = lock(&d.model);
                        m.truth.ack(p);
                        m.ever.ack(p);
                    }
                    Err(e) if self.trimmed(p, &e) => {}
                    Err(e) => self.error(format!("{name}: ack {p}: {e}")),
                }
            }
            40..55 => match cursor.read_entries(6) {
                Ok(entries) => {
                    for e in entries.iter().filter(|_| rng.chance(60)) {
                        match cursor.ack(e.position) {
                            Ok(_) => {
                                let mut m = lock(&d.model);
                                m.truth.ack(e.position);
                                m.ever.ack(e.position);
                            }
                            Err(err) => self.error(format!("{name}: ack {}: {err}", e.position)),
                        }
                    }
                }
                Err(e) => self.error(format!("{name}: read_entries: {e}")),
            },
            55..60 => {
                let Some(p) = self.pick(rng) else { return };
                match cursor.ack_cumulative(p) {
                    Ok(_) => {
                        let mut m = lock(&d.model);
                        m.truth.ack_through(p);
                        m.ever.ack_through(p);
                    }
                    // Behind mark-delete: the other thread acked past it first.
                    Err(Error::InvalidArgument { .. })
                        if cursor
                            .mark_delete_position()
                            .is_ok_and(|m| m.is_some_and(|m| m >= p)) => {}
                    Err(e) if self.trimmed(p, &e) => {}
                    Err(e) => self.error(format!("{name}: ack_cumulative {p}: {e}")),
                }
            }
            60..75 => {
                let before = lock(&d.model).truth.clone();
                match cursor.flush() {
                    Ok(()) => lock(&d.model).committed.extend(&before),
                    Err(e) => self.error(format!("{name}: flush: {e}")),
                }
            }
            75..80 => {
                if let Err(e) = cursor.rewind() {
                    self.error(format!("{name}: rewind: {e}"));
                }
            }
            _ => {
                if let Err(e) = cursor.set_property("round", i64::try_from(roll).unwrap_or(0)) {
                    self.error(format!("{name}: set_property: {e}"));
                }
            }
        }
    }

    fn seek(&self, d: &Driven, cursor: &Cursor, rng: &mut Rng) {
        let Some(p) = self.pick(rng) else { return };
        match cursor.seek(p) {
            Ok(()) => {
                let mut m = lock(&d.model);
                m.truth = Acked::reset(before(p));
                m.committed = m.truth.clone();
                if let Some(b) = before(p) {
                    m.ever.ack_through(b);
                }
            }
            Err(e) => {
                // The reset may or may not have been committed: only the bounds stay known.
                self.error(format!("{}: seek {p}: {e}", d.name));
                let mut m = lock(&d.model);
                m.committed = Acked::default();
                if let Some(b) = before(p) {
                    m.ever.ack_through(b);
                }
                m.truth = actual(cursor).unwrap_or_default();
            }
        }
    }

    fn close_and_reopen(&self, d: &Driven, slot: &mut Option<Cursor>) {
        let cursor = slot.take().expect("open");
        let truth = lock(&d.model).truth.clone();
        self.check_exact(&cursor, &truth, "before close");
        let closed = cursor.close();
        if let Err(e) = &closed {
            self.error(format!("{}: close: {e}", d.name));
        }
        let reopened = match self.topic.open_cursor(&d.name, CursorOptions::default()) {
            Ok(c) => c,
            Err(e) => {
                self.error(format!("{}: reopen: {e}", d.name));
                return;
            }
        };
        let mut m = lock(&d.model);
        if closed.is_ok() {
            m.committed = truth.clone();
            self.check_exact(&reopened, &truth, "after close and reopen");
        } else {
            self.check_bounds(&reopened, &m, &self.snapshot(), "after a failed close");
            m.truth = actual(&reopened).unwrap_or_default();
            m.committed = Acked::default();
        }
        drop(m);
        *slot = Some(reopened);
    }

    /// Invariants 1 and 2 over `positions`: nothing acked outside `ever`, everything in
    /// `committed` acked.
    fn check_bounds(&self, cursor: &Cursor, m: &Model, positions: &[Position], when: &str) {
        let first = self.topic.first_position();
        for &p in positions {
            if first.is_none_or(|f| p < f) {
                continue;
            }
            let actual = match cursor.is_acked(p) {
                Ok(a) => a,
                Err(e) => {
                    self.error(format!("{} {when}: is_acked {p}: {e}", cursor.name()));
                    return;
                }
            };
            if actual && !m.ever.contains(p) {
                self.mismatch(format!(
                    "{} {when}: {p} is acked but never was (invariant 1)",
                    cursor.name()
                ));
                return;
            }
            if !actual && m.committed.contains(p) {
                self.mismatch(format!(
                    "{} {when}: {p} was committed but is not acked (invariant 2)",
                    cursor.name()
                ));
                return;
            }
        }
    }
}

/// Runs every thread to completion on `topic`; returns the run for the checks after it.
fn run_workload<'a>(topic: &'a ManagedLedger, size: Size, seed: u64) -> Run<'a> {
    let cursors = (0..size.cursors)
        .map(|c| {
            let name = format!("sub-{c}");
            let cursor = topic
                .open_cursor(&name, CursorOptions::default())
                .expect("open cursor");
            Driven {
                name,
                handle: RwLock::new(Some(cursor)),
                model: Mutex::default(),
            }
        })
        .collect();
    let run = Run {
        seed,
        topic,
        appended: Mutex::default(),
        errors: Mutex::default(),
        mismatches: Mutex::default(),
        producers_left: Mutex::new(size.producers),
        stop: AtomicBool::new(false),
        cursors,
    };
    thread::scope(|s| {
        let run = &run;
        let background = [
            s.spawn(move || run.trim()),
            s.spawn(move || run.scratch(seed ^ 0x5c7a)),
        ];
        let mut workers = Vec::new();
        for p in 0..size.producers {
            workers.push(s.spawn(move || run.produce(p, size.appends_per_producer)));
        }
        for c in 0..size.cursors {
            for t in 0..size.threads_per_cursor {
                workers.push(s.spawn(move || run.drive(c, t, size.ops_per_thread)));
            }
        }
        for w in workers {
            w.join().expect("a worker panicked");
        }
        run.stop.store(true, Ordering::Relaxed);
        for b in background {
            b.join().expect("a background thread panicked");
        }
    });
    // Quiet now: every cursor must hold exactly the model.
    for d in &run.cursors {
        let guard = d.handle.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(cursor) = guard.as_ref() {
            let truth = lock(&d.model).truth.clone();
            run.check_exact(cursor, &truth, "at the end");
        }
    }
    run
}

/// Closes every cursor and the topic, reopens the topic with `reopen`, and checks that every
/// cursor holds exactly the model.
fn close_reopen_and_check(run: &Run<'_>, reopen: impl FnOnce() -> ManagedLedger) {
    for d in &run.cursors {
        let mut guard = d.handle.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(cursor) = guard.take() {
            match cursor.close() {
                Ok(()) => {
                    let mut m = lock(&d.model);
                    m.committed = m.truth.clone();
                }
                Err(e) => run.error(format!("{}: final close: {e}", d.name)),
            }
        }
    }
    if let Err(e) = run.topic.close() {
        run.error(format!("topic close: {e}"));
    }
    let topic = reopen();
    let names: Vec<String> = run.cursors.iter().map(|d| d.name.clone()).collect();
    if topic.cursor_names() != names {
        run.mismatch(format!(
            "cursors after reopen: {:?}, expected {names:?}",
            topic.cursor_names()
        ));
    }
    let positions = run.snapshot();
    let first = topic.first_position();
    for d in &run.cursors {
        let m = lock(&d.model);
        let cursor = match topic.open_cursor(&d.name, CursorOptions::default()) {
            Ok(c) => c,
            Err(e) => {
                run.error(format!("{}: open after the topic's reopen: {e}", d.name));
                continue;
            }
        };
        for &p in &positions {
            if first.is_none_or(|f| p < f) {
                continue;
            }
            let actual = cursor.is_acked(p).expect("is_acked after reopen");
            if actual != m.truth.contains(p) {
                run.mismatch(format!(
                    "{} after the topic's close and reopen: {p} acked {actual}, model says {}",
                    d.name,
                    m.truth.contains(p)
                ));
                break;
            }
        }
    }
    topic.close().expect("close the reopened topic");
}

/// Fails with the seed, every unexpected error (grouped) and every model mismatch.
fn report(run: &Run<'_>, what: &str) {
    let errors = lock(&run.errors);
    let mismatches = lock(&run.mismatches);
    if errors.is_empty() && mismatches.is_empty() {
        return;
    }
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for e in errors.iter() {
        let op = e
            .split(": ")
            .nth(1)
            .unwrap_or(e)
            .split(' ')
            .next()
            .unwrap_or(e);
        let err = e.rsplit(": ").next().unwrap_or(e);
        let kind: String = format!("{op}: {err}").chars().take(120).collect();
        *kinds.entry(kind).or_default() += 1;
    }
    panic!(
        "{what} (seed {seed}, ACKSTORE_STRESS_SEED={seed} repeats its choices): {} unexpected \
         errors with one owner, {} model mismatches\nerrors by kind: {kinds:#?}\nfirst errors: \
         {:#?}\nmismatches: {:#?}",
        errors.len(),
        mismatches.len(),
        errors.iter().take(10).collect::<Vec<_>>(),
        mismatches.iter().take(20).collect::<Vec<_>>(),
        seed = run.seed,
    );
}

const SIZE: Size = Size {
    producers: 2,
    appends_per_producer: 1200,
    cursors: 3,
    threads_per_cursor: 2,
    ops_per_thread: 400,
};

/// On the in-memory disk: the workload, then a power cut (the durable image reopened: invariants
/// 1 and 2 against the model), then a clean close and reopen (exact state).
fn stress_in_memory(mode: PersistMode) {
    let seed = seed_from_env("ACKSTORE_STRESS_SEED");
    let disk = MemStorage::new();
    let topic = ManagedLedger::open_with_storage(
        Arc::new(disk.clone()),
        support::config::topic_flushed(5, mode, 4096, 24, Duration::from_millis(3)),
    )
    .expect("open");
    let run = run_workload(&topic, SIZE, seed);

    // A power cut now: only what was synced survives.
    let image = disk.durable_image();
    match ManagedLedger::open_with_storage(
        Arc::new(image),
        support::config::topic_flushed(5, mode, 4096, 24, Duration::from_millis(3)),
    ) {
        Ok(crashed) => {
            let a = lock(&run.appended);
            let synced = a.positions[..a.synced].to_vec();
            drop(a);
            let first = crashed.first_position();
            let kept: Vec<Position> = synced
                .into_iter()
                .filter(|&p| first.is_some_and(|f| p >= f))
                .collect();
            for d in &run.cursors {
                match crashed.open_cursor(&d.name, CursorOptions::default()) {
                    Ok(c) => check_recovered(&run, &c, &lock(&d.model), &kept),
                    Err(e) => run.error(format!("{}: open after a power cut: {e}", d.name)),
                }
            }
            let _ = crashed.close();
        }
        Err(e) => run.error(format!("topic open after a power cut: {e}")),
    }

    close_reopen_and_check(&run, || {
        ManagedLedger::open_with_storage(
            Arc::new(disk.clone()),
            support::config::topic_flushed(5, mode, 4096, 24, Duration::from_millis(3)),
        )
        .expect("reopen")
    });
    report(&run, &format!("in-memory disk, {mode:?}"));
}

#[test]
fn one_owner_under_concurrent_load_is_never_fenced_and_keeps_every_committed_ack_multi_entry() {
    stress_in_memory(PersistMode::MultiEntry);
}

#[test]
fn one_owner_under_concurrent_load_is_never_fenced_and_keeps_every_committed_ack_single_entry() {
    stress_in_memory(PersistMode::SingleEntry);
}

/// Invariants 1 and 2 of a cursor recovered after a power cut, over the synced positions.
fn check_recovered(run: &Run<'_>, cursor: &Cursor, m: &Model, kept: &[Position]) {
    for &p in kept {
        let actual = match cursor.is_acked(p) {
            Ok(a) => a,
            Err(e) => {
                run.error(format!(
                    "{} after a power cut: is_acked {p}: {e}",
                    cursor.name()
                ));
                return;
            }
        };
        if actual && !m.ever.contains(p) {
            run.mismatch(format!(
                "{} after a power cut: {p} is acked but never was (invariant 1)",
                cursor.name()
            ));
            return;
        }
        if !actual && m.committed.contains(p) {
            run.mismatch(format!(
                "{} after a power cut: {p} was committed but is lost (invariant 2)",
                cursor.name()
            ));
            return;
        }
    }
}

/// On real files: the workload, then close and reopen from the directory (exact state).
#[test]
fn one_owner_on_real_files_under_concurrent_load_is_never_fenced_and_reopens_exactly() {
    let seed = seed_from_env("ACKSTORE_STRESS_SEED");
    let dir = tempfile::tempdir().expect("tempdir");
    let path: &Path = dir.path();
    let topic = ManagedLedger::open(
        path,
        support::config::topic_flushed(
            5,
            PersistMode::MultiEntry,
            4096,
            24,
            Duration::from_millis(3),
        ),
    )
    .expect("open");
    let size = Size {
        appends_per_producer: 600,
        ops_per_thread: 250,
        ..SIZE
    };
    let run = run_workload(&topic, size, seed);
    close_reopen_and_check(&run, || {
        ManagedLedger::open(
            path,
            support::config::topic_flushed(
                5,
                PersistMode::MultiEntry,
                4096,
                24,
                Duration::from_millis(3),
            ),
        )
        .expect("reopen")
    });
    report(&run, "real files");
}

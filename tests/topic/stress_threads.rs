//! Concurrency stress: one topic with a data ledger rolled over every few entries, producer
//! threads appending single messages and batches and syncing, several cursors each driven by two
//! threads (ack, ack of one message of a batch, read and ack, cumulative ack, flush, rewind,
//! property, seek, close and reopen) with the background flusher on, a trimmer, and a thread
//! creating and deleting scratch cursors, all at once. Bounded by operation counts, not time.
//! The topic is opened alone, or hosted by a store (its flusher pool on).
//!
//! Checked against a model of each cursor, message by message (what was acknowledged, what the
//! last `Ok` flush, close or seek committed, and everything ever acknowledged):
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread;
use std::time::Duration;

use ackstore::{AppendMeta, Cursor, CursorOptions, Error, Position};
use ackstore::{FileStorage, ManagedLedger, MemStorage, PersistMode, Storage, Store};
use support::topic::{Host, Hosted, on_each_host};
use support::workload::{Acked, Messages, Rng, actual, actual_messages, before, seed_from_env};

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

/// Every appended position, in the order the appends returned, its number of messages, and how
/// many of them the last `Ok` sync covered.
#[derive(Debug, Default)]
struct Appended {
    positions: Vec<Position>,
    sizes: BTreeMap<Position, u32>,
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
    /// The messages `truth`, `committed` and `ever` hold beyond their whole entries.
    truth_messages: Messages,
    committed_messages: Messages,
    ever_messages: Messages,
}

impl Model {
    /// Takes what `cursor` holds among `entries` as the truth, nothing of it committed.
    fn read_back(&mut self, cursor: &Cursor, entries: Vec<(Position, u32)>) {
        self.truth = actual(cursor).unwrap_or_default();
        self.truth_messages = actual_messages(cursor, entries).unwrap_or_default();
        self.committed = Acked::default();
        self.committed_messages = Messages::default();
    }
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
    /// before the first retained entry is behind mark-delete, whatever the cursor's, so a
    /// cumulative ack to it is refused as one behind mark-delete (the other acks answer
    /// `Ok(false)`).
    fn trimmed(&self, p: Position, err: &Error) -> bool {
        matches!(err, Error::InvalidArgument { .. })
            && self.topic.first_position().is_some_and(|f| p < f)
    }

    /// Every appended entry with its number of messages.
    fn entries(&self) -> Vec<(Position, u32)> {
        let a = lock(&self.appended);
        a.positions.iter().map(|p| (*p, a.sizes[p])).collect()
    }

    /// A random synced entry ([`Self::pick`]) and its number of messages.
    fn pick_entry(&self, rng: &mut Rng) -> Option<(Position, u32)> {
        let p = self.pick(rng)?;
        Some((p, lock(&self.appended).sizes[&p]))
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
            // Every other entry a batch of 2 to 4 messages.
            let num_messages = if i % 2 == 0 {
                1
            } else {
                2 + u32::try_from(i / 2 % 3).expect("small")
            };
            let meta = AppendMeta {
                num_messages,
                timestamp: i as u64,
            };
            match self
                .topic
                .append_with(format!("p{producer}-{i}").as_bytes(), meta)
            {
                Ok(p) => {
                    // The size first: a position is picked only once listed.
                    let mut a = lock(&self.appended);
                    a.sizes.insert(p, num_messages);
                    a.positions.push(p);
                }
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

    /// Compares the cursor with the model over every message of every retained appended entry.
    fn check_exact(&self, cursor: &Cursor, truth: &Acked, messages: &Messages, when: &str) {
        let first = self.topic.first_position();
        if let Err(e) = exactly(cursor, truth, messages, &self.entries(), first) {
            if e.starts_with("is_") {
                self.error(format!("{} {when}: {e}", cursor.name()));
            } else {
                self.mismatch(format!("{} {when}: {e}", cursor.name()));
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
            0..28 => {
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
            28..40 => {
                let Some((p, size)) = self.pick_entry(rng) else {
                    return;
                };
                let i = u32::try_from(rng.below(u64::from(size))).expect("small");
                self.ack_message(d, cursor, p, i, size);
            }
            40..55 => match cursor.read_entries(6) {
                Ok(entries) => {
                    for e in &entries {
                        if !rng.chance(60) {
                            continue;
                        }
                        if e.num_messages > 1 && rng.chance(50) {
                            let i =
                                u32::try_from(rng.below(u64::from(e.num_messages))).expect("small");
                            self.ack_message(d, cursor, e.position, i, e.num_messages);
                            continue;
                        }
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
                let (before, before_messages) = {
                    let m = lock(&d.model);
                    (m.truth.clone(), m.truth_messages.clone())
                };
                match cursor.flush() {
                    Ok(()) => {
                        let mut m = lock(&d.model);
                        m.committed.extend(&before);
                        m.committed_messages.extend(&before_messages);
                    }
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

    /// Acknowledges message `i` of the entry at `p`, of `size` messages.
    fn ack_message(&self, d: &Driven, cursor: &Cursor, p: Position, i: u32, size: u32) {
        match cursor.ack_batch_index(p, i, size) {
            Ok(_) => {
                let mut m = lock(&d.model);
                m.truth_messages.ack(p, i);
                m.ever_messages.ack(p, i);
            }
            Err(e) if self.trimmed(p, &e) => {}
            Err(e) => self.error(format!("{}: ack_batch_index {p} {i}: {e}", d.name)),
        }
    }

    fn seek(&self, d: &Driven, cursor: &Cursor, rng: &mut Rng) {
        let Some(p) = self.pick(rng) else { return };
        match cursor.seek(p) {
            Ok(()) => {
                let mut m = lock(&d.model);
                m.truth = Acked::reset(before(p));
                m.committed = m.truth.clone();
                m.truth_messages = Messages::default();
                m.committed_messages = Messages::default();
                if let Some(b) = before(p) {
                    m.ever.ack_through(b);
                }
            }
            Err(e) => {
                // The reset may or may not have been committed: only the bounds stay known.
                self.error(format!("{}: seek {p}: {e}", d.name));
                let mut m = lock(&d.model);
                if let Some(b) = before(p) {
                    m.ever.ack_through(b);
                }
                m.read_back(cursor, self.entries());
            }
        }
    }

    fn close_and_reopen(&self, d: &Driven, slot: &mut Option<Cursor>) {
        let cursor = slot.take().expect("open");
        let (truth, messages) = {
            let m = lock(&d.model);
            (m.truth.clone(), m.truth_messages.clone())
        };
        self.check_exact(&cursor, &truth, &messages, "before close");
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
            m.committed_messages = messages.clone();
            self.check_exact(&reopened, &truth, &messages, "after close and reopen");
        } else {
            self.check_bounds(&reopened, &m, "after a failed close");
            m.read_back(&reopened, self.entries());
        }
        drop(m);
        *slot = Some(reopened);
    }

    /// Invariants 1 and 2 over every message of every retained appended entry: nothing acked
    /// outside `ever`, everything in `committed` acked.
    fn check_bounds(&self, cursor: &Cursor, m: &Model, when: &str) {
        let first = self.topic.first_position();
        if let Err(e) = within(cursor, m, &self.entries(), first) {
            if e.starts_with("is_") {
                self.error(format!("{} {when}: {e}", cursor.name()));
            } else {
                self.mismatch(format!("{} {when}: {e}", cursor.name()));
            }
        }
    }
}

/// Whether `cursor` holds exactly `truth` and `messages` over every message of `entries` at or
/// after `first`; the first difference otherwise (an error of the cursor starts with the call's
/// name).
fn exactly(
    cursor: &Cursor,
    truth: &Acked,
    messages: &Messages,
    entries: &[(Position, u32)],
    first: Option<Position>,
) -> Result<(), String> {
    for &(p, size) in entries {
        if first.is_none_or(|f| p < f) {
            continue;
        }
        let entry = cursor
            .is_acked(p)
            .map_err(|e| format!("is_acked {p}: {e}"))?;
        let want = messages.holds_entry(truth, p, size);
        if entry != want {
            return Err(format!("{p} acked {entry}, model says {want}"));
        }
        for i in 0..size {
            let got = cursor
                .is_batch_index_acked(p, i)
                .map_err(|e| format!("is_batch_index_acked {p} {i}: {e}"))?;
            let want = messages.holds(truth, p, i);
            if got != want {
                return Err(format!("message {i} of {p} acked {got}, model says {want}"));
            }
        }
    }
    Ok(())
}

/// Invariants 1 and 2 of `cursor` against `m` over every message of `entries` at or after
/// `first`: nothing acked that was never acked, everything committed acked.
fn within(
    cursor: &Cursor,
    m: &Model,
    entries: &[(Position, u32)],
    first: Option<Position>,
) -> Result<(), String> {
    for &(p, size) in entries {
        if first.is_none_or(|f| p < f) {
            continue;
        }
        for i in 0..size {
            let got = cursor
                .is_batch_index_acked(p, i)
                .map_err(|e| format!("is_batch_index_acked {p} {i}: {e}"))?;
            if got && !m.ever_messages.holds(&m.ever, p, i) {
                return Err(format!(
                    "message {i} of {p} is acked but never was (invariant 1)"
                ));
            }
            if !got && m.committed_messages.holds(&m.committed, p, i) {
                return Err(format!(
                    "message {i} of {p} was committed but is not acked (invariant 2)"
                ));
            }
        }
    }
    Ok(())
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
        // Every worker joined before `stop`, then their panics: a worker's panic must not
        // leave the background threads running, and the scope waiting for them.
        let joined: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        run.stop.store(true, Ordering::Relaxed);
        for worker in joined {
            worker.expect("a worker panicked");
        }
        for b in background {
            b.join().expect("a background thread panicked");
        }
    });
    // Quiet now: every cursor must hold exactly the model.
    for d in &run.cursors {
        let guard = d.handle.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(cursor) = guard.as_ref() {
            let m = lock(&d.model);
            run.check_exact(cursor, &m.truth, &m.truth_messages, "at the end");
        }
    }
    run
}

/// Closes every cursor and the topic of the run (and `store`, the store hosting it, if any),
/// reopens the topic with `reopen`, and checks that every cursor holds exactly the model.
fn close_reopen_and_check(run: &Run<'_>, store: Option<Store>, reopen: impl FnOnce() -> Hosted) {
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
    let closed = match store {
        Some(store) => store.close(),
        None => run.topic.close(),
    };
    if let Err(e) = closed {
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
    let entries = run.entries();
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
        if let Err(e) = exactly(&cursor, &m.truth, &m.truth_messages, &entries, first) {
            run.mismatch(format!(
                "{} after the topic's close and reopen: {e}",
                d.name
            ));
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

/// Opens the topic `host` keeps on `storage`, rolling a data ledger every 5 entries, its
/// cursors flushed every 3 ms in the background (by the cursor's thread on a topic alone, by the
/// store's flusher pool on a store).
fn open(host: Host, storage: Arc<dyn Storage>, mode: PersistMode) -> Hosted {
    let config = support::config::topic_flushed(5, mode, 4096, Duration::from_millis(3));
    support::topic::open_hosted_flushed(host, storage, &config, 2).expect("open")
}

/// On the in-memory disk: the workload, then a power cut (the durable image reopened: invariants
/// 1 and 2 against the model), then a clean close and reopen (exact state).
fn stress_in_memory(host: Host, mode: PersistMode) {
    let seed = seed_from_env("ACKSTORE_STRESS_SEED");
    let disk = MemStorage::new();
    let Hosted { store, topic } = open(host, Arc::new(disk.clone()), mode);
    let run = run_workload(&topic, SIZE, seed);

    // A power cut now: only what was synced survives.
    let crashed = open(host, Arc::new(disk.durable_image()), mode);
    let first = crashed.first_position();
    let kept: Vec<(Position, u32)> = {
        let a = lock(&run.appended);
        a.positions[..a.synced]
            .iter()
            .filter(|&&p| first.is_some_and(|f| p >= f))
            .map(|p| (*p, a.sizes[p]))
            .collect()
    };
    for d in &run.cursors {
        match crashed.open_cursor(&d.name, CursorOptions::default()) {
            Ok(c) => {
                if let Err(e) = within(&c, &lock(&d.model), &kept, first) {
                    run.mismatch(format!("{} after a power cut: {e}", d.name));
                }
            }
            Err(e) => run.error(format!("{}: open after a power cut: {e}", d.name)),
        }
    }
    let _ = crashed.close();

    close_reopen_and_check(&run, store, || open(host, Arc::new(disk.clone()), mode));
    report(&run, &format!("{host:?} on the in-memory disk, {mode:?}"));
}

#[test]
fn one_owner_under_concurrent_load_is_never_fenced_and_keeps_every_committed_ack_multi_entry() {
    on_each_host(|host| stress_in_memory(host, PersistMode::MultiEntry));
}

#[test]
fn one_owner_under_concurrent_load_is_never_fenced_and_keeps_every_committed_ack_single_entry() {
    stress_in_memory(Host::Alone, PersistMode::SingleEntry);
}

/// On real files: the workload, then close and reopen from the directory (exact state).
#[test]
fn one_owner_on_real_files_under_concurrent_load_is_never_fenced_and_reopens_exactly() {
    on_each_host(|host| {
        let seed = seed_from_env("ACKSTORE_STRESS_SEED");
        let dir = tempfile::tempdir().expect("tempdir");
        let files = || -> Arc<dyn Storage> {
            Arc::new(FileStorage::open(dir.path(), true).expect("storage"))
        };
        let Hosted { store, topic } = open(host, files(), PersistMode::MultiEntry);
        // Two thirds of a single run's work on each host: real files cost an fsync a flush.
        let size = Size {
            appends_per_producer: 400,
            ops_per_thread: 170,
            ..SIZE
        };
        let run = run_workload(&topic, size, seed);
        close_reopen_and_check(&run, store, || open(host, files(), PersistMode::MultiEntry));
        report(&run, &format!("{host:?} on real files"));
    });
}

//! The flusher pool of a [`super::StoreGroup`]: a fixed number of threads that run the flush
//! ticks of every member store, each on its own `flush_interval`, whatever the number of
//! stores, topics and cursors. A store opened alone ([`super::Store::open`]) is the only
//! member of a group of its own, so this is the one pool there is.
//!
//! Owns: the pool's threads and the schedule, a deadline queue with one entry per member
//! store that has an interval. A free thread waits for the earliest deadline, takes that store
//! (no other thread runs a tick of the same store meanwhile), runs one tick over every dirty
//! cursor of it ([`super::Store::flush_all`] without returning errors: a cursor's failure is
//! kept for its next `flush` or `close`, as a background flush's), then queues the store again
//! one interval after the tick was taken: a tick that overran its interval is due at once, so
//! the next starts as soon as one ends. Ticks of different stores run in parallel, up to the
//! number of threads.
//!
//! Must never: keep a store alive (members are held by a weak reference, upgraded for one tick
//! at a time); let a tick of a store run after [`Pool::leave`] of it returned (leaving waits
//! for a tick in progress, so once a store's last handle is dropped no thread holds it); take
//! a cursor's lock while holding anything but the tick; run [`Pool::leave`] or [`Pool::stop`]
//! on a thread of the pool (its threads hold no store handle and no group, so no last handle
//! is ever dropped on one).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Inner;
use crate::error::{Error, Result};
use crate::log::lock;

/// The pool of one group: its threads start with the first member that has an interval, and
/// [`Pool::stop`] (or dropping the pool) ends them.
#[derive(Debug)]
pub(super) struct Pool {
    shared: Arc<Shared>,
    /// Threads to run once a member has an interval.
    size: usize,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// What the threads share with the pool.
#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    /// Signalled when the queue changes or the pool stops: a waiting thread looks again.
    wake: Condvar,
    /// Signalled when a tick ends: [`Pool::leave`] waits on it for its store's tick.
    ended: Condvar,
}

#[derive(Debug, Default)]
struct State {
    stopping: bool,
    next_id: u64,
    /// Every member store, by id.
    members: HashMap<u64, Member>,
    /// One entry per member with an interval whose tick is not running: its deadline and id.
    queue: BinaryHeap<Reverse<(Instant, u64)>>,
    /// Members whose tick a thread is running.
    running: HashSet<u64>,
}

#[derive(Debug)]
struct Member {
    store: Weak<Inner>,
    interval: Option<Duration>,
}

impl Pool {
    /// A pool of `size` threads (none started yet).
    pub(super) fn new(size: usize) -> Self {
        Self {
            shared: Arc::default(),
            size,
            threads: Mutex::new(Vec::new()),
        }
    }

    /// The number of threads the pool runs once a member has an interval.
    pub(super) fn size(&self) -> usize {
        self.size
    }

    /// Adds the store `inner` to the schedule, its first tick due one `interval` from now
    /// (`None`: never scheduled, only listed as a member); its id, for [`Pool::leave`].
    /// Starts the threads if they are not running yet and the store has an interval.
    ///
    /// # Errors
    /// [`Error::Closed`] once the pool was stopped; [`Error::Io`] when a thread cannot be
    /// started (the store is not added).
    pub(super) fn join(&self, inner: &Arc<Inner>, interval: Option<Duration>) -> Result<u64> {
        let interval = interval.filter(|_| self.size > 0);
        if interval.is_some() {
            self.start_threads()?;
        }
        let mut state = lock(&self.shared.state);
        if state.stopping {
            return Err(Error::Closed);
        }
        let id = state.next_id;
        state.next_id += 1;
        state.members.insert(
            id,
            Member {
                store: Arc::downgrade(inner),
                interval,
            },
        );
        if let Some(interval) = interval {
            state.queue.push(Reverse((Instant::now() + interval, id)));
            self.shared.wake.notify_all();
        }
        Ok(id)
    }

    /// Removes member `id` from the schedule and waits until a tick of it in progress has
    /// ended: once this returns, no thread of the pool holds the store.
    pub(super) fn leave(&self, id: u64) {
        let mut state = lock(&self.shared.state);
        state.members.remove(&id);
        // Its queue entry, if any, is dropped by the first thread that meets it.
        while state.running.contains(&id) {
            state = wait(&self.shared.ended, state);
        }
    }

    /// The member stores alive now.
    pub(super) fn members(&self) -> Vec<Arc<Inner>> {
        lock(&self.shared.state)
            .members
            .values()
            .filter_map(|m| m.store.upgrade())
            .collect()
    }

    /// Stops every thread and waits until each has ended (a tick in progress ends first), so
    /// no thread holds any store once this returns; later joins are refused.
    pub(super) fn stop(&self) {
        lock(&self.shared.state).stopping = true;
        self.shared.wake.notify_all();
        let threads = std::mem::take(&mut *lock(&self.threads));
        for t in threads {
            // A thread that panicked has ended all the same.
            let _ = t.join();
        }
    }

    fn start_threads(&self) -> Result<()> {
        let mut threads = lock(&self.threads);
        if !threads.is_empty() || lock(&self.shared.state).stopping {
            return Ok(());
        }
        for i in 0..self.size {
            let shared = Arc::clone(&self.shared);
            let spawned = std::thread::Builder::new()
                .name(format!("ackstore-flusher-{i}"))
                .spawn(move || run(&shared));
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => {
                    drop(threads);
                    self.stop();
                    return Err(Error::io("start a flusher thread of", "the store", e));
                }
            }
        }
        Ok(())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.stop();
    }
}

fn wait<'a>(cv: &Condvar, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
    cv.wait(guard)
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn run(shared: &Shared) {
    let mut state = lock(&shared.state);
    loop {
        if state.stopping {
            return;
        }
        let Some(&Reverse((due, id))) = state.queue.peek() else {
            state = wait(&shared.wake, state);
            continue;
        };
        let Some(interval) = state.members.get(&id).and_then(|m| m.interval) else {
            // A store that left.
            state.queue.pop();
            continue;
        };
        let now = Instant::now();
        if due > now {
            state = shared
                .wake
                .wait_timeout(state, due - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
            continue;
        }
        state.queue.pop();
        let store = state.members.get(&id).map(|m| m.store.clone());
        state.running.insert(id);
        drop(state);
        if let Some(inner) = store.and_then(|s| s.upgrade()) {
            // Errors were kept for the cursors (or logged, for a failed commit).
            let _ = inner.flush_tick(true);
        }
        state = lock(&shared.state);
        state.running.remove(&id);
        if state.members.contains_key(&id) {
            state.queue.push(Reverse((now + interval, id)));
            // The entry may be due before the deadline another thread waits for.
            shared.wake.notify_all();
        }
        shared.ended.notify_all();
    }
}

//! The flusher pool: a fixed number of threads that run the flush ticks of every member host
//! of a journal (the stores of a `StoreGroup`, or one topic opened alone), each on its own
//! `flush_interval`, whatever the number of hosts, topics and cursors.
//!
//! Owns: the pool's threads and the schedule, a deadline queue with one entry per member
//! that has an interval. A free thread waits for the earliest deadline, takes that member (no
//! other thread runs a tick of the same member meanwhile), runs one tick over every dirty
//! cursor of it ([`Ticked::tick`]: a cursor's failure is kept for its next `flush` or
//! `close`, as a background flush's), then queues the member again one interval after the
//! tick was taken: a tick that overran its interval is due at once, so the next starts as soon
//! as one ends. Ticks of different members run in parallel, up to the number of threads.
//!
//! Must never: keep a member alive (members are held by a weak reference, upgraded for one
//! tick at a time); let a tick of a member run after [`Pool::leave`] of it returned (leaving
//! waits for a tick in progress, so once a member's last handle is dropped no thread holds
//! it); take a cursor's lock while holding anything but the tick; run [`Pool::leave`] or
//! [`Pool::stop`] on a thread of the pool (its threads hold no handle of a member and no
//! owner of the pool, so no last handle is ever dropped on one).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::hashing::{HashMapExt, HashSetExt, IdMap, IdSet};
use crate::sync::lock;

/// A member of a [`Pool`]: the host of a journal, whose cursors one tick flushes.
pub trait Ticked: Send + Sync {
    /// One flush tick over every dirty cursor of the member, keeping each cursor's failure for
    /// its next `flush` or `close` (and logging a failed commit).
    fn tick(&self);
}

/// The pool of one owner (a group of stores, a topic): its threads start with the first
/// member that has an interval, and [`Pool::stop`] (or dropping the pool) ends them.
#[derive(Debug)]
pub struct Pool<T: ?Sized> {
    shared: Arc<Shared<T>>,
    /// Threads to run once a member has an interval.
    size: usize,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// What the threads share with the pool.
#[derive(Debug)]
struct Shared<T: ?Sized> {
    state: Mutex<State<T>>,
    /// Signalled when the queue changes or the pool stops: a waiting thread looks again.
    wake: Condvar,
    /// Signalled when a tick ends: [`Pool::leave`] waits on it for its store's tick.
    ended: Condvar,
}

#[derive(Debug)]
struct State<T: ?Sized> {
    stopping: bool,
    next_id: u64,
    /// Every member, by id.
    members: IdMap<u64, Member<T>>,
    /// One entry per member with an interval whose tick is not running: its deadline and id.
    queue: BinaryHeap<Reverse<(Instant, u64)>>,
    /// Members whose tick a thread is running.
    running: IdSet<u64>,
}

#[derive(Debug)]
struct Member<T: ?Sized> {
    store: Weak<T>,
    interval: Option<Duration>,
}

impl<T: Ticked + ?Sized + 'static> Pool<T> {
    /// A pool of `size` threads (none started yet).
    #[must_use]
    pub fn new(size: usize) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    stopping: false,
                    next_id: 0,
                    members: IdMap::new(),
                    queue: BinaryHeap::new(),
                    running: IdSet::new(),
                }),
                wake: Condvar::new(),
                ended: Condvar::new(),
            }),
            size,
            threads: Mutex::new(Vec::new()),
        }
    }

    /// Adds `inner` to the schedule, its first tick due one `interval` from now (`None`:
    /// never scheduled, only listed as a member); its id, for [`Pool::leave`]. Starts the
    /// threads if they are not running yet and the member has an interval.
    ///
    /// # Errors
    /// [`Error::Closed`] once the pool was stopped; [`Error::Io`] when a thread cannot be
    /// started (the member is not added).
    pub fn join(&self, inner: &Arc<T>, interval: Option<Duration>) -> Result<u64> {
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

    /// The members alive now.
    pub fn members(&self) -> Vec<Arc<T>> {
        lock(&self.shared.state)
            .members
            .values()
            .filter_map(|m| m.store.upgrade())
            .collect()
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
                    return Err(Error::io("start a flusher thread of", "the journal", e));
                }
            }
        }
        Ok(())
    }
}

impl<T: ?Sized> Pool<T> {
    /// The number of threads the pool runs once a member has an interval.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Removes member `id` from the schedule and waits until a tick of it in progress has
    /// ended: once this returns, no thread of the pool holds the store.
    pub fn leave(&self, id: u64) {
        let mut state = lock(&self.shared.state);
        state.members.remove(&id);
        // Its queue entry, if any, is dropped by the first thread that meets it.
        while state.running.contains(&id) {
            state = wait(&self.shared.ended, state);
        }
    }

    /// Stops every thread and waits until each has ended (a tick in progress ends first), so
    /// no thread holds any store once this returns; later joins are refused.
    pub fn stop(&self) {
        lock(&self.shared.state).stopping = true;
        self.shared.wake.notify_all();
        let threads = std::mem::take(&mut *lock(&self.threads));
        for t in threads {
            // A thread that panicked has ended all the same.
            let _ = t.join();
        }
    }
}

impl<T: ?Sized> Drop for Pool<T> {
    fn drop(&mut self) {
        self.stop();
    }
}

fn wait<'a, T: ?Sized>(cv: &Condvar, guard: MutexGuard<'a, State<T>>) -> MutexGuard<'a, State<T>> {
    cv.wait(guard)
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn run<T: Ticked + ?Sized>(shared: &Shared<T>) {
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
            // Errors are kept for the cursors (or logged, for a failed commit).
            inner.tick();
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

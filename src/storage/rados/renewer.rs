//! The lease renewals of one cluster connection: one thread renews every ownership lock held
//! through a [`super::RadosCluster`] (every store or topic a broker process owns), each once
//! per third of its own lease, so a process's threads do not grow with the stores it owns.
//!
//! Owns: the renewal schedule (a deadline queue with one entry per held lease) and its thread,
//! which runs while at least one lease is registered and ends when the last one leaves (the
//! next registration starts it again). Every renewal that is due is sent as one asynchronous
//! RADOS operation (the compare of the owner epoch and the lock step, see
//! [`super::RadosStorage`]'s lease) and settled once answered, so renewals of many leases cost
//! one round trip, not one each, and a renewal the cluster is slow to answer holds up no other
//! lease's. A renewal that finds the lease lost calls the storage's lost-lease hooks on this
//! thread and drops the lease from the schedule.
//!
//! Must never: renew a lease after [`Renewer::leave`] of it returned (leaving waits for a
//! renewal of it in progress, except on the renewal thread itself, inside a lost-lease hook,
//! where that renewal is over); keep a storage whose lease left.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ffi::CString;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use super::Shared;
use crate::error::{Error, Result};
use crate::hashing::{IdMap, IdSet};

/// The renewals of one connection (shared by the [`super::RadosCluster`] and every storage
/// made from it).
#[derive(Default)]
pub(super) struct Renewer {
    state: Mutex<State>,
    /// Signalled when a lease joins or leaves.
    wake: Condvar,
    /// Signalled when a round of renewals ends.
    ended: Condvar,
}

impl fmt::Debug for Renewer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("Renewer")
            .field("leases", &state.leases.len())
            .field("running", &state.running)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    next_id: u64,
    leases: IdMap<u64, Held>,
    /// One entry per registered lease not being renewed now: when its next renewal is due.
    queue: BinaryHeap<Reverse<(Instant, u64)>>,
    /// Leases whose renewal the thread has sent and not settled yet.
    renewing: IdSet<u64>,
    /// Whether the thread runs (it ends when no lease is left).
    running: bool,
    thread: Option<JoinHandle<()>>,
    thread_id: Option<ThreadId>,
}

/// A held lease the thread renews.
#[derive(Clone)]
pub(super) struct Held {
    pub(super) shared: Arc<Shared>,
    pub(super) cookie: CString,
    pub(super) lease: Duration,
    pub(super) epoch: u64,
}

impl Renewer {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds `held` to the schedule, its first renewal due a third of its lease after
    /// `taken_at`, and starts the thread if it is not running; the lease's id, for
    /// [`Renewer::leave`].
    ///
    /// # Errors
    /// [`Error::Io`] when the thread cannot be started (the lease is not added).
    pub(super) fn join(self: &Arc<Self>, held: Held, taken_at: Instant) -> Result<u64> {
        let location = held.shared.location.clone();
        let mut state = self.lock();
        let previous = if state.running {
            None
        } else {
            // The previous thread ended (or is ending: it touches nothing after it cleared
            // `running`); it is joined below, outside the lock.
            let ended = state.thread.take();
            let me = Arc::clone(self);
            let spawned = thread::Builder::new()
                .name("ackstore-rados-lease".into())
                .spawn(move || me.run())
                .map_err(|e| Error::io("start the lease renewal thread", location, e))?;
            state.thread_id = Some(spawned.thread().id());
            state.thread = Some(spawned);
            state.running = true;
            ended
        };
        let id = state.next_id;
        state.next_id += 1;
        state.queue.push(Reverse((taken_at + held.lease / 3, id)));
        state.leases.insert(id, held);
        self.wake.notify_all();
        drop(state);
        if let Some(t) = previous {
            let _ = t.join();
        }
        Ok(id)
    }

    /// Removes lease `id` from the schedule; once this returns it is never renewed again
    /// (a renewal of it in progress is waited for, unless this runs on the renewal thread).
    pub(super) fn leave(&self, id: u64) {
        let mut state = self.lock();
        state.leases.remove(&id);
        self.wake.notify_all();
        if state.thread_id == Some(thread::current().id()) {
            // A lost-lease hook: the renewal that called it is over.
            return;
        }
        while state.renewing.contains(&id) {
            state = self
                .ended
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The thread: sends the renewal of every lease due (as asynchronous operations), settles
    /// those answered, and waits for the next deadline (polling every [`POLL`] while
    /// renewals are in flight); ends once no lease is registered or in flight. A renewal the
    /// cluster is slow to answer (an unavailable placement group, up to the operation timeout)
    /// holds up no other lease's renewal; that lease is renewed again once it is answered.
    fn run(&self) {
        let mut in_flight: Vec<InFlight> = Vec::new();
        loop {
            let mut state = self.lock();
            if state.leases.is_empty() && in_flight.is_empty() {
                state.running = false;
                state.queue.clear();
                return;
            }
            let now = Instant::now();
            let mut round = Vec::new();
            while let Some(&Reverse((due, id))) = state.queue.peek() {
                if due > now {
                    break;
                }
                state.queue.pop();
                if let Some(held) = state.leases.get(&id) {
                    round.push((id, held.clone()));
                    state.renewing.insert(id);
                }
            }
            drop(state);
            for (id, held) in round {
                let sent = super::RadosStorage::send_renewal(&held);
                in_flight.push(InFlight {
                    id,
                    held,
                    sent,
                    at: now,
                });
            }
            let (answered, waiting): (Vec<InFlight>, Vec<InFlight>) =
                in_flight.into_iter().partition(|f| match &f.sent {
                    Ok(done) => done.is_complete(),
                    Err(_) => true,
                });
            in_flight = waiting;
            // Settled without the lock: a lost-lease hook may drop a lease's guard.
            let settled: Vec<(u64, Duration, Instant, bool)> = answered
                .into_iter()
                .map(|f| {
                    let ret = match &f.sent {
                        Ok(done) => done.wait(),
                        Err(ret) => *ret,
                    };
                    let keep = super::RadosStorage::settle_renewal(&f.held, ret);
                    (f.id, f.held.lease, f.at, keep)
                })
                .collect();
            let mut state = self.lock();
            for (id, lease, at, keep) in settled {
                state.renewing.remove(&id);
                if !keep {
                    state.leases.remove(&id);
                } else if state.leases.contains_key(&id) {
                    state.queue.push(Reverse((at + lease / 3, id)));
                }
            }
            self.ended.notify_all();
            let now = Instant::now();
            let mut wake = state.queue.peek().map(|&Reverse((due, _))| due);
            if !in_flight.is_empty() {
                wake = Some(wake.map_or(now + POLL, |w| w.min(now + POLL)));
            }
            match wake {
                Some(at) if at > now => drop(
                    self.wake
                        .wait_timeout(state, at - now)
                        .unwrap_or_else(PoisonError::into_inner),
                ),
                None if !state.leases.is_empty() => {
                    drop(
                        self.wake
                            .wait(state)
                            .unwrap_or_else(PoisonError::into_inner),
                    );
                }
                // Due now, or nothing left: look again at once.
                _ => drop(state),
            }
        }
    }
}

/// How often the thread looks for the answers of renewals in flight.
const POLL: Duration = Duration::from_millis(5);

/// A renewal sent and not settled yet.
struct InFlight {
    id: u64,
    held: Held,
    sent: std::result::Result<super::op::Completion, i32>,
    /// When it was due and sent: the next is due a third of the lease later.
    at: Instant,
}

//! The crate's one way to take a plain mutex ([`lock`], which ignores a panicking holder's
//! poison), and [`Monitor`]: a value under a mutex, with a condition variable notified only while
//! someone waits on it.
//!
//! Owns: the lock helper the layers share, and the monitor's waiter count, the one thing that
//! decides whether a change notifies. The monitor's users: a topic's change count, which waiting
//! reads watch, and the store's table of topics with a live instance. Must never: call into the
//! crate (this is the bottom layer, std only), do I/O, or notify outside the lock that guards the
//! waiter count.
//!
//! Why a monitor and not a bare `Mutex` + `Condvar`: the standard library's `notify_all` is a
//! system call (a futex wake) even when no thread waits, and the monitor's users change their
//! state far more often than anyone waits for it (every ack, sync and cursor close of a topic;
//! every close of a store's topic instances). The monitor counts its waiters under the state's
//! own lock and skips the notify when there are none.

use std::ops::{Deref, DerefMut};
use std::panic::AssertUnwindSafe;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// Locks `m`, keeping its data if a panicking thread poisoned it: every state the crate keeps
/// under a mutex is left consistent by its writers between any two of their statements, so a
/// panic elsewhere does not make it wrong, and one thread's panic does not cascade into every
/// later caller.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A value under a mutex, with a condition variable that callers wait on until the value
/// satisfies them ([`MonitorGuard::wait_until`]) and that a change notifies
/// ([`MonitorGuard::notify_all`]) only when someone waits.
///
/// The invariant that makes skipping the notify safe: a waiter counts itself in `waiters` and
/// tests its condition under the lock, and lets go of the lock only inside the condition
/// variable's wait, which registers it as waiting before it unlocks (and takes the lock back
/// before it tests again). A change, made and notified under the same lock, therefore comes
/// either while the waiter is not counted, before its first test, which sees the change (it
/// does not sleep), or while it is counted and registered with the condition variable, so the
/// notify reaches it. Only the waiter itself lowers the count, under the lock, once it is done
/// waiting, and a condition that panics uncounts its waiter before the panic goes on (a count
/// too high would make [`Monitor::waiters`] report a waiter that is gone); a count too low
/// would lose wake-ups, which is why the count is private to this type.
#[derive(Debug, Default)]
pub struct Monitor<T> {
    state: Mutex<Counted<T>>,
    changed: Condvar,
}

/// The monitor's value, and how many callers now wait in [`MonitorGuard::wait_until`].
#[derive(Debug, Default)]
struct Counted<T> {
    value: T,
    waiters: usize,
}

impl<T> Monitor<T> {
    /// A monitor of `value`, with no waiter.
    pub const fn new(value: T) -> Self {
        Self {
            state: Mutex::new(Counted { value, waiters: 0 }),
            changed: Condvar::new(),
        }
    }

    /// Locks the value (as [`lock`]: a panicking holder's poison is ignored).
    pub fn lock(&self) -> MonitorGuard<'_, T> {
        MonitorGuard {
            monitor: self,
            state: lock(&self.state),
        }
    }

    /// How many callers wait in [`MonitorGuard::wait_until`] now (for tests that must act while
    /// one is waiting).
    pub fn waiters(&self) -> usize {
        lock(&self.state).waiters
    }
}

/// The value of a [`Monitor`], locked; dereferences to the value.
#[derive(Debug)]
pub struct MonitorGuard<'a, T> {
    monitor: &'a Monitor<T>,
    state: MutexGuard<'a, Counted<T>>,
}

impl<T> MonitorGuard<'_, T> {
    /// Wakes every caller waiting in [`wait_until`](Self::wait_until) to test its condition
    /// again; a no-op (no system call) when none waits. Call it after changing the value through
    /// this guard: a waiter that comes once the guard is gone sees the change when it tests.
    pub fn notify_all(&self) {
        if self.state.waiters > 0 {
            self.monitor.changed.notify_all();
        }
    }

    /// Waits, counted as a waiter, until `done` holds for the value or `deadline` passes
    /// (`None`: no deadline); answers the lock and whether `done` held. `done` is tested under
    /// the lock, first before any wait, then after every wake-up (a notify, a spurious wake-up,
    /// a timeout); at the deadline it is tested once more, so a change that came with the
    /// deadline still counts.
    pub fn wait_until(
        self,
        deadline: Option<Instant>,
        mut done: impl FnMut(&T) -> bool,
    ) -> (Self, bool) {
        let Self { monitor, mut state } = self;
        state.waiters += 1;
        let done = loop {
            let holds = std::panic::catch_unwind(AssertUnwindSafe(|| done(&state.value)));
            match holds {
                Ok(true) => break true,
                Ok(false) => {}
                Err(panic) => {
                    state.waiters -= 1;
                    drop(state);
                    std::panic::resume_unwind(panic);
                }
            }
            state = match deadline {
                None => monitor
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break false;
                    }
                    monitor
                        .changed
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        };
        state.waiters -= 1;
        (Self { monitor, state }, done)
    }
}

impl<T> Deref for MonitorGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.state.value
    }
}

impl<T> DerefMut for MonitorGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.state.value
    }
}

//! The monitor under a topic's waiting reads and the store's topic locks: every change made
//! while a caller waits wakes it (no lost wake-up), a notify with nobody waiting changes
//! nothing, and a wait ends at its deadline.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ackstore::internals::sync::{Monitor, MonitorGuard};

/// Long enough that no scheduler delay reaches it: a waiter still asleep then missed a
/// notify.
const LOST_WAKE_UP: Duration = Duration::from_secs(60);

/// Waits until `done` holds, and fails if it took the deadline to notice: a wait woken only
/// by its timeout finds the change too (it tests `done` once more), so the time tells.
fn wait_for<T>(monitor: &Monitor<T>, done: impl FnMut(&T) -> bool) -> MonitorGuard<'_, T> {
    let deadline = Instant::now() + LOST_WAKE_UP;
    let (guard, held) = monitor.lock().wait_until(Some(deadline), done);
    assert!(
        held && Instant::now() < deadline,
        "the wait ran to its deadline: a lost wake-up"
    );
    guard
}

/// Sets `value` to `to` and notifies, once a waiter is counted: until it sleeps the waiter holds
/// the lock this change takes, so only the notify can wake it.
fn set_once_waited_for(value: &Monitor<u32>, to: u32) {
    let deadline = Instant::now() + LOST_WAKE_UP;
    while value.waiters() == 0 {
        assert!(
            Instant::now() < deadline,
            "the waiter never started waiting"
        );
        thread::yield_now();
    }
    let mut v = value.lock();
    *v = to;
    v.notify_all();
}

/// Two threads take turns on one counter, each waiting for the other's move: a notify lost
/// in any of the rounds leaves a waiter asleep until the deadline, and the test fails.
#[test]
fn every_handoff_wakes_its_waiter() {
    const ROUNDS: u64 = 10_000;
    let turn = Arc::new(Monitor::new(0_u64));
    // Takes the turns of one parity: waits for the counter to reach its own, then moves it on.
    let player = |parity: u64| {
        let turn = turn.clone();
        move || {
            for mine in (parity..2 * ROUNDS).step_by(2) {
                let mut count = wait_for(&turn, |c| *c == mine);
                *count += 1;
                count.notify_all();
            }
        }
    };
    let even = thread::spawn(player(0));
    let odd = thread::spawn(player(1));
    even.join().unwrap();
    odd.join().unwrap();
    assert_eq!(*turn.lock(), 2 * ROUNDS);
    assert_eq!(turn.waiters(), 0);
}

/// A notify with no waiter is skipped, and neither keeps a later waiter from seeing the
/// change it announced nor from being woken by the next one.
#[test]
fn notify_without_waiter_leaves_a_later_waiter_working() {
    let value = Arc::new(Monitor::new(0_u32));
    {
        let mut v = value.lock();
        *v = 1;
        v.notify_all();
    }
    assert_eq!(value.waiters(), 0);
    assert_eq!(*wait_for(&value, |v| *v == 1), 1);

    let waiter = thread::spawn({
        let value = value.clone();
        move || *wait_for(&value, |v| *v == 2)
    });
    set_once_waited_for(&value, 2);
    assert_eq!(waiter.join().unwrap(), 2);
    assert_eq!(value.waiters(), 0);
}

/// With nothing changing, a wait returns at its deadline and answers that `done` never held.
#[test]
fn wait_answers_false_at_the_deadline() {
    let value = Monitor::new(7_u32);
    let deadline = Instant::now() + Duration::from_millis(20);
    let (v, done) = value.lock().wait_until(Some(deadline), |v| *v != 7);
    assert!(!done);
    assert_eq!(*v, 7);
    drop(v);
    assert_eq!(value.waiters(), 0);
}

/// A condition that panics leaves no waiter counted: the count tells the waiters there are,
/// and the next waiter is woken as before.
#[test]
fn a_panicking_condition_uncounts_its_waiter() {
    let value = Arc::new(Monitor::new(0_u32));
    let panicked = std::panic::catch_unwind(|| {
        let _ = value
            .lock()
            .wait_until(None, |_| panic!("a failing condition"));
    });
    assert!(panicked.is_err());
    assert_eq!(value.waiters(), 0);
    let waiter = thread::spawn({
        let value = value.clone();
        move || *wait_for(&value, |v| *v == 1)
    });
    set_once_waited_for(&value, 1);
    assert_eq!(waiter.join().unwrap(), 1);
    assert_eq!(value.waiters(), 0);
}

//! The store's flusher pool: a fixed number of threads that run the store's flush ticks on the
//! cursors' `flush_interval`, whatever the number of topics and cursors.
//!
//! Owns: the pool's threads and their schedule. Every thread waits for the next deadline, takes
//! it (moving it one interval on), and runs one tick over every dirty cursor of the store
//! ([`super::Store::flush_all`] without returning errors: a cursor's failure is kept for its
//! next `flush` or `close`, as a background flush's). Ticks run one at a time (the journal
//! serializes them); a second thread starts the next tick as soon as one ends when a tick
//! overruns the interval. [`Pool::stop`] ends every thread and waits for it, so once it
//! returns no thread holds the store. Must never: keep the store alive (threads hold a weak
//! reference, upgraded for one tick at a time) or take a cursor's lock while holding anything
//! but the tick.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Inner;
use crate::error::{Error, Result};
use crate::log::lock;

/// The running pool; dropping it stops every thread at its next wake-up, [`Pool::stop`]
/// also waits for them.
#[derive(Debug)]
pub(super) struct Pool {
    /// Dropped to stop: every thread's `recv_timeout` then returns `Disconnected`.
    stop: Option<Sender<()>>,
    /// Set to stop: a thread whose tick is due checks it before it takes the store.
    stopping: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Pool {
    /// Stops every thread and waits until each has ended (a tick in progress ends first), so
    /// no thread holds the store once this returns. Must not run on a thread of the pool
    /// (they hold no store handle, so no store's last handle is dropped on one).
    pub(super) fn stop(mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.stop.take();
        for t in self.threads.drain(..) {
            // A thread that panicked has ended all the same.
            let _ = t.join();
        }
    }
}

/// The schedule the threads share: the instant the next tick is due.
#[derive(Debug)]
struct Schedule {
    next: Mutex<Instant>,
    interval: Duration,
}

impl Schedule {
    /// How long until the next tick is due; when it is due, takes it (moves the deadline one
    /// interval on) and returns `None`.
    fn take_or_wait(&self) -> Option<Duration> {
        let mut next = lock(&self.next);
        let now = Instant::now();
        if *next <= now {
            *next = now + self.interval;
            None
        } else {
            Some(*next - now)
        }
    }
}

/// Starts `threads` threads flushing the store `inner` every `interval`.
///
/// # Errors
/// [`Error::Io`] when a thread cannot be started (the ones started stop again).
pub(super) fn start(inner: &Arc<Inner>, threads: usize, interval: Duration) -> Result<Pool> {
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let stopped = Arc::new(Mutex::new(stopped));
    let schedule = Arc::new(Schedule {
        next: Mutex::new(Instant::now() + interval),
        interval,
    });
    let mut pool = Pool {
        stop: Some(stop),
        stopping: Arc::default(),
        threads: Vec::with_capacity(threads),
    };
    for i in 0..threads {
        let store = Arc::downgrade(inner);
        let stopped = Arc::clone(&stopped);
        let stopping = Arc::clone(&pool.stopping);
        let schedule = Arc::clone(&schedule);
        let spawned = std::thread::Builder::new()
            .name(format!("ackstore-flusher-{i}"))
            .spawn(move || run(&store, &stopped, &stopping, &schedule));
        match spawned {
            Ok(t) => pool.threads.push(t),
            Err(e) => {
                pool.stop();
                return Err(Error::io("start a flusher thread of", "the store", e));
            }
        }
    }
    Ok(pool)
}

fn run(
    store: &Weak<Inner>,
    stopped: &Mutex<Receiver<()>>,
    stopping: &AtomicBool,
    schedule: &Schedule,
) {
    loop {
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        if let Some(wait) = schedule.take_or_wait() {
            // One thread waits on the channel at a time; the others wait for that lock, and all
            // see the disconnection once the pool is dropped.
            let waited = lock(stopped).recv_timeout(wait);
            if !matches!(waited, Err(RecvTimeoutError::Timeout)) {
                return;
            }
            continue;
        }
        let Some(inner) = store.upgrade() else { return };
        // Errors were kept for the cursors (or logged, for a failed commit).
        let _ = inner.flush_tick(true);
    }
}

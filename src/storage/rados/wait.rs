//! Waiting for the ownership lock: an open that finds [`LOCK_OBJECT`] locked watches it (RADOS
//! watch/notify) and tries again when the holder releases it (the holder notifies the watchers
//! after its unlock) or when the holder's lease runs out (the holder writes, with each lease it
//! takes or renews, when it runs out), up to a bound its caller chose
//! ([`RadosStorage::with_lock_wait`](super::RadosStorage::with_lock_wait)).
//!
//! Owns: [`LockWatch`], the watch an open holds while it waits, and the lease-expiry xattr. Never:
//! correctness from the expiry time: it is the holder's clock, only used to decide when to try
//! again; the take itself is the cluster's lock, and a clock that disagrees costs an attempt or
//! a short pause, nothing else.

use std::ffi::c_void;
use std::ptr;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{LOCK_OBJECT, Shared, cstring, epoch_text, ffi, is_errno};
use crate::error::Result;

/// Xattr of [`LOCK_OBJECT`]: when the holder's lease runs out unless renewed, in milliseconds
/// since the Unix epoch by the holder's clock, 20 ASCII decimal digits.
pub(super) const LEASE_EXPIRES_XATTR: &str = "ackstore.lease-expires";
/// How long a releasing owner waits for the watchers to acknowledge its notify.
const NOTIFY_TIMEOUT_MS: u64 = 1_000;
/// The first pause between two attempts once the holder's lease should have run out but its
/// lock is still held (clocks that differ, a renewal still travelling), doubled up to
/// [`RETRY_MAX`]; also the margin added to the expiry time before the first attempt.
const RETRY_MIN: Duration = Duration::from_millis(10);
/// The longest such pause.
const RETRY_MAX: Duration = Duration::from_millis(100);

/// The lease-expiry xattr's value for a lease of `lease` taken or renewed at `at`.
pub(super) fn expires_text(at: SystemTime, lease: Duration) -> String {
    let ms = (at + lease)
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    epoch_text(ms)
}

/// What the watch callbacks and the waiting open share: a count of notifies (and watch
/// errors) seen, and a condition variable signalled with each.
struct WatchCtx {
    shared: Arc<Shared>,
    seen: Mutex<u64>,
    changed: Condvar,
}

impl WatchCtx {
    fn bump(&self) {
        *self.seen.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        self.changed.notify_all();
    }
}

/// Called by librados for each notify on the watched lock object: wakes the waiting open, then
/// acknowledges the notify so that the notifier does not wait for its timeout.
unsafe extern "C" fn on_notify(
    arg: *mut c_void,
    notify_id: u64,
    handle: u64,
    _notifier_id: u64,
    _data: *mut c_void,
    _data_len: usize,
) {
    // SAFETY: `arg` is the `WatchCtx` of a live `LockWatch`: it is freed only after the watch is
    // removed and librados' callbacks are flushed.
    let ctx = unsafe { &*arg.cast::<WatchCtx>() };
    ctx.bump();
    // SAFETY: live context (the `WatchCtx` holds its `Shared`); NUL-terminated name; no payload.
    unsafe {
        ffi::rados_notify_ack(
            ctx.shared.io.raw,
            c"LOCK".as_ptr(),
            notify_id,
            handle,
            ptr::null(),
            0,
        );
    }
}

/// Called by librados when the watch fails: notifies may have been missed, so the waiting open
/// tries again at once.
unsafe extern "C" fn on_error(arg: *mut c_void, _cookie: u64, _err: i32) {
    // SAFETY: as in `on_notify`.
    let ctx = unsafe { &*arg.cast::<WatchCtx>() };
    ctx.bump();
}

/// A watch on [`LOCK_OBJECT`], removed when dropped.
pub(super) struct LockWatch {
    ctx: *mut WatchCtx,
    handle: u64,
}

impl LockWatch {
    pub(super) fn new(shared: &Arc<Shared>) -> Result<Self> {
        let ctx = Box::into_raw(Box::new(WatchCtx {
            shared: shared.clone(),
            seen: Mutex::new(0),
            changed: Condvar::new(),
        }));
        let oid = cstring(LOCK_OBJECT)?;
        let mut handle = 0u64;
        // SAFETY: live context; `ctx` stays valid until `Drop` has removed the watch and
        // flushed the callbacks.
        let ret = shared.io.round_trip("watch", LOCK_OBJECT, || unsafe {
            ffi::rados_watch2(
                shared.io.raw,
                oid.as_ptr(),
                &raw mut handle,
                on_notify,
                on_error,
                ctx.cast(),
            )
        });
        if ret < 0 {
            // SAFETY: the watch was not registered: nothing refers to `ctx`.
            drop(unsafe { Box::from_raw(ctx) });
            return Err(shared.error("watch", LOCK_OBJECT, ret));
        }
        Ok(Self { ctx, handle })
    }

    fn ctx(&self) -> &WatchCtx {
        // SAFETY: freed only by `Drop`.
        unsafe { &*self.ctx }
    }

    /// How many notifies the watch has seen.
    pub(super) fn seen(&self) -> u64 {
        *self
            .ctx()
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until the watch has seen more than `seen` notifies, or until `until`.
    pub(super) fn wait(&self, seen: u64, until: Instant) {
        let ctx = self.ctx();
        let mut count = ctx.seen.lock().unwrap_or_else(PoisonError::into_inner);
        while *count == seen {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            count = ctx
                .changed
                .wait_timeout(count, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Drop for LockWatch {
    fn drop(&mut self) {
        let shared = self.ctx().shared.clone();
        // SAFETY: live context; the watch was registered by `new` and is removed only here.
        shared.io.round_trip("unwatch", LOCK_OBJECT, || unsafe {
            ffi::rados_unwatch2(shared.io.raw, self.handle);
        });
        // SAFETY: live cluster; after the flush no callback runs or will run, so `ctx` can be
        // freed.
        unsafe {
            ffi::rados_watch_flush(shared.io.cluster.0);
            drop(Box::from_raw(self.ctx));
        }
    }
}

impl Shared {
    /// Tells the watchers of [`LOCK_OBJECT`] (waiting opens) that the lock was released.
    pub(super) fn notify_released(&self) {
        let oid = cstring(LOCK_OBJECT).expect("constant");
        // SAFETY: live context; an empty payload; no reply buffer asked for.
        self.io.round_trip("notify", LOCK_OBJECT, || unsafe {
            ffi::rados_notify2(
                self.io.raw,
                oid.as_ptr(),
                c"".as_ptr(),
                0,
                NOTIFY_TIMEOUT_MS,
                ptr::null_mut(),
                ptr::null_mut(),
            );
        });
    }

    /// When the holder's lease runs out unless renewed, by its clock read on this one (`None`
    /// when the lock object carries no expiry: a holder of an earlier release).
    fn lease_expires(&self) -> Result<Option<Instant>> {
        let oid = cstring(LOCK_OBJECT)?;
        let attr = cstring(LEASE_EXPIRES_XATTR)?;
        let mut buf = [0u8; 64];
        // SAFETY: live context; `buf` is writable for its length.
        let ret = self
            .io
            .round_trip("getxattr expiry", LOCK_OBJECT, || unsafe {
                ffi::rados_getxattr(
                    self.io.raw,
                    oid.as_ptr(),
                    attr.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            });
        if is_errno(ret, rustix::io::Errno::NODATA) || is_errno(ret, rustix::io::Errno::NOENT) {
            return Ok(None);
        }
        if ret < 0 {
            return Err(self.error("read the lease expiry of", LOCK_OBJECT, ret));
        }
        let text = String::from_utf8_lossy(&buf[..usize::try_from(ret).unwrap_or(0)]);
        let Ok(ms) = text.parse::<u64>() else {
            return Ok(None);
        };
        let at = UNIX_EPOCH + Duration::from_millis(ms);
        let left = at
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        Ok(Some(Instant::now() + left))
    }
}

/// The state of an open waiting for the lock.
pub(super) struct Waiting {
    deadline: Instant,
    watch: Option<LockWatch>,
    seen: u64,
    retry: Duration,
}

impl Waiting {
    pub(super) fn new(bound: Duration) -> Self {
        Self {
            deadline: Instant::now() + bound,
            watch: None,
            seen: 0,
            retry: RETRY_MIN,
        }
    }

    /// Called before each attempt to take the lock: remembers the notifies seen so far, so
    /// that one arriving between the attempt and the wait is not missed.
    pub(super) fn before_attempt(&mut self) {
        self.seen = self.watch.as_ref().map_or(0, LockWatch::seen);
    }

    /// Called after an attempt found the lock held: waits for a reason to try again; `false`
    /// once the bound has passed.
    pub(super) fn wait(&mut self, shared: &Arc<Shared>) -> Result<bool> {
        let now = Instant::now();
        if now >= self.deadline {
            return Ok(false);
        }
        let Some(watch) = &self.watch else {
            // Watch first, then try again at once: a release before the watch was in place
            // sent its notify to nobody.
            self.watch = Some(LockWatch::new(shared)?);
            return Ok(true);
        };
        let wake = match shared.lease_expires()? {
            Some(at) if at > now => {
                self.retry = RETRY_MIN;
                at + RETRY_MIN
            }
            _ => {
                let at = now + self.retry;
                self.retry = (self.retry * 2).min(RETRY_MAX);
                at
            }
        };
        watch.wait(self.seen, wake.min(self.deadline));
        Ok(true)
    }
}

//! Ownership of a namespace: the exclusive RADOS lock on [`LOCK_OBJECT`] with a lease renewed
//! while the guard lives (by the connection's one renewal thread, [`super::renewer`]), the owner epoch raised by compare-and-set on each new
//! owner (each object is stamped with it on the owner's first touch, see [`super`]).
//!
//! Owns: [`Lease`], what the lock guard releases, and the handle's [`LeaseState`]. Never:
//! correctness from lease timing; a former owner is fenced by the epoch compare in its writes,
//! not by its lease.
//!
//! Invariant: a renewal renews only what this owner still holds. Each renewal is one RADOS
//! write operation on [`LOCK_OBJECT`] that compares the owner epoch with this owner's before its
//! lock step, so a lease that lapsed (the owner paused past it) is taken back only while no
//! newer owner has raised the epoch; once one has (whether it still holds the lock, released
//! it, or died and let it expire), or while another owner holds the lock, the renewal fails,
//! the state becomes [`LeaseState::Lost`], the lost-lease hooks run, renewals stop for good and
//! the handle refuses every write locally (the cluster refuses those that reach an object a
//! newer owner stamped anyway).

use std::ffi::{CStr, CString};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use super::op::{Completion, WriteOp};
use super::renewer::Held;
use super::wait::{LEASE_EXPIRES_XATTR, Waiting, expires_text};
use super::{
    LOCK_NAME, LOCK_OBJECT, OWNER_EPOCH_XATTR, RadosStorage, Shared, cstring, epoch_text, ffi,
    is_errno, os_error,
};
use crate::error::{Error, Result};
use crate::observe;
use crate::storage::{LeaseState, LockGuard};

/// The OSD object class that implements RADOS locks, and its method that takes or renews one.
const LOCK_CLASS: &str = "lock";
const LOCK_METHOD: &str = "lock";
/// The lock type `exclusive` of the `lock` class.
const LOCK_TYPE_EXCLUSIVE: u8 = 1;
/// How many times an open reads the owner epoch again after finding it moved, before it
/// reports the lock as held.
const EPOCH_REREADS: u32 = 16;
/// The description the lock carries (shown by `rados lock info`).
const LOCK_DESCRIPTION: &str = "ackstore owner";

impl RadosStorage {
    /// Breaks the ownership lock whoever holds it (an operator who knows the holder is gone and
    /// does not want to wait for its lease). The holder's writes are refused from the moment the
    /// next owner has taken the lock and stamped the namespace; breaking alone fences nothing.
    pub fn break_lock(&self) -> Result<()> {
        let io = &self.shared.io;
        let (oid, name) = (cstring(LOCK_OBJECT)?, cstring(LOCK_NAME)?);
        for (client, cookie) in self.lockers()? {
            // SAFETY: live context and NUL-terminated strings.
            let ret = unsafe {
                ffi::rados_break_lock(
                    io.raw,
                    oid.as_ptr(),
                    name.as_ptr(),
                    client.as_ptr(),
                    cookie.as_ptr(),
                )
            };
            if ret < 0 && !is_errno(ret, rustix::io::Errno::NOENT) {
                return Err(self.shared.error("break the lock", LOCK_OBJECT, ret));
            }
        }
        Ok(())
    }

    /// Whether an owner (this handle or any other) holds the ownership lock now: a lease that
    /// ran out without renewal is not held. For a broker waiting for a namespace, and for
    /// monitoring; an open can still find the lock taken a moment later.
    pub fn lock_held(&self) -> Result<bool> {
        Ok(!self.lockers()?.is_empty())
    }

    /// The client and cookie of every holder of the ownership lock whose lease runs.
    fn lockers(&self) -> Result<Vec<(CString, CString)>> {
        let io = &self.shared.io;
        let (oid, name) = (cstring(LOCK_OBJECT)?, cstring(LOCK_NAME)?);
        let mut exclusive = 0;
        let mut bufs = [[0u8; 4096]; 4];
        let mut lens = [4096usize; 4];
        let [tag, clients, cookies, addrs] = &mut bufs;
        let [tag_len, clients_len, cookies_len, addrs_len] = &mut lens;
        // SAFETY: live context; every buffer is writable for the length given with it.
        let count = unsafe {
            ffi::rados_list_lockers(
                io.raw,
                oid.as_ptr(),
                name.as_ptr(),
                &raw mut exclusive,
                tag.as_mut_ptr().cast(),
                tag_len,
                clients.as_mut_ptr().cast(),
                clients_len,
                cookies.as_mut_ptr().cast(),
                cookies_len,
                addrs.as_mut_ptr().cast(),
                addrs_len,
            )
        };
        let count = i32::try_from(count).unwrap_or(i32::MIN);
        // No lock object yet: nobody ever held the lock.
        if is_errno(count, rustix::io::Errno::NOENT) {
            return Ok(Vec::new());
        }
        if count < 0 {
            return Err(self.shared.error("list lockers", LOCK_OBJECT, count));
        }
        // The lists are NUL-separated, one client and one cookie per locker.
        let split = |buf: &[u8], len: usize| -> Vec<CString> {
            buf[..len.min(buf.len())]
                .split(|b| *b == 0)
                .filter(|s| !s.is_empty())
                .map(|s| CString::new(s).expect("split at NUL"))
                .collect()
        };
        let clients = split(&bufs[1], lens[1]);
        let cookies = split(&bufs[2], lens[2]);
        Ok(clients.into_iter().zip(cookies).collect())
    }

    /// Takes the exclusive lock with cookie `cookie` if nobody holds it, and raises the owner
    /// epoch from `old` to the next, in one RADOS write operation on [`LOCK_OBJECT`]: the
    /// `lock` class's lock step (no flag: it takes a free lock, never renews one), a compare
    /// of the owner epoch with `old`, the new epoch and the lease's expiry. The operation is
    /// atomic: a lock held by another owner fails it (`EBUSY`), and so does an epoch that moved
    /// since it was read (`ECANCELED`): the lock is taken exactly when the epoch is raised.
    fn take_lock(shared: &Shared, cookie: &CStr, lease: Duration, old: &OwnerEpoch) -> i32 {
        let expires = expires_text(SystemTime::now(), lease);
        let mut op = WriteOp::new();
        if old.missing {
            // The first owner of the namespace makes the lock object: an exclusive create
            // instead of the compare (which reads the object as it was before the operation),
            // refused with `EEXIST` when another owner made it first.
            op.create_exclusive();
        }
        op.exec(
            LOCK_CLASS,
            LOCK_METHOD,
            &lock_op_input(cookie.to_bytes(), lease, 0),
        );
        if !old.missing {
            op.cmpxattr(OWNER_EPOCH_XATTR, ffi::CMPXATTR_OP_EQ, &old.text);
        }
        op.setxattr(OWNER_EPOCH_XATTR, &epoch_text(old.next))
            .setxattr(LEASE_EXPIRES_XATTR, &expires);
        op.run(&shared.io, &cstring(LOCK_OBJECT).expect("constant"))
    }

    /// Sends the renewal of the lease `held`, one RADOS write operation on [`LOCK_OBJECT`]: a
    /// compare of the owner epoch (equal to the lease's), then the `lock` class's lock step with
    /// `LOCK_FLAG_MAY_RENEW`. The lock step renews the lock this cookie holds, or takes it again
    /// after its lease lapsed while nobody else took it; the compare makes the whole operation
    /// fail (`ECANCELED`) once a newer owner raised the epoch, so a lapsed lease is never taken
    /// back from an owner that came and went meanwhile.
    pub(super) fn send_renewal(held: &Held) -> std::result::Result<Completion, i32> {
        let expires = expires_text(SystemTime::now(), held.lease);
        let mut op = WriteOp::new();
        op.cmpxattr(
            OWNER_EPOCH_XATTR,
            ffi::CMPXATTR_OP_EQ,
            &epoch_text(held.epoch),
        )
        .exec(
            LOCK_CLASS,
            LOCK_METHOD,
            &lock_op_input(held.cookie.to_bytes(), held.lease, ffi::LOCK_FLAG_MAY_RENEW),
        )
        .setxattr(LEASE_EXPIRES_XATTR, &expires);
        op.send(&held.shared.io, &cstring(LOCK_OBJECT).expect("constant"))
    }

    /// Settles a renewal of the lease `held` that answered `ret`: counts it, or tells the
    /// storage its lease is lost (calling its hooks), or logs a failure to be tried again at
    /// the next third of the lease. Whether the lease is still to be renewed.
    pub(super) fn settle_renewal(held: &Held, ret: i32) -> bool {
        let shared = &held.shared;
        let location = &shared.location;
        match Renewal::of(ret) {
            Renewal::Renewed => {
                shared.renewals.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(observe::LEASE_RENEWALS, "topic" => location.clone())
                    .increment(1);
                true
            }
            Renewal::Lost(why) => {
                shared.lose(
                    held.epoch,
                    &format!("the ownership lease of {location} is lost: {why}"),
                );
                false
            }
            Renewal::Failed => {
                metrics::counter!(observe::LEASE_RENEWAL_FAILURES, "topic" => location.clone())
                    .increment(1);
                log::warn!(
                    target: observe::LOG_TARGET,
                    "could not renew the ownership lease of {location}: {}",
                    os_error(ret)
                );
                true
            }
        }
    }

    /// The owner epoch kept on the lock object (empty text and 0 before the first owner), and
    /// the next one.
    fn owner_epoch(&self) -> Result<OwnerEpoch> {
        let shared = &self.shared;
        let oid = cstring(LOCK_OBJECT)?;
        let attr = cstring(OWNER_EPOCH_XATTR)?;
        let mut buf = [0u8; 64];
        // SAFETY: live context; `buf` is writable for its length.
        let ret = shared.io.round_trip("getxattr", LOCK_OBJECT, || unsafe {
            ffi::rados_getxattr(
                shared.io.raw,
                oid.as_ptr(),
                attr.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        });
        let missing = is_errno(ret, rustix::io::Errno::NOENT);
        let text = if missing || is_errno(ret, rustix::io::Errno::NODATA) {
            String::new()
        } else if ret < 0 {
            return Err(shared.error("read the owner epoch", LOCK_OBJECT, ret));
        } else {
            String::from_utf8_lossy(&buf[..usize::try_from(ret).unwrap_or(0)]).into_owned()
        };
        let old: u64 = if text.is_empty() {
            0
        } else {
            text.parse().map_err(|_| Error::NotAckstore {
                path: shared.path(LOCK_OBJECT),
                reason: format!("its owner epoch `{}` is not a number", text.escape_debug()),
            })?
        };
        // An epoch at its limit cannot be raised: wrapping to 0 would make an owner whose
        // writes carry no guard at all.
        let next = old.checked_add(1).ok_or_else(|| Error::NotAckstore {
            path: shared.path(LOCK_OBJECT),
            reason: format!("its owner epoch {old} cannot be raised"),
        })?;
        Ok(OwnerEpoch {
            text,
            next,
            missing,
        })
    }

    /// Takes the ownership lock (see the module documentation of [`super`]): the lock with
    /// its lease, a raised owner epoch, the lease registered with the connection's renewals.
    /// Nothing else: each object is stamped with the epoch before this owner first touches it
    /// ([`Shared::touch`]), so the cost of a takeover does not grow with the namespace.
    pub(super) fn acquire(&self) -> Result<LockGuard> {
        let shared = &self.shared;
        let lease = *shared.lease.lock().unwrap_or_else(PoisonError::into_inner);
        let cookie = cstring(&format!(
            "{:016x}",
            std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), 0u8)
        ))?;
        let bound = *shared
            .lock_wait
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut waiting = Waiting::new(bound);
        // Read once: only an owner that takes the lock raises it, and then this open's next
        // attempt finds the lock held (or, once that owner is gone, fails on the epoch and
        // reads it again).
        let mut old = self.owner_epoch()?;
        let mut moved = 0;
        let taken_instant = loop {
            waiting.before_attempt();
            let at = Instant::now();
            let ret = Self::take_lock(shared, &cookie, lease, &old);
            if is_errno(ret, rustix::io::Errno::CANCELED)
                || (old.missing && is_errno(ret, rustix::io::Errno::EXIST))
            {
                // Another owner took the lock and raised the epoch since it was read (or made
                // the lock object); it may be gone already (its lease ran out). Owners that
                // keep coming and going are holders like any other.
                moved += 1;
                if moved > EPOCH_REREADS {
                    return Err(Error::Locked {
                        path: PathBuf::from(&shared.location),
                    });
                }
                old = self.owner_epoch()?;
                continue;
            }
            if is_errno(ret, rustix::io::Errno::BUSY) || is_errno(ret, rustix::io::Errno::EXIST) {
                if waiting.wait(shared)? {
                    continue;
                }
                return Err(Error::Locked {
                    path: PathBuf::from(&shared.location),
                });
            }
            if ret < 0 {
                return Err(shared.error("lock", LOCK_OBJECT, ret));
            }
            break at;
        };
        drop(waiting);
        let epoch = old.next;
        let mut lease_guard = Lease {
            renewal: None,
            shared: shared.clone(),
            cookie,
            epoch,
        };
        shared.last_epoch.store(epoch, Ordering::Release);
        shared.epoch.store(epoch, Ordering::Release);
        shared.set_lease(LeaseState::Held { epoch });
        let held = Held {
            shared: shared.clone(),
            cookie: lease_guard.cookie.clone(),
            lease,
            epoch,
        };
        lease_guard.renewal = Some(shared.renewer.join(held, taken_instant)?);
        Ok(LockGuard::new(Box::new(lease_guard)))
    }

    /// Calls `hook` once this handle loses the lease of a lock it holds (at once if it already
    /// has), on the renewal thread of the [`RadosCluster`](super::RadosCluster) connection it
    /// was made from, with the [`LeaseState::Lost`] that
    /// [`Storage::lease_state`](crate::Storage::lease_state) reports from then on. Keep it short
    /// (hand the news to the broker's own thread): that one thread renews every lease held
    /// through the connection, and none is renewed until the hook returns. Hooks stay
    /// registered for later leases of this handle.
    pub fn on_lease_lost(&self, hook: impl Fn(&LeaseState) + Send + Sync + 'static) {
        let hook: LostHook = Arc::new(hook);
        let state = self.shared.lease_state();
        self.shared
            .lost_hooks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(hook.clone());
        if matches!(state, LeaseState::Lost { .. }) {
            hook(&state);
        }
    }
}

/// The owner epoch on the lock object as read: its text (compared as it is) and the epoch
/// that follows it.
struct OwnerEpoch {
    text: String,
    next: u64,
    /// The lock object did not exist.
    missing: bool,
}

/// A callback of [`RadosStorage::on_lease_lost`].
pub(super) type LostHook = Arc<dyn Fn(&LeaseState) + Send + Sync>;

/// What one renewal found.
#[derive(Debug, PartialEq, Eq)]
pub enum Renewal {
    /// The lease runs for another lease from now.
    Renewed,
    /// Another owner holds the lock, or the owner epoch is no longer this handle's: the lease
    /// is gone for good (the sentence says which).
    Lost(&'static str),
    /// The renewal failed otherwise (a timeout while the cluster was out of reach): tried again
    /// at the next tick, since giving up would hand a live owner's namespace to the next process
    /// to ask.
    Failed,
}

impl Renewal {
    /// The meaning of a renewal's librados return code.
    #[must_use]
    pub fn of(ret: i32) -> Self {
        use rustix::io::Errno;
        if ret >= 0 {
            Self::Renewed
        } else if is_errno(ret, Errno::CANCELED) {
            Self::Lost("a newer owner raised the owner epoch")
        } else if is_errno(ret, Errno::BUSY) || is_errno(ret, Errno::EXIST) {
            Self::Lost("another owner holds the lock")
        } else if is_errno(ret, Errno::NOENT) || is_errno(ret, Errno::NODATA) {
            Self::Lost("the lock object or its owner epoch is gone")
        } else {
            Self::Failed
        }
    }
}

/// The input of the `lock` object class's `lock` method (Ceph's `cls_lock_lock_op`, encoding
/// version 1, compatible with 1) for an exclusive lock `LOCK_NAME` held with `cookie` for
/// `lease`, described as `LOCK_DESCRIPTION`, with an empty tag: the call `rados_lock_exclusive`
/// makes, as one step of a compound operation (the C API has no such step of its own). All
/// integers little-endian:
///
/// ```text
/// u8 version = 1 | u8 compat = 1 | u32 body length
/// body: str name | u8 type = 1 (exclusive) | str cookie | str tag | str description
///       | u32 lease seconds | u32 lease nanoseconds | u8 flags
/// str: u32 length | bytes
/// ```
#[must_use]
pub fn lock_op_input(cookie: &[u8], lease: Duration, flags: u8) -> Vec<u8> {
    fn put_str(out: &mut Vec<u8>, s: &[u8]) {
        out.extend_from_slice(&u32::try_from(s.len()).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(s);
    }
    let mut body = Vec::new();
    put_str(&mut body, LOCK_NAME.as_bytes());
    body.push(LOCK_TYPE_EXCLUSIVE);
    put_str(&mut body, cookie);
    put_str(&mut body, b"");
    put_str(&mut body, LOCK_DESCRIPTION.as_bytes());
    body.extend_from_slice(
        &u32::try_from(lease.as_secs())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    body.extend_from_slice(&lease.subsec_nanos().to_le_bytes());
    body.push(flags);
    let mut out = vec![1, 1];
    out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// What the lock guard releases: the lease's place in the connection's renewals, then the
/// lock.
struct Lease {
    /// The lease's id in the connection's [`super::renewer::Renewer`], once registered.
    renewal: Option<u64>,
    shared: Arc<Shared>,
    cookie: CString,
    epoch: u64,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(id) = self.renewal.take() {
            // Never renewed again once this returns (a lost-lease hook that closes the store
            // drops this guard on the renewal thread, whose renewal of it is over).
            self.shared.renewer.leave(id);
        }
        // The handle holds no lock from here (unless it took a newer one meanwhile); its
        // writes still carry this epoch (`last_epoch`), so the cluster refuses them on every
        // object a newer owner stamped.
        let _ =
            self.shared
                .epoch
                .compare_exchange(self.epoch, 0, Ordering::AcqRel, Ordering::Acquire);
        self.shared.release_lease(self.epoch);
        let (oid, name) = (
            cstring(LOCK_OBJECT).expect("constant"),
            cstring(LOCK_NAME).expect("constant"),
        );
        // SAFETY: live context and NUL-terminated strings. A lock already lost (expired and
        // taken) answers an error, which changes nothing.
        let ret = self.shared.io.round_trip("unlock", LOCK_OBJECT, || unsafe {
            ffi::rados_unlock(
                self.shared.io.raw,
                oid.as_ptr(),
                name.as_ptr(),
                self.cookie.as_ptr(),
            )
        });
        if ret >= 0 {
            self.shared.notify_released();
        }
    }
}

impl Shared {
    /// The lease state of this handle.
    pub(super) fn lease_state(&self) -> LeaseState {
        self.lease_state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_lease(&self, state: LeaseState) {
        self.lost
            .store(matches!(state, LeaseState::Lost { .. }), Ordering::Release);
        *self
            .lease_state
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = state;
    }

    /// Records that the lease of owner `epoch` is lost, then calls the hooks.
    fn lose(&self, epoch: u64, reason: &str) {
        {
            let mut state = self
                .lease_state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if *state != (LeaseState::Held { epoch }) {
                return;
            }
            self.lost.store(true, Ordering::Release);
            *state = LeaseState::Lost {
                epoch,
                reason: reason.to_owned(),
            };
        }
        metrics::counter!(observe::LEASES_LOST, "topic" => self.location.clone()).increment(1);
        log::warn!(target: observe::LOG_TARGET, "{reason}; its writes are refused from now on");
        let state = self.lease_state();
        let hooks = self
            .lost_hooks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for hook in hooks {
            hook(&state);
        }
    }

    /// The guard of owner `epoch` is gone: a held lease is no longer held (a lost one stays
    /// reported lost until the next lock).
    fn release_lease(&self, epoch: u64) {
        let mut state = self
            .lease_state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if *state == (LeaseState::Held { epoch }) {
            *state = LeaseState::NotHeld;
        }
    }

    /// The epoch a mutating operation writes with: [`Error::Fenced`] once the lease is lost.
    /// After the lock is released, the released lease's epoch: the cluster refuses the write
    /// on every object a newer owner stamped (never an unguarded write of a former owner).
    pub(super) fn write_epoch(&self) -> Result<u64> {
        if self.lost.load(Ordering::Acquire) {
            return Err(Error::Fenced {
                what: self.location.clone(),
            });
        }
        Ok(self.guard_epoch())
    }

    /// The epoch of the lock held, else of the last one released (0: never locked).
    pub(super) fn guard_epoch(&self) -> u64 {
        match self.epoch() {
            0 => self.last_epoch.load(Ordering::Acquire),
            held => held,
        }
    }

    /// The epoch a write of a file opened under lease `opened` (its [`Self::guard_epoch`] then)
    /// carries: [`Error::Fenced`] once this handle holds a later lease, whose owner may have
    /// read the object since (a thread of an earlier session of the same handle is an older
    /// owner like any other).
    pub(super) fn file_write_epoch(&self, opened: u64) -> Result<u64> {
        let epoch = self.write_epoch()?;
        if opened > 0 && opened != epoch {
            return Err(Error::Fenced {
                what: self.location.clone(),
            });
        }
        Ok(epoch)
    }
}

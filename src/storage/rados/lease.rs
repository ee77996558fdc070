//! Ownership of a namespace: the exclusive RADOS lock on [`LOCK_OBJECT`] with a lease renewed
//! by a thread while the guard lives, the owner epoch raised by compare-and-set on each new
//! owner, and the stamping of that epoch into every object (see [`super`]).
//!
//! Owns: [`Lease`], what the lock guard releases. Never: correctness from lease timing; a
//! former owner is fenced by the epoch compare in its writes, not by its lease.

use std::ffi::{CStr, CString};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, PoisonError};
use std::thread;
use std::time::Duration;

use super::op::WriteOp;
use super::{
    EPOCH_XATTR, LOCK_NAME, LOCK_OBJECT, OWNER_EPOCH_XATTR, RadosStorage, Shared, cstring,
    epoch_text, ffi, is_errno, os_error,
};
use crate::error::{Error, Result};
use crate::storage::LockGuard;

impl RadosStorage {
    /// Breaks the ownership lock whoever holds it (an operator who knows the holder is gone and
    /// does not want to wait for its lease). The holder's writes are refused from the moment the
    /// next owner has taken the lock and stamped the namespace; breaking alone fences nothing.
    pub fn break_lock(&self) -> Result<()> {
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
        for (client, cookie) in clients.iter().zip(&cookies) {
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

    /// Takes the exclusive lock with cookie `cookie` (or renews it).
    fn take_lock(shared: &Shared, cookie: &CStr, lease: Duration, flags: u8) -> i32 {
        let (oid, name, desc) = (
            cstring(LOCK_OBJECT).expect("constant"),
            cstring(LOCK_NAME).expect("constant"),
            cstring("ackstore owner").expect("constant"),
        );
        let mut duration = ffi::Timeval {
            tv_sec: i64::try_from(lease.as_secs()).unwrap_or(i64::MAX),
            tv_usec: i64::from(lease.subsec_micros()),
        };
        // SAFETY: live context, NUL-terminated strings, valid duration.
        unsafe {
            ffi::rados_lock_exclusive(
                shared.io.raw,
                oid.as_ptr(),
                name.as_ptr(),
                cookie.as_ptr(),
                desc.as_ptr(),
                &raw mut duration,
                flags,
            )
        }
    }

    /// Raises the owner epoch on the lock object by compare-and-set; the new epoch.
    fn raise_epoch(&self) -> Result<u64> {
        let shared = &self.shared;
        let oid = cstring(LOCK_OBJECT)?;
        let attr = cstring(OWNER_EPOCH_XATTR)?;
        let mut buf = [0u8; 64];
        // SAFETY: live context; `buf` is writable for its length.
        let ret = unsafe {
            ffi::rados_getxattr(
                shared.io.raw,
                oid.as_ptr(),
                attr.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        let old_text = if is_errno(ret, rustix::io::Errno::NODATA) {
            String::new()
        } else if ret < 0 {
            return Err(shared.error("read the owner epoch", LOCK_OBJECT, ret));
        } else {
            String::from_utf8_lossy(&buf[..usize::try_from(ret).unwrap_or(0)]).into_owned()
        };
        let old: u64 = if old_text.is_empty() {
            0
        } else {
            old_text.parse().map_err(|_| Error::NotAckstore {
                path: shared.path(LOCK_OBJECT),
                reason: format!(
                    "its owner epoch `{}` is not a number",
                    old_text.escape_debug()
                ),
            })?
        };
        // An epoch at its limit cannot be raised: wrapping to 0 would make an owner whose
        // writes carry no guard at all.
        let new = old.checked_add(1).ok_or_else(|| Error::NotAckstore {
            path: shared.path(LOCK_OBJECT),
            reason: format!("its owner epoch {old} cannot be raised"),
        })?;
        let mut op = WriteOp::new();
        op.cmpxattr(OWNER_EPOCH_XATTR, ffi::CMPXATTR_OP_EQ, &old_text)
            .setxattr(OWNER_EPOCH_XATTR, &epoch_text(new));
        let ret = op.run(&shared.io, &oid);
        if ret < 0 {
            return Err(shared.error("raise the owner epoch", LOCK_OBJECT, ret));
        }
        Ok(new)
    }

    /// Stamps `epoch` into every object of the namespace, each refused if a newer owner
    /// stamped it first ([`Error::Fenced`]), and drops from the index the names whose object
    /// is gone (a create or remove cut between its two steps).
    fn stamp_all(&self, epoch: u64) -> Result<()> {
        let shared = &self.shared;
        let text = epoch_text(epoch);
        for (name, present) in shared.scan("")? {
            if !present {
                shared.index_remove(&name)?;
                continue;
            }
            let oid = cstring(&name)?;
            let mut op = WriteOp::new();
            op.cmpxattr(EPOCH_XATTR, ffi::CMPXATTR_OP_GTE, &text)
                .setxattr(EPOCH_XATTR, &text);
            let ret = op.run(&shared.io, &oid);
            // An object removed since the listing needs no stamp.
            if ret < 0 && !is_errno(ret, rustix::io::Errno::NOENT) {
                return Err(shared.error("stamp the owner epoch", &name, ret));
            }
        }
        Ok(())
    }

    /// Takes the ownership lock (see the module documentation of [`super`]): the lock with
    /// its lease and renewal thread, a raised owner epoch, every object stamped with it.
    pub(super) fn acquire(&self) -> Result<LockGuard> {
        let shared = &self.shared;
        let lease = *shared.lease.lock().unwrap_or_else(PoisonError::into_inner);
        let cookie = cstring(&format!(
            "{:016x}",
            std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), 0u8)
        ))?;
        let ret = Self::take_lock(shared, &cookie, lease, 0);
        if is_errno(ret, rustix::io::Errno::BUSY) || is_errno(ret, rustix::io::Errno::EXIST) {
            return Err(Error::Locked {
                path: PathBuf::from(&shared.location),
            });
        }
        if ret < 0 {
            return Err(shared.error("lock", LOCK_OBJECT, ret));
        }
        let (stop, stopped) = mpsc::channel::<()>();
        let location = shared.location.clone();
        let renewer = {
            let shared = shared.clone();
            let cookie = cookie.clone();
            thread::Builder::new()
                .name("ackstore-rados-lease".into())
                .spawn(move || {
                    loop {
                        match stopped.recv_timeout(lease / 3) {
                            Err(RecvTimeoutError::Timeout) => {}
                            _ => return,
                        }
                        let ret =
                            Self::take_lock(&shared, &cookie, lease, ffi::LOCK_FLAG_MAY_RENEW);
                        let taken = is_errno(ret, rustix::io::Errno::BUSY)
                            || is_errno(ret, rustix::io::Errno::EXIST);
                        if taken {
                            // Taken by another owner after it expired: this handle's writes are
                            // refused from the moment that owner stamped the namespace.
                            log::warn!(
                                "lost the ownership lease of {}: {}",
                                shared.location,
                                os_error(ret)
                            );
                            return;
                        }
                        if ret < 0 {
                            // A renewal that failed otherwise (a timeout while the cluster was
                            // out of reach) is tried again at the next tick: giving up would
                            // hand a live owner's namespace to the next process to ask.
                            log::warn!(
                                "could not renew the ownership lease of {}: {}",
                                shared.location,
                                os_error(ret)
                            );
                        }
                    }
                })
                .map_err(|e| Error::io("start the lease renewal thread", location, e))?
        };
        let mut lease_guard = Lease {
            stop: Some(stop),
            renewer: Some(renewer),
            shared: shared.clone(),
            cookie,
            epoch: 0,
        };
        let epoch = self.raise_epoch()?;
        lease_guard.epoch = epoch;
        shared.epoch.store(epoch, Ordering::Release);
        self.stamp_all(epoch)?;
        Ok(LockGuard::new(Box::new(lease_guard)))
    }
}

/// What the lock guard releases: the renewal thread, then the lock.
struct Lease {
    stop: Option<mpsc::Sender<()>>,
    renewer: Option<thread::JoinHandle<()>>,
    shared: Arc<Shared>,
    cookie: CString,
    epoch: u64,
}

impl Drop for Lease {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(renewer) = self.renewer.take() {
            let _ = renewer.join();
        }
        // Writes after the guard is gone carry no epoch only if no newer lock was taken by
        // this handle meanwhile.
        let _ =
            self.shared
                .epoch
                .compare_exchange(self.epoch, 0, Ordering::AcqRel, Ordering::Acquire);
        let (oid, name) = (
            cstring(LOCK_OBJECT).expect("constant"),
            cstring(LOCK_NAME).expect("constant"),
        );
        // SAFETY: live context and NUL-terminated strings. A lock already lost (expired and
        // taken) answers an error, which changes nothing.
        unsafe {
            ffi::rados_unlock(
                self.shared.io.raw,
                oid.as_ptr(),
                name.as_ptr(),
                self.cookie.as_ptr(),
            );
        }
    }
}

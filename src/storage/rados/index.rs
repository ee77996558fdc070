//! The names of a namespace, kept as omap keys of [`INDEX_OBJECT`] (listing a namespace would
//! walk every object of the pool).
//!
//! Owns: the order of a name's two steps: added before its object is created, removed after its
//! object is removed, so an object is never without its name, and a listing (the names whose
//! object exists) is exact. The index is only a faster listing: when its object is missing (a
//! namespace that never had a name, or an index lost to damage), the names are those of a walk
//! of the namespace, and the next name added first writes every walked name back, so a lost
//! index never makes a namespace look empty.

use std::ffi::{CStr, c_char};
use std::ptr;

use super::op::{Completion, WriteOp};
use super::{
    INDEX_OBJECT, INDEX_PAGE, LOCK_OBJECT, Shared, cstring, ffi, is_errno, os_error, validate_name,
};
use crate::error::{Error, Result};

/// How many times [`Shared::scan`] reads the index again while names keep being replaced.
const SCAN_ROUNDS: usize = 64;

impl Shared {
    /// Adds `name` to the namespace's index of names (before the object is created). When the
    /// index object is missing, it is first rebuilt from a walk of the namespace.
    pub(super) fn index_add(&self, name: &str) -> Result<()> {
        let ret = self.index_set(&[name.to_owned()], true)?;
        if is_errno(ret, rustix::io::Errno::NOENT) {
            let mut names = self.walk_names()?;
            names.push(name.to_owned());
            for page in names.chunks(usize::try_from(INDEX_PAGE).unwrap_or(usize::MAX)) {
                let ret = self.index_set(page, false)?;
                if ret < 0 {
                    return Err(self.error("rebuild the index of names for", name, ret));
                }
            }
            return Ok(());
        }
        if ret < 0 {
            return Err(self.error("record the name of", name, ret));
        }
        Ok(())
    }

    /// Sets `names` as keys of the index object (only if it exists, with `existing`); the
    /// librados return code.
    fn index_set(&self, names: &[String], existing: bool) -> Result<i32> {
        let keys = names
            .iter()
            .map(|n| cstring(n))
            .collect::<Result<Vec<_>>>()?;
        let key_ptrs: Vec<*const c_char> = keys.iter().map(|k| k.as_ptr()).collect();
        let vals: Vec<*const c_char> = vec![c"".as_ptr(); keys.len()];
        let lens = vec![0usize; keys.len()];
        let op = WriteOp::new();
        // SAFETY: live operation; librados copies keys and values before this returns, and the
        // three arrays have `keys.len()` elements.
        unsafe {
            if existing {
                ffi::rados_write_op_assert_exists(op.raw);
            }
            ffi::rados_write_op_omap_set(
                op.raw,
                key_ptrs.as_ptr(),
                vals.as_ptr(),
                lens.as_ptr(),
                keys.len(),
            );
        }
        Ok(op.run(&self.io, &cstring(INDEX_OBJECT)?))
    }

    /// The names of the objects of the namespace, by a walk of it (every object of the pool),
    /// sorted: what the index holds when it is missing. Objects that are not files (the lock,
    /// anything with a name ackstore never makes) are left out.
    pub(super) fn walk_names(&self) -> Result<Vec<String>> {
        let mut ctx: ffi::ListCtxT = ptr::null_mut();
        // A walk waits for the cluster page by page: counted as one round trip.
        self.io
            .round_trips
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: live context, valid out-pointer.
        let ret = unsafe { ffi::rados_nobjects_list_open(self.io.raw, &raw mut ctx) };
        if ret < 0 {
            return Err(Error::io("list", &self.location, os_error(ret)));
        }
        let mut names = Vec::new();
        let end = loop {
            let mut entry: *const c_char = ptr::null();
            // SAFETY: `ctx` is open; the entry stays valid until the next call on `ctx`.
            let ret = unsafe {
                ffi::rados_nobjects_list_next(ctx, &raw mut entry, ptr::null_mut(), ptr::null_mut())
            };
            if ret < 0 {
                break ret;
            }
            // SAFETY: a NUL-terminated name, copied before the next call on `ctx`.
            if let Ok(name) = unsafe { CStr::from_ptr(entry) }.to_str()
                && name != LOCK_OBJECT
                && validate_name(name).is_ok()
            {
                names.push(name.to_owned());
            }
        };
        // SAFETY: opened above, closed once.
        unsafe { ffi::rados_nobjects_list_close(ctx) };
        if !is_errno(end, rustix::io::Errno::NOENT) {
            return Err(Error::io("list", &self.location, os_error(end)));
        }
        names.sort();
        Ok(names)
    }

    /// Removes `name` from the index of names (after the object is removed), without waiting
    /// for the cluster's answer: a name whose object is gone is left out of every listing
    /// anyway, and a later operation of this client on the index is applied after this one
    /// (RADOS keeps one client's order on an object). The answer is collected later
    /// ([`Shared::detach`]); a removal that failed leaves the name in the index, as a removal
    /// cut short by a crash does.
    pub(super) fn index_remove(&self, name: &str) -> Result<()> {
        let key = cstring(name)?;
        let keys = [key.as_ptr()];
        let op = WriteOp::new();
        // SAFETY: live operation; librados copies the keys before this returns.
        unsafe { ffi::rados_write_op_omap_rm_keys(op.raw, keys.as_ptr(), 1) };
        match op.send(&self.io, &cstring(INDEX_OBJECT)?) {
            Ok(done) => {
                self.detach(done);
                Ok(())
            }
            Err(ret) => Err(self.error("forget the name of", name, ret)),
        }
    }

    /// Every name in the index that starts with `prefix` (all with `""`), sorted (omap keys
    /// come in order). The OSD seeks to the prefix and returns only matching keys, so a
    /// prefix's listing costs what it returns, not the whole index.
    pub(super) fn index_names(&self, prefix: &str) -> Result<Vec<String>> {
        let index = cstring(INDEX_OBJECT)?;
        let filter = cstring(prefix)?;
        let mut names: Vec<String> = Vec::new();
        loop {
            let after = cstring(names.last().map_or("", String::as_str))?;
            // SAFETY: no preconditions.
            let op = unsafe { ffi::rados_create_read_op() };
            assert!(
                !op.is_null(),
                "librados could not allocate a read operation"
            );
            let mut iter: ffi::OmapIterT = ptr::null_mut();
            let mut more = 0u8;
            let mut prval = 0;
            // SAFETY: live operation; the out-pointers outlive the `operate` below.
            let ret = unsafe {
                ffi::rados_read_op_omap_get_vals2(
                    op,
                    after.as_ptr(),
                    filter.as_ptr(),
                    INDEX_PAGE,
                    &raw mut iter,
                    &raw mut more,
                    &raw mut prval,
                );
                self.io.round_trip("omap read", INDEX_OBJECT, || {
                    ffi::rados_read_op_operate(
                        op,
                        self.io.raw,
                        index.as_ptr(),
                        ffi::OPERATION_NOFLAG,
                    )
                })
            };
            let mut page = Vec::new();
            if ret >= 0 && prval >= 0 {
                loop {
                    let mut key: *mut c_char = ptr::null_mut();
                    let mut val: *mut c_char = ptr::null_mut();
                    let mut len = 0usize;
                    // SAFETY: `iter` was filled by the operation above and is ended below.
                    let r = unsafe {
                        ffi::rados_omap_get_next(iter, &raw mut key, &raw mut val, &raw mut len)
                    };
                    if r < 0 || key.is_null() {
                        break;
                    }
                    // SAFETY: a NUL-terminated key valid until `rados_omap_get_end`.
                    if let Ok(name) = unsafe { CStr::from_ptr(key) }.to_str() {
                        page.push(name.to_owned());
                    }
                }
                // SAFETY: ended once, after its last use.
                unsafe { ffi::rados_omap_get_end(iter) };
            }
            // SAFETY: created above, released once.
            unsafe { ffi::rados_release_read_op(op) };
            if is_errno(ret, rustix::io::Errno::NOENT) {
                // No index: no name was ever created in this namespace, or the index was lost.
                let mut walked = self.walk_names()?;
                walked.retain(|n| n.starts_with(prefix));
                return Ok(walked);
            }
            if ret < 0 || prval < 0 {
                return Err(Error::io("list", &self.location, os_error(ret.min(prval))));
            }
            names.extend(page);
            if more == 0 {
                return Ok(names);
            }
        }
    }

    /// The names of the index whose object exists (`true`) or not (`false`), statted in
    /// parallel.
    ///
    /// Reading the index and statting its names are separate steps, so a writer that creates
    /// a new name and removes an old one in between (a metadata record moving to its next
    /// version) would hide both: the old one is gone when statted, the new one was not yet in
    /// the index. Writers add a name before creating its object and remove an object before
    /// its name, so an object found gone means every name its remover added earlier is in the
    /// index by now: the index is read again after the stats, and the names new to it statted,
    /// until a read brings no new name. A file moved during the listing is then always seen
    /// under one of its names, as in a directory listed by one `getdents`.
    pub(super) fn scan(&self, prefix: &str) -> Result<Vec<(String, bool)>> {
        let mut found = std::collections::BTreeMap::new();
        for _ in 0..SCAN_ROUNDS {
            let fresh: Vec<String> = self
                .index_names(prefix)?
                .into_iter()
                .filter(|name| !found.contains_key(name))
                .collect();
            if fresh.is_empty() {
                return Ok(found.into_iter().collect());
            }
            let gone = self.stat_all(fresh, &mut found)?;
            if !gone {
                return Ok(found.into_iter().collect());
            }
        }
        Err(Error::io(
            "list",
            &self.location,
            std::io::Error::other("names kept being replaced while the namespace was listed"),
        ))
    }

    /// Stats `names` in parallel into `found` (present or not); whether any was gone.
    fn stat_all(
        &self,
        names: Vec<String>,
        found: &mut std::collections::BTreeMap<String, bool>,
    ) -> Result<bool> {
        let mut sizes = vec![0u64; names.len()];
        let mut mtimes = vec![0i64; names.len()];
        let oids = names
            .iter()
            .map(|n| cstring(n))
            .collect::<Result<Vec<_>>>()?;
        let mut pending = Vec::with_capacity(names.len());
        for (i, oid) in oids.iter().enumerate() {
            let done = Completion::new();
            // SAFETY: live context and completion; `sizes` and `mtimes` are neither moved nor
            // resized until every completion has been waited for below.
            let ret = unsafe {
                ffi::rados_aio_stat(
                    self.io.raw,
                    oid.as_ptr(),
                    done.0,
                    sizes.as_mut_ptr().add(i),
                    mtimes.as_mut_ptr().add(i),
                )
            };
            if ret < 0 {
                for p in &pending {
                    let _ = Completion::wait(p);
                }
                return Err(self.error("stat", &names[i], ret));
            }
            pending.push(done);
        }
        let codes: Vec<i32> = self
            .io
            .round_trip("stat all", &names.len().to_string(), || {
                pending.iter().map(Completion::wait).collect()
            });
        drop(pending);
        let mut gone = false;
        for (name, ret) in names.into_iter().zip(codes) {
            if ret >= 0 {
                found.insert(name, true);
            } else if is_errno(ret, rustix::io::Errno::NOENT) {
                gone = true;
                found.insert(name, false);
            } else {
                return Err(self.error("stat", &name, ret));
            }
        }
        Ok(gone)
    }

    /// The names starting with `prefix` whose object exists (every name with `""`).
    pub(super) fn list(&self, prefix: &str) -> Result<Vec<String>> {
        Ok(self
            .scan(prefix)?
            .into_iter()
            .filter_map(|(name, present)| present.then_some(name))
            .collect())
    }
}

//! Ceph RADOS storage: a topic directory is a namespace of a pool, each file one object.
//!
//! Owns: the connection to a Ceph cluster ([`RadosCluster`]), the mapping of the [`Storage`]
//! trait onto RADOS objects ([`RadosStorage`]), the ownership lease (an exclusive RADOS lock on
//! the object `LOCK`, renewed by a thread while the guard lives) and the owner epoch that fences
//! a stale owner inside the cluster. Never: a retry of a write the cluster refused.
//!
//! Mapping (docs/deployment.md):
//! - a file is an object of the same name in the storage's namespace; `write_all_at` is a RADOS
//!   write at that offset, `set_len` a truncate, `size` a stat;
//! - the names live as omap keys of the object `.ackstore-names` (no file name starts with a
//!   dot), because listing a namespace walks every object of the pool. A name is added before
//!   its object is created and removed after its object is; `list` reads the keys and stats
//!   their objects in parallel, keeping those that exist, so a create or remove cut between its
//!   two steps leaves a key without an object that no listing returns (the next owner's `lock`
//!   drops it);
//! - a write is durable once the cluster acknowledges it. Writes are sent asynchronously, in
//!   order (RADOS applies the operations of one client on one object in the order they were
//!   sent); `sync_data` waits for every outstanding write of the file and reports the first one
//!   the cluster refused. Every other call on a file (read, size, map, truncate) first waits for
//!   its outstanding writes, so it sees them. `sync_dir` has nothing to wait for: creates,
//!   removes and links are synchronous;
//! - `link(from, to)` copies `from` into a new object `to` in one write operation that starts
//!   with an exclusive create: of two links to one name, from any client, exactly one succeeds;
//! - `rename` copies then removes: not atomic (ackstore itself never renames);
//! - `map` reads the whole object with `rados_read` into owned bytes, through a small read cache
//!   (sealed ledgers are never written again, so an entry stays true until this storage writes,
//!   truncates or removes the object, which evicts it).
//!
//! Fencing. [`Storage::lock`] takes the exclusive lock `ackstore-owner` on `LOCK` with a lease,
//! then raises the owner epoch kept in the `LOCK` object's xattr `ackstore.owner-epoch` (a
//! compare-and-set in one write operation), then stamps that epoch into the xattr
//! `ackstore.epoch` of every object of the namespace, each with a compare in the same operation
//! (stamp only if the object's epoch is not higher). From then on every mutating operation of
//! the owner carries, in the same RADOS write operation, `cmpxattr(ackstore.epoch >= mine)` and
//! sets its epoch: once a newer owner has stamped an object, the cluster refuses the older
//! owner's writes to it (`ECANCELED`, reported as [`Error::Fenced`]), whatever the older owner
//! believes about its lease. A new owner stamps every object before it reads any, so no write of
//! the older owner lands on an object after the new owner read it. Objects an older owner
//! creates *after* the stamping carry its older epoch and are referenced by no record the new
//! owner wrote (the metadata records are replaced by exclusive creates, which an older owner
//! loses).

mod ffi;

use std::collections::VecDeque;
use std::ffi::{CStr, CString, c_char};
use std::fmt;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use super::{LockGuard, Mapped, Storage, StorageFile, validate_name};
use crate::error::{Error, Result};

/// Name of the object that carries the ownership lock and the owner epoch.
pub const LOCK_OBJECT: &str = "LOCK";
/// Name of the object whose omap keys are the namespace's file names (no file name starts
/// with `.`, see [`validate_name`]).
pub const INDEX_OBJECT: &str = ".ackstore-names";
/// Names read from the index per request.
const INDEX_PAGE: u64 = 1024;
/// Name of the RADOS lock on [`LOCK_OBJECT`].
const LOCK_NAME: &str = "ackstore-owner";
/// Xattr of [`LOCK_OBJECT`]: the highest owner epoch handed out.
const OWNER_EPOCH_XATTR: &str = "ackstore.owner-epoch";
/// Xattr of every object: the epoch of the last owner that wrote it.
const EPOCH_XATTR: &str = "ackstore.epoch";
/// Epochs are stored as this many decimal digits, so the cluster's string comparison orders
/// them as numbers.
const EPOCH_DIGITS: usize = 20;
/// Largest single `rados_read` (the OSD's read limits are far above it).
const READ_CHUNK: usize = 16 << 20;
/// Outstanding asynchronous writes per file before a write waits for the oldest.
const MAX_IN_FLIGHT: usize = 256;
/// Default lease of the ownership lock.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);
/// Default byte budget of a storage's read cache.
pub const DEFAULT_READ_CACHE_BYTES: usize = 64 << 20;

fn epoch_text(epoch: u64) -> String {
    format!("{epoch:0EPOCH_DIGITS$}")
}

fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::InvalidArgument {
        reason: format!("`{}` contains a NUL byte", s.escape_debug()),
    })
}

/// An `std::io::Error` for a negative librados return code.
fn os_error(ret: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(-ret)
}

fn is_errno(ret: i32, errno: rustix::io::Errno) -> bool {
    -ret == errno.raw_os_error()
}

/// A connection to one Ceph cluster, shared by every [`RadosStorage`] made from it.
#[derive(Clone)]
pub struct RadosCluster {
    handle: Arc<ClusterHandle>,
    conf: PathBuf,
}

struct ClusterHandle(ffi::RadosT);

// SAFETY: a librados cluster handle may be used from any thread at once (librados locks
// internally); it is shut down once, by `Drop`, after every I/O context made from it is gone
// (each holds an `Arc` of this handle).
unsafe impl Send for ClusterHandle {}
// SAFETY: as above.
unsafe impl Sync for ClusterHandle {}

impl Drop for ClusterHandle {
    fn drop(&mut self) {
        // SAFETY: the handle was created by `rados_create2` and is shut down only here.
        unsafe { ffi::rados_shutdown(self.0) }
    }
}

impl fmt::Debug for RadosCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RadosCluster")
            .field("conf", &self.conf)
            .finish_non_exhaustive()
    }
}

impl RadosCluster {
    /// Connects as `client.admin` to the cluster described by the Ceph configuration file
    /// `conf` (monitor addresses, authentication).
    ///
    /// # Errors
    /// [`Error::Io`] naming the file when it cannot be read or the cluster cannot be reached
    /// (librados gives up after its own timeouts, 30 s by default for the monitors).
    pub fn connect(conf: impl AsRef<Path>) -> Result<Self> {
        let conf = conf.as_ref().to_path_buf();
        let conf_c = cstring(&conf.to_string_lossy())?;
        let fail = |op: &'static str, ret: i32| Error::io(op, &conf, os_error(ret));
        let mut raw: ffi::RadosT = ptr::null_mut();
        let (cluster, user) = (cstring("ceph")?, cstring("client.admin")?);
        // SAFETY: valid out-pointer and NUL-terminated strings.
        let ret = unsafe { ffi::rados_create2(&raw mut raw, cluster.as_ptr(), user.as_ptr(), 0) };
        if ret < 0 {
            return Err(fail("create a RADOS client", ret));
        }
        let handle = Arc::new(ClusterHandle(raw));
        // SAFETY: `raw` is a live handle, the path is NUL-terminated.
        let ret = unsafe { ffi::rados_conf_read_file(raw, conf_c.as_ptr()) };
        if ret < 0 {
            return Err(fail("read the Ceph configuration", ret));
        }
        // SAFETY: `raw` is a live, configured, not yet connected handle.
        let ret = unsafe { ffi::rados_connect(raw) };
        if ret < 0 {
            return Err(fail("connect to the Ceph cluster", ret));
        }
        Ok(Self { handle, conf })
    }

    /// The configuration file this connection was made from.
    #[must_use]
    pub fn conf(&self) -> &Path {
        &self.conf
    }

    /// The storage kept in namespace `namespace` of pool `pool` (one topic directory). The
    /// namespace follows the rules of a file name ([`validate_name`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad namespace; [`Error::Io`] when the pool does not exist.
    pub fn storage(&self, pool: &str, namespace: &str) -> Result<RadosStorage> {
        validate_name(namespace)?;
        let location = format!("rados:{pool}/{namespace}");
        let pool_c = cstring(pool)?;
        let ns_c = cstring(namespace)?;
        let mut raw: ffi::IoctxT = ptr::null_mut();
        // SAFETY: the cluster handle is connected; valid out-pointer and string.
        let ret = unsafe { ffi::rados_ioctx_create(self.handle.0, pool_c.as_ptr(), &raw mut raw) };
        if ret < 0 {
            return Err(Error::io("open the pool", &location, os_error(ret)));
        }
        let io = Ioctx {
            raw,
            _cluster: self.handle.clone(),
        };
        // SAFETY: `raw` is a live I/O context not yet shared with any other thread.
        unsafe { ffi::rados_ioctx_set_namespace(io.raw, ns_c.as_ptr()) };
        Ok(RadosStorage {
            shared: Arc::new(Shared {
                io,
                location,
                epoch: AtomicU64::new(0),
                lease: Mutex::new(DEFAULT_LEASE),
                cache: Mutex::new(ReadCache::new(DEFAULT_READ_CACHE_BYTES)),
            }),
        })
    }
}

/// One pool and namespace of a cluster.
struct Ioctx {
    raw: ffi::IoctxT,
    _cluster: Arc<ClusterHandle>,
}

// SAFETY: a librados I/O context may be used from several threads at once as long as its
// namespace and snapshot settings are not changed meanwhile; the namespace is set once, before
// the context is shared.
unsafe impl Send for Ioctx {}
// SAFETY: as above.
unsafe impl Sync for Ioctx {}

impl Drop for Ioctx {
    fn drop(&mut self) {
        // SAFETY: created by `rados_ioctx_create`, destroyed only here, before the cluster
        // handle (held by `_cluster`) is shut down.
        unsafe { ffi::rados_ioctx_destroy(self.raw) }
    }
}

/// A compound write operation, released when dropped.
struct WriteOp {
    raw: ffi::WriteOpT,
    /// Strings the operation points into until it has been sent.
    keep: Vec<CString>,
}

impl WriteOp {
    fn new() -> Self {
        // SAFETY: no preconditions.
        let raw = unsafe { ffi::rados_create_write_op() };
        assert!(
            !raw.is_null(),
            "librados could not allocate a write operation"
        );
        Self {
            raw,
            keep: Vec::new(),
        }
    }

    fn name(&mut self, s: &str) -> *const c_char {
        let c = CString::new(s).expect("xattr names are constants without NUL");
        let p = c.as_ptr();
        self.keep.push(c);
        p
    }

    fn create_exclusive(&mut self) -> &mut Self {
        // SAFETY: live operation; a null category is allowed.
        unsafe { ffi::rados_write_op_create(self.raw, ffi::CREATE_EXCLUSIVE, ptr::null()) };
        self
    }

    fn write(&mut self, buf: &[u8], offset: u64) -> &mut Self {
        // SAFETY: live operation; librados copies the buffer.
        unsafe { ffi::rados_write_op_write(self.raw, buf.as_ptr().cast(), buf.len(), offset) };
        self
    }

    fn write_full(&mut self, buf: &[u8]) -> &mut Self {
        // SAFETY: live operation; librados copies the buffer.
        unsafe { ffi::rados_write_op_write_full(self.raw, buf.as_ptr().cast(), buf.len()) };
        self
    }

    fn truncate(&mut self, len: u64) -> &mut Self {
        // SAFETY: live operation.
        unsafe { ffi::rados_write_op_truncate(self.raw, len) };
        self
    }

    fn remove(&mut self) -> &mut Self {
        // SAFETY: live operation.
        unsafe { ffi::rados_write_op_remove(self.raw) };
        self
    }

    fn cmpxattr(&mut self, name: &str, op: u8, value: &str) -> &mut Self {
        let name = self.name(name);
        // SAFETY: live operation; librados copies the value, `name` lives in `keep`.
        unsafe {
            ffi::rados_write_op_cmpxattr(self.raw, name, op, value.as_ptr().cast(), value.len());
        }
        self
    }

    fn setxattr(&mut self, name: &str, value: &str) -> &mut Self {
        let name = self.name(name);
        // SAFETY: live operation; librados copies the value, `name` lives in `keep`.
        unsafe { ffi::rados_write_op_setxattr(self.raw, name, value.as_ptr().cast(), value.len()) };
        self
    }

    /// The owner's guard: refused by the cluster when a newer owner stamped the object, and
    /// stamps the object with `epoch`. Nothing when this handle owns nothing (epoch 0).
    fn guard(&mut self, epoch: u64) -> &mut Self {
        if epoch > 0 {
            let text = epoch_text(epoch);
            self.cmpxattr(EPOCH_XATTR, ffi::CMPXATTR_OP_GTE, &text)
                .setxattr(EPOCH_XATTR, &text);
        }
        self
    }

    /// Runs the operation and waits for the cluster's answer (a librados return code).
    fn run(&self, io: &Ioctx, oid: &CStr) -> i32 {
        // SAFETY: live operation and context; a null mtime means "now".
        unsafe {
            ffi::rados_write_op_operate(
                self.raw,
                io.raw,
                oid.as_ptr(),
                ptr::null_mut(),
                ffi::OPERATION_NOFLAG,
            )
        }
    }

    /// Sends the operation; the completion reports the cluster's answer.
    fn send(&self, io: &Ioctx, oid: &CStr) -> std::result::Result<Completion, i32> {
        let completion = Completion::new();
        // SAFETY: live operation, context and completion. The operation's contents are moved
        // into the request when it is sent, so it may be released before the completion fires.
        let ret = unsafe {
            ffi::rados_aio_write_op_operate(
                self.raw,
                io.raw,
                completion.0,
                oid.as_ptr(),
                ptr::null_mut(),
                ffi::OPERATION_NOFLAG,
            )
        };
        if ret < 0 { Err(ret) } else { Ok(completion) }
    }
}

impl Drop for WriteOp {
    fn drop(&mut self) {
        // SAFETY: created by `rados_create_write_op`, released only here.
        unsafe { ffi::rados_release_write_op(self.raw) }
    }
}

/// An asynchronous operation's completion, released when dropped (after waiting for it).
struct Completion(ffi::CompletionT);

// SAFETY: a completion may be waited on and released from any thread.
unsafe impl Send for Completion {}

impl Completion {
    fn new() -> Self {
        let mut raw: ffi::CompletionT = ptr::null_mut();
        // SAFETY: valid out-pointer; no callbacks.
        let ret = unsafe {
            ffi::rados_aio_create_completion(
                ptr::null_mut(),
                ptr::null(),
                ptr::null(),
                &raw mut raw,
            )
        };
        assert!(ret >= 0, "librados could not allocate a completion");
        Self(raw)
    }

    /// Waits for the operation; its return code.
    fn wait(&self) -> i32 {
        // SAFETY: live completion of a sent operation.
        unsafe {
            ffi::rados_aio_wait_for_complete(self.0);
            ffi::rados_aio_get_return_value(self.0)
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        // SAFETY: released once; waiting first means librados no longer refers to it.
        unsafe {
            ffi::rados_aio_wait_for_complete(self.0);
            ffi::rados_aio_release(self.0);
        }
    }
}

/// Whole objects read by `map`, under a byte budget, least recently used evicted first.
struct ReadCache {
    entries: lru::LruCache<String, Mapped>,
    bytes: usize,
    budget: usize,
}

impl ReadCache {
    fn new(budget: usize) -> Self {
        Self {
            entries: lru::LruCache::unbounded(),
            bytes: 0,
            budget,
        }
    }

    fn get(&mut self, name: &str, size: u64) -> Option<Mapped> {
        let hit = self.entries.get(name)?;
        (hit.as_ref().as_ref().len() as u64 == size).then(|| hit.clone())
    }

    fn insert(&mut self, name: &str, bytes: Mapped) {
        let len = bytes.as_ref().as_ref().len();
        self.evict(name);
        if len > self.budget {
            return;
        }
        while self.bytes + len > self.budget {
            match self.entries.pop_lru() {
                Some((_, old)) => self.bytes -= old.as_ref().as_ref().len(),
                None => break,
            }
        }
        self.bytes += len;
        self.entries.put(name.to_owned(), bytes);
    }

    fn evict(&mut self, name: &str) {
        if let Some(old) = self.entries.pop(name) {
            self.bytes -= old.as_ref().as_ref().len();
        }
    }
}

struct Shared {
    io: Ioctx,
    location: String,
    /// The owner epoch this handle writes with while it holds the lock; 0 otherwise.
    epoch: AtomicU64,
    lease: Mutex<Duration>,
    cache: Mutex<ReadCache>,
}

impl Shared {
    fn path(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("{}/{name}", self.location))
    }

    /// The error for a librados return code of an operation on `name`: a refused guard is
    /// [`Error::Fenced`], anything else [`Error::Io`].
    fn error(&self, op: &'static str, name: &str, ret: i32) -> Error {
        if is_errno(ret, rustix::io::Errno::CANCELED) || is_errno(ret, rustix::io::Errno::RANGE) {
            Error::Fenced {
                what: self.location.clone(),
            }
        } else {
            Error::io(op, self.path(name), os_error(ret))
        }
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    fn evict(&self, name: &str) {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .evict(name);
    }

    fn stat(&self, name: &str, oid: &CStr) -> Result<Option<u64>> {
        let mut size = 0u64;
        let mut mtime = 0i64;
        // SAFETY: live context, valid out-pointers.
        let ret =
            unsafe { ffi::rados_stat(self.io.raw, oid.as_ptr(), &raw mut size, &raw mut mtime) };
        if is_errno(ret, rustix::io::Errno::NOENT) {
            Ok(None)
        } else if ret < 0 {
            Err(self.error("stat", name, ret))
        } else {
            Ok(Some(size))
        }
    }

    /// Fills `buf` from `offset` of the object; fails if it is shorter.
    fn read_exact(&self, name: &str, oid: &CStr, buf: &mut [u8], offset: u64) -> Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let want = (buf.len() - done).min(READ_CHUNK);
            let part = &mut buf[done..done + want];
            // SAFETY: live context; `part` is writable for `want` bytes.
            let ret = unsafe {
                ffi::rados_read(
                    self.io.raw,
                    oid.as_ptr(),
                    part.as_mut_ptr().cast(),
                    want,
                    offset + done as u64,
                )
            };
            if ret < 0 {
                return Err(self.error("read", name, ret));
            }
            if ret == 0 {
                return Err(Error::io(
                    "read",
                    self.path(name),
                    std::io::ErrorKind::UnexpectedEof.into(),
                ));
            }
            done += usize::try_from(ret).expect("a positive byte count");
        }
        Ok(())
    }

    fn read_all(&self, name: &str, oid: &CStr) -> Result<Vec<u8>> {
        let size = self.stat(name, oid)?.ok_or_else(|| {
            Error::io("read", self.path(name), std::io::ErrorKind::NotFound.into())
        })?;
        let mut bytes = vec![0; usize::try_from(size).expect("an object fits in memory")];
        self.read_exact(name, oid, &mut bytes, 0)?;
        Ok(bytes)
    }

    /// Creates `name` exclusively, stamped with this owner's epoch, holding `bytes`.
    fn create_with(&self, name: &str, bytes: &[u8], op_name: &'static str) -> Result<()> {
        let oid = cstring(name)?;
        self.index_add(name)?;
        let mut op = WriteOp::new();
        op.create_exclusive();
        if !bytes.is_empty() {
            op.write_full(bytes);
        }
        let epoch = self.epoch();
        if epoch > 0 {
            op.setxattr(EPOCH_XATTR, &epoch_text(epoch));
        }
        let ret = op.run(&self.io, &oid);
        self.evict(name);
        if ret < 0 {
            return Err(self.error(op_name, name, ret));
        }
        Ok(())
    }

    /// Adds `name` to the namespace's index of names (before the object is created).
    fn index_add(&self, name: &str) -> Result<()> {
        let key = cstring(name)?;
        let keys = [key.as_ptr()];
        let vals = [c"".as_ptr()];
        let lens = [0usize];
        let op = WriteOp::new();
        // SAFETY: live operation; librados copies keys and values before this returns.
        unsafe {
            ffi::rados_write_op_omap_set(op.raw, keys.as_ptr(), vals.as_ptr(), lens.as_ptr(), 1);
        }
        let ret = op.run(&self.io, &cstring(INDEX_OBJECT)?);
        if ret < 0 {
            return Err(self.error("record the name of", name, ret));
        }
        Ok(())
    }

    /// Removes `name` from the index of names (after the object is removed).
    fn index_remove(&self, name: &str) -> Result<()> {
        let key = cstring(name)?;
        let keys = [key.as_ptr()];
        let op = WriteOp::new();
        // SAFETY: live operation; librados copies the keys before this returns.
        unsafe { ffi::rados_write_op_omap_rm_keys(op.raw, keys.as_ptr(), 1) };
        let ret = op.run(&self.io, &cstring(INDEX_OBJECT)?);
        if ret < 0 && !is_errno(ret, rustix::io::Errno::NOENT) {
            return Err(self.error("forget the name of", name, ret));
        }
        Ok(())
    }

    /// Every name in the index, sorted (omap keys come in order).
    fn index_names(&self) -> Result<Vec<String>> {
        let index = cstring(INDEX_OBJECT)?;
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
                ffi::rados_read_op_omap_get_keys2(
                    op,
                    after.as_ptr(),
                    INDEX_PAGE,
                    &raw mut iter,
                    &raw mut more,
                    &raw mut prval,
                );
                ffi::rados_read_op_operate(op, self.io.raw, index.as_ptr(), ffi::OPERATION_NOFLAG)
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
                // No name was ever created in this namespace.
                return Ok(names);
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
    fn scan(&self) -> Result<Vec<(String, bool)>> {
        let names = self.index_names()?;
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
        let codes: Vec<i32> = pending.iter().map(Completion::wait).collect();
        drop(pending);
        let mut found = Vec::with_capacity(names.len());
        for (name, ret) in names.into_iter().zip(codes) {
            if ret >= 0 {
                found.push((name, true));
            } else if is_errno(ret, rustix::io::Errno::NOENT) {
                found.push((name, false));
            } else {
                return Err(self.error("stat", &name, ret));
            }
        }
        Ok(found)
    }

    fn list(&self) -> Result<Vec<String>> {
        Ok(self
            .scan()?
            .into_iter()
            .filter_map(|(name, present)| present.then_some(name))
            .collect())
    }
}

/// A topic directory kept in one namespace of a RADOS pool (see the module documentation).
#[derive(Clone)]
pub struct RadosStorage {
    shared: Arc<Shared>,
}

impl fmt::Debug for RadosStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RadosStorage")
            .field("location", &self.shared.location)
            .field("epoch", &self.shared.epoch())
            .finish_non_exhaustive()
    }
}

impl RadosStorage {
    /// Connects to the cluster described by `conf` and opens namespace `namespace` of `pool`
    /// (a shorthand for [`RadosCluster::connect`] then [`RadosCluster::storage`]; a broker with
    /// many topics shares one [`RadosCluster`]).
    pub fn connect(conf: impl AsRef<Path>, pool: &str, namespace: &str) -> Result<Self> {
        RadosCluster::connect(conf)?.storage(pool, namespace)
    }

    /// Sets the lease of the ownership lock taken by later [`Storage::lock`] calls (default
    /// [`DEFAULT_LEASE`]): another process can take the namespace over once the holder has not
    /// renewed it for this long. The holder renews it every third of the lease.
    #[must_use]
    pub fn with_lease(self, lease: Duration) -> Self {
        *self
            .shared
            .lease
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = lease;
        self
    }

    /// The owner epoch this handle writes with while it holds the lock; 0 when it holds none.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.shared.epoch()
    }

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
        let new = old + 1;
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
        for (name, present) in shared.scan()? {
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

impl Storage for RadosStorage {
    fn location(&self) -> String {
        self.shared.location.clone()
    }

    fn list(&self) -> Result<Vec<String>> {
        self.shared.list()
    }

    fn exists(&self, name: &str) -> Result<bool> {
        validate_name(name)?;
        Ok(self.shared.stat(name, &cstring(name)?)?.is_some())
    }

    fn create(&self, name: &str) -> Result<Arc<dyn StorageFile>> {
        validate_name(name)?;
        self.shared.create_with(name, &[], "create")?;
        Ok(Arc::new(RadosFile::new(self.shared.clone(), name)?))
    }

    fn open(&self, name: &str) -> Result<Arc<dyn StorageFile>> {
        validate_name(name)?;
        let file = RadosFile::new(self.shared.clone(), name)?;
        if self.shared.stat(name, &file.oid)?.is_none() {
            return Err(Error::io(
                "open",
                self.shared.path(name),
                std::io::ErrorKind::NotFound.into(),
            ));
        }
        Ok(Arc::new(file))
    }

    fn remove(&self, name: &str) -> Result<()> {
        validate_name(name)?;
        let oid = cstring(name)?;
        let mut op = WriteOp::new();
        op.guard(self.shared.epoch()).remove();
        let ret = op.run(&self.shared.io, &oid);
        self.shared.evict(name);
        if ret < 0 {
            return Err(self.shared.error("remove", name, ret));
        }
        self.shared.index_remove(name)
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        validate_name(from)?;
        validate_name(to)?;
        let bytes = self.shared.read_all(from, &cstring(from)?)?;
        let to_oid = cstring(to)?;
        if self.shared.stat(to, &to_oid)?.is_some() {
            let mut op = WriteOp::new();
            op.guard(self.shared.epoch()).write_full(&bytes);
            let ret = op.run(&self.shared.io, &to_oid);
            self.shared.evict(to);
            if ret < 0 {
                return Err(self.shared.error("rename", to, ret));
            }
        } else {
            self.shared.create_with(to, &bytes, "rename")?;
        }
        self.remove(from)
    }

    fn link(&self, from: &str, to: &str) -> Result<()> {
        validate_name(from)?;
        validate_name(to)?;
        let bytes = self.shared.read_all(from, &cstring(from)?)?;
        self.shared.create_with(to, &bytes, "link")
    }

    fn sync_dir(&self) -> Result<()> {
        // Creates, removes and links returned only once the cluster had applied them.
        Ok(())
    }

    fn lock(&self) -> Result<LockGuard> {
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
                        if ret < 0 {
                            // Taken by another owner after it expired: this handle's writes are
                            // refused from the moment that owner stamped the namespace.
                            log::warn!(
                                "lost the ownership lease of {}: {}",
                                shared.location,
                                os_error(ret)
                            );
                            return;
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

/// One object opened through a [`RadosStorage`].
struct RadosFile {
    shared: Arc<Shared>,
    name: String,
    oid: CString,
    /// Writes sent and not yet waited for, oldest first; then the first refused write's code,
    /// which every later call on the file reports again.
    state: Mutex<FileState>,
}

#[derive(Default)]
struct FileState {
    in_flight: VecDeque<Completion>,
    failed: Option<i32>,
}

impl fmt::Debug for RadosFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RadosFile")
            .field("location", &self.shared.location)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl RadosFile {
    fn new(shared: Arc<Shared>, name: &str) -> Result<Self> {
        Ok(Self {
            shared,
            name: name.to_owned(),
            oid: cstring(name)?,
            state: Mutex::new(FileState::default()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FileState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for every outstanding write; the first refused one's error (latched).
    fn drain(&self, state: &mut FileState, op: &'static str) -> Result<()> {
        while let Some(done) = state.in_flight.pop_front() {
            let ret = done.wait();
            if ret < 0 && state.failed.is_none() {
                state.failed = Some(ret);
            }
        }
        match state.failed {
            Some(ret) => Err(self.shared.error(op, &self.name, ret)),
            None => Ok(()),
        }
    }
}

impl StorageFile for RadosFile {
    fn size(&self) -> Result<u64> {
        self.drain(&mut self.state(), "stat")?;
        self.shared.stat(&self.name, &self.oid)?.ok_or_else(|| {
            Error::io(
                "stat",
                self.shared.path(&self.name),
                std::io::ErrorKind::NotFound.into(),
            )
        })
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.drain(&mut self.state(), "read")?;
        self.shared.read_exact(&self.name, &self.oid, buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let mut state = self.state();
        if state.in_flight.len() >= MAX_IN_FLIGHT {
            self.drain(&mut state, "write")?;
        }
        if let Some(ret) = state.failed {
            return Err(self.shared.error("write", &self.name, ret));
        }
        self.shared.evict(&self.name);
        let mut op = WriteOp::new();
        op.guard(self.shared.epoch()).write(buf, offset);
        match op.send(&self.shared.io, &self.oid) {
            Ok(done) => {
                state.in_flight.push_back(done);
                Ok(())
            }
            Err(ret) => {
                state.failed = Some(ret);
                Err(self.shared.error("write", &self.name, ret))
            }
        }
    }

    fn sync_data(&self) -> Result<()> {
        self.drain(&mut self.state(), "write")
    }

    fn set_len(&self, len: u64) -> Result<()> {
        let mut state = self.state();
        self.drain(&mut state, "truncate")?;
        self.shared.evict(&self.name);
        let mut op = WriteOp::new();
        op.guard(self.shared.epoch()).truncate(len);
        let ret = op.run(&self.shared.io, &self.oid);
        if ret < 0 {
            state.failed = Some(ret);
            return Err(self.shared.error("truncate", &self.name, ret));
        }
        Ok(())
    }

    fn map(&self) -> Result<Mapped> {
        self.drain(&mut self.state(), "read")?;
        let size = self.size()?;
        let cache = || {
            self.shared
                .cache
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        };
        if let Some(hit) = cache().get(&self.name, size) {
            return Ok(hit);
        }
        let bytes: Mapped = Arc::new(self.shared.read_all(&self.name, &self.oid)?);
        cache().insert(&self.name, bytes.clone());
        Ok(bytes)
    }
}

impl Drop for RadosFile {
    fn drop(&mut self) {
        // Completions wait for their operation when released.
        self.state().in_flight.clear();
    }
}

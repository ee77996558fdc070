//! Ceph RADOS storage: a topic directory is a namespace of a pool, each file one object.
//!
//! Owns: the connection to a Ceph cluster ([`RadosCluster`]), the mapping of the [`Storage`]
//! trait onto RADOS objects ([`RadosStorage`]), the ownership lease (an exclusive RADOS lock on
//! the object `LOCK`, renewed while the guard lives by the one renewal thread of the connection)
//! and the owner epoch that fences a stale owner inside the cluster. Never: a retry of a write
//! the cluster refused.
//!
//! Mapping (docs/deployment.md):
//! - a file is an object of the same name in the storage's namespace; `write_all_at` is a RADOS
//!   write at that offset, `set_len` a truncate, `size` a stat;
//! - the names live as omap keys of the object `.ackstore-names` (no file name starts with a
//!   dot), because listing a namespace walks every object of the pool. A name is added before
//!   its object is created and removed after its object is; `list` reads the keys and stats
//!   their objects in parallel, keeping those that exist, so a create or remove cut between its
//!   two steps leaves a key without an object that no listing returns (it stays until the name
//!   is created or removed again, costing a stat in each listing of its prefix). Without the
//!   index object (lost to damage) a listing walks the namespace, and the next create writes
//!   the walked names back, so a namespace never looks emptier than it is;
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
//!   truncates or removes the object, which evicts it; a read that raced with such a write, from
//!   before the write was sent, is not cached).
//!
//! Fencing. [`Storage::lock`] takes the exclusive lock `ackstore-owner` on `LOCK` with a lease
//! and raises the owner epoch kept in the `LOCK` object's xattr `ackstore.owner-epoch`, in one
//! write operation (the lock step, a compare of the epoch it read, the next epoch: both or
//! neither), and touches no other object: a takeover costs the same at any size of the
//! namespace. Every object carries in its xattr `ackstore.epoch` the
//! epoch of the last owner that stamped or wrote it. Before an owner's first operation on an
//! object (a read, a stat, a lookup of its name) it *stamps* it: one write operation that
//! asserts the object exists, compares `ackstore.epoch <= mine` and sets it to mine; the handle
//! remembers the objects it stamped (or created) for the rest of its epoch, so each costs one
//! round trip, and only once the owner opens what it lives in. Every mutating operation carries
//! the same compare and set in its own RADOS write operation. Once an owner has stamped an
//! object, the cluster refuses every write of an older owner to it (`ECANCELED`, reported as
//! [`Error::Fenced`]), whatever the older owner believes about its lease. So no write of an
//! older owner lands on an object after the new owner read it: each object's first read sees
//! every write of an older owner that will ever land on it.
//!
//! Why stamping each object on first touch fences as well as stamping all at lock time:
//! - Stamps never formed one atomic cut across objects (they are per object, in flight
//!   together): per object, the new owner's view is final from its first touch either way.
//!   What changes is that an older owner's write may land on an object the new owner has not
//!   touched yet *after* the new owner wrote elsewhere. The older owner does not see the new
//!   owner's writes, so it writes what it would have written before them, and the new owner
//!   reads it (with everything else that landed) at its first touch, as after a late stamp.
//! - What the new owner follows from one object to another comes from an object it read, so
//!   stamped: a store's catalog names its topics and the cursor journal's segments, a topic's
//!   records name its ledgers and their synced lengths. Records are replaced by exclusive
//!   creates of the next version's name, which exactly one writer wins; a store's claim (and a
//!   topic's open) writes its record's next version before it reads anything it names, and an
//!   older owner checks that record's version after each sync and around each record write,
//!   so none of its syncs, flushes or record writes after the claim returns `Ok`
//!   (docs/cursors.md, "Topics of a store"): what it appends meanwhile to an object the new
//!   owner has not touched is unconfirmed data past every synced length, which the new owner
//!   treats as a torn tail when it opens that object.
//! - Journal segments: the store's open reads (so stamps) every segment its catalog lists and
//!   seals the newest; a segment an older owner creates after the claim is never listed (its
//!   catalog write is refused), and the next open that removes it as a stray stamps it first.
//! - Objects an older owner creates after the new owner listed the namespace: a create is an
//!   exclusive create (an object that does not exist has no epoch to compare), unknown to the
//!   new owner until a later listing, and stamped at its first touch, before it is read.
//! - An owner outlives its lease in the handle: a thread of it still writing after the lock was
//!   released, or after the same handle locked again (a broker that reopens a store through
//!   the handle it had). A handle that has locked never writes unguarded: once its lock is
//!   released its writes carry the released lease's epoch, and a file keeps the epoch of the
//!   lease it was opened under, its writes refused ([`Error::Fenced`]) once the handle holds a
//!   later lease. Operations on names (create, remove, link) carry the handle's current epoch:
//!   a store's earlier instance must be gone before the handle locks again, or the new
//!   instance must use a handle of its own.
//! - `LOCK` and `.ackstore-names` are never stamped: `LOCK` is fenced by its owner-epoch
//!   compare, and the index of names is only a faster listing (every name is checked against
//!   its object). A listing stats objects without stamping them: it says which names exist,
//!   not what they hold, and may be stale as a directory listing may be (an object an older
//!   owner removed since answers `NotFound` at its first touch).
//!
//! Ceph's client blocklist (what RBD uses to fence a lock holder) costs one monitor command
//! whatever the size of the image, but it fences a client, that is a whole connection: every
//! store of a process shares one [`RadosCluster`], so taking one store over would fence every
//! other store of that process, which keeps its leases (a store moves alone, by its own lease).

mod ffi;
mod index;
pub(crate) mod lease;
mod op;
mod renewer;
mod timeouts;
mod wait;

use std::collections::VecDeque;
use std::ffi::{CStr, CString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use self::op::{Completion, WriteOp};
pub use self::timeouts::{RadosOptions, RadosTimeouts};
use super::{LeaseState, LockGuard, Mapped, Storage, StorageFile, validate_name};
use crate::error::{Error, Result};
use crate::hashing::IdSet;

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
/// Bytes a whole-object read asks for together with the object's size (records and small
/// objects come whole in one round trip; the rest of a larger one is read after).
const FIRST_READ: usize = 64 << 10;
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
    /// The renewals of every lease held through this connection (one thread for all).
    renewer: Arc<renewer::Renewer>,
    conf: PathBuf,
    timeouts: RadosTimeouts,
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
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

impl RadosCluster {
    /// Connects as `client.admin` to the cluster described by the Ceph configuration file
    /// `conf` (monitor addresses, authentication), with the default [`RadosOptions`]: finite
    /// operation timeouts (the file's, or [`RadosOptions::DEFAULT_OP_TIMEOUT`] where it sets none).
    ///
    /// # Errors
    /// [`Error::Io`] naming the file when it cannot be read or the cluster cannot be reached
    /// (librados gives up after its own timeouts, 30 s by default for the monitors).
    pub fn connect(conf: impl AsRef<Path>) -> Result<Self> {
        Self::connect_with(conf, &RadosOptions::default())
    }

    /// Connects as [`RadosCluster::connect`] does, with the client settings `options` applied
    /// after the configuration file is read (they take precedence over it).
    ///
    /// # Errors
    /// As [`RadosCluster::connect`]; [`Error::InvalidArgument`] when the file sets a timeout
    /// that is not a number of seconds.
    pub fn connect_with(conf: impl AsRef<Path>, options: &RadosOptions) -> Result<Self> {
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
        let timeouts = timeouts::apply(raw, options, &conf)?;
        // SAFETY: `raw` is a live, configured, not yet connected handle.
        let ret = unsafe { ffi::rados_connect(raw) };
        if ret < 0 {
            return Err(fail("connect to the Ceph cluster", ret));
        }
        Ok(Self {
            handle,
            renewer: Arc::default(),
            conf,
            timeouts,
        })
    }

    /// The operation timeouts this connection applies (see [`RadosOptions`]).
    #[must_use]
    pub fn op_timeouts(&self) -> RadosTimeouts {
        self.timeouts
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
            cluster: self.handle.clone(),
            round_trips: AtomicU64::new(0),
        };
        // SAFETY: `raw` is a live I/O context not yet shared with any other thread.
        unsafe { ffi::rados_ioctx_set_namespace(io.raw, ns_c.as_ptr()) };
        Ok(RadosStorage {
            shared: Arc::new(Shared {
                io,
                location,
                epoch: AtomicU64::new(0),
                last_epoch: AtomicU64::new(0),
                lease: Mutex::new(DEFAULT_LEASE),
                lock_wait: Mutex::new(Duration::ZERO),
                lease_state: Mutex::new(LeaseState::NotHeld),
                lost: AtomicBool::new(false),
                lost_hooks: Mutex::new(Vec::new()),
                renewer: self.renewer.clone(),
                renewals: AtomicU64::new(0),
                cache: Mutex::new(ReadCache::new(DEFAULT_READ_CACHE_BYTES)),
                stamped: Mutex::new(Stamped::default()),
                detached: Mutex::new(Vec::new()),
            }),
        })
    }
}

/// One pool and namespace of a cluster.
struct Ioctx {
    raw: ffi::IoctxT,
    cluster: Arc<ClusterHandle>,
    /// Synchronous round trips to the cluster made through this context.
    round_trips: AtomicU64,
}

impl Ioctx {
    /// Runs `call`, which waits for one answer of the cluster (`what`, about object `name`),
    /// and counts it ([`RadosStorage::round_trips`]).
    fn round_trip<T>(&self, what: &str, name: &str, call: impl FnOnce() -> T) -> T {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let started = std::time::Instant::now();
        let answer = call();
        log::trace!(
            target: crate::observe::LOG_TARGET,
            "RADOS {what} `{name}`: answered in {} µs",
            started.elapsed().as_micros()
        );
        answer
    }
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
        // handle (held by `cluster`) is shut down.
        unsafe { ffi::rados_ioctx_destroy(self.raw) }
    }
}

/// Whole objects read by `map`, under a byte budget, least recently used evicted first.
struct ReadCache {
    entries: lru::LruCache<String, Mapped>,
    bytes: usize,
    budget: usize,
    /// Raised by every eviction: a read that started before one may hold bytes a write has
    /// replaced since, and is not cached.
    generation: u64,
}

impl ReadCache {
    fn new(budget: usize) -> Self {
        Self {
            entries: lru::LruCache::unbounded(),
            bytes: 0,
            budget,
            generation: 0,
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

    /// Caches `bytes`, read from a start taken at generation `generation`, unless something
    /// was evicted since.
    fn insert_read(&mut self, name: &str, bytes: Mapped, generation: u64) {
        if self.generation == generation {
            self.insert(name, bytes);
        }
    }

    fn evict(&mut self, name: &str) {
        self.generation += 1;
        if let Some(old) = self.entries.pop(name) {
            self.bytes -= old.as_ref().as_ref().len();
        }
    }
}

struct Shared {
    /// Operations sent without waiting for their answer (see [`Shared::detach`]); dropped
    /// (waited for) before the I/O context they were sent through.
    detached: Mutex<Vec<Completion>>,
    io: Ioctx,
    location: String,
    /// The owner epoch of the lock this handle holds; 0 while it holds none.
    epoch: AtomicU64,
    /// The owner epoch of the last lock this handle took (0: never locked). Its writes carry
    /// it after the lock is released: a handle that owned the namespace stays fenced as the
    /// owner it was, never writes unguarded.
    last_epoch: AtomicU64,
    lease: Mutex<Duration>,
    /// How long [`Storage::lock`] waits for a lock another owner holds.
    lock_wait: Mutex<Duration>,
    /// What this handle knows of its lease (see [`Storage::lease_state`]).
    lease_state: Mutex<LeaseState>,
    /// Set with [`LeaseState::Lost`]: every mutating operation is refused from then on.
    lost: AtomicBool,
    lost_hooks: Mutex<Vec<lease::LostHook>>,
    /// The renewals of the connection this storage was made from.
    renewer: Arc<renewer::Renewer>,
    /// Lease renewals of this handle that succeeded, over all its leases.
    renewals: AtomicU64,
    cache: Mutex<ReadCache>,
    /// The objects stamped with this handle's owner epoch (see [`Shared::touch`]).
    stamped: Mutex<Stamped>,
}

/// The names of the objects an owner stamped with its epoch, by itself or by creating them:
/// from then on no older owner's write lands on them. Emptied when the epoch changes.
#[derive(Default)]
struct Stamped {
    epoch: u64,
    names: IdSet<String>,
}

/// What [`Shared::touch`] found.
#[derive(Debug, PartialEq, Eq)]
enum Touched {
    /// The object exists and carries this owner's epoch (or a higher one would have refused).
    Stamped,
    /// No object has the name.
    Missing,
    /// This handle is no owner (no lock held, or its lease is lost): nothing was stamped.
    Unowned,
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
        } else if is_errno(ret, rustix::io::Errno::TIMEDOUT) {
            Error::io(
                op,
                self.path(name),
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the Ceph cluster did not answer within the client's operation timeout \
                     (rados_osd_op_timeout, RadosOptions)",
                ),
            )
        } else {
            Error::io(op, self.path(name), os_error(ret))
        }
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Keeps `done`, an operation whose answer nobody waits for, until it is answered (the
    /// answered ones are released with each new one; the rest when the storage is dropped).
    fn detach(&self, done: Completion) {
        let mut detached = self.detached.lock().unwrap_or_else(PoisonError::into_inner);
        detached.retain(|d| !d.is_complete());
        detached.push(done);
    }

    fn evict(&self, name: &str) {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .evict(name);
    }

    /// Stamps object `name` with this owner's epoch before this owner's first operation on
    /// it (module documentation, "Fencing"): one write operation that asserts the object
    /// exists, compares its epoch (refused, [`Error::Fenced`], if a newer owner stamped it) and
    /// sets this owner's. Remembered per name until the epoch changes, so each object costs one
    /// round trip per owner, and only if the owner touches it. Every read of an object (its
    /// size included) and every write goes through here or carries the same compare and set.
    fn touch(&self, name: &str, oid: &CStr) -> Result<Touched> {
        let epoch = self.epoch();
        if epoch == 0 || self.lost.load(Ordering::Acquire) {
            return Ok(Touched::Unowned);
        }
        if self.is_stamped(name, epoch) {
            return Ok(Touched::Stamped);
        }
        let text = epoch_text(epoch);
        let mut op = WriteOp::new();
        op.assert_exists()
            .cmpxattr(EPOCH_XATTR, ffi::CMPXATTR_OP_GTE, &text)
            .setxattr(EPOCH_XATTR, &text);
        let ret = op.run(&self.io, oid);
        if is_errno(ret, rustix::io::Errno::NOENT) {
            return Ok(Touched::Missing);
        }
        if ret < 0 {
            return Err(self.error("stamp the owner epoch", name, ret));
        }
        self.mark_stamped(name, epoch);
        Ok(Touched::Stamped)
    }

    fn stamped(&self, epoch: u64) -> std::sync::MutexGuard<'_, Stamped> {
        let mut stamped = self.stamped.lock().unwrap_or_else(PoisonError::into_inner);
        if stamped.epoch != epoch {
            stamped.epoch = epoch;
            stamped.names.clear();
        }
        stamped
    }

    fn is_stamped(&self, name: &str, epoch: u64) -> bool {
        self.stamped(epoch).names.contains(name)
    }

    /// Records that object `name` carries owner epoch `epoch` (stamped, or created with it).
    fn mark_stamped(&self, name: &str, epoch: u64) {
        if epoch > 0 {
            self.stamped(epoch).names.insert(name.to_owned());
        }
    }

    /// Forgets object `name` (removed): an object created later under its name is stamped
    /// again before it is touched.
    fn forget_stamp(&self, name: &str) {
        self.stamped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .names
            .remove(name);
    }

    /// The size of object `name` (`None` when there is none), stamped first.
    fn stat(&self, name: &str, oid: &CStr) -> Result<Option<u64>> {
        if self.touch(name, oid)? == Touched::Missing {
            return Ok(None);
        }
        self.stat_unstamped(name, oid)
    }

    /// The size of object `name` (`None` when there is none), without stamping it: only for a
    /// caller that stamps an object it finds before it relies on what it holds.
    fn stat_unstamped(&self, name: &str, oid: &CStr) -> Result<Option<u64>> {
        let mut size = 0u64;
        let mut mtime = 0i64;
        // SAFETY: live context, valid out-pointers.
        let ret = self.io.round_trip("stat", name, || unsafe {
            ffi::rados_stat(self.io.raw, oid.as_ptr(), &raw mut size, &raw mut mtime)
        });
        if is_errno(ret, rustix::io::Errno::NOENT) {
            Ok(None)
        } else if ret < 0 {
            Err(self.error("stat", name, ret))
        } else {
            Ok(Some(size))
        }
    }

    /// Whether object `name` exists, stamped first: a stamp asserts the object exists, and no
    /// older owner can remove an object once this owner stamped it, so an object stamped (now
    /// or earlier in this epoch, and not removed by this handle since) costs no stat.
    fn present(&self, name: &str, oid: &CStr) -> Result<bool> {
        match self.touch(name, oid)? {
            Touched::Stamped => Ok(true),
            Touched::Missing => Ok(false),
            Touched::Unowned => Ok(self.stat(name, oid)?.is_some()),
        }
    }

    /// Fills `buf` from `offset` of the object (stamped first); fails if it is shorter.
    fn read_exact(&self, name: &str, oid: &CStr, buf: &mut [u8], offset: u64) -> Result<()> {
        if self.touch(name, oid)? == Touched::Missing {
            return Err(Error::io(
                "read",
                self.path(name),
                std::io::ErrorKind::NotFound.into(),
            ));
        }
        let mut done = 0;
        while done < buf.len() {
            let want = (buf.len() - done).min(READ_CHUNK);
            let part = &mut buf[done..done + want];
            // SAFETY: live context; `part` is writable for `want` bytes.
            let ret = self.io.round_trip("read", name, || unsafe {
                ffi::rados_read(
                    self.io.raw,
                    oid.as_ptr(),
                    part.as_mut_ptr().cast(),
                    want,
                    offset + done as u64,
                )
            });
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
        Ok(self
            .read_whole(name, oid, u64::MAX)?
            .expect("no object is larger than u64::MAX bytes"))
    }

    /// The whole object (stamped first) when it holds at most `max` bytes, `None` when it
    /// holds more: one read operation that stats it and reads its first [`FIRST_READ`] bytes
    /// (one view of the object), then the rest, if any, by [`Shared::read_exact`].
    fn read_whole(&self, name: &str, oid: &CStr, max: u64) -> Result<Option<Vec<u8>>> {
        let not_found = || Error::io("read", self.path(name), std::io::ErrorKind::NotFound.into());
        if self.touch(name, oid)? == Touched::Missing {
            return Err(not_found());
        }
        let mut bytes = vec![0u8; FIRST_READ];
        let (mut size, mut mtime, mut stat_ret) = (0u64, 0i64, 0i32);
        let (mut read_len, mut read_ret) = (0usize, 0i32);
        // SAFETY: no preconditions.
        let op = unsafe { ffi::rados_create_read_op() };
        assert!(
            !op.is_null(),
            "librados could not allocate a read operation"
        );
        // SAFETY: live operation and context; every out-pointer and `bytes` (writable for
        // `FIRST_READ` bytes) outlive the `operate`, and the operation is released once.
        let ret = unsafe {
            ffi::rados_read_op_stat(op, &raw mut size, &raw mut mtime, &raw mut stat_ret);
            ffi::rados_read_op_read(
                op,
                0,
                FIRST_READ,
                bytes.as_mut_ptr().cast(),
                &raw mut read_len,
                &raw mut read_ret,
            );
            let ret = self.io.round_trip("stat and read", name, || {
                ffi::rados_read_op_operate(op, self.io.raw, oid.as_ptr(), ffi::OPERATION_NOFLAG)
            });
            ffi::rados_release_read_op(op);
            ret
        };
        if is_errno(ret, rustix::io::Errno::NOENT) {
            return Err(not_found());
        }
        for ret in [ret, stat_ret, read_ret] {
            if ret < 0 {
                return Err(self.error("read", name, ret));
            }
        }
        if size > max {
            return Ok(None);
        }
        let len = usize::try_from(size).expect("an object fits in memory");
        let first = read_len.min(len);
        bytes.resize(len, 0);
        if first < len {
            self.read_exact(name, oid, &mut bytes[first..], first as u64)?;
        }
        Ok(Some(bytes))
    }

    /// Creates `name` exclusively, stamped with this owner's epoch, holding `bytes`.
    fn create_with(&self, name: &str, bytes: &[u8], op_name: &'static str) -> Result<()> {
        let oid = cstring(name)?;
        let epoch = self.write_epoch()?;
        self.index_add(name)?;
        let mut op = WriteOp::new();
        op.create_exclusive();
        if !bytes.is_empty() {
            op.write_full(bytes);
        }
        if epoch > 0 {
            op.setxattr(EPOCH_XATTR, &epoch_text(epoch));
        }
        let ret = op.run(&self.io, &oid);
        self.evict(name);
        if ret < 0 {
            return Err(self.error(op_name, name, ret));
        }
        self.mark_stamped(name, epoch);
        Ok(())
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

    /// Lease renewals of this handle that succeeded so far, over every lease it held (one per
    /// third of the lease while it holds the lock; `ackstore_lease_renewals_total` counts the
    /// same per namespace). Every lease held through one [`RadosCluster`] is renewed by one
    /// thread of that connection.
    #[must_use]
    pub fn lease_renewals(&self) -> u64 {
        self.shared.renewals.load(Ordering::Relaxed)
    }

    /// Sets how long later [`Storage::lock`] calls (an open of the topic or store kept here)
    /// wait while another owner holds the lock, before they fail with [`Error::Locked`]
    /// (default zero: they fail at once). A waiting open watches the lock object and tries
    /// again as soon as the holder releases the lock (its close notifies the watchers) or its
    /// lease runs out (the holder records when, with each renewal): within about 100 ms of
    /// either, without polling the cluster meanwhile.
    #[must_use]
    pub fn with_lock_wait(self, bound: Duration) -> Self {
        *self
            .shared
            .lock_wait
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = bound;
        self
    }

    /// Round trips to the cluster that callers of this handle have waited for so far: each
    /// synchronous operation (a read, a stat, a stamp, a create, a lock step), each wait for
    /// outstanding writes that were not yet answered, and each batch of operations sent
    /// together and waited for at once. What a takeover costs is mostly these, one after the
    /// other, each a network round trip and, for a write, a replicated commit.
    #[must_use]
    pub fn round_trips(&self) -> u64 {
        self.shared.io.round_trips.load(Ordering::Relaxed)
    }

    /// The owner epoch this handle writes with while it holds the lock; 0 when it holds none.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.shared.epoch()
    }
}

impl Storage for RadosStorage {
    fn location(&self) -> String {
        self.shared.location.clone()
    }

    fn list(&self) -> Result<Vec<String>> {
        self.shared.list("")
    }

    fn list_prefix(&self, prefix: &str) -> Result<Vec<String>> {
        self.shared.list(prefix)
    }

    /// A name looked up is most often one expected absent (the next version of a record, which
    /// an owner looks up after each record write): a stat answers that without a write
    /// operation, which on a replicated pool waits for the placement group's write path. An
    /// object found is stamped as any first touch (an object created by an older owner after
    /// the stat is what a stamp a moment earlier would also have missed).
    fn exists(&self, name: &str) -> Result<bool> {
        validate_name(name)?;
        let oid = cstring(name)?;
        let shared = &self.shared;
        let epoch = shared.epoch();
        if epoch > 0
            && !shared.is_stamped(name, epoch)
            && shared.stat_unstamped(name, &oid)?.is_none()
        {
            return Ok(false);
        }
        shared.present(name, &oid)
    }

    fn create(&self, name: &str) -> Result<Arc<dyn StorageFile>> {
        validate_name(name)?;
        self.shared.create_with(name, &[], "create")?;
        Ok(Arc::new(RadosFile::new(self.shared.clone(), name)?))
    }

    fn open(&self, name: &str) -> Result<Arc<dyn StorageFile>> {
        validate_name(name)?;
        let file = RadosFile::new(self.shared.clone(), name)?;
        if !self.shared.present(name, &file.oid)? {
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
        op.guard(self.shared.write_epoch()?).remove();
        let ret = op.run(&self.shared.io, &oid);
        self.shared.evict(name);
        self.shared.forget_stamp(name);
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
            op.guard(self.shared.write_epoch()?).write_full(&bytes);
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

    fn creates_whole(&self) -> bool {
        true
    }

    /// One write operation: an exclusive create with the bytes and this owner's epoch (the
    /// name recorded in the index of names first, as for every create).
    fn create_whole(&self, name: &str, bytes: &[u8]) -> Result<()> {
        validate_name(name)?;
        self.shared.create_with(name, bytes, "create")
    }

    fn sync_dir(&self) -> Result<()> {
        // Creates, removes and links returned only once the cluster had applied them.
        Ok(())
    }

    fn lock(&self) -> Result<LockGuard> {
        self.acquire()
    }

    fn lease_state(&self) -> LeaseState {
        self.shared.lease_state()
    }
}

/// One object opened through a [`RadosStorage`].
struct RadosFile {
    shared: Arc<Shared>,
    name: String,
    oid: CString,
    /// The owner epoch of the lease under which the file was opened (0: the handle had never
    /// locked): its writes carry it, and are refused once the handle holds a later lease.
    epoch: u64,
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
            epoch: shared.guard_epoch(),
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
            let ret = if done.is_complete() {
                done.wait()
            } else {
                self.shared
                    .io
                    .round_trip("wait for writes", &self.name, || done.wait())
            };
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
        let epoch = match self.shared.file_write_epoch(self.epoch) {
            Ok(epoch) => epoch,
            Err(e) => {
                state.failed = Some(-rustix::io::Errno::CANCELED.raw_os_error());
                return Err(e);
            }
        };
        self.shared.evict(&self.name);
        let mut op = WriteOp::new();
        op.guard(epoch).write(buf, offset);
        let sent = op.send(&self.shared.io, &self.oid);
        // Again once sent: a read sent before this write may not see it, and must not be cached
        // (reads sent after it do see it, RADOS keeps one client's order on an object).
        self.shared.evict(&self.name);
        match sent {
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
        let epoch = match self.shared.file_write_epoch(self.epoch) {
            Ok(epoch) => epoch,
            Err(e) => {
                state.failed = Some(-rustix::io::Errno::CANCELED.raw_os_error());
                return Err(e);
            }
        };
        self.shared.evict(&self.name);
        let mut op = WriteOp::new();
        op.guard(epoch).truncate(len);
        let ret = op.run(&self.shared.io, &self.oid);
        self.shared.evict(&self.name);
        if ret < 0 {
            state.failed = Some(ret);
            return Err(self.shared.error("truncate", &self.name, ret));
        }
        Ok(())
    }

    fn read_all(&self, max: u64) -> Result<Option<Vec<u8>>> {
        self.drain(&mut self.state(), "read")?;
        self.shared.read_whole(&self.name, &self.oid, max)
    }

    /// The whole object in one read (its size and its end would be two round trips).
    fn read_tail(&self, n: usize, max: u64) -> Result<Option<(u64, Vec<u8>)>> {
        Ok(self.read_all(max)?.map(|mut bytes| {
            let size = bytes.len() as u64;
            bytes.drain(..bytes.len().saturating_sub(n));
            (size, bytes)
        }))
    }

    /// One read of the whole object, cached: cheaper than a round trip per frame.
    fn map_always(&self) -> bool {
        true
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
        let generation = {
            let mut cache = cache();
            if let Some(hit) = cache.get(&self.name, size) {
                return Ok(hit);
            }
            cache.generation
        };
        // The size just read serves the read: the bytes are one view of the object, as a
        // second stat would give (a mapped object is sealed, never written again).
        let mut bytes = vec![0; usize::try_from(size).expect("an object fits in memory")];
        self.shared
            .read_exact(&self.name, &self.oid, &mut bytes, 0)?;
        let bytes: Mapped = Arc::new(bytes);
        cache().insert_read(&self.name, bytes.clone(), generation);
        Ok(bytes)
    }
}

impl Drop for RadosFile {
    fn drop(&mut self) {
        // Completions wait for their operation when released.
        self.state().in_flight.clear();
    }
}

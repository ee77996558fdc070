//! Real-file storage: one directory on a local file system.
//!
//! Owns: the only `unsafe` block of the crate (the memory map of a sealed file), the
//! directory's ownership lock (`LOCK`, held for the handle's life), and the descriptor cache
//! ([`Descriptors`]) that bounds how many files a store keeps open.
//!
//! The lock is a POSIX record lock (`fcntl(F_SETLK)`) on the whole file, which belongs to the
//! process: a child process never inherits it, so a process the application spawns (whose
//! copies of every descriptor live until it calls `exec`) never holds a directory's lock
//! after its owner released it, as an inherited `flock` would. Within the process, the lock
//! files held are kept in [`HELD`] (by device and inode), which refuses a second handle of the
//! same directory. A POSIX lock is released when the process closes *any* descriptor of its
//! file, so the lock file is opened only by [`FileStorage::lock`], and only when this process
//! does not hold it (checked by path before the open, under [`HELD`]'s lock). The lock file
//! never goes through the descriptor cache: the cache never closes it.
//!
//! # Open files
//!
//! A [`RealFile`] keeps its path, not a descriptor: it takes one from its storage's
//! [`Descriptors`] for each operation, which reopens the file when the descriptor was closed
//! and closes the least recently used idle descriptors past its limit. Every storage of one
//! store (its directory and every topic's subdirectory) shares one cache, so a store holds at
//! most `limit` file descriptors however many topics and cursors it has. The storages opened
//! without a limit of their own ([`FileStorage::open`], so every topic opened alone, and every
//! store and group whose config leaves the limit `None`) all share one cache, the process's
//! ([`OpenFiles::process`]): together they hold at most its limit. Outside the caches: each
//! lock file (one per store and per topic opened alone); a directory descriptor while a `list`
//! or `sync_dir` runs; and a descriptor an operation still uses when the cache evicts it (it
//! closes when that operation ends), and one the cache evicted that a thread is closing (a
//! written one syncs as it closes, which takes the time of an `fdatasync`): at most two per
//! thread inside a file operation, as the descriptor a thread reopened may be evicted by
//! another thread while the first closes the one its reopen evicted.
//!
//! Closing and reopening keeps every guarantee a descriptor held for the file's life gave:
//! - all I/O is positional (`pread`, `pwrite`, `fstat`, `ftruncate`): no state lives in the
//!   descriptor. `data_from` moves the descriptor's offset (`SEEK_DATA`) but reads only the
//!   answer, and nothing reads the offset;
//! - a map (`mmap`) holds its own reference to the file: it stays valid after its descriptor
//!   closes, and a sealed file's map is never written through;
//! - `set_len` and writes reach the file (the page cache), not the descriptor: a descriptor
//!   opened later sees them, and its `fdatasync` makes them durable, whichever descriptor wrote
//!   them;
//! - a reopen is of the same file or fails: it opens the path without creating it, and checks
//!   the device, inode and birth time the file had when it was first opened ([`FileId`]). A
//!   file removed or replaced under the store (damage, or the store's own removal of a trimmed
//!   ledger while a handle lives) is an [`Error::Io`] naming the path, never a new empty file.
//!   Device and inode alone do not tell a file from one created after its removal: ext4 and
//!   xfs hand a freed inode number to the next file created. So the storage's own
//!   [`Storage::remove`] and [`Storage::rename`] mark every live handle of the names they
//!   change (both names of a rename) *gone* before the name changes, and a gone handle's reopen
//!   fails, checked after the open: a reopen that found a file created after the removal finds
//!   the mark too. A handle of a name another process or an operator removed and created again
//!   is left to the identity check: a new file that got the freed inode number has a birth time
//!   of its own, so the reopen refuses it (on a file system that keeps no birth time, such as
//!   NFS, or does not keep it for a file's life, overlayfs, whose copy-up gives a file a new
//!   one: [`Births`], device and inode decide alone and miss that case);
//! - a descriptor with writes not yet synced is never closed silently. Each file counts
//!   whether it was written since its last sync; the close of a written descriptor syncs it
//!   first (`fdatasync`, under the file's sync lock), and a failure is *latched*: every later
//!   [`StorageFile::sync_data`] of that file answers the error. Linux reports a write-back error
//!   once to each open descriptor, and may mark the failed pages clean: a descriptor opened
//!   after the failed sync could answer `Ok` for the same bytes, which the latch forbids
//!   (`docs/persistence.md`, "A failed fsync"). A `sync_data` takes the file's sync lock too, so
//!   it either runs before the close's sync (and the close finds nothing to sync) or after it
//!   (and sees the latch). A write-back error nobody has seen yet is reported to the `fdatasync`
//!   of a descriptor opened after it too (Linux since 4.16), and a written descriptor stays
//!   open until a sync covered its writes: no error can fall between two descriptors. The sync
//!   lock is only ever taken with no other lock held (an
//!   evicted descriptor closes after the cache's lock is released, a `sync_data` takes its
//!   descriptor before its sync lock): no lock order to break.
//!
//! A handle dropped (its file closed by its owner) closes its descriptor without a sync, as a
//! file closed by its owner always did: what its owner did not sync, it did not ask to keep.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use rustix::fs::FlockOperation;

use super::{LockGuard, Mapped, Storage, StorageFile, validate_name};
use crate::error::{Error, Result};
use crate::sync::lock;

/// Name of the lock file inside a storage directory.
pub const LOCK_FILE: &str = "LOCK";

/// A directory of real files.
///
/// Its files' descriptors are opened on use and kept in a cache of at most
/// [`FileStorage::open_files`] descriptors, shared with every [`Storage::subdirectory`] of it
/// (see the module's documentation).
#[derive(Debug, Clone)]
pub struct FileStorage {
    dir: PathBuf,
    fds: Arc<Descriptors>,
    /// The file system of `dir`: its device number, and whether a file keeps its birth time
    /// for life there ([`Births`]).
    dev: u64,
    births: Births,
}

/// The limit of the process's descriptor cache ([`OpenFiles::process`]), which every storage
/// opened without a limit of its own shares: half the process's soft limit of open files
/// (`RLIMIT_NOFILE`), at least 1 and at most 65,536 (for an unlimited soft limit too). The
/// other half is left to the rest of the process (sockets, caches given a limit of their own,
/// the descriptors outside the caches: see the module's documentation). Never more than half: a
/// floor above it would give the cache the descriptors the rest needs (a floor of 64 under a
/// soft limit of 64 left none, and a store of many topics failed with `EMFILE`).
#[must_use]
pub fn default_open_files() -> usize {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let half = soft.map_or(u64::MAX, |s| s / 2);
    usize::try_from(half.clamp(1, 65_536)).unwrap_or(65_536)
}

/// A descriptor cache that several [`FileStorage`]s share ([`FileStorage::open_sharing`]): the
/// files of all of them hold at most [`OpenFiles::limit`] descriptors at once (besides those the
/// module's documentation lists). A [`StoreGroup`](crate::StoreGroup) keeps one for all its
/// members on local files. Cheap to share (`Clone` shares the same cache).
#[derive(Debug, Clone)]
pub struct OpenFiles {
    fds: Arc<Descriptors>,
}

impl OpenFiles {
    /// A cache of at most `limit` descriptors; 0 counts as 1.
    #[must_use]
    pub fn new(limit: usize) -> Self {
        Self {
            fds: Arc::new(Descriptors::new(limit)),
        }
    }

    /// The most descriptors the storages sharing this cache keep open at once.
    #[must_use]
    pub fn limit(&self) -> usize {
        self.fds.limit
    }

    /// The process's cache, at [`default_open_files`] as the soft limit stood when it was
    /// first used: every [`FileStorage::open`] (so every topic opened alone with
    /// [`ManagedLedger::open`](crate::ManagedLedger::open)), every
    /// [`Store::open`](crate::Store::open) whose
    /// [`StoreConfig::open_files`](crate::StoreConfig::open_files) is `None` and every
    /// [`StoreGroup`](crate::StoreGroup) whose
    /// [`GroupConfig::open_files`](crate::GroupConfig::open_files) is `None` keep their
    /// descriptors in it, so the files of all of them hold at most its limit together, however
    /// many topics and stores the process opens (a cache each would let two of them take the
    /// whole soft limit). A soft limit changed after the first use does not change it: a
    /// process that raises its limit does so before it opens its first storage, or gives its
    /// stores a limit of their own.
    #[must_use]
    pub fn process() -> Self {
        static PROCESS: OnceLock<OpenFiles> = OnceLock::new();
        PROCESS
            .get_or_init(|| Self::new(default_open_files()))
            .clone()
    }
}

impl FileStorage {
    /// Opens `dir`, creating it (and its parents) when `create` is true, its files' descriptors
    /// kept in the process's cache ([`OpenFiles::process`]), which every storage opened so
    /// shares.
    ///
    /// # Errors
    /// [`Error::Io`] when the directory is missing (and `create` is false) or cannot be created;
    /// [`Error::NotAckstore`] when `dir` exists but is not a directory.
    pub fn open(dir: impl AsRef<Path>, create: bool) -> Result<Self> {
        Self::open_sharing(dir, create, &OpenFiles::process())
    }

    /// [`FileStorage::open`] with a cache of its own: at most `open_files` descriptors of its
    /// files (and its subdirectories' files) open at once, whatever other storages hold; 0
    /// counts as 1.
    ///
    /// # Errors
    /// As [`FileStorage::open`].
    pub fn open_limited(dir: impl AsRef<Path>, create: bool, open_files: usize) -> Result<Self> {
        Self::open_sharing(dir, create, &OpenFiles::new(open_files))
    }

    /// [`FileStorage::open`] keeping its files' descriptors in `open_files`, a cache other
    /// storages may share: all of them together hold at most [`OpenFiles::limit`] descriptors.
    ///
    /// # Errors
    /// As [`FileStorage::open`].
    pub fn open_sharing(
        dir: impl AsRef<Path>,
        create: bool,
        open_files: &OpenFiles,
    ) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        if create {
            std::fs::create_dir_all(&dir).map_err(|e| Error::io("create directory", &dir, e))?;
        }
        let meta = std::fs::metadata(&dir).map_err(|e| Error::io("open directory", &dir, e))?;
        if !meta.is_dir() {
            return Err(Error::NotAckstore {
                path: dir.clone(),
                reason: "it is not a directory".into(),
            });
        }
        let births = Births::of(&dir)?;
        Ok(Self {
            dir,
            fds: Arc::clone(&open_files.fds),
            dev: meta.dev(),
            births,
        })
    }

    /// The most descriptors of files this storage and its subdirectories keep open at once
    /// (besides those the module's documentation lists).
    #[must_use]
    pub fn open_files(&self) -> usize {
        self.fds.limit
    }

    /// From now on while `fail` holds, the sync that closes a written descriptor answers an
    /// `EIO` as a failing disk would (after syncing): a test's way to see the latch. It holds
    /// for every storage sharing this one's cache (a test gives the storage a cache of its own,
    /// [`FileStorage::open_limited`]).
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn fail_closing_syncs(&self, fail: bool) {
        self.fds.fail_closing_syncs.store(fail, Ordering::Release);
    }

    /// The directory's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, name: &str) -> Result<PathBuf> {
        validate_name(name)?;
        Ok(self.dir.join(name))
    }
}

impl Storage for FileStorage {
    fn location(&self) -> String {
        self.dir.display().to_string()
    }

    fn local_dir(&self) -> Option<&Path> {
        Some(&self.dir)
    }

    fn list(&self) -> Result<Vec<String>> {
        self.list_prefix("")
    }

    /// One pass over the directory (`each_entry`): a name is compared with `prefix` before
    /// it is kept, and only the names kept are sorted, so a listing of a few records in a
    /// directory of thousands of ledgers costs the directory read alone.
    fn list_prefix(&self, prefix: &str) -> Result<Vec<String>> {
        let mut names = Vec::new();
        let wanted = |name: &[u8]| name.starts_with(prefix.as_bytes());
        each_entry(&self.dir, wanted, |name, is_dir| {
            // Subdirectories are storages of their own (`subdirectory`), not files. Names
            // that are not UTF-8 were not written by ackstore; they are ignored.
            if !is_dir && let Ok(name) = std::str::from_utf8(name) {
                names.push(name.to_owned());
            }
            true
        })
        .map_err(|e| Error::io("list", self.location(), e))?;
        names.sort_unstable();
        Ok(names)
    }

    /// A subdirectory of this directory, as a [`FileStorage`] of its own. With `create`, a
    /// missing one is made with `mkdir` (its name durable after this directory's next
    /// `sync_dir`).
    fn subdirectory(&self, name: &str, create: bool) -> Result<Option<Arc<dyn Storage>>> {
        let path = self.path_of(name)?;
        if create {
            match std::fs::create_dir(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::io("create directory", &path, e)),
            }
        }
        let meta = std::fs::metadata(&path).map_err(|e| Error::io("open directory", &path, e))?;
        if !meta.is_dir() {
            return Err(Error::io(
                "open directory",
                &path,
                std::io::Error::other("it is not a directory"),
            ));
        }
        // A subdirectory on the same device is on the same file system; another is a mount
        // point, asked again.
        let births = if meta.dev() == self.dev {
            self.births
        } else {
            Births::of(&path)?
        };
        Ok(Some(Arc::new(Self {
            dir: path,
            fds: Arc::clone(&self.fds),
            dev: meta.dev(),
            births,
        })))
    }

    /// For a handle of a real file (of any [`FileStorage`]): one lookup of
    /// the name against the identity of the handle's open descriptor (device, inode and birth
    /// time), which pins it (`None` once the cache closed it).
    fn names_file(&self, name: &str, file: &dyn StorageFile) -> Result<Option<bool>> {
        let path = self.path_of(name)?;
        match file.as_any().and_then(|f| f.downcast_ref::<RealFile>()) {
            Some(real) => real.names(&path),
            None => Ok(None),
        }
    }

    fn exists(&self, name: &str) -> Result<bool> {
        let path = self.path_of(name)?;
        path.try_exists().map_err(|e| Error::io("stat", &path, e))
    }

    fn create(&self, name: &str) -> Result<Arc<dyn StorageFile>> {
        let path = self.path_of(name)?;
        // Created without `O_NOATIME`, which is asked of the new file after (see
        // `access_time_off`): the kernel makes the file before it checks the flag.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io("create", &path, e))?;
        access_time_off(&file);
        Ok(RealFile::adopt(&self.fds, file, path, true, self.births))
    }

    fn open(&self, name: &str) -> Result<Arc<dyn StorageFile>> {
        let path = self.path_of(name)?;
        let (file, writable) =
            open_existing(&path, None).map_err(|e| Error::io("open", &path, e))?;
        Ok(RealFile::adopt(
            &self.fds,
            file,
            path,
            writable,
            self.births,
        ))
    }

    /// Removes `name`; its live handles are gone from then on (see the module's documentation).
    fn remove(&self, name: &str) -> Result<()> {
        let path = self.path_of(name)?;
        self.fds
            .changing_names(&[&path], || std::fs::remove_file(&path))
            .map_err(|e| Error::io("remove", &path, e))
    }

    /// Renames `from` to `to`; the live handles of both names are gone from then on (see the
    /// module's documentation).
    fn rename(&self, from: &str, to: &str) -> Result<()> {
        let src = self.path_of(from)?;
        let dst = self.path_of(to)?;
        self.fds
            .changing_names(&[&src, &dst], || std::fs::rename(&src, &dst))
            .map_err(|e| Error::io("rename", &src, e))
    }

    fn link(&self, from: &str, to: &str) -> Result<()> {
        let src = self.path_of(from)?;
        let dst = self.path_of(to)?;
        std::fs::hard_link(&src, &dst).map_err(|e| Error::io("link", &dst, e))
    }

    fn sync_dir(&self) -> Result<()> {
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io("fsync directory", self.location(), e))
    }

    fn lock(&self) -> Result<LockGuard> {
        let path = self.dir.join(LOCK_FILE);
        let locked = || Error::Locked {
            path: self.dir.clone(),
        };
        // Held until the lock is taken or refused: no other handle of this process opens or
        // closes a lock file meanwhile.
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        if let Ok(m) = std::fs::metadata(&path)
            && held.contains(&(m.dev(), m.ino()))
        {
            return Err(locked());
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io("open lock file", &path, e))?;
        let m = file
            .metadata()
            .map_err(|e| Error::io("stat lock file", &path, e))?;
        let id = (m.dev(), m.ino());
        if held.contains(&id) {
            // The file appeared between the check and the open, already held by this process:
            // closing this descriptor would release that lock, so it is kept open.
            std::mem::forget(file);
            return Err(locked());
        }
        match rustix::fs::fcntl_lock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {
                held.push(id);
                Ok(LockGuard::new(Box::new(HeldLock {
                    file: Some(file),
                    id,
                })))
            }
            Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::ACCESS => {
                Err(locked())
            }
            Err(e) => Err(Error::io("lock", &path, std::io::Error::from(e))),
        }
    }
}

/// The lock files this process holds, by device and inode.
static HELD: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

/// A held directory lock: closing the file releases the POSIX lock, then the file leaves
/// [`HELD`] (both under its lock, so no other handle of the process opens the file between).
#[derive(Debug)]
struct HeldLock {
    file: Option<File>,
    id: (u64, u64),
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        drop(self.file.take());
        held.retain(|h| *h != self.id);
    }
}

/// Opens the existing file `path` for reading and writing, or for reading only when it cannot
/// be written; never creates it. `writable`: the mode a reopen must have (`None` on the first
/// open, which takes the best it can). Answers the file and whether it is writable.
/// Every open goes through [`without_access_time`].
fn open_existing(path: &Path, writable: Option<bool>) -> std::io::Result<(File, bool)> {
    let open = |write: bool| {
        without_access_time(|noatime| {
            OpenOptions::new()
                .read(true)
                .write(write)
                .custom_flags(noatime.bits().cast_signed())
                .open(path)
        })
    };
    let rw = || open(true);
    let ro = || open(false);
    match writable {
        Some(true) => rw().map(|f| (f, true)),
        Some(false) => ro().map(|f| (f, false)),
        None => rw()
            .map(|f| (f, true))
            .or_else(|_| ro().map(|f| (f, false))),
    }
}

/// Bytes of the buffer of a directory listing ([`each_entry`]), which each `getdents` fills.
const LISTING_BUFFER_BYTES: usize = 32 * 1024;

/// Calls `each` with the name of every entry of the directory `dir` but `.` and `..` that is
/// `wanted`, and whether it is a directory (not following a link), in the directory's order,
/// until `each` answers `false`. The directory is read through a descriptor opened [`without_access_time`].
/// The type comes with the entry on Linux file systems; an entry that does not give it is
/// asked by a `stat` (and left out if it is gone by then), once `wanted` took its name.
pub(crate) fn each_entry(
    dir: &Path,
    wanted: impl Fn(&[u8]) -> bool,
    mut each: impl FnMut(&[u8], bool) -> bool,
) -> std::io::Result<()> {
    use rustix::fs::{AtFlags, FileType, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let fd = without_access_time(|noatime| {
        rustix::fs::open(dir, flags | noatime, rustix::fs::Mode::empty())
            .map_err(std::io::Error::from)
    })?;
    // One buffer for the whole listing, large enough that a topic's directory (a few dozen
    // entries) takes one `getdents` and the one that finds the end.
    let mut buffer = Vec::with_capacity(LISTING_BUFFER_BYTES);
    let mut entries = rustix::fs::RawDir::new(&fd, buffer.spare_capacity_mut());
    while let Some(entry) = entries.next() {
        let entry = match entry {
            Ok(entry) => entry,
            // The directory was removed while it was read: nothing more in it.
            Err(rustix::io::Errno::NOENT) => break,
            Err(e) => return Err(e.into()),
        };
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." || !wanted(name) {
            continue;
        }
        let kind = match entry.file_type() {
            FileType::Unknown => {
                match rustix::fs::statat(&fd, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => FileType::from_raw_mode(st.st_mode),
                    // Removed since the directory was read: not an entry any more.
                    Err(rustix::io::Errno::NOENT) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            kind => kind,
        };
        if !each(name, kind == FileType::Directory) {
            break;
        }
    }
    Ok(())
}

/// Runs `open` with `O_NOATIME`, then, if the kernel refuses that flag, without it.
///
/// A read through a descriptor opened with `O_NOATIME` leaves the file's (or directory's)
/// access time alone. Without it, under Linux's default `relatime`, the first read of every
/// file or directory changed since its last read writes the inode: after a store ran, a
/// restart's reads of its records, ledgers and directory listings would each dirty an inode
/// (about a tenth of a store topic's open; nothing in ackstore reads an access time). The
/// kernel takes the flag only from the file's owner or a process with `CAP_FOWNER` and answers
/// `EPERM` otherwise (a store read by another user, as `ackstore verify` may be): that open is
/// made again without the flag, with the access time kept as the mount says. A file system
/// that ignores the flag (or a `noatime` mount) makes no difference. For opens of files that
/// exist only: an open that creates one must not be made twice ([`access_time_off`]).
fn without_access_time<T>(
    open: impl Fn(rustix::fs::OFlags) -> std::io::Result<T>,
) -> std::io::Result<T> {
    match open(rustix::fs::OFlags::NOATIME) {
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::PERM.raw_os_error()) => {
            open(rustix::fs::OFlags::empty())
        }
        answer => answer,
    }
}

/// Turns `O_NOATIME` on for `file`, a file this process just created, where the kernel grants
/// it (as [`without_access_time`] does for an open; the reads of the file's descriptors, this
/// one and every reopen, then leave its access time alone).
///
/// Not asked at the create itself: a created file's owner is not always its creator (an NFS
/// export with `all_squash`, an SMB or FAT mount with `uid=`, a FUSE file system that maps
/// owners show another), and the kernel checks the flag only after it made the file. An
/// `O_CREAT | O_EXCL | O_NOATIME` refused with `EPERM` has created the file all the same, and
/// the create again without the flag fails with `EEXIST`. A refusal here (`EPERM`) changes
/// nothing but the access time, so it is no error.
fn access_time_off(file: &File) {
    use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
    if let Ok(flags) = fcntl_getfl(file) {
        let _refused = fcntl_setfl(file, flags | OFlags::NOATIME);
    }
}

/// The descriptor cache of a [`FileStorage`] and its subdirectories: the open descriptors by
/// file, least recently used first. Invariant: at most `limit` entries; a descriptor leaves it
/// only to close (when the last operation using it ends).
///
/// Lock order: none. `open` and `names` are never held together, and a file's sync lock is
/// taken with neither held.
struct Descriptors {
    limit: usize,
    open: Mutex<lru::LruCache<u64, Arc<Descriptor>>>,
    /// Every live handle by its path. Invariant: a handle is listed from its adoption to its
    /// drop; the storage marks the handles of a name gone under this lock before it changes
    /// the name, so no handle is adopted under a name while the name changes. Hashed with
    /// `SipHash` (`crate::hashing`): the table serves every storage of the process, and a path
    /// holds the directory its caller chose, which may be named after a client's topic.
    names: Mutex<HashMap<PathBuf, Vec<Weak<Shared>>>>,
    /// The key of the next file adopted.
    next: AtomicU64,
    /// See [`FileStorage::fail_closing_syncs`].
    #[cfg(feature = "internals")]
    fail_closing_syncs: AtomicBool,
}

impl std::fmt::Debug for Descriptors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Descriptors")
            .field("limit", &self.limit)
            .field("open", &lock(&self.open).len())
            .finish_non_exhaustive()
    }
}

impl Descriptors {
    fn new(limit: usize) -> Self {
        Self {
            limit: limit.max(1),
            open: Mutex::new(lru::LruCache::unbounded()),
            names: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
            #[cfg(feature = "internals")]
            fail_closing_syncs: AtomicBool::new(false),
        }
    }

    /// Runs `change` (a removal or rename of `paths`) with every live handle of `paths` marked
    /// gone first; a change that fails with the names still there takes the marks back.
    fn changing_names(
        &self,
        paths: &[&Path],
        change: impl FnOnce() -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let names = lock(&self.names);
        let handles: Vec<Arc<Shared>> = paths
            .iter()
            .filter_map(|p| names.get(*p))
            .flatten()
            .filter_map(Weak::upgrade)
            .filter(|h| !h.gone.swap(true, Ordering::SeqCst))
            .collect();
        let result = change();
        if let Err(e) = &result
            && e.kind() != std::io::ErrorKind::NotFound
        {
            for h in &handles {
                h.gone.store(false, Ordering::SeqCst);
            }
        }
        drop(names);
        result
    }

    /// Puts `descriptor` in the cache as the most recently used, and answers the descriptors it
    /// evicted past the limit, for the caller to drop (close) once it holds no lock.
    #[must_use]
    fn insert(
        open: &mut lru::LruCache<u64, Arc<Descriptor>>,
        limit: usize,
        key: u64,
        descriptor: Arc<Descriptor>,
    ) -> Vec<Arc<Descriptor>> {
        // A key is inserted only when absent (under the same lock): `put` replaces nothing, but
        // what it would replace closes outside the lock too.
        let mut evicted: Vec<_> = open.put(key, descriptor).into_iter().collect();
        while open.len() > limit {
            match open.pop_lru() {
                Some((_, d)) => evicted.push(d),
                None => break,
            }
        }
        // Before the lock is released, so before any reopen of these files (see `Shared::id`):
        // an `fstat` only for a file that has not had one.
        for d in &evicted {
            d.identify();
        }
        evicted
    }
}

/// Which file a descriptor or a name leads to: its device and inode, and its birth time where
/// the file system keeps one (`statx`'s `btime`: ext4, xfs, btrfs, tmpfs). Device and inode
/// alone tell files apart only while a descriptor holds the inode: once the last one closes and
/// the name is removed, ext4 and xfs hand the freed inode number to the next file created, so a
/// file put under the name from outside can have it. The birth time of that file is its own,
/// unless both were born within one tick of the clock the file system stamps it from (a
/// kernel's coarse clock ticks every few milliseconds): a replacement that soon after the first
/// file's creation is still taken for it. Where the file system keeps no birth time (NFS),
/// both sides have none and device and inode decide alone, as they do on overlayfs
/// ([`Births`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    born: Option<std::time::SystemTime>,
}

impl FileId {
    /// The identity `m` (an `fstat` or a `stat` by name, which std takes by `statx` with the
    /// birth time on Linux) shows, with its birth time where `births` says the file system
    /// keeps one for life.
    fn of(m: &std::fs::Metadata, births: Births) -> Self {
        Self {
            dev: m.dev(),
            ino: m.ino(),
            born: match births {
                Births::Kept => m.created().ok(),
                Births::Unstable => None,
            },
        }
    }
}

/// Whether a file system keeps a file's birth time for the file's life, so that [`FileId`]
/// may compare it. overlayfs does not: a copy-up (an open of a lower layer's file for writing,
/// or a `chmod` of it) gives the file a new one in the upper layer and keeps its device and
/// inode numbers, so the same file would show another birth time to a handle that saw it
/// before; there, device and inode decide alone, as on a file system without birth times.
/// A FUSE file system is one of those where its server reports none: fuse-overlayfs 1.10, the
/// rootless containers' overlay, shows no birth time (`statx` leaves `STATX_BTIME` out, so
/// [`FileId`] holds `None` either way) and keeps a file's inode number across its copy-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Births {
    Kept,
    Unstable,
}

impl Births {
    /// What the file system of `dir` keeps (one `statfs`).
    fn of(dir: &Path) -> Result<Self> {
        /// `OVERLAYFS_SUPER_MAGIC`, `statfs`'s type of an overlay (linux/magic.h).
        const OVERLAYFS: i64 = 0x794c_7630;
        let fs = rustix::fs::statfs(dir)
            .map_err(|e| Error::io("open directory", dir, std::io::Error::from(e)))?;
        // `f_type`'s type differs between targets (`i64` on x86_64, `u32` on some others).
        #[allow(clippy::useless_conversion)]
        let kind = i64::from(fs.f_type);
        Ok(if kind == OVERLAYFS {
            Self::Unstable
        } else {
            Self::Kept
        })
    }
}

/// What a file's descriptors share: where it is, which file it is, and its sync state.
#[derive(Debug)]
struct Shared {
    path: PathBuf,
    /// Which file it is ([`FileId`]), from the first `fstat` of its first descriptor (the
    /// `size`, `map` and `data_from` that take one, usually right after the open) or, at the
    /// latest, from the cache's eviction of that descriptor, before it can close: known before
    /// a reopen, which fails when it finds another file under the path. (A descriptor leaves
    /// the cache by eviction or with its handle; not at the open, which would `fstat` every file
    /// twice, the caller's size right after.)
    id: OnceLock<FileId>,
    /// Whether `id` holds the birth time (its storage's [`Births`]).
    births: Births,
    /// Opened for writing (a reopen takes the same mode).
    writable: bool,
    /// Set when this storage removed or renamed the file's name (see
    /// [`Descriptors::changing_names`]): the file can no longer be reopened by its path.
    gone: AtomicBool,
    /// Set after each write or `set_len` (while its descriptor is held), cleared before each
    /// sync: a descriptor that closes while it is set syncs first.
    written: AtomicBool,
    /// The file's sync lock, holding the latched failure of a closing sync (which every later
    /// `sync_data` answers).
    sync: Mutex<Option<Latched>>,
    #[cfg(feature = "internals")]
    fds: std::sync::Weak<Descriptors>,
}

/// A failed closing sync, kept to be answered again.
#[derive(Debug, Clone)]
struct Latched {
    kind: std::io::ErrorKind,
    message: String,
}

impl Shared {
    fn latched_error(&self, latched: &Latched) -> Error {
        Error::io(
            "fdatasync",
            &self.path,
            std::io::Error::new(
                latched.kind,
                format!(
                    "a sync as its descriptor closed failed earlier: {}",
                    latched.message
                ),
            ),
        )
    }

    /// The sync a closing descriptor owes when the file was written since its last sync;
    /// latches its failure.
    fn sync_before_close(&self, file: &File) {
        if !self.written.load(Ordering::Acquire) {
            return;
        }
        let mut latched = lock(&self.sync);
        if latched.is_some() || !self.written.swap(false, Ordering::AcqRel) {
            return;
        }
        #[allow(unused_mut)]
        let mut result = file.sync_data();
        #[cfg(feature = "internals")]
        if result.is_ok()
            && self
                .fds
                .upgrade()
                .is_some_and(|f| f.fail_closing_syncs.load(Ordering::Acquire))
        {
            // EIO, what a lost write-back answers.
            result = Err(std::io::Error::from_raw_os_error(5));
        }
        if let Err(e) = result {
            ::log::warn!(target: crate::observe::LOG_TARGET,
                "{}: the sync of a descriptor closing failed; the file's next sync answers it: {e}",
                self.path.display());
            *latched = Some(Latched {
                kind: e.kind(),
                message: e.to_string(),
            });
        }
    }
}

/// One open descriptor of a file; closing it (dropping the last reference) syncs it first when
/// the file was written since its last sync.
#[derive(Debug)]
struct Descriptor {
    file: File,
    shared: Arc<Shared>,
}

impl Descriptor {
    /// The file's metadata by `fstat`, kept as the file's identity ([`FileId`]) when it has
    /// none yet.
    fn metadata(&self) -> std::io::Result<std::fs::Metadata> {
        let m = self.file.metadata()?;
        let _known = self.shared.id.set(FileId::of(&m, self.shared.births));
        Ok(m)
    }

    /// Takes the file's identity (an `fstat`) unless it is known. Where that `fstat` fails (a
    /// kernel out of memory, a network file system's stale handle), the identity stays unknown
    /// and every later reopen of the file fails, saying so, rather than trust the path.
    fn identify(&self) {
        if self.shared.id.get().is_none() {
            let _unknown = self.metadata();
        }
    }
}

impl Drop for Descriptor {
    fn drop(&mut self) {
        self.shared.sync_before_close(&self.file);
    }
}

/// A file of a [`FileStorage`]: its path, and its descriptor while the cache keeps it.
#[derive(Debug)]
struct RealFile {
    key: u64,
    shared: Arc<Shared>,
    fds: Arc<Descriptors>,
}

impl RealFile {
    /// A handle of `file` (just opened or created at `path`), its descriptor cached.
    fn adopt(
        fds: &Arc<Descriptors>,
        file: File,
        path: PathBuf,
        writable: bool,
        births: Births,
    ) -> Arc<dyn StorageFile> {
        let shared = Arc::new(Shared {
            path,
            id: OnceLock::new(),
            births,
            writable,
            gone: AtomicBool::new(false),
            written: AtomicBool::new(false),
            sync: Mutex::new(None),
            #[cfg(feature = "internals")]
            fds: Arc::downgrade(fds),
        });
        lock(&fds.names)
            .entry(shared.path.clone())
            .or_default()
            .push(Arc::downgrade(&shared));
        let key = fds.next.fetch_add(1, Ordering::Relaxed);
        let descriptor = Arc::new(Descriptor {
            file,
            shared: Arc::clone(&shared),
        });
        let evicted = Descriptors::insert(&mut lock(&fds.open), fds.limit, key, descriptor);
        drop(evicted);
        Arc::new(Self {
            key,
            shared,
            fds: Arc::clone(fds),
        })
    }

    fn err(&self, op: &'static str, e: std::io::Error) -> Error {
        Error::io(op, &self.shared.path, e)
    }

    /// The file's descriptor, reopened (the same file, or an error) when the cache closed it;
    /// the descriptors that makes the cache evict close before this returns, with no lock held.
    ///
    /// The reopen (a path lookup, an `open` and an `fstat`) runs without the cache's lock,
    /// which every file of the store shares: threads reopening files of different topics do
    /// not wait for each other's syscalls. A thread that finds the file's descriptor cached by
    /// another's reopen meanwhile takes that one and closes its own, never used (no write
    /// went through it, so it closes without a sync); so the cache holds one descriptor per
    /// file, as before.
    fn descriptor(&self) -> Result<Arc<Descriptor>> {
        if let Some(d) = lock(&self.fds.open).get(&self.key) {
            return Ok(Arc::clone(d));
        }
        let gone = || {
            self.err(
                "reopen",
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the storage removed or renamed the file since it was opened",
                ),
            )
        };
        if self.shared.gone.load(Ordering::SeqCst) {
            return Err(gone());
        }
        let path = &self.shared.path;
        let (file, _) =
            open_existing(path, Some(self.shared.writable)).map_err(|e| self.err("reopen", e))?;
        // After the open: a name changed before the open found the mark set (see
        // `Descriptors::changing_names`), even when the open found a new file of the old inode.
        if self.shared.gone.load(Ordering::SeqCst) {
            return Err(gone());
        }
        let Some(&id) = self.shared.id.get() else {
            return Err(self.err(
                "reopen",
                std::io::Error::other(
                    "the file's identity could not be read before its descriptor closed",
                ),
            ));
        };
        let m = file.metadata().map_err(|e| self.err("stat", e))?;
        if FileId::of(&m, self.shared.births) != id {
            return Err(self.err(
                "reopen",
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the file was replaced by another under this name since it was opened",
                ),
            ));
        }
        let mut open = lock(&self.fds.open);
        if let Some(d) = open.get(&self.key) {
            let d = Arc::clone(d);
            drop(open);
            drop(file);
            return Ok(d);
        }
        let descriptor = Arc::new(Descriptor {
            file,
            shared: Arc::clone(&self.shared),
        });
        let evicted =
            Descriptors::insert(&mut open, self.fds.limit, self.key, Arc::clone(&descriptor));
        drop(open);
        drop(evicted);
        Ok(descriptor)
    }

    /// Whether `path` names this very file: one lookup of it, compared with the identity
    /// ([`FileId`]) of this handle's descriptor, held open across it: while a descriptor is
    /// open its inode cannot be freed, so no other file has that identity. `None` when the
    /// cache has closed the descriptor (a reopen by the handle's own name would cost what the
    /// caller's read of the name does).
    fn names(&self, path: &Path) -> Result<Option<bool>> {
        let Some(descriptor) = lock(&self.fds.open).get(&self.key).map(Arc::clone) else {
            return Ok(None);
        };
        let id = if let Some(&id) = self.shared.id.get() {
            id
        } else {
            let m = descriptor.metadata().map_err(|e| self.err("stat", e))?;
            FileId::of(&m, self.shared.births)
        };
        let named = match std::fs::symlink_metadata(path) {
            Ok(m) => FileId::of(&m, self.shared.births) == id,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(Error::io("stat", path, e)),
        };
        drop(descriptor);
        Ok(Some(named))
    }
}

impl Drop for RealFile {
    /// The owner closes the file: its descriptor closes without a sync (see the module's
    /// documentation), once the cache lets it go.
    fn drop(&mut self) {
        self.shared.written.store(false, Ordering::Release);
        {
            let mut names = lock(&self.fds.names);
            if let Some(handles) = names.get_mut(&self.shared.path) {
                let this = Arc::downgrade(&self.shared);
                handles.retain(|h| h.strong_count() > 0 && !h.ptr_eq(&this));
                if handles.is_empty() {
                    names.remove(&self.shared.path);
                }
            }
        }
        let d = lock(&self.fds.open).pop(&self.key);
        drop(d);
    }
}

impl StorageFile for RealFile {
    fn size(&self) -> Result<u64> {
        self.descriptor()?
            .metadata()
            .map(|m| m.len())
            .map_err(|e| self.err("stat", e))
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.descriptor()?
            .file
            .read_exact_at(buf, offset)
            .map_err(|e| self.err("read", e))
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let d = self.descriptor()?;
        let result = d.file.write_all_at(buf, offset);
        // After the write (see `Shared::written`): a sync running meanwhile clears the flag
        // before its own sync, which may not cover this write; the descriptor cannot close
        // before the flag is set, as this holds it. Set whatever the write answered: a
        // failed write may have changed some bytes.
        self.shared.written.store(true, Ordering::Release);
        result.map_err(|e| self.err("write", e))
    }

    fn sync_data(&self) -> Result<()> {
        // The descriptor first, then the sync lock: taking it may close evicted descriptors,
        // whose closing syncs take their own files' sync locks (one at a time, see the
        // module's documentation). Declared before the guard, so dropped after it: the last
        // reference's close takes this file's sync lock.
        let d = self.descriptor()?;
        let latched = lock(&self.shared.sync);
        if let Some(l) = &*latched {
            return Err(self.shared.latched_error(l));
        }
        self.shared.written.store(false, Ordering::Release);
        let result = d.file.sync_data().map_err(|e| self.err("fdatasync", e));
        drop(latched);
        result
    }

    fn set_len(&self, len: u64) -> Result<()> {
        let d = self.descriptor()?;
        let result = d.file.set_len(len);
        // As in `write_all_at`.
        self.shared.written.store(true, Ordering::Release);
        result.map_err(|e| self.err("truncate", e))
    }

    fn map(&self) -> Result<Mapped> {
        let d = self.descriptor()?;
        if d.metadata().map_err(|e| self.err("stat", e))?.len() == 0 {
            return Ok(Arc::new(Vec::<u8>::new()));
        }
        // SAFETY: callers map sealed ledgers, under the directory's exclusive lock, and only
        // once the owner's last write to the file is done (the seal's or the open's
        // synced-length slot, written before the first map); ackstore never writes to or
        // truncates a sealed ledger after that, so the mapped bytes cannot change or disappear
        // while the map is alive. The journal maps its segments under the same lock and reads
        // through the map only records its index references, which no write or cut of the
        // segment touches (appends go past them; a failed write's cut takes back only bytes
        // nothing references). (A read-only tool maps without the lock: an owner may meanwhile
        // overwrite that file's 12-byte slot in the header, once, and nothing else; readers of
        // a map read frames and the index, never the slot.) The map keeps its own reference to
        // the file: it outlives the descriptor, which the cache may close.
        let map = unsafe { memmap2::Mmap::map(&d.file) }.map_err(|e| self.err("mmap", e))?;
        Ok(Arc::new(map))
    }

    /// `lseek(SEEK_DATA)`: the start of the next data extent, so a scan skips a hole without
    /// reading it. `ENXIO` means no data follows `offset`. A file system without hole
    /// support answers `offset` itself, which is still correct.
    fn data_from(&self, offset: u64) -> Result<u64> {
        let d = self.descriptor()?;
        let size = d.metadata().map_err(|e| self.err("stat", e))?.len();
        if offset >= size {
            return Ok(size);
        }
        // The descriptor's own position is never used (all I/O is positional), so moving it
        // disturbs no other reader, and a reopened descriptor loses nothing.
        match rustix::fs::seek(&d.file, rustix::fs::SeekFrom::Data(offset)) {
            Ok(at) => Ok(at.clamp(offset, size)),
            Err(rustix::io::Errno::NXIO) => Ok(size),
            Err(e) => Err(self.err("lseek", e.into())),
        }
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

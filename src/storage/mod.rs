//! The storage trait every on-disk structure writes through.
//!
//! Owns: the boundary between ackstore and the operating system. A [`Storage`] is one flat
//! directory of files whose names ackstore chooses (never a client's string, see
//! [`validate_name`]). Three implementations exist:
//!
//! - [`FileStorage`]: real files, real `fdatasync`, `memmap2` views of sealed files, an
//!   exclusive lock so a directory has one owner at a time, and a bounded cache of open
//!   descriptors (reopened on use);
//! - [`MemStorage`]: an in-memory disk that keeps a *live* image (what the page cache holds) and a
//!   *durable* image (what survives power loss) per file and for the directory itself, can be told
//!   to fail every operation after the N-th ("cut the power"), and hands out the image a disk
//!   would hold after the cut, so tests can reopen it;
//! - `RadosStorage` (cargo feature `rados`, module `rados`): objects in a namespace of a Ceph RADOS pool,
//!   durable once the cluster acknowledges a write, with an ownership lease and an owner epoch
//!   that makes the cluster refuse a stale owner's writes.
//!
//! Durability model, shared by both: `write_all_at` reaches the live image only; `sync_data`
//! makes one file's bytes durable; `create`, `remove` and `rename` change the live directory
//! only, and `sync_dir` makes the directory's names durable. `link` fails when the new name
//! exists, atomically, so two writers can race for a name and exactly one wins.

mod file;
mod mem;
#[cfg(feature = "rados")]
pub mod rados;

use std::fmt;
use std::sync::Arc;

pub(crate) use file::each_entry;
pub use file::{FileStorage, OpenFiles, default_open_files};
pub use mem::MemStorage;
#[cfg(feature = "rados")]
pub use rados::{RadosCluster, RadosOptions, RadosStorage, RadosTimeouts};

use crate::error::{Error, Result};

/// A read-only view of a whole file's bytes, taken at one moment.
///
/// For [`FileStorage`] this is a memory map; callers map only files whose mapped bytes are
/// never written or cut while the view lives and read only bytes that stay (a sealed ledger;
/// a journal segment, whose writes append past what its index references and whose cuts take
/// back only bytes nothing references), so the view stays valid.
pub type Mapped = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// A flat directory of named files.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Where this storage lives, for messages (a path, or `memory`).
    fn location(&self) -> String;
    /// Names of every file in the directory (live image), sorted. Subdirectories (see
    /// [`Storage::subdirectory`]) are not files and are not listed.
    fn list(&self) -> Result<Vec<String>>;
    /// Names of every file whose name starts with `prefix` (live image), sorted: what
    /// [`Storage::list`] returns, filtered. Backends that keep names in order answer without
    /// reading the other names; the default filters a whole listing.
    ///
    /// # Errors
    /// As [`Storage::list`].
    fn list_prefix(&self, prefix: &str) -> Result<Vec<String>> {
        let mut names = self.list()?;
        names.retain(|n| n.starts_with(prefix));
        Ok(names)
    }
    /// The storage of the subdirectory `name` (a [`validate_name`] name), for backends that
    /// have directories; `None` (the default) for those that do not, whose callers keep such
    /// files in this storage under a name prefix instead (see `store::space`). With `create`,
    /// a missing subdirectory is created; its name becomes durable with this storage's next
    /// [`Storage::sync_dir`], which the caller runs before it relies on any file inside. The
    /// subdirectory shares this storage's lock: it takes none of its own.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a name [`validate_name`] refuses; [`Error::Io`] when the
    /// subdirectory is missing (without `create`), is not a directory, or cannot be created.
    fn subdirectory(&self, name: &str, create: bool) -> Result<Option<Arc<dyn Storage>>> {
        let _ = (name, create);
        Ok(None)
    }
    /// The local directory this storage keeps its files in, for backends that keep them in
    /// one (`None`, the default, for the others). A topic opened on its own checks it: a
    /// directory of a store's topic opens only through the store.
    fn local_dir(&self) -> Option<&std::path::Path> {
        None
    }
    /// Whether `name` exists (live image).
    fn exists(&self, name: &str) -> Result<bool>;
    /// Creates a new, empty file; fails if it already exists.
    fn create(&self, name: &str) -> Result<Arc<dyn StorageFile>>;
    /// Opens an existing file for reading and writing.
    fn open(&self, name: &str) -> Result<Arc<dyn StorageFile>>;
    /// Removes a file.
    fn remove(&self, name: &str) -> Result<()>;
    /// Renames `from` to `to`, replacing `to` atomically if it exists.
    fn rename(&self, from: &str, to: &str) -> Result<()>;
    /// Gives the file `from` the second name `to` (a hard link, `link(2)`), failing with an
    /// [`Error::Io`] of kind [`std::io::ErrorKind::AlreadyExists`] when `to` exists. Atomic:
    /// of two links to the same new name, from this process or another, exactly one succeeds;
    /// the metadata store's compare-and-set rests on that. Durable after
    /// [`Storage::sync_dir`], like every name.
    fn link(&self, from: &str, to: &str) -> Result<()>;
    /// Whether [`Storage::create_whole`] creates a file in one step here (`false`, the
    /// default: the metadata store writes a temporary file and links it instead).
    fn creates_whole(&self) -> bool {
        false
    }
    /// Creates the file `name` holding `bytes` in one atomic and durable step, where
    /// [`Storage::creates_whole`]: no reader ever sees the name without all of `bytes`, the file
    /// and its name are durable when this returns `Ok` (no [`Storage::sync_dir`] needed), and of
    /// two creates of one name, from this process or another, exactly one succeeds (the other
    /// fails with an [`Error::Io`] of kind [`std::io::ErrorKind::AlreadyExists`]), as with
    /// [`Storage::link`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] on a backend without the step (the default); otherwise as
    /// [`Storage::create`].
    fn create_whole(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let _ = bytes;
        Err(Error::InvalidArgument {
            reason: format!(
                "{}: this storage cannot create `{name}` whole in one step",
                self.location()
            ),
        })
    }
    /// Whether `name` names `file` now, the very file: `file` is a handle this storage
    /// opened or created, and `Some(false)` means the name is free or names another file.
    /// `None` (the default) where the storage cannot tell without reading the file the name
    /// holds, which the caller then does. A `Some` is exact: another file linked or renamed
    /// under the name since is never taken for `file`, even where it reuses an identity a
    /// removed file had. A storage that maps names onto another's answers for the name it maps
    /// to, or `None`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a name the storage refuses ([`validate_name`]);
    /// [`Error::Io`] when the name cannot be looked up.
    fn names_file(&self, name: &str, file: &dyn StorageFile) -> Result<Option<bool>> {
        let _ = (name, file);
        Ok(None)
    }

    /// Makes the directory's current set of names durable.
    fn sync_dir(&self) -> Result<()>;
    /// Takes the directory's exclusive ownership lock; held until the guard drops.
    ///
    /// A second attempt, from this process or another, fails with [`Error::Locked`].
    fn lock(&self) -> Result<LockGuard>;
    /// What this handle knows of the ownership its [`Storage::lock`] took, for backends whose
    /// ownership is a lease that can be lost while the guard lives ([`LeaseState::Unleased`],
    /// the default, for the others: a local lock is held until it is released). A broker polls
    /// it (through [`Store::storage`](crate::Store::storage) or the storage handle it opened)
    /// to learn that it must unload what it opened here.
    fn lease_state(&self) -> LeaseState {
        LeaseState::Unleased
    }
}

/// The ownership lease of a storage handle, as [`Storage::lease_state`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseState {
    /// The backend's lock has no lease: once taken it is held until its guard drops (local
    /// files, memory).
    Unleased,
    /// This handle holds no lock (none taken yet, or its guard dropped).
    NotHeld,
    /// This handle holds the lock as owner `epoch` and renews its lease.
    Held {
        /// The owner epoch this handle writes with.
        epoch: u64,
    },
    /// This handle held the lock as owner `epoch` and lost it: another owner took it, or the
    /// owner epoch moved on. Nothing renews it again, and every write through this handle is
    /// refused with [`Error::Fenced`]: close what was opened here; another broker owns it (or
    /// may take it) now. Only a new [`Storage::lock`] (a new open) leaves this state.
    Lost {
        /// The owner epoch this handle wrote with.
        epoch: u64,
        /// What the renewal found, as a sentence.
        reason: String,
    },
}

/// One open file of a [`Storage`].
pub trait StorageFile: Send + Sync + fmt::Debug {
    /// Current length of the file in bytes (live image).
    fn size(&self) -> Result<u64>;
    /// Fills `buf` from `offset`; fails if the file is shorter.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;
    /// The whole file when it holds at most `max` bytes, `None` when it holds more: what
    /// [`StorageFile::size`] then [`StorageFile::read_exact_at`] give (the default), in one
    /// request on storage where each is a round trip.
    ///
    /// # Errors
    /// As [`StorageFile::size`] and [`StorageFile::read_exact_at`].
    fn read_all(&self, max: u64) -> Result<Option<Vec<u8>>> {
        let size = self.size()?;
        if size > max {
            return Ok(None);
        }
        let len = usize::try_from(size).map_err(|_| Error::InvalidArgument {
            reason: format!("a file of {size} bytes does not fit in memory"),
        })?;
        let mut bytes = vec![0; len];
        self.read_exact_at(&mut bytes, 0)?;
        Ok(Some(bytes))
    }
    /// The file's length and its last `n` bytes (all of them when it holds fewer), `None` when
    /// it holds more than `max` bytes: what [`StorageFile::size`] then
    /// [`StorageFile::read_exact_at`] of the end give (the default), in one request on storage
    /// where each is a round trip. Tells a file from another under the same name without
    /// reading it whole.
    ///
    /// # Errors
    /// As [`StorageFile::size`] and [`StorageFile::read_exact_at`].
    fn read_tail(&self, n: usize, max: u64) -> Result<Option<(u64, Vec<u8>)>> {
        let size = self.size()?;
        if size > max {
            return Ok(None);
        }
        let n = u64::try_from(n).unwrap_or(u64::MAX).min(size);
        let mut tail = vec![0; usize::try_from(n).expect("at most the n asked for")];
        self.read_exact_at(&mut tail, size - n)?;
        Ok(Some((size, tail)))
    }
    /// Writes all of `buf` at `offset` (live image only until [`StorageFile::sync_data`]).
    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()>;
    /// Makes the file's bytes durable (`fdatasync`).
    fn sync_data(&self) -> Result<()>;
    /// Truncates or extends the file to `len` bytes.
    fn set_len(&self, len: u64) -> Result<()>;
    /// A read-only view of the whole file as it is now.
    fn map(&self) -> Result<Mapped>;
    /// Whether [`StorageFile::map`] costs a reader no more than positional reads of the file,
    /// whatever its size: `true` where a map is one request whose copy is kept (RADOS), so a log
    /// maps every sealed ledger; `false` (the default) where a map shares the file's pages, which
    /// stay resident while it lives, so a log reads small sealed ledgers by position instead
    /// (`LogConfig::map_sealed_from`).
    fn map_always(&self) -> bool {
        false
    }
    /// The first offset at or after `offset` that may hold a nonzero byte, or the file's size
    /// when none does: every byte in between reads as zero. A hint for skipping holes; the
    /// default, `offset` itself, is always a correct answer.
    fn data_from(&self, offset: u64) -> Result<u64> {
        Ok(offset)
    }
    /// This handle as [`std::any::Any`], for the storage that made it to recognise its own
    /// kind of handle ([`Storage::names_file`]); `None` (the default) for handles no storage
    /// asks that of.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// Proof of exclusive ownership of a storage directory; releases it when dropped.
pub struct LockGuard {
    _release: Box<dyn Send + Sync>,
}

impl LockGuard {
    /// A guard that holds `release` (a file lock, a lease, ...) until it is dropped: how a
    /// [`Storage`] backend outside this crate hands out its ownership from [`Storage::lock`].
    #[must_use]
    pub fn new(release: Box<dyn Send + Sync>) -> Self {
        Self { _release: release }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LockGuard")
    }
}

/// Longest file name ackstore ever generates.
pub const MAX_NAME_LEN: usize = 128;

/// Checks that `name` is one of the plain file names ackstore generates: 1 to
/// [`MAX_NAME_LEN`] bytes of ASCII letters, digits, `.`, `_` and `-`, not starting with `.`.
///
/// Every storage call checks this, so no string (a client's cursor name included) can name
/// anything outside the directory, even if a caller forgets to encode it.
///
/// # Errors
/// [`Error::InvalidArgument`] for any other name.
pub fn validate_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            reason: format!("`{}` is not a valid storage file name", name.escape_debug()),
        })
    }
}

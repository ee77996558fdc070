//! Real-file storage: one directory on a local file system.
//!
//! Owns: the only `unsafe` block of the crate (the memory map of a sealed file) and the
//! directory's ownership lock (`LOCK`, held for the handle's life).
//!
//! The lock is a POSIX record lock (`fcntl(F_SETLK)`) on the whole file, which belongs to the
//! process: a child process never inherits it, so a process the application spawns (whose
//! copies of every descriptor live until it calls `exec`) never holds a directory's lock
//! after its owner released it, as an inherited `flock` would. Within the process, the lock
//! files held are kept in [`HELD`] (by device and inode), which refuses a second handle of the
//! same directory. A POSIX lock is released when the process closes *any* descriptor of its
//! file, so the lock file is opened only by [`FileStorage::lock`], and only when this process
//! does not hold it (checked by path before the open, under [`HELD`]'s lock).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use rustix::fs::FlockOperation;

use super::{LockGuard, Mapped, Storage, StorageFile, validate_name};
use crate::error::{Error, Result};

/// Name of the lock file inside a storage directory.
pub const LOCK_FILE: &str = "LOCK";

/// A directory of real files.
#[derive(Debug, Clone)]
pub struct FileStorage {
    dir: PathBuf,
}

impl FileStorage {
    /// Opens `dir`, creating it (and its parents) when `create` is true.
    ///
    /// # Errors
    /// [`Error::Io`] when the directory is missing (and `create` is false) or cannot be created;
    /// [`Error::NotAckstore`] when `dir` exists but is not a directory.
    pub fn open(dir: impl AsRef<Path>, create: bool) -> Result<Self> {
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
        Ok(Self { dir })
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
        let read =
            std::fs::read_dir(&self.dir).map_err(|e| Error::io("list", self.location(), e))?;
        let mut names = Vec::new();
        for entry in read {
            let entry = entry.map_err(|e| Error::io("list", self.location(), e))?;
            // Subdirectories are storages of their own (`subdirectory`), not files. The type
            // comes with the directory entry on Linux file systems: no extra stat.
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            // Names that are not UTF-8 were not written by ackstore; they are ignored.
            if let Ok(name) = entry.file_name().into_string() {
                names.push(name);
            }
        }
        names.sort();
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
        Ok(Some(Arc::new(Self { dir: path })))
    }

    fn exists(&self, name: &str) -> Result<bool> {
        let path = self.path_of(name)?;
        path.try_exists().map_err(|e| Error::io("stat", &path, e))
    }

    fn create(&self, name: &str) -> Result<Arc<dyn StorageFile>> {
        let path = self.path_of(name)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io("create", &path, e))?;
        Ok(Arc::new(RealFile { file, path }))
    }

    fn open(&self, name: &str) -> Result<Arc<dyn StorageFile>> {
        let path = self.path_of(name)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .or_else(|_| OpenOptions::new().read(true).open(&path))
            .map_err(|e| Error::io("open", &path, e))?;
        Ok(Arc::new(RealFile { file, path }))
    }

    fn remove(&self, name: &str) -> Result<()> {
        let path = self.path_of(name)?;
        std::fs::remove_file(&path).map_err(|e| Error::io("remove", &path, e))
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        let src = self.path_of(from)?;
        let dst = self.path_of(to)?;
        std::fs::rename(&src, &dst).map_err(|e| Error::io("rename", &src, e))
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

#[derive(Debug)]
struct RealFile {
    file: File,
    path: PathBuf,
}

impl RealFile {
    fn err(&self, op: &'static str, e: std::io::Error) -> Error {
        Error::io(op, &self.path, e)
    }
}

impl StorageFile for RealFile {
    fn size(&self) -> Result<u64> {
        self.file
            .metadata()
            .map(|m| m.len())
            .map_err(|e| self.err("stat", e))
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.file
            .read_exact_at(buf, offset)
            .map_err(|e| self.err("read", e))
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.file
            .write_all_at(buf, offset)
            .map_err(|e| self.err("write", e))
    }

    fn sync_data(&self) -> Result<()> {
        self.file.sync_data().map_err(|e| self.err("fdatasync", e))
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.file.set_len(len).map_err(|e| self.err("truncate", e))
    }

    fn map(&self) -> Result<Mapped> {
        if self.size()? == 0 {
            return Ok(Arc::new(Vec::<u8>::new()));
        }
        // SAFETY: callers map only sealed files, under the directory's exclusive lock, and
        // only once the owner's last write to the file is done (the seal's or the open's
        // synced-length slot, written before the first map); ackstore never writes to or
        // truncates a sealed file after that, so the mapped bytes cannot change or disappear
        // while the map is alive. (A read-only tool maps without the lock: an owner may meanwhile
        // overwrite that file's 12-byte slot in the header, once, and nothing else; readers of
        // a map read frames and the index, never the slot.)
        let map = unsafe { memmap2::Mmap::map(&self.file) }.map_err(|e| self.err("mmap", e))?;
        Ok(Arc::new(map))
    }

    /// `lseek(SEEK_DATA)`: the start of the next data extent, so a scan skips a hole without
    /// reading it. `ENXIO` means no data follows `offset`. A file system without hole
    /// support answers `offset` itself, which is still correct.
    fn data_from(&self, offset: u64) -> Result<u64> {
        let size = self.size()?;
        if offset >= size {
            return Ok(size);
        }
        // The descriptor's own position is never used (all I/O is positional), so moving it
        // disturbs no other reader.
        match rustix::fs::seek(&self.file, rustix::fs::SeekFrom::Data(offset)) {
            Ok(at) => Ok(at.clamp(offset, size)),
            Err(rustix::io::Errno::NXIO) => Ok(size),
            Err(e) => Err(self.err("lseek", e.into())),
        }
    }
}

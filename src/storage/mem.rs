//! In-memory storage with a live and a durable image, for crash tests.
//!
//! Owns: the model of what a disk keeps across a power cut. Each file (an inode) has a live
//! image (what reads see) and a durable image (what was last `sync_data`ed). The directory has
//! a live name table and a durable one (as of the last `sync_dir`). A power cut keeps the
//! durable name table, and for each surviving file whatever a test's chooser returns, given the
//! durable and live images: by default the durable image, or, to tear a write, the durable image
//! plus any prefix of the unsynced tail.
//!
//! [`MemStorage::fail_after`] makes every operation after the N-th mutating one fail with an I/O
//! error, as a machine that lost power mid-workload would; the test then takes
//! [`MemStorage::crash_image`] and reopens it.
//!
//! A full disk is modelled apart from a power cut: [`MemStorage::set_capacity`] bounds the bytes
//! of the files the directory names, and [`MemStorage::enospc_after`] fails every write after the
//! N-th; both fail a write that would grow a file with `ENOSPC` and change nothing, while every
//! other operation (reads, syncs, removals, renames) keeps working, as on a real full file system.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{LockGuard, Mapped, Storage, StorageFile, validate_name};
use crate::error::{Error, Result};
use crate::hashing::{IdMap, IdSet};

type Inode = u64;

#[derive(Debug, Default, Clone)]
struct Data {
    live: Vec<u8>,
    durable: Vec<u8>,
}

#[derive(Debug, Default)]
struct State {
    live_dir: BTreeMap<String, Inode>,
    durable_dir: BTreeMap<String, Inode>,
    /// The names created, removed, renamed or linked since the last directory sync (or the
    /// last loss of unsynced names): every name outside it names the same inode (or nothing)
    /// in `live_dir` and `durable_dir`, so a directory sync copies only these.
    dir_changes: BTreeSet<String>,
    inodes: IdMap<Inode, Data>,
    next_inode: Inode,
    mutations: u64,
    fail_after: Option<u64>,
    /// The holder of the ownership lock, if any (a token, so that the guard of a holder whose
    /// lock was broken does not release its successor's).
    locked: Option<u64>,
    next_lock: u64,
    /// Most bytes the files the live directory names may hold together.
    capacity: Option<u64>,
    /// Writes that grow a file fail with `ENOSPC` once `writes` reaches this.
    enospc_from: Option<u64>,
    /// Writes that grew a file so far.
    writes: u64,
}

impl State {
    /// Counts a mutating operation, failing it (and latching) once the budget is spent.
    fn mutate(&mut self, op: &'static str, name: &str) -> Result<()> {
        self.check(op, name)?;
        self.mutations += 1;
        Ok(())
    }

    /// Fails any operation once the power is off.
    fn check(&self, op: &'static str, name: &str) -> Result<()> {
        match self.fail_after {
            Some(n) if self.mutations >= n => Err(Error::io(
                op,
                name,
                std::io::Error::other("injected fault: the power is off"),
            )),
            _ => Ok(()),
        }
    }

    /// Names `inode` `name` in the live directory (a creation, a link, a rename's new name).
    fn name(&mut self, name: &str, inode: Inode) {
        self.live_dir.insert(name.to_string(), inode);
        self.dir_changes.insert(name.to_string());
    }

    /// Removes `name` from the live directory; returns the inode it named.
    fn unname(&mut self, name: &str) -> Option<Inode> {
        self.dir_changes.insert(name.to_string());
        self.live_dir.remove(name)
    }

    /// The live directory's changes since the last sync, made durable (`to_durable`) or
    /// forgotten (the durable name table shown again).
    fn settle_names(&mut self, to_durable: bool) {
        let (from, to) = if to_durable {
            (&self.live_dir, &mut self.durable_dir)
        } else {
            (&self.durable_dir, &mut self.live_dir)
        };
        for name in std::mem::take(&mut self.dir_changes) {
            match from.get(&name) {
                Some(&inode) => to.insert(name, inode),
                None => to.remove(&name),
            };
        }
    }

    /// Bytes held by the files the live directory names.
    fn used(&self) -> u64 {
        let inodes: IdSet<_> = self.live_dir.values().collect();
        inodes
            .into_iter()
            .filter_map(|i| self.inodes.get(i))
            .map(|d| d.live.len() as u64)
            .sum()
    }

    /// Refuses, with `ENOSPC`, a write that would grow a file by `growth` bytes on a full disk.
    fn reserve(&mut self, op: &'static str, name: &str, growth: u64) -> Result<()> {
        if growth == 0 {
            return Ok(());
        }
        let full = self.enospc_from.is_some_and(|n| self.writes >= n)
            || self
                .capacity
                .is_some_and(|c| self.used().saturating_add(growth) > c);
        if full {
            return Err(Error::io(
                op,
                name,
                std::io::Error::from_raw_os_error(ENOSPC),
            ));
        }
        self.writes += 1;
        Ok(())
    }
}

/// `errno` of a full file system.
const ENOSPC: i32 = 28;

/// An in-memory disk; clones share the same disk.
#[derive(Debug, Clone, Default)]
pub struct MemStorage {
    state: Arc<Mutex<State>>,
}

impl MemStorage {
    /// A new, empty disk.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep using it.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Number of mutating operations (write, sync, truncate, create, remove, rename, link,
    /// directory sync) performed so far.
    #[must_use]
    pub fn mutations(&self) -> u64 {
        self.state().mutations
    }

    /// Lets `n` more mutating operations succeed, then fails every operation (reads included),
    /// as if the power went off. `None` restores the power.
    pub fn fail_after(&self, n: Option<u64>) {
        let mut s = self.state();
        s.fail_after = n.map(|n| s.mutations + n);
    }

    /// Bounds the bytes the directory's files may hold together (`None`: no bound). A write that
    /// would grow the files past it fails with `ENOSPC` and writes nothing; removing a file frees
    /// its bytes. Files already past the bound keep their bytes.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.state().capacity = bytes;
    }

    /// Lets `n` more writes that grow a file succeed, then fails every such write with `ENOSPC`
    /// (writing nothing) until called with `None`. Writes within a file's current length, and
    /// every other operation, keep working.
    pub fn enospc_after(&self, n: Option<u64>) {
        let mut s = self.state();
        s.enospc_from = n.map(|n| s.writes + n);
    }

    /// Writes that grew a file so far (what [`MemStorage::enospc_after`] counts).
    #[must_use]
    pub fn growing_writes(&self) -> u64 {
        self.state().writes
    }

    /// Bytes held by the files the directory names now.
    #[must_use]
    pub fn used_bytes(&self) -> u64 {
        self.state().used()
    }

    /// Releases the directory's ownership lock while its holder still runs, as an operator who
    /// breaks a stale lock, or shared storage on which the lock did not hold, would: the next
    /// [`Storage::lock`] succeeds although the previous owner's guard lives. Tests use it to
    /// open a second owner next to a first one that does not know it lost the directory. On
    /// real files this cannot happen within one host: the lock (a POSIX record lock) is held until the holder
    /// closes it.
    pub fn break_lock(&self) {
        self.state().locked = None;
    }

    /// What a disk holds after a power cut now: the durable directory, each file's durable
    /// bytes.
    #[must_use]
    pub fn durable_image(&self) -> MemStorage {
        self.crash_image(|_, durable, _| durable.to_vec())
    }

    /// What a disk holds after a power cut now, with `choose(name, durable, live)` deciding each
    /// surviving file's bytes (for instance the durable bytes plus part of the unsynced tail).
    #[must_use]
    pub fn crash_image(&self, mut choose: impl FnMut(&str, &[u8], &[u8]) -> Vec<u8>) -> MemStorage {
        let s = self.state();
        let mut next = State::default();
        for (name, inode) in &s.durable_dir {
            let data = s.inodes.get(inode).cloned().unwrap_or_default();
            let bytes = choose(name, &data.durable, &data.live);
            let id = next.next_inode;
            next.next_inode += 1;
            next.live_dir.insert(name.clone(), id);
            next.durable_dir.insert(name.clone(), id);
            next.inodes.insert(
                id,
                Data {
                    live: bytes.clone(),
                    durable: bytes,
                },
            );
        }
        MemStorage {
            state: Arc::new(Mutex::new(next)),
        }
    }

    /// What a failed write-back does to `name` on Linux (an `fsync` that returned `EIO`): the
    /// kernel marks the dirty pages it could not write clean, so no later sync writes them, and
    /// once they leave the cache a read returns what the disk holds. Here both happen at once:
    /// every live byte takes the durable image's value (zero past its end; the length stays),
    /// and the durable image is unchanged. A later sync then makes durable what a read sees.
    ///
    /// # Errors
    /// [`Error::Io`] when the file does not exist.
    pub fn lose_unsynced(&self, name: &str) -> Result<()> {
        let mut s = self.state();
        let inode = *s
            .live_dir
            .get(name)
            .ok_or_else(|| not_found("fdatasync", name))?;
        let data = s
            .inodes
            .get_mut(&inode)
            .ok_or_else(|| not_found("fdatasync", name))?;
        let mut forgotten = data.durable.clone();
        forgotten.resize(data.live.len(), 0);
        data.live = forgotten;
        Ok(())
    }

    /// [`MemStorage::lose_unsynced`] for the directory, after a failed directory `fsync`: the
    /// name changes since the last directory sync that succeeded (creations, removals, renames,
    /// links) are forgotten, so lookups and listings show the durable name table again and no
    /// later directory sync makes those changes durable. Open files keep their bytes.
    pub fn lose_unsynced_names(&self) {
        self.state().settle_names(false);
    }

    /// The live bytes of `name`, if it exists.
    #[must_use]
    pub fn live_bytes(&self, name: &str) -> Option<Vec<u8>> {
        let s = self.state();
        s.live_dir
            .get(name)
            .and_then(|i| s.inodes.get(i))
            .map(|d| d.live.clone())
    }

    /// Replaces the bytes of `name` in both images (for corruption tests).
    ///
    /// # Errors
    /// [`Error::Io`] when the file does not exist.
    pub fn set_bytes(&self, name: &str, bytes: Vec<u8>) -> Result<()> {
        let mut s = self.state();
        let inode = *s
            .live_dir
            .get(name)
            .ok_or_else(|| Error::io("set bytes", name, std::io::ErrorKind::NotFound.into()))?;
        s.inodes.insert(
            inode,
            Data {
                live: bytes.clone(),
                durable: bytes,
            },
        );
        Ok(())
    }

    fn file(&self, name: &str, inode: Inode) -> Arc<dyn StorageFile> {
        Arc::new(MemFile {
            storage: self.clone(),
            name: name.to_string(),
            inode,
        })
    }
}

fn not_found(op: &'static str, name: &str) -> Error {
    Error::io(op, name, std::io::ErrorKind::NotFound.into())
}

impl Storage for MemStorage {
    fn location(&self) -> String {
        "memory".to_string()
    }

    fn list(&self) -> Result<Vec<String>> {
        let s = self.state();
        s.check("list", "memory")?;
        Ok(s.live_dir.keys().cloned().collect())
    }

    /// The names from `prefix` on, in order, up to the first that does not start with it.
    fn list_prefix(&self, prefix: &str) -> Result<Vec<String>> {
        let s = self.state();
        s.check("list", "memory")?;
        Ok(s.live_dir
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .map(|(name, _)| name)
            .take_while(|name| name.starts_with(prefix))
            .cloned()
            .collect())
    }

    fn exists(&self, name: &str) -> Result<bool> {
        validate_name(name)?;
        let s = self.state();
        s.check("stat", name)?;
        Ok(s.live_dir.contains_key(name))
    }

    fn create(&self, name: &str) -> Result<Arc<dyn StorageFile>> {
        validate_name(name)?;
        let mut s = self.state();
        if s.live_dir.contains_key(name) {
            return Err(Error::io(
                "create",
                name,
                std::io::ErrorKind::AlreadyExists.into(),
            ));
        }
        s.mutate("create", name)?;
        let inode = s.next_inode;
        s.next_inode += 1;
        s.inodes.insert(inode, Data::default());
        s.name(name, inode);
        drop(s);
        Ok(self.file(name, inode))
    }

    fn open(&self, name: &str) -> Result<Arc<dyn StorageFile>> {
        validate_name(name)?;
        let s = self.state();
        s.check("open", name)?;
        let inode = *s
            .live_dir
            .get(name)
            .ok_or_else(|| not_found("open", name))?;
        drop(s);
        Ok(self.file(name, inode))
    }

    fn remove(&self, name: &str) -> Result<()> {
        validate_name(name)?;
        let mut s = self.state();
        if !s.live_dir.contains_key(name) {
            return Err(not_found("remove", name));
        }
        s.mutate("remove", name)?;
        s.unname(name);
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        validate_name(from)?;
        validate_name(to)?;
        let mut s = self.state();
        if !s.live_dir.contains_key(from) {
            return Err(not_found("rename", from));
        }
        s.mutate("rename", from)?;
        if let Some(inode) = s.unname(from) {
            s.name(to, inode);
        }
        Ok(())
    }

    fn link(&self, from: &str, to: &str) -> Result<()> {
        validate_name(from)?;
        validate_name(to)?;
        let mut s = self.state();
        let Some(&inode) = s.live_dir.get(from) else {
            return Err(not_found("link", from));
        };
        if s.live_dir.contains_key(to) {
            return Err(Error::io(
                "link",
                to,
                std::io::ErrorKind::AlreadyExists.into(),
            ));
        }
        s.mutate("link", to)?;
        s.name(to, inode);
        Ok(())
    }

    fn sync_dir(&self) -> Result<()> {
        let mut s = self.state();
        s.mutate("fsync directory", "memory")?;
        s.settle_names(true);
        Ok(())
    }

    fn lock(&self) -> Result<LockGuard> {
        let mut s = self.state();
        if s.locked.is_some() {
            return Err(Error::Locked {
                path: self.location().into(),
            });
        }
        let token = s.next_lock;
        s.next_lock += 1;
        s.locked = Some(token);
        Ok(LockGuard::new(Box::new(MemLock(self.clone(), token))))
    }
}

struct MemLock(MemStorage, u64);

impl Drop for MemLock {
    fn drop(&mut self) {
        let mut s = self.0.state();
        if s.locked == Some(self.1) {
            s.locked = None;
        }
    }
}

#[derive(Debug)]
struct MemFile {
    storage: MemStorage,
    name: String,
    inode: Inode,
}

impl MemFile {
    fn with<T>(
        &self,
        op: &'static str,
        mutating: bool,
        f: impl FnOnce(&mut Data) -> Result<T>,
    ) -> Result<T> {
        let mut s = self.storage.state();
        if mutating {
            s.mutate(op, &self.name)?;
        } else {
            s.check(op, &self.name)?;
        }
        let data = s
            .inodes
            .get_mut(&self.inode)
            .ok_or_else(|| not_found(op, &self.name))?;
        f(data)
    }
}

impl MemFile {
    /// Checks the disk has room for this file to reach `end` bytes (no change if it is longer).
    fn grow_to(&self, op: &'static str, end: u64) -> Result<()> {
        let mut s = self.storage.state();
        s.check(op, &self.name)?;
        let len = s.inodes.get(&self.inode).map_or(0, |d| d.live.len() as u64);
        s.reserve(op, &self.name, end.saturating_sub(len))
    }
}

fn range(offset: u64, len: usize) -> Option<std::ops::Range<usize>> {
    let start = usize::try_from(offset).ok()?;
    Some(start..start.checked_add(len)?)
}

impl StorageFile for MemFile {
    fn size(&self) -> Result<u64> {
        self.with("stat", false, |d| Ok(d.live.len() as u64))
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.with("read", false, |d| {
            let src = range(offset, buf.len())
                .and_then(|r| d.live.get(r))
                .ok_or_else(|| {
                    Error::io("read", &self.name, std::io::ErrorKind::UnexpectedEof.into())
                })?;
            buf.copy_from_slice(src);
            Ok(())
        })
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let end = offset.saturating_add(buf.len() as u64);
        self.grow_to("write", end)?;
        self.with("write", true, |d| {
            let r = range(offset, buf.len()).ok_or_else(|| {
                Error::io("write", &self.name, std::io::ErrorKind::InvalidInput.into())
            })?;
            if d.live.len() < r.end {
                d.live.resize(r.end, 0);
            }
            d.live[r].copy_from_slice(buf);
            Ok(())
        })
    }

    fn sync_data(&self) -> Result<()> {
        self.with("fdatasync", true, |d| {
            d.durable.clone_from(&d.live);
            Ok(())
        })
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.grow_to("truncate", len)?;
        self.with("truncate", true, |d| {
            let len = usize::try_from(len).map_err(|_| {
                Error::io(
                    "truncate",
                    &self.name,
                    std::io::ErrorKind::InvalidInput.into(),
                )
            })?;
            d.live.resize(len, 0);
            Ok(())
        })
    }

    fn map(&self) -> Result<Mapped> {
        self.with("map", false, |d| Ok(Arc::new(d.live.clone()) as Mapped))
    }
}

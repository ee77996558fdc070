//! One pass-through storage with a hook on every operation, for tests that must act in the
//! middle of a call: [`Tap`] wraps any [`Storage`] (the in-memory disk, real files, RADOS) and
//! runs its [`Hook`] before and after each operation of the directory and of its files, and
//! around each write (so a write can be seen half done). The hook can fail an operation, run a
//! takeover or another thread's work, or block.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ackstore::Storage;
use ackstore::storage::{LockGuard, Mapped, StorageFile};

/// One storage operation, with the file name it is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op<'a> {
    /// A listing (of the names starting with the prefix; empty for all).
    List(&'a str),
    Exists(&'a str),
    Create(&'a str),
    Open(&'a str),
    Remove(&'a str),
    Rename(&'a str, &'a str),
    Link(&'a str, &'a str),
    /// A file created whole in one step ([`Storage::create_whole`]).
    CreateWhole(&'a str),
    SyncDir,
    Size(&'a str),
    Read(&'a str),
    Write(&'a str),
    Sync(&'a str),
    SetLen(&'a str),
    /// A file mapped (or copied) whole for reading ([`StorageFile::map`]).
    Map(&'a str),
}

impl Op<'_> {
    /// The operation's kind, as a word (`"write"`, `"create"`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Op::List(_) => "list",
            Op::Exists(_) => "exists",
            Op::Create(_) => "create",
            Op::Open(_) => "open",
            Op::Remove(_) => "remove",
            Op::Rename(..) => "rename",
            Op::Link(..) => "link",
            Op::CreateWhole(_) => "create_whole",
            Op::SyncDir => "sync_dir",
            Op::Size(_) => "size",
            Op::Read(_) => "read",
            Op::Write(_) => "write",
            Op::Sync(_) => "sync",
            Op::SetLen(_) => "set_len",
            Op::Map(_) => "map",
        }
    }

    /// The file the operation names (the target of a rename or link; empty for a directory
    /// sync).
    pub fn name(&self) -> &str {
        match self {
            Op::List(n)
            | Op::Exists(n)
            | Op::Create(n)
            | Op::Open(n)
            | Op::Remove(n)
            | Op::Rename(_, n)
            | Op::Link(_, n)
            | Op::CreateWhole(n)
            | Op::Size(n)
            | Op::Read(n)
            | Op::Write(n)
            | Op::Sync(n)
            | Op::SetLen(n)
            | Op::Map(n) => n,
            Op::SyncDir => "",
        }
    }
}

/// What a [`Tap`] runs around its operations. Every method has a default that does nothing.
pub trait Hook: Send + Sync {
    /// Runs before `op`; an error fails the operation without running it.
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        let _ = op;
        Ok(())
    }

    /// Runs after `op` succeeded.
    fn after(&self, op: Op<'_>) {
        let _ = op;
    }

    /// Writes `buf` at `offset` of file `name` through `write` (by default in one call; a hook
    /// may write it in parts and act in between).
    fn write(
        &self,
        name: &str,
        buf: &[u8],
        offset: u64,
        write: &dyn Fn(&[u8], u64) -> ackstore::Result<()>,
    ) -> ackstore::Result<()> {
        let _ = name;
        write(buf, offset)
    }
}

/// Counts the directory listings (whole or by prefix) made through a [`Tap`].
#[derive(Default)]
pub struct Listings(AtomicU64);

impl Hook for Listings {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        if matches!(op, Op::List(_)) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

impl Listings {
    /// Listings made so far.
    pub fn count(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Counts the bytes written through a [`Tap`]: to every file, or only to the files whose name
/// the second field accepts.
#[derive(Default)]
pub struct Written(pub AtomicU64, pub Option<fn(&str) -> bool>);

impl Hook for Written {
    fn write(
        &self,
        name: &str,
        buf: &[u8],
        offset: u64,
        write: &dyn Fn(&[u8], u64) -> ackstore::Result<()>,
    ) -> ackstore::Result<()> {
        if self.1.is_none_or(|counted| counted(name)) {
            self.0.fetch_add(buf.len() as u64, Ordering::SeqCst);
        }
        write(buf, offset)
    }
}

/// Makes items `0..8 * chunk` with `create(from, to)` (items `from..to`, in order) and
/// asserts that the bytes written through a [`Tap`] counting into `written` by the `chunk`
/// creations from `2 * chunk` items are within 10% of those of the `chunk` creations from
/// `7 * chunk`: both spans write whole chunks, so their bytes stay flat when a creation's do.
pub fn assert_flat_from_1k_to_4k(
    written: &Written,
    chunk: usize,
    what: &str,
    mut create: impl FnMut(usize, usize),
) {
    let mut made = 0;
    let mut span = |from: usize| {
        create(made, from);
        let before = written.0.load(Ordering::SeqCst);
        create(from, from + chunk);
        made = from + chunk;
        written.0.load(Ordering::SeqCst) - before
    };
    let at_1k = span(2 * chunk);
    let at_4k = span(7 * chunk);
    assert!(at_1k > 0);
    assert!(
        at_4k * 10 <= at_1k * 11,
        "{at_1k} bytes for the creations from 1k {what}, {at_4k} from 3.5k"
    );
}

/// `inner`, with `hook` around every operation; clones share both.
#[derive(Clone)]
pub struct Tap {
    pub inner: Arc<dyn Storage>,
    pub hook: Arc<dyn Hook>,
}

impl Tap {
    /// `inner` with `hook`.
    pub fn new(inner: Arc<dyn Storage>, hook: Arc<dyn Hook>) -> Self {
        Self { inner, hook }
    }

    fn run<T>(&self, op: Op<'_>, f: impl FnOnce() -> ackstore::Result<T>) -> ackstore::Result<T> {
        self.hook.before(op)?;
        let result = f()?;
        self.hook.after(op);
        Ok(result)
    }

    fn file(&self, name: &str, inner: Arc<dyn StorageFile>) -> Arc<dyn StorageFile> {
        Arc::new(TapFile {
            inner,
            hook: self.hook.clone(),
            name: name.to_owned(),
        })
    }
}

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tap").field("inner", &self.inner).finish()
    }
}

struct TapFile {
    inner: Arc<dyn StorageFile>,
    hook: Arc<dyn Hook>,
    name: String,
}

impl std::fmt::Debug for TapFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TapFile").field("name", &self.name).finish()
    }
}

impl TapFile {
    fn run<T>(&self, op: Op<'_>, f: impl FnOnce() -> ackstore::Result<T>) -> ackstore::Result<T> {
        self.hook.before(op)?;
        let result = f()?;
        self.hook.after(op);
        Ok(result)
    }
}

impl Storage for Tap {
    fn location(&self) -> String {
        self.inner.location()
    }
    fn local_dir(&self) -> Option<&std::path::Path> {
        self.inner.local_dir()
    }
    fn list(&self) -> ackstore::Result<Vec<String>> {
        self.run(Op::List(""), || self.inner.list())
    }
    fn list_prefix(&self, prefix: &str) -> ackstore::Result<Vec<String>> {
        self.run(Op::List(prefix), || self.inner.list_prefix(prefix))
    }
    fn exists(&self, name: &str) -> ackstore::Result<bool> {
        self.run(Op::Exists(name), || self.inner.exists(name))
    }
    fn create(&self, name: &str) -> ackstore::Result<Arc<dyn StorageFile>> {
        let inner = self.run(Op::Create(name), || self.inner.create(name))?;
        Ok(self.file(name, inner))
    }
    fn open(&self, name: &str) -> ackstore::Result<Arc<dyn StorageFile>> {
        let inner = self.run(Op::Open(name), || self.inner.open(name))?;
        Ok(self.file(name, inner))
    }
    fn remove(&self, name: &str) -> ackstore::Result<()> {
        self.run(Op::Remove(name), || self.inner.remove(name))
    }
    fn rename(&self, from: &str, to: &str) -> ackstore::Result<()> {
        self.run(Op::Rename(from, to), || self.inner.rename(from, to))
    }
    fn link(&self, from: &str, to: &str) -> ackstore::Result<()> {
        self.run(Op::Link(from, to), || self.inner.link(from, to))
    }
    fn creates_whole(&self) -> bool {
        self.inner.creates_whole()
    }
    fn create_whole(&self, name: &str, bytes: &[u8]) -> ackstore::Result<()> {
        self.run(Op::CreateWhole(name), || {
            self.inner.create_whole(name, bytes)
        })
    }
    fn sync_dir(&self) -> ackstore::Result<()> {
        self.run(Op::SyncDir, || self.inner.sync_dir())
    }
    fn lock(&self) -> ackstore::Result<LockGuard> {
        self.inner.lock()
    }
}

impl StorageFile for TapFile {
    fn size(&self) -> ackstore::Result<u64> {
        self.run(Op::Size(&self.name), || self.inner.size())
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> ackstore::Result<()> {
        self.run(Op::Read(&self.name), || {
            self.inner.read_exact_at(buf, offset)
        })
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> ackstore::Result<()> {
        self.run(Op::Write(&self.name), || {
            self.hook.write(&self.name, buf, offset, &|part, at| {
                self.inner.write_all_at(part, at)
            })
        })
    }
    fn sync_data(&self) -> ackstore::Result<()> {
        self.run(Op::Sync(&self.name), || self.inner.sync_data())
    }
    fn set_len(&self, len: u64) -> ackstore::Result<()> {
        self.run(Op::SetLen(&self.name), || self.inner.set_len(len))
    }
    fn map(&self) -> ackstore::Result<Mapped> {
        self.run(Op::Map(&self.name), || self.inner.map())
    }
    fn map_always(&self) -> bool {
        self.inner.map_always()
    }
    fn data_from(&self, offset: u64) -> ackstore::Result<u64> {
        self.inner.data_from(offset)
    }
}

/// A [`Hook`] that fails the `at`-th storage operation counted from when it was armed (0: none)
/// with `EIO`, without running it, and remembers the operation it failed: an I/O error at one
/// step of a call, for every step in turn.
#[derive(Default)]
pub struct FailOne {
    /// Operations since the hook was armed.
    pub seen: AtomicU64,
    at: AtomicU64,
    /// The operation failed (kind and file name), once it was.
    pub failed: Mutex<Option<String>>,
}

impl FailOne {
    /// Fails the `at`-th operation from now (0: none).
    pub fn arm(&self, at: u64) {
        self.seen.store(0, Ordering::SeqCst);
        self.at.store(at, Ordering::SeqCst);
    }
}

impl Hook for FailOne {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.at.load(Ordering::SeqCst) {
            *self.failed.lock().expect("lock") = Some(format!("{} {}", op.kind(), op.name()));
            let eio = std::io::Error::from_raw_os_error(5);
            return Err(ackstore::Error::io("injected", op.name().to_owned(), eio));
        }
        Ok(())
    }
}

//! The entry log: a directory of append-only, CRC-framed ledger files.
//!
//! Owns: the files named `ledger-{id:020}.log` in a [`Storage`] directory, their creation,
//! appends, group-commit syncs, sealing, reads, deletion, and their repair on open. Other files in
//! the directory (metadata) are ignored. Must never write without holding the directory's lock,
//! never write to a ledger after one of its writes or fsyncs failed or that opened damaged, and
//! never cut bytes that had been synced without reporting it (damage below a synced length the
//! file records, in the header's synced-length slot, a frame's `durable_mark` or a seal's
//! trailer, is never cut; damage past it, such as an unsynced batch of which a power cut kept any
//! subset of pages, is a torn tail, cut and reported, see `docs/format.md`).
//!
//! Durability, per method: `append` puts the entry in the ledger's write buffer (64 KiB, handed
//! to the operating system when full, on `sync`, on `seal` and when the log is dropped); it is
//! durable, across process crashes and power cuts, once a later [`EntryLog::sync`] of that
//! ledger returns `Ok`. `create_ledger`, `seal` and `delete_ledger` are durable when they return
//! `Ok`.
//! The byte layout and a crash analysis of every write step are in `docs/format.md`.

pub mod ledger;
mod recover;
mod verify;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

pub use crate::format::ledger::EntryMeta;
/// The read-ahead window of ledger scans, shared with the store journal's scan.
pub(crate) use recover::Window;
pub use verify::{FrameProblem, verify_ledger, verify_log};

use crate::error::{CorruptionKind, Error, Result};
use crate::format::ledger::LedgerHeader;
use crate::observe::{self, MeteredCounter};
use crate::storage::{LockGuard, Storage};
use crate::sync::lock;
use ledger::{Ledger, Reads};
use recover::{LastEntry, Opened, open_ledger};

/// Default largest payload of one entry (`LogConfig::max_entry_size`): 5 MiB.
pub const DEFAULT_MAX_ENTRY_SIZE: u32 = 5 * 1024 * 1024;

/// What to do with a torn tail (a partial last frame left by a crash) or a damaged ledger found
/// on open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RecoveryMode {
    /// Cut a torn tail back to the last whole entry, report it
    /// ([`crate::ManagedLedger::recovery_report`]) and log a warning; open a ledger with damage
    /// before its tail as damaged ([`crate::ManagedLedger::damaged_ledgers`]): its whole entries
    /// stay readable, later reads are [`Error::Corrupted`].
    #[default]
    TolerateTail,
    /// Refuse to open: [`Error::TornTail`] for a torn tail, [`Error::Corrupted`] for damage
    /// before the tail. An interrupted create or seal is still repaired: it holds no entry.
    Strict,
}

/// How the entry log (the append-only ledger files of a topic) behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// Largest payload `append` accepts, in bytes.
    pub max_entry_size: u32,
    /// What open does with a torn tail.
    pub recovery: RecoveryMode,
    /// Sealed ledgers of at least this many bytes are read through a memory map, made on their
    /// first read; smaller ones by positional reads (a frame's bounds from the index, read 16
    /// entries' at a time, then the frame), so they keep no pages in the process's resident
    /// set. Storage whose map is a cached copy of the file rather than its pages (RADOS) maps
    /// every sealed ledger. Either way every read checks the frame whole. Default
    /// [`DEFAULT_MAP_SEALED_FROM`]; 0 maps every sealed ledger.
    pub map_sealed_from: u64,
}

/// Default size from which sealed ledgers are mapped (`LogConfig::map_sealed_from`): 1 MiB. A
/// map's first touch makes the kernel map up to 64 KiB around the page read, and the index at
/// the file's end is touched too, so a small ledger read once through a map stays resident
/// nearly whole; past this size a map's saved system calls are worth its pages.
pub const DEFAULT_MAP_SEALED_FROM: u64 = 1 << 20;

impl LogConfig {
    /// The defaults, usable in constants.
    pub const DEFAULT: Self = Self {
        max_entry_size: DEFAULT_MAX_ENTRY_SIZE,
        recovery: RecoveryMode::TolerateTail,
        map_sealed_from: DEFAULT_MAP_SEALED_FROM,
    };
}

impl Default for LogConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// One entry read back from the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    /// The entry's id within its ledger.
    pub entry_id: u64,
    /// The metadata stored in its frame header.
    pub meta: EntryMeta,
    /// The payload.
    pub payload: Vec<u8>,
}

/// A summary of one ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerInfo {
    /// The ledger id.
    pub id: u64,
    /// Number of entries.
    pub entries: u64,
    /// Length of the file in bytes (header, frames, and the footer once sealed); for a damaged
    /// ledger, the end of its last whole frame before the damage.
    pub bytes: u64,
    /// Whether the ledger is sealed.
    pub sealed: bool,
    /// Where open found damage before the tail (byte offset) and what it was. A damaged ledger
    /// holds the `entries` whole entries before that offset; reading any later entry returns
    /// [`Error::Corrupted`], and appends, syncs and seals are refused with it.
    pub damaged: Option<(u64, CorruptionKind)>,
}

/// Counters of what a handle has done since it was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Entries appended.
    pub appends: u64,
    /// Payload bytes appended.
    pub bytes_appended: u64,
    /// Calls to sync the open ledger (each [`crate::ManagedLedger::sync`], for one).
    pub sync_calls: u64,
    /// `fdatasync` calls on ledger files (syncs, seals, creates and repairs on open).
    pub fsyncs: u64,
    /// Reads of an entry's header alone (the finder's probes by index and timestamp).
    pub header_reads: u64,
    /// Reads of whole entries.
    pub entry_reads: u64,
    /// Sealed ledgers mapped into memory (each on its first read; open and seal map none).
    pub maps: u64,
    /// Ledger files opened: every one a plain open lists, and a deferred sealed ledger (see
    /// `EntryLog::open_locked_deferring`) once, on its first use.
    pub ledger_opens: u64,
}

/// Bytes dropped (or, read-only, that would be dropped) from a ledger on open, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TailRepair {
    /// The ledger.
    pub ledger: u64,
    /// Where the dropped bytes start.
    pub offset: u64,
    /// How many bytes were dropped.
    pub dropped_bytes: u64,
    /// What they were: a partial frame, a zero-filled tail, an interrupted seal or create.
    pub reason: String,
}

pub struct LogStatsCounters {
    appends: AtomicU64,
    bytes_appended: AtomicU64,
    sync_calls: AtomicU64,
    /// Also published as [`observe::FSYNCS`].
    fsyncs: MeteredCounter,
    header_reads: AtomicU64,
    entry_reads: AtomicU64,
    pub(crate) maps: AtomicU64,
    ledger_opens: AtomicU64,
}

impl LogStatsCounters {
    /// Zeroed counters of the log at `location`.
    #[must_use]
    pub fn new(location: String) -> Self {
        LogStatsCounters {
            appends: AtomicU64::default(),
            bytes_appended: AtomicU64::default(),
            sync_calls: AtomicU64::default(),
            fsyncs: MeteredCounter::new(observe::FSYNCS, location),
            header_reads: AtomicU64::default(),
            entry_reads: AtomicU64::default(),
            maps: AtomicU64::default(),
            ledger_opens: AtomicU64::default(),
        }
    }
}

/// A fresh random nonce for ledger `id`'s checksums: the standard library's randomly keyed
/// hasher over the clock, the id and a stack address. Unpredictable to producers, which is all
/// the format needs; no cryptographic strength is claimed.
fn fresh_nonce(id: u64) -> u64 {
    use std::hash::BuildHasher;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let here = 0u8;
    std::hash::RandomState::new().hash_one((now, id, std::ptr::addr_of!(here) as usize))
}

/// The file name of ledger `id`.
#[must_use]
pub fn ledger_file_name(id: u64) -> String {
    crate::format::numbered_name("ledger-", id, 20, ".log")
}

/// The ledger id named by a file name, if it is a ledger file name.
#[must_use]
pub fn parse_ledger_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("ledger-")?.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether damage in a ledger file where entry `at` should start (`None`: its header, or no
/// entry) is damage a use of the ledger relies on, for a ledger its owner recorded with
/// `recorded` entries (`None`: not recorded yet; its entries are all that the file proves
/// synced, so any damage there may have cut them). A recorded ledger is served up to its count
/// from whole frames, scanned when its footer does not verify, so damage at or past the count
/// (its footer, bytes after it, a fenced former owner's entries) is read by no use: the open
/// serves the ledger and `verify` warns of it. Both decide by this.
#[must_use]
pub(crate) fn damage_relied_on(at: Option<u64>, recorded: Option<u64>) -> bool {
    match (at, recorded) {
        (Some(at), Some(recorded)) => at < recorded,
        _ => true,
    }
}

/// Hands out a new block `[start, end)` of ledger ids that no other writer of the directory
/// uses (see [`EntryLog::reserve_ids`]).
#[derive(Clone)]
pub struct IdSource(pub Arc<dyn Fn() -> Result<(u64, u64)> + Send + Sync>);

/// A block of ledger ids being used, and where the next one comes from.
struct Reserved {
    next: u64,
    end: u64,
    source: Option<IdSource>,
}

/// A directory of ledgers. `Send + Sync`: share it as `Arc<EntryLog>`; every method takes
/// `&self`.
pub struct EntryLog {
    storage: Arc<dyn Storage>,
    config: LogConfig,
    read_only: bool,
    ledgers: RwLock<BTreeMap<u64, Arc<Ledger>>>,
    /// Interrupted creates still on disk.
    interrupted: Mutex<std::collections::BTreeSet<u64>>,
    next_ledger_id: AtomicU64,
    /// The block of ids this handle may use, when its owner reserves ids (see
    /// [`EntryLog::reserve_ids`]); `None`: ids come from `next_ledger_id`.
    reserved: Mutex<Option<Reserved>>,
    /// Sealed ledgers whose files are listed but not opened yet, with the entry count their
    /// owner recorded (see [`EntryLog::open_locked_deferring`]). Disjoint from `ledgers`; a
    /// deferred ledger moves into `ledgers` (under this lock, taken before `ledgers`) once it
    /// opened with at least its recorded count.
    deferred: Mutex<BTreeMap<u64, u64>>,
    /// Ledgers served with damage no use relies on (at or past their recorded count:
    /// [`damage_relied_on`]), which [`EntryLog::damaged_ledgers`] does not list.
    served_damaged: Mutex<BTreeSet<u64>>,
    report: Mutex<Vec<TailRepair>>,
    stats: LogStatsCounters,
    _lock: Option<LockGuard>,
}

impl std::fmt::Debug for EntryLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntryLog")
            .field("location", &self.storage.location())
            .field("read_only", &self.read_only)
            .field("ledgers", &self.ledger_ids())
            .finish_non_exhaustive()
    }
}

impl EntryLog {
    /// Opens the log in `storage` as its one owner.
    ///
    /// Takes `storage.lock()` ([`Error::Locked`] when another handle or process holds it),
    /// opens every `ledger-{id:020}.log` file: sealed ledgers through their footer without a
    /// scan, unsealed ones by scanning their frames. A torn tail is cut back to the last whole
    /// entry and reported in [`EntryLog::recovery_report`] ([`RecoveryMode::Strict`]:
    /// [`Error::TornTail`] instead). A ledger with damage before its tail (a bad frame followed
    /// by valid ones) opens *damaged*: listed by [`EntryLog::damaged_ledgers`], its entries
    /// before the damage readable, later ones and every write [`Error::Corrupted`]
    /// ([`RecoveryMode::Strict`]: open fails with [`Error::Corrupted`]).
    ///
    /// A ledger file is fsynced unless its header's synced-length slot proves the whole file
    /// durable already (a seal records that proof after its last fsync; see `docs/format.md`),
    /// so what this open found, a footer left by a seal that never returned included, survives
    /// a power cut from here on. A sealed ledger without the proof (sealed by an older build, or
    /// its slot lost in a power cut) is fsynced once and given it; a version 1 or 2 file has no
    /// slot and is fsynced at every open. Sealed ledgers are not mapped until their first read.
    pub fn open(storage: Arc<dyn Storage>, config: LogConfig) -> Result<EntryLog> {
        let guard = storage.lock()?;
        let log = Self::open_inner(storage, config, Some(guard), true, &BTreeMap::new())?;
        for id in log.interrupted_creates() {
            log.delete_ledger(id)?;
        }
        Ok(log)
    }

    /// Ledger files found holding only part of a header (a create cut short) and not yet
    /// deleted: not among [`EntryLog::ledger_ids`], and reported in
    /// [`EntryLog::recovery_report`].
    #[must_use]
    pub fn interrupted_creates(&self) -> Vec<u64> {
        lock(&self.interrupted).iter().copied().collect()
    }

    /// Opens the log as [`EntryLog::open`] does, under a lock the caller took already with
    /// `storage.lock()` (so it can claim ownership elsewhere before the ledger files are read),
    /// except that interrupted creates stay on disk, listed by
    /// [`EntryLog::interrupted_creates`], for a caller that knows which ledgers are recorded (a
    /// recorded ledger's file must never be removed) to delete with [`EntryLog::delete_ledger`]
    /// or refuse.
    pub fn open_locked(
        storage: Arc<dyn Storage>,
        config: LogConfig,
        guard: LockGuard,
    ) -> Result<EntryLog> {
        Self::open_inner(storage, config, Some(guard), true, &BTreeMap::new())
    }

    /// [`EntryLog::open_locked`] (`cut_tails`) or [`EntryLog::open_locked_keeping_tails`]
    /// (not), except that the files of `sealed` ledgers (id to the entry count their owner
    /// recorded them with) are listed but not opened: each opens on its first use (a read, its
    /// count, its summary), without cutting anything, and that use fails as
    /// [`EntryLog::check_holds`] decides: [`Error::Corrupted`] naming the ledger for damage
    /// before the recorded count (or a file shorter than a header), [`Error::LedgerMismatch`]
    /// for a file holding fewer entries than recorded without damage; [`Error::MissingLedger`]
    /// for a file removed since; the next use tries again. Damage at or past the recorded count
    /// (a footer that does not verify, bytes after it, a fenced former owner's entries) and a
    /// torn tail are left in place, and reads stop at the count.
    /// Deleting a deferred ledger opens nothing. `listed` is every name the storage held at one
    /// listing the caller took after it claimed the storage (it reads the same listing for
    /// what else the directory holds): the open lists nothing more, whatever the number of
    /// sealed ledgers.
    pub fn open_locked_deferring(
        storage: Arc<dyn Storage>,
        config: LogConfig,
        guard: LockGuard,
        (cut_tails, listed): (bool, &[String]),
        sealed: &BTreeMap<u64, u64>,
    ) -> Result<EntryLog> {
        Self::open_listed(storage, config, Some(guard), (cut_tails, listed), sealed)
    }

    /// [`EntryLog::open_locked`] that cuts no torn tail: each is reported in
    /// [`EntryLog::recovery_report`] and left in the file, and reads stop before it. For an
    /// owner that never appends to a ledger it did not create (a topic of a store) and must not
    /// shorten a file a former owner may still be writing while this open runs.
    pub fn open_locked_keeping_tails(
        storage: Arc<dyn Storage>,
        config: LogConfig,
        guard: LockGuard,
    ) -> Result<EntryLog> {
        Self::open_inner(storage, config, Some(guard), false, &BTreeMap::new())
    }

    /// Opens the log for reading only: takes no lock and never writes or truncates. Torn tails
    /// are reported in [`EntryLog::recovery_report`], not cut; reads stop before them. Every
    /// writing method returns [`Error::Unsupported`].
    pub fn open_read_only(storage: Arc<dyn Storage>, config: LogConfig) -> Result<EntryLog> {
        Self::open_inner(storage, config, None, false, &BTreeMap::new())
    }

    fn open_inner(
        storage: Arc<dyn Storage>,
        config: LogConfig,
        guard: Option<LockGuard>,
        cut_tails: bool,
        sealed: &BTreeMap<u64, u64>,
    ) -> Result<EntryLog> {
        let listed = storage.list()?;
        Self::open_listed(storage, config, guard, (cut_tails, &listed), sealed)
    }

    /// [`EntryLog::open_inner`] over the names of `listed`.
    fn open_listed(
        storage: Arc<dyn Storage>,
        config: LogConfig,
        guard: Option<LockGuard>,
        (cut_tails, listed): (bool, &[String]),
        sealed: &BTreeMap<u64, u64>,
    ) -> Result<EntryLog> {
        let read_only = guard.is_none();
        let mut deferred = BTreeMap::new();
        let stats = LogStatsCounters::new(storage.location());
        let mut ledgers = BTreeMap::new();
        let mut report = Vec::new();
        let mut interrupted = std::collections::BTreeSet::new();
        let mut max_seen = 0;
        for name in listed {
            let Some(id) = parse_ledger_file_name(name) else {
                continue;
            };
            max_seen = max_seen.max(id);
            if let Some(&recorded) = sealed.get(&id) {
                deferred.insert(id, recorded);
                continue;
            }
            stats.ledger_opens.fetch_add(1, Ordering::Relaxed);
            let opened = match open_ledger(
                storage.as_ref(),
                id,
                config.recovery,
                read_only,
                cut_tails && !read_only,
                &stats,
            ) {
                // Removed since the listing (by a former owner of the directory that does not
                // know it lost it, or by an inspected directory's owner): as if not listed.
                Err(e) if e.is_not_found() => continue,
                other => other?,
            };
            match opened {
                Opened::Ledger(ledger, repair, _) => {
                    observe_open(
                        &storage,
                        id,
                        ledger.damage(),
                        repair.as_ref(),
                        cut_tails && !read_only,
                    );
                    ledgers.insert(id, ledger);
                    report.extend(repair);
                }
                Opened::Discarded(repair) => {
                    observe_open(&storage, id, None, Some(&repair), cut_tails && !read_only);
                    interrupted.insert(id);
                    report.push(repair);
                }
            }
        }
        Ok(EntryLog {
            storage,
            config,
            read_only,
            ledgers: RwLock::new(ledgers),
            interrupted: Mutex::new(interrupted),
            next_ledger_id: AtomicU64::new(max_seen.saturating_add(1)),
            reserved: Mutex::new(None),
            deferred: Mutex::new(deferred),
            served_damaged: Mutex::default(),
            report: Mutex::new(report),
            stats,
            _lock: guard,
        })
    }

    /// What open cut (or, read-only, found) at the tail of each ledger.
    #[must_use]
    pub fn recovery_report(&self) -> Vec<TailRepair> {
        lock(&self.report).clone()
    }

    /// The storage directory.
    #[must_use]
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The largest payload `append` accepts.
    #[must_use]
    pub fn max_entry_size(&self) -> u32 {
        self.config.max_entry_size
    }

    fn writable(&self) -> Result<()> {
        if self.read_only {
            Err(Error::Unsupported {
                what: "this entry log was opened read-only".into(),
            })
        } else {
            Ok(())
        }
    }

    fn ledger(&self, id: u64) -> Result<Arc<Ledger>> {
        Ok(self.ledger_opening(id)?.0)
    }

    /// Ledger `id`, and when this call opened it (a deferred ledger's first use) the id and
    /// metadata of its last entry, if the open read and checked that entry's frame whole
    /// (see [`EntryLog::read_meta`]).
    fn ledger_opening(&self, id: u64) -> Result<(Arc<Ledger>, Option<LastEntry>)> {
        let opened = self
            .ledgers
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&id)
            .cloned();
        match opened {
            Some(ledger) => Ok((ledger, None)),
            None => self.open_deferred(id),
        }
    }

    /// Whether `id` is a sealed ledger whose file has not been opened yet (see
    /// [`EntryLog::open_locked_deferring`]).
    #[must_use]
    pub fn is_deferred(&self, id: u64) -> bool {
        lock(&self.deferred).contains_key(&id)
    }

    /// Opens deferred ledger `id` on its first use, checking it holds its recorded count; with
    /// its last entry's id and metadata when the open read them.
    fn open_deferred(&self, id: u64) -> Result<(Arc<Ledger>, Option<LastEntry>)> {
        let mut deferred = lock(&self.deferred);
        let Some(&recorded) = deferred.get(&id) else {
            // Opened by another thread meanwhile (it held this lock), or not a ledger.
            return self
                .ledgers
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&id)
                .cloned()
                .map(|ledger| (ledger, None))
                .ok_or(Error::NoSuchLedger(id));
        };
        self.stats.ledger_opens.fetch_add(1, Ordering::Relaxed);
        let opened = open_ledger(
            self.storage.as_ref(),
            id,
            self.config.recovery,
            self.read_only,
            false,
            &self.stats,
        );
        let (ledger, last_entry) = match opened {
            Err(e) if e.is_not_found() => {
                return Err(Error::MissingLedger {
                    ledger: id,
                    dir: self.storage.location().into(),
                });
            }
            Err(e) => return Err(e),
            // Less than a header: the recorded entries are gone.
            Ok(Opened::Discarded(_)) => {
                return Err(Error::corrupted(id, 0, CorruptionKind::Truncated));
            }
            Ok(Opened::Ledger(ledger, repair, last_entry)) => {
                observe_open(&self.storage, id, ledger.damage(), repair.as_ref(), false);
                lock(&self.report).extend(repair);
                (ledger, last_entry)
            }
        };
        self.check_holds(id, ledger.entry_count(), ledger.damage(), Some(recorded))?;
        deferred.remove(&id);
        self.ledgers
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id, ledger.clone());
        Ok((ledger, last_entry))
    }

    /// Whether ledger `id`, whose open found `found` whole entries and `damage` (where the
    /// scan stopped, and why), may be served to the count its owner recorded (`None`: not
    /// recorded yet, the ledger an owner was appending to, whose entries are all that the file
    /// proves synced). The one rule for every open of a listed ledger, a sealed ledger's first
    /// use and the topic's open alike: [`Error::Corrupted`] for damage a use relies on
    /// ([`damage_relied_on`]), [`Error::LedgerMismatch`] for fewer entries than recorded
    /// without damage. Damage past the recorded count (a footer that does not verify, bytes
    /// after it, a fenced former owner's entries) is left in the file: reads stop at the count
    /// and every one checks its frame.
    pub(crate) fn check_holds(
        &self,
        id: u64,
        found: u64,
        damage: Option<(u64, CorruptionKind)>,
        recorded: Option<u64>,
    ) -> Result<()> {
        if let Some((offset, kind)) = damage {
            if damage_relied_on(Some(found), recorded) {
                return Err(Error::corrupted(id, offset, kind));
            }
            lock(&self.served_damaged).insert(id);
        }
        match recorded {
            Some(recorded) if found < recorded => Err(Error::LedgerMismatch {
                ledger: id,
                recorded,
                found,
                dir: self.storage.location().into(),
            }),
            _ => Ok(()),
        }
    }

    /// Creates a new, empty ledger and returns its id: greater than every ledger id this handle
    /// has seen, created, or been bumped to (ids start at 1). Durable when it returns: the header
    /// is written and synced, then the directory is synced.
    pub fn create_ledger(&self) -> Result<u64> {
        self.writable()?;
        // An id whose file exists was taken by another writer of the directory (a previous
        // owner that does not know it lost it): skip it, never share a file.
        let (id, file) = loop {
            let id = self.next_id()?;
            match self.storage.create(&ledger_file_name(id)) {
                Ok(file) => break (id, file),
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        };
        let header = LedgerHeader::new(id, fresh_nonce(id));
        let name = ledger_file_name(id);
        let made = file
            .write_all_at(&header.encode(), 0)
            .and_then(|()| file.sync_data())
            .and_then(|()| self.storage.sync_dir());
        if let Err(e) = made {
            // No latch: a failed sync lost this file's header alone, and the file is never
            // used again; the next create writes and syncs a file of its own.
            // Best effort (a full disk still removes): no ledger file of a failed create stays
            // behind; one that does is unreferenced, and the next open deletes it.
            drop(file);
            let _ = self.storage.remove(&name);
            return Err(e);
        }
        self.stats.fsyncs.fetch_add(1, Ordering::Relaxed);
        let ledger = Ledger::unsealed(header, file, Vec::new(), header.data_start());
        self.ledgers
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id, Arc::new(ledger));
        Ok(id)
    }

    /// From now on, takes ledger ids from `[start, end)` only, and once they are used up, from
    /// the blocks `source` hands out (without a source, creating a ledger then fails with
    /// [`Error::LimitExceeded`]). An owner that reserves each block in a record by
    /// compare-and-set makes ids unique across every writer of the directory, for good: no two
    /// writers ever create, or delete, a file of the same id.
    pub fn reserve_ids(&self, start: u64, end: u64, source: Option<IdSource>) {
        *lock(&self.reserved) = Some(Reserved {
            next: start,
            end,
            source,
        });
    }

    /// Sets where the next blocks of reserved ids come from (see [`EntryLog::reserve_ids`]).
    pub fn set_id_source(&self, source: IdSource) {
        if let Some(r) = lock(&self.reserved).as_mut() {
            r.source = Some(source);
        }
    }

    fn next_id(&self) -> Result<u64> {
        let mut reserved = lock(&self.reserved);
        let Some(r) = reserved.as_mut() else {
            return Ok(self.next_ledger_id.fetch_add(1, Ordering::SeqCst));
        };
        if r.next >= r.end {
            let source = r.source.clone().ok_or_else(|| Error::LimitExceeded {
                reason: "the reserved ledger ids are used up".into(),
            })?;
            let (start, end) = (source.0)()?;
            r.next = start;
            r.end = end;
        }
        let id = r.next;
        r.next += 1;
        Ok(id)
    }

    /// Makes the next created ledger's id at least `at_least` (for callers that remember ids of
    /// ledgers whose files are gone).
    pub fn bump_next_ledger_id(&self, at_least: u64) {
        self.next_ledger_id.fetch_max(at_least, Ordering::SeqCst);
    }

    /// Appends an entry to `ledger` and returns its entry id (dense from 0 per ledger).
    ///
    /// Readable at once; survives a process crash or a power cut only once a later
    /// [`EntryLog::sync`] of the ledger returns `Ok` (until then it may sit in the ledger's
    /// write buffer). A payload over the configured maximum is
    /// [`Error::EntryTooLarge`] with nothing written; a sealed ledger is [`Error::Sealed`]; a
    /// ledger opened damaged is [`Error::Corrupted`];
    /// after a failed write or sync of this ledger, [`Error::PreviousIo`] until reopened.
    pub fn append(&self, ledger: u64, meta: EntryMeta, payload: &[u8]) -> Result<u64> {
        self.writable()?;
        if payload.len() as u64 > u64::from(self.config.max_entry_size) {
            return Err(Error::EntryTooLarge {
                size: payload.len() as u64,
                max: u64::from(self.config.max_entry_size),
            });
        }
        self.ledger(ledger)?.append(meta, payload, &self.stats)
    }

    /// Makes every entry of `ledger` appended before this call durable (`fdatasync`), then
    /// records the synced length in the ledger's header slot (one positioned write, no fsync of
    /// its own; durable with the next sync or the kernel's writeback), so that damage to these
    /// bytes is later reported as corruption, not cut as a torn tail.
    ///
    /// Concurrent callers share fsyncs (group commit): a caller whose entries a finished fsync
    /// already covered returns without issuing one. A failed fsync is never retried: the ledger
    /// then answers [`Error::PreviousIo`] until reopened. A sealed ledger is already durable.
    pub fn sync(&self, ledger: u64) -> Result<()> {
        self.writable()?;
        self.ledger(ledger)?.sync(&self.stats)
    }

    /// Seals `ledger`: syncs its entries, writes the footer (the entry-offset index) and syncs
    /// it, then records the whole file in the header's synced-length slot (version 3; one
    /// positioned write, no fsync), the proof that spares a later open its fsync. Durable when
    /// it returns; later reads go through a memory map, made on the first read, and appends fail
    /// with [`Error::Sealed`]. Sealing a sealed ledger does nothing.
    ///
    /// A crash before it returns leaves the ledger unsealed, with every entry appended before
    /// the call, on the next open (a partial footer is cut and reported); seal it again.
    pub fn seal(&self, ledger: u64) -> Result<()> {
        self.writable()?;
        self.ledger(ledger)?.seal(&self.stats)
    }

    /// What a ledger's read needs of the log.
    fn reads(&self) -> Reads<'_> {
        Reads {
            counters: &self.stats,
            config: &self.config,
        }
    }

    /// Reads entry `entry_id` of `ledger`, checking its checksum.
    /// [`Error::NoSuchLedger`] / [`Error::NoSuchEntry`] when it does not exist.
    pub fn read(&self, ledger: u64, entry_id: u64) -> Result<LogEntry> {
        self.stats.entry_reads.fetch_add(1, Ordering::Relaxed);
        let (meta, payload) = self.ledger(ledger)?.read(entry_id, self.reads())?;
        Ok(LogEntry {
            entry_id,
            meta,
            payload,
        })
    }

    /// Reads the metadata of entry `entry_id` of `ledger` (the frame header; for an unsealed
    /// ledger without reading the payload). The read that opens a deferred ledger (see
    /// [`EntryLog::open_locked_deferring`]) takes its last entry's metadata from the bytes that
    /// open read, when they held its whole frame and it verified as a read checks it: the
    /// same bytes and checks, read once (a topic's open reads its next message index there).
    pub fn read_meta(&self, ledger: u64, entry_id: u64) -> Result<EntryMeta> {
        self.stats.header_reads.fetch_add(1, Ordering::Relaxed);
        match self.ledger_opening(ledger)? {
            (_, Some((last, meta))) if last == entry_id => Ok(meta),
            (ledger, _) => ledger.read_meta(entry_id, self.reads()),
        }
    }

    /// Iterates over the entries of `ledger` from `from` on, reading each as it is reached.
    pub fn entries(
        &self,
        ledger: u64,
        from: u64,
    ) -> Result<impl Iterator<Item = Result<LogEntry>>> {
        let count = self.entry_count(ledger)?;
        Ok((from..count).map(move |id| self.read(ledger, id)))
    }

    /// Number of entries in `ledger`.
    pub fn entry_count(&self, ledger: u64) -> Result<u64> {
        Ok(self.ledger(ledger)?.entry_count())
    }

    /// Number of entries of `ledger` that are durable: the prefix a finished fsync (of a
    /// [`EntryLog::sync`] or a seal) covered, every entry of a sealed ledger, and every entry
    /// open found. An entry appended after it is readable through this log but may be lost in a
    /// crash.
    pub fn synced_entries(&self, ledger: u64) -> Result<u64> {
        Ok(self.ledger(ledger)?.synced_entries())
    }

    /// Ids of every ledger (deferred ones included), ascending.
    #[must_use]
    pub fn ledger_ids(&self) -> Vec<u64> {
        let deferred = lock(&self.deferred);
        let mut ids: Vec<u64> = self
            .ledgers
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .keys()
            .chain(deferred.keys())
            .copied()
            .collect();
        ids.sort_unstable();
        ids
    }

    /// A summary of `ledger`.
    pub fn ledger_info(&self, ledger: u64) -> Result<LedgerInfo> {
        let l = self.ledger(ledger)?;
        Ok(LedgerInfo {
            id: ledger,
            entries: l.entry_count(),
            bytes: l.bytes(),
            sealed: l.is_sealed(),
            damaged: l.damage(),
        })
    }

    /// Every ledger opened damaged (see [`EntryLog::open`]), ascending by id. A deferred
    /// ledger (not opened yet) is not listed: its damage is the error of its first use; nor is
    /// a recorded ledger served with damage no use relies on ([`damage_relied_on`]: `verify`
    /// warns of it).
    #[must_use]
    pub fn damaged_ledgers(&self) -> Vec<LedgerInfo> {
        let served = lock(&self.served_damaged).clone();
        let opened: Vec<u64> = self
            .ledgers
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .keys()
            .copied()
            .collect();
        opened
            .into_iter()
            .filter_map(|id| self.ledger_info(id).ok())
            .filter(|info| info.damaged.is_some() && !served.contains(&info.id))
            .collect()
    }

    /// Deletes `ledger`: removes its file, then syncs the directory. Durable when it returns.
    pub fn delete_ledger(&self, ledger: u64) -> Result<()> {
        self.writable()?;
        let interrupted = lock(&self.interrupted).contains(&ledger);
        // A deferred ledger is deleted without being opened.
        let deferred = self.is_deferred(ledger);
        if !interrupted && !deferred {
            self.ledger(ledger)?;
        }
        match self.storage.remove(&ledger_file_name(ledger)) {
            // Already removed by another writer of the directory (a former owner deleting a
            // ledger it replaced): deleted all the same.
            Err(e) if e.is_not_found() => {}
            other => other?,
        }
        lock(&self.interrupted).remove(&ledger);
        lock(&self.deferred).remove(&ledger);
        self.ledgers
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&ledger);
        self.storage.sync_dir()
    }

    /// Counters since open.
    #[must_use]
    pub fn stats(&self) -> LogStats {
        let s = &self.stats;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        LogStats {
            appends: get(&s.appends),
            bytes_appended: get(&s.bytes_appended),
            sync_calls: get(&s.sync_calls),
            fsyncs: s.fsyncs.load(Ordering::Relaxed),
            header_reads: get(&s.header_reads),
            entry_reads: get(&s.entry_reads),
            maps: get(&s.maps),
            ledger_opens: get(&s.ledger_opens),
        }
    }
}

/// Logs what opening ledger `id` found: a warning for a damaged ledger (its entries past the
/// damage unreadable, writes refused) and for bytes cut from a tail (or, read-only, that would
/// be cut); nothing for a clean ledger.
fn observe_open(
    storage: &Arc<dyn Storage>,
    id: u64,
    damage: Option<(u64, CorruptionKind)>,
    repair: Option<&TailRepair>,
    cut: bool,
) {
    let at = storage.location();
    if let Some((offset, kind)) = damage {
        ::log::warn!(target: observe::LOG_TARGET,
            "{at}: ledger {id} is damaged at byte {offset} ({kind}); its entries before that \
             stay readable, later ones and writes are refused");
    }
    if let Some(r) = repair {
        let done = if cut {
            "cut"
        } else {
            "left in place (reads stop before them)"
        };
        ::log::warn!(target: observe::LOG_TARGET,
            "{at}: ledger {id}: {} bytes at offset {} {done} on open: {}",
            r.dropped_bytes, r.offset, r.reason);
    }
}

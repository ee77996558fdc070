//! The default metadata store: versioned record files in a [`Storage`] directory, with a
//! compare-and-set that is atomic across processes.
//!
//! Owns: the files `{name}.{version:020}.meta` (version `version` of record `name`), the
//! legacy `{name}.meta` (one record of an earlier release, its version inside), and
//! `{name}.{version:020}.{nonce:016x}.meta.tmp` (a write of that version in progress).
//!
//! A `put` of version `v + 1` over `v` writes the whole record under its temporary name,
//! `sync_data`s it, then *links* it to `{name}.{v+1:020}.meta`: `link(2)` fails when the name
//! exists, so of two writers racing for version `v + 1`, in one process or two, exactly one
//! wins; the other is [`Error::Fenced`]. The directory is synced before `put` returns. The
//! current record is the highest version present; a writer that linked a version while a
//! higher one already existed (possible once older versions were removed) sees it when it lists
//! the directory after its link and is fenced too. Older versions are removed after a successful
//! `put`, never before the newer one is linked, so from the moment a version is removed some
//! higher version exists. A record file is linked only once whole and synced, so after a power
//! cut at any step the directory holds whole versions only: the highest durable one is the
//! record (docs/format.md, "Metadata records").
//!
//! A deleted record is marked by an empty file at the next version (a tombstone, linked like any
//! version, so a delete races with puts by the same rule); then every file of the record is
//! removed, the tombstone last. A stale writer could still link a version of a record removed
//! entirely; such a record is one no table lists any more, and the topic's open removes it.
//!
//! Leftover temporary files are removed before a store's first write when they can no longer
//! be linked as the current record: files of earlier releases, and writes of a version the
//! record has reached; so are the files of a record whose delete was cut short after its
//! tombstone was linked. A topic's open removes the same leftovers among the files it lists
//! after its claim ([`MetaStore::sweep_leftovers`]), so one that writes no record removes them
//! too, and [`FileMetaStore::leftovers`] names them for `verify` by the same rule. Reads never
//! change the directory (an inspection tool only reads).
//!
//! A store made with [`FileMetaStore::owned`] belongs to the holder of the directory's
//! ownership lock, and its `get` and `put` cost a bounded number of storage operations however
//! many names the directory holds: it lists the directory once, remembers the version of every
//! record it reads or writes (`heads`), and finds a record's current version `v` by looking up
//! two names (`{name}.{v}.meta` exists and `{name}.{v+1}.meta` does not, the argument of
//! [`MetaStore::is_current`]; for a record it has not seen, that `{name}.1.meta` does not
//! exist), listing again only when a lookup disagrees. After its link a `put` looks up the next
//! version's name instead of listing (another writer built on ours: `Fenced`) and the name of
//! the version it replaced (gone: another writer replaced that version and then its own, so
//! ours went into a name freed below the record, the names above it maybe freed too:
//! `Fenced`), and removes the version it replaced and, after claims of the record by this
//! store, every version those claims linked from (a claim again before a write links from
//! the name the first one linked): from an owned store's first write of a record on, the live directory holds
//! one version of it, and a former owner holding any older version finds its name gone. The same files are written in the same
//! order, so every power-cut state above is unchanged; the listing after a link and the lookup
//! of the replaced name both catch a writer that links a version into a slot freed by several
//! later writes. Under the lock the only other writers are former owners whose lock was broken,
//! and each of their writes is bracketed by an ownership check (the store's claim, or the topic
//! record's) that the new owner took before this store listed the directory. A topic opened
//! alone lists its directory before it claims its record (the claim needs the version), when
//! a former owner may still write a record many times and an older one's write in flight may
//! link a stray into a name those writes freed, which a lookup would take for the record: so
//! until its first link over a version (a claim or a write, the fencing record's or a later
//! one), an owned store checks each link by a listing of the record's files, as the shared
//! store does, and the listing after that first link lists every record and is what the store
//! knows from then on. After it, such a writer has
//! at most one write of a record in flight, so it can take the next version (refused here by
//! the link or the lookup after it), or put a stray below the current version, which no read
//! takes and which that `put` itself reports as `Fenced`: a former owner never takes a stray
//! for its record, so never deletes a file on the strength of one. A stray may land in the very
//! name of a version a former owner still holds, once newer writes freed it (three owners in
//! turn, the oldest one's write in flight): a lookup that finds the name is then not enough,
//! so the store remembers what each version it read, wrote or claimed held (the file's length
//! and the CRC that ends its frame, `heads::Ident`), and the name of the version it holds
//! passes only while it holds that file ([`MetaStore::is_current`], the check after a link,
//! a read by lookups). The first write of an owned
//! store also removes every version below a record's highest (strays, and versions a power cut
//! brought back), after a directory sync. A `delete` lists the record's files as in the shared
//! store. A `claim` of a record whose names this store knows exactly (its listing showed them,
//! or its own write or claim left them since) checks its link by the same two name lookups
//! as a `put` and removes the names below the claimed version by name, so a topic that claims
//! every cursor record at its open lists its directory a bounded number of times whatever the
//! number of cursors; any other claim lists the record's files as in the shared store.
//!
//! An owned store made with [`FileMetaStore::owned_records`] keeps only the records it names
//! (a store's catalog): its listing and its sweep cover the files of those records alone, and
//! any other record is found by a listing of its own files, so neither grows with the rest of
//! the directory (the records and ledgers of a store's topics, which each topic's metadata
//! store lists and sweeps under its own prefix when the topic opens).

use std::collections::BTreeMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::heads::{Heads, Ident, Known};
use super::{MetaStore, validate_record_name};
use crate::error::{CorruptionKind, CorruptionPlace, Error, Result};
use crate::format::meta::{MAX_RECORD_BYTES, STORED_OVERHEAD, decode_stored, encode_stored};
use crate::hashing::IdMap;
use crate::storage::{LockGuard, Storage};

/// Suffix of a committed record's file.
pub const RECORD_SUFFIX: &str = ".meta";
/// Suffix of a record being written.
pub const TEMP_SUFFIX: &str = ".meta.tmp";
/// Digits of the version in a record's file name.
const VERSION_DIGITS: usize = 20;
/// Names of one record past which a claim removes those below the version it claims: 1, so a
/// claim leaves the record's version and the claimed one (older names a power cut brought back,
/// or earlier claims left, go with it), as an open that writes nothing must leave no more.
pub const CLAIM_NAMES: usize = 1;
/// How often `get` lists the directory again when a file it listed was removed meanwhile (by
/// another writer's cleanup, which only removes a version once a higher one exists).
const READ_ATTEMPTS: usize = 64;

/// Metadata records as versioned files, replaced by linking a new version (see the module
/// documentation).
#[derive(Debug)]
pub struct FileMetaStore {
    storage: Arc<dyn Storage>,
    /// Serialises the writes of this store, and holds their state.
    pub writes: Mutex<Writes>,
    /// Randomly keyed, so the nonces of two stores (in one process or two) do not collide.
    nonces: RandomState,
    /// The versions of the records this store has seen, when it belongs to the owner of the
    /// directory ([`FileMetaStore::owned`]); `None`: every read lists the record's files.
    heads: Option<Mutex<Heads>>,
    /// The records whose files this owned store lists to fill `heads` and to sweep
    /// ([`FileMetaStore::owned_records`]); `None`: every file of the directory.
    scope: Option<Vec<String>>,
    /// The listing that filled `heads`, kept for the sweep before the first write, which
    /// would list the same files again: no write of this store comes between the two.
    filled_from: Mutex<Option<Vec<String>>>,
    /// Whether `heads` were filled again by a listing taken after this store's first link of
    /// a version (its first claim or write). Until then they come from a listing that may
    /// precede the claim that fences former owners (a topic opened alone reads its record
    /// before it claims it), when a former owner may still write a record many times and an
    /// older one's write in flight may link a stray into a name those writes freed: so a claim
    /// or write checks its link by a listing, not by name lookups, until this is set.
    after_fence: AtomicBool,
    /// With [`FileMetaStore::listed_once`]: each record's files as one listing of the directory,
    /// taken at the first read, showed them (`None` until then).
    listed_once: Option<Mutex<Option<ByRecord>>>,
}

/// Each record's files in a listing, highest version first (see [`files_by_record`]).
type ByRecord = BTreeMap<String, Vec<Found>>;

/// One record as [`MetaStore::get`] reads it: its `(version, bytes)`, or `None` when absent.
pub type RecordRead = Result<Option<(u64, Vec<u8>)>>;

/// What `put` and `delete` keep between calls.
#[derive(Debug, Default)]
pub struct Writes {
    /// Leftover temporary files have been removed.
    swept: bool,
    /// Writes started by this store: hashed into the temporary file's nonce.
    count: u64,
    /// Per record this store claimed since its last write of it, the version its first such
    /// claim linked from: the versions from it up to the one the record's next `put` replaces
    /// (every name those claims linked) stay until that `put` removes them.
    claimed_from: IdMap<String, u64>,
    /// The listing of every file of the directory the last call took right after its link,
    /// when that call was a claim that fenced former owners ([`FileMetaStore::none_above`]'s
    /// listing), less the files the claim removed: until the next write or claim changes the
    /// directory, what a listing would show (see [`MetaStore::take_fenced_listing`]).
    fenced_listing: Option<Vec<String>>,
}

/// One file of a record found in the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Found {
    /// The version its name carries; `None` for the legacy `{name}.meta` (version inside).
    version: Option<u64>,
    file: String,
}

/// The record a committed record file belongs to (`topic` for `topic.00000000000000000007.meta`
/// or for the earlier releases' `topic.meta`); `None` for any other file.
#[must_use]
pub fn record_of_file(file: &str) -> Option<&str> {
    parse_record_file(file).map(|(name, _)| name)
}

/// Whether `file` may be what a write or a deletion cut short left ([`MetaStore::sweep_leftovers`]):
/// a temporary file, or a file at version 2 or above (a tombstone's least) of a record for
/// which `deletable` holds. A name test alone: the sweep decides.
pub fn may_be_leftover(file: &str, deletable: impl Fn(&str) -> bool) -> bool {
    file.ends_with(TEMP_SUFFIX)
        || parse_record_file(file)
            .is_some_and(|(name, version)| deletable(name) && version.is_some_and(|v| v >= 2))
}

/// What a record file's name says: `(record name, version)`; version `None` for `{name}.meta`.
fn parse_record_file(file: &str) -> Option<(&str, Option<u64>)> {
    let stem = file.strip_suffix(RECORD_SUFFIX)?;
    match stem.split_once('.') {
        None => {
            validate_record_name(stem).ok()?;
            Some((stem, None))
        }
        Some((name, digits)) => {
            validate_record_name(name).ok()?;
            Some((name, Some(parse_version(digits)?)))
        }
    }
}

fn parse_version(digits: &str) -> Option<u64> {
    (digits.len() == VERSION_DIGITS && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// What a temporary file's name says: `Some((record name, version))` for one of this release,
/// `None` for one of an earlier release.
fn parse_temp_file(file: &str) -> Option<(&str, u64)> {
    let mut parts = file.strip_suffix(TEMP_SUFFIX)?.split('.');
    let (name, digits, nonce) = (parts.next()?, parts.next()?, parts.next()?);
    let ok = parts.next().is_none()
        && nonce.len() == 16
        && nonce.bytes().all(|b| b.is_ascii_hexdigit())
        && validate_record_name(name).is_ok();
    ok.then(|| Some((name, parse_version(digits)?))).flatten()
}

#[must_use]
pub fn version_file(name: &str, version: u64) -> String {
    let mut file = String::with_capacity(name.len() + 1 + VERSION_DIGITS + RECORD_SUFFIX.len());
    file.push_str(name);
    file.push('.');
    crate::format::push_number(&mut file, version, VERSION_DIGITS);
    file.push_str(RECORD_SUFFIX);
    file
}

fn is_already_exists(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists)
}

/// What `get` found: the record, a tombstone, or nothing.
enum Current {
    Record(u64, Vec<u8>),
    Deleted(u64),
    Absent,
}

impl Current {
    /// The record's `(version, bytes)`; `None` for a tombstone or nothing.
    fn into_record(self) -> Option<(u64, Vec<u8>)> {
        match self {
            Current::Record(version, bytes) => Some((version, bytes)),
            Current::Deleted(_) | Current::Absent => None,
        }
    }

    /// The version this state is at; 0 for an absent record.
    fn version(&self) -> u64 {
        match self {
            Self::Record(v, _) | Self::Deleted(v) => *v,
            Self::Absent => 0,
        }
    }
}

impl FileMetaStore {
    /// A store over `storage`; the directory may also hold other files (ledgers), which the
    /// store ignores.
    #[must_use]
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        Self {
            storage,
            writes: Mutex::new(Writes::default()),
            nonces: RandomState::new(),
            heads: None,
            scope: None,
            filled_from: Mutex::new(None),
            after_fence: AtomicBool::new(false),
            listed_once: None,
        }
    }

    /// A store over `storage` for a reader that reads many records and writes none (the
    /// offline check): its reads take each record's files from one listing of the directory,
    /// taken at the first read, as [`FileMetaStore::get_each`] does, instead of a listing per
    /// read, which made reading every cursor record of a topic quadratic in its cursors. A
    /// record one of whose listed files is gone when read is read as [`FileMetaStore::new`]'s
    /// would (its files listed anew); otherwise a record reads as the listing showed it, so a
    /// version written after the listing is not seen: for a directory nobody writes meanwhile.
    #[must_use]
    pub fn listed_once(storage: Arc<dyn Storage>) -> Self {
        Self {
            listed_once: Some(Mutex::new(None)),
            ..Self::new(storage)
        }
    }

    /// The current `(version, bytes)` of each of `names` (`None`: absent or deleted), all read
    /// from one listing of the storage, where a `get` of a store not owned lists once per
    /// record; a record one of whose listed files was removed meanwhile is read again on its
    /// own. Beside each, whether the listing held a file of the record at all (a tombstone's
    /// included): a record that reads as absent and was listed was deleted, or its newest
    /// version emptied.
    ///
    /// # Errors
    /// [`Error::Io`] when the listing fails; per record, the errors of [`MetaStore::get`].
    pub fn get_each(&self, names: &[&str]) -> Result<Vec<(RecordRead, bool)>> {
        let listed = self.storage.list()?;
        let mut by_record = files_by_record(&listed);
        Ok(names
            .iter()
            .map(|&name| {
                let found = by_record.remove(name).unwrap_or_default();
                let read = validate_record_name(name).and_then(|()| {
                    self.current_of_listed(name, &found)
                        .map(Current::into_record)
                });
                (read, !found.is_empty())
            })
            .collect())
    }

    /// A store over `storage` for the holder of its ownership lock (`lock`, from
    /// [`Storage::lock`], held for as long as this store writes): reads and writes look up
    /// a bounded number of names instead of listing the directory (see the module
    /// documentation). Every writer of the records other than this store must be fenced by an
    /// ownership check that the owner takes before this store's first call, or by this
    /// store's first link over a version (a topic opened alone claims its own record): until
    /// that link its links are checked by listings.
    #[must_use]
    pub fn owned(storage: Arc<dyn Storage>, lock: &LockGuard) -> Self {
        let _ = lock;
        Self {
            heads: Some(Mutex::new(Heads::default())),
            ..Self::new(storage)
        }
    }

    /// A store as [`FileMetaStore::owned`] whose listings (the one that fills what it knows
    /// of its records, and the sweep before its first write) cover only the files of the
    /// records `records` and of the records named `{record}-...` after one of them (the store
    /// catalog's chunk records), so what they cost does not
    /// grow with the rest of the directory: a store's catalog next to the records of its
    /// topics, which each topic's own metadata store keeps and sweeps when the topic opens.
    /// A record outside `records` is found by a listing of its own files on every call.
    #[must_use]
    pub fn owned_records(storage: Arc<dyn Storage>, lock: &LockGuard, records: &[&str]) -> Self {
        Self {
            scope: Some(records.iter().map(|r| (*r).to_owned()).collect()),
            ..Self::owned(storage, lock)
        }
    }

    /// The files this store's listings cover: those of its records with
    /// [`FileMetaStore::owned_records`], every file of the directory otherwise.
    fn listing(&self) -> Result<Vec<String>> {
        match &self.scope {
            None => self.storage.list(),
            Some(records) => {
                let mut files = Vec::new();
                for record in records {
                    files.extend(self.storage.list_prefix(record)?.into_iter().filter(|f| {
                        f.split_once('.')
                            .is_some_and(|(name, _)| in_family(record, name))
                    }));
                }
                Ok(files)
            }
        }
    }

    /// Whether `name` is a record this store's listings cover.
    fn in_scope(&self, name: &str) -> bool {
        self.scope
            .as_ref()
            .is_none_or(|records| records.iter().any(|r| in_family(r, name)))
    }

    /// The storage the records live in.
    #[must_use]
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// Every file of record `name`, highest version first (the legacy file ranks by the
    /// version inside it, read later; it sorts last here). Lists only the names that start
    /// with `{name}.` ([`Storage::list_prefix`]).
    fn files_of(&self, name: &str) -> Result<Vec<Found>> {
        let listed = self.storage.list_prefix(&format!("{name}."))?;
        Ok(files_of_record(&listed, name))
    }

    fn corrupted(name: &str, kind: CorruptionKind) -> Error {
        Error::Corrupted {
            place: CorruptionPlace::Record(name.to_string()),
            kind,
        }
    }

    /// Reads one record file: `None` when it was removed meanwhile; an empty file is a
    /// tombstone.
    ///
    /// With `known_only` (a read by name lookups), a file under a version's name that differs
    /// from what this owned store remembers that version held ([`Heads::ident`]) is a stray
    /// another writer linked into the freed name, not the record: `None`, and the caller lists.
    /// Otherwise what the file holds is remembered for its version.
    fn read_file(&self, name: &str, found: &Found, known_only: bool) -> Result<Option<Current>> {
        let file = match self.storage.open(&found.file) {
            Ok(file) => file,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        // On storage without open-file handles (RADOS) a file removed after `open` fails its
        // later calls with `NotFound`: removed meanwhile, as above. The record is read whole
        // and verified even where only its version is wanted (the check before a write): a
        // version damaged in place is reported, never written over as if it were the record,
        // and on RADOS the read is one request, as a size would be.
        let bytes = match file.read_all(MAX_RECORD_BYTES as u64) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Err(Self::corrupted(name, CorruptionKind::BadLength)),
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        if let (Some(v), Some(heads)) = (found.version, &self.heads) {
            let mut heads = heads.lock().unwrap_or_else(PoisonError::into_inner);
            let ident = Ident::of(&bytes);
            match heads.ident(name, v) {
                Some(known) if known != ident && known_only => return Ok(None),
                _ => heads.set_ident(name, v, ident, false),
            }
        }
        if bytes.is_empty() {
            return match found.version {
                Some(v) => Ok(Some(Current::Deleted(v))),
                None => Err(Self::corrupted(name, CorruptionKind::Truncated)),
            };
        }
        let (version, payload) = decode_stored(&bytes).map_err(|c| c.in_record(name))?;
        // A claim (see `MetaStore::claim`) gives the bytes of a version a second name, one
        // version up: the name's version counts. A name below the version inside is damage.
        match found.version {
            Some(named) if named < version => Err(Self::corrupted(
                name,
                CorruptionKind::InvalidField("version differs from the file name"),
            )),
            Some(named) => Ok(Some(Current::Record(named, payload))),
            None => Ok(Some(Current::Record(version, payload))),
        }
    }

    /// The state of `name` that `files` (its files, as [`files_by_record`] orders them) hold: only
    /// the highest versioned file and a legacy `{name}.meta` are read (the legacy file counts
    /// by the version inside it). `None` when a file was removed meanwhile: list again.
    fn current_in(&self, name: &str, files: &[Found]) -> Result<Option<Current>> {
        let highest = files.iter().find(|f| f.version.is_some());
        let legacy = files.iter().find(|f| f.version.is_none());
        let mut best = Current::Absent;
        for found in highest.into_iter().chain(legacy) {
            let Some(current) = self.read_file(name, found, false)? else {
                return Ok(None);
            };
            if current.version() > best.version() {
                best = current;
            }
        }
        Ok(Some(best))
    }

    /// The state of `name` that `files` (its files in a listing) hold, or, when one of them was
    /// removed since, its current state read again.
    fn current_of_listed(&self, name: &str, files: &[Found]) -> Result<Current> {
        match self.current_in(name, files)? {
            Some(current) => Ok(current),
            None => self.current(name),
        }
    }

    /// The current state of `name`: its highest version.
    fn current(&self, name: &str) -> Result<Current> {
        self.current_found(name).map(|(current, _)| current)
    }

    /// The current state of `name`, and whether it was found by looking up its names (then a
    /// version it names is the file `{name}.{version}.meta`) rather than by a listing.
    fn current_found(&self, name: &str) -> Result<(Current, bool)> {
        validate_record_name(name)?;
        if let Some(current) = self.current_known(name)? {
            return Ok((current, true));
        }
        let current = self.current_listed(name)?;
        if let Current::Record(v, _) | Current::Deleted(v) = current {
            self.learn(name, Known::At(v));
        }
        Ok((current, false))
    }

    /// The state of `name` from what this owned store knows of it, confirmed by two name
    /// lookups; `None` when the store is not owned or a lookup disagrees (list instead).
    fn current_known(&self, name: &str) -> Result<Option<Current>> {
        let Some(heads) = &self.heads else {
            return Ok(None);
        };
        if !self.in_scope(name) {
            return Ok(None);
        }
        let known = {
            let mut heads = heads.lock().unwrap_or_else(PoisonError::into_inner);
            if !heads.is_listed() {
                self.fill(&mut heads)?;
            }
            heads.get(name)
        };
        match known {
            Known::Unknown => Ok(None),
            // Versions are linked one above the other from 1, and removed lowest first only
            // once a higher one exists: with no version 1, the record has no version at all
            // unless it was written since the listing, which this store would know.
            Known::Absent => {
                Ok((!self.storage.exists(&version_file(name, 1))?).then_some(Current::Absent))
            }
            Known::At(version) => {
                let Some(next) = version.checked_add(1) else {
                    return Ok(None);
                };
                let found = Found {
                    version: Some(version),
                    file: version_file(name, version),
                };
                // The next name first, then `version`'s file (as `is_current`): while the
                // second exists, no version above the next exists without the next's file, so
                // a file read after the next name was absent was current when it was.
                if self.storage.exists(&version_file(name, next))? {
                    return Ok(None);
                }
                self.read_file(name, &found, true)
            }
        }
    }

    /// Fills `heads` from one listing of the directory.
    fn fill(&self, heads: &mut Heads) -> Result<()> {
        let listed = self.listing()?;
        Self::fill_from(heads, &listed);
        *self
            .filled_from
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(listed);
        Ok(())
    }

    /// Fills `heads` from `listed`, a listing of the directory (of the records in scope).
    fn fill_from(heads: &mut Heads, listed: &[String]) {
        // Each record's versioned files, grouped by sorting (no table of their own, and each
        // name copied only into the heads), and the records with a file of an earlier release.
        let mut versioned = Vec::with_capacity(listed.len());
        let mut legacy = Vec::new();
        for file in listed {
            match parse_record_file(file) {
                Some((name, Some(version))) => versioned.push((name, version)),
                Some((name, None)) => legacy.push(name.to_string()),
                None => {}
            }
        }
        versioned.sort_unstable();
        let records = versioned.chunk_by(|a, b| a.0 == b.0);
        let mut highest = Vec::with_capacity(versioned.len());
        let mut exact = Vec::with_capacity(versioned.len());
        for files in records {
            let (name, top) = files[files.len() - 1];
            highest.push((name, top));
            exact.push((name, files[..files.len() - 1].iter().map(|f| f.1).collect()));
        }
        heads.fill(highest, legacy, exact);
    }

    /// Records what this owned store now knows of `name` (nothing for a store not owned).
    fn learn(&self, name: &str, known: Known) {
        if let Some(heads) = &self.heads {
            heads
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .set(name, known);
        }
    }

    /// Records that this owned store left `name` at version `version` with exactly the names
    /// `below` beside it ([`Heads::set_exact`]).
    fn learn_exact(&self, name: &str, version: u64, below: Vec<u64>) {
        if let Some(heads) = &self.heads {
            heads
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .set_exact(name, version, below);
        }
    }

    /// Remembers what the file of `version` of `name`, which this store just linked, holds
    /// (nothing for a store not owned).
    fn learn_ident(&self, name: &str, version: u64, ident: Ident) {
        if let Some(heads) = &self.heads {
            heads
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .set_ident(name, version, ident, true);
        }
    }

    /// Whether the file named for `version` of `name` is there and, when this owned store
    /// remembers what that file held ([`Heads::ident`]), still holds it: another file under
    /// the name is a stray another writer linked once the name was freed, which the record's
    /// version is not.
    ///
    /// With `hold` (an ownership check, which runs again and again on the same version), the
    /// file found holding what was remembered is kept ([`Heads::hold`]), and the next check
    /// first asks the storage whether the name still names that very file
    /// ([`Storage::names_file`]: one lookup, no read, on a file system). A file opened before
    /// one of this store's own writes is not kept: the write may have made the record anew
    /// under the same name (a record created again starts at version 1 again).
    fn holds_version(&self, name: &str, version: u64, hold: bool) -> Result<bool> {
        let file = version_file(name, version);
        let (known, kept, writes) = match &self.heads {
            None => (None, None, 0),
            Some(heads) => {
                let heads = heads.lock().unwrap_or_else(PoisonError::into_inner);
                let known = heads.ident(name, version);
                let kept = known.and_then(|ident| heads.held(name, version, ident));
                (known, kept, heads.own_writes())
            }
        };
        let Some(known) = known else {
            return self.storage.exists(&file);
        };
        if let Some(kept) = kept
            && let Some(named) = self.storage.names_file(&file, kept.as_ref())?
        {
            return Ok(named);
        }
        let opened = match self.storage.open(&file) {
            Ok(opened) => opened,
            Err(e) if e.is_not_found() => return Ok(false),
            Err(e) => return Err(e),
        };
        let holds = match opened.read_tail(Ident::TRAILER_BYTES, MAX_RECORD_BYTES as u64) {
            Ok(Some((len, end))) => Ident::of_end(len, &end) == known,
            Ok(None) => false,
            Err(e) if e.is_not_found() => false,
            Err(e) => return Err(e),
        };
        if holds
            && hold
            && let Some(heads) = &self.heads
        {
            heads
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .hold(name, version, known, opened, writes);
        }
        Ok(holds)
    }

    /// The versions below `version` that have a file, when this owned store knows `name` to
    /// be at `version` with exactly those names beside it, so a claim of it can check its link
    /// by name lookups ([`MetaStore::claim`]).
    fn known_below(&self, name: &str, version: u64) -> Option<Vec<u64>> {
        if !self.in_scope(name) || !self.after_fence.load(Ordering::SeqCst) {
            return None;
        }
        let heads = self.heads.as_ref()?;
        let heads = heads.lock().unwrap_or_else(PoisonError::into_inner);
        heads.names_below(name, version).map(<[u64]>::to_vec)
    }

    /// The current state of `name` from a listing of its files.
    fn current_listed(&self, name: &str) -> Result<Current> {
        if let Some(once) = &self.listed_once {
            let mut once = once.lock().unwrap_or_else(PoisonError::into_inner);
            if once.is_none() {
                let listed = self.listing()?;
                *once = Some(
                    files_by_record(&listed)
                        .into_iter()
                        .map(|(record, files)| (record.to_owned(), files))
                        .collect(),
                );
            }
            let files = once.as_ref().and_then(|by| by.get(name));
            if let Some(current) = self.current_in(name, files.map_or(&[][..], Vec::as_slice))? {
                return Ok(current);
            }
        }
        for _ in 0..READ_ATTEMPTS {
            if let Some(current) = self.current_in(name, &self.files_of(name)?)? {
                return Ok(current);
            }
        }
        Err(Error::io(
            "read metadata record",
            format!("{}/{name}", self.storage.location()),
            std::io::Error::other("its versions kept changing while it was read"),
        ))
    }

    /// Removes every leftover temporary file that can no longer become the current record,
    /// once per store, before its first write.
    fn sweep(&self, writes: &mut Writes) -> Result<()> {
        if writes.swept {
            return Ok(());
        }
        // One listing serves the whole sweep: it removes temporary files, and record files
        // only below a version the same listing shows. The listing that filled what this
        // store knows serves, when it is the first one since this store was made: nothing
        // this store wrote can be missing from it, and what a former owner writes after it
        // could as well come after a listing of its own.
        let filled_from = self
            .filled_from
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let listed = match filled_from {
            Some(listed) => listed,
            None => self.listing()?,
        };
        self.remove_stale_temps(&listed)?;
        // One listing: the highest version of every record.
        let highest = highest_versions(&listed);
        if self.heads.is_some() {
            // An owned store's writes remove only the version they replace (and the versions
            // this store's claims linked from): versions below the highest left by a power cut,
            // an earlier claim or a former owner go here, lowest first, once the directory's
            // names (the highest versions among them) are durable.
            let below: Vec<&String> = listed
                .iter()
                .filter(|file| {
                    parse_record_file(file).is_some_and(|(name, version)| {
                        version.is_some_and(|v| highest.get(name).is_some_and(|&top| v < top))
                    })
                })
                .collect();
            if !below.is_empty() {
                self.storage.sync_dir()?;
            }
            for file in below {
                match self.storage.remove(file) {
                    Ok(()) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
            }
        }
        self.finish_cut_short_deletes(&listed)?;
        writes.swept = true;
        // A listing that filled what this store knows during the sweep is of no more use.
        self.filled_from
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        Ok(())
    }

    /// Removes the temporary files among `listed` that can no longer be linked.
    fn remove_stale_temps(&self, listed: &[String]) -> Result<()> {
        for file in self.stale_temps(listed)? {
            match self.storage.remove(&file) {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Removes the files among `listed` of each record whose delete was cut short, the older
    /// versions first and the tombstone last (until it goes, a read finds it first). Only the
    /// names the listing showed, those judged leftovers: a file of the record written since
    /// (by another owner) is not this sweep's to remove, and one left behind is a stray below
    /// nothing, or a record the next open judges again.
    fn finish_cut_short_deletes(&self, listed: &[String]) -> Result<()> {
        let mut by_record = files_by_record(listed);
        for (name, tombstone) in self.cut_short_deletes(&highest_versions(listed))? {
            let files = by_record.remove(name.as_str()).unwrap_or_default();
            self.remove_listed_below(files, tombstone, true)?;
            self.learn(&name, Known::Absent);
        }
        Ok(())
    }

    /// The temporary files among `listed` that can no longer be linked as the current record:
    /// files of earlier releases, and writes of a version the record has reached.
    fn stale_temps(&self, listed: &[String]) -> Result<Vec<String>> {
        let mut stale = Vec::new();
        for file in listed.iter().filter(|f| f.ends_with(TEMP_SUFFIX)) {
            let linkable = match parse_temp_file(file) {
                None => false,
                Some((name, version)) => version > self.current(name)?.version(),
            };
            if !linkable {
                stale.push(file.clone());
            }
        }
        Ok(stale)
    }

    /// The records among `highest` (each record's highest version) whose delete was cut short
    /// after its tombstone was linked, each with its tombstone's version: a record no writer
    /// names again (cursor ids are not reused), whose files a sweep removes.
    fn cut_short_deletes(&self, highest: &BTreeMap<String, u64>) -> Result<Vec<(String, u64)>> {
        let mut deleted = Vec::new();
        // A tombstone is linked over a version of the record, so it is version 2 or higher:
        // a record at version 1 costs no lookup (most cursor records of a store's topic).
        for (name, &version) in highest.iter().filter(|(_, v)| **v >= 2) {
            let empty = match self.storage.open(&version_file(name, version)) {
                Ok(file) => match file.size() {
                    Ok(size) => size == 0,
                    Err(e) if e.is_not_found() => false,
                    Err(e) => return Err(e),
                },
                Err(e) if e.is_not_found() => false,
                Err(e) => return Err(e),
            };
            if empty && let Current::Deleted(tombstone) = self.current(name)? {
                deleted.push((name.clone(), tombstone));
            }
        }
        Ok(deleted)
    }

    /// The files a write or a deletion cut short left that no read takes and the sweep before
    /// this directory's owner's next metadata write removes: temporary files that can no
    /// longer be linked, and every file of a record whose delete was cut short after its
    /// tombstone. Reads only (what `verify` reports as leftovers, not damage).
    ///
    /// # Errors
    /// [`Error::Io`] when the directory or a record cannot be read.
    pub fn leftovers(&self) -> Result<Vec<String>> {
        let listed = self.listing()?;
        let mut files = self.stale_temps(&listed)?;
        let mut by_record = files_by_record(&listed);
        for (name, _) in self.cut_short_deletes(&highest_versions(&listed))? {
            let found = by_record.remove(name.as_str()).unwrap_or_default();
            files.extend(found.into_iter().map(|f| f.file));
        }
        Ok(files)
    }

    /// A temporary file name for a write of `version` of `name`, unique to this write.
    pub fn temp_file(&self, writes: &mut Writes, name: &str, version: u64) -> String {
        writes.count += 1;
        let nonce = self.nonces.hash_one(writes.count);
        format!("{name}.{version:0VERSION_DIGITS$}.{nonce:016x}{TEMP_SUFFIX}")
    }

    fn fenced(&self, name: &str, expected: Option<u64>, found: Option<u64>) -> Error {
        let describe = |v: Option<u64>| v.map_or_else(|| "none".to_string(), |v| v.to_string());
        Error::Fenced {
            what: format!(
                "{}/{name}{RECORD_SUFFIX}: expected version {} but found {}",
                self.storage.location(),
                describe(expected),
                describe(found)
            ),
        }
    }

    /// Refuses with [`Error::Fenced`] unless the record is at `expected` (`None`: absent or
    /// deleted); returns the highest version present (a tombstone's included), 0 if none, and
    /// whether it was found by name lookups (see [`FileMetaStore::current_found`]).
    fn check(&self, name: &str, expected: Option<u64>) -> Result<(u64, bool)> {
        let (current, looked_up) = self.current_found(name)?;
        let highest = current.version();
        let found = match current {
            Current::Record(v, _) => Some(v),
            Current::Deleted(_) | Current::Absent => None,
        };
        if found == expected {
            Ok((highest, looked_up))
        } else {
            Err(self.fenced(name, expected, found))
        }
    }

    /// Links `bytes` (already framed; empty for a tombstone) as version `version` of `name`:
    /// the compare-and-set. [`Error::Fenced`] when another writer has that version or a
    /// higher one. `replaced`: the version whose file the check before found by name (an owned
    /// store's lookups), which must still be there once `version` is linked.
    pub fn link_version(
        &self,
        writes: &mut Writes,
        name: &str,
        (expected, replaced): (Option<u64>, Option<u64>),
        version: u64,
        bytes: &[u8],
    ) -> Result<()> {
        // Power-cut analysis of each step: docs/format.md, "Metadata records".
        let linked = if self.storage.creates_whole() {
            // The version appears whole and durable in one step, or not at all, and exactly
            // one of two writers creates it: what the temporary file and its link give.
            self.storage
                .create_whole(&version_file(name, version), bytes)
        } else {
            self.link_through_temp(writes, name, version, bytes)
        };
        match linked {
            Ok(()) => {}
            // Our temporary file is gone while the record is still there below this version:
            // no sweep removed it (a sweep removes the temporary files of a record only once
            // the record reached their version, or once the record is gone: a deletion, an
            // unpinned chunk record), the directory lost its name (a failed directory sync may
            // take back the names it covered). This write failed; no other writer was seen.
            Err(e)
                if e.is_not_found()
                    && matches!(self.current_listed(name)?, Current::Record(v, _) if v < version) =>
            {
                return Err(Error::io(
                    "link metadata record",
                    format!(
                        "{}/{}",
                        self.storage.location(),
                        version_file(name, version)
                    ),
                    std::io::Error::other(
                        "its temporary file vanished before its link, and no other writer \
                         reached its version: the directory lost a name it had not made durable",
                    ),
                ));
            }
            // Another writer linked this version first, or swept our temporary file because
            // the record had passed this version: either way, we lost.
            Err(e) if is_already_exists(&e) || e.is_not_found() => {
                return Err(self.fenced(name, expected, Some(version)));
            }
            Err(e) => return Err(e),
        }
        self.learn_ident(name, version, Ident::of(bytes));
        self.storage.sync_dir()?;
        if self.heads.is_some() && self.after_fence.load(Ordering::SeqCst) {
            // Owned: only the next version's name can show another writer (module docs).
            let next = version.checked_add(1).map(|next| version_file(name, next));
            if let Some(next) = next
                && self.storage.exists(&next)?
            {
                return Err(self.fenced(name, expected, version.checked_add(1)));
            }
            // The version replaced is removed only after a higher one was linked, and the
            // writer of `version` removes it only after its link: gone now, it was replaced by
            // another writer, whose `version` was removed in turn after a higher one (which
            // may itself be gone, so the next name shows nothing). Ours then went into a freed
            // slot below the record, a stray no read takes, and the write was refused.
            if let Some(replaced) = replaced
                && !self.holds_version(name, replaced, false)?
            {
                return Err(self.fenced(name, expected, None));
            }
            return Ok(());
        }
        self.none_above(name, expected, version).map(drop)
    }

    /// Writes `bytes` as version `version` of `name` through a temporary file, synced, then
    /// linked to the version's name (the link fails when the name exists).
    fn link_through_temp(
        &self,
        writes: &mut Writes,
        name: &str,
        version: u64,
        bytes: &[u8],
    ) -> Result<()> {
        let temp = self.temp_file(writes, name, version);
        let linked = (|| {
            let file = self.storage.create(&temp)?;
            if !bytes.is_empty() {
                file.write_all_at(bytes, 0)?;
            }
            file.sync_data()?;
            drop(file);
            self.storage.link(&temp, &version_file(name, version))
        })();
        // A failed sync never latches the record: the temporary file whose bytes it lost is
        // never linked (removed here, or by a later sweep), and the record's next write goes
        // through a new file whose own sync it checks and holds the whole record, built on
        // nothing this one wrote.
        // Best effort: a temporary file left behind is never read, and a later sweep removes
        // it. The write's own outcome is the one to report.
        if self.storage.exists(&temp).unwrap_or(false) {
            let _ = self.storage.remove(&temp);
        }
        linked
    }

    /// After version `version` of `name` was linked: [`Error::Fenced`] when a higher version
    /// exists, which means ours went into a slot whose record had moved on (its older files
    /// removed) and the record is that higher version, not ours; otherwise the record's files.
    /// With the record's files, the listing of the owned store's scope they came from when it
    /// was taken ([`FileMetaStore::files_after_link`]).
    fn none_above(
        &self,
        name: &str,
        expected: Option<u64>,
        version: u64,
    ) -> Result<(Vec<Found>, Option<Vec<String>>)> {
        let (files, listed) = self.files_after_link(name, expected.is_some())?;
        if let Some(higher) = files
            .iter()
            .find_map(|f| f.version.filter(|&v| v > version))
        {
            return Err(self.fenced(name, expected, Some(higher)));
        }
        // This link over a version took: it fenced every writer holding the version it
        // replaced, and what the store knows comes from a listing taken after it.
        if let (Some(listed), Some(heads)) = (&listed, &self.heads) {
            let mut heads = heads.lock().unwrap_or_else(PoisonError::into_inner);
            Self::fill_from(&mut heads, listed);
            self.after_fence.store(true, Ordering::SeqCst);
        }
        Ok((files, listed))
    }

    /// Every file of record `name`, listed after this store linked a version of it over
    /// another (`replaced`) or as its first (a creation); with the listing of every record in
    /// the owned store's scope it came from, when it is the first link over a version of an
    /// owned store not yet past its fence ([`FileMetaStore`]'s `after_fence`). An owned
    /// store's first link over a version that takes is the claim or write of the record that
    /// fences former owners (a topic's record, a store's catalog), or comes after it (a
    /// creation, such as a chunk record's, may come before; a link that is refused fences
    /// nothing), so that listing shows every write a former owner made before its fence, and
    /// each former owner has at most one write in flight after it: [`FileMetaStore::none_above`]
    /// learns the directory from it once it sees the link took.
    fn files_after_link(
        &self,
        name: &str,
        replaced: bool,
    ) -> Result<(Vec<Found>, Option<Vec<String>>)> {
        if self.heads.is_none()
            || !replaced
            || self.after_fence.load(Ordering::SeqCst)
            || !self.in_scope(name)
        {
            return Ok((self.files_of(name)?, None));
        }
        let listed = self.listing()?;
        let files = files_of_record(&listed, name);
        Ok((files, Some(listed)))
    }

    /// Removes every file of `name` below `version` (and, with `inclusive`, at it). Other
    /// writers may remove the same files: a file already gone is not an error.
    fn remove_below(&self, name: &str, version: u64, inclusive: bool) -> Result<()> {
        self.remove_listed_below(self.files_of(name)?, version, inclusive)
            .map(drop)
    }

    /// [`FileMetaStore::remove_below`] over `files`, a listing of the record's files (as
    /// [`FileMetaStore::files_of`] returns it) taken since the last write of the record.
    /// Returns the names removed (or found gone).
    fn remove_listed_below(
        &self,
        mut files: Vec<Found>,
        version: u64,
        inclusive: bool,
    ) -> Result<Vec<String>> {
        files.reverse();
        let mut removed = Vec::new();
        for found in files {
            let below = found
                .version
                .is_none_or(|v| v < version || (inclusive && v == version));
            if below {
                match self.storage.remove(&found.file) {
                    Ok(()) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
                removed.push(found.file);
            }
        }
        Ok(removed)
    }
}

impl MetaStore for FileMetaStore {
    fn get(&self, name: &str) -> Result<Option<(u64, Vec<u8>)>> {
        Ok(self.current(name)?.into_record())
    }

    fn put(&self, name: &str, expected: Option<u64>, bytes: &[u8]) -> Result<u64> {
        validate_record_name(name)?;
        let size = bytes.len().saturating_add(STORED_OVERHEAD);
        if size > MAX_RECORD_BYTES {
            return Err(Error::EntryTooLarge {
                size: size as u64,
                max: MAX_RECORD_BYTES as u64,
            });
        }
        let mut writes = self.writes.lock().unwrap_or_else(PoisonError::into_inner);
        writes.fenced_listing = None;
        self.sweep(&mut writes)?;
        let (highest, looked_up) = self.check(name, expected)?;
        let version = highest.checked_add(1).ok_or_else(|| Error::LimitExceeded {
            reason: format!("metadata record `{name}` has run out of versions"),
        })?;
        // Until this write is settled, only a listing tells where the record is.
        self.learn(name, Known::Unknown);
        let replaced = (looked_up && highest > 0).then_some(highest);
        self.link_version(
            &mut writes,
            name,
            (expected, replaced),
            version,
            &encode_stored(version, bytes),
        )?;
        // Removing older versions needs no directory sync: after a power cut that brings one
        // back, the higher version still wins. An owned store that found the record by name
        // removes the version it replaced and every one its claims of the record since its
        // last write of it linked from (its sweep removed any other), so the record keeps one
        // version in the live directory, and a former owner holding any of those versions
        // finds it gone and is fenced (`link_version`, `check`) even once the names above it
        // are freed too.
        let claimed_from = writes.claimed_from.remove(name);
        if looked_up {
            let lowest = claimed_from.unwrap_or(highest).min(highest).max(1);
            for version in (lowest..=highest).filter(|_| highest > 0) {
                match self.storage.remove(&version_file(name, version)) {
                    Ok(()) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
            }
        } else {
            self.remove_below(name, version, false)?;
        }
        // Every other name of the record is gone: the sweep before this store's first write
        // removed the versions below each record's highest, and the removals above took the
        // rest (a former owner's stray below the record aside, which no read takes).
        self.learn_exact(name, version, Vec::new());
        Ok(version)
    }

    fn delete(&self, name: &str, expected: u64) -> Result<()> {
        validate_record_name(name)?;
        let mut writes = self.writes.lock().unwrap_or_else(PoisonError::into_inner);
        writes.fenced_listing = None;
        self.sweep(&mut writes)?;
        let (highest, looked_up) = self.check(name, Some(expected))?;
        let tombstone = expected
            .checked_add(1)
            .ok_or_else(|| Error::LimitExceeded {
                reason: format!("metadata record `{name}` has run out of versions"),
            })?;
        self.learn(name, Known::Unknown);
        let replaced = (looked_up && highest > 0).then_some(highest);
        self.link_version(
            &mut writes,
            name,
            (Some(expected), replaced),
            tombstone,
            &[],
        )?;
        // The older versions first, the tombstone last: until it goes, `get` finds it first.
        // Every file of the record goes, so this lists them (a lower version left behind
        // would bring the record back).
        self.remove_below(name, tombstone, false)?;
        self.remove_below(name, tombstone, true)?;
        self.storage.sync_dir()?;
        writes.claimed_from.remove(name);
        self.learn(name, Known::Absent);
        Ok(())
    }

    /// One listing of the storage serves every record: each is read from the files it
    /// showed, and listed again only if one of them was removed meanwhile.
    fn list(&self) -> Result<Vec<String>> {
        let listed = self.storage.list()?;
        let by_record = files_by_record(&listed);
        let mut records = Vec::with_capacity(by_record.len());
        for (name, found) in by_record {
            let current = self.current_of_listed(name, &found)?;
            if matches!(current, Current::Record(..)) {
                records.push(name.to_string());
            }
        }
        Ok(records)
    }

    /// A hard link of `version`'s file under the name of `version + 1` (the `link(2)` that makes
    /// a `put` atomic, without the write before it): no byte is written, so nothing needs a sync
    /// for the claim to be safe after a power cut (the new name, if it survives, names the
    /// durable bytes of `version`); it fences writers holding `version` as soon as it returns.
    /// Once a record has more than [`CLAIM_NAMES`] names, those below `version` are removed
    /// (not synced): `version` itself stays, so whatever part of the claim a power cut keeps,
    /// the record is whole, and the names stay bounded in the live directory and, from the
    /// next directory sync on, in the durable one.
    fn claim(&self, name: &str, version: u64) -> Result<u64> {
        validate_record_name(name)?;
        let next = version.checked_add(1).ok_or_else(|| Error::LimitExceeded {
            reason: format!("metadata record `{name}` has run out of versions"),
        })?;
        let mut writes = self.writes.lock().unwrap_or_else(PoisonError::into_inner);
        writes.fenced_listing = None;
        let below = self.known_below(name, version);
        self.learn(name, Known::Unknown);
        match self
            .storage
            .link(&version_file(name, version), &version_file(name, next))
        {
            Ok(()) => {}
            // Another writer linked the next version first.
            Err(e) if is_already_exists(&e) => {
                return Err(self.fenced(name, Some(version), Some(next)));
            }
            // No file of `version`: another writer moved past it (and removed it), or the
            // record is a legacy `{name}.meta`, which a real write migrates.
            Err(e) if e.is_not_found() => {
                drop(writes);
                return match self.current(name)? {
                    Current::Record(v, bytes) if v == version => {
                        self.put(name, Some(version), &bytes)
                    }
                    other => Err(self.fenced(name, Some(version), Some(other.version()))),
                };
            }
            Err(e) => return Err(e),
        }
        if let Some(below) = &below {
            // Owned, and the record's names known: two name lookups show what a listing
            // would, as after a `put`'s link (`link_version`): the name above ours (another
            // writer built on it), then the name we linked from (gone: another writer
            // replaced it and its own, so ours went into a freed name below the record).
            if self
                .storage
                .exists(&version_file(name, next.saturating_add(1)))?
            {
                return Err(self.fenced(name, Some(version), next.checked_add(1)));
            }
            if !self.holds_version(name, version, false)? {
                return Err(self.fenced(name, Some(version), None));
            }
            // The names below `version`, lowest first, as the listing's removal: the record
            // keeps `version` and `next` ([`CLAIM_NAMES`] past the claimed one).
            for &older in below {
                match self.storage.remove(&version_file(name, older)) {
                    Ok(()) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
            }
        } else {
            // The listing that showed no version above the claim's serves the removal: it
            // was taken after the link, under this store's lock on its writes, and a file
            // another writer links meanwhile is either above `next` (the next write is
            // refused) or a stray below the record, which no read takes and a later removal
            // finds.
            let (files, listed) = self.none_above(name, Some(version), next)?;
            let removed = if files.len() > CLAIM_NAMES {
                self.remove_listed_below(files, version, false)?
            } else {
                Vec::new()
            };
            // The whole directory's listing (not a scope's), taken after the link that fenced
            // every former owner, with what this claim removed taken out: what a listing now
            // would show, until this store's next change.
            if self.scope.is_none() {
                writes.fenced_listing = listed.map(|mut listed| {
                    listed.retain(|f| !removed.contains(f));
                    listed
                });
            }
        }
        match below {
            Some(_) => self.learn_exact(name, next, vec![version]),
            None => self.learn(name, Known::At(next)),
        }
        // The claimed name is a second name of the file this store read for `version`.
        if let Some(heads) = &self.heads {
            let mut heads = heads.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(ident) = heads.ident(name, version) {
                heads.set_ident(name, next, ident, true);
            }
        }
        // The first claim since this store's last write of the record: its later claims linked
        // from names above this one.
        writes
            .claimed_from
            .entry(name.to_owned())
            .or_insert(version);
        drop(writes);
        Ok(next)
    }

    /// Two name lookups: the next version's file does not exist, then the file of `version`
    /// still does. A writer links version `v + 1` only over `v`, and removes `v` only after
    /// linking `v + 1`, lowest versions first; so while `version`'s file exists, no version
    /// above `version + 1` exists without `version + 1`'s file (a stray lower version a stale
    /// writer linked does not matter). The lookups run in that order: `version`'s file,
    /// existing at the second, existed all along, so at the first the record was at `version`,
    /// and a `true` means no other writer had linked the next version when the first lookup
    /// ran. The other order is wrong: between its lookups another owner's claim and write may
    /// link `version + 1` and `version + 2` and remove `version` and `version + 1`, and each
    /// lookup alone sees nothing move. A stray another writer linked into `version`'s very name
    /// once it was freed would pass the second lookup: when this store remembers what
    /// `version`'s file held, the second step reads the file and compares (`holds_version`).
    fn is_current(&self, name: &str, version: u64) -> Result<bool> {
        validate_record_name(name)?;
        let Some(next) = version.checked_add(1) else {
            return Ok(self.get(name)?.is_some_and(|(v, _)| v == version));
        };
        Ok(!self.storage.exists(&version_file(name, next))?
            && self.holds_version(name, version, true)?)
    }

    /// The leftovers the sweep before the first write removes, but not the versions below a
    /// record's highest (a claim's names, removed by the record's next write): a topic's open
    /// sweeps them after its claim even when it writes nothing. Under this store's lock on its
    /// writes, as the sweep: a temporary file is removed only once its version can no longer
    /// be linked as the record (another writer's link of it fails, or puts a stray below the
    /// record that no read takes and that writer is fenced), and a deleted record's files only
    /// once its tombstone is the highest version, a record no table names and no writer
    /// writes again (module docs).
    fn sweep_leftovers(&self, listed: &[String]) -> Result<()> {
        let mut writes = self.writes.lock().unwrap_or_else(PoisonError::into_inner);
        writes.fenced_listing = None;
        self.remove_stale_temps(listed)?;
        self.finish_cut_short_deletes(listed)
    }

    /// The listing the claim that fenced former owners kept (`Writes::fenced_listing`), unless
    /// a write, claim, deletion, discard or sweep of this store came after it: each clears it
    /// first, under the same lock. Reads, which change no name, leave it.
    fn take_fenced_listing(&self) -> Option<Vec<String>> {
        self.writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .fenced_listing
            .take()
    }

    /// Removes the file of `version` of `name` by its name: no listing, no tombstone, no
    /// sync. A record discarded at its first version is known absent from then on (a read
    /// looks up that version's name, which a removal a power cut took back still shows); of
    /// any other, only a listing tells.
    fn discard(&self, name: &str, version: u64) -> Result<()> {
        validate_record_name(name)?;
        let mut writes = self.writes.lock().unwrap_or_else(PoisonError::into_inner);
        writes.fenced_listing = None;
        self.learn(name, Known::Unknown);
        match self.storage.remove(&version_file(name, version)) {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
        if version == 1 {
            self.learn(name, Known::Absent);
        }
        Ok(())
    }
}

/// Whether record `name` is `record` or one named after it (`{record}-...`).
fn in_family(record: &str, name: &str) -> bool {
    name.strip_prefix(record)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
}

/// The highest version of every record among the storage names `listed`.
fn highest_versions(listed: &[String]) -> BTreeMap<String, u64> {
    let mut highest = BTreeMap::<String, u64>::new();
    for file in listed {
        if let Some((name, Some(version))) = parse_record_file(file) {
            let top = highest.entry(name.to_string()).or_insert(version);
            *top = (*top).max(version);
        }
    }
    highest
}

/// The files of every record among the storage names `listed`, by record name, each record's
/// highest version first (the legacy `{name}.meta` last). One pass over the listing, whatever
/// the number of records: a pass per record made a listing of n records cost O(n^2) (a topic
/// opened alone lists its cursors' records).
fn files_by_record(listed: &[String]) -> BTreeMap<&str, Vec<Found>> {
    let mut by_record: BTreeMap<&str, Vec<Found>> = BTreeMap::new();
    for file in listed {
        if let Some((record, version)) = parse_record_file(file) {
            by_record.entry(record).or_default().push(Found {
                version,
                file: file.clone(),
            });
        }
    }
    for found in by_record.values_mut() {
        highest_first(found);
    }
    by_record
}

/// The files of record `name` among the storage names `listed`, ordered as
/// [`files_by_record`] orders each record's; the other records' names are not copied.
fn files_of_record(listed: &[String], name: &str) -> Vec<Found> {
    let mut found: Vec<Found> = listed
        .iter()
        .filter_map(|file| match parse_record_file(file) {
            Some((record, version)) if record == name => Some(Found {
                version,
                file: file.clone(),
            }),
            _ => None,
        })
        .collect();
    highest_first(&mut found);
    found
}

/// Orders one record's files highest version first, the legacy file (no version) last.
fn highest_first(found: &mut [Found]) {
    found.sort_by_key(|f| std::cmp::Reverse(f.version));
}

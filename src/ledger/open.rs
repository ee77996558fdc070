//! Opening a topic directory: reconciling the topic record with the ledger files on disk.
//!
//! Owns: the rules that turn whatever a crash (or a former owner still running) left behind
//! into one consistent topic.
//!
//! 0. The claim comes first: the topic record is claimed before any ledger file is read, and
//!    every cursor record the cursor table lists before ledger references are collected; a
//!    claim is a link of the record's current version under the next version's name
//!    ([`MetaStore::claim`], nothing written or synced), or a write by compare-and-set when the
//!    record needs a change (a new topic, an identity, a block of ledger ids above files the
//!    record does not account for). From then on a former owner's record writes are
//!    refused, so what it wrote before is read below and what it writes after is never used.
//!    A topic of a store is claimed with a link ([`MetaStore::claim`]: the record's bytes
//!    under the next version's name, nothing written or synced): the store's claim (its
//!    catalog's claim by link when the store opened) fences every former owner of
//!    every topic at once, each of the topic's record writes is bracketed by the store's
//!    ownership check (`meta::CheckedMeta`), and the topic's claim settles a former owner's
//!    record write still in flight. Such an open cuts no torn tail and deletes nothing before
//!    the store's owner check that follows its listing, and keeps the repairs of rule 4 in
//!    memory until the topic's next record write: reopening a topic of a store syncs nothing.
//! 1. A directory without a topic record gets an empty one (with a new topic id), unless it
//!    already holds ledger files (then it is not a topic directory: [`Error::NotAckstore`]).
//!    The record is written before any ledger is created, so a crash cannot leave ledgers
//!    without it.
//! 2. Every data ledger the record lists must have its file. A data ledger leaves the record
//!    (trim) before its file is deleted, so a listed ledger without a file is lost data:
//!    [`Error::MissingLedger`]. A listed ledger's file holding less than a header (emptied, or
//!    cut after its create was synced) is [`Error::Corrupted`]; it is never deleted.
//! 3. A ledger file that neither the topic record nor any cursor record references is an
//!    orphan and is deleted: a data ledger created just before a crash (it is recorded before
//!    its first entry, so it holds none), a trimmed ledger whose deletion was cut short, or a
//!    cursor ledger that a crash kept from being recorded or from being deleted after a switch.
//!    Cursor records of ids missing from the topic record's cursor table (a cursor creation or
//!    deletion cut short) are deleted the same way. On a store, where a creation lists the
//!    cursor before writing its record and a deletion removes the record first, such a record
//!    of an id below the table's next one is a cursor the table lost: [`Error::Corrupted`]
//!    naming the topic record; and a cursor whose state the journal holds but the table does
//!    not list, its record gone, is a deletion cut short whose state is forgotten. On a topic
//!    of its own, where a creation writes the record before listing the cursor and a deletion
//!    drops the cursor from the table first, a cursor the table lists whose record is gone and
//!    whose state the journal does not hold is damage: [`Error::Corrupted`] naming the cursor
//!    record ([`lost_cursor_record`]), never a cursor started again. Nothing is
//!    deleted before the owner is checked again after the last listing (the store's check, or
//!    for a topic of its own its record still at the claim's version): a former owner's open
//!    that runs on past a newer owner's claim would otherwise delete the ledger or cursor
//!    record that newer owner has just created and recorded.
//! 4. A listed ledger recorded with no entries (the one the previous owner was appending to,
//!    or one sealed just before a crash) is recorded with the entries the scan found, its
//!    summary taken from its first and last frame headers, or, if empty, dropped from the
//!    record and deleted. Nothing is written into it: a former owner may still be appending.
//!    A file holding fewer entries than the record counts is [`Error::LedgerMismatch`] (or the
//!    damage that cut it short); entries beyond the count, and damage or a torn tail past
//!    them, were written by a fenced owner and are ignored (`EntryLog::check_holds`, the rule
//!    a sealed ledger's first use follows too; `verify` warns of such damage).
//! 5. Ledger ids come from blocks reserved in the topic record by compare-and-set (the first
//!    with a claim that writes the record, above every id the record or the disk knows; for a
//!    topic of a store, and for a topic of its own claimed by a link, on first need, above the
//!    same), so no id (and no position) is ever reused, and no two owners
//!    ever create or delete a file of the same id; data ledger ids start at 1.
//! 6. On a store no file has an id at or above the topic record's next one (rule 5 records a
//!    block before any file of it is created, and no record write lowers the next id), and
//!    the journal holds no state of a cursor of an id at or above the record's next cursor id
//!    (a cursor's id is given out by a record write that returns before the cursor can flush);
//!    and on every topic no file above every ledger the record lists holds a data entry (a
//!    data ledger is recorded before its first entry, and a trim keeps the last one holding
//!    entries; a cursor ledger of an earlier release is left to rule 3, and so is a file below
//!    the record's current block of ids, where a record that dropped a ledger by rule 4 puts
//!    that ledger, which a former owner may still fill): each shows the record
//!    read is older than the newest written (the newest deleted, or
//!    an older copy put back), and the topic is refused ([`Error::Corrupted`] naming the topic
//!    record) rather than opened back in time with the newer record's ledgers deleted and its
//!    newer cursors forgotten.
//! 7. A topic directory knows its host: a store's topic record names its store (its id,
//!    written by the store's first claim of the record), so a topic opened on its own refuses
//!    it ([`Error::OwnedByStore`]) before taking the lock, wherever the directory is found;
//!    and a store refuses, as damage, a record in one of its topics' places that lists a
//!    cursor journal of its own (a topic opened alone) or names another store.
//!
//! Appends after open always go to a new ledger.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::config::LedgerConfig;
use super::names::CursorNames;
use super::topic::{ID_BLOCK, TOPIC_RECORD, TopicCore, Writer, ledger_record};
use crate::cursor::journal::TopicJournal;
use crate::cursor::record_name;
use crate::error::{CorruptionKind, CorruptionPlace, Error, Result};
use crate::finder::{Layout, LedgerSpan};
use crate::format::journal::UNLISTED_CURSOR;
use crate::format::meta::{
    CursorEntry, CursorIdentity, CursorRecord, CursorTable, LedgerRecord, TopicRecord,
};
use crate::format::meta::{
    OLDER_TOPIC_RECORD, OLDER_TOPIC_RECORD_CURSORS, OLDER_TOPIC_RECORD_LEDGERS, OTHER_HOST,
    SHORTER_THAN_A_MARK_DELETE,
};
use crate::format::store::STORE_RECORD;
use crate::hashing::{HashSetExt, IdSet};
use crate::journal::JournalConfig;
use crate::log::{EntryLog, LedgerInfo, parse_ledger_file_name};
use crate::meta::{CheckedMeta, FileMetaStore, MetaStore};
use crate::position::Position;
use crate::storage::Storage;

/// Refuses `dir` when it is (or would become) a topic directory of a store: its name is a
/// store topic's directory name (`t` and digits) and its parent holds a store catalog. Such a
/// directory is written by the store alone, under the store's lock, with its cursors in the
/// store's journal: opened on its own it would be a second writer beside a running store, or
/// open with stale cursors after the store closed. (A store's own directory, which holds its
/// flat-layout topics' files, is refused by [`open`] itself: it holds the catalog.)
///
/// The check holds for every name of the directory: `dir` as given and its resolved form (every
/// symlink, `.` and `..` resolved; for a directory not created yet, its resolved parent) are
/// both checked, so a symlink to a store's topic or a path through `..` is refused the same.
///
/// # Errors
/// [`Error::OwnedByStore`] (naming `dir` as given); the errors of reading the parent's catalog
/// record.
pub(crate) fn refuse_store_topic_dir(
    dir: &std::path::Path,
    new_topic: &dyn Fn() -> bool,
) -> Result<()> {
    refuse_store_topic_name(dir, dir, new_topic)?;
    if let Some(resolved) = resolve_dir(dir) {
        refuse_store_topic_name(&resolved, dir, new_topic)?;
    }
    Ok(())
}

/// `dir` with every symlink, `.` and `..` resolved; for a directory that does not exist yet,
/// its resolved parent joined with its name. `None` when neither resolves.
fn resolve_dir(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    if let Ok(resolved) = std::fs::canonicalize(dir) {
        return Some(resolved);
    }
    let name = dir.file_name()?;
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    std::fs::canonicalize(parent).ok().map(|p| p.join(name))
}

/// Refuses `dir` (one name of the directory `asked` for) when its last component is a store
/// topic's directory name and its parent holds a store catalog, or, for a topic not made yet
/// (`new_topic` says so: no topic record; asked only then), a store's topic beside no catalog
/// (a store whose catalog is gone: a new topic there would be one its catalog, once put back,
/// does not list). A topic's reopen pays only the catalog's listing.
fn refuse_store_topic_name(
    dir: &std::path::Path,
    asked: &std::path::Path,
    new_topic: &dyn Fn() -> bool,
) -> Result<()> {
    let Some(name) = dir.file_name().and_then(|n| n.to_str()) else {
        return Ok(());
    };
    let topic_like = name
        .strip_prefix('t')
        .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()));
    if !topic_like {
        return Ok(());
    }
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    // A parent that does not exist holds no store.
    let Ok(store) = crate::storage::FileStorage::open(&parent, false) else {
        return Ok(());
    };
    // Any version of the catalog, whatever it reads as (a store never deletes its catalog).
    let store: Arc<dyn Storage> = Arc::new(store);
    if crate::store::catalog::lists_catalog(
        store.list_prefix(STORE_RECORD)?.iter().map(String::as_str),
    ) || (new_topic() && crate::store::holds_store_topic(&store)?)
    {
        return Err(Error::OwnedByStore {
            path: asked.to_path_buf(),
            store: format!("the store in `{}`", parent.display()),
        });
    }
    Ok(())
}

/// Refuses `storage` when it holds a store catalog: a store's directory (its catalog, its
/// journal, the files of its flat-layout topics, and on storage without directories every
/// topic's files) is never a topic of its own, whether the store holds its lock now or not.
/// `has_store`: the directory holds a store catalog, or a version of one (a store never
/// deletes its catalog: one that reads as deleted is damaged, and still a store's), or a
/// store's topic beside no catalog.
///
/// # Errors
/// [`Error::OwnedByStore`].
fn refuse_store_directory(storage: &Arc<dyn Storage>, has_store: bool) -> Result<()> {
    if has_store {
        let location = storage.location();
        return Err(Error::OwnedByStore {
            path: location.clone().into(),
            store: format!("the store in `{location}`"),
        });
    }
    Ok(())
}

/// Every refusal of [`open`] for a topic opened on its own in `storage` that says whose the
/// topic is: a store's directory, a directory in a store's topic's place, a topic record that
/// names a store. What `inspect` refuses and `verify` reports, as the open does.
///
/// # Errors
/// [`Error::OwnedByStore`]; the errors of reading the records.
pub(crate) fn refuse_store_topic_alone(storage: &Arc<dyn Storage>) -> Result<()> {
    // Both records from one listing: a topic's directory holds every ledger file.
    let mut records = FileMetaStore::new(storage.clone())
        .get_each(&[STORE_RECORD, TOPIC_RECORD])?
        .into_iter();
    let mut next = || records.next().unwrap_or((Ok(None), false));
    let ((store, store_listed), (topic, topic_listed)) = (next(), next());
    // A directory of no topic record (a new topic's, or one of an earlier release) beside a
    // store's topic is that store's, its catalog gone.
    let lost_store =
        || -> Result<bool> { Ok(!topic_listed && crate::store::holds_store_topic(storage)?) };
    refuse_store_directory(storage, store?.is_some() || store_listed || lost_store()?)?;
    if let Some(dir) = storage.local_dir() {
        refuse_store_topic_dir(dir, &|| !topic_listed)?;
    }
    refuse_store_record(storage, topic?)
}

/// Refuses `storage` when its topic record names a store ([`TopicRecord::store_id`]): a
/// store's topic, wherever its directory is found (a storage that does not say where it
/// lives, a copy or a move of the directory), opens only through its store. Read without the
/// lock, before anything is created; [`claim_topic`] checks the record again under it. A
/// record that cannot be read is left to the open, which reports it. `topic`: the topic
/// record, as read.
///
/// # Errors
/// [`Error::OwnedByStore`].
fn refuse_store_record(storage: &Arc<dyn Storage>, topic: Option<(u64, Vec<u8>)>) -> Result<()> {
    let record = topic.and_then(|(_, bytes)| TopicRecord::decode(&bytes).ok());
    match record {
        Some(record) if record.store_id != 0 => Err(owned_by_store(&storage.location(), &record)),
        _ => Ok(()),
    }
}

/// [`Error::OwnedByStore`] for the topic in `location` whose record names its store.
pub(crate) fn owned_by_store(location: &str, record: &TopicRecord) -> Error {
    Error::OwnedByStore {
        path: location.into(),
        store: format!(
            "the store of id {:#018x} (its topic record names it as its host)",
            record.store_id
        ),
    }
}

/// [`Error::Corrupted`] naming the topic record's host: what a store's open refuses in the
/// place of one of its topics (see [`OTHER_HOST`]).
fn other_host() -> Error {
    Error::corrupted_at(
        CorruptionPlace::Record(TOPIC_RECORD.into()),
        CorruptionKind::InvalidField(OTHER_HOST),
    )
}

/// Whether the store of id `store_id` may open the topic whose record is `record` as its own:
/// not a record that lists a cursor journal of its own (a topic opened alone: its acks are in
/// that journal, not the store's), nor one naming another store. A record naming no host (a
/// store's topic of an earlier release, or a topic alone whose journal never held a segment,
/// which holds no ack state but its cursor records') is the store's; its claim names the store.
///
/// # Errors
/// [`Error::Corrupted`] naming the topic record's host field.
pub(crate) fn check_store_host(record: &TopicRecord, store_id: u64) -> Result<()> {
    if record.journal.is_some() || (record.store_id != 0 && record.store_id != store_id) {
        return Err(other_host());
    }
    Ok(())
}

/// Opens (or creates) the topic stored in `storage`.
///
/// `journal`: for a topic of a store, the store's journal, through which its cursors persist
/// and whose ownership check is the store's. Such a topic's record is claimed with a link
/// (rule 0, nothing written), its cursor records are read only when a ledger file the topic
/// record does not list needs their references (rule 3), and its repairs wait for its next
/// record write (rule 4). A topic opened on its own (`None`) claims its record and every
/// cursor record by writing them again. With the journal come the ids of the topic's cursors
/// whose state the journal recovered when the store opened (see
/// [`unlisted_journal_cursors`]), and the store's id, which its topic record names
/// ([`TopicRecord::store_id`]; 0 for a topic opened on its own).
pub(crate) fn open(
    storage: Arc<dyn Storage>,
    config: LedgerConfig,
    journal: Option<TopicJournal>,
    (recovered, store_id): (&[u64], u64),
    own_journal: JournalConfig,
) -> Result<TopicCore> {
    if config.max_entries_per_ledger == 0 || config.max_ledger_bytes == 0 {
        return Err(Error::InvalidArgument {
            reason: "max_entries_per_ledger and max_ledger_bytes must be at least 1".into(),
        });
    }
    let location = storage.location();
    if journal.is_none() {
        refuse_store_topic_alone(&storage)?;
    }
    let guard = storage.lock()?;
    let meta: Arc<dyn MetaStore> = Arc::new(FileMetaStore::owned(storage.clone(), &guard));
    let meta: Arc<dyn MetaStore> = match &journal {
        Some(tj) => {
            let tj = tj.clone();
            Arc::new(CheckedMeta::new(
                meta,
                Arc::new(move || tj.check_store_owner()),
            ))
        }
        None => meta,
    };
    // A topic of its own claims its record and every cursor record (each by a link unless it
    // needs a change); a store's topic, its record only, by a link.
    let claim_cursors = journal.is_none();

    // The claim comes first: the topic record is claimed (linked or written by compare-and-set)
    // before any ledger file is read, so a previous owner that still runs is fenced from here
    // on (its next record write or ownership check fails), and whatever it synced before the
    // claim is read below.
    // A store's topic was claimed with the store: it reads its record, and reserves ids on
    // first need.
    // Any error from the claim's reads on is checked against the store's ownership
    // (`ListedOwner::explain`): a chunk record of the cursor table that the claimed record pins
    // may be gone because a newer owner claimed the store, opened the topic and wrote its
    // record again after this claim.
    let owner = ListedOwner::new(journal.clone());
    let (mut record, mut version, ids) =
        claim_either(storage.as_ref(), meta.as_ref(), store_id, claim_cursors)
            .map_err(|e| owner.explain(e))?;
    // A topic of its own hosts its cursors' journal (`host.rs`): opened and sealed right after
    // the claim, its hooks set once the topic is.
    let in_store = journal.is_some();
    let (journal, hosted_recovered) = match journal {
        Some(tj) => (tj, recovered.to_vec()),
        None => super::host::open_hosted(
            storage.clone(),
            own_journal,
            meta.as_ref(),
            (&mut record, &mut version),
        )?,
    };
    let recovered = &hosted_recovered;
    // A store's topic cuts no torn tail: it never appends to a ledger it did not create, and a
    // former owner that still runs may be writing the end of one while this open reads it.
    let sealed = sealed_in_record(&record);
    // One listing, after the claim, serves the entry log and rule 3 (cursor records): both
    // are taken before the owner check that precedes any deletion. A store's topic writes
    // nothing between its claim and here: the listing its claim took after its link serves,
    // when it took one (a topic of its own claims cursor records and opens its journal first).
    let fenced = meta.take_fenced_listing().filter(|_| in_store);
    let listed = match fenced {
        Some(listed) => listed,
        None => storage.list()?,
    };
    // Any error from here on is checked against the store's ownership (`ListedOwner`).
    let opened = || -> Result<TopicCore> {
        let tails = (claim_cursors, listed.as_slice());
        let log = EntryLog::open_locked_deferring(storage, config.log, guard, tails, &sealed)?;
        let log = Arc::new(log);
        log.reserve_ids(ids.0, ids.1, None);
        let on_disk: BTreeSet<u64> = log.ledger_ids().into_iter().collect();
        if !claim_cursors {
            // Rule 6: a record older than the newest written is refused.
            let in_journal =
                journal_cursors(&journal, at_or_above(recovered, record.next_cursor_id));
            refuse_older_record(&record, &log, in_journal)?;
            record.next_ledger_id = record.next_ledger_id.max(1);
            if record.store_id == 0 {
                // Rule 7: a record of an earlier release names its store from now on. Written
                // after rule 6, on the claimed version and with no block of ids reserved: an older
                // copy of the record put back is refused above, not given a block above the newer
                // ledgers it would then delete as orphans.
                record.store_id = store_id;
                version = meta.put(TOPIC_RECORD, Some(version), &record.encode())?;
            }
        }

        // Before any file is removed or any repair recorded.
        refuse_older_files(
            &record,
            &log,
            (ids, config.read_unsynced),
            (&journal, recovered),
        )?;
        let (refs, cut_short) = settle_cursors(
            meta.as_ref(),
            &log,
            (&record, &on_disk, &listed),
            (&journal, recovered),
            ((!in_store).then_some(version), &owner),
        )?;
        // Rule 2 (and 3 for files holding less than a header).
        settle_interrupted_creates(&log, &record, &refs.referenced, &owner)?;
        if let Some(lost) = record.ledgers.iter().find(|l| !on_disk.contains(&l.id)) {
            return Err(Error::MissingLedger {
                ledger: lost.id,
                dir: location.into(),
            });
        }
        // Rule 3, ledger side; not while a cursor record is another cursor's (see above).
        if !refs.misplaced {
            for &id in on_disk.difference(&refs.referenced) {
                owner.before_removal()?;
                log.delete_ledger(id)?;
            }
        }
        // Rule 5: the block reserved by the claim starts above every recorded id and every file.

        let (ledgers, deferred) = finish_ledgers(
            meta.as_ref(),
            &log,
            (&mut record, &mut version),
            claim_cursors,
        )?;

        let mut core = new_core(log, meta, config, (record, version), &ledgers)?;
        core.journal = Some(journal);
        core.in_store = in_store;
        core.defer_deletes(deferred);
        core.forget_at_open = std::sync::Mutex::new(cut_short);
        core.superseded = std::sync::Mutex::new(refs.superseded);
        Ok(core)
    };
    opened().map_err(|e| owner.explain(e))
}

/// The checks of every topic's open against files that show them older than what was
/// written after them, made before the open removes a file or records a repair: rule 6's
/// unlisted ledgers holding entries ([`refuse_unlisted_entries`]; `ids`: the block the claim
/// reserved, if it wrote one, which moved the record's block past the files the check reads,
/// so that every file above the listed ledgers counts then), and rule 4's ledger being
/// appended to against the committed mark-delete of every cursor `journal` recovered
/// ([`refuse_short_ledgers`]), except on a topic that reads unsynced entries
/// (`read_unsynced`): its cursors acknowledge entries a power cut can take, so a mark-delete
/// past the ledger's durable end is the loss that setting accepts, not an older file.
fn refuse_older_files(
    record: &TopicRecord,
    log: &EntryLog,
    (ids, read_unsynced): ((u64, u64), bool),
    (journal, recovered): (&TopicJournal, &[u64]),
) -> Result<()> {
    let floor = if ids == (0, 0) {
        current_block(record)
    } else {
        0
    };
    refuse_unlisted_entries(record, log, floor)?;
    if read_unsynced {
        return Ok(());
    }
    refuse_short_ledgers(record, log, || {
        (recovered.iter())
            .filter_map(|&id| journal.committed_state(id))
            .map(|state| state.mark_delete)
            .collect()
    })
}

/// Rule 4: every ledger `record` lists, finished ([`finish_ledger`]: the one a former owner
/// was appending to counted, an empty one dropped), and the record repaired when that changed
/// it ([`repair_record`]); returns the ledgers and those whose deletion waits for the topic's
/// next record write.
fn finish_ledgers(
    meta: &dyn MetaStore,
    log: &EntryLog,
    (record, version): (&mut TopicRecord, &mut u64),
    claim_cursors: bool,
) -> Result<(Vec<LedgerRecord>, Vec<u64>)> {
    let mut ledgers = Vec::with_capacity(record.ledgers.len());
    let mut dropped = Vec::new();
    for rec in record.ledgers.iter() {
        match finish_ledger(log, rec)? {
            Some(done) => ledgers.push(done),
            None => dropped.push(rec.id),
        }
    }
    // A topic of its own writes the repaired record now (its claim wrote one anyway). A
    // store's topic keeps it in memory, to be written with its next record write, and deletes
    // the dropped ledgers only after that write: a restart after a crash then writes nothing
    // either. A crash before that write leaves the record as it was, which the next open
    // repairs again; entries it then finds past this open's count were appended by a former
    // owner after the store's claim, whose syncs all failed (`docs/cursors.md`, "Topics of a
    // store").
    let deferred = if record.ledgers.iter().eq(&ledgers) {
        Vec::new()
    } else {
        repair_record(
            meta,
            log,
            (record, version),
            &ledgers,
            dropped,
            claim_cursors,
        )?
    };
    Ok((ledgers, deferred))
}

/// Removes what a metadata write or a cursor's deletion cut short left among `listed` (a
/// temporary file, a cursor record's tombstone and the versions below it). Called after the
/// claim and its ownership check, under the directory's lock, so a restart that writes no
/// record removes them too: every other writer is a former owner the claim fenced, whose write
/// of such a file can no longer become a record anyone reads (`FileMetaStore::sweep_leftovers`).
///
/// Only names that may be a tombstone are looked up: version 2 or above (a tombstone's least),
/// and on a topic of its own only of a cursor `record`'s table does not list (it drops a
/// cursor from its table before deleting its record, and claims every listed record, so
/// listed ones are above 1 too). A store deletes the record first, but writes a cursor
/// record once (version 1; 2 once imported from a cursor ledger). So an open with nothing left
/// over usually looks nothing up.
fn sweep_leftovers(
    meta: &dyn MetaStore,
    listed: &[String],
    (record, in_store): (&TopicRecord, bool),
) -> Result<()> {
    let is_cursor = |name: &str| name.starts_with(crate::cursor::RECORD_PREFIX);
    let mut leftovers: Vec<String> = listed
        .iter()
        .filter(|f| crate::meta::file::may_be_leftover(f, is_cursor))
        .cloned()
        .collect();
    if !in_store && !leftovers.is_empty() {
        let swept = swept_by_open(record, in_store);
        leftovers.retain(|f| swept(f));
    }
    if leftovers.is_empty() {
        return Ok(());
    }
    // The sweep removes only names it is given: every listed file of a record that may be
    // deleted (a version below its tombstone left behind would bring the record back).
    let records: IdSet<&str> = leftovers
        .iter()
        .filter_map(|f| crate::meta::record_of_file(f))
        .collect();
    let below = listed.iter().filter(|f| {
        crate::meta::record_of_file(f).is_some_and(|r| records.contains(r))
            && !leftovers.contains(f)
    });
    let below: Vec<String> = below.cloned().collect();
    leftovers.extend(below);
    meta.sweep_leftovers(&leftovers)
}

/// Whether the open of a topic whose record is `record` (`in_store`: a store's topic) sweeps
/// the leftover `file` may be ([`sweep_leftovers`]), `verify`'s rule too: every file on a
/// store; on a topic of its own, none of a cursor its table lists. Such a topic claimed every
/// listed record above version 1, so those stay (the set costs what the claim's links of them
/// cost already); and it drops a cursor from its table before deleting its record, so no power
/// cut leaves a tombstone over a listed cursor's record: that is damage (a record emptied, or
/// an older topic record), and the cursor is kept, with its state from the journal.
pub(crate) fn swept_by_open(record: &TopicRecord, in_store: bool) -> impl Fn(&str) -> bool {
    let table: IdSet<u64> = if in_store {
        IdSet::new()
    } else {
        record.cursors.iter().map(|c| c.id).collect()
    };
    move |file| {
        crate::meta::record_of_file(file)
            .and_then(crate::cursor::record_id)
            .is_none_or(|id| !table.contains(&id))
    }
}

/// The topic as its open leaves it: `record` at `version`, appends to a new ledger after the
/// last of `ledgers`.
fn new_core(
    log: Arc<EntryLog>,
    meta: Arc<dyn MetaStore>,
    config: LedgerConfig,
    (record, version): (TopicRecord, u64),
    ledgers: &[LedgerRecord],
) -> Result<TopicCore> {
    let spans: Vec<LedgerSpan> = ledgers.iter().map(span_of).collect();
    let (next_index, last_timestamp) = match spans.iter().rev().find(|s| s.entries > 0) {
        Some(last) => (
            log.read_meta(last.id, last.entries - 1)?.index + 1,
            last.last_timestamp,
        ),
        None => (0, 0),
    };
    let writer = Writer {
        record,
        version,
        current: None,
        current_bytes: 0,
        last_timestamp,
        names: CursorNames::default(),
    };
    Ok(TopicCore::new(
        log,
        meta,
        config,
        Layout::new(spans, next_index),
        writer,
    ))
}

/// Rule 4's record write: `record` with `ledgers`, written now by a topic of its own (`write`,
/// the `dropped` ledgers then deleted), kept in memory by a store's topic; returns the ledgers
/// to delete after the next record write.
fn repair_record(
    meta: &dyn MetaStore,
    log: &EntryLog,
    (record, version): (&mut TopicRecord, &mut u64),
    ledgers: &[LedgerRecord],
    dropped: Vec<u64>,
    write: bool,
) -> Result<Vec<u64>> {
    let mut next = record.clone();
    next.ledgers.replace_entries(ledgers);
    // A dropped ledger of the record's current block of ids (the one a former owner was
    // writing, which it may still append to and sync after this open read it empty) moves the
    // block on: the record without it reads such a file as below its block (rule 6,
    // [`refuse_unlisted_entries`]), an orphan, and this owner's ledgers come from the next
    // block (a topic claimed by a link reserves its first on need, from `next_ledger_id`).
    if dropped.iter().any(|&id| id >= current_block(&next)) {
        next.next_ledger_id =
            next.next_ledger_id
                .checked_add(ID_BLOCK)
                .ok_or_else(|| Error::LimitExceeded {
                    reason: "the topic has run out of ledger ids".into(),
                })?;
    }
    let deferred = if write {
        // A store's topic stages its chunks with its next record write (`TopicCore::commit`).
        super::table::stage_chunks(meta, &mut next, (*version, *version + 1))?;
        *version = meta.put(TOPIC_RECORD, Some(*version), &next.encode())?;
        super::table::discard(meta, &super::table::superseded(record, &next));
        for id in dropped {
            log.delete_ledger(id)?;
        }
        Vec::new()
    } else {
        dropped
    };
    *record = next;
    Ok(deferred)
}

/// Rule 3, cursor side ([`cursor_references`]), with the journal's cursors the cursor table
/// does not list checked first ([`unlisted_journal_cursors`], `recovered`: the cursors the
/// journal held a state of when it opened), then the files a deletion or a record write cut
/// short left removed ([`sweep_leftovers`]), and the state of a deletion cut short forgotten
/// last: on a store here, for a topic of its own (`claimed`: the version of the topic record
/// its claim wrote) by the caller once its journal's hooks are set (returned).
///
/// Nothing is deleted or forgotten before the topic is known to be still this owner's (the
/// store's ownership, checked by `owner` before the first removal, or the topic record still
/// at the claim's version), checked after the files and records were listed: a ledger or
/// cursor record a newer owner created after its claim, which a former owner's open still
/// running would take for an orphan, was created after the check's answer changed, so a
/// listing taken before a passing check never holds one.
fn settle_cursors(
    meta: &dyn MetaStore,
    log: &EntryLog,
    (record, on_disk, listed): (&TopicRecord, &BTreeSet<u64>, &[String]),
    (tj, recovered): (&TopicJournal, &[u64]),
    (claimed, owner): (Option<u64>, &ListedOwner),
) -> Result<(References, Vec<u64>)> {
    let cut_short = unlisted_journal_cursors(tj, record, recovered);
    let refs = cursor_references(meta, log, (record, on_disk, listed), tj, claimed)?;
    // After the ownership check `cursor_references` ran on a topic of its own; a store's
    // topic's `meta` checks the store's ownership around the sweep itself.
    sweep_leftovers(meta, listed, (record, claimed.is_none()))?;
    // Chunk records of the cursor table its record does not pin can never be pinned again
    // (each write pins only records named after the version it takes, above the claimed
    // one); the listing was taken before the ownership check, so it holds none a newer owner
    // wrote.
    for file in super::table::chunk_leftovers(listed, record) {
        owner.before_removal()?;
        match log.storage().remove(&file) {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    if claimed.is_some() {
        // A topic of its own checked its record's version above; its journal writes nothing
        // before its hooks are set: the caller forgets these then.
        return Ok((refs, cut_short));
    }
    for id in cut_short {
        owner.before_removal()?;
        tj.journal.forget(tj.cursor_id(id))?;
    }
    Ok((refs, Vec::new()))
}

/// What rule 3 found the cursor records reference.
struct References {
    /// The ledgers the topic record and the cursor records reference.
    referenced: BTreeSet<u64>,
    /// A cursor record is another cursor's: no orphan may be deleted.
    misplaced: bool,
    /// Cursors the journal holds a state of whose record still names a cursor ledger (an
    /// import cut short after the journal's commit, `cursor::import`), with that ledger: kept
    /// (referenced) until the cursor's next write retires it.
    superseded: BTreeMap<u64, u64>,
}

/// The cursors of the topic (`recovered`: those the journal held a state of when it opened)
/// that still have a state in the journal but are not in the cursor table. A deletion ends by
/// forgetting the cursor's journal state, after it left the table: each is a deletion cut
/// short, whose state the caller forgets (on a store, unless its record is still there: then
/// [`cursor_references`] refuses the table that lost it first).
fn unlisted_journal_cursors(
    tj: &TopicJournal,
    record: &TopicRecord,
    recovered: &[u64],
) -> Vec<u64> {
    let listed: BTreeSet<u64> = record.cursors.iter().map(|c| c.id).collect();
    let unlisted = recovered.iter().copied().filter(|id| !listed.contains(id));
    journal_cursors(tj, unlisted).collect()
}

/// The ids of `ids` at or above `floor`: of the recovered cursors, only those can make a
/// topic record older than the journal (rule 6), so the journal is asked about those alone.
fn at_or_above(ids: &[u64], floor: u64) -> impl Iterator<Item = u64> + '_ {
    ids.iter().copied().filter(move |&id| id >= floor)
}

/// Those of `recovered` (cursors of the topic the journal held a state of when it opened)
/// that still have a state in the journal. The caller narrows `recovered` first: each id
/// costs a look-up in the journal's index.
fn journal_cursors<'a>(
    tj: &'a TopicJournal,
    recovered: impl Iterator<Item = u64> + 'a,
) -> impl Iterator<Item = u64> + 'a {
    recovered.filter(|&id| tj.committed_state(id).is_some())
}

/// A file holding less than a header is an interrupted create, deleted when nothing references
/// it. A recorded ledger's file is never deleted: one holding less than a header (emptied, or
/// cut after its create was synced) is damage, and the topic is refused.
fn settle_interrupted_creates(
    log: &EntryLog,
    record: &TopicRecord,
    referenced: &BTreeSet<u64>,
    owner: &ListedOwner,
) -> Result<()> {
    let interrupted = log.interrupted_creates();
    if let Some(lost) = record.ledgers.iter().find(|l| interrupted.contains(&l.id)) {
        return Err(Error::corrupted(lost.id, 0, CorruptionKind::Truncated));
    }
    for id in interrupted {
        if !referenced.contains(&id) {
            owner.before_removal()?;
            log.delete_ledger(id)?;
        }
    }
    Ok(())
}

/// The ownership check that makes an open's removals safe: a store's topic checks the
/// store's ownership after its listing, once, before the first file it removes or cursor
/// state it forgets (a ledger or record a newer owner created after its claim is then not in
/// that listing: the check's answer changed first). An open that removes and forgets nothing,
/// a restart after a clean close, checks nothing here: its claim checked the store's ownership
/// after its link. And an open that fails from its claim on checks it before it answers
/// ([`Self::explain`]): what a former owner's open reads there may be a newer owner's doing (a
/// ledger trimmed, a chunk record of the cursor table replaced, a ledger file above its
/// record's ids), not damage. A topic of its own checked its record's version after the
/// listing (`cursor_references`): nothing more to check.
struct ListedOwner {
    /// The store's journal, for a store's topic.
    store: Option<TopicJournal>,
    /// The check ran and passed.
    passed: std::cell::Cell<bool>,
}

impl ListedOwner {
    fn new(store: Option<TopicJournal>) -> Self {
        Self {
            store,
            passed: std::cell::Cell::new(false),
        }
    }

    /// Before a removal or a forget: the store's ownership, checked on the first call.
    fn before_removal(&self) -> Result<()> {
        if let Some(tj) = &self.store
            && !self.passed.get()
        {
            tj.check_store_owner()?;
            self.passed.set(true);
        }
        Ok(())
    }

    /// What `failed`, an error of the open from its claim on, tells the caller: on a store's
    /// topic, the store's ownership is checked first (again, if it passed before a removal),
    /// and a store another owner claimed answers [`Error::Fenced`] (or [`Error::PreviousIo`])
    /// whatever the open found. A check that cannot run leaves `failed` as it is.
    fn explain(&self, failed: Error) -> Error {
        let Some(tj) = &self.store else {
            return failed;
        };
        if matches!(failed, Error::Fenced { .. } | Error::PreviousIo) {
            return failed;
        }
        match tj.check_store_owner() {
            Err(fence @ (Error::Fenced { .. } | Error::PreviousIo)) => fence,
            Ok(()) | Err(_) => failed,
        }
    }
}

/// Rule 3, cursor side: the ledgers the topic record and the cursor records reference, and
/// whether a cursor record is another cursor's (then no orphan may be deleted); cursor records
/// of ids the cursor table does not list are deleted. With `claimed` (a topic of its own: the
/// version its claim wrote of the topic record), the records are listed, the topic record is
/// checked to be still at that version ([`Error::Fenced`] if not), and every listed record is
/// written again; without, the records are read only if a ledger file (whole or an
/// interrupted create) is not in the topic record, the only case in which their references
/// matter (a ledger a cursor's record names while the journal `tj` holds that cursor's state is
/// such a file: it stays referenced, and is listed as superseded).
fn cursor_references(
    meta: &dyn MetaStore,
    log: &EntryLog,
    (record, on_disk, listed): (&TopicRecord, &BTreeSet<u64>, &[String]),
    tj: &TopicJournal,
    claimed: Option<u64>,
) -> Result<References> {
    let mut superseded = BTreeMap::new();
    let claim = claimed.is_some();
    let mut referenced: BTreeSet<u64> = record.ledgers.iter().map(|l| l.id).collect();
    let table: BTreeMap<String, &CursorEntry> = record
        .cursors
        .iter()
        .map(|c| (record_name(c.id), c))
        .collect();
    let mut misplaced = false;
    let unlisted = on_disk
        .iter()
        .copied()
        .chain(log.interrupted_creates())
        .any(|id| !referenced.contains(&id));
    let names = if claim || unlisted {
        meta.list()?
    } else {
        record_names(listed)
    };
    // Every listing this open deletes by (the ledger files, the records) is taken by now: a
    // newer owner's claim after this check comes before anything it creates, so nothing a
    // newer owner created is in them.
    if let Some(version) = claimed
        && !meta.is_current(TOPIC_RECORD, version)?
    {
        return Err(Error::Fenced {
            what: format!(
                "topic record of `{}`: a newer owner claimed it while this open ran",
                log.storage().location()
            ),
        });
    }
    if claim {
        refuse_lost_records(record, &names, tj)?;
    }
    for name in names {
        if let Some(entry) = table.get(&name) {
            // Claimed (written again, unchanged) before its ledger counts as referenced: a
            // previous owner's flush could otherwise still switch the record to a ledger this
            // open takes for an orphan and deletes. After the claim that switch is refused.
            let found = if claim {
                let identity = CursorIdentity {
                    cursor_id: entry.id,
                    topic_id: record.topic_id,
                };
                claim_record(meta, &name, &entry.name, identity)?
            } else if unlisted {
                meta.get(&name)?.map(|(_, bytes)| bytes)
            } else {
                None
            };
            if let Some(bytes) = found {
                let cursor =
                    CursorRecord::decode(&bytes).map_err(|c| c.in_record(name.as_str()))?;
                // A record of another cursor (moved or copied here) is damage: opening that
                // cursor refuses it. The ledger it displaced would look like an orphan, so no
                // ledger is deleted by this open.
                let own = cursor
                    .check_identity(entry.id, &entry.name, record.topic_id)
                    .is_ok();
                misplaced |= !own;
                if let Some(l) = cursor.cursor_ledger {
                    referenced.insert(l);
                    // Only the cursor's own record names a ledger its import superseded: the
                    // one another cursor's record names is that cursor's.
                    if own && tj.committed_state(entry.id).is_some() {
                        superseded.insert(entry.id, l);
                    }
                }
            }
        } else if crate::cursor::is_record_like(&name) {
            // Files of a name without a record (a deletion's tombstone and the versions it
            // had not removed yet, or the temporary file of a write that failed) keep no
            // cursor: nothing to refuse or delete (as `verify` judges them).
            let Some((v, _)) = meta.get(&name)? else {
                continue;
            };
            // On a store a creation lists the cursor before writing its record and a deletion
            // removes the record first: a record of an id the table gave out but does not list
            // is a cursor the table lost, not a creation or deletion cut short.
            if !claim
                && crate::cursor::record_id(&name).is_some_and(|id| id < record.next_cursor_id)
            {
                return Err(Error::corrupted_at(
                    CorruptionPlace::Record(TOPIC_RECORD.into()),
                    CorruptionKind::InvalidField(UNLISTED_CURSOR),
                ));
            }
            meta.delete(&name, v)?;
        }
    }
    Ok(References {
        referenced,
        misplaced,
        superseded,
    })
}

/// On a topic of its own (whose records `names` lists), [`lost_cursor_record`] for the first
/// cursor of `record`'s table without a record whose state the journal `tj` does not hold.
/// Checked before any cursor record is claimed or deleted (a record lost after this check,
/// which only damage does, is refused by the cursor's open). A listed cursor whose journal
/// holds its state is recovered from the journal alone, its record never read for its state.
fn refuse_lost_records(record: &TopicRecord, names: &[String], tj: &TopicJournal) -> Result<()> {
    let present: IdSet<&str> = names.iter().map(String::as_str).collect();
    match record.cursors.iter().find(|c| {
        !present.contains(record_name(c.id).as_str()) && tj.committed_state(c.id).is_none()
    }) {
        Some(lost) => Err(lost_cursor_record(lost.id)),
        None => Ok(()),
    }
}

/// What the open of a topic of its own, and the open of cursor `id` on it, answer for a cursor
/// its cursor table lists whose record is gone (or reads as deleted) and whose state its
/// journal does not hold: `Corrupted` naming the cursor record, as `ackstore verify` reports
/// it. Such a topic writes a cursor's record before the table lists it and drops the cursor
/// from the table before it deletes the record, so no power cut leaves this state (only
/// damage: the record removed, or an older topic record put back that lists a cursor deleted
/// since). Starting the cursor again from the options given at that open would acknowledge
/// every entry appended since its creation (at `Latest`, or any position past the lost
/// record's).
pub(crate) fn lost_cursor_record(id: u64) -> Error {
    Error::corrupted_at(
        CorruptionPlace::Record(record_name(id)),
        CorruptionKind::Missing,
    )
}

/// The record names among `listed` (the open's one listing, nothing read): what rule 3 looks
/// through for cursor records of ids the cursor table no longer lists.
fn record_names(listed: &[String]) -> Vec<String> {
    let mut names: Vec<String> = listed
        .iter()
        .filter_map(|f| crate::meta::record_of_file(f).map(str::to_owned))
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Rule 6: [`Error::Corrupted`] naming the topic record when a ledger file of `log` (or an
/// interrupted create) has an id at or above `record`'s next ledger id
/// ([`OLDER_TOPIC_RECORD`]), or a cursor whose state the store's journal holds
/// (`journal_cursors`) has an id at or above its next cursor id
/// ([`OLDER_TOPIC_RECORD_CURSORS`]). A topic of a store records every block of ledger ids it
/// reserves (by compare-and-set, synced) before it creates a file of one; a cursor's id is
/// given out by the record write that lists it (on a store; by the one after its record on a
/// store of an earlier release), which returns before the cursor exists, let alone flushes;
/// and a record write never lowers either next id. So no power cut leaves such a file or
/// state: only a record older than the newest written does (the newest deleted, or an older
/// copy put back), which would otherwise open the topic back in time, delete the newer
/// record's ledgers as orphans and forget its newer cursors as deletions cut short.
pub(crate) fn refuse_older_record(
    record: &TopicRecord,
    log: &EntryLog,
    journal_cursors: impl IntoIterator<Item = u64>,
) -> Result<()> {
    // A record of an earlier release, without an identity, is claimed by the open with a write
    // that reserves a block above every file (`claim_topic`): its files are checked against
    // that record, and `verify`, which writes nothing, leaves them unchecked.
    let file_above = record.topic_id != 0
        && log
            .ledger_ids()
            .iter()
            .chain(&log.interrupted_creates())
            .any(|&id| id >= record.next_ledger_id);
    let cursor_above = || {
        journal_cursors
            .into_iter()
            .any(|id| id >= record.next_cursor_id)
    };
    let field = if file_above {
        OLDER_TOPIC_RECORD
    } else if cursor_above() {
        OLDER_TOPIC_RECORD_CURSORS
    } else {
        return Ok(());
    };
    Err(older_record(field))
}

/// Rule 6 on every topic: [`Error::Corrupted`] naming the topic record
/// ([`OLDER_TOPIC_RECORD_LEDGERS`]) when a ledger file of `log` above every ledger `record`
/// lists holds an entry that is not a cursor ledger's. A topic records a data ledger (a synced
/// record write) before it appends the ledger's first entry, and a trim keeps the last ledger
/// holding entries, so a power cut leaves the files above the listed ones empty (a creation
/// cut short): such a file holding entries shows a record older than the one that listed it,
/// which would otherwise delete that ledger, and its entries, as an orphan. It catches an
/// older record written in the same open of the topic (the same block of ids), which
/// [`refuse_older_record`] cannot tell apart. Only files at or above `floor` count: the record's
/// current block of ids ([`current_block`]) as written, none when the caller's claim reserved a
/// new block above every file: a ledger an open dropped as empty (rule 4), into which
/// a former owner still running may append and sync before its file is removed, is below the
/// block of the record that dropped it ([`repair_record`] moves the block on when it was not).
/// The cursor ledgers of earlier releases are not
/// listed by the record and may be left unreferenced by a crash, holding entries: a file whose
/// first entry reads as a cursor ledger's (its frame's magic, version and kind,
/// `format::cursor::peek_kind`, and its frame header's metadata: [`reads_as_cursor_ledger`])
/// is left to rule 3. Reads the first entry of each file above
/// the listed ones only: a clean open has none.
pub(crate) fn refuse_unlisted_entries(
    record: &TopicRecord,
    log: &EntryLog,
    floor: u64,
) -> Result<()> {
    let newest_listed = record.ledgers.iter().map(|l| l.id).max().unwrap_or(0);
    for id in log
        .ledger_ids()
        .into_iter()
        .filter(|&id| id > newest_listed && id >= floor)
    {
        if log.entry_count(id)? > 0 && !reads_as_cursor_ledger(&log.read(id, 0)?) {
            return Err(older_record(OLDER_TOPIC_RECORD_LEDGERS));
        }
    }
    Ok(())
}

/// Rule 4 against the cursors: [`Error::Corrupted`] at a ledger `record` lists with no entries
/// (the one a previous owner was appending to, counted by the open) that holds fewer entries
/// than a cursor's committed mark-delete covers (`marks`: the mark-delete of every cursor
/// whose state the journal holds, asked for only when the record lists such a ledger). A
/// cursor acknowledges only entries a finished fsync covered (a read sees no other), so its
/// mark-delete lies within what survives any power cut: a shorter file is an older copy of
/// the ledger, or one cut short, whose synced entries would otherwise be gone unnoticed (the
/// next appends go to a new ledger). A ledger the log found damaged is left to its recovery
/// mode.
pub(crate) fn refuse_short_ledgers(
    record: &TopicRecord,
    log: &EntryLog,
    marks: impl FnOnce() -> Vec<Position>,
) -> Result<()> {
    let counted: BTreeMap<u64, LedgerInfo> = record
        .ledgers
        .iter()
        .filter(|l| l.entries == 0)
        .filter_map(|l| log.ledger_info(l.id).ok())
        .filter(|info| info.damaged.is_none())
        .map(|info| (info.id, info))
        .collect();
    if counted.is_empty() {
        return Ok(());
    }
    for mark in marks() {
        if let Some(info) = counted.get(&mark.ledger_id)
            && mark.entry_id >= info.entries
        {
            return Err(Error::corrupted(
                info.id,
                info.bytes,
                CorruptionKind::InvalidField(SHORTER_THAN_A_MARK_DELETE),
            ));
        }
    }
    Ok(())
}

/// Whether `first`, a ledger's first entry, is a cursor ledger's as earlier releases wrote
/// them: its payload's frame (magic, version, a known kind) and its frame header's metadata,
/// which a cursor ledger's entry sets to its kind (messages: the kind's code, index and
/// timestamp 0). A data entry's payload is a producer's bytes, which may start as that frame
/// does; its header carries its message index and time, 0 both only for a topic's first
/// message published at time 0.
fn reads_as_cursor_ledger(first: &crate::log::LogEntry) -> bool {
    let meta = first.meta;
    crate::format::cursor::peek_kind(&first.payload).is_ok_and(|kind| {
        meta.num_messages == u32::from(kind.code()) && meta.index == 0 && meta.timestamp == 0
    })
}

/// The first id of the block of ledger ids `record` reserved last (every block is
/// [`ID_BLOCK`] ids, `next_ledger_id` its end). Every ledger created after `record` was
/// written has an id at or above it: from that block, or from one reserved later, above it.
pub(crate) fn current_block(record: &TopicRecord) -> u64 {
    record.next_ledger_id.saturating_sub(ID_BLOCK)
}

/// The error of a topic record older than the newest written, `field` saying how it shows.
fn older_record(field: &'static str) -> Error {
    Error::corrupted_at(
        CorruptionPlace::Record(TOPIC_RECORD.into()),
        CorruptionKind::InvalidField(field),
    )
}

/// The claim of a topic of its own (`alone`, [`claim_topic`]) or of a store's topic
/// ([`claim_store_topic`]), then the chunk records of its cursor table, read after the claim
/// (see `table::load_chunks`).
fn claim_either(
    storage: &dyn Storage,
    meta: &dyn MetaStore,
    store_id: u64,
    alone: bool,
) -> Result<(TopicRecord, u64, (u64, u64))> {
    let (mut record, version, ids) = if alone {
        claim_topic(storage, meta, 0)?
    } else {
        claim_store_topic(storage, meta, store_id)?
    };
    super::table::load_chunks(meta, &mut record)?;
    Ok((record, version, ids))
}

/// Rules 0 and 1 for a topic of a store: claims the topic record without writing a byte
/// ([`MetaStore::claim`]: its bytes under the next version's name, no sync), so a former owner's
/// record write still in flight either landed before the claim (and is read here) or fails;
/// an empty record is created for a new topic. No ledger ids are reserved (an empty block: the
/// first ledger reserves one). Returns the record, its version and the block.
fn claim_store_topic(
    storage: &dyn Storage,
    meta: &dyn MetaStore,
    store_id: u64,
) -> Result<(TopicRecord, u64, (u64, u64))> {
    let mut attempts = 0;
    loop {
        attempts += 1;
        let Some((version, bytes)) = meta.get(TOPIC_RECORD)? else {
            // A topic the store's catalog lists: ledger files without a record are damage
            // (its record was written before any ledger file), not a foreign directory. A
            // former owner's creation of the record in flight may link it first: read it
            // again and claim it, as below.
            match claim_topic(storage, meta, store_id) {
                Err(Error::Fenced { .. }) if attempts < CLAIM_ATTEMPTS => continue,
                created => {
                    return created.map_err(|e| match e {
                        Error::NotAckstore { .. } => Error::Corrupted {
                            place: CorruptionPlace::Record(TOPIC_RECORD.into()),
                            kind: CorruptionKind::Missing,
                        },
                        e => e,
                    });
                }
            }
        };
        let record = TopicRecord::decode(&bytes).map_err(|c| c.in_record(TOPIC_RECORD))?;
        check_store_host(&record, store_id)?;
        if record.topic_id == 0 {
            // A record of an earlier release, without an identity: the claim gives it one,
            // and its host (written by compare-and-set: a former owner's write landing first
            // makes it read again).
            match claim_topic(storage, meta, store_id) {
                Err(Error::Fenced { .. }) if attempts < CLAIM_ATTEMPTS => continue,
                claimed => return claimed,
            }
        }
        match meta.claim(TOPIC_RECORD, version) {
            Ok(claimed) => return Ok((record, claimed, (0, 0))),
            // A former owner's write landed between the read and the claim: read it again.
            Err(Error::Fenced { .. }) if attempts < CLAIM_ATTEMPTS => {}
            Err(e) => return Err(e),
        }
    }
}

/// Rules 0 and 1: claims the topic record; returns it, its version and this owner's block of
/// ledger ids. A topic opened on its own whose record needs no change (it has its identity,
/// its next ledger id lies above every ledger file and its next cursor id above every cursor
/// record file) is claimed with a link
/// ([`MetaStore::claim`]: nothing written or synced), its block reserved on first need as a
/// store's topic reserves it (an empty block here). Otherwise the record is written again by
/// compare-and-set (or created), with a new block reserved. `store_id`: the store whose topic
/// this is, which the record written names (0: a topic opened on its own, which refuses a
/// record naming a store, and one that lists a journal is refused by a store).
fn claim_topic(
    storage: &dyn Storage,
    meta: &dyn MetaStore,
    store_id: u64,
) -> Result<(TopicRecord, u64, (u64, u64))> {
    let location = storage.location();
    let listed = storage.list()?;
    let highest_file = listed
        .iter()
        .filter_map(|f| parse_ledger_file_name(f))
        .max();
    // A topic of its own writes a cursor's record before the table lists it, so a creation
    // cut short leaves a record of the id the table gives out next, which its open deletes;
    // that deletion cut short leaves files of the id. The id is never given out again: a new
    // owner's cursor under it would write a record a former owner's open, sweeping those
    // files after its ownership check, could still remove (`sweep_leftovers`).
    let cursor_ids_from = listed
        .iter()
        .filter_map(|f| crate::meta::record_of_file(f).and_then(crate::cursor::record_id))
        .max()
        .map_or(0, |id| id.saturating_add(1));
    let mut record = match meta.get(TOPIC_RECORD)? {
        Some((version, bytes)) => Some((
            TopicRecord::decode(&bytes).map_err(|c| c.in_record(TOPIC_RECORD))?,
            version,
        )),
        None if highest_file.is_some() => {
            return Err(Error::NotAckstore {
                path: location.into(),
                reason: "it holds ledger files but no topic record".into(),
            });
        }
        None => None,
    };
    let (mut next, expected) = match record.take() {
        Some((next, version)) => (next, Some(version)),
        None => (
            TopicRecord {
                next_ledger_id: 1,
                ledgers: crate::format::meta::LedgerTable::default(),
                cursors: CursorTable::default(),
                next_cursor_id: 0,
                topic_id: 0,
                journal: None,
                store_id: 0,
            },
            None,
        ),
    };
    // Under the lock: the check `refuse_store_record` made before it, against a record written
    // meanwhile, and a store's against what it found in its topic's place.
    if store_id == 0 && next.store_id != 0 {
        return Err(owned_by_store(&location, &next));
    }
    if store_id != 0 {
        check_store_host(&next, store_id)?;
        next.store_id = store_id;
    }
    let unchanged = store_id == 0
        && next.topic_id != 0
        && next.next_ledger_id >= 1
        && highest_file.is_none_or(|h| h < next.next_ledger_id)
        && cursor_ids_from <= next.next_cursor_id;
    if store_id == 0 {
        next.next_cursor_id = next.next_cursor_id.max(cursor_ids_from);
    }
    if let (Some(version), true) = (expected, unchanged) {
        // The claim fences every writer holding `version` from the moment the link returns;
        // whatever this owner builds on it is written with the record's next write, whose
        // directory sync makes the link durable too. A power cut before that leaves the record
        // at `version` or the claimed one, the same bytes, and every holder of `version` gone
        // with the power (docs/format.md, "Write steps of a topic").
        let claimed = meta.claim(TOPIC_RECORD, version)?;
        return Ok((next, claimed, (0, 0)));
    }
    if next.topic_id == 0 {
        // A new topic, or a record of an earlier release: the identity comes with the claim.
        next.topic_id = new_topic_id();
    }
    // This owner's block of ledger ids, above every id recorded or on disk (earlier releases
    // recorded data ledger ids only).
    let start = next
        .next_ledger_id
        .max(highest_file.map_or(1, |h| h.saturating_add(1)))
        .max(1);
    let end = start
        .checked_add(ID_BLOCK)
        .ok_or_else(|| Error::LimitExceeded {
            reason: "the topic has run out of ledger ids".into(),
        })?;
    next.next_ledger_id = end;
    let version = meta.put(TOPIC_RECORD, expected, &next.encode())?;
    Ok((next, version, (start, end)))
}

/// The ledgers `record` lists with their entries (sealed in the record), with their counts:
/// the open does not read them; each opens on its first use, which refuses a file not holding
/// the recorded count (rules 2 and 4). The others (the ledger a previous owner was appending
/// to, orphans, cursor ledgers) are opened with the log.
fn sealed_in_record(record: &TopicRecord) -> BTreeMap<u64, u64> {
    record
        .ledgers
        .iter()
        .filter(|l| l.entries != 0)
        .map(|l| (l.id, l.entries))
        .collect()
}

/// The recorded form of one listed ledger; `None` when it is empty and must go. Writes nothing
/// to the ledger: it may be the one a previous owner was appending to, and still is.
fn finish_ledger(log: &EntryLog, rec: &LedgerRecord) -> Result<Option<LedgerRecord>> {
    // Not opened yet: its first use checks the recorded count, as below.
    if rec.entries != 0 && log.is_deferred(rec.id) {
        return Ok(Some(*rec));
    }
    let info = log.ledger_info(rec.id)?;
    // A ledger is recorded with its count only once that many entries were synced, so the file
    // must still hold that many whole. More can only be entries a fenced owner appended after a
    // newer owner recorded the count: they stay in the file and are never read (the layout
    // stops at the recorded count), and so does damage past the count (their frames, a footer,
    // bytes after it). The ledger the previous owner was appending to (no count recorded): any
    // damage in it may have cut synced entries, so the topic is refused, naming it. One rule
    // for this open and a sealed ledger's first use (`EntryLog::check_holds`).
    let recorded = (rec.entries != 0).then_some(rec.entries);
    log.check_holds(rec.id, info.entries, info.damaged, recorded)?;
    if recorded.is_some() {
        return Ok(Some(*rec));
    }
    if info.entries == 0 {
        return Ok(None);
    }
    // Sealed in the record, at the count read after the claim; the file is left as it is (no
    // footer is written into a ledger another writer may still be appending to).
    let first = log.read_meta(rec.id, 0)?;
    let last = log.read_meta(rec.id, info.entries - 1)?;
    Ok(Some(ledger_record(&LedgerSpan {
        id: rec.id,
        entries: info.entries,
        first_index: (first.index + 1).saturating_sub(u64::from(first.num_messages)),
        first_timestamp: first.timestamp,
        last_timestamp: last.timestamp,
    })))
}

/// Claims cursor record `name` (of the cursor listed as `listed` with `identity`), so a
/// previous owner's next write of it fails; returns its bytes (`None` when there is no
/// record). A record of an earlier release, which carries no identity, gets this cursor's
/// identity with the claim, written by compare-and-set, once its name shows it is this
/// cursor's; any other record is claimed with a link ([`MetaStore::claim`]: its bytes under
/// the next version's name, nothing written or synced), as the topic record is. A previous
/// owner's write racing with the claim makes it read again: each previous handle has at most
/// one such write in flight, as it checks the topic record (claimed already) before the next.
fn claim_record(
    meta: &dyn MetaStore,
    name: &str,
    listed: &str,
    identity: CursorIdentity,
) -> Result<Option<Vec<u8>>> {
    let mut attempts = 0;
    loop {
        attempts += 1;
        let Some((version, bytes)) = meta.get(name)? else {
            return Ok(None);
        };
        let rewritten = match CursorRecord::decode(&bytes) {
            Ok(mut r)
                if r.identity.is_none()
                    && r.check_identity(identity.cursor_id, listed, identity.topic_id)
                        .is_ok() =>
            {
                r.identity = Some(identity);
                Some(r.encode())
            }
            _ => None,
        };
        let claimed = match &rewritten {
            Some(rewritten) => meta.put(name, Some(version), rewritten),
            None => meta.claim(name, version),
        };
        let bytes = rewritten.unwrap_or(bytes);
        match claimed {
            Ok(_) => return Ok(Some(bytes)),
            Err(Error::Fenced { .. }) if attempts < CLAIM_ATTEMPTS => {}
            Err(e) => return Err(e),
        }
    }
}

/// Reads of a record before its claim, at most.
const CLAIM_ATTEMPTS: u32 = 8;

/// A random, non-zero topic identity.
fn new_topic_id() -> u64 {
    use std::hash::BuildHasher;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::collections::hash_map::RandomState::new().hash_one((now, std::process::id())) | 1
}

fn span_of(rec: &LedgerRecord) -> LedgerSpan {
    LedgerSpan {
        id: rec.id,
        entries: rec.entries,
        first_index: rec.first_index,
        first_timestamp: rec.first_timestamp,
        last_timestamp: rec.last_timestamp,
    }
}

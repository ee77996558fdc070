//! The offline check of a topic directory or a store: [`verify`] and [`inspect`] as functions
//! returning typed reports (the `ackstore` command prints them; a broker or an operator's tool
//! can call them as well).
//!
//! Owns: reading every file of a topic or store without writing, locking or truncating
//! anything, and deciding which problems are damage. Invariant (`docs/format.md`, "verify
//! agrees with open"): what the owner's open refuses is reported as damage
//! ([`Finding::torn_tail`] false); what a kill, a power cut or a write that met a full disk
//! leaves (a torn tail, which the next open cuts back or, in a ledger it leaves as it is, reads
//! stop before; a stray journal segment) is reported as a torn tail, never as damage; files a
//! store's open does not read are [`Verification::unused`] warnings. A sealed ledger, which the
//! open of its topic does not read, is checked as its first use opens it: damage before the
//! count the topic record holds of it is what that use refuses; damage at or past that count
//! (a footer that does not verify, bytes after it, a fenced former owner's entries) is read by
//! no use, which serves the whole frames up to the count, so it is a warning in
//! [`Verification::unused`], one rule for both (`docs/format.md`, "Sealed ledgers open on first
//! use"). It never decides by opening: a directory whose owner is running is read as it is on
//! disk, so stop the owner for an exact picture.
//!
//! ```
//! # fn main() -> ackstore::Result<()> {
//! use std::sync::Arc;
//! use ackstore::{CursorOptions, LedgerConfig, ManagedLedger, MemStorage, Storage};
//!
//! let disk: Arc<dyn Storage> = Arc::new(MemStorage::new());
//! let topic = ManagedLedger::open_with_storage(disk.clone(), LedgerConfig::default())?;
//! let first = topic.append(b"hello")?;
//! topic.sync()?;
//! let cursor = topic.open_cursor("sub", CursorOptions::default())?;
//! cursor.ack(first)?;
//! cursor.close()?;
//! topic.close()?;
//!
//! let report = ackstore::check::verify(&disk)?;
//! assert!(report.is_sound(), "{report}");
//! # Ok(())
//! # }
//! ```

mod store;
pub mod text;
mod topic;
mod verify;

use std::fmt;
use std::sync::Arc;

use crate::cursor::NO_MARK_DELETE;
use crate::error::{Error, Result};
use crate::journal::JournalCheck;
use crate::journal::index::{Committed, CursorId, SnapshotLoc};
use crate::position::Position;
use crate::storage::Storage;

pub use topic::{CursorView, LedgerView, TopicView};

/// How findings name a topic's metadata record.
const TOPIC_FILE: &str = "topic.meta";

/// One problem, with the file and the place in it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// The file concerned, as the checked storage names it (a store's topic files are prefixed
    /// `t{id}/` or `t{id}-`).
    pub file: String,
    /// Where in it: `ledger 3 entry 7 at byte 4096`, `cursor record`, `journal segment 2`...
    pub place: String,
    /// What is wrong, as a sentence.
    pub problem: String,
    /// A torn tail (or a stray file): what a crash or a write that met a full disk leaves, not
    /// damage. Reads stop before it; the next open cuts it back or removes it, except in a
    /// ledger the open leaves as it is (any ledger of a store's topic, a ledger its topic
    /// record counts), where it stays, unread, until the ledger is deleted.
    pub torn_tail: bool,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.file, self.place, self.problem)
    }
}

/// What was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Subject {
    /// A topic directory (a topic opened alone).
    Topic,
    /// A store.
    Store {
        /// Topics its catalog lists.
        topics: usize,
        /// Journal records that verify.
        journal_records: u64,
    },
    /// A store whose catalog cannot be read: nothing else could be checked, as the catalog
    /// names the topics and the journal's segments.
    UnreadableCatalog,
}

/// A store cursor's committed state in the shared journal: what the store's open recovers it
/// from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JournalCursor {
    /// Its topic's id in the store catalog.
    pub topic_id: u64,
    /// Its topic's name (`None`: the catalog does not list the id, which is damage).
    pub topic: Option<String>,
    /// Its id within the topic.
    pub cursor_id: u64,
    /// Its name, as the topic record lists the id (`None`: the record cannot be read or does
    /// not list it).
    pub cursor: Option<String>,
    /// Everything at or below it is acknowledged (`None`: nothing is).
    pub mark_delete: Option<Position>,
    /// The cursor's epoch.
    pub epoch: u64,
    /// Whether its state is its single-entry snapshot record (the record at `marker_segment`
    /// and `marker_offset`; it lists no partition or batch record).
    pub snapshot: bool,
    /// The segment holding the newest record (full marker or delta) of its chain, or its
    /// snapshot record.
    pub marker_segment: u64,
    /// Where that record's frame starts in the segment.
    pub marker_offset: u64,
    /// Partition records its state lists.
    pub partitions: u64,
    /// Entries acknowledged above mark-delete, over those partitions.
    pub acked_entries: u64,
    /// Maximal ranges those entries form (`None`: a partition record could not be read back
    /// and verified).
    pub acked_ranges: Option<u64>,
    /// Batch records (partial entries of one partition each) its state lists.
    pub batch_records: u64,
    /// Entries acknowledged in part (batch-index acks) in those records.
    pub partial_entries: u64,
}

impl JournalCursor {
    /// The committed journal state of cursor `id` that `check` found (of whichever form is its
    /// state), named `cursor` in topic `topic`; `None` when the journal holds none.
    pub(super) fn of(
        storage: &Arc<dyn Storage>,
        check: &JournalCheck,
        id: CursorId,
        (topic, cursor): (Option<String>, Option<String>),
    ) -> Option<Self> {
        match check.snapshots.get(&id).filter(|s| s.current) {
            Some(s) => Some(Self::snapshot(storage, (id, s), topic, cursor)),
            None => Some(Self::committed(
                storage,
                (id, check.states.get(&id)?),
                topic,
                cursor,
            )),
        }
    }

    /// The committed snapshot `s` of cursor `id`, named `cursor` in topic `topic`.
    fn snapshot(
        storage: &Arc<dyn Storage>,
        (id, s): (CursorId, &SnapshotLoc),
        topic: Option<String>,
        cursor: Option<String>,
    ) -> Self {
        let entries = crate::journal::snapshot_entries(storage.as_ref(), id, s);
        Self {
            topic_id: id.topic,
            topic,
            cursor_id: id.cursor,
            cursor,
            mark_delete: Some(s.state.mark_delete).filter(|p| *p != NO_MARK_DELETE),
            epoch: s.state.epoch,
            snapshot: true,
            marker_segment: s.loc.segment,
            marker_offset: s.loc.offset,
            partitions: 0,
            acked_entries: entries.as_ref().map_or(0, |n| *n),
            acked_ranges: entries.is_ok().then_some(s.ranges),
            batch_records: s.batch.0,
            partial_entries: s.batch.1,
        }
    }

    /// The committed journal chain `state` of cursor `id`, named `cursor` in topic `topic`.
    fn committed(
        storage: &Arc<dyn Storage>,
        (id, state): (CursorId, &Committed),
        topic: Option<String>,
        cursor: Option<String>,
    ) -> Self {
        Self {
            topic_id: id.topic,
            topic,
            cursor_id: id.cursor,
            cursor,
            snapshot: false,
            mark_delete: Some(state.state.mark_delete).filter(|p| *p != NO_MARK_DELETE),
            epoch: state.state.epoch,
            marker_segment: state.marker.segment,
            marker_offset: state.marker.offset,
            partitions: state.rows.len() as u64,
            acked_entries: state.rows.values().map(|p| p.cardinality).sum(),
            acked_ranges: crate::journal::committed_ranges(Arc::clone(storage), state).ok(),
            batch_records: state.batch.len() as u64,
            partial_entries: state.batch.values().map(|p| p.cardinality).sum(),
        }
    }
}

impl fmt::Display for JournalCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |n: &Option<String>, id: u64| {
            n.as_ref()
                .map_or_else(|| format!("#{id}"), |n| format!("{n:?}"))
        };
        write!(
            f,
            "cursor {} of topic {}: mark-delete {}, epoch {}, {} acked entries in {} ranges \
             over {} partitions, {} partial entries in {} batch records, {} in journal \
             segment {} at byte {}",
            name(&self.cursor, self.cursor_id),
            name(&self.topic, self.topic_id),
            self.mark_delete
                .map_or_else(|| "-".to_owned(), |p| p.to_string()),
            self.epoch,
            self.acked_entries,
            self.acked_ranges
                .map_or_else(|| "?".to_owned(), |n| n.to_string()),
            self.partitions,
            self.partial_entries,
            self.batch_records,
            if self.snapshot { "snapshot" } else { "marker" },
            self.marker_segment,
            self.marker_offset
        )
    }
}

/// What [`verify`] found.
///
/// Its `Display` is the text `ackstore verify` prints: one line per finding, per unused file
/// and per store cursor's journal state, then a summary line.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Verification {
    /// Where the checked files are ([`Storage::location`]).
    pub location: String,
    /// A topic or a store.
    pub subject: Subject,
    /// Ledgers checked (of every topic of a store).
    pub ledgers: usize,
    /// Cursors checked (of every topic of a store).
    pub cursors: usize,
    /// Each store cursor's committed state in the journal, in (topic, cursor) id order; empty
    /// for a topic directory.
    pub journal: Vec<JournalCursor>,
    /// Damage and torn tails, each naming its file.
    pub findings: Vec<Finding>,
    /// Warnings, not damage: files or bytes no open or read uses, or that the open removes (a
    /// store's leftovers; a topic alone's, the cursor ledger a record still names of a cursor
    /// its journal holds; of either, damage in a ledger file past the count the topic record
    /// holds of it: its footer, bytes after it, a fenced former owner's entries).
    pub unused: Vec<Finding>,
}

impl Verification {
    /// Findings that are damage (what open refuses).
    #[must_use]
    pub fn damaged(&self) -> usize {
        self.findings.iter().filter(|f| !f.torn_tail).count()
    }

    /// Findings that are what a crash leaves, not damage (torn tails, stray segments).
    #[must_use]
    pub fn torn_tails(&self) -> usize {
        self.findings.iter().filter(|f| f.torn_tail).count()
    }

    /// Whether nothing is damaged: the owner's open accepts every file it reads.
    #[must_use]
    pub fn is_sound(&self) -> bool {
        self.damaged() == 0
    }
}

impl fmt::Display for Verification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for finding in &self.findings {
            let label = if finding.torn_tail {
                "torn tail (not damage: what a crash or a full disk leaves; no read reaches it)"
            } else {
                "DAMAGED"
            };
            writeln!(f, "{finding}: {label}")?;
        }
        for finding in &self.unused {
            writeln!(
                f,
                "{finding}: WARNING (no open or read uses these bytes; not damage)"
            )?;
        }
        for cursor in &self.journal {
            writeln!(f, "journal state: {cursor}")?;
        }
        match self.subject {
            Subject::Topic => writeln!(
                f,
                "checked {} ledgers and {} cursors in {}: {} damaged, {} torn tails, {} \
                 warnings",
                self.ledgers,
                self.cursors,
                self.location,
                self.damaged(),
                self.torn_tails(),
                self.unused.len()
            ),
            Subject::Store {
                topics,
                journal_records,
            } => writeln!(
                f,
                "checked the store in {}: {} topics, {} ledgers, {} cursors, {} journal \
                 records: {} damaged, {} torn tails, {} warnings",
                self.location,
                topics,
                self.ledgers,
                self.cursors,
                journal_records,
                self.damaged(),
                self.torn_tails(),
                self.unused.len()
            ),
            Subject::UnreadableCatalog => writeln!(
                f,
                "checked the store in {}: its catalog cannot be read: {} damaged",
                self.location,
                self.damaged()
            ),
        }
    }
}

/// The cursor journal of a store, as [`inspect`] summarises it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JournalSummary {
    /// Segment files.
    pub segments: u64,
    /// Records that verify.
    pub records: u64,
    /// Cursors with a committed state.
    pub cursors: u64,
    /// Whether the newest segment ends in a torn tail (the next open cuts it back).
    pub torn_tail: bool,
    /// Batch records the committed states reference.
    pub batch_partitions: u64,
    /// Partial entries in those records.
    pub partial_entries: u64,
}

/// One topic of a store, as [`inspect`] counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreTopic {
    /// Its id in the catalog.
    pub id: u64,
    /// The broker's name of it.
    pub name: String,
    /// Ledgers in its files.
    pub ledgers: usize,
    /// Cursors its record lists.
    pub cursors: usize,
}

/// What [`inspect`] shows of a store.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreInspection {
    /// The store's random id.
    pub store_id: u64,
    /// Its topics, in catalog order.
    pub topics: Vec<StoreTopic>,
    /// Its cursor journal.
    pub journal: JournalSummary,
    /// Each cursor's committed state in the journal, in (topic, cursor) id order.
    pub cursors: Vec<JournalCursor>,
}

/// What [`inspect`] shows of a topic directory.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicInspection {
    /// Its ledgers and cursors.
    pub view: TopicView,
    /// What could not be read on the way.
    pub problems: Vec<Finding>,
    /// Each cursor's committed state in the journal the topic hosts, in cursor id order.
    pub journal: Vec<JournalCursor>,
}

/// What [`inspect`] shows.
///
/// Its `Display` is the text `ackstore inspect` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Inspection {
    /// A topic directory.
    Topic(TopicInspection),
    /// A store.
    Store(StoreInspection),
}

/// Whether `storage` holds an ackstore topic (a topic record or a ledger file) or a store (a
/// version of its catalog, an emptied one included, or a topic whose record names a store:
/// a store whose catalog is gone, which [`verify`] reports), judged by file names and, when
/// those say nothing, the topic records of its `t{id}` names.
///
/// # Errors
/// [`Error::Io`] when it cannot be listed.
pub fn holds_ackstore(storage: &Arc<dyn Storage>) -> Result<bool> {
    let named = storage.list()?.iter().any(|n| {
        let record = crate::meta::record_of_file(n);
        record == Some("topic")
            || record == Some(crate::store::STORE_RECORD)
            || crate::log::parse_ledger_file_name(n).is_some()
    });
    Ok(named || crate::store::holds_store_topic(storage)?)
}

/// Checks every frame of every ledger, every metadata record, and every marker and partition
/// of every cursor (and, for a store, its catalog and every journal segment) in `storage`,
/// without writing anything, and reports each problem with its place.
///
/// Damage is what the owner's open refuses; a torn tail is what a crash leaves and the next
/// open repairs (see the module docs).
///
/// # Errors
/// [`Error::Io`] when the files cannot be read at all; problems in their bytes are findings.
pub fn verify(storage: &Arc<dyn Storage>) -> Result<Verification> {
    match crate::store::read_catalog(storage.clone()) {
        Ok(Some(catalog)) => verify::verify_store(storage, &catalog),
        Ok(None) => verify::verify_topic(storage),
        Err(e @ Error::Corrupted { .. }) => Ok(verify::unreadable_catalog(storage, &e)),
        Err(e) => Err(e),
    }
}

/// The ledgers and cursors of the topic in `storage` (each cursor's recovered state), or a
/// store's topics, journal and each cursor's committed journal state, read without writing.
///
/// # Errors
/// [`Error::Corrupted`] when the topic record or the store's catalog cannot be decoded (the
/// tables would be empty, not true); [`Error::OwnedByStore`] for a store's topic given alone
/// (as [`ManagedLedger::open`](crate::ManagedLedger::open) refuses it: its cursors' state is in
/// the store's journal); [`Error::Io`]. Other problems are in the report.
pub fn inspect(storage: &Arc<dyn Storage>) -> Result<Inspection> {
    if let Some(catalog) = crate::store::read_catalog(storage.clone())? {
        return store::inspect_store(storage, &catalog).map(Inspection::Store);
    }
    // A store's topic: its cursors' state is in the store's journal, which this does not read
    // (the tables would not be true); the store's directory shows them.
    crate::ledger::refuse_store_topic_alone(storage)?;
    let record = topic::read_topic(storage)?;
    let mut problems = Vec::new();
    let journal = match &record {
        Some(record) => match topic::check_hosted_journal(storage, record) {
            Ok(check) => topic::hosted_journal_cursors(storage, record, &check),
            Err(e) => {
                problems.push(Finding {
                    file: "journal".into(),
                    place: "cursor journal".into(),
                    problem: describe(&e),
                    torn_tail: false,
                });
                Vec::new()
            }
        },
        None => Vec::new(),
    };
    // As `verify`: the cursor ledger a record names of a cursor the journal holds is not read
    // by the open, so what is wrong with it is a note, not the cursor's state.
    let usage = topic::StoreUse::alone(&journal);
    let mut unused = Vec::new();
    let mut view = topic::collect_in(storage, false, &mut problems, Some((&usage, &mut unused)));
    problems.extend(unused);
    if let Some(record) = &record {
        topic::show_hosted_states(&mut view, record, &journal);
    }
    Ok(Inspection::Topic(TopicInspection {
        view,
        problems,
        journal,
    }))
}

/// The error and its chain of causes as one line of sentences. An error's message never
/// repeats its source (see `Error::Io`), so each cause is written once.
fn describe(err: &(dyn std::error::Error + 'static)) -> String {
    use std::fmt::Write as _;
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let _ = write!(out, ": {cause}");
        source = cause.source();
    }
    out
}

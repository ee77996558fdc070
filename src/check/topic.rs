//! What one topic's files hold, read without writing: its ledgers, and each cursor's record
//! and recovered state, with every problem found on the way as a [`Finding`] (for
//! [`inspect`](super::inspect) and [`verify`](super::verify)).
//!
//! Never writes, truncates or locks: a torn tail is reported, not cut.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::cursor::recover::{RecoverySource, recover};
use crate::cursor::verify::check_cursor_ledger;
use crate::cursor::{CursorConfig, NO_MARK_DELETE, record_name};
use crate::error::Result;
use crate::format::Corruption;
use crate::format::meta::{CursorEntry, CursorRecord, TopicRecord};
use crate::log::{EntryLog, LogConfig, ledger_file_name};
use crate::meta::{FileMetaStore, MetaStore};
use crate::position::Position;
use crate::storage::Storage;

use super::{Finding, TOPIC_FILE, describe};

/// One ledger of a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LedgerView {
    /// The ledger's id.
    pub id: u64,
    /// `"data"` for a ledger of entries, `"cursor"` for a cursor ledger an earlier release
    /// wrote.
    pub role: &'static str,
    /// Entries it holds.
    pub entries: u64,
    /// Bytes of its file.
    pub bytes: u64,
    /// Whether it is sealed (read-only, with a footer index).
    pub sealed: bool,
    /// Message index of its first entry (data ledgers).
    pub first_index: Option<u64>,
    /// Message index of its last entry (data ledgers).
    pub last_index: Option<u64>,
    /// Timestamp of its first entry (data ledgers).
    pub first_timestamp: Option<u64>,
    /// Timestamp of its last entry (data ledgers).
    pub last_timestamp: Option<u64>,
}

/// One cursor of a topic: its record, and the state a recovery reads from its files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CursorView {
    /// The cursor's name.
    pub name: String,
    /// Its metadata record's name (`cursor-{id}`).
    pub record: String,
    /// Everything at or below it is acknowledged (`None`: nothing is).
    pub mark_delete: Option<Position>,
    /// The cursor's epoch (raised by every seek or reset).
    pub epoch: u64,
    /// The cursor ledger its record names, if any.
    pub cursor_ledger: Option<u64>,
    /// Where the recovered state came from: `marker at L:E`, `snapshot at L:E`,
    /// `record (no holes)`, `store journal` (see [`JournalCursor`](super::JournalCursor) for a
    /// store cursor's), `topic journal (...)` for a cursor of the journal a topic opened alone
    /// hosts, or `record` when nothing could be recovered.
    pub state_source: String,
    /// Entries acknowledged above mark-delete.
    pub acked_entries: u64,
    /// Ranges those entries form.
    pub acked_ranges: u64,
    /// Bytes of its cursor ledger.
    pub persisted_bytes: u64,
    /// Newer states recovery passed over (torn or damaged).
    pub rejected_states: u64,
    /// Partitions the recovered marker carries inline (in its rows or index pages).
    pub partitions_inline: u64,
    /// Partitions in entries of their own.
    pub partitions_separate: u64,
    /// Index pages of the recovered marker.
    pub index_pages: u64,
    /// Entries acknowledged in part (batch-index acks) in the recovered state.
    pub partial_entries: u64,
    /// Messages acknowledged inside those entries.
    pub acked_batch_indexes: u64,
}

/// The ledgers and cursors of one topic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicView {
    /// Ledgers in id order.
    pub ledgers: Vec<LedgerView>,
    /// Cursors in the topic record's order.
    pub cursors: Vec<CursorView>,
}

fn finding(findings: &mut Vec<Finding>, file: String, place: &str, what: String) {
    findings.push(Finding {
        file,
        place: place.to_string(),
        problem: what,
        torn_tail: false,
    });
}

/// The topic record, `None` when there is none; an error when it cannot be read or decoded.
pub(super) fn read_topic(storage: &Arc<dyn Storage>) -> Result<Option<TopicRecord>> {
    Ok(crate::ledger::read_topic_record(&FileMetaStore::new(storage.clone()))?.map(|(_, r)| r))
}

/// [`crate::journal::check_listed`] of the cursor journal a topic opened alone hosts, as its
/// topic record `record` lists it (a record without a listing: no segment counts).
pub(super) fn check_hosted_journal(
    storage: &Arc<dyn Storage>,
    record: &TopicRecord,
) -> Result<crate::journal::JournalCheck> {
    let listing = record.journal.clone().unwrap_or_default();
    let seals: Vec<_> = listing
        .seals
        .iter()
        .map(|s| crate::journal::Seal::from(*s))
        .collect();
    crate::journal::check_listed(
        storage.as_ref(),
        &seals,
        Some(crate::journal::Listed {
            segments: &listing.segments,
            retired_through: listing.retired_through,
            closed: listing.closed.map(crate::journal::Seal::from),
        }),
    )
}

/// The committed state of every cursor `check` found in the journal a topic opened alone
/// hosts, named by its topic record `record`.
pub(super) fn hosted_journal_cursors(
    storage: &Arc<dyn Storage>,
    record: &TopicRecord,
    check: &crate::journal::JournalCheck,
) -> Vec<super::JournalCursor> {
    check
        .committed
        .iter()
        .filter_map(|id| {
            let name = record.cursors.iter().find(|c| c.id == id.cursor);
            super::JournalCursor::of(
                storage,
                check,
                *id,
                (None, name.map(|c| c.name.to_string())),
            )
        })
        .collect()
}

/// The views of `view`'s cursors whose state the journal a topic opened alone hosts holds
/// (`journal`, named by the topic record `record`) show that state: its open recovers them from
/// the journal, not from their record. The journal's summary counts partial entries, not the
/// messages acknowledged in them (0 here); ranges are 0 when a partition record could not be
/// read back.
pub(super) fn show_hosted_states(
    view: &mut TopicView,
    record: &TopicRecord,
    journal: &[super::JournalCursor],
) {
    for cv in &mut view.cursors {
        let id = record
            .cursors
            .iter()
            .find(|c| *c.name == *cv.name)
            .map(|c| c.id);
        let Some(j) = journal.iter().find(|j| Some(j.cursor_id) == id) else {
            continue;
        };
        cv.mark_delete = j.mark_delete;
        cv.epoch = j.epoch;
        cv.acked_entries = j.acked_entries;
        cv.acked_ranges = j.acked_ranges.unwrap_or(0);
        cv.partial_entries = j.partial_entries;
        cv.acked_batch_indexes = 0;
        cv.state_source = format!(
            "topic journal ({}segment {} at byte {})",
            if j.snapshot { "snapshot, " } else { "" },
            j.marker_segment,
            j.marker_offset
        );
    }
}

/// Reads record `name` and decodes it with `decode`, naming the record in a decode error;
/// `None` when there is no such record.
fn read_decoded<T>(
    meta: &dyn MetaStore,
    name: &str,
    decode: fn(&[u8]) -> std::result::Result<T, Corruption>,
) -> Result<Option<T>> {
    meta.get(name)?
        .map(|(_, bytes)| decode(&bytes).map_err(|c| c.in_record(name)))
        .transpose()
}

/// Reads the topic record, the ledgers and every cursor's persisted state, adding what is
/// wrong to `findings` instead of stopping at the first problem.
///
/// With `deep`, every entry of every cursor ledger is read and checked as well (for `verify`).
pub(super) fn collect(
    storage: &Arc<dyn Storage>,
    deep: bool,
    findings: &mut Vec<Finding>,
) -> TopicView {
    collect_in(storage, deep, findings, None)
}

/// What a store's open reads of one topic's cursor records (`ledger::open` and
/// `ledger::registry`), so that a check reports as damage only what that open refuses; or,
/// with `alone`, the open of a topic alone, for the cursors its own journal holds.
#[derive(Debug, Clone, Default)]
pub(super) struct StoreUse {
    /// Cursors the journal holds a committed state of: their open recovers them from the
    /// journal alone, and reads no cursor ledger their record names (the record itself only
    /// with `reads_every_record`).
    pub committed: BTreeSet<u64>,
    /// The topic's open reads (and decodes) every record of the topic: on a store, when a
    /// ledger file, or a creation cut short, that the topic record does not list needs the
    /// cursor records' references; a topic alone's open claims every record.
    pub reads_every_record: bool,
    /// A topic opened alone, whose journal holds `committed`: any other cursor is checked from
    /// its record and cursor ledger as its open reads them (a missing record is damage).
    pub alone: bool,
}

impl StoreUse {
    /// What a topic alone's open reads, its journal holding the state of the cursors of
    /// `journal`: it claims every cursor record, and reads no cursor ledger of those cursors.
    pub(super) fn alone(journal: &[super::JournalCursor]) -> Self {
        Self {
            committed: journal.iter().map(|j| j.cursor_id).collect(),
            reads_every_record: true,
            alone: true,
        }
    }
}

/// [`collect`] of a topic of a store (`store`), or of a topic directory (`None`). For a store's
/// topic, what its open does not read goes to `unused` instead of `findings`: the record and
/// cursor ledger of a cursor the journal holds (its record's bytes stay damage while the
/// topic's open reads every record), and a missing record of a cursor the journal does not
/// hold, which the store's open starts again with nothing acknowledged.
pub(super) fn collect_in(
    storage: &Arc<dyn Storage>,
    deep: bool,
    findings: &mut Vec<Finding>,
    mut store: Option<(&StoreUse, &mut Vec<Finding>)>,
) -> TopicView {
    // Every cursor record of the topic is read: from one listing, not one each.
    let meta: Arc<dyn MetaStore> = Arc::new(FileMetaStore::listed_once(storage.clone()));
    let topic = match crate::ledger::read_topic_record(meta.as_ref()) {
        Ok(topic) => topic.map(|(_, r)| r),
        Err(e) => {
            // The topic record, or the chunk record of its cursor table the error names.
            let file = match &e {
                crate::error::Error::Corrupted {
                    place: crate::error::CorruptionPlace::Record(record),
                    ..
                } => format!("{record}.meta"),
                _ => TOPIC_FILE.into(),
            };
            finding(findings, file, "topic record", describe(&e));
            None
        }
    };
    let log = match EntryLog::open_read_only(storage.clone(), LogConfig::default()) {
        Ok(log) => Some(Arc::new(log)),
        Err(e) => {
            if findings.is_empty() {
                finding(findings, storage.location(), "entry log", describe(&e));
            }
            None
        }
    };
    let mut view = TopicView::default();
    for entry in topic.iter().flat_map(|t| t.cursors.iter()) {
        let topic_id = topic.as_ref().map_or(0, |t| t.topic_id);
        let cv = match store.as_mut() {
            Some((usage, unused)) => store_cursor_view(
                log.as_ref(),
                &meta,
                (entry, topic_id),
                deep,
                usage,
                findings,
                unused,
            ),
            None => cursor_view(log.as_ref(), &meta, (entry, topic_id), deep, findings),
        };
        if let Some(cv) = cv {
            view.cursors.push(cv);
        }
    }
    let cursor_ledgers: Vec<u64> = view
        .cursors
        .iter()
        .filter_map(|c| c.cursor_ledger)
        .collect();
    if let Some(log) = &log {
        view.ledgers = log
            .ledger_ids()
            .into_iter()
            .filter_map(|id| ledger_view(log, id, cursor_ledgers.contains(&id)))
            .collect();
    }
    view
}

fn ledger_view(log: &EntryLog, id: u64, is_cursor: bool) -> Option<LedgerView> {
    let info = log.ledger_info(id).ok()?;
    // Cursor ledgers carry no message index or time; only data ledgers show them.
    let meta_at = |e: u64| {
        (!is_cursor && info.entries > e)
            .then(|| log.read_meta(id, e).ok())
            .flatten()
    };
    let first = meta_at(0);
    let last = info.entries.checked_sub(1).and_then(meta_at);
    Some(LedgerView {
        id,
        role: if is_cursor { "cursor" } else { "data" },
        entries: info.entries,
        bytes: info.bytes,
        sealed: info.sealed,
        first_index: first.map(|m| m.index),
        last_index: last.map(|m| m.index),
        first_timestamp: first.map(|m| m.timestamp),
        last_timestamp: last.map(|m| m.timestamp),
    })
}

/// Partial entries and the messages acknowledged inside them.
fn batch_counts(batch: &[crate::format::cursor::BatchPartition]) -> (u64, u64) {
    let entries = batch.iter().flat_map(|p| &p.entries);
    (
        entries.clone().count() as u64,
        entries.map(|e| e.acked.len()).sum(),
    )
}

/// [`cursor_view`] of a cursor of a store's topic: its findings are damage or unused as the
/// store's open reads its files (see [`collect_in`]).
#[allow(
    clippy::too_many_arguments,
    reason = "the cursor, where it lives, and the two lists"
)]
fn store_cursor_view(
    log: Option<&Arc<EntryLog>>,
    meta: &Arc<dyn MetaStore>,
    (entry, topic_id): (&CursorEntry, u64),
    deep: bool,
    usage: &StoreUse,
    findings: &mut Vec<Finding>,
    unused: &mut Vec<Finding>,
) -> Option<CursorView> {
    let name = record_name(entry.id);
    let file = format!("{name}.meta");
    let journal = if usage.alone {
        "the topic's journal"
    } else {
        "the store's journal"
    };
    if usage.alone && !usage.committed.contains(&entry.id) {
        return cursor_view(log, meta, (entry, topic_id), deep, findings);
    }
    if !usage.committed.contains(&entry.id) {
        // Read by the cursor's open: a damaged record is refused; a missing one starts the
        // cursor again with nothing acknowledged (nothing of it was flushed to the journal).
        if matches!(meta.get(&name), Ok(None)) {
            finding(
                unused,
                file,
                "cursor record",
                "missing, although the topic record lists it: the journal holds nothing of \
                 this cursor, so the store's open starts it again with nothing acknowledged"
                    .into(),
            );
            return None;
        }
        return cursor_view(log, meta, (entry, topic_id), deep, findings);
    }
    // Recovered from the journal alone. Its record's bytes are read only while the topic's
    // open reads every record (and a record of another cursor is not refused there). A topic
    // alone's cursor records bind their identity, and one found under another cursor's name
    // is damage there as for a cursor on a ledger; the ledger such a record names is not read.
    let journal_view = || CursorView {
        name: entry.name.to_string(),
        record: name.clone(),
        state_source: if usage.alone {
            "topic journal".into()
        } else {
            "store journal".into()
        },
        ..CursorView::default()
    };
    if usage.reads_every_record {
        let read = read_decoded(meta.as_ref(), &name, CursorRecord::decode);
        let problem = match read {
            Err(e) => Some(describe(&e)),
            Ok(Some(r)) if usage.alone => r
                .check_identity(entry.id, &entry.name, topic_id)
                .err()
                .map(|e| describe(&e)),
            Ok(_) => None,
        };
        if let Some(problem) = problem {
            let why = if usage.alone {
                "the topic's open claims every cursor record"
            } else {
                "the topic's open reads it because a ledger file is not in the topic record"
            };
            finding(findings, file, "cursor record", format!("{problem}; {why}"));
            if usage.alone {
                return Some(journal_view());
            }
        }
    }
    let mut found = Vec::new();
    let cv = cursor_view(log, meta, (entry, topic_id), deep, &mut found);
    unused.extend(found.into_iter().map(|f| {
        // What `cursor_view` says of a missing record assumes the journal holds nothing.
        let problem = if f.problem.starts_with(LISTED_RECORD_MISSING) {
            LISTED_RECORD_MISSING
        } else {
            &f.problem
        };
        Finding {
            problem: format!("{problem}; not read: {journal} holds this cursor's state"),
            ..f
        }
    }));
    Some(cv.unwrap_or_else(journal_view))
}

/// How a cursor record the topic record lists, but whose file is gone, is reported first.
const LISTED_RECORD_MISSING: &str = "missing, although the topic record lists it";

fn cursor_view(
    log: Option<&Arc<EntryLog>>,
    meta: &Arc<dyn MetaStore>,
    (entry, topic_id): (&CursorEntry, u64),
    deep: bool,
    findings: &mut Vec<Finding>,
) -> Option<CursorView> {
    let name = record_name(entry.id);
    let file = format!("{name}.meta");
    let read = read_decoded(meta.as_ref(), &name, CursorRecord::decode).and_then(|r| match r {
        Some(r) => r
            .check_identity(entry.id, &entry.name, topic_id)
            .map(|()| Some(r)),
        None => Ok(None),
    });
    let record = match read {
        Ok(Some(r)) => r,
        Ok(None) => {
            finding(
                findings,
                file,
                "cursor record",
                format!(
                    "{LISTED_RECORD_MISSING}, and the journal holds nothing of this cursor: no \
                     power cut leaves that on a topic opened alone (it writes a cursor's record \
                     before listing it, and unlists it before deleting the record), so the \
                     topic's open refuses it rather than start the cursor again"
                ),
            );
            return None;
        }
        Err(e) => {
            finding(findings, file, "cursor record", describe(&e));
            return None;
        }
    };
    let mut cv = CursorView {
        name: entry.name.to_string(),
        record: name.clone(),
        mark_delete: Some(record.mark_delete).filter(|p| *p != NO_MARK_DELETE),
        epoch: record.epoch,
        cursor_ledger: record.cursor_ledger,
        state_source: "record".into(),
        ..CursorView::default()
    };
    let log = log?;
    let mut rec = match recover(log.clone(), meta.clone(), &name, &CursorConfig::default()) {
        Ok(rec) => rec,
        Err(e) => {
            finding(findings, file, "cursor state", describe(&e));
            return Some(cv);
        }
    };
    cv.state_source = match rec.report.source {
        RecoverySource::Marker(p) => format!("marker at {p}"),
        RecoverySource::Snapshot(p) => format!("snapshot at {p}"),
        RecoverySource::Record => "record (no holes)".into(),
        RecoverySource::Journal => "store journal".into(),
    };
    cv.mark_delete = Some(rec.state.mark_delete).filter(|p| *p != NO_MARK_DELETE);
    cv.acked_entries = rec.acks.len();
    match rec.acks.range_count() {
        Ok(n) => cv.acked_ranges = n,
        Err(e) => finding(findings, file.clone(), "cursor state", describe(&e)),
    }
    cv.rejected_states = rec.report.rejected;
    let table = rec.source.table_shape();
    (cv.partitions_inline, cv.partitions_separate, cv.index_pages) =
        (table.inline, table.separate, table.pages);
    match rec.batch.partitions() {
        Ok(batch) => (cv.partial_entries, cv.acked_batch_indexes) = batch_counts(&batch),
        Err(e) => finding(findings, file.clone(), "cursor state", describe(&e)),
    }
    let cursor_ledger = record.cursor_ledger;
    cv.persisted_bytes = cursor_ledger
        .and_then(|l| log.ledger_info(l).ok())
        .map_or(0, |i| i.bytes);
    if let Some(why) = rec.report.first_rejection {
        let where_ = cursor_ledger.map_or_else(|| file.clone(), ledger_file_name);
        finding(
            findings,
            where_,
            "cursor state",
            format!("a newer state was refused: {why}"),
        );
    }
    if rec.report.ledger_missing {
        finding(
            findings,
            file.clone(),
            "cursor record",
            "its cursor ledger is missing".into(),
        );
    }
    if let (true, Some(l)) = (deep, cursor_ledger) {
        check_ledger_deeply(log, l, findings);
    }
    Some(cv)
}

/// Every entry of cursor ledger `l` checked (`check_cursor_ledger`), each problem a finding.
fn check_ledger_deeply(log: &Arc<EntryLog>, l: u64, findings: &mut Vec<Finding>) {
    match check_cursor_ledger(log, l) {
        Ok(check) => {
            for problem in check.problems {
                finding(
                    findings,
                    ledger_file_name(l),
                    &format!("cursor ledger {l} entry {}", problem.entry),
                    problem.reason,
                );
            }
        }
        Err(e) => finding(findings, ledger_file_name(l), "cursor ledger", describe(&e)),
    }
}

//! `ackstore inspect DIR`: the ledgers and cursors of a topic directory, as a table or JSON.
//!
//! Read-only: it opens the directory without taking the owner's lock, never truncates a torn
//! tail and never writes a record, so it can look at a directory no process owns. It does not
//! coordinate with a live owner either: run it on a directory whose owner is stopped for an
//! exact picture.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use ackstore::CursorConfig;
use ackstore::Storage;
use ackstore::internals::cursor::persist::TableShape;
use ackstore::internals::cursor::recover::{RecoverySource, recover};
use ackstore::internals::cursor::verify::check_cursor_ledger;
use ackstore::internals::cursor::{NO_MARK_DELETE, record_name};
use ackstore::internals::format::Corruption;
use ackstore::internals::format::meta::{CursorEntry, CursorRecord, TopicRecord};
use ackstore::internals::log::{EntryLog, LogConfig, ledger_file_name};
use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::{Position, Result};
use clap::Args;

use crate::{dir, report};

/// Arguments of `ackstore inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The topic directory to inspect.
    dir: PathBuf,
    /// Where the topic lives (a directory by default).
    #[command(flatten)]
    storage: crate::target::StorageArgs,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

/// A problem found while collecting, with its place.
#[derive(Debug, Clone)]
pub struct Finding {
    /// The file concerned.
    pub file: String,
    /// Where in it.
    pub place: String,
    /// What is wrong.
    pub what: String,
    /// A torn tail the next open repairs, rather than damage.
    pub torn_tail: bool,
}

/// One ledger of the directory.
#[derive(Debug, Clone)]
pub struct LedgerView {
    id: u64,
    role: &'static str,
    entries: u64,
    bytes: u64,
    sealed: bool,
    first_index: Option<u64>,
    last_index: Option<u64>,
    first_timestamp: Option<u64>,
    last_timestamp: Option<u64>,
}

/// One cursor of the directory.
#[derive(Debug, Clone, Default)]
pub struct CursorView {
    name: String,
    record: String,
    mark_delete: Option<Position>,
    epoch: u64,
    cursor_ledger: Option<u64>,
    state_source: String,
    acked_entries: u64,
    acked_ranges: u64,
    persisted_bytes: u64,
    rejected_states: u64,
    /// How the recovered marker lists the partitions: inline in its rows or pages, in entries of
    /// their own, and over how many index pages.
    table: TableShape,
    /// Entries acknowledged in part (batch-index acks) in the recovered state.
    partial_entries: u64,
    /// Messages acknowledged inside those entries.
    acked_batch_indexes: u64,
}

/// Everything `inspect` shows.
#[derive(Debug, Default)]
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
        what,
        torn_tail: false,
    });
}

/// Reads the topic record, the ledgers and every cursor's persisted state, adding what is
/// wrong to `findings` instead of stopping at the first problem.
///
/// With `deep`, every entry of every cursor ledger is read and checked as well (for `verify`).
/// The topic record, `None` when there is none; an error when it cannot be read or decoded.
pub fn read_topic(storage: &Arc<dyn Storage>) -> Result<Option<TopicRecord>> {
    read_decoded(
        &FileMetaStore::new(storage.clone()),
        "topic",
        TopicRecord::decode,
    )
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

pub fn collect(storage: &Arc<dyn Storage>, deep: bool, findings: &mut Vec<Finding>) -> TopicView {
    collect_in(storage, deep, findings, None)
}

/// What a store's open reads of one topic's cursor records (`ledger::open` and
/// `ledger::registry`), so that a check reports as damage only what that open refuses.
#[derive(Debug, Clone, Default)]
pub struct StoreUse {
    /// Cursors the store's journal holds a committed state of: their open recovers them from
    /// the journal alone, and reads neither their record nor a cursor ledger it names.
    pub committed: BTreeSet<u64>,
    /// The topic's open reads (and decodes) every record of the topic: a ledger file, or a
    /// creation cut short, that the topic record does not list needs the cursor records'
    /// references.
    pub reads_every_record: bool,
}

/// [`collect`] of a topic of a store (`store`), or of a topic directory (`None`). For a store's
/// topic, what its open does not read goes to `unused` instead of `findings`: the record and
/// cursor ledger of a cursor the journal holds (its record's bytes stay damage while the
/// topic's open reads every record), and a missing record of a cursor the journal does not
/// hold, which the store's open starts again at its initial position.
pub fn collect_in(
    storage: &Arc<dyn Storage>,
    deep: bool,
    findings: &mut Vec<Finding>,
    mut store: Option<(&StoreUse, &mut Vec<Finding>)>,
) -> TopicView {
    let meta: Arc<dyn MetaStore> = Arc::new(FileMetaStore::new(storage.clone()));
    let topic = match read_decoded(meta.as_ref(), "topic", TopicRecord::decode) {
        Ok(topic) => topic,
        Err(e) => {
            finding(
                findings,
                dir::TOPIC_FILE.into(),
                "topic record",
                report::describe(&e),
            );
            None
        }
    };
    let log = match EntryLog::open_read_only(storage.clone(), LogConfig::default()) {
        Ok(log) => Some(Arc::new(log)),
        Err(e) => {
            if findings.is_empty() {
                finding(
                    findings,
                    storage.location(),
                    "entry log",
                    report::describe(&e),
                );
            }
            None
        }
    };
    let mut view = TopicView::default();
    for entry in topic.iter().flat_map(|t| &t.cursors) {
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
fn batch_counts(batch: &[ackstore::internals::format::cursor::BatchPartition]) -> (u64, u64) {
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
    if !usage.committed.contains(&entry.id) {
        // Read by the cursor's open: a damaged record is refused; a missing one starts the
        // cursor again at its initial position (nothing of it was flushed to the journal).
        if matches!(meta.get(&name), Ok(None)) {
            finding(
                unused,
                file,
                "cursor record",
                "missing, although the topic record lists it: the journal holds nothing of \
                 this cursor, so the store's open starts it again at its initial position"
                    .into(),
            );
            return None;
        }
        return cursor_view(log, meta, (entry, topic_id), deep, findings);
    }
    // Recovered from the journal alone. Its record's bytes are read only while the topic's
    // open reads every record (and a record of another cursor is not refused there).
    if usage.reads_every_record
        && let Err(e) = read_decoded(meta.as_ref(), &name, CursorRecord::decode)
    {
        finding(
            findings,
            file,
            "cursor record",
            format!(
                "{}; the topic's open reads it because a ledger file is not in the topic record",
                report::describe(&e)
            ),
        );
    }
    let mut found = Vec::new();
    let cv = cursor_view(log, meta, (entry, topic_id), deep, &mut found);
    unused.extend(found.into_iter().map(|f| Finding {
        what: format!(
            "{}; not read: the store's journal holds this cursor's state",
            f.what
        ),
        ..f
    }));
    Some(cv.unwrap_or_else(|| CursorView {
        name: entry.name.clone(),
        record: name,
        state_source: "store journal".into(),
        ..CursorView::default()
    }))
}

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
                "missing, although the topic record lists it".into(),
            );
            return None;
        }
        Err(e) => {
            finding(findings, file, "cursor record", report::describe(&e));
            return None;
        }
    };
    let mut cv = CursorView {
        name: entry.name.clone(),
        record: name.clone(),
        mark_delete: Some(record.mark_delete).filter(|p| *p != NO_MARK_DELETE),
        epoch: record.epoch,
        cursor_ledger: record.cursor_ledger,
        state_source: "record".into(),
        ..CursorView::default()
    };
    let log = log?;
    let mut rec = match recover(log.clone(), meta.clone(), &name, CursorConfig::default()) {
        Ok(rec) => rec,
        Err(e) => {
            finding(findings, file, "cursor state", report::describe(&e));
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
        Err(e) => finding(findings, file.clone(), "cursor state", report::describe(&e)),
    }
    cv.rejected_states = rec.report.rejected;
    cv.table = rec.persister.table_shape();
    match rec.batch.partitions() {
        Ok(batch) => (cv.partial_entries, cv.acked_batch_indexes) = batch_counts(&batch),
        Err(e) => finding(findings, file.clone(), "cursor state", report::describe(&e)),
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
        Err(e) => finding(
            findings,
            ledger_file_name(l),
            "cursor ledger",
            report::describe(&e),
        ),
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

/// Runs `ackstore inspect`.
pub fn run(args: &InspectArgs) -> Result<ExitCode> {
    let storage = dir::open_existing(&args.dir, &args.storage)?;
    if let Some(catalog) = ackstore::internals::store::read_catalog(storage.clone())? {
        return run_store(args, &storage, &catalog);
    }
    // Without a readable topic record the tables would be empty, not true: exit 2.
    read_topic(&storage)?;
    let mut findings = Vec::new();
    let view = collect(&storage, false, &mut findings);
    if args.json {
        print_json(&view, &findings);
    } else {
        print_tables(&view, &findings);
    }
    Ok(ExitCode::SUCCESS)
}

/// `inspect` of a store directory: every topic of the catalog (its ledgers and cursors) and the
/// cursor journal's segments, records and committed cursors. Read-only.
fn run_store(
    args: &InspectArgs,
    storage: &Arc<dyn Storage>,
    catalog: &ackstore::internals::format::store::Catalog,
) -> Result<ExitCode> {
    let journal = ackstore::internals::store::journal::check_listed(
        storage.as_ref(),
        &ackstore::internals::store::journal_seals(catalog),
        ackstore::internals::store::journal_listing(catalog),
    )?;
    let mut topics = Vec::new();
    for topic in &catalog.topics {
        let space = ackstore::internals::store::topic_storage(storage, catalog, topic.id)?;
        let mut findings = Vec::new();
        let view = collect(&space, false, &mut findings);
        topics.push((topic, view.ledgers.len(), view.cursors.len()));
    }
    if args.json {
        let list: Vec<_> = topics
            .iter()
            .map(|(t, l, c)| serde_json::json!({"id": t.id, "name": t.name, "ledgers": l, "cursors": c}))
            .collect();
        let report = serde_json::json!({
            "store": true,
            "store_id": catalog.store_id,
            "topics": list,
            "journal": {
                "segments": journal.segments, "records": journal.records,
                "cursors": journal.cursors, "torn_tail": journal.torn_tail.is_some(),
                "batch_partitions": journal.batch_partitions,
                "partial_entries": journal.partial_entries,
            },
        });
        println!("{report}");
    } else {
        println!("store {:016x}: {} topics", catalog.store_id, topics.len());
        println!("{:>8}  {:>8}  {:>8}  name", "topic", "ledgers", "cursors");
        for (t, l, c) in &topics {
            println!("{:>8}  {:>8}  {:>8}  {}", t.id, l, c, t.name.escape_debug());
        }
        println!(
            "cursor journal: {} segments, {} records, {} cursors committed \
             ({} partial entries in {} batch records){}",
            journal.segments,
            journal.records,
            journal.cursors,
            journal.partial_entries,
            journal.batch_partitions,
            if journal.torn_tail.is_some() {
                ", a torn tail the next open cuts back"
            } else {
                ""
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn print_json(view: &TopicView, findings: &[Finding]) {
    let ledgers: Vec<_> = view
        .ledgers
        .iter()
        .map(|l| {
            serde_json::json!({
                "id": l.id, "role": l.role, "entries": l.entries, "bytes": l.bytes,
                "sealed": l.sealed, "first_index": l.first_index, "last_index": l.last_index,
                "first_timestamp": l.first_timestamp, "last_timestamp": l.last_timestamp,
            })
        })
        .collect();
    let cursors: Vec<_> = view
        .cursors
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name, "record": c.record,
                "mark_delete": c.mark_delete.map(|p| p.to_string()),
                "epoch": c.epoch, "cursor_ledger": c.cursor_ledger, "state": c.state_source,
                "acked_entries": c.acked_entries, "acked_ranges": c.acked_ranges,
                "persisted_bytes": c.persisted_bytes, "rejected_states": c.rejected_states,
                "partitions_inline": c.table.inline, "partitions_separate": c.table.separate,
                "index_pages": c.table.pages,
                "partial_entries": c.partial_entries,
                "acked_batch_indexes": c.acked_batch_indexes,
            })
        })
        .collect();
    let problems: Vec<_> = findings
        .iter()
        .map(|f| serde_json::json!({"file": f.file, "place": f.place, "problem": f.what}))
        .collect();
    println!(
        "{}",
        serde_json::json!({ "ledgers": ledgers, "cursors": cursors, "problems": problems })
    );
}

fn print_tables(view: &TopicView, findings: &[Finding]) {
    let rows: Vec<Vec<String>> = view
        .ledgers
        .iter()
        .map(|l| {
            vec![
                l.id.to_string(),
                l.role.into(),
                l.entries.to_string(),
                report::bytes(l.bytes),
                if l.sealed {
                    "sealed".into()
                } else {
                    "open".into()
                },
                format!("{}..{}", opt(l.first_index), opt(l.last_index)),
                format!("{}..{}", opt(l.first_timestamp), opt(l.last_timestamp)),
            ]
        })
        .collect();
    println!("ledgers");
    print!(
        "{}",
        report::table(
            &["id", "role", "entries", "bytes", "state", "index", "time"],
            &rows
        )
    );
    let rows: Vec<Vec<String>> = view
        .cursors
        .iter()
        .map(|c| {
            vec![
                format!("{:?}", c.name),
                opt(c.mark_delete),
                c.acked_ranges.to_string(),
                c.acked_entries.to_string(),
                format!("{}/{}", c.partial_entries, c.acked_batch_indexes),
                opt(c.cursor_ledger),
                c.state_source.clone(),
                report::bytes(c.persisted_bytes),
                format!(
                    "{} inline/{} own/{} pages",
                    c.table.inline, c.table.separate, c.table.pages
                ),
                c.epoch.to_string(),
            ]
        })
        .collect();
    println!("\ncursors");
    print!(
        "{}",
        report::table(
            &[
                "name",
                "mark-delete",
                "ranges",
                "acked",
                "partial/msgs",
                "cursor ledger",
                "state from",
                "persisted",
                "partitions",
                "epoch"
            ],
            &rows
        )
    );
    for f in findings {
        println!("problem: {}: {}: {}", f.file, f.place, f.what);
    }
}

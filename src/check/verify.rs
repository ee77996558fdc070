//! `verify`: every file of a topic or a store checked as its owner's open reads it, so that
//! what open refuses is reported as damage, and what a kill or power cut leaves (a torn tail, a
//! stray segment, a creation cut short) is not.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::cursor::record_name;
use crate::error::{CorruptionKind, CorruptionPlace, Error, Result};
use crate::format::journal::JournalLoc;
use crate::format::meta::TopicRecord;
use crate::format::store::Catalog;
use crate::journal::JournalCheck;
use crate::journal::index::CursorId;
use crate::log::{EntryLog, LogConfig, damage_relied_on, ledger_file_name, verify_log};
use crate::meta::{FileMetaStore, MetaStore, record_of_file};
use crate::position::Position;
use crate::storage::Storage;

use super::topic::{StoreUse, collect_in, read_topic};
use super::{Finding, Subject, TOPIC_FILE, Verification, describe};

/// The findings of topic `topic_id` of the store of id `store_id`, kept in `storage`: damage
/// (what the store's open of the topic and its cursors refuses) and unused (damaged or
/// unexpected files that open does not read, or removes: warnings), and its ledger and cursor
/// counts. `committed`: the cursors of the store the journal holds.
fn check_store_topic(
    storage: &Arc<dyn Storage>,
    (topic_id, store_id): (u64, u64),
    (committed, marks): (&[CursorId], &BTreeMap<CursorId, Position>),
) -> Result<(Vec<Finding>, Vec<Finding>, usize, usize)> {
    let record = read_topic(storage).ok().flatten();
    let mut unused = Vec::new();
    let mut findings = ledger_findings(storage, record.as_ref(), &mut unused)?;
    let topic_marks: Vec<Position> = (marks.iter())
        .filter(|(c, _)| c.topic == topic_id)
        .map(|(_, m)| *m)
        .collect();
    check_against_record(storage, &topic_marks, &mut findings)?;
    // The store's open refuses a topic record of another host first.
    if let Some(Err(e)) = record
        .as_ref()
        .map(|r| crate::ledger::check_store_host(r, store_id))
    {
        findings.push(Finding {
            file: TOPIC_FILE.into(),
            place: "topic record".into(),
            problem: describe(&e),
            torn_tail: false,
        });
    }
    let committed: BTreeSet<u64> = committed
        .iter()
        .filter(|c| c.topic == topic_id)
        .map(|c| c.cursor)
        .collect();
    let reads_every_record = match &record {
        Some(r) => check_ids(storage, r, &committed, &mut findings)?,
        None => false,
    };
    let usage = StoreUse {
        committed,
        reads_every_record,
        alone: false,
    };
    let topic = collect_in(storage, true, &mut findings, Some((&usage, &mut unused)));
    if let Some(record) = &record {
        check_other_records(storage, record, &usage, &mut findings, &mut unused)?;
        superseded_ledgers_unused(storage, record, &usage, (&mut findings, &mut unused));
    }
    Ok((findings, unused, topic.ledgers.len(), topic.cursors.len()))
}

/// The ledger files of a store's topic and the cursors the journal holds of it (`committed`)
/// against its record, as the store's open reads them: a ledger file (or a creation cut
/// short) at or above the record's next ledger id, or a cursor at or above its next cursor id,
/// shows an older version of the record (rule 6 of `ledger::open`: damage, a finding on the
/// topic record). Returns whether the open reads every record (rule 3, `cursor_references`):
/// a ledger file, or a creation cut short, that the record does not list.
fn check_ids(
    storage: &Arc<dyn Storage>,
    record: &TopicRecord,
    committed: &BTreeSet<u64>,
    findings: &mut Vec<Finding>,
) -> Result<bool> {
    let log = EntryLog::open_read_only(storage.clone(), LogConfig::default())?;
    let on_disk: BTreeSet<u64> = log.ledger_ids().into_iter().collect();
    let interrupted = log.interrupted_creates();
    let older = crate::ledger::refuse_older_record(record, &log, committed.iter().copied());
    if let Err(e) = older {
        findings.push(Finding {
            file: TOPIC_FILE.into(),
            place: "topic record".into(),
            problem: describe(&e),
            torn_tail: false,
        });
    }
    let listed: BTreeSet<u64> = record.ledgers.iter().map(|l| l.id).collect();
    Ok(on_disk
        .iter()
        .chain(&interrupted)
        .any(|id| !listed.contains(id)))
}

/// The records of a store's topic besides its topic record and its listed cursors' records, as
/// its open treats them: a cursor record of an id the topic record does not list is read and
/// removed (damage when it cannot be read; a warning otherwise); any other record is read only
/// while the open reads every record.
fn check_other_records(
    storage: &Arc<dyn Storage>,
    record: &TopicRecord,
    usage: &StoreUse,
    findings: &mut Vec<Finding>,
    unused: &mut Vec<Finding>,
) -> Result<()> {
    let meta = FileMetaStore::listed_once(storage.clone());
    let listed: BTreeSet<String> = record.cursors.iter().map(|c| record_name(c.id)).collect();
    let mut names: Vec<String> = storage
        .list()?
        .iter()
        .filter_map(|f| record_of_file(f).map(str::to_owned))
        .collect();
    names.sort_unstable();
    names.dedup();
    for name in names {
        // The chunk records of the cursor table and of the ledgers are read with the topic
        // record, or leftovers.
        if name == "topic"
            || listed.contains(&name)
            || crate::format::meta::is_topic_chunk_record(&name)
        {
            continue;
        }
        let orphan = crate::cursor::is_record_like(&name);
        let file = format!("{name}.meta");
        // What the topic's open refuses (`ledger::open`): on a store a creation lists a cursor
        // before writing its record, a deletion removes the record first. Only the name the
        // open reads for an id (`cursor-{id}`, no leading zero) counts.
        let table_lost_it =
            crate::cursor::record_id(&name).is_some_and(|id| id < record.next_cursor_id);
        let problem = match meta.get(&name) {
            Ok(Some(_)) if table_lost_it => {
                findings.push(Finding {
                    file: TOPIC_FILE.into(),
                    place: "topic record".into(),
                    problem: describe(&Error::corrupted_at(
                        CorruptionPlace::Record("topic".into()),
                        CorruptionKind::InvalidField(crate::format::journal::UNLISTED_CURSOR),
                    )),
                    torn_tail: false,
                });
                continue;
            }
            Ok(_) if orphan => Some((
                false,
                "a cursor record the topic record does not list (a creation cut short, or a \
                 deleted cursor): the next open of the topic removes it"
                    .to_string(),
            )),
            Ok(_) => None,
            Err(e) => Some((orphan || usage.reads_every_record, describe(&e))),
        };
        if let Some((damage, what)) = problem {
            let place = if orphan { "cursor record" } else { "record" };
            let list = if damage { &mut *findings } else { &mut *unused };
            list.push(Finding {
                file,
                place: place.into(),
                problem: what,
                torn_tail: false,
            });
        }
    }
    Ok(())
}

/// Every topic of the store's catalog checked ([`check_store_topic`]), its findings named as
/// its files are in the store directory (`t{id}/...` or `t{id}-...`); returns the ledger and
/// cursor counts.
fn check_store_topics(
    storage: &Arc<dyn Storage>,
    catalog: &Catalog,
    committed: (&[CursorId], &BTreeMap<CursorId, Position>),
    findings: &mut Vec<Finding>,
    unused: &mut Vec<Finding>,
) -> Result<(usize, usize)> {
    let (mut ledgers, mut cursors) = (0, 0);
    for topic in &catalog.topics {
        let space = match crate::store::topic_storage(storage, catalog, topic.id) {
            Ok(space) => space,
            Err(e) => {
                // A topic the catalog lists whose directory is gone: the store refuses to open
                // the topic, so this is damage.
                findings.push(Finding {
                    file: crate::store::topic_file(storage, catalog, topic.id, ""),
                    place: format!("topic {}", topic.id),
                    problem: e.to_string(),
                    torn_tail: false,
                });
                continue;
            }
        };
        let (found, not_read, l, c) =
            check_store_topic(&space, (topic.id, catalog.store_id), committed)?;
        ledgers += l;
        cursors += c;
        let in_store = |f: Finding| Finding {
            file: crate::store::topic_file(storage, catalog, topic.id, &f.file),
            ..f
        };
        findings.extend(found.into_iter().map(in_store));
        unused.extend(not_read.into_iter().map(in_store));
        unused.extend(metadata_leftovers(&space, None)?.into_iter().map(in_store));
        unused.extend(chunk_leftovers(&space)?.into_iter().map(in_store));
    }
    Ok((ledgers, cursors))
}

/// The chunk records of the cursor table and of the ledgers in `storage` (a topic's files) that its topic
/// record does not pin (when it reads), besides the metadata leftovers reported already
/// ([`metadata_leftovers`]): what a creation or a deletion cut short, refused or superseded
/// left (or a roll or a trim), which no open reads and the topic's next open removes.
fn chunk_leftovers(storage: &Arc<dyn Storage>) -> Result<Vec<Finding>> {
    let Ok(Some(record)) = read_topic(storage) else {
        return Ok(Vec::new());
    };
    let listed = storage.list()?;
    let reported = crate::meta::FileMetaStore::new(storage.clone()).leftovers()?;
    Ok(crate::ledger::chunk_leftovers(&listed, &record)
        .into_iter()
        .filter(|file| !reported.contains(file))
        .map(|file| Finding {
            file,
            place: "topic record chunk".into(),
            problem: "left by a cursor creation or deletion, or a ledger roll or trim, cut \
                      short, refused or superseded; the topic record does not pin it, no open \
                      reads it, and the topic's next open removes it"
                .into(),
            torn_tail: false,
        })
        .collect())
}

/// The files a metadata write or a cursor's deletion cut short left in `storage` (a topic's
/// files), which no open reads and the topic's next open (or its owner's next metadata write)
/// removes (`FileMetaStore::leftovers`): leftovers, not damage. On a topic of its own (`record`
/// its topic record) the open sweeps no file of a cursor its table lists
/// (`ledger::swept_by_open`): a tombstone there is a damaged record no power cut leaves, which
/// the open keeps and the owner's next metadata write removes; reported as such.
fn metadata_leftovers(
    storage: &Arc<dyn Storage>,
    alone: Option<&TopicRecord>,
) -> Result<Vec<Finding>> {
    let files = crate::meta::FileMetaStore::new(storage.clone()).leftovers()?;
    let swept = alone.map(|record| crate::ledger::swept_by_open(record, false));
    Ok(files
        .into_iter()
        .map(|file| {
            let (place, problem) = if swept.as_ref().is_none_or(|swept| swept(&file)) {
                (
                    "metadata record",
                    "left by a write or a deletion cut short; no open reads it, and the \
                     topic's next open removes it",
                )
            } else {
                (
                    "cursor record",
                    "reads as deleted although the topic record lists the cursor, which no \
                     power cut leaves on a topic opened alone (a damaged record, or an older \
                     topic record): the open keeps the cursor (its state from the journal; \
                     one the journal holds nothing of is refused as missing) and these files \
                     until the topic's next metadata write removes them",
                )
            };
            Finding {
                file,
                place: place.into(),
                problem: problem.into(),
                torn_tail: false,
            }
        })
        .collect())
}

/// What the store's open of each listed cursor the journal holds checks: the name the
/// journal's state binds is the cursor's (a topic record whose cursor ids were swapped or
/// moved would hand one cursor's acks to another).
fn check_journal_names(
    storage: &Arc<dyn Storage>,
    catalog: &Catalog,
    names: &BTreeMap<CursorId, (u32, JournalLoc)>,
    findings: &mut Vec<Finding>,
) {
    use crate::format::journal::{OTHER_CURSORS_STATE, name_tag};
    for topic in &catalog.topics {
        let Ok(space) = crate::store::topic_storage(storage, catalog, topic.id) else {
            continue;
        };
        let Ok(Some(record)) = read_topic(&space) else {
            continue;
        };
        for entry in record.cursors.iter() {
            let id = CursorId {
                topic: topic.id,
                cursor: entry.id,
            };
            if let Some((bound, at)) = names.get(&id)
                && *bound != 0
                && *bound != name_tag(&topic.name, &entry.name)
            {
                findings.push(Finding {
                    file: crate::journal::segment_name(at.segment),
                    place: format!(
                        "journal segment {} at byte {} (cursor {:?} of topic {:?})",
                        at.segment, at.offset, entry.name, topic.name
                    ),
                    problem: OTHER_CURSORS_STATE.into(),
                    torn_tail: false,
                });
            }
        }
    }
}

/// What the owner's open checks between the topic record and the ledger files, as damage:
/// a missing record beside ledger files, a recorded ledger whose file is missing or holds less
/// than a header, or fewer entries than the record counts. Entries beyond a recorded count (a
/// fenced owner's appends) are what open ignores, and are not damage.
fn check_against_record(
    storage: &Arc<dyn Storage>,
    marks: &[Position],
    findings: &mut Vec<Finding>,
) -> Result<()> {
    let mut damage = |file: String, place: String, problem: String| {
        findings.push(Finding {
            file,
            place,
            problem,
            torn_tail: false,
        });
    };
    let record = match read_topic(storage) {
        Ok(Some(record)) => record,
        // No record and no ledger file: a topic created but never opened (a crash between a
        // store's catalog write and the topic's first record write), which opens empty.
        Ok(None)
            if !storage
                .list()?
                .iter()
                .any(|n| crate::log::parse_ledger_file_name(n).is_some()) =>
        {
            return Ok(());
        }
        Ok(None) => {
            damage(
                TOPIC_FILE.into(),
                "topic record".into(),
                "missing: the directory holds ledger files but no topic record, and open \
                 refuses it"
                    .into(),
            );
            return Ok(());
        }
        // Reported by the deep collection that follows.
        Err(_) => return Ok(()),
    };
    let log = EntryLog::open_read_only(storage.clone(), LogConfig::default())?;
    if let Err(e) =
        crate::ledger::refuse_unlisted_entries(&record, &log, crate::ledger::current_block(&record))
    {
        damage(TOPIC_FILE.into(), "topic record".into(), describe(&e));
    }
    if let Err(e) = crate::ledger::refuse_short_ledgers(&record, &log, || marks.to_vec()) {
        let file = match &e {
            Error::Corrupted {
                place: CorruptionPlace::Ledger { ledger, .. },
                ..
            } => ledger_file_name(*ledger),
            _ => TOPIC_FILE.into(),
        };
        damage(file, "ledger".into(), describe(&e));
    }
    let interrupted = log.interrupted_creates();
    for rec in record.ledgers.iter() {
        let file = ledger_file_name(rec.id);
        let place = format!("ledger {}", rec.id);
        if interrupted.contains(&rec.id) {
            damage(
                file,
                place,
                "the topic record lists this ledger but its file holds no whole header".into(),
            );
        } else if let Ok(info) = log.ledger_info(rec.id) {
            if info.damaged.is_none() && rec.entries != 0 && info.entries < rec.entries {
                damage(
                    file,
                    place,
                    format!(
                        "holds {} entries but {} were sealed (the topic record)",
                        info.entries, rec.entries
                    ),
                );
            }
        } else {
            damage(
                file,
                place,
                "the topic record lists this ledger but its file is missing".into(),
            );
        }
    }
    Ok(())
}

/// The mark-delete of every cursor whose state `check` found in a journal, as the open takes
/// it: its snapshot's when that is its state (or its chain's newest record did not verify),
/// else its chain's.
fn mark_deletes(check: &JournalCheck) -> BTreeMap<CursorId, Position> {
    let fell_back: BTreeSet<CursorId> = check.fallbacks.iter().map(|(id, _)| *id).collect();
    let chains = (check.states.iter()).map(|(id, c)| (*id, c.state.mark_delete));
    let snapshots = (check.snapshots.iter())
        .filter(|(id, s)| s.current || !check.states.contains_key(id) || fell_back.contains(id))
        .map(|(id, s)| (*id, s.state.mark_delete));
    chains.chain(snapshots).collect()
}

/// The cursor journal `checked` (what `check_listed` read of it; `lister`: what lists its
/// segments, for messages): its strays and torn tail as torn-tail findings, an error as damage;
/// the check when it read.
fn check_journal(
    checked: Result<crate::journal::JournalCheck>,
    lister: &str,
    findings: &mut Vec<Finding>,
) -> Option<crate::journal::JournalCheck> {
    match checked {
        Ok(check) => {
            for stray in &check.strays {
                findings.push(Finding {
                    file: crate::journal::segment_name(*stray),
                    place: format!("journal segment {stray}"),
                    problem: format!(
                        "a segment {lister} does not list (a former owner's, or a creation cut \
                         short): never read, removed by the next open"
                    ),
                    torn_tail: true,
                });
            }
            for (cursor, at) in &check.fallbacks {
                // As a cursor ledger's refused newer state: the open recovers the older one.
                let to = check.snapshots.get(cursor).map_or_else(String::new, |s| {
                    format!(
                        " at journal segment {} byte {}",
                        s.loc.segment, s.loc.offset
                    )
                });
                findings.push(Finding {
                    file: crate::journal::segment_name(at.segment),
                    place: format!("journal segment {} at byte {}", at.segment, at.offset),
                    problem: format!(
                        "a newer state was refused: the marker of cursor {}/{} does not \
                         verify, so its open falls back to its single-entry snapshot{to}",
                        cursor.topic, cursor.cursor
                    ),
                    torn_tail: false,
                });
            }
            if let Some((segment, offset, bytes)) = check.torn_tail {
                findings.push(Finding {
                    file: crate::journal::segment_name(segment),
                    place: format!("journal segment {segment} at byte {offset}"),
                    problem: format!("{bytes} bytes after the last record that verifies"),
                    torn_tail: true,
                });
            }
            Some(check)
        }
        Err(e) => {
            findings.push(Finding {
                file: "journal".into(),
                place: "cursor journal".into(),
                problem: e.to_string(),
                torn_tail: false,
            });
            None
        }
    }
}

/// The topic in `storage` checked: every frame of every ledger, the topic record against the
/// ledger files, the cursor journal the topic hosts as its record lists it, and every cursor's
/// record, state and cursor ledger.
pub(super) fn verify_topic(storage: &Arc<dyn Storage>) -> Result<Verification> {
    let record = read_topic(storage).ok().flatten();
    let mut unused = Vec::new();
    let mut findings = ledger_findings(storage, record.as_ref(), &mut unused)?;
    // What the open of a topic on its own refuses first: a store's topic (the rest is checked
    // all the same; its cursors' state lives in the store's journal, not read here).
    // A record that cannot be read is reported by the checks below.
    if let Err(e @ Error::OwnedByStore { .. }) = crate::ledger::refuse_store_topic_alone(storage) {
        findings.push(Finding {
            file: TOPIC_FILE.into(),
            place: "topic record".into(),
            problem: describe(&e),
            torn_tail: false,
        });
    }
    let mut journal = Vec::new();
    let mut marks = Vec::new();
    if let Some(record) = &record
        && let Some(check) = check_journal(
            super::topic::check_hosted_journal(storage, record),
            "the topic record",
            &mut findings,
        )
    {
        journal = super::topic::hosted_journal_cursors(storage, record, &check);
        marks = mark_deletes(&check).into_values().collect();
    }
    check_against_record(storage, &marks, &mut findings)?;
    // The cursors the journal holds: the open claims their records but reads no cursor ledger
    // a record still names (an import cut short, removed by the cursor's next write).
    let usage = StoreUse::alone(&journal);
    let mut topic = collect_in(storage, true, &mut findings, Some((&usage, &mut unused)));
    unused.extend(metadata_leftovers(storage, record.as_ref())?);
    unused.extend(chunk_leftovers(storage)?);
    if let Some(record) = &record {
        superseded_ledgers_unused(storage, record, &usage, (&mut findings, &mut unused));
        super::topic::show_hosted_states(&mut topic, record, &journal);
    }
    Ok(Verification {
        location: storage.location(),
        subject: Subject::Topic,
        ledgers: topic.ledgers.len(),
        cursors: topic.cursors.len(),
        journal,
        findings,
        unused,
    })
}

/// A store whose catalog does not decode: damage, and nothing else can be checked (the
/// catalog names the topics and the journal's segments).
pub(super) fn unreadable_catalog(storage: &Arc<dyn Storage>, e: &Error) -> Verification {
    Verification {
        location: storage.location(),
        subject: Subject::UnreadableCatalog,
        ledgers: 0,
        cursors: 0,
        journal: Vec::new(),
        findings: vec![Finding {
            // The catalog, or the chunk record of its topics the error names.
            file: match e {
                Error::Corrupted {
                    place: crate::error::CorruptionPlace::Record(record),
                    ..
                } => format!("{record}.meta"),
                _ => format!("{}.meta", crate::store::STORE_RECORD),
            },
            place: "store catalog".into(),
            problem: describe(e),
            torn_tail: false,
        }],
        unused: Vec::new(),
    }
}

/// Moves the frame problems of every cursor ledger the journal superseded from `findings` to
/// `unused`: a ledger that the own record of a cursor the journal holds still names (an import
/// cut short after the journal's commit, `cursor::import`). The open reads no byte of it, and
/// the cursor's next write deletes it; a ledger a record of another cursor names stays checked,
/// as the open takes it for that cursor's (`ledger::open`, rule 3).
fn superseded_ledgers_unused(
    storage: &Arc<dyn Storage>,
    record: &TopicRecord,
    usage: &StoreUse,
    (findings, unused): (&mut Vec<Finding>, &mut Vec<Finding>),
) {
    let meta = FileMetaStore::listed_once(storage.clone());
    let superseded: BTreeSet<String> = record
        .cursors
        .iter()
        .filter(|c| usage.committed.contains(&c.id))
        .filter_map(|c| {
            let (_, bytes) = meta.get(&record_name(c.id)).ok()??;
            let cursor = crate::format::meta::CursorRecord::decode(&bytes).ok()?;
            cursor.check_identity(c.id, &c.name, record.topic_id).ok()?;
            cursor.cursor_ledger.map(ledger_file_name)
        })
        .collect();
    let (moved, kept) = std::mem::take(findings)
        .into_iter()
        .partition(|f: &Finding| superseded.contains(&f.file));
    *findings = kept;
    unused.extend(moved.into_iter().map(|f| Finding {
        problem: format!(
            "{}; not read: the journal holds this cursor ledger's cursor, whose next write \
             deletes it",
            f.problem
        ),
        ..f
    }));
}

/// Every frame problem of the ledger files in `storage`, as findings; damage no use relies on
/// goes to `unused` instead: past the count the topic record `record` holds of a ledger (its
/// footer, bytes after it, a fenced former owner's entries), which the open and every read
/// leave alone (`damage_relied_on`, the rule the open follows).
fn ledger_findings(
    storage: &Arc<dyn Storage>,
    record: Option<&TopicRecord>,
    unused: &mut Vec<Finding>,
) -> Result<Vec<Finding>> {
    let recorded = |ledger: u64| {
        record
            .and_then(|r| r.ledgers.iter().find(|l| l.id == ledger))
            .map(|l| l.entries)
            .filter(|n| *n != 0)
    };
    let mut findings = Vec::new();
    for p in verify_log(storage.as_ref())? {
        let finding = Finding {
            file: ledger_file_name(p.ledger),
            place: match p.entry {
                Some(e) => format!("ledger {} entry {} at byte {}", p.ledger, e, p.offset),
                None => format!("ledger {} at byte {}", p.ledger, p.offset),
            },
            problem: p.kind.to_string(),
            torn_tail: p.torn_tail,
        };
        match recorded(p.ledger) {
            Some(count) if !p.torn_tail && !damage_relied_on(p.entry, Some(count)) => {
                let what = if p.kind == CorruptionKind::InvalidField("footer") {
                    format!(
                        "the footer (index, its checksum or trailer) does not verify, or bytes \
                         follow it: reads scan the frames, and the {count} entries the topic \
                         record counts are whole"
                    )
                } else {
                    format!(
                        "bytes past the {count} entries the topic record counts (a fenced \
                         former owner's entries, or a footer) are damaged: no read reaches them"
                    )
                };
                unused.push(Finding {
                    problem: format!("{}; {what}", finding.problem),
                    ..finding
                });
            }
            _ => findings.push(finding),
        }
    }
    Ok(findings)
}

/// The store in `storage`, whose catalog is `catalog`: the cursor journal (read only), then
/// every topic of the catalog, its files named as they are in the store directory (`t{id}/...`
/// or `t{id}-...`), then what the store holds of topics the catalog does not list.
pub(super) fn verify_store(storage: &Arc<dyn Storage>, catalog: &Catalog) -> Result<Verification> {
    let mut findings = Vec::new();
    let mut unused = Vec::new();
    let mut journal_records = 0;
    let mut committed = Vec::new();
    let mut marks = BTreeMap::new();
    let mut names = BTreeMap::new();
    let mut journal = Vec::new();
    if let Some(check) = check_journal(
        crate::journal::check_listed(
            storage.as_ref(),
            &crate::store::journal_seals(catalog),
            crate::store::journal_listing(catalog),
        ),
        "the store's catalog",
        &mut findings,
    ) {
        journal_records = check.records;
        committed.clone_from(&check.committed);
        marks = mark_deletes(&check);
        names.clone_from(&check.names);
        journal = super::store::journal_cursors(storage, catalog, &check);
    }
    let (ledgers, cursors) = check_store_topics(
        storage,
        catalog,
        (&committed, &marks),
        &mut findings,
        &mut unused,
    )?;
    unused.extend(
        crate::store::catalog::chunk_leftovers(storage.as_ref(), catalog)?
            .into_iter()
            .map(|file| Finding {
                file,
                place: "store catalog chunk".into(),
                problem:
                    "left by a topic creation or an upgrade cut short or refused; the catalog does \
                          not pin it, no open reads it, and the store's next open removes it"
                        .into(),
                torn_tail: false,
            }),
    );
    check_journal_names(storage, catalog, &names, &mut findings);
    if let Err(e) = crate::store::check_unlisted_topics(
        storage.as_ref(),
        catalog,
        committed.iter().map(|c| c.topic),
    ) {
        findings.push(Finding {
            file: format!("{}.meta", crate::store::STORE_RECORD),
            place: "store catalog".into(),
            problem: describe(&e),
            torn_tail: false,
        });
    }
    Ok(Verification {
        location: storage.location(),
        subject: Subject::Store {
            topics: catalog.topics.len(),
            journal_records,
        },
        ledgers,
        cursors,
        journal,
        findings,
        unused,
    })
}

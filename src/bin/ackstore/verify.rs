//! `ackstore verify DIR`: check every frame of every ledger, every metadata record, and every
//! marker and partition of every cursor; report each problem with its place. Read-only.
//!
//! Exit code: 0 when the directory is sound (torn tails, which the next open repairs, are
//! reported but are not damage), 1 when anything is damaged, 2 when the check could not run.

use std::path::PathBuf;
use std::process::ExitCode;

use std::sync::Arc;

use ackstore::Result;
use ackstore::Storage;
use ackstore::internals::log::{EntryLog, LogConfig, ledger_file_name, verify_log};
use clap::Args;

use crate::dir;
use crate::inspect::{self, Finding};

/// Arguments of `ackstore verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The topic directory to check.
    dir: PathBuf,
    /// Where the topic lives (a directory by default).
    #[command(flatten)]
    storage: crate::target::StorageArgs,
    /// Print the findings as one JSON object.
    #[arg(long)]
    json: bool,
}

/// Runs `ackstore verify`.
pub fn run(args: &VerifyArgs) -> Result<ExitCode> {
    let storage = dir::open_existing(&args.dir, &args.storage)?;
    if let Some(catalog) = ackstore::internals::store::read_catalog(storage.clone())? {
        return run_store(args, &storage, &catalog);
    }
    let mut findings: Vec<Finding> = verify_log(storage.as_ref())?
        .into_iter()
        .map(|p| Finding {
            file: ledger_file_name(p.ledger),
            place: match p.entry {
                Some(e) => format!("ledger {} entry {} at byte {}", p.ledger, e, p.offset),
                None => format!("ledger {} at byte {}", p.ledger, p.offset),
            },
            what: p.kind.to_string(),
            torn_tail: p.torn_tail,
        })
        .collect();
    check_against_record(&storage, &mut findings)?;
    let topic = inspect::collect(&storage, true, &mut findings);
    let damaged = findings.iter().filter(|f| !f.torn_tail).count();
    let torn = findings.len() - damaged;
    if args.json {
        let list = findings_json(&findings);
        let report = serde_json::json!({
            "dir": args.dir.display().to_string(),
            "ledgers": topic.ledgers.len(),
            "cursors": topic.cursors.len(),
            "damaged": damaged,
            "torn_tails": torn,
            "findings": list,
            "ok": damaged == 0,
        });
        println!("{report}");
    } else {
        print_findings(&findings);
        println!(
            "checked {} ledgers and {} cursors in {}: {} damaged, {} torn tails",
            topic.ledgers.len(),
            topic.cursors.len(),
            args.dir.display(),
            damaged,
            torn
        );
    }
    Ok(if damaged == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The findings of one topic kept in `storage`, and its ledger and cursor counts.
fn check_topic(storage: &Arc<dyn Storage>) -> Result<(Vec<Finding>, usize, usize)> {
    let mut findings: Vec<Finding> = verify_log(storage.as_ref())?
        .into_iter()
        .map(|p| Finding {
            file: ledger_file_name(p.ledger),
            place: match p.entry {
                Some(e) => format!("ledger {} entry {} at byte {}", p.ledger, e, p.offset),
                None => format!("ledger {} at byte {}", p.ledger, p.offset),
            },
            what: p.kind.to_string(),
            torn_tail: p.torn_tail,
        })
        .collect();
    check_against_record(storage, &mut findings)?;
    let topic = inspect::collect(storage, true, &mut findings);
    Ok((findings, topic.ledgers.len(), topic.cursors.len()))
}

/// `verify` of a store directory: the catalog, the cursor journal (read only), then every topic
/// of the catalog, its files named as they are in the store directory (`t{id}/...` or
/// `t{id}-...`).
fn run_store(
    args: &VerifyArgs,
    storage: &Arc<dyn Storage>,
    catalog: &ackstore::internals::format::store::Catalog,
) -> Result<ExitCode> {
    let mut findings = Vec::new();
    let mut journal_records = 0;
    match ackstore::internals::store::journal::check_listed(
        storage.as_ref(),
        &ackstore::internals::store::journal_seals(catalog),
        catalog.segments.as_deref(),
    ) {
        Ok(check) => {
            journal_records = check.records;
            for stray in &check.strays {
                findings.push(Finding {
                    file: ackstore::internals::store::journal::segment_name(*stray),
                    place: format!("journal segment {stray}"),
                    what: "a segment the store's catalog does not list (a former owner's, or a \
                           creation cut short): never read, removed by the next open"
                        .into(),
                    torn_tail: true,
                });
            }
            if let Some((segment, offset, bytes)) = check.torn_tail {
                findings.push(Finding {
                    file: ackstore::internals::store::journal::segment_name(segment),
                    place: format!("journal segment {segment} at byte {offset}"),
                    what: format!("{bytes} bytes after the last record that verifies"),
                    torn_tail: true,
                });
            }
        }
        Err(e) => findings.push(Finding {
            file: "journal".into(),
            place: "cursor journal".into(),
            what: e.to_string(),
            torn_tail: false,
        }),
    }
    let (mut ledgers, mut cursors) = (0, 0);
    for topic in &catalog.topics {
        let space = match ackstore::internals::store::topic_storage(storage, catalog, topic.id) {
            Ok(space) => space,
            Err(e) => {
                // A topic the catalog lists whose directory is gone: the store refuses to open
                // the topic, so this is damage.
                findings.push(Finding {
                    file: ackstore::internals::store::topic_file(storage, catalog, topic.id, ""),
                    place: format!("topic {}", topic.id),
                    what: e.to_string(),
                    torn_tail: false,
                });
                continue;
            }
        };
        let (found, l, c) = check_topic(&space)?;
        ledgers += l;
        cursors += c;
        findings.extend(found.into_iter().map(|f| Finding {
            file: ackstore::internals::store::topic_file(storage, catalog, topic.id, &f.file),
            ..f
        }));
    }
    let damaged = findings.iter().filter(|f| !f.torn_tail).count();
    let torn = findings.len() - damaged;
    if args.json {
        let list = findings_json(&findings);
        let report = serde_json::json!({
            "dir": args.dir.display().to_string(),
            "store": true,
            "topics": catalog.topics.len(),
            "ledgers": ledgers,
            "cursors": cursors,
            "journal_records": journal_records,
            "damaged": damaged,
            "torn_tails": torn,
            "findings": list,
            "ok": damaged == 0,
        });
        println!("{report}");
    } else {
        print_findings(&findings);
        println!(
            "checked the store in {}: {} topics, {} ledgers, {} cursors, {} journal records: \
             {} damaged, {} torn tails",
            args.dir.display(),
            catalog.topics.len(),
            ledgers,
            cursors,
            journal_records,
            damaged,
            torn
        );
    }
    Ok(if damaged == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// What the owner's open checks between the topic record and the ledger files, as damage:
/// a missing record beside ledger files, a recorded ledger whose file is missing or holds less
/// than a header, or fewer entries than the record counts. Entries beyond a recorded count (a
/// fenced owner's appends) are what open ignores, and are not damage.
fn check_against_record(storage: &Arc<dyn Storage>, findings: &mut Vec<Finding>) -> Result<()> {
    let mut damage = |file: String, place: String, what: String| {
        findings.push(Finding {
            file,
            place,
            what,
            torn_tail: false,
        });
    };
    let record = match inspect::read_topic(storage) {
        Ok(Some(record)) => record,
        // No record and no ledger file: a topic created but never opened (a crash between a
        // store's catalog write and the topic's first record write), which opens empty.
        Ok(None)
            if !storage
                .list()?
                .iter()
                .any(|n| ackstore::internals::log::parse_ledger_file_name(n).is_some()) =>
        {
            return Ok(());
        }
        Ok(None) => {
            damage(
                dir::TOPIC_FILE.into(),
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
    let interrupted = log.interrupted_creates();
    for rec in &record.ledgers {
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

/// The findings as the JSON report lists them.
fn findings_json(findings: &[Finding]) -> Vec<serde_json::Value> {
    findings
        .iter()
        .map(|f| {
            serde_json::json!({
                "file": f.file, "place": f.place, "problem": f.what, "torn_tail": f.torn_tail,
            })
        })
        .collect()
}

/// One line per finding, saying whether the next open cuts it back or it is damage.
fn print_findings(findings: &[Finding]) {
    for f in findings {
        let label = if f.torn_tail {
            "torn tail (the next open cuts it back)"
        } else {
            "DAMAGED"
        };
        println!("{}: {}: {}: {}", f.file, f.place, f.what, label);
    }
}

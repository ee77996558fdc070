//! `ackstore verify DIR`: check every frame of every ledger, every metadata record, and every
//! marker and partition of every cursor; report each problem with its place. Read-only. The
//! check is [`ackstore::check::verify`]; this module prints its report.
//!
//! Exit code: 0 when the directory is sound (torn tails, what a crash or a full disk leaves, are
//! reported but are not damage), 1 when anything is damaged, 2 when the check could not run.

use std::path::PathBuf;
use std::process::ExitCode;

use ackstore::Result;
use ackstore::check::{Finding, JournalCursor, Subject, Verification};
use clap::Args;

use crate::dir;

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
    let mut report = ackstore::check::verify(&storage)?;
    report.location = args.dir.display().to_string();
    if args.json {
        println!("{}", json(&report));
    } else {
        print!("{report}");
    }
    Ok(if report.is_sound() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The report as one JSON object.
fn json(report: &Verification) -> serde_json::Value {
    let dir = report.location.clone();
    let (damaged, torn) = (report.damaged(), report.torn_tails());
    match report.subject {
        Subject::Topic => serde_json::json!({
            "dir": dir,
            "ledgers": report.ledgers,
            "cursors": report.cursors,
            "damaged": damaged,
            "torn_tails": torn,
            "warnings": report.unused.len(),
            "findings": findings_json(&report.findings),
            "unused": findings_json(&report.unused),
            "ok": damaged == 0,
        }),
        Subject::Store {
            topics,
            journal_records,
        } => serde_json::json!({
            "dir": dir,
            "store": true,
            "topics": topics,
            "ledgers": report.ledgers,
            "cursors": report.cursors,
            "journal_records": journal_records,
            "journal_cursors": journal_cursors_json(&report.journal),
            "damaged": damaged,
            "torn_tails": torn,
            "warnings": report.unused.len(),
            "findings": findings_json(&report.findings),
            "unused": findings_json(&report.unused),
            "ok": damaged == 0,
        }),
        // A store whose catalog cannot be read: nothing else could be checked.
        _ => serde_json::json!({
            "dir": dir,
            "store": true,
            "damaged": damaged,
            "torn_tails": torn,
            "warnings": report.unused.len(),
            "findings": findings_json(&report.findings),
            "unused": findings_json(&report.unused),
            "ok": damaged == 0,
        }),
    }
}

/// The findings as the JSON report lists them.
fn findings_json(findings: &[Finding]) -> Vec<serde_json::Value> {
    findings
        .iter()
        .map(|f| {
            serde_json::json!({
                "file": f.file, "place": f.place, "problem": f.problem, "torn_tail": f.torn_tail,
            })
        })
        .collect()
}

/// Each store cursor's committed journal state, as `verify --json` and `inspect --json` list
/// them.
pub fn journal_cursors_json(cursors: &[JournalCursor]) -> Vec<serde_json::Value> {
    cursors
        .iter()
        .map(|c| {
            serde_json::json!({
                "topic_id": c.topic_id, "topic": c.topic,
                "cursor_id": c.cursor_id, "cursor": c.cursor,
                "mark_delete": c.mark_delete.map(|p| p.to_string()), "epoch": c.epoch,
                "snapshot": c.snapshot,
                "marker_segment": c.marker_segment, "marker_offset": c.marker_offset,
                "partitions": c.partitions, "acked_entries": c.acked_entries,
                "acked_ranges": c.acked_ranges, "batch_records": c.batch_records, "partial_entries": c.partial_entries,
            })
        })
        .collect()
}

//! `ackstore verify DIR`: check every frame of every ledger, every metadata record, and every
//! marker and partition of every cursor; report each problem with its place. Read-only.
//!
//! Exit code: 0 when the directory is sound (torn tails, which the next open repairs, are
//! reported but are not damage), 1 when anything is damaged, 2 when the check could not run.

use std::path::PathBuf;
use std::process::ExitCode;

use ackstore::Result;
use ackstore::log::{ledger_file_name, verify_log};
use clap::Args;

use crate::dir;
use crate::inspect::{self, Finding};

/// Arguments of `ackstore verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The topic directory to check.
    dir: PathBuf,
    /// Print the findings as one JSON object.
    #[arg(long)]
    json: bool,
}

/// Runs `ackstore verify`.
pub fn run(args: &VerifyArgs) -> Result<ExitCode> {
    let storage = dir::open_existing(&args.dir)?;
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
    let topic = inspect::collect(&storage, true, &mut findings);
    let damaged = findings.iter().filter(|f| !f.torn_tail).count();
    let torn = findings.len() - damaged;
    if args.json {
        let list: Vec<_> = findings
            .iter()
            .map(|f| {
                serde_json::json!({
                    "file": f.file, "place": f.place, "problem": f.what, "torn_tail": f.torn_tail,
                })
            })
            .collect();
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
        for f in &findings {
            let label = if f.torn_tail {
                "torn tail (the next open cuts it back)"
            } else {
                "DAMAGED"
            };
            println!("{}: {}: {}: {}", f.file, f.place, f.what, label);
        }
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

//! `ackstore inspect DIR`: the ledgers and cursors of a topic directory, or a store's topics,
//! journal and each cursor's committed journal state, as tables or JSON. The reading is
//! [`ackstore::check::inspect`]; this module prints its report.
//!
//! Read-only: it opens the directory without taking the owner's lock, never truncates a torn
//! tail and never writes a record, so it can look at a directory no process owns. It does not
//! coordinate with a live owner either: run it on a directory whose owner is stopped for an
//! exact picture.

use std::path::PathBuf;
use std::process::ExitCode;

use ackstore::Result;
use ackstore::check::{Inspection, StoreInspection, TopicInspection};
use clap::Args;

use crate::dir;

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

/// Runs `ackstore inspect`. Without a readable topic record or store catalog the tables would
/// be empty, not true: exit 2.
pub fn run(args: &InspectArgs) -> Result<ExitCode> {
    let storage = dir::open_existing(&args.dir, &args.storage)?;
    let report = ackstore::check::inspect(&storage)?;
    if args.json {
        let value = match &report {
            Inspection::Store(store) => store_json(store),
            Inspection::Topic(topic) => topic_json(topic),
            _ => serde_json::Value::Null,
        };
        println!("{value}");
    } else {
        print!("{report}");
    }
    Ok(ExitCode::SUCCESS)
}

fn store_json(store: &StoreInspection) -> serde_json::Value {
    let topics: Vec<_> = store
        .topics
        .iter()
        .map(|t| {
            serde_json::json!({"id": t.id, "name": t.name, "ledgers": t.ledgers, "cursors": t.cursors})
        })
        .collect();
    let j = &store.journal;
    serde_json::json!({
        "store": true,
        "store_id": store.store_id,
        "topics": topics,
        "journal": {
            "segments": j.segments, "records": j.records,
            "cursors": j.cursors, "torn_tail": j.torn_tail,
            "batch_partitions": j.batch_partitions,
            "partial_entries": j.partial_entries,
            "cursor_states": crate::verify::journal_cursors_json(&store.cursors),
        },
    })
}

fn topic_json(topic: &TopicInspection) -> serde_json::Value {
    let ledgers: Vec<_> = topic
        .view
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
    let cursors: Vec<_> = topic
        .view
        .cursors
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name, "record": c.record,
                "mark_delete": c.mark_delete.map(|p| p.to_string()),
                "epoch": c.epoch, "cursor_ledger": c.cursor_ledger, "state": c.state_source,
                "acked_entries": c.acked_entries, "acked_ranges": c.acked_ranges,
                "persisted_bytes": c.persisted_bytes, "rejected_states": c.rejected_states,
                "partitions_inline": c.partitions_inline,
                "partitions_separate": c.partitions_separate,
                "index_pages": c.index_pages,
                "partial_entries": c.partial_entries,
                "acked_batch_indexes": c.acked_batch_indexes,
            })
        })
        .collect();
    let problems: Vec<_> = topic
        .problems
        .iter()
        .map(|f| serde_json::json!({"file": f.file, "place": f.place, "problem": f.problem}))
        .collect();
    serde_json::json!({
        "ledgers": ledgers, "cursors": cursors, "problems": problems,
        "journal_states": crate::verify::journal_cursors_json(&topic.journal),
    })
}

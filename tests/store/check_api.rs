//! The check API (`ackstore::check::verify` and `inspect`) called as library functions: an
//! intact topic and an intact store yield no finding, and their reports hold what was acked
//! (a store cursor's journal state: mark-delete, acked entries, partial entries, where its
//! marker is); a damaged ledger file or store catalog yields a finding naming that file.

use crate::support;

use std::path::Path;
use std::sync::Arc;

use ackstore::check::{Inspection, Subject};
use ackstore::{AppendMeta, CursorOptions, FileStorage, ManagedLedger, Position, Storage, Store};

fn storage(dir: &Path) -> Arc<dyn Storage> {
    Arc::new(FileStorage::open(dir, false).expect("the directory opens"))
}

/// A topic of `n` 1,000-byte entries of 4 messages each (several sealed data ledgers) and a
/// cursor `sub` that acked the first two entries (mark-delete), every other one of the rest,
/// and message 1 of the last entry; synced and flushed. Returns the entries.
fn fill(topic: &ManagedLedger, n: u64) -> Vec<Position> {
    let entries: Vec<Position> = (0..n)
        .map(|_| {
            topic
                .append_with(
                    &[b'x'; 1000],
                    AppendMeta {
                        num_messages: 4,
                        timestamp: 1,
                    },
                )
                .expect("append")
        })
        .collect();
    topic.sync().expect("sync");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    for (i, pos) in entries.iter().enumerate() {
        if i < 2 || (i % 2 == 0 && i + 1 < entries.len()) {
            cursor.ack(*pos).expect("ack");
        }
    }
    let last = *entries.last().expect("entries");
    cursor.ack_batch_index(last, 1, 4).expect("batch-index ack");
    cursor.flush().expect("flush");
    cursor.close().expect("close");
    entries
}

/// Acked entries above mark-delete in [`fill`]'s cursor: every other entry from the fourth
/// on, the last excepted.
fn acked_above_mark_delete(n: u64) -> u64 {
    (2..n - 1).filter(|i| i % 2 == 0 && *i > 2).count() as u64
}

#[test]
fn an_intact_topic_yields_no_finding_and_its_cursor_state() {
    let dir = tempfile::tempdir().expect("dir");
    let topic = ManagedLedger::open(dir.path(), support::topic::config(8)).expect("topic");
    let entries = fill(&topic, 20);
    topic.close().expect("close");

    let report = ackstore::check::verify(&storage(dir.path())).expect("verify runs");
    assert_eq!(report.subject, Subject::Topic);
    assert!(report.findings.is_empty(), "{report}");
    assert!(report.is_sound());
    assert_eq!(report.cursors, 1, "{report}");
    assert!(report.ledgers >= 3, "{report}");

    let Inspection::Topic(inspection) =
        ackstore::check::inspect(&storage(dir.path())).expect("inspect runs")
    else {
        panic!("a topic directory inspects as a topic");
    };
    assert!(inspection.problems.is_empty(), "{inspection}");
    let cursor = &inspection.view.cursors[0];
    assert_eq!(cursor.name, "sub");
    assert_eq!(cursor.mark_delete, Some(entries[2]));
    assert_eq!(cursor.acked_entries, acked_above_mark_delete(20));
    // From the journal the topic hosts, whose summary counts partial entries, not the messages
    // acknowledged in them.
    assert_eq!(cursor.partial_entries, 1);
    assert!(
        cursor.state_source.starts_with("topic journal"),
        "{inspection}"
    );
    assert_eq!(inspection.journal.len(), 1, "{inspection}");
    assert_eq!(report.journal.len(), 1, "{report}");
}

#[test]
fn an_intact_store_yields_no_finding_and_each_cursors_journal_state() {
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::open(dir.path(), support::config::store(8, 1 << 20)).expect("store");
    let entries = fill(&store.topic("orders").expect("topic"), 20);
    fill(&store.topic("payments").expect("topic"), 6);
    store.close().expect("close");

    let report = ackstore::check::verify(&storage(dir.path())).expect("verify runs");
    assert!(
        matches!(report.subject, Subject::Store { topics: 2, .. }),
        "{report}"
    );
    assert!(report.findings.is_empty(), "{report}");
    assert!(report.unused.is_empty(), "{report}");
    assert_eq!(report.journal.len(), 2, "{report}");
    let orders = report
        .journal
        .iter()
        .find(|c| c.topic.as_deref() == Some("orders"))
        .expect("the orders cursor's journal state");
    assert_eq!(orders.cursor.as_deref(), Some("sub"));
    assert_eq!(orders.mark_delete, Some(entries[2]));
    assert_eq!(orders.acked_entries, acked_above_mark_delete(20));
    // Every other entry: each acked entry is a range of its own.
    assert_eq!(orders.acked_ranges, Some(acked_above_mark_delete(20)));
    assert_eq!(orders.partial_entries, 1);
    assert!(orders.batch_records >= 1);
    assert!(
        report
            .to_string()
            .contains("journal state: cursor \"sub\" of topic \"orders\"")
    );

    let Inspection::Store(inspection) =
        ackstore::check::inspect(&storage(dir.path())).expect("inspect runs")
    else {
        panic!("a store inspects as a store");
    };
    assert_eq!(inspection.topics.len(), 2);
    assert_eq!(inspection.journal.cursors, 2);
    assert_eq!(inspection.cursors, report.journal);
    let text = inspection.to_string();
    assert!(text.contains("journal cursors"), "{text}");
}

/// Maximal ranges of `acked`, ascending positions: runs of consecutive entry ids of one ledger.
fn model_ranges(acked: &[Position]) -> u64 {
    let mut ranges = 0;
    let mut previous: Option<Position> = None;
    for pos in acked {
        let joins = previous
            .is_some_and(|p| p.ledger_id == pos.ledger_id && p.entry_id + 1 == pos.entry_id);
        ranges += u64::from(!joins);
        previous = Some(*pos);
    }
    ranges
}

#[test]
fn a_store_cursors_journal_state_counts_its_ranges_as_the_cursor_holds_them() {
    // 70,010 entries: a first ledger of 70,000 (two partitions of 65,536 entry ids) and a
    // second of 10. Acked: runs inside a partition, a run across the partition boundary (one
    // range), singles, a pseudo-random stretch, and the last entry of the first ledger with the
    // first entries of the second (two ranges: a range never spans ledgers).
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::open(dir.path(), support::config::store(70_000, 1 << 20)).expect("store");
    let topic = store.topic("t").expect("topic");
    let entries: Vec<Position> = (0..70_010)
        .map(|_| topic.append(b"x").expect("append"))
        .collect();
    topic.sync().expect("sync");
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let acked: Vec<Position> = entries
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            matches!(i, 10..=20 | 65_530..=65_545 | 30 | 32 | 34 | 69_999..=70_002)
                || ((40_000..50_000).contains(i) && !state.is_multiple_of(3))
        })
        .map(|(_, p)| *p)
        .collect();
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    for pos in &acked {
        cursor.ack(*pos).expect("ack");
    }
    cursor.flush().expect("flush");
    cursor.close().expect("close");
    store.close().expect("close");

    let expected = model_ranges(&acked);
    assert!(
        expected > 1_000,
        "the pattern makes many ranges: {expected}"
    );
    let report = ackstore::check::verify(&storage(dir.path())).expect("verify runs");
    assert!(report.is_sound(), "{report}");
    let journal = &report.journal[0];
    assert_eq!(journal.acked_entries, acked.len() as u64);
    assert_eq!(journal.acked_ranges, Some(expected), "{report}");
    assert!(
        report.to_string().contains(&format!(
            "{} acked entries in {expected} ranges",
            acked.len()
        )),
        "{report}"
    );
}

#[test]
fn a_damaged_ledger_file_yields_a_finding_naming_it() {
    let dir = tempfile::tempdir().expect("dir");
    let topic = ManagedLedger::open(dir.path(), support::topic::config(8)).expect("topic");
    fill(&topic, 20);
    let first = topic.ledgers()[0].id;
    topic.close().expect("close");
    let name = ackstore::internals::log::ledger_file_name(first);
    let path = dir.path().join(&name);
    let mut bytes = std::fs::read(&path).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    std::fs::write(&path, bytes).expect("write");

    let report = ackstore::check::verify(&storage(dir.path())).expect("verify runs");
    assert!(!report.is_sound(), "{report}");
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.file == name && !f.torn_tail),
        "{report}"
    );
}

#[test]
fn a_damaged_store_catalog_yields_a_finding_naming_it() {
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::open(dir.path(), support::config::store(8, 1 << 20)).expect("store");
    fill(&store.topic("orders").expect("topic"), 4);
    store.close().expect("close");
    // The newest version of the catalog record (`store.{version:020}.meta`).
    let catalog = crate::catalog_lost::catalog_versions(dir.path())
        .pop()
        .expect("the catalog file");
    let mut bytes = std::fs::read(&catalog).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&catalog, bytes).expect("write");

    let report = ackstore::check::verify(&storage(dir.path())).expect("verify runs");
    assert_eq!(report.subject, Subject::UnreadableCatalog, "{report}");
    assert_eq!(report.damaged(), 1, "{report}");
    assert_eq!(report.findings[0].file, "store.meta");
}

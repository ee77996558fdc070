//! A store's side of the check: each cursor's committed state in the shared journal, named by
//! its topic's catalog entry and its topic record, and the store's summary for `inspect`.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::Result;
use crate::format::store::Catalog;
use crate::journal::JournalCheck;
use crate::storage::Storage;

use super::topic::{collect, read_topic};
use super::{JournalCursor, JournalSummary, StoreInspection, StoreTopic};

/// The committed state of every cursor `check` found in the journal, in (topic, cursor) id
/// order. A cursor's name comes from its topic's record (`None` when the record cannot be read
/// or does not list the id).
pub(super) fn journal_cursors(
    storage: &Arc<dyn Storage>,
    catalog: &Catalog,
    check: &JournalCheck,
) -> Vec<JournalCursor> {
    let mut cursor_names: BTreeMap<(u64, u64), String> = BTreeMap::new();
    let topic_names: BTreeMap<u64, &str> = catalog
        .topics
        .iter()
        .map(|t| (t.id, t.name.as_str()))
        .collect();
    for topic in &catalog.topics {
        let Ok(space) = crate::store::topic_storage(storage, catalog, topic.id) else {
            continue;
        };
        if let Ok(Some(record)) = read_topic(&space) {
            for entry in record.cursors.iter().cloned() {
                cursor_names.insert((topic.id, entry.id), entry.name.to_string());
            }
        }
    }
    check
        .committed
        .iter()
        .filter_map(|id| {
            JournalCursor::of(
                storage,
                check,
                *id,
                (
                    topic_names.get(&id.topic).map(|n| (*n).to_owned()),
                    cursor_names.get(&(id.topic, id.cursor)).cloned(),
                ),
            )
        })
        .collect()
}

/// `inspect` of the store in `storage`: every topic of the catalog (its ledger and cursor
/// counts) and the journal's segments, records and committed cursors.
pub(super) fn inspect_store(
    storage: &Arc<dyn Storage>,
    catalog: &Catalog,
) -> Result<StoreInspection> {
    let check = crate::journal::check_listed(
        storage.as_ref(),
        &crate::store::journal_seals(catalog),
        crate::store::journal_listing(catalog),
    )?;
    let mut topics = Vec::new();
    for topic in &catalog.topics {
        let space = crate::store::topic_storage(storage, catalog, topic.id)?;
        let view = collect(&space, false, &mut Vec::new());
        topics.push(StoreTopic {
            id: topic.id,
            name: topic.name.clone(),
            ledgers: view.ledgers.len(),
            cursors: view.cursors.len(),
        });
    }
    Ok(StoreInspection {
        store_id: catalog.store_id,
        topics,
        journal: JournalSummary {
            segments: check.segments,
            records: check.records,
            cursors: check.cursors,
            torn_tail: check.torn_tail.is_some(),
            batch_partitions: check.batch_partitions,
            partial_entries: check.partial_entries,
        },
        cursors: journal_cursors(storage, catalog, &check),
    })
}

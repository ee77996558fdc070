//! The topic record's cursor table in chunk records: reading them, writing them before the
//! record that pins them, and what is left of them once no record pins them.
//!
//! Owns: the chunk records `topic-cursors-{index}-{made_at}` of a topic (layout in
//! [`crate::format::meta`], crash analysis in `docs/format.md`, "Cursor table chunks"). A
//! chunk record is written once, whole and synced, under the name of the topic record's version
//! whose write pins it, before that write; it is never written again under that name (a chunk
//! that changes is written under the next write's version), and removed once the record no
//! longer pins it (after the write that superseded it, or by the next open). Must never remove
//! a record a version of the topic record this owner may still write pins, nor pin one it did
//! not write for that version.

use std::collections::HashSet;

use super::topic::TOPIC_RECORD;
use crate::error::{Error, Result};
use crate::format::meta::{
    CursorTable, EMPTY_CHUNK, MISSING_CURSOR_CHUNK, TopicRecord, cursor_chunk_crc,
    cursor_chunk_record, encode_cursor_chunk, is_cursor_chunk_record,
};
use crate::format::store::ChunkPin;
use crate::meta::MetaStore;

/// The topic record and its version, its cursor table read whole from the chunk records it
/// pins; `None` when there is no topic record.
///
/// # Errors
/// [`Error::Corrupted`] naming the topic record when it does not decode, or the chunk record
/// that is missing or does not match its pin; the errors of [`MetaStore::get`].
pub(crate) fn read_topic_record(meta: &dyn MetaStore) -> Result<Option<(u64, TopicRecord)>> {
    let Some((version, bytes)) = meta.get(TOPIC_RECORD)? else {
        return Ok(None);
    };
    let mut record = TopicRecord::decode(&bytes).map_err(|c| c.in_record(TOPIC_RECORD))?;
    load_chunks(meta, &mut record.cursors)?;
    Ok(Some((version, record)))
}

/// Adds to `table` (decoded from a topic record: pins and tail) the entries of every chunk
/// record it pins, each checked against its pin. An owner's open reads them after its claim:
/// a former owner removes a chunk record only after a record write of its own that no longer
/// pins it took, which the claim refuses from then on, so a chunk the claimed record pins
/// stays.
///
/// # Errors
/// [`Error::Corrupted`] naming the chunk record that is missing or does not match its pin.
pub(crate) fn load_chunks(meta: &dyn MetaStore, table: &mut CursorTable) -> Result<()> {
    let names: Vec<(usize, String)> = table
        .pinned_records()
        .enumerate()
        .filter_map(|(k, name)| Some((k, name?)))
        .collect();
    for (k, name) in names {
        let bytes = crate::meta::pinned_chunk(meta, &name, MISSING_CURSOR_CHUNK)?;
        table.add_chunk(k, &bytes).map_err(|c| c.in_record(name))?;
    }
    Ok(())
}

/// Makes `table` ready to be written as version `next` of the topic record, which this owner
/// holds at `held`: full chunks moved out of the tail ([`CursorTable::fill_chunks`]), then
/// every chunk not pinned (moved, or changed by a deletion) written under the name of `next`
/// ([`crate::meta::put_chunk`]) and pinned; an emptied one is pinned as having no record.
///
/// # Errors
/// [`Error::Fenced`] when a record of that name holds other bytes and the topic record moved
/// on; the errors of [`MetaStore::put`].
pub(crate) fn stage_chunks(
    meta: &dyn MetaStore,
    table: &mut CursorTable,
    (held, next): (u64, u64),
) -> Result<()> {
    table.fill_chunks();
    let mut pins = Vec::new();
    for (k, chunk) in table.unpinned() {
        if chunk.entries.is_empty() {
            pins.push((k, EMPTY_CHUNK));
            continue;
        }
        let index = u32::try_from(k).map_err(|_| Error::LimitExceeded {
            reason: "the topic's cursor table has run out of chunk indexes".into(),
        })?;
        let bytes = encode_cursor_chunk(index, &chunk.entries);
        let name = cursor_chunk_record(k, next);
        crate::meta::put_chunk(meta, (TOPIC_RECORD, Some(held)), &name, &bytes)?;
        pins.push((
            k,
            ChunkPin {
                made_at: next,
                crc: cursor_chunk_crc(&bytes),
            },
        ));
    }
    for (k, pin) in pins {
        table.pin(k, pin);
    }
    Ok(())
}

/// The chunk records `before` pins that `after` does not: superseded by the write of `after`,
/// removed once it took.
pub(crate) fn superseded(before: &CursorTable, after: &CursorTable) -> Vec<String> {
    let kept: HashSet<String> = after.pinned_records().flatten().collect();
    before
        .pinned_records()
        .flatten()
        .filter(|name| !kept.contains(name))
        .collect()
}

/// Removes the superseded chunk records `names` (nothing reads them any more). A removal that
/// fails, or that a power cut takes back, leaves a leftover the next open removes.
pub(crate) fn discard(meta: &dyn MetaStore, names: &[String]) {
    for name in names {
        let _ = meta.discard(name, crate::meta::CHUNK_RECORD_VERSION);
    }
}

/// The files among `listed` (a listing of the topic's directory) of chunk records `table` does
/// not pin, and the temporary files of chunk records: what a write cut short, refused or
/// superseded left. The open removes them after its ownership check; `verify` calls them
/// leftovers.
pub(crate) fn chunk_leftovers(listed: &[String], table: &CursorTable) -> Vec<String> {
    let pinned: HashSet<String> = table.pinned_records().flatten().collect();
    crate::meta::unpinned_chunk_files(listed.iter().cloned(), is_cursor_chunk_record, &pinned)
}

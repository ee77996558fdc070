//! The topic record's tables in chunk records (its cursor table, its ledgers): reading them,
//! writing them before the record that pins them, and what is left of them once no record pins
//! them.
//!
//! Owns: the chunk records `topic-cursors-{index}-{made_at}` and
//! `topic-ledgers-{index}-{made_at}` of a topic (layout in [`crate::format::meta`], crash
//! analysis in `docs/format.md`, "Cursor table chunks" and "Ledger chunks"). A chunk record is
//! written once, whole and synced, under the name of the topic record's version whose write
//! pins it, before that write; it is never written again under that name (a chunk that changes
//! is written under the next write's version), and removed once the record no longer pins it
//! (after the write that superseded it, or by the next open). Must never remove a record a
//! version of the topic record this owner may still write pins, nor pin one it did not write
//! for that version.

use super::topic::TOPIC_RECORD;
use crate::error::{Error, Result};
use crate::format::meta::{
    ChunkEntry, ChunkTable, EMPTY_CHUNK, MISSING_CHUNK, TopicRecord, chunk_crc, chunk_record,
    encode_chunk, is_topic_chunk_record,
};
use crate::format::store::ChunkPin;
use crate::hashing::IdSet;
use crate::meta::MetaStore;

/// The topic record and its version, its tables read whole from the chunk records it pins;
/// `None` when there is no topic record.
///
/// # Errors
/// [`Error::Corrupted`] naming the topic record when it does not decode, or the chunk record
/// that is missing or does not match its pin; the errors of [`MetaStore::get`].
pub(crate) fn read_topic_record(meta: &dyn MetaStore) -> Result<Option<(u64, TopicRecord)>> {
    let Some((version, bytes)) = meta.get(TOPIC_RECORD)? else {
        return Ok(None);
    };
    let mut record = TopicRecord::decode(&bytes).map_err(|c| c.in_record(TOPIC_RECORD))?;
    load_chunks(meta, &mut record)?;
    Ok(Some((version, record)))
}

/// Adds to `record`'s tables (decoded from a topic record: pins and tails) the entries of
/// every chunk record they pin, each checked against its pin. An owner's open reads them after
/// its claim: a former owner removes a chunk record only after a record write of its own that
/// no longer pins it took, which the claim refuses from then on, so a chunk the claimed record
/// pins stays.
///
/// # Errors
/// [`Error::Corrupted`] naming the chunk record that is missing or does not match its pin.
pub(crate) fn load_chunks(meta: &dyn MetaStore, record: &mut TopicRecord) -> Result<()> {
    load_table(meta, &mut record.ledgers)?;
    load_table(meta, &mut record.cursors)
}

fn load_table<E: ChunkEntry>(meta: &dyn MetaStore, table: &mut ChunkTable<E>) -> Result<()> {
    let names: Vec<(usize, String)> = table
        .pinned_records()
        .enumerate()
        .filter_map(|(k, name)| Some((k, name?)))
        .collect();
    for (k, name) in names {
        let bytes = crate::meta::pinned_chunk(meta, &name, MISSING_CHUNK)?;
        table.add_chunk(k, &bytes).map_err(|c| c.in_record(name))?;
    }
    Ok(())
}

/// Makes `record`'s tables ready to be written as version `next` of the topic record, which
/// this owner holds at `held`: full chunks moved out of each tail
/// ([`ChunkTable::fill_chunks`]), then every chunk not pinned (moved, or changed by a
/// deletion) written under the name of `next` ([`crate::meta::put_chunk`]) and pinned; an
/// emptied one is pinned as having no record.
///
/// # Errors
/// [`Error::Fenced`] when a record of that name holds other bytes and the topic record moved
/// on; the errors of [`MetaStore::put`].
pub(crate) fn stage_chunks(
    meta: &dyn MetaStore,
    record: &mut TopicRecord,
    versions: (u64, u64),
) -> Result<()> {
    stage_table(meta, &mut record.ledgers, versions)?;
    stage_table(meta, &mut record.cursors, versions)
}

fn stage_table<E: ChunkEntry>(
    meta: &dyn MetaStore,
    table: &mut ChunkTable<E>,
    (held, next): (u64, u64),
) -> Result<()> {
    table.fill_chunks();
    let mut pins = Vec::new();
    for (k, chunk) in table.unpinned() {
        if chunk.entries.is_empty() {
            pins.push((k, EMPTY_CHUNK));
            continue;
        }
        let index = u32::try_from(table.first() + k).map_err(|_| Error::LimitExceeded {
            reason: "the topic record has run out of chunk indexes".into(),
        })?;
        let bytes = encode_chunk(index, &chunk.entries);
        let name = chunk_record::<E>(index as usize, next);
        crate::meta::put_chunk(meta, (TOPIC_RECORD, Some(held)), &name, &bytes)?;
        pins.push((
            k,
            ChunkPin {
                made_at: next,
                crc: chunk_crc(&bytes),
            },
        ));
    }
    for (k, pin) in pins {
        table.pin(k, pin);
    }
    Ok(())
}

/// The chunk records of both tables of a topic record.
fn pinned(record: &TopicRecord) -> impl Iterator<Item = String> + '_ {
    (record.ledgers.pinned_records().flatten()).chain(record.cursors.pinned_records().flatten())
}

/// The chunk records `before` pins that `after` does not: superseded by the write of `after`,
/// removed once it took.
pub(crate) fn superseded(before: &TopicRecord, after: &TopicRecord) -> Vec<String> {
    let kept: IdSet<String> = pinned(after).collect();
    pinned(before).filter(|name| !kept.contains(name)).collect()
}

/// Removes the superseded chunk records `names` (nothing reads them any more). A removal that
/// fails, or that a power cut takes back, leaves a leftover the next open removes.
pub(crate) fn discard(meta: &dyn MetaStore, names: &[String]) {
    for name in names {
        let _ = meta.discard(name, crate::meta::CHUNK_RECORD_VERSION);
    }
}

/// The files among `listed` (a listing of the topic's directory) of chunk records `record`
/// does not pin, and the temporary files of chunk records: what a write cut short, refused or
/// superseded left. The open removes them after its ownership check; `verify` calls them
/// leftovers.
pub(crate) fn chunk_leftovers(listed: &[String], record: &TopicRecord) -> Vec<String> {
    let pinned: IdSet<String> = pinned(record).collect();
    crate::meta::unpinned_chunk_files(listed.iter().cloned(), is_topic_chunk_record, &pinned)
}

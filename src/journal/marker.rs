//! The records a journal writes for a cursor: partitions, batch records, and its markers.
//!
//! **Deltas.** A cursor's marker is a *delta* (record kind 4) whenever it is smaller than a
//! full marker: the cursor's state, the rows added or rewritten and the keys removed since its
//! committed marker or delta, which it names (location and payload CRC) as its base. So the
//! bytes of a tick grow with what changed, not with the cursor's live partitions. A cursor's
//! first marker, and one that changes most of its rows (a seek), is full; so is the first one
//! after an open whose chain holds a batch row of a segment before version 8
//! ([`Committed::unbound_batch`]), so that from then on a version 8 row names every live batch
//! record by its own CRC.

use super::index::{Committed, CursorId, PartLoc, Rows};
use crate::ackset::PartitionKey;
use crate::error::{Error, Result};
use crate::format::cursor::{
    BatchRow, PartitionRow, PersistedState, ROW_LEN, TableRef, bind_entry,
    encode_marker_with_batch, marker_with_batch_len, payload_crc,
};
use crate::format::journal::{
    JournalLoc, MAX_BODY_LEN, NAME_TAG_LEN, RECORD_HEADER_LEN, Record, RecordKind, SEGMENT_VERSION,
    delta_len, encode_delta, encode_record, record_binding, record_len, split_name_tag,
};

pub(super) fn partition_record(cursor: CursorId, payload: &[u8]) -> Record<'_> {
    cursor_record(RecordKind::Partition, cursor, payload)
}

pub(super) fn cursor_record(kind: RecordKind, cursor: CursorId, payload: &[u8]) -> Record<'_> {
    Record {
        kind,
        topic: cursor.topic,
        cursor: cursor.cursor,
        payload,
    }
}

/// The name tag a marker, delta or snapshot record binds and the payload after it (0 and the whole
/// payload for other kinds, and before version 4). A payload too short for its tag is an empty
/// one: a marker that does not verify.
pub(super) fn named_payload<'a>(rec: &Record<'a>, version: u16) -> (u32, &'a [u8]) {
    match rec.kind {
        RecordKind::Marker | RecordKind::Delta | RecordKind::Snapshot => {
            split_name_tag(version, rec.payload).unwrap_or((0, &[]))
        }
        RecordKind::Partition | RecordKind::Forget | RecordKind::Batch => (0, rec.payload),
    }
}

/// Bytes of the frame of a full marker of `state` with `rows` live partitions and `batch`
/// batch rows.
pub(super) fn full_marker_frame_len(state: &PersistedState, rows: usize, batch: usize) -> u64 {
    let payload =
        NAME_TAG_LEN + marker_with_batch_len(state, TableRef::Inline(&[]), batch) + rows * ROW_LEN;
    record_len(payload) as u64
}

/// The most live partitions a full marker of `state` with `batch` batch rows can list: its
/// record's body stays within the [`MAX_BODY_LEN`] every reader accepts. A delta is never
/// larger than the full marker it stands for, and a rollover rewrites full markers, so a
/// cursor is staged only while its full marker fits.
#[must_use]
pub fn marker_room(state: &PersistedState, batch: usize) -> usize {
    let empty = full_marker_frame_len(state, 0, batch);
    let most = (RECORD_HEADER_LEN + MAX_BODY_LEN) as u64;
    usize::try_from(most.saturating_sub(empty) / ROW_LEN as u64).unwrap_or(usize::MAX)
}

/// [`Error::LimitExceeded`] when a full marker of `state` with `rows` live partitions and
/// `batch` batch rows would not fit in a record (see [`marker_room`]).
pub(super) fn check_marker_fits(state: &PersistedState, rows: usize, batch: usize) -> Result<()> {
    let room = marker_room(state, batch);
    if rows > room {
        return Err(Error::LimitExceeded {
            reason: format!(
                "the cursor's acknowledgements span {rows} partitions (a data ledger and \
                 65,536 entry ids each) and its marker lists at most {room}: acknowledge or \
                 skip entries to move mark-delete, or trim ledgers"
            ),
        });
    }
    Ok(())
}

fn batch_rows<'a>(
    live: impl Iterator<Item = (&'a PartitionKey, &'a PartLoc)>,
) -> Result<Vec<BatchRow>> {
    live.map(|(k, p)| {
        Ok(BatchRow {
            ledger_id: k.ledger_id,
            chunk: k.chunk,
            entry_id: p.loc.pack().ok_or_else(too_far)?,
            crc: p.crc,
            // A batch record holds at most a partition's entries (2^16), so this never
            // saturates.
            entries: u32::try_from(p.cardinality).unwrap_or(u32::MAX),
        })
    })
    .collect()
}

/// The rows a delta adds or rewrites, and the keys it removes.
type Changes<'a> = (Vec<(&'a PartitionKey, &'a PartLoc)>, Vec<(u64, u64)>);

/// What a delta changes of `base` to make `live`: the rows added or rewritten, and the keys
/// removed.
fn changes<'a>(base: &Rows, live: &'a Rows) -> Changes<'a> {
    let added = live
        .iter()
        .filter(|(k, p)| base.get(k).is_none_or(|b| b.loc != p.loc))
        .collect();
    let removed = base
        .keys()
        .filter(|k| !live.contains_key(k))
        .map(|k| (k.ledger_id, k.chunk))
        .collect();
    (added, removed)
}

fn marker_rows<'a>(
    live: impl Iterator<Item = (&'a PartitionKey, &'a PartLoc)>,
) -> Result<Vec<PartitionRow>> {
    live.map(|(k, p)| {
        Ok(PartitionRow {
            ledger_id: k.ledger_id,
            chunk: k.chunk,
            entry_id: p.loc.pack().ok_or_else(too_far)?,
            crc: p.crc,
            cardinality: p.cardinality,
        })
    })
    .collect()
}

fn too_far() -> Error {
    Error::LimitExceeded {
        reason: "journal location beyond 4 GiB in a segment".into(),
    }
}

/// Appends `cursor`'s next marker record to `buf`, whose first byte lands at `at` (segment,
/// offset), and returns the committed chain it makes and the record's kind: a delta on `chain`
/// (the cursor's committed marker or delta) when one is smaller than a full marker, else a
/// full marker of every `live` row and batch row.
pub(super) fn append_marker(
    buf: &mut Vec<u8>,
    (cursor, name): (CursorId, u32),
    (segment, offset): (u64, u64),
    chain: Option<&Committed>,
    state: &PersistedState,
    (live, live_batch): (Rows, Rows),
) -> Result<(Committed, RecordKind)> {
    let loc = JournalLoc { segment, offset };
    // Every marker goes to a segment of this build's version: its CRC covers the cursor and
    // its name tag, which the payload starts with.
    let bound = record_binding(SEGMENT_VERSION, cursor.topic, cursor.cursor, name);
    let binding = bound.as_slice();
    let full_len = full_marker_frame_len(state, live.len(), live_batch.len());
    // A chain never changes its name: a delta builds only on a chain of this name or of none.
    // Nor does one build on a chain holding a batch row of a segment before version 8: a delta
    // names only the rows it changes, and a full marker names every live batch record by its
    // own CRC (see [`Committed::unbound_batch`]).
    let chain = chain.filter(|base| (base.name == 0 || base.name == name) && !base.unbound_batch);
    let delta = chain.and_then(|base| {
        let (added, removed) = changes(&base.rows, &live);
        let (added_batch, removed_batch) = changes(&base.batch, &live_batch);
        let len = NAME_TAG_LEN
            + delta_len(
                removed.len(),
                removed_batch.len(),
                marker_with_batch_len(state, TableRef::Inline(&[]), added_batch.len())
                    + added.len() * ROW_LEN,
            );
        (record_len(len) < usize::try_from(full_len).unwrap_or(usize::MAX)).then_some((
            base,
            (added, removed),
            (added_batch, removed_batch),
        ))
    });
    let (kind, payload, floor, unbound_batch) =
        if let Some((base, (added, removed), (added_batch, removed_batch))) = delta {
            let floor = added
                .iter()
                .chain(&added_batch)
                .map(|(_, p)| p.loc.segment)
                .fold(base.floor.min(segment), u64::min);
            let mut marker = encode_marker_with_batch(
                state,
                TableRef::Inline(&marker_rows(added.into_iter())?),
                &batch_rows(added_batch.into_iter())?,
            )?;
            bind_entry(&mut marker, binding);
            let mut payload = name.to_le_bytes().to_vec();
            let base_loc = base.marker.pack().ok_or_else(too_far)?;
            encode_delta(
                &mut payload,
                (base_loc, base.crc),
                &removed,
                &removed_batch,
                &marker,
            );
            (RecordKind::Delta, payload, floor, base.unbound_batch)
        } else {
            let rows = marker_rows(live.iter())?;
            let mut marker = encode_marker_with_batch(
                state,
                TableRef::Inline(&rows),
                &batch_rows(live_batch.iter())?,
            )?;
            bind_entry(&mut marker, binding);
            let mut payload = Vec::with_capacity(NAME_TAG_LEN + marker.len());
            payload.extend_from_slice(&name.to_le_bytes());
            payload.extend_from_slice(&marker);
            let floor = Committed::full_floor(loc, &live, &live_batch);
            (RecordKind::Marker, payload, floor, false)
        };
    encode_record(
        buf,
        &Record {
            kind,
            topic: cursor.topic,
            cursor: cursor.cursor,
            payload: &payload,
        },
    )?;
    let committed = Committed {
        marker: loc,
        marker_len: full_len,
        crc: payload_crc(&payload),
        name,
        floor,
        state: state.clone(),
        rows: live,
        batch: live_batch,
        unbound_batch,
    };
    Ok((committed, kind))
}

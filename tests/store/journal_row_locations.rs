//! A marker's row names its partition record by location. A row whose location is not exactly
//! where that cursor's record starts names nothing, even when every other field it holds (key,
//! CRC, cardinality) matches a record the scan saw: a location one byte before or after the
//! record, inside it, the marker's own, that of an identical copy written after the marker, or
//! that of another cursor's identical record. Each such marker, below the synced length and of
//! a cursor without a snapshot, is damage: the open refuses it (`Corrupted`) and the offline
//! check agrees. The marker's own CRC (bound to its cursor and name) and its frame CRC are
//! recomputed, so only the location is wrong.

use ackstore::internals::format::cursor::bind_entry;
use ackstore::internals::format::journal::{
    JournalLoc, NAME_TAG_LEN, Record, RecordKind, SEGMENT_VERSION, decode_record, encode_record,
    record_binding,
};
use ackstore::internals::journal::index::CursorId;

use super::journal_partition_records::{A, B, flush, key, opened, segment_of, set};
use crate::support;
use support::mutate::{RecordAt, records_of};

/// One segment: tick 1 writes A's partitions 1 and 2 and then B's (B's partition 1 holds the
/// same set as A's, so their records' payloads and CRCs are equal), then their markers; tick 2
/// writes A's partition 1 again with the same set. Returns the segment's bytes.
fn journal() -> Vec<u8> {
    segment_of(&[
        vec![
            flush(A, vec![(key(1), set(5)), (key(2), set(6))]),
            flush(B, vec![(key(1), set(5)), (key(2), set(8))]),
        ],
        vec![flush(A, vec![(key(1), set(5))])],
    ])
}

fn loc(r: &RecordAt) -> u64 {
    JournalLoc {
        segment: 1,
        offset: r.offset as u64,
    }
    .pack()
    .unwrap()
}

/// The records of `cursor` of `kind`, in order.
fn of(bytes: &[u8], cursor: CursorId, kind: RecordKind) -> Vec<RecordAt> {
    records_of(bytes)
        .into_iter()
        .filter(|r| r.kind == kind && r.cursor == cursor.cursor)
        .collect()
}

/// `bytes` with the row of `marker` that names location `from` naming `to` instead, the
/// marker's bound CRC and its frame CRC recomputed.
fn renamed(bytes: &[u8], marker: &RecordAt, from: u64, to: u64) -> Vec<u8> {
    let frame = &bytes[marker.offset..marker.offset + marker.len];
    let (rec, len) = decode_record(frame).unwrap().unwrap();
    assert_eq!(len, marker.len);
    let mut payload = rec.payload.to_vec();
    let at: Vec<usize> = (0..payload.len().saturating_sub(7))
        .filter(|&i| payload[i..i + 8] == from.to_le_bytes())
        .collect();
    assert_eq!(at.len(), 1, "one row names {from:#x}");
    payload[at[0]..at[0] + 8].copy_from_slice(&to.to_le_bytes());
    let name = u32::from_le_bytes(payload[..NAME_TAG_LEN].try_into().unwrap());
    let binding = record_binding(SEGMENT_VERSION, rec.topic, rec.cursor, name);
    bind_entry(&mut payload[NAME_TAG_LEN..], binding.as_slice());
    let mut out = Vec::new();
    encode_record(
        &mut out,
        &Record {
            payload: &payload,
            ..rec
        },
    )
    .unwrap();
    assert_eq!(out.len(), marker.len);
    let mut whole = bytes.to_vec();
    whole[marker.offset..marker.offset + marker.len].copy_from_slice(&out);
    whole
}

#[test]
fn the_undamaged_journal_opens_and_its_first_marker_is_full() {
    let bytes = journal();
    opened(&bytes, "undamaged").unwrap();
    assert_eq!(of(&bytes, A, RecordKind::Marker).len(), 1);
    assert_eq!(of(&bytes, A, RecordKind::Partition).len(), 3);
}

#[test]
fn a_row_naming_anything_but_the_start_of_its_cursors_record_is_refused() {
    let bytes = journal();
    let marker = &of(&bytes, A, RecordKind::Marker)[0];
    let parts = of(&bytes, A, RecordKind::Partition);
    let (first, second, later) = (&parts[0], &parts[1], &parts[2]);
    assert!(first.offset < marker.offset && later.offset > marker.offset);
    let other = &of(&bytes, B, RecordKind::Partition)[0];
    for (what, from, to) in [
        ("a byte before the record", first, loc(first) - 1),
        ("a byte into the record", first, loc(first) + 1),
        (
            "the last byte of the record",
            first,
            loc(first) + first.len as u64 - 1,
        ),
        (
            "a byte into the record before, for the next one's row",
            second,
            loc(first) + 1,
        ),
        ("a byte before the next record", first, loc(second) - 1),
        ("the marker's own location", first, loc(marker)),
        (
            "an identical copy written after the marker",
            first,
            loc(later),
        ),
        ("another cursor's identical record", first, loc(other)),
        (
            "a segment the scan did not read",
            first,
            loc(first) + (1 << 32),
        ),
    ] {
        let damaged = renamed(&bytes, marker, loc(from), to);
        let got = opened(&damaged, what);
        assert!(
            matches!(got, Err(ackstore::Error::Corrupted { .. })),
            "{what}: {got:?}"
        );
    }
}

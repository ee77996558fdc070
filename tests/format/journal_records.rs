//! Journal segment records: markers, deltas and their bounds, round trips and damage.

use ackstore::internals::error::CorruptionKind;
use ackstore::internals::error::Error;
use ackstore::internals::format::cursor::Table;
use ackstore::internals::format::cursor::decode_marker_bound;
use ackstore::internals::format::journal::*;

#[test]
fn headers_and_records_round_trip_at_their_documented_sizes() {
    let previous = Predecessor {
        segment: 5,
        len: 1234,
    };
    let h = encode_segment_header(7, Some(previous));
    assert_eq!(SEGMENT_HEADER_LEN, 24);
    assert_eq!((PREDECESSOR_AT, PREDECESSOR_LEN), (24, 20));
    assert_eq!(SLOT_LEN, 12);
    assert_eq!(SLOTS_AT, 44);
    assert_eq!(h.len(), 68);
    assert_eq!(records_start(SEGMENT_VERSION), 68);
    assert_eq!(
        decode_predecessor(7, &h[PREDECESSOR_AT..SLOTS_AT]).unwrap(),
        Some(previous)
    );
    let first = encode_segment_header(1, None);
    assert_eq!(
        decode_predecessor(1, &first[PREDECESSOR_AT..SLOTS_AT]).unwrap(),
        None
    );
    assert_eq!(records_start(SEGMENT_VERSION_V2), 24);
    assert_eq!(records_start(SEGMENT_VERSION_V1), 24);
    assert_eq!(decode_segment_header(&h).unwrap(), 7);
    assert_eq!(decode_slots(7, &h[SLOTS_AT..]), 68);
    let mut out = Vec::new();
    let rec = Record {
        kind: RecordKind::Marker,
        topic: 3,
        cursor: 9,
        payload: b"payload",
    };
    encode_record(&mut out, &rec).unwrap();
    assert_eq!(out.len(), record_len(7));
    assert_eq!(out.len(), 8 + 17 + 7);
    assert_eq!(decode_record(&out).unwrap(), Some((rec, out.len())));
    assert_eq!(decode_record(&[0; 8]).unwrap(), None);
    assert_eq!(decode_record(&[]).unwrap(), None);
}

#[test]
fn a_record_of_the_largest_body_a_reader_accepts_encodes_and_one_byte_more_is_refused() {
    let payload = vec![7u8; MAX_BODY_LEN - BODY_FIXED_LEN];
    let rec = Record {
        kind: RecordKind::Marker,
        topic: 1,
        cursor: 2,
        payload: &payload,
    };
    let mut out = vec![1, 2, 3];
    encode_record(&mut out, &rec).unwrap();
    assert_eq!(
        decode_record(&out[3..]).unwrap(),
        Some((rec, out.len() - 3))
    );

    let payload = vec![7u8; MAX_BODY_LEN - BODY_FIXED_LEN + 1];
    let mut out = vec![1, 2, 3];
    let refused = encode_record(
        &mut out,
        &Record {
            payload: &payload,
            ..rec
        },
    );
    assert!(
        matches!(refused, Err(Error::LimitExceeded { .. })),
        "{refused:?}"
    );
    assert_eq!(out, [1, 2, 3], "nothing is appended");
}

#[test]
fn every_truncation_and_flipped_bit_of_a_record_is_refused() {
    let mut out = Vec::new();
    encode_record(
        &mut out,
        &Record {
            kind: RecordKind::Partition,
            topic: 1,
            cursor: 2,
            payload: &[5; 20],
        },
    )
    .unwrap();
    for n in 1..out.len() {
        assert!(decode_record(&out[..n]).is_err(), "prefix {n}");
    }
    for i in 0..out.len() * 8 {
        let mut b = out.clone();
        b[i / 8] ^= 1 << (i % 8);
        assert!(!matches!(decode_record(&b), Ok(Some(_))), "bit {i}");
    }
    let h = encode_segment_header(1, None);
    for i in 0..SEGMENT_HEADER_LEN * 8 {
        let mut b = h;
        b[i / 8] ^= 1 << (i % 8);
        assert!(decode_segment_header(&b).is_err(), "header bit {i}");
    }
    let h = encode_segment_header(
        9,
        Some(Predecessor {
            segment: 8,
            len: 4000,
        }),
    );
    for i in 0..PREDECESSOR_LEN * 8 {
        let mut b = h;
        b[PREDECESSOR_AT + i / 8] ^= 1 << (i % 8);
        assert!(
            decode_predecessor(9, &b[PREDECESSOR_AT..SLOTS_AT]).is_err(),
            "predecessor bit {i}"
        );
    }
    // Another segment's predecessor, or one not below the segment, never counts.
    assert!(decode_predecessor(10, &h[PREDECESSOR_AT..SLOTS_AT]).is_err());
    let ahead = encode_segment_header(
        3,
        Some(Predecessor {
            segment: 3,
            len: 68,
        }),
    );
    assert!(decode_predecessor(3, &ahead[PREDECESSOR_AT..SLOTS_AT]).is_err());
    assert!(decode_predecessor(9, &h[PREDECESSOR_AT..SLOTS_AT - 1]).is_err());
}

#[test]
fn the_slots_record_the_larger_valid_claim_and_refuse_flips_and_moves() {
    let mut slots = [0u8; SLOT_COPIES * SLOT_LEN];
    assert_eq!(decode_slots(4, &slots), 0);
    slots[..SLOT_LEN].copy_from_slice(&encode_slot(4, 0, 1000));
    slots[SLOT_LEN..].copy_from_slice(&encode_slot(4, 1, 900));
    assert_eq!(decode_slots(4, &slots), 1000);
    // Another segment's slots, or a copy moved to the other place, never count.
    assert_eq!(decode_slots(5, &slots), 0);
    let mut swapped = slots;
    swapped.rotate_left(SLOT_LEN);
    assert_eq!(decode_slots(4, &swapped), 0);
    // A flipped bit spoils the copy it hits; the other still counts.
    for i in 0..SLOT_LEN * 8 {
        let mut b = slots;
        b[i / 8] ^= 1 << (i % 8);
        assert_eq!(decode_slots(4, &b), 900, "bit {i}");
    }
    assert_eq!(decode_slots(4, &slots[..SLOT_LEN + 3]), 1000);
}

fn delta_bytes() -> (Vec<u8>, usize) {
    use ackstore::internals::format::cursor::{
        PartitionRow, PersistedState, TableRef, encode_marker,
    };
    let rows = [PartitionRow {
        ledger_id: 4,
        chunk: 2,
        entry_id: 0x0000_0003_0000_0040,
        crc: 0xdead_beef,
        cardinality: 17,
    }];
    let marker = encode_marker(&PersistedState::default(), TableRef::Inline(&rows)).unwrap();
    let mut out = Vec::new();
    encode_delta(
        &mut out,
        (0x0000_0002_0000_0018, 77),
        &[(1, 0), (4, 1)],
        &[],
        &marker,
    );
    (out, marker.len())
}

#[test]
fn a_delta_round_trips_at_its_documented_size() {
    let (out, marker_len) = delta_bytes();
    assert_eq!(DELTA_FIXED_LEN, 16);
    assert_eq!(DELTA_KEY_LEN, 16);
    assert_eq!(out.len(), delta_len(2, 0, marker_len));
    assert_eq!(out.len(), 16 + 2 * 16 + marker_len);
    // One row, no properties: the record `docs/format.md` sizes at 122 bytes without the
    // removed keys.
    assert_eq!(marker_len, 45 + 36);
    assert_eq!(record_len(delta_len(0, 0, marker_len)), 122);
    let d = decode_delta(&out, &[], SEGMENT_VERSION).unwrap();
    assert_eq!(d.removed_batch_len(), 0);
    // A version 4 delta has the same bytes.
    assert_eq!(
        decode_delta(&out, &[], SEGMENT_VERSION_V4)
            .unwrap()
            .removed()
            .collect::<Vec<_>>(),
        [(1, 0), (4, 1)]
    );
    assert_eq!(
        d.base,
        JournalLoc {
            segment: 2,
            offset: 0x18
        }
    );
    assert_eq!(d.base_crc, 77);
    assert_eq!(d.removed().collect::<Vec<_>>(), [(1, 0), (4, 1)]);
    assert_eq!(d.removed_len(), 2);
    let Table::Inline(rows) = d.marker.table else {
        panic!("inline table")
    };
    assert_eq!(rows.iter().map(|r| r.cardinality).collect::<Vec<_>>(), [17]);
    let mut framed = Vec::new();
    let rec = Record {
        kind: RecordKind::Delta,
        topic: 1,
        cursor: 2,
        payload: &out,
    };
    encode_record(&mut framed, &rec).unwrap();
    assert_eq!(framed.len(), record_len(out.len()));
    assert_eq!(decode_record(&framed).unwrap(), Some((rec, framed.len())));
}

#[test]
fn every_truncation_and_flipped_bit_of_a_delta_is_refused_or_decodes_to_other_values() {
    let (out, _) = delta_bytes();
    for n in 0..out.len() {
        assert!(
            decode_delta(&out[..n], &[], SEGMENT_VERSION).is_err(),
            "prefix {n}"
        );
    }
    // The fields before the marker have no checksum of their own (the record frame's CRC
    // covers them): a flip there decodes to another base or other keys, never to the same
    // delta; a flip in the marker fails its CRC.
    for i in 0..out.len() * 8 {
        let mut b = out.clone();
        b[i / 8] ^= 1 << (i % 8);
        if let Ok(d) = decode_delta(&b, &[], SEGMENT_VERSION) {
            let keys: Vec<_> = d.removed().collect();
            assert!(i / 8 < 48, "bit {i} in the marker");
            assert!(
                d.base.segment != 2
                    || d.base.offset != 0x18
                    || d.base_crc != 77
                    || keys != [(1, 0), (4, 1)],
                "bit {i}"
            );
        }
    }
    let mut unordered = out.clone();
    unordered[16..32].copy_from_slice(&out[32..48]);
    unordered[32..48].copy_from_slice(&out[16..32]);
    assert!(decode_delta(&unordered, &[], SEGMENT_VERSION).is_err());
}

fn batch_delta_bytes() -> Vec<u8> {
    use ackstore::internals::format::cursor::{
        BatchRow, PersistedState, TableRef, encode_marker_with_batch,
    };
    let batch = [BatchRow {
        ledger_id: 4,
        chunk: 0,
        entry_id: 0x0000_0003_0000_0080,
        crc: 0x1234_5678,
        entries: 2,
    }];
    let marker =
        encode_marker_with_batch(&PersistedState::default(), TableRef::Inline(&[]), &batch)
            .unwrap();
    let mut out = Vec::new();
    encode_delta(
        &mut out,
        (0x0000_0002_0000_0018, 77),
        &[(1, 0)],
        &[(3, 1)],
        &marker,
    );
    assert_eq!(out.len(), delta_len(1, 1, marker.len()));
    out
}

#[test]
fn a_version_5_delta_carries_removed_batch_keys_and_batch_rows() {
    let out = batch_delta_bytes();
    let d = decode_delta(&out, &[], SEGMENT_VERSION).unwrap();
    assert_eq!(d.removed().collect::<Vec<_>>(), [(1, 0)]);
    assert_eq!(d.removed_batch().collect::<Vec<_>>(), [(3, 1)]);
    assert_eq!(d.marker.batch.len(), 1);
    // No earlier version reads a removed-batch count or a batch table in a delta.
    assert!(decode_delta(&out, &[], SEGMENT_VERSION_V4).is_err());
    for n in 0..out.len() {
        assert!(
            decode_delta(&out[..n], &[], SEGMENT_VERSION).is_err(),
            "prefix {n}"
        );
    }
    // An empty removed-batch list is never flagged.
    let mut flagged = out.clone();
    flagged[32..36].copy_from_slice(&0u32.to_le_bytes());
    assert!(decode_delta(&flagged, &[], SEGMENT_VERSION).is_err());
}

#[test]
fn earlier_version_headers_still_read_and_unknown_versions_are_refused() {
    let full = encode_segment_header(3, None);
    let mut h = [0u8; SEGMENT_HEADER_LEN];
    h.copy_from_slice(&full[..SEGMENT_HEADER_LEN]);
    assert_eq!(decode_segment_header_version(&h).unwrap(), (3, 8));
    for (version, known) in [
        (7u16, true),
        (6, true),
        (5, true),
        (4, true),
        (3, true),
        (2, true),
        (1, true),
        (9, false),
        (0, false),
    ] {
        h[8..10].copy_from_slice(&version.to_le_bytes());
        let crc = crc32fast::hash(&h[..20]);
        h[20..].copy_from_slice(&crc.to_le_bytes());
        if known {
            assert_eq!(decode_segment_header_version(&h).unwrap(), (3, version));
        } else {
            assert_eq!(
                decode_segment_header_version(&h).unwrap_err().kind,
                CorruptionKind::UnsupportedVersion(u32::from(version))
            );
        }
    }
}

/// A batch record's payload ends with its own CRC, so the CRC32 of the whole payload (what a
/// batch row of versions 5 to 7 holds) is the same residue for every batch record; the CRC a
/// version 8 row holds is the entry's own CRC, which differs with its contents.
#[test]
fn a_version_8_batch_row_crc_tells_two_batch_records_apart_where_the_whole_payloads_crc_cannot() {
    use ackstore::internals::format::cursor::{
        BatchPartition, PartialEntry, encode_batch_entry, payload_crc,
    };
    use ackstore::internals::format::journal::{BATCH_CRC_LEN, batch_row_crc};
    let entry = |acked: u32| {
        encode_batch_entry(&BatchPartition {
            ledger_id: 1,
            chunk: 0,
            entries: vec![PartialEntry {
                entry_id: 1,
                batch_size: 4,
                acked: [acked].into_iter().collect(),
            }],
        })
        .unwrap()
    };
    let (a, b) = (entry(0), entry(1));
    assert_eq!(a.len(), b.len());
    assert_eq!(payload_crc(&a), 0x2144_DF1C, "the CRC residue");
    assert_eq!(payload_crc(&a), payload_crc(&b));
    assert_ne!(batch_row_crc(&a), batch_row_crc(&b));
    for payload in [&a, &b] {
        let (covered, own) = payload.split_at(payload.len() - BATCH_CRC_LEN);
        assert_eq!(batch_row_crc(payload), crc32fast::hash(covered));
        assert_eq!(
            batch_row_crc(payload).to_le_bytes(),
            own,
            "the entry's own CRC"
        );
    }
    assert_eq!(
        batch_row_crc(&[1, 2]),
        crc32fast::hash(&[]),
        "short input, no panic"
    );
}

#[test]
fn a_marker_bound_to_one_cursor_fails_its_crc_for_any_other() {
    use ackstore::internals::format::cursor::{
        PersistedState, TableRef, bind_entry, encode_marker,
    };
    let mut marker = encode_marker(&PersistedState::default(), TableRef::Inline(&[])).unwrap();
    let len = marker.len();
    bind_entry(&mut marker, &cursor_binding(1, 2));
    assert_eq!(marker.len(), len, "binding changes no size");
    assert!(decode_marker_bound(&marker, &cursor_binding(1, 2)).is_ok());
    for (topic, cursor) in [(1, 3), (2, 2), (2, 1)] {
        assert!(decode_marker_bound(&marker, &cursor_binding(topic, cursor)).is_err());
    }
    assert!(decode_marker_bound(&marker, &[]).is_err());
    let mut delta = Vec::new();
    encode_delta(&mut delta, (0x0000_0001_0000_0044, 7), &[], &[], &marker);
    assert!(decode_delta(&delta, &cursor_binding(1, 2), SEGMENT_VERSION).is_ok());
    assert!(decode_delta(&delta, &cursor_binding(1, 3), SEGMENT_VERSION).is_err());
}

#[test]
fn locations_pack_into_one_marker_row_field() {
    let loc = JournalLoc {
        segment: 5,
        offset: 1234,
    };
    assert_eq!(JournalLoc::unpack(loc.pack().unwrap()), loc);
    assert_eq!(
        JournalLoc {
            segment: 1 << 32,
            offset: 0
        }
        .pack(),
        None
    );
}

//! The cursor-ledger entry layouts. Kinds this build no longer writes (index
//! pages, batch pages) are tested on the committed samples' bytes.

use ackstore::internals::error::CorruptionKind;
use ackstore::internals::format::Reader;
use ackstore::internals::format::put_varint;
use ackstore::internals::format::varint_len;
use ackstore::internals::position::Position;
use std::collections::BTreeMap;

use crate::cursor_samples::{entries, payloads};
use ackstore::internals::format::cursor::*;

/// The committed index pages (kind 4) of `cursor-v1-paged-torn-marker`.
fn committed_index_pages() -> Vec<Vec<u8>> {
    payloads("cursor-v1-paged-torn-marker", 1, EntryKind::IndexPage)
}

fn state() -> PersistedState {
    PersistedState {
        mark_delete: Position::new(3, 41),
        epoch: 7,
        properties: [("a".to_string(), -1), ("zz".to_string(), 99)].into(),
    }
}

fn row(ledger_id: u64, chunk: u64) -> PartitionRow {
    PartitionRow {
        ledger_id,
        chunk,
        entry_id: ledger_id * 10 + chunk,
        crc: 0xdead_beef,
        cardinality: 5,
    }
}

#[test]
fn encoded_sizes_are_pinned() {
    assert_eq!(HEADER_LEN, 8);
    assert_eq!(ROW_LEN, 36);
    assert_eq!(PAGE_REF_LEN, 32);
    let empty = PersistedState::default();
    assert_eq!(empty.encoded_len(), 28);
    let marker = encode_marker(&empty, TableRef::Inline(&[])).unwrap();
    assert_eq!(marker.len(), 8 + 28 + 1 + 4 + 4);
    assert_eq!(marker.len(), marker_len(&empty, TableRef::Inline(&[])));
    let rows = [row(1, 0), row(1, 1)];
    let marker = encode_marker(&state(), TableRef::Inline(&rows)).unwrap();
    assert_eq!(marker.len(), marker_len(&state(), TableRef::Inline(&rows)));
    let part = encode_partition_entry(&PartitionEntry {
        ledger_id: 1,
        chunk: 2,
        cardinality: 3,
        body: b"abc",
    });
    assert_eq!(part.len(), HEADER_LEN + PARTITION_FIXED_LEN + 3 + CRC_LEN);
    let mut w = SnapshotWriter::new(&empty, usize::MAX, u64::MAX).unwrap();
    assert!(w.push(9, 0, 0).unwrap());
    assert!(w.push(9, 2, 2).unwrap());
    // Group header, then two bytes per alternating range.
    assert_eq!(w.len(), 8 + 28 + 4 + SNAPSHOT_GROUP_LEN + 2 + 2 + CRC_LEN);
}

#[test]
fn marker_round_trips_inline_and_paged() {
    let rows = [row(1, 0), row(1, 1), row(4, 0)];
    let bytes = encode_marker(&state(), TableRef::Inline(&rows)).unwrap();
    assert_eq!(peek_kind(&bytes).unwrap(), EntryKind::Marker);
    let marker = decode_marker(&bytes).unwrap();
    assert_eq!(marker.state, state());
    let Table::Inline(got) = marker.table else {
        panic!("inline table expected")
    };
    assert_eq!(got.iter().collect::<Vec<_>>(), rows);

    let pages = [
        PageRef {
            first: (1, 0),
            entry_id: 4,
            crc: 1,
            rows: 3,
        },
        PageRef {
            first: (7, 2),
            entry_id: 9,
            crc: 2,
            rows: 1,
        },
    ];
    let bytes = encode_marker(&state(), TableRef::Paged(&pages)).unwrap();
    let Table::Paged(got) = decode_marker(&bytes).unwrap().table else {
        panic!("paged table expected")
    };
    assert_eq!(got.iter().collect::<Vec<_>>(), pages);
}

#[test]
fn committed_index_pages_decode_to_rows_naming_partition_entries() {
    let by_id: BTreeMap<u64, Vec<u8>> = entries("cursor-v1-paged-torn-marker", 1)
        .into_iter()
        .collect();
    for page in committed_index_pages() {
        let rows: Vec<_> = decode_index_page(&page).unwrap().iter().collect();
        assert!(!rows.is_empty());
        assert_eq!(page.len(), HEADER_LEN + 4 + rows.len() * ROW_LEN + CRC_LEN);
        assert!(rows.windows(2).all(|w| w[0].key() < w[1].key()));
        for row in rows {
            let partition = &by_id[&row.entry_id];
            assert_eq!(payload_crc(partition), row.crc);
            let entry = decode_partition_entry(partition).unwrap();
            assert_eq!(
                (entry.ledger_id, entry.chunk, entry.cardinality),
                (row.ledger_id, row.chunk, row.cardinality)
            );
        }
        // A page is not a partition.
        assert!(decode_partition_entry(&page).is_err());
    }
}

#[test]
fn partition_entry_round_trips() {
    let entry = PartitionEntry {
        ledger_id: 8,
        chunk: 1,
        cardinality: 12,
        body: b"roaring",
    };
    let bytes = encode_partition_entry(&entry);
    assert_eq!(decode_partition_entry(&bytes).unwrap(), entry);
    assert!(decode_index_page(&bytes).is_err());
}

#[test]
fn snapshot_round_trips_ranges_across_ledgers() {
    let ranges = [
        (1, 0, 0),
        (1, 2, 10),
        (1, u64::MAX - 3, u64::MAX),
        (5, 7, 7),
    ];
    let mut w = SnapshotWriter::new(&state(), usize::MAX, u64::MAX).unwrap();
    for &(l, f, t) in &ranges {
        assert!(w.push(l, f, t).unwrap());
    }
    let bytes = w.finish();
    let snap = decode_snapshot(&bytes).unwrap();
    assert_eq!(snap.state, state());
    assert_eq!(snap.range_count, 4);
    assert_eq!(snap.ranges().collect::<Vec<_>>(), ranges);
    assert_eq!(reencode_snapshot(&snap).unwrap(), bytes);
}

#[test]
fn snapshot_writer_refuses_unordered_or_adjacent_ranges() {
    let mut w = SnapshotWriter::new(&state(), usize::MAX, u64::MAX).unwrap();
    assert!(w.push(2, 5, 6).unwrap());
    assert!(w.push(2, 7, 9).is_err(), "adjacent range accepted");
    assert!(w.push(2, 3, 3).is_err(), "earlier range accepted");
    assert!(w.push(1, 3, 3).is_err(), "earlier ledger accepted");
    assert!(w.push(2, 9, 8).is_err(), "empty range accepted");
}

#[test]
fn snapshot_writer_stops_at_range_and_byte_limits() {
    let mut w = SnapshotWriter::new(&state(), usize::MAX, 2).unwrap();
    assert!(w.push(1, 0, 0).unwrap());
    assert!(w.push(1, 2, 2).unwrap());
    assert!(!w.push(1, 4, 4).unwrap());
    assert_eq!(w.ranges(), 2);
    let base = SnapshotWriter::new(&state(), usize::MAX, 0).unwrap().len();
    let mut w = SnapshotWriter::new(&state(), base + SNAPSHOT_GROUP_LEN + 2, 100).unwrap();
    assert!(w.push(1, 0, 0).unwrap());
    assert!(!w.push(1, 2, 2).unwrap());
    assert_eq!(w.finish().len(), base + SNAPSHOT_GROUP_LEN + 2);
}

#[test]
fn every_bit_flip_is_detected() {
    let rows = [row(1, 0), row(3, 1)];
    let samples = [
        encode_marker(&state(), TableRef::Inline(&rows)).unwrap(),
        committed_index_pages().swap_remove(0),
        encode_partition_entry(&PartitionEntry {
            ledger_id: 1,
            chunk: 0,
            cardinality: 1,
            body: b"xyz",
        }),
    ];
    for bytes in &samples {
        for i in 0..bytes.len() * 8 {
            let mut bad = bytes.clone();
            bad[i / 8] ^= 1 << (i % 8);
            assert!(decode_marker(&bad).is_err());
            assert!(decode_index_page(&bad).is_err());
            assert!(decode_partition_entry(&bad).is_err());
            assert!(decode_snapshot(&bad).is_err());
        }
    }
}

#[test]
fn truncations_are_errors() {
    let bytes = encode_marker(&state(), TableRef::Inline(&[row(1, 0)])).unwrap();
    for len in 0..bytes.len() {
        assert!(
            decode_marker(&bytes[..len]).is_err(),
            "length {len} accepted"
        );
    }
}

#[test]
fn lengths_are_checked_before_use() {
    // A marker whose row count claims far more rows than the bytes hold, with a valid CRC.
    let mut bytes = encode_marker(&PersistedState::default(), TableRef::Inline(&[])).unwrap();
    bytes.truncate(bytes.len() - CRC_LEN);
    let count_at = bytes.len() - 4;
    bytes[count_at..].copy_from_slice(&u32::MAX.to_le_bytes());
    let bytes = end_frame(bytes);
    let err = decode_marker(&bytes).unwrap_err();
    assert_eq!(err.kind, CorruptionKind::BadLength);
}

#[test]
fn unordered_rows_are_corruption() {
    // A committed page with its first two rows swapped, under a valid CRC.
    let page = committed_index_pages()
        .into_iter()
        .find(|p| decode_index_page(p).unwrap().len() >= 2)
        .unwrap();
    let mut body = page[..page.len() - CRC_LEN].to_vec();
    let first = HEADER_LEN + 4;
    let mut swapped = body[first + ROW_LEN..first + 2 * ROW_LEN].to_vec();
    swapped.extend_from_slice(&body[first..first + ROW_LEN]);
    body[first..first + 2 * ROW_LEN].copy_from_slice(&swapped);
    let err = decode_index_page(&end_frame(body)).unwrap_err();
    assert_eq!(err.kind, CorruptionKind::InvalidField("row order"));
}

#[test]
fn overlong_varints_are_refused() {
    let mut body = Reader::new(&[0x80, 0x00]);
    assert!(body.varint().is_err());
    let mut body = Reader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]);
    assert!(body.varint().is_err());
    for v in [0, 1, 127, 128, 300, u64::MAX] {
        let mut out = Vec::new();
        put_varint(&mut out, v);
        assert_eq!(out.len(), varint_len(v));
        let mut body = Reader::new(&out);
        assert_eq!(body.varint().unwrap(), v);
    }
}

#[test]
fn oversized_properties_are_refused_before_writing() {
    let mut s = state();
    s.properties.insert("x".repeat(MAX_PROPERTY_NAME + 1), 0);
    assert!(encode_marker(&s, TableRef::Inline(&[])).is_err());
    assert!(SnapshotWriter::new(&s, usize::MAX, 1).is_err());
}

fn batch_row(ledger_id: u64, chunk: u64) -> BatchRow {
    BatchRow {
        ledger_id,
        chunk,
        entry_id: ledger_id + chunk,
        crc: 0x1234_5678,
        entries: 2,
    }
}

fn batch_partition(ledger_id: u64) -> BatchPartition {
    BatchPartition {
        ledger_id,
        chunk: 0,
        entries: vec![PartialEntry {
            entry_id: 3,
            batch_size: 10,
            acked: [1, 4].into_iter().collect(),
        }],
    }
}

#[test]
fn a_marker_without_batch_state_keeps_the_earlier_bytes_and_flags_zero() {
    let rows = [row(1, 0)];
    let plain = encode_marker(&state(), TableRef::Inline(&rows)).unwrap();
    let same = encode_marker_with_batch(&state(), TableRef::Inline(&rows), &[]).unwrap();
    assert_eq!(plain, same);
    assert_eq!(&plain[6..8], &[0, 0]);
    assert_eq!(decode_marker(&plain).unwrap().batch.len(), 0);
}

#[test]
fn a_marker_with_a_batch_table_round_trips_and_pins_its_size() {
    assert_eq!(BATCH_ROW_LEN, 32);
    let rows = [row(1, 0)];
    let batch = [batch_row(1, 0), batch_row(2, 5)];
    let bytes = encode_marker_with_batch(&state(), TableRef::Inline(&rows), &batch).unwrap();
    assert_eq!(
        bytes.len(),
        marker_len(&state(), TableRef::Inline(&rows)) + 4 + 2 * BATCH_ROW_LEN
    );
    assert_eq!(
        bytes.len(),
        marker_with_batch_len(&state(), TableRef::Inline(&rows), 2)
    );
    assert_eq!(u16::from_le_bytes([bytes[6], bytes[7]]), FLAG_BATCH);
    let marker = decode_marker(&bytes).unwrap();
    assert_eq!(marker.batch.iter().collect::<Vec<_>>(), batch.to_vec());
    for i in 0..bytes.len() {
        let mut bad = bytes.clone();
        bad[i] ^= 0x10;
        assert!(decode_marker(&bad).is_err(), "byte {i}");
    }
}

#[test]
fn a_batch_table_out_of_order_or_with_empty_rows_is_refused() {
    let unordered = [batch_row(2, 0), batch_row(1, 0)];
    let bytes = encode_marker_with_batch(&state(), TableRef::Inline(&[]), &unordered).unwrap();
    assert!(decode_marker(&bytes).is_err());
    let mut empty = batch_row(1, 0);
    empty.entries = 0;
    let bytes = encode_marker_with_batch(&state(), TableRef::Inline(&[]), &[empty]).unwrap();
    assert!(decode_marker(&bytes).is_err());
}

#[test]
fn a_snapshot_carries_its_batch_section_and_round_trips() {
    let mut w = SnapshotWriter::new(&state(), usize::MAX, u64::MAX).unwrap();
    w.push(1, 5, 9).unwrap();
    let plain_len = w.len();
    let batch = [batch_partition(1), batch_partition(2)];
    let bytes = w.finish_with_batch(&batch).unwrap();
    let entries: usize = batch
        .iter()
        .map(|p| 4 + encode_batch_entry(p).unwrap().len())
        .sum();
    assert_eq!(bytes.len(), plain_len + 4 + entries);
    let snap = decode_snapshot(&bytes).unwrap();
    assert_eq!(snap.batch, batch.to_vec());
    assert_eq!(snap.ranges().collect::<Vec<_>>(), vec![(1, 5, 9)]);
    assert_eq!(reencode_snapshot(&snap).unwrap(), bytes);
    for i in 0..bytes.len() {
        let mut bad = bytes.clone();
        bad[i] ^= 0x10;
        assert!(decode_snapshot(&bad).is_err(), "byte {i}");
    }
    // Without batch state the snapshot is what earlier builds wrote: flags 0.
    let w = SnapshotWriter::new(&state(), usize::MAX, u64::MAX).unwrap();
    let plain = w.finish_with_batch(&[]).unwrap();
    assert_eq!(&plain[6..8], &[0, 0]);
    assert!(decode_snapshot(&plain).unwrap().batch.is_empty());
}

#[test]
fn committed_batch_pages_and_the_marker_listing_them_decode() {
    let sample = "cursor-v1-batch-paged";
    let by_id: BTreeMap<u64, Vec<u8>> = entries(sample, 21).into_iter().collect();
    let marker = payloads(sample, 21, EntryKind::Marker)
        .into_iter()
        .next_back()
        .unwrap();
    assert_eq!(
        u16::from_le_bytes([marker[6], marker[7]]),
        FLAG_BATCH | FLAG_BATCH_PAGED
    );
    let decoded = decode_marker(&marker).unwrap();
    assert!(decoded.batch.is_empty());
    let pages: Vec<_> = decoded.batch_pages.iter().collect();
    assert!(!pages.is_empty());
    for page in &pages {
        let bytes = &by_id[&page.entry_id];
        assert_eq!(payload_crc(bytes), page.crc);
        let rows: Vec<_> = decode_batch_page(bytes).unwrap().iter().collect();
        assert_eq!(rows.len(), page.rows as usize);
        assert_eq!(rows[0].key(), page.first);
        assert_eq!(
            bytes.len(),
            HEADER_LEN + 4 + rows.len() * BATCH_ROW_LEN + CRC_LEN
        );
        assert!(rows.windows(2).all(|w| w[0].key() < w[1].key()));
    }
    let page = by_id[&pages[0].entry_id].clone();
    for (payload, is_page) in [(&marker, false), (&page, true)] {
        for i in 0..payload.len() {
            let mut bad = payload.clone();
            bad[i] ^= 0x10;
            let refused = if is_page {
                decode_batch_page(&bad).is_err()
            } else {
                decode_marker(&bad).is_err()
            };
            assert!(refused, "byte {i}");
        }
    }
    // A batch page of no row, under a valid CRC.
    let mut empty = start_frame(EntryKind::BatchPage, 4);
    empty.extend_from_slice(&0u32.to_le_bytes());
    assert!(decode_batch_page(&end_frame(empty)).is_err());
}

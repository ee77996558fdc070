//! The compact marker and index page decoders. This build writes neither kind:
//! the tests decode the committed samples (`tests/data/cursor-v2-*`, and the cursor ledgers of
//! `tests/data/cursor-ledger-alone-*`) and forged bodies behind a valid CRC.

use ackstore::internals::error::CorruptionKind;
use ackstore::internals::format::cursor::EntryKind;
use ackstore::internals::format::cursor::FLAG_BATCH;
use ackstore::internals::format::cursor::FLAG_BATCH_PAGED;
use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::format::cursor::TABLE_PAGED;
use ackstore::internals::format::partition::MAX_CHUNK;
use ackstore::internals::format::partition::PARTITION_SPAN;
use std::collections::BTreeMap;

use crate::cursor_samples::{entries, payloads};
use ackstore::internals::format::cursor::compact::*;
use ackstore::internals::format::cursor::{end_frame, payload_crc, peek_kind, start_frame_flags};
use ackstore::internals::format::put_varint;
use ackstore::internals::position::Position;

/// The committed compact markers and pages: inline tables carrying inline forms and entry
/// references (`cursor-v2-multi`), a paged table and its pages (`cursor-v2-paged-torn-marker`),
/// an inline batch table (`cursor-ledger-alone-cold`) and a paged one
/// (`cursor-ledger-alone-batch`).
fn committed() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (sample, ledger) in [
        ("cursor-v2-multi", 1),
        ("cursor-v2-paged-torn-marker", 1),
        ("cursor-ledger-alone-cold", 65),
        ("cursor-ledger-alone-batch", 65),
    ] {
        out.extend(payloads(sample, ledger, EntryKind::CompactMarker));
    }
    out.extend(payloads(
        "cursor-v2-paged-torn-marker",
        1,
        EntryKind::CompactPage,
    ));
    out
}

/// The newest compact marker of ledger `ledger` of `sample` that decodes.
fn newest_marker(sample: &str, ledger: u64) -> Vec<u8> {
    payloads(sample, ledger, EntryKind::CompactMarker)
        .into_iter()
        .rfind(|p| decode_compact_marker(p).is_ok())
        .unwrap()
}

fn rows_of(list: CompactRows<'_>) -> Vec<CompactRow<'_>> {
    list.iter().collect()
}

#[test]
fn compact_sizes_are_pinned() {
    assert_eq!((MIN_ROW_LEN, MIN_PAGE_REF_LEN, ENTRY_CRC_LEN), (5, 8, 4));
}

#[test]
fn committed_compact_markers_decode_to_the_state_and_tables_they_hold() {
    // What every `cursor-v2-*` sample's flushes held: mark-delete 3:0, epoch 2, x = 7.
    let inline = newest_marker("cursor-v2-multi", 1);
    let marker = decode_compact_marker(&inline).unwrap();
    assert_eq!(marker.state.mark_delete, Position::new(3, 0));
    assert_eq!(marker.state.epoch, 2);
    assert_eq!(marker.state.properties.get("x"), Some(&7));
    assert!(marker.batch.is_empty() && marker.batch_pages.is_empty());
    let CompactTable::Inline(list) = marker.table else {
        panic!("an inline table expected")
    };
    let rows = rows_of(list);
    assert!(rows.windows(2).all(|w| w[0].key() < w[1].key()));
    // Its entry references name partition entries before it, by their CRC.
    let by_id: BTreeMap<u64, Vec<u8>> = entries("cursor-v2-multi", 1).into_iter().collect();
    let mut referenced = 0;
    for row in &rows {
        if let RowForm::Entry { entry_id, crc } = row.form {
            let partition = &by_id[&entry_id];
            assert_eq!(peek_kind(partition), Ok(EntryKind::Partition));
            assert_eq!(payload_crc(partition), crc);
            referenced += 1;
        }
    }
    assert!(referenced > 0 && referenced < rows.len(), "{rows:?}");

    // A paged table: each reference names a committed page by CRC, row count and first key.
    let paged = newest_marker("cursor-v2-paged-torn-marker", 1);
    let marker = decode_compact_marker(&paged).unwrap();
    assert_eq!(marker.state.epoch, 2);
    let CompactTable::Paged(refs) = marker.table else {
        panic!("a paged table expected")
    };
    let refs: Vec<_> = refs.iter().collect();
    assert!(refs.len() >= 4);
    assert!(refs.windows(2).all(|w| w[0].first < w[1].first));
    let by_id: BTreeMap<u64, Vec<u8>> = entries("cursor-v2-paged-torn-marker", 1)
        .into_iter()
        .collect();
    for page in &refs {
        let bytes = &by_id[&page.entry_id];
        assert_eq!(payload_crc(bytes), page.crc);
        let rows = rows_of(decode_compact_page(bytes).unwrap());
        assert_eq!(rows.len(), page.rows as usize);
        assert_eq!(rows[0].key(), page.first);
    }

    // Batch tables, inline and paged (a marker of kind 7 carries kind 2's batch section).
    let bytes = newest_marker("cursor-ledger-alone-cold", 65);
    let cold = decode_compact_marker(&bytes).unwrap();
    assert!(!cold.batch.is_empty() && cold.batch_pages.is_empty());
    let bytes = newest_marker("cursor-ledger-alone-batch", 65);
    let batch = decode_compact_marker(&bytes).unwrap();
    assert_eq!(
        u16::from_le_bytes([bytes[6], bytes[7]]),
        FLAG_BATCH | FLAG_BATCH_PAGED
    );
    assert!(batch.batch.is_empty() && !batch.batch_pages.is_empty());
}

#[test]
fn located_inline_forms_are_the_bytes_at_their_offsets() {
    let (mut inline_seen, mut entries_seen) = (0, 0);
    for bytes in committed() {
        let list = match peek_kind(&bytes).unwrap() {
            EntryKind::CompactPage => decode_compact_page(&bytes).unwrap(),
            _ => match decode_compact_marker(&bytes).map(|m| m.table) {
                Ok(CompactTable::Inline(list)) => list,
                // Paged, or the torn marker of `cursor-v2-paged-torn-marker`.
                _ => continue,
            },
        };
        for (row, at) in list.located() {
            if let RowForm::Inline(form) = row.form {
                assert_eq!(&bytes[at..at + form.len()], form);
                inline_seen += 1;
            } else {
                assert_eq!(at, 0);
                entries_seen += 1;
            }
        }
    }
    assert!(inline_seen > 0 && entries_seen > 0);
}

#[test]
fn every_bit_flip_and_truncation_of_a_compact_entry_is_detected() {
    for bytes in committed() {
        if decode_compact_marker(&bytes).is_err() && decode_compact_page(&bytes).is_err() {
            // The torn marker a sample ends with.
            continue;
        }
        for i in 0..bytes.len() * 8 {
            let mut bad = bytes.clone();
            bad[i / 8] ^= 1 << (i % 8);
            assert!(decode_compact_marker(&bad).is_err());
            assert!(decode_compact_page(&bad).is_err());
        }
        for len in 0..bytes.len() {
            assert!(decode_compact_marker(&bytes[..len]).is_err());
            assert!(decode_compact_page(&bytes[..len]).is_err());
        }
    }
}

/// A compact page whose body (after the frame header) is `body`, with a valid CRC.
fn page_with_body(body: &[u8]) -> Vec<u8> {
    let mut out = start_frame_flags(EntryKind::CompactPage, body.len(), 0);
    out.extend_from_slice(body);
    end_frame(out)
}

fn page_error(body: &[u8]) -> CorruptionKind {
    decode_compact_page(&page_with_body(body)).unwrap_err().kind
}

#[test]
fn forged_bodies_behind_a_valid_crc_are_refused() {
    // A count far beyond what the bytes can hold, checked before any row is read.
    let mut huge = Vec::new();
    put_varint(&mut huge, u64::MAX / 2);
    assert_eq!(page_error(&huge), CorruptionKind::BadLength);
    // No row.
    assert_eq!(
        page_error(&[0]),
        CorruptionKind::InvalidField("index page rows")
    );
    // A row whose ledger delta overflows: ledger u64::MAX, then a delta of 1.
    let mut overflow = vec![2];
    put_varint(&mut overflow, u64::MAX);
    overflow.extend_from_slice(&[0, 1, 1, 7]);
    overflow.extend_from_slice(&[1, 0, 1, 1, 7]);
    assert_eq!(
        page_error(&overflow),
        CorruptionKind::InvalidField("row key")
    );
    // A chunk beyond the largest.
    let mut chunk = vec![1, 1];
    put_varint(&mut chunk, MAX_CHUNK + 1);
    chunk.extend_from_slice(&[1, 1, 7]);
    assert_eq!(page_error(&chunk), CorruptionKind::InvalidField("chunk"));
    // A cardinality beyond a partition's span.
    let mut card = vec![1, 1, 0];
    put_varint(&mut card, PARTITION_SPAN + 1);
    card.extend_from_slice(&[1, 7]);
    assert_eq!(
        page_error(&card),
        CorruptionKind::InvalidField("cardinality")
    );
    // An inline form longer than any record, and one running past the page.
    let mut long = vec![1, 1, 0, 1];
    put_varint(&mut long, MAX_INLINE_LEN as u64 + 1);
    assert_eq!(page_error(&long), CorruptionKind::BadLength);
    assert_eq!(page_error(&[1, 1, 0, 1, 9, 7]), CorruptionKind::Truncated);
    // A non-canonical varint (1 written in two bytes).
    assert_eq!(
        page_error(&[1, 0x81, 0x00, 0, 1, 1, 7]),
        CorruptionKind::InvalidField("varint")
    );
    // Bytes after the last row.
    assert_eq!(
        page_error(&[1, 1, 0, 1, 1, 7, 0]),
        CorruptionKind::BadLength
    );
    // A well-formed body decodes.
    assert!(decode_compact_page(&page_with_body(&[1, 1, 0, 1, 1, 7])).is_ok());
}

#[test]
fn a_paged_marker_needs_pages_and_pages_need_rows() {
    let empty = PersistedState::default();
    // Forged: a paged table of no page, and a reference to a page of no row.
    let mut out = start_frame_flags(EntryKind::CompactMarker, 0, 0);
    empty.encode_into(&mut out);
    out.extend_from_slice(&[TABLE_PAGED, 0]);
    let err = decode_compact_marker(&end_frame(out)).unwrap_err();
    assert_eq!(err.kind, CorruptionKind::InvalidField("table"));
    let mut out = start_frame_flags(EntryKind::CompactMarker, 0, 0);
    empty.encode_into(&mut out);
    out.extend_from_slice(&[TABLE_PAGED, 1, 1, 0, 3, 1, 2, 3, 4, 0]);
    let err = decode_compact_marker(&end_frame(out)).unwrap_err();
    assert_eq!(err.kind, CorruptionKind::InvalidField("index page rows"));
    // The same reference with one row decodes.
    let mut out = start_frame_flags(EntryKind::CompactMarker, 0, 0);
    empty.encode_into(&mut out);
    out.extend_from_slice(&[TABLE_PAGED, 1, 1, 0, 3, 1, 2, 3, 4, 1]);
    assert!(decode_compact_marker(&end_frame(out)).is_ok());
}

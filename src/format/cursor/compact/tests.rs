//! Unit tests of the compact marker and index page.

use super::super::{BatchRow, PageRef, end_frame, put_varint};
use super::*;
use crate::position::Position;

fn state() -> PersistedState {
    PersistedState {
        mark_delete: Position::new(3, 41),
        epoch: 7,
        properties: [("a".to_string(), -1), ("zz".to_string(), 99)].into(),
    }
}

const INLINE: &[u8] = &[3, 0, 0];

fn inline(ledger_id: u64, chunk: u64, bytes: &'static [u8]) -> CompactRow<'static> {
    CompactRow {
        ledger_id,
        chunk,
        cardinality: 1,
        form: RowForm::Inline(bytes),
    }
}

fn entry(ledger_id: u64, chunk: u64, entry_id: u64) -> CompactRow<'static> {
    CompactRow {
        ledger_id,
        chunk,
        cardinality: 65_536,
        form: RowForm::Entry {
            entry_id,
            crc: 0xdead_beef,
        },
    }
}

fn page(first: (u64, u64), entry_id: u64, rows: u32) -> CompactPageRef {
    CompactPageRef {
        first,
        entry_id,
        crc: 0x0102_0304,
        rows,
    }
}

fn rows_of(list: CompactRows<'_>) -> Vec<CompactRow<'_>> {
    list.iter().collect()
}

#[test]
fn compact_sizes_are_pinned() {
    assert_eq!((MIN_ROW_LEN, MIN_PAGE_REF_LEN, ENTRY_CRC_LEN), (5, 8, 4));
    let empty = PersistedState::default();
    let marker =
        encode_compact_marker(&empty, CompactTableRef::Inline(&[]), BatchRef::Inline(&[])).unwrap();
    assert_eq!(marker.len(), 8 + 28 + 1 + 1 + 4);
    assert_eq!(
        marker.len(),
        compact_marker_len(&empty, CompactTableRef::Inline(&[]), 0)
    );
    // A row with a 3-byte inline form; the same partition in entry 300; the next chunk.
    assert_eq!(row_len(None, &inline(1, 0, INLINE)), 1 + 1 + 1 + 1 + 3);
    assert_eq!(row_len(None, &entry(1, 0, 300)), 1 + 1 + 3 + 1 + 2 + 4);
    let mut one = entry(1, 1, 300);
    one.cardinality = 1;
    assert_eq!(row_len(None, &one), 1 + 1 + 1 + 1 + 2 + 4);
    assert_eq!(row_len(Some((1, 0)), &one), 1 + 1 + 1 + 1 + 2 + 4);
    assert_eq!(
        row_len(Some((1, 0)), &inline(1, 1, INLINE)),
        1 + 1 + 1 + 1 + 3
    );
    // A later ledger: the ledger's delta, then the chunk itself.
    assert_eq!(key_len(Some((1, 9)), (200, 300)), 2 + 2);
    assert_eq!(page_ref_len(None, &page((1, 0), 300, 5)), 1 + 1 + 2 + 4 + 1);
    let rows = [inline(1, 0, INLINE), one];
    let page_bytes = encode_compact_page(&rows).unwrap();
    assert_eq!(page_bytes.len(), 8 + 1 + 7 + (2 + 1 + 1 + 2 + 4) + 4);
    assert_eq!(page_bytes.len(), compact_page_len(&rows));
    assert_eq!(rows_len(&rows), 7 + 10);
    let refs = [page((1, 0), 300, 5), page((1, 7), 301, 2)];
    let paged = encode_compact_marker(
        &state(),
        CompactTableRef::Paged(&refs),
        BatchRef::Inline(&[]),
    )
    .unwrap();
    assert_eq!(
        paged.len(),
        8 + state().encoded_len() + 1 + 1 + 9 + (1 + 1 + 2 + 4 + 1) + 4
    );
    assert_eq!(
        paged.len(),
        compact_marker_len(&state(), CompactTableRef::Paged(&refs), 0)
    );
}

#[test]
fn compact_marker_round_trips_inline_and_paged_with_batch_tables() {
    let rows = [
        inline(1, 0, INLINE),
        entry(1, 5, 9),
        inline(4, 0, b"\x02abc"),
        entry(u64::MAX, MAX_CHUNK, u64::MAX),
    ];
    let refs = [
        page((0, 0), 2, 1),
        page((0, 1), 3, 40),
        page((9, 0), 4, u32::MAX),
    ];
    let batch = [BatchRow {
        ledger_id: 1,
        chunk: 0,
        entry_id: 4,
        crc: 5,
        entries: 6,
    }];
    let batch_pages = [PageRef {
        first: (1, 0),
        entry_id: 7,
        crc: 8,
        rows: 9,
    }];
    for batch_ref in [
        BatchRef::Inline(&[]),
        BatchRef::Inline(&batch),
        BatchRef::Paged(&batch_pages),
    ] {
        let bytes =
            encode_compact_marker(&state(), CompactTableRef::Inline(&rows), batch_ref).unwrap();
        assert_eq!(
            super::super::peek_kind(&bytes).unwrap(),
            EntryKind::CompactMarker
        );
        let marker = decode_compact_marker(&bytes).unwrap();
        assert_eq!(marker.state, state());
        let CompactTable::Inline(got) = marker.table else {
            panic!("inline table expected")
        };
        assert_eq!(rows_of(got), rows);
        let (b, p) = match batch_ref {
            BatchRef::Inline(b) => (b.len(), 0),
            BatchRef::Paged(p) => (0, p.len()),
        };
        assert_eq!((marker.batch.len(), marker.batch_pages.len()), (b, p));
        assert_eq!(
            bytes.len(),
            compact_marker_len(&state(), CompactTableRef::Inline(&rows), b + p)
        );
        let bytes =
            encode_compact_marker(&state(), CompactTableRef::Paged(&refs), batch_ref).unwrap();
        let marker = decode_compact_marker(&bytes).unwrap();
        let CompactTable::Paged(got) = marker.table else {
            panic!("paged table expected")
        };
        assert_eq!(got.iter().collect::<Vec<_>>(), refs);
    }
}

#[test]
fn located_inline_forms_are_the_bytes_at_their_offsets() {
    let rows = [
        inline(1, 0, INLINE),
        entry(1, 1, 9),
        inline(2, 3, b"\x02\xff\x10"),
    ];
    let bytes = encode_compact_page(&rows).unwrap();
    let list = decode_compact_page(&bytes).unwrap();
    assert_eq!(list.len(), 3);
    let mut inline_seen = 0;
    for (row, at) in list.located() {
        if let RowForm::Inline(form) = row.form {
            assert_eq!(&bytes[at..at + form.len()], form);
            inline_seen += 1;
        } else {
            assert_eq!(at, 0);
        }
    }
    assert_eq!(inline_seen, 2);
}

#[test]
fn every_bit_flip_and_truncation_of_a_compact_entry_is_detected() {
    let rows = [inline(1, 0, INLINE), entry(3, 1, 7)];
    let samples = [
        encode_compact_marker(
            &state(),
            CompactTableRef::Inline(&rows),
            BatchRef::Inline(&[]),
        )
        .unwrap(),
        encode_compact_marker(
            &state(),
            CompactTableRef::Paged(&[page((1, 0), 3, 2)]),
            BatchRef::Inline(&[]),
        )
        .unwrap(),
        encode_compact_page(&rows).unwrap(),
    ];
    for bytes in &samples {
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
    assert!(
        encode_compact_marker(&empty, CompactTableRef::Paged(&[]), BatchRef::Inline(&[])).is_err()
    );
    let zero = [page((1, 0), 3, 0)];
    assert!(
        encode_compact_marker(&empty, CompactTableRef::Paged(&zero), BatchRef::Inline(&[]))
            .is_err()
    );
    let unordered = [page((1, 1), 3, 1), page((1, 0), 4, 1)];
    assert!(
        encode_compact_marker(
            &empty,
            CompactTableRef::Paged(&unordered),
            BatchRef::Inline(&[])
        )
        .is_err()
    );
    assert!(encode_compact_page(&[]).is_err());
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
}

#[test]
fn the_encoder_refuses_rows_it_could_not_read_back() {
    let unordered = [inline(1, 1, INLINE), inline(1, 1, INLINE)];
    assert!(encode_compact_page(&unordered).is_err());
    let empty_form = [inline(1, 0, b"")];
    assert!(encode_compact_page(&empty_form).is_err());
    let mut over = inline(1, 0, INLINE);
    over.cardinality = PARTITION_SPAN + 1;
    assert!(encode_compact_page(&[over]).is_err());
    let state_rows = [inline(2, 0, INLINE), inline(1, 0, INLINE)];
    assert!(
        encode_compact_marker(
            &state(),
            CompactTableRef::Inline(&state_rows),
            BatchRef::Inline(&[])
        )
        .is_err()
    );
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Below `2^bits` for `bits` drawn below `max_bits`: values of every magnitude.
    fn magnitude(&mut self, max_bits: u64) -> u64 {
        let bits = self.below(max_bits);
        self.below(1 << bits)
    }
}

#[test]
fn random_tables_round_trip_byte_for_byte() {
    let mut rng = Rng(0x5eed);
    let forms: Vec<Vec<u8>> = (0..64usize)
        .map(|n| (0..=n * 7).map(|i| (i * 31 + n) as u8).collect())
        .collect();
    for _ in 0..300 {
        let count = rng.below(40) as usize;
        let mut rows = Vec::with_capacity(count);
        let (mut ledger, mut chunk) = (rng.below(1 << 40), rng.below(3));
        for _ in 0..count {
            let form = if rng.below(3) == 0 {
                RowForm::Entry {
                    entry_id: rng.magnitude(64),
                    crc: rng.next() as u32,
                }
            } else {
                RowForm::Inline(&forms[rng.below(64) as usize])
            };
            rows.push(CompactRow {
                ledger_id: ledger,
                chunk,
                cardinality: rng.below(PARTITION_SPAN + 1),
                form,
            });
            if rng.below(2) == 0 {
                ledger += 1 + rng.magnitude(40);
                chunk = rng.magnitude(48);
            } else {
                chunk += 1 + rng.magnitude(20);
            }
        }
        let bytes = encode_compact_marker(
            &state(),
            CompactTableRef::Inline(&rows),
            BatchRef::Inline(&[]),
        )
        .unwrap();
        assert_eq!(
            bytes.len(),
            compact_marker_len(&state(), CompactTableRef::Inline(&rows), 0)
        );
        let marker = decode_compact_marker(&bytes).unwrap();
        let CompactTable::Inline(got) = marker.table else {
            panic!("inline table expected")
        };
        let got = rows_of(got);
        assert_eq!(got, rows);
        let again = encode_compact_marker(
            &marker.state,
            CompactTableRef::Inline(&got),
            BatchRef::Inline(&[]),
        )
        .unwrap();
        assert_eq!(again, bytes);
        if !rows.is_empty() {
            let bytes = encode_compact_page(&rows).unwrap();
            assert_eq!(bytes.len(), compact_page_len(&rows));
            assert_eq!(rows_of(decode_compact_page(&bytes).unwrap()), rows);
        }
    }
}

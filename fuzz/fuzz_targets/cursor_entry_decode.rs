//! Raw bytes into every cursor-ledger entry decoder (marker, snapshot, index page, batch page,
//! partition entry, compact marker and compact index page; markers and snapshots with and
//! without their batch-index section, markers with their batch table inline or paged): no input
//! panics, and whatever decodes re-encodes to exactly the bytes it came from. Each input is tried
//! as is and framed as every entry kind, with flags 0, `FLAG_BATCH` and
//! `FLAG_BATCH | FLAG_BATCH_PAGED`, with a valid CRC, so the body parsers behind the checksum are
//! reached too. The same bytes are also read as a description of a compact table (rows with
//! inline forms or entry references, and page references), encoded, and the encoding must decode
//! back to that table: `decode(encode(x)) == x`.

#![no_main]

use ackstore::internals::format::cursor::{
    BatchRef, BatchRow, BatchRows, CompactPageRef, CompactRow, CompactTable, CompactTableRef,
    FLAG_BATCH, FLAG_BATCH_PAGED, HEADER_LEN, MAGIC, PageRef, PageRefs, PersistedState, RowForm,
    Table, TableRef, VERSION, decode_batch_page, decode_compact_marker, decode_compact_page,
    decode_index_page, decode_marker, decode_partition_entry, decode_snapshot, encode_batch_page,
    encode_compact_marker, encode_compact_page, encode_index_page, encode_marker_with_batch_ref,
    encode_partition_entry, reencode_snapshot,
};
use ackstore::internals::format::partition::{MAX_CHUNK, PARTITION_SPAN};
use libfuzzer_sys::fuzz_target;

/// A decoded marker's batch table, as lists.
fn batch_lists(rows: BatchRows<'_>, pages: PageRefs<'_>) -> (Vec<BatchRow>, Vec<PageRef>) {
    (rows.iter().collect(), pages.iter().collect())
}

/// The batch table to encode a marker with: its pages when it has any, else its rows.
fn batch_ref<'a>(rows: &'a [BatchRow], pages: &'a [PageRef]) -> BatchRef<'a> {
    if pages.is_empty() {
        BatchRef::Inline(rows)
    } else {
        BatchRef::Paged(pages)
    }
}

fn check_every_decoder(bytes: &[u8]) {
    if let Ok(marker) = decode_marker(bytes) {
        let (batch, batch_pages) = batch_lists(marker.batch, marker.batch_pages);
        let batch = batch_ref(&batch, &batch_pages);
        let encoded = match marker.table {
            Table::Inline(rows) => {
                let rows: Vec<_> = rows.iter().collect();
                encode_marker_with_batch_ref(&marker.state, TableRef::Inline(&rows), batch)
            }
            Table::Paged(pages) => {
                let pages: Vec<_> = pages.iter().collect();
                encode_marker_with_batch_ref(&marker.state, TableRef::Paged(&pages), batch)
            }
        };
        assert_eq!(encoded.unwrap(), bytes);
    }
    if let Ok(rows) = decode_index_page(bytes) {
        let rows: Vec<_> = rows.iter().collect();
        assert_eq!(encode_index_page(&rows).unwrap(), bytes);
    }
    if let Ok(rows) = decode_batch_page(bytes) {
        let rows: Vec<_> = rows.iter().collect();
        assert_eq!(encode_batch_page(&rows).unwrap(), bytes);
    }
    if let Ok(marker) = decode_compact_marker(bytes) {
        let (batch, batch_pages) = batch_lists(marker.batch, marker.batch_pages);
        let batch = batch_ref(&batch, &batch_pages);
        let encoded = match marker.table {
            CompactTable::Inline(rows) => {
                let rows: Vec<_> = rows.iter().collect();
                encode_compact_marker(&marker.state, CompactTableRef::Inline(&rows), batch)
            }
            CompactTable::Paged(pages) => {
                let pages: Vec<_> = pages.iter().collect();
                encode_compact_marker(&marker.state, CompactTableRef::Paged(&pages), batch)
            }
        };
        assert_eq!(encoded.unwrap(), bytes);
    }
    if let Ok(rows) = decode_compact_page(bytes) {
        for (row, at) in rows.located() {
            if let RowForm::Inline(form) = row.form {
                assert_eq!(bytes.get(at..at + form.len()), Some(form));
            }
        }
        let rows: Vec<_> = rows.iter().collect();
        assert_eq!(encode_compact_page(&rows).unwrap(), bytes);
    }
    if let Ok(entry) = decode_partition_entry(bytes) {
        assert_eq!(encode_partition_entry(&entry), bytes);
    }
    if let Ok(snapshot) = decode_snapshot(bytes) {
        assert_eq!(snapshot.ranges().count() as u64, snapshot.range_count);
        assert_eq!(reencode_snapshot(&snapshot).unwrap(), bytes);
    }
}

/// Reads `data` as a compact table: per row a key step, a cardinality and a form (an inline
/// form of up to 31 bytes taken from `data`, or an entry reference), and the same keys as page
/// references. Strictly ascending by construction.
fn table_of(data: &[u8]) -> (Vec<CompactRow<'_>>, Vec<CompactPageRef>) {
    let mut rows = Vec::new();
    let mut pages = Vec::new();
    let (mut ledger, mut chunk) = (0u64, 0u64);
    let mut rest = data;
    while let [step, card, form, tail @ ..] = rest {
        // Step: a new ledger (the low bits give the jump) or the next chunks of this one.
        if step & 1 == 0 {
            ledger = ledger.saturating_add(1 + u64::from(step >> 1).pow(3));
            chunk = u64::from(*card) << (step % 48);
        } else {
            chunk = chunk.saturating_add(1 + u64::from(step >> 1));
        }
        if chunk > MAX_CHUNK || ledger == u64::MAX {
            break;
        }
        let cardinality = (u64::from(*card) << 9) % (PARTITION_SPAN + 1);
        let len = usize::from(form & 31);
        let (form, next) = if form & 32 != 0 || len == 0 || tail.len() < len {
            let entry = RowForm::Entry {
                entry_id: u64::from(*form) << (card % 56),
                crc: u32::from(*step) * 0x0101_0101,
            };
            (entry, tail)
        } else {
            (RowForm::Inline(&tail[..len]), &tail[len..])
        };
        rows.push(CompactRow {
            ledger_id: ledger,
            chunk,
            cardinality,
            form,
        });
        pages.push(CompactPageRef {
            first: (ledger, chunk),
            entry_id: u64::from(*card) << (step % 64),
            crc: u32::from(*card),
            rows: 1 + u32::from(*step),
        });
        rest = next;
    }
    (rows, pages)
}

/// `decode(encode(x)) == x` for the compact table `data` describes, inline in a marker, as page
/// references, and as a page.
fn check_table_round_trip(data: &[u8]) {
    let (rows, pages) = table_of(data);
    let state = PersistedState::default();
    let marker = encode_compact_marker(
        &state,
        CompactTableRef::Inline(&rows),
        BatchRef::Inline(&[]),
    )
    .expect("an ascending table encodes");
    let decoded = decode_compact_marker(&marker).expect("what was encoded decodes");
    let CompactTable::Inline(got) = decoded.table else {
        panic!("an inline table decodes inline")
    };
    assert_eq!(got.iter().collect::<Vec<_>>(), rows);
    if !pages.is_empty() {
        let marker = encode_compact_marker(
            &state,
            CompactTableRef::Paged(&pages),
            BatchRef::Inline(&[]),
        )
        .expect("ascending pages encode");
        let CompactTable::Paged(got) = decode_compact_marker(&marker).expect("decodes").table
        else {
            panic!("a paged table decodes paged")
        };
        assert_eq!(got.iter().collect::<Vec<_>>(), pages);
        let page = encode_compact_page(&rows).expect("a page of rows encodes");
        let got = decode_compact_page(&page).expect("decodes");
        assert_eq!(got.iter().collect::<Vec<_>>(), rows);
    }
}

fuzz_target!(|data: &[u8]| {
    check_every_decoder(data);
    check_table_round_trip(data);
    for kind in [1u8, 2, 3, 4, 6, 7, 8] {
        for flags in [0, FLAG_BATCH, FLAG_BATCH | FLAG_BATCH_PAGED] {
            let mut framed = Vec::with_capacity(HEADER_LEN + data.len() + 4);
            framed.extend_from_slice(&MAGIC);
            framed.extend_from_slice(&[VERSION, kind]);
            framed.extend_from_slice(&flags.to_le_bytes());
            framed.extend_from_slice(data);
            framed.extend_from_slice(&crc32fast::hash(&framed).to_le_bytes());
            check_every_decoder(&framed);
        }
    }
});

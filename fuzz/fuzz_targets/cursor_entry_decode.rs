//! Raw bytes into every cursor-ledger entry decoder (marker, snapshot, index page, batch page,
//! partition entry, compact marker and compact index page; markers and snapshots with and
//! without their batch-index section, markers with their batch table inline or paged): no input
//! panics; whatever decodes as a kind this build still encodes (marker with its batch table
//! inline, partition entry, snapshot) re-encodes to exactly the bytes it came from, and what decodes as a kind only read
//! (index page, batch page, compact marker and page) is consistent with itself (counts, inline
//! forms at their offsets). Each input is tried as is and framed as every entry kind, with flags
//! 0, `FLAG_BATCH` and `FLAG_BATCH | FLAG_BATCH_PAGED`, with a valid CRC, so the body parsers
//! behind the checksum are reached too.

#![no_main]

use ackstore::internals::format::cursor::{
    BatchRow, BatchRows, CompactTable, FLAG_BATCH, FLAG_BATCH_PAGED, HEADER_LEN, MAGIC,
    PageRef, PageRefs, RowForm, Table, TableRef, VERSION, decode_batch_page,
    decode_compact_marker, decode_compact_page, decode_index_page, decode_marker,
    decode_partition_entry, decode_snapshot, encode_marker_with_batch, encode_partition_entry,
    reencode_snapshot,
};
use libfuzzer_sys::fuzz_target;

/// A decoded marker's batch table, as lists.
fn batch_lists(rows: BatchRows<'_>, pages: PageRefs<'_>) -> (Vec<BatchRow>, Vec<PageRef>) {
    (rows.iter().collect(), pages.iter().collect())
}

fn check_every_decoder(bytes: &[u8]) {
    if let Ok(marker) = decode_marker(bytes) {
        let (batch, batch_pages) = batch_lists(marker.batch, marker.batch_pages);
        // A batch table in batch pages is only read: the rest is re-encoded.
        if batch_pages.is_empty() {
            let encoded = match marker.table {
                Table::Inline(rows) => {
                    let rows: Vec<_> = rows.iter().collect();
                    encode_marker_with_batch(&marker.state, TableRef::Inline(&rows), &batch)
                }
                Table::Paged(pages) => {
                    let pages: Vec<_> = pages.iter().collect();
                    encode_marker_with_batch(&marker.state, TableRef::Paged(&pages), &batch)
                }
            };
            assert_eq!(encoded.unwrap(), bytes);
        }
    }
    if let Ok(rows) = decode_index_page(bytes) {
        assert_eq!(rows.iter().count(), rows.len());
    }
    if let Ok(rows) = decode_batch_page(bytes) {
        assert_eq!(rows.iter().count(), rows.len());
    }
    if let Ok(marker) = decode_compact_marker(bytes) {
        match marker.table {
            CompactTable::Inline(rows) => check_located(bytes, rows.located()),
            CompactTable::Paged(pages) => assert_eq!(pages.iter().count(), pages.len()),
        }
    }
    if let Ok(rows) = decode_compact_page(bytes) {
        check_located(bytes, rows.located());
    }
    if let Ok(entry) = decode_partition_entry(bytes) {
        assert_eq!(encode_partition_entry(&entry), bytes);
    }
    if let Ok(snapshot) = decode_snapshot(bytes) {
        assert_eq!(snapshot.ranges().count() as u64, snapshot.range_count);
        assert_eq!(reencode_snapshot(&snapshot).unwrap(), bytes);
    }
}

/// Every inline form of a decoded compact list is the bytes at its offset in the payload.
fn check_located<'a>(
    bytes: &[u8],
    rows: impl Iterator<Item = (ackstore::internals::format::cursor::CompactRow<'a>, usize)>,
) {
    for (row, at) in rows {
        if let RowForm::Inline(form) = row.form {
            assert_eq!(bytes.get(at..at + form.len()), Some(form));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    check_every_decoder(data);
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

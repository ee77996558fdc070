//! Raw bytes into every cursor-ledger entry decoder (marker, snapshot, index page, batch page,
//! partition entry; markers and snapshots with and without their batch-index section, markers
//! with their batch table inline or paged): no input panics, and whatever decodes re-encodes to
//! exactly the bytes it came from. Each input is tried as is and framed as every entry kind,
//! with flags 0, `FLAG_BATCH` and `FLAG_BATCH | FLAG_BATCH_PAGED`, with a valid CRC, so the body
//! parsers behind the checksum are reached too.

#![no_main]

use ackstore::internals::format::cursor::{
    BatchRef, FLAG_BATCH, FLAG_BATCH_PAGED, HEADER_LEN, MAGIC, Table, TableRef, VERSION,
    decode_batch_page, decode_index_page, decode_marker, decode_partition_entry, decode_snapshot,
    encode_batch_page, encode_index_page, encode_marker_with_batch_ref, encode_partition_entry,
    reencode_snapshot,
};
use libfuzzer_sys::fuzz_target;

fn check_every_decoder(bytes: &[u8]) {
    if let Ok(marker) = decode_marker(bytes) {
        let batch: Vec<_> = marker.batch.iter().collect();
        let batch_pages: Vec<_> = marker.batch_pages.iter().collect();
        let batch = if batch_pages.is_empty() {
            BatchRef::Inline(&batch)
        } else {
            BatchRef::Paged(&batch_pages)
        };
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
    if let Ok(entry) = decode_partition_entry(bytes) {
        assert_eq!(encode_partition_entry(&entry), bytes);
    }
    if let Ok(snapshot) = decode_snapshot(bytes) {
        assert_eq!(snapshot.ranges().count() as u64, snapshot.range_count);
        assert_eq!(reencode_snapshot(&snapshot).unwrap(), bytes);
    }
}

fuzz_target!(|data: &[u8]| {
    check_every_decoder(data);
    for kind in [1u8, 2, 3, 4, 6] {
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

//! The batch-index entry (cursor-ledger kind 5): raw bytes, as is and framed with a valid CRC,
//! never panic the decoder, and whatever decodes re-encodes to exactly its bytes; partitions
//! built from the input encode and decode back to themselves (decode(encode(x)) == x).

#![no_main]

use ackstore::internals::format::cursor::{
    BatchPartition, HEADER_LEN, MAGIC, PartialEntry, VERSION, decode_batch_entry,
    encode_batch_entry,
};
use ackstore::internals::format::partition::PARTITION_SPAN;
use libfuzzer_sys::fuzz_target;
use roaring::RoaringBitmap;

fn check_decoder(bytes: &[u8]) {
    if let Ok(partition) = decode_batch_entry(bytes) {
        assert_eq!(encode_batch_entry(&partition).as_deref(), Some(bytes));
    }
}

/// A partition of partial entries drawn from `data`: per entry, a gap byte, a batch-size byte
/// and a pattern byte choosing which messages are acked.
fn build(data: &[u8]) -> Option<BatchPartition> {
    let mut entries = Vec::new();
    let mut next = 0u64;
    for chunk in data.chunks_exact(3) {
        let entry_id = next + u64::from(chunk[0]);
        if entry_id >= PARTITION_SPAN {
            break;
        }
        let batch_size = 2 + u32::from(chunk[1]) * 3;
        let pattern = chunk[2];
        let mut acked: RoaringBitmap = (0..batch_size)
            .filter(|i| (pattern >> (i % 8)) & 1 == 1)
            .collect();
        if acked.is_empty() {
            acked.insert(0);
        }
        if acked.len() == u64::from(batch_size) {
            acked.remove(batch_size - 1);
        }
        entries.push(PartialEntry {
            entry_id,
            batch_size,
            acked,
        });
        next = entry_id + 1;
    }
    (!entries.is_empty()).then_some(BatchPartition {
        ledger_id: 3,
        chunk: 0,
        entries,
    })
}

fuzz_target!(|data: &[u8]| {
    check_decoder(data);
    let mut framed = Vec::with_capacity(HEADER_LEN + data.len() + 4);
    framed.extend_from_slice(&MAGIC);
    framed.extend_from_slice(&[VERSION, 5, 0, 0]);
    framed.extend_from_slice(data);
    framed.extend_from_slice(&crc32fast::hash(&framed).to_le_bytes());
    check_decoder(&framed);
    if let Some(partition) = build(data) {
        let bytes = encode_batch_entry(&partition).expect("a valid partition encodes");
        assert_eq!(decode_batch_entry(&bytes).expect("decodes"), partition);
    }
});

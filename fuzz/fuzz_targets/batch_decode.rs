//! The batch-index entry (cursor-ledger kind 5): raw bytes, as is and framed with a valid CRC,
//! never panic the decoder, and whatever decodes re-encodes to exactly its bytes; partitions
//! built from the input (some declaring 2^20, 2^31 or 2^32 - 1 messages) encode and decode back
//! to themselves (decode(encode(x)) == x).

#![no_main]

use ackstore::internals::format::cursor::{
    BatchPartition, HEADER_LEN, MAGIC, MAX_BATCH_SIZE, PartialEntry, VERSION, decode_batch_entry,
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
        // The top byte values declare huge batches (an entry's `num_messages` may be any u32):
        // encoding and decoding them must cost what their runs do, not the declared size.
        let batch_size = match chunk[1] {
            255 => u32::MAX,
            254 => 1 << 31,
            253 => MAX_BATCH_SIZE,
            b => 2 + u32::from(b) * 3,
        };
        let pattern = chunk[2];
        let mut acked: RoaringBitmap = (0..batch_size.min(64))
            .filter(|i| (pattern >> (i % 8)) & 1 == 1)
            .collect();
        if batch_size > 256 && pattern & 0x80 != 0 {
            // A run reaching the end of the batch.
            acked.insert_range(batch_size - u32::from(pattern)..batch_size);
        }
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

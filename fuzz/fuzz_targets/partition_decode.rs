//! The ack partition record, both ways, every encoding.
//!
//! Bytes into the decoder: it never panics, and whatever it accepts re-encodes, in the record's
//! own version, to exactly the same bytes. Each input is decoded as it is (which almost always
//! stops at the CRC), with its last four bytes replaced by the CRC of the rest, and as the body
//! of a version 2 record of each encoding (empty, roaring, gaps, bitmap) behind a valid header
//! and CRC, so the body decoders are explored too.
//!
//! Sets into the encoder: the input also describes a set of entries (alternating runs of acked
//! entries and holes, lengths from the bytes), which must decode back to itself from both
//! versions; its version 2 record re-encodes to the same bytes.
#![no_main]

use ackstore::internals::format::partition::{
    PartitionEncoding, PartitionKey, VERSION, decode_partition, encode_partition,
    encode_partition_v1, partition_encoding,
};
use libfuzzer_sys::fuzz_target;
use roaring::RoaringBitmap;

fn check(bytes: &[u8]) {
    if let Ok((key, bitmap)) = decode_partition(bytes) {
        let again = match partition_encoding(bytes) {
            Some(PartitionEncoding::RoaringV1) => encode_partition_v1(key, &bitmap),
            _ => encode_partition(key, &bitmap),
        };
        assert_eq!(again, bytes);
    }
}

fn with_crc(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes.extend_from_slice(&crc32fast::hash(&bytes).to_le_bytes());
    bytes
}

/// The set the bytes describe: from a start offset, runs of acked entries and of holes whose
/// lengths are the bytes (a high bit stretches a run by 64).
fn set_of(data: &[u8]) -> RoaringBitmap {
    let mut set = RoaringBitmap::new();
    let mut at = u32::from(data.first().copied().unwrap_or(0)) * 256;
    for (i, &b) in data.iter().enumerate().skip(1) {
        let len = u32::from(b & 0x7F)
            + if b & 0x80 != 0 {
                64 * u32::from(b & 0x7F)
            } else {
                0
            };
        let end = (at + len).min(1 << 16);
        if i % 2 == 1 {
            set.insert_range(at..end);
        }
        at = end;
        if at >= 1 << 16 {
            break;
        }
    }
    set
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if let Some(covered_len) = data.len().checked_sub(4) {
        check(&with_crc(data[..covered_len].to_vec()));
    }
    for encoding in 0u8..4 {
        let mut record = b"AckP".to_vec();
        record.extend_from_slice(&VERSION.to_le_bytes());
        record.extend_from_slice(&[encoding, 7, 3]);
        record.extend_from_slice(data);
        check(&with_crc(record));
    }

    let set = set_of(data);
    let key = PartitionKey {
        ledger_id: 7,
        chunk: 3,
    };
    let bytes = encode_partition(key, &set);
    let (key2, decoded) = decode_partition(&bytes).expect("own encoding decodes");
    assert_eq!((key2, &decoded), (key, &set));
    assert_eq!(encode_partition(key2, &decoded), bytes);
    let v1 = encode_partition_v1(key, &set);
    assert_eq!(decode_partition(&v1).expect("version 1 decodes").1, set);
});

//! Arbitrary bytes into the ack partition decoder: it never panics, and whatever it accepts
//! re-encodes to exactly the same bytes. Each input is decoded twice: as it is (which almost
//! always stops at the CRC), and with its last four bytes replaced by the CRC of the rest, so the
//! fields behind the checksum are explored too.
#![no_main]

use ackstore::format::partition::{decode_partition, encode_partition};
use libfuzzer_sys::fuzz_target;

fn check(bytes: &[u8]) {
    if let Ok((key, bitmap)) = decode_partition(bytes) {
        assert_eq!(encode_partition(key, &bitmap), bytes);
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if let Some(covered_len) = data.len().checked_sub(4) {
        let mut fixed = data.to_vec();
        let crc = crc32fast::hash(&data[..covered_len]);
        fixed[covered_len..].copy_from_slice(&crc.to_le_bytes());
        check(&fixed);
    }
});

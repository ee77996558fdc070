//! Partition records of every format version and every encoding, as committed under
//! `tests/data/partition-v1/` and `tests/data/partition-v2/`, decode to exactly the sets they were
//! written from, and the current encoder still writes the version 2 ones byte for byte; a
//! corrupted record is refused with the error that names its damage. A change to the partition
//! format that breaks old records fails here.

use std::path::PathBuf;

use ackstore::CorruptionKind;
use ackstore::internals::format::Corruption;
use ackstore::internals::format::partition::{
    PartitionEncoding, PartitionKey, decode_partition, encode_partition, encode_partition_v1,
    partition_encoding,
};
use roaring::RoaringBitmap;

/// The key every sample was written under.
const KEY: PartitionKey = PartitionKey {
    ledger_id: 123_456,
    chunk: 2,
};

/// A well-mixed hash of `v`, for sets whose gaps have no pattern.
fn mix(v: u32) -> u64 {
    let mut z = u64::from(v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Each sample: file name, the set it holds, the encoding it was written in.
fn samples() -> Vec<(&'static str, RoaringBitmap, PartitionEncoding)> {
    vec![
        ("empty", RoaringBitmap::new(), PartitionEncoding::Empty),
        (
            "long-runs",
            (0..10).flat_map(|r| r * 2000..r * 2000 + 1000).collect(),
            PartitionEncoding::Roaring,
        ),
        (
            "sparse-acks",
            (0..100).map(|i| i * 100).collect(),
            PartitionEncoding::Gaps,
        ),
        (
            "random-sparse",
            (0..50_000u32)
                .filter(|v| *v == 0 || mix(*v).is_multiple_of(64))
                .collect(),
            PartitionEncoding::Gaps,
        ),
        (
            "few-holes",
            (0..50_000).filter(|v| v % 1000 != 999).collect(),
            PartitionEncoding::Gaps,
        ),
        (
            "alternating",
            (0..50_000).step_by(2).collect(),
            PartitionEncoding::Gaps,
        ),
        (
            "random-half",
            (0..50_000u32)
                .filter(|v| *v == 0 || mix(*v) & 1 == 0)
                .collect(),
            PartitionEncoding::Bitmap,
        ),
    ]
}

fn path(version: u16, name: &str) -> PathBuf {
    crate::support::samples::data_dir()
        .join(format!("partition-v{version}"))
        .join(format!("{name}.bin"))
}

fn read(version: u16, name: &str) -> Vec<u8> {
    std::fs::read(path(version, name)).expect("sample present")
}

#[test]
fn version_2_samples_decode_to_their_sets_and_are_written_the_same_today() {
    for (name, set, encoding) in samples() {
        let bytes = read(2, name);
        assert_eq!(partition_encoding(&bytes), Some(encoding), "{name}");
        let (key, decoded) = decode_partition(&bytes).expect(name);
        assert_eq!((key, &decoded), (KEY, &set), "{name}");
        assert_eq!(encode_partition(KEY, &set), bytes, "{name}");
    }
}

#[test]
fn version_1_samples_still_decode_to_their_sets() {
    for (name, set, _) in samples() {
        let bytes = read(1, name);
        assert_eq!(
            partition_encoding(&bytes),
            Some(PartitionEncoding::RoaringV1),
            "{name}"
        );
        let (key, decoded) = decode_partition(&bytes).expect(name);
        assert_eq!((key, &decoded), (KEY, &set), "{name}");
        assert_eq!(encode_partition_v1(KEY, &set), bytes, "{name}");
        // Rewritten today, a version 1 record is never larger.
        assert!(encode_partition(KEY, &set).len() <= bytes.len(), "{name}");
    }
}

#[test]
fn corrupted_version_2_sample_is_refused_as_a_checksum_mismatch() {
    let bytes = read(2, "few-holes-corrupt");
    assert!(matches!(
        decode_partition(&bytes),
        Err(Corruption {
            kind: CorruptionKind::ChecksumMismatch,
            ..
        })
    ));
}

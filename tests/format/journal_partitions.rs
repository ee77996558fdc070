//! Partition records carried in the journal: round trips, older versions and damage.

use ackstore::internals::error::CorruptionKind;
use ackstore::internals::format::cursor::encode_partition_payload as encode_wrapped;
use ackstore::internals::format::journal::SEGMENT_VERSION_V6;
use ackstore::internals::format::journal::SEGMENT_VERSION_V7;
use ackstore::internals::format::journal::partition::*;
use ackstore::internals::format::partition::MAX_CHUNK;
use ackstore::internals::format::partition::PARTITION_SPAN;
use ackstore::internals::format::partition::PartitionKey;
use ackstore::internals::format::put_varint;
use proptest::prelude::*;
use roaring::RoaringBitmap;

fn key(ledger_id: u64, chunk: u64) -> PartitionKey {
    PartitionKey { ledger_id, chunk }
}

/// What a version 7 payload costs beyond its set's inline form: the key's and the
/// cardinality's varints, no magic and no CRC. A partition of a data ledger id below 2^14
/// in its first chunk, under 128 acked entries, costs 3 bytes before its encoding byte.
#[test]
fn a_version_7_payload_is_the_key_the_cardinality_and_the_inline_form() {
    let set = [3u32, 9, 10, 11, 40_000]
        .into_iter()
        .collect::<RoaringBitmap>();
    let k = key(1234, 0);
    let payload = encode_partition_payload(k, &set);
    let inline = ackstore::internals::format::partition::encode_inline(&set);
    assert_eq!(payload.len(), 2 + 1 + 1 + inline.len());
    assert_eq!(&payload[4..], &inline[..]);
    let decoded = decode_partition_payload(&payload, SEGMENT_VERSION_V7).unwrap();
    assert_eq!((decoded.key, decoded.cardinality), (k, 5));
    assert_eq!(decoded.bitmap().unwrap(), set);
    // The wrapped form of versions 1 to 6 reads to the same partition.
    let wrapped = encode_wrapped(k, &set);
    let old = decode_partition_payload(&wrapped, SEGMENT_VERSION_V6).unwrap();
    assert_eq!((old.key, old.cardinality), (k, 5));
    assert_eq!(old.bitmap().unwrap(), set);
    assert_eq!(old.bounds().unwrap(), decoded.bounds().unwrap());
    // Neither form reads as the other.
    assert!(decode_partition_payload(&payload, SEGMENT_VERSION_V6).is_err());
    assert!(
        decode_partition_payload(&wrapped, SEGMENT_VERSION_V7)
            .and_then(|p| p.bitmap())
            .is_err()
    );
    // The largest key and cardinality fit in their varints.
    let full = (0..u32::try_from(PARTITION_SPAN).unwrap()).collect::<RoaringBitmap>();
    let big = encode_partition_payload(key(u64::MAX, MAX_CHUNK), &full);
    let decoded = decode_partition_payload(&big, SEGMENT_VERSION_V7).unwrap();
    assert_eq!(decoded.cardinality, PARTITION_SPAN);
    assert_eq!(decoded.bitmap().unwrap(), full);
}

/// Every truncation of a payload, and every bit flipped in it, is refused by the decoder or
/// by the set's checks, or reads to another key or cardinality: never to the same
/// partition with another set (the frame's CRC is what refuses the rest).
#[test]
fn every_truncation_and_flipped_bit_of_a_version_7_payload_is_refused_or_reads_otherwise() {
    let set = (0..3000u32)
        .filter(|e| e % 1000 != 7)
        .collect::<RoaringBitmap>();
    let k = key(77, 3);
    let payload = encode_partition_payload(k, &set);
    for n in 0..payload.len() {
        let refused =
            decode_partition_payload(&payload[..n], SEGMENT_VERSION_V7).and_then(|p| p.bitmap());
        assert!(refused.is_err(), "cut at {n}");
    }
    for bit in 0..payload.len() * 8 {
        let mut b = payload.clone();
        b[bit / 8] ^= 1 << (bit % 8);
        let Ok(p) = decode_partition_payload(&b, SEGMENT_VERSION_V7) else {
            continue;
        };
        if let Ok(found) = p.bitmap() {
            assert!(
                p.key != k || p.cardinality != set.len() || found != set,
                "bit {bit} reads to the same partition"
            );
        }
        // Bounds never panic and never claim a span the cardinality does not fit.
        if let Ok(Some((lo, hi))) = p.bounds() {
            assert!(u64::from(hi - lo) + 1 >= p.cardinality, "bit {bit}");
        }
    }
}

#[test]
fn a_version_7_payload_refuses_long_varints_and_out_of_range_fields() {
    let set = [1u32].into_iter().collect::<RoaringBitmap>();
    // A two-byte varint for ledger 1: not the shortest form.
    let mut long = vec![0x81, 0x00];
    long.extend_from_slice(&encode_partition_payload(key(1, 0), &set)[1..]);
    assert!(decode_partition_payload(&long, SEGMENT_VERSION_V7).is_err());
    let mut chunk = Vec::new();
    put_varint(&mut chunk, 1);
    put_varint(&mut chunk, MAX_CHUNK + 1);
    put_varint(&mut chunk, 1);
    chunk.extend_from_slice(&ackstore::internals::format::partition::encode_inline(&set));
    assert_eq!(
        decode_partition_payload(&chunk, SEGMENT_VERSION_V7)
            .unwrap_err()
            .kind,
        CorruptionKind::InvalidField("chunk")
    );
    let mut cardinality = Vec::new();
    put_varint(&mut cardinality, 1);
    put_varint(&mut cardinality, 0);
    put_varint(&mut cardinality, PARTITION_SPAN + 1);
    cardinality.push(0);
    assert_eq!(
        decode_partition_payload(&cardinality, SEGMENT_VERSION_V7)
            .unwrap_err()
            .kind,
        CorruptionKind::InvalidField("cardinality")
    );
    // A cardinality the set does not have.
    let mut other = Vec::new();
    put_varint(&mut other, 1);
    put_varint(&mut other, 0);
    put_varint(&mut other, 2);
    other.extend_from_slice(&ackstore::internals::format::partition::encode_inline(&set));
    let p = decode_partition_payload(&other, SEGMENT_VERSION_V7).unwrap();
    assert_eq!(
        p.bitmap().unwrap_err().kind,
        CorruptionKind::InvalidField("cardinality")
    );
}

/// What `bounds` peeks of a payload of segment `version` against what `bitmap` decodes:
/// a payload the decoder accepts has bounds the peek reads without refusing, and they are
/// the set's lowest and highest offsets.
fn assert_peek_agrees(payload: &[u8], version: u16) -> Result<(), TestCaseError> {
    let Ok(p) = decode_partition_payload(payload, version) else {
        return Ok(());
    };
    if let Ok(set) = p.bitmap() {
        match p.bounds() {
            Ok(Some(found)) => prop_assert_eq!(Some(found), set.min().zip(set.max())),
            Ok(None) => {}
            Err(e) => prop_assert!(false, "decodes but the peek refused: {e:?}"),
        }
    }
    Ok(())
}

proptest! {
    /// Every random set, in both forms, intact, cut at any length, or with any byte
    /// rewritten: the peeked bounds and the decoded set never disagree, and a payload
    /// that decodes is never refused by the peek.
    #[test]
    fn peeked_bounds_of_any_payload_agree_with_its_decoded_set(
        offsets in prop::collection::vec(0u32..65_536, 1..400),
        ledger in any::<u64>(),
        chunk in 0..=MAX_CHUNK,
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        damage in 0u8..3,
    ) {
        let set = offsets.into_iter().collect::<RoaringBitmap>();
        let k = key(ledger, chunk);
        for (mut payload, version) in [
            (encode_partition_payload(k, &set), SEGMENT_VERSION_V7),
            (encode_wrapped(k, &set), SEGMENT_VERSION_V6),
        ] {
            let i = at.index(payload.len());
            match damage {
                0 => {
                    let p = decode_partition_payload(&payload, version).unwrap();
                    prop_assert_eq!(p.bitmap().unwrap(), set.clone());
                }
                1 => payload.truncate(i),
                _ => payload[i] = byte,
            }
            assert_peek_agrees(&payload, version)?;
        }
    }
}

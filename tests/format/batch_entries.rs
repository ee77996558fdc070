//! Batch entries (the partial acks of batched messages): encodings, bounds and damage.

use ackstore::internals::format::cursor::batch::*;
use ackstore::internals::format::partition::PARTITION_BITS;
use roaring::RoaringBitmap;

fn partial(entry_id: u64, batch_size: u32, acked: &[u32]) -> PartialEntry {
    PartialEntry {
        entry_id,
        batch_size,
        acked: acked.iter().copied().collect(),
    }
}

#[test]
fn batch_entries_round_trip_in_both_forms_and_pin_their_sizes() {
    let p = BatchPartition {
        ledger_id: 7,
        chunk: 3,
        entries: vec![
            partial((3 << PARTITION_BITS) + 5, 10, &[0, 1, 2, 3]),
            partial((3 << PARTITION_BITS) + 6, 10, &[1, 3, 5, 7]),
            partial((3 << PARTITION_BITS) + 9, 1000, &[0, 1, 2]),
        ],
    };
    let bytes = encode_batch_entry(&p).unwrap();
    assert_eq!(bytes.len(), batch_entry_len(&p));
    // Header 8, fixed 20, CRC 4; records: head, size and a 2-byte bitmap (runs [4, 6]
    // would take 3), head and bitmap (size shared), head, 2-byte size and runs [3, 997]
    // (count 1, lengths 1 + 2) instead of a 125-byte bitmap.
    assert_eq!(
        bytes.len(),
        32 + (1 + 1 + 2) + (1 + 2) + (1 + 2 + 1 + 1 + 2)
    );
    assert_eq!(decode_batch_entry(&bytes).unwrap(), p);
}

/// The run lengths, index by index: the model.
fn runs_one_by_one(acked: &RoaringBitmap, size: u32) -> Vec<u64> {
    let mut out = Vec::new();
    let mut want_acked = true;
    let mut length = 0u64;
    for i in 0..size {
        if acked.contains(i) != want_acked {
            out.push(length);
            length = 0;
            want_acked = !want_acked;
        }
        length += 1;
    }
    if size > 0 {
        out.push(length);
    }
    out
}

#[test]
fn runs_agree_with_the_model_and_follow_the_acked_ranges_not_the_declared_size() {
    let mut state = 0x5eed_u64;
    for size in [0, 1, 2, 3, 7, 8, 9, 64, 65, 100, 70_000] {
        for density in [0, 1, 2, 5, 8] {
            let mut acked = RoaringBitmap::new();
            for i in 0..size {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                if (state >> 61) < density {
                    acked.insert(i);
                }
            }
            assert_eq!(
                runs(&acked, size),
                runs_one_by_one(&acked, size),
                "{size} {density}"
            );
        }
    }
    // Indexes at or past the size are not counted.
    let acked: RoaringBitmap = [1, 2, 9, 20].into_iter().collect();
    assert_eq!(runs(&acked, 10), runs_one_by_one(&acked, 10));
    // A range crossing the roaring containers' 65,536 boundary is one run.
    let mut acked = RoaringBitmap::new();
    acked.insert_range(60_000..140_000);
    assert_eq!(runs(&acked, 200_000), vec![0, 60_000, 80_000, 60_000]);
    // Declared 2^32 - 1 messages: as many runs as the acked ranges make.
    let acked: RoaringBitmap = [0, 1, 2, 70_000, 4_000_000_000].into_iter().collect();
    assert_eq!(
        runs(&acked, u32::MAX),
        vec![
            3,
            69_997,
            1,
            4_000_000_000 - 70_001,
            1,
            u64::from(u32::MAX) - 4_000_000_001
        ]
    );
}

#[test]
fn an_entry_of_a_huge_declared_size_encodes_its_runs_and_round_trips() {
    // What a seek to message 2^31 of an entry of 2^32 - 1 messages leaves, and three acks
    // in an entry of that size: a few bytes each, whatever the size.
    let mut prefix = RoaringBitmap::new();
    prefix.insert_range(0..1 << 31);
    let p = BatchPartition {
        ledger_id: 4,
        chunk: 0,
        entries: vec![
            PartialEntry {
                entry_id: 0,
                batch_size: u32::MAX,
                acked: prefix,
            },
            partial(1, u32::MAX, &[0, 7, u32::MAX - 1]),
        ],
    };
    let bytes = encode_batch_entry(&p).unwrap();
    assert_eq!(bytes.len(), batch_entry_len(&p));
    // Records: head, size (5 bytes), runs [2^31, 2^31 - 1] (count, 5 + 5); head (size
    // shared), runs [1, 6, 1, 2^32 - 10, 1] (count, 1 + 1 + 1 + 5 + 1).
    assert_eq!(bytes.len(), 32 + (1 + 5 + 1 + 10) + (1 + 1 + 9));
    assert_eq!(decode_batch_entry(&bytes).unwrap(), p);
}

#[test]
fn batch_entries_refuse_states_that_are_not_partial() {
    for acked in [&[][..], &[0, 1][..], &[5][..]] {
        let p = BatchPartition {
            ledger_id: 1,
            chunk: 0,
            entries: vec![partial(0, 2, acked)],
        };
        assert!(encode_batch_entry(&p).is_none(), "{acked:?}");
    }
}

#[test]
fn every_flipped_byte_of_a_batch_entry_is_refused_or_decodes_to_itself() {
    let p = BatchPartition {
        ledger_id: 9,
        chunk: 0,
        entries: vec![partial(1, 16, &[0, 15]), partial(2, 16, &[3])],
    };
    let bytes = encode_batch_entry(&p).unwrap();
    for i in 0..bytes.len() {
        let mut bad = bytes.clone();
        bad[i] ^= 0x41;
        assert!(decode_batch_entry(&bad).is_err(), "byte {i}");
    }
    for len in 0..bytes.len() {
        assert!(decode_batch_entry(&bytes[..len]).is_err());
    }
}

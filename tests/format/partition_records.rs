//! Partition records: round trips in both versions, the encoder's shortest bodies, and damage.

use ackstore::internals::error::CorruptionKind;
use ackstore::internals::format::Corruption;
use ackstore::internals::position::Position;
use proptest::prelude::*;
use roaring::RoaringBitmap;

use ackstore::internals::error::{CorruptionPlace, Error};
use ackstore::internals::format::partition::*;

fn key(ledger_id: u64, chunk: u64) -> PartitionKey {
    PartitionKey { ledger_id, chunk }
}

/// Encodes in version 2, decodes, checks both directions of the round trip.
fn roundtrip(bitmap: &RoaringBitmap) -> Vec<u8> {
    let k = key(7, 3);
    let bytes = encode_partition(k, bitmap);
    let (k2, b2) = decode_partition(&bytes).expect("own encoding decodes");
    assert_eq!((k2, &b2), (k, bitmap));
    assert_eq!(encode_partition(k2, &b2), bytes);
    bytes
}

fn roundtrip_v1(bitmap: &RoaringBitmap) -> Vec<u8> {
    let k = key(7, 3);
    let bytes = encode_partition_v1(k, bitmap);
    let (k2, b2) = decode_partition(&bytes).expect("version 1 decodes");
    assert_eq!((k2, &b2), (k, bitmap));
    bytes
}

/// Each of `span` entries with probability 1/2 (splitmix64), the first and last always.
fn random_half(span: u32) -> RoaringBitmap {
    random_set(span, 2)
}

/// Each of `span` entries with probability `1 / one_in`, the first and last always.
fn random_set(span: u32, one_in: u64) -> RoaringBitmap {
    let mut state = 0x5eed_u64;
    (0..span)
        .filter(|&v| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            v == 0 || v == span - 1 || (z ^ (z >> 31)).is_multiple_of(one_in)
        })
        .collect()
}

fn encoding(bitmap: &RoaringBitmap) -> PartitionEncoding {
    partition_encoding(&roundtrip(bitmap)).expect("a known encoding")
}

/// Bytes of a version 2 record of ledger 7, chunk 3 around its body: magic, version, encoding,
/// two one-byte varints, CRC.
const V2_OVERHEAD: usize = 4 + 2 + 1 + 1 + 1 + 4;

#[test]
fn header_offsets_follow_the_documented_layout() {
    assert_eq!((VERSION_AT, FLAGS_AT, LEDGER_AT, CHUNK_AT), (4, 6, 8, 16));
    assert_eq!((CARDINALITY_AT, BITMAP_LEN_AT, HEADER_LEN), (24, 28, 32));
    assert_eq!(OVERHEAD_LEN, 36);
    assert_eq!(MAX_BITMAP_BYTES, 8208);
    assert_eq!(MAX_RECORD_BYTES, 8244);
    assert_eq!((ENCODING_AT, V2_FIXED_LEN, V2_MIN_LEN), (6, 7, 13));
    assert_eq!(V2_HEADER_MAX, 24);
}

#[test]
fn version_1_sizes_are_pinned() {
    assert_eq!(roundtrip_v1(&RoaringBitmap::new()).len(), 36 + 8);
    assert_eq!(roundtrip_v1(&RoaringBitmap::from([5])).len(), 36 + 16 + 2);
    let sparse: RoaringBitmap = (0..100).map(|i| i * 100).collect();
    assert_eq!(roundtrip_v1(&sparse).len(), 36 + 16 + 200);
    let full: RoaringBitmap = (0..1 << 16).collect();
    assert_eq!(roundtrip_v1(&full).len(), 36 + 4 + 1 + 4 + 2 + 4);
    let alternating: RoaringBitmap = (0..1 << 16).step_by(2).collect();
    assert_eq!(roundtrip_v1(&alternating).len(), MAX_RECORD_BYTES);
}

#[test]
#[expect(clippy::cast_precision_loss, reason = "an information measure")]
fn encoded_sizes_are_pinned() {
    // Empty: no body.
    assert_eq!(roundtrip(&RoaringBitmap::new()).len(), V2_OVERHEAD);
    // One value: the bitmap body, `lo` and `hi - lo`, with no bit between them.
    assert_eq!(roundtrip(&RoaringBitmap::from([5])).len(), V2_OVERHEAD + 2);
    // 100 values 100 apart: every gap 99, so the bounded code of one value, 0 bits per member:
    // lo (1 byte), hi - lo = 9900 (2), the parameter (1), the count 98 (1), min 99 and range-1 0.
    let sparse: RoaringBitmap = (0..100).map(|i| i * 100).collect();
    assert_eq!(
        roundtrip(&sparse).len(),
        V2_OVERHEAD + 1 + 2 + 1 + 1 + 1 + 1
    );
    // Random acks at rate 1/64 (geometric gaps): Rice with k near log2(64 ln 2) = 5, within
    // 3% of the zero-order entropy (about 65,536 x H(1/64) / 8 = 968 bytes).
    let rice = random_set(1 << 16, 64);
    let bytes = roundtrip(&rice);
    assert_eq!(partition_encoding(&bytes), Some(PartitionEncoding::Gaps));
    let param = bytes[V2_FIXED_LEN + 2 + 1 + 3];
    assert!(
        param & (code::HOLES_FLAG | code::BOUNDED_FLAG) == 0 && (4..=6).contains(&param),
        "{param:#x}"
    );
    let p = rice.len() as f64 / 65_536.0;
    let entropy = 65_536.0 * -(p * p.log2() + (1.0 - p) * (1.0 - p).log2()) / 8.0;
    let body = (bytes.len() - V2_OVERHEAD) as f64;
    assert!(body <= 1.03 * entropy, "{body} bytes against {entropy}");
    // A full partition: no hole between lo and hi, nothing coded.
    let full: RoaringBitmap = (0..1 << 16).collect();
    assert_eq!(roundtrip(&full).len(), V2_OVERHEAD + 1 + 3 + 1 + 1);
    // Every other entry: 32,766 members between 0 and 65534, every gap 1, 0 bits each.
    let alternating: RoaringBitmap = (0..1 << 16).step_by(2).collect();
    assert_eq!(
        roundtrip(&alternating).len(),
        V2_OVERHEAD + 1 + 3 + 1 + 3 + 1 + 1
    );
    // Half the entries, at random: one bit per entry strictly between 0 and 65535.
    assert_eq!(
        roundtrip(&random_half(1 << 16)).len(),
        V2_OVERHEAD + 1 + 3 + 65_534_usize.div_ceil(8)
    );
    // A 50,000-entry ledger with half its entries acked pays for its span, not for 2^16.
    let half: RoaringBitmap = (0..50_000)
        .filter(|v| (v * 7919) % 13 < 6 || *v == 0)
        .collect();
    assert!(roundtrip(&half).len() <= V2_OVERHEAD + 3 + 3 + 50_000 / 8);
}

#[test]
fn each_encoding_is_chosen_where_it_is_smallest() {
    assert_eq!(encoding(&RoaringBitmap::new()), PartitionEncoding::Empty);
    assert_eq!(encoding(&random_half(1 << 16)), PartitionEncoding::Bitmap);
    let long_runs: RoaringBitmap = (0..10).flat_map(|r| r * 2000..r * 2000 + 1000).collect();
    assert_eq!(encoding(&long_runs), PartitionEncoding::Roaring);
    let sparse: RoaringBitmap = (0..100).map(|i| i * 100).collect();
    let bytes = roundtrip(&sparse);
    assert_eq!(partition_encoding(&bytes), Some(PartitionEncoding::Gaps));
    assert_eq!(
        bytes[V2_FIXED_LEN + 2 + 3],
        code::BOUNDED_FLAG,
        "bounded, acked"
    );
    let few_holes: RoaringBitmap = (0..50_000).filter(|v| v % 1000 != 999).collect();
    let bytes = roundtrip(&few_holes);
    assert_eq!(partition_encoding(&bytes), Some(PartitionEncoding::Gaps));
    assert_ne!(
        bytes[V2_FIXED_LEN + 2 + 1 + 3] & code::HOLES_FLAG,
        0,
        "holes coded"
    );
    let v1 = encode_partition_v1(key(1, 1), &sparse);
    assert_eq!(partition_encoding(&v1), Some(PartitionEncoding::RoaringV1));
}

#[test]
fn encoding_is_canonical_whatever_the_in_memory_form() {
    for values in [
        (10..5000).collect::<Vec<u32>>(),
        (0..3000).map(|v| v * 3).collect(),
    ] {
        let mut a: RoaringBitmap = values.into_iter().collect();
        let b = a.clone();
        a.optimize();
        assert_eq!(
            encode_partition(key(1, 1), &a),
            encode_partition(key(1, 1), &b)
        );
    }
}

#[test]
fn large_keys_use_their_longest_varints() {
    let k = key(u64::MAX, MAX_CHUNK);
    let bytes = encode_partition(k, &RoaringBitmap::from([1, 2, 3]));
    assert_eq!(decode_partition(&bytes).expect("decodes").0, k);
    assert_eq!(bytes.len(), V2_OVERHEAD - 2 + 10 + 7 + 2 + 1);
}

#[test]
fn key_maps_positions_to_chunks_and_back() {
    let p = Position::new(9, (5 << PARTITION_BITS) + 17);
    let k = PartitionKey::of(p);
    assert_eq!(k, key(9, 5));
    assert_eq!(k.first_entry(), 5 << 16);
    assert_eq!(k.last_entry(), (6 << 16) - 1);
    assert_eq!(k.position(PartitionKey::offset_of(p.entry_id)), p);
    let top = PartitionKey::of(Position::new(1, u64::MAX));
    assert_eq!(top.chunk, MAX_CHUNK);
    assert_eq!(top.last_entry(), u64::MAX);
}

fn corruption(bytes: &[u8]) -> CorruptionKind {
    match decode_partition(bytes) {
        Err(Corruption { kind, .. }) => kind,
        other => panic!("expected corruption, got {other:?}"),
    }
}

fn with_crc(mut bytes: Vec<u8>) -> Vec<u8> {
    let at = bytes.len() - CRC_LEN;
    let crc = crc32fast::hash(&bytes[..at]);
    bytes[at..].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// A version 2 record of ledger 7, chunk 3 with this encoding byte and body, CRC fixed.
fn v2_record(encoding: u8, body: &[u8]) -> Vec<u8> {
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.push(encoding);
    bytes.extend_from_slice(&[7, 3]);
    bytes.extend_from_slice(body);
    bytes.extend_from_slice(&[0; CRC_LEN]);
    with_crc(bytes)
}

#[test]
fn version_1_decoder_names_what_is_wrong() {
    let good = encode_partition_v1(key(1, 2), &RoaringBitmap::from([1, 2, 3]));
    assert_eq!(corruption(&good[..10]), CorruptionKind::Truncated);
    assert_eq!(
        corruption(&with_crc(good[..30].to_vec())),
        CorruptionKind::Truncated
    );
    let mut flipped = good.clone();
    flipped[0] ^= 1;
    assert_eq!(corruption(&flipped), CorruptionKind::BadMagic);
    let mut flipped = good.clone();
    flipped[HEADER_LEN] ^= 1;
    assert_eq!(corruption(&flipped), CorruptionKind::ChecksumMismatch);
    let mut card = good.clone();
    card[CARDINALITY_AT] = 4;
    assert_eq!(
        corruption(&with_crc(card)),
        CorruptionKind::InvalidField("cardinality")
    );
    let mut long = good.clone();
    long[BITMAP_LEN_AT] += 1;
    assert_eq!(corruption(&with_crc(long)), CorruptionKind::BadLength);
}

#[test]
fn version_2_decoder_names_what_is_wrong() {
    let good = encode_partition(key(7, 3), &RoaringBitmap::from([1, 2, 3, 9]));
    assert_eq!(corruption(&good[..12]), CorruptionKind::Truncated);
    let mut v3 = good.clone();
    v3[VERSION_AT] = 3;
    assert_eq!(
        corruption(&with_crc(v3)),
        CorruptionKind::UnsupportedVersion(3)
    );
    assert_eq!(
        corruption(&v2_record(9, &[])),
        CorruptionKind::InvalidField("encoding")
    );
    // The empty encoding with a body.
    assert_eq!(corruption(&v2_record(0, &[1])), CorruptionKind::BadLength);
    // A span past the partition: lo 65535, hi - lo 1.
    assert_eq!(
        corruption(&v2_record(3, &[0xFF, 0xFF, 0x03, 0x01])),
        CorruptionKind::InvalidField("span")
    );
    // A bitmap body one byte longer than its span: lo 0, hi - lo 9 (8 bits between).
    assert_eq!(
        corruption(&v2_record(3, &[0, 9, 0xFF, 0])),
        CorruptionKind::BadLength
    );
    // More members than entries between lo and hi.
    assert_eq!(
        corruption(&v2_record(2, &[0, 3, 0, 3, 0])),
        CorruptionKind::BadLength
    );
    // A count the code bits cannot hold: 9 members of at least 1 bit in one byte.
    assert_eq!(
        corruption(&v2_record(2, &[0, 100, 0, 9, 0])),
        CorruptionKind::BadLength
    );
    // A gap that lands on hi: lo 0, hi 4, one member, k = 2, gap 3 (unary 0, bits 11).
    assert_eq!(
        corruption(&v2_record(2, &[0, 4, 2, 1, 0b110])),
        CorruptionKind::InvalidField("gap code")
    );
    // A varint longer than ten bytes in the key.
    let mut long_key = MAGIC.to_vec();
    long_key.extend_from_slice(&VERSION.to_le_bytes());
    long_key.push(0);
    long_key.extend_from_slice(&[0x80; 11]);
    long_key.extend_from_slice(&[0; CRC_LEN]);
    assert_eq!(
        corruption(&with_crc(long_key)),
        CorruptionKind::InvalidField("ledger_id")
    );
    // A chunk above the largest.
    let mut big_chunk = MAGIC.to_vec();
    big_chunk.extend_from_slice(&VERSION.to_le_bytes());
    big_chunk.push(0);
    big_chunk.push(1);
    code::put_varint(&mut big_chunk, MAX_CHUNK + 1);
    big_chunk.extend_from_slice(&[0; CRC_LEN]);
    assert_eq!(
        corruption(&with_crc(big_chunk)),
        CorruptionKind::InvalidField("chunk")
    );
}

#[test]
fn decoder_refuses_values_outside_the_partition() {
    // A second container (values >= 2^16) is not something a partition can hold.
    let set = RoaringBitmap::from([1, 1 << 16]);
    assert_eq!(
        corruption(&encode_partition(key(1, 2), &set)),
        CorruptionKind::InvalidField("bitmap")
    );
    assert_eq!(
        corruption(&encode_partition_v1(key(1, 2), &set)),
        CorruptionKind::InvalidField("bitmap")
    );
}

#[test]
fn decoder_refuses_non_canonical_records() {
    // Version 1: the same values in array form although the run form is smaller.
    let values: RoaringBitmap = (0..100).collect();
    let mut body = Vec::new();
    values.serialize_into(&mut body).expect("vec write");
    let mut bytes = encode_partition_v1(key(1, 2), &RoaringBitmap::new());
    bytes.truncate(HEADER_LEN);
    bytes[CARDINALITY_AT..CARDINALITY_AT + 4].copy_from_slice(&100u32.to_le_bytes());
    let len = u32::try_from(body.len()).expect("small");
    bytes[BITMAP_LEN_AT..BITMAP_LEN_AT + 4].copy_from_slice(&len.to_le_bytes());
    bytes.extend_from_slice(&body);
    bytes.extend_from_slice(&[0; CRC_LEN]);
    assert_eq!(
        corruption(&with_crc(bytes)),
        CorruptionKind::InvalidField("bitmap encoding")
    );
    // Version 2: a valid roaring body where the gaps are shorter.
    let sparse: RoaringBitmap = (0..100).map(|i| i * 100).collect();
    let mut roaring = Vec::new();
    sparse.serialize_into(&mut roaring).expect("vec write");
    assert_eq!(
        corruption(&v2_record(1, &roaring)),
        CorruptionKind::InvalidField("partition encoding")
    );
    // Version 2: a key varint with a needless continuation byte.
    let good = encode_partition(key(7, 3), &RoaringBitmap::from([4]));
    let mut padded = good[..V2_FIXED_LEN].to_vec();
    padded.extend_from_slice(&[0x87, 0x00]);
    padded.extend_from_slice(&good[V2_FIXED_LEN + 1..]);
    assert_eq!(
        corruption(&with_crc(padded)),
        CorruptionKind::InvalidField("partition encoding")
    );
    // Version 2: a padding bit set after the last of 19 bits of a bitmap body.
    let even: RoaringBitmap = (0..=20).step_by(2).collect();
    let mut dirty = encode_partition(key(7, 3), &even);
    assert_eq!(partition_encoding(&dirty), Some(PartitionEncoding::Bitmap));
    let last = dirty.len() - CRC_LEN - 1;
    assert_eq!(dirty[last] & 0x80, 0);
    dirty[last] |= 0x80;
    assert_eq!(
        corruption(&with_crc(dirty)),
        CorruptionKind::InvalidField("partition encoding")
    );
}

#[test]
fn decoder_refuses_a_bitmap_body_where_another_encoding_is_shorter() {
    // {0, 100, 200}: a valid bitmap body (199 inner bits, bit 99 set), but the gaps are shorter.
    let mut body = vec![0x00, 0xC8, 0x01];
    let mut bits = vec![0u8; 199usize.div_ceil(8)];
    bits[99 / 8] |= 1 << (99 % 8);
    body.extend_from_slice(&bits);
    assert_eq!(
        corruption(&v2_record(3, &body)),
        CorruptionKind::InvalidField("partition encoding")
    );
    // The same set as the encoder writes it decodes.
    let set = RoaringBitmap::from([0, 100, 200]);
    assert_ne!(encoding(&set), PartitionEncoding::Bitmap);
    roundtrip(&set);
}

#[test]
fn a_short_record_decodes_without_a_large_container() {
    // One hole in a full partition: a few bytes on disk, two runs in memory.
    let one_hole: RoaringBitmap = (0..1 << 16).filter(|v| *v != 30_000).collect();
    let bytes = roundtrip(&one_hole);
    assert!(bytes.len() < 32, "{}", bytes.len());
    let (_, decoded) = decode_partition(&bytes).expect("decodes");
    let stats = decoded.statistics();
    assert_eq!((stats.n_run_containers, stats.n_bitset_containers), (1, 0));
}

#[test]
fn errors_carry_the_callers_location() {
    let err = decode_partition(b"short")
        .expect_err("too short")
        .in_ledger(42, 1000);
    assert!(matches!(
        err,
        Error::Corrupted {
            place: CorruptionPlace::Ledger {
                ledger: 42,
                offset: 1005,
            },
            kind: CorruptionKind::Truncated
        }
    ));
}

/// Sets of every shape a partition meets: runs of acked entries and of holes of random lengths,
/// so that every encoding and both coded classes come up.
fn partition_set() -> impl Strategy<Value = RoaringBitmap> {
    (
        0u32..1 << 16,
        prop::collection::vec((1u32..3000, 1u32..3000, any::<bool>()), 0..40),
    )
        .prop_map(|(start, runs)| {
            let mut set = RoaringBitmap::new();
            let mut at = start;
            for (acked, holes, short) in runs {
                let (acked, holes) = if short {
                    (acked % 4 + 1, holes % 4 + 1)
                } else {
                    (acked, holes)
                };
                let end = (at + acked).min(1 << 16);
                set.insert_range(at..end);
                at = end + holes;
                if at >= 1 << 16 {
                    break;
                }
            }
            set
        })
}

proptest! {
    #[test]
    fn every_set_round_trips_in_both_versions(set in partition_set(), ledger in any::<u64>(),
                                             chunk in 0..=MAX_CHUNK) {
        let k = key(ledger, chunk);
        let bytes = encode_partition(k, &set);
        let (k2, decoded) = decode_partition(&bytes).expect("decodes");
        prop_assert_eq!(k2, k);
        prop_assert_eq!(&decoded, &set);
        prop_assert_eq!(encode_partition(k2, &decoded), bytes.clone());
        let v1 = encode_partition_v1(k, &set);
        prop_assert_eq!(decode_partition(&v1).expect("v1 decodes").1, set.clone());
        // Never longer than version 1 (which pays a 23-byte larger header at most).
        prop_assert!(bytes.len() <= v1.len());
    }

    #[test]
    fn random_bytes_behind_a_valid_crc_never_panic(enc in 0u8..5, body in prop::collection::vec(any::<u8>(), 0..64)) {
        let bytes = v2_record(enc, &body);
        if let Ok((k, set)) = decode_partition(&bytes) {
            prop_assert_eq!(encode_partition(k, &set), bytes);
        }
    }
}

#[test]
fn largest_version_2_record_stays_under_the_version_1_maximum() {
    let widest = random_half(1 << 16);
    let bytes = encode_partition(key(u64::MAX, MAX_CHUNK), &widest);
    assert_eq!(partition_encoding(&bytes), Some(PartitionEncoding::Bitmap));
    assert_eq!(bytes.len(), V2_HEADER_MAX + 1 + 3 + 8192 + CRC_LEN);
    assert_eq!(bytes.len(), 8224);
    assert!(bytes.len() <= MAX_RECORD_BYTES);
}

/// The shortest version 2 body of `set` by brute force: every encoding, both classes, every Rice
/// parameter and the bounded code, with no pruning. A model of what the encoder must find.
fn shortest_body_len(set: &RoaringBitmap) -> usize {
    let (Some(lo), Some(hi)) = (set.min(), set.max()) else {
        return 0;
    };
    let vlen = |v: u64| code::varint_len(v);
    let mut roaring = set.clone();
    roaring.optimize();
    let mut best = roaring.serialized_size().min(code::span_body_len(lo, hi));
    for holes in [false, true] {
        let members: Vec<u32> = (lo + 1..hi).filter(|v| set.contains(*v) != holes).collect();
        let mut prev = lo;
        let gaps: Vec<u64> = members
            .iter()
            .map(|&m| {
                let g = u64::from(m - prev - 1);
                prev = m;
                g
            })
            .collect();
        let m = gaps.len() as u64;
        let fixed = vlen(lo.into()) + vlen((hi - lo).into()) + 1 + vlen(m);
        let mut bits = (0..=16u32)
            .map(|k| {
                gaps.iter()
                    .map(|g| (g >> k) + u64::from(k) + 1)
                    .sum::<u64>()
            })
            .min()
            .unwrap_or(0);
        if let (Some(&min), Some(&max)) = (gaps.iter().min(), gaps.iter().max()) {
            let range = max - min + 1;
            let b = u64::from(range.ilog2());
            let u = (1u64 << (b + 1)) - range;
            let coded: u64 = gaps.iter().map(|g| b + u64::from(g - min >= u)).sum();
            bits = bits.min(coded + 8 * (vlen(min) + vlen(range - 1)) as u64);
        }
        best = best.min(fixed + usize::try_from(bits.div_ceil(8)).expect("small"));
    }
    best
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn the_encoder_writes_the_shortest_body(set in partition_set()) {
        let bytes = encode_partition(key(7, 3), &set);
        prop_assert_eq!(bytes.len() - V2_OVERHEAD, shortest_body_len(&set));
    }
}

#[test]
fn the_encoder_writes_the_shortest_body_for_random_densities() {
    for one_in in [2, 3, 10, 64, 1000] {
        let set = random_set(1 << 16, one_in);
        let complement: RoaringBitmap = (0..1 << 16)
            .filter(|v| !set.contains(*v) || *v == 0 || *v == (1 << 16) - 1)
            .collect();
        for s in [set, complement] {
            assert_eq!(
                encode_partition(key(7, 3), &s).len() - V2_OVERHEAD,
                shortest_body_len(&s),
                "1 in {one_in}"
            );
        }
    }
}

proptest! {
    #[test]
    fn mutated_records_are_refused_or_reencode_to_themselves(
        set in partition_set(),
        at in any::<prop::sample::Index>(),
        xor in 1u8..=255,
        cut in any::<bool>(),
    ) {
        let good = encode_partition(key(7, 3), &set);
        let covered = good.len() - CRC_LEN;
        let i = V2_FIXED_LEN + at.index(covered - V2_FIXED_LEN);
        let mut bad = good[..covered].to_vec();
        if cut {
            bad.truncate(i);
        } else {
            bad[i] ^= xor;
        }
        bad.extend_from_slice(&[0; CRC_LEN]);
        let bad = with_crc(bad);
        if let Ok((k, decoded)) = decode_partition(&bad) {
            prop_assert_eq!(encode_partition(k, &decoded), bad);
        }
    }
}

/// Sets of many shapes from a fixed seed: random densities over a 50,000-entry ledger and a
/// whole partition (and their complements), alternating and periodic acks, and runs of random
/// lengths, short and long.
fn pinned_sets() -> Vec<RoaringBitmap> {
    let mut sets = Vec::new();
    for span in [50_000, 1 << 16] {
        for one_in in [2, 3, 5, 10, 20, 64, 100, 1000, 10_000] {
            let set = random_set(span, one_in);
            let complement: RoaringBitmap = (0..span)
                .filter(|v| !set.contains(*v) || *v == 0 || *v == span - 1)
                .collect();
            sets.push(set);
            sets.push(complement);
        }
        for period in [2, 3, 7, 100] {
            sets.push((0..span).step_by(period).collect());
        }
    }
    let mut state = 0x0dd_u64;
    let mut next = move |below: u32| {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        u32::try_from((z ^ (z >> 31)) % u64::from(below)).expect("below a u32")
    };
    for i in 0..300 {
        let limit = [5, 40, 300, 3000][i % 4];
        let mut set = RoaringBitmap::new();
        let mut at = next(1 << 12);
        while at < 1 << 16 {
            let end = (at + 1 + next(limit)).min(1 << 16);
            set.insert_range(at..end);
            at = end + 1 + next(limit);
        }
        sets.push(set);
    }
    sets
}

/// The encoder's exact output for [`pinned_sets`], as a CRC of every record: choosing the
/// encoding faster must not change a byte (the decoder refuses a record that does not
/// re-encode to itself, so a changed choice would also refuse records older builds wrote).
#[test]
fn encoder_output_is_pinned_for_sets_of_every_shape() {
    let mut all = Vec::new();
    for (i, set) in pinned_sets().iter().enumerate() {
        let bytes = encode_partition(key(7, i as u64), set);
        assert_eq!(decode_partition(&bytes).expect("decodes").1, *set);
        all.extend_from_slice(&bytes);
    }
    assert_eq!(
        (all.len(), crc32fast::hash(&all)),
        (1_246_595, 3_269_035_366)
    );
}

proptest! {
    #[test]
    fn every_set_round_trips_through_its_inline_form(set in partition_set(), ledger in any::<u64>(),
                                                   chunk in 0..=MAX_CHUNK) {
        let k = key(ledger, chunk);
        let record = encode_partition(k, &set);
        let inline = inline_form(&record).expect("a version 2 record has an inline form");
        prop_assert_eq!(&inline, &encode_inline(&set));
        prop_assert_eq!(inline.len() + inline_overhead(k), record.len());
        prop_assert_eq!(record_of_inline(k, &inline), record);
        prop_assert_eq!(decode_inline(k, &inline).expect("decodes"), set);
    }

    #[test]
    fn inline_forms_decode_exactly_when_their_records_do(enc in 0u8..5,
                                                        body in prop::collection::vec(any::<u8>(), 0..64)) {
        let k = key(3, 1);
        let mut inline = vec![enc];
        inline.extend_from_slice(&body);
        let as_record = decode_partition(&record_of_inline(k, &inline));
        let as_inline = decode_inline(k, &inline);
        prop_assert_eq!(as_record.is_ok(), as_inline.is_ok());
        if let Ok(set) = as_inline {
            prop_assert_eq!(encode_inline(&set), inline);
        }
    }
}

#[test]
fn inline_form_sizes_are_pinned() {
    // Magic 4, version 2, one-byte key varints 2, CRC 4.
    assert_eq!(inline_overhead(key(7, 3)), 12);
    assert_eq!(inline_overhead(key(u64::MAX, MAX_CHUNK)), 6 + 10 + 7 + 4);
    // One entry: the bitmap encoding of `lo` and `hi - lo`, after the encoding byte.
    let one = encode_inline(&RoaringBitmap::from([5]));
    assert_eq!(one, vec![3, 5, 0]);
    assert_eq!(encode_inline(&RoaringBitmap::new()), vec![0]);
}

#[test]
fn only_intact_version_2_records_have_an_inline_form() {
    let set = RoaringBitmap::from([1, 9, 400]);
    let k = key(7, 3);
    assert_eq!(inline_form(&encode_partition_v1(k, &set)), None);
    let mut damaged = encode_partition(k, &set);
    damaged[8] ^= 1;
    assert_eq!(inline_form(&damaged), None);
    assert_eq!(inline_form(b"AckP"), None);
    assert_eq!(inline_form(b""), None);
}

#[test]
fn a_bad_inline_form_is_refused_with_an_offset_inside_it() {
    let k = key(7, 3);
    assert_eq!(
        decode_inline(k, &[]).unwrap_err().kind,
        CorruptionKind::Truncated
    );
    // An unknown encoding byte: offset 0.
    let err = decode_inline(k, &[9, 1, 2]).unwrap_err();
    assert_eq!(
        (err.kind, err.offset),
        (CorruptionKind::InvalidField("encoding"), 0)
    );
    // An empty set with a body: the body starts at offset 1.
    let err = decode_inline(k, &[0, 1]).unwrap_err();
    assert_eq!((err.kind, err.offset), (CorruptionKind::BadLength, 1));
    // A span past the partition.
    let mut bytes = vec![3];
    code::put_varint(&mut bytes, 1 << 16);
    bytes.push(0);
    assert!(decode_inline(k, &bytes).is_err());
}

/// What [`peek_bounds`] reads of a record it accepts: the key and the set's smallest and
/// largest members, exactly what the decoder finds; and it accepts every gaps and bitmap record
/// (the encodings that start with their bounds), none of the others.
fn check_peek(k: PartitionKey, set: &RoaringBitmap) {
    let bytes = encode_partition(k, set);
    let peeked = peek_bounds(&bytes).expect("an intact record");
    let starts_with_bounds = matches!(
        partition_encoding(&bytes),
        Some(PartitionEncoding::Gaps | PartitionEncoding::Bitmap)
    );
    if starts_with_bounds {
        let (lo, hi) = set.min().zip(set.max()).expect("a non-empty set");
        assert_eq!(peeked, Some((k, lo, hi)), "{} members", set.len());
    } else {
        assert_eq!(peeked, None, "{} members", set.len());
    }
    let v1 = encode_partition_v1(k, set);
    assert_eq!(peek_bounds(&v1).expect("version 1 record"), None);
}

#[test]
fn peeked_bounds_are_the_decoders_for_sets_of_every_shape() {
    let mut encodings = std::collections::BTreeSet::new();
    for (i, set) in pinned_sets()
        .iter()
        .chain(&[
            RoaringBitmap::new(),
            RoaringBitmap::from([0]),
            RoaringBitmap::from([65_535]),
            (0..500).step_by(2).collect(),
            (0..1 << 16).collect(),
        ])
        .enumerate()
    {
        check_peek(key(7, i as u64), set);
        encodings.insert(format!(
            "{:?}",
            partition_encoding(&encode_partition(key(7, 0), set))
        ));
    }
    // Every encoding came up, so both answers (bounds, and none) were checked.
    assert_eq!(encodings.len(), 4, "{encodings:?}");
}

#[test]
fn every_byte_of_a_record_is_checked_before_its_bounds_are_read() {
    let k = key(1 << 40, 9);
    for set in [
        (0..500).step_by(2).collect::<RoaringBitmap>(),
        random_set(3000, 2),
    ] {
        let bytes = encode_partition(k, &set);
        assert!(peek_bounds(&bytes).expect("intact").is_some());
        for at in 0..bytes.len() {
            for bit in 0..8 {
                let mut flipped = bytes.clone();
                flipped[at] ^= 1 << bit;
                assert!(peek_bounds(&flipped).is_err(), "bit {bit} of byte {at}");
                assert!(
                    decode_partition(&flipped).is_err(),
                    "bit {bit} of byte {at}"
                );
            }
        }
        for len in 0..bytes.len() {
            assert!(peek_bounds(&bytes[..len]).is_err(), "cut at {len}");
        }
    }
}

#[test]
fn bounds_behind_a_valid_crc_are_refused_as_the_decoder_refuses_them() {
    // A span that reaches past the partition, and a key whose varint is longer than needed:
    // the decoder's errors, at the same place.
    for (enc, body) in [
        (3u8, vec![0xFF, 0xFF, 0x03, 0x01]),
        (2, vec![0x80, 0x80, 0x04, 0x00, 0x00, 0x00]),
    ] {
        let bytes = v2_record(enc, &body);
        let peeked = peek_bounds(&bytes).expect_err("refused");
        let decoded = decode_partition(&bytes).expect_err("refused");
        assert_eq!(peeked, decoded);
    }
    let mut long_key = MAGIC.to_vec();
    long_key.extend_from_slice(&VERSION.to_le_bytes());
    // Ledger 7 in two bytes, chunk 3, a bitmap body of one entry, room for the CRC.
    long_key.extend_from_slice(&[3, 0x87, 0x00, 0x03, 0x00, 0x00, 0, 0, 0, 0]);
    let long_key = with_crc(long_key);
    assert_eq!(
        peek_bounds(&long_key).expect_err("refused"),
        decode_partition(&long_key).expect_err("refused")
    );
}

proptest! {
    #[test]
    fn peeked_bounds_are_the_decoders(set in partition_set(), ledger in any::<u64>(),
                                      chunk in 0..=MAX_CHUNK) {
        check_peek(key(ledger, chunk), &set);
    }

    #[test]
    fn bounds_are_peeked_only_from_records_the_crc_covers(enc in 0u8..5,
                                                         body in prop::collection::vec(any::<u8>(), 0..64)) {
        // Whatever the body, a bound peeked is one the decoder, when it accepts the record,
        // finds too.
        let bytes = v2_record(enc, &body);
        let peeked = peek_bounds(&bytes);
        if let Ok((k, set)) = decode_partition(&bytes) {
            let expected = set.min().zip(set.max()).map(|(lo, hi)| (k, lo, hi));
            match peeked {
                Ok(Some(found)) => prop_assert_eq!(Some(found), expected),
                Ok(None) => {}
                Err(e) => prop_assert!(false, "decodes but the peek refused: {e:?}"),
            }
        }
    }
}

/// A gaps or bitmap record whose bounds are rewritten (the rest of its body kept, the CRC
/// recomputed) is refused by the decoder unless the set it decodes to has exactly the bounds
/// [`peek_bounds`] reads: an open that trusts the peeked bounds is never answered past the set
/// the first load finds.
#[test]
fn rewritten_bounds_under_a_recomputed_crc_never_disagree_with_the_decoded_set() {
    use ackstore::internals::format::put_varint;
    let (mut refused, mut accepted) = (0, 0);
    for set in [
        RoaringBitmap::from([3, 4, 6]),
        RoaringBitmap::from([100]),
        (0..500).step_by(2).collect::<RoaringBitmap>(),
        random_set(3000, 2),
        random_set(40_000, 97),
    ] {
        let bytes = encode_partition(key(7, 3), &set);
        assert!(matches!(
            partition_encoding(&bytes),
            Some(PartitionEncoding::Gaps | PartitionEncoding::Bitmap)
        ));
        let (lo, hi) = set.min().zip(set.max()).expect("non-empty");
        let at = V2_FIXED_LEN + 2;
        let mut header = Vec::new();
        put_varint(&mut header, u64::from(lo));
        put_varint(&mut header, u64::from(hi - lo));
        assert_eq!(&bytes[at..at + header.len()], &header[..]);
        let rest = &bytes[at + header.len()..bytes.len() - CRC_LEN];
        for new_lo in lo.saturating_sub(9)..=lo + 9 {
            for new_hi in hi.saturating_sub(9)..=(hi + 9).min(65_535) {
                if new_lo > new_hi || (new_lo, new_hi) == (lo, hi) {
                    continue;
                }
                let mut body = Vec::new();
                put_varint(&mut body, u64::from(new_lo));
                put_varint(&mut body, u64::from(new_hi - new_lo));
                body.extend_from_slice(rest);
                let lied = v2_record(bytes[ENCODING_AT], &body);
                let peeked = peek_bounds(&lied).expect("the CRC verifies, the span fits");
                assert_eq!(peeked, Some((key(7, 3), new_lo, new_hi)));
                match decode_partition(&lied) {
                    Err(_) => refused += 1,
                    Ok((k, decoded)) => {
                        accepted += 1;
                        let found = decoded.min().zip(decoded.max()).map(|(l, h)| (k, l, h));
                        assert_eq!(
                            found,
                            peeked,
                            "bounds {new_lo}..={new_hi} of a {}-member set",
                            set.len()
                        );
                    }
                }
            }
        }
    }
    // Most rewrites are refused; a span shifted over the same bits is another valid set.
    assert!(refused > 0, "{refused} refused, {accepted} accepted");
}

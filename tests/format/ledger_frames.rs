//! Ledger files: headers, frames, footers and slots, their sizes, round trips and damage.

use ackstore::internals::error::CorruptionKind;
use ackstore::internals::format::Corruption;
use ackstore::internals::format::crc32;
use ackstore::internals::format::ledger::*;

const META: EntryMeta = EntryMeta {
    index: 7,
    num_messages: 3,
    timestamp: 1_700_000_000_000,
};
const H: LedgerHeader = LedgerHeader {
    ledger_id: 9,
    version: VERSION,
    nonce: 0x5eed_0f1e_dfe7,
};

/// A sealed file of ledger `h` holding `payloads`, and its data end.
fn sealed_file(h: &LedgerHeader, payloads: &[&[u8]]) -> (Vec<u8>, usize) {
    let mut file = h.encode();
    let mut offsets = Vec::new();
    for (i, p) in payloads.iter().enumerate() {
        offsets.push(file.len() as u64);
        file.extend(encode_frame(h, i as u64, 0, META, p).unwrap());
    }
    let data_end = file.len();
    file.extend(encode_footer(h, data_end as u64, &offsets));
    (file, data_end)
}

#[test]
fn encoded_sizes_are_pinned() {
    assert_eq!(HEADER_LEN, 44);
    assert_eq!(HEADER_V1_LEN, 36);
    assert_eq!(HEADER_FIXED_LEN, 32);
    assert_eq!((SLOT_LEN, SLOTS_AT, HEADER_V3_LEN), (12, 44, 68));
    assert_eq!(H.encode().len(), HEADER_V3_LEN);
    assert_eq!(H.data_start(), 68);
    assert_eq!(LedgerHeader::v2(9, 1).encode().len(), HEADER_LEN);
    assert_eq!(LedgerHeader::v2(9, 1).data_start(), 44);
    assert_eq!(H.encode_slot(0, 1).len(), SLOT_LEN);
    assert_eq!(
        (LedgerHeader::slot_offset(0), LedgerHeader::slot_offset(1)),
        (44, 56)
    );
    assert_eq!(LedgerHeader::v1(1).encode().len(), HEADER_V1_LEN);
    assert_eq!(LedgerHeader::v1(1).data_start(), 36);
    assert_eq!(FRAME_HEADER_LEN, 44);
    assert_eq!(
        encode_frame(&H, 0, 0, META, b"").unwrap().len(),
        FRAME_HEADER_LEN
    );
    assert_eq!(encode_frame(&H, 0, 0, META, b"abc").unwrap().len(), 47);
    assert_eq!(INDEX_OVERHEAD, 12);
    assert_eq!(TRAILER_LEN, 36);
    assert_eq!(footer_len(0), Some(48));
    assert_eq!(footer_len(3), Some(72));
    assert_eq!(encode_footer(&H, 44, &[]).len(), 48);
    assert_eq!(encode_footer(&H, 200, &[44, 88, 132]).len(), 72);
    assert_eq!(footer_len(u64::MAX), None);
}

#[test]
fn header_round_trips_in_both_versions_and_rejects_damage() {
    let h = H.encode();
    assert_eq!(decode_header(&h), Ok(H));
    assert_eq!(h[..HEADER_FIXED_LEN], header_fixed_part(9, VERSION)[..]);
    let v1 = LedgerHeader::v1(42);
    assert_eq!(decode_header(&v1.encode()), Ok(v1));
    let v2 = LedgerHeader::v2(42, 5);
    assert_eq!(decode_header(&v2.encode()), Ok(v2));
    assert_eq!(
        decode_header(&h[..10]),
        Err(Corruption::new(CorruptionKind::Truncated, H_MAGIC))
    );
    let mut bad = h.clone();
    bad[0] ^= 1;
    assert_eq!(
        decode_header(&bad),
        Err(Corruption::new(CorruptionKind::BadMagic, H_MAGIC))
    );
    let mut bad = h.clone();
    bad[H_NONCE] ^= 1;
    assert_eq!(
        decode_header(&bad),
        Err(Corruption::new(CorruptionKind::ChecksumMismatch, H_CRC))
    );
    let mut bad = h;
    bad[H_VERSION] = 4;
    assert_eq!(
        decode_header(&bad),
        Err(Corruption::new(
            CorruptionKind::UnsupportedVersion(4),
            H_VERSION
        ))
    );
}

#[test]
fn slots_record_the_larger_valid_copy_and_a_damaged_copy_falls_back_to_the_other() {
    let h = H.encode();
    let slots = &h[SLOTS_AT..HEADER_V3_LEN];
    assert_eq!(H.decode_slots(slots), Some(H.data_start()));
    let mut two = H.encode_slot(0, 500).to_vec();
    two.extend(H.encode_slot(1, 900));
    assert_eq!(H.decode_slots(&two), Some(900));
    for i in 0..two.len() * 8 {
        let mut bad = two.clone();
        bad[i / 8] ^= 1 << (i % 8);
        let expected = if i / 8 < SLOT_LEN { 900 } else { 500 };
        assert_eq!(H.decode_slots(&bad), Some(expected), "flip of bit {i}");
    }
    // A copy is valid only in its own place and only under the ledger's nonce.
    let mut swapped = H.encode_slot(1, 900).to_vec();
    swapped.extend(H.encode_slot(0, 500));
    assert_eq!(H.decode_slots(&swapped), None);
    assert_eq!(LedgerHeader { nonce: 1, ..H }.decode_slots(&two), None);
    assert_eq!(H.decode_slots(&[0u8; 2 * SLOT_LEN]), None);
    assert_eq!(LedgerHeader::v2(9, H.nonce).decode_slots(&two), None);
    assert_eq!(H.decode_slots(&two[..5]), None);
}

#[test]
fn frame_round_trips_and_every_bit_flip_is_caught() {
    let frame = encode_frame(&H, 5, 36, META, b"payload").unwrap();
    let (h, p) = decode_frame(&H, &frame).unwrap();
    assert_eq!(
        (h.entry_id, h.durable_mark, h.meta, p),
        (5, 36, META, &b"payload"[..])
    );
    for i in 0..frame.len() * 8 {
        let mut bad = frame.clone();
        bad[i / 8] ^= 1 << (i % 8);
        assert!(
            decode_entry_frame(&H, &bad, 5).is_err(),
            "flip of bit {i} undetected"
        );
    }
}

#[test]
fn checksums_are_seeded_with_the_nonce() {
    let other = LedgerHeader { nonce: 1, ..H };
    let frame = encode_frame(&H, 0, 0, META, b"x").unwrap();
    assert_eq!(
        decode_frame(&other, &frame).unwrap_err(),
        Corruption::new(CorruptionKind::ChecksumMismatch, F_CRC)
    );
    let (file, _) = sealed_file(&H, &[b"a"]);
    let tail = &file[file.len() - TRAILER_LEN..];
    assert!(decode_trailer(&H, tail).is_ok());
    assert_eq!(
        decode_trailer(&other, tail),
        Err(Corruption::new(CorruptionKind::ChecksumMismatch, T_CRC))
    );
    // Version 1 checksums are the plain CRC32 of the covered bytes.
    let v1 = LedgerHeader::v1(9);
    let frame = encode_frame(&v1, 0, 0, META, b"x").unwrap();
    assert_eq!(frame[..4], crc32(&[&frame[F_LEN..]]).to_le_bytes());
}

#[test]
fn first_nonzero_finds_the_first_nonzero_byte_in_and_across_blocks() {
    assert_eq!(first_nonzero(&[0u8; 300]), None);
    assert_eq!(first_nonzero(&[]), None);
    for at in [0, 1, 63, 64, 65, 200] {
        let mut bytes = vec![0u8; 201];
        bytes[at] = 7;
        bytes[200] = 1;
        assert_eq!(first_nonzero(&bytes), Some(at), "nonzero at {at}");
    }
}

#[test]
fn a_zero_filled_header_is_never_a_valid_frame() {
    let zeros = [0u8; FRAME_HEADER_LEN];
    assert!(is_zero(&zeros));

    assert_eq!(
        decode_frame(&LedgerHeader::v1(1), &zeros).unwrap_err(),
        Corruption::new(CorruptionKind::ChecksumMismatch, F_CRC)
    );
}

#[test]
fn footer_validates_and_locates_frames() {
    for h in [H, LedgerHeader::v1(9)] {
        let (file, data_len) = sealed_file(&h, &[b"a", b"", b"xyz"]);
        let layout = validate_sealed(&file, 9).unwrap();
        assert_eq!((layout.entry_count, layout.header), (3, h));
        let (s, e) = layout.frame_range(&file, 2).unwrap();
        let range = usize::try_from(s).unwrap()..usize::try_from(e).unwrap();
        let (_, p) = decode_entry_frame(&h, &file[range], 2).unwrap();
        assert_eq!(p, b"xyz");
        assert_eq!(layout.frame_range(&file, 3), None);
        assert!(validate_sealed(&file, 8).is_err());
        for i in data_len..file.len() {
            let mut bad = file.clone();
            bad[i] ^= 0x40;
            assert!(validate_sealed(&bad, 9).is_err(), "flip at {i} undetected");
        }
    }
}

#[test]
fn a_footer_whose_last_offset_is_not_the_last_frame_is_refused() {
    let (file, data_end) = sealed_file(&H, &[b"a", b"bb"]);
    let first = H.data_start();
    let second = first + FRAME_HEADER_LEN as u64 + 1;
    // An index that drops the last entry: its last offset's frame does not end at data_end.
    let mut short = file[..data_end].to_vec();
    short.extend(encode_footer(&H, data_end as u64, &[first]));
    assert_eq!(
        validate_sealed(&short, 9),
        Err(Corruption::new(
            CorruptionKind::InvalidField("last frame"),
            usize::try_from(first).unwrap()
        ))
    );
    // A data end inside the last frame.
    let mut inside = file[..data_end - 1].to_vec();
    inside.extend(encode_footer(&H, data_end as u64 - 1, &[first, second]));
    assert_eq!(
        validate_sealed(&inside, 9),
        Err(Corruption::new(
            CorruptionKind::InvalidField("last frame"),
            usize::try_from(second).unwrap()
        ))
    );
}

#[test]
fn frames_encoded_into_one_buffer_equal_frames_encoded_alone() {
    let mut batch = b"prefix".to_vec();
    encode_frame_into(&mut batch, &H, 0, 0, META, b"one").unwrap();
    encode_frame_into(&mut batch, &H, 1, 6, META, b"two!").unwrap();
    let mut alone = b"prefix".to_vec();
    alone.extend(encode_frame(&H, 0, 0, META, b"one").unwrap());
    alone.extend(encode_frame(&H, 1, 6, META, b"two!").unwrap());
    assert_eq!(batch, alone);
}

#[test]
fn oversized_payload_is_refused_by_the_encoder() {
    // Zeroed and never touched: the length is refused before a byte is read or copied.
    let huge = vec![0u8; MAX_PAYLOAD_LEN as usize + 1];
    assert_eq!(
        encode_frame(&H, 0, 0, META, &huge),
        Err(CorruptionKind::BadLength)
    );
    let mut out = b"kept".to_vec();
    assert_eq!(
        encode_frame_into(&mut out, &H, 0, 0, META, &huge),
        Err(CorruptionKind::BadLength)
    );
    assert_eq!(out, b"kept");
}

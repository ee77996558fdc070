//! The shared reader of every decoder: bounds, counts, varints and CRCs of parts.

use ackstore::internals::error::CorruptionKind;
use ackstore::internals::format::*;

#[test]
fn reader_refuses_reads_past_the_end_without_panicking() {
    let mut r = Reader::new(&[1, 0, 0, 0, 2]);
    assert_eq!(r.u32(), Ok(1));
    assert_eq!(r.u32(), Err(Corruption::new(CorruptionKind::Truncated, 4)));
    assert_eq!(r.u8(), Ok(2));
    assert_eq!(
        r.take(usize::MAX).map_err(|c| c.kind),
        Err(CorruptionKind::BadLength)
    );
    r.finish().unwrap();
}

#[test]
fn count_is_refused_when_the_items_cannot_fit() {
    let mut bytes = 3u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(&[0; 23]);
    let kind = |r: Result<usize, Corruption>| r.map_err(|c| c.kind);
    assert_eq!(
        kind(Reader::new(&bytes).count(8)),
        Err(CorruptionKind::BadLength)
    );
    bytes.push(0);
    assert_eq!(Reader::new(&bytes).count(8), Ok(3));
    let huge = u64::MAX.to_le_bytes();
    assert_eq!(
        kind(Reader::new(&huge).count(8)),
        Err(CorruptionKind::BadLength)
    );
}

#[test]
fn varints_round_trip_and_only_the_shortest_form_is_canonical() {
    for v in [0, 1, 127, 128, 300, u64::MAX] {
        let mut out = Vec::new();
        put_varint(&mut out, v);
        assert_eq!(out.len(), varint_len(v));
        assert_eq!(Reader::new(&out).varint(), Ok(v));
    }
    let redundant = [0x80, 0x00];
    assert_eq!(Reader::new(&redundant).varint_loose(), Ok(0));
    let mut r = Reader::at(&redundant, 7);
    assert_eq!(
        r.varint(),
        Err(Corruption::new(CorruptionKind::InvalidField("varint"), 7))
    );
    assert_eq!(r.position(), 0);
}

#[test]
fn crc_of_parts_equals_crc_of_concatenation() {
    assert_eq!(crc32(&[b"ab", b"cd"]), crc32fast::hash(b"abcd"));
}

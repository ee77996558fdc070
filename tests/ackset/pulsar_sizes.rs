//! Pulsar's own encodings of an ack state, sized: the baseline of the size figures.

use ackstore::internals::ackset::pulsar::*;
use ackstore::internals::position::Position;
use roaring::RoaringBitmap;

fn range(ledger: u64, first: u64, last: u64) -> (Position, Position) {
    (Position::new(ledger, first), Position::new(ledger, last))
}

#[test]
fn varints_take_seven_bits_per_byte() {
    assert_eq!(varint_bytes(0), 1);
    assert_eq!(varint_bytes(127), 1);
    assert_eq!(varint_bytes(128), 2);
    assert_eq!(varint_bytes(16_383), 2);
    assert_eq!(varint_bytes(16_384), 3);
    assert_eq!(varint_bytes((-1i64).cast_unsigned()), 10);
    assert_eq!(varint_bytes(u64::MAX >> 1), 9);
}

#[test]
fn small_range_takes_fourteen_bytes() {
    // lower (1, 4): 08 01 10 04 = 4 bytes, as field 1: 0a 04 + 4 = 6.
    // upper (1, 5): the same 6 bytes as field 2. MessageRange: 12 bytes.
    // As PositionInfo field 3: 1a 0c + 12 = 14.
    assert_eq!(message_range_bytes([range(1, 5, 5)]), 14);
}

#[test]
fn range_starting_at_entry_zero_pays_for_minus_one() {
    // Ledger 123456 is a 3-byte varint. lower (123456, -1): 1 + 3 + 1 + 10 = 15, field 17;
    // upper (123456, 0): 1 + 3 + 1 + 1 = 6, field 8; MessageRange 25; with tag and length 27.
    assert_eq!(message_range_bytes([range(123_456, 0, 0)]), 27);
}

#[test]
fn typical_broker_range_and_sums() {
    // Ledger 1_000_000 (3-byte varint), entries 300_000..=300_001 (3 bytes each):
    // nested 8 bytes, fields 10 each, MessageRange 20, with tag and length 22.
    let r = range(1_000_000, 300_000, 300_001);
    assert_eq!(message_range_bytes([r]), 22);
    assert_eq!(message_range_bytes([r, r, r]), 66);
    assert_eq!(message_range_bytes([]), 0);
}

#[test]
fn long_list_map_counts_every_word_up_to_the_highest_acked_entry() {
    let small = RoaringBitmap::from([0, 1, 2]);
    // key: 08 05; one word 7: 10 07; LongListMap 4 bytes, as field 6: 32 04 + 4 = 6.
    assert_eq!(long_list_map_bytes([(5, &small)]), 6);
    // Entry 63 makes the word negative: a ten-byte varint. 2 + 11 = 13, field 15.
    assert_eq!(long_list_map_bytes([(5, &RoaringBitmap::from([63]))]), 15);
    // Entry 64: words [0, 1], two bytes each with their tag. 2 + 2 + 2 = 6, field 8.
    assert_eq!(long_list_map_bytes([(5, &RoaringBitmap::from([64]))]), 8);
    // Ledgers with nothing acked are not written; sums add up.
    let none = RoaringBitmap::new();
    assert_eq!(
        long_list_map_bytes([(5, &small), (6, &none), (7, &small)]),
        12
    );
    // 50,000 entries all acked: 781 full words (-1, ten bytes) and one of 16 bits (3 bytes).
    let full: RoaringBitmap = (0..50_000).collect();
    let inner = 2 + 781 * 11 + (1 + 3);
    assert_eq!(long_list_map_bytes([(5, &full)]), 1 + 2 + inner);
}

#[test]
fn roaring_counts_the_smaller_of_plain_and_compressed_with_its_framing() {
    let runs: RoaringBitmap = (0..1000).collect();
    // One run container: cookie 4, run flags 1, description 4, run count 2, one run 4.
    let plain = 15;
    // key field 2 bytes (ledger 5), bitmap field 1 + 1 + len, as a repeated field 1 + 1 + ...
    let framed = |len: u64| 2 + (2 + 2 + len);
    assert_eq!(roaring_bytes([(5, &runs)], |b| b.len() + 5), framed(plain));
    assert_eq!(roaring_bytes([(5, &runs)], |_| 3), framed(3));
    assert_eq!(roaring_bytes([(5, &RoaringBitmap::new())], |_| 3), 0);
}
mod batch_size_tests {
    use ackstore::internals::ackset::pulsar::*;
    use ackstore::internals::position::Position;
    use roaring::RoaringBitmap;

    #[test]
    fn a_batch_deletion_index_info_counts_position_and_unacked_words() {
        // Ledger 3, entry 5, batch of 10 with messages 0..4 acked: unacked bits 4..10 make
        // the word 0b11_1111_0000 = 1008, a 2-byte varint. Position: tag, length, 2 + 2 bytes;
        // the word: tag + 2; the element: tag, length.
        let acked: RoaringBitmap = (0..4).collect();
        let bytes = batch_deletion_index_bytes(Position::new(3, 5), 10, &acked);
        assert_eq!(bytes, 1 + 1 + (1 + 1 + 4) + (1 + 2));
        // A batch of 64 with message 0 acked: the one word has bit 63 set, ten bytes.
        let acked: RoaringBitmap = [0].into_iter().collect();
        let bytes = batch_deletion_index_bytes(Position::new(3, 5), 64, &acked);
        assert_eq!(bytes, 1 + 1 + (1 + 1 + 4) + (1 + 10));
    }
}

//! Store catalogs and their chunk records: round trips at the documented size and offsets,
//! the tail, retired segments, seals, pins and damage.

use ackstore::internals::error::CorruptionKind;
use ackstore::internals::format::store::*;

/// A catalog of version 5 as decoded: two full chunks pinned, and its tail of two topics
/// (ids 1 and 2: decoding checks the tail alone, the chunks are added after).
fn sample() -> Catalog {
    Catalog {
        chunks: vec![
            ChunkPin {
                made_at: 7,
                crc: 0xdead_beef,
            },
            ChunkPin {
                made_at: 12,
                crc: 0x0102_0304,
            },
        ],
        next_topic_id: 1100,
        spaced_from: 2,
        ..sample_v4()
    }
}

/// Bytes of `sample_v4`'s two topics, inline.
const TOPICS_LEN: usize = 4 + 2 * TOPIC_ROW_HEADER_LEN + 19 + "../b\0é".len();

/// A catalog of version 4, its topics inline.
fn sample_v4() -> Catalog {
    Catalog {
        chunks: Vec::new(),
        store_id: 0xfeed,
        next_topic_id: 3,
        topics: vec![
            CatalogTopic {
                id: 1,
                name: "persistent://t/ns/a".into(),
            },
            CatalogTopic {
                id: 2,
                name: "../b\0é".into(),
            },
        ],
        seals: vec![
            CatalogSeal {
                segment: 3,
                len: 4096,
            },
            CatalogSeal {
                segment: 9,
                len: 12,
            },
        ],
        spaced_from: 2,
        segments: Some(vec![3, 7, 9]),
        retired_through: 2,
        closed: Some(CatalogSeal {
            segment: 9,
            len: 4000,
        }),
    }
}

/// Bytes of `sample_v4`'s catalog after its topics.
const TAIL_LEN: usize = 4 + 2 * SEAL_LEN + SPACED_FROM_LEN + 4 + 3 * 8 + 8 + 16;

#[test]
fn catalogs_round_trip_at_the_documented_size() {
    let c = sample();
    let bytes = c.encode();
    assert_eq!(
        bytes.len(),
        CATALOG_HEADER_LEN + 2 * CHUNK_PIN_LEN + TOPICS_LEN + TAIL_LEN
    );
    assert_eq!((CHUNK_PIN_LEN, CATALOG_HEADER_LEN), (12, 30));
    assert_eq!(bytes[8..10], CATALOG_VERSION.to_le_bytes());
    // The second pin, then the tail's count and its first topic's id.
    assert_eq!(bytes[42..50], 12u64.to_le_bytes());
    assert_eq!(bytes[50..54], 0x0102_0304u32.to_le_bytes());
    assert_eq!(bytes[54..58], 2u32.to_le_bytes());
    assert_eq!(bytes[58..66], 1u64.to_le_bytes());
    assert_eq!(Catalog::decode(&bytes).expect("decode"), c);
}

#[test]
fn a_catalog_tail_of_a_whole_chunk_is_refused() {
    let c = Catalog {
        chunks: Vec::new(),
        topics: topics(1..CHUNK_TOPICS as u64 + 1),
        next_topic_id: CHUNK_TOPICS as u64 + 1,
        ..sample()
    };
    assert_eq!(
        Catalog::decode(&c.encode()).unwrap_err().kind,
        CorruptionKind::InvalidField("catalog tail count")
    );
    let c = Catalog {
        topics: topics(1..CHUNK_TOPICS as u64),
        ..c
    };
    assert_eq!(Catalog::decode(&c.encode()).expect("decode"), c);
}

#[test]
fn version_4_catalogs_read_with_their_topics_inline() {
    let c = sample_v4();
    let bytes = c.encode_version(CATALOG_VERSION_V4);
    assert_eq!(bytes.len(), CATALOG_HEADER_LEN - 4 + TOPICS_LEN + TAIL_LEN);
    assert_eq!(Catalog::decode(&bytes).expect("decode"), c);
}

#[test]
fn a_chunk_pin_count_past_the_bytes_left_is_refused() {
    let mut bytes = sample().encode();
    bytes[26..30].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        Catalog::decode(&bytes).unwrap_err().kind,
        CorruptionKind::BadLength
    );
}

fn topics(ids: std::ops::Range<u64>) -> Vec<CatalogTopic> {
    ids.map(|id| CatalogTopic {
        id,
        name: format!("persistent://t/ns/topic-{id}"),
    })
    .collect()
}

#[test]
fn chunks_round_trip_at_the_documented_size_and_refuse_every_truncation() {
    let rows = topics(1..4);
    let bytes = TopicChunk::encode(2, &rows);
    let names: usize = rows.iter().map(|t| t.name.len()).sum();
    assert_eq!(
        bytes.len(),
        CHUNK_HEADER_LEN + rows.len() * TOPIC_ROW_HEADER_LEN + names
    );
    assert_eq!(
        TopicChunk::decode(&bytes).expect("decode"),
        TopicChunk {
            index: 2,
            topics: rows,
        }
    );
    for n in 0..bytes.len() {
        assert!(
            TopicChunk::decode(&bytes[..n]).is_err(),
            "prefix {n} accepted"
        );
    }
    let mut more = bytes.clone();
    more.push(0);
    assert!(
        TopicChunk::decode(&more).is_err(),
        "a byte after the last topic"
    );
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0xff;
        if let Ok(c) = TopicChunk::decode(&b) {
            assert_eq!(TopicChunk::encode(c.index, &c.topics), b);
        }
    }
}

#[test]
fn chunks_of_no_topics_or_of_more_than_a_full_chunk_are_refused() {
    let empty = TopicChunk::encode(0, &[]);
    assert_eq!(
        TopicChunk::decode(&empty).unwrap_err().kind,
        CorruptionKind::InvalidField("chunk topic count")
    );
    let over = TopicChunk::encode(0, &topics(1..CHUNK_TOPICS as u64 + 2));
    assert_eq!(
        TopicChunk::decode(&over).unwrap_err().kind,
        CorruptionKind::InvalidField("chunk topic count")
    );
    let full = TopicChunk::encode(0, &topics(1..CHUNK_TOPICS as u64 + 1));
    assert_eq!(
        TopicChunk::decode(&full).expect("full").topics.len(),
        CHUNK_TOPICS
    );
    let mut long = TopicChunk::encode(0, &topics(1..2));
    long[CHUNK_HEADER_LEN + 8..CHUNK_HEADER_LEN + 10].copy_from_slice(&1025u16.to_le_bytes());
    assert!(
        TopicChunk::decode(&long).is_err(),
        "a name past the longest"
    );
}

/// The pin of chunk record `bytes`, made at catalog version `made_at`.
fn pin(made_at: u64, bytes: &[u8]) -> ChunkPin {
    ChunkPin {
        made_at,
        crc: ackstore::internals::format::crc32(&[bytes]),
    }
}

const C: u64 = CHUNK_TOPICS as u64;

/// A catalog pinning two full chunks, with a tail of 3 topics, as decoded (its tail alone in
/// `topics`); and the chunks' bytes.
fn pinned() -> (Catalog, Vec<Vec<u8>>) {
    let first = TopicChunk::encode(0, &topics(1..C + 1));
    let second = TopicChunk::encode(1, &topics(C + 1..2 * C + 1));
    let c = Catalog {
        chunks: vec![pin(4, &first), pin(9, &second)],
        topics: topics(2 * C + 1..2 * C + 4),
        ..sample()
    };
    (c, vec![first, second])
}

#[test]
fn chunks_add_their_topics_in_pin_order_before_the_tail() {
    let (mut c, chunks) = pinned();
    let encoded = c.encode();
    assert_eq!(Catalog::decode(&encoded).expect("decode"), c);
    let tail = std::mem::take(&mut c.topics);
    for (k, bytes) in chunks.iter().enumerate() {
        c.add_chunk(k, bytes).expect("add");
    }
    c.topics.extend(tail);
    c.check_topics().expect("check");
    assert_eq!(c.topics, topics(1..2 * C + 4));
    assert_eq!(c.tail(), topics(2 * C + 1..2 * C + 4));
    // Loaded or not, the catalog's bytes are the pins and the tail.
    assert_eq!(c.encode(), encoded);
}

#[test]
fn a_chunk_swapped_with_a_sibling_a_partial_chunk_or_damaged_is_refused() {
    let (c, chunks) = pinned();
    let partial = TopicChunk::encode(1, &topics(C + 1..C + 4));
    let mut flipped = chunks[1].clone();
    flipped[CHUNK_HEADER_LEN + 12] ^= 0x01;
    let mut partial_pinned = c.clone();
    partial_pinned.chunks[1] = pin(9, &partial);
    for (what, mut c, k, bytes) in [
        ("sibling in the last place", c.clone(), 1, chunks[0].clone()),
        (
            "sibling in the first place",
            c.clone(),
            0,
            chunks[1].clone(),
        ),
        ("partial, its pin matching", partial_pinned, 1, partial),
        ("bit flip", c.clone(), 1, flipped),
        ("zeroed", c.clone(), 1, vec![0; chunks[1].len()]),
        (
            "truncated",
            c.clone(),
            1,
            chunks[1][..chunks[1].len() - 1].to_vec(),
        ),
    ] {
        c.topics.clear();
        if k == 1 {
            c.add_chunk(0, &chunks[0]).expect("first");
        }
        assert!(c.add_chunk(k, &bytes).is_err(), "{what} accepted");
    }
}

/// A chunk record is not a frame: it ends in its last topic's name, not in a CRC of its own, so
/// its pin (the CRC32 of every byte of it) differs with every change of its topics, to the last
/// byte of the last name. A chunk of the same index holding another store's topics, or one whose
/// last name differs in its last byte only, fails the pin; neither pin is the CRC32 residue of
/// a frame with its CRC appended (0x2144DF1C), which a pin over a whole frame would be.
#[test]
fn a_chunk_of_the_same_index_with_other_topics_fails_its_pin_to_the_last_byte() {
    let (c, chunks) = pinned();
    let mut sibling_topics = topics(1..C + 1);
    for t in &mut sibling_topics {
        t.name = t.name.replace("topic-", "other-");
    }
    let sibling = TopicChunk::encode(0, &sibling_topics);
    let mut last_byte = chunks[0].clone();
    *last_byte.last_mut().expect("a name") ^= 0x01;
    let last = TopicChunk::decode(&last_byte).expect("still a chunk");
    assert_eq!(last.index, 0);
    assert_ne!(last.topics, topics(1..C + 1));
    for (what, bytes) in [("another store's", sibling), ("its last byte", last_byte)] {
        let mut c = c.clone();
        c.topics.clear();
        assert_eq!(
            c.add_chunk(0, &bytes).unwrap_err().kind,
            CorruptionKind::ChecksumMismatch,
            "{what}"
        );
        assert_ne!(pin(4, &bytes), c.chunks[0], "{what}");
    }
    assert!(c.chunks.iter().all(|p| p.crc != 0x2144_DF1C));
}

#[test]
fn chunks_whose_topics_collide_with_the_tail_are_refused() {
    let first = TopicChunk::encode(0, &topics(1..C + 1));
    let mut c = Catalog {
        chunks: vec![pin(1, &first)],
        topics: Vec::new(),
        ..sample()
    };
    c.add_chunk(0, &first).expect("first");
    let mut repeated = topics(C + 1..C + 2);
    repeated[0].name = "persistent://t/ns/topic-1".into();
    c.topics.extend(repeated);
    assert_eq!(
        c.check_topics().unwrap_err().kind,
        CorruptionKind::InvalidField("topic name")
    );
}

#[test]
fn a_version_3_catalog_reads_as_retired_below_its_oldest_listed_segment() {
    let mut v3 = sample_v4().encode_version(CATALOG_VERSION_V4);
    v3.truncate(v3.len() - 8 - 16);
    v3[8..10].copy_from_slice(&CATALOG_VERSION_V3.to_le_bytes());
    let c = Catalog::decode(&v3).expect("decode");
    assert_eq!(c.retired_through, 2, "just below segment 3");
    assert_eq!(c.closed, None);
    assert_eq!(c.segments, sample().segments);
    let mut none_listed = sample_v4();
    none_listed.segments = Some(Vec::new());
    let mut v3 = none_listed.encode_version(CATALOG_VERSION_V4);
    v3.truncate(v3.len() - 8 - 16);
    v3[8..10].copy_from_slice(&CATALOG_VERSION_V3.to_le_bytes());
    assert_eq!(Catalog::decode(&v3).expect("decode").retired_through, 0);
}

#[test]
fn a_listed_segment_at_or_below_the_retired_one_is_refused() {
    for retired in [3, 4, 9] {
        let mut c = sample();
        c.retired_through = retired;
        assert_eq!(
            Catalog::decode(&c.encode()).unwrap_err().kind,
            CorruptionKind::InvalidField("retired_through"),
            "retired through {retired}"
        );
    }
}

#[test]
fn every_truncation_and_every_flipped_byte_is_an_error_or_a_valid_catalog() {
    for bytes in [
        sample().encode(),
        sample_v4().encode_version(CATALOG_VERSION_V4),
    ] {
        for n in 0..bytes.len() {
            assert!(Catalog::decode(&bytes[..n]).is_err(), "prefix {n} accepted");
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0xff;
            if let Ok(c) = Catalog::decode(&b) {
                let again = c.encode_version(u16::from_le_bytes([b[8], b[9]]));
                assert_eq!(Catalog::decode(&again).expect("re-decode"), c);
            }
        }
    }
}

#[test]
fn duplicate_names_and_ids_above_the_next_id_are_refused() {
    let mut c = sample_v4();
    c.topics[1].name = c.topics[0].name.clone();
    assert!(Catalog::decode(&c.encode_version(CATALOG_VERSION_V4)).is_err());
    let mut c = sample_v4();
    c.next_topic_id = 2;
    assert!(Catalog::decode(&c.encode_version(CATALOG_VERSION_V4)).is_err());
}

#[test]
fn seals_out_of_order_repeated_or_of_segment_zero_are_refused() {
    for seals in [[9, 3], [3, 3], [0, 3]] {
        let mut c = sample();
        c.seals[0].segment = seals[0];
        c.seals[1].segment = seals[1];
        assert!(Catalog::decode(&c.encode()).is_err(), "{seals:?}");
    }
}

#[test]
fn a_spaced_from_above_the_next_id_is_refused() {
    let mut c = sample();
    c.spaced_from = c.next_topic_id + 1;
    assert!(Catalog::decode(&c.encode()).is_err());
    c.spaced_from = c.next_topic_id;
    assert_eq!(Catalog::decode(&c.encode()).expect("decode"), c);
}

#[test]
fn segment_lists_out_of_order_or_naming_segment_zero_are_refused() {
    for list in [vec![3, 3], vec![9, 3], vec![0, 3]] {
        let mut c = sample();
        c.segments = Some(list.clone());
        assert!(Catalog::decode(&c.encode()).is_err(), "{list:?}");
    }
    let mut c = sample();
    c.segments = None;
    assert_eq!(Catalog::decode(&c.encode()).expect("unlisted"), c);
    c.segments = Some(Vec::new());
    assert_eq!(Catalog::decode(&c.encode()).expect("empty list"), c);
}

#[test]
fn a_version_2_catalog_reads_with_every_topic_flat() {
    let mut c = sample_v4();
    c.segments = None;
    let mut v2 = c.encode_version(CATALOG_VERSION_V4);
    // Version 2 is version 4 without `spaced_from`, the segment list, `retired_through`
    // and the close.
    v2.truncate(v2.len() - SPACED_FROM_LEN - 4 - 8 - 16);
    v2[8..10].copy_from_slice(&CATALOG_VERSION_V2.to_le_bytes());
    let read = Catalog::decode(&v2).expect("version 2");
    assert_eq!(read.spaced_from, c.next_topic_id);
    assert!(!read.is_spaced(1) && !read.is_spaced(2) && read.is_spaced(3));
    assert_eq!(read.segments, None, "every segment counts");
    assert_eq!(read.topics, c.topics);
    assert_eq!(read.seals, c.seals);
    let mut more = v2.clone();
    more.extend_from_slice(&0u64.to_le_bytes()[..7]);
    assert!(Catalog::decode(&more).is_err(), "bytes after a v2 catalog");
}

#[test]
fn a_version_1_catalog_reads_as_one_with_no_seals() {
    let mut c = sample_v4();
    c.seals.clear();
    c.spaced_from = c.next_topic_id;
    c.segments = None;
    c.retired_through = 0;
    c.closed = None;
    let mut v1 = c.encode_version(CATALOG_VERSION_V4);
    // Version 1 is version 4 without the seal count, `spaced_from`, the segment list,
    // `retired_through` and the close.
    v1.truncate(v1.len() - 4 - SPACED_FROM_LEN - 4 - 8 - 16);
    v1[8..10].copy_from_slice(&CATALOG_VERSION_V1.to_le_bytes());
    assert_eq!(Catalog::decode(&v1).expect("version 1"), c);
    let mut more = v1.clone();
    more.extend_from_slice(&0u32.to_le_bytes());
    assert!(Catalog::decode(&more).is_err(), "bytes after a v1 catalog");
}

//! Store catalogs: round trips at the documented size, retired segments, seals and damage.

use ackstore::internals::error::CorruptionKind;
use ackstore::internals::format::store::*;

fn sample() -> Catalog {
    Catalog {
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

#[test]
fn catalogs_round_trip_at_the_documented_size() {
    let c = sample();
    let bytes = c.encode();
    assert_eq!(
        bytes.len(),
        CATALOG_HEADER_LEN
            + 2 * TOPIC_ROW_HEADER_LEN
            + 19
            + "../b\0é".len()
            + 4
            + 2 * SEAL_LEN
            + SPACED_FROM_LEN
            + 4
            + 3 * 8
            + 8
            + 16
    );
    assert_eq!(Catalog::decode(&bytes).expect("decode"), c);
}

#[test]
fn a_version_3_catalog_reads_as_retired_below_its_oldest_listed_segment() {
    let mut v3 = sample().encode();
    v3.truncate(v3.len() - 8 - 16);
    v3[8..10].copy_from_slice(&CATALOG_VERSION_V3.to_le_bytes());
    let c = Catalog::decode(&v3).expect("decode");
    assert_eq!(c.retired_through, 2, "just below segment 3");
    assert_eq!(c.closed, None);
    assert_eq!(c.segments, sample().segments);
    let mut none_listed = sample();
    none_listed.segments = Some(Vec::new());
    let mut v3 = none_listed.encode();
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
    let bytes = sample().encode();
    for n in 0..bytes.len() {
        assert!(Catalog::decode(&bytes[..n]).is_err(), "prefix {n} accepted");
    }
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0xff;
        if let Ok(c) = Catalog::decode(&b) {
            assert_eq!(Catalog::decode(&c.encode()).expect("re-decode"), c);
        }
    }
}

#[test]
fn duplicate_names_and_ids_above_the_next_id_are_refused() {
    let mut c = sample();
    c.topics[1].name = c.topics[0].name.clone();
    assert!(Catalog::decode(&c.encode()).is_err());
    let mut c = sample();
    c.next_topic_id = 2;
    assert!(Catalog::decode(&c.encode()).is_err());
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
    let mut c = sample();
    c.segments = None;
    let mut v2 = c.encode();
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
    let mut c = sample();
    c.seals.clear();
    c.spaced_from = c.next_topic_id;
    c.segments = None;
    c.retired_through = 0;
    c.closed = None;
    let mut v1 = c.encode();
    // Version 1 is version 4 without the seal count, `spaced_from`, the segment list,
    // `retired_through` and the close.
    v1.truncate(v1.len() - 4 - SPACED_FROM_LEN - 4 - 8 - 16);
    v1[8..10].copy_from_slice(&CATALOG_VERSION_V1.to_le_bytes());
    assert_eq!(Catalog::decode(&v1).expect("version 1"), c);
    let mut more = v1.clone();
    more.extend_from_slice(&0u32.to_le_bytes());
    assert!(Catalog::decode(&more).is_err(), "bytes after a v1 catalog");
}

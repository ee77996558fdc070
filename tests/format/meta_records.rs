//! Topic and cursor records: every version's round trip, bounds and damage.

use ackstore::internals::error::CorruptionKind;
use ackstore::internals::error::CorruptionPlace;
use ackstore::internals::error::Error;
use ackstore::internals::format::Corruption;
use ackstore::internals::format::meta::*;
use ackstore::internals::format::store::CatalogSeal;
use ackstore::internals::position::Position;
use std::collections::BTreeMap;

fn corruption(err: Corruption) -> CorruptionKind {
    err.kind
}

fn sample_topic() -> TopicRecord {
    TopicRecord {
        next_ledger_id: 9,
        ledgers: vec![
            LedgerRecord {
                id: 3,
                entries: 50_000,
                first_index: 0,
                first_timestamp: 1_700_000_000_000,
                last_timestamp: 1_700_000_009_999,
            },
            LedgerRecord {
                id: 5,
                entries: 7,
                first_index: 50_000,
                first_timestamp: 1_700_000_010_000,
                last_timestamp: 1_700_000_010_006,
            },
        ]
        .into(),
        cursors: vec![CursorEntry {
            name: "c".into(),
            id: 1,
        }]
        .into(),
        next_cursor_id: 2,
        topic_id: 0,
        journal: None,
        store_id: 0,
    }
}

fn sample_cursor() -> CursorRecord {
    CursorRecord {
        name: "sub".into(),
        cursor_ledger: Some(12),
        mark_delete: Position::new(3, 41),
        epoch: 4,
        properties: BTreeMap::from([("k".to_string(), -1)]),
        identity: None,
    }
}

#[test]
fn encoded_sizes_match_the_documented_layout() {
    assert_eq!(HEADER_LEN, 16);
    assert_eq!(FRAME_OVERHEAD, 20);
    assert_eq!(LedgerRecord::default().encode().len(), 20 + 40);
    let entry = CursorEntry {
        name: "ab".into(),
        id: 7,
    };
    assert_eq!(entry.encode().len(), 20 + 8 + 4 + 2);
    assert_eq!(TopicRecord::default().encode().len(), 20 + 8 + 8 + 4 + 4);
    assert_eq!(sample_topic().encode().len(), 44 + 2 * 40 + (8 + 4 + 1));
    let bare = CursorRecord {
        name: "sub".into(),
        ..CursorRecord::default()
    };
    assert_eq!(bare.encode().len(), 20 + (4 + 3) + 9 + 16 + 8 + 4);
    assert_eq!(sample_cursor().encode().len(), 64 + (4 + 1 + 8));
    assert_eq!(encode_stored(1, b"xyz").len(), STORED_OVERHEAD + 3);
    assert_eq!(STORED_OVERHEAD, 28);
}

#[test]
fn identities_are_optional_trailers_that_round_trip() {
    let topic = TopicRecord {
        topic_id: 0xfeed,
        ..sample_topic()
    };
    let bytes = topic.encode();
    assert_eq!(bytes.len(), sample_topic().encode().len() + 8);
    assert_eq!(TopicRecord::decode(&bytes).unwrap(), topic);
    let cursor = CursorRecord {
        identity: Some(CursorIdentity {
            cursor_id: 3,
            topic_id: 0xfeed,
        }),
        ..sample_cursor()
    };
    let bytes = cursor.encode();
    assert_eq!(bytes.len(), sample_cursor().encode().len() + 16);
    assert_eq!(CursorRecord::decode(&bytes).unwrap(), cursor);
    // Records of earlier releases carry no trailer and decode without identity.
    assert_eq!(
        CursorRecord::decode(&sample_cursor().encode())
            .unwrap()
            .identity,
        None
    );
    cursor.check_identity(3, "sub", 0xfeed).unwrap();
    cursor.check_identity(3, "sub", 0).unwrap();
    for (id, name, topic) in [(4, "sub", 0xfeed), (3, "other", 0xfeed), (3, "sub", 0xbeef)] {
        assert!(matches!(
            cursor.check_identity(id, name, topic),
            Err(Error::Corrupted {
                place: CorruptionPlace::Record(_),
                ..
            })
        ));
    }
    sample_cursor().check_identity(9, "sub", 0xfeed).unwrap();
    assert!(sample_cursor().check_identity(9, "bus", 0xfeed).is_err());
}

#[test]
fn a_stores_topic_record_names_its_store_in_version_3_and_round_trips() {
    let topic = TopicRecord {
        topic_id: 0xfeed,
        store_id: 0xbeef,
        ..sample_topic()
    };
    let bytes = topic.encode();
    assert_eq!(&bytes[10..12], &TOPIC_STORE_VERSION.to_le_bytes());
    // The topic id, then the store id.
    assert_eq!(bytes.len(), sample_topic().encode().len() + 8 + 8);
    assert_eq!(TopicRecord::decode(&bytes).unwrap(), topic);
    // Version 3 always carries both ids: a zero store id, or a missing topic id, is damage.
    let body_end = bytes.len() - CRC_LEN;
    let mut zero_store = bytes[..body_end].to_vec();
    zero_store[body_end - 8..].fill(0);
    let crc = crc32fast::hash(&zero_store);
    zero_store.extend_from_slice(&crc.to_le_bytes());
    assert!(matches!(
        TopicRecord::decode(&zero_store),
        Err(c) if c.kind == CorruptionKind::InvalidField("store id")
    ));
    let no_topic_id = TopicRecord {
        topic_id: 0,
        ..topic.clone()
    };
    assert!(TopicRecord::decode(&no_topic_id.encode()).is_err());
    // A record naming no store keeps version 1, which earlier releases read.
    let alone = TopicRecord {
        store_id: 0,
        ..topic
    };
    assert_eq!(&alone.encode()[10..12], &FORMAT_VERSION.to_le_bytes());
    // Only the topic record has a version 3: a cursor record framed so is refused.
    let mut cursor = sample_cursor().encode();
    cursor[10..12].copy_from_slice(&TOPIC_STORE_VERSION.to_le_bytes());
    let covered = cursor.len() - CRC_LEN;
    let crc = crc32fast::hash(&cursor[..covered]);
    cursor[covered..].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(
        CursorRecord::decode(&cursor),
        Err(c) if c.kind == CorruptionKind::UnsupportedVersion(3)
    ));
}

#[test]
fn a_topic_record_listing_its_journal_is_version_2_and_round_trips() {
    let journal = HostedJournal {
        seals: vec![CatalogSeal {
            segment: 4,
            len: 4096,
        }],
        segments: vec![4, 5],
        retired_through: 3,
        closed: Some(CatalogSeal {
            segment: 5,
            len: 77,
        }),
    };
    let topic = TopicRecord {
        topic_id: 0xfeed,
        journal: Some(journal.clone()),
        ..sample_topic()
    };
    let bytes = topic.encode();
    assert_eq!(&bytes[10..12], &TOPIC_JOURNAL_VERSION.to_le_bytes());
    // The topic id, then seals, segments, retired_through and the close.
    let listing = (4 + 16) + (4 + 2 * 8) + 8 + 16;
    assert_eq!(bytes.len(), sample_topic().encode().len() + 8 + listing);
    assert_eq!(TopicRecord::decode(&bytes).unwrap(), topic);
    let empty = TopicRecord {
        topic_id: 1,
        journal: Some(HostedJournal::default()),
        ..TopicRecord::default()
    };
    assert_eq!(TopicRecord::decode(&empty.encode()).unwrap(), empty);
    // Version 2 always carries the topic id: none (or zero) is damage.
    let zero = TopicRecord {
        topic_id: 0,
        ..empty.clone()
    };
    assert!(TopicRecord::decode(&zero.encode()).is_err());
    // A listed segment at or below retired_through, segments out of order, and an
    // unlisted journal are damage.
    for bad in [
        HostedJournal {
            segments: vec![3],
            retired_through: 3,
            ..HostedJournal::default()
        },
        HostedJournal {
            segments: vec![5, 4],
            ..HostedJournal::default()
        },
    ] {
        let record = TopicRecord {
            journal: Some(bad),
            ..empty.clone()
        };
        assert!(TopicRecord::decode(&record.encode()).is_err());
    }
    // A record lists a journal or names a store: with both, the journal wins (version 2).
    let both = TopicRecord {
        store_id: 7,
        ..topic.clone()
    };
    assert_eq!(&both.encode()[10..12], &TOPIC_JOURNAL_VERSION.to_le_bytes());
    // Only the topic record has a version 2: a cursor record framed so is refused.
    let mut cursor = sample_cursor().encode();
    cursor[10..12].copy_from_slice(&TOPIC_JOURNAL_VERSION.to_le_bytes());
    let at = cursor.len() - 4;
    let crc = crc32fast::hash(&cursor[..at]);
    cursor[at..].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(
        corruption(CursorRecord::decode(&cursor).unwrap_err()),
        CorruptionKind::UnsupportedVersion(2)
    );
}

#[test]
fn frame_header_fields_sit_at_documented_offsets() {
    let bytes = sample_cursor().encode();
    assert_eq!(&bytes[..8], b"ACKSMETA");
    assert_eq!(&bytes[8..10], &4u16.to_le_bytes());
    assert_eq!(&bytes[10..12], &1u16.to_le_bytes());
    let body_len = u32::try_from(bytes.len() - 20).unwrap();
    assert_eq!(&bytes[12..16], &body_len.to_le_bytes());
    let (covered, crc) = bytes.split_at(bytes.len() - 4);
    assert_eq!(crc, crc32fast::hash(covered).to_le_bytes());
}

#[test]
fn every_record_round_trips() {
    let topic = sample_topic();
    assert_eq!(TopicRecord::decode(&topic.encode()).unwrap(), topic);
    assert_eq!(
        TopicRecord::decode(&TopicRecord::default().encode()).unwrap(),
        TopicRecord::default()
    );
    for ledger in topic.ledgers.iter() {
        assert_eq!(LedgerRecord::decode(&ledger.encode()).unwrap(), *ledger);
    }
    let entry = &topic.cursors.tail()[0];
    assert_eq!(CursorEntry::decode(&entry.encode()).unwrap(), *entry);
    let cursor = sample_cursor();
    assert_eq!(CursorRecord::decode(&cursor.encode()).unwrap(), cursor);
    let no_ledger = CursorRecord {
        cursor_ledger: None,
        ..cursor
    };
    assert_eq!(
        CursorRecord::decode(&no_ledger.encode()).unwrap(),
        no_ledger
    );
    assert_eq!(
        decode_stored(&encode_stored(9, b"abc")).unwrap(),
        (9, b"abc".to_vec())
    );
    assert_eq!(
        decode_stored(&encode_stored(0, b"")).unwrap(),
        (0, Vec::new())
    );
}

#[test]
fn cursor_names_are_kept_byte_for_byte_whatever_they_hold() {
    let names = [
        String::new(),
        "../../etc/passwd".to_string(),
        "a/b/c".to_string(),
        "..".to_string(),
        "nul\0inside\0".to_string(),
        "ünïcödé ✓ 游标".to_string(),
        "x".repeat(10 * 1024),
    ];
    for name in names {
        let record = CursorRecord {
            name: name.as_str().into(),
            properties: BTreeMap::from([(name.clone(), 7)]),
            ..CursorRecord::default()
        };
        assert_eq!(CursorRecord::decode(&record.encode()).unwrap().name, name);
        let entry = CursorEntry {
            name: name.as_str().into(),
            id: 3,
        };
        assert_eq!(*CursorEntry::decode(&entry.encode()).unwrap().name, *name);
        let topic = TopicRecord {
            cursors: vec![entry.clone(), entry].into(),
            ..TopicRecord::default()
        };
        assert_eq!(TopicRecord::decode(&topic.encode()).unwrap(), topic);
    }
}

#[test]
fn any_flipped_bit_is_a_checksum_mismatch() {
    let bytes = sample_topic().encode();
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut bad = bytes.clone();
            bad[i] ^= 1 << bit;
            let err = TopicRecord::decode(&bad).unwrap_err();
            assert_eq!(
                corruption(err),
                CorruptionKind::ChecksumMismatch,
                "byte {i}"
            );
        }
    }
}

#[test]
fn every_truncation_is_refused() {
    let bytes = sample_cursor().encode();
    for len in 0..bytes.len() {
        let kind = corruption(CursorRecord::decode(&bytes[..len]).unwrap_err());
        let expected = if len < FRAME_OVERHEAD {
            CorruptionKind::Truncated
        } else {
            CorruptionKind::ChecksumMismatch
        };
        assert_eq!(kind, expected, "length {len}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(CursorRecord::decode(&longer).is_err());
}

#[test]
fn a_record_of_another_kind_is_refused_by_name() {
    let err = TopicRecord::decode(&sample_cursor().encode()).unwrap_err();
    assert_eq!(
        err,
        Corruption::new(CorruptionKind::InvalidField("record kind"), MAGIC.len())
    );
    // The caller names the record it read the bytes as.
    let err = err.in_record("topic");
    assert!(matches!(
        &err,
        Error::Corrupted { place: CorruptionPlace::Record(record), kind: CorruptionKind::InvalidField("record kind") }
            if record == "topic"
    ));
    assert!(err.to_string().contains("metadata record `topic`"));
}

/// Builds a frame around `body` with a valid CRC, to reach the checks behind it.
fn framed(kind: u16, version: u16, body_len: u32, body: &[u8]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&body_len.to_le_bytes());
    out.extend_from_slice(body);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

#[test]
fn checksummed_but_malformed_frames_name_what_is_wrong() {
    let topic_kind = Kind::Topic as u16;
    let mut wrong_magic = framed(topic_kind, 1, 0, &[]);
    wrong_magic[0] = b'X';
    let crc_at = wrong_magic.len() - 4;
    let crc = crc32fast::hash(&wrong_magic[..crc_at]);
    wrong_magic[crc_at..].copy_from_slice(&crc.to_le_bytes());
    let cases: Vec<(Vec<u8>, CorruptionKind)> = vec![
        (wrong_magic, CorruptionKind::BadMagic),
        (
            framed(topic_kind, 6, 24, &[0; 24]),
            CorruptionKind::UnsupportedVersion(6),
        ),
        (
            framed(topic_kind, 1, 25, &[0; 24]),
            CorruptionKind::BadLength,
        ),
        // A body too short for its fixed fields.
        (framed(topic_kind, 1, 8, &[0; 8]), CorruptionKind::Truncated),
        // A trailer too short for a topic id.
        (
            framed(topic_kind, 1, 25, &[0; 25]),
            CorruptionKind::Truncated,
        ),
        // A topic id of zero (it is written only when non-zero).
        (
            framed(topic_kind, 1, 32, &[0; 32]),
            CorruptionKind::InvalidField("topic id"),
        ),
        // Trailing bytes after the topic id.
        (
            framed(topic_kind, 1, 33, &{
                let mut body = [0; 33];
                body[24] = 1;
                body
            }),
            CorruptionKind::BadLength,
        ),
    ];
    for (bytes, expected) in cases {
        assert_eq!(
            corruption(TopicRecord::decode(&bytes).unwrap_err()),
            expected
        );
    }
}

#[test]
fn counts_larger_than_the_bytes_left_are_refused_before_allocating() {
    let mut body = vec![0; 16];
    body.extend_from_slice(&u32::MAX.to_le_bytes());
    let len = u32::try_from(body.len()).unwrap();
    let bytes = framed(Kind::Topic as u16, 1, len, &body);
    assert_eq!(
        corruption(TopicRecord::decode(&bytes).unwrap_err()),
        CorruptionKind::BadLength
    );
    // A name length past the end.
    let mut body = 7u64.to_le_bytes().to_vec();
    body.extend_from_slice(&1000u32.to_le_bytes());
    body.extend_from_slice(b"abc");
    let len = u32::try_from(body.len()).unwrap();
    let bytes = framed(Kind::CursorEntry as u16, 1, len, &body);
    assert_eq!(
        corruption(CursorEntry::decode(&bytes).unwrap_err()),
        CorruptionKind::BadLength
    );
}

#[test]
fn non_canonical_fields_are_refused_so_decoding_is_one_to_one() {
    let good = sample_cursor().encode();
    let body = &good[HEADER_LEN..good.len() - CRC_LEN];
    let len = u32::try_from(body.len()).unwrap();
    let flag_at = 4 + 3;
    let mut absent_with_id = body.to_vec();
    absent_with_id[flag_at] = 0;
    let mut flag_two = body.to_vec();
    flag_two[flag_at] = 2;
    for bad in [absent_with_id, flag_two] {
        let bytes = framed(Kind::Cursor as u16, 1, len, &bad);
        assert_eq!(
            corruption(CursorRecord::decode(&bytes).unwrap_err()),
            CorruptionKind::InvalidField("cursor ledger")
        );
    }
    // Two properties with the same key.
    let mut dup = body[..body.len() - 4 - (4 + 1 + 8)].to_vec();
    dup.extend_from_slice(&2u32.to_le_bytes());
    for _ in 0..2 {
        dup.extend_from_slice(&1u32.to_le_bytes());
        dup.push(b'k');
        dup.extend_from_slice(&5i64.to_le_bytes());
    }
    let len = u32::try_from(dup.len()).unwrap();
    let bytes = framed(Kind::Cursor as u16, 1, len, &dup);
    assert_eq!(
        corruption(CursorRecord::decode(&bytes).unwrap_err()),
        CorruptionKind::InvalidField("property keys out of order")
    );
    // A name that is not UTF-8.
    let mut body = 1u64.to_le_bytes().to_vec();
    body.extend_from_slice(&1u32.to_le_bytes());
    body.push(0xff);
    let len = u32::try_from(body.len()).unwrap();
    let bytes = framed(Kind::CursorEntry as u16, 1, len, &body);
    assert_eq!(
        corruption(CursorEntry::decode(&bytes).unwrap_err()),
        CorruptionKind::InvalidField("cursor name")
    );
}

#[test]
fn frames_above_the_maximum_are_refused() {
    let big = encode_stored(1, &vec![0; MAX_RECORD_BYTES]);
    assert_eq!(
        decode_stored(&big).unwrap_err().kind,
        CorruptionKind::BadLength
    );
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    fn ledger() -> impl Strategy<Value = LedgerRecord> {
        any::<[u64; 5]>().prop_map(|[id, entries, first_index, t0, t1]| LedgerRecord {
            id,
            entries,
            first_index,
            first_timestamp: t0,
            last_timestamp: t1,
        })
    }

    fn cursor_entry() -> impl Strategy<Value = CursorEntry> {
        (any::<String>(), any::<u64>()).prop_map(|(name, id)| CursorEntry {
            name: name.into(),
            id,
        })
    }

    proptest! {
        #[test]
        fn topic_records_round_trip(
            next_ledger_id: u64,
            next_cursor_id: u64,
            ledgers in proptest::collection::vec(ledger(), 0..20),
            cursors in proptest::collection::vec(cursor_entry(), 0..20),
            topic_id: u64,
            store_id: u64,
        ) {
            // A record naming a store always carries its topic id (both non-zero).
            let topic_id = if store_id != 0 { topic_id.max(1) } else { topic_id };
            let record = TopicRecord { next_ledger_id, ledgers: ledgers.into(), cursors: cursors.into(), next_cursor_id, topic_id, journal: None, store_id };
            let bytes = record.encode();
            prop_assert_eq!(TopicRecord::decode(&bytes).unwrap(), record);
        }

        #[test]
        fn cursor_records_round_trip(
            name: String,
            cursor_ledger: Option<u64>,
            ledger_id: u64,
            entry_id: u64,
            epoch: u64,
            properties in proptest::collection::btree_map(any::<String>(), any::<i64>(), 0..10),
            identity: Option<(u64, u64)>,
        ) {
            let record = CursorRecord {
                name,
                cursor_ledger,
                mark_delete: Position::new(ledger_id, entry_id),
                epoch,
                properties,
                identity: identity.map(|(cursor_id, topic_id)| CursorIdentity { cursor_id, topic_id }),
            };
            prop_assert_eq!(CursorRecord::decode(&record.encode()).unwrap(), record);
        }

        #[test]
        fn arbitrary_bodies_never_panic_and_what_decodes_re_encodes_identically(
            kind in 0u16..7,
            body in proptest::collection::vec(
                prop_oneof![3 => 0u8..3, 1 => any::<u8>()], 0..200),
        ) {
            // A valid frame around random bytes, so the body parsers are what is tested.
            let len = u32::try_from(body.len()).unwrap();
            let bytes = framed(kind, FORMAT_VERSION, len, &body);
            if let Ok(r) = TopicRecord::decode(&bytes) { prop_assert_eq!(r.encode(), bytes.clone()); }
            if let Ok(r) = LedgerRecord::decode(&bytes) { prop_assert_eq!(r.encode(), bytes.clone()); }
            if let Ok(r) = CursorEntry::decode(&bytes) { prop_assert_eq!(r.encode(), bytes.clone()); }
            if let Ok(r) = CursorRecord::decode(&bytes) { prop_assert_eq!(r.encode(), bytes.clone()); }
            if let Ok((v, p)) = decode_stored(&bytes) { prop_assert_eq!(encode_stored(v, &p), bytes); }
        }
    }
}

/// A table of `n` cursors whose full chunks are written (as the owner's write does): the chunk
/// records' bytes by index.
fn chunked_table(n: u64) -> (CursorTable, Vec<Vec<u8>>) {
    chunked(
        (0..n)
            .map(|id| CursorEntry {
                name: format!("sub-{id}").into(),
                id,
            })
            .collect(),
    )
}

/// A table of `entries` whose full chunks are written (as the owner's write does, each pinned
/// by a version of its own): the chunk records' bytes by position.
fn chunked<E: ChunkEntry>(entries: Vec<E>) -> (ChunkTable<E>, Vec<Vec<u8>>) {
    let mut table = ChunkTable::from(entries);
    table.fill_chunks();
    let chunks: Vec<(usize, Vec<u8>)> = table
        .unpinned()
        .map(|(k, c)| (k, encode_chunk((table.first() + k) as u32, &c.entries)))
        .collect();
    for (k, bytes) in &chunks {
        let pin = ackstore::internals::format::store::ChunkPin {
            made_at: 7 + *k as u64,
            crc: chunk_crc(bytes),
        };
        table.pin(*k, pin);
    }
    (table, chunks.into_iter().map(|(_, b)| b).collect())
}

/// `n` ledgers of 10 entries each, ids from 1.
fn ledgers(n: u64) -> Vec<LedgerRecord> {
    (0..n)
        .map(|k| LedgerRecord {
            id: k + 1,
            entries: 10,
            first_index: 10 * k,
            first_timestamp: k,
            last_timestamp: k,
        })
        .collect()
}

/// From 257 ledgers the record is written in version 5 (the layout of 1 to 4 inside: by the
/// host, and 4 when the cursor table has chunks too), its full chunks of 256 ledgers pinned and
/// the rest inline, the newest ledger always among them; it decodes to its pins and tail, and
/// with its chunk records added to the record it was written from. A trim that empties the
/// first chunk drops it (the first index rises, the others keep their records); one that cuts
/// into it writes it again. With 256 ledgers or fewer, the earlier version.
#[test]
fn a_topic_of_more_than_a_chunk_of_ledgers_is_version_5_and_round_trips_with_its_chunks() {
    let n = 2 * LEDGER_CHUNK_ENTRIES as u64 + 1;
    let (table, chunks) = chunked(ledgers(n));
    assert_eq!(
        (table.chunks().len(), table.tail().len(), chunks.len()),
        (2, 1, 2)
    );
    let (cursors, cursor_chunks) = chunked_table(CURSOR_CHUNK_ENTRIES as u64);
    let hosts = [
        (FORMAT_VERSION, 0, None, CursorTable::default()),
        (
            TOPIC_JOURNAL_VERSION,
            0,
            Some(HostedJournal::default()),
            CursorTable::default(),
        ),
        (TOPIC_STORE_VERSION, 9, None, CursorTable::default()),
        (TOPIC_CHUNKED_VERSION, 9, None, cursors),
    ];
    for (layout, store_id, journal, cursors) in hosts {
        let topic = TopicRecord {
            next_ledger_id: n + 1,
            ledgers: table.clone(),
            cursors,
            topic_id: 0xfeed,
            store_id,
            journal,
            ..sample_topic()
        };
        let bytes = topic.encode();
        assert_eq!(&bytes[10..12], &TOPIC_LEDGERS_CHUNKED_VERSION.to_le_bytes());
        assert_eq!(&bytes[32..34], &layout.to_le_bytes());
        let mut decoded = TopicRecord::decode(&bytes).unwrap();
        assert_eq!(decoded.encode(), bytes, "layout {layout}");
        assert_eq!(decoded.ledgers.tail(), table.tail());
        for (k, chunk) in chunks.iter().enumerate() {
            decoded.ledgers.add_chunk(k, chunk).unwrap();
        }
        for (k, chunk) in cursor_chunks.iter().enumerate() {
            if layout == TOPIC_CHUNKED_VERSION {
                decoded.cursors.add_chunk(k, chunk).unwrap();
            }
        }
        assert_eq!(decoded, topic, "layout {layout}");
        assert!(decoded.ledgers.iter().eq(&ledgers(n)));
        // Inline, the same ledgers are the earlier version, every one in it.
        let inline = TopicRecord {
            ledgers: topic.ledgers.iter().copied().collect::<Vec<_>>().into(),
            ..topic.clone()
        };
        let earlier = inline.encode();
        assert_eq!(&earlier[10..12], &layout.to_le_bytes());
        let decoded = TopicRecord::decode(&earlier).unwrap();
        assert_eq!(decoded.ledgers, inline.ledgers);
        assert_eq!(decoded.encode(), earlier);
    }
    // A trim that empties the first chunk drops it: the second keeps its record and its pin,
    // under its index (1).
    let mut trimmed = table.clone();
    let cut = LEDGER_CHUNK_ENTRIES as u64 + 1;
    trimmed.retain(|l| l.id > cut - 1);
    assert_eq!(trimmed.first(), 1);
    assert_eq!(trimmed.chunks(), &table.chunks()[1..]);
    assert_eq!(
        trimmed.pinned_records().collect::<Vec<_>>(),
        vec![Some(format!("{LEDGER_CHUNK_PREFIX}1-8"))]
    );
    let topic = TopicRecord {
        ledgers: trimmed.clone(),
        ..sample_topic()
    };
    let mut decoded = TopicRecord::decode(&topic.encode()).unwrap();
    assert!(
        decoded.ledgers.add_chunk(0, &chunks[0]).is_err(),
        "a sibling"
    );
    decoded.ledgers.add_chunk(0, &chunks[1]).unwrap();
    assert_eq!(decoded, topic);
    // One that cuts into a chunk unpins it, to be written again.
    trimmed.retain(|l| l.id > cut);
    assert_eq!(trimmed.unpinned().count(), 1);
    // A trim of every chunk leaves the earlier version, the first index back to 0.
    trimmed.retain(|l| l.id == n);
    assert_eq!((trimmed.first(), trimmed.chunks().len()), (0, 0));
    // At 256 ledgers, no chunk yet.
    let (small, none) = chunked(ledgers(LEDGER_CHUNK_ENTRIES as u64));
    assert!(none.is_empty());
    let bytes = TopicRecord {
        ledgers: small,
        ..sample_topic()
    }
    .encode();
    assert_eq!(&bytes[10..12], &FORMAT_VERSION.to_le_bytes());
}

/// The checks of version 5's ledger part and of a ledger chunk record, each naming its field.
#[test]
fn malformed_ledger_chunks_and_pins_are_refused_by_name() {
    let (table, chunks) = chunked(ledgers(LEDGER_CHUNK_ENTRIES as u64 + 1));
    let (index, entries) = decode_chunk::<LedgerRecord>(&chunks[0]).unwrap();
    assert_eq!((index, entries.len()), (0, LEDGER_CHUNK_ENTRIES));
    assert_eq!(encode_chunk(index, &entries), chunks[0]);
    assert_eq!(
        decode_chunk::<LedgerRecord>(&encode_chunk::<LedgerRecord>(0, &[]))
            .map(drop)
            .map_err(corruption),
        Err(CorruptionKind::InvalidField("chunk ledger count"))
    );
    // A cursor chunk is not a ledger chunk (its kind), nor the reverse.
    let (_, cursor_chunks) = chunked_table(CURSOR_CHUNK_ENTRIES as u64);
    assert_eq!(
        decode_chunk::<LedgerRecord>(&cursor_chunks[0])
            .map(drop)
            .map_err(corruption),
        Err(CorruptionKind::InvalidField("record kind"))
    );
    assert_eq!(
        decode_chunk::<CursorEntry>(&chunks[0])
            .map(drop)
            .map_err(corruption),
        Err(CorruptionKind::InvalidField("record kind"))
    );
    let topic = TopicRecord {
        ledgers: table,
        cursors: CursorTable::default(),
        ..sample_topic()
    };
    // Ledgers first: the layout sits at 16, then the first index and the pins.
    pins_are_checked(
        &topic,
        (TOPIC_LEDGERS_CHUNKED_VERSION, 16, &[0, 5]),
        (
            16 + 2 + 4 + 4,
            LEDGER_CHUNK_ENTRIES + 1,
            "ledger tail count",
        ),
    );
}

/// From 512 cursors the table is written in version 4 (the layout of 1, 2 or 3 inside, by the
/// host), its full chunks pinned and the rest inline; it decodes to its pins and tail, and with
/// its chunk records added to the table it was written from. Below 512, the earlier version.
#[test]
fn a_cursor_table_of_a_chunk_or_more_is_version_4_and_round_trips_with_its_chunks() {
    let (table, chunks) = chunked_table(2 * CURSOR_CHUNK_ENTRIES as u64 + 3);
    assert_eq!(
        (table.chunks().len(), table.tail().len(), chunks.len()),
        (2, 3, 2)
    );
    let hosts = [
        (FORMAT_VERSION, 0, None),
        (TOPIC_JOURNAL_VERSION, 0, Some(HostedJournal::default())),
        (TOPIC_STORE_VERSION, 9, None),
    ];
    for (layout, store_id, journal) in hosts {
        let topic = TopicRecord {
            cursors: table.clone(),
            next_cursor_id: 2 * CURSOR_CHUNK_ENTRIES as u64 + 3,
            topic_id: 0xfeed,
            store_id,
            journal,
            ..sample_topic()
        };
        let bytes = topic.encode();
        assert_eq!(&bytes[10..12], &TOPIC_CHUNKED_VERSION.to_le_bytes());
        let mut decoded = TopicRecord::decode(&bytes).unwrap();
        assert_eq!(decoded.encode(), bytes, "layout {layout}");
        assert_eq!(decoded.cursors.tail(), table.tail());
        for (k, chunk) in chunks.iter().enumerate() {
            decoded.cursors.add_chunk(k, chunk).unwrap();
        }
        assert_eq!(decoded, topic, "layout {layout}");
        // Inline, the same table is the earlier version, every cursor in it.
        let inline = TopicRecord {
            cursors: table.iter().cloned().collect::<Vec<_>>().into(),
            ..topic.clone()
        };
        let earlier = inline.encode();
        assert_eq!(&earlier[10..12], &layout.to_le_bytes());
        assert_eq!(TopicRecord::decode(&earlier).unwrap(), inline);
    }
    // A chunk's record is pinned by its frame's own CRC: another chunk, or the same one with
    // other bytes, is refused by the pin.
    let mut decoded = TopicRecord::decode(
        &TopicRecord {
            cursors: table.clone(),
            ..sample_topic()
        }
        .encode(),
    )
    .unwrap();
    assert!(decoded.cursors.add_chunk(0, &chunks[1]).is_err());
    let mut other = chunks[0].clone();
    let at = other.len() / 2;
    other[at] ^= 1;
    assert!(decoded.cursors.add_chunk(0, &other).is_err());
    assert!(decoded.cursors.add_chunk(2, &chunks[0]).is_err());
}

/// The checks of version 4's cursor part and of a chunk record, each naming its field.
#[test]
fn malformed_cursor_chunks_and_pins_are_refused_by_name() {
    let (table, chunks) = chunked_table(CURSOR_CHUNK_ENTRIES as u64 + 1);
    let (index, entries) = decode_chunk::<CursorEntry>(&chunks[0]).unwrap();
    assert_eq!((index, entries.len()), (0, CURSOR_CHUNK_ENTRIES));
    assert_eq!(encode_chunk(index, &entries), chunks[0]);
    let empty = encode_chunk::<CursorEntry>(0, &[]);
    assert_eq!(
        decode_chunk::<CursorEntry>(&empty)
            .map(drop)
            .map_err(corruption),
        Err(CorruptionKind::InvalidField("chunk cursor count"))
    );
    let mut too_many = entries.clone();
    too_many.push(entries[0].clone());
    assert_eq!(
        decode_chunk::<CursorEntry>(&encode_chunk(0, &too_many))
            .map(drop)
            .map_err(corruption),
        Err(CorruptionKind::InvalidField("chunk cursor count"))
    );
    // A record of this table: ledgers none, so the layout sits at 16 + 24.
    let topic = TopicRecord {
        cursors: table,
        ledgers: LedgerTable::default(),
        ..sample_topic()
    };
    pins_are_checked(
        &topic,
        (TOPIC_CHUNKED_VERSION, 20, &[4]),
        (20 + 2 + 4, CURSOR_CHUNK_ENTRIES, "cursor tail count"),
    );
}

/// The checks of the pins of `topic` (one chunk, pinned, then a tail) in `version`, whose
/// layout is at `layout_at` of the body (each of `bad_layouts` refused) and its first pin at
/// `pin_at`: an emptied chunk's pin with a CRC, no chunk, and a tail of `full` (a chunk of its
/// own, reported as `tail_field`) are each refused naming the field.
fn pins_are_checked(
    topic: &TopicRecord,
    (version, layout_at, bad_layouts): (u16, usize, &[u16]),
    (pin_at, full, tail_field): (usize, usize, &'static str),
) {
    let bytes = topic.encode();
    assert_eq!(&bytes[10..12], &version.to_le_bytes());
    let body = bytes[16..bytes.len() - 4].to_vec();
    let field = |body: &[u8]| {
        TopicRecord::decode(&framed(1, version, body.len() as u32, body))
            .map(drop)
            .map_err(corruption)
    };
    assert!(field(&body).is_ok());
    for layout in bad_layouts {
        let mut bad = body.clone();
        bad[layout_at..layout_at + 2].copy_from_slice(&layout.to_le_bytes());
        assert_eq!(
            field(&bad),
            Err(CorruptionKind::InvalidField("topic record layout"))
        );
    }
    // An emptied chunk's pin carries no CRC.
    let mut bad = body.clone();
    bad[pin_at..pin_at + 8].copy_from_slice(&0u64.to_le_bytes());
    assert_eq!(field(&bad), Err(CorruptionKind::InvalidField("chunk pin")));
    // No chunk: the earlier version is written instead.
    let mut bad = body[..pin_at - 4].to_vec();
    bad.extend_from_slice(&0u32.to_le_bytes());
    bad.extend_from_slice(&body[pin_at + 12..]);
    assert_eq!(
        field(&bad),
        Err(CorruptionKind::InvalidField("chunk count"))
    );
    // A full tail is a chunk of its own.
    let tail_at = pin_at + 12;
    let mut bad = body.clone();
    bad[tail_at..tail_at + 4].copy_from_slice(&(full as u32).to_le_bytes());
    assert_eq!(field(&bad), Err(CorruptionKind::InvalidField(tail_field)));
}

/// Removing the first `n` entries, against a model (the entries after them): the chunks not
/// reached keep their pins and shared entries, the one cut into is unpinned, the emptied ones
/// are dropped (ledgers: the first index rises) or kept emptied (cursors: their places stay).
#[test]
fn removing_the_first_entries_keeps_the_rest_and_the_pins_it_can() {
    let all = ledgers(3 * LEDGER_CHUNK_ENTRIES as u64 + 9);
    let (table, _) = chunked(all.clone());
    for n in [0, 1, 255, 256, 257, 600, 768, 770, 777, 800] {
        let mut cut = table.clone();
        cut.remove_first(n);
        let rest = all.get(n..).unwrap_or_default();
        assert!(cut.iter().eq(rest), "n {n}");
        let whole = (n / LEDGER_CHUNK_ENTRIES).min(3);
        let kept = &table.chunks()[whole..];
        assert_eq!(
            cut.first(),
            if kept.is_empty() { 0 } else { whole },
            "n {n}"
        );
        let into = usize::from(n % LEDGER_CHUNK_ENTRIES != 0 && whole < 3);
        assert_eq!(cut.unpinned().count(), into, "n {n}");
        assert_eq!(&cut.chunks()[into..], &kept[into..], "n {n}");
    }
    let (table, _) = chunked_table(2 * CURSOR_CHUNK_ENTRIES as u64 + 3);
    let mut cut = table.clone();
    cut.remove_first(CURSOR_CHUNK_ENTRIES + 2);
    assert_eq!(cut.chunks().len(), 2);
    assert!(cut.chunks()[0].entries.is_empty() && cut.chunks()[0].pin.is_none());
    assert_eq!(cut.chunks()[1].entries.len(), CURSOR_CHUNK_ENTRIES - 2);
    assert!(cut.iter().eq(table.iter().skip(CURSOR_CHUNK_ENTRIES + 2)));
}

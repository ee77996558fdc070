//! Raw bytes into every metadata decoder (the topic, ledger and cursor records, the chunk records
//! of a topic's cursor table and of its ledgers, the stored frame, and the store catalog and its chunk records): no
//! input panics, and whatever decodes re-encodes to exactly the bytes it came from (a topic
//! record of version 4 or 5 from its chunk pins and its inline tails; a catalog of version 5 from its chunk pins and its inline
//! tail; one of version 1 to 3 re-encodes as version 4, its topics inline, which decodes to the
//! same catalog). Each input is tried as is and with a valid CRC appended, so the body
//! parsers behind the checksum are reached too.

#![no_main]

use ackstore::internals::format::meta::{
    CursorEntry, CursorRecord, LedgerRecord, TopicRecord, decode_chunk, decode_stored,
    encode_chunk, encode_stored,
};
use ackstore::internals::format::store::{
    CATALOG_VERSION, CATALOG_VERSION_V4, Catalog, TopicChunk,
};
use libfuzzer_sys::fuzz_target;

fn check_every_decoder(bytes: &[u8]) {
    if let Ok(record) = TopicRecord::decode(bytes) {
        assert_eq!(record.encode(), bytes);
    }
    if let Ok(record) = LedgerRecord::decode(bytes) {
        assert_eq!(record.encode(), bytes);
    }
    if let Ok(record) = CursorEntry::decode(bytes) {
        assert_eq!(record.encode(), bytes);
    }
    if let Ok(record) = CursorRecord::decode(bytes) {
        assert_eq!(record.encode(), bytes);
    }
    if let Ok((index, entries)) = decode_chunk::<CursorEntry>(bytes) {
        assert_eq!(encode_chunk(index, &entries), bytes);
    }
    if let Ok((index, entries)) = decode_chunk::<LedgerRecord>(bytes) {
        assert_eq!(encode_chunk(index, &entries), bytes);
    }
    if let Ok((version, payload)) = decode_stored(bytes) {
        assert_eq!(encode_stored(version, &payload), bytes);
    }
    if let Ok(catalog) = Catalog::decode(bytes) {
        let version = bytes.get(8..10);
        if version == Some(&CATALOG_VERSION.to_le_bytes()[..]) {
            assert_eq!(catalog.encode(), bytes);
        } else {
            let encoded = catalog.encode_version(CATALOG_VERSION_V4);
            if version == Some(&CATALOG_VERSION_V4.to_le_bytes()[..]) {
                assert_eq!(encoded, bytes);
            }
            assert_eq!(Catalog::decode(&encoded).ok(), Some(catalog));
        }
    }
    if let Ok(chunk) = TopicChunk::decode(bytes) {
        assert_eq!(TopicChunk::encode(chunk.index, &chunk.topics), bytes);
    }
}

fuzz_target!(|data: &[u8]| {
    check_every_decoder(data);
    let mut with_crc = data.to_vec();
    with_crc.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
    check_every_decoder(&with_crc);
});

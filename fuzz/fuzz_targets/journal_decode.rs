//! Arbitrary journal segments: the record decoder and the journal's recovery.
//!
//! Bytes into the record decoder, the delta decoder and the partition payload decoder (raw, and
//! as the payload of every delta or partition record found): they never panic, and a record,
//! delta or partition payload they accept encodes back to exactly its bytes (a partition's
//! bounds, when read without decoding, are its set's smallest and largest offsets). Bytes as a
//! segment file (as they are, and behind a valid segment header) into `Journal::open` on the
//! in-memory disk: it never panics, and every partition (its bounds and its set) and every
//! snapshot of every cursor it recovers loads or fails with an error.
#![no_main]

use std::sync::Arc;

use ackstore::internals::format::journal::{
    JournalLoc, RecordKind, SEGMENT_VERSION, decode_delta, decode_partition_payload,
    decode_record, encode_delta, encode_partition_payload, encode_record, encode_segment_header,
};
use ackstore::internals::journal::{Journal, JournalConfig, Seal, segment_name};
use ackstore::{MemStorage, Storage};
use libfuzzer_sys::fuzz_target;

fn open_segment(bytes: &[u8]) {
    let disk = MemStorage::new();
    let Ok(file) = disk.create(&segment_name(1)) else {
        return;
    };
    if file
        .write_all_at(bytes, 0)
        .and_then(|()| file.sync_data())
        .is_err()
    {
        return;
    }
    if let Ok(journal) = Journal::open(Arc::new(disk), JournalConfig::default(), Seal::default()) {
        for cursor in journal.cursors() {
            if let Some((_, rows)) = journal.committed(cursor) {
                for (key, _) in rows {
                    let _ = journal.stored_bounds(cursor, key, &mut None);
                    let _ = journal.load(cursor, key);
                }
            }
            let _ = journal.read_snapshot(cursor, |snapshot| Ok(snapshot.ranges().count()));
        }
    }
}

/// A delta the decoder accepts encodes back to exactly its bytes.
fn delta_round_trip(payload: &[u8]) {
    let Ok(delta) = decode_delta(payload, &[], SEGMENT_VERSION) else {
        return;
    };
    let removed: Vec<(u64, u64)> = delta.removed().collect();
    assert_eq!(removed.len(), delta.removed_len());
    let removed_batch: Vec<(u64, u64)> = delta.removed_batch().collect();
    assert_eq!(removed_batch.len(), delta.removed_batch_len());
    let base = JournalLoc::pack(delta.base).expect("an unpacked location packs again");
    let mut again = Vec::new();
    encode_delta(
        &mut again,
        (base, delta.base_crc),
        &removed,
        &removed_batch,
        delta.marker_bytes,
    );
    assert_eq!(again, payload);
}

/// A partition payload (this build's version) that decodes to a set encodes back to exactly
/// its bytes, and bounds read without decoding are the set's.
fn partition_round_trip(payload: &[u8]) {
    let Ok(partition) = decode_partition_payload(payload, SEGMENT_VERSION) else {
        return;
    };
    let bounds = partition.bounds();
    let Ok(bitmap) = partition.bitmap() else {
        return;
    };
    assert_eq!(encode_partition_payload(partition.key, &bitmap), payload);
    if let Ok(Some((lo, hi))) = bounds {
        assert_eq!((bitmap.min(), bitmap.max()), (Some(lo), Some(hi)));
    }
}

fuzz_target!(|data: &[u8]| {
    delta_round_trip(data);
    partition_round_trip(data);
    let mut at = 0;
    while let Ok(Some((record, len))) = decode_record(data.get(at..).unwrap_or_default()) {
        let mut again = Vec::new();
        encode_record(&mut again, &record).expect("a record that decodes encodes again");
        assert_eq!(again, data[at..at + len]);
        match record.kind {
            RecordKind::Delta => delta_round_trip(record.payload),
            RecordKind::Partition => partition_round_trip(record.payload),
            _ => {}
        }
        at += len;
    }
    open_segment(data);
    let mut framed = encode_segment_header(1, None).to_vec();
    framed.extend_from_slice(data);
    open_segment(&framed);
});

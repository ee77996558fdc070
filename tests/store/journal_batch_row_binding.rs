//! A marker's batch row names exactly one batch record: two batch records of one cursor with
//! the same key, the same partial-entry count and the same frame length (the cursor's
//! batch-index acks flushed, a seek clearing them, other messages of the same entry acked and
//! flushed), exchanged in the segment or one copied over the other, each frame left whole so
//! that only the row can tell them apart. The open refuses the store (`Corrupted`: the records
//! lie below the synced length) and `ackstore verify` reports the damage; neither hands back
//! the acks the seek cleared.

use crate::support;

use std::collections::BTreeSet;
use std::path::Path;

use ackstore::internals::journal::{JournalConfig, segment_name};
use ackstore::{
    AppendMeta, Cursor, CursorConfig, InitialPosition, LedgerConfig, ManagedLedger, Position,
    Store, StoreConfig,
};
use support::topic::at;

/// Messages of every entry.
const MESSAGES: u32 = 4;

/// Acknowledged messages: (entry, index).
type Messages = BTreeSet<(Position, u32)>;

fn config() -> StoreConfig {
    StoreConfig {
        ledger: LedgerConfig {
            cursor: CursorConfig::default(),
            ..LedgerConfig::default()
        },
        journal: JournalConfig {
            segment_bytes: 64 << 20,
        },
        flusher_threads: 0,
        ..StoreConfig::default()
    }
}

fn earliest(topic: &ManagedLedger) -> ackstore::Result<Cursor> {
    topic.open_cursor("sub", at(InitialPosition::Earliest, false))
}

/// The store in `dir` after: two entries of [`MESSAGES`] messages; message 0 of the second
/// acknowledged and flushed (batch record A); a seek to the first entry (every ack cleared);
/// message 1 of the second acknowledged and flushed (batch record B: the same partition, one
/// partial entry, a frame of the same length); closed. Returns the entries and the messages
/// acknowledged at the end.
fn store_with_two_batch_records(dir: &Path) -> (Vec<Position>, Messages) {
    let store = Store::open(dir, config()).expect("open");
    let topic = store.topic("t").expect("topic");
    let meta = AppendMeta {
        num_messages: MESSAGES,
        timestamp: 1000,
    };
    let entries: Vec<Position> = (0..2)
        .map(|_| topic.append_with(b"batch", meta).expect("append"))
        .collect();
    topic.sync().expect("sync");
    let c = earliest(&topic).expect("cursor");
    c.ack_batch_index(entries[1], 0, MESSAGES).expect("ack");
    c.flush().expect("flush");
    c.seek(entries[0]).expect("seek");
    c.ack_batch_index(entries[1], 1, MESSAGES).expect("ack");
    c.flush().expect("flush");
    drop((c, topic));
    store.close().expect("close");
    let acked = [(entries[1], 1)].into();
    (entries, acked)
}

/// The acknowledged messages of cursor `sub` as the store in `dir` opens them.
fn opened_state(dir: &Path, entries: &[Position]) -> ackstore::Result<Messages> {
    let store = Store::open(dir, config())?;
    let topic = store.topic("t")?;
    let c = earliest(&topic)?;
    let out = support::topic::acked_messages(&c, entries.iter().map(|&pos| (pos, MESSAGES)))?;
    drop((c, topic));
    store.close()?;
    Ok(out)
}

/// `bytes` with the frames at `x` and `y` (of the same length) exchanged, or, with `copy`,
/// `x`'s frame written over `y`'s.
fn moved(bytes: &[u8], (x, y): (usize, usize), len: usize, copy: bool) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out[y..y + len].copy_from_slice(&bytes[x..x + len]);
    if !copy {
        out[x..x + len].copy_from_slice(&bytes[y..y + len]);
    }
    out
}

#[test]
fn batch_records_of_one_partition_and_count_exchanged_or_copied_are_refused_by_open_and_verify() {
    let dir = tempfile::tempdir().expect("dir");
    let (entries, acked) = store_with_two_batch_records(dir.path());
    assert_eq!(opened_state(dir.path(), &entries).expect("opens"), acked);
    assert_eq!(support::mutate::verify_checked(dir.path()).code, Some(0));
    let segment = dir.path().join(segment_name(1));
    let bytes = std::fs::read(&segment).expect("segment");
    let records = support::journal::batch_records(&bytes);
    let [(a, len), (b, b_len)] = records[..] else {
        panic!("two batch records: {records:?}");
    };
    assert_eq!(len, b_len, "frames of the same length");
    assert_ne!(
        bytes[a..a + len],
        bytes[b..b + len],
        "two different records"
    );
    let cleared: Messages = [(entries[1], 0)].into();
    for (what, pair, copy) in [
        ("the two records exchanged", (a, b), false),
        ("the first record over the second", (a, b), true),
        ("the second record over the first", (b, a), true),
    ] {
        std::fs::write(&segment, moved(&bytes, pair, len, copy)).expect("damage");
        let verdict = support::mutate::verify_checked(dir.path());
        let opened = opened_state(dir.path(), &entries);
        if let Ok(state) = &opened {
            assert!(
                state.is_disjoint(&cleared),
                "{what}: the acks the seek cleared came back: {state:?}"
            );
        }
        assert!(
            matches!(opened, Err(ackstore::Error::Corrupted { .. })),
            "{what}: {opened:?}"
        );
        assert_eq!(verdict.code, Some(1), "{what}: {verdict:?}");
    }
    std::fs::write(&segment, &bytes).expect("restore");
    assert_eq!(opened_state(dir.path(), &entries).expect("opens"), acked);
}

//! Version 7 partition records (key, cardinality and set under the frame's one CRC), damaged
//! below the synced length the ways a disk or a misplaced write damages them: a bit flipped in
//! every byte, the segment cut inside a record, and whole records swapped or copied over
//! others, each frame left whole so that only a marker's row can tell: a sibling partition of
//! the same cursor, the same partition of an older tick, the same partition of another cursor
//! (as it was, or carried in this cursor's frame under a recomputed CRC). The open refuses each
//! (`Corrupted`) or, where the damage leaves every frame a committed state names intact,
//! recovers exactly the flushed state; the offline check agrees with the open every time.

use std::collections::BTreeMap;
use std::sync::Arc;

use ackstore::internals::ackset::PartitionKey;
use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::format::journal::{
    Record, RecordKind, SEGMENT_VERSION, decode_partition_payload, decode_record, encode_record,
};
use ackstore::internals::journal::index::CursorId;
use ackstore::internals::journal::{CursorFlush, Journal, JournalConfig, Seal, segment_name};
use ackstore::{MemStorage, Storage};
use roaring::RoaringBitmap;

use crate::support;
use support::mutate::{RecordAt, records_of};

pub(super) const A: CursorId = CursorId {
    topic: 1,
    cursor: 1,
};
pub(super) const B: CursorId = CursorId {
    topic: 1,
    cursor: 2,
};

pub(super) fn key(ledger_id: u64) -> PartitionKey {
    PartitionKey {
        ledger_id,
        chunk: 0,
    }
}

pub(super) fn set(offset: u32) -> RoaringBitmap {
    [offset].into_iter().collect()
}

/// What a journal holds: every committed cursor's partitions and their sets.
pub(super) type State = BTreeMap<CursorId, BTreeMap<PartitionKey, RoaringBitmap>>;

pub(super) fn flush(cursor: CursorId, written: Vec<(PartitionKey, RoaringBitmap)>) -> CursorFlush {
    CursorFlush {
        cursor,
        name: 0,
        state: PersistedState::default(),
        live: vec![key(1), key(2)],
        written,
    }
}

/// Two ticks: cursor A writes partitions 1 and 2, cursor B partitions 1 and 2 (sets of one
/// entry each, so every partition record has the same length); then A rewrites partition 1 with
/// another set of one entry. Returns the segment's bytes and the state they hold.
fn journal() -> (Vec<u8>, State) {
    let bytes = segment_of(&[
        vec![
            flush(A, vec![(key(1), set(5)), (key(2), set(6))]),
            flush(B, vec![(key(1), set(9)), (key(2), set(8))]),
        ],
        vec![flush(A, vec![(key(1), set(7))])],
    ]);
    let truth = [
        (A, [(key(1), set(7)), (key(2), set(6))].into()),
        (B, [(key(1), set(9)), (key(2), set(8))].into()),
    ]
    .into();
    (bytes, truth)
}

/// The bytes of segment 1 of a journal that committed `ticks`, one commit each.
pub(super) fn segment_of(ticks: &[Vec<CursorFlush>]) -> Vec<u8> {
    let disk = MemStorage::new();
    let journal = Journal::open(
        Arc::new(disk.clone()),
        JournalConfig::default(),
        Seal::default(),
    )
    .unwrap();
    for tick in ticks {
        journal.commit(tick).unwrap();
    }
    disk.live_bytes(&segment_name(1)).unwrap()
}

/// What the open of a journal of segment `bytes` recovers (every partition loaded), after
/// checking that the offline check agrees with it.
pub(super) fn opened(bytes: &[u8], what: &str) -> ackstore::Result<State> {
    let image = MemStorage::new();
    let f = image.create(&segment_name(1)).unwrap();
    f.write_all_at(bytes, 0).unwrap();
    f.sync_data().unwrap();
    let checked = ackstore::internals::journal::check(&image, Seal::default());
    let opened = Journal::open(Arc::new(image), JournalConfig::default(), Seal::default())
        .and_then(|journal| {
            let mut state = State::new();
            for cursor in journal.cursors() {
                let (_, rows) = journal.committed(cursor).expect("committed");
                for (key, _) in rows {
                    let bitmap = journal.load(cursor, key)?.expect("a committed partition");
                    state.entry(cursor).or_default().insert(key, bitmap);
                }
            }
            Ok(state)
        });
    assert_eq!(
        checked.is_ok(),
        opened.is_ok(),
        "{what}: check {checked:?}, open {opened:?}"
    );
    opened
}

/// Refused as damage, or recovered to exactly `truth`.
fn refused_or_exact(bytes: &[u8], truth: &State, what: &str) {
    match opened(bytes, what) {
        Err(ackstore::Error::Corrupted { .. }) => {}
        Err(e) => panic!("{what}: {e}"),
        Ok(state) => assert_eq!(&state, truth, "{what}"),
    }
}

fn refused(bytes: &[u8], what: &str) {
    let got = opened(bytes, what);
    assert!(
        matches!(got, Err(ackstore::Error::Corrupted { .. })),
        "{what}: {got:?}"
    );
}

/// The segment's partition records: each with its cursor, key and set.
fn partitions(bytes: &[u8]) -> Vec<(RecordAt, PartitionKey, RoaringBitmap)> {
    records_of(bytes)
        .into_iter()
        .filter(|r| r.kind == RecordKind::Partition)
        .map(|r| {
            let (rec, _) = decode_record(&bytes[r.offset..]).unwrap().unwrap();
            let p = decode_partition_payload(rec.payload, SEGMENT_VERSION).unwrap();
            let bitmap = p.bitmap().unwrap();
            (r, p.key, bitmap)
        })
        .collect()
}

/// The partition record of `cursor`, `key` holding `set`.
fn find(bytes: &[u8], cursor: CursorId, key: PartitionKey, set: &RoaringBitmap) -> RecordAt {
    partitions(bytes)
        .into_iter()
        .find(|(r, k, s)| r.cursor == cursor.cursor && *k == key && s == set)
        .map(|(r, _, _)| r)
        .expect("the record")
}

/// `bytes` with the frames `x` and `y` (of the same length) exchanged, or, with `copy`, with
/// `x`'s frame written over `y`'s.
fn moved(bytes: &[u8], x: &RecordAt, y: &RecordAt, copy: bool) -> Vec<u8> {
    assert_eq!(x.len, y.len, "frames of the same length");
    let mut out = bytes.to_vec();
    out[y.offset..y.offset + y.len].copy_from_slice(&bytes[x.offset..x.offset + x.len]);
    if !copy {
        out[x.offset..x.offset + x.len].copy_from_slice(&bytes[y.offset..y.offset + y.len]);
    }
    out
}

#[test]
fn the_undamaged_journal_recovers_its_state_and_holds_version_7_partition_records() {
    let (bytes, truth) = journal();
    assert_eq!(&bytes[8..10], &SEGMENT_VERSION.to_le_bytes());
    assert_eq!(partitions(&bytes).len(), 5);
    assert_eq!(opened(&bytes, "intact").unwrap(), truth);
}

#[test]
fn a_partition_record_swapped_or_copied_over_another_below_the_synced_length_is_refused() {
    let (bytes, _) = journal();
    let a1_old = find(&bytes, A, key(1), &set(5));
    let a1_new = find(&bytes, A, key(1), &set(7));
    let a2 = find(&bytes, A, key(2), &set(6));
    let b1 = find(&bytes, B, key(1), &set(9));
    let b2 = find(&bytes, B, key(2), &set(8));
    let cases = [
        ("siblings of one cursor exchanged", &a1_old, &a2, false),
        ("a sibling copied over the other", &a2, &a1_old, true),
        (
            "the older tick's copy and the newer exchanged",
            &a1_old,
            &a1_new,
            false,
        ),
        (
            "the older tick's copy over the newer",
            &a1_old,
            &a1_new,
            true,
        ),
        (
            "the newer copy over the older tick's",
            &a1_new,
            &a1_old,
            true,
        ),
        (
            "another cursor's partition over the same partition",
            &b2,
            &a2,
            true,
        ),
        (
            "the same partition of two cursors exchanged",
            &b1,
            &a1_new,
            false,
        ),
        (
            "another cursor's other partition over this one",
            &b1,
            &a2,
            true,
        ),
    ];
    for (what, x, y, copy) in cases {
        refused(&moved(&bytes, x, y, copy), what);
    }
}

/// Another cursor's partition record carried in this cursor's frame: the frame's CRC
/// recomputed over this cursor's ids, so only the row's payload CRC can tell.
#[test]
fn another_cursors_partition_under_this_cursors_ids_and_a_recomputed_crc_is_refused() {
    let (bytes, _) = journal();
    for (from, to) in [
        (
            find(&bytes, B, key(2), &set(8)),
            find(&bytes, A, key(2), &set(6)),
        ),
        (
            find(&bytes, A, key(1), &set(5)),
            find(&bytes, A, key(1), &set(7)),
        ),
    ] {
        let (theirs, _) = decode_record(&bytes[from.offset..]).unwrap().unwrap();
        let (ours, _) = decode_record(&bytes[to.offset..]).unwrap().unwrap();
        let mut framed = Vec::new();
        encode_record(
            &mut framed,
            &Record {
                payload: theirs.payload,
                ..ours
            },
        )
        .unwrap();
        let mut out = bytes.clone();
        out[to.offset..to.offset + to.len].copy_from_slice(&framed);
        refused(
            &out,
            &format!(
                "the payload at {} under the ids at {}",
                from.offset, to.offset
            ),
        );
    }
}

#[test]
fn a_bit_flipped_in_any_byte_of_a_partition_record_is_refused_or_recovers_the_state() {
    let (bytes, truth) = journal();
    for (r, _, _) in partitions(&bytes) {
        for at in r.offset..r.offset + r.len {
            for bit in [0, 3, 7] {
                let mut out = bytes.clone();
                out[at] ^= 1 << bit;
                let what = format!("byte {at} bit {bit} of the record at {}", r.offset);
                // Past the length field a flip fails the frame's CRC: the marker naming the
                // record does not commit, below the synced length.
                if at >= r.offset + 4 {
                    refused(&out, &what);
                } else {
                    refused_or_exact(&out, &truth, &what);
                }
            }
        }
    }
}

#[test]
fn the_segment_cut_inside_a_partition_record_is_refused() {
    let (bytes, _) = journal();
    for (r, _, _) in partitions(&bytes) {
        for cut in r.offset + 1..r.offset + r.len {
            refused(&bytes[..cut], &format!("cut at {cut}"));
        }
    }
}

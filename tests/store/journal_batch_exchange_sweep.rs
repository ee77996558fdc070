//! Every pair of batch records of one cursor, partition and partial-entry count with frames of
//! one length in a store's journal, exchanged or either copied over the other: the open and
//! `ackstore verify` agree (the open refuses with `Corrupted` exactly when verify reports
//! damage), and a store that still opens holds exactly the state it held undamaged (the
//! damage changed nothing a marker or delta names: two records of the same bytes). The store
//! is written by this build: a cursor's batch-index acks in one entry flushed, cleared by a
//! seek and acked again twelve times, each flush a batch record of the same partition, count
//! and length, whose acknowledged message differs from the one before.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;

use ackstore::internals::format::cursor::{BatchPartition, peek_batch_entry};
use ackstore::internals::format::journal::{RecordKind, decode_record};
use ackstore::internals::journal::JournalConfig;
use ackstore::{
    AppendMeta, CursorConfig, CursorOptions, InitialPosition, LedgerConfig, Position, Store,
    StoreConfig,
};
use support::topic::at;

/// Messages of every entry.
const MESSAGES: u32 = 8;

/// A cursor's state as the store opens it: mark-delete, acked ranges, partial entries.
type CursorState = (
    Option<Position>,
    Vec<(Position, Position)>,
    Vec<BatchPartition>,
);

/// Every cursor of a topic by name.
type State = BTreeMap<String, CursorState>;

/// The store's settings, its journal's segments of `segment_bytes`.
fn config(segment_bytes: u64) -> StoreConfig {
    StoreConfig {
        ledger: LedgerConfig {
            cursor: CursorConfig::default(),
            ..LedgerConfig::default()
        },
        journal: JournalConfig { segment_bytes },
        flusher_threads: 0,
        ..StoreConfig::default()
    }
}

/// The state of every cursor of topic `topic` (of every topic: `None`) as the store in `dir`
/// opens it, by topic and cursor name.
fn opened_state(dir: &Path, topic: Option<&str>) -> ackstore::Result<State> {
    let store = Store::open(dir, config(JournalConfig::default().segment_bytes))?;
    let names = topic.map_or_else(|| store.topic_names(), |t| vec![t.to_string()]);
    let mut out = State::new();
    for topic in names {
        let t = store.topic(&topic)?;
        for name in t.cursor_names() {
            let c = t.open_cursor(&name, CursorOptions::default())?;
            let state = (
                c.mark_delete_position()?,
                c.acked_ranges()?,
                c.batch_index_partitions()?,
            );
            out.insert(format!("{topic} {name}"), state);
        }
    }
    store.close()?;
    Ok(out)
}

/// A batch record in the journal: segment file, frame offset, frame length.
type At = (String, usize, usize);

/// What the records of a group share: topic id, cursor id, ledger, chunk, partial entries,
/// frame length.
type GroupKey = (u64, u64, u64, u64, u32, usize);

/// The batch records of the journal in `dir` grouped by cursor, partition, partial-entry count
/// and frame length (groups of two or more only), each with its segment's version.
fn batch_groups(dir: &Path) -> Vec<Vec<(At, u16)>> {
    let mut groups: BTreeMap<GroupKey, Vec<(At, u16)>> = BTreeMap::new();
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("the directory lists")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("journal-") && n.ends_with(".seg"))
        .collect();
    names.sort();
    for name in names {
        let bytes = std::fs::read(dir.join(&name)).expect("segment");
        let version = u16::from_le_bytes([bytes[8], bytes[9]]);
        for r in support::mutate::records_of(&bytes) {
            if r.kind != RecordKind::Batch {
                continue;
            }
            let Ok(Some((rec, _))) = decode_record(&bytes[r.offset..]) else {
                continue;
            };
            let Ok((ledger, chunk, entries)) = peek_batch_entry(rec.payload) else {
                continue;
            };
            groups
                .entry((r.topic, r.cursor, ledger, chunk, entries, r.len))
                .or_default()
                .push(((name.clone(), r.offset, r.len), version));
        }
    }
    groups.into_values().filter(|g| g.len() > 1).collect()
}

/// The frame at `x` read from `from` written at `y` in `to` (both copies of one directory).
fn put(from: &Path, to: &Path, x: &At, y: &At) {
    let src = std::fs::read(from.join(&x.0)).expect("segment");
    let path = to.join(&y.0);
    let mut dst = std::fs::read(&path).expect("segment");
    dst[y.1..y.1 + y.2].copy_from_slice(&src[x.1..x.1 + x.2]);
    std::fs::write(&path, dst).expect("damage");
}

/// What the sweep found: damages tried, refused by both, harmless to both.
#[derive(Debug, Default)]
struct Sweep {
    tried: usize,
    refused: usize,
    harmless: usize,
}

/// Applies every exchange and copy of two records of a group (at most `most` damages) to a
/// copy of `dir` and checks the open of topic `topic` and verify against `want`, the state of
/// the undamaged directory. A store that opens after a damage touching only records of
/// version 8 segments must hold `want`; one touching a version 5 to 7 segment only agree with
/// verify (a row of those versions tells such records apart by location alone).
fn sweep(dir: &Path, topic: Option<&str>, want: &State, most: usize) -> Sweep {
    let mut out = Sweep::default();
    let work = tempfile::tempdir().expect("dir");
    for group in batch_groups(dir) {
        for (i, (x, vx)) in group.iter().enumerate() {
            for (y, vy) in &group[i + 1..] {
                let moves: [(&str, &[(&At, &At)]); 3] = [
                    ("exchanged", &[(x, y), (y, x)]),
                    ("first over second", &[(x, y)]),
                    ("second over first", &[(y, x)]),
                ];
                for (what, moves) in moves {
                    if out.tried == most {
                        return out;
                    }
                    out.tried += 1;
                    let copy = work.path().join(out.tried.to_string());
                    support::tmpfs::copy_dir(dir, &copy);
                    for (from, to) in moves {
                        put(dir, &copy, from, to);
                    }
                    let what = format!("{x:?} and {y:?} {what}");
                    let code = support::mutate::verify_checked(&copy).code;
                    match opened_state(&copy, topic) {
                        Err(ackstore::Error::Corrupted { .. }) => {
                            assert_eq!(code, Some(1), "{what}: open refused, verify {code:?}");
                            out.refused += 1;
                        }
                        Err(e) => panic!("{what}: {e}"),
                        Ok(state) => {
                            assert_eq!(code, Some(0), "{what}: opens, verify {code:?}");
                            if *vx >= 8 && *vy >= 8 {
                                assert_eq!(&state, want, "{what}");
                            }
                            out.harmless += 1;
                        }
                    }
                    std::fs::remove_dir_all(&copy).expect("clean up");
                }
            }
        }
    }
    out
}

/// The store in `dir` after: entry 0 appended (of [`MESSAGES`] messages); `rounds` times,
/// message `i` acknowledged and flushed, then a seek to the start (every ack cleared) except
/// at the last round. Each flush writes a batch record of partition 1:0 with one partial entry
/// of one message, a frame of one length.
fn store_with_batch_records(dir: &Path, rounds: u32) {
    let store = Store::open(dir, config(JournalConfig::default().segment_bytes)).expect("open");
    let topic = store.topic("t").expect("topic");
    let meta = AppendMeta {
        num_messages: MESSAGES,
        timestamp: 1000,
    };
    let first = topic.append_with(b"batch", meta).expect("append");
    topic.append_with(b"batch", meta).expect("append");
    topic.sync().expect("sync");
    let c = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .expect("cursor");
    for i in 0..rounds {
        c.ack_batch_index(first, i % MESSAGES, MESSAGES)
            .expect("ack");
        c.flush().expect("flush");
        if i + 1 < rounds {
            c.seek(first).expect("seek");
        }
    }
    drop((c, topic));
    store.close().expect("close");
}

#[test]
fn every_exchange_of_two_batch_records_of_one_partition_is_refused_by_open_and_verify_or_changes_nothing()
 {
    let dir = tempfile::tempdir().expect("dir");
    store_with_batch_records(dir.path(), 12);
    let want = opened_state(dir.path(), Some("t")).expect("opens");
    let acked = &want["t sub"].2;
    assert_eq!(
        acked.len(),
        1,
        "one partition of partial entries: {acked:?}"
    );
    let found = sweep(dir.path(), Some("t"), &want, 200);
    // Twelve records in one group: 66 pairs, three damages each.
    assert_eq!(found.tried, 198, "{found:?}");
    // Rounds i and i + 8 (i below 4) acknowledge the same message: four pairs of records of
    // the same bytes, whose exchange changes nothing. Every other damage is refused.
    assert_eq!(found.harmless, 12, "{found:?}");
}

//! Crashes of a managed ledger: a power cut after every storage operation of a workload that
//! appends across ledgers, acks, flushes, trims, creates and deletes cursors; and the open-time
//! reconciliation rules on real files (orphan ledgers, missing ledgers).

use crate::support;

use std::sync::Arc;

use ackstore::internals::log::{ledger_file_name, parse_ledger_file_name};
use ackstore::{Error, Position, Result};
use ackstore::{InitialPosition, ManagedLedger};
use ackstore::{MemStorage, Storage};
use support::crash::cut_everywhere;
use support::topic::{append_n, at, config};

const PER_LEDGER: u64 = 3;

/// What the workload was told before the power went off.
#[derive(Debug, Default)]
struct Truth {
    /// Entries appended (in order), and how many of them a returned `sync` made durable.
    appended: Vec<Position>,
    synced: usize,
    /// The cursor's mark-delete as acknowledged, and as last flushed.
    acked: Option<Position>,
    flushed: Option<Position>,
    /// Ledgers a trim may have deleted (the trim started).
    trim_started: bool,
}

fn workload(disk: &MemStorage, truth: &mut Truth) -> Result<()> {
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(PER_LEDGER))?;
    let append = |topic: &ManagedLedger, n: u64, truth: &mut Truth| -> Result<()> {
        for _ in 0..n {
            let at = truth.appended.len() as u64;
            truth.appended.push(topic.append_with(
                format!("m{at}").as_bytes(),
                ackstore::AppendMeta {
                    num_messages: 1,
                    timestamp: 100 + at,
                },
            )?);
        }
        Ok(())
    };
    append(&topic, 4, truth)?;
    topic.sync()?;
    truth.synced = truth.appended.len();
    let cursor = topic.open_cursor("a", at(InitialPosition::Earliest, false))?;
    cursor.ack_cumulative(truth.appended[2])?;
    truth.acked = Some(truth.appended[2]);
    cursor.flush()?;
    truth.flushed = truth.acked;
    append(&topic, 4, truth)?;
    topic.sync()?;
    truth.synced = truth.appended.len();
    truth.trim_started = true;
    topic.trim_consumed()?;
    let other = topic.open_cursor("b/../b", at(InitialPosition::Latest, true))?;
    other.ack(truth.appended[7])?;
    topic.delete_cursor("b/../b")?;
    cursor.ack(truth.appended[4])?;
    cursor.ack(truth.appended[3])?;
    truth.acked = Some(truth.appended[4]);
    cursor.close()?;
    truth.flushed = truth.acked;
    append(&topic, 2, truth)?;
    topic.close()?;
    truth.synced = truth.appended.len();
    Ok(())
}

/// Reopens `image` and checks it against what the workload was told.
fn check(image: &MemStorage, truth: &Truth, n: u64) {
    let topic = ManagedLedger::open_with_storage(Arc::new(image.clone()), config(PER_LEDGER))
        .unwrap_or_else(|e| panic!("reopen after cut at {n}: {e}"));
    // Every synced entry is there, unchanged, unless a trim may have removed it (only entries
    // at or before the flushed mark-delete can be trimmed).
    for (i, &pos) in truth.appended.iter().enumerate().take(truth.synced) {
        match topic.read(pos) {
            Ok(e) => {
                assert_eq!(e.payload, format!("m{i}").as_bytes(), "cut at {n}");
                assert_eq!(e.index, i as u64, "cut at {n}");
            }
            Err(Error::NoSuchEntry(_)) => assert!(
                truth.trim_started && truth.flushed.is_some_and(|f| pos <= f),
                "synced entry {pos} lost after cut at {n}"
            ),
            Err(e) => panic!("cut at {n}: {e}"),
        }
    }
    let mut listed: Vec<u64> = topic.ledgers().iter().map(|l| l.id).collect();
    for name in topic.cursor_names() {
        let c = topic
            .open_cursor(&name, at(InitialPosition::Latest, false))
            .unwrap();
        listed.extend(c.stats().unwrap().persist.cursor_ledger);
    }
    listed.sort_unstable();
    // No ledger file outside the records: orphans are gone (and opening a cursor, which moves
    // its state to a fresh cursor ledger, deleted the one it recovered from).
    let files: Vec<u64> = image
        .list()
        .unwrap()
        .iter()
        .filter_map(|f| parse_ledger_file_name(f))
        .collect();
    assert_eq!(files, listed, "cut at {n}");
    // Indexes continue from the last entry kept.
    let expected_index = topic.next_index();
    if let Some(last) = topic.last_position() {
        assert_eq!(topic.read(last).unwrap().index + 1, expected_index);
    }
    // The cursor's mark-delete: never beyond what was acked, never behind what was flushed.
    if topic.cursor_names().contains(&"a".to_owned()) {
        let c = topic
            .open_cursor("a", at(InitialPosition::Latest, false))
            .unwrap();
        let mark = c.mark_delete_position().unwrap();
        assert!(
            mark <= truth.acked,
            "cut at {n}: {mark:?} > {:?}",
            truth.acked
        );
        assert!(
            mark >= truth.flushed,
            "cut at {n}: {mark:?} < {:?}",
            truth.flushed
        );
    } else {
        assert_eq!(truth.flushed, None, "cut at {n}: a flushed cursor vanished");
    }
    let next = topic.append(b"after").unwrap();
    topic.sync().unwrap();
    assert_eq!(topic.read(next).unwrap().index, expected_index);
    topic.close().unwrap();
}

#[test]
fn a_power_cut_after_any_operation_reopens_consistently() {
    let clean = cut_everywhere(
        |disk| {
            let mut truth = Truth::default();
            let outcome = workload(disk, &mut truth);
            (truth, outcome)
        },
        |disk, cut, (truth, outcome)| {
            let n = cut.n;
            assert_eq!(outcome.is_ok(), !cut.interrupted(), "cut at {n}");
            check(&disk.durable_image(), &truth, n);
            // Everything written reached the platters, but only durable names survive.
            check(&disk.crash_image(|_, _, live| live.to_vec()), &truth, n);
        },
    );
    clean.result.1.unwrap();
    let total = clean.total;
    assert!(
        total > 40,
        "the workload exercises enough operations ({total})"
    );
}

#[test]
fn an_orphan_ledger_file_is_deleted_and_a_missing_recorded_one_is_an_error_on_real_files() {
    let dir = tempfile::tempdir().unwrap();
    let topic = ManagedLedger::open(dir.path(), config(2)).unwrap();
    let p = append_n(&topic, 5);
    topic.close().unwrap();
    let ids: Vec<u64> = {
        let t = ManagedLedger::open(dir.path(), config(2)).unwrap();
        let ids = t.ledgers().iter().map(|l| l.id).collect();
        t.close().unwrap();
        ids
    };

    // A ledger file no record references, above every ledger the record lists: a creation cut
    // short, which holds no entry (a data ledger is recorded before its first entry). One that
    // holds an entry is no state a crash leaves (the record listing it is gone: an older copy
    // of the record), refused rather than deleted with its entries.
    let stray = |entry: Option<&[u8]>| {
        let storage = ackstore::FileStorage::open(dir.path(), false).unwrap();
        let log = ackstore::internals::log::EntryLog::open(
            Arc::new(storage),
            ackstore::LogConfig::default(),
        )
        .unwrap();
        log.bump_next_ledger_id(ids[2] + 10);
        let id = log.create_ledger().unwrap();
        if let Some(payload) = entry {
            log.append(id, ackstore::internals::log::EntryMeta::default(), payload)
                .unwrap();
        }
        log.sync(id).unwrap();
        id
    };
    let holding = dir.path().join(ledger_file_name(stray(Some(b"stray"))));
    match ManagedLedger::open(dir.path(), config(2)) {
        Err(Error::Corrupted { .. }) => {}
        other => panic!("an unlisted ledger holding an entry opened: {other:?}"),
    }
    std::fs::remove_file(holding).unwrap();
    let orphan_id = stray(None);
    let orphan = dir.path().join(ledger_file_name(orphan_id));
    assert!(orphan.exists());
    let topic = ManagedLedger::open(dir.path(), config(2)).unwrap();
    assert!(!orphan.exists(), "the orphan is deleted on open");
    assert_eq!(topic.read(p[4]).unwrap().payload, b"m4");
    assert!(
        topic.append(b"x").unwrap().ledger_id > orphan_id,
        "ids are never reused"
    );
    topic.close().unwrap();

    // A recorded data ledger whose file is gone.
    std::fs::remove_file(dir.path().join(ledger_file_name(ids[1]))).unwrap();
    match ManagedLedger::open(dir.path(), config(2)) {
        Err(Error::MissingLedger { ledger, .. }) => assert_eq!(ledger, ids[1]),
        other => panic!("expected MissingLedger, got {other:?}"),
    }
}

#[test]
fn a_directory_with_ledgers_but_no_topic_record_is_refused() {
    let disk = MemStorage::new();
    {
        let log = ackstore::internals::log::EntryLog::open(
            Arc::new(disk.clone()),
            ackstore::LogConfig::default(),
        )
        .unwrap();
        log.create_ledger().unwrap();
    }
    assert!(matches!(
        ManagedLedger::open_with_storage(Arc::new(disk), config(2)),
        Err(Error::NotAckstore { .. })
    ));
}

#[test]
fn a_recorded_ledger_that_lost_entries_is_an_error_not_a_silent_cut() {
    let disk = MemStorage::new();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(3)).unwrap();
    let p = append_n(&topic, 7);
    topic.close().unwrap();
    // Cut the first (sealed, recorded with 3 entries) ledger in half: footer and some frames go.
    let name = ledger_file_name(p[0].ledger_id);
    let bytes = disk.live_bytes(&name).unwrap();
    disk.set_bytes(&name, bytes[..bytes.len() / 2].to_vec())
        .unwrap();
    // The topic opens (a sealed ledger is opened on its first use); that first read fails.
    let first_read = |disk: &MemStorage| {
        ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(3))
            .expect("the topic opens without reading its sealed ledgers")
            .read(p[0])
            .map(drop)
    };
    // The seal's proof (its slot claims the whole file synced) makes the cut corruption, named
    // where the whole frames end, below the half.
    match first_read(&disk) {
        Err(Error::Corrupted {
            place: ackstore::CorruptionPlace::Ledger { ledger, offset },
            kind: ackstore::CorruptionKind::Truncated,
        }) => {
            assert_eq!(ledger, p[0].ledger_id);
            assert!(offset <= bytes.len() as u64 / 2);
        }
        other => panic!("expected Corrupted, got {other:?}"),
    }
    // Without the proof (a ledger sealed before seals recorded it), the entries the record
    // counts are still missed loudly.
    let mut unproven = bytes[..bytes.len() / 2].to_vec();
    let h = ackstore::internals::format::ledger::decode_header(&unproven).unwrap();
    let fresh = ackstore::internals::format::ledger::LedgerHeader::new(h.ledger_id, h.nonce);
    let slots = ackstore::internals::format::ledger::SLOTS_AT
        ..ackstore::internals::format::ledger::HEADER_V3_LEN;
    unproven[slots.clone()].copy_from_slice(&fresh.encode()[slots]);
    disk.set_bytes(&name, unproven).unwrap();
    match first_read(&disk) {
        Err(Error::LedgerMismatch {
            ledger,
            recorded,
            found,
            ..
        }) => {
            assert_eq!((ledger, recorded), (p[0].ledger_id, 3));
            assert!(found < 3);
        }
        other => panic!("expected LedgerMismatch, got {other:?}"),
    }
}

//! The cursor journal a topic opened alone hosts in its directory: damage to each of its
//! segment files (deleted, truncated, zeroed, a bit flipped, swapped with an older copy) is
//! what `verify` reports exactly when the open refuses it, as is a topic record restored from an
//! older copy in place of the current one, or a stray segment beside the listed ones (an empty
//! file or a copy of the newest under the next name, a retired segment back), and an open
//! never recovers an ack that was not made; a power cut at every storage operation of the
//! topic's open and of a flush that rolls a segment over keeps the acks flushed before it.

use crate::support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ackstore::{
    FileStorage, InitialPosition, JournalConfig, LedgerConfig, ManagedLedger, MemStorage, Position,
    Storage,
};
use support::crash::{Cut, Points, cut_everywhere_after};
use support::mutate::Tree;
use support::topic::{append_n, at};

/// Segments small enough that a short workload rolls them over.
const JOURNAL: JournalConfig = JournalConfig {
    segment_bytes: 1024,
};

fn config() -> LedgerConfig {
    support::config::topic(40, ackstore::PersistMode::MultiEntry, 1 << 20)
}

pub(crate) fn open(storage: Arc<dyn Storage>) -> ackstore::Result<ManagedLedger> {
    ManagedLedger::open_with_journal(storage, config(), JOURNAL)
}

/// The acked entries among `positions` of cursor `sub` of the topic in `storage`, read as a
/// broker would after an open: every partition loads on the way.
fn recovered(
    storage: Arc<dyn Storage>,
    positions: &[Position],
) -> ackstore::Result<BTreeSet<Position>> {
    let topic = open(storage)?;
    let cursor = topic.open_cursor("sub", at(InitialPosition::Earliest, false))?;
    let mut acked = BTreeSet::new();
    for &p in positions {
        if cursor.is_acked(p)? {
            acked.insert(p);
        }
    }
    cursor.close()?;
    topic.close()?;
    Ok(acked)
}

/// Acks every third entry of `positions` from `from` into `acked`, flushing every ten acks and
/// at the end; stops at the first error.
fn ack_some(
    cursor: &ackstore::Cursor,
    positions: &[Position],
    from: usize,
    acked: &mut BTreeSet<Position>,
) -> ackstore::Result<()> {
    for (i, &p) in positions.iter().enumerate().skip(from).step_by(3) {
        cursor.ack(p)?;
        acked.insert(p);
        if i % 10 == 0 {
            cursor.flush()?;
        }
    }
    cursor.flush()
}

/// What damage is done to one segment file.
#[derive(Debug, Clone, Copy)]
enum Damage {
    Deleted,
    Truncated,
    Zeroed,
    BitFlipped,
    OlderCopy,
}

/// A topic alone on real files whose cursor `sub` flushed acks into segments that rolled over,
/// then closed: the directory, a copy of it after every flush (the older copies a restore
/// takes a file from), the positions and the acks.
fn flushed_with_copies() -> (Tree, Vec<Tree>, Vec<Position>, BTreeSet<Position>) {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(dir.path(), true).unwrap());
    let topic = open(storage).unwrap();
    let positions = append_n(&topic, 300);
    let cursor = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    let mut truth = BTreeSet::new();
    let mut older = Vec::new();
    for (from, chunk) in positions.chunks(30).enumerate() {
        ack_some(&cursor, chunk, from % 3, &mut truth).unwrap();
        older.push(Tree::read(dir.path()));
    }
    let stats = topic.journal_stats().expect("a journal");
    assert!(stats.rollovers > 0, "{stats:?}");
    cursor.close().unwrap();
    topic.close().unwrap();
    (Tree::read(dir.path()), older, positions, truth)
}

#[test]
fn damage_to_a_segment_of_a_topic_alone_is_reported_by_verify_exactly_when_open_refuses_it() {
    let (tree, older, positions, truth) = flushed_with_copies();
    let segments = tree.segments();
    assert!(segments.len() >= 2, "{segments:?}");
    let intact = check_copy(&tree, &positions, "intact");
    assert_eq!(
        intact,
        Some(truth.clone()),
        "the intact copy opens to the truth"
    );

    let mut refused = 0;
    let mut swapped = 0;
    for segment in &segments {
        for damage in [
            Damage::Deleted,
            Damage::Truncated,
            Damage::Zeroed,
            Damage::BitFlipped,
            Damage::OlderCopy,
        ] {
            let mut copy = tree.clone();
            let bytes = copy.files.get_mut(segment).expect("a segment");
            match damage {
                Damage::Deleted => {
                    copy.files.remove(segment);
                }
                Damage::Truncated => bytes.truncate(bytes.len() / 2),
                Damage::Zeroed => bytes.fill(0),
                Damage::BitFlipped => {
                    let at = bytes.len() / 2;
                    bytes[at] ^= 0x10;
                }
                Damage::OlderCopy => {
                    let copies = older.iter().rev().filter_map(|t| t.files.get(segment));
                    match copies.into_iter().find(|old| *old != bytes) {
                        Some(old) => old.clone_into(bytes),
                        None => continue,
                    }
                }
            }
            swapped += usize::from(matches!(damage, Damage::OlderCopy));
            let what = format!("{} {damage:?}", segment.display());
            let opened = check_copy(&copy, &positions, &what);
            match opened {
                Some(acked) => assert!(
                    acked.is_subset(&truth),
                    "{what}: acks recovered that were never made"
                ),
                None => refused += 1,
            }
        }
    }
    assert!(refused > 0, "no damage was refused");
    assert!(swapped > 0, "no segment had an older copy");
}

/// Writes `tree` to a fresh directory, runs `verify` on it, then opens it; checks that verify
/// reported damage exactly when the open refused, and returns the acks the open recovered
/// (`None` when it refused).
fn check_copy(tree: &Tree, positions: &[Position], what: &str) -> Option<BTreeSet<Position>> {
    let dir = tempfile::tempdir().unwrap();
    tree.write(dir.path());
    let report = verify(dir.path());
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(dir.path(), true).unwrap());
    let opened = recovered(storage, positions);
    if let Err(e) = &opened {
        eprintln!("{what}: open refused: {e}");
    }
    assert_eq!(
        report.damaged() > 0,
        opened.is_err(),
        "{what}: verify reports damage exactly when the open refuses"
    );
    opened.ok()
}

fn verify(dir: &Path) -> ackstore::check::Verification {
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(dir, false).unwrap());
    ackstore::check::verify(&storage).expect("verify reads the directory")
}

/// A topic alone with a cursor whose acks were flushed into several journal segments, then
/// closed; the positions and the acks.
fn prepared(disk: &MemStorage) -> (Vec<Position>, BTreeSet<Position>) {
    let topic = open(Arc::new(disk.clone())).unwrap();
    let positions = append_n(&topic, 200);
    topic.sync().unwrap();
    let cursor = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    let mut acked = BTreeSet::new();
    ack_some(&cursor, &positions, 1, &mut acked).unwrap();
    cursor.close().unwrap();
    topic.close().unwrap();
    (positions, acked)
}

#[test]
fn a_power_cut_at_every_step_of_a_topic_alone_opening_its_journal_keeps_the_flushed_acks() {
    let clean = cut_everywhere_after(
        Points::EVERY,
        prepared,
        |disk, (positions, acked)| {
            let opened = recovered(Arc::new(disk.clone()), &positions);
            (positions, acked, opened)
        },
        |disk, Cut { n, .. }, (positions, acked, _)| {
            for round in 0..2 {
                let got = recovered(Arc::new(disk.durable_image()), &positions)
                    .unwrap_or_else(|e| panic!("cut at {n}, round {round}: {e}"));
                assert_eq!(got, acked, "cut at {n}, round {round}");
            }
        },
    );
    let (_, acked, opened) = clean.result;
    assert_eq!(opened.unwrap(), acked);
    // After a clean close the open's writes are its claims: a link of the topic record and
    // one of the cursor record (nothing synced); each is a cut point above.
    assert!(clean.total >= 2, "the open took {} writes", clean.total);
}

#[test]
fn a_power_cut_at_every_step_of_a_flush_that_rolls_a_segment_over_keeps_one_state() {
    let clean = cut_everywhere_after(
        Points::EVERY,
        |disk| {
            let (positions, before) = prepared(disk);
            let topic = open(Arc::new(disk.clone())).unwrap();
            let cursor = topic
                .open_cursor("sub", at(InitialPosition::Earliest, false))
                .unwrap();
            (topic, cursor, positions, before)
        },
        |_, (topic, cursor, positions, before)| {
            let rollovers = topic.journal_stats().unwrap().rollovers;
            let mut after = before.clone();
            let _ = ack_some(&cursor, &positions, 2, &mut after);
            let rolled = topic.journal_stats().unwrap().rollovers > rollovers;
            (topic, cursor, positions, before, after, rolled)
        },
        |disk, Cut { n, .. }, (topic, cursor, positions, before, after, _)| {
            drop(cursor);
            // The process is gone: nothing of this handle runs again.
            std::mem::forget(topic);
            let got = recovered(Arc::new(disk.durable_image()), &positions)
                .unwrap_or_else(|e| panic!("cut at {n}: {e}"));
            assert!(
                got.is_superset(&before) && got.is_subset(&after),
                "cut at {n}: between the state before and after"
            );
        },
    );
    assert!(clean.result.5, "the flushes rolled a segment over");
}

#[test]
fn a_topic_record_restored_from_an_older_copy_is_reported_by_verify_exactly_when_open_refuses_it() {
    let (tree, older, positions, truth) = flushed_with_copies();
    let is_record = |p: &Path| {
        p.file_name()
            .and_then(|f| f.to_str())
            .is_some_and(|f| f.starts_with("topic.") && f.ends_with(".meta"))
    };
    let current = tree.record("", "topic").expect("a topic record");
    let mut restored = 0;
    for (i, old) in older.iter().enumerate() {
        let old_record = old.record("", "topic").expect("a topic record");
        if old.files[&old_record] == tree.files[&current] {
            continue;
        }
        // The record's current version is lost; an older one is back in its place.
        let mut copy = tree.clone();
        copy.files.retain(|p, _| !is_record(p));
        copy.files
            .insert(old_record.clone(), old.files[&old_record].clone());
        restored += 1;
        let what = format!("the record after flush {i} ({})", old_record.display());
        let opened = check_copy(&copy, &positions, &what);
        if let Some(acked) = opened {
            assert!(
                acked.is_subset(&truth),
                "{what}: acks recovered that were never made"
            );
        }
    }
    assert!(restored > 0, "no older record differed");
}

#[test]
fn a_stray_segment_beside_a_topic_alone_is_reported_by_verify_exactly_when_open_refuses_it() {
    let (tree, older, positions, truth) = flushed_with_copies();
    let segments = tree.segments();
    let newest = segments.last().expect("a segment").clone();
    let seq_of = |p: &Path| -> u64 {
        let f = p.file_name().and_then(|f| f.to_str()).unwrap_or_default();
        f.trim_start_matches("journal-")
            .trim_end_matches(".seg")
            .parse()
            .expect("a segment name")
    };
    let name = |seq: u64| newest.with_file_name(format!("journal-{seq:016}.seg"));
    let above = name(seq_of(&newest) + 1);
    let mut strays: Vec<(String, PathBuf, Vec<u8>)> = vec![
        (
            "an empty file above the newest".into(),
            above.clone(),
            Vec::new(),
        ),
        (
            "a copy of the newest under the next name".into(),
            above.clone(),
            tree.files[&newest].clone(),
        ),
    ];
    // Segments an earlier flush had and the directory no longer holds, back in place.
    for old in &older {
        for (path, bytes) in old
            .files
            .iter()
            .filter(|(p, _)| support::mutate::is_segment(p))
        {
            if !tree.files.contains_key(path) && !strays.iter().any(|(_, p, _)| p == path) {
                strays.push(("a retired segment back".into(), path.clone(), bytes.clone()));
            }
        }
    }
    assert!(strays.len() > 2, "no segment was retired");
    for (what, path, bytes) in strays {
        let mut copy = tree.clone();
        copy.files.insert(path.clone(), bytes);
        let what = format!("{what} ({})", path.display());
        let opened = check_copy(&copy, &positions, &what);
        if let Some(acked) = opened {
            assert_eq!(acked, truth, "{what}: the open recovers the acks made");
        }
    }
}

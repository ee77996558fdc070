//! A cursor of a topic opened on its own, on a cursor ledger (the writer's tests, until it is
//! deleted), answers after a restart without writing anything: its
//! claim (the state moved to a fresh cursor ledger of this owner, the record switched to it by
//! compare-and-set) waits for its first write. Until then nothing is appended to the recovered
//! cursor ledger, which a former owner may still append to; the first flush, a seek, or acks
//! that would push unsaved partitions past the budget make the claim.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::internals::ackset::MAX_PARTITION_BYTES;
use ackstore::{
    CursorOptions, Error, LedgerConfig, ManagedLedger, MemStorage, PersistMode, Position, Storage,
};
use support::crash::{Points, cut_everywhere_after, torn_image, unsynced_tail};
use support::topic::append_n;

const PER_LEDGER: u64 = 200;

/// The topic's settings: the deferred claim is the cursor-ledger writer's.
fn writer_topic(per_ledger: u64, mode: PersistMode, lru: usize) -> LedgerConfig {
    support::config::on_cursor_ledgers(support::config::topic(per_ledger, mode, lru))
}

fn open(disk: &MemStorage, config: &LedgerConfig) -> ackstore::Result<ManagedLedger> {
    ManagedLedger::open_with_storage(Arc::new(disk.clone()), config.clone())
}

/// A topic of `entries` entries on `disk` whose cursor "sub" flushed every third entry acked;
/// returns the positions and the acked set.
fn prepared(
    disk: &MemStorage,
    config: &LedgerConfig,
    entries: u64,
) -> (Vec<Position>, BTreeSet<Position>) {
    let topic = open(disk, config).expect("open");
    let positions = append_n(&topic, entries);
    topic.sync().expect("sync");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    let acked: BTreeSet<Position> = positions.iter().copied().skip(1).step_by(3).collect();
    for &p in &acked {
        cursor.ack(p).expect("ack");
    }
    cursor.close().expect("close");
    topic.close().expect("close topic");
    (positions, acked)
}

fn acked_of(cursor: &ackstore::Cursor, positions: &[Position]) -> BTreeSet<Position> {
    positions
        .iter()
        .copied()
        .filter(|&p| cursor.is_acked(p).expect("is_acked"))
        .collect()
}

fn cursor_ledger(cursor: &ackstore::Cursor) -> Option<u64> {
    cursor.stats().expect("stats").persist.cursor_ledger
}

/// The cursor ledger the record of cursor "sub" names.
fn ledger_of_record(disk: &MemStorage) -> Option<u64> {
    use ackstore::internals::format::meta::CursorRecord;
    use ackstore::internals::meta::{FileMetaStore, MetaStore};
    let meta = FileMetaStore::new(Arc::new(disk.clone()));
    let (_, bytes) = meta.get("cursor-0").unwrap().expect("the record");
    CursorRecord::decode(&bytes).unwrap().cursor_ledger
}

/// The names of the files on `disk`.
fn files(disk: &MemStorage) -> BTreeSet<String> {
    disk.list().expect("list").into_iter().collect()
}

#[test]
fn a_reopened_cursor_answers_without_writing_or_syncing_anything() {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        let cfg = writer_topic(PER_LEDGER, mode, 1 << 20);
        let disk = MemStorage::new();
        let (positions, acked) = prepared(&disk, &cfg, 3 * PER_LEDGER + 17);
        let topic = open(&disk, &cfg).expect("reopen");
        let (before, names) = (disk.mutations(), files(&disk));
        let cursor = topic
            .open_cursor("sub", CursorOptions::default())
            .expect("cursor");
        let recovered_on = cursor_ledger(&cursor);
        assert_eq!(cursor.mark_delete_position().unwrap(), None, "{mode:?}");
        assert_eq!(
            cursor.read_entries(1).unwrap()[0].position,
            positions[0],
            "{mode:?}"
        );
        assert_eq!(acked_of(&cursor, &positions), acked, "{mode:?}");
        assert_eq!(
            cursor.backlog().unwrap(),
            positions.len() as u64 - acked.len() as u64,
            "{mode:?}"
        );
        assert_eq!(
            (disk.mutations(), files(&disk)),
            (before, names.clone()),
            "{mode:?}: answering wrote nothing"
        );
        // The first flush with something to write is the claim: a fresh cursor ledger, the
        // recovered one deleted.
        cursor.flush().expect("flush without changes");
        assert_eq!(
            disk.mutations(),
            before,
            "{mode:?}: nothing changed, nothing written"
        );
        cursor.ack(positions[0]).expect("ack");
        cursor.flush().expect("flush");
        let claimed_on = cursor_ledger(&cursor);
        assert_ne!(
            claimed_on, recovered_on,
            "{mode:?}: the claim moved ledgers"
        );
        let gone: Vec<String> = names
            .difference(&files(&disk))
            .filter(|f| f.starts_with("ledger-"))
            .cloned()
            .collect();
        assert_eq!(
            gone.len(),
            1,
            "{mode:?}: the recovered ledger was deleted: {gone:?}"
        );
        drop(cursor);
        topic.close().expect("close");
        let topic = open(&disk, &cfg).expect("reopen");
        let cursor = topic
            .open_cursor("sub", CursorOptions::default())
            .expect("cursor");
        assert_eq!(
            cursor.mark_delete_position().unwrap(),
            Some(positions[1]),
            "{mode:?}: entry 0 acked makes 0 and 1 consumed"
        );
        let mut expected = acked.clone();
        expected.insert(positions[0]);
        assert_eq!(acked_of(&cursor, &positions), expected, "{mode:?}");
    }
}

#[test]
fn a_former_owners_evictions_into_the_recovered_ledger_never_reach_the_new_owner() {
    // The former owner keeps a tiny budget, so its acks evict partitions straight into the
    // cursor ledger the new owner recovered from and reads cold partitions of.
    let tiny = writer_topic(PER_LEDGER, PersistMode::MultiEntry, 0);
    let disk = MemStorage::new();
    let (positions, mut acked) = prepared(&disk, &tiny, 4 * PER_LEDGER);
    let old_topic = open(&disk, &tiny).expect("open");
    let old = old_topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    // The former owner's flush claims the cursor: from then on it appends to its own ledger,
    // which the new owner recovers from.
    old.ack(positions[3]).expect("ack");
    acked.insert(positions[3]);
    old.flush().expect("flush");
    disk.break_lock();
    let new_topic = open(&disk, &tiny).expect("takeover");
    let new = new_topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    let recovered_on = cursor_ledger(&new);
    assert_eq!(cursor_ledger(&old), recovered_on);
    let appended = disk.mutations();
    for &p in positions.iter().step_by(3) {
        old.ack(p).expect("a former owner's acks work in memory");
    }
    // Whatever the former owner's entry log still buffers reaches the file.
    old_topic
        .entry_log()
        .unwrap()
        .sync(recovered_on.expect("a cursor ledger"))
        .expect("the former owner's log syncs its own appends");
    assert!(
        disk.mutations() > appended,
        "the former owner's evictions appended to the recovered ledger"
    );
    assert!(matches!(old.flush(), Err(Error::Fenced { .. })));
    // The new owner reads exactly the state it recovered, however its partitions are loaded.
    assert_eq!(acked_of(&new, &positions), acked);
    let extra = positions[5];
    new.ack(extra).expect("ack");
    new.flush().expect("the new owner's first flush claims");
    assert_ne!(cursor_ledger(&new), recovered_on);
    drop((old, new));
    drop(old_topic);
    new_topic.close().expect("close");
    let topic = open(&disk, &tiny).expect("reopen");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    let mut expected = acked;
    expected.insert(extra);
    assert_eq!(acked_of(&cursor, &positions), expected);
}

#[test]
fn acks_before_the_first_flush_stay_within_the_budget_by_making_the_claim() {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        let budget = 0;
        let cfg = writer_topic(PER_LEDGER, mode, budget);
        let disk = MemStorage::new();
        let (positions, mut acked) = prepared(&disk, &cfg, 6 * PER_LEDGER);
        let topic = open(&disk, &cfg).expect("reopen");
        let recovered_on = ledger_of_record(&disk);
        let cursor = topic
            .open_cursor("sub", CursorOptions::default())
            .expect("cursor");
        // Every other entry of every partition: each ack dirties a partition the budget cannot
        // keep, so evictions would have to store it.
        for &p in positions.iter().skip(2).step_by(2) {
            cursor.ack(p).expect("ack");
            acked.insert(p);
            let s = cursor.stats().unwrap().ackset;
            assert_eq!(s.pinned_partitions, 0, "{mode:?} after acking {p}");
            assert!(
                s.resident_bytes + s.charged_bytes <= budget + MAX_PARTITION_BYTES,
                "{mode:?}: {s:?}"
            );
        }
        // In single-entry mode the snapshot's partitions are unsaved once recovered: past the
        // budget already, the open made the claim.
        assert_ne!(
            cursor_ledger(&cursor),
            recovered_on,
            "{mode:?}: the budget made the claim"
        );
        cursor.close().expect("close");
        topic.close().expect("close");
        let topic = open(&disk, &cfg).expect("reopen");
        let cursor = topic
            .open_cursor("sub", CursorOptions::default())
            .expect("cursor");
        let recovered: BTreeSet<Position> = acked_of(&cursor, &positions);
        let mark = cursor.mark_delete_position().unwrap();
        let expected: BTreeSet<Position> = acked
            .iter()
            .copied()
            .filter(|&p| mark.is_none_or(|m| p > m))
            .collect();
        let above: BTreeSet<Position> = recovered
            .iter()
            .copied()
            .filter(|&p| mark.is_none_or(|m| p > m))
            .collect();
        assert_eq!(above, expected, "{mode:?}");
        assert!(
            positions
                .iter()
                .filter(|&&p| mark.is_some_and(|m| p <= m))
                .all(|p| acked.contains(p)),
            "{mode:?}: mark-delete only over acked entries"
        );
    }
}

/// A power cut at every storage operation of the claim a reopened cursor makes with its first
/// flush, and at every byte of its unsynced tail: a restart finds the state before the flush
/// or after it, never more than was acked, and once the flush returned `Ok` every ack.
#[test]
fn a_power_cut_at_every_step_of_the_deferred_claim_keeps_a_state_between_before_and_after() {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        let cfg = writer_topic(PER_LEDGER, mode, 1 << 20);
        let entries = 3 * PER_LEDGER + 17;
        let extra: Vec<u64> = (0..entries).step_by(7).collect();
        let check = |image: &MemStorage,
                     before: &BTreeSet<Position>,
                     after: &BTreeSet<Position>,
                     flushed: bool,
                     what: &str| {
            let topic = open(image, &cfg).expect("a cut disk opens");
            let cursor = topic
                .open_cursor("sub", CursorOptions::default())
                .expect("cursor");
            let positions: Vec<Position> = topic_positions(&topic);
            let got = consumed_or_acked(&cursor, &positions);
            assert!(got.is_subset(after), "{mode:?} {what}: invented an ack");
            assert!(
                before.is_subset(&got),
                "{mode:?} {what}: lost an ack flushed before"
            );
            if flushed {
                assert_eq!(&got, after, "{mode:?} {what}: lost an ack of the Ok flush");
            }
        };
        let clean = cut_everywhere_after(
            Points::every_in_release(5),
            |disk| prepared(disk, &cfg, entries),
            |disk, (positions, acked)| {
                let after: BTreeSet<Position> = acked
                    .iter()
                    .copied()
                    .chain(extra.iter().map(|&i| positions[i as usize]))
                    .collect();
                let flushed = open(disk, &cfg).and_then(|topic| {
                    let cursor = topic.open_cursor("sub", CursorOptions::default())?;
                    for &i in &extra {
                        cursor.ack(positions[i as usize])?;
                    }
                    cursor.flush()
                });
                (acked, after, flushed.is_ok())
            },
            |disk, cut, (before, after, flushed)| {
                let what = format!("cut at {}/{}", cut.n, cut.total);
                check(&disk.durable_image(), &before, &after, flushed, &what);
                let tail = unsynced_tail(disk);
                for keep in [1, tail / 2, tail] {
                    let torn = torn_image(disk, |_| keep);
                    check(
                        &torn,
                        &before,
                        &after,
                        flushed,
                        &format!("{what}, {keep} torn bytes"),
                    );
                }
            },
        );
        assert!(
            clean.result.2 && clean.total > 10,
            "{mode:?}: the open and the claim make {} storage operations",
            clean.total
        );
    }
}

/// Every position of `topic`, in order.
fn topic_positions(topic: &ManagedLedger) -> Vec<Position> {
    let reader = topic
        .open_cursor("all", CursorOptions::default())
        .expect("reader");
    let mut out = Vec::new();
    loop {
        let batch = reader.read_entries(1_000).expect("read");
        if batch.is_empty() {
            break;
        }
        out.extend(batch.iter().map(|e| e.position));
    }
    out
}

/// The entries `cursor` considers done: at or below mark-delete, or acked above it.
fn consumed_or_acked(cursor: &ackstore::Cursor, positions: &[Position]) -> BTreeSet<Position> {
    let mark = cursor.mark_delete_position().expect("mark");
    positions
        .iter()
        .copied()
        .filter(|&p| mark.is_some_and(|m| p <= m) || cursor.is_acked(p).expect("is_acked"))
        .collect()
}

/// A former owner's first flush after its own reopen is its deferred claim (a fresh ledger, the
/// record switched); a new owner takes the topic over after every one of that flush's storage
/// operations in turn, opens the cursor, acks and flushes (its own deferred claim). The new
/// owner is never fenced; a flush of the former owner that returned `Ok` is seen by the new
/// owner; the new owner's flushed acks are seen by a later owner after a power cut; and no
/// owner ever recovers an ack nobody made.
#[test]
fn a_takeover_at_every_step_of_a_former_owners_claim_never_fences_the_new_owners_claim() {
    use support::takeover;
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        let cfg = writer_topic(PER_LEDGER, mode, 1 << 20);
        let run = |at_step: Option<u64>| {
            let disk = MemStorage::new();
            let (positions, acked) = prepared(&disk, &cfg, 2 * PER_LEDGER);
            let hooked = takeover::Disk::new(Arc::new(disk.clone()));
            let old_topic =
                ManagedLedger::open_with_storage(hooked.storage.clone(), cfg.clone()).unwrap();
            let old = old_topic
                .open_cursor("sub", CursorOptions::default())
                .unwrap();
            // Entries `prepared` left unacked (it acks 1, 4, 7, ...).
            let old_acks = [positions[5], positions[PER_LEDGER as usize + 6]];
            for p in old_acks {
                old.ack(p).unwrap();
            }
            let new_acks = [positions[11], positions[PER_LEDGER as usize + 21]];
            let slot = {
                let (disk, cfg, positions) = (disk.clone(), cfg.clone(), positions.clone());
                hooked.arm_takeover(at_step.unwrap_or(u64::MAX), move || {
                    disk.break_lock();
                    let topic = open(&disk, &cfg).expect("the new owner opens");
                    let cursor = topic.open_cursor("sub", CursorOptions::default())?;
                    let seen = acked_of(&cursor, &positions);
                    for p in new_acks {
                        cursor.ack(p)?;
                    }
                    cursor.flush()?;
                    Ok::<_, Error>((topic, seen))
                })
            };
            let flushed = old.flush();
            hooked.hook.run_if_pending();
            if let Err(e) = &flushed {
                assert!(matches!(e, Error::Fenced { .. }), "step {at_step:?}: {e}");
            }
            drop(old);
            drop(old_topic);
            let (new_topic, seen) = slot
                .lock()
                .unwrap()
                .take()
                .expect("the takeover ran")
                .unwrap_or_else(|e| panic!("{mode:?} step {at_step:?}: new owner: {e}"));
            new_topic.close().expect("the new owner closes");
            drop(new_topic);
            let later = open(&disk.durable_image(), &cfg).expect("a later owner opens");
            let cursor = later.open_cursor("sub", CursorOptions::default()).unwrap();
            let recovered = acked_of(&cursor, &positions);
            (flushed.is_ok(), acked, old_acks, new_acks, seen, recovered)
        };
        let total = {
            let disk = MemStorage::new();
            let (positions, _) = prepared(&disk, &cfg, 2 * PER_LEDGER);
            let hooked = takeover::Disk::new(Arc::new(disk.clone()));
            let topic =
                ManagedLedger::open_with_storage(hooked.storage.clone(), cfg.clone()).unwrap();
            let cursor = topic.open_cursor("sub", CursorOptions::default()).unwrap();
            cursor.ack(positions[5]).unwrap();
            let before = hooked.hook.count();
            cursor.flush().unwrap();
            hooked.hook.count() - before
        };
        assert!(
            total > 3,
            "{mode:?}: the claim's flush makes {total} operations"
        );
        for n in 1..=total {
            let (ok, acked, old_acks, new_acks, seen, recovered) = run(Some(n));
            let what = format!("{mode:?}: takeover after operation {n} of {total}");
            let made: BTreeSet<Position> = acked
                .iter()
                .chain(&old_acks)
                .chain(&new_acks)
                .copied()
                .collect();
            assert!(
                seen.is_subset(&made),
                "{what}: the new owner invented an ack"
            );
            assert!(
                acked.is_subset(&seen),
                "{what}: the new owner lost a flushed ack"
            );
            if ok {
                assert!(
                    old_acks.iter().all(|p| seen.contains(p)),
                    "{what}: the former owner's flush returned Ok unseen"
                );
            }
            assert!(
                recovered.is_subset(&made),
                "{what}: a later owner invented an ack"
            );
            assert!(
                new_acks.iter().chain(&acked).all(|p| recovered.contains(p)),
                "{what}: a later owner lost the new owner's flushed acks"
            );
        }
    }
}

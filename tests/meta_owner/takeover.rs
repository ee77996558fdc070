//! A takeover while the previous owner still writes: the new owner claims the topic before it
//! reads or changes anything the previous owner may still be writing, and never writes into
//! the previous owner's ledgers, so whatever the interleaving every ledger stays readable.

use crate::support;

use std::sync::{Arc, Barrier};

use ackstore::ManagedLedger;
use support::hooked::Hooked;
use support::takeover;
use support::topic::{append_n, config, reopen};

const PER_LEDGER: u64 = 1_000;

/// The stale owner appends (and syncs) while the new owner's open is in the middle of reading
/// the ledger files: the new owner must not seal that ledger at the count it scanned.
#[test]
fn a_stale_owner_appending_while_the_new_owner_opens_leaves_every_ledger_readable() {
    let hooked = Hooked::new(ackstore::MemStorage::new());
    let disk = hooked.disk.clone();
    let old = ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(PER_LEDGER)).unwrap();
    let first = append_n(&old, 10);
    old.sync().unwrap();
    disk.break_lock();
    // The new owner's open holds at its first fsync (by then it has claimed the topic record
    // with a link and the entry log has read the ledger files: the fsync is the record write
    // that counts the ledger the old owner was appending to); meanwhile the old owner appends
    // more and syncs, which its ownership check after the sync refuses (`Fenced`).
    let barriers = Arc::new((Barrier::new(2), Barrier::new(2)));
    *hooked.hooks.hold_next_sync.lock().unwrap() = Some(barriers.clone());
    let opening = {
        let storage: Arc<dyn ackstore::Storage> = Arc::new(hooked.clone());
        std::thread::spawn(move || ManagedLedger::open_with_storage(storage, config(PER_LEDGER)))
    };
    barriers.0.wait();
    for _ in 0..7 {
        let _ = old.append(b"late");
    }
    let late = old.sync();
    assert!(
        matches!(late, Err(ackstore::Error::Fenced { .. })),
        "the old owner's sync after the new owner's claim: {late:?}"
    );
    barriers.1.wait();
    let new = opening.join().unwrap().expect("the new owner opens");
    let _ = old.close();
    drop(old);
    let seen = new.last_position().expect("the synced entries are seen");
    assert!(seen >= *first.last().unwrap());
    let more = append_n(&new, 3);
    new.sync().unwrap();
    new.close().unwrap();
    drop(new);
    for image in [disk.clone(), disk.durable_image()] {
        let later = reopen(&image, PER_LEDGER);
        assert_eq!(later.last_position(), more.last().copied());
        for p in first.iter().chain(&more) {
            later
                .read(*p)
                .expect("every entry the new owner recorded is readable");
        }
    }
}

type Acked = (
    Option<ackstore::Position>,
    Vec<(ackstore::Position, ackstore::Position)>,
);

fn acked(cursor: &ackstore::Cursor) -> Acked {
    (
        cursor.mark_delete_position().unwrap(),
        cursor.acked_ranges().unwrap(),
    )
}

/// Whether every ack of `want` is in `have`.
fn covers(have: &Acked, want: &[ackstore::Position]) -> bool {
    want.iter()
        .all(|p| have.0.is_some_and(|m| *p <= m) || have.1.iter().any(|(a, b)| a <= p && p <= b))
}

/// A flush runs while a new owner takes the topic over, the takeover placed after every one of
/// the flush's storage operations in turn: a flush that returns `Ok` is seen by the new owner (which claims
/// first, then reads) and by every later one; otherwise it returns `Fenced`.
#[test]
fn a_flush_that_returns_ok_is_seen_by_an_owner_taking_over_at_any_step() {
    use ackstore::{InitialPosition, PersistMode};
    use support::topic::at;

    const SUB: &str = "sub";
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        let cfg = || {
            let mut c = config(4);
            c.cursor.persist_mode = mode;
            c.cursor.flush_interval = None;
            c
        };
        // One run of the workload; with `at`, the takeover comes after that many writes of
        // the flush. Returns the flush's writes, whether it returned Ok, and what the new owner
        // and a later one recovered.
        let run = |at_step: Option<u64>| {
            let disk = ackstore::MemStorage::new();
            let hooked = takeover::Disk::new(Arc::new(disk.clone()));
            let old = ManagedLedger::open_with_storage(hooked.storage.clone(), cfg()).unwrap();
            let positions = append_n(&old, 20);
            old.sync().unwrap();
            let cursor = old
                .open_cursor(SUB, at(InitialPosition::Earliest, false))
                .unwrap();
            cursor.ack_cumulative(positions[2]).unwrap();
            cursor.ack(positions[6]).unwrap();
            cursor.flush().unwrap();
            // The acks the flush under test must carry.
            let fresh = [positions[9], positions[13], positions[3]];
            for p in fresh {
                cursor.ack(p).unwrap();
            }
            let seen: Arc<std::sync::Mutex<Option<(ManagedLedger, Acked)>>> = Arc::default();
            let take_over = {
                let (disk, seen, cfg) = (disk.clone(), seen.clone(), cfg());
                Box::new(move || {
                    disk.break_lock();
                    let new = ManagedLedger::open_with_storage(Arc::new(disk), cfg).unwrap();
                    let c = new
                        .open_cursor(SUB, at(InitialPosition::Earliest, false))
                        .unwrap();
                    let state = acked(&c);
                    *seen.lock().unwrap() = Some((new, state));
                })
            };
            let before = hooked.hook.count();
            hooked.hook.arm(at_step.unwrap_or(u64::MAX), take_over);
            let flushed = cursor.flush();
            let steps = hooked.hook.count() - before;
            hooked.hook.run_if_pending();
            if let Err(e) = &flushed {
                assert!(
                    matches!(e, ackstore::Error::Fenced { .. }),
                    "step {at_step:?}: {e}"
                );
            }
            let _ = old.close();
            drop(cursor);
            drop(old);
            let (new, new_state) = seen.lock().unwrap().take().unwrap();
            new.close().unwrap();
            drop(new);
            // A later owner after a power cut.
            let later = reopen(&disk.durable_image(), 4);
            let later_state = acked(
                &later
                    .open_cursor(SUB, at(InitialPosition::Earliest, false))
                    .unwrap(),
            );
            (steps, flushed.is_ok(), new_state, later_state, fresh)
        };
        let (total, ..) = run(None);
        assert!(total > 0);
        let mut oks = 0;
        for n in 1..=total {
            let (_, ok, new_state, later_state, fresh) = run(Some(n));
            if ok {
                oks += 1;
                assert!(
                    covers(&new_state, &fresh),
                    "{mode:?}: takeover after write {n} of {total}: the flush returned Ok but the \
                     new owner recovered {new_state:?}"
                );
                assert!(
                    covers(&later_state, &fresh),
                    "{mode:?}: step {n}: {later_state:?}"
                );
            }
        }
        assert!(
            oks < total,
            "{mode:?}: a takeover before the flush's commit must fence it"
        );
    }
}

/// A stale owner's `sync` returns `Ok` only for entries a newer owner sees: the newer owner
/// records the open ledger at the count it read after its claim, so entries the stale owner
/// appends and syncs after that claim are never read by anyone. Such a sync must be
/// `Fenced`.
#[test]
fn a_sync_after_a_takeover_is_fenced_unless_the_new_owner_sees_the_entries() {
    let disk = ackstore::MemStorage::new();
    let old = ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(PER_LEDGER)).unwrap();
    append_n(&old, 5);
    old.sync().unwrap();
    disk.break_lock();
    let new = reopen(&disk, PER_LEDGER);
    let late = support::topic::append_unsynced(&old, 3);
    let synced = old.sync();
    if synced.is_ok() {
        let seen = new.last_position();
        assert!(
            seen >= late.last().copied(),
            "the stale owner's sync returned Ok, but the new owner's last entry is {seen:?}, \
             not {:?}",
            late.last()
        );
    } else {
        assert!(
            matches!(synced, Err(ackstore::Error::Fenced { .. })),
            "{synced:?}"
        );
    }
}

/// A former owner deletes a ledger it had replaced (its fence passed just before the new
/// owner's claim) while the new owner's open runs: whichever step of the open that lands on,
/// the open succeeds (a file gone is what the open would have done with it).
#[test]
fn an_orphan_deleted_by_a_former_owner_during_the_open_does_not_fail_it() {
    use ackstore::Storage;
    use ackstore::internals::log::{EntryLog, LogConfig, ledger_file_name};
    let run = |at_step: Option<u64>| {
        let disk = ackstore::MemStorage::new();
        let old = ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(4)).unwrap();
        append_n(&old, 6);
        old.close().unwrap();
        drop(old);
        // The replaced ledger: a whole ledger file no record names.
        let orphan = {
            let log = EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap();
            log.create_ledger().unwrap()
        };
        let hooked = takeover::Disk::new(Arc::new(disk.clone()));
        let remove = {
            let disk = disk.clone();
            Box::new(move || {
                let _ = disk.remove(&ledger_file_name(orphan));
            })
        };
        hooked.hook.arm(at_step.unwrap_or(u64::MAX), remove);
        let before = hooked.hook.count();
        let opened = ManagedLedger::open_with_storage(hooked.storage.clone(), config(4));
        let steps = hooked.hook.count() - before;
        (steps, opened.map(drop))
    };
    let (total, opened) = run(None);
    opened.unwrap();
    for n in 1..=total {
        let (_, opened) = run(Some(n));
        assert!(
            opened.is_ok(),
            "the orphan removed after operation {n} of {total} of the open: {:?}",
            opened.err()
        );
    }
}

/// A former owner's open is still running when a newer owner claims the topic, appends and
/// syncs: the former owner's listing of the ledger files may then hold the newer owner's
/// ledger, which the record the former owner read does not name. Whatever step of the former
/// owner's open the newer owner lands on, that ledger is not taken for an orphan: every entry the
/// newer owner synced stays readable, through it and after a fresh open of the live and the
/// durable disk.
#[test]
fn a_ledger_a_newer_owner_records_during_a_former_owners_open_is_never_deleted() {
    let run = |at_step: Option<u64>| -> u64 {
        let disk = ackstore::MemStorage::new();
        let first = ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(4)).unwrap();
        append_n(&first, 6);
        first.close().unwrap();
        drop(first);
        let hooked = takeover::Disk::new(Arc::new(disk.clone()));
        let newer = hooked.arm_takeover(at_step.unwrap_or(u64::MAX), {
            let disk = disk.clone();
            move || {
                disk.break_lock();
                let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(4))
                    .expect("the newer owner opens");
                let synced = append_n(&topic, 3);
                (topic, synced)
            }
        });
        let before = hooked.hook.count();
        // Fenced or not, depending on the step: either is right for the former owner.
        let former = ManagedLedger::open_with_storage(hooked.storage.clone(), config(4));
        let steps = hooked.hook.count() - before;
        drop(former);
        let taken = newer.lock().unwrap().take();
        if let Some((topic, synced)) = taken {
            for p in &synced {
                topic
                    .read(*p)
                    .unwrap_or_else(|e| panic!("after step {at_step:?}: {p} unreadable: {e}"));
            }
            // Fenced when the former owner's claim came after it: then that owner read its
            // synced entries.
            let _ = topic.close();
            drop(topic);
            for image in [disk.clone(), disk.durable_image()] {
                image.break_lock();
                let later = ManagedLedger::open_with_storage(Arc::new(image), config(4))
                    .unwrap_or_else(|e| panic!("after step {at_step:?}: reopen: {e}"));
                for p in &synced {
                    later.read(*p).unwrap_or_else(|e| {
                        panic!("after step {at_step:?}: {p} unreadable after reopen: {e}")
                    });
                }
            }
        }
        steps
    };
    let total = run(None);
    for n in 1..=total {
        run(Some(n));
    }
}

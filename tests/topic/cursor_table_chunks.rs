//! A topic's cursor table in chunk records of 512 cursors pinned by the topic record (format
//! version 4), the tail inline: a topic of fewer cursors keeps the version an earlier build
//! writes; a creation writes the tail and the pins, so its bytes stay flat as cursors
//! accumulate; a deletion from a full chunk writes that chunk again and removes the one it
//! superseded. A power cut at every step of a creation inside the tail, of one that fills it,
//! of a deletion from a full chunk and of the upgrade of a record of an earlier version keeps
//! every cursor whose creation answered, brings back none whose deletion answered, never
//! acknowledges more than the flushed truth, and leaves a topic that opens and `verify` finds
//! sound; damage to any chunk record is refused by the open and reported by `verify`, naming
//! it. On a topic alone and on a store's topic.

use crate::support;

use std::sync::Arc;

use ackstore::internals::format::meta::{
    CURSOR_CHUNK_ENTRIES, CURSOR_CHUNK_PREFIX, TOPIC_CHUNKED_VERSION, TopicRecord,
};
use ackstore::{Error, MemStorage, Position, Storage};
use support::crash::{copy_into, sound_without_leftovers};
use support::tap::{Tap, Written, assert_flat_from_1k_to_4k};
use support::topic::cut_change_everywhere;
use support::topic::{ACKER, Host, Hosted, config, earliest, on_each_host, open_hosted};
use support::topic::{chunk_damage_is_refused, file_bytes};
use support::topic::{reopen_hosted, topic_storage, topic_with_an_acker};

const CHUNK: usize = CURSOR_CHUNK_ENTRIES;
const PER_LEDGER: u64 = 16;

/// The name of the `i`-th cursor created.
fn cursor(i: usize) -> String {
    format!("subscription-{i:05}")
}

/// Creates cursors `from..to` of `topic`.
fn create(topic: &Hosted, from: usize, to: usize) {
    for i in from..to {
        topic.open_cursor(&cursor(i), earliest()).expect("create");
    }
}

/// A closed topic of `host` on a fresh disk: the acker with its flushed acks, then `cursors`
/// more. Returns the disk and the acker's mark-delete.
fn topic_of(host: Host, cursors: usize) -> (MemStorage, Position) {
    topic_with_an_acker(host, PER_LEDGER, (0..cursors).map(cursor))
}

/// The names `topic_of` leaves (sorted, as `cursor_names` answers).
fn names_of(cursors: impl IntoIterator<Item = usize>) -> Vec<String> {
    let mut names: Vec<String> = cursors.into_iter().map(cursor).collect();
    names.push(ACKER.into());
    names.sort();
    names
}

/// The topic record of the topic `host` keeps on `disk`: its format version and the record.
fn record_of(host: Host, disk: &MemStorage) -> (u16, TopicRecord) {
    support::topic::record_of(host, disk)
}

/// The files of chunk records of the topic `host` keeps on `disk`.
fn chunk_files(host: Host, disk: &MemStorage) -> Vec<String> {
    support::topic::chunk_files(host, disk, CURSOR_CHUNK_PREFIX)
}

/// Opens the topic `host` keeps on `storage` and checks that it lists `names`, that the acker
/// acknowledges exactly `acked`, then closes it and checks that `verify` finds it sound with
/// no chunk record left over (the open removed them).
fn reopened_holds(host: Host, storage: &Arc<dyn Storage>, names: &[String], acked: Position) {
    let topic = open_hosted(host, storage.clone(), &config(PER_LEDGER)).expect("open");
    assert_eq!(topic.cursor_names(), names);
    let acker = topic.open_cursor(ACKER, earliest()).expect("acker");
    assert_eq!(acker.mark_delete_position().expect("mark"), Some(acked));
    drop(acker);
    topic.close().expect("close");
    sound_without_leftovers(storage, CURSOR_CHUNK_PREFIX);
}

#[test]
fn a_topic_keeps_the_earlier_version_below_a_chunk_and_writes_version_4_from_one() {
    on_each_host(|host| {
        let (disk, acked) = topic_of(host, CHUNK - 2);
        let (version, _) = record_of(host, &disk);
        let earlier = match host {
            Host::Alone => 2,
            Host::Store => 3,
        };
        assert_eq!(version, earlier);
        assert!(chunk_files(host, &disk).is_empty());
        let topic = reopen_hosted(host, &disk, PER_LEDGER);
        create(&topic, CHUNK - 2, CHUNK - 1);
        topic.close().expect("close");
        // The acker and 511 more: the tail filled, its chunk record written and pinned.
        let (version, record) = record_of(host, &disk);
        assert_eq!(version, TOPIC_CHUNKED_VERSION);
        assert_eq!(
            (record.cursors.chunks().len(), record.cursors.tail().len()),
            (1, 0)
        );
        assert_eq!(chunk_files(host, &disk).len(), 1);
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        reopened_holds(host, &storage, &names_of(0..CHUNK - 1), acked);
    });
}

/// Creation `i` costs about the same bytes at 4,000 cursors as at 1,000: the tail and a pin
/// per chunk, and one chunk record per chunk's worth of creations, not the whole table.
#[test]
fn bytes_written_per_creation_stay_flat_from_1k_to_4k_cursors() {
    on_each_host(|host| {
        let disk = MemStorage::new();
        let written = Arc::new(Written::default());
        let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk.clone()), written.clone()));
        let topic = open_hosted(host, storage.clone(), &config(PER_LEDGER)).expect("open");
        assert_flat_from_1k_to_4k(&written, CHUNK, "cursors", |from, to| {
            create(&topic, from, to);
        });
        let mut names: Vec<String> = (0..8 * CHUNK).map(cursor).collect();
        names.sort();
        assert_eq!(topic.cursor_names(), names);
        topic.close().expect("close");
        let (_, record) = record_of(host, &disk);
        assert_eq!(
            (record.cursors.chunks().len(), record.cursors.tail().len()),
            (8, 0)
        );
    });
}

/// A deletion from a full chunk writes the chunk again without the cursor and removes the one
/// it superseded; a chunk emptied by deletions has no record, and the next chunk the tail
/// fills takes its place.
#[test]
fn deletions_rewrite_their_chunk_and_an_emptied_chunk_is_reused() {
    on_each_host(|host| {
        let (disk, acked) = topic_of(host, 2 * CHUNK + 3);
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        let before = chunk_files(host, &disk);
        assert_eq!(before.len(), 2, "{before:?}");
        let topic = reopen_hosted(host, &disk, PER_LEDGER);
        // Lookups by name before the deletions: the name index is built, then follows them.
        for i in [3, 5, 600] {
            topic.open_cursor(&cursor(i), earliest()).expect("reopen");
        }
        topic.delete_cursor(&cursor(5)).expect("delete");
        let after = chunk_files(host, &disk);
        assert_eq!(after.len(), 2, "{after:?}");
        assert!(
            after.contains(&before[1]) && !after.contains(&before[0]),
            "{after:?}"
        );
        // Chunk 1 holds cursors 511..1023 (the acker is the first of chunk 0).
        for i in CHUNK - 1..2 * CHUNK - 1 {
            topic.delete_cursor(&cursor(i)).expect("delete");
        }
        let (_, record) = record_of(host, &disk);
        assert_eq!(record.cursors.chunks()[1].entries.len(), 0);
        assert_eq!(chunk_files(host, &disk).len(), 1);
        create(&topic, 2 * CHUNK + 3, 3 * CHUNK + 3);
        // A deleted name is a new cursor again; a kept one is the cursor it was.
        let acker = topic.open_cursor(ACKER, earliest()).expect("acker");
        assert_eq!(acker.mark_delete_position().expect("mark"), Some(acked));
        let before = topic.cursor_names().len();
        topic
            .open_cursor(&cursor(5), earliest())
            .expect("create again");
        topic
            .open_cursor(&cursor(2 * CHUNK), earliest())
            .expect("reopen");
        assert_eq!(topic.cursor_names().len(), before + 1);
        drop(acker);
        topic.close().expect("close");
        let (_, record) = record_of(host, &disk);
        assert_eq!(
            record.cursors.chunks().len(),
            2,
            "the emptied chunk's place was taken"
        );
        assert_eq!(chunk_files(host, &disk).len(), 2);
        let kept = (0..3 * CHUNK + 3).filter(|&i| !(CHUNK - 1..2 * CHUNK - 1).contains(&i));
        reopened_holds(host, &storage, &names_of(kept), acked);
    });
}

/// What one step of a workload did to the cursor table.
#[derive(Debug, Clone, Copy)]
enum Change {
    /// Created cursor `i`.
    Create(usize),
    /// Deleted cursor `i`.
    Delete(usize),
}

/// The power-cut sweeps run the change again with the power cut at one cut point in this many
/// (every cut point's disk is checked from the recorded run).
const RERUN_EVERY: usize = 8;

/// Opens the topic copied from `template` (power on), then makes `change` with the power cut
/// at every step of it: every image the cut leaves opens with the cursors of `before`, plus
/// the created one when its creation answered (maybe when it did not), less the deleted one
/// when its deletion answered (maybe when it did not), the acker at `acked` exactly, and
/// `verify` finds it sound. The cut disks come from one recorded run, checked against whether
/// the change had answered when the power went off; at one cut point in [`RERUN_EVERY`] the
/// change runs again with the power cut there, so what it answers once the disk fails is
/// checked too. An image met before with the same answer is not opened again.
fn cut_at_every_step(
    host: Host,
    template: &MemStorage,
    (before, acked): (&[usize], Position),
    change: Change,
) {
    let cut = (host, template, &config(PER_LEDGER));
    let apply = |topic: &Hosted| match change {
        Change::Create(i) => topic.open_cursor(&cursor(i), earliest()).map(drop),
        Change::Delete(i) => topic.delete_cursor(&cursor(i)),
    };
    cut_change_everywhere(cut, RERUN_EVERY, apply, |image, what, answered| {
        holds_after_cut(host, image, what, (before, acked), (change, answered));
    });
}

/// The topic on `image`, left by a power cut during `change` (`answered`: whether it had
/// answered `Ok`), holds what [`cut_at_every_step`] says.
fn holds_after_cut(
    host: Host,
    image: &Arc<dyn Storage>,
    cut: &str,
    (before, acked): (&[usize], Position),
    (change, answered): (Change, bool),
) {
    let (applied, not_applied) = match change {
        Change::Create(i) => (
            names_of(before.iter().copied().chain([i])),
            names_of(before.iter().copied()),
        ),
        Change::Delete(i) => (
            names_of(before.iter().copied().filter(|&c| c != i)),
            names_of(before.iter().copied()),
        ),
    };
    let topic = open_hosted(host, image.clone(), &config(PER_LEDGER))
        .unwrap_or_else(|e| panic!("{cut}: open: {e}"));
    let names = topic.cursor_names();
    topic.close().expect("close");
    if names != applied {
        assert!(names == not_applied, "{cut}: {} cursors", names.len());
        assert!(!answered, "{cut}: {change:?} answered Ok, then was undone");
    }
    reopened_holds(host, image, &names, acked);
}

#[test]
fn a_power_cut_at_every_step_of_a_creation_inside_the_tail_keeps_what_was_created() {
    on_each_host(|host| {
        let (template, acked) = topic_of(host, CHUNK + 5);
        let before: Vec<usize> = (0..CHUNK + 5).collect();
        cut_at_every_step(host, &template, (&before, acked), Change::Create(CHUNK + 5));
    });
}

#[test]
fn a_power_cut_at_every_step_of_a_creation_that_fills_the_tail_keeps_what_was_created() {
    on_each_host(|host| {
        // The acker and 1,022 more: the next creation fills the second chunk.
        let (template, acked) = topic_of(host, 2 * CHUNK - 2);
        let before: Vec<usize> = (0..2 * CHUNK - 2).collect();
        cut_at_every_step(
            host,
            &template,
            (&before, acked),
            Change::Create(2 * CHUNK - 2),
        );
    });
}

#[test]
fn a_power_cut_at_every_step_of_a_deletion_from_a_full_chunk_keeps_what_was_deleted() {
    on_each_host(|host| {
        let (template, acked) = topic_of(host, 2 * CHUNK + 3);
        let before: Vec<usize> = (0..2 * CHUNK + 3).collect();
        cut_at_every_step(host, &template, (&before, acked), Change::Delete(CHUNK + 7));
    });
}

#[test]
fn a_power_cut_at_every_step_of_the_upgrade_of_an_earlier_version_keeps_every_cursor() {
    on_each_host(|host| {
        let (template, acked) = topic_of(host, CHUNK + 3);
        support::topic::as_earlier_version(host, &template);
        let before: Vec<usize> = (0..CHUNK + 3).collect();
        let storage: Arc<dyn Storage> = Arc::new(template.durable_image());
        reopened_holds(host, &storage, &names_of(before.clone()), acked);
        cut_at_every_step(host, &template, (&before, acked), Change::Create(CHUNK + 3));
    });
}

/// Each chunk record deleted, cut, zeroed or bit-flipped, replaced by its sibling or by an
/// older copy of itself: the open refuses the topic as damaged naming that chunk record, and
/// `verify` reports damage naming the same.
#[test]
fn damage_to_any_chunk_record_is_refused_by_the_open_and_reported_by_verify() {
    on_each_host(|host| {
        let (disk, _) = topic_of(host, 2 * CHUNK + 3);
        let older = chunk_files(host, &disk);
        let older_first = file_bytes(&topic_storage(host, &disk), &older[0]);
        {
            // The first chunk written again: its older copy is kept above.
            let topic = reopen_hosted(host, &disk, PER_LEDGER);
            topic.delete_cursor(&cursor(9)).expect("delete");
            topic.close().expect("close");
        }
        let chunks = chunk_files(host, &disk);
        assert_eq!(chunks.len(), 2, "{chunks:?}");
        assert!(chunks.contains(&older[1]) && !chunks.contains(&older[0]));
        let first = chunks
            .iter()
            .find(|f| **f != older[1])
            .expect("chunk 0")
            .clone();
        chunk_damage_is_refused(host, &disk, (&first, &older[1]), older_first, PER_LEDGER);
    });
}

/// A new owner of the topic `host` keeps on `disk`, next to a former one that keeps running
/// (the lock broken): it opens the topic and deletes cursor `gone`, writing its chunk again.
fn new_owner(host: Host, disk: &MemStorage, gone: &str) -> Hosted {
    disk.break_lock();
    let topic = reopen_hosted(host, disk, PER_LEDGER);
    topic.delete_cursor(gone).expect("the new owner's deletion");
    topic
}

/// A former owner creates the cursor that fills the tail while a new owner claims the topic
/// and deletes a cursor of the first chunk (writing that chunk again), with the claim at every
/// storage operation of the former's creation: the former's creation answers `Fenced` or is
/// kept, the new owner's deletion always holds, their chunk records never share a name, and
/// the topic opens with what both answered and is sound.
#[test]
fn a_former_owners_creation_that_fills_the_tail_during_a_claim_is_refused_or_kept() {
    on_each_host(|host| {
        let (template, acked) = topic_of(host, 2 * CHUNK - 2);
        let former = cursor(2 * CHUNK - 2);
        let gone = 5;
        let run = |n: Option<u64>| {
            let disk = MemStorage::new();
            copy_into(&template, &disk);
            let hooked = support::takeover::Disk::new(Arc::new(disk.clone()));
            let old = open_hosted(host, hooked.storage.clone(), &config(PER_LEDGER))
                .expect("the former owner opens");
            let at = hooked.hook.count();
            let slot = n.map(|n| {
                let disk = disk.clone();
                hooked.arm_takeover(n, move || new_owner(host, &disk, &cursor(gone)))
            });
            let created = old.open_cursor(&former, earliest()).map(drop);
            let steps = hooked.hook.count() - at;
            (disk, old, slot, created, steps)
        };
        let (_, old, _, created, steps) = run(None);
        created.expect("the creation without a claim");
        drop(old);
        for n in 1..=steps {
            let (disk, old, slot, created, _) = run(Some(n));
            let taken = slot.expect("armed").lock().expect("slot").take();
            let newer = taken.expect("the takeover ran");
            assert!(
                matches!(created, Ok(()) | Err(Error::Fenced { .. })),
                "{host:?} step {n}: {created:?}"
            );
            let names = newer.cursor_names();
            let kept = names.contains(&former);
            assert!(
                created.is_err() || kept,
                "{host:?} step {n}: an Ok creation lost"
            );
            newer.close().expect("close");
            drop(old);
            let mut expected = names_of((0..2 * CHUNK - 2).filter(|&i| i != gone));
            if kept {
                expected.push(former.clone());
                expected.sort();
            }
            let storage: Arc<dyn Storage> = Arc::new(disk.durable_image());
            reopened_holds(host, &storage, &expected, acked);
        }
    });
}

/// Creates cursor `name` on `topic`, once more if the first attempt answers that an earlier
/// write of the topic's, whose outcome was unknown, took after all (`PreviousIo`).
fn create_after_a_failure(topic: &Hosted, name: &str) -> ackstore::Result<()> {
    match topic.open_cursor(name, earliest()) {
        Err(Error::PreviousIo) => topic.open_cursor(name, earliest()).map(drop),
        other => other.map(drop),
    }
}

/// A creation that fills the tail (its chunk record written, then the topic record) with the
/// `n`th file sync or directory sync from its start failing, for every sync it makes: the
/// creation fails, and creations of other cursors then succeed (the first fills the tail
/// again: a chunk record of the failed attempt under the same name and other bytes is this
/// owner's own leftover and is replaced); the topic reopens with exactly those cursors and is
/// sound.
#[test]
fn a_failed_sync_at_every_step_of_a_creation_that_fills_the_tail_leaves_a_topic_that_grows() {
    use support::hooked::{Hooked, for_each_sync_fault};
    on_each_host(|host| {
        // The acker and 1,021 more; one more before the faults, then the filler fills.
        let (template, acked) = topic_of(host, 2 * CHUNK - 3);
        let mut chunk_then_record_failed = false;
        for_each_sync_fault(|fault| {
            let disk = MemStorage::new();
            copy_into(&template, &disk);
            let hooked = Hooked::new(disk.clone());
            let storage: Arc<dyn Storage> = Arc::new(hooked.clone());
            let topic = open_hosted(host, storage.clone(), &config(PER_LEDGER)).expect("open");
            // A creation before the faults makes the open's claim durable.
            let first = cursor(2 * CHUNK + 10);
            topic.open_cursor(&first, earliest()).expect("create");
            let chunks_before = chunk_files(host, &disk).len();
            hooked.arm(fault);
            let filled = topic.open_cursor("filler", earliest()).map(drop);
            if !hooked.fired(fault) {
                // Past the creation's last sync of that kind.
                filled.expect("the creation without a fault");
                topic.close().expect("close");
                return false;
            }
            let this = fault;
            assert!(filled.is_err(), "{host:?} {this:?}: {filled:?}");
            let failed = hooked.hooks.failed_syncs.lock().expect("hooks").clone();
            chunk_then_record_failed |= failed.iter().any(|f| f.contains("topic."))
                && chunk_files(host, &disk).len() > chunks_before;
            let mut names = topic.cursor_names();
            for i in 0..3 {
                let other = format!("other-{i}");
                create_after_a_failure(&topic, &other)
                    .unwrap_or_else(|e| panic!("{host:?} {this:?}: {other}: {e}"));
                names.push(other);
            }
            names.sort();
            names.dedup();
            assert_eq!(topic.cursor_names(), names, "{host:?} {this:?}");
            topic.close().expect("close");
            reopened_holds(host, &storage, &names, acked);
            true
        });
        assert!(
            chunk_then_record_failed,
            "{host:?}: no fault failed the topic record after its chunk record was written"
        );
    });
}

/// Creations, reopens and deletions by name in a pseudo-random order across chunk boundaries
/// (the name index built, then following every change of the table), against a model: each
/// cursor carries the tag it was created with (a property, flushed), a reopen by name finds
/// the cursor of that name with its tag, a deleted name comes back as a new cursor, and the
/// topic reopens with the model's names.
#[test]
fn lookups_by_name_follow_creations_and_deletions_across_chunks() {
    on_each_host(|host| {
        let (disk, acked) = topic_of(host, CHUNK - 40);
        let topic = reopen_hosted(host, &disk, PER_LEDGER);
        let mut model: std::collections::BTreeMap<usize, i64> =
            (0..CHUNK - 40).map(|i| (i, -1)).collect();
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for step in 0..1_500_i64 {
            let i = (next() % (2 * CHUNK as u64)) as usize;
            let name = cursor(i);
            match (next() % 4, model.get(&i).copied()) {
                (0, Some(_)) => {
                    topic.delete_cursor(&name).expect("delete");
                    model.remove(&i);
                }
                (_, Some(tag)) => {
                    let c = topic.open_cursor(&name, earliest()).expect("reopen");
                    let found = c.properties().expect("properties").get("tag").copied();
                    assert_eq!(found.unwrap_or(-1), tag, "{host:?} step {step}: {name}");
                    c.close().expect("close");
                }
                (_, None) => {
                    let c = topic.open_cursor(&name, earliest()).expect("create");
                    assert!(c.properties().expect("properties").is_empty(), "{name}");
                    c.set_property("tag", step).expect("tag");
                    c.flush().expect("flush");
                    c.close().expect("close");
                    model.insert(i, step);
                }
            }
        }
        topic.close().expect("close");
        let (_, record) = record_of(host, &disk);
        assert!(
            !record.cursors.chunks().is_empty(),
            "the table reached a chunk"
        );
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        reopened_holds(host, &storage, &names_of(model.keys().copied()), acked);
    });
}

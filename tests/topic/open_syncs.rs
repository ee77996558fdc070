//! What a topic opened alone syncs when it opens: after a clean close nothing (its topic record
//! and every cursor record are claimed with a link, its journal's seal is the closed seal, and
//! its ledger ids are reserved on first need), and an owner that opened so keeps every flushed
//! ack at a power cut after any storage operation of its life, its first ledger created under
//! a block its record reserved.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ackstore::{CursorOptions, ManagedLedger, MemStorage, Position, Storage};
use support::crash::{Cut, Points, cut_everywhere_after, sound_images};
use support::hooked::Hooked;
use support::workload::MadeAndFlushed;

const CURSORS: usize = 3;
const ENTRIES: u64 = 60;

fn open(storage: Arc<dyn Storage>) -> ackstore::Result<ManagedLedger> {
    ManagedLedger::open_with_storage(storage, support::topic::config(16))
}

fn name(c: usize) -> String {
    format!("sub-{c}")
}

/// A topic of [`ENTRIES`] entries (several sealed ledgers) whose cursors acked a few entries
/// each and flushed, then closed cleanly. Returns the entries.
fn populate(storage: &Arc<dyn Storage>) -> Vec<Position> {
    let topic = open(storage.clone()).expect("open");
    let ps = support::topic::append_n(&topic, ENTRIES);
    for c in 0..CURSORS {
        let cursor = topic
            .open_cursor(&name(c), CursorOptions::default())
            .expect("cursor");
        for p in populated_of(&ps, c) {
            cursor.ack(p).expect("ack");
        }
        cursor.flush().expect("flush");
    }
    topic.close().expect("close");
    ps
}

fn populated_of(ps: &[Position], c: usize) -> Vec<Position> {
    ps.iter().skip(c).step_by(3).take(10).copied().collect()
}

/// Every cursor's acked entries among `ps`, as `topic` answers.
fn acked(topic: &ManagedLedger, ps: &[Position]) -> Vec<BTreeSet<Position>> {
    (0..CURSORS)
        .map(|c| {
            let cursor = topic
                .open_cursor(&name(c), CursorOptions::default())
                .expect("cursor");
            ps.iter()
                .copied()
                .filter(|p| cursor.is_acked(*p).expect("is_acked"))
                .collect()
        })
        .collect()
}

#[test]
fn a_topic_alone_reopened_after_a_clean_close_syncs_nothing() {
    let hooked = Hooked::new(MemStorage::new());
    let storage: Arc<dyn Storage> = Arc::new(hooked.clone());
    let ps = populate(&storage);
    let before = (
        hooked.hooks.syncs.load(Ordering::SeqCst),
        hooked.hooks.dir_syncs.load(Ordering::SeqCst),
    );
    let topic = open(storage.clone()).expect("reopen");
    let made = (
        hooked.hooks.syncs.load(Ordering::SeqCst) - before.0,
        hooked.hooks.dir_syncs.load(Ordering::SeqCst) - before.1,
    );
    assert_eq!(
        made,
        (0, 0),
        "ManagedLedger::open after a clean close made (file, directory) syncs {made:?}: its \
         claims are links, the closed seal is its journal's seal, its ledger ids wait for a need"
    );
    let expected: Vec<BTreeSet<Position>> = (0..CURSORS)
        .map(|c| populated_of(&ps, c).into_iter().collect())
        .collect();
    assert_eq!(acked(&topic, &ps), expected);
    topic.close().expect("close");
}

/// After a clean close, a reopen that writes nothing, then one that appends (its first ledger
/// reserves a block of ids in the record), acks, flushes twice and closes, with the power cut
/// after every storage operation: every image opens, `verify` finds no damage, every entry
/// whose sync returned is there, and every cursor answers no ack that was not made and every
/// flushed one.
#[test]
fn a_power_cut_at_every_step_of_a_topic_alone_reopened_after_a_clean_close_keeps_every_flushed_ack()
{
    let mut images = 0;
    cut_everywhere_after(
        Points::every_in_release(7),
        |disk| populate(&(Arc::new(disk.clone()) as Arc<dyn Storage>)),
        |disk, ps| {
            let mut acks = MadeAndFlushed::new(
                (0..CURSORS)
                    .map(|c| populated_of(&ps, c).into_iter().collect())
                    .collect(),
            );
            let mut synced = Vec::new();
            let storage: Arc<dyn Storage> = Arc::new(disk.clone());
            let _ = (|| -> ackstore::Result<()> {
                open(storage.clone())?.close()?;
                let topic = open(storage.clone())?;
                let appended: Vec<Position> = (0..20)
                    .map(|_| topic.append(b"later"))
                    .collect::<ackstore::Result<_>>()?;
                topic.sync()?;
                synced = appended.clone();
                for round in 0..2 {
                    let mut made = Vec::new();
                    for c in 0..CURSORS {
                        let cursor = topic.open_cursor(&name(c), CursorOptions::default())?;
                        let batch: Vec<Position> = ps
                            .iter()
                            .chain(&appended)
                            .skip(41 + c + round)
                            .step_by(4)
                            .copied()
                            .collect();
                        for p in &batch {
                            acks.made[c].insert(*p);
                            cursor.ack(*p)?;
                        }
                        cursor.flush()?;
                        made.push(batch);
                    }
                    for (c, batch) in made.into_iter().enumerate() {
                        acks.flushed[c].extend(batch);
                    }
                }
                topic.close()
            })();
            (ps, synced, acks)
        },
        |disk, cut: Cut, (ps, synced, acks)| {
            let all: Vec<Position> = ps.iter().chain(&synced).copied().collect();
            for storage in sound_images(disk, cut) {
                images += 1;
                let topic = open(storage).unwrap_or_else(|e| panic!("{cut:?}: open: {e}"));
                for p in &all {
                    topic
                        .read(*p)
                        .unwrap_or_else(|e| panic!("{cut:?}: synced entry {p} lost: {e}"));
                }
                acks.check(&acked(&topic, &all), &format!("{cut:?}"));
                topic
                    .close()
                    .unwrap_or_else(|e| panic!("{cut:?}: close: {e}"));
            }
        },
    );
    assert!(images > 20, "{images} images checked");
}

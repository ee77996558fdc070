//! What `Store::open` syncs. Its claim is a link of the catalog's current version (nothing
//! written or synced). Its seal is a catalog write, durable (the record's data, then the
//! directory), made only when a former owner could still append to the newest segment: not
//! after a clean close, whose recorded length is where every later open stops. The journal's
//! newest segment is synced at open only when it holds bytes past what a finished sync covered
//! (its slots, or the length a clean close recorded): a former owner's tick that never synced.
//! Either way, what the open recovered survives a power cut right after it returns, and an
//! owner that opened after a clean close keeps every flushed ack at a power cut anywhere.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ackstore::{Cursor, CursorOptions, Error, MemStorage, Position, Storage, Store};
use support::crash::{Cut, Points, cut_everywhere_after, sound_images};
use support::hooked::Hooked;
use support::workload::MadeAndFlushed;

const CURSORS: usize = 3;
const ENTRIES: u64 = 60;
const TOPIC: &str = "persistent://t/ns/open-syncs";

fn open(storage: Arc<dyn Storage>) -> ackstore::Result<Store> {
    Store::open_with_storage(storage, support::topic::store_config(1_000))
}

fn name(c: usize) -> String {
    format!("sub-{c}")
}

/// A topic of [`ENTRIES`] entries whose cursors acked a few entries each and flushed; the store
/// is left open.
fn populate(storage: &Arc<dyn Storage>) -> (Store, Vec<Position>) {
    let store = open(storage.clone()).expect("open");
    let topic = store.topic(TOPIC).expect("topic");
    let ps = support::topic::append_n(&topic, ENTRIES);
    for c in 0..CURSORS {
        let cursor = topic
            .open_cursor(&name(c), CursorOptions::default())
            .expect("cursor");
        for p in ps.iter().skip(c).step_by(3).take(10) {
            cursor.ack(*p).expect("ack");
        }
    }
    store.flush_all().expect("flush");
    (store, ps)
}

/// The topic's cursors, opened in `store`.
fn cursors(store: &Store) -> Vec<Cursor> {
    let topic = store.topic(TOPIC).expect("topic");
    (0..CURSORS)
        .map(|c| {
            topic
                .open_cursor(&name(c), CursorOptions::default())
                .expect("cursor")
        })
        .collect()
}

/// Every cursor's acked entries among `ps`, as `store` answers.
fn acked(store: &Store, ps: &[Position]) -> Vec<BTreeSet<Position>> {
    cursors(store)
        .iter()
        .map(|cursor| {
            ps.iter()
                .copied()
                .filter(|p| cursor.is_acked(*p).expect("is_acked"))
                .collect()
        })
        .collect()
}

/// File and directory syncs `Store::open` makes of the store `populate` left, after `leave`
/// ended the former owner.
fn open_syncs(leave: impl FnOnce(Store, &MemStorage)) -> (u64, u64) {
    let hooked = Hooked::new(MemStorage::new());
    let storage: Arc<dyn Storage> = Arc::new(hooked.clone());
    let (store, _) = populate(&storage);
    leave(store, &hooked.disk);
    let (files, dirs) = (
        hooked.hooks.syncs.load(Ordering::SeqCst),
        hooked.hooks.dir_syncs.load(Ordering::SeqCst),
    );
    let store = open(storage).expect("reopen");
    let made = (
        hooked.hooks.syncs.load(Ordering::SeqCst) - files,
        hooked.hooks.dir_syncs.load(Ordering::SeqCst) - dirs,
    );
    store.close().expect("close");
    made
}

#[test]
fn a_restart_after_a_clean_close_syncs_nothing() {
    let made = open_syncs(|store, _| store.close().expect("close"));
    assert_eq!(
        made,
        (0, 0),
        "Store::open after a clean close made (file, directory) syncs {made:?}: its claim is a \
         link, the close's recorded length is the newest segment's seal, and the segment was \
         synced whole by the close"
    );
}

#[test]
fn a_restart_after_a_kill_past_every_ok_flush_syncs_only_its_seal() {
    let made = open_syncs(|store, disk| {
        // The process dies after its last flush returned: nothing of it runs again.
        std::mem::forget(store);
        disk.break_lock();
    });
    assert_eq!(
        made,
        (1, 1),
        "Store::open after a kill made (file, directory) syncs {made:?}: the seal's catalog \
         write syncs its data and the directory (the former owner may still append); every \
         tick of the former owner had synced, and its slots claim the whole segment"
    );
}

/// The acks [`populate`] made, per cursor.
fn populated(ps: &[Position]) -> Vec<BTreeSet<Position>> {
    (0..CURSORS)
        .map(|c| ps.iter().skip(c).step_by(3).take(10).copied().collect())
        .collect()
}

/// The acks each cursor makes after a restart in the tests below (none of them acked before).
fn later_acks(ps: &[Position], c: usize) -> Vec<Position> {
    ps.iter().skip(41 + c).step_by(4).copied().collect()
}

/// An owner opens after a clean close (its claim a link, no seal written), and a second
/// owner claims the store while the first still runs without having written anything: the
/// first one's tick is refused (`Fenced`) and never counts, the second owner answers the clean
/// close's state, and every later open and `verify` agree on it.
#[test]
fn an_owner_that_opened_after_a_clean_close_is_fenced_by_the_next_and_its_late_tick_never_counts() {
    let disk = MemStorage::new();
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let (closed, ps) = populate(&storage);
    closed.close().expect("close");
    let truth = populated(&ps);

    let former = open(storage.clone()).expect("the owner after the clean close");
    let former_cursors = cursors(&former);
    for (c, cursor) in former_cursors.iter().enumerate() {
        for p in later_acks(&ps, c) {
            cursor.ack(p).expect("ack");
        }
    }
    disk.break_lock();
    let new = open(storage.clone()).expect("the next owner claims the store");
    assert_eq!(
        acked(&new, &ps),
        truth,
        "the next owner answers the close's state"
    );
    let late = former.flush_all();
    assert!(
        matches!(late, Err(Error::Fenced { .. })),
        "the former owner's tick after the claim: {late:?}"
    );
    let new_cursors = cursors(&new);
    let mut expected = truth.clone();
    for (c, cursor) in new_cursors.iter().enumerate() {
        cursor.ack(ps[c]).expect("ack");
        expected[c].insert(ps[c]);
    }
    new.flush_all().expect("the owner's flush");
    drop(new_cursors);
    new.close().expect("close");
    std::mem::forget((former_cursors, former));

    let report = ackstore::check::verify(&storage).expect("verify runs");
    assert!(report.is_sound(), "{report}");
    let later = open(storage).expect("a later owner");
    assert_eq!(
        acked(&later, &ps),
        expected,
        "a later open reads the owner's acks and none of the fenced tick's"
    );
    later.close().expect("close");
}

/// Owners that open after a clean close (their claims links, no seal written; the first open
/// without a write at all), ack, flush (the first tick lists a segment: the catalog's first
/// write since the claims), ack again and close, with the power cut after every storage
/// operation. Every image a cut leaves (the durable bytes, and every unsynced byte kept too)
/// opens, `verify` finds no damage in it, and every cursor answers no ack that was not made and
/// every ack whose flush returned `Ok`.
#[test]
fn a_power_cut_at_every_step_of_a_restart_after_a_clean_close_keeps_every_flushed_ack() {
    let mut images = 0;
    cut_everywhere_after(
        Points::every_in_release(7),
        |disk| {
            let storage: Arc<dyn Storage> = Arc::new(disk.clone());
            let (store, ps) = populate(&storage);
            store.close().expect("close");
            ps
        },
        |disk, ps| {
            let mut acks = MadeAndFlushed::new(populated(&ps));
            let storage: Arc<dyn Storage> = Arc::new(disk.clone());
            let _ = (|| -> ackstore::Result<()> {
                // A restart that writes nothing, then one that writes.
                open(storage.clone())?.close()?;
                let store = open(storage.clone())?;
                let topic = store.topic(TOPIC)?;
                for round in 0..2 {
                    let mut made = Vec::new();
                    for c in 0..CURSORS {
                        let cursor = topic.open_cursor(&name(c), CursorOptions::default())?;
                        let batch: Vec<Position> = later_acks(&ps, c)
                            .into_iter()
                            .skip(round)
                            .step_by(2)
                            .collect();
                        for p in &batch {
                            acks.made[c].insert(*p);
                            cursor.ack(*p)?;
                        }
                        made.push(batch);
                    }
                    store.flush_all()?;
                    for (c, batch) in made.into_iter().enumerate() {
                        acks.flushed[c].extend(batch);
                    }
                }
                store.close()
            })();
            (ps, acks)
        },
        |disk, cut: Cut, (ps, acks)| {
            for storage in sound_images(disk, cut) {
                images += 1;
                let store = open(storage).unwrap_or_else(|e| panic!("{cut:?}: open: {e}"));
                acks.check(&acked(&store, &ps), &format!("{cut:?}"));
                store
                    .close()
                    .unwrap_or_else(|e| panic!("{cut:?}: close: {e}"));
            }
        },
    );
    assert!(images > 20, "{images} images checked");
}

/// A former owner dies at each step of a tick (its writes reach the page cache, its sync may
/// not run); the next owner opens and answers; then the power goes. Every answer of the next
/// owner is given again after the power cut: what its open recovered from the former owner's
/// unsynced tick was made durable before the open returned.
#[test]
fn what_an_open_recovered_from_an_unsynced_tick_survives_a_power_cut_right_after_it() {
    let mut unsynced_tails = 0;
    for n in 0..30 {
        let disk = MemStorage::new();
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        let (old, ps) = populate(&storage);
        let cursors = cursors(&old);
        for (c, cursor) in cursors.iter().enumerate() {
            for p in ps.iter().skip(31 + c).step_by(2) {
                cursor.ack(*p).expect("ack");
            }
        }
        disk.fail_after(Some(n));
        let _ = old.flush_all();
        std::mem::forget((cursors, old));
        disk.fail_after(None);
        let live_segment_bytes = segment_bytes(&disk, false);
        if live_segment_bytes != segment_bytes(&disk, true) {
            unsynced_tails += 1;
        }
        disk.break_lock();
        let new = open(Arc::new(disk.clone())).expect("the next owner opens");
        let answered = acked(&new, &ps);
        std::mem::forget(new);
        let image = disk.durable_image();
        let reopened = open(Arc::new(image))
            .unwrap_or_else(|e| panic!("n={n}: open after the power cut: {e:?}"));
        assert_eq!(
            acked(&reopened, &ps),
            answered,
            "n={n}: the acks the next owner answered with changed across a power cut right \
             after its open"
        );
    }
    assert!(
        unsynced_tails > 0,
        "no step left a tick's bytes unsynced: the test checked nothing"
    );
}

/// The bytes of every journal segment: the live image, or (`durable`) what a power cut keeps.
fn segment_bytes(disk: &MemStorage, durable: bool) -> Vec<Vec<u8>> {
    let image = if durable {
        disk.durable_image()
    } else {
        disk.clone()
    };
    let mut names: Vec<String> = image
        .list()
        .expect("list")
        .into_iter()
        .filter(|n| n.starts_with("journal-"))
        .collect();
    names.sort();
    names
        .iter()
        .map(|n| image.live_bytes(n).unwrap_or_default())
        .collect()
}

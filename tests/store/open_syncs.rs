//! What `Store::open` syncs. Its claim and its seal are catalog writes, each durable (the
//! record's data, then the directory). The journal's newest segment is synced at open only when
//! it holds bytes past what a finished sync covered (its slots, or the length a clean close
//! recorded): a former owner's tick that never synced. Either way, what the open recovered
//! survives a power cut right after it returns.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ackstore::{Cursor, CursorOptions, MemStorage, Position, Storage, Store};
use support::hooked::Hooked;

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
fn a_restart_after_a_clean_close_syncs_only_its_claim_and_its_seal() {
    let made = open_syncs(|store, _| store.close().expect("close"));
    assert_eq!(
        made,
        (2, 2),
        "Store::open after a clean close made (file, directory) syncs {made:?}: the claim's and \
         the seal's catalog writes sync their data and the directory; the journal's newest \
         segment was synced whole by the close"
    );
}

#[test]
fn a_restart_after_a_kill_past_every_ok_flush_syncs_only_its_claim_and_its_seal() {
    let made = open_syncs(|store, disk| {
        // The process dies after its last flush returned: nothing of it runs again.
        std::mem::forget(store);
        disk.break_lock();
    });
    assert_eq!(
        made,
        (2, 2),
        "Store::open after a kill made (file, directory) syncs {made:?}: every tick of the \
         former owner had synced, and its slots claim the whole segment"
    );
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

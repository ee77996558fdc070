//! A former owner's open racing a new owner's claim through its sweep of leftovers: the former
//! owner, whose lock was broken, finds a cursor record's tombstone current (a deletion cut
//! short of a record a creation cut short left), and is held before it removes the record's
//! files; meanwhile the new owner claims the topic, sweeps the same leftovers and creates a
//! cursor. The former owner's removals must leave the new owner's record (the new cursor never
//! takes the orphan's id, which the table never listed): `verify` finds the record and nothing
//! unused, and the cursor keeps its flushed ack through a reopen.

use crate::support;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};

use ackstore::{ManagedLedger, MemStorage, Position, Storage};
use support::hooked::Hooked;
use support::topic::{append_n, config, earliest};

const PER_LEDGER: u64 = 4;
/// The record a creation cut short left and whose deletion was then cut short too.
const ORPHAN: &str = "cursor-1";
/// Its tombstone, over its version 1.
const TOMBSTONE: &str = "cursor-1.00000000000000000002.meta";

/// A topic alone whose cursor `b` (id 0) holds its flushed ack on the first entry, and the
/// files of [`ORPHAN`] (id 1, the next the table gives out): version 1 and its tombstone.
fn prepared() -> (MemStorage, Position) {
    let disk = MemStorage::new();
    let topic =
        ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(PER_LEDGER)).expect("open");
    let first = append_n(&topic, 5)[0];
    let cursor = topic.open_cursor("b", earliest()).expect("cursor");
    cursor.ack(first).expect("ack");
    cursor.flush().expect("flush");
    topic.close().expect("close");
    let record_of_b = disk
        .list()
        .expect("list")
        .into_iter()
        .find(|f| f.starts_with("cursor-0.") && f.ends_with(".meta"))
        .expect("cursor b's record");
    let version_1 = format!("{ORPHAN}.00000000000000000001.meta");
    for (name, bytes) in [
        (
            version_1.as_str(),
            disk.live_bytes(&record_of_b).expect("bytes"),
        ),
        (TOMBSTONE, Vec::new()),
    ] {
        drop(disk.create(name).expect("create"));
        disk.set_bytes(name, bytes).expect("set bytes");
    }
    disk.sync_dir().expect("sync");
    (disk, first)
}

/// How many lookups of [`TOMBSTONE`] an open of `disk` makes.
fn lookups_of_the_tombstone(disk: &MemStorage) -> u64 {
    const MANY: u64 = 1 << 40;
    let hooked = Hooked::new(disk.clone());
    let barriers = Arc::new((Barrier::new(2), Barrier::new(2)));
    *hooked.hooks.hold_after_lookup.lock().unwrap() = Some((TOMBSTONE.into(), barriers));
    hooked.hooks.pass_lookups.store(MANY, Ordering::SeqCst);
    let topic = ManagedLedger::open_with_storage(Arc::new(hooked.clone()), config(PER_LEDGER))
        .expect("open");
    topic.close().expect("close");
    MANY - hooked.hooks.pass_lookups.load(Ordering::SeqCst)
}

#[test]
fn a_former_owners_sweep_held_before_its_removals_leaves_the_record_of_a_new_owners_cursor() {
    let lookups = lookups_of_the_tombstone(&prepared().0);
    assert!(lookups > 0, "the open never looked the tombstone up");
    let (disk, first) = prepared();
    let hooked = Hooked::new(disk.clone());
    let barriers = Arc::new((Barrier::new(2), Barrier::new(2)));
    // The last lookup is the read that finds the tombstone current, just before the removals.
    *hooked.hooks.hold_after_lookup.lock().unwrap() = Some((TOMBSTONE.into(), barriers.clone()));
    hooked
        .hooks
        .pass_lookups
        .store(lookups - 1, Ordering::SeqCst);
    let former = std::thread::spawn(move || {
        ManagedLedger::open_with_storage(Arc::new(hooked), config(PER_LEDGER))
            .map(|topic| topic.close())
    });
    barriers.0.wait();
    disk.break_lock();
    let owner = ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(PER_LEDGER))
        .expect("new owner");
    let cursor = owner.open_cursor("x", earliest()).expect("cursor x");
    cursor.ack(first).expect("ack");
    cursor.flush().expect("flush");
    barriers.1.wait();
    // The former owner's open or close may fail (it was fenced): what it removed counts.
    let _ = former.join().expect("former owner");
    owner.close().expect("close");
    let new_records: Vec<String> = disk
        .list()
        .expect("list")
        .into_iter()
        .filter(|f| f.starts_with("cursor-") && !f.starts_with("cursor-0."))
        .filter(|f| disk.live_bytes(f).is_some_and(|b| !b.is_empty()))
        .collect();
    assert_eq!(new_records.len(), 1, "cursor x's record: {new_records:?}");
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let report = ackstore::check::verify(&storage).expect("verify");
    assert!(
        report.is_sound() && report.unused.is_empty(),
        "after both owners: {report}"
    );
    disk.break_lock();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(PER_LEDGER))
        .expect("reopen");
    for name in ["b", "x"] {
        let cursor = topic.open_cursor(name, earliest()).expect("cursor");
        assert!(
            cursor.is_acked(first).expect("is_acked"),
            "cursor {name} lost its flushed ack"
        );
    }
    topic.close().expect("close");
}

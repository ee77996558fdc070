//! A former owner's open racing a new owner's claim through its sweep of leftovers: the former
//! owner, whose lock was broken, finds a cursor record's tombstone current (a deletion cut
//! short of a record a creation cut short left), and is held before it removes the record's
//! files; meanwhile the new owner claims the topic, sweeps the same leftovers and creates a
//! cursor. The former owner's removals must leave the new owner's record (the new cursor never
//! takes the orphan's id, which the table never listed): `verify` finds the record and nothing
//! unused, and the cursor keeps its flushed ack through a reopen. And a file of a record linked
//! between the open's listing and its sweep survives the sweep, which removes only the names
//! its listing judged leftovers.

use crate::support;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};

use ackstore::{ManagedLedger, MemStorage, Position, Storage};
use support::hooked::{Held, Hooked};
use support::topic::{Host, append_n, config, earliest, open_hosted};

const PER_LEDGER: u64 = 4;
/// The record a creation cut short left and whose deletion was then cut short too.
const ORPHAN: &str = "cursor-1";
/// Its tombstone, over its version 1.
const TOMBSTONE: &str = "cursor-1.00000000000000000002.meta";

/// The topic `host` keeps on `disk` with 5 entries, its cursor `b` (id 0) holding its flushed
/// ack on the first, closed; returns that entry and the name of `b`'s record.
fn flushed_cursor_b(host: Host, disk: &MemStorage) -> (Position, String) {
    let hosted = open_hosted(host, Arc::new(disk.clone()), &config(PER_LEDGER)).expect("open");
    let first = append_n(&hosted, 5)[0];
    let cursor = hosted.open_cursor("b", earliest()).expect("cursor");
    cursor.ack(first).expect("ack");
    cursor.flush().expect("flush");
    drop(cursor);
    hosted.close().expect("close");
    let record_of_b = disk
        .list()
        .expect("list")
        .into_iter()
        .find(|f| f.contains("cursor-0.") && f.ends_with(".meta"))
        .expect("cursor b's record");
    (first, record_of_b)
}

/// A topic alone whose cursor `b` (id 0) holds its flushed ack on the first entry, and the
/// files of [`ORPHAN`] (id 1, the next the table gives out): version 1 and its tombstone.
fn prepared() -> (MemStorage, Position) {
    let disk = MemStorage::new();
    let (first, record_of_b) = flushed_cursor_b(Host::Alone, &disk);
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

/// `disk` behind hooks that hold the lookup of `name` after `pass` others of it, on the
/// barriers returned.
fn held_after_lookups(disk: &MemStorage, name: &str, pass: u64) -> (Hooked, Held) {
    let hooked = Hooked::new(disk.clone());
    let barriers = Arc::new((Barrier::new(2), Barrier::new(2)));
    *hooked.hooks.hold_after_lookup.lock().unwrap() = Some((name.into(), barriers.clone()));
    hooked.hooks.pass_lookups.store(pass, Ordering::SeqCst);
    (hooked, barriers)
}

/// How many lookups of [`TOMBSTONE`] an open of `disk` makes.
fn lookups_of_the_tombstone(disk: &MemStorage) -> u64 {
    const MANY: u64 = 1 << 40;
    let (hooked, _) = held_after_lookups(disk, TOMBSTONE, MANY);
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
    // The last lookup is the read that finds the tombstone current, just before the removals.
    let (hooked, barriers) = held_after_lookups(&disk, TOMBSTONE, lookups - 1);
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

/// A store's topic whose cursor `b` (id 0) holds its flushed ack on the first entry, and a
/// tombstone alone of cursor id 1 (a deletion cut short after its version 1 was removed),
/// which no open but a sweep's removes; returns the tombstone's name and its record's
/// version 1 (not on the disk).
fn store_with_a_tombstone(disk: &MemStorage) -> (String, String) {
    let (_, record_of_b) = flushed_cursor_b(Host::Store, disk);
    let version_1 = record_of_b.replace("cursor-0.", "cursor-1.");
    let tombstone = version_1.replace(".00000000000000000001.", ".00000000000000000002.");
    drop(disk.create(&tombstone).expect("create"));
    disk.sync_dir().expect("sync");
    (tombstone, version_1)
}

/// The open's sweep of a store's topic held at its last lookup of a tombstone (the read that
/// finds it current, just before its removals): a version of that record linked meanwhile
/// (by another writer) is not among the names the open's listing judged leftovers, and
/// survives the sweep; the tombstone goes.
#[test]
fn a_record_file_linked_between_the_opens_listing_and_its_sweep_survives_the_sweep() {
    const MANY: u64 = 1 << 40;
    let counted = MemStorage::new();
    let (tombstone, _) = store_with_a_tombstone(&counted);
    let (hooked, _) = held_after_lookups(&counted, &tombstone, MANY);
    let hosted =
        open_hosted(Host::Store, Arc::new(hooked.clone()), &config(PER_LEDGER)).expect("open");
    let lookups = MANY - hooked.hooks.pass_lookups.load(Ordering::SeqCst);
    hosted.close().expect("close");
    assert!(lookups > 0, "the open never looked the tombstone up");

    let disk = MemStorage::new();
    let (tombstone, version_1) = store_with_a_tombstone(&disk);
    let (hooked, barriers) = held_after_lookups(&disk, &tombstone, lookups - 1);
    let opener =
        std::thread::spawn(move || open_hosted(Host::Store, Arc::new(hooked), &config(PER_LEDGER)));
    barriers.0.wait();
    let record_of_b = version_1.replace("cursor-1.", "cursor-0.");
    drop(disk.create(&version_1).expect("create"));
    disk.set_bytes(&version_1, disk.live_bytes(&record_of_b).expect("bytes"))
        .expect("set bytes");
    barriers.1.wait();
    let hosted = opener.join().expect("opener").expect("open");
    let names = disk.list().expect("list");
    assert!(
        names.contains(&version_1),
        "the sweep removed {version_1}, linked after its listing: {names:?}"
    );
    assert!(
        !names.contains(&tombstone),
        "the sweep left the tombstone it listed: {names:?}"
    );
    hosted.close().expect("close");
}

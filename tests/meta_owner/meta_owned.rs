//! The metadata store of a directory's owner: its reads and writes look names up instead of
//! listing the directory, so creating a topic's cursors costs the same per cursor with 10 or
//! 1,000 of them, and a store's open (its catalog's claim) costs the same with 1 or 60 topics;
//! and it holds what a plain model holds across reopens and power cuts at any
//! storage operation.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;

use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::{CursorOptions, Error, ManagedLedger, MemStorage, Storage, Store};
use support::crash::torn_image;
use support::tap::{Hook, Listings, Op, Tap};
use support::topic::{config, store_config};
use support::workload::Rng;

/// Listings made while `cursors` cursors are created on a topic opened alone.
fn listings_creating_cursors_of_a_topic(cursors: usize) -> u64 {
    let listings = Arc::new(Listings::default());
    let storage = Tap::new(Arc::new(MemStorage::new()), listings.clone());
    let topic = ManagedLedger::open_with_storage(Arc::new(storage), config(1_000)).unwrap();
    let before = listings.count();
    for c in 0..cursors {
        topic
            .open_cursor(&format!("sub-{c}"), CursorOptions::default())
            .unwrap();
    }
    let made = listings.count() - before;
    assert_eq!(topic.cursor_names().len(), cursors);
    topic.close().unwrap();
    made
}

/// Listings made while `cursors` cursors are created on a topic of a store.
fn listings_creating_cursors_of_a_store_topic(cursors: usize) -> u64 {
    let listings = Arc::new(Listings::default());
    let storage = Tap::new(Arc::new(MemStorage::new()), listings.clone());
    let store = Store::open_with_storage(Arc::new(storage), store_config(1_000)).unwrap();
    let topic = store.topic("t").unwrap();
    let before = listings.count();
    for c in 0..cursors {
        topic
            .open_cursor(&format!("sub-{c}"), CursorOptions::default())
            .unwrap();
    }
    let made = listings.count() - before;
    assert_eq!(topic.cursor_names().len(), cursors);
    store.close().unwrap();
    made
}

/// Counts every storage operation made through a [`Tap`], by kind.
#[derive(Default)]
struct Operations(std::sync::Mutex<BTreeMap<&'static str, u64>>);

impl Hook for Operations {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        *self.0.lock().unwrap().entry(op.kind()).or_default() += 1;
        Ok(())
    }
}

/// The storage operations of a store's open (lock, claim, journal seal) over a store of
/// `topics` topics, each holding a cursor, on storage without directories (every topic's
/// records in the store's own namespace, as on RADOS).
fn operations_opening_a_store_of(topics: usize) -> BTreeMap<&'static str, u64> {
    let disk = MemStorage::new();
    {
        let store = Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000)).unwrap();
        for t in 0..topics {
            let topic = store.topic(&format!("t{t}")).unwrap();
            topic.open_cursor("sub", CursorOptions::default()).unwrap();
        }
        store.close().unwrap();
    }
    let ops = Arc::new(Operations::default());
    let store = Store::open_with_storage(
        Arc::new(Tap::new(Arc::new(disk), ops.clone())),
        store_config(1_000),
    )
    .unwrap();
    let made = ops.0.lock().unwrap().clone();
    store.close().unwrap();
    made
}

#[test]
fn a_stores_open_costs_the_same_storage_operations_with_one_topic_or_sixty() {
    assert_eq!(
        operations_opening_a_store_of(60),
        operations_opening_a_store_of(1),
        "a store's open grows with the topics it does not open"
    );
}

#[test]
fn creating_a_topics_cursors_lists_its_directory_a_bounded_number_of_times() {
    for (what, listings) in [
        (
            "a topic opened alone",
            listings_creating_cursors_of_a_topic as fn(usize) -> u64,
        ),
        (
            "a topic of a store",
            listings_creating_cursors_of_a_store_topic,
        ),
    ] {
        let few = listings(10);
        let many = listings(300);
        assert!(
            many <= few + 2,
            "{what}: {few} listings for 10 cursors, {many} for 300: a listing per cursor makes \
             a topic's set-up quadratic"
        );
    }
}

#[test]
fn an_owned_store_lists_its_directory_once_however_many_records_it_writes() {
    let listings = Arc::new(Listings::default());
    let disk = MemStorage::new();
    let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk.clone()), listings.clone()));
    let lock = storage.lock().unwrap();
    let store = FileMetaStore::owned(storage.clone(), &lock);
    for id in 0..500 {
        let name = format!("cursor-{id}");
        assert_eq!(store.get(&name).unwrap(), None);
        let v1 = store.put(&name, None, b"created").unwrap();
        let v2 = store.put(&name, Some(v1), b"moved").unwrap();
        assert_eq!(store.get(&name).unwrap(), Some((v2, b"moved".to_vec())));
        assert!(store.is_current(&name, v2).unwrap());
    }
    // The listing that learns the directory (it serves the sweep before the first write too),
    // the one after the first creation's link, and the one after the first link over a
    // version, which learns the directory again: until a listing taken after the claim or
    // write that fences former owners, a link is checked by a listing, not by name lookups.
    assert!(listings.count() <= 3, "{} listings", listings.count());
    // Each record keeps one name.
    let names = disk.list().unwrap();
    assert_eq!(names.len(), 500, "{names:?}");
    // What another store reads by listing agrees.
    let plain = FileMetaStore::new(Arc::new(disk.clone()));
    assert_eq!(plain.list().unwrap().len(), 500);
    assert_eq!(
        plain.get("cursor-499").unwrap(),
        Some((2, b"moved".to_vec()))
    );
}

/// One record's state in the model: `(version, bytes)`.
type Model = BTreeMap<String, (u64, Vec<u8>)>;

/// Names of the model workload's records.
const NAMES: [&str; 5] = ["topic", "cursor-1", "cursor-2", "cursor-7", "cursor-30"];

/// What an operation that failed midway may have left: the record before it or after it.
struct InFlight {
    name: String,
    before: Option<(u64, Vec<u8>)>,
    after: Option<(u64, Vec<u8>)>,
}

/// Runs random puts, deletes and reads of [`NAMES`] on an owned store over `disk` until the
/// power goes (or `ops` operations), checking every read against `model`; returns the
/// operation in flight when the power went.
fn run_until_cut(
    disk: &MemStorage,
    model: &mut Model,
    rng: &mut Rng,
    ops: usize,
    round: usize,
) -> Option<InFlight> {
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let lock = storage.lock().unwrap();
    let store = FileMetaStore::owned(storage, &lock);
    for op in 0..ops {
        let name = NAMES[rng.index(NAMES.len())].to_string();
        let before = model.get(&name).cloned();
        match rng.below(4) {
            0 => match store.get(&name) {
                Ok(found) => assert_eq!(found, before, "round {round}: get {name}"),
                Err(Error::Io { .. }) => return None,
                Err(e) => panic!("round {round}: get {name}: {e}"),
            },
            1 if before.is_some() => {
                let version = before.as_ref().map_or(0, |(v, _)| *v);
                match store.delete(&name, version) {
                    Ok(()) => {
                        model.remove(&name);
                    }
                    Err(Error::Io { .. }) => {
                        return Some(InFlight {
                            name,
                            before,
                            after: None,
                        });
                    }
                    Err(e) => panic!("round {round}: delete {name}: {e}"),
                }
            }
            _ => {
                let bytes = format!("round {round} op {op}").into_bytes();
                let expected = before.as_ref().map(|(v, _)| *v);
                let after = (expected.map_or(1, |v| v + 1), bytes.clone());
                match store.put(&name, expected, &bytes) {
                    Ok(version) => {
                        assert_eq!(version, after.0, "round {round}: put {name}");
                        model.insert(name, after);
                    }
                    Err(Error::Io { .. }) => {
                        return Some(InFlight {
                            name,
                            before,
                            after: Some(after),
                        });
                    }
                    Err(e) => panic!("round {round}: put {name}: {e}"),
                }
            }
        }
    }
    None
}

#[test]
fn an_owned_store_agrees_with_a_model_across_reopens_and_power_cuts() {
    let mut rng = Rng::new(0x6d65_7461);
    let mut disk = MemStorage::new();
    let mut model = Model::new();
    let mut cut_midway = 0;
    for round in 0..300 {
        disk.fail_after(Some(rng.below(60)));
        let in_flight = run_until_cut(&disk, &mut model, &mut rng, 40, round);
        disk.fail_after(None);
        disk = match round % 3 {
            0 => disk.durable_image(),
            1 => torn_image(&disk, |unsynced| unsynced / 2),
            _ => disk.crash_image(|_, _, live| live.to_vec()),
        };
        // The record in flight reads as before or after the operation; the others as the
        // model says, to an owned store and to one that lists.
        let lock = disk.lock().unwrap();
        let owned = FileMetaStore::owned(Arc::new(disk.clone()), &lock);
        let plain = FileMetaStore::new(Arc::new(disk.clone()));
        if let Some(InFlight {
            name,
            before,
            after,
        }) = in_flight
        {
            cut_midway += 1;
            let found = owned.get(&name).unwrap();
            assert!(
                found == before || found == after,
                "round {round}: {name} is {found:?}, neither {before:?} nor {after:?}"
            );
            match found {
                Some(state) => model.insert(name, state),
                None => model.remove(&name),
            };
        }
        for name in NAMES {
            let expected = model.get(name).cloned();
            assert_eq!(owned.get(name).unwrap(), expected, "round {round}: {name}");
            assert_eq!(plain.get(name).unwrap(), expected, "round {round}: {name}");
        }
        let listed: Vec<String> = model.keys().cloned().collect();
        assert_eq!(plain.list().unwrap(), listed, "round {round}");
        drop(lock);
        // Names stay bounded: after the next owner's first write, one name per record.
        if round % 10 == 9 {
            let lock = disk.lock().unwrap();
            let owned = FileMetaStore::owned(Arc::new(disk.clone()), &lock);
            let current = owned.get("topic").unwrap().map(|(v, _)| v);
            let version = owned.put("topic", current, b"settled").unwrap();
            model.insert("topic".into(), (version, b"settled".to_vec()));
            assert_eq!(
                disk.list().unwrap().len(),
                model.len(),
                "round {round}: {:?}",
                disk.list().unwrap()
            );
        }
    }
    assert!(
        cut_midway > 100,
        "only {cut_midway} cuts fell inside a write"
    );
}

/// One write of a former owner's record (an owned store that has written it before, so it finds
/// it by name) with a new owner, its lock broken, writing the record three times right after
/// the former's `n`-th storage operation (each write removes the version it replaced, so the
/// former's next version and the one above it may be free names again). Returns the former's
/// operations and any failure: a write that returns `Ok` is the record afterwards, or the one
/// the new owner built on; a refused one is `Fenced` and leaves the new owner's record.
fn a_new_owner_writes_during_a_former_owners_write(n: u64) -> (u64, Option<String>) {
    let disk = MemStorage::new();
    let hooked = support::takeover::Disk::new(Arc::new(disk.clone()));
    let lock = hooked.storage.lock().unwrap();
    let former = FileMetaStore::owned(hooked.storage.clone(), &lock);
    let v1 = former.put("topic", None, b"first").unwrap();
    let v2 = former.put("topic", Some(v1), b"second").unwrap();
    let newer = disk.clone();
    let slot = hooked.arm_takeover(n, move || {
        newer.break_lock();
        let lock = newer.lock().unwrap();
        let owner = FileMetaStore::owned(Arc::new(newer.clone()), &lock);
        let read = owner.get("topic").unwrap().expect("the record");
        let mut at = read.0;
        let mut written = Vec::new();
        for i in 0..3 {
            let bytes = format!("newer {i}").into_bytes();
            at = owner.put("topic", Some(at), &bytes).unwrap();
            written.push((at, bytes));
        }
        (read, written)
    });
    let before = hooked.hook.count();
    let result = former.put("topic", Some(v2), b"former");
    let steps = hooked.hook.count() - before;
    let Some((read, written)) = slot.lock().unwrap().take() else {
        return (steps, None);
    };
    let truth = FileMetaStore::new(Arc::new(disk.clone()))
        .get("topic")
        .unwrap()
        .expect("the record");
    let what = format!("a new owner after operation {n}");
    let failure = match result {
        Ok(v) if read == (v, b"former".to_vec()) || truth == (v, b"former".to_vec()) => None,
        Ok(v) => Some(format!(
            "{what}: the former's write returned version {v}, but the record is {truth:?} and \
             the new owner built on {read:?}"
        )),
        Err(Error::Fenced { .. }) if Some(&truth) == written.last() => None,
        Err(e) => Some(format!(
            "{what}: the former's write failed ({e}), the record is {truth:?}, the new owner \
             wrote {written:?}"
        )),
    };
    (steps, failure)
}

#[test]
fn a_former_owners_write_into_a_version_a_new_owner_freed_is_refused() {
    let (steps, failure) = a_new_owner_writes_during_a_former_owners_write(u64::MAX);
    assert_eq!(failure, None);
    assert!(steps > 3, "{steps}");
    let failures: Vec<String> = (1..=steps)
        .filter_map(|n| a_new_owner_writes_during_a_former_owners_write(n).1)
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

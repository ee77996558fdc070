//! Attacks on the RADOS round-trip savings of a takeover: the first owner of a fresh namespace
//! made by an exclusive create of `LOCK`, the lock and the epoch raise in one write operation,
//! a record version written as one exclusive create and read whole in one request, and the
//! removal from the index of names that is not waited for. Each asserts what the longer path
//! gave: one owner per epoch, damage reported rather than written over, and a name listed
//! exactly while its object exists.

#![cfg(feature = "rados")]

use crate::support;

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use ackstore::Error;
use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::{MemStorage, RadosStorage, Storage};
use support::rados::{cluster, fresh_storage, pool};

/// A lease no renewal of which falls within a test.
const LONG_LEASE: Duration = Duration::from_secs(600);

fn same_namespace(s: &RadosStorage) -> RadosStorage {
    let namespace = s.location().rsplit('/').next().unwrap().to_owned();
    cluster()
        .storage(&pool(), &namespace)
        .unwrap()
        .with_lease(LONG_LEASE)
}

/// Handles racing to lock a fresh namespace, and then to lock it again and again as each owner
/// releases it: every lock taken has an epoch of its own, the epochs are 1, 2, 3, ... with no
/// gap, and a lock refused is refused as held (never an error of the create or the compare).
#[test]
fn handles_racing_for_a_fresh_namespace_and_its_epoch_never_share_an_epoch() {
    const HANDLES: usize = 4;
    const ATTEMPTS: usize = 25;
    for round in 0..4 {
        let first = fresh_storage(&format!("first-owner-{round}")).with_lease(LONG_LEASE);
        let barrier = Arc::new(Barrier::new(HANDLES));
        let racers: Vec<_> = (0..HANDLES)
            .map(|_| {
                let handle = same_namespace(&first);
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    let mut epochs = Vec::new();
                    for _ in 0..ATTEMPTS {
                        match handle.lock() {
                            Ok(guard) => {
                                epochs.push(handle.epoch());
                                drop(guard);
                            }
                            Err(Error::Locked { .. }) => {}
                            Err(e) => panic!("a lock refused other than as held: {e:?}"),
                        }
                    }
                    epochs
                })
            })
            .collect();
        let mut taken: Vec<u64> = racers.into_iter().flat_map(|r| r.join().unwrap()).collect();
        taken.sort_unstable();
        let distinct: BTreeSet<u64> = taken.iter().copied().collect();
        assert_eq!(distinct.len(), taken.len(), "round {round}: {taken:?}");
        assert!(!taken.is_empty(), "round {round}: nobody took the lock");
        assert_eq!(
            taken,
            (1..=taken.len() as u64).collect::<Vec<_>>(),
            "round {round}: each lock taken raises the epoch by one"
        );
        // The next owner continues from the last epoch taken.
        let _next = first.lock().unwrap();
        assert_eq!(first.epoch(), taken.len() as u64 + 1, "round {round}");
    }
}

/// The version file holding record `name` (the highest one listed).
fn version_file(s: &dyn Storage, name: &str) -> String {
    s.list()
        .unwrap()
        .into_iter()
        .filter(|f| f.starts_with(&format!("{name}.")) && f.ends_with(".meta"))
        .max()
        .expect("a version file")
}

/// Record `topic` written by one owner, its version's last byte then changed in place (the
/// size unchanged), read and written by the next owner: both report the damage.
fn damage_in_place_is_reported(storage: &Arc<dyn Storage>) {
    let guard = storage.lock().unwrap();
    let meta = FileMetaStore::owned(storage.clone(), &guard);
    let version = meta.put("topic", None, b"the topic's record").unwrap();
    let object = storage.open(&version_file(&**storage, "topic")).unwrap();
    let mut bytes = vec![0; usize::try_from(object.size().unwrap()).unwrap()];
    object.read_exact_at(&mut bytes, 0).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x55;
    object.write_all_at(&bytes, 0).unwrap();
    object.sync_data().unwrap();
    drop((object, meta, guard));

    let guard = storage.lock().unwrap();
    let meta = FileMetaStore::owned(storage.clone(), &guard);
    let read = meta.get("topic");
    assert!(matches!(read, Err(Error::Corrupted { .. })), "{read:?}");
    let written = meta.put("topic", Some(version), b"written over damage");
    assert!(
        matches!(written, Err(Error::Corrupted { .. })),
        "a write on a damaged version: {written:?}"
    );
}

/// A record version whose object holds other bytes of the same size (damage a size check
/// cannot see) is reported as damage by a read, and a compare-and-set on it is refused rather
/// than written over it as if it were the record: on RADOS, where a version is read whole in
/// one request, and on the in-memory disk, where it is read by its size then its bytes.
#[test]
fn a_record_version_of_the_right_size_but_other_bytes_is_damage_to_a_read_and_a_write() {
    let memory: Arc<dyn Storage> = Arc::new(MemStorage::new());
    damage_in_place_is_reported(&memory);
    let rados: Arc<dyn Storage> = Arc::new(fresh_storage("record-bytes").with_lease(LONG_LEASE));
    damage_in_place_is_reported(&rados);
}

/// A name removed and created again at once, many times, by an owner whose removals from the
/// index are not waited for: after each step the owner and a second handle list the name
/// exactly while its object exists, and the name survives the last re-creation.
#[test]
fn a_name_removed_and_created_again_at_once_is_listed_exactly_while_it_exists() {
    let s = fresh_storage("recreate").with_lease(LONG_LEASE);
    let other = same_namespace(&s);
    let _guard = s.lock().unwrap();
    s.create("keep").unwrap();
    for round in 0..100 {
        let name = format!("topic-{}.meta", round % 3);
        if s.exists(&name).unwrap() {
            s.remove(&name).unwrap();
            assert!(!other.list().unwrap().contains(&name), "round {round}");
        }
        s.create(&name).unwrap().write_all_at(b"x", 0).unwrap();
        s.remove(&name).unwrap();
        s.create(&name).unwrap();
        for (who, handle) in [("owner", &s), ("other", &other)] {
            let listed = handle.list().unwrap();
            assert!(
                listed.contains(&name) && listed.contains(&"keep".to_owned()),
                "round {round}, {who}: {listed:?}"
            );
        }
        assert!(other.exists(&name).unwrap(), "round {round}");
    }
    // The index itself, read after every detached removal was answered, holds each name
    // whose object exists.
    drop(s.clone());
    let namespace = s.location().rsplit('/').next().unwrap().to_owned();
    let keys = support::rados::rados_cli(&namespace, &["listomapkeys", ".ackstore-names"]);
    for name in s.list().unwrap() {
        assert!(keys.lines().any(|k| k == name), "{name} not in {keys:?}");
    }
}

/// The first of the two operations with which an owner of the release before opens a
/// namespace, through the `rados` command: the lock step (which makes `LOCK` if missing).
fn lock_step_of_the_release_before(namespace: &str, cookie: &str) {
    support::rados::rados_cli(
        namespace,
        &[
            "lock",
            "get",
            "LOCK",
            "ackstore-owner",
            "--lock-cookie",
            cookie,
            "--lock-type",
            "exclusive",
            "--lock-duration",
            "600",
        ],
    );
}

/// The second: the owner epoch raised to `epoch`.
fn epoch_raise_of_the_release_before(namespace: &str, epoch: u64) {
    let text = format!("{epoch:020}");
    support::rados::rados_cli(
        namespace,
        &["setxattr", "LOCK", "ackstore.owner-epoch", &text],
    );
}

/// A fleet upgraded one broker at a time: owners of the release before (lock step, then the
/// epoch raise) and of this one (both in one operation) take one namespace in turn. This
/// release's open is refused while the older owner holds the lock, whether or not it raised
/// the epoch yet; once it is gone, this release continues from the epoch it left (or from none,
/// when it died between its two steps), and an older owner after it continues from this one's.
#[test]
fn owners_of_the_release_before_and_of_this_one_take_a_namespace_in_turn() {
    for died_between_its_steps in [false, true] {
        let new = fresh_storage("upgrade").with_lease(LONG_LEASE);
        let namespace = new.location().rsplit('/').next().unwrap().to_owned();
        lock_step_of_the_release_before(&namespace, "old-1");
        assert!(matches!(new.lock(), Err(Error::Locked { .. })));
        let mut last = 0;
        if !died_between_its_steps {
            epoch_raise_of_the_release_before(&namespace, 1);
            last = 1;
            assert!(matches!(new.lock(), Err(Error::Locked { .. })));
        }
        new.break_lock().unwrap();
        let guard = new.lock().unwrap();
        assert_eq!(
            new.epoch(),
            last + 1,
            "died between: {died_between_its_steps}"
        );
        // The older release takes it next (after this owner's close), from this one's epoch.
        drop(guard);
        lock_step_of_the_release_before(&namespace, "old-2");
        let other = same_namespace(&new);
        assert!(matches!(other.lock(), Err(Error::Locked { .. })));
        epoch_raise_of_the_release_before(&namespace, last + 2);
        other.break_lock().unwrap();
        let _guard = other.lock().unwrap();
        assert_eq!(other.epoch(), last + 3);
    }
}

/// A former owner writing a record version after version (each one exclusive create carrying
/// its bytes, which no epoch on an existing object guards) while a new owner breaks its lock,
/// reads the record and claims it: once the claim returns, the former owner is told `Ok` for
/// no version at or above the claimed one, every later write of it is refused, and the new
/// owner reads the bytes it claimed.
#[test]
fn a_former_owners_record_versions_never_land_above_a_new_owners_claim() {
    for round in 0..5 {
        let former = fresh_storage(&format!("claim-{round}")).with_lease(LONG_LEASE);
        let former_guard = former.lock().unwrap();
        let former_meta = FileMetaStore::owned(Arc::new(former.clone()), &former_guard);
        let first = former_meta.put("topic", None, b"former 0").unwrap();
        let started = Arc::new(Barrier::new(2));
        let writer = {
            let started = started.clone();
            std::thread::spawn(move || {
                let (mut at, mut told_ok) = (first, Vec::new());
                started.wait();
                for n in 1.. {
                    match former_meta.put("topic", Some(at), format!("former {n}").as_bytes()) {
                        Ok(version) => {
                            told_ok.push(version);
                            at = version;
                        }
                        Err(Error::Fenced { .. }) => break,
                        Err(e) => panic!("the former owner's write: {e:?}"),
                    }
                }
                let again = former_meta.put("topic", Some(at), b"after the fence");
                assert!(matches!(again, Err(Error::Fenced { .. })), "{again:?}");
                drop(former_guard);
                told_ok
            })
        };
        let new = same_namespace(&former);
        started.wait();
        new.break_lock().unwrap();
        let guard = new.lock().unwrap();
        let meta = FileMetaStore::owned(Arc::new(new.clone()), &guard);
        let (claimed, bytes) = loop {
            let (version, bytes) = meta.get("topic").unwrap().unwrap();
            match meta.claim("topic", version) {
                Ok(claimed) => break (claimed, bytes),
                Err(Error::Fenced { .. }) => {}
                Err(e) => panic!("the claim: {e:?}"),
            }
        };
        let told_ok = writer.join().unwrap();
        assert!(
            told_ok.iter().all(|&v| v < claimed),
            "round {round}: claimed {claimed}, the former owner told Ok for {told_ok:?}"
        );
        assert_eq!(
            meta.get("topic").unwrap(),
            Some((claimed, bytes)),
            "round {round}"
        );
    }
}

//! `RadosStorage` against a real Ceph cluster (`CEPH_CONF`): the storage trait's contract as the
//! local backends keep it (offsets, sizes, truncation, listing, exclusive link, whole-object
//! reads through the cache), the ownership lease, and the owner epoch with which the cluster
//! refuses every write of an owner a newer one has replaced.

#![cfg(feature = "rados")]

use crate::support;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use ackstore::Error;
use ackstore::{RadosStorage, Storage};
use support::rados::{cluster, fresh_storage, pool};

fn already_exists(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists)
}

fn same_namespace(s: &RadosStorage) -> RadosStorage {
    let namespace = s.location().rsplit('/').next().unwrap().to_owned();
    cluster().storage(&pool(), &namespace).unwrap()
}

#[test]
fn objects_behave_like_files_at_offsets_sizes_and_truncation() {
    let s = fresh_storage("files");
    assert_eq!(s.list().unwrap(), Vec::<String>::new());
    let f = s.create("ledger-1.log").unwrap();
    assert!(already_exists(&s.create("ledger-1.log").unwrap_err()));
    f.write_all_at(b"hello", 0).unwrap();
    f.write_all_at(b"world", 10).unwrap();
    f.sync_data().unwrap();
    assert_eq!(f.size().unwrap(), 15);
    let mut buf = [0xffu8; 15];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"hello\0\0\0\0\0world", "a gap reads as zeros");
    let mut past = [0u8; 4];
    assert!(
        f.read_exact_at(&mut past, 13).is_err(),
        "a read past the end fails"
    );
    f.set_len(7).unwrap();
    assert_eq!(f.size().unwrap(), 7);
    f.set_len(9).unwrap();
    let mut grown = [0xffu8; 9];
    f.read_exact_at(&mut grown, 0).unwrap();
    assert_eq!(&grown, b"hello\0\0\0\0");
    s.create("topic.meta").unwrap();
    assert_eq!(s.list().unwrap(), vec!["ledger-1.log", "topic.meta"]);
    assert!(s.exists("topic.meta").unwrap());
    s.rename("topic.meta", "topic2.meta").unwrap();
    assert_eq!(s.list().unwrap(), vec!["ledger-1.log", "topic2.meta"]);
    s.remove("topic2.meta").unwrap();
    assert!(!s.exists("topic2.meta").unwrap());
    assert!(s.open("topic2.meta").is_err());
    assert!(s.open("../etc").is_err());
    s.sync_dir().unwrap();
}

#[test]
fn namespaces_of_one_pool_do_not_see_each_other() {
    let a = fresh_storage("ns-a");
    let b = fresh_storage("ns-b");
    a.create("x").unwrap();
    assert!(!b.exists("x").unwrap());
    assert_eq!(b.list().unwrap(), Vec::<String>::new());
    assert_eq!(same_namespace(&a).list().unwrap(), vec!["x"]);
}

#[test]
fn writes_pipelined_before_a_sync_land_in_order() {
    let s = fresh_storage("order");
    let f = s.create("log").unwrap();
    let mut model = Vec::new();
    for i in 0..500u32 {
        let chunk = i.to_le_bytes().repeat(1 + (i as usize % 7));
        f.write_all_at(&chunk, model.len() as u64).unwrap();
        model.extend_from_slice(&chunk);
        // An overwrite of bytes still in flight wins over them.
        if i % 50 == 0 {
            f.write_all_at(b"XY", 0).unwrap();
            model[..2].copy_from_slice(b"XY");
        }
    }
    f.sync_data().unwrap();
    let reopened = same_namespace(&s).open("log").unwrap();
    assert_eq!((*reopened.map().unwrap()).as_ref(), model.as_slice());
}

#[test]
fn map_reads_the_whole_object_and_never_serves_stale_bytes() {
    let s = fresh_storage("map");
    let f = s.create("sealed").unwrap();
    let big: Vec<u8> = (0..(20 << 20) as u32).map(|i| (i % 251) as u8).collect();
    f.write_all_at(&big, 0).unwrap();
    f.sync_data().unwrap();
    assert_eq!(
        (*f.map().unwrap()).as_ref(),
        big.as_slice(),
        "read in chunks"
    );
    let small = s.create("small").unwrap();
    small.write_all_at(b"one", 0).unwrap();
    assert_eq!((*small.map().unwrap()).as_ref(), b"one");
    small.write_all_at(b"two", 0).unwrap();
    assert_eq!(
        (*small.map().unwrap()).as_ref(),
        b"two",
        "a write evicts the cached copy"
    );
    s.remove("small").unwrap();
    s.create("small").unwrap().write_all_at(b"333", 0).unwrap();
    assert_eq!((*s.open("small").unwrap().map().unwrap()).as_ref(), b"333");
}

#[test]
fn of_threads_linking_one_name_from_separate_handles_exactly_one_wins() {
    const THREADS: usize = 6;
    let s = fresh_storage("link");
    for round in 0..20 {
        for t in 0..THREADS {
            let f = s.create(&format!("tmp-{round}-{t}")).unwrap();
            f.write_all_at(format!("writer {t}").as_bytes(), 0).unwrap();
            f.sync_data().unwrap();
        }
        let barrier = Arc::new(Barrier::new(THREADS));
        let results: Vec<_> = (0..THREADS)
            .map(|t| {
                let handle = same_namespace(&s);
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    handle.link(&format!("tmp-{round}-{t}"), &format!("v-{round}"))
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        let winners: Vec<_> = results
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_ok())
            .map(|(t, _)| t)
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        for r in &results {
            if let Err(e) = r {
                assert!(already_exists(e), "{e:?}");
            }
        }
        let got = s.open(&format!("v-{round}")).unwrap().map().unwrap();
        assert_eq!(
            (*got).as_ref(),
            format!("writer {}", winners[0]).as_bytes(),
            "the name holds the winner's bytes"
        );
    }
}

/// A file moved under a listing (its next name created, then its old one removed, as a
/// metadata record moves to its next version) is listed under one name or the other, never
/// missed: the listing reads the name index and stats the objects in separate steps.
#[test]
fn a_file_moved_while_the_namespace_is_listed_is_never_missed() {
    const MOVERS: usize = 4;
    const MOVES: usize = 150;
    const FILLERS: usize = 300;
    let s = fresh_storage("moving");
    // Other files make each listing's stats take longer: a wider window for a move.
    for i in 0..FILLERS {
        s.create(&format!("filler-{i:04}")).unwrap();
    }
    for m in 0..MOVERS {
        s.create(&format!("m{m}-v-00000")).unwrap();
    }
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let movers: Vec<_> = (0..MOVERS)
        .map(|m| {
            let (handle, done) = (same_namespace(&s), done.clone());
            std::thread::spawn(move || {
                for v in 1..=MOVES {
                    let (old, new) = (format!("m{m}-v-{:05}", v - 1), format!("m{m}-v-{v:05}"));
                    handle.link(&old, &new).unwrap();
                    handle.remove(&old).unwrap();
                }
                done.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            })
        })
        .collect();
    let reader = same_namespace(&s);
    let mut listings = 0;
    while done.load(std::sync::atomic::Ordering::Acquire) < MOVERS {
        let names = reader.list().unwrap();
        for m in 0..MOVERS {
            assert!(
                names.iter().any(|n| n.starts_with(&format!("m{m}-v-"))),
                "listing {listings} saw no version of moving file {m}"
            );
        }
        listings += 1;
    }
    for m in movers {
        m.join().unwrap();
    }
    let names = reader.list().unwrap();
    assert_eq!(names.len(), FILLERS + MOVERS);
    for m in 0..MOVERS {
        assert!(names.contains(&format!("m{m}-v-{MOVES:05}")));
    }
}

#[test]
fn a_second_owner_is_refused_while_the_lease_is_renewed() {
    let s = fresh_storage("lease").with_lease(Duration::from_secs(1));
    let other = same_namespace(&s);
    let guard = s.lock().unwrap();
    assert!(matches!(other.lock(), Err(Error::Locked { .. })));
    // Three leases later the holder has renewed it, so it is still held.
    std::thread::sleep(Duration::from_secs(3));
    assert!(matches!(other.lock(), Err(Error::Locked { .. })));
    drop(guard);
    let _second = other.lock().unwrap();
    assert!(s.epoch() == 0 && other.epoch() > 0);
}

/// A lease no renewal of which falls within a test: the old owners below never learn from
/// their lease that they were replaced, so only the cluster can refuse their writes.
const LONG_LEASE: Duration = Duration::from_secs(600);

fn fenced<T: std::fmt::Debug>(r: ackstore::Result<T>) -> bool {
    matches!(r, Err(Error::Fenced { .. }))
}

#[test]
fn no_write_of_a_replaced_owner_lands_on_an_object_the_new_owner_has_touched() {
    let old = fresh_storage("fence").with_lease(LONG_LEASE);
    let old_guard = old.lock().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let f = old.create(name).unwrap();
        f.write_all_at(bytes, 0).unwrap();
        f.sync_data().unwrap();
        f
    };
    let read = write("ledger-1.log", b"before");
    let sized = write("ledger-2.log", b"sized");
    let looked_up = write("topic.meta", b"v1");
    let untouched = write("ledger-3.log", b"cold");

    // The old owner is presumed dead: its lock is broken and a new owner takes over. The
    // takeover itself stamps nothing.
    let new = same_namespace(&old).with_lease(LONG_LEASE);
    new.break_lock().unwrap();
    let _new_guard = new.lock().unwrap();
    assert!(new.epoch() > old.epoch());
    let new_read = new.open("ledger-1.log").unwrap();
    assert_eq!((*new_read.map().unwrap()).as_ref(), b"before");
    assert_eq!(new.open("ledger-2.log").unwrap().size().unwrap(), 5);
    assert!(new.exists("topic.meta").unwrap());

    // Whatever the old owner still believes, the cluster refuses its writes, truncations and
    // removes of every object the new owner has read, statted or looked up.
    read.write_all_at(b"after", 6).unwrap(); // sent; refused at the sync
    assert!(fenced(read.sync_data()));
    assert!(
        fenced(read.write_all_at(b"again", 6)),
        "a refused write is latched"
    );
    assert!(fenced(sized.set_len(0)));
    assert!(fenced(looked_up.set_len(0)));
    assert!(fenced(old.remove("topic.meta")));
    assert_eq!((*new_read.map().unwrap()).as_ref(), b"before");
    assert_eq!(new.open("ledger-2.log").unwrap().size().unwrap(), 5);

    // An object the new owner has not touched yet takes the old owner's writes (the takeover's
    // cost does not grow with the namespace) until the new owner's first read of it, which
    // sees them; none after it.
    untouched.write_all_at(b"!", 4).unwrap();
    untouched.sync_data().unwrap();
    let cold = new.open("ledger-3.log").unwrap();
    assert_eq!((*cold.map().unwrap()).as_ref(), b"cold!");
    untouched.write_all_at(b"?", 5).unwrap();
    assert!(fenced(untouched.sync_data()));
    assert_eq!((*cold.map().unwrap()).as_ref(), b"cold!");

    // So does an object the old owner creates after the takeover, once the new owner finds it.
    let late = write("ledger-4.log", b"late");
    assert!(new.list().unwrap().contains(&"ledger-4.log".to_owned()));
    let late_read = new.open("ledger-4.log").unwrap();
    assert_eq!((*late_read.map().unwrap()).as_ref(), b"late");
    late.write_all_at(b"r", 4).unwrap();
    assert!(fenced(late.sync_data()));
    assert!(fenced(old.remove("ledger-4.log")));
    assert_eq!((*late_read.map().unwrap()).as_ref(), b"late");

    // The new owner writes as usual.
    new_read.write_all_at(b"!", 6).unwrap();
    new_read.sync_data().unwrap();
    new.remove("topic.meta").unwrap();
    drop(old_guard);
}

#[test]
fn each_new_owner_writes_with_a_higher_epoch() {
    let s = fresh_storage("epochs");
    // The first owner starts at 1.
    let guard = s.lock().unwrap();
    assert_eq!(s.epoch(), 1);
    drop(guard);
    let _again = s.lock().unwrap();
    assert_eq!(s.epoch(), 2, "each owner gets a higher epoch");
}

#[test]
fn a_name_whose_object_is_gone_is_not_listed_and_can_be_created_again() {
    let s = fresh_storage("index");
    let namespace = s.location().rsplit('/').next().unwrap().to_owned();
    s.create("a").unwrap();
    s.create("b").unwrap();
    // What a remove cut between its two steps leaves: the object gone, its name indexed.
    support::rados::rados_cli(&namespace, &["rm", "a"]);
    assert_eq!(s.list().unwrap(), vec!["b"]);
    assert!(!s.exists("a").unwrap());
    assert_eq!(
        support::rados::rados_cli(&namespace, &["listomapkeys", ".ackstore-names"]),
        "a\nb\n"
    );
    let _owner = s.lock().unwrap();
    assert_eq!(s.list().unwrap(), vec!["b"]);
    assert!(!s.exists("a").unwrap());
    s.create("a").unwrap();
    assert_eq!(s.list().unwrap(), vec!["a", "b"]);
}

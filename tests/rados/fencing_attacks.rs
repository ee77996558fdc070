//! Attacks on the fence of a RADOS namespace taken over by a newer owner, as a broker fleet
//! makes them: an older owner's handle that outlived its lease (released, or lost and taken
//! again by the same process), paused owners resumed at every step of their work while a new
//! owner claims the store, two new owners in sequence, and the read-only commands beside a
//! running owner. Each checks the invariants of design.md: nothing Ok is lost, nothing is
//! acked that was not, a fenced owner gets no `Ok` after the claim, and none of its writes
//! lands on an object after a newer owner read it.

#![cfg(feature = "rados")]

use crate::support;

use std::time::Duration;

use ackstore::{Error, RadosStorage, Storage};
use support::rados::{cluster, fresh_storage, pool};

/// A lease no renewal of which falls within a test: an older owner never learns from its lease
/// that it was replaced, so only the fence can refuse its writes.
const LONG_LEASE: Duration = Duration::from_secs(600);

fn same_namespace(s: &RadosStorage) -> RadosStorage {
    let namespace = s.location().rsplit('/').next().unwrap().to_owned();
    cluster().storage(&pool(), &namespace).unwrap()
}

fn fenced<T: std::fmt::Debug>(r: &ackstore::Result<T>) -> bool {
    matches!(r, Err(Error::Fenced { .. }))
}

/// The bytes of `name` as a handle that owns nothing reads them (no stamp, no cache of the
/// handles under test).
fn bytes_of(s: &RadosStorage, name: &str) -> Vec<u8> {
    let probe = same_namespace(s);
    let f = probe.open(name).expect("open");
    let mut buf = vec![0; usize::try_from(f.size().expect("size")).unwrap()];
    f.read_exact_at(&mut buf, 0).expect("read");
    buf
}

#[test]
fn a_file_kept_past_its_owners_release_never_writes_over_what_a_newer_owner_read() {
    let old = fresh_storage("fa-released").with_lease(LONG_LEASE);
    let guard = old.lock().unwrap();
    let file = old.create("ledger-1.log").unwrap();
    file.write_all_at(b"before", 0).unwrap();
    file.sync_data().unwrap();
    old.create("topic.meta").unwrap();
    // The owner releases the namespace (a close) while a thread of it still holds the file.
    drop(guard);
    let new = same_namespace(&old).with_lease(LONG_LEASE);
    let _new_guard = new.lock().unwrap();
    assert_eq!(
        (*new.open("ledger-1.log").unwrap().map().unwrap()).as_ref(),
        b"before"
    );
    assert!(new.exists("topic.meta").unwrap());

    file.write_all_at(b"after", 6).unwrap();
    let synced = file.sync_data();
    let truncated = file.set_len(0);
    let removed = old.remove("topic.meta");
    assert_eq!(
        bytes_of(&old, "ledger-1.log"),
        b"before",
        "sync {synced:?}, truncate {truncated:?}"
    );
    assert!(
        fenced(&synced) && fenced(&truncated),
        "the released owner's file writes are fenced"
    );
    assert!(fenced(&removed), "the released owner's remove: {removed:?}");
    assert!(new.exists("topic.meta").unwrap());
}

#[test]
fn a_file_of_an_earlier_lease_is_fenced_once_the_same_handle_locks_again() {
    let old = fresh_storage("fa-relock").with_lease(LONG_LEASE);
    let first = old.lock().unwrap();
    let file = old.create("ledger-1.log").unwrap();
    file.write_all_at(b"before", 0).unwrap();
    file.sync_data().unwrap();
    // Another broker takes the namespace over and hands it back (closes).
    let other = same_namespace(&old).with_lease(LONG_LEASE);
    other.break_lock().unwrap();
    drop(other.lock().unwrap());
    // The first broker, told its lease is gone, opens the namespace again through the same
    // handle while a paused thread of its earlier session still holds the file.
    let again = old.lock().unwrap();
    assert!(old.epoch() > 1);
    let reread = old.open("ledger-1.log").unwrap();
    assert_eq!((*reread.map().unwrap()).as_ref(), b"before");

    let synced = file
        .write_all_at(b"after", 6)
        .and_then(|()| file.sync_data());
    assert_eq!(bytes_of(&old, "ledger-1.log"), b"before", "sync {synced:?}");
    assert!(fenced(&synced), "the earlier session's write: {synced:?}");
    // The current session writes as usual.
    reread.write_all_at(b"!", 6).unwrap();
    reread.sync_data().unwrap();
    drop((first, again));
}

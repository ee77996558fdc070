//! Real files: the directory lock, round trips and maps, and links.

use ackstore::internals::error::Error;
use ackstore::internals::storage::*;

#[test]
fn second_lock_on_same_directory_is_refused_until_released() {
    let dir = tempfile::tempdir().unwrap();
    let a = FileStorage::open(dir.path(), false).unwrap();
    let b = FileStorage::open(dir.path(), false).unwrap();
    let guard = a.lock().unwrap();
    assert!(matches!(b.lock(), Err(Error::Locked { .. })));
    drop(guard);
    b.lock().unwrap();
}

#[test]
fn files_round_trip_and_map() {
    let dir = tempfile::tempdir().unwrap();
    let s = FileStorage::open(dir.path(), false).unwrap();
    let f = s.create("a.log").unwrap();
    f.write_all_at(b"hello", 0).unwrap();
    f.sync_data().unwrap();
    assert_eq!(f.size().unwrap(), 5);
    assert_eq!((*f.map().unwrap()).as_ref(), b"hello");
    assert!(s.create("a.log").is_err());
    s.rename("a.log", "b.log").unwrap();
    assert_eq!(s.list().unwrap(), vec!["b.log".to_string()]);
    assert!(s.open("../etc").is_err());
}

#[test]
fn link_gives_a_second_name_and_never_replaces_one() {
    let dir = tempfile::tempdir().unwrap();
    let s = FileStorage::open(dir.path(), false).unwrap();
    s.create("a").unwrap().write_all_at(b"one", 0).unwrap();
    s.create("b").unwrap().write_all_at(b"two", 0).unwrap();
    s.link("a", "c").unwrap();
    let mut buf = [0; 3];
    s.open("c").unwrap().read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"one");
    let err = s.link("a", "b").unwrap_err();
    assert!(
        matches!(&err, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists),
        "{err:?}"
    );
    s.open("b").unwrap().read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"two");
}

//! The metadata store's compare-and-set between independent stores over one directory (what two
//! processes sharing a directory without the lock are): every version is won by exactly one
//! writer: no two writers are told `Ok` for the same version, and the record holds the bytes of
//! the last writer told `Ok`.

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier, Mutex};

use ackstore::Error;
use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::{FileStorage, MemStorage, Storage};

const WRITERS: usize = 4;
const ROUNDS: usize = 150;

fn every_version_has_exactly_one_winner(make: impl Fn() -> Arc<dyn Storage>) {
    let first = FileMetaStore::new(make());
    first.put("topic", None, b"start").unwrap();
    let winners: Arc<Mutex<BTreeMap<u64, Vec<u8>>>> = Arc::default();
    let barrier = Arc::new(Barrier::new(WRITERS));
    let threads: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = FileMetaStore::new(make());
            let (winners, barrier) = (winners.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for round in 0..ROUNDS {
                    let (seen, _) = store.get("topic").unwrap().unwrap();
                    let bytes = format!("writer {w} round {round}").into_bytes();
                    match store.put("topic", Some(seen), &bytes) {
                        Ok(version) => {
                            assert_eq!(version, seen + 1);
                            let previous = winners.lock().unwrap().insert(version, bytes);
                            assert!(
                                previous.is_none(),
                                "two writers were told they wrote version {version}"
                            );
                        }
                        Err(Error::Fenced { .. }) => {}
                        Err(e) => panic!("writer {w}: {e}"),
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let winners = winners.lock().unwrap();
    let (last, bytes) = winners.last_key_value().unwrap();
    assert_eq!(
        FileMetaStore::new(make()).get("topic").unwrap(),
        Some((*last, bytes.clone())),
        "the record holds the last winner's bytes"
    );
    // A writer whose version another writer built on at once may be told `Fenced` too (it
    // cannot tell that from a slot reused after a removal), so not every version has an `Ok`,
    // and how many do depends on the scheduling; once the race is over, a lone writer always
    // wins the next version.
    assert!(!winners.is_empty(), "no writer won a version");
    let alone = FileMetaStore::new(make());
    assert_eq!(alone.put("topic", Some(*last), b"alone").unwrap(), last + 1);
    assert_eq!(
        alone.get("topic").unwrap(),
        Some((last + 1, b"alone".to_vec()))
    );
}

#[test]
fn concurrent_stores_on_real_files_never_both_win_a_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    every_version_has_exactly_one_winner(|| Arc::new(FileStorage::open(&path, false).unwrap()));
}

#[test]
fn concurrent_stores_on_the_in_memory_disk_never_both_win_a_version() {
    let disk = MemStorage::new();
    every_version_has_exactly_one_winner(|| Arc::new(disk.clone()));
}

#[cfg(feature = "rados")]
use crate::support;

/// On RADOS the compare-and-set is the exclusive create inside `link`: each store has its own
/// handle (its own I/O context), as separate brokers would.
#[cfg(feature = "rados")]
#[test]
fn concurrent_stores_on_rados_never_both_win_a_version() {
    let namespace = support::rados::fresh_namespace("meta-cas");
    every_version_has_exactly_one_winner(|| {
        Arc::new(
            support::rados::cluster()
                .storage(&support::rados::pool(), &namespace)
                .unwrap(),
        )
    });
}

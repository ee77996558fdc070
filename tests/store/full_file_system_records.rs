//! A store's records and files on a real full file system (a tmpfs, mounted where this process
//! may mount one; elsewhere the in-memory full-disk tests cover the store): the first open, the
//! catalog write that fills a chunk of topics (its chunk record first), and a data ledger whose
//! append met the full disk part way through a record. Each failed call says there is no space,
//! the directory stays one the next open accepts and `verify` agrees with, and once space
//! returns the same call succeeds.

use crate::support;
use crate::support::tmpfs::{self, Tmpfs, is_no_space};

use std::fs;
use std::path::Path;
use std::sync::Arc;

use ackstore::{Error, FileStorage, PersistMode, Storage, Store, StoreConfig};

fn config() -> StoreConfig {
    StoreConfig {
        ledger: support::config::topic(20, PersistMode::MultiEntry, 0),
        ..support::config::store_journal(1024)
    }
}

fn verify(dir: &Path) -> ackstore::check::Verification {
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(dir, false).expect("the store"));
    ackstore::check::verify(&storage).expect("verify runs")
}

#[test]
fn a_store_opened_on_a_full_tmpfs_fails_for_want_of_space_and_opens_once_space_returns() {
    for inodes in [false, true] {
        let Some(fs1m) = Tmpfs::mount(1 << 20, 100) else {
            eprintln!("cannot mount a tmpfs here (not root)");
            return;
        };
        let dir = fs1m.path().join("store");
        let (filler, files) = (fs1m.path().join("filler"), fs1m.path().join("inodes"));
        if inodes {
            tmpfs::fill_inodes(&files);
            // Room for the directory and its lock file only.
            tmpfs::free_inodes(&files, 2);
        } else {
            tmpfs::fill(&filler);
        }
        for _ in 0..3 {
            let e = Store::open(&dir, config()).expect_err("no space for the catalog");
            assert!(is_no_space(&e), "inodes {inodes}: {e}");
        }
        tmpfs::remove_filler(&filler);
        let _ = fs::remove_dir_all(&files);
        let store = Store::open(&dir, config()).expect("the open once space returned");
        store.topic("t").expect("a topic");
        store.close().expect("close");
        let files = tmpfs::files_under(&dir);
        assert!(!files.iter().any(|f| f.ends_with(".tmp")), "{files:?}");
        let v = verify(&dir);
        assert!(v.is_sound() && v.unused.is_empty(), "inodes {inodes}: {v}");
    }
}

/// 511 topics, then the creation of the 512th, which writes the chunk record of the first 512
/// before the catalog that pins it, tried with less and less room (bytes, or inodes: a link
/// takes one on tmpfs) and a different name each time, so a chunk record a failed try left
/// holds another name than the next try's. After every try the directory, as a kill leaves
/// it, opens with every topic created so far, and `verify` agrees.
#[test]
fn the_catalog_write_that_fills_a_chunk_fails_cleanly_on_a_full_tmpfs_and_succeeds_with_room() {
    for inodes in [true, false] {
        let Some(fs16m) = Tmpfs::mount(16 << 20, 4_000) else {
            eprintln!("cannot mount a tmpfs here (not root)");
            return;
        };
        let dir = fs16m.path().join("store");
        let (filler, files) = (fs16m.path().join("filler"), fs16m.path().join("inodes"));
        let store = Store::open(&dir, config()).expect("open");
        let mut created: Vec<String> = (0..511).map(|i| format!("topic {i}")).collect();
        for name in &created {
            store.topic(name).expect("a topic with space");
        }
        let mut failed = 0;
        for room in 0..40u64 {
            let _ = fs::remove_dir_all(&files);
            tmpfs::remove_filler(&filler);
            if inodes {
                tmpfs::fill_inodes(&files);
                tmpfs::free_inodes(&files, usize::try_from(room).expect("small"));
            } else {
                tmpfs::fill(&filler);
                tmpfs::free_bytes(&filler, room * 2048);
            }
            let name = format!("chunk filler {room}");
            match store.topic(&name) {
                Ok(_) => created.push(name),
                Err(e) => {
                    assert!(is_no_space(&e), "room {room}: {e}");
                    failed += 1;
                    // The catalog is written before the topic's own files (a crash between
                    // leaves an empty topic): a failure after it leaves the topic listed. With
                    // the room these tries leave, that can happen when the inode of the catalog
                    // write's temporary file, unlinked, is not free yet for the topic's open (a
                    // child another test thread forked meanwhile holds its descriptor until it
                    // runs its program). Then the topic is there, empty, and opens once room
                    // returns.
                    if store.topic_names().last() == Some(&name) {
                        created.push(name);
                    }
                }
            }
            assert_eq!(store.topic_names(), created, "room {room}");
            // A scratch copy on a memory-backed file system where there is one: hundreds of
            // topics copied at every try churn a disk's inodes.
            let image = support::fds::files_dir();
            tmpfs::copy_dir(&dir, image.path());
            let v = verify(image.path());
            assert!(v.is_sound(), "room {room}: {v}");
            let copy = Store::open(image.path(), config()).expect("the image opens");
            assert_eq!(copy.topic_names(), created, "room {room}: the image");
            copy.close().expect("close");
            if created.len() == 514 {
                break;
            }
        }
        assert!(
            failed > 0,
            "inodes {inodes}: no try met the full file system"
        );
        assert_eq!(
            created.len(),
            514,
            "inodes {inodes}: the creations once room returned"
        );
        let _ = fs::remove_dir_all(&files);
        tmpfs::remove_filler(&filler);
        store.close().expect("close");
        drop(store);
        let store = Store::open(&dir, config()).expect("reopen");
        assert_eq!(store.topic_names(), created);
        store.close().expect("close");
        let v = verify(&dir);
        assert!(v.is_sound() && v.unused.is_empty(), "inodes {inodes}: {v}");
    }
}

/// An append that met the full file system part way through a record leaves the record's first
/// bytes in the data ledger, and the ledger refuses further writes. A store's topic never cuts
/// a ledger's tail (a former owner may still be writing it) and never appends to that ledger
/// again, so the bytes stay: `verify` reports them as a torn tail (not damage) and must not
/// promise that the next open cuts them back. Every synced entry stays readable.
#[test]
fn a_record_cut_short_by_a_full_tmpfs_is_never_promised_to_the_next_open_of_a_store() {
    let Some(fs2m) = Tmpfs::mount(2 << 20, 1_000) else {
        eprintln!("cannot mount a tmpfs here (not root)");
        return;
    };
    let dir = fs2m.path().join("store");
    let filler = fs2m.path().join("filler");
    let store = Store::open(&dir, config()).expect("open");
    let topic = store.topic("t").expect("topic");
    let synced = support::topic::append_n(&topic, 5);
    topic.sync().expect("sync");
    tmpfs::fill(&filler);
    tmpfs::free_bytes(&filler, 3000);
    let failed = (0..100)
        .map(|_| topic.append(&[7u8; 1000]))
        .find_map(Result::err)
        .expect("an append meets the full file system");
    assert!(is_no_space(&failed), "{failed}");
    tmpfs::remove_filler(&filler);
    assert!(
        matches!(topic.close(), Err(Error::PreviousIo)),
        "the ledger latched"
    );
    drop(topic);
    store.close().expect("the store closes");
    drop(store);
    let mut before = verify(&dir);
    assert!(
        before.is_sound() && before.torn_tails() == 1,
        "verify names the bytes the failed append left: {before}"
    );
    for round in 0..3 {
        let store = Store::open(&dir, config()).expect("reopen");
        let topic = store.topic("t").expect("topic");
        for p in &synced {
            topic.read(*p).expect("a synced entry");
        }
        if round == 1 {
            // The topic goes on in a ledger of its own.
            topic.append(b"more").expect("append");
            topic.sync().expect("sync");
        }
        drop(topic);
        store.close().expect("close");
        drop(store);
        let after = verify(&dir);
        assert!(after.is_sound(), "round {round}: {after}");
        let report = before.to_string();
        for torn in before
            .findings
            .iter()
            .filter(|f| after.findings.contains(f))
        {
            let line = report
                .lines()
                .find(|l| l.starts_with(&torn.to_string()))
                .unwrap_or_else(|| panic!("the line of {torn} in {report}"));
            assert!(
                !line.contains("next open cuts"),
                "round {round}: verify promised the next open would cut this back, and it is \
                 still there: {line}"
            );
        }
        before = after;
    }
}

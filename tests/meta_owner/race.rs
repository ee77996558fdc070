//! One owner, many threads: appends that roll ledgers over, cursors acking and flushing,
//! seeking, rewinding, closing and reopening, trims and cursor creation and deletion all at
//! once. With one owner, no operation may ever be told it is fenced.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ackstore::Error;
use ackstore::{FileStorage, MemStorage, Storage};
use ackstore::{InitialPosition, ManagedLedger};
use support::topic::{at, config};

const PER_LEDGER: u64 = 100;
const APPENDS: u64 = 3_000;

fn assert_not_fenced<T>(what: &str, r: ackstore::Result<T>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e @ Error::Fenced { .. }) => {
            panic!("{what}: a single owner was told it is fenced: {e}")
        }
        Err(Error::NoSuchEntry(_) | Error::Closed | Error::NoSuchCursor { .. }) => None,
        Err(e) => panic!("{what}: {e}"),
    }
}

fn single_owner_is_never_fenced(storage: Arc<dyn Storage>) {
    let topic = Arc::new(ManagedLedger::open_with_storage(storage, config(PER_LEDGER)).unwrap());
    let done = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    {
        let (topic, done) = (topic.clone(), done.clone());
        threads.push(std::thread::spawn(move || {
            for i in 0..APPENDS {
                assert_not_fenced("append", topic.append(format!("m{i}").as_bytes()));
                if i % 500 == 0 {
                    assert_not_fenced("trim", topic.trim_consumed());
                }
            }
            done.store(true, Ordering::SeqCst);
        }));
    }
    for name in ["acker-a", "acker-b"] {
        let (topic, done) = (topic.clone(), done.clone());
        threads.push(std::thread::spawn(move || {
            let mut cursor = topic
                .open_cursor(name, at(InitialPosition::Earliest, false))
                .unwrap();
            let mut round = 0u64;
            while !done.load(Ordering::SeqCst) {
                round += 1;
                let entries = assert_not_fenced("read", cursor.read_entries(7)).unwrap_or_default();
                for (k, e) in entries.iter().enumerate() {
                    if k % 2 == 0 {
                        assert_not_fenced("ack", cursor.ack(e.position));
                    }
                }
                if let Some(last) = entries.last()
                    && round.is_multiple_of(5)
                {
                    assert_not_fenced("ack_cumulative", cursor.ack_cumulative(last.position));
                }
                assert_not_fenced("flush", cursor.flush());
                match round % 40 {
                    10 => drop(assert_not_fenced("rewind", cursor.rewind())),
                    20 => {
                        if let Some(p) = topic.last_position() {
                            assert_not_fenced("seek", cursor.seek(p));
                        }
                    }
                    30 => {
                        assert_not_fenced("close", cursor.close());
                        cursor = assert_not_fenced(
                            "reopen cursor",
                            topic.open_cursor(name, at(InitialPosition::Earliest, false)),
                        )
                        .unwrap();
                    }
                    _ => {}
                }
            }
            assert_not_fenced("final close", cursor.close());
        }));
    }
    {
        let (topic, done) = (topic.clone(), done.clone());
        threads.push(std::thread::spawn(move || {
            let mut n = 0u64;
            while !done.load(Ordering::SeqCst) {
                n += 1;
                let name = format!("temp-{n}");
                let c = assert_not_fenced(
                    "create cursor",
                    topic.open_cursor(&name, at(InitialPosition::Latest, false)),
                );
                if let Some(c) = c {
                    assert_not_fenced("flush temp", c.flush());
                }
                assert_not_fenced("delete cursor", topic.delete_cursor(&name));
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_not_fenced("close topic", topic.close());
}

#[test]
fn a_single_owner_is_never_fenced_on_the_in_memory_disk() {
    single_owner_is_never_fenced(Arc::new(MemStorage::new()));
}

#[test]
fn a_single_owner_is_never_fenced_on_real_files() {
    let dir = tempfile::tempdir().unwrap();
    single_owner_is_never_fenced(Arc::new(FileStorage::open(dir.path(), false).unwrap()));
}

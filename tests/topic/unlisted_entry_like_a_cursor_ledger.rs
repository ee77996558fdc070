//! An older copy of a topic's record put back (the newest version deleted), with a newer data
//! ledger whose first entry's payload starts as a cursor-ledger frame does (`AKCL`, version 1,
//! a known kind: bytes a producer chose). A cursor ledger of an earlier release carries its
//! kind in its frame header, with index and timestamp 0; a data entry carries its message
//! index and time: the ledger is the topic's, its entries synced, and the open refuses the
//! older record rather than deleting it as an orphan.

use crate::support;

use std::sync::Arc;

use ackstore::{Error, ManagedLedger, MemStorage, Storage};
use support::topic::{append_n, config, file_bytes};

fn topic_records(disk: &MemStorage) -> Vec<String> {
    let mut names = disk.list().expect("list");
    names.retain(|n| n.starts_with("topic.") && n.ends_with(".meta"));
    names
}

#[test]
fn a_data_entry_that_looks_like_a_cursor_ledgers_above_an_older_record_is_refused() {
    let disk = MemStorage::new();
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let topic = ManagedLedger::open_with_storage(storage.clone(), config(2)).expect("open");
    append_n(&topic, 2);
    topic.close().expect("close");
    let older: Vec<(String, Vec<u8>)> = topic_records(&disk)
        .into_iter()
        .map(|n| (n.clone(), file_bytes(&storage, &n)))
        .collect();

    let topic = ManagedLedger::open_with_storage(storage.clone(), config(2)).expect("reopen");
    // A cursor-ledger frame header: magic, version 1, kind 3 (snapshot), flags 0.
    let mut payload = b"AKCL\x01\x03\x00\x00".to_vec();
    payload.extend_from_slice(b"a producer's bytes");
    let p = topic.append(&payload).expect("append");
    topic.sync().expect("sync");
    topic.close().expect("close");

    for name in topic_records(&disk) {
        disk.remove(&name).expect("remove");
    }
    for (name, bytes) in &older {
        let f = disk.create(name).expect("create");
        f.write_all_at(bytes, 0).expect("write");
        f.sync_data().expect("sync");
    }
    disk.sync_dir().expect("sync dir");

    match ManagedLedger::open_with_storage(storage.clone(), config(2)) {
        Err(Error::Corrupted { .. }) => {}
        Ok(topic) => panic!(
            "the older record opened; the synced entry {p}: {:?}",
            topic.read(p).map(|e| e.payload.len())
        ),
        Err(e) => panic!("the older record: {e}"),
    }
}

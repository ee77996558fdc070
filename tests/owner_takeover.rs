//! A takeover while the previous owner still writes: the new owner claims the topic before it
//! reads or changes anything the previous owner may still be writing, and never writes into
//! the previous owner's ledgers, so whatever the interleaving every ledger stays readable.

mod common;
mod ledger_support;

use std::sync::{Arc, Barrier};

use ackstore::ledger::ManagedLedger;
use common::Hooked;
use ledger_support::{append_n, config, reopen};

const PER_LEDGER: u64 = 1_000;

/// The stale owner appends (and syncs) while the new owner's open is in the middle of reading
/// the ledger files: the new owner must not seal that ledger at the count it scanned.
#[test]
fn a_stale_owner_appending_while_the_new_owner_opens_leaves_every_ledger_readable() {
    let hooked = Hooked::new(ackstore::storage::MemStorage::new());
    let disk = hooked.disk.clone();
    let old = ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(PER_LEDGER)).unwrap();
    let first = append_n(&old, 10);
    old.sync().unwrap();
    disk.break_lock();
    // The new owner's open holds at its first fsync (the entry log has read the ledger files by
    // then); meanwhile the old owner appends more and syncs.
    let barriers = Arc::new((Barrier::new(2), Barrier::new(2)));
    *hooked.hooks.hold_next_sync.lock().unwrap() = Some(barriers.clone());
    let opening = {
        let storage: Arc<dyn ackstore::storage::Storage> = Arc::new(hooked.clone());
        std::thread::spawn(move || ManagedLedger::open_with_storage(storage, config(PER_LEDGER)))
    };
    barriers.0.wait();
    let _ = append_n(&old, 7);
    let _ = old.sync();
    barriers.1.wait();
    let new = opening.join().unwrap().expect("the new owner opens");
    let _ = old.close();
    drop(old);
    let seen = new.last_position().expect("the synced entries are seen");
    assert!(seen >= *first.last().unwrap());
    let more = append_n(&new, 3);
    new.sync().unwrap();
    new.close().unwrap();
    drop(new);
    for image in [disk.clone(), disk.durable_image()] {
        let later = reopen(&image, PER_LEDGER);
        assert_eq!(later.last_position(), more.last().copied());
        for p in first.iter().chain(&more) {
            later
                .read(*p)
                .expect("every entry the new owner recorded is readable");
        }
    }
}

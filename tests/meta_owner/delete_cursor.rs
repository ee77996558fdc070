//! A cursor deleted and created again by a new owner while the former owner still holds it
//! open: nothing the former owner does afterwards reaches the new cursor.

use crate::support;

use std::sync::Arc;

use ackstore::MemStorage;
use ackstore::{InitialPosition, ManagedLedger};
use support::topic::{append_n, at, config, reopen};

#[test]
fn a_former_owner_cannot_write_into_a_cursor_deleted_and_created_again() {
    let disk = MemStorage::new();
    let old = ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(4)).unwrap();
    let p = append_n(&old, 12);
    old.sync().unwrap();
    let stale = old
        .open_cursor("x", at(InitialPosition::Earliest, false))
        .unwrap();
    stale.ack_cumulative(p[2]).unwrap();
    stale.flush().unwrap();
    disk.break_lock();
    let new = reopen(&disk, 4);
    new.delete_cursor("x").unwrap();
    let fresh = new
        .open_cursor("x", at(InitialPosition::Earliest, false))
        .unwrap();
    fresh.ack(p[5]).unwrap();
    fresh.flush().unwrap();
    // The former owner acks far ahead and tries to persist it in every way it has.
    stale.ack_cumulative(p[10]).unwrap();
    assert!(stale.flush().is_err());
    let _ = stale.seek(p[11]);
    let _ = stale.close();
    let _ = old.delete_cursor("x");
    let _ = old.close();
    drop((stale, old));
    fresh.close().unwrap();
    new.close().unwrap();
    drop((fresh, new));
    for image in [disk.clone(), disk.durable_image()] {
        let later = reopen(&image, 4);
        assert_eq!(later.cursor_names(), ["x"]);
        let c = later
            .open_cursor("x", at(InitialPosition::Latest, false))
            .unwrap();
        assert_eq!(
            c.mark_delete_position().unwrap(),
            None,
            "no mark-delete was ever flushed"
        );
        assert!(c.is_acked(p[5]).unwrap());
        assert!(
            !c.is_acked(p[3]).unwrap(),
            "an ack of the former owner's cursor"
        );
    }
}

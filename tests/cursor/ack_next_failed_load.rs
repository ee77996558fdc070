//! An ack of the entry right after mark-delete whose ack set cannot be read (a partition load
//! fails while the disk refuses reads): whatever the failed ack did, the cursor keeps its
//! invariants once the disk reads again: no individually acknowledged entry at or before
//! mark-delete, an entry acknowledged before is not acknowledged twice, and mark-delete ends
//! where the acknowledged entries say.

use crate::support;

use std::sync::Arc;

use ackstore::{ManagedLedger, MemStorage};
use support::topic::{append_n, config, earliest};

#[test]
fn a_failed_load_during_an_ack_after_mark_delete_leaves_no_ack_at_or_before_mark_delete() {
    let disk = MemStorage::new();
    let mut cfg = config(10);
    // Every partition but the one in use is evicted after each touch.
    cfg.cursor.lru_capacity_bytes = 0;
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), cfg).unwrap();
    let p = append_n(&topic, 30);
    let c = topic.open_cursor("sub", earliest()).unwrap();
    c.ack_cumulative(p[4]).unwrap();
    assert!(c.ack(p[6]).unwrap());
    assert!(c.ack(p[25]).unwrap());
    // Written out, so that the next touch elsewhere evicts the first ledger's partition.
    c.flush().unwrap();
    assert!(c.ack(p[16]).unwrap());

    // Filling the hole at 5 needs to know whether 6 is acknowledged: a load that fails.
    disk.fail_after(Some(0));
    let failed = c.ack(p[5]);
    disk.fail_after(None);
    assert!(
        failed.is_err(),
        "the partition of 6 was resident: {failed:?}"
    );

    let mark = c
        .mark_delete_position()
        .unwrap()
        .expect("mark-delete is set");
    for (from, _) in c.acked_ranges().unwrap() {
        assert!(
            from > mark,
            "{from} is acknowledged individually at or before {mark}"
        );
    }
    assert!(!c.ack(p[6]).unwrap(), "6 was acknowledged before");
    c.ack(p[5]).unwrap();
    assert_eq!(c.mark_delete_position().unwrap(), Some(p[6]));
    assert_eq!(
        c.acked_ranges().unwrap(),
        vec![(p[16], p[16]), (p[25], p[25])]
    );
}

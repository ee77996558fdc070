//! An ack of the entry right after mark-delete whose ack set cannot be read (a partition load
//! fails while the disk refuses reads), alone or in an `ack_many` with a later position whose
//! partition fails to load: whatever the failed call did, the cursor keeps its invariants once
//! the disk reads again: no individually acknowledged entry at or before mark-delete nor the
//! entry right after it, an entry acknowledged before is not acknowledged twice, and
//! mark-delete ends where the acknowledged entries say.

use crate::support;

use std::sync::Arc;

use ackstore::{Cursor, ManagedLedger, MemStorage, Position};
use support::topic::{append_n, config, earliest};

/// A topic of three ledgers of 10 entries, `p`, whose cursor keeps only the partition in use
/// resident: mark-delete at 4, `acked` and 25 acknowledged and written out (so the next touch
/// elsewhere evicts their partitions), then 16 acknowledged.
fn cursor_with_partitions_on_disk(
    acked: &[usize],
) -> (MemStorage, ManagedLedger, Vec<Position>, Cursor) {
    let disk = MemStorage::new();
    let mut cfg = config(10);
    // Every partition but the one in use is evicted after each touch.
    cfg.cursor.lru_capacity_bytes = 0;
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), cfg).unwrap();
    let p = append_n(&topic, 30);
    let c = topic.open_cursor("sub", earliest()).unwrap();
    c.ack_cumulative(p[4]).unwrap();
    for i in acked.iter().chain(&[25]) {
        assert!(c.ack(p[*i]).unwrap());
    }
    c.flush().unwrap();
    assert!(c.ack(p[16]).unwrap());
    (disk, topic, p, c)
}

/// No entry of `p` at or before mark-delete, nor the one right after it, is acknowledged
/// individually.
fn no_individual_ack_up_to_the_entry_after_mark_delete(c: &Cursor, p: &[Position]) {
    let mark = c
        .mark_delete_position()
        .unwrap()
        .expect("mark-delete is set");
    let after_mark = p[p.iter().position(|q| *q == mark).expect("an entry") + 1];
    for (from, _) in c.acked_ranges().unwrap() {
        assert!(
            from > after_mark,
            "{from} is acknowledged individually, mark-delete is {mark}"
        );
    }
}

#[test]
fn a_failed_load_during_an_ack_after_mark_delete_leaves_no_ack_at_or_before_mark_delete() {
    let (disk, _topic, p, c) = cursor_with_partitions_on_disk(&[6]);

    // Filling the hole at 5 needs to know whether 6 is acknowledged: a load that fails.
    disk.fail_after(Some(0));
    let failed = c.ack(p[5]);
    disk.fail_after(None);
    assert!(
        failed.is_err(),
        "the partition of 6 was resident: {failed:?}"
    );

    no_individual_ack_up_to_the_entry_after_mark_delete(&c, &p);
    assert!(!c.ack(p[6]).unwrap(), "6 was acknowledged before");
    c.ack(p[5]).unwrap();
    assert_eq!(c.mark_delete_position().unwrap(), Some(p[6]));
    assert_eq!(
        c.acked_ranges().unwrap(),
        vec![(p[16], p[16]), (p[25], p[25])]
    );
}

#[test]
fn a_failed_load_in_ack_many_never_leaves_the_entry_after_mark_delete_acknowledged_individually() {
    let (disk, _topic, p, c) = cursor_with_partitions_on_disk(&[]);

    // 5 and 6 go to a partition made in memory; 26's partition is on the disk, which fails.
    disk.fail_after(Some(0));
    let failed = c.ack_many(&[p[6], p[5], p[26]]);
    disk.fail_after(None);
    assert!(
        failed.is_err(),
        "the partition of 26 was resident: {failed:?}"
    );

    no_individual_ack_up_to_the_entry_after_mark_delete(&c, &p);
    // Whatever the call kept is acknowledged once: acking it again changes nothing.
    let kept: Vec<bool> = [p[5], p[6], p[26]]
        .iter()
        .map(|q| c.is_acked(*q).unwrap())
        .collect();
    for (q, kept) in [p[5], p[6], p[26]].iter().zip(&kept) {
        assert_eq!(c.ack(*q).unwrap(), !kept, "{q}");
    }
    assert_eq!(c.mark_delete_position().unwrap(), Some(p[6]));
    assert_eq!(
        c.acked_ranges().unwrap(),
        vec![(p[16], p[16]), (p[25], p[26])]
    );
}

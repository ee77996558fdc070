//! A deferred claim that cannot be made (a full disk): no write attempt per ack,
//! memory pinned but nothing lost, and once space is back a flush makes the claim and brings
//! memory back within the budget; a reopen finds every ack the Ok flush kept.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ackstore::internals::ackset::MAX_PARTITION_BYTES;
use ackstore::{CursorOptions, ManagedLedger, MemStorage, PersistMode, Position};
use support::tap::{Hook, Op, Tap};
use support::topic::append_n;

#[derive(Default)]
struct Creates(AtomicU64);
impl Hook for Creates {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        if matches!(op, Op::Create(_)) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

fn scenario(mode: PersistMode) {
    let budget = 0;
    let c = support::config::topic(20, mode, budget);
    let disk = MemStorage::new();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone()).unwrap();
    let ps = append_n(&topic, 600);
    topic.sync().unwrap();
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    let mut acked: BTreeSet<Position> = ps.iter().copied().skip(1).step_by(5).collect();
    for &p in &acked {
        cur.ack(p).unwrap();
    }
    cur.close().unwrap();
    topic.close().unwrap();

    let creates = Arc::new(Creates::default());
    let tapped = Arc::new(Tap::new(Arc::new(disk.clone()), creates.clone()));
    let topic = ManagedLedger::open_with_storage(tapped, c.clone()).unwrap();
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    // The disk is full from now on.
    disk.enospc_after(Some(0));
    let at_full = creates.0.load(Ordering::SeqCst);
    for &p in ps.iter().skip(3).step_by(2) {
        cur.ack(p).unwrap();
        acked.insert(p);
        let _ = cur.stats().unwrap();
    }
    let attempts = creates.0.load(Ordering::SeqCst) - at_full;
    assert!(
        attempts <= 2,
        "{mode:?}: {attempts} ledger creations attempted while the disk was full"
    );
    // Space again: the flush makes the claim and memory returns within the budget.
    disk.enospc_after(None);
    cur.flush().expect("the flush with space makes the claim");
    let s = cur.stats().unwrap();
    assert_eq!(s.ackset.pinned_partitions, 0, "{mode:?}: {s:?}");
    assert!(
        s.ackset.resident_bytes + s.ackset.charged_bytes <= budget + MAX_PARTITION_BYTES,
        "{mode:?}: {:?}",
        s.ackset
    );
    drop(cur);
    topic.close().unwrap();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.durable_image()), c).unwrap();
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    let mark = cur.mark_delete_position().unwrap();
    let got: BTreeSet<Position> = ps
        .iter()
        .copied()
        .filter(|&p| mark.is_some_and(|m| p <= m) || cur.is_acked(p).unwrap())
        .collect();
    assert_eq!(got, acked, "{mode:?}");
}

#[test]
fn a_claim_refused_by_a_full_disk_multi() {
    scenario(PersistMode::MultiEntry);
}

#[test]
fn a_claim_refused_by_a_full_disk_single() {
    scenario(PersistMode::SingleEntry);
}

/// The full disk refuses the claim at the open itself (settle_claim): the open still answers,
/// and a close with space keeps everything.
#[test]
fn a_claim_at_open_refused_by_a_full_disk_single() {
    let c = support::config::topic(20, PersistMode::SingleEntry, 0);
    let disk = MemStorage::new();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone()).unwrap();
    let ps = append_n(&topic, 300);
    topic.sync().unwrap();
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    let acked: BTreeSet<Position> = ps.iter().copied().skip(1).step_by(3).collect();
    for &p in &acked {
        cur.ack(p).unwrap();
    }
    cur.close().unwrap();
    topic.close().unwrap();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone()).unwrap();
    disk.enospc_after(Some(0));
    let cur = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("the open answers on a full disk");
    for &p in &acked {
        assert!(cur.is_acked(p).unwrap());
    }
    assert!(
        cur.flush().is_err(),
        "the claim's flush meets the full disk"
    );
    disk.enospc_after(None);
    cur.close().expect("close with space");
    topic.close().unwrap();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.durable_image()), c).unwrap();
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    for &p in &ps {
        assert_eq!(cur.is_acked(p).unwrap(), acked.contains(&p), "{p}");
    }
}

//! Cursors of a standalone topic sharing one ack budget (`CursorConfig::ack_memory`),
//! reopened with their claims pending: a cursor asked to release memory cannot store its unsaved
//! partitions; the shared total stays within the limit plus a partition per cursor, and every
//! ack survives a clean close.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::internals::ackset::MAX_PARTITION_BYTES;
use ackstore::{
    AckBudget, CursorConfig, CursorOptions, LedgerConfig, ManagedLedger, MemStorage, PersistMode,
    Position,
};
use support::topic::append_n;
use support::workload::Rng;

const LIMIT: usize = 8192;

fn run(mode: PersistMode, seed: u64) {
    let budget = AckBudget::new(LIMIT);
    let c = LedgerConfig {
        max_entries_per_ledger: 20,
        cursor: CursorConfig {
            persist_mode: mode,
            lru_capacity_bytes: 1 << 20,
            ack_memory: Some(budget.clone()),
            ..CursorConfig::default()
        },
        ..LedgerConfig::default()
    };
    let disk = MemStorage::new();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone()).unwrap();
    let ps = append_n(&topic, 3000);
    topic.sync().unwrap();
    let names = ["a", "b", "c"];
    let mut models: Vec<BTreeSet<Position>> = vec![BTreeSet::new(); 3];
    for (k, n) in names.iter().enumerate() {
        let cur = topic.open_cursor(n, CursorOptions::default()).unwrap();
        for &p in ps.iter().skip(k + 1).step_by(7) {
            cur.ack(p).unwrap();
            models[k].insert(p);
        }
        cur.close().unwrap();
    }
    topic.close().unwrap();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone()).unwrap();
    let curs: Vec<_> = names
        .iter()
        .map(|n| topic.open_cursor(n, CursorOptions::default()).unwrap())
        .collect();
    let mut rng = Rng::new(seed);
    for step in 0..3000 {
        let k = if step < 1000 { 0 } else { rng.index(3) };
        let p = ps[rng.index(ps.len())];
        curs[k].ack(p).unwrap();
        models[k].insert(p);
        let s = budget.stats();
        assert!(
            s.resident_bytes <= LIMIT + 3 * MAX_PARTITION_BYTES,
            "{mode:?} seed {seed} step {step}: {s:?}"
        );
    }
    for c in &curs {
        c.close().unwrap();
    }
    topic.close().unwrap();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.durable_image()), c).unwrap();
    for (k, n) in names.iter().enumerate() {
        let cur = topic.open_cursor(n, CursorOptions::default()).unwrap();
        let mark = cur.mark_delete_position().unwrap();
        let got: BTreeSet<Position> = ps
            .iter()
            .copied()
            .filter(|&p| mark.is_some_and(|m| p <= m) || cur.is_acked(p).unwrap())
            .collect();
        assert_eq!(got, models[k], "{mode:?} seed {seed} cursor {n}");
    }
}

#[test]
fn shared_budget_with_pending_claims_multi() {
    for seed in 0..4 {
        run(PersistMode::MultiEntry, seed);
    }
}

#[test]
fn shared_budget_with_pending_claims_single() {
    for seed in 0..4 {
        run(PersistMode::SingleEntry, seed);
    }
}

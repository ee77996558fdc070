//! Power cuts during cursor-ledger workloads (the persistence layer driven directly): after every
//! storage operation, and at every byte of the unsynced tail, the recovered acked set lies between
//! the last flushed state and the truth (invariants 1 and 2).

mod support;

use ackstore::CursorConfig;
use ackstore::MemStorage;
use ackstore::PersistMode;
use support::crash::{
    Cut, Points, cut_everywhere, cut_everywhere_after, torn_image, unsynced_tail,
};
use support::cursor_ledger::{Op, Outcome, check_image, mixed_workload, run, tight_config};

/// Cuts the power after every storage operation of `ops`, and checks the durable image and a
/// few torn images of each cut; returns what the workload did without a cut.
fn cut_every_operation(config: &CursorConfig, ops: &[Op]) -> Outcome {
    let clean = cut_everywhere(
        |disk| run(disk, config, ops),
        |disk, cut, outcome| {
            let n = cut.n;
            check_image(
                &disk.durable_image(),
                config,
                &outcome,
                &format!("cut after {n}"),
            );
            for extra in [1, 7, 40, 200] {
                check_image(
                    &torn_image(disk, |_| extra),
                    config,
                    &outcome,
                    &format!("cut after {n}, {extra} torn bytes"),
                );
            }
        },
    );
    assert_eq!(
        clean.result.error, None,
        "workload fails without a power cut"
    );
    let total = clean.total;
    assert!(
        total > 20,
        "workload too small to mean much: {total} operations"
    );
    clean.result
}

#[test]
fn power_cut_after_every_operation_keeps_flushed_acks_and_invents_none() {
    let outcome = cut_every_operation(&tight_config(), &mixed_workload(1, 120));
    // The workload exercised what it is meant to cut.
    assert!(outcome.rollovers >= 3, "{outcome:?}");
    assert!(outcome.pages_written > 0, "{outcome:?}");
    assert!(outcome.evictions_stored > 0, "{outcome:?}");
}

#[test]
fn power_cut_during_single_entry_workload_keeps_flushed_acks() {
    let config = CursorConfig {
        persist_mode: PersistMode::SingleEntry,
        ..tight_config()
    };
    let outcome = cut_every_operation(&config, &mixed_workload(2, 80));
    assert!(
        outcome.rollovers >= 2 && outcome.evictions_stored > 0,
        "{outcome:?}"
    );
}

#[test]
fn power_cut_at_every_step_of_a_rollover() {
    // Enough partitions for index pages; then one rollover, cut at each of its operations.
    let mut ops: Vec<Op> = (0..12u64)
        .map(|c| Op::AckRange(2, (c << 16) + 3, (c << 16) + 5))
        .collect();
    ops.push(Op::Flush);
    ops.push(Op::Ack(ackstore::Position::new(2, 9)));
    ops.push(Op::Rollover);
    let config = CursorConfig {
        cursor_ledger_max_entries: 1_000,
        ..tight_config()
    };
    let outcome = cut_every_operation(&config, &ops);
    assert_eq!(outcome.rollovers, 1);
    assert!(outcome.pages_written >= 3, "{outcome:?}");
}

#[test]
fn power_cut_at_every_byte_of_the_last_flush() {
    let config = tight_config();
    let mut ops = mixed_workload(3, 40);
    ops.push(Op::Ack(ackstore::Position::new(3, 1 << 16)));
    ops.push(Op::Flush);
    // Cut only at the last flush's operations: count those of the workload without it.
    let before_last = {
        let probe = MemStorage::new();
        run(&probe, &config, &ops[..ops.len() - 1]);
        probe.mutations()
    };
    let points = Points {
        from: before_last,
        step: 1,
    };
    let clean = cut_everywhere_after(
        points,
        |_| (),
        |disk, ()| run(disk, &config, &ops),
        |cut, Cut { n, .. }, outcome| {
            for extra in 0..=unsynced_tail(cut) {
                check_image(
                    &torn_image(cut, |_| extra),
                    &config,
                    &outcome,
                    &format!("cut after {n}, {extra} torn bytes"),
                );
            }
        },
    );
    assert_eq!(clean.result.error, None);
}

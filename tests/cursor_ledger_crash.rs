//! Power cuts during cursor-ledger workloads (the persistence layer driven directly): after every
//! storage operation, and at every byte of the unsynced tail, the recovered acked set lies between
//! the last flushed state and the truth (invariants 1 and 2).

mod support;

use ackstore::cursor::CursorConfig;
use ackstore::cursor::persist::PersistMode;
use ackstore::storage::MemStorage;
use support::crash::torn_image;
use support::cursor_ledger::{Op, Outcome, check_image, mixed_workload, run, tight_config};

/// The longest unsynced tail of any file on `disk`.
fn unsynced_tail(disk: &MemStorage) -> usize {
    let mut longest = 0;
    let _ = disk.crash_image(|_, durable, live| {
        longest = longest.max(live.len().saturating_sub(durable.len()));
        durable.to_vec()
    });
    longest
}

/// Cuts the power after every storage operation of `ops`, and checks the durable image and a
/// few torn images of each cut.
fn cut_everywhere(config: &CursorConfig, ops: &[Op]) -> Outcome {
    let full = MemStorage::new();
    let outcome = run(&full, config, ops);
    assert_eq!(outcome.error, None, "workload fails without a power cut");
    let total = full.mutations();
    assert!(
        total > 20,
        "workload too small to mean much: {total} operations"
    );
    for n in 0..=total {
        let disk = MemStorage::new();
        disk.fail_after(Some(n));
        let outcome = run(&disk, config, ops);
        check_image(
            &disk.durable_image(),
            config,
            &outcome,
            &format!("cut after {n}"),
        );
        for extra in [1, 7, 40, 200] {
            check_image(
                &torn_image(&disk, |_| extra),
                config,
                &outcome,
                &format!("cut after {n}, {extra} torn bytes"),
            );
        }
    }
    outcome
}

#[test]
fn power_cut_after_every_operation_keeps_flushed_acks_and_invents_none() {
    let outcome = cut_everywhere(&tight_config(), &mixed_workload(1, 120));
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
    let outcome = cut_everywhere(&config, &mixed_workload(2, 80));
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
    let outcome = cut_everywhere(&config, &ops);
    assert_eq!(outcome.rollovers, 1);
    assert!(outcome.pages_written >= 3, "{outcome:?}");
}

#[test]
fn power_cut_at_every_byte_of_the_last_flush() {
    let config = tight_config();
    let mut ops = mixed_workload(3, 40);
    ops.push(Op::Ack(ackstore::Position::new(3, 1 << 16)));
    ops.push(Op::Flush);
    let disk = MemStorage::new();
    let outcome = run(&disk, &config, &ops);
    assert_eq!(outcome.error, None);
    // Run again but stop just before the last flush's sync: find its write operations.
    let before_last = {
        let probe = MemStorage::new();
        run(&probe, &config, &ops[..ops.len() - 1]);
        probe.mutations()
    };
    for n in before_last..disk.mutations() {
        let cut = MemStorage::new();
        cut.fail_after(Some(n));
        let outcome = run(&cut, &config, &ops);
        let tail = unsynced_tail(&cut);
        for extra in 0..=tail {
            check_image(
                &torn_image(&cut, |_| extra),
                &config,
                &outcome,
                &format!("cut after {n}, {extra} torn bytes"),
            );
        }
    }
}

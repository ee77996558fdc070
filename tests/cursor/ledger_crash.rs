//! Power cuts during cursor-ledger workloads (the persistence layer driven directly): after every
//! storage operation, and at every byte of the unsynced tail, the recovered acked set lies between
//! the last flushed state and the truth (invariants 1 and 2). The workloads write every form of
//! the compact partition table: partitions inline in the marker and in index pages, partitions
//! in entries of their own (too large to go inline, or stored by evictions), pages split by rows
//! and by bytes, and rollovers that carry inline partitions over.

use crate::support;

use ackstore::CursorConfig;
use ackstore::MemStorage;
use ackstore::PersistMode;
use ackstore::Position;
use ackstore::internals::cursor::verify::check_cursor_ledger;
use support::crash::{
    Cut, Points, cut_everywhere, cut_everywhere_after, torn_image, unsynced_tail,
};
use support::cursor_ledger::{
    Env, Op, Outcome, Rng, check_image, mixed_workload, open_cursor, run, tight_config,
};

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

/// Cuts the power at every storage operation of the last op of `ops` (a flush or rollover),
/// and checks the image torn at every byte of the unsynced tail; returns the clean run.
fn cut_every_byte_of_the_last_op(config: &CursorConfig, ops: &[Op]) -> Outcome {
    // Cut only at the last op's operations: count those of the workload without it.
    let before_last = {
        let probe = MemStorage::new();
        run(&probe, config, &ops[..ops.len() - 1]);
        probe.mutations()
    };
    let points = Points {
        from: before_last,
        step: 1,
    };
    let clean = cut_everywhere_after(
        points,
        |_| (),
        |disk, ()| run(disk, config, ops),
        |cut, Cut { n, .. }, outcome| {
            for extra in 0..=unsynced_tail(cut) {
                check_image(
                    &torn_image(cut, |_| extra),
                    config,
                    &outcome,
                    &format!("cut after {n}, {extra} torn bytes"),
                );
            }
        },
    );
    assert_eq!(clean.result.error, None);
    clean.result
}

#[test]
fn power_cut_at_every_byte_of_the_last_flush() {
    let mut ops = mixed_workload(3, 40);
    ops.push(Op::Ack(ackstore::Position::new(3, 1 << 16)));
    ops.push(Op::Flush);
    cut_every_byte_of_the_last_op(&tight_config(), &ops);
}

/// Pages of at most 256 bytes and 64 rows, so a partition goes inline while its inline form takes
/// at most 64 bytes, pages split by bytes long before they reach their row bound, and the table
/// leaves the marker after a few partitions; a ledger that rolls over every dozen entries
/// ([`tight_config`]) and a budget of a few partitions, so evictions store some.
fn small_pages() -> CursorConfig {
    CursorConfig {
        index_page_bytes: 256,
        index_page_rows: 64,
        lru_capacity_bytes: 3_000,
        ..tight_config()
    }
}

/// Rounds of scattered acks over 24 partitions (three ledgers, chunks 0 to 7, entries within the
/// first 4,000 of a chunk; half of them into partition 1:0), each round flushed: partitions
/// start small enough to go inline and 1:0 outgrows it, pages grow and split, with rollovers,
/// reopens and cumulative acks.
fn growing_workload(seed: u64, rounds: usize) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let mut ops = Vec::new();
    let mut md = Position::new(1, 0);
    for round in 0..rounds {
        for _ in 0..40 {
            let (ledger, chunk) = if rng.below(2) == 0 {
                (1, 0)
            } else {
                (1 + rng.below(3), rng.below(8))
            };
            ops.push(Op::Ack(Position::new(
                ledger,
                (chunk << 16) + rng.below(4_000),
            )));
        }
        if round % 5 == 4 {
            md = Position::new(1, md.entry_id + rng.below(300));
            ops.push(Op::Advance(md));
        }
        ops.push(match round % 9 {
            6 => Op::Rollover,
            8 => Op::Reopen,
            _ => Op::Flush,
        });
    }
    ops.push(Op::Flush);
    ops
}

/// What the clean run of `ops` left in its cursor ledger: partitions in entries of their own,
/// partitions inline, index pages.
fn forms_written(config: &CursorConfig, ops: &[Op]) -> (u64, u64, u64) {
    let disk = MemStorage::new();
    let outcome = run(&disk, config, ops);
    assert_eq!(outcome.error, None);
    let env = Env::open(&disk).unwrap();
    let ledger = open_cursor(&env, config)
        .unwrap()
        .persister
        .cursor_ledger()
        .unwrap();
    let check = check_cursor_ledger(&env.log, ledger).unwrap();
    assert!(check.problems.is_empty(), "{:?}", check.problems);
    (check.partitions, check.inline_partitions, check.index_pages)
}

#[test]
fn power_cut_while_partitions_outgrow_their_inline_form_and_pages_split_by_bytes() {
    let config = small_pages();
    let ops = growing_workload(4, 24);
    let (separate, inline, pages) = forms_written(&config, &ops);
    assert!(
        separate > 0 && inline > 0 && pages > 1,
        "the workload writes both forms and pages: {separate} separate, {inline} inline, {pages} pages"
    );
    let outcome = cut_every_operation(&config, &ops);
    let counts = (
        outcome.rollovers,
        outcome.pages_written,
        outcome.evictions_stored,
    );
    assert!(
        counts.0 >= 2 && counts.1 > 4 && counts.2 > 0,
        "rollovers, pages, evictions: {counts:?}"
    );
}

#[test]
fn power_cut_at_every_byte_of_a_rollover_that_carries_inline_partitions() {
    let config = CursorConfig {
        cursor_ledger_max_entries: 1_000,
        ..small_pages()
    };
    let mut ops = growing_workload(5, 12);
    ops.push(Op::Ack(Position::new(2, 5)));
    ops.push(Op::Rollover);
    let clean = cut_every_byte_of_the_last_op(&config, &ops);
    assert!(clean.rollovers >= 1, "{}", clean.rollovers);
}

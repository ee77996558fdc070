//! The persistence layer driven directly: what flushes write in each mode, the single-entry limits,
//! rollover, the record, and every migration between modes.

use crate::support;

use std::sync::Arc;

use ackstore::CursorConfig;
use ackstore::Error;
use ackstore::Position;
use ackstore::internals::format::meta::CursorRecord;
use ackstore::internals::log::ledger_file_name;
use ackstore::{MemStorage, Storage};
use ackstore::{OverflowPolicy, PersistMode};
use support::cursor_ledger::{Cursor, Env, Model, RECORD, fresh, model_of, open_cursor};

fn multi() -> CursorConfig {
    CursorConfig::default()
}

fn single() -> CursorConfig {
    CursorConfig {
        persist_mode: PersistMode::SingleEntry,
        ..CursorConfig::default()
    }
}

/// Acks every other entry of `0..2 * n` in ledger 3, spanning `2n / 65536` partitions.
fn alternating(cursor: &mut Cursor, model: &mut Model, n: u64) {
    for i in 0..n {
        let p = Position::new(3, 2 * i);
        cursor.ack(p).unwrap();
        model.ack(p);
    }
}

fn reopened(disk: &MemStorage, config: &CursorConfig) -> Model {
    let env = Env::open(disk).unwrap();
    let mut cursor = open_cursor(&env, config).unwrap();
    model_of(&mut cursor).unwrap()
}

#[test]
fn first_flush_creates_the_cursor_ledger_and_the_record() {
    let (_disk, env, mut cursor) = fresh(&multi());
    assert_eq!(cursor.persister.cursor_ledger(), None);
    assert!(env.meta.get(RECORD).unwrap().is_none());
    cursor.ack(Position::new(1, 4)).unwrap();
    cursor.state.mark_delete = Position::new(1, 2);
    cursor.flush().unwrap();
    let ledger = cursor.persister.cursor_ledger().unwrap();
    let (_, bytes) = env.meta.get(RECORD).unwrap().unwrap();
    let record = CursorRecord::decode(&bytes).unwrap();
    assert_eq!(record.cursor_ledger, Some(ledger));
    assert_eq!(record.mark_delete, Position::new(1, 2));
}

#[test]
fn multi_entry_flush_after_one_ack_writes_one_partition_and_the_marker() {
    let (_disk, env, mut cursor) = fresh(&multi());
    let mut model = Model::default();
    // 200k holes over seven partitions.
    alternating(&mut cursor, &mut model, 200_000);
    let full = cursor.flush().unwrap();
    assert_eq!(full.partitions, 7);
    cursor.ack(Position::new(3, 1)).unwrap();
    let one = cursor.flush().unwrap();
    assert_eq!((one.partitions, one.pages, one.entries), (1, 0, 2));
    assert!(one.bytes <= 64 * 1024 + one.commit_bytes, "{one:?}");
    // Nothing changed: nothing written, nothing synced.
    let syncs = env.log.stats().sync_calls;
    let none = cursor.flush().unwrap();
    assert_eq!((none.partitions, none.entries, none.bytes), (0, 0, 0));
    assert_eq!(env.log.stats().sync_calls, syncs);
    // A new mark-delete alone is a marker.
    cursor.state.mark_delete = Position::new(3, 0);
    let md = cursor.flush().unwrap();
    assert_eq!((md.partitions, md.entries), (0, 1));
}

#[test]
fn paged_table_flush_after_one_ack_rewrites_one_page() {
    let config = CursorConfig {
        index_page_rows: 8,
        ..multi()
    };
    let (disk, env, mut cursor) = fresh(&config);
    for chunk in 0..100u64 {
        cursor.ack(Position::new(4, chunk << 16)).unwrap();
    }
    let full = cursor.flush().unwrap();
    assert_eq!(full.partitions, 100);
    assert_eq!(full.pages, 25, "first paging fills pages half way");
    cursor.ack(Position::new(4, (50 << 16) + 1)).unwrap();
    let one = cursor.flush().unwrap();
    assert_eq!((one.partitions, one.pages), (1, 1));
    drop(cursor);
    drop(env);
    let got = reopened(&disk, &config);
    assert_eq!(got.acks.len(), 101);
}

#[test]
fn single_entry_over_the_range_limit_is_an_error_and_writes_nothing() {
    let config = CursorConfig {
        max_ranges_single_entry: 10,
        ..single()
    };
    let (_disk, env, mut cursor) = fresh(&config);
    let mut model = Model::default();
    alternating(&mut cursor, &mut model, 10);
    cursor.flush().unwrap();
    let ledger = cursor.persister.cursor_ledger().unwrap();
    let entries = env.log.entry_count(ledger).unwrap();
    alternating(&mut cursor, &mut model, 11);
    let err = cursor.flush().unwrap_err();
    assert!(matches!(err, Error::LimitExceeded { .. }), "{err}");
    assert!(err.to_string().contains("multi-entry"), "{err}");
    assert_eq!(env.log.entry_count(ledger).unwrap(), entries);
    assert_eq!(cursor.persister.stats().overflows, 0);
}

#[test]
fn single_entry_over_the_limits_warns_counts_and_keeps_the_lowest_ranges() {
    for (max_ranges, max_entry_size) in [(10, 5 << 20), (u64::MAX, 200)] {
        let config = CursorConfig {
            max_ranges_single_entry: max_ranges,
            max_entry_size,
            on_single_entry_overflow: OverflowPolicy::Warn,
            ..single()
        };
        let (disk, env, mut cursor) = fresh(&config);
        let mut model = Model::default();
        alternating(&mut cursor, &mut model, 100);
        let flush = cursor.flush().unwrap();
        assert!(flush.ranges_cut > 0);
        assert_eq!(flush.snapshot_ranges + flush.ranges_cut, 100);
        let stats = cursor.persister.stats();
        assert_eq!((stats.overflows, stats.ranges_cut), (1, flush.ranges_cut));
        drop(cursor);
        drop(env);
        let got = reopened(&disk, &config);
        let kept: Vec<_> = model
            .acks
            .iter()
            .copied()
            .take(flush.snapshot_ranges as usize)
            .collect();
        assert_eq!(got.acks.into_iter().collect::<Vec<_>>(), kept);
    }
}

#[test]
fn multi_entry_keeps_more_ranges_than_the_single_entry_cap() {
    let config = CursorConfig {
        max_ranges_single_entry: 1_000,
        max_entry_size: 64 << 10,
        ..multi()
    };
    let (disk, env, mut cursor) = fresh(&config);
    let mut model = Model::default();
    alternating(&mut cursor, &mut model, 300_000);
    cursor.flush().unwrap();
    drop(cursor);
    drop(env);
    let env = Env::open(&disk).unwrap();
    let mut cursor = open_cursor(&env, &config).unwrap();
    assert_eq!(cursor.acks.range_count().unwrap(), 300_000);
    assert_eq!(model_of(&mut cursor).unwrap(), model);
}

#[test]
fn every_mode_migration_keeps_every_ack() {
    let modes = [multi(), single()];
    for from in &modes {
        for to in &modes {
            let disk = MemStorage::new();
            let mut model = Model::default();
            {
                let env = Env::open(&disk).unwrap();
                let mut cursor = open_cursor(&env, from).unwrap();
                alternating(&mut cursor, &mut model, 5_000);
                cursor.advance(Position::new(3, 100)).unwrap();
                model.advance(Position::new(3, 100));
                cursor.flush().unwrap();
            }
            let what = format!("{:?} -> {:?}", from.persist_mode, to.persist_mode);
            {
                let env = Env::open(&disk).unwrap();
                let mut cursor = open_cursor(&env, to).unwrap();
                assert_eq!(model_of(&mut cursor).unwrap(), model, "{what}");
                cursor.ack(Position::new(3, 20_001)).unwrap();
                model.ack(Position::new(3, 20_001));
                cursor.flush().unwrap();
            }
            assert_eq!(reopened(&disk, from), model, "{what}, back");
        }
    }
}

#[test]
fn rollover_moves_every_partition_switches_the_record_and_deletes_the_old_ledger() {
    let config = CursorConfig {
        // Six small partitions travel inline in each marker: a flush appends one or two
        // entries, so the ledger is full after a few flushes.
        cursor_ledger_max_entries: 4,
        // Small enough that most partitions are cold when the rollover copies them.
        lru_capacity_bytes: 2_000,
        ..multi()
    };
    let (disk, env, mut cursor) = fresh(&config);
    let mut model = Model::default();
    let mut ledgers = Vec::new();
    for round in 0..12u64 {
        for chunk in 0..6u64 {
            let p = Position::new(7, (chunk << 16) + round);
            cursor.ack(p).unwrap();
            model.ack(p);
        }
        cursor.flush().unwrap();
        let ledger = cursor.persister.cursor_ledger().unwrap();
        if ledgers.last() != Some(&ledger) {
            ledgers.push(ledger);
        }
    }
    let stats = cursor.persister.stats();
    assert!(stats.rollovers >= 2, "{stats:?}");
    assert_eq!(stats.pending_deletes, 0);
    let current = *ledgers.last().unwrap();
    for old in &ledgers[..ledgers.len() - 1] {
        assert!(
            !disk.exists(&ledger_file_name(*old)).unwrap(),
            "ledger {old} kept"
        );
    }
    let (_, bytes) = env.meta.get(RECORD).unwrap().unwrap();
    assert_eq!(
        CursorRecord::decode(&bytes).unwrap().cursor_ledger,
        Some(current)
    );
    drop(cursor);
    drop(env);
    assert_eq!(reopened(&disk, &config), model);
}

#[test]
fn a_record_changed_behind_the_persisters_back_fences_its_next_switch() {
    let (disk, env, mut cursor) = fresh(&multi());
    cursor.ack(Position::new(1, 5)).unwrap();
    cursor.flush().unwrap();
    // Another owner rewrites the record.
    let (version, bytes) = env.meta.get(RECORD).unwrap().unwrap();
    env.meta.put(RECORD, Some(version), &bytes).unwrap();
    cursor.ack(Position::new(1, 9)).unwrap();
    cursor.persister.request_rollover();
    let err = cursor.flush().unwrap_err();
    assert!(matches!(err, Error::Fenced { .. }), "{err}");
    // The abandoned rollover ledger is gone; the old state still recovers.
    let ledger = CursorRecord::decode(&bytes).unwrap().cursor_ledger.unwrap();
    assert_eq!(env.log.ledger_ids(), vec![ledger]);
    drop(cursor);
    drop(env);
    let got = reopened(&disk, &multi());
    assert!(got.acks.contains(&Position::new(1, 5)));
}

#[test]
fn concurrent_ackers_and_a_flusher_lose_no_flushed_ack() {
    let disk = MemStorage::new();
    let env = Env::open(&disk).unwrap();
    let config = CursorConfig {
        lru_capacity_bytes: 4_000,
        cursor_ledger_max_entries: 50,
        ..multi()
    };
    let cursor = Arc::new(std::sync::Mutex::new(open_cursor(&env, &config).unwrap()));
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let cursor = Arc::clone(&cursor);
            s.spawn(move || {
                for i in 0..3_000u64 {
                    let p = Position::new(1 + t, (i % 7) << 16 | i);
                    cursor.lock().unwrap().ack(p).unwrap();
                }
            });
        }
        s.spawn(|| {
            for _ in 0..30 {
                cursor.lock().unwrap().flush().unwrap();
                std::thread::yield_now();
            }
        });
    });
    let mut cursor = Arc::try_unwrap(cursor).ok().unwrap().into_inner().unwrap();
    cursor.flush().unwrap();
    let expected: std::collections::BTreeSet<_> = (0..3u64)
        .flat_map(|t| (0..3_000u64).map(move |i| Position::new(1 + t, (i % 7) << 16 | i)))
        .collect();
    drop(cursor);
    drop(env);
    let got = reopened(&disk, &config);
    assert_eq!(got.acks, expected);
}

#[test]
fn tens_of_thousands_of_partitions_page_their_table_and_recover() {
    const PARTITIONS: u64 = 20_000;
    let disk = MemStorage::new();
    let config = multi();
    {
        let env = Env::open(&disk).unwrap();
        let mut cursor = open_cursor(&env, &config).unwrap();
        for chunk in 0..PARTITIONS {
            cursor.ack(Position::new(9, chunk << 16)).unwrap();
        }
        let full = cursor.flush().unwrap();
        assert_eq!(full.partitions, PARTITIONS);
        // Each partition (one entry acked) travels inline in a row of 5 to 9 bytes; pages are
        // cut half full, at most 2 KiB of the default 4 KiB, so 7 to 9 bytes a row.
        let rows_bytes = (5 * PARTITIONS, 9 * PARTITIONS);
        assert!(
            (rows_bytes.0.div_ceil(2048)..=rows_bytes.1.div_ceil(2048 - 16)).contains(&full.pages),
            "{full:?}"
        );
        assert_eq!(full.entries, full.pages + 1, "only pages and the marker");
        assert!(full.commit_bytes < 2_000, "{full:?}");
        cursor
            .ack(Position::new(9, (PARTITIONS / 2) << 16 | 7))
            .unwrap();
        let one = cursor.flush().unwrap();
        // The changed partition is inline in the one page written again.
        assert_eq!((one.partitions, one.pages, one.entries), (1, 1, 2));
        assert!(one.bytes < 2_048 + 2_000, "{one:?}");
    }
    let env = Env::open(&disk).unwrap();
    let mut cursor = open_cursor(&env, &config).unwrap();
    assert_eq!(cursor.acks.len(), PARTITIONS + 1);
    assert_eq!(cursor.acks.stats().resident_partitions, 0);
    assert!(
        cursor
            .acks
            .contains(Position::new(9, (PARTITIONS / 2) << 16 | 7))
            .unwrap()
    );
    assert!(!cursor.acks.contains(Position::new(9, 1)).unwrap());
}

#[test]
fn the_records_fallback_mark_delete_is_refreshed_every_few_flushes() {
    let (_disk, env, mut cursor) = fresh(&multi());
    cursor.persister.set_record_refresh_flushes(4);
    let record_md = || {
        let (_, bytes) = env.meta.get(RECORD).unwrap().unwrap();
        CursorRecord::decode(&bytes).unwrap().mark_delete
    };
    for i in 1..=8u64 {
        cursor.advance(Position::new(1, i)).unwrap();
        cursor.flush().unwrap();
        // Flush 1 creates the record; flushes 4 and 8 refresh it.
        let expected = match i {
            1..=3 => 1,
            4..=7 => 4,
            _ => 8,
        };
        assert_eq!(record_md(), Position::new(1, expected), "after flush {i}");
    }
}

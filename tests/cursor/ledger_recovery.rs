//! Recovery from damaged cursor ledgers, driven directly (no managed ledger): torn and corrupt
//! markers, partitions and pages, bit flips, truncations, a missing ledger. Recovery falls back to
//! an older state or to the record, and never reports an ack that was not made.

use crate::support;

use ackstore::CursorConfig;
use ackstore::Position;
use ackstore::internals::cursor::persist::PersistedState;
use ackstore::internals::cursor::recover::RecoverySource;
use ackstore::internals::cursor::verify::check_cursor_ledger;
use ackstore::internals::format::cursor::{
    EntryKind, PageRef, PartitionEntry, PartitionRow, TableRef, encode_index_page, encode_marker,
    encode_partition_entry, payload_crc, peek_kind,
};
use ackstore::internals::format::ledger::FRAME_HEADER_LEN;
use ackstore::internals::log::{EntryMeta, ledger_file_name};
use ackstore::{MemStorage, Storage};
use support::cursor_ledger::{Cursor, Env, Model, check_bounds, model_of, open_cursor};

/// Acks `positions` on `cursor` and in `model`.
fn ack_all(cursor: &mut Cursor, model: &mut Model, positions: &[Position]) {
    for &p in positions {
        cursor.ack(p).unwrap();
        model.ack(p);
    }
}

/// Positions in `partitions` different partitions of ledger 5 (two acks each).
fn spread(partitions: u64, salt: u64) -> Vec<Position> {
    (0..partitions)
        .flat_map(|c| [(c << 16) + salt, (c << 16) + salt + 2])
        .map(|e| Position::new(5, e))
        .collect()
}

/// Two flushes: returns the disk, the state of each flush, and the cursor ledger id.
fn two_flushes(partitions: u64) -> (MemStorage, Model, Model, u64) {
    two_flushes_with(&support::config::cursor_pages_of_rows(4), partitions)
}

/// As [`two_flushes`], with `config`.
fn two_flushes_with(config: &CursorConfig, partitions: u64) -> (MemStorage, Model, Model, u64) {
    let disk = MemStorage::new();
    let env = Env::open(&disk).unwrap();
    let mut cursor = open_cursor(&env, config).unwrap();
    let mut model = Model::default();
    ack_all(&mut cursor, &mut model, &spread(partitions, 1));
    cursor.flush().unwrap();
    let first = model.clone();
    ack_all(&mut cursor, &mut model, &spread(partitions, 10));
    cursor.flush().unwrap();
    let ledger = cursor.persister.cursor_ledger().unwrap();
    (disk, first, model, ledger)
}

fn reopen(disk: &MemStorage) -> (Env, Cursor) {
    let env = Env::open(disk).unwrap();
    let cursor = open_cursor(&env, &support::config::cursor_pages_of_rows(4)).unwrap();
    (env, cursor)
}

fn recovered(disk: &MemStorage) -> (Model, Cursor) {
    recovered_with(disk, &support::config::cursor_pages_of_rows(4))
}

fn recovered_with(disk: &MemStorage, config: &CursorConfig) -> (Model, Cursor) {
    let env = Env::open(disk).unwrap();
    let mut cursor = open_cursor(&env, config).unwrap();
    (model_of(&mut cursor).unwrap(), cursor)
}

fn meta(kind: EntryKind) -> EntryMeta {
    EntryMeta {
        index: 0,
        num_messages: u32::from(kind.code()),
        timestamp: 0,
    }
}

#[test]
fn recovery_uses_the_newest_marker_lazily() {
    let (disk, _, second, _) = two_flushes(6);
    let (_env, mut cursor) = reopen(&disk);
    let report = cursor.report.clone().unwrap();
    assert!(matches!(report.source, RecoverySource::Marker(_)));
    assert_eq!(report.rejected, 0);
    assert_eq!(cursor.acks.stats().resident_partitions, 0);
    assert_eq!(cursor.acks.len(), second.acks.len() as u64);
    assert!(cursor.acks.contains(Position::new(5, 10)).unwrap());
    assert_eq!(cursor.acks.stats().resident_partitions, 1);
    assert_eq!(model_of(&mut cursor).unwrap(), second);
}

#[test]
fn recovery_walks_back_past_torn_marker() {
    for partitions in [3, 9] {
        let (disk, first, second, ledger) = two_flushes(partitions);
        let name = ledger_file_name(ledger);
        let bytes = disk.live_bytes(&name).unwrap();
        // Cut inside the last entry (the second marker): the log drops the torn frame.
        disk.set_bytes(&name, bytes[..bytes.len() - 3].to_vec())
            .unwrap();
        let (got, cursor) = recovered(&disk);
        assert_eq!(got, first, "{partitions} partitions");
        assert!(matches!(
            cursor.report.unwrap().source,
            RecoverySource::Marker(_)
        ));
        check_bounds(&got, &second, &first, "torn marker");
    }
}

/// Appends a crafted marker to the cursor ledger of `disk` that references `rows`.
fn append_marker(disk: &MemStorage, ledger: u64, rows: &[PartitionRow]) {
    let env = Env::open(disk).unwrap();
    let state = PersistedState {
        mark_delete: Position::new(5, 0),
        ..PersistedState::default()
    };
    let marker = encode_marker(&state, TableRef::Inline(rows)).unwrap();
    env.log
        .append(ledger, meta(EntryKind::Marker), &marker)
        .unwrap();
    env.log.sync(ledger).unwrap();
}

/// Appends a partition entry claiming `key` with `cardinality` (wrapping arbitrary bytes).
fn append_partition(
    disk: &MemStorage,
    ledger: u64,
    key: (u64, u64),
    cardinality: u64,
) -> (u64, u32) {
    let env = Env::open(disk).unwrap();
    let payload = encode_partition_entry(&PartitionEntry {
        ledger_id: key.0,
        chunk: key.1,
        cardinality,
        body: b"not a partition",
    });
    let id = env
        .log
        .append(ledger, meta(EntryKind::Partition), &payload)
        .unwrap();
    env.log.sync(ledger).unwrap();
    (id, payload_crc(&payload))
}

fn row(key: (u64, u64), entry_id: u64, crc: u32, cardinality: u64) -> PartitionRow {
    PartitionRow {
        ledger_id: key.0,
        chunk: key.1,
        entry_id,
        crc,
        cardinality,
    }
}

#[test]
fn marker_whose_partition_fails_its_crc_is_passed_over() {
    let (disk, _, second, ledger) = two_flushes(3);
    let (id, crc) = append_partition(&disk, ledger, (9, 0), 1_000);
    append_marker(&disk, ledger, &[row((9, 0), id, crc ^ 1, 1_000)]);
    let (got, cursor) = recovered(&disk);
    assert_eq!(got, second);
    assert_eq!(cursor.report.unwrap().rejected, 1);
}

#[test]
fn marker_referencing_a_later_entry_is_passed_over() {
    let (disk, _, second, ledger) = two_flushes(3);
    let next = Env::open(&disk).unwrap().log.entry_count(ledger).unwrap();
    let (id, crc) = append_partition(&disk, ledger, (9, 0), 1);
    assert_eq!(id, next);
    // Marker `next + 1` references entry `next + 2`, appended after it.
    append_marker(
        &disk,
        ledger,
        &[row((9, 0), id, crc, 1), row((9, 1), next + 2, crc, 1)],
    );
    append_partition(&disk, ledger, (9, 1), 1);
    let (got, _) = recovered(&disk);
    assert_eq!(got, second);
}

#[test]
fn marker_pointing_at_another_partitions_entry_is_passed_over() {
    let (disk, _, second, ledger) = two_flushes(3);
    // A valid partition entry of key (9, 0), referenced as if it held (9, 1).
    let (id, crc) = append_partition(&disk, ledger, (9, 0), 1);
    append_marker(&disk, ledger, &[row((9, 1), id, crc, 1)]);
    let (got, _) = recovered(&disk);
    assert_eq!(got, second);
    // And with the right key but a different cardinality.
    let (id, crc) = append_partition(&disk, ledger, (9, 2), 1);
    append_marker(&disk, ledger, &[row((9, 2), id, crc, 2)]);
    let (got, _) = recovered(&disk);
    assert_eq!(got, second);
}

/// Appends a forged index page holding `page_rows` and a paged marker referencing it with
/// `page_ref` adjusted by `adjust`.
fn append_paged_marker(
    disk: &MemStorage,
    ledger: u64,
    page_rows: &[PartitionRow],
    adjust: impl FnOnce(&mut PageRef),
) {
    let env = Env::open(disk).unwrap();
    let page = encode_index_page(page_rows).unwrap();
    let entry_id = env
        .log
        .append(ledger, meta(EntryKind::IndexPage), &page)
        .unwrap();
    let mut page_ref = PageRef {
        first: page_rows[0].key(),
        entry_id,
        crc: payload_crc(&page),
        rows: page_rows.len() as u32,
    };
    adjust(&mut page_ref);
    let marker = encode_marker(&PersistedState::default(), TableRef::Paged(&[page_ref])).unwrap();
    env.log
        .append(ledger, meta(EntryKind::Marker), &marker)
        .unwrap();
    env.log.sync(ledger).unwrap();
}

#[test]
fn damaged_index_pages_are_passed_over() {
    // Nine partitions with four rows per page: the real table is paged.
    let (disk, first, second, ledger) = two_flushes(9);
    let (id, crc) = append_partition(&disk, ledger, (9, 0), 1);
    let rows = [row((9, 0), id, crc, 1)];
    // A page whose CRC does not match its reference.
    append_paged_marker(&disk, ledger, &rows, |p| p.crc ^= 0xff);
    // A page whose row count does not match.
    append_paged_marker(&disk, ledger, &rows, |p| p.rows = 2);
    // A page whose first row is not the referenced first key.
    append_paged_marker(&disk, ledger, &rows, |p| p.first = (8, 0));
    let (got, cursor) = recovered(&disk);
    assert_eq!(got, second);
    assert_eq!(cursor.report.unwrap().rejected, 3);
    check_bounds(&got, &second, &first, "forged pages");
}

#[test]
fn missing_cursor_ledger_falls_back_to_the_record() {
    let (disk, _, second, ledger) = two_flushes(3);
    disk.remove(&ledger_file_name(ledger)).unwrap();
    let (got, cursor) = recovered(&disk);
    let report = cursor.report.unwrap();
    assert!(report.ledger_missing);
    assert_eq!(report.source, RecoverySource::Record);
    assert!(got.acks.is_empty());
    assert!(got.md <= second.md);
}

#[test]
fn cursor_ledger_without_valid_state_falls_back_to_the_record() {
    // With pages too small for any partition inline, the ledger starts with partition
    // entries; with the default, with the first marker (its partitions inline).
    let separate = CursorConfig {
        index_page_bytes: 8,
        ..support::config::cursor_pages_of_rows(4)
    };
    for config in [separate, support::config::cursor_pages_of_rows(4)] {
        let (disk, _, _, ledger) = two_flushes_with(&config, 3);
        let name = ledger_file_name(ledger);
        let env = Env::open(&disk).unwrap();
        let first_marker = (0..env.log.entry_count(ledger).unwrap())
            .map(|e| env.log.read(ledger, e).unwrap().payload)
            .find(|p| peek_kind(p).unwrap() == EntryKind::CompactMarker)
            .unwrap();
        drop(env);
        // Keep everything before the first marker, and four torn bytes of its frame.
        let bytes = disk.live_bytes(&name).unwrap();
        let keep = bytes
            .windows(first_marker.len())
            .position(|w| w == first_marker.as_slice())
            .unwrap()
            - FRAME_HEADER_LEN
            + 4;
        disk.set_bytes(&name, bytes[..keep].to_vec()).unwrap();
        let (got, cursor) = recovered_with(&disk, &config);
        assert_eq!(
            cursor.report.clone().unwrap().source,
            RecoverySource::Record
        );
        assert!(got.acks.is_empty());
        drop(cursor);
        // The cursor keeps working: a flush after this recovery is recovered next time.
        let env = Env::open(&disk).unwrap();
        let mut cursor = open_cursor(&env, &config).unwrap();
        cursor.ack(Position::new(5, 77)).unwrap();
        cursor.flush().unwrap();
        drop((env, cursor));
        let (got, _) = recovered_with(&disk, &config);
        assert!(got.acks.contains(&Position::new(5, 77)));
    }
}

#[test]
fn bit_flips_and_truncations_never_invent_acks() {
    let (disk, first, second, ledger) = two_flushes(5);
    let name = ledger_file_name(ledger);
    let bytes = disk.live_bytes(&name).unwrap();
    let mut opened = 0;
    for i in 0..bytes.len() {
        for variant in 0..2 {
            let image = disk.durable_image();
            let damaged = if variant == 0 {
                let mut b = bytes.clone();
                b[i] ^= 1 << (i % 8);
                b
            } else {
                bytes[..i].to_vec()
            };
            image.set_bytes(&name, damaged).unwrap();
            // A log that refuses to open (damage before its tail) loses nothing silently.
            let Ok(env) = Env::open(&image) else { continue };
            let Ok(mut cursor) = open_cursor(&env, &support::config::cursor_pages_of_rows(4))
            else {
                continue;
            };
            let Ok(got) = model_of(&mut cursor) else {
                continue;
            };
            opened += 1;
            // Whatever serves, it is a state that was flushed: never more than the truth.
            check_bounds(
                &got,
                &second,
                &Model::default(),
                &format!("byte {i} variant {variant}"),
            );
            assert!(
                got == first || got == second || got.acks.is_empty(),
                "byte {i}: {got:?}"
            );
        }
    }
    assert!(opened > bytes.len() / 2, "too few images opened: {opened}");
}

#[test]
fn ledger_check_lists_damaged_entries_and_names_the_state_recovery_uses() {
    let (disk, _, _, ledger) = two_flushes(9);
    let env = Env::open(&disk).unwrap();
    let healthy = check_cursor_ledger(&env.log, ledger).unwrap();
    assert!(healthy.problems.is_empty(), "{healthy:?}");
    assert_eq!(healthy.markers, 2);
    assert!(healthy.index_pages >= 4);
    assert_eq!(
        healthy.newest_valid,
        Some(RecoverySource::Marker(Position::new(
            ledger,
            healthy.entries - 1
        )))
    );
    drop(env);
    let (id, crc) = append_partition(&disk, ledger, (9, 0), 1);
    append_marker(&disk, ledger, &[row((9, 0), id, crc, 1)]);
    let env = Env::open(&disk).unwrap();
    let damaged = check_cursor_ledger(&env.log, ledger).unwrap();
    // The forged partition does not decode as a bitmap; its marker verifies only CRC, key and
    // cardinality, which recovery checks before decoding lazily.
    assert_eq!(damaged.problems.len(), 1, "{damaged:?}");
    assert_eq!(damaged.problems[0].entry, id);
    assert_eq!(damaged.entries, healthy.entries + 2);
}

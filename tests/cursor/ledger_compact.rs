//! The compact partition table (compact markers and index pages, small partitions inline in
//! their rows) driven directly through the persistence layer: every set round-trips through
//! flushes, reopens and rollovers at every page size; forged pages and markers behind valid
//! CRCs are passed over or refused when touched, never trusted and never a panic; and the
//! ledger check `ackstore verify` runs names the same state a recovery resumes from.

use crate::support;

use ackstore::internals::cursor::persist::PersistedState;
use ackstore::internals::cursor::recover::RecoverySource;
use ackstore::internals::cursor::verify::check_cursor_ledger;
use ackstore::internals::format::cursor::{
    BatchRef, CompactPageRef, CompactRow, CompactTableRef, EntryKind, RowForm,
    encode_compact_marker, encode_compact_page, payload_crc,
};
use ackstore::internals::format::partition::{PartitionKey, encode_inline};
use ackstore::internals::log::EntryMeta;
use ackstore::{CursorConfig, Error, MemStorage, Position};
use roaring::RoaringBitmap;
use support::cursor_ledger::{Cursor, Env, Model, Rng, model_of, open_cursor};

fn meta(kind: EntryKind) -> EntryMeta {
    EntryMeta {
        index: 0,
        num_messages: u32::from(kind.code()),
        timestamp: 0,
    }
}

fn reopen(disk: &MemStorage, config: &CursorConfig) -> (Env, Cursor) {
    let env = Env::open(disk).unwrap();
    let cursor = open_cursor(&env, config).unwrap();
    (env, cursor)
}

/// Acks, in `cursor` and `model`, a set of partition `chunk` of `ledger` drawn in one of
/// several shapes: a single entry, a few scattered ones, a run, a dense random half.
fn ack_shape(cursor: &mut Cursor, model: &mut Model, rng: &mut Rng, ledger: u64, chunk: u64) {
    let base = chunk << 16;
    let entries: Vec<u64> = match rng.below(4) {
        0 => vec![rng.below(1 << 16)],
        1 => (0..1 + rng.below(40)).map(|_| rng.below(1 << 16)).collect(),
        2 => {
            let start = rng.below(60_000);
            (start..start + rng.below(5_000)).collect()
        }
        _ => (0..4_000).filter(|_| rng.below(2) == 0).collect(),
    };
    for e in entries {
        let p = Position::new(ledger, base + e);
        cursor.ack(p).unwrap();
        model.ack(p);
    }
}

#[test]
fn every_set_round_trips_through_flushes_reopens_and_rollovers_at_every_page_size() {
    for (seed, page_bytes) in (1..).zip([64, 512, 4096, 1 << 20]) {
        let config = CursorConfig {
            index_page_bytes: page_bytes,
            index_page_rows: 16,
            ..CursorConfig::default()
        };
        let disk = MemStorage::new();
        let mut model = Model::default();
        let mut rng = Rng::new(seed);
        for round in 0..6 {
            let (_env, mut cursor) = reopen(&disk, &config);
            assert_eq!(
                model_of(&mut cursor).unwrap(),
                model,
                "{page_bytes}: round {round}"
            );
            for _ in 0..12 {
                let (ledger, chunk) = (1 + rng.below(4), rng.below(6));
                ack_shape(&mut cursor, &mut model, &mut rng, ledger, chunk);
            }
            if round % 3 == 2 {
                cursor.persister.request_rollover();
            }
            cursor.flush().unwrap();
            let shape = cursor.persister.table_shape();
            if page_bytes == 64 && round > 0 {
                assert!(
                    shape.separate > 0,
                    "dense partitions exceed 16 bytes: {shape:?}"
                );
            }
            if page_bytes == 1 << 20 {
                assert_eq!(
                    shape.separate, 0,
                    "a 256 KiB limit takes every partition inline"
                );
            }
        }
        let (_env, mut cursor) = reopen(&disk, &config);
        assert_eq!(
            model_of(&mut cursor).unwrap(),
            model,
            "{page_bytes}: at the end"
        );
    }
}

/// A cursor ledger with two flushes of partitions in ledger 5, paged (pages of 512 bytes, 4
/// rows); returns the disk, the second flush's model and the ledger.
fn flushed() -> (MemStorage, Model, u64) {
    let config = CursorConfig {
        index_page_rows: 4,
        ..support::config::cursor_pages_of_bytes(512)
    };
    let disk = MemStorage::new();
    let (_env, mut cursor) = reopen(&disk, &config);
    let mut model = Model::default();
    for round in 0..2 {
        for c in 0..9u64 {
            let p = Position::new(5, (c << 16) + round * 10 + 1);
            cursor.ack(p).unwrap();
            model.ack(p);
        }
        cursor.flush().unwrap();
    }
    assert!(cursor.persister.table_shape().pages > 1);
    let ledger = cursor.persister.cursor_ledger().unwrap();
    (disk, model, ledger)
}

fn recovered(disk: &MemStorage) -> (Model, Cursor) {
    let (_env, mut cursor) = reopen(disk, &support::config::cursor_pages_of_bytes(512));
    (model_of(&mut cursor).unwrap(), cursor)
}

/// The compact row of partition `key` carrying `inline`, claiming `cardinality`.
fn inline_row(key: (u64, u64), cardinality: u64, inline: &[u8]) -> CompactRow<'_> {
    CompactRow {
        ledger_id: key.0,
        chunk: key.1,
        cardinality,
        form: RowForm::Inline(inline),
    }
}

/// Appends a compact page of `rows`, then a compact marker listing it through a reference that
/// `adjust` may falsify; returns the page's and the marker's entry ids.
fn append_paged(
    disk: &MemStorage,
    ledger: u64,
    rows: &[CompactRow<'_>],
    adjust: impl FnOnce(&mut CompactPageRef),
) -> (u64, u64) {
    let env = Env::open(disk).unwrap();
    let page = encode_compact_page(rows).unwrap();
    let page_id = env
        .log
        .append(ledger, meta(EntryKind::CompactPage), &page)
        .unwrap();
    let mut page_ref = CompactPageRef {
        first: rows[0].key(),
        entry_id: page_id,
        crc: payload_crc(&page),
        rows: u32::try_from(rows.len()).unwrap(),
    };
    adjust(&mut page_ref);
    let state = PersistedState::default();
    let marker = encode_compact_marker(
        &state,
        CompactTableRef::Paged(&[page_ref]),
        BatchRef::Inline(&[]),
    )
    .unwrap();
    let marker_id = env
        .log
        .append(ledger, meta(EntryKind::CompactMarker), &marker)
        .unwrap();
    env.log.sync(ledger).unwrap();
    (page_id, marker_id)
}

fn one_entry(key: (u64, u64)) -> Vec<u8> {
    let key = PartitionKey {
        ledger_id: key.0,
        chunk: key.1,
    };
    encode_inline(key, &RoaringBitmap::from([3]))
}

#[test]
fn forged_page_references_are_passed_over() {
    let form = one_entry((9, 0));
    let rows = [inline_row((9, 0), 1, &form), inline_row((9, 1), 1, &form)];
    let falsify: [fn(&mut CompactPageRef); 4] = [
        |r| r.crc ^= 1,
        |r| r.rows += 1,
        |r| r.first = (9, 1),
        |r| r.entry_id += 1,
    ];
    for adjust in falsify {
        let (disk, second, ledger) = flushed();
        append_paged(&disk, ledger, &rows, adjust);
        let (got, cursor) = recovered(&disk);
        assert_eq!(got, second);
        assert_eq!(cursor.report.unwrap().rejected, 1);
    }
}

#[test]
fn a_row_referencing_an_entry_at_or_after_its_marker_is_passed_over() {
    let (disk, second, ledger) = flushed();
    let next = Env::open(&disk).unwrap().log.entry_count(ledger).unwrap();
    // The page is entry `next`, the marker `next + 1`: the row names the marker itself.
    let rows = [CompactRow {
        ledger_id: 9,
        chunk: 0,
        cardinality: 1,
        form: RowForm::Entry {
            entry_id: next + 1,
            crc: 0,
        },
    }];
    append_paged(&disk, ledger, &rows, |_| {});
    let (got, _) = recovered(&disk);
    assert_eq!(got, second);
}

#[test]
fn an_inline_partition_that_does_not_decode_is_an_error_when_touched_and_verify_agrees() {
    let form = one_entry((9, 1));
    let cases: [(u64, Vec<u8>); 2] = [
        // An unknown encoding byte.
        (1, vec![9, 3, 0]),
        // A valid form claiming another cardinality.
        (2, form),
    ];
    for (cardinality, bad) in cases {
        let (disk, _, ledger) = flushed();
        let good = one_entry((9, 0));
        let rows = [
            inline_row((9, 0), 1, &good),
            inline_row((9, 1), cardinality, &bad),
        ];
        let (page_id, marker_id) = append_paged(&disk, ledger, &rows, |_| {});
        // Recovery checks the page's CRC and the table, not the partitions it carries: the
        // forged marker is the state, and its lazy set counts what the rows claim.
        let (env, mut cursor) = reopen(&disk, &support::config::cursor_pages_of_bytes(512));
        let source = cursor.report.as_ref().unwrap().source;
        assert_eq!(
            source,
            RecoverySource::Marker(Position::new(ledger, marker_id))
        );
        assert_eq!(cursor.acks.len(), 1 + cardinality);
        assert!(cursor.acks.contains(Position::new(9, 3)).unwrap());
        let err = cursor
            .acks
            .contains(Position::new(9, (1 << 16) + 3))
            .unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
        // The ledger check decodes every inline partition: it names the page, and the same
        // state.
        let check = check_cursor_ledger(&env.log, ledger).unwrap();
        assert_eq!(check.problems.len(), 1, "{:?}", check.problems);
        assert_eq!(check.problems[0].entry, page_id);
        assert_eq!(check.newest_valid, Some(source));
    }
}

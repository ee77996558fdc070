//! A partition's bounds, once read from its journal record (a cursor's recovery asks for its
//! lowest and highest acks), answer later questions about that same copy without another read:
//! the next bounds asked of it, and whether an entry outside them is acknowledged (a restarted
//! cursor's first read). A newer copy of the partition (an eviction, a tick) is never answered
//! for by the bounds of an older one, and an entry inside the bounds is answered by a load,
//! which verifies the record first: damage to it is then an error, never a wrong answer.
//!
//! Checked against a model of every cursor's acks, with a budget small enough that partitions
//! are evicted (written again) between the questions, and restarts from what the ticks
//! committed.

use std::collections::BTreeSet;

use ackstore::internals::ackset::{PARTITION_SPAN, PartitionKey};
use ackstore::internals::format::journal::RecordKind;
use ackstore::internals::journal::JournalConfig;
use ackstore::internals::journal::index::CursorId;
use ackstore::{MemStorage, Position, Storage};

use crate::support;
use support::journal::{Acks, ENTRIES, Fleet, LEDGERS, cursor_ids};
use support::mutate::{is_segment, records_of};
use support::workload::Rng;

/// Resident ack bytes per cursor: about one partition, so most are evicted between questions.
const BUDGET: usize = 512;

/// An entry of `ledger`'s partition `chunk` at one of a few spread offsets: each partition's
/// acks leave wide room outside their bounds, and later acks move the bounds either way.
fn spread(rng: &mut Rng, ledger: u64, chunk: u64) -> Position {
    let offset = rng.below(40) * 1500 + rng.below(4);
    Position::new(ledger, chunk * PARTITION_SPAN + offset)
}

fn key_of(pos: Position) -> PartitionKey {
    PartitionKey {
        ledger_id: pos.ledger_id,
        chunk: pos.entry_id / PARTITION_SPAN,
    }
}

/// The lowest and highest acks of `truth` in partition `key`.
fn bounds_in(truth: &BTreeSet<Position>, key: PartitionKey) -> Option<(Position, Position)> {
    let mut within = truth
        .range(Position::new(key.ledger_id, key.first_entry())..)
        .take_while(|p| key_of(**p) == key);
    let lo = *within.next()?;
    Some((lo, within.last().copied().unwrap_or(lo)))
}

/// Asks each cursor for its lowest and highest acks (reading the bounds of records not in
/// memory), then whether entries are acknowledged, every answer as the model says. Returns how
/// many entries outside the bounds of the highest partition, read from its record, were
/// answered without loading it.
fn ask(fleet: &mut Fleet, model: &Acks, rng: &mut Rng) -> u64 {
    let mut from_bounds = 0;
    for (id, (set, _)) in &mut fleet.cursors {
        let truth = model.get(id).cloned().unwrap_or_default();
        assert_eq!(set.lowest().expect("lowest"), truth.first().copied());
        let top = truth.last().map(|p| key_of(*p));
        let top_cold = top.is_some_and(|k| !set.is_resident(k));
        assert_eq!(set.highest().expect("highest"), truth.last().copied());
        for _ in 0..40 {
            let pos = match truth.iter().nth(rng.index(truth.len().max(1))) {
                Some(p) if rng.chance(50) => {
                    Position::new(p.ledger_id, (p.entry_id + rng.below(3)).saturating_sub(1))
                }
                Some(p) if rng.chance(50) => Position::new(
                    p.ledger_id,
                    key_of(*p).first_entry() + rng.below(PARTITION_SPAN),
                ),
                _ => Position::new(1 + rng.below(LEDGERS), rng.below(ENTRIES)),
            };
            let key = key_of(pos);
            let outside = bounds_in(&truth, key).is_some_and(|(lo, hi)| pos < lo || pos > hi);
            let from_top = top == Some(key) && top_cold && !set.is_resident(key) && outside;
            assert_eq!(
                set.contains(pos).expect("contains"),
                truth.contains(&pos),
                "{id:?} {pos}"
            );
            if from_top {
                assert!(
                    !set.is_resident(key),
                    "{id:?}: {pos}, outside the bounds read from the record, loaded it"
                );
                from_bounds += 1;
            }
        }
    }
    from_bounds
}

#[test]
fn bounds_read_from_a_record_answer_only_for_that_copy_of_the_partition() {
    let disk = MemStorage::new();
    let config = JournalConfig::default();
    let mut rng = Rng::new(0x5eed_b0d5);
    let mut fleet = Fleet::open(&disk, config, BUDGET).expect("open");
    let mut model = Acks::new();
    let ids = cursor_ids();
    let mut from_bounds = 0;
    for round in 0..60 {
        for _ in 0..30 {
            let id = ids[rng.index(ids.len())];
            let (ledger, chunk) = (1 + rng.below(LEDGERS), rng.below(3));
            let pos = spread(&mut rng, ledger, chunk);
            model.entry(id).or_default().insert(pos);
            fleet.ack(id, pos).expect("ack");
        }
        if rng.chance(50) {
            fleet.tick().expect("tick");
        }
        if round % 7 == 6 {
            fleet.tick().expect("tick");
            fleet = Fleet::open(&disk, config, BUDGET).expect("reopen");
        }
        from_bounds += ask(&mut fleet, &model, &mut rng);
    }
    assert!(
        from_bounds > 0,
        "entries outside a record's bounds answered without a load: {from_bounds}"
    );
}

/// A cursor restarted from a tick: its lowest ack read from the record's bounds; then the
/// record's set is damaged in the segment. An entry outside the bounds is still answered (not
/// acknowledged, as it is); one inside them loads the record, which fails: an error, never an
/// answer from the damaged bytes.
#[test]
fn damage_found_after_the_bounds_were_read_is_an_error_on_the_first_load() {
    let disk = MemStorage::new();
    let config = JournalConfig::default();
    let mut fleet = Fleet::open(&disk, config, BUDGET).expect("open");
    let id: CursorId = cursor_ids()[0];
    let acked: BTreeSet<Position> = [1000, 1002, 1500, 2000]
        .into_iter()
        .map(|e| Position::new(1, e))
        .collect();
    for &p in &acked {
        fleet.ack(id, p).expect("ack");
    }
    fleet.tick().expect("tick");
    let mut fleet = Fleet::open(&disk, config, BUDGET).expect("reopen");
    let (set, _) = fleet.cursors.get_mut(&id).expect("cursor");
    assert_eq!(set.lowest().expect("lowest"), Some(Position::new(1, 1000)));
    assert_eq!(set.stats().loads, 0, "the bounds were read without a load");

    // Flip the last byte of every partition record of the cursor: its set, under the CRCs.
    let mut damaged = 0;
    for name in disk.list().expect("list") {
        if !is_segment(std::path::Path::new(&name)) {
            continue;
        }
        let file = disk.open(&name).expect("segment");
        let bytes = file
            .read_all(u64::MAX)
            .expect("read")
            .expect("segment bytes");
        for r in records_of(&bytes) {
            if r.kind == RecordKind::Partition && r.topic == id.topic && r.cursor == id.cursor {
                let at = r.offset + r.len - 1;
                file.write_all_at(&[bytes[at] ^ 0x40], at as u64)
                    .expect("damage");
                damaged += 1;
            }
        }
    }
    assert!(damaged > 0, "the cursor's partition record was found");

    assert!(
        !set.contains(Position::new(1, 999))
            .expect("below the bounds")
    );
    assert!(
        !set.contains(Position::new(1, 2001))
            .expect("above the bounds")
    );
    for e in [1000, 1001, 1500] {
        let got = set.contains(Position::new(1, e));
        assert!(
            matches!(got, Err(ackstore::Error::Corrupted { .. })),
            "entry {e} inside the bounds of a damaged record: {got:?}"
        );
    }
}

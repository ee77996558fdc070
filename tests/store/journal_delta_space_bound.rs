//! The store journal's space bound under workloads of many small deltas: after every tick the
//! segments hold at most twice the live bytes plus one segment, and a tick's rollover ends (the
//! storage refuses operations past a generous allowance, so a rollover that does not end shows
//! up as a failed tick). Workloads: one hot cursor acking one entry per tick among many idle
//! cursors whose chains sit in the oldest segments; every cursor acking in turn; cursors
//! deleted and replaced; segment sizes from a few records to many. The state recovered at the
//! end is the model's.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::internals::ackset::{PARTITION_SPAN, RangeSetWrapper};
use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::journal::index::CursorId;
use ackstore::internals::journal::{CursorFlush, Journal, JournalConfig, JournalPartitions, Seal};
use ackstore::{MemStorage, Position};

fn id(i: u64) -> CursorId {
    CursorId {
        topic: 1 + i % 3,
        cursor: i,
    }
}

fn set_of(journal: &Arc<Journal>, c: CursorId) -> RangeSetWrapper {
    let rows = journal.committed(c).map(|(_, r)| r).unwrap_or_default();
    RangeSetWrapper::with_index(
        Box::new(JournalPartitions::new(journal.clone(), c)),
        4000,
        rows,
    )
}

fn flushes(
    journal: &Journal,
    sets: &mut [(CursorId, &mut RangeSetWrapper)],
    epoch: u64,
) -> ackstore::Result<()> {
    let mut out = Vec::new();
    for (c, set) in sets.iter_mut() {
        let live: Vec<_> = set.partitions().into_iter().map(|(k, _)| k).collect();
        let mut written = Vec::new();
        for &key in &live {
            let current = journal
                .stored_cardinality(*c, key)
                .is_some_and(|card| set.stored_copy_current(key, card));
            if !current {
                written.push((key, set.bitmap(key)?.expect("live")));
            }
        }
        out.push(CursorFlush {
            name: 0,
            cursor: *c,
            state: PersistedState {
                epoch,
                ..PersistedState::default()
            },
            written,
            live,
        });
    }
    journal.commit(&out)?;
    for (_, set) in sets.iter_mut() {
        for key in set.dirty_keys() {
            set.mark_persisted(key);
        }
    }
    Ok(())
}

fn acks_of(journal: &Arc<Journal>, c: CursorId) -> BTreeSet<Position> {
    let mut set = set_of(journal, c);
    let mut out = BTreeSet::new();
    for (key, _) in set.partitions() {
        let b = set.bitmap(key).expect("load").expect("live");
        out.extend(
            b.iter()
                .map(|o| Position::new(key.ledger_id, key.first_entry() + u64::from(o))),
        );
    }
    out
}

/// `idle` cursors of `parts` partitions each flush once; then `ticks` ticks in which cursor 0
/// (and, with `all`, every cursor in turn) acks one more entry; every `forget_every` ticks the
/// oldest idle cursor is deleted and a new one takes its place.
fn workload(segment_bytes: u64, idle: u64, parts: u64, ticks: u64, all: bool, forget_every: u64) {
    let config = JournalConfig { segment_bytes };
    let disk = MemStorage::new();
    let journal = Arc::new(Journal::open(Arc::new(disk.clone()), config, Seal::default()).unwrap());
    let mut sets: BTreeMap<CursorId, (RangeSetWrapper, BTreeSet<Position>)> = BTreeMap::new();
    let mut next = 0;
    let mut epoch = 0;
    let add = |journal: &Arc<Journal>,
               sets: &mut BTreeMap<CursorId, (RangeSetWrapper, BTreeSet<Position>)>,
               next: &mut u64,
               epoch: &mut u64| {
        let c = id(*next);
        *next += 1;
        let mut set = set_of(journal, c);
        let mut model = BTreeSet::new();
        for p in 0..parts {
            let pos = Position::new(1, p * PARTITION_SPAN + *next % 7);
            set.add(pos).unwrap();
            model.insert(pos);
        }
        *epoch += 1;
        flushes(journal, &mut [(c, &mut set)], *epoch).unwrap();
        sets.insert(c, (set, model));
    };
    for _ in 0..=idle {
        add(&journal, &mut sets, &mut next, &mut epoch);
    }
    disk.fail_after(Some(500_000));
    let what = format!("segment_bytes {segment_bytes}, idle {idle}, parts {parts}, all {all}");
    for t in 0..ticks {
        let ids: Vec<CursorId> = sets.keys().copied().collect();
        let c = if all {
            ids[(t as usize) % ids.len()]
        } else {
            ids[0]
        };
        let (set, model) = sets.get_mut(&c).unwrap();
        let pos = Position::new(1, (t * 7919) % (parts * PARTITION_SPAN));
        set.add(pos).unwrap();
        model.insert(pos);
        epoch += 1;
        if let Err(e) = flushes(&journal, &mut [(c, set)], epoch) {
            panic!("{what}: tick {t} failed ({e}); {:?}", journal.stats());
        }
        let s = journal.stats();
        assert!(
            s.segment_bytes <= 2 * s.live_bytes + segment_bytes,
            "{what}: space bound after tick {t}: {s:?}"
        );
        if forget_every > 0 && t % forget_every == forget_every - 1 && ids.len() > 2 {
            let victim = ids[1];
            journal.forget(victim).unwrap();
            sets.remove(&victim);
            add(&journal, &mut sets, &mut next, &mut epoch);
        }
    }
    disk.fail_after(None);
    drop(journal);
    let reopened =
        Arc::new(Journal::open(Arc::new(disk.durable_image()), config, Seal::default()).unwrap());
    for (c, (_, model)) in &sets {
        assert_eq!(&acks_of(&reopened, *c), model, "{what}: {c:?}");
    }
}

#[test]
fn one_hot_cursor_among_idle_ones_keeps_the_bound() {
    for seg in [256, 1024, 4096, 16384] {
        workload(seg, 20, 6, 400, false, 0);
    }
}

#[test]
fn every_cursor_in_turn_keeps_the_bound() {
    for seg in [256, 1024, 4096] {
        workload(seg, 12, 10, 400, true, 0);
    }
}

#[test]
fn deleted_and_replaced_cursors_keep_the_bound() {
    for seg in [128, 512, 2048] {
        workload(seg, 10, 4, 300, false, 7);
    }
}

#[test]
fn large_cursors_with_segments_smaller_than_one_re_base_keep_the_bound() {
    for seg in [64, 300, 1000] {
        workload(seg, 4, 40, 200, true, 0);
    }
}

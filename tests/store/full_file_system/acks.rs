//! The workload's acks, each call's answer checked against the cursor's model at once: single
//! acks and cumulative ones, and with groups (`Shape::groups`) `ack_many` groups over several
//! ledgers (duplicates, entries at or before mark-delete, the entry right after it and the one
//! after that, now and then a position that is no entry of the topic, which must fail the call
//! with nothing changed) and batch-index acks (some refused: no such message, another size
//! than the entry's). At the end of every phase of the file system every open cursor holds
//! exactly what its model says, however many of its partitions and partial entries were
//! evicted, refused by the full disk and loaded back meanwhile.

use super::{CursorModel, Live, Models, Tally, acked_entries, acked_messages, batch_size};
use crate::support::tmpfs::chain;
use crate::support::workload::Rng;

use std::collections::BTreeSet;

use ackstore::internals::ackset::MAX_PARTITION_BYTES;
use ackstore::{Cursor, Error, Position, Store};

/// Entries the workload with groups acknowledges whole only with a cumulative ack or as the
/// entry right after mark-delete (and messages of, never the first): holes that keep
/// mark-delete behind and most ledgers of a topic a partition of individual acks.
fn hole(p: Position) -> bool {
    p.entry_id % 6 == 5
}

/// Up to 31 single acks on `c` of entries of `ackable` (of `positions`, the topic's synced
/// entries), one in twenty cumulative; what they acknowledge is added to `cm`.
pub(super) fn singles(
    rng: &mut Rng,
    (c, positions, ackable): (&Cursor, &[Position], &[Position]),
    cm: &mut CursorModel,
    at: &str,
) {
    for _ in 0..=rng.index(30) {
        let Some(p) = rng.pick(ackable) else {
            break;
        };
        let mark = c.mark_delete_position().expect("mark-delete");
        let acked: Vec<Position> = if rng.index(20) == 0 && mark.is_none_or(|m| m < p) {
            c.ack_cumulative(p)
                .unwrap_or_else(|e| panic!("{at}: a cumulative ack of {p}: {}", chain(&e)));
            positions.iter().copied().filter(|q| *q <= p).collect()
        } else {
            c.ack(p)
                .unwrap_or_else(|e| panic!("{at}: an ack of {p}: {}", chain(&e)));
            vec![p]
        };
        cm.ack_entries(acked);
    }
}

/// One burst of acks on `c`: single acks, one to three `ack_many` groups, or batch-index acks.
pub(super) fn burst(
    rng: &mut Rng,
    (c, positions): (&Cursor, &[Position]),
    cm: &mut CursorModel,
    at: &str,
    tally: &mut Tally,
) {
    let ackable: Vec<Position> = positions.iter().copied().filter(|p| !hole(*p)).collect();
    match rng.index(5) {
        0 => singles(rng, (c, positions, &ackable), cm, at),
        1 | 2 => {
            for _ in 0..=rng.index(3) {
                group(rng, (c, positions, &ackable), cm, at, tally);
            }
        }
        _ => batch_acks(rng, (c, positions), cm, at, tally),
    }
}

/// A position that is no entry of the topic: before its first entry, once it has one (behind
/// mark-delete whatever the cursor's, as Pulsar's `first-ledger:-1`: ignored), past the end of
/// one of its ledgers (of 20 entries at most), or in a ledger that never was.
fn stray(rng: &mut Rng, positions: &[Position]) -> Position {
    match (rng.index(3), rng.pick(positions)) {
        (0, Some(_)) => Position::new(0, rng.below(20)),
        (1, Some(p)) => Position::new(p.ledger_id, 1_000_000 + rng.below(1000)),
        _ => Position::new(u64::MAX - rng.below(2), rng.below(20)),
    }
}

/// The positions of an `ack_many` group: up to 41, mostly of `ackable` (of `positions`, the
/// topic's synced entries) over its ledgers, with duplicates and entries at or before
/// mark-delete (`mark`); one group in four holds the entry right after mark-delete (and maybe
/// the one after it), one in seven a [`stray`] position; each anywhere in the group.
fn draw_group(
    rng: &mut Rng,
    (positions, ackable): (&[Position], &[Position]),
    mark: Option<Position>,
) -> Vec<Position> {
    let after = |p: &Position| mark.is_none_or(|m| *p > m);
    let behind: Vec<Position> = positions.iter().copied().filter(|p| !after(p)).collect();
    let mut group: Vec<Position> = Vec::new();
    for _ in 0..=rng.index(40) {
        let p = match rng.index(10) {
            0 => rng.pick(&group),
            1 => rng.pick(&behind),
            _ => rng.pick(ackable),
        };
        group.extend(p);
    }
    let first = positions.iter().position(after);
    let mut extra = Vec::new();
    if let Some(i) = first.filter(|_| rng.index(4) == 0) {
        extra.extend(
            positions
                .get(i..=i + rng.index(2))
                .unwrap_or(&positions[i..]),
        );
    }
    if rng.index(7) == 0 {
        extra.push(stray(rng, positions));
    }
    for p in extra {
        let at = rng.index(group.len() + 1);
        group.insert(at, p);
    }
    group
}

/// One `ack_many` group on `c`: it acknowledges exactly the group's entries after mark-delete
/// and answers how many were new, or, when one of them after mark-delete and after the topic's
/// first entry is no entry of the topic, fails with `NoSuchEntry` naming the first such and
/// changes nothing. Whatever the disk says: evictions
/// that cannot write never fail an ack.
fn group(
    rng: &mut Rng,
    (c, positions, ackable): (&Cursor, &[Position], &[Position]),
    cm: &mut CursorModel,
    at: &str,
    tally: &mut Tally,
) {
    let mark = c.mark_delete_position().expect("mark-delete");
    let group = draw_group(rng, (positions, ackable), mark);
    // A position before the topic's first entry (ledger 0 is none of its ledgers) is behind
    // mark-delete whatever the cursor's, as Pulsar's `first-ledger:-1`: ignored, not refused.
    let before_first = |p: &&Position| positions.first().is_some_and(|f| **p < *f);
    let after = |p: &&Position| mark.is_none_or(|m| **p > m) && !before_first(p);
    let known = |p: &&Position| positions.binary_search(p).is_ok();
    let refused = group.iter().filter(after).find(|p| !known(p)).copied();
    let valid: BTreeSet<Position> = group.iter().filter(known).copied().collect();
    let new = valid
        .iter()
        .filter(after)
        .filter(|p| !cm.held.contains(p))
        .count() as u64;
    let what = format!("{at}: ack_many of {group:?} after mark-delete {mark:?}");
    match (c.ack_many(&group), refused) {
        (Ok(n), None) => {
            assert_eq!(n, new, "{what}: entries newly acknowledged");
            cm.ack_entries(valid);
            tally.note("ack_many group");
        }
        (Err(Error::NoSuchEntry(p)), Some(q)) => {
            assert_eq!(p, q, "{what}: the position refused");
            let now = c.mark_delete_position().expect("mark-delete");
            assert_eq!(now, mark, "{what}: refused, and mark-delete moved");
            holds(c, &Vec::from_iter(valid), cm, &format!("{what}: refused"));
            tally.note("ack_many refused");
        }
        (r, _) => panic!(
            "{what}: {:?} where {refused:?} was to be refused",
            r.map_err(|e| chain(&e))
        ),
    }
}

/// Up to 13 batch-index acks on `c` of entries drawn over every ledger of `positions`, so that
/// partial entries are in many partitions, or of its partial entries (never message 0 of a
/// [`hole`]); one in sixteen asks
/// for no such message, one for a partial entry with another size than its own, and both are
/// refused with nothing changed.
fn batch_acks(
    rng: &mut Rng,
    (c, positions): (&Cursor, &[Position]),
    cm: &mut CursorModel,
    at: &str,
    tally: &mut Tally,
) {
    for _ in 0..=rng.index(12) {
        // One in four of an entry partial already, so that some are completed.
        let partial: Vec<Position> = cm.held_msgs.0.keys().copied().collect();
        let drawn = if rng.index(4) == 0 {
            &partial[..]
        } else {
            positions
        };
        let Some(p) = rng.pick(drawn).or_else(|| rng.pick(positions)) else {
            return;
        };
        let size = batch_size(p);
        let partial = cm.held_msgs.0.get(&p).cloned();
        let (index, given) = match rng.index(16) {
            0 => (size, size),
            1 if partial.is_some() => (0, size + 1),
            _ if hole(p) => (
                1 + u32::try_from(rng.below((size - 1).into())).expect("small"),
                size,
            ),
            _ => (u32::try_from(rng.below(size.into())).expect("small"), size),
        };
        let what = format!("{at}: message {index} of {given} of {p}");
        let r = c.ack_batch_index(p, index, given);
        if index >= given || given != size {
            assert!(
                matches!(r, Err(Error::InvalidArgument { .. })),
                "{what}: {:?}",
                r.map_err(|e| chain(&e))
            );
            holds(c, &[p], cm, &format!("{what}: refused"));
            tally.note("batch ack refused");
            continue;
        }
        let changed = r.unwrap_or_else(|e| panic!("{what}: {}", chain(&e)));
        let known = cm.held.contains(&p) || partial.is_some_and(|s| s.contains(&index));
        assert_eq!(changed, !known, "{what}: changed");
        if changed {
            cm.truth_msgs.ack(p, index);
            cm.held_msgs.ack(p, index);
            if cm.held_msgs.0[&p].len() == size as usize {
                cm.ack_entries([p]);
                tally.note("batch ack completing its entry");
            }
        }
        tally.note("batch ack");
    }
}

/// Cursor `c` holds exactly what `cm` says of the entries `ps` (in order): the entries it
/// holds acked and the messages of the others; and never an entry acknowledged individually at
/// or before mark-delete, nor the entry right after it in its ledger.
fn holds(c: &Cursor, ps: &[Position], cm: &CursorModel, what: &str) {
    let got = acked_entries(c, ps, what);
    let held: BTreeSet<Position> = ps.iter().copied().filter(|p| cm.held.contains(p)).collect();
    if let Some(p) = got.difference(&held).next() {
        panic!("{what}: {p} is acked and the handle never acked it");
    }
    if let Some(p) = held.difference(&got).next() {
        panic!("{what}: {p} was acked and the handle lost it");
    }
    let msgs = acked_messages(c, ps, &got, what);
    for &p in ps.iter().filter(|p| !got.contains(p)) {
        assert_eq!(
            msgs.0.get(&p),
            cm.held_msgs.0.get(&p),
            "{what}: the acknowledged messages of {p}"
        );
    }
    let mark = c.mark_delete_position().expect("mark-delete");
    let ranges = c
        .acked_ranges()
        .unwrap_or_else(|e| panic!("{what}: acked_ranges: {}", chain(&e)));
    if let (Some(m), Some(&(from, _))) = (mark, ranges.first()) {
        let next = Position::new(m.ledger_id, m.entry_id + 1);
        assert!(
            from > next,
            "{what}: {from} acknowledged individually, mark-delete at {m}"
        );
    }
}

/// At the end of a phase: every open cursor holds exactly what its model says. Counts what the
/// phase's cursors met: eviction writes the full disk refused, partitions and partial entries
/// evicted and loaded back, memory released to another cursor of the store's budget.
pub(super) fn check_live(
    (live, models): (&Live, &Models),
    store: &Store,
    at: &str,
    tally: &mut Tally,
) {
    let mut met = BTreeSet::new();
    for ((t, name), c) in &live.cursors {
        let tm = &models[t];
        holds(
            c,
            &tm.positions,
            &tm.cursors[name],
            &format!("{at}: {t}/{name}"),
        );
        let s = c.stats().expect("stats");
        for (what, seen) in [
            ("an eviction write refused", s.ackset.store_failures > 0),
            ("a partition pinned", s.ackset.pinned_partitions > 0),
            ("a partition stored", s.ackset.stores > 0),
            ("a partition loaded", s.ackset.loads > 0),
            ("partial entries evicted", s.batch_evictions > 0),
            ("partial entries loaded", s.batch_loads > 0),
        ] {
            if seen {
                met.insert(what);
            }
        }
    }
    if store
        .ack_memory_stats()
        .is_some_and(|b| b.released_bytes > 0)
    {
        met.insert("memory released to another cursor");
    }
    for what in met {
        tally.note(&format!("phases with {what}"));
    }
}

/// After a `flush_all` that returned `Ok` (and no flush running beside it): no cursor holds a
/// partition pinned by a refused eviction, and the store's resident ack state is back within
/// its budget `limit` plus one partition.
pub(super) fn check_budget(live: &Live, store: &Store, limit: usize, at: &str) {
    for ((t, name), c) in &live.cursors {
        let s = c.stats().expect("stats");
        assert_eq!(
            s.ackset.pinned_partitions, 0,
            "{at}: {t}/{name} after flush_all: {s:?}"
        );
    }
    let b = store.ack_memory_stats().expect("a budget");
    assert!(
        b.resident_bytes <= limit + MAX_PARTITION_BYTES,
        "{at}: after flush_all: {b:?}"
    );
}

//! Invariants 1 and 2 across a power cut at every storage operation (and torn
//! tails) of a reopened cursor's first write, for first writes other than a plain flush.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::{CursorOptions, LedgerConfig, ManagedLedger, MemStorage, PersistMode, Position};
use support::crash::{Points, cut_everywhere_after, torn_image, unsynced_tail};
use support::topic::append_n;

const PER_LEDGER: u64 = 50;
const ENTRIES: u64 = 3 * PER_LEDGER + 7;

fn open(disk: &MemStorage, c: &LedgerConfig) -> ackstore::Result<ManagedLedger> {
    ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone())
}

/// Topic with ENTRIES entries; "sub" acked 1,4,7,... and property p=1, closed.
fn prepared(disk: &MemStorage, c: &LedgerConfig) -> (Vec<Position>, BTreeSet<Position>) {
    let topic = open(disk, c).unwrap();
    let ps = append_n(&topic, ENTRIES);
    topic.sync().unwrap();
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    let acked: BTreeSet<Position> = ps.iter().copied().skip(1).step_by(3).collect();
    for &p in &acked {
        cur.ack(p).unwrap();
    }
    cur.set_property("p", 1).unwrap();
    cur.close().unwrap();
    topic.close().unwrap();
    (ps, acked)
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    done: BTreeSet<Position>,
    epoch: u64,
    props: BTreeMap<String, i64>,
}

fn seen(image: &MemStorage, c: &LedgerConfig, ps: &[Position]) -> Seen {
    let topic = open(image, c).expect("a cut disk opens");
    let cur = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    let mark = cur.mark_delete_position().unwrap();
    let done = ps
        .iter()
        .copied()
        .filter(|&p| mark.is_some_and(|m| p <= m) || cur.is_acked(p).unwrap())
        .collect();
    Seen {
        done,
        epoch: cur.epoch().unwrap(),
        props: cur.properties().unwrap(),
    }
}

/// Runs `op` on the reopened cursor as a workload under a cut at every point; `allowed`
/// says, given what `op` returned, whether a recovered state is acceptable.
fn run<R: Clone + std::fmt::Debug>(
    name: &str,
    mode: PersistMode,
    lru: usize,
    op: impl Fn(&ManagedLedger, &ackstore::Cursor, &[Position]) -> R,
    allowed: impl Fn(&R, &[Position], &BTreeSet<Position>, &Seen) -> Result<(), String>,
) {
    let c = support::config::topic(PER_LEDGER, mode, lru);
    let clean = cut_everywhere_after(
        Points::every_in_release(3),
        |disk| prepared(disk, &c),
        |disk, (ps, acked)| {
            let r = open(disk, &c).ok().and_then(|topic| {
                let cur = topic.open_cursor("sub", CursorOptions::default()).ok()?;
                Some(op(&topic, &cur, &ps))
            });
            (ps, acked, r)
        },
        |disk, cut, (ps, acked, r)| {
            let mut images = vec![(disk.durable_image(), "durable".to_string())];
            let tail = unsynced_tail(disk);
            for keep in [1, tail / 2, tail] {
                images.push((torn_image(disk, |_| keep), format!("{keep} torn bytes")));
            }
            for (image, how) in images {
                let s = seen(&image, &c, &ps);
                let what = format!(
                    "{name} {mode:?} cut {}/{} {how}: result {r:?}",
                    cut.n, cut.total
                );
                let verdict = match &r {
                    // the open itself was cut: the prepared state, or nothing lost
                    None => {
                        if s.done == acked && s.props.get("p") == Some(&1) {
                            Ok(())
                        } else {
                            Err(format!("open cut, state changed: {s:?}"))
                        }
                    }
                    Some(r) => allowed(r, &ps, &acked, &s),
                };
                if let Err(e) = verdict {
                    panic!("{what}: {e}");
                }
            }
        },
    );
    eprintln!("{name} {mode:?}: {} operations", clean.total);
}

fn subset(a: &BTreeSet<Position>, b: &BTreeSet<Position>, msg: &str) -> Result<(), String> {
    if a.is_subset(b) {
        Ok(())
    } else {
        Err(format!(
            "{msg}: extra {:?}",
            a.difference(b).collect::<Vec<_>>()
        ))
    }
}

#[test]
fn seek_as_the_first_write() {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        run(
            "seek",
            mode,
            1 << 20,
            |_, cur, ps| cur.seek(ps[60]).is_ok(),
            |ok, ps, acked, s| {
                let after: BTreeSet<Position> = ps[..60].iter().copied().collect();
                if *ok {
                    if s.done != after {
                        return Err(format!("seek Ok but recovered {:?}", s.done.len()));
                    }
                    if s.epoch < 1 {
                        return Err(format!("epoch went back: {}", s.epoch));
                    }
                    Ok(())
                } else if s.done == *acked || s.done == after {
                    Ok(())
                } else {
                    Err(format!("neither before nor after: {} done", s.done.len()))
                }
            },
        );
    }
}

#[test]
fn rewind_then_crash_keeps_the_epoch_and_the_acks() {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        run(
            "rewind",
            mode,
            1 << 20,
            |_, cur, _| cur.rewind().is_ok(),
            |ok, _, acked, s| {
                if s.done != *acked {
                    return Err(format!("acks changed by a rewind: {}", s.done.len()));
                }
                if *ok && s.epoch < 1 {
                    return Err("rewind Ok, epoch lost".into());
                }
                Ok(())
            },
        );
    }
}

#[test]
fn set_property_then_close_keeps_the_property() {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        run(
            "set_property+close",
            mode,
            1 << 20,
            |_, cur, _| {
                cur.set_property("q", 7).unwrap();
                cur.close().is_ok()
            },
            |ok, _, acked, s| {
                if s.done != *acked {
                    return Err(format!("acks changed: {}", s.done.len()));
                }
                if *ok && s.props.get("q") != Some(&7) {
                    return Err(format!("close Ok, property lost: {:?}", s.props));
                }
                if s.props.get("p") != Some(&1) {
                    return Err(format!("old property lost: {:?}", s.props));
                }
                Ok(())
            },
        );
    }
}

#[test]
fn mark_delete_with_properties_then_flush() {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        run(
            "mark_delete_with_properties+flush",
            mode,
            1 << 20,
            |_, cur, ps| {
                cur.mark_delete_with_properties(ps[30], BTreeMap::from([("m".to_string(), 3)]))
                    .unwrap();
                cur.flush().is_ok()
            },
            |ok, ps, acked, s| {
                let after: BTreeSet<Position> = acked
                    .iter()
                    .copied()
                    .chain(ps[..=30].iter().copied())
                    .collect();
                subset(&s.done, &after, "invented")?;
                subset(acked, &s.done, "lost a flushed ack")?;
                if *ok && (s.done != after || s.props.get("m") != Some(&3)) {
                    return Err(format!("flush Ok, lost: {:?}", s.props));
                }
                Ok(())
            },
        );
    }
}

#[test]
fn close_without_changes_writes_nothing_that_loses_anything() {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        run(
            "close",
            mode,
            1 << 20,
            |_, cur, _| cur.close().is_ok(),
            |_, _, acked, s| {
                if s.done != *acked || s.props.get("p") != Some(&1) {
                    return Err(format!("changed: {s:?}"));
                }
                Ok(())
            },
        );
    }
}

#[test]
fn acks_past_a_tiny_budget_claim_then_crash() {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        run(
            "budget claim",
            mode,
            0,
            |_, cur, ps| {
                let mut made = BTreeSet::new();
                for &p in ps.iter().skip(2).step_by(3) {
                    if cur.ack(p).is_err() {
                        break;
                    }
                    made.insert(p);
                }
                let closed = cur.close().is_ok();
                (made, closed)
            },
            |(made, closed), _, acked, s| {
                let after: BTreeSet<Position> = acked.union(made).copied().collect();
                // mark-delete may cover 0 only when 0 was acked: it never is here.
                subset(&s.done, &after, "invented")?;
                subset(acked, &s.done, "lost a flushed ack")?;
                if *closed && s.done != after {
                    return Err("close Ok, lost".into());
                }
                Ok(())
            },
        );
    }
}

#[test]
fn batch_index_acks_under_a_tiny_budget_then_flush() {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        run(
            "batch acks",
            mode,
            0,
            |_, cur, ps| {
                let mut ok = true;
                for &p in ps.iter().skip(2).step_by(3) {
                    ok &= cur.ack_batch_index(p, 0, 1).is_ok();
                }
                ok && cur.flush().is_ok()
            },
            |ok, ps, acked, s| {
                let made: BTreeSet<Position> = ps.iter().copied().skip(2).step_by(3).collect();
                let after: BTreeSet<Position> = acked.union(&made).copied().collect();
                subset(&s.done, &after, "invented")?;
                subset(acked, &s.done, "lost a flushed ack")?;
                if *ok && s.done != after {
                    return Err("flush Ok, lost".into());
                }
                Ok(())
            },
        );
    }
}

#[test]
fn delete_cursor_while_the_claim_is_pending() {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        run(
            "delete",
            mode,
            1 << 20,
            |topic, cur, ps| {
                cur.ack(ps[0]).unwrap();
                topic.delete_cursor("sub").is_ok()
            },
            |ok, ps, acked, s| {
                if *ok {
                    // A new cursor at Earliest: nothing acked.
                    if !s.done.is_empty() {
                        return Err(format!("deleted cursor came back with {}", s.done.len()));
                    }
                    return Ok(());
                }
                let after: BTreeSet<Position> = acked.iter().copied().chain([ps[0]]).collect();
                if s.done.is_empty() || s.done == *acked {
                    return Ok(());
                }
                subset(&s.done, &after, "invented")
            },
        );
    }
}

/// A cursor created and closed without any ack (its record names no cursor ledger) is
/// reopened; acks under a tiny budget make the claim into its first ledger; a power cut at
/// every step.
#[test]
fn a_reopened_cursor_that_never_had_a_ledger_claims_under_the_budget() {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        let c = support::config::topic(PER_LEDGER, mode, 0);
        cut_everywhere_after(
            Points::every_in_release(3),
            |disk| {
                let topic = open(disk, &c).unwrap();
                let ps = append_n(&topic, ENTRIES);
                topic.sync().unwrap();
                let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
                cur.close().unwrap();
                topic.close().unwrap();
                ps
            },
            |disk, ps| {
                let mut made = BTreeSet::new();
                let mut closed = false;
                if let Ok(topic) = open(disk, &c)
                    && let Ok(cur) = topic.open_cursor("sub", CursorOptions::default())
                {
                    let mut ok = true;
                    for &p in ps.iter().skip(1).step_by(2) {
                        if cur.ack(p).is_err() {
                            ok = false;
                            break;
                        }
                        made.insert(p);
                    }
                    closed = ok && cur.close().is_ok();
                }
                (ps, made, closed)
            },
            |disk, cut, (ps, made, closed)| {
                let s = seen(&disk.durable_image(), &c, &ps);
                let what = format!("{mode:?} cut {}/{}", cut.n, cut.total);
                assert!(s.done.is_subset(&made), "{what}: invented");
                if closed {
                    assert_eq!(s.done, made, "{what}: close Ok, lost");
                }
            },
        );
    }
}

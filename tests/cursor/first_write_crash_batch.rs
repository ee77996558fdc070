//! Partial entries (batch-index acks) of a reopened cursor under a tiny budget, the
//! claim made by the budget or by a seek inside a batch, with a power cut at every step; on a
//! topic opened alone and on a store's topic (whose evictions and seek go to the journal).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::{
    AppendMeta, CursorConfig, CursorOptions, LedgerConfig, MemStorage, PersistMode, Position,
};
use support::crash::{Points, cut_everywhere_after, torn_image, unsynced_tail};
use support::topic::{Host, Hosted, on_each_host, open_hosted};

const SIZE: u32 = 4;

fn cfg(mode: PersistMode, lru: usize) -> LedgerConfig {
    LedgerConfig {
        max_entries_per_ledger: 10,
        cursor: CursorConfig {
            persist_mode: mode,
            lru_capacity_bytes: lru,
            ..CursorConfig::default()
        },
        ..LedgerConfig::default()
    }
}

fn open(host: Host, disk: &MemStorage, c: &LedgerConfig) -> ackstore::Result<Hosted> {
    open_hosted(host, Arc::new(disk.clone()), c)
}

type Acked = BTreeMap<Position, BTreeSet<u32>>;

fn prepared(host: Host, disk: &MemStorage, c: &LedgerConfig) -> (Vec<Position>, Acked) {
    let topic = open(host, disk, c).unwrap();
    let ps: Vec<Position> = (0..120)
        .map(|i| {
            topic
                .append_with(
                    b"b",
                    AppendMeta {
                        num_messages: SIZE,
                        timestamp: 1000 + i,
                    },
                )
                .unwrap()
        })
        .collect();
    topic.sync().unwrap();
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    let mut acked = Acked::new();
    for (i, &p) in ps.iter().enumerate() {
        if i % 3 == 1 {
            cur.ack_batch_index(p, 0, SIZE).unwrap();
            acked.entry(p).or_default().insert(0);
        }
    }
    cur.close().unwrap();
    topic.close().unwrap();
    (ps, acked)
}

fn seen(host: Host, image: &MemStorage, c: &LedgerConfig, ps: &[Position]) -> Acked {
    let topic = open(host, image, c).expect("opens");
    let cur = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    let mut out = Acked::new();
    for &p in ps {
        for i in 0..SIZE {
            if cur.is_batch_index_acked(p, i).unwrap() {
                out.entry(p).or_default().insert(i);
            }
        }
    }
    out
}

fn le(a: &Acked, b: &Acked) -> bool {
    a.iter()
        .all(|(p, s)| b.get(p).is_some_and(|t| s.is_subset(t)))
}

#[test]
fn partial_acks_claimed_by_the_budget_then_a_power_cut() {
    on_each_host(partial_acks_past_the_budget_then_a_power_cut);
}

fn partial_acks_past_the_budget_then_a_power_cut(host: Host) {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        let c = cfg(mode, 0);
        let clean = cut_everywhere_after(
            Points::every_in_release(3),
            |disk| prepared(host, disk, &c),
            |disk, (ps, acked)| {
                let mut after = acked.clone();
                let mut closed = false;
                if let Ok(topic) = open(host, disk, &c)
                    && let Ok(cur) = topic.open_cursor("sub", CursorOptions::default())
                {
                    let mut ok = true;
                    for (i, &p) in ps.iter().enumerate() {
                        if i % 2 == 0 {
                            if cur.ack_batch_index(p, 2, SIZE).is_err() {
                                ok = false;
                                break;
                            }
                            after.entry(p).or_default().insert(2);
                        }
                    }
                    closed = ok && cur.close().is_ok();
                }
                (ps, acked, after, closed)
            },
            |disk, cut, (ps, before, after, closed)| {
                let tail = unsynced_tail(disk);
                let mut images = vec![disk.durable_image()];
                for keep in [1, tail / 2, tail] {
                    images.push(torn_image(disk, |_| keep));
                }
                for (k, image) in images.iter().enumerate() {
                    let got = seen(host, image, &c, &ps);
                    let what = format!("{mode:?} cut {}/{} image {k}", cut.n, cut.total);
                    assert!(le(&got, &after), "{what}: invented");
                    assert!(le(&before, &got), "{what}: lost a flushed partial ack");
                    if closed {
                        assert_eq!(got, after, "{what}: close Ok, lost");
                    }
                }
            },
        );
        assert!(clean.result.3, "{mode:?}");
        eprintln!("{mode:?}: {} operations", clean.total);
    }
}

#[test]
fn seek_by_index_inside_a_batch_as_the_first_write_then_a_power_cut() {
    on_each_host(seek_inside_a_batch_then_a_power_cut);
}

fn seek_inside_a_batch_then_a_power_cut(host: Host) {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        let c = cfg(mode, 0);
        // Entry 30 holds messages 120..=123; seek to message 122.
        cut_everywhere_after(
            Points::every_in_release(3),
            |disk| prepared(host, disk, &c),
            |disk, (ps, acked)| {
                let r = open(host, disk, &c).ok().and_then(|topic| {
                    let cur = topic.open_cursor("sub", CursorOptions::default()).ok()?;
                    Some(cur.seek_by_index(122).is_ok())
                });
                (ps, acked, r)
            },
            |disk, cut, (ps, before, r)| {
                let mut after = Acked::new();
                for &p in &ps[..30] {
                    after.insert(p, (0..SIZE).collect());
                }
                after.insert(ps[30], [0, 1].into_iter().collect());
                let got = seen(host, &disk.durable_image(), &c, &ps);
                let what = format!("{mode:?} cut {}/{} ({r:?})", cut.n, cut.total);
                if r == Some(true) {
                    assert_eq!(got, after, "{what}: seek Ok, not kept");
                } else {
                    assert!(got == before || got == after, "{what}: {got:?}");
                }
            },
        );
    }
}

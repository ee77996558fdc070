//! A power cut at every storage operation of a store workload that creates and lists journal
//! segments (tiny segments: every tick starts one, rollovers unlist and delete them), creates
//! topics, deletes a cursor, closes and reopens a topic and trims: every `Ok` flush and sync is
//! kept, nothing is invented, and the recovered store works on.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::{CursorOptions, MemStorage, Position, Storage, Store};
use support::crash::{Points, cut_everywhere_after, torn_image};

#[derive(Debug, Default, Clone)]
struct Model {
    /// Entries whose sync returned Ok, per topic.
    synced: BTreeMap<String, Vec<Position>>,
    /// Every ack made, per (topic, cursor).
    truth: BTreeMap<(String, String), BTreeSet<Position>>,
    /// Acks covered by a flush that returned Ok.
    flushed: BTreeMap<(String, String), BTreeSet<Position>>,
    /// Cursors whose deletion returned Ok.
    deleted: BTreeSet<(String, String)>,
    /// Cursors whose deletion started.
    deleting: BTreeSet<(String, String)>,
    /// Topics whose creation returned Ok.
    created: BTreeSet<String>,
}

fn workload(disk: &MemStorage) -> Model {
    let mut m = Model::default();
    let _ = (|| -> ackstore::Result<()> {
        let store =
            Store::open_with_storage(Arc::new(disk.clone()), support::config::store(8, 300))?;
        let mut topics = BTreeMap::new();
        for name in ["a", "b"] {
            let t = store.topic(name)?;
            m.created.insert(name.to_owned());
            let ps = (0..20)
                .map(|i| t.append(format!("{name}{i}").as_bytes()))
                .collect::<ackstore::Result<Vec<_>>>()?;
            t.sync()?;
            m.synced.insert(name.to_owned(), ps);
            topics.insert(name, t);
        }
        let mut cursors = BTreeMap::new();
        for (name, t) in &topics {
            for c in ["x", "y"] {
                let cur = t.open_cursor(c, CursorOptions::default())?;
                cursors.insert((name.to_string(), c.to_owned()), cur);
            }
        }
        for round in 0..10u64 {
            for ((t, c), cur) in &cursors {
                let ps = &m.synced[t];
                let i = ((round * 7 + c.len() as u64 * 3 + t.len() as u64) % 20) as usize;
                let p = ps[i];
                cur.ack(p)?;
                m.truth.entry((t.clone(), c.clone())).or_default().insert(p);
                if round % 3 == 2 {
                    cur.ack_cumulative(ps[round as usize])?;
                    let e = m.truth.entry((t.clone(), c.clone())).or_default();
                    for q in &ps[..=round as usize] {
                        e.insert(*q);
                    }
                }
            }
            store.flush_all()?;
            for (k, v) in &m.truth {
                m.flushed.insert(k.clone(), v.clone());
            }
            if round == 4 {
                let t = store.topic("c")?;
                m.created.insert("c".into());
                let p = t.append(b"c0")?;
                t.sync()?;
                m.synced.insert("c".into(), vec![p]);
            }
            if round == 5 {
                cursors.remove(&("b".to_string(), "y".to_string()));
                m.deleting.insert(("b".into(), "y".into()));
                topics["b"].delete_cursor("y")?;
                m.deleted.insert(("b".into(), "y".into()));
            }
            if round == 7 {
                // Topic a closed and opened again (a broker unloading it).
                let keys: Vec<_> = cursors.keys().filter(|k| k.0 == "a").cloned().collect();
                for k in &keys {
                    cursors.remove(k);
                }
                topics["a"].close()?;
                let t = store.topic("a")?;
                for k in keys {
                    let cur = t.open_cursor(&k.1, CursorOptions::default())?;
                    cursors.insert(k, cur);
                }
                topics.insert("a", t);
            }
            if round == 8 {
                topics["a"].trim_consumed()?;
            }
        }
        store.close()?;
        Ok(())
    })();
    m
}

fn check(image: &MemStorage, m: &Model, what: &str) {
    // A power cut is never damage (an older topic record included: every ledger file lies
    // below the durable record's next ledger id, every journal cursor below its next cursor
    // id): verify agrees with the open below.
    let storage: Arc<dyn Storage> = Arc::new(image.clone());
    let report = ackstore::check::verify(&storage).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(report.is_sound(), "{what}: {report}");
    let store = Store::open_with_storage(Arc::new(image.clone()), support::config::store(8, 300))
        .unwrap_or_else(|e| panic!("{what}: open: {e}"));
    for (t, ps) in &m.synced {
        let topic = store
            .topic(t)
            .unwrap_or_else(|e| panic!("{what}: topic {t}: {e}"));
        let names = topic.cursor_names();
        // Consumed entries may be trimmed: a ledger goes only once every cursor acked it.
        let min_mark = names
            .iter()
            .map(|c| {
                topic
                    .open_cursor(c, CursorOptions::default())
                    .and_then(|c| c.mark_delete_position())
                    .unwrap_or_else(|e| panic!("{what}: {t}/{c}: {e}"))
            })
            .min()
            .flatten();
        for p in ps {
            if min_mark.is_some_and(|m| *p <= m) || names.is_empty() {
                continue;
            }
            topic
                .read(*p)
                .unwrap_or_else(|e| panic!("{what}: topic {t}: synced {p}: {e}"));
        }
        for c in ["x", "y"] {
            let key = (t.clone(), c.to_owned());
            let Some(truth) = m.truth.get(&key) else {
                continue;
            };
            let exists = names.iter().any(|n| n == c);
            if m.deleted.contains(&key) {
                assert!(!exists, "{what}: {t}/{c} deleted with Ok, still listed");
                continue;
            }
            let flushed = m.flushed.get(&key).cloned().unwrap_or_default();
            if !flushed.is_empty() && !m.deleting.contains(&key) {
                assert!(
                    exists,
                    "{what}: {t}/{c} had a flush return Ok and was never deleted; cursors {names:?}"
                );
            }
            if !exists {
                continue;
            }
            let cur = topic
                .open_cursor(c, CursorOptions::default())
                .unwrap_or_else(|e| panic!("{what}: {t}/{c}: {e}"));
            for p in ps {
                let acked = cur
                    .is_acked(*p)
                    .unwrap_or_else(|e| panic!("{what}: {t}/{c} {p}: {e}"));
                assert!(
                    !acked || truth.contains(p),
                    "{what}: {t}/{c}: {p} acked, never acked by the application"
                );
                assert!(
                    acked || !flushed.contains(p),
                    "{what}: {t}/{c}: {p} flushed with Ok, lost"
                );
            }
        }
    }
    // The recovered store works as a single owner: a flush, and a second restart.
    let t = store.topic("a").unwrap_or_else(|e| panic!("{what}: {e}"));
    let cur = t
        .open_cursor("z", CursorOptions::default())
        .unwrap_or_else(|e| panic!("{what}: new cursor: {e}"));
    if let Some(p) = m.synced.get("a").and_then(|ps| ps.last()) {
        let _ = cur.ack(*p);
    }
    cur.flush()
        .unwrap_or_else(|e| panic!("{what}: the recovered owner's flush: {e}"));
    drop(cur);
    drop(t);
    store
        .close()
        .unwrap_or_else(|e| panic!("{what}: the recovered owner's close: {e}"));
    drop(store);
    Store::open_with_storage(Arc::new(image.clone()), support::config::store(8, 300))
        .unwrap_or_else(|e| panic!("{what}: second reopen: {e}"));
}

#[test]
fn a_power_cut_at_every_step_of_a_store_workload_keeps_every_ok_and_invents_nothing() {
    let mut cuts = 0;
    let clean = cut_everywhere_after(
        Points::EVERY,
        |_| (),
        |disk, ()| workload(disk),
        |disk, cut, m| {
            cuts += 1;
            let what = format!("{cut:?}");
            check(&disk.durable_image(), &m, &format!("{what} durable"));
            check(
                &torn_image(disk, |n| n / 2),
                &m,
                &format!("{what} half the unsynced tails"),
            );
        },
    );
    assert!(cuts > 100, "{cuts} cut points");
    assert!(clean.result.deleted.len() == 1, "{:?}", clean.result);
}

/// The workload covers what the cut points above must: segments rolled over (unlisted and
/// deleted), a cursor deleted; afterwards the catalog lists exactly the segment files there are.
#[test]
fn the_workload_rolls_journal_segments_over_and_the_catalog_lists_what_is_left() {
    let disk = MemStorage::new();
    let m = workload(&disk);
    assert_eq!(m.deleted.len(), 1, "{m:?}");
    let segments: Vec<u64> = disk
        .list()
        .expect("list")
        .iter()
        .filter_map(|n| ackstore::internals::journal::parse_segment_name(n))
        .collect();
    assert!(
        segments.first().is_some_and(|&first| first > 1),
        "{segments:?}: the first segments were rolled over"
    );
    let catalog = ackstore::internals::store::read_catalog(Arc::new(disk.clone()))
        .expect("catalog")
        .expect("a store");
    assert_eq!(catalog.segments.as_deref(), Some(&segments[..]));
}

/// A power cut loses entries that were appended but never synced; acks on them were refused, so
/// the reopened cursor (its partition cold, its highest ack read from the stored record's
/// bounds) holds nothing past the topic's last entry: the entries appended again at those
/// positions are unacked, and mark-delete stops before the first of them.
#[test]
fn entries_a_power_cut_lost_carry_no_acks_and_mark_delete_stops_before_new_entries() {
    let disk = MemStorage::new();
    let config = || support::config::store(64, 1 << 20);
    // The power cut comes before the store is dropped (a close would sync the lost entries).
    let (synced, image) = {
        let store = Store::open_with_storage(Arc::new(disk.clone()), config()).expect("open");
        let t = store.topic("t").expect("topic");
        let ps: Vec<Position> = (0..20)
            .map(|i| t.append(format!("e{i}").as_bytes()).expect("append"))
            .collect();
        t.sync().expect("sync");
        let c = t
            .open_cursor("c", CursorOptions::default())
            .expect("cursor");
        for p in &ps[2..=4] {
            c.ack(*p).expect("ack");
        }
        store.flush_all().expect("flush");
        let lost: Vec<Position> = (0..20)
            .map(|i| t.append(format!("lost{i}").as_bytes()).expect("append"))
            .collect();
        // An entry a power cut can take away is not acknowledged, one at a time or up to it.
        for p in &lost[2..=15] {
            assert!(c.ack(*p).is_err(), "{p} is not synced");
        }
        assert!(c.ack_cumulative(lost[3]).is_err());
        (ps, disk.durable_image())
    };
    let store = Store::open_with_storage(Arc::new(image), config()).expect("reopen");
    let t = store.topic("t").expect("topic");
    assert_eq!(
        t.last_position(),
        synced.last().copied(),
        "the unsynced entries are lost"
    );
    let c = t
        .open_cursor("c", CursorOptions::default())
        .expect("cursor");
    assert_eq!(
        c.acked_ranges().expect("ranges"),
        vec![(synced[2], synced[4])],
        "nothing past the last entry"
    );
    let again: Vec<Position> = (0..20)
        .map(|i| t.append(format!("again{i}").as_bytes()).expect("append"))
        .collect();
    t.sync().expect("sync");
    for p in &again {
        assert!(!c.is_acked(*p).expect("is_acked"), "{p} invented");
    }
    for p in synced.iter().take(2).chain(&synced[5..]) {
        c.ack(*p).expect("ack");
    }
    assert_eq!(
        c.mark_delete_position().expect("mark-delete"),
        synced.last().copied(),
        "mark-delete covers the acked entries and no new one"
    );
    assert_eq!(c.acked_ranges().expect("ranges"), vec![]);
}

//! A store keeps a bounded number of files open: with a limit of 16 descriptors, a few hundred
//! topics (each with its data ledgers, sealed and tail, and a cursor in the shared journal) are
//! appended to, read, acknowledged and flushed in random order; the descriptors of the process
//! under the store's directory never exceed the limit and the lock file, and after a close and
//! a reopen every entry and every acknowledgement equals the model. The stores of a
//! `StoreGroup` share one limit: together they never hold more.

use std::collections::BTreeMap;
use std::sync::Arc;

use ackstore::{Cursor, GroupConfig, ManagedLedger, Position, Store, StoreConfig, StoreGroup};

use crate::support;
use support::workload::{Acked, Rng};

const LIMIT: usize = 16;
const TOPICS: usize = 300;

/// What the test wrote to one topic: its entries' payloads by position and its cursor's acks.
#[derive(Default)]
struct TopicModel {
    entries: BTreeMap<Position, Vec<u8>>,
    acked: Acked,
    /// Appended since the topic's last sync: not readable yet (nor acknowledged here).
    unsynced: usize,
}

impl TopicModel {
    /// The synced entries the cursor has not acknowledged: those a read must find (an
    /// acknowledged one's ledger may be trimmed once every cursor's mark-delete passed it).
    fn unacked(&self) -> impl Iterator<Item = (Position, &Vec<u8>)> {
        self.entries
            .iter()
            .take(self.entries.len() - self.unsynced)
            .filter(|(p, _)| !self.acked.contains(**p))
            .map(|(p, payload)| (*p, payload))
    }
}

fn config() -> StoreConfig {
    StoreConfig {
        open_files: Some(LIMIT),
        ..support::config::store(4, 4096)
    }
}

fn name(t: usize) -> String {
    format!("persistent://t/ns/topic-{t}")
}

/// Checks the bound: the cache's limit, plus the lock file (outside it, see `FileStorage`).
fn assert_bounded(dir: &std::path::Path, after: &str) {
    let open = support::fds::open_under(dir);
    assert!(
        open <= LIMIT + 1,
        "{open} descriptors under the store's directory after {after} (limit {LIMIT} + the lock)"
    );
}

/// Every topic of the model reads back its entries and its cursor's acks.
fn check(store: &Store, model: &[TopicModel], dir: &std::path::Path) {
    for (t, m) in model.iter().enumerate() {
        let topic = store.topic(&name(t)).expect("topic");
        for (p, payload) in m.unacked() {
            assert_eq!(&topic.read(p).expect("read").payload, payload, "{p:?}");
        }
        let cursor = topic
            .open_cursor("sub", support::topic::earliest())
            .expect("cursor");
        let actual = support::workload::actual(&cursor).expect("acks");
        for p in m.entries.keys() {
            assert_eq!(actual.contains(*p), m.acked.contains(*p), "topic {t} {p:?}");
        }
        assert_bounded(dir, "a check");
    }
}

#[test]
fn a_store_of_hundreds_of_topics_keeps_at_most_its_limit_of_files_open() {
    let seed = support::workload::seed_from_env("ACKSTORE_OPEN_FILES_SEED");
    eprintln!("seed {seed} (ACKSTORE_OPEN_FILES_SEED)");
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut model: Vec<TopicModel> = (0..TOPICS).map(|_| TopicModel::default()).collect();
    for round in 0..2 {
        let store = Store::open(dir.path(), config()).expect("open");
        if round > 0 {
            check(&store, &model, dir.path());
        }
        let mut open: BTreeMap<usize, (Arc<ManagedLedger>, Cursor)> = BTreeMap::new();
        for step in 0..1200 {
            let t = rng.index(TOPICS);
            let (topic, cursor) = open.entry(t).or_insert_with(|| {
                let topic = store.topic(&name(t)).expect("topic");
                let cursor = topic
                    .open_cursor("sub", support::topic::earliest())
                    .expect("cursor");
                (topic, cursor)
            });
            let m = &mut model[t];
            match rng.below(10) {
                0..=3 => {
                    let payload = format!("{t}/{round}/{step}").into_bytes();
                    let p = topic.append(&payload).expect("append");
                    m.entries.insert(p, payload);
                    m.unsynced += 1;
                }
                4 | 5 => {
                    let unacked: Vec<_> = m.unacked().collect();
                    if !unacked.is_empty() {
                        let (p, payload) = unacked[rng.index(unacked.len())];
                        assert_eq!(&topic.read(p).expect("read").payload, payload);
                    }
                }
                6 | 7 => {
                    let unacked: Vec<_> = m.unacked().map(|(p, _)| p).collect();
                    m.acked.ack_one_of(&mut rng, &unacked, cursor);
                }
                8 => cursor.flush().expect("flush"),
                _ => {
                    topic.sync().expect("sync");
                    m.unsynced = 0;
                }
            }
            assert_bounded(dir.path(), &format!("step {step} of round {round}"));
        }
        for (t, (topic, _)) in &open {
            topic.sync().expect("sync");
            model[*t].unsynced = 0;
        }
        store.flush_all().expect("flush all");
        drop(open);
        store.close().expect("close");
        drop(store);
        assert_eq!(support::fds::open_under(dir.path()), 0, "a closed store");
    }
    let store = Store::open(dir.path(), config()).expect("reopen");
    check(&store, &model, dir.path());
}

/// An entry appended and synced, and its payload.
type Written = (Position, Vec<u8>);

/// Stores of one group and the topics of each.
const MEMBERS: usize = 4;
const MEMBER_TOPICS: usize = 40;

#[test]
fn the_stores_of_a_group_keep_at_most_the_groups_limit_of_files_open_together() {
    let seed = support::workload::seed_from_env("ACKSTORE_OPEN_FILES_SEED");
    eprintln!("seed {seed} (ACKSTORE_OPEN_FILES_SEED)");
    let mut rng = Rng::new(seed);
    let parent = tempfile::tempdir().expect("temporary directory");
    let dirs: Vec<_> = (0..MEMBERS)
        .map(|m| parent.path().join(format!("store-{m}")))
        .collect();
    // Each member's own limit is far above what the group allows all of them.
    let member = StoreConfig {
        open_files: Some(10_000),
        ..support::config::store(4, 4096)
    };
    let group_of = || {
        StoreGroup::new(&GroupConfig {
            flusher_threads: 0,
            ack_memory_bytes: None,
            open_files: Some(LIMIT),
        })
    };
    // Payloads by (member, topic), in append order; every one synced before the next step.
    let mut model: BTreeMap<(usize, usize), Vec<Written>> = BTreeMap::new();
    {
        let group = group_of();
        let stores: Vec<Store> = dirs
            .iter()
            .map(|d| group.open(d, member.clone()).expect("open"))
            .collect();
        for step in 0..800 {
            let (m, t) = (rng.index(MEMBERS), rng.index(MEMBER_TOPICS));
            let topic = stores[m].topic(&name(t)).expect("topic");
            let written = model.entry((m, t)).or_default();
            if rng.below(3) == 0 && !written.is_empty() {
                let (p, payload) = &written[rng.index(written.len())];
                assert_eq!(&topic.read(*p).expect("read").payload, payload);
            } else {
                let payload = format!("{m}/{t}/{step}").into_bytes();
                let p = topic.append(&payload).expect("append");
                topic.sync().expect("sync");
                written.push((p, payload));
            }
            let open = support::fds::open_under(parent.path());
            assert!(
                open <= LIMIT + MEMBERS,
                "{open} descriptors under the group's stores at step {step} (limit {LIMIT} + a lock each)"
            );
        }
        for store in stores {
            store.close().expect("close");
        }
    }
    assert_eq!(support::fds::open_under(parent.path()), 0, "closed stores");
    let group = group_of();
    for (m, d) in dirs.iter().enumerate() {
        let store = group.open(d, member.clone()).expect("reopen");
        for t in 0..MEMBER_TOPICS {
            let Some(written) = model.get(&(m, t)) else {
                continue;
            };
            let topic = store.topic(&name(t)).expect("topic");
            for (p, payload) in written {
                assert_eq!(
                    &topic.read(*p).expect("read").payload,
                    payload,
                    "{m} {t} {p:?}"
                );
            }
        }
    }
}

//! A journal's segment count stays bounded across restarts. A new owner never appends to a
//! segment it did not create, so every restart whose owner flushes leaves its predecessor's
//! short newest segment behind; the rollover's count trigger rolls the oldest segments until
//! the count is within `segment_bound` of the live bytes again. For a store and for a topic
//! opened alone (which hosts its own journal): restarts keep the segment files within the
//! bound and every cursor's acks equal to a model; live bytes spanning many tiny segments do not
//! make the rollover loop; a power cut at every storage step of a count-triggered rollover keeps
//! every `Ok` flush and invents no ack.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::internals::journal::{
    JournalConfig, JournalStats, parse_segment_name, segment_bound,
};
use ackstore::{CursorOptions, ManagedLedger, MemStorage, Position, Storage, Store};
use support::crash::{Points, cut_everywhere_after, sound_images};

/// Entries per data ledger: every ledger is a partition of its own.
pub(super) const PER_LEDGER: u64 = 4;

/// Segments of 64 MiB: no byte-triggered rollover fires in the workloads that use them, so
/// every rollover of them is count-triggered.
pub(super) const LARGE_SEGMENTS: u64 = 64 << 20;

/// The journal's host.
#[derive(Debug, Clone, Copy)]
pub(super) enum Host {
    /// A store, whose topic `t` persists its cursors through the store's journal.
    Store,
    /// A topic opened alone, hosting its own journal.
    Alone,
}

/// An owner of the disk for one run: the store and its topic, or the topic alone.
pub(super) struct Owner {
    pub(super) store: Option<Store>,
    pub(super) topic: Arc<ManagedLedger>,
}

impl Owner {
    pub(super) fn open(
        host: Host,
        storage: Arc<dyn Storage>,
        segment_bytes: u64,
    ) -> ackstore::Result<Self> {
        match host {
            Host::Store => {
                let store = Store::open_with_storage(
                    storage,
                    support::config::store(PER_LEDGER, segment_bytes),
                )?;
                let topic = store.topic("t")?;
                Ok(Self {
                    store: Some(store),
                    topic,
                })
            }
            Host::Alone => Ok(Self {
                store: None,
                topic: Arc::new(ManagedLedger::open_with_journal(
                    storage,
                    support::topic::config(PER_LEDGER),
                    JournalConfig { segment_bytes },
                )?),
            }),
        }
    }

    pub(super) fn stats(&self) -> JournalStats {
        self.topic.journal_stats().expect("a journal")
    }

    /// Acks `acks` on each named cursor, then flushes each cursor.
    pub(super) fn ack_and_flush(&self, acks: &[(&str, Position)]) -> ackstore::Result<()> {
        let mut cursors = BTreeMap::new();
        for (name, p) in acks {
            let cursor = match cursors.entry(*name) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(self.topic.open_cursor(name, CursorOptions::default())?)
                }
            };
            cursor.ack(*p)?;
        }
        for cursor in cursors.values() {
            cursor.flush()?;
        }
        Ok(())
    }

    pub(super) fn close(self) -> ackstore::Result<()> {
        match self.store {
            Some(store) => {
                drop(self.topic);
                store.close()
            }
            None => self.topic.close(),
        }
    }
}

/// The journal segment files on `disk`.
pub(super) fn segment_files(disk: &MemStorage) -> u64 {
    disk.list()
        .expect("list")
        .iter()
        .filter(|n| parse_segment_name(n).is_some())
        .count() as u64
}

/// Appends `n` entries to the topic and syncs them; returns their positions.
pub(super) fn fill(host: Host, disk: &MemStorage, n: u64) -> Vec<Position> {
    let owner = Owner::open(host, Arc::new(disk.clone()), LARGE_SEGMENTS).expect("open");
    let ps = support::topic::append_n(&owner.topic, n);
    owner.close().expect("close");
    ps
}

/// Asserts that every cursor of `truth` on the topic of `owner` holds exactly its acks among
/// `ps`.
pub(super) fn assert_acks(
    owner: &Owner,
    ps: &[Position],
    truth: &BTreeMap<String, BTreeSet<Position>>,
) {
    for (name, acked) in truth {
        let cursor = owner
            .topic
            .open_cursor(name, CursorOptions::default())
            .expect("cursor");
        for p in ps {
            assert_eq!(
                cursor.is_acked(*p).expect("is_acked"),
                acked.contains(p),
                "{name} at {p}"
            );
        }
    }
}

/// Restarts the owner of `host` 200 times, each run acking an entry on each of two cursors and
/// flushing them; asserts the segment files stay within the bound and the acks match.
fn restarts_keep_the_segments_bounded(host: Host) {
    // The live bytes (two cursors of a few hundred acks) fit in one segment: twice one segment
    // plus the slack.
    const BOUND: u64 = 4;
    assert_eq!(segment_bound(1, LARGE_SEGMENTS), BOUND);
    let disk = MemStorage::new();
    let ps = fill(host, &disk, 400);
    let mut truth: BTreeMap<String, BTreeSet<Position>> = BTreeMap::new();
    let mut rollovers = 0;
    for run in 0..200usize {
        let owner = Owner::open(host, Arc::new(disk.clone()), LARGE_SEGMENTS).expect("open");
        assert_acks(&owner, &ps, &truth);
        let acks = [
            ("x", ps[run * 7 % ps.len()]),
            ("y", ps[run * 13 % ps.len()]),
        ];
        owner.ack_and_flush(&acks).expect("flush");
        for (name, p) in acks {
            truth.entry(name.to_owned()).or_default().insert(p);
        }
        let stats = owner.stats();
        rollovers += stats.rollovers;
        assert!(stats.segments <= BOUND, "run {run}: {stats:?}");
        assert_eq!(segment_files(&disk), stats.segments, "run {run}");
        owner.close().expect("close");
        assert!(segment_files(&disk) <= BOUND, "run {run}");
    }
    // Every run past the first few left a segment behind, and a rollover took one away.
    assert!(rollovers >= 190, "{rollovers} rollovers");
    let owner = Owner::open(host, Arc::new(disk.clone()), LARGE_SEGMENTS).expect("open");
    assert_acks(&owner, &ps, &truth);
}

#[test]
fn a_store_restarted_200_times_with_a_flush_each_keeps_its_segments_bounded_and_its_acks() {
    restarts_keep_the_segments_bounded(Host::Store);
}

#[test]
fn a_topic_alone_restarted_200_times_with_a_flush_each_keeps_its_segments_bounded_and_its_acks() {
    restarts_keep_the_segments_bounded(Host::Alone);
}

/// Cursors whose acks span many segments of 4 KiB (every other entry of 100 ledgers each, a
/// partition record per ledger), restarted 80 times with a flush of one cursor each run (so each
/// restart leaves a short segment behind and the count trigger rolls full segments whose live
/// records may overflow the newest): every flush returns within a generous allowance of
/// storage operations (a rollover that did not end would exhaust it and fail the flush), each
/// rolls over at most two segments (not a pass over all of them), the segments stay within the
/// bound of the live bytes, and the acks match.
fn live_bytes_over_many_segments_do_not_make_the_rollover_loop(host: Host) {
    const SEGMENT: u64 = 4 << 10;
    const ALLOWANCE: u64 = 200_000;
    let names = ["a", "b", "c", "d", "e", "f"];
    let disk = MemStorage::new();
    let ps = fill(host, &disk, 400);
    let mut truth: BTreeMap<String, BTreeSet<Position>> = BTreeMap::new();
    let (mut live_segments, mut rollovers) = (0, 0);
    for run in 0..80usize {
        let owner = Owner::open(host, Arc::new(disk.clone()), SEGMENT).expect("open");
        assert_acks(&owner, &ps, &truth);
        let acks: Vec<(&str, Position)> = if run == 0 {
            // The large states: each cursor acks every other entry, from its own parity.
            names
                .iter()
                .enumerate()
                .flat_map(|(c, name)| ps.iter().skip(c % 2).step_by(2).map(move |p| (*name, *p)))
                .collect()
        } else {
            // An entry of the other parity: a change, so a tick.
            let c = run % names.len();
            vec![(names[c], ps[run * 22 % ps.len() + 1 - c % 2])]
        };
        disk.fail_after(Some(ALLOWANCE));
        owner.ack_and_flush(&acks).expect("flush");
        disk.fail_after(None);
        for (name, p) in acks {
            truth.entry(name.to_owned()).or_default().insert(p);
        }
        let stats = owner.stats();
        let bound = segment_bound(stats.live_bytes, SEGMENT);
        assert!(
            stats.segments <= bound,
            "run {run}: bound {bound}: {stats:?}"
        );
        assert_eq!(segment_files(&disk), stats.segments, "run {run}");
        // Far from the byte trigger (twice the live bytes plus a segment): the rollovers here
        // are the count trigger's.
        assert!(
            stats.segment_bytes < 2 * stats.live_bytes,
            "run {run}: {stats:?}"
        );
        live_segments = stats.live_bytes.div_ceil(SEGMENT);
        // A restart pays for the one short segment it leaves, not for a pass over every
        // segment: one roll, and one more when the copies overflow the newest.
        assert!(stats.rollovers <= 2, "run {run}: {stats:?}");
        rollovers += stats.rollovers;
        owner.close().expect("close");
    }
    // The live bytes do span many segments, and once the restarts' short segments reached the
    // bound, every restart's flush rolled one over.
    assert!(live_segments >= 8, "{live_segments} segments of live bytes");
    assert!(rollovers >= 50, "{rollovers} rollovers");
    let owner = Owner::open(host, Arc::new(disk.clone()), SEGMENT).expect("open");
    assert_acks(&owner, &ps, &truth);
}

#[test]
fn a_store_whose_live_bytes_span_many_tiny_segments_rolls_over_and_ends() {
    live_bytes_over_many_segments_do_not_make_the_rollover_loop(Host::Store);
}

#[test]
fn a_topic_alone_whose_live_bytes_span_many_tiny_segments_rolls_over_and_ends() {
    live_bytes_over_many_segments_do_not_make_the_rollover_loop(Host::Alone);
}

/// Restarts the owner of `host` (four runs over 40 entries, each acking an entry on each of
/// two cursors and flushing them) until the short segments they leave reach the bound, none
/// rolled over yet; returns the entries and the acks, all flushed.
pub(super) fn restarted_to_the_bound(
    host: Host,
    disk: &MemStorage,
) -> (Vec<Position>, BTreeMap<String, BTreeSet<Position>>) {
    let ps = fill(host, disk, 40);
    let mut truth: BTreeMap<String, BTreeSet<Position>> = BTreeMap::new();
    for run in 0..4 {
        let owner = Owner::open(host, Arc::new(disk.clone()), LARGE_SEGMENTS).expect("open");
        let acks = [("x", ps[run * 3]), ("y", ps[run * 5 + 1])];
        owner.ack_and_flush(&acks).expect("flush");
        assert_eq!(owner.stats().rollovers, 0, "prepared run {run}");
        for (name, p) in acks {
            truth.entry(name.to_owned()).or_default().insert(p);
        }
        owner.close().expect("close");
    }
    assert_eq!(segment_files(disk), segment_bound(1, LARGE_SEGMENTS));
    (ps, truth)
}

/// What the application did and was told during the armed run.
#[derive(Debug, Clone, Default)]
struct Model {
    /// Every ack made, per cursor.
    truth: BTreeMap<String, BTreeSet<Position>>,
    /// The acks a flush that returned `Ok` covered, per cursor.
    flushed: BTreeMap<String, BTreeSet<Position>>,
    /// Rollovers the armed run's owner made (a run without a cut makes at least one).
    rollovers: u64,
}

/// A power cut at every storage operation of a run whose flush makes a count-triggered
/// rollover: a store or topic restarted until its segments reach the bound, then one more run
/// (the armed one) acks, flushes (the tick starts a segment, the rollover copies the oldest
/// one's live records forward, syncs, unlists and deletes it), acks again, flushes and closes.
/// After each cut, `verify` finds both images sound and the reopened cursors hold every ack a
/// flush returned `Ok` for and none the application did not make.
fn a_power_cut_anywhere_in_a_count_triggered_rollover_keeps_every_ok_flush(host: Host) {
    let prepare = |disk: &MemStorage| {
        let (ps, truth) = restarted_to_the_bound(host, disk);
        let m = Model {
            flushed: truth.clone(),
            truth,
            rollovers: 0,
        };
        (ps, m)
    };
    let workload = |disk: &MemStorage, (ps, mut m): (Vec<Position>, Model)| {
        let _ = (|| -> ackstore::Result<()> {
            let owner = Owner::open(host, Arc::new(disk.clone()), LARGE_SEGMENTS)?;
            for acks in [
                [("x", ps[30]), ("y", ps[31])],
                [("x", ps[35]), ("y", ps[2])],
            ] {
                for (name, p) in acks {
                    m.truth.entry(name.to_owned()).or_default().insert(p);
                }
                owner.ack_and_flush(&acks)?;
                m.flushed = m.truth.clone();
                m.rollovers = owner.stats().rollovers;
            }
            owner.close()
        })();
        (ps, m)
    };
    let mut cuts = 0;
    let clean = cut_everywhere_after(Points::EVERY, prepare, workload, |disk, cut, (ps, m)| {
        cuts += 1;
        for storage in sound_images(disk, cut) {
            let owner = Owner::open(host, storage, LARGE_SEGMENTS)
                .unwrap_or_else(|e| panic!("{cut:?}: open: {e}"));
            for (name, truth) in &m.truth {
                let flushed = &m.flushed[name];
                let cursor = owner
                    .topic
                    .open_cursor(name, CursorOptions::default())
                    .unwrap_or_else(|e| panic!("{cut:?}: {name}: {e}"));
                for p in &ps {
                    let acked = cursor
                        .is_acked(*p)
                        .unwrap_or_else(|e| panic!("{cut:?}: {name} at {p}: {e}"));
                    assert!(!acked || truth.contains(p), "{cut:?}: {name}: {p} invented");
                    assert!(acked || !flushed.contains(p), "{cut:?}: {name}: {p} lost");
                }
            }
        }
    });
    let (_, m) = clean.result;
    assert!(m.rollovers >= 1, "the clean run rolled nothing over: {m:?}");
    assert!(cuts > 20, "{cuts} cut points");
}

#[test]
fn a_power_cut_at_every_step_of_a_stores_count_triggered_rollover_keeps_every_ok_flush() {
    a_power_cut_anywhere_in_a_count_triggered_rollover_keeps_every_ok_flush(Host::Store);
}

#[test]
fn a_power_cut_at_every_step_of_a_topic_alones_count_triggered_rollover_keeps_every_ok_flush() {
    a_power_cut_anywhere_in_a_count_triggered_rollover_keeps_every_ok_flush(Host::Alone);
}

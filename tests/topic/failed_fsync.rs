//! A failed `fdatasync` of any file a topic syncs, on each host (a topic alone, a store's
//! topic): a data ledger (its entries, its seal), a journal segment (its records, its slot, a
//! new segment's header) or a metadata record's temporary file (a cursor's or the topic's
//! record, the store's catalog). The disk forgets what the failed sync was to write, as Linux
//! does ([`ackstore::MemStorage::lose_unsynced`]), so an `Ok` built on those bytes would lose
//! them: the call that made the sync fails, the workload goes on using the topic and its
//! cursors, and a power cut afterwards keeps every entry a `sync` answered `Ok` for and every
//! ack a `flush` (or `flush_all`, or the close) answered `Ok` for, and invents no ack.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

use ackstore::{Cursor, MemStorage, Position, Result};
use support::hooked::Hooked;
use support::topic::{Host, Hosted, config, earliest, on_each_host, open_hosted};

const PER_LEDGER: u64 = 4;
const CURSORS: usize = 2;
const ROUNDS: u64 = 6;

/// What the workload was told: the upper bound of what may come back, and what must.
#[derive(Debug, Default)]
struct Model {
    /// Every entry an append answered `Ok` for, with its payload.
    appended: Vec<(Position, Vec<u8>)>,
    /// How many of `appended` a `sync` (or the close) answered `Ok` for.
    synced: usize,
    /// Per cursor: every ack tried (whatever its answer), the acks answered `Ok`, and the acks
    /// an `Ok` flush covered.
    tried: BTreeMap<usize, BTreeSet<Position>>,
    applied: BTreeMap<usize, BTreeSet<Position>>,
    durable: BTreeMap<usize, BTreeSet<Position>>,
}

fn name(c: usize) -> String {
    format!("sub-{c}")
}

/// Runs `call`; when the failing sync happened inside it, it must have failed.
fn watched<T>(hooked: &Hooked, what: &str, call: impl FnOnce() -> Result<T>) -> Result<T> {
    let armed = hooked.hooks.fail_sync_in.load(SeqCst) != 0;
    let answer = call();
    if armed && hooked.hooks.fail_sync_in.load(SeqCst) == 0 {
        assert!(
            answer.is_err(),
            "{what}: its fdatasync failed but it answered Ok"
        );
    }
    answer
}

/// Appends, syncs, opens cursors, acks and flushes for [`ROUNDS`] rounds, going on after any
/// error, then closes; `m` records every answer.
fn workload(hosted: Hosted, hooked: &Hooked, m: &mut Model) {
    let mut cursors: Vec<Option<Cursor>> = (0..CURSORS).map(|_| None).collect();
    for round in 0..ROUNDS {
        for i in 0..3 {
            let payload = format!("e{round}.{i}").into_bytes();
            if let Ok(p) = watched(hooked, "append", || hosted.append(&payload)) {
                m.appended.push((p, payload));
            }
        }
        if watched(hooked, "sync", || hosted.sync()).is_ok() {
            m.synced = m.appended.len();
        }
        for (c, slot) in cursors.iter_mut().enumerate() {
            if slot.is_none() {
                let opened = watched(hooked, "open_cursor", || {
                    hosted.open_cursor(&name(c), earliest())
                });
                *slot = opened.ok();
            }
            let Some(cursor) = slot else { continue };
            let at = (round as usize * 5 + c * 3) % m.synced.max(1);
            if let Some(&(p, _)) = m.appended[..m.synced].get(at) {
                m.tried.entry(c).or_default().insert(p);
                if cursor.ack(p).is_ok() {
                    m.applied.entry(c).or_default().insert(p);
                }
            }
            if (round + c as u64).is_multiple_of(2)
                && watched(hooked, "flush", || cursor.flush()).is_ok()
            {
                m.durable
                    .insert(c, m.applied.get(&c).cloned().unwrap_or_default());
            }
        }
        if round % 3 == 2
            && let Some(store) = &hosted.store
            && watched(hooked, "flush_all", || store.flush_all()).is_ok()
        {
            m.durable.clone_from(&m.applied);
        }
    }
    drop(cursors);
    if watched(hooked, "close", || hosted.close()).is_ok() {
        m.synced = m.appended.len();
        m.durable.clone_from(&m.applied);
    }
}

/// Reopens `image` (the disk after a power cut) as `host` and checks it against `m`.
fn check(host: Host, image: &MemStorage, m: &Model, what: &str) {
    let hosted = open_hosted(host, Arc::new(image.clone()), &config(PER_LEDGER))
        .unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    for (i, (p, payload)) in m.appended.iter().enumerate() {
        match hosted.read(*p) {
            Ok(entry) => assert_eq!(&entry.payload[..], &payload[..], "{what}: entry {p:?}"),
            Err(e) => assert!(i >= m.synced, "{what}: synced entry {p:?} lost: {e}"),
        }
    }
    for c in 0..CURSORS {
        let cursor = hosted
            .open_cursor(&name(c), earliest())
            .unwrap_or_else(|e| panic!("{what}: cursor {c}: {e}"));
        let got: BTreeSet<Position> = m
            .appended
            .iter()
            .map(|(p, _)| *p)
            .filter(|p| cursor.is_acked(*p).expect("is_acked"))
            .collect();
        let tried = m.tried.get(&c).cloned().unwrap_or_default();
        let durable = m.durable.get(&c).cloned().unwrap_or_default();
        assert!(
            got.is_subset(&tried),
            "{what}: cursor {c} invented acks {:?}",
            got.difference(&tried).collect::<Vec<_>>()
        );
        assert!(
            durable.is_subset(&got),
            "{what}: cursor {c} lost flushed acks {:?}",
            durable.difference(&got).collect::<Vec<_>>()
        );
    }
}

/// The workload on a fresh disk with the `nth` sync after the topic's open failing (none for
/// 0): the model, the names of the files whose sync failed, and the syncs it made.
fn run(host: Host, nth: u64) -> (Model, Vec<String>, u64, MemStorage) {
    let disk = MemStorage::new();
    let hooked = Hooked::new(disk.clone());
    let hosted = open_hosted(host, Arc::new(hooked.clone()), &config(PER_LEDGER)).expect("open");
    let before = hooked.hooks.syncs.load(SeqCst);
    hooked.hooks.fail_sync_in.store(nth, SeqCst);
    let mut m = Model::default();
    workload(hosted, &hooked, &mut m);
    let syncs = hooked.hooks.syncs.load(SeqCst) - before;
    let failed = std::mem::take(&mut *hooked.hooks.failed_syncs.lock().unwrap());
    (m, failed, syncs, disk)
}

#[test]
fn a_failed_fsync_of_any_file_is_never_covered_by_a_later_ok_and_a_power_cut_keeps_every_ok() {
    on_each_host(|host| {
        let (clean, failed, syncs, disk) = run(host, 0);
        assert!(failed.is_empty());
        check(host, &disk.durable_image(), &clean, "no failure");
        assert_eq!(clean.synced, clean.appended.len(), "every sync answered Ok");
        let mut kinds = BTreeSet::new();
        for nth in 1..=syncs {
            let (m, failed, _, disk) = run(host, nth);
            let [file] = &failed[..] else {
                panic!("sync {nth}: failed {failed:?}, not one file");
            };
            let kind = if file.contains("journal-") {
                "journal segment"
            } else if file.ends_with(".meta.tmp") {
                "metadata record"
            } else if file.contains("ledger") {
                "data ledger"
            } else {
                panic!("sync {nth} of {file}: a file of no known kind");
            };
            kinds.insert(kind);
            check(
                host,
                &disk.durable_image(),
                &m,
                &format!("sync {nth} of {file}"),
            );
        }
        assert_eq!(
            kinds,
            BTreeSet::from(["data ledger", "journal segment", "metadata record"]),
            "{host:?}: the failures reached every kind of file"
        );
    });
}

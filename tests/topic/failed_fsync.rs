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
use support::hooked::{Fault, Hooked};
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

/// Runs `call`; when the failing sync (of a file or of the directory) happened inside it, it
/// must have failed.
fn watched<T>(hooked: &Hooked, what: &str, call: impl FnOnce() -> Result<T>) -> Result<T> {
    let hooks = [&hooked.hooks.fail_sync_in, &hooked.hooks.fail_dir_sync_in];
    let armed = hooks.map(|h| h.load(SeqCst) != 0);
    let answer = call();
    if armed
        .iter()
        .zip(hooks)
        .any(|(a, h)| *a && h.load(SeqCst) == 0)
    {
        assert!(
            answer.is_err(),
            "{what}: its fsync failed but it answered Ok"
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

/// What one run of the workload left: the model, the names of the files whose sync failed,
/// the file and directory syncs it made after the topic's open, and the disk.
struct Ran {
    model: Model,
    failed: Vec<String>,
    syncs: (u64, u64),
    disk: MemStorage,
}

/// The workload on a fresh disk with `fault` (counted from the topic's open; 0 for none).
fn run(host: Host, fault: Fault) -> Ran {
    let disk = MemStorage::new();
    let hooked = Hooked::new(disk.clone());
    let hosted = open_hosted(host, Arc::new(hooked.clone()), &config(PER_LEDGER)).expect("open");
    let before = hooked.arm(fault);
    let mut model = Model::default();
    workload(hosted, &hooked, &mut model);
    let after = hooked.sync_counts();
    Ran {
        model,
        failed: std::mem::take(&mut *hooked.hooks.failed_syncs.lock().unwrap()),
        syncs: (after.0 - before.0, after.1 - before.1),
        disk,
    }
}

/// The workload with nothing failing, checked: how many file and directory syncs it makes.
fn clean_run(host: Host) -> (u64, u64) {
    let clean = run(host, Fault::File(0));
    assert!(clean.failed.is_empty());
    check(
        host,
        &clean.disk.durable_image(),
        &clean.model,
        "no failure",
    );
    assert_eq!(
        clean.model.synced,
        clean.model.appended.len(),
        "every sync answered Ok"
    );
    clean.syncs
}

#[test]
fn a_failed_fsync_of_any_file_is_never_covered_by_a_later_ok_and_a_power_cut_keeps_every_ok() {
    on_each_host(|host| {
        let (syncs, _) = clean_run(host);
        let mut kinds = BTreeSet::new();
        for nth in 1..=syncs {
            let ran = run(host, Fault::File(nth));
            let [file] = &ran.failed[..] else {
                panic!("sync {nth}: failed {:?}, not one file", ran.failed);
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
            let what = format!("sync {nth} of {file}");
            check(host, &ran.disk.durable_image(), &ran.model, &what);
        }
        assert_eq!(
            kinds,
            BTreeSet::from(["data ledger", "journal segment", "metadata record"]),
            "{host:?}: the failures reached every kind of file"
        );
    });
}

/// The same with each directory sync failing in turn (a new data ledger's, a journal segment's
/// listing, a metadata record's link, a removal), the directory forgetting its unsynced names.
#[test]
fn a_failed_directory_fsync_is_never_covered_by_a_later_ok_and_a_power_cut_keeps_every_ok() {
    on_each_host(|host| {
        let (_, dir_syncs) = clean_run(host);
        assert!(dir_syncs > 3, "{host:?}: only {dir_syncs} directory syncs");
        for nth in 1..=dir_syncs {
            let ran = run(host, Fault::Dir(nth));
            let what = format!("directory sync {nth}");
            check(host, &ran.disk.durable_image(), &ran.model, &what);
        }
    });
}

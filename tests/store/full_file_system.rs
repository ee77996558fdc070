//! A store on a real full file system: a tmpfs of 2 MiB and 400 inodes, filled by the workload
//! itself and by a filler file (or empty files, for the inodes) grown and shrunk between phases,
//! while topics are created, cursors created and deleted, entries appended, acks with holes
//! made, flush ticks run, journal segments rolled (1 KiB segments), topics and the store closed
//! and reopened.
//!
//! Checked against a model of every cursor: every call that fails says there is no space (or
//! that an earlier write failed); what a flush, close or `flush_all` returned `Ok` for is kept,
//! nothing more than the application acked is ever recovered, and a topic or cursor whose
//! creation or delete failed is there or not, never half. At random steps the directory is
//! copied (what a process killed there leaves) and the copy is checked, `verify` agreeing with
//! the open, also restarted on a full file system, where its open works or fails for want of
//! space and works once space returns. Once space returns for good the next `flush_all` and close
//! succeed, the reopened store holds the model, `verify` finds it sound and no temporary file is
//! left.
//!
//! Runs only where this process may mount a tmpfs (root); elsewhere the in-memory full-disk
//! tests (`adversarial`, `journal_catalog_faults`, `journal_cursor_faults`) cover the store.

use crate::support;
use crate::support::tmpfs::{self, Tmpfs, chain, is_no_space};
use crate::support::workload::Rng;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::sync::Arc;

use ackstore::{Cursor, CursorOptions, Error, FileStorage, ManagedLedger, PersistMode};
use ackstore::{Position, Storage, Store, StoreConfig};

/// What a call on the full file system may fail with: no space, or (a data ledger or the
/// journal latched on an earlier failed write) that an earlier write failed.
fn check_error(e: &Error, what: &str) {
    assert!(
        is_no_space(e) || matches!(e, Error::PreviousIo),
        "{what}: {}",
        chain(e)
    );
}

/// The workload's store: no flusher (the test's flushes are the only ones, unless `flusher`),
/// cursors of no ack memory of their own (every partition change is an eviction write), data
/// ledgers of 20 entries, journal segments of 1 KiB.
fn config(flusher: bool) -> StoreConfig {
    let mut config = StoreConfig {
        ledger: support::config::topic(20, PersistMode::MultiEntry, 0),
        ..support::config::store_journal(1024)
    };
    if flusher {
        config.flusher_threads = 2;
        config.ledger.cursor.flush_interval = Some(std::time::Duration::from_millis(1));
    }
    config
}

/// One cursor as the application knows it: every entry it acked (`truth`), what its open handle
/// holds, and what the last `Ok` flush covered.
#[derive(Default, Clone)]
struct CursorModel {
    truth: BTreeSet<Position>,
    held: BTreeSet<Position>,
    flushed: BTreeSet<Position>,
    /// Its creation or delete failed: it may be there or not.
    unsure: bool,
}

/// One topic: its synced entries and its cursors.
#[derive(Default, Clone)]
struct TopicModel {
    positions: Vec<Position>,
    cursors: BTreeMap<String, CursorModel>,
    /// Its creation failed: it may be there or not.
    unsure: bool,
}

type Models = BTreeMap<String, TopicModel>;

/// The open handles.
#[derive(Default)]
struct Live {
    topics: BTreeMap<String, Arc<ManagedLedger>>,
    cursors: BTreeMap<(String, String), Cursor>,
}

impl Live {
    /// Every open cursor's flush returned `Ok` (or its close, or `flush_all`).
    fn flushed(&self, models: &mut Models) {
        for (t, c) in self.cursors.keys() {
            let cm = cursor_model(models, t, c);
            cm.flushed = cm.held.clone();
        }
    }
}

fn cursor_model<'a>(models: &'a mut Models, topic: &str, cursor: &str) -> &'a mut CursorModel {
    models
        .get_mut(topic)
        .and_then(|t| t.cursors.get_mut(cursor))
        .expect("a modelled cursor")
}

/// The entries of `positions` cursor `c` holds acked, checked against `cm`: none the application
/// did not ack, every one a flush returned `Ok` for.
fn recovered(
    c: &Cursor,
    positions: &[Position],
    cm: &CursorModel,
    what: &str,
) -> BTreeSet<Position> {
    let got: BTreeSet<Position> = positions
        .iter()
        .copied()
        .filter(|&p| c.is_acked(p).expect("is_acked"))
        .collect();
    if let Some(p) = got.difference(&cm.truth).next() {
        panic!("{what}: {p} is acked and was never acked");
    }
    if let Some(p) = cm.flushed.difference(&got).next() {
        panic!("{what}: {p} was flushed and is lost");
    }
    got
}

/// Checks every topic and cursor of `models` in `store`, just opened. With `adopt` (the live
/// store), the recovered states become the handles' and the handles are kept in `live`, and a
/// topic or cursor that cannot open for want of space is skipped.
fn check_store(store: &Store, models: &mut Models, live: Option<&mut Live>, what: &str) {
    let names: BTreeSet<String> = store.topic_names().into_iter().collect();
    if let Some(n) = names.iter().find(|n| !models.contains_key(*n)) {
        panic!("{what}: topic {n} was never created");
    }
    let mut kept = Live::default();
    for (name, tm) in models.iter_mut() {
        if !names.contains(name) {
            assert!(tm.unsure, "{what}: topic {name} is lost");
            continue;
        }
        let topic = match store.topic(name) {
            Ok(t) => t,
            Err(e) if live.is_some() && is_no_space(&e) => continue,
            Err(e) => panic!("{what}: topic {name}: {}", chain(&e)),
        };
        let cursors: BTreeSet<String> = topic.cursor_names().into_iter().collect();
        if let Some(c) = cursors.iter().find(|c| !tm.cursors.contains_key(*c)) {
            panic!("{what}: {name}/{c} was never created or was deleted");
        }
        for (cname, cm) in &mut tm.cursors {
            if !cursors.contains(cname) {
                assert!(cm.unsure, "{what}: {name}/{cname} is lost");
                continue;
            }
            let c = match topic.open_cursor(cname, CursorOptions::default()) {
                Ok(c) => c,
                Err(e) if live.is_some() && is_no_space(&e) => continue,
                Err(e) => panic!("{what}: {name}/{cname}: {}", chain(&e)),
            };
            let got = recovered(&c, &tm.positions, cm, &format!("{what}: {name}/{cname}"));
            if live.is_some() {
                cm.held = got;
                cm.unsure = false;
                kept.cursors.insert((name.clone(), cname.clone()), c);
            }
        }
        if live.is_some() {
            tm.unsure = false;
            kept.topics.insert(name.clone(), topic);
        }
    }
    if let Some(live) = live {
        *live = kept;
    }
}

/// What a process killed now leaves: the directory copied, `verify` on the copy agreeing with
/// its open, and the open holding the model. With `full_but`, the copy restarts on a file system
/// full but for that many bytes first: its open works and holds the model, or fails for want of
/// space without leaving anything `verify` or the next open refuses.
fn check_kill_image(
    dir: &Path,
    models: &Models,
    config: &StoreConfig,
    full_but: Option<u64>,
    what: &str,
) {
    let fs4m = full_but.and_then(|_| Tmpfs::mount(4 << 20, 2_000));
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let image = fs4m
        .as_ref()
        .map_or(scratch.path(), Tmpfs::path)
        .join("image");
    tmpfs::copy_dir(dir, &image);
    if let (Some(fs4m), Some(slack)) = (&fs4m, full_but) {
        let filler = fs4m.path().join("filler");
        tmpfs::fill(&filler);
        tmpfs::free_bytes(&filler, slack);
        match Store::open(&image, config.clone()) {
            Ok(store) => {
                check_store(
                    &store,
                    &mut models.clone(),
                    Some(&mut Live::default()),
                    what,
                );
                let _ = store.close();
            }
            Err(e) => check_error(&e, &format!("{what}: open on a full file system")),
        }
        tmpfs::remove_filler(&filler);
    }
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(&image, false).expect("image"));
    let verified = ackstore::check::verify(&storage).expect("verify runs");
    let store = match Store::open(&image, config.clone()) {
        Ok(store) => store,
        Err(e) => panic!(
            "{what}: the open refuses the image ({}); verify said: {verified}",
            chain(&e)
        ),
    };
    assert!(
        verified.is_sound(),
        "{what}: the open works, verify said: {verified}"
    );
    check_store(&store, &mut models.clone(), None, what);
    store.close().expect("the image closes");
}

/// The file system's state for the next phase of the workload.
fn next_phase(rng: &mut Rng, filler: &Path, inodes: &Path) {
    tmpfs::remove_filler(filler);
    let _ = fs::remove_dir_all(inodes);
    match rng.index(4) {
        0 => {}
        1 => {
            tmpfs::fill(filler);
            let room = [512, 4096, 8192, 16_384, 65_536, 200_000];
            tmpfs::free_bytes(filler, room[rng.index(room.len())]);
        }
        2 => tmpfs::fill(filler),
        _ => {
            tmpfs::fill_inodes(inodes);
            tmpfs::free_inodes(inodes, rng.index(6));
        }
    }
}

/// Runs `steps` steps of the workload of seed `seed` on a fresh tmpfs, then frees the space and
/// checks the store; returns how many calls succeeded and failed, by kind.
#[expect(
    clippy::too_many_lines,
    reason = "one step per arm: the workload reads top to bottom"
)]
fn workload(seed: u64, steps: usize, flusher: bool) -> BTreeMap<String, u64> {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let Some(fs2m) = Tmpfs::mount(2 << 20, 400) else {
        return counts;
    };
    let config = config(flusher);
    let dir = fs2m.path().join("store");
    let filler = fs2m.path().join("filler");
    let inodes = fs2m.path().join("inodes");
    let mut rng = Rng::new(seed);
    let mut models = Models::new();
    let mut live = Live::default();
    let mut store = Some(Store::open(&dir, config.clone()).expect("open with space"));
    let mut outcome = |what: &str, r: Result<(), Error>, at: &str| {
        if let Err(e) = &r {
            check_error(e, &format!("{at}: {what}"));
        }
        let key = format!("{what} {}", if r.is_ok() { "ok" } else { "failed" });
        *counts.entry(key).or_default() += 1;
        r.is_ok()
    };
    let mut phase_left = 0;
    for step in 0..steps {
        if phase_left == 0 {
            phase_left = 20 + rng.index(60);
            next_phase(&mut rng, &filler, &inodes);
        }
        phase_left -= 1;
        let at = format!("seed {seed} step {step}");
        let Some(s) = store.clone() else {
            match Store::open(&dir, config.clone()) {
                Ok(s) => {
                    check_store(&s, &mut models, Some(&mut live), &format!("{at}: reopen"));
                    store = Some(s);
                    outcome("reopen", Ok(()), &at);
                }
                Err(e) => {
                    outcome("reopen", Err(e), &at);
                    // Room for the next try: the open needs a link (an inode on tmpfs).
                    tmpfs::free_bytes(&filler, 8192);
                    tmpfs::free_inodes(&inodes, 2);
                }
            }
            continue;
        };
        let topic_names: Vec<String> = models.keys().cloned().collect();
        let open_topic = |rng: &mut Rng| {
            rng.pick(&topic_names)
                .and_then(|n| live.topics.get(&n).map(|t| (n, t.clone())))
        };
        let op = rng.index(100);
        match op {
            0..=4 => {
                // A name of 9 to 308 bytes: the catalog grows fast.
                let name = format!("topic-{:03}-{}", models.len(), "x".repeat(rng.index(300)));
                let created = s.topic(&name);
                let tm = models.entry(name.clone()).or_default();
                tm.unsure = created.is_err();
                if let Ok(t) = &created {
                    live.topics.insert(name, t.clone());
                }
                outcome("create topic", created.map(drop), &at);
            }
            5..=9 => {
                let Some((name, topic)) = open_topic(&mut rng) else {
                    continue;
                };
                let cname = format!("c{}", rng.index(4));
                let tm = models.get_mut(&name).expect("modelled");
                if tm.cursors.get(&cname).is_some_and(|c| !c.unsure) {
                    continue;
                }
                // A cursor whose delete failed may still be there, with its acks.
                let mut cm = tm.cursors.remove(&cname).unwrap_or_default();
                // One whose delete failed may be gone (the delete took effect, a later write of
                // the call did not): then it is created anew, nothing acknowledged.
                if !topic.cursor_names().contains(&cname) {
                    cm = CursorModel::default();
                }
                let opened = topic.open_cursor(&cname, CursorOptions::default());
                if let Ok(c) = &opened {
                    let what = format!("{at}: {name}/{cname} opened again");
                    cm.held = recovered(c, &tm.positions, &cm, &what);
                    live.cursors
                        .insert((name.clone(), cname.clone()), c.clone());
                }
                cm.unsure = opened.is_err();
                models
                    .get_mut(&name)
                    .expect("modelled")
                    .cursors
                    .insert(cname, cm);
                outcome("create cursor", opened.map(drop), &at);
            }
            10..=12 => {
                let Some((name, topic)) = open_topic(&mut rng) else {
                    continue;
                };
                let tm = models.get_mut(&name).expect("modelled");
                let known: Vec<String> = tm
                    .cursors
                    .iter()
                    .filter(|(_, c)| !c.unsure)
                    .map(|(n, _)| n.clone())
                    .collect();
                let Some(cname) = rng.pick(&known) else {
                    continue;
                };
                let deleted = topic.delete_cursor(&cname);
                live.cursors.remove(&(name, cname.clone()));
                if deleted.is_ok() {
                    tm.cursors.remove(&cname);
                } else {
                    tm.cursors.get_mut(&cname).expect("known").unsure = true;
                }
                outcome("delete cursor", deleted, &at);
            }
            13..=22 => {
                let Some((name, topic)) = open_topic(&mut rng) else {
                    continue;
                };
                let mut appended = Vec::new();
                let mut done = Ok(());
                for _ in 0..=rng.index(20) {
                    match topic.append(&vec![b'e'; 1 + rng.index(2000)]) {
                        Ok(p) => appended.push(p),
                        Err(e) => {
                            done = Err(e);
                            break;
                        }
                    }
                }
                // Only synced entries are acked later.
                let done = done.and_then(|()| topic.sync());
                if done.is_ok() {
                    models
                        .get_mut(&name)
                        .expect("modelled")
                        .positions
                        .extend(appended);
                }
                outcome("append and sync", done, &at);
            }
            23..=59 => {
                let keys: Vec<(String, String)> = live.cursors.keys().cloned().collect();
                let Some(key) = rng.pick(&keys) else { continue };
                let c = live.cursors[&key].clone();
                let tm = models.get_mut(&key.0).expect("modelled");
                let cm = tm.cursors.get_mut(&key.1).expect("modelled");
                for _ in 0..=rng.index(30) {
                    let Some(p) = rng.pick(&tm.positions) else {
                        break;
                    };
                    let mark = c.mark_delete_position().expect("mark-delete");
                    let acked: Vec<Position> = if rng.index(20) == 0 && mark.is_none_or(|m| m < p) {
                        c.ack_cumulative(p)
                            .unwrap_or_else(|e| panic!("{at}: {}", chain(&e)));
                        tm.positions.iter().copied().filter(|q| *q <= p).collect()
                    } else {
                        c.ack(p)
                            .unwrap_or_else(|e| panic!("{at}: an ack: {}", chain(&e)));
                        vec![p]
                    };
                    cm.truth.extend(&acked);
                    cm.held.extend(&acked);
                }
            }
            60..=69 => {
                let flushed = s.flush_all().map(drop);
                if flushed.is_ok() {
                    live.flushed(&mut models);
                }
                outcome("flush_all", flushed, &at);
            }
            70..=73 => {
                let keys: Vec<(String, String)> = live.cursors.keys().cloned().collect();
                let Some(key) = rng.pick(&keys) else { continue };
                let c = live.cursors[&key].clone();
                let close = rng.index(2) == 0;
                let done = if close { c.close() } else { c.flush() };
                if done.is_ok() {
                    let cm = cursor_model(&mut models, &key.0, &key.1);
                    cm.flushed = cm.held.clone();
                    if close {
                        live.cursors.remove(&key);
                    }
                }
                outcome(
                    if close {
                        "cursor close"
                    } else {
                        "cursor flush"
                    },
                    done,
                    &at,
                );
            }
            74..=76 => {
                let Some(name) = rng.pick(&topic_names) else {
                    continue;
                };
                if let Some(topic) = live.topics.remove(&name) {
                    let closed = topic.close();
                    let keys: Vec<_> = live
                        .cursors
                        .keys()
                        .filter(|k| k.0 == name)
                        .cloned()
                        .collect();
                    for k in keys {
                        live.cursors.remove(&k);
                        if closed.is_ok() {
                            let cm = cursor_model(&mut models, &k.0, &k.1);
                            cm.flushed = cm.held.clone();
                        }
                    }
                    outcome("topic close", closed, &at);
                } else {
                    let opened = s.topic(&name);
                    if let Ok(t) = &opened {
                        live.topics.insert(name, t.clone());
                    }
                    outcome("topic open", opened.map(drop), &at);
                }
            }
            77..=80 => {
                // A closed cursor opens again with what its flushes kept.
                let Some((name, topic)) = open_topic(&mut rng) else {
                    continue;
                };
                let tm = models.get_mut(&name).expect("modelled");
                let closed: Vec<String> = tm
                    .cursors
                    .iter()
                    .filter(|(n, c)| {
                        !c.unsure && !live.cursors.contains_key(&(name.clone(), (*n).clone()))
                    })
                    .map(|(n, _)| n.clone())
                    .collect();
                let Some(cname) = rng.pick(&closed) else {
                    continue;
                };
                let opened = topic.open_cursor(&cname, CursorOptions::default());
                if let Ok(c) = &opened {
                    let cm = tm.cursors.get_mut(&cname).expect("modelled");
                    cm.held = recovered(c, &tm.positions, cm, &format!("{at}: {name}/{cname}"));
                    live.cursors.insert((name, cname), c.clone());
                }
                outcome("cursor open", opened.map(drop), &at);
            }
            81 => {
                let closed = s.close();
                if closed.is_ok() {
                    live.flushed(&mut models);
                }
                live = Live::default();
                store = None;
                outcome("store close", closed, &at);
            }
            82..=84 if !flusher => {
                check_kill_image(&dir, &models, &config, None, &format!("{at}: killed"));
            }
            85..=86 if !flusher => {
                let slack = Some(1024 * rng.index(12) as u64);
                let what = format!("{at}: killed, restarted on a full file system");
                check_kill_image(&dir, &models, &config, slack, &what);
            }
            _ => {}
        }
    }
    // Space returns for good (the workload's own files may fill the file system: it grows too):
    // the next flush_all and close succeed.
    tmpfs::remove_filler(&filler);
    let _ = fs::remove_dir_all(&inodes);
    fs2m.grow(16 << 20, 4_000);
    if let Some(s) = store.take() {
        s.flush_all().unwrap_or_else(|e| {
            panic!("seed {seed}: flush_all once space returned: {}", chain(&e))
        });
        live.flushed(&mut models);
        live.cursors.clear();
        for (name, topic) in std::mem::take(&mut live.topics) {
            // A data ledger latched by a failed append refuses its close (its unsynced entries
            // may be lost), and a cursor's close returns an error its flusher pool kept (both
            // documented); its cursors were flushed above all the same.
            if let Err(e) = topic.close() {
                let kept = flusher && is_no_space(&e);
                assert!(
                    kept || matches!(e, Error::PreviousIo),
                    "seed {seed}: {name}: {}",
                    chain(&e)
                );
            }
        }
        s.close()
            .unwrap_or_else(|e| panic!("seed {seed}: close once space returned: {}", chain(&e)));
    }
    let s = Store::open(&dir, config.clone()).expect("the open once space returned");
    check_store(
        &s,
        &mut models,
        Some(&mut live),
        &format!("seed {seed}: at the end"),
    );
    drop(live);
    s.close().expect("the last close");
    let files = tmpfs::files_under(&dir);
    assert!(
        !files.iter().any(|f| f.ends_with(".tmp")),
        "seed {seed}: temporary files left: {files:?}"
    );
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(&dir, false).expect("the store"));
    let verified = ackstore::check::verify(&storage).expect("verify runs");
    assert!(verified.is_sound(), "seed {seed}: {verified}");
    counts
}

#[test]
fn a_store_on_a_full_tmpfs_keeps_every_flushed_ack_invents_none_and_recovers_once_space_returns() {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for seed in 1..=8 {
        for (k, v) in workload(seed, 600, false) {
            *counts.entry(k).or_default() += v;
        }
    }
    if counts.is_empty() {
        eprintln!("cannot mount a tmpfs here (not root): the in-memory full-disk tests cover this");
        return;
    }
    // The workload reached what it is about: calls that met the full file system, and calls
    // that succeeded on it.
    for what in [
        "create topic",
        "create cursor",
        "delete cursor",
        "append and sync",
        "flush_all",
        "store close",
        "reopen",
    ] {
        for how in ["ok", "failed"] {
            assert!(
                counts.contains_key(&format!("{what} {how}")),
                "no {what} {how}: {counts:?}"
            );
        }
    }
}

#[test]
fn a_store_on_a_full_tmpfs_with_its_flusher_pool_keeps_every_flushed_ack() {
    for seed in 21..=23 {
        workload(seed, 600, true);
    }
}

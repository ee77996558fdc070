//! A store on a real full file system: a tmpfs of 2 MiB and 400 inodes, filled by the workload
//! itself and by a filler file (or empty files, for the inodes) grown and shrunk between phases,
//! while topics are created, cursors created and deleted, entries appended, acks with holes
//! made, flush ticks run, journal segments rolled (1 KiB segments), topics and the store closed
//! and reopened. With groups ([`Shape::groups`], a tmpfs of 4 MiB and 1,000 inodes, topics of
//! many small entries): `ack_many` groups and batch-index acks too, by cursors sharing a store
//! ack budget of 512 bytes to 2 KiB, so partitions and partial entries are evicted to the
//! journal, refused by the full disk (pinned) and loaded back all along ([`acks`]).
//!
//! Checked against a model of every cursor: every call that fails says there is no space (or
//! that an earlier write failed), and every ack answers as the model says; at the end of each
//! phase every open cursor holds exactly its model; what a flush, close or `flush_all` returned
//! `Ok` for is kept, nothing more than the application acked is ever recovered (entries and
//! messages), and a topic or cursor whose creation or delete failed is there or not, never
//! half. At random steps the directory is copied (what a process killed there leaves) and the
//! copy is checked, `verify` agreeing with the open, also restarted on a full file system, where
//! its open works or fails for want of space and works once space returns. Once space returns
//! for good the next `flush_all` and close succeed, the reopened store holds the model, `verify`
//! finds it sound and no temporary file is left.
//!
//! Runs only where this process may mount a tmpfs (root); elsewhere the in-memory full-disk
//! tests (`adversarial`, `journal_catalog_faults`, `journal_cursor_faults`) cover the store.
//! `ACKSTORE_SEED` runs the tests with groups on that seed alone.

mod acks;

use crate::support;
use crate::support::tmpfs::{self, Tmpfs, chain, is_no_space};
use crate::support::workload::{Messages, Rng, actual_messages};

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

/// What a workload runs beside its topics, cursors, appends, flushes, closes and reopens.
#[derive(Clone, Copy, Debug)]
struct Shape {
    /// The store's flusher pool ticks every millisecond beside the workload's own flushes.
    flusher: bool,
    /// `None`: acks are `ack` and `ack_cumulative`, by cursors of no ack memory of their own
    /// (every partition change is an eviction write). `Some(n)`: `ack_many` groups and
    /// batch-index acks too ([`acks`]), by cursors that share one store budget of `n` bytes
    /// (each allowed far more alone), so they release partitions and partial entries to each
    /// other and load them back, on the full file system too.
    groups: Option<usize>,
}

/// The workload's store: no flusher (the test's flushes are the only ones, unless
/// `shape.flusher`), ack memory as `shape.groups` says, data ledgers of 20 entries (each its
/// own ack partition), journal segments of 1 KiB.
fn config(shape: Shape) -> StoreConfig {
    let lru = if shape.groups.is_some() { 1 << 20 } else { 0 };
    let mut config = StoreConfig {
        ledger: support::config::topic(20, PersistMode::MultiEntry, lru),
        ack_memory_bytes: shape.groups,
        ..support::config::store_journal(1024)
    };
    if shape.flusher {
        config.flusher_threads = 2;
        config.ledger.cursor.flush_interval = Some(std::time::Duration::from_millis(1));
    }
    config
}

/// One cursor as the application knows it: every entry it acked (`truth`), what its open handle
/// holds, and what the last `Ok` flush covered; the same for the messages it acknowledged one
/// by one (batch-index acks) of entries not acknowledged whole.
#[derive(Default, Clone)]
struct CursorModel {
    truth: BTreeSet<Position>,
    held: BTreeSet<Position>,
    flushed: BTreeSet<Position>,
    truth_msgs: Messages,
    /// The entries of `held_msgs` are partial: neither in `held` nor with every message.
    held_msgs: Messages,
    flushed_msgs: Messages,
    /// Its creation or delete failed: it may be there or not.
    unsure: bool,
}

impl CursorModel {
    /// A flush, close or `flush_all` covering this cursor returned `Ok`.
    fn flushed_now(&mut self) {
        self.flushed = self.held.clone();
        self.flushed_msgs = self.held_msgs.clone();
    }

    /// The entries `acked` are acknowledged whole (their messages with them).
    fn ack_entries(&mut self, acked: impl IntoIterator<Item = Position>) {
        for p in acked {
            self.truth.insert(p);
            self.held.insert(p);
            self.held_msgs.0.remove(&p);
        }
    }
}

/// The number of messages of the entry at `p`, as the batch-index acks give it (the store
/// takes it from the caller, and it must stay the same for an entry): 2 to 6.
fn batch_size(p: Position) -> u32 {
    2 + u32::try_from(p.entry_id % 5).expect("small")
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
            cursor_model(models, t, c).flushed_now();
        }
    }
}

fn cursor_model<'a>(models: &'a mut Models, topic: &str, cursor: &str) -> &'a mut CursorModel {
    models
        .get_mut(topic)
        .and_then(|t| t.cursors.get_mut(cursor))
        .expect("a modelled cursor")
}

/// The entries of `positions` cursor `c` holds acked.
fn acked_entries(c: &Cursor, positions: &[Position], what: &str) -> BTreeSet<Position> {
    positions
        .iter()
        .copied()
        .filter(|&p| {
            c.is_acked(p)
                .unwrap_or_else(|e| panic!("{what}: is_acked({p}): {}", chain(&e)))
        })
        .collect()
}

/// The messages cursor `c` holds acked of the entries of `positions` not in `got`.
fn acked_messages(
    c: &Cursor,
    positions: &[Position],
    got: &BTreeSet<Position>,
    what: &str,
) -> Messages {
    let partial = positions
        .iter()
        .filter(|p| !got.contains(p))
        .map(|&p| (p, batch_size(p)));
    actual_messages(c, partial)
        .unwrap_or_else(|e| panic!("{what}: is_batch_index_acked: {}", chain(&e)))
}

/// The entries of `positions` cursor `c` holds acked, and the messages it holds acked of the
/// others, checked against `cm`: none the application did not ack, every one a flush returned
/// `Ok` for.
fn recovered(
    c: &Cursor,
    positions: &[Position],
    cm: &CursorModel,
    what: &str,
) -> (BTreeSet<Position>, Messages) {
    let got = acked_entries(c, positions, what);
    if let Some(p) = got.difference(&cm.truth).next() {
        panic!("{what}: {p} is acked and was never acked");
    }
    if let Some(p) = cm.flushed.difference(&got).next() {
        panic!("{what}: {p} was flushed and is lost");
    }
    let msgs = acked_messages(c, positions, &got, what);
    let none = BTreeSet::new();
    for (p, acked) in &msgs.0 {
        let truth = cm.truth_msgs.0.get(p).unwrap_or(&none);
        if let Some(i) = acked
            .difference(truth)
            .next()
            .filter(|_| !cm.truth.contains(p))
        {
            panic!("{what}: message {i} of {p} is acked and was never acked");
        }
    }
    for (p, flushed) in &cm.flushed_msgs.0 {
        let held = msgs.0.get(p).unwrap_or(&none);
        if let Some(i) = flushed.difference(held).next().filter(|_| !got.contains(p)) {
            panic!("{what}: message {i} of {p} was flushed and is lost");
        }
    }
    (got, msgs)
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
                (cm.held, cm.held_msgs) = got;
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

/// How many calls of each kind succeeded and failed, and what else the workload met.
#[derive(Default)]
struct Tally(BTreeMap<String, u64>);

impl Tally {
    /// Counts `r`, which must be `Ok` or say there is no space (or that an earlier write
    /// failed); returns whether it is `Ok`.
    fn outcome(&mut self, what: &str, r: Result<(), Error>, at: &str) -> bool {
        if let Err(e) = &r {
            check_error(e, &format!("{at}: {what}"));
        }
        self.note(&format!(
            "{what} {}",
            if r.is_ok() { "ok" } else { "failed" }
        ));
        r.is_ok()
    }

    /// Counts one `what`.
    fn note(&mut self, what: &str) {
        *self.0.entry(what.to_owned()).or_default() += 1;
    }
}

/// Runs `steps` steps of the workload of seed `seed` and shape `shape` on a fresh tmpfs, then
/// frees the space and checks the store; returns how many calls succeeded and failed, by kind,
/// and what else it met.
#[expect(
    clippy::too_many_lines,
    reason = "one step per arm: the workload reads top to bottom"
)]
fn workload(seed: u64, steps: usize, shape: Shape) -> BTreeMap<String, u64> {
    let mut tally = Tally::default();
    // With groups: topics of many more and smaller entries, in many ledgers (each its own ack
    // partition), on a file system as much larger as their ledger files need.
    let (bytes, files, per_draw, payload) = match shape.groups {
        None => (2 << 20, 400, 1, 2000),
        Some(_) => (4 << 20, 1_000, 3, 200),
    };
    let Some(fs) = Tmpfs::mount(bytes, files) else {
        return tally.0;
    };
    let flusher = shape.flusher;
    let config = config(shape);
    let dir = fs.path().join("store");
    let filler = fs.path().join("filler");
    let inodes = fs.path().join("inodes");
    let mut rng = Rng::new(seed);
    let mut models = Models::new();
    let mut live = Live::default();
    let mut store = Some(Store::open(&dir, config.clone()).expect("open with space"));
    let mut phase_left = 0;
    for step in 0..steps {
        if phase_left == 0 {
            if let Some(s) = &store {
                let at = format!("seed {seed} before step {step}");
                acks::check_live((&live, &models), s, &at, &mut tally);
            }
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
                    tally.outcome("reopen", Ok(()), &at);
                }
                Err(e) => {
                    tally.outcome("reopen", Err(e), &at);
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
                tally.outcome("create topic", created.map(drop), &at);
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
                    (cm.held, cm.held_msgs) = recovered(c, &tm.positions, &cm, &what);
                    live.cursors
                        .insert((name.clone(), cname.clone()), c.clone());
                }
                cm.unsure = opened.is_err();
                models
                    .get_mut(&name)
                    .expect("modelled")
                    .cursors
                    .insert(cname, cm);
                tally.outcome("create cursor", opened.map(drop), &at);
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
                tally.outcome("delete cursor", deleted, &at);
            }
            13..=22 => {
                let Some((name, topic)) = open_topic(&mut rng) else {
                    continue;
                };
                let mut appended = Vec::new();
                let mut done = Ok(());
                for _ in 0..(1 + rng.index(20)) * per_draw {
                    match topic.append(&vec![b'e'; 1 + rng.index(payload)]) {
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
                tally.outcome("append and sync", done, &at);
            }
            23..=59 => {
                let keys: Vec<(String, String)> = live.cursors.keys().cloned().collect();
                let Some(key) = rng.pick(&keys) else { continue };
                let c = &live.cursors[&key];
                let tm = models.get_mut(&key.0).expect("modelled");
                let cm = tm.cursors.get_mut(&key.1).expect("modelled");
                if shape.groups.is_some() {
                    acks::burst(&mut rng, (c, &tm.positions), cm, &at, &mut tally);
                } else {
                    acks::singles(&mut rng, (c, &tm.positions, &tm.positions), cm, &at);
                }
            }
            60..=69 => {
                let flushed = s.flush_all().map(drop);
                if flushed.is_ok() {
                    live.flushed(&mut models);
                    if let (Some(limit), false) = (shape.groups, shape.flusher) {
                        acks::check_budget(&live, &s, limit, &at);
                    }
                }
                tally.outcome("flush_all", flushed, &at);
            }
            70..=73 => {
                let keys: Vec<(String, String)> = live.cursors.keys().cloned().collect();
                let Some(key) = rng.pick(&keys) else { continue };
                let c = live.cursors[&key].clone();
                let close = rng.index(2) == 0;
                let done = if close { c.close() } else { c.flush() };
                if done.is_ok() {
                    cursor_model(&mut models, &key.0, &key.1).flushed_now();
                    if close {
                        live.cursors.remove(&key);
                    }
                }
                tally.outcome(
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
                            cursor_model(&mut models, &k.0, &k.1).flushed_now();
                        }
                    }
                    tally.outcome("topic close", closed, &at);
                } else {
                    let opened = s.topic(&name);
                    if let Ok(t) = &opened {
                        live.topics.insert(name, t.clone());
                    }
                    tally.outcome("topic open", opened.map(drop), &at);
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
                    let what = format!("{at}: {name}/{cname}");
                    (cm.held, cm.held_msgs) = recovered(c, &tm.positions, cm, &what);
                    live.cursors.insert((name, cname), c.clone());
                }
                tally.outcome("cursor open", opened.map(drop), &at);
            }
            81 => {
                let closed = s.close();
                if closed.is_ok() {
                    live.flushed(&mut models);
                }
                live = Live::default();
                store = None;
                tally.outcome("store close", closed, &at);
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
    fs.grow(16 << 20, 4_000);
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
    tally.0
}

/// The workloads of `seeds` in `shape` (a budget for each seed with `budgets`), their counts
/// added up; empty when this process may not mount a tmpfs.
fn workloads(
    seeds: impl IntoIterator<Item = u64>,
    shape: Shape,
    budgets: &[usize],
) -> BTreeMap<String, u64> {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for seed in seeds {
        let groups = shape.groups.map(|_| budgets[seed as usize % budgets.len()]);
        for (k, v) in workload(seed, 600, Shape { groups, ..shape }) {
            *counts.entry(k).or_default() += v;
        }
    }
    if counts.is_empty() {
        eprintln!("cannot mount a tmpfs here (not root): the in-memory full-disk tests cover this");
    }
    counts
}

/// `ACKSTORE_SEED` alone when it is set (to repeat a failure, or to try other seeds), else
/// `fixed`; and whether they are the fixed ones.
fn seeds(fixed: std::ops::RangeInclusive<u64>) -> (Vec<u64>, bool) {
    match std::env::var("ACKSTORE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(seed) => (vec![seed], false),
        None => (fixed.collect(), true),
    }
}

/// Panics unless `counts` holds every one of `keys`.
fn reached(counts: &BTreeMap<String, u64>, keys: &[&str]) {
    for key in keys {
        assert!(counts.contains_key(*key), "never {key}: {counts:?}");
    }
}

#[test]
fn a_store_on_a_full_tmpfs_keeps_every_flushed_ack_invents_none_and_recovers_once_space_returns() {
    let shape = Shape {
        flusher: false,
        groups: None,
    };
    let counts = workloads(1..=8, shape, &[]);
    if counts.is_empty() {
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
        reached(&counts, &[&format!("{what} ok"), &format!("{what} failed")]);
    }
}

#[test]
fn a_store_on_a_full_tmpfs_with_its_flusher_pool_keeps_every_flushed_ack() {
    let shape = Shape {
        flusher: true,
        groups: None,
    };
    workloads(21..=23, shape, &[]);
}

/// Budgets of a few partitions and partial entries for every cursor of the store together.
const BUDGETS: [usize; 4] = [512, 1024, 1536, 2048];

/// `ack_many` groups and batch-index acks by cursors that share a small ack budget, so that
/// every group and batch ack evicts partitions and partial entries of its own or of other
/// cursors to the journal, which the full disk refuses (they stay, pinned) or takes, and loads
/// them back: each call answers as the model says, no `ack_many` with a position that is no
/// entry changes anything, every open cursor holds its model at the end of each phase, after a
/// `flush_all` that returned `Ok` nothing is pinned and the budget holds, and every image and
/// reopen keeps what an `Ok` flush covered and nothing the application did not ack.
#[test]
fn ack_many_and_batch_index_acks_under_a_small_shared_budget_on_a_full_tmpfs_keep_every_flushed_ack()
 {
    let (seeds, fixed) = seeds(31..=38);
    let shape = Shape {
        flusher: false,
        groups: Some(0),
    };
    let counts = workloads(seeds, shape, &BUDGETS);
    if counts.is_empty() || !fixed {
        return;
    }
    reached(
        &counts,
        &[
            "ack_many group",
            "ack_many refused",
            "batch ack",
            "batch ack refused",
            "batch ack completing its entry",
            "flush_all ok",
            "flush_all failed",
            "cursor flush failed",
            "phases with an eviction write refused",
            "phases with a partition pinned",
            "phases with a partition stored",
            "phases with a partition loaded",
            "phases with partial entries evicted",
            "phases with partial entries loaded",
            "phases with memory released to another cursor",
        ],
    );
}

/// The same with the store's flusher pool ticking beside the workload's own flushes: ticks
/// that meet the full disk while the workload's acks evict to the same journal.
#[test]
fn ack_many_and_batch_index_acks_under_a_small_shared_budget_with_the_flusher_pool_on_a_full_tmpfs()
{
    let (seeds, _) = seeds(41..=43);
    let shape = Shape {
        flusher: true,
        groups: Some(0),
    };
    workloads(seeds, shape, &BUDGETS);
}

//! Attacks on a topic's cursor table kept in chunk records of 512 cursors (topic record
//! version 4), through the public API, on a topic opened alone and on a store's topic: power
//! cuts at every step of creations across a chunk's edge, of a deletion inside a full chunk and
//! the creation after it, of ledger rolls of a topic of 600 cursors and of the first write of
//! a topic whose record an earlier build wrote; a failed storage operation at every step of a
//! creation that fills the tail and of a deletion that rewrites a full chunk; a former owner of
//! the store creating and deleting cursors at every step of a new owner's claim and writes;
//! threads creating and deleting cursors of 1 KiB names across chunk edges; damage to every
//! record file of the topic's table; and the record bytes and files a long churn leaves.
//!
//! Every check compares with a model: a cursor whose creation returned `Ok` is kept, one whose
//! deletion returned `Ok` stays gone, nothing else appears, a cursor holds every ack a flush
//! confirmed and none never made, and no name has two ids nor two names one id.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use ackstore::internals::format::meta::{CursorEntry, TopicRecord};
use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::{Error, MemStorage, Position, Storage};
use support::crash::{
    Points, Seen, Shown, copy_into, cut_everywhere_recorded_after, unseen_images,
};
use support::takeover;
use support::tap::{Tap, Written};
use support::topic::{Host, Hosted, config, earliest, on_each_host, open_hosted};
use support::workload::{Rng, seed_from_env};

/// Cursors in a full chunk of a topic's cursor table (`CURSOR_CHUNK_ENTRIES` of the topic
/// record's format).
const CHUNK: usize = 512;
/// Entries per data ledger: the entries a test appends roll ledgers over.
const PER_LEDGER: u64 = 4;
/// Entries every prepared topic holds, which the cursors acknowledge.
const ENTRIES: usize = 6;
/// The power-cut sweeps run the workload again with the power cut at one cut point in this
/// many (every cut point's disk is checked from the recorded run).
const RERUN_EVERY: usize = 8;

/// The name of the `i`-th cursor created.
fn cursor(i: usize) -> String {
    format!("subscription-{i:05}")
}

/// The `i`-th cursor name of 1,024 bytes.
fn long_cursor(i: usize) -> String {
    let head = format!("long-{i:06}-");
    format!("{head}{}", "n".repeat(1_024 - head.len()))
}

/// Opens the topic `host` keeps on `storage`.
fn open(host: Host, storage: &Arc<dyn Storage>) -> ackstore::Result<Hosted> {
    open_hosted(host, storage.clone(), &config(PER_LEDGER))
}

/// The files of the topic `host` keeps on `storage` (on a store, its topic `t`'s), as the
/// topic's own storage.
fn topic_files(host: Host, storage: &Arc<dyn Storage>) -> Arc<dyn Storage> {
    match host {
        Host::Alone => storage.clone(),
        Host::Store => {
            let catalog = ackstore::internals::store::read_catalog(storage.clone())
                .expect("catalog")
                .expect("a store");
            let id = catalog.topics.iter().find(|t| t.name == "t").expect("t").id;
            ackstore::internals::store::topic_storage(storage, &catalog, id)
                .expect("the topic's storage")
        }
    }
}

/// What a workload was told: the cursors that exist (their creation, or the template's,
/// returned `Ok` and no deletion did since), those whose creation or deletion failed or was
/// under way when the workload stopped (either outcome is right for them), and
/// per cursor the acks made and those an `Ok` flush confirmed (entry indexes).
#[derive(Debug, Default, Clone, PartialEq, Eq, Hash)]
struct Told {
    exist: BTreeSet<String>,
    pending: BTreeSet<String>,
    acked: BTreeMap<String, BTreeSet<usize>>,
    confirmed: BTreeMap<String, BTreeSet<usize>>,
}

impl Told {
    /// What a prepared topic of cursors `names` holds, those of `acked` with entry 0 acked and
    /// flushed.
    fn prepared(names: impl IntoIterator<Item = String>, acked: &[String]) -> Self {
        let mut told = Told {
            exist: names.into_iter().collect(),
            ..Told::default()
        };
        for name in acked {
            told.acked.insert(name.clone(), BTreeSet::from([0]));
            told.confirmed.insert(name.clone(), BTreeSet::from([0]));
        }
        told
    }
}

/// One step of a workload on a topic.
#[derive(Debug, Clone)]
enum Step {
    /// Creates the cursor (opens it: it does not exist).
    Create(String),
    /// Deletes the cursor.
    Delete(String),
    /// Acks entry `e` of the cursor and flushes it.
    AckFlush(String, usize),
    /// Appends this many entries and syncs them (each ledger rolled over rewrites the record).
    Append(usize),
    /// Deletes the data ledgers every cursor has consumed (the record rewritten without them).
    Trim,
}

/// Runs `step` on `topic` (whose first entries are `positions`), keeping `told` current
/// around every call that may reach the storage: a step that fails leaves its cursor pending.
fn run_step(
    topic: &Hosted,
    positions: &[Position],
    step: &Step,
    told: &Shown<Told>,
) -> ackstore::Result<()> {
    match step {
        Step::Create(name) => {
            told.update(|t| t.pending.insert(name.clone()));
            drop(topic.open_cursor(name, earliest())?);
            told.update(|t| {
                t.pending.remove(name);
                t.exist.insert(name.clone());
                // A new cursor acknowledges nothing, whatever a cursor of its name did before.
                t.acked.insert(name.clone(), BTreeSet::new());
                t.confirmed.insert(name.clone(), BTreeSet::new());
            });
        }
        Step::Delete(name) => {
            told.update(|t| t.pending.insert(name.clone()));
            topic.delete_cursor(name)?;
            told.update(|t| {
                t.pending.remove(name);
                t.exist.remove(name);
                t.acked.remove(name);
                t.confirmed.remove(name);
            });
        }
        Step::AckFlush(name, e) => {
            let c = topic.open_cursor(name, earliest())?;
            told.update(|t| t.acked.entry(name.clone()).or_default().insert(*e));
            c.ack(positions[*e])?;
            c.flush()?;
            told.update(|t| {
                let acked = t.acked[name].clone();
                t.confirmed.insert(name.clone(), acked);
            });
        }
        Step::Append(n) => {
            for _ in 0..*n {
                topic.append(b"more")?;
            }
            topic.sync()?;
        }
        Step::Trim => drop(topic.trim_consumed()?),
    }
    Ok(())
}

/// Runs `steps` on `topic`, keeping `told` current, then closes it; stops at the first error.
fn run_shown(
    topic: ackstore::Result<Hosted>,
    positions: &[Position],
    steps: &[Step],
    told: &Shown<Told>,
) -> ackstore::Result<()> {
    let topic = topic?;
    for step in steps {
        run_step(&topic, positions, step, told)?;
    }
    topic.close()
}

/// Runs `steps` from `told` on `topic`, then closes it; stops at the first error. Returns the
/// outcome and what the workload was told.
fn run_steps(
    topic: ackstore::Result<Hosted>,
    positions: &[Position],
    steps: &[Step],
    told: Told,
) -> (ackstore::Result<()>, Told) {
    let told = Shown::new(told);
    (run_shown(topic, positions, steps, &told), told.get())
}

/// Every cursor of the topic record of the topic `host` keeps on `storage` (its chunks read
/// from the chunk records it pins), name and id, in the table's order.
fn table_of(host: Host, storage: &Arc<dyn Storage>) -> Vec<(String, u64)> {
    let meta = FileMetaStore::new(topic_files(host, storage));
    let (_, bytes) = meta.get("topic").expect("get").expect("a topic record");
    let mut record = TopicRecord::decode(&bytes).expect("the topic record decodes");
    let pinned: Vec<(usize, String)> = record
        .cursors
        .pinned_records()
        .enumerate()
        .filter_map(|(k, name)| Some((k, name?)))
        .collect();
    for (k, name) in pinned {
        let (_, chunk) = meta.get(&name).expect("get").expect("a pinned chunk");
        record
            .cursors
            .add_chunk(k, &chunk)
            .expect("the chunk matches its pin");
    }
    record
        .cursors
        .iter()
        .map(|e| (e.name.to_string(), e.id))
        .collect()
}

/// The topic record of the closed topic on `storage` lists exactly `names`, each once, and no
/// two of them share an id.
fn one_id_per_name(host: Host, storage: &Arc<dyn Storage>, names: &BTreeSet<String>, what: &str) {
    let table = table_of(host, storage);
    let listed: BTreeSet<&String> = table.iter().map(|(n, _)| n).collect();
    assert_eq!(listed.len(), table.len(), "{what}: a name listed twice");
    let ids: BTreeSet<u64> = table.iter().map(|&(_, id)| id).collect();
    assert_eq!(ids.len(), table.len(), "{what}: two cursors share an id");
    assert_eq!(
        listed,
        names.iter().collect(),
        "{what}: the record and the open disagree"
    );
}

/// Opens the topic `host` keeps on `storage` and checks it against `told`: every existing
/// cursor is there, no deleted one, nothing else (the pending ones either way); every cursor
/// holds every confirmed ack and none not made; then, closed, its record lists each name once
/// with ids unique.
fn holds_what_was_told(
    host: Host,
    storage: &Arc<dyn Storage>,
    positions: &[Position],
    told: &Told,
    what: &str,
) {
    let topic = open(host, storage).unwrap_or_else(|e| panic!("{what}: open: {e}"));
    let names: BTreeSet<String> = topic.cursor_names().into_iter().collect();
    let missing: Vec<&String> = told
        .exist
        .iter()
        .filter(|n| !names.contains(*n) && !told.pending.contains(*n))
        .collect();
    assert!(missing.is_empty(), "{what}: cursors lost: {missing:?}");
    let extra: Vec<&String> = names
        .iter()
        .filter(|n| !told.exist.contains(*n) && !told.pending.contains(*n))
        .collect();
    assert!(
        extra.is_empty(),
        "{what}: cursors never made or deleted: {extra:?}"
    );
    for (name, acked) in &told.acked {
        if !names.contains(name) {
            continue;
        }
        let c = topic
            .open_cursor(name, earliest())
            .unwrap_or_else(|e| panic!("{what}: cursor {name}: {e}"));
        let kept: BTreeSet<usize> = (0..positions.len())
            .filter(|&e| c.is_acked(positions[e]).expect("is_acked"))
            .collect();
        let confirmed = told.confirmed.get(name).cloned().unwrap_or_default();
        assert!(
            kept.is_superset(&confirmed),
            "{what}: {name} lost a flushed ack: {kept:?} {confirmed:?}"
        );
        assert!(
            kept.is_subset(acked),
            "{what}: {name} holds an ack never made: {kept:?} {acked:?}"
        );
    }
    topic
        .close()
        .unwrap_or_else(|e| panic!("{what}: close: {e}"));
    one_id_per_name(host, storage, &names, what);
}

/// A closed topic `host` keeps on a fresh disk: [`ENTRIES`] synced entries and the cursors
/// `names`, those at `acked` (indexes into `names`) holding entry 0 acked and flushed. Returns
/// the disk, the entries' positions and what the topic was told.
fn topic_of(host: Host, names: &[String], acked: &[usize]) -> (MemStorage, Vec<Position>, Told) {
    let disk = MemStorage::new();
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let topic = open(host, &storage).expect("open");
    let positions: Vec<Position> = (0..ENTRIES)
        .map(|e| topic.append(format!("e{e}").as_bytes()).expect("append"))
        .collect();
    topic.sync().expect("sync");
    for (i, name) in names.iter().enumerate() {
        let c = topic.open_cursor(name, earliest()).expect("create");
        if acked.contains(&i) {
            c.ack(positions[0]).expect("ack");
            c.flush().expect("flush");
        }
    }
    topic.close().expect("close");
    let acked: Vec<String> = acked.iter().map(|&i| names[i].clone()).collect();
    let told = Told::prepared(names.iter().cloned(), &acked);
    (disk, positions, told)
}

/// [`topic_of`] the cursors `cursor(0..count)`.
fn topic_of_cursors(
    host: Host,
    count: usize,
    acked: &[usize],
) -> (MemStorage, Vec<Position>, Told) {
    let names: Vec<String> = (0..count).map(cursor).collect();
    topic_of(host, &names, acked)
}

/// A power cut at every storage step of `steps` and of the close after them, run on the topic
/// opened on a copy of `template` (which holds `positions` and what `told` says; the open is
/// not cut): both images a cut leaves are sound by `verify` and open holding what the workload
/// was told. The cut disks come from one recorded run, checked against what the workload was
/// told when the power went off; at one cut point in [`RERUN_EVERY`] the workload runs again
/// with the power cut there, so what it is told once the disk fails is checked too. An image
/// met before with the same told state is not opened again. Returns the storage operations
/// cut at.
fn cut_at_every_step(
    host: Host,
    (template, positions, told): &(MemStorage, Vec<Position>, Told),
    steps: &[Step],
) -> u64 {
    let seed = seed_from_env("ACKSTORE_CRASH_SEED");
    let mut seen = Seen::new();
    let clean = cut_everywhere_recorded_after(
        Points::one_in(RERUN_EVERY, seed),
        |disk, storage| {
            copy_into(template, disk);
            open(host, &storage)
        },
        |topic, shown| {
            shown.update(|t| *t = told.clone());
            let outcome = run_shown(topic, positions, steps, shown);
            (outcome, shown.get())
        },
        |disk, cut, told| {
            let what = format!("{host:?} {cut:?} (ACKSTORE_CRASH_SEED={seed})");
            for image in unseen_images(&mut seen, disk, cut, told) {
                holds_what_was_told(host, &image, positions, told, &what);
            }
        },
    );
    clean.result.0.expect("the workload without a cut");
    assert!(clean.result.1.pending.is_empty());
    clean.total
}

/// A power cut at every step of the creations of the 512th cursor (it fills the tail, which
/// becomes a chunk) and the 513th (the first of the next tail), with acks flushed between:
/// every `Ok` creation and every flushed ack kept, nothing invented, ids unique.
#[test]
fn a_power_cut_at_every_step_of_creating_cursors_512_and_513_keeps_every_ok_cursor_and_ack() {
    on_each_host(|host| {
        let prepared = topic_of_cursors(host, CHUNK - 1, &[0, CHUNK - 2]);
        cut_at_every_step(
            host,
            &prepared,
            &[
                Step::Create(cursor(CHUNK - 1)),
                Step::AckFlush(cursor(0), 1),
                Step::Create(cursor(CHUNK)),
                Step::AckFlush(cursor(CHUNK - 1), 2),
            ],
        );
    });
}

/// A power cut at every step of the creation of the 1,025th cursor (two full chunks, the
/// first of a third tail) and of acks flushed after it.
#[test]
fn a_power_cut_at_every_step_of_creating_cursor_1025_keeps_every_ok_cursor_and_ack() {
    on_each_host(|host| {
        let prepared = topic_of_cursors(host, 2 * CHUNK, &[0, CHUNK + 88, 2 * CHUNK - 1]);
        cut_at_every_step(
            host,
            &prepared,
            &[
                Step::Create(cursor(2 * CHUNK)),
                Step::AckFlush(cursor(2 * CHUNK), 1),
                Step::AckFlush(cursor(CHUNK + 88), 2),
            ],
        );
    });
}

/// A power cut at every step of the deletion of a cursor inside the first full chunk of a
/// topic of 600 cursors (the chunk written again), of a creation after it, of the creation of
/// a cursor of the deleted one's name (a new cursor: none of the old one's acks), of deletions
/// of tail cursors and of another creation: a deletion that answered stays deleted, every
/// `Ok` creation and flushed ack kept.
#[test]
fn a_power_cut_at_every_step_of_a_deletion_inside_a_full_chunk_and_creations_after_it_keeps_what_was_told()
 {
    on_each_host(|host| {
        let prepared = topic_of_cursors(host, 600, &[0, 100, 599]);
        cut_at_every_step(
            host,
            &prepared,
            &[
                Step::Delete(cursor(100)),
                Step::AckFlush(cursor(0), 1),
                Step::Create(cursor(600)),
                Step::Create(cursor(100)),
                Step::Delete(cursor(599)),
                Step::Delete(cursor(511)),
                Step::Create(cursor(601)),
                Step::AckFlush(cursor(600), 2),
            ],
        );
    });
}

/// A power cut at every step of appends that roll data ledgers over (each roll rewrites the
/// topic record, its pins with it) on a topic of 600 cursors, acks flushed between.
#[test]
fn a_power_cut_at_every_step_of_ledger_rolls_on_600_cursors_keeps_every_cursor_and_ack() {
    on_each_host(|host| {
        let prepared = topic_of_cursors(host, 600, &[0, 300, 599]);
        cut_at_every_step(
            host,
            &prepared,
            &[
                Step::Append(2 * PER_LEDGER as usize),
                Step::AckFlush(cursor(300), 1),
                Step::Append(PER_LEDGER as usize),
                Step::AckFlush(cursor(599), 2),
            ],
        );
    });
}

/// Runs `steps` with the power on on the closed topic `host` keeps in `prepared`, which then
/// holds what they did.
fn prepare_further(host: Host, prepared: &mut (MemStorage, Vec<Position>, Told), steps: &[Step]) {
    let storage: Arc<dyn Storage> = Arc::new(prepared.0.clone());
    let (outcome, told) = run_steps(open(host, &storage), &prepared.1, steps, prepared.2.clone());
    outcome.expect("the preparing steps");
    prepared.2 = told;
}

/// A power cut at every step of the deletion that empties the first of two full chunks (its
/// last cursor), of a creation after it, and then, on the table whose tail has refilled to one
/// short of a chunk, of the creation that fills the tail into the emptied chunk's place: every
/// `Ok` kept, the deleted cursors gone, the flushed acks kept.
#[test]
fn a_power_cut_at_every_step_of_emptying_a_chunk_and_of_filling_the_tail_into_its_place_keeps_what_was_told()
 {
    on_each_host(|host| {
        let mut prepared = topic_of_cursors(host, 2 * CHUNK, &[0, CHUNK, 2 * CHUNK - 1]);
        let emptying: Vec<Step> = (0..CHUNK - 1).map(|i| Step::Delete(cursor(i))).collect();
        prepare_further(host, &mut prepared, &emptying);
        cut_at_every_step(
            host,
            &prepared,
            &[
                Step::Delete(cursor(CHUNK - 1)),
                Step::Create(cursor(2 * CHUNK)),
                Step::AckFlush(cursor(CHUNK), 1),
            ],
        );
        let refilling: Vec<Step> = std::iter::once(Step::Delete(cursor(CHUNK - 1)))
            .chain((2 * CHUNK..3 * CHUNK - 1).map(|i| Step::Create(cursor(i))))
            .collect();
        prepare_further(host, &mut prepared, &refilling);
        cut_at_every_step(
            host,
            &prepared,
            &[
                Step::Create(cursor(3 * CHUNK - 1)),
                Step::AckFlush(cursor(2 * CHUNK - 1), 1),
                Step::Create(cursor(3 * CHUNK)),
                Step::Delete(cursor(CHUNK + 1)),
            ],
        );
    });
}

/// A power cut at every step of a trim of a topic of 600 cursors that all consumed its first
/// data ledger (the record rewritten without it, its pins with it), of an ack and a roll
/// after it: every cursor kept, and the acks of the cursors checked (one per chunk and the
/// tail's last) kept and none invented.
#[test]
fn a_power_cut_at_every_step_of_a_trim_of_a_600_cursor_topic_keeps_every_cursor_and_ack() {
    on_each_host(|host| {
        let (disk, positions, mut told) = topic_of_cursors(host, 600, &[]);
        {
            let storage: Arc<dyn Storage> = Arc::new(disk.clone());
            let topic = open(host, &storage).expect("open");
            for i in 0..600 {
                let c = topic.open_cursor(&cursor(i), earliest()).expect("cursor");
                for &p in &positions[..PER_LEDGER as usize] {
                    c.ack(p).expect("ack");
                }
                c.flush().expect("flush");
            }
            topic.close().expect("close");
        }
        {
            // The trim has a ledger to delete.
            let copy: Arc<dyn Storage> = Arc::new(disk.durable_image());
            let topic = open(host, &copy).expect("open");
            assert!(!topic.trim_consumed().expect("trim").is_empty(), "{host:?}");
        }
        // Each of these is checked after every cut; the others are only listed.
        for i in [0, CHUNK, 599] {
            let through: BTreeSet<usize> = (0..PER_LEDGER as usize).collect();
            told.acked.insert(cursor(i), through.clone());
            told.confirmed.insert(cursor(i), through);
        }
        cut_at_every_step(
            host,
            &(disk, positions, told),
            &[
                Step::Trim,
                Step::AckFlush(cursor(CHUNK), PER_LEDGER as usize),
                Step::Append(PER_LEDGER as usize),
            ],
        );
    });
}

/// Rewrites the topic record of the closed topic `host` keeps on `disk` as an earlier build
/// wrote it (every cursor inline, the version of its host) and removes its chunk records.
fn as_earlier_format(host: Host, disk: &MemStorage) {
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let files = topic_files(host, &storage);
    let meta = FileMetaStore::new(files.clone());
    let (version, bytes) = meta.get("topic").expect("get").expect("a topic record");
    let mut record = TopicRecord::decode(&bytes).expect("decode");
    let entries: Vec<CursorEntry> = table_of(host, &storage)
        .into_iter()
        .map(|(name, id)| CursorEntry {
            name: name.into(),
            id,
        })
        .collect();
    record.cursors = entries.into();
    meta.put("topic", Some(version), &record.encode())
        .expect("write the earlier record");
    for file in files.list_prefix("topic-cursors-").expect("list") {
        files.remove(&file).expect("remove");
    }
    files.sync_dir().expect("sync dir");
}

/// A power cut at every step of the first writes (a creation, a deletion) of a topic of 600
/// cursors whose record an earlier build wrote (every cursor inline): the first write moves
/// full chunks out; every cursor, `Ok` and flushed ack kept.
#[test]
fn a_power_cut_at_every_step_of_the_first_writes_of_a_600_cursor_topic_of_the_earlier_format_keeps_every_cursor()
 {
    on_each_host(|host| {
        let prepared = topic_of_cursors(host, 600, &[0, 599]);
        as_earlier_format(host, &prepared.0);
        let storage: Arc<dyn Storage> = Arc::new(prepared.0.durable_image());
        holds_what_was_told(host, &storage, &prepared.1, &prepared.2, "earlier format");
        cut_at_every_step(
            host,
            &prepared,
            &[
                Step::Create(cursor(600)),
                Step::AckFlush(cursor(0), 1),
                Step::Delete(cursor(5)),
                Step::AckFlush(cursor(599), 2),
            ],
        );
    });
}

/// `step` on a copy of `prepared` whose `k`-th storage operation fails, for every `k`, then
/// the steps `after` from the same handle
/// ([`support::topic::later_steps_after_a_failed_operation`]): the reopened topic holds what
/// the workload was told.
fn later_steps_after_a_failed_operation_of(
    host: Host,
    (template, positions, told): &(MemStorage, Vec<Position>, Told),
    step: &Step,
    after: &[Step],
) {
    support::topic::later_steps_after_a_failed_operation(
        (host, template, &config(PER_LEDGER)),
        told,
        (step, after),
        |topic, step, told| run_step(topic, positions, step, told),
        |image, told, what| holds_what_was_told(host, image, positions, told, what),
    );
}

/// A failed storage operation at every step of the creation that fills the tail (its chunk
/// record written, then the record pinning it): the next creations and deletions from the
/// same handle succeed, a leftover of the failed attempt blocking none of them.
#[test]
fn a_failed_operation_of_a_creation_that_fills_the_tail_leaves_later_creations_and_deletions_working()
 {
    on_each_host(|host| {
        let prepared = topic_of_cursors(host, CHUNK - 1, &[0]);
        later_steps_after_a_failed_operation_of(
            host,
            &prepared,
            &Step::Create(cursor(CHUNK - 1)),
            &[
                Step::Create(cursor(CHUNK)),
                Step::Delete(cursor(3)),
                Step::Create(cursor(CHUNK + 1)),
                Step::AckFlush(cursor(0), 1),
            ],
        );
    });
}

/// A failed storage operation at every step of a deletion inside a full chunk (the chunk
/// written again, then the record pinning it): the next creations and deletions from the same
/// handle succeed.
#[test]
fn a_failed_operation_of_a_deletion_inside_a_full_chunk_leaves_later_creations_and_deletions_working()
 {
    on_each_host(|host| {
        let prepared = topic_of_cursors(host, 600, &[0]);
        later_steps_after_a_failed_operation_of(
            host,
            &prepared,
            &Step::Delete(cursor(100)),
            &[
                Step::Create(cursor(600)),
                Step::Delete(cursor(200)),
                Step::Create(cursor(601)),
                Step::AckFlush(cursor(0), 1),
            ],
        );
    });
}

/// A former owner (of the store, or of a topic alone) creates a cursor and deletes another of
/// a topic of 600 cursors at every storage operation of a new owner's claim, creation,
/// deletion and creation: the new owner's calls succeed (a topic alone's claim once it is
/// tried again), the former's are kept when they
/// returned `Ok` or refused as fenced, and the topic lists each name once with ids unique,
/// after a reopen too.
#[test]
fn a_former_owner_creating_and_deleting_cursors_at_every_step_of_a_new_owners_writes_loses_no_ok() {
    on_each_host(|host| {
        let (template, _, base) = topic_of_cursors(host, 600, &[]);
        let new_owner = |storage: Arc<dyn Storage>| -> (Hosted, Vec<ackstore::Result<()>>) {
            // A topic alone's claim is one compare-and-set of its record: a former owner's
            // write landing during it refuses it as `Fenced`, and the open is tried again (as
            // a broker would). A store's claim of its topic never is.
            let topic = match open(host, &storage) {
                Err(Error::Fenced { .. }) if host == Host::Alone => open(host, &storage),
                claimed => claimed,
            };
            let topic = topic.expect("the new owner claims the topic");
            let made = vec![
                topic.open_cursor("new-a", earliest()).map(drop),
                topic.delete_cursor(&cursor(200)),
                topic.open_cursor("new-b", earliest()).map(drop),
            ];
            (topic, made)
        };
        let steps = takeover::operations_on_a_copy(&template, new_owner);
        // A topic alone's open reads each cursor's files after its claim (thousands of
        // operations at 600 cursors): there every 250th, every one of its first 60 (the
        // claim) and of the three calls after it. A store's open is visited at every step.
        let opening = takeover::operations_on_a_copy(&template, |storage| open(host, &storage));
        let visited = |n: &u64| {
            host == Host::Store || *n <= 60 || *n + 20 >= opening || n.is_multiple_of(250)
        };
        let (mut kept, mut refused) = (0, 0);
        for n in (1..=steps)
            .filter(visited)
            .step_by(if cfg!(debug_assertions) { 7 } else { 1 })
        {
            let what = format!("{host:?} step {n} of {steps}");
            let (disk, former, (new, made), (created, deleted)) =
                support::topic::former_at_step_of_new_owner(
                    (host, &template, &config(PER_LEDGER)),
                    n,
                    |topic| {
                        (
                            topic.open_cursor("former", earliest()).map(drop),
                            topic.delete_cursor(&cursor(100)),
                        )
                    },
                    new_owner,
                );
            for (call, outcome) in [("creation", &created), ("deletion", &deleted)] {
                assert!(
                    matches!(outcome, Ok(()) | Err(Error::Fenced { .. })),
                    "{what}: the former's {call}: {outcome:?}"
                );
            }
            for m in &made {
                assert!(m.is_ok(), "{what}: the new owner's call: {m:?}");
            }
            let names: BTreeSet<String> = new.cursor_names().into_iter().collect();
            let mut truth = base.exist.clone();
            truth.remove(&cursor(200));
            truth.extend(["new-a".to_string(), "new-b".to_string()]);
            // The former's calls are kept when they answered `Ok`, and may have taken when
            // refused (their write landed as the claim read).
            let mut either = BTreeSet::new();
            if created.is_ok() {
                truth.insert("former".into());
            } else {
                either.insert("former".to_string());
            }
            if deleted.is_ok() {
                truth.remove(&cursor(100));
            } else {
                either.insert(cursor(100));
            }
            let differ: Vec<&String> = names.symmetric_difference(&truth).collect();
            assert!(
                differ.iter().all(|n| either.contains(*n)),
                "{what}: the cursors differ from the model by {differ:?}"
            );
            if created.is_ok() || deleted.is_ok() {
                kept += 1;
            }
            if created.is_err() && deleted.is_err() {
                refused += 1;
            }
            new.close().expect("close");
            drop(former);
            let image: Arc<dyn Storage> = Arc::new(disk.durable_image());
            let report = ackstore::check::verify(&image).expect("verify");
            assert!(report.is_sound(), "{what}: {report}");
            let reopened = open(host, &image).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
            let again: BTreeSet<String> = reopened.cursor_names().into_iter().collect();
            assert_eq!(again, names, "{what}: after a reopen");
            reopened.close().expect("close");
            one_id_per_name(host, &image, &names, &what);
        }
        assert!(
            kept > 0 && refused > 0,
            "{host:?}: {kept} steps kept a former's call, {refused} refused both"
        );
    });
}

/// Cursors of every chunk and of the tail, looked up (the name index built), deleted, looked
/// up by other names, created again and acknowledged, on one handle: each lookup answers the
/// current cursor of its name, so the new cursor holds its own ack and none of the deleted
/// one's, on that handle and after a reopen.
#[test]
fn lookups_after_deletions_and_creations_again_in_every_chunk_answer_the_current_cursor() {
    on_each_host(|host| {
        let count = 2 * CHUNK + 76;
        let (disk, positions, told) = topic_of_cursors(host, count, &[]);
        let picks = [
            5,
            300,
            CHUNK - 1,
            CHUNK,
            800,
            2 * CHUNK - 1,
            2 * CHUNK,
            count - 1,
        ];
        let mut steps = Vec::new();
        for &p in &picks {
            steps.extend([
                Step::AckFlush(cursor(p), 1),
                Step::AckFlush(cursor((p + 7) % count), 1),
                Step::Delete(cursor(p)),
                Step::AckFlush(cursor((p + 13) % count), 2),
                Step::Create(cursor(p)),
                Step::AckFlush(cursor(p), 2),
            ]);
        }
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        let topic = open(host, &storage).expect("open");
        let told = Shown::new(told);
        for step in &steps {
            run_step(&topic, &positions, step, &told)
                .unwrap_or_else(|e| panic!("{host:?} {step:?}: {e}"));
        }
        for &p in &picks {
            let c = topic.open_cursor(&cursor(p), earliest()).expect("cursor");
            let acked = (
                c.is_acked(positions[1]).expect("is_acked"),
                c.is_acked(positions[2]).expect("is_acked"),
            );
            assert_eq!(
                acked,
                (false, true),
                "{host:?}: cursor {p} created again: (the deleted one's ack, its own)"
            );
        }
        topic.close().expect("close");
        let report = ackstore::check::verify(&storage).expect("verify");
        assert!(report.is_sound(), "{report}");
        holds_what_was_told(
            host,
            &storage,
            &positions,
            &told.get(),
            &format!("{host:?}"),
        );
    });
}

/// Eight threads create and delete cursors of 1,024-byte names on one topic at once, from 500
/// cursors up across the first chunk's edge and back (each its own names, and every thread
/// opening the same shared names): each call answers `Ok`, and the topic holds exactly what
/// the model says, after a reopen too, with ids unique.
#[test]
fn eight_threads_creating_and_deleting_cursors_of_1024_byte_names_across_chunk_edges_match_the_model()
 {
    on_each_host(|host| {
        let base: Vec<String> = (0..500).map(long_cursor).collect();
        let (disk, _, told) = topic_of(host, &base, &[]);
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        let topic = Arc::new(open(host, &storage).expect("open"));
        let shared: Vec<String> = (0..16).map(|i| format!("shared-{i}")).collect();
        let start = Arc::new(Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (topic, base, shared, start) =
                    (topic.clone(), base.clone(), shared.clone(), start.clone());
                std::thread::spawn(move || {
                    let (mut made, mut gone) = (BTreeSet::new(), BTreeSet::new());
                    start.wait();
                    for k in 0..80 {
                        let own = long_cursor(10_000 + t * 100 + k);
                        drop(topic.open_cursor(&own, earliest()).expect("create"));
                        made.insert(own);
                        if k % 5 == 4 {
                            let older = long_cursor(10_000 + t * 100 + k - 2);
                            topic.delete_cursor(&older).expect("delete own");
                            made.remove(&older);
                        }
                        if k % 5 == 0 {
                            // Thread t deletes base cursors t, t + 8, ...: 16 of them.
                            let old = &base[t + 8 * (k / 5)];
                            topic.delete_cursor(old).expect("delete base");
                            gone.insert(old.clone());
                        }
                        if k % 10 == t % 10 {
                            let name = &shared[(k + t) % shared.len()];
                            drop(topic.open_cursor(name, earliest()).expect("shared"));
                        }
                    }
                    for name in &shared {
                        drop(topic.open_cursor(name, earliest()).expect("shared"));
                    }
                    (made, gone)
                })
            })
            .collect();
        let mut model = told.exist.clone();
        model.extend(shared.iter().cloned());
        for thread in threads {
            let (made, gone) = thread.join().expect("thread");
            model.extend(made);
            for name in gone {
                model.remove(&name);
            }
        }
        let names: BTreeSet<String> = topic.cursor_names().into_iter().collect();
        assert_eq!(names.len(), model.len());
        assert!(
            names == model,
            "{host:?}: the cursors differ from the model"
        );
        Arc::try_unwrap(topic)
            .unwrap_or_else(|_| panic!("a thread kept the topic"))
            .close()
            .expect("close");
        let report = ackstore::check::verify(&storage).expect("verify");
        assert!(report.is_sound(), "{report}");
        let reopened = open(host, &storage).expect("reopen");
        let again: BTreeSet<String> = reopened.cursor_names().into_iter().collect();
        assert!(
            again == model,
            "{host:?}: after a reopen, the cursors differ"
        );
        reopened.close().expect("close");
        one_id_per_name(host, &storage, &model, &format!("{host:?}"));
    });
}

/// A copy of `disk` whose topic file `file` (named as the topic's own storage names it) is
/// `damage` (`None`: deleted), durable.
fn damaged_copy(
    host: Host,
    disk: &MemStorage,
    file: &str,
    damage: Option<&[u8]>,
) -> Arc<dyn Storage> {
    let copy: Arc<dyn Storage> = Arc::new(disk.durable_image());
    let files = topic_files(host, &copy);
    files.remove(file).expect("remove");
    if let Some(bytes) = damage {
        let f = files.create(file).expect("create");
        f.write_all_at(bytes, 0).expect("write");
        f.sync_data().expect("sync");
    }
    files.sync_dir().expect("sync dir");
    copy
}

/// The bytes of file `file` of the topic's files.
fn bytes_of(files: &Arc<dyn Storage>, file: &str) -> Vec<u8> {
    let f = files.open(file).expect("open");
    let mut bytes = vec![0; usize::try_from(f.size().expect("size")).expect("fits")];
    f.read_exact_at(&mut bytes, 0).expect("read");
    bytes
}

/// The record files of the topic's cursor table (the topic record and its chunk records,
/// named `topic...`), with their bytes.
fn table_files(host: Host, disk: &MemStorage) -> BTreeMap<String, Vec<u8>> {
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let files = topic_files(host, &storage);
    files
        .list()
        .expect("list")
        .into_iter()
        .filter(|f| f.starts_with("topic"))
        .map(|f| {
            let bytes = bytes_of(&files, &f);
            (f, bytes)
        })
        .collect()
}

/// The name a record file belongs to with its version and chunk index stripped: the topic
/// record's versions share one, as do the versions of one chunk.
fn family(file: &str) -> String {
    let record = file.split_once('.').map_or(file, |(r, _)| r);
    record
        .trim_end_matches(|c: char| c.is_ascii_digit())
        .to_owned()
}

/// Damage to each record file of a topic's cursor table of 1,029 cursors (two full chunks,
/// the first written again by a deletion): deleted, truncated, zeroed, a bit flipped, replaced
/// by its copy from before the deletion or by a sibling's bytes. `verify` and the open agree
/// (neither panics): refused by both, or accepted by both holding every cursor, no deleted
/// one back and no ack beyond the flushed ones.
#[test]
fn damage_to_every_record_of_the_cursor_table_is_refused_by_verify_and_the_open_alike_or_loses_nothing()
 {
    on_each_host(|host| {
        let (disk, positions, mut told) =
            topic_of_cursors(host, 2 * CHUNK + 5, &[0, 700, 2 * CHUNK + 4]);
        let older = table_files(host, &disk);
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        let (outcome, after) = run_steps(
            open(host, &storage),
            &positions,
            &[
                Step::Delete(cursor(100)),
                Step::Delete(cursor(CHUNK + 3)),
                Step::AckFlush(cursor(700), 1),
            ],
            told.clone(),
        );
        outcome.expect("the deletions");
        told = after;
        let current = table_files(host, &disk);
        let mut targets: Vec<(String, String, Option<Vec<u8>>)> = Vec::new();
        for (file, whole) in &current {
            for (what, damage) in support::mutate::damages(whole) {
                targets.push((what, file.clone(), damage));
            }
            for (old, bytes) in &older {
                if family(old) == family(file) && bytes != whole {
                    targets.push((
                        format!("older copy {old}"),
                        file.clone(),
                        Some(bytes.clone()),
                    ));
                }
            }
            for (sibling, bytes) in &current {
                if sibling != file && bytes != whole {
                    targets.push((
                        format!("sibling {sibling}"),
                        file.clone(),
                        Some(bytes.clone()),
                    ));
                }
            }
        }
        let mut missed = Vec::new();
        for (what, file, damage) in targets {
            let image = damaged_copy(host, &disk, &file, damage.as_deref());
            let report = ackstore::check::verify(&image);
            let reported = report.as_ref().map_or(true, |r| !r.is_sound());
            let problem = match open(host, &image) {
                Err(e) if !reported => Some(format!("open refused ({e}), verify found it sound")),
                Err(_) => None,
                Ok(topic) if reported => {
                    let n = topic.cursor_names().len();
                    drop(topic);
                    Some(format!(
                        "open accepted it with {n} cursors, verify reported damage"
                    ))
                }
                Ok(topic) => {
                    let found = loses_nothing(&topic, &positions, &told);
                    drop(topic);
                    found
                }
            };
            if let Some(problem) = problem {
                let report = report.map_or_else(|e| e.to_string(), |r| r.to_string());
                missed.push(format!("{host:?} {what} {file}: {problem}\n{report}"));
            }
        }
        assert!(missed.is_empty(), "{}", missed.join("\n"));
    });
}

/// What is wrong with the open `topic` against `told` (every cursor there, no other, no ack
/// beyond the made ones, every flushed one kept), `None` when nothing is.
fn loses_nothing(topic: &Hosted, positions: &[Position], told: &Told) -> Option<String> {
    let names: BTreeSet<String> = topic.cursor_names().into_iter().collect();
    if names != told.exist {
        let differ: Vec<&String> = names.symmetric_difference(&told.exist).take(5).collect();
        return Some(format!("the cursors differ by {differ:?}"));
    }
    for (name, acked) in &told.acked {
        let kept: BTreeSet<usize> = match topic.open_cursor(name, earliest()) {
            Ok(c) => (0..positions.len())
                .filter(|&e| c.is_acked(positions[e]).unwrap_or(false))
                .collect(),
            Err(e) => return Some(format!("cursor {name}: {e}")),
        };
        let confirmed = told.confirmed.get(name).cloned().unwrap_or_default();
        if !kept.is_subset(acked) || !kept.is_superset(&confirmed) {
            return Some(format!("{name} holds {kept:?}, made {acked:?}"));
        }
    }
    None
}

/// Whether storage name `name` is a file of the topic record or of its chunk records (named
/// `topic...`; a store's topic files are `t{id}/...` or `t{id}-...`).
fn is_table_file(name: &str) -> bool {
    let own = name
        .strip_prefix('t')
        .map(|rest| rest.trim_start_matches(|c: char| c.is_ascii_digit()))
        .and_then(|rest| rest.strip_prefix('/').or_else(|| rest.strip_prefix('-')))
        .unwrap_or(name);
    own.starts_with("topic") || name.starts_with("topic")
}

/// 3,000 operations alternating a creation and the deletion of a cursor picked at random on a
/// topic held at 600 cursors: the record bytes an operation writes do not grow (the last
/// thousand operations write at most 10% more than the first thousand, none more than the
/// dearest of the first thousand), the topic's files do not pile up (leftovers removed), and
/// the reopened topic holds exactly the model's cursors.
#[test]
fn churn_around_600_cursors_keeps_record_bytes_and_files_bounded_and_reopens_to_the_model() {
    on_each_host(|host| {
        let disk = MemStorage::new();
        let written = Arc::new(Written(AtomicU64::new(0), Some(is_table_file)));
        let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk.clone()), written.clone()));
        let topic = open(host, &storage).expect("open");
        let mut model: Vec<String> = (0..600).map(cursor).collect();
        for name in &model {
            drop(topic.open_cursor(name, earliest()).expect("create"));
        }
        let files = topic_files(host, &(Arc::new(disk.clone()) as Arc<dyn Storage>));
        let mut rng = Rng::new(0x0c75_7ab1e);
        let (mut per_op, mut file_counts) = (Vec::new(), Vec::new());
        for k in 0..3_000 {
            let at = written.0.load(Ordering::SeqCst);
            if k % 2 == 0 {
                let name = cursor(600 + k);
                drop(topic.open_cursor(&name, earliest()).expect("create"));
                model.push(name);
            } else {
                let name = model.swap_remove(rng.index(model.len()));
                topic.delete_cursor(&name).expect("delete");
            }
            per_op.push(written.0.load(Ordering::SeqCst) - at);
            // Files past one per cursor: the records of the table and the journal's.
            let files_now = files.list().expect("list").len();
            file_counts.push(files_now.saturating_sub(model.len()));
        }
        let (early, late) = (&per_op[..1_000], &per_op[2_000..]);
        let (sum_early, sum_late) = (early.iter().sum::<u64>(), late.iter().sum::<u64>());
        let max_early = *early.iter().max().expect("some");
        let max_late = *late.iter().max().expect("some");
        assert!(sum_early > 0);
        assert!(
            sum_late * 10 <= sum_early * 11,
            "{host:?}: record bytes of 1,000 operations: {sum_early} first, {sum_late} last"
        );
        assert!(
            max_late <= max_early,
            "{host:?}: the dearest operation: {max_early} bytes first, {max_late} last"
        );
        // A table fragmented by deletions spread over its chunks keeps a record per chunk
        // holding a cursor: a few more than a table of 600 cursors filled in order, never one
        // per operation as leftovers would pile up.
        let extra_at_start = file_counts[0];
        let extra_most = *file_counts.iter().max().expect("some");
        assert!(
            extra_most <= extra_at_start + 12,
            "{host:?}: files past one per cursor: {extra_at_start} first, up to {extra_most}"
        );
        topic.close().expect("close");
        let model: BTreeSet<String> = model.into_iter().collect();
        let plain: Arc<dyn Storage> = Arc::new(disk.clone());
        let report = ackstore::check::verify(&plain).expect("verify");
        assert!(report.is_sound(), "{report}");
        // Nothing left over once the handle closed: the open has nothing to remove.
        assert!(report.unused.is_empty(), "{host:?}: {report}");
        let reopened = open(host, &plain).expect("reopen");
        let names: BTreeSet<String> = reopened.cursor_names().into_iter().collect();
        assert!(
            names == model,
            "{host:?}: the reopened cursors differ from the model"
        );
        reopened.close().expect("close");
        one_id_per_name(host, &plain, &model, &format!("{host:?}"));
    });
}

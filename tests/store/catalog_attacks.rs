//! Attacks on the store catalog's topic list through the public API only, so they hold for any
//! layout of the list (chunks of 512 topics, the last one in a record of its own or inline in
//! the catalog): a failed write at a creation, a former owner creating topics at every step of
//! a new owner's claim, power cuts at every step of creations around a chunk's edge, of the
//! upgrade of a version 4 catalog and of journal segment rollovers on a store of 600 topics,
//! threads creating the same names at once, names of the longest length, damage to every
//! record of the store directory, and the bytes a creation writes as topics accumulate.
//!
//! Every check compares with a model: the names whose creation returned `Ok` (all kept, in
//! order, each once, none invented) and the acks a flush confirmed (kept, none invented).

use crate::catalog_chunks::{
    Written, as_version_4, copy_into, create, cut_at_every_step_of_a_creation, damaged_image, name,
    reopened_holds, store_of,
};
use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};

use ackstore::internals::store::read_catalog;
use ackstore::{CursorOptions, Error, MemStorage, Position, Storage, Store, StoreConfig};
use support::config::{store_journal, store_without_flusher};
use support::crash::{Points, cut_everywhere_after, sound_images};
use support::takeover;
use support::tap::{FailOne, Tap};

/// Topics in a chunk of the catalog's list (docs/format.md, "Store catalog").
const CHUNK: usize = 512;

/// Checks the catalog of the closed store on `storage`: every topic name once, every id once,
/// ids ascending in creation order, the names those of [`Store::topic_names`] (`names`).
fn one_id_per_name(storage: &Arc<dyn Storage>, names: &[String], what: &str) {
    let catalog = read_catalog(storage.clone())
        .expect("read")
        .expect("a store");
    let read: Vec<&String> = catalog.topics.iter().map(|t| &t.name).collect();
    assert_eq!(read, names.iter().collect::<Vec<_>>(), "{what}");
    let unique: BTreeSet<&String> = read.iter().copied().collect();
    assert_eq!(unique.len(), read.len(), "{what}: a name twice: {read:?}");
    assert!(
        catalog.topics.windows(2).all(|w| w[0].id < w[1].id),
        "{what}: ids not ascending and unique"
    );
}

/// A creation on the store of `before` topics whose `k`-th storage operation fails, for every
/// `k`: the creation fails with an I/O error or succeeds, never `Fenced`; the next creations
/// from the same handle are never `Fenced` and succeed unless the failed operation was a sync
/// (a failed sync may latch the store until it is reopened); the reopened store holds every
/// name whose creation returned `Ok`, in order, and `verify` finds it sound.
fn creations_after_a_failed_operation_of_a_creation(before: usize) {
    let template = store_of(before);
    let names: Vec<String> = (0..before).map(name).collect();
    let steps = {
        let disk = MemStorage::new();
        copy_into(&template, &disk);
        let hook = Arc::new(FailOne::default());
        let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk), hook.clone()));
        let store = Store::open_with_storage(storage, store_without_flusher()).expect("open");
        hook.arm(0);
        store.topic("x").expect("create");
        hook.seen.load(Ordering::SeqCst)
    };
    assert!(steps > 0);
    // Creations after the failed one that were refused, all of them reported at the end.
    let mut missed = Vec::new();
    for k in 1..=steps {
        let disk = MemStorage::new();
        copy_into(&template, &disk);
        let hook = Arc::new(FailOne::default());
        let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk.clone()), hook.clone()));
        let store = Store::open_with_storage(storage, store_without_flusher()).expect("open");
        hook.arm(k);
        let x = store.topic("x").map(drop);
        let failed = hook.failed.lock().expect("lock").clone();
        let what = format!("{before} topics, operation {k} failed ({failed:?})");
        hook.arm(0);
        assert!(
            matches!(x, Ok(()) | Err(Error::Io { .. })),
            "{what}: the creation returned {x:?}"
        );
        let synced = failed
            .as_deref()
            .is_some_and(|f| f.starts_with("sync") || f.starts_with("sync_dir"));
        let mut expected = names.clone();
        if x.is_ok() {
            expected.push("x".into());
        }
        for next in ["y", "z"] {
            let made = store.topic(next).map(drop);
            if matches!(made, Err(Error::Fenced { .. })) || (!synced && made.is_err()) {
                missed.push(format!("{what}: creation of {next} after it: {made:?}"));
            }
            if made.is_ok() {
                expected.push(next.into());
            }
        }
        let _ = store.close();
        drop(store);
        let image: Arc<dyn Storage> = Arc::new(disk.durable_image());
        let reopened = Store::open_with_storage(image.clone(), store_without_flusher())
            .unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
        let held = reopened.topic_names();
        // A creation that failed may have taken (its write landed, its sync did not answer):
        // then it is kept, once, where it was made.
        let kept: Vec<String> = held.iter().filter(|n| n.as_str() != "x").cloned().collect();
        let wanted: Vec<String> = expected
            .iter()
            .filter(|n| n.as_str() != "x")
            .cloned()
            .collect();
        assert_eq!(kept, wanted, "{what}");
        if x.is_ok() {
            assert!(held.contains(&"x".to_string()), "{what}: x lost");
        }
        reopened.close().expect("close");
        drop(reopened);
        let report = ackstore::check::verify(&image).expect("verify");
        assert!(report.is_sound(), "{what}: {report}");
        one_id_per_name(&image, &held, &what);
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

#[test]
fn a_failed_operation_of_a_creation_that_extends_a_chunk_leaves_the_next_creations_working() {
    creations_after_a_failed_operation_of_a_creation(5);
}

#[test]
fn a_failed_operation_of_a_creation_that_fills_a_chunk_leaves_the_next_creations_working() {
    creations_after_a_failed_operation_of_a_creation(CHUNK - 1);
}

#[test]
fn a_failed_operation_of_a_creation_that_starts_a_chunk_leaves_the_next_creations_working() {
    creations_after_a_failed_operation_of_a_creation(CHUNK);
}

/// A closed store of `topics` topics (configured by `config`) whose topics `with_cursor` hold
/// `entries` entries each and a cursor `c` flushed with nothing acked; with the positions of
/// those entries per topic.
fn store_with_cursors(
    config: &StoreConfig,
    topics: usize,
    with_cursor: &[usize],
    entries: usize,
) -> (MemStorage, BTreeMap<usize, Vec<Position>>) {
    let disk = MemStorage::new();
    let store = Store::open_with_storage(Arc::new(disk.clone()), config.clone()).expect("open");
    create(&store, 0, topics);
    let mut positions = BTreeMap::new();
    for &i in with_cursor {
        let t = store.topic(&name(i)).expect("topic");
        let ps: Vec<Position> = (0..entries)
            .map(|e| t.append(format!("{i}-{e}").as_bytes()).expect("append"))
            .collect();
        t.sync().expect("sync");
        t.open_cursor("c", CursorOptions::default())
            .expect("cursor");
        positions.insert(i, ps);
    }
    store.flush_all().expect("flush");
    store.close().expect("close");
    (disk, positions)
}

/// What a workload of creations and acks was told: the names whose creation returned `Ok`, the
/// one whose creation failed (it may or may not be kept), and per topic the acks made and the
/// acks an `Ok` flush confirmed (entry indexes).
#[derive(Debug, Default, Clone)]
struct Told {
    created: Vec<String>,
    failed: Option<String>,
    acked: BTreeMap<usize, BTreeSet<usize>>,
    confirmed: BTreeMap<usize, BTreeSet<usize>>,
}

/// Opens the store on `image` and checks it against `told`: the names `base` made before, then
/// every created name in order (the failed one possibly among them, nowhere else), nothing
/// else; every cursor keeps every confirmed ack and no ack not made.
fn holds_what_was_told(
    image: &Arc<dyn Storage>,
    config: &StoreConfig,
    base: &[String],
    positions: &BTreeMap<usize, Vec<Position>>,
    told: &Told,
    what: &str,
) {
    let before = base.len();
    let store = Store::open_with_storage(image.clone(), config.clone())
        .unwrap_or_else(|e| panic!("{what}: open: {e}"));
    let names = store.topic_names();
    assert_eq!(names[..before.min(names.len())], *base, "{what}");
    let rest: Vec<String> = names[before..].to_vec();
    let without_failed: Vec<&String> = rest
        .iter()
        .filter(|n| Some(*n) != told.failed.as_ref())
        .collect();
    assert_eq!(
        without_failed,
        told.created.iter().collect::<Vec<_>>(),
        "{what}: the created names"
    );
    assert!(rest.len() <= told.created.len() + 1, "{what}: {rest:?}");
    for (&i, ps) in positions {
        let t = store
            .topic(&name(i))
            .unwrap_or_else(|e| panic!("{what}: topic {i}: {e}"));
        let c = t
            .open_cursor("c", CursorOptions::default())
            .unwrap_or_else(|e| panic!("{what}: cursor of topic {i}: {e}"));
        let kept: BTreeSet<usize> = (0..ps.len())
            .filter(|&e| c.is_acked(ps[e]).expect("is_acked"))
            .collect();
        let empty = BTreeSet::new();
        let confirmed = told.confirmed.get(&i).unwrap_or(&empty);
        let acked = told.acked.get(&i).unwrap_or(&empty);
        assert!(
            kept.is_superset(confirmed),
            "{what}: topic {i} lost a confirmed ack: {kept:?} {confirmed:?}"
        );
        assert!(
            kept.is_subset(acked),
            "{what}: topic {i} holds an ack never made: {kept:?} {acked:?}"
        );
    }
    store
        .close()
        .unwrap_or_else(|e| panic!("{what}: close: {e}"));
    drop(store);
    one_id_per_name(image, &names, what);
}

/// Acks entry `e` of the cursor of every topic of `positions` (as `told` records), then
/// flushes the store; an `Ok` flush confirms every ack made so far.
fn ack_and_flush(
    store: &Store,
    positions: &BTreeMap<usize, Vec<Position>>,
    e: usize,
    told: &mut Told,
) -> ackstore::Result<()> {
    for (&i, ps) in positions {
        let c = store
            .topic(&name(i))?
            .open_cursor("c", CursorOptions::default())?;
        told.acked.entry(i).or_default().insert(e);
        c.ack(ps[e])?;
    }
    store.flush_all()?;
    told.confirmed = told.acked.clone();
    Ok(())
}

/// A power cut at every step of creations 511 to 514 (the last of a chunk, the first and
/// second of the next) with an ack and a flush after each: every `Ok` creation and every
/// confirmed ack kept, nothing invented, `verify` sound.
#[test]
fn a_power_cut_at_every_step_of_creations_across_a_chunk_edge_with_flushes_between_keeps_what_was_told()
 {
    let config = store_without_flusher();
    let before = CHUNK - 2;
    let base: Vec<String> = (0..before).map(name).collect();
    let (template, positions) = store_with_cursors(&config, before, &[0, before - 1], 8);
    let new: Vec<String> = (before..before + 4).map(name).collect();
    cut_at_every_step_of_creations(&config, &template, &base, &positions, &new);
}

/// Opens the store copied from `template` (which holds the topics `base`), then creates the
/// topics `new`, each followed by an ack of the next entry of every cursor of `positions` and
/// a flush, with the power cut at every step: [`holds_what_was_told`] on every image.
fn cut_at_every_step_of_creations(
    config: &StoreConfig,
    template: &MemStorage,
    base: &[String],
    positions: &BTreeMap<usize, Vec<Position>>,
    new: &[String],
) {
    let run = |disk: &MemStorage| {
        let mut told = Told::default();
        let outcome = (|| -> ackstore::Result<()> {
            let store = Store::open_with_storage(Arc::new(disk.clone()), config.clone())?;
            for (e, n) in new.iter().enumerate() {
                told.failed = Some(n.clone());
                store.topic(n)?;
                told.failed = None;
                told.created.push(n.clone());
                ack_and_flush(&store, positions, e, &mut told)?;
            }
            store.close()
        })();
        (outcome, told)
    };
    let clean = cut_everywhere_after(
        Points::every_in_release(5),
        |disk| copy_into(template, disk),
        |disk, ()| run(disk),
        |disk, cut, (_, told)| {
            for image in sound_images(disk, cut) {
                let what = format!("{cut:?}");
                holds_what_was_told(&image, config, base, positions, &told, &what);
            }
        },
    );
    clean.result.0.expect("the workload without a cut");
    assert_eq!(clean.result.1.created, new);
}

/// A power cut at every step of the open that moves a version 4 catalog of 1,100 topics (two
/// whole chunks and part of a third) into the current layout, and of a creation after it.
#[test]
fn a_power_cut_at_every_step_of_the_upgrade_of_a_version_4_catalog_of_1100_topics_keeps_every_topic()
 {
    let template = store_of(1_100);
    as_version_4(&template);
    cut_at_every_step_of_a_creation(&template, 1_100);
}

/// A power cut at every step of flushes that roll tiny journal segments over (each listed in
/// and retired from the catalog by a compare-and-set) on a store of 600 topics, cursors on
/// topics of both chunks: every topic and every confirmed ack kept, none invented.
#[test]
fn a_power_cut_at_every_step_of_segment_rollovers_on_600_topics_keeps_topics_and_acks() {
    let config = store_journal(256);
    let topics = 600;
    let base: Vec<String> = (0..topics).map(name).collect();
    let (template, positions) = store_with_cursors(&config, topics, &[0, 300, 511, 512, 599], 6);
    let run = |disk: &MemStorage| {
        let mut told = Told::default();
        let mut rollovers = 0;
        let outcome = (|| -> ackstore::Result<()> {
            let store = Store::open_with_storage(Arc::new(disk.clone()), config.clone())?;
            for e in 0..4 {
                ack_and_flush(&store, &positions, e, &mut told)?;
            }
            rollovers = store.journal_stats().rollovers;
            store.close()
        })();
        (outcome, told, rollovers)
    };
    let clean = cut_everywhere_after(
        Points::every_in_release(5),
        |disk| copy_into(&template, disk),
        |disk, ()| run(disk),
        |disk, cut, (_, told, _)| {
            for image in sound_images(disk, cut) {
                holds_what_was_told(
                    &image,
                    &config,
                    &base,
                    &positions,
                    &told,
                    &format!("{cut:?}"),
                );
            }
        },
    );
    let (outcome, told, rollovers) = clean.result;
    outcome.expect("the workload without a cut");
    assert_eq!(told.confirmed.len(), positions.len());
    // The workload is only an attack if the journal rolled segments over in it.
    assert!(rollovers > 0, "no rollover in the workload");
}

/// Eight threads create the same 96 names in different orders at once, across a chunk's edge:
/// each name gets one topic, every `Ok` is kept after a reopen, no name twice, no id twice.
#[test]
fn eight_threads_creating_the_same_names_at_once_get_one_topic_per_name() {
    let before = CHUNK - 40;
    let disk = store_of(before);
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let store =
        Arc::new(Store::open_with_storage(storage.clone(), store_without_flusher()).expect("open"));
    let pool: Vec<String> = (0..96).map(|i| format!("shared-{i}")).collect();
    let start = Arc::new(Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (store, pool, start) = (store.clone(), pool.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let mut made = Vec::new();
                for k in 0..pool.len() {
                    // Thread t walks the pool from its own start, half of them backwards.
                    let j = (t * 13 + k) % pool.len();
                    let j = if t % 2 == 0 { j } else { pool.len() - 1 - j };
                    let topic = store.topic(&pool[j]).expect("create");
                    made.push((pool[j].clone(), Arc::as_ptr(&topic) as usize));
                }
                made
            })
        })
        .collect();
    let mut handles: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    for t in threads {
        for (n, p) in t.join().expect("thread") {
            handles.entry(n).or_default().insert(p);
        }
    }
    assert_eq!(handles.len(), pool.len());
    for (n, ps) in &handles {
        assert_eq!(ps.len(), 1, "{n}: {} topic handles", ps.len());
    }
    let names = store.topic_names();
    assert_eq!(names.len(), before + pool.len(), "{names:?}");
    let created: BTreeSet<&String> = names[before..].iter().collect();
    assert_eq!(created, pool.iter().collect());
    store.close().expect("close");
    drop(store);
    reopened_holds(&storage, &names);
    one_id_per_name(&storage, &names, "after the threads");
}

/// The `i`-th name of the longest length (1,024 bytes).
fn long_name(i: usize) -> String {
    let head = format!("long-{i:06}-");
    format!("{head}{}", "n".repeat(1_024 - head.len()))
}

/// Two chunks and more of names of 1,024 bytes: created, kept across reopens and a creation
/// after the reopen, found sound by `verify`; a name one byte longer is refused.
#[test]
fn names_of_1024_bytes_fill_chunks_and_reopen() {
    let disk = MemStorage::new();
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let total = 2 * CHUNK + 3;
    let mut names: Vec<String> = (0..total).map(long_name).collect();
    {
        let store =
            Store::open_with_storage(storage.clone(), store_without_flusher()).expect("open");
        for n in &names {
            store.topic(n).expect("create");
        }
        let longer = format!("{}x", long_name(total));
        assert!(matches!(
            store.topic(&longer),
            Err(Error::InvalidArgument { .. })
        ));
        store.close().expect("close");
    }
    reopened_holds(&storage, &names);
    {
        let store =
            Store::open_with_storage(storage.clone(), store_without_flusher()).expect("open");
        store.topic(&long_name(total)).expect("create after reopen");
        names.push(long_name(total));
        store.close().expect("close");
    }
    reopened_holds(&storage, &names);
    one_id_per_name(&storage, &names, "long names");
}

/// A power cut at every step of the creations of the 512th and 513th names of 1,024 bytes
/// (a chunk's last topic and the next chunk's first): every `Ok` creation kept, none invented.
#[test]
fn a_power_cut_at_every_step_of_creations_of_1024_byte_names_across_a_chunk_edge_keeps_them() {
    let config = store_without_flusher();
    let before = CHUNK - 1;
    let base: Vec<String> = (0..before).map(long_name).collect();
    let template = MemStorage::new();
    {
        let store =
            Store::open_with_storage(Arc::new(template.clone()), config.clone()).expect("open");
        for n in &base {
            store.topic(n).expect("create");
        }
        store.close().expect("close");
    }
    let new: Vec<String> = (before..before + 2).map(long_name).collect();
    cut_at_every_step_of_creations(&config, &template, &base, &BTreeMap::new(), &new);
}

/// The store's own metadata records (the catalog and whatever records hold its topic list,
/// all named from `store`; not the topics' records), by file name.
fn store_records(disk: &MemStorage) -> Vec<String> {
    disk.list_prefix("store")
        .expect("list")
        .into_iter()
        .filter(|f| f.ends_with(".meta"))
        .collect()
}

/// Damage to each record of the store's own (deleted, truncated, zeroed, a bit flipped,
/// replaced by its copy from before the last creation or by a sibling record): `verify` and the
/// open agree, neither panics, and a store either is refused by both or is accepted by both
/// and then holds every topic and the last topic's flushed ack (the damage hit a version no
/// longer needed); never a store that lost or gained a topic.
#[test]
fn damage_to_every_store_record_is_refused_by_verify_and_the_open_alike_or_loses_nothing() {
    let config = store_without_flusher();
    let before = 2 * CHUNK + 5;
    let (disk, _) = store_with_cursors(&config, before, &[0], 4);
    let older: BTreeMap<String, Vec<u8>> = store_records(&disk)
        .into_iter()
        .map(|f| {
            let bytes = disk.live_bytes(&f).expect("bytes");
            (f, bytes)
        })
        .collect();
    // One more topic, with a cursor whose flush puts it in the journal: a catalog from before
    // this creation does not list a topic the journal holds.
    let last_ack = {
        let store = Store::open_with_storage(Arc::new(disk.clone()), config.clone()).expect("open");
        let t = store.topic(&name(before)).expect("create");
        let p = t.append(b"last").expect("append");
        t.sync().expect("sync");
        let c = t
            .open_cursor("c", CursorOptions::default())
            .expect("cursor");
        c.ack(p).expect("ack");
        store.flush_all().expect("flush");
        store.close().expect("close");
        p
    };
    let truth: Vec<String> = (0..=before).map(name).collect();
    let records = store_records(&disk);
    assert!(!records.is_empty());
    let mut targets: Vec<(String, String, Option<Vec<u8>>)> = Vec::new();
    for file in &records {
        let whole = disk.live_bytes(file).expect("bytes");
        for (what, damage) in support::mutate::damages(&whole) {
            targets.push((what, file.clone(), damage));
        }
        let record = file.split_once('.').expect("a record file").0;
        for (old, bytes) in &older {
            if old.split_once('.').expect("a record file").0 == record && *bytes != whole {
                targets.push(("older copy".into(), file.clone(), Some(bytes.clone())));
            }
        }
        for sibling in &records {
            let bytes = disk.live_bytes(sibling).expect("bytes");
            if sibling != file && bytes != whole {
                targets.push((format!("sibling {sibling}"), file.clone(), Some(bytes)));
            }
        }
    }
    let mut missed = Vec::new();
    for (what, file, damage) in targets {
        let storage = damaged_image(&disk, &file, damage);
        let report = ackstore::check::verify(&storage);
        let reported = report.as_ref().map_or(true, |r| !r.is_sound());
        let opened = Store::open_with_storage(storage, config.clone());
        // Refused by both, or accepted by both holding exactly what was made (damage to a
        // version the store no longer needs, say an older version of a record still on disk).
        let fine = match &opened {
            Err(_) => reported,
            Ok(store) => !reported && holds_the_last_topic_and_its_ack(store, &truth, last_ack),
        };
        if !fine {
            missed.push(format!(
                "{what} {file}: verify {}, open {}",
                report.map_or_else(|e| e.to_string(), |r| r.to_string()),
                opened.map_or_else(
                    |e| e.to_string(),
                    |s| format!("accepted with {} topics", s.topic_names().len())
                )
            ));
        }
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

/// Whether `store` holds the topics `truth`, in order, and the last one's cursor `c` holds
/// the ack of `ack`.
fn holds_the_last_topic_and_its_ack(store: &Store, truth: &[String], ack: Position) -> bool {
    store.topic_names() == truth
        && truth.last().is_some_and(|last| {
            store
                .topic(last)
                .and_then(|t| t.open_cursor("c", CursorOptions::default()))
                .and_then(|c| c.is_acked(ack))
                .unwrap_or(false)
        })
}

/// Creations from 1,000 to 3,000 topics write about the same bytes each as the first ones:
/// a span of 512 creations at the same place of a chunk costs at most 10% more at 2,500
/// topics than at 1,000, and no single creation of the later span costs more than 10% over
/// the dearest of the earlier one.
#[test]
fn bytes_written_per_creation_stay_bounded_from_1000_to_3000_topics() {
    let disk = MemStorage::new();
    let written = Arc::new(Written::default());
    let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk), written.clone()));
    let store = Store::open_with_storage(storage.clone(), store_without_flusher()).expect("open");
    create(&store, 0, 1_000);
    let mut per_creation = Vec::new();
    for i in 1_000..3_048 {
        let at = written.0.load(Ordering::SeqCst);
        store.topic(&name(i)).expect("create");
        per_creation.push(written.0.load(Ordering::SeqCst) - at);
    }
    // 1,000 and 2,536 lie at the same place of a chunk of 512.
    let early = &per_creation[..CHUNK];
    let late = &per_creation[2_536 - 1_000..2_536 - 1_000 + CHUNK];
    let (sum_early, sum_late) = (early.iter().sum::<u64>(), late.iter().sum::<u64>());
    let (max_early, max_late) = (
        *early.iter().max().expect("some"),
        *late.iter().max().expect("some"),
    );
    assert!(sum_early > 0);
    assert!(
        sum_late * 10 <= sum_early * 11,
        "{sum_early} bytes for 512 creations from 1,000 topics, {sum_late} from 2,536"
    );
    assert!(
        max_late * 10 <= max_early * 11,
        "the dearest creation: {max_early} bytes from 1,000 topics, {max_late} from 2,536"
    );
    store.close().expect("close");
    drop(store);
    let names: Vec<String> = (0..3_048).map(name).collect();
    reopened_holds(&storage, &names);
}

/// A former owner creates a topic at every storage operation of a new owner's claim and of its
/// two creations across a chunk's edge: the new owner's claim and creations succeed, the
/// former's creation is kept when it returned `Ok`, and the store holds each name once with
/// one id, after a reopen too.
#[test]
fn a_former_owner_creating_at_every_step_of_a_new_owners_claim_and_creations_loses_no_ok() {
    let before = CHUNK - 1;
    let template = store_of(before);
    let base: Vec<String> = (0..before).map(name).collect();
    let new_owner = |storage: Arc<dyn Storage>| -> (Store, Vec<ackstore::Result<()>>) {
        let store = Store::open_with_storage(storage, store_without_flusher())
            .expect("the new owner claims the store");
        let made = ["new-a", "new-b"]
            .iter()
            .map(|n| store.topic(n).map(drop))
            .collect();
        (store, made)
    };
    let steps = takeover::operations_on_a_copy(&template, new_owner);
    // How often the former's creation was kept and refused: the steps must cover both.
    let (mut kept, mut refused) = (0, 0);
    for n in 1..=steps {
        let what = format!("step {n} of {steps}");
        let disk = MemStorage::new();
        copy_into(&template, &disk);
        let former = Arc::new(
            Store::open_with_storage(Arc::new(disk.clone()), store_without_flusher())
                .expect("open"),
        );
        let hooked = takeover::Disk::new(Arc::new(disk.clone()));
        let slot = {
            let former = former.clone();
            hooked.arm_takeover(n, move || former.topic("former").map(drop))
        };
        disk.break_lock();
        let (new, made) = new_owner(hooked.storage.clone());
        hooked.hook.run_if_pending();
        let former_made = slot.lock().expect("slot").take().expect("the former ran");
        assert!(
            matches!(former_made, Ok(()) | Err(Error::Fenced { .. })),
            "{what}: the former's creation: {former_made:?}"
        );
        for m in &made {
            assert!(m.is_ok(), "{what}: the new owner's creation: {m:?}");
        }
        let names = new.topic_names();
        let unique: BTreeSet<&String> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{what}: {names:?}");
        assert_eq!(names[..before], base[..], "{what}");
        for n in ["new-a", "new-b"] {
            assert!(names.contains(&n.to_string()), "{what}: {n} lost");
        }
        if former_made.is_ok() {
            kept += 1;
            assert!(
                names.contains(&"former".to_string()),
                "{what}: the former's Ok creation lost"
            );
        }
        assert!(names.len() <= before + 3, "{what}: {names:?}");
        new.close().expect("close");
        drop((new, former));
        let image: Arc<dyn Storage> = Arc::new(disk.durable_image());
        let reopened = Store::open_with_storage(image.clone(), store_without_flusher())
            .unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
        assert_eq!(reopened.topic_names(), names, "{what}");
        reopened.close().expect("close");
        drop(reopened);
        let report = ackstore::check::verify(&image).expect("verify");
        assert!(report.is_sound(), "{what}: {report}");
        one_id_per_name(&image, &names, &what);
        if !names.contains(&"former".to_string()) {
            refused += 1;
        }
    }
    assert!(
        kept > 0 && refused > 0,
        "{kept} steps kept the former's creation, {refused} refused it"
    );
}

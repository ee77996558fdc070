//! A full file system: acks keep working in memory, a failed `flush` or `close` guarantees
//! nothing new and says so, a retry once space is free persists everything acked so far, and
//! invariants 1 and 2 hold throughout.
//!
//! The workload runs on a real tmpfs of 4 MiB when the test may mount one (root), always on the
//! in-memory disk with a capacity bound, and on the in-memory disk with `ENOSPC` injected from
//! every write on in turn.

use crate::support;
use crate::support::tmpfs::{self, Tmpfs};

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::sync::Arc;

use ackstore::PersistMode;
use ackstore::{Cursor, Error, Position};
use ackstore::{CursorOptions, LedgerConfig, ManagedLedger};
use ackstore::{MemStorage, Storage};

const PER_LEDGER: u64 = 20;

fn open_mem(disk: &MemStorage, cfg: &LedgerConfig) -> ackstore::Result<ManagedLedger> {
    ManagedLedger::open_with_storage(Arc::new(disk.clone()), cfg.clone())
}

fn is_enospc(e: &Error) -> bool {
    let text = e.to_string();
    matches!(e, Error::Io { source, .. } if source.raw_os_error() == Some(28))
        || text.contains("No space left")
}

fn ledger_files(disk: &MemStorage) -> BTreeSet<String> {
    disk.list()
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with("ledger-"))
        .collect()
}

/// A topic with `n` synced entries over several data ledgers, and cursor `sub`.
fn topic_with_entries(
    disk: &MemStorage,
    cfg: &LedgerConfig,
    n: u64,
) -> (ManagedLedger, Cursor, Vec<Position>) {
    let topic = open_mem(disk, cfg).expect("open");
    let positions = support::topic::append_n(&topic, n);
    topic.sync().expect("sync");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    (topic, cursor, positions)
}

#[test]
fn a_retried_close_after_enospc_fails_until_space_is_free_then_persists_every_ack() {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        let disk = MemStorage::new();
        let cfg = support::config::topic(PER_LEDGER, mode, 1 << 20);
        let (topic, cursor, positions) = topic_with_entries(&disk, &cfg, 60);
        cursor.ack(positions[2]).unwrap();
        cursor.flush().expect("flush with space");
        disk.set_capacity(Some(disk.used_bytes()));
        for p in [5, 7, 30, 41] {
            cursor.ack(positions[p]).expect("an ack needs no space");
        }
        let first = cursor.close().expect_err("no space to persist the acks");
        assert!(is_enospc(&first), "{mode:?}: {first}");
        let again = cursor.close();
        assert!(
            again.is_err(),
            "{mode:?}: a retried close returned Ok without space to persist"
        );
        let flushed = cursor.flush();
        assert!(
            flushed.is_err(),
            "{mode:?}: a flush returned Ok on a full disk"
        );
        disk.set_capacity(None);
        cursor
            .close()
            .expect("a retried close persists once space is free");
        assert!(
            cursor.close().is_ok(),
            "closing a closed cursor is idempotent"
        );
        drop(topic);
        let topic = open_mem(&disk, &cfg).expect("reopen");
        let c = topic.open_cursor("sub", CursorOptions::default()).unwrap();
        for p in [2, 5, 7, 30, 41] {
            assert!(
                c.is_acked(positions[p]).unwrap(),
                "{mode:?}: ack of {p} lost"
            );
        }
        assert_eq!(c.stats().unwrap().acked_entries, 5, "{mode:?}");
    }
}

/// Acks every other entry of `entries` data ledgers of `per_ledger` entries, a ledger at a
/// time, on a full disk with a budget of nothing (each change of ledger evicts the previous
/// partition, dirty: it must be written); then frees space, flushes, cuts the power and checks
/// every entry against the model.
fn acks_on_a_full_disk_survive_the_next_flush(flush_first: bool, per_ledger: u64, ledgers: u64) {
    let disk = MemStorage::new();
    let mut cfg = support::config::topic(PER_LEDGER, PersistMode::MultiEntry, 0);
    cfg.max_entries_per_ledger = per_ledger;
    let (topic, cursor, positions) = topic_with_entries(&disk, &cfg, per_ledger * ledgers);
    let mut acked = BTreeSet::new();
    if flush_first {
        cursor.ack(positions[1]).unwrap();
        acked.insert(1);
        cursor.flush().unwrap();
    }
    disk.set_capacity(Some(disk.used_bytes()));
    for i in (3..positions.len()).step_by(2) {
        cursor
            .ack(positions[i])
            .expect("an ack works in memory on a full disk");
        acked.insert(i);
        // The precondition, made here: a look at the first ledger's partition makes the one
        // just changed leave memory (the budget is nothing), so every ack is an eviction
        // write, and they overflow the entry log's write buffer onto the full disk.
        cursor.is_acked(positions[1]).unwrap();
    }
    let stats = cursor.stats().unwrap();
    assert!(stats.ackset.store_failures > 0, "{:?}", stats.ackset);
    assert!(stats.ackset.pinned_partitions > 0, "{:?}", stats.ackset);
    for &i in &acked {
        assert!(cursor.is_acked(positions[i]).unwrap());
    }
    assert!(cursor.flush().is_err(), "no space to flush");
    cursor
        .ack(positions[2])
        .expect("acks go on after a failed flush");
    acked.insert(2);
    disk.set_capacity(None);
    cursor.flush().expect("the next flush once space is free");
    let stats = cursor.stats().unwrap();
    assert_eq!(stats.ackset.pinned_partitions, 0, "{:?}", stats.ackset);
    assert!(
        stats.ackset.resident_bytes <= ackstore::internals::ackset::MAX_PARTITION_BYTES,
        "back within the budget: {:?}",
        stats.ackset
    );
    let image = disk.durable_image();
    drop(topic);
    let topic = open_mem(&image, &cfg).expect("reopen");
    let c = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    for (i, &p) in positions.iter().enumerate() {
        assert_eq!(c.is_acked(p).unwrap(), acked.contains(&i), "entry {i}");
    }
}

#[test]
fn acks_keep_working_when_an_eviction_cannot_create_the_cursor_ledger_on_a_full_disk() {
    acks_on_a_full_disk_survive_the_next_flush(false, 20, 10);
}

#[test]
fn acks_keep_working_when_an_eviction_write_hits_a_full_disk_and_the_next_flush_keeps_them() {
    // 2,000 acks a ledger make partitions of about 4 KiB: the evictions overflow the entry
    // log's write buffer, so they reach the full disk.
    acks_on_a_full_disk_survive_the_next_flush(true, 4_000, 40);
}

/// A reopened cursor writes nothing until its first write, which moves its state to a fresh
/// cursor ledger (the claim): on a full disk the open works and answers, the claim fails with
/// the I/O error as often as it is tried and leaves no file behind, and once space is free it
/// succeeds with every ack.
#[test]
fn a_failed_claim_of_a_reopened_cursor_on_a_full_disk_leaves_no_ledger_file_behind() {
    let disk = MemStorage::new();
    let cfg = support::config::topic(PER_LEDGER, PersistMode::MultiEntry, 1 << 20);
    let (topic, cursor, positions) = topic_with_entries(&disk, &cfg, 30);
    cursor.ack(positions[4]).unwrap();
    cursor.close().unwrap();
    topic.close().unwrap();
    drop(topic);
    let topic = open_mem(&disk, &cfg).expect("reopen");
    let files = ledger_files(&disk);
    disk.set_capacity(Some(disk.used_bytes()));
    let c = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("opening writes nothing");
    assert!(c.is_acked(positions[4]).unwrap());
    c.ack(positions[7]).unwrap();
    for _ in 0..3 {
        let err = c
            .flush()
            .expect_err("the claim moves the state to a fresh ledger: no space");
        assert!(is_enospc(&err), "{err}");
        assert_eq!(ledger_files(&disk), files, "a failed claim left a file");
    }
    disk.set_capacity(None);
    c.flush().expect("the claim once space is free");
    c.close().unwrap();
    topic.close().unwrap();
    drop(topic);
    let topic = open_mem(&disk, &cfg).expect("reopen");
    let c = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    assert!(c.is_acked(positions[4]).unwrap());
    assert!(c.is_acked(positions[7]).unwrap());
}

// The workload of the standing test.

/// What the application did: every ack (individual or cumulative), and what the last
/// `flush`/`close` that returned `Ok` covered.
#[derive(Default, Clone)]
struct Model {
    mark: Option<Position>,
    acked: BTreeSet<Position>,
    flushed_mark: Option<Position>,
    flushed: BTreeSet<Position>,
}

impl Model {
    fn is_acked(&self, p: Position) -> bool {
        self.mark.is_some_and(|m| p <= m) || self.acked.contains(&p)
    }
    fn flushed(&mut self) {
        self.flushed_mark = self.mark;
        self.flushed.clone_from(&self.acked);
    }
    fn was_flushed(&self, p: Position) -> bool {
        self.flushed_mark.is_some_and(|m| p <= m) || self.flushed.contains(&p)
    }
}

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Checks invariants 1 and 2 on a reopened topic: every ack a returned flush covered is there,
/// nothing the application did not ack is. `positions` are the entries known synced.
fn check_reopened(topic: &ManagedLedger, model: &Model, positions: &[Position], what: &str) {
    let c = topic
        .open_cursor("sub", CursorOptions::default())
        .unwrap_or_else(|e| panic!("{what}: reopen the cursor: {e}"));
    for &p in positions {
        let acked = c.is_acked(p).unwrap();
        assert!(!acked || model.is_acked(p), "{what}: {p} over-acked");
        assert!(
            acked || !model.was_flushed(p),
            "{what}: {p} was flushed and is lost"
        );
    }
    c.close().unwrap_or_else(|e| panic!("{what}: close: {e}"));
}

/// Runs the workload: `steps` operations with the disk full (`fill` was called before),
/// recording in `model`; `after_step` sees the model after each step (for crash checks).
fn full_disk_steps(
    topic: &ManagedLedger,
    cursor: &mut Option<Cursor>,
    positions: &mut Vec<Position>,
    model: &mut Model,
    steps: u64,
    seed: u64,
    mut after_step: impl FnMut(&Model, &[Position]),
) {
    let mut rng = Rng(seed | 1);
    for step in 0..steps {
        let op = rng.below(100);
        let c = match cursor {
            Some(c) => c.clone(),
            None => match topic.open_cursor("sub", CursorOptions::default()) {
                Ok(c) => {
                    *cursor = Some(c.clone());
                    c
                }
                Err(e) => {
                    assert!(!matches!(e, Error::Fenced { .. }), "step {step}: {e}");
                    after_step(model, positions);
                    continue;
                }
            },
        };
        match op {
            0..=54 => {
                let p = positions[usize::try_from(rng.below(positions.len() as u64)).unwrap()];
                if let Err(e) = c.ack(p) {
                    panic!("step {step}: ack of {p} failed on a full disk: {e}");
                }
                model.acked.insert(p);
                let mark = c.mark_delete_position().unwrap();
                assert!(mark >= model.mark, "step {step}: mark-delete went back");
                model.mark = mark;
            }
            55..=59 => {
                let first = positions.len() / 3;
                let p = positions[first + usize::try_from(rng.below(4)).unwrap()];
                if model.mark.is_none_or(|m| m < p) {
                    c.ack_cumulative(p).expect("cumulative ack on a full disk");
                    model.mark = c.mark_delete_position().unwrap();
                }
            }
            60..=64 => {
                // Appends may fail for want of space; only synced entries are acked later.
                let appended = topic.append(b"more");
                if let Ok(p) = appended
                    && topic.sync().is_ok()
                {
                    positions.push(p);
                }
            }
            65..=84 => {
                if c.flush().is_ok() {
                    model.flushed();
                }
            }
            85..=94 => {
                if c.close().is_ok() {
                    model.flushed();
                    *cursor = None;
                }
            }
            _ => {
                let _ = c.set_property("step", i64::try_from(step).unwrap());
            }
        }
        after_step(model, positions);
    }
}

/// After the disk was full: space is freed, a retried flush and close persist everything,
/// and a reopen finds every ack.
fn retry_with_space(topic: ManagedLedger, cursor: Option<Cursor>, model: &mut Model) {
    let c = match cursor {
        Some(c) => c,
        None => topic
            .open_cursor("sub", CursorOptions::default())
            .expect("open once space is free"),
    };
    c.flush().expect("a retried flush once space is free");
    model.flushed();
    c.close().expect("close once space is free");
    // The data ledger may have latched on a failed append: its close may fail, a reopen works.
    let _ = topic.close();
}

/// Runs the workload on an in-memory disk that `full_at` makes full after the setup; returns
/// how many growing writes the steps made.
fn mem_workload(
    mode: PersistMode,
    lru: usize,
    full_at: impl Fn(&MemStorage),
    crash_checks: bool,
    seed: u64,
) -> u64 {
    let disk = MemStorage::new();
    let cfg = support::config::topic(PER_LEDGER, mode, lru);
    let (topic, cursor, mut positions) = topic_with_entries(&disk, &cfg, 3 * PER_LEDGER + 7);
    let mut model = Model::default();
    cursor.ack(positions[1]).unwrap();
    model.acked.insert(positions[1]);
    cursor.flush().unwrap();
    model.flushed();
    full_at(&disk);
    let writes_before = disk.growing_writes();
    let mut cursor = Some(cursor);
    full_disk_steps(
        &topic,
        &mut cursor,
        &mut positions,
        &mut model,
        60,
        seed,
        |model, positions| {
            if crash_checks {
                let image = disk.durable_image();
                let reopened = open_mem(&image, &cfg).expect("reopen after a power cut");
                check_reopened(&reopened, model, positions, "power cut on a full disk");
            }
        },
    );
    let writes = disk.growing_writes() - writes_before;
    disk.set_capacity(None);
    disk.enospc_after(None);
    retry_with_space(topic, cursor, &mut model);
    let topic = open_mem(&disk, &cfg).expect("reopen");
    check_reopened(&topic, &model, &positions, "after the retry");
    writes
}

#[test]
fn full_disk_workload_on_a_bounded_in_memory_disk_keeps_invariants_1_and_2() {
    for (mode, lru) in [
        (PersistMode::MultiEntry, 0),
        (PersistMode::MultiEntry, 1 << 20),
        (PersistMode::SingleEntry, 0),
    ] {
        for seed in [7, 1234, 99_991] {
            mem_workload(
                mode,
                lru,
                |disk| disk.set_capacity(Some(disk.used_bytes() + 3_000)),
                true,
                seed,
            );
        }
    }
}

#[test]
fn full_disk_workload_with_enospc_from_every_write_on_keeps_invariants_1_and_2() {
    for (mode, lru) in [(PersistMode::MultiEntry, 0), (PersistMode::SingleEntry, 0)] {
        // How many growing writes the steps make with space to spare.
        let writes = mem_workload(mode, lru, |_| {}, false, 42);
        assert!(writes > 10, "{mode:?}: the workload writes");
        for n in 0..=writes {
            mem_workload(mode, lru, |disk| disk.enospc_after(Some(n)), n % 8 == 0, 42);
        }
    }
}

// The same workload on a real small file system.

#[test]
fn full_disk_workload_on_a_real_small_file_system_keeps_every_flushed_ack() {
    let Some(fs4m) = Tmpfs::mount(4 << 20, 100_000) else {
        eprintln!("cannot mount a tmpfs here (not root): the in-memory variants cover this");
        return;
    };
    for (mode, lru, seed) in [
        (PersistMode::MultiEntry, 0, 3),
        (PersistMode::MultiEntry, 1 << 20, 5),
        (PersistMode::SingleEntry, 0, 11),
    ] {
        let dir = fs4m.path().join(format!("topic-{seed}"));
        let filler = fs4m.path().join("filler");
        let cfg = support::config::topic(PER_LEDGER, mode, lru);
        let topic = ManagedLedger::open(&dir, cfg.clone()).expect("open");
        let (positions, cursor, mut model) = fill_then_run(&topic, &filler, seed);
        tmpfs::remove_filler(&filler);
        retry_with_space(topic, cursor, &mut model);
        let topic = ManagedLedger::open(&dir, cfg).expect("reopen");
        check_reopened(&topic, &model, &positions, "tmpfs after the retry");
        topic.close().unwrap();
        drop(topic);
        fs::remove_dir_all(&dir).unwrap();
    }
}

/// The tmpfs workload's start: entries appended and synced, one ack flushed, then the disk
/// filled up by `filler` and 80 workload steps run against the full disk.
fn fill_then_run(
    topic: &ManagedLedger,
    filler: &Path,
    seed: u64,
) -> (Vec<Position>, Option<Cursor>, Model) {
    let mut positions = support::topic::append_n(topic, 3 * PER_LEDGER + 7);
    topic.sync().unwrap();
    let cursor = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    let mut model = Model::default();
    cursor.ack(positions[1]).unwrap();
    model.acked.insert(positions[1]);
    cursor.flush().unwrap();
    model.flushed();
    tmpfs::fill(filler);
    let mut cursor = Some(cursor);
    full_disk_steps(
        topic,
        &mut cursor,
        &mut positions,
        &mut model,
        80,
        seed,
        |_, _| {},
    );
    (positions, cursor, model)
}

/// The same workload on a topic of a store on the real small file system: a tick that meets the
/// full disk fails, acks keep working, and once space is free the next `flush_all` writes what
/// failed again and succeeds; the reopened store holds every ack a flush returned `Ok` for and
/// none the application did not make.
#[test]
fn full_disk_workload_on_a_store_on_a_real_small_file_system_keeps_every_flushed_ack() {
    let Some(fs4m) = Tmpfs::mount(4 << 20, 100_000) else {
        eprintln!("cannot mount a tmpfs here (not root): the in-memory store tests cover this");
        return;
    };
    // Journal segments of a quarter page: the ticks on the full disk start segments, so one of
    // them meets it even though the workload's records fit in a page.
    let store_config = |lru| ackstore::StoreConfig {
        ledger: support::config::topic(PER_LEDGER, PersistMode::MultiEntry, lru),
        flusher_threads: 0,
        journal: ackstore::JournalConfig {
            segment_bytes: 1024,
        },
        ..ackstore::StoreConfig::default()
    };
    for (lru, seed) in [(0, 7), (1 << 20, 13)] {
        let dir = fs4m.path().join(format!("store-{seed}"));
        let filler = fs4m.path().join("filler");
        let store = ackstore::Store::open(&dir, store_config(lru)).expect("open");
        let topic = store.topic("t").expect("topic");
        let (positions, cursor, mut model) = fill_then_run(&topic, &filler, seed);
        // Acks and flushes go on until a flush meets the full disk (the journal's last page may
        // have had room for the workload's ticks).
        let c = match cursor.clone() {
            Some(c) => c,
            None => topic.open_cursor("sub", CursorOptions::default()).unwrap(),
        };
        let met = positions.iter().enumerate().any(|(i, &p)| {
            c.ack(p).expect("acks work on a full disk");
            model.acked.insert(p);
            let flushed = c.flush();
            if flushed.is_ok() {
                model.mark = c.mark_delete_position().unwrap();
                model.flushed();
            }
            // Wider partitions for the next flush: every third entry further on.
            for &q in positions.iter().skip(i).step_by(3) {
                c.ack(q).expect("acks work on a full disk");
                model.acked.insert(q);
            }
            flushed.is_err()
        });
        model.mark = c.mark_delete_position().unwrap();
        assert!(met, "seed {seed}: no flush met the full disk");
        // A tick on the still full disk fails, or finds room for what it writes (a segment the
        // failed tick could not start is not needed when the last page has room): then it is
        // durable like any other.
        if store.flush_all().is_ok() {
            model.mark = c.mark_delete_position().unwrap();
            model.flushed();
        }
        fs::remove_file(&filler).unwrap();
        store
            .flush_all()
            .expect("the write that met the full disk is retried once space is free");
        model.flushed();
        store.close().expect("close once space is free");
        drop((c, cursor, topic, store));
        let store = ackstore::Store::open(&dir, store_config(lru)).expect("reopen");
        let topic = store.topic("t").expect("topic");
        check_reopened(
            &topic,
            &model,
            &positions,
            "store on tmpfs after the disk was full",
        );
        let c = topic.open_cursor("sub", CursorOptions::default()).unwrap();
        c.ack(positions[2]).unwrap();
        c.flush().expect("a flush once space is free");
        drop((c, topic));
        store.close().unwrap();
        drop(store);
        fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn threads_ack_while_a_flusher_meets_a_full_disk_and_every_ok_flush_is_kept() {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    const THREADS: usize = 4;
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        let disk = MemStorage::new();
        let mut cfg = support::config::topic(PER_LEDGER, mode, 0);
        cfg.cursor.max_ranges_single_entry = 1 << 20;
        let (topic, cursor, positions) = topic_with_entries(&disk, &cfg, 400);
        // Thread t acks the entries i with i % THREADS == t, ascending; `done[t]` counts them.
        let done: Vec<AtomicUsize> = (0..THREADS).map(|_| AtomicUsize::new(0)).collect();
        let stop = AtomicBool::new(false);
        let (rounds, failed) = (AtomicUsize::new(0), AtomicUsize::new(0));
        // Flushes that returned Ok after a flush had met the full disk.
        let kept_after_failure = AtomicUsize::new(0);
        // Each flush that returned Ok: what was acked before it started, and the disk it left.
        let kept: Mutex<Vec<(Vec<usize>, MemStorage)>> = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (cursor, positions, done) = (&cursor, &positions, &done);
                s.spawn(move || {
                    for i in (t..positions.len()).step_by(THREADS).skip(1) {
                        cursor
                            .ack(positions[i])
                            .expect("an ack never fails on a full disk");
                        done[t].fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
            s.spawn(|| {
                let mut round = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    // The disk stays full until a flush has met it (a flush with nothing
                    // dirty writes nothing, so whether the first rounds meet it depends on
                    // the scheduling), then fills and empties again every few rounds.
                    let full = failed.load(Ordering::SeqCst) == 0 || round % 6 < 3;
                    disk.set_capacity(full.then(|| disk.used_bytes()));
                    let before: Vec<usize> =
                        done.iter().map(|d| d.load(Ordering::SeqCst)).collect();
                    if cursor.flush().is_ok() {
                        if failed.load(Ordering::SeqCst) > 0 {
                            kept_after_failure.fetch_add(1, Ordering::SeqCst);
                        }
                        kept.lock().unwrap().push((before, disk.durable_image()));
                    } else {
                        failed.fetch_add(1, Ordering::SeqCst);
                    }
                    round += 1;
                    rounds.fetch_add(1, Ordering::SeqCst);
                }
            });
            while done.iter().map(|d| d.load(Ordering::SeqCst)).sum::<usize>()
                < positions.len() - THREADS
                || rounds.load(Ordering::SeqCst) < 12
                || kept_after_failure.load(Ordering::SeqCst) == 0
            {
                std::thread::yield_now();
            }
            stop.store(true, Ordering::SeqCst);
        });
        assert!(
            failed.load(Ordering::SeqCst) > 0,
            "{mode:?}: no flush met a full disk"
        );
        disk.set_capacity(None);
        cursor.flush().expect("a flush with space");
        let all: Vec<usize> = done.iter().map(|d| d.load(Ordering::SeqCst)).collect();
        let mut images = kept.into_inner().unwrap();
        assert!(
            !images.is_empty(),
            "{mode:?}: no flush succeeded while acks went on"
        );
        images.push((all, disk.durable_image()));
        drop(topic);
        for (before, image) in images.iter().rev().take(12) {
            let topic = open_mem(image, &cfg).expect("reopen after a power cut");
            let c = topic.open_cursor("sub", CursorOptions::default()).unwrap();
            for (i, &p) in positions.iter().enumerate() {
                let (t, k) = (i % THREADS, i / THREADS);
                let acked = c.is_acked(p).unwrap();
                // Thread t acked its k-th entry (k >= 1) as its (k - 1)-th call.
                assert!(!acked || k >= 1, "{mode:?}: entry {i} was never acked");
                if k >= 1 && k <= before[t] {
                    assert!(
                        acked,
                        "{mode:?}: entry {i} was acked before an Ok flush, and lost"
                    );
                }
            }
        }
    }
}

#[test]
fn the_background_flusher_on_a_full_disk_keeps_its_error_and_a_later_close_persists() {
    let disk = MemStorage::new();
    let mut cfg = support::config::topic(PER_LEDGER, PersistMode::MultiEntry, 0);
    cfg.cursor.flush_interval = Some(std::time::Duration::from_millis(1));
    let (topic, cursor, positions) = topic_with_entries(&disk, &cfg, 100);
    disk.set_capacity(Some(disk.used_bytes()));
    for i in (1..100).step_by(3) {
        cursor.ack(positions[i]).unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while cursor.stats().unwrap().background_error.is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the flusher never ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let first = cursor
        .close()
        .expect_err("the background error comes first");
    assert!(
        is_enospc(&first) || matches!(first, Error::PreviousIo),
        "{first}"
    );
    // Still open: acks go on.
    cursor.ack(positions[99]).unwrap();
    disk.set_capacity(None);
    // The flusher may succeed first now; either way close persists everything.
    let closed = cursor.close().or_else(|_| cursor.close());
    closed.expect("close once space is free");
    drop(topic);
    let topic = open_mem(&disk.durable_image(), &cfg).expect("reopen");
    let c = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    for (i, &p) in positions.iter().enumerate() {
        let expected = i % 3 == 1 || i == 99;
        assert_eq!(c.is_acked(p).unwrap(), expected, "entry {i}");
    }
}

/// A store whose cursors share a small ack budget, so acks spread over many data ledgers
/// evict partitions to the journal: one `ENOSPC` meets an eviction (the partition stays
/// resident, pinned) and the flush that follows; once space returns, the next `flush_all`
/// succeeds, releases the pinned memory, and a power cut right after it keeps every ack.
#[test]
fn a_store_retries_a_write_that_met_a_full_disk_once_space_returns_and_keeps_every_ack() {
    const PER: u64 = 200;
    const LEDGERS: u64 = 30;
    let disk = MemStorage::new();
    let mut ledger = support::config::topic(PER_LEDGER, PersistMode::MultiEntry, 1 << 20);
    ledger.max_entries_per_ledger = PER;
    let store_config = ackstore::StoreConfig {
        ledger,
        ack_memory_bytes: Some(3 << 10),
        flusher_threads: 0,
        ..ackstore::StoreConfig::default()
    };
    let store =
        ackstore::Store::open_with_storage(Arc::new(disk.clone()), store_config.clone()).unwrap();
    let topic = store.topic("t").unwrap();
    let positions = support::topic::append_n(&topic, PER * LEDGERS);
    topic.sync().unwrap();
    let cursor = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    cursor.ack(positions[1]).unwrap();
    store.flush_all().expect("a flush with space");
    let mut acked = vec![1];
    // The next write that grows a file fails: an eviction's.
    disk.enospc_after(Some(0));
    for i in (3..positions.len()).step_by(2) {
        cursor
            .ack(positions[i])
            .expect("acks go on while the disk is full");
        acked.push(i);
    }
    let s = cursor.stats().unwrap().ackset;
    assert!(s.store_failures > 0, "an eviction met the full disk: {s:?}");
    assert!(s.pinned_partitions > 0, "{s:?}");
    let failed = store.flush_all().expect_err("no space to flush");
    assert!(is_enospc(&failed), "{failed}");
    disk.enospc_after(None);
    store
        .flush_all()
        .expect("the flush after space returned is retried and succeeds");
    let image = disk.durable_image();
    let s = cursor.stats().unwrap().ackset;
    assert_eq!(
        s.pinned_partitions, 0,
        "the pinned memory is released: {s:?}"
    );
    let budget = store.ack_memory_stats().unwrap();
    assert!(
        budget.resident_bytes
            <= budget.limit_bytes + ackstore::internals::ackset::MAX_PARTITION_BYTES,
        "back within the budget: {budget:?}"
    );
    cursor.ack(positions[0]).unwrap();
    cursor.flush().expect("a cursor's own flush works again");
    drop((cursor, topic, store));
    let store = ackstore::Store::open_with_storage(Arc::new(image), store_config).unwrap();
    let topic = store.topic("t").unwrap();
    let c = topic.open_cursor("sub", CursorOptions::default()).unwrap();
    for (i, &p) in positions.iter().enumerate() {
        assert_eq!(
            c.is_acked(p).unwrap(),
            acked.contains(&i),
            "entry {i} after a power cut right after the Ok"
        );
    }
}

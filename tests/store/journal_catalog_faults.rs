//! A flush whose journal writes the store catalog (the compare-and-set that lists a new segment,
//! or drops a rolled-over one) failing at each step of it: a failure before the catalog's new
//! version is linked changed nothing durable, so that flush fails with `Io` and the next one
//! succeeds without a reopen; a failure after the link latches the journal (`PreviousIo`).
//! Either way a power cut keeps every ack an `Ok` flush confirmed and invents none.

use crate::support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ackstore::{
    Cursor, CursorOptions, Error, FileStorage, ManagedLedger, MemStorage, Position, Storage, Store,
    StoreConfig,
};
use support::tap::{Hook, Op, Tap};

const ENTRIES: usize = 1_000;
const CURSORS: usize = 3;
/// Rounds of acks, each followed by a flush: enough for new segments and rollovers.
const ROUNDS: usize = 6;

fn config() -> StoreConfig {
    let mut config = support::topic::store_config(50);
    config.ledger.cursor.persist_mode = ackstore::PersistMode::MultiEntry;
    config.ack_memory_bytes = Some(2 << 10);
    config.flusher_threads = 0;
    config.journal.segment_bytes = 4096;
    config
}

/// The entries and the acks made on them.
struct Acks {
    positions: Vec<Position>,
    /// Every ack made, per cursor.
    acked: Vec<BTreeSet<usize>>,
    /// The acks an `Ok` flush confirmed, per cursor.
    confirmed: Vec<BTreeSet<usize>>,
}

impl Acks {
    /// Checks the acks a store opened on `image` recovers: at least every confirmed one, and
    /// none that was not made.
    fn check(&self, image: Arc<dyn Storage>, what: &str) {
        let store = Store::open_with_storage(image, config()).expect("reopen");
        let topic = store.topic("t").expect("topic");
        for ci in 0..CURSORS {
            let c = topic
                .open_cursor(&format!("c{ci}"), CursorOptions::default())
                .expect("cursor");
            let kept: BTreeSet<usize> = (0..ENTRIES)
                .filter(|&i| c.is_acked(self.positions[i]).expect("is_acked"))
                .collect();
            assert!(
                kept.is_superset(&self.confirmed[ci]),
                "{what}: cursor c{ci} lost a confirmed ack: {:?}",
                self.confirmed[ci].difference(&kept).next()
            );
            assert!(
                kept.is_subset(&self.acked[ci]),
                "{what}: cursor c{ci} invented an ack: {:?}",
                kept.difference(&self.acked[ci]).next()
            );
        }
    }
}

/// A store with one topic and its cursors, and the acks made on them.
struct Run {
    store: Store,
    topic: Arc<ManagedLedger>,
    cursors: Vec<Cursor>,
    acks: Acks,
}

impl Run {
    /// Opens the store on `storage`, appends the entries, opens the cursors and flushes once.
    fn open(storage: Arc<dyn Storage>) -> Self {
        let store = Store::open_with_storage(storage, config()).expect("open");
        let topic = store.topic("t").expect("topic");
        let positions = support::topic::append_n(&topic, ENTRIES as u64);
        let cursors = (0..CURSORS)
            .map(|i| {
                topic
                    .open_cursor(&format!("c{i}"), CursorOptions::default())
                    .expect("cursor")
            })
            .collect();
        let mut run = Self {
            store,
            topic,
            cursors,
            acks: Acks {
                positions,
                acked: vec![BTreeSet::new(); CURSORS],
                confirmed: vec![BTreeSet::new(); CURSORS],
            },
        };
        run.flush().expect("the first flush");
        run
    }

    /// Acks round `round`'s entries on every cursor.
    fn ack_round(&mut self, round: usize) {
        for (ci, c) in self.cursors.iter().enumerate() {
            for i in ((round * 7 + ci)..ENTRIES).step_by(11 + ci) {
                c.ack(self.acks.positions[i]).expect("ack");
                self.acks.acked[ci].insert(i);
            }
        }
    }

    /// Flushes every cursor; an `Ok` confirms every ack made so far.
    fn flush(&mut self) -> ackstore::Result<()> {
        self.store.flush_all()?;
        self.acks.confirmed.clone_from(&self.acks.acked);
        Ok(())
    }

    /// Whether every ack made was confirmed.
    fn all_confirmed(&self) -> bool {
        self.acks.confirmed == self.acks.acked
    }

    /// [`Acks::check`] of a power cut now, on the in-memory disk.
    fn check_power_cut(&self, disk: &MemStorage, what: &str) {
        self.acks.check(Arc::new(disk.durable_image()), what);
    }

    /// Drops the store without closing it, as a process that dies would leave it.
    fn drop_store(self) -> Acks {
        drop((self.cursors, self.topic, self.store));
        self.acks
    }
}

/// Whether `name` is a file of the store catalog's record.
fn is_catalog(name: &str) -> bool {
    name.starts_with("store.")
}

fn is_enospc(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.raw_os_error() == Some(28))
}

/// The rounds (of [`ROUNDS`]) whose flush writes the catalog, with the writes that grow a file
/// in that flush, and the catalog writes of all of them: one run with space all along.
fn catalog_flushes() -> (Vec<(usize, u64)>, u64) {
    let disk = MemStorage::new();
    let catalog_writes = Arc::new(CatalogSteps::default());
    let storage = Tap::new(Arc::new(disk.clone()), catalog_writes.clone());
    let mut run = Run::open(Arc::new(storage));
    let mut found = Vec::new();
    for round in 0..ROUNDS {
        run.ack_round(round);
        let (writes, catalog) = (disk.growing_writes(), catalog_writes.begun());
        catalog_writes.flush(&mut run).expect("a flush with space");
        if catalog_writes.begun() > catalog {
            found.push((round, disk.growing_writes() - writes));
        }
    }
    (found, catalog_writes.begun())
}

/// The disk fills at each write, in turn, of every flush that writes the catalog: the flush
/// fails with `Io` (`ENOSPC`), never `PreviousIo`; once space returns the next flush is `Ok`
/// without a reopen; a power cut after the failed flush, after the `Ok` one, and a reopen of
/// the live disk keep every confirmed ack and invent none.
#[test]
fn a_full_disk_at_each_write_of_a_flush_that_writes_the_catalog_fails_that_flush_only() {
    let (flushes, _) = catalog_flushes();
    assert!(
        flushes.len() >= 2,
        "the workload writes the catalog in at least two flushes: {flushes:?}"
    );
    for &(round, writes) in &flushes {
        for k in 0..writes {
            let what = format!("round {round}, full from its write {k} of {writes}");
            let disk = MemStorage::new();
            let mut run = Run::open(Arc::new(disk.clone()));
            for earlier in 0..round {
                run.ack_round(earlier);
                run.flush().expect("a flush with space");
            }
            run.ack_round(round);
            disk.enospc_after(Some(k));
            match run.flush() {
                Err(e) if is_enospc(&e) => {}
                Err(e) => panic!("{what}: the flush failed with {e:?}, not ENOSPC"),
                Ok(()) => panic!("{what}: the flush succeeded on a full disk"),
            }
            run.check_power_cut(&disk, &format!("{what}, power cut"));
            disk.enospc_after(None);
            // Acks made between the failed flush and its retry go with the retry.
            run.ack_round(round + 1);
            if let Err(e) = run.flush() {
                panic!("{what}: the flush once space returned failed: {e:?}");
            }
            assert!(run.all_confirmed(), "{what}: the retry confirmed every ack");
            run.check_power_cut(&disk, &format!("{what}, power cut after the retry"));
            let acks = run.drop_store();
            acks.check(Arc::new(disk), &format!("{what}, reopened"));
        }
    }
}

/// Which step of a catalog write to fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Writing the new version's temporary file.
    TempWrite,
    /// Syncing it.
    TempSync,
    /// Linking it as the new version.
    Link,
    /// The directory sync after the link.
    DirSyncAfterLink,
}

impl Step {
    /// Whether a failure there may leave the new version linked: the journal cannot know the
    /// catalog's state, and latches.
    fn after_link(self) -> bool {
        self == Step::DirSyncAfterLink
    }
}

/// Counts the catalog writes begun during flushes (a temporary file of the catalog created;
/// an eviction's during an ack is not counted) and fails `step` of the `nth` one.
#[derive(Default)]
struct CatalogSteps {
    /// Set while a flush runs.
    flushing: AtomicBool,
    begun: AtomicU64,
    fail: Mutex<Option<(u64, Step)>>,
    linked: AtomicU64,
    fired: AtomicU64,
}

impl CatalogSteps {
    fn begun(&self) -> u64 {
        self.begun.load(Ordering::SeqCst)
    }

    fn arm(&self, nth: u64, step: Step) {
        *self.fail.lock().expect("lock") = Some((self.begun() + nth, step));
    }

    fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst) > 0
    }

    /// Runs `run`'s flush, counting and failing catalog writes in it.
    fn flush(&self, run: &mut Run) -> ackstore::Result<()> {
        self.flushing.store(true, Ordering::SeqCst);
        let flushed = run.flush();
        self.flushing.store(false, Ordering::SeqCst);
        flushed
    }
}

impl Hook for CatalogSteps {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        if !self.flushing.load(Ordering::SeqCst) {
            return Ok(());
        }
        let temp = |name: &str| is_catalog(name) && name.ends_with(".meta.tmp");
        if let Op::Create(name) = op
            && temp(name)
        {
            self.begun.fetch_add(1, Ordering::SeqCst);
        }
        let current = self.begun();
        let Some((nth, step)) = *self.fail.lock().expect("lock") else {
            return Ok(());
        };
        if current != nth || self.fired() {
            return Ok(());
        }
        let hit = match (step, op) {
            (Step::TempWrite, Op::Write(name)) | (Step::TempSync, Op::Sync(name)) => temp(name),
            (Step::Link, Op::Link(_, to)) => is_catalog(to),
            (Step::DirSyncAfterLink, Op::SyncDir) => self.linked.load(Ordering::SeqCst) == nth,
            _ => false,
        };
        if !hit {
            return Ok(());
        }
        self.fired.fetch_add(1, Ordering::SeqCst);
        Err(Error::io(
            op.kind(),
            op.name(),
            std::io::Error::other("injected fault in a catalog write"),
        ))
    }

    fn after(&self, op: Op<'_>) {
        if !self.flushing.load(Ordering::SeqCst) {
            return;
        }
        if let Op::Link(_, to) = op
            && is_catalog(to)
        {
            self.linked.store(self.begun(), Ordering::SeqCst);
        }
    }
}

/// Where a run's store lives: the in-memory disk (with power cuts) or real files.
enum Disk {
    Mem(MemStorage),
    Files(tempfile::TempDir),
}

impl Disk {
    fn storage(&self) -> Arc<dyn Storage> {
        match self {
            Disk::Mem(disk) => Arc::new(disk.clone()),
            Disk::Files(dir) => Arc::new(FileStorage::open(dir.path(), true).expect("storage")),
        }
    }
}

/// Each step of each catalog write of a flush fails in turn, on the in-memory disk and on real
/// files: before the link the flush fails with `Io` and the next one succeeds, having written
/// every ack the failed one did not confirm; from the link's directory sync on (the new
/// version may be linked, and a failed sync is never retried) the journal latches: every later
/// flush fails with `PreviousIo`. A power cut after the failed flush, and a reopen, keep every
/// confirmed ack and invent none.
#[test]
fn a_failed_step_of_a_catalog_write_latches_the_journal_only_after_the_link() {
    let (_, catalog_writes) = catalog_flushes();
    for files in [false, true] {
        for nth in 1..=catalog_writes {
            for step in [
                Step::TempWrite,
                Step::TempSync,
                Step::Link,
                Step::DirSyncAfterLink,
            ] {
                let what = format!(
                    "{}, catalog write {nth} of the flushes, {step:?} failed",
                    if files { "files" } else { "memory" }
                );
                let disk = if files {
                    Disk::Files(support::fds::files_dir())
                } else {
                    Disk::Mem(MemStorage::new())
                };
                fail_one_catalog_step(&disk, nth, step, &what);
            }
        }
    }
}

/// One run of [`a_failed_step_of_a_catalog_write_latches_the_journal_only_after_the_link`].
fn fail_one_catalog_step(disk: &Disk, nth: u64, step: Step, what: &str) {
    let steps = Arc::new(CatalogSteps::default());
    let storage = Tap::new(disk.storage(), steps.clone());
    let mut run = Run::open(Arc::new(storage));
    steps.arm(nth, step);
    let mut failed = None;
    for round in 0..ROUNDS {
        run.ack_round(round);
        match steps.flush(&mut run) {
            Ok(()) => assert!(!steps.fired(), "{what}: the flush succeeded"),
            Err(e) => {
                assert!(steps.fired(), "{what}: a flush failed by itself: {e:?}");
                failed = Some((round, e));
                break;
            }
        }
    }
    let Some((round, e)) = failed else {
        panic!("{what}: no flush wrote the catalog that often");
    };
    // After the link the journal latched within the flush: the cursors staged after the
    // failure were refused as after any latch.
    assert!(
        matches!(e, Error::Io { .. }) || step.after_link() && matches!(e, Error::PreviousIo),
        "{what}: the failed flush answered {e:?}"
    );
    if let Disk::Mem(mem) = disk {
        run.check_power_cut(mem, &format!("{what}, power cut"));
    }
    run.ack_round(round + 1);
    let next = steps.flush(&mut run);
    if step.after_link() {
        assert!(
            matches!(next, Err(Error::PreviousIo)),
            "{what}: the next flush answered {next:?}, not PreviousIo"
        );
    } else {
        assert!(next.is_ok(), "{what}: the next flush answered {next:?}");
        assert!(run.all_confirmed(), "{what}: the retry confirmed every ack");
    }
    if let Disk::Mem(mem) = disk {
        run.check_power_cut(mem, &format!("{what}, power cut after the next flush"));
    }
    let acks = run.drop_store();
    // Through a tap again: the store's topics lie where a tap's store puts them.
    let storage = Tap::new(disk.storage(), Arc::new(CatalogSteps::default()));
    acks.check(Arc::new(storage), &format!("{what}, reopened"));
}

//! Power cuts for the crash tests. [`cut_everywhere`] runs a workload on the in-memory disk once
//! per storage operation, with the power lost after that operation, and hands each cut disk to a
//! check; [`cut_everywhere_recorded`] gives the check the same disks from one run of the
//! workload; [`torn_image`] is what such a disk holds when part of an unsynced tail reached the
//! platters.
//!
//! Cut point `n` lets `n` mutating storage operations (write, sync, truncate, create, remove,
//! rename, link, directory sync) succeed once the workload is armed, then fails every operation,
//! reads included, as a power loss would. Cut point `total` (every operation of a clean run)
//! lets the workload finish. Images taken from a cut disk are what a restart finds.

#![allow(dead_code, reason = "each test file uses a different subset")]

use std::sync::{Arc, Mutex};

use ackstore::{MemStorage, Storage};

use super::tap::{Hook, Op, Tap};

/// Where a power cut fell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    /// Storage operations that succeeded after the workload was armed.
    pub n: u64,
    /// Storage operations of the armed workload in a run without a cut.
    pub total: u64,
}

impl Cut {
    /// Whether the workload lost the power before its last storage operation.
    pub fn interrupted(self) -> bool {
        self.n < self.total
    }
}

/// Which cut points to visit, counted from the moment the workload is armed: `from`, then every
/// `step`-th point up to and including `total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Points {
    /// The first cut point.
    pub from: u64,
    /// The distance between two visited cut points (at least 1).
    pub step: usize,
}

impl Points {
    /// Every cut point.
    pub const EVERY: Points = Points { from: 0, step: 1 };

    /// One cut point in `step`, from one that `seed` picks among the first `step`: runs with
    /// fresh seeds visit every cut point over time.
    pub fn one_in(step: usize, seed: u64) -> Points {
        Points {
            from: seed % step as u64,
            step,
        }
    }

    /// Every cut point in release builds, every `step`-th one in debug builds (which run the
    /// same workloads many times slower).
    pub fn every_in_release(step: usize) -> Points {
        Points {
            from: 0,
            step: if cfg!(debug_assertions) { step } else { 1 },
        }
    }
}

/// What a workload returned in a run without a cut, and how many storage operations it made
/// once armed.
#[derive(Debug)]
pub struct Clean<T> {
    /// Storage operations of the armed workload.
    pub total: u64,
    /// What the workload returned.
    pub result: T,
}

/// Runs `workload` on a fresh in-memory disk without a cut, to count its storage operations,
/// then once per cut point on a fresh disk whose power goes off after that many operations, and
/// hands `check` the cut disk, the cut point and what the workload returned (a workload stops at
/// its first error, as a process that lost its disk would). Returns the clean run.
pub fn cut_everywhere<T>(
    mut workload: impl FnMut(&MemStorage) -> T,
    check: impl FnMut(&MemStorage, Cut, T),
) -> Clean<T> {
    cut_everywhere_after(Points::EVERY, |_| (), |disk, ()| workload(disk), check)
}

/// [`cut_everywhere`] for a workload that starts from a prepared state: `prepare` runs on the
/// fresh disk with the power on, then the disk is armed and `workload` continues from what
/// `prepare` returned. Only the cut points of `points` are visited.
pub fn cut_everywhere_after<P, T>(
    points: Points,
    mut prepare: impl FnMut(&MemStorage) -> P,
    mut workload: impl FnMut(&MemStorage, P) -> T,
    mut check: impl FnMut(&MemStorage, Cut, T),
) -> Clean<T> {
    let clean = {
        let disk = MemStorage::new();
        let prepared = prepare(&disk);
        let armed = disk.mutations();
        let result = workload(&disk, prepared);
        Clean {
            total: disk.mutations() - armed,
            result,
        }
    };
    let total = clean.total;
    for n in (points.from..=total).step_by(points.step.max(1)) {
        let disk = MemStorage::new();
        let prepared = prepare(&disk);
        disk.fail_after(Some(n));
        let result = workload(&disk, prepared);
        check(&disk, Cut { n, total }, result);
    }
    clean
}

/// What a workload shows [`cut_everywhere_recorded`] of its progress: the state its check needs
/// (what the application was told, what it had made durable), kept current by the workload
/// around every call that may reach the storage. Clones share the state.
#[derive(Debug, Default)]
pub struct Shown<S>(Arc<Mutex<S>>);

impl<S> Clone for Shown<S> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<S> Shown<S> {
    /// A state shown from the start as `state`.
    pub fn new(state: S) -> Self {
        Self(Arc::new(Mutex::new(state)))
    }
}

impl<S: Clone> Shown<S> {
    /// Changes the state. The lock is held only while `f` runs, so `f` must not call the
    /// storage (a storage call reads the state).
    pub fn update<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        f(&mut self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Reads the state (the same rule as [`Shown::update`]).
    pub fn read<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        f(&self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// A copy of the state.
    pub fn get(&self) -> S {
        self.read(S::clone)
    }
}

/// Each file a power cut can keep (the durable directory's names), with its durable and its live
/// bytes: everything [`MemStorage::crash_image`] reads.
type Files = Vec<(String, Vec<u8>, Vec<u8>)>;

/// The files of `disk` that a power cut now could keep.
fn files_of(disk: &MemStorage) -> Files {
    let mut files = Vec::new();
    let _ = disk.crash_image(|name, durable, live| {
        files.push((name.to_owned(), durable.to_vec(), live.to_vec()));
        Vec::new()
    });
    files
}

/// A disk whose every crash image ([`MemStorage::crash_image`], so [`MemStorage::durable_image`]
/// and [`torn_image`] too) is the one of the disk `files` were read from.
fn disk_of(files: &Files) -> MemStorage {
    let disk = MemStorage::new();
    let built = (|| -> ackstore::Result<()> {
        for (name, durable, live) in files {
            let file = disk.create(name)?;
            file.write_all_at(durable, 0)?;
            file.sync_data()?;
            if live != durable {
                file.set_len(live.len() as u64)?;
                file.write_all_at(live, 0)?;
            }
        }
        disk.sync_dir()
    })();
    built.expect("a fresh in-memory disk takes every file");
    disk
}

/// Records, at the first storage operation after each mutating one (where a power cut after
/// that mutating operation fails the workload), the files a power cut keeps and the workload's
/// state.
struct Recorder<S> {
    disk: MemStorage,
    shown: Shown<S>,
    /// The disk's mutations when the workload was armed; `None` while it is prepared (nothing
    /// recorded).
    armed: Mutex<Option<u64>>,
    /// Per cut point `n` (storage mutations before it), the files and the state.
    cuts: Mutex<Vec<(Files, S)>>,
}

impl<S: Clone + Send> Hook for Recorder<S> {
    fn before(&self, _: Op<'_>) -> ackstore::Result<()> {
        let armed = *self
            .armed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(armed) = armed else {
            return Ok(());
        };
        let n = usize::try_from(self.disk.mutations() - armed).expect("fits usize");
        let mut cuts = self
            .cuts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The first operation at `n` mutations is the one a cut at `n` fails; every operation
        // makes at most one mutation, so no cut point is skipped.
        if cuts.len() == n {
            cuts.push((files_of(&self.disk), self.shown.get()));
        }
        Ok(())
    }
}

/// [`cut_everywhere`] from one run of the workload, for a deterministic workload whose check
/// needs only what the workload shows ([`Shown`]) at the moment the power goes off:
/// [`cut_everywhere_recorded_after`] with nothing prepared.
pub fn cut_everywhere_recorded<S: Clone + Default + Send + 'static, T>(
    rerun: Points,
    mut workload: impl FnMut(Arc<dyn Storage>, &Shown<S>) -> T,
    check: impl FnMut(&MemStorage, Cut, &S),
) -> Clean<T> {
    cut_everywhere_recorded_after(rerun, |_, storage| storage, &mut workload, check)
}

/// [`cut_everywhere_after`] from one run of the workload, for a deterministic workload whose
/// check needs only what the workload shows ([`Shown`]) at the moment the power goes off:
/// `prepare` runs on a fresh disk with the power on (given the disk, and the storage to make
/// its calls through), then the disk is armed and `workload` continues from what `prepare`
/// returned, once; at the first storage operation after each mutating one of the armed
/// workload (the operation that a power cut after `n` mutations fails, reads included) the
/// files a cut keeps and the shown state are recorded; then `check` gets, for every cut point
/// `n` from 0 to the total, a disk whose crash images are those of the cut disk, and the state
/// shown then.
///
/// What a run cut at `n` would have done after the failure (a call that returned `Ok` with the
/// power off) is not in the record: at the cut points of `rerun` (the record's disk and state
/// checked there too) `prepare` and the workload run again with the power cut there, as
/// [`cut_everywhere_after`] runs them, and `check` gets its disk and the state it showed at its
/// end. The workload must make its storage calls through the storage `prepare` is given.
pub fn cut_everywhere_recorded_after<P, S: Clone + Default + Send + 'static, T>(
    rerun: Points,
    mut prepare: impl FnMut(&MemStorage, Arc<dyn Storage>) -> P,
    mut workload: impl FnMut(P, &Shown<S>) -> T,
    mut check: impl FnMut(&MemStorage, Cut, &S),
) -> Clean<T> {
    let disk = MemStorage::new();
    let shown = Shown::<S>::default();
    let recorder = Arc::new(Recorder {
        disk: disk.clone(),
        shown: shown.clone(),
        armed: Mutex::new(None),
        cuts: Mutex::new(Vec::new()),
    });
    let prepared = prepare(
        &disk,
        Arc::new(Tap::new(Arc::new(disk.clone()), recorder.clone())),
    );
    let armed = disk.mutations();
    *recorder
        .armed
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(armed);
    let result = workload(prepared, &shown);
    let total = disk.mutations() - armed;
    let mut cuts = std::mem::take(
        &mut *recorder
            .cuts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    // A workload that ends right after its last mutation makes no operation at `total`.
    if cuts.len() as u64 == total {
        cuts.push((files_of(&disk), shown.get()));
    }
    assert_eq!(
        cuts.len() as u64,
        total + 1,
        "a cut point without a storage operation: a mutation outside the given storage"
    );
    for (n, (files, state)) in (0..).zip(&cuts) {
        check(&disk_of(files), Cut { n, total }, state);
    }
    for n in (rerun.from..=total).step_by(rerun.step.max(1)) {
        let cut = MemStorage::new();
        let prepared = prepare(&cut, Arc::new(cut.clone()));
        cut.fail_after(Some(n));
        let shown = Shown::<S>::default();
        workload(prepared, &shown);
        check(&cut, Cut { n, total }, &shown.get());
    }
    Clean { total, result }
}

/// The image of `disk` after a power cut in which every file keeps its durable bytes plus the
/// first `keep(unsynced)` bytes of its unsynced tail (at most the whole tail). The one in-place
/// write of an extended file, a ledger header's synced-length slot (written after an fsync
/// returned), keeps its durable value; a file otherwise rewritten rather than extended since its
/// last sync keeps its durable bytes.
pub fn torn_image(disk: &MemStorage, keep: impl Fn(usize) -> usize) -> MemStorage {
    disk.crash_image(|_, durable, live| {
        let mut out = durable.to_vec();
        if extends(durable, live) {
            let unsynced = live.len() - durable.len();
            out.extend_from_slice(
                &live[durable.len()..durable.len() + keep(unsynced).min(unsynced)],
            );
        }
        out
    })
}

/// Whether `live` extends `durable`, the ledger header's synced-length slot aside.
fn extends(durable: &[u8], live: &[u8]) -> bool {
    let slots = ackstore::internals::format::ledger::SLOTS_AT
        ..ackstore::internals::format::ledger::HEADER_V3_LEN;
    // Slices compared whole: the test code is built without optimisation.
    let (start, end) = (slots.start.min(durable.len()), slots.end.min(durable.len()));
    live.len() > durable.len()
        && durable[..start] == live[..start]
        && durable[end..] == live[end..durable.len()]
}

/// The longest unsynced tail of any file on `disk`: past it, every [`torn_image`] is the same.
pub fn unsynced_tail(disk: &MemStorage) -> usize {
    let mut longest = 0;
    let _ = disk.crash_image(|_, durable, live| {
        longest = longest.max(live.len().saturating_sub(durable.len()));
        durable.to_vec()
    });
    longest
}

/// Copies every file of `template` into the empty disk `to`, synced.
pub fn copy_into(template: &MemStorage, to: &MemStorage) {
    for file in template.list().expect("list") {
        let bytes = template.live_bytes(&file).expect("bytes");
        let copy = to.create(&file).expect("create");
        copy.write_all_at(&bytes, 0).expect("write");
        copy.sync_data().expect("sync");
    }
    to.sync_dir().expect("sync dir");
}

/// Asserts that `verify` finds `storage` sound, with no leftover file whose name holds
/// `chunks` (a prefix of chunk records): the open that ran before removed what creations cut
/// short or refused left.
pub fn sound_without_leftovers(storage: &std::sync::Arc<dyn ackstore::Storage>, chunks: &str) {
    let report = ackstore::check::verify(storage).expect("verify");
    assert!(
        report.is_sound() && !report.unused.iter().any(|f| f.file.contains(chunks)),
        "{report}"
    );
}

/// The images a power cut can leave of `disk`, each with the unsynced bytes it kept per file:
/// the durable image (0), then every [`torn_image`] keeping the first `k` bytes of each
/// unsynced tail, `k` from 0 to the [`unsynced_tail`].
pub fn cut_images(disk: &MemStorage) -> impl Iterator<Item = (usize, MemStorage)> + '_ {
    let torn = (0..=unsynced_tail(disk)).map(move |k| (k, torn_image(disk, |u| u.min(k))));
    std::iter::once((0, disk.durable_image())).chain(torn)
}

/// The two extreme images a power cut can leave of `disk` (its durable bytes alone, and every
/// unsynced byte kept too), each checked by `verify`, which must find no damage in either (a
/// power cut is never damage): what a restart after the cut `cut` may find.
pub fn sound_images(disk: &MemStorage, cut: Cut) -> [std::sync::Arc<dyn ackstore::Storage>; 2] {
    extreme_images(disk).map(|image| sound(image, cut))
}

/// The bytes of every file of an image a power cut leaves, by name.
pub type Image = Vec<(String, Vec<u8>)>;

/// The images checked so far with each state, by the CRC32 of their bytes and the state.
pub type Seen<S> = std::collections::HashMap<(u32, S), Vec<Image>>;

/// The images of [`sound_images`] that `seen` does not hold yet with `state`, each checked by
/// `verify` as there; `seen` keeps them. Checking an image against a state is deterministic,
/// so a cut point whose image and state are those of one checked before needs no second check:
/// most cuts of a sweep leave the durable bytes as the cut before did, and when nothing is
/// unsynced the image keeping every unsynced byte is the durable one.
pub fn unseen_images<S: std::hash::Hash + Eq + Clone>(
    seen: &mut Seen<S>,
    disk: &MemStorage,
    cut: Cut,
    state: &S,
) -> Vec<std::sync::Arc<dyn ackstore::Storage>> {
    extreme_images(disk)
        .into_iter()
        .filter(|image| {
            let mut crc = crc32fast::Hasher::new();
            let files: Image = (image.list().expect("list").into_iter())
                .map(|f| {
                    let bytes = image.live_bytes(&f).expect("bytes");
                    crc.update(f.as_bytes());
                    crc.update(&(bytes.len() as u64).to_le_bytes());
                    crc.update(&bytes);
                    (f, bytes)
                })
                .collect();
            let met = seen.entry((crc.finalize(), state.clone())).or_default();
            let new = !met.contains(&files);
            if new {
                met.push(files);
            }
            new
        })
        .map(|image| sound(image, cut))
        .collect()
}

/// The durable image of `disk` and its [`torn_image`] keeping every unsynced byte.
fn extreme_images(disk: &MemStorage) -> [MemStorage; 2] {
    [disk.durable_image(), torn_image(disk, |u| u)]
}

/// `image`, which `verify` must find sound (a power cut at `cut` is never damage).
fn sound(image: MemStorage, cut: Cut) -> std::sync::Arc<dyn ackstore::Storage> {
    let storage: std::sync::Arc<dyn ackstore::Storage> = std::sync::Arc::new(image);
    let report =
        ackstore::check::verify(&storage).unwrap_or_else(|e| panic!("{cut:?}: verify: {e}"));
    assert!(report.is_sound(), "{cut:?}: {report}");
    storage
}

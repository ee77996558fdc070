//! The descriptor cache of real files under threads: eight threads writing, reading and syncing
//! the same and their own files through a storage keeping 1 (then 2) descriptors open, so
//! every operation may close another thread's descriptor and reopen its own, several threads
//! reopening the same file at once. Every read answers what the model holds; the process's
//! descriptors under the directory stay within the limit and two per thread; every write
//! reaches the file; a written file's closing sync is never skipped (with the closing syncs
//! failing, every file written answers the failure at its next sync, every file only read
//! answers `Ok`). And a handle of a name removed or replaced while other threads reopen it
//! never reads the file created under the name.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use ackstore::internals::storage::*;

use crate::support;
use support::workload::Rng;

const THREADS: usize = 8;
/// Files every thread writes (each its own slot) and reads.
const SHARED: usize = 4;
const SLOT: usize = 8;
/// Files each thread alone writes and reads: with the shared ones, more than the limit and two
/// descriptors per thread.
const OWN: usize = 3;
const STEPS: usize = 300;

type Handle = Arc<dyn StorageFile>;

/// The files of one run: the shared ones, then each thread's own (`OWN` a thread).
struct Files {
    shared: Vec<Handle>,
    own: Vec<Handle>,
}

/// One thread's last bytes written to its slot of each shared file, and to its own files.
#[derive(Clone, Default)]
struct Model {
    shared: Vec<Option<[u8; SLOT]>>,
    own: [Option<[u8; SLOT]>; OWN],
}

fn slot_offset(thread: usize) -> u64 {
    (thread * SLOT) as u64
}

fn assert_bounded(dir: &std::path::Path, limit: usize) {
    let open = support::fds::open_under(dir);
    let bound = limit + 2 * THREADS;
    assert!(
        open <= bound,
        "{open} descriptors under the directory (limit {limit}, bound {bound})"
    );
}

fn bytes(rng: &mut Rng) -> [u8; SLOT] {
    rng.next_u64().to_le_bytes()
}

/// What `file` holds at `thread`'s slot, checked against `expected` (zeros where never written).
fn check_slot(file: &Handle, thread: usize, expected: Option<[u8; SLOT]>, at: &str) {
    let mut buf = [0u8; SLOT];
    file.read_exact_at(&mut buf, slot_offset(thread))
        .unwrap_or_else(|e| panic!("read {at}: {e}"));
    assert_eq!(buf, expected.unwrap_or([0; SLOT]), "{at}");
}

/// One thread's steps of the first phase: writes, reads and syncs of every file, in any order.
fn mixed(dir: &std::path::Path, limit: usize, files: &Files, t: usize, seed: u64) -> Model {
    let mut rng = Rng::new(seed);
    let mut model = Model {
        shared: vec![None; SHARED],
        own: [None; OWN],
    };
    for step in 0..STEPS {
        let f = rng.index(SHARED);
        let o = rng.index(OWN);
        let own = &files.own[t * OWN + o];
        let at = format!("thread {t} step {step} file {f} (seed {seed})");
        match rng.below(6) {
            0 | 1 => {
                let b = bytes(&mut rng);
                files.shared[f].write_all_at(&b, slot_offset(t)).unwrap();
                model.shared[f] = Some(b);
            }
            2 => {
                let b = bytes(&mut rng);
                own.write_all_at(&b, 0).unwrap();
                model.own[o] = Some(b);
            }
            3 => check_slot(&files.shared[f], t, model.shared[f], &at),
            4 => check_slot(own, 0, model.own[o], &at),
            _ => {
                files.shared[f].sync_data().unwrap();
                let size = files.shared[f].size().unwrap();
                assert!(size <= (THREADS * SLOT) as u64, "{at}: size {size}");
            }
        }
        assert_bounded(dir, limit);
    }
    model
}

/// Runs `work(thread, seed)` from every thread at once; answers their results in order.
fn from_threads<T: Send>(seed: u64, work: impl Fn(usize, u64) -> T + Sync) -> Vec<T> {
    let start = Barrier::new(THREADS);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (start, work) = (&start, &work);
                s.spawn(move || {
                    start.wait();
                    work(t, seed.wrapping_mul(31).wrapping_add(t as u64))
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .collect()
    })
}

/// Every slot of every file on disk (read past the storage) equals the models.
fn check_on_disk(dir: &std::path::Path, models: &[Model]) {
    for f in 0..SHARED {
        let bytes = std::fs::read(dir.join(format!("shared-{f}"))).unwrap();
        for (t, m) in models.iter().enumerate() {
            if let Some(b) = m.shared[f] {
                assert_eq!(
                    &bytes[t * SLOT..(t + 1) * SLOT],
                    &b,
                    "shared {f} thread {t}"
                );
            }
        }
    }
    for (t, m) in models.iter().enumerate() {
        for (o, own) in m.own.iter().enumerate() {
            if let Some(b) = own {
                let bytes = std::fs::read(dir.join(format!("own-{}", t * OWN + o))).unwrap();
                assert_eq!(&bytes[..SLOT], b, "own {o} of thread {t}");
            }
        }
    }
}

/// The second phase: closing syncs fail; every thread writes the even shared files and reads
/// the odd ones and its own. Then every descriptor is closed (files created past the limit):
/// the even files' syncs answer the failure, twice; the odd and own files' answer `Ok`.
fn closing_syncs_fail(s: &FileStorage, dir: &std::path::Path, limit: usize, files: &Files) {
    for f in files.shared.iter().chain(&files.own) {
        f.sync_data().expect("a sync before the closing syncs fail");
    }
    s.fail_closing_syncs(true);
    from_threads(limit as u64, |t, seed| {
        let mut rng = Rng::new(seed);
        for _ in 0..STEPS / 2 {
            let f = rng.index(SHARED);
            if f.is_multiple_of(2) {
                let b = bytes(&mut rng);
                files.shared[f].write_all_at(&b, slot_offset(t)).unwrap();
            } else {
                files.shared[f].read_exact_at(&mut [0; SLOT], 0).unwrap();
                let own = &files.own[t * OWN + rng.index(OWN)];
                own.read_exact_at(&mut [0; 1], 0).unwrap();
            }
            assert_bounded(dir, limit);
        }
    });
    let evictors: Vec<_> = (0..=limit)
        .map(|i| s.create(&format!("evict-{i}")).unwrap())
        .collect();
    s.fail_closing_syncs(false);
    for (f, file) in files.shared.iter().enumerate() {
        let syncs = [file.sync_data().is_ok(), file.sync_data().is_ok()];
        let expected = if f.is_multiple_of(2) {
            [false; 2]
        } else {
            [true; 2]
        };
        assert_eq!(
            syncs, expected,
            "shared {f}: a closing sync skipped or made"
        );
    }
    for (t, file) in files.own.iter().enumerate() {
        assert!(file.sync_data().is_ok(), "own {t}, only read");
    }
    drop(evictors);
}

fn run(limit: usize, seed: u64) {
    let dir = support::fds::files_dir();
    let s = FileStorage::open_limited(dir.path(), false, limit).unwrap();
    let files = Files {
        shared: (0..SHARED)
            .map(|f| s.create(&format!("shared-{f}")).unwrap())
            .collect(),
        own: (0..THREADS * OWN)
            .map(|t| s.create(&format!("own-{t}")).unwrap())
            .collect(),
    };
    for f in &files.shared {
        f.write_all_at(&[0; THREADS * SLOT], 0).unwrap();
    }
    for f in &files.own {
        f.write_all_at(&[0; SLOT], 0).unwrap();
    }
    let models = from_threads(seed, |t, seed| mixed(dir.path(), limit, &files, t, seed));
    check_on_disk(dir.path(), &models);
    for (t, m) in models.iter().enumerate() {
        for (f, file) in files.shared.iter().enumerate() {
            check_slot(file, t, m.shared[f], &format!("after, thread {t} file {f}"));
        }
    }
    closing_syncs_fail(&s, dir.path(), limit, &files);
    drop(files);
    assert_eq!(
        support::fds::open_under(dir.path()),
        0,
        "every handle dropped"
    );
}

#[test]
fn threads_writing_reading_and_syncing_through_one_or_two_descriptors_match_the_model() {
    for seed in 1..=3 {
        run(1, seed);
        run(2, seed);
    }
}

/// Handles of `name`, each with the byte its file was filled with, while one thread replaces
/// the name (a removal and a create, or a rename over it) and the others read through every
/// handle: each read answers its own file's bytes or an error, never the bytes of a file created
/// under the name after it.
#[test]
fn handles_of_a_name_replaced_while_threads_reopen_them_never_read_the_new_file() {
    let dir = support::fds::files_dir();
    readers_of_a_replaced_name(dir.path(), |s, round| {
        let new = if round.is_multiple_of(2) {
            s.remove("r").unwrap();
            s.create("r").unwrap()
        } else {
            let tmp = s.create("tmp").unwrap();
            tmp.write_all_at(&[round; SLOT], 0).unwrap();
            s.rename("tmp", "r").unwrap();
            s.open("r").unwrap()
        };
        new.write_all_at(&[round; SLOT], 0).unwrap();
        new
    });
}

/// As above, with the name replaced from outside the storage (a file written under another
/// name, then renamed over it), which leaves no mark on the handles, and handles never asked
/// their size (their identity comes from the eviction of their descriptor): each read answers
/// its own file's bytes or an error, never those of a file put under the name later, which may
/// have the inode number an earlier file of the name freed.
#[test]
fn handles_never_stated_of_a_name_replaced_from_outside_never_read_the_new_file() {
    // On a file system that hands a freed inode number to the next file created (ext4, xfs;
    // not tmpfs).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path();
    readers_of_a_replaced_name(path, |s, round| {
        // Born later than the file it replaces, and so than every earlier round's, whose
        // inode number it may take.
        let current = std::fs::metadata(path.join("r")).unwrap();
        support::fds::until_born_after(path, current.created().ok());
        let tmp = path.join("tmp");
        std::fs::write(&tmp, [round; SLOT]).unwrap();
        std::fs::rename(&tmp, path.join("r")).unwrap();
        s.open("r").unwrap()
    });
}

/// Name `r` in a storage of `dir` with one descriptor, filled with 0, then `ROUNDS` times
/// replaced by `replace` (given the round, it returns a handle of the new file, filled with the
/// round) while the other threads read through every handle so far, each of which must answer
/// its own file's bytes or an error; the last handle reads the last round's bytes.
fn readers_of_a_replaced_name(dir: &std::path::Path, replace: impl Fn(&FileStorage, u8) -> Handle) {
    const ROUNDS: u8 = 60;
    let s = FileStorage::open_limited(dir, false, 1).unwrap();
    let first = s.create("r").unwrap();
    first.write_all_at(&[0; SLOT], 0).unwrap();
    let handles: Mutex<Vec<(u8, Handle)>> = Mutex::new(vec![(0, first)]);
    let filler = s.create("filler").unwrap();
    filler.write_all_at(&[0xFF; SLOT], 0).unwrap();
    let done = AtomicBool::new(false);
    let reads = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let readers: Vec<_> = (0..THREADS - 1)
            .map(|t| {
                let (handles, filler, done, reads) = (&handles, &filler, &done, &reads);
                scope.spawn(move || {
                    let mut rng = Rng::new(t as u64 + 1);
                    while !done.load(Ordering::Acquire) {
                        let (v, h) = rng.pick(&handles.lock().unwrap()).expect("a handle");
                        let mut buf = [0u8; SLOT];
                        if h.read_exact_at(&mut buf, 0).is_ok() {
                            assert_eq!(buf, [v; SLOT], "the handle of round {v} read another file");
                        }
                        filler.read_exact_at(&mut buf, 0).unwrap();
                        reads.fetch_add(1, Ordering::AcqRel);
                    }
                })
            })
            .collect();
        'rounds: for round in 1..=ROUNDS {
            let new = replace(&s, round);
            handles.lock().unwrap().push((round, new));
            // The readers' reads of this round, through every handle (a wait on their
            // progress, not on time).
            let until = reads.load(Ordering::Acquire) + 4 * THREADS;
            while reads.load(Ordering::Acquire) < until {
                // A reader that ended failed: its panic is the scope's.
                if readers
                    .iter()
                    .any(std::thread::ScopedJoinHandle::is_finished)
                {
                    break 'rounds;
                }
                std::thread::yield_now();
            }
        }
        done.store(true, Ordering::Release);
    });
    let last = &handles.lock().unwrap()[ROUNDS as usize].1;
    let mut buf = [0u8; SLOT];
    last.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, [ROUNDS; SLOT]);
}

//! A store with the default journal segments (16 MiB) on a real full file system: a tmpfs of
//! 56 MiB holding the store of `default_segments_workload` (about 4 MiB live, each tick
//! rewriting about that, a segment rolled over every few ticks). Once the journal rolls over,
//! a filler file takes every byte left; before each tick a random amount is freed again, from
//! nothing to the tick's bytes plus twice the live bytes (before a tick that rolls over, mostly
//! between the tick's bytes and those plus its copies'), so that the tick fails, or commits and
//! its rollover (the copies, a new segment, the catalog's list, the delete) fails, or both work.
//!
//! Checked: every failure is `ENOSPC` (or the latch of an earlier failed write), never a panic;
//! at some failures the directory is copied (what a process killed there leaves), opened and
//! checked: nothing acked beyond what the application acked, everything an `Ok` `flush_all`
//! covered kept, and `verify` finds it sound. Once space returns, the next `flush_all` succeeds
//! and the reopened store holds exactly what was acked; `verify` finds it sound.
//!
//! Runs only where this process may mount a tmpfs (root). `ACKSTORE_SEED` repeats a run.

use crate::support;
use crate::support::tmpfs::{self, Tmpfs, chain, is_no_space};

use std::path::Path;
use std::sync::Arc;

use ackstore::{Error, FileStorage, Storage, Store};
use support::workload::{Rng, seed_from_env};

use super::default_segments_workload::{Workload, check_cursors, config};

/// The tmpfs: the data ledgers (about 4 MiB), the journal (up to twice the live bytes plus a
/// segment, and a tick's worth more), and room for the filler to take.
const TMPFS_BYTES: u64 = 56 << 20;
/// Ticks on the full file system.
const TICKS: usize = 60;
/// Of which at most this many failed ones copy the directory and check the copy (and every
/// one whose rollover failed).
const COPIES: usize = 6;

/// Opens a copy of `dir` as a killed process leaves it; checks it against the model and runs
/// `verify` on it.
fn check_copy(dir: &Path, w: &Workload, what: &str) {
    let copy = tempfile::tempdir().expect("a directory for the copy");
    tmpfs::copy_dir(dir, copy.path());
    let store = Store::open(copy.path(), config())
        .unwrap_or_else(|e| panic!("{what}: the copy does not open: {}", chain(&e)));
    if let Err(e) = check_cursors(&store, &w.ledgers, &w.truth, &w.flushed) {
        panic!("{what}: the copy: {e}");
    }
    store.close().expect("close the copy");
    verify_sound(copy.path(), what);
}

fn verify_sound(dir: &Path, what: &str) {
    let storage: Arc<dyn Storage> =
        Arc::new(FileStorage::open(dir, false).expect("open the directory for verify"));
    let report = ackstore::check::verify(&storage).expect("verify runs");
    assert!(report.is_sound(), "{what}: verify found damage:\n{report}");
}

/// What the full-disk ticks did.
#[derive(Debug, Default)]
struct Outcomes {
    ok: u64,
    /// Ticks that failed before they committed.
    failed: u64,
    /// Ticks that committed and whose rollover then failed.
    rollover_failed: u64,
    /// Ticks that committed and rolled over.
    rolled: u64,
}

/// One tick with `free` bytes freed of the filled file system. Returns whether it failed
/// (and whether after it committed, in its rollover); `last` takes its bytes when it committed.
fn full_tick(
    w: &mut Workload,
    filler: &Path,
    free: u64,
    out: &mut Outcomes,
    last: &mut u64,
) -> Option<bool> {
    tmpfs::fill(filler);
    tmpfs::free_bytes(filler, free);
    w.touch();
    let before = w.store.journal_stats();
    let result = w.flush();
    let after = w.store.journal_stats();
    match result {
        Ok(done) => {
            *last = done.bytes;
            if after.rollovers > before.rollovers {
                out.rolled += 1;
            } else {
                out.ok += 1;
            }
        }
        Err(e) => {
            assert!(
                is_no_space(&e) || matches!(e, Error::PreviousIo),
                "a tick with {free} bytes free: {}",
                chain(&e)
            );
            let committed = after.ticks > before.ticks;
            if committed {
                out.rollover_failed += 1;
            } else {
                out.failed += 1;
            }
            return Some(committed);
        }
    }
    None
}

#[test]
fn rollovers_of_default_segments_on_a_full_file_system_fail_with_no_space_and_lose_nothing() {
    let Some(fs) = Tmpfs::mount(TMPFS_BYTES, 1000) else {
        eprintln!("skipped: this process may not mount a tmpfs");
        return;
    };
    let seed = seed_from_env("ACKSTORE_SEED");
    let dir = fs.path().join("store");
    let filler = fs.path().join("filler");
    let mut w = Workload::prepare(&dir, seed);
    w.tick_until_rollovers(1);
    let live = w.store.journal_stats().live_bytes;
    let mut rng = Rng::new(seed);
    let mut out = Outcomes::default();
    let mut copies = 0;
    let segment = ackstore::JournalConfig::default().segment_bytes;
    let mut last = live / 2;
    for tick in 0..TICKS {
        // When the tick (about as long as the last) will pass the rollover's bound: the room
        // for the tick and part of the copies, mostly.
        let s = w.store.journal_stats();
        let rolls = s.segment_bytes + last > 2 * s.live_bytes + segment;
        let free = if rolls && rng.chance(80) {
            last + last / 8 + rng.below(s.live_bytes / 4)
        } else {
            rng.below(3 * live)
        };
        let failed = full_tick(&mut w, &filler, free, &mut out, &mut last);
        if failed == Some(true) || failed.is_some() && copies < COPIES {
            copies += 1;
            check_copy(
                &dir,
                &w,
                &format!("seed {seed}, tick {tick}, {free} bytes free"),
            );
        }
    }
    eprintln!("seed {seed}: {out:?}, live {live} bytes");
    assert!(
        out.failed > 0 && out.rollover_failed + out.rolled > 0,
        "seed {seed}: the full disk did not fail a tick, or no tick rolled over: {out:?}"
    );
    tmpfs::remove_filler(&filler);
    w.touch();
    w.flush()
        .unwrap_or_else(|e| panic!("seed {seed}: flush_all with room: {}", chain(&e)));
    let (ledgers, truth) = (w.ledgers.clone(), w.truth.clone());
    w.close().expect("close");
    let store = Store::open(&dir, config()).expect("reopen");
    check_cursors(&store, &ledgers, &truth, &truth).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    store.close().expect("close");
    verify_sound(&dir, &format!("seed {seed}: after space returned"));
    drop(fs);
}

//! Damage to default journal segments (16 MiB) after rollovers (the store of
//! `default_segments_workload`, closed once a segment that was the newest after the first
//! rollover is the oldest, longer): a listed
//! segment deleted, cut short, a page of it zeroed, a bit of it flipped, or put back as the
//! shorter copy kept before the rollovers (when it was the newest). For each, on a copy of the
//! directory: the open refuses, or recovers nothing acknowledged beyond what the application
//! acked; and `verify` reports damage exactly when the open refuses.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use ackstore::internals::journal::parse_segment_name;
use ackstore::{FileStorage, Storage, Store};

use super::default_segments_workload::{Acks, Workload, check_cursors, config};
use crate::support::tmpfs::copy_dir;
use crate::support::workload::seed_from_env;

/// The journal segment files in `dir`, ascending.
fn segments(dir: &Path) -> Vec<(u64, String)> {
    let mut out: Vec<(u64, String)> = fs::read_dir(dir)
        .expect("list")
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            parse_segment_name(&name).map(|seq| (seq, name))
        })
        .collect();
    out.sort();
    out
}

/// A damage to the segments of a directory.
#[derive(Debug, Clone, Copy)]
enum Damage {
    DeleteOldest,
    CutNewestInHalf,
    CutOldestInHalf,
    ZeroAPageOfTheOldest,
    FlipABitOfTheNewest,
    FlipABitOfTheOldest,
    OlderCopyOfTheOldest,
}

impl Damage {
    fn apply(self, dir: &Path, kept: &(String, Vec<u8>)) {
        let segs = segments(dir);
        let oldest = dir.join(&segs.first().expect("a segment").1);
        let newest = dir.join(&segs.last().expect("a segment").1);
        let flip = |path: &Path| {
            let mut bytes = fs::read(path).expect("read");
            let at = bytes.len() * 2 / 3;
            bytes[at] ^= 0x10;
            fs::write(path, bytes).expect("write");
        };
        let cut = |path: &Path| {
            let len = fs::metadata(path).expect("metadata").len();
            let f = fs::OpenOptions::new().write(true).open(path).expect("open");
            f.set_len(len / 2).expect("cut");
        };
        match self {
            Self::DeleteOldest => fs::remove_file(oldest).expect("remove"),
            Self::CutNewestInHalf => cut(&newest),
            Self::CutOldestInHalf => cut(&oldest),
            Self::ZeroAPageOfTheOldest => {
                let mut bytes = fs::read(&oldest).expect("read");
                let at = bytes.len() / 2 / 4096 * 4096;
                let end = (at + 4096).min(bytes.len());
                bytes[at..end].fill(0);
                fs::write(&oldest, bytes).expect("write");
            }
            Self::FlipABitOfTheNewest => flip(&newest),
            Self::FlipABitOfTheOldest => flip(&oldest),
            Self::OlderCopyOfTheOldest => {
                assert!(
                    segs.iter().any(|(_, n)| *n == kept.0),
                    "the kept segment {} is still listed",
                    kept.0
                );
                fs::write(dir.join(&kept.0), &kept.1).expect("write the older copy");
            }
        }
    }
}

fn verify_sound(dir: &Path) -> (bool, String) {
    let storage: Arc<dyn Storage> =
        Arc::new(FileStorage::open(dir, false).expect("open the directory for verify"));
    let report = ackstore::check::verify(&storage).expect("verify runs");
    (report.is_sound(), report.to_string())
}

/// Applies `damage` to a copy of `dir`; checks open against the model and against verify.
fn check_damage(dir: &Path, damage: Damage, kept: &(String, Vec<u8>), model: (&[u64], &[Acks])) {
    let copy = tempfile::tempdir().expect("a directory for the copy");
    copy_dir(dir, copy.path());
    damage.apply(copy.path(), kept);
    let opened = Store::open(copy.path(), config()).and_then(|store| {
        let held = check_cursors(&store, model.0, model.1, &vec![Acks::new(); model.1.len()]);
        store.close()?;
        Ok(held)
    });
    let (sound, report) = verify_sound(copy.path());
    match opened {
        Ok(held) => {
            held.unwrap_or_else(|e| panic!("{damage:?}: the open recovered {e}"));
            assert!(sound, "{damage:?}: open works, verify reports:\n{report}");
        }
        Err(e) => assert!(
            !sound,
            "{damage:?}: open refuses ({e}), verify finds the directory sound"
        ),
    }
    eprintln!("{damage:?}: verify sound {sound}");
}

#[test]
fn damaged_default_segments_after_rollovers_are_refused_or_recover_nothing_unacked() {
    let seed = seed_from_env("ACKSTORE_SEED");
    let dir = tempfile::tempdir().expect("dir");
    let mut w = Workload::prepare(dir.path(), seed);
    w.tick_until_rollovers(1);
    // The newest segment now, kept: after the next rollovers it is the oldest, and longer.
    let (_, name) = segments(dir.path()).pop().expect("a segment");
    let kept = (
        name.clone(),
        fs::read(dir.path().join(&name)).expect("read"),
    );
    let rollovers = w.store.journal_stats().rollovers;
    while segments(dir.path()).first().map(|s| &s.1) != Some(&name) {
        w.tick_until_rollovers(w.store.journal_stats().rollovers + 1);
        assert!(
            w.store.journal_stats().rollovers < rollovers + 4,
            "the kept segment never became the oldest"
        );
    }
    let (ledgers, truth) = (w.ledgers.clone(), w.truth.clone());
    w.close().expect("close");
    for damage in [
        Damage::DeleteOldest,
        Damage::CutNewestInHalf,
        Damage::CutOldestInHalf,
        Damage::ZeroAPageOfTheOldest,
        Damage::FlipABitOfTheNewest,
        Damage::FlipABitOfTheOldest,
        Damage::OlderCopyOfTheOldest,
    ] {
        check_damage(dir.path(), damage, &kept, (&ledgers, &truth));
    }
}

//! The count trigger with the default journal segments (16 MiB) and about 3 MiB live (the store
//! of `default_segments_workload`): restarted 40 times, each run touching half the partitions
//! and flushing once (so each run leaves its short newest segment behind, which the next owner
//! never appends to), the segments stay within `segment_bound` of the live bytes in number and
//! within twice the live bytes plus one segment in bytes after every flush, so the next open's
//! scan stays bounded; the acks match the model at the end.

use std::path::Path;

use ackstore::Store;
use ackstore::internals::journal::{JournalConfig, parse_segment_name, segment_bound};

use super::default_segments_workload::{Workload, check_cursors, config};
use crate::support::workload::seed_from_env;

const RESTARTS: usize = 40;

/// The journal segment files in `dir` and their bytes.
fn segment_files(dir: &Path) -> (u64, u64) {
    let mut files = (0, 0);
    for e in std::fs::read_dir(dir).expect("list").flatten() {
        if parse_segment_name(&e.file_name().to_string_lossy()).is_some() {
            files.0 += 1;
            files.1 += e.metadata().expect("metadata").len();
        }
    }
    files
}

#[test]
fn restarts_each_leaving_a_default_segment_behind_keep_the_segments_and_the_scan_bounded() {
    let seed = seed_from_env("ACKSTORE_SEED");
    let segment = JournalConfig::default().segment_bytes;
    let dir = tempfile::tempdir().expect("dir");
    let mut w = Workload::prepare(dir.path(), seed);
    let (mut rollovers, mut most) = (0, 0);
    for run in 0..RESTARTS {
        w.touch();
        w.flush()
            .unwrap_or_else(|e| panic!("seed {seed}, run {run}: flush_all: {e}"));
        let stats = w.store.journal_stats();
        rollovers += stats.rollovers;
        let bound = segment_bound(stats.live_bytes, segment);
        assert!(
            stats.segments <= bound && stats.segment_bytes <= 2 * stats.live_bytes + segment,
            "seed {seed}, run {run}: bound {bound}: {stats:?}"
        );
        w = w.restart();
        let (files, bytes) = segment_files(dir.path());
        most = most.max(files);
        assert!(
            files <= bound && bytes <= 2 * stats.live_bytes + segment,
            "seed {seed}, run {run}: {files} segment files of {bytes} bytes after the restart, \
             bound {bound}: {stats:?}"
        );
    }
    eprintln!("seed {seed}: {rollovers} rollovers, at most {most} segment files");
    // Without the count trigger each restart would leave a segment: most runs rolled over.
    assert!(
        rollovers >= RESTARTS as u64 / 2,
        "seed {seed}: {rollovers} rollovers"
    );
    let (ledgers, truth) = (w.ledgers.clone(), w.truth.clone());
    w.close().expect("close");
    let store = Store::open(dir.path(), config()).expect("reopen");
    check_cursors(&store, &ledgers, &truth, &truth).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    store.close().expect("close");
}

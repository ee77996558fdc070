//! A journal segment followed by a long zero-filled extent (what some file systems leave after
//! a crash) is read in bounded memory: the read-only check `verify` runs and `Store::open`, on a
//! sparse 256 MiB zero tail, keep the process's peak resident memory far below the tail's size,
//! report no damage, keep every ack, and the open cuts the zeros off. Alone in its binary, so
//! the peak belongs to this test.

use std::sync::Arc;

use ackstore::internals::journal;
use ackstore::internals::store::{journal_seals, read_catalog};
use ackstore::{
    CursorOptions, FileStorage, InitialPosition, Position, Storage, Store, StoreConfig,
};

const TAIL: u64 = 256 << 20;

/// Peak resident memory of this process, from `/proc/self/status` (`None` where there is none).
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[test]
fn a_quarter_gib_zero_tail_on_the_newest_segment_is_read_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let opts = CursorOptions {
        initial_position: InitialPosition::Earliest,
        inclusive: false,
    };
    let config = StoreConfig {
        flusher_threads: 0,
        ..StoreConfig::default()
    };
    let acked: Vec<Position>;
    {
        let store = Store::open(dir.path(), config.clone()).unwrap();
        let t = store.topic("t").unwrap();
        let ps: Vec<Position> = (0..30).map(|i| t.append(&[i]).unwrap()).collect();
        t.sync().unwrap();
        let c = t.open_cursor("c", opts).unwrap();
        acked = ps.iter().copied().skip(3).step_by(3).collect();
        for p in &acked {
            c.ack(*p).unwrap();
        }
        c.flush().unwrap();
        drop((c, t));
        store.close().unwrap();
    }
    let mut segs: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("journal-")
        })
        .collect();
    segs.sort();
    let newest = segs.pop().unwrap();
    let len = std::fs::metadata(&newest).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap();
    f.set_len(len + TAIL).unwrap();
    drop(f);

    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(dir.path(), false).unwrap());
    let catalog = read_catalog(storage.clone()).unwrap().expect("a store");
    let check = journal::check_listed(
        storage.as_ref(),
        &journal_seals(&catalog),
        ackstore::internals::store::journal_listing(&catalog),
    )
    .expect("no damage");
    assert_eq!(check.torn_tail, None, "zeros are no torn tail");
    drop(storage);

    let store = Store::open(dir.path(), config).expect("opens");
    let t = store.topic("t").unwrap();
    let c = t.open_cursor("c", opts).unwrap();
    for p in &acked {
        assert!(c.is_acked(*p).unwrap(), "{p} kept");
    }
    assert_eq!(
        std::fs::metadata(&newest).unwrap().len(),
        len,
        "the open cut the zeros off"
    );
    drop((c, t));
    store.close().unwrap();
    if let Some(peak) = peak_rss_bytes() {
        assert!(
            peak < TAIL / 2,
            "peak resident memory {peak} bytes for a {TAIL}-byte zero tail"
        );
    }
}

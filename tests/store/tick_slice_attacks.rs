//! Attacks on a store tick whose markers are appended in slices of about 1 MiB: thousands of
//! dirty cursors with scattered acks, so one `flush_all` writes several slices, and a full disk
//! (or a torn write) at a slice, at every write around the tick, twice in a row, with acks and
//! evictions from other threads, before a power cut or a rollover. After each, through the
//! public API only: every ack made before a successful flush is kept after a reopen, no cursor
//! holds an ack never made, `verify` finds the store sound, and the failed tick left no byte of
//! its slices in the segment.

use crate::support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ackstore::{Cursor, CursorOptions, Error, MemStorage, Position, Store, StoreConfig};
use support::tap::{Hook, Tap};

/// Topics of every store here, each with [`CURSORS`] cursors.
const TOPICS: usize = 20;
/// Cursors of each topic.
const CURSORS: usize = 100;
/// Entries of each topic; with [`PER_LEDGER`] entries a ledger, each cursor's acks touch
/// many partitions, so its marker has many rows and a tick's markers fill several slices.
const ENTRIES: u64 = 400;
/// Entries of each data ledger.
const PER_LEDGER: u64 = 10;
/// A write to a journal segment of at least this many bytes is one of a tick's full slices
/// of markers (a partition record or a tick's last slice is smaller).
const SLICE: usize = 1 << 20;

/// Records every full slice a tick writes to a journal segment (its segment and offset) and
/// fails the slices whose number (counted from 0 over the disk's life) is in `fail`: half of
/// the slice is written, then the write fails with `ENOSPC`, as a disk that filled midway.
#[derive(Default)]
struct Slices {
    seen: Mutex<Vec<(String, u64)>>,
    fail: Mutex<BTreeSet<usize>>,
    failed: AtomicU64,
}

impl Slices {
    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// Fails the `n`-th full slice from now (0: the next one).
    fn fail_next(&self, n: usize) {
        let at = self.count() + n;
        self.fail.lock().unwrap().insert(at);
    }

    /// Where the full slice numbered `n` was written.
    fn at(&self, n: usize) -> (String, u64) {
        self.seen.lock().unwrap()[n].clone()
    }
}

impl Hook for Slices {
    fn write(
        &self,
        name: &str,
        buf: &[u8],
        offset: u64,
        write: &dyn Fn(&[u8], u64) -> ackstore::Result<()>,
    ) -> ackstore::Result<()> {
        if !name.ends_with(".seg") || buf.len() < SLICE {
            return write(buf, offset);
        }
        let n = {
            let mut seen = self.seen.lock().unwrap();
            seen.push((name.to_string(), offset));
            seen.len() - 1
        };
        if self.fail.lock().unwrap().remove(&n) {
            self.failed.fetch_add(1, Ordering::SeqCst);
            write(&buf[..buf.len() / 2], offset)?;
            return Err(Error::io(
                "write",
                name,
                std::io::Error::from_raw_os_error(28),
            ));
        }
        write(buf, offset)
    }
}

/// A store of [`TOPICS`] x [`CURSORS`] cursors and a model of their acks.
struct World {
    disk: MemStorage,
    slices: Arc<Slices>,
    config: StoreConfig,
    store: Store,
    cursors: Vec<Cursor>,
    /// Each topic's entries.
    positions: Vec<Vec<Position>>,
    /// Every ack each cursor was answered `Ok` for (indices into its topic's entries).
    acked: Vec<BTreeSet<usize>>,
    /// Each cursor's acks as of its last successful flush: kept whatever follows.
    flushed: Vec<BTreeSet<usize>>,
}

impl World {
    fn new(config: StoreConfig) -> Self {
        let disk = MemStorage::new();
        let slices = Arc::new(Slices::default());
        let tap = Tap::new(Arc::new(disk.clone()), slices.clone());
        let store = Store::open_with_storage(Arc::new(tap), config.clone()).expect("open");
        let mut cursors = Vec::new();
        let mut positions = Vec::new();
        for t in 0..TOPICS {
            let topic = store.topic(&format!("t{t}")).expect("topic");
            positions.push(support::topic::append_n(&topic, ENTRIES));
            for c in 0..CURSORS {
                cursors.push(
                    topic
                        .open_cursor(&format!("c{c}"), CursorOptions::default())
                        .expect("cursor"),
                );
            }
        }
        let n = cursors.len();
        let mut world = World {
            disk,
            slices,
            config,
            store,
            cursors,
            positions,
            acked: vec![BTreeSet::new(); n],
            flushed: vec![BTreeSet::new(); n],
        };
        world.flush().expect("the first flush");
        world
    }

    /// Acks round `round` of every cursor: a quarter of its topic's entries, scattered over
    /// every ledger, a different quarter each round and cursor.
    fn ack_round(&mut self, round: usize) {
        for (i, c) in self.cursors.iter().enumerate() {
            let ps = &self.positions[i / CURSORS];
            for e in (0..ps.len()).filter(|e| (e + i + round) % 4 == 0) {
                c.ack(ps[e]).expect("ack");
                self.acked[i].insert(e);
            }
        }
    }

    /// `flush_all`; on success every ack made so far is flushed.
    fn flush(&mut self) -> ackstore::Result<()> {
        self.store.flush_all()?;
        self.flushed.clone_from(&self.acked);
        Ok(())
    }

    /// The live length of `name` now.
    fn len_of(&self, name: &str) -> usize {
        self.disk.live_bytes(name).expect("a segment").len()
    }

    /// Checks the store a crash or close left on `image`: sound to `verify`, and each cursor
    /// holding every ack it had flushed and no ack it was never answered for.
    fn check(&self, image: MemStorage, what: &str) {
        let image: Arc<dyn ackstore::Storage> = Arc::new(image);
        let report = ackstore::check::verify(&image).expect("verify");
        assert!(report.is_sound(), "{what}: {report}");
        let store = Store::open_with_storage(image, self.config.clone()).expect("reopen");
        for t in 0..TOPICS {
            let topic = store.topic(&format!("t{t}")).expect("topic");
            for c in 0..CURSORS {
                let i = t * CURSORS + c;
                let cursor = topic
                    .open_cursor(&format!("c{c}"), CursorOptions::default())
                    .expect("cursor");
                let kept: BTreeSet<usize> = (0..ENTRIES as usize)
                    .filter(|&e| cursor.is_acked(self.positions[t][e]).expect("is_acked"))
                    .collect();
                assert!(
                    kept.is_superset(&self.flushed[i]),
                    "{what}: t{t}/c{c} lost flushed ack {:?}",
                    self.flushed[i].difference(&kept).next()
                );
                assert!(
                    kept.is_subset(&self.acked[i]),
                    "{what}: t{t}/c{c} holds ack {:?} never made",
                    kept.difference(&self.acked[i]).next()
                );
            }
        }
        store.close().expect("close");
    }

    /// Closes the store and checks what it left.
    fn close_and_check(self, what: &str) {
        self.store.close().expect("close");
        let image = self.disk.durable_image();
        self.check(image, what);
    }
}

fn config() -> StoreConfig {
    support::config::store(PER_LEDGER, 64 << 20)
}

#[test]
fn a_tick_here_writes_several_full_slices() {
    let mut world = World::new(config());
    world.ack_round(1);
    let before = world.slices.count();
    world.flush().expect("flush");
    let slices = world.slices.count() - before;
    assert!(slices >= 2, "{slices} full slices");
    world.close_and_check("after two ticks");
}

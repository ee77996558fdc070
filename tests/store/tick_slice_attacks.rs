//! Attacks on a store tick whose markers are appended in slices of about 1 MiB: thousands of
//! dirty cursors with scattered acks, so one `flush_all` writes several slices, and a full disk
//! (or a torn write) at a slice, at every write around the tick, twice in a row, with acks and
//! evictions from other threads, before a power cut or a rollover; a failed cut back, a
//! takeover between two slices, a segment swapped with its copy from inside a failed tick.
//! After each, through the store's API and its disks: every ack made before a successful flush
//! is kept after a reopen, no cursor holds an ack never made, `verify` finds the store sound
//! (or, after damage, the open refuses what it finds), and the failed tick left no byte of its
//! slices in the segment.

use crate::support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ackstore::{Cursor, CursorOptions, Error, MemStorage, Position, Store, StoreConfig};
use support::tap::{Hook, Op, Tap};

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
struct Slices {
    disk: MemStorage,
    /// Each full slice's segment, offset, and the disk's count of growing writes before it.
    seen: Mutex<Vec<(String, u64, u64)>>,
    fail: Mutex<BTreeSet<usize>>,
    failed: AtomicU64,
    /// Fails every cut of a segment's length while set.
    fail_cuts: AtomicBool,
    /// Runs once the full slice of the number given was written.
    after: Mutex<Option<(usize, Action)>>,
}

type Action = Box<dyn FnOnce() + Send>;

impl Slices {
    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// Fails the `n`-th full slice from now (0: the next one).
    fn fail_next(&self, n: usize) {
        let at = self.count() + n;
        self.fail.lock().unwrap().insert(at);
    }

    /// Where the full slice numbered `n` was written, and the disk's growing writes before it.
    fn at(&self, n: usize) -> (String, u64, u64) {
        self.seen.lock().unwrap()[n].clone()
    }
}

impl Hook for Slices {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        match op {
            Op::SetLen(name) if name.ends_with(".seg") && self.fail_cuts.load(Ordering::SeqCst) => {
                Err(Error::io(
                    "set_len",
                    name,
                    std::io::Error::from_raw_os_error(5),
                ))
            }
            _ => Ok(()),
        }
    }

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
            seen.push((name.to_string(), offset, self.disk.growing_writes()));
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
        write(buf, offset)?;
        let action = {
            let mut after = self.after.lock().unwrap();
            match after.take() {
                Some((at, action)) if at == n => Some(action),
                other => {
                    *after = other;
                    None
                }
            }
        };
        if let Some(action) = action {
            action();
        }
        Ok(())
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
        let slices = Arc::new(Slices {
            disk: disk.clone(),
            seen: Mutex::default(),
            fail: Mutex::default(),
            failed: AtomicU64::new(0),
            fail_cuts: AtomicBool::new(false),
            after: Mutex::default(),
        });
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

    /// A world of [`config`] whose round 1 of acks was flushed and round 2 made since.
    fn flushed_then_acked() -> Self {
        let mut world = World::new(config());
        world.ack_round(1);
        world.flush().expect("a flush");
        world.ack_round(2);
        world
    }

    /// Acks round `round` of every cursor: a quarter of its topic's entries, scattered over
    /// every ledger, a different quarter each round and cursor.
    fn ack_round(&mut self, round: usize) {
        for (i, c) in self.cursors.iter().enumerate() {
            let ps = &self.positions[i / CURSORS];
            for e in round_entries(i, round) {
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

    /// A flush whose tick fails at its full slice `slice` (0: the first), torn midway; asserts
    /// the flush failed and left its segment as long as where the tick began, and returns that
    /// offset.
    fn failed_flush(&mut self, slice: usize, what: &str) -> u64 {
        let s0 = self.slices.count();
        self.slices.fail_next(slice);
        assert!(self.flush().is_err(), "{what}: the flush succeeded");
        let (segment, begun, _) = self.slices.at(s0);
        let len = self.disk.live_bytes(&segment).expect("a segment").len();
        assert_eq!(len as u64, begun, "{what}: bytes of the failed tick stayed");
        begun
    }

    /// Checks the store a crash or close left on `image`: sound to `verify`, and each cursor
    /// holding every ack it had flushed and no ack it was never answered for. Returns the live
    /// bytes of the journal the reopened store counted.
    fn check(&self, image: MemStorage, what: &str) -> u64 {
        let image: Arc<dyn ackstore::Storage> = Arc::new(image);
        let report = ackstore::check::verify(&image).expect("verify");
        assert!(report.is_sound(), "{what}: {report}");
        let store = Store::open_with_storage(image, self.config.clone()).expect("reopen");
        self.check_cursors(&store, what);
        let live = store.journal_stats().live_bytes;
        store.close().expect("close");
        live
    }

    /// Checks that each cursor of `store` holds every ack it had flushed and no ack never made.
    fn check_cursors(&self, store: &Store, what: &str) {
        for t in 0..TOPICS {
            let topic = store.topic(&format!("t{t}")).expect("topic");
            for c in 0..CURSORS {
                let i = t * CURSORS + c;
                let cursor = topic
                    .open_cursor(&format!("c{c}"), CursorOptions::default())
                    .expect("cursor");
                // Entry by entry, without a set of what is kept: the first entry out of
                // bounds is the one reported.
                for (e, &p) in self.positions[t].iter().enumerate() {
                    if cursor.is_acked(p).expect("is_acked") {
                        assert!(
                            self.acked[i].contains(&e),
                            "{what}: t{t}/c{c} holds ack {e} never made"
                        );
                    } else {
                        assert!(
                            !self.flushed[i].contains(&e),
                            "{what}: t{t}/c{c} lost flushed ack {e}"
                        );
                    }
                }
            }
        }
    }

    /// Closes the store and checks what it left; the live bytes of its journal, kept as ticks
    /// and failed ticks changed them, are what a reopen counts from the records.
    fn close_and_check(self, what: &str) {
        let live = self.store.journal_stats().live_bytes;
        self.store.close().expect("close");
        let image = self.disk.durable_image();
        let counted = self.check(image, what);
        assert_eq!(
            live, counted,
            "{what}: live bytes kept and counted on reopen"
        );
    }
}

/// The entries cursor `i` acks in round `round`: a quarter of its topic's, one in four
/// over every ledger, a different quarter each round and cursor.
fn round_entries(i: usize, round: usize) -> impl Iterator<Item = usize> {
    (0..ENTRIES as usize).filter(move |e| (e + i + round).is_multiple_of(4))
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

/// What a power cut leaves of `disk`: only what was synced, every byte written, or the synced
/// bytes and half of what was written after them.
fn crash_images(disk: &MemStorage) -> [(&'static str, MemStorage); 3] {
    let half = |_: &str, durable: &[u8], live: &[u8]| {
        let keep = durable.len() + live.len().saturating_sub(durable.len()) / 2;
        live[..keep.min(live.len())].to_vec()
    };
    [
        ("synced", disk.durable_image()),
        ("written", disk.crash_image(|_, _, live| live.to_vec())),
        ("half", disk.crash_image(half)),
    ]
}

/// The disk fills at each write of a multi-slice flush in turn (the last partition writes
/// before the tick, each slice of the tick, its last write) and stays full for more acks;
/// a power cut then keeps every cursor between its flushed and its made acks; once the disk
/// has room again the next flush succeeds and keeps every ack.
#[test]
fn a_full_disk_at_every_write_of_a_multi_slice_flush_loses_nothing_once_room_returns() {
    // Where the tick's slices fall among the flush's writes, from a run with room.
    let (first, writes) = {
        let mut world = World::new(config());
        world.ack_round(1);
        let (g0, s0) = (world.disk.growing_writes(), world.slices.count());
        world.flush().expect("flush");
        let first = world.slices.at(s0).2 - g0;
        (first, world.disk.growing_writes() - g0)
    };
    assert!(
        writes > first + 2,
        "{first} of {writes} writes before the slices"
    );
    for k in first.saturating_sub(1)..writes {
        let what = format!("full from write {k} of {writes} (slices from {first})");
        let mut world = World::new(config());
        world.ack_round(1);
        world.disk.enospc_after(Some(k));
        assert!(world.flush().is_err(), "{what}: the flush succeeded");
        world.ack_round(2);
        for (how, image) in crash_images(&world.disk) {
            world.check(image, &format!("{what}, cut, {how}"));
        }
        world.disk.enospc_after(None);
        world
            .flush()
            .unwrap_or_else(|e| panic!("{what}: the flush with room: {e}"));
        world.close_and_check(&what);
    }
}

/// Two ticks in a row fail at different slices, each torn midway: each leaves its segment as
/// long as where it began; a power cut then keeps the last successful tick; the next tick (all
/// markers again) and a delta tick on top of it keep every ack.
#[test]
fn two_failed_ticks_at_different_slices_leave_nothing_and_the_next_ticks_keep_every_ack() {
    let mut world = World::new(config());
    world.ack_round(1);
    for (fail, round) in [(1, 2), (0, 3)] {
        world.failed_flush(fail, &format!("slice {fail}"));
        world.ack_round(round);
    }
    assert_eq!(world.slices.failed.load(Ordering::SeqCst), 2);
    for (how, image) in crash_images(&world.disk) {
        world.check(image, &format!("cut after two failed ticks, {how}"));
    }
    world.flush().expect("the flush after two failed ticks");
    // One more ack a cursor, of the quarter no round acked: a tick of deltas on the markers
    // just committed.
    for (i, c) in world.cursors.iter().enumerate() {
        let e = round_entries(i, 0).nth(25).expect("an entry");
        assert!(c.ack(world.positions[i / CURSORS][e]).expect("ack"), "{i}");
        world.acked[i].insert(e);
    }
    world.flush().expect("the delta flush");
    for (how, image) in crash_images(&world.disk) {
        world.check(image, &format!("cut after the delta tick, {how}"));
    }
    world.close_and_check("after the delta tick");
}

/// Many failed ticks in a row (each at its first or second slice), most with no new ack: each
/// writes every dirty cursor's marker again (a failed tick leaves its cursors dirty), after
/// each the segment is as long as where the tick began, so failed ticks leave no bytes behind,
/// and the flush once the disk has room keeps every ack.
#[test]
fn many_failed_ticks_leave_no_leftover_bytes() {
    let mut world = World::new(config());
    let mut begun = Vec::new();
    world.ack_round(1);
    for n in 0..8 {
        if n == 4 {
            world.ack_round(2);
        }
        begun.push(world.failed_flush(n % 2, &format!("tick {n}")));
    }
    assert_eq!(world.slices.failed.load(Ordering::SeqCst), 8);
    // A failed tick with no new ack begins where the one before it began: nothing of either
    // stayed, and no partition was appended again. The acks before tick 4 appended their
    // partitions first.
    for (n, w) in begun.windows(2).enumerate() {
        if n + 1 != 4 {
            assert_eq!(w[1], w[0], "tick {}: began at {begun:?}", n + 1);
        }
    }
    world.flush().expect("the flush with room");
    world.close_and_check("after eight failed ticks");
}

/// Other threads ack every cursor while ticks fail, and a small ack budget makes cursors
/// evict partitions (appends under the writer's lock too) meanwhile: once a tick succeeds,
/// every ack is kept and none invented.
#[test]
fn acks_and_evictions_from_other_threads_during_failed_ticks_are_kept() {
    let config = support::config::store_budgeted(PER_LEDGER, 2 << 10, 64 << 20);
    let mut world = World::new(config);
    world.ack_round(1);
    let half = world.cursors.len() / 2;
    let made: Vec<Vec<(usize, usize)>> = std::thread::scope(|scope| {
        let workers: Vec<_> = [0..half, half..world.cursors.len()]
            .into_iter()
            .map(|range| {
                let (cursors, positions) = (&world.cursors, &world.positions);
                scope.spawn(move || {
                    let mut made = Vec::new();
                    for round in [2, 3] {
                        for i in range.clone() {
                            let ps = &positions[i / CURSORS];
                            for e in round_entries(i, round) {
                                cursors[i].ack(ps[e]).expect("ack");
                                made.push((i, e));
                            }
                        }
                    }
                    made
                })
            })
            .collect();
        for n in 0..4 {
            world.slices.fail_next(n % 2);
            assert!(world.store.flush_all().is_err(), "tick {n}: succeeded");
        }
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    for (i, e) in made.into_iter().flatten() {
        world.acked[i].insert(e);
    }
    assert_eq!(world.slices.failed.load(Ordering::SeqCst), 4);
    for (how, image) in crash_images(&world.disk) {
        world.check(image, &format!("cut after failed ticks, {how}"));
    }
    world.flush().expect("the flush with room");
    world.close_and_check("after failed ticks among threads");
}

/// Journal segments smaller than one tick: a failed multi-slice tick is followed at once by
/// ticks that roll the journal over; every ack is kept and `verify` is sound after each, and
/// after a power cut right after the first failed tick.
#[test]
fn rollovers_right_after_a_failed_multi_slice_tick_keep_every_ack() {
    let mut world = World::new(support::config::store(PER_LEDGER, 512 << 10));
    for round in 1..4 {
        world.ack_round(round);
        world.failed_flush(1, &format!("round {round}"));
        if round == 1 {
            for (how, image) in crash_images(&world.disk) {
                world.check(image, &format!("cut after the failed tick, {how}"));
            }
        }
        world.flush().expect("the flush with room");
        world.ack_round(round + 4);
        world.flush().expect("a flush after it");
        let image = world.disk.durable_image();
        world.check(image, &format!("round {round}"));
    }
    let stats = world.store.journal_stats();
    assert!(stats.rollovers > 0, "{stats:?}");
    world.close_and_check("after rollovers");
}

/// A tick fails at its second slice and cutting the segment back fails too: the journal
/// latches (every later flush fails until a reopen), and whatever a power cut or the close
/// leaves, with the failed tick's first slice still in the segment and the second torn, each
/// cursor holds its flushed acks and no ack never made.
#[test]
fn a_failed_cut_after_a_failed_later_slice_latches_and_loses_nothing() {
    let mut world = World::flushed_then_acked();
    world.slices.fail_cuts.store(true, Ordering::SeqCst);
    world.slices.fail_next(1);
    assert!(world.flush().is_err(), "the flush succeeded");
    world.slices.fail_cuts.store(false, Ordering::SeqCst);
    world.ack_round(3);
    let after = world.store.flush_all();
    assert!(
        matches!(after, Err(Error::PreviousIo)),
        "the flush after a failed cut: {after:?}"
    );
    for (how, image) in crash_images(&world.disk) {
        world.check(image, &format!("cut after a failed cut, {how}"));
    }
    let _ = world.store.close();
    let image = world.disk.crash_image(|_, _, live| live.to_vec());
    world.check(image, "closed after a failed cut");
}

/// A tick fails at its second slice; the power goes off at every step of the next flush
/// (which writes every marker again): whatever part of its writes the disk kept, each cursor
/// holds every ack of the last successful flush (this one's once it returned) and no ack never
/// made.
#[test]
fn a_power_cut_at_every_step_of_the_flush_after_a_failed_tick_loses_nothing() {
    for n in 0.. {
        let what = format!("cut after {n} steps");
        let mut world = World::new(config());
        world.ack_round(1);
        world.failed_flush(1, &what);
        world.disk.fail_after(Some(n));
        // A read after the last write can fail the flush too: then it is not reported done.
        let done = world.flush().is_ok();
        for (how, image) in crash_images(&world.disk) {
            world.check(image, &format!("{what}, {how}"));
        }
        if done {
            break;
        }
        assert!(n < 100, "{what}: the flush never completed");
    }
}

/// Another owner claims the store between two slices of a tick (it reads the first slice,
/// written but not synced): the old owner's flush fails and every later one too, and the new
/// owner, and a reopen after it closed, hold each cursor's flushed acks and no ack never made.
#[test]
fn a_takeover_between_two_slices_of_a_tick_fences_it_and_loses_nothing() {
    let world = World::flushed_then_acked();
    let next: Arc<Mutex<Option<ackstore::Result<Store>>>> = Arc::default();
    let (disk, config, slot) = (world.disk.clone(), world.config.clone(), next.clone());
    let first = world.slices.count();
    *world.slices.after.lock().unwrap() = Some((
        first,
        Box::new(move || {
            disk.break_lock();
            *slot.lock().unwrap() = Some(Store::open_with_storage(Arc::new(disk), config));
        }),
    ));
    let old = world.store.flush_all();
    assert!(
        matches!(old, Err(Error::Fenced { .. })),
        "the fenced tick: {old:?}"
    );
    assert!(world.slices.count() > first, "no slice written");
    let next = next
        .lock()
        .unwrap()
        .take()
        .expect("the takeover ran")
        .expect("the new owner's open");
    let again = world.store.flush_all();
    assert!(
        matches!(again, Err(Error::Fenced { .. })),
        "the flush after the takeover: {again:?}"
    );
    world.check_cursors(&next, "the new owner");
    for (how, image) in crash_images(&world.disk) {
        world.check(image, &format!("cut with the new owner open, {how}"));
    }
    next.close().expect("the new owner's close");
    drop(next);
    world.check(world.disk.durable_image(), "after the new owner closed");
}

/// A segment's name and bytes.
type SegmentCopy = (String, Vec<u8>);

/// The segment, after a failed tick and the flush that wrote it again, is swapped with the copy
/// it was while the failed tick's first slice was in it (an older copy of the file): `verify`
/// and the open agree (the open succeeds exactly when `verify` finds no damage), and an open
/// that succeeds holds no ack never made.
#[test]
fn a_segment_swapped_with_its_copy_from_inside_a_failed_tick_is_found_or_holds_no_invented_ack() {
    let mut world = World::flushed_then_acked();
    let copy: Arc<Mutex<Option<SegmentCopy>>> = Arc::default();
    let (disk, slot, first) = (world.disk.clone(), copy.clone(), world.slices.count());
    let slices = world.slices.clone();
    *world.slices.after.lock().unwrap() = Some((
        first,
        Box::new(move || {
            let (segment, _, _) = slices.at(first);
            let bytes = disk.live_bytes(&segment).expect("the segment");
            *slot.lock().unwrap() = Some((segment, bytes));
        }),
    ));
    world.failed_flush(1, "the failed tick");
    world.flush().expect("the flush with room");
    world.store.close().expect("close");
    let (segment, bytes) = copy.lock().unwrap().take().expect("the copy");
    let image = world.disk.durable_image();
    image.set_bytes(&segment, bytes).expect("swap");
    let image: Arc<dyn ackstore::Storage> = Arc::new(image);
    let report = ackstore::check::verify(&image).expect("verify");
    match Store::open_with_storage(image, world.config.clone()) {
        Ok(store) => {
            assert!(report.is_sound(), "opened, but verify found: {report}");
            // Damage may lose flushed acks; it must not invent one.
            world.flushed = vec![BTreeSet::new(); world.acked.len()];
            world.check_cursors(&store, "opened after the swap");
        }
        Err(e) => assert!(
            !report.is_sound(),
            "the open refused ({e}), verify found it sound"
        ),
    }
}

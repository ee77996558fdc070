//! A single owner is never refused: with one process owning a store or a topic and no fault
//! injected, no call answers `Fenced`, `PreviousIo`, `Corrupted` or a failed ownership check,
//! over long lives (many topics, ledgers and cursors, cursor creations and deletions, trims,
//! flushes, rollovers, reopens), after power cuts at any step, and after a failed operation
//! (where only the documented latch, `PreviousIo`, may answer).

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::{
    CursorOptions, Error, LedgerConfig, ManagedLedger, MemStorage, Position, Storage, Store,
    StoreConfig,
};

use support::crash::{Points, cut_everywhere_after};
use support::hooked::{Hooked, for_each_sync_fault};
use support::topic::config;

/// Where a life runs: an in-memory disk (which may also crash) or real files.
#[derive(Debug, Clone)]
enum Place {
    Mem(MemStorage),
    Files(std::path::PathBuf),
}

impl Place {
    fn open_store(&self, config: StoreConfig) -> ackstore::Result<Store> {
        match self {
            Self::Mem(disk) => Store::open_with_storage(Arc::new(disk.clone()), config),
            Self::Files(dir) => Store::open(dir, config),
        }
    }

    fn open_topic(&self, config: LedgerConfig) -> ackstore::Result<ManagedLedger> {
        match self {
            Self::Mem(disk) => ManagedLedger::open_with_storage(Arc::new(disk.clone()), config),
            Self::Files(dir) => ManagedLedger::open(dir, config),
        }
    }

    /// The owner goes away: a clean close on real files; on the in-memory disk, every
    /// third generation a clean close, else a process crash (the same disk, its lock gone)
    /// or a power cut (the durable image).
    fn end(&mut self, generation: usize, close: impl FnOnce(bool) -> ackstore::Result<()>) {
        match self {
            Self::Files(_) => {
                close(true).unwrap_or_else(|e| panic!("gen {generation}: close: {e}"))
            }
            Self::Mem(disk) => match generation % 3 {
                0 => close(true).unwrap_or_else(|e| panic!("gen {generation}: close: {e}")),
                1 => {
                    close(false).expect("forget");
                    disk.break_lock();
                }
                _ => {
                    close(false).expect("forget");
                    disk.break_lock();
                    *disk = disk.durable_image();
                }
            },
        }
    }
}

/// The places every life runs on: the in-memory disk, then real files.
fn places() -> Vec<(Place, Option<tempfile::TempDir>)> {
    let dir = support::fds::files_dir();
    vec![
        (Place::Mem(MemStorage::new()), None),
        (Place::Files(dir.path().to_path_buf()), Some(dir)),
    ]
}

fn store_config(per_ledger: u64, segment_bytes: u64) -> StoreConfig {
    support::config::store(per_ledger, segment_bytes)
}

/// Panics when `r` is an error: every call of a single owner without a fault answers `Ok`.
fn ok<T>(what: &str, r: ackstore::Result<T>) -> T {
    r.unwrap_or_else(|e| panic!("{what}: a single owner was refused: {e} ({e:?})"))
}

/// What an owner's turn on a topic does ([`Life::generation`]).
#[derive(Clone, Copy)]
struct Turn {
    /// Entries appended (the topic syncs every `sync_every` of them, and at the end).
    appends: usize,
    sync_every: usize,
    /// Cursors created; every `flush_every`-th acks the first entry and flushes.
    created: usize,
    flush_every: usize,
    /// The oldest live cursors deleted.
    deleted: usize,
}

/// A store's topic: 50 appends and 50 cursors a turn (two entries a ledger).
const STORE_TURN: Turn = Turn {
    appends: 50,
    sync_every: 5,
    created: 50,
    flush_every: 4,
    deleted: 20,
};

/// A topic of its own: 70 appends and 70 cursors a turn (fewer turns write).
const TOPIC_TURN: Turn = Turn {
    appends: 70,
    sync_every: 7,
    created: 70,
    flush_every: 5,
    deleted: 25,
};

/// The model of a topic through its owners: every entry synced, every ack flushed, the
/// cursors that live.
#[derive(Default)]
struct Life {
    synced: Vec<Position>,
    flushed: BTreeSet<Position>,
    live_cursors: BTreeSet<String>,
    next_cursor: usize,
}

impl Life {
    /// One owner's turn on `t` (generation `g`), every call answering `Ok`: reads every entry
    /// synced before, appends and syncs, checks cursor `sub` against the flushed acks, acks one
    /// entry in three of this turn's and flushes, creates cursors (some acking and flushing)
    /// and deletes the oldest, runs `before_trim`, trims, and checks every live cursor is
    /// there.
    fn generation(&mut self, g: &str, t: &ManagedLedger, turn: Turn, before_trim: impl FnOnce()) {
        for p in &self.synced {
            ok(&format!("{g}: read {p}"), t.read(*p));
        }
        for _ in 0..turn.appends {
            self.synced.push(ok(g, t.append(b"entry")));
            if self.synced.len().is_multiple_of(turn.sync_every) {
                ok(&format!("{g}: sync"), t.sync());
            }
        }
        ok(&format!("{g}: sync"), t.sync());
        let c = ok(
            &format!("{g}: cursor sub"),
            t.open_cursor("sub", CursorOptions::default()),
        );
        for p in &self.synced {
            assert_eq!(ok(g, c.is_acked(*p)), self.flushed.contains(p), "{g}: {p}");
        }
        let fresh: Vec<Position> = self.synced[self.synced.len() - turn.appends..].to_vec();
        for p in fresh.iter().step_by(3) {
            ok(g, c.ack(*p));
            self.flushed.insert(*p);
        }
        ok(&format!("{g}: flush"), c.flush());
        for _ in 0..turn.created {
            let name = format!("c{}", self.next_cursor);
            self.next_cursor += 1;
            let extra = ok(
                &format!("{g}: create {name}"),
                t.open_cursor(&name, CursorOptions::default()),
            );
            if self.next_cursor.is_multiple_of(turn.flush_every) {
                ok(g, extra.ack(self.synced[0]));
                ok(&format!("{g}: flush {name}"), extra.flush());
            }
            drop(extra);
            self.live_cursors.insert(name);
        }
        let deleted: Vec<String> = self
            .live_cursors
            .iter()
            .take(turn.deleted)
            .cloned()
            .collect();
        for name in deleted {
            ok(&format!("{g}: delete {name}"), t.delete_cursor(&name));
            self.live_cursors.remove(&name);
        }
        before_trim();
        ok(&format!("{g}: trim"), t.trim_consumed());
        let names: BTreeSet<String> = t.cursor_names().into_iter().collect();
        for name in &self.live_cursors {
            assert!(names.contains(name), "{g}: cursor {name} lost");
        }
    }

    /// The topic has grown past a ledger chunk of ledgers and a cursor table chunk of cursors.
    fn assert_grown(&self, g: &str, t: &ManagedLedger) {
        assert!(
            t.ledgers().len() > 256,
            "{g}: {} ledgers",
            t.ledgers().len()
        );
        assert!(self.next_cursor > 512, "{g}: {} cursors", self.next_cursor);
    }
}

/// One store through twelve owners in turn: more than a catalog chunk of topics, a topic of
/// more than a ledger chunk of ledgers, cursors created and deleted, acks flushed, trims,
/// journal rollovers; every call answers `Ok`, and every flushed ack and synced entry stays.
#[test]
fn a_store_through_many_owners_is_never_refused() {
    for (mut place, _dir) in places() {
        eprintln!("place: {place:?}");
        let topics = ackstore::internals::format::store::CHUNK_TOPICS + 8;
        let mut life = Life::default();
        for generation in 0..12usize {
            let g = format!("gen {generation}");
            let store = ok(
                &format!("{g}: open"),
                place.open_store(store_config(2, 4096)),
            );
            if generation == 0 {
                for k in 0..topics {
                    let t = ok(
                        &format!("{g}: create topic {k}"),
                        store.topic(&format!("t{k}")),
                    );
                    if k % 97 == 0 {
                        ok(&g, t.append(b"x"));
                        ok(&g, t.sync());
                    }
                }
            }
            // A few topics of the chunks and the tail each generation.
            for k in [0, 1, topics / 2, topics - 1] {
                let t = ok(&format!("{g}: topic t{k}"), store.topic(&format!("t{k}")));
                ok(&g, t.append(b"y"));
                ok(&format!("{g}: sync t{k}"), t.sync());
            }
            let t = ok(&format!("{g}: topic main"), store.topic("main"));
            let flush_all = || {
                ok(&format!("{g}: flush all"), store.flush_all());
            };
            life.generation(&g, &t, STORE_TURN, flush_all);
            if generation == 11 {
                life.assert_grown(&g, &t);
            }
            drop(t);
            place.end(generation, |clean| {
                if clean {
                    store.close()
                } else {
                    std::mem::forget(store);
                    Ok(())
                }
            });
        }
    }
}

/// A topic of its own through twelve owners in turn, some of which write nothing (claims one
/// after the other without a write between them): more than a ledger chunk of ledgers, more
/// than a cursor table chunk of cursors created and deleted, trims; every call answers `Ok`.
#[test]
fn a_topic_alone_through_many_owners_is_never_refused() {
    for (mut place, _dir) in places() {
        eprintln!("place: {place:?}");
        let mut life = Life::default();
        for generation in 0..12usize {
            let g = format!("gen {generation}");
            let t = ok(&format!("{g}: open"), place.open_topic(config(2)));
            if generation % 4 == 3 {
                // An owner that only reads: its claim is followed by the next one's.
                for p in &life.synced {
                    ok(&format!("{g}: read {p}"), t.read(*p));
                }
                place.end(generation, |clean| {
                    if clean {
                        t.close()
                    } else {
                        std::mem::forget(t);
                        Ok(())
                    }
                });
                continue;
            }
            life.generation(&g, &t, TOPIC_TURN, || {});
            if generation == 10 {
                life.assert_grown(&g, &t);
            }
            place.end(generation, |clean| {
                if clean {
                    t.close()
                } else {
                    std::mem::forget(t);
                    Ok(())
                }
            });
        }
    }
}

/// One step of a store's life, run from a prepared store; the power is cut after any of its
/// storage operations, and the single owner's reopen of the durable image and a second step
/// answer `Ok` throughout.
fn store_step(disk: &MemStorage, round: u32) -> ackstore::Result<()> {
    let store = Store::open_with_storage(Arc::new(disk.clone()), store_config(2, 2048))?;
    let t = store.topic("main")?;
    for _ in 0..3 {
        t.append(b"step")?;
    }
    t.sync()?;
    let c = t.open_cursor(&format!("s{round}"), CursorOptions::default())?;
    if let Some(first) = t.first_position() {
        c.ack(first)?;
    }
    c.flush()?;
    drop(c);
    let sub = t.open_cursor("sub", CursorOptions::default())?;
    if let Some(last) = t.last_position() {
        sub.ack_cumulative(last)?;
    }
    sub.flush()?;
    drop(sub);
    // The previous step's cursor, when a cut kept its creation.
    let previous = format!("s{}", round.saturating_sub(1));
    if round > 0 && t.cursor_names().contains(&previous) {
        t.delete_cursor(&previous)?;
    }
    t.trim_consumed()?;
    store.topic(&format!("extra{round}"))?;
    store.flush_all()?;
    drop(t);
    store.close()
}

/// A power cut at every storage operation of a store's step, then the single owner's life
/// goes on from the durable image: two more steps, each answering `Ok`.
#[test]
fn a_power_cut_at_any_step_of_a_store_never_refuses_its_next_owner() {
    cut_everywhere_after(
        Points::every_in_release(7),
        |disk| {
            store_step(disk, 0).expect("prepare 0");
            store_step(disk, 1).expect("prepare 1");
        },
        |disk, ()| store_step(disk, 2),
        |disk, cut, _| {
            let image = disk.durable_image();
            for round in 3..5 {
                store_step(&image, round).unwrap_or_else(|e| {
                    panic!("cut {cut:?}: step {round} after the cut: refused: {e} ({e:?})")
                });
            }
        },
    );
}

/// One step of a topic alone (as [`store_step`]).
fn topic_step(disk: &MemStorage, round: u32) -> ackstore::Result<()> {
    let t = ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(2))?;
    for _ in 0..3 {
        t.append(b"step")?;
    }
    t.sync()?;
    let c = t.open_cursor(&format!("s{round}"), CursorOptions::default())?;
    if let Some(first) = t.first_position() {
        c.ack(first)?;
    }
    c.flush()?;
    drop(c);
    let sub = t.open_cursor("sub", CursorOptions::default())?;
    if let Some(last) = t.last_position() {
        sub.ack_cumulative(last)?;
    }
    sub.flush()?;
    drop(sub);
    // The previous step's cursor, when a cut kept its creation.
    let previous = format!("s{}", round.saturating_sub(1));
    if round > 0 && t.cursor_names().contains(&previous) {
        t.delete_cursor(&previous)?;
    }
    t.trim_consumed()?;
    t.close()
}

/// [`a_power_cut_at_any_step_of_a_store_never_refuses_its_next_owner`] for a topic alone.
#[test]
fn a_power_cut_at_any_step_of_a_topic_alone_never_refuses_its_next_owner() {
    cut_everywhere_after(
        Points::every_in_release(7),
        |disk| {
            topic_step(disk, 0).expect("prepare 0");
            topic_step(disk, 1).expect("prepare 1");
        },
        |disk, ()| topic_step(disk, 2),
        |disk, cut, _| {
            let image = disk.durable_image();
            for round in 3..5 {
                topic_step(&image, round).unwrap_or_else(|e| {
                    panic!("cut {cut:?}: step {round} after the cut: refused: {e} ({e:?})")
                });
            }
        },
    );
}

/// Whether `e` is an answer a single owner may get after a failed sync of its own: the error
/// of that sync, or the latch it sets.
fn allowed_after_fault(e: &Error) -> bool {
    matches!(e, Error::Io { .. } | Error::PreviousIo)
}

/// A failed file or directory sync at any point of a store's step: the same handle's later
/// calls answer `Ok`, the failed sync's error or `PreviousIo`, never `Fenced` or corruption,
/// and the next owner's step (from the durable image) answers `Ok`.
#[test]
fn a_failed_sync_never_makes_a_store_fenced() {
    let template = MemStorage::new();
    store_step(&template, 0).expect("prepare 0");
    store_step(&template, 1).expect("prepare 1");
    let mut refused = Vec::new();
    for_each_sync_fault(|fault| {
        let disk = MemStorage::new();
        support::crash::copy_into(&template, &disk);
        let hooked = Hooked::new(disk.clone());
        let storage: Arc<dyn Storage> = Arc::new(hooked.clone());
        let store = Store::open_with_storage(storage, store_config(2, 2048)).expect("open");
        hooked.arm(fault);
        let mut answers: Vec<(&str, ackstore::Result<()>)> = Vec::new();
        let t = store.topic("main");
        let t = match t {
            Ok(t) => t,
            Err(e) => {
                answers.push(("topic", Err(e)));
                store.topic("main").expect("topic after a failed open")
            }
        };
        for k in 0..6 {
            answers.push(("append", t.append(b"f").map(drop)));
            if k % 2 == 1 {
                answers.push(("sync", t.sync()));
            }
        }
        match t.open_cursor("sub", CursorOptions::default()) {
            Ok(c) => {
                if let Some(last) = t.last_position() {
                    answers.push(("ack", c.ack_cumulative(last).map(drop)));
                }
                answers.push(("flush", c.flush()));
            }
            Err(e) => answers.push(("cursor", Err(e))),
        }
        answers.push((
            "new cursor",
            t.open_cursor("fresh", CursorOptions::default()).map(drop),
        ));
        answers.push(("delete cursor", t.delete_cursor("s1")));
        answers.push(("trim", t.trim_consumed().map(drop)));
        answers.push(("new topic", store.topic("other").map(drop)));
        answers.push(("flush all", store.flush_all().map(drop)));
        drop(t);
        answers.push(("close", store.close()));
        let fired = hooked.fired(fault);
        for (what, answer) in &answers {
            match answer {
                Err(e) if !fired || !allowed_after_fault(e) => {
                    refused.push(format!("{fault:?} (fired {fired}): {what}: {e} ({e:?})"));
                }
                _ => {}
            }
        }
        let image = disk.durable_image();
        if let Err(e) = store_step(&image, 2) {
            refused.push(format!("{fault:?}: the next owner's step: {e} ({e:?})"));
        }
        fired
    });
    assert!(refused.is_empty(), "{}", refused.join("\n"));
}

/// The committed samples of earlier releases that hold a topic alone (`topic`) or a store
/// (`store`), by what their records are named.
fn samples_of(record: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(support::samples::data_dir())
        .expect("tests/data")
        .filter_map(|e| {
            let dir = e.ok()?.path();
            let holds = std::fs::read_dir(&dir)
                .ok()?
                .filter_map(Result::ok)
                .any(|f| {
                    f.file_name()
                        .to_string_lossy()
                        .starts_with(&format!("{record}."))
                });
            holds.then(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))?
        })
        .collect();
    names.sort();
    names
}

/// One owner's turn on a topic of a sample: every cursor it lists opened and flushed, entries
/// appended and synced, a cursor created and acked, on even turns one deleted.
fn sample_turn(t: &ManagedLedger, turn: usize) -> ackstore::Result<()> {
    for name in t.cursor_names() {
        let c = t.open_cursor(&name, CursorOptions::default())?;
        c.flush()?;
    }
    let p = t.append(b"after")?;
    t.sync()?;
    let c = t.open_cursor(&format!("turn{turn}"), CursorOptions::default())?;
    c.ack(p)?;
    c.flush()?;
    drop(c);
    if turn.is_multiple_of(2) && turn > 0 {
        t.delete_cursor(&format!("turn{}", turn - 1))?;
    }
    t.trim_consumed().map(drop)
}

/// One owner of the sample at `place` (a store's, or a topic's alone): its turn on every
/// topic, then its end ([`Place::end`]).
fn owner_turn(place: &mut Place, store: bool, turn: usize) -> ackstore::Result<()> {
    if store {
        let s = place.open_store(StoreConfig::default())?;
        for name in s.topic_names() {
            sample_turn(s.topic(&name)?.as_ref(), turn)?;
        }
        place.end(turn, |clean| {
            if clean {
                s.close()
            } else {
                std::mem::forget(s);
                Ok(())
            }
        });
    } else {
        let t = place.open_topic(LedgerConfig::default())?;
        sample_turn(&t, turn)?;
        place.end(turn, |clean| {
            if clean {
                t.close()
            } else {
                std::mem::forget(t);
                Ok(())
            }
        });
    }
    Ok(())
}

/// Every sample of an earlier release (a topic alone, its records also in the layout of the
/// release before versioned names, and a store) opens, is written and reopened by owner after
/// owner: every call answers `Ok`.
#[test]
fn samples_of_earlier_releases_are_never_refused_through_many_owners() {
    let mut refused = Vec::new();
    let topics = samples_of("topic");
    let stores = samples_of("store");
    assert!(
        !topics.is_empty() && !stores.is_empty(),
        "{topics:?} {stores:?}"
    );
    for (sample, store) in topics
        .iter()
        .map(|s| (s, false))
        .chain(stores.iter().map(|s| (s, true)))
    {
        for earlier in [false, true].into_iter().filter(|e| !*e || !store) {
            let disk = MemStorage::new();
            support::samples::load_sample(&disk, sample);
            if earlier {
                support::samples::to_earlier_layout(&disk);
            }
            let dir = support::samples::sample_dir(sample);
            let mut places = vec![Place::Mem(disk)];
            // The store samples with cursor ledgers were made on the in-memory disk, which has
            // no directories: their catalog places topic 1 in a directory of its own, which on
            // real files they do not have, so they open on the in-memory disk only.
            if !sample.starts_with("cursor-ledger-store") {
                places.push(Place::Files(dir.path().to_path_buf()));
            }
            for mut place in places {
                let what = format!("{sample} (earlier layout {earlier}) on {place:?}");
                for turn in 0..6usize {
                    if let Err(e) = owner_turn(&mut place, store, turn) {
                        refused.push(format!("{what}: turn {turn}: {e} ({e:?})"));
                        break;
                    }
                }
            }
        }
    }
    assert!(refused.is_empty(), "{}", refused.join("\n"));
}

/// A broker's storage that keeps the files of each store or topic under a name prefix of one
/// shared directory of real files, and hands on that directory's files
/// ([`support::prefixed::Prefixed`]): a store and a topic alone over it serve their owner
/// through ledgers, cursors and a reopen (every write bracketed by the ownership check of the
/// catalog or the topic record).
#[test]
fn a_store_and_a_topic_alone_over_a_storage_that_prefixes_names_are_never_refused() {
    use support::prefixed::Prefixed;
    let config = || support::topic::config(2);
    let store_dir = tempfile::tempdir().expect("temporary directory");
    let topic_dir = tempfile::tempdir().expect("temporary directory");
    let prefixed = |dir: &tempfile::TempDir| -> Arc<dyn Storage> {
        Arc::new(Prefixed {
            inner: ackstore::FileStorage::open(dir.path(), false).expect("storage"),
            prefix: "tenant-a-",
        })
    };
    let written: Vec<String> = (0..7).map(|i| format!("m{i}")).collect();
    for round in 0..2 {
        let store = ok(
            "store open",
            Store::open_with_storage(prefixed(&store_dir), store_config(2, 1 << 20)),
        );
        let t = ok("topic", store.topic("persistent://t/ns/a"));
        if round == 0 {
            support::topic::append_n(&t, 7);
            let c = ok("cursor", t.open_cursor("sub", CursorOptions::default()));
            ok("flush", c.flush());
            ok("store flush", store.flush_all());
            drop(c);
        }
        assert_eq!(support::topic::entries(&t), written, "store round {round}");
        drop(t);
        ok("store close", store.close());

        let t = ok(
            "topic open",
            ManagedLedger::open_with_storage(prefixed(&topic_dir), config()),
        );
        if round == 0 {
            support::topic::append_n(&t, 7);
            let c = ok("cursor", t.open_cursor("sub", CursorOptions::default()));
            ok("flush", c.flush());
            drop(c);
        }
        assert_eq!(support::topic::entries(&t), written, "topic round {round}");
        ok("topic close", t.close());
    }
}

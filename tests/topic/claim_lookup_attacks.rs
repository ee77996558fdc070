//! A topic opened alone claims its record and every cursor record; a claim of a record whose
//! names the topic's metadata store knows (from its listing at the open's first read, or left
//! by its own writes and claims) is checked by two name lookups, not a listing. These tests
//! attack those claims: owners that still run writing around them, power cuts and failed
//! storage operations at every step of opens claiming many records (with one, two or five
//! names each), names removed behind the owner's back, repeated opens against a model, and
//! `verify` after each.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

use ackstore::{CursorOptions, Error, ManagedLedger, MemStorage, Position, Storage};
use support::tap::{Hook, Op, Tap};

/// The highest version of record `record` in `disk`'s live directory, and every version it has.
fn versions(disk: &MemStorage, record: &str) -> Vec<u64> {
    let mut found: Vec<u64> = disk
        .list()
        .expect("list")
        .iter()
        .filter_map(|f| {
            f.strip_prefix(&format!("{record}."))?
                .strip_suffix(".meta")?
                .parse()
                .ok()
        })
        .collect();
    found.sort_unstable();
    found
}

/// Stops the thread that makes the first operation (a create or a link) naming a file that
/// starts with the armed prefix, before it runs: tells the arrival, then waits for the release.
#[derive(Default)]
struct Gate {
    prefix: Mutex<Option<String>>,
    arrived: Mutex<Option<Sender<()>>>,
    go: Mutex<Option<Receiver<()>>>,
}

impl Gate {
    /// Arms the gate at `prefix`; returns the receiving end of its arrival and the sending end
    /// of its release.
    fn arm(&self, prefix: String) -> (Receiver<()>, Sender<()>) {
        let (arrived, arrival) = channel();
        let (release, go) = channel();
        *self.arrived.lock().unwrap() = Some(arrived);
        *self.go.lock().unwrap() = Some(go);
        *self.prefix.lock().unwrap() = Some(prefix);
        (arrival, release)
    }
}

impl Hook for Gate {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        let armed = self
            .prefix
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|p| op.name().starts_with(p.as_str()));
        if matches!(op, Op::Create(_) | Op::Link(..)) && armed {
            *self.prefix.lock().unwrap() = None;
            let arrived = self.arrived.lock().unwrap().take().expect("armed");
            arrived.send(()).expect("the test waits");
            let go = self.go.lock().unwrap().take().expect("armed");
            go.recv().expect("the test releases the gate");
        }
        Ok(())
    }
}

fn topic_prefix(version: u64) -> String {
    format!("topic.{version:020}.")
}

/// A topic opened alone on `disk` through `hook`.
fn open_through(disk: &MemStorage, hook: Arc<dyn Hook>) -> ackstore::Result<ManagedLedger> {
    let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk.clone()), hook));
    ManagedLedger::open_with_storage(storage, support::topic::config(4))
}

/// Three owners of one topic, each breaking the lock of the one before (as a broken lock file
/// or shared storage lets them). `stale`, the oldest, has a write of the topic record in
/// flight: it read the record at `v0` and is about to write `v0 + 1` (a cursor's creation).
/// `former` opens (its write of the record takes `v0 + 1`). The new owner `newer` opens: it
/// reads the record at `v0 + 1`, and is about to claim it, when `former`, still the owner (no
/// claim has fenced it yet), creates three cursors (the record moves to `v0 + 4`, each write
/// removing the versions it replaced), and `stale`'s write lands in the freed name `v0 + 1`
/// (a stray below the record, refused). Then `newer`'s claim runs.
///
/// `former`'s three cursors were created before `newer`'s claim: `newer`'s open must be
/// refused (`Fenced`: the record moved on since its read) or see them; and of `newer` and
/// `former`, one owns the topic afterwards, so the next write of the other is refused.
#[test]
fn an_open_whose_claim_links_from_a_stray_does_not_take_a_topic_that_moved_on() {
    let disk = MemStorage::new();
    {
        let first = support::topic::reopen(&disk, 4);
        let ps = support::topic::append_n(&first, 8);
        let a = first
            .open_cursor("a", CursorOptions::default())
            .expect("cursor");
        a.ack(ps[0]).expect("ack");
        a.flush().expect("flush");
        drop(a);
        first.close().expect("close");
    }
    disk.break_lock();
    let stale_gate = Arc::new(Gate::default());
    let stale = open_through(&disk, stale_gate.clone()).expect("open");
    let v0 = *versions(&disk, "topic").last().expect("a topic record");
    let (stale_arrival, stale_release) = stale_gate.arm(topic_prefix(v0 + 1));

    std::thread::scope(|scope| {
        // `stale` starts a cursor's creation; its write of the topic record stops before its
        // temporary file (the record read at v0, the version it builds on).
        let stale_write = scope.spawn(|| {
            stale
                .open_cursor("x", CursorOptions::default())
                .map(|c| c.name().to_owned())
        });
        stale_arrival
            .recv()
            .expect("the stale writer reaches its write");

        // `former` takes over: its open writes the record once.
        disk.break_lock();
        let former = support::topic::reopen(&disk, 4);
        let v1 = *versions(&disk, "topic").last().expect("record");
        assert_eq!(v1, v0 + 1, "{:?}", versions(&disk, "topic"));

        // `newer` opens, stopped right before its claim of the topic record.
        disk.break_lock();
        let newer_gate = Arc::new(Gate::default());
        let (newer_arrival, newer_release) = newer_gate.arm(topic_prefix(v1 + 1));
        let newer_disk = disk.clone();
        let newer_open = scope.spawn(move || open_through(&newer_disk, newer_gate));
        newer_arrival
            .recv()
            .expect("the new owner reaches its claim");

        // `former`, still the owner, creates three cursors.
        let mut made = Vec::new();
        for name in ["b", "c", "d"] {
            let cursor = former
                .open_cursor(name, CursorOptions::default())
                .expect("the owner creates a cursor");
            cursor.flush().expect("flush");
            made.push(name);
        }
        let after = versions(&disk, "topic");
        assert!(
            *after.last().expect("record") >= v1 + 3 && !after.contains(&v1),
            "{after:?}"
        );

        // `stale`'s write lands in the freed name, and is refused.
        stale_release.send(()).expect("release");
        let stale_result = stale_write.join().expect("no panic");
        assert!(
            matches!(stale_result, Err(Error::Fenced { .. })),
            "the stale owner's cursor creation: {stale_result:?}"
        );
        let strays = versions(&disk, "topic");

        newer_release.send(()).expect("release");
        let newer = newer_open.join().expect("no panic");
        let former_next = former
            .open_cursor("e", CursorOptions::default())
            .map(|c| c.name().to_owned());
        match &newer {
            Err(Error::Fenced { .. }) => {}
            Err(e) => panic!("the new owner's open failed otherwise: {e}"),
            Ok(newer) => {
                let names: BTreeSet<String> = newer.cursor_names().into_iter().collect();
                assert!(
                    made.iter().all(|m| names.contains(*m)) && former_next.is_err(),
                    "the new owner's open returned Ok with cursors {names:?} (the former \
                     owner created {made:?} before the new owner's claim), and the former \
                     owner's next creation returned {former_next:?}; topic record versions \
                     before the claim {strays:?}, now {:?}",
                    versions(&disk, "topic")
                );
            }
        }
    });
}

fn sub(c: usize) -> String {
    format!("sub-{c}")
}

/// The entries cursor `c` acks: a few of its own, so each cursor's state differs.
fn acked_by(ps: &[Position], c: usize) -> BTreeSet<Position> {
    ps.iter().skip(c % 5).step_by(5).copied().collect()
}

/// The entries of `ps` that `cursor` counts as acknowledged (at or below mark-delete, or acked).
fn acked(cursor: &ackstore::Cursor, ps: &[Position]) -> BTreeSet<Position> {
    let mark = cursor.mark_delete_position().expect("mark-delete");
    ps.iter()
        .copied()
        .filter(|&p| mark.is_some_and(|m| p <= m) || cursor.is_acked(p).expect("is_acked"))
        .collect()
}

/// The most names any one record has in `storage`'s directory.
fn most_names(storage: &dyn Storage) -> usize {
    let mut names = BTreeMap::<String, usize>::new();
    for file in storage.list().expect("list") {
        if let Some(record) = ackstore::internals::meta::record_of_file(&file) {
            *names.entry(record.to_owned()).or_default() += 1;
        }
    }
    names.into_values().max().unwrap_or(0)
}

/// Asserts that `verify` finds no damage in `storage` (a power cut or a failed operation is
/// never damage), and that the topic then opens.
fn assert_sound(storage: Arc<dyn Storage>, what: &str) {
    let report = ackstore::check::verify(&storage).expect("verify runs");
    assert_eq!(report.damaged(), 0, "{what}: {report}");
}

/// A topic of 20 entries over 5 ledgers whose `cursors` cursors each acked their entries and
/// flushed, closed; each cursor record then has `names` names (reopens claim the records, and
/// names beyond two are linked as power cuts that undid a claim's removals leave them).
fn populate(disk: &MemStorage, cursors: usize, names: u64) -> Vec<Position> {
    let topic = support::topic::reopen(disk, 4);
    let ps = support::topic::append_n(&topic, 20);
    for c in 0..cursors {
        let cursor = topic
            .open_cursor(&sub(c), CursorOptions::default())
            .expect("cursor");
        for p in acked_by(&ps, c) {
            cursor.ack(p).expect("ack");
        }
        cursor.flush().expect("flush");
    }
    topic.close().expect("close");
    for _ in 0..names.max(1) + 1 {
        disk.break_lock();
        support::topic::reopen(disk, 4).close().expect("close");
    }
    for c in 0..cursors {
        let record = format!("cursor-{c}");
        let found = versions(disk, &record);
        let Some(&head) = found.last() else {
            continue;
        };
        for older in head.saturating_sub(names - 1).max(1)..head {
            let name = format!("{record}.{older:020}.meta");
            if !found.contains(&older) {
                disk.link(&format!("{record}.{head:020}.meta"), &name)
                    .expect("link");
            }
        }
    }
    ps
}

/// Opens the topic on `storage`, checks every cursor's acknowledged entries against the model
/// (each flushed everything before), and closes it.
fn open_and_check(storage: Arc<dyn Storage>, cursors: usize, ps: &[Position], what: &str) {
    let topic = ManagedLedger::open_with_storage(storage.clone(), support::topic::config(4))
        .unwrap_or_else(|e| panic!("{what}: open: {e}"));
    assert!(
        most_names(storage.as_ref()) <= 2,
        "{what}: a record has more than two names after an open"
    );
    for c in 0..cursors {
        let cursor = topic
            .open_cursor(&sub(c), CursorOptions::default())
            .expect("cursor");
        assert_eq!(acked(&cursor, ps), acked_by(ps, c), "{what}: cursor {c}");
    }
    topic
        .close()
        .unwrap_or_else(|e| panic!("{what}: close: {e}"));
}

#[test]
fn a_power_cut_at_every_step_of_an_open_claiming_records_of_one_two_and_five_names_keeps_every_ack()
{
    let cursors = 6;
    for names in [1, 2, 5] {
        let clean = support::crash::cut_everywhere_after(
            support::crash::Points::EVERY,
            |disk| {
                let ps = populate(disk, cursors, names);
                assert!(names < 2 || most_names(disk) >= names as usize);
                disk.break_lock();
                ps
            },
            |disk, ps| {
                let storage: Arc<dyn Storage> = Arc::new(disk.clone());
                let opened = ManagedLedger::open_with_storage(storage, support::topic::config(4));
                let closed = opened.and_then(|t| t.close());
                if closed.is_ok() {
                    assert!(most_names(disk) <= 2, "{names} names: after a clean open");
                }
                ps
            },
            |disk, cut, ps| {
                let what = format!("{names} names, cut {}/{}", cut.n, cut.total);
                let image = disk.durable_image();
                assert_sound(Arc::new(image.clone()), &what);
                open_and_check(Arc::new(image.clone()), cursors, &ps, &what);
                assert_sound(Arc::new(image), &what);
            },
        );
        // At least a link per cursor record claimed.
        assert!(
            clean.total > cursors as u64,
            "{names} names: {} steps",
            clean.total
        );
    }
}

#[test]
fn a_failed_storage_operation_at_every_step_of_an_open_claiming_records_loses_and_invents_nothing()
{
    let cursors = 5;
    for names in [1, 2, 5] {
        let template = MemStorage::new();
        let ps = populate(&template, cursors, names);
        for at in 1.. {
            let disk = MemStorage::new();
            support::crash::copy_into(&template, &disk);
            let fail = Arc::new(support::tap::FailOne::default());
            fail.arm(at);
            let what = format!("{names} names, operation {at} failed");
            let opened = open_through(&disk, fail.clone());
            // Only the open's operations: what follows is checked without failures.
            let failed = fail.failed.lock().unwrap().take();
            fail.arm(0);
            match opened {
                Ok(topic) => {
                    // An open that succeeded through a failed operation holds every ack.
                    for c in 0..cursors {
                        if let Ok(cursor) = topic.open_cursor(&sub(c), CursorOptions::default()) {
                            assert_eq!(acked(&cursor, &ps), acked_by(&ps, c), "{what}: {c}");
                        }
                    }
                    let _ = topic.close();
                }
                Err(Error::Fenced { what: fenced }) => {
                    panic!("{what}: a failed operation fenced the only owner: {fenced}")
                }
                Err(_) => {}
            }
            disk.break_lock();
            assert_sound(Arc::new(disk.clone()), &what);
            open_and_check(Arc::new(disk.clone()), cursors, &ps, &what);
            if failed.is_none() {
                assert!(at > 10, "{what}: the open made too few operations");
                break;
            }
        }
    }
}

/// Runs `action` once, before the first link of a cursor record (the open's first claim of
/// one, after its metadata store listed the directory).
struct BeforeFirstCursorClaim(Mutex<Option<Box<dyn FnOnce() + Send>>>);

impl Hook for BeforeFirstCursorClaim {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        if let Op::Link(from, _) = op
            && from.starts_with("cursor-")
            && from.ends_with(".meta")
        {
            let action = self.0.lock().unwrap().take();
            if let Some(action) = action {
                action();
            }
        }
        Ok(())
    }
}

#[test]
fn names_removed_or_linked_behind_the_owner_between_its_listing_and_its_claims_cost_no_ack() {
    let cursors = 6;
    for (names, add) in [(2, false), (5, false), (2, true), (1, true)] {
        let disk = MemStorage::new();
        let ps = populate(&disk, cursors, names);
        disk.break_lock();
        let behind = disk.clone();
        // Every name below each cursor record's highest goes (another party's removals), or
        // a stray is linked below it (a former owner's write that landed in a freed name).
        let action = move || {
            for c in 0..cursors {
                let record = format!("cursor-{c}");
                let found = versions(&behind, &record);
                let head = *found.last().expect("record");
                if add {
                    let stray = head.saturating_sub(3).max(1);
                    let _ = behind.link(
                        &format!("{record}.{head:020}.meta"),
                        &format!("{record}.{stray:020}.meta"),
                    );
                } else {
                    for older in &found[..found.len() - 1] {
                        behind
                            .remove(&format!("{record}.{older:020}.meta"))
                            .expect("remove");
                    }
                }
            }
        };
        let hook = Arc::new(BeforeFirstCursorClaim(Mutex::new(Some(Box::new(action)))));
        let what = format!("{names} names, strays added: {add}");
        let topic = open_through(&disk, hook).unwrap_or_else(|e| panic!("{what}: {e}"));
        for c in 0..cursors {
            let cursor = topic
                .open_cursor(&sub(c), CursorOptions::default())
                .expect("cursor");
            assert_eq!(acked(&cursor, &ps), acked_by(&ps, c), "{what}: cursor {c}");
        }
        topic.close().expect("close");
        assert!(
            most_names(&disk) <= 3,
            "{what}: {} names",
            most_names(&disk)
        );
        assert_sound(Arc::new(disk.clone()), &what);
        disk.break_lock();
        open_and_check(Arc::new(disk.clone()), cursors, &ps, &what);
        assert!(most_names(&disk) <= 2, "{what}: after the next open");
    }
}

/// What the application was told of one cursor: acks flushed (kept after any crash) and acks
/// made (a crash may keep them or not).
#[derive(Debug, Default, Clone)]
struct Told {
    flushed: BTreeSet<Position>,
    made: BTreeSet<Position>,
}

/// `rounds` opens of a topic alone with many cursors on `storage()` (a fresh handle on the same
/// directory each time; `cut` turns the previous round's end into a power cut, when the
/// storage has one), each followed by acks, flushes, cursor creations and deletions, and
/// checked against the model right after the open.
fn opens_against_a_model(
    seed: u64,
    rounds: usize,
    mut storage: impl FnMut(bool) -> Arc<dyn Storage>,
    can_cut: bool,
) {
    let mut rng = support::workload::Rng::new(seed);
    let mut model: BTreeMap<String, Told> = BTreeMap::new();
    let mut next_name = 0;
    let mut ps = Vec::new();
    let mut cut = false;
    for round in 0..rounds {
        let storage = storage(cut);
        let what = format!("seed {seed} round {round}");
        let topic = ManagedLedger::open_with_storage(storage.clone(), support::topic::config(4))
            .unwrap_or_else(|e| panic!("{what}: open: {e}"));
        assert!(
            most_names(storage.as_ref()) <= 2,
            "{what}: more than two names"
        );
        let names: BTreeSet<String> = topic.cursor_names().into_iter().collect();
        assert_eq!(
            names,
            model.keys().cloned().collect::<BTreeSet<_>>(),
            "{what}: cursors"
        );
        if ps.is_empty() {
            ps = support::topic::append_n(&topic, 24);
        }
        let mut open = BTreeMap::new();
        for (name, told) in &mut model {
            let cursor = topic
                .open_cursor(name, CursorOptions::default())
                .expect("cursor");
            let got = acked(&cursor, &ps);
            assert!(
                told.flushed.is_subset(&got) && got.is_subset(&told.made),
                "{what}: {name}: got {got:?}, flushed {:?}, made {:?}",
                told.flushed,
                told.made
            );
            told.flushed.clone_from(&got);
            told.made = got;
            open.insert(name.clone(), cursor);
        }
        for _ in 0..rng.below(3) {
            let name = format!("c{next_name}");
            next_name += 1;
            let cursor = topic
                .open_cursor(&name, CursorOptions::default())
                .expect("create");
            model.insert(name.clone(), Told::default());
            open.insert(name, cursor);
        }
        let names: Vec<String> = open.keys().cloned().collect();
        for name in names {
            let told = model.get_mut(&name).expect("modelled");
            match rng.below(10) {
                0 => {
                    drop(open.remove(&name));
                    topic.delete_cursor(&name).expect("delete");
                    model.remove(&name);
                }
                1..=6 => {
                    let cursor = &open[&name];
                    for _ in 0..rng.below(4) {
                        let p = ps[rng.index(ps.len())];
                        cursor.ack(p).expect("ack");
                        told.made.insert(p);
                    }
                    if rng.chance(60) {
                        cursor.flush().expect("flush");
                        told.flushed.clone_from(&told.made);
                    }
                }
                _ => {}
            }
        }
        cut = can_cut && rng.chance(30);
        if cut {
            drop(open);
            drop(topic);
        } else {
            drop(open);
            topic.close().expect("close");
            for told in model.values_mut() {
                told.flushed.clone_from(&told.made);
            }
            assert_sound(storage.clone(), &what);
        }
    }
}

#[test]
fn thirty_opens_of_a_topic_alone_with_many_cursors_keep_the_model_in_memory() {
    let seed = support::workload::seed_from_env("ACKSTORE_SEED");
    let mut disk = MemStorage::new();
    opens_against_a_model(
        seed,
        30,
        |cut| {
            if cut {
                disk = disk.durable_image();
            }
            disk.break_lock();
            Arc::new(disk.clone())
        },
        true,
    );
}

#[test]
fn twenty_opens_of_a_topic_alone_with_many_cursors_keep_the_model_on_real_files() {
    let seed = support::workload::seed_from_env("ACKSTORE_SEED");
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().to_owned();
    opens_against_a_model(
        seed,
        20,
        |_| Arc::new(ackstore::FileStorage::open(&path, true).expect("storage")),
        false,
    );
}

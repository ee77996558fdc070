//! Attacks on the fence of a RADOS namespace taken over by a newer owner, as a broker fleet
//! makes them: an older owner's handle that outlived its lease (released, or lost and taken
//! again by the same process), paused owners resumed at every step of their work while a new
//! owner claims the store, two new owners in sequence, and the read-only commands beside a
//! running owner. Each checks the invariants of design.md: nothing Ok is lost, nothing is
//! acked that was not, a fenced owner gets no `Ok` after the claim, and none of its writes
//! lands on an object after a newer owner read it.

#![cfg(feature = "rados")]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ackstore::{
    CursorOptions, Error, ManagedLedger, Position, RadosStorage, Storage, Store, StoreConfig,
};
use support::rados::{cluster, fresh_namespace, fresh_storage, pool};
use support::takeover;

/// A lease no renewal of which falls within a test: an older owner never learns from its lease
/// that it was replaced, so only the fence can refuse its writes.
const LONG_LEASE: Duration = Duration::from_secs(600);

fn same_namespace(s: &RadosStorage) -> RadosStorage {
    let namespace = s.location().rsplit('/').next().unwrap().to_owned();
    cluster().storage(&pool(), &namespace).unwrap()
}

fn fenced<T: std::fmt::Debug>(r: &ackstore::Result<T>) -> bool {
    matches!(r, Err(Error::Fenced { .. }))
}

/// The bytes of `name` as a handle that owns nothing reads them (no stamp, no cache of the
/// handles under test).
fn bytes_of(s: &RadosStorage, name: &str) -> Vec<u8> {
    let probe = same_namespace(s);
    let f = probe.open(name).expect("open");
    let mut buf = vec![0; usize::try_from(f.size().expect("size")).unwrap()];
    f.read_exact_at(&mut buf, 0).expect("read");
    buf
}

#[test]
fn a_file_kept_past_its_owners_release_never_writes_over_what_a_newer_owner_read() {
    let old = fresh_storage("fa-released").with_lease(LONG_LEASE);
    let guard = old.lock().unwrap();
    let file = old.create("ledger-1.log").unwrap();
    file.write_all_at(b"before", 0).unwrap();
    file.sync_data().unwrap();
    old.create("topic.meta").unwrap();
    // The owner releases the namespace (a close) while a thread of it still holds the file.
    drop(guard);
    let new = same_namespace(&old).with_lease(LONG_LEASE);
    let _new_guard = new.lock().unwrap();
    assert_eq!(
        (*new.open("ledger-1.log").unwrap().map().unwrap()).as_ref(),
        b"before"
    );
    assert!(new.exists("topic.meta").unwrap());

    file.write_all_at(b"after", 6).unwrap();
    let synced = file.sync_data();
    let truncated = file.set_len(0);
    let removed = old.remove("topic.meta");
    assert_eq!(
        bytes_of(&old, "ledger-1.log"),
        b"before",
        "sync {synced:?}, truncate {truncated:?}"
    );
    assert!(
        fenced(&synced) && fenced(&truncated),
        "the released owner's file writes are fenced"
    );
    assert!(fenced(&removed), "the released owner's remove: {removed:?}");
    assert!(new.exists("topic.meta").unwrap());
}

#[test]
fn a_file_of_an_earlier_lease_is_fenced_once_the_same_handle_locks_again() {
    let old = fresh_storage("fa-relock").with_lease(LONG_LEASE);
    let first = old.lock().unwrap();
    let file = old.create("ledger-1.log").unwrap();
    file.write_all_at(b"before", 0).unwrap();
    file.sync_data().unwrap();
    // Another broker takes the namespace over and hands it back (closes).
    let other = same_namespace(&old).with_lease(LONG_LEASE);
    other.break_lock().unwrap();
    drop(other.lock().unwrap());
    // The first broker, told its lease is gone, opens the namespace again through the same
    // handle while a paused thread of its earlier session still holds the file.
    let again = old.lock().unwrap();
    assert!(old.epoch() > 1);
    let reread = old.open("ledger-1.log").unwrap();
    assert_eq!((*reread.map().unwrap()).as_ref(), b"before");

    let synced = file
        .write_all_at(b"after", 6)
        .and_then(|()| file.sync_data());
    assert_eq!(bytes_of(&old, "ledger-1.log"), b"before", "sync {synced:?}");
    assert!(fenced(&synced), "the earlier session's write: {synced:?}");
    // The current session writes as usual.
    reread.write_all_at(b"!", 6).unwrap();
    reread.sync_data().unwrap();
    drop((first, again));
}

/// A store configuration with topics of 3 entries per ledger, no flusher pool (the owners' own
/// flushes are the only ones, so the storage operations of a run are the same every time) and
/// small journal segments, so the former owner's flushes roll the journal over.
fn store_config() -> StoreConfig {
    StoreConfig {
        ledger: support::topic::config(3),
        ..support::config::store_journal(JOURNAL_SEGMENT)
    }
}

const JOURNAL_SEGMENT: u64 = 4096;

fn storage_of(ns: &str) -> RadosStorage {
    cluster()
        .storage(&pool(), ns)
        .expect("namespace")
        .with_lease(LONG_LEASE)
}

/// A new owner of the store in `ns`: the lock broken (the former owner is presumed dead), the
/// store claimed, topic `t` opened.
fn new_owner(ns: &str) -> Store {
    let s = storage_of(ns);
    s.break_lock().expect("break the lock");
    let store =
        Store::open_with_storage(Arc::new(s), store_config()).expect("the new owner claims");
    store.topic("t").expect("the new owner opens the topic");
    store
}

/// What an owner's run saw of its own calls.
#[derive(Debug, Default)]
struct Run {
    /// Entries whose `sync` returned `Ok`.
    synced: Vec<Position>,
    /// Positions acknowledged by a `flush` that returned `Ok`.
    flushed: Vec<Position>,
    /// Every position the run acknowledged (flushed or not): nothing else may be acked.
    acked: Vec<Position>,
    /// A trim ran: the ledgers it may have removed held only entries at or before this.
    trimmed_to: Option<Position>,
    /// The ledgers the trim reported removed.
    trimmed: Vec<u64>,
    /// Calls that began after a newer owner's claim and returned `Ok` anyway.
    ok_after_claim: Vec<&'static str>,
}

/// An owner's work on topic `t` of `store`, under cursor `cursor`: appends that roll ledgers,
/// syncs, the cursor created, acked and flushed often (rolling the journal over), a trim,
/// more appends. Stops at the first error. `claimed` tells whether a newer owner has claimed
/// the store: a durable call that begins after it must not return `Ok`.
fn owner_workload(store: &Store, cursor: &str, claimed: &dyn Fn() -> bool) -> Run {
    let mut run = Run::default();
    let _ = (|| -> ackstore::Result<()> {
        let durable =
            |what: &'static str, run: &mut Run, f: &mut dyn FnMut() -> ackstore::Result<()>| {
                let after = claimed();
                f()?;
                if after {
                    run.ok_after_claim.push(what);
                }
                Ok(())
            };
        let topic = store.topic("t")?;
        let mut appended = Vec::new();
        for _ in 0..3 {
            for _ in 0..2 {
                appended.push(topic.append(cursor.as_bytes())?);
            }
            durable("sync", &mut run, &mut || topic.sync())?;
            run.synced.clone_from(&appended);
        }
        let mut c = None;
        durable("cursor creation", &mut run, &mut || {
            c = Some(topic.open_cursor(cursor, CursorOptions::default())?);
            Ok(())
        })?;
        let c = c.expect("opened");
        // Acks one by one, each flushed: many markers, so the journal rolls over.
        for p in appended.iter().take(4) {
            run.acked.push(*p);
            c.ack(*p)?;
            durable("flush", &mut run, &mut || c.flush().map(drop))?;
            run.flushed.push(*p);
        }
        run.acked.push(appended[5]);
        c.ack(appended[5])?;
        durable("flush", &mut run, &mut || c.flush().map(drop))?;
        run.flushed.push(appended[5]);
        run.trimmed_to = Some(appended[3]);
        let mut trimmed = Vec::new();
        durable("trim", &mut run, &mut || {
            trimmed = topic.trim_consumed()?;
            Ok(())
        })?;
        if trimmed.is_empty() {
            // Nothing to remove: no write was made, so an `Ok` says nothing about the claim.
            run.ok_after_claim.retain(|w| *w != "trim");
        }
        run.trimmed = trimmed;
        appended.push(topic.append(b"last")?);
        durable("sync", &mut run, &mut || topic.sync())?;
        run.synced = appended;
        Ok(())
    })();
    run
}

/// A store in a fresh namespace holding topic `t` with one synced entry, closed.
fn prepared(what: &str) -> String {
    let ns = fresh_namespace(what);
    let store = Store::open_with_storage(Arc::new(storage_of(&ns)), store_config()).expect("open");
    let topic = store.topic("t").expect("topic");
    topic.append(b"p").expect("append");
    topic.sync().expect("sync");
    drop(topic);
    store.close().expect("close");
    ns
}

/// Checks `run` of a fenced owner against what `topic` (a later owner's) holds.
fn check_kept(step: u64, who: &str, run: &Run, topic: &ManagedLedger, cursor: &str) -> Vec<String> {
    let mut failures = Vec::new();
    if !run.ok_after_claim.is_empty() {
        failures.push(format!(
            "step {step}: {who} got Ok after a newer owner's claim for {:?} (trim removed {:?})",
            run.ok_after_claim, run.trimmed
        ));
    }
    for p in run
        .synced
        .iter()
        .filter(|p| run.trimmed_to.is_none_or(|t| **p > t))
    {
        if let Err(e) = topic.read(*p) {
            failures.push(format!("step {step}: {who}'s synced {p} lost: {e}"));
        }
    }
    if topic.cursor_names().iter().any(|n| n == cursor) {
        let c = topic
            .open_cursor(cursor, CursorOptions::default())
            .expect("cursor");
        for p in &run.flushed {
            if !c.is_acked(*p).expect("is_acked") {
                failures.push(format!("step {step}: {who}'s flushed ack of {p} lost"));
            }
        }
        for p in run.synced.iter().filter(|p| !run.acked.contains(p)) {
            if c.is_acked(*p).unwrap_or(false) {
                failures.push(format!(
                    "step {step}: {p} acked under {who}'s cursor, never acked"
                ));
            }
        }
    } else if !run.flushed.is_empty() {
        failures.push(format!(
            "step {step}: {who}'s cursor with flushed acks is gone"
        ));
    }
    failures
}

/// The storage operations of one former owner's run, without a takeover.
fn steps_of_a_run() -> u64 {
    let ns = prepared("fa-steps");
    let hooked = takeover::Disk::new(Arc::new(storage_of(&ns)));
    let store = Store::open_with_storage(hooked.storage.clone(), store_config()).expect("open");
    let before = hooked.hook.count();
    let run = owner_workload(&store, "old", &|| false);
    assert_eq!(
        run.synced.len(),
        7,
        "the workload runs whole without a takeover: {run:?}"
    );
    hooked.hook.count() - before
}

/// Runs the takeover after storage operation `step` of the former owner's run: `owners` new
/// owners claim the store one after the other (each but the last left running, as if paused),
/// then the former owner and every paused one go on with their work, then the last new owner
/// works. Returns what broke.
fn takeover_at(step: u64, owners: usize) -> Vec<String> {
    let ns = prepared("fa-step");
    let hooked = takeover::Disk::new(Arc::new(storage_of(&ns)));
    let old = Store::open_with_storage(hooked.storage.clone(), store_config()).expect("open");
    let claimed = Arc::new(AtomicBool::new(false));
    let slot = {
        let (ns, claimed) = (ns.clone(), claimed.clone());
        hooked.arm_takeover(step, move || {
            let stores: Vec<Store> = (0..owners).map(|_| new_owner(&ns)).collect();
            claimed.store(true, Ordering::SeqCst);
            stores
        })
    };
    let run = owner_workload(&old, "old", &|| claimed.load(Ordering::SeqCst));
    let Some(mut stores) = slot.lock().expect("slot").take() else {
        return vec![format!("step {step}: the takeover did not run")];
    };
    let mut failures = Vec::new();
    // The paused new owners resume after a newer one's claim: fenced as the former one is.
    let last = stores.pop().expect("one owner at least");
    let paused: Vec<Run> = stores
        .iter()
        .enumerate()
        .map(|(i, s)| owner_workload(s, &format!("paused-{i}"), &|| true))
        .collect();
    let topic = match last.topic("t") {
        Ok(t) => t,
        Err(e) => return vec![format!("step {step}: the last owner's topic: {e}")],
    };
    failures.extend(check_kept(step, "the former owner", &run, &topic, "old"));
    for (i, r) in paused.iter().enumerate() {
        failures.extend(check_kept(
            step,
            "a paused new owner",
            r,
            &topic,
            &format!("paused-{i}"),
        ));
    }
    // The last owner works as a single owner does: never fenced, everything kept.
    let mine = owner_workload(&last, "mine", &|| false);
    if mine.synced.len() != 7 {
        failures.push(format!("step {step}: the last owner was stopped: {mine:?}"));
    }
    if let Err(e) = last.close() {
        failures.push(format!("step {step}: the last owner's close: {e}"));
    }
    drop((topic, last, stores, old));
    let again =
        Store::open_with_storage(Arc::new(storage_of(&ns)), store_config()).expect("reopen");
    let topic = again.topic("t").expect("topic");
    failures.extend(check_kept(step, "the last owner", &mine, &topic, "mine"));
    failures.extend(check_kept(
        step,
        "the former owner (after a restart)",
        &run,
        &topic,
        "old",
    ));
    failures
}

/// Set to run a takeover at every step of a run (about 0.6 s a step on the single-OSD test
/// cluster, 260 steps); without it, every `stride`-th step, to keep the module's run short.
const EVERY_STEP: &str = "ACKSTORE_FENCING_EVERY_STEP";

fn every_step_or(stride: u64) -> u64 {
    if std::env::var_os(EVERY_STEP).is_some() {
        1
    } else {
        stride
    }
}

/// Steps of a run of `total` storage operations at which a takeover is placed: every
/// `stride`-th, starting at the first.
fn steps(total: u64, stride: u64) -> Vec<u64> {
    (1..=total)
        .step_by(usize::try_from(stride).unwrap())
        .collect()
}

/// Takes the store over (by `new_owners` owners in sequence) at every `default_stride`-th step
/// of the paused owner's run (every step with `ACKSTORE_FENCING_EVERY_STEP`), and fails with
/// every step's findings.
fn takeover_at_steps(default_stride: u64, new_owners: usize) {
    let total = steps_of_a_run();
    let mut failures = Vec::new();
    for n in steps(total, every_step_or(default_stride)) {
        failures.extend(takeover_at(n, new_owners));
    }
    assert!(
        failures.is_empty(),
        "{} steps:\n{}",
        total,
        failures.join("\n")
    );
}

#[test]
fn a_store_taken_over_at_any_step_of_a_paused_owners_work_keeps_every_ok_and_fences_it() {
    takeover_at_steps(11, 1);
}

#[test]
fn two_new_owners_in_sequence_fence_the_former_and_the_paused_one_alike() {
    takeover_at_steps(43, 2);
}

/// A broker reopens a store through the handle it had, after another broker took the store
/// over and handed it back, while a thread of its earlier instance still holds a topic and a
/// cursor: that instance is refused everything, and the reopened one keeps what the other
/// broker flushed and what it flushes itself.
#[test]
fn a_store_reopened_through_the_same_handle_fences_its_earlier_instance() {
    let ns = prepared("fa-same-handle");
    let handle = storage_of(&ns);
    let earlier = Store::open_with_storage(Arc::new(handle.clone()), store_config()).expect("open");
    let old_topic = earlier.topic("t").expect("topic");
    let ps: Vec<Position> = (0..5)
        .map(|_| old_topic.append(b"e").expect("append"))
        .collect();
    old_topic.sync().expect("sync");
    let old_cursor = old_topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    old_cursor.ack(ps[0]).expect("ack");
    old_cursor.flush().expect("flush");

    // Another broker takes the store over, acks and flushes, and hands it back.
    {
        let other = new_owner(&ns);
        let c = other
            .topic("t")
            .expect("topic")
            .open_cursor("sub", CursorOptions::default())
            .expect("cursor");
        c.ack(ps[1]).expect("ack");
        c.flush().expect("flush");
        drop(c);
        other.close().expect("close");
    }
    // The first broker reopens the store through the same handle; its earlier instance lives on.
    let again = Store::open_with_storage(Arc::new(handle.clone()), store_config()).expect("reopen");
    let topic = again.topic("t").expect("topic");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    assert!(
        cursor.is_acked(ps[1]).expect("is_acked"),
        "the other broker's flush"
    );

    // The earlier instance's thread resumes: nothing of it returns Ok.
    let mut oks = Vec::new();
    if old_cursor
        .ack(ps[3])
        .and_then(|_| old_cursor.flush().map(drop))
        .is_ok()
    {
        oks.push("flush");
    }
    if old_topic
        .append(b"late")
        .and_then(|_| old_topic.sync())
        .is_ok()
    {
        oks.push("sync");
    }
    if (0..4)
        .try_for_each(|_| old_topic.append(b"roll").map(drop))
        .and_then(|()| old_topic.sync())
        .is_ok()
    {
        oks.push("rollover");
    }
    if old_topic.delete_cursor("sub").is_ok() {
        oks.push("cursor deletion");
    }
    if old_topic.trim_consumed().is_ok_and(|t| !t.is_empty()) {
        oks.push("trim");
    }
    if earlier.topic("u").is_ok() {
        oks.push("topic creation");
    }
    assert!(oks.is_empty(), "the earlier instance got Ok for {oks:?}");

    // The reopened store works and keeps everything; nothing the earlier instance did shows.
    cursor.ack(ps[2]).expect("ack");
    cursor.flush().expect("flush");
    let mine = topic.append(b"mine").expect("append");
    topic.sync().expect("sync");
    drop((cursor, topic));
    again.close().expect("close");
    drop(again);
    drop((old_cursor, old_topic, earlier));
    let last = Store::open_with_storage(Arc::new(storage_of(&ns)), store_config()).expect("open");
    let topic = last.topic("t").expect("topic");
    assert_eq!(topic.cursor_names(), ["sub"]);
    assert_eq!(last.topic_names(), ["t"]);
    let c = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    for p in &ps[..3] {
        assert!(c.is_acked(*p).expect("is_acked"), "{p} flushed");
    }
    assert!(
        !c.is_acked(ps[3]).expect("is_acked"),
        "a fenced flush's ack"
    );
    for p in ps.iter().chain([&mine]) {
        topic.read(*p).expect("a synced entry");
    }
}

/// Every object of `ns` with its owner epoch xattr (`LOCK`: the owner epoch handed out).
fn epochs(ns: &str) -> Vec<(String, String)> {
    let cli = |args: &[&str]| support::rados::rados_cli(ns, args);
    let mut names: Vec<String> = cli(&["ls"]).lines().map(str::to_owned).collect();
    names.sort();
    names
        .into_iter()
        .filter(|n| !n.starts_with('.'))
        .map(|n| {
            let xattr = if n == "LOCK" {
                "ackstore.owner-epoch"
            } else {
                "ackstore.epoch"
            };
            let out = std::process::Command::new("rados")
                .args(["-c", &support::rados::conf(), "-p", &pool(), "-N", ns])
                .args(["getxattr", &n, xattr])
                .output()
                .expect("run rados");
            (n, String::from_utf8_lossy(&out.stdout).into_owned())
        })
        .collect()
}

/// `verify` and `inspect` beside a running owner lock nothing and stamp nothing: the owner's
/// epochs are as they were, and its next flush and sync return `Ok`.
#[test]
fn verify_and_inspect_beside_a_running_owner_neither_stamp_nor_fence_it() {
    let ns = prepared("fa-readers");
    let store = Store::open_with_storage(Arc::new(storage_of(&ns)), store_config()).expect("open");
    let topic = store.topic("t").expect("topic");
    let ps: Vec<Position> = (0..4)
        .map(|_| topic.append(b"e").expect("append"))
        .collect();
    topic.sync().expect("sync");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    cursor.ack(ps[0]).expect("ack");
    cursor.flush().expect("flush");
    let before = epochs(&ns);
    assert!(
        before.iter().filter(|(_, e)| !e.is_empty()).count() > 2,
        "the owner's epochs are read: {before:?}"
    );
    // What `ackstore verify` and `ackstore inspect` run: the check API on a handle of their
    // own that never locks.
    let reader: Arc<dyn ackstore::Storage> =
        Arc::new(cluster().storage(&pool(), &ns).expect("namespace"));
    let verified = ackstore::check::verify(&reader).expect("verify");
    assert!(verified.is_sound(), "verify: {verified}");
    ackstore::check::inspect(&reader).expect("inspect");
    assert_eq!(
        epochs(&ns),
        before,
        "the read-only commands changed an epoch"
    );
    cursor.ack(ps[1]).expect("ack");
    cursor.flush().expect("the owner's flush after verify");
    topic.append(b"more").expect("append");
    topic.sync().expect("the owner's sync after verify");
}

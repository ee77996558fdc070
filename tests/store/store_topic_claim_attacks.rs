//! Attacks on the claims of a store's topic records while former owners of the store still
//! write: a former owner that passes the store's ownership check again (a stray a stale
//! owner's write linked into the name of the catalog version it holds, once the names above
//! were freed) writes the topic record several times between a new owner's read of it and its
//! claim, and a stale write lands in a name those writes freed. The new owner's claim must
//! not take that stray for the record: its first claim is checked by a listing. And a topic's
//! first open after a takeover claims the record a former owner's creation in flight linked
//! first, instead of answering `Fenced`.
//!
//! The former owners are other store handles on the same in-memory disk, the lock broken for
//! each new owner; a former owner's write of a record's next version is held in flight after
//! its check, before its temporary file is created, until the test lets it go (a claim's
//! link, before it runs).

use crate::support;

use std::sync::{Arc, Barrier, Mutex};

use ackstore::{Error, MemStorage, Storage, Store};
use support::tap::{Hook, Op, Tap};
use support::topic::{entries, store_config};

/// Two barriers a held link meets in turn: the test waits on the first to know the link was
/// reached, and on the second to let it go on.
type Held = Arc<(Barrier, Barrier)>;

/// Holds the next link (or whole creation) of a version of a record whose name ends with the
/// armed suffix (`store` for the catalog, `topic` for a topic record), before it runs.
#[derive(Default)]
struct Gate {
    armed: Mutex<Option<(&'static str, Step, Held)>>,
}

/// Which step of a record's next version a [`Gate`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// A write's temporary file, before it is created: the write made its check, nothing else.
    Write,
    /// A claim's link of the version's name to the one below it.
    Claim,
}

impl Gate {
    /// Holds the next `step` of a version of a record whose name ends with `record`.
    fn hold(&self, record: &'static str, step: Step) -> Held {
        let held: Held = Arc::new((Barrier::new(2), Barrier::new(2)));
        *self.armed.lock().expect("gate") = Some((record, step, held.clone()));
        held
    }
}

/// The record a versioned record file's name belongs to (`t2-topic` for
/// `t2-topic.00000000000000000003.meta`), and its version.
fn record_version(file: &str) -> Option<(&str, u64)> {
    let (stem, digits) = file.strip_suffix(".meta")?.rsplit_once('.')?;
    (digits.len() == 20)
        .then(|| digits.parse().ok().map(|v| (stem, v)))
        .flatten()
}

impl Hook for Gate {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        // A write of a version starts with its temporary file (created whole on a storage
        // that creates whole files); a claim links the version below under the version's name.
        let (step, to) = match op {
            Op::Create(temp) => (
                Step::Write,
                temp.strip_suffix(".meta.tmp")
                    .and_then(|t| t.rsplit_once('.'))
                    .map(|(t, _)| format!("{t}.meta")),
            ),
            Op::CreateWhole(to) => (Step::Write, Some(to.to_owned())),
            Op::Link(from, to) if !from.ends_with(".tmp") => (Step::Claim, Some(to.to_owned())),
            _ => return Ok(()),
        };
        let Some(to) = to else {
            return Ok(());
        };
        let held = {
            let mut armed = self.armed.lock().expect("gate");
            match armed.as_ref() {
                Some((record, at, _))
                    if *at == step
                        && record_version(&to).is_some_and(|(stem, _)| stem.ends_with(record)) =>
                {
                    armed.take().map(|(_, _, held)| held)
                }
                _ => None,
            }
        };
        if let Some(held) = held {
            held.0.wait();
            held.1.wait();
        }
        Ok(())
    }
}

/// A new owner of the store on `disk` (the lock broken, as a broken lock file or shared
/// storage lets it), through a gate of its own.
fn owner(disk: &MemStorage, per_ledger: u64) -> (Store, Arc<Gate>) {
    disk.break_lock();
    let gate = Arc::new(Gate::default());
    let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk.clone()), gate.clone()));
    let store = Store::open_with_storage(storage, store_config(per_ledger)).expect("open");
    (store, gate)
}

/// The versions of record files on `disk` of records whose name ends with `record`.
fn versions(disk: &MemStorage, record: &str) -> Vec<u64> {
    let mut found: Vec<u64> = disk
        .list()
        .expect("list")
        .iter()
        .filter_map(|f| record_version(f))
        .filter(|(stem, _)| stem.ends_with(record))
        .map(|(_, v)| v)
        .collect();
    found.sort_unstable();
    found
}

/// A store holding topic `x` with one synced entry, closed cleanly.
fn prepared(per_ledger: u64) -> MemStorage {
    let disk = MemStorage::new();
    let store =
        Store::open_with_storage(Arc::new(disk.clone()), store_config(per_ledger)).expect("open");
    let x = store.topic("x").expect("topic");
    x.append(b"d").expect("append");
    x.sync().expect("sync");
    drop(x);
    store.close().expect("close");
    disk
}

/// Three owners in turn (e, f, g). E holds the catalog at the version its claim linked and
/// starts a catalog write (a topic's creation) that is held at the link of the next version.
/// F claims the store (its link takes that next version; its open writes nothing more), then G
/// claims it and creates two topics (the first write removes the versions its claim linked
/// from and to, F's among them; the second removes the first's). E's link then lands in F's
/// freed name: a stray below the catalog, and E is refused. From here on F must be refused
/// every write: G claimed the store over F's version. F's ownership check (two name lookups:
/// the next version absent, its own present) finds E's stray in its own version's name.
#[test]
fn a_stray_in_the_name_a_former_owner_held_never_gives_it_the_store_back() {
    let disk = prepared(1_000);
    let (e, e_gate) = owner(&disk, 1_000);
    let held = e_gate.hold("store", Step::Write);
    let e_writer = e.clone();
    let e_creation = std::thread::spawn(move || e_writer.topic("from-e").map(drop));
    held.0.wait();
    let catalog_at_f = {
        let (f, _) = owner(&disk, 1_000);
        (f, versions(&disk, "store"))
    };
    let (f, at_f) = catalog_at_f;
    let fx = f.topic("x").expect("f opens x");
    let (g, _) = owner(&disk, 1_000);
    let gx = g.topic("x").expect("g opens x");
    let g1 = g.topic("from-g-1").expect("g creates a topic");
    let g1_entry = g1.append(b"g's entry").expect("append");
    g1.sync().expect("sync");
    g.topic("from-g-2").expect("g creates another");
    let at_g = versions(&disk, "store");
    held.1.wait();
    let e_outcome = e_creation.join().expect("e's creation");
    assert!(
        matches!(e_outcome, Err(Error::Fenced { .. })),
        "e's held creation: {e_outcome:?}"
    );
    let after_e = versions(&disk, "store");
    // What F is told now, G holding the store.
    let f_append = fx.append(b"f").and_then(|p| fx.sync().map(|()| p));
    let f_creation = f.topic("from-f");
    // What F's new topic holds at the position of G's entry in its own new topic.
    let f_sees = f_creation.as_ref().map_err(ToString::to_string).map(|t| {
        t.read(g1_entry)
            .map(|e| String::from_utf8_lossy(&e.payload).into_owned())
    });
    let f_creation = f_creation.map(drop);
    let g_names = g.topic_names();
    let g_append = gx.append(b"g").and_then(|p| gx.sync().map(|()| p));
    let what = format!(
        "catalog versions on disk: after f's claim {at_f:?}, after g's two creations \
         {at_g:?}, after e's held link {after_e:?}; f's append and sync on x: {f_append:?}, \
         f's creation of a topic: {f_creation:?}, which holds at {g1_entry} (g's entry \
         in its topic from-g-1): {f_sees:?}; g's topics {g_names:?}, g's append and sync \
         on x {g_append:?}"
    );
    assert!(
        matches!(f_append, Err(Error::Fenced { .. })),
        "f passed its ownership check after g's claim: {what}"
    );
    assert!(
        matches!(f_creation, Err(Error::Fenced { .. })),
        "f wrote the catalog after g's claim: {what}"
    );
}

/// What the owners did and saw in [`three_owners_on_x`].
struct OnX {
    /// G's open of x (held before its claim's link while F worked and E's write landed).
    g_open: ackstore::Result<Arc<ackstore::ManagedLedger>>,
    /// How the record versions of x moved, and what E and F were told.
    what: String,
    /// The three stores, kept open (the last handle's drop closes a store).
    _owners: [Store; 3],
}

/// The same three owners, each also at work on topic `x` of `disk`. E holds a write of x's
/// record in flight (a cursor's creation, its check made) and a catalog write as in
/// [`a_stray_in_the_name_a_former_owner_held_never_gives_it_the_store_back`]; F claims the
/// store and x; G claims the store and creates two topics (so E's held catalog write lands in
/// F's freed name and F passes its ownership check again), then opens x: its open reads x's
/// record at F's claim, then is held before its claim's link. Meanwhile `f_works` runs on F's
/// x (its outcome goes into the description); it writes x's record at least three times, so
/// only its newest version is left, and E's held write then links a stray into the name of
/// F's claim before G's claim goes on.
fn three_owners_on_x(
    disk: &MemStorage,
    per_ledger: u64,
    f_works: impl FnOnce(&ackstore::ManagedLedger) -> String,
) -> OnX {
    let (e, e_gate) = owner(disk, per_ledger);
    let ex = e.topic("x").expect("e opens x");
    let held_topic = e_gate.hold("t1-topic", Step::Write);
    let e_write = std::thread::spawn(move || {
        ex.open_cursor("from-e", ackstore::CursorOptions::default())
            .map(drop)
    });
    held_topic.0.wait();
    let held_catalog = e_gate.hold("store", Step::Write);
    let e_writer = e.clone();
    let e_creation = std::thread::spawn(move || e_writer.topic("from-e").map(drop));
    held_catalog.0.wait();
    let (f, _) = owner(disk, per_ledger);
    let fx = f.topic("x").expect("f opens x");
    let at_f_claim = versions(disk, "t1-topic");
    let (g, g_gate) = owner(disk, per_ledger);
    g.topic("from-g-1").expect("g creates a topic");
    g.topic("from-g-2").expect("g creates another");
    held_catalog.1.wait();
    let e_created = e_creation.join().expect("e's creation");
    let held_claim = g_gate.hold("t1-topic", Step::Claim);
    let g_opener = g.clone();
    let g_open = std::thread::spawn(move || g_opener.topic("x"));
    held_claim.0.wait();
    let f_did = f_works(&fx);
    let before_e_stray = versions(disk, "t1-topic");
    held_topic.1.wait();
    let e_wrote = e_write.join().expect("e's write");
    let before_g_claim = versions(disk, "t1-topic");
    held_claim.1.wait();
    let g_open = g_open.join().expect("g's open");
    let after_g_claim = versions(disk, "t1-topic");
    let what = format!(
        "x's record versions on disk: after f's claim {at_f_claim:?}, after f's work \
         {before_e_stray:?}, after e's held write {before_g_claim:?}, after g's claim \
         {after_g_claim:?}; e's catalog write {e_created:?}, e's write of x {e_wrote:?}; \
         {f_did}"
    );
    OnX {
        g_open,
        what,
        _owners: [e, f, g],
    }
}

/// [`three_owners_on_x`] with data ledgers of one entry, F appending and syncing three
/// entries (each append writes x's record: a new ledger): G's open must read every entry F
/// synced before it (it is the store's owner, and those writes landed before its claim), and
/// must neither report damage that is not there nor be refused its first write.
#[test]
fn a_store_topics_claim_never_takes_a_stray_after_a_former_owners_appends() {
    let disk = prepared(1);
    let f_synced = Arc::new(Mutex::new(Vec::new()));
    let synced = f_synced.clone();
    let on_x = three_owners_on_x(&disk, 1, move |fx| {
        let mut refused = None;
        for i in 0..3 {
            let payload = format!("f{i}");
            match fx.append(payload.as_bytes()).and_then(|_| fx.sync()) {
                Ok(()) => synced.lock().expect("model").push(payload),
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        let synced = synced.lock().expect("model").clone();
        format!("f synced {synced:?} (then refused: {refused:?})")
    });
    let what = on_x.what;
    let gx = on_x
        .g_open
        .unwrap_or_else(|e| panic!("g's open of x: {e}; {what}"));
    let read = entries(&gx);
    let g_write = gx.append(b"g").and_then(|_| gx.sync());
    let what = format!("{what}; g reads {read:?}, g's append and sync {g_write:?}");
    for synced in f_synced.lock().expect("model").iter() {
        assert!(
            read.contains(synced),
            "g's open lost {synced}, which f synced before it: {what}"
        );
    }
    assert!(
        !matches!(g_write, Err(Error::Fenced { .. })),
        "g, the store's owner, was refused its first write of x: {what}"
    );
}

/// A store holding topic `x` with one synced entry and cursors `c0` to `c3`, each flushed,
/// closed cleanly.
fn prepared_with_cursors() -> MemStorage {
    let disk = MemStorage::new();
    let store =
        Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000)).expect("open");
    let x = store.topic("x").expect("topic");
    x.append(b"d").expect("append");
    x.sync().expect("sync");
    for c in 0..4 {
        let cursor = x
            .open_cursor(&format!("c{c}"), ackstore::CursorOptions::default())
            .expect("cursor");
        cursor.flush().expect("flush");
    }
    drop(x);
    store.close().expect("close");
    disk
}

/// [`three_owners_on_x`] with F deleting cursors `c0`, `c1` and `c2` (each `Ok`, each a
/// write of x's record): G's open must not list a cursor F deleted before it, nor be refused
/// its first write.
#[test]
fn a_store_topics_claim_never_takes_a_stray_after_a_former_owners_cursor_deletions() {
    let disk = prepared_with_cursors();
    let deleted = Arc::new(Mutex::new(Vec::new()));
    let model = deleted.clone();
    let on_x = three_owners_on_x(&disk, 1_000, move |fx| {
        let mut refused = None;
        for c in 0..3 {
            let name = format!("c{c}");
            match fx.delete_cursor(&name) {
                Ok(()) => model.lock().expect("model").push(name),
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        let deleted = model.lock().expect("model").clone();
        format!("f deleted {deleted:?} (then refused: {refused:?})")
    });
    let what = on_x.what;
    let gx = on_x
        .g_open
        .unwrap_or_else(|e| panic!("g's open of x: {e}; {what}"));
    let names = gx.cursor_names();
    let g_write = gx
        .open_cursor("from-g", ackstore::CursorOptions::default())
        .map(drop);
    let what = format!("{what}; g's cursors {names:?}, g's creation of a cursor {g_write:?}");
    for gone in deleted.lock().expect("model").iter() {
        assert!(
            !names.contains(gone),
            "g's open lists {gone}, which f deleted before it: {what}"
        );
    }
    assert!(
        !matches!(g_write, Err(Error::Fenced { .. })),
        "g, the store's owner, was refused its first write of x: {what}"
    );
}

/// A former owner's creation of a topic is held after its check, before its topic record's
/// first version is linked; a new owner claims the store and opens the same topic (the
/// catalog already lists it), and its creation of the record is held after its own check while
/// the former's lands first. The new owner's open reads and claims the former's record, as it
/// claims any record a former owner wrote, instead of answering `Fenced`: the store's claim
/// fenced the former, whose write was its one in flight.
#[test]
fn a_topics_first_open_claims_a_record_a_former_owners_creation_linked_first() {
    let disk = prepared(1_000);
    let (f, f_gate) = owner(&disk, 1_000);
    let f_held = f_gate.hold("topic", Step::Write);
    let former = std::thread::spawn(move || {
        let created = f.topic("fresh").map(drop);
        (f, created)
    });
    f_held.0.wait();
    let (g, g_gate) = owner(&disk, 1_000);
    let g = Arc::new(g);
    assert!(
        g.topic_names().iter().any(|t| t == "fresh"),
        "the former's catalog write of the topic came before its record's"
    );
    let g_held = g_gate.hold("topic", Step::Write);
    let newer = {
        let g = g.clone();
        std::thread::spawn(move || g.topic("fresh").map(drop))
    };
    g_held.0.wait();
    f_held.1.wait();
    let (f, _) = former.join().expect("former");
    let versions_before = versions(&disk, "topic");
    g_held.1.wait();
    let opened = newer.join().expect("newer");
    assert!(
        opened.is_ok(),
        "the new owner's first open of the topic answered {opened:?}; record versions when its \
         link ran: {versions_before:?}"
    );
    let fresh = g.topic("fresh").expect("topic");
    let p = fresh.append(b"g").expect("append");
    fresh.sync().expect("sync");
    drop(fresh);
    assert!(
        matches!(f.topic("other"), Err(Error::Fenced { .. })),
        "the former owner created a topic after the new owner's claim"
    );
    drop(f);
    let Ok(g) = Arc::try_unwrap(g) else {
        panic!("a handle of the new owner's store is still held");
    };
    g.close().expect("close");
    let reopened =
        Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000)).expect("reopen");
    let fresh = reopened.topic("fresh").expect("topic");
    assert_eq!(fresh.read(p).expect("read").payload, b"g");
    drop(fresh);
    reopened.close().expect("close");
}

//! A store topic's open serves its checks (its ledgers, rule 3's cursor records, the sweep of
//! leftovers, the chunk leftovers) from the listing its claim took right after its link
//! (`MetaStore::take_fenced_listing`). Attacks on either side of that listing: a former owner
//! of the store (another handle on the same in-memory disk, its lock broken) whose one write
//! in flight passed its ownership check before the new owner claimed the store lands right
//! after the claim's listing, before the open's checks (a listing taken there would show it,
//! the claim's does not), or right before the claim's link: a ledger file it creates, a ledger
//! file its trim removes, the record of a cursor its table lists, the temporary file of a
//! record write whose removal fails (its link refused by the claim, or taking the version the
//! claim wanted, which the claim then claims again). The open must neither refuse the topic
//! nor lose what was synced; what a write before the link leaves, that open removes; what one
//! after the listing leaves is a leftover (never damage to `verify`) that the next open
//! removes. A store of the earlier flat layout on real files, its topic's files beside the
//! store's, takes the same attack.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use ackstore::{CursorOptions, Error, FileStorage, ManagedLedger, MemStorage, Storage, Store};
use support::tap::{Hook, Op, Tap};
use support::topic::{ACKER, Host, entries, store_config, topic_with_an_acker};

/// Picks a storage operation.
type Pick = fn(Op<'_>) -> bool;

/// What runs once in the window.
type Action = Box<dyn FnOnce() + Send>;

/// Two barriers a held operation meets in turn: the test waits on the first to know the
/// operation was reached, and on the second to let it run.
type Held = Arc<(Barrier, Barrier)>;

/// A former owner's storage: holds the first operation its armed [`Pick`] accepts (before it
/// runs) until released, and remembers the file it names; fails every operation `fail`
/// accepts with `EIO`.
#[derive(Default)]
struct Gate {
    armed: Mutex<Option<(Pick, Held)>>,
    held: Mutex<Option<String>>,
    fail: Mutex<Option<Pick>>,
}

impl Gate {
    /// Holds the next operation `pick` accepts.
    fn hold(&self, pick: Pick) -> Held {
        let held: Held = Arc::new((Barrier::new(2), Barrier::new(2)));
        *self.armed.lock().expect("gate") = Some((pick, held.clone()));
        held
    }
}

impl Hook for Gate {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        if self.fail.lock().expect("gate").is_some_and(|fail| fail(op)) {
            let eio = std::io::Error::from_raw_os_error(5);
            return Err(Error::io("injected", op.name().to_owned(), eio));
        }
        let held = {
            let mut armed = self.armed.lock().expect("gate");
            match armed.as_ref() {
                Some((pick, _)) if pick(op) => {
                    *self.held.lock().expect("gate") = Some(op.name().to_owned());
                    armed.take().map(|(_, held)| held)
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

/// Whether `file` is a version of a topic record (`t1-topic.00000000000000000004.meta`).
fn is_topic_version(file: &str) -> bool {
    file.strip_suffix(".meta")
        .and_then(|stem| stem.rsplit_once('.'))
        .is_some_and(|(record, digits)| {
            record.ends_with("topic")
                && digits.len() == 20
                && digits.bytes().all(|b| b.is_ascii_digit())
        })
}

/// When a [`Window`] runs its action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Moment {
    /// Right before the new owner's claim links the topic record's next version (its first
    /// attempt): the former owner's write comes before the fence.
    BeforeClaim,
    /// Right after the first listing that follows that link: the claim's listing, which the
    /// open serves its checks from.
    AfterClaimListing,
}

/// The new owner's storage: runs its action once, at its [`Moment`] (after the new owner's
/// open, if that moment never came).
struct Window {
    moment: Moment,
    /// Claims' links of a topic record's version tried (refused ones too).
    links: AtomicU64,
    linked: AtomicBool,
    action: Mutex<Option<Action>>,
}

impl Window {
    fn new(moment: Moment, action: Action) -> Self {
        Self {
            moment,
            links: AtomicU64::new(0),
            linked: AtomicBool::new(false),
            action: Mutex::new(Some(action)),
        }
    }

    /// Runs the action if it has not run yet.
    fn run(&self) {
        let action = self.action.lock().expect("window").take();
        if let Some(action) = action {
            action();
        }
    }

    /// Runs the action if it has not run; returns whether it had.
    fn ran(&self) -> bool {
        let ran = self.action.lock().expect("window").is_none();
        self.run();
        ran
    }
}

/// Whether `op` is a claim's link of a topic record's version (not a write's, from its
/// temporary file).
fn is_claims_link(op: Op<'_>) -> bool {
    matches!(op, Op::Link(from, to) if !from.ends_with(".tmp") && is_topic_version(to))
}

impl Hook for Window {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        if is_claims_link(op) {
            self.links.fetch_add(1, Ordering::SeqCst);
            if self.moment == Moment::BeforeClaim {
                self.run();
            }
        }
        Ok(())
    }

    fn after(&self, op: Op<'_>) {
        if is_claims_link(op) {
            self.linked.store(true, Ordering::SeqCst);
        } else if matches!(op, Op::List(_))
            && self.moment == Moment::AfterClaimListing
            && self.linked.load(Ordering::SeqCst)
        {
            self.run();
        }
    }
}

/// What the owners did in [`late_in_the_window`].
struct Late<T> {
    /// The new owner's store.
    store: Store,
    /// The new owner's open of the topic.
    opened: ackstore::Result<Arc<ManagedLedger>>,
    /// What the former owner's work returned.
    former_did: T,
    /// The file the former owner's held operation named, and whether it was there once that
    /// work ended.
    held: (String, bool),
    /// The claims' links of the topic record the new owner's open tried.
    claim_links: u64,
    /// The former owner's store, kept open (it writes nothing more).
    _former: Store,
}

/// A former owner opens topic `topic` of `disk` and starts `work` on it, which is held at the
/// operation `pick` accepts (its ownership checks made, the new owner not there yet; `fail`:
/// operations of the former owner that fail). A new owner then claims the store and opens the
/// topic; at `moment` of its claim, the former owner's operation runs and its work ends.
/// Asserts that the moment came.
fn late_in_the_window<T: Send + 'static>(
    disk: &MemStorage,
    (topic, per_ledger, moment): (&str, u64, Moment),
    (pick, fail): (Pick, Option<Pick>),
    work: impl FnOnce(&ManagedLedger) -> T + Send + 'static,
) -> Late<T> {
    disk.break_lock();
    let gate = Arc::new(Gate::default());
    let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk.clone()), gate.clone()));
    let former = Store::open_with_storage(storage, store_config(per_ledger)).expect("open");
    let fx = former
        .topic(topic)
        .expect("the former owner opens the topic");
    *gate.fail.lock().expect("gate") = fail;
    let held = gate.hold(pick);
    let working = std::thread::spawn(move || work(&fx));
    held.0.wait();
    let did: Arc<Mutex<Option<(T, bool)>>> = Arc::new(Mutex::new(None));
    let action: Action = {
        let (did, gate, disk) = (did.clone(), gate.clone(), disk.clone());
        Box::new(move || {
            held.1.wait();
            let done = working.join().expect("the former's work");
            let file = gate.held.lock().expect("gate").clone().expect("held");
            let there = disk.list().expect("list").contains(&file);
            *did.lock().expect("did") = Some((done, there));
        })
    };
    let window = Arc::new(Window::new(moment, action));
    disk.break_lock();
    let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk.clone()), window.clone()));
    let store = Store::open_with_storage(storage, store_config(per_ledger)).expect("claim");
    let opened = store.topic(topic);
    assert!(
        window.ran(),
        "{moment:?} never came in the new owner's open: {:?}",
        opened.as_ref().map(|_| ())
    );
    let (former_did, there) = did.lock().expect("did").take().expect("the former's work");
    let held = gate.held.lock().expect("gate").clone().expect("held");
    Late {
        store,
        opened,
        former_did,
        held: (held, there),
        claim_links: window.links.load(Ordering::SeqCst),
        _former: former,
    }
}

/// A store holding topic `x` with entries `d0` and `d1` synced, closed cleanly.
fn prepared(per_ledger: u64) -> MemStorage {
    let disk = MemStorage::new();
    let store =
        Store::open_with_storage(Arc::new(disk.clone()), store_config(per_ledger)).expect("open");
    let x = store.topic("x").expect("topic");
    x.append(b"d0").expect("append");
    x.append(b"d1").expect("append");
    x.sync().expect("sync");
    drop(x);
    store.close().expect("close");
    disk
}

/// Asserts that `verify` finds no damage in the store on `storage`.
fn sound(storage: &Arc<dyn Storage>, when: &str) {
    let report = ackstore::check::verify(storage).expect("verify");
    assert!(report.is_sound(), "{when}: {report}");
}

/// The store on `disk` opened again (the lock broken), and its topic `topic`.
fn restart(disk: &MemStorage, topic: &str, per_ledger: u64) -> (Store, Arc<ManagedLedger>) {
    disk.break_lock();
    let store = Store::open_with_storage(Arc::new(disk.clone()), store_config(per_ledger))
        .expect("restart");
    let t = store.topic(topic).expect("the restart opens the topic");
    (store, t)
}

/// Whether file `file` is on `disk`.
fn on(disk: &MemStorage, file: &str) -> bool {
    disk.list().expect("list").iter().any(|f| f == file)
}

/// Closes the new owner's `store` on `disk` and asserts that `verify` finds no damage.
fn close_sound(store: &Store, disk: &MemStorage) {
    store.close().expect("close");
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    sound(&storage, "after the new owner's close");
}

/// Appends `g` through the new owner's topic `x` (of [`prepared`]), closes its `store` (no
/// damage), opens the store again and asserts that `x` holds `d0`, `d1`, `g` and that the
/// former owner's `what`, `file`, is gone; closes it. Returns the storage of `disk`.
fn append_then_restart(
    store: &Store,
    x: Arc<ManagedLedger>,
    disk: &MemStorage,
    (what, file): (&str, &str),
) -> Arc<dyn Storage> {
    x.append(b"g").expect("append");
    x.sync().expect("sync");
    drop(x);
    close_sound(store, disk);
    let (store, x) = restart(disk, "x", 1_000);
    assert_eq!(entries(&x), ["d0", "d1", "g"]);
    assert!(
        !on(disk, file),
        "the former owner's {what} {file} outlived the next open"
    );
    drop(x);
    store.close().expect("close");
    Arc::new(disk.clone())
}

/// A former owner's append starting a ledger (its block of ids reserved, its ownership
/// checked) creates the ledger's file at `moment` of the new owner's claim of topic `x`; its
/// record write after it is refused. The new owner's open neither refuses the topic nor loses
/// an entry, and the file, which no record lists, is no damage. Returns the file and whether
/// it was still there after the new owner's open; asserts that it is gone after the next one.
fn former_owners_late_ledger_file(moment: Moment) -> (String, bool) {
    let disk = prepared(1_000);
    let late = late_in_the_window(
        &disk,
        ("x", 1_000, moment),
        (
            |op| matches!(op, Op::Create(f) if f.contains("ledger-")),
            None,
        ),
        |fx| fx.append(b"late").and_then(|_| fx.sync()),
    );
    let (file, created) = late.held;
    assert!(
        created,
        "the former owner's ledger file {file} was not created"
    );
    assert!(
        matches!(late.former_did, Err(Error::Fenced { .. })),
        "the former owner's append: {:?}",
        late.former_did
    );
    let x = late.opened.expect("the new owner's open");
    let kept = on(&disk, &file);
    assert_eq!(entries(&x), ["d0", "d1"]);
    let storage = append_then_restart(&late.store, x, &disk, ("ledger file", &file));
    sound(&storage, "after the restart");
    (file, kept)
}

/// Right after the new owner's claim listed the topic's files: the open's checks do not see
/// the file (their listing was taken before it), the next open removes it.
#[test]
fn a_ledger_file_a_former_owner_creates_right_after_the_claims_listing_is_removed_later() {
    former_owners_late_ledger_file(Moment::AfterClaimListing);
}

/// Before the new owner's claim links its version (the fence): the claim's listing shows the
/// file, and that open removes it.
#[test]
fn a_ledger_file_a_former_owner_creates_before_the_claims_link_is_removed_by_that_open() {
    let (file, kept) = former_owners_late_ledger_file(Moment::BeforeClaim);
    assert!(
        !kept,
        "the new owner's open left {file}, created before its claim"
    );
}

/// A former owner's trim wrote the record without the first ledger, then its removal of the
/// ledger's file is held until right after the new owner's claim listed the topic's files: the
/// open finds the file listed and gone, and opens with every entry the record keeps.
#[test]
fn a_ledger_file_a_former_owners_trim_removes_right_after_the_claims_listing_is_not_missed() {
    let (disk, mark_delete) = topic_with_an_acker(Host::Store, 2, std::iter::empty());
    let late = late_in_the_window(
        &disk,
        ("t", 2, Moment::AfterClaimListing),
        (
            |op| matches!(op, Op::Remove(f) if f.contains("ledger-")),
            None,
        ),
        |t| t.trim_consumed(),
    );
    let trimmed = late.former_did.expect("the former owner's trim");
    assert_eq!(trimmed.len(), 1);
    assert!(!late.held.1, "the former owner's trim left {}", late.held.0);
    let t = late.opened.expect("the new owner's open");
    assert_eq!(entries(&t), ["m2", "m3", "m4"]);
    let acker = t
        .open_cursor(ACKER, CursorOptions::default())
        .expect("acker");
    assert_eq!(
        acker.mark_delete_position().expect("mark"),
        Some(mark_delete)
    );
    drop((acker, t));
    close_sound(&late.store, &disk);
    let (store, t) = restart(&disk, "t", 2);
    assert_eq!(entries(&t), ["m2", "m3", "m4"]);
    drop(t);
    store.close().expect("close");
}

/// A former owner's creation of a cursor listed it in the cursor table (a record write that
/// passed both its ownership checks), then its write of the cursor's record is held until
/// right after the new owner's claim listed the topic's files. The new owner's open lists the
/// cursor, which opens from that record, acknowledges and keeps its acks across a restart.
#[test]
fn a_cursor_record_a_former_owner_writes_right_after_the_claims_listing_serves_its_cursor() {
    let disk = prepared(1_000);
    let late = late_in_the_window(
        &disk,
        ("x", 1_000, Moment::AfterClaimListing),
        (
            |op| matches!(op, Op::Create(f) | Op::CreateWhole(f) if f.contains("cursor-")),
            None,
        ),
        |fx| fx.open_cursor("late", CursorOptions::default()).map(drop),
    );
    let written = disk.list().expect("list");
    assert!(
        written
            .iter()
            .any(|f| f.contains("cursor-") && f.ends_with(".meta")),
        "the former owner's record write did not land ({:?}): {written:?}",
        late.former_did
    );
    let x = late.opened.expect("the new owner's open");
    assert_eq!(x.cursor_names(), ["late"]);
    let cursor = x
        .open_cursor("late", CursorOptions::default())
        .expect("late");
    let first = cursor.read_entries(1).expect("read")[0].position;
    cursor.ack(first).expect("ack");
    cursor.flush().expect("flush");
    drop((cursor, x));
    close_sound(&late.store, &disk);
    let (store, x) = restart(&disk, "x", 1_000);
    let cursor = x
        .open_cursor("late", CursorOptions::default())
        .expect("late");
    assert!(cursor.is_acked(first).expect("is_acked"));
    drop((cursor, x));
    store.close().expect("close");
}

/// Whether `op` creates a temporary file of a topic record's write.
fn creates_topic_temp(op: Op<'_>) -> bool {
    matches!(op, Op::Create(f) if f.contains("topic.") && f.ends_with(".meta.tmp"))
}

/// Whether `op` removes a temporary file of a record's write.
fn removes_temp(op: Op<'_>) -> bool {
    matches!(op, Op::Remove(f) if f.ends_with(".meta.tmp"))
}

/// A former owner's write of the topic record (a cursor's creation) passed its ownership
/// check; its temporary file is created right after the new owner's claim listed the topic's
/// files, its link is refused (the claim took that version), and its removal of the file
/// fails. The file is a leftover, never damage, and the next open removes it.
#[test]
fn a_temporary_record_file_a_former_owner_leaves_right_after_the_claims_listing_goes_later() {
    let disk = prepared(1_000);
    let late = late_in_the_window(
        &disk,
        ("x", 1_000, Moment::AfterClaimListing),
        (creates_topic_temp, Some(removes_temp)),
        |fx| {
            fx.open_cursor("from-former", CursorOptions::default())
                .map(drop)
        },
    );
    assert!(
        matches!(late.former_did, Err(Error::Fenced { .. })),
        "the former owner's creation: {:?}",
        late.former_did
    );
    let (file, left) = late.held;
    assert!(
        left,
        "the former owner's temporary file {file} was not left"
    );
    let x = late.opened.expect("the new owner's open");
    assert_eq!(entries(&x), ["d0", "d1"]);
    assert!(x.cursor_names().is_empty());
    append_then_restart(&late.store, x, &disk, ("temporary file", &file));
}

/// The same write, released before the new owner's claim links its version: it takes that
/// version (the record now lists the former owner's cursor), so the claim is refused and
/// claims again on the record the former owner wrote; its listing, taken after that second
/// link, shows the temporary file the former owner failed to remove, which that open removes.
#[test]
fn a_claim_retried_over_a_former_owners_write_hands_the_open_a_listing_holding_its_leftover() {
    let disk = prepared(1_000);
    let late = late_in_the_window(
        &disk,
        ("x", 1_000, Moment::BeforeClaim),
        (creates_topic_temp, Some(removes_temp)),
        |fx| {
            fx.open_cursor("from-former", CursorOptions::default())
                .map(drop)
        },
    );
    let (file, left) = late.held;
    assert!(
        left,
        "the former owner's temporary file {file} was not left"
    );
    assert_eq!(
        late.claim_links, 2,
        "the claim was not refused once, then made"
    );
    let x = late.opened.expect("the new owner's open");
    assert_eq!(
        x.cursor_names(),
        ["from-former"],
        "the former owner's write did not take the version the claim wanted ({:?})",
        late.former_did
    );
    assert!(
        !on(&disk, &file),
        "the open left {file}, which a former owner left before its claim"
    );
    assert_eq!(entries(&x), ["d0", "d1"]);
    let cursor = x
        .open_cursor("from-former", CursorOptions::default())
        .expect("from-former");
    drop((cursor, x));
    close_sound(&late.store, &disk);
}

/// The earlier flat layout on real files (catalog version 2: topic 1's files are `t1-...`
/// beside the store's own and topic 2's), a block of ledger ids reserved by an append: right
/// after the open's claim listed the topic's files, the next ledger of that block appears as a
/// creation cut short (what a former owner still running leaves). The open serves the topic
/// with every entry, and the file is no damage and goes with the next open.
#[test]
fn a_flat_topics_ledger_file_created_right_after_the_claims_listing_is_removed_later() {
    let dir = support::samples::sample_dir("store-v2-flat");
    let name = "persistent://tenant/ns/orders";
    let files =
        || -> Arc<dyn Storage> { Arc::new(FileStorage::open(dir.path(), false).expect("open")) };
    let read = {
        let store = Store::open_with_storage(files(), store_config(1_000)).expect("open");
        let topic = store.topic(name).expect("topic");
        topic.append(b"new").expect("append");
        topic.sync().expect("sync");
        let read = entries(&topic);
        drop(topic);
        store.close().expect("close");
        read
    };
    let catalog = ackstore::internals::store::read_catalog(files())
        .expect("catalog")
        .expect("a catalog");
    let id = catalog
        .topics
        .iter()
        .find(|t| t.name == name)
        .expect("listed")
        .id;
    let prefix = format!("t{id}-");
    let last = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter_map(|f| ackstore::internals::log::parse_ledger_file_name(f.strip_prefix(&prefix)?))
        .max()
        .expect("a ledger");
    let late = format!(
        "{prefix}{}",
        ackstore::internals::log::ledger_file_name(last + 1)
    );
    let action: Action = {
        let (late, dir) = (late.clone(), dir.path().to_owned());
        Box::new(move || {
            let file = std::fs::File::create(dir.join(&late)).expect("create");
            file.sync_all().expect("sync");
        })
    };
    let window = Arc::new(Window::new(Moment::AfterClaimListing, action));
    let storage: Arc<dyn Storage> = Arc::new(Tap::new(files(), window.clone()));
    let store = Store::open_with_storage(storage, store_config(1_000)).expect("open");
    let topic = store.topic(name).expect("the open of the flat topic");
    assert!(
        window.ran(),
        "no listing followed the claim of the topic record"
    );
    assert_eq!(entries(&topic), read);
    drop(topic);
    store.close().expect("close");
    sound(&files(), "after the open");
    let store = Store::open_with_storage(files(), store_config(1_000)).expect("reopen");
    let topic = store.topic(name).expect("topic");
    assert_eq!(entries(&topic), read);
    assert!(
        !dir.path().join(&late).exists(),
        "{late} outlived the next open"
    );
    drop(topic);
    store.close().expect("close");
    sound(&files(), "after the reopen");
}

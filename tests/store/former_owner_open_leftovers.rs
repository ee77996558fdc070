//! A former owner's open of a store's topic that has something to remove or forget (an
//! interrupted ledger create, an orphan ledger, the journal state of a cursor whose deletion
//! was cut short, a chunk record of the cursor table no record pins), with a new owner's claim
//! of the store placed after every storage operation of that open. The open checks the
//! store's ownership once, after its listing, right before its first removal or forget: so
//! once the new owner has claimed, the former owner's open removes, forgets or writes nothing
//! more, and everything the new owner made (a synced entry, flushed acks, a cursor created and
//! one deleted from a chunked cursor table) is there after a restart.
//!
//! A former owner's open that finds a ledger the new owner trimmed after its claim answers
//! `Fenced`, not damage.
//!
//! The former owner is a store handle on the in-memory disk through a [`Tap`] that counts its
//! operations; the new owner, another handle on the same disk (the lock broken), runs right
//! after the chosen operation, inside the former owner's call.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ackstore::internals::format::meta::{CURSOR_CHUNK_ENTRIES, CURSOR_CHUNK_PREFIX};
use ackstore::{CursorOptions, Error, MemStorage, Position, Storage, Store};
use support::crash::copy_into;
use support::tap::{Hook, Op, Tap};
use support::topic::{ACKER, Host, earliest, store_config, topic_storage, topic_with_an_acker};

const PER_LEDGER: u64 = 2;

type Action = Box<dyn FnOnce() + Send>;

/// Counts a former owner's storage operations, runs the new owner's claim right after the
/// chosen one, and keeps every removal and every change to the journal (a forget) the former
/// owner made after one of its listings of the topic's files followed that claim: a listing
/// that may hold what the new owner made, which no check can pass any more (but for the
/// claim's own removal of a version of the topic record, [`is_topic_version`]).
#[derive(Default)]
struct Watch {
    count: AtomicU64,
    at: AtomicU64,
    action: Mutex<Option<Action>>,
    claimed: AtomicBool,
    listed_after_claim: AtomicBool,
    removed_after: Mutex<Vec<String>>,
}

impl Watch {
    /// Runs `action` after `n` more operations.
    fn arm(&self, n: u64, action: Action) {
        self.at
            .store(self.count.load(Ordering::SeqCst) + n, Ordering::SeqCst);
        *self.action.lock().expect("action") = Some(action);
    }

    /// Runs the action if it has not run yet.
    fn run_if_pending(&self) {
        let action = self.action.lock().expect("action").take();
        if let Some(action) = action {
            action();
            self.claimed.store(true, Ordering::SeqCst);
        }
    }
}

impl Hook for Watch {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        let journal = op.name().starts_with("journal")
            && matches!(op, Op::Create(_) | Op::CreateWhole(_) | Op::Write(_));
        if (journal || matches!(op, Op::Remove(_)) && !is_topic_version(op.name()))
            && self.listed_after_claim.load(Ordering::SeqCst)
        {
            self.removed_after
                .lock()
                .expect("ops")
                .push(format!("{} {}", op.kind(), op.name()));
        }
        Ok(())
    }

    fn after(&self, op: Op<'_>) {
        // A topic's files on the in-memory disk are listed by their prefix (`t1-`).
        let topic_listing = matches!(op, Op::List(prefix)
            if prefix.starts_with('t') && prefix.ends_with('-'));
        if topic_listing && self.claimed.load(Ordering::SeqCst) {
            self.listed_after_claim.store(true, Ordering::SeqCst);
        }
        let count = self.count.fetch_add(1, Ordering::SeqCst) + 1;
        if count == self.at.load(Ordering::SeqCst) {
            self.run_if_pending();
        }
    }
}

/// Whether `file` is a version of the topic record (`t1-topic.{version}.meta`): the open's
/// claim removes the version below the one it linked (checked around by the store's
/// ownership, and a version no newer owner reads), not a leftover.
fn is_topic_version(file: &str) -> bool {
    file.split_once("topic.")
        .and_then(|(_, v)| v.strip_suffix(".meta"))
        .is_some_and(|v| v.len() == 20 && v.bytes().all(|b| b.is_ascii_digit()))
}

/// Where the new owner's claim leaves its store, and what its work made when it ran inside
/// the former owner's open.
type Slot = Arc<Mutex<Option<(Store, Option<Made>)>>>;

/// What a new owner's work made, to be found after a restart.
struct Made {
    /// The acker's mark-delete after its flush.
    acker_at: Position,
    /// The entry appended and synced, acknowledged by cursor `fresh` (flushed).
    entry: Option<Position>,
}

/// A new owner's claim of the store on `disk` (the lock broken).
fn claim(disk: &MemStorage) -> Store {
    disk.break_lock();
    Store::open_with_storage(Arc::new(disk.clone()), store_config(PER_LEDGER))
        .expect("the new owner claims the store")
}

/// What the new owner does once it claimed the store.
#[derive(Debug, Clone, Copy)]
struct Shape {
    /// A cursor it deletes first.
    deleted: Option<&'static str>,
    /// Whether it appends and syncs an entry and creates cursor `fresh`, which acknowledges
    /// it and flushes.
    grows: bool,
}

/// Appends, creates `fresh`, and moves the acker on.
const GROWS: Shape = Shape {
    deleted: None,
    grows: true,
};

/// The new owner's work on `store` ([`Shape`]): opens topic `t`, deletes a cursor, appends
/// and syncs an entry, creates cursor `fresh`, which acknowledges that entry and flushes,
/// and moves the acker's mark-delete one entry on and flushes.
fn work(store: &Store, shape: Shape) -> Made {
    let topic = store.topic("t").expect("the new owner opens the topic");
    if let Some(name) = shape.deleted {
        topic.delete_cursor(name).expect("the new owner's deletion");
    }
    let entry = shape.grows.then(|| {
        let entry = topic.append(b"new owner's entry").expect("append");
        topic.sync().expect("the new owner's sync");
        let fresh = topic.open_cursor("fresh", earliest()).expect("fresh");
        fresh.ack(entry).expect("ack");
        fresh.flush().expect("the new owner's flush");
        entry
    });
    let acker = topic.open_cursor(ACKER, earliest()).expect("acker");
    let next = acker.read_entries(1).expect("read")[0].position;
    acker.ack(next).expect("ack");
    acker.flush().expect("the new owner's flush");
    Made {
        acker_at: next,
        entry,
    }
}

/// Where the new owner's work runs: after its claim, once the former owner's open returned
/// (so that open finds what it left to remove), or inside that open right after the claim (so
/// that open may find what the new owner made).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Work {
    After,
    Inside,
}

/// What a restart on `disk` finds of what the new owner made (`made`, by `shape`): `Ok(())`
/// when all of it is there (the cursors of `template`, `cursors` and the acker, less the
/// one deleted, with `fresh` when created), else what differs.
fn restart_holds(
    disk: &MemStorage,
    (made, shape): (&Made, Shape),
    cursors: &[String],
) -> Result<(), String> {
    let store = Store::open_with_storage(Arc::new(disk.durable_image()), store_config(PER_LEDGER))
        .map_err(|e| format!("restart: {e}"))?;
    let topic = store.topic("t").map_err(|e| format!("topic: {e}"))?;
    let mut expected: Vec<String> = cursors
        .iter()
        .filter(|c| Some(c.as_str()) != shape.deleted)
        .cloned()
        .chain([ACKER.to_owned()])
        .chain(shape.grows.then(|| "fresh".to_owned()))
        .collect();
    expected.sort();
    if topic.cursor_names() != expected {
        return Err(format!(
            "cursors {:?}, expected {expected:?}",
            topic.cursor_names()
        ));
    }
    let opts = CursorOptions::default();
    let acker = topic.open_cursor(ACKER, opts).map_err(|e| e.to_string())?;
    let mark = acker.mark_delete_position().map_err(|e| e.to_string())?;
    if mark != Some(made.acker_at) {
        return Err(format!("acker at {mark:?}, flushed {}", made.acker_at));
    }
    if let Some(entry) = made.entry {
        let read = topic.read(entry).map(|e| e.payload);
        if !matches!(&read, Ok(p) if p == b"new owner's entry") {
            return Err(format!("the new owner's synced entry {entry}: {read:?}"));
        }
        let fresh = topic
            .open_cursor("fresh", opts)
            .map_err(|e| e.to_string())?;
        if !fresh.is_acked(entry).map_err(|e| e.to_string())? {
            return Err(format!("fresh's flushed ack of {entry} is gone"));
        }
        // The first retained entry, unless it is the one `fresh` acknowledged (the entries of
        // trimmed ledgers before it count as acknowledged for every cursor).
        if let Some(first) = topic.first_position().filter(|p| *p != entry)
            && fresh.is_acked(first).map_err(|e| e.to_string())?
        {
            return Err(format!(
                "fresh acknowledges {first}, which it never acknowledged"
            ));
        }
    }
    drop((acker, topic));
    store.close().map_err(|e| format!("close: {e}"))
}

/// A copy of `template` on a new in-memory disk, and the former owner's store opened on it
/// through a [`Tap`] that counts its storage operations (and runs what its [`Watch`] is armed
/// with).
fn former_on_a_copy(template: &MemStorage) -> (MemStorage, Arc<Watch>, Store) {
    let disk = MemStorage::new();
    copy_into(template, &disk);
    let watch = Arc::new(Watch::default());
    let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk.clone()), watch.clone()));
    let old = Store::open_with_storage(storage, store_config(PER_LEDGER)).expect("open");
    (disk, watch, old)
}

/// The storage operations a former owner's open of topic `t` makes on a copy of `template`.
fn open_steps(template: &MemStorage) -> u64 {
    let (_, watch, old) = former_on_a_copy(template);
    let before = watch.count.load(Ordering::SeqCst);
    old.topic("t").expect("topic");
    watch.count.load(Ordering::SeqCst) - before
}

/// The former owner opens topic `t` of a copy of `template` while the new owner claims the
/// store after each of that open's operations in turn, its [`work`] (as `shape` says) done
/// as `when` says: once a listing of that open followed the claim, the open
/// removes and forgets nothing, and a restart finds everything the new owner made
/// (`cursors`: the cursors of `template` besides the acker). Returns the former owner's
/// answers, one per step.
fn at_every_step_of_a_former_owners_open(
    template: &MemStorage,
    (when, shape): (Work, Shape),
    cursors: &[String],
) -> Vec<ackstore::Result<()>> {
    let steps = open_steps(template);
    assert!(steps > 0);
    let mut failures = Vec::new();
    let mut answers = Vec::new();
    for n in 1..=steps {
        let (disk, watch, old) = former_on_a_copy(template);
        let slot: Slot = Arc::default();
        {
            let (slot, disk) = (slot.clone(), disk.clone());
            watch.arm(
                n,
                Box::new(move || {
                    let store = claim(&disk);
                    let made = (when == Work::Inside).then(|| work(&store, shape));
                    *slot.lock().expect("slot") = Some((store, made));
                }),
            );
        }
        let opened = old.topic("t");
        watch.run_if_pending();
        let removed = std::mem::take(&mut *watch.removed_after.lock().expect("ops"));
        if !removed.is_empty() {
            failures.push(format!(
                "claim after step {n} of {steps} of the former owner's open (which answered \
                 {:?}): after a listing that followed the claim, it did {removed:?}",
                opened.as_ref().map(|_| ())
            ));
        }
        answers.push(opened.map(drop));
        // The former owner is done; the new owner works on (if it has not), and closes.
        drop(old);
        let (store, made) = slot.lock().expect("slot").take().expect("the claim ran");
        let made = made.unwrap_or_else(|| work(&store, shape));
        if let Err(e) = store.close() {
            failures.push(format!("claim after step {n}: the new owner's close: {e}"));
        }
        if let Err(e) = restart_holds(&disk, (&made, shape), cursors) {
            failures.push(format!(
                "claim after step {n} of {steps}: after a restart, {e}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    answers
}

/// [`at_every_step_of_a_former_owners_open`] with the new owner's work after the former
/// owner's open, then inside it.
fn at_every_step_either_way(template: &MemStorage, cursors: &[String]) {
    for when in [Work::After, Work::Inside] {
        at_every_step_of_a_former_owners_open(template, (when, GROWS), cursors);
    }
}

/// The names of the files of the topic `t` on `disk` that are ledger files.
fn ledger_files(disk: &MemStorage) -> Vec<String> {
    let storage = topic_storage(Host::Store, disk);
    let mut files: Vec<String> = storage
        .list()
        .expect("list")
        .into_iter()
        .filter(|f| ackstore::internals::log::parse_ledger_file_name(f).is_some())
        .collect();
    files.sort();
    files
}

/// A closed store topic `t` of 5 entries in ledgers of 2, the acker at its third entry.
fn acker_only() -> MemStorage {
    topic_with_an_acker(Host::Store, PER_LEDGER, std::iter::empty()).0
}

#[test]
fn a_former_owners_open_deletes_no_interrupted_create_after_the_new_owners_claim() {
    let template = acker_only();
    // A ledger create cut short before its header: an empty file of an id the record's block
    // holds and no ledger uses.
    let last = ledger_files(&template).pop().expect("a ledger");
    let id = ackstore::internals::log::parse_ledger_file_name(&last).expect("id") + 1;
    let storage = topic_storage(Host::Store, &template);
    let file = storage
        .create(&ackstore::internals::log::ledger_file_name(id))
        .expect("create");
    file.sync_data().expect("sync");
    storage.sync_dir().expect("sync dir");
    at_every_step_either_way(&template, &[]);
}

#[test]
fn a_former_owners_open_deletes_no_orphan_ledger_after_the_new_owners_claim() {
    let template = acker_only();
    // A trim whose deletion was cut short: the record no longer lists the first ledger, its
    // file is still there.
    let storage = topic_storage(Host::Store, &template);
    let first = ledger_files(&template).remove(0);
    let bytes = support::topic::file_bytes(&storage, &first);
    {
        let store = Store::open_with_storage(Arc::new(template.clone()), store_config(PER_LEDGER))
            .expect("open");
        let topic = store.topic("t").expect("topic");
        assert_eq!(topic.trim_consumed().expect("trim").len(), 1);
        drop(topic);
        store.close().expect("close");
    }
    let file = storage.create(&first).expect("create");
    file.write_all_at(&bytes, 0).expect("write");
    file.sync_data().expect("sync");
    storage.sync_dir().expect("sync dir");
    at_every_step_either_way(&template, &[]);
}

/// Refuses every change to the store's journal files while set.
#[derive(Default)]
struct RefuseJournal(AtomicBool);

impl Hook for RefuseJournal {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        let journal = op.name().starts_with("journal");
        let changes = matches!(op, Op::Create(_) | Op::CreateWhole(_) | Op::Write(_));
        if journal && changes && self.0.load(Ordering::SeqCst) {
            let eio = std::io::Error::from_raw_os_error(5);
            return Err(Error::io("injected", op.name().to_owned(), eio));
        }
        Ok(())
    }
}

#[test]
fn a_former_owners_open_forgets_no_cursor_after_the_new_owners_claim() {
    // A deletion of cursor `gone` (acknowledged and flushed) cut short after its record and
    // its entry in the cursor table went, before its state in the journal was forgotten.
    let template = acker_only();
    let refuse = Arc::new(RefuseJournal::default());
    let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(template.clone()), refuse.clone()));
    let store = Store::open_with_storage(storage, store_config(PER_LEDGER)).expect("open");
    let topic = store.topic("t").expect("topic");
    let gone = topic.open_cursor("gone", earliest()).expect("gone");
    gone.ack(Position::new(1, 0)).expect("ack");
    gone.flush().expect("flush");
    drop(gone);
    refuse.0.store(true, Ordering::SeqCst);
    assert!(topic.delete_cursor("gone").is_err());
    std::mem::forget((topic, store));
    let template = template.durable_image();
    at_every_step_either_way(&template, &[]);
}

/// A closed store topic whose cursor table fills one chunk record and more (the acker, then
/// `cursors`); returns the disk and the names of `cursors`.
fn chunked() -> (MemStorage, Vec<String>) {
    let names: Vec<String> = (0..CURSOR_CHUNK_ENTRIES + 8)
        .map(|i| format!("subscription-{i:05}"))
        .collect();
    let (disk, _) = topic_with_an_acker(Host::Store, PER_LEDGER, names.clone());
    let chunks = support::topic::chunk_files(Host::Store, &disk, CURSOR_CHUNK_PREFIX);
    assert_eq!(chunks.len(), 1, "{chunks:?}");
    (disk, names)
}

#[test]
fn a_former_owners_open_removes_no_chunk_record_the_new_owner_wrote() {
    // The new owner deletes a cursor of the full chunk: its record write pins that chunk
    // written again under its own version, a chunk record the former owner's record does not
    // pin.
    let (template, names) = chunked();
    // It neither appends (a ledger file above the former owner's record's block) nor creates a
    // cursor (a record the former owner's table does not list): the former owner's open then
    // refuses its record as older, or is fenced deleting that record, before it gets to the
    // chunk records.
    let shape = Shape {
        deleted: Some("subscription-00005"),
        grows: false,
    };
    let answers = at_every_step_of_a_former_owners_open(&template, (Work::Inside, shape), &names);
    assert!(answers.iter().any(Result::is_ok));
}

#[test]
fn a_former_owners_open_removes_no_chunk_record_after_the_new_owners_claim() {
    // A record write cut short after it wrote its chunk: a copy of the pinned chunk under the
    // name of the record's next version, which no record pins.
    let (template, names) = chunked();
    let storage = topic_storage(Host::Store, &template);
    let pinned = support::topic::chunk_files(Host::Store, &template, CURSOR_CHUNK_PREFIX)
        .pop()
        .expect("a chunk");
    let leftover = leftover_chunk_name(&storage, &pinned);
    let bytes = support::topic::file_bytes(&storage, &pinned);
    let file = storage.create(&leftover).expect("create");
    file.write_all_at(&bytes, 0).expect("write");
    file.sync_data().expect("sync");
    storage.sync_dir().expect("sync dir");
    at_every_step_either_way(&template, &names);
}

/// The name of a chunk record of the same index as `pinned` made at the topic record's next
/// version (`{prefix}{index}-{made_at}.{version}.meta`).
fn leftover_chunk_name(storage: &Arc<dyn Storage>, pinned: &str) -> String {
    let topic_version = storage
        .list()
        .expect("list")
        .iter()
        .filter_map(|f| f.strip_prefix("topic."))
        .filter_map(|f| f.strip_suffix(".meta"))
        .filter_map(|v| v.parse::<u64>().ok())
        .max()
        .expect("a topic record");
    let (stem, rest) = pinned.split_once('.').expect("a record file");
    let (index, _) = stem.rsplit_once('-').expect("made at");
    format!("{index}-{}.{rest}", topic_version + 1)
}

/// A former owner's open of topic `t` while the new owner claims the store, opens the topic
/// and trims its first ledger (its acker acknowledged every entry of it), at every step of
/// that open: the open answers `Ok` or `Fenced`, never that a ledger is missing (it is not
/// lost: the new owner deleted it after taking the topic over).
#[test]
fn a_former_owners_open_answers_fenced_not_a_missing_ledger_the_new_owner_trimmed() {
    let template = acker_only();
    let steps = open_steps(&template);
    let mut failures = Vec::new();
    for n in 1..=steps {
        let (disk, watch, old) = former_on_a_copy(&template);
        let slot: Arc<Mutex<Option<Store>>> = Arc::default();
        {
            let (slot, disk) = (slot.clone(), disk.clone());
            watch.arm(
                n,
                Box::new(move || {
                    disk.break_lock();
                    let store =
                        Store::open_with_storage(Arc::new(disk.clone()), store_config(PER_LEDGER))
                            .expect("the new owner claims the store");
                    let topic = store.topic("t").expect("topic");
                    assert_eq!(topic.trim_consumed().expect("trim").len(), 1);
                    drop(topic);
                    *slot.lock().expect("slot") = Some(store);
                }),
            );
        }
        let opened = old.topic("t");
        watch.run_if_pending();
        match opened {
            Ok(_) | Err(Error::Fenced { .. }) => {}
            Err(e) => failures.push(format!(
                "claim and trim after step {n} of {steps} of the former owner's open: {e:?}"
            )),
        }
        drop(old);
        let store = slot.lock().expect("slot").take().expect("the claim ran");
        store.close().expect("the new owner's close");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// What the new owner does to topic `t` once it claimed the store.
type NewOwnerWork = Arc<dyn Fn(&Store) + Send + Sync>;

/// The former owner's open of topic `t` of a copy of `template`, the new owner's claim and
/// `work` after each of that open's storage operations in turn: every answer that is neither
/// `Ok` nor `Fenced`, with its step.
fn answers_other_than_ok_or_fenced(template: &MemStorage, work: &NewOwnerWork) -> Vec<String> {
    let steps = open_steps(template);
    let mut failures = Vec::new();
    for n in 1..=steps {
        let (disk, watch, old) = former_on_a_copy(template);
        let slot: Arc<Mutex<Option<Store>>> = Arc::default();
        {
            let (slot, disk, work) = (slot.clone(), disk.clone(), work.clone());
            watch.arm(
                n,
                Box::new(move || {
                    let store = claim(&disk);
                    work(&store);
                    *slot.lock().expect("slot") = Some(store);
                }),
            );
        }
        let opened = old.topic("t");
        watch.run_if_pending();
        match opened {
            Ok(_) | Err(Error::Fenced { .. }) => {}
            Err(e) => failures.push(format!("step {n} of {steps}: {e:?}")),
        }
        drop(old);
        let store = slot.lock().expect("slot").take().expect("the claim ran");
        store.close().expect("the new owner's close");
    }
    failures
}

/// A former owner's open of a topic whose cursor table fills a chunk record, while the new
/// owner claims the store, opens the topic and deletes a cursor of that chunk (its record
/// write pins the chunk written again under its own version and removes the one the former
/// owner's record pins), at every step of that open: the open answers `Ok` or `Fenced`, never
/// that a chunk record its record pins is missing (the new owner replaced it after its claim).
#[test]
fn a_former_owners_open_answers_fenced_not_a_missing_chunk_record_the_new_owner_replaced() {
    let (template, _) = chunked();
    let work: NewOwnerWork = Arc::new(|store: &Store| {
        let topic = store.topic("t").expect("topic");
        topic
            .delete_cursor("subscription-00005")
            .expect("the new owner's deletion");
    });
    let failures = answers_other_than_ok_or_fenced(&template, &work);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A former owner's open of topic `t` while the new owner claims the store, appends past the
/// end of a ledger (a new ledger and a record write), moves the acker to the end and trims, at
/// every step of that open: `Ok` or `Fenced`, never damage.
#[test]
fn a_former_owners_open_answers_fenced_not_damage_after_the_new_owners_roll_and_trim() {
    let work: NewOwnerWork = Arc::new(|store: &Store| {
        let topic = store.topic("t").expect("topic");
        for _ in 0..=PER_LEDGER {
            topic.append(b"new owner's entry").expect("append");
        }
        topic.sync().expect("the new owner's sync");
        let acker = topic.open_cursor(ACKER, earliest()).expect("acker");
        let last = topic.last_position().expect("last");
        acker.ack_cumulative(last).expect("ack");
        acker.flush().expect("the new owner's flush");
        assert!(!topic.trim_consumed().expect("trim").is_empty());
    });
    let failures = answers_other_than_ok_or_fenced(&acker_only(), &work);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

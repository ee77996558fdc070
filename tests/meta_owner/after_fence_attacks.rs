//! An owned metadata store checks its links by a listing until its first link over a version
//! (the claim or write that fences former owners), and by name lookups after it. These tests
//! attack the moment that first link is taken for the fence: a claim of the store catalog that
//! is refused after its link (the record moved on since the read) has set nothing a former
//! owner respects, yet the claim the owner tries next is checked by lookups while former
//! owners still write many times and older ones' writes in flight land in freed names.

use crate::support;

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::{Error, MemStorage, Storage};
use support::tap::{Hook, Op, Tap};

/// The record a new owner claims: the store catalog's.
const RECORD: &str = "store";

fn version_file(name: &str, version: u64) -> String {
    format!("{name}.{version:020}.meta")
}

/// The versions of `RECORD` in `disk`'s live directory, lowest first.
fn versions(disk: &MemStorage) -> Vec<u64> {
    let mut found: Vec<u64> = disk
        .list()
        .expect("list")
        .iter()
        .filter_map(|f| {
            f.strip_prefix(&format!("{RECORD}."))?
                .strip_suffix(".meta")?
                .parse()
                .ok()
        })
        .collect();
    found.sort_unstable();
    found
}

/// The record as a reader that lists the directory finds it (highest version).
fn truth(disk: &MemStorage) -> Option<(u64, Vec<u8>)> {
    FileMetaStore::new(Arc::new(disk.clone()))
        .get(RECORD)
        .expect("read")
}

/// Stops the thread that makes the first creation of a file whose name starts with the armed
/// prefix (a write's temporary file: the write checked the record and is about to link the
/// next version), tells the arrival, and waits for the release.
#[derive(Default)]
struct Gate {
    prefix: Mutex<Option<String>>,
    arrived: Mutex<Option<Sender<()>>>,
    go: Mutex<Option<Receiver<()>>>,
}

impl Gate {
    /// Arms the gate before the temporary file of version `version` of `RECORD`; returns the
    /// receiving end of its arrival and the sending end of its release.
    fn arm(&self, version: u64) -> (Receiver<()>, Sender<()>) {
        let (arrived, arrival) = channel();
        let (release, go) = channel();
        *self.arrived.lock().unwrap() = Some(arrived);
        *self.go.lock().unwrap() = Some(go);
        *self.prefix.lock().unwrap() = Some(format!("{RECORD}.{version:020}."));
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
        if matches!(op, Op::Create(_)) && armed {
            *self.prefix.lock().unwrap() = None;
            let arrived = self.arrived.lock().unwrap().take().expect("armed");
            arrived.send(()).expect("the test waits");
            let go = self.go.lock().unwrap().take().expect("armed");
            go.recv().expect("the test releases the gate");
        }
        Ok(())
    }
}

/// A new owner's metadata store on `disk` (through `hook`), the lock broken first, as a
/// takeover would.
fn owner_through(disk: &MemStorage, hook: Arc<dyn Hook>) -> FileMetaStore {
    disk.break_lock();
    let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk.clone()), hook));
    let lock = storage.lock().expect("lock");
    FileMetaStore::owned(storage, &lock)
}

/// No hook.
struct Plain;
impl Hook for Plain {}

/// A chain of owners of the catalog record, each breaking the lock of the one before: `f`
/// (holds 2), `g` (claims 2 -> 3), the new owner `n`, and `h` (claims 5 -> 6). `f` and `g`
/// each have one write in flight that checked the record before the next owner's claim, as
/// every owner may. `n` runs the catalog's claim loop (`CatalogHandle::claim`: read, claim,
/// read again and claim again when `Fenced`):
///
/// 1. `n` reads the record at 3; `g` writes 4 and 5 (removing 2, 3 and 4) and starts a write
///    over 5; `h` claims 5 -> 6; `f`'s write lands in the freed name 3 (a stray, refused).
/// 2. `n`'s claim links 3 -> 4 (a freed name), lists the directory, sees 6 and is refused:
///    right, but its listing counted as the fence and the store now trusts lookups.
/// 3. `n` reads the record again: 6 (`h`'s claim).
/// 4. `h`, still the owner (`n` fenced nothing), writes 7, 8 and 9, each removing the names
///    below; `g`'s write lands in the freed name 6 (a stray, refused).
/// 5. `n` claims 6: its link to 7 succeeds (a freed name), 8 is absent and 6 (the stray)
///    exists, so the lookups pass. The record is at 9 (`h`'s write): the claim must be
///    refused. Accepted, `n` holds `g`'s refused bytes as the catalog, its ownership checks
///    (`is_current(7)`) pass, and `h`'s next write succeeds too.
#[test]
fn a_claim_retried_after_a_refused_claim_is_not_checked_by_lookups_before_the_fence() {
    let disk = MemStorage::new();
    let f_gate = Arc::new(Gate::default());
    let f = owner_through(&disk, f_gate.clone());
    let v1 = f.put(RECORD, None, b"f1").expect("put");
    assert_eq!(f.put(RECORD, Some(v1), b"f2").expect("put"), 2);

    let g_gate = Arc::new(Gate::default());
    // Made inside the scope (after `f`'s write started), borrowed by `g`'s writing thread.
    let g_cell = std::sync::OnceLock::new();
    std::thread::scope(|scope| {
        let (f_arrival, f_release) = f_gate.arm(3);
        let f_write = scope.spawn(|| f.put(RECORD, Some(2), b"f-in-flight"));
        f_arrival.recv().expect("f reaches its write");

        let g = g_cell.get_or_init(|| owner_through(&disk, g_gate.clone()));
        assert_eq!(g.get(RECORD).expect("get").map(|(v, _)| v), Some(2));
        assert_eq!(g.claim(RECORD, 2).expect("claim"), 3);

        let n = owner_through(&disk, Arc::new(Plain));
        assert_eq!(n.get(RECORD).expect("get"), Some((3, b"f2".to_vec())));

        assert_eq!(g.put(RECORD, Some(3), b"g4").expect("put"), 4);
        assert_eq!(g.put(RECORD, Some(4), b"g5").expect("put"), 5);
        let (g_arrival, g_release) = g_gate.arm(6);
        let g_write = scope.spawn(move || g.put(RECORD, Some(5), b"g-in-flight"));
        g_arrival.recv().expect("g reaches its write");

        let h = owner_through(&disk, Arc::new(Plain));
        assert_eq!(h.get(RECORD).expect("get").map(|(v, _)| v), Some(5));
        assert_eq!(h.claim(RECORD, 5).expect("claim"), 6);

        f_release.send(()).expect("release f");
        let f_outcome = f_write.join().expect("f's thread");
        assert!(
            matches!(f_outcome, Err(Error::Fenced { .. })),
            "{f_outcome:?}"
        );
        assert!(disk.exists(&version_file(RECORD, 3)).expect("exists"));

        // The claim loop's first attempt: refused, rightly.
        let first = n.claim(RECORD, 3);
        assert!(matches!(first, Err(Error::Fenced { .. })), "{first:?}");
        // Its second read.
        assert_eq!(n.get(RECORD).expect("get"), Some((6, b"g5".to_vec())));

        let mut at = 6;
        for bytes in [b"h7", b"h8", b"h9"] {
            at = h.put(RECORD, Some(at), bytes).expect("put");
        }
        assert_eq!(at, 9);
        g_release.send(()).expect("release g");
        let g_outcome = g_write.join().expect("g's thread");
        assert!(
            matches!(g_outcome, Err(Error::Fenced { .. })),
            "{g_outcome:?}"
        );
        assert!(disk.exists(&version_file(RECORD, 6)).expect("exists"));
        assert_eq!(truth(&disk), Some((9, b"h9".to_vec())));

        // The claim loop's second attempt.
        let claimed = n.claim(RECORD, 6);
        let listed = versions(&disk);
        let read = n
            .get(RECORD)
            .map(|r| r.map(|(v, bytes)| (v, String::from_utf8_lossy(&bytes).into_owned())));
        let owner_check = claimed.as_ref().ok().map(|&v| n.is_current(RECORD, v));
        let next_of_h = h.put(RECORD, Some(9), b"h10");
        assert!(
            matches!(claimed, Err(Error::Fenced { .. })),
            "the new owner's second claim, of version 6, returned {claimed:?} while the record \
             is at 9 (h's committed write; names {listed:?}); the new owner then reads {read:?}, \
             its ownership check says {owner_check:?}, and h's next write returns {next_of_h:?}"
        );
    });
}

/// One stop's ends for the test: the receiving end of its arrival, the sending end of its
/// release.
type StopEnds = (Receiver<()>, Sender<()>);

/// Stops the thread that makes each of the first `stops.len()` links to a name starting with
/// `prefix` (a claim's link, or a write's), before it runs: tells the arrival, then waits for
/// the release.
struct LinkStops {
    prefix: &'static str,
    stops: Mutex<std::collections::VecDeque<(Sender<()>, Receiver<()>)>>,
}

impl LinkStops {
    /// Stops at `n` links; returns the ends of each stop.
    fn new(prefix: &'static str, n: usize) -> (Arc<Self>, Vec<StopEnds>) {
        let mut stops = std::collections::VecDeque::new();
        let mut ends = Vec::new();
        for _ in 0..n {
            let (arrived, arrival) = channel();
            let (release, go) = channel();
            stops.push_back((arrived, go));
            ends.push((arrival, release));
        }
        let hook = Arc::new(Self {
            prefix,
            stops: Mutex::new(stops),
        });
        (hook, ends)
    }
}

impl Hook for LinkStops {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        if let Op::Link(_, to) = op
            && to.starts_with(self.prefix)
        {
            let stop = self.stops.lock().unwrap().pop_front();
            if let Some((arrived, go)) = stop {
                arrived.send(()).expect("the test waits");
                go.recv().expect("the test releases the stop");
            }
        }
        Ok(())
    }
}

/// A store opened on `disk` through `hook`, the lock broken first (a takeover).
fn store_through(disk: &MemStorage, hook: Arc<dyn Hook>) -> ackstore::Result<ackstore::Store> {
    disk.break_lock();
    let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk.clone()), hook));
    ackstore::Store::open_with_storage(storage, support::topic::store_config(4))
}

/// The interleaving of the test above, through stores: `f`, `g` and `h` are stores that each
/// took the directory over from the one before, `f`'s and `g`'s last topic creations (a write
/// of the catalog each) in flight from before the next one's open, and the new owner `n`'s
/// open (`Store::open`, whose catalog claim reads the record and claims it again when
/// refused) runs with `g` and then `h` creating topics before each of its two claims. Of `n`
/// and `h`, one owns the store afterwards: `n`'s open is refused, or `h`'s next topic creation
/// is.
#[test]
fn a_store_open_whose_catalog_claim_is_retried_never_leaves_two_owners() {
    let disk = MemStorage::new();
    let f_gate = Arc::new(Gate::default());
    let f = store_through(&disk, f_gate.clone()).expect("f opens");
    f.topic("f-1").expect("f creates a topic");
    let vf = *versions(&disk).last().expect("a catalog");

    // f's next creation stops before its write of the catalog's next version.
    let (f_arrival, f_release) = f_gate.arm(vf + 1);
    let f_write = std::thread::spawn(move || {
        let created = f.topic("f-in-flight").map(drop);
        (f, created)
    });
    f_arrival.recv().expect("f reaches its catalog write");

    let g_gate = Arc::new(Gate::default());
    let g = store_through(&disk, g_gate.clone()).expect("g opens");
    assert_eq!(
        *versions(&disk).last().expect("catalog"),
        vf + 1,
        "g's open claims the catalog and writes nothing: {:?}",
        versions(&disk)
    );

    // n opens, stopped before each of its first two links of a catalog name.
    let (n_hook, mut n_stops) = LinkStops::new("store.0", 2);
    let (second_arrival, second_release) = n_stops.pop().expect("two stops");
    let (first_arrival, first_release) = n_stops.pop().expect("two stops");
    let n_disk = disk.clone();
    let n_open = std::thread::spawn(move || store_through(&n_disk, n_hook));
    first_arrival.recv().expect("n reaches its claim");

    g.topic("g-1").expect("g creates a topic");
    g.topic("g-2").expect("g creates a topic");
    let vg = *versions(&disk).last().expect("catalog");
    let (g_arrival, g_release) = g_gate.arm(vg + 1);
    let g_write = std::thread::spawn(move || {
        let created = g.topic("g-in-flight").map(drop);
        (g, created)
    });
    g_arrival.recv().expect("g reaches its catalog write");

    // h takes over (n's open has not claimed anything yet).
    disk.break_lock();
    let h =
        ackstore::Store::open_with_storage(Arc::new(disk.clone()), support::topic::store_config(4))
            .expect("h opens");
    assert_eq!(*versions(&disk).last().expect("catalog"), vg + 1);

    f_release.send(()).expect("release f");
    let (f, f_created) = f_write.join().expect("f's thread");
    assert!(
        matches!(f_created, Err(Error::Fenced { .. })),
        "{f_created:?}"
    );

    // n's first claim; its second read, then its second stop.
    first_release.send(()).expect("release n");
    second_arrival.recv().expect("n claims again");

    for name in ["h-1", "h-2", "h-3"] {
        h.topic(name).expect("h creates a topic");
    }
    g_release.send(()).expect("release g");
    let (g, g_created) = g_write.join().expect("g's thread");
    assert!(
        matches!(g_created, Err(Error::Fenced { .. })),
        "{g_created:?}"
    );
    let listed = versions(&disk);

    second_release.send(()).expect("release n");
    let n = n_open.join().expect("n's thread");
    let n_topics = n.as_ref().ok().map(ackstore::Store::topic_names);
    let h_next = h.topic("h-4").map(drop);
    assert!(
        n.is_err() || h_next.is_err(),
        "both own the store: n's open returned Ok (its topics {n_topics:?}) while the catalog \
         was at h's write (names before n's second claim: {listed:?}), and h's next topic \
         creation returned {h_next:?}"
    );
    drop((f, g));
}

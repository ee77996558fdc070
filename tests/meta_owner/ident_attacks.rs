//! Attacks on what an owned metadata store remembers of the file each version it holds
//! (`Ident`: the file's length and the CRC that ends it), which its ownership check
//! ([`MetaStore::is_current`]), the check after a link and a read by name lookups compare
//! against the file under that version's name: a stray a stale owner linked into the name once
//! newer writes freed it must not pass for the version a former owner holds, and a single
//! owner must never be refused in normal life (writes, claims, deletions, reopens, chunk
//! records, records of earlier releases, in memory and on real files).
//!
//! Three owners in turn, as the stray attacks elsewhere: E's write of the record's next
//! version is held in flight after its check; F claims the record into that name; G claims it
//! from F and writes it twice, which frees F's name; E's link then lands there.

use crate::support;

use std::sync::{Arc, Barrier, Mutex};

use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::{Error, MemStorage, Storage, Store};
use support::tap::{Hook, Op, Tap};
use support::topic::{entries, store_config};

fn version_file(name: &str, version: u64) -> String {
    format!("{name}.{version:020}.meta")
}

/// A new owner's metadata store on `disk`, its lock broken first (as a takeover would).
fn owner(disk: &MemStorage) -> FileMetaStore {
    disk.break_lock();
    let lock = disk.lock().expect("lock");
    FileMetaStore::owned(Arc::new(disk.clone()), &lock)
}

/// The record as a reader that lists the directory finds it (highest version).
fn truth(disk: &MemStorage, name: &str) -> Option<(u64, Vec<u8>)> {
    FileMetaStore::new(Arc::new(disk.clone()))
        .get(name)
        .expect("read")
}

/// Runs an action once, right before the creation of the first file whose name starts with
/// `prefix` (a write's temporary file: the write made its check, nothing else).
#[derive(Default)]
struct BeforeCreate {
    prefix: String,
    action: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Hook for BeforeCreate {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        let name = match op {
            Op::Create(name) | Op::CreateWhole(name) => name,
            _ => return Ok(()),
        };
        if name.starts_with(&self.prefix) {
            let action = self.action.lock().unwrap().take();
            if let Some(action) = action {
                action();
            }
        }
        Ok(())
    }
}

/// What [`stray_in_a_held_name`] leaves: the former owner F (which holds version 4 of
/// `store`) and the new owner G (which wrote 6 and 7 over its claim of 4 -> 5).
struct Stray {
    f: FileMetaStore,
    g: FileMetaStore,
}

/// E reads `store` at 3 and starts a write of 4, held after its check. Meanwhile F reads 3
/// and claims it (3 -> 4), G reads 4 and claims it (4 -> 5); `between` runs on F (with G's
/// claim made, before G's writes); G writes 6 and 7 (the first removes 4 and 5, the second
/// 6); E's link then lands in the freed name 4, and E is refused.
fn stray_in_a_held_name(between: impl FnOnce(&FileMetaStore) + Send + 'static) -> Stray {
    let disk = MemStorage::new();
    let first = owner(&disk);
    let mut at = first.put("store", None, b"one").expect("put");
    for bytes in [b"two", b"thr"] {
        at = first.put("store", Some(at), bytes).expect("put");
    }
    assert_eq!(at, 3);

    let hook = Arc::new(BeforeCreate {
        prefix: format!("store.{:020}.", 4),
        ..BeforeCreate::default()
    });
    disk.break_lock();
    let lock = disk.lock().expect("lock");
    let e_storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk.clone()), hook.clone()));
    let e = FileMetaStore::owned(e_storage, &lock);
    assert_eq!(e.get("store").expect("get").map(|(v, _)| v), Some(3));

    let slot: Arc<Mutex<Option<Stray>>> = Arc::default();
    let out = slot.clone();
    let shared = disk.clone();
    *hook.action.lock().unwrap() = Some(Box::new(move || {
        let f = owner(&shared);
        assert_eq!(f.get("store").expect("get").map(|(v, _)| v), Some(3));
        assert_eq!(f.claim("store", 3).expect("f claims"), 4);
        let g = owner(&shared);
        assert_eq!(g.get("store").expect("get").map(|(v, _)| v), Some(4));
        assert_eq!(g.claim("store", 4).expect("g claims"), 5);
        between(&f);
        let six = g.put("store", Some(5), b"g6").expect("g writes 6");
        let seven = g.put("store", Some(six), b"g7").expect("g writes 7");
        assert_eq!(seven, 7);
        *out.lock().unwrap() = Some(Stray { f, g });
    }));
    let e_write = e.put("store", Some(3), b"stale");
    assert!(matches!(e_write, Err(Error::Fenced { .. })), "{e_write:?}");
    assert!(
        disk.exists(&version_file("store", 4)).expect("exists"),
        "e's link left a stray in the freed name 4"
    );
    assert_eq!(truth(&disk, "store"), Some((7, b"g7".to_vec())));
    slot.lock().unwrap().take().expect("the owners ran")
}

/// The scenario the stray check was made for: F does nothing between G's claim and E's
/// stray; its check of version 4 must fail.
#[test]
fn a_stray_in_a_held_name_fails_the_former_owners_check() {
    let Stray { f, g } = stray_in_a_held_name(|_| {});
    assert!(
        !f.is_current("store", 4).expect("check"),
        "f's check of version 4 passed while g wrote 7"
    );
    assert!(g.is_current("store", 7).expect("check"));
}

/// F reads the record once after G's claim (as a refused write, or a check that reads the
/// record to tell a fence from a forgotten name, does): it sees G's claim at 5. That read must
/// not make F forget what its own version 4 held: E's stray later lands in name 4, and F's
/// check of version 4 must still fail, the record being at 7.
#[test]
fn a_read_after_the_new_owners_claim_never_lets_a_stray_pass_the_former_owners_check() {
    let Stray { f, g } = stray_in_a_held_name(|f| {
        assert_eq!(
            f.get("store").expect("f reads").map(|(v, _)| v),
            Some(5),
            "f reads g's claim"
        );
    });
    let check = f.is_current("store", 4).expect("check");
    assert!(
        !check,
        "f's check of version 4 passed through e's stray in name 4 after f read g's claim at \
         5, while the record is at 7 (g's write); g's check of 7: {:?}",
        g.is_current("store", 7)
    );
}

/// As above, but what F does between G's claim and its writes is a write of its own, refused
/// (`Fenced`): the refusal's read is the one that moves what F remembers.
#[test]
fn a_refused_write_never_lets_a_stray_pass_the_former_owners_check_later() {
    let Stray { f, .. } = stray_in_a_held_name(|f| {
        let refused = f.put("store", Some(4), b"f5");
        assert!(matches!(refused, Err(Error::Fenced { .. })), "{refused:?}");
    });
    assert!(
        !f.is_current("store", 4).expect("check"),
        "f's check of version 4 passed through e's stray after f's write was refused"
    );
}

/// Holds the next write (its temporary file, or its whole creation) of a version of the
/// store catalog, before it runs, on two barriers: the test waits on the first to know the
/// write was reached, and on the second to let it go on.
#[derive(Default)]
struct CatalogGate {
    armed: Mutex<Option<Arc<(Barrier, Barrier)>>>,
}

impl Hook for CatalogGate {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        let catalog_write = match op {
            Op::Create(name) | Op::CreateWhole(name) => {
                name.starts_with("store.") && name.contains(".meta")
            }
            _ => false,
        };
        let held = catalog_write
            .then(|| self.armed.lock().expect("gate").take())
            .flatten();
        if let Some(held) = held {
            held.0.wait();
            held.1.wait();
        }
        Ok(())
    }
}

/// A new owner of the store on `disk` (the lock broken), through a gate of its own.
fn store_owner(disk: &MemStorage) -> (Store, Arc<CatalogGate>) {
    disk.break_lock();
    let gate = Arc::new(CatalogGate::default());
    let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk.clone()), gate.clone()));
    let store = Store::open_with_storage(storage, store_config(1_000)).expect("open");
    (store, gate)
}

/// The store-level consequence. Three owners of a store in turn: E's topic creation (a
/// catalog write) is held after its check; F claims the store into the name E's write
/// targets, opens topic x and appends and syncs an entry (its ledger is created and recorded
/// in x's record); G claims the store and opens x. F then tries to create a topic and is
/// refused (`Fenced`), as it must be: a broker keeps calling a former owner that was refused
/// once. G creates two topics (freeing F's catalog name) and E's held write lands in it. F's
/// next append and sync on x must be refused too: a sync that returns `Ok` says the entry is
/// kept, and G, which holds the store and x, never reads it.
#[test]
fn a_former_store_owner_refused_once_is_refused_again_after_a_stray_lands_in_its_name() {
    let disk = MemStorage::new();
    {
        let store =
            Store::open_with_storage(Arc::new(disk.clone()), store_config(1_000)).expect("open");
        let x = store.topic("x").expect("topic");
        x.append(b"d").expect("append");
        x.sync().expect("sync");
        drop(x);
        store.close().expect("close");
    }
    let (e, e_gate) = store_owner(&disk);
    let held: Arc<(Barrier, Barrier)> = Arc::new((Barrier::new(2), Barrier::new(2)));
    *e_gate.armed.lock().unwrap() = Some(held.clone());
    let e_writer = e.clone();
    let e_creation = std::thread::spawn(move || e_writer.topic("from-e").map(drop));
    held.0.wait();
    let (f, _) = store_owner(&disk);
    let fx = f.topic("x").expect("f opens x");
    fx.append(b"f1").expect("f appends");
    fx.sync().expect("f syncs, as the store's owner");
    let (g, _) = store_owner(&disk);
    let gx = g.topic("x").expect("g opens x");
    let f_early = f.topic("from-f-early").map(drop);
    assert!(
        matches!(f_early, Err(Error::Fenced { .. })),
        "f's creation after g's claim: {f_early:?}"
    );
    g.topic("from-g-1").expect("g creates a topic");
    g.topic("from-g-2").expect("g creates another");
    held.1.wait();
    let e_outcome = e_creation.join().expect("e's creation");
    assert!(
        matches!(e_outcome, Err(Error::Fenced { .. })),
        "e's held creation: {e_outcome:?}"
    );
    let f_append = fx.append(b"f2").and_then(|p| fx.sync().map(|()| p));
    let g_reads = entries(&gx);
    assert!(
        matches!(f_append, Err(Error::Fenced { .. })),
        "f passed its ownership check after g's claim (refused once before e's stray landed \
         in the name of its catalog version): f's append and sync of `f2` on x returned \
         {f_append:?}; g, which holds the store and x, reads x as {g_reads:?}"
    );
}

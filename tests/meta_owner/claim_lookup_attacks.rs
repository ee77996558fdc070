//! A claim by an owned metadata store of a record whose names it knows (from its listing, or
//! left by its own writes and claims) checks its link by two name lookups instead of a listing.
//! These tests put other writers around such a claim: a former owner's write, claim or delete
//! at every storage step of the new owner's claims, and a record that moved on by several
//! versions (its older names removed) while a still older writer linked a stray into a freed
//! name, between the new owner's read of the record and its claim (the order of a topic's
//! open: its metadata store lists the directory at its first read, before the claim of the
//! topic record that fences the former owner).

use crate::support;

use std::sync::Arc;

use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::{Error, MemStorage, Storage};
use support::tap::{Hook, Op, Tap};

/// Runs an action once, right before the creation of the first file whose name starts with
/// `prefix`: between a write's check of the record (it read the version it builds on) and its
/// temporary file, which the link that follows makes the next version.
#[derive(Default)]
struct BeforeCreate {
    prefix: String,
    action: std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Hook for BeforeCreate {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        if let Op::Create(name) = op
            && name.starts_with(&self.prefix)
        {
            let action = self.action.lock().unwrap().take();
            if let Some(action) = action {
                action();
            }
        }
        Ok(())
    }
}

fn version_file(name: &str, version: u64) -> String {
    format!("{name}.{version:020}.meta")
}

/// The record as a reader that lists the directory finds it (highest version).
fn truth(disk: &MemStorage, name: &str) -> Option<(u64, Vec<u8>)> {
    FileMetaStore::new(Arc::new(disk.clone()))
        .get(name)
        .expect("read")
}

/// The record is at 2 (`a` wrote it). An older owner `stale`, which checked the record at 2,
/// has its write of 3 in flight. A former owner `f` claims 2 -> 3; the new owner `n` reads the
/// record (its first call: it lists the directory and finds 3, with name 2 below); then, before
/// `n`'s claim, `f` writes 4, 5 and 6 (legitimately: `n` has fenced nothing yet), each removing
/// the versions it replaced, and `stale`'s link lands in the freed name 3 (a stray below the
/// record, its write refused). `n` then claims 3: the record is at 6, `f`'s committed write,
/// so the claim must be refused; a claim that returns `Ok` leaves `n` holding a stray (its
/// reads return the stale writer's bytes) while `f`'s next write succeeds too.
#[test]
fn a_claim_linked_from_a_stray_at_the_read_version_is_fenced_when_the_record_moved_on() {
    let disk = MemStorage::new();
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let lock = storage.lock().expect("lock");
    let a = FileMetaStore::owned(storage.clone(), &lock);
    let v1 = a.put("topic", None, b"one").expect("put");
    let v2 = a.put("topic", Some(v1), b"two").expect("put");
    assert_eq!(v2, 2);

    let hook = Arc::new(BeforeCreate {
        prefix: format!("topic.{:020}.", 3),
        ..BeforeCreate::default()
    });
    let stale_storage: Arc<dyn Storage> = Arc::new(Tap::new(storage.clone(), hook.clone()));
    let stale = FileMetaStore::owned(stale_storage, &lock);
    assert_eq!(stale.get("topic").expect("get"), Some((2, b"two".to_vec())));

    let outcome: Arc<std::sync::Mutex<Option<(FileMetaStore, FileMetaStore)>>> = Arc::default();
    let slot = outcome.clone();
    let shared = disk.clone();
    *hook.action.lock().unwrap() = Some(Box::new(move || {
        let f = owner(&shared);
        // Its first write (of another record) runs its sweep, before the stale writer's
        // temporary file exists.
        f.put("other", None, b"x").expect("put");
        assert_eq!(f.get("topic").expect("get").map(|(v, _)| v), Some(2));
        assert_eq!(f.claim("topic", 2).expect("claim"), 3);
        let n = owner(&shared);
        assert_eq!(
            n.get("topic").expect("get"),
            Some((3, b"two".to_vec())),
            "the new owner reads the claimed record"
        );
        let mut at = 3;
        for bytes in [b"f4", b"f5", b"f6"] {
            at = f.put("topic", Some(at), bytes).expect("put");
        }
        assert_eq!(at, 6);
        *slot.lock().unwrap() = Some((f, n));
    }));
    // The stale writer links 3 into the freed name, and is refused.
    let stale_write = stale.put("topic", Some(2), b"stale");
    assert!(
        matches!(stale_write, Err(Error::Fenced { .. })),
        "{stale_write:?}"
    );
    let (f, n) = outcome.lock().unwrap().take().expect("the writers ran");
    assert_eq!(truth(&disk, "topic"), Some((6, b"f6".to_vec())));
    assert!(disk.exists(&version_file("topic", 3)).expect("exists"));

    let claimed = n.claim("topic", 3);
    let read = n.get("topic");
    let next_of_f = f.put("topic", Some(6), b"f7");
    assert!(
        matches!(claimed, Err(Error::Fenced { .. })),
        "the new owner's claim of version 3 returned {claimed:?} while the record is at 6 \
         (f's committed write); the new owner then reads {read:?}, and f's next write \
         returns {next_of_f:?}"
    );
}

/// A new owner's metadata store on `disk`, its lock broken first (as a takeover would).
fn owner(disk: &MemStorage) -> FileMetaStore {
    disk.break_lock();
    let lock = disk.lock().expect("lock");
    FileMetaStore::owned(Arc::new(disk.clone()), &lock)
}

/// What the former owner does once, at one step of the new owner's calls.
#[derive(Debug, Clone, Copy)]
enum FormerOp {
    Put,
    Claim,
    Delete,
}

/// The former owner `f` read the record at 2 and has one write of it (`op`) left, which runs
/// right after the `n`-th storage operation of the new owner `n`'s calls: a read that lists the
/// directory, two claims (each of a record whose names `n` knows) and a put. Of the two, never
/// both succeed; when `n`'s calls all succeed the record is `n`'s write, and a call of `n`
/// that is refused is `Fenced`. Returns how many operations `n` made.
fn former_write_at_step(op: FormerOp, step: u64) -> u64 {
    let disk = MemStorage::new();
    let first = owner(&disk);
    let v1 = first.put("cursor-1", None, b"one").expect("put");
    first.claim("cursor-1", v1).expect("claim");
    let f = owner(&disk);
    assert_eq!(f.get("cursor-1").expect("get").map(|(v, _)| v), Some(2));
    f.put("other", None, b"swept").expect("put");

    disk.break_lock();
    let counted = support::takeover::Disk::new(Arc::new(disk.clone()));
    let lock = counted.storage.lock().expect("lock");
    let n = FileMetaStore::owned(counted.storage.clone(), &lock);
    let slot = counted.arm_takeover(step, move || match op {
        FormerOp::Put => f.put("cursor-1", Some(2), b"former").map(drop),
        FormerOp::Claim => f.claim("cursor-1", 2).map(drop),
        FormerOp::Delete => f.delete("cursor-1", 2),
    });
    let before = counted.hook.count();
    let mut read = None;
    let calls = (|| -> ackstore::Result<Option<u64>> {
        let Some((at, _)) = n.get("cursor-1")? else {
            return Ok(None);
        };
        read = Some(at);
        let at = n.claim("cursor-1", at)?;
        let at = n.claim("cursor-1", at)?;
        n.put("cursor-1", Some(at), b"newer").map(Some)
    })();
    let made = counted.hook.count() - before;
    let former = slot.lock().unwrap().take();
    let truth = truth(&disk, "cursor-1");
    let what = format!(
        "{op:?} after operation {step} of the new owner (which read {read:?}): {calls:?}, \
         {former:?}"
    );
    match (&calls, &former) {
        // Both built on version 2: one of them must have been refused.
        (Ok(Some(_)), Some(Ok(()))) if read == Some(2) => {
            panic!("{what}: both succeeded; the record is {truth:?}")
        }
        (Ok(Some(v)), _) => assert_eq!(truth, Some((*v, b"newer".to_vec())), "{what}"),
        (Ok(None), _) => assert!(matches!(op, FormerOp::Delete), "{what}"),
        (Err(Error::Fenced { .. }), _) => {}
        (Err(e), _) => panic!("{what}: the new owner failed otherwise: {e}"),
    }
    made
}

#[test]
fn a_former_owners_put_claim_or_delete_at_every_step_of_the_new_owners_claims_never_both_succeed() {
    for op in [FormerOp::Put, FormerOp::Claim, FormerOp::Delete] {
        let steps = former_write_at_step(op, u64::MAX);
        assert!(steps > 5, "{steps}");
        for step in 0..=steps {
            former_write_at_step(op, step);
        }
    }
}

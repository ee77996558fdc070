//! Two owners of one store whose claims interleave: an owner opens the store (a claim of a
//! version 5 catalog, or the upgrade of a version 4 one whose topics move into chunk records)
//! and creates a topic, while a second owner breaks the lock after every storage operation of
//! that open and creation in turn, claims the store and creates a topic. The first of the two
//! creations to take fills the catalog's tail (a chunk record, then the catalog).
//!
//! Every check compares with a model: the store opens and `verify` finds it sound; it holds the
//! topics it held before, then only the two new names, each once; the second owner's creation
//! returned `Ok` and is kept; the first's returned `Ok` and is kept, or was refused as
//! `Fenced` (its open too may be refused, `Fenced` or by the lock), never `Ok` and lost.

use crate::catalog_chunks::{as_version_4, copy_into, name, reopened_holds, store_of};
use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::internals::format::store::CHUNK_TOPICS;
use ackstore::{Error, MemStorage, Storage, Store};
use support::config::store_without_flusher;
use support::takeover;

/// The first owner's work: its open of the store on `storage` and its creation of `former`.
fn first_owner(storage: Arc<dyn Storage>) -> (ackstore::Result<Store>, ackstore::Result<()>) {
    match Store::open_with_storage(storage, store_without_flusher()) {
        Ok(store) => {
            let made = store.topic("former").map(drop);
            (Ok(store), made)
        }
        Err(e) => (Err(e), Err(Error::Closed)),
    }
}

/// The race on a copy of `template` (a closed store of `before` topics, `before + 1` a
/// multiple of [`CHUNK_TOPICS`]: the first creation fills the tail), the second owner's claim after
/// each storage operation of the first owner's open and creation in turn. Returns how often
/// the first owner's creation was kept and refused.
fn claims_at_every_step_of_an_open_and_a_creation(
    template: &MemStorage,
    before: usize,
) -> (u32, u32) {
    let base: Vec<String> = (0..before).map(name).collect();
    let steps = takeover::operations_on_a_copy(template, first_owner);
    let (mut kept, mut refused) = (0, 0);
    for n in 1..=steps {
        let what = format!("step {n} of {steps}");
        let disk = MemStorage::new();
        copy_into(template, &disk);
        let hooked = takeover::Disk::new(Arc::new(disk.clone()));
        let slot = {
            let disk = disk.clone();
            hooked.arm_takeover(n, move || {
                disk.break_lock();
                let store = Store::open_with_storage(Arc::new(disk), store_without_flusher())
                    .expect("the second owner claims the store");
                let made = store.topic("second").map(drop);
                (store, made)
            })
        };
        let (first, former) = first_owner(hooked.storage.clone());
        hooked.hook.run_if_pending();
        let (second, second_made) = slot.lock().expect("slot").take().expect("the takeover ran");
        second_made.unwrap_or_else(|e| panic!("{what}: the second owner's creation: {e}"));
        match &first {
            Ok(_) => assert!(
                matches!(former, Ok(()) | Err(Error::Fenced { .. })),
                "{what}: the first owner's creation: {former:?}"
            ),
            Err(e) => assert!(
                matches!(e, Error::Fenced { .. } | Error::Locked { .. }),
                "{what}: the first owner's open: {e}"
            ),
        }
        // Either owner may be fenced by now (the first one's open claims again after a
        // refused compare-and-set): its close may be refused.
        if let Ok(first) = first {
            let _ = first.close();
        }
        let _ = second.close();
        drop(second);
        disk.break_lock();
        let storage: Arc<dyn Storage> = Arc::new(disk);
        let store = Store::open_with_storage(storage.clone(), store_without_flusher())
            .unwrap_or_else(|e| panic!("{what}: the store after the race: {e}"));
        let names = store.topic_names();
        store.close().expect("close");
        drop(store);
        assert_eq!(names[..before], base[..], "{what}");
        let added: BTreeSet<&str> = names[before..].iter().map(String::as_str).collect();
        assert_eq!(added.len(), names.len() - before, "{what}: {names:?}");
        assert!(
            added.is_subset(&BTreeSet::from(["former", "second"])),
            "{what}: invented: {names:?}"
        );
        assert!(added.contains("second"), "{what}: the second's Ok lost");
        if former.is_ok() {
            kept += 1;
            assert!(added.contains("former"), "{what}: the first's Ok lost");
        } else {
            refused += 1;
        }
        reopened_holds(&storage, &names);
    }
    (kept, refused)
}

/// The claim of a version 5 catalog: the first owner's claim, its reads of the chunks and its
/// removal of the chunk records its version does not pin, then its creation.
#[test]
fn a_new_owners_claim_and_creation_at_every_step_of_a_claim_loses_no_ok_and_no_chunk() {
    let before = 2 * CHUNK_TOPICS - 1;
    let (kept, refused) = claims_at_every_step_of_an_open_and_a_creation(&store_of(before), before);
    assert!(kept > 0 && refused > 0, "kept {kept}, refused {refused}");
}

/// The upgrade of a version 4 catalog (its full chunks written under the next version's
/// names, then the catalog by compare-and-set on the version read), then the creation; the
/// second owner's open finds the version 4 catalog (and upgrades it too, the same chunks under
/// the same names) or the upgraded one (and claims it).
#[test]
fn a_new_owners_claim_and_creation_at_every_step_of_an_upgrade_loses_no_ok_and_no_chunk() {
    let before = 2 * CHUNK_TOPICS - 1;
    let template = store_of(before);
    as_version_4(&template);
    let (kept, refused) = claims_at_every_step_of_an_open_and_a_creation(&template, before);
    assert!(kept > 0 && refused > 0, "kept {kept}, refused {refused}");
}

//! A store's only owner whose catalog write failed after its new version was linked, and
//! whose read of the catalog to learn whether it took failed too: the owner cannot tell, and
//! no other owner claimed the store, so it is never told `Fenced` (another owner took over);
//! it may be told `PreviousIo` (reopen), or succeed.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ackstore::{Error, MemStorage, Storage, Store};
use support::config::store_without_flusher;
use support::tap::{Hook, Op, Tap};

/// Fails every operation once a link of a catalog version took, until disarmed.
#[derive(Default)]
struct FailAfterCatalogLink {
    armed: AtomicBool,
    failing: AtomicBool,
}

impl Hook for FailAfterCatalogLink {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        if self.failing.load(Ordering::SeqCst) {
            let eio = std::io::Error::from_raw_os_error(5);
            return Err(Error::io("injected", op.name().to_owned(), eio));
        }
        Ok(())
    }

    fn after(&self, op: Op<'_>) {
        if self.armed.load(Ordering::SeqCst)
            && matches!(op, Op::Link(_, to) if to.starts_with("store."))
        {
            self.armed.store(false, Ordering::SeqCst);
            self.failing.store(true, Ordering::SeqCst);
        }
    }
}

#[test]
fn an_owner_that_cannot_tell_whether_its_catalog_write_took_is_not_told_it_is_fenced() {
    let disk = MemStorage::new();
    let hook = Arc::new(FailAfterCatalogLink::default());
    let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk), hook.clone()));
    let store = Store::open_with_storage(storage, store_without_flusher()).expect("open");
    store.topic("a").expect("a");
    hook.armed.store(true, Ordering::SeqCst);
    let failed = store.topic("b").map(drop);
    assert!(
        hook.failing.swap(false, Ordering::SeqCst),
        "no catalog link"
    );
    assert!(matches!(failed, Err(Error::Io { .. })), "{failed:?}");
    for name in ["c", "a", "b"] {
        let answer = store.topic(name).map(drop);
        assert!(
            matches!(answer, Ok(()) | Err(Error::PreviousIo)),
            "topic {name} of the store's only owner: {answer:?}"
        );
    }
    let flushed = store.flush_all().map(drop);
    assert!(
        matches!(flushed, Ok(()) | Err(Error::PreviousIo)),
        "the only owner's flush: {flushed:?}"
    );
}

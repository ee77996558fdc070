//! A takeover in the middle of a call: [`Disk`] is a storage (the in-memory disk, or any other)
//! that runs an action (a new owner's open, a file removed behind the owner's back) right after
//! its N-th operation, reads included (an ownership check is a read), inside whatever call made
//! it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ackstore::Storage;

use super::tap::{Hook as TapHook, Op, Tap};

type Action = Box<dyn FnOnce() + Send>;

/// Counts operations and runs the armed action after the chosen one.
#[derive(Default)]
pub struct Hook {
    count: AtomicU64,
    at: AtomicU64,
    action: Mutex<Option<Action>>,
}

impl Hook {
    /// Operations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// Runs `action` after `n` more operations.
    pub fn arm(&self, n: u64, action: Action) {
        self.at.store(self.count() + n, Ordering::SeqCst);
        *self.action.lock().unwrap() = Some(action);
    }

    /// The action if it has not run (then it runs now).
    pub fn run_if_pending(&self) {
        let action = self.action.lock().unwrap().take();
        if let Some(action) = action {
            action();
        }
    }
}

impl TapHook for Hook {
    fn after(&self, _: Op<'_>) {
        let count = self.count.fetch_add(1, Ordering::SeqCst) + 1;
        if count == self.at.load(Ordering::SeqCst) {
            self.run_if_pending();
        }
    }
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hook")
    }
}

/// A storage whose operations a [`Hook`] counts.
#[derive(Clone)]
pub struct Disk {
    /// The storage to open things on (the wrapped one, counted).
    pub storage: Arc<dyn Storage>,
    pub hook: Arc<Hook>,
}

impl Disk {
    /// `inner`, counted by a fresh hook.
    pub fn new(inner: Arc<dyn Storage>) -> Self {
        let hook = Arc::new(Hook::default());
        Self {
            storage: Arc::new(Tap::new(inner, hook.clone())),
            hook,
        }
    }
}

impl Disk {
    /// Arms a takeover after `n` more operations: `take_over` runs inside the call that makes
    /// that operation, and what it returns is in the slot afterwards.
    pub fn arm_takeover<T: Send + 'static>(
        &self,
        n: u64,
        take_over: impl FnOnce() -> T + Send + 'static,
    ) -> Arc<Mutex<Option<T>>> {
        let slot: Arc<Mutex<Option<T>>> = Arc::default();
        let filled = slot.clone();
        self.hook.arm(
            n,
            Box::new(move || *filled.lock().unwrap() = Some(take_over())),
        );
        slot
    }
}

/// A new owner of the store on `disk`, next to a former one that keeps running: the lock broken
/// (as a broken lock file or shared storage would let it), the store claimed with `config`, and
/// topic `topic` opened.
pub fn new_store_owner(
    disk: &ackstore::MemStorage,
    config: ackstore::StoreConfig,
    topic: &str,
) -> ackstore::Store {
    disk.break_lock();
    let store = ackstore::Store::open_with_storage(Arc::new(disk.clone()), config)
        .expect("the new owner claims the store");
    store.topic(topic).expect("the new owner opens the topic");
    store
}

/// The storage operations `run` makes on a copy of the disk `template`
/// ([`super::crash::copy_into`]), counted as a [`Disk`] counts them: the steps at which a
/// takeover can be armed.
pub fn operations_on_a_copy<T>(
    template: &ackstore::MemStorage,
    run: impl FnOnce(Arc<dyn Storage>) -> T,
) -> u64 {
    let disk = ackstore::MemStorage::new();
    super::crash::copy_into(template, &disk);
    let hooked = Disk::new(Arc::new(disk));
    let at = hooked.hook.count();
    drop(run(hooked.storage.clone()));
    hooked.hook.count() - at
}

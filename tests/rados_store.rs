//! A store on RADOS: a former owner's cursor deletion in flight at the claim never undoes what
//! the new owner flushed (the topic's claim takes the record's next version first, which the
//! former owner's exclusive create of it then loses), and a prefix listing pages through every
//! matching name of the namespace's index and no other.

#![cfg(feature = "rados")]

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ackstore::{
    CursorOptions, LockGuard, Mapped, Position, RadosStorage, Storage, StorageFile, Store,
    StoreConfig,
};
use support::rados::{cluster, fresh_namespace, pool};

type Action = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Hook {
    count: AtomicU64,
    at: AtomicU64,
    action: Mutex<Option<Action>>,
}

impl Hook {
    fn arm(&self, n: u64, action: Action) {
        self.at
            .store(self.count.load(Ordering::SeqCst) + n, Ordering::SeqCst);
        *self.action.lock().unwrap() = Some(action);
    }
    fn tick<T>(&self, r: ackstore::Result<T>) -> ackstore::Result<T> {
        if r.is_ok() {
            let c = self.count.fetch_add(1, Ordering::SeqCst) + 1;
            if c == self.at.load(Ordering::SeqCst) {
                let a = self.action.lock().unwrap().take();
                if let Some(a) = a {
                    a();
                }
            }
        }
        r
    }
}

#[derive(Clone)]
struct Hooked {
    inner: Arc<dyn Storage>,
    hook: Arc<Hook>,
}

impl std::fmt::Debug for Hooked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hooked")
    }
}

#[derive(Debug)]
struct HookedFile {
    inner: Arc<dyn StorageFile>,
    hook: Arc<Hook>,
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hook")
    }
}

impl Storage for Hooked {
    fn location(&self) -> String {
        self.inner.location()
    }
    fn list(&self) -> ackstore::Result<Vec<String>> {
        self.hook.tick(self.inner.list())
    }
    fn list_prefix(&self, prefix: &str) -> ackstore::Result<Vec<String>> {
        self.hook.tick(self.inner.list_prefix(prefix))
    }
    fn exists(&self, name: &str) -> ackstore::Result<bool> {
        self.hook.tick(self.inner.exists(name))
    }
    fn create(&self, name: &str) -> ackstore::Result<Arc<dyn StorageFile>> {
        let inner = self.hook.tick(self.inner.create(name))?;
        Ok(Arc::new(HookedFile {
            inner,
            hook: self.hook.clone(),
        }))
    }
    fn open(&self, name: &str) -> ackstore::Result<Arc<dyn StorageFile>> {
        let inner = self.hook.tick(self.inner.open(name))?;
        Ok(Arc::new(HookedFile {
            inner,
            hook: self.hook.clone(),
        }))
    }
    fn remove(&self, name: &str) -> ackstore::Result<()> {
        self.hook.tick(self.inner.remove(name))
    }
    fn rename(&self, from: &str, to: &str) -> ackstore::Result<()> {
        self.hook.tick(self.inner.rename(from, to))
    }
    fn link(&self, from: &str, to: &str) -> ackstore::Result<()> {
        self.hook.tick(self.inner.link(from, to))
    }
    fn sync_dir(&self) -> ackstore::Result<()> {
        self.hook.tick(self.inner.sync_dir())
    }
    fn lock(&self) -> ackstore::Result<LockGuard> {
        self.inner.lock()
    }
}

impl StorageFile for HookedFile {
    fn size(&self) -> ackstore::Result<u64> {
        self.hook.tick(self.inner.size())
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> ackstore::Result<()> {
        self.hook.tick(self.inner.read_exact_at(buf, offset))
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> ackstore::Result<()> {
        self.hook.tick(self.inner.write_all_at(buf, offset))
    }
    fn sync_data(&self) -> ackstore::Result<()> {
        self.hook.tick(self.inner.sync_data())
    }
    fn set_len(&self, len: u64) -> ackstore::Result<()> {
        self.hook.tick(self.inner.set_len(len))
    }
    fn map(&self) -> ackstore::Result<Mapped> {
        self.inner.map()
    }
}

fn config() -> StoreConfig {
    StoreConfig {
        flusher_threads: 0,
        ..StoreConfig::default()
    }
}

fn storage(ns: &str) -> RadosStorage {
    cluster().storage(&pool(), ns).expect("namespace")
}

#[test]
fn on_rados_a_fenced_cursor_deletion_never_takes_effect_under_the_new_owner() {
    let mut failures = Vec::new();
    for n in 1..=14u64 {
        let ns = fresh_namespace("store-fenced-delete");
        {
            let store = Store::open_with_storage(Arc::new(storage(&ns)), config()).expect("open");
            let topic = store.topic("t").expect("topic");
            let ps: Vec<Position> = (0..3)
                .map(|_| topic.append(b"p").expect("append"))
                .collect();
            topic.sync().expect("sync");
            let c = topic
                .open_cursor("sub", CursorOptions::default())
                .expect("cursor");
            c.ack(ps[0]).expect("ack");
            c.flush().expect("flush");
            drop((c, topic));
            store.close().expect("close");
        }
        let hooked = Hooked {
            inner: Arc::new(storage(&ns)),
            hook: Arc::default(),
        };
        let old = Store::open_with_storage(Arc::new(hooked.clone()), config()).expect("open");
        let old_topic = old.topic("t").expect("topic");
        let new: Arc<Mutex<Option<Store>>> = Arc::default();
        {
            let (ns, new) = (ns.clone(), new.clone());
            hooked.hook.arm(
                n,
                Box::new(move || {
                    let s = storage(&ns);
                    s.break_lock().expect("break");
                    let store =
                        Store::open_with_storage(Arc::new(s), config()).expect("the new owner");
                    store.topic("t").expect("topic");
                    *new.lock().unwrap() = Some(store);
                }),
            );
        }
        let deleted = old_topic.delete_cursor("sub");
        let Some(new) = new.lock().unwrap().take() else {
            continue;
        };
        let topic = new.topic("t").expect("topic");
        let cursor = topic
            .open_cursor("sub", CursorOptions::default())
            .expect("cursor");
        cursor.ack(Position::new(1, 1)).expect("ack");
        let flushed = cursor.flush();
        drop((cursor, topic));
        new.close().expect("close");
        drop(new);
        drop((old_topic, old));
        let again = Store::open_with_storage(Arc::new(storage(&ns)), config()).expect("reopen");
        let topic = again.topic("t").expect("topic");
        let names = topic.cursor_names();
        let cursor = topic
            .open_cursor("sub", CursorOptions::default())
            .expect("cursor");
        let acked1 = cursor.is_acked(Position::new(1, 1)).expect("is_acked");
        if flushed.is_ok() && (names != ["sub"] || !acked1) {
            failures.push(format!(
                "step {n}: the former owner's delete returned {deleted:?}; the new owner's \
                 flush Ok; after a restart cursors {names:?}, its flushed ack kept: {acked1}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `list_prefix` on RADOS pages through the index with a filter prefix: more than a page of
/// matching names, names of a longer prefix (`t11-` against `t1-`), names around it.
#[test]
fn on_rados_a_prefix_listing_pages_through_every_matching_name_and_no_other() {
    let s = storage(&fresh_namespace("store-prefix-list"));
    let mut want = Vec::new();
    for i in 0..2100 {
        let n = format!("t1-ledger-{i:020}.log");
        s.create(&n).expect("create");
        want.push(n);
    }
    for i in 0..40 {
        s.create(&format!("t11-x{i}")).expect("create");
        s.create(&format!("t0-x{i}")).expect("create");
        s.create(&format!("t2-x{i}")).expect("create");
    }
    s.create("t1").expect("create");
    s.create("t1-").expect("create");
    want.push("t1-".to_owned());
    want.sort();
    let got = s.list_prefix("t1-").expect("list");
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
    assert_eq!(s.list_prefix("t11-").expect("list").len(), 40);
    assert_eq!(
        s.list_prefix("t1-ledger-0000000000000000209")
            .expect("list")
            .len(),
        10
    );
    assert_eq!(s.list_prefix("zz").expect("list").len(), 0);
    assert_eq!(s.list().expect("list").len(), 2100 + 120 + 2);
}

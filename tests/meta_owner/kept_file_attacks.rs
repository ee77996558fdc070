//! Attacks on the file an owned metadata store keeps for its ownership check on real files
//! (`MetaStore::is_current` asks whether the version's name still names the file it found
//! there, `StorageFile::has_name`): a single owner must never be refused in normal life, which
//! here means a check whose read raced the owner's own deletion and creation of the record
//! again, and a store whose storage names its files under names of its own (a topic's files in
//! the store's directory, a broker's storage wrapper) while the files it opens are those of the
//! storage underneath.

use crate::support;

use std::sync::{Arc, Mutex};

use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::internals::store::space::TopicSpace;
use ackstore::storage::{LockGuard, StorageFile};
use ackstore::{FileStorage, Storage};
use support::prefixed::Prefixed;

/// Real files, and an action run once right after the open of one name returned its file (the
/// file itself handed on as the inner storage opened it).
struct AfterOpen {
    inner: FileStorage,
    action: Mutex<Option<Armed>>,
}

/// The name whose open runs the action, and the action.
type Armed = (String, Box<dyn FnOnce() + Send>);

impl std::fmt::Debug for AfterOpen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfterOpen")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Storage for AfterOpen {
    fn location(&self) -> String {
        self.inner.location()
    }
    fn list(&self) -> ackstore::Result<Vec<String>> {
        self.inner.list()
    }
    fn list_prefix(&self, prefix: &str) -> ackstore::Result<Vec<String>> {
        self.inner.list_prefix(prefix)
    }
    fn exists(&self, name: &str) -> ackstore::Result<bool> {
        self.inner.exists(name)
    }
    fn create(&self, name: &str) -> ackstore::Result<Arc<dyn StorageFile>> {
        self.inner.create(name)
    }
    fn open(&self, name: &str) -> ackstore::Result<Arc<dyn StorageFile>> {
        let file = self.inner.open(name)?;
        let action = {
            let mut armed = self.action.lock().unwrap();
            match armed.take() {
                Some((wanted, action)) if wanted == name => Some(action),
                other => {
                    *armed = other;
                    None
                }
            }
        };
        if let Some(action) = action {
            action();
        }
        Ok(file)
    }
    fn remove(&self, name: &str) -> ackstore::Result<()> {
        self.inner.remove(name)
    }
    fn rename(&self, from: &str, to: &str) -> ackstore::Result<()> {
        self.inner.rename(from, to)
    }
    fn link(&self, from: &str, to: &str) -> ackstore::Result<()> {
        self.inner.link(from, to)
    }
    fn sync_dir(&self) -> ackstore::Result<()> {
        self.inner.sync_dir()
    }
    fn lock(&self) -> ackstore::Result<LockGuard> {
        self.inner.lock()
    }
}

fn version_file(name: &str, version: u64) -> String {
    format!("{name}.{version:020}.meta")
}

/// The owner's check reads version 1 of a record; between its open of the file and its read,
/// another thread of the same owner deletes the record and creates it again with the same
/// bytes (version 1 again, a new file). That check may answer either way, but the record is
/// then this owner's at version 1, and every later check must say so.
#[test]
fn a_check_that_read_a_records_earlier_life_does_not_refuse_the_owner_later() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let disk = FileStorage::open(dir.path(), true).expect("storage");
    let lock = disk.lock().expect("lock");
    let storage = Arc::new(AfterOpen {
        inner: disk,
        action: Mutex::new(None),
    });
    let meta = Arc::new(FileMetaStore::owned(storage.clone(), &lock));
    let version = meta.put("rec", None, b"same bytes").expect("put");
    assert_eq!(version, 1);
    let again = {
        let writer = Arc::clone(&meta);
        let created = Arc::new(Mutex::new(None));
        let out = Arc::clone(&created);
        *storage.action.lock().unwrap() = Some((
            version_file("rec", version),
            Box::new(move || {
                writer.delete("rec", version).expect("delete");
                *out.lock().unwrap() = Some(writer.put("rec", None, b"same bytes").expect("put"));
            }),
        ));
        let _either = meta.is_current("rec", version).expect("check");
        let again = created.lock().unwrap().take();
        again.expect("the record was deleted and created again during the check")
    };
    assert_eq!(again, 1, "created again at version 1");
    assert_eq!(
        meta.get("rec").expect("read"),
        Some((1, b"same bytes".to_vec()))
    );
    assert!(
        meta.is_current("rec", again).expect("check"),
        "the owner's record at version 1, refused by its own check"
    );
    assert!(meta.is_current("rec", again).expect("check"), "again");
}

/// A store's topic of the flat layout keeps its records in the store's directory under the
/// topic's prefix (`t{id}-`): the topic's owned metadata store passes its checks over and
/// over, as on the in-memory disk.
#[test]
fn the_ownership_check_of_a_flat_topics_record_on_real_files_passes_again_and_again() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let disk = FileStorage::open(dir.path(), true).expect("storage");
    let lock = disk.lock().expect("lock");
    let store: Arc<dyn Storage> = Arc::new(disk);
    let space = TopicSpace::open(&store, 4, false, true, None).expect("space");
    let meta = FileMetaStore::owned(Arc::new(space), &lock);
    let version = meta.put("topic", None, b"the topic record").expect("put");
    assert!(
        dir.path()
            .join(format!("t4-{}", version_file("topic", version)))
            .exists(),
        "the record's file is the topic's, under its prefix"
    );
    for check in 0..3 {
        assert!(
            meta.is_current("topic", version).expect("check"),
            "check {check} of the owner's own record"
        );
    }
    // A claim of the version checked: its lookup of the version it linked from.
    let claimed = meta.claim("topic", version).expect("claim");
    assert!(meta.is_current("topic", claimed).expect("check"));
    assert!(meta.is_current("topic", claimed).expect("check"));
}

/// The owned metadata store over a storage that keeps its files under a prefix of a shared
/// directory (a broker's, see [`Prefixed`]) passes its own checks again and again.
#[test]
fn the_ownership_check_through_a_storage_that_prefixes_names_passes_again_and_again() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let storage = Arc::new(Prefixed {
        inner: FileStorage::open(dir.path(), true).expect("storage"),
        prefix: "tenant-a-",
    });
    let lock = storage.lock().expect("lock");
    let meta = FileMetaStore::owned(storage, &lock);
    let version = meta.put("store", None, b"the catalog").expect("put");
    for check in 0..3 {
        assert!(
            meta.is_current("store", version).expect("check"),
            "check {check} of the owner's own record"
        );
    }
}

//! Attacks on the file an owned metadata store keeps for its ownership check on real files
//! (`MetaStore::is_current` asks whether the version's name still names the file it found
//! there, `StorageFile::has_name`): a single owner must never be refused in normal life, which
//! here means a store whose storage names its files under names of its own (a topic's files in
//! the store's directory, a broker's storage wrapper) while the files it opens are those of the
//! storage underneath.

use crate::support;

use std::sync::Arc;

use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::internals::store::space::TopicSpace;
use ackstore::{FileStorage, Storage};
use support::prefixed::Prefixed;

fn version_file(name: &str, version: u64) -> String {
    format!("{name}.{version:020}.meta")
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

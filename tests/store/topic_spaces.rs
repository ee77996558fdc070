//! A topic sees only its own files; a spaced topic on real files has a directory of its own.

use ackstore::internals::storage::MemStorage;
use ackstore::internals::storage::Storage;
use ackstore::internals::store::space::*;
use std::sync::Arc;

#[test]
fn a_topic_sees_only_its_own_files() {
    let disk = MemStorage::new();
    let store: Arc<dyn Storage> = Arc::new(disk.clone());
    let a = TopicSpace::open(&store, 1, true, true, None).expect("space");
    let b = TopicSpace::open(&store, 11, false, false, None).expect("space");
    a.create("topic.meta").expect("create");
    b.create("ledger-1.log").expect("create");
    assert_eq!(a.list().expect("list"), vec!["topic.meta".to_owned()]);
    assert_eq!(b.list().expect("list"), vec!["ledger-1.log".to_owned()]);
    assert!(!a.exists("ledger-1.log").expect("exists"));
    assert_eq!(
        disk.list().expect("list"),
        vec!["t1-topic.meta".to_owned(), "t11-ledger-1.log".to_owned()]
    );
    assert!(a.create("../x").is_err());
}

#[test]
fn a_spaced_topic_on_real_files_has_a_directory_of_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn Storage> =
        Arc::new(ackstore::internals::storage::FileStorage::open(dir.path(), false).expect("open"));
    assert!(
        TopicSpace::open(&store, 3, true, false, None).is_err(),
        "no directory yet"
    );
    let a = TopicSpace::open(&store, 3, true, true, None).expect("space");
    let flat = TopicSpace::open(&store, 4, false, true, None).expect("space");
    a.create("topic.meta").expect("create");
    a.create("ledger-1.log").expect("create");
    flat.create("topic.meta").expect("create");
    assert_eq!(a.list().expect("list"), ["ledger-1.log", "topic.meta"]);
    assert_eq!(a.list_prefix("led").expect("list"), ["ledger-1.log"]);
    assert_eq!(flat.list().expect("list"), ["topic.meta"]);
    // The store directory lists its own files only: the topic directory is not a file.
    assert_eq!(store.list().expect("list"), ["t4-topic.meta"]);
    assert!(dir.path().join("t3").join("topic.meta").is_file());
    assert!(a.create("../t4-topic.meta").is_err());
    // Reopened without `create`, the directory is found again.
    let again = TopicSpace::open(&store, 3, true, false, None).expect("space");
    assert_eq!(again.list().expect("list"), a.list().expect("list"));
}

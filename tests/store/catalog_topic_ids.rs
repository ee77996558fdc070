//! A topic keeps its id in the catalog handle and after a claim.

use ackstore::internals::meta::FileMetaStore;
use ackstore::internals::meta::MetaStore;
use ackstore::internals::storage::MemStorage;
use ackstore::internals::store::catalog::*;
use std::sync::Arc;

fn claim(disk: &MemStorage) -> CatalogHandle {
    let storage: Arc<dyn ackstore::internals::storage::Storage> = Arc::new(disk.clone());
    let meta: Arc<dyn MetaStore> = Arc::new(FileMetaStore::new(storage.clone()));
    CatalogHandle::claim(&storage, &meta).expect("claim")
}

#[test]
fn a_topic_keeps_its_id_in_this_handle_and_after_a_claim() {
    let disk = MemStorage::new();
    let mut handle = claim(&disk);
    let names: Vec<String> = (0..50).map(|i| format!("topic-{i}")).collect();
    let ids: Vec<u64> = names
        .iter()
        .map(|n| handle.id_of_or_create(n, |_, _| Ok(())).expect("create"))
        .collect();
    let mut distinct = ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), names.len(), "one id per topic");
    let prepared = std::cell::Cell::new(0);
    let count = |_, _| {
        prepared.set(prepared.get() + 1);
        Ok(())
    };
    for (n, id) in names.iter().zip(&ids) {
        assert_eq!(handle.id_of_or_create(n, count).expect("found"), *id);
    }
    let mut again = claim(&disk);
    for (n, id) in names.iter().zip(&ids).rev() {
        assert_eq!(again.id_of_or_create(n, count).expect("found"), *id);
    }
    assert_eq!(
        prepared.get(),
        0,
        "an existing topic is never created again"
    );
    assert_eq!(again.names(), names);
    let next = again.id_of_or_create("new", |_, _| Ok(())).expect("create");
    assert!(ids.iter().all(|&id| id < next));
}

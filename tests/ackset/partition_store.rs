//! The in-memory partition store: stored partitions load back until forgotten.

use ackstore::internals::ackset::PartitionKey;
use ackstore::internals::ackset::store::*;
use roaring::RoaringBitmap;

#[test]
fn stored_partitions_load_back_until_forgotten() {
    let mut s = MemPartitionStore::new();
    let key = PartitionKey {
        ledger_id: 4,
        chunk: 9,
    };
    assert_eq!(s.load(key).expect("load"), None);
    let bitmap = RoaringBitmap::from([1, 5, 65_535]);
    s.store(key, &bitmap).expect("store");
    assert_eq!(s.load(key).expect("load"), Some(bitmap));
    assert_eq!((s.len(), s.stores(), s.loads()), (1, 1, 1));
    s.forget(key);
    assert_eq!(s.load(key).expect("load"), None);
    assert!(s.is_empty());
}

//! Data ledgers on RADOS (`CEPH_CONF`) stay within the OSD's largest object
//! (`osd_max_object_size`, 128 MiB on the test cluster as by default) when the configuration
//! says they do.

#![cfg(feature = "rados")]

use crate::support;

use std::sync::Arc;

use ackstore::{LedgerConfig, ManagedLedger, Storage};
use support::rados::{cluster, fresh_namespace, pool};

const OSD_MAX_OBJECT_SIZE: u64 = 128 << 20;

#[test]
fn a_ledger_bound_that_looks_below_the_largest_object_is_not_and_one_that_fits_takes_every_append()
{
    // 127 MiB of payloads looks below 128 MiB; the entry that crosses it and the footer are not.
    let looks_below = LedgerConfig {
        max_ledger_bytes: 127 << 20,
        ..LedgerConfig::default()
    };
    assert!(looks_below.largest_ledger_file() > OSD_MAX_OBJECT_SIZE);
    let fits = LedgerConfig {
        max_ledger_bytes: 120 << 20,
        ..LedgerConfig::default()
    };
    assert!(fits.largest_ledger_file() <= OSD_MAX_OBJECT_SIZE);

    for (config, must_take_all) in [(looks_below, false), (fits, true)] {
        let namespace = fresh_namespace("objsize");
        let storage: Arc<dyn Storage> = Arc::new(cluster().storage(&pool(), &namespace).unwrap());
        let topic = ManagedLedger::open_with_storage(storage.clone(), config.clone()).unwrap();
        // Entries of the largest size, past the first ledger's bound.
        let payload = vec![7u8; config.log.max_entry_size as usize];
        let mut refused = None;
        for _ in 0..27 {
            if let Err(e) = topic.append(&payload).and_then(|_| topic.sync()) {
                refused = Some(e);
                break;
            }
        }
        if must_take_all {
            assert!(refused.is_none(), "{refused:?}");
            topic.close().unwrap();
            for name in storage.list().unwrap() {
                let size = storage.open(&name).unwrap().size().unwrap();
                assert!(size <= config.largest_ledger_file(), "{name}: {size} bytes");
            }
            let topic = ManagedLedger::open_with_storage(storage, config).unwrap();
            assert!(topic.last_position().unwrap().ledger_id > 1);
        } else {
            // What the cluster answers when a ledger outgrows the object limit.
            assert!(refused.is_some(), "a ledger above 128 MiB was taken");
        }
    }
}

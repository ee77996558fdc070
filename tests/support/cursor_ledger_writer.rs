//! Writes the committed samples of topic directories whose cursors persist in cursor ledgers
//! (`tests/data/cursor-ledger-*`), with the cursor-ledger writer this release still has. The
//! tests read the samples (see [`super::samples::ledger_samples`]); this file writes them once
//! and goes with the writer.

use std::path::Path;
use std::sync::Arc;

use ackstore::{LedgerConfig, ManagedLedger, MemStorage};

use super::samples::{COLD_LRU, LedgerSample};
use super::topic::{Host, append_n, config, earliest, store_config};

/// `config` whose new cursors persist in cursor ledgers.
fn on_ledgers(mut config: LedgerConfig) -> LedgerConfig {
    config.cursor.cursor_ledger_writer = true;
    config
}

/// Writes every sample of [`super::samples::ledger_samples`] under `to` (one directory each,
/// the durable files of the disk it was built on after a clean close).
pub fn write_samples(to: &Path) {
    for sample in super::samples::ledger_samples() {
        let disk = MemStorage::new();
        build(&sample, &disk);
        let image = disk.durable_image();
        let dir = to.join(&sample.name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for name in ackstore::Storage::list(&image).unwrap() {
            let bytes = image.live_bytes(&name).unwrap();
            std::fs::write(dir.join(&name), bytes).unwrap();
        }
    }
}

/// Builds `sample` on `disk` with the cursor-ledger writer, checking its entries land where
/// [`LedgerSample::positions`] says.
fn build(sample: &LedgerSample, disk: &MemStorage) {
    let storage: Arc<dyn ackstore::Storage> = Arc::new(disk.clone());
    let (n, per_ledger) = sample.shape;
    let mut cfg = on_ledgers(config(per_ledger));
    cfg.cursor.persist_mode = sample.mode;
    let space = match sample.host {
        Host::Alone => storage,
        Host::Store => {
            let store = ackstore::Store::open_with_storage(storage, store_config(per_ledger))
                .expect("open store");
            let t = store.topic("t").expect("topic");
            assert_eq!(append_n(&t, n), sample.positions(), "{}", sample.name);
            drop(t);
            store.close().expect("close store");
            super::topic::topic_storage(Host::Store, disk)
        }
    };
    let ml = ManagedLedger::open_with_storage(space.clone(), cfg).expect("open");
    if sample.host == Host::Alone {
        assert_eq!(append_n(&ml, n), sample.positions(), "{}", sample.name);
    }
    for c in sample.cursors {
        let cursor = ml.open_cursor(c.name, earliest()).expect("cursor");
        if let Some(m) = sample.mark_delete(c.name) {
            cursor.ack_cumulative(m).unwrap();
        }
        for p in sample.acks(c.name) {
            cursor.ack(p).expect("ack");
        }
        cursor.close().expect("close cursor");
    }
    ml.close().expect("close topic");
    let batch = sample.batch();
    if !batch.is_empty() {
        let mut cold = on_ledgers(config(per_ledger));
        cold.cursor.persist_mode = sample.mode;
        cold.cursor.lru_capacity_bytes = COLD_LRU;
        let ml = ManagedLedger::open_with_storage(space, cold).expect("reopen");
        let sub = ml.open_cursor("sub", earliest()).unwrap();
        for &p in &batch {
            sub.ack_batch_index(p, 0, 4).unwrap();
            sub.ack_batch_index(p, 2, 4).unwrap();
        }
        sub.close().unwrap();
        ml.close().unwrap();
    }
}

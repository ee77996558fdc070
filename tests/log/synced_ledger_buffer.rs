//! A synced ledger holds no write buffer.

use ackstore::internals::format::ledger::EntryMeta;
use ackstore::internals::format::ledger::LedgerHeader;
use ackstore::internals::log::LogConfig;
use ackstore::internals::log::LogStatsCounters;
use ackstore::internals::log::ledger::*;
use ackstore::internals::storage::{MemStorage, Storage};

#[test]
fn a_synced_ledger_holds_no_write_buffer() {
    let disk = MemStorage::new();
    let file = disk.create("ledger").unwrap();
    let header = LedgerHeader::new(1, 7);
    file.write_all_at(&header.encode(), 0).unwrap();
    let ledger = Ledger::unsealed(header, file, Vec::new(), header.data_start());
    let counters = LogStatsCounters::new("memory".into());
    let config = LogConfig::default();
    let reads = Reads {
        counters: &counters,
        config: &config,
    };
    let meta = EntryMeta {
        index: 0,
        num_messages: 1,
        timestamp: 0,
    };
    for _ in 0..500 {
        ledger.append(meta, &[7; 100], &counters).unwrap();
    }
    assert!(ledger.state().buffer.capacity() > 0, "appends are buffered");
    ledger.sync(&counters).unwrap();
    assert_eq!(ledger.state().buffer.capacity(), 0);
    assert_eq!(ledger.synced_entries(), 500);
    assert_eq!(ledger.read_meta(499, reads).unwrap().num_messages, 1);
}

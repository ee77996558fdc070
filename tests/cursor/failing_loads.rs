//! The topic the tests of calls meeting a failed partition load share: two ledgers, the first
//! of several ack-set partitions, a cursor keeping only the partition in use resident (every
//! other partition it touches is loaded from the disk, where a hook fails one operation), and
//! the same directory reopened to check what a flush kept.

use crate::support;

use std::sync::Arc;

use ackstore::{Cursor, ManagedLedger, MemStorage, Position};
use support::tap::{FailOne, Tap};
use support::topic::{append_n, config, earliest};
use support::workload::EntryModel as Model;

/// Entries of one ack-set partition.
pub(crate) const SPAN: usize = 65_536;
/// Entries of the first ledger: three partitions and a part of a fourth.
pub(crate) const FIRST: usize = 3 * SPAN + 10;
/// Entries of the second ledger.
pub(crate) const SECOND: usize = 300;

/// A topic on `disk` behind `hook` of a ledger of [`FIRST`] entries and one of [`SECOND`], and
/// a cursor keeping only the partition in use resident: mark-delete at #4, the entries of
/// `acked` acknowledged and flushed (their partitions then on the disk), #3*SPAN+1
/// acknowledged (the partition in use), and with `partial` message 0 of #9 acknowledged (before
/// the flush). Returns the model of what the cursor holds.
pub(crate) fn small_topic(
    disk: &MemStorage,
    hook: Arc<FailOne>,
    acked: &[usize],
    partial: bool,
) -> (ManagedLedger, Vec<Position>, Cursor, Model) {
    let storage = Arc::new(Tap::new(Arc::new(disk.clone()), hook));
    let topic = ManagedLedger::open_with_storage(storage, resident_in_use()).unwrap();
    let ps = append_n(&topic, (FIRST + SECOND) as u64);
    let c = topic.open_cursor("sub", earliest()).unwrap();
    let mut model = Model::default();
    c.ack_cumulative(ps[4]).unwrap();
    model.mark = Some(4);
    for &i in acked {
        assert!(c.ack(ps[i]).unwrap());
        model.ack_many(&[i]);
    }
    if partial {
        assert!(c.ack_batch_index(ps[9], 0, 3).unwrap());
    }
    c.flush().unwrap();
    assert!(c.ack(ps[3 * SPAN + 1]).unwrap());
    model.ack_many(&[3 * SPAN + 1]);
    (topic, ps, c, model)
}

/// The topic of [`small_topic`] opened again on what `disk` holds durably, and its cursor.
pub(crate) fn reopened(disk: &MemStorage) -> (ManagedLedger, Cursor) {
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.durable_image()), resident_in_use())
        .unwrap();
    let c = topic.open_cursor("sub", earliest()).unwrap();
    (topic, c)
}

/// Ledgers of [`FIRST`] entries, and no ack memory beyond the partition in use.
fn resident_in_use() -> ackstore::LedgerConfig {
    let mut cfg = config(FIRST as u64);
    cfg.cursor.lru_capacity_bytes = 0;
    cfg
}

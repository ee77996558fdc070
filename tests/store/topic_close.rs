//! Closing a topic of a store (a broker unloading it) and using it again: the store, closed and
//! dropped, always releases its lock.

use std::sync::Arc;

use ackstore::{CursorOptions, MemStorage, Store};

use crate::support;

fn run(variant: u32) -> ackstore::Result<()> {
    let disk = MemStorage::new();
    {
        let store = Store::open_with_storage(
            Arc::new(disk.clone()),
            support::config::store_without_flusher(),
        )?;
        let topic = store.topic("t")?;
        let p = topic.append(b"x")?;
        topic.sync()?;
        {
            let c = topic.open_cursor("c", CursorOptions::default())?;
            c.ack(p)?;
            if variant & 1 != 0 {
                c.flush()?;
            }
            if variant & 2 != 0 {
                // The application drops its cursor handle before the topic closes.
                drop(c);
                topic.close()?;
            } else {
                topic.close()?;
                drop(c);
            }
        }
        drop(topic);
        if variant & 4 != 0 {
            let again = store.topic("t")?;
            let c = again.open_cursor("c", CursorOptions::default())?;
            drop(c);
        }
        store.close()?;
    }
    Store::open_with_storage(
        Arc::new(disk.clone()),
        support::config::store_without_flusher(),
    )
    .map(drop)
}

/// A store closed and dropped releases its lock, whatever its topics went through.
#[test]
fn a_closed_store_can_be_opened_again_after_a_topic_was_closed_and_reopened() {
    let results: Vec<(u32, ackstore::Result<()>)> = (0..8).map(|v| (v, run(v))).collect();
    let failed: Vec<_> = results.iter().filter(|(_, r)| r.is_err()).collect();
    assert!(
        failed.is_empty(),
        "variants (bit 0: flushed, 1: cursor dropped before the topic's close, 2: topic reopened): {failed:?}"
    );
}

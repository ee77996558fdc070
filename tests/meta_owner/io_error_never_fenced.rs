//! A single owner whose storage fails one operation (an I/O error, then the storage works
//! again) is never told it is fenced: whatever the failed call left behind, later calls
//! succeed or fail with an I/O error, never with `Error::Fenced`.

use crate::support;

use std::sync::Arc;

use ackstore::MemStorage;
use ackstore::{CursorOptions, ManagedLedger};
use ackstore::{Error, Result};

/// Runs `op`; if it failed, the storage works again from here on.
fn step<T>(disk: &MemStorage, what: &str, log: &mut Vec<String>, op: impl FnOnce() -> Result<T>) {
    let result = op();
    if let Err(e) = &result {
        log.push(format!("{what}: {e}"));
        disk.fail_after(None);
    }
}

#[test]
fn a_single_owner_after_a_transient_io_error_at_any_step_is_never_fenced() {
    for k in 0..60 {
        let disk = MemStorage::new();
        let topic =
            ManagedLedger::open_with_storage(Arc::new(disk.clone()), support::topic::config(2))
                .unwrap();
        support::topic::append_n(&topic, 3);
        let cursor = topic.open_cursor("sub", CursorOptions::default()).unwrap();
        let first = topic.first_position().expect("entries");
        cursor.ack(first).unwrap();
        cursor.flush().unwrap();
        disk.fail_after(Some(k));
        let mut log = Vec::new();
        for i in 0..3 {
            step(&disk, &format!("append {i}"), &mut log, || {
                topic.append(b"x")
            });
        }
        step(&disk, "trim", &mut log, || topic.trim_consumed());
        step(&disk, "ack+flush", &mut log, || {
            let p = topic.last_position().expect("entries");
            cursor.ack_cumulative(p)?;
            cursor.flush()
        });
        disk.fail_after(None);
        let mut later = Vec::new();
        for i in 0..4 {
            later.push(("append", topic.append(b"y").map(drop)));
            let _ = i;
        }
        later.push(("trim", topic.trim_consumed().map(drop)));
        later.push(("flush", cursor.flush()));
        later.push((
            "open_cursor",
            topic
                .open_cursor("other", CursorOptions::default())
                .map(drop),
        ));
        later.push(("close", topic.close()));
        for (what, result) in later {
            assert!(
                !matches!(result, Err(Error::Fenced { .. })),
                "failure after {k} mutations ({log:?}): a single owner's later {what} says {}",
                result.unwrap_err()
            );
        }
    }
}

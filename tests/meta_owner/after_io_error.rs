//! A single owner is never told it is fenced, not even after a record write failed midway: an
//! I/O error may leave the topic record written, and the handle must not then take its own
//! write for a newer owner's.

use crate::support;

use ackstore::Error;
use ackstore::InitialPosition;
use support::topic::{at, mem_topic};

#[test]
fn a_single_owner_is_never_fenced_after_a_failed_record_write() {
    // Operations of one rollover append (it seals a ledger and writes the topic record).
    let count = {
        let (disk, topic) = mem_topic(2);
        topic.append(b"a").unwrap();
        topic.append(b"b").unwrap();
        let before = disk.mutations();
        topic.append(b"c").unwrap();
        disk.mutations() - before
    };
    assert!(count > 0);
    for n in 0..count {
        let (disk, topic) = mem_topic(2);
        topic.append(b"a").unwrap();
        topic.append(b"b").unwrap();
        // A transient failure: the n-th operation of the rollover and those after it fail.
        disk.fail_after(Some(n));
        let failed = topic.append(b"c");
        disk.fail_after(None);
        let mut results = vec![("append during the failure", failed.map(drop))];
        for round in 0..4 {
            results.push(("append", topic.append(b"d").map(drop)));
            results.push(("sync", topic.sync()));
            match topic.open_cursor(&format!("c{round}"), at(InitialPosition::Earliest, false)) {
                Ok(c) => results.push(("flush", c.flush())),
                Err(e) => results.push(("open_cursor", Err(e))),
            }
        }
        for (what, r) in results {
            assert!(
                !matches!(r, Err(Error::Fenced { .. })),
                "failure after {n} of {count} operations: {what} returned {r:?} with one owner"
            );
        }
    }
}

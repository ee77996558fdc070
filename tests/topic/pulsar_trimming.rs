//! Trimming checked against Apache Pulsar's `ManagedLedgerImpl.internalTrimLedgers`: the
//! slowest durable cursor's mark-delete decides (`ManagedCursorContainer.getSlowestReaderPosition`),
//! never its individual acks, and a cursor created after a trim (mark-delete before the first
//! retained entry) holds every retained ledger. (Closed cursors, deleted cursors, the last
//! ledger and readers are in `managed_ledger` and the cursor tests' `non_durable`.)

use crate::support;

use ackstore::InitialPosition;
use support::topic::{append_n, at, on_each_backend};

#[test]
fn trimming_follows_mark_delete_never_individual_acks() {
    on_each_backend(3, |topic| {
        let p = append_n(&topic, 9);
        let ids: Vec<u64> = topic.ledgers().iter().map(|l| l.id).collect();
        assert_eq!(ids.len(), 3);
        let c = topic
            .open_cursor("sub", at(InitialPosition::Earliest, false))
            .unwrap();
        assert_eq!(c.ack_many(&p[1..8]).unwrap(), 7);
        assert!(
            topic.trim_consumed().unwrap().is_empty(),
            "individual acks of whole ledgers hold nothing back"
        );
        c.ack(p[0]).unwrap();
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[7]));
        assert_eq!(topic.trim_consumed().unwrap(), ids[..2].to_vec());
        assert_eq!(topic.first_position(), Some(p[6]));

        // A cursor created now starts before the first retained entry and holds it.
        let late = topic
            .open_cursor("late", at(InitialPosition::Earliest, false))
            .unwrap();
        c.ack(p[8]).unwrap();
        let more = append_n(&topic, 3);
        assert!(topic.trim_consumed().unwrap().is_empty());
        // Mark-delete inside the next ledger on both: the one before it goes (a mark-delete on
        // a ledger's last entry is left out: Pulsar releases have kept that ledger or not).
        late.ack_cumulative(more[0]).unwrap();
        c.ack_cumulative(more[1]).unwrap();
        assert_eq!(topic.trim_consumed().unwrap(), vec![ids[2]]);
        assert_eq!(topic.first_position(), Some(more[0]));
        topic.close().unwrap();
    });
}

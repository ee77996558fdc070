//! Acks a durable cursor answers from what it learnt of its ledger, without the topic's layout:
//! trims still delete exactly the ledgers mark-delete covers, entries not yet readable are
//! still refused, and a seek or a trim between acks changes nothing of what an ack means.

use crate::support;

use ackstore::{Error, ManagedLedger, Position};
use support::topic::{append_n, append_unsynced, earliest, on_each_backend_and_host};

/// The ledgers a trim may delete once every entry `..=mark` of `positions` (in append order)
/// is acknowledged: those whose last entry is covered, but never the last non-empty one.
fn trimmable(positions: &[Position], mark: usize) -> Vec<u64> {
    let last_ledger = positions.last().map(|p| p.ledger_id);
    let mut out: Vec<u64> = Vec::new();
    for (i, p) in positions.iter().enumerate() {
        let ledger_last = positions
            .iter()
            .rposition(|q| q.ledger_id == p.ledger_id)
            .expect("its own ledger");
        if Some(p.ledger_id) == last_ledger || ledger_last > mark {
            break;
        }
        if i == ledger_last {
            out.push(p.ledger_id);
        }
    }
    out
}

#[test]
fn acks_in_entry_order_let_each_trim_delete_exactly_the_ledgers_mark_delete_covers() {
    on_each_backend_and_host(5, |topic| {
        let p = append_n(&topic, 23);
        let c = topic.open_cursor("sub", earliest()).unwrap();
        let mut deleted = Vec::new();
        for i in 0..p.len() {
            assert!(c.ack(p[i]).unwrap(), "entry {i}");
            assert_eq!(c.mark_delete_position().unwrap(), Some(p[i]));
            // Between acks, as a broker's trim runs: no other call of the cursor in between.
            deleted.extend(topic.trim_consumed().unwrap());
            assert_eq!(
                deleted,
                trimmable(&p, i),
                "after the ack of entry {i} ({})",
                p[i]
            );
        }
        assert_eq!(c.backlog().unwrap(), 0);
    });
}

#[test]
fn acks_inside_a_ledger_leave_it_to_the_trim_until_its_last_entry_is_acked() {
    on_each_backend_and_host(10, |topic| {
        let p = append_n(&topic, 25);
        let c = topic.open_cursor("sub", earliest()).unwrap();
        // Out of order within the first ledger, then its entries from the first on: every
        // ack but the last leaves an entry of the first ledger unacknowledged.
        for i in (1..10).rev() {
            assert!(c.ack(p[i]).unwrap());
            assert!(topic.trim_consumed().unwrap().is_empty(), "entry {i} acked");
        }
        assert!(c.ack(p[0]).unwrap());
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[9]));
        assert_eq!(topic.trim_consumed().unwrap(), vec![p[0].ledger_id]);
        // Entry order through the second ledger, the trim asked after each ack.
        for &q in &p[10..19] {
            assert!(c.ack(q).unwrap());
            assert!(topic.trim_consumed().unwrap().is_empty(), "{q} acked");
        }
        assert!(c.ack(p[19]).unwrap());
        assert_eq!(topic.trim_consumed().unwrap(), vec![p[10].ledger_id]);
        assert_eq!(c.backlog().unwrap(), 5);
    });
}

#[test]
fn an_entry_appended_but_not_yet_readable_is_refused_after_acks_in_its_ledger() {
    on_each_backend_and_host(100, |topic: std::sync::Arc<ManagedLedger>| {
        let p = append_n(&topic, 10);
        let c = topic.open_cursor("sub", earliest()).unwrap();
        assert!(c.ack(p[5]).unwrap());
        assert!(c.ack(p[0]).unwrap());
        let unsynced = append_unsynced(&topic, 3);
        assert_eq!(unsynced[0].ledger_id, p[0].ledger_id, "the same ledger");
        for &u in &unsynced {
            assert!(matches!(c.ack(u), Err(Error::NoSuchEntry(at)) if at == u));
        }
        // Nothing changed; once synced they are entries and acks take them.
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[0]));
        assert_eq!(c.acked_ranges().unwrap(), vec![(p[5], p[5])]);
        topic.sync().unwrap();
        for &u in &unsynced {
            assert!(c.ack(u).unwrap());
        }
        assert_eq!(
            c.acked_ranges().unwrap(),
            vec![(p[5], p[5]), (unsynced[0], unsynced[2])]
        );
    });
}

#[test]
fn after_a_seek_back_acks_move_mark_delete_from_the_new_position() {
    on_each_backend_and_host(100, |topic| {
        let p = append_n(&topic, 20);
        let c = topic.open_cursor("sub", earliest()).unwrap();
        for &q in &p[..12] {
            assert!(c.ack(q).unwrap());
        }
        assert!(c.ack(p[15]).unwrap());
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[11]));
        // Back to entry 3: mark-delete is entry 2, nothing after it acknowledged.
        c.seek(p[3]).unwrap();
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[2]));
        assert!(c.acked_ranges().unwrap().is_empty());
        // Entries the cursor acknowledged before the seek are unacknowledged again.
        assert!(c.ack(p[5]).unwrap());
        assert!(c.ack(p[3]).unwrap());
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[3]));
        assert!(c.ack(p[4]).unwrap());
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[5]));
        assert!(c.ack(p[15]).unwrap());
        assert_eq!(c.acked_ranges().unwrap(), vec![(p[15], p[15])]);
        assert_eq!(c.backlog().unwrap(), 20 - 6 - 1);
    });
}

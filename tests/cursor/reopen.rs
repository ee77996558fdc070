//! Reopening a cursor keeps every individual ack and every message acknowledged in a batch, in
//! both persist modes, across modes, on an in-memory disk and on real files, on a topic opened
//! alone and on a store's topic; deleting a cursor deletes its cursor ledgers; the persistence
//! figures in `Cursor::stats`.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::MemStorage;
use ackstore::RecoverySource;
use ackstore::{AppendMeta, InitialPosition, LedgerConfig, ManagedLedger, PersistMode};
use ackstore::{Cursor, Position};
use support::topic::{Host, Hosted, append_n, at, on_each_host, open_hosted, read_positions};

/// Where a topic lives: an in-memory disk or a real directory, and who hosts it there.
enum Place {
    Mem(MemStorage, Host),
    Dir(tempfile::TempDir, Host),
}

impl Place {
    fn open(&self, mode: PersistMode) -> Hosted {
        self.open_with(support::config::topic(50, mode, 512))
    }

    fn open_with(&self, config: LedgerConfig) -> Hosted {
        match self {
            Self::Mem(disk, host) => open_hosted(*host, Arc::new(disk.clone()), &config),
            Self::Dir(dir, Host::Alone) => {
                ManagedLedger::open(dir.path(), config).map(|topic| Hosted {
                    store: None,
                    topic: Arc::new(topic),
                })
            }
            Self::Dir(dir, Host::Store) => {
                let files = ackstore::FileStorage::open(dir.path(), true).expect("storage");
                open_hosted(Host::Store, Arc::new(files), &config)
            }
        }
        .expect("open topic")
    }
}

fn acked_ranges_of(set: &BTreeSet<Position>) -> Vec<(Position, Position)> {
    let mut out: Vec<(Position, Position)> = Vec::new();
    for &p in set {
        match out.last_mut() {
            Some((_, last)) if last.ledger_id == p.ledger_id && last.entry_id + 1 == p.entry_id => {
                *last = p;
            }
            _ => out.push((p, p)),
        }
    }
    out
}

fn check(cursor: &Cursor, mark: Option<Position>, acked: &BTreeSet<Position>, what: &str) {
    assert_eq!(cursor.mark_delete_position().unwrap(), mark, "{what}");
    assert_eq!(
        cursor.acked_ranges().unwrap(),
        acked_ranges_of(acked),
        "{what}"
    );
}

/// Which messages of the batches `batches` appended `c` acknowledges, for each entry.
fn batch_view(c: &Cursor, batches: &[Position]) -> Vec<Vec<u32>> {
    batches
        .iter()
        .map(|&b| {
            (0..BATCH)
                .filter(|&i| c.is_batch_index_acked(b, i).unwrap())
                .collect()
        })
        .collect()
}

/// Messages in each of the batches `reopen_keeps_every_ack` appends.
const BATCH: u32 = 5;

/// Writes acks in `first` mode, reopens in `second`, acks more, reopens in `first` again.
/// Entries 600 and on are batches of [`BATCH`] messages, some acknowledged in part.
fn reopen_keeps_every_ack(place: &Place, first: PersistMode, second: PersistMode) {
    let what = format!("{first:?} then {second:?}");
    let topic = place.open(first);
    let p = append_n(&topic, 600);
    let batches: Vec<Position> = (0..8)
        .map(|i| {
            let meta = AppendMeta {
                num_messages: BATCH,
                timestamp: 2000 + i,
            };
            topic.append_with(b"batch", meta).unwrap()
        })
        .collect();
    topic.sync().unwrap();
    let c = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    // Batch k: its messages below k acknowledged (none of the first, all of the last five).
    for (k, &b) in batches.iter().enumerate() {
        for i in 0..(k as u32).min(BATCH) {
            c.ack_batch_index(b, i, BATCH).unwrap();
        }
    }
    let batches_acked = batch_view(&c, &batches);
    assert_eq!(batches_acked[2], [0, 1], "{what}");
    assert_eq!(batches_acked[7], [0, 1, 2, 3, 4], "{what}");
    c.ack_cumulative(p[9]).unwrap();
    let mut acked = BTreeSet::new();
    // Every third entry, in descending order, and a run.
    for i in (12..600).step_by(3).rev() {
        c.ack(p[i]).unwrap();
        acked.insert(p[i]);
    }
    for &q in &p[300..340] {
        c.ack(q).unwrap();
        acked.insert(q);
    }
    c.set_property("offset", 42).unwrap();
    assert!(
        c.stats().unwrap().ackset.evictions > 0,
        "{what}: no eviction"
    );
    acked.extend(&batches[5..]);
    check(&c, Some(p[9]), &acked, &format!("{what}, before close"));
    topic.close().unwrap();

    let topic = place.open(second);
    let c = topic
        .open_cursor("sub", at(InitialPosition::Latest, false))
        .unwrap();
    check(&c, Some(p[9]), &acked, &format!("{what}, first reopen"));
    assert_eq!(
        batch_view(&c, &batches),
        batches_acked,
        "{what}, first reopen"
    );
    assert_eq!(c.properties().unwrap().get("offset"), Some(&42));
    // The read position is the first unacknowledged entry after mark-delete.
    assert_eq!(read_positions(&c, 2), vec![p[10], p[11]]);
    // Filling the first holes moves mark-delete over the acked run after them.
    c.ack(p[10]).unwrap();
    c.ack(p[11]).unwrap();
    acked.remove(&p[12]);
    c.ack(p[13]).unwrap();
    c.ack(p[14]).unwrap();
    for q in &p[12..=15] {
        acked.remove(q);
    }
    c.ack(p[599 - 1]).unwrap();
    acked.insert(p[598]);
    // One more message of batch 1; batch 4 completed.
    c.ack_batch_index(batches[1], 3, BATCH).unwrap();
    c.ack_batch_index(batches[4], 4, BATCH).unwrap();
    acked.insert(batches[4]);
    let mut batches_acked = batches_acked;
    batches_acked[1] = vec![0, 3];
    batches_acked[4] = vec![0, 1, 2, 3, 4];
    let mark = Some(p[15]);
    check(&c, mark, &acked, &format!("{what}, after more acks"));
    c.close().unwrap();
    topic.close().unwrap();

    let topic = place.open(first);
    let c = topic
        .open_cursor("sub", at(InitialPosition::Latest, false))
        .unwrap();
    check(&c, mark, &acked, &format!("{what}, second reopen"));
    assert_eq!(
        batch_view(&c, &batches),
        batches_acked,
        "{what}, second reopen"
    );
    // Either form, on either host, persists through the journal.
    let source = c.stats().unwrap().recovery_source;
    assert_eq!(source, Some(RecoverySource::Journal), "{what}");
    topic.close().unwrap();
}

const MODES: [(PersistMode, PersistMode); 4] = [
    (PersistMode::MultiEntry, PersistMode::MultiEntry),
    (PersistMode::SingleEntry, PersistMode::SingleEntry),
    (PersistMode::MultiEntry, PersistMode::SingleEntry),
    (PersistMode::SingleEntry, PersistMode::MultiEntry),
];

#[test]
fn reopen_keeps_every_individual_ack_in_every_mode_and_across_modes() {
    on_each_host(|host| {
        for (first, second) in MODES {
            reopen_keeps_every_ack(&Place::Mem(MemStorage::new(), host), first, second);
        }
    });
}

#[test]
fn reopen_keeps_every_individual_ack_on_real_files() {
    on_each_host(|host| {
        for (first, second) in MODES {
            let dir = tempfile::tempdir().unwrap();
            reopen_keeps_every_ack(&Place::Dir(dir, host), first, second);
        }
    });
}

/// Trimming consumed data ledgers never deletes a cursor ledger a cursor still reads (the
/// committed sample `cursor-ledger-alone`, whose cursor ledger's id lies below the data ledgers
/// appended after it), and the cursor keeps its state through the trim and a reopen.
#[test]
fn trimming_never_deletes_a_cursor_ledger() {
    let sample = support::samples::ledger_sample("cursor-ledger-alone");
    let disk = sample.disk();
    let config = support::topic::config(10);
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), config.clone()).unwrap();
    let c = topic
        .open_cursor("sub", at(InitialPosition::Latest, false))
        .unwrap();
    let cursor_ledger = c.stats().unwrap().persist.cursor_ledger.unwrap();
    let more = append_n(&topic, 30);
    assert!(more[0].ledger_id > cursor_ledger);
    c.ack_cumulative(more[25]).unwrap();
    c.ack(more[28]).unwrap();
    let trimmed = topic.trim_consumed().unwrap();
    assert!(trimmed.len() >= 5, "{trimmed:?}");
    assert!(!trimmed.contains(&cursor_ledger));
    let log = topic.entry_log().unwrap();
    assert!(log.ledger_ids().contains(&cursor_ledger));
    drop(log);
    topic.close().unwrap();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk), config).unwrap();
    let c = topic
        .open_cursor("sub", at(InitialPosition::Latest, false))
        .unwrap();
    assert_eq!(c.mark_delete_position().unwrap(), Some(more[25]));
    assert_eq!(c.acked_ranges().unwrap(), vec![(more[28], more[28])]);
}

/// Entries appended but not synced are lost with the power; acks of them, flushed or not, must
/// not survive as acks of entries that do not exist (the backlog stays exact).
#[test]
fn acks_of_entries_lost_in_a_power_cut_are_dropped_on_reopen() {
    on_each_host(acks_of_lost_entries_are_dropped);
}

fn acks_of_lost_entries_are_dropped(host: Host) {
    let (topic, c, kept) = after_acks_of_lost_entries(host, |c, kept, lost| {
        c.ack(kept[4]).unwrap();
        c.ack(lost[1]).unwrap();
        c.ack(lost[3]).unwrap();
    });
    assert_eq!(c.acked_ranges().unwrap(), vec![(kept[4], kept[4])]);
    assert_eq!(c.backlog().unwrap(), 9);
    let next = topic.append(b"after").unwrap();
    assert!(!c.is_acked(next).unwrap());
}

/// A topic of `host` that reads unsynced entries (only such a topic lets a consumer ack entries a
/// crash can take), with 10 entries synced and 5 not: its cursor `sub` makes `acks` (given the
/// synced and the unsynced entries) and flushes, then the power goes. Returns the topic reopened
/// on the durable image, which ends at the last synced entry, the cursor opened again, and the
/// synced entries.
fn after_acks_of_lost_entries(
    host: Host,
    acks: impl FnOnce(&Cursor, &[Position], &[Position]),
) -> (Hosted, Cursor, Vec<Position>) {
    let disk = MemStorage::new();
    let config = LedgerConfig {
        read_unsynced: true,
        ..LedgerConfig::default()
    };
    let topic = open_hosted(host, Arc::new(disk.clone()), &config).unwrap();
    let kept = append_n(&topic, 10);
    let lost = support::topic::append_unsynced(&topic, 5);
    let c = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    acks(&c, &kept, &lost);
    c.flush().unwrap();
    let topic = open_hosted(host, Arc::new(disk.durable_image()), &config).unwrap();
    assert_eq!(topic.last_position(), Some(kept[9]));
    let c = topic
        .open_cursor("sub", at(InitialPosition::Latest, false))
        .unwrap();
    (topic, c, kept)
}

/// On a topic that reads unsynced entries, a cumulative ack of entries a power cut then takes
/// (flushed before the cut) leaves a committed mark-delete past the durable end of the ledger
/// being appended to: the loss the opt-out accepts, not damage. The topic opens with nothing in
/// the cursor's backlog, and entries appended after the cut are not acknowledged.
#[test]
fn a_cumulative_ack_of_entries_lost_in_a_power_cut_opens_when_unsynced_entries_are_read() {
    on_each_host(cumulative_ack_of_lost_entries_opens);
}

fn cumulative_ack_of_lost_entries_opens(host: Host) {
    let mut cumulative = None;
    let (topic, c, kept) = after_acks_of_lost_entries(host, |c, _, lost| {
        c.ack_cumulative(lost[3]).unwrap();
        cumulative = Some(lost[3]);
    });
    let mark = c.mark_delete_position().unwrap().unwrap();
    let acked = cumulative.expect("acked");
    assert!(kept[9] <= mark && mark <= acked, "{mark}");
    assert_eq!(c.backlog().unwrap(), 0);
    let next = topic.append(b"after").unwrap();
    topic.sync().unwrap();
    assert!(!c.is_acked(next).unwrap());
    assert_eq!(c.backlog().unwrap(), 1);
}

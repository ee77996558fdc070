//! Opening a topic opens none of its sealed ledgers but the newest: each opens on its first
//! use, and damage in one is the error of that use (naming the ledger), never the topic's.

use ackstore::internals::log::ledger_file_name;
use ackstore::{CorruptionPlace, Error, ManagedLedger, MemStorage, Position};

use crate::support;

const PER_LEDGER: u64 = 10;
const LEDGERS: u64 = 20;

/// A closed topic of [`LEDGERS`] sealed ledgers of [`PER_LEDGER`] entries.
fn closed_topic() -> (MemStorage, Vec<Position>) {
    let (disk, topic) = support::topic::mem_topic(PER_LEDGER);
    let positions = support::topic::append_n(&topic, PER_LEDGER * LEDGERS);
    topic.close().expect("close");
    (disk, positions)
}

fn reopen(disk: &MemStorage) -> ackstore::Result<ManagedLedger> {
    ManagedLedger::open_with_storage(
        std::sync::Arc::new(disk.clone()),
        support::topic::config(PER_LEDGER),
    )
}

#[test]
fn a_topic_opens_at_most_one_sealed_ledger_whatever_their_number() {
    let (disk, positions) = closed_topic();
    let topic = reopen(&disk).expect("reopen");
    let opens = topic.log_stats().unwrap().ledger_opens;
    assert!(
        opens <= 1,
        "the open opened {opens} of {LEDGERS} sealed ledgers"
    );
    // Each read of a ledger not opened yet opens it, once.
    let first = topic.read(positions[0]).expect("read");
    assert_eq!(first.position, positions[0]);
    topic.read(positions[1]).expect("read");
    assert_eq!(topic.log_stats().unwrap().ledger_opens, opens + 1);
    for p in &positions {
        assert_eq!(topic.read(*p).expect("read").position, *p);
    }
    assert_eq!(topic.log_stats().unwrap().ledger_opens, LEDGERS);
}

#[test]
fn a_damaged_sealed_ledger_opens_the_topic_and_fails_its_first_read_naming_it() {
    let (disk, positions) = closed_topic();
    let damaged = positions[(PER_LEDGER * 3) as usize].ledger_id;
    let name = ledger_file_name(damaged);
    let mut bytes = disk.live_bytes(&name).expect("ledger file");
    // Cut inside its entries, below the length its header records as synced: damage that
    // an open reading every ledger refused the topic for.
    bytes.truncate(bytes.len() / 2);
    disk.set_bytes(&name, bytes).expect("damage");
    let topic = reopen(&disk).expect("the topic opens: the damaged ledger is not read");
    for (i, p) in positions.iter().enumerate() {
        let read = topic.read(*p);
        if p.ledger_id == damaged {
            match read {
                Err(Error::Corrupted {
                    place: CorruptionPlace::Ledger { ledger, .. },
                    ..
                }) => assert_eq!(ledger, damaged, "entry {i}"),
                other => panic!("entry {i} of the damaged ledger: {other:?}"),
            }
        } else {
            assert_eq!(
                read.expect("another ledger reads").position,
                *p,
                "entry {i}"
            );
        }
    }
    // Reported again at every use, never skipped.
    assert!(matches!(
        topic.read(positions[(PER_LEDGER * 3) as usize]),
        Err(Error::Corrupted { .. })
    ));
}

#[test]
fn a_sealed_ledger_cut_to_less_than_a_header_fails_its_first_read_naming_it() {
    let (disk, positions) = closed_topic();
    let cut = positions[(PER_LEDGER * 5) as usize].ledger_id;
    disk.set_bytes(&ledger_file_name(cut), vec![0; 10])
        .expect("cut");
    let topic = reopen(&disk).expect("the topic opens");
    match topic.read(positions[(PER_LEDGER * 5) as usize]) {
        Err(Error::Corrupted {
            place: CorruptionPlace::Ledger { ledger, .. },
            ..
        }) => assert_eq!(ledger, cut),
        other => panic!("{other:?}"),
    }
    topic.read(positions[0]).expect("another ledger reads");
}

/// Threads reading every entry at once, each in its own order, race to open each sealed
/// ledger first: every read returns its entry, and each ledger file is opened exactly once.
#[test]
fn threads_reading_at_once_open_each_sealed_ledger_exactly_once() {
    const THREADS: usize = 4;
    let (disk, positions) = closed_topic();
    let topic = reopen(&disk).expect("reopen");
    let before = topic.log_stats().unwrap().ledger_opens;
    let start = std::sync::Barrier::new(THREADS);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (topic, positions, start) = (&topic, &positions, &start);
            s.spawn(move || {
                // Thread t starts at a different ledger and walks them all, wrapping around.
                let offset = t * positions.len() / THREADS;
                start.wait();
                for k in 0..positions.len() {
                    let p = positions[(offset + k) % positions.len()];
                    assert_eq!(topic.read(p).expect("read").position, p);
                }
            });
        }
    });
    let opens = topic.log_stats().unwrap().ledger_opens;
    assert_eq!(
        opens, LEDGERS,
        "ledger files opened by the open ({before}) and the racing reads together"
    );
}

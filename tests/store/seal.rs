//! The store's claim seals its cursor journal: what a former owner appends to the journal after
//! a new owner claimed the store is ignored by every later open, however many owners and
//! segments later; a power cut at every step of the claim, and at every byte of a journal's
//! unsynced tail before it, leaves a store that opens with every committed tick.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::internals::journal::{JournalConfig, Seal, segment_name};
use ackstore::{MemStorage, Position, Store, StoreConfig};
use support::crash::{Points, cut_everywhere_after, torn_image, unsynced_tail};
use support::journal::{Fleet, check, cursor_ids, run};

fn mem_store(disk: &MemStorage) -> ackstore::Result<Store> {
    Store::open_with_storage(Arc::new(disk.clone()), StoreConfig::default())
}

/// A new store whose catalog lists the topics of the journal's test cursors
/// (`support::journal::cursor_ids`: topic ids 1 to 3), whose state a fleet writes beside it.
fn create_store(disk: &MemStorage) -> Store {
    let store = mem_store(disk).expect("create the store");
    for name in ["a", "b", "c"] {
        store.topic(name).expect("topic");
    }
    store
}

/// The data ledgers of the partitions `cursor` committed in the journal opened with `seals`.
fn committed_ledgers(
    disk: &MemStorage,
    seals: &[Seal],
    cursor: ackstore::internals::journal::index::CursorId,
) -> Option<BTreeSet<u64>> {
    let fleet = Fleet::open_sealed(disk, JournalConfig::default(), usize::MAX, seals)
        .expect("journal opens with the store's seals");
    fleet
        .journal
        .committed(cursor)
        .map(|(_, rows)| rows.iter().map(|(k, _)| k.ledger_id).collect())
}

#[test]
fn a_former_owners_ticks_after_the_claim_are_ignored_by_every_later_open() {
    let config = JournalConfig::default();
    let disk = MemStorage::new();
    let [x, y] = [cursor_ids()[0], cursor_ids()[1]];

    // The former owner commits a tick, then loses the store without knowing it.
    drop(create_store(&disk));
    let mut former = Fleet::open(&disk, config, usize::MAX).expect("former owner");
    former.ack(x, Position::new(1, 1)).expect("ack");
    former.tick().expect("tick before the claim");
    let store = mem_store(&disk).expect("the new owner claims the store");
    let seals = store.journal_seals();
    assert_eq!(seals.len(), 1, "the newest segment is sealed");
    assert_eq!(seals[0].segment, 1);
    assert_eq!(
        seals[0].len,
        disk.live_bytes(&segment_name(1)).expect("segment").len() as u64,
        "sealed at the end of what the former owner wrote before the claim"
    );

    // It goes on appending to the sealed segment.
    former.ack(x, Position::new(2, 2)).expect("ack");
    former.ack(y, Position::new(2, 3)).expect("ack");
    former
        .tick()
        .expect("a former owner's tick is not refused by the journal itself");
    drop(store);
    assert_eq!(
        committed_ledgers(&disk, &seals, x),
        Some(BTreeSet::from([1]))
    );
    assert_eq!(committed_ledgers(&disk, &seals, y), None);

    // A later open keeps the seal as it was, not at the segment's new length.
    let again = mem_store(&disk).expect("reopen");
    assert_eq!(again.journal_seals(), seals, "seal unchanged");
    drop(again);

    // The owner's own ticks go to a new segment; the sealed one is then no longer the newest,
    // and its seal must still hold at every later open.
    let mut owner = Fleet::open_sealed(&disk, config, usize::MAX, &seals).expect("owner");
    owner.ack(y, Position::new(3, 4)).expect("ack");
    owner.tick().expect("owner's tick");
    assert_eq!(owner.journal.tail().segment, 2, "a new segment");
    drop(owner);
    former.ack(x, Position::new(4, 4)).expect("ack");
    former.tick().expect("the former owner appends again");
    drop(former);

    let later = mem_store(&disk).expect("a later owner");
    let later_seals = later.journal_seals();
    assert_eq!(later_seals.len(), 2, "both sealed segments keep a seal");
    assert_eq!(later_seals[0], seals[0], "the first seal is kept");
    assert_eq!(later_seals[1].segment, 2);
    drop(later);
    assert_eq!(
        committed_ledgers(&disk, &later_seals, x),
        Some(BTreeSet::from([1])),
        "no tick of the former owner after the claim is read"
    );
    assert_eq!(
        committed_ledgers(&disk, &later_seals, y),
        Some(BTreeSet::from([3])),
        "the owner's own tick is read"
    );
}

#[test]
fn a_power_cut_at_every_step_of_the_claim_and_every_tail_byte_keeps_every_committed_tick() {
    let config = JournalConfig {
        segment_bytes: 4096,
    };
    let mut cuts = 0;
    let mut tails = 0;
    cut_everywhere_after(
        Points::EVERY,
        |disk| {
            // A store exists, its journal holds ticks, and the journal's owner died with
            // evicted partitions past its last sync (an unsynced tail).
            drop(create_store(disk));
            let outcome = run(disk, config, 1500, 5, 160, 40);
            let mut fleet = Fleet::open(disk, config, 1500).expect("reopen");
            for (i, id) in cursor_ids().into_iter().enumerate() {
                for e in 0..40u64 {
                    fleet
                        .ack(
                            id,
                            Position::new(1 + e % 2, (e * 7919 + i as u64) % (3 << 16)),
                        )
                        .expect("ack");
                }
            }
            drop(fleet);
            outcome
        },
        |disk, outcome| {
            let opened = mem_store(disk).map(|s| s.journal_seals());
            (outcome, opened.is_ok())
        },
        |disk, cut, (outcome, opened)| {
            cuts += 1;
            let tail = unsynced_tail(disk);
            let step = (tail / 50).max(1);
            for keep in (0..=tail).step_by(step) {
                let image = torn_image(disk, |_| keep);
                let what = format!("{cut:?}, {keep} of {tail} tail bytes");
                let store = mem_store(&image).unwrap_or_else(|e| panic!("{what}: open: {e}"));
                let seals = store.journal_seals();
                for s in &seals {
                    let len = image.live_bytes(&segment_name(s.segment)).map(|b| b.len());
                    assert!(
                        len.is_some_and(|l| l as u64 >= s.len),
                        "{what}: seal {s:?} past its segment ({len:?})"
                    );
                }
                drop(store);
                check(&image, config, &outcome, &what);
                tails += 1;
            }
            if !cut.interrupted() {
                assert!(opened, "the clean run opens");
            }
        },
    );
    assert!(cuts > 3 && tails > cuts, "{cuts} cuts, {tails} images");
}

#[test]
fn a_store_whose_catalog_is_version_1_opens_with_its_topics_and_cursors() {
    use ackstore::internals::format::store::{
        CATALOG_VERSION_V1, CATALOG_VERSION_V4, SPACED_FROM_LEN,
    };
    use ackstore::internals::meta::{FileMetaStore, MetaStore};
    use ackstore::{CursorOptions, InitialPosition};

    let disk = MemStorage::new();
    let store = mem_store(&disk).expect("create");
    let topic = store.topic("persistent://t/ns/a").expect("topic");
    topic.append(b"m").expect("append");
    topic.sync().expect("sync");
    let options = CursorOptions {
        initial_position: InitialPosition::Earliest,
        inclusive: false,
    };
    let cursor = topic.open_cursor("sub", options).expect("cursor");
    cursor.ack(Position::new(1, 0)).expect("ack");
    cursor.flush().expect("flush");
    drop(cursor);
    drop(topic);
    store.close().expect("close");
    drop(store);

    // The catalog as a version 1 build wrote it: no seal count, no `spaced_from`, no segment
    // list (on the in-memory disk a topic's files have the same names in both layouts).
    let meta = FileMetaStore::new(Arc::new(disk.clone()));
    let (version, _) = meta.get("store").expect("read").expect("catalog");
    let mut catalog = ackstore::internals::store::read_catalog(Arc::new(disk.clone()))
        .expect("read")
        .expect("catalog");
    assert!(catalog.seals.is_empty(), "no journal segment, no seal");
    catalog.segments = None;
    let mut v1 = catalog.encode_version(CATALOG_VERSION_V4);
    v1.truncate(v1.len() - 4 - SPACED_FROM_LEN - 4 - 8 - 16);
    v1[8..10].copy_from_slice(&CATALOG_VERSION_V1.to_le_bytes());
    meta.put("store", Some(version), &v1).expect("write v1");

    let store = mem_store(&disk).expect("a version 1 catalog opens");
    assert_eq!(store.topic_names(), ["persistent://t/ns/a"]);
    let topic = store.topic("persistent://t/ns/a").expect("topic");
    let cursor = topic.open_cursor("sub", options).expect("cursor");
    assert_eq!(
        cursor.mark_delete_position().expect("mark-delete"),
        Some(Position::new(1, 0))
    );
    let (_, bytes) = meta.get("store").expect("read").expect("catalog");
    assert_eq!(
        u16::from_le_bytes([bytes[8], bytes[9]]),
        ackstore::internals::format::store::CATALOG_VERSION,
        "the claim writes the current version"
    );
}

#[test]
fn a_former_owners_tick_after_the_claim_fails_as_fenced_and_is_never_read() {
    use ackstore::Error;
    use ackstore::internals::ackset::PartitionKey;
    use ackstore::internals::format::cursor::PersistedState;
    use ackstore::internals::journal::CursorFlush;

    let disk = MemStorage::new();
    let [x, y] = [cursor_ids()[0], cursor_ids()[1]];
    let flush = |cursor, ledger_id: u64| CursorFlush {
        name: 0,
        cursor,
        state: PersistedState::default(),
        written: vec![(
            PartitionKey {
                ledger_id,
                chunk: 0,
            },
            roaring::RoaringBitmap::from_iter([1u32, 5]),
        )],
        live: vec![PartitionKey {
            ledger_id,
            chunk: 0,
        }],
    };
    let old = create_store(&disk);
    old.journal()
        .commit(&[flush(x, 1)])
        .expect("the owner's tick");
    disk.break_lock();
    let new = mem_store(&disk).expect("a second owner after the lock broke");
    assert!(
        matches!(
            old.journal().commit(&[flush(x, 2), flush(y, 2)]),
            Err(Error::Fenced { .. })
        ),
        "the former owner's tick after the claim"
    );
    assert!(
        old.journal().commit(&[flush(y, 3)]).is_err(),
        "a fenced journal stays refused"
    );
    new.journal()
        .commit(&[flush(y, 4)])
        .expect("the new owner's tick");
    let seals = new.journal_seals();
    drop(new);
    drop(old);
    assert_eq!(
        committed_ledgers(&disk, &seals, x),
        Some(BTreeSet::from([1]))
    );
    assert_eq!(
        committed_ledgers(&disk, &seals, y),
        Some(BTreeSet::from([4]))
    );
    let reopened = mem_store(&disk).expect("reopen");
    drop(reopened);
}

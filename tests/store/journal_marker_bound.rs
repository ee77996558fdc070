//! The largest marker: a cursor's full marker lists every live partition, and a journal
//! record is at most the `MAX_BODY_LEN` bytes every reader accepts. A cursor whose marker just
//! fits is committed and recovered exactly; one with one partition more is refused at stage
//! (`LimitExceeded`, nothing written) while the other cursors of the same tick commit and the
//! journal goes on; a batch record over the limit is refused before it is appended.

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::internals::ackset::PartitionKey;
use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::format::journal::{BODY_FIXED_LEN, MAX_BODY_LEN};
use ackstore::internals::journal::index::CursorId;
use ackstore::internals::journal::{Journal, JournalConfig, Seal, marker_room};
use ackstore::{Error, FileStorage, Storage};
use roaring::RoaringBitmap;

const BIG: CursorId = CursorId {
    topic: 1,
    cursor: 1,
};
const TOO_BIG: CursorId = CursorId {
    topic: 1,
    cursor: 2,
};
const SMALL: CursorId = CursorId {
    topic: 2,
    cursor: 1,
};

fn open(storage: &Arc<dyn Storage>) -> Journal {
    Journal::open(
        Arc::clone(storage),
        JournalConfig::default(),
        Seal::default(),
    )
    .expect("open")
}

/// `n` partitions of ledger 1, one acknowledged entry each (entry `chunk` of each span).
fn partitions(n: usize) -> Vec<(PartitionKey, RoaringBitmap)> {
    (0..n as u64)
        .map(|chunk| {
            let key = PartitionKey {
                ledger_id: 1,
                chunk,
            };
            let offset = u32::try_from(chunk % 60_000).expect("offset");
            (key, std::iter::once(offset).collect())
        })
        .collect()
}

fn keys(parts: &[(PartitionKey, RoaringBitmap)]) -> Vec<PartitionKey> {
    parts.iter().map(|(k, _)| *k).collect()
}

#[test]
fn a_marker_that_just_fits_a_record_recovers_and_one_more_partition_is_refused_alone() {
    let dir = tempfile::tempdir().expect("dir");
    let storage: Arc<dyn Storage> =
        Arc::new(FileStorage::open(dir.path(), false).expect("storage"));
    let state = PersistedState::default();
    let room = marker_room(&state, 0);
    // The bound is the reader's: about 1.86 million rows of 36 bytes in 64 MiB.
    assert!(room > 1_800_000 && room < 1_900_000, "{room}");
    let too_big = partitions(room + 1);
    let big = &too_big[..room];
    let small = partitions(3);

    let journal = open(&storage);
    let mut tick = journal.begin_tick();
    let before = journal.stats().bytes_written;
    let refused = tick.stage((TOO_BIG, 0), state.clone(), &too_big, &keys(&too_big));
    assert!(
        matches!(refused, Err(Error::LimitExceeded { .. })),
        "{refused:?}"
    );
    assert_eq!(journal.stats().bytes_written, before, "nothing is written");
    tick.stage((BIG, 0), state.clone(), big, &keys(big))
        .expect("a marker that fits is staged");
    tick.stage((SMALL, 0), state.clone(), &small, &keys(&small))
        .expect("another cursor is staged");
    tick.commit().expect("the tick commits");
    // The journal goes on: another tick of the small cursor commits.
    journal
        .begin_tick()
        .commit()
        .expect("an empty tick after the refusal");
    drop(journal);

    let journal = open(&storage);
    let rows = |c| -> BTreeSet<PartitionKey> {
        journal
            .committed(c)
            .map(|(_, rows)| rows.into_iter().map(|(k, _)| k).collect())
            .unwrap_or_default()
    };
    assert_eq!(rows(BIG), keys(big).into_iter().collect());
    assert_eq!(rows(SMALL), keys(&small).into_iter().collect());
    assert!(journal.committed(TOO_BIG).is_none());
    for (key, bitmap) in [&big[0], &big[room / 2], &big[room - 1]] {
        assert_eq!(
            journal.load(BIG, *key).expect("load").as_ref(),
            Some(bitmap),
            "{key:?}"
        );
    }
}

#[test]
fn a_batch_record_over_the_limit_is_refused_before_it_is_appended() {
    let dir = tempfile::tempdir().expect("dir");
    let storage: Arc<dyn Storage> =
        Arc::new(FileStorage::open(dir.path(), false).expect("storage"));
    let journal = open(&storage);
    let key = PartitionKey {
        ledger_id: 1,
        chunk: 0,
    };
    let before = journal.stats().bytes_written;
    let payload = vec![0u8; MAX_BODY_LEN - BODY_FIXED_LEN + 1];
    let refused = journal.store_batch(SMALL, key, (&payload, 1));
    assert!(
        matches!(refused, Err(Error::LimitExceeded { .. })),
        "{refused:?}"
    );
    assert_eq!(journal.stats().bytes_written, before, "nothing is written");
    assert!(journal.stored_batch(SMALL, key).is_none());
}

//! The journal with its default segments (16 MiB) on real files: ticks each writing more than
//! a segment (thousands of cursors, each rewriting a partition of about 8 KiB of random acks),
//! so every tick starts segments and rolls the oldest over. After every tick the segments hold
//! at most twice the live bytes plus one segment; a restart recovers every cursor's last
//! written partition.

use crate::support;

use std::sync::Arc;

use ackstore::FileStorage;
use ackstore::internals::ackset::PartitionKey;
use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::journal::index::CursorId;
use ackstore::internals::journal::{CursorFlush, Journal, JournalConfig, Seal};
use roaring::RoaringBitmap;
use support::workload::{Rng, seed_from_env};

const CURSORS: u64 = 2500;
const TICKS: u64 = 3;
const KEY: PartitionKey = PartitionKey {
    ledger_id: 1,
    chunk: 0,
};

fn cursor(i: u64) -> CursorId {
    CursorId {
        topic: i / 100,
        cursor: i,
    }
}

/// Half of a partition's 65,536 offsets at random: about 8 KiB however it is encoded. Bit `b`
/// of the `w`-th random word is offset `64 w + b`, the bitmap read from the words' bytes at once.
fn random_partition(rng: &mut Rng) -> RoaringBitmap {
    let bytes: Vec<u8> = (0..1u32 << 10)
        .flat_map(|_| rng.next_u64().to_le_bytes())
        .collect();
    RoaringBitmap::from_lsb0_bytes(0, &bytes)
}

/// One tick rewriting every cursor's partition; returns what each holds now.
fn tick(journal: &Journal, rng: &mut Rng) -> Vec<RoaringBitmap> {
    let written: Vec<RoaringBitmap> = (0..CURSORS).map(|_| random_partition(rng)).collect();
    let flushes: Vec<CursorFlush> = written
        .iter()
        .zip(0..)
        .map(|(bitmap, i)| CursorFlush {
            cursor: cursor(i),
            name: 0,
            state: PersistedState::default(),
            written: vec![(KEY, bitmap.clone())],
            live: vec![KEY],
        })
        .collect();
    journal.commit(&flushes).expect("tick");
    written
}

#[test]
fn ticks_writing_more_than_a_default_segment_roll_over_and_recover_every_cursor() {
    let seed = seed_from_env("DEFAULT_SEGMENTS_SEED");
    let segment_bytes = JournalConfig::default().segment_bytes;
    assert_eq!(
        segment_bytes,
        16 << 20,
        "the default this test is sized for"
    );
    let dir = tempfile::tempdir().expect("dir");
    let storage = || Arc::new(FileStorage::open(dir.path(), true).expect("storage"));
    let journal =
        Journal::open(storage(), JournalConfig::default(), Seal::default()).expect("open");
    let mut rng = Rng::new(seed);
    let mut held = Vec::new();
    for round in 0..TICKS {
        held = tick(&journal, &mut rng);
        let stats = journal.stats();
        assert!(
            stats.bytes_written > (round + 1) * segment_bytes,
            "seed {seed}: a tick wrote less than a segment: {stats:?}"
        );
        assert!(
            stats.segment_bytes <= 2 * stats.live_bytes + segment_bytes,
            "seed {seed}, tick {round}: the segments hold more than the bound: {stats:?}"
        );
    }
    assert!(
        journal.stats().rollovers >= 1,
        "seed {seed}: no rollover: {:?}",
        journal.stats()
    );
    let live = journal.stats().live_bytes;
    drop(journal);
    let reopened =
        Journal::open(storage(), JournalConfig::default(), Seal::default()).expect("reopen");
    assert_eq!(reopened.stats().live_bytes, live, "seed {seed}: live bytes");
    for (bitmap, i) in held.iter().zip(0..) {
        let got = reopened.load(cursor(i), KEY).expect("load");
        assert_eq!(got.as_ref(), Some(bitmap), "seed {seed}: cursor {i}");
    }
}

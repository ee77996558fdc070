//! Persisted batch-index acks (PIP-54): partial entries written by flushes (batch-index entries
//! referenced by the marker, or inline in a snapshot), recovered after a reopen or a power cut
//! exactly as the last flush left them, copied by rollovers, charged to the LRU budget, and
//! checked by `verify`; on a topic opened alone and on a store's topic (batch records in the
//! store's journal).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::Position;
use ackstore::{
    AppendMeta, Cursor, CursorConfig, InitialPosition, LedgerConfig, ManagedLedger, MemStorage,
    PersistMode,
};
use support::crash::{Cut, Points, cut_everywhere_after, cut_images};
use support::topic::{Host, Hosted, at, config, on_each_host, open_hosted};
use support::workload::{Rng, seed_from_env};

const PER_LEDGER: u64 = 8;

/// Appends one entry per batch size and syncs them (readers see synced entries only); returns
/// the positions and sizes.
fn append_batches(topic: &ManagedLedger, sizes: &[u32]) -> Vec<(Position, u32)> {
    let entries = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let meta = AppendMeta {
                num_messages: n,
                timestamp: 1000 + i as u64,
            };
            (topic.append_with(b"batch", meta).unwrap(), n)
        })
        .collect();
    topic.sync().unwrap();
    entries
}

fn earliest(topic: &ManagedLedger) -> Cursor {
    topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap()
}

/// The model: acknowledged messages per entry (whole-entry acks as every message).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Model {
    acked: BTreeMap<Position, BTreeSet<u32>>,
}

impl Model {
    fn ack(&mut self, pos: Position, index: u32) {
        self.acked.entry(pos).or_default().insert(index);
    }
    fn entry_acked(&self, pos: Position, size: u32) -> bool {
        self.acked
            .get(&pos)
            .is_some_and(|s| s.len() == size as usize)
    }
}

/// The cursor's view of every message of `entries`, as a model.
fn observed(c: &Cursor, entries: &[(Position, u32)]) -> Model {
    let mut m = Model::default();
    for &(pos, size) in entries {
        for i in 0..size {
            if c.is_batch_index_acked(pos, i).unwrap() {
                m.ack(pos, i);
            }
        }
    }
    m
}

/// Checks `c` against `model`: every message, mark-delete, what a full read delivers and the
/// partial-entry count.
fn check(c: &Cursor, entries: &[(Position, u32)], model: &Model, what: &str) {
    assert_eq!(&observed(c, entries), model, "{what}");
    let mark = entries
        .iter()
        .take_while(|&&(p, n)| model.entry_acked(p, n))
        .last()
        .map(|e| e.0);
    assert_eq!(c.mark_delete_position().unwrap(), mark, "{what}");
    c.rewind().unwrap();
    let read = c.read_entries(entries.len() + 1).unwrap();
    let got: Vec<_> = read
        .iter()
        .map(|e| {
            let acked = e.acked_batch_indexes.as_ref();
            (e.position, acked.map(|b| b.iter().collect::<BTreeSet<_>>()))
        })
        .collect();
    let want: Vec<_> = entries
        .iter()
        .filter(|&&(p, n)| !model.entry_acked(p, n))
        .map(|&(p, _)| (p, model.acked.get(&p).cloned()))
        .collect();
    assert_eq!(got, want, "{what}");
    let partial = want.iter().filter(|(_, a)| a.is_some()).count() as u64;
    assert_eq!(c.stats().unwrap().partial_entries, partial, "{what}");
}

/// How a test opens its topic again and stops the previous owner.
struct Backend<'a> {
    open: &'a dyn Fn() -> Hosted,
    stop: &'a dyn Fn(Hosted),
}

/// Runs `test` with each host (a topic alone, a store's topic) on the in-memory disk, where a
/// stopped owner loses the power (the reopen sees the durable image), and on real files, where
/// it closes (a second owner of a directory is refused while the first holds it).
fn on_each_reopenable_backend(config: &LedgerConfig, mut test: impl FnMut(&Backend<'_>)) {
    on_each_host(|host| on_each_backend_of(host, config, &mut test));
}

fn on_each_backend_of(host: Host, config: &LedgerConfig, test: &mut impl FnMut(&Backend<'_>)) {
    eprintln!("backend: in-memory disk");
    let current = std::cell::RefCell::new(MemStorage::new());
    test(&Backend {
        open: &|| {
            let image = current.borrow().durable_image();
            *current.borrow_mut() = image.clone();
            open_hosted(host, Arc::new(image), config).unwrap()
        },
        stop: &std::mem::forget,
    });
    let dir = tempfile::tempdir().unwrap();
    eprintln!("backend: real files in {}", dir.path().display());
    test(&Backend {
        open: &|| {
            let files = ackstore::FileStorage::open(dir.path(), true).unwrap();
            open_hosted(host, Arc::new(files), config).unwrap()
        },
        stop: &|t| t.close().unwrap(),
    });
}

fn ledger_config(cursor: CursorConfig) -> LedgerConfig {
    LedgerConfig {
        cursor,
        ..config(PER_LEDGER)
    }
}

/// Rounds of batch-index acks in random order over many entries with mixed batch sizes, some
/// whole-entry acks among them; after each round a flush and a reopen (the old handle dropped
/// without a close, as in a crash after the flush): the reopened cursor holds exactly the
/// model, partial entries included.
fn random_acks_survive_reopens(cursor: CursorConfig, seed: u64) {
    on_each_reopenable_backend(&ledger_config(cursor), |b| {
        let open = b.open;
        let mut rng = Rng::new(seed);
        let topic = open();
        let sizes: Vec<u32> = (0..60).map(|_| 1 + rng.below(20) as u32).collect();
        let entries = append_batches(&topic, &sizes);
        topic.sync().unwrap();
        let mut messages: Vec<(Position, u32, u32)> = entries
            .iter()
            .flat_map(|&(p, n)| (0..n).map(move |i| (p, i, n)))
            .collect();
        for i in (1..messages.len()).rev() {
            messages.swap(i, rng.index(i + 1));
        }
        let mut model = Model::default();
        let mut topic = Some(topic);
        for (round, chunk) in messages.chunks(messages.len() / 6 + 1).enumerate() {
            let t = topic.take().unwrap_or_else(open);
            let c = earliest(&t);
            check(&c, &entries, &model, &format!("round {round}, reopened"));
            for &(pos, i, n) in chunk {
                if rng.below(25) == 0 {
                    c.ack(pos).unwrap();
                    (0..n).for_each(|k| model.ack(pos, k));
                } else {
                    c.ack_batch_index(pos, i, n).unwrap();
                    model.ack(pos, i);
                }
            }
            check(
                &c,
                &entries,
                &model,
                &format!("round {round}, before flush"),
            );
            c.flush().unwrap();
            drop(c);
            (b.stop)(t);
        }
        let t = open();
        check(&earliest(&t), &entries, &model, "last reopen");
        t.close().unwrap();
    });
}

#[test]
fn batch_acks_in_random_order_survive_flush_and_reopen_in_multi_entry_mode() {
    let seed = seed_from_env("BATCH_PERSIST_SEED");
    eprintln!("BATCH_PERSIST_SEED={seed}");
    random_acks_survive_reopens(CursorConfig::default(), seed);
}

#[test]
fn batch_acks_in_random_order_survive_flush_and_reopen_in_single_entry_mode() {
    let seed = seed_from_env("BATCH_PERSIST_SEED");
    eprintln!("BATCH_PERSIST_SEED={seed}");
    let cursor = CursorConfig {
        persist_mode: PersistMode::SingleEntry,
        ..CursorConfig::default()
    };
    random_acks_survive_reopens(cursor, seed);
}

/// A tiny LRU budget: partial entries are charged to it (the stats show the charge), resident
/// partitions are evicted to make room, and after a flush and a reopen every ack, whole entry
/// or message, is back.
#[test]
fn batch_state_is_charged_to_the_lru_budget_and_survives_eviction_and_reopen() {
    let budget = 2048;
    let cursor = CursorConfig {
        lru_capacity_bytes: budget,
        ..CursorConfig::default()
    };
    on_each_reopenable_backend(&ledger_config(cursor), |b| {
        let open = b.open;
        let topic = open();
        // Many ledgers: every ledger is its own ack partition.
        let entries = append_batches(&topic, &[3; 400]);
        topic.sync().unwrap();
        let c = earliest(&topic);
        let mut model = Model::default();
        for (k, &(pos, n)) in entries.iter().enumerate().skip(1) {
            if k % 2 == 0 {
                c.ack(pos).unwrap();
                (0..n).for_each(|i| model.ack(pos, i));
            } else if k % 7 == 1 {
                c.ack_batch_index(pos, 2, n).unwrap();
                model.ack(pos, 2);
            }
        }
        let stats = c.stats().unwrap();
        assert!(stats.partial_entries > 0);
        assert_eq!(
            stats.ackset.charged_bytes as u64, stats.batch_index_bytes,
            "the batch state is charged to the ack set's budget"
        );
        assert!(stats.ackset.evictions > 0, "{:?}", stats.ackset);
        c.flush().unwrap();
        let s = c.stats().unwrap().ackset;
        let one_partition = s.peak_resident_bytes.saturating_sub(budget);
        assert!(
            s.resident_bytes + s.charged_bytes <= budget + one_partition.max(1024),
            "{s:?}"
        );
        check(&c, &entries, &model, "under a tiny budget");
        drop(c);
        (b.stop)(topic);
        let topic = open();
        check(&earliest(&topic), &entries, &model, "reopened");
        topic.close().unwrap();
    });
}

/// A power cut at every storage step of a flush that changes partial entries (and every byte of
/// the unsynced tail kept): the recovered batch state is exactly the previous `Ok` flush's or,
/// never less once the flush returned `Ok`, this flush's: never a message more, never one lost.
#[test]
fn a_power_cut_during_a_flush_recovers_exactly_the_last_flushed_batch_state() {
    on_each_host(power_cut_during_a_flush);
}

fn power_cut_during_a_flush(host: Host) {
    let ledgers = config(10);
    let sizes = [3, 2, 4, 2, 5, 6];
    let clean = cut_everywhere_after(
        Points::EVERY,
        |disk| {
            let topic = open_hosted(host, Arc::new(disk.clone()), &ledgers).unwrap();
            let e = append_batches(&topic, &sizes);
            topic.sync().unwrap();
            let c = earliest(&topic);
            let mut before = Model::default();
            for (k, i) in [(0, 0), (2, 1), (2, 3), (5, 0)] {
                c.ack_batch_index(e[k].0, i, e[k].1).unwrap();
                before.ack(e[k].0, i);
            }
            c.flush().unwrap();
            (topic, c, e, before)
        },
        |_, (topic, c, e, before)| {
            let mut after = before.clone();
            // Entry 0 completed, entry 2 grows, entry 4 becomes partial, entry 5 unchanged.
            for (k, i) in [(0, 1), (0, 2), (2, 0), (4, 4)] {
                c.ack_batch_index(e[k].0, i, e[k].1).unwrap();
                after.ack(e[k].0, i);
            }
            let flushed = c.flush();
            (topic, c, e, before, after, flushed)
        },
        |disk, Cut { n, .. }, (topic, c, e, before, after, flushed)| {
            drop(c);
            std::mem::forget(topic);
            for (keep, image) in cut_images(disk) {
                let what = format!("cut at {n}, {keep} tail bytes kept");
                let topic = open_hosted(host, Arc::new(image), &ledgers).unwrap();
                let c = earliest(&topic);
                let got = observed(&c, &e);
                if flushed.is_ok() {
                    assert_eq!(got, after, "{what}: flushed, then lost");
                } else {
                    assert!(got == before || got == after, "{what}: {got:?}");
                }
                check(&c, &e, &got, &what);
                topic.close().unwrap();
            }
        },
    );
    assert!(clean.result.5.is_ok());
    assert!(clean.total >= 3, "the flush took {} writes", clean.total);
}

/// The committed samples `tests/data/cursor-v1-batch-{multi,single}` (a topic whose cursor
/// `sub` flushed partial entries twice, in each persistence mode) open to the state they hold.
#[test]
fn samples_with_batch_state_open_to_the_state_they_hold() {
    for name in ["cursor-v1-batch-multi", "cursor-v1-batch-single"] {
        let dir = support::samples::sample_dir(name);
        let topic = ManagedLedger::open(dir.path(), LedgerConfig::default()).unwrap();
        let c = earliest(&topic);
        let p = |e| Position::new(1, e);
        assert_eq!(c.mark_delete_position().unwrap(), Some(p(0)), "{name}");
        let read: Vec<_> = c
            .read_entries(10)
            .unwrap()
            .iter()
            .map(|e| {
                let acked = e.acked_batch_indexes.as_ref();
                (e.position, acked.map(|b| b.iter().collect::<Vec<u32>>()))
            })
            .collect();
        let want = vec![
            (p(1), Some(vec![0, 7])),
            (p(2), None),
            (p(4), Some(vec![13])),
            (p(5), None),
        ];
        assert_eq!(read, want, "{name}");
        topic.close().unwrap();
    }
}

/// The committed sample `tests/data/cursor-v1-batch-paged`: 20 single-entry ledgers of batches
/// of 4; the cursor `sub` flushed index 1 of entries 1..20 acked (19 partitions with partial
/// entries, past the 16 rows a marker holds inline, so its batch table went to batch pages),
/// then entry 0 and entry 5 acked whole and index 3 of entries 10..20; then the topic closed.
/// It opens to that state, and its last marker does list batch pages.
#[test]
fn the_sample_with_a_paged_batch_table_opens_to_the_state_it_holds() {
    use ackstore::internals::format::cursor::{
        EntryKind, decode_compact_marker, decode_marker, peek_kind,
    };
    use ackstore::internals::log::{EntryLog, LogConfig};

    let dir = support::samples::sample_dir("cursor-v1-batch-paged");
    let topic = ManagedLedger::open(dir.path(), LedgerConfig::default()).unwrap();
    let c = earliest(&topic);
    let p = |i: u64| Position::new(i + 1, 0);
    assert_eq!(c.mark_delete_position().unwrap(), Some(p(0)));
    let read: Vec<_> = c
        .read_entries(30)
        .unwrap()
        .iter()
        .map(|e| {
            let acked = e.acked_batch_indexes.as_ref();
            (e.position, acked.map(|b| b.iter().collect::<Vec<u32>>()))
        })
        .collect();
    let want: Vec<_> = (1..20)
        .filter(|&i| i != 5)
        .map(|i| (p(i), Some(if i >= 10 { vec![1, 3] } else { vec![1] })))
        .collect();
    assert_eq!(read, want);
    topic.close().unwrap();
    drop(topic);

    // The newest marker (of kind 2 as the sample holds it, or of kind 7 if this build's close
    // wrote one) lists batch pages.
    let storage = Arc::new(ackstore::FileStorage::open(dir.path(), false).unwrap());
    let log = EntryLog::open(storage, LogConfig::default()).unwrap();
    let cursor_ledger = *log.ledger_ids().last().unwrap();
    let last = (0..log.entry_count(cursor_ledger).unwrap())
        .map(|e| log.read(cursor_ledger, e).unwrap().payload)
        .filter(|payload| {
            matches!(
                peek_kind(payload).unwrap(),
                EntryKind::Marker | EntryKind::CompactMarker
            )
        })
        .last()
        .expect("a marker");
    let (batch_rows, batch_pages) = match peek_kind(&last).unwrap() {
        EntryKind::Marker => {
            let m = decode_marker(&last).unwrap();
            (m.batch.len(), m.batch_pages.len())
        }
        _ => {
            let m = decode_compact_marker(&last).unwrap();
            (m.batch.len(), m.batch_pages.len())
        }
    };
    assert!(
        batch_rows == 0 && batch_pages > 0,
        "the sample's batch table is paged"
    );
}

/// `seek_by_index` into the middle of a batch commits the messages before it as a partial
/// entry with the seek itself: after a power cut right after the seek, the reopened cursor
/// still delivers that entry with exactly those messages acknowledged.
#[test]
fn a_seek_by_index_into_a_batch_survives_a_power_cut_after_it() {
    let disk = MemStorage::new();
    let ledgers = config(10);
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), ledgers.clone()).unwrap();
    // Message indexes: entry 0 holds 0..=4, entry 1 holds 5..=11, entry 2 holds 12..=14.
    let e = append_batches(&topic, &[5, 7, 3]);
    topic.sync().unwrap();
    let c = earliest(&topic);
    c.ack_batch_index(e[2].0, 0, 3).unwrap();
    c.seek_by_index(8).unwrap();
    drop(c);
    std::mem::forget(topic);
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.durable_image()), ledgers).unwrap();
    let c = earliest(&topic);
    let mut want = Model::default();
    (0..5).for_each(|i| want.ack(e[0].0, i));
    (0..3).for_each(|i| want.ack(e[1].0, i));
    check(&c, &e, &want, "reopened after the seek");
    topic.close().unwrap();
}

//! A topic's ledgers in chunk records of 256 sealed ledgers pinned by the topic record (format
//! version 5), the newest ledgers inline: a topic of 256 ledgers or fewer keeps the version an
//! earlier build writes; a roll writes the tail and the pins, so its bytes stay flat as ledgers
//! accumulate; a trim that empties a chunk drops its pin and its record, one that cuts into a
//! chunk writes it again. A power cut at every step of a roll that fills a chunk, of a trim that
//! empties one, of a trim that cuts into one and of the upgrade of a record of an earlier
//! version keeps every entry a sync answered for, brings back no ledger a trim answered for,
//! keeps a cursor's flushed acks exactly, and leaves a topic that opens and `verify` finds
//! sound; damage to any ledger chunk record is refused by the open and reported by `verify`,
//! naming it. On a topic alone and on a store's topic.

use crate::support;

use std::sync::Arc;

use ackstore::internals::format::meta::{
    LEDGER_CHUNK_ENTRIES, LEDGER_CHUNK_PREFIX, TOPIC_LEDGERS_CHUNKED_VERSION,
};
use ackstore::{MemStorage, Position, Storage};
use support::crash::{copy_into, sound_without_leftovers};
use support::tap::{Tap, Written, assert_flat_from_1k_to_4k};
use support::topic::cut_change_everywhere;
use support::topic::{Host, Hosted, append_n, chunk_damage_is_refused, config, earliest};
use support::topic::{file_bytes, on_each_host, open_hosted, reopen_hosted, topic_storage};

const CHUNK: usize = LEDGER_CHUNK_ENTRIES;
/// One entry per data ledger: every append after the first starts a ledger.
const PER_LEDGER: u64 = 1;
/// The cursor whose flushed acks decide what a trim may drop.
const ACKER: &str = "acker";

/// What the topic lists of each of its ledgers: id and entries.
type Spans = Vec<(u64, u64)>;

fn spans_of(topic: &Hosted) -> Spans {
    topic.ledgers().iter().map(|s| (s.id, s.entries)).collect()
}

/// A closed topic of `host` on a fresh disk: `ledgers` entries appended and synced (one per
/// ledger), and [`ACKER`] acknowledging the first `acked` of them, flushed. Returns the disk
/// and the positions of the entries.
fn topic_of(host: Host, ledgers: u64, acked: usize) -> (MemStorage, Vec<Position>) {
    let disk = MemStorage::new();
    let topic = reopen_hosted(host, &disk, PER_LEDGER);
    let entries = append_n(&topic, ledgers);
    let acker = topic.open_cursor(ACKER, earliest()).expect("acker");
    for &p in &entries[..acked] {
        acker.ack(p).expect("ack");
    }
    acker.flush().expect("flush");
    drop(acker);
    topic.close().expect("close");
    (disk, entries)
}

/// Opens the topic `host` keeps on `storage` and checks that it lists `spans`, that every entry
/// of them reads back with its payload, and that the acker acknowledges exactly `acked`; then
/// closes it and checks that `verify` finds it sound with no ledger chunk record left over
/// (the open removed them).
fn reopened_holds(host: Host, storage: &Arc<dyn Storage>, spans: &Spans, acked: Option<Position>) {
    let topic = open_hosted(host, storage.clone(), &config(PER_LEDGER)).expect("open");
    assert_eq!(&spans_of(&topic), spans);
    for span in topic.ledgers() {
        if span.entries > 0 {
            let entry = topic.read(Position::new(span.id, 0)).expect("read");
            let payload = format!("m{}", span.first_index);
            assert_eq!(entry.payload, payload.as_bytes(), "ledger {}", span.id);
        }
    }
    let acker = topic.open_cursor(ACKER, earliest()).expect("acker");
    assert_eq!(acker.mark_delete_position().expect("mark"), acked);
    drop(acker);
    topic.close().expect("close");
    sound_without_leftovers(storage, LEDGER_CHUNK_PREFIX);
}

/// The version of the topic record `host` keeps on `disk`, its chunk count, its first chunk's
/// index and its tail's length.
fn shape(host: Host, disk: &MemStorage) -> (u16, usize, usize, usize) {
    let (version, record) = support::topic::record_of(host, disk);
    let ledgers = &record.ledgers;
    (
        version,
        ledgers.chunks().len(),
        ledgers.first(),
        ledgers.tail().len(),
    )
}

fn chunk_files(host: Host, disk: &MemStorage) -> Vec<String> {
    support::topic::chunk_files(host, disk, LEDGER_CHUNK_PREFIX)
}

#[test]
fn a_topic_keeps_the_earlier_version_up_to_a_chunk_and_writes_version_5_past_it() {
    on_each_host(|host| {
        let (disk, entries) = topic_of(host, CHUNK as u64, 3);
        let earlier = match host {
            Host::Alone => 2,
            Host::Store => 3,
        };
        assert_eq!(shape(host, &disk), (earlier, 0, 0, CHUNK));
        assert!(chunk_files(host, &disk).is_empty());
        let topic = reopen_hosted(host, &disk, PER_LEDGER);
        apply(&topic, Change::Append).expect("append");
        let spans = spans_of(&topic);
        topic.close().expect("close");
        // The 257th ledger: the 256 before it in a chunk record, the newest inline.
        assert_eq!(shape(host, &disk), (TOPIC_LEDGERS_CHUNKED_VERSION, 1, 0, 1));
        assert_eq!(chunk_files(host, &disk).len(), 1);
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        reopened_holds(host, &storage, &spans, Some(entries[2]));
    });
}

/// A roll costs about the same bytes at 4,000 ledgers as at 1,000: the tail and a pin per
/// chunk, and one chunk record per chunk's worth of rolls, not every ledger.
#[test]
fn bytes_written_per_roll_stay_flat_from_1k_to_4k_ledgers() {
    on_each_host(|host| {
        let disk = MemStorage::new();
        let written = Arc::new(Written::default());
        let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk.clone()), written.clone()));
        let topic = open_hosted(host, storage.clone(), &config(PER_LEDGER)).expect("open");
        // Spans of two chunks of rolls, from 1,024 ledgers and from 3,584.
        assert_flat_from_1k_to_4k(&written, 2 * CHUNK, "ledgers", |from, to| {
            append_n(&topic, (to - from) as u64);
        });
        assert_eq!(topic.ledgers().len(), 16 * CHUNK);
        topic.close().expect("close");
        let (_, chunks, _, tail) = shape(host, &disk);
        assert_eq!(chunks * CHUNK + tail, 16 * CHUNK);
        assert!(tail <= CHUNK);
    });
}

/// Trims against a model of the ledgers: one that empties the first chunk drops its pin (the
/// first index rises, the next chunk keeps its record), one that cuts into a chunk writes it
/// again; the ledgers listed after each are the model's, and every entry left reads back.
#[test]
fn trims_drop_the_chunks_they_empty_and_write_again_the_one_they_cut_into() {
    on_each_host(|host| {
        let (disk, entries) = topic_of(host, 3 * CHUNK as u64 + 7, 0);
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        let topic = reopen_hosted(host, &disk, PER_LEDGER);
        let mut model = spans_of(&topic);
        let acker = topic.open_cursor(ACKER, earliest()).expect("acker");
        let before = chunk_files(host, &disk);
        assert_eq!(before.len(), 3, "{before:?}");
        let mut acked = 0;
        // Into chunk 0, to its end, across chunk 1 into chunk 2.
        for (through, chunks, first) in [(100, 3, 0), (CHUNK, 2, 1), (2 * CHUNK + 30, 1, 2)] {
            for &p in &entries[acked..through] {
                acker.ack(p).expect("ack");
            }
            acked = through;
            let trimmed = topic.trim_consumed().expect("trim");
            let gone: Vec<u64> = model.iter().take(trimmed.len()).map(|s| s.0).collect();
            assert_eq!(trimmed, gone);
            model.drain(..trimmed.len());
            assert_eq!(spans_of(&topic), model);
            let (_, now, at, _) = shape(host, &disk);
            assert_eq!((now, at), (chunks, first), "trim through {through}");
            assert_eq!(chunk_files(host, &disk).len(), chunks);
            let first = topic.first_position().expect("a first position");
            assert_eq!(first, entries[through]);
            if through == CHUNK {
                // Chunk 0 gone whole: the others keep their records, never written again.
                assert_eq!(chunk_files(host, &disk), before[1..]);
            }
        }
        acker.flush().expect("flush");
        drop(acker);
        topic.close().expect("close");
        reopened_holds(host, &storage, &model, Some(entries[acked - 1]));
    });
}

/// What is changed with the power cut at every step.
#[derive(Debug, Clone, Copy)]
enum Change {
    /// An entry appended and synced, in a new ledger.
    Append,
    /// The ledgers the acker acknowledged trimmed.
    Trim,
}

/// The power-cut sweeps run the change again with the power cut at one cut point in this many
/// (every cut point's disk is checked from the recorded run).
const RERUN_EVERY: usize = 8;

/// Opens the topic copied from `template` (power on), then makes `change` with the power cut
/// at every step of it: every image the cut leaves opens listing the ledgers of before the
/// change or of after it (after it whenever the change answered `Ok`), every entry readable,
/// the acker at `acked` exactly, and `verify` finds it sound (the cuts of
/// [`cut_change_everywhere`]).
fn cut_at_every_step(host: Host, template: &MemStorage, acked: Option<Position>, change: Change) {
    let storage: Arc<dyn Storage> = Arc::new(template.clone());
    let before = spans_of(&open_hosted(host, storage, &config(PER_LEDGER)).expect("open"));
    let after = {
        let disk = MemStorage::new();
        copy_into(template, &disk);
        let topic = reopen_hosted(host, &disk, PER_LEDGER);
        apply(&topic, change).expect("the change without a cut");
        let spans = spans_of(&topic);
        topic.close().expect("close");
        spans
    };
    assert_ne!(before, after);
    let cut = (host, template, &config(PER_LEDGER));
    cut_change_everywhere(
        cut,
        RERUN_EVERY,
        |topic| apply(topic, change),
        |image, what, answered| {
            let topic = open_hosted(host, image.clone(), &config(PER_LEDGER))
                .unwrap_or_else(|e| panic!("{what}: open: {e}"));
            let spans = spans_of(&topic);
            topic.close().expect("close");
            if spans != after {
                assert!(
                    spans == before,
                    "{what} {change:?}: {} ledgers",
                    spans.len()
                );
                assert!(!answered, "{what} {change:?}: answered Ok, then undone");
            }
            reopened_holds(host, image, &spans, acked);
        },
    );
}

fn apply(topic: &Hosted, change: Change) -> ackstore::Result<()> {
    match change {
        Change::Append => {
            let i = topic.next_index();
            let meta = ackstore::AppendMeta {
                num_messages: 1,
                timestamp: 1000 + i,
            };
            topic.append_with(format!("m{i}").as_bytes(), meta)?;
            topic.sync()
        }
        Change::Trim => topic.trim_consumed().map(drop),
    }
}

#[test]
fn a_power_cut_at_every_step_of_a_roll_that_fills_a_chunk_keeps_every_synced_entry() {
    on_each_host(|host| {
        // 512 ledgers: one chunk and a tail of 256; the next ledger fills the second chunk.
        let (template, entries) = topic_of(host, 2 * CHUNK as u64, 3);
        let (_, chunks, _, tail) = shape(host, &template);
        assert_eq!((chunks, tail), (1, CHUNK));
        cut_at_every_step(host, &template, Some(entries[2]), Change::Append);
    });
}

#[test]
fn a_power_cut_at_every_step_of_a_trim_that_empties_a_chunk_keeps_every_unacked_entry() {
    on_each_host(|host| {
        let (template, entries) = topic_of(host, 2 * CHUNK as u64 + 5, CHUNK);
        cut_at_every_step(host, &template, Some(entries[CHUNK - 1]), Change::Trim);
    });
}

#[test]
fn a_power_cut_at_every_step_of_a_trim_that_cuts_into_a_chunk_keeps_every_unacked_entry() {
    on_each_host(|host| {
        let (template, entries) = topic_of(host, 2 * CHUNK as u64 + 5, 40);
        cut_at_every_step(host, &template, Some(entries[39]), Change::Trim);
    });
}

#[test]
fn a_power_cut_at_every_step_of_the_upgrade_of_an_earlier_version_keeps_every_entry() {
    on_each_host(|host| {
        let (template, entries) = topic_of(host, CHUNK as u64 + 40, 3);
        support::topic::as_earlier_version(host, &template);
        assert_eq!(shape(host, &template).1, 0);
        let durable: Arc<dyn Storage> = Arc::new(template.durable_image());
        let topic = open_hosted(host, durable.clone(), &config(PER_LEDGER)).expect("open");
        let spans = spans_of(&topic);
        topic.close().expect("close");
        assert_eq!(spans.len(), CHUNK + 40);
        reopened_holds(host, &durable, &spans, Some(entries[2]));
        // The next roll writes the full chunk, then the record in version 5.
        cut_at_every_step(host, &template, Some(entries[2]), Change::Append);
        let topic = reopen_hosted(host, &template, PER_LEDGER);
        apply(&topic, Change::Append).expect("append");
        topic.close().expect("close");
        assert_eq!(shape(host, &template).0, TOPIC_LEDGERS_CHUNKED_VERSION);
    });
}

/// Each ledger chunk record deleted, cut, zeroed or bit-flipped, replaced by its sibling or by
/// an older copy of itself: the open refuses the topic as damaged naming that chunk record,
/// and `verify` reports damage naming the same.
#[test]
fn damage_to_any_ledger_chunk_record_is_refused_by_the_open_and_reported_by_verify() {
    on_each_host(|host| {
        let (disk, entries) = topic_of(host, 2 * CHUNK as u64 + 3, 0);
        let older = chunk_files(host, &disk);
        assert_eq!(older.len(), 2, "{older:?}");
        let older_first = file_bytes(&topic_storage(host, &disk), &older[0]);
        {
            // A trim into the first chunk writes it again: its older copy is kept above.
            let topic = reopen_hosted(host, &disk, PER_LEDGER);
            let acker = topic.open_cursor(ACKER, earliest()).expect("acker");
            acker.ack(entries[0]).expect("ack");
            acker.flush().expect("flush");
            assert_eq!(topic.trim_consumed().expect("trim").len(), 1);
            drop(acker);
            topic.close().expect("close");
        }
        let chunks = chunk_files(host, &disk);
        assert_eq!(chunks.len(), 2, "{chunks:?}");
        assert!(chunks.contains(&older[1]) && !chunks.contains(&older[0]));
        let first = chunks.iter().find(|f| **f != older[1]).expect("chunk 0");
        chunk_damage_is_refused(host, &disk, (first, &older[1]), older_first, PER_LEDGER);
    });
}

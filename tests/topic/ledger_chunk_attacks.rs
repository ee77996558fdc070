//! Attacks on a topic's ledger list kept in chunk records of 256 sealed ledgers (topic record
//! version 5), through the public API, on a topic opened alone and on a store's topic: power
//! cuts at every step of the rolls that fill a chunk and start the next, of trims that cut
//! into a chunk, empty it, drop two at once or drop every chunk and the rolls right after
//! them, of the first writes of a topic whose record an earlier build wrote, and of the open
//! that removes what a trim left behind; a failed storage operation, and a failed sync, at
//! every step of a roll that fills a chunk and of trims that rewrite or drop one; a former
//! owner rolling and trimming at every step of a new owner's claim and writes; threads
//! appending, reading, seeking and trimming at once; damage to every file of the topic's
//! directory; the record bytes and files a long churn of rolls and trims leaves; and what a
//! trim leaves behind on real files.
//!
//! Every check compares with a model of what the workload was told: every entry whose sync
//! answered `Ok` and that no trim could have dropped reads back byte for byte by position, by
//! index and by time; no entry is served that was not appended, nor with other bytes; no
//! ledger a trim answered for comes back; the acker's mark-delete is never beyond its acks nor
//! behind its flushed ones.

use crate::support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ackstore::internals::format::meta::{LEDGER_CHUNK_ENTRIES, LEDGER_CHUNK_PREFIX};
use ackstore::{AppendMeta, Error, MemStorage, Position, Storage};
use support::crash::{
    Points, Seen, Shown, copy_into, cut_everywhere_recorded_after, sound_without_leftovers,
    unseen_images,
};
use support::takeover;
use support::tap::{Tap, Written};
use support::topic::{Host, Hosted, config, earliest, on_each_host, open_hosted, topic_storage};
use support::workload::{Rng, seed_from_env};

/// Sealed ledgers in a full chunk record.
const CHUNK: usize = LEDGER_CHUNK_ENTRIES;
/// Entries per data ledger.
const PER_LEDGER: u64 = 2;
/// The cursor whose acks decide what a trim may drop.
const ACKER: &str = "acker";
/// The power-cut sweeps run the workload again with the power cut at one cut point in this
/// many (every cut point's disk is checked from the recorded run).
const RERUN_EVERY: usize = 8;

/// The payload of the entry of message index `i`: its own bytes, of a length that varies.
fn payload(i: usize) -> Vec<u8> {
    format!("entry-{i:06}-{}", "x".repeat(i % 7)).into_bytes()
}

/// The timestamp of the entry of message index `i`: rising, one per entry.
fn timestamp(i: usize) -> u64 {
    1_000 + 10 * i as u64
}

/// The entries of the first `ledgers` data ledgers.
fn entries_of(ledgers: usize) -> usize {
    ledgers * PER_LEDGER as usize
}

/// What a workload was told.
#[derive(Debug, Default, Clone, PartialEq, Eq, Hash)]
struct Told {
    /// Per message index (one message per entry), the position its append answered; `None`
    /// while the append is under way or when it failed.
    positions: Vec<Option<Position>>,
    /// Entries `0..synced` are covered by a sync that answered `Ok`.
    synced: usize,
    /// The acker acknowledged entries `0..acked` (cumulatively; a call under way counts).
    acked: usize,
    /// A flush of the acker that answered `Ok` covered entries `0..flushed`.
    flushed: usize,
    /// The ledgers a trim answered `Ok` for.
    trimmed: BTreeSet<u64>,
}

/// One step of a workload on a topic.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Appends this many entries, each synced (a full ledger rolls to a new one).
    Append(usize),
    /// The acker acknowledges entries `0..n` cumulatively and flushes.
    AckThrough(usize),
    /// Deletes the ledgers the acker consumed.
    Trim,
}

/// Opens the topic `host` keeps on `storage`.
fn open(host: Host, storage: &Arc<dyn Storage>) -> ackstore::Result<Hosted> {
    open_hosted(host, storage.clone(), &config(PER_LEDGER))
}

/// Runs `step` on `topic`, keeping `told` current around every call that may reach the
/// storage.
fn run_step(topic: &Hosted, step: Step, told: &Shown<Told>) -> ackstore::Result<()> {
    match step {
        Step::Append(n) => {
            for _ in 0..n {
                let i = told.update(|t| {
                    t.positions.push(None);
                    t.positions.len() - 1
                });
                let meta = AppendMeta {
                    num_messages: 1,
                    timestamp: timestamp(i),
                };
                let p = topic.append_with(&payload(i), meta).inspect_err(|_| {
                    // A refused append takes no index: the next one gets it.
                    told.update(|t| t.positions.pop());
                })?;
                told.update(|t| t.positions[i] = Some(p));
                topic.sync()?;
                told.update(|t| t.synced = i + 1);
            }
        }
        Step::AckThrough(n) => {
            let acker = topic.open_cursor(ACKER, earliest())?;
            let p = told.read(|t| t.positions[n - 1]).expect("an acked entry");
            told.update(|t| t.acked = t.acked.max(n));
            acker.ack_cumulative(p)?;
            acker.flush()?;
            told.update(|t| t.flushed = t.flushed.max(n));
        }
        Step::Trim => {
            let gone = topic.trim_consumed()?;
            told.update(|t| t.trimmed.extend(gone));
        }
    }
    Ok(())
}

/// Runs `steps` on `topic`, keeping `told` current, then closes it; stops at the first error.
fn run_shown(topic: &Hosted, steps: &[Step], told: &Shown<Told>) -> ackstore::Result<()> {
    for &step in steps {
        run_step(topic, step, told)?;
    }
    Ok(())
}

/// A closed topic of `host` on a fresh disk holding `entries` entries (each synced; a ledger
/// rolled every [`PER_LEDGER`]), the acker acknowledging the first `acked`, flushed (at least
/// one).
fn prepared(host: Host, entries: usize, acked: usize) -> (MemStorage, Told) {
    let disk = MemStorage::new();
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let topic = open(host, &storage).expect("open");
    let told = Shown::new(Told::default());
    run_shown(
        &topic,
        &[Step::Append(entries), Step::AckThrough(acked)],
        &told,
    )
    .expect("prepare");
    topic.close().expect("close");
    (disk, told.get())
}

/// What [`examine`] found wrong with an open topic against what the workload was told.
#[derive(Debug, Default)]
struct Found {
    /// A use refused the topic with an error other than a missing entry (damage reported).
    refused: Vec<String>,
    /// Served what was never so: an entry not appended, other bytes, a trimmed ledger, an
    /// ack beyond the acker's.
    invented: Vec<String>,
    /// Lost what was told: a synced entry not trimmable missing or not found by index or
    /// time, a flushed ack behind.
    lost: Vec<String>,
}

impl Found {
    fn is_clean(&self) -> bool {
        self.refused.is_empty() && self.invented.is_empty() && self.lost.is_empty()
    }
}

/// Reads every entry the open `topic` lists and every one the workload was told of, seeks
/// each entry that must be there by index and by time, and reads the acker's mark-delete.
fn examine(topic: &Hosted, told: &Told) -> Found {
    let mut found = Found::default();
    let spans = topic.ledgers();
    for pair in spans.windows(2) {
        if pair[0].id >= pair[1].id {
            found.invented.push(format!(
                "ledgers listed out of order: {} then {}",
                pair[0].id, pair[1].id
            ));
        }
    }
    for span in &spans {
        if told.trimmed.contains(&span.id) {
            found
                .invented
                .push(format!("ledger {} trimmed, then listed", span.id));
        }
        for e in 0..span.entries {
            let at = Position::new(span.id, e);
            let index = usize::try_from(span.first_index + e).expect("fits");
            match topic.read(at) {
                Ok(entry) => {
                    if index >= told.positions.len() || entry.payload != payload(index) {
                        found.invented.push(format!(
                            "{at:?} (index {index}) serves bytes never appended"
                        ));
                    } else if told.positions[index].is_some_and(|p| p != at) {
                        found.invented.push(format!(
                            "index {index} at {at:?}, appended at {:?}",
                            told.positions[index]
                        ));
                    }
                }
                Err(Error::NoSuchEntry(_)) => {}
                Err(e) => found.refused.push(format!("read {at:?}: {e}")),
            }
        }
    }
    for (i, p) in told.positions.iter().enumerate() {
        let Some(p) = *p else { continue };
        let must = i >= told.acked && i < told.synced;
        match topic.read(p) {
            Ok(entry) if entry.payload != payload(i) => found
                .invented
                .push(format!("{p:?} (index {i}) serves other bytes")),
            Ok(_) if told.trimmed.contains(&p.ledger_id) => found
                .invented
                .push(format!("{p:?} (index {i}) read back after its trim")),
            Ok(_) => {}
            Err(Error::NoSuchEntry(_)) if must => found
                .lost
                .push(format!("synced entry {i} at {p:?} missing")),
            Err(Error::NoSuchEntry(_)) => {}
            Err(e) => found.refused.push(format!("read {p:?}: {e}")),
        }
        if must {
            for (how, answer) in [
                ("index", topic.find_by_index(i as u64)),
                ("time", topic.find_by_timestamp(timestamp(i))),
            ] {
                match answer {
                    Ok(Some(at)) if at == p => {}
                    Ok(other) => found
                        .lost
                        .push(format!("entry {i} at {p:?} found by {how} at {other:?}")),
                    Err(e) => found.refused.push(format!("find {i} by {how}: {e}")),
                }
            }
        }
    }
    seek_a_reader(topic, told, &mut found);
    if told.acked > 0 {
        match topic
            .open_cursor(ACKER, earliest())
            .and_then(|c| c.mark_delete_position())
        {
            Ok(mark) => {
                let most = told.positions[told.acked - 1];
                if mark.is_some_and(|m| most.is_some_and(|most| m > most)) {
                    found
                        .invented
                        .push(format!("mark-delete {mark:?} beyond the acks ({most:?})"));
                }
                let least = told.flushed.checked_sub(1).and_then(|f| told.positions[f]);
                if least.is_some_and(|least| mark.is_none_or(|m| m < least)) {
                    found
                        .lost
                        .push(format!("mark-delete {mark:?} behind the flushed {least:?}"));
                }
            }
            Err(e) => found.refused.push(format!("the acker: {e}")),
        }
    }
    found
}

/// Seeks a reader (a non-durable cursor) by index and by time to the first, a middle and the
/// last entry that must be there: each time it reads that entry next.
fn seek_a_reader(topic: &Hosted, told: &Told, found: &mut Found) {
    if told.acked >= told.synced {
        return;
    }
    let options = ackstore::NonDurableOptions {
        inclusive: false,
        name: "seeker".into(),
    };
    let reader = match topic.open_non_durable_cursor(ackstore::InitialPosition::Earliest, options) {
        Ok(reader) => reader,
        Err(e) => return found.refused.push(format!("a reader: {e}")),
    };
    for i in [told.acked, (told.acked + told.synced) / 2, told.synced - 1] {
        let p = told.positions[i].expect("a synced entry's position");
        for how in ["index", "time"] {
            let seek = match how {
                "index" => reader.seek_by_index(i as u64),
                _ => reader.seek_by_timestamp(timestamp(i) - 1),
            };
            match seek.and_then(|()| reader.read_entries(1)) {
                Ok(read) if read.len() == 1 && read[0].position == p => {
                    if read[0].payload != payload(i) {
                        found
                            .invented
                            .push(format!("seek to {i} by {how}: other bytes"));
                    }
                }
                Ok(read) => found.lost.push(format!(
                    "seek to entry {i} at {p:?} by {how} reads {:?}",
                    read.first().map(|e| e.position)
                )),
                Err(e) => found.refused.push(format!("seek to {i} by {how}: {e}")),
            }
        }
    }
}

/// Opens the topic `host` keeps on `storage` and checks it against `told` ([`examine`]), then
/// closes it and checks that `verify` finds it sound with no ledger chunk record left over.
fn holds_what_was_told(host: Host, storage: &Arc<dyn Storage>, told: &Told, what: &str) {
    let topic = open(host, storage).unwrap_or_else(|e| panic!("{what}: open: {e}"));
    let found = examine(&topic, told);
    assert!(found.is_clean(), "{what}: {found:?}");
    topic
        .close()
        .unwrap_or_else(|e| panic!("{what}: close: {e}"));
    sound_without_leftovers(storage, LEDGER_CHUNK_PREFIX);
}

/// A power cut at every storage step of the open of the topic on a copy of `template` (which
/// holds what `told` says), of `steps` run on it and of its close: every image a cut leaves
/// is sound by `verify` and opens holding what the workload was told when the power went off.
/// At one cut point in [`RERUN_EVERY`] the workload runs again with the power cut there.
fn cut_at_every_step(host: Host, (template, told): &(MemStorage, Told), steps: &[Step]) {
    let seed = seed_from_env("ACKSTORE_CRASH_SEED");
    let mut seen = Seen::new();
    let clean = cut_everywhere_recorded_after(
        Points::one_in(RERUN_EVERY, seed),
        |disk, storage| {
            copy_into(template, disk);
            storage
        },
        |storage, shown| {
            shown.update(|t| *t = told.clone());
            let outcome = open(host, &storage).and_then(|topic| {
                run_shown(&topic, steps, shown)?;
                topic.close()
            });
            (outcome, shown.get())
        },
        |disk, cut, told| {
            let what = format!("{host:?} {cut:?} (ACKSTORE_CRASH_SEED={seed})");
            for image in unseen_images(&mut seen, disk, cut, told) {
                holds_what_was_told(host, &image, told, &what);
            }
        },
    );
    clean.result.0.expect("the workload without a cut");
}

/// A power cut at every step of the rolls around the first chunk's edge: the 256th ledger
/// sealed (the list of 256 still inline), the 257th (the first chunk record written), the
/// 258th; every synced entry reads back by position, index and time.
#[test]
fn a_power_cut_at_every_step_of_the_rolls_that_seal_ledgers_256_257_and_258_keeps_every_synced_entry()
 {
    on_each_host(|host| {
        // 255 ledgers, the last holding one entry: seven more entries fill it and three more.
        let template = prepared(host, entries_of(CHUNK - 1) - 1, 1);
        cut_at_every_step(host, &template, &[Step::Append(7)]);
    });
}

/// A power cut at every step of the rolls that seal ledgers 512, 513 and 514 (the second
/// chunk filled, then the tail begun again), with acks flushed between.
#[test]
fn a_power_cut_at_every_step_of_the_rolls_that_seal_ledgers_512_513_and_514_keeps_every_synced_entry()
 {
    on_each_host(|host| {
        let template = prepared(host, entries_of(2 * CHUNK - 1), 3);
        cut_at_every_step(
            host,
            &template,
            &[
                Step::Append(PER_LEDGER as usize + 1),
                Step::AckThrough(5),
                Step::Append(2 * PER_LEDGER as usize),
            ],
        );
    });
}

/// A closed topic of `host` on a fresh disk of `ledgers` full ledgers, the first `trimmed`
/// trimmed, then the acker acknowledging the first `acked` ledgers, flushed (at least one entry
/// each time).
fn trimmed_then_acked(
    host: Host,
    ledgers: usize,
    trimmed: usize,
    acked: usize,
) -> (MemStorage, Told) {
    let (disk, told) = prepared(host, entries_of(ledgers), entries_of(trimmed).max(1));
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let topic = open(host, &storage).expect("open");
    let shown = Shown::new(told);
    let acked = Step::AckThrough(entries_of(acked).max(1));
    run_shown(&topic, &[Step::Trim, acked], &shown).expect("trim");
    topic.close().expect("close");
    (disk, shown.get())
}

/// A power cut at every step of a trim and of the roll after it, for a trim cutting 3 ledgers
/// from the first chunk, one emptying it of its last 3, one dropping the last 3 of the first
/// chunk and the first 3 of the second at once, and one dropping every ledger but the last
/// (the last chunk emptied, and the tail but one).
#[test]
fn a_power_cut_at_every_step_of_trims_into_over_and_across_chunks_and_the_rolls_after_keeps_every_unacked_entry()
 {
    on_each_host(|host| {
        let all = 2 * CHUNK + 10;
        let cases = [
            (0, 3),
            (CHUNK - 3, CHUNK),
            (CHUNK - 3, CHUNK + 3),
            (2 * CHUNK - 3, all),
        ];
        for (trimmed, acked) in cases {
            eprintln!("trimmed {trimmed}, acked {acked}");
            let template = trimmed_then_acked(host, all, trimmed, acked);
            cut_at_every_step(
                host,
                &template,
                &[Step::Trim, Step::Append(PER_LEDGER as usize)],
            );
        }
    });
}

/// A topic of 522 ledgers trimmed to its last (every chunk dropped), then rolled to 256
/// ledgers again: a power cut at every step of the rolls that fill a chunk again, of an ack
/// and a trim cutting into it, and of the roll after.
#[test]
fn a_power_cut_at_every_step_of_filling_a_chunk_again_after_a_trim_of_every_chunk_keeps_every_synced_entry()
 {
    on_each_host(|host| {
        let all = 2 * CHUNK + 10;
        let (disk, told) = trimmed_then_acked(host, all, all, all);
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        let topic = open(host, &storage).expect("open");
        let shown = Shown::new(told);
        run_shown(&topic, &[Step::Append(entries_of(CHUNK - 1))], &shown).expect("rolls");
        assert_eq!(topic.ledgers().len(), CHUNK);
        topic.close().expect("close");
        let template = (disk, shown.get());
        let per = PER_LEDGER as usize;
        cut_at_every_step(
            host,
            &template,
            &[
                Step::Append(2 * per + 1),
                Step::AckThrough(entries_of(all + 5)),
                Step::Trim,
                Step::Append(per),
            ],
        );
    });
}

/// Once armed, fails every removal of a data ledger or a ledger chunk record (named
/// `...ledger-...`, `...ledgers-...`): what a trim leaves behind when none of its deletions
/// after its commit happens.
#[derive(Default)]
struct FailRemovals(AtomicBool);

impl support::tap::Hook for FailRemovals {
    fn before(&self, op: support::tap::Op<'_>) -> ackstore::Result<()> {
        let ledgers = op.name().contains("ledger-") || op.name().contains("ledgers-");
        if self.0.load(Ordering::SeqCst) && op.kind() == "remove" && ledgers {
            let eio = std::io::Error::from_raw_os_error(5);
            return Err(ackstore::Error::io("injected", op.name().to_owned(), eio));
        }
        Ok(())
    }
}

/// A trim emptying the first chunk of its last 3 ledgers and cutting 3 from the tail, whose
/// every removal fails (the dropped chunk record and the trimmed ledgers left behind),
/// then a close: a power cut at every step of the next open, which removes them, and of a
/// roll after it keeps every entry not trimmed, brings back no trimmed ledger, and leaves
/// nothing over.
#[test]
fn a_power_cut_at_every_step_of_the_open_removing_what_a_trim_left_keeps_every_unacked_entry() {
    on_each_host(|host| {
        let (disk, told) = trimmed_then_acked(host, CHUNK + 40, CHUNK - 3, CHUNK + 3);
        let removals = Arc::new(FailRemovals::default());
        let storage: Arc<dyn Storage> =
            Arc::new(Tap::new(Arc::new(disk.clone()), removals.clone()));
        let topic = open(host, &storage).expect("open");
        removals.0.store(true, Ordering::SeqCst);
        let shown = Shown::new(told);
        // It fails at its first removal (after its commit), or answers `Ok` leaving them.
        drop(run_step(&topic, Step::Trim, &shown));
        drop(topic.close());
        let told = shown.get();
        let template = disk.durable_image();
        let left: Arc<dyn Storage> = Arc::new(template.clone());
        let report = ackstore::check::verify(&left).expect("verify");
        assert!(report.is_sound(), "{host:?}: {report}");
        assert!(!report.unused.is_empty(), "{host:?}: the trim left nothing");
        cut_at_every_step(
            host,
            &(template, told),
            &[Step::Append(PER_LEDGER as usize)],
        );
    });
}

/// On real files (a topic alone in a temporary directory): rolls past
/// two chunks and a trim into the first, then a trim emptying it whose removals all fail (its
/// chunk record and the trimmed ledgers left behind); the reopen (finding them by listing the
/// directory) removes them and holds the model, `verify` finds nothing left over, and so again
/// after a roll and a trim across the next chunk.
#[test]
fn on_real_files_what_a_trim_leaves_behind_is_removed_by_the_reopen_which_holds_the_model() {
    // A store on storage without directories keeps its topics' files flat, and the test's
    // tap has none: a store reopened on the plain directory would look for the directory.
    let host = Host::Alone;
    {
        let dir = support::fds::files_dir();
        let files: Arc<dyn Storage> =
            Arc::new(ackstore::FileStorage::open(dir.path(), true).expect("storage"));
        let removals = Arc::new(FailRemovals::default());
        let tapped: Arc<dyn Storage> = Arc::new(Tap::new(files.clone(), removals.clone()));
        let topic = open(host, &tapped).expect("open");
        let shown = Shown::new(Told::default());
        let steps = [
            Step::Append(entries_of(2 * CHUNK + 10)),
            Step::AckThrough(entries_of(100)),
            Step::Trim,
            Step::AckThrough(entries_of(CHUNK + 5)),
        ];
        run_shown(&topic, &steps, &shown).expect("rolls and a trim");
        removals.0.store(true, Ordering::SeqCst);
        drop(run_step(&topic, Step::Trim, &shown));
        drop(topic.close());
        let report = ackstore::check::verify(&files).expect("verify");
        assert!(report.is_sound(), "{host:?}: {report}");
        assert!(!report.unused.is_empty(), "{host:?}: the trim left nothing");
        let what = format!("{host:?} on real files");
        holds_what_was_told(host, &files, &shown.get(), &what);
        let topic = open(host, &files).expect("reopen");
        let steps = [
            Step::Append(PER_LEDGER as usize),
            Step::AckThrough(entries_of(2 * CHUNK + 3)),
            Step::Trim,
        ];
        run_shown(&topic, &steps, &shown).expect("a roll and a trim");
        topic.close().expect("close");
        holds_what_was_told(host, &files, &shown.get(), &what);
    }
}

/// The topic record of the closed topic on `disk` rewritten as an earlier build wrote it
/// (every ledger inline), checked to hold what `told` says.
fn as_earlier_version(host: Host, (disk, told): &(MemStorage, Told)) {
    support::topic::as_earlier_version(host, disk);
    let storage: Arc<dyn Storage> = Arc::new(disk.durable_image());
    holds_what_was_told(host, &storage, told, "the earlier version");
}

/// A power cut at every step of the first roll, trim and roll of a topic of 300 ledgers whose
/// record an earlier build wrote (every ledger inline), and of a first trim and roll.
#[test]
fn a_power_cut_at_every_step_of_the_first_writes_of_a_300_ledger_topic_of_the_earlier_version_keeps_every_entry()
 {
    on_each_host(|host| {
        let template = prepared(host, entries_of(300), 1);
        as_earlier_version(host, &template);
        let (roll, trim) = (Step::Append(PER_LEDGER as usize), Step::Trim);
        cut_at_every_step(
            host,
            &template,
            &[roll, Step::AckThrough(entries_of(30)), trim, roll],
        );
        // The first write a trim: into the first 256 ledgers.
        let template = prepared(host, entries_of(300), entries_of(30));
        as_earlier_version(host, &template);
        cut_at_every_step(host, &template, &[trim, roll]);
    });
}

/// `step` on a copy of `template` whose `k`-th storage operation fails, for every `k`, then
/// the steps `after` from the same handle
/// ([`support::topic::later_steps_after_a_failed_operation`]): the reopened topic holds what
/// the workload was told.
fn later_steps_after_a_failed_operation_of(
    host: Host,
    (template, told): &(MemStorage, Told),
    step: Step,
    after: &[Step],
) {
    support::topic::later_steps_after_a_failed_operation(
        (host, template, &config(PER_LEDGER)),
        told,
        (&step, after),
        |topic, &step, told| run_step(topic, step, told),
        |image, told, what| holds_what_was_told(host, image, told, what),
    );
}

/// What every failed-operation test runs from the same handle after the failed step: a roll,
/// a trim through the first `again` ledgers (into the chunk the failed step wrote, or the one
/// after), one through the first `CHUNK + 20` (past the first chunk), and `rolls` rolls.
fn later_steps(again: usize, rolls: usize) -> Vec<Step> {
    vec![
        Step::Append(PER_LEDGER as usize + 1),
        Step::AckThrough(entries_of(again)),
        Step::Trim,
        Step::AckThrough(entries_of(CHUNK + 20)),
        Step::Trim,
        Step::Append(entries_of(rolls)),
    ]
}

/// A failed storage operation at every step of the roll that fills the second chunk (its
/// chunk record written, then the record pinning it): later rolls and trims from the same
/// handle succeed, up to a chunk filled again, a leftover chunk record blocking none of them.
#[test]
fn a_failed_operation_of_a_roll_that_fills_a_chunk_leaves_later_rolls_and_trims_working() {
    on_each_host(|host| {
        let template = prepared(host, entries_of(2 * CHUNK), 1);
        let later = later_steps(3, CHUNK);
        later_steps_after_a_failed_operation_of(host, &template, Step::Append(1), &later);
    });
}

/// A failed storage operation at every step of a trim cutting 5 ledgers from the first chunk
/// (the chunk written again) and of one emptying it of its last 6 (its pin and record
/// dropped): later rolls and trims from the same handle succeed, a trim writing that chunk
/// (or the next) again among them.
#[test]
fn a_failed_operation_of_trims_that_rewrite_or_drop_a_chunk_leaves_later_rolls_and_trims_working() {
    on_each_host(|host| {
        for (trimmed, acked) in [(0, 5), (CHUNK - 6, CHUNK)] {
            let template = trimmed_then_acked(host, 2 * CHUNK + 30, trimmed, acked);
            let later = later_steps(acked + 2, 3);
            later_steps_after_a_failed_operation_of(host, &template, Step::Trim, &later);
        }
    });
}

/// `step` on a copy of `template` with its `n`-th file sync or directory sync failing (the
/// disk forgetting what that sync was to cover, as Linux does), for every sync it makes, then
/// the steps `after` from the same handle and the close: no call answers `Fenced`, and what
/// stays on the disk (its durable image) is sound by `verify` and opens holding every `Ok`
/// the workload was told, whatever answered an error. Returns every `Fenced` answer, each
/// described.
fn a_failed_sync_at_every_sync_of(
    host: Host,
    (template, told): &(MemStorage, Told),
    step: Step,
    after: &[Step],
) -> Vec<String> {
    use support::hooked::{Hooked, for_each_sync_fault};
    let mut fired = 0;
    let mut fenced = Vec::new();
    for_each_sync_fault(|fault| {
        let disk = MemStorage::new();
        copy_into(template, &disk);
        let hooked = Hooked::new(disk.clone());
        let storage: Arc<dyn Storage> = Arc::new(hooked.clone());
        let topic = open(host, &storage).expect("open");
        let shown = Shown::new(told.clone());
        hooked.arm(fault);
        let first = run_step(&topic, step, &shown);
        if !hooked.fired(fault) {
            first.expect("the step without a fault");
            drop(topic);
            return false;
        }
        fired += 1;
        let failed = hooked.hooks.failed_syncs.lock().expect("hooks").clone();
        let what = format!("{host:?} {step:?}, {fault:?} failed ({failed:?})");
        if matches!(first, Err(Error::Fenced { .. })) {
            fenced.push(format!("{what}: the step returned {first:?}"));
        }
        for &later in after {
            let outcome = run_step(&topic, later, &shown);
            if matches!(outcome, Err(Error::Fenced { .. })) {
                fenced.push(format!(
                    "{what}: the step answered {first:?}, then {later:?} {outcome:?}"
                ));
            }
            if outcome.is_err() {
                break;
            }
        }
        drop(topic.close());
        let image: Arc<dyn Storage> = Arc::new(disk.durable_image());
        let report = ackstore::check::verify(&image).expect("verify");
        assert!(report.is_sound(), "{what}: {report}");
        holds_what_was_told(host, &image, &shown.get(), &what);
        true
    });
    assert!(fired > 0, "{host:?} {step:?}: no sync failed");
    fenced
}

/// A failed file or directory sync at every sync of the roll that fills the second chunk,
/// of a trim cutting into the first chunk and of one emptying it, then rolls and trims from
/// the same handle: returns every `Fenced` answer (the durability of every `Ok` checked).
fn failed_syncs_of_chunk_writes(host: Host) -> Vec<String> {
    let after = later_steps(CHUNK + 25, 3);
    let template = prepared(host, entries_of(2 * CHUNK), 1);
    let mut fenced = a_failed_sync_at_every_sync_of(host, &template, Step::Append(1), &after);
    for (trimmed, acked) in [(0, 5), (CHUNK - 6, CHUNK)] {
        let template = trimmed_then_acked(host, 2 * CHUNK + 30, trimmed, acked);
        fenced.extend(a_failed_sync_at_every_sync_of(
            host,
            &template,
            Step::Trim,
            &after,
        ));
    }
    fenced
}

/// A failed file or directory sync at every sync of the roll that fills the second chunk, of
/// a trim cutting into the first chunk and of one emptying it: every `Ok` after it, from the
/// same handle, is kept on the disk.
#[test]
fn a_failed_sync_at_every_sync_of_a_roll_filling_a_chunk_or_a_trim_keeps_every_ok_after_it() {
    on_each_host(|host| drop(failed_syncs_of_chunk_writes(host)));
}

/// The same failed syncs, and those of a roll of a topic of 10 ledgers (no chunk): no later
/// call from the handle answers `Fenced`, as no other owner exists (an error of the disk is
/// an I/O error, not a loss of ownership).
#[test]
fn a_failed_sync_of_a_roll_or_a_trim_fences_no_later_call_of_the_same_owner() {
    let mut fenced = Vec::new();
    on_each_host(|host| {
        fenced.extend(failed_syncs_of_chunk_writes(host));
        let small = prepared(host, entries_of(10), 1);
        let rolls = [Step::Append(3), Step::AckThrough(5), Step::Trim];
        fenced.extend(a_failed_sync_at_every_sync_of(
            host,
            &small,
            Step::Append(1),
            &rolls,
        ));
    });
    assert!(fenced.is_empty(), "{}", fenced.join("\n"));
}

/// A former owner (of the store, or of a topic alone) appends three entries, each synced
/// (rolls), and trims at every storage operation of a new owner's claim, three appends, ack
/// and trim on a topic of 300 ledgers (no chunk filled) and of 511 (the third append of
/// either owner fills the second chunk): the new owner's calls succeed (a topic alone's claim
/// once it is tried again), the former's are kept when they answered `Ok` or refused as
/// fenced, no two ledgers share an id, every listed ledger reads, and a reopen lists the same.
#[test]
fn a_former_owner_rolling_and_trimming_at_every_step_of_a_new_owners_writes_keeps_every_ok_and_one_ledger_per_id()
 {
    on_each_host(|host| {
        former_owner_at_every_step(host, 300);
        former_owner_at_every_step(host, 2 * CHUNK - 1);
    });
}

/// The former and new owners of the test above on a topic of `ledgers` full ledgers.
fn former_owner_at_every_step(host: Host, ledgers: usize) {
    {
        let (template, base) = prepared(host, entries_of(ledgers), entries_of(10));
        let base_positions: Vec<Position> = base.positions.iter().map(|p| p.expect("a")).collect();
        let new_owner = |storage: Arc<dyn Storage>| {
            let topic = match open(host, &storage) {
                Err(Error::Fenced { .. }) if host == Host::Alone => open(host, &storage),
                claimed => claimed,
            };
            let topic = topic.expect("the new owner claims the topic");
            let mut made = Vec::new();
            let mut outcomes = Vec::new();
            for k in 0..3 {
                let body = format!("new-{k}");
                let p = topic.append(body.as_bytes());
                outcomes.push(p.as_ref().map(drop).map_err(ToString::to_string));
                outcomes.push(topic.sync().map_err(|e| e.to_string()));
                if let Ok(p) = p {
                    made.push((p, body.into_bytes()));
                }
            }
            let acked = topic.open_cursor(ACKER, earliest()).and_then(|c| {
                c.ack_cumulative(base_positions[entries_of(40) - 1])?;
                c.flush()
            });
            outcomes.push(acked.map_err(|e| e.to_string()));
            let trimmed = topic.trim_consumed();
            outcomes.push(trimmed.as_ref().map(drop).map_err(ToString::to_string));
            (topic, made, outcomes, trimmed.unwrap_or_default())
        };
        let steps = takeover::operations_on_a_copy(&template, new_owner);
        let mut kept = 0;
        let mut refused = 0;
        for n in (1..=steps).step_by(if cfg!(debug_assertions) { 7 } else { 1 }) {
            let what = format!("{host:?} step {n} of {steps}");
            let (disk, former, (new, made, outcomes, new_trimmed), ((appended, synced), trimmed)) =
                support::topic::former_at_step_of_new_owner(
                    (host, &template, &config(PER_LEDGER)),
                    n,
                    |topic| {
                        let mut synced = Vec::new();
                        let mut appended = Ok(());
                        for k in 0..3 {
                            let body = format!("former-{k}");
                            match topic.append(body.as_bytes()).and_then(|p| {
                                topic.sync()?;
                                Ok(p)
                            }) {
                                Ok(p) => synced.push((p, body.into_bytes())),
                                Err(e) => {
                                    appended = Err(e);
                                    break;
                                }
                            }
                        }
                        ((appended, synced), topic.trim_consumed())
                    },
                    new_owner,
                );
            for o in &outcomes {
                assert!(o.is_ok(), "{what}: the new owner's call: {o:?}");
            }
            assert!(
                matches!(appended, Ok(_) | Err(Error::Fenced { .. })),
                "{what}: the former's roll: {appended:?}"
            );
            assert!(
                matches!(trimmed, Ok(_) | Err(Error::Fenced { .. })),
                "{what}: the former's trim: {trimmed:?}"
            );
            if !synced.is_empty() || trimmed.is_ok() {
                kept += 1;
            } else {
                refused += 1;
            }
            new.close().expect("close");
            drop(former);
            let image: Arc<dyn Storage> = Arc::new(disk.durable_image());
            let report = ackstore::check::verify(&image).expect("verify");
            assert!(report.is_sound(), "{what}: {report}");
            let reopened = open(host, &image).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
            let spans = reopened.ledgers();
            let ids: Vec<u64> = spans.iter().map(|s| s.id).collect();
            assert!(
                ids.windows(2).all(|w| w[0] < w[1]),
                "{what}: ledger ids listed {ids:?}"
            );
            for span in &spans {
                for e in [0, span.entries.saturating_sub(1)] {
                    if span.entries > 0 {
                        let read = reopened.read(Position::new(span.id, e));
                        assert!(read.is_ok(), "{what}: listed ledger {}: {read:?}", span.id);
                    }
                }
            }
            let mut gone: BTreeSet<u64> = new_trimmed.into_iter().collect();
            if let Ok(t) = &trimmed {
                gone.extend(t);
            }
            for id in &gone {
                assert!(
                    !ids.contains(id),
                    "{what}: ledger {id} trimmed, then listed"
                );
            }
            let mut expect = made.clone();
            expect.extend(synced);
            for (i, &p) in base_positions.iter().enumerate().skip(entries_of(40)) {
                expect.push((p, payload(i)));
            }
            for (p, body) in expect {
                let read = reopened.read(p);
                assert!(
                    read.as_ref().is_ok_and(|e| e.payload == body),
                    "{what}: {p:?} ({}): {read:?}",
                    String::from_utf8_lossy(&body)
                );
            }
            reopened.close().expect("close");
        }
        assert!(
            kept > 0 && refused > 0,
            "{host:?}: {kept} steps kept a former's call, {refused} refused both"
        );
    }
}

/// An appender rolling a ledger every entry, two readers reading, seeking by index and by
/// time, and an acker acknowledging, flushing and trimming behind itself, all at once on one
/// handle against a model: every read answers the model's bytes, every entry past the acks
/// is found where it was appended, and the reopened topic holds the model.
#[test]
fn threads_appending_with_a_roll_every_entry_reading_seeking_and_trimming_match_the_model() {
    on_each_host(|host| {
        let disk = MemStorage::new();
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        let topic = Arc::new(open_hosted(host, storage.clone(), &config(1)).expect("open"));
        let total = 1_500;
        // The positions of the synced entries, by index, and the entries acked (a prefix).
        let synced: Arc<Mutex<Vec<Position>>> = Arc::default();
        let acked = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let trims = Arc::new(AtomicU64::new(0));
        let mut failures: Vec<String> = Vec::new();
        // Each reader's own cursor holds back the trims from what it checks: opened before any
        // entry is appended or trimmed, so it holds back every entry.
        let held: Vec<_> = (0..2u64)
            .map(|r| {
                topic
                    .open_cursor(&format!("reader-{r}"), earliest())
                    .expect("a reader's cursor")
            })
            .collect();
        std::thread::scope(|s| {
            let appender = s.spawn(|| {
                for i in 0..total {
                    let meta = AppendMeta {
                        num_messages: 1,
                        timestamp: timestamp(i),
                    };
                    let p = topic.append_with(&payload(i), meta).expect("append");
                    topic.sync().expect("sync");
                    synced.lock().expect("lock").push(p);
                }
                done.store(true, Ordering::SeqCst);
            });
            let acker = s.spawn(|| {
                let cursor = topic.open_cursor(ACKER, earliest()).expect("acker");
                let mut rng = Rng::new(0x01ed_9e75);
                loop {
                    let finished = done.load(Ordering::SeqCst);
                    let known = synced.lock().expect("lock").clone();
                    let from = usize::try_from(acked.load(Ordering::SeqCst)).expect("fits");
                    // Stays behind the appender by a few entries, so readers race the trims.
                    let to = known.len().saturating_sub(3 + rng.index(20)).max(from);
                    if to > from {
                        cursor.ack_cumulative(known[to - 1]).expect("ack");
                        cursor.flush().expect("flush");
                        acked.store(to as u64, Ordering::SeqCst);
                        let gone = topic.trim_consumed().expect("trim");
                        trims.fetch_add(gone.len() as u64, Ordering::SeqCst);
                    }
                    if finished {
                        break;
                    }
                    std::thread::yield_now();
                }
            });
            let readers: Vec<_> = (0u64..)
                .zip(held)
                .map(|(r, held)| {
                    let (topic, synced, done) = (&topic, &synced, &done);
                    s.spawn(move || {
                        let mut wrong = Vec::new();
                        let mut rng = Rng::new(0x5eed + r);
                        // Entries `0..own` are acknowledged by this reader's cursor.
                        let (mut own, mut checks) = (0, 0);
                        while !done.load(Ordering::SeqCst) || checks < 200 {
                            let known = synced.lock().expect("lock").clone();
                            if known.len() <= own {
                                std::thread::yield_now();
                                continue;
                            }
                            // Past this reader's acks: no trim drops it.
                            let i = own + rng.index(known.len() - own);
                            let p = known[i];
                            match topic.read(p) {
                                Ok(e) if e.payload == payload(i) => {}
                                other => wrong.push(format!("read {i} at {p:?}: {other:?}")),
                            }
                            match topic.find_by_index(i as u64) {
                                Ok(Some(at)) if at == p => {}
                                other => wrong.push(format!("find index {i}: {other:?}")),
                            }
                            match topic.find_by_timestamp(timestamp(i)) {
                                Ok(Some(at)) if at == p => {}
                                other => wrong.push(format!("find time of {i}: {other:?}")),
                            }
                            // Any entry at all: trimmed, or its own bytes.
                            let j = rng.index(known.len());
                            match topic.read(known[j]) {
                                Ok(e) if e.payload != payload(j) => {
                                    wrong.push(format!("read {j}: other bytes"));
                                }
                                Ok(_) | Err(Error::NoSuchEntry(_)) => {}
                                Err(e) => wrong.push(format!("read {j}: {e}")),
                            }
                            checks += 1;
                            // Acknowledges a part of what it checked (never entry `i`).
                            let to = own + rng.index(i - own + 1);
                            if to > own {
                                held.ack_cumulative(known[to - 1]).expect("reader ack");
                                own = to;
                            }
                        }
                        wrong
                    })
                })
                .collect();
            appender.join().expect("appender");
            acker.join().expect("acker");
            for r in readers {
                failures.extend(r.join().expect("reader"));
            }
        });
        assert!(failures.is_empty(), "{host:?}: {}", failures.join("\n"));
        assert!(
            trims.load(Ordering::SeqCst) > 2 * CHUNK as u64,
            "{host:?}: too few trims"
        );
        let positions = synced.lock().expect("lock").clone();
        let acked = usize::try_from(acked.load(Ordering::SeqCst)).expect("fits");
        let listed: Vec<u64> = topic.ledgers().iter().map(|s| s.id).collect();
        let Ok(topic) = Arc::try_unwrap(topic) else {
            panic!("the topic is still shared")
        };
        topic.close().expect("close");
        let told = Told {
            positions: positions.into_iter().map(Some).collect(),
            synced: total,
            acked,
            flushed: acked,
            trimmed: BTreeSet::new(),
        };
        let reopened = open_hosted(host, storage.clone(), &config(1)).expect("reopen");
        let relisted: Vec<u64> = reopened.ledgers().iter().map(|s| s.id).collect();
        assert_eq!(relisted, listed, "{host:?}: the reopened ledgers");
        let found = examine(&reopened, &told);
        assert!(found.is_clean(), "{host:?}: {found:?}");
        reopened.close().expect("close");
        sound_without_leftovers(&storage, LEDGER_CHUNK_PREFIX);
    });
}

/// The name a record file belongs to with its version and chunk index stripped: the topic
/// record's versions share one, as do the versions of one chunk.
fn family(file: &str) -> String {
    let record = file.split_once('.').map_or(file, |(r, _)| r);
    record
        .trim_end_matches(|c: char| c.is_ascii_digit())
        .to_owned()
}

/// Every file of the topic's directory on `disk`, with its bytes.
fn topic_files(host: Host, disk: &MemStorage) -> Vec<(String, Vec<u8>)> {
    let files = topic_storage(host, disk);
    let mut names = files.list().expect("list");
    names.sort();
    names
        .into_iter()
        .map(|f| {
            let bytes = support::topic::file_bytes(&files, &f);
            (f, bytes)
        })
        .collect()
}

/// Damage to every file of the directory of a topic of 517 ledgers (two chunks, the first
/// written again by a trim): each record file (the topic record and every chunk record)
/// deleted, truncated, zeroed, bit-flipped, replaced by its older copy or by a sibling's bytes;
/// every other file (ledgers, cursor ledgers) given one of those damages in turn. `verify` and
/// the topic agree: damage is reported exactly when the open, a read, a seek or the acker
/// refuses, or a damaged ledger is listed; no entry is served that was not appended, and no
/// synced entry nor flushed ack is lost without a refusal.
#[test]
fn damage_to_every_file_of_the_topics_directory_is_reported_by_verify_exactly_when_the_topic_refuses()
 {
    on_each_host(|host| {
        let (disk, told) = prepared(host, entries_of(2 * CHUNK + 5), 1);
        let older = topic_files(host, &disk);
        let told = {
            let storage: Arc<dyn Storage> = Arc::new(disk.clone());
            let topic = open(host, &storage).expect("open");
            let shown = Shown::new(told);
            run_shown(
                &topic,
                &[Step::AckThrough(entries_of(3)), Step::Trim, Step::Append(1)],
                &shown,
            )
            .expect("a trim into the first chunk");
            topic.close().expect("close");
            shown.get()
        };
        let current = topic_files(host, &disk);
        let mut targets: Vec<(String, String, Option<Vec<u8>>)> = Vec::new();
        for (k, (file, whole)) in current.iter().enumerate() {
            let damages = support::mutate::damages(whole);
            if !file.starts_with("topic") {
                let (what, damage) = damages[k % damages.len()].clone();
                targets.push((what, file.clone(), damage));
                continue;
            }
            targets.extend(damages.into_iter().map(|(w, d)| (w, file.clone(), d)));
            for (old, bytes) in &older {
                if family(old) == family(file) && bytes != whole {
                    targets.push((format!("older {old}"), file.clone(), Some(bytes.clone())));
                }
            }
            for (sibling, bytes) in &current {
                if sibling != file && sibling.starts_with("topic") && bytes != whole {
                    targets.push((
                        format!("sibling {sibling}"),
                        file.clone(),
                        Some(bytes.clone()),
                    ));
                }
            }
        }
        let mut missed = Vec::new();
        for (what, file, damage) in targets {
            let image = disk.durable_image();
            let files = topic_storage(host, &image);
            files.remove(&file).expect("remove");
            if let Some(bytes) = &damage {
                let f = files.create(&file).expect("create");
                f.write_all_at(bytes, 0).expect("write");
                f.sync_data().expect("sync");
            }
            files.sync_dir().expect("sync dir");
            let image: Arc<dyn Storage> = Arc::new(image);
            let report = ackstore::check::verify(&image);
            let reported = report.as_ref().map_or(true, |r| !r.is_sound());
            let problem = match open(host, &image) {
                Err(e) if !reported => Some(format!("open refused ({e}), verify found it sound")),
                Err(_) => None,
                Ok(topic) => {
                    let found = examine(&topic, &told);
                    let damaged = topic.damaged_ledgers().map_or(1, |d| d.len());
                    drop(topic);
                    let refused = !found.refused.is_empty() || damaged > 0;
                    if !found.invented.is_empty() {
                        Some(format!("served what was never so: {:?}", found.invented))
                    } else if !refused && !found.lost.is_empty() {
                        Some(format!("lost without a refusal: {:?}", found.lost))
                    } else if refused != reported {
                        Some(format!(
                            "verify reported {reported}, the topic refused {:?} ({damaged} damaged)",
                            found.refused
                        ))
                    } else {
                        None
                    }
                }
            };
            if let Some(problem) = problem {
                let report = report.map_or_else(|e| e.to_string(), |r| r.to_string());
                missed.push(format!("{host:?} {what} {file}: {problem}\n{report}"));
            }
        }
        assert!(missed.is_empty(), "{}", missed.join("\n"));
    });
}

/// Whether storage name `name` is a file of the topic record or of its chunk records (named
/// `topic...`; a store's topic files are `t{id}/...` or `t{id}-...`).
fn is_record_file(name: &str) -> bool {
    let own = name.rsplit('/').next().unwrap_or(name);
    let own = own
        .strip_prefix('t')
        .and_then(|rest| {
            rest.trim_start_matches(|c: char| c.is_ascii_digit())
                .strip_prefix('-')
        })
        .unwrap_or(own);
    own.starts_with("topic")
}

/// 5,000 rolls (one entry per ledger) with the acker trimming behind them to keep about 600
/// ledgers: the record bytes a roll writes do not grow (the last thousand rolls write at most
/// 10% more than the first thousand, none more than the dearest of those), the topic's files
/// do not pile up, and the reopened topic holds the model.
#[test]
fn churn_of_5000_rolls_trimmed_to_600_ledgers_keeps_record_bytes_and_files_bounded_and_reopens_to_the_model()
 {
    on_each_host(|host| {
        let disk = MemStorage::new();
        let written = Arc::new(Written(AtomicU64::new(0), Some(is_record_file)));
        let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk.clone()), written.clone()));
        let topic = open_hosted(host, storage.clone(), &config(1)).expect("open");
        let shown = Shown::new(Told::default());
        run_shown(&topic, &[Step::Append(600), Step::AckThrough(1)], &shown).expect("prepare");
        let files = topic_storage(host, &disk);
        let mut rng = Rng::new(0xc4_0e);
        let (mut per_roll, mut extra_files) = (Vec::new(), Vec::new());
        for _ in 0..5_000 {
            let at = written.0.load(Ordering::SeqCst);
            run_step(&topic, Step::Append(1), &shown).expect("roll");
            let told = shown.get();
            // Keeps 590 to 610 ledgers: a trim every few rolls, of a few ledgers.
            let keep = 590 + rng.index(21);
            if told.synced > keep + told.acked + 5 {
                run_step(&topic, Step::AckThrough(told.synced - keep), &shown).expect("ack");
                run_step(&topic, Step::Trim, &shown).expect("trim");
            }
            per_roll.push(written.0.load(Ordering::SeqCst) - at);
            if per_roll.len() % 10 == 1 {
                let ledgers = topic.ledgers().len();
                extra_files.push(files.list().expect("list").len().saturating_sub(ledgers));
            }
        }
        let (early, late) = (&per_roll[..1_000], &per_roll[4_000..]);
        let (sum_early, sum_late) = (early.iter().sum::<u64>(), late.iter().sum::<u64>());
        let max_early = *early.iter().max().expect("some");
        let max_late = *late.iter().max().expect("some");
        assert!(sum_early > 0);
        assert!(
            sum_late * 10 <= sum_early * 11,
            "{host:?}: record bytes of 1,000 rolls: {sum_early} first, {sum_late} last"
        );
        assert!(
            max_late <= max_early,
            "{host:?}: the dearest roll: {max_early} bytes first, {max_late} last"
        );
        let (first, most) = (extra_files[0], *extra_files.iter().max().expect("some"));
        assert!(
            most <= first + 4,
            "{host:?}: files past one per ledger: {first} first, up to {most}"
        );
        let listed: Vec<u64> = topic.ledgers().iter().map(|s| s.id).collect();
        assert!(
            (590..=620).contains(&listed.len()),
            "{host:?}: {}",
            listed.len()
        );
        topic.close().expect("close");
        let plain: Arc<dyn Storage> = Arc::new(disk.clone());
        let report = ackstore::check::verify(&plain).expect("verify");
        assert!(
            report.is_sound() && report.unused.is_empty(),
            "{host:?}: {report}"
        );
        let reopened = open_hosted(host, plain, &config(1)).expect("reopen");
        let relisted: Vec<u64> = reopened.ledgers().iter().map(|s| s.id).collect();
        assert_eq!(relisted, listed, "{host:?}: the reopened ledgers");
        let found = examine(&reopened, &shown.get());
        assert!(found.is_clean(), "{host:?}: {found:?}");
        reopened.close().expect("close");
    });
}

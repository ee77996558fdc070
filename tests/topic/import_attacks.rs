//! Attacks on the import of a cursor read from a cursor ledger into its topic's journal, on
//! both hosts: damage to the cursor records and the ledgers around the move, read against what
//! every other cursor of the topic flushed.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::internals::format::meta::CursorRecord;
use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::{Cursor, MemStorage, Position, Storage};
use support::topic::{Host, Hosted, earliest, on_each_host, open_hosted, topic_storage};

const PER_LEDGER: u64 = 40;
const ENTRIES: u64 = 120;

fn open(host: Host, disk: &MemStorage) -> ackstore::Result<Hosted> {
    open_hosted(
        host,
        Arc::new(disk.clone()),
        &support::topic::config(PER_LEDGER),
    )
}

/// The entries among `positions` that `cursor` counts as acknowledged.
fn done(cursor: &Cursor, positions: &[Position]) -> BTreeSet<Position> {
    let mark = cursor.mark_delete_position().unwrap();
    positions
        .iter()
        .copied()
        .filter(|&p| mark.is_some_and(|m| p <= m) || cursor.is_acked(p).unwrap())
        .collect()
}

/// The topic `host` keeps on a fresh disk with [`ENTRIES`] entries and two cursors on cursor
/// ledgers, as an earlier release wrote them: `sub` acked every third entry from the second,
/// `other` every fifth from the third. Returns the disk, the positions and `other`'s acks.
fn two_ledger_cursors(host: Host) -> (MemStorage, Vec<Position>, BTreeSet<Position>) {
    let disk = MemStorage::new();
    let (positions, _, acked) = two_ledger_cursors_on(host, &disk);
    (disk, positions, acked)
}

/// [`two_ledger_cursors`] on `disk` (a copy of its committed sample); returns the positions,
/// `sub`'s acks and `other`'s.
fn two_ledger_cursors_on(
    host: Host,
    disk: &MemStorage,
) -> (Vec<Position>, BTreeSet<Position>, BTreeSet<Position>) {
    let sample = support::samples::ledger_sample_on(host, "-two");
    assert_eq!(sample.shape, (ENTRIES, PER_LEDGER));
    sample.load(disk);
    (sample.positions(), sample.acks("sub"), sample.acks("other"))
}

/// The name of cursor `cursor`'s record in the topic's metadata store `meta`.
fn record_of(meta: &FileMetaStore, cursor: &str) -> String {
    meta.list()
        .unwrap()
        .into_iter()
        .filter(|name| name.starts_with("cursor-"))
        .find(|name| {
            let (_, bytes) = meta.get(name).unwrap().unwrap();
            CursorRecord::decode(&bytes).unwrap().name == cursor
        })
        .unwrap()
}

/// Cursor `sub` is imported (the journal holds it, its record names no ledger), then its
/// record is replaced by a copy of `other`'s, which names `other`'s cursor ledger (a record
/// moved or restored under the wrong name). `sub` still opens from the journal and writes;
/// whatever the open and `verify` make of the misplaced record, `other`'s cursor ledger is
/// never taken for `sub`'s superseded one: `other` keeps every ack it flushed.
#[test]
fn a_misplaced_record_of_an_imported_cursor_never_retires_a_siblings_ledger() {
    on_each_host(|host| {
        let (disk, positions, other_acked) = two_ledger_cursors(host);
        let hosted = open(host, &disk).unwrap();
        let sub = hosted.open_cursor("sub", earliest()).unwrap();
        let mut sub_acked = done(&sub, &positions);
        sub.ack(positions[0]).unwrap();
        sub.flush().unwrap();
        sub_acked.insert(positions[0]);
        assert_eq!(sub.stats().unwrap().persist.cursor_ledger, None);
        drop(sub);
        hosted.close().unwrap();

        let meta = FileMetaStore::new(topic_storage(host, &disk));
        let (sub_name, other_name) = (record_of(&meta, "sub"), record_of(&meta, "other"));
        let (_, other_bytes) = meta.get(&other_name).unwrap().unwrap();
        assert!(
            CursorRecord::decode(&other_bytes)
                .unwrap()
                .cursor_ledger
                .is_some()
        );
        let (version, _) = meta.get(&sub_name).unwrap().unwrap();
        meta.put(&sub_name, Some(version), &other_bytes).unwrap();

        // The misplaced record may be refused; if the topic opens, `sub` writes.
        if let Ok(hosted) = open(host, &disk) {
            if let Ok(sub) = hosted.open_cursor("sub", earliest()) {
                assert_eq!(done(&sub, &positions), sub_acked, "{host:?}: sub");
                sub.ack(positions[3]).unwrap();
                let _ = sub.flush();
                let _ = sub.close();
            }
            let _ = hosted.close();
        }
        // Put `sub`'s record right again, as an operator repairing the damage would.
        let (version, _) = meta.get(&sub_name).unwrap().unwrap();
        let mut repaired = CursorRecord::decode(&other_bytes).unwrap();
        repaired.name = "sub".into();
        repaired.cursor_ledger = None;
        repaired.identity = None;
        meta.put(&sub_name, Some(version), &repaired.encode())
            .unwrap();

        let hosted = open(host, &disk).unwrap();
        let other = hosted.open_cursor("other", earliest()).unwrap();
        assert_eq!(done(&other, &positions), other_acked, "{host:?}: other");
    });
}

/// Entries of the cold-partition topic: ten data ledgers, so ten ack partitions.
const COLD_ENTRIES: u64 = 400;

/// Ack memory a cursor of the cold-partition topic holds resident: about one partition.
const COLD_LRU: usize = support::samples::COLD_LRU;

/// The config of the cold-partition topic: its cursors keep about one partition resident.
fn cold_config() -> ackstore::LedgerConfig {
    let mut config = support::topic::config(PER_LEDGER);
    config.cursor.lru_capacity_bytes = COLD_LRU;
    config
}

/// What cursor `sub` of the cold-partition topic acknowledged: every third entry from the
/// second, and indexes 0 and 2 of a batch of 4 in the sixth entry of each data ledger.
struct Acked {
    entries: BTreeSet<Position>,
    batch: Vec<Position>,
}

impl Acked {
    /// Checks that `cursor` holds exactly `entries` (with `extra` or without it) among
    /// `positions`, and every partial entry.
    fn check(&self, cursor: &Cursor, positions: &[Position], extra: Position, what: &str) {
        let found = done(cursor, positions);
        let mut with = self.entries.clone();
        with.insert(extra);
        assert!(
            found == self.entries || found == with,
            "{what}: {:?} against {:?}",
            found
                .symmetric_difference(&self.entries)
                .collect::<Vec<_>>(),
            extra
        );
        for &p in &self.batch {
            assert!(cursor.is_batch_index_acked(p, 0).unwrap(), "{what}: {p:?}");
            assert!(cursor.is_batch_index_acked(p, 2).unwrap(), "{what}: {p:?}");
            assert!(!cursor.is_batch_index_acked(p, 1).unwrap(), "{what}: {p:?}");
        }
    }
}

/// The topic `host` keeps on a fresh disk with [`COLD_ENTRIES`] entries whose cursor `sub` is on
/// a cursor ledger with the acks of [`Acked`], written with [`cold_config`]: a reopen finds
/// its partitions and partial entries cold, in the ledger.
fn cold_ledger_cursor(host: Host) -> (MemStorage, Vec<Position>, Acked) {
    let disk = MemStorage::new();
    let (positions, acked) = cold_ledger_cursor_on(host, &disk);
    (disk, positions, acked)
}

/// [`cold_ledger_cursor`] on `disk` (a copy of its committed sample).
fn cold_ledger_cursor_on(host: Host, disk: &MemStorage) -> (Vec<Position>, Acked) {
    let sample = support::samples::ledger_sample_on(host, "-cold");
    assert_eq!(sample.shape, (COLD_ENTRIES, PER_LEDGER));
    sample.load(disk);
    let batch = sample.batch();
    assert!(batch.len() > 3);
    let entries = sample.acks("sub");
    (sample.positions(), Acked { entries, batch })
}

fn open_cold(host: Host, storage: Arc<dyn Storage>) -> ackstore::Result<Hosted> {
    open_hosted(host, storage, &cold_config())
}

/// What `count` of the disk counts while the cold-partition cursor's first flush imports it.
fn import_cost(host: Host, count: impl Fn(&MemStorage) -> u64) -> u64 {
    let (disk, positions, _) = cold_ledger_cursor(host);
    let hosted = open_cold(host, Arc::new(disk.clone())).unwrap();
    let sub = hosted.open_cursor("sub", earliest()).unwrap();
    sub.ack(positions[0]).unwrap();
    let before = count(&disk);
    sub.flush().unwrap();
    count(&disk) - before
}

/// A cursor whose partitions and partial entries are cold on its cursor ledger imports them
/// all; the disk fails every operation (reads included) after each number of operations of the
/// import in turn. The failed write leaves a complete state (the ledger's, or the journal's);
/// with the power back the same handle's next flush, or else a reopen's, completes the move;
/// nothing is lost and nothing acked that was not.
#[test]
fn an_import_of_cold_partitions_failing_at_every_operation_completes_once_the_disk_returns() {
    on_each_host(|host| {
        let total = import_cost(host, MemStorage::mutations);
        assert!(total > 3, "{host:?}: {total}");
        for k in 0..=total {
            let what = format!("{host:?}, failing after {k} of {total}");
            let (disk, positions, mut acked) = cold_ledger_cursor(host);
            let hosted = open_cold(host, Arc::new(disk.clone())).unwrap();
            let sub = hosted.open_cursor("sub", earliest()).unwrap();
            let stats = sub.stats().unwrap().ackset;
            assert!(
                stats.resident_partitions < stats.partitions,
                "{what}: {stats:?}"
            );
            let extra = positions[0];
            sub.ack(extra).unwrap();
            disk.fail_after(Some(k));
            let first = sub.flush();
            let cut = disk.durable_image();
            disk.fail_after(None);
            // A power cut right after the failure: a complete state.
            let hosted_cut = open_cold(host, Arc::new(cut.clone())).unwrap();
            let c = hosted_cut.open_cursor("sub", earliest()).unwrap();
            acked.check(&c, &positions, extra, &format!("{what}: cut"));
            if first.is_ok() {
                assert!(done(&c, &positions).contains(&extra), "{what}: cut");
            }
            drop(c);
            hosted_cut.close().unwrap();
            // The power is back: the same handle retries, or a reopen moves the cursor.
            let retried = sub.flush();
            drop(sub);
            let _ = hosted.close();
            let hosted = open_cold(host, Arc::new(disk.clone())).unwrap();
            let c = hosted.open_cursor("sub", earliest()).unwrap();
            if first.is_ok() || retried.is_ok() {
                assert!(done(&c, &positions).contains(&extra), "{what}: retried");
            }
            acked.check(&c, &positions, extra, &format!("{what}: after"));
            c.ack(positions[3]).unwrap();
            c.flush().unwrap();
            acked.entries.insert(positions[3]);
            assert_eq!(c.stats().unwrap().persist.cursor_ledger, None, "{what}");
            drop(c);
            hosted.close().unwrap();
            let hosted = open_cold(host, Arc::new(disk.clone())).unwrap();
            let c = hosted.open_cursor("sub", earliest()).unwrap();
            acked.check(&c, &positions, extra, &format!("{what}: reopened"));
            drop(c);
            hosted.close().unwrap();
            let report =
                ackstore::check::verify(&(Arc::new(disk.clone()) as Arc<dyn Storage>)).unwrap();
            assert!(report.is_sound(), "{what}: {report}");
            let hosted = open_cold(host, Arc::new(disk.clone())).unwrap();
            assert_eq!(
                hosted.entry_log().unwrap().ledger_ids().len(),
                hosted.ledgers().len(),
                "{what}: a cursor ledger is left"
            );
            hosted.close().unwrap();
        }
    });
}

/// Acks arrive while the import's tick syncs (the cursor's lock released), touching every
/// cold partition of the cursor ledger and evicting within the small ack memory: a power cut
/// right after the import's flush returned keeps everything it flushed and acks nothing that
/// was not; a power cut after the next flush keeps every ack.
#[test]
fn acks_during_the_import_sync_are_kept_by_the_next_flush_and_never_invented() {
    use std::sync::Barrier;
    on_each_host(|host| {
        let (disk, positions, acked) = cold_ledger_cursor(host);
        let hooked = support::hooked::Hooked::new(disk.clone());
        let hosted = open_cold(host, Arc::new(hooked.clone())).unwrap();
        // Another cursor's flush starts the journal's segment, so the only sync of `sub`'s
        // import (its first flush below: opening it wrote nothing) is its tick's commit.
        let warm = hosted.open_cursor("warm", earliest()).unwrap();
        warm.ack(positions[1]).unwrap();
        warm.flush().unwrap();
        let sub = hosted.open_cursor("sub", earliest()).unwrap();
        assert!(
            sub.stats().unwrap().persist.cursor_ledger.is_some(),
            "{host:?}"
        );
        let extra = positions[0];
        sub.ack(extra).unwrap();
        let during: BTreeSet<Position> = positions
            .iter()
            .copied()
            .skip(3)
            .step_by(3)
            .filter(|p| !acked.batch.contains(p))
            .collect();
        let evicted = sub.stats().unwrap().ackset.evictions;
        let barriers = Arc::new((Barrier::new(2), Barrier::new(2)));
        *hooked.hooks.hold_next_sync.lock().unwrap() = Some(barriers.clone());
        std::thread::scope(|s| {
            let flushing = s.spawn(|| sub.flush());
            barriers.0.wait();
            for &p in &during {
                sub.ack(p).unwrap();
            }
            // Within the ack memory, the acks evicted partitions while the tick synced.
            assert!(sub.stats().unwrap().ackset.evictions > evicted, "{host:?}");
            barriers.1.wait();
            flushing.join().unwrap().unwrap();
        });
        let mut flushed = acked.entries.clone();
        flushed.insert(extra);
        let mut all = flushed.clone();
        all.extend(&during);

        let cut = disk.durable_image();
        let hosted_cut = open_cold(host, Arc::new(cut)).unwrap();
        let c = hosted_cut.open_cursor("sub", earliest()).unwrap();
        let found = done(&c, &positions);
        assert!(found.is_superset(&flushed), "{host:?}: flushed and lost");
        assert!(found.is_subset(&all), "{host:?}: acked and never acked");
        let complete = Acked {
            entries: flushed.clone(),
            batch: acked.batch.clone(),
        };
        // The partial entries were flushed too; `found` holds no more than `all`, checked above.
        if found == flushed {
            complete.check(&c, &positions, extra, &format!("{host:?}: cut"));
        }
        drop(c);
        hosted_cut.close().unwrap();

        sub.flush().unwrap();
        let hosted_cut = open_cold(host, Arc::new(disk.durable_image())).unwrap();
        let c = hosted_cut.open_cursor("sub", earliest()).unwrap();
        let everything = Acked {
            entries: all,
            batch: acked.batch.clone(),
        };
        everything.check(&c, &positions, extra, &format!("{host:?}: flushed again"));
        assert_eq!(
            hosted_cut.entry_log().unwrap().ledger_ids().len(),
            hosted_cut.ledgers().len(),
            "{host:?}: a cursor ledger is left"
        );
    });
}

/// What is put back on an imported cursor's place after its import completed.
#[derive(Debug, Clone, Copy)]
enum Restored {
    /// Its deleted cursor ledger, named as before (a restored backup of the file).
    Ledger,
    /// Its deleted ledger and its record as they were before the import.
    LedgerAndRecord,
    /// Its record as before the import, the ledger it names holding the sibling's ledger.
    RecordAndSiblingsLedger,
    /// Its record as before the import, the ledger it names cut to half its length.
    RecordAndTruncatedLedger,
    /// Its record as before the import, the ledger it names zeroed.
    RecordAndZeroedLedger,
}

/// Writes `bytes` as file `name` of `storage` (created or replaced), synced.
fn put_file(storage: &Arc<dyn Storage>, name: &str, bytes: &[u8]) {
    if storage.exists(name).unwrap() {
        storage.remove(name).unwrap();
    }
    let file = storage.create(name).unwrap();
    file.write_all_at(bytes, 0).unwrap();
    file.sync_data().unwrap();
    storage.sync_dir().unwrap();
}

/// Reads file `name` of `storage` whole.
fn file_bytes(storage: &Arc<dyn Storage>, name: &str) -> Vec<u8> {
    let file = storage.open(name).unwrap();
    let mut bytes = vec![0; usize::try_from(file.size().unwrap()).unwrap()];
    file.read_exact_at(&mut bytes, 0).unwrap();
    bytes
}

/// After `sub`'s import completed, its older files come back (its ledger, its record, or
/// both, damaged or another cursor's): `verify` reports the topic sound exactly when it opens,
/// `sub` holds the journal's state (nothing of the ledger is used), `other` keeps its ledger's
/// state, and `sub`'s next write leaves no ledger of its own.
#[test]
fn older_files_of_an_imported_cursor_coming_back_are_never_used() {
    on_each_host(|host| {
        for restored in [
            Restored::Ledger,
            Restored::LedgerAndRecord,
            Restored::RecordAndSiblingsLedger,
            Restored::RecordAndTruncatedLedger,
            Restored::RecordAndZeroedLedger,
        ] {
            let what = format!("{host:?}, {restored:?}");
            let (disk, positions, other_acked) = two_ledger_cursors(host);
            let storage = topic_storage(host, &disk);
            let meta = FileMetaStore::new(storage.clone());
            let (sub_name, other_name) = (record_of(&meta, "sub"), record_of(&meta, "other"));
            let ledger_of = |name: &str| {
                let (_, bytes) = meta.get(name).unwrap().unwrap();
                CursorRecord::decode(&bytes).unwrap().cursor_ledger.unwrap()
            };
            let file = ackstore::internals::log::ledger_file_name(ledger_of(&sub_name));
            let other_file = ackstore::internals::log::ledger_file_name(ledger_of(&other_name));
            let (_, old_record) = meta.get(&sub_name).unwrap().unwrap();
            let old_ledger = file_bytes(&storage, &file);

            let hosted = open(host, &disk).unwrap();
            let sub = hosted.open_cursor("sub", earliest()).unwrap();
            sub.ack(positions[0]).unwrap();
            sub.ack(positions[3]).unwrap();
            sub.flush().unwrap();
            let want = done(&sub, &positions);
            drop(sub);
            hosted.close().unwrap();
            assert!(!storage.exists(&file).unwrap(), "{what}");

            let ledger = match restored {
                Restored::Ledger | Restored::LedgerAndRecord => old_ledger,
                Restored::RecordAndSiblingsLedger => file_bytes(&storage, &other_file),
                Restored::RecordAndTruncatedLedger => old_ledger[..old_ledger.len() / 2].to_vec(),
                Restored::RecordAndZeroedLedger => vec![0; old_ledger.len()],
            };
            put_file(&storage, &file, &ledger);
            if !matches!(restored, Restored::Ledger) {
                let (version, _) = meta.get(&sub_name).unwrap().unwrap();
                meta.put(&sub_name, Some(version), &old_record).unwrap();
            }

            let report =
                ackstore::check::verify(&(Arc::new(disk.clone()) as Arc<dyn Storage>)).unwrap();
            let hosted = open(host, &disk);
            assert_eq!(report.is_sound(), hosted.is_ok(), "{what}: {report}");
            let hosted = hosted.unwrap();
            let sub = hosted.open_cursor("sub", earliest()).unwrap();
            assert_eq!(done(&sub, &positions), want, "{what}");
            assert_eq!(sub.stats().unwrap().persist.cursor_ledger, None, "{what}");
            sub.ack(positions[6]).unwrap();
            sub.flush().unwrap();
            drop(sub);
            hosted.close().unwrap();

            let hosted = open(host, &disk).unwrap();
            let sub = hosted.open_cursor("sub", earliest()).unwrap();
            let mut want = want;
            want.insert(positions[6]);
            assert_eq!(done(&sub, &positions), want, "{what}: reopened");
            let other = hosted.open_cursor("other", earliest()).unwrap();
            assert_eq!(done(&other, &positions), other_acked, "{what}: other");
            drop((sub, other));
            hosted.close().unwrap();
            assert!(!storage.exists(&file).unwrap(), "{what}: left");
            assert!(storage.exists(&other_file).unwrap(), "{what}: other's");
            let report =
                ackstore::check::verify(&(Arc::new(disk.clone()) as Arc<dyn Storage>)).unwrap();
            assert!(report.is_sound(), "{what}: {report}");
        }
    });
}

/// Both cursors of a topic, each on its cursor ledger, import together at the topic's
/// close; a power cut at every storage operation of it, each image kept durable or torn half
/// way through its unsynced tails. `verify` is sound on every image; each cursor holds at least
/// its ledger's state and at most that plus its new acks (all of them once the close returned
/// `Ok`); one more write of each finishes the move, and no cursor ledger is left.
#[test]
fn two_cursors_importing_at_one_close_survive_a_power_cut_at_every_step() {
    on_each_host(|host| {
        let new = |positions: &[Position], cursor: &str| {
            let at: &[usize] = if cursor == "sub" { &[0, 51] } else { &[1, 99] };
            at.iter().map(|&i| positions[i]).collect::<Vec<_>>()
        };
        let mut cuts = 0;
        support::crash::cut_everywhere_after(
            support::crash::Points::every_in_release(2),
            |disk| {
                let (positions, sub, other) = two_ledger_cursors_on(host, disk);
                let hosted = open(host, disk).unwrap();
                (hosted, positions, sub, other)
            },
            |_, (hosted, positions, sub_acked, other_acked)| {
                let mut acked = Ok(());
                for name in ["sub", "other"] {
                    acked = acked.and_then(|()| {
                        let cursor = hosted.open_cursor(name, earliest())?;
                        new(&positions, name)
                            .iter()
                            .try_for_each(|&p| cursor.ack(p).map(drop))
                    });
                }
                let closed = acked.and_then(|()| hosted.close());
                (
                    positions,
                    [("sub", sub_acked), ("other", other_acked)],
                    closed.is_ok(),
                )
            },
            |disk, support::crash::Cut { n, .. }, (positions, cursors, closed)| {
                cuts += 1;
                let torn = support::crash::torn_image(disk, |u| u / 2);
                for (image, kind) in [(disk.durable_image(), "durable"), (torn, "torn")] {
                    let what = format!("{host:?}, cut at {n}, {kind}");
                    let report =
                        ackstore::check::verify(&(Arc::new(image.clone()) as Arc<dyn Storage>))
                            .unwrap();
                    assert!(report.is_sound(), "{what}: {report}");
                    let hosted = open(host, &image).unwrap();
                    let mut wants = Vec::new();
                    for (name, acked) in &cursors {
                        let cursor = hosted.open_cursor(name, earliest()).unwrap();
                        let got = done(&cursor, &positions);
                        let mut upper = acked.clone();
                        upper.extend(new(&positions, name));
                        assert!(got.is_superset(acked), "{what}: {name} lost acks");
                        assert!(got.is_subset(&upper), "{what}: {name} invented acks");
                        if closed {
                            assert_eq!(got, upper, "{what}: {name} lost a closed ack");
                        }
                        cursor.ack(positions[ENTRIES as usize - 1]).unwrap();
                        cursor.flush().unwrap();
                        let mut want = got;
                        want.insert(positions[ENTRIES as usize - 1]);
                        wants.push((*name, want));
                    }
                    hosted.close().unwrap();
                    let hosted = open(host, &image).unwrap();
                    for (name, want) in &wants {
                        let cursor = hosted.open_cursor(name, earliest()).unwrap();
                        assert_eq!(&done(&cursor, &positions), want, "{what}: {name} reopened");
                    }
                    assert_eq!(
                        hosted.entry_log().unwrap().ledger_ids().len(),
                        hosted.ledgers().len(),
                        "{what}: a cursor ledger is left"
                    );
                    hosted.close().unwrap();
                }
            },
        );
        assert!(cuts > 5, "{host:?}: {cuts}");
    });
}

/// Cursor `sub` of a topic whose journal holds it while its record still names its cursor
/// ledger (the state an import cut short after the journal's commit leaves), made on `disk` by
/// importing it and putting the older record and ledger back; `other` stays on its ledger.
/// Returns the positions, `sub`'s state and `other`'s acks.
fn mid_import(
    host: Host,
    disk: &MemStorage,
) -> (Vec<Position>, BTreeSet<Position>, BTreeSet<Position>) {
    let (positions, _, other_acked) = two_ledger_cursors_on(host, disk);
    let storage = topic_storage(host, disk);
    let meta = FileMetaStore::new(storage.clone());
    let sub_name = record_of(&meta, "sub");
    let (_, old_record) = meta.get(&sub_name).unwrap().unwrap();
    let ledger = CursorRecord::decode(&old_record)
        .unwrap()
        .cursor_ledger
        .unwrap();
    let file = ackstore::internals::log::ledger_file_name(ledger);
    let old_ledger = file_bytes(&storage, &file);
    let hosted = open(host, disk).unwrap();
    let sub = hosted.open_cursor("sub", earliest()).unwrap();
    sub.ack(positions[0]).unwrap();
    sub.flush().unwrap();
    let state = done(&sub, &positions);
    drop(sub);
    hosted.close().unwrap();
    put_file(&storage, &file, &old_ledger);
    let (version, _) = meta.get(&sub_name).unwrap().unwrap();
    meta.put(&sub_name, Some(version), &old_record).unwrap();
    (positions, state, other_acked)
}

/// Deleting a cursor whose journal state superseded a ledger its record still names, with a
/// power cut at every storage operation of the deletion, on both hosts: `verify` is sound; the
/// cursor is either there with the journal's state or gone, and a cursor created again under
/// its name starts empty (nothing of the journal or the ledger comes back); `other` keeps its
/// acks; no ledger of `sub` outlives the next open.
#[test]
fn deleting_a_cursor_mid_import_at_every_step_brings_nothing_back() {
    on_each_host(|host| {
        let mut cuts = 0;
        support::crash::cut_everywhere_after(
            support::crash::Points::EVERY,
            |disk| mid_import(host, disk),
            |disk, prepared| {
                let deleted = open(host, disk).and_then(|hosted| {
                    drop(hosted.open_cursor("sub", earliest())?);
                    hosted.delete_cursor("sub")?;
                    hosted.close()
                });
                (prepared, deleted.is_ok())
            },
            |disk, support::crash::Cut { n, .. }, ((positions, state, other_acked), deleted)| {
                cuts += 1;
                let what = format!("{host:?}, cut at {n}");
                let image = disk.durable_image();
                let report =
                    ackstore::check::verify(&(Arc::new(image.clone()) as Arc<dyn Storage>))
                        .unwrap();
                assert!(report.is_sound(), "{what}: {report}");
                let hosted = open(host, &image).unwrap();
                let there = hosted.cursor_names().iter().any(|c| c == "sub");
                assert!(!(there && deleted), "{what}: deleted, and back");
                let sub = hosted.open_cursor("sub", earliest()).unwrap();
                let got = done(&sub, &positions);
                if there {
                    assert_eq!(got, state, "{what}: kept");
                } else {
                    assert_eq!(got, BTreeSet::new(), "{what}: created again");
                }
                let other = hosted.open_cursor("other", earliest()).unwrap();
                assert_eq!(done(&other, &positions), other_acked, "{what}: other");
                sub.ack(positions[3]).unwrap();
                sub.flush().unwrap();
                drop((sub, other));
                hosted.close().unwrap();
                let hosted = open(host, &image).unwrap();
                // Only `other`'s ledger is left beside the data ledgers.
                assert_eq!(
                    hosted.entry_log().unwrap().ledger_ids().len(),
                    hosted.ledgers().len() + 1,
                    "{what}: a ledger of sub is left"
                );
                hosted.close().unwrap();
            },
        );
        assert!(cuts > 3, "{host:?}: {cuts}");
    });
}

/// Journal segments of the store whose journal rolls over as an imported cursor flushes.
const TINY_SEGMENT: u64 = 700;

/// The store on `disk` with [`cold_config`] and journal segments of [`TINY_SEGMENT`] bytes.
fn tiny_segment_store(disk: &MemStorage) -> ackstore::Result<ackstore::Store> {
    ackstore::Store::open_with_storage(
        Arc::new(disk.clone()),
        ackstore::StoreConfig {
            ledger: cold_config(),
            flusher_threads: 0,
            journal: ackstore::JournalConfig {
                segment_bytes: TINY_SEGMENT,
            },
            ..ackstore::StoreConfig::default()
        },
    )
}

/// A store cursor with cold partitions and partial entries on its cursor ledger imports into
/// a journal whose segments are smaller than the import; more acks and flushes then roll the
/// journal over, retiring the segment the import wrote. A power cut at every storage operation: `verify`
/// is sound, the cursor holds at least its ledger's state and every `Ok` flush, never an ack
/// that was not made, and every partial entry.
#[test]
fn an_import_across_journal_rollovers_survives_a_power_cut_at_every_step() {
    let more = |positions: &[Position]| -> Vec<Position> {
        // Not the entries holding partial entries (the sixth of each data ledger).
        (3..COLD_ENTRIES as usize)
            .step_by(9)
            .filter(|i| *i % PER_LEDGER as usize != 5)
            .map(|i| positions[i])
            .collect()
    };
    let mut rolled = 0;
    let clean = support::crash::cut_everywhere_after(
        support::crash::Points::every_in_release(3),
        |disk| cold_ledger_cursor_on(Host::Store, disk),
        |disk, (positions, acked)| {
            let flushed = tiny_segment_store(disk).and_then(|store| {
                let t = store.topic("t")?;
                let sub = t.open_cursor("sub", earliest())?;
                sub.ack(positions[0])?;
                sub.flush()?;
                let mut n = 1;
                for p in more(&positions) {
                    sub.ack(p)?;
                    if p.entry_id % 4 == 0 {
                        sub.flush()?;
                        n += 1;
                    }
                }
                sub.flush()?;
                rolled = rolled.max(store.journal_stats().rollovers);
                drop((sub, t));
                store.close()?;
                Ok(n + 1)
            });
            (positions, acked, flushed)
        },
        |disk, support::crash::Cut { n, .. }, (positions, acked, flushed)| {
            let what = format!("cut at {n}");
            let image = disk.durable_image();
            let report =
                ackstore::check::verify(&(Arc::new(image.clone()) as Arc<dyn Storage>)).unwrap();
            assert!(report.is_sound(), "{what}: {report}");
            let store = tiny_segment_store(&image).unwrap();
            let t = store.topic("t").unwrap();
            let sub = t.open_cursor("sub", earliest()).unwrap();
            let got = done(&sub, &positions);
            let mut upper = acked.entries.clone();
            upper.insert(positions[0]);
            upper.extend(more(&positions));
            assert!(got.is_superset(&acked.entries), "{what}: lost");
            assert!(got.is_subset(&upper), "{what}: invented");
            if flushed.is_ok() {
                assert_eq!(got, upper, "{what}: flushed and lost");
            }
            let only = Acked {
                entries: got.clone(),
                batch: acked.batch.clone(),
            };
            only.check(&sub, &positions, positions[0], &what);
        },
    );
    assert!(clean.result.2.is_ok(), "the clean run");
    assert!(rolled > 0, "the journal rolled over");
}

/// [`an_import_of_cold_partitions_failing_at_every_operation_completes_once_the_disk_returns`]
/// with a full disk instead: `ENOSPC` from each growing write of the import on, the space
/// returned after the failed flush. The state stays complete, a retry (by the same handle, or
/// once the failure latched the journal, by a reopen) moves the cursor, and nothing is lost.
#[test]
fn an_import_of_cold_partitions_meeting_a_full_disk_at_every_write_completes_with_space_back() {
    on_each_host(|host| {
        let total = import_cost(host, MemStorage::growing_writes);
        assert!(total > 1, "{host:?}: {total}");
        for k in 0..=total {
            let what = format!("{host:?}, full after {k} of {total} growing writes");
            let (disk, positions, acked) = cold_ledger_cursor(host);
            let hosted = open_cold(host, Arc::new(disk.clone())).unwrap();
            let sub = hosted.open_cursor("sub", earliest()).unwrap();
            let extra = positions[0];
            sub.ack(extra).unwrap();
            disk.enospc_after(Some(k));
            let first = sub.flush();
            disk.enospc_after(None);
            let retried = sub.flush();
            drop(sub);
            let _ = hosted.close();
            // What the disk keeps after the process went away.
            let image = disk.durable_image();
            let hosted = open_cold(host, Arc::new(image.clone())).unwrap();
            let c = hosted.open_cursor("sub", earliest()).unwrap();
            acked.check(&c, &positions, extra, &what);
            if first.is_ok() || retried.is_ok() {
                assert!(done(&c, &positions).contains(&extra), "{what}: flushed");
            }
            c.ack(positions[3]).unwrap();
            c.flush().unwrap();
            drop(c);
            hosted.close().unwrap();
            let hosted = open_cold(host, Arc::new(image.durable_image())).unwrap();
            assert_eq!(
                hosted.entry_log().unwrap().ledger_ids().len(),
                hosted.ledgers().len(),
                "{what}: a cursor ledger is left"
            );
            let c = hosted.open_cursor("sub", earliest()).unwrap();
            assert!(done(&c, &positions).contains(&positions[3]), "{what}");
            drop(c);
            hosted.close().unwrap();
            let report =
                ackstore::check::verify(&(Arc::new(image.durable_image()) as Arc<dyn Storage>))
                    .unwrap();
            assert!(report.is_sound(), "{what}: {report}");
        }
    });
}

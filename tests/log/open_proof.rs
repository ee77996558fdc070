//! Opening sealed ledgers without fsyncs or maps: a seal records, after the fsync that made its
//! footer durable, the whole file length in the header's synced-length slot; an open that finds
//! that claim fsyncs nothing and maps nothing, and a ledger is mapped on its first read. A sealed
//! ledger without the claim (sealed by an older build, or its slot lost in a power cut) is
//! fsynced once and given it. A power cut at every storage step of a seal and of an open, and at
//! every byte of the unsynced tail, loses no sealed ledger, and whatever an open saw survives a
//! power cut right after it; `verify` agrees with the open on every image.

use crate::support;

use std::sync::Arc;

use ackstore::internals::format::ledger::{HEADER_V3_LEN, LedgerHeader, SLOTS_AT};
use ackstore::internals::log::{EntryLog, LogConfig, ledger_file_name, verify_log};
use ackstore::{FileStorage, MemStorage, Storage};
use support::crash::{Cut, Points, cut_everywhere_after, torn_image, unsynced_tail};
use support::log_model::{Model, meta, payload};

/// Sealed ledgers of `entries` entries each, then one unsealed ledger with synced entries.
fn build(storage: Arc<dyn Storage>, sealed: u64, entries: u64) -> Vec<u64> {
    let log = EntryLog::open(storage, LogConfig::default()).unwrap();
    let mut ids = Vec::new();
    for _ in 0..=sealed {
        let id = log.create_ledger().unwrap();
        for i in 0..entries {
            log.append(id, meta(i), &payload(id, i)).unwrap();
        }
        log.sync(id).unwrap();
        ids.push(id);
    }
    for id in &ids[..ids.len() - 1] {
        log.seal(*id).unwrap();
    }
    ids
}

/// Rewrites ledger `id`'s slots as a build that did not record the seal left them: both claim
/// the header only (what a create writes; such a build's seal fsynced without a slot record).
fn strip_proof(read: impl Fn(&str) -> Vec<u8>, write: impl Fn(&str, Vec<u8>), id: u64) {
    let name = ledger_file_name(id);
    let mut bytes = read(&name);
    let h = ackstore::internals::format::ledger::decode_header(&bytes).unwrap();
    let fresh = LedgerHeader::new(id, h.nonce).encode();
    bytes[SLOTS_AT..HEADER_V3_LEN].copy_from_slice(&fresh[SLOTS_AT..HEADER_V3_LEN]);
    write(&name, bytes);
}

/// Every sealed ledger, however small, read through a map.
const MAP_ALL: LogConfig = LogConfig {
    map_sealed_from: 0,
    ..LogConfig::DEFAULT
};

/// The counters of one open and of reads after it, on both backends.
fn check_counts(storage: &Arc<dyn Storage>, ids: &[u64], stripped: &[u64], what: &str) {
    let (sealed, unsealed) = ids.split_at(ids.len() - 1);
    // First open: one fsync per sealed ledger without the proof, nothing else; no map.
    let log = EntryLog::open(storage.clone(), MAP_ALL).unwrap();
    let stats = log.stats();
    assert_eq!(stats.fsyncs, stripped.len() as u64, "{what}: first open");
    assert_eq!(stats.maps, 0, "{what}: first open maps");
    for id in sealed {
        assert!(log.ledger_info(*id).unwrap().sealed, "{what}: {id}");
    }
    assert!(!log.ledger_info(unsealed[0]).unwrap().sealed);
    // Each sealed ledger is mapped on its first read, once; the unsealed one never.
    for round in 0..2 {
        for id in &sealed[..3] {
            let e = log.read(*id, 1).unwrap();
            assert_eq!(e.payload, payload(*id, 1));
            log.read_meta(*id, 0).unwrap();
        }
        log.read(unsealed[0], 0).unwrap();
        assert_eq!(log.stats().maps, 3, "{what}: round {round}");
    }
    drop(log);
    // Second open: the proof is on file now; no fsync, no map.
    let log = EntryLog::open(storage.clone(), MAP_ALL).unwrap();
    assert_eq!(
        (log.stats().fsyncs, log.stats().maps),
        (0, 0),
        "{what}: second open"
    );
    assert!(log.recovery_report().is_empty());
    assert!(
        verify_log(storage.as_ref()).unwrap().is_empty(),
        "{what}: verify"
    );
}

#[test]
fn a_second_open_fsyncs_and_maps_no_sealed_ledger_on_both_backends() {
    let disk = MemStorage::new();
    let ids = build(Arc::new(disk.clone()), 12, 9);
    strip_proof(
        |n| disk.live_bytes(n).unwrap(),
        |n, b| disk.set_bytes(n, b).unwrap(),
        ids[4],
    );
    strip_proof(
        |n| disk.live_bytes(n).unwrap(),
        |n, b| disk.set_bytes(n, b).unwrap(),
        ids[7],
    );
    check_counts(
        &(Arc::new(disk) as Arc<dyn Storage>),
        &ids,
        &[4, 7],
        "memory",
    );

    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::open(dir.path(), false).unwrap());
    let ids = build(storage.clone(), 12, 9);
    let path = |n: &str| dir.path().join(n);
    strip_proof(
        |n| std::fs::read(path(n)).unwrap(),
        |n, b| std::fs::write(path(n), b).unwrap(),
        ids[0],
    );
    check_counts(&storage, &ids, &[0], "files");
}

#[test]
fn a_read_only_open_writes_nothing_into_a_ledger_without_proof() {
    let disk = MemStorage::new();
    let ids = build(Arc::new(disk.clone()), 2, 4);
    strip_proof(
        |n| disk.live_bytes(n).unwrap(),
        |n, b| disk.set_bytes(n, b).unwrap(),
        ids[0],
    );
    let before = disk.live_bytes(&ledger_file_name(ids[0])).unwrap();
    let log = EntryLog::open_read_only(Arc::new(disk.clone()), LogConfig::default()).unwrap();
    assert_eq!(log.stats().fsyncs, 0);
    assert_eq!(log.read(ids[0], 3).unwrap().payload, payload(ids[0], 3));
    drop(log);
    assert_eq!(disk.live_bytes(&ledger_file_name(ids[0])).unwrap(), before);
}

#[test]
fn version_2_samples_have_no_slot_and_are_fsynced_at_every_open() {
    let dir = support::samples::sample_dir("ledger-v2");
    for _ in 0..2 {
        let storage = Arc::new(FileStorage::open(dir.path(), false).unwrap());
        let log = EntryLog::open(storage, LogConfig::default()).unwrap();
        assert!(log.ledger_info(1).unwrap().sealed);
        // One sealed and one unsealed ledger, neither able to carry the proof.
        assert_eq!((log.stats().fsyncs, log.stats().maps), (2, 0));
    }
    let dir = support::samples::sample_dir("ledger-v3");
    let expected = [1, 0];
    for fsyncs in expected {
        let storage = Arc::new(FileStorage::open(dir.path(), false).unwrap());
        let log = EntryLog::open(storage, LogConfig::default()).unwrap();
        // The sealed sample (an older seal, no proof) is synced once and proven; the unsealed
        // one's slot covers it whole.
        assert_eq!(log.stats().fsyncs, fsyncs);
        assert_eq!(log.read(1, 2).unwrap().payload, b"sealed entry 2");
    }
}

/// What a disk holds after a power cut once the kernel wrote back the pages overwritten in
/// place since their last fsync (the slots), with nothing of an unsynced tail: the state in
/// which a slot's claim is on disk and nothing written after the fsync it records is.
fn slot_written_back(disk: &MemStorage) -> MemStorage {
    disk.crash_image(|_, durable, live| {
        let mut out = durable.to_vec();
        let common = durable.len().min(live.len()).min(HEADER_V3_LEN);
        out[..common].copy_from_slice(&live[..common]);
        out
    })
}

/// Opens `image`, checks it against `model` and `verify`, then cuts the power right after the
/// open and checks that the next open sees the same ledgers, sealed the same, holding the
/// same entries, with nothing left to repair; and that a restart after the open without a power
/// cut fsyncs no sealed ledger.
fn check_image(image: &MemStorage, model: &Model, what: &str) {
    let verified = verify_log(image).unwrap();
    let log = EntryLog::open(Arc::new(image.clone()), LogConfig::default()).unwrap();
    model.check_recovered(&log);
    assert!(log.damaged_ledgers().is_empty(), "{what}");
    assert!(
        verified.iter().all(|p| p.torn_tail),
        "{what}: verify calls damage what open repairs: {verified:?}"
    );
    let repaired: std::collections::BTreeSet<u64> =
        log.recovery_report().iter().map(|r| r.ledger).collect();
    let torn: std::collections::BTreeSet<u64> = verified.iter().map(|p| p.ledger).collect();
    assert_eq!(repaired, torn, "{what}: open and verify disagree");
    let seen: Vec<_> = log
        .ledger_ids()
        .into_iter()
        .map(|id| {
            let info = log.ledger_info(id).unwrap();
            (id, info.sealed, info.entries)
        })
        .collect();
    drop(log);
    let after = image.durable_image();
    let log = EntryLog::open(Arc::new(after), LogConfig::default()).unwrap();
    let again: Vec<_> = log
        .ledger_ids()
        .into_iter()
        .map(|id| {
            let info = log.ledger_info(id).unwrap();
            (id, info.sealed, info.entries)
        })
        .collect();
    assert_eq!(
        again, seen,
        "{what}: a power cut after the open changed the ledgers"
    );
    assert!(log.recovery_report().is_empty(), "{what}");
    model.check_recovered(&log);
    drop(log);
    // A restart without a power cut finds every sealed ledger proven by the first open.
    let log = EntryLog::open(Arc::new(image.clone()), LogConfig::default()).unwrap();
    let unsealed = seen.iter().filter(|l| !l.1).count() as u64;
    assert!(
        log.stats().fsyncs <= unsealed,
        "{what}: a sealed ledger was fsynced again"
    );
}

#[test]
fn power_cut_at_every_step_and_tail_byte_of_a_seal_and_an_open_keeps_every_sealed_ledger() {
    // Prepared: an older directory (a sealed ledger without proof) and an unsealed ledger.
    fn prepare(disk: &MemStorage) -> Model {
        let log = EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap();
        let mut model = Model::default();
        let old = model.create(&log).unwrap();
        let open = model.create(&log).unwrap();
        for _ in 0..6 {
            model.append(&log, old).unwrap();
            model.append(&log, open).unwrap();
        }
        model.sync(&log, open).unwrap();
        model.seal(&log, old).unwrap();
        drop(log);
        strip_proof(
            |n| disk.live_bytes(n).unwrap(),
            |n, b| disk.set_bytes(n, b).unwrap(),
            old,
        );
        model
    }
    // Armed: an open (which proves the old ledger), appends, a sync and a seal; each image is
    // then opened twice by `check_image`.
    fn workload(disk: &MemStorage, mut model: Model) -> (Model, ackstore::Result<()>) {
        let mut run = || -> ackstore::Result<()> {
            let log = EntryLog::open(Arc::new(disk.clone()), LogConfig::default())?;
            let open = *model.ledgers.keys().last().unwrap();
            for _ in 0..5 {
                model.append(&log, open)?;
            }
            model.sync(&log, open)?;
            model.append(&log, open)?;
            model.seal(&log, open)?;
            Ok(())
        };
        let result = run();
        (model, result)
    }
    let mut images = 0;
    let clean = cut_everywhere_after(
        Points::every_in_release(3),
        prepare,
        workload,
        |disk, Cut { n, total }, (model, result)| {
            assert_eq!(result.is_ok(), n == total, "cut after {n}");
            disk.fail_after(None);
            let what = |kind: &str| format!("cut after {n} of {total} ({kind})");
            check_image(&disk.durable_image(), &model, &what("durable"));
            check_image(&slot_written_back(disk), &model, &what("slot written back"));
            for keep in 1..=unsynced_tail(disk) {
                check_image(
                    &torn_image(disk, |_| keep),
                    &model,
                    &what(&format!("tail {keep}")),
                );
                images += 1;
            }
        },
    );
    clean.result.1.unwrap();
    assert!(images > 0, "no cut left an unsynced tail");
}

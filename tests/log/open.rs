//! What an owner's open does with ledgers it finds sealed or half sealed: a failed map (on the
//! first read) is an error, never a reason to unseal, a footer left in the page cache is made
//! durable, a footer-shaped payload seals nothing, and a seal whose index page was lost is still
//! repaired.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ackstore::Error;
use ackstore::internals::format::ledger::{
    FRAME_HEADER_LEN, HEADER_V3_LEN, INDEX_OVERHEAD, LedgerHeader, SLOTS_AT, TRAILER_LEN,
    decode_header, encode_footer,
};
use ackstore::internals::log::{EntryLog, EntryMeta, LogConfig, RecoveryMode, ledger_file_name};
use ackstore::{FileStorage, MemStorage};
use support::hooked::Hooked;
use support::log_model::{meta, payload};

/// A disk with one ledger of `n` synced entries, sealed.
fn sealed_ledger(disk: &MemStorage, n: u64) -> u64 {
    let log = EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap();
    let id = log.create_ledger().unwrap();
    for i in 0..n {
        log.append(id, meta(i), &payload(id, i)).unwrap();
    }
    log.seal(id).unwrap();
    id
}

#[test]
fn a_failed_map_on_first_read_is_an_error_and_never_unseals_the_ledger() {
    let disk = MemStorage::new();
    let id = sealed_ledger(&disk, 3);
    let name = ledger_file_name(id);
    let before = disk.live_bytes(&name).unwrap();
    let hooked = Hooked::new(disk.clone());
    hooked.hooks.fail_map.store(true, Ordering::SeqCst);
    for read_only in [false, true] {
        let storage = Arc::new(hooked.clone());
        // Even this small ledger is read through a map.
        let config = LogConfig {
            map_sealed_from: 0,
            ..LogConfig::default()
        };
        let log = if read_only {
            EntryLog::open_read_only(storage, config)
        } else {
            EntryLog::open(storage, config)
        }
        .unwrap();
        // Open maps nothing; the first read maps, and its failure is the read's error.
        assert!(log.ledger_info(id).unwrap().sealed);
        let read = log.read(id, 0);
        assert!(matches!(read, Err(Error::Io { .. })), "{read:?}");
        assert!(log.ledger_info(id).unwrap().sealed);
        assert_eq!(
            disk.live_bytes(&name).unwrap(),
            before,
            "the footer was cut"
        );
    }
    hooked.hooks.fail_map.store(false, Ordering::SeqCst);
    let log = EntryLog::open(Arc::new(hooked), LogConfig::default()).unwrap();
    assert!(log.ledger_info(id).unwrap().sealed);
    assert!(log.recovery_report().is_empty());
    assert_eq!(log.read(id, 2).unwrap().payload, payload(id, 2));
}

#[test]
fn an_owners_open_makes_a_sealed_ledger_found_in_the_page_cache_durable() {
    let disk = MemStorage::new();
    let log = EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap();
    let id = log.create_ledger().unwrap();
    for i in 0..3 {
        log.append(id, meta(i), &payload(id, i)).unwrap();
    }
    log.sync(id).unwrap();
    // The seal writes its footer, then the process dies before the footer's fsync.
    disk.fail_after(Some(1));
    assert!(log.seal(id).is_err());
    disk.fail_after(None);
    drop(log);
    // The next owner finds the whole footer in the page cache: the ledger looks sealed ...
    let log = EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap();
    assert!(log.ledger_info(id).unwrap().sealed);
    assert!(log.recovery_report().is_empty());
    drop(log);
    // ... and it still is after a power cut.
    let log = EntryLog::open(Arc::new(disk.durable_image()), LogConfig::default()).unwrap();
    assert!(log.ledger_info(id).unwrap().sealed);
    assert!(log.recovery_report().is_empty());
    assert_eq!(log.entry_count(id).unwrap(), 3);
}

#[test]
fn a_payload_carrying_a_footer_does_not_seal_its_ledger() {
    // A producer's best guesses at the footer: unseeded, and seeded with a guessed nonce.
    for guess in [LedgerHeader::v1(1), LedgerHeader::new(1, 0)] {
        let dir = tempfile::tempdir().unwrap();
        let storage = Arc::new(FileStorage::open(dir.path(), false).unwrap());
        let log = EntryLog::open(storage.clone(), LogConfig::default()).unwrap();
        let id = log.create_ledger().unwrap();
        assert_eq!(id, guess.ledger_id);
        log.append(id, EntryMeta::default(), b"hello").unwrap();
        let o1 = (HEADER_V3_LEN + FRAME_HEADER_LEN + 5) as u64;
        let len = 100usize;
        let footer_len = INDEX_OVERHEAD + 8 * 2 + TRAILER_LEN;
        let data_end = o1 + FRAME_HEADER_LEN as u64 + len as u64 - footer_len as u64;
        let mut forged = vec![b'x'; len - footer_len];
        forged.extend(encode_footer(&guess, data_end, &[HEADER_V3_LEN as u64, o1]));
        log.append(id, EntryMeta::default(), &forged).unwrap();
        log.sync(id).unwrap();
        drop(log);
        let log = EntryLog::open(storage, LogConfig::default()).unwrap();
        let info = log.ledger_info(id).unwrap();
        assert!(!info.sealed && info.damaged.is_none(), "{info:?}");
        assert!(log.recovery_report().is_empty());
        assert_eq!(log.read(id, 1).unwrap().payload, forged);
        log.append(id, EntryMeta::default(), b"more").unwrap();
    }
}

#[test]
fn an_interrupted_seal_whose_index_page_was_lost_is_repaired_even_in_strict_mode() {
    let disk = MemStorage::new();
    let id = sealed_ledger(&disk, 4);
    let name = ledger_file_name(id);
    let bytes = disk.live_bytes(&name).unwrap();
    let data_end = HEADER_V3_LEN
        + (0..4)
            .map(|i| FRAME_HEADER_LEN + payload(id, i).len())
            .sum::<usize>();
    // The trailer reached the disk, the index before it did not (a hole reads as zeros), and
    // the seal never got to its last step, the slot claiming the sealed file.
    let mut holed = bytes.clone();
    holed[data_end..bytes.len() - TRAILER_LEN].fill(0);
    let nonce = decode_header(&bytes).unwrap().nonce;
    holed[SLOTS_AT..HEADER_V3_LEN]
        .copy_from_slice(&LedgerHeader::new(id, nonce).encode()[SLOTS_AT..HEADER_V3_LEN]);
    let image = disk.durable_image();
    image.set_bytes(&name, holed).unwrap();
    let strict = LogConfig {
        recovery: RecoveryMode::Strict,
        ..LogConfig::default()
    };
    let log = EntryLog::open(Arc::new(image.clone()), strict).unwrap();
    let info = log.ledger_info(id).unwrap();
    assert!(!info.sealed && info.damaged.is_none());
    assert_eq!(info.entries, 4);
    let report = log.recovery_report();
    assert_eq!(report.len(), 1);
    assert!(
        report[0].reason.starts_with("interrupted seal"),
        "{report:?}"
    );
    assert_eq!(report[0].offset, data_end as u64);
    log.seal(id).unwrap();
    drop(log);
    let log = EntryLog::open(Arc::new(image.durable_image()), strict).unwrap();
    assert!(log.ledger_info(id).unwrap().sealed);
    assert_eq!(image.live_bytes(&name).unwrap(), bytes);
}

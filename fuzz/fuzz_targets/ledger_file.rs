//! Arbitrary bytes as a ledger file: opened in both recovery modes and read-only, every entry
//! read and the file verified. Nothing may panic, and no allocation may exceed the input by more
//! than a fixed read-ahead window.
//!
//! The first byte picks how the rest is used: even, the bytes are the file itself; odd, they
//! describe a valid ledger (version 3 with a nonce taken from the input, its synced-length slot
//! claiming the header or every frame, or version 1; entries, sealed or not) that is then damaged
//! and cut, so the fuzzer reaches the frame, slot and footer checks without having to forge
//! checksums.
//!
//! Besides "no panic", a tolerant owner open must succeed whatever the bytes (a damaged ledger
//! opens damaged), and every entry it reports is readable or [`ackstore::Error::Corrupted`].

#![no_main]

use std::sync::Arc;

use ackstore::internals::format::ledger::{EntryMeta, LedgerHeader, encode_footer, encode_frame};
use ackstore::internals::log::{
    EntryLog, LogConfig, RecoveryMode, ledger_file_name, verify_ledger,
};
use ackstore::{MemStorage, Storage};
use libfuzzer_sys::fuzz_target;

const LEDGER: u64 = 1;

/// A valid ledger described by `data`, then damaged by it.
fn damaged_ledger(data: &[u8]) -> Vec<u8> {
    let (&shape, rest) = data.split_first().unwrap_or((&0, &[]));
    let entries = usize::from(shape % 8);
    let (lens, rest) = rest.split_at(rest.len().min(entries));
    let h = if shape & 0x10 != 0 {
        LedgerHeader::v1(LEDGER)
    } else {
        LedgerHeader::new(LEDGER, u64::from(shape).wrapping_mul(0x9e37_79b9_7f4a_7c15))
    };
    let mut file = h.encode();
    let mut offsets = Vec::new();
    for (i, len) in lens.iter().enumerate() {
        let id = i as u64;
        let meta = EntryMeta {
            index: id,
            num_messages: 1,
            timestamp: id,
        };
        offsets.push(file.len() as u64);
        let payload = vec![*len; usize::from(*len)];
        file.extend(encode_frame(&h, id, 0, meta, &payload).unwrap_or_default());
    }
    if shape & 0x20 != 0 && h.has_synced_slots() {
        // Every frame synced: damage below this length is corruption, not a torn tail.
        let slot = h.encode_slot(0, file.len() as u64);
        let at = usize::try_from(LedgerHeader::slot_offset(0)).unwrap_or(0);
        if let Some(dst) = file.get_mut(at..at + slot.len()) {
            dst.copy_from_slice(&slot);
        }
    }
    if shape & 0x08 != 0 {
        let data_end = file.len() as u64;
        file.extend(encode_footer(&h, data_end, &offsets));
    }
    // Then (position, xor) pairs, and a final byte that may cut the file.
    let mut pairs = rest.chunks_exact(3);
    for pair in &mut pairs {
        let at = usize::from(u16::from_le_bytes([pair[0], pair[1]]));
        if let Some(b) = file.get_mut(at) {
            *b ^= pair[2];
        }
    }
    if let Some(&cut) = pairs.remainder().first() {
        let keep = file.len().saturating_sub(usize::from(cut));
        file.truncate(keep);
    }
    file
}

fn open_and_read_all(disk: &MemStorage, config: LogConfig, read_only: bool) {
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let opened = if read_only {
        EntryLog::open_read_only(storage, config)
    } else {
        EntryLog::open(storage, config)
    };
    let Ok(log) = opened else { return };
    for id in log.ledger_ids() {
        let count = log.entry_count(id).unwrap_or(0);
        for entry in 0..count {
            let _ = log.read(id, entry);
            let _ = log.read_meta(id, entry);
        }
        let _ = log.read(id, count);
        let _ = log.ledger_info(id);
    }
}

fuzz_target!(|data: &[u8]| {
    let file = match data.split_first() {
        Some((mode, rest)) if mode & 1 == 1 => damaged_ledger(rest),
        Some((_, rest)) => rest.to_vec(),
        None => Vec::new(),
    };
    let disk = MemStorage::new();
    let Ok(f) = disk.create(&ledger_file_name(LEDGER)) else {
        return;
    };
    if f.write_all_at(&file, 0).is_err() {
        return;
    }
    let _ = verify_ledger(&disk, LEDGER);
    let strict = LogConfig {
        recovery: RecoveryMode::Strict,
        ..LogConfig::default()
    };
    open_and_read_all(&disk, LogConfig::default(), true);
    // A sealed ledger this small is read by position by default; through a map here.
    let mapped = LogConfig {
        map_sealed_from: 0,
        ..LogConfig::default()
    };
    open_and_read_all(&disk, mapped, true);
    open_and_read_all(&disk, strict, false);
    open_and_read_all(&disk, LogConfig::default(), false);
    // After a tolerant open repaired it, the file must open cleanly, and every entry it holds
    // reads back or is reported corrupted.
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let log = EntryLog::open(storage, LogConfig::default()).expect("a tolerant open succeeds");
    assert!(
        log.recovery_report().is_empty(),
        "a repaired ledger needs no repair"
    );
    for id in log.ledger_ids() {
        for entry in 0..log.entry_count(id).unwrap_or(0) {
            match log.read(id, entry) {
                Ok(_) | Err(ackstore::Error::Corrupted { .. }) => {}
                Err(e) => panic!("entry {entry}: {e}"),
            }
        }
    }
});

//! An arbitrary sequence of cursor operations (ack, ack range, advance mark-delete, flush,
//! forced rollover, reopen) with power cuts at arbitrary points (after any storage operation,
//! keeping any prefix of the unsynced tail): after every cut the recovered cursor holds every ack
//! of the last successful flush and no ack that was never made.

#![no_main]

#[path = "../../tests/support/crash.rs"]
mod crash;
#[path = "../../tests/support/cursor_ledger.rs"]
mod persist_common;

use ackstore::MemStorage;
use ackstore::Position;
use ackstore::{CursorConfig, PersistMode};
use crash::torn_image;
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use persist_common::{Model, Op, check_image, run_with, tight_config};

/// One segment of operations, ended by a power cut after `cut_after` storage operations that
/// keeps `torn` bytes of each file's unsynced tail.
struct Segment {
    ops: Vec<Op>,
    cut_after: u64,
    torn: usize,
}

fn op(u: &mut Unstructured<'_>, md: &mut Position) -> Result<Op> {
    let ledger = 1 + u64::from(u.int_in_range(0..=2u8)?);
    let chunk = [0u64, 1, 9][usize::from(u.int_in_range(0..=2u8)?)];
    let entry = (chunk << 16) + u64::from(u.int_in_range(0..=63u8)?);
    Ok(match u.int_in_range(0..=9u8)? {
        0..=3 => Op::Ack(Position::new(ledger, entry)),
        4 => Op::AckRange(ledger, entry, entry + u64::from(u.int_in_range(0..=40u8)?)),
        5 => {
            *md = Position::new(
                md.ledger_id,
                md.entry_id + u64::from(u.int_in_range(1..=9u8)?),
            );
            Op::Advance(*md)
        }
        6 | 7 => Op::Flush,
        8 => Op::Rollover,
        _ => Op::Reopen,
    })
}

fn segments(u: &mut Unstructured<'_>) -> Result<Vec<Segment>> {
    let mut md = Position::new(1, 0);
    let mut out = Vec::new();
    for _ in 0..u.int_in_range(1..=3u8)? {
        let mut ops = Vec::new();
        for _ in 0..u.int_in_range(0..=40u8)? {
            ops.push(op(u, &mut md)?);
        }
        out.push(Segment {
            ops,
            cut_after: u64::from(u.int_in_range(0..=250u8)?),
            torn: usize::from(u.int_in_range(0..=300u16)?),
        });
    }
    Ok(out)
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(single) = u.arbitrary::<bool>() else {
        return;
    };
    let Ok(segments) = segments(&mut u) else {
        return;
    };
    let config = CursorConfig {
        persist_mode: if single {
            PersistMode::SingleEntry
        } else {
            PersistMode::MultiEntry
        },
        ..tight_config()
    };
    let mut disk = MemStorage::new();
    let mut upper = Model::default();
    for (i, segment) in segments.iter().enumerate() {
        disk.fail_after(Some(segment.cut_after));
        let outcome = run_with(&disk, &config, &segment.ops, upper);
        let image = torn_image(&disk, |_| segment.torn);
        check_image(&image, &config, &outcome, &format!("segment {i}"));
        upper = outcome.upper;
        disk = image;
    }
});

//! Read-only verification of ledger files, for `ackstore verify`.
//!
//! Owns: walking every frame of a ledger and listing every problem instead of stopping at the
//! first. Must never write, truncate, lock or map a file: it reads through positioned reads only,
//! so an owner writing a sealed ledger's synced-length slot meanwhile changes no mapped bytes.

use super::ledger_file_name;
use super::parse_ledger_file_name;
use super::recover::{
    AfterDamage, HeaderCheck, Window, after_damage, check_header, footer_at, next_whole_frame,
    recorded_synced, scan_frames, sealed_before_zeros, try_sealed,
};
use crate::error::{CorruptionKind, Error, Result};
use crate::format::ledger::{LedgerHeader, SealedLayout, decode_entry_frame};
use crate::storage::Storage;

/// One problem found in a ledger file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameProblem {
    /// The ledger.
    pub ledger: u64,
    /// The entry expected at `offset`; `None` for the header or footer.
    pub entry: Option<u64>,
    /// Byte offset of the bad bytes.
    pub offset: u64,
    /// What is wrong.
    pub kind: CorruptionKind,
    /// True when it is a torn tail (or an interrupted create or seal) that opening the log
    /// repairs; false when it is corruption of bytes that had been synced.
    pub torn_tail: bool,
}

/// Walks every frame of `ledger` in `storage` and lists every problem (empty: the ledger is
/// sound). Reads only; needs no lock. [`Error::Io`] only when the file cannot be read.
pub fn verify_ledger(storage: &dyn Storage, ledger: u64) -> Result<Vec<FrameProblem>> {
    let file = storage.open(&ledger_file_name(ledger))?;
    let mut win = Window::new(file.as_ref())?;
    let problem = |entry, offset, kind, torn_tail| FrameProblem {
        ledger,
        entry,
        offset,
        kind,
        torn_tail,
    };
    let h = match check_header(&mut win, ledger) {
        Ok(HeaderCheck::Valid(h)) => h,
        Ok(HeaderCheck::InterruptedCreate) => {
            return Ok(vec![problem(None, 0, CorruptionKind::Truncated, true)]);
        }
        // Without a header there is no nonce to check frames with.
        Err(Error::Corrupted { kind, .. }) => return Ok(vec![problem(None, 0, kind, false)]),
        Err(e) => return Err(e),
    };
    let mut problems = Vec::new();
    if let Some(sealed) = try_sealed(file.as_ref(), &h, win.size())? {
        verify_sealed_frames(&mut win, &h, &sealed.layout, &mut problems)?;
        return Ok(problems);
    }
    let synced = recorded_synced(&mut win, &h)?;
    let mut from = h.data_start();
    let mut first_entry = 0;
    loop {
        let scan = scan_frames(&mut win, &h, from, first_entry)?;
        let at = scan.end;
        let expected = first_entry + scan.offsets.len() as u64;
        let Some(damage) = scan.damage else {
            if at < synced {
                // The file ends below a length a finished fsync covered.
                problems.push(problem(
                    Some(expected),
                    at,
                    CorruptionKind::Truncated,
                    false,
                ));
            }
            break;
        };
        if from == h.data_start()
            && let Some((sealed, footer_end)) =
                sealed_before_zeros(&mut win, file.as_ref(), &h, at, expected)?
        {
            // A sealed ledger followed by zeros: open cuts the zeros and keeps it sealed.
            problems.push(problem(
                None,
                footer_end,
                CorruptionKind::InvalidField("zero-filled tail"),
                true,
            ));
            verify_sealed_frames(&mut win, &h, &sealed, &mut problems)?;
            return Ok(problems);
        }
        match after_damage(&mut win, &h, at, expected, synced)? {
            AfterDamage::InterruptedSeal => {
                problems.push(problem(
                    None,
                    at,
                    CorruptionKind::InvalidField("footer"),
                    true,
                ));
                break;
            }
            AfterDamage::TornTail => {
                problems.push(problem(Some(expected), at, damage.kind, true));
                break;
            }
            AfterDamage::Corruption => {
                // At the end of the frames, a footer that does not verify (or bytes after it)
                // is named as such: every frame before it is whole.
                let kind = if footer_at(&mut win, &h, at, expected)? {
                    CorruptionKind::InvalidField("footer")
                } else {
                    damage.kind
                };
                problems.push(problem(Some(expected), at, kind, false));
            }
        }
        match next_whole_frame(&mut win, &h, at, expected)? {
            Some((offset, header)) => {
                from = offset;
                first_entry = header.entry_id;
            }
            None => break,
        }
    }
    Ok(problems)
}

/// Checks every frame of the sealed ledger of layout `sealed` through `win`, pushing each bad
/// one to `problems` (a sealed ledger's frames were synced before its footer: corruption).
fn verify_sealed_frames(
    win: &mut Window<'_>,
    h: &LedgerHeader,
    sealed: &SealedLayout,
    problems: &mut Vec<FrameProblem>,
) -> Result<()> {
    // The index, read once (its checksum was verified); frames are read through the window.
    let index_at = sealed.offsets_start;
    let index_len = sealed.entry_count.saturating_mul(8);
    let index = win.get(index_at, index_len)?.unwrap_or_default().to_vec();
    let offset = |i: u64| -> Option<u64> {
        let at = usize::try_from(i.checked_mul(8)?).ok()?;
        Some(u64::from_le_bytes(index.get(at..at + 8)?.try_into().ok()?))
    };
    for id in 0..sealed.entry_count {
        let end = if id + 1 == sealed.entry_count {
            Some(sealed.data_end)
        } else {
            offset(id + 1)
        };
        let Some((start, end)) = offset(id).zip(end) else {
            continue;
        };
        let frame = win
            .get(start, end.saturating_sub(start))?
            .unwrap_or_default();
        // Named at the frame's start, whichever field within it failed.
        if let Err(c) = decode_entry_frame(h, frame, id) {
            problems.push(FrameProblem {
                ledger: h.ledger_id,
                entry: Some(id),
                offset: start,
                kind: c.kind,
                torn_tail: false,
            });
        }
    }
    Ok(())
}

/// [`verify_ledger`] for every ledger file in `storage`, in id order.
pub fn verify_log(storage: &dyn Storage) -> Result<Vec<FrameProblem>> {
    let mut problems = Vec::new();
    for name in storage.list()? {
        if let Some(id) = parse_ledger_file_name(&name) {
            problems.extend(verify_ledger(storage, id)?);
        }
    }
    Ok(problems)
}

//! Read-only verification of ledger files, for `ackstore verify`.
//!
//! Owns: walking every frame of a ledger and listing every problem instead of stopping at the
//! first. Must never write, truncate, lock or map a file that is not sealed.

use super::ledger_file_name;
use super::parse_ledger_file_name;
use super::recover::{
    HeaderCheck, Window, check_header, looks_like_footer, next_whole_frame, scan_frames, try_sealed,
};
use crate::error::{CorruptionKind, Error, Result};
use crate::format::ledger::{HEADER_LEN, decode_entry_frame};
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
    let mut problems = Vec::new();
    match check_header(&mut win, ledger) {
        Ok(HeaderCheck::Valid) => {}
        Ok(HeaderCheck::InterruptedCreate) => {
            return Ok(vec![problem(None, 0, CorruptionKind::Truncated, true)]);
        }
        Err(Error::Corrupted { kind, .. }) => problems.push(problem(None, 0, kind, false)),
        Err(e) => return Err(e),
    }
    if let Some(sealed) = try_sealed(&mut win, file.as_ref(), ledger)? {
        let bytes = (*sealed.map).as_ref();
        for id in 0..sealed.layout.entry_count {
            let Some((start, end)) = sealed.layout.frame_range(bytes, id) else {
                continue;
            };
            let frame = usize::try_from(start)
                .ok()
                .zip(usize::try_from(end).ok())
                .and_then(|(s, e)| bytes.get(s..e))
                .unwrap_or_default();
            if let Err(kind) = decode_entry_frame(frame, id) {
                problems.push(problem(Some(id), start, kind, false));
            }
        }
        return Ok(problems);
    }
    let mut from = HEADER_LEN as u64;
    let mut first_entry = 0;
    loop {
        let scan = scan_frames(&mut win, from, first_entry)?;
        let Some(damage) = scan.damage else { break };
        let at = scan.end;
        let expected = first_entry + scan.offsets.len() as u64;
        if looks_like_footer(&mut win, at)? {
            problems.push(problem(
                None,
                at,
                CorruptionKind::InvalidField("footer"),
                true,
            ));
            break;
        }
        let synced_after = next_whole_frame(&mut win, at, expected, Some(at))?.is_some();
        problems.push(problem(Some(expected), at, damage.kind, !synced_after));
        match next_whole_frame(&mut win, at, expected, None)? {
            Some((offset, header)) => {
                from = offset;
                first_entry = header.entry_id;
            }
            None => break,
        }
    }
    Ok(problems)
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

//! Opening one ledger file: header check, sealed fast path, frame scan and torn-tail repair.
//!
//! Owns: the rules that tell a torn tail (a crash during unsynced appends, a create or a seal)
//! from corruption (damage to bytes that had been made durable). Must never cut bytes that a
//! finished fsync covered without reporting corruption, never allocate more than the file
//! holds, and never write in read-only mode.
//!
//! The rule: the scan stops at the first frame that is not whole (zero-filled, cut short,
//! failing its checksum, or out of sequence), at offset `x`. If some later whole frame carries a
//! durable mark above `x`, the bytes at `x` had been synced before that frame was written, so the
//! damage is corruption. Otherwise everything from `x` on was unsynced when the power failed:
//! a torn tail, cut back to `x` (or refused under [`RecoveryMode::Strict`]).

use std::sync::Arc;

use super::ledger::{Ledger, Sealed};
use super::{LogStatsCounters, RecoveryMode, TailRepair, ledger_file_name};
use crate::error::{CorruptionKind, Error, Result};
use crate::format::ledger::{
    FRAME_HEADER_LEN, FrameHeader, HEADER_LEN, INDEX_MAGIC, TRAILER_LEN, check_frame,
    decode_frame_header, decode_header, decode_trailer, encode_header, footer_len, is_zero,
};
use crate::storage::{Storage, StorageFile};

/// Bytes read from the file at a time while scanning.
const CHUNK: u64 = 1 << 20;

/// A read-ahead window over a file, so a scan costs one read per chunk, not two per frame.
pub(crate) struct Window<'a> {
    file: &'a dyn StorageFile,
    size: u64,
    start: u64,
    buf: Vec<u8>,
}

impl<'a> Window<'a> {
    pub(crate) fn new(file: &'a dyn StorageFile) -> Result<Self> {
        Ok(Self {
            size: file.size()?,
            file,
            start: 0,
            buf: Vec::new(),
        })
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Bytes `[off, off + len)`, or `None` when they reach past the end of the file.
    pub(crate) fn get(&mut self, off: u64, len: u64) -> Result<Option<&[u8]>> {
        let Some(end) = off.checked_add(len).filter(|e| *e <= self.size) else {
            return Ok(None);
        };
        let buffered_end = self.start + self.buf.len() as u64;
        if off < self.start || end > buffered_end {
            let want = len.max(CHUNK).min(self.size - off);
            let want = usize::try_from(want).map_err(|_| too_big(self.size))?;
            self.buf.resize(want, 0);
            self.file.read_exact_at(&mut self.buf, off)?;
            self.start = off;
        }
        let from = usize::try_from(off - self.start).map_err(|_| too_big(self.size))?;
        let to = usize::try_from(end - self.start).map_err(|_| too_big(self.size))?;
        Ok(self.buf.get(from..to))
    }
}

fn too_big(size: u64) -> Error {
    Error::Unsupported(format!(
        "a ledger file of {size} bytes does not fit in memory"
    ))
}

/// Why a scan stopped before the end of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Damage {
    pub(crate) kind: CorruptionKind,
    pub(crate) zero_filled: bool,
}

impl Damage {
    fn reason(&self) -> String {
        if self.zero_filled {
            "zero-filled tail".to_string()
        } else if self.kind == CorruptionKind::Truncated {
            "partial frame".to_string()
        } else {
            format!("last frame failed verification ({})", self.kind)
        }
    }
}

/// The whole frames found from some offset on.
pub(crate) struct Scan {
    pub(crate) offsets: Vec<u64>,
    /// End of the last whole frame.
    pub(crate) end: u64,
    pub(crate) damage: Option<Damage>,
}

/// Reads whole frames from `from` on, expecting entry ids `first_entry`, `first_entry + 1`, ...
/// and stops at the end of the file or at the first frame that is not whole.
pub(crate) fn scan_frames(win: &mut Window<'_>, from: u64, first_entry: u64) -> Result<Scan> {
    let mut scan = Scan {
        offsets: Vec::new(),
        end: from,
        damage: None,
    };
    let size = win.size();
    while scan.end < size {
        let off = scan.end;
        let expected = first_entry + scan.offsets.len() as u64;
        let problem = match whole_frame_at(win, off)? {
            Ok(h) if h.entry_id != expected => Some(Damage {
                kind: CorruptionKind::InvalidField("entry_id"),
                zero_filled: false,
            }),
            Ok(h) => {
                scan.offsets.push(off);
                scan.end = off + h.frame_len();
                None
            }
            Err(damage) => Some(damage),
        };
        if problem.is_some() {
            scan.damage = problem;
            break;
        }
    }
    Ok(scan)
}

/// The frame at `off` if it is whole (fits, checksum matches, mark not past its own start).
fn whole_frame_at(win: &mut Window<'_>, off: u64) -> Result<Result<FrameHeader, Damage>> {
    let avail = win.size() - off;
    let head_len = avail.min(FRAME_HEADER_LEN as u64);
    let head = win.get(off, head_len)?.unwrap_or_default();
    let zero_filled = is_zero(head);
    let damage = |kind| Ok(Err(Damage { kind, zero_filled }));
    if zero_filled {
        return damage(CorruptionKind::InvalidField("zero-filled frame"));
    }
    let Ok(header) = decode_frame_header(head) else {
        return damage(CorruptionKind::Truncated);
    };
    if header.frame_len() > avail {
        return damage(CorruptionKind::Truncated);
    }
    let frame = win.get(off, header.frame_len())?.unwrap_or_default();
    if let Err(kind) = check_frame(&header, frame) {
        return damage(kind);
    }
    if header.durable_mark > off {
        return damage(CorruptionKind::InvalidField("durable_mark"));
    }
    Ok(Ok(header))
}

/// The first whole frame after `from` whose entry id is at least `min_entry` (and could follow
/// `min_entry - 1` frames of at least a header each) and, when `mark_above` is given, whose
/// durable mark is above it.
pub(crate) fn next_whole_frame(
    win: &mut Window<'_>,
    from: u64,
    min_entry: u64,
    mark_above: Option<u64>,
) -> Result<Option<(u64, FrameHeader)>> {
    let size = win.size();
    let mut y = from + 1;
    while y + FRAME_HEADER_LEN as u64 <= size {
        let head = win.get(y, FRAME_HEADER_LEN as u64)?.unwrap_or_default();
        if let (false, Ok(h)) = (is_zero(head), decode_frame_header(head)) {
            let plausible = h.entry_id >= min_entry
                && h.entry_id - min_entry <= (y - from) / FRAME_HEADER_LEN as u64
                && mark_above.is_none_or(|m| h.durable_mark > m)
                && h.frame_len() <= size - y;
            if plausible && matches!(whole_frame_at(win, y)?, Ok(found) if found == h) {
                return Ok(Some((y, h)));
            }
        }
        y += 1;
    }
    Ok(None)
}

/// Whether the bytes from `at` to the end are (a prefix of) a footer: an interrupted seal.
pub(crate) fn looks_like_footer(win: &mut Window<'_>, at: u64) -> Result<bool> {
    let n = (win.size() - at).min(INDEX_MAGIC.len() as u64);
    let bytes = win.get(at, n)?.unwrap_or_default();
    Ok(n > 0 && INDEX_MAGIC.starts_with(bytes))
}

/// What the first bytes of a ledger file hold.
pub(crate) enum HeaderCheck {
    Valid,
    /// The file is no longer than a header and holds only part of the expected one (the rest
    /// zero): a crash during `create_ledger`, before it returned.
    InterruptedCreate,
}

/// Checks the file header against the ledger id taken from the file name.
pub(crate) fn check_header(win: &mut Window<'_>, ledger: u64) -> Result<HeaderCheck> {
    let size = win.size();
    let bytes = win.get(0, size.min(HEADER_LEN as u64))?.unwrap_or_default();
    let expected = encode_header(ledger);
    if size <= HEADER_LEN as u64
        && bytes != expected
        && bytes.iter().zip(expected).all(|(b, e)| *b == 0 || *b == e)
    {
        return Ok(HeaderCheck::InterruptedCreate);
    }
    match decode_header(bytes) {
        Ok(id) if id == ledger => Ok(HeaderCheck::Valid),
        Ok(_) => Err(Error::corrupted(
            ledger,
            0,
            CorruptionKind::InvalidField("ledger_id"),
        )),
        Err(kind) => Err(Error::corrupted(ledger, 0, kind)),
    }
}

/// The sealed view of the file, when its trailer is whole and matches the file length.
pub(crate) fn try_sealed(
    win: &mut Window<'_>,
    file: &dyn StorageFile,
    ledger: u64,
) -> Result<Option<Sealed>> {
    let size = win.size();
    let Some(at) = size.checked_sub(TRAILER_LEN as u64) else {
        return Ok(None);
    };
    let bytes = win.get(at, TRAILER_LEN as u64)?.unwrap_or_default();
    let Ok(t) = decode_trailer(bytes) else {
        return Ok(None);
    };
    let fits = footer_len(t.entry_count).and_then(|f| f.checked_add(t.data_end)) == Some(size);
    if t.ledger_id != ledger || !fits {
        return Ok(None);
    }
    // Only now, with a whole trailer promising a sealed (never again written) file, map it.
    Ok(Sealed::map(file, ledger).ok())
}

/// The result of opening one ledger file.
pub(crate) enum Opened {
    Ledger(Arc<Ledger>, Option<TailRepair>),
    /// An interrupted create: the file is (or, read-only, would be) removed.
    Discarded(TailRepair),
}

/// Opens ledger `ledger`, repairing (owner) or only reporting (read-only) a torn tail.
pub(crate) fn open_ledger(
    storage: &dyn Storage,
    ledger: u64,
    mode: RecoveryMode,
    read_only: bool,
    stats: &LogStatsCounters,
) -> Result<Opened> {
    let name = ledger_file_name(ledger);
    let file = storage.open(&name)?;
    let mut win = Window::new(file.as_ref())?;
    let size = win.size();
    if let HeaderCheck::InterruptedCreate = check_header(&mut win, ledger)? {
        if !read_only {
            storage.remove(&name)?;
            storage.sync_dir()?;
        }
        return Ok(Opened::Discarded(TailRepair {
            ledger,
            offset: 0,
            dropped_bytes: size,
            reason: "interrupted create: the file holds only part of its header".into(),
        }));
    }
    if let Some(sealed) = try_sealed(&mut win, file.as_ref(), ledger)? {
        return Ok(Opened::Ledger(
            Arc::new(Ledger::sealed(ledger, file, sealed)),
            None,
        ));
    }
    let scan = scan_frames(&mut win, HEADER_LEN as u64, 0)?;
    let end = scan.end;
    let repair = match scan.damage {
        None => None,
        Some(_) if looks_like_footer(&mut win, end)? => Some(TailRepair {
            ledger,
            offset: end,
            dropped_bytes: size - end,
            reason: "interrupted seal: the footer is incomplete; the ledger is unsealed \
                     and can be sealed again"
                .into(),
        }),
        Some(damage) => {
            let expected = scan.offsets.len() as u64;
            if next_whole_frame(&mut win, end, expected, Some(end))?.is_some() {
                return Err(Error::corrupted(ledger, end, damage.kind));
            }
            if mode == RecoveryMode::Strict {
                return Err(Error::TornTail {
                    ledger,
                    offset: end,
                    dropped_bytes: size - end,
                });
            }
            Some(TailRepair {
                ledger,
                offset: end,
                dropped_bytes: size - end,
                reason: damage.reason(),
            })
        }
    };
    drop(win);
    if !read_only {
        if repair.is_some() {
            file.set_len(end)?;
        }
        // Whatever a crashed process left in the page cache becomes durable now, so the marks
        // of frames appended from here on are true.
        file.sync_data()?;
        stats
            .fsyncs
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(Opened::Ledger(
        Arc::new(Ledger::unsealed(ledger, file, scan.offsets, end)),
        repair,
    ))
}

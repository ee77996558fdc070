//! Opening one ledger file: header check, sealed fast path, frame scan and torn-tail repair.
//!
//! Owns: the rules that tell a torn tail (a crash during unsynced appends, a create or a seal)
//! from corruption (damage to bytes that had been made durable). Must never cut bytes that a
//! finished fsync covered without reporting corruption, never allocate more than the file
//! holds, and never write in read-only mode.
//!
//! The rule: the scan stops at the first frame that is not whole (zero-filled, cut short,
//! failing its checksum, or out of sequence), at offset `x`. Then:
//! - a valid trailer at the end of the file whose `data_end` is `x` (its index may be missing,
//!   whole or in part), or the start of an index block at `x`, is an interrupted seal: the
//!   footer is cut and the ledger is unsealed;
//! - a valid trailer whose `data_end` lies beyond `x`, or a whole frame after `x` whose
//!   `durable_mark` lies beyond `x`, proves that the bytes at `x` had been synced (a seal syncs
//!   the frames before it writes the footer; a mark is a length a finished fsync covered):
//!   corruption. The ledger opens *damaged* (its whole entries before `x` readable, everything
//!   else an error, writes refused), or, under [`RecoveryMode::Strict`], open fails;
//! - otherwise nothing proves the bytes from `x` on were synced: a torn tail, cut back to `x`
//!   (or refused under [`RecoveryMode::Strict`]). Whole frames after `x` whose marks stop at or
//!   before `x` are cut with it: they were written after the last sync the file records, and a
//!   power cut may keep any subset of such unsynced pages (write-back does not follow write
//!   order), so a lost page followed by whole frames is the normal end of an unsynced batch.
//!
//! The synced length is the larger of the header's synced-length slot (version 3: written right
//! after each fsync returns, so it covers the last synced batch too once it reaches the disk)
//! and the frames' marks. Damage below it, or a file cut short below it, is corruption, checked
//! first; beyond it the rules above apply. A version 1 or 2 file has no slot: its last synced
//! batch, with no frame appended after its sync, is covered by no mark, and damage inside it is
//! cut as a torn tail (reported, never silent).
//!
//! Because every checksum is seeded with the ledger's nonce (format version 2), payload bytes
//! cannot pass for a frame or a trailer here.
//!
//! A zero-filled run is skipped in one step (no frame header is all zero), using the storage's
//! hole map where it has one, so a zero-filled or sparse tail of any length costs at most one
//! memory scan.

use std::sync::Arc;

use super::ledger::Ledger;
use super::{LogStatsCounters, RecoveryMode, TailRepair, ledger_file_name};
use crate::error::{CorruptionKind, CorruptionPlace, Error, Result};
use crate::format::Corruption;
use crate::format::ledger::{
    EntryMeta, FRAME_HEADER_LEN, FrameHeader, HEADER_FIXED_LEN, HEADER_V3_LEN, INDEX_MAGIC,
    LedgerHeader, SLOT_COPIES, SLOT_LEN, SLOTS_AT, SealedLayout, TRAILER_LEN, Trailer, VERSION,
    VERSION_2, check_frame, check_last_frame, check_sealed_index, check_sealed_trailer,
    decode_entry_frame, decode_frame_header, decode_header, first_nonzero, footer_len,
    header_fixed_part, index_last_offset_at, is_zero, trailer_of,
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
        Ok(Self::with_size(file, file.size()?))
    }

    /// A window over `file` whose size the caller has just read (one stat less on storage
    /// where a stat is a round trip).
    pub(crate) fn with_size(file: &'a dyn StorageFile, size: u64) -> Self {
        Self {
            size,
            file,
            start: 0,
            buf: Vec::new(),
        }
    }

    /// A window over `file` holding `end`, its last bytes as read (the file's size is the one
    /// they were read by).
    fn holding(file: &'a dyn StorageFile, end: End) -> Self {
        Self {
            size: end.size(),
            file,
            start: end.start,
            buf: end.bytes,
        }
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

impl Window<'_> {
    /// The first offset at or after `off` holding a nonzero byte, or the file's size when none
    /// does. Holes the storage reports are skipped unread; other bytes are scanned a window
    /// at a time, so a zero-filled tail of any length costs one memory scan at most.
    pub(crate) fn first_nonzero_from(&mut self, mut off: u64) -> Result<u64> {
        while off < self.size {
            off = off.max(self.file.data_from(off)?.min(self.size));
            if off >= self.size {
                break;
            }
            let buffered_end = self.start + self.buf.len() as u64;
            let len = if off >= self.start && off < buffered_end {
                buffered_end - off
            } else {
                CHUNK.min(self.size - off)
            };
            let bytes = self.get(off, len)?.unwrap_or_default();
            if bytes.is_empty() {
                break;
            }
            match first_nonzero(bytes) {
                Some(i) => return Ok(off + i as u64),
                None => off += bytes.len() as u64,
            }
        }
        Ok(self.size)
    }
}

fn too_big(size: u64) -> Error {
    Error::Unsupported {
        what: format!("a ledger file of {size} bytes does not fit in memory"),
    }
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
    /// The largest `durable_mark` of the whole frames (0 when there are none).
    pub(crate) max_mark: u64,
    pub(crate) damage: Option<Damage>,
}

/// Reads whole frames from `from` on, expecting entry ids `first_entry`, `first_entry + 1`, ...
/// and stops at the end of the file or at the first frame that is not whole.
pub(crate) fn scan_frames(
    win: &mut Window<'_>,
    h: &LedgerHeader,
    from: u64,
    first_entry: u64,
) -> Result<Scan> {
    let mut scan = Scan {
        offsets: Vec::new(),
        end: from,
        max_mark: 0,
        damage: None,
    };
    let size = win.size();
    while scan.end < size {
        let off = scan.end;
        let expected = first_entry + scan.offsets.len() as u64;
        let problem = match whole_frame_at(win, h, off)? {
            Ok(f) if f.entry_id != expected => Some(Damage {
                kind: CorruptionKind::InvalidField("entry_id"),
                zero_filled: false,
            }),
            Ok(f) => {
                scan.offsets.push(off);
                scan.max_mark = scan.max_mark.max(f.durable_mark);
                scan.end = off + f.frame_len();
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
fn whole_frame_at(
    win: &mut Window<'_>,
    h: &LedgerHeader,
    off: u64,
) -> Result<Result<FrameHeader, Damage>> {
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
    if let Err(c) = check_frame(h, &header, frame) {
        return damage(c.kind);
    }
    if header.durable_mark > off {
        return damage(CorruptionKind::InvalidField("durable_mark"));
    }
    Ok(Ok(header))
}

/// The first whole frame after `from` whose entry id is at least `min_entry` and could follow
/// `min_entry - 1` frames of at least a header each.
pub(crate) fn next_whole_frame(
    win: &mut Window<'_>,
    h: &LedgerHeader,
    from: u64,
    min_entry: u64,
) -> Result<Option<(u64, FrameHeader)>> {
    let size = win.size();
    let mut y = from + 1;
    while y + FRAME_HEADER_LEN as u64 <= size {
        let head = win.get(y, FRAME_HEADER_LEN as u64)?.unwrap_or_default();
        if is_zero(head) {
            // No frame header is all zero, so no frame starts before the next nonzero byte
            // `z` can fall inside its header: jump over the zero run in one step.
            let z = win.first_nonzero_from(y)?;
            y = (z + 1).saturating_sub(FRAME_HEADER_LEN as u64).max(y + 1);
            continue;
        }
        if let Ok(f) = decode_frame_header(head) {
            let plausible = f.entry_id >= min_entry
                && f.entry_id - min_entry <= (y - from) / FRAME_HEADER_LEN as u64
                && f.frame_len() <= size - y;
            if plausible && matches!(whole_frame_at(win, h, y)?, Ok(found) if found == f) {
                return Ok(Some((y, f)));
            }
        }
        y += 1;
    }
    Ok(None)
}

/// The valid trailer ending the file, if there is one whose footer fills the file exactly.
pub(crate) fn end_trailer(win: &mut Window<'_>, h: &LedgerHeader) -> Result<Option<Trailer>> {
    let size = win.size();
    let Some(at) = size.checked_sub(TRAILER_LEN as u64) else {
        return Ok(None);
    };
    let tail = win.get(at, TRAILER_LEN as u64)?.unwrap_or_default();
    Ok(trailer_of(h, size, tail))
}

/// What the bytes from a scan's damage at `x` on are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterDamage {
    /// A footer for frames ending at `x` (a valid trailer, the index possibly missing or
    /// partial; or the start of an index block): a seal that did not finish.
    InterruptedSeal,
    /// Something proves the bytes at `x` were synced: a whole frame whose durable mark lies
    /// past `x`, or a trailer of frames past `x`.
    Corruption,
    /// Nothing proves the bytes from `x` on were synced: the end of what was written.
    TornTail,
}

/// The length the header's synced-length slots record (0 without slots or a valid copy).
pub(crate) fn recorded_synced(win: &mut Window<'_>, h: &LedgerHeader) -> Result<u64> {
    if !h.has_synced_slots() {
        return Ok(0);
    }
    let slots = win.get(SLOTS_AT as u64, (SLOT_COPIES * SLOT_LEN) as u64)?;
    Ok(slots.and_then(|b| h.decode_slots(b)).unwrap_or(0))
}

/// Classifies the damage a scan found at `x`, where entry `expected` should have started;
/// `synced` is the length the slots record ([`recorded_synced`]).
pub(crate) fn after_damage(
    win: &mut Window<'_>,
    h: &LedgerHeader,
    x: u64,
    expected: u64,
    synced: u64,
) -> Result<AfterDamage> {
    if x < synced {
        // A finished fsync covered the bytes at `x`: nothing there can be a torn write, and a
        // seal writes its footer only after its frames, so no footer starts below it either.
        return Ok(AfterDamage::Corruption);
    }
    if let Some(t) = end_trailer(win, h)? {
        if t.data_end == x && t.entry_count == expected {
            return Ok(AfterDamage::InterruptedSeal);
        }
        if t.data_end > x {
            return Ok(AfterDamage::Corruption);
        }
    }
    if index_starts_at(win, x)? {
        // The start of an index block: a seal whose trailer did not reach the disk.
        return Ok(AfterDamage::InterruptedSeal);
    }
    // Every run of whole frames after `x`: one whose mark passes `x` proves `x` was synced.
    let (mut from, mut min_entry) = (x, expected);
    while let Some((y, f)) = next_whole_frame(win, h, from, min_entry)? {
        let run = scan_frames(win, h, y, f.entry_id)?;
        if run.max_mark > x {
            return Ok(AfterDamage::Corruption);
        }
        if run.damage.is_none() {
            break;
        }
        from = run.end;
        min_entry = f.entry_id + run.offsets.len() as u64;
    }
    Ok(AfterDamage::TornTail)
}

/// Whether the bytes at `x` start an index block (all of its magic, or as much as the file
/// holds).
fn index_starts_at(win: &mut Window<'_>, x: u64) -> Result<bool> {
    let n = (win.size() - x).min(INDEX_MAGIC.len() as u64);
    let at_x = win.get(x, n)?.unwrap_or_default();
    Ok(n > 0 && INDEX_MAGIC.starts_with(at_x))
}

/// Whether a footer for the `expected` frames ending at `x` starts there, whole or not: a
/// valid trailer ending the file for exactly those frames (its index damaged, or bytes after
/// it), or the start of an index block (its index or trailer damaged). Damage found at `x`
/// is then in the footer, and every frame before it is whole.
pub(crate) fn footer_at(
    win: &mut Window<'_>,
    h: &LedgerHeader,
    x: u64,
    expected: u64,
) -> Result<bool> {
    if end_trailer(win, h)?.is_some_and(|t| t.data_end == x && t.entry_count == expected) {
        return Ok(true);
    }
    index_starts_at(win, x)
}

/// What the first bytes of a ledger file hold.
pub(crate) enum HeaderCheck {
    Valid(LedgerHeader),
    /// The file is no longer than a header and holds only part of one (the rest zero): a crash
    /// during `create_ledger`, before it returned.
    InterruptedCreate,
}

/// Checks the file header against the ledger id taken from the file name.
pub(crate) fn check_header(win: &mut Window<'_>, ledger: u64) -> Result<HeaderCheck> {
    let size = win.size();
    let bytes = win
        .get(0, size.min(HEADER_V3_LEN as u64))?
        .unwrap_or_default();
    check_header_bytes(bytes, size, ledger)
}

/// The file's first bytes (up to [`HEADER_V3_LEN`]) and its size, taken after them: a former
/// owner still appending (a topic taken over while it runs) may grow the file and claim more
/// synced bytes in the slots at any time, and every byte the slots claim was in the file when
/// they claimed it, so the size taken after the slots covers their claim (a ledger only grows
/// while written). A whole header is read first, with no size to bound the read: one read and
/// one stat for every file that holds one. A file shorter than that (a create cut short, or
/// completing) is read up to its size, taken before, and read again when it has grown past
/// that read since.
fn read_head_then_size(file: &dyn StorageFile) -> Result<(Vec<u8>, u64)> {
    let mut head = vec![0u8; HEADER_V3_LEN];
    match file.read_exact_at(&mut head, 0) {
        Ok(()) => return Ok((head, file.size()?)),
        Err(e) if is_short_read(&e) => {}
        Err(e) => return Err(e),
    }
    let mut size = file.size()?;
    for _ in 0..HEAD_READS {
        let head = read_head(file, size)?;
        let after = file.size()?;
        if head.len() as u64 >= after.min(HEADER_V3_LEN as u64) {
            return Ok((head, after));
        }
        size = after;
    }
    // Still growing from below a whole header: this read and the size it was bounded by.
    Ok((read_head(file, size)?, size))
}

/// Whether `e` is a read's answer that the file ends before the bytes asked for.
fn is_short_read(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::UnexpectedEof)
}

/// Reads of a ledger's first bytes while the file grows from below a whole header, at most.
const HEAD_READS: usize = 4;

fn read_head(file: &dyn StorageFile, size: u64) -> Result<Vec<u8>> {
    let mut head = vec![0u8; usize::try_from(size.min(HEADER_V3_LEN as u64)).unwrap_or(0)];
    file.read_exact_at(&mut head, 0)?;
    Ok(head)
}

/// [`check_header`] of `bytes`, the file's first bytes (up to [`HEADER_V3_LEN`]) of a file
/// `size` bytes long.
fn check_header_bytes(bytes: &[u8], size: u64, ledger: u64) -> Result<HeaderCheck> {
    let decoded = decode_header(bytes);
    // A create writes the header (and slots) in one write and syncs it before it returns.
    let partial = size <= HEADER_V3_LEN as u64
        && [VERSION, VERSION_2].into_iter().any(|version| {
            bytes
                .iter()
                .take(HEADER_FIXED_LEN)
                .zip(header_fixed_part(ledger, version))
                .all(|(b, e)| *b == 0 || *b == e)
        });
    match decoded {
        // A whole header whose slots were cut short: the create's write never fully landed.
        // (Its first bytes match, so `partial` holds.)
        Ok(h) if h.ledger_id == ledger && size < h.data_start() => {
            Ok(HeaderCheck::InterruptedCreate)
        }
        Ok(h) if h.ledger_id == ledger => Ok(HeaderCheck::Valid(h)),
        Err(_) if partial => Ok(HeaderCheck::InterruptedCreate),
        Ok(_) => Err(Error::corrupted(
            ledger,
            0,
            CorruptionKind::InvalidField("ledger_id"),
        )),
        // Header damage is named at the file's start, whichever header field failed.
        Err(c) => Err(Error::corrupted(ledger, 0, c.kind)),
    }
}

/// The file, when it verifies as a sealed ledger (trailer, index and last frame header). A
/// failed read is an error, never "not sealed".
pub(crate) fn try_sealed(
    file: &dyn StorageFile,
    h: &LedgerHeader,
    size: u64,
) -> Result<Option<Sealed>> {
    let Some(mut end) = read_end(file, h, size)? else {
        return Ok(None);
    };
    Ok(read_sealed(file, h, &mut end)?.ok())
}

/// A sealed ledger followed by a zero-filled run (its file grew, the bytes never written):
/// whole frames up to `x`, `expected` of them, then a footer for exactly those frames, then
/// zeros to the end of the file. Returns the layout and where the footer ends.
pub(crate) fn sealed_before_zeros(
    win: &mut Window<'_>,
    file: &dyn StorageFile,
    h: &LedgerHeader,
    x: u64,
    expected: u64,
) -> Result<Option<(SealedLayout, u64)>> {
    let Some(end) = footer_len(expected).and_then(|f| f.checked_add(x)) else {
        return Ok(None);
    };
    if end >= win.size() || win.get(x, INDEX_MAGIC.len() as u64)? != Some(&INDEX_MAGIC[..]) {
        return Ok(None);
    }
    if win.first_nonzero_from(end)? != win.size() {
        return Ok(None);
    }
    Ok(try_sealed(file, h, end)?
        .map(|s| s.layout)
        .filter(|l| l.data_end == x)
        .map(|l| (l, end)))
}

/// Bytes of a ledger file's end that a sealed ledger's check reads at once ([`read_end`]): its
/// trailer, and for a ledger of up to about 2,000 entries its whole index and a last frame of
/// a few KiB too, so that one read serves the whole check. The bytes before them that the check
/// needs (a longer index, the last frame) take one more read.
const END_READ: u64 = 16 * 1024;

/// The longest last frame a sealed ledger's check reads whole with the index ([`read_sealed`]),
/// so that the use that opens a deferred ledger (a topic's open reading its next message index
/// from the last entry) has the entry without a read of its own. A longer one has its header
/// read alone, as the check needs.
const LAST_FRAME_READ: u64 = 16 * 1024;

/// A file's last bytes, read at once: `bytes` hold the file from `start` to the size it was read
/// by.
pub(crate) struct End {
    start: u64,
    bytes: Vec<u8>,
}

impl End {
    fn size(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }

    /// Bytes `[from, to)` of the file, when they lie within what was read.
    fn get(&self, from: u64, to: u64) -> Option<&[u8]> {
        let from = usize::try_from(from.checked_sub(self.start)?).ok()?;
        let to = usize::try_from(to.checked_sub(self.start)?).ok()?;
        self.bytes.get(from..to)
    }

    /// Reads the bytes from `from` up to what was read already, in one read, when `from` lies
    /// before it.
    fn read_back_to(&mut self, file: &dyn StorageFile, from: u64) -> Result<()> {
        let Some(more) = self.start.checked_sub(from).filter(|n| *n > 0) else {
            return Ok(());
        };
        let more = usize::try_from(more).map_err(|_| too_big(self.size()))?;
        let mut bytes = vec![0u8; more + self.bytes.len()];
        let (before, read) = bytes.split_at_mut(more);
        file.read_exact_at(before, from)?;
        read.copy_from_slice(&self.bytes);
        self.bytes = bytes;
        self.start = from;
        Ok(())
    }
}

/// The last [`END_READ`] bytes of `file` (`size` bytes long, header `h`), or all of those after
/// its header when it holds fewer, in one read; `None` (nothing read) when it is too short to
/// hold a trailer after its header.
pub(crate) fn read_end(file: &dyn StorageFile, h: &LedgerHeader, size: u64) -> Result<Option<End>> {
    if size
        .checked_sub(TRAILER_LEN as u64)
        .is_none_or(|at| at < h.data_start())
    {
        return Ok(None);
    }
    let start = size.saturating_sub(END_READ).max(h.data_start());
    let len = usize::try_from(size - start).map_err(|_| too_big(size))?;
    let mut bytes = vec![0u8; len];
    file.read_exact_at(&mut bytes, start)?;
    Ok(Some(End { start, bytes }))
}

/// The file (`size` bytes, header `h`) as a sealed ledger, when it verifies as one
/// ([`try_sealed`]); otherwise a window over it for its scan, holding what the check read of its
/// end (every frame of a file that short).
fn sealed_or_window<'a>(
    file: &'a dyn StorageFile,
    h: &LedgerHeader,
    size: u64,
) -> Result<std::result::Result<Sealed, Window<'a>>> {
    let Some(mut end) = read_end(file, h, size)? else {
        return Ok(Err(Window::with_size(file, size)));
    };
    Ok(match read_sealed(file, h, &mut end)? {
        Ok(sealed) => Ok(sealed),
        Err(_) => Err(Window::holding(file, end)),
    })
}

/// A ledger's last entry: its id and metadata.
pub(crate) type LastEntry = (u64, EntryMeta);

/// A sealed ledger as [`read_sealed`] verified it.
pub(crate) struct Sealed {
    pub(crate) layout: SealedLayout,
    /// Its last entry's id and metadata, when the check read that entry's whole frame and the
    /// frame verifies as a read of the entry checks it ([`decode_entry_frame`]): what the use
    /// that opened the ledger reads of it, if that is the entry's metadata. `None` otherwise
    /// (no entry, a frame longer than [`LAST_FRAME_READ`], or one that does not verify, which a
    /// read then finds in the file).
    pub(crate) last_entry: Option<LastEntry>,
}

/// Checks the footer of the file whose last bytes are `end` (`end.size()` bytes long, header
/// `h`, [`read_end`]): its trailer, its index block and the header of the frame its last offset
/// names, without reading the other frames or mapping the file. The trailer comes from `end`;
/// the index and a last frame up to [`LAST_FRAME_READ`] bytes long too, or else from one more
/// read of the bytes before it (added to `end`), whose start the last offset the index holds
/// decides (checked with the index after the read: an offset that is not the last frame's only
/// makes the read longer, by [`LAST_FRAME_READ`] bytes at most); a longer last frame's header
/// from a read of its own. `Ok(Err(_))`: the bytes are not a sealed ledger, and where.
pub(crate) fn read_sealed(
    file: &dyn StorageFile,
    h: &LedgerHeader,
    end: &mut End,
) -> Result<std::result::Result<Sealed, Corruption>> {
    let size = end.size();
    // `read_end` read the trailer: the file holds one after its header.
    let trailer_at = size.saturating_sub(TRAILER_LEN as u64);
    let tail = end.get(trailer_at, size).unwrap_or_default();
    let t = match check_sealed_trailer(h, size, tail) {
        Ok(t) => t,
        Err(c) => return Ok(Err(c)),
    };
    // The index and, when the last offset it holds names a frame short enough, that frame: from
    // `end`, or one read of the bytes before it. The trailer's footer fills the file exactly,
    // so the index is no longer than the file.
    let claimed_last = index_last_offset_at(trailer_at)
        .filter(|_| t.entry_count > 0)
        .and_then(|at| end.get(at, at + 8))
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_le_bytes)
        .filter(|last| *last >= h.data_start() && *last < t.data_end)
        .filter(|last| t.data_end - last <= LAST_FRAME_READ);
    end.read_back_to(file, claimed_last.unwrap_or(t.data_end))?;
    let index = end.get(t.data_end, trailer_at).unwrap_or_default();
    let last = match check_sealed_index(h, &t, index) {
        Ok(last) => last,
        Err(c) => return Ok(Err(c)),
    };
    let mut last_entry = None;
    if let Some(last) = last {
        let n = size.saturating_sub(last).min(FRAME_HEADER_LEN as u64);
        let mut read = [0u8; FRAME_HEADER_LEN];
        let head = if let Some(head) = end.get(last, last + n) {
            head
        } else {
            let head = read.get_mut(..usize::try_from(n).unwrap_or(0));
            let head = head.unwrap_or_default();
            file.read_exact_at(head, last)?;
            head
        };
        if let Err(c) = check_last_frame(&t, last, head) {
            return Ok(Err(c));
        }
        let id = t.entry_count.saturating_sub(1);
        last_entry = end
            .get(last, t.data_end)
            .and_then(|frame| decode_entry_frame(h, frame, id).ok())
            .map(|(frame, _)| (id, frame.meta));
    }
    Ok(Ok(Sealed {
        layout: SealedLayout::of(*h, &t).with_last_frame(last),
        last_entry,
    }))
}

/// The result of opening one ledger file.
pub(crate) enum Opened {
    /// The ledger, the repair of its tail (made, or found read-only), and its last entry's id
    /// and metadata when the open read them ([`Sealed::last_entry`]).
    Ledger(Arc<Ledger>, Option<TailRepair>, Option<LastEntry>),
    /// An interrupted create (the file holds part of a header at most); not removed here.
    Discarded(TailRepair),
}

/// An owner's fsync of a ledger file on open: whatever a crashed process left in the page cache
/// (frames, or a footer whose seal never returned) becomes durable, so what this open saw
/// survives a power cut, and the marks of frames appended from here on are true.
fn sync_on_open(file: &dyn StorageFile, read_only: bool, stats: &LogStatsCounters) -> Result<()> {
    if !read_only {
        file.sync_data()?;
        stats
            .fsyncs
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(())
}

/// Writes the claim that the sealed `file` (`len` bytes, header `h`, slots `slots` as read) is
/// durable whole, once an fsync that covered it returned: into the copy that claims less, so
/// the better copy survives a torn write. A file without slots (version 1 or 2) gets none.
fn prove_sealed(file: &dyn StorageFile, h: &LedgerHeader, slots: &[u8], len: u64) -> Result<()> {
    if h.has_synced_slots() {
        let copy = h.weaker_slot(slots);
        file.write_all_at(&h.encode_slot(copy, len), LedgerHeader::slot_offset(copy))?;
    }
    Ok(())
}

/// The header of ledger `ledger`'s `file` (`head`: its first bytes, `size`: its length), or
/// what opening it comes to without one: damaged at byte 0, or an interrupted create.
fn header_or_outcome(
    file: &Arc<dyn StorageFile>,
    head: &[u8],
    size: u64,
    ledger: u64,
    mode: RecoveryMode,
) -> Result<std::result::Result<LedgerHeader, Opened>> {
    match check_header_bytes(head, size, ledger) {
        Ok(HeaderCheck::Valid(h)) => Ok(Ok(h)),
        // A bad header hides the nonce, so no frame can be checked: damaged at byte 0.
        Err(Error::Corrupted {
            place: CorruptionPlace::Ledger { offset, .. },
            kind,
        }) if mode != RecoveryMode::Strict => {
            let blind = Ledger::unsealed(LedgerHeader::new(ledger, 0), file.clone(), Vec::new(), 0);
            Ok(Err(Opened::Ledger(
                Arc::new(blind.with_damage(offset, kind)),
                None,
                None,
            )))
        }
        Err(e) => Err(e),
        // The caller decides whether the file goes: a file the topic records is damage, never
        // removed here.
        Ok(HeaderCheck::InterruptedCreate) => Ok(Err(Opened::Discarded(TailRepair {
            ledger,
            offset: 0,
            dropped_bytes: size,
            reason: "interrupted create: the file holds only part of its header".into(),
        }))),
    }
}

/// Opens ledger `ledger`, repairing (`cut`: an owner that cuts tails) or only reporting
/// (read-only, or an owner that leaves tails where they are) a torn tail.
pub(crate) fn open_ledger(
    storage: &dyn Storage,
    ledger: u64,
    mode: RecoveryMode,
    read_only: bool,
    cut: bool,
    stats: &LogStatsCounters,
) -> Result<Opened> {
    let name = ledger_file_name(ledger);
    let file = storage.open(&name)?;
    let (head, size) = read_head_then_size(file.as_ref())?;
    let h = match header_or_outcome(&file, &head, size, ledger, mode)? {
        Ok(h) => h,
        Err(opened) => return Ok(opened),
    };
    // The length the slots claim a finished fsync covered (0 without slots or a valid copy).
    let slots = head.get(SLOTS_AT..).unwrap_or_default();
    let synced = h.decode_slots(slots).unwrap_or(0);
    // A slot claiming the whole sealed file proves it durable: a seal (or an open) writes that
    // claim only after the fsync that covered the footer returned. Without it, the file is
    // synced and the claim written, before any map.
    let prove = |file: &dyn StorageFile, len: u64| -> Result<()> {
        if synced < len && !read_only {
            sync_on_open(file, read_only, stats)?;
            prove_sealed(file, &h, slots, len)?;
        }
        Ok(())
    };
    let mut win = match sealed_or_window(file.as_ref(), &h, size)? {
        Ok(sealed) => {
            prove(file.as_ref(), size)?;
            let ledger = Arc::new(Ledger::sealed(file, sealed.layout));
            return Ok(Opened::Ledger(ledger, None, sealed.last_entry));
        }
        Err(win) => win,
    };
    let scan = scan_frames(&mut win, &h, h.data_start(), 0)?;
    let end = scan.end;
    let expected = scan.offsets.len() as u64;
    if scan.damage.is_some()
        && let Some((sealed, footer_end)) =
            sealed_before_zeros(&mut win, file.as_ref(), &h, end, expected)?
    {
        // Like an interrupted seal, cut by an owner in either recovery mode: the zeros hold no
        // entry.
        drop(win);
        if cut {
            file.set_len(footer_end)?;
        }
        prove(file.as_ref(), footer_end)?;
        let repair = TailRepair {
            ledger,
            offset: footer_end,
            dropped_bytes: size - footer_end,
            reason: "zero-filled tail after the footer of a sealed ledger".into(),
        };
        let ledger = Arc::new(Ledger::sealed(file, sealed));
        return Ok(Opened::Ledger(ledger, Some(repair), None));
    }
    let mut damaged = None;
    let repair = match scan.damage {
        // The file ends below a length a finished fsync covered: synced bytes are gone.
        None if end < synced && mode == RecoveryMode::Strict => {
            return Err(Error::corrupted(ledger, end, CorruptionKind::Truncated));
        }
        None if end < synced => {
            damaged = Some(CorruptionKind::Truncated);
            None
        }
        None => None,
        Some(damage) => match after_damage(&mut win, &h, end, expected, synced)? {
            AfterDamage::InterruptedSeal => Some(TailRepair {
                ledger,
                offset: end,
                dropped_bytes: size - end,
                reason: "interrupted seal: the footer is incomplete; the ledger is unsealed \
                         and can be sealed again"
                    .into(),
            }),
            AfterDamage::Corruption if mode == RecoveryMode::Strict => {
                return Err(Error::corrupted(ledger, end, damage.kind));
            }
            AfterDamage::Corruption => {
                damaged = Some(damage.kind);
                None
            }
            AfterDamage::TornTail if mode == RecoveryMode::Strict => {
                return Err(Error::TornTail {
                    ledger,
                    offset: end,
                    dropped_bytes: size - end,
                });
            }
            AfterDamage::TornTail => Some(TailRepair {
                ledger,
                offset: end,
                dropped_bytes: size - end,
                reason: damage.reason(),
            }),
        },
    };
    drop(win);
    if cut && repair.is_some() {
        file.set_len(end)?;
    }
    // Whole, undamaged and covered by the slots' claim: already durable.
    let proven = repair.is_none() && damaged.is_none() && synced >= size;
    if !proven {
        sync_on_open(file.as_ref(), read_only, stats)?;
    }
    let opened = Ledger::unsealed(h, file, scan.offsets, end);
    let opened = match damaged {
        Some(kind) => opened.with_damage(end, kind),
        None => opened,
    };
    Ok(Opened::Ledger(Arc::new(opened), repair, None))
}

//! Segment files: their names, their header (version, predecessor) and their slots.
//!
//! **Synced length.** A segment (version 3) carries two slots after its header recording a
//! length a finished `fdatasync` covered, written after each sync with no sync of its own (the
//! ledger's slot). The header and slots are synced before the segment is listed, and a segment
//! that stops being the newest is synced with a slot claiming all of it; the next segment's
//! header then names it and that final length (its predecessor), so each listed segment but
//! the oldest must follow the one listed before it at exactly the length found there. A
//! marker's own CRC covers its cursor's ids (version 3), so it counts for no other cursor.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use super::corrupt;
use super::host::Listed;
use crate::error::{CorruptionKind, Result};
use crate::format::journal::{
    PREDECESSOR_AT, Predecessor, SEGMENT_HEADER_LEN, SEGMENT_VERSION_V3, SLOT_COPIES, SLOT_LEN,
    SLOTS_AT, SLOTS_LEN, decode_predecessor, decode_segment_header_version, decode_slot,
};
use crate::log::Window;
use crate::storage::{Mapped, StorageFile};

/// A segment file, its length and its format version.
#[derive(Debug, Clone)]
pub(super) struct Segment {
    pub(super) file: Arc<dyn StorageFile>,
    pub(super) len: u64,
    /// A segment of an earlier version is never appended to: it has no slots.
    pub(super) version: u16,
    /// What each slot copy claims now (version 3): lengths a finished `fdatasync` covered.
    pub(super) claims: [u64; SLOT_COPIES],
    /// No slot was written since the segment's last `fdatasync`.
    pub(super) claims_durable: bool,
}

/// The file name of segment `seq`.
#[must_use]
pub fn segment_name(seq: u64) -> String {
    crate::format::numbered_name("journal-", seq, 16, ".seg")
}

/// The sequence number of a segment file name.
#[must_use]
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("journal-")?.strip_suffix(".seg")?;
    (digits.len() == 16 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// What the slot copies of segment `seq` (of `version`, `file_size` bytes) claim, and the
/// synced length that makes: the larger claim, or the length the store's last clean close
/// recorded of it if larger (that close's own slot write was not synced, a power cut after it
/// may leave it unwritten). Versions without slots claim nothing.
pub(super) fn synced_len(
    win: &mut Window<'_>,
    (seq, version, file_size): (u64, u16, u64),
    listed: Option<Listed<'_>>,
    newest: bool,
) -> Result<([u64; SLOT_COPIES], u64)> {
    let claims = if version >= SEGMENT_VERSION_V3 {
        segment_claims(win, seq, file_size, listed.is_some() || !newest)?
    } else {
        [0; SLOT_COPIES]
    };
    let synced = claims.iter().copied().max().unwrap_or(0);
    Ok((claims, synced.max(closed_len(listed, seq))))
}

/// The length of segment `seq` (scanned as `seg`) that a finished sync covered: what its slot
/// copies claim, or the length the store's last clean close recorded of it if larger.
pub(super) fn durable_len(seg: &Segment, seq: u64, listed: Option<Listed<'_>>) -> u64 {
    let claimed = seg.claims.iter().copied().max().unwrap_or(0);
    claimed.max(closed_len(listed, seq))
}

/// The length of segment `seq` the store's last clean close recorded (0: none).
fn closed_len(listed: Option<Listed<'_>>, seq: u64) -> u64 {
    listed
        .and_then(|l| l.closed)
        .filter(|c| c.segment == seq)
        .map_or(0, |c| c.len)
}

/// What each slot copy of version 3 segment `seq` claims. With `synced_header` (the segment is
/// listed, or not the newest), both copies failing is corruption: a header and its slots are
/// synced before the segment is listed (and before a later segment starts), and a slot write
/// replaces one copy at a time, so a power cut never spoils both.
fn segment_claims(
    win: &mut Window<'_>,
    seq: u64,
    file_size: u64,
    synced_header: bool,
) -> Result<[u64; SLOT_COPIES]> {
    let slots = window_get(win, SLOTS_AT as u64, SLOTS_LEN as u64, file_size)?
        .ok_or_else(|| corrupt(seq, file_size, CorruptionKind::Truncated))?;
    let claims = slot_claims(seq, slots);
    if synced_header && claims.iter().all(|c| *c == 0) {
        return Err(corrupt(
            seq,
            SLOTS_AT as u64,
            CorruptionKind::ChecksumMismatch,
        ));
    }
    Ok(claims)
}

/// Checks that version 3 segment `seq`, which names `previous` as the segment it follows,
/// follows the segment scanned before it (`before`, with the length its records end at): the
/// predecessor's length is final when a segment starts, so a predecessor of another length is
/// an older or altered copy, and a predecessor other than the segment before it is a segment
/// missing from the list (legitimate gaps in the numbers are skipped names, which no header
/// names). The oldest segment scanned names one a rollover removed, or none.
pub(super) fn check_predecessor(
    seq: u64,
    previous: Option<Predecessor>,
    before: Option<Predecessor>,
) -> Result<()> {
    let Some(before) = before else {
        return Ok(());
    };
    match previous {
        Some(p) if p.segment == before.segment => match before.len.cmp(&p.len) {
            std::cmp::Ordering::Less => {
                Err(corrupt(p.segment, before.len, CorruptionKind::Truncated))
            }
            std::cmp::Ordering::Greater => Err(corrupt(
                p.segment,
                p.len,
                CorruptionKind::InvalidField("segment length"),
            )),
            std::cmp::Ordering::Equal => Ok(()),
        },
        _ => Err(corrupt(
            seq,
            PREDECESSOR_AT as u64,
            CorruptionKind::InvalidField("predecessor"),
        )),
    }
}

/// Bytes `[off, off + len)` of the window, `None` when they reach past `limit`.
pub(super) fn window_get<'w>(
    win: &'w mut Window<'_>,
    off: u64,
    len: u64,
    limit: u64,
) -> Result<Option<&'w [u8]>> {
    if off.checked_add(len).is_none_or(|end| end > limit) {
        return Ok(None);
    }
    win.get(off, len)
}

/// Each slot copy's claim (0 for one that does not verify).
fn slot_claims(seq: u64, slots: &[u8]) -> [u64; SLOT_COPIES] {
    let mut claims = [0; SLOT_COPIES];
    for (copy, claim) in claims.iter_mut().enumerate() {
        let at = copy * SLOT_LEN;
        *claim = slots
            .get(at..at + SLOT_LEN)
            .map_or(0, |slot| decode_slot(seq, copy, slot));
    }
    claims
}

/// The version of segment `seq` from its header (`bytes`: up to [`SLOTS_AT`] bytes) and, for
/// version 3, the segment it follows: `Ok(Err(_))` for a header that does not verify (a torn
/// one, in the newest segment), `Err(_)` for one that verifies but names another segment or a
/// version this build does not read (never a torn header).
pub(super) fn segment_version(
    bytes: &[u8],
    seq: u64,
) -> Result<Result<(u16, Option<Predecessor>)>> {
    match bytes
        .get(..SEGMENT_HEADER_LEN)
        .map(decode_segment_header_version)
    {
        Some(Ok((s, version))) if s == seq && version < SEGMENT_VERSION_V3 => {
            Ok(Ok((version, None)))
        }
        Some(Ok((s, version))) if s == seq => {
            let named = bytes.get(PREDECESSOR_AT..SLOTS_AT).unwrap_or_default();
            Ok(decode_predecessor(seq, named)
                .map(|p| (version, p))
                .map_err(|c| corrupt(seq, c.offset, c.kind)))
        }
        Some(Ok(_)) => Err(corrupt(seq, 12, CorruptionKind::InvalidField("segment"))),
        Some(Err(c)) if matches!(c.kind, CorruptionKind::UnsupportedVersion(_)) => {
            Err(corrupt(seq, c.offset, c.kind))
        }
        Some(Err(c)) => Ok(Err(corrupt(seq, c.offset, c.kind))),
        None => Ok(Err(corrupt(seq, 0, CorruptionKind::Truncated))),
    }
}

/// A segment's file as reads of its records see it: on local files, through a map of it
/// taken at the first read and taken again once a newer segment exists, so a restart's read of
/// a record per cursor is a copy from memory, not a system call each; by position past the
/// map's end (records appended since it was taken), and on other storage. A disk's read error
/// under a map ends the process (`SIGBUS`) where a read by position would return it, as for a
/// sealed ledger read through its map.
///
/// Invariant: the journal never writes or cuts a segment below the records its index
/// references (appends go past the newest segment's end; a cut undoes only bytes nothing
/// references), so the map's bytes of every record a read asks for are the file's, and no read
/// touches a page a cut took away.
pub(super) struct SegmentFile {
    file: Arc<dyn StorageFile>,
    /// Whether reads may map the file: on local files only, where a map shares the file's
    /// pages (another storage's map is a copy, and its reads are where its faults are tried).
    mappable: bool,
    /// Set once a newer segment was made: its length is final then (unless that segment was
    /// dropped again, its listing refused; a read past the map is by position anyway).
    older: AtomicBool,
    map: RwLock<SegmentMap>,
}

/// A segment's map, and when it was taken.
#[derive(Default)]
struct SegmentMap {
    map: Option<Mapped>,
    taken: Taken,
}

/// When a segment's map was last taken (or tried: a failed map stays `None`).
#[derive(Default, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Taken {
    #[default]
    Never,
    /// While the segment was the newest: records appended since lie past its end.
    WhileNewest,
    /// Once a newer segment existed: the whole segment.
    Older,
}

impl SegmentMap {
    /// `len` bytes at `offset`, if the map holds them.
    fn bytes(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let map: &[u8] = (**self.map.as_ref()?).as_ref();
        let start = usize::try_from(offset).ok()?;
        map.get(start..start.checked_add(len)?)
    }
}

impl std::fmt::Debug for SegmentFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentFile")
            .field("file", &self.file)
            .field("older", &self.older)
            .finish_non_exhaustive()
    }
}

impl SegmentFile {
    /// A reader of segment `file`, the newest unless `older`, through a map where `mappable`.
    pub(super) fn new(file: Arc<dyn StorageFile>, older: bool, mappable: bool) -> Self {
        Self {
            file,
            mappable,
            older: AtomicBool::new(older),
            map: RwLock::default(),
        }
    }

    /// A newer segment now exists.
    pub(super) fn mark_older(&self) {
        self.older.store(true, Ordering::Release);
    }

    /// Fills `buf` with the bytes at `offset`: from the map when it holds them, otherwise by
    /// position. The map is taken at the first read, and again at the first read that misses
    /// it once a newer segment exists; at most twice in all.
    ///
    /// # Errors
    /// As [`StorageFile::read_exact_at`].
    pub(super) fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        if !self.mappable {
            return self.file.read_exact_at(buf, offset);
        }
        let wanted = if self.older.load(Ordering::Acquire) {
            Taken::Older
        } else {
            Taken::WhileNewest
        };
        {
            let state = self.map.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(bytes) = state.bytes(offset, buf.len()) {
                buf.copy_from_slice(bytes);
                return Ok(());
            }
            if state.taken >= wanted {
                drop(state);
                return self.file.read_exact_at(buf, offset);
            }
        }
        let mut state = self.map.write().unwrap_or_else(PoisonError::into_inner);
        if state.taken < wanted {
            state.map = self.file.map().ok();
            state.taken = wanted;
        }
        if let Some(bytes) = state.bytes(offset, buf.len()) {
            buf.copy_from_slice(bytes);
            return Ok(());
        }
        drop(state);
        self.file.read_exact_at(buf, offset)
    }
}

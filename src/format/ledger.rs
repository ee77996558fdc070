//! The ledger file: header, entry frames and the sealed-ledger footer.
//!
//! Owns: the bytes of `ledger-{id:020}.log` files. Pure functions: never does I/O, never panics,
//! never allocates more than the bytes it is given (or, when encoding, the bytes it will return).
//! `docs/format.md` ("Ledger file") draws every byte; the layout is repeated here above the
//! constants, and every offset is derived from the sizes before it.
//!
//! All integers are little-endian.
//!
//! ```text
//! file   := header frame* [footer]
//! header := magic[16] version:u32 flags:u32 ledger_id:u64 nonce:u64 crc:u32  (44 bytes)
//!           crc = CRC32(magic .. nonce)
//!           version 3 only, right after it: slot[2]                        (24 bytes)
//! slot   := synced_len:u64 crc:u32                                          (12 bytes)
//!           crc = CRC32(nonce, copy:u8, synced_len)
//! frame  := crc:u32 payload_len:u32 entry_id:u64 durable_mark:u64
//!           index:u64 num_messages:u32 timestamp:u64 payload[payload_len]     (44 + len bytes)
//!           crc = CRC32(nonce, payload_len .. timestamp, payload)
//! footer := index_magic[8] offset:u64 * entry_count index_crc:u32            (12 + 8n bytes)
//!           index_crc = CRC32(nonce, index_magic, offsets)
//!           trailer: data_end:u64 entry_count:u64 ledger_id:u64
//!                    trailer_magic[8] trailer_crc:u32                          (36 bytes)
//!           trailer_crc = CRC32(nonce, data_end .. trailer_magic)
//! ```
//!
//! The nonce is a random number chosen when the ledger is created. Every checksum after the
//! header is seeded with it (its 8 little-endian bytes are hashed first), so bytes a producer
//! wrote into a payload can never pass as a frame, index or trailer of the ledger holding them:
//! the producer cannot know the nonce.
//!
//! Version 1 files (written before the nonce existed) are still read: their header has no nonce
//! field (36 bytes), and their checksums are not seeded. They keep the weakness the nonce
//! removes; a version 1 ledger is written on (appended to, sealed) in version 1 form.
//!
//! Version 2 files (written before the synced-length slot existed) are read and written on in
//! version 2 form: they have no slot, and their first frame starts right after the header.
//!
//! A frame's `durable_mark` is the file length the writer knew to be durable (synced) when it
//! appended the frame. It may never exceed the frame's own offset.
//!
//! The two synced-length slots (version 3) each hold a file length that a finished `fdatasync`
//! covered. They are overwritten in place, alternately, after each fsync returns, so a slot
//! never claims bytes that are not durable, and a torn slot write damages at most one copy (its
//! checksum then fails and the other, older copy counts). The synced length is the larger valid
//! copy.

use super::{Corruption, Reader, crc32};
use crate::error::CorruptionKind;

/// Metadata the managed ledger keeps in every frame header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EntryMeta {
    /// Message index of the last message in the entry.
    pub index: u64,
    /// Number of messages batched in the entry.
    pub num_messages: u32,
    /// Publish time (the caller's clock and unit).
    pub timestamp: u64,
}

// ---- header ---------------------------------------------------------------------------------

/// First bytes of every ledger file.
pub const MAGIC: [u8; 16] = *b"ackstore ledger\n";
/// Format version written by this build: version 2 plus the synced-length slots.
pub const VERSION: u32 = 3;
/// The nonce, no synced-length slot. Still read and written on.
pub const VERSION_2: u32 = 2;
/// The first format version: no nonce, unseeded checksums. Still read and written on.
pub const VERSION_1: u32 = 1;

pub const H_MAGIC: usize = 0;
pub const H_VERSION: usize = H_MAGIC + MAGIC.len();
const H_FLAGS: usize = H_VERSION + 4;
const H_LEDGER: usize = H_FLAGS + 4;
pub const H_NONCE: usize = H_LEDGER + 8;
pub const H_CRC: usize = H_NONCE + 8;
/// Length of a version 2 file header, and of the checksummed part of a version 3 one; the
/// first frame of a version 2 file starts here.
pub const HEADER_LEN: usize = H_CRC + 4;
const S_LEN_FIELD: usize = 0;
const S_CRC: usize = S_LEN_FIELD + 8;
/// Length of one synced-length slot copy.
pub const SLOT_LEN: usize = S_CRC + 4;
/// Number of synced-length slot copies.
pub const SLOT_COPIES: usize = 2;
/// File offset of the first slot copy (version 3).
pub const SLOTS_AT: usize = HEADER_LEN;
/// Length of a version 3 file header with its slots; the first frame starts here.
pub const HEADER_V3_LEN: usize = SLOTS_AT + SLOT_COPIES * SLOT_LEN;
/// Length of a version 1 file header (no nonce).
pub const HEADER_V1_LEN: usize = H_NONCE + 4;
/// Bytes of the header before its first per-file random field: magic, version, flags, id.
pub const HEADER_FIXED_LEN: usize = H_NONCE;

/// A decoded file header: which ledger, which format version, and the nonce that seeds every
/// checksum after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LedgerHeader {
    /// The ledger the file belongs to.
    pub ledger_id: u64,
    /// [`VERSION`] or [`VERSION_1`].
    pub version: u32,
    /// The random checksum seed (0 and unused in version 1).
    pub nonce: u64,
}

impl LedgerHeader {
    /// The header of a new ledger in the current format.
    #[must_use]
    pub fn new(ledger_id: u64, nonce: u64) -> Self {
        Self {
            ledger_id,
            version: VERSION,
            nonce,
        }
    }

    /// The header of a version 1 ledger (for tests and tools that write old files).
    #[must_use]
    pub fn v1(ledger_id: u64) -> Self {
        Self {
            ledger_id,
            version: VERSION_1,
            nonce: 0,
        }
    }

    /// The header of a version 2 ledger (for tests and tools that write old files).
    #[must_use]
    pub fn v2(ledger_id: u64, nonce: u64) -> Self {
        Self {
            ledger_id,
            version: VERSION_2,
            nonce,
        }
    }

    /// Length of the encoded header (with the slots, in version 3): the offset of the first
    /// frame.
    #[must_use]
    pub fn data_start(&self) -> u64 {
        match self.version {
            VERSION_1 => HEADER_V1_LEN as u64,
            VERSION_2 => HEADER_LEN as u64,
            _ => HEADER_V3_LEN as u64,
        }
    }

    /// Whether the file carries synced-length slots (version 3).
    #[must_use]
    pub fn has_synced_slots(&self) -> bool {
        self.version == VERSION
    }

    /// File offset of slot copy `copy` (0 or 1; taken modulo [`SLOT_COPIES`]).
    #[must_use]
    pub fn slot_offset(copy: usize) -> u64 {
        (SLOTS_AT + (copy % SLOT_COPIES) * SLOT_LEN) as u64
    }

    /// Slot copy `copy` claiming `synced_len`.
    #[must_use]
    pub fn encode_slot(&self, copy: usize, synced_len: u64) -> [u8; SLOT_LEN] {
        let mut out = [0u8; SLOT_LEN];
        let len = synced_len.to_le_bytes();
        let crc = self.crc(&[&[slot_tag(copy)], &len]);
        if let Some(f) = out.get_mut(S_LEN_FIELD..S_CRC) {
            f.copy_from_slice(&len);
        }
        if let Some(f) = out.get_mut(S_CRC..SLOT_LEN) {
            f.copy_from_slice(&crc.to_le_bytes());
        }
        out
    }

    /// The synced length the slots (`bytes`: the [`SLOT_COPIES`] copies from [`SLOTS_AT`] on)
    /// record: the larger valid copy; `None` when no copy is valid or the file has no slots.
    #[must_use]
    pub fn decode_slots(&self, bytes: &[u8]) -> Option<u64> {
        self.slot_copies(bytes).into_iter().flatten().max()
    }

    /// What each slot copy (`bytes`: the [`SLOT_COPIES`] copies from [`SLOTS_AT`] on) claims;
    /// `None` for a copy that is not valid, and for both when the file has no slots.
    #[must_use]
    pub fn slot_copies(&self, bytes: &[u8]) -> [Option<u64>; SLOT_COPIES] {
        let copy = |copy: usize| {
            if !self.has_synced_slots() {
                return None;
            }
            let slot = bytes.get(copy * SLOT_LEN..(copy + 1) * SLOT_LEN)?;
            let mut r = Reader::new(slot);
            let len = r.u64().ok()?;
            let crc = r.u32().ok()?;
            (crc == self.crc(&[&[slot_tag(copy)], &len.to_le_bytes()])).then_some(len)
        };
        [copy(0), copy(1)]
    }

    /// The slot copy a new claim should overwrite: one that is not valid, else the one claiming
    /// less, so the best claim on file survives a torn write of the new one.
    #[must_use]
    pub fn weaker_slot(&self, bytes: &[u8]) -> usize {
        match self.slot_copies(bytes) {
            [Some(a), Some(b)] if a > b => 1,
            [Some(_), None] => 1,
            _ => 0,
        }
    }

    /// The checksum of the concatenation of `parts`, seeded with the nonce (version 2) or not
    /// (version 1).
    #[must_use]
    pub fn crc(&self, parts: &[&[u8]]) -> u32 {
        let mut hasher = crc32fast::Hasher::new();
        if self.version != VERSION_1 {
            hasher.update(&self.nonce.to_le_bytes());
        }
        for part in parts {
            hasher.update(part);
        }
        hasher.finalize()
    }

    /// The encoded header; in version 3 followed by both slots claiming the header itself.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_V3_LEN);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.ledger_id.to_le_bytes());
        if self.version != VERSION_1 {
            out.extend_from_slice(&self.nonce.to_le_bytes());
        }
        let crc = crc32(&[&out]);
        out.extend_from_slice(&crc.to_le_bytes());
        if self.has_synced_slots() {
            for copy in 0..SLOT_COPIES {
                out.extend_from_slice(&self.encode_slot(copy, self.data_start()));
            }
        }
        out
    }
}

/// The copy number as the checksum sees it, so one copy's bytes never pass in the other's place.
#[expect(clippy::cast_possible_truncation, reason = "copy < SLOT_COPIES = 2")]
fn slot_tag(copy: usize) -> u8 {
    (copy % SLOT_COPIES) as u8
}

/// The first [`HEADER_FIXED_LEN`] bytes every header of `ledger_id` in `version` (2 or 3)
/// starts with.
#[must_use]
pub fn header_fixed_part(ledger_id: u64, version: u32) -> Vec<u8> {
    let mut out = LedgerHeader {
        version,
        ..LedgerHeader::new(ledger_id, 0)
    }
    .encode();
    out.truncate(HEADER_FIXED_LEN);
    out
}

/// Decodes a file header from the start of `bytes` (which may continue past it).
///
/// # Errors
/// [`CorruptionKind::BadMagic`], [`CorruptionKind::UnsupportedVersion`] for a version other than
/// 1, 2 or 3, [`CorruptionKind::ChecksumMismatch`], or [`CorruptionKind::Truncated`], at the
/// offset of the field concerned (the checksum's for a mismatch). The slots of a version 3
/// header are not read here (see [`LedgerHeader::decode_slots`]).
pub fn decode_header(bytes: &[u8]) -> Result<LedgerHeader, Corruption> {
    let mut r = Reader::new(bytes);
    let magic: [u8; 16] = r.array()?;
    if magic != MAGIC {
        return Err(Corruption::new(CorruptionKind::BadMagic, H_MAGIC));
    }
    let version = r.u32()?;
    if ![VERSION, VERSION_2, VERSION_1].contains(&version) {
        return Err(Corruption::new(
            CorruptionKind::UnsupportedVersion(version),
            H_VERSION,
        ));
    }
    let flags = r.u32()?;
    let ledger_id = r.u64()?;
    let nonce = if version == VERSION_1 { 0 } else { r.u64()? };
    let crc_at = r.offset();
    let covered = bytes
        .get(..crc_at)
        .ok_or_else(|| r.error(CorruptionKind::Truncated))?;
    let crc = r.u32()?;
    if crc != crc32(&[covered]) {
        return Err(Corruption::new(CorruptionKind::ChecksumMismatch, crc_at));
    }
    if flags != 0 {
        return Err(Corruption::new(
            CorruptionKind::InvalidField("flags"),
            H_FLAGS,
        ));
    }
    Ok(LedgerHeader {
        ledger_id,
        version,
        nonce,
    })
}

// ---- frame ----------------------------------------------------------------------------------

pub const F_CRC: usize = 0;
pub const F_LEN: usize = F_CRC + 4;
const F_ENTRY: usize = F_LEN + 4;
const F_MARK: usize = F_ENTRY + 8;
const F_INDEX: usize = F_MARK + 8;
const F_NUM: usize = F_INDEX + 8;
const F_TS: usize = F_NUM + 4;
/// Length of a frame header; the payload follows it.
pub const FRAME_HEADER_LEN: usize = F_TS + 8;
/// Largest payload the format can hold.
#[expect(clippy::cast_possible_truncation, reason = "FRAME_HEADER_LEN is 44")]
pub const MAX_PAYLOAD_LEN: u32 = u32::MAX - FRAME_HEADER_LEN as u32;

/// A decoded frame header (not yet checked against its payload).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// The stored checksum.
    pub crc: u32,
    /// Payload length in bytes.
    pub payload_len: u32,
    /// Entry id (dense from 0 within a ledger).
    pub entry_id: u64,
    /// File length known durable when the frame was appended.
    pub durable_mark: u64,
    /// The entry's metadata.
    pub meta: EntryMeta,
}

impl FrameHeader {
    /// Total frame length: header plus payload.
    #[must_use]
    pub fn frame_len(&self) -> u64 {
        FRAME_HEADER_LEN as u64 + u64::from(self.payload_len)
    }
}

/// Encodes one whole frame (header and payload) of the ledger with header `h` into a new
/// buffer.
///
/// # Errors
/// [`CorruptionKind::BadLength`] when `payload` is longer than [`MAX_PAYLOAD_LEN`].
pub fn encode_frame(
    h: &LedgerHeader,
    entry_id: u64,
    durable_mark: u64,
    meta: EntryMeta,
    payload: &[u8],
) -> Result<Vec<u8>, CorruptionKind> {
    let mut out = Vec::new();
    encode_frame_into(&mut out, h, entry_id, durable_mark, meta, payload)?;
    Ok(out)
}

/// Appends one whole frame to `out` (so a writer can batch frames in one buffer).
///
/// # Errors
/// [`CorruptionKind::BadLength`] when `payload` is longer than [`MAX_PAYLOAD_LEN`]; nothing is
/// appended then.
pub fn encode_frame_into(
    out: &mut Vec<u8>,
    h: &LedgerHeader,
    entry_id: u64,
    durable_mark: u64,
    meta: EntryMeta,
    payload: &[u8],
) -> Result<(), CorruptionKind> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|l| *l <= MAX_PAYLOAD_LEN)
        .ok_or(CorruptionKind::BadLength)?;
    let start = out.len();
    out.reserve(FRAME_HEADER_LEN + payload.len());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&entry_id.to_le_bytes());
    out.extend_from_slice(&durable_mark.to_le_bytes());
    out.extend_from_slice(&meta.index.to_le_bytes());
    out.extend_from_slice(&meta.num_messages.to_le_bytes());
    out.extend_from_slice(&meta.timestamp.to_le_bytes());
    out.extend_from_slice(payload);
    let crc = h.crc(&[out.get(start + F_LEN..).unwrap_or_default()]);
    if let Some(slot) = out.get_mut(start + F_CRC..start + F_LEN) {
        slot.copy_from_slice(&crc.to_le_bytes());
    }
    Ok(())
}

/// Decodes a frame header from the start of `bytes` without checking the checksum.
///
/// # Errors
/// [`CorruptionKind::Truncated`] when fewer than [`FRAME_HEADER_LEN`] bytes are given.
pub fn decode_frame_header(bytes: &[u8]) -> Result<FrameHeader, Corruption> {
    let mut r = Reader::new(bytes);
    Ok(FrameHeader {
        crc: r.u32()?,
        payload_len: r.u32()?,
        entry_id: r.u64()?,
        durable_mark: r.u64()?,
        meta: EntryMeta {
            index: r.u64()?,
            num_messages: r.u32()?,
            timestamp: r.u64()?,
        },
    })
}

/// Checks `frame` (header and payload, exactly [`FrameHeader::frame_len`] bytes) against the
/// header's checksum, seeded by the ledger header `h`.
///
/// # Errors
/// [`CorruptionKind::BadLength`] at the length field, or [`CorruptionKind::ChecksumMismatch`]
/// at the checksum field (the frame's first byte).
pub fn check_frame(h: &LedgerHeader, header: &FrameHeader, frame: &[u8]) -> Result<(), Corruption> {
    if frame.len() as u64 != header.frame_len() {
        return Err(Corruption::new(CorruptionKind::BadLength, F_LEN));
    }
    let covered = frame
        .get(F_LEN..)
        .ok_or_else(|| Corruption::new(CorruptionKind::Truncated, F_LEN))?;
    if h.crc(&[covered]) == header.crc {
        Ok(())
    } else {
        Err(Corruption::new(CorruptionKind::ChecksumMismatch, F_CRC))
    }
}

/// Decodes and checks the whole frame at the start of `bytes`, which may continue past it.
///
/// Returns the header and the payload. Lengths are checked against `bytes` before use.
///
/// # Errors
/// As [`decode_frame_header`] and [`check_frame`]; [`CorruptionKind::Truncated`] at offset 0
/// when `bytes` end before the frame does.
pub fn decode_frame<'a>(
    h: &LedgerHeader,
    bytes: &'a [u8],
) -> Result<(FrameHeader, &'a [u8]), Corruption> {
    let header = decode_frame_header(bytes)?;
    let len = usize::try_from(header.frame_len())
        .map_err(|_| Corruption::new(CorruptionKind::BadLength, F_LEN))?;
    let frame = bytes
        .get(..len)
        .ok_or_else(|| Corruption::new(CorruptionKind::Truncated, 0))?;
    check_frame(h, &header, frame)?;
    let payload = frame.get(FRAME_HEADER_LEN..).unwrap_or_default();
    Ok((header, payload))
}

/// True when every byte is zero: a zero-filled frame header marks the end of the log.
///
/// No valid frame has an all-zero header: the checksum field would have to be zero and match
/// the checksum of 40 zero bytes (`tests/format/ledger_frames.rs` pins that it does not for the
/// unseeded checksum; a seeded one is zero for one nonce in 2^32, and a zero header still reads
/// as the end).
#[must_use]
pub fn is_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|b| *b == 0)
}

/// The index of the first nonzero byte, if any. Tests 64 bytes at a time (the OR of a block
/// vectorises), so skipping a long zero-filled tail costs a memory scan, not a loop per byte.
#[must_use]
pub fn first_nonzero(bytes: &[u8]) -> Option<usize> {
    const BLOCK: usize = 64;
    let blocks = bytes.chunks(BLOCK);
    for (i, block) in blocks.enumerate() {
        if block.iter().fold(0u8, |acc, b| acc | b) != 0 {
            let within = block.iter().position(|b| *b != 0)?;
            return Some(i * BLOCK + within);
        }
    }
    None
}

// ---- footer ---------------------------------------------------------------------------------

/// First bytes of the entry-offset index written when a ledger is sealed.
pub const INDEX_MAGIC: [u8; 8] = *b"ackindex";
/// Last-but-CRC bytes of the trailer that ends a sealed ledger.
pub const TRAILER_MAGIC: [u8; 8] = *b"acksealt";

const I_MAGIC: usize = 0;
const I_OFFSETS: usize = I_MAGIC + INDEX_MAGIC.len();
/// Bytes of the index block besides the offsets (magic and CRC).
pub const INDEX_OVERHEAD: usize = I_OFFSETS + 4;

/// Where the last entry offset of a sealed ledger's index starts, for a trailer at
/// `trailer_at`: the index ends with its offsets, 8 bytes each, then its CRC32. `None` when
/// the file is too short to hold one. A hint to read ahead: [`check_sealed_index`] decides.
#[must_use]
pub fn index_last_offset_at(trailer_at: u64) -> Option<u64> {
    trailer_at.checked_sub((INDEX_OVERHEAD - I_OFFSETS + 8) as u64)
}

const T_DATA_END: usize = 0;
const T_COUNT: usize = T_DATA_END + 8;
const T_LEDGER: usize = T_COUNT + 8;
const T_MAGIC: usize = T_LEDGER + 8;
pub const T_CRC: usize = T_MAGIC + TRAILER_MAGIC.len();
/// Length of the fixed trailer at the very end of a sealed ledger.
pub const TRAILER_LEN: usize = T_CRC + 4;

/// Length of the footer (index block and trailer) of a ledger with `entry_count` entries.
#[must_use]
pub fn footer_len(entry_count: u64) -> Option<u64> {
    entry_count
        .checked_mul(8)?
        .checked_add((INDEX_OVERHEAD + TRAILER_LEN) as u64)
}

/// Encodes the footer of the ledger with header `h` whose frames end at `data_end` and start
/// at `offsets`.
#[must_use]
pub fn encode_footer(h: &LedgerHeader, data_end: u64, offsets: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(INDEX_OVERHEAD + 8 * offsets.len() + TRAILER_LEN);
    out.extend_from_slice(&INDEX_MAGIC);
    for off in offsets {
        out.extend_from_slice(&off.to_le_bytes());
    }
    let index_crc = h.crc(&[&out]);
    out.extend_from_slice(&index_crc.to_le_bytes());
    let trailer_start = out.len();
    out.extend_from_slice(&data_end.to_le_bytes());
    out.extend_from_slice(&(offsets.len() as u64).to_le_bytes());
    out.extend_from_slice(&h.ledger_id.to_le_bytes());
    out.extend_from_slice(&TRAILER_MAGIC);
    let trailer_crc = h.crc(&[out.get(trailer_start..).unwrap_or_default()]);
    out.extend_from_slice(&trailer_crc.to_le_bytes());
    out
}

/// The decoded trailer of a sealed ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trailer {
    /// End of the last frame; the index block starts here.
    pub data_end: u64,
    /// Number of entries.
    pub entry_count: u64,
    /// The ledger the trailer belongs to.
    pub ledger_id: u64,
}

/// Decodes a trailer (exactly [`TRAILER_LEN`] bytes) of the ledger with header `h`: checks its
/// magic, its seeded checksum and its ledger id.
///
/// # Errors
/// A [`Corruption`] at the offset, within `bytes`, of the field that fails.
pub fn decode_trailer(h: &LedgerHeader, bytes: &[u8]) -> Result<Trailer, Corruption> {
    let mut r = Reader::new(bytes);
    let data_end = r.u64()?;
    let entry_count = r.u64()?;
    let ledger_id = r.u64()?;
    let magic: [u8; 8] = r.array()?;
    let crc = r.u32()?;
    r.finish()?;
    if magic != TRAILER_MAGIC {
        return Err(Corruption::new(CorruptionKind::BadMagic, T_MAGIC));
    }
    if crc != h.crc(&[bytes.get(..T_CRC).unwrap_or_default()]) {
        return Err(Corruption::new(CorruptionKind::ChecksumMismatch, T_CRC));
    }
    if ledger_id != h.ledger_id {
        return Err(Corruption::new(
            CorruptionKind::InvalidField("trailer ledger_id"),
            T_LEDGER,
        ));
    }
    Ok(Trailer {
        data_end,
        entry_count,
        ledger_id,
    })
}

/// The trailer at the very end of `file` (whose header is `h`) when it is valid and the footer
/// it describes fills the file exactly: the file ends like a sealed ledger. The index and the
/// frames are not checked.
#[must_use]
pub fn trailer_of(h: &LedgerHeader, file_len: u64, tail: &[u8]) -> Option<Trailer> {
    let t = decode_trailer(h, tail).ok()?;
    let fits = footer_len(t.entry_count).and_then(|f| f.checked_add(t.data_end)) == Some(file_len);
    (fits && t.data_end >= h.data_start()).then_some(t)
}

/// Where a verified sealed ledger keeps its frames and index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SealedLayout {
    /// The file header.
    pub header: LedgerHeader,
    /// Number of entries.
    pub entry_count: u64,
    /// End of the last frame.
    pub data_end: u64,
    /// File offset of the first index offset (just after the index magic).
    pub offsets_start: u64,
    /// File offset of the last frame, when the index was verified and read whole for this
    /// layout ([`validate_sealed`], a ledger's open) or the frames' offsets were known (its
    /// seal): a read of the last entry then takes its bounds from here, not from the index.
    /// `None` (no entry, or a layout made from the trailer alone): from the index.
    pub last_frame: Option<u64>,
}

/// Verifies a whole sealed ledger file's header, trailer and index, and the header of its last
/// frame (not the other frames): [`check_sealed_trailer`], [`check_sealed_index`] and
/// [`check_last_frame`] over the parts of `file`.
///
/// Checks: the header names `ledger_id`; the trailer's checksum, magic and ledger id; the file
/// length equals `data_end` plus the footer length; the index checksum; the first offset is the
/// header length, offsets increase by at least [`FRAME_HEADER_LEN`]; and the frame header at the
/// last offset is entry `entry_count - 1` ending exactly at `data_end`, so the footer lies
/// outside every frame.
///
/// # Errors
/// A [`Corruption`] whose offset counts from the start of `file`.
pub fn validate_sealed(file: &[u8], ledger_id: u64) -> Result<SealedLayout, Corruption> {
    let bad = Corruption::new;
    let h = decode_header(file)?;
    if h.ledger_id != ledger_id {
        return Err(bad(CorruptionKind::InvalidField("ledger_id"), H_LEDGER));
    }
    let trailer_start = file
        .len()
        .checked_sub(TRAILER_LEN)
        .ok_or_else(|| bad(CorruptionKind::Truncated, 0))?;
    let trailer = check_sealed_trailer(
        &h,
        file.len() as u64,
        file.get(trailer_start..).unwrap_or_default(),
    )?;
    let index_start = usize::try_from(trailer.data_end)
        .map_err(|_| bad(CorruptionKind::BadLength, trailer_start + T_DATA_END))?;
    let index = file
        .get(index_start..trailer_start)
        .ok_or_else(|| bad(CorruptionKind::Truncated, index_start))?;
    let last = check_sealed_index(&h, &trailer, index)?;
    if let Some(last) = last {
        let at = usize::try_from(last)
            .map_err(|_| bad(CorruptionKind::BadLength, index_start + I_OFFSETS))?;
        check_last_frame(&trailer, last, file.get(at..).unwrap_or_default())?;
    }
    Ok(SealedLayout::of(h, &trailer).with_last_frame(last))
}

/// Checks the trailer of a sealed ledger file `file_len` bytes long whose header is `h`;
/// `tail` is the file's last [`TRAILER_LEN`] bytes. Checks its checksum, magic and ledger id,
/// and that the footer it describes fills the file exactly. The index block is then the bytes
/// from `data_end` to the trailer.
///
/// # Errors
/// A [`Corruption`] whose offset counts from the start of the file.
pub fn check_sealed_trailer(
    h: &LedgerHeader,
    file_len: u64,
    tail: &[u8],
) -> Result<Trailer, Corruption> {
    let bad = Corruption::new;
    let trailer_start = usize::try_from(file_len)
        .ok()
        .and_then(|len| len.checked_sub(TRAILER_LEN))
        .ok_or_else(|| bad(CorruptionKind::Truncated, 0))?;
    let trailer = decode_trailer(h, tail).map_err(|c| c.after(trailer_start))?;
    let expected_len = footer_len(trailer.entry_count)
        .and_then(|f| f.checked_add(trailer.data_end))
        .ok_or_else(|| bad(CorruptionKind::BadLength, trailer_start + T_COUNT))?;
    if expected_len != file_len || trailer.data_end < h.data_start() {
        return Err(bad(CorruptionKind::BadLength, trailer_start + T_DATA_END));
    }
    Ok(trailer)
}

/// Checks the index block of a sealed ledger (`index`: the bytes from the trailer's `data_end`
/// up to the trailer) against its trailer `t`: magic, checksum, an offset per entry, the first
/// at the header's end, each at least a frame header after the one before. Returns the last
/// offset (`None` for a ledger without entries, whose `data_end` must then be the header's end).
///
/// # Errors
/// A [`Corruption`] whose offset counts from the start of the file.
pub fn check_sealed_index(
    h: &LedgerHeader,
    t: &Trailer,
    index: &[u8],
) -> Result<Option<u64>, Corruption> {
    let bad = Corruption::new;
    let index_start =
        usize::try_from(t.data_end).map_err(|_| bad(CorruptionKind::BadLength, index.len()))?;
    let trailer_start = index_start.saturating_add(index.len());
    let crc_at = index
        .len()
        .checked_sub(4)
        .ok_or_else(|| bad(CorruptionKind::Truncated, index_start))?;
    let (covered, crc) = index.split_at(crc_at);
    let mut r = Reader::at(covered, index_start);
    if r.array::<8>()? != INDEX_MAGIC {
        return Err(bad(CorruptionKind::BadMagic, index_start + I_MAGIC));
    }
    if Reader::at(crc, index_start + crc_at).u32()? != h.crc(&[covered]) {
        return Err(bad(CorruptionKind::ChecksumMismatch, index_start + crc_at));
    }
    let start = h.data_start();
    let mut expected_next = start;
    let mut last = None;
    while r.remaining() > 0 {
        let off_at = r.offset();
        let off = r.u64()?;
        let ok = if last.is_none() {
            off == start
        } else {
            off >= expected_next
        };
        if !ok {
            return Err(bad(CorruptionKind::InvalidField("entry offset"), off_at));
        }
        last = Some(off);
        expected_next = off
            .checked_add(FRAME_HEADER_LEN as u64)
            .ok_or_else(|| bad(CorruptionKind::BadLength, off_at))?;
    }
    if last.is_none() && t.data_end != start {
        return Err(bad(
            CorruptionKind::InvalidField("data_end"),
            trailer_start + T_DATA_END,
        ));
    }
    Ok(last)
}

/// Checks that the frame header at `last`, the index's last offset (`head`: the file's bytes
/// from there, at least [`FRAME_HEADER_LEN`] of them), is entry `entry_count - 1` of trailer `t`
/// and ends exactly at its `data_end`, so the footer lies outside every frame.
///
/// # Errors
/// A [`Corruption`] whose offset counts from the start of the file.
pub fn check_last_frame(t: &Trailer, last: u64, head: &[u8]) -> Result<(), Corruption> {
    let at = usize::try_from(last).map_err(|_| Corruption::new(CorruptionKind::BadLength, 0))?;
    let frame = decode_frame_header(head).map_err(|c| c.after(at))?;
    let ends_at = last.checked_add(frame.frame_len());
    if frame.entry_id.checked_add(1) != Some(t.entry_count) || ends_at != Some(t.data_end) {
        return Err(Corruption::new(
            CorruptionKind::InvalidField("last frame"),
            at,
        ));
    }
    Ok(())
}

impl SealedLayout {
    /// The layout of a sealed ledger with header `h` whose trailer is `t`.
    #[must_use]
    pub fn of(h: LedgerHeader, t: &Trailer) -> Self {
        Self {
            header: h,
            entry_count: t.entry_count,
            data_end: t.data_end,
            offsets_start: t.data_end + I_OFFSETS as u64,
            last_frame: None,
        }
    }

    /// This layout with `last` as the offset of its last frame ([`SealedLayout::last_frame`]):
    /// the one its index holds, verified.
    #[must_use]
    pub fn with_last_frame(self, last: Option<u64>) -> Self {
        Self {
            last_frame: last,
            ..self
        }
    }

    /// Length of the whole file: frames, index block and trailer.
    #[must_use]
    pub fn file_len(&self) -> u64 {
        footer_len(self.entry_count)
            .and_then(|f| f.checked_add(self.data_end))
            .unwrap_or(u64::MAX)
    }

    /// Byte range `[start, end)` of entry `entry_id`'s frame in `file` (the bytes this layout
    /// was validated on); `None` when there is no such entry.
    #[must_use]
    pub fn frame_range(&self, file: &[u8], entry_id: u64) -> Option<(u64, u64)> {
        if entry_id >= self.entry_count {
            return None;
        }
        let offset_at = |i: u64| -> Option<u64> {
            let at = usize::try_from(self.offsets_start.checked_add(i.checked_mul(8)?)?).ok()?;
            let bytes = file.get(at..at.checked_add(8)?)?;
            Reader::new(bytes).u64().ok()
        };
        if entry_id + 1 == self.entry_count {
            let start = match self.last_frame {
                Some(start) => start,
                None => offset_at(entry_id)?,
            };
            return Some((start, self.data_end));
        }
        Some((offset_at(entry_id)?, offset_at(entry_id + 1)?))
    }
}

/// Decodes and checks the frame of entry `entry_id` occupying exactly `frame` (header and
/// payload) in the ledger with header `h`: its checksum, its length and its entry id.
pub fn decode_entry_frame<'a>(
    h: &LedgerHeader,
    frame: &'a [u8],
    entry_id: u64,
) -> Result<(FrameHeader, &'a [u8]), Corruption> {
    let (header, payload) = decode_frame(h, frame)?;
    if header.frame_len() != frame.len() as u64 {
        return Err(Corruption::new(CorruptionKind::BadLength, F_LEN));
    }
    if header.entry_id != entry_id {
        return Err(Corruption::new(
            CorruptionKind::InvalidField("entry_id"),
            F_ENTRY,
        ));
    }
    Ok((header, payload))
}

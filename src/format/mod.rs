//! On-disk byte layouts: pure encode/decode functions over byte slices.
//!
//! Owns: every byte ackstore writes, its checksums and its version numbers. Must never do I/O,
//! panic on any input, or allocate more than the input it was given: every decoder checks a
//! length against what remains (and against a maximum) before using it.
//!
//! Submodules, one per file kind:
//! - [`ledger`]: the ledger file (header, entry frames, sealed-ledger footer);
//! - [`partition`]: one partition of a cursor's ack set;
//! - [`journal`]: the store's shared cursor journal (segment header, record frames);
//! - [`meta`]: metadata records (topic and cursor);
//! - [`store`](mod@store): the store catalog (topics of a store).
//!
//! Shared helpers live here: [`Reader`], the one bounds-checked little-endian reader every
//! decoder reads bytes through; [`Corruption`], what a decoder reports (the kind of damage and
//! its offset within the bytes it was given; the caller names the file, entry or record); the
//! LEB128 varint; [`crc32`], the checksum every format uses; and [`push_number`], how file and
//! record names write their numbers.
//!
//! Invariant, enforced by lints on this module: no slice indexing and no `unwrap`, so no input
//! can make a decoder panic.

#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

pub mod cursor;
pub mod journal;
pub mod ledger;
pub mod meta;
pub mod partition;
pub mod store;

use crate::error::{CorruptionKind, CorruptionPlace, Error};
use crate::position::Position;

/// Appends `n` in decimal to `out`, zero-padded to `width` digits, as `format!("{n:0width$}")`
/// does: how file and record names carry their numbers. Without the formatting machinery, a
/// name costs a few dozen instructions instead of hundreds (a store's restart builds several a
/// cursor).
pub fn push_number(out: &mut String, n: u64, width: usize) {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(n);
    out.extend(std::iter::repeat_n('0', width.saturating_sub(digits.len())));
    out.push_str(digits);
}

/// `prefix`, `n` zero-padded to `width` digits ([`push_number`]), then `suffix`.
#[must_use]
pub fn numbered_name(prefix: &str, n: u64, width: usize, suffix: &str) -> String {
    let mut name = String::with_capacity(prefix.len() + width.max(20) + suffix.len());
    name.push_str(prefix);
    push_number(&mut name, n, width);
    name.push_str(suffix);
    name
}

/// CRC32 (IEEE, as computed by `crc32fast`) of the concatenation of `parts`.
#[must_use]
pub fn crc32(parts: &[&[u8]]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.finalize()
}

/// What is wrong with bytes a decoder was given, and where: `offset` counts from the first byte
/// handed to the decoder. The decoder never knows which file or entry the bytes came from; its
/// caller names the place with [`Corruption::in_ledger`], [`Corruption::in_entry`] or
/// [`Corruption::in_record`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    /// What is wrong.
    pub kind: CorruptionKind,
    /// Byte offset of the bad field within the decoded bytes.
    pub offset: u64,
}

impl Corruption {
    /// `kind` found at byte `offset` of the decoded bytes.
    #[must_use]
    pub fn new(kind: CorruptionKind, offset: usize) -> Self {
        Self {
            kind,
            offset: offset as u64,
        }
    }

    /// The same corruption seen from bytes that hold the decoded ones at offset `base`.
    #[must_use]
    pub fn after(self, base: usize) -> Self {
        Self {
            kind: self.kind,
            offset: self.offset.saturating_add(base as u64),
        }
    }

    /// The error for bytes that start at byte `base` of ledger file `ledger`.
    #[must_use]
    pub fn in_ledger(self, ledger: u64, base: u64) -> Error {
        Error::corrupted(ledger, base.saturating_add(self.offset), self.kind)
    }

    /// The error for bytes that are the payload of cursor-ledger entry `position`.
    #[must_use]
    pub fn in_entry(self, position: Position) -> Error {
        Error::corrupted_at(CorruptionPlace::Entry(position), self.kind)
    }

    /// The error for bytes that are the metadata record named `record`.
    #[must_use]
    pub fn in_record(self, record: impl Into<String>) -> Error {
        Error::corrupted_at(CorruptionPlace::Record(record.into()), self.kind)
    }
}

/// A bounds-checked little-endian reader over a byte slice: the one way format decoders read
/// bytes.
///
/// Every read either returns the requested value or a [`Corruption`] whose offset is where the
/// failed read started (plus the base the reader was created with); it never panics and never
/// allocates. A failed read consumes nothing.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Reader<'a> {
    /// A reader positioned at the start of `bytes`.
    #[must_use]
    pub fn new(bytes: &'a [u8]) -> Self {
        Self::at(bytes, 0)
    }

    /// A reader over `bytes`, which start at offset `base` of the decoded record: errors and
    /// [`Reader::offset`] count from the record's start.
    #[must_use]
    pub fn at(bytes: &'a [u8], base: usize) -> Self {
        Self {
            bytes,
            pos: 0,
            base,
        }
    }

    /// Bytes consumed so far.
    #[must_use]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Offset of the next byte within the decoded record (base plus bytes consumed).
    #[must_use]
    pub fn offset(&self) -> usize {
        self.base.saturating_add(self.pos)
    }

    /// Bytes not yet consumed.
    #[must_use]
    pub fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    /// The bytes not yet consumed, without consuming them.
    #[must_use]
    pub fn rest(&self) -> &'a [u8] {
        self.bytes.get(self.pos..).unwrap_or_default()
    }

    /// A [`Corruption`] of `kind` at the next byte.
    #[must_use]
    pub fn error(&self, kind: CorruptionKind) -> Corruption {
        Corruption::new(kind, self.offset())
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Corruption> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or(self.error(CorruptionKind::BadLength))?;
        let out = self
            .bytes
            .get(self.pos..end)
            .ok_or(self.error(CorruptionKind::Truncated))?;
        self.pos = end;
        Ok(out)
    }

    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], Corruption> {
        let (head, _) = self
            .rest()
            .split_first_chunk::<N>()
            .ok_or(self.error(CorruptionKind::Truncated))?;
        self.pos += N;
        Ok(*head)
    }

    /// The next byte.
    pub fn u8(&mut self) -> Result<u8, Corruption> {
        Ok(u8::from_le_bytes(self.array()?))
    }

    /// The next little-endian `u16`.
    pub fn u16(&mut self) -> Result<u16, Corruption> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    /// The next little-endian `u32`.
    pub fn u32(&mut self) -> Result<u32, Corruption> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// The next little-endian `u64`.
    pub fn u64(&mut self) -> Result<u64, Corruption> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// The next little-endian `i64`.
    pub fn i64(&mut self) -> Result<i64, Corruption> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    /// A LEB128 varint of at most [`MAX_VARINT_LEN`] bytes whose value fits a `u64`; a
    /// redundant trailing zero group is accepted (see [`Reader::varint`]).
    pub fn varint_loose(&mut self) -> Result<u64, Corruption> {
        let start = self.clone();
        let bad = || start.error(CorruptionKind::InvalidField("varint"));
        let mut value = 0u64;
        for (i, shift) in (0..MAX_VARINT_LEN).zip((0u32..).step_by(7)) {
            let byte = self.u8().inspect_err(|_| *self = start.clone())?;
            let bits = u64::from(byte & 0x7f);
            // The tenth byte may only carry the top bit of a u64.
            if i == MAX_VARINT_LEN - 1 && bits > 1 {
                *self = start.clone();
                return Err(bad());
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        *self = start.clone();
        Err(bad())
    }

    /// A canonical LEB128 `u64`: [`Reader::varint_loose`], refusing redundant trailing zero
    /// groups, so each value has exactly one encoding.
    pub fn varint(&mut self) -> Result<u64, Corruption> {
        let start = self.clone();
        let value = self.varint_loose()?;
        if self.pos - start.pos != varint_len(value) {
            *self = start;
            return Err(self.error(CorruptionKind::InvalidField("varint")));
        }
        Ok(value)
    }

    /// A `u32` length, as `usize`.
    pub fn len_u32(&mut self) -> Result<usize, Corruption> {
        let at = self.error(CorruptionKind::BadLength);
        usize::try_from(self.u32()?).map_err(|_| at)
    }

    /// A `u32` count of items each at least `min_item_len` bytes long, accepted only when they
    /// can fit in what remains: call it before allocating.
    pub fn count_u32(&mut self, min_item_len: usize) -> Result<usize, Corruption> {
        let at = self.error(CorruptionKind::BadLength);
        let n = self.len_u32()?;
        match n.checked_mul(min_item_len) {
            Some(needed) if needed <= self.remaining() => Ok(n),
            _ => Err(at),
        }
    }

    /// A `u64` count of items of `item_size` bytes, accepted only when `count * item_size`
    /// bytes can still follow: call it before allocating `count` items.
    pub fn count(&mut self, item_size: usize) -> Result<usize, Corruption> {
        let at = self.error(CorruptionKind::BadLength);
        let count = usize::try_from(self.u64()?).map_err(|_| at.clone())?;
        let need = count.checked_mul(item_size.max(1)).ok_or(at.clone())?;
        if need > self.remaining() {
            return Err(at);
        }
        Ok(count)
    }

    /// `count` records of `each` bytes, checked against what remains before anything is used.
    pub fn records(&mut self, count: usize, each: usize) -> Result<&'a [u8], Corruption> {
        let len = count
            .checked_mul(each)
            .filter(|&len| len <= self.remaining())
            .ok_or(self.error(CorruptionKind::BadLength))?;
        self.take(len)
    }

    /// A `u32` length, then that many bytes of UTF-8; `field` names it in the error.
    pub fn string(&mut self, field: &'static str) -> Result<String, Corruption> {
        let at = self.offset();
        let n = self.len_u32()?;
        if n > self.remaining() {
            return Err(Corruption::new(CorruptionKind::BadLength, at));
        }
        let bytes = self.take(n)?;
        std::str::from_utf8(bytes)
            .map(str::to_string)
            .map_err(|_| Corruption::new(CorruptionKind::InvalidField(field), at))
    }

    /// Fails unless every byte has been consumed.
    pub fn finish(&self) -> Result<(), Corruption> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(self.error(CorruptionKind::BadLength))
        }
    }
}

/// Most bytes one varint may take (a `u64` in LEB128).
pub const MAX_VARINT_LEN: usize = 10;

/// Appends `v` as a LEB128 varint (7 bits per byte, low group first, shortest form).
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let low = (v & 0x7f).to_le_bytes()[0];
        v >>= 7;
        if v == 0 {
            out.push(low);
            return;
        }
        out.push(low | 0x80);
    }
}

/// Bytes `v` takes as a varint.
#[must_use]
pub fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros()).div_ceil(7) as usize
}

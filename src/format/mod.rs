//! On-disk byte layouts: pure encode/decode functions over byte slices.
//!
//! Owns: every byte ackstore writes, its checksums and its version numbers. Must never do I/O,
//! panic on any input, or allocate more than the input it was given: every decoder checks a
//! length against what remains (and against a maximum) before using it.
//!
//! Submodules, one per file kind:
//! - [`ledger`]: the ledger file (header, entry frames, sealed-ledger footer);
//! - [`partition`]: one partition of a cursor's ack set;
//! - [`meta`]: metadata records (topic and cursor).
//!
//! Shared helpers live here: [`Reader`], a bounds-checked little-endian cursor over a byte
//! slice, and [`crc32`], the checksum every format uses.

pub mod cursor;
pub mod ledger;
pub mod meta;
pub mod partition;

use crate::error::CorruptionKind;

/// CRC32 (IEEE, as computed by `crc32fast`) of the concatenation of `parts`.
#[must_use]
pub fn crc32(parts: &[&[u8]]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.finalize()
}

/// A bounds-checked little-endian reader over a byte slice.
///
/// Every read either returns the requested bytes or [`CorruptionKind::Truncated`]; it never
/// panics and never allocates.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader positioned at the start of `bytes`.
    #[must_use]
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    /// Bytes consumed so far.
    #[must_use]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not yet consumed.
    #[must_use]
    pub fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], CorruptionKind> {
        let end = self.pos.checked_add(n).ok_or(CorruptionKind::BadLength)?;
        let out = self
            .bytes
            .get(self.pos..end)
            .ok_or(CorruptionKind::Truncated)?;
        self.pos = end;
        Ok(out)
    }

    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], CorruptionKind> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// The next byte.
    pub fn u8(&mut self) -> Result<u8, CorruptionKind> {
        Ok(u8::from_le_bytes(self.array()?))
    }

    /// The next little-endian `u32`.
    pub fn u32(&mut self) -> Result<u32, CorruptionKind> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// The next little-endian `u64`.
    pub fn u64(&mut self) -> Result<u64, CorruptionKind> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A length-prefixed count read as `u64`, accepted only when `count * item_size` bytes can
    /// still follow: call it before allocating `count` items.
    pub fn count(&mut self, item_size: usize) -> Result<usize, CorruptionKind> {
        let count = usize::try_from(self.u64()?).map_err(|_| CorruptionKind::BadLength)?;
        let need = count
            .checked_mul(item_size.max(1))
            .ok_or(CorruptionKind::BadLength)?;
        if need > self.remaining() {
            return Err(CorruptionKind::BadLength);
        }
        Ok(count)
    }

    /// Fails unless every byte has been consumed.
    pub fn finish(&self) -> Result<(), CorruptionKind> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(CorruptionKind::BadLength)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_refuses_reads_past_the_end_without_panicking() {
        let mut r = Reader::new(&[1, 0, 0, 0, 2]);
        assert_eq!(r.u32(), Ok(1));
        assert_eq!(r.u32(), Err(CorruptionKind::Truncated));
        assert_eq!(r.u8(), Ok(2));
        assert_eq!(r.take(usize::MAX), Err(CorruptionKind::BadLength));
        r.finish().unwrap();
    }

    #[test]
    fn count_is_refused_when_the_items_cannot_fit() {
        let mut bytes = 3u64.to_le_bytes().to_vec();
        bytes.extend_from_slice(&[0; 23]);
        assert_eq!(Reader::new(&bytes).count(8), Err(CorruptionKind::BadLength));
        bytes.push(0);
        assert_eq!(Reader::new(&bytes).count(8), Ok(3));
        let huge = u64::MAX.to_le_bytes();
        assert_eq!(Reader::new(&huge).count(8), Err(CorruptionKind::BadLength));
    }

    #[test]
    fn crc_of_parts_equals_crc_of_concatenation() {
        assert_eq!(crc32(&[b"ab", b"cd"]), crc32fast::hash(b"abcd"));
    }
}

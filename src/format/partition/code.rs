//! The bodies of a version 2 partition record other than roaring: the gaps of the minority class
//! in a Golomb-Rice code, and a plain bitmap over the span the set uses.
//!
//! Owns: LEB128 varints, the bit stream (least significant bit first), the choice of the Rice
//! parameter and of the coded class, and turning a decoded set back into a roaring bitmap.
//! Must never: panic on any input, or allocate before checking that the input holds what the
//! allocation is for (see [`bitmap_from_runs`]).
//!
//! Both bodies start with the set's span: `lo` (its smallest value) and `hi - lo` (`hi` its
//! largest), as varints. `lo` and `hi` are members by definition, so only the values strictly
//! between them are coded.
#![expect(
    clippy::cast_possible_truncation,
    reason = "every narrowing cast takes the low byte of a varint or bit accumulator on purpose, \
              or a partition offset, count or run that was checked to be below 2^16 first"
)]

use roaring::RoaringBitmap;

/// Bytes of the largest LEB128 varint of a `u64`.
pub const MAX_VARINT_LEN: usize = 10;
/// Largest Rice parameter: a gap is below `2^16`, so a larger `k` never helps.
pub const MAX_RICE_K: u8 = 16;
/// Bit 7 of the parameter byte: the coded members are the holes (else the acked entries).
pub const HOLES_FLAG: u8 = 0x80;

/// Appends `v` as a LEB128 varint (the shortest form, the only one the decoder accepts back).
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes `v` takes as a varint.
pub fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros()).div_ceil(7) as usize
}

/// A reader of varints and fixed fields over a byte slice; every read is checked.
pub struct Cursor<'a> {
    bytes: &'a [u8],
    /// Bytes consumed so far.
    pub at: usize,
}

impl<'a> Cursor<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    /// The next byte, if any.
    pub fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    /// A varint of at most ten bytes whose value fits a `u64`.
    pub fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..MAX_VARINT_LEN {
            let b = self.byte()?;
            let part = u64::from(b & 0x7F);
            // The tenth byte may only carry the top bit of a u64.
            if i == MAX_VARINT_LEN - 1 && part > 1 {
                return None;
            }
            v |= part << (7 * i);
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    /// Everything not read yet.
    pub fn rest(&self) -> &'a [u8] {
        self.bytes.get(self.at..).unwrap_or_default()
    }
}

/// A bit stream writer, least significant bit first; the last byte is padded with zero bits.
struct BitWriter {
    out: Vec<u8>,
    acc: u64,
    bits: u32,
}

impl BitWriter {
    fn new(out: Vec<u8>) -> Self {
        Self {
            out,
            acc: 0,
            bits: 0,
        }
    }

    /// Writes the low `n` (at most 32) bits of `v`.
    fn bits(&mut self, v: u32, n: u32) {
        if n == 0 {
            return;
        }
        let mask = if n == 32 { u32::MAX } else { (1 << n) - 1 };
        self.acc |= u64::from(v & mask) << self.bits;
        self.bits += n;
        while self.bits >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.bits -= 8;
        }
    }

    /// Writes `q` one bits, then a zero bit.
    fn unary(&mut self, mut q: u32) {
        while q >= 32 {
            self.bits(u32::MAX, 32);
            q -= 32;
        }
        self.bits((1 << q) - 1, q + 1);
    }

    fn finish(mut self) -> Vec<u8> {
        if self.bits > 0 {
            self.out.push(self.acc as u8);
        }
        self.out
    }
}

/// A bit stream reader over a byte slice; reads past the end fail.
struct BitReader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl BitReader<'_> {
    fn remaining(&self) -> usize {
        (self.bytes.len() * 8).saturating_sub(self.pos)
    }

    fn bit(&mut self) -> Option<bool> {
        let byte = self.bytes.get(self.pos / 8)?;
        let b = (byte >> (self.pos % 8)) & 1 == 1;
        self.pos += 1;
        Some(b)
    }

    fn bits(&mut self, n: u8) -> Option<u32> {
        let mut v = 0;
        for i in 0..n {
            if self.bit()? {
                v |= 1 << i;
            }
        }
        Some(v)
    }

    /// Counts one bits up to the terminating zero; `None` past `limit` ones or the end.
    fn unary(&mut self, limit: u32) -> Option<u32> {
        let mut q = 0;
        while self.bit()? {
            q += 1;
            if q > limit {
                return None;
            }
        }
        Some(q)
    }
}

/// Calls `f` with the gap before each coded member of `bitmap` (all values below 2^16) strictly
/// between `lo` and `hi`: the acked entries, or with `holes` the entries that are not acked. The
/// gap is the number of entries between the member and the previous one (or `lo`).
fn for_each_gap(bitmap: &RoaringBitmap, lo: u32, hi: u32, holes: bool, mut f: impl FnMut(u32)) {
    let mut prev = lo;
    if holes {
        let mut last_acked = lo;
        for v in bitmap.iter().skip(1) {
            if v > last_acked + 1 {
                // Holes last_acked+1 ..= v-1: the first after a gap, the rest adjacent.
                f(last_acked - prev);
                for _ in last_acked + 2..v {
                    f(0);
                }
                prev = v - 1;
            }
            last_acked = v;
            if v >= hi {
                break;
            }
        }
    } else {
        for v in bitmap.iter().skip(1) {
            if v >= hi {
                break;
            }
            f(v - prev - 1);
            prev = v;
        }
    }
}

/// How a set is best written as Rice-coded gaps: which class, which parameter, how many members
/// and the bits the codes take.
#[derive(Clone, Copy, Debug)]
struct RicePlan {
    holes: bool,
    k: u8,
    members: u64,
    bits: u64,
}

fn plan(bitmap: &RoaringBitmap, lo: u32, hi: u32, holes: bool) -> RicePlan {
    // sum over gaps of (gap >> k), for every k.
    let mut quotients = [0u64; MAX_RICE_K as usize + 1];
    let mut members = 0u64;
    for_each_gap(bitmap, lo, hi, holes, |gap| {
        members += 1;
        for (k, q) in quotients.iter_mut().enumerate() {
            *q += u64::from(gap >> k);
        }
    });
    let mut best = RicePlan {
        holes,
        k: 0,
        members,
        bits: u64::MAX,
    };
    for (k, q) in (0..=MAX_RICE_K).zip(quotients) {
        let bits = q + members * (u64::from(k) + 1);
        if bits < best.bits {
            best.bits = bits;
            best.k = k;
        }
    }
    best
}

/// The gaps body of a non-empty `bitmap` with smallest value `lo` and largest `hi` (below 2^16):
/// `lo`, `hi - lo`, the parameter byte (the holes flag, Rice `k`), the member count, the codes.
/// The class and `k` are those of the fewest bits (acked entries and the smallest `k` on ties),
/// so the body is a function of the set alone.
pub fn gaps_body(bitmap: &RoaringBitmap, lo: u32, hi: u32) -> Vec<u8> {
    let acked = plan(bitmap, lo, hi, false);
    let holes = plan(bitmap, lo, hi, true);
    let best = if holes.bits < acked.bits {
        holes
    } else {
        acked
    };
    let mut out = Vec::with_capacity(
        3 * MAX_VARINT_LEN + 1 + usize::try_from(best.bits.div_ceil(8)).unwrap_or(0),
    );
    put_varint(&mut out, lo.into());
    put_varint(&mut out, (hi - lo).into());
    out.push(best.k | if best.holes { HOLES_FLAG } else { 0 });
    put_varint(&mut out, best.members);
    let mut w = BitWriter::new(out);
    for_each_gap(bitmap, lo, hi, best.holes, |gap| {
        w.unary(gap >> best.k);
        w.bits(gap, best.k.into());
    });
    w.finish()
}

/// The bitmap body of a non-empty `bitmap` with smallest value `lo` and largest `hi`: `lo`,
/// `hi - lo`, then one bit per entry strictly between them (1 = acked), padded with zeros.
pub fn span_body(bitmap: &RoaringBitmap, lo: u32, hi: u32) -> Vec<u8> {
    let inner = (hi - lo).saturating_sub(1);
    let mut out = Vec::with_capacity(2 * MAX_VARINT_LEN + (inner as usize).div_ceil(8));
    put_varint(&mut out, lo.into());
    put_varint(&mut out, (hi - lo).into());
    let start = out.len();
    out.resize(start + (inner as usize).div_ceil(8), 0);
    for v in bitmap.iter().skip(1) {
        if v >= hi {
            break;
        }
        let bit = (v - lo - 1) as usize;
        if let Some(byte) = out.get_mut(start + bit / 8) {
            *byte |= 1 << (bit % 8);
        }
    }
    out
}

/// Bytes of [`span_body`] for a set with smallest value `lo` and largest `hi`.
pub fn span_body_len(lo: u32, hi: u32) -> usize {
    varint_len(lo.into())
        + varint_len((hi - lo).into())
        + ((hi - lo).saturating_sub(1) as usize).div_ceil(8)
}

/// Why a body does not decode; the caller turns it into a corruption error naming the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// The span (`lo`, `hi - lo`) is malformed or leaves the partition.
    Span,
    /// The parameter byte or member count is impossible, or the body is not as long as they say.
    Length,
    /// A code runs past the body or puts a member outside the span.
    Code,
}

/// Reads the span that starts both bodies; `hi` stays below `span` (2^16).
fn read_span(c: &mut Cursor<'_>, span: u64) -> Result<(u32, u32), BodyError> {
    let lo = c.varint().ok_or(BodyError::Span)?;
    let len = c.varint().ok_or(BodyError::Span)?;
    let hi = lo.checked_add(len).ok_or(BodyError::Span)?;
    if hi >= span {
        return Err(BodyError::Span);
    }
    // Both below 2^16.
    Ok((lo as u32, hi as u32))
}

/// Decodes a gaps body into the runs of acked entries (inclusive, ascending, not adjacent).
pub fn decode_gaps(body: &[u8], span: u64) -> Result<Vec<(u32, u32)>, BodyError> {
    let mut c = Cursor::new(body);
    let (lo, hi) = read_span(&mut c, span)?;
    let param = c.byte().ok_or(BodyError::Length)?;
    let holes = param & HOLES_FLAG != 0;
    let k = param & !HOLES_FLAG;
    if k > MAX_RICE_K {
        return Err(BodyError::Length);
    }
    let members = c.varint().ok_or(BodyError::Length)?;
    let inner = u64::from((hi - lo).saturating_sub(1));
    let mut bits = BitReader {
        bytes: c.rest(),
        pos: 0,
    };
    // Every code takes at least k + 1 bits: the count is checked against the body before the
    // run list (at most members + 2 runs) is allocated.
    if members > inner || members * (u64::from(k) + 1) > bits.remaining() as u64 {
        return Err(BodyError::Length);
    }
    let mut runs = Vec::with_capacity(usize::try_from(members).unwrap_or(0) + 2);
    let mut prev = lo;
    if !holes {
        runs.push((lo, lo));
    }
    let mut run_start = lo;
    for _ in 0..members {
        let q = bits.unary(u32::MAX >> MAX_RICE_K).ok_or(BodyError::Code)?;
        let r = bits.bits(k).ok_or(BodyError::Code)?;
        let gap = (u64::from(q) << k) | u64::from(r);
        let member = u64::from(prev) + gap + 1;
        if member >= u64::from(hi) {
            return Err(BodyError::Code);
        }
        let member = member as u32;
        if holes {
            if member > run_start {
                runs.push((run_start, member - 1));
            }
            run_start = member + 1;
        } else {
            push_value(&mut runs, member);
        }
        prev = member;
    }
    if holes {
        runs.push((run_start, hi));
    } else if hi != lo {
        push_value(&mut runs, hi);
    }
    Ok(runs)
}

/// Adds `v` (above every value so far) to a run list.
fn push_value(runs: &mut Vec<(u32, u32)>, v: u32) {
    match runs.last_mut() {
        Some((_, last)) if *last + 1 == v => *last = v,
        _ => runs.push((v, v)),
    }
}

/// Decodes a bitmap body into the runs of acked entries.
pub fn decode_span(body: &[u8], span: u64) -> Result<Vec<(u32, u32)>, BodyError> {
    let mut c = Cursor::new(body);
    let (lo, hi) = read_span(&mut c, span)?;
    let inner = (hi - lo).saturating_sub(1);
    let bits = c.rest();
    if bits.len() != (inner as usize).div_ceil(8) {
        return Err(BodyError::Length);
    }
    // At most one run per two bits, plus the ends: bounded by the body just checked.
    let mut runs = Vec::with_capacity(bits.len() * 4 + 2);
    runs.push((lo, lo));
    let mut reader = BitReader {
        bytes: bits,
        pos: 0,
    };
    for i in 0..inner {
        if reader.bit().ok_or(BodyError::Code)? {
            push_value(&mut runs, lo + 1 + i);
        }
    }
    if hi != lo {
        push_value(&mut runs, hi);
    }
    Ok(runs)
}

/// Builds the roaring bitmap of `runs` (inclusive, ascending, not adjacent, below 2^16) in the
/// smallest container form, through roaring's own checked deserialization: no container larger
/// than that form is ever allocated (at most 8 KiB, and run or array forms only when they are
/// smaller than 4 bytes per run or 2 bytes per value, which the caller's input bounds).
pub fn bitmap_from_runs(runs: &[(u32, u32)]) -> Option<RoaringBitmap> {
    const ARRAY_LIMIT: u64 = 4096;
    const BITMAP_BYTES: usize = 8192;
    let Some(last) = runs.last() else {
        return Some(RoaringBitmap::new());
    };
    if last.1 >= 1 << 16 {
        return None;
    }
    let card: u64 = runs.iter().map(|(a, b)| u64::from(b - a) + 1).sum();
    let run_bytes = 2 + 4 * runs.len();
    let plain_bytes = if card <= ARRAY_LIMIT {
        2 * card as usize
    } else {
        BITMAP_BYTES
    };
    let description = |out: &mut Vec<u8>| {
        out.extend_from_slice(&0u16.to_le_bytes());
        // card is 1..=65536.
        out.extend_from_slice(&((card - 1) as u16).to_le_bytes());
    };
    let mut ser = Vec::with_capacity(16 + run_bytes.min(plain_bytes));
    if run_bytes < plain_bytes {
        // Cookie with runs and one container, the run flag, the description, the runs.
        ser.extend_from_slice(&12347u32.to_le_bytes());
        ser.push(1);
        description(&mut ser);
        ser.extend_from_slice(&(runs.len() as u16).to_le_bytes());
        for (a, b) in runs {
            ser.extend_from_slice(&(*a as u16).to_le_bytes());
            ser.extend_from_slice(&((b - a) as u16).to_le_bytes());
        }
    } else {
        // Cookie without runs, one container, the description, its offset, the data.
        ser.extend_from_slice(&12346u32.to_le_bytes());
        ser.extend_from_slice(&1u32.to_le_bytes());
        description(&mut ser);
        ser.extend_from_slice(&16u32.to_le_bytes());
        if card <= ARRAY_LIMIT {
            for (a, b) in runs {
                for v in *a..=*b {
                    ser.extend_from_slice(&(v as u16).to_le_bytes());
                }
            }
        } else {
            let start = ser.len();
            ser.resize(start + BITMAP_BYTES, 0);
            for (a, b) in runs {
                for v in *a..=*b {
                    if let Some(byte) = ser.get_mut(start + v as usize / 8) {
                        *byte |= 1 << (v % 8);
                    }
                }
            }
        }
    }
    RoaringBitmap::deserialize_from(&ser[..]).ok()
}

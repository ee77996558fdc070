//! The bodies of a version 2 partition record other than roaring: the gaps of the minority class
//! in a Golomb-Rice or a bounded (truncated binary) code, and a plain bitmap over the span the
//! set uses.
//!
//! Owns: LEB128 varints, the bit stream (least significant bit first), the choice of the coded
//! class, the code and its parameter, and turning a decoded body back into a roaring bitmap.
//! Must never: panic on any input, or allocate more than the decoded set's smallest roaring
//! form (see [`bitmap_from_runs`]).
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
/// Bit 6 of the parameter byte: the gaps use the bounded code (else Rice with `k` in bits 0-4).
pub const BOUNDED_FLAG: u8 = 0x40;

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

/// How the gaps of one class are coded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Code {
    /// Golomb-Rice with parameter `k`: the quotient `gap >> k` in unary, then `k` low bits.
    Rice(u8),
    /// Every gap in `[min, min + range)`, written as `gap - min` in the truncated binary code of
    /// `range` values: `floor(log2 range)` or one more bit.
    Bounded { min: u32, range: u32 },
}

/// How a set is best written as gaps: which class, which code, how many members and the bits
/// the codes take.
#[derive(Clone, Copy, Debug)]
struct Plan {
    holes: bool,
    code: Code,
    members: u64,
    bits: u64,
}

/// Bits of `x` (below `range`) in the truncated binary code of `range` values, and the split:
/// with `b = floor(log2 range)` and `u = 2^(b+1) - range`, values below `u` take `b` bits.
fn truncated_binary(range: u32) -> (u32, u64) {
    let b = range.max(1).ilog2();
    let u = (1u64 << (b + 1)) - u64::from(range);
    (b, u)
}

fn plan(bitmap: &RoaringBitmap, lo: u32, hi: u32, holes: bool) -> Plan {
    // sum over gaps of (gap >> k), for every k; and the smallest and largest gap.
    let mut quotients = [0u64; MAX_RICE_K as usize + 1];
    let mut members = 0u64;
    let (mut min, mut max) = (u32::MAX, 0);
    for_each_gap(bitmap, lo, hi, holes, |gap| {
        members += 1;
        min = min.min(gap);
        max = max.max(gap);
        for (k, q) in quotients.iter_mut().enumerate() {
            *q += u64::from(gap >> k);
        }
    });
    let mut best = Plan {
        holes,
        code: Code::Rice(0),
        members,
        bits: u64::MAX,
    };
    for (k, q) in (0..=MAX_RICE_K).zip(quotients) {
        let bits = q + members * (u64::from(k) + 1);
        if bits < best.bits {
            best.bits = bits;
            best.code = Code::Rice(k);
        }
    }
    if members > 0 {
        let range = max - min + 1;
        let (b, u) = truncated_binary(range);
        let mut bits = 0u64;
        for_each_gap(bitmap, lo, hi, holes, |gap| {
            bits += u64::from(b) + u64::from(u64::from(gap - min) >= u);
        });
        // The bounded code also spends the bytes of `min` and `range - 1` in the body.
        let extra = 8 * (varint_len(min.into()) + varint_len((range - 1).into())) as u64;
        if bits + extra < best.bits {
            best.bits = bits + extra;
            best.code = Code::Bounded { min, range };
        }
    }
    best
}

/// The gaps body of a non-empty `bitmap` with smallest value `lo` and largest `hi` (below 2^16):
/// `lo`, `hi - lo`, the parameter byte (holes flag, bounded flag, Rice `k`), the member count,
/// for the bounded code `min` and `range - 1`, then the codes. The class and the code are those
/// of the fewest bits (ties: acked entries, Rice, the smallest `k`), so the body is a function
/// of the set alone.
pub fn gaps_body(bitmap: &RoaringBitmap, lo: u32, hi: u32) -> Vec<u8> {
    let acked = plan(bitmap, lo, hi, false);
    let holes = plan(bitmap, lo, hi, true);
    let best = if holes.bits < acked.bits {
        holes
    } else {
        acked
    };
    let mut out = Vec::with_capacity(
        5 * MAX_VARINT_LEN + 1 + usize::try_from(best.bits.div_ceil(8)).unwrap_or(0),
    );
    put_varint(&mut out, lo.into());
    put_varint(&mut out, (hi - lo).into());
    let holes_flag = if best.holes { HOLES_FLAG } else { 0 };
    match best.code {
        Code::Rice(k) => {
            out.push(holes_flag | k);
            put_varint(&mut out, best.members);
            let mut writer = BitWriter::new(out);
            for_each_gap(bitmap, lo, hi, best.holes, |gap| {
                writer.unary(gap >> k);
                writer.bits(gap, k.into());
            });
            writer.finish()
        }
        Code::Bounded { min, range } => {
            out.push(holes_flag | BOUNDED_FLAG);
            put_varint(&mut out, best.members);
            put_varint(&mut out, min.into());
            put_varint(&mut out, (range - 1).into());
            let (width, short) = truncated_binary(range);
            let mut writer = BitWriter::new(out);
            for_each_gap(bitmap, lo, hi, best.holes, |gap| {
                let value = u64::from(gap - min);
                if value < short {
                    writer.bits(value as u32, width);
                } else {
                    let long = value - short;
                    writer.bits((short + (long >> 1)) as u32, width);
                    writer.bits((long & 1) as u32, 1);
                }
            });
            writer.finish()
        }
    }
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
    /// The parameter byte or a count is impossible, or the body is not as long as they say.
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

/// Receives the acked values of a decoded body in ascending order and reports maximal runs.
struct Runs<F: FnMut(u32, u32)> {
    run: Option<(u32, u32)>,
    emit: F,
}

impl<F: FnMut(u32, u32)> Runs<F> {
    fn range(&mut self, first: u32, last: u32) {
        match &mut self.run {
            Some((_, end)) if *end + 1 == first => *end = last,
            Some((start, end)) => {
                (self.emit)(*start, *end);
                self.run = Some((first, last));
            }
            None => self.run = Some((first, last)),
        }
    }

    fn finish(mut self) {
        if let Some((start, end)) = self.run {
            (self.emit)(start, end);
        }
    }
}

/// Decodes a gaps body, calling `emit` with each maximal run of acked entries, ascending.
/// Nothing is allocated: the caller runs it once to size its output, once to fill it.
pub fn decode_gaps(body: &[u8], span: u64, emit: impl FnMut(u32, u32)) -> Result<(), BodyError> {
    let mut fields = Cursor::new(body);
    let (lo, hi) = read_span(&mut fields, span)?;
    let param = fields.byte().ok_or(BodyError::Length)?;
    let holes = param & HOLES_FLAG != 0;
    let bounded = param & BOUNDED_FLAG != 0;
    let k = param & !(HOLES_FLAG | BOUNDED_FLAG);
    if k > MAX_RICE_K || (bounded && k != 0) {
        return Err(BodyError::Length);
    }
    let members = fields.varint().ok_or(BodyError::Length)?;
    let inner = u64::from((hi - lo).saturating_sub(1));
    if members > inner {
        return Err(BodyError::Length);
    }
    let (min, range) = if bounded {
        let min = fields.varint().ok_or(BodyError::Length)?;
        let range = fields.varint().ok_or(BodyError::Length)?.saturating_add(1);
        if min > inner || range > inner + 1 {
            return Err(BodyError::Length);
        }
        // Both at most 2^16.
        (min as u32, range as u32)
    } else {
        (0, 0)
    };
    let (width, short) = truncated_binary(range);
    let mut bits = BitReader {
        bytes: fields.rest(),
        pos: 0,
    };
    let least_bits = if bounded {
        width.into()
    } else {
        u64::from(k) + 1
    };
    if members * least_bits > bits.remaining() as u64 {
        return Err(BodyError::Length);
    }
    let mut runs = Runs { run: None, emit };
    runs.range(lo, lo);
    let mut prev = lo;
    let mut run_start = lo + 1;
    for _ in 0..members {
        let gap = if bounded {
            let head = u64::from(bits.bits(width as u8).ok_or(BodyError::Code)?);
            let value = if head < short {
                head
            } else {
                let last = u64::from(bits.bits(1).ok_or(BodyError::Code)?);
                short + 2 * (head - short) + last
            };
            if value >= u64::from(range) {
                return Err(BodyError::Code);
            }
            u64::from(min) + value
        } else {
            let quotient = bits.unary(u32::MAX >> MAX_RICE_K).ok_or(BodyError::Code)?;
            let low = bits.bits(k).ok_or(BodyError::Code)?;
            (u64::from(quotient) << k) | u64::from(low)
        };
        let member = u64::from(prev) + gap + 1;
        if member >= u64::from(hi) {
            return Err(BodyError::Code);
        }
        let member = member as u32;
        if holes {
            if member > run_start {
                runs.range(run_start, member - 1);
            }
            run_start = member + 1;
        } else {
            runs.range(member, member);
        }
        prev = member;
    }
    if holes {
        if hi > lo {
            runs.range(run_start, hi);
        }
    } else if hi != lo {
        runs.range(hi, hi);
    }
    runs.finish();
    Ok(())
}

/// Decodes a bitmap body, calling `emit` with each maximal run of acked entries, ascending.
pub fn decode_span(body: &[u8], span: u64, emit: impl FnMut(u32, u32)) -> Result<(), BodyError> {
    let mut c = Cursor::new(body);
    let (lo, hi) = read_span(&mut c, span)?;
    let inner = (hi - lo).saturating_sub(1);
    let bits = c.rest();
    if bits.len() != (inner as usize).div_ceil(8) {
        return Err(BodyError::Length);
    }
    let mut runs = Runs { run: None, emit };
    runs.range(lo, lo);
    let mut reader = BitReader {
        bytes: bits,
        pos: 0,
    };
    for i in 0..inner {
        if reader.bit().ok_or(BodyError::Code)? {
            runs.range(lo + 1 + i, lo + 1 + i);
        }
    }
    if hi != lo {
        runs.range(hi, hi);
    }
    runs.finish();
    Ok(())
}

/// Builds the roaring bitmap of the runs `decode` reports (inclusive, ascending, not adjacent,
/// below 2^16) in the smallest container form, through roaring's own checked deserialization.
/// `decode` runs twice: once to count, once to fill a serialization of exactly the chosen form,
/// so nothing larger than that form (8 KiB at most) is allocated, whatever the record claims.
pub fn bitmap_from_runs(
    decode: impl Fn(&mut dyn FnMut(u32, u32)) -> Result<(), BodyError>,
) -> Result<RoaringBitmap, BodyError> {
    const ARRAY_LIMIT: u64 = 4096;
    const BITMAP_BYTES: usize = 8192;
    let (mut card, mut n_runs, mut last) = (0u64, 0usize, 0u32);
    decode(&mut |a, b| {
        card += u64::from(b - a) + 1;
        n_runs += 1;
        last = b;
    })?;
    if n_runs == 0 {
        return Ok(RoaringBitmap::new());
    }
    if last >= 1 << 16 {
        return Err(BodyError::Span);
    }
    let run_bytes = 2 + 4 * n_runs;
    let plain_bytes = if card <= ARRAY_LIMIT {
        2 * card as usize
    } else {
        BITMAP_BYTES
    };
    let mut ser = Vec::with_capacity(16 + run_bytes.min(plain_bytes));
    let runs_form = run_bytes < plain_bytes;
    if runs_form {
        // Cookie with runs and one container, the run flag.
        ser.extend_from_slice(&12347u32.to_le_bytes());
        ser.push(1);
    } else {
        // Cookie without runs, one container.
        ser.extend_from_slice(&12346u32.to_le_bytes());
        ser.extend_from_slice(&1u32.to_le_bytes());
    }
    // The description: key 0, cardinality - 1 (card is 1..=65536).
    ser.extend_from_slice(&0u16.to_le_bytes());
    ser.extend_from_slice(&((card - 1) as u16).to_le_bytes());
    if runs_form {
        // Fewer than 2,048 runs here.
        ser.extend_from_slice(&(n_runs as u16).to_le_bytes());
        decode(&mut |a, b| {
            ser.extend_from_slice(&(a as u16).to_le_bytes());
            ser.extend_from_slice(&((b - a) as u16).to_le_bytes());
        })?;
    } else {
        // The container's offset, then its data.
        ser.extend_from_slice(&16u32.to_le_bytes());
        if card <= ARRAY_LIMIT {
            decode(&mut |a, b| {
                for v in a..=b {
                    ser.extend_from_slice(&(v as u16).to_le_bytes());
                }
            })?;
        } else {
            let start = ser.len();
            ser.resize(start + BITMAP_BYTES, 0);
            decode(&mut |a, b| {
                for v in a..=b {
                    if let Some(byte) = ser.get_mut(start + v as usize / 8) {
                        *byte |= 1 << (v % 8);
                    }
                }
            })?;
        }
    }
    RoaringBitmap::deserialize_from(&ser[..]).map_err(|_| BodyError::Code)
}

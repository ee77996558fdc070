//! The bodies of a version 2 partition record other than roaring: the gaps of the minority class
//! in a Golomb-Rice or a bounded (truncated binary) code, and a plain bitmap over the span the
//! set uses.
//!
//! Owns: LEB128 varints, the bit stream (least significant bit first), the dense form of a
//! partition's set ([`Words`]: one bit per offset, 8 KiB) that every body is encoded from and
//! decoded into, the choice of the coded class, code and parameter, and the canonical roaring
//! serialization of a set. Must never: panic on any input, or allocate more than that fixed
//! 8 KiB, the record's own length and the decoded set's smallest roaring form.
//!
//! Both bodies start with the set's span: `lo` (its smallest value) and `hi - lo` (`hi` its
//! largest), as varints. `lo` and `hi` are members by definition, so only the values strictly
//! between them are coded.
#![expect(
    clippy::cast_possible_truncation,
    reason = "every narrowing cast takes the low byte of a varint or bit accumulator on purpose, \
              or a partition offset, count or run that was checked to be below 2^16 first"
)]

use std::cell::Cell;

use crate::format::Reader;
pub use crate::format::{MAX_VARINT_LEN, put_varint, varint_len};
use roaring::RoaringBitmap;

/// Largest Rice parameter: a gap is below `2^16`, so a larger `k` never helps.
pub const MAX_RICE_K: u8 = 16;
/// Bit 7 of the parameter byte: the coded members are the holes (else the acked entries).
pub const HOLES_FLAG: u8 = 0x80;
/// Bit 6 of the parameter byte: the gaps use the bounded code (else Rice with `k` in bits 0-4).
pub const BOUNDED_FLAG: u8 = 0x40;

/// A bit stream writer, least significant bit first; the last byte is padded with zero bits.
/// Bits gather in a 64-bit accumulator that is written out 8 bytes at a time, when full.
struct BitWriter {
    out: Vec<u8>,
    /// The pending bits, the oldest lowest; bits at and above `bits` are zero.
    acc: u64,
    /// How many bits `acc` holds: below 64.
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
        let v = u64::from(v) & (u64::MAX >> (64 - n));
        self.acc |= v << self.bits;
        let total = self.bits + n;
        if total >= 64 {
            self.out.extend_from_slice(&self.acc.to_le_bytes());
            // `total >= 64` with `n <= 32` means `bits >= 32`: the shift is below 64, and it
            // keeps the bits of `v` that did not fit.
            self.acc = v >> (64 - self.bits);
            self.bits = total - 64;
        } else {
            self.bits = total;
        }
    }

    /// Writes `n` zero bits.
    fn zeros(&mut self, mut n: u64) {
        while n >= 32 {
            self.bits(0, 32);
            n -= 32;
        }
        self.bits(0, n as u32);
    }

    /// Writes the Rice code of `gap` with parameter `k`: `gap >> k` one bits, a zero bit, then
    /// the low `k` bits of `gap`; in one write when it takes at most 31 bits (every shift
    /// below 31).
    fn rice(&mut self, gap: u32, k: u8) {
        let (q, k) = (gap >> k, u32::from(k));
        if q + 1 + k < 32 {
            let low = gap & ((1 << k) - 1);
            self.bits(((1 << q) - 1) | (low << (q + 1)), q + 1 + k);
        } else {
            self.unary(q);
            self.bits(gap, k);
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
        let bytes = self.bits.div_ceil(8) as usize;
        self.out
            .extend_from_slice(self.acc.to_le_bytes().get(..bytes).unwrap_or_default());
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

    /// The next (up to) 57 bits at the read position, zeros past the end.
    fn peek(&self) -> u64 {
        let at = self.pos / 8;
        if let Some(chunk) = self.bytes.get(at..at + 8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            return u64::from_le_bytes(word) >> (self.pos % 8);
        }
        let mut chunk = [0u8; 8];
        let available = self.bytes.get(at..).unwrap_or_default();
        for (slot, byte) in chunk.iter_mut().zip(available) {
            *slot = *byte;
        }
        u64::from_le_bytes(chunk) >> (self.pos % 8)
    }

    /// `n` (at most 32) bits, least significant first.
    fn bits(&mut self, n: u32) -> Option<u32> {
        if n as usize > self.remaining() {
            return None;
        }
        let v = if n == 0 {
            0
        } else {
            (self.peek() & (u64::MAX >> (64 - n))) as u32
        };
        self.pos += n as usize;
        Some(v)
    }

    /// Whether every bit from the read position to the end is zero.
    fn rest_is_zero(&self) -> bool {
        let at = self.pos / 8;
        self.bytes.get(at).map_or(0, |b| b >> (self.pos % 8)) == 0
            && self
                .bytes
                .get(at + 1..)
                .unwrap_or_default()
                .iter()
                .all(|b| *b == 0)
    }

    /// A Rice code with parameter `k`: the quotient in unary (`None` past `limit` ones or the
    /// end), then `k` low bits; from one peek when the code is within it.
    fn rice(&mut self, k: u8, limit: u32) -> Option<u64> {
        let k = u32::from(k);
        let peeked = self.peek();
        let q = (!peeked).trailing_zeros();
        if q + 1 + k <= 56 && q <= limit && (q + 1 + k) as usize <= self.remaining() {
            let low = (peeked >> (q + 1)) & ((1u64 << k) - 1);
            self.pos += (q + 1 + k) as usize;
            return Some((u64::from(q) << k) | low);
        }
        let quotient = self.unary(limit)?;
        let low = self.bits(k)?;
        Some((u64::from(quotient) << k) | u64::from(low))
    }

    /// Counts one bits up to the terminating zero; `None` past `limit` ones or the end.
    fn unary(&mut self, limit: u32) -> Option<u32> {
        let mut q = 0u32;
        loop {
            let ones = (!self.peek()).trailing_zeros().min(56);
            if ones < 56 {
                // The terminating zero is within the peeked bits.
                q += ones;
                if q > limit || (ones as usize) >= self.remaining() {
                    return None;
                }
                self.pos += ones as usize + 1;
                return Some(q);
            }
            q += 56;
            if q > limit || 56 > self.remaining() {
                return None;
            }
            self.pos += 56;
        }
    }
}

/// Number of 64-bit words of a partition's dense form.
pub const WORDS: usize = 1 << 10;

/// The dense form of a partition's set: bit `v % 64` of word `v / 64` is offset `v`.
pub type Words = Vec<u64>;

/// The dense form of the empty set.
pub fn empty_words() -> Words {
    vec![0; WORDS]
}

thread_local! {
    /// A dense form of the empty set the decoders and the encoder take and [`keep_words`] gives
    /// back.
    static KEPT_WORDS: Cell<Option<Words>> = const { Cell::new(None) };
}

/// The dense form of the empty set for a decoder (or [`with_words_of`]) to fill: the one this
/// thread kept ([`keep_words`]), or a new one. Every partition a cursor loads was decoded into
/// 8 KiB taken from `calloc` and zeroed whole: a quarter of the instructions of an ack that
/// loads its partition (`docs/benchmarks.md`, "A flush tick's encoder without scans of the
/// dense form").
///
/// Memory: 8 KiB a thread that encodes or decodes partitions, kept until the thread ends,
/// outside any ack budget.
pub fn zeroed_words() -> Words {
    KEPT_WORDS
        .try_with(Cell::take)
        .ok()
        .flatten()
        .unwrap_or_else(empty_words)
}

/// Keeps `words`, a set (decoded, or filled by [`with_words_of`]) whose members all lie between
/// `bounds` (its smallest and largest, `None` for the empty set), for this thread's next
/// [`zeroed_words`], once the words between them are zeroed: the form is kept only all zero. A
/// form left midway (an error, a panic) is never given back, so nothing set in it can reach the
/// next use.
pub fn keep_words(mut words: Words, bounds: Option<(u32, u32)>) {
    if words.len() != WORDS {
        return;
    }
    if let Some((lo, hi)) = bounds {
        words
            .get_mut(lo as usize / 64..=hi as usize / 64)
            .unwrap_or_default()
            .fill(0);
    }
    debug_assert!(
        words.iter().all(|w| *w == 0),
        "a member outside the bounds given"
    );
    // Gone as the thread ends: the form is dropped instead.
    let _ = KEPT_WORDS.try_with(|kept| kept.set(Some(words)));
}

pub fn set_bit(words: &mut Words, v: u32) {
    if let Some(w) = words.get_mut(v as usize / 64) {
        *w |= 1 << (v % 64);
    }
}

/// Sets (or with `clear` clears) offsets `first ..= last`.
pub fn fill(words: &mut Words, first: u32, last: u32, clear: bool) {
    if first > last {
        return;
    }
    let (a, b) = (first as usize / 64, last as usize / 64);
    for (i, w) in words.iter_mut().enumerate().take(b + 1).skip(a) {
        let mut mask = u64::MAX;
        if i == a {
            mask &= u64::MAX << (first % 64);
        }
        if i == b {
            mask &= u64::MAX >> (63 - last % 64);
        }
        if clear {
            *w &= !mask;
        } else {
            *w |= mask;
        }
    }
}

/// Words [`first_nonzero`] and [`last_nonzero`] test at once: a partition of a few entries
/// holds nearly 1,024 zero words, which one OR per block passes over faster than a test per
/// word.
const SCAN_BLOCK: usize = 8;

/// The index of the first nonzero word.
fn first_nonzero(words: &[u64]) -> Option<usize> {
    let block = words
        .chunks(SCAN_BLOCK)
        .position(|b| b.iter().fold(0, |acc, w| acc | w) != 0)?;
    let start = block * SCAN_BLOCK;
    let within = words.get(start..)?.iter().position(|w| *w != 0)?;
    Some(start + within)
}

/// The index of the last nonzero word.
fn last_nonzero(words: &[u64]) -> Option<usize> {
    let block = words
        .chunks(SCAN_BLOCK)
        .rposition(|b| b.iter().fold(0, |acc, w| acc | w) != 0)?;
    let start = block * SCAN_BLOCK;
    let end = words.len().min(start + SCAN_BLOCK);
    let within = words.get(start..end)?.iter().rposition(|w| *w != 0)?;
    Some(start + within)
}

/// The smallest and largest offset of a non-empty set.
pub fn bounds(words: &[u64]) -> Option<(u32, u32)> {
    let first = first_nonzero(words)?;
    let last = last_nonzero(words)?;
    let lo = first as u32 * 64 + words.get(first)?.trailing_zeros();
    let hi = last as u32 * 64 + 63 - words.get(last)?.leading_zeros();
    Some((lo, hi))
}

/// Where the one container of a roaring portable serialization starts and how long it is, read
/// from the serialization's header.
#[derive(Debug, Clone, Copy)]
pub struct PortableLayout {
    /// Offset of the container's data; for a set with no container, the serialization's length.
    pub data_at: usize,
    /// Length of the container's data (0 for no container).
    pub data_len: usize,
    /// Cardinality of the container (0 for no container).
    pub card: usize,
    /// Whether the container is a run container.
    pub run: bool,
}

impl PortableLayout {
    /// The length the whole serialization must have.
    pub fn len(&self) -> usize {
        self.data_at + self.data_len
    }
}

/// The layout of a roaring portable serialization that holds what a partition can (no
/// container, or one container with key 0), from its header alone; `None` for anything else.
/// Both partition format versions accept exactly the serializations this describes.
pub fn portable_layout(body: &[u8]) -> Option<PortableLayout> {
    let u16_at = |at: usize| Reader::new(body.get(at..)?).u16().ok();
    let cookie = Reader::new(body).u32().ok()?;
    // (where the container description starts, whether the container is a run container)
    let (description_at, run) = if cookie == COOKIE_NO_RUNS {
        match Reader::new(body.get(4..)?).u32().ok()? {
            0 => {
                return Some(PortableLayout {
                    data_at: 8,
                    data_len: 0,
                    card: 0,
                    run: false,
                });
            }
            1 => (8, false),
            _ => return None,
        }
    } else if cookie == COOKIE_RUNS {
        // One container, with runs: the run flag byte, no offsets (fewer than 4 containers).
        match body.get(4)? {
            0 => (5, false),
            1 => (5, true),
            _ => return None,
        }
    } else {
        return None;
    };
    if u16_at(description_at)? != 0 {
        return None;
    }
    let card = usize::from(u16_at(description_at + 2)?) + 1;
    let data_at = if cookie == COOKIE_NO_RUNS {
        description_at + 8
    } else {
        description_at + 4
    };
    let data_len = if run {
        2 + 4 * usize::from(u16_at(data_at)?)
    } else if card <= ARRAY_LIMIT {
        2 * card
    } else {
        8 * WORDS
    };
    Some(PortableLayout {
        data_at,
        data_len,
        card,
        run,
    })
}

/// Parses a roaring portable serialization that holds what a partition can (no container, or
/// one container with key 0) into the dense form; `None` for anything else or a length that is
/// not exactly the serialization's. Run and array contents are not checked for order: the
/// caller compares the re-encoded set with its input.
pub fn parse_roaring(body: &[u8]) -> Option<Words> {
    let mut words = zeroed_words();
    parse_roaring_into(body, &mut words)?;
    Some(words)
}

/// [`parse_roaring`] into `words`, which holds the dense form of the empty set (all zero); on
/// `None` some of its bits may be set.
fn parse_roaring_into(body: &[u8], words: &mut Words) -> Option<()> {
    let layout = portable_layout(body)?;
    if body.len() != layout.len() {
        return None;
    }
    if layout.card == 0 {
        return Some(());
    }
    let (run, card) = (layout.run, layout.card);
    let data = body.get(layout.data_at..)?;
    if run {
        for pair in data.get(2..)?.chunks_exact(4) {
            let mut pair = Reader::new(pair);
            let start = u32::from(pair.u16().ok()?);
            let last = start + u32::from(pair.u16().ok()?);
            if last >= 1 << 16 {
                return None;
            }
            fill(words, start, last, false);
        }
    } else if card <= ARRAY_LIMIT {
        for v in data.chunks_exact(2) {
            set_bit(words, u32::from(Reader::new(v).u16().ok()?));
        }
    } else {
        for (w, chunk) in words.iter_mut().zip(data.chunks_exact(8)) {
            *w = Reader::new(chunk).u64().ok()?;
        }
    }
    Some(())
}

/// The dense form of `bitmap`; `None` when it holds a value of 2^16 or more (more than one
/// container, or a key other than 0). Goes through the set's own serialization, whose bitmap or
/// run container copies a word or a run at a time and whose array container lists its values:
/// reading that list is about twice as fast as the bitmap's value iterator, even for the few
/// values of a store cursor's usual partition.
pub fn words_of(bitmap: &RoaringBitmap) -> Option<Words> {
    let mut words = empty_words();
    let mut serialized = Vec::new();
    fill_words_of(bitmap, &mut words, &mut serialized)?;
    Some(words)
}

/// [`words_of`] into `words` (all zero), through `serialized` (emptied first).
fn fill_words_of(
    bitmap: &RoaringBitmap,
    words: &mut Words,
    serialized: &mut Vec<u8>,
) -> Option<()> {
    if bitmap.max().is_some_and(|v| v >= 1 << 16) {
        return None;
    }
    serialized.clear();
    serialized.reserve(bitmap.serialized_size());
    bitmap.serialize_into(&mut *serialized).ok()?;
    parse_roaring_into(serialized, words)
}

thread_local! {
    /// The buffer of a set's serialization [`with_words_of`] keeps from one call to the next.
    static SERIALIZED: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// `f` of [`words_of`]'s dense form of `bitmap`, built in the form this thread keeps
/// ([`zeroed_words`], given back by [`keep_words`] once the words between the set's smallest
/// and largest value are zeroed): the encoder of a tick's partitions allocated and zeroed 8 KiB
/// for each, and the allocation of 1 KiB or more made glibc merge every small chunk freed since
/// the one before (`docs/benchmarks.md`, "A flush tick from 10,000 to 100,000 cursors"). A call
/// that panics or fails midway drops its form; a call made from `f`, or after the thread's
/// kept form is gone (from another thread-local's destructor, as the thread ends), builds its
/// own. `None` as [`words_of`].
pub fn with_words_of<R>(bitmap: &RoaringBitmap, f: impl FnOnce(&[u64]) -> R) -> Option<R> {
    // Refused before the form is taken, which it leaves untouched.
    if bitmap.max().is_some_and(|v| v >= 1 << 16) {
        return None;
    }
    let mut words = zeroed_words();
    let mut serialized = SERIALIZED.try_with(Cell::take).unwrap_or_default();
    let filled = fill_words_of(bitmap, &mut words, &mut serialized);
    let _ = SERIALIZED.try_with(|kept| kept.set(serialized));
    filled?;
    let out = f(&words);
    keep_words(words, bitmap.min().zip(bitmap.max()));
    Some(out)
}

/// Largest cardinality of a roaring array container.
const ARRAY_LIMIT: usize = 4096;
/// Cookie of a roaring portable serialization without run containers.
const COOKIE_NO_RUNS: u32 = 12346;
/// Cookie of one with run containers (in its low 16 bits; the high ones count containers - 1).
const COOKIE_RUNS: u32 = 12347;
/// Bytes of a roaring bitmap container.
const BITMAP_BYTES: usize = 8192;

/// The words of a set whose smallest and largest members are `lo` and `hi`: those from `lo`'s
/// to `hi`'s, every other word being zero. The counts below need only these, so a partition of
/// a few entries costs a few words, not a pass over all 1,024 (each such pass for its first and
/// last nonzero word was a sixth of a flush tick's time at 10,000 cursors).
fn words_between(words: &[u64], lo: u32, hi: u32) -> &[u64] {
    words
        .get(lo as usize / 64..=hi as usize / 64)
        .unwrap_or_default()
}

/// The cardinality and the number of maximal runs of a set whose smallest and largest members
/// are `lo` and `hi`.
fn card_and_runs(words: &[u64], lo: u32, hi: u32) -> (usize, usize) {
    let (mut card, mut runs, mut carry) = (0, 0, 0u64);
    // The word before `lo`'s is zero: no run continues into it.
    for &w in words_between(words, lo, hi) {
        card += w.count_ones() as usize;
        runs += (w & !((w << 1) | carry)).count_ones() as usize;
        carry = w >> 63;
    }
    (card, runs)
}

/// Which roaring container form a set takes in its run-optimized serialization.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    Empty,
    Run,
    Array,
    Bitmap,
}

/// The form and serialized length of a set of `card` members in `runs` maximal runs: runs when
/// strictly smaller than the plain form, which is an array up to 4,096 values and a bitmap
/// above.
fn form_of(card: usize, runs: usize) -> (Form, usize) {
    if card == 0 {
        return (Form::Empty, 8);
    }
    let run_bytes = 2 + 4 * runs;
    let (plain, plain_bytes) = if card <= ARRAY_LIMIT {
        (Form::Array, 2 * card)
    } else {
        (Form::Bitmap, BITMAP_BYTES)
    };
    if run_bytes < plain_bytes {
        // Cookie with runs, the run flag byte, one description.
        (Form::Run, 4 + 1 + 4 + run_bytes)
    } else {
        // Cookie, container count, one description, one offset.
        (plain, 16 + plain_bytes)
    }
}

/// Bytes of [`roaring_body`].
pub fn roaring_len(words: &[u64], lo: u32, hi: u32) -> usize {
    let (card, runs) = card_and_runs(words, lo, hi);
    form_of(card, runs).1
}

/// The next offset at or after `from` that is set (or with `holes` clear), below 2^16.
fn next_bit(words: &[u64], from: u32, holes: bool) -> Option<u32> {
    let mut i = from as usize / 64;
    let mut w = *words.get(i)?;
    if holes {
        w = !w;
    }
    w &= u64::MAX << (from % 64);
    loop {
        if w != 0 {
            return Some(i as u32 * 64 + w.trailing_zeros());
        }
        i += 1;
        w = *words.get(i)?;
        if holes {
            w = !w;
        }
    }
}

/// The canonical roaring portable serialization of a non-empty set whose smallest and largest
/// members are `lo` and `hi` ([`bounds`]): one container with key 0 in the form [`form_of`]
/// picks.
pub fn roaring_body(words: &[u64], lo: u32, hi: u32) -> Vec<u8> {
    let (card, runs) = card_and_runs(words, lo, hi);
    let (form, len) = form_of(card, runs);
    let mut out = Vec::with_capacity(len);
    if form == Form::Empty {
        out.extend_from_slice(&COOKIE_NO_RUNS.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        return out;
    }
    if form == Form::Run {
        out.extend_from_slice(&COOKIE_RUNS.to_le_bytes());
        out.push(1);
    } else {
        out.extend_from_slice(&COOKIE_NO_RUNS.to_le_bytes());
        out.extend_from_slice(&1u32.to_le_bytes());
    }
    // The description: key 0, cardinality - 1 (card is 1..=65536).
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&((card - 1) as u16).to_le_bytes());
    match form {
        Form::Run => {
            // Fewer than 2,048 runs here.
            out.extend_from_slice(&(runs as u16).to_le_bytes());
            // The runs between the first and the last member alternate, acked first.
            let mut acked = true;
            for_each_run(words, lo, hi, |start, end| {
                if acked {
                    out.extend_from_slice(&(start as u16).to_le_bytes());
                    out.extend_from_slice(&((end - 1 - start) as u16).to_le_bytes());
                }
                acked = !acked;
            });
        }
        Form::Array => {
            out.extend_from_slice(&16u32.to_le_bytes());
            // The values fill the rest of the body, two bytes each, in order.
            let at = out.len();
            out.resize(len, 0);
            let mut slots = out.get_mut(at..).unwrap_or_default().chunks_exact_mut(2);
            let first = lo as usize / 64;
            for (i, &word) in (first..).zip(words_between(words, lo, hi)) {
                let mut w = word;
                while w != 0 {
                    let v = i as u32 * 64 + w.trailing_zeros();
                    if let Some(slot) = slots.next() {
                        slot.copy_from_slice(&(v as u16).to_le_bytes());
                    }
                    w &= w - 1;
                }
            }
        }
        Form::Bitmap | Form::Empty => {
            out.extend_from_slice(&16u32.to_le_bytes());
            for w in words {
                out.extend_from_slice(&w.to_le_bytes());
            }
        }
    }
    out
}

/// Calls `f(gap, zeros)` for the members of a class strictly between `lo` and `hi` (the acked
/// offsets, or with `holes` the offsets not acked), one call per run of adjacent members: the
/// run's first member has `gap` offsets between it and the previous member (or `lo`), and the
/// `zeros` members after it each have a gap of 0. Runs cost one call, not one per member.
pub fn for_each_gap(words: &[u64], lo: u32, hi: u32, holes: bool, mut f: impl FnMut(u32, u32)) {
    if hi <= lo + 1 {
        return;
    }
    let (first, last) = (lo + 1, hi - 1);
    let (a, b) = (first as usize / 64, last as usize / 64);
    let mut prev = lo;
    for (i, &word) in words.iter().enumerate().take(b + 1).skip(a) {
        let mut w = if holes { !word } else { word };
        if i == a {
            w &= u64::MAX << (first % 64);
        }
        if i == b {
            w &= u64::MAX >> (63 - last % 64);
        }
        while w != 0 {
            let start = w.trailing_zeros();
            let len = (w >> start).trailing_ones();
            let member = i as u32 * 64 + start;
            f(member - prev - 1, len - 1);
            prev = member + len - 1;
            w = if start + len >= 64 {
                0
            } else {
                w & (u64::MAX << (start + len))
            };
        }
    }
}

/// How the gaps of one class are coded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// Golomb-Rice with parameter `k`: the quotient `gap >> k` in unary, then `k` low bits.
    Rice(u8),
    /// Every gap in `[min, min + range)`, written as `gap - min` in the truncated binary code of
    /// `range` values: `floor(log2 range)` or one more bit.
    Bounded { min: u32, range: u32 },
}

/// How a set is best written as gaps: which class, which code, how many members and the bits
/// the codes take (with the bounded code's two varints).
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Whether the holes are coded (else the members).
    pub holes: bool,
    /// The code of the gaps.
    pub code: Code,
    /// The members the codes write.
    pub members: u64,
    /// The bits the codes take.
    pub bits: u64,
}

/// Bits of `x` (below `range`) in the truncated binary code of `range` values, and the split:
/// with `b = floor(log2 range)` and `u = 2^(b+1) - range`, values below `u` take `b` bits.
fn truncated_binary(range: u32) -> (u32, u64) {
    let b = range.max(1).ilog2();
    let u = (1u64 << (b + 1)) - u64::from(range);
    (b, u)
}

/// Bytes a gaps body spends before its codes (and the bounded code's varints).
fn gaps_fixed_len(lo: u32, hi: u32, members: u64) -> usize {
    varint_len(lo.into()) + varint_len((hi - lo).into()) + 1 + varint_len(members)
}

/// What one pass over a class tells: its member count, the sum, smallest and largest of its
/// gaps, and how many gaps have each value: a count per value below [`SMALL_GAPS`], and the
/// larger gaps themselves (fewer than [`SMALL_GAPS`] of them: each one spans more than
/// `SMALL_GAPS` offsets of a partition's 2^16). Every cost the planner weighs is a function of
/// these counts, so a class is read once, whatever the number of codes and parameters tried.
#[derive(Clone, Debug)]
pub struct Stats {
    holes: bool,
    /// The members of the class.
    pub members: u64,
    /// The sum of its gaps.
    pub sum: u64,
    /// Its smallest gap.
    pub min: u32,
    /// Its largest gap.
    pub max: u32,
    small: [u32; SMALL_GAPS],
    /// Which values of `small` were counted (a bit each): [`Stats::finish`] visits those, not
    /// all [`SMALL_GAPS`] slots (it did, for every class of every partition a tick encodes: a
    /// seventh of the tick's instructions once the scans for a set's bounds were gone).
    seen: [u64; SMALL_GAPS / 64],
    large: [u16; SMALL_GAPS],
    large_len: usize,
    /// Every gap value counted, with its count, in the order of `small` then `large`: made by
    /// [`Stats::finish`] from the two, so the planner's many passes read only the values a
    /// class has (one or two for a regular pattern), not every slot of `small`.
    counted: Vec<(u32, u64)>,
}

/// Gaps below this are counted per value; larger ones are listed.
const SMALL_GAPS: usize = 256;

impl Stats {
    const fn new(holes: bool) -> Self {
        Self {
            holes,
            members: 0,
            sum: 0,
            min: u32::MAX,
            max: 0,
            small: [0; SMALL_GAPS],
            seen: [0; SMALL_GAPS / 64],
            large: [0; SMALL_GAPS],
            large_len: 0,
            counted: Vec::new(),
        }
    }

    /// Counts `n` gaps of `gap` offsets (`gap` below 2^16).
    fn add(&mut self, gap: u32, n: u64) {
        if let Some(count) = self.small.get_mut(gap as usize) {
            // At most 2^16 gaps of any one value.
            *count += n as u32;
            if let Some(seen) = self.seen.get_mut(gap as usize / 64) {
                *seen |= 1 << (gap % 64);
            }
        } else {
            for _ in 0..n {
                if let Some(slot) = self.large.get_mut(self.large_len) {
                    // Fewer than SMALL_GAPS gaps are this large, each below 2^16.
                    *slot = gap as u16;
                    self.large_len += 1;
                }
            }
        }
    }

    /// Sets the member count (`members`: every gap counted) and the sum, smallest and largest
    /// gap from the counts.
    fn finish(&mut self, members: u64) {
        self.members = members;
        // The values counted, in increasing order (a value taken back to no gap is skipped).
        let seen = (0u32..).zip(self.seen).flat_map(|(i, mut bits)| {
            std::iter::from_fn(move || {
                let bit = (bits != 0).then(|| bits.trailing_zeros())?;
                bits &= bits - 1;
                Some(i * 64 + bit)
            })
        });
        let small = seen
            .filter_map(|g| Some((g, *self.small.get(g as usize)?)))
            .filter(|(_, n)| *n > 0)
            .map(|(g, n)| (g, u64::from(n)));
        let large = self
            .large
            .iter()
            .take(self.large_len)
            .map(|g| (u32::from(*g), 1));
        self.counted = small.chain(large).collect();
        self.sum = self.gaps().map(|(g, n)| u64::from(g) * n).sum();
        self.max = self.gaps().map(|(g, _)| g).max().unwrap_or(0);
        if members > 0 {
            self.min = self.gaps().map(|(g, _)| g).min().unwrap_or(0);
        }
    }

    /// Takes back one gap of `gap` offsets counted by [`Stats::add`].
    fn remove(&mut self, gap: u32) {
        if let Some(count) = self.small.get_mut(gap as usize) {
            *count = count.saturating_sub(1);
        } else if let Some(i) = self
            .large
            .iter()
            .take(self.large_len)
            .position(|g| u32::from(*g) == gap)
        {
            self.large.copy_within(i + 1..self.large_len, i);
            self.large_len -= 1;
        }
    }

    /// Every gap value with its count (zero counts skipped), once [`Stats::finish`] ran.
    pub fn gaps(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.counted.iter().copied()
    }

    /// `sum(gap >> k)` over the class's gaps: the unary part of Rice parameter `k`.
    fn quotients(&self, k: u8) -> u64 {
        self.gaps().map(|(g, n)| u64::from(g >> k) * n).sum()
    }

    /// How many gaps take the long (one bit longer) form of the bounded code.
    fn long_codes(&self, short: u64) -> u64 {
        self.gaps()
            .filter(|&(g, _)| u64::from(g.saturating_sub(self.min)) >= short)
            .map(|(_, n)| n)
            .sum()
    }
}

/// Calls `f(start, end)` for every maximal run `start .. end` of offsets that are all acked or all
/// holes, within `first ..= last` (cut at both: the first run starts at `first`, the last ends
/// at `last + 1`), in order; runs alternate between the classes, so the class of the first run
/// (whether `first` is acked) names them all.
///
/// Runs are found from their boundaries, a word at a time: bit `j` of `w ^ (w << 1 | carry)` is
/// set where offset `j` differs from the one before it, and each set bit costs one step, so a
/// word inside a run costs one test.
fn for_each_run(words: &[u64], first: u32, last: u32, mut f: impl FnMut(u32, u32)) {
    if first > last {
        return;
    }
    let (a, b) = (first as usize / 64, last as usize / 64);
    let mut start = first;
    let mut carry = if a == 0 {
        0
    } else {
        words.get(a - 1).map_or(0, |w| w >> 63)
    };
    for (i, &w) in words.iter().enumerate().take(b + 1).skip(a) {
        let mut edges = w ^ ((w << 1) | carry);
        carry = w >> 63;
        if i == a {
            // A boundary at `first` itself starts the first run, which is already open.
            edges &= (u64::MAX << (first % 64)) << 1;
        }
        if i == b {
            edges &= u64::MAX >> (63 - last % 64);
        }
        while edges != 0 {
            let end = i as u32 * 64 + edges.trailing_zeros();
            f(start, end);
            start = end;
            edges &= edges - 1;
        }
    }
    f(start, last + 1);
}

/// The statistics of both classes strictly between `lo` and `hi`: the acked entries' and the
/// holes'. One pass over the runs of the span serves both: a run of one class is one gap of
/// its length before the first member of the run of the other class that follows it (the first
/// run's first member has a gap of 0, after `lo`), and every other member of a run has a gap of
/// 0. The run that ends at `hi - 1` is followed by `hi`, which is not coded: it adds no gap.
///
/// A set of many short runs (more than [`WORD_PARALLEL_RUNS`] a word of its span on average,
/// by [`card_and_runs`]) is counted by [`stats_by_words`] instead, a class at a time: there a
/// step per run costs more than a few steps per word, and the run lengths vary too much for a
/// branch per run to be predicted.
pub fn class_stats(words: &[u64], lo: u32, hi: u32) -> (Stats, Stats) {
    // Index 0: the holes, 1: the acked entries (the class bit of an offset).
    let mut classes = [Stats::new(true), Stats::new(false)];
    if hi <= lo + 1 {
        let [holes, acked] = classes;
        return (acked, holes);
    }
    let span_words = (hi / 64 - lo / 64 + 1) as usize;
    if card_and_runs(words, lo, hi).1 > WORD_PARALLEL_RUNS * span_words {
        return (
            stats_by_words(words, lo, hi, false),
            stats_by_words(words, lo, hi, true),
        );
    }
    let (first, last) = (lo + 1, hi - 1);
    let word = words.get(first as usize / 64).copied().unwrap_or(0);
    let mut class = usize::from((word >> (first % 64)) & 1 == 1);
    // The length of the run before the current one (0 before the first), the members and the
    // runs of each class.
    let mut before = 0;
    let (mut members, mut runs) = ([0u64; 2], [0u64; 2]);
    for_each_run(words, first, last, |start, end| {
        let len = end - start;
        if let Some(st) = classes.get_mut(class) {
            st.add(before, 1);
        }
        if let (Some(m), Some(r)) = (members.get_mut(class), runs.get_mut(class)) {
            *m += u64::from(len);
            *r += 1;
        }
        before = len;
        class ^= 1;
    });
    let [mut holes, mut acked] = classes;
    let [holes_members, acked_members] = members;
    let [holes_runs, acked_runs] = runs;
    acked.add(0, acked_members - acked_runs);
    acked.finish(acked_members);
    holes.add(0, holes_members - holes_runs);
    holes.finish(holes_members);
    (acked, holes)
}

/// Runs a word of a set's span above which [`class_stats`] counts a word at a time.
const WORD_PARALLEL_RUNS: usize = 4;

/// The statistics of one class (the acked entries, or with `holes` the holes) strictly between
/// `lo` and `hi`: one of [`class_stats`].
pub fn stats(words: &[u64], lo: u32, hi: u32, holes: bool) -> Stats {
    let (acked, hole_stats) = class_stats(words, lo, hi);
    if holes { hole_stats } else { acked }
}

/// Runs up to this length are counted a word at a time; longer ones are measured one by one
/// (there are fewer than `2^16 / SHORT_RUN` of them).
const SHORT_RUN: u32 = 16;

/// The statistics of one class (the acked entries, or with `holes` the holes) strictly between
/// `lo` and `hi`, for a set of many short runs (see [`class_stats`]), read from the runs of the other class: each run of the other class that ends
/// before `hi - 1` is the gap before the member that follows it, and every other member (the
/// first one after `lo` when no run precedes it, and each one right after a member) has a gap
/// of 0.
///
/// Runs are counted a word at a time, not visited one by one: the run starts of a word are its
/// set bits with a clear bit before them, and a bitwise AND of them with the word shifted by 1, 2, ...
/// keeps the starts of runs at least that long, so a word costs one step per length of its
/// longest run up to [`SHORT_RUN`]; longer runs, and the runs of a word where at most two
/// start, are measured by scanning.
fn stats_by_words(words: &[u64], lo: u32, hi: u32, holes: bool) -> Stats {
    let mut st = Stats::new(holes);
    if hi <= lo + 1 {
        return st;
    }
    let (first, last) = (lo + 1, hi - 1);
    let (a, b) = (first as usize / 64, last as usize / 64);
    // Word `i` with the other class's offsets in `first ..= last` set, everything else clear.
    let other = |i: usize| -> u64 {
        if i < a || i > b {
            return 0;
        }
        let w = words.get(i).copied().unwrap_or(0);
        let mut w = if holes { w } else { !w };
        if i == a {
            w &= u64::MAX << (first % 64);
        }
        if i == b {
            w &= u64::MAX >> (63 - last % 64);
        }
        w
    };
    // at_least[l]: runs of the other class at least `l` long, for l in 1 ..= SHORT_RUN + 1.
    let mut at_least = [0u64; SHORT_RUN as usize + 2];
    let mut other_count = 0u64;
    // Runs measured one by one (and counted in `st` directly).
    let mut measured = 0u64;
    let (mut before, mut word) = (0u64, other(a));
    for i in a..=b {
        let after = other(i + 1);
        other_count += u64::from(word.count_ones());
        let mut runs = word & !((word << 1) | (before >> 63));
        // A word with one or two run starts (long runs, sparse classes) measures them
        // directly: cheaper than a step per length.
        let few = runs & runs.wrapping_sub(1);
        if few & few.wrapping_sub(1) != 0 {
            let mut l = 1;
            while runs != 0 {
                if let Some(n) = at_least.get_mut(l as usize) {
                    *n += u64::from(runs.count_ones());
                }
                if l > SHORT_RUN {
                    break;
                }
                // A run of length l + 1 or more starting at bit s has bit s + l set (in this
                // word or, shifted in, the next).
                runs &= (word >> l) | (after << (64 - l));
                l += 1;
            }
        }
        // `runs` holds the starts to measure one by one: runs longer than SHORT_RUN, or every
        // run of a word with at most two.
        while runs != 0 {
            let start = i as u32 * 64 + runs.trailing_zeros();
            // A run of holes (the acked class's gaps) ends at the next acked entry, a run of
            // acked entries (the holes class's) at the next hole.
            let end = next_bit(words, start, holes).map_or(last + 1, |e| e.min(last + 1));
            st.add(end - start, 1);
            measured += 1;
            runs &= runs - 1;
        }
        (before, word) = (word, after);
    }
    for l in 1..=SHORT_RUN {
        let count = |l: u32| at_least.get(l as usize).copied().unwrap_or(0);
        st.add(l, count(l) - count(l + 1));
    }
    let mut gaps = at_least.get(1).copied().unwrap_or(0)
        - at_least.get(SHORT_RUN as usize + 1).copied().unwrap_or(0)
        + measured;
    // The run that ends at `hi - 1` is followed by `hi`, which is not coded.
    if (other(b) >> (last % 64)) & 1 == 1 {
        st.remove(run_ending_at(words, first, last, holes));
        gaps -= 1;
    }
    let members = u64::from(last - first + 1) - other_count;
    st.add(0, members - gaps);
    st.finish(members);
    st
}

/// Length of the run of the other class than `holes` names (holes for the acked class, acked
/// entries for the holes class) that ends at `last`, counting no offset below `first`.
fn run_ending_at(words: &[u64], first: u32, last: u32, holes: bool) -> u32 {
    let mut at = last;
    loop {
        let i = at as usize / 64;
        let w = words.get(i).copied().unwrap_or(0);
        // Members of this class (where the run stops) at or below `at` in this word.
        let class = (if holes { !w } else { w }) & (u64::MAX >> (63 - at % 64));
        if class != 0 {
            let stop = i as u32 * 64 + 63 - class.leading_zeros();
            return last - stop.max(first - 1);
        }
        if i as u32 * 64 <= first {
            return last - first + 1;
        }
        at = i as u32 * 64 - 1;
    }
}

impl Stats {
    /// The bounded code's range, its truncated binary split, and the bits of its two varints.
    fn bounded(&self) -> (u32, u32, u64, u64) {
        let range = self.max - self.min + 1;
        let (width, short) = truncated_binary(range);
        let extra = 8 * (varint_len(self.min.into()) + varint_len((range - 1).into())) as u64;
        (range, width, short, extra)
    }

    /// Rice's floor: `floor(g / 2^k) >= (g + 1) / 2^k - 1`, so it costs at least
    /// `(sum + m) / 2^k + m k` bits.
    fn rice_floor(&self) -> u64 {
        (0..=MAX_RICE_K)
            .map(|k| ((self.sum + self.members) >> k) + self.members * u64::from(k))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// A lower bound of the bits of this class's codes, whichever code.
    fn floor(&self) -> u64 {
        if self.members == 0 {
            return 0;
        }
        let (_, width, _, extra) = self.bounded();
        self.rice_floor()
            .min(self.members * u64::from(width) + extra)
    }
}

/// The best plan for one class, or `None` when its bits' lower bound exceeds `budget_bits`
/// (then it cannot be chosen). When it returns a plan, the plan does not depend on the budget.
///
/// Rice's cost `sum(gap >> k) + m (k + 1)` is convex in `k`, so the best `k` is found by
/// widening a window around `log2` of the mean gap until its minimum is inside it. Costs come
/// from the class's gap counts: no pass over the set.
pub fn plan(st: &Stats, budget_bits: u64) -> Option<Plan> {
    let (holes, members) = (st.holes, st.members);
    if members == 0 {
        return Some(Plan {
            holes,
            code: Code::Rice(0),
            members,
            bits: 0,
        });
    }
    if st.floor() > budget_bits {
        return None;
    }
    let (min, (range, width, short, extra)) = (st.min, st.bounded());
    let rice_floor = st.rice_floor();
    if u64::from(range) <= short {
        // A power-of-two range: every code takes `width` bits, no pass needed to count them.
        let bits = members * u64::from(width) + extra;
        if bits < rice_floor {
            return Some(Plan {
                holes,
                code: Code::Bounded { min, range },
                members,
                bits,
            });
        }
    }
    let mean = st.sum / members;
    let center = if mean == 0 { 0 } else { mean.ilog2() as u8 };
    let mut low = center.saturating_sub(2);
    let mut high = (center + 2).min(MAX_RICE_K);
    let mut costs = [u64::MAX; MAX_RICE_K as usize + 1];
    let rice_cost = |k: u8| st.quotients(k) + members * (u64::from(k) + 1);
    for k in low..=high {
        set_cost(&mut costs, k, rice_cost(k));
    }
    loop {
        // The first (smallest k) minimum of the window.
        let best = (low..=high)
            .min_by_key(|&k| (cost(&costs, k), k))
            .unwrap_or(low);
        if best == low && low > 0 {
            low -= 1;
            set_cost(&mut costs, low, rice_cost(low));
        } else if best == high && high < MAX_RICE_K {
            high += 1;
            set_cost(&mut costs, high, rice_cost(high));
        } else {
            break;
        }
    }
    let (k, rice_bits) = (low..=high)
        .map(|k| (k, cost(&costs, k)))
        .min_by_key(|&(k, c)| (c, k))
        .unwrap_or((0, u64::MAX));
    let bounded_bits = members * u64::from(width) + st.long_codes(short) + extra;
    Some(if bounded_bits < rice_bits {
        Plan {
            holes,
            code: Code::Bounded { min, range },
            members,
            bits: bounded_bits,
        }
    } else {
        Plan {
            holes,
            code: Code::Rice(k),
            members,
            bits: rice_bits,
        }
    })
}

/// The Rice cost of parameter `k` in `costs` (`u64::MAX`, never chosen, when not computed).
fn cost(costs: &[u64], k: u8) -> u64 {
    costs.get(usize::from(k)).copied().unwrap_or(u64::MAX)
}

/// Records the Rice cost of parameter `k`; `k` is at most [`MAX_RICE_K`], within `costs`.
fn set_cost(costs: &mut [u64], k: u8, value: u64) {
    if let Some(slot) = costs.get_mut(usize::from(k)) {
        *slot = value;
    }
}

/// The gaps body of a non-empty set with smallest offset `lo` and largest `hi`: `lo`,
/// `hi - lo`, the parameter byte (holes flag, bounded flag, Rice `k`), the member count, for the
/// bounded code `min` and `range - 1`, then the codes. The class and the code are those of the
/// fewest bits (ties: acked entries, Rice, the smallest `k`), so the body is a function of the
/// set alone. `None` when it would be longer than `budget` bytes.
pub fn gaps_body(words: &[u64], lo: u32, hi: u32, budget: usize) -> Option<Vec<u8>> {
    let (best, len) = gaps_plan(words, lo, hi, budget)?;
    Some(write_gaps(words, lo, hi, best, len))
}

/// Bytes of [`gaps_body`] for the same arguments, without writing it: `None` where
/// [`gaps_body`] returns `None`. The same plan decides both, so they never disagree.
pub fn gaps_len(words: &[u64], lo: u32, hi: u32, budget: usize) -> Option<usize> {
    gaps_plan(words, lo, hi, budget).map(|(_, len)| len)
}

/// The plan [`gaps_body`] writes and the body's length in bytes, or `None` when no class fits
/// in `budget` bytes.
pub fn gaps_plan(words: &[u64], lo: u32, hi: u32, budget: usize) -> Option<(Plan, usize)> {
    let (acked, holes) = class_stats(words, lo, hi);
    plan_classes(&acked, &holes, lo, hi, budget)
}

/// [`gaps_plan`] from the statistics of both classes.
fn plan_classes(
    acked: &Stats,
    holes: &Stats,
    lo: u32,
    hi: u32,
    budget: usize,
) -> Option<(Plan, usize)> {
    let budget_bits = |st: &Stats| {
        budget
            .checked_sub(gaps_fixed_len(lo, hi, st.members))
            .map_or(0, |b| (b as u64).saturating_mul(8))
    };
    let over = |st: &Stats| budget < gaps_fixed_len(lo, hi, st.members);
    // Plan the class with the lower floor first; the other only if it can still win (the
    // holes class must be strictly fewer bits, the acked class wins ties).
    let (acked_plan, holes_plan) = if holes.floor() < acked.floor() {
        let h = if over(holes) {
            None
        } else {
            plan(holes, budget_bits(holes))
        };
        let a_budget = h.map_or(budget_bits(acked), |h| budget_bits(acked).min(h.bits));
        let a = if over(acked) {
            None
        } else {
            plan(acked, a_budget)
        };
        (a, h)
    } else {
        let a = if over(acked) {
            None
        } else {
            plan(acked, budget_bits(acked))
        };
        let h_budget = a.map_or(budget_bits(holes), |a| {
            budget_bits(holes).min(a.bits.saturating_sub(1))
        });
        let h = match a {
            Some(a) if a.bits == 0 => None,
            _ if over(holes) => None,
            _ => plan(holes, h_budget),
        };
        (a, h)
    };
    let best = match (acked_plan, holes_plan) {
        (Some(a), Some(h)) if h.bits < a.bits => h,
        (Some(a), _) => a,
        (None, Some(h)) => h,
        (None, None) => return None,
    };
    let len = gaps_fixed_len(lo, hi, best.members) + usize::try_from(best.bits.div_ceil(8)).ok()?;
    if len > budget {
        return None;
    }
    Some((best, len))
}

/// Writes the gaps body of `best`, `len` bytes long.
pub fn write_gaps(words: &[u64], lo: u32, hi: u32, best: Plan, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    put_varint(&mut out, lo.into());
    put_varint(&mut out, (hi - lo).into());
    let holes_flag = if best.holes { HOLES_FLAG } else { 0 };
    match best.code {
        Code::Rice(k) => {
            out.push(holes_flag | k);
            put_varint(&mut out, best.members);
            let mut writer = BitWriter::new(out);
            for_each_gap(words, lo, hi, best.holes, |gap, zeros| {
                writer.rice(gap, k);
                // A zero gap is a 0 bit (empty unary) and k zero bits.
                writer.zeros(u64::from(zeros) * (u64::from(k) + 1));
            });
            writer.finish()
        }
        Code::Bounded { min, range } => {
            out.push(holes_flag | BOUNDED_FLAG);
            put_varint(&mut out, best.members);
            put_varint(&mut out, min.into());
            put_varint(&mut out, (range - 1).into());
            let (width, short) = truncated_binary(range);
            if width == 0 {
                // One possible value (every gap equal): each code is zero bits long.
                return out;
            }
            let mut writer = BitWriter::new(out);
            for_each_gap(words, lo, hi, best.holes, |gap, zeros| {
                let value = u64::from(gap - min);
                if value < short {
                    writer.bits(value as u32, width);
                } else {
                    let long = value - short;
                    writer.bits((short + (long >> 1)) as u32, width);
                    writer.bits((long & 1) as u32, 1);
                }
                // With zero gaps min is 0, and 0 < short: `width` zero bits each.
                writer.zeros(u64::from(zeros) * u64::from(width));
            });
            writer.finish()
        }
    }
}

/// The bitmap body of a non-empty set with smallest offset `lo` and largest `hi`: `lo`,
/// `hi - lo`, then one bit per offset strictly between them (1 = acked), padded with zeros.
pub fn span_body(words: &[u64], lo: u32, hi: u32) -> Vec<u8> {
    let inner = (hi - lo).saturating_sub(1);
    let mut out = Vec::with_capacity(span_body_len(lo, hi));
    put_varint(&mut out, lo.into());
    put_varint(&mut out, (hi - lo).into());
    let start = lo + 1;
    let len = (inner as usize).div_ceil(8);
    let mut done = 0;
    while done < len {
        // 64 bits from offset `at`, least significant first (zeros past the partition).
        let at = start + 8 * done as u32;
        let word = |i: usize| words.get(i).copied().unwrap_or(0);
        let (i, shift) = (at as usize / 64, at % 64);
        let chunk = if shift == 0 {
            word(i)
        } else {
            (word(i) >> shift) | (word(i + 1) << (64 - shift))
        };
        let take = (len - done).min(8);
        out.extend_from_slice(chunk.to_le_bytes().get(..take).unwrap_or_default());
        done += take;
    }
    // The padding bits past `hi - 1` (where `hi` itself may sit) are zero.
    if !inner.is_multiple_of(8)
        && let Some(last) = out.last_mut()
    {
        *last &= (1u8 << (inner % 8)) - 1;
    }
    out
}

/// Bytes of [`span_body`] for a set with smallest offset `lo` and largest `hi`.
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
    /// The body decodes, but it is not the bytes the encoder writes for that set.
    NotCanonical,
}

/// The lowest and highest members (`lo`, `hi`) a gaps or bitmap body starts with, each below
/// `span`; the rest of the body is not read.
pub fn body_bounds(body: &[u8], span: u64) -> Result<(u32, u32), BodyError> {
    read_span(&mut Reader::new(body), span)
}

/// Reads the span that starts both bodies; `hi` stays below `span` (2^16).
fn read_span(c: &mut Reader<'_>, span: u64) -> Result<(u32, u32), BodyError> {
    let lo = c.varint_loose().map_err(|_| BodyError::Span)?;
    let len = c.varint_loose().map_err(|_| BodyError::Span)?;
    let hi = lo.checked_add(len).ok_or(BodyError::Span)?;
    if hi >= span {
        return Err(BodyError::Span);
    }
    // Both below 2^16.
    Ok((lo as u32, hi as u32))
}

/// What decoding a gaps body read besides the set: the body's parameters, how its codes end,
/// and the gap statistics of both classes, gathered while the codes were read (a coded gap is
/// one gap of its class; the other class's gaps are the runs of coded members). From them
/// [`GapsReading::is_canonical`] prices the encoder's choice for the decoded set and compares,
/// without writing a body or reading the set again.
pub struct GapsReading {
    lo: u32,
    hi: u32,
    holes: bool,
    code: Code,
    members: u64,
    body_len: usize,
    /// The bits after the last code are zero.
    zero_padding: bool,
    /// The gap statistics of the members.
    pub acked: Box<Stats>,
    /// The gap statistics of the holes.
    pub holes_stats: Box<Stats>,
}

impl GapsReading {
    /// Whether the body is the one [`gaps_body`] writes for the decoded set with `budget`
    /// bytes: the encoder's plan for that set (class, code, parameter, member count) is the
    /// body's, and the body is exactly the plan's length (so its varints are the shortest and
    /// no byte follows the codes), its padding bits zero. Each code is the only one for its
    /// gap, so nothing else can differ.
    #[must_use]
    pub fn is_canonical(&self, budget: usize) -> bool {
        let Some((plan, len)) =
            plan_classes(&self.acked, &self.holes_stats, self.lo, self.hi, budget)
        else {
            return false;
        };
        self.zero_padding
            && len == self.body_len
            && plan.holes == self.holes
            && plan.code == self.code
            && plan.members == self.members
    }
}

/// The dense form a gaps body decodes into, and the gap counts of both classes, built one coded
/// member at a time: a run of `run` coded members before a coded gap of `g > 0` offsets is one
/// gap of `run` before the first of those `g` members of the other class, and `g - 1` gaps of 0.
struct Counting {
    holes: bool,
    words: Words,
    coded: Box<Stats>,
    other: Box<Stats>,
    run: u32,
    prev: u32,
    /// The other class's gaps of 0, counted once at the end.
    other_zeros: u64,
}

impl Counting {
    fn new(holes: bool, lo: u32, hi: u32) -> Self {
        let mut words = zeroed_words();
        if holes {
            fill(&mut words, lo, hi, false);
        } else {
            set_bit(&mut words, lo);
            set_bit(&mut words, hi);
        }
        Self {
            holes,
            words,
            coded: Box::new(Stats::new(holes)),
            other: Box::new(Stats::new(!holes)),
            run: 0,
            prev: lo,
            other_zeros: 0,
        }
    }

    fn mark(&mut self, member: u32) {
        if let Some(w) = self.words.get_mut(member as usize / 64) {
            // Holes start set (the span filled) and are cleared; acked entries are set.
            if self.holes {
                *w &= !(1 << (member % 64));
            } else {
                *w |= 1 << (member % 64);
            }
        }
    }

    /// The next coded member, `gap` offsets after the previous one; it must be below `hi`.
    fn member(&mut self, gap: u64, hi: u32) -> Result<(), BodyError> {
        let member = u64::from(self.prev) + gap + 1;
        if member >= u64::from(hi) {
            return Err(BodyError::Code);
        }
        // Both below `hi`, so below 2^16.
        let (member, gap) = (member as u32, gap as u32);
        self.mark(member);
        self.coded.add(gap, 1);
        if gap > 0 {
            self.other.add(self.run, 1);
            self.other_zeros += u64::from(gap - 1);
            self.run = 0;
        }
        self.run += 1;
        self.prev = member;
        Ok(())
    }

    /// `members` coded members, every gap `min` (the bounded code with one value: no code is
    /// read): the members are `lo + i (min + 1)`, and the counts follow from their number.
    fn equal_gaps(&mut self, min: u32, members: u64, hi: u32) -> Result<(), BodyError> {
        if members == 0 {
            return Ok(());
        }
        let step = u64::from(min) + 1;
        let lo = u64::from(self.prev);
        let last = lo + members * step;
        if last >= u64::from(hi) {
            return Err(BodyError::Code);
        }
        for i in 1..=members {
            // Below `hi`, so below 2^16.
            self.mark((lo + i * step) as u32);
        }
        self.coded.add(min, members);
        if min > 0 {
            self.other.add(0, 1);
            self.other.add(1, members - 1);
            self.other_zeros = members * u64::from(min - 1);
            self.run = 1;
        } else {
            // At most 2^16.
            self.run = members as u32;
        }
        self.prev = last as u32;
        Ok(())
    }

    /// The dense form and the counts of the coded and the other class, once the other class's
    /// members after the last coded one, up to `hi - 1`, are counted (none when `hi` is `lo` or
    /// follows it).
    fn finish(mut self, hi: u32, members: u64, inner: u64) -> (Words, Box<Stats>, Box<Stats>) {
        let tail = (hi - self.prev).saturating_sub(1);
        if tail > 0 {
            self.other.add(self.run, 1);
            self.other_zeros += u64::from(tail - 1);
        }
        self.other.add(0, self.other_zeros);
        self.coded.finish(members);
        self.other.finish(inner - members);
        (self.words, self.coded, self.other)
    }
}

/// Decodes a gaps body into the dense form. Every count is checked against the bits present
/// before the codes are read; nothing but the fixed 8 KiB and the two classes' statistics is
/// allocated.
pub fn decode_gaps(body: &[u8], span: u64) -> Result<(Words, GapsReading), BodyError> {
    let mut fields = Reader::new(body);
    let (lo, hi) = read_span(&mut fields, span)?;
    let param = fields.u8().map_err(|_| BodyError::Length)?;
    let holes = param & HOLES_FLAG != 0;
    let bounded = param & BOUNDED_FLAG != 0;
    let k = param & !(HOLES_FLAG | BOUNDED_FLAG);
    if k > MAX_RICE_K || (bounded && k != 0) {
        return Err(BodyError::Length);
    }
    let members = fields.varint_loose().map_err(|_| BodyError::Length)?;
    let inner = u64::from((hi - lo).saturating_sub(1));
    if members > inner {
        return Err(BodyError::Length);
    }
    let (min, range) = if bounded {
        let min = fields.varint_loose().map_err(|_| BodyError::Length)?;
        let range = fields
            .varint_loose()
            .map_err(|_| BodyError::Length)?
            .saturating_add(1);
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
    let mut count = Counting::new(holes, lo, hi);
    if bounded && width == 0 {
        count.equal_gaps(min, members, hi)?;
    } else {
        for _ in 0..members {
            let gap = if bounded {
                let head = u64::from(bits.bits(width).ok_or(BodyError::Code)?);
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
                bits.rice(k, u32::MAX >> MAX_RICE_K)
                    .ok_or(BodyError::Code)?
            };
            count.member(gap, hi)?;
        }
    }
    let (words, coded, other) = count.finish(hi, members, inner);
    let zero_padding = bits.rest_is_zero();
    let code = if bounded {
        Code::Bounded { min, range }
    } else {
        Code::Rice(k)
    };
    let (acked, holes_stats) = if holes {
        (other, coded)
    } else {
        (coded, other)
    };
    let reading = GapsReading {
        lo,
        hi,
        holes,
        code,
        members,
        body_len: body.len(),
        zero_padding,
        acked,
        holes_stats,
    };
    Ok((words, reading))
}

/// Decodes a bitmap body into the dense form, a byte at a time. The body must be the one
/// [`span_body`] writes for that set: its padding bits past `hi - 1` are zero
/// ([`BodyError::NotCanonical`] otherwise).
pub fn decode_span(body: &[u8], span: u64) -> Result<Words, BodyError> {
    let mut fields = Reader::new(body);
    let (lo, hi) = read_span(&mut fields, span)?;
    let inner = (hi - lo).saturating_sub(1);
    let bits = fields.rest();
    if bits.len() != (inner as usize).div_ceil(8) {
        return Err(BodyError::Length);
    }
    if !inner.is_multiple_of(8)
        && let Some(last) = bits.last()
        && last >> (inner % 8) != 0
    {
        return Err(BodyError::NotCanonical);
    }
    let mut words = zeroed_words();
    set_bit(&mut words, lo);
    set_bit(&mut words, hi);
    // With zero padding, the last bit set is at most `hi - 1`, below 2^16: every byte lands
    // in the 1,024 words (a byte straddling two words sets bits in both).
    let start = lo + 1;
    for (i, &byte) in bits.iter().enumerate() {
        if byte == 0 {
            continue;
        }
        let at = start as usize + 8 * i;
        let (w, shift) = (at / 64, at % 64);
        if let Some(word) = words.get_mut(w) {
            *word |= u64::from(byte) << shift;
        }
        if shift > 56
            && let Some(word) = words.get_mut(w + 1)
        {
            *word |= u64::from(byte) >> (64 - shift);
        }
    }
    Ok(words)
}

//! The version 2 partition encoder's output pinned byte for byte: a deterministic corpus of sets
//! that makes the encoder choose every body and code it can (empty, roaring (run container), the
//! plain bitmap body, gaps of the acked entries or of the holes, Rice with every parameter the
//! planner can pick, the bounded code with and without code bits), with the edges of a partition
//! (offsets 0 and 65535, one member, every member), and sets whose roaring form is an array or
//! a bitmap container (never the shortest body here: a bitmap container's 8,208 bytes exceed
//! the plain bitmap body's 8,198 at most, and the gaps undercut an array's 2 bytes a member).
//! The CRC of all encodings and the count of each choice are constants: any byte the encoder
//! writes differently, for any set of the corpus, fails the test. Each encoding decodes back to
//! its set.
//!
//! Rice parameter 16 is never chosen: a gap is below 2^16, so parameter 15 costs at most the
//! same bits for every gap (`cost(15) - cost(16) = sum(gap >> 15) - members <= 0`) and ties
//! go to the smaller parameter.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use roaring::RoaringBitmap;

use ackstore::internals::format::partition::code::{
    BOUNDED_FLAG, HOLES_FLAG, body_bounds, varint_len,
};
use ackstore::internals::format::partition::{
    PARTITION_SPAN, PartitionEncoding, PartitionKey, decode_partition, encode_partition,
    partition_encoding,
};

use crate::support::workload::Rng;

/// Offsets a partition holds.
const SPAN: u32 = 1 << 16;

/// The CRC of every encoding of the corpus, each behind its length (recorded from the encoder
/// before its speed-ups; any change to it is a format change).
const CORPUS_CRC: u32 = 3_287_649_149;

/// How many sets of the corpus took each body and code.
const CORPUS_CHOICES: &str = "\
bitmap: 38\n\
empty: 1\n\
gaps acked bounded: 51\n\
gaps acked rice 00: 17\n\
gaps acked rice 01: 17\n\
gaps acked rice 02: 13\n\
gaps acked rice 03: 13\n\
gaps acked rice 04: 10\n\
gaps acked rice 05: 9\n\
gaps acked rice 06: 8\n\
gaps acked rice 07: 12\n\
gaps acked rice 08: 10\n\
gaps acked rice 09: 12\n\
gaps acked rice 10: 9\n\
gaps acked rice 11: 14\n\
gaps acked rice 12: 10\n\
gaps acked rice 13: 11\n\
gaps acked rice 14: 7\n\
gaps acked rice 15: 1\n\
gaps holes bounded: 52\n\
gaps holes rice 00: 17\n\
gaps holes rice 01: 21\n\
gaps holes rice 02: 9\n\
gaps holes rice 03: 10\n\
gaps holes rice 04: 8\n\
gaps holes rice 05: 9\n\
gaps holes rice 06: 8\n\
gaps holes rice 07: 8\n\
gaps holes rice 08: 10\n\
gaps holes rice 09: 11\n\
gaps holes rice 10: 9\n\
gaps holes rice 11: 15\n\
gaps holes rice 12: 9\n\
gaps holes rice 13: 12\n\
gaps holes rice 14: 6\n\
gaps holes rice 15: 2\n\
roaring run: 194\n\
";

/// The name of the body and code `record` holds.
fn choice(record: &[u8]) -> String {
    let encoding = partition_encoding(record).expect("a version 2 record");
    // Magic, version, encoding, then the key's varints: ledger 1 and chunk 0 take a byte each.
    let body = &record[9..record.len() - 4];
    match encoding {
        PartitionEncoding::Empty => "empty".into(),
        PartitionEncoding::Bitmap => "bitmap".into(),
        PartitionEncoding::Roaring => {
            let cookie = u32::from_le_bytes(body[..4].try_into().unwrap());
            match (cookie, body.len()) {
                (12347, _) => "roaring run".into(),
                (_, 8208) => "roaring bitmap".into(),
                _ => "roaring array".into(),
            }
        }
        PartitionEncoding::Gaps => {
            let (lo, hi) = body_bounds(body, PARTITION_SPAN).expect("a span");
            let param = body[varint_len(lo.into()) + varint_len((hi - lo).into())];
            let class = if param & HOLES_FLAG != 0 {
                "holes"
            } else {
                "acked"
            };
            if param & BOUNDED_FLAG != 0 {
                format!("gaps {class} bounded")
            } else {
                format!("gaps {class} rice {:02}", param & !HOLES_FLAG)
            }
        }
        PartitionEncoding::RoaringV1 => unreachable!("the encoder writes version 2"),
    }
}

/// The members `lo ..= hi` whose holes (with `holes`, else whose members besides `lo` and `hi`)
/// are `coded`.
fn with_class(lo: u32, hi: u32, coded: &[u32], holes: bool) -> RoaringBitmap {
    if holes {
        let mut set: RoaringBitmap = (lo..=hi).collect();
        for v in coded {
            set.remove(*v);
        }
        set
    } else {
        let mut set: RoaringBitmap = coded.iter().copied().collect();
        set.insert(lo);
        set.insert(hi);
        set
    }
}

/// Offsets after `lo` whose gaps (offsets skipped before each) are `gap()`, below `limit`.
fn gapped(lo: u32, limit: u32, mut gap: impl FnMut() -> u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut at = lo;
    loop {
        let next = u64::from(at) + u64::from(gap()) + 1;
        if next >= u64::from(limit) {
            return out;
        }
        at = u32::try_from(next).unwrap();
        out.push(at);
    }
}

/// The corpus, in a fixed order.
fn corpus() -> Vec<RoaringBitmap> {
    let mut rng = Rng::new(0x5eed_c0de);
    let mut sets = vec![
        RoaringBitmap::new(),
        [0].into_iter().collect(),
        [SPAN - 1].into_iter().collect(),
        [12_345].into_iter().collect(),
        [0, SPAN - 1].into_iter().collect(),
        [0, 1].into_iter().collect(),
        [SPAN - 2, SPAN - 1].into_iter().collect(),
        [0, 2].into_iter().collect(),
        (0..SPAN).collect(),
        (1..SPAN).collect(),
        (0..SPAN - 1).collect(),
        (1..SPAN - 1).collect(),
        // One member far from both ends: the largest Rice parameters.
        [0, 50_000, SPAN - 1].into_iter().collect(),
        [0, 20_000, SPAN - 1].into_iter().collect(),
        // One hole far from both ends.
        with_class(0, SPAN - 1, &[50_000], true),
        with_class(0, SPAN - 1, &[20_000], true),
    ];
    // Gaps around 2^k of either class, for every Rice parameter.
    for holes in [false, true] {
        for k in 0..16u32 {
            for _ in 0..4 {
                let lo = u32::try_from(rng.below(64)).unwrap();
                let hi = SPAN - 1 - u32::try_from(rng.below(64)).unwrap();
                // Uniform in [2^k / 2, 3 2^k / 2) (often the bounded code's), and spread
                // over [0, 2^(k+2)) with smaller gaps likelier (Rice's).
                let base = (1u32 << k) / 2;
                let spread = 1u64 << k;
                let coded = gapped(lo, hi, || base + u32::try_from(rng.below(spread)).unwrap());
                sets.push(with_class(lo, hi, &coded, holes));
                let mut wide = || u32::try_from(rng.below(4 * spread) >> rng.below(3)).unwrap();
                let coded = gapped(lo, hi, &mut wide);
                sets.push(with_class(lo, hi, &coded, holes));
                // The same over a short span: fewer members, the other bodies nearer.
                let short_hi = lo + (hi - lo) / 8;
                let coded = gapped(lo, short_hi, &mut wide);
                sets.push(with_class(lo, short_hi, &coded, holes));
            }
        }
    }
    // Regular patterns: the bounded code, with one gap value (no code bits) or a few.
    for holes in [false, true] {
        for (min, range) in [
            (0, 1),
            (1, 1),
            (2, 1),
            (99, 1),
            (5, 3),
            (100, 8),
            (1, 2),
            (30, 5),
        ] {
            let lo = u32::try_from(rng.below(1000)).unwrap();
            let hi = SPAN - 1 - u32::try_from(rng.below(1000)).unwrap();
            let coded = gapped(lo, hi, || min + u32::try_from(rng.below(range)).unwrap());
            sets.push(with_class(lo, hi, &coded, holes));
        }
    }
    // Dense random sets over spans of every size: the plain bitmap body, and gaps near it.
    for _ in 0..40 {
        let lo = u32::try_from(rng.below(u64::from(SPAN))).unwrap();
        let hi = lo + u32::try_from(rng.below(u64::from(SPAN - lo))).unwrap();
        let percent = 20 + rng.below(61);
        let mut set: RoaringBitmap = (lo..=hi).filter(|_| rng.chance(percent)).collect();
        set.insert(lo);
        set.insert(hi);
        sets.push(set);
    }
    // A few long runs (roaring's run container), and random runs of every length.
    for runs in [1u64, 2, 5, 20, 200, 1500] {
        let mut set = RoaringBitmap::new();
        for _ in 0..runs {
            let start = u32::try_from(rng.below(u64::from(SPAN))).unwrap();
            let len = u32::try_from(rng.below(1 + u64::from(SPAN) / runs)).unwrap();
            set.insert_range(start..(start + len + 1).min(SPAN));
        }
        sets.push(set);
    }
    for _ in 0..200 {
        let mut set = RoaringBitmap::new();
        let mut at = u32::try_from(rng.below(2000)).unwrap();
        let (run_mean, gap_mean) = (1 + rng.below(64), 1 + rng.below(512));
        while at < SPAN {
            let len = 1 + u32::try_from(rng.below(2 * run_mean)).unwrap();
            set.insert_range(at..(at + len).min(SPAN));
            at += len + 1 + u32::try_from(rng.below(2 * gap_mean)).unwrap();
        }
        sets.push(set);
    }
    // Sparse uniform sets of every size: roaring's array container where the gaps do not win.
    for members in [2u64, 16, 100, 1000, 4000, 4096, 4097, 10_000] {
        let set: RoaringBitmap = (0..members)
            .map(|_| u32::try_from(rng.below(u64::from(SPAN))).unwrap())
            .collect();
        sets.push(set);
    }
    // Clustered members: members packed in a few places, nothing between them.
    for clusters in [2u64, 3, 8] {
        let mut set = RoaringBitmap::new();
        for _ in 0..clusters {
            let at = u32::try_from(rng.below(u64::from(SPAN - 64))).unwrap();
            set.extend((at..at + 64).filter(|_| rng.chance(50)));
        }
        sets.push(set);
    }
    sets
}

#[test]
fn the_encoder_writes_the_recorded_bytes_for_every_body_and_code() {
    let key = PartitionKey {
        ledger_id: 1,
        chunk: 0,
    };
    let mut crc = crc32fast::Hasher::new();
    let mut choices = BTreeMap::<String, u32>::new();
    for set in corpus() {
        let record = encode_partition(key, &set);
        crc.update(&u32::try_from(record.len()).unwrap().to_le_bytes());
        crc.update(&record);
        *choices.entry(choice(&record)).or_default() += 1;
        let (decoded_key, decoded) = decode_partition(&record).expect("the encoding decodes");
        assert_eq!((decoded_key, &decoded), (key, &set));
    }
    let mut listed = String::new();
    for (name, n) in &choices {
        writeln!(listed, "{name}: {n}").unwrap();
    }
    let crc = crc.finalize();
    assert_eq!(
        (crc, listed.as_str()),
        (CORPUS_CRC, CORPUS_CHOICES),
        "the corpus's encodings changed:\n{listed}"
    );
}

//! Encoded and resident size of the ack set for the four ack patterns, against Pulsar's
//! `MessageRange` encoding of the same ranges; partition records alone against the entropy and
//! Pulsar's `LongListMap` and roaring+LZ4; and the state a journal tick persists, its framing
//! (each partition's record frame, key, cardinality and marker row, and one marker) accounted
//! byte for byte, against the same targets. Sizes are deterministic,
//! so the targets are asserted; `cargo test --release --test ackset -- size:: --nocapture`
//! prints the tables recorded in `docs/benchmarks.md`.

use crate::support;

use ackstore::Position;
use ackstore::internals::ackset::{AckSet, MemPartitionStore, RangeSetWrapper, pulsar};
use ackstore::internals::format::partition::{encode_inline, encode_partition};
use ackstore::internals::format::varint_len;
use roaring::RoaringBitmap;
use support::ack_patterns::{LEDGER, Pattern};

/// Individual acks per pattern.
const ACKS: u64 = 200_000;

struct Sizes {
    acked: u64,
    ranges: u64,
    encoded: u64,
    pulsar: u64,
    resident: u64,
}

fn sizes(pattern: Pattern) -> Sizes {
    let mut set = AckSet::new();
    let mut wrapper = RangeSetWrapper::new(Box::new(MemPartitionStore::new()), usize::MAX);
    for e in pattern.entries(ACKS) {
        let p = Position::new(LEDGER, e);
        let added = set.add(p);
        assert_eq!(wrapper.add(p).expect("add"), added);
    }
    let resident = wrapper.stats().resident_bytes as u64;
    // The wrapper also charges its LRU table and the runs its run containers once held.
    assert!(set.heap_bytes() as u64 <= resident, "{resident}");
    Sizes {
        acked: set.len(),
        ranges: set.range_count(),
        encoded: set
            .partitions()
            .map(|(key, bitmap)| encode_partition(key, bitmap).len() as u64)
            .sum(),
        pulsar: pulsar::message_range_bytes(set.ranges()),
        resident,
    }
}

#[expect(clippy::cast_precision_loss, reason = "report figures")]
fn ratio(a: u64, b: u64) -> f64 {
    a as f64 / b as f64
}

#[test]
fn encoded_size_beats_pulsar_message_ranges_by_the_targets() {
    println!(
        "| pattern | acked entries | ranges | ackstore B/range | Pulsar B/range | ackstore / Pulsar | resident B/acked entry |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for pattern in Pattern::ALL {
        let s = sizes(pattern);
        println!(
            "| {} | {} | {} | {:.3} | {:.2} | {:.4} | {:.3} |",
            pattern.name(),
            s.acked,
            s.ranges,
            ratio(s.encoded, s.ranges),
            ratio(s.pulsar, s.ranges),
            ratio(s.encoded, s.pulsar),
            ratio(s.resident, s.acked),
        );
        match pattern {
            Pattern::Alternating => {
                assert_eq!(s.ranges, ACKS);
                assert!(
                    s.encoded * 50 <= s.pulsar,
                    "alternating: {} vs {}",
                    s.encoded,
                    s.pulsar
                );
            }
            Pattern::Sparse => {
                assert_eq!(s.ranges, ACKS);
                assert!(
                    s.encoded * 8 <= s.pulsar,
                    "sparse: {} vs {}",
                    s.encoded,
                    s.pulsar
                );
            }
            Pattern::Sequential => assert_eq!(s.ranges, 1),
            Pattern::Random => assert!(s.ranges > 1),
        }
    }
}

/// splitmix64: a small deterministic generator for the density patterns below.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    #[expect(clippy::cast_precision_loss, reason = "53 bits of a uniform fraction")]
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A density pattern over the entries of one ledger: which entries are acked.
#[derive(Clone, Copy, Debug)]
enum Density {
    /// Each entry acked with this probability.
    Random(f64),
    /// A hole every K entries on average, gaps uniform in [K/2, 3K/2].
    Holes(u64),
}

impl Density {
    const ALL: [Density; 7] = [
        Density::Random(0.5),
        Density::Random(0.9),
        Density::Random(0.99),
        Density::Random(0.999),
        Density::Holes(10),
        Density::Holes(100),
        Density::Holes(1000),
    ];

    fn name(self) -> String {
        match self {
            Density::Random(p) => format!("random:{p}"),
            Density::Holes(k) => format!("holes:{k}"),
        }
    }

    /// The acked flags of `entries` entries.
    fn flags(self, entries: u64, seed: u64) -> Vec<bool> {
        let mut rng = SplitMix(seed);
        match self {
            Density::Random(p) => (0..entries).map(|_| rng.unit() < p).collect(),
            Density::Holes(k) => {
                let mut flags = vec![true; usize::try_from(entries).expect("fits")];
                let mut next = 0;
                loop {
                    next += k / 2 + rng.next() % (k + 1);
                    match flags.get_mut(usize::try_from(next).expect("fits")) {
                        Some(flag) => *flag = false,
                        None => break,
                    }
                }
                flags
            }
        }
    }
}

/// Zero-order entropy, in bytes, of `span` flags of which `acked` are set: span x H(p) / 8.
#[expect(clippy::cast_precision_loss, reason = "an information measure")]
fn entropy_bytes(span: u64, acked: u64) -> f64 {
    if span == 0 || acked == 0 || acked == span {
        return 0.0;
    }
    let p = acked as f64 / span as f64;
    let h = -(p * p.log2() + (1.0 - p) * (1.0 - p).log2());
    span as f64 * h / 8.0
}

/// The ack set of one ledger of `entries` entries in a density pattern, and its entropy.
fn density_set(density: Density, entries: u64, seed: u64) -> (AckSet, f64) {
    let mut set = AckSet::new();
    let flags = density.flags(entries, seed);
    for (entry, _) in (0u64..).zip(&flags).filter(|(_, acked)| **acked) {
        set.add(Position::new(LEDGER, entry));
    }
    (
        set,
        entropy_bytes(entries, flags.iter().filter(|a| **a).count() as u64),
    )
}

/// The acked entry ids of the one ledger of `set`, as Pulsar's per-ledger structures hold them.
fn ledger_bitmap(set: &AckSet) -> RoaringBitmap {
    set.ranges()
        .flat_map(|(first, last)| first.entry_id..=last.entry_id)
        .map(|e| u32::try_from(e).expect("entry ids of the test ledger fit"))
        .collect()
}

fn lz4_len(bytes: &[u8]) -> usize {
    lz4_flex::block::compress(bytes).len()
}

fn encoded_bytes(set: &AckSet) -> (u64, u64) {
    let mut partitions = 0;
    let bytes = set
        .partitions()
        .map(|(key, bitmap)| {
            partitions += 1;
            encode_partition(key, bitmap).len() as u64
        })
        .sum();
    (bytes, partitions)
}

#[test]
fn encoded_size_stays_within_a_quarter_of_the_entropy_limit() {
    println!(
        "| pattern | ledger entries | entropy B | encoded B | partitions | encoded / entropy |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    // A ledger shorter than a partition (Pulsar's default 50,000 entries) and one of several
    // partitions, the last one partly used.
    for entries in [50_000, 200_000] {
        for (seed, density) in (1..).zip(Density::ALL) {
            let (set, entropy) = density_set(density, entries, seed);
            let (encoded, partitions) = encoded_bytes(&set);
            #[expect(clippy::cast_precision_loss, reason = "report figures")]
            let bound = 1.25 * entropy + 64.0 * partitions as f64;
            println!(
                "| {} | {entries} | {entropy:.0} | {encoded} | {partitions} | {:.3} |",
                density.name(),
                encoded as f64 / entropy,
            );
            #[expect(clippy::cast_precision_loss, reason = "a size bound")]
            let within = encoded as f64 <= bound;
            assert!(
                within,
                "{} over {entries} entries: {encoded} B > 1.25 x {entropy:.0} + 64 x {partitions}",
                density.name()
            );
        }
    }
}

#[test]
fn encoded_size_is_at_most_half_of_pulsars_long_array_and_roaring_lz4() {
    println!("| pattern | ledger entries | encoded B | Pulsar long[] B | Pulsar roaring+LZ4 B |");
    println!("|---|---:|---:|---:|---:|");
    for entries in [50_000, 200_000] {
        for (seed, density) in (1..).zip(Density::ALL) {
            let (set, _) = density_set(density, entries, seed);
            let (encoded, _) = encoded_bytes(&set);
            let acked = ledger_bitmap(&set);
            let long_array = pulsar::long_list_map_bytes([(LEDGER, &acked)]);
            let roaring_lz4 = pulsar::roaring_bytes([(LEDGER, &acked)], lz4_len);
            println!(
                "| {} | {entries} | {encoded} | {long_array} | {roaring_lz4} |",
                density.name()
            );
            // Never larger than either, and at most half of both where holes are the point.
            assert!(
                encoded <= long_array && encoded <= roaring_lz4,
                "{}",
                density.name()
            );
            if matches!(density, Density::Holes(_) | Density::Random(0.99)) {
                assert!(
                    2 * encoded <= long_array && 2 * encoded <= roaring_lz4,
                    "{} over {entries} entries: {encoded} B against {long_array} and {roaring_lz4}",
                    density.name()
                );
            }
        }
    }
}

/// Data ledgers of the persisted-size test, each of [`LEDGER_ENTRIES`] entries (one partition,
/// partly used, as in `ackstore perf`).
const LEDGERS: u64 = 10;
const LEDGER_ENTRIES: u64 = 50_000;

/// Bytes a partition costs in a journal tick beyond its set's inline form (its encoding byte and
/// body, `format::partition::encode_inline`): its record's frame (length, CRC, kind, topic and
/// cursor ids: 25 bytes), the varints of its key and cardinality, and its 36-byte row in the
/// cursor's marker. The partitions of [`persisted`] (a ledger id below 128, chunk 0, at most
/// 65,536 acked entries) cost at most this: 66 bytes.
fn framing(ledger_id: u64, chunk: u64, cardinality: u64) -> u64 {
    (25 + varint_len(ledger_id) + varint_len(chunk) + varint_len(cardinality) + 36) as u64
}

/// The most [`framing`] costs a partition of [`persisted`].
const FRAMING: u64 = 25 + 1 + 1 + 3 + 36;

/// Bytes of a tick's marker beyond its rows: its frame (25), the name tag (4), and the marker
/// with no properties (45).
const MARKER: u64 = 25 + 4 + 45;

/// What one tick of [`persisted`] appended, and what it holds.
struct Persisted {
    /// Bytes the tick appended: the partition records and the marker.
    bytes: u64,
    /// The partitions' inline forms: their sets.
    sets: u64,
    /// What framing the partitions cost (see [`framing`]).
    framing: u64,
    entropy: f64,
    partitions: u64,
    long_array: u64,
    roaring_lz4: u64,
}

/// `density` over [`LEDGERS`] ledgers, committed once by a cursor journal (default settings,
/// an in-memory disk): the bytes the tick appended (the cursor's partition records and its
/// marker), the sets and framing they hold, the entropy, the partition count, and Pulsar's
/// `LongListMap` and roaring+LZ4 sizes of the same state.
fn persisted(density: Density, seed: u64) -> Persisted {
    use support::journal::{Fleet, cursor_ids};

    let disk = ackstore::MemStorage::new();
    let mut fleet =
        Fleet::open(&disk, ackstore::JournalConfig::default(), usize::MAX).expect("open");
    let id = cursor_ids()[0];
    let mut entropy = 0.0;
    let mut bitmaps = Vec::new();
    let (mut sets, mut framed) = (0, 0);
    for ledger in 1..=LEDGERS {
        let flags = density.flags(LEDGER_ENTRIES, seed * 1_000 + ledger);
        let mut acked = RoaringBitmap::new();
        for (entry, _) in (0u64..).zip(&flags).filter(|(_, a)| **a) {
            fleet.ack(id, Position::new(ledger, entry)).expect("ack");
            acked.insert(u32::try_from(entry).expect("fits"));
        }
        entropy += entropy_bytes(LEDGER_ENTRIES, acked.len());
        // One partition per ledger: its entries lie in chunk 0.
        sets += encode_inline(&acked).len() as u64;
        framed += framing(ledger, 0, acked.len());
        bitmaps.push((ledger, acked));
    }
    let before = fleet.journal.stats().bytes_written;
    fleet.tick().expect("tick");
    let bytes = fleet.journal.stats().bytes_written - before;
    let partitions = fleet.cursors[&id].0.partitions().len() as u64;
    assert_eq!(partitions, LEDGERS);
    Persisted {
        bytes,
        sets,
        framing: framed,
        entropy,
        partitions,
        long_array: pulsar::long_list_map_bytes(bitmaps.iter().map(|(l, b)| (*l, b))),
        roaring_lz4: pulsar::roaring_bytes(bitmaps.iter().map(|(l, b)| (*l, b)), lz4_len),
    }
}

#[test]
fn persisted_state_with_its_framing_meets_the_entropy_and_pulsar_targets() {
    println!(
        "| pattern | entropy B | persisted B | partitions | framing B | persisted / entropy | / LongListMap | / roaring+LZ4 |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (seed, density) in (1..).zip(Density::ALL) {
        let s = persisted(density, seed);
        #[expect(clippy::cast_precision_loss, reason = "report figures")]
        let (p, pp) = (s.bytes as f64, s.partitions as f64);
        println!(
            "| {} | {:.0} | {} | {} | {} | {:.3} | {:.3} | {:.3} |",
            density.name(),
            s.entropy,
            s.bytes,
            s.partitions,
            s.framing,
            p / s.entropy,
            ratio(s.bytes, s.long_array),
            ratio(s.bytes, s.roaring_lz4),
        );
        // Every byte accounted for: each partition's set, its framing, one marker.
        assert_eq!(s.bytes, s.sets + s.framing + MARKER, "{}", density.name());
        assert!(s.framing <= FRAMING * s.partitions, "{}", density.name());
        // The whole tick, framing and marker included, meets the bound the partition records
        // alone meet (`encoded_size_stays_within_a_quarter_of_the_entropy_limit`).
        assert!(
            p <= 1.25 * s.entropy + 64.0 * pp,
            "{}: {} B > 1.25 x {:.0} + 64 x {}",
            density.name(),
            s.bytes,
            s.entropy,
            s.partitions
        );
        // Where nothing compresses (a random half) the framing is all the difference.
        assert!(
            s.bytes <= s.long_array && s.bytes <= s.roaring_lz4 + FRAMING * s.partitions + MARKER,
            "{}: {} B against {} and {}",
            density.name(),
            s.bytes,
            s.long_array,
            s.roaring_lz4
        );
        // Half of either where there are runs to find, framing apart; and, framing included,
        // below either where holes are rare.
        if matches!(density, Density::Holes(_) | Density::Random(0.99)) {
            assert!(
                2 * s.sets <= s.long_array && 2 * s.sets <= s.roaring_lz4,
                "{}: {} B of sets against {} and {}",
                density.name(),
                s.sets,
                s.long_array,
                s.roaring_lz4
            );
            assert!(
                s.bytes <= s.long_array && s.bytes <= s.roaring_lz4,
                "{}: {} B against {} and {}",
                density.name(),
                s.bytes,
                s.long_array,
                s.roaring_lz4
            );
        }
    }
}

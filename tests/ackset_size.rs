//! Encoded and resident size of the ack set for the four ack patterns, against Pulsar's
//! `MessageRange` encoding of the same ranges. Sizes are deterministic, so the targets are
//! asserted; `cargo test --release --test ackset_size -- --nocapture` prints the table recorded in
//! `docs/benchmarks.md`.

mod ack_patterns;

use ack_patterns::{LEDGER, Pattern};
use ackstore::Position;
use ackstore::ackset::{AckSet, MemPartitionStore, RangeSetWrapper, pulsar};
use ackstore::format::partition::encode_partition;

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

//! Ack patterns shared by the size test (`tests/ackset/size.rs`) and the benchmark
//! (`benches/ackset.rs`): which entries of one ledger a consumer acknowledges individually.

/// The data ledger the patterns ack in: a six-digit id, as brokers that have run for a while have.
pub const LEDGER: u64 = 123_456;

/// Entries a random pattern draws from.
pub const RANDOM_WINDOW: u64 = 1 << 20;

/// How a consumer acknowledges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Every entry, in order.
    Sequential,
    /// Uniformly random entries of a window of `RANDOM_WINDOW` entries (repeats happen).
    Random,
    /// Every other entry: each ack is a range of its own, with a hole on each side.
    Alternating,
    /// One entry in a hundred.
    Sparse,
}

impl Pattern {
    /// Every pattern, in report order.
    pub const ALL: [Pattern; 4] = [
        Pattern::Sequential,
        Pattern::Random,
        Pattern::Alternating,
        Pattern::Sparse,
    ];

    /// Short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Sequential => "sequential",
            Pattern::Random => "random-1M-window",
            Pattern::Alternating => "alternating",
            Pattern::Sparse => "sparse-1pct",
        }
    }

    /// The entry ids of `acks` individual acks, in ack order.
    pub fn entries(self, acks: u64) -> Vec<u64> {
        match self {
            Pattern::Sequential => (0..acks).collect(),
            Pattern::Random => {
                // xorshift64*: deterministic, no dependency.
                let mut state = 0x9E37_79B9_7F4A_7C15_u64;
                (0..acks)
                    .map(|_| {
                        state ^= state >> 12;
                        state ^= state << 25;
                        state ^= state >> 27;
                        state.wrapping_mul(0x2545_F491_4F6C_DD1D) % RANDOM_WINDOW
                    })
                    .collect()
            }
            Pattern::Alternating => (0..acks).map(|i| i * 2).collect(),
            Pattern::Sparse => (0..acks).map(|i| i * 100).collect(),
        }
    }
}

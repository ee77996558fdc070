//! The cost of one journal index operation against the number of cursors the index holds.
//!
//! The index (`journal::index::Index`) holds one entry per cursor of the store; a tick looks up
//! every live partition of each dirty cursor and commits each cursor's marker, and a store's
//! open commits every cursor's marker as it scans the journal. Each of those is one hash
//! lookup and a few rows per cursor, whatever the number of cursors: this bench does the same
//! operations, the same number of times per cursor, on indexes of 30,000 to 1,000,000 cursors,
//! and prints the CPU time of each per operation (the bench thread's CPU clock). A cost per
//! operation that grows with the index is the memory the index no longer fits in (caches,
//! address translation), not more work: the operations and their count per cursor are the same.
//!
//! Per size: the index built by committing every cursor's marker (two rows each) in a random
//! order (what an open does), then `ROUNDS` rounds of a lookup of each cursor's rows in a random
//! order (a tick's resolution of its live partitions) and of a commit of a new marker for each
//! cursor (a tick's publication). Prints the median of the rounds, and the time of one walk of
//! every entry (`Index::cursors_in`, which a rollover makes once per segment it rolls).
//!
//! Run: `cargo bench --bench index_size` (`-- 30000 1000000` for chosen sizes).

use std::time::Duration;

use ackstore::internals::ackset::PartitionKey;
use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::format::journal::{JournalLoc, SEGMENT_VERSION};
use ackstore::internals::journal::index::{Committed, CursorId, Index, PartLoc, Rows};
use rustix::time::{ClockId, clock_gettime};

/// Rounds of lookups and commits per size.
const ROUNDS: usize = 5;

/// Rows (live partitions) per cursor.
const ROWS: u64 = 2;

/// The bench thread's CPU time of `f`.
fn cpu_time(f: impl FnOnce()) -> Duration {
    let now = || {
        let t = clock_gettime(ClockId::ThreadCPUTime);
        Duration::new(
            u64::try_from(t.tv_sec).unwrap_or(0),
            u32::try_from(t.tv_nsec).unwrap_or(0),
        )
    };
    let started = now();
    f();
    now().saturating_sub(started)
}

/// splitmix64, for the order of the cursors.
fn shuffled(n: u64, seed: u64) -> Vec<u64> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut order: Vec<u64> = (0..n).collect();
    for i in (1..order.len()).rev() {
        let j = usize::try_from(next() % (i as u64 + 1)).unwrap_or(0);
        order.swap(i, j);
    }
    order
}

fn cursor(c: u64) -> CursorId {
    CursorId {
        topic: c / 10,
        cursor: c % 10,
    }
}

fn key(r: u64) -> PartitionKey {
    PartitionKey {
        ledger_id: 1,
        chunk: r,
    }
}

/// A marker of cursor `c` written at `offset`, its rows just before it.
fn marker(c: u64, offset: u64) -> Committed {
    let loc = |offset| JournalLoc { segment: 1, offset };
    let rows = Rows::from_pairs((0..ROWS).map(|r| {
        let part = PartLoc {
            seq: offset + r,
            loc: loc(offset + r),
            frame_len: 100,
            crc: 0,
            cardinality: 50,
            version: SEGMENT_VERSION,
        };
        (key(r), part)
    }));
    Committed {
        marker: loc(offset + ROWS),
        marker_len: 60,
        crc: 0,
        name: u32::try_from(c % 1_000).unwrap_or(0),
        floor: 1,
        state: PersistedState::default(),
        rows,
        batch: Rows::new(),
        unbound_batch: false,
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[allow(
    clippy::cast_precision_loss,
    reason = "nanoseconds per operation, for people"
)]
fn main() {
    let sizes: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![30_000, 100_000, 300_000, 1_000_000]
    } else {
        sizes
    };
    println!(
        "| cursors | build, per commit | lookup, per row | commit, per cursor | walk of every entry |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for n in sizes {
        let mut index = Index::default();
        let mut offset = 0;
        let build = cpu_time(|| {
            for c in shuffled(n, 1) {
                index.commit(cursor(c), marker(c, offset));
                offset += ROWS + 1;
            }
        });
        let (mut lookups, mut commits) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            let order = shuffled(n, round as u64 + 2);
            let mut found = 0u64;
            lookups.push(cpu_time(|| {
                for &c in &order {
                    for r in 0..ROWS {
                        found += index.lookup(cursor(c), key(r)).map_or(0, |p| p.cardinality);
                    }
                }
            }));
            assert_eq!(found, n * ROWS * 50, "every row is found");
            let markers: Vec<Committed> = order
                .iter()
                .map(|&c| {
                    offset += ROWS + 1;
                    marker(c, offset)
                })
                .collect();
            commits.push(cpu_time(|| {
                for (&c, m) in order.iter().zip(markers) {
                    index.commit(cursor(c), m);
                }
            }));
        }
        // Segment 0 holds no record: the walk visits every entry and keeps none.
        let walk = cpu_time(|| assert!(index.cursors_in(0).is_empty()));
        let per = |d: Duration, ops: u64| d.as_nanos() as f64 / ops as f64;
        println!(
            "| {n} | {:.0} ns | {:.0} ns | {:.0} ns | {:.1} ms |",
            per(build, n),
            per(median(lookups), n * ROWS),
            per(median(commits), n),
            walk.as_secs_f64() * 1e3,
        );
    }
}

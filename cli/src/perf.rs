//! `ackstore perf`: the main job. A realistic cursor workload on real files, measured end to end.
//!
//! Phases: append entries; open a cursor and ack them in a pattern; flush; close everything and
//! reopen (a restart); time the first read and the full load of the recovered ack state; check
//! every entry's acked flag against the truth; ack a few more entries and flush again (the
//! incremental cost). Exits 1 if any ack did not survive the restart.

use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ackstore::pulsar;
use ackstore::{AppendMeta, CursorOptions, LedgerConfig, ManagedLedger, Position};
use ackstore::{CursorConfig, PersistMode};
use ackstore::{Storage, Store, StoreConfig};
use clap::Args;
use clap::builder::RangedU64ValueParser;
use indicatif::{ProgressBar, ProgressStyle};
use roaring::RoaringBitmap;

use crate::report;
use crate::target::{Backend, StorageArgs};

/// Name of the cursor the workload drives.
const CURSOR: &str = "perf";

/// Largest `--entries` (and `--extra-acks`, and K of `holes:K`).
const MAX_ENTRIES: u64 = 1_000_000_000;
/// Largest `--payload-bytes`: the largest entry a topic takes by default.
const MAX_PAYLOAD_BYTES: usize = ackstore::DEFAULT_MAX_ENTRY_SIZE as usize;
/// Largest `--entries` x (`--payload-bytes` + the entry's frame): what the run may write, 1 TiB.
const MAX_DATA_BYTES: u64 = 1 << 40;
/// Bytes of an entry's frame besides its payload (`docs/format.md`, "Data ledger").
const ENTRY_FRAME_BYTES: u64 = 44;
/// Largest `--lru-bytes`: 1 TiB.
const MAX_LRU_BYTES: usize = 1 << 40;
/// Largest `--entries-per-ledger`.
const MAX_ENTRIES_PER_LEDGER: u64 = MAX_ENTRIES;
/// Largest `--batch-size`: the cursor's maximum batch size.
const MAX_BATCH_SIZE: u32 = ackstore::MAX_BATCH_SIZE;
/// Largest `--topics` x `--cursors` (each bounded by it too): ten times the store's design target
/// of 100,000 cursors, so a sweep shows how each figure grows past it.
const MAX_STORE_CURSORS: usize = 1_000_000;
/// Largest `--topic-entries`.
const MAX_TOPIC_ENTRIES: u64 = 1_000_000;
/// Largest `--topics` x `--topic-entries` (about 14 GB of entries of 100 bytes), and largest
/// `--topics` x `--cursors` x `--topic-entries` (the acked flags the workload keeps in memory).
const MAX_STORE_ENTRIES: u64 = 100_000_000;
/// Largest `--ticks`.
const MAX_TICKS: usize = 1_000;

/// Arguments of `ackstore perf`. Every number is bounded (the bounds are in `--help`): a value
/// outside them is refused with exit code 2 before anything is created.
#[derive(Debug, Args)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "independent command-line switches"
)]
pub struct PerfArgs {
    /// Number of entries to append: 1 to 1,000,000,000, and entries x (payload bytes + 44) at
    /// most 1 TiB.
    #[arg(long, allow_negative_numbers = true, default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1..=MAX_ENTRIES))]
    entries: u64,
    /// Payload size of each entry, in bytes: 0 to 5,242,880 (5 MiB, the largest entry).
    #[arg(long, allow_negative_numbers = true, default_value_t = 100,
          value_parser = RangedU64ValueParser::<usize>::new().range(0..=MAX_PAYLOAD_BYTES as u64))]
    payload_bytes: usize,
    /// Which entries to ack: `alternating`, `sequential`, `random:FRACTION`, `sparse:FRACTION`
    /// (FRACTION in (0, 1]) or `holes:K` (every entry but a hole every K on average, gaps
    /// uniform in [K/2, 3K/2]; K from 2 to 1,000,000,000).
    #[arg(long, allow_hyphen_values = true, default_value = "alternating")]
    pattern: Pattern,
    /// Extra entries to ack after the restart and its first flush, flushed on their own (the
    /// incremental cost): 0 to 1,000,000,000.
    #[arg(long, allow_negative_numbers = true, default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(0..=MAX_ENTRIES))]
    extra_acks: u64,
    /// How the cursor persists its ack state.
    #[arg(long, value_enum, default_value = "multi")]
    mode: Mode,
    /// Memory budget for resident ack state, in bytes: 0 to 1,099,511,627,776 (1 TiB).
    #[arg(long, allow_negative_numbers = true, default_value_t = 8 * 1024 * 1024,
          value_parser = RangedU64ValueParser::<usize>::new().range(0..=MAX_LRU_BYTES as u64))]
    lru_bytes: usize,
    /// Entries per data ledger before it rolls over: 1 to 1,000,000,000.
    #[arg(long, allow_negative_numbers = true, default_value_t = 50_000,
          value_parser = clap::value_parser!(u64).range(1..=MAX_ENTRIES_PER_LEDGER))]
    entries_per_ledger: u64,
    /// Directory to use; a temporary one (removed afterwards) when absent.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the temporary directory and print its path.
    #[arg(long)]
    keep: bool,
    /// Print one JSON object on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Seed of the random pattern (any 64-bit number).
    #[arg(long, allow_negative_numbers = true, default_value_t = 0x5eed)]
    seed: u64,
    /// Where the topic lives: with `--storage rados`, `--dir` names the namespace (a fresh one,
    /// removed afterwards unless `--keep`, when absent).
    #[command(flatten)]
    storage: StorageArgs,
    /// Messages per entry (`num_messages`): 1 to 1,048,576 (the cursor's maximum batch size).
    /// Above 1, a last phase acknowledges some messages of every entry left unacknowledged at
    /// batch-index level and reports the partial state's size next to Pulsar's.
    #[arg(long, allow_negative_numbers = true, default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_BATCH_SIZE)))]
    batch_size: u32,
    /// Which messages of a batch that phase acknowledges.
    #[arg(long, value_enum, default_value = "prefix")]
    batch_pattern: crate::perf_batch::BatchPattern,
    /// Run the store workload instead: this many topics in one store, `--cursors` cursors each
    /// (acks on every cursor, flush ticks, a restart, every cursor verified). 1 to 1,000,000,
    /// with topics x cursors at most 1,000,000, topics x topic entries at most 100,000,000, and
    /// topics x cursors x topic entries at most 100,000,000.
    #[arg(long, allow_negative_numbers = true, value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_STORE_CURSORS as u64))]
    topics: Option<usize>,
    /// Cursors per topic of the store workload: 1 to 1,000,000 (see `--topics`).
    #[arg(long, allow_negative_numbers = true, default_value_t = 10,
          value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_STORE_CURSORS as u64))]
    cursors: usize,
    /// Entries per topic of the store workload: 2 to 1,000,000 (see `--topics`).
    #[arg(long, allow_negative_numbers = true, default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(2..=MAX_TOPIC_ENTRIES))]
    topic_entries: u64,
    /// Flush ticks of the store workload: 1 to 1,000.
    #[arg(long, allow_negative_numbers = true, default_value_t = 5,
          value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_TICKS as u64))]
    ticks: usize,
    /// Run the single-cursor workload on topic `perf` of a store (`Store::open`: the cursor
    /// persists through the store's journal, a restart reopens the store) instead of a topic
    /// directory of its own. Batch-index acks (`--batch-size` above 1) are not available there.
    #[arg(long)]
    in_store: bool,
    /// Run the store workload at each of these total cursor counts (comma-separated, 2 to 8
    /// values, increasing, each 1 to 1,000,000 and a multiple of `--cursors`; topics = total /
    /// `--cursors`), one after the other, and print how each figure grows with the cursors: its
    /// exponent k in figure ~ cursors^k between consecutive points and from the first to the
    /// last (1 is a flat cost per cursor, 2 is quadratic). Instead of `--topics`.
    #[arg(long, value_parser = parse_sweep, conflicts_with = "topics")]
    sweep: Option<Sweep>,
    /// The store workload's one ack memory budget for every cursor, in bytes: 1,024 to
    /// 1,099,511,627,776 (default 64 MiB). One below the ack state the workload makes (about
    /// 300 bytes per cursor with the default topic entries) keeps the budget full while acks
    /// and ticks run.
    #[arg(long, allow_negative_numbers = true, default_value_t = crate::perf_store::STORE_ACK_BUDGET,
          value_parser = RangedU64ValueParser::<usize>::new().range(1024..=1u64 << 40))]
    ack_budget_bytes: usize,
    /// The store workload's budget in proportion to its cursors instead: this many bytes per
    /// cursor (1 to 1,048,576), so every point of a `--sweep` keeps the same share of its ack
    /// state resident (with the default topic entries, 150 keeps about half).
    #[arg(long, conflicts_with = "ack_budget_bytes",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..=1u64 << 20))]
    ack_budget_per_cursor_bytes: Option<usize>,
    /// Threads of the store workload's timed restart: 1 to 256 (default 1). The store's open
    /// (its journal's scan) is one call; every topic's open, then every cursor's open and first
    /// read, are spread over this many threads, as a broker loads topics concurrently. The JSON
    /// reports it as `restart_threads`.
    #[arg(long, allow_negative_numbers = true, default_value_t = 1,
          value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_RESTART_THREADS as u64))]
    restart_threads: usize,
    /// With `--topics`: also run the same workload on topic directories of
    /// `ManagedLedger::open` (each topic hosting a journal of its own, every cursor flushed on
    /// its own), in the same run.
    #[arg(long)]
    baseline: bool,
}

/// Most threads of the store workload's timed restart (`--restart-threads`).
const MAX_RESTART_THREADS: usize = 256;

/// Most points of a `--sweep`.
const MAX_SWEEP_POINTS: usize = 8;

/// The total cursor counts of a `--sweep`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sweep(Vec<usize>);

/// Parses a `--sweep` list (see its help).
fn parse_sweep(text: &str) -> Result<Sweep, String> {
    let points = text
        .split(',')
        .map(|n| {
            n.trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_STORE_CURSORS).contains(n))
                .ok_or_else(|| format!("`{n}` is not a cursor count from 1 to 1,000,000"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if !(2..=MAX_SWEEP_POINTS).contains(&points.len()) {
        return Err(format!(
            "a sweep has 2 to {MAX_SWEEP_POINTS} points, not {}",
            points.len()
        ));
    }
    if points.windows(2).any(|w| w[0] >= w[1]) {
        return Err("the points of a sweep increase".into());
    }
    Ok(Sweep(points))
}

impl PerfArgs {
    /// The store workload's one ack budget for `cursors` cursors in all.
    fn ack_budget(&self, cursors: usize) -> usize {
        self.ack_budget_per_cursor_bytes
            .map_or(self.ack_budget_bytes, |b| {
                b.saturating_mul(cursors).max(1024)
            })
    }

    /// The bounds that tie arguments together (each one alone is bounded by its parser).
    fn check(&self) -> ackstore::Result<()> {
        let refuse = |reason: String| Err(ackstore::Error::InvalidArgument { reason });
        if let Some(Sweep(points)) = &self.sweep {
            for &total in points {
                if total % self.cursors != 0 {
                    return refuse(format!(
                        "--sweep point {total} is not a multiple of --cursors {}",
                        self.cursors
                    ));
                }
                let flags = (total as u64).saturating_mul(self.topic_entries);
                let entries = ((total / self.cursors) as u64).saturating_mul(self.topic_entries);
                if entries > MAX_STORE_ENTRIES || flags > MAX_STORE_ENTRIES {
                    return refuse(format!(
                        "--sweep point {total} x --topic-entries {} is more than the \
                         {MAX_STORE_ENTRIES} entries (acked flags) the store workload runs",
                        self.topic_entries
                    ));
                }
            }
        }
        if let Some(topics) = self.topics {
            let cursors = topics.saturating_mul(self.cursors);
            if cursors > MAX_STORE_CURSORS {
                return refuse(format!(
                    "--topics {topics} x --cursors {} is {cursors} cursors, more than the \
                     {MAX_STORE_CURSORS} the store workload runs",
                    self.cursors
                ));
            }
            let entries = (topics as u64).saturating_mul(self.topic_entries);
            let flags = (cursors as u64).saturating_mul(self.topic_entries);
            if entries > MAX_STORE_ENTRIES || flags > MAX_STORE_ENTRIES {
                return refuse(format!(
                    "--topics {topics} x --topic-entries {} (x --cursors {}) is more than the \
                     {MAX_STORE_ENTRIES} entries (acked flags) the store workload runs",
                    self.topic_entries, self.cursors
                ));
            }
        } else {
            let data = self
                .entries
                .saturating_mul((self.payload_bytes as u64).saturating_add(ENTRY_FRAME_BYTES));
            if data > MAX_DATA_BYTES {
                return refuse(format!(
                    "--entries {} x (--payload-bytes {} + {ENTRY_FRAME_BYTES}) is {data} bytes, \
                     more than the {MAX_DATA_BYTES} (1 TiB) the workload may write",
                    self.entries, self.payload_bytes
                ));
            }
        }
        Ok(())
    }
}

/// Persistence mode on the command line.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Mode {
    /// Partitions plus a marker per flush (the default).
    Multi,
    /// One snapshot entry per flush.
    Single,
}

/// Which entries the workload acks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pattern {
    /// Every entry, in order: the mark-delete position sweeps forward.
    Sequential,
    /// Every other entry: the worst case for range sets (one range per ack).
    Alternating,
    /// Each entry with this probability, in random order.
    Random(f64),
    /// Evenly spaced entries, this fraction of them.
    Sparse(f64),
    /// Every entry but the holes, one every K entries on average: the gap from one hole to the
    /// next is uniform in `[K/2, K/2 + K]`. Acked in entry order.
    Holes(u64),
}

impl FromStr for Pattern {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let fraction = |v: &str| -> Result<f64, String> {
            let f: f64 = v.parse().map_err(|_| format!("`{v}` is not a number"))?;
            if f > 0.0 && f <= 1.0 {
                Ok(f)
            } else {
                Err(format!("the fraction must be in (0, 1], not {v}"))
            }
        };
        match s.split_once(':') {
            None if s == "sequential" => Ok(Self::Sequential),
            None if s == "alternating" => Ok(Self::Alternating),
            Some(("random", f)) => Ok(Self::Random(fraction(f)?)),
            Some(("sparse", f)) => Ok(Self::Sparse(fraction(f)?)),
            Some(("holes", k)) => match k.parse::<u64>() {
                Ok(k) if (2..=MAX_ENTRIES).contains(&k) => Ok(Self::Holes(k)),
                _ => Err(format!(
                    "holes:K needs a whole number K from 2 to {MAX_ENTRIES}, not `{k}`"
                )),
            },
            _ => Err(format!(
                "unknown pattern `{s}`: use alternating, sequential, random:FRACTION, sparse:FRACTION or holes:K"
            )),
        }
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sequential => f.write_str("sequential"),
            Self::Alternating => f.write_str("alternating"),
            Self::Random(x) => write!(f, "random:{x}"),
            Self::Sparse(x) => write!(f, "sparse:{x}"),
            Self::Holes(k) => write!(f, "holes:{k}"),
        }
    }
}

/// splitmix64: a small, well-known generator; enough to shuffle a workload reproducibly.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    #[expect(
        clippy::cast_precision_loss,
        reason = "a uniform fraction needs only 53 bits"
    )]
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The entry numbers (0-based, in append order) the pattern acks, in the order it acks them.
pub fn ack_order(pattern: Pattern, entries: u64, seed: u64) -> Vec<u64> {
    match pattern {
        Pattern::Sequential => (0..entries).collect(),
        Pattern::Alternating => (1..entries).step_by(2).collect(),
        Pattern::Sparse(f) => {
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "f in (0,1]"
            )]
            let step = ((1.0 / f).round() as u64).max(1);
            (step - 1..entries)
                .step_by(usize::try_from(step).unwrap_or(usize::MAX))
                .collect()
        }
        Pattern::Holes(k) => {
            let mut rng = SplitMix(seed);
            let mut acked = Vec::with_capacity(usize::try_from(entries).unwrap_or(0));
            // K is at most MAX_ENTRIES (the parser refuses more): no sum here overflows.
            let mut hole = k / 2 + rng.next() % (k + 1);
            for entry in 0..entries {
                if entry == hole {
                    hole += k / 2 + rng.next() % (k + 1);
                } else {
                    acked.push(entry);
                }
            }
            acked
        }
        Pattern::Random(f) => {
            let mut rng = SplitMix(seed);
            let mut chosen: Vec<u64> = (0..entries).filter(|_| rng.unit() < f).collect();
            for i in (1..chosen.len()).rev() {
                let j = usize::try_from(rng.next() % (i as u64 + 1)).unwrap_or(0);
                chosen.swap(i, j);
            }
            chosen
        }
    }
}

/// The size figures of an ack state, in bytes: the information limit and what Pulsar would
/// persist.
#[derive(Debug, Default, PartialEq)]
struct StateSizes {
    /// Sum over ledgers of span x H(acked fraction) / 8, the span being the ledger's entries
    /// above the mark-delete position.
    entropy: f64,
    /// Pulsar 4.2's default: `LongListMap` words per ledger (`ackset::pulsar`).
    longarray: u64,
    /// PIP-485: a run-optimized roaring bitmap per ledger, LZ4-compressed when smaller.
    roaring_lz4: u64,
}

/// Zero-order entropy in bytes of `span` flags of which `acked` are set.
#[expect(clippy::cast_precision_loss, reason = "an information measure")]
fn entropy_bytes(span: u64, acked: u64) -> f64 {
    if acked == 0 || acked >= span {
        return 0.0;
    }
    let p = acked as f64 / span as f64;
    span as f64 * -(p * p.log2() + (1.0 - p) * (1.0 - p).log2()) / 8.0
}

/// The sizes of the state `truth` describes: the entries of `positions` (in order) that are
/// acked, of which a cursor keeps those above its mark-delete position (the entry before the
/// first one not acked).
fn state_sizes(positions: &[Position], truth: &[bool]) -> StateSizes {
    let Some(first_unacked) = truth.iter().position(|a| !a) else {
        return StateSizes::default();
    };
    let mut sizes = StateSizes::default();
    let mut add_ledger = |ledger_id: u64, span: u64, acked: &RoaringBitmap| {
        sizes.entropy += entropy_bytes(span, acked.len());
        sizes.longarray += pulsar::long_list_map_bytes([(ledger_id, acked)]);
        sizes.roaring_lz4 += pulsar::roaring_bytes([(ledger_id, acked)], |bytes| {
            lz4_flex::block::compress(bytes).len()
        });
    };
    let mut current: Option<(u64, u64, RoaringBitmap)> = None;
    for (pos, &acked) in positions.iter().zip(truth).skip(first_unacked) {
        match &mut current {
            Some((ledger_id, span, bitmap)) if *ledger_id == pos.ledger_id => {
                *span += 1;
                if acked {
                    // Pulsar's per-ledger sets index entries as 32-bit values.
                    bitmap.insert(u32::try_from(pos.entry_id).unwrap_or(u32::MAX));
                }
            }
            _ => {
                if let Some((ledger_id, span, bitmap)) = current.take() {
                    add_ledger(ledger_id, span, &bitmap);
                }
                let mut bitmap = RoaringBitmap::new();
                if acked {
                    bitmap.insert(u32::try_from(pos.entry_id).unwrap_or(u32::MAX));
                }
                current = Some((pos.ledger_id, 1, bitmap));
            }
        }
    }
    if let Some((ledger_id, span, bitmap)) = current {
        add_ledger(ledger_id, span, &bitmap);
    }
    sizes
}

/// A checksum of a list of ranges: equal lists give equal fingerprints, and a lost, added or
/// moved range changes it (up to CRC collisions, 1 in 2^32).
fn fingerprint(ranges: &[(Position, Position)]) -> (usize, u32) {
    let mut crc = crc32fast::Hasher::new();
    for (first, last) in ranges {
        for v in [
            first.ledger_id,
            first.entry_id,
            last.ledger_id,
            last.entry_id,
        ] {
            crc.update(&v.to_le_bytes());
        }
    }
    (ranges.len(), crc.finalize())
}

fn bar(len: u64, what: &str, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    let style = ProgressStyle::with_template(
        "{msg:>10} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} ({per_sec}, eta {eta})",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message(what.to_string());
    bar
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[expect(clippy::cast_precision_loss, reason = "rates for display")]
fn per_sec(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

/// Reserves room for `n` more items, or says which argument asks for more memory than there is.
fn reserve<T>(v: &mut Vec<T>, n: u64, arg: &str) -> ackstore::Result<()> {
    usize::try_from(n)
        .ok()
        .and_then(|n| v.try_reserve_exact(n).ok())
        .ok_or_else(|| ackstore::Error::InvalidArgument {
            reason: format!("{arg} {n} needs more memory than this process can have"),
        })
}

/// `n` copies of `item`, or an error naming the argument when they do not fit in memory.
fn filled<T: Clone>(n: usize, item: T, arg: &str) -> ackstore::Result<Vec<T>> {
    let mut v = Vec::new();
    reserve(&mut v, n as u64, arg)?;
    v.resize(n, item);
    Ok(v)
}

/// The single-cursor workload's topic: a topic directory of its own, or (`--in-store`) topic
/// `perf` of a store on the same storage, with the store that holds it.
struct Topic {
    store: Option<Store>,
    ml: Arc<ManagedLedger>,
    /// With `--in-store`: how long `Store::open` took (its claim, the journal's scan and seal),
    /// before the topic's own open.
    store_open: Option<Duration>,
}

impl Topic {
    fn open(
        storage: Arc<dyn Storage>,
        config: &LedgerConfig,
        in_store: bool,
    ) -> ackstore::Result<Self> {
        if in_store {
            let started = Instant::now();
            let store = Store::open_with_storage(
                storage,
                StoreConfig {
                    ledger: config.clone(),
                    flusher_threads: 0,
                    ..StoreConfig::default()
                },
            )?;
            let store_open = started.elapsed();
            let ml = store.topic(CURSOR)?;
            Ok(Self {
                store: Some(store),
                ml,
                store_open: Some(store_open),
            })
        } else {
            let ml = ManagedLedger::open_with_storage(storage, config.clone())?;
            Ok(Self {
                store: None,
                ml: Arc::new(ml),
                store_open: None,
            })
        }
    }

    /// Bytes the store's journal has appended since it opened (`None` for a topic directory:
    /// its cursor's own statistics count what it writes).
    fn journal_bytes(&self) -> Option<u64> {
        self.journal_stats().map(|j| j.bytes_written)
    }

    /// Bytes of the journal records still live (the store's, or the topic's own).
    fn journal_live_bytes(&self) -> u64 {
        self.journal_stats().map_or(0, |j| j.live_bytes)
    }

    /// The counters of the journal the cursor persists through: the store's, or the one a
    /// topic alone hosts.
    fn journal_stats(&self) -> Option<ackstore::JournalStats> {
        match &self.store {
            Some(s) => Some(s.journal_stats()),
            None => self.ml.journal_stats(),
        }
    }

    /// Flushes `cursor`; returns the bytes the flush appended to the journal it persists
    /// through.
    fn flushed_bytes(&self, cursor: &ackstore::Cursor) -> ackstore::Result<u64> {
        let journal_before = self.journal_bytes();
        cursor.flush()?;
        Ok(match (journal_before, self.journal_bytes()) {
            (Some(before), Some(after)) => after - before,
            _ => 0,
        })
    }

    fn close(self) -> ackstore::Result<()> {
        self.ml.close()?;
        self.store.map_or(Ok(()), |s| s.close())
    }
}

/// Runs `ackstore perf`.
#[expect(clippy::too_many_lines, reason = "one linear workload, phase by phase")]
pub fn run(args: &PerfArgs) -> ackstore::Result<ExitCode> {
    args.check()?;
    if let Some(dir) = &args.dir {
        refuse_used(&args.storage, dir)?;
    }
    if let Some(sweep) = &args.sweep {
        return run_sweep(args, sweep);
    }
    if let Some(topics) = args.topics {
        return run_store(args, topics);
    }
    // The buffers come first, so a size that cannot be held fails before anything is created.
    let payload = filled(args.payload_bytes, 0xA5_u8, "--payload-bytes")?;
    let mut positions: Vec<Position> = Vec::new();
    reserve(&mut positions, args.entries, "--entries")?;
    let quiet = std::env::var_os("ACKSTORE_NO_PROGRESS").is_some();
    let temp;
    let dir = if let Some(dir) = &args.dir {
        dir.clone()
    } else if args.storage.storage == Backend::Rados {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        PathBuf::from(format!("ackstore-perf-{}-{nanos}", std::process::id()))
    } else {
        temp = tempfile::Builder::new()
            .prefix("ackstore-perf-")
            .tempdir()
            .map_err(|e| ackstore::Error::io("create temporary directory", "$TMPDIR", e))?;
        if args.keep {
            temp.keep()
        } else {
            temp.path().to_path_buf()
        }
    };
    let config = LedgerConfig {
        max_entries_per_ledger: args.entries_per_ledger,
        cursor: CursorConfig {
            persist_mode: match args.mode {
                Mode::Multi => PersistMode::MultiEntry,
                Mode::Single => PersistMode::SingleEntry,
            },
            lru_capacity_bytes: args.lru_bytes,
            ..CursorConfig::default()
        },
        ..LedgerConfig::default()
    };

    // Phase 1: append.
    let storage = args.storage.open(&dir, true)?;
    let location = storage.location();
    let topic = Topic::open(storage.clone(), &config, args.in_store)?;
    let ml = &topic.ml;
    let cursor = ml.open_cursor(CURSOR, CursorOptions::default())?;
    let progress = bar(args.entries, "append", quiet);
    let started = Instant::now();
    for i in 0..args.entries {
        positions.push(ml.append_with(
            &payload,
            AppendMeta {
                num_messages: args.batch_size.max(1),
                timestamp: i,
            },
        )?);
        if i % 4096 == 0 {
            progress.set_position(i);
        }
    }
    ml.sync()?;
    let append_time = started.elapsed();
    progress.finish_and_clear();

    // Phase 2: ack in the pattern.
    let order = ack_order(args.pattern, args.entries, args.seed);
    let mut truth = vec![false; positions.len()];
    let progress = bar(order.len() as u64, "ack", quiet);
    let started = Instant::now();
    for (n, &i) in order.iter().enumerate() {
        let idx = usize::try_from(i).unwrap_or(usize::MAX);
        cursor.ack(positions[idx])?;
        truth[idx] = true;
        if n % 4096 == 0 {
            progress.set_position(n as u64);
        }
    }
    let ack_time = started.elapsed();
    progress.finish_and_clear();
    let acked = order.len() as u64;
    drop(order);
    // The ranges are summarised and dropped at once, so the harness's own memory stays small
    // next to what it measures.
    let ranges = cursor.acked_ranges()?;
    let range_count = ranges.len() as u64;
    let pulsar_range_bytes = pulsar::message_range_bytes(ranges.iter().copied());
    let ranges_fingerprint = fingerprint(&ranges);
    drop(ranges);
    let sizes = state_sizes(&positions, &truth);

    // Phase 3: flush, then restart.
    let started = Instant::now();
    let flushed = topic.flushed_bytes(&cursor)?;
    let flush_time = started.elapsed();
    // A cursor that persists through a journal (a new cursor, alone or in a store): what its
    // one flush of the whole state appended there.
    let persisted_bytes = match cursor.stats()?.persist.cursor_ledger {
        Some(_) => cursor.stats()?.persist.persisted_bytes,
        None => flushed,
    };
    cursor.close()?;
    // A store's directory stays locked while any handle of it lives, a closed cursor's too.
    drop(cursor);
    topic.close()?;

    // The restart is timed in two parts: opening the topic (every ledger file, the topic
    // record; with `--in-store` the store's open too) and recovering the cursor (its marker,
    // then a first read; the partitions load lazily, and `acked_ranges` below loads them all).
    let started = Instant::now();
    let topic = Topic::open(args.storage.open(&dir, false)?, &config, args.in_store)?;
    let ml = &topic.ml;
    let topic_open = started.elapsed();
    let started = Instant::now();
    let cursor = ml.open_cursor(CURSOR, CursorOptions::default())?;
    let first = cursor.read_entries(1)?;
    let first_read = started.elapsed();
    let store_open = topic.store_open;
    let recovered_fingerprint = fingerprint(&cursor.acked_ranges()?);
    let full_load = started.elapsed();

    // Phase 4: every entry's acked flag against the truth.
    let progress = bar(positions.len() as u64, "verify", quiet);
    let mut mismatches = 0_u64;
    for (i, (&pos, &acked)) in positions.iter().zip(&truth).enumerate() {
        if cursor.is_acked(pos)? != acked {
            mismatches += 1;
        }
        if i % 4096 == 0 {
            progress.set_position(i as u64);
        }
    }
    progress.finish_and_clear();
    let first_unacked = truth.iter().position(|a| !a);
    let first_ok = match (first.first(), first_unacked) {
        (Some(e), Some(i)) => e.position == positions[i],
        (None, None) => true,
        _ => false,
    };
    let verified = mismatches == 0 && first_ok && recovered_fingerprint == ranges_fingerprint;

    // Phase 5: one more ack and the first flush after the restart (through a journal: the
    // changed partition and a delta marker), then a few more acks, flushed on their own (the
    // incremental cost).
    let mid = truth.len() / 2;
    let mut unacked = (mid..truth.len()).chain(0..mid).filter(|&i| !truth[i]);
    let first_write = unacked.next();
    let extra: Vec<usize> = unacked
        .take(usize::try_from(args.extra_acks).unwrap_or(usize::MAX))
        .collect();
    if let Some(i) = first_write {
        cursor.ack(positions[i])?;
    }
    let first_flush_bytes = topic.flushed_bytes(&cursor)?;
    for &i in &extra {
        cursor.ack(positions[i])?;
    }
    let incremental_flush_bytes = topic.flushed_bytes(&cursor)?;
    let resident_ack_bytes = cursor.stats()?.ackset.resident_bytes;

    // Phase 6 (`--batch-size` above 1): batch-index acks of the entries left unacknowledged.
    let flushed = |c: &ackstore::Cursor| topic.flushed_bytes(c);
    let live = || topic.journal_live_bytes();
    let batch = crate::perf_batch::run(
        &cursor,
        &positions,
        (args.batch_size, args.batch_pattern, args.seed),
        (&flushed, &live),
    )?;
    cursor.close()?;
    topic.close()?;

    let bytes_appended = args.entries.saturating_mul(args.payload_bytes as u64);
    #[expect(clippy::cast_precision_loss, reason = "ratios for display")]
    let report = serde_json::json!({
        "entries": args.entries,
        "payload_bytes": args.payload_bytes,
        "pattern": args.pattern.to_string(),
        "mode": format!("{:?}", args.mode).to_lowercase(),
        "in_store": args.in_store,
        "acked": acked,
        "ranges": range_count,
        "append_mb_per_s": per_sec(bytes_appended, append_time) / 1e6,
        "acks_per_s": per_sec(acked, ack_time),
        "flush_ms": millis(flush_time),
        "persisted_bytes": persisted_bytes,
        "bytes_per_range": if range_count == 0 { 0.0 } else { persisted_bytes as f64 / range_count as f64 },
        "pulsar_range_bytes": pulsar_range_bytes,
        "entropy_bytes": sizes.entropy,
        "bytes_vs_entropy": if sizes.entropy > 0.0 { persisted_bytes as f64 / sizes.entropy } else { 0.0 },
        "pulsar_longarray_bytes": sizes.longarray,
        "pulsar_roaring_lz4_bytes": sizes.roaring_lz4,
        "first_flush_after_restart_bytes": first_flush_bytes,
        "incremental_flush_bytes": incremental_flush_bytes,
        "topic_open_ms": millis(topic_open),
        "recover_first_read_ms": millis(first_read),
        "store_open_ms": store_open.map(millis),
        "open_to_first_answer_ms": millis(topic_open + first_read),
        "recover_full_ms": millis(full_load),
        "resident_ack_bytes": resident_ack_bytes,
        "lru_budget_bytes": args.lru_bytes,
        "peak_rss_bytes": report::peak_rss_bytes(),
        "mismatches": mismatches,
        "verified": verified,
        "dir": location,
        "batch_size": args.batch_size.max(1),
        "batch_pattern": format!("{:?}", args.batch_pattern).to_lowercase(),
        "batch_acks": batch.batch_acks,
        "partial_entries": batch.partial_entries,
        "batch_index_bytes": batch.batch_index_bytes,
        "batch_flush_bytes": batch.batch_flush_bytes,
        "pulsar_batch_index_bytes": batch.pulsar_batch_index_bytes,
        "batch_index_vs_pulsar": if batch.pulsar_batch_index_bytes == 0 { 0.0 } else { batch.batch_index_bytes as f64 / batch.pulsar_batch_index_bytes as f64 },
        "batch_ack_ms": batch.batch_ack_ms,
        "batch_resident_bytes": batch.batch_resident_bytes,
        "batch_evictions": batch.batch_evictions,
    });
    if args.json {
        println!("{report}");
    } else {
        print_summary(&report);
    }
    if args.keep || args.dir.is_some() {
        eprintln!("ackstore: data kept in {location}");
    } else if args.storage.storage == Backend::Rados {
        StorageArgs::remove_all(storage.as_ref())?;
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if verified {
        Ok(ExitCode::SUCCESS)
    } else {
        let mut failures = Vec::new();
        if mismatches > 0 {
            failures.push(format!(
                "{mismatches} entries have a different acked state after the restart"
            ));
        }
        if !first_ok {
            failures.push(
                "the first read after the restart is not the first unacknowledged entry".into(),
            );
        }
        if recovered_fingerprint != ranges_fingerprint {
            failures.push(
                "the acknowledged ranges read after the restart differ from those flushed".into(),
            );
        }
        eprintln!("ackstore: verification FAILED: {}", failures.join("; "));
        Ok(ExitCode::from(1))
    }
}

/// Refuses a `--dir` that already holds something: every workload counts on a fresh topic or
/// store (its truth is what this run appended and acknowledged), and a directory holding an
/// earlier run's entries and acknowledgements would read as a failed verification.
fn refuse_used(storage: &StorageArgs, dir: &std::path::Path) -> ackstore::Result<()> {
    let used = match storage.storage {
        Backend::Files => match std::fs::read_dir(dir) {
            Ok(mut entries) => entries.next().is_some(),
            // A symbolic link to nothing: every later step would follow it and fail to create
            // the directory where its name already is ("File exists").
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Ok(target) = std::fs::read_link(dir) {
                    return Err(ackstore::Error::InvalidArgument {
                        reason: format!(
                            "--dir {} is a symbolic link to {}, which does not exist: create \
                             that directory, or give another --dir",
                            dir.display(),
                            target.display()
                        ),
                    });
                }
                false
            }
            Err(e) => return Err(ackstore::Error::io("read directory", dir, e)),
        },
        Backend::Rados => !storage.open(dir, false)?.list()?.is_empty(),
    };
    if used {
        return Err(ackstore::Error::InvalidArgument {
            reason: format!(
                "--dir {} is not empty: perf writes a fresh topic or store and checks it against \
                 what it acknowledged; give an empty or new directory (or none, for a temporary one)",
                dir.display()
            ),
        });
    }
    Ok(())
}

fn print_summary(r: &serde_json::Value) {
    let num = |k: &str| r[k].as_f64().unwrap_or(0.0);
    let int = |k: &str| r[k].as_u64().unwrap_or(0);
    let rows = vec![
        vec![
            "entries".into(),
            format!(
                "{} x {} B ({})",
                int("entries"),
                int("payload_bytes"),
                r["pattern"].as_str().unwrap_or("")
            ),
        ],
        vec!["acked entries".into(), int("acked").to_string()],
        vec!["acked ranges".into(), int("ranges").to_string()],
        vec![
            "append".into(),
            format!("{:.1} MB/s", num("append_mb_per_s")),
        ],
        vec!["acks".into(), format!("{:.0} acks/s", num("acks_per_s"))],
        vec!["flush".into(), format!("{:.1} ms", num("flush_ms"))],
        vec![
            "persisted".into(),
            format!(
                "{} ({:.3} B/range)",
                report::bytes(int("persisted_bytes")),
                num("bytes_per_range")
            ),
        ],
        vec![
            "entropy of the ack flags".into(),
            format!(
                "{:.0} B (persisted / entropy {:.3})",
                num("entropy_bytes"),
                num("bytes_vs_entropy")
            ),
        ],
        vec![
            "Pulsar MessageRange size".into(),
            report::bytes(int("pulsar_range_bytes")),
        ],
        vec![
            "Pulsar LongListMap size".into(),
            report::bytes(int("pulsar_longarray_bytes")),
        ],
        vec![
            "Pulsar roaring+LZ4 size".into(),
            report::bytes(int("pulsar_roaring_lz4_bytes")),
        ],
        vec![
            "first flush after restart".into(),
            report::bytes(int("first_flush_after_restart_bytes")),
        ],
        vec![
            "incremental flush".into(),
            report::bytes(int("incremental_flush_bytes")),
        ],
        vec![
            "restart: open topic".into(),
            format!("{:.1} ms", num("topic_open_ms")),
        ],
        vec![
            "recover cursor: first read".into(),
            format!("{:.1} ms", num("recover_first_read_ms")),
        ],
        vec![
            "recover cursor: full load".into(),
            format!("{:.1} ms", num("recover_full_ms")),
        ],
        vec![
            "resident ack state".into(),
            format!(
                "{} (budget {})",
                report::bytes(int("resident_ack_bytes")),
                report::bytes(int("lru_budget_bytes"))
            ),
        ],
        vec!["peak RSS".into(), report::bytes(int("peak_rss_bytes"))],
        vec![
            "batch-index acks".into(),
            format!(
                "{} partial entries of {} messages: {} (Pulsar {}, ratio {:.3})",
                int("partial_entries"),
                int("batch_size"),
                report::bytes(int("batch_index_bytes")),
                report::bytes(int("pulsar_batch_index_bytes")),
                num("batch_index_vs_pulsar")
            ),
        ],
        vec![
            "verified after restart".into(),
            if r["verified"].as_bool() == Some(true) {
                "yes".into()
            } else {
                "NO".into()
            },
        ],
    ];
    print!("{}", report::table(&["figure", "value"], &rows));
}

/// `ackstore perf --topics T --cursors C [--baseline]`: see `perf_store.rs`.
#[allow(
    clippy::cast_precision_loss,
    reason = "figures for people, far below 2^52"
)]
fn run_store(args: &PerfArgs, topics: usize) -> ackstore::Result<ExitCode> {
    use crate::perf_store::{Shape, run};
    let shape = Shape {
        topics,
        cursors: args.cursors,
        entries: args.topic_entries,
        ticks: args.ticks,
        seed: args.seed,
        ack_budget: args.ack_budget(topics * args.cursors),
        restart_threads: args.restart_threads,
    };
    let temp = tempfile::Builder::new()
        .prefix("ackstore-perf-store-")
        .tempdir()
        .map_err(|e| ackstore::Error::io("create temporary directory", "$TMPDIR", e))?;
    let base = args
        .dir
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    let store_dir = base.join("store");
    let store = run(&store_dir, false, &shape)?;
    let baseline = if args.baseline {
        Some(run(&base.join("baseline"), true, &shape)?)
    } else {
        None
    };
    if args.keep {
        let _ = temp.keep();
        eprintln!("kept {}", base.display());
    }
    let verified = store.verified && baseline.as_ref().is_none_or(|b| b.verified);
    let mut out = store.json(&shape);
    if let Some(b) = &baseline {
        out["baseline"] = b.json(&shape);
    }
    if args.json {
        println!("{out}");
    } else {
        let rows = |name: &str, f: &crate::perf_store::Figures| {
            let (median, max) = f.tick_median_max();
            println!(
                "{name:>9}: flush tick median {median:.1} ms, max {max:.1} ms, {} syncs/tick; \
                 restart {:.0} ms ({:.0} us/cursor); threads {}; ack p99 during flush {:.0} us; \
                 verified {}",
                f.tick_syncs.iter().max().unwrap_or(&0),
                f.restart.as_secs_f64() * 1e3,
                f.restart.as_secs_f64() * 1e6 / (shape.topics * shape.cursors) as f64,
                f.threads,
                f.ack_p99_us,
                f.verified
            );
        };
        println!(
            "{} topics x {} cursors, {} entries each, {} ticks",
            shape.topics, shape.cursors, shape.entries, shape.ticks
        );
        rows("store", &store);
        if let Some(b) = &baseline {
            rows("baseline", b);
        }
    }
    Ok(if verified {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The figures a sweep follows, as paths into a run's JSON.
const SWEEP_FIGURES: &[(&str, &[&str])] = &[
    ("setup_ms", &["setup_ms"]),
    ("flush_tick_ms", &["flush_tick_ms", "median"]),
    ("tick_cpu_ms", &["tick_cpu_ms", "median"]),
    ("restart_ms", &["restart_ms"]),
    ("restart_cpu_ms", &["restart_cpu_ms"]),
    ("restart_open_ms", &["restart_phases_ms", "open"]),
    ("restart_topics_ms", &["restart_phases_ms", "topics"]),
    ("restart_cursors_ms", &["restart_phases_ms", "cursors"]),
    ("restart_open_cpu_ms", &["restart_phases_cpu_ms", "open"]),
    (
        "restart_topics_cpu_ms",
        &["restart_phases_cpu_ms", "topics"],
    ),
    (
        "restart_cursors_cpu_ms",
        &["restart_phases_cpu_ms", "cursors"],
    ),
    ("peak_rss_bytes", &["peak_rss_bytes"]),
    ("peak_rss_anon_bytes", &["peak_rss_anon_bytes"]),
    ("peak_rss_file_bytes", &["peak_rss_file_bytes"]),
    ("setup_rss_bytes", &["setup_rss_bytes"]),
    ("ack_p99_us_during_flush", &["ack_p99_us_during_flush"]),
];

/// The exponent k of `y ~ x^k` through two points; `None` where a value is not positive.
fn exponent(x: (f64, f64), y: (f64, f64)) -> Option<f64> {
    (x.0 > 0.0 && x.1 > x.0 && y.0 > 0.0 && y.1 > 0.0).then(|| (y.1 / y.0).ln() / (x.1 / x.0).ln())
}

/// `ackstore perf --sweep`: the store workload at every point, then each figure's growth.
fn run_sweep(args: &PerfArgs, Sweep(points): &Sweep) -> ackstore::Result<ExitCode> {
    use crate::perf_store::{Shape, run};
    let mut runs = Vec::new();
    let mut verified = true;
    for &total in points {
        let shape = Shape {
            topics: total / args.cursors,
            cursors: args.cursors,
            entries: args.topic_entries,
            ticks: args.ticks,
            seed: args.seed,
            ack_budget: args.ack_budget(total),
            restart_threads: args.restart_threads,
        };
        let temp = tempfile::Builder::new()
            .prefix("ackstore-perf-sweep-")
            .tempdir()
            .map_err(|e| ackstore::Error::io("create temporary directory", "$TMPDIR", e))?;
        let base = args.dir.as_ref().map_or_else(
            || temp.path().to_path_buf(),
            |d| d.join(format!("sweep-{total}")),
        );
        let figures = run(&base.join("store"), false, &shape)?;
        verified &= figures.verified;
        let json = figures.json(&shape);
        if !args.json {
            let (median, _) = figures.tick_median_max();
            println!(
                "{total:>7} cursors ({} x {}): set-up {:.0} ms, tick {median:.0} ms, restart {:.0} \
                 ms, peak RSS {} MB, verified {}",
                shape.topics,
                shape.cursors,
                figures.setup.as_secs_f64() * 1e3,
                figures.restart.as_secs_f64() * 1e3,
                figures.peak_rss >> 20,
                figures.verified
            );
        }
        runs.push((total, json));
    }
    let value = |json: &serde_json::Value, path: &[&str]| {
        path.iter()
            .fold(json, |v, key| &v[*key])
            .as_f64()
            .unwrap_or(0.0)
    };
    // Points are at most 1,000,000: exact in an f64.
    let count = |n: usize| f64::from(u32::try_from(n).unwrap_or(u32::MAX));
    let mut exponents = serde_json::Map::new();
    for (name, path) in SWEEP_FIGURES {
        let k = |a: &(usize, serde_json::Value), b: &(usize, serde_json::Value)| {
            exponent(
                (count(a.0), count(b.0)),
                (value(&a.1, path), value(&b.1, path)),
            )
        };
        let steps: Vec<Option<f64>> = runs.windows(2).map(|w| k(&w[0], &w[1])).collect();
        let overall = match (runs.first(), runs.last()) {
            (Some(a), Some(b)) => k(a, b),
            _ => None,
        };
        if !args.json {
            let show = |k: Option<f64>| k.map_or_else(|| "-".to_string(), |k| format!("{k:.2}"));
            println!(
                "{name:>24}: exponent {} (steps {})",
                show(overall),
                steps
                    .iter()
                    .map(|k| show(*k))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        exponents.insert(
            (*name).to_string(),
            serde_json::json!({ "overall": overall, "steps": steps }),
        );
    }
    if args.json {
        let out = serde_json::json!({
            "sweep": runs.into_iter().map(|(_, json)| json).collect::<Vec<_>>(),
            "exponents": exponents,
        });
        println!("{out}");
    }
    Ok(if verified {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_is_two_to_eight_increasing_cursor_counts() {
        assert_eq!(parse_sweep("10,30,100"), Ok(Sweep(vec![10, 30, 100])));
        assert_eq!(
            parse_sweep("100000,1000000"),
            Ok(Sweep(vec![100_000, 1_000_000]))
        );
        for bad in [
            "10",
            "0,10",
            "10,1000001",
            "10,100001,1000001",
            "30,10",
            "10,10",
            "x,10",
            "1,2,3,4,5,6,7,8,9",
        ] {
            assert!(parse_sweep(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn a_growth_exponent_is_that_of_a_power_law() {
        let k = exponent((1_000.0, 10_000.0), (5.0, 500.0)).unwrap();
        assert!((k - 2.0).abs() < 1e-9, "{k}");
        let k = exponent((1_000.0, 10_000.0), (5.0, 50.0)).unwrap();
        assert!((k - 1.0).abs() < 1e-9, "{k}");
        assert_eq!(exponent((1_000.0, 10_000.0), (0.0, 50.0)), None);
    }

    #[test]
    fn patterns_parse_and_pick_the_documented_entries() {
        assert_eq!("alternating".parse::<Pattern>(), Ok(Pattern::Alternating));
        assert!("random:0".parse::<Pattern>().is_err());
        assert!("bogus".parse::<Pattern>().is_err());
        assert_eq!(ack_order(Pattern::Alternating, 6, 0), vec![1, 3, 5]);
        assert_eq!(ack_order(Pattern::Sparse(0.25), 10, 0), vec![3, 7]);
        assert_eq!(ack_order(Pattern::Sequential, 3, 0), vec![0, 1, 2]);
        let mut r = ack_order(Pattern::Random(0.5), 10_000, 7);
        assert!((4_000..6_000).contains(&r.len()), "{}", r.len());
        r.sort_unstable();
        r.dedup();
        assert!(r.iter().all(|&i| i < 10_000));
    }

    #[test]
    fn holes_pattern_leaves_a_hole_every_k_entries_with_gaps_in_range() {
        assert_eq!("holes:100".parse::<Pattern>(), Ok(Pattern::Holes(100)));
        assert!("holes:1".parse::<Pattern>().is_err());
        assert!("holes:x".parse::<Pattern>().is_err());
        assert_eq!(Pattern::Holes(10).to_string(), "holes:10");
        let acked = ack_order(Pattern::Holes(10), 100_000, 3);
        let mut holes = Vec::new();
        let mut next = 0;
        for &e in &acked {
            holes.extend(next..e);
            next = e + 1;
        }
        assert!((9_000..11_000).contains(&holes.len()), "{}", holes.len());
        assert!((5..=15).contains(&holes[0]));
        assert!(holes.windows(2).all(|w| (5..=15).contains(&(w[1] - w[0]))));
    }

    #[test]
    fn state_sizes_count_each_ledger_above_the_mark_delete_position() {
        // Ledger 1: entries 0-3, the first two mark-deleted; ledger 2: entries 0-3.
        let positions: Vec<Position> = (0..4)
            .map(|e| Position::new(1, e))
            .chain((0..4).map(|e| Position::new(2, e)))
            .collect();
        let truth = [true, true, false, true, false, true, true, true];
        let sizes = state_sizes(&positions, &truth);
        // Ledger 1: span 2 (entries 2, 3), one acked: 2 bits. Ledger 2: 3 of 4: 4 H(3/4) bits.
        let expected = (2.0 + 4.0 * 0.811_278_124_459_132_8) / 8.0;
        assert!((sizes.entropy - expected).abs() < 1e-9, "{sizes:?}");
        let one = RoaringBitmap::from([3]);
        let three = RoaringBitmap::from([1, 2, 3]);
        assert_eq!(
            sizes.longarray,
            pulsar::long_list_map_bytes([(1, &one), (2, &three)])
        );
        assert!(sizes.roaring_lz4 > 0);
        assert_eq!(state_sizes(&positions, &[true; 8]), StateSizes::default());
    }
}

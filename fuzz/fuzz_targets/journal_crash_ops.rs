//! A store's cursor journal driven by an arbitrary sequence of cursor operations (whole-entry,
//! cumulative and batch-index acks on four cursors of two topics, cursor flushes, store ticks,
//! seeks, closes and deletions of cursors) in segments that roll over after a few hundred bytes,
//! with a power cut after an arbitrary storage operation ending each run of operations (keeping
//! an arbitrary prefix of every unsynced tail). After every cut the store is verified and opened
//! again and every cursor compared with a model of messages: nothing acknowledged that the
//! application did not acknowledge (or a seek that returned `Ok` cleared, or a cut lost and the
//! recovery after it did not show), nothing lost that a flush, tick, close or seek returning `Ok`
//! made durable, a cursor deleted with `Ok` gone. An operation the handle refuses (an argument
//! out of range, such as a cumulative ack behind mark-delete) changes nothing and the run goes
//! on; any other error ends the run with its cut. The last image may then get one byte flipped:
//! verify and open return errors or a state that acknowledges no more than that truth, never
//! panic.
//!
//! `ACKSTORE_FUZZ_TRACE=1` prints each run's operations, cut and sizes, and the operation the
//! cut stopped (to turn a failing input into a named test).

#![no_main]

#[path = "../../tests/support/crash.rs"]
mod crash;
// The storage tap the crash harness is built on; this target uses only part of it.
#[allow(dead_code)]
#[path = "../../tests/support/tap.rs"]
mod tap;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::{
    AppendMeta, Cursor, CursorConfig, CursorOptions, Error, InitialPosition, JournalConfig,
    LedgerConfig, ManagedLedger, MemStorage, Position, Storage, Store, StoreConfig,
};
use crash::torn_image;
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

/// Topics of the store, each with the cursors of [`CURSORS`].
const TOPICS: [&str; 2] = ["t0", "t1"];
/// Cursor names on every topic.
const CURSORS: [&str; 2] = ["c0", "c1"];
/// Entries appended to each topic before the operations (data ledgers of four entries).
const ENTRIES: usize = 12;

/// A message: (entry index in its topic, index in the entry's batch).
type Msg = (usize, u32);
type Msgs = BTreeSet<Msg>;

/// One cursor: (topic index, cursor index).
type Key = (usize, usize);

#[derive(Debug, Clone, Copy)]
enum Op {
    Ack(Key, usize),
    AckCumulative(Key, usize),
    AckBatchIndex(Key, usize, u32),
    Flush(Key),
    FlushAll,
    Seek(Key, usize),
    Close(Key),
    Delete(Key),
}

/// One run of operations ended by a power cut after `cut_after` storage operations that keeps
/// `torn` bytes of each file's unsynced tail.
struct Segment {
    ops: Vec<Op>,
    cut_after: u64,
    torn: usize,
}

/// What the fuzzer chose.
struct Plan {
    /// Messages per entry of each topic.
    sizes: [[u32; ENTRIES]; 2],
    segment_bytes: u64,
    lru: usize,
    segments: Vec<Segment>,
    /// A byte of the last image to flip: (file choice, offset choice, bit).
    flip: Option<(usize, usize, u8)>,
}

fn key(u: &mut Unstructured<'_>) -> Result<Key> {
    Ok((
        usize::from(u.int_in_range(0..=1u8)?),
        usize::from(u.int_in_range(0..=1u8)?),
    ))
}

fn entry(u: &mut Unstructured<'_>) -> Result<usize> {
    Ok(usize::from(u.int_in_range(0..=(ENTRIES as u8 - 1))?))
}

fn op(u: &mut Unstructured<'_>) -> Result<Op> {
    Ok(match u.int_in_range(0..=15u8)? {
        0..=3 => Op::Ack(key(u)?, entry(u)?),
        4 => Op::AckCumulative(key(u)?, entry(u)?),
        5..=7 => Op::AckBatchIndex(key(u)?, entry(u)?, u32::from(u.int_in_range(0..=3u8)?)),
        8 | 9 => Op::Flush(key(u)?),
        10 | 11 => Op::FlushAll,
        12 | 13 => Op::Seek(key(u)?, entry(u)?),
        14 => Op::Close(key(u)?),
        _ => Op::Delete(key(u)?),
    })
}

fn plan(u: &mut Unstructured<'_>) -> Result<Plan> {
    let mut sizes = [[1; ENTRIES]; 2];
    for topic in &mut sizes {
        for size in topic.iter_mut() {
            *size = u32::from(u.int_in_range(1..=4u8)?);
        }
    }
    let segment_bytes = [200, 600, 2_000, 1 << 20][usize::from(u.int_in_range(0..=3u8)?)];
    let lru = [0, 64, 1 << 20][usize::from(u.int_in_range(0..=2u8)?)];
    let mut segments = Vec::new();
    for _ in 0..u.int_in_range(1..=3u8)? {
        let mut ops = Vec::new();
        for _ in 0..u.int_in_range(0..=40u8)? {
            ops.push(op(u)?);
        }
        segments.push(Segment {
            ops,
            cut_after: u64::from(u.int_in_range(0..=400u16)?),
            torn: usize::from(u.int_in_range(0..=300u16)?),
        });
    }
    let flip = if u.arbitrary::<bool>()? {
        Some((
            usize::from(u.arbitrary::<u8>()?),
            usize::from(u.arbitrary::<u16>()?),
            u.int_in_range(0..=7u8)?,
        ))
    } else {
        None
    };
    Ok(Plan {
        sizes,
        segment_bytes,
        lru,
        segments,
        flip,
    })
}

fn store_config(plan: &Plan) -> StoreConfig {
    StoreConfig {
        ledger: LedgerConfig {
            max_entries_per_ledger: 4,
            cursor: CursorConfig {
                lru_capacity_bytes: plan.lru,
                ..CursorConfig::default()
            },
            ..LedgerConfig::default()
        },
        journal: JournalConfig {
            segment_bytes: plan.segment_bytes,
        },
        flusher_threads: 0,
        ..StoreConfig::default()
    }
}

/// What the model holds of one cursor.
#[derive(Debug, Clone, Default)]
struct CursorModel {
    /// What the application sees acknowledged now.
    state: Msgs,
    /// What a recovery may show: every ack made since the last seek that returned `Ok`, and
    /// what any seek since then acknowledged.
    upper: Msgs,
    /// What a recovery must show: the state at the last flush, tick, close or seek that
    /// returned `Ok`.
    floor: Msgs,
    /// A deletion returned `Ok` and the cursor was not opened since.
    gone: bool,
    /// A deletion started and the cursor was not opened since: a recovery may not list it.
    deleting: bool,
}

struct Model {
    sizes: [[u32; ENTRIES]; 2],
    cursors: BTreeMap<Key, CursorModel>,
}

impl Model {
    fn entry(&self, topic: usize, e: usize) -> impl Iterator<Item = Msg> {
        (0..self.sizes[topic][e]).map(move |i| (e, i))
    }

    /// Every message of the entries before `e`.
    fn below(&self, topic: usize, e: usize) -> Msgs {
        (0..e).flat_map(|e| self.entry(topic, e)).collect()
    }

    fn acked(&mut self, k: Key, msgs: Msgs) {
        let c = self.cursors.entry(k).or_default();
        c.state.extend(msgs.iter().copied());
        c.upper.extend(msgs);
    }

    fn flushed(&mut self, k: Key) {
        let c = self.cursors.entry(k).or_default();
        c.floor = c.state.clone();
    }
}

/// A store opened on a disk, its topics and the cursors opened so far.
struct Open {
    store: Store,
    topics: Vec<Arc<ManagedLedger>>,
    positions: Vec<Vec<Position>>,
    cursors: BTreeMap<Key, Cursor>,
}

fn earliest() -> CursorOptions {
    CursorOptions {
        initial_position: InitialPosition::Earliest,
        ..CursorOptions::default()
    }
}

impl Open {
    fn start(
        disk: &MemStorage,
        config: StoreConfig,
        positions: &[Vec<Position>],
    ) -> ackstore::Result<Self> {
        let store = Store::open_with_storage(Arc::new(disk.clone()), config)?;
        let topics = TOPICS
            .iter()
            .map(|t| store.topic(t))
            .collect::<ackstore::Result<Vec<_>>>()?;
        Ok(Self {
            store,
            topics,
            positions: positions.to_vec(),
            cursors: BTreeMap::new(),
        })
    }

    fn cursor(&mut self, k: Key, model: &mut Model) -> ackstore::Result<&Cursor> {
        if !self.cursors.contains_key(&k) {
            // An open that creates the cursor again may reach the disk even when it fails.
            let m = model.cursors.entry(k).or_default();
            m.gone = false;
            let c = self.topics[k.0].open_cursor(CURSORS[k.1], earliest())?;
            model.cursors.entry(k).or_default().deleting = false;
            self.cursors.insert(k, c);
        }
        Ok(&self.cursors[&k])
    }

    /// Runs `op`, keeping the model. A refused operation ([`refused`]) leaves the model as
    /// before it, and the run goes on; after any other error the model holds what `op` may
    /// have reached, and the run stops, as a process that lost its disk.
    fn run(&mut self, op: Op, m: &mut Model) -> ackstore::Result<()> {
        match op {
            Op::Ack(k, e) => {
                let p = self.positions[k.0][e];
                self.cursor(k, m)?.ack(p)?;
                let msgs = m.entry(k.0, e).collect();
                m.acked(k, msgs);
            }
            Op::AckCumulative(k, e) => {
                let p = self.positions[k.0][e];
                self.cursor(k, m)?.ack_cumulative(p)?;
                let msgs = m.below(k.0, e + 1);
                m.acked(k, msgs);
            }
            Op::AckBatchIndex(k, e, i) => {
                let p = self.positions[k.0][e];
                let size = m.sizes[k.0][e];
                let i = i % size;
                self.cursor(k, m)?.ack_batch_index(p, i, size)?;
                m.acked(k, BTreeSet::from([(e, i)]));
            }
            Op::Flush(k) => {
                self.cursor(k, m)?.flush()?;
                m.flushed(k);
            }
            Op::FlushAll => {
                self.store.flush_all()?;
                let open: Vec<Key> = self.cursors.keys().copied().collect();
                for k in open {
                    m.flushed(k);
                }
            }
            Op::Seek(k, e) => {
                let p = self.positions[k.0][e];
                let below = m.below(k.0, e);
                // Until the seek returns, a recovery shows the old state or the reset: what both
                // hold is what it must show, what either holds is what it may.
                let before = m.cursors.get(&k).cloned();
                let c = m.cursors.entry(k).or_default();
                c.upper.extend(below.iter().copied());
                c.floor.retain(|msg| below.contains(msg));
                let sought = self.cursor(k, m).and_then(|c| c.seek(p));
                if let Err(e) = sought {
                    // A refused seek changed nothing: the model is as before it.
                    if refused(&e) {
                        match before {
                            Some(before) => m.cursors.insert(k, before),
                            None => m.cursors.remove(&k),
                        };
                    }
                    return Err(e);
                }
                let c = m.cursors.entry(k).or_default();
                c.state.clone_from(&below);
                c.upper.clone_from(&below);
                c.floor = below;
            }
            Op::Close(k) => {
                if let Some(c) = self.cursors.remove(&k) {
                    c.close()?;
                    m.flushed(k);
                }
            }
            Op::Delete(k) => {
                if let Some(c) = self.cursors.remove(&k) {
                    drop(c);
                    m.cursors.entry(k).or_default().deleting = true;
                    self.topics[k.0].delete_cursor(CURSORS[k.1])?;
                    let c = m.cursors.entry(k).or_default();
                    c.state.clear();
                    c.upper.clear();
                    c.floor.clear();
                    c.gone = true;
                }
            }
        }
        Ok(())
    }
}

/// Whether `e` refuses an operation the caller made (an argument out of range, a limit the
/// configuration asks to refuse, a cursor or entry that is not there): nothing changed, and the
/// handle takes further operations. Any other error (I/O, a latch, a fence, damage) stops the
/// run.
fn refused(e: &Error) -> bool {
    matches!(
        e,
        Error::InvalidArgument { .. }
            | Error::NoSuchEntry(_)
            | Error::NoSuchCursor { .. }
            | Error::LimitExceeded { .. }
    )
}

/// What each cursor of the store on `image` shows (`None`: not listed), or the first error.
fn recovered(
    image: &MemStorage,
    config: StoreConfig,
    sizes: &[[u32; ENTRIES]; 2],
    positions: &[Vec<Position>],
) -> ackstore::Result<BTreeMap<Key, Option<Msgs>>> {
    let store = Store::open_with_storage(Arc::new(image.clone()), config)?;
    let mut out = BTreeMap::new();
    for (t, name) in TOPICS.iter().enumerate() {
        let topic = store.topic(name)?;
        let names = topic.cursor_names();
        for (c, cursor) in CURSORS.iter().enumerate() {
            if !names.iter().any(|n| n == cursor) {
                out.insert((t, c), None);
                continue;
            }
            let cur = topic.open_cursor(cursor, earliest())?;
            let mut msgs = Msgs::new();
            for (e, p) in positions[t].iter().enumerate() {
                for i in 0..sizes[t][e] {
                    if cur.is_batch_index_acked(*p, i)? {
                        msgs.insert((e, i));
                    }
                }
            }
            out.insert((t, c), Some(msgs));
        }
    }
    Ok(out)
}

/// Checks the store on `image` after a cut against the model, and returns what it recovered.
fn check(
    image: &MemStorage,
    config: &StoreConfig,
    m: &Model,
    positions: &[Vec<Position>],
    what: &str,
) -> BTreeMap<Key, Option<Msgs>> {
    let storage: Arc<dyn Storage> = Arc::new(image.clone());
    let report =
        ackstore::check::verify(&storage).unwrap_or_else(|e| panic!("{what}: verify: {e}"));
    assert!(
        report.is_sound(),
        "{what}: a power cut reads as damage: {report}"
    );
    let got = recovered(image, config.clone(), &m.sizes, positions)
        .unwrap_or_else(|e| panic!("{what}: the store after the cut: {e}"));
    let mut out = BTreeMap::new();
    for (k, shown) in got {
        let c = m.cursors.get(&k).cloned().unwrap_or_default();
        let Some(shown) = shown else {
            assert!(
                c.floor.is_empty() || c.deleting,
                "{what}: cursor {k:?} is gone, a flush that returned Ok made {:?} durable",
                c.floor
            );
            out.insert(k, None);
            continue;
        };
        assert!(
            !c.gone,
            "{what}: cursor {k:?} deleted with Ok is listed again"
        );
        if let Some(msg) = shown.difference(&c.upper).next() {
            panic!("{what}: cursor {k:?} shows message {msg:?} acknowledged, which it never was");
        }
        if let Some(msg) = c.floor.difference(&shown).next() {
            panic!("{what}: cursor {k:?} lost message {msg:?} a flush that returned Ok kept");
        }
        out.insert(k, Some(shown));
    }
    out
}

/// The last image with one byte flipped: errors or a state within what was ever acknowledged.
fn check_damaged(
    image: &MemStorage,
    config: &StoreConfig,
    m: &Model,
    positions: &[Vec<Position>],
    flip: (usize, usize, u8),
) {
    let mut files = 0;
    let _ = image.crash_image(|_, durable, _| {
        files += 1;
        durable.to_vec()
    });
    if files == 0 {
        return;
    }
    let mut n = 0;
    let damaged = image.crash_image(|_, durable, _| {
        let mut out = durable.to_vec();
        if n == flip.0 % files && !out.is_empty() {
            let at = flip.1 % out.len();
            out[at] ^= 1 << flip.2;
        }
        n += 1;
        out
    });
    let storage: Arc<dyn Storage> = Arc::new(damaged.clone());
    let _ = ackstore::check::verify(&storage);
    if let Ok(got) = recovered(&damaged, config.clone(), &m.sizes, positions) {
        for (k, shown) in got {
            // The truth is what the last recovery showed (`upper`): damage may lose acks, never
            // bring back one that a seek, a deletion or a cut took away.
            let upper = m
                .cursors
                .get(&k)
                .map(|c| c.upper.clone())
                .unwrap_or_default();
            if let Some(msg) = shown.unwrap_or_default().difference(&upper).next() {
                panic!("one flipped bit: cursor {k:?} shows message {msg:?}, more than the truth");
            }
        }
    }
}

/// Appends the entries of both topics with the power on; returns their positions.
fn prepare(disk: &MemStorage, plan: &Plan) -> Vec<Vec<Position>> {
    let store = Store::open_with_storage(Arc::new(disk.clone()), store_config(plan)).expect("open");
    let mut positions = Vec::new();
    for (t, name) in TOPICS.iter().enumerate() {
        let topic = store.topic(name).expect("topic");
        let ps = plan.sizes[t]
            .iter()
            .map(|&n| {
                topic.append_with(
                    b"m",
                    AppendMeta {
                        num_messages: n,
                        timestamp: 1,
                    },
                )
            })
            .collect::<ackstore::Result<Vec<_>>>()
            .expect("append");
        topic.sync().expect("sync");
        positions.push(ps);
    }
    store.close().expect("close");
    positions
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(plan) = plan(&mut u) else {
        return;
    };
    let config = store_config(&plan);
    let mut disk = MemStorage::new();
    let positions = prepare(&disk, &plan);
    let mut model = Model {
        sizes: plan.sizes,
        cursors: BTreeMap::new(),
    };
    for (i, segment) in plan.segments.iter().enumerate() {
        if std::env::var_os("ACKSTORE_FUZZ_TRACE").is_some() {
            eprintln!(
                "segment {i}: cut {} torn {} seg {} lru {} sizes {:?}",
                segment.cut_after, segment.torn, plan.segment_bytes, plan.lru, plan.sizes
            );
            for op in &segment.ops {
                eprintln!("  {op:?}");
            }
        }
        disk.fail_after(Some(segment.cut_after));
        if let Ok(mut open) = Open::start(&disk, config.clone(), &positions) {
            for op in &segment.ops {
                match open.run(*op, &mut model) {
                    Ok(()) => {}
                    // A refused operation changed nothing, and the caller may go on.
                    Err(e) if refused(&e) => {
                        if std::env::var_os("ACKSTORE_FUZZ_TRACE").is_some() {
                            eprintln!("  refused {op:?}: {e}");
                        }
                    }
                    // Anything else ends the process as a lost disk would: the cut below, then
                    // the reopen compared with the model.
                    Err(e) => {
                        if std::env::var_os("ACKSTORE_FUZZ_TRACE").is_some() {
                            eprintln!("  stopped at {op:?}: {e}");
                        }
                        break;
                    }
                }
            }
            // The process is gone with the power: whatever its handles try on the way out fails.
            disk.fail_after(Some(0));
            drop(open);
        }
        let image = torn_image(&disk, |_| segment.torn);
        let shown = check(&image, &config, &model, &positions, &format!("segment {i}"));
        // The next run starts from what the store recovered: that is the truth now, so what a
        // later recovery may show is bounded by it and the acks made after it (an ack the cut
        // lost and a later recovery brings back is more acked than the truth); what it must
        // show stays bounded by what was made durable.
        for (k, msgs) in shown {
            let c = model.cursors.entry(k).or_default();
            if msgs.is_none() {
                c.floor.clear();
            }
            c.state = msgs.unwrap_or_default();
            c.upper.clone_from(&c.state);
        }
        disk = image;
    }
    if let Some(flip) = plan.flip {
        check_damaged(&disk, &config, &model, &positions, flip);
    }
});

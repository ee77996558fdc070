//! The cursor-ledger tests' harness, which drives the persistence layer without a managed
//! ledger: an in-memory directory, a cursor opened the way a managed ledger opens one (recover,
//! or start empty), a plain model of the acked set, and a workload runner that stops at the first
//! error, as a process that lost its disk would.
//!
//! The `persist_ops` fuzz target compiles this file on its own: it imports nothing from the rest
//! of the test-support tree.

#![allow(dead_code, reason = "each test file uses a different subset")]

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::CursorConfig;
use ackstore::Position;
use ackstore::Result;
use ackstore::internals::ackset::RangeSetWrapper;
use ackstore::internals::cursor::open::CursorOpener;
use ackstore::internals::cursor::persist::{CursorPersister, PersistedState};
use ackstore::internals::cursor::recover::RecoveryReport;
use ackstore::internals::log::{EntryLog, LogConfig};
use ackstore::internals::meta::{FileMetaStore, MetaStore};
use ackstore::{MemStorage, Storage};

/// The cursor record every test uses.
pub const RECORD: &str = "cursor-1";

/// An opened directory: entry log and metadata store over one disk.
pub struct Env {
    pub disk: MemStorage,
    pub log: Arc<EntryLog>,
    pub meta: Arc<dyn MetaStore>,
}

impl Env {
    pub fn open(disk: &MemStorage) -> Result<Self> {
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        let log = Arc::new(EntryLog::open(Arc::clone(&storage), LogConfig::default())?);
        Ok(Self {
            disk: disk.clone(),
            log,
            meta: Arc::new(FileMetaStore::new(storage)),
        })
    }
}

/// A cursor's persistence as a managed ledger holds it.
pub struct Cursor {
    pub persister: CursorPersister,
    pub acks: RangeSetWrapper,
    pub state: PersistedState,
    pub report: Option<RecoveryReport>,
}

impl Cursor {
    pub fn flush(&mut self) -> Result<ackstore::internals::cursor::persist::FlushStats> {
        self.persister.flush(&self.state, &mut self.acks)
    }

    pub fn ack(&mut self, pos: Position) -> Result<()> {
        if pos > self.state.mark_delete {
            self.acks.add(pos)?;
        }
        Ok(())
    }

    pub fn ack_range(&mut self, ledger: u64, first: u64, last: u64) -> Result<()> {
        let md = self.state.mark_delete;
        let first = if md.ledger_id == ledger {
            first.max(md.entry_id.saturating_add(1))
        } else {
            first
        };
        if ledger >= md.ledger_id && first <= last {
            self.acks.add_range(ledger, first, last)?;
        }
        Ok(())
    }

    pub fn advance(&mut self, pos: Position) -> Result<()> {
        if pos > self.state.mark_delete {
            self.acks.remove_at_most(pos)?;
            self.state.mark_delete = pos;
        }
        Ok(())
    }
}

/// A new disk, its directory opened, and an empty cursor on it.
pub fn fresh(config: &CursorConfig) -> (MemStorage, Env, Cursor) {
    let disk = MemStorage::new();
    let env = Env::open(&disk).unwrap();
    let cursor = open_cursor(&env, config).unwrap();
    (disk, env, cursor)
}

/// Refreshes the record every third flush, so crash tests cut those writes too.
fn frequent_record_refresh(mut persister: CursorPersister) -> CursorPersister {
    persister.set_record_refresh_flushes(3);
    persister
}

/// Opens the cursor: recovered if its record exists, empty otherwise.
pub fn open_cursor(env: &Env, config: &CursorConfig) -> Result<Cursor> {
    let opened = CursorOpener::new(
        Arc::clone(&env.log),
        Arc::clone(&env.meta),
        RECORD,
        config.clone(),
    )
    .open()?;
    Ok(Cursor {
        persister: frequent_record_refresh(opened.persister),
        acks: opened.acks,
        state: opened.state,
        report: opened.report,
    })
}

/// A plain model of a cursor's acked set: everything up to `md`, plus `acks` above it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Model {
    pub md: Position,
    pub acks: BTreeSet<Position>,
}

impl Model {
    pub fn is_acked(&self, pos: Position) -> bool {
        pos <= self.md || self.acks.contains(&pos)
    }

    pub fn ack(&mut self, pos: Position) {
        if pos > self.md {
            self.acks.insert(pos);
        }
    }

    pub fn advance(&mut self, pos: Position) {
        if pos > self.md {
            self.md = pos;
            self.acks.retain(|p| *p > pos);
        }
    }
}

/// The cursor's whole acked set as a model (loads every partition).
pub fn model_of(cursor: &mut Cursor) -> Result<Model> {
    let mut acks = BTreeSet::new();
    for (from, to) in cursor.acks.ranges()? {
        assert_eq!(from.ledger_id, to.ledger_id, "a range spans ledgers");
        for e in from.entry_id..=to.entry_id {
            acks.insert(Position::new(from.ledger_id, e));
        }
    }
    let md = cursor.state.mark_delete;
    acks.retain(|p| *p > md);
    Ok(Model { md, acks })
}

/// Invariants 1 and 2: `recovered` holds no ack outside `upper` (everything ever acked) and
/// every ack of `lower` (the state of the last successful flush).
pub fn check_bounds(recovered: &Model, upper: &Model, lower: &Model, what: &str) {
    assert!(
        recovered.md <= upper.md,
        "{what}: mark-delete {} beyond the truth {}",
        recovered.md,
        upper.md
    );
    if let Some(p) = recovered.acks.iter().find(|p| !upper.is_acked(**p)) {
        panic!("{what}: recovered ack {p} was never acked");
    }
    assert!(
        recovered.md >= lower.md,
        "{what}: mark-delete {} behind the flushed {}",
        recovered.md,
        lower.md
    );
    if let Some(p) = lower.acks.iter().find(|p| !recovered.is_acked(**p)) {
        panic!("{what}: flushed ack {p} was lost");
    }
}

/// One step of a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Ack(Position),
    AckRange(u64, u64, u64),
    Advance(Position),
    Flush,
    Rollover,
    Reopen,
}

/// What a workload did before it stopped.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Everything ever acked (the truth).
    pub upper: Model,
    /// The state at the last successful flush.
    pub flushed: Model,
    /// Ops completed.
    pub completed: usize,
    /// The first error, if the workload stopped on one.
    pub error: Option<String>,
    /// Rollovers, index pages written and partitions stored by evictions, over every reopen.
    pub rollovers: u64,
    pub pages_written: u64,
    pub evictions_stored: u64,
}

impl Outcome {
    fn count(&mut self, cursor: &Cursor) {
        let s = cursor.persister.stats();
        self.rollovers += s.rollovers;
        self.pages_written += s.pages_written;
        self.evictions_stored += s.evictions_stored;
    }
}

/// Runs `ops` against a cursor on `disk`, stopping at the first error.
pub fn run(disk: &MemStorage, config: &CursorConfig, ops: &[Op]) -> Outcome {
    run_with(disk, config, ops, Model::default())
}

/// Runs `ops` against a cursor on `disk` whose acks so far are at most `upper`.
pub fn run_with(disk: &MemStorage, config: &CursorConfig, ops: &[Op], upper: Model) -> Outcome {
    let mut out = Outcome {
        upper,
        ..Outcome::default()
    };
    if let Err(e) = run_inner(disk, config, ops, &mut out) {
        out.error = Some(e.to_string());
    }
    out
}

fn run_inner(
    disk: &MemStorage,
    config: &CursorConfig,
    ops: &[Op],
    out: &mut Outcome,
) -> Result<()> {
    let mut start = 0;
    loop {
        let env = Env::open(disk)?;
        let mut cursor = open_cursor(&env, config)?;
        let mut current = model_of(&mut cursor)?;
        if start == 0 {
            out.flushed = current.clone();
        } else {
            check_bounds(&current, &out.upper, &out.flushed, "clean reopen");
        }
        let result = session(&mut cursor, &mut current, &ops[start..], out);
        out.count(&cursor);
        match result? {
            Some(done) => start += done,
            None => return Ok(()),
        }
    }
}

/// Runs `ops` on one open cursor; on `Reopen` returns how many ops it consumed.
fn session(
    cursor: &mut Cursor,
    current: &mut Model,
    ops: &[Op],
    out: &mut Outcome,
) -> Result<Option<usize>> {
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Ack(p) => {
                out.upper.ack(p);
                current.ack(p);
                cursor.ack(p)?;
            }
            Op::AckRange(l, f, t) => {
                for e in f..=t {
                    out.upper.ack(Position::new(l, e));
                    current.ack(Position::new(l, e));
                }
                cursor.ack_range(l, f, t)?;
            }
            Op::Advance(p) => {
                out.upper.advance(p);
                current.advance(p);
                cursor.advance(p)?;
            }
            Op::Flush | Op::Rollover => {
                if *op == Op::Rollover {
                    cursor.persister.request_rollover();
                }
                cursor.flush()?;
                out.flushed = current.clone();
            }
            Op::Reopen => {
                out.completed += 1;
                return Ok(Some(i + 1));
            }
        }
        out.completed += 1;
    }
    Ok(None)
}

/// Opens `image` after a power cut and checks the recovered cursor against `outcome`.
pub fn check_image(
    image: &MemStorage,
    config: &CursorConfig,
    outcome: &Outcome,
    what: &str,
) -> Model {
    let env = Env::open(image).unwrap_or_else(|e| panic!("{what}: log does not open: {e}"));
    let mut cursor =
        open_cursor(&env, config).unwrap_or_else(|e| panic!("{what}: cursor does not open: {e}"));
    let recovered =
        model_of(&mut cursor).unwrap_or_else(|e| panic!("{what}: acks do not load: {e}"));
    check_bounds(&recovered, &outcome.upper, &outcome.flushed, what);
    recovered
}

/// A small deterministic random generator (xorshift64*), so workloads are reproducible.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A workload over three data ledgers whose acks fall into several partitions each (entry ids
/// spread over chunks 0, 1 and 7), with cumulative acks, flushes, rollovers and reopens.
pub fn mixed_workload(seed: u64, len: usize) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let chunks = [0u64, 1, 7];
    let mut md = Position::new(1, 0);
    let mut ops = Vec::with_capacity(len);
    for i in 0..len {
        let pos = |rng: &mut Rng| {
            let ledger = 1 + rng.below(3);
            let chunk = chunks[rng.below(3) as usize];
            Position::new(ledger, (chunk << 16) + rng.below(40))
        };
        let op = match rng.below(20) {
            0..=9 => Op::Ack(pos(&mut rng)),
            10..=11 => {
                let p = pos(&mut rng);
                Op::AckRange(p.ledger_id, p.entry_id, p.entry_id + rng.below(30))
            }
            12 => {
                md = Position::new(md.ledger_id, md.entry_id + 1 + rng.below(5));
                Op::Advance(md)
            }
            13..=16 => Op::Flush,
            17 => Op::Rollover,
            _ if i % 7 == 0 => Op::Reopen,
            _ => Op::Flush,
        };
        ops.push(op);
    }
    ops.push(Op::Flush);
    ops
}

/// Settings that make every mechanism run often: a budget of about two partitions, a cursor
/// ledger that rolls over every dozen entries, and index pages of four rows. (Cursors opened
/// here also refresh their record every third flush.)
pub fn tight_config() -> CursorConfig {
    CursorConfig {
        lru_capacity_bytes: 600,
        cursor_ledger_max_entries: 12,
        index_page_rows: 4,
        ..CursorConfig::default()
    }
}

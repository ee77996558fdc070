//! Cursors: a subscription's position in a topic, its acknowledgements, reads and seeks.
//!
//! Owns: the [`Cursor`] handle and its semantics (see `docs/cursors.md`): individual and
//! cumulative acks, reads that skip acknowledged entries, rewind, seeks by position, message
//! index and timestamp, backlog, and writing the cursor record. The state itself and its
//! transitions live in `state.rs`; this file adds locking, the topic's layout, and I/O.
//!
//! A cursor reaches its topic through `TopicAccess`, which the managed ledger implements, so
//! this layer never imports the one above it.
//!
//! Persistence hooks in here: `CursorShared::write_record` writes the cursor's state (`flush`,
//! `close`), `Cursor::reset` writes the record of a seek or rewind before applying it,
//! `CursorState::from_record` rebuilds a reopened cursor (called by the ledger's registry), and
//! `new_ack_set` chooses the ack set's partition store.
//!
//! Must never: change the topic's ledgers, or write any record but its own.

mod config;
pub mod persist;
pub mod recover;
mod snapshot;
mod state;
pub mod store;
mod table;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLockReadGuard};

pub use config::CursorConfig;
pub use persist::{OverflowPolicy, PersistMode};
pub use state::{CursorState, NO_MARK_DELETE};

use crate::ackset::{AckSetStats, MemPartitionStore, RangeSetWrapper};
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::finder::{self, Layout};
use crate::log::{EntryLog, lock};
use crate::meta::MetaStore;
use crate::position::Position;

/// Where a new cursor starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InitialPosition {
    /// The first retained entry.
    #[default]
    Earliest,
    /// The next entry appended (with `inclusive`: the current last entry).
    Latest,
    /// The entry after this position (with `inclusive`: this position).
    At(Position),
}

/// How a cursor is opened. Used only when the cursor does not exist yet: an existing cursor
/// keeps its persisted state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CursorOptions {
    /// Where reading starts.
    pub initial_position: InitialPosition,
    /// Whether the entry at the initial position itself is read first (`Latest`, `At`).
    pub inclusive: bool,
}

/// A snapshot of a cursor's figures.
#[derive(Debug, Clone, Default)]
pub struct CursorStats {
    /// See [`Cursor::mark_delete_position`].
    pub mark_delete: Option<Position>,
    /// See [`Cursor::read_position`].
    pub read_position: Position,
    /// Unacknowledged entries after mark-delete.
    pub backlog: u64,
    /// Individually acknowledged entries after mark-delete.
    pub acked_entries: u64,
    /// See [`Cursor::epoch`].
    pub epoch: u64,
    /// Entries returned by reads since open.
    pub entries_read: u64,
    /// Acks (individual and cumulative) that changed the state, since open.
    pub acks: u64,
    /// Cursor records written since open (flushes, seeks, rewinds).
    pub flushes: u64,
    /// The ack set's memory and partition figures.
    pub ackset: AckSetStats,
}

/// What a cursor needs from its topic; implemented by the managed ledger.
pub(crate) trait TopicAccess: Send + Sync + fmt::Debug {
    /// The entry log, or [`Error::Closed`] once the topic is closed.
    fn log(&self) -> Result<Arc<EntryLog>>;
    /// The retained data ledgers. A cursor holds it while it computes a move and publishes
    /// the resulting mark-delete, so a trim never deletes what a cursor is about to read.
    fn layout(&self) -> RwLockReadGuard<'_, Layout>;
    /// Where cursor records live.
    fn meta(&self) -> &dyn MetaStore;
    /// Called once a cursor is closed, so the topic forgets it.
    fn release(&self, cursor: &CursorShared);
}

/// Name of the metadata record of cursor `id`. Only numeric ids name records: a cursor's own
/// name is client data and never becomes a file name.
#[must_use]
pub fn record_name(id: u64) -> String {
    format!("cursor-{id}")
}

/// A new, empty ack set under the configured budget.
pub(crate) fn new_ack_set(config: &CursorConfig) -> RangeSetWrapper {
    RangeSetWrapper::new(
        Box::new(MemPartitionStore::new()),
        config.lru_capacity_bytes,
    )
}

/// A move of the read position on request.
#[derive(Debug, Clone, Copy)]
enum Move {
    /// Back to the first entry after mark-delete.
    Rewind,
    /// A reset whose first read is this entry (`None`: the next entry appended).
    To(Option<Position>),
}

#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    entries_read: u64,
    acks: u64,
    flushes: u64,
}

/// The mutable part of a cursor, behind its lock.
struct Core {
    state: CursorState,
    record_version: u64,
    counters: Counters,
}

/// One cursor, shared by every handle to it and by the topic's registry.
pub(crate) struct CursorShared {
    id: u64,
    name: String,
    topic: Arc<dyn TopicAccess>,
    core: Mutex<Core>,
    /// Mark-delete as of the last completed operation, for trimming.
    published_mark: Mutex<Option<Position>>,
    closed: AtomicBool,
}

impl fmt::Debug for CursorShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cursor")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl CursorShared {
    /// A cursor whose record `cursor-{id}` holds version `record_version` of `state`.
    pub(crate) fn new(
        id: u64,
        name: String,
        topic: Arc<dyn TopicAccess>,
        state: CursorState,
        record_version: u64,
    ) -> Arc<Self> {
        let mark = state.mark_delete;
        Arc::new(Self {
            id,
            name,
            topic,
            core: Mutex::new(Core {
                state,
                record_version,
                counters: Counters::default(),
            }),
            published_mark: Mutex::new(mark),
            closed: AtomicBool::new(false),
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Mark-delete as of the last completed operation.
    pub(crate) fn published_mark(&self) -> Option<Position> {
        *lock(&self.published_mark)
    }

    /// Refuses every later operation on every handle.
    pub(crate) fn mark_closed(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    fn core(&self) -> Result<MutexGuard<'_, Core>> {
        let core = lock(&self.core);
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        Ok(core)
    }

    /// Writes the cursor record (mark-delete, epoch, properties, cursor ledger) by
    /// compare-and-set on the version this handle last wrote.
    fn write_record(&self, core: &mut Core) -> Result<()> {
        let record = core.state.to_record(&self.name);
        core.record_version = self.topic.meta().put(
            &record_name(self.id),
            Some(core.record_version),
            &record.encode(),
        )?;
        core.counters.flushes += 1;
        Ok(())
    }

    /// Flushes and refuses every later operation. Idempotent.
    pub(crate) fn close(&self) -> Result<()> {
        let mut core = lock(&self.core);
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let flushed = self.write_record(&mut core);
        drop(core);
        self.topic.release(self);
        flushed
    }
}

/// A handle to one cursor (subscription) of a topic.
///
/// Every handle to the same cursor name shares one state; handles are `Send + Sync` and every
/// method takes `&self`, so they can be used from any thread. Semantics: `docs/cursors.md`.
#[derive(Debug, Clone)]
pub struct Cursor {
    shared: Arc<CursorShared>,
}

impl Cursor {
    pub(crate) fn from_shared(shared: Arc<CursorShared>) -> Self {
        Self { shared }
    }

    /// Runs `f` on the state with the topic's layout held, then publishes mark-delete.
    fn with_state<R>(&self, f: impl FnOnce(&mut Core, &Layout) -> Result<R>) -> Result<R> {
        let mut core = self.shared.core()?;
        let layout = self.shared.topic.layout();
        let result = f(&mut core, &layout);
        *lock(&self.shared.published_mark) = core.state.mark_delete;
        result
    }

    /// Moves the cursor as `plan` says, on request: the epoch increases, and the cursor record
    /// (new mark-delete, new epoch) is written before the state changes, so a reset survives a
    /// crash and the epoch never goes backwards. Nothing changes if the write fails.
    ///
    /// The record is written without holding the topic's layout (appends go on meanwhile); the
    /// published mark-delete is lowered to the smaller of the old and the new one first, so a
    /// concurrent trim cannot delete the target.
    fn reset(&self, plan: impl FnOnce(&Layout) -> Result<Move>) -> Result<()> {
        let shared = &self.shared;
        let mut core = shared.core()?;
        let (planned, record) = {
            let layout = shared.topic.layout();
            let planned = plan(&layout)?;
            let mut record = core.state.to_record(&shared.name);
            record.epoch += 1;
            if let Move::To(target) = planned {
                let mark = state::mark_before(&layout, target);
                record.mark_delete = mark.unwrap_or(NO_MARK_DELETE);
                *lock(&shared.published_mark) = core.state.mark_delete.min(mark);
            }
            (planned, record)
        };
        let written = shared.topic.meta().put(
            &record_name(shared.id),
            Some(core.record_version),
            &record.encode(),
        );
        let layout = shared.topic.layout();
        match written {
            Ok(version) => {
                core.record_version = version;
                core.counters.flushes += 1;
                core.state.epoch += 1;
                match planned {
                    Move::To(target) => core.state.reset_to(&layout, target),
                    Move::Rewind => core.state.rewind(&layout),
                }
            }
            Err(e) => {
                *lock(&shared.published_mark) = core.state.mark_delete;
                return Err(e);
            }
        }
        *lock(&shared.published_mark) = core.state.mark_delete;
        Ok(())
    }

    /// The cursor's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Every entry at or before this position is acknowledged; `None` when no retained entry
    /// is (the cursor is before the first entry, what Pulsar writes `L:-1`).
    pub fn mark_delete_position(&self) -> Result<Option<Position>> {
        Ok(self.shared.core()?.state.mark_delete)
    }

    /// Where the next read starts: the next retained entry at or after the read position, or,
    /// when there is none yet, the end of the topic (`L:n` one past the last entry, `0:0` on a
    /// topic that never had an entry). Acknowledged entries there are skipped by the read.
    pub fn read_position(&self) -> Result<Position> {
        self.with_state(|core, layout| Ok(core.state.read_position(layout)))
    }

    /// Acknowledges one entry. When it fills the first hole after mark-delete, mark-delete
    /// moves over every contiguous acknowledged entry, across ledgers. Returns whether anything
    /// changed (`false` for an entry already acknowledged).
    ///
    /// # Errors
    /// [`Error::NoSuchEntry`] for a position after mark-delete that is not a retained entry;
    /// nothing changes.
    pub fn ack(&self, pos: Position) -> Result<bool> {
        self.with_state(|core, layout| {
            let changed = core.state.ack(layout, pos)?;
            core.counters.acks += u64::from(changed);
            Ok(changed)
        })
    }

    /// Acknowledges every entry up to and including `pos`; mark-delete moves to `pos` (and
    /// past any acknowledged entries that follow it). Repeating it changes nothing.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `pos` is behind mark-delete; [`Error::NoSuchEntry`]
    /// when `pos` is not a retained entry (beyond the last entry, for instance). Nothing
    /// changes on an error.
    pub fn ack_cumulative(&self, pos: Position) -> Result<bool> {
        self.with_state(|core, layout| {
            let changed = core.state.ack_cumulative(layout, pos)?;
            core.counters.acks += u64::from(changed);
            Ok(changed)
        })
    }

    /// Whether `pos` is acknowledged (at or before mark-delete, or individually).
    pub fn is_acked(&self, pos: Position) -> Result<bool> {
        self.shared.core()?.state.is_acked(pos)
    }

    /// Reads up to `max` entries from the read position on, skipping acknowledged ones, and
    /// moves the read position past them. An empty result means the cursor has read
    /// everything appended so far.
    pub fn read_entries(&self, max: usize) -> Result<Vec<Entry>> {
        Ok(self.read_entries_at_epoch(max)?.1)
    }

    /// Like [`Self::read_entries`], with the epoch the entries were read under (no seek can
    /// come in between), which is what a consumer filter tags them with.
    pub fn read_entries_at_epoch(&self, max: usize) -> Result<(u64, Vec<Entry>)> {
        let mut core = self.shared.core()?;
        let positions = {
            let layout = self.shared.topic.layout();
            let planned = core.state.plan_read(&layout, max);
            *lock(&self.shared.published_mark) = core.state.mark_delete;
            planned?
        };
        let log = self.shared.topic.log()?;
        let entries = positions
            .into_iter()
            .map(|p| {
                log.read(p.ledger_id, p.entry_id)
                    .map(|e| Entry::from_log(p.ledger_id, e))
            })
            .collect::<Result<Vec<_>>>()?;
        core.counters.entries_read += entries.len() as u64;
        Ok((core.state.epoch, entries))
    }

    /// Reads again from the first entry after mark-delete (acknowledged entries are still
    /// skipped). Increases the epoch (it is a redelivery the consumer asked for) and writes the
    /// cursor record before returning.
    pub fn rewind(&self) -> Result<()> {
        self.reset(|_| Ok(Move::Rewind))
    }

    /// Resets the cursor so that the first retained entry at or after `pos` is read next:
    /// every entry before it counts as acknowledged, every entry from it on as not
    /// (individual acks are cleared). A position before the first retained entry means the
    /// earliest entry; past the last entry, the next entry appended. Increases the epoch and
    /// writes the cursor record before returning, so the reset survives a crash.
    pub fn seek(&self, pos: Position) -> Result<()> {
        self.reset(|layout| Ok(Move::To(layout.at_or_after(pos))))
    }

    /// Resets the cursor to the entry holding message `index` (PIP-101). With retained indexes
    /// `[A, B)`: `index` in it reads that entry next; `index < A` reads the earliest entry;
    /// `index >= B` reads the next entry appended. Otherwise as [`Self::seek`].
    pub fn seek_by_index(&self, index: u64) -> Result<()> {
        let log = self.shared.topic.log()?;
        self.reset(|layout| Ok(Move::To(finder::find_by_index(&log, layout, index)?)))
    }

    /// Resets the cursor so that the entry after the last one with a timestamp at most
    /// `timestamp` is read next (the earliest entry when none qualifies, the next entry
    /// appended when all do). Otherwise as [`Self::seek`].
    pub fn seek_by_timestamp(&self, timestamp: u64) -> Result<()> {
        let log = self.shared.topic.log()?;
        self.reset(|layout| {
            Ok(Move::To(
                match finder::find_by_timestamp(&log, layout, timestamp)? {
                    Some(last_older) => layout.after(last_older),
                    None => layout.first_entry(),
                },
            ))
        })
    }

    /// Exact number of retained entries after mark-delete that are not acknowledged.
    /// O(ledgers), whatever the number of entries or holes.
    pub fn backlog(&self) -> Result<u64> {
        self.with_state(|core, layout| Ok(core.state.backlog(layout)))
    }

    /// The individually acknowledged entries after mark-delete, as maximal inclusive ranges
    /// that never span ledgers, ascending.
    pub fn acked_ranges(&self) -> Result<Vec<(Position, Position)>> {
        self.shared.core()?.state.acks.ranges()
    }

    /// Increases on every seek, `seek_by_index`, `seek_by_timestamp` and `rewind`; never on
    /// reopen. Consumers tag what they receive with it, so a server-side reset is noticed.
    pub fn epoch(&self) -> Result<u64> {
        Ok(self.shared.core()?.state.epoch)
    }

    /// Sets an application property stored with the mark-delete position.
    pub fn set_property(&self, key: &str, value: i64) -> Result<()> {
        self.shared
            .core()?
            .state
            .properties
            .insert(key.to_owned(), value);
        Ok(())
    }

    /// The application properties.
    pub fn properties(&self) -> Result<BTreeMap<String, i64>> {
        Ok(self.shared.core()?.state.properties.clone())
    }

    /// Writes the cursor record and returns once it is durable.
    ///
    /// What survives a crash after `flush` returns: mark-delete, the epoch and the properties
    /// (the cursor record, written by compare-and-set). Individual acks above mark-delete are
    /// kept in memory only: after a reopen those entries are delivered again.
    ///
    /// # Errors
    /// [`Error::Fenced`] when another handle has written the record since this one last did.
    pub fn flush(&self) -> Result<()> {
        let mut core = self.shared.core()?;
        self.shared.write_record(&mut core)
    }

    /// Flushes, then closes every handle to this cursor; later calls fail with
    /// [`Error::Closed`]. Opening the cursor again by name restores what `flush` keeps.
    pub fn close(&self) -> Result<()> {
        self.shared.close()
    }

    /// Current figures.
    pub fn stats(&self) -> Result<CursorStats> {
        self.with_state(|core, layout| {
            let state = &core.state;
            Ok(CursorStats {
                mark_delete: state.mark_delete,
                read_position: state.read_position(layout),
                backlog: state.backlog(layout),
                acked_entries: state.acks.len(),
                epoch: state.epoch,
                entries_read: core.counters.entries_read,
                acks: core.counters.acks,
                flushes: core.counters.flushes,
                ackset: state.acks.stats(),
            })
        })
    }
}

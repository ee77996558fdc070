//! Cursors: a subscription's position in a topic, its acknowledgements, reads and seeks.
//!
//! Owns: the [`Cursor`] handle and its semantics (see `docs/cursors.md`): individual and
//! cumulative acks, reads that skip acknowledged entries, rewind, seeks by position, message
//! index and timestamp, backlog, and flushing (the journal's flusher pool flushes in the
//! background; its errors wait for the cursor's next `flush` or `close`). The state itself and
//! its transitions live in `state.rs`; this file adds locking, the topic's layout, and I/O.
//!
//! A cursor reaches its topic through `TopicAccess`, which the managed ledger implements, so
//! this layer never imports the one above it.
//!
//! Persistence: every durable cursor persists through the journal its topic's host keeps (a
//! `JournalCursor`, `journal.rs`, `docs/persistence.md`); its ack set keeps its evicted
//! partitions there. `flush` and `close` stage the whole ack state into a journal tick; a seek
//! commits a marker (or snapshot) with no acks before it changes anything, so the journal's
//! last committed state never holds acks a seek cleared; a rewind commits every ack with the
//! new epoch. A cursor read from a cursor ledger (recovered by [`recover::recover`] through
//! [`open::CursorOpener`]) is a journal cursor with a pending import: it loads from its ledger
//! until its first write moves it into the journal and retires the ledger (`import.rs`).
//!
//! Must never: change the topic's ledgers, write any record but its own, or hold a handle on
//! the entry log once closed (a closed topic must release its directory).

pub mod batch;
pub mod batch_store;
mod config;
pub(crate) mod import;
pub(crate) mod journal;
pub mod open;
mod record;
pub mod recover;
pub mod snapshot;
mod state;
mod stats;
pub mod store;
pub mod verify;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub use config::CursorConfig;
pub use config::{OverflowPolicy, PersistMode};
pub(crate) use record::Fence;
pub use recover::RecoverySource;
pub use state::{CursorState, NO_MARK_DELETE};
pub use stats::PersistStats;

use crate::ackset::{AckSetStats, MemPartitionStore, RangeSetWrapper, Releasable, Release};
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::finder::{self, Layout, ReadableLayout};
use crate::format::cursor::PersistedState;
use crate::journal::{Journal, Tick};
use crate::log::EntryLog;
use crate::position::Position;
use crate::sync::lock;
use batch::BatchAcks;
use journal::JournalCursor;

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

/// How a non-durable cursor (a reader) is opened, besides where it starts; see
/// `ManagedLedger::open_non_durable_cursor`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NonDurableOptions {
    /// Whether the entry at the start position itself is read first (`Latest`, `At`), as in
    /// [`CursorOptions::inclusive`].
    pub inclusive: bool,
    /// A label for logs and `Debug` output (Pulsar names a reader's subscription
    /// `reader-<id>`); it names nothing on disk and need not be unique.
    pub name: String,
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
    /// Writes of the cursor's state since open: flushes that had something to write
    /// (explicit, background and on close), seeks and rewinds.
    pub flushes: u64,
    /// The ack set's memory and partition figures (`resident_bytes`, `budget_bytes`, ...).
    pub ackset: AckSetStats,
    /// The persistence figures: `cursor_ledger` (while the cursor is read from one),
    /// `persisted_bytes` (size of the committed state), `entries_written`, `markers`,
    /// `snapshots`, `flushes`, `overflows`, ...
    pub persist: PersistStats,
    /// Which persisted state the cursor resumed from when it was reopened; `None` for a cursor
    /// that did not exist before this open.
    pub recovery_source: Option<RecoverySource>,
    /// The error of a background flush that the next `flush` or `close` will return.
    pub background_error: Option<String>,
    /// Entries with some, not all, messages acknowledged at batch-index level.
    pub partial_entries: u64,
    /// Memory the resident ones take (estimated: serialized bitmaps plus a fixed overhead per
    /// entry), charged to the ack set's budget (`ackset.charged_bytes`).
    pub batch_index_bytes: u64,
    /// Partitions whose partial entries are evicted from memory (cold: kept as batch records
    /// of the journal, or batch-index entries of the cursor ledger a cursor is read from,
    /// loaded on first use).
    pub batch_cold_partitions: u64,
    /// Evictions of partial entries' partitions since open.
    pub batch_evictions: u64,
    /// Loads of cold partial entries' partitions since open.
    pub batch_loads: u64,
}

/// What a cursor needs from its topic; implemented by the managed ledger.
pub(crate) trait TopicAccess: Send + Sync + fmt::Debug {
    /// The entry log, or [`Error::Closed`] once the topic is closed.
    fn log(&self) -> Result<Arc<EntryLog>>;
    /// The retained data ledgers. A cursor holds it while it computes a move and publishes
    /// the resulting mark-delete, so a trim never deletes what a cursor is about to read.
    fn layout(&self) -> ReadableLayout<'_>;
    /// [`Error::Fenced`] once a newer owner has opened the topic's directory (one metadata
    /// read). Checked before every write of cursor state, so a handle that lost ownership
    /// writes nothing more, even to a cursor the new owner has not opened yet.
    fn check_owner(&self) -> Result<()>;
    /// Called once a cursor is closed, so the topic forgets it.
    fn release(&self, cursor: &CursorShared);
    /// How many changes that may let a waiting read return the topic has seen (entries made
    /// readable, read positions moved, cursors closed or deleted, the topic closed); read
    /// before a read that may wait.
    fn changes_seen(&self) -> u64;
    /// Blocks until the count of [`Self::changes_seen`] differs from `seen` or `deadline`
    /// passes (never when `None`: a timeout too large for an instant), whichever is first;
    /// returns the count. Woken by a condvar, never by polling.
    fn wait_for_change(&self, seen: u64, deadline: Option<std::time::Instant>) -> u64;
    /// Counts a change and wakes every waiting read (see [`Self::changes_seen`]).
    fn wake_readers(&self);
}

/// Name of the metadata record of cursor `id`. Only numeric ids name records: a cursor's own
/// name is client data and never becomes a file name.
#[must_use]
pub fn record_name(id: u64) -> String {
    crate::format::numbered_name(RECORD_PREFIX, id, 0, "")
}

/// What every cursor record's name starts with ([`record_name`]).
pub const RECORD_PREFIX: &str = "cursor-";

/// Whether `name` has the form of a cursor record's name: [`RECORD_PREFIX`] and digits (a
/// leading zero included, which no id's [`record_name`] has).
pub(crate) fn is_record_like(name: &str) -> bool {
    name.strip_prefix(RECORD_PREFIX)
        .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
}

/// The cursor id whose [`record_name`] is `name` (no leading zero), if any.
pub(crate) fn record_id(name: &str) -> Option<u64> {
    let id = name.strip_prefix(RECORD_PREFIX)?.parse().ok()?;
    (record_name(id) == name).then_some(id)
}

/// An empty ack set kept in memory: the placeholder of a cursor without persistence (being
/// created, or closed).
pub(crate) fn detached_ack_set() -> RangeSetWrapper {
    RangeSetWrapper::new(Box::new(MemPartitionStore::new()), usize::MAX)
}

/// The partial entries a seek commits: none, or for a seek into a batch the messages of that
/// entry before the target.
fn seek_prefix(planned: Move) -> BatchAcks {
    let mut prefix = BatchAcks::default();
    if let Move::ToMessage {
        entry,
        batch_size,
        skip,
    } = planned
    {
        // A prefix has no store: it is never cold, so this does no I/O and cannot fail.
        let _ = prefix.set_prefix(entry, batch_size, skip);
    }
    prefix
}

/// Commits a durable cursor's tick (`None` for a non-durable cursor, which writes nothing).
fn commit_tick(tick: Option<Tick<'_>>) -> Result<()> {
    tick.map_or(Ok(()), |t| t.commit().map(drop))
}

/// How a cursor persists, handed to [`CursorShared::new`].
pub(crate) struct Persistence {
    /// Writes the cursor's state; its partition store backs the state's ack set (unless an
    /// import is pending: then the ack set loads from the cursor ledger until the import).
    pub persister: JournalCursor,
    /// What recovery resumed from (`None` for a new cursor).
    pub recovery_source: Option<RecoverySource>,
    /// Whether the state differs from what is persisted (recovery dropped acks of entries
    /// that no longer exist).
    pub dirty: bool,
    /// For a cursor read from a cursor ledger: its import into the journal at its first write
    /// (`import.rs`).
    pub import: Option<import::Pending>,
    /// For a journal cursor whose record still names a cursor ledger (an import a power cut
    /// interrupted after the journal's commit): its first write retires that ledger.
    pub retiring: Option<import::Retirement>,
}

/// A move of the read position on request.
#[derive(Debug, Clone, Copy)]
enum Move {
    /// Back to the first entry after mark-delete.
    Rewind,
    /// A reset whose first read is this entry (`None`: the next entry appended).
    To(Option<Position>),
    /// A reset to message `skip` of the entry at `entry` (of `batch_size` messages): as
    /// `To(Some(entry))`, with the messages before `skip` acknowledged (PIP-101 on a batch).
    ToMessage {
        entry: Position,
        batch_size: u32,
        skip: u32,
    },
}

impl Move {
    /// Whether this is a reset (a rewind is not).
    fn is_reset(self) -> bool {
        !matches!(self, Self::Rewind)
    }

    /// The entry a reset reads first (`None`: the next entry appended, and for a rewind).
    fn target(self) -> Option<Position> {
        match self {
            Self::Rewind => None,
            Self::To(target) => target,
            Self::ToMessage { entry, .. } => Some(entry),
        }
    }
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
    /// `None` once the cursor is closed, and always for a non-durable cursor.
    persister: Option<JournalCursor>,
    /// Whether the state is persisted at all: `false` for a non-durable cursor (a reader),
    /// whose flushes, closes and seeks write nothing.
    durable: bool,
    /// Whether the state changed since it was last persisted.
    dirty: bool,
    /// The first error of a background flush not yet returned to a caller. Boxed: rare, and
    /// every cursor of a store carries the field (an `Error` takes 56 bytes inline).
    background_error: Option<Box<Error>>,
    /// An import made because of the budget failed (see `Core::import_if_past_budget`): the
    /// next one waits for a flush.
    import_failed: bool,
    /// `AckSetStats::store_failures` as last published.
    published_store_failures: u64,
    /// The series a flush updates, registered at the first flush.
    flush_series: Option<crate::observe::FlushSeries>,
    recovery_source: Option<RecoverySource>,
    counters: Counters,
    /// What `CursorShared::published_mark` holds: it is written only under this lock
    /// ([`CursorShared::publish_mark`]), so this copy tells without its own lock whether a
    /// write would change it.
    published_mark: Option<Position>,
    /// Set while the cursor reads from a cursor ledger: its import into the journal at its
    /// first write (see `import.rs`). Boxed, as `retiring`: a cursor holds either only
    /// until its first flush, and every cursor of a store carries the field.
    import: Option<Box<import::Pending>>,
    /// A cursor ledger the journal superseded, retired (the record switched, the ledger
    /// deleted) once the journal committed the cursor's state.
    retiring: Option<Box<import::Retirement>>,
}

impl Core {
    fn persister(&mut self) -> Result<&mut JournalCursor> {
        self.persister.as_mut().ok_or(Error::Closed)
    }

    /// Stages a seek's reset `state` with the acks of `acks` and the partial entries of
    /// `batch` into `tick` (see [`JournalCursor::stage_reset`]).
    fn stage_journal_reset(
        &mut self,
        tick: Option<&mut Tick<'_>>,
        state: &PersistedState,
        (acks, batch): (&mut RangeSetWrapper, &mut BatchAcks),
    ) -> Result<()> {
        let tick = tick.ok_or(Error::Closed)?;
        self.persister()?.stage_reset((tick, state), (acks, batch))
    }

    /// Notes that a call changing the state failed with `e`: unless `e` is a refusal, which
    /// changes nothing (no such entry, an invalid argument, a limit), a load that failed part
    /// of the way may have left part of the call applied (mark-delete moved past the entry an
    /// ack filled, some positions of a group acknowledged). The next flush then writes the
    /// state whatever it holds: a call made again answers that nothing changes, and would not
    /// mark it dirty.
    fn note_failure(&mut self, e: &Error) {
        self.dirty |= !matches!(
            e,
            Error::NoSuchEntry(_) | Error::InvalidArgument { .. } | Error::LimitExceeded { .. }
        );
    }

    /// Whether the state changed since the last flush, or the tick of the last flush ended
    /// without committing the cursor's marker.
    fn needs_flush(&self) -> bool {
        self.dirty
            || self
                .persister
                .as_ref()
                .is_some_and(JournalCursor::unsettled)
    }

    /// Stages the whole state (mark-delete, epoch, properties, every ack) into `tick` (begun
    /// before the cursor's lock was taken) if it changed since the last write: durable once
    /// the caller commits the tick. The tick runs the host's owner check after its sync (one
    /// check per tick, not a metadata read per cursor). A cursor read from a cursor ledger is
    /// imported instead (`import.rs`).
    fn flush(&mut self, tick: Option<&mut Tick<'_>>) -> Result<()> {
        self.retire();
        if !self.needs_flush() || !self.durable {
            return Ok(());
        }
        let tick = tick.ok_or(Error::Closed)?;
        let state = self.state.persisted();
        if self.import.is_some() {
            self.import_own(tick, &state)?;
        } else {
            let Self {
                persister,
                state: cursor,
                ..
            } = self;
            let j = persister.as_mut().ok_or(Error::Closed)?;
            j.stage(tick, &state, &mut cursor.acks, &mut cursor.batch)?;
        }
        self.state.settle_batch();
        self.dirty = false;
        self.import_failed = false;
        self.count_flush();
        Ok(())
    }

    /// Counts a staged flush (a `flush`'s, a seek's or a rewind's) in the cursor's stats and
    /// publishes it with what it changed, from the same figures as [`PersistStats`] and
    /// [`AckSetStats`]: the one place both count, so `CursorStats::flushes` and the
    /// [`FLUSHES`](crate::observe::FLUSHES) metric agree.
    fn count_flush(&mut self) {
        self.counters.flushes += 1;
        let Some(p) = &self.persister else {
            return;
        };
        let series = self
            .flush_series
            .get_or_insert_with(|| p.labels().flush_series());
        let a = self.state.acks.stats();
        series.flushed(
            a.resident_bytes,
            a.budget_bytes,
            a.pinned_partitions,
            // The ack set's counter only grows: publish what it gained since the last flush.
            a.store_failures
                .saturating_sub(self.published_store_failures),
        );
        self.published_store_failures = a.store_failures;
    }

    /// Step 1 of the import (`import.rs`) with the cursor's own acks and partial entries and
    /// `state`: staged into `tick`, and the cursor persists through the journal from then on
    /// (the ledger it was read from waits for the retirement). Nothing changes on an error: the
    /// cursor still reads from its ledger.
    fn import_own(&mut self, tick: &mut Tick<'_>, state: &PersistedState) -> Result<()> {
        let config = self.persister()?.config().clone();
        let pending = self.import.as_ref().ok_or(Error::Closed)?;
        let jc = pending.stage(
            tick,
            config,
            state,
            (&mut self.state.acks, &mut self.state.batch),
        )?;
        self.install(jc);
        Ok(())
    }

    /// A reset's write for a cursor read from a cursor ledger (`import.rs`), committed through
    /// `tick`: a seek commits its target (no acks) as the journal cursor's first marker, and
    /// the cursor persists through the journal once that is durable; a rewind imports the
    /// whole state with `target`'s epoch. Nothing changes on an error.
    fn import_reset(
        &mut self,
        tick: &mut Option<Tick<'_>>,
        planned: Move,
        target: &PersistedState,
    ) -> Result<()> {
        let t = tick.as_mut().ok_or(Error::Closed)?;
        if !planned.is_reset() {
            self.import_own(t, target)?;
            return commit_tick(tick.take());
        }
        let config = self.persister()?.config().clone();
        let pending = self.import.as_ref().ok_or(Error::Closed)?;
        let sets = (&mut detached_ack_set(), &mut seek_prefix(planned));
        let jc = pending.stage(t, config, target, sets)?;
        commit_tick(tick.take())?;
        self.install(jc);
        Ok(())
    }

    /// Makes `jc` (staged by an import) the cursor's persister, its ack set and partial
    /// entries loading from and evicting to the journal; the ledger the cursor was read from
    /// waits for the retirement.
    fn install(&mut self, jc: JournalCursor) {
        import::install(&jc, &mut self.state.acks, &mut self.state.batch);
        self.persister = Some(jc);
        if let Some(pending) = self.import.take() {
            self.retiring = Some(Box::new(pending.into_retirement()));
        }
    }

    /// Step 3 of the import (`import.rs`), once the journal committed the cursor's state and no
    /// tick left it unsettled: the record switched to the journal's form, then the superseded
    /// ledger deleted. A failure is logged and the next write (any flush) tries again: the
    /// state is the journal's either way, and a reopen finds it there.
    fn retire(&mut self) {
        let (Some(retiring), Some(j)) = (&mut self.retiring, &self.persister) else {
            return;
        };
        if j.unsettled() {
            return;
        }
        let Some(committed) = j.committed_state() else {
            return;
        };
        match retiring.retire(&committed) {
            Ok(()) => self.retiring = None,
            Err(e) => {
                let l = j.labels();
                ::log::warn!(target: crate::observe::LOG_TARGET,
                    "{}: cursor `{}`: its cursor ledger is not retired yet (the journal holds its \
                     state), the next write tries again: {}", l.topic, l.cursor, e.with_sources());
            }
        }
    }

    /// What a journal record leaves the properties; unlimited for a non-durable cursor, which
    /// writes no record (only the name and count limits apply to it).
    fn property_room(&self) -> Result<usize> {
        match &self.persister {
            Some(p) => Ok(p.property_room()),
            None if self.durable => Err(Error::Closed),
            None => Ok(usize::MAX),
        }
    }

    /// The persistence figures: the journal cursor's, or, while an import is pending, the
    /// ledger's the cursor is read from.
    fn persist_stats(&self) -> PersistStats {
        match (&self.import, &self.persister) {
            (Some(pending), _) => pending.stats(),
            (None, Some(p)) => p.stats(),
            (None, None) => PersistStats::default(),
        }
    }

    /// Whether a cursor read from a cursor ledger must be imported now: the evictions its
    /// ledger refuses put unsaved partitions past the budget, and resident ack state stays
    /// within the budget plus one partition however much is acked before the first flush. The
    /// caller runs [`CursorShared::import_now`] once it released the lock. After a failed
    /// import, none is tried before the next flush.
    #[must_use]
    fn import_if_past_budget(&self) -> bool {
        // Runs after every operation: the plain reads first.
        self.import.is_some() && !self.import_failed && self.state.holds_unsaved_past_budget()
    }

    /// Counts a failed background flush and logs it as a warning: its error waits for the next
    /// `flush` or `close`, and no background flush runs until then.
    fn observe_background_failure(&self, e: &Error) {
        if let Some(p) = &self.persister {
            let l = p.labels();
            l.count(crate::observe::BACKGROUND_FLUSH_FAILURES, 1);
            ::log::warn!(target: crate::observe::LOG_TARGET,
                "{}: cursor `{}`: background flush failed, kept for the next flush or close: {}",
                l.topic, l.cursor, e.with_sources());
        }
    }

    /// Drops the persister, the ack set's handle on the journal or the cursor ledger, and a
    /// pending import or retirement (each holds the entry log; a ledger not yet retired is
    /// found again by the topic's next open). Returns the persister when the journal holds the
    /// cursor's state (not for a cursor still read from a cursor ledger).
    fn detach(&mut self) -> Option<JournalCursor> {
        self.state.acks = detached_ack_set();
        self.state.batch = BatchAcks::default();
        let persister = self.persister.take();
        let importing = self.import.take().is_some();
        self.retiring = None;
        persister.filter(|_| !importing)
    }
}

/// One cursor, shared by every handle to it and by the topic's registry.
pub(crate) struct CursorShared {
    id: u64,
    /// Shared with the key of the topic's registry.
    name: Arc<str>,
    topic: Arc<dyn TopicAccess>,
    core: Mutex<Core>,
    /// Mark-delete as of the last completed operation, for trimming; or, after acks that
    /// moved it within a ledger without reaching that ledger's last entry known to the
    /// cursor, an earlier mark-delete in the same ledger, which lets trims delete exactly the
    /// same ledgers (see `CursorState::must_publish`).
    published_mark: Mutex<Option<Position>>,
    closed: AtomicBool,
    /// See [`Core::durable`]; fixed at creation.
    durable: bool,
    /// The topic closed the cursor after a failed flush: acks since the last successful flush
    /// were not persisted.
    lost: AtomicBool,
    /// The journal the cursor persists through (fixed at creation; `None` for a non-durable
    /// cursor): its ticks are begun before the cursor's lock is taken.
    journal: Option<Arc<Journal>>,
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
    /// A cursor in `state`, persisted by `persistence.persister` (whose partition store backs
    /// `state.acks`). A journal's flusher pool flushes it (the store's, or its topic's own),
    /// on `CursorConfig::flush_interval`.
    pub(crate) fn new(
        id: u64,
        name: Arc<str>,
        topic: Arc<dyn TopicAccess>,
        mut state: CursorState,
        persistence: Persistence,
    ) -> Arc<Self> {
        if persistence.import.is_none() {
            // A cursor read from a cursor ledger keeps loading its cold partial entries there
            // until its import.
            state.batch.set_store(persistence.persister.batch_store());
        }
        let budget = persistence.persister.config().ack_memory.clone();
        let mark = state.mark_delete;
        let journal = Some(Arc::clone(persistence.persister.journal()));
        let shared = Arc::new(Self {
            id,
            name,
            topic,
            journal,
            core: Mutex::new(Core {
                state,
                persister: Some(persistence.persister),
                durable: true,
                dirty: persistence.dirty,
                background_error: None,
                import_failed: false,
                published_store_failures: 0,
                flush_series: None,
                recovery_source: persistence.recovery_source,
                counters: Counters::default(),
                published_mark: mark,
                import: persistence.import.map(Box::new),
                retiring: persistence.retiring.map(Box::new),
            }),
            published_mark: Mutex::new(mark),
            closed: AtomicBool::new(false),
            durable: true,
            lost: AtomicBool::new(false),
        });
        if let Some(budget) = budget {
            shared.join_budget(&budget);
        }
        shared
    }

    /// The cursor's id: its id in the topic's cursor table, or a reader's own id.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// A non-durable cursor (a reader) in `state`: nothing of it is ever written, it has no
    /// record and no cursor ledger, no flusher flushes it, and it is gone once closed.
    pub(crate) fn new_non_durable(
        id: u64,
        name: String,
        topic: Arc<dyn TopicAccess>,
        mut state: CursorState,
    ) -> Arc<Self> {
        // A reader has no cursor ledger: its evicted partial entries are kept encoded in
        // memory (see docs/cursors.md, "Memory").
        state
            .batch
            .set_store(Box::new(batch_store::MemBatchStore::default()));
        let mark = state.mark_delete;
        Arc::new(Self {
            id,
            name: name.into(),
            topic,
            core: Mutex::new(Core {
                state,
                persister: None,
                durable: false,
                dirty: false,
                background_error: None,
                import_failed: false,
                published_store_failures: 0,
                flush_series: None,
                recovery_source: None,
                counters: Counters::default(),
                published_mark: mark,
                import: None,
                retiring: None,
            }),
            published_mark: Mutex::new(mark),
            closed: AtomicBool::new(false),
            durable: false,
            lost: AtomicBool::new(false),
            journal: None,
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The cursor's name, to key the topic's registry without a copy of it.
    pub(crate) fn shared_name(&self) -> Arc<str> {
        Arc::clone(&self.name)
    }

    /// Whether the cursor's state is persisted (`false` for a non-durable cursor).
    pub(crate) fn is_durable(&self) -> bool {
        self.durable
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Mark-delete for trims (see the field): never past the cursor's own.
    pub(crate) fn published_mark(&self) -> Option<Position> {
        *lock(&self.published_mark)
    }

    /// Publishes `mark` as the cursor's mark-delete for trims (`core` is this cursor's, locked).
    /// Runs after every operation, so the shared copy is written only when it changes.
    fn publish_mark(&self, core: &mut Core, mark: Option<Position>) {
        if core.published_mark != mark {
            core.published_mark = mark;
            *lock(&self.published_mark) = mark;
        }
    }

    /// Refuses every later operation on every handle without flushing (the cursor is being
    /// deleted); returns its persister when the journal holds the cursor's state (see
    /// `Core::detach`).
    pub(crate) fn detach(&self) -> Option<JournalCursor> {
        let mut core = lock(&self.core);
        self.closed.store(true, Ordering::SeqCst);
        let persister = core.detach();
        drop(core);
        // A read of this cursor waiting for entries wakes and finds it closed.
        self.topic.wake_readers();
        persister
    }

    /// Imports a cursor read from a cursor ledger now if recovery's evictions already put
    /// unsaved state past the budget (see `Core::import_if_past_budget`), so the cursor is
    /// handed out within it.
    pub(crate) fn settle_import(&self) {
        let import = lock(&self.core).import_if_past_budget();
        if import {
            self.import_now();
        }
    }

    /// Imports a cursor read from a cursor ledger into the journal now (`import.rs`), because
    /// the evictions its ledger refuses put unsaved state past the budget: a flush of the whole
    /// state in a tick of its own, committed, then the ledger retired. A failure is logged and
    /// counted as a background flush's; the partitions stay resident past the budget, as after
    /// a failed eviction store, and no further attempt is made before the next flush, which
    /// meets the same state and reports it.
    fn import_now(&self) {
        let mut tick = self.begin_tick();
        let mut core = lock(&self.core);
        if self.is_closed() || core.import.is_none() {
            return;
        }
        core.dirty = true;
        let staged = core.flush(tick.as_mut());
        match staged.and_then(|()| commit_tick(tick)) {
            Ok(()) => core.retire(),
            Err(e) => {
                core.observe_background_failure(&e);
                core.import_failed = true;
            }
        }
    }

    /// Makes this cursor's ack set a member of `budget`, shared with other cursors: other
    /// members may ask it to release memory (see [`Release`]).
    pub(crate) fn join_budget(self: &Arc<Self>, budget: &crate::ackset::AckBudget) {
        let link = budget.join();
        let me: Arc<dyn Release> = self.clone();
        link.set_release(Arc::downgrade(&me));
        lock(&self.core).state.acks.join_budget(link);
    }

    /// For a durable cursor, a tick begun now, before the cursor's lock is taken (the lock
    /// order is tick, then cursor); `None` for a non-durable cursor.
    fn begin_tick(&self) -> Option<Tick<'_>> {
        self.journal.as_deref().map(Journal::begin_tick)
    }

    fn core(&self) -> Result<MutexGuard<'_, Core>> {
        let core = lock(&self.core);
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        Ok(core)
    }

    /// Closes the cursor for [`Cursor::close`]: persists the whole state (a flush, committed),
    /// and only once that succeeded releases the journal cursor and refuses every later
    /// operation. On an error nothing is closed: every handle keeps working and a later
    /// `close` tries again (an unsettled cursor stages its whole marker again). A pending
    /// background error is returned first, without closing.
    /// Closing a closed cursor returns `Ok` when the close persisted everything, and
    /// [`Error::Closed`] when the topic closed it after a failed flush.
    pub(crate) fn try_close(&self) -> Result<()> {
        let mut tick = self.begin_tick();
        let mut core = lock(&self.core);
        if self.is_closed() {
            return if self.lost.load(Ordering::SeqCst) {
                Err(Error::Closed)
            } else {
                Ok(())
            };
        }
        if let Some(e) = core.background_error.take() {
            return Err(*e);
        }
        core.flush(tick.as_mut())?;
        // Under the cursor's lock: nothing may change between the last flush and the close.
        commit_tick(tick)?;
        core.retire();
        self.finish_close(core);
        Ok(())
    }

    /// Closes the cursor for good, as its topic closes: tries to persist the whole state, then
    /// releases the journal cursor and refuses every later operation whatever the outcome (the
    /// topic releases its directory). Idempotent. Returns a pending background error first.
    /// After an error, what the last successful flush wrote is what a reopen finds, and a later
    /// [`Cursor::close`] returns [`Error::Closed`], never `Ok`.
    pub(crate) fn close(&self) -> Result<()> {
        let mut tick = self.begin_tick();
        let mut core = lock(&self.core);
        if self.is_closed() {
            return Ok(());
        }
        let pending = core.background_error.take();
        let persisted = core.flush(tick.as_mut()).and_then(|()| commit_tick(tick));
        if persisted.is_ok() {
            core.retire();
        }
        let result = pending.map_or(persisted, |e| Err(*e));
        self.lost.store(result.is_err(), Ordering::SeqCst);
        self.finish_close(core);
        result
    }

    /// Marks the cursor closed, drops the persister and tells the topic.
    fn finish_close(&self, mut core: MutexGuard<'_, Core>) {
        self.closed.store(true, Ordering::SeqCst);
        core.detach();
        drop(core);
        self.topic.release(self);
    }
}

impl CursorShared {
    /// Stages the cursor into `tick` (a store's flush tick, begun before this call) if it is a
    /// journal cursor with changes and no pending background error; returns whether it staged.
    /// With `keep_error`, a failure is kept for the cursor's next `flush` or `close` (as a
    /// background flush's) and `Ok(false)` returned; otherwise it is returned.
    pub(crate) fn stage_into(&self, tick: &mut Tick<'_>, keep_error: bool) -> Result<bool> {
        if self.journal.is_none() {
            return Ok(false);
        }
        let mut core = lock(&self.core);
        if self.is_closed() && !keep_error && self.lost.load(Ordering::SeqCst) {
            // Its topic closed it after a failed flush: acks of before the call are lost.
            return Err(Error::Closed);
        }
        // A kept background error waits for the cursor's own flush or close; a store's
        // `flush_all` still makes the cursor's state durable.
        if self.is_closed()
            || (keep_error && core.background_error.is_some())
            || !core.needs_flush()
        {
            return Ok(false);
        }
        match core.flush(Some(tick)) {
            Ok(()) => Ok(true),
            Err(e) if keep_error => {
                core.observe_background_failure(&e);
                core.background_error = Some(Box::new(e));
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

/// Another cursor sharing the ack memory budget needs room: release some, unless this cursor
/// is busy (its lock is taken), in which case it brings the shared total down itself at the
/// end of its operation. Never blocks on the lock.
impl Release for CursorShared {
    fn try_release(&self, bytes: usize, what: Releasable) -> usize {
        match self.core.try_lock() {
            Ok(mut core) => core.state.release_memory(bytes, what),
            Err(std::sync::TryLockError::Poisoned(p)) => {
                p.into_inner().state.release_memory(bytes, what)
            }
            Err(std::sync::TryLockError::WouldBlock) => 0,
        }
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

    /// Runs `f` on the state with the topic's layout held, then publishes mark-delete. A move
    /// of the read position wakes the reads waiting on the topic (see
    /// [`Self::read_entries_or_wait`]).
    fn with_state<R>(&self, f: impl FnOnce(&mut Core, &Layout) -> Result<R>) -> Result<R> {
        self.with_state_or_known(|_| None, f)
    }

    /// As [`Self::with_state`], but a durable cursor first tries `known`, which answers
    /// without the topic's layout (from what the state knows of it, see
    /// `CursorState::ack_known`) or returns `None` having changed nothing.
    fn with_state_or_known<R>(
        &self,
        known: impl FnOnce(&mut Core) -> Option<R>,
        f: impl FnOnce(&mut Core, &Layout) -> Result<R>,
    ) -> Result<R> {
        let mut core = self.shared.core()?;
        let read_from = core.state.read_position;
        let quick = if core.durable { known(&mut core) } else { None };
        let result = if let Some(answer) = quick {
            core.state.charge_batch();
            if core.state.must_publish(core.published_mark) {
                let mark = core.state.mark_delete;
                self.shared.publish_mark(&mut core, mark);
            }
            Ok(answer)
        } else {
            let layout = self.shared.topic.layout();
            if !core.durable {
                core.state.follow_trim(&layout)?;
            }
            let result = f(&mut core, &layout);
            // Acks, skips and trims drop partial entries too: the budget charge follows them
            // now, not at the next flush (which a reader never makes).
            core.state.charge_batch();
            let mark = core.state.mark_delete;
            self.shared.publish_mark(&mut core, mark);
            drop(layout);
            result
        };
        let moved = core.state.read_position != read_from;
        let import = core.import_if_past_budget();
        drop(core);
        if import {
            self.shared.import_now();
        }
        if moved {
            self.shared.topic.wake_readers();
        }
        result
    }

    /// Moves the cursor as `plan` says, on request: the epoch increases, and the new state is
    /// made durable before it is applied, so a reset survives a crash, the epoch never goes
    /// backwards, and no crash brings back an ack the reset cleared (invariant 1).
    ///
    /// The new state is committed through a tick of the cursor's own (under the cursor's lock:
    /// the reset is applied only once it is durable): a seek stages a marker holding the new
    /// mark-delete, the new epoch and no acks or partitions (a snapshot when the cursor has
    /// one, which a damaged chain falls back to), so from then on recovery can only find that
    /// state or a later one; a rewind clears nothing and stages the current acks with the new
    /// epoch. Nothing changes if the write fails.
    ///
    /// The writes happen without holding the topic's layout (appends go on meanwhile); the
    /// published mark-delete is lowered to the smaller of the old and the new one first, so a
    /// concurrent trim cannot delete the target.
    fn reset(&self, plan: impl FnOnce(&Layout) -> Result<Move>) -> Result<()> {
        let shared = &self.shared;
        let mut tick = shared.begin_tick();
        let mut core = shared.core()?;
        if core.durable {
            shared.topic.check_owner()?;
        }
        let (planned, target_state) = {
            let layout = shared.topic.layout();
            let planned = plan(&layout)?;
            let mut persisted = core.state.persisted();
            persisted.epoch += 1;
            if planned.is_reset() {
                let target = planned.target();
                let mark = state::mark_before(&layout, target);
                persisted.mark_delete = mark.unwrap_or(NO_MARK_DELETE);
                let mark = core.state.mark_delete.min(mark);
                shared.publish_mark(&mut core, mark);
            }
            (planned, persisted)
        };
        // A cursor read from a cursor ledger moves into the journal with this write (see
        // `import.rs`): a seek commits its target as the journal cursor's first marker (and
        // persists through the journal once that is durable), a rewind the whole state.
        let importing = core.durable && core.import.is_some();
        let written = match planned {
            _ if !core.durable => Ok(()),
            _ if importing => core.import_reset(&mut tick, planned, &target_state),
            Move::To(_) | Move::ToMessage { .. } => core
                .stage_journal_reset(
                    tick.as_mut(),
                    &target_state,
                    (&mut detached_ack_set(), &mut seek_prefix(planned)),
                )
                .and_then(|()| commit_tick(tick.take())),
            Move::Rewind => {
                let Core {
                    persister, state, ..
                } = &mut *core;
                match (persister, tick.as_mut()) {
                    (Some(j), Some(t)) => j
                        .stage(t, &target_state, &mut state.acks, &mut state.batch)
                        .map(drop),
                    _ => Err(Error::Closed),
                }
                .and_then(|()| commit_tick(tick.take()))
            }
        };
        if let Err(e) = written {
            let mark = core.state.mark_delete;
            shared.publish_mark(&mut core, mark);
            return Err(e);
        }
        core.retire();
        core.state.epoch += 1;
        let layout = shared.topic.layout();
        match planned {
            Move::To(_) | Move::ToMessage { .. } => {
                core.state.reset_to(&layout, planned.target());
                if let Move::ToMessage {
                    entry,
                    batch_size,
                    skip,
                } = planned
                {
                    // After `reset_to` nothing is cold: this does no I/O and cannot fail.
                    let _ = core.state.batch.set_prefix(entry, batch_size, skip);
                    // The seek's flush committed exactly this prefix.
                    core.state.batch.mark_clean();
                }
                // What was just committed is exactly the new state.
                core.dirty = false;
            }
            Move::Rewind => {
                core.state.rewind(&layout);
                // A rewind committed every ack with the new epoch.
                core.dirty &= !core.durable;
            }
        }
        core.state.charge_batch();
        if core.durable {
            // After the reset is applied, so the published ack memory is the new state's.
            core.count_flush();
        }
        let mark = core.state.mark_delete;
        shared.publish_mark(&mut core, mark);
        drop((layout, core));
        // Every reset moves the read position: a read waiting for entries looks again.
        shared.topic.wake_readers();
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
        let count = |core: &mut Core, changed: bool| {
            core.counters.acks += u64::from(changed);
            core.dirty |= changed;
        };
        self.with_state_or_known(
            |core| {
                let changed = core.state.ack_known(pos)?;
                count(core, changed);
                Some(changed)
            },
            |core, layout| {
                let changed = core
                    .state
                    .ack(layout, pos)
                    .inspect_err(|e| core.note_failure(e))?;
                // A durable cursor's next ack in this ledger needs no layout.
                if core.durable {
                    core.state.learn_ledger(layout, pos);
                }
                count(core, changed);
                Ok(changed)
            },
        )
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
            let changed = core
                .state
                .ack_cumulative(layout, pos)
                .inspect_err(|e| core.note_failure(e))?;
            core.counters.acks += u64::from(changed);
            core.dirty |= changed;
            Ok(changed)
        })
    }

    /// Acknowledges one message of an entry that holds `batch_size` messages (the entry's
    /// `num_messages`), Pulsar's batch-index ack (PIP-54). The entry stays unacknowledged, and
    /// is still delivered by reads (with [`Entry::acked_batch_indexes`] telling which of its
    /// messages to drop), until its last message is acknowledged: then it is acknowledged as
    /// by [`Self::ack`], and mark-delete moves when it can. [`Self::ack`] and cumulative acks
    /// acknowledge whole entries, whatever their messages. Returns whether anything changed
    /// (`false` for a message or an entry already acknowledged).
    ///
    /// Durability: as [`Self::ack`]. The acknowledged messages of entries still partial are
    /// persisted by the next flush (a batch record in the journal for each partition whose
    /// partial entries changed, referenced by the cursor's marker or delta; inline in a
    /// single-entry snapshot) and recovered with it, so after a reopen only the messages
    /// not yet acknowledged are delivered. Their memory ([`CursorStats::partial_entries`],
    /// [`CursorStats::batch_index_bytes`]) is charged to the ack set's LRU budget.
    ///
    /// # Errors
    /// [`Error::NoSuchEntry`] for a position after mark-delete that is not a retained entry;
    /// [`Error::InvalidArgument`] for `index >= batch_size`, a `batch_size` above
    /// [`MAX_BATCH_SIZE`](crate::MAX_BATCH_SIZE) (whatever the entry's state), or a `batch_size`
    /// other than the one given for earlier messages of the same entry. Nothing changes on an
    /// error.
    pub fn ack_batch_index(&self, pos: Position, index: u32, batch_size: u32) -> Result<bool> {
        self.with_state(|core, layout| {
            let changed = core
                .state
                .ack_batch_index(layout, pos, index, batch_size)
                .inspect_err(|e| core.note_failure(e))?;
            core.counters.acks += u64::from(changed);
            core.dirty |= changed;
            Ok(changed)
        })
    }

    /// The partially acknowledged entries grouped by partition of the ack set, each with its
    /// acknowledged batch indexes: what batch-index entries (`encode_batch_entry`) encode. For
    /// the command and tests.
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn batch_index_partitions(&self) -> Result<Vec<crate::format::cursor::BatchPartition>> {
        self.shared.core()?.state.batch.partitions()
    }

    /// Whether message `index` of the entry at `pos` is acknowledged: the entry is, or that
    /// message is at batch-index level.
    pub fn is_batch_index_acked(&self, pos: Position, index: u32) -> Result<bool> {
        let mut core = self.shared.core()?;
        if core.state.is_acked(pos)? || self.shared.topic.layout().before_first_entry(pos) {
            return Ok(true);
        }
        core.state.batch_index_acked(pos, index)
    }

    /// Acknowledges every position in `positions` in one call, under one lock (Pulsar's
    /// `delete(Iterable<Position>)`): as many [`Self::ack`] calls, but other threads see all or
    /// none of them. Positions at or before mark-delete or already acknowledged are ignored.
    /// Returns how many entries were newly acknowledged. Persisted like `ack`, by the next
    /// flush.
    ///
    /// # Errors
    /// [`Error::NoSuchEntry`] for the first position after mark-delete that is not a retained
    /// entry; nothing changes (no position of the call is acknowledged).
    pub fn ack_many(&self, positions: &[Position]) -> Result<u64> {
        self.with_state(|core, layout| {
            let changed = core
                .state
                .ack_many(layout, positions)
                .inspect_err(|e| core.note_failure(e))?;
            core.counters.acks += changed;
            core.dirty |= changed > 0;
            Ok(changed)
        })
    }

    /// Skips the next `n` unacknowledged entries after mark-delete (Pulsar's `skipEntries(n,
    /// Exclude)`): individually acknowledged entries are stepped over and do not count, and
    /// mark-delete moves to the last entry skipped, so they count as acknowledged. Fewer are
    /// skipped when fewer remain. Returns the number skipped. Persisted like an ack, by the
    /// next flush; the read position follows when it was behind. O(n + acknowledged entries
    /// stepped over).
    pub fn skip_entries(&self, n: u64) -> Result<u64> {
        self.with_state(|core, layout| {
            let skipped = core
                .state
                .skip(layout, n)
                .inspect_err(|e| core.note_failure(e))?;
            core.dirty |= skipped > 0;
            Ok(skipped)
        })
    }

    /// Moves mark-delete to `pos` (as [`Self::ack_cumulative`]) and replaces every property
    /// with `properties`, atomically (Pulsar's `markDelete(position, properties)`): other
    /// threads and every later flush see both changes or neither, because both sit in the one
    /// state entry (marker or snapshot) a flush commits. `pos` equal to mark-delete replaces
    /// the properties only. Returns whether anything changed. Persisted by the next flush.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `pos` is behind mark-delete or a property name is too
    /// long, [`Error::LimitExceeded`] when the properties exceed the limits of
    /// [`Self::set_property`], [`Error::NoSuchEntry`] when `pos` is not a retained entry;
    /// nothing changes on an error.
    pub fn mark_delete_with_properties(
        &self,
        pos: Position,
        properties: BTreeMap<String, i64>,
    ) -> Result<bool> {
        self.with_state(|core, layout| {
            let room = core.property_room()?;
            let changed = core
                .state
                .mark_delete_with_properties(layout, pos, properties, room)
                .inspect_err(|e| core.note_failure(e))?;
            core.counters.acks += u64::from(changed);
            core.dirty |= changed;
            Ok(changed)
        })
    }

    /// Moves only the read position, keeping every ack, mark-delete and the epoch (Pulsar's
    /// `seek(position)`, which a dispatcher uses to redeliver from a point): the next read
    /// starts at the first retained entry at or after `pos`, skipping acknowledged entries;
    /// a `pos` at or before mark-delete reads from the first entry after it. Nothing is
    /// written: the read position is never persisted (a reopened cursor reads from
    /// mark-delete). [`Self::seek`] is the full reset.
    pub fn seek_read_position(&self, pos: Position) -> Result<()> {
        self.with_state(|core, _| {
            core.state.set_read_position(pos);
            Ok(())
        })
    }

    /// Whether a read would return an entry now: some unacknowledged entry lies at or after
    /// the read position. O(ledgers) plus at most two partition loads.
    pub fn has_more_entries(&self) -> Result<bool> {
        self.with_state(|core, layout| core.state.has_more(layout))
    }

    /// Unacknowledged retained entries between `from` and `to`, both included (Pulsar's
    /// `getNumberOfEntries(range)` less the acknowledged ones); entries at or before
    /// mark-delete count as acknowledged, and 0 when `from > to`. O(ledgers) plus at most two
    /// partition loads.
    pub fn entries_in_backlog(&self, from: Position, to: Position) -> Result<u64> {
        self.with_state(|core, layout| core.state.unacked_between(layout, from, to))
    }

    /// The first unacknowledged retained entry (the entry after mark-delete), `None` when
    /// every retained entry is acknowledged.
    pub fn first_unacked(&self) -> Result<Option<Position>> {
        self.with_state(|core, layout| Ok(core.state.first_unacked(layout)))
    }

    /// The last maximal range of individually acknowledged entries (Pulsar's
    /// `getLastIndividualDeletedRange`), inclusive; `None` when there is none.
    pub fn last_acked_range(&self) -> Result<Option<(Position, Position)>> {
        self.shared.core()?.state.acks.last_range()
    }

    /// Like [`Self::read_entries`], but when nothing is there to read, waits until there may
    /// be (entries become readable, or the read position moves) or `timeout` passes, then reads
    /// again; returns an empty vector only when a read at the deadline finds nothing. The wait
    /// sleeps on the topic's condvar, never polls; it is woken by every change that can give
    /// it entries: entries made readable (see `docs/cursors.md`, "Read visibility"), and any
    /// move of this cursor's read position (`rewind`, every seek, `seek_read_position`, acks
    /// and skips that move it). A wake that finds nothing (entries this cursor skips, another
    /// cursor's move) waits on for what remains of `timeout`.
    ///
    /// # Errors
    /// As [`Self::read_entries`]; [`Error::Closed`] when the cursor is closed or deleted, or
    /// the topic closed, meanwhile: each wakes the waiting read at once.
    pub fn read_entries_or_wait(&self, max: usize, timeout: Duration) -> Result<Vec<Entry>> {
        // A timeout no instant can hold (`Duration::MAX`) waits for as long as it takes.
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let seen = self.shared.topic.changes_seen();
            let entries = self.read_entries(max)?;
            if !entries.is_empty() || max == 0 {
                return Ok(entries);
            }
            if self.shared.topic.wait_for_change(seen, deadline) == seen {
                // The deadline: whatever became readable without a wake is still returned.
                return self.read_entries(max);
            }
        }
    }

    /// Whether `pos` is acknowledged (at or before mark-delete, or individually).
    pub fn is_acked(&self, pos: Position) -> Result<bool> {
        let mut core = self.shared.core()?;
        if core.state.is_acked(pos)? {
            return Ok(true);
        }
        Ok(self.shared.topic.layout().before_first_entry(pos))
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
            if !core.durable {
                core.state.follow_trim(&layout)?;
            }
            let planned = core.state.plan_read(&layout, max);
            let mark = core.state.mark_delete;
            self.shared.publish_mark(&mut core, mark);
            planned?
        };
        let log = self.shared.topic.log()?;
        let mut entries = Vec::with_capacity(positions.len());
        for p in positions {
            let mut entry = Entry::from_log(p.ledger_id, log.read(p.ledger_id, p.entry_id)?);
            entry.acked_batch_indexes = core.state.partial_acked(p)?;
            entries.push(entry);
        }
        core.counters.entries_read += entries.len() as u64;
        Ok((core.state.epoch, entries))
    }

    /// Reads again from the first entry after mark-delete (acknowledged entries are still
    /// skipped). Increases the epoch (it is a redelivery the consumer asked for) and writes the
    /// cursor record before returning. A consumer's `redeliverUnacknowledgedMessages` request
    /// is a rewind on the broker's side.
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
    /// `index >= B` reads the next entry appended. Otherwise as [`Self::seek`]. When `index` is
    /// inside a batch, the messages of that entry before it are acknowledged at batch-index
    /// level (the entry is delivered with them in [`Entry::acked_batch_indexes`]), so the next
    /// message a consumer processes is `index`; one more header read finds the entry's
    /// first index.
    pub fn seek_by_index(&self, index: u64) -> Result<()> {
        let log = self.shared.topic.log()?;
        self.reset(|layout| {
            let Some(entry) = finder::find_by_index(&log, layout, index)? else {
                return Ok(Move::To(None));
            };
            let meta = log.read_meta(entry.ledger_id, entry.entry_id)?;
            let first = (meta.index + 1).saturating_sub(u64::from(meta.num_messages));
            Ok(match u32::try_from(index.saturating_sub(first)) {
                Ok(skip) if skip > 0 && index <= meta.index => Move::ToMessage {
                    entry,
                    batch_size: meta.num_messages,
                    skip,
                },
                _ => Move::To(Some(entry)),
            })
        })
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

    /// The number of maximal ranges [`Self::acked_ranges`] would return, without building
    /// them (partitions are visited one at a time, within the memory budget).
    pub fn acked_range_count(&self) -> Result<u64> {
        self.shared.core()?.state.acks.range_count()
    }

    /// Increases on every seek, `seek_by_index`, `seek_by_timestamp` and `rewind`; never on
    /// reopen. Consumers tag what they receive with it, so a server-side reset is noticed.
    pub fn epoch(&self) -> Result<u64> {
        Ok(self.shared.core()?.state.epoch)
    }

    /// Sets an application property stored with the mark-delete position (persisted by the
    /// next flush, like an ack).
    ///
    /// Limits, checked here so that every later flush can write what was accepted: a name of
    /// at most [`MAX_PROPERTY_NAME`](crate::MAX_PROPERTY_NAME) (1,024) bytes; at most
    /// [`MAX_PROPERTIES`](crate::MAX_PROPERTIES) (4,096) properties; and
    /// all properties together (2 + name length + 8 bytes each) within
    /// [`CursorConfig::max_entry_size`], less a marker's fixed part, room for
    /// [`CursorConfig::index_page_rows`] rows of 36 bytes and for a batch table (4 + 16 rows of
    /// 32 bytes), the limit a cursor ledger's marker had, so a cursor accepts the same
    /// properties whether it was read from one or not. Replacing the value of an existing
    /// property is always accepted.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a name over the limit, [`Error::LimitExceeded`] for a
    /// property past the count or size limit; nothing changes. [`Error::Closed`] once closed.
    pub fn set_property(&self, key: &str, value: i64) -> Result<()> {
        let mut core = self.shared.core()?;
        let room = core.property_room()?;
        state::check_property(&core.state.properties, key, room)?;
        let old = core.state.properties.insert(key.to_owned(), value);
        core.dirty |= old != Some(value);
        Ok(())
    }

    /// Removes an application property (persisted by the next flush); returns its value,
    /// `None` when there was none (then nothing changes).
    pub fn remove_property(&self, key: &str) -> Result<Option<i64>> {
        let mut core = self.shared.core()?;
        let old = core.state.properties.remove(key);
        core.dirty |= old.is_some();
        Ok(old)
    }

    /// The application properties.
    pub fn properties(&self) -> Result<BTreeMap<String, i64>> {
        Ok(self.shared.core()?.state.properties.clone())
    }

    /// Persists the cursor's whole state and returns once it is durable (after the fsync).
    ///
    /// What survives after `flush` returns `Ok`, a process crash or a power cut alike:
    /// mark-delete, every individual ack, the epoch and the properties. Multi-entry mode writes
    /// the partitions that changed since the last flush plus a marker; single-entry mode one
    /// snapshot. A flush with nothing changed since the last one writes nothing.
    ///
    /// Each call that returns `Ok` records how long it took, from the call to its return, into
    /// the histogram [`observe::FLUSH_SECONDS`](crate::observe::FLUSH_SECONDS) (a store's
    /// cursor waits for the journal tick that syncs it).
    ///
    /// # Errors
    /// An error of a background flush (see [`CursorConfig::flush_interval`]) not yet
    /// reported is returned first, without flushing; call `flush` again. I/O errors (`ENOSPC`
    /// on a full disk, for instance); then nothing new is guaranteed durable and acks keep
    /// working: a write the journal could not make changes nothing, so a later `flush` succeeds
    /// once the disk has space again. After a failed sync (its effect on disk unknown) the
    /// journal is latched: every later flush of every cursor of its host fails with
    /// [`Error::PreviousIo`] until the topic (or the store) is reopened.
    /// [`Error::LimitExceeded`] when a single-entry snapshot does not fit (with
    /// [`OverflowPolicy::Error`]). [`Error::Fenced`] once a newer owner has opened the topic's
    /// directory (this handle lost ownership; see `docs/cursors.md`, "Ownership"); a flush the
    /// takeover caught halfway may have written state the new owner does or does not see, so
    /// `Ok` alone means every later owner recovers it. Seeks and rewinds fail the same way.
    pub fn flush(&self) -> Result<()> {
        let started = Instant::now();
        let mut tick = self.shared.begin_tick();
        let (labels, retiring) = {
            let mut core = self.shared.core()?;
            if let Some(e) = core.background_error.take() {
                return Err(*e);
            }
            core.flush(tick.as_mut())?;
            let labels = core.persister.as_ref().map(|p| p.labels().clone());
            (labels, core.retiring.is_some())
        };
        // A journal cursor's tick syncs without the cursor's lock: acks go on meanwhile.
        commit_tick(tick)?;
        if retiring && let Ok(mut core) = self.shared.core() {
            // An import this flush committed: its ledger is retired now.
            core.retire();
        }
        if let Some(labels) = labels {
            labels.time(crate::observe::FLUSH_SECONDS, started.elapsed());
        }
        Ok(())
    }

    /// Flushes, then closes every handle to this cursor; later calls fail with
    /// [`Error::Closed`]. Opening the cursor again by name restores what `flush` keeps.
    ///
    /// `Ok` means everything acknowledged before the call is durable. Closing a closed cursor
    /// returns `Ok` again, unless the topic closed it after a failed flush
    /// ([`Error::Closed`]: what the last successful flush wrote is what a reopen finds).
    ///
    /// # Errors
    /// As [`Self::flush`]. On an error the cursor stays open (every handle keeps working) and
    /// nothing new is guaranteed durable; call `close` again, for instance once a full disk has
    /// space again.
    pub fn close(&self) -> Result<()> {
        self.shared.try_close()
    }

    /// Current figures.
    ///
    /// A read: none of an operation's epilogue runs (no charge of partial entries, no release
    /// asked of other cursors sharing the ack memory budget, no eviction, no deferred claim),
    /// so the shares of a store's cursors read one after another add up to the store's total.
    /// The one exception: a non-durable cursor first catches up with a trim, as its every
    /// operation does (dropping the acks and partial entries the trim left behind).
    pub fn stats(&self) -> Result<CursorStats> {
        let mut core = self.shared.core()?;
        let layout = self.shared.topic.layout();
        if !core.durable {
            core.state.follow_trim(&layout)?;
            // The trim dropped partial entries, if any: their charge goes with them.
            let bytes = core.state.batch.bytes();
            core.state.acks.lower_charge(bytes);
        }
        let layout = &*layout;
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
            persist: core.persist_stats(),
            recovery_source: core.recovery_source,
            background_error: core.background_error.as_ref().map(ToString::to_string),
            partial_entries: state.batch.len(),
            batch_index_bytes: state.batch.bytes() as u64,
            batch_cold_partitions: state.batch.cold_partitions() as u64,
            batch_evictions: state.batch.counters().evictions,
            batch_loads: state.batch.counters().loads,
        })
    }
}

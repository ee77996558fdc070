//! Managed ledgers: one topic stored in one directory.
//!
//! Owns: [`ManagedLedger`], the public face of a topic: appends with message metadata, reads,
//! data-ledger rollover, the topic record, the cursor registry and trimming.
//!
//! A topic directory holds the entry log's ledger files (data ledgers, and the cursor ledgers
//! of cursors an earlier release persisted), the segments of the cursor journal the topic
//! hosts (`host.rs`), the `topic` record (the data ledgers with entry count, first message
//! index and first/last timestamp; the cursor table, client name -> numeric id; the next ids;
//! the journal's segments and seals) and one `cursor-{id}` record per cursor. Only numeric ids
//! name files. How an open reconciles the record with the files after a crash is written in
//! `open.rs`.
//!
//! Must never: name a file after client data; delete a ledger that a record still lists.

mod config;
mod host;
mod names;
mod open;
mod registry;
mod table;
mod topic;

use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

pub use config::LedgerConfig;
pub use topic::TOPIC_RECORD;

pub(crate) use open::{
    check_store_host, current_block, refuse_older_record, refuse_short_ledgers,
    refuse_store_topic_alone, refuse_unlisted_entries, swept_by_open,
};
pub(crate) use table::{chunk_leftovers, read_topic_record};

pub use crate::cursor::NonDurableOptions;
pub use crate::cursor::{
    Cursor, CursorConfig, CursorOptions, CursorStats, InitialPosition, OverflowPolicy, PersistMode,
};
pub use crate::entry::Entry;
pub use crate::finder::LedgerSpan;

use crate::cursor::TopicAccess;
use crate::cursor::journal::TopicJournal;
use crate::error::{Error, Result};
use crate::finder;
use crate::journal::JournalConfig;
use crate::journal::flusher::Pool;
use crate::log::{EntryLog, LedgerInfo, LogStats, TailRepair};
use crate::position::Position;
use crate::storage::{FileStorage, Storage};
use topic::TopicCore;

/// Message metadata of one appended entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendMeta {
    /// Messages in the entry (a batch); at least 1. The entry's index is that of its last
    /// message, so the topic's message index advances by this much.
    pub num_messages: u32,
    /// The entry's timestamp, by convention milliseconds since the Unix epoch. A timestamp
    /// smaller than the previous entry's is raised to it, so timestamps never go backwards.
    pub timestamp: u64,
}

/// One topic: its entries, in data ledgers of one directory, and its cursors.
///
/// `Send + Sync`; every method takes `&self`. Exactly one `ManagedLedger` may own a directory
/// at a time (the entry log's lock). Dropping it closes it as [`Self::close`] does, ignoring
/// errors; call `close` to see them.
#[derive(Debug)]
pub struct ManagedLedger {
    core: Arc<TopicCore>,
    /// The flusher of a topic opened alone whose cursors have a flush interval: one thread
    /// ticking the journal the topic hosts.
    flusher: Option<Pool<TopicCore>>,
}

impl ManagedLedger {
    /// Opens the topic in directory `dir`, creating the directory and the topic if needed. Its
    /// files' descriptors live in the process's cache
    /// ([`OpenFiles::process`](crate::storage::OpenFiles::process)), shared with every other
    /// topic opened so and every store without a limit of its own; its lock file's descriptor
    /// is held outside it for the topic's life.
    ///
    /// The open claims the topic: it writes the topic record (and every cursor record) by
    /// compare-and-set before it reads the ledger files, so a former owner that lost the
    /// directory without knowing it (a broken lock, shared storage) is fenced: its later writes
    /// fail with [`Error::Fenced`], and nothing it writes afterwards is ever read (see
    /// `docs/cursors.md`, "Ownership"). The open never writes into a ledger a former owner may
    /// still be appending to.
    ///
    /// # Errors
    /// [`Error::Locked`] when another handle owns the directory; [`Error::MissingLedger`] when
    /// a recorded data ledger's file is gone; [`Error::NotAckstore`] for a directory with ledger
    /// files but no topic record.
    pub fn open(dir: impl AsRef<Path>, config: LedgerConfig) -> Result<Self> {
        // Before the directory is made: a directory not there yet is a new topic's (one that
        // is there is judged by its topic record, with its storage, below).
        open::refuse_store_topic_dir(dir.as_ref(), &|| !dir.as_ref().exists())?;
        Self::open_with_storage(Arc::new(FileStorage::open(dir, true)?), config)
    }

    /// Opens the topic kept in `storage` (for instance a
    /// [`MemStorage`](crate::storage::MemStorage)).
    pub fn open_with_storage(storage: Arc<dyn Storage>, config: LedgerConfig) -> Result<Self> {
        Self::open_hosting(storage, config, JournalConfig::default())
    }

    /// [`Self::open_with_storage`] with the settings of the cursor journal the topic hosts
    /// (for tests that make its segments roll over).
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn open_with_journal(
        storage: Arc<dyn Storage>,
        config: LedgerConfig,
        journal: JournalConfig,
    ) -> Result<Self> {
        Self::open_hosting(storage, config, journal)
    }

    /// Counters of the cursor journal this topic's cursors persist through: the one a topic
    /// opened alone hosts in its directory, or its store's.
    #[must_use]
    pub fn journal_stats(&self) -> Option<crate::journal::JournalStats> {
        self.core.journal.as_ref().map(|tj| tj.journal.stats())
    }

    /// Opens a topic of its own, which hosts the cursor journal its cursors persist through
    /// (`host.rs`), ticked by a flusher pool of one thread when cursors have a flush interval.
    fn open_hosting(
        storage: Arc<dyn Storage>,
        config: LedgerConfig,
        journal: JournalConfig,
    ) -> Result<Self> {
        let interval = config.cursor.flush_interval;
        let core = Arc::new(open::open(storage, config, None, (&[], 0), journal)?);
        core.install_id_source()?;
        core.install_journal_host()?;
        let flusher = interval.map(|_| Pool::new(1));
        if let Some(pool) = &flusher {
            pool.join(&core, interval)?;
        }
        Ok(Self { core, flusher })
    }

    /// The open durable cursors of this topic (for a store's flush tick).
    pub(crate) fn open_cursors(&self) -> Vec<Arc<crate::cursor::CursorShared>> {
        self.core
            .cursors()
            .values()
            .filter(|c| !c.is_closed())
            .cloned()
            .collect()
    }

    /// Opens topic `topic` of a store, kept in `storage` (the topic's view of the store's
    /// directory), whose cursors persist through the store's journal (`docs/persistence.md`,
    /// "Cursors of a store"). `store_id`: the store's id (its catalog's), which the topic
    /// record names as its host.
    pub(crate) fn open_in_store(
        storage: Arc<dyn Storage>,
        config: LedgerConfig,
        journal: TopicJournal,
        (recovered, store_id): (&[u64], u64),
    ) -> Result<Self> {
        let core = Arc::new(open::open(
            storage,
            config,
            Some(journal),
            (recovered, store_id),
            JournalConfig::default(),
        )?);
        core.install_id_source()?;
        Ok(Self {
            core,
            flusher: None,
        })
    }

    /// Appends one message stamped with the current time; returns its position.
    ///
    /// Not durable until [`Self::sync`]: after a crash it may be gone (with every entry after
    /// it), never altered.
    ///
    /// # Errors
    /// [`Error::EntryTooLarge`] over the log's maximum entry size (nothing is written).
    pub fn append(&self, payload: &[u8]) -> Result<Position> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.append_with(
            payload,
            AppendMeta {
                num_messages: 1,
                timestamp: now,
            },
        )
    }

    /// Appends one entry carrying `meta.num_messages` messages; returns its position. The
    /// entry's index is the index of its last message (the first message ever has index 0);
    /// its timestamp is `meta.timestamp`, raised to the previous entry's if smaller. Durability
    /// as [`Self::append`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `num_messages == 0`; [`Error::EntryTooLarge`].
    pub fn append_with(&self, payload: &[u8], meta: AppendMeta) -> Result<Position> {
        self.core.append(payload, meta.num_messages, meta.timestamp)
    }

    /// Reads the entry at `pos`, a readable entry: by default one a sync has made durable
    /// (see [`LedgerConfig::read_unsynced`]).
    ///
    /// # Errors
    /// [`Error::NoSuchEntry`] when `pos` is not a retained readable entry (appended but not
    /// synced yet, for one).
    pub fn read(&self, pos: Position) -> Result<Entry> {
        let log = self.core.log()?;
        if !self.core.layout().contains(pos) {
            return Err(Error::NoSuchEntry(pos));
        }
        match log.read(pos.ledger_id, pos.entry_id) {
            Ok(entry) => Ok(Entry::from_log(pos.ledger_id, entry)),
            // Trimmed since the check above.
            Err(Error::NoSuchLedger(_)) => Err(Error::NoSuchEntry(pos)),
            Err(e) => Err(e),
        }
    }

    /// The first retained readable entry; `None` when there is none.
    #[must_use]
    pub fn first_position(&self) -> Option<Position> {
        self.core.layout().first_entry()
    }

    /// The last readable entry (by default the last one a sync made durable, Pulsar's
    /// last-confirmed entry; see [`LedgerConfig::read_unsynced`]); `None` when there is none.
    /// A cursor opened at `Latest` reads the entry after it first; with `inclusive`, this one.
    #[must_use]
    pub fn last_position(&self) -> Option<Position> {
        self.core.layout().last_entry()
    }

    /// One past the index of the last readable message (0 on a new topic): `B` of the indexes
    /// `[A, B)` that `find_by_index` and `Cursor::seek_by_index` search.
    #[must_use]
    pub fn next_index(&self) -> u64 {
        self.core.layout().next_index()
    }

    /// Summaries of the retained data ledgers, oldest first (the last one may still be open),
    /// with every entry appended, synced or not: what the topic stores, not what readers see
    /// (see [`Self::last_position`]).
    #[must_use]
    pub fn ledgers(&self) -> Vec<LedgerSpan> {
        self.core.layouts().appended().spans().to_vec()
    }

    /// Makes every entry appended so far durable (fdatasync of the open ledger; sealed ones
    /// were synced when sealed). Survives power loss once it returns. The entries it covers
    /// become readable (a sync is what makes entries readable by default, as a seal does) and
    /// every waiting read wakes.
    ///
    /// # Errors
    /// [`Error::Fenced`] when a newer owner has opened the directory since this handle: the
    /// entries are durable, but that owner may not read them.
    pub fn sync(&self) -> Result<()> {
        self.core.sync()
    }

    /// Opens cursor `name` (any UTF-8 string), creating it when it does not exist. A new
    /// cursor starts as `options` says; an existing one ignores `options` and resumes from its
    /// persisted state (mark-delete, individual acks, epoch, properties; see
    /// `docs/cursors.md`, "Durability"). Opening a name that is already open returns another
    /// handle to the same cursor.
    ///
    /// Opening an existing cursor claims it: the recovered state is written to a fresh cursor
    /// ledger and the cursor record switched to it, so nothing a former owner still writes is
    /// ever read. The epoch is not changed.
    ///
    /// # Errors
    /// [`Error::Fenced`] when a newer owner has opened the directory since this handle.
    pub fn open_cursor(&self, name: &str, options: CursorOptions) -> Result<Cursor> {
        self.core.open_cursor(name, options)
    }

    /// Opens a non-durable cursor, what a Pulsar reader uses: it starts at `start` (with
    /// `options.inclusive` as for [`CursorOptions`]) and
    /// behaves like a durable cursor (reads, acks, seeks, properties, waiting reads) while
    /// open, but nothing of it is ever persisted: no metadata record, no cursor ledger, no
    /// entry in the topic record, `flush` writes nothing. It does not hold back
    /// [`Self::trim_consumed`]: entries it has not acknowledged may be trimmed, and it then
    /// reads on from the first retained entry. It is gone on `close` (of the cursor or the
    /// topic) and after a restart; it is not listed by [`Self::cursor_names`], and its `name`
    /// is a label only (two readers may share one, and a durable cursor of that name is a
    /// different cursor).
    ///
    /// # Errors
    /// [`Error::Closed`] once the topic is closed.
    pub fn open_non_durable_cursor(
        &self,
        start: InitialPosition,
        options: NonDurableOptions,
    ) -> Result<Cursor> {
        let cursor_options = CursorOptions {
            initial_position: start,
            inclusive: options.inclusive,
        };
        self.core
            .open_non_durable_cursor(options.name, cursor_options)
    }

    /// Deletes cursor `name`, its record and its cursor ledgers; open handles to it fail with
    /// [`Error::Closed`] afterwards.
    ///
    /// # Errors
    /// [`Error::NoSuchCursor`].
    pub fn delete_cursor(&self, name: &str) -> Result<()> {
        self.core.delete_cursor(name)
    }

    /// Names of every cursor, open or not, sorted.
    #[must_use]
    pub fn cursor_names(&self) -> Vec<String> {
        self.core.cursor_names()
    }

    /// The first entry whose message index is at least `index` (the entry holding message
    /// `index`), the first retained entry when `index` is older, `None` when no readable entry
    /// holds `index` yet (see [`Self::next_index`]). At most `ceil(log2 n) + 2` entry-header
    /// reads.
    pub fn find_by_index(&self, index: u64) -> Result<Option<Position>> {
        let log = self.core.log()?;
        finder::find_by_index(&log, &self.core.layout(), index)
    }

    /// The last readable entry whose timestamp is at most `timestamp`; `None` when every
    /// readable entry is younger. At most `ceil(log2 n) + 2` entry-header reads.
    pub fn find_by_timestamp(&self, timestamp: u64) -> Result<Option<Position>> {
        let log = self.core.log()?;
        finder::find_by_timestamp(&log, &self.core.layout(), timestamp)
    }

    /// Deletes the oldest data ledgers whose every entry every cursor has acknowledged (is at
    /// or before its mark-delete position), open cursors and closed ones alike; with no cursor
    /// at all, every ledger counts as consumed. The ledger holding the last entry is always
    /// kept. Returns the deleted ledger ids.
    ///
    /// The topic record is updated (compare-and-set) before any file is deleted; a crash in
    /// between leaves orphan files that the next open deletes.
    pub fn trim_consumed(&self) -> Result<Vec<u64>> {
        self.core.trim_consumed()
    }

    /// What the topic's entry log has done since open: appends, syncs, `fdatasync` calls, header
    /// and entry reads. [`Error::Closed`] once the topic is closed.
    pub fn log_stats(&self) -> Result<LogStats> {
        Ok(self.core.log()?.stats())
    }

    /// What opening the topic cut from ledger tails (torn frames, zero-filled tails, interrupted
    /// creates and seals) under [`crate::RecoveryMode::TolerateTail`]; empty after a clean
    /// shutdown. Each repair is also logged as a warning.
    pub fn recovery_report(&self) -> Result<Vec<TailRepair>> {
        Ok(self.core.log()?.recovery_report())
    }

    /// Ledgers that opened damaged (damage before the tail, see [`LedgerInfo::damaged`]). A
    /// data ledger the open reads (the one being appended to) refuses the topic's open when
    /// damaged, so these are cursor ledgers, whose cursors recovered from the newest state
    /// before the damage. A sealed data ledger is not read by the open: it opens on its first
    /// read, and damage in it is that read's error ([`Error::Corrupted`]), never listed here
    /// (`ackstore verify` reads every ledger, so it reports it before any read does); nor is
    /// damage at or past a data ledger's recorded count (its footer, bytes after it), which no
    /// read relies on: it is served, and `verify` warns of it.
    pub fn damaged_ledgers(&self) -> Result<Vec<LedgerInfo>> {
        Ok(self.core.log()?.damaged_ledgers())
    }

    /// The entry log underneath, for the command, benches and tests. The directory stays owned
    /// while the returned handle lives, even after [`Self::close`].
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn entry_log(&self) -> Result<Arc<EntryLog>> {
        self.core.log()
    }

    /// Reads of this topic's cursors now parked in `Cursor::read_entries_or_wait`, so a test
    /// can act while a read waits.
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    #[must_use]
    pub fn parked_reads(&self) -> usize {
        self.core.parked_reads()
    }

    /// Whether [`Self::close`] has begun (a store opens such a topic again on its next use,
    /// once this instance's last operation has ended).
    pub(crate) fn is_closed(&self) -> bool {
        self.core.is_closing() || self.core.log().is_err()
    }

    /// Closes every open cursor (each flushes its ack state), seals the open data ledger and
    /// releases the directory. Later calls fail with [`Error::Closed`]; closing twice is a
    /// no-op.
    ///
    /// The directory is released whatever the outcome. After a close that failed (a cursor's
    /// flush on a full disk, for instance: its acks since its last successful flush are lost),
    /// a later `close` returns [`Error::Closed`], never `Ok`.
    pub fn close(&self) -> Result<()> {
        // No tick of the topic's own flusher runs past this point, nor holds the topic.
        if let Some(pool) = &self.flusher {
            pool.stop();
        }
        self.core.close()
    }
}

impl Drop for ManagedLedger {
    fn drop(&mut self) {
        // Errors were already reported to a caller of `close`, or nobody is left to hear them.
        let _ = self.close();
    }
}

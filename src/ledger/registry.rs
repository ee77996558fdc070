//! The topic's cursors: creating, reopening and deleting them by name.
//!
//! Owns: the cursor table of the topic record (client name -> numeric id) and the order in
//! which cursor records and the table change, so a crash at any step leaves either the old or
//! the new cursor set (orphans are removed by the next open, see `open.rs`):
//! - create: write `cursor-{id}` (the new id is `next_cursor_id`), then the topic record that
//!   lists it (the commit point); on a store, the other way round (see `open_journal_cursor`);
//! - reopen: a cursor the journal holds is recovered from the journal's index; one on a cursor
//!   ledger, by `cursor::open` from the record and the cursor ledger it names, writing nothing,
//!   and its first write imports it into the journal (`cursor::import`: the journal commits
//!   the whole state, the record is switched, the ledger deleted);
//! - delete: write the topic record without it (the commit point), then delete `cursor-{id}`,
//!   then its cursor ledgers (the one the record names, and any an open handle holds) or its
//!   state in the journal (on a store, the record goes first).
//!
//! A new cursor persists through the journal (the store's, or the one a topic opened alone
//! hosts), in either form. A cursor read from a cursor ledger is read from it until its first
//! write imports it into the journal, in either form.
//!
//! Names are client data: they live inside records and never become file names.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::topic::TopicCore;
use super::topic::Writer;
use crate::ackset::{MemPartitionStore, RangeSetWrapper};
use crate::cursor::Fence;
use crate::cursor::import;
use crate::cursor::journal::{JournalCursor, TopicJournal};
use crate::cursor::open::CursorOpener;
use crate::cursor::recover::LedgerSource;
use crate::cursor::{
    self, Cursor, CursorOptions, CursorShared, CursorState, InitialPosition, Persistence,
    RecoverySource, TopicAccess,
};
use crate::error::{Error, Result};
use crate::format::cursor::PersistedState;
use crate::format::meta::{CursorEntry, CursorIdentity, CursorRecord};
use crate::observe::CursorLabels;

/// Where a store's cursor the cursor table lists starts again when its record is gone and the
/// journal holds nothing of it: a creation cut short between the table's write and the
/// record's (it never answered), or a deletion cut short after it removed the record (the
/// cursor is still listed, and answers for its subscription). Its state was its record alone
/// (it never flushed), holding its initial position at creation, which the options given now
/// may lie past (`Latest` after appends: every entry appended since would read as acknowledged,
/// and a trim could delete them). It starts at `Earliest`, acknowledging nothing a retained
/// entry holds: never more than either truth.
const RESTART_LISTED: CursorOptions = CursorOptions {
    initial_position: InitialPosition::Earliest,
    inclusive: false,
};

impl TopicCore {
    /// The ownership check a cursor's flushes run after their sync.
    fn fence(self: &Arc<Self>) -> Fence {
        let topic = Arc::downgrade(self);
        Fence(Arc::new(move || match topic.upgrade() {
            Some(topic) => TopicAccess::check_owner(topic.as_ref()),
            None => Err(Error::Closed),
        }))
    }

    /// Opens cursor `name`, creating it at `options` when it does not exist; see
    /// `ManagedLedger::open_cursor`.
    pub(crate) fn open_cursor(
        self: &Arc<Self>,
        name: &str,
        options: CursorOptions,
    ) -> Result<Cursor> {
        let mut w = self.writer();
        if self.is_closing() {
            return Err(Error::Closed);
        }
        if let Some(open) = self.cursors().get(name).filter(|c| !c.is_closed()) {
            return Ok(Cursor::from_shared(open.clone()));
        }
        let log = self.log()?;
        let listed = w.cursor_id(name);
        let id = listed.unwrap_or(w.record.next_cursor_id);
        let record_name = cursor::record_name(id);
        let identity = CursorIdentity {
            cursor_id: id,
            topic_id: w.record.topic_id,
        };
        if let Some(tj) = self.journal.clone()
            && listed.is_some()
            && tj.committed_state(id).is_some()
        {
            // A cursor that the journal holds is recovered from the journal alone: its record
            // is not even read (the journal knows it by its topic's catalog id and its own id,
            // never by a name).
            //
            // No ownership check here: the topic's open made it, after its last listing (the
            // store's check, or a topic of its own its record still at the claim's version),
            // and this reopen reads and writes no file: it answers from the journal's index as
            // the topic's open left it, as a cursor opened before a newer owner's claim does.
            // Every write the cursor makes later is checked where it is made (a tick runs the
            // owner's check after its sync, before anything counts as durable; a record write
            // is a compare-and-set bracketed by the store's check), so a fenced handle still
            // gets `Fenced` from its first flush, and never more acked than the truth.
            return self.open_journal_cursor(
                &mut w,
                name,
                options,
                (id, true),
                None,
                identity,
                &tj,
            );
        }
        let found = self.meta.get(&record_name)?;
        if !self.in_store {
            // A topic of its own writes a cursor's record before the topic record's
            // compare-and-set. This check, made after the record was read, keeps a fenced
            // handle from writing a record of an id a newer owner gives out: passed, the read
            // came before any newer claim, so a record it found was no newer owner's, and the
            // newer owner's claim, listing the directory after it, gives out no id of a
            // record it finds (`claim_topic`); one it does give out this handle can only
            // create (the compare-and-set from no record), never replace. On a store every
            // record write below is bracketed by the store's check (`meta::CheckedMeta`),
            // the topic record's first.
            self.check_owner(&w)?;
        }
        if !self.in_store && listed.is_some() && found.is_none() {
            // Listed, its record gone, and its journal holds nothing of it (checked above):
            // damage on a topic of its own, never a cursor to start again.
            return Err(super::open::lost_cursor_record(id));
        }
        // A record found under this cursor's name must be this cursor's: one moved or copied
        // here would hand it another cursor's state.
        if let (Some(_), Some((_, bytes))) = (listed, &found) {
            CursorRecord::decode(bytes)
                .map_err(|c| c.in_record(record_name.as_str()))?
                .check_identity(id, name, w.record.topic_id)?;
        }
        let on_ledger = found
            .as_ref()
            .map(|(_, bytes)| CursorRecord::decode(bytes))
            .transpose()
            .map_err(|c| c.in_record(record_name.as_str()))?
            .is_some_and(|r| r.cursor_ledger.is_some());
        // `ledger::open` sets the topic's journal before any cursor opens.
        let tj = self.journal.clone().ok_or(Error::Closed)?;
        // A cursor persists through its topic's journal (its store's, or the one a topic of its
        // own hosts), in either form, unless it was persisted in a cursor ledger before the
        // journal carried cursors (and the journal holds nothing of it): that one is read from
        // its cursor ledger until its first write imports it.
        let legacy = listed.is_some() && on_ledger && tj.committed_state(id).is_none();
        if !legacy {
            return self.open_journal_cursor(
                &mut w,
                name,
                options,
                (id, listed.is_some()),
                found,
                identity,
                &tj,
            );
        }
        // A reopen of a cursor on a cursor ledger the journal holds nothing of: it writes
        // nothing until its first write imports it (see `cursor::open`).
        let opener = CursorOpener::new(
            log,
            self.meta.clone(),
            &record_name,
            self.config.cursor.clone(),
        )
        .with_fence(self.fence())
        .with_identity(identity);
        let r = opener.reopen(&self.layout())?;
        let state = r.state;
        let persistence =
            self.ledger_persistence(r.ledger, (Some(r.source), r.changed), &tj, (id, name));
        let topic: Arc<dyn TopicAccess> = self.clone();
        let shared = CursorShared::new(id, name.into(), topic, state, persistence);
        shared.settle_import();
        self.cursors().insert(shared.shared_name(), shared.clone());
        Ok(Cursor::from_shared(shared))
    }

    /// How cursor `id`, `name`, read from the cursor ledger `ledger`, persists: a journal
    /// cursor of the topic's journal `tj` with a pending import, which its first write makes
    /// (the journal's flusher pool flushes it as any journal cursor), in either form.
    /// The move commits the whole state as the cursor's first chain, whatever its form, so
    /// every cold partition and partial entry has a journal copy before the ledger goes; a
    /// cursor opened for the single-entry form writes its first snapshot (under that form's
    /// range cap and overflow policy) at its next flush.
    fn ledger_persistence(
        &self,
        ledger: LedgerSource,
        (recovery_source, dirty): (Option<RecoverySource>, bool),
        tj: &TopicJournal,
        (id, name): (u64, &str),
    ) -> Persistence {
        let labels = CursorLabels::new(self.location.clone(), &cursor::record_name(id));
        let config = Arc::clone(&self.cursor_config);
        // Nothing of it is in the journal yet: the import stages a cursor of its own.
        let (jc, _) = JournalCursor::new(tj, (id, name), config, labels.clone());
        Persistence {
            persister: jc,
            recovery_source,
            dirty,
            import: Some(import::Pending::new(tj.clone(), (id, name), labels, ledger)),
            retiring: None,
        }
    }

    /// Opens cursor `id` of a store's topic, persisted through the store's journal: recovered
    /// from the journal's index (no read of its partitions, no write), or from its record when
    /// the journal holds nothing of it (created, never flushed), or created at `options` (its
    /// record, then the topic record that lists it). Reopening writes nothing: the store's
    /// claim fenced every former owner.
    #[allow(
        clippy::too_many_arguments,
        reason = "the parts of open_cursor's decision"
    )]
    fn open_journal_cursor(
        self: &Arc<Self>,
        w: &mut Writer,
        name: &str,
        options: CursorOptions,
        (id, listed): (u64, bool),
        found: Option<(u64, Vec<u8>)>,
        identity: CursorIdentity,
        tj: &TopicJournal,
    ) -> Result<Cursor> {
        let record_name = cursor::record_name(id);
        let config = Arc::clone(&self.cursor_config);
        let labels = CursorLabels::new(self.location.clone(), &record_name);
        let layout = self.layout().clone();
        let recovered = listed
            .then(|| JournalCursor::recover(tj, (id, name), config.clone(), labels.clone()))
            .transpose()?
            .flatten();
        let reopened = found.as_ref().filter(|_| listed).map(|(_, bytes)| bytes);
        let (state, jc, recovery_source, dirty) = if let Some((jc, persisted, sets)) = recovered {
            // The ack set and the partial entries, both as the journal committed them.
            let (acks, batch) = sets;
            let (state, changed) = CursorState::recovered(&persisted, &layout, acks, batch)?;
            let dirty = changed || jc.binds_no_name();
            let retiring = self.superseded_ledger(id, identity)?;
            return Ok(self.register_journal_cursor(
                id,
                name,
                state,
                (jc, Some(RecoverySource::Journal), dirty),
                retiring,
            ));
        } else if let Some(bytes) = reopened {
            // Created, never flushed: the record holds its state.
            let record =
                CursorRecord::decode(bytes).map_err(|c| c.in_record(record_name.as_str()))?;
            let (jc, acks) = JournalCursor::new(tj, (id, name), config, labels);
            let persisted = PersistedState {
                mark_delete: record.mark_delete,
                epoch: record.epoch,
                properties: record.properties.clone(),
            };
            let (state, changed) = CursorState::recovered(
                &persisted,
                &layout,
                acks,
                crate::cursor::recover::RecoveredBatch::default(),
            )?;
            (state, jc, Some(RecoverySource::Record), changed)
        } else {
            // A new cursor; or, on a store, one listed without a record (a topic of its own
            // refused it above), which starts again with nothing acknowledged
            // ([`RESTART_LISTED`]). A record found for an unlisted id was left by a creation
            // cut short and is replaced.
            let options = if listed { RESTART_LISTED } else { options };
            let mut state = CursorState::initial(&layout, options, cursor::detached_ack_set());
            let mut record = state.to_record(name);
            record.identity = Some(identity);
            let bytes = record.encode();
            // On a store, the table lists the cursor before its record is written: a record
            // the table does not list, of an id below the table's next one, is then never a
            // creation cut short, and the topic's open refuses it as a table that lost a
            // cursor. A crash in between leaves a listed cursor without a record, which starts
            // again here (so does a deletion cut short after it removed the record). A topic of
            // its own writes the record first and lists it last (the commit point), as for a
            // cursor ledger: its open deletes an unlisted record, and refuses a listed cursor
            // without one.
            let list = |w: &mut Writer| {
                if listed {
                    return Ok(());
                }
                let mut next = w.record.clone();
                next.cursors.push(CursorEntry {
                    name: name.into(),
                    id,
                });
                next.next_cursor_id = id + 1;
                self.commit(w, next)
            };
            let found = found.map(|(v, _)| v);
            if !self.in_store {
                self.put_new_record(w, &record_name, found, &bytes)?;
                list(w)?;
                let (jc, acks) = JournalCursor::new(tj, (id, name), config, labels);
                state.acks = acks;
                return Ok(self.register_journal_cursor(id, name, state, (jc, None, false), None));
            }
            list(w)?;
            self.put_new_record(w, &record_name, found, &bytes)?;
            let (jc, acks) = JournalCursor::new(tj, (id, name), config, labels);
            state.acks = acks;
            (state, jc, None, false)
        };
        Ok(self.register_journal_cursor(id, name, state, (jc, recovery_source, dirty), None))
    }

    /// Writes `bytes` as the record `record_name` of a cursor this owner creates, over
    /// `found`, the version read before the owner check (`None`: no record). A former owner
    /// that passed its own check before this owner's claim may create a record of the id
    /// after that read (its creation is then fenced at the topic record, or on a store by the
    /// store's check): the compare-and-set fails, and, this owner's check passing, the record
    /// there is that former owner's, which no table lists, and this owner's replaces it.
    fn put_new_record(
        &self,
        w: &Writer,
        record_name: &str,
        found: Option<u64>,
        bytes: &[u8],
    ) -> Result<()> {
        match self.meta.put(record_name, found, bytes) {
            Err(Error::Fenced { .. }) if self.check_owner(w).is_ok() => {
                let now = self.meta.get(record_name)?.map(|(v, _)| v);
                self.meta.put(record_name, now, bytes).map(drop)
            }
            written => written.map(drop),
        }
    }

    /// The retirement of the cursor ledger that cursor `id`'s record still names although the
    /// journal holds its state (an import a power cut interrupted after the journal's commit,
    /// found by the topic's open): its next write switches the record and deletes the ledger.
    /// `None` for every other cursor.
    fn superseded_ledger(
        self: &Arc<Self>,
        id: u64,
        identity: CursorIdentity,
    ) -> Result<Option<import::Retirement>> {
        let Some(ledger) = crate::sync::lock(&self.superseded).remove(&id) else {
            return Ok(None);
        };
        import::Retirement::read(
            (self.meta.clone(), &cursor::record_name(id)),
            (self.fence(), identity),
            self.log()?,
            ledger,
        )
        .map(Some)
    }

    /// Registers the open journal cursor `id`, `name` with `state`.
    fn register_journal_cursor(
        self: &Arc<Self>,
        id: u64,
        name: &str,
        state: CursorState,
        (jc, recovery_source, dirty): (JournalCursor, Option<RecoverySource>, bool),
        retiring: Option<import::Retirement>,
    ) -> Cursor {
        let persistence = Persistence {
            persister: jc,
            recovery_source,
            dirty,
            import: None,
            retiring,
        };
        let topic: Arc<dyn TopicAccess> = self.clone();
        let shared = CursorShared::new(id, name.into(), topic, state, persistence);
        self.cursors().insert(shared.shared_name(), shared.clone());
        Cursor::from_shared(shared)
    }

    /// Opens a non-durable cursor (a reader) at `options`; see
    /// `ManagedLedger::open_non_durable_cursor`. Nothing is written: no record, no cursor
    /// ledger, no entry in the topic record.
    pub(crate) fn open_non_durable_cursor(
        self: &Arc<Self>,
        name: String,
        options: CursorOptions,
    ) -> Result<Cursor> {
        /// Ids of non-durable cursors, for their `Debug` output only; they name no record.
        static NEXT_READER: AtomicU64 = AtomicU64::new(1 << 63);
        self.log()?;
        // Ack state of a reader lives in memory only; its evicted partitions are kept encoded
        // in memory, so the resident part still keeps to the budget.
        let acks = RangeSetWrapper::new(
            Box::new(MemPartitionStore::new()),
            self.config.cursor.lru_capacity_bytes,
        );
        let state = CursorState::initial(&self.layout(), options, acks);
        let topic: Arc<dyn TopicAccess> = self.clone();
        let id = NEXT_READER.fetch_add(1, Ordering::Relaxed);
        let shared = CursorShared::new_non_durable(id, name, topic, state);
        if let Some(budget) = &self.config.cursor.ack_memory {
            shared.join_budget(budget);
        }
        let mut readers = self.readers();
        // A reader dropped without a close leaves a dead entry: they are swept when the map
        // is full, and it then grows to twice the live readers, so the sweep costs amortised
        // O(1) per open and dead entries stay fewer than the live ones.
        if readers.len() >= readers.capacity() {
            readers.retain(|_, r| r.upgrade().is_some_and(|r| !r.is_closed()));
            let live = readers.len();
            readers.reserve(live.max(16));
        }
        readers.insert(id, Arc::downgrade(&shared));
        drop(readers);
        // A close that ran meanwhile did not see this reader: refuse it rather than leave it
        // open on a closed topic.
        if self.log().is_err() {
            let _ = shared.close();
            return Err(Error::Closed);
        }
        Ok(Cursor::from_shared(shared))
    }

    /// Deletes cursor `name`: its record, its cursor ledger, and every open handle to it.
    pub(crate) fn delete_cursor(&self, name: &str) -> Result<()> {
        let log = self.log()?;
        let mut w = self.writer();
        let Some(id) = w.cursor_id(name) else {
            return Err(Error::NoSuchCursor {
                name: name.to_owned(),
            });
        };
        let record_name = cursor::record_name(id);
        let found = self.meta.get(&record_name)?;
        let mut record = w.record.clone();
        record.cursors.retain(|c| c.id != id);
        if self.in_store {
            // On a store, the cursor's record goes first (each write checks the store's
            // ownership), then its entry in the cursor table, then its state in the journal:
            // a cursor the table does not list whose record is still there was dropped from
            // the table by something other than a deletion, and the topic's open refuses it
            // rather than let that cursor's state go (`ledger::open`).
            if let Some((version, _)) = &found {
                self.meta.delete(&record_name, *version)?;
            }
            self.commit(&mut w, record)?;
        } else {
            // On a topic of its own, the topic record's compare-and-set is the ownership
            // check: it comes before the cursor's record is touched.
            self.commit(&mut w, record)?;
            if let Some((version, _)) = &found {
                self.meta.delete(&record_name, *version)?;
            }
        }
        // Not under the `cursors` lock: detaching takes the cursor's own lock.
        let open = self.cursors().remove(name);
        let persister = open.and_then(|open| open.detach());
        if let Some((_, bytes)) = found
            && let Some(ledger) = CursorRecord::decode(&bytes)
                .map_err(|c| c.in_record(record_name.as_str()))?
                .cursor_ledger
        {
            match log.delete_ledger(ledger) {
                Ok(()) | Err(Error::NoSuchLedger(_)) => {}
                Err(e) => return Err(e),
            }
        }
        // An open cursor may also hold a ledger its record does not name yet (created by an
        // eviction or a rollover not yet committed) and old ones whose deletion failed; or its
        // state in the store's journal, which a closed cursor keeps too.
        let open_in_journal = persister.is_some();
        if let Some(tj) = &self.journal
            && (open_in_journal || tj.committed_state(id).is_some())
        {
            tj.journal.forget(tj.cursor_id(id))?;
        }
        Ok(())
    }

    /// Names of every cursor, open or not, sorted.
    pub(crate) fn cursor_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .writer()
            .record
            .cursors
            .iter()
            .map(|c| c.name.to_string())
            .collect();
        names.sort();
        names
    }
}

//! Importing a cursor read from a cursor ledger into its topic's journal.
//!
//! Owns: what moves a cursor whose record names a cursor ledger (every directory an earlier
//! release wrote) into the journal its topic hosts (its store's, or its own), and the retirement
//! of that ledger once the journal holds the cursor. Such a cursor opens read-only from its
//! ledger (`CursorOpener::reopen`, nothing written): a journal cursor with a pending import,
//! whose ack set and partial entries load from the ledger; its first write is the import, in
//! three steps (see `docs/persistence.md`, "Cursor ledgers: read and imported"):
//! 1. *stage*: the whole state (mark-delete, epoch, properties, every live partition, every
//!    partial entry) is staged into a journal tick as a new journal cursor's first marker, and
//!    the cursor persists through the journal from then on ([`Pending::stage`]). In either
//!    form: a cursor of the single-entry form is staged as a chain too (partitions, batch
//!    records, marker), so every partition and partial entry that was cold in the ledger has a
//!    journal copy its later loads read (a snapshot references none); its next flush commits a
//!    snapshot record, newer than that chain;
//! 2. *commit*: the tick syncs; from then on a reopen recovers the cursor from the journal (a
//!    journal state of a cursor wins over its record, whatever the record names);
//! 3. *retire*: the record is switched to the form a new journal cursor's record has (no cursor
//!    ledger, by compare-and-set), then the ledger is deleted ([`Retirement::retire`]).
//!
//! A power cut before step 2 leaves the ledger's state; after it, the journal's, which is the
//! same state or, for a seek, the seek's target. A ledger a cut left behind step 2 is retired by
//! the cursor's next write after a reopen (the topic's open finds it,
//! `TopicCore::superseded`); one left after the record's switch is an orphan, deleted by the
//! topic's next open (rule 3 of `ledger::open`).
//!
//! Must never: switch the record before the journal committed the cursor's state, delete the
//! ledger before the record's switch, or leave a partition or partial entry of the cursor
//! whose only copy is in the ledger once the cursor loads from the journal.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::cursor::PersistedState;
use crate::journal::Tick;
use crate::log::EntryLog;
use crate::observe::CursorLabels;

use super::batch::BatchAcks;
use super::config::CursorConfig;
use super::journal::{JournalCursor, TopicJournal};
use super::record::{Fence, RecordOwner, read_record};
use super::recover::LedgerSource;
use super::stats::PersistStats;
use crate::ackset::RangeSetWrapper;
use crate::format::meta::CursorIdentity;
use crate::meta::MetaStore;

/// Compare-and-set attempts of a record switch that a former owner's record write refused
/// while the topic is still this owner's.
const SWITCH_ATTEMPTS: u32 = 3;

/// A cursor read from a cursor ledger whose first write moves it into the journal of `topic`.
#[derive(Debug)]
pub(crate) struct Pending {
    topic: TopicJournal,
    /// The cursor's id in the topic's cursor table.
    cursor: u64,
    name: String,
    labels: CursorLabels,
    /// The record and the ledger the cursor was read from, retired once it is imported.
    source: LedgerSource,
}

impl Pending {
    /// The import of cursor `cursor`, `name` of the topic whose journal is `topic`, read from
    /// `source`.
    pub(crate) fn new(
        topic: TopicJournal,
        (cursor, name): (u64, &str),
        labels: CursorLabels,
        source: LedgerSource,
    ) -> Self {
        Self {
            topic,
            cursor,
            name: name.to_owned(),
            labels,
            source,
        }
    }

    /// What the cursor's figures report until the import: the ledger it is read from.
    pub(crate) fn stats(&self) -> PersistStats {
        self.source.stats()
    }

    /// The retirement of the ledger the cursor was read from, once it is imported.
    pub(crate) fn into_retirement(self) -> Retirement {
        let (record, log, ledgers) = self.source.into_parts();
        Retirement::new(record, log, ledgers)
    }

    /// Step 1 of the import: stages `state` with every ack of `acks` and every partial entry of
    /// `batch` into `tick` as the first marker of a new journal cursor, which it returns. Cold
    /// partial entries are loaded first (from the cursor ledger); every live partition is
    /// written, since the journal holds none of the cursor's, whatever the cursor's form
    /// ([`JournalCursor::stage_chain`]). Nothing is staged on an error.
    ///
    /// The caller installs the returned cursor ([`install`]) once `acks` and `batch` are the
    /// cursor's own and staged, or once the tick committed for a seek's (whose acks are not the
    /// cursor's).
    pub(crate) fn stage(
        &self,
        tick: &mut Tick<'_>,
        config: Arc<CursorConfig>,
        state: &PersistedState,
        (acks, batch): (&mut RangeSetWrapper, &mut BatchAcks),
    ) -> Result<JournalCursor> {
        let (mut jc, _) = JournalCursor::new(
            &self.topic,
            (self.cursor, &self.name),
            config,
            self.labels.clone(),
        );
        batch.warm()?;
        jc.stage_chain(tick, state, acks, batch)?;
        Ok(jc)
    }
}

/// Makes `acks` and `batch` (a cursor's own, staged into the journal by [`Pending::stage`] or
/// cleared by a seek that committed) load from and evict to the journal of `jc`.
pub(crate) fn install(jc: &JournalCursor, acks: &mut RangeSetWrapper, batch: &mut BatchAcks) {
    acks.replace_store(jc.partition_store());
    batch.set_store(jc.batch_store());
    acks.resume_stores();
    batch.resume_stores();
}

/// A cursor ledger the journal superseded: once the journal committed the cursor's state, the
/// record is switched to the journal's form and the ledger deleted.
#[derive(Debug)]
pub(crate) struct Retirement {
    /// The cursor's record as this handle holds it, with its fence and identity.
    record: RecordOwner,
    log: Arc<EntryLog>,
    /// The cursor ledgers to delete once the record no longer names any of them.
    ledgers: Vec<u64>,
}

impl Retirement {
    /// The retirement of `ledgers`, the cursor ledgers of the cursor whose record `record` holds.
    pub(crate) fn new(record: RecordOwner, log: Arc<EntryLog>, ledgers: Vec<u64>) -> Self {
        Self {
            record,
            log,
            ledgers,
        }
    }

    /// The retirement of `ledger`, superseded by the journal's state of the cursor whose
    /// record is `record_name` in `meta` (read now: the version this handle writes on, the
    /// ledger it names deleted too), written with `fence` and `identity`.
    ///
    /// # Errors
    /// Those of reading and decoding the record.
    pub(crate) fn read(
        (meta, record_name): (Arc<dyn MetaStore>, &str),
        (fence, identity): (Fence, CursorIdentity),
        log: Arc<EntryLog>,
        ledger: u64,
    ) -> Result<Self> {
        let read = read_record(meta.as_ref(), record_name)?;
        let mut record = RecordOwner::new(meta, record_name.to_owned(), read);
        record.set_fence(fence);
        record.set_identity(identity);
        let mut ledgers = vec![ledger];
        ledgers.extend(record.ledger().filter(|l| *l != ledger));
        Ok(Self::new(record, log, ledgers))
    }

    /// Step 3 of the import (`committed`: the cursor's state as the journal committed it, which
    /// the record keeps as its fallback): switches the record to no cursor ledger by
    /// compare-and-set, then deletes the ledgers. A record a former owner's write replaced
    /// after this handle read it is read again and switched while the fence says the topic is
    /// still this owner's (the ledger it names then is deleted too).
    ///
    /// # Errors
    /// [`Error::Fenced`] once another owner claimed the topic (nothing switched or deleted); a
    /// failed record write (the ledger kept; a later write retries); a failed deletion (the
    /// record switched: the topic's next open deletes the ledger as an orphan).
    pub(crate) fn retire(&mut self, committed: &PersistedState) -> Result<()> {
        let mut attempts = 1;
        while self.record.ledger().is_some() {
            match self.record.put_without_ledger(committed) {
                Ok(()) => {}
                Err(Error::Fenced { .. })
                    if attempts < SWITCH_ATTEMPTS && !self.record.is_latched() =>
                {
                    attempts += 1;
                    self.record.check_fence()?;
                    self.record.adopt_current()?;
                    if let Some(l) = self.record.ledger() {
                        self.ledgers.push(l);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        while let Some(&ledger) = self.ledgers.last() {
            match self.log.delete_ledger(ledger) {
                Ok(()) | Err(Error::NoSuchLedger(_)) => {
                    self.ledgers.pop();
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

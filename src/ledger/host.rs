//! A topic opened alone as the host of its own cursor journal.
//!
//! Owns: the journal's segments in the topic's directory as the topic record lists them
//! ([`HostedJournal`], format version 2 of the record), the way a store's catalog lists the
//! store's journal (`crate::store`): the open claims the topic record (`open.rs`, rule 0),
//! opens the journal with the listed segments and seals, seals the newest segment at its
//! verified end and records the seal by a compare-and-set (not when the last clean close
//! recorded that segment at that length: its writer closed it); from then on the journal's
//! hooks list a new segment and unlist a rolled-over one by compare-and-set of the topic record,
//! and its owner check is the topic's (the record still at the version this handle wrote).
//! A clean close records the newest segment's synced length. The journal's ticks run on a
//! flusher pool of one thread ([`Ticked`]) that the topic's handle owns and stops before the
//! topic closes.
//!
//! Must never: write into the journal before its hooks are set (a segment created unlisted is
//! damage to every later open), or change the listing except by compare-and-set of the topic
//! record at this handle's version.

use std::sync::{Arc, Weak};

use super::topic::{TOPIC_RECORD, TopicCore};
use crate::cursor::journal::TopicJournal;
use crate::error::{Error, Result};
use crate::format::meta::{HostedJournal, TopicRecord};
use crate::format::store::{CatalogSeal, list_segment, record_seal, retire_segment};
use crate::journal::flusher::Ticked;
use crate::journal::{Journal, JournalConfig, Listed, OwnerCheck, Seal, SegmentHooks};
use crate::meta::MetaStore;
use crate::storage::Storage;
use crate::sync::lock;

/// The topic id of every cursor of a journal a topic opened alone hosts (it holds one topic).
pub(crate) const HOSTED_TOPIC: u64 = 0;

/// Opens the journal the topic kept in `storage` hosts, as `record` (claimed at `version`)
/// lists it, seals its newest segment and records the seal (`record` and `version` are then
/// the record written); returns it, with no hooks yet, and the ids of the cursors it holds a
/// state of.
pub(crate) fn open_hosted(
    storage: Arc<dyn Storage>,
    config: JournalConfig,
    meta: &dyn MetaStore,
    (record, version): (&mut TopicRecord, &mut u64),
) -> Result<(TopicJournal, Vec<u64>)> {
    let listing = record.journal.clone().unwrap_or_default();
    let seals: Vec<Seal> = listing.seals.iter().map(|s| Seal::from(*s)).collect();
    let journal = Journal::open_listed(
        storage,
        config,
        &seals,
        Some(Listed {
            segments: &listing.segments,
            retired_through: listing.retired_through,
            closed: listing.closed.map(Seal::from),
        }),
    )?;
    let recovered = journal
        .cursors()
        .into_iter()
        .filter(|c| c.topic == HOSTED_TOPIC)
        .map(|c| c.cursor)
        .collect();
    let seal = journal.seal_tail();
    let segments = journal.segments();
    let mut next = listing;
    let seal = CatalogSeal {
        segment: seal.segment,
        len: seal.len,
    };
    // A seal at the length the last clean close recorded is not recorded: the segment's
    // writer closed it, and no owner appends to a segment it did not create (the store's
    // catalog does the same: docs/format.md, "Claim and seal").
    if next.closed != Some(seal) {
        record_seal(&mut next.seals, seal, &segments);
    }
    next.segments = segments;
    // A topic whose journal never held a segment keeps a record of version 1.
    let listed = (record.journal.is_some() || next != HostedJournal::default()).then_some(next);
    if listed != record.journal {
        let mut sealed = record.clone();
        sealed.journal = listed;
        *version = meta.put(TOPIC_RECORD, Some(*version), &sealed.encode())?;
        *record = sealed;
    }
    Ok((
        TopicJournal {
            journal: Arc::new(journal),
            topic: HOSTED_TOPIC,
            name: "".into(),
        },
        recovered,
    ))
}

/// Runs `f` on the topic `held` (the journal's hooks hold it weakly: a dropped topic's
/// journal refuses with [`Error::Closed`]).
fn on_topic<T>(held: &Weak<TopicCore>, f: impl FnOnce(&TopicCore) -> Result<T>) -> Result<T> {
    f(held.upgrade().ok_or(Error::Closed)?.as_ref())
}

/// Edits the journal listing of the topic record by compare-and-set.
fn edit_listing(topic: &TopicCore, edit: impl FnOnce(&mut HostedJournal)) -> Result<()> {
    topic.edit_record(|r| {
        edit(r.journal.get_or_insert_with(HostedJournal::default));
        Ok(())
    })
}

impl TopicCore {
    /// For a topic opened alone: sets the hooks and the owner check of the journal it hosts,
    /// then forgets the cursors its open found deleted but not forgotten.
    pub(crate) fn install_journal_host(self: &Arc<Self>) -> Result<()> {
        let Some(tj) = self.journal.as_ref().filter(|_| !self.in_store) else {
            return Ok(());
        };
        let held = Arc::downgrade(self);
        tj.journal.set_owner_check(OwnerCheck(Arc::new({
            let held = held.clone();
            move || on_topic(&held, crate::cursor::TopicAccess::check_owner)
        })));
        let hook = |edit: fn(&mut HostedJournal, u64)| {
            let held = held.clone();
            Arc::new(move |seq: u64| on_topic(&held, |t| edit_listing(t, |j| edit(j, seq))))
        };
        tj.journal.set_segment_hooks(SegmentHooks {
            created: hook(|j, seq| list_segment(&mut j.segments, seq)),
            deleted: hook(|j, seq| {
                retire_segment(
                    seq,
                    Some(&mut j.segments),
                    (&mut j.retired_through, &mut j.closed, &mut j.seals),
                );
            }),
            listed: Arc::new(move |seq: u64| {
                on_topic(&held, |t| {
                    Ok(t.committed_if_current()?.map(|r| {
                        r.journal
                            .is_some_and(|j| j.segments.binary_search(&seq).is_ok())
                    }))
                })
            }),
        });
        let cut_short = std::mem::take(&mut *lock(&self.forget_at_open));
        for id in cut_short {
            tj.journal.forget(tj.cursor_id(id))?;
        }
        Ok(())
    }

    /// For a topic opened alone, at its clean close: records the newest segment of its journal
    /// and the length of it a sync covered (what a later open checks an older copy against).
    pub(crate) fn record_journal_close(&self) -> Result<()> {
        let Some(tj) = self.journal.as_ref().filter(|_| !self.in_store) else {
            return Ok(());
        };
        let Some(tail) = tj.journal.synced_tail() else {
            return Ok(());
        };
        edit_listing(self, |j| {
            j.closed = Some(CatalogSeal {
                segment: tail.segment,
                len: tail.len,
            });
        })
    }
}

impl Ticked for TopicCore {
    /// One flush tick over every open cursor of a topic opened alone: each is staged under its
    /// own lock, then the tick commits (one sync for all) without any cursor's lock. The tick
    /// is begun before the cursors are listed, so a cursor that closes meanwhile either closed
    /// before (its close committed a tick of its own) or is staged here.
    fn tick(&self) {
        let Some(tj) = &self.journal else {
            return;
        };
        let mut tick = tj.journal.begin_tick();
        let cursors: Vec<_> = self.cursors().values().cloned().collect();
        for cursor in &cursors {
            // A failure is kept for the cursor's next `flush` or `close`.
            let _ = cursor.stage_into(&mut tick, true);
        }
        if let Err(e) = tick.commit() {
            ::log::warn!(target: crate::observe::LOG_TARGET,
                "{}: a flush tick of the topic's cursors failed; the next tick writes them \
                 again: {}", self.location, e.with_sources());
        }
    }
}

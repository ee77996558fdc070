//! Opening a cursor's persistence: recovering it, or starting it empty, and claiming it.
//!
//! Owns: the order of the steps that open a cursor, for the managed ledger and for anything
//! else that opens a cursor record directly. [`CursorOpener`] names the record and the handles;
//! every persister it hands out carries its fence and identity before it writes anything.
//!
//! - `CursorOpener::reopen`: recover and resolve the state against the topic's layout,
//!   with the claim deferred to the first write (`CursorPersister::defer_claim`), so the
//!   cursor answers (mark-delete, first unacked entry, is-acked, reads) without a write or a
//!   sync. The recovered cursor ledger is only read from then on; the first flush (or seek)
//!   moves the state into the topic's journal (`super::import`), or, for a cursor kept on a
//!   cursor ledger, writes it to a fresh cursor ledger and switches the record to it by
//!   compare-and-set. A previous owner that lost the directory without knowing it is fenced
//!   already: the topic's open claimed the topic record and every cursor record, so its next
//!   record write fails and its flushes end with `Error::Fenced`; whatever it still appends
//!   to the recovered ledger lies past what this owner read (verified by CRC), and never
//!   reaches the ledger this owner writes. A previous owner's record write that slipped in
//!   after this owner read the record (it checked the topic just before this owner's claim
//!   of it) is settled by the first write: there is at most one such write in flight per
//!   previous handle.
//!
//! Must never: hand out a persister without the fence and identity it was given, or write the
//! record except by compare-and-set.

use std::sync::Arc;

use crate::error::Result;
use crate::finder::Layout;
use crate::format::meta::CursorIdentity;
use crate::log::EntryLog;
use crate::meta::MetaStore;

use super::config::CursorConfig;
use super::persist::CursorPersister;
use super::record::Fence;
use super::recover::{RecoveredCursor, RecoverySource, recover};
use super::state::CursorState;

/// Where a cursor's persistence lives, and the checks every write of it carries.
#[derive(Debug, Clone)]
pub struct CursorOpener {
    log: Arc<EntryLog>,
    meta: Arc<dyn MetaStore>,
    record_name: String,
    config: CursorConfig,
    fence: Option<Fence>,
    identity: Option<CursorIdentity>,
}

/// A cursor reopened by `CursorOpener::reopen`: its state resolved against the topic, its
/// claim deferred to the first write.
pub(crate) struct ReopenedCursor {
    pub state: CursorState,
    pub persister: CursorPersister,
    pub source: RecoverySource,
    /// Resolving the state changed it (acks of entries that no longer exist were dropped):
    /// the next flush has something to write.
    pub changed: bool,
}

impl CursorOpener {
    /// An opener of record `record_name` (`cursor-{id}`) in `meta`, whose cursor ledgers live
    /// in `log`; no fence and no identity.
    #[must_use]
    pub fn new(
        log: Arc<EntryLog>,
        meta: Arc<dyn MetaStore>,
        record_name: &str,
        config: CursorConfig,
    ) -> Self {
        Self {
            log,
            meta,
            record_name: record_name.to_owned(),
            config,
            fence: None,
            identity: None,
        }
    }

    /// Every persister this opener hands out runs `fence` (see [`CursorPersister::set_fence`]).
    #[must_use]
    pub fn with_fence(mut self, fence: Fence) -> Self {
        self.fence = Some(fence);
        self
    }

    /// Every record this opener's persisters write carries `identity` (see
    /// [`CursorPersister::set_identity`]).
    #[must_use]
    pub fn with_identity(mut self, identity: CursorIdentity) -> Self {
        self.identity = Some(identity);
        self
    }

    /// Gives `persister` this opener's fence and identity.
    fn prepare(&self, persister: &mut CursorPersister) {
        if let Some(fence) = &self.fence {
            persister.set_fence(fence.clone());
        }
        if let Some(identity) = self.identity {
            persister.set_identity(identity);
        }
    }

    /// Recovers the cursor from its record (see [`recover`]).
    ///
    /// # Errors
    /// [`Error::NoSuchCursor`] when there is no record; as [`recover`] otherwise.
    pub fn recover(&self) -> Result<RecoveredCursor> {
        let mut recovered = recover(
            Arc::clone(&self.log),
            Arc::clone(&self.meta),
            &self.record_name,
            self.config.clone(),
        )?;
        self.prepare(&mut recovered.persister);
        Ok(recovered)
    }

    /// Recovers the cursor and resolves its state against `layout`, writing nothing: the
    /// claim waits for the first write (see the module docs). Evictions keep unsaved partitions
    /// resident until then.
    pub(crate) fn reopen(&self, layout: &Layout) -> Result<ReopenedCursor> {
        let RecoveredCursor {
            state,
            mut acks,
            mut persister,
            mut batch,
            report,
        } = self.recover()?;
        persister.defer_claim();
        acks.hold_stores();
        batch.hold_stores();
        let (state, changed) = CursorState::recovered(&state, layout, acks, batch)?;
        Ok(ReopenedCursor {
            state,
            persister,
            source: report.source,
            changed,
        })
    }
}

//! Opening a cursor read from its cursor ledger.
//!
//! Owns: the order of the steps that open a cursor whose record names a cursor ledger the
//! journal holds nothing of (every directory an earlier release wrote). [`CursorOpener`] names
//! the record and the handles; the record it hands out carries its fence and identity before
//! the import writes it.
//!
//! - `CursorOpener::reopen`: recover and resolve the state against the topic's layout, writing
//!   nothing, so the cursor answers (mark-delete, first unacked entry, is-acked, reads) without
//!   a write or a sync. The ledger is only read from then on (the ack set and the partial
//!   entries hold their stores); the first flush (or seek) moves the state into the topic's
//!   journal (`super::import`). A previous owner that lost the directory without knowing it is
//!   fenced already: the topic's open claimed the topic record and every cursor record, so its
//!   next write fails with `Error::Fenced`. A cursor of the single-entry form read from a
//!   single-entry snapshot with more ranges than its range cap is refused here under
//!   `OverflowPolicy::Error` (`Error::LimitExceeded`), and warned of under `Warn`
//!   (`snapshot::check_imported_snapshot`), before anything else reads the ledger.
//!
//! Must never: hand out a record without the fence and identity it was given, or write.

use std::sync::Arc;

use crate::error::Result;
use crate::finder::Layout;
use crate::format::meta::CursorIdentity;
use crate::log::EntryLog;
use crate::meta::MetaStore;
use crate::observe::CursorLabels;

use super::config::{CursorConfig, PersistMode};
use super::record::Fence;
use super::recover::{LedgerSource, RecoveredCursor, RecoverySource, recover};
use super::snapshot::check_imported_snapshot;
use super::state::CursorState;

/// Where a cursor ledger's cursor lives, and the checks every later write of its record carries.
#[derive(Debug, Clone)]
pub struct CursorOpener {
    log: Arc<EntryLog>,
    meta: Arc<dyn MetaStore>,
    record_name: String,
    config: CursorConfig,
    fence: Option<Fence>,
    identity: Option<CursorIdentity>,
}

/// A cursor reopened by `CursorOpener::reopen`: its state resolved against the topic, read
/// from its ledger until its first write imports it.
pub(crate) struct ReopenedCursor {
    pub state: CursorState,
    pub ledger: LedgerSource,
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

    /// Every write of the record this opener hands out runs `fence` after it.
    #[must_use]
    pub fn with_fence(mut self, fence: Fence) -> Self {
        self.fence = Some(fence);
        self
    }

    /// Every record written from what this opener hands out carries `identity`.
    #[must_use]
    pub fn with_identity(mut self, identity: CursorIdentity) -> Self {
        self.identity = Some(identity);
        self
    }

    /// Recovers the cursor from its record (see [`recover`]), its record given this opener's
    /// fence and identity.
    ///
    /// # Errors
    /// [`Error::NoSuchCursor`](crate::error::Error::NoSuchCursor) when there is no record; as
    /// [`recover`] otherwise.
    pub fn recover(&self) -> Result<RecoveredCursor> {
        let mut recovered = recover(
            Arc::clone(&self.log),
            Arc::clone(&self.meta),
            &self.record_name,
            &self.config,
        )?;
        if let Some(fence) = &self.fence {
            recovered.source.set_fence(fence.clone());
        }
        if let Some(identity) = self.identity {
            recovered.source.set_identity(identity);
        }
        Ok(recovered)
    }

    /// Recovers the cursor and resolves its state against `layout`, writing nothing (see the
    /// module docs). Evictions keep unsaved partitions resident until the import.
    pub(crate) fn reopen(&self, layout: &Layout) -> Result<ReopenedCursor> {
        let RecoveredCursor {
            state,
            mut acks,
            source,
            mut batch,
            report,
        } = self.recover()?;
        if let (PersistMode::SingleEntry, Some(ranges)) =
            (self.config.persist_mode, source.snapshot_ranges())
        {
            let labels = CursorLabels::new(self.log.storage().location().into(), &self.record_name);
            check_imported_snapshot(ranges, &self.config, &labels)?;
        }
        acks.hold_stores();
        batch.hold_stores();
        let (state, changed) = CursorState::recovered(&state, layout, acks, batch)?;
        Ok(ReopenedCursor {
            state,
            ledger: source,
            source: report.source,
            changed,
        })
    }
}

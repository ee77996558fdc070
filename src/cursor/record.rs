//! The cursor record as one cursor handle owns it.
//!
//! Owns: reading the record (`cursor-{id}`), writing it by compare-and-set on the version this
//! handle last read or wrote (the import's switch to no cursor ledger, `import.rs`), the fence
//! a write ends with, and the failure latch.
//!
//! Invariants:
//! - every write is a compare-and-set on the version held here, so a write after another owner
//!   wrote the record fails with [`Error::Fenced`] and changes nothing;
//! - after a failed write whose outcome is unknown (the store no longer holds the version held
//!   here, or cannot say), the handle latches: every later write fails with
//!   [`Error::PreviousIo`] until the cursor is reopened and reads what is durable;
//! - the identity set here (cursor id, topic id) is written into every record, so a record
//!   found under another cursor's name or in another topic is refused on open.
//!
//! Must never: write the record except by compare-and-set, or write after the latch.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::cursor::PersistedState;
use crate::format::meta::{CursorIdentity, CursorRecord};
use crate::meta::MetaStore;

/// An ownership check: [`Error::Fenced`] once a newer owner has claimed the topic.
#[derive(Clone)]
pub struct Fence(pub Arc<dyn Fn() -> Result<()> + Send + Sync>);

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fence")
    }
}

/// A cursor record as read from or written to the metadata store, with the version a
/// compare-and-set of it must name.
#[derive(Debug, Clone)]
pub(crate) struct VersionedRecord {
    pub version: u64,
    pub record: CursorRecord,
}

/// Reads and decodes the record `name`, if it exists.
pub(crate) fn read_record(meta: &dyn MetaStore, name: &str) -> Result<Option<VersionedRecord>> {
    meta.get(name)?
        .map(|(version, bytes)| {
            Ok(VersionedRecord {
                version,
                record: CursorRecord::decode(&bytes).map_err(|c| c.in_record(name))?,
            })
        })
        .transpose()
}

/// One cursor's record, with the version this handle last read or wrote.
#[derive(Debug)]
pub(crate) struct RecordOwner {
    meta: Arc<dyn MetaStore>,
    name: String,
    record: Option<VersionedRecord>,
    /// Set when a write may or may not have replaced the record (see the module docs).
    latched: bool,
    /// Run after a record write and at the end of a flush (see [`RecordOwner::check_fence`]).
    fence: Option<Fence>,
    /// Written into every record this owner writes.
    identity: Option<CursorIdentity>,
}

impl RecordOwner {
    /// Takes over record `name` as read at `record` (`None`: it does not exist, and nothing is
    /// written).
    pub(crate) fn new(
        meta: Arc<dyn MetaStore>,
        name: String,
        record: Option<VersionedRecord>,
    ) -> Self {
        Self {
            meta,
            name,
            record,
            latched: false,
            fence: None,
            identity: None,
        }
    }

    /// The cursor ledger the record names.
    pub(crate) fn ledger(&self) -> Option<u64> {
        self.record.as_ref().and_then(|v| v.record.cursor_ledger)
    }

    /// Whether a write failed with an unknown outcome: writes are refused until a reopen.
    pub(crate) fn is_latched(&self) -> bool {
        self.latched
    }

    /// [`Error::PreviousIo`] once latched.
    pub(crate) fn check_latch(&self) -> Result<()> {
        if self.latched {
            Err(Error::PreviousIo)
        } else {
            Ok(())
        }
    }

    pub(crate) fn set_fence(&mut self, fence: Fence) {
        self.fence = Some(fence);
    }

    pub(crate) fn set_identity(&mut self, identity: CursorIdentity) {
        self.identity = Some(identity);
    }

    /// Runs the fence, if one is set.
    pub(crate) fn check_fence(&self) -> Result<()> {
        self.fence.as_ref().map_or(Ok(()), |f| (f.0)())
    }

    /// Takes the stored record (and its version) as the one this handle holds, for a claim
    /// refused because a former owner's record write landed after this handle read it. The
    /// caller runs the fence first: only an owner of the topic may adopt.
    pub(crate) fn adopt_current(&mut self) -> Result<()> {
        self.check_latch()?;
        self.record = read_record(self.meta.as_ref(), &self.name)?;
        Ok(())
    }

    /// Writes the record naming no cursor ledger (the form a journal cursor's record has),
    /// with `state` as its fallback, by compare-and-set on the version held here; a handle
    /// that holds no record writes nothing.
    pub(crate) fn put_without_ledger(&mut self, state: &PersistedState) -> Result<()> {
        let Some(held) = &self.record else {
            return Ok(());
        };
        let expected = Some(held.version);
        let mut record = held.record.clone();
        record.cursor_ledger = None;
        if self.identity.is_some() {
            record.identity = self.identity;
        }
        record.mark_delete = state.mark_delete;
        record.epoch = state.epoch;
        record.properties.clone_from(&state.properties);
        match self.meta.put(&self.name, expected, &record.encode()) {
            Ok(version) => {
                self.record = Some(VersionedRecord { version, record });
                self.check_fence()
            }
            // Refused by compare-and-set: nothing was written.
            Err(e @ Error::Fenced { .. }) => Err(e),
            Err(e) => {
                // When the store still holds the version known here, the write did not take (a
                // full disk refuses the new copy before it replaces the old one): a retry may
                // follow. Otherwise the record may or may not have been replaced: keep every
                // ledger and refuse further writes until a reopen reads what is durable.
                let unchanged = matches!(
                    self.meta.get(&self.name),
                    Ok(found) if found.as_ref().map(|(v, _)| *v) == expected
                );
                self.latched |= !unchanged;
                Err(e)
            }
        }
    }
}

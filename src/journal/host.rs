//! What the journal's host provides and is told: the segments its list names ([`Listed`]),
//! the seals it records ([`Seal`]), the hooks that list and unlist segments
//! ([`SegmentHooks`]) and the owner's check ([`OwnerCheck`]).
//!
//! Owns: the journal's side of ownership (see the room's docs, "Ownership"): the seal a new
//! owner takes of the newest segment, and what a failure means once another owner claimed the
//! host. Must never: report a failed write of a former owner (other than a timeout) as a plain
//! I/O error once the owner's check says another owner claimed the host: it is the fence,
//! and latches.

use std::sync::Arc;

use super::{Journal, lock};
use crate::error::{Error, Result};
use crate::format::journal::SEGMENT_VERSION_V3;
use crate::format::store::CatalogSeal;

/// The segments a store's catalog lists (see `crate::format::store`): they alone count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listed<'a> {
    /// The listed segments, ascending.
    pub segments: &'a [u64],
    /// The highest segment a rollover dropped from the list (0: none): an unlisted segment file
    /// above it that holds records was dropped by something else, which is damage.
    pub retired_through: u64,
    /// The segment and length the store's last clean close recorded: while that segment is
    /// listed, its records reach at least that far (a shorter one is an older copy).
    pub closed: Option<Seal>,
}

/// Bytes of the newest segment that belong to a former owner's journal: every open ignores
/// what lies past `len` in segment `segment`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Seal {
    /// The segment sealed (0: none).
    pub segment: u64,
    /// Its bytes that count.
    pub len: u64,
}

impl From<CatalogSeal> for Seal {
    /// A seal as a host's record holds it (a store's catalog, a topic record).
    fn from(s: CatalogSeal) -> Self {
        Self {
            segment: s.segment,
            len: s.len,
        }
    }
}

/// The owner's check: [`Error::Fenced`] once another owner has claimed the store.
#[derive(Clone)]
pub struct OwnerCheck(pub Arc<dyn Fn() -> Result<()> + Send + Sync>);

/// Where the store lists the segments that count (its catalog, see
/// [`crate::format::store::Catalog::segments`]): `created` runs once a new segment's file and
/// header exist and before anything is written after the header, and makes the segment's name
/// durable (the catalog's own directory sync) or fails; `deleted` runs before a rolled-over
/// segment's file is removed. A failure of either latches the journal unless `listed` confirms
/// the catalog still holds the version this owner wrote last (a full disk refused the new
/// version's file before it was linked: nothing durable changed). Then a segment `created`
/// failed to list is removed again, as one whose header failed, and the next tick starts a
/// segment anew; a segment `deleted` failed to drop stays listed and in the journal, and the
/// next tick's rollover tries again.
#[derive(Clone)]
pub struct SegmentHooks {
    /// Lists a new segment.
    pub created: Arc<dyn Fn(u64) -> Result<()> + Send + Sync>,
    /// After a failed `created` or `deleted`: whether the list names the segment, when known
    /// (the catalog still holds the version this owner wrote last); `None` when unsure.
    pub listed: Arc<dyn Fn(u64) -> Result<Option<bool>> + Send + Sync>,
    /// Drops a segment from the list.
    pub deleted: Arc<dyn Fn(u64) -> Result<()> + Send + Sync>,
}

impl std::fmt::Debug for SegmentHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SegmentHooks")
    }
}

impl std::fmt::Debug for OwnerCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OwnerCheck")
    }
}

impl Journal {
    /// Every later segment creation and rollover deletion runs `hooks` (see [`SegmentHooks`]).
    pub fn set_segment_hooks(&self, hooks: SegmentHooks) {
        *self
            .hooks
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(hooks);
    }

    pub(super) fn hooks(&self) -> Option<SegmentHooks> {
        self.hooks
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The newest segment and its length: what a new owner seals (see [`Seal`]).
    #[must_use]
    pub fn tail(&self) -> Seal {
        let w = lock(&self.writer);
        w.segments
            .iter()
            .next_back()
            .map_or(Seal::default(), |(s, seg)| Seal {
                segment: *s,
                len: seg.len,
            })
    }

    /// The newest segment and the length of it an `fdatasync` covered, as its slots claim
    /// (`None` without a segment, or for a newest segment of a version without slots): what a
    /// clean close records in the catalog.
    #[must_use]
    pub fn synced_tail(&self) -> Option<Seal> {
        let w = lock(&self.writer);
        let (segment, seg) = w.segments.iter().next_back()?;
        (seg.version >= SEGMENT_VERSION_V3).then(|| Seal {
            segment: *segment,
            len: seg.claims.iter().copied().max().unwrap_or(0),
        })
    }

    /// Seals the newest segment at its verified end and returns the seal ([`Seal::default`]
    /// when there is no segment): this journal never appends to it again, and the owner records
    /// the seal so every later open ignores what a former owner appends past it.
    pub fn seal_tail(&self) -> Seal {
        let mut w = lock(&self.writer);
        let tail = w
            .segments
            .iter()
            .next_back()
            .map_or(Seal::default(), |(s, seg)| Seal {
                segment: *s,
                len: seg.len,
            });
        if tail.segment != 0 {
            w.sealed = Some(tail.segment);
        }
        tail
    }

    /// Every later tick and rollover runs `check` (see the room's docs, "Ownership"); an
    /// error from it latches the journal.
    pub fn set_owner_check(&self, check: OwnerCheck) {
        *self
            .owner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(check);
    }

    /// Runs the owner's check without latching the journal (`Ok` when none is set): the
    /// store-level ownership proof a store's topics run after their own syncs and around their
    /// record writes.
    pub(crate) fn check_store_owner(&self) -> Result<()> {
        let check = self
            .owner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        check.map_or(Ok(()), |check| (check.0)())
    }

    /// What a failed write, sync or rollover tells its caller: an I/O error while another
    /// owner has claimed the store is the fence (on shared storage a former owner's write may
    /// fail with "not found" because the new owner removed the object), latched as one; any
    /// other error unchanged.
    pub(super) fn failure(&self, e: Error) -> Error {
        // A storage that did not answer in time (a RADOS operation timeout) would keep the
        // check waiting as long again: the failure is reported as it is, so a flush fails
        // within one operation timeout.
        let unanswered = matches!(&e, Error::Io { source, .. }
            if source.kind() == std::io::ErrorKind::TimedOut);
        if !matches!(e, Error::Io { .. }) || unanswered {
            return e;
        }
        match self.check_store_owner() {
            Err(fenced @ Error::Fenced { .. }) => {
                lock(&self.writer).latch(&fenced);
                fenced
            }
            _ => e,
        }
    }

    /// Runs the owner's check; an error latches the journal.
    pub(super) fn check_owner(&self) -> Result<()> {
        let checked = self.check_store_owner();
        if let Err(e) = &checked {
            lock(&self.writer).latch(e);
        }
        checked
    }
}

//! The appending side: the newest segment, appends, syncs, segment creation and the latch.
//!
//! Owns: the [`Writer`] behind one lock (every segment, the sealed one, what is unsynced, and
//! why the journal refuses writes). Must never: write after a failed sync or a fence (the
//! latch holds until the store is reopened); write past bytes it does not know (a failed
//! write is cut back, and the next write starts where it did); append to a sealed segment or
//! to one of an earlier version.
//!
//! **Failures.** Each write step of a tick, an eviction, a forget or a rollover, by whether
//! its failure can have changed durable state. A step that provably did not fails that call
//! with [`Error::Io`], and the next one starts again from scratch; any other latches
//! ([`Error::PreviousIo`] until reopened: an fsync is never retried).
//!
//! | step | on failure |
//! |---|---|
//! | append to the newest segment (partitions, markers, a rollover's copies) | cut back to the length before it; latches only if the cut fails |
//! | create a new segment's file, write and sync its header | file removed (never listed or referenced); latches only if the removal fails |
//! | catalog write listing a new segment: temporary file's create, write, sync; its link | catalog unchanged (read back at this owner's version): segment removed; otherwise latches |
//! | catalog write dropping a rolled-over segment: the same steps | catalog unchanged: segment stays listed and in place, the next rollover drops it; otherwise latches |
//! | the catalog's directory sync after its link, a fence | latches |
//! | sync of the newest segment, the previous one's final syncs and slot, the directory | latches |
//! | removal of a rolled-over segment's file after it was unlisted | latches |
//!
//! A slot write after a sync that succeeded latches too when it fails (the sync's records are
//! durable all the same).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::host::SegmentHooks;
use super::segment::{Segment, SegmentFile, segment_name};
use super::{Journal, TickStats, lock};
use crate::error::{Error, Result};
use crate::format::journal::{
    JournalLoc, MAX_SEGMENT, Predecessor, SEGMENT_HEADER_V3_LEN, SEGMENT_VERSION,
    SEGMENT_VERSION_V3, SLOT_COPIES, SLOT_LEN, SLOTS_AT, encode_segment_header, encode_slot,
};
use crate::storage::StorageFile;

/// Syncs one `created` hook makes (the catalog's compare-and-set: its record file and the
/// directory), counted in the tick that started the segment.
const CREATED_HOOK_SYNCS: u64 = 2;

/// How many existing names a new segment skips at most (segments a former owner created after
/// this store's claim, which no list names) before the journal gives up.
const SEGMENT_NAME_ATTEMPTS: u64 = 64;

/// The appending side, behind one lock: appends are short writes to the page cache.
#[derive(Debug, Default)]
pub(super) struct Writer {
    /// Every segment, by sequence; the last one is appended to unless it is sealed.
    pub(super) segments: BTreeMap<u64, Segment>,
    /// A segment the store does not own the tail of: never appended to.
    pub(super) sealed: Option<u64>,
    /// Bytes appended to the newest segment since its last sync.
    pub(super) unsynced: bool,
    /// A segment was created since the last directory sync (by a tick or an eviction).
    pub(super) dir_unsynced: bool,
    /// Why the journal refuses every later write: a sync failed, or the owner's check said
    /// another owner claimed the store. Never cleared until the store is reopened.
    latched: Option<Latch>,
}

/// Why a journal refuses every later write (see [`Writer::latched`]).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Latch {
    /// A sync (or a write the journal cannot undo) failed: [`Error::PreviousIo`].
    Io,
    /// Another owner claimed the store: [`Error::Fenced`] on every later call, so a former
    /// owner is told it lost the store every time, not once.
    Fenced(String),
}

impl Writer {
    /// The error every write answers once the journal latched; `None` while it has not.
    fn refusal(&self) -> Option<Error> {
        self.latched.as_ref().map(|l| match l {
            Latch::Io => Error::PreviousIo,
            Latch::Fenced(what) => Error::Fenced { what: what.clone() },
        })
    }

    /// `Err` with the latch's error once the journal latched.
    pub(super) fn check_latch(&self) -> Result<()> {
        self.refusal().map_or(Ok(()), Err)
    }

    /// Latches after `e`: a fence is remembered as a fence, anything else as a failed I/O.
    /// A fence is never downgraded to an I/O failure by a later error.
    pub(super) fn latch(&mut self, e: &Error) {
        match e {
            Error::Fenced { what } => self.latched = Some(Latch::Fenced(what.clone())),
            _ => {
                self.latched.get_or_insert(Latch::Io);
            }
        }
    }
}

/// Writes `claim` (a length an `fdatasync` of segment `seq` covered) into its slot copy that
/// claims less, with no sync of its own, unless a copy claims as much already or the segment
/// has no slots. Returns whether it wrote. A failed write latches the journal.
pub(super) fn write_claim(w: &mut Writer, seq: u64, claim: u64) -> Result<bool> {
    let Some(seg) = w.segments.get(&seq) else {
        return Ok(false);
    };
    if seg.version < SEGMENT_VERSION_V3 || seg.claims.iter().any(|c| *c >= claim) {
        return Ok(false);
    }
    let copy = usize::from(seg.claims[1] < seg.claims[0]);
    let at = (SLOTS_AT + copy * SLOT_LEN) as u64;
    let written = seg.file.write_all_at(&encode_slot(seq, copy, claim), at);
    if let Some(seg) = w.segments.get_mut(&seq) {
        if written.is_ok() {
            seg.claims[copy] = claim;
        }
        seg.claims_durable = false;
    }
    Journal::latch_on(w, written)?;
    Ok(true)
}

impl Journal {
    /// Whether a sync failed (or the owner's check did): every later tick fails with
    /// [`Error::PreviousIo`] (or [`Error::Fenced`]) until the store is reopened.
    #[must_use]
    pub fn is_latched(&self) -> bool {
        lock(&self.writer).latched.is_some()
    }

    pub(super) fn newest(w: &Writer) -> Result<(u64, u64)> {
        w.segments
            .iter()
            .next_back()
            .map(|(s, seg)| (*s, seg.len))
            .ok_or(Error::PreviousIo)
    }

    /// Makes sure the tick appends to a segment this store owns that is below its size limit:
    /// otherwise syncs the newest (its tail may hold evictions) and starts the next. Returns
    /// whether a segment was created since the last directory sync (by this tick or an
    /// eviction): its name needs one before the tick returns.
    pub(super) fn segment_for_tick(&self, w: &mut Writer, stats: &mut TickStats) -> Result<bool> {
        self.start_segment_if_needed(w, stats)?;
        Ok(w.dir_unsynced)
    }

    pub(super) fn start_segment_if_needed(
        &self,
        w: &mut Writer,
        stats: &mut TickStats,
    ) -> Result<()> {
        w.check_latch()?;
        if self.appendable(w) {
            return Ok(());
        }
        let newest = w.segments.iter().next_back().map(|(s, seg)| (*s, seg.len));
        let next = newest.map_or(1, |(s, _)| s + 1);
        if next > MAX_SEGMENT {
            return Err(Error::LimitExceeded {
                reason: "journal segment numbers are exhausted".into(),
            });
        }
        if let Some((seq, len)) = newest
            && w.sealed != Some(seq)
        {
            // The segment stops being the newest and is never synced again: its tail (which may
            // hold evictions) and a slot claiming all of it become durable now, so every byte of
            // an older segment is below its synced length.
            let seg = w
                .segments
                .get(&seq)
                .map(|s| (s.file.clone(), s.claims_durable));
            if let Some((file, claims_durable)) = seg {
                if w.unsynced || !claims_durable {
                    Self::latch_on(w, file.sync_data())?;
                    stats.syncs += 1;
                    self.counters.syncs.fetch_add(1, Ordering::Relaxed);
                }
                if write_claim(w, seq, len)? {
                    Self::latch_on(w, file.sync_data())?;
                    stats.syncs += 1;
                    self.counters.syncs.fetch_add(1, Ordering::Relaxed);
                }
                if let Some(s) = w.segments.get_mut(&seq) {
                    s.claims_durable = true;
                }
            }
        }
        let mut next = next;
        let file = loop {
            match self.storage.create(&segment_name(next)) {
                Ok(file) => break file,
                // A segment no list names: a former owner's, created after this store's claim
                // (never read; a later open removes it once a listed segment is above it). Take the next name.
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::AlreadyExists
                        && next < MAX_SEGMENT
                        && next - newest.map_or(0, |(s, _)| s) < SEGMENT_NAME_ATTEMPTS =>
                {
                    next += 1;
                }
                // Nothing was created (a full disk, for instance): the next tick tries again.
                Err(e) => {
                    if matches!(e, Error::Fenced { .. }) {
                        w.latch(&e);
                    }
                    return Err(e);
                }
            }
        };
        // The segment this one follows, at the length it ends with: it was synced above (or
        // sealed, never appended to again), so its records end there on every later scan.
        let header = encode_segment_header(
            next,
            newest.map(|(segment, len)| Predecessor { segment, len }),
        );
        // The header and its slots are durable before the segment is listed: a listed segment
        // whose header does not verify is damage, never a creation cut short.
        if let Err(e) = file
            .write_all_at(&header, 0)
            .and_then(|()| file.sync_data())
        {
            // Not listed, never referenced: removed again, and the next tick tries anew with a
            // new file (a failed sync of a file that is dropped is never retried). No latch: the
            // bytes this sync lost are the header alone, in a file nothing names again, and every
            // record appended so far lies in the segment before, whose own syncs above returned
            // `Ok`; a later tick's `Ok` covers a new file (a new inode, even under the same name)
            // whose every sync it checks.
            if matches!(e, Error::Fenced { .. }) {
                w.latch(&e);
            } else if let Err(removed) = self.storage.remove(&segment_name(next)) {
                w.latch(&removed);
            }
            return Err(e);
        }
        stats.syncs += 1;
        self.counters.syncs.fetch_add(1, Ordering::Relaxed);
        w.segments.insert(
            next,
            Segment {
                file: file.clone(),
                len: SEGMENT_HEADER_V3_LEN as u64,
                version: SEGMENT_VERSION,
                claims: [SEGMENT_HEADER_V3_LEN as u64; SLOT_COPIES],
                claims_durable: true,
            },
        );
        w.unsynced = true;
        w.dir_unsynced = true;
        self.add_newest_file(next, file);
        if let Some(hooks) = self.hooks() {
            // Listed before any record goes into it; the list's write syncs the directory,
            // which holds the new name.
            if let Err(e) = (hooks.created)(next) {
                self.unlist_failed_segment(w, &hooks, next, &e);
                return Err(e);
            }
            w.dir_unsynced = false;
            stats.syncs += CREATED_HOOK_SYNCS;
            self.counters
                .syncs
                .fetch_add(CREATED_HOOK_SYNCS, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Makes `file` segment `seq`'s for reads, the newest: every other is older now.
    fn add_newest_file(&self, seq: u64, file: Arc<dyn StorageFile>) {
        let mut files = self
            .files
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for older in files.values() {
            older.mark_older();
        }
        let mappable = self.storage.local_dir().is_some();
        files.insert(seq, Arc::new(SegmentFile::new(file, false, mappable)));
    }

    /// After segment `next`'s listing failed with `e`: a segment the list is known not to name
    /// holds nothing but its header, so it is dropped and its file removed (the next tick
    /// starts a segment anew); a fence, a listing that may have taken (its directory sync
    /// failed, say), or a failed removal latches.
    fn unlist_failed_segment(&self, w: &mut Writer, hooks: &SegmentHooks, next: u64, e: &Error) {
        if !Self::catalog_unchanged(hooks, next, e, false) {
            w.latch(e);
            return;
        }
        w.segments.remove(&next);
        self.files
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&next);
        if let Err(removed) = self.storage.remove(&segment_name(next)) {
            w.latch(&removed);
        }
    }

    /// Whether the catalog write of `seq` that failed with `e` is known not to have taken: not
    /// a fence, and the catalog still holds the version this owner wrote last, which lists the
    /// segment exactly when `listed`.
    pub(super) fn catalog_unchanged(
        hooks: &SegmentHooks,
        seq: u64,
        e: &Error,
        listed: bool,
    ) -> bool {
        !matches!(e, Error::Fenced { .. })
            && matches!((hooks.listed)(seq), Ok(Some(l)) if l == listed)
    }

    /// Whether a tick may append to the newest segment: this store owns its tail, it is of
    /// this build's version (an earlier one holds no delta) and below its size limit.
    fn appendable(&self, w: &Writer) -> bool {
        // A segment holding no record yet takes one whatever the size limit: with a limit at
        // or below the header's size, every rollover would otherwise start a segment to copy
        // nothing into, and the rollover loop would never shrink the total.
        w.segments.iter().next_back().is_some_and(|(seq, seg)| {
            w.sealed != Some(*seq)
                && seg.version == SEGMENT_VERSION
                && (seg.len < self.config.segment_bytes || seg.len <= SEGMENT_HEADER_V3_LEN as u64)
        })
    }

    /// Appends `buf` to the newest segment; returns where it starts. An eviction before the
    /// first tick, or after an open that found a sealed or earlier-version newest segment,
    /// starts a segment.
    pub(super) fn append(&self, w: &mut Writer, buf: &[u8], in_tick: bool) -> Result<JournalLoc> {
        w.check_latch()?;
        let newest = w
            .segments
            .iter()
            .next_back()
            .map(|(s, seg)| (*s, seg.version));
        if !in_tick
            && (newest.is_none_or(|(_, v)| v != SEGMENT_VERSION)
                || newest.map(|(s, _)| s) == w.sealed)
        {
            let mut scratch = TickStats::default();
            self.start_segment_if_needed(w, &mut scratch)?;
        }
        let (seq, len) = Self::newest(w)?;
        let file = w
            .segments
            .get(&seq)
            .map(|s| s.file.clone())
            .ok_or(Error::PreviousIo)?;
        if let Err(e) = file.write_all_at(buf, len) {
            Self::undo_write(w, file.as_ref(), len, &e);
            return Err(e);
        }
        if let Some(s) = w.segments.get_mut(&seq) {
            s.len += buf.len() as u64;
        }
        w.unsynced = true;
        self.counters
            .bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(JournalLoc {
            segment: seq,
            offset: len,
        })
    }

    /// After a write at `len` failed (a full disk, for instance): cuts the file back to `len`,
    /// so whatever part of the write reached the file is gone and the next append writes at
    /// `len` again. Nothing of the failed write was indexed or reported, so the journal goes on
    /// as if it had never been tried. A fence, or a cut that fails too, latches: a journal
    /// never writes past bytes it does not know.
    fn undo_write(w: &mut Writer, file: &dyn StorageFile, len: u64, e: &Error) {
        if matches!(e, Error::Fenced { .. }) {
            w.latch(e);
        } else if let Err(cut) = file.set_len(len) {
            w.latch(&cut);
        }
    }

    /// After a tick's write failed with `e` once earlier writes of the same tick (its first
    /// slices of markers) had landed at `start` of segment `seq`: cuts the segment back to
    /// `start`, as [`Self::undo_write`] cuts one failed write back, so none of the tick's
    /// records stays and the next tick writes them again once the disk has room. The caller
    /// held the writer's lock since the tick's first write, so nothing else was appended
    /// after `start`; nothing of the tick was indexed or reported.
    pub(super) fn undo_tick(&self, w: &mut Writer, seq: u64, start: u64, e: &Error) {
        let Some((file, len)) = w.segments.get(&seq).map(|s| (s.file.clone(), s.len)) else {
            w.latch(e);
            return;
        };
        Self::undo_write(w, file.as_ref(), start, e);
        if let Some(s) = w.segments.get_mut(&seq) {
            s.len = start;
        }
        self.counters
            .bytes
            .fetch_sub(len.saturating_sub(start), Ordering::Relaxed);
    }

    fn latch_on<T>(w: &mut Writer, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            w.latch(e);
        }
        r
    }

    /// Syncs the newest segment, then writes a slot claiming what the sync covered (a plain
    /// write, durable with the next sync). A failed slot write latches the journal; the sync
    /// still succeeded.
    pub(super) fn sync_newest(&self, seq: u64, stats: &mut TickStats) -> Result<()> {
        // Every append that finished before the sync starts is covered by it: appends write
        // under the writer's lock before they grow `len`.
        let (file, covered) = lock(&self.writer)
            .segments
            .get(&seq)
            .map(|s| (s.file.clone(), s.len))
            .ok_or(Error::PreviousIo)?;
        let synced = file.sync_data();
        stats.syncs += 1;
        self.counters.syncs.fetch_add(1, Ordering::Relaxed);
        let mut w = lock(&self.writer);
        if let Err(e) = &synced {
            w.latch(e);
        } else if w.sealed != Some(seq) {
            // A failed slot write latches the journal; the records this sync covered are
            // durable all the same.
            write_claim(&mut w, seq, covered).ok();
        }
        synced
    }

    pub(super) fn sync_dir(&self, stats: &mut TickStats) -> Result<()> {
        let synced = self.storage.sync_dir();
        stats.syncs += 1;
        self.counters.syncs.fetch_add(1, Ordering::Relaxed);
        let mut w = lock(&self.writer);
        if let Err(e) = &synced {
            w.latch(e);
        } else {
            // Segments created after the sync started set it again; a name created while
            // the sync ran may be covered or not, so only a creation before it is cleared:
            // ticks and rollovers hold the tick lock, and evictions create a segment only
            // when none is open for appends, which a tick in progress has ensured.
            w.dir_unsynced = false;
        }
        synced
    }
}

//! Opening a journal: the recovery scan of its segments, in order and in bounded memory.
//!
//! **Recovery** scans the segments in order, in bounded memory. A marker counts only if every
//! partition it references is a record of the same cursor, before it in the log, whose payload
//! CRC is the one the marker holds; a delta only if, besides, its base is the cursor's
//! committed marker or delta at that point of the scan. Below a segment's synced length, one
//! that does not count is corruption; past it (only in the newest segment) the cursor keeps its
//! previous state (the walk back), and a delta on a rejected one is rejected too. A record that
//! references a segment a rollover removed was superseded and is skipped, provided a record of
//! the same cursor that commits follows it (the rollover's re-base); otherwise it is corruption. The newest segment
//! ends at the first record that does not verify past its synced length (a torn tail, cut
//! off); a listed segment that is missing, has a bad header or predecessor, has both slot copies
//! failing, is shorter than its synced length or seal, ends elsewhere than its successor's
//! header says, or does not verify below them (anywhere, in any other segment) is corruption,
//! and is never removed or cut. One exception: a cursor whose newest marker or delta does not
//! commit falls back to its single-entry snapshot when it has one, and a frame whose CRC alone
//! fails below them is passed over, accepted only when such a marker or delta names it.
//! Partitions are not decoded until loaded.

use std::sync::{Arc, Mutex, RwLock};

use super::host::{Listed, Seal};
use super::index::ShardedIndex;
use super::scan::Scan;
use super::segment::{
    Segment, SegmentFile, check_predecessor, durable_len, parse_segment_name, segment_name,
    segment_version, synced_len, window_get,
};
use super::writer::{Writer, write_claim};
use super::{Counters, Journal, JournalConfig, corrupt};
use crate::error::{CorruptionKind, Error, Result};
use crate::format::journal::{
    BODY_FIXED_LEN, JournalLoc, MAX_BODY_LEN, Predecessor, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
    SEGMENT_HEADER_V3_LEN, SEGMENT_VERSION_V3, SLOTS_AT, decode_record,
    decode_segment_header_version, peek_body_len, records_start,
};
use crate::log::Window;
use crate::storage::Storage;

#[derive(Debug, Default)]
pub(super) struct ScanReport {
    pub(super) records: u64,
    pub(super) torn_tail: Option<(u64, u64, u64)>,
    pub(super) strays: Vec<u64>,
    /// The first marker or delta of the newest segment that did not commit (past its synced
    /// length): an open's claim stops before it, so the next open walks back the same way.
    walked_back: Option<u64>,
}

/// Reads every segment `listed` names (every segment file with `None`) in order into an
/// index, in bounded memory: one read-ahead window (a record is at most [`MAX_BODY_LEN`]
/// bytes), and a zero-filled run is skipped as the ledger scan skips one (holes unread, other
/// zeros tested a window at a time). With `repair`, cuts the newest segment's torn tail off
/// (and syncs it) and removes the segment files the list does not name; without, only reports
/// them.
///
/// What counts as damage, never cut: a listed segment that is missing; a header (or
/// predecessor) that does not verify in a listed segment, or both its slot copies; a segment
/// shorter than its slots' synced length or its seal; a predecessor other than the segment
/// scanned before, or at another length than its records end at; a record that does not verify
/// below the synced length or the seal, or anywhere in a segment other than the newest (unless
/// its CRC alone fails and a marker that falls back to its cursor's snapshot names it); a
/// marker or delta that does not verify below the synced length, of a cursor without a
/// snapshot; a cursor whose last marker or delta builds on a segment older than the first
/// scanned. Strays are removed only after all of that passed.
pub(super) fn scan_segments(
    storage: &dyn Storage,
    seals: &[Seal],
    listed: Option<Listed<'_>>,
    repair: bool,
) -> Result<(Scan, Writer, ScanReport)> {
    let mut report = ScanReport::default();
    let seqs = segments_to_scan(storage, listed, &mut report)?;
    let mut scan = Scan::new(seqs.first().copied().unwrap_or(0));
    let scanned = scan_listed(
        storage,
        (seals, listed, &seqs),
        repair,
        &mut scan,
        &mut report,
    );
    // A frame passed over as damaged comes before whatever stopped the scan later: the first
    // damage is what is reported, as a scan that stopped there would.
    let writer = match scanned {
        Ok(writer) => writer,
        Err(e @ Error::Corrupted { .. }) => return Err(scan.first_damage().unwrap_or(e)),
        Err(e) => return Err(e),
    };
    if let Some(e) = scan.first_damage() {
        return Err(e);
    }
    scan.check_rebased()?;
    let retired = listed.map_or(0, |l| l.retired_through);
    let newest = listed.and_then(|l| l.segments.iter().max().copied());
    check_strays(storage, &report.strays, (retired, newest), repair)?;
    Ok((scan, writer, report))
}

/// The scan of [`scan_segments`] over the segments `seqs` (those `listed` names, or every
/// segment file), into `scan`; returns the writer of what it read.
fn scan_listed(
    storage: &dyn Storage,
    (seals, listed, seqs): (&[Seal], Option<Listed<'_>>, &[u64]),
    repair: bool,
    scan: &mut Scan,
    report: &mut ScanReport,
) -> Result<Writer> {
    let sealed = |seq: u64| seals.iter().find(|s| s.segment == seq && seq != 0);
    let mut writer = Writer::default();
    let last = seqs.last().copied();
    // The segment scanned before this one and the length its records end at.
    let mut before: Option<Predecessor> = None;
    for &seq in seqs {
        let newest = Some(seq) == last;
        let seal = sealed(seq).map(|s| s.len);
        let file = storage.open(&segment_name(seq))?;
        let file_size = file.size()?;
        if let Some(len) = seal
            && file_size < len
        {
            // The claim that sealed it had verified and synced every byte below the seal.
            return Err(corrupt(seq, file_size, CorruptionKind::Truncated));
        }
        let limit = seal.map_or(file_size, |len| len.min(file_size));
        let mut win = Window::with_size(file.as_ref(), file_size);
        let head_len = (SLOTS_AT as u64).min(limit);
        let head = window_get(&mut win, 0, head_len, limit)?.unwrap_or_default();
        let (version, previous) = match segment_version(head, seq) {
            Ok(Ok(named)) => named,
            Ok(Err(_))
                if newest
                    && seal.is_none()
                    && listed.is_none()
                    && win.first_nonzero_from(SEGMENT_HEADER_V3_LEN as u64)? >= file_size =>
            {
                // Without a list: a segment whose header never became durable, and that holds
                // nothing after it (a tick syncs the header before it appends anything).
                if repair {
                    storage.remove(&segment_name(seq))?;
                    storage.sync_dir()?;
                } else {
                    report.torn_tail = Some((seq, 0, file_size));
                }
                continue;
            }
            Ok(Err(e)) | Err(e) => return Err(e),
        };
        if version >= SEGMENT_VERSION_V3 {
            check_predecessor(seq, previous, before)?;
        }
        let start = records_start(version) as u64;
        let (claims, synced) = synced_len(&mut win, (seq, version, file_size), listed, newest)?;
        if file_size < synced {
            return Err(corrupt(seq, file_size, CorruptionKind::Truncated));
        }
        // Frames below the synced length or the seal must verify; markers and deltas below the
        // synced length must commit (a seal may lie past a walk-back its claim accepted).
        let frames_known = synced.max(seal.unwrap_or(0)).min(limit);
        let markers_known = synced.min(limit);
        let (at, stop) = scan_records(
            &mut win,
            scan,
            report,
            (seq, version, newest),
            (start, (markers_known, frames_known), limit),
        )?;
        if let Some((offset, kind)) = stop {
            let zero_end = kind == CorruptionKind::InvalidField("zero length");
            let tail_nonzero = win.first_nonzero_from(at)? < limit;
            if at < frames_known || (!newest || seal.is_some()) && (!zero_end || tail_nonzero) {
                // Synced bytes that do not verify: damage, whatever they look like.
                return Err(corrupt(seq, offset, kind));
            }
            if newest && seal.is_none() && at < file_size {
                // Nothing is cut while damage that nothing accounts for was passed over: the
                // scan is refused.
                if let Some(e) = scan.first_damage() {
                    return Err(e);
                }
                if repair {
                    file.set_len(at)?;
                    file.sync_data()?;
                } else if tail_nonzero {
                    report.torn_tail = Some((seq, at, file_size - at));
                }
            }
        }
        writer.segments.insert(
            seq,
            Segment {
                file,
                len: at,
                version,
                claims,
                claims_durable: true,
            },
        );
        before = Some(Predecessor {
            segment: seq,
            len: at,
        });
    }
    Ok(writer)
}

/// Checks that no segment file the list does not name was ever listed, unless a rollover
/// retired it: a segment is listed before anything is written after its header, and a rollover
/// unlists only the oldest, recording it as `retired` (the highest segment retired) in the
/// same catalog write. So an unlisted segment above `retired` is a former owner's whose
/// listing was refused, or a creation cut short before its listing, and holds nothing past its
/// header; one that holds something there was dropped from the list, with ticks it promised
/// (and state no listed segment may hold).
/// With `repair`, then removes those below `newest` (the newest listed segment): only once
/// every listed segment verified, so a segment that should have been listed is evidence, never
/// removed. A stray above the newest listed segment stays: it may be a newer owner's, created
/// (and listed) after the claim this open made (the open has not checked its ownership yet),
/// and every owner names a new segment above the newest its list holds, skipping names that
/// exist, so a name below `newest` is never created or listed again, while one above it would
/// be if its file went. A later open removes it once a listed segment is above it.
fn check_strays(
    storage: &dyn Storage,
    strays: &[u64],
    (retired, newest): (u64, Option<u64>),
    repair: bool,
) -> Result<()> {
    for &stray in strays.iter().filter(|s| **s > retired) {
        // A stray listed a moment ago may be gone: a former owner's rollover removes the
        // segment it unlisted before this owner's claim. Gone is what a repair makes of it.
        let file = match storage.open(&segment_name(stray)) {
            Ok(file) => file,
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e),
        };
        let mut win = Window::new(file.as_ref())?;
        let head_len = (SEGMENT_HEADER_LEN as u64).min(file.size()?);
        let head = win.get(0, head_len)?.unwrap_or_default();
        let start = head
            .get(..SEGMENT_HEADER_LEN)
            .and_then(|h| decode_segment_header_version(h).ok())
            .map_or(SEGMENT_HEADER_V3_LEN, |(_, version)| records_start(version));
        let holds = win.first_nonzero_from(start as u64)?;
        if holds < file.size()? {
            return Err(corrupt(
                stray,
                holds,
                CorruptionKind::InvalidField("records in a segment the list does not name"),
            ));
        }
    }
    if repair {
        for &stray in strays.iter().filter(|s| newest.is_some_and(|n| **s < n)) {
            match storage.remove(&segment_name(stray)) {
                Err(e) if !e.is_not_found() => return Err(e),
                _ => {}
            }
        }
    }
    Ok(())
}

/// The segments a scan reads, ascending: those `listed` names, every one of which must exist
/// (`None`: every segment file). Files the list does not name are reported as strays.
fn segments_to_scan(
    storage: &dyn Storage,
    listed: Option<Listed<'_>>,
    report: &mut ScanReport,
) -> Result<Vec<u64>> {
    let mut found: Vec<u64> = storage
        .list_prefix("journal-")?
        .iter()
        .filter_map(|n| parse_segment_name(n))
        .collect();
    found.sort_unstable();
    Ok(
        if let Some(Listed {
            segments: listed, ..
        }) = listed
        {
            // A segment is listed only after its header is durable, and unlisted before its file
            // is removed: a listed segment that is gone was removed by something else, and the
            // state it held cannot be told from an older one.
            if let Some(&gone) = listed.iter().find(|s| found.binary_search(s).is_err()) {
                return Err(corrupt(gone, 0, CorruptionKind::Missing));
            }
            let strays: Vec<u64> = found
                .iter()
                .copied()
                .filter(|s| !listed.contains(s))
                .collect();
            report.strays = strays;
            let mut seqs = listed.to_vec();
            seqs.sort_unstable();
            seqs.dedup();
            seqs
        } else {
            found
        },
    )
}

/// Reads the records of segment `seq` from `start` up to `limit` into `scan`; returns where
/// they end and, if before `limit`, why (the offset and kind of the first bytes that are not a
/// record that verifies). A marker or delta below `markers_known` that does not commit is
/// corruption. A frame wholly below `frames_known` whose CRC fails, and inside which no record
/// that verifies starts, is passed over (its length as read), noted in `scan` as damage, which
/// only a fall back to a snapshot accounts for.
fn scan_records(
    win: &mut Window<'_>,
    scan: &mut Scan,
    report: &mut ScanReport,
    (seq, version, newest): (u64, u16, bool),
    (start, (markers_known, frames_known), limit): (u64, (u64, u64), u64),
) -> Result<(u64, Option<(u64, CorruptionKind)>)> {
    let mut at = start;
    let stop = loop {
        if at >= limit {
            break None;
        }
        let Some(head) = window_get(win, at, 4, limit)? else {
            break Some((at, CorruptionKind::Truncated));
        };
        let n = peek_body_len(head).unwrap_or(0);
        if n == 0 {
            break Some((at, CorruptionKind::InvalidField("zero length")));
        }
        if !(BODY_FIXED_LEN..=MAX_BODY_LEN).contains(&n) {
            break Some((at, CorruptionKind::BadLength));
        }
        let Some(frame) = window_get(win, at, (RECORD_HEADER_LEN + n) as u64, limit)? else {
            break Some((at, CorruptionKind::Truncated));
        };
        match decode_record(frame) {
            Ok(Some((rec, len))) => {
                let loc = JournalLoc {
                    segment: seq,
                    offset: at,
                };
                let walked_back =
                    scan.record(loc, len as u64, &rec, version, at < markers_known)?;
                if walked_back && newest && report.walked_back.is_none() {
                    report.walked_back = Some(at);
                }
                report.records += 1;
                at += len as u64;
            }
            Ok(None) => break Some((at, CorruptionKind::InvalidField("zero length"))),
            Err(c)
                if c.kind == CorruptionKind::ChecksumMismatch
                    && at + (RECORD_HEADER_LEN + n) as u64 <= frames_known
                    && !holds_a_record(frame) =>
            {
                let loc = JournalLoc {
                    segment: seq,
                    offset: at,
                };
                scan.damaged_frame(loc, at + c.offset);
                at += (RECORD_HEADER_LEN + n) as u64;
            }
            Err(c) => break Some((at + c.offset, c.kind)),
        }
    };
    Ok((at, stop))
}

/// Whether a record that verifies starts inside the body of `frame` (a frame whose CRC
/// failed): then its length field is what is damaged, and passing over the length it reads
/// would step over whole records (the other cursors' among them) as if they were one damaged
/// frame. A passed-over frame is trusted to be one frame only when none does.
fn holds_a_record(frame: &[u8]) -> bool {
    (RECORD_HEADER_LEN..frame.len()).any(|at| {
        frame
            .get(at..)
            .is_some_and(|rest| matches!(decode_record(rest), Ok(Some(_))))
    })
}

impl Journal {
    /// Opens the journal kept in `storage` (the store's directory), ignoring bytes past `seal`
    /// (see [`Seal`]). Reads every segment; decodes markers, not partitions. Writes nothing
    /// except cutting a torn tail off the newest segment past its synced length (one truncate
    /// and one sync), a slot of the newest segment claiming what it verified, and, without a
    /// list, removing a newest segment whose header never became durable and that holds nothing.
    ///
    /// # Errors
    /// [`Error::Corrupted`] at the journal segment and offset when a listed segment is missing,
    /// a header does not verify, a segment is shorter than its synced length or seal, a record
    /// below them (or in a segment other than the newest) does not verify, or a marker or delta
    /// below the synced length does not commit; [`Error::Io`].
    pub fn open(storage: Arc<dyn Storage>, config: JournalConfig, seal: Seal) -> Result<Self> {
        Self::open_sealed(storage, config, &[seal])
    }

    /// [`Journal::open`] with several seals: a store's catalog keeps one for every segment a
    /// claim sealed that still exists, since a segment sealed by one claim is no longer the
    /// newest at the next. Seals of segment 0 are ignored.
    ///
    /// # Errors
    /// As [`Journal::open`].
    pub fn open_sealed(
        storage: Arc<dyn Storage>,
        config: JournalConfig,
        seals: &[Seal],
    ) -> Result<Self> {
        Self::open_listed(storage, config, seals, None)
    }

    /// [`Journal::open_sealed`] reading only the segments `listed` names (`None`: every
    /// segment file) and removing the segment files it does not name: a store's catalog lists
    /// the segments that count ([`SegmentHooks`]), so a segment a former owner created after
    /// the claim is never read.
    ///
    /// # Errors
    /// As [`Journal::open`].
    pub fn open_listed(
        storage: Arc<dyn Storage>,
        config: JournalConfig,
        seals: &[Seal],
        listed: Option<Listed<'_>>,
    ) -> Result<Self> {
        if config.segment_bytes == 0 || config.segment_bytes > u64::from(u32::MAX) {
            return Err(Error::InvalidArgument {
                reason: "journal segment_bytes must be 1 byte to 4 GiB".into(),
            });
        }
        let (mut scan, mut writer, report) = scan_segments(storage.as_ref(), seals, listed, true)?;
        // A former owner that died before its tick's sync left the newest segment's bytes, and
        // perhaps its name, in the page cache only. This owner recovers cursors from them and
        // its markers reference their partitions, so they become durable before anything uses
        // them: otherwise a power cut after this owner's first tick (which syncs the directory)
        // leaves that segment empty under a durable name, or drops partitions its synced markers
        // reference. Only the newest segment can be unsynced: a tick syncs the newest before
        // starting the next. A listed segment whose scan kept nothing past what a finished sync
        // covered (its slots' claim, or the length a clean close recorded) is durable already:
        // its name too, since the host lists a segment only after creating it and syncs the
        // directory with every write of the list, its claim's included, which came after the
        // read of this list.
        let newest = writer.segments.keys().next_back().copied();
        if let Some(seq) = newest {
            let durable = listed.is_some()
                && writer
                    .segments
                    .get(&seq)
                    .is_some_and(|seg| seg.len <= durable_len(seg, seq, listed));
            if !durable {
                if let Some(seg) = writer.segments.get(&seq) {
                    seg.file.sync_data()?;
                }
                storage.sync_dir()?;
            }
        }
        let sealed_newest = newest.filter(|newest| seals.iter().any(|s| s.segment == *newest));
        if let Some(seq) = newest.filter(|_| sealed_newest.is_none()) {
            // Everything it holds is durable now: its slots claim it, except from a marker or
            // delta that did not commit on (the next open walks back the same way, and nothing
            // is appended after it).
            let end = writer.segments.get(&seq).map_or(0, |s| s.len);
            let claim = report.walked_back.map_or(end, |at| at.min(end));
            write_claim(&mut writer, seq, claim)?;
            if report.walked_back.is_some() {
                writer.sealed = Some(seq);
            }
        }
        if sealed_newest.is_some() {
            writer.sealed = sealed_newest;
        }
        let newest = writer.segments.keys().next_back().copied();
        let mappable = storage.local_dir().is_some();
        let files = writer
            .segments
            .iter()
            .map(|(s, seg)| {
                let older = Some(*s) != newest;
                (
                    *s,
                    Arc::new(SegmentFile::new(seg.file.clone(), older, mappable)),
                )
            })
            .collect();
        Ok(Self {
            storage,
            config,
            tick: Mutex::new(()),
            writer: Mutex::new(writer),
            index: ShardedIndex::new(std::mem::take(&mut scan.index)),
            files: RwLock::new(files),
            counters: Counters::default(),
            owner: RwLock::new(None),
            hooks: RwLock::new(None),
            unsettled: Mutex::default(),
            fallbacks: scan.fallbacks.iter().copied().collect(),
        })
    }
}

//! The store catalog: which topics a store holds, and the directory id each topic's files use.
//!
//! The catalog is the payload of the store's metadata record `store` (framed, checksummed and
//! versioned by [`crate::meta`]). Layout, all integers little-endian:
//!
//! ```text
//! magic "ACKSCATL" (8) | version u16 = 4 | store_id u64 | next_topic_id u64 | count u32
//! count x ( topic_id u64 | name_len u16 | name (name_len bytes of UTF-8) )
//! seal_count u32 | seal_count x ( segment u64 | len u64 )          (versions 2 and 3)
//! spaced_from u64                                                  (version 3 only)
//! segment_count u32 | segment_count x segment u64                  (versions 3 and 4)
//! retired_through u64                                              (version 4 only)
//! closed_segment u64 | closed_len u64                              (version 4 only)
//! ```
//!
//! Versions 1 (no seals), 2 (no `spaced_from`) and 3 (no `retired_through`) are still read;
//! this build writes version 4.
//! A seal names a cursor-journal segment and the bytes of it that count: what lies past `len`
//! was written by a former owner after a claim (see `src/journal/mod.rs`, "Ownership").
//! `spaced_from` is the first topic id whose files live in a directory of their own
//! (`t{id}/`, on storage that has directories); the topics below it keep the flat layout of
//! versions 1 and 2 (`t{id}-` name prefixes in the store directory). A catalog of version 1
//! or 2 reads with `spaced_from = next_topic_id`: its topics stay where they are, new ones get
//! directories, and the next write records that as version 3.
//!
//! The segment list names every cursor-journal segment that counts, ascending: a segment is
//! listed (by compare-and-set of the catalog) as soon as it is created and before anything in
//! it is relied on, and leaves the list before its file is deleted, so a segment a former owner
//! creates after the store was claimed is never listed and never read. `segment_count` =
//! `u32::MAX` (no list follows) means every segment file counts, as in versions 1 and 2, which
//! read that way.
//!
//! `retired_through` is the highest segment a rollover dropped from the list (0: none). A
//! rollover drops only the oldest listed segment, after copying what is live in it forward, and
//! records it here in the same write; so a segment file the list does not name, at or below
//! `retired_through`, is what a rollover left before deleting the file, and one above it that
//! holds records was dropped from the list by something else (its state would be lost). Every
//! listed segment is above it. A catalog of version 3 reads with `retired_through` just below
//! its oldest listed segment (0 with none listed), what its rollovers allowed.
//!
//! `closed_segment` and `closed_len` (0 and 0: none) are what the last clean close of the store
//! (`Store::close`) left: its newest segment and the length of it a sync covered. A segment
//! only grows while it is listed, so while `closed_segment` is listed its records must reach
//! `closed_len`: an older copy of it (restored from a backup, say) ends before, and is damage
//! rather than an older state. Version 3 reads with none.
//!
//! Topic ids are never reused (`next_topic_id` is above every id listed), names are unique, any
//! UTF-8 of 1 to [`MAX_TOPIC_NAME_LEN`] bytes: a name is never used as a path, the topic's files
//! are named after its id.

use super::{Corruption, Reader};
use crate::error::CorruptionKind;

/// Magic at the start of a catalog.
pub const CATALOG_MAGIC: [u8; 8] = *b"ACKSCATL";
/// The name of the metadata record that holds a store's catalog: a directory holding it is a
/// store's.
pub const STORE_RECORD: &str = "store";
/// Catalog version this build writes; it reads this one, version 3 (no `retired_through`),
/// version 2 (no `spaced_from` either) and version 1 (no seals either).
pub const CATALOG_VERSION: u16 = 4;
/// The catalog version with a segment list but without `retired_through`: still read.
pub const CATALOG_VERSION_V3: u16 = 3;
/// The catalog version with seals but without `spaced_from`: still read.
pub const CATALOG_VERSION_V2: u16 = 2;
/// The first catalog version, without seals: still read.
pub const CATALOG_VERSION_V1: u16 = 1;
/// Bytes of `spaced_from` (version 3).
pub const SPACED_FROM_LEN: usize = 8;
/// `segment_count` of a catalog without a segment list (every segment file counts).
pub const SEGMENTS_UNLISTED: u32 = u32::MAX;
/// Bytes of one seal.
pub const SEAL_LEN: usize = 8 + 8;
/// Bytes before the first topic: magic, version, store id, next topic id, count.
pub const CATALOG_HEADER_LEN: usize = 8 + 2 + 8 + 8 + 4;
/// Bytes of one topic before its name: id and name length.
pub const TOPIC_ROW_HEADER_LEN: usize = 8 + 2;
/// Longest topic name, in bytes.
pub const MAX_TOPIC_NAME_LEN: usize = 1024;

/// One topic of a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogTopic {
    /// Never reused; names the topic's files.
    pub id: u64,
    /// The broker's name of the topic.
    pub name: String,
}

/// Every topic of a store.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Catalog {
    /// Random id of the store, chosen when it was created.
    pub store_id: u64,
    /// The id the next new topic gets; above every listed id.
    pub next_topic_id: u64,
    /// The topics, in creation order.
    pub topics: Vec<CatalogTopic>,
    /// Cursor-journal segments sealed by a claim, ascending by segment, each once.
    pub seals: Vec<CatalogSeal>,
    /// Topics of this id and above keep their files in a directory of their own; those below,
    /// under a name prefix in the store directory (the layout of catalog versions 1 and 2).
    /// At most `next_topic_id`.
    pub spaced_from: u64,
    /// The cursor-journal segments that count, strictly ascending, none 0; `None`: every
    /// segment file counts (catalog versions 1 and 2, until a claim lists them).
    pub segments: Option<Vec<u64>>,
    /// The highest cursor-journal segment a rollover dropped from `segments` (0: none); every
    /// listed segment is above it.
    pub retired_through: u64,
    /// The newest segment at the store's last clean close and the length of it a sync
    /// covered: its records reach at least that far while it is listed.
    pub closed: Option<CatalogSeal>,
}

impl Catalog {
    /// Whether topic `id`'s files live in a directory of their own (on storage that has
    /// directories), rather than under the `t{id}-` prefix in the store directory.
    #[must_use]
    pub fn is_spaced(&self, id: u64) -> bool {
        id >= self.spaced_from
    }
}

/// A cursor-journal segment sealed by a claim: only its first `len` bytes count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatalogSeal {
    /// The segment's sequence number (never 0).
    pub segment: u64,
    /// Its bytes that count.
    pub len: u64,
}

/// Records `seal` (segment 0: none) among `seals`, replacing an earlier seal of its segment,
/// and drops the seals of segments not in `segments` (deleted by a rollover: a sequence number
/// is never used again). Kept ascending by segment.
pub fn record_seal(seals: &mut Vec<CatalogSeal>, seal: CatalogSeal, segments: &[u64]) {
    seals.retain(|s| s.segment != seal.segment && segments.contains(&s.segment));
    if seal.segment != 0 {
        seals.push(seal);
        seals.sort_by_key(|s| s.segment);
    }
}

/// Lists segment `seq` in `segments` (ascending), once.
pub fn list_segment(segments: &mut Vec<u64>, seq: u64) {
    if let Err(at) = segments.binary_search(&seq) {
        segments.insert(at, seq);
    }
}

/// Drops segment `seq` (the oldest listed, whose live state a rollover copied forward) from a
/// journal's list (`None`: a list of every segment file, which stays so), records it as
/// retired, and drops its close and its seal.
pub fn retire_segment(
    seq: u64,
    segments: Option<&mut Vec<u64>>,
    (retired_through, closed, seals): (&mut u64, &mut Option<CatalogSeal>, &mut Vec<CatalogSeal>),
) {
    if let Some(list) = segments {
        list.retain(|&s| s != seq);
    }
    *retired_through = (*retired_through).max(seq);
    if closed.is_some_and(|c| c.segment == seq) {
        *closed = None;
    }
    seals.retain(|s| s.segment != seq);
}

impl Catalog {
    /// The catalog's bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let names: usize = self.topics.iter().map(|t| t.name.len()).sum();
        let mut out = Vec::with_capacity(
            CATALOG_HEADER_LEN + self.topics.len() * TOPIC_ROW_HEADER_LEN + names,
        );
        out.extend_from_slice(&CATALOG_MAGIC);
        out.extend_from_slice(&CATALOG_VERSION.to_le_bytes());
        out.extend_from_slice(&self.store_id.to_le_bytes());
        out.extend_from_slice(&self.next_topic_id.to_le_bytes());
        out.extend_from_slice(
            &u32::try_from(self.topics.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        for t in &self.topics {
            out.extend_from_slice(&t.id.to_le_bytes());
            // Names are checked against MAX_TOPIC_NAME_LEN before they enter a catalog.
            out.extend_from_slice(
                &u16::try_from(t.name.len())
                    .unwrap_or(u16::MAX)
                    .to_le_bytes(),
            );
            out.extend_from_slice(t.name.as_bytes());
        }
        put_seals(&mut out, &self.seals);
        out.extend_from_slice(&self.spaced_from.to_le_bytes());
        put_segments(&mut out, self.segments.as_deref());
        put_retired_closed(&mut out, self.retired_through, self.closed);
        out
    }

    /// Decodes and checks a catalog (version 1 to 4): magic, version, every length against
    /// what remains, names UTF-8 and unique, ids unique and below `next_topic_id`, seals nonzero
    /// and strictly ascending by segment, `spaced_from` at most `next_topic_id`, listed segments
    /// nonzero, strictly ascending and above `retired_through`, nothing after the last topic
    /// (version 1), seal (version 2), segment (version 3) or `retired_through` (version 4).
    pub fn decode(bytes: &[u8]) -> Result<Self, Corruption> {
        let mut r = Reader::new(bytes);
        if r.array::<8>()? != CATALOG_MAGIC {
            return Err(Corruption::new(CorruptionKind::BadMagic, 0));
        }
        let version = r.u16()?;
        if ![
            CATALOG_VERSION,
            CATALOG_VERSION_V3,
            CATALOG_VERSION_V2,
            CATALOG_VERSION_V1,
        ]
        .contains(&version)
        {
            return Err(r.error(CorruptionKind::UnsupportedVersion(u32::from(version))));
        }
        let store_id = r.u64()?;
        let next_topic_id = r.u64()?;
        let count = r.u32()? as usize;
        if count > r.remaining() / TOPIC_ROW_HEADER_LEN {
            return Err(r.error(CorruptionKind::BadLength));
        }
        let mut topics = Vec::with_capacity(count);
        let mut ids = std::collections::HashSet::with_capacity(count);
        let mut names = std::collections::HashSet::with_capacity(count);
        for _ in 0..count {
            let id = r.u64()?;
            let len = usize::from(r.u16()?);
            if len == 0 || len > MAX_TOPIC_NAME_LEN {
                return Err(r.error(CorruptionKind::InvalidField("topic name length")));
            }
            let name = std::str::from_utf8(r.take(len)?)
                .map_err(|_| r.error(CorruptionKind::InvalidField("topic name")))?
                .to_owned();
            if id >= next_topic_id || !ids.insert(id) {
                return Err(r.error(CorruptionKind::InvalidField("topic id")));
            }
            if !names.insert(name.clone()) {
                return Err(r.error(CorruptionKind::InvalidField("topic name")));
            }
            topics.push(CatalogTopic { id, name });
        }
        let seals = if version == CATALOG_VERSION_V1 {
            Vec::new()
        } else {
            read_seals(&mut r)?
        };
        let (spaced_from, segments) = if version >= CATALOG_VERSION_V3 {
            let from = r.u64()?;
            if from > next_topic_id {
                return Err(r.error(CorruptionKind::InvalidField("spaced_from")));
            }
            (from, decode_segments(&mut r)?)
        } else {
            (next_topic_id, None)
        };
        let oldest = segments.as_ref().and_then(|list| list.first().copied());
        let (retired_through, closed) = if version == CATALOG_VERSION {
            read_retired_closed(&mut r, oldest)?
        } else {
            (oldest.map_or(0, |oldest| oldest - 1), None)
        };
        if r.remaining() != 0 {
            return Err(r.error(CorruptionKind::BadLength));
        }
        Ok(Self {
            store_id,
            next_topic_id,
            topics,
            seals,
            spaced_from,
            segments,
            retired_through,
            closed,
        })
    }
}

/// Writes journal seals: `count u32 | count x (segment u64 | len u64)`.
pub(super) fn put_seals(out: &mut Vec<u8>, seals: &[CatalogSeal]) {
    out.extend_from_slice(&u32::try_from(seals.len()).unwrap_or(u32::MAX).to_le_bytes());
    for s in seals {
        out.extend_from_slice(&s.segment.to_le_bytes());
        out.extend_from_slice(&s.len.to_le_bytes());
    }
}

/// Reads what [`put_seals`] wrote: each seal's segment nonzero, strictly ascending.
pub(super) fn read_seals(r: &mut Reader<'_>) -> Result<Vec<CatalogSeal>, Corruption> {
    let count = r.u32()? as usize;
    if count > r.remaining() / SEAL_LEN {
        return Err(r.error(CorruptionKind::BadLength));
    }
    let mut seals: Vec<CatalogSeal> = Vec::with_capacity(count);
    for _ in 0..count {
        let segment = r.u64()?;
        let len = r.u64()?;
        if segment == 0 || seals.last().is_some_and(|s| s.segment >= segment) {
            return Err(r.error(CorruptionKind::InvalidField("seal segment")));
        }
        seals.push(CatalogSeal { segment, len });
    }
    Ok(seals)
}

/// Writes a segment list: `count u32 | count x segment u64`, or [`SEGMENTS_UNLISTED`] alone
/// for `None`.
pub(super) fn put_segments(out: &mut Vec<u8>, segments: Option<&[u64]>) {
    match segments {
        Some(list) => {
            // Far fewer segments than u32::MAX exist (each holds up to 4 GiB).
            let count = u32::try_from(list.len())
                .unwrap_or(SEGMENTS_UNLISTED - 1)
                .min(SEGMENTS_UNLISTED - 1);
            out.extend_from_slice(&count.to_le_bytes());
            for s in list {
                out.extend_from_slice(&s.to_le_bytes());
            }
        }
        None => out.extend_from_slice(&SEGMENTS_UNLISTED.to_le_bytes()),
    }
}

/// The segment list (versions 3 and 4): its count, then each segment, nonzero and strictly
/// ascending; `None` for [`SEGMENTS_UNLISTED`].
pub(super) fn decode_segments(r: &mut Reader<'_>) -> Result<Option<Vec<u64>>, Corruption> {
    let count = r.u32()?;
    if count == SEGMENTS_UNLISTED {
        return Ok(None);
    }
    let count = count as usize;
    if count > r.remaining() / 8 {
        return Err(r.error(CorruptionKind::BadLength));
    }
    let mut list: Vec<u64> = Vec::with_capacity(count);
    for _ in 0..count {
        let seq = r.u64()?;
        if seq == 0 || list.last().is_some_and(|&last| last >= seq) {
            return Err(r.error(CorruptionKind::InvalidField("journal segment")));
        }
        list.push(seq);
    }
    Ok(Some(list))
}

/// Writes `retired_through u64 | closed_segment u64 | closed_len u64` (0 and 0: no close).
pub(super) fn put_retired_closed(out: &mut Vec<u8>, retired: u64, closed: Option<CatalogSeal>) {
    let closed = closed.unwrap_or(CatalogSeal { segment: 0, len: 0 });
    out.extend_from_slice(&retired.to_le_bytes());
    out.extend_from_slice(&closed.segment.to_le_bytes());
    out.extend_from_slice(&closed.len.to_le_bytes());
}

/// Reads what [`put_retired_closed`] wrote, `retired_through` below the `oldest` listed
/// segment.
pub(super) fn read_retired_closed(
    r: &mut Reader<'_>,
    oldest: Option<u64>,
) -> Result<(u64, Option<CatalogSeal>), Corruption> {
    let retired = r.u64()?;
    if oldest.is_some_and(|oldest| oldest <= retired) {
        return Err(r.error(CorruptionKind::InvalidField("retired_through")));
    }
    let segment = r.u64()?;
    let len = r.u64()?;
    let closed = match (segment, len) {
        (0, 0) => None,
        (0, _) => return Err(r.error(CorruptionKind::InvalidField("closed_segment"))),
        (segment, len) => Some(CatalogSeal { segment, len }),
    };
    Ok((retired, closed))
}

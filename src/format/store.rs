//! The store catalog: which topics a store holds, and the directory id each topic's files use.
//!
//! The catalog is the payload of the store's metadata record `store` (framed, checksummed and
//! versioned by [`crate::meta`]). Layout, all integers little-endian:
//!
//! ```text
//! magic "ACKSCATL" (8) | version u16 = 5 | store_id u64 | next_topic_id u64 | count u32
//! count x ( made_at u64 | crc u32 )                                   (version 5: chunk pins)
//! tail_count u32 | tail_count x ( topic_id u64 | name_len u16 | name )   (version 5: the tail)
//! count x ( topic_id u64 | name_len u16 | name (name_len bytes of UTF-8) )  (versions 1 to 4)
//! seal_count u32 | seal_count x ( segment u64 | len u64 )          (versions 2 and 3)
//! spaced_from u64                                                  (version 3 only)
//! segment_count u32 | segment_count x segment u64                  (versions 3 and 4)
//! retired_through u64                                              (versions 4 and 5)
//! closed_segment u64 | closed_len u64                              (versions 4 and 5)
//! ```
//!
//! Versions 1 (no seals), 2 (no `spaced_from`), 3 (no `retired_through`) and 4 (topics inline)
//! are still read; this build writes version 5.
//!
//! In version 5 the topics are cut, in creation order, into chunks of [`CHUNK_TOPICS`]: every
//! full chunk lives in a chunk record of its own (see [`TopicChunk`]), the last partial one
//! (the tail, fewer than [`CHUNK_TOPICS`] topics, maybe none) inline in the catalog. The
//! catalog pins full chunk `k` (its `k`-th pin): `made_at` is the catalog version whose write
//! pinned it, which names the record ([`chunk_record`]), and `crc` the CRC32 of its whole
//! payload, so a chunk deleted, cut, damaged or replaced by an older copy or a sibling is
//! refused. A chunk record is written once, by the creation that fills the tail (or the
//! upgrade of a catalog of an earlier version), under the name of the catalog version that
//! write's commit takes, and never written again or superseded.
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

use super::{Corruption, Reader, crc32};
use crate::error::CorruptionKind;
use crate::hashing::{HashSetExt, IdSet};

/// Magic at the start of a catalog.
pub const CATALOG_MAGIC: [u8; 8] = *b"ACKSCATL";
/// The name of the metadata record that holds a store's catalog: a directory holding it is a
/// store's.
pub const STORE_RECORD: &str = "store";
/// Catalog version this build writes (topics in chunk records); it reads this one, version 4
/// (topics inline), version 3 (no `retired_through` either), version 2 (no `spaced_from`
/// either) and version 1 (no seals either).
pub const CATALOG_VERSION: u16 = 5;
/// The catalog version with its topics inline: still read.
pub const CATALOG_VERSION_V4: u16 = 4;
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
/// Bytes of one chunk pin: `made_at`, `crc`.
pub const CHUNK_PIN_LEN: usize = 8 + 4;
/// Topics of a chunk record (every one is full). A creation writes the catalog (a pin per
/// full chunk and the tail, fewer than this many names), so its bytes do not grow with the
/// names of the others; the one that fills the tail writes its chunk record first.
pub const CHUNK_TOPICS: usize = 512;
/// Magic at the start of a chunk record.
pub const CHUNK_MAGIC: [u8; 8] = *b"ACKSTOPC";
/// Chunk record version this build writes and reads.
pub const CHUNK_VERSION: u16 = 1;
/// Bytes of a chunk record before its first topic: magic, version, index, count.
pub const CHUNK_HEADER_LEN: usize = 8 + 2 + 4 + 4;
/// Names of chunk records start with this: `store-topics-{index}-{made_at}`.
pub const CHUNK_RECORD_PREFIX: &str = "store-topics-";

/// The name of the record of chunk `index` first pinned by the catalog's version `made_at`.
#[must_use]
pub fn chunk_record(index: usize, made_at: u64) -> String {
    format!("{CHUNK_RECORD_PREFIX}{index}-{made_at}")
}

/// Whether `record` is named as a chunk record (whether a catalog pins it or not).
#[must_use]
pub fn is_chunk_record(record: &str) -> bool {
    is_chunk_name(CHUNK_RECORD_PREFIX, record)
}

/// Whether `record` is named `{prefix}{index}-{made_at}`, both decimal: a chunk record of the
/// store catalog's topics or of a topic's cursor table, after the record that pins it.
#[must_use]
pub fn is_chunk_name(prefix: &str, record: &str) -> bool {
    record.strip_prefix(prefix).is_some_and(|rest| {
        rest.split_once('-').is_some_and(|(i, v)| {
            [i, v]
                .iter()
                .all(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        })
    })
}

/// The catalog's pin of one chunk record (of [`CHUNK_TOPICS`] topics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkPin {
    /// The catalog version whose write pinned the chunk (names its record).
    pub made_at: u64,
    /// CRC32 of the chunk record's whole payload. That payload is not a frame: it carries no
    /// CRC of its own and ends in its last topic's name, so this CRC covers every byte of its
    /// topics (a topic record's chunk, of cursors or of ledgers, is a frame, pinned by the CRC
    /// before its trailing one instead: [`crate::format::meta::chunk_crc`]).
    pub crc: u32,
}

/// One chunk record: topics `index * CHUNK_TOPICS ..` of the catalog, in creation order.
///
/// ```text
/// magic "ACKSTOPC" (8) | version u16 = 1 | index u32 | count u32
/// count x ( topic_id u64 | name_len u16 | name (name_len bytes of UTF-8) )
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicChunk {
    /// The chunk's place among the catalog's chunks.
    pub index: u32,
    /// Its topics, 1 to [`CHUNK_TOPICS`].
    pub topics: Vec<CatalogTopic>,
}

impl TopicChunk {
    /// The chunk record's bytes.
    #[must_use]
    pub fn encode(index: u32, topics: &[CatalogTopic]) -> Vec<u8> {
        let names: usize = topics.iter().map(|t| t.name.len()).sum();
        let mut out =
            Vec::with_capacity(CHUNK_HEADER_LEN + topics.len() * TOPIC_ROW_HEADER_LEN + names);
        out.extend_from_slice(&CHUNK_MAGIC);
        out.extend_from_slice(&CHUNK_VERSION.to_le_bytes());
        out.extend_from_slice(&index.to_le_bytes());
        put_topics(&mut out, topics);
        out
    }

    /// Decodes and checks a chunk record: magic, version, a count of 1 to [`CHUNK_TOPICS`]
    /// topics, each name 1 to [`MAX_TOPIC_NAME_LEN`] bytes of UTF-8, nothing after the last.
    /// Ids and names are checked against the whole catalog by the caller.
    pub fn decode(bytes: &[u8]) -> Result<Self, Corruption> {
        let mut r = Reader::new(bytes);
        if r.array::<8>()? != CHUNK_MAGIC {
            return Err(Corruption::new(CorruptionKind::BadMagic, 0));
        }
        let version = r.u16()?;
        if version != CHUNK_VERSION {
            return Err(r.error(CorruptionKind::UnsupportedVersion(u32::from(version))));
        }
        let index = r.u32()?;
        let count = r.u32()? as usize;
        if count == 0 || count > CHUNK_TOPICS {
            return Err(r.error(CorruptionKind::InvalidField("chunk topic count")));
        }
        let topics = read_topics(&mut r, count)?;
        if r.remaining() != 0 {
            return Err(r.error(CorruptionKind::BadLength));
        }
        Ok(Self { index, topics })
    }
}

/// Writes `count u32 | count x ( topic_id u64 | name_len u16 | name )`.
fn put_topics(out: &mut Vec<u8>, topics: &[CatalogTopic]) {
    out.extend_from_slice(
        &u32::try_from(topics.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    for t in topics {
        out.extend_from_slice(&t.id.to_le_bytes());
        // Names are checked against MAX_TOPIC_NAME_LEN before they enter a catalog.
        out.extend_from_slice(
            &u16::try_from(t.name.len())
                .unwrap_or(u16::MAX)
                .to_le_bytes(),
        );
        out.extend_from_slice(t.name.as_bytes());
    }
}

/// Reads `count` topic rows (after their count): each name 1 to [`MAX_TOPIC_NAME_LEN`] bytes
/// of UTF-8; the count checked against the bytes left before anything is allocated.
fn read_topics(r: &mut Reader<'_>, count: usize) -> Result<Vec<CatalogTopic>, Corruption> {
    if count > r.remaining() / TOPIC_ROW_HEADER_LEN {
        return Err(r.error(CorruptionKind::BadLength));
    }
    let mut topics = Vec::with_capacity(count);
    for _ in 0..count {
        let id = r.u64()?;
        let len = usize::from(r.u16()?);
        if len == 0 || len > MAX_TOPIC_NAME_LEN {
            return Err(r.error(CorruptionKind::InvalidField("topic name length")));
        }
        let name = std::str::from_utf8(r.take(len)?)
            .map_err(|_| r.error(CorruptionKind::InvalidField("topic name")))?
            .to_owned();
        topics.push(CatalogTopic { id, name });
    }
    Ok(topics)
}

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
    /// The topics, in creation order. A catalog of version 5 decodes with its tail only: the
    /// topics before it are read from the chunk records `chunks` pins ([`Catalog::add_chunk`]).
    pub topics: Vec<CatalogTopic>,
    /// The pins of the chunk records that hold the first `chunks.len() * CHUNK_TOPICS` of
    /// `topics` (version 5); empty for a catalog of an earlier version, whose topics are all
    /// inline.
    pub chunks: Vec<ChunkPin>,
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
    /// The catalog's bytes (version 5: the chunk pins and the tail, not the pinned topics).
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        self.encode_version(CATALOG_VERSION)
    }

    /// The catalog's bytes in version 5 ([`Catalog::encode`]) or, for any other `version`, in
    /// version 4, the topics inline: what earlier builds wrote, for samples and for tests of
    /// the upgrade (an earlier version is the tail of version 4 cut off).
    #[must_use]
    pub fn encode_version(&self, version: u16) -> Vec<u8> {
        let pins = version == CATALOG_VERSION;
        let inline = if pins { self.tail() } else { &self.topics };
        let names: usize = inline
            .iter()
            .map(|t| TOPIC_ROW_HEADER_LEN + t.name.len())
            .sum::<usize>()
            + 4;
        let mut out = Vec::with_capacity(
            CATALOG_HEADER_LEN
                + names
                + self.chunks.len() * CHUNK_PIN_LEN
                + (self.seals.len() + 2) * SEAL_LEN
                + self.segments.as_ref().map_or(0, Vec::len) * 8,
        );
        out.extend_from_slice(&CATALOG_MAGIC);
        if pins {
            out.extend_from_slice(&CATALOG_VERSION.to_le_bytes());
        } else {
            out.extend_from_slice(&CATALOG_VERSION_V4.to_le_bytes());
        }
        out.extend_from_slice(&self.store_id.to_le_bytes());
        out.extend_from_slice(&self.next_topic_id.to_le_bytes());
        if pins {
            out.extend_from_slice(
                &u32::try_from(self.chunks.len())
                    .unwrap_or(u32::MAX)
                    .to_le_bytes(),
            );
            for pin in &self.chunks {
                out.extend_from_slice(&pin.made_at.to_le_bytes());
                out.extend_from_slice(&pin.crc.to_le_bytes());
            }
            put_topics(&mut out, self.tail());
        } else {
            put_topics(&mut out, &self.topics);
        }
        put_seals(&mut out, &self.seals);
        out.extend_from_slice(&self.spaced_from.to_le_bytes());
        put_segments(&mut out, self.segments.as_deref());
        put_retired_closed(&mut out, self.retired_through, self.closed);
        out
    }

    /// Adds the topics of chunk record `index` (its bytes `bytes`) after checking them
    /// against its pin: the payload's CRC32, the index inside, [`CHUNK_TOPICS`] topics, and
    /// the chunks before it added already (`topics` holds exactly theirs; [`Catalog::decode`]
    /// left the tail there, which the caller sets aside until the last chunk is added). Ids
    /// and names are checked once every topic is in ([`Catalog::check_topics`]).
    pub fn add_chunk(&mut self, index: usize, bytes: &[u8]) -> Result<(), Corruption> {
        let pin = self
            .chunks
            .get(index)
            .copied()
            .ok_or_else(|| Corruption::new(CorruptionKind::InvalidField("chunk index"), 0))?;
        if crc32(&[bytes]) != pin.crc {
            return Err(Corruption::new(CorruptionKind::ChecksumMismatch, 0));
        }
        let chunk = TopicChunk::decode(bytes)?;
        if chunk.index as usize != index
            || chunk.topics.len() != CHUNK_TOPICS
            || self.topics.len() != index * CHUNK_TOPICS
        {
            return Err(Corruption::new(
                CorruptionKind::InvalidField("chunk (not the one the catalog pins)"),
                0,
            ));
        }
        self.topics.extend(chunk.topics);
        Ok(())
    }

    /// The topics past the pinned chunks: what version 5 holds inline. A catalog decoded
    /// before its chunks are added holds its tail alone, fewer topics than its pins cover
    /// (with a pin, the tail is shorter than a chunk), so both read the same tail.
    #[must_use]
    pub fn tail(&self) -> &[CatalogTopic] {
        self.topics
            .get(self.chunks.len() * CHUNK_TOPICS..)
            .unwrap_or(&self.topics)
    }

    /// Checks what only the whole list of topics shows: ids unique and below
    /// `next_topic_id`, names unique.
    pub fn check_topics(&self) -> Result<(), Corruption> {
        let mut ids = IdSet::with_capacity(self.topics.len());
        let mut names = std::collections::HashSet::with_capacity(self.topics.len());
        for t in &self.topics {
            if t.id >= self.next_topic_id || !ids.insert(t.id) {
                return Err(Corruption::new(CorruptionKind::InvalidField("topic id"), 0));
            }
            if !names.insert(t.name.as_str()) {
                return Err(Corruption::new(
                    CorruptionKind::InvalidField("topic name"),
                    0,
                ));
            }
        }
        Ok(())
    }

    /// Decodes and checks a catalog (version 1 to 5): magic, version, every length against
    /// what remains, names UTF-8 and unique, ids unique and below `next_topic_id` (in version 5
    /// of the tail, fewer than [`CHUNK_TOPICS`], which `topics` holds until the chunks are
    /// added by [`Catalog::add_chunk`]), seals nonzero
    /// and strictly ascending by segment, `spaced_from` at most `next_topic_id`, listed segments
    /// nonzero, strictly ascending and above `retired_through`, nothing after the last topic
    /// (version 1), seal (version 2), segment (version 3) or `retired_through` (versions 4
    /// and 5).
    pub fn decode(bytes: &[u8]) -> Result<Self, Corruption> {
        let mut r = Reader::new(bytes);
        if r.array::<8>()? != CATALOG_MAGIC {
            return Err(Corruption::new(CorruptionKind::BadMagic, 0));
        }
        let version = r.u16()?;
        if ![
            CATALOG_VERSION,
            CATALOG_VERSION_V4,
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
        let mut catalog = Self {
            store_id,
            next_topic_id,
            ..Self::default()
        };
        if version == CATALOG_VERSION {
            if count > r.remaining() / CHUNK_PIN_LEN {
                return Err(r.error(CorruptionKind::BadLength));
            }
            catalog.chunks = (0..count)
                .map(|_| {
                    Ok(ChunkPin {
                        made_at: r.u64()?,
                        crc: r.u32()?,
                    })
                })
                .collect::<Result<_, Corruption>>()?;
            let at = r.offset();
            let tail = r.u32()? as usize;
            if tail >= CHUNK_TOPICS {
                return Err(r.error(CorruptionKind::InvalidField("catalog tail count")));
            }
            catalog.topics = read_topics(&mut r, tail)?;
            catalog
                .check_topics()
                .map_err(|c| Corruption::new(c.kind, at))?;
        } else {
            let at = r.offset();
            catalog.topics = read_topics(&mut r, count)?;
            catalog
                .check_topics()
                .map_err(|c| Corruption::new(c.kind, at))?;
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
        let (retired_through, closed) = if version >= CATALOG_VERSION_V4 {
            read_retired_closed(&mut r, oldest)?
        } else {
            (oldest.map_or(0, |oldest| oldest - 1), None)
        };
        if r.remaining() != 0 {
            return Err(r.error(CorruptionKind::BadLength));
        }
        Ok(Self {
            seals,
            spaced_from,
            segments,
            retired_through,
            closed,
            ..catalog
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

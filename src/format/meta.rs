//! Metadata records: the topic record and its ledger and cursor entries, the cursor record, and
//! the envelope the metadata store keeps around each stored value.
//!
//! Owns: the byte layout of these records (see the "Metadata records" section of
//! `docs/format.md`). Must never do I/O, panic on any input, or allocate ahead of the input:
//! every length and count is checked against the bytes that remain before anything is
//! allocated, so a decoder's memory is proportional to the bytes it was given.
//!
//! Every record is one self-contained frame, all integers little-endian:
//!
//! ```text
//! offset  size  field
//! 0       8     magic            b"ACKSMETA"
//! 8       2     kind             u16 (1 topic, 2 ledger, 3 cursor entry, 4 cursor, 5 stored)
//! 10      2     format version   u16 (1; 2 for a topic record listing its own journal; 3 for
//!                                a store's topic record naming its store)
//! 12      4     body length      u32, = frame length - 20
//! 16      n     body             per kind, below
//! 16+n    4     CRC32            crc32fast over bytes [0, 16+n)
//! ```
//!
//! A frame is the whole input of a decoder: the CRC is the last four bytes and is verified
//! before any field is trusted.

use std::collections::BTreeMap;

use super::store::{
    CatalogSeal, decode_segments, put_retired_closed, put_seals, put_segments, read_retired_closed,
    read_seals,
};
use super::{Corruption, Reader};
use crate::error::{CorruptionKind, CorruptionPlace, Error, Result};
use crate::position::Position;

/// Magic number opening every metadata frame.
pub const MAGIC: [u8; 8] = *b"ACKSMETA";
/// The metadata format version of every record but a topic record that lists a journal.
pub const FORMAT_VERSION: u16 = 1;
/// The format version of a topic record that lists the cursor journal its topic hosts (a
/// topic opened alone, see [`HostedJournal`]): read by this build, refused by earlier ones
/// (their open fails with an unsupported version, writing nothing).
pub const TOPIC_JOURNAL_VERSION: u16 = 2;
/// The format version of a store's topic record, which names its store (see
/// [`TopicRecord::store_id`]): read by this build, refused by earlier ones (their open fails with
/// an unsupported version, writing nothing).
pub const TOPIC_STORE_VERSION: u16 = 3;
/// What a topic record is reported as when its host is not the one opening it: a store's topic
/// (the record names its store) opened alone is [`Error::OwnedByStore`], but a store that finds
/// in a topic's place the record of a topic that hosts its own cursor journal, or of another
/// store's topic, refuses it as damage naming the record's host field.
pub const OTHER_HOST: &str =
    "host (the topic record belongs to a topic opened alone or to another store, not this store)";
/// What a store's topic record is reported as when a ledger file of the topic has an id at or
/// above the record's `next_ledger_id` (by the topic's open and by `ackstore verify`): a store's
/// topic records each block of ids before it creates a file of one, so only a record older than
/// the newest written (the newest deleted, or an older copy put back) leaves such a file.
pub const OLDER_TOPIC_RECORD: &str =
    "next ledger id (a ledger file at or above it: an older version of the topic record)";
/// What a store's topic record is reported as when the store's journal holds the state of a
/// cursor of the topic with an id at or above the record's `next_cursor_id` (by the topic's open
/// and by `ackstore verify`): a cursor's id is given out by a record write (raising
/// `next_cursor_id`) that returns before the cursor can flush, and no record write lowers it,
/// so only a record older than the newest written leaves such a state.
pub const OLDER_TOPIC_RECORD_CURSORS: &str =
    "next cursor id (a journal cursor at or above it: an older version of the topic record)";

const KIND_LEN: usize = size_of::<u16>();
const VERSION_LEN: usize = size_of::<u16>();
const BODY_LEN_LEN: usize = size_of::<u32>();
const BODY_LEN_AT: usize = MAGIC.len() + KIND_LEN + VERSION_LEN;
/// Bytes before the body: magic, kind, format version, body length.
pub const HEADER_LEN: usize = BODY_LEN_AT + BODY_LEN_LEN;
/// Bytes of the trailing CRC32.
pub const CRC_LEN: usize = size_of::<u32>();
/// Bytes a frame adds around its body.
pub const FRAME_OVERHEAD: usize = HEADER_LEN + CRC_LEN;
/// Largest frame a decoder accepts (and the metadata store writes).
///
/// Records are encoded whatever their size; one above this limit is refused by the decoders and
/// by `FileMetaStore::put`, so it is never stored. A topic record with a million ledgers is about
/// 40 MiB.
pub const MAX_RECORD_BYTES: usize = 64 << 20;

/// Encoded size of a [`LedgerRecord`] body: five u64 fields.
pub const LEDGER_BODY_LEN: usize = 5 * size_of::<u64>();
/// Smallest encoded cursor entry body: id and name length, empty name.
const CURSOR_ENTRY_MIN_LEN: usize = size_of::<u64>() + size_of::<u32>();
/// Smallest encoded property: key length, empty key, value.
const PROPERTY_MIN_LEN: usize = size_of::<u32>() + size_of::<i64>();

/// Which record a frame holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Topic = 1,
    Ledger = 2,
    CursorEntry = 3,
    Cursor = 4,
    Stored = 5,
}

/// A sealed data ledger as the topic record lists it: enough to pick the ledger for a seek by
/// index or by timestamp without reading it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LedgerRecord {
    /// The ledger id.
    pub id: u64,
    /// Number of entries in the ledger.
    pub entries: u64,
    /// Message index of the ledger's first entry.
    pub first_index: u64,
    /// Timestamp of the ledger's first entry.
    pub first_timestamp: u64,
    /// Timestamp of the ledger's last entry.
    pub last_timestamp: u64,
}

/// A cursor of the topic: its client-given name and the id its files are named after
/// (`cursor-{id}`). Names never become file names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CursorEntry {
    /// The cursor's name as the client gave it: any UTF-8. Shared, so a copy of the topic
    /// record (each cursor creation makes one) copies no name's bytes.
    pub name: std::sync::Arc<str>,
    /// The id the cursor's record and ledgers are named after.
    pub id: u64,
}

/// The topic record: its sealed data ledgers and its cursors.
///
/// Body layout: `next_ledger_id u64 | next_cursor_id u64 | ledger count u32 | ledgers |
/// cursor count u32 | cursor entries`, each ledger and cursor entry as the body of its own
/// record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopicRecord {
    /// The next data ledger id to use; greater than every id ever used.
    pub next_ledger_id: u64,
    /// Sealed data ledgers, in id order.
    pub ledgers: Vec<LedgerRecord>,
    /// Every cursor of the topic.
    pub cursors: Vec<CursorEntry>,
    /// The next cursor id to use; greater than every id ever used.
    pub next_cursor_id: u64,
    /// A random identity drawn when the topic is created (or first opened by a release that
    /// knows it), written into every cursor record so a record copied from another topic is
    /// recognised; 0 for a record of an earlier release. Encoded as an optional trailer:
    /// `topic id u64`, present only when non-zero (always, in format version 2).
    pub topic_id: u64,
    /// The cursor journal a topic opened alone hosts in its directory; `None` for a topic of a
    /// store (its store's catalog lists the store's journal) and for a record of an earlier
    /// release. Present, the record is written in format version 2 (see
    /// [`TOPIC_JOURNAL_VERSION`]), the topic id always present and followed by the listing.
    pub journal: Option<HostedJournal>,
    /// The host of a store's topic: its store's id (the catalog's `store_id`), never 0; 0 for a
    /// topic opened alone and for a store's topic record of an earlier release. Non-zero, the
    /// record is written in format version 3 (see [`TOPIC_STORE_VERSION`]), the topic id
    /// always present and followed by it; a record names a store or lists a journal, never
    /// both (a record listing a journal is written in version 2 whatever this holds).
    pub store_id: u64,
}

/// The cursor journal a topic opened alone hosts, as its topic record lists it: what a
/// store's catalog holds of the store's journal (see [`crate::format::store`]), with the same
/// meaning.
///
/// Layout, after the topic id: `seal_count u32 | seal_count x (segment u64 | len u64) |
/// segment_count u32 | segment_count x segment u64 | retired_through u64 | closed_segment u64 |
/// closed_len u64`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostedJournal {
    /// Segments sealed by a claim, strictly ascending by segment.
    pub seals: Vec<CatalogSeal>,
    /// The segments that count, strictly ascending, none 0.
    pub segments: Vec<u64>,
    /// The highest segment a rollover dropped from `segments` (0: none); every listed segment
    /// is above it.
    pub retired_through: u64,
    /// The newest segment at the topic's last clean close and the length of it a sync
    /// covered.
    pub closed: Option<CatalogSeal>,
}

/// One cursor's record: where its ack state lives, and the fallback state when that is lost.
///
/// Body layout: `name length u32 | name | has cursor ledger u8 (0 or 1) | cursor ledger u64
/// (0 when absent) | mark-delete ledger u64 | mark-delete entry u64 | epoch u64 |
/// property count u32 | properties (key length u32, key, value i64), keys ascending`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CursorRecord {
    /// The cursor's name as the client gave it: any UTF-8.
    pub name: String,
    /// The cursor ledger holding the ack state, if one has been created.
    pub cursor_ledger: Option<u64>,
    /// Mark-delete position to fall back on when the cursor ledger holds no valid state.
    pub mark_delete: Position,
    /// Increases on every seek, reset or redeliver request, never on a reopen.
    pub epoch: u64,
    /// Application properties of the cursor.
    pub properties: BTreeMap<String, i64>,
    /// Which cursor of which topic the record belongs to; `None` for a record of an earlier
    /// release. Encoded as an optional trailer: `cursor id u64 | topic id u64`.
    pub identity: Option<CursorIdentity>,
}

/// The identity a cursor record carries, checked against where it is found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CursorIdentity {
    /// The cursor's id in the topic's cursor table (its record is `cursor-{id}`).
    pub cursor_id: u64,
    /// The [`TopicRecord::topic_id`] of the topic it belongs to.
    pub topic_id: u64,
}

impl LedgerRecord {
    /// Encodes the record as a self-contained frame.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        encode_frame(Kind::Ledger, |out| self.write_body(out))
    }

    /// Decodes a frame written by [`LedgerRecord::encode`].
    ///
    /// # Errors
    /// A [`Corruption`] (kind and offset in `bytes`) when the bytes are not exactly one valid
    /// ledger record frame; the caller names the record it read them as.
    pub fn decode(bytes: &[u8]) -> Result<Self, Corruption> {
        read_frame(Kind::Ledger, bytes, Self::read_body)
    }

    fn write_body(&self, out: &mut Vec<u8>) {
        for v in [
            self.id,
            self.entries,
            self.first_index,
            self.first_timestamp,
            self.last_timestamp,
        ] {
            put_u64(out, v);
        }
    }

    fn read_body(r: &mut Reader<'_>) -> Result<Self, Corruption> {
        Ok(Self {
            id: r.u64()?,
            entries: r.u64()?,
            first_index: r.u64()?,
            first_timestamp: r.u64()?,
            last_timestamp: r.u64()?,
        })
    }
}

impl CursorEntry {
    /// Encodes the entry as a self-contained frame.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        encode_frame(Kind::CursorEntry, |out| self.write_body(out))
    }

    /// Decodes a frame written by [`CursorEntry::encode`].
    ///
    /// # Errors
    /// A [`Corruption`] (kind and offset in `bytes`) when the bytes are not exactly one valid
    /// cursor entry frame; the caller names the record it read them as.
    pub fn decode(bytes: &[u8]) -> Result<Self, Corruption> {
        read_frame(Kind::CursorEntry, bytes, Self::read_body)
    }

    fn write_body(&self, out: &mut Vec<u8>) {
        put_u64(out, self.id);
        put_str(out, &self.name);
    }

    fn read_body(r: &mut Reader<'_>) -> Result<Self, Corruption> {
        let id = r.u64()?;
        let name = r.string("cursor name")?.into();
        Ok(Self { name, id })
    }
}

impl TopicRecord {
    /// The id the cursor table gives cursor `name`, if it lists it.
    #[must_use]
    pub fn cursor_id(&self, name: &str) -> Option<u64> {
        self.cursors.iter().find(|c| &*c.name == name).map(|c| c.id)
    }

    /// Encodes the record as a self-contained frame (format version 2 when it lists a
    /// journal, 3 when it names a store, 1 otherwise).
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let version = if self.journal.is_some() {
            TOPIC_JOURNAL_VERSION
        } else if self.store_id != 0 {
            TOPIC_STORE_VERSION
        } else {
            FORMAT_VERSION
        };
        encode_versioned(Kind::Topic, version, |out| {
            put_u64(out, self.next_ledger_id);
            put_u64(out, self.next_cursor_id);
            put_count(out, self.ledgers.len());
            for ledger in &self.ledgers {
                ledger.write_body(out);
            }
            put_count(out, self.cursors.len());
            for cursor in &self.cursors {
                cursor.write_body(out);
            }
            if let Some(journal) = &self.journal {
                put_u64(out, self.topic_id);
                put_seals(out, &journal.seals);
                put_segments(out, Some(&journal.segments));
                put_retired_closed(out, journal.retired_through, journal.closed);
            } else if self.store_id != 0 {
                put_u64(out, self.topic_id);
                put_u64(out, self.store_id);
            } else if self.topic_id != 0 {
                put_u64(out, self.topic_id);
            }
        })
    }

    /// Decodes a frame written by [`TopicRecord::encode`], of format version 1, 2 or 3.
    ///
    /// # Errors
    /// A [`Corruption`] (kind and offset in `bytes`) when the bytes are not exactly one valid
    /// topic record frame; the caller names the record it read them as.
    pub fn decode(bytes: &[u8]) -> Result<Self, Corruption> {
        let (version, body) = check_frame_of(
            Kind::Topic,
            bytes,
            &[FORMAT_VERSION, TOPIC_JOURNAL_VERSION, TOPIC_STORE_VERSION],
        )?;
        let mut r = Reader::at(body, HEADER_LEN);
        let r = &mut r;
        let next_ledger_id = r.u64()?;
        let next_cursor_id = r.u64()?;
        let ledger_count = r.count_u32(LEDGER_BODY_LEN)?;
        // Fixed-size items: the count was checked against the bytes left, so this
        // allocation is no larger than the input.
        let mut ledgers = Vec::with_capacity(ledger_count);
        for _ in 0..ledger_count {
            ledgers.push(LedgerRecord::read_body(r)?);
        }
        let cursor_count = r.count_u32(CURSOR_ENTRY_MIN_LEN)?;
        // Variable-size items grow the vector as they are read, never ahead of the input.
        let mut cursors = Vec::new();
        for _ in 0..cursor_count {
            cursors.push(CursorEntry::read_body(r)?);
        }
        // The optional trailer (always there in version 2); a zero would not re-encode to the
        // same bytes.
        let topic_id = match r.remaining() {
            0 if version == FORMAT_VERSION => 0,
            _ => match r.u64()? {
                0 => return Err(r.error(CorruptionKind::InvalidField("topic id"))),
                id => id,
            },
        };
        let journal = if version == TOPIC_JOURNAL_VERSION {
            let seals = read_seals(r)?;
            let segments = decode_segments(r)?
                .ok_or_else(|| r.error(CorruptionKind::InvalidField("journal segment")))?;
            let (retired_through, closed) = read_retired_closed(r, segments.first().copied())?;
            Some(HostedJournal {
                seals,
                segments,
                retired_through,
                closed,
            })
        } else {
            None
        };
        // Version 3 names the store: never 0 (a topic of no store is written in version 1).
        let store_id = if version == TOPIC_STORE_VERSION {
            match r.u64()? {
                0 => return Err(r.error(CorruptionKind::InvalidField("store id"))),
                id => id,
            }
        } else {
            0
        };
        r.finish()?;
        Ok(Self {
            next_ledger_id,
            ledgers,
            cursors,
            next_cursor_id,
            topic_id,
            journal,
            store_id,
        })
    }
}

impl CursorRecord {
    /// Encodes the record as a self-contained frame.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        encode_frame(Kind::Cursor, |out| {
            put_str(out, &self.name);
            out.push(u8::from(self.cursor_ledger.is_some()));
            put_u64(out, self.cursor_ledger.unwrap_or(0));
            put_u64(out, self.mark_delete.ledger_id);
            put_u64(out, self.mark_delete.entry_id);
            put_u64(out, self.epoch);
            put_count(out, self.properties.len());
            for (key, value) in &self.properties {
                put_str(out, key);
                out.extend_from_slice(&value.to_le_bytes());
            }
            if let Some(identity) = self.identity {
                put_u64(out, identity.cursor_id);
                put_u64(out, identity.topic_id);
            }
        })
    }

    /// Decodes a frame written by [`CursorRecord::encode`].
    ///
    /// # Errors
    /// A [`Corruption`] (kind and offset in `bytes`) when the bytes are not exactly one valid
    /// cursor record frame; the caller names the record it read them as.
    pub fn decode(bytes: &[u8]) -> Result<Self, Corruption> {
        read_frame(Kind::Cursor, bytes, |r| {
            let name = r.string("cursor name")?;
            let has_ledger = r.u8()?;
            let ledger = r.u64()?;
            // Only the two encodings `encode` produces are accepted, so a decoded record
            // re-encodes to the same bytes.
            let cursor_ledger = match (has_ledger, ledger) {
                (0, 0) => None,
                (1, id) => Some(id),
                _ => return Err(r.error(CorruptionKind::InvalidField("cursor ledger"))),
            };
            let mark_delete = Position::new(r.u64()?, r.u64()?);
            let epoch = r.u64()?;
            let count = r.count_u32(PROPERTY_MIN_LEN)?;
            let mut properties = BTreeMap::new();
            for _ in 0..count {
                let key = r.string("property key")?;
                let value = r.i64()?;
                if properties
                    .last_key_value()
                    .is_some_and(|(last, _)| *last >= key)
                {
                    return Err(r.error(CorruptionKind::InvalidField("property keys out of order")));
                }
                properties.insert(key, value);
            }
            let identity = if r.remaining() == 0 {
                None
            } else {
                Some(CursorIdentity {
                    cursor_id: r.u64()?,
                    topic_id: r.u64()?,
                })
            };
            Ok(Self {
                name,
                cursor_ledger,
                mark_delete,
                epoch,
                properties,
                identity,
            })
        })
    }
}

impl CursorRecord {
    /// Checks that this record belongs where it was found: cursor `cursor_id` named `name` of
    /// the topic `topic_id` (0: a topic record of an earlier release, whose identity is
    /// unknown). A record without identity (an earlier release's) is checked by name only.
    ///
    /// # Errors
    /// [`Error::Corrupted`] at record `cursor-{cursor_id}` when the name, the cursor id or
    /// the topic differ: the record was moved or copied from elsewhere, and using it would
    /// give the cursor another cursor's state.
    pub fn check_identity(&self, cursor_id: u64, name: &str, topic_id: u64) -> Result<()> {
        let wrong = |what| {
            Err(Error::Corrupted {
                place: CorruptionPlace::Record(format!("cursor-{cursor_id}")),
                kind: CorruptionKind::InvalidField(what),
            })
        };
        if self.name != name {
            return wrong("the record belongs to another cursor (name differs)");
        }
        match self.identity {
            Some(id) if id.cursor_id != cursor_id => {
                wrong("the record belongs to another cursor (cursor id differs)")
            }
            Some(id) if topic_id != 0 && id.topic_id != topic_id => {
                wrong("the record belongs to another topic (topic id differs)")
            }
            _ => Ok(()),
        }
    }
}

/// Encodes the envelope the metadata store writes: the record's version and its opaque bytes.
///
/// Body layout: `version u64 | payload` (the payload runs to the end of the body).
#[must_use]
pub fn encode_stored(version: u64, payload: &[u8]) -> Vec<u8> {
    encode_frame(Kind::Stored, |out| {
        put_u64(out, version);
        out.extend_from_slice(payload);
    })
}

/// Decodes an envelope written by [`encode_stored`] into `(version, payload)`.
///
/// # Errors
/// A [`Corruption`] when the bytes are not exactly one valid envelope; the metadata store names
/// the record it read them as.
pub fn decode_stored(bytes: &[u8]) -> Result<(u64, Vec<u8>), Corruption> {
    read_frame(Kind::Stored, bytes, |r| {
        let version = r.u64()?;
        let payload = r.take(r.remaining())?.to_vec();
        Ok((version, payload))
    })
}

/// Bytes [`encode_stored`] adds around a payload.
pub const STORED_OVERHEAD: usize = FRAME_OVERHEAD + size_of::<u64>();

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Writes a length or count as u32. A value that does not fit belongs to a record far above
/// [`MAX_RECORD_BYTES`], which the decoders refuse whole, so saturating loses nothing readable.
fn put_count(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_count(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

fn encode_frame(kind: Kind, write_body: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    encode_versioned(kind, FORMAT_VERSION, write_body)
}

fn encode_versioned(kind: Kind, version: u16, write_body: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_OVERHEAD + LEDGER_BODY_LEN);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&(kind as u16).to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&[0; BODY_LEN_LEN]);
    write_body(&mut out);
    let body_len = u32::try_from(out.len() - HEADER_LEN).unwrap_or(u32::MAX);
    if let Some(slot) = out.get_mut(BODY_LEN_AT..HEADER_LEN) {
        slot.copy_from_slice(&body_len.to_le_bytes());
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Verifies the frame (size, CRC, magic, version, kind, body length), then reads the body,
/// which must be consumed exactly. Errors are the corruption and its offset in the frame.
fn read_frame<T>(
    kind: Kind,
    bytes: &[u8],
    read_body: impl FnOnce(&mut Reader<'_>) -> Result<T, Corruption>,
) -> Result<T, Corruption> {
    let body = check_frame(kind, bytes)?;
    let mut r = Reader::at(body, HEADER_LEN);
    let value = read_body(&mut r)?;
    r.finish()?;
    Ok(value)
}

/// Returns the body of a verified frame of `kind` in [`FORMAT_VERSION`].
fn check_frame(kind: Kind, bytes: &[u8]) -> Result<&[u8], Corruption> {
    check_frame_of(kind, bytes, &[FORMAT_VERSION]).map(|(_, body)| body)
}

/// Returns the format version and the body of a verified frame of `kind` in one of
/// `versions`.
fn check_frame_of<'a>(
    kind: Kind,
    bytes: &'a [u8],
    versions: &[u16],
) -> Result<(u16, &'a [u8]), Corruption> {
    let at = |kind, offset| Corruption::new(kind, offset);
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(at(CorruptionKind::BadLength, 0));
    }
    let (covered, crc) = bytes
        .split_last_chunk::<CRC_LEN>()
        .ok_or(at(CorruptionKind::Truncated, bytes.len()))?;
    if covered.len() < HEADER_LEN {
        return Err(at(CorruptionKind::Truncated, bytes.len()));
    }
    if crc32fast::hash(covered) != u32::from_le_bytes(*crc) {
        return Err(at(CorruptionKind::ChecksumMismatch, covered.len()));
    }
    let mut r = Reader::new(covered);
    if r.array::<{ MAGIC.len() }>()? != MAGIC {
        return Err(at(CorruptionKind::BadMagic, 0));
    }
    let found_kind = r.u16()?;
    let version = r.u16()?;
    if !versions.contains(&version) {
        return Err(at(
            CorruptionKind::UnsupportedVersion(u32::from(version)),
            MAGIC.len() + KIND_LEN,
        ));
    }
    if found_kind != kind as u16 {
        return Err(at(CorruptionKind::InvalidField("record kind"), MAGIC.len()));
    }
    let body_len = r.len_u32()?;
    if body_len != r.remaining() {
        return Err(at(CorruptionKind::BadLength, BODY_LEN_AT));
    }
    Ok((version, r.rest()))
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    reason = "tests index into known encodings and fail by panicking"
)]
mod tests {
    use super::*;

    fn corruption(err: Corruption) -> CorruptionKind {
        err.kind
    }

    fn sample_topic() -> TopicRecord {
        TopicRecord {
            next_ledger_id: 9,
            ledgers: vec![
                LedgerRecord {
                    id: 3,
                    entries: 50_000,
                    first_index: 0,
                    first_timestamp: 1_700_000_000_000,
                    last_timestamp: 1_700_000_009_999,
                },
                LedgerRecord {
                    id: 5,
                    entries: 7,
                    first_index: 50_000,
                    first_timestamp: 1_700_000_010_000,
                    last_timestamp: 1_700_000_010_006,
                },
            ],
            cursors: vec![CursorEntry {
                name: "c".into(),
                id: 1,
            }],
            next_cursor_id: 2,
            topic_id: 0,
            journal: None,
            store_id: 0,
        }
    }

    fn sample_cursor() -> CursorRecord {
        CursorRecord {
            name: "sub".into(),
            cursor_ledger: Some(12),
            mark_delete: Position::new(3, 41),
            epoch: 4,
            properties: BTreeMap::from([("k".to_string(), -1)]),
            identity: None,
        }
    }

    #[test]
    fn encoded_sizes_match_the_documented_layout() {
        assert_eq!(HEADER_LEN, 16);
        assert_eq!(FRAME_OVERHEAD, 20);
        assert_eq!(LedgerRecord::default().encode().len(), 20 + 40);
        let entry = CursorEntry {
            name: "ab".into(),
            id: 7,
        };
        assert_eq!(entry.encode().len(), 20 + 8 + 4 + 2);
        assert_eq!(TopicRecord::default().encode().len(), 20 + 8 + 8 + 4 + 4);
        assert_eq!(sample_topic().encode().len(), 44 + 2 * 40 + (8 + 4 + 1));
        let bare = CursorRecord {
            name: "sub".into(),
            ..CursorRecord::default()
        };
        assert_eq!(bare.encode().len(), 20 + (4 + 3) + 9 + 16 + 8 + 4);
        assert_eq!(sample_cursor().encode().len(), 64 + (4 + 1 + 8));
        assert_eq!(encode_stored(1, b"xyz").len(), STORED_OVERHEAD + 3);
        assert_eq!(STORED_OVERHEAD, 28);
    }

    #[test]
    fn identities_are_optional_trailers_that_round_trip() {
        let topic = TopicRecord {
            topic_id: 0xfeed,
            ..sample_topic()
        };
        let bytes = topic.encode();
        assert_eq!(bytes.len(), sample_topic().encode().len() + 8);
        assert_eq!(TopicRecord::decode(&bytes).unwrap(), topic);
        let cursor = CursorRecord {
            identity: Some(CursorIdentity {
                cursor_id: 3,
                topic_id: 0xfeed,
            }),
            ..sample_cursor()
        };
        let bytes = cursor.encode();
        assert_eq!(bytes.len(), sample_cursor().encode().len() + 16);
        assert_eq!(CursorRecord::decode(&bytes).unwrap(), cursor);
        // Records of earlier releases carry no trailer and decode without identity.
        assert_eq!(
            CursorRecord::decode(&sample_cursor().encode())
                .unwrap()
                .identity,
            None
        );
        cursor.check_identity(3, "sub", 0xfeed).unwrap();
        cursor.check_identity(3, "sub", 0).unwrap();
        for (id, name, topic) in [(4, "sub", 0xfeed), (3, "other", 0xfeed), (3, "sub", 0xbeef)] {
            assert!(matches!(
                cursor.check_identity(id, name, topic),
                Err(Error::Corrupted {
                    place: CorruptionPlace::Record(_),
                    ..
                })
            ));
        }
        sample_cursor().check_identity(9, "sub", 0xfeed).unwrap();
        assert!(sample_cursor().check_identity(9, "bus", 0xfeed).is_err());
    }

    #[test]
    fn a_stores_topic_record_names_its_store_in_version_3_and_round_trips() {
        let topic = TopicRecord {
            topic_id: 0xfeed,
            store_id: 0xbeef,
            ..sample_topic()
        };
        let bytes = topic.encode();
        assert_eq!(&bytes[10..12], &TOPIC_STORE_VERSION.to_le_bytes());
        // The topic id, then the store id.
        assert_eq!(bytes.len(), sample_topic().encode().len() + 8 + 8);
        assert_eq!(TopicRecord::decode(&bytes).unwrap(), topic);
        // Version 3 always carries both ids: a zero store id, or a missing topic id, is damage.
        let body_end = bytes.len() - CRC_LEN;
        let mut zero_store = bytes[..body_end].to_vec();
        zero_store[body_end - 8..].fill(0);
        let crc = crc32fast::hash(&zero_store);
        zero_store.extend_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            TopicRecord::decode(&zero_store),
            Err(c) if c.kind == CorruptionKind::InvalidField("store id")
        ));
        let no_topic_id = TopicRecord {
            topic_id: 0,
            ..topic.clone()
        };
        assert!(TopicRecord::decode(&no_topic_id.encode()).is_err());
        // A record naming no store keeps version 1, which earlier releases read.
        let alone = TopicRecord {
            store_id: 0,
            ..topic
        };
        assert_eq!(&alone.encode()[10..12], &FORMAT_VERSION.to_le_bytes());
        // Only the topic record has a version 3: a cursor record framed so is refused.
        let mut cursor = sample_cursor().encode();
        cursor[10..12].copy_from_slice(&TOPIC_STORE_VERSION.to_le_bytes());
        let covered = cursor.len() - CRC_LEN;
        let crc = crc32fast::hash(&cursor[..covered]);
        cursor[covered..].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            CursorRecord::decode(&cursor),
            Err(c) if c.kind == CorruptionKind::UnsupportedVersion(3)
        ));
    }

    #[test]
    fn a_topic_record_listing_its_journal_is_version_2_and_round_trips() {
        let journal = HostedJournal {
            seals: vec![CatalogSeal {
                segment: 4,
                len: 4096,
            }],
            segments: vec![4, 5],
            retired_through: 3,
            closed: Some(CatalogSeal {
                segment: 5,
                len: 77,
            }),
        };
        let topic = TopicRecord {
            topic_id: 0xfeed,
            journal: Some(journal.clone()),
            ..sample_topic()
        };
        let bytes = topic.encode();
        assert_eq!(&bytes[10..12], &TOPIC_JOURNAL_VERSION.to_le_bytes());
        // The topic id, then seals, segments, retired_through and the close.
        let listing = (4 + 16) + (4 + 2 * 8) + 8 + 16;
        assert_eq!(bytes.len(), sample_topic().encode().len() + 8 + listing);
        assert_eq!(TopicRecord::decode(&bytes).unwrap(), topic);
        let empty = TopicRecord {
            topic_id: 1,
            journal: Some(HostedJournal::default()),
            ..TopicRecord::default()
        };
        assert_eq!(TopicRecord::decode(&empty.encode()).unwrap(), empty);
        // Version 2 always carries the topic id: none (or zero) is damage.
        let zero = TopicRecord {
            topic_id: 0,
            ..empty.clone()
        };
        assert!(TopicRecord::decode(&zero.encode()).is_err());
        // A listed segment at or below retired_through, segments out of order, and an
        // unlisted journal are damage.
        for bad in [
            HostedJournal {
                segments: vec![3],
                retired_through: 3,
                ..HostedJournal::default()
            },
            HostedJournal {
                segments: vec![5, 4],
                ..HostedJournal::default()
            },
        ] {
            let record = TopicRecord {
                journal: Some(bad),
                ..empty.clone()
            };
            assert!(TopicRecord::decode(&record.encode()).is_err());
        }
        // A record lists a journal or names a store: with both, the journal wins (version 2).
        let both = TopicRecord {
            store_id: 7,
            ..topic.clone()
        };
        assert_eq!(&both.encode()[10..12], &TOPIC_JOURNAL_VERSION.to_le_bytes());
        // Only the topic record has a version 2: a cursor record framed so is refused.
        let mut cursor = sample_cursor().encode();
        cursor[10..12].copy_from_slice(&TOPIC_JOURNAL_VERSION.to_le_bytes());
        let at = cursor.len() - 4;
        let crc = crc32fast::hash(&cursor[..at]);
        cursor[at..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            corruption(CursorRecord::decode(&cursor).unwrap_err()),
            CorruptionKind::UnsupportedVersion(2)
        );
    }

    #[test]
    fn frame_header_fields_sit_at_documented_offsets() {
        let bytes = sample_cursor().encode();
        assert_eq!(&bytes[..8], b"ACKSMETA");
        assert_eq!(&bytes[8..10], &4u16.to_le_bytes());
        assert_eq!(&bytes[10..12], &1u16.to_le_bytes());
        let body_len = u32::try_from(bytes.len() - 20).unwrap();
        assert_eq!(&bytes[12..16], &body_len.to_le_bytes());
        let (covered, crc) = bytes.split_at(bytes.len() - 4);
        assert_eq!(crc, crc32fast::hash(covered).to_le_bytes());
    }

    #[test]
    fn every_record_round_trips() {
        let topic = sample_topic();
        assert_eq!(TopicRecord::decode(&topic.encode()).unwrap(), topic);
        assert_eq!(
            TopicRecord::decode(&TopicRecord::default().encode()).unwrap(),
            TopicRecord::default()
        );
        for ledger in &topic.ledgers {
            assert_eq!(LedgerRecord::decode(&ledger.encode()).unwrap(), *ledger);
        }
        let entry = &topic.cursors[0];
        assert_eq!(CursorEntry::decode(&entry.encode()).unwrap(), *entry);
        let cursor = sample_cursor();
        assert_eq!(CursorRecord::decode(&cursor.encode()).unwrap(), cursor);
        let no_ledger = CursorRecord {
            cursor_ledger: None,
            ..cursor
        };
        assert_eq!(
            CursorRecord::decode(&no_ledger.encode()).unwrap(),
            no_ledger
        );
        assert_eq!(
            decode_stored(&encode_stored(9, b"abc")).unwrap(),
            (9, b"abc".to_vec())
        );
        assert_eq!(
            decode_stored(&encode_stored(0, b"")).unwrap(),
            (0, Vec::new())
        );
    }

    #[test]
    fn cursor_names_are_kept_byte_for_byte_whatever_they_hold() {
        let names = [
            String::new(),
            "../../etc/passwd".to_string(),
            "a/b/c".to_string(),
            "..".to_string(),
            "nul\0inside\0".to_string(),
            "ünïcödé ✓ 游标".to_string(),
            "x".repeat(10 * 1024),
        ];
        for name in names {
            let record = CursorRecord {
                name: name.as_str().into(),
                properties: BTreeMap::from([(name.clone(), 7)]),
                ..CursorRecord::default()
            };
            assert_eq!(CursorRecord::decode(&record.encode()).unwrap().name, name);
            let entry = CursorEntry {
                name: name.as_str().into(),
                id: 3,
            };
            assert_eq!(*CursorEntry::decode(&entry.encode()).unwrap().name, *name);
            let topic = TopicRecord {
                cursors: vec![entry.clone(), entry],
                ..TopicRecord::default()
            };
            assert_eq!(TopicRecord::decode(&topic.encode()).unwrap(), topic);
        }
    }

    #[test]
    fn any_flipped_bit_is_a_checksum_mismatch() {
        let bytes = sample_topic().encode();
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut bad = bytes.clone();
                bad[i] ^= 1 << bit;
                let err = TopicRecord::decode(&bad).unwrap_err();
                assert_eq!(
                    corruption(err),
                    CorruptionKind::ChecksumMismatch,
                    "byte {i}"
                );
            }
        }
    }

    #[test]
    fn every_truncation_is_refused() {
        let bytes = sample_cursor().encode();
        for len in 0..bytes.len() {
            let kind = corruption(CursorRecord::decode(&bytes[..len]).unwrap_err());
            let expected = if len < FRAME_OVERHEAD {
                CorruptionKind::Truncated
            } else {
                CorruptionKind::ChecksumMismatch
            };
            assert_eq!(kind, expected, "length {len}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(CursorRecord::decode(&longer).is_err());
    }

    #[test]
    fn a_record_of_another_kind_is_refused_by_name() {
        let err = TopicRecord::decode(&sample_cursor().encode()).unwrap_err();
        assert_eq!(
            err,
            Corruption::new(CorruptionKind::InvalidField("record kind"), MAGIC.len())
        );
        // The caller names the record it read the bytes as.
        let err = err.in_record("topic");
        assert!(matches!(
            &err,
            Error::Corrupted { place: CorruptionPlace::Record(record), kind: CorruptionKind::InvalidField("record kind") }
                if record == "topic"
        ));
        assert!(err.to_string().contains("metadata record `topic`"));
    }

    /// Builds a frame around `body` with a valid CRC, to reach the checks behind it.
    fn framed(kind: u16, version: u16, body_len: u32, body: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&body_len.to_le_bytes());
        out.extend_from_slice(body);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    #[test]
    fn checksummed_but_malformed_frames_name_what_is_wrong() {
        let topic_kind = Kind::Topic as u16;
        let mut wrong_magic = framed(topic_kind, 1, 0, &[]);
        wrong_magic[0] = b'X';
        let crc_at = wrong_magic.len() - 4;
        let crc = crc32fast::hash(&wrong_magic[..crc_at]);
        wrong_magic[crc_at..].copy_from_slice(&crc.to_le_bytes());
        let cases: Vec<(Vec<u8>, CorruptionKind)> = vec![
            (wrong_magic, CorruptionKind::BadMagic),
            (
                framed(topic_kind, 4, 24, &[0; 24]),
                CorruptionKind::UnsupportedVersion(4),
            ),
            (
                framed(topic_kind, 1, 25, &[0; 24]),
                CorruptionKind::BadLength,
            ),
            // A body too short for its fixed fields.
            (framed(topic_kind, 1, 8, &[0; 8]), CorruptionKind::Truncated),
            // A trailer too short for a topic id.
            (
                framed(topic_kind, 1, 25, &[0; 25]),
                CorruptionKind::Truncated,
            ),
            // A topic id of zero (it is written only when non-zero).
            (
                framed(topic_kind, 1, 32, &[0; 32]),
                CorruptionKind::InvalidField("topic id"),
            ),
            // Trailing bytes after the topic id.
            (
                framed(topic_kind, 1, 33, &{
                    let mut body = [0; 33];
                    body[24] = 1;
                    body
                }),
                CorruptionKind::BadLength,
            ),
        ];
        for (bytes, expected) in cases {
            assert_eq!(
                corruption(TopicRecord::decode(&bytes).unwrap_err()),
                expected
            );
        }
    }

    #[test]
    fn counts_larger_than_the_bytes_left_are_refused_before_allocating() {
        let mut body = vec![0; 16];
        body.extend_from_slice(&u32::MAX.to_le_bytes());
        let len = u32::try_from(body.len()).unwrap();
        let bytes = framed(Kind::Topic as u16, 1, len, &body);
        assert_eq!(
            corruption(TopicRecord::decode(&bytes).unwrap_err()),
            CorruptionKind::BadLength
        );
        // A name length past the end.
        let mut body = 7u64.to_le_bytes().to_vec();
        body.extend_from_slice(&1000u32.to_le_bytes());
        body.extend_from_slice(b"abc");
        let len = u32::try_from(body.len()).unwrap();
        let bytes = framed(Kind::CursorEntry as u16, 1, len, &body);
        assert_eq!(
            corruption(CursorEntry::decode(&bytes).unwrap_err()),
            CorruptionKind::BadLength
        );
    }

    #[test]
    fn non_canonical_fields_are_refused_so_decoding_is_one_to_one() {
        let good = sample_cursor().encode();
        let body = &good[HEADER_LEN..good.len() - CRC_LEN];
        let len = u32::try_from(body.len()).unwrap();
        let flag_at = 4 + 3;
        let mut absent_with_id = body.to_vec();
        absent_with_id[flag_at] = 0;
        let mut flag_two = body.to_vec();
        flag_two[flag_at] = 2;
        for bad in [absent_with_id, flag_two] {
            let bytes = framed(Kind::Cursor as u16, 1, len, &bad);
            assert_eq!(
                corruption(CursorRecord::decode(&bytes).unwrap_err()),
                CorruptionKind::InvalidField("cursor ledger")
            );
        }
        // Two properties with the same key.
        let mut dup = body[..body.len() - 4 - (4 + 1 + 8)].to_vec();
        dup.extend_from_slice(&2u32.to_le_bytes());
        for _ in 0..2 {
            dup.extend_from_slice(&1u32.to_le_bytes());
            dup.push(b'k');
            dup.extend_from_slice(&5i64.to_le_bytes());
        }
        let len = u32::try_from(dup.len()).unwrap();
        let bytes = framed(Kind::Cursor as u16, 1, len, &dup);
        assert_eq!(
            corruption(CursorRecord::decode(&bytes).unwrap_err()),
            CorruptionKind::InvalidField("property keys out of order")
        );
        // A name that is not UTF-8.
        let mut body = 1u64.to_le_bytes().to_vec();
        body.extend_from_slice(&1u32.to_le_bytes());
        body.push(0xff);
        let len = u32::try_from(body.len()).unwrap();
        let bytes = framed(Kind::CursorEntry as u16, 1, len, &body);
        assert_eq!(
            corruption(CursorEntry::decode(&bytes).unwrap_err()),
            CorruptionKind::InvalidField("cursor name")
        );
    }

    #[test]
    fn frames_above_the_maximum_are_refused() {
        let big = encode_stored(1, &vec![0; MAX_RECORD_BYTES]);
        assert_eq!(
            decode_stored(&big).unwrap_err().kind,
            CorruptionKind::BadLength
        );
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        fn ledger() -> impl Strategy<Value = LedgerRecord> {
            any::<[u64; 5]>().prop_map(|[id, entries, first_index, t0, t1]| LedgerRecord {
                id,
                entries,
                first_index,
                first_timestamp: t0,
                last_timestamp: t1,
            })
        }

        fn cursor_entry() -> impl Strategy<Value = CursorEntry> {
            (any::<String>(), any::<u64>()).prop_map(|(name, id)| CursorEntry {
                name: name.into(),
                id,
            })
        }

        proptest! {
            #[test]
            fn topic_records_round_trip(
                next_ledger_id: u64,
                next_cursor_id: u64,
                ledgers in proptest::collection::vec(ledger(), 0..20),
                cursors in proptest::collection::vec(cursor_entry(), 0..20),
                topic_id: u64,
                store_id: u64,
            ) {
                // A record naming a store always carries its topic id (both non-zero).
                let topic_id = if store_id != 0 { topic_id.max(1) } else { topic_id };
                let record = TopicRecord { next_ledger_id, ledgers, cursors, next_cursor_id, topic_id, journal: None, store_id };
                let bytes = record.encode();
                prop_assert_eq!(TopicRecord::decode(&bytes).unwrap(), record);
            }

            #[test]
            fn cursor_records_round_trip(
                name: String,
                cursor_ledger: Option<u64>,
                ledger_id: u64,
                entry_id: u64,
                epoch: u64,
                properties in proptest::collection::btree_map(any::<String>(), any::<i64>(), 0..10),
                identity: Option<(u64, u64)>,
            ) {
                let record = CursorRecord {
                    name,
                    cursor_ledger,
                    mark_delete: Position::new(ledger_id, entry_id),
                    epoch,
                    properties,
                    identity: identity.map(|(cursor_id, topic_id)| CursorIdentity { cursor_id, topic_id }),
                };
                prop_assert_eq!(CursorRecord::decode(&record.encode()).unwrap(), record);
            }

            #[test]
            fn arbitrary_bodies_never_panic_and_what_decodes_re_encodes_identically(
                kind in 0u16..7,
                body in proptest::collection::vec(
                    prop_oneof![3 => 0u8..3, 1 => any::<u8>()], 0..200),
            ) {
                // A valid frame around random bytes, so the body parsers are what is tested.
                let len = u32::try_from(body.len()).unwrap();
                let bytes = framed(kind, FORMAT_VERSION, len, &body);
                if let Ok(r) = TopicRecord::decode(&bytes) { prop_assert_eq!(r.encode(), bytes.clone()); }
                if let Ok(r) = LedgerRecord::decode(&bytes) { prop_assert_eq!(r.encode(), bytes.clone()); }
                if let Ok(r) = CursorEntry::decode(&bytes) { prop_assert_eq!(r.encode(), bytes.clone()); }
                if let Ok(r) = CursorRecord::decode(&bytes) { prop_assert_eq!(r.encode(), bytes.clone()); }
                if let Ok((v, p)) = decode_stored(&bytes) { prop_assert_eq!(encode_stored(v, &p), bytes); }
            }
        }
    }
}

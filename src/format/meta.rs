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
//! 8       2     kind             u16 (1 topic, 2 ledger, 3 cursor entry, 4 cursor, 5 stored,
//!                                6 cursor chunk, 7 ledger chunk)
//! 10      2     format version   u16 (1; 2 for a topic record listing its own journal; 3 for
//!                                a store's topic record naming its store; 4 for a topic
//!                                record whose cursor table has chunk records; 5 for one
//!                                whose ledgers have chunk records)
//! 12      4     body length      u32, = frame length - 20
//! 16      n     body             per kind, below
//! 16+n    4     CRC32            crc32fast over bytes [0, 16+n)
//! ```
//!
//! A frame is the whole input of a decoder: the CRC is the last four bytes and is verified
//! before any field is trusted.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::store::{
    CatalogSeal, ChunkPin, decode_segments, is_chunk_name, put_retired_closed, put_seals,
    put_segments, read_retired_closed, read_seals,
};
use super::{Corruption, Reader, crc32};
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
/// The format version of a topic record whose cursor table has chunk records (see
/// [`CursorTable`]): written once a topic's table has reached [`CURSOR_CHUNK_ENTRIES`]
/// cursors, whatever its host (the layout of version 1, 2 or 3 follows, named inside); read by
/// this build, refused by earlier ones (their open fails with an unsupported version, writing
/// nothing).
pub const TOPIC_CHUNKED_VERSION: u16 = 4;
/// The format version of a topic record whose ledgers have chunk records (see
/// [`LedgerTable`]): written once a topic lists more than [`LEDGER_CHUNK_ENTRIES`] ledgers
/// (the layout of version 1 to 4 follows, named inside); read by this build, refused by earlier
/// ones (their open fails with an unsupported version, writing nothing).
pub const TOPIC_LEDGERS_CHUNKED_VERSION: u16 = 5;
/// Ledgers of a full chunk of a topic's ledgers: a chunk record is written when the record
/// lists one more (the newest stays inline, a seal updates it), so a roll writes at most this
/// many ledgers inline.
pub const LEDGER_CHUNK_ENTRIES: usize = 256;
/// Names of the chunk records of a topic's ledgers start with this:
/// `topic-ledgers-{index}-{made_at}`.
pub const LEDGER_CHUNK_PREFIX: &str = "topic-ledgers-";
/// Cursors of a full chunk of a topic's cursor table: a chunk record is written when the tail
/// reaches this many, so a creation writes at most this many entries inline.
pub const CURSOR_CHUNK_ENTRIES: usize = 512;
/// Names of the chunk records of a topic's cursor table start with this:
/// `topic-cursors-{index}-{made_at}`. In the family of the `topic` record (`topic-...`), so a
/// metadata store that lists a record's family lists them with it.
pub const CURSOR_CHUNK_PREFIX: &str = "topic-cursors-";
/// What a chunk record the topic record pins (of its cursor table or of its ledgers) is
/// reported as when it is missing.
pub const MISSING_CHUNK: &str = "chunk record (the topic record pins it, but it is missing)";
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
/// What a topic record is reported as when a ledger file of the topic above every ledger the
/// record lists holds an entry that is not a cursor ledger's (by the topic's open and by
/// `ackstore verify`, on a store and alone): a topic records each data ledger before its first
/// entry and a trim keeps the last ledger that holds entries, so only a record older than the
/// newest written (in the same block of ids too) leaves such a file.
pub const OLDER_TOPIC_RECORD_LEDGERS: &str = "ledgers (a ledger file holding entries above every ledger it lists: an older version of the topic record)";
/// What a ledger is reported as (by the topic's open and by `ackstore verify`) when the topic
/// record lists it with no entries (the ledger being appended to when its owner stopped), and
/// its file holds fewer entries than a cursor's committed mark-delete covers: a cursor
/// acknowledges only synced entries, so only an older copy of the file, or one cut short,
/// leaves that; except on a topic that reads unsynced entries (`read_unsynced`), whose open
/// does not check it and which `verify`, not knowing the setting, reports all the same.
pub const SHORTER_THAN_A_MARK_DELETE: &str = "entries (fewer than a cursor's committed mark-delete covers: an older copy of the ledger, or one cut short; unless the topic reads unsynced entries, read_unsynced, whose cursors may acknowledge entries a power cut takes)";
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
/// Bytes of one chunk pin: `made_at`, `crc`.
const CHUNK_PIN_LEN: usize = size_of::<u64>() + size_of::<u32>();
/// Smallest encoded property: key length, empty key, value.
const PROPERTY_MIN_LEN: usize = size_of::<u32>() + size_of::<i64>();

/// Which record a frame holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Topic = 1,
    Ledger = 2,
    CursorEntry = 3,
    Cursor = 4,
    Stored = 5,
    CursorChunk = 6,
    LedgerChunk = 7,
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
    pub name: Arc<str>,
    /// The id the cursor's record and ledgers are named after.
    pub id: u64,
}

/// The topic record: its sealed data ledgers and its cursors.
///
/// Body layout: `next_ledger_id u64 | next_cursor_id u64 | ledger count u32 | ledgers |
/// cursor count u32 | cursor entries`, each ledger and cursor entry as the body of its own
/// record. In version 4 the cursor part is `layout u16 (1, 2 or 3) | chunk count u32 | chunk
/// count x (made_at u64 | crc u32) | tail count u32 (below 512) | tail entries`, and the
/// trailer is that of version `layout`. In version 5 the ledger part is `layout u16 (1 to 4) |
/// first chunk index u32 | chunk count u32 | chunk count x (made_at u64 | crc u32) | tail count
/// u32 (at most 256) | tail ledgers`, and the rest is that of version `layout`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopicRecord {
    /// The next data ledger id to use; greater than every id ever used.
    pub next_ledger_id: u64,
    /// Data ledgers, in id order (the newest may be open): chunks pinned by the record and
    /// the tail it holds inline.
    pub ledgers: LedgerTable,
    /// Every cursor of the topic: chunks pinned by the record and the tail it holds inline.
    pub cursors: CursorTable,
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
}

/// An entry of a table the topic record keeps in chunk records: a cursor of its cursor table
/// ([`CursorEntry`]) or one of its ledgers ([`LedgerRecord`]). Says how an entry is encoded
/// and how the table is cut into chunks and names them; [`ChunkTable`] is the one chunk
/// mechanism of the topic record for both (its records are read and written by
/// `ledger::table`).
pub trait ChunkEntry: Clone + PartialEq + std::fmt::Debug {
    /// Entries of a full chunk.
    const CHUNK_ENTRIES: usize;
    /// Entries the tail keeps inline when it fills a chunk: a topic's newest ledger, which a
    /// seal updates in place, stays in the record (none for cursors).
    const TAIL_KEEP: usize;
    /// Whether an emptied chunk keeps its place, for the next full tail to fill (a cursor
    /// table, whose deletions empty chunks anywhere). Otherwise emptied chunks at the front
    /// are dropped and the table's first index rises, and a full tail always goes after the
    /// last chunk (ledgers: trimmed from the front only, kept in id order).
    const KEEPS_PLACES: bool;
    /// Names of the chunk records start with this: `{prefix}{index}-{made_at}`. In the family
    /// of the `topic` record (`topic-...`), so a metadata store that lists a record's family
    /// lists them with it.
    const CHUNK_PREFIX: &'static str;
    /// Record kind of the chunk records.
    const CHUNK_KIND: Kind;
    /// Bytes of the smallest encoded entry.
    const MIN_LEN: usize;
    /// What a chunk record's count out of range is reported as.
    const COUNT_FIELD: &'static str;
    /// Encodes the entry's body.
    fn write_body(&self, out: &mut Vec<u8>);
    /// Decodes an entry's body.
    ///
    /// # Errors
    /// A [`Corruption`] when the bytes are not one valid entry.
    fn read_body(r: &mut Reader<'_>) -> Result<Self, Corruption>;
}

impl ChunkEntry for CursorEntry {
    const CHUNK_ENTRIES: usize = CURSOR_CHUNK_ENTRIES;
    const TAIL_KEEP: usize = 0;
    const KEEPS_PLACES: bool = true;
    const CHUNK_PREFIX: &'static str = CURSOR_CHUNK_PREFIX;
    const CHUNK_KIND: Kind = Kind::CursorChunk;
    const MIN_LEN: usize = CURSOR_ENTRY_MIN_LEN;
    const COUNT_FIELD: &'static str = "chunk cursor count";
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

impl ChunkEntry for LedgerRecord {
    const CHUNK_ENTRIES: usize = LEDGER_CHUNK_ENTRIES;
    const TAIL_KEEP: usize = 1;
    const KEEPS_PLACES: bool = false;
    const CHUNK_PREFIX: &'static str = LEDGER_CHUNK_PREFIX;
    const CHUNK_KIND: Kind = Kind::LedgerChunk;
    const MIN_LEN: usize = LEDGER_BODY_LEN;
    const COUNT_FIELD: &'static str = "chunk ledger count";
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

/// The name of the record of chunk `index` of a topic's table of `E` written for the topic
/// record's version `made_at`.
#[must_use]
pub fn chunk_record<E: ChunkEntry>(index: usize, made_at: u64) -> String {
    format!("{}{index}-{made_at}", E::CHUNK_PREFIX)
}

/// Whether `record` is named as a chunk record of a topic's cursor table or of its ledgers
/// (pinned or not).
#[must_use]
pub fn is_topic_chunk_record(record: &str) -> bool {
    is_chunk_name(CURSOR_CHUNK_PREFIX, record) || is_chunk_name(LEDGER_CHUNK_PREFIX, record)
}

/// The pin of an emptied chunk: no record (every entry of the chunk was deleted).
pub const EMPTY_CHUNK: ChunkPin = ChunkPin { made_at: 0, crc: 0 };

/// One chunk of a table in chunk records: entries shared between every copy of the table (a
/// copy of the record copies a pointer per chunk, not the entries), and the pin of the record
/// that holds them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk<E> {
    /// The chunk's entries (none once every one of them was deleted), at most
    /// [`ChunkEntry::CHUNK_ENTRIES`].
    pub entries: Arc<[E]>,
    /// The record holding `entries` (`made_at` names it, `crc` is [`chunk_crc`] of its
    /// bytes), [`EMPTY_CHUNK`] for an emptied chunk; `None` when `entries` changed since (a
    /// deletion): the next write of the topic record writes the chunk again first.
    pub pin: Option<ChunkPin>,
}

/// A chunk of a topic's cursor table.
pub type CursorChunk = Chunk<CursorEntry>;

/// A table the topic record keeps in chunk records: every entry, in chunks of at most
/// [`ChunkEntry::CHUNK_ENTRIES`] kept in chunk records the topic record pins, then the tail
/// the record holds inline.
///
/// Invariant: a chunk's index (which names its record) never changes while the chunk is
/// pinned: a deletion writes the chunk again smaller at the same index; a tail that fills
/// becomes the first emptied chunk (a table whose chunks keep their places) or a new one after
/// the last; emptied chunks at the front of a table whose chunks do not keep their places are
/// dropped and the index of the first chunk rises. So the record's bytes per change are the
/// tail (fewer than `CHUNK_ENTRIES + TAIL_KEEP` entries once written) and 12 bytes per chunk.
/// A table decoded from a record holds the pins only, until the chunks are added
/// ([`ChunkTable::add_chunk`]); a table of an earlier version holds every entry in its tail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkTable<E> {
    first: usize,
    chunks: Vec<Chunk<E>>,
    tail: Vec<E>,
}

/// A topic's cursor table (chunk records from [`CURSOR_CHUNK_ENTRIES`] cursors, format
/// version 4).
pub type CursorTable = ChunkTable<CursorEntry>;
/// A topic's ledgers, in id order (chunk records from [`LEDGER_CHUNK_ENTRIES`] sealed ledgers,
/// format version 5).
pub type LedgerTable = ChunkTable<LedgerRecord>;

impl<E> Default for ChunkTable<E> {
    fn default() -> Self {
        Self {
            first: 0,
            chunks: Vec::new(),
            tail: Vec::new(),
        }
    }
}

impl<E> From<Vec<E>> for ChunkTable<E> {
    /// A table of `entries` inline, no chunk: what a record of an earlier version holds.
    fn from(tail: Vec<E>) -> Self {
        Self {
            first: 0,
            chunks: Vec::new(),
            tail,
        }
    }
}

impl<E: ChunkEntry> ChunkTable<E> {
    /// Every entry: the chunks' in chunk order, then the tail's.
    #[must_use]
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &E> + '_ {
        self.chunks
            .iter()
            .flat_map(|c| c.entries.iter())
            .chain(&self.tail)
    }

    /// The number of entries (a sum over the chunks).
    #[must_use]
    pub fn len(&self) -> usize {
        self.chunks.iter().map(|c| c.entries.len()).sum::<usize>() + self.tail.len()
    }

    /// Whether the table holds no entry.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.tail.is_empty() && self.chunks.iter().all(|c| c.entries.is_empty())
    }

    /// The chunks, by position (chunk `k` has index `first() + k`).
    #[must_use]
    pub fn chunks(&self) -> &[Chunk<E>] {
        &self.chunks
    }

    /// The index of the first chunk (0 but in a table whose emptied front chunks were
    /// dropped).
    #[must_use]
    pub fn first(&self) -> usize {
        self.first
    }

    /// The entries past the chunks.
    #[must_use]
    pub fn tail(&self) -> &[E] {
        &self.tail
    }

    /// The entries past the chunks, to edit in place: the newest ledgers (a seal updates the
    /// last), every entry of a table of an earlier version (for tests that damage a record).
    pub fn tail_mut(&mut self) -> &mut Vec<E> {
        &mut self.tail
    }

    /// Adds `entry` to the tail (a chunk record is made of the tail when the topic record is
    /// next written: [`ChunkTable::fill_chunks`]).
    pub fn push(&mut self, entry: E) {
        self.tail.push(entry);
    }

    /// Keeps only the entries `keep` accepts. A chunk that loses one is rebuilt without it and
    /// unpinned, to be written again; the others keep their pins and share their entries. In
    /// a table whose chunks do not keep their places, emptied chunks at the front are dropped.
    pub fn retain(&mut self, mut keep: impl FnMut(&E) -> bool) {
        for chunk in &mut self.chunks {
            if chunk.entries.iter().all(&mut keep) {
                continue;
            }
            chunk.entries = chunk.entries.iter().filter(|e| keep(e)).cloned().collect();
            chunk.pin = None;
        }
        self.tail.retain(keep);
        if !E::KEEPS_PLACES {
            let emptied = self
                .chunks
                .iter()
                .take_while(|c| c.entries.is_empty())
                .count();
            self.chunks.drain(..emptied);
            self.first = if self.chunks.is_empty() {
                0
            } else {
                self.first + emptied
            };
        }
    }

    /// Removes the first `n` entries (all of them when there are fewer): the chunks they
    /// cover whole are dropped with their pins (the first index rises; in a table whose
    /// chunks keep their places they are emptied instead), one they cut into is rebuilt
    /// without them and unpinned, to be written again. Costs the chunks dropped and the one
    /// cut into, not the entries after them.
    pub fn remove_first(&mut self, mut n: usize) {
        let whole = self
            .chunks
            .iter()
            .take_while(|c| {
                let covered = c.entries.len() <= n;
                if covered {
                    n -= c.entries.len();
                }
                covered
            })
            .count();
        if E::KEEPS_PLACES {
            for chunk in self.chunks.iter_mut().take(whole) {
                chunk.pin = chunk.pin.filter(|_| chunk.entries.is_empty());
                chunk.entries = Arc::from([]);
            }
        } else {
            self.chunks.drain(..whole);
            self.first = if self.chunks.is_empty() {
                0
            } else {
                self.first + whole
            };
        }
        let at = if E::KEEPS_PLACES { whole } else { 0 };
        match self.chunks.get_mut(at) {
            Some(chunk) if n > 0 => {
                chunk.entries = chunk.entries.get(n..).unwrap_or_default().into();
                chunk.pin = None;
            }
            Some(_) => {}
            None => {
                self.tail.drain(..n.min(self.tail.len()));
            }
        }
    }

    /// Makes the table hold `entries` (every entry, in order): the chunks that hold the same
    /// entries at the same place keep their pins; from the first that differs on, every entry
    /// goes to the tail, to be cut into chunks again ([`ChunkTable::fill_chunks`]).
    pub fn replace_entries(&mut self, entries: &[E]) {
        let mut at = 0;
        let mut kept = 0;
        for chunk in &self.chunks {
            let n = chunk.entries.len();
            if entries.get(at..at + n) != Some(&chunk.entries[..]) {
                break;
            }
            at += n;
            kept += 1;
        }
        self.chunks.truncate(kept);
        if self.chunks.is_empty() {
            self.first = 0;
        }
        self.tail = entries.get(at..).unwrap_or_default().to_vec();
    }

    /// Moves full chunks of [`ChunkEntry::CHUNK_ENTRIES`] out of the tail while it has that
    /// many and [`ChunkEntry::TAIL_KEEP`] more, each into the first emptied chunk (a table
    /// whose chunks keep their places) or after the last, unpinned: what a write of the topic
    /// record writes first. A table of fewer entries is left alone (its record keeps the
    /// version it had).
    pub fn fill_chunks(&mut self) {
        while self.tail.len() >= E::CHUNK_ENTRIES + E::TAIL_KEEP {
            let entries: Arc<[E]> = self.tail.drain(..E::CHUNK_ENTRIES).collect();
            let chunk = Chunk { entries, pin: None };
            let emptied = self
                .chunks
                .iter_mut()
                .filter(|_| E::KEEPS_PLACES)
                .find(|c| c.entries.is_empty() && c.pin.is_some_and(|p| p == EMPTY_CHUNK));
            match emptied {
                Some(slot) => *slot = chunk,
                None => self.chunks.push(chunk),
            }
        }
    }

    /// Whether the record can pin the table: chunks, every one pinned, and a tail shorter
    /// than a fill leaves (else the record holds every entry inline).
    fn pinned(&self) -> bool {
        !self.chunks.is_empty()
            && self.chunks.iter().all(|c| c.pin.is_some())
            && self.tail.len() < E::CHUNK_ENTRIES + E::TAIL_KEEP
    }

    /// The chunks that are not pinned, with their positions: what must be written (or,
    /// emptied, pinned as [`EMPTY_CHUNK`]) before a record can pin them.
    pub fn unpinned(&self) -> impl Iterator<Item = (usize, &Chunk<E>)> + '_ {
        self.chunks
            .iter()
            .enumerate()
            .filter(|(_, c)| c.pin.is_none())
    }

    /// Pins the chunk at position `k` (its record written, or emptied).
    pub fn pin(&mut self, k: usize, pin: ChunkPin) {
        if let Some(chunk) = self.chunks.get_mut(k) {
            chunk.pin = Some(pin);
        }
    }

    /// The names of the chunk records the table pins, by position (`None` for an emptied or
    /// unpinned chunk).
    pub fn pinned_records(&self) -> impl Iterator<Item = Option<String>> + '_ {
        self.chunks.iter().enumerate().map(|(k, c)| {
            c.pin
                .filter(|p| p.made_at != 0)
                .map(|p| chunk_record::<E>(self.first + k, p.made_at))
        })
    }

    /// Adds the entries of the chunk record at position `k` (its bytes `bytes`) after
    /// checking them against its pin: the CRC32 of the bytes, the index inside (`first() +
    /// k`), 1 to [`ChunkEntry::CHUNK_ENTRIES`] entries. A table decoded from a record holds
    /// its pins with no entries until each chunk is added.
    ///
    /// # Errors
    /// A [`Corruption`] when the bytes are not the chunk the pin names; the caller names the
    /// chunk record.
    pub fn add_chunk(&mut self, k: usize, bytes: &[u8]) -> Result<(), Corruption> {
        let index = self.first + k;
        let chunk = self
            .chunks
            .get_mut(k)
            .ok_or_else(|| Corruption::new(CorruptionKind::InvalidField("chunk index"), 0))?;
        let pin = chunk.pin.unwrap_or(EMPTY_CHUNK);
        if chunk_crc(bytes) != pin.crc {
            return Err(Corruption::new(CorruptionKind::ChecksumMismatch, 0));
        }
        let (found, entries) = decode_chunk::<E>(bytes)?;
        if found as usize != index {
            return Err(Corruption::new(
                CorruptionKind::InvalidField("chunk (not the one the topic record pins)"),
                0,
            ));
        }
        chunk.entries = entries.into();
        Ok(())
    }

    /// Writes the pins: `chunk count u32 | count x (made_at u64 | crc u32)`.
    fn write_pins(&self, out: &mut Vec<u8>) {
        put_count(out, self.chunks.len());
        for pin in self.chunks.iter().filter_map(|c| c.pin) {
            put_u64(out, pin.made_at);
            out.extend_from_slice(&pin.crc.to_le_bytes());
        }
    }

    /// Reads the pins [`ChunkTable::write_pins`] wrote (at least one) into a table of
    /// chunks with no entries yet, whose first chunk has index `first`.
    fn read_pins(r: &mut Reader<'_>, first: usize) -> Result<Self, Corruption> {
        let count = r.count_u32(CHUNK_PIN_LEN)?;
        if count == 0 {
            return Err(r.error(CorruptionKind::InvalidField("chunk count")));
        }
        let mut chunks = Vec::with_capacity(count);
        for _ in 0..count {
            let pin = ChunkPin {
                made_at: r.u64()?,
                crc: r.u32()?,
            };
            if pin.made_at == 0 && pin.crc != 0 {
                return Err(r.error(CorruptionKind::InvalidField("chunk pin")));
            }
            chunks.push(Chunk {
                entries: Arc::from([]),
                pin: Some(pin),
            });
        }
        Ok(Self {
            first,
            chunks,
            tail: Vec::new(),
        })
    }

    /// Writes the entries inline: `count u32 | entries` (the tail of a pinned table, every
    /// entry of another).
    fn write_inline(&self, out: &mut Vec<u8>, pinned: bool) {
        if pinned {
            put_count(out, self.tail.len());
            for entry in &self.tail {
                entry.write_body(out);
            }
        } else {
            put_count(out, self.len());
            for entry in self.iter() {
                entry.write_body(out);
            }
        }
    }

    /// Reads the inline entries [`ChunkTable::write_inline`] wrote into the tail; `what` names
    /// the count. Behind pins, the tail is shorter than a fill leaves (else it would be a
    /// chunk of its own, whatever follows it).
    fn read_inline(&mut self, r: &mut Reader<'_>, what: &'static str) -> Result<(), Corruption> {
        if !self.chunks.is_empty()
            && r.clone()
                .u32()
                .is_ok_and(|n| n as usize >= E::CHUNK_ENTRIES + E::TAIL_KEEP)
        {
            return Err(r.error(CorruptionKind::InvalidField(what)));
        }
        let count = r.count_u32(E::MIN_LEN)?;
        // The count was checked against the bytes left; variable-size entries grow the vector
        // as they are read, never ahead of the input.
        for _ in 0..count {
            self.tail.push(E::read_body(r)?);
        }
        Ok(())
    }
}

/// The bytes of chunk record `index` of a topic's table holding `entries`: a frame of kind
/// [`ChunkEntry::CHUNK_KIND`], body `index u32 | count u32 | entries`.
#[must_use]
pub fn encode_chunk<E: ChunkEntry>(index: u32, entries: &[E]) -> Vec<u8> {
    encode_frame(E::CHUNK_KIND, |out| {
        out.extend_from_slice(&index.to_le_bytes());
        put_count(out, entries.len());
        for entry in entries {
            entry.write_body(out);
        }
    })
}

/// The CRC32 a topic record pins chunk record `bytes` by: that of the frame before its own
/// trailing CRC (the CRC32 of a whole frame, its CRC included, is the same for every frame).
#[must_use]
pub fn chunk_crc(bytes: &[u8]) -> u32 {
    crc32(&[bytes
        .get(..bytes.len().saturating_sub(CRC_LEN))
        .unwrap_or(&[])])
}

/// Decodes a chunk record written by [`encode_chunk`]: its index and its 1 to
/// [`ChunkEntry::CHUNK_ENTRIES`] entries.
///
/// # Errors
/// A [`Corruption`] when the bytes are not exactly one valid chunk record frame of `E`.
pub fn decode_chunk<E: ChunkEntry>(bytes: &[u8]) -> Result<(u32, Vec<E>), Corruption> {
    read_frame(E::CHUNK_KIND, bytes, |r| {
        let index = r.u32()?;
        let count = r.count_u32(E::MIN_LEN)?;
        if count == 0 || count > E::CHUNK_ENTRIES {
            return Err(r.error(CorruptionKind::InvalidField(E::COUNT_FIELD)));
        }
        let mut entries = Vec::with_capacity(count.min(E::CHUNK_ENTRIES));
        for _ in 0..count {
            entries.push(E::read_body(r)?);
        }
        Ok((index, entries))
    })
}

impl TopicRecord {
    /// Encodes the record as a self-contained frame: format version 5 when its ledgers have
    /// chunks, every one pinned, and a tail shorter than a fill leaves (the version it would
    /// have otherwise named inside); else version 4 when its cursor table has chunks, every one
    /// pinned, and a tail shorter than a chunk (the layout of the version it would have
    /// otherwise named inside); else version 2 when it lists a journal, 3 when it names a
    /// store, 1 otherwise, every ledger and cursor inline (a table too small for a chunk is
    /// written as earlier builds wrote it).
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let layout = if self.journal.is_some() {
            TOPIC_JOURNAL_VERSION
        } else if self.store_id != 0 {
            TOPIC_STORE_VERSION
        } else {
            FORMAT_VERSION
        };
        let cursors_pinned = self.cursors.pinned();
        let ledgers_pinned = self.ledgers.pinned();
        let inner = if cursors_pinned {
            TOPIC_CHUNKED_VERSION
        } else {
            layout
        };
        let version = if ledgers_pinned {
            TOPIC_LEDGERS_CHUNKED_VERSION
        } else {
            inner
        };
        encode_versioned(Kind::Topic, version, |out| {
            put_u64(out, self.next_ledger_id);
            put_u64(out, self.next_cursor_id);
            if ledgers_pinned {
                out.extend_from_slice(&inner.to_le_bytes());
                put_count(out, self.ledgers.first);
                self.ledgers.write_pins(out);
            }
            self.ledgers.write_inline(out, ledgers_pinned);
            if cursors_pinned {
                out.extend_from_slice(&layout.to_le_bytes());
                self.cursors.write_pins(out);
            }
            self.cursors.write_inline(out, cursors_pinned);
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

    /// Decodes a frame written by [`TopicRecord::encode`], of format version 1 to 5. A record
    /// of version 4 or 5 decodes with its tables' pins and tails: the chunks' entries are
    /// added from their records ([`ChunkTable::add_chunk`]) by the reader.
    ///
    /// # Errors
    /// A [`Corruption`] (kind and offset in `bytes`) when the bytes are not exactly one valid
    /// topic record frame; the caller names the record it read them as.
    pub fn decode(bytes: &[u8]) -> Result<Self, Corruption> {
        let (version, body) = check_frame_of(
            Kind::Topic,
            bytes,
            &[
                FORMAT_VERSION,
                TOPIC_JOURNAL_VERSION,
                TOPIC_STORE_VERSION,
                TOPIC_CHUNKED_VERSION,
                TOPIC_LEDGERS_CHUNKED_VERSION,
            ],
        )?;
        let mut r = Reader::at(body, HEADER_LEN);
        let r = &mut r;
        let next_ledger_id = r.u64()?;
        let next_cursor_id = r.u64()?;
        let (version, mut ledgers) = if version == TOPIC_LEDGERS_CHUNKED_VERSION {
            let inner = r.u16()?;
            if ![
                FORMAT_VERSION,
                TOPIC_JOURNAL_VERSION,
                TOPIC_STORE_VERSION,
                TOPIC_CHUNKED_VERSION,
            ]
            .contains(&inner)
            {
                return Err(r.error(CorruptionKind::InvalidField("topic record layout")));
            }
            let first = r.u32()? as usize;
            (inner, LedgerTable::read_pins(r, first)?)
        } else {
            (version, LedgerTable::default())
        };
        ledgers.read_inline(r, "ledger tail count")?;
        let (version, mut cursors) = if version == TOPIC_CHUNKED_VERSION {
            let layout = r.u16()?;
            if ![FORMAT_VERSION, TOPIC_JOURNAL_VERSION, TOPIC_STORE_VERSION].contains(&layout) {
                return Err(r.error(CorruptionKind::InvalidField("topic record layout")));
            }
            (layout, CursorTable::read_pins(r, 0)?)
        } else {
            (version, CursorTable::default())
        };
        cursors.read_inline(r, "cursor tail count")?;
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

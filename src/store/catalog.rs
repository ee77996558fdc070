//! The store's catalog record: claimed on open, extended by compare-and-set when a topic is
//! created.
//!
//! Owns: the version of the `store` record this handle wrote last, and the journal seals it
//! holds. Must never write the record except by compare-and-set on that version, so a handle
//! that lost the store is refused.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::{CorruptionKind, CorruptionPlace, Error, Result};
use crate::format::crc32;
use crate::format::store::{
    CHUNK_RECORD_PREFIX, CHUNK_TOPICS, Catalog, CatalogSeal, CatalogTopic, ChunkPin, TopicChunk,
    chunk_record, is_chunk_record, list_segment, record_seal, retire_segment,
};
use crate::hashing::IdSet;
use crate::meta::MetaStore;
use crate::storage::Storage;

pub use crate::format::store::STORE_RECORD;

/// The catalog as this handle last wrote it.
///
/// Invariant: `ids` maps the name of every topic of `catalog` to its id (topics are only ever
/// appended to a catalog), so finding a topic costs the same whatever the number of topics.
#[derive(Debug)]
pub struct CatalogHandle {
    meta: Arc<dyn MetaStore>,
    version: u64,
    catalog: Catalog,
    ids: HashMap<String, u64>,
    /// A write failed and the read that should tell whether it took failed too: the version
    /// this handle holds may be below the catalog's by its own write, so a refusal from then on
    /// is this owner's failed I/O ([`Error::PreviousIo`]), not another owner's claim.
    unsure: bool,
}

impl CatalogHandle {
    /// Claims the store: reads the catalog and claims its record ([`MetaStore::claim`]: its
    /// bytes linked under the next version's name, nothing written or synced), so a former
    /// owner's next catalog write and its next ownership check fail from here on. An empty
    /// directory gets an empty catalog, and a catalog of an earlier version its segment list,
    /// by a write (compare-and-set) instead.
    ///
    /// The claim is not durable when it returns: a power cut may take the link back, which
    /// leaves the record at the version read, the same bytes, and every process that held it
    /// gone with the power. What this owner builds on the claim is written with the catalog's
    /// next write, whose directory sync makes the link durable too (the seal of a former
    /// owner's segment, before the open returns; a segment's listing, before a tick writes to
    /// it): docs/format.md, "Store catalog", "Claim and seal".
    pub fn claim(storage: &Arc<dyn Storage>, meta: &Arc<dyn MetaStore>) -> Result<Self> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            match Self::claim_once(storage, meta.clone()) {
                // A former owner's catalog write landed between the read and the link: read
                // the record again (such a writer checks its ownership before each write, so it
                // has at most one in flight).
                Err(Error::Fenced { .. }) if attempts < CLAIM_ATTEMPTS => {}
                claimed => return claimed,
            }
        }
    }

    /// One read of the catalog and its claim (see [`CatalogHandle::claim`]).
    fn claim_once(storage: &Arc<dyn Storage>, meta: Arc<dyn MetaStore>) -> Result<Self> {
        let (expected, catalog) = if let Some((v, bytes)) = meta.get(STORE_RECORD)? {
            let catalog = Catalog::decode(&bytes).map_err(|c| c.in_record(STORE_RECORD))?;
            (Some(v), catalog)
        } else {
            refuse_lost_catalog(storage)?;
            if let Some(other) = storage.list()?.into_iter().find(|n| !is_store_file(n)) {
                return Err(Error::NotAckstore {
                    path: storage.location().into(),
                    reason: format!(
                        "it holds `{other}` but no store catalog (a topic directory opens with \
                         ManagedLedger::open)"
                    ),
                });
            }
            // Topics' directories holding files, none of them a store's topic (above): not a
            // store this open may make its own. Refused before a fresh catalog is written.
            match super::check_unlisted_topics(
                storage.as_ref(),
                &Catalog::default(),
                std::iter::empty(),
            ) {
                Ok(()) => {}
                Err(Error::Corrupted { .. }) => {
                    return Err(Error::NotAckstore {
                        path: storage.location().into(),
                        reason: "it holds a topic directory `t{id}/` of files but no store \
                                 catalog, and no topic record there names a store"
                            .into(),
                    });
                }
                Err(e) => return Err(e),
            }
            let empty = Catalog {
                store_id: random_id(),
                next_topic_id: 1,
                topics: Vec::new(),
                chunks: Vec::new(),
                seals: Vec::new(),
                spaced_from: 1,
                segments: Some(Vec::new()),
                retired_through: 0,
                closed: None,
            };
            (None, empty)
        };
        let mut catalog = catalog;
        // A catalog of version 5 decodes with its tail alone, fewer topics than a chunk: a
        // chunk's worth here is inline in a catalog of an earlier version, and its full chunks
        // move into chunk records with the claim (the remainder stays inline as the tail).
        let upgrade = catalog.segments.is_none() || catalog.topics.len() >= CHUNK_TOPICS;
        if upgrade {
            // A catalog of an earlier version counts every segment file: list them with the
            // claim (a former owner's segment of before the claim is as good as any).
            let mut found: Vec<u64> = storage
                .list_prefix("journal-")?
                .iter()
                .filter_map(|n| crate::journal::parse_segment_name(n))
                .collect();
            found.sort_unstable();
            catalog.segments = Some(found);
        }
        let version = match expected {
            Some(v) if !upgrade => {
                let version = meta.claim(STORE_RECORD, v)?;
                load_chunks(meta.as_ref(), &mut catalog)?;
                version
            }
            _ => {
                // A catalog of version 5 unlisted by hand: its topics are in its chunks.
                load_chunks(meta.as_ref(), &mut catalog)?;
                let next = expected.map_or(1, |v| v + 1);
                // Not the owner yet: a chunk record of that name with other bytes may be the
                // former owner's, about to be pinned (`stage_chunks` answers Fenced). No handle
                // holds `expected` here, though: a handle holds a version it wrote (version 5,
                // a segment list, a tail under a chunk) or claimed (only a catalog that needs no
                // upgrade). Others naming chunks after `next` are opens upgrading the same
                // version, whose chunks hold these bytes; one compare-and-set on it takes.
                catalog.chunks = stage_chunks(meta.as_ref(), &catalog, next, None)?;
                meta.put(STORE_RECORD, expected, &catalog.encode())?
            }
        };
        // Chunk records this version does not pin, named after it or an earlier one, can never
        // be pinned again (each write pins only records named after its own version, above the
        // one it holds): a write cut short or refused left them. One named after a later
        // version is a later owner's, which may have claimed the store since this claim and be
        // writing it, or have pinned it already: it is left to that owner's claims (a record
        // of this owner's own later write is replaced by the write, `put_chunk`).
        for file in chunk_leftovers(storage.as_ref(), &catalog)?
            .into_iter()
            .filter(|file| named_at_most(file, version))
        {
            match storage.remove(&file) {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        let mut ids = HashMap::with_capacity(catalog.topics.len());
        index_topics(&mut ids, &catalog.topics);
        Ok(Self {
            meta,
            version,
            catalog,
            ids,
            unsure: false,
        })
    }

    /// The id of topic `name`, adding it to the catalog (one compare-and-set) if it is new.
    /// For a new topic, `prepare(id, spaced)` runs first (it makes the topic's directory): the
    /// catalog's write then makes its name durable too, and a crash before that write leaves
    /// only an empty directory of the next id, which the next creation reuses.
    pub fn id_of_or_create(
        &mut self,
        name: &str,
        prepare: impl FnOnce(u64, bool) -> Result<()>,
    ) -> Result<u64> {
        if let Some(&id) = self.ids.get(name) {
            return Ok(id);
        }
        let id = self.catalog.next_topic_id;
        prepare(id, self.catalog.is_spaced(id))?;
        // The topic joins the held catalog in place (not a copy of every topic) and leaves it
        // again unless the write took. The id is never reused either way: a write that did not
        // take keeps the old `next_topic_id` only with the topic unrecorded.
        self.catalog.next_topic_id += 1;
        self.catalog.topics.push(CatalogTopic {
            id,
            name: name.to_owned(),
        });
        let (written, took) = self.write_held();
        if took {
            self.ids.entry(name.to_owned()).or_insert(id);
        } else {
            self.catalog.topics.pop();
            self.catalog.next_topic_id -= 1;
        }
        written.map(|()| id)
    }

    /// [`Error::Fenced`] when the catalog is no longer at the version this handle wrote last:
    /// another owner has claimed the store. Costs [`MetaStore::is_current`]: two name lookups
    /// with the default metadata store, whatever the size of the store.
    ///
    /// [`Error::PreviousIo`] when the catalog is below that version: the claim is a link the
    /// open does not sync, and a failed directory sync since (of any record or file written
    /// in the store's directory) took the name back (`meta::forgot_version`). Every topic and
    /// cursor of the store then answers `PreviousIo` (the journal latches it) until the store
    /// is reopened.
    pub(crate) fn check_owner(&self) -> Result<()> {
        if self.meta.is_current(STORE_RECORD, self.version)? {
            return Ok(());
        }
        Err(self.refused(Error::Fenced {
            what: format!("the store catalog `{STORE_RECORD}`"),
        }))
    }

    /// What the refusal `fence` of a check or a write built on the version this handle holds
    /// tells the caller: [`Error::PreviousIo`] when the catalog is below it
    /// (`meta::forgot_version`) or a failed write of this handle may have moved it
    /// ([`Self::unsure`]), otherwise the fence (also when the catalog cannot be read).
    fn refused(&self, fence: Error) -> Error {
        if self.unsure {
            return Error::PreviousIo;
        }
        match crate::meta::forgot_version(self.meta.as_ref(), STORE_RECORD, self.version) {
            Ok(true) => Error::PreviousIo,
            _ => fence,
        }
    }

    /// The catalog as this handle last wrote it.
    pub(crate) fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Records `seal` (segment 0: none) by compare-and-set, replacing any earlier seal of its
    /// segment, and `segments` as the list of segments that count (the journal's after its
    /// open), dropping the seals of segments not in it (deleted by a rollover: a sequence
    /// number is never used again). Writes nothing when that changes nothing.
    ///
    /// A seal at the length the last clean close recorded for the same segment is not
    /// recorded: that segment's writer closed it and no other owner ever appends to a segment
    /// it did not create, so nothing can lie past that length for a later open to ignore, and
    /// every later open stops where the close did (docs/format.md, "Claim and seal").
    pub(crate) fn record_seal(&mut self, seal: CatalogSeal, segments: &[u64]) -> Result<()> {
        let mut next = self.catalog.clone();
        if next.closed != Some(seal) {
            record_seal(&mut next.seals, seal, segments);
        }
        next.segments = Some(segments.to_vec());
        self.write(next)
    }

    /// Records `closed` (the newest journal segment and its synced length at a clean close) by
    /// compare-and-set; nothing when the catalog holds it already.
    pub(crate) fn record_close(&mut self, closed: CatalogSeal) -> Result<()> {
        let mut next = self.catalog.clone();
        next.closed = Some(closed);
        self.write(next)
    }

    /// Lists journal segment `seq` (created by this owner) by compare-and-set.
    pub(crate) fn add_segment(&mut self, seq: u64) -> Result<()> {
        let mut next = self.catalog.clone();
        list_segment(next.segments.get_or_insert_with(Vec::new), seq);
        self.write(next)
    }

    /// Whether the catalog record lists segment `seq`, when that is known: the record still
    /// holds the version this handle wrote last (a failed [`Self::add_segment`] or
    /// [`Self::remove_segment`] never took), so the answer is that version's list. `None`
    /// when the record moved on (the failed write may have taken).
    pub(crate) fn known_listed(&self, seq: u64) -> Result<Option<bool>> {
        let listed = self
            .catalog
            .segments
            .as_ref()
            .is_some_and(|list| list.binary_search(&seq).is_ok());
        let unchanged = matches!(self.meta.get(STORE_RECORD)?, Some((v, _)) if v == self.version);
        Ok(unchanged.then_some(listed))
    }

    /// Drops journal segment `seq` (the oldest listed, whose live state a rollover copied
    /// forward) and its seal from the list by compare-and-set, before its file is deleted, and
    /// records it as retired in the same write.
    pub(crate) fn remove_segment(&mut self, seq: u64) -> Result<()> {
        let mut next = self.catalog.clone();
        retire_segment(
            seq,
            next.segments.as_mut(),
            (&mut next.retired_through, &mut next.closed, &mut next.seals),
        );
        self.write(next)
    }

    /// Writes `next` over the version this handle holds, unless it changes nothing.
    ///
    /// A write that failed other than by being fenced (its directory sync, say) may still have
    /// taken: the record is read back, and if it holds `next` at the next version this handle
    /// adopts it (its ownership check then keeps passing) before the error is returned; if it
    /// still holds this handle's version, nothing changed. Either way the caller learns of the
    /// error, and no single owner is told it is fenced.
    fn write(&mut self, next: Catalog) -> Result<()> {
        if next == self.catalog {
            return Ok(());
        }
        let indexed = self.catalog.topics.len();
        let before = std::mem::replace(&mut self.catalog, next);
        let (written, took) = self.write_held();
        if took {
            // Topics are only ever appended: those past the ones held before are new.
            index_topics(
                &mut self.ids,
                self.catalog.topics.get(indexed..).unwrap_or(&[]),
            );
        } else {
            self.catalog = before;
        }
        written
    }

    /// Writes the catalog this handle holds over the version it wrote last (as
    /// [`Self::write`]), and says whether the write took: then this handle is at the new
    /// version; otherwise the caller puts back the catalog it held before.
    ///
    /// When the tail has filled (a creation brought it to [`CHUNK_TOPICS`] topics), its chunk
    /// record is written first, whole and synced, under the name of the version this write
    /// takes; the catalog's compare-and-set then pins it, with an empty tail. A cut before the
    /// compare-and-set leaves the record unpinned: the next claim removes it and `verify`
    /// calls it a leftover. Every other write is the compare-and-set alone.
    fn write_held(&mut self) -> (Result<()>, bool) {
        let pins = match stage_chunks(
            self.meta.as_ref(),
            &self.catalog,
            self.version + 1,
            Some(self.version),
        ) {
            Ok(pins) => pins,
            Err(e @ Error::Fenced { .. }) => return (Err(self.refused(e)), false),
            Err(e) => return (Err(e), false),
        };
        let held = std::mem::replace(&mut self.catalog.chunks, pins);
        let encoded = self.catalog.encode();
        let (written, took) = match self.meta.put(STORE_RECORD, Some(self.version), &encoded) {
            Ok(v) => {
                self.version = v;
                (Ok(()), true)
            }
            Err(e @ Error::Fenced { .. }) => (Err(self.refused(e)), false),
            Err(e) => {
                let read = self.meta.get(STORE_RECORD);
                let took = matches!(&read,
                    Ok(Some((v, bytes))) if *v == self.version + 1 && *bytes == encoded);
                if took {
                    self.version += 1;
                }
                self.unsure |= read.is_err();
                (Err(e), took)
            }
        };
        if !took {
            self.catalog.chunks = held;
        }
        (written, took)
    }

    /// Topic names in creation order.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        self.catalog.topics.iter().map(|t| t.name.clone()).collect()
    }
}

/// Reads of the catalog before its claim, at most.
const CLAIM_ATTEMPTS: u32 = 8;

/// Writes, under names of catalog version `next`, the chunk records of the full chunks of
/// `catalog`'s topics that its pins do not hold yet (the tail a creation filled, or every full
/// chunk of a catalog of an earlier version), each whole and synced ([`MetaStore::put`]
/// creating it; a name taken already: [`crate::meta::put_chunk`], `owner` the version of the
/// store record this owner holds, `None` for a claim before it owns the store). Returns the
/// pins the catalog's write of `next` carries.
fn stage_chunks(
    meta: &dyn MetaStore,
    catalog: &Catalog,
    next: u64,
    owner: Option<u64>,
) -> Result<Vec<ChunkPin>> {
    let mut pins = catalog.chunks.clone();
    // Pins only ever cover whole chunks of the topics, which are only appended: the pinned
    // chunks hold exactly the first topics.
    for (k, topics) in catalog
        .topics
        .chunks_exact(CHUNK_TOPICS)
        .enumerate()
        .skip(pins.len())
    {
        let index = u32::try_from(k).map_err(|_| Error::LimitExceeded {
            reason: "the store catalog has run out of chunk indexes".into(),
        })?;
        let bytes = TopicChunk::encode(index, topics);
        crate::meta::put_chunk(meta, (STORE_RECORD, owner), &chunk_record(k, next), &bytes)?;
        pins.push(ChunkPin {
            made_at: next,
            crc: crc32(&[&bytes]),
        });
    }
    Ok(pins)
}

/// Reads the topics of `catalog` from the chunk records it pins (none for a catalog of an
/// earlier version, whose topics are inline), each checked against its pin, then the whole
/// list (ids and names unique): what the open refuses and `verify` reports.
///
/// # Errors
/// [`Error::Corrupted`] naming the chunk record that is missing or does not match its pin, or
/// the catalog when the topics of its chunks collide; [`Error::Io`].
pub fn load_chunks(meta: &dyn MetaStore, catalog: &mut Catalog) -> Result<()> {
    if catalog.chunks.is_empty() {
        return Ok(());
    }
    let tail = std::mem::replace(
        &mut catalog.topics,
        Vec::with_capacity(catalog.chunks.len() * CHUNK_TOPICS + CHUNK_TOPICS),
    );
    for k in 0..catalog.chunks.len() {
        let name = chunk_record(k, catalog.chunks[k].made_at);
        let bytes = crate::meta::pinned_chunk(
            meta,
            &name,
            "chunk record (the store catalog pins it, but it is missing)",
        )?;
        catalog
            .add_chunk(k, &bytes)
            .map_err(|c| c.in_record(name))?;
    }
    catalog.topics.extend(tail);
    catalog
        .check_topics()
        .map_err(|c| c.in_record(STORE_RECORD))
}

/// The files of chunk records `catalog` does not pin, and every temporary file of a chunk
/// record: what a creation or an upgrade cut short, refused or superseded left. No read takes
/// them and none can be pinned later (a write pins only records named after the version it
/// takes); the claim removes those named after the version it took or an earlier one (a later
/// one is a newer owner's) and `verify` calls them all leftovers.
///
/// # Errors
/// [`Error::Io`] when the directory cannot be listed.
pub fn chunk_leftovers(storage: &dyn Storage, catalog: &Catalog) -> Result<Vec<String>> {
    let pinned: IdSet<String> = catalog
        .chunks
        .iter()
        .enumerate()
        .map(|(k, pin)| chunk_record(k, pin.made_at))
        .collect();
    Ok(crate::meta::unpinned_chunk_files(
        storage.list_prefix(CHUNK_RECORD_PREFIX)?,
        is_chunk_record,
        &pinned,
    ))
}

/// Whether storage file `file` of a chunk record (or its temporary file) is named after
/// catalog version `version` or an earlier one, or after none a `u64` holds (digits past
/// `u64::MAX`: no owner ever names a record so, nor will, so it is a leftover however it came).
fn named_at_most(file: &str, version: u64) -> bool {
    file.split_once('.')
        .map_or(file, |(record, _)| record)
        .strip_prefix(CHUNK_RECORD_PREFIX)
        .and_then(|rest| rest.split_once('-'))
        .is_some_and(|(_, made_at)| match made_at.parse::<u64>() {
            Ok(made_at) => made_at <= version,
            Err(e) => *e.kind() == std::num::IntErrorKind::PosOverflow,
        })
}

/// Adds `topics` to `ids` by name; the first id of a name stays, as a search of the topics in
/// creation order would find it.
fn index_topics(ids: &mut HashMap<String, u64>, topics: &[CatalogTopic]) {
    for t in topics {
        ids.entry(t.name.clone()).or_insert(t.id);
    }
}

/// Refuses a store directory whose catalog is lost: it reads as absent while the store's
/// files say it existed. An open must not take the directory for an empty one (it would write a
/// fresh catalog over the store, its sweep removing the older, intact versions), nor `verify`
/// for a topic directory (checking nothing). Call only after the catalog's read found no
/// record.
///
/// - A committed version file of the catalog exists ([`lists_catalog`]): its newest version is
///   empty, which the metadata layer reads as a deletion (a tombstone). A store never deletes
///   its catalog, so that emptiness is damage, a version cut to nothing.
/// - No version at all, beside a store's topic ([`super::holds_store_topic`]), in a directory
///   that holds no topic record of its own (a store's directory never does: one that does is a
///   topic's, whatever sits beside it).
///
/// # Errors
/// [`Error::Corrupted`] at the store record: [`CorruptionKind::Truncated`] for the first,
/// [`CorruptionKind::InvalidField`] for the second; [`Error::Io`].
pub(crate) fn refuse_lost_catalog(storage: &Arc<dyn Storage>) -> Result<()> {
    let versions = storage.list_prefix(STORE_RECORD)?;
    let own_topic = || -> Result<bool> {
        Ok(storage
            .list_prefix(crate::ledger::TOPIC_RECORD)?
            .iter()
            .any(|f| crate::meta::file::record_of_file(f) == Some(crate::ledger::TOPIC_RECORD)))
    };
    let kind = if lists_catalog(versions.iter().map(String::as_str)) {
        CorruptionKind::Truncated
    } else if !own_topic()? && super::holds_store_topic(storage)? {
        CorruptionKind::InvalidField(super::UNLISTED_TOPIC_FILES)
    } else {
        return Ok(());
    };
    Err(Error::corrupted_at(
        CorruptionPlace::Record(STORE_RECORD.into()),
        kind,
    ))
}

/// Whether `names` (a directory's listing) holds a committed version file of the store
/// catalog, a deletion's tombstone included: the directory is a store's, whatever those
/// versions read as (a store never deletes its catalog).
pub(crate) fn lists_catalog<'a>(names: impl IntoIterator<Item = &'a str>) -> bool {
    names
        .into_iter()
        .any(|file| crate::meta::file::record_of_file(file) == Some(STORE_RECORD))
}

/// Whether `name` is a file a store directory may hold besides topic files before its catalog
/// exists: the lock file and the files of the catalog record and its chunk records.
fn is_store_file(name: &str) -> bool {
    name == "LOCK" || name.starts_with("store.") || name.starts_with(CHUNK_RECORD_PREFIX)
}

fn random_id() -> u64 {
    use std::hash::BuildHasher;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::collections::hash_map::RandomState::new().hash_one((now, std::process::id())) | 1
}

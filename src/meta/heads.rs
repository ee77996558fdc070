//! What a metadata store that holds its directory's ownership lock remembers of its records:
//! the version each record was at when the store last read or wrote it, so a `get` or `put`
//! finds the current version by looking up two names instead of listing the directory.
//!
//! Owns: that map, and nothing on disk. Every entry is a hint that the store verifies before it
//! relies on it (see `FileMetaStore::owned`): a stale entry costs a listing, never a wrong answer.

use std::sync::Arc;

use crate::hashing::IdMap;
use crate::storage::StorageFile;

/// What the store knows of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Known {
    /// Absent when the directory was listed, and not written by this store since.
    Absent,
    /// Version `v` (a record or a tombstone) was current when last seen.
    At(u64),
    /// Unknown (a legacy record, or a write that failed midway): only a listing tells.
    Unknown,
}

/// What a record file holds, to tell it from another file linked under the same name later:
/// its length and its last four bytes (the CRC of its frame; empty for a tombstone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ident {
    len: u64,
    trailer: [u8; 4],
}

impl Ident {
    /// Bytes of the end of a file its identity holds.
    pub(super) const TRAILER_BYTES: usize = 4;

    /// The identity of a file holding `bytes`.
    pub(super) fn of(bytes: &[u8]) -> Self {
        let at = bytes.len().saturating_sub(Self::TRAILER_BYTES);
        Self::of_end(bytes.len() as u64, &bytes[at..])
    }

    /// The identity of a file of `len` bytes that ends with `end` (its last
    /// [`Self::TRAILER_BYTES`] bytes, or all of them when it holds fewer).
    pub(super) fn of_end(len: u64, end: &[u8]) -> Self {
        let mut trailer = [0; Self::TRAILER_BYTES];
        if let Ok(tail) = <[u8; Self::TRAILER_BYTES]>::try_from(end) {
            trailer = tail;
        }
        Self { len, trailer }
    }
}

/// The map of [`Known`] states, filled from one listing on first use.
#[derive(Debug, Default)]
pub(super) struct Heads {
    /// `None` until the directory was listed.
    records: Option<IdMap<Box<str>, Known>>,
    /// For records at [`Known::At`] whose names this store knows exactly: the versions below
    /// the head that have a file in the live directory, lowest first, as this store last saw
    /// or left them (its listing, or its own write or claim since). Any other change of a
    /// record takes it out. A former owner's stray below the head is not counted, as no read
    /// takes it either.
    below: IdMap<Box<str>, Vec<u64>>,
    /// Per record, the version this store last wrote or claimed, and what its file held then
    /// ([`Ident`]): a version's file never changes, so another file under that name is a
    /// stray another writer linked into the name once it was freed. Kept apart from what
    /// reads find (`read`), so that reading a newer version (another owner's) never makes the
    /// store forget the file of the version it holds.
    written: IdMap<Box<str>, (u64, Ident)>,
    /// Per record, the version this store last read and what its file held.
    read: IdMap<Box<str>, (u64, Ident)>,
    /// Per record whose ownership this store checks ([`MetaStore::is_current`]), a handle of
    /// the file it last found under a version's name holding what it remembered of that
    /// version, so the next check asks the storage whether the name still names that file
    /// ([`Storage::names_file`]) instead of reading it again. One per record, replaced by the
    /// next version's, and let go at this store's own write of the record.
    ///
    /// [`MetaStore::is_current`]: crate::meta::MetaStore::is_current
    /// [`Storage::names_file`]: crate::storage::Storage::names_file
    held: IdMap<Box<str>, Held>,
    /// How many writes or claims of its own this store has recorded ([`Heads::set_ident`]).
    own_writes: u64,
}

/// A handle of the file of `version` of a record, which held `ident` when it was opened.
#[derive(Debug)]
struct Held {
    version: u64,
    ident: Ident,
    file: Arc<dyn StorageFile>,
}

impl Heads {
    /// What the file of `version` of `name` held when this store last wrote or claimed it,
    /// or else last read it, if that is a version it remembers.
    pub(super) fn ident(&self, name: &str, version: u64) -> Option<Ident> {
        [&self.written, &self.read].into_iter().find_map(|held| {
            held.get(name)
                .filter(|(v, _)| *v == version)
                .map(|(_, ident)| *ident)
        })
    }

    /// Remembers what the file of `version` of `name` holds, as this store's own write or
    /// claim (`own`) or as a read (before or after the listing).
    ///
    /// This store's own write lets go of the handle kept for `name` ([`Heads::hold`]): a
    /// record deleted and created again starts at version 1 again, and the file of its
    /// earlier life must not stand for the new one.
    pub(super) fn set_ident(&mut self, name: &str, version: u64, ident: Ident, own: bool) {
        if own {
            self.held.remove(name);
            self.own_writes = self.own_writes.wrapping_add(1);
        }
        let held = if own {
            &mut self.written
        } else {
            &mut self.read
        };
        if let Some(slot) = held.get_mut(name) {
            *slot = (version, ident);
        } else {
            held.insert(name.into(), (version, ident));
        }
    }

    /// The handle this store keeps of the file of `version` of `name`, if that file held
    /// `ident` when it was opened ([`Heads::hold`]).
    pub(super) fn held(
        &self,
        name: &str,
        version: u64,
        ident: Ident,
    ) -> Option<Arc<dyn StorageFile>> {
        self.held
            .get(name)
            .filter(|h| h.version == version && h.ident == ident)
            .map(|h| Arc::clone(&h.file))
    }

    /// How many writes or claims of its own this store has recorded so far.
    pub(super) fn own_writes(&self) -> u64 {
        self.own_writes
    }

    /// Keeps `file`, opened under the name of `version` of `name` and found holding `ident`,
    /// in place of the handle kept for `name` before, unless this store wrote or claimed
    /// anything since `own_writes` ([`Heads::own_writes`], read before the file was opened):
    /// that write may have made the record anew under the same name, and the file opened
    /// before it would stand for a record that no longer is.
    pub(super) fn hold(
        &mut self,
        name: &str,
        version: u64,
        ident: Ident,
        file: Arc<dyn StorageFile>,
        own_writes: u64,
    ) {
        if own_writes != self.own_writes {
            return;
        }
        let held = Held {
            version,
            ident,
            file,
        };
        if let Some(slot) = self.held.get_mut(name) {
            *slot = held;
        } else {
            self.held.insert(name.into(), held);
        }
    }

    /// Whether the directory was listed.
    pub(super) fn is_listed(&self) -> bool {
        self.records.is_some()
    }

    /// Starts from a listing: `highest` holds each record's highest versioned file, and
    /// `unknown` the records that also have a file of an earlier release (its version inside).
    /// `exact` holds, for the records with versioned files only, the versions below the
    /// highest that have a file.
    pub(super) fn fill<'n>(
        &mut self,
        highest: impl IntoIterator<Item = (&'n str, u64)>,
        unknown: impl IntoIterator<Item = String>,
        exact: impl IntoIterator<Item = (&'n str, Vec<u64>)>,
    ) {
        let mut records: IdMap<Box<str>, Known> = highest
            .into_iter()
            .map(|(name, v)| (name.into(), Known::At(v)))
            .collect();
        self.below = exact
            .into_iter()
            .map(|(name, below)| (name.into(), below))
            .collect();
        for name in unknown {
            self.below.remove(name.as_str());
            records.insert(name.into_boxed_str(), Known::Unknown);
        }
        self.records = Some(records);
    }

    /// The versions below `version` that have a file, when `name` is known to be at
    /// `version` with exactly those names beside it (see [`Heads`]'s `below`).
    pub(super) fn names_below(&self, name: &str, version: u64) -> Option<&[u64]> {
        (self.get(name) == Known::At(version))
            .then(|| self.below.get(name).map(Vec::as_slice))
            .flatten()
    }

    /// Records that `name` is at `version` and that its other names are exactly `below`
    /// (versions below `version`, lowest first). Nothing before the listing.
    pub(super) fn set_exact(&mut self, name: &str, version: u64, below: Vec<u64>) {
        if self.records.is_some() {
            self.set(name, Known::At(version));
            self.below.insert(name.into(), below);
        }
    }

    /// What is known of `name`; [`Known::Unknown`] before the listing.
    pub(super) fn get(&self, name: &str) -> Known {
        match &self.records {
            None => Known::Unknown,
            Some(records) => records.get(name).copied().unwrap_or(Known::Absent),
        }
    }

    /// Records what is now known of `name` (nothing before the listing: the listing decides),
    /// and that its names are no longer known exactly ([`Heads::set_exact`]).
    pub(super) fn set(&mut self, name: &str, known: Known) {
        let Some(records) = &mut self.records else {
            return;
        };
        self.below.remove(name);
        match known {
            Known::Absent => {
                records.remove(name);
            }
            known => {
                if let Some(slot) = records.get_mut(name) {
                    *slot = known;
                } else {
                    records.insert(name.into(), known);
                }
            }
        }
    }
}

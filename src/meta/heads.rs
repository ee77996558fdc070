//! What a metadata store that holds its directory's ownership lock remembers of its records:
//! the version each record was at when the store last read or wrote it, so a `get` or `put`
//! finds the current version by looking up two names instead of listing the directory.
//!
//! Owns: that map, and nothing on disk. Every entry is a hint that the store verifies before it
//! relies on it (see `FileMetaStore::owned`): a stale entry costs a listing, never a wrong answer.

use std::collections::HashMap;

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

/// The map of [`Known`] states, filled from one listing on first use.
#[derive(Debug, Default)]
pub(super) struct Heads {
    /// `None` until the directory was listed.
    records: Option<HashMap<Box<str>, Known>>,
}

impl Heads {
    /// Whether the directory was listed.
    pub(super) fn is_listed(&self) -> bool {
        self.records.is_some()
    }

    /// Starts from a listing: `highest` holds each record's highest versioned file, and
    /// `unknown` the records that also have a file of an earlier release (its version inside).
    pub(super) fn fill(
        &mut self,
        highest: impl IntoIterator<Item = (String, u64)>,
        unknown: impl IntoIterator<Item = String>,
    ) {
        let mut records: HashMap<Box<str>, Known> = highest
            .into_iter()
            .map(|(name, v)| (name.into_boxed_str(), Known::At(v)))
            .collect();
        for name in unknown {
            records.insert(name.into_boxed_str(), Known::Unknown);
        }
        self.records = Some(records);
    }

    /// What is known of `name`; [`Known::Unknown`] before the listing.
    pub(super) fn get(&self, name: &str) -> Known {
        match &self.records {
            None => Known::Unknown,
            Some(records) => records.get(name).copied().unwrap_or(Known::Absent),
        }
    }

    /// Records what is now known of `name` (nothing before the listing: the listing decides).
    pub(super) fn set(&mut self, name: &str, known: Known) {
        let Some(records) = &mut self.records else {
            return;
        };
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

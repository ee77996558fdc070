//! The crate's one error type.
//!
//! Owns: every way an ackstore operation can fail, phrased so a broker engineer can act on it.
//! `Io` (the operating system refused) is kept apart from `Corrupted` (bytes on disk are not what
//! ackstore wrote); a torn tail is neither, it is repaired on open. Every corruption is one
//! variant: what is wrong ([`CorruptionKind`]) and where ([`CorruptionPlace`]).
//!
//! Invariant: a variant's message never repeats its `#[source]`; whoever prints the chain adds
//! the causes.

use std::fmt;
use std::path::PathBuf;

use crate::position::Position;

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What is wrong with bytes that failed verification.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CorruptionKind {
    /// A magic number did not match: the file is not an ackstore file of this kind.
    BadMagic,
    /// A format version this build does not know.
    UnsupportedVersion(u32),
    /// A checksum did not match the bytes it covers.
    ChecksumMismatch,
    /// A length field points past the end of the data or above the allowed maximum.
    BadLength,
    /// A field holds a value that is impossible in a valid record.
    InvalidField(&'static str),
    /// The data ends before a record that must be complete.
    Truncated,
    /// Bytes that a record, marker or index lists are not where it lists them (a file,
    /// segment, object or partition that is gone).
    Missing,
    /// A record holds another number of items than the index that lists it recorded.
    CountMismatch {
        /// Items the record holds.
        found: u64,
        /// Items the index lists.
        expected: u64,
    },
}

impl fmt::Display for CorruptionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadMagic => f.write_str("wrong magic number (not an ackstore file of this kind)"),
            Self::UnsupportedVersion(v) => write!(f, "unsupported format version {v}"),
            Self::ChecksumMismatch => f.write_str("checksum mismatch"),
            Self::BadLength => f.write_str("length field out of range"),
            Self::InvalidField(name) => write!(f, "invalid value in field `{name}`"),
            Self::Truncated => f.write_str("record cut short"),
            Self::Missing => f.write_str("listed but not found"),
            Self::CountMismatch { found, expected } => {
                write!(
                    f,
                    "it holds {found} entries where the index lists {expected}"
                )
            }
        }
    }
}

/// Where corrupted bytes were found: the caller that decoded them names the place.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CorruptionPlace {
    /// A byte offset within a ledger file.
    Ledger {
        /// The ledger (file) holding the bad bytes.
        ledger: u64,
        /// Byte offset of the bad record within that ledger file.
        offset: u64,
    },
    /// The payload of a cursor-ledger entry.
    Entry(Position),
    /// A metadata record, by name.
    Record(String),
    /// A byte offset within a segment of a store's cursor journal.
    Journal {
        /// The segment (its sequence number, as in `journal-{segment:016}.seg`).
        segment: u64,
        /// Byte offset of the bad record within the segment.
        offset: u64,
    },
    /// One ack partition of a cursor, keyed by data ledger and chunk.
    Partition {
        /// The data ledger of the partition.
        ledger_id: u64,
        /// The partition's chunk (`entry_id >> 16`: 65,536 entries each).
        chunk: u64,
    },
}

impl CorruptionPlace {
    /// The sentence [`Error::Corrupted`] displays: the place, what is wrong, and what to do.
    fn sentence(&self, kind: &CorruptionKind) -> String {
        match self {
            Self::Ledger { ledger, offset } => format!(
                "ledger {ledger} is corrupted at byte offset {offset}: {kind}; \
                 run `ackstore verify` on the directory and restore the file from a replica or backup"
            ),
            Self::Entry(position) => format!(
                "cursor ledger entry {position} is corrupted: {kind}; \
                 run `ackstore verify` on the directory"
            ),
            Self::Record(record) => format!("metadata record `{record}` is corrupted: {kind}"),
            Self::Journal { segment, offset } => format!(
                "cursor journal segment {segment} is corrupted at byte offset {offset}: {kind}; \
                 run `ackstore verify` on the directory"
            ),
            Self::Partition { ledger_id, chunk } => format!(
                "ack partition {chunk} of ledger {ledger_id} could not be loaded: {kind}; \
                 the cursor's persisted ack state is incomplete, reopen the cursor to recover it \
                 from its last good marker"
            ),
        }
    }
}

/// Every error ackstore returns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The operating system refused an I/O operation.
    #[error("I/O error while trying to {op} `{}`", .path.display())]
    Io {
        /// What ackstore was doing.
        op: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error (not repeated in this error's message).
        #[source]
        source: std::io::Error,
    },
    /// Bytes ackstore wrote failed verification somewhere other than a repairable torn tail.
    #[error("{}", .place.sentence(.kind))]
    Corrupted {
        /// Where the bad bytes are.
        place: CorruptionPlace,
        /// What is wrong.
        kind: CorruptionKind,
    },
    /// An entry or record is larger than the configured maximum; nothing was written.
    #[error("entry of {size} bytes exceeds the maximum of {max} bytes; nothing was written")]
    EntryTooLarge {
        /// Size of the rejected payload.
        size: u64,
        /// The configured maximum.
        max: u64,
    },
    /// An unsealed ledger ends with a torn write and the recovery mode forbids cutting it.
    #[error(
        "ledger {ledger} ends with {dropped_bytes} bytes of a torn write at byte offset {offset} \
         (a crash during unsynced appends); open with RecoveryMode::TolerateTail to cut them \
         back to the last whole entry, or run `ackstore verify` first"
    )]
    TornTail {
        /// The ledger.
        ledger: u64,
        /// Where the last whole entry ends.
        offset: u64,
        /// Bytes after it.
        dropped_bytes: u64,
    },
    /// The named ledger does not exist (never created, or deleted).
    #[error("ledger {0} does not exist")]
    NoSuchLedger(u64),
    /// The requested entry is not in the ledger.
    #[error("entry {0} does not exist")]
    NoSuchEntry(Position),
    /// The requested cursor does not exist.
    #[error("cursor `{name}` does not exist")]
    NoSuchCursor {
        /// The cursor's name.
        name: String,
    },
    /// The ledger is sealed and takes no more writes.
    #[error("ledger {0} is sealed and cannot be appended to")]
    Sealed(u64),
    /// An earlier write or fsync failed; the handle refuses further writes until reopened.
    #[error(
        "an earlier write or fsync failed, so this handle refuses further writes; \
         reopen the directory to recover the durable state"
    )]
    PreviousIo,
    /// Another handle or process already owns the directory.
    #[error(
        "directory `{}` is already opened by another ackstore handle or process; \
         close it first (only one owner at a time)",
        .path.display()
    )]
    Locked {
        /// The directory.
        path: PathBuf,
    },
    /// This handle lost ownership: a newer owner has written since, so this write was refused.
    #[error("this handle has been fenced by a newer owner of `{what}`; its write was refused")]
    Fenced {
        /// What the newer owner owns (a directory, a topic or cursor record).
        what: String,
    },
    /// The path is not an ackstore directory (or file) at all.
    #[error("`{}` is not an ackstore directory: {reason}", .path.display())]
    NotAckstore {
        /// The path.
        path: PathBuf,
        /// Why it is not one.
        reason: String,
    },
    /// A position or value given by the caller is out of range or invalid.
    #[error("invalid argument: {reason}")]
    InvalidArgument {
        /// What is wrong with it, as a sentence.
        reason: String,
    },
    /// The handle has been closed.
    #[error("the handle has been closed")]
    Closed,
    /// A limit was hit: a configured one whose configuration asks for an error instead of a
    /// cut, or one of the format's (the largest journal record a reader accepts).
    #[error("limit exceeded: {reason}")]
    LimitExceeded {
        /// Which limit and what to change, as a sentence.
        reason: String,
    },
    /// A data ledger the topic record lists has no file.
    #[error(
        "data ledger {ledger} is listed in the topic record of `{}` but its file is missing; \
         restore it from a backup or replica",
        .dir.display()
    )]
    MissingLedger {
        /// The missing ledger.
        ledger: u64,
        /// The topic directory.
        dir: PathBuf,
    },
    /// A sealed data ledger holds another number of entries than the topic record says were
    /// sealed into it.
    #[error(
        "data ledger {ledger} of `{}` holds {found} entries but {recorded} were sealed into \
         it; restore the ledger file from a backup or replica",
        .dir.display()
    )]
    LedgerMismatch {
        /// The ledger.
        ledger: u64,
        /// Entries the topic record lists.
        recorded: u64,
        /// Entries the file holds.
        found: u64,
        /// The topic directory.
        dir: PathBuf,
    },
    /// The directory is a topic of a store (or a store's own directory): only the store opens
    /// it, whether it runs now or not. Told by the directory's place (its parent holds a store
    /// catalog) or by its topic record, which names its store wherever the directory is found.
    #[error(
        "`{}` belongs to {store}; open it with Store::open and Store::topic, not as a topic of \
         its own",
        .path.display()
    )]
    OwnedByStore {
        /// The directory asked for.
        path: PathBuf,
        /// The store, as a phrase: the store's directory when the directory's place names
        /// it, or the store's id when the topic record does.
        store: String,
    },
    /// The operation is not supported in this configuration.
    #[error("unsupported: {what}")]
    Unsupported {
        /// What is not supported, as a sentence.
        what: String,
    },
}

impl Error {
    /// Whether this is an [`Error::Io`] of a file or name that does not exist (`ENOENT`): a
    /// removal of what is already gone, or a read of what a removal took.
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// Builds an [`Error::Io`].
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Builds an [`Error::Corrupted`] at byte `offset` of ledger file `ledger`.
    #[must_use]
    pub fn corrupted(ledger: u64, offset: u64, kind: CorruptionKind) -> Self {
        Self::Corrupted {
            place: CorruptionPlace::Ledger { ledger, offset },
            kind,
        }
    }

    /// This error's message followed by each of its sources', for a log line where nobody walks
    /// the chain.
    pub(crate) fn with_sources(&self) -> String {
        let mut out = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            out.push_str(": ");
            out.push_str(&cause.to_string());
            source = cause.source();
        }
        out
    }

    /// Builds an [`Error::Corrupted`] at `place`.
    #[must_use]
    pub fn corrupted_at(place: CorruptionPlace, kind: CorruptionKind) -> Self {
        Self::Corrupted { place, kind }
    }
}

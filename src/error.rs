//! The crate's one error type.
//!
//! Owns: every way an ackstore operation can fail, phrased so a broker engineer can act on it.
//! `Io` (the operating system refused) is kept apart from `Corrupted` (bytes on disk are not what
//! ackstore wrote); a torn tail is neither, it is repaired on open.

use std::fmt;

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
        }
    }
}

/// Every error ackstore returns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The operating system refused an I/O operation.
    #[error("I/O error while trying to {op} `{path}`: {source}")]
    Io {
        /// What ackstore was doing.
        op: &'static str,
        /// The file or directory concerned.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Bytes on disk failed verification somewhere other than a repairable torn tail.
    #[error(
        "ledger {ledger} is corrupted at byte offset {offset}: {kind}; \
         run `ackstore verify` on the directory and restore the file from a replica or backup"
    )]
    Corrupted {
        /// The ledger (file) holding the bad bytes.
        ledger: u64,
        /// Byte offset of the bad record within that ledger file.
        offset: u64,
        /// What is wrong.
        kind: CorruptionKind,
    },
    /// A metadata record failed verification.
    #[error("metadata record `{record}` is corrupted: {kind}")]
    CorruptedMeta {
        /// The record's name.
        record: String,
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
    #[error("cursor `{0}` does not exist")]
    NoSuchCursor(String),
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
        "directory `{0}` is already opened by another ackstore handle or process; \
         close it first (only one owner at a time)"
    )]
    Locked(String),
    /// This handle lost ownership: a newer owner has written since, so this write was refused.
    #[error("this handle has been fenced by a newer owner of `{0}`; its write was refused")]
    Fenced(String),
    /// The path is not an ackstore directory (or file) at all.
    #[error("`{0}` is not an ackstore directory: {1}")]
    NotAckstore(String, String),
    /// A position or value given by the caller is out of range or invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The handle has been closed.
    #[error("the handle has been closed")]
    Closed,
    /// A configured limit was hit and the configuration asks for an error instead of a cut.
    #[error("limit exceeded: {0}")]
    LimitExceeded(String),
    /// An ack partition that the cursor's index lists could not be loaded intact from its store.
    #[error(
        "ack partition {chunk} of ledger {ledger_id} could not be loaded: {reason}; \
         the cursor's persisted ack state is incomplete, reopen the cursor to recover it \
         from its last good marker"
    )]
    BadPartition {
        /// The data ledger of the partition.
        ledger_id: u64,
        /// The partition's chunk (`entry_id >> PARTITION_BITS`).
        chunk: u64,
        /// What went wrong.
        reason: String,
    },
    /// A data ledger the topic record lists has no file.
    #[error(
        "data ledger {ledger} is listed in the topic record of `{dir}` but its file is missing; \
         restore it from a backup or replica"
    )]
    MissingLedger {
        /// The missing ledger.
        ledger: u64,
        /// The topic directory.
        dir: String,
    },
    /// A sealed data ledger holds another number of entries than the topic record says were
    /// sealed into it.
    #[error(
        "data ledger {ledger} of `{dir}` holds {found} entries but {recorded} were sealed into \
         it; restore the ledger file from a backup or replica"
    )]
    LedgerMismatch {
        /// The ledger.
        ledger: u64,
        /// Entries the topic record lists.
        recorded: u64,
        /// Entries the file holds.
        found: u64,
        /// The topic directory.
        dir: String,
    },
    /// The operation is not supported in this configuration.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// An entry of a cursor ledger failed verification.
    #[error(
        "cursor ledger entry {position} is corrupted: {kind}; \
         run `ackstore verify` on the directory"
    )]
    CorruptedEntry {
        /// The cursor ledger and entry.
        position: Position,
        /// What is wrong.
        kind: CorruptionKind,
    },
}

impl Error {
    /// Builds an [`Error::Io`].
    pub fn io(op: &'static str, path: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Builds an [`Error::Corrupted`].
    #[must_use]
    pub fn corrupted(ledger: u64, offset: u64, kind: CorruptionKind) -> Self {
        Self::Corrupted {
            ledger,
            offset,
            kind,
        }
    }
}

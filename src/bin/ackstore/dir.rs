//! Opening an existing ackstore directory for the read-only subcommands.

use std::path::Path;
use std::sync::Arc;

use ackstore::Storage;
use ackstore::internals::log::parse_ledger_file_name;
use ackstore::internals::meta::record_of_file;
use ackstore::{Error, Result};

use crate::target::StorageArgs;

/// How findings name the topic's metadata record.
pub const TOPIC_FILE: &str = "topic.meta";

/// Opens `path` (a directory, or a RADOS namespace with `--storage rados`) without creating,
/// locking or changing anything, and checks that it holds an ackstore topic (a topic record or
/// at least one ledger file) or a store (its catalog).
pub fn open_existing(path: &Path, target: &StorageArgs) -> Result<Arc<dyn Storage>> {
    let storage = target.open(path, false)?;
    let names = storage.list()?;
    let ours = names.iter().any(|n| {
        record_of_file(n) == Some("topic")
            || record_of_file(n) == Some(ackstore::internals::store::STORE_RECORD)
            || parse_ledger_file_name(n).is_some()
    });
    if !ours {
        return Err(Error::NotAckstore {
            path: path.to_path_buf(),
            reason: "it holds neither a topic record (topic.meta), a store catalog (store.meta) \
                     nor any ledger file"
                .into(),
        });
    }
    Ok(storage)
}

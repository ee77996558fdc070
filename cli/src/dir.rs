//! Opening an existing ackstore directory for the read-only subcommands.

use std::path::Path;
use std::sync::Arc;

use ackstore::Storage;
use ackstore::{Error, Result};

use crate::target::StorageArgs;

/// Opens `path` (a directory, or a RADOS namespace with `--storage rados`) without creating,
/// locking or changing anything, and checks that it holds an ackstore topic (a topic record or
/// at least one ledger file) or a store (its catalog).
pub fn open_existing(path: &Path, target: &StorageArgs) -> Result<Arc<dyn Storage>> {
    let storage = target.open(path, false)?;
    if !ackstore::check::holds_ackstore(&storage)? {
        return Err(Error::NotAckstore {
            path: path.to_path_buf(),
            reason: "it holds neither a topic record (topic.meta), a store catalog (store.meta), \
                     a store's topic nor any ledger file"
                .into(),
        });
    }
    Ok(storage)
}

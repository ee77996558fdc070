//! Where a subcommand's topic lives: a local directory (the default) or a namespace of a Ceph
//! RADOS pool (`--storage rados --ceph-conf PATH --pool NAME`, in a build with the `rados`
//! feature). The positional directory argument names the namespace then.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ackstore::{Error, Result};
use ackstore::{FileStorage, Storage};
use clap::Args;

/// The storage backends the command can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// Real files in a local directory.
    Files,
    /// Objects in a namespace of a Ceph RADOS pool (a build with the `rados` feature).
    Rados,
}

/// The storage options shared by `perf`, `inspect` and `verify`.
#[derive(Debug, Clone, Args)]
pub struct StorageArgs {
    /// Where the topic lives: `files` (a directory) or `rados` (the directory argument is then a
    /// namespace of `--pool`).
    #[arg(long, value_enum, default_value = "files")]
    pub storage: Backend,
    /// Ceph configuration file of the cluster (with `--storage rados`; default: `$CEPH_CONF`).
    #[arg(long)]
    pub ceph_conf: Option<PathBuf>,
    /// RADOS pool (with `--storage rados`).
    #[arg(long, default_value = "ackstore")]
    pub pool: String,
}

impl StorageArgs {
    /// Opens the storage named `dir`: the directory itself, or the namespace of that name. A
    /// directory is created only when `create` is true (a namespace exists as soon as an object
    /// is written in it).
    pub fn open(&self, dir: &Path, create: bool) -> Result<Arc<dyn Storage>> {
        match self.storage {
            Backend::Files => Ok(Arc::new(FileStorage::open(dir, create)?)),
            Backend::Rados => self.open_rados(dir),
        }
    }

    #[cfg(feature = "rados")]
    fn open_rados(&self, dir: &Path) -> Result<Arc<dyn Storage>> {
        let conf = self
            .ceph_conf
            .clone()
            .or_else(|| std::env::var_os("CEPH_CONF").map(PathBuf::from))
            .ok_or_else(|| Error::InvalidArgument {
                reason: "--storage rados needs --ceph-conf PATH (or CEPH_CONF)".into(),
            })?;
        let namespace = dir.to_str().ok_or_else(|| Error::InvalidArgument {
            reason: format!("`{}` is not a valid namespace name", dir.display()),
        })?;
        Ok(Arc::new(ackstore::RadosStorage::connect(
            conf, &self.pool, namespace,
        )?))
    }

    #[cfg(not(feature = "rados"))]
    #[expect(clippy::unused_self, reason = "the same signature as with the feature")]
    fn open_rados(&self, _dir: &Path) -> Result<Arc<dyn Storage>> {
        Err(Error::InvalidArgument {
            reason: "this ackstore was built without the `rados` feature; \
                     rebuild with `--features rados` to use --storage rados"
                .into(),
        })
    }

    /// Removes every object of a namespace the command created for itself (`perf` without
    /// `--keep`); a directory is removed by its owner.
    pub fn remove_all(storage: &dyn Storage) -> Result<()> {
        for name in storage.list()? {
            storage.remove(&name)?;
        }
        Ok(())
    }
}

//! What can go wrong reaching the store, each error naming the path or URL it concerns.

use std::path::{Path, PathBuf};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A local file or directory could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The object store refused or failed a request.
    #[error("{url}: {source}")]
    Remote {
        url: String,
        #[source]
        source: object_store::Error,
    },
    /// A Parquet file could not be encoded or decoded.
    #[error("{}: {source}", path.display())]
    Parquet {
        path: PathBuf,
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A table's Delta log could not be read or committed to.
    #[error("{}: {source}", path.display())]
    Delta {
        path: PathBuf,
        #[source]
        source: Box<deltalake_core::DeltaTableError>,
    },
    /// Another writer committed to the table after the version this commit was based on.
    #[error("{}: another writer committed since version {read_version:?}; re-read and retry", path.display())]
    Conflict { path: PathBuf, read_version: Option<u64> },
    /// The place is not (or cannot be) a store: not a directory, someone else's files, locked.
    #[error("{}: {reason}", path.display())]
    Refused { path: PathBuf, reason: String },
    /// The `--store` argument itself is wrong.
    #[error(transparent)]
    Location(#[from] crate::location::LocationError),
    /// A broken invariant in gpuledger itself.
    #[error(transparent)]
    Internal(#[from] Bug),
}

/// What every gpuledger error that is gpuledger's own fault says after what went wrong.
pub const BUG_HINT: &str = "This is a gpuledger bug: please report it with the command that was run";

/// A broken invariant in gpuledger itself, never the input's or the environment's fault. Every
/// crate's error type carries it (as its `Internal` variant) rather than panicking, so a long run
/// fails with one clear line, worded the same wherever the bug shows.
#[derive(Debug, thiserror::Error)]
#[error("internal error: {0}. {BUG_HINT}")]
pub struct Bug(pub String);

impl Bug {
    pub fn new(what: impl Into<String>) -> Bug {
        Bug(what.into())
    }
}

impl Error {
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Error {
        Error::Io { path: path.as_ref().to_path_buf(), source }
    }

    pub fn internal(what: impl Into<String>) -> Error {
        Error::Internal(Bug::new(what))
    }

    /// The place cannot be used as a store, or holds something a store should not: `reason` says
    /// what.
    pub fn refused(path: impl Into<PathBuf>, reason: impl Into<String>) -> Error {
        Error::Refused { path: path.into(), reason: reason.into() }
    }

    /// The path or URL the error concerns, where it has one.
    pub fn path(&self) -> Option<PathBuf> {
        match self {
            Error::Io { path, .. } | Error::Parquet { path, .. } | Error::Refused { path, .. } | Error::Delta { path, .. } | Error::Conflict { path, .. } => Some(path.clone()),
            Error::Remote { url, .. } => Some(PathBuf::from(url)),
            Error::Location(_) | Error::Internal(_) => None,
        }
    }
}

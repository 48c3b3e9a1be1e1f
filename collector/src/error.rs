//! Errors that stop an operation (as opposed to [`crate::diag`] reports about bad input, which
//! never do).

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing a file or directory failed (environment).
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Parquet encoding or decoding failed.
    #[error("{}: {source}", path.display())]
    Parquet {
        path: PathBuf,
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// Building an Arrow batch failed: a bug in gpuledger (the schema and the builder disagree).
    #[error("internal error building table {table}: {source} (this is a gpuledger bug, please report it)")]
    Arrow {
        table: &'static str,
        #[source]
        source: arrow::error::ArrowError,
    },
    /// The store directory holds something that is not a gpuledger store.
    #[error("store {}: {reason}", path.display())]
    Store { path: PathBuf, reason: String },
    /// An input path cannot be used at all (does not exist, unreadable directory).
    #[error("{}: {reason}", path.display())]
    Input { path: PathBuf, reason: String },
    /// Reaching the store's files failed (I/O, object storage).
    #[error("store {0}")]
    StoreFiles(#[from] gpuledger_store::Error),
    /// A broken invariant: gpuledger's own bug, never the input's or the environment's fault.
    /// Returned instead of panicking, so a long run fails with a message that says what to do.
    #[error("internal error: {0}. This is a gpuledger bug: please report it with the command that was run")]
    Internal(String),
}

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
}

#[cfg(test)]
mod internal_tests {
    use super::Error;

    #[test]
    fn internal_errors_say_they_are_a_bug() {
        let e = Error::Internal("a table without its schema".into()).to_string();
        assert_eq!(e, "internal error: a table without its schema. This is a gpuledger bug: please report it with the command that was run");
    }
}

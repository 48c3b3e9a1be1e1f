//! Errors that stop an operation (as opposed to [`crate::diag`] reports about bad input, which
//! never do).

use std::path::PathBuf;

use gpuledger_store::Bug;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Building an Arrow batch failed: a bug in gpuledger (the schema and the builder disagree).
    #[error("internal error: building table {table}: {source}. {}", gpuledger_store::BUG_HINT)]
    Arrow {
        table: &'static str,
        #[source]
        source: arrow::error::ArrowError,
    },
    /// An input path cannot be used at all (does not exist, unreadable directory).
    #[error("{}: {reason}", path.display())]
    Input { path: PathBuf, reason: String },
    /// A file or directory could not be read or written, the store cannot be used, or reaching
    /// its files failed: the store crate's errors, each naming the path or URL.
    #[error("store {0}")]
    Store(#[from] gpuledger_store::Error),
    /// A broken invariant: gpuledger's own bug (see [`Bug`]).
    #[error(transparent)]
    Internal(#[from] Bug),
}

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Store(gpuledger_store::Error::Io { path: path.into(), source })
    }

    /// The store holds something the collector cannot use (see [`gpuledger_store::Error::refused`]).
    pub fn refused(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Error::Store(gpuledger_store::Error::refused(path, reason))
    }

    pub fn internal(what: impl Into<String>) -> Self {
        Error::Internal(Bug::new(what))
    }
}

#[cfg(test)]
mod internal_tests {
    use super::Error;

    #[test]
    fn internal_errors_say_they_are_a_bug() {
        let e = Error::internal("a table without its schema").to_string();
        assert_eq!(e, "internal error: a table without its schema. This is a gpuledger bug: please report it with the command that was run");
    }
}

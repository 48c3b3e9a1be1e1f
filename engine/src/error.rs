//! Errors of the ledger, grouped by who is at fault: the store, the query, the output.

use std::path::PathBuf;

use gpuledger_store::Bug;

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn internal(what: impl Into<String>) -> Error {
        Error::Internal(Bug::new(what))
    }

    /// The store holds something the ledger cannot use (see [`gpuledger_store::Error::refused`]).
    pub fn refused(path: impl Into<PathBuf>, reason: impl Into<String>) -> Error {
        Error::Store(gpuledger_store::Error::refused(path, reason))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store cannot be used, or reaching its files failed (I/O, object storage): the store
    /// crate's errors, each naming the path or URL.
    #[error("store {0}")]
    Store(#[from] gpuledger_store::Error),
    /// The store holds nothing for what was asked (a month without data, an empty store).
    #[error("{0}")]
    NoData(String),
    /// Registering a store table with DataFusion failed.
    #[error("registering table {table}: {source}")]
    Register {
        table: &'static str,
        #[source]
        source: datafusion::error::DataFusionError,
    },
    /// Planning or running a query failed (usually the query's fault).
    #[error("query `{sql}`: {source}")]
    Query {
        sql: String,
        #[source]
        source: datafusion::error::DataFusionError,
    },
    /// The memory limit leaves too little for the smallest unit of work.
    #[error("the memory limit is too small: {what} need more than it leaves, even alone (raise --memory-limit): {source}")]
    Memory {
        what: String,
        #[source]
        source: Box<Error>,
    },
    /// A Ballista scheduler or executor could not start or stopped.
    #[error("ballista {0}")]
    Engine(String),
    /// Formatting results failed.
    #[error("formatting results: {0}")]
    Output(#[from] arrow::error::ArrowError),
    /// A broken invariant: gpuledger's own bug (see [`Bug`]).
    #[error(transparent)]
    Internal(#[from] Bug),
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

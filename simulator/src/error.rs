//! The simulator's error type: bad configuration, or a file that could not be written.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The configuration cannot describe a cluster (zero days, zero interval, ...).
    #[error("invalid simulator configuration: {0}")]
    Config(String),
    /// Writing, renaming or creating a file or directory failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Writing a file whole failed.
    #[error(transparent)]
    File(#[from] gpuledger_store::Error),
    /// Serialising an object failed (a bug: every object is built from plain values).
    #[error("{}: serialising {what}: {reason}", path.display())]
    Serialize {
        path: PathBuf,
        what: String,
        reason: String,
    },
    /// The consumer the DCGM text was handed to ([`crate::DcgmSink`]) failed.
    #[error("{0}")]
    Sink(String),
    /// A broken invariant inside the simulator (see [`gpuledger_store::Bug`]).
    #[error(transparent)]
    Internal(#[from] gpuledger_store::Bug),
}

pub type Result<T, E = SimError> = std::result::Result<T, E>;

impl SimError {
    pub fn internal(what: impl Into<String>) -> SimError {
        SimError::Internal(gpuledger_store::Bug::new(what))
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        SimError::Io {
            path: path.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_error_names_the_path() {
        let e = SimError::io("/x/y.prom", std::io::Error::other("disk full"));
        assert_eq!(e.to_string(), "/x/y.prom: disk full");
    }
}

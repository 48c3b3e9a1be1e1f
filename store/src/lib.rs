//! The gpuledger store as a place: where it is, how it is laid out, and every read and write of
//! its files, on a directory or in object storage.
//!
//! Sources -> collector -> **store** -> ledger. The collector writes raw tables and the ledger
//! writes derived ones through this crate; neither spells a store path or opens a store file of its
//! own. What the rows mean is not this crate's business: table schemas are `gpuledger-schemas`',
//! deduplication is the collector's, SQL is the ledger's.
//!
//! ```
//! use gpuledger_store::{StoreLocation, layout};
//! let store = StoreLocation::parse("memory://doc-example/fleet").unwrap();
//! assert_eq!(store.join(&layout::derived_rel("chargeback_monthly")), "memory://doc-example/fleet/ledger/chargeback_monthly.parquet");
//! ```

// Tests may unwrap: a panic is how they fail.
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod atomic;
pub mod delta;
mod error;
mod files;
pub mod layout;
mod location;
mod parquet_file;

pub use atomic::AtomicFile;
pub use delta::{CommitKind, DataFile, Ensured, Snapshot, Vacuumed};
pub use error::{BUG_HINT, Bug, Error, Result};
pub use files::{BlockingStore, list_local};
pub use location::{LocationError, RemoteStore, StoreLocation, build_store};
pub use parquet_file::{derived_properties, write_parquet, write_properties, write_table_file};

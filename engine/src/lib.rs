//! The plumbing the accounting runs on, beneath `gpuledger-ledger`: what a DataFusion session
//! needs to read the store and run the SQL in `queries/`, in this process or on a Ballista
//! cluster, within a memory limit.
//!
//! ```text
//! ledger (the accounting: which SQL runs when, what it keeps)
//!   └─ engine: sessions and memory (session, pool), tables kept between steps (kept), raw
//!      tables as Delta snapshots (snapshot), the SQL functions (udf), running a statement
//!      (exec), reading results (decode), compaction, Ballista
//! ```
//!
//! Nothing here knows an accounting rule: the modules take SQL and tables and hand back rows.

// Tests may unwrap: a panic is how they fail.
#![cfg_attr(test, allow(clippy::unwrap_used))]

#[cfg(feature = "ballista")]
pub mod ballista;
// Built without the distributed engine: the same API, answering that it is not there.
#[cfg(not(feature = "ballista"))]
#[path = "no_ballista.rs"]
pub mod ballista;
pub mod compact;
pub mod decode;
pub mod error;
pub mod exec;
pub mod files;
pub mod kept;
pub mod memory;
pub mod pool;
pub mod session;
pub mod snapshot;
pub mod store;
pub mod udf;

pub use error::{Error, Result};
pub use session::{BALLISTA_BUILT, BALLISTA_NOT_BUILT, Engine, EngineSession, ExecutorOptions, MemoryStats};

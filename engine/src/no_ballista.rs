//! The distributed engine's API in a build without the `ballista` feature: every entry point
//! answers that this build does not have it, and how to get one that does.
//!
//! Ballista's client, scheduler and executor bring 28 crates (Arrow Flight, gRPC, protobuf code
//! generation) into a cold build; a newcomer's first build and most deployments run the ledger in
//! process. `cargo install --path . --features ballista` builds them in.

use std::net::SocketAddr;

use datafusion::prelude::SessionContext;

use crate::session::BALLISTA_NOT_BUILT as NOT_BUILT;
use crate::error::{Error, Result};

pub use crate::session::ExecutorOptions;

/// Fails: no Ballista client in this build.
pub async fn client_session(_scheduler: &str) -> Result<SessionContext> {
    Err(Error::Engine(NOT_BUILT.into()))
}

/// Fails: no Ballista scheduler in this build.
pub async fn run_scheduler(_listen: SocketAddr) -> Result<()> {
    Err(Error::Engine(NOT_BUILT.into()))
}

/// Fails: no Ballista executor in this build.
pub async fn run_executor(_o: ExecutorOptions) -> Result<()> {
    Err(Error::Engine(NOT_BUILT.into()))
}

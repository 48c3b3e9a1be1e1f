//! The collecting half of gpuledger: sources -> Arrow batches -> the Parquet store.
//!
//! ```text
//!  DCGM text (.prom/.txt) ─┐
//!  Prometheus API JSON ────┼─> tables::samples ─┐
//!  kubectl JSON/YAML/watch ┴─> tables::k8s ─────┴─> store (Hive-partitioned Parquet) ─> ledger
//! ```
//!
//! Readers never stop a run on bad input: they keep the good rows and record
//! [`diag::Diagnostic`]s that name file, line or byte and the reason. The store writer never
//! knows which source fed it. This crate must never read back the store to compute anything:
//! that is the ledger's job (it only reads keys back, to skip facts already stored).

pub mod backfill;
pub mod backoff;
pub mod diag;
pub mod error;
pub mod feed;
pub mod ingest;
pub mod labels;
pub mod live;
pub mod object;
pub mod sources;
pub mod store;
pub mod tables;

pub use diag::{Diagnostic, Diagnostics, Position};
pub use error::{Error, Result};

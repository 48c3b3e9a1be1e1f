//! Builders that turn what the sources read into Arrow batches shaped by `gpuledger-schemas`.

pub mod k8s;
pub mod samples;

use arrow::record_batch::RecordBatch;
use gpuledger_schemas::Table;

/// A finished batch and the table it belongs to.
pub type TableBatch = (&'static Table, RecordBatch);

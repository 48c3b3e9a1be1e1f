//! Readers of the capture formats of docs/accounting.md ("Capture directories") and of what the live
//! collector and the backfill fetch. Each is a [`Source`]: it turns one input's bytes into
//! records plus diagnostics ([`Source::parse`]), and only then are the records loaded into
//! [`crate::tables`] ([`Source::load`]). No source writes the store.

use std::collections::BTreeMap;
use std::path::Path;

use crate::diag::Diagnostics;

pub mod dcgm_text;
pub mod kubernetes_file;
pub mod prometheus_api;

pub use dcgm_text::DcgmText;
pub use kubernetes_file::KubernetesFile;
pub use prometheus_api::PrometheusApi;

/// Where one input came from.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    /// Names the input in diagnostics: a file path, an exporter URL, a query and its range.
    pub path: &'a Path,
    /// The file's modification time (unix milliseconds), for inputs that are files.
    pub modified_ms: Option<i64>,
    /// When the collector sent the request that answered with the input (unix milliseconds).
    pub fetched_ms: Option<i64>,
}

impl<'a> Origin<'a> {
    /// A file, with its modification time if known.
    pub fn file(path: &'a Path, modified_ms: Option<i64>) -> Self {
        Origin { path, modified_ms, fetched_ms: None }
    }

    /// An answer to a request sent at `fetched_ms`.
    pub fn fetched(path: &'a Path, fetched_ms: i64) -> Self {
        Origin { path, modified_ms: None, fetched_ms: Some(fetched_ms) }
    }
}

/// What loading one input's records added to the tables, for run summaries.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// Metric samples (one value of one series at one time).
    pub samples: u64,
    /// Of those, DCGM blank sentinels stored as null.
    pub blank: u64,
    /// Object versions, by kind.
    pub objects: BTreeMap<String, u64>,
}

/// One kind of input. Parsing never touches the tables, and loading never looks at the bytes:
/// the records are the only thing between them.
pub trait Source {
    /// What one input parses into.
    type Records;
    /// The table builder the records are loaded into.
    type Tables;

    /// The component name used in logs and metrics (`dcgm_file`, `dcgm_scrape`, ...).
    fn name(&self) -> &'static str;

    /// Bytes -> records. Bad lines, points or objects are reported to `diags` and left out.
    fn parse(&mut self, bytes: &[u8], origin: &Origin<'_>, diags: &mut Diagnostics) -> Self::Records;

    /// Records -> rows of `tables`. What the tables refuse is reported to `diags`.
    fn load(&mut self, records: Self::Records, tables: &mut Self::Tables, origin: &Origin<'_>, diags: &mut Diagnostics) -> Loaded;

    /// [`Source::parse`], then [`Source::load`].
    fn read(&mut self, bytes: &[u8], origin: &Origin<'_>, tables: &mut Self::Tables, diags: &mut Diagnostics) -> Loaded {
        let records = self.parse(bytes, origin, diags);
        self.load(records, tables, origin, diags)
    }
}
